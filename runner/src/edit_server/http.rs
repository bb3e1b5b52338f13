//! The editing server over streamable HTTP on a loopback address. Every request must carry
//! `Authorization: Bearer TOKEN`; one without it, or with another token, is answered 401
//! before it reaches the MCP service. `agentloom mcp --edit GRAPH --http ADDR` serves a
//! [`router`] until Ctrl-C; the app starts a [`RunningServer`] for its open document.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

/// The largest request body accepted: a graph edit is a few kilobytes.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How long stopping waits for the listening socket to close.
const STOP_WAIT: Duration = Duration::from_secs(3);

/// Refuses an address other machines could reach: the server edits a graph on this one.
pub fn check_loopback(addr: &SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "--http {addr}: the editing server listens only on a loopback address \
             (127.0.0.1:PORT or [::1]:PORT), so that no other machine can reach it"
        ))
    }
}

/// A fresh bearer token: 32 random bytes in hex.
pub fn generate_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|err| format!("cannot generate a token: {err}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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

/// The routes serving `server` at `/mcp` for a listener on `local`, every request checked
/// for `token`. Cancelling `shutdown` ends the open sessions.
pub fn router<S>(
    server: S,
    local: SocketAddr,
    token: &str,
    shutdown: CancellationToken,
) -> axum::Router
where
    S: ServerHandler + Clone + Send + Sync + 'static,
{
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(["localhost".to_owned(), local.ip().to_string()])
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(shutdown);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(digest(token)),
            require_token,
        ))
}

/// A server listening on 127.0.0.1 at a port of its own, with a fresh token, until it is
/// stopped (or dropped): then the port is closed and the token is worth nothing.
pub struct RunningServer {
    local: SocketAddr,
    token: String,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Disconnected once the serving task has ended and its listener is closed.
    closed: std::sync::mpsc::Receiver<()>,
}

impl RunningServer {
    /// Starts serving `server` on `runtime`. `shutdown` is cancelled when it stops.
    pub fn start<S>(
        runtime: &tokio::runtime::Handle,
        server: S,
        shutdown: CancellationToken,
    ) -> Result<RunningServer, String>
    where
        S: ServerHandler + Clone + Send + Sync + 'static,
    {
        let token = generate_token()?;
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .map_err(|err| format!("cannot listen on 127.0.0.1: {err}"))?;
        let local = listener
            .local_addr()
            .map_err(|err| format!("cannot listen on 127.0.0.1: {err}"))?;
        let routes = router(server, local, &token, shutdown.clone());
        let stop = shutdown.clone();
        let (closed_tx, closed) = std::sync::mpsc::channel::<()>();
        let task = runtime.spawn(async move {
            // Dropped last, with the listener: tells `stop` the port is closed.
            let _closing = closed_tx;
            let listener = match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => listener,
                Err(err) => {
                    tracing::warn!(error = %err, "the editing server could not listen");
                    return;
                }
            };
            let served = axum::serve(listener, routes)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
            if let Err(err) = served {
                tracing::warn!(error = %err, "the editing server failed");
            }
        });
        Ok(RunningServer {
            local,
            token,
            shutdown,
            task: Some(task),
            closed,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The URL an MCP client connects to.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.local)
    }

    /// The bearer token every request must carry.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Stops serving: the sessions end, the port closes, the token is forgotten.
    pub fn stop(&mut self) {
        self.shutdown.cancel();
        self.token.clear();
        let Some(task) = self.task.take() else { return };
        // A client still connected would hold a graceful stop open; the port closes now.
        task.abort();
        let _ = self.closed.recv_timeout(STOP_WAIT);
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.stop();
    }
}
