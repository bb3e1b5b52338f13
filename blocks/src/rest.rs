//! Shared plumbing of the service blocks (GitHub, Gmail): bearer-token JSON requests with
//! clear errors for 401, rate limits and server failures, and Link-header pagination.
//!
//! Tokens go only into the `Authorization` header (marked sensitive); they never reach a
//! log line or an error message.

use std::time::Duration;

use agentloom_core::{BlockError, ConfigError, ConfigReader, RunCtx, Secret, Value};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, RETRY_AFTER};

use crate::net;
use reqwest::{Method, StatusCode, Url};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A service's base URL and the credential its requests carry.
#[derive(Clone, Debug)]
pub(crate) struct Api {
    /// `GitHub`, `Gmail`: used in messages.
    pub service: &'static str,
    pub base: Url,
    pub credential: String,
    /// How to get a new token, for the 401 message.
    pub login_hint: &'static str,
}

/// One JSON response.
pub(crate) struct Reply {
    pub json: serde_json::Value,
    pub headers: HeaderMap,
}

/// What one request gave: an answer, or a 401 (with its error) that a refresh may cure.
enum Sent {
    Reply(Reply),
    Unauthorized(BlockError),
}

impl Api {
    /// Reads `base_url` (default `default_base`) and `credential` (default `default_credential`).
    pub fn from_config(
        reader: &ConfigReader<'_>,
        service: &'static str,
        default_base: &str,
        default_credential: &str,
        login_hint: &'static str,
    ) -> Result<Self, ConfigError> {
        let text = reader.str_or("base_url", default_base)?.trim();
        let text = if text.is_empty() { default_base } else { text };
        let mut base = Url::parse(text).map_err(|e| {
            ConfigError::new("base_url", format!("`{text}` is not a valid URL: {e}"))
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(ConfigError::new(
                "base_url",
                "use an http:// or https:// URL",
            ));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let credential = reader
            .str_or("credential", default_credential)?
            .trim()
            .to_owned();
        if credential.is_empty() {
            return Err(ConfigError::new(
                "credential",
                "is required: the name of a stored credential",
            ));
        }
        Ok(Self {
            service,
            base,
            credential,
            login_hint,
        })
    }

    /// `METHOD URL` of a request to `path`, for an approval prompt ([`NodeImpl::describe`]).
    ///
    /// [`NodeImpl::describe`]: agentloom_core::NodeImpl::describe
    pub fn describe(&self, method: &Method, path: &str) -> Option<String> {
        let url = self.url(path).ok()?;
        Some(format!("{method} {url}"))
    }

    /// `base_url` + `path` (no leading slash).
    pub fn url(&self, path: &str) -> Result<Url, BlockError> {
        self.base
            .join(path.trim_start_matches('/'))
            .map_err(|e| BlockError::permanent(format!("{} URL for `{path}`: {e}", self.service)))
    }

    /// Sends one request with the credential's token and returns the JSON answer. On a
    /// 401 the credential is refreshed once (an OAuth sign-in; see
    /// [`RunCtx::refresh_secret`]) and the request sent once more with the new token.
    pub async fn send(
        &self,
        ctx: &dyn RunCtx,
        method: Method,
        url: Url,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, BlockError> {
        let token = net::credential_for(ctx, &self.credential, &url)?;
        let refused = match self
            .send_with(ctx, &token, method.clone(), url.clone(), body)
            .await?
        {
            Sent::Reply(reply) => return Ok(reply),
            Sent::Unauthorized(refused) => refused,
        };
        let fresh =
            net::refreshed_secret(ctx, self.service, &self.credential, &url, &token, refused)?;
        match self.send_with(ctx, &fresh, method, url, body).await? {
            Sent::Reply(reply) => Ok(reply),
            Sent::Unauthorized(again) => Err(BlockError {
                message: format!(
                    "{} (The token was refreshed once and refused again.)",
                    again.message
                ),
                ..again
            }),
        }
    }

    /// One request with `token`; a 401 is handed back for the caller to refresh.
    async fn send_with(
        &self,
        ctx: &dyn RunCtx,
        token: &Secret,
        method: Method,
        url: Url,
        body: Option<&serde_json::Value>,
    ) -> Result<Sent, BlockError> {
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
            BlockError::permanent(format!(
                "credential `{}` holds characters that cannot be sent in a header; store it again",
                self.credential
            ))
        })?;
        auth.set_sensitive(true);
        let shown = format!("{method} {}", url.path());
        let mut request = net::client()?
            .request(method, url)
            .timeout(TIMEOUT)
            .header(AUTHORIZATION, auth)
            .header(reqwest::header::ACCEPT, "application/json");
        if self.service == "GitHub" {
            request = request
                .header(reqwest::header::ACCEPT, "application/vnd.github+json")
                .header("X-GitHub-Api-Version", "2022-11-28");
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        tracing::debug!(service = self.service, request = %shown, "service request");
        // Network failures and timeouts may pass: retryable.
        let sent = net::send(ctx, request, |e| {
            BlockError::transient(format!(
                "{} {shown} failed: {}",
                self.service,
                e.without_url()
            ))
        })
        .await?;
        let status = sent.response.status();
        let headers = sent.response.headers().clone();
        // The host's request slot is held until the answer is read.
        let bytes = sent.response.bytes().await.map_err(|e| {
            BlockError::transient(format!(
                "{} {shown}: reading the answer failed: {}",
                self.service,
                e.without_url()
            ))
        })?;
        let json: serde_json::Value = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null)
        };
        if status.is_success() {
            return Ok(Sent::Reply(Reply { json, headers }));
        }
        let error = self.status_error(status, &headers, &json, &shown);
        if status == StatusCode::UNAUTHORIZED {
            return Ok(Sent::Unauthorized(error));
        }
        Err(error)
    }

