//! OAuth 2 sign-in the way native apps must do it (RFC 8252): authorization code + PKCE in
//! the system browser with a loopback redirect on 127.0.0.1, or the device authorization
//! grant (RFC 8628); refresh with refresh-token rotation; revocation (RFC 7009).
//!
//! Token endpoints answer errors in two ways: RFC servers with HTTP 400 and JSON, GitHub
//! with HTTP 200 (form-encoded unless asked for JSON). [`OAuthHttp`] turns both into the
//! RFC shape before the `oauth2` crate reads them.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use agentloom_core::error_chain;
use oauth2::basic::BasicClient;
use oauth2::http::{self, HeaderValue, StatusCode, header};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken,
    DeviceAuthorizationUrl, EndpointMaybeSet, EndpointNotSet, HttpRequest, HttpResponse,
    PkceCodeChallenge, RedirectUrl, RefreshToken, RequestTokenError, RevocationUrl, Scope,
    StandardDeviceAuthorizationResponse, TokenResponse as _, TokenUrl,
};
use serde::{Deserialize, Serialize};

use super::loopback::Loopback;
use super::{CredentialError, CredentialStore, OAuthClientConfig, OAuthTokens, unix_now};

/// How long a browser sign-in may take by default.
pub const DEFAULT_SIGN_IN_TIMEOUT: Duration = Duration::from_secs(300);

/// The endpoints of an authorization server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoints {
    /// Where the browser signs in (code flow).
    pub authorization_url: Option<String>,
    pub token_url: String,
    /// RFC 8628 device authorization endpoint.
    pub device_authorization_url: Option<String>,
    /// RFC 7009 revocation endpoint.
    pub revocation_url: Option<String>,
}

/// A provider profile: endpoints, the user's client, and the scopes asked by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provider {
    /// Stored as the credential's provider: `github`, `google`, or the issuer URL.
    pub id: String,
    pub endpoints: Endpoints,
    pub client_id: String,
    /// Only for providers that need one for installed apps (Google). Not secret there,
    /// but still kept only in the keychain.
    pub client_secret: Option<String>,
    pub default_scopes: Vec<String>,
}

/// GitHub's scopes for the GitHub blocks (issues, pull requests, file contents).
pub const GITHUB_SCOPES: [&str; 2] = ["repo", "read:user"];
/// Google's scope for the Gmail blocks (read, send, drafts).
pub const GMAIL_SCOPES: [&str; 1] = ["https://www.googleapis.com/auth/gmail.modify"];

impl Provider {
    /// GitHub (github.com) with the user's OAuth App client id; device flow and code flow.
    pub fn github(client_id: &str) -> Self {
        Self::github_at("https://github.com", client_id)
    }

