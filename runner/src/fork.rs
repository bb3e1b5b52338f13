//! Forking a recorded run: a new run of a graph that reuses what its parent run computed
//! upstream of the edited values (seeded, not run again, not billed again), with the edited
//! nodes' outputs changed, and runs everything downstream of them again. The graph may have
//! changed since the parent ran: a node added or reconfigured since is never reused (it and
//! what depends on it run again), and an edit of such a node, of one that depends on it, or
//! of a removed one, is refused.

use std::collections::BTreeSet;

use agentloom_core::{GraphDoc, ValidGraph};
use agentloom_engine::{
    ForkEdit, ForkRecord, GraphChanges, HitPort, NodeStatus, RunRow, RunSeed, RunStore,
    checked_value, downstream_of,
};

/// The nodes `current` added, removed or reconfigured (block, config, timeout, retry, pins,
/// bypass or incoming wires) since `parent`.
pub fn graph_changes(parent: &GraphDoc, current: &GraphDoc) -> GraphChanges {
    let wires_into = |doc: &GraphDoc, id: &str| -> BTreeSet<(String, String, String)> {
        doc.edges
            .iter()
            .filter(|edge| edge.to.0 == id)
            .map(|edge| (edge.from.0.clone(), edge.from.1.clone(), edge.to.1.clone()))
            .collect()
    };
    let mut changes = GraphChanges::default();
    for node in &current.nodes {
        match parent.nodes.iter().find(|p| p.id == node.id) {
            None => changes.added.push(node.id.clone()),
            Some(before) => {
                let same = before.block == node.block
                    && before.config == node.config
                    && before.timeout_ms == node.timeout_ms
                    && before.retry == node.retry
                    && before.pinned == node.pinned
                    && before.bypass == node.bypass
                    && wires_into(parent, &node.id) == wires_into(current, &node.id);
                if !same {
                    changes.reconfigured.push(node.id.clone());
                }
            }
        }
    }
    for node in &parent.nodes {
        if !current.nodes.iter().any(|c| c.id == node.id) {
            changes.removed.push(node.id.clone());
        }
    }
    changes
}

/// How a fork of a run starts.
#[derive(Clone, Debug)]
pub struct ForkPlan {
    /// What the run log keeps of it.
    pub record: ForkRecord,
    /// The parent's outputs for every node that is reused, the edited ones changed.
    pub seed: RunSeed,
    /// The nodes that run again.
    pub rerun: BTreeSet<String>,
}

