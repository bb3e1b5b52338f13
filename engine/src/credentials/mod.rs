//! Credentials: API keys and OAuth token sets kept in the OS keychain.
//!
//! - [`CredentialStore`]: one keychain entry per credential (service `agentloom`, user =
//!   the credential's name) holding JSON, plus a non-secret index file for listing;
//! - [`KeychainSecrets`]: the engine's [`agentloom_core::SecretSource`]: the environment
//!   variable `AGENTLOOM_SECRET_<NAME>` first (headless runs), then the keychain; OAuth
//!   access tokens are refreshed when they are about to expire;
//! - [`oauth`]: sign-in with authorization code + PKCE through a loopback redirect, the
//!   device authorization grant, refresh with rotation, and revocation.
//!
//! When no keychain is reachable every operation fails with
//! [`CredentialError::Unavailable`], which says why and what to do. There is no plain-text
//! fallback.

pub mod oauth;

mod loopback;
mod secrets;
mod store;

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

pub use secrets::{KeychainSecrets, environment_credential, environment_credentials};
pub use store::{CredentialStore, INDEX_FILE, KEYCHAIN_NAME, KEYCHAIN_SERVICE};

/// What a credential holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    /// A fixed key or personal access token.
    ApiKey,
    /// An OAuth 2 token set (access token, optional refresh token, expiry, scopes).
    #[serde(rename = "oauth")]
    OAuth,
}

impl fmt::Display for CredentialKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CredentialKind::ApiKey => "api key",
            CredentialKind::OAuth => "oauth",
        })
    }
}

/// The non-secret description of a credential, as listed in the index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialInfo {
    pub name: String,
    pub kind: CredentialKind,
    /// `github`, `google`, an issuer URL…
    pub provider: String,
    /// When the access token expires, in seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Whether a refresh token is stored (so that expiry is not the end).
    #[serde(default)]
    pub refreshable: bool,
    /// The hosts it may be sent to (`host`, `host:port`, or `*` for any): see
    /// [`agentloom_core::BoundHosts`]. Empty in an index written before hosts existed: the
    /// provider's hosts ([`default_hosts`]) then apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Last written, in seconds since the Unix epoch.
    pub updated_at: u64,
}

impl CredentialInfo {
    /// `ok`, `expires soon`, `expired (will refresh)` or `expired`, as of `now` (Unix seconds).
    pub fn status(&self, now: u64) -> &'static str {
        match self.expires_at {
            None => "ok",
            Some(at) if at > now + REFRESH_MARGIN_SECS => "ok",
            Some(_) if self.refreshable => "refreshes on use",
            Some(at) if at > now => "expires soon",
            Some(_) => "expired: sign in again",
        }
    }
}

/// Refresh an access token this long before it expires.
pub const REFRESH_MARGIN_SECS: u64 = 60;

/// The secret part of a credential: what the keychain entry holds, as JSON.
/// Its `Debug` never shows a token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoredSecret {
    ApiKey {
        provider: String,
        key: String,
    },
    #[serde(rename = "oauth")]
    OAuth(OAuthTokens),
}

impl StoredSecret {
    /// Adds every secret this holds to the process-wide redaction list, so that no log
    /// line shows it, whoever logs it.
    pub(crate) fn redact_from_logs(&self) {
        match self {
            StoredSecret::ApiKey { key, .. } => crate::redact::remember_process_wide(key),
            StoredSecret::OAuth(tokens) => tokens.redact_from_logs(),
        }
    }
}

impl OAuthTokens {
    /// Adds the tokens (and a client secret) to the process-wide redaction list.
    pub(crate) fn redact_from_logs(&self) {
        let secrets = [
            Some(&self.access_token),
            self.refresh_token.as_ref(),
            self.client.client_secret.as_ref(),
        ];
        for secret in secrets.into_iter().flatten() {
            crate::redact::remember_process_wide(secret);
        }
    }
}

