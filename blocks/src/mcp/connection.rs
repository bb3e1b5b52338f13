//! One connection to an MCP server: a child process spoken to over stdio, or a server
//! reached at a URL over streamable HTTP.
//!
//! A stdio server starts with a clean environment (`PATH`, `HOME`, the locale, its declared
//! `env` and its `MCP_TOKEN`: never the secrets of agentloom's own environment) as the
//! leader of a process group of its own. A call is bounded: it fails when the tool has not
//! answered in time, and one message larger than [`MAX_MESSAGE_BYTES`] fails the call
//! waiting for it. A call that times out, is cancelled or breaks the protocol stops the
//! whole process group (helpers the server started included); the next call starts the
//! server again.

use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use agentloom_core::{McpServerDoc, REDACTED, Secret};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{DynamicTransportError, IntoTransport, StreamableHttpClientTransport};
use rmcp::{RoleClient, ServiceExt as _};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::http_client::McpHttpClient;
use super::server_process::{self, ServerProcess};

/// How long a server may take to start and answer the handshake and the tool list.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest message (one line of JSON-RPC) a stdio server may send.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Environment variables a stdio server gets from agentloom's own environment; everything
/// else it gets is declared for it (`env`, `MCP_TOKEN`).
fn inherited(name: &str) -> bool {
    matches!(name, "PATH" | "HOME" | "LANG" | "LANGUAGE" | "TZ") || name.starts_with("LC_")
}

/// A connected MCP server. Dropping the last handle closes it (and stops its processes).
pub struct McpConnection {
    name: String,
    server: McpServerDoc,
    token: Option<Secret>,
    /// `None` until the first call of a connection made from a recorded tool list.
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
}

/// Why a call did not return a result.
pub enum CallFailure {
    /// The run stopped the node.
    Cancelled,
    /// What went wrong, naming the server and the tool.
    Failed(String),
}

impl McpConnection {
    /// Starts or reaches the server and lists its tools. The error says what to fix.
    pub async fn connect(
        name: &str,
        server: &McpServerDoc,
        token: Option<Secret>,
    ) -> Result<(McpConnection, Vec<Tool>), String> {
        let hide_token = |message: String| redact_token(message, token.as_ref());
        let session = Session::start(server, token.as_ref())
            .await
            .map_err(hide_token)?;
        let tools = tokio::time::timeout(START_TIMEOUT, session.service.list_all_tools())
            .await
            .map_err(|_| "did not list its tools in time".to_owned())?
            .map_err(|e| hide_token(session.failure(&e, "cannot list its tools")))?;
        Ok((
            McpConnection {
                name: name.to_owned(),
                server: server.clone(),
                token,
                session: tokio::sync::Mutex::new(Some(Arc::new(session))),
            },
            tools,
        ))
    }

    /// A connection to a server whose tools are known from a recording: nothing is
    /// started or reached until a call is made (a replay answers its calls itself).
    pub fn unstarted(name: &str, server: &McpServerDoc, token: Option<Secret>) -> McpConnection {
        McpConnection {
            name: name.to_owned(),
            server: server.clone(),
            token,
            session: tokio::sync::Mutex::new(None),
        }
    }

    /// The server's name in the graph file.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The token the server was given, which the runs that call it keep out of their output.
    pub fn token(&self) -> Option<&Secret> {
        self.token.as_ref()
    }

    /// The live session, or a new one when the last one ended (its server was stopped or
    /// went away).
    async fn session(self: &Arc<Self>) -> Result<Arc<Session>, String> {
        let connection = self.clone();
        let starting = super::runtime().spawn(async move {
            let mut session = connection.session.lock().await;
            match session.as_ref() {
                Some(live) if live.is_usable() => Ok::<_, String>(live.clone()),
                _ => {
                    let fresh = Session::start(&connection.server, connection.token.as_ref())
                        .await
                        .map_err(|e| redact_token(e, connection.token.as_ref()))?;
                    let fresh = Arc::new(fresh);
                    *session = Some(fresh.clone());
                    Ok(fresh)
                }
            }
        });
        starting
            .await
            .map_err(|e| format!("the MCP task failed: {e}"))?
            .map_err(|e| format!("MCP server `{}`: {e}", self.name))
    }

    /// Calls `tool` with `arguments`, for at most `timeout`, until `cancel`. A transport
    /// failure names the server; a tool's own failure comes back as a result with
    /// `is_error`.
    pub async fn call(
        self: &Arc<Self>,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, CallFailure> {
        let session = tokio::select! {
            session = self.session() => session.map_err(CallFailure::Failed)?,
            () = cancel.cancelled() => return Err(CallFailure::Cancelled),
        };
        let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let call = AbortOnDrop(super::runtime().spawn({
            let session = session.clone();
            async move { session.service.call_tool(request).await }
        }));
        let mut broken = session.broken.subscribe();
        let failed = |why: &str| {
            CallFailure::Failed(format!(
                "MCP server `{}` failed while calling `{tool}`: {why}",
                self.name
            ))
        };
        tokio::select! {
            joined = call => match joined {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(error)) => {
                    let why = session.failure(&error, "the call failed");
                    session.stop(&why);
                    Err(failed(&why))
                }
                Err(error) => Err(failed(&format!("the call stopped: {error}"))),
            },
            Ok(reason) = broken.wait_for(Option::is_some) => {
                let why = reason.as_ref().cloned().unwrap_or_default();
                drop(reason);
                session.stop(&why);
                Err(failed(&why))
            }
            () = cancel.cancelled() => {
                session.stop(&format!("the server was stopped when a call to `{tool}` was cancelled"));
                Err(CallFailure::Cancelled)
            }
            () = tokio::time::sleep(timeout) => {
                let stopped = session.stop(&format!(
                    "the server was stopped when a call to `{tool}` timed out"
                ));
                Err(CallFailure::Failed(format!(
                    "MCP tool `{tool}` of server `{}` did not answer within {} ms (the node's `timeout_ms`){}",
                    self.name,
                    timeout.as_millis(),
                    if stopped { "; the server was stopped and starts again on the next call" } else { "" }
                )))
            }
        }
    }
}

