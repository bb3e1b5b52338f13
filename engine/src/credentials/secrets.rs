//! [`KeychainSecrets`]: where running blocks get their credentials.

use std::sync::{Arc, Mutex, PoisonError};

use agentloom_core::{Secret, SecretError, SecretSource};

use super::{CredentialError, CredentialStore, OAuthTokens, StoredSecret, oauth, unix_now};

/// Secrets for runs: `AGENTLOOM_SECRET_<NAME>` first (headless runs), then the keychain.
/// For an OAuth credential it gives the access token, refreshed first when it is about to
/// expire; a rotated refresh token is stored back.
pub struct KeychainSecrets {
    store: Arc<CredentialStore>,
    /// One refresh at a time, so that a rotated refresh token is never used twice.
    refresh_lock: Mutex<()>,
    read_env: bool,
}

impl KeychainSecrets {
    pub fn new(store: Arc<CredentialStore>) -> Self {
        Self {
            store,
            refresh_lock: Mutex::new(()),
            read_env: true,
        }
    }

    /// Ignores `AGENTLOOM_SECRET_*` variables (the keychain only).
    #[must_use]
    pub fn keychain_only(mut self) -> Self {
        self.read_env = false;
        self
    }

    pub fn store(&self) -> &Arc<CredentialStore> {
        &self.store
    }

    /// Refreshes OAuth credential `name` now (e.g. after a 401), stores the new tokens and
    /// returns the new access token.
    pub fn force_refresh(&self, name: &str) -> Result<Secret, SecretError> {
        let _guard = self
            .refresh_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let fail = |e: CredentialError| e.into_secret_error(name);
        match self.store.get(name).map_err(fail)? {
            StoredSecret::OAuth(tokens) => self.refresh_and_store(name, &tokens).map_err(fail),
            StoredSecret::ApiKey { .. } => Err(SecretError::Unavailable {
                detail: format!("credential `{name}` is an API key, which cannot be refreshed"),
                hint: "replace it with `agentloom credentials add`".to_owned(),
            }),
        }
    }

    fn refresh_and_store(
        &self,
        name: &str,
        tokens: &OAuthTokens,
    ) -> Result<Secret, CredentialError> {
        let fresh = block_on(oauth::refresh(tokens))?.map_err(|e| match e {
            CredentialError::OAuth(message) => CredentialError::OAuth(format!(
                "{message}; sign in again with `{}`",
                login_command(name, &tokens.provider)
            )),
            other => other,
        })?;
        self.store.put(name, &StoredSecret::OAuth(fresh.clone()))?;
        tracing::info!(credential = name, "OAuth token refreshed");
        let hosts = self.store.hosts(name, &fresh.provider)?;
        Ok(Secret::new(fresh.access_token).bound_to(hosts))
    }

    fn keychain_secret(&self, name: &str) -> Result<Secret, SecretError> {
        let fail = |e: CredentialError| e.into_secret_error(name);
        let stored = self.store.get(name).map_err(fail)?;
        let hosts = self.store.hosts(name, stored.provider()).map_err(fail)?;
        self.unbound_keychain_secret(name, stored)
            .map(|secret| secret.bound_to(hosts))
    }

    /// The value of `stored`, refreshed first when it is an OAuth token about to expire.
    fn unbound_keychain_secret(
        &self,
        name: &str,
        stored: StoredSecret,
    ) -> Result<Secret, SecretError> {
        let fail = |e: CredentialError| e.into_secret_error(name);
        match stored {
            StoredSecret::ApiKey { key, .. } => Ok(Secret::new(key)),
            StoredSecret::OAuth(tokens) => {
                if !tokens.needs_refresh(unix_now()) {
                    return Ok(Secret::new(tokens.access_token));
                }
                let _guard = self
                    .refresh_lock
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                // Another node may have refreshed while this one waited.
                if let StoredSecret::OAuth(current) = self.store.get(name).map_err(fail)? {
                    if !current.needs_refresh(unix_now()) {
                        return Ok(Secret::new(current.access_token));
                    }
                    if current.refresh_token.is_none() {
                        return Err(SecretError::Unavailable {
                            detail: format!("the OAuth token of credential `{name}` has expired"),
                            hint: format!(
                                "sign in again with `{}`",
                                login_command(name, &current.provider)
                            ),
                        });
                    }
                    return self.refresh_and_store(name, &current).map_err(fail);
                }
                Err(fail(CredentialError::NotFound {
                    name: name.to_owned(),
                }))
            }
        }
    }
}