impl fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoredSecret::ApiKey { provider, .. } => f
                .debug_struct("ApiKey")
                .field("provider", provider)
                .finish_non_exhaustive(),
            StoredSecret::OAuth(tokens) => tokens.fmt(f),
        }
    }
}

impl StoredSecret {
    pub fn kind(&self) -> CredentialKind {
        match self {
            StoredSecret::ApiKey { .. } => CredentialKind::ApiKey,
            StoredSecret::OAuth(_) => CredentialKind::OAuth,
        }
    }

    pub fn provider(&self) -> &str {
        match self {
            StoredSecret::ApiKey { provider, .. } => provider,
            StoredSecret::OAuth(tokens) => &tokens.provider,
        }
    }

    /// The index entry describing this secret.
    pub fn info(&self, name: &str) -> CredentialInfo {
        let (expires_at, scopes, refreshable) = match self {
            StoredSecret::ApiKey { .. } => (None, Vec::new(), false),
            StoredSecret::OAuth(t) => (t.expires_at, t.scopes.clone(), t.refresh_token.is_some()),
        };
        CredentialInfo {
            name: name.to_owned(),
            kind: self.kind(),
            provider: self.provider().to_owned(),
            expires_at,
            scopes,
            refreshable,
            hosts: default_hosts(self.provider()),
            updated_at: unix_now(),
        }
    }
}

/// The hosts a credential of `provider` is bound to unless told otherwise: the API hosts of
/// a known provider ([`agentloom_core::preset_hosts`]), the host of an OpenID issuer URL,
/// else none.
pub fn default_hosts(provider: &str) -> Vec<String> {
    let preset = agentloom_core::preset_hosts(provider);
    if !preset.is_empty() {
        return preset.iter().map(|h| (*h).to_owned()).collect();
    }
    match url::Url::parse(provider) {
        Ok(issuer) if matches!(issuer.scheme(), "http" | "https") => {
            vec![agentloom_core::host_of(&issuer)]
        }
        _ => Vec::new(),
    }
}

/// An OAuth token set and what is needed to refresh and revoke it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthTokens {
    pub provider: String,
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    #[serde(default)]
    pub scopes: Vec<String>,
    pub client: OAuthClientConfig,
}

impl fmt::Debug for OAuthTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthTokens")
            .field("provider", &self.provider)
            .field("has_refresh_token", &self.refresh_token.is_some())
            .field("expires_at", &self.expires_at)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl OAuthTokens {
    /// Whether the access token expires within [`REFRESH_MARGIN_SECS`] of `now`.
    pub fn needs_refresh(&self, now: u64) -> bool {
        self.expires_at
            .is_some_and(|at| at <= now + REFRESH_MARGIN_SECS)
    }
}

/// The client and endpoints a token set was issued through (kept to refresh and revoke).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthClientConfig {
    pub client_id: String,
    /// Only for providers that insist on one for installed apps (Google).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub token_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation_url: Option<String>,
}

impl fmt::Debug for OAuthClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClientConfig")
            .field("client_id", &self.client_id)
            .field("token_url", &self.token_url)
            .field("revocation_url", &self.revocation_url)
            .finish_non_exhaustive()
    }
}

/// A credential operation failed. Messages never contain a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("the keychain could not be reached ({detail}); {hint}")]
    Unavailable { detail: String, hint: String },
    #[error(
        "no credential named `{name}`: add it with `agentloom credentials add {name}` or sign in with `agentloom credentials login`"
    )]
    NotFound { name: String },
    #[error("`{name}` is not a valid credential name: {reason}")]
    InvalidName { name: String, reason: String },
    #[error(
        "the keychain entry of credential `{name}` is damaged ({detail}); remove it and add it again"
    )]
    Corrupt { name: String, detail: String },
    #[error("the credentials index {path} could not be {action}: {detail}")]
    Index {
        path: String,
        action: &'static str,
        detail: String,
    },
    #[error("{0}")]
    OAuth(String),
    #[error("credential `{name}`: {problem}")]
    Hosts { name: String, problem: String },
}

