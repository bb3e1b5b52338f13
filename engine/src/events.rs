//! The typed event stream of a run. The CLI, the canvas and the run store all consume it.

use std::sync::Mutex;

use agentloom_core::{Usage, ValueMap};
use serde::{Deserialize, Serialize};

/// The state a run ends in (or is in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
    /// The process died while the run was going (found so afterwards).
    Interrupted,
    /// Paused until a person decides on a pending approval (`agentloom approve`/`reject`
    /// or the app resumes it).
    Waiting,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Waiting => "waiting",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        Some(match text {
            "running" => RunStatus::Running,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            "interrupted" => RunStatus::Interrupted,
            "waiting" => RunStatus::Waiting,
            _ => return None,
        })
    }
}

/// The state of one node within a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// Not reached (yet, or ever: the run stopped first).
    Pending,
    Queued,
    Running,
    AwaitingApproval,
    /// Paused at a breakpoint (before it starts or after it finished), waiting for a
    /// Continue, Step or Stop.
    AtBreakpoint,
    Done,
    Failed,
    Skipped,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Pending => "pending",
            NodeStatus::Queued => "queued",
            NodeStatus::Running => "running",
            NodeStatus::AwaitingApproval => "awaiting_approval",
            NodeStatus::AtBreakpoint => "at_breakpoint",
            NodeStatus::Done => "done",
            NodeStatus::Failed => "failed",
            NodeStatus::Skipped => "skipped",
        }
    }

    pub fn parse(text: &str) -> Option<NodeStatus> {
        Some(match text {
            "pending" => NodeStatus::Pending,
            "queued" => NodeStatus::Queued,
            "running" => NodeStatus::Running,
            "awaiting_approval" => NodeStatus::AwaitingApproval,
            "at_breakpoint" => NodeStatus::AtBreakpoint,
            "done" => NodeStatus::Done,
            "failed" => NodeStatus::Failed,
            "skipped" => NodeStatus::Skipped,
            _ => return None,
        })
    }

    pub fn is_final(self) -> bool {
        matches!(
            self,
            NodeStatus::Done | NodeStatus::Failed | NodeStatus::Skipped
        )
    }
}

/// One thing that happened in a run. `seq` orders events within the run.
///
/// A resumed run is the same run: its events go on after those of its earlier segments
/// (its `run_started` has a `seq` above 0, which tells the run log to keep what it holds of
/// the run), and it first restates the nodes that finished before: their `node_finished`
/// (or `node_failed`, `node_skipped`) with the attempts, duration and usage recorded then.
/// Its `run_finished` carries the usage and duration of the whole run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    pub seq: u64,
    /// Milliseconds since the run started (for a resumed run, its first start: the time it
    /// waited paused included).
    pub at_ms: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    RunStarted {
        run_id: String,
        graph_name: String,
        node_count: usize,
        inputs: ValueMap,
    },
    NodeQueued {
        node: String,
        /// The node's block kind, so that the log knows it for nodes of a sub-run too (they
        /// are not in the graph the run started with).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        block: String,
    },
    NodeStarted {
        node: String,
        attempt: u32,
        #[serde(default)]
        inputs: ValueMap,
    },
    /// A piece of streamed output (e.g. LLM tokens) for `port`.
    NodePartial {
        node: String,
        port: String,
        chunk: String,
    },
    /// Tokens and cost just reported by the node (an increment).
    NodeUsage {
        node: String,
        usage: Usage,
    },
    NodeRetrying {
        node: String,
        /// The attempt that failed.
        attempt: u32,
        error: String,
        wait_ms: u64,
    },
    NodeAwaitingApproval {
        node: String,
    },
    /// The run reached a breakpoint at this node: `values` are its resolved inputs
    /// (`before`) or its outputs (`after`), as they will go on unless edited.
    NodeAtBreakpoint {
        node: String,
        at: crate::BreakAt,
        #[serde(default)]
        values: ValueMap,
    },
    NodeFinished {
        node: String,
        #[serde(default)]
        outputs: ValueMap,
        attempts: u32,
        duration_ms: u64,
        usage: Usage,
        /// Whether redaction replaced a secret in `outputs`, as the run's one way out found
        /// it (`None`: not known, as for an event from before it was said): such outputs
        /// are not the node's, and a seed must not hand them on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outputs_redacted: Option<bool>,
    },
    NodeFailed {
        node: String,
        error: String,
        attempts: u32,
        duration_ms: u64,
        usage: Usage,
        /// The failure went to the node's wired `error` output; the run goes on.
        caught: bool,
    },
    NodeSkipped {
        node: String,
        reason: String,
        /// The node's block kind (see `NodeQueued`).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        block: String,
    },
    RunFinished {
        status: RunStatus,
        outputs: ValueMap,
        error: Option<String>,
        usage: Usage,
        duration_ms: u64,
    },
}

