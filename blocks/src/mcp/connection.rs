//! One live connection to an MCP server: a child process spoken to over stdio, or a server
//! reached at a URL over streamable HTTP.

use std::process::Stdio;
use std::time::Duration;

use agentloom_core::{McpServerDoc, Secret};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{
    DynamicTransportError, IntoTransport, StreamableHttpClientTransport, TokioChildProcess,
};
use rmcp::{RoleClient, ServiceExt as _};

use super::http_client::McpHttpClient;

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
                handshake(transport, &format!("`{command}`")).await?
            }
            (None, Some(url)) => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = &token {
                    config = config.auth_header(token.expose());
                }
                let transport =
                    StreamableHttpClientTransport::with_client(McpHttpClient::new()?, config);
                handshake(transport, &format!("`{url}`")).await?
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
                "MCP server `{}` failed while calling `{tool}`: {}",
                self.name,
                call_failure(&e)
            )
        })
    }
}

/// The MCP handshake over `transport` to `server` (named for the messages), within
/// [`START_TIMEOUT`].
async fn handshake<T, E, A>(
    transport: T,
    server: &str,
) -> Result<RunningService<RoleClient, ()>, String>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    tokio::time::timeout(START_TIMEOUT, ().serve(transport))
        .await
        .map_err(|_| {
            format!(
                "{server} did not answer the MCP handshake within {} s",
                START_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| {
            format!(
                "{server} did not complete the MCP handshake: {}",
                handshake_failure(&e)
            )
        })
}

/// What went wrong in the transport, in the user's terms: for an HTTP failure the innermost
/// cause ("Connection refused"), without rmcp's wrapping that names its internal types.
fn transport_failure(error: &DynamicTransportError) -> String {
    match error
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        Some(StreamableHttpError::Client(client_error)) => {
            let mut innermost: &dyn std::error::Error = client_error;
            while let Some(source) = innermost.source() {
                innermost = source;
            }
            innermost.to_string()
        }
        Some(StreamableHttpError::AuthRequired(_) | StreamableHttpError::InsufficientScope(_)) => {
            "the server refused the request (HTTP 401/403): give it a stored credential holding a valid token"
                .to_owned()
        }
        Some(other) => other.to_string(),
        None => error.error.to_string(),
    }
}

fn handshake_failure(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, .. } => transport_failure(error),
        other => other.to_string(),
    }
}

fn call_failure(error: &ServiceError) -> String {
    match error {
        ServiceError::TransportSend(error) => transport_failure(error),
        other => other.to_string(),
    }
}
