//! The project's own streamable-HTTP MCP client, as the editing tests use it against an
//! editing server on loopback.
#![allow(dead_code, reason = "each test file uses a part")]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use agentloom_blocks::mcp::{CallFailure, McpConnection};
use agentloom_core::{McpServerDoc, Secret};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Connects to the server at `url` with `token` as its bearer token.
pub async fn connect(url: &str, token: &str) -> Result<Arc<McpConnection>, String> {
    let server = McpServerDoc {
        url: Some(url.to_owned()),
        ..McpServerDoc::default()
    };
    McpConnection::connect("editor", &server, Some(Secret::new(token)))
        .await
        .map(|(connection, _tools)| Arc::new(connection))
}

/// Calls `tool`: its structured answer, or the failure's or the tool error's text.
pub async fn call_tool(
    connection: &Arc<McpConnection>,
    tool: &str,
    args: Value,
) -> Result<Value, String> {
    let result = connection
        .call(
            tool,
            args.as_object().unwrap().clone(),
            Duration::from_secs(60),
            &CancellationToken::new(),
        )
        .await;
    let result = match result {
        Ok(result) => result,
        Err(CallFailure::Failed(message)) => return Err(message),
        Err(CallFailure::Cancelled) => return Err(format!("{tool} was cancelled")),
    };
    if result.is_error == Some(true) {
        return Err(format!("{:?}", result.content));
    }
    Ok(result.structured_content.unwrap_or_default())
}
