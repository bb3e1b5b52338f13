//! One MCP session on stdio, for both `agentloom mcp` servers (graphs as tools, and the
//! editing of one graph).

use anyhow::Context as _;
use rmcp::{ServerHandler, ServiceExt as _};
use tokio_util::sync::CancellationToken;

/// Serves `server` on stdio until the client leaves or Ctrl-C, then cancels `shutdown`.
pub(super) fn serve_stdio(
    server: impl ServerHandler,
    shutdown: CancellationToken,
) -> anyhow::Result<i32> {
    let runtime = super::async_runtime()?;
    runtime.block_on(async move {
        let service = server
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP session could not start on stdio")?;
        tokio::select! {
            quit = service.waiting() => { quit.context("the MCP session failed")?; }
            _ = tokio::signal::ctrl_c() => {}
        }
        // Runs still going (the client left mid-call) are stopped and recorded as cancelled.
        shutdown.cancel();
        Ok(0)
    })
}
