//! The one reducer of run events: what a run's event stream says about the run and each
//! node. The run-log writer keeps each node's [`NodeProgress`] with its batching (values as
//! the JSON it writes), the app holds a [`RunState`] for the run it shows, and a run read
//! back from the log converts into one (`RunState::from(&RunDetail)`, in the store), so the
//! live view and the recorded run agree.

use std::collections::{BTreeMap, BTreeSet};

use agentloom_core::{GraphDoc, Usage, ValueMap};
use serde::{Deserialize, Serialize};

use crate::events::{EventKind, NodeStatus, RunStatus};

/// Streamed output kept per node port; beyond it the text stops growing (the node's
/// outputs hold the final value).
pub const MAX_PARTIAL_BYTES: usize = 1 << 20;

/// How a node's input and output values are kept: whole ([`ValueMap`], the live view and
/// a run read back) or as the run-log writer needs them.
pub trait KeptValues: Default {
    fn keep(&mut self, values: &ValueMap);
}

impl KeptValues for ValueMap {
    fn keep(&mut self, values: &ValueMap) {
        self.clone_from(values);
    }
}

/// What is known of one node of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeProgress<V = ValueMap> {
    /// The block kind (empty until the run named it, or when the graph does not list the
    /// node).
    pub block: String,
    pub status: NodeStatus,
    pub attempts: u32,
    pub duration_ms: Option<u64>,
    /// The inputs of the last attempt.
    pub inputs: V,
    pub outputs: V,
    pub error: Option<String>,
    /// The failure went to the node's `error` output and the run went on.
    pub error_caught: bool,
    pub skip_reason: Option<String>,
    /// Streamed output of the current attempt, per port, while the node runs (kept when
    /// the node fails or the run stops before the node finishes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub partial: BTreeMap<String, String>,
    pub usage: Usage,
    /// The run was stopped while this node waited or ran (said by [`RunState`], from the
    /// run's end; not stored).
    #[serde(skip)]
    pub cancelled: bool,
}

impl<V: Default> Default for NodeProgress<V> {
    fn default() -> Self {
        NodeProgress {
            block: String::new(),
            status: NodeStatus::Pending,
            attempts: 0,
            duration_ms: None,
            inputs: V::default(),
            outputs: V::default(),
            error: None,
            error_caught: false,
            skip_reason: None,
            partial: BTreeMap::new(),
            usage: Usage::default(),
            cancelled: false,
        }
    }
}

impl<V: KeptValues> NodeProgress<V> {
    /// Applies one event about this node (others change nothing). The block kind an event
    /// names is left to the caller, which may keep it elsewhere.
    pub fn apply(&mut self, kind: &EventKind) {
        match kind {
            EventKind::RunStarted { .. } | EventKind::RunFinished { .. } => {}
            // A queued event that arrives late never undoes a finish.
            EventKind::NodeQueued { .. } => {
                if !self.status.is_final() {
                    self.status = NodeStatus::Queued;
                }
            }
            EventKind::NodeStarted {
                attempt, inputs, ..
            } => {
                self.status = NodeStatus::Running;
                self.attempts = *attempt;
                self.inputs.keep(inputs);
                // A new attempt streams anew.
                self.partial.clear();
            }
            EventKind::NodePartial { port, chunk, .. } => {
                let text = self.partial.entry(port.clone()).or_default();
                if text.len() < MAX_PARTIAL_BYTES {
                    text.push_str(chunk);
                }
            }
            EventKind::NodeUsage { usage, .. } => self.usage += *usage,
            EventKind::NodeRetrying { attempt, error, .. } => {
                self.attempts = *attempt;
                self.error = Some(error.clone());
            }
            EventKind::NodeAwaitingApproval { .. } => {
                self.status = NodeStatus::AwaitingApproval;
            }
            EventKind::NodeAtBreakpoint { at, values, .. } => {
                self.status = NodeStatus::AtBreakpoint;
                match at {
                    crate::BreakAt::Before => self.inputs.keep(values),
                    crate::BreakAt::After => self.outputs.keep(values),
                }
            }
            EventKind::NodeFinished {
                outputs,
                attempts,
                duration_ms,
                usage,
                ..
            } => {
                self.status = NodeStatus::Done;
                self.attempts = *attempts;
                self.duration_ms = Some(*duration_ms);
                self.outputs.keep(outputs);
                self.error = None;
                self.partial.clear();
                self.usage = *usage;
            }
            EventKind::NodeFailed {
                error,
                attempts,
                duration_ms,
                usage,
                caught,
                ..
            } => {
                self.status = NodeStatus::Failed;
                self.attempts = *attempts;
                self.duration_ms = Some(*duration_ms);
                self.error = Some(error.clone());
                self.error_caught = *caught;
                // What it streamed before failing (an agent's steps) stays: no output
                // holds it.
                self.usage = *usage;
            }
            EventKind::NodeSkipped { reason, .. } => {
                self.status = NodeStatus::Skipped;
                self.skip_reason = Some(reason.clone());
            }
        }
    }
}