impl SecretSource for KeychainSecrets {
    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        if let Some(value) = self.env_secret(name)? {
            return Ok(value);
        }
        self.keychain_secret(name)
    }

    /// After a 401: refreshes OAuth credential `name` unless another node already did (the
    /// stored access token is no longer `refused`). API keys and environment variables
    /// cannot be refreshed (`Ok(None)`).
    fn refresh_secret(&self, name: &str, refused: &Secret) -> Result<Option<Secret>, SecretError> {
        if self.env_secret(name)?.is_some() {
            return Ok(None);
        }
        let _guard = self
            .refresh_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let fail = |e: CredentialError| e.into_secret_error(name);
        let tokens = match self.store.get(name).map_err(fail)? {
            StoredSecret::ApiKey { .. } => return Ok(None),
            StoredSecret::OAuth(tokens) => tokens,
        };
        if tokens.access_token != refused.expose() {
            tracing::debug!(credential = name, "OAuth token already refreshed");
            let hosts = self.store.hosts(name, &tokens.provider).map_err(fail)?;
            return Ok(Some(Secret::new(tokens.access_token).bound_to(hosts)));
        }
        if tokens.refresh_token.is_none() {
            return Err(SecretError::Unusable {
                name: name.to_owned(),
                message: format!(
                    "the service refused its OAuth access token and there is no refresh token to get a new one; sign in again with `{}`",
                    login_command(name, &tokens.provider)
                ),
            });
        }
        self.refresh_and_store(name, &tokens)
            .map(Some)
            .map_err(fail)
    }
}

impl KeychainSecrets {
    fn env_secret(&self, name: &str) -> Result<Option<Secret>, SecretError> {
        if !self.read_env {
            return Ok(None);
        }
        let secret = agentloom_core::env_secret(name)?;
        // Also used outside runs (an MCP server's token when it is connected): no log line
        // may show it either.
        if let Some(secret) = &secret {
            crate::redact::remember_process_wide(secret.expose());
        }
        Ok(secret)
    }
}

/// Whether credential `name` is given to this process as `AGENTLOOM_SECRET_<NAME>`, which
/// runs read before the keychain; `Err` when it is given but unusable (a bad `_HOSTS` list).
pub fn environment_credential(name: &str) -> Result<bool, SecretError> {
    agentloom_core::env_secret(name).map(|secret| secret.is_some())
}