impl CredentialError {
    /// The run-facing form of this error, for credential `name`.
    pub fn into_secret_error(self, name: &str) -> agentloom_core::SecretError {
        match self {
            CredentialError::Unavailable { detail, hint } => {
                agentloom_core::SecretError::Unavailable { detail, hint }
            }
            CredentialError::NotFound { name } => agentloom_core::SecretError::Missing {
                env_var: agentloom_core::secret_env_var(&name),
                name,
            },
            CredentialError::OAuth(message) => agentloom_core::SecretError::Unusable {
                name: name.to_owned(),
                message,
            },
            other => agentloom_core::SecretError::Unusable {
                name: name.to_owned(),
                message: other.to_string(),
            },
        }
    }
}

/// Checks a credential name: 1–100 characters, letters, digits, `-`, `_`, `.`.
pub fn check_name(name: &str) -> Result<(), CredentialError> {
    let bad = |reason: &str| {
        Err(CredentialError::InvalidName {
            name: name.chars().take(100).collect(),
            reason: reason.to_owned(),
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.chars().count() > 100 {
        return bad("it is longer than 100 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return bad("use only letters, digits, `-`, `_` and `.`");
    }
    Ok(())
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> OAuthTokens {
        OAuthTokens {
            provider: "github".into(),
            access_token: "gho_SECRETACCESS".into(),
            refresh_token: Some("ghr_SECRETREFRESH".into()),
            expires_at: Some(1_000),
            scopes: vec!["repo".into()],
            client: OAuthClientConfig {
                client_id: "cid".into(),
                client_secret: Some("SECRETCLIENT".into()),
                token_url: "https://x/token".into(),
                revocation_url: None,
            },
        }
    }

    #[test]
    fn debug_never_shows_tokens() {
        let api = StoredSecret::ApiKey {
            provider: "openai".into(),
            key: "sk-SECRETKEY".into(),
        };
        let oauth = StoredSecret::OAuth(tokens());
        let text = format!("{api:?} {oauth:?} {:?}", tokens().client);
        assert!(!text.contains("SECRET"), "{text}");
        assert!(text.contains("openai") && text.contains("github"), "{text}");
    }

    #[test]
    fn stored_secret_round_trips_as_tagged_json() {
        let oauth = StoredSecret::OAuth(tokens());
        let json = serde_json::to_value(&oauth).unwrap();
        assert_eq!(json["kind"], "oauth");
        assert_eq!(json["refresh_token"], "ghr_SECRETREFRESH");
        let back: StoredSecret = serde_json::from_value(json).unwrap();
        assert_eq!(back, oauth);
        let info = back.info("gh");
        assert_eq!(info.kind, CredentialKind::OAuth);
        assert!(info.refreshable);
        assert_eq!(info.scopes, vec!["repo".to_owned()]);
        let info_json = serde_json::to_string(&info).unwrap();
        assert!(!info_json.contains("SECRET"), "{info_json}");
    }

    #[test]
    fn expiry_and_status() {
        let t = tokens();
        assert!(t.needs_refresh(1_000 - REFRESH_MARGIN_SECS));
        assert!(!t.needs_refresh(1_000 - REFRESH_MARGIN_SECS - 1));
        let mut info = StoredSecret::OAuth(t).info("gh");
        assert_eq!(info.status(0), "ok");
        assert_eq!(info.status(2_000), "refreshes on use");
        info.refreshable = false;
        assert_eq!(info.status(2_000), "expired: sign in again");
        assert_eq!(info.status(990), "expires soon");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("github-work_1.x").is_ok());
        for bad in ["", "a b", "x/y", &"n".repeat(101)] {
            let err = check_name(bad).unwrap_err();
            assert!(
                err.to_string().contains("not a valid credential name"),
                "{err}"
            );
        }
    }

    #[test]
    fn errors_convert_to_secret_errors() {
        let missing = CredentialError::NotFound { name: "gh".into() }.into_secret_error("gh");
        assert!(
            missing.to_string().contains("AGENTLOOM_SECRET_GH"),
            "{missing}"
        );
    }
}