/// Plans a fork of recorded run `parent` (an id or a unique prefix) of `graph` (as it is
/// now) with `edits` over its nodes' outputs; refuses, with a message naming what and where,
/// an unknown run, node or port, a value that does not fit its port, a node that did not
/// finish in the parent, or one that changed since.
pub fn plan_fork(
    store: &RunStore,
    parent: &str,
    graph: &ValidGraph,
    edits: &[ForkEdit],
) -> Result<ForkPlan, String> {
    let parent_id = store
        .resolve_run_id(parent)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "--fork {parent}: no such run in {}; `agentloom runs` lists them",
                store.path().display()
            )
        })?;
    let detail = store
        .get_run(&parent_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("--fork {parent}: no such run"))?;
    let parent_doc = detail
        .graph_doc()
        .map_err(|e| format!("--fork {parent_id}: its recorded graph cannot be read: {e}"))?;
    let changes = graph_changes(&parent_doc, &graph.doc);
    // A changed node, and what depends on it, runs again: nothing of them is reused.
    let mut changed_downstream: BTreeSet<String> = BTreeSet::new();
    for node in changes.added.iter().chain(&changes.reconfigured) {
        changed_downstream.extend(downstream_of(graph, node));
    }
    let mut edits_checked = Vec::new();
    for edit in edits {
        let Some(node) = graph.nodes.iter().find(|n| n.id == edit.node) else {
            return Err(format!(
                "--set {}.{}: the graph has no node `{}`",
                edit.node, edit.port, edit.node
            ));
        };
        if changes.reconfigured.contains(&edit.node) || changes.added.contains(&edit.node) {
            return Err(format!(
                "--set {}.{}: `{}` changed since run {parent_id} ran ({changes}); its recorded outputs are not what it gives now, so they cannot be edited: run the graph again instead",
                edit.node, edit.port, edit.node
            ));
        }
        if changed_downstream.contains(&edit.node) {
            return Err(format!(
                "--set {}.{}: `{}` depends on a node that changed since run {parent_id} ran ({changes}), so it runs again and an edit of its recorded outputs would be lost: run the graph again instead",
                edit.node, edit.port, edit.node
            ));
        }
        match detail.node(&edit.node).map(|row| row.status) {
            Some(NodeStatus::Done) => {}
            status => {
                return Err(format!(
                    "--set {}.{}: `{}` did not finish in run {parent_id} ({}), so it has no outputs to edit",
                    edit.node,
                    edit.port,
                    edit.node,
                    status.map_or("not run", NodeStatus::as_str)
                ));
            }
        }
        let ports = HitPort::of(&node.node.ports().outputs);
        let value = checked_value(&edit.node, &ports, &edit.port, &edit.value)?;
        edits_checked.push(ForkEdit {
            value,
            ..edit.clone()
        });
    }
    let edited: BTreeSet<String> = edits_checked.iter().map(|e| e.node.clone()).collect();
    // Downstream of an edit runs again (the edited node itself hands on its edited outputs);
    // a changed node, and what depends on it, runs again too.
    let mut rerun: BTreeSet<String> = BTreeSet::new();
    for node in &edited {
        rerun.extend(downstream_of(graph, node));
    }
    for node in &edited {
        rerun.remove(node);
    }
    rerun.extend(changed_downstream);
    let mut seed = store
        .reuse_seed(&parent_id, &rerun)
        .map_err(|e| e.to_string())?;
    // A node the graph no longer has hands nothing on (nor do the sub-run nodes of one).
    seed.outputs.retain(|id, _| {
        let owner = id.split('/').next().unwrap_or(id);
        graph.index_of(owner).is_some()
    });
    for edit in &edits_checked {
        // An edited node whose recorded outputs held a secret starts from them too.
        if let Some(recorded) = seed.redacted.remove(&edit.node) {
            seed.outputs.insert(edit.node.clone(), recorded);
        }
        seed.outputs
            .entry(edit.node.clone())
            .or_default()
            .insert(edit.port.clone(), edit.value.clone());
    }
    for node in &edited {
        let still = seed.outputs.get(node).is_some_and(|outputs| {
            outputs.iter().any(|(port, value)| {
                !edits_checked
                    .iter()
                    .any(|e| &e.node == node && &e.port == port)
                    && agentloom_engine::value_holds_marker(value)
            })
        });
        let redacted_before = detail.node(node).is_some_and(|row| row.outputs_redacted);
        if still && redacted_before {
            return Err(format!(
                "node `{node}`'s output held a secret, which the run log does not keep: the fork would hand on the marker {} in the outputs left unedited; set every output of `{node}` that held it, or fork from before `{node}`",
                agentloom_engine::REDACTED
            ));
        }
    }
    // Outputs the log keeps with a secret replaced are not handed on as values: their node
    // runs again, or the fork is refused when that would repeat a side effect.
    seed.settle_redacted(graph)?;
    Ok(ForkPlan {
        record: ForkRecord {
            parent_run_id: parent_id,
            edits: edits_checked,
            changes,
        },
        seed,
        rerun,
    })
}

/// `runs` (newest first, as listed) in lineage order: each fork right under its parent
/// (when the parent is among them), with its depth (0 for a run that is no listed run's fork).
pub fn in_lineage(store: &RunStore, runs: Vec<RunRow>) -> Vec<(RunRow, usize)> {
    let parents: Vec<Option<String>> = runs
        .iter()
        .map(|run| {
            store
                .run_fork(&run.id)
                .ok()
                .flatten()
                .map(|fork| fork.parent_run_id)
                .filter(|parent| runs.iter().any(|r| &r.id == parent))
        })
        .collect();
    let mut ordered = Vec::with_capacity(runs.len());
    let mut placed = vec![false; runs.len()];
    // Roots in the listed order, each followed by its forks (depth first).
    fn place(
        index: usize,
        depth: usize,
        runs: &[RunRow],
        parents: &[Option<String>],
        placed: &mut [bool],
        ordered: &mut Vec<(usize, usize)>,
    ) {
        if placed[index] {
            return;
        }
        placed[index] = true;
        ordered.push((index, depth));
        for (child, parent) in parents.iter().enumerate() {
            if parent.as_deref() == Some(runs[index].id.as_str()) {
                place(child, depth + 1, runs, parents, placed, ordered);
            }
        }
    }
    let mut order = Vec::new();
    for index in 0..runs.len() {
        if parents[index].is_none() {
            place(index, 0, &runs, &parents, &mut placed, &mut order);
        }
    }
    for index in 0..runs.len() {
        place(index, 0, &runs, &parents, &mut placed, &mut order);
    }
    let mut runs: Vec<Option<RunRow>> = runs.into_iter().map(Some).collect();
    for (index, depth) in order {
        if let Some(run) = runs[index].take() {
            ordered.push((run, depth));
        }
    }
    ordered
}