/// The credentials given to this process as `AGENTLOOM_SECRET_<NAME>` variables (not their
/// `_HOSTS` lists), by the name a graph gives them (lower-cased), sorted.
pub fn environment_credentials() -> Vec<String> {
    let prefix = agentloom_core::secret_env_var("");
    let mut names: Vec<String> = std::env::vars_os()
        .filter_map(|(key, _)| {
            let suffix = key.to_str()?.strip_prefix(&prefix)?;
            (!suffix.is_empty() && !suffix.ends_with("_HOSTS")).then(|| suffix.to_ascii_lowercase())
        })
        .filter(|name| !matches!(environment_credential(name), Ok(false)))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The command that signs in again for credential `name` of OAuth provider `provider`
/// (`github`, `google`, or an OpenID issuer URL).
pub(crate) fn login_command(name: &str, provider: &str) -> String {
    match provider {
        "github" | "google" => {
            format!("agentloom credentials login {provider} --name {name} --client-id ID")
        }
        issuer if issuer.starts_with("http://") || issuer.starts_with("https://") => format!(
            "agentloom credentials login oidc --issuer {issuer} --name {name} --client-id ID"
        ),
        _ => format!("agentloom credentials login PROVIDER --name {name} --client-id ID"),
    }
}

/// Runs `future` to completion on a fresh thread with its own runtime, so that it works
/// both inside and outside a tokio runtime (a node asking for a secret is inside one).
fn block_on<T: Send>(
    future: impl std::future::Future<Output = T> + Send,
) -> Result<T, CredentialError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| {
                        CredentialError::OAuth(format!(
                            "could not start a runtime to refresh the token: {e}"
                        ))
                    })?;
                Ok(runtime.block_on(future))
            })
            .join()
            .unwrap_or_else(|_| {
                Err(CredentialError::OAuth(
                    "the token refresh stopped unexpectedly".to_owned(),
                ))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::OAuthClientConfig;

    fn store(dir: &std::path::Path) -> Arc<CredentialStore> {
        let backend: Arc<keyring_core::CredentialStore> = keyring_core::mock::Store::new().unwrap();
        Arc::new(CredentialStore::with_backend(backend, dir))
    }

    #[test]
    fn api_keys_and_fresh_tokens_come_from_the_keychain() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        store
            .put(
                "unit-key-a",
                &StoredSecret::ApiKey {
                    provider: "x".into(),
                    key: "k-1".into(),
                },
            )
            .unwrap();
        let tokens = OAuthTokens {
            provider: "p".into(),
            access_token: "at-1".into(),
            refresh_token: None,
            expires_at: Some(unix_now() + 3600),
            scopes: vec![],
            client: OAuthClientConfig {
                client_id: "c".into(),
                client_secret: None,
                token_url: "http://127.0.0.1:9/token".into(),
                revocation_url: None,
            },
        };
        store
            .put("unit-oauth-a", &StoredSecret::OAuth(tokens.clone()))
            .unwrap();
        let secrets = KeychainSecrets::new(store.clone()).keychain_only();
        assert_eq!(secrets.secret("unit-key-a").unwrap().expose(), "k-1");
        assert_eq!(secrets.secret("unit-oauth-a").unwrap().expose(), "at-1");
        let missing = secrets.secret("unit-nothing").unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("AGENTLOOM_SECRET_UNIT_NOTHING"),
            "{missing}"
        );

        // Expired, no refresh token: a clear error, never the stale token.
        let expired = OAuthTokens {
            expires_at: Some(1),
            ..tokens
        };
        store
            .put("unit-oauth-b", &StoredSecret::OAuth(expired.clone()))
            .unwrap();
        let err = secrets.secret("unit-oauth-b").unwrap_err().to_string();
        assert!(
            err.contains("has expired") && err.contains("sign in again"),
            "{err}"
        );
        assert!(!err.contains("at-1"));

        // Expired with a refresh token but an unreachable token endpoint: the error names
        // the credential and what to do, inside a runtime too.
        let refreshable = OAuthTokens {
            refresh_token: Some("rt-SECRET".into()),
            ..expired
        };
        store
            .put("unit-oauth-c", &StoredSecret::OAuth(refreshable))
            .unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let err = rt
            .block_on(async { secrets.secret("unit-oauth-c") })
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unit-oauth-c") && err.contains("sign in again"),
            "{err}"
        );
        assert!(!err.contains("SECRET"), "{err}");
        assert!(
            secrets
                .force_refresh("unit-key-a")
                .unwrap_err()
                .to_string()
                .contains("cannot be refreshed")
        );
    }

    #[test]
    fn refresh_after_a_401_only_where_it_can_help() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let secrets = KeychainSecrets::new(store.clone()).keychain_only();
        store
            .put(
                "unit-key",
                &StoredSecret::ApiKey {
                    provider: "x".into(),
                    key: "k-1".into(),
                },
            )
            .unwrap();
        // An API key cannot be refreshed: the 401 stands.
        let refused = Secret::new("k-1");
        assert!(
            secrets
                .refresh_secret("unit-key", &refused)
                .unwrap()
                .is_none()
        );

        let tokens = OAuthTokens {
            provider: "http://127.0.0.1:9".into(),
            access_token: "at-current".into(),
            refresh_token: None,
            expires_at: Some(unix_now() + 3600),
            scopes: vec![],
            client: OAuthClientConfig {
                client_id: "c".into(),
                client_secret: None,
                token_url: "http://127.0.0.1:9/token".into(),
                revocation_url: None,
            },
        };
        store
            .put("unit-oauth", &StoredSecret::OAuth(tokens.clone()))
            .unwrap();
        // Refreshed by someone else since: the stored token, no refresh (the token URL
        // leads nowhere, so a refresh would fail).
        let again = secrets
            .refresh_secret("unit-oauth", &Secret::new("at-old"))
            .unwrap()
            .unwrap();
        assert_eq!(again.expose(), "at-current");

        // The current token refused and no refresh token: what to do, naming the credential.
        let err = secrets
            .refresh_secret("unit-oauth", &Secret::new("at-current"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("credential `unit-oauth`")
                && err.contains(
                    "agentloom credentials login oidc --issuer http://127.0.0.1:9 --name unit-oauth"
                ),
            "{err}"
        );
        assert!(!err.contains("at-current"), "{err}");

        // A refresh token, but the provider cannot be reached: the same, inside a runtime.
        store
            .put(
                "unit-oauth",
                &StoredSecret::OAuth(OAuthTokens {
                    provider: "github".into(),
                    refresh_token: Some("rt-SECRET".into()),
                    ..tokens
                }),
            )
            .unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let err = rt
            .block_on(async { secrets.refresh_secret("unit-oauth", &Secret::new("at-current")) })
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("credential `unit-oauth`")
                && err.contains("agentloom credentials login github --name unit-oauth"),
            "{err}"
        );
        assert!(!err.contains("SECRET"), "{err}");
        assert!(
            secrets
                .refresh_secret("unit-missing", &Secret::new("x"))
                .unwrap_err()
                .to_string()
                .contains("AGENTLOOM_SECRET_UNIT_MISSING")
        );
    }

    #[test]
    fn login_commands_fit_the_provider() {
        assert_eq!(
            login_command("gh", "github"),
            "agentloom credentials login github --name gh --client-id ID"
        );
        assert_eq!(
            login_command("id", "https://id.example.com"),
            "agentloom credentials login oidc --issuer https://id.example.com --name id --client-id ID"
        );
        assert!(login_command("x", "custom").contains("login PROVIDER --name x"));
    }
}