    /// GitHub Enterprise Server at `base` (e.g. `https://github.example.com`).
    pub fn github_at(base: &str, client_id: &str) -> Self {
        let base = base.trim_end_matches('/');
        Self {
            id: "github".to_owned(),
            endpoints: Endpoints {
                authorization_url: Some(format!("{base}/login/oauth/authorize")),
                token_url: format!("{base}/login/oauth/access_token"),
                device_authorization_url: Some(format!("{base}/login/device/code")),
                // GitHub revokes through its REST API with the client secret, which a
                // native app does not have: tokens are removed locally only.
                revocation_url: None,
            },
            client_id: client_id.to_owned(),
            client_secret: None,
            default_scopes: GITHUB_SCOPES.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// Google with the user's "Desktop app" client (Gmail scopes).
    pub fn google(client_id: &str, client_secret: Option<&str>) -> Self {
        Self {
            id: "google".to_owned(),
            endpoints: Endpoints {
                authorization_url: Some("https://accounts.google.com/o/oauth2/v2/auth".to_owned()),
                token_url: "https://oauth2.googleapis.com/token".to_owned(),
                device_authorization_url: Some(
                    "https://oauth2.googleapis.com/device/code".to_owned(),
                ),
                revocation_url: Some("https://oauth2.googleapis.com/revoke".to_owned()),
            },
            client_id: client_id.to_owned(),
            client_secret: client_secret.map(str::to_owned),
            default_scopes: GMAIL_SCOPES.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// A generic OAuth 2 server with explicit endpoints.
    pub fn generic(id: &str, endpoints: Endpoints, client_id: &str) -> Self {
        Self {
            id: id.to_owned(),
            endpoints,
            client_id: client_id.to_owned(),
            client_secret: None,
            default_scopes: Vec::new(),
        }
    }

    /// An OpenID provider found from its issuer URL
    /// (`{issuer}/.well-known/openid-configuration`). Asks `openid offline_access` by default.
    pub async fn discover(issuer: &str, client_id: &str) -> Result<Self, CredentialError> {
        let issuer = issuer.trim_end_matches('/');
        let url = format!("{issuer}/.well-known/openid-configuration");
        let fail = |what: String| {
            CredentialError::OAuth(format!(
                "OpenID discovery at {url} failed: {what}; check the issuer URL or give the endpoints explicitly"
            ))
        };
        let response = http_client()?
            .get(&url)
            .header(header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| fail(error_chain(&e.without_url())))?;
        if !response.status().is_success() {
            return Err(fail(format!("HTTP {}", response.status())));
        }
        #[derive(Deserialize)]
        struct Discovery {
            authorization_endpoint: Option<String>,
            token_endpoint: Option<String>,
            device_authorization_endpoint: Option<String>,
            revocation_endpoint: Option<String>,
        }
        let doc: Discovery = response.json().await.map_err(|e| {
            fail(format!(
                "not a discovery document: {}",
                error_chain(&e.without_url())
            ))
        })?;
        let token_url = doc
            .token_endpoint
            .ok_or_else(|| fail("it lists no token_endpoint".to_owned()))?;
        Ok(Self {
            id: issuer.to_owned(),
            endpoints: Endpoints {
                authorization_url: doc.authorization_endpoint,
                token_url,
                device_authorization_url: doc.device_authorization_endpoint,
                revocation_url: doc.revocation_endpoint,
            },
            client_id: client_id.to_owned(),
            client_secret: None,
            default_scopes: vec!["openid".to_owned(), "offline_access".to_owned()],
        })
    }

    fn client_config(&self) -> OAuthClientConfig {
        OAuthClientConfig {
            client_id: self.client_id.clone(),
            client_secret: self.client_secret.clone(),
            token_url: self.endpoints.token_url.clone(),
            revocation_url: self.endpoints.revocation_url.clone(),
        }
    }

    fn client(&self) -> Result<Client, CredentialError> {
        build_client(&self.client_config(), &self.endpoints)
    }
}

/// Opens the sign-in page. The default opens the system browser; tests drive it themselves.
pub trait BrowserOpener: Send + Sync {
    /// Opens `url`; an error is shown, and the user can open the printed URL by hand.
    fn open(&self, url: &str) -> Result<(), String>;
}

/// Opens URLs with `xdg-open` (Linux), `open` (macOS) or `start` (Windows).
pub struct SystemBrowser;

impl BrowserOpener for SystemBrowser {
    fn open(&self, url: &str) -> Result<(), String> {
        let mut command = if cfg!(target_os = "macos") {
            std::process::Command::new("open")
        } else if cfg!(target_os = "windows") {
            let mut c = std::process::Command::new("cmd");
            c.args(["/C", "start", ""]);
            c
        } else {
            std::process::Command::new("xdg-open")
        };
        command
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        match command.status() {
            Ok(status) if status.success() => Ok(()),
            Ok(status) => Err(format!("the browser opener exited with {status}")),
            Err(e) => Err(format!("no browser opener could be started: {e}")),
        }
    }
}

/// Signs in with the authorization code flow + PKCE: opens the provider's page with
/// `opener`, receives the redirect on a loopback port, checks `state`, and exchanges the
/// code. Fails after `timeout`.
pub async fn authorize_code(
    provider: &Provider,
    scopes: &[String],
    opener: &dyn BrowserOpener,
    timeout: Duration,
) -> Result<OAuthTokens, CredentialError> {
    if provider.endpoints.authorization_url.is_none() {
        return Err(CredentialError::OAuth(format!(
            "provider `{}` has no authorization endpoint; use the device flow (--device)",
            provider.id
        )));
    }
    let loopback = Loopback::bind().await?;
    let redirect = RedirectUrl::new(loopback.redirect_uri())
        .map_err(|e| CredentialError::OAuth(format!("redirect URI: {e}")))?;
    let client = provider.client()?.set_redirect_uri(redirect);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (auth_url, csrf) = client
        .authorize_url(CsrfToken::new_random)
        .map_err(config_error)?
        .add_scopes(scopes.iter().cloned().map(Scope::new))
        .set_pkce_challenge(challenge)
        .url();
    if let Err(problem) = opener.open(auth_url.as_str()) {
        tracing::warn!(%problem, "could not open a browser; open the sign-in URL by hand");
    }
    let expected_state = csrf.secret().clone();
    let params = loopback
        .wait(timeout, |params| {
            let state = param(params, "state");
            if state != Some(expected_state.as_str()) {
                (400, "Sign-in refused: the answer did not match this sign-in (state). Start again from Agentloom.")
            } else if param(params, "error").is_some() {
                (400, "The provider refused the sign-in. You can close this tab.")
            } else {
                (200, "Signed in to Agentloom. You can close this tab.")
            }
        })
        .await?;
    if param(&params, "state") != Some(expected_state.as_str()) {
        return Err(CredentialError::OAuth(
            "sign-in refused: the redirect's `state` did not match this sign-in (a stale or forged answer); start the sign-in again".to_owned(),
        ));
    }
    if let Some(error) = param(&params, "error") {
        let description = param(&params, "error_description").unwrap_or_default();
        return Err(CredentialError::OAuth(
            format!("the provider refused the sign-in: {error} {description}")
                .trim_end()
                .to_owned(),
        ));
    }
    let code = param(&params, "code").ok_or_else(|| {
        CredentialError::OAuth("the redirect carried no authorization code".to_owned())
    })?;
    let http = OAuthHttp::new()?;
    let response = client
        .exchange_code(AuthorizationCode::new(code.to_owned()))
        .map_err(config_error)?
        .set_pkce_verifier(verifier)
        .request_async(&http)
        .await
        .map_err(|e| token_error("the code exchange", &e))?;
    Ok(tokens_from(provider, &response, scopes, None))
}

/// What to show the user during the device flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCode {
    pub verification_uri: String,
    /// Not a secret: it is typed by the user on another device.
    pub user_code: String,
    pub verification_uri_complete: Option<String>,
    pub expires_in: Duration,
    pub interval: Duration,
}

/// Signs in with the device authorization grant: asks for a user code, calls `show` with
/// it, and polls the token endpoint (default interval 5 s; `slow_down` honoured) until the
/// user approves, refuses, or the code expires.
pub async fn authorize_device(
    provider: &Provider,
    scopes: &[String],
    show: &(dyn Fn(&DeviceCode) + Send + Sync),
) -> Result<OAuthTokens, CredentialError> {
    let client = provider.client()?;
    let http = OAuthHttp::new()?;
    let details: StandardDeviceAuthorizationResponse = client
        .exchange_device_code()
        .map_err(|_| {
            CredentialError::OAuth(format!(
                "provider `{}` has no device authorization endpoint; sign in with the browser instead",
                provider.id
            ))
        })?
        .add_scopes(scopes.iter().cloned().map(Scope::new))
        .request_async(&http)
        .await
        .map_err(|e| token_error("the device authorization request", &e))?;
    show(&DeviceCode {
        verification_uri: details.verification_uri().to_string(),
        user_code: details.user_code().secret().clone(),
        verification_uri_complete: details
            .verification_uri_complete()
            .map(|u| u.secret().clone()),
        expires_in: details.expires_in(),
        interval: details.interval(),
    });
    let response = client
        .exchange_device_access_token(&details)
        .map_err(config_error)?
        .request_async(&http, tokio::time::sleep, Some(details.expires_in()))
        .await
        .map_err(|e| token_error("the device sign-in", &e))?;
    Ok(tokens_from(provider, &response, scopes, None))
}

/// Trades the refresh token for a new token set. A rotated refresh token replaces the old
/// one; when none is returned the old one is kept.
pub async fn refresh(tokens: &OAuthTokens) -> Result<OAuthTokens, CredentialError> {
    let Some(refresh_token) = &tokens.refresh_token else {
        return Err(CredentialError::OAuth(format!(
            "the `{}` token has expired and has no refresh token: sign in again",
            tokens.provider
        )));
    };
    let endpoints = Endpoints {
        token_url: tokens.client.token_url.clone(),
        revocation_url: tokens.client.revocation_url.clone(),
        ..Endpoints::default()
    };
    let client = build_client(&tokens.client, &endpoints)?;
    let http = OAuthHttp::new()?;
    let response = client
        .exchange_refresh_token(&RefreshToken::new(refresh_token.clone()))
        .map_err(config_error)?
        .request_async(&http)
        .await
        .map_err(|e| token_error("refreshing the token", &e))?;
    let provider = ProviderRef {
        id: &tokens.provider,
        client: &tokens.client,
    };
    Ok(tokens_from_ref(
        &provider,
        &response,
        &tokens.scopes,
        Some(refresh_token),
    ))
}

/// Revokes the token set at the provider (the refresh token first, which ends the grant,
/// then the access token). Returns false when the provider has no revocation endpoint.
pub async fn revoke(tokens: &OAuthTokens) -> Result<bool, CredentialError> {
    let Some(revocation_url) = &tokens.client.revocation_url else {
        return Ok(false);
    };
    // RFC 7009 is a plain form POST; done directly because the oauth2 crate refuses
    // http:// revocation endpoints, which loopback test servers and some local IdPs use.
    let http = http_client()?;
    let mut revocable = Vec::new();
    if let Some(refresh) = &tokens.refresh_token {
        revocable.push((refresh.as_str(), "refresh_token"));
    }
    revocable.push((tokens.access_token.as_str(), "access_token"));
    for (token, hint) in revocable {
        let mut form = vec![
            ("token", token),
            ("token_type_hint", hint),
            ("client_id", tokens.client.client_id.as_str()),
        ];
        if let Some(secret) = &tokens.client.client_secret {
            form.push(("client_secret", secret.as_str()));
        }
        let response = http
            .post(revocation_url)
            .header(header::ACCEPT, "application/json")
            .form(&form)
            .send()
            .await
            .map_err(|e| {
                CredentialError::OAuth(format!(
                    "revoking the token could not reach the provider: {}",
                    error_chain(&e.without_url())
                ))
            })?;
        let status = response.status();
        if !status.is_success() {
            let json: serde_json::Value = response.json().await.unwrap_or_default();
            let code = json["error"].as_str().unwrap_or("error");
            return Err(CredentialError::OAuth(format!(
                "the provider refused revoking the token: HTTP {} {code}",
                status.as_u16()
            )));
        }
    }
    Ok(true)
}

/// What removing a credential did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    /// The provider confirmed the tokens are revoked.
    pub revoked: bool,
    /// Why revocation failed or was not possible (the credential is removed anyway).
    pub note: Option<String>,
}

/// Removes credential `name`: revokes OAuth tokens at the provider where it can, then
/// deletes the keychain entry and the index entry.
pub async fn remove_credential(
    store: &CredentialStore,
    name: &str,
) -> Result<Removal, CredentialError> {
    let stored = match store.get(name) {
        Ok(secret) => Some(secret),
        Err(CredentialError::NotFound { .. } | CredentialError::Corrupt { .. }) => None,
        Err(e) => return Err(e),
    };
    let mut removal = Removal {
        revoked: false,
        note: None,
    };
    if let Some(super::StoredSecret::OAuth(tokens)) = &stored {
        match revoke(tokens).await {
            Ok(true) => removal.revoked = true,
            Ok(false) => {
                removal.note = Some(format!(
                    "`{}` offers no revocation endpoint: revoke the app's access in the provider's settings",
                    tokens.provider
                ));
            }
            Err(e) => {
                removal.note = Some(format!(
                    "revocation failed ({e}); the credential is removed here anyway"
                ))
            }
        }
    }
    store.delete(name)?;
    Ok(removal)
}

type Client = BasicClient<
    EndpointMaybeSet,
    EndpointMaybeSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

fn build_client(
    config: &OAuthClientConfig,
    endpoints: &Endpoints,
) -> Result<Client, CredentialError> {
    let bad = |what: &str, e: url::ParseError| {
        CredentialError::OAuth(format!("the {what} URL is not valid: {e}"))
    };
    let auth = endpoints
        .authorization_url
        .as_ref()
        .map(|u| AuthUrl::new(u.clone()).map_err(|e| bad("authorization", e)))
        .transpose()?;
    let device = endpoints
        .device_authorization_url
        .as_ref()
        .map(|u| DeviceAuthorizationUrl::new(u.clone()).map_err(|e| bad("device authorization", e)))
        .transpose()?;
    let revocation = endpoints
        .revocation_url
        .as_ref()
        .map(|u| RevocationUrl::new(u.clone()).map_err(|e| bad("revocation", e)))
        .transpose()?;
    let token = TokenUrl::new(endpoints.token_url.clone()).map_err(|e| bad("token", e))?;
    let mut client = BasicClient::new(ClientId::new(config.client_id.clone()))
        .set_auth_type(AuthType::RequestBody)
        .set_auth_uri_option(auth)
        .set_device_authorization_url_option(device)
        .set_revocation_url_option(revocation)
        .set_token_uri_option(Some(token));
    if let Some(secret) = &config.client_secret {
        client = client.set_client_secret(ClientSecret::new(secret.clone()));
    }
    Ok(client)
}

struct ProviderRef<'a> {
    id: &'a str,
    client: &'a OAuthClientConfig,
}

fn tokens_from(
    provider: &Provider,
    response: &oauth2::basic::BasicTokenResponse,
    requested: &[String],
    previous_refresh: Option<&String>,
) -> OAuthTokens {
    let client = provider.client_config();
    tokens_from_ref(
        &ProviderRef {
            id: &provider.id,
            client: &client,
        },
        response,
        requested,
        previous_refresh,
    )
}

fn tokens_from_ref(
    provider: &ProviderRef<'_>,
    response: &oauth2::basic::BasicTokenResponse,
    requested: &[String],
    previous_refresh: Option<&String>,
) -> OAuthTokens {
    let scopes = match response.scopes() {
        Some(granted) => granted.iter().map(|s| s.to_string()).collect(),
        None => requested.to_vec(),
    };
    let tokens = OAuthTokens {
        provider: provider.id.to_owned(),
        access_token: response.access_token().secret().clone(),
        refresh_token: response
            .refresh_token()
            .map(|t| t.secret().clone())
            .or_else(|| previous_refresh.cloned()),
        expires_at: response.expires_in().map(|d| unix_now() + d.as_secs()),
        scopes,
        client: provider.client.clone(),
    };
    // Fresh tokens (a sign-in, a refresh) are secrets from now on, in any log line.
    tokens.redact_from_logs();
    tokens
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn config_error(err: oauth2::ConfigurationError) -> CredentialError {
    CredentialError::OAuth(format!("the OAuth client is not fully configured: {err}"))
}

/// A token endpoint failure as text that never quotes a response body (it may hold tokens).
fn token_error<RE, T>(what: &str, err: &RequestTokenError<RE, T>) -> CredentialError
where
    RE: std::error::Error + 'static,
    T: oauth2::ErrorResponse + 'static,
{
    let text = match err {
        RequestTokenError::ServerResponse(response) => {
            let json = serde_json::to_value(response).unwrap_or_default();
            let code = json["error"].as_str().unwrap_or("error");
            match json["error_description"].as_str() {
                Some(description) => format!("the provider refused {what}: {code} ({description})"),
                None => format!("the provider refused {what}: {code}"),
            }
        }
        RequestTokenError::Request(e) => {
            format!("{what} could not reach the provider: {}", error_chain(e))
        }
        RequestTokenError::Parse(e, _body) => format!(
            "{what}: the provider's answer could not be read (at `{}`)",
            e.path()
        ),
        RequestTokenError::Other(message) => format!("{what} failed: {message}"),
    };
    CredentialError::OAuth(text)
}

fn http_client() -> Result<reqwest::Client, CredentialError> {
    reqwest::Client::builder()
        // Following redirects from a token endpoint could leak the code (RFC 6749 §5).
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .user_agent(concat!("agentloom/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| CredentialError::OAuth(format!("the HTTP client could not be set up: {e}")))
}

/// The `oauth2` crate's HTTP client: reqwest, plus GitHub-style answers normalized to the
/// RFC shape (200 + `error` → 400 JSON; form-encoded bodies → JSON).
pub struct OAuthHttp {
    client: reqwest::Client,
}

/// A transport failure talking to a token endpoint.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OAuthHttpError(String);

impl OAuthHttp {
    pub fn new() -> Result<Self, CredentialError> {
        Ok(Self {
            client: http_client()?,
        })
    }
}

impl<'c> oauth2::AsyncHttpClient<'c> for OAuthHttp {
    type Error = OAuthHttpError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, Self::Error>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let mut builder = self
                .client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body);
            builder = builder.header(header::ACCEPT, "application/json");
            let response = builder
                .send()
                .await
                .map_err(|e| OAuthHttpError(error_chain(&e.without_url())))?;
            let status = response.status();
            let content_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_ascii_lowercase();
            let bytes = response
                .bytes()
                .await
                .map_err(|e| OAuthHttpError(error_chain(&e.without_url())))?;
            let (status, body, json) = normalize(status.as_u16(), &content_type, &bytes);
            let mut out = http::Response::builder()
                .status(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY));
            if json {
                out = out.header(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
            } else if !content_type.is_empty() {
                out = out.header(header::CONTENT_TYPE, content_type);
            }
            out.body(body).map_err(|e| OAuthHttpError(e.to_string()))
        })
    }
}

