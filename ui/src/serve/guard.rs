//! Who `serve` answers: only requests addressed to it by name (the `Host` it listens on, so a
//! DNS-rebinding page cannot reach it), never a state change sent by another site's page
//! (`Origin`), and, with a token, only requests that carry it.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// What a request must match to be served.
pub struct Guard {
    /// `Host` values that name this server (lower case, with the port).
    hosts: Vec<String>,
    /// `Origin` values of pages served from this server.
    origins: Vec<String>,
    /// The bearer token every request must carry, if one was set.
    token: Option<String>,
}

impl Guard {
    /// The guard of a server listening on `host` (as given to `--host`) and `port`.
    pub fn new(host: &str, port: u16, token: Option<String>) -> Guard {
        let mut names = vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
            "[::1]".to_owned(),
        ];
        let given = host_in_url(host);
        if !names.contains(&given) {
            names.push(given);
        }
        let mut hosts = Vec::new();
        let mut origins = Vec::new();
        for name in names {
            hosts.push(format!("{name}:{port}"));
            origins.push(format!("http://{name}:{port}"));
            if port == 80 {
                hosts.push(name.clone());
                origins.push(format!("http://{name}"));
            }
        }
        Guard {
            hosts,
            origins,
            token: token.filter(|t| !t.is_empty()),
        }
    }

    fn check(
        &self,
        method: &Method,
        uri: &axum::http::Uri,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        if uri.scheme().is_some() || uri.authority().is_some() {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "absolute-form request targets are not served: send the path only (e.g. `POST /ap/v1/agent/tasks`) with a Host header",
            ));
        }
        let Some(host) = headers.get(header::HOST) else {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "the request has no Host header; send `Host: 127.0.0.1:PORT` (or the --host this server listens on)",
            ));
        };
        if !self.hosts.contains(&lower_text(host)) {
            return Err(Refusal::new(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "this server answers only requests addressed to {}; the Host header names another",
                    self.hosts.join(", ")
                ),
            ));
        }
        if let Some(token) = &self.token {
            let given = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            if !given.is_some_and(|given| same_secret(given.as_bytes(), token.as_bytes())) {
                return Err(Refusal::new(
                    StatusCode::UNAUTHORIZED,
                    "this server needs `Authorization: Bearer TOKEN` with the token given to --token (or AGENTLOOM_SERVE_TOKEN)",
                ));
            }
        }
        let changes_state = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        if changes_state
            && let Some(origin) = headers.get(header::ORIGIN)
            && !self.origins.contains(&lower_text(origin))
        {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "requests from another site's page may not change anything here (the Origin header is not this server's)",
            ));
        }
        Ok(())
    }
}

/// `host` as it appears in a URL: IPv6 addresses in brackets, names in lower case.
fn host_in_url(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Err(_) => host,
    }
}

/// Whether `host` (as given to `--host`) listens on loopback only.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim();
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Compares in time independent of where the first difference is.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// A header's value trimmed and in lower case (empty when it is not text).
fn lower_text(value: &header::HeaderValue) -> String {
    value
        .to_str()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Why a request is not served: its status and the message answered as `{"error": …}`.
struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut answer = (self.status, Json(json!({"error": self.message}))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            answer.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        answer
    }
}

/// The middleware: refuses what [`Guard`] does not let through, before any route runs.
pub async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    match guard.check(request.method(), request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => {
            tracing::warn!(
                "refused {} {}: {}",
                request.method(),
                request.uri().path(),
                refused.status
            );
            refused.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    #[test]
    fn loopback_hosts() {
        for host in ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["0.0.0.0", "192.168.1.2", "::", "example.com"] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn hosts_name_the_port_and_the_given_address() {
        let guard = Guard::new("::1", 8123, None);
        assert!(guard.hosts.contains(&"[::1]:8123".to_owned()));
        assert!(guard.hosts.contains(&"localhost:8123".to_owned()));
        let guard = Guard::new("192.0.2.7", 80, Some("t".to_owned()));
        assert!(guard.hosts.contains(&"192.0.2.7:80".to_owned()));
        assert!(guard.hosts.contains(&"192.0.2.7".to_owned()));
        assert!(guard.origins.contains(&"http://192.0.2.7".to_owned()));
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
    }
}
