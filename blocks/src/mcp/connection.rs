//! One live connection to an MCP server: a child process spoken to over stdio.

use std::process::Stdio;
use std::time::Duration;

use agentloom_core::{McpServerDoc, Secret};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt as _};

/// How long a server may take to start and answer the handshake and the tool list.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A connected MCP server. Dropping the last handle closes it (and stops its process).
pub struct McpConnection {
    name: String,
    service: RunningService<RoleClient, ()>,
}

impl McpConnection {
    /// Starts or reaches the server and lists its tools. The error says what to fix.
    pub async fn connect(
        name: &str,
        server: &McpServerDoc,
        token: Option<Secret>,
    ) -> Result<(McpConnection, Vec<Tool>), String> {
        let service = match (&server.command, &server.url) {
            (Some(command), None) => {
                let mut process = tokio::process::Command::new(command);
                process.args(&server.args).envs(&server.env);
                if let Some(token) = &token {
                    process.env("MCP_TOKEN", token.expose());
                }
                let (transport, _stderr) = TokioChildProcess::builder(process)
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                tokio::time::timeout(START_TIMEOUT, ().serve(transport))
                    .await
                    .map_err(|_| {
                        format!(
                            "`{command}` did not answer the MCP handshake within {} s",
                            START_TIMEOUT.as_secs()
                        )
                    })?
                    .map_err(|e| format!("`{command}` did not complete the MCP handshake: {e}"))?
            }
            (None, Some(url)) => {
                return Err(format!(
                    "`{url}`: streamable HTTP servers are not supported yet; start the server with `command` (stdio)"
                ));
            }
            (Some(_), Some(_)) => {
                return Err("give either `command` (stdio) or `url` (HTTP), not both".to_owned());
            }
            (None, None) => {
                return Err("give `command` (a program started with stdio) or `url`".to_owned());
            }
        };
        let tools = tokio::time::timeout(START_TIMEOUT, service.list_all_tools())
            .await
            .map_err(|_| "did not list its tools in time".to_owned())?
            .map_err(|e| format!("cannot list its tools: {e}"))?;
        Ok((
            McpConnection {
                name: name.to_owned(),
                service,
            },
            tools,
        ))
    }

    /// The server's name in the graph file.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Calls `tool` with `arguments`. A transport failure is an error naming the server;
    /// a tool's own failure comes back as a result with `is_error`.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallToolResult, String> {
        let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        self.service.call_tool(request).await.map_err(|e| {
            format!(
                "MCP server `{}` failed while calling `{tool}`: {e}",
                self.name
            )
        })
    }
}