/// What is known of a run: live from its events, or read back from the run log.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunState {
    pub run_id: Option<String>,
    pub status: Option<RunStatus>,
    /// By node id; sub-run nodes as `{parent}/{node}`.
    pub nodes: BTreeMap<String, NodeProgress>,
    pub outputs: ValueMap,
    pub error: Option<String>,
    pub usage: Usage,
    pub duration_ms: Option<u64>,
    /// Nodes whose outputs were reused (an earlier run, pinned) rather than run.
    pub reused: BTreeSet<String>,
}

impl RunState {
    /// A run of `graph` about to start: every node pending, as the run log lists the nodes
    /// a run has not reached.
    pub fn starting(graph: &GraphDoc) -> RunState {
        RunState {
            status: Some(RunStatus::Running),
            nodes: graph
                .nodes
                .iter()
                .map(|node| {
                    let progress = NodeProgress {
                        block: node.block.clone(),
                        ..NodeProgress::default()
                    };
                    (node.id.clone(), progress)
                })
                .collect(),
            ..RunState::default()
        }
    }

    /// Applies one event of the run.
    pub fn apply(&mut self, kind: &EventKind) {
        match kind {
            EventKind::RunStarted { run_id, .. } => self.run_id = Some(run_id.clone()),
            EventKind::RunFinished {
                status,
                outputs,
                error,
                usage,
                duration_ms,
            } => {
                self.outputs.clone_from(outputs);
                self.error.clone_from(error);
                self.usage = *usage;
                self.duration_ms = Some(*duration_ms);
                self.end(*status);
            }
            _ => {
                let Some(id) = kind.node() else { return };
                // Finished without running: its outputs came from elsewhere.
                match kind {
                    EventKind::NodeFinished { attempts: 0, .. } => {
                        self.reused.insert(id.to_owned());
                    }
                    // A node that runs (a tool called later, say) is not reused.
                    EventKind::NodeStarted { .. } => {
                        self.reused.remove(id);
                    }
                    _ => {}
                }
                let node = self.nodes.entry(id.to_owned()).or_default();
                if let EventKind::NodeQueued { block, .. } | EventKind::NodeSkipped { block, .. } =
                    kind
                    && !block.is_empty()
                {
                    block.clone_into(&mut node.block);
                }
                node.apply(kind);
            }
        }
    }

    /// Applies the run's own report of its end (the executor's `RunReport`), which may say
    /// what its events did not (a run that stopped before it started, a recording that
    /// failed): its id and status, and its error unless the events said one.
    pub fn apply_report(&mut self, run_id: &str, status: RunStatus, error: Option<String>) {
        self.run_id = Some(run_id.to_owned());
        self.end(status);
        if self.error.is_none() {
            self.error = error;
        }
    }

    /// The run ended with `status`: what it left unfinished is cancelled if it stopped.
    fn end(&mut self, status: RunStatus) {
        self.status = Some(status);
        self.mark_cancelled();
    }

    /// After a stopped run, the nodes it left unfinished are cancelled.
    pub fn mark_cancelled(&mut self) {
        if !matches!(
            self.status,
            Some(RunStatus::Cancelled | RunStatus::Interrupted)
        ) {
            return;
        }
        // A node the stop interrupted reports the block error of a cancellation.
        let interrupted = agentloom_core::BlockError::cancelled().message;
        for node in self.nodes.values_mut() {
            node.cancelled = match node.status {
                NodeStatus::Queued
                | NodeStatus::Running
                | NodeStatus::AwaitingApproval
                | NodeStatus::AtBreakpoint => true,
                NodeStatus::Failed => node.error.as_deref() == Some(interrupted.as_str()),
                _ => false,
            };
        }
    }

    /// The node `id`, if the run has said anything of it.
    pub fn node(&self, id: &str) -> Option<&NodeProgress> {
        self.nodes.get(id)
    }
}
