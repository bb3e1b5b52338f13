//! One node of the dataflow run through its breakpoints, its approval and side-effect gate,
//! and its attempts with retries and backoff.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, BlockError, Usage, ValidGraph, ValidNode, Value, ValueMap,
    approval_action, resolved_details,
};

use super::approval::ask_approval;
use super::breakpoint_pause;
use super::node_ctx::{NodeCtx, run_attempt};
use super::shared::RunShared;
use crate::breakpoints::BreakAt;
use crate::events::EventKind;
use crate::limits::NodeBudget;

/// The result of running one node (all its attempts).
pub(super) struct NodeOutcome {
    pub(super) index: usize,
    pub(super) result: Result<ValueMap, BlockError>,
    pub(super) attempts: u32,
    pub(super) duration_ms: u64,
    pub(super) usage: Usage,
    /// When its last attempt (or its breakpoint after) ended, read once for its duration
    /// and for the events its finish brings (`None`: it did not run here).
    pub(super) ended: Option<Instant>,
}

/// Runs node `index` of `graph` through all its attempts: `inputs` as its wired inputs made
/// them, `conversion_error` when one of them did not fit its port. The graph and the run's
/// state are borrowed from the scheduler, which outlives every node it runs.
pub(super) async fn run_node(
    graph: &ValidGraph,
    shared: &Arc<RunShared>,
    index: usize,
    mut inputs: ValueMap,
    mut conversion_error: Option<BlockError>,
) -> NodeOutcome {
    let node = &graph.nodes[index];
    // A node that ran in an earlier segment of this run and runs again (it waited for
    // a decision, or the pause stopped it) reports what it had spent and taken then too.
    let (usage_before, duration_before) = shared
        .recorded
        .get(&node.id)
        .map(|progress| (progress.usage, progress.duration_ms.unwrap_or(0)))
        .unwrap_or_default();
    let started = Instant::now();
    // The first attempt's start is the node's, read once for both, unless a breakpoint
    // came between.
    let mut first_started = Some(started);
    // A breakpoint before the node: its inputs may be edited, or the run pauses here.
    if let Some(debug) = &shared.debug
        && conversion_error.is_none()
    {
        first_started = None;
        let ports = &node.node.ports().inputs;
        // Boxed, as the other waits below: the future of every node stays small (the
        // running set holds each), and only a node that waits pays for the room.
        match Box::pin(breakpoint_pause::pause_at(
            shared,
            debug,
            &node.id,
            BreakAt::Before,
            ports,
            inputs,
        ))
        .await
        {
            Ok(edited) => inputs = edited,
            Err(err) => {
                return NodeOutcome {
                    index,
                    result: Err(err),
                    attempts: 0,
                    duration_ms: duration_before,
                    usage: usage_before,
                    ended: None,
                };
            }
        }
    }
    // The node's own: no lock (each attempt's context counts its part, read once it ends).
    let mut node_usage = Usage::default();
    let mut previous_error: Option<String> = None;
    let mut attempt = 0;
    let result = loop {
        attempt += 1;
        inputs = shared.emit_started(first_started.take(), &node.id, attempt, inputs);
        if let Some(err) = conversion_error.take() {
            break Err(err);
        }
        // Only safe mode and a side-effect gate have anything to clear.
        if (shared.safe_mode || shared.side_effects.is_some())
            && let Err(err) =
                Box::pin(clear_to_send(graph, shared, node, attempt, &mut inputs)).await
        {
            break Err(err);
        }
        let mut ctx = NodeCtx {
            shared,
            node_id: &node.id,
            attempt,
            previous_error: previous_error.take(),
            cancel: OnceLock::new(),
            parent_cancel: None,
            usage: Mutex::new(Usage::default()),
            budget: NodeBudget::default(),
        };
        // The last attempt there may be takes the inputs; an earlier one, a copy for the next.
        let attempt_inputs = if attempt < node.retry.max_attempts {
            inputs.clone()
        } else {
            std::mem::take(&mut inputs)
        };
        let attempt_result =
            run_attempt(node.node.as_ref(), attempt_inputs, &ctx, node.timeout).await;
        // The attempt has ended: nobody else holds its context.
        if let Ok(mine) = ctx.usage.get_mut() {
            node_usage += *mine;
        }
        match attempt_result {
            Ok(outputs) => break Ok(outputs),
            Err(err)
                if err.is_retryable()
                    && attempt < node.retry.max_attempts
                    && !shared.cancel.is_cancelled() =>
            {
                let wait = err
                    .retry_after
                    .unwrap_or_default()
                    .max(node.retry.backoff_before(attempt + 1));
                shared.emit(EventKind::NodeRetrying {
                    node: node.id.clone(),
                    attempt,
                    error: err.message.clone(),
                    wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                });
                previous_error = Some(err.message);
                tokio::select! {
                    () = Box::pin(tokio::time::sleep(wait)) => {}
                    () = shared.cancel.cancelled() => break Err(BlockError::cancelled()),
                }
            }
            Err(err) => break Err(err),
        }
    };
    // A breakpoint after the node: its outputs may be edited before its dependents
    // get them, or the run pauses here.
    let result = match (result, &shared.debug) {
        (Ok(outputs), Some(debug)) => {
            let ports = &node.node.ports().outputs;
            Box::pin(breakpoint_pause::pause_at(
                shared,
                debug,
                &node.id,
                BreakAt::After,
                ports,
                outputs,
            ))
            .await
        }
        (result, _) => result,
    };
    let mut usage = node_usage;
    usage += usage_before;
    let ended = Instant::now();
    let took = ended.saturating_duration_since(started);
    NodeOutcome {
        index,
        result,
        attempts: attempt,
        duration_ms: u64::try_from(took.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(duration_before),
        usage,
        ended: Some(ended),
    }
}

/// What a node with side effects passes before each attempt sends anything: safe mode's
/// approval on its first attempt (which may edit its inputs), then the run's side-effect gate.
async fn clear_to_send(
    graph: &ValidGraph,
    shared: &Arc<RunShared>,
    node: &ValidNode,
    attempt: u32,
    inputs: &mut ValueMap,
) -> Result<(), BlockError> {
    // A node resumed from a checkpoint was approved before it asked what it
    // waits on: the decision is for that question.
    if attempt == 1
        && shared.safe_mode
        && node.node.side_effects().unwrap_or(node.meta.side_effects)
        && !shared.checkpoints.contains_key(&node.id)
    {
        let mut request = ApprovalRequest::new(
            approval_action(&node.meta.title, node.node.as_ref(), inputs),
            Value::object(inputs.clone()),
        );
        // The person sees where it goes: a configured URL, path or recipient.
        if let Some(doc) = graph.doc.nodes.iter().find(|doc| doc.id == node.id) {
            request = request.with_details(resolved_details(&node.meta, &doc.config, inputs));
        }
        match ask_approval(shared, &node.id, &request).await {
            Ok(ApprovalDecision::Approved {
                arguments: Value::Object(edited),
            }) => *inputs = Arc::unwrap_or_clone(edited),
            Ok(ApprovalDecision::Approved { .. }) => {}
            Ok(ApprovalDecision::Rejected { message }) => {
                return Err(BlockError::permanent(format!(
                    "`{}` was not approved: {message}",
                    node.id
                )));
            }
            Err(err) => return Err(err),
        }
    }
    if let Some(gate) = &shared.side_effects
        && node.node.side_effects().unwrap_or(node.meta.side_effects)
        && let Err(message) = gate
            .before_sending(
                &format!("{}{}", shared.path_prefix, node.id),
                attempt,
                node.node
                    .idempotency_key(&shared.run_id, &node.id, inputs)
                    .as_deref(),
            )
            .await
    {
        return Err(BlockError::permanent(message));
    }
    Ok(())
}
