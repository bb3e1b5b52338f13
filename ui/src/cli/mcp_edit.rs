//! `agentloom mcp --edit GRAPH`: serves the editing of one graph file as MCP tools over
//! stdio (or, with `--http ADDR`, streamable HTTP on loopback with a bearer token), so any
//! MCP client can build, check, run and fix a graph with the user's own model.
//!
//! The server itself ([`crate::runner::edit_server`]) is the app's too: every edit reads
//! the file as it is now, applies one operation with the rules a canvas edit obeys and
//! writes the file back through the app's save path. The trusted-graphs record is never
//! touched, so an edited file runs in safe mode until its user trusts it again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_engine::RunStore;
use tokio_util::sync::CancellationToken;

use crate::runner::edit_server::{EditServer, GraphFile};

/// Serves the editing tools for `path` until the client leaves (stdio) or Ctrl-C (HTTP at
/// `http`).
pub fn edit_command(
    path: PathBuf,
    workspace: PathBuf,
    store: Arc<RunStore>,
    http: Option<std::net::SocketAddr>,
) -> anyhow::Result<i32> {
    let what = path.display().to_string();
    let shutdown = CancellationToken::new();
    let server = EditServer::new(
        Arc::new(GraphFile::new(path)),
        workspace,
        Some(store),
        shutdown.clone(),
    );
    match http {
        Some(addr) => super::mcp_http::serve_http(server, addr, &what, shutdown),
        None => super::mcp_stdio::serve_stdio(server, shutdown),
    }
}

/// Whether `path` can be edited: a graph file, or one still to be made.
pub fn check_editable(path: &Path) -> Result<(), String> {
    crate::runner::edit_server::check_editable(path)
}