    fn status_error(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        json: &serde_json::Value,
        shown: &str,
    ) -> BlockError {
        let detail = json["message"]
            .as_str()
            .or_else(|| json["error"]["message"].as_str())
            .unwrap_or("")
            .chars()
            .take(300)
            .collect::<String>();
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        let data = Value::from_json(serde_json::json!({
            "status": status.as_u16(),
            "body": json,
        }));
        let service = self.service;
        let credential = &self.credential;
        if status == StatusCode::UNAUTHORIZED {
            return BlockError::permanent(format!(
                "{service} refused the token of credential `{credential}` (HTTP 401{detail}): it is wrong, expired or revoked. {} (or set {} for headless runs)",
                self.login_hint.replace("NAME", credential),
                agentloom_core::secret_env_var(credential)
            ))
            .with_data(data);
        }
        let rate_limited = status == StatusCode::TOO_MANY_REQUESTS
            || (status == StatusCode::FORBIDDEN
                && (header_str(headers, "x-ratelimit-remaining") == Some("0")
                    || headers.contains_key(RETRY_AFTER)));
        if rate_limited {
            let wait = net::retry_after(headers);
            let mut err = BlockError::transient(format!(
                "{service} rate limit reached on {shown} (HTTP {}){}",
                status.as_u16(),
                wait.map(|w| format!("; retry in {} s", w.as_secs()))
                    .unwrap_or_default()
            ))
            .with_data(data);
            if let Some(wait) = wait {
                err = err.with_retry_after(wait);
            }
            return err;
        }
        let message = format!("{service} {shown}: HTTP {status}{detail}");
        if status.is_server_error() {
            BlockError::transient(message).with_data(data)
        } else {
            BlockError::permanent(message).with_data(data)
        }
    }

    /// GETs every page of a list (following `Link: rel="next"`), up to `max_items`.
    pub async fn get_all(
        &self,
        ctx: &dyn RunCtx,
        mut url: Url,
        max_items: usize,
    ) -> Result<Vec<serde_json::Value>, BlockError> {
        let mut items = Vec::new();
        loop {
            let reply = self.send(ctx, Method::GET, url.clone(), None).await?;
            match reply.json {
                serde_json::Value::Array(page) => items.extend(page),
                other => {
                    return Err(BlockError::permanent(format!(
                        "{} answered {} with {}, not a list",
                        self.service,
                        url.path(),
                        value_kind(&other)
                    )));
                }
            }
            if items.len() >= max_items {
                items.truncate(max_items);
                break;
            }
            match next_link(&reply.headers) {
                Some(next) => url = self.follow(&url, &next),
                None => break,
            }
        }
        Ok(items)
    }

    /// The next page's URL on *our* base: a `Link` may name the public host even when the
    /// base URL points elsewhere (a gateway, GitHub Enterprise), so only its query is kept
    /// unless it is already under the base.
    fn follow(&self, current: &Url, next: &str) -> Url {
        match Url::parse(next) {
            Ok(parsed) if parsed.as_str().starts_with(self.base.as_str()) => parsed,
            Ok(parsed) => {
                let mut url = current.clone();
                url.set_query(parsed.query());
                url
            }
            Err(_) => current.clone(),
        }
    }
}

fn value_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "nothing",
        serde_json::Value::Object(_) => "an object",
        _ => "a scalar",
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The `rel="next"` target of a `Link` header.
pub(crate) fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = header_str(headers, "link")?;
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"))
            .then(|| {
                target
                    .trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_owned()
            })
    })
}

/// Reads `max_items` (default `default`, at least 1).
pub(crate) fn max_items(reader: &ConfigReader<'_>, default: u64) -> Result<usize, ConfigError> {
    let n = reader.u64_or("max_items", default)?;
    if n == 0 {
        return Err(ConfigError::new("max_items", "must be at least 1"));
    }
    usize::try_from(n).map_err(|_| ConfigError::new("max_items", "is too large"))
}

