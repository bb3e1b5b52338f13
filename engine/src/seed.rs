//! Seeding a run with what an earlier run (or the graph file) already knows.
//!
//! A seeded node does not run: it finishes at once with the given outputs (its
//! `node_finished` event has `attempts: 0`), and its dependents run from them. This is how a
//! paused run resumes without re-running its finished nodes, how "run from here" reuses the
//! upstream outputs of the last run, and how pinned outputs replace a node's work.

use std::collections::BTreeMap;

use agentloom_core::{ApprovalDecision, Value, ValueMap};

/// What a run starts from besides its inputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunSeed {
    /// Node id → the outputs it finished with; these nodes do not run.
    pub outputs: BTreeMap<String, ValueMap>,
    /// Graph outputs already set by seeded nodes (a `graph.output` does not run again).
    pub graph_outputs: ValueMap,
    /// Node id → the decision a person made on the approval it was waiting for; the node's
    /// next approval request gets it instead of asking again.
    pub decisions: BTreeMap<String, ApprovalDecision>,
    /// Node id → the checkpoint stored with that approval ([`agentloom_core::RunCtx::resume_checkpoint`]).
    pub checkpoints: BTreeMap<String, Value>,
    /// The run the outputs come from, when they do.
    pub from_run: Option<String>,
}

impl RunSeed {
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty() && self.decisions.is_empty()
    }
}
