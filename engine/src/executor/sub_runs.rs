//! A graph run inside a node (`graph.call`, a for-each over a graph): the seed handed down
//! from the parent's, the budget, slots and redactor it shares, its events joining the
//! parent's stream under the node's name, and what its end means for the calling node.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentloom_core::{BlockError, GraphDoc, GraphInterface, ValidGraph, ValueMap, validate};
use tokio_util::sync::CancellationToken;

use super::approval::SubRunApprover;
use super::shared::RunShared;
use super::{Before, Inherited, RunOptions, RunReport};
use crate::events::{EventSink, NodeStatus, RunEvent, RunStatus};
use crate::run_state::NodeProgress;
use crate::seed::{EarlierSegments, RunSeed};

/// What the parent run's seed knows of the sub-run nested as `prefix`: its finished
/// nodes (but the graph outputs, which set the sub-run's results when they run), the
/// decisions made on its approvals and their checkpoints.
fn sub_run_seed(shared: &RunShared, prefix: &str, graph: &ValidGraph) -> RunSeed {
    let nested = format!("{prefix}/");
    let inner = |id: &str| id.strip_prefix(&nested).map(str::to_owned);
    let outputs = shared
        .nested_seed
        .iter()
        .filter_map(|(id, outputs)| Some((inner(id)?, outputs.clone())))
        .filter(|(id, _)| {
            graph.index_of(id).is_some_and(|i| {
                !matches!(
                    graph.nodes[i].node.interface(),
                    Some(GraphInterface::Output { .. })
                )
            }) || id.contains('/')
        })
        .collect();
    let mut decisions = BTreeMap::new();
    if let Ok(mut parent) = shared.decisions.lock() {
        let keys: Vec<String> = parent
            .keys()
            .filter(|k| k.starts_with(&nested))
            .cloned()
            .collect();
        for key in keys {
            if let (Some(decision), Some(id)) = (parent.remove(&key), inner(&key)) {
                decisions.insert(id, decision);
            }
        }
    }
    let checkpoints = shared
        .checkpoints
        .iter()
        .filter_map(|(id, checkpoint)| Some((inner(id)?, checkpoint.clone())))
        .collect();
    // Its rows recorded before the run paused; its usage and time are the parent's.
    let recorded: BTreeMap<String, NodeProgress> = shared
        .recorded
        .iter()
        .filter_map(|(id, progress)| Some((inner(id)?, progress.clone())))
        .collect();
    RunSeed {
        outputs,
        decisions,
        checkpoints,
        earlier: (!recorded.is_empty()).then(|| EarlierSegments {
            nodes: recorded,
            ..EarlierSegments::default()
        }),
        ..RunSeed::default()
    }
}

/// Passes a sub-run's node events on to its parent run, each node renamed
/// `{prefix}/{node}`; the sub-run's own start and finish are the parent node's.
struct SubRunSink {
    parent: Arc<RunShared>,
    prefix: String,
}

impl EventSink for SubRunSink {
    fn emit(&self, event: &RunEvent) {
        let mut kind = event.kind.clone();
        let Some(node) = kind.node_mut() else {
            return;
        };
        *node = format!("{}/{node}", self.prefix);
        self.parent.emit(kind);
    }

    fn wants_events(&self) -> bool {
        self.parent.events_wanted
    }

    fn record_call(&self, call: &crate::RecordedCall) {
        let mut call = call.clone();
        call.node = format!("{}/{}", self.prefix, call.node);
        self.parent.sink.record_call(&call);
    }
}

/// Runs `graph` as a sub-run of node `node_id` of the `parent` run (nested as
/// `{node_id}/{scope}` when a scope is given, a for-each item), to its report.
pub(super) async fn run_nested(
    parent: &Arc<RunShared>,
    node_id: &str,
    cancel: &CancellationToken,
    graph: &GraphDoc,
    inputs: ValueMap,
    scope: Option<&str>,
) -> Result<RunReport, BlockError> {
    let executor = &parent.executor;
    let prefix = match scope {
        Some(scope) => format!("{node_id}/{scope}"),
        None => node_id.to_owned(),
    };
    let valid = validate(graph, executor.catalog.as_ref()).map_err(|problems| {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        BlockError::permanent(format!("the sub-graph is invalid: {}", list.join("; ")))
    })?;
    let seed = sub_run_seed(parent, &prefix, &valid);
    let options = RunOptions {
        run_id: Some(format!("{}/{prefix}", parent.run_id)),
        cancel: cancel.child_token(),
        pause: parent.pause.clone(),
        side_effects: parent.side_effects.clone(),
        seed: (!seed.is_empty() || !seed.checkpoints.is_empty() || seed.earlier.is_some())
            .then(|| Arc::new(seed)),
        ..RunOptions::default()
    };
    // Approvals are asked, stored and answered as the parent run's, for the nested node.
    let executor = match &executor.approver {
        Some(approver) => executor.clone().with_approver(Arc::new(SubRunApprover {
            parent: Arc::clone(approver),
            run_id: parent.run_id.clone(),
            prefix: prefix.clone(),
        })),
        None => executor.clone(),
    };
    let inherited = Inherited {
        limits: Arc::clone(&parent.limits),
        before: Before::default(),
        redactor: Arc::clone(&parent.redactor),
        safe_mode: parent.safe_mode,
        cpu_slots: Arc::clone(&parent.cpu_slots),
        request_slots: Arc::clone(&parent.request_slots),
        replay: parent.replay.clone(),
        path_prefix: format!("{}{prefix}/", parent.path_prefix),
        debug: parent.debug.clone(),
    };
    // The sub-run's node events join the parent run's stream, nested under this node;
    // its usage counts towards the parent run (its cost is already in the shared budget).
    let sink = Arc::new(SubRunSink {
        parent: Arc::clone(parent),
        prefix,
    });
    Ok(Box::pin(executor.run_with(Arc::new(valid), inputs, options, sink, inherited)).await)
}

/// What the end of a sub-run means for node `node_id`, which ran it: its outputs, or the
/// error (cancelled, paused with it, failed) that ends the node's attempt.
pub(super) fn calling_node_result(
    parent: &RunShared,
    node_id: &str,
    report: RunReport,
) -> Result<ValueMap, BlockError> {
    match report.status {
        RunStatus::Completed => Ok(report.outputs),
        RunStatus::Cancelled => {
            // Stopped at a breakpoint inside: the whole run stops, not only this node.
            if parent.debug.as_ref().is_some_and(|d| d.is_stopped()) {
                parent.cancel.cancel();
            }
            Err(BlockError::cancelled())
        }
        // A node inside waits for a person: this node waits with it (the run pauses).
        RunStatus::Waiting
            if report
                .nodes
                .iter()
                .any(|n| n.status == NodeStatus::AtBreakpoint) =>
        {
            Err(parent.wait_at_breakpoint(node_id))
        }
        RunStatus::Waiting => Err(parent.wait_for_decision(node_id)),
        _ => Err(BlockError::permanent(format!(
            "the sub-graph failed: {}",
            report.error.unwrap_or_else(|| "unknown error".to_owned())
        ))),
    }
}