impl EventKind {
    /// The node this event is about, if any.
    pub fn node(&self) -> Option<&str> {
        match self {
            EventKind::NodeQueued { node, .. }
            | EventKind::NodeStarted { node, .. }
            | EventKind::NodePartial { node, .. }
            | EventKind::NodeUsage { node, .. }
            | EventKind::NodeRetrying { node, .. }
            | EventKind::NodeAwaitingApproval { node }
            | EventKind::NodeAtBreakpoint { node, .. }
            | EventKind::NodeFinished { node, .. }
            | EventKind::NodeFailed { node, .. }
            | EventKind::NodeSkipped { node, .. } => Some(node),
            EventKind::RunStarted { .. } | EventKind::RunFinished { .. } => None,
        }
    }

    /// The node this event is about, to rename it (a sub-run's node shown under its parent).
    pub fn node_mut(&mut self) -> Option<&mut String> {
        match self {
            EventKind::NodeQueued { node, .. }
            | EventKind::NodeStarted { node, .. }
            | EventKind::NodePartial { node, .. }
            | EventKind::NodeUsage { node, .. }
            | EventKind::NodeRetrying { node, .. }
            | EventKind::NodeAwaitingApproval { node }
            | EventKind::NodeAtBreakpoint { node, .. }
            | EventKind::NodeFinished { node, .. }
            | EventKind::NodeFailed { node, .. }
            | EventKind::NodeSkipped { node, .. } => Some(node),
            EventKind::RunStarted { .. } | EventKind::RunFinished { .. } => None,
        }
    }

    /// The snake_case name used in the run log (`node_finished`…).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::RunStarted { .. } => "run_started",
            EventKind::NodeQueued { .. } => "node_queued",
            EventKind::NodeStarted { .. } => "node_started",
            EventKind::NodePartial { .. } => "node_partial",
            EventKind::NodeUsage { .. } => "node_usage",
            EventKind::NodeRetrying { .. } => "node_retrying",
            EventKind::NodeAwaitingApproval { .. } => "node_awaiting_approval",
            EventKind::NodeAtBreakpoint { .. } => "node_at_breakpoint",
            EventKind::NodeFinished { .. } => "node_finished",
            EventKind::NodeFailed { .. } => "node_failed",
            EventKind::NodeSkipped { .. } => "node_skipped",
            EventKind::RunFinished { .. } => "run_finished",
        }
    }
}

/// A consumer of run events. Called on the executor's task: it must not block (hand the
/// event to a channel or a buffer and return).
pub trait EventSink: Send + Sync {
    fn emit(&self, event: &RunEvent);

    /// Whether [`EventSink::emit`] does anything with the events: a run builds none for a
    /// sink that drops them all. Asked once per run.
    fn wants_events(&self) -> bool {
        true
    }

    /// Keeps the response of one outbound call of the run (already redacted), for replay.
    /// Only the run log keeps them.
    fn record_call(&self, call: &RecordedCall) {
        let _ = call;
    }
}

/// The response of one outbound call (HTTP request, MCP tool call), as a run keeps it so
/// that a later run can be answered from it (`agentloom run --replay`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedCall {
    /// The node path (`agent`, or `call/render` inside a sub-run).
    pub node: String,
    pub attempt: u32,
    /// SHA-256 (hex) of the method, URL and body as sent.
    pub request_hash: String,
    pub method: String,
    /// As sent, with the run's secrets redacted.
    pub url: String,
    pub response: agentloom_core::RecordedResponse,
    /// Set when the body could not be checked for secrets (binary, compressed, or holding
    /// one in a form redaction cannot replace): the log keeps only its hash and size, and
    /// `response.body` is empty.
    pub body_omitted: Option<OmittedBody>,
}

/// What the run log keeps of a response body it may not keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OmittedBody {
    /// Why: "binary body", "compressed body", "body carrying a secret".
    pub reason: String,
    /// SHA-256 (hex) of the body as received.
    pub sha256: String,
    pub bytes: usize,
}

/// Discards every event.
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: &RunEvent) {}

    fn wants_events(&self) -> bool {
        false
    }
}

/// Sends every event to several sinks in order.
pub struct FanoutSink(pub Vec<std::sync::Arc<dyn EventSink>>);

impl EventSink for FanoutSink {
    fn emit(&self, event: &RunEvent) {
        for sink in &self.0 {
            sink.emit(event);
        }
    }

    fn wants_events(&self) -> bool {
        self.0.iter().any(|sink| sink.wants_events())
    }

    fn record_call(&self, call: &RecordedCall) {
        for sink in &self.0 {
            sink.record_call(call);
        }
    }
}

/// Keeps every event in memory (tests, small tools).
#[derive(Default)]
pub struct CollectSink(Mutex<Vec<RunEvent>>);

impl CollectSink {
    pub fn events(&self) -> Vec<RunEvent> {
        self.0
            .lock()
            .map(|events| events.clone())
            .unwrap_or_default()
    }
}

impl EventSink for CollectSink {
    fn emit(&self, event: &RunEvent) {
        if let Ok(mut events) = self.0.lock() {
            events.push(event.clone());
        }
    }
}