/// A block defined by its description and a function from config to node.
pub(crate) struct ServiceBlock {
    pub meta: agentloom_core::BlockMeta,
    pub make: fn(
        &agentloom_core::Config,
    ) -> Result<std::sync::Arc<dyn agentloom_core::NodeImpl>, ConfigError>,
}

impl ServiceBlock {
    /// `blocks`, as a block file lists them for the registry.
    pub(crate) fn boxed(
        blocks: impl IntoIterator<Item = ServiceBlock>,
    ) -> Vec<Box<dyn agentloom_core::Block>> {
        blocks
            .into_iter()
            .map(|block| Box::new(block) as Box<dyn agentloom_core::Block>)
            .collect()
    }
}

impl agentloom_core::Block for ServiceBlock {
    fn meta(&self) -> &agentloom_core::BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &agentloom_core::Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<std::sync::Arc<dyn agentloom_core::NodeImpl>, ConfigError> {
        (self.make)(config)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::testing::{TestCtx, inputs, run_block_with};

    #[test]
    fn link_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            "link",
            HeaderValue::from_static(
                "<https://api.github.com/x?page=2>; rel=\"next\", <https://api.github.com/x?page=4>; rel=\"last\"",
            ),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://api.github.com/x?page=2")
        );
        assert_eq!(next_link(&HeaderMap::new()), None);
    }

    /// A GitHub API whose issues list answers only `Bearer fresh-token`; returns its base
    /// URL and the `Authorization` headers it saw.
    async fn github_accepting_only_the_fresh_token() -> (String, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let issues = move |headers: axum::http::HeaderMap| {
            let log = log.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                log.lock().unwrap().push(auth.clone());
                if auth == "Bearer fresh-token" {
                    (
                        axum::http::StatusCode::OK,
                        axum::Json(serde_json::json!([{"number": 7, "title": "Flaky canary"}])),
                    )
                } else {
                    (
                        axum::http::StatusCode::UNAUTHORIZED,
                        axum::Json(serde_json::json!({"message": "Bad credentials"})),
                    )
                }
            }
        };
        let app = axum::Router::new().route("/repos/acme/api/issues", axum::routing::get(issues));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), seen)
    }

    #[tokio::test]
    async fn a_401_refreshes_the_credential_once_and_repeats_the_request_once() {
        let (base, seen) = github_accepting_only_the_fresh_token().await;
        let config = serde_json::json!({"base_url": base, "credential": "gh", "repo": "acme/api"});
        let count = || seen.lock().unwrap().len();

        let ctx = TestCtx::new()
            .with_secret("gh", "stale-token")
            .with_refresh("gh", "fresh-token");
        let out = run_block_with(&ctx, "github.list_issues", config.clone(), inputs([]))
            .await
            .unwrap();
        assert_eq!(out["issues"].to_json()[0]["number"], 7);
        assert_eq!(ctx.refreshes(), vec!["gh".to_owned()]);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                "Bearer stale-token".to_owned(),
                "Bearer fresh-token".to_owned()
            ]
        );

        // A token that cannot be refreshed (a personal access token): one request, the 401.
        let ctx = TestCtx::new().with_secret("gh", "stale-token");
        let err = run_block_with(&ctx, "github.list_issues", config.clone(), inputs([]))
            .await
            .unwrap_err();
        assert_eq!(count(), 3);
        assert!(
            err.message.contains(
                "GitHub refused the token of credential `gh` (HTTP 401: Bad credentials)"
            ) && err
                .message
                .contains("agentloom credentials login github --name gh"),
            "{}",
            err.message
        );

        // Refreshed and refused again: exactly one refresh and one repeat.
        let ctx = TestCtx::new()
            .with_secret("gh", "stale-token")
            .with_refresh("gh", "another-refused-token");
        let err = run_block_with(&ctx, "github.list_issues", config.clone(), inputs([]))
            .await
            .unwrap_err();
        assert_eq!(ctx.refreshes().len(), 1);
        assert_eq!(count(), 5);
        assert!(
            err.message.contains("credential `gh`")
                && err.message.contains("refreshed once and refused again"),
            "{}",
            err.message
        );
        assert!(!err.message.contains("another-refused-token"));

        // The refresh fails: which credential, and what to do.
        let ctx = TestCtx::new()
            .with_secret("gh", "stale-token")
            .with_failing_refresh(
                "gh",
                "the provider refused refreshing the token: bad_refresh_token; sign in again with `agentloom credentials login github --name gh --client-id ID`",
            );
        let err = run_block_with(&ctx, "github.list_issues", config, inputs([]))
            .await
            .unwrap_err();
        assert_eq!(count(), 6);
        assert_eq!(err.class, agentloom_core::ErrorClass::Permanent);
        assert!(
            err.message.starts_with("GitHub refused the token of credential `gh` (HTTP 401) and getting a new one failed: the provider refused refreshing the token: bad_refresh_token; sign in again with `agentloom credentials login github --name gh"),
            "{}",
            err.message
        );
    }
}
