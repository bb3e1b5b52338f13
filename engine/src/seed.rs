//! Seeding a run with what an earlier run (or the graph file) already knows.
//!
//! A seeded node does not run: it finishes at once with the given outputs (its
//! `node_finished` event has `attempts: 0`), and its dependents run from them. This is how a
//! paused run resumes without re-running its finished nodes, how "run from here" reuses the
//! upstream outputs of the last run, and how pinned outputs replace a node's work.

use std::collections::{BTreeMap, BTreeSet};

use agentloom_core::{ApprovalDecision, ValidGraph, Value, ValueMap};

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

/// `from` and every node that depends on it, directly or not: what "run from here" runs
/// again (the rest reuses its outputs). Empty when the graph has no node `from`.
pub fn downstream_of(graph: &ValidGraph, from: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut stack: Vec<usize> = graph
        .nodes
        .iter()
        .position(|n| n.id == from)
        .into_iter()
        .collect();
    while let Some(index) = stack.pop() {
        if !found.insert(graph.nodes[index].id.clone()) {
            continue;
        }
        for fanout in &graph.nodes[index].outputs {
            stack.extend(fanout.targets.iter().map(|&(target, _)| target));
        }
    }
    found
}
