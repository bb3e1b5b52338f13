//! `agentloom mcp --edit GRAPH --http ADDR`: the editing server's routes
//! ([`crate::runner::edit_server::http`], the app's too) on a loopback address until
//! Ctrl-C, with the token from `AGENTLOOM_MCP_TOKEN` or a generated one printed once.

use std::net::SocketAddr;

use anyhow::Context as _;
use rmcp::ServerHandler;
use tokio_util::sync::CancellationToken;

use crate::runner::edit_server::http;

/// The variable that gives the token instead of a generated one.
pub(super) const TOKEN_ENV: &str = "AGENTLOOM_MCP_TOKEN";

/// Refuses an address other machines could reach: the server edits a file on this one.
pub(super) fn check_loopback(addr: &SocketAddr) -> Result<(), String> {
    http::check_loopback(addr)
}

/// The bearer token: `AGENTLOOM_MCP_TOKEN` when set, else a generated one. `true` when it
/// was generated (and so must be shown to the user).
fn bearer_token() -> anyhow::Result<(String, bool)> {
    match std::env::var(TOKEN_ENV) {
        Ok(token) if token.trim().is_empty() => anyhow::bail!("{TOKEN_ENV} is set but empty"),
        Ok(token) => Ok((token.trim().to_owned(), false)),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("{TOKEN_ENV} is not valid UTF-8")
        }
        Err(std::env::VarError::NotPresent) => {
            Ok((http::generate_token().map_err(anyhow::Error::msg)?, true))
        }
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
        let router = http::router(server, local, &token, shutdown.clone());
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
