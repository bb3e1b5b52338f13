//! Recording and replaying a run's outbound calls (HTTP requests, MCP tool calls).
//!
//! The shared layers that leave the process (blocks' HTTP client, the MCP client) describe
//! each call as an [`OutboundCall`] and ask the run ([`crate::RunCtx::replay_call`]) whether
//! a recording answers it; otherwise they make it and hand the response to the run
//! ([`crate::RunCtx::record_call`]), which keeps it, redacted, in the run log.

use crate::error::BlockError;

/// One call leaving the process: enough to recognise it again in a later run.
#[derive(Clone, Copy, Debug)]
pub struct OutboundCall<'a> {
    /// `GET`, `POST`…, or `MCP` for a tool call.
    pub method: &'a str,
    /// The URL, or `mcp://{server}/{tool}`.
    pub url: &'a str,
    /// The request body (a tool call's arguments as JSON).
    pub body: &'a [u8],
}

/// A response as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What a run says about a call it is about to make.
#[derive(Debug)]
pub enum Replayed {
    /// Make the call (no replay, or a miss that goes live).
    Live,
    /// The recorded response: answer with it and send nothing.
    Answer(RecordedResponse),
    /// Replaying and nothing was recorded for it: fail the node with this.
    Missing(BlockError),
}

/// Keeps a call's response once it has been read whole. Made by
/// [`crate::RunCtx::record_call`]; dropping it records nothing.
pub struct CallRecording(Box<dyn FnOnce(RecordedResponse) + Send + Sync>);

impl CallRecording {
    pub fn new(keep: impl FnOnce(RecordedResponse) + Send + Sync + 'static) -> Self {
        Self(Box::new(keep))
    }

    /// Records `response`.
    pub fn keep(self, response: RecordedResponse) {
        (self.0)(response);
    }
}

impl std::fmt::Debug for CallRecording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallRecording")
    }
}

/// The message of a call a replay has no recording for.
pub fn not_recorded(node: &str, call: &OutboundCall<'_>) -> String {
    format!(
        "not recorded: {node} {} {}; run it live, or replay with --replay-miss live to make the calls that were not recorded",
        call.method, call.url
    )
}

/// An answer a block catalog got from outside the process while it was built, before any
/// run (an MCP server's tool list). Every run of the catalog keeps it with its calls, under
/// `source` (never a node id), so that replaying the run builds the same catalog without
/// asking again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogCall {
    /// Where in the graph file the answer comes from (`$.mcp_servers.NAME`).
    pub source: String,
    pub method: String,
    pub url: String,
    pub body: Vec<u8>,
    pub response: RecordedResponse,
}

impl CatalogCall {
    /// The call as a run's calls are keyed.
    pub fn call(&self) -> OutboundCall<'_> {
        OutboundCall {
            method: &self.method,
            url: &self.url,
            body: &self.body,
        }
    }
}