/// Rewrites a token endpoint answer into the RFC 6749 shape. Returns (status, body, is_json).
fn normalize(status: u16, content_type: &str, body: &[u8]) -> (u16, Vec<u8>, bool) {
    let parsed: Option<serde_json::Value> =
        if content_type.contains("json") || content_type.is_empty() {
            serde_json::from_slice(body).ok()
        } else {
            None
        };
    let parsed = parsed.or_else(|| {
        if content_type.contains("x-www-form-urlencoded") || content_type.starts_with("text/plain")
        {
            let map: serde_json::Map<String, serde_json::Value> = url::form_urlencoded::parse(body)
                .into_owned()
                .map(|(k, v)| {
                    // `expires_in` and `interval` are numbers in the JSON shape.
                    let value = match (k.as_str(), v.parse::<u64>()) {
                        ("expires_in" | "interval" | "refresh_token_expires_in", Ok(n)) => {
                            serde_json::json!(n)
                        }
                        _ => serde_json::Value::String(v),
                    };
                    (k, value)
                })
                .collect();
            (!map.is_empty()).then_some(serde_json::Value::Object(map))
        } else {
            None
        }
    });
    match parsed {
        Some(json) => {
            let is_error = json.get("error").is_some_and(|e| e.is_string());
            let status = if (200..300).contains(&status) && is_error {
                400
            } else {
                status
            };
            (status, json.to_string().into_bytes(), true)
        }
        None => (status, body.to_vec(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_style_errors_become_rfc_errors() {
        let (status, body, json) = normalize(
            200,
            "application/x-www-form-urlencoded; charset=utf-8",
            b"error=authorization_pending&error_description=wait",
        );
        assert_eq!(status, 400);
        assert!(json);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "authorization_pending");

        let (status, body, _) = normalize(
            200,
            "application/json",
            br#"{"error":"slow_down","interval":10}"#,
        );
        assert_eq!(status, 400);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()["interval"],
            10
        );

        let (status, body, json) = normalize(
            200,
            "application/x-www-form-urlencoded",
            b"access_token=gho_x&scope=repo&token_type=bearer&expires_in=28800",
        );
        assert_eq!(status, 200);
        assert!(json);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["access_token"], "gho_x");
        assert_eq!(v["expires_in"], 28800);

        let (status, _, _) = normalize(400, "application/json", br#"{"error":"invalid_grant"}"#);
        assert_eq!(status, 400);
        let (status, body, json) = normalize(502, "text/html", b"<html>bad gateway</html>");
        assert_eq!((status, json), (502, false));
        assert_eq!(body, b"<html>bad gateway</html>");
    }

    #[test]
    fn profiles_have_their_endpoints() {
        let gh = Provider::github("Iv1.x");
        assert_eq!(
            gh.endpoints.device_authorization_url.as_deref(),
            Some("https://github.com/login/device/code")
        );
        assert!(gh.client().is_ok());
        let ghe = Provider::github_at("https://ghe.example.com/", "c");
        assert_eq!(
            ghe.endpoints.token_url,
            "https://ghe.example.com/login/oauth/access_token"
        );
        let google = Provider::google("id.apps.googleusercontent.com", Some("s"));
        assert!(google.default_scopes[0].contains("gmail"));
        assert!(google.endpoints.revocation_url.is_some());
        let bad = Provider::generic(
            "x",
            Endpoints {
                token_url: "not a url".into(),
                ..Endpoints::default()
            },
            "c",
        );
        assert!(
            bad.client()
                .unwrap_err()
                .to_string()
                .contains("token URL is not valid")
        );
    }
}
