//! One MCP server over streamable HTTP on a loopback address, for `agentloom mcp --edit
//! GRAPH --http ADDR`. Every request must carry `Authorization: Bearer TOKEN`; one without
//! it, or with another token, is answered 401 before it reaches the MCP service.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

/// The variable that gives the token instead of a generated one.
pub(super) const TOKEN_ENV: &str = "AGENTLOOM_MCP_TOKEN";

/// The largest request body accepted: a graph edit is a few kilobytes.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Refuses an address other machines could reach: the server edits a file on this one.
pub(super) fn check_loopback(addr: &SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "--http {addr}: the editing server listens only on a loopback address \
             (127.0.0.1:PORT or [::1]:PORT), so that no other machine can reach it"
        ))
    }
}

/// The bearer token: `AGENTLOOM_MCP_TOKEN` when set, else 32 random bytes in hex. `true`
/// when it was generated (and so must be shown to the user).
fn bearer_token() -> anyhow::Result<(String, bool)> {
    match std::env::var(TOKEN_ENV) {
        Ok(token) if token.trim().is_empty() => anyhow::bail!("{TOKEN_ENV} is set but empty"),
        Ok(token) => Ok((token.trim().to_owned(), false)),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("{TOKEN_ENV} is not valid UTF-8")
        }
        Err(std::env::VarError::NotPresent) => {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes)
                .map_err(|err| anyhow::anyhow!("cannot generate a token: {err}"))?;
            let token = bytes.iter().map(|b| format!("{b:02x}")).collect();
            Ok((token, true))
        }
    }
}

/// The token's digest: requests are compared by digest, which takes the same time
/// whatever part of a wrong token differs.
fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Lets a request through only with `Authorization: Bearer TOKEN`.
async fn require_token(
    State(expected): State<Arc<[u8; 32]>>,
    request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        // The scheme's name is case-insensitive (RFC 7235).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| digest(token.trim()));
    if given.as_ref() == Some(expected.as_ref()) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a valid `Authorization: Bearer TOKEN` header is required\n",
        )
            .into_response()
    }
}

/// Serves `server` at `http://ADDR/mcp` until Ctrl-C, then cancels `shutdown`.
pub(super) fn serve_http<S>(
    server: S,
    addr: SocketAddr,
    what: &str,
    shutdown: CancellationToken,
) -> anyhow::Result<i32>
where
    S: ServerHandler + Clone + Send + Sync + 'static,
{
    let (token, generated) = bearer_token()?;
    let runtime = super::async_runtime()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(["localhost".to_owned(), local.ip().to_string()])
            .with_max_request_body_bytes(MAX_BODY_BYTES)
            .with_cancellation_token(shutdown.clone());
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let router = axum::Router::new().route_service("/mcp", service).layer(
            axum::middleware::from_fn_with_state(Arc::new(digest(&token)), require_token),
        );
        eprintln!("Serving {what} over MCP at http://{local}/mcp");
        if generated {
            eprintln!("Send every request with the header: Authorization: Bearer {token}");
        } else {
            eprintln!("Send every request with the token from {TOKEN_ENV}");
        }
        drop(token);
        let stop = shutdown.clone();
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = tokio::signal::ctrl_c().await;
                // Ends the open sessions (and runs still going), so the server can stop.
                stop.cancel();
            })
            .await
            .context("the MCP HTTP server failed")?;
        shutdown.cancel();
        Ok(0)
    })
}