/// One started server (or one HTTP session).
struct Session {
    service: RunningService<RoleClient, ()>,
    /// The process group of a stdio server.
    process: Option<ServerProcess>,
    /// Why the session can no longer be used, once it cannot.
    broken: Arc<watch::Sender<Option<String>>>,
}

impl Session {
    async fn start(server: &McpServerDoc, token: Option<&Secret>) -> Result<Session, String> {
        let broken = Arc::new(watch::Sender::new(None));
        match (&server.command, &server.url) {
            (Some(command), None) => {
                let mut process = tokio::process::Command::new(command);
                process
                    .args(&server.args)
                    .env_clear()
                    .envs(
                        std::env::vars_os()
                            .filter(|(name, _)| name.to_str().is_some_and(inherited)),
                    )
                    .envs(&server.env)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null());
                // Its own group, so that stopping it stops the helpers it started.
                server_process::prepare(&mut process);
                if let Some(token) = token {
                    process.env("MCP_TOKEN", token.expose());
                }
                let mut child = process
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                let stopper = ServerProcess::of(&child);
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err(format!(
                        "cannot start `{command}`: no standard input and output"
                    ));
                };
                // The child is reaped in the background once it exits; the group is
                // stopped through `stopper`.
                drop(child);
                let reader = BoundedLines {
                    inner: stdout,
                    line_bytes: 0,
                    broken: broken.clone(),
                };
                // Lines are bounded by `reader`, which fails the transport instead of
                // dropping an oversized line while its call waits.
                let transport =
                    AsyncRwTransport::new_client(reader, stdin).with_max_line_length(usize::MAX);
                let service = handshake(transport, &format!("`{command}`"), &broken).await?;
                Ok(Session {
                    service,
                    process: Some(stopper),
                    broken,
                })
            }
            (None, Some(url)) => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = token {
                    config = config.auth_header(token.expose());
                }
                let transport =
                    StreamableHttpClientTransport::with_client(McpHttpClient::new()?, config);
                let service = handshake(transport, &format!("`{url}`"), &broken).await?;
                Ok(Session {
                    service,
                    process: None,
                    broken,
                })
            }
            (Some(_), Some(_)) => {
                Err("give either `command` (stdio) or `url` (HTTP), not both".to_owned())
            }
            (None, None) => {
                Err("give `command` (a program started with stdio) or `url`".to_owned())
            }
        }
    }

    fn is_usable(&self) -> bool {
        self.broken.borrow().is_none() && !self.service.is_transport_closed()
    }

    /// What `error` means: the reason the session broke when it did, else the error's own
    /// words after `context`.
    fn failure(&self, error: &ServiceError, context: &str) -> String {
        if let Some(reason) = self.broken.borrow().as_ref() {
            return reason.clone();
        }
        format!("{context}: {}", call_failure(error))
    }

    /// Stops a stdio server's whole process group and ends the session (`why` tells other
    /// calls waiting on it); returns whether there was a process to stop (an HTTP session
    /// stays).
    fn stop(&self, why: &str) -> bool {
        let Some(process) = &self.process else {
            return false;
        };
        self.broken.send_if_modified(|reason| {
            let first = reason.is_none();
            reason.get_or_insert_with(|| why.to_owned());
            first
        });
        process.stop();
        true
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(process) = &self.process {
            process.stop();
        }
    }
}

/// A server's stdout, failing (and saying why in `broken`) once one line grows past
/// [`MAX_MESSAGE_BYTES`].
struct BoundedLines<R> {
    inner: R,
    line_bytes: usize,
    broken: Arc<watch::Sender<Option<String>>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let too_long = || {
            std::io::Error::other(format!(
                "the server sent a message larger than {} MiB, the limit for one message",
                MAX_MESSAGE_BYTES / (1024 * 1024)
            ))
        };
        if this.line_bytes > MAX_MESSAGE_BYTES {
            return Poll::Ready(Err(too_long()));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let mut lines = buf.filled()[before..].split(|&byte| byte == b'\n');
        if let Some(rest_of_line) = lines.next() {
            this.line_bytes += rest_of_line.len();
        }
        for line in lines {
            if this.line_bytes > MAX_MESSAGE_BYTES {
                break;
            }
            this.line_bytes = line.len();
        }
        if this.line_bytes > MAX_MESSAGE_BYTES {
            let error = too_long();
            this.broken.send_replace(Some(error.to_string()));
            return Poll::Ready(Err(error));
        }
        Poll::Ready(Ok(()))
    }
}

/// Aborts the task when the call is dropped (its node stopped, or it timed out).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `text` with `token` replaced by [`REDACTED`].
pub(crate) fn redact_token(text: String, token: Option<&Secret>) -> String {
    match token.map(Secret::expose) {
        Some(token) if token.len() >= 4 && text.contains(token) => text.replace(token, REDACTED),
        _ => text,
    }
}

/// The MCP handshake over `transport` to `server` (named for the messages), within
/// [`START_TIMEOUT`].
async fn handshake<T, E, A>(
    transport: T,
    server: &str,
    broken: &watch::Sender<Option<String>>,
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
            let why = broken
                .borrow()
                .clone()
                .unwrap_or_else(|| handshake_failure(&e));
            format!("{server} did not complete the MCP handshake: {why}")
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
