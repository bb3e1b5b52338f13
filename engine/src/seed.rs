//! Seeding a run with what an earlier run (or the graph file) already knows.
//!
//! A seeded node does not run: it finishes at once with the given outputs (its
//! `node_finished` event has `attempts: 0`), and its dependents run from them. This is how a
//! paused run resumes without re-running its finished nodes, how "run from here" reuses the
//! upstream outputs of the last run, and how pinned outputs replace a node's work.
//!
//! A resumed run is the same run: its seed also says what the earlier segments did
//! ([`EarlierSegments`]), so that its usage, duration, steps, cost budget and node rows go on
//! from there instead of starting again from zero.

use std::collections::{BTreeMap, BTreeSet};

use agentloom_core::{ApprovalDecision, Usage, ValidGraph, Value, ValueMap};

use crate::run_state::NodeProgress;

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
    /// Set when the run resumes a paused one under its id ([`crate::RunStore::resume_seed`]):
    /// what the run did before, which the resumed run's totals, limits and node rows include.
    pub earlier: Option<EarlierSegments>,
    /// Node id → the outputs it finished with as the run log keeps them, with a secret
    /// replaced by the marker: not the node's own values, so not in `outputs`. Such a node
    /// runs again, so that its dependents get the real value; [`RunSeed::settle_redacted`]
    /// decides before the run starts.
    pub redacted: BTreeMap<String, ValueMap>,
}

impl RunSeed {
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty() && self.decisions.is_empty()
    }

    /// Settles the nodes whose recorded outputs held a secret ([`RunSeed::redacted`])
    /// before a run of `graph` starts from this seed: one whose dependents are all seeded
    /// is seeded too (nothing reads its outputs); any other runs again, unless running it
    /// has side effects (it would send, write or delete twice): then the seed is refused,
    /// naming the node, why, and what to do instead. A node inside a sub-run (`call/x`)
    /// goes with the node that calls it: nothing when that is seeded, refused when it goes
    /// on.
    pub fn settle_redacted(&mut self, graph: &ValidGraph) -> Result<(), String> {
        let mut redacted = std::mem::take(&mut self.redacted);
        // Dependents first: a node read only by nodes that are seeded after all is too.
        for &index in graph.topo_order.iter().rev() {
            let node = &graph.nodes[index];
            let Some(outputs) = redacted.remove(&node.id) else {
                continue;
            };
            let read = node.outputs.iter().any(|fanout| {
                fanout
                    .targets
                    .iter()
                    .any(|&(target, _)| !self.outputs.contains_key(&graph.nodes[target].id))
            });
            if !read {
                self.outputs.insert(node.id.clone(), outputs);
                continue;
            }
            if node.node.side_effects().unwrap_or(node.meta.side_effects) {
                return Err(redacted_side_effect_message(&node.id, &node.meta.title));
            }
            self.redacted.insert(node.id.clone(), outputs);
        }
        // A sub-run's node would run again inside its calling node, when that goes on: its
        // block and config are the sub-run's, not the graph's, so whether that repeats a side
        // effect cannot be told here, and it is refused. A seeded calling node runs no
        // sub-run; a node the graph does not have is dropped.
        for id in redacted.into_keys() {
            if let Some((owner, _)) = id.split_once('/')
                && graph.index_of(owner).is_some()
                && !self.outputs.contains_key(owner)
            {
                return Err(format!(
                    "node `{id}`'s output held a secret, which the run log does not keep, and `{id}` runs inside `{owner}`, which goes on: whether running it again would repeat a side effect cannot be told; rerun the graph from the start"
                ));
            }
        }
        Ok(())
    }
}

/// Why a run cannot go on from a log whose outputs of node `id` (a `title` block, with side
/// effects) held a secret, and what to do instead.
fn redacted_side_effect_message(id: &str, title: &str) -> String {
    format!(
        "node `{id}`'s output held a secret, which the run log does not keep, and `{id}` ({title}) has side effects: running it again to get the secret back would do them twice; rerun the graph from the start, or fork from before `{id}`"
    )
}

/// What a run did before it paused (in one segment or several): a resumed run goes on from
/// it. The executor reports the run's usage and duration with it, counts its steps and cost
/// against the run's limits, and restates its nodes' rows in the events of the resumed run
/// (a node that finished earlier finishes again with its recorded attempts, duration and
/// usage, never billed twice; a node that runs again adds what it had spent before).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EarlierSegments {
    /// Unix milliseconds of the run's start: the resumed run's events count their `at_ms`
    /// from it, as those of its earlier segments did.
    pub started_at_ms: u64,
    /// How long the run went on before (the time it waited paused not counted).
    pub duration_ms: u64,
    /// Tokens and cost the run spent before, its sub-runs included.
    pub usage: Usage,
    /// Nodes it started before (counted against `max_steps`).
    pub steps: u64,
    /// The `seq` of the resumed run's first event: after every event recorded before.
    pub next_seq: u64,
    /// Node id (`call/render` inside a sub-run) → what was recorded of it, for every node
    /// that got further than pending.
    pub nodes: BTreeMap<String, NodeProgress>,
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
