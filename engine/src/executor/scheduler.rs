//! The dataflow of one run: seeded and recorded nodes settled first, every ready node
//! started in topological order, each outcome settling its dependents' inputs (or skipping
//! them), and the run's report once nothing runs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::future::Ready;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use agentloom_core::{
    BlockError, Compat, ErrorClass, TOOL_PORT, Usage, ValidGraph, Value, ValueMap, coerce,
};
use futures::StreamExt;
use futures::future::Either;
use futures::stream::FuturesUnordered;

use super::node_run::{self, NodeOutcome};
use super::shared::{RunShared, waiting_message};
use super::tools::{describe_tool, only_a_tool};
use super::{NodeReport, RunReport};
use crate::events::{EventKind, NodeStatus, RunStatus};
use crate::run_state::NodeProgress;

/// Per-node bookkeeping of the scheduler, kept small (a large run's nodes are walked
/// several times): a node's error and usage, which few have, are kept apart.
struct NodeState {
    status: NodeStatus,
    /// Whether the node has a `tool` output, found once for the run.
    offers_tool: bool,
    /// Whether it is wired only as a tool ([`only_a_tool`]), found once for the run.
    only_a_tool: bool,
    attempts: u32,
    /// Wired inputs not yet settled (value or absent).
    waiting: usize,
    /// Where the node's input slots start in [`Scheduler::slots`], one per wired input.
    first_slot: usize,
    duration_ms: u64,
}

pub(super) struct Scheduler {
    graph: Arc<ValidGraph>,
    shared: Arc<RunShared>,
    states: Vec<NodeState>,
    /// Every node's input slots, one list for the run: `None` until settled, `Some(None)`
    /// when absent.
    slots: Vec<Option<Option<Value>>>,
    /// Ready nodes keyed by topological rank.
    ready: BinaryHeap<Reverse<(usize, usize)>>,
    failure: Option<String>,
    /// The error of each failed node, by index.
    errors: BTreeMap<usize, String>,
    /// What each node that spent anything spent, by index (none: nothing).
    usages: BTreeMap<usize, Usage>,
    /// The time of the events of the finish being recorded: when its node ended, read
    /// in the node's last poll, with no event since (`None`: read at each event).
    clock: Option<Instant>,
}

impl Scheduler {
    pub(super) fn new(graph: Arc<ValidGraph>, shared: Arc<RunShared>) -> Self {
        let mut slot_count = 0;
        let states = graph
            .nodes
            .iter()
            .map(|node| {
                let first_slot = slot_count;
                slot_count += node.inputs.len();
                NodeState {
                    status: NodeStatus::Pending,
                    offers_tool: node.outputs.iter().any(|f| f.port == TOOL_PORT),
                    only_a_tool: only_a_tool(node),
                    attempts: 0,
                    waiting: node.inputs.len(),
                    first_slot,
                    duration_ms: 0,
                }
            })
            .collect();
        Self {
            graph,
            shared,
            states,
            slots: vec![None; slot_count],
            ready: BinaryHeap::new(),
            failure: None,
            errors: BTreeMap::new(),
            usages: BTreeMap::new(),
            clock: None,
        }
    }

    pub(super) async fn run(mut self, seeded: &BTreeMap<String, ValueMap>) -> RunReport {
        let graph = Arc::clone(&self.graph);
        // Held here for the whole run, so that the nodes' futures borrow them.
        let shared = Arc::clone(&self.shared);
        self.shared.emit(EventKind::RunStarted {
            run_id: self.shared.run_id.clone(),
            graph_name: graph.doc.name.clone(),
            node_count: graph.nodes.len(),
            inputs: self.shared.inputs.clone(),
        });
        if self.shared.path_prefix.is_empty() {
            self.shared.record_catalog_calls();
        }
        self.finish_known(seeded);
        self.restate_recorded();
        for &index in &graph.topo_order {
            if graph.nodes[index].inputs.is_empty() && !self.states[index].status.is_final() {
                self.enqueue(index);
            }
        }

        // The time the run went on before it paused counts too.
        let deadline = graph.doc.settings.max_wall_ms.map(|ms| {
            let left = ms.saturating_sub(self.shared.duration_before_ms);
            tokio::time::Instant::now() + Duration::from_millis(left)
        });
        let mut running = FuturesUnordered::new();
        // Nodes started while nothing else runs, not yet polled, in the order the running
        // set would poll them (its queue holds just these then). Each is polled here first,
        // so one that finishes at once never enters the set; the first that waits goes in
        // after the rest of them (polled again there, with the set's waker), and so does
        // every node started while one waits. With the task's budget spent they all go in
        // unpolled: the `select!` below yields first, as it did for them.
        let mut fresh = VecDeque::new();
        // The room of the last node that finished where it started, for the next one (a
        // node's future is large; most never need room of their own).
        let mut spare = None;
        loop {
            // Every ready node starts: a node that waits holds no slot, and CPU-bound work
            // is bounded by `cpu_slots` instead.
            // The token is asked only when a node waits to start.
            while !self.ready.is_empty()
                && self.failure.is_none()
                && !self.shared.cancel.is_cancelled()
            {
                let Some(Reverse((_, index))) = self.ready.pop() else {
                    break;
                };
                if let Err(message) = self.shared.limits.take_step() {
                    self.shared.stop_for_limit(message);
                    break;
                }
                let future = self.start(&graph, &shared, index);
                let future = match spare.take() {
                    Some(mut room) => {
                        Pin::set(&mut room, future);
                        room
                    }
                    None => Box::pin(future),
                };
                if running.is_empty() {
                    fresh.push_back(future);
                } else {
                    running.push(future);
                }
            }
            if !fresh.is_empty() && !tokio::task::coop::has_budget_remaining() {
                running.extend(fresh.drain(..));
            }
            if let Some(mut future) = fresh.pop_front() {
                match futures::poll!(future.as_mut()) {
                    Poll::Ready(outcome) => {
                        spare = Some(future);
                        self.finish(outcome);
                    }
                    Poll::Pending => {
                        running.extend(fresh.drain(..));
                        running.push(future);
                    }
                }
                continue;
            }
            if running.is_empty() {
                break;
            }
            let next = tokio::select! {
                biased;
                outcome = running.next() => outcome,
                () = self.shared.cancel.cancelled() => None,
                () = self.shared.pause.cancelled() => {
                    self.shared.cancel.cancel();
                    None
                }
                () = sleep_until(deadline) => {
                    if let Some(ms) = graph.doc.settings.max_wall_ms {
                        self.shared.stop_for_limit(format!("time limit reached: the run may take at most {ms} ms"));
                    }
                    None
                }
            };
            match next {
                Some(outcome) => self.finish(outcome),
                None => {
                    // Cancelled: give nodes a moment to notice their token, then drop them.
                    let grace = tokio::time::sleep(Duration::from_millis(200));
                    tokio::pin!(grace);
                    loop {
                        tokio::select! {
                            outcome = running.next() => match outcome {
                                Some(outcome) => self.finish(outcome),
                                None => break,
                            },
                            () = &mut grace => break,
                        }
                    }
                    break;
                }
            }
        }
        drop(running);
        self.report()
    }

    /// Seeded nodes finish first, in topological order, so their dependents see them;
    /// all are marked first so that none is started by a seeded upstream. A node that
    /// finished in an earlier segment of this run (a resumed run) finishes as recorded:
    /// its attempts, duration and usage (already in the run's total, not spent again),
    /// and a failure its error output caught fails the same way again.
    fn finish_known(&mut self, seeded: &BTreeMap<String, ValueMap>) {
        // Nothing seeded, nothing recorded (a fresh run): no node to look up.
        if seeded.is_empty() && self.shared.recorded.is_empty() {
            return;
        }
        let graph = Arc::clone(&self.graph);
        let shared = Arc::clone(&self.shared);
        let known: Vec<(usize, Result<ValueMap, BlockError>)> = graph
            .topo_order
            .iter()
            .filter_map(|&index| {
                let node = &graph.nodes[index];
                // A node wired only as a tool starts again: that binds its wired inputs
                // for the calls to come, and hands over its description.
                if only_a_tool(node) {
                    return None;
                }
                if let Some(outputs) = seeded.get(&node.id) {
                    return Some((index, Ok(outputs.clone())));
                }
                let recorded = shared.recorded_final(&node.id)?;
                let caught = recorded.status == NodeStatus::Failed
                    && recorded.error_caught
                    && node
                        .outputs
                        .iter()
                        .any(|f| f.port == agentloom_core::ERROR_PORT);
                caught.then(|| {
                    let message = recorded.error.clone().unwrap_or_default();
                    (index, Err(BlockError::permanent(message)))
                })
            })
            .collect();
        for (index, result) in &known {
            self.states[*index].status = if result.is_ok() {
                NodeStatus::Done
            } else {
                NodeStatus::Failed
            };
        }
        for (index, result) in known {
            let recorded = shared.recorded_final(&graph.nodes[index].id);
            self.finish(NodeOutcome {
                index,
                result,
                attempts: recorded.map_or(0, |r| r.attempts),
                duration_ms: recorded.and_then(|r| r.duration_ms).unwrap_or(0),
                usage: recorded.map(|r| r.usage).unwrap_or_default(),
                ended: None,
            });
        }
    }

    /// Restates the rows recorded in earlier segments of this run that no node of this run
    /// settles: those of nodes wired only as tools (called, not run by the dataflow) and
    /// those of sub-run nodes whose calling node does not run again (a calling node that
    /// runs again hands them to its sub-run, which restates them).
    fn restate_recorded(&self) {
        let graph = &self.graph;
        for (id, progress) in &self.shared.recorded {
            let nested = id.split_once('/').map(|(owner, _)| owner);
            let restate = match (nested, graph.index_of(nested.unwrap_or(id))) {
                (None, Some(index)) => only_a_tool(&graph.nodes[index]),
                (Some(_), Some(index)) => {
                    self.states[index].status.is_final() || only_a_tool(&graph.nodes[index])
                }
                (Some(_), None) => true,
                (None, None) => false,
            };
            let Some(kind) = restate.then(|| restated(id, progress)).flatten() else {
                continue;
            };
            // Queued first, which names its block (a sub-run's node is not in the graph).
            if nested.is_some() && !progress.block.is_empty() {
                self.shared.emit(EventKind::NodeQueued {
                    node: id.clone(),
                    block: progress.block.clone(),
                });
            }
            self.shared.emit(kind);
        }
    }

    fn enqueue(&mut self, index: usize) {
        self.states[index].status = NodeStatus::Queued;
        self.ready
            .push(Reverse((self.graph.topo_rank[index], index)));
        // A node wired only as a tool runs when it is called, and says so then.
        if self.states[index].only_a_tool {
            return;
        }
        let node = &self.graph.nodes[index];
        self.shared.emit_at(self.clock, || EventKind::NodeQueued {
            node: node.id.clone(),
            block: node.meta.kind.clone(),
        });
    }

    /// Builds the future that runs node `index` through all its attempts, borrowing `graph`
    /// and `shared` (the scheduler's own, held for the run) rather than a count of each per
    /// node.
    fn start<'g>(
        &mut self,
        graph: &'g ValidGraph,
        shared: &'g Arc<RunShared>,
        index: usize,
    ) -> Either<Ready<NodeOutcome>, impl Future<Output = NodeOutcome> + Send + use<'g>> {
        let state = &mut self.states[index];
        state.status = NodeStatus::Running;
        let node = &graph.nodes[index];
        let mut inputs = ValueMap::new();
        let mut conversion_error = None;
        let slots = &mut self.slots[state.first_slot..state.first_slot + node.inputs.len()];
        for (slot, value) in node.inputs.iter().zip(slots.iter_mut()) {
            if let Some(Some(value)) = value.take() {
                let value = if slot.compat == Compat::Exact {
                    Ok(value)
                } else {
                    coerce(value, &slot.ty)
                };
                match value {
                    Ok(value) if slot.many => {
                        let list = inputs
                            .entry(slot.port.clone())
                            .or_insert_with(|| Value::list(Vec::new()));
                        if let Some(items) = list.list_mut() {
                            items.push(value);
                        }
                    }
                    Ok(value) => {
                        inputs.insert(slot.port.clone(), value);
                    }
                    Err(err) => {
                        conversion_error.get_or_insert_with(|| {
                            BlockError::input(
                                &slot.port,
                                format!(
                                    "the value from `{}.{}` does not fit: {err}",
                                    self.graph.nodes[slot.source_node].id, slot.source_port
                                ),
                            )
                        });
                    }
                }
            }
        }
        if state.offers_tool
            && let Ok(mut bound) = self.shared.tool_inputs.lock()
        {
            bound.insert(index, inputs.clone());
        }
        if state.only_a_tool {
            return Either::Left(std::future::ready(NodeOutcome {
                index,
                result: Ok(ValueMap::new()),
                attempts: 0,
                duration_ms: 0,
                usage: Usage::default(),
                ended: None,
            }));
        }
        if node.bypass {
            // Not run: no approval, no side effect; its inputs are handed on.
            let inputs = self.shared.emit_started(None, &node.id, 1, inputs);
            let outputs = agentloom_core::bypass_outputs(node.node.ports(), &inputs);
            return Either::Left(std::future::ready(NodeOutcome {
                index,
                result: Ok(outputs),
                attempts: 1,
                duration_ms: 0,
                usage: Usage::default(),
                ended: None,
            }));
        }
        Either::Right(node_run::run_node(
            graph,
            shared,
            index,
            inputs,
            conversion_error,
        ))
    }

    /// Records a node's outcome and settles its dependents' inputs. The events this brings
    /// (its finish, its dependents queued or skipped) take their time from the node's end:
    /// the outcome is recorded as soon as the poll that ended it returns.
    fn finish(&mut self, outcome: NodeOutcome) {
        self.clock = outcome.ended;
        self.record_outcome(outcome);
        self.clock = None;
    }

    fn record_outcome(&mut self, outcome: NodeOutcome) {
        let graph = Arc::clone(&self.graph);
        let node = &graph.nodes[outcome.index];
        let state = &mut self.states[outcome.index];
        state.attempts = outcome.attempts;
        state.duration_ms = outcome.duration_ms;
        // Exactly nothing (a cost of -0.0 is kept, as it was reported).
        let usage = outcome.usage;
        if usage.input_tokens == 0 && usage.output_tokens == 0 && usage.cost_usd.to_bits() == 0 {
            self.usages.remove(&outcome.index);
        } else {
            self.usages.insert(outcome.index, outcome.usage);
        }
        if outcome.result.is_err() && self.shared.is_waiting(&node.id) {
            // Paused on an approval or at a breakpoint: its dependents wait with it, the
            // rest runs on.
            state.status = if self.shared.is_at_breakpoint(&node.id) {
                NodeStatus::AtBreakpoint
            } else {
                NodeStatus::AwaitingApproval
            };
            return;
        }
        match outcome.result {
            Ok(mut outputs) => {
                state.status = NodeStatus::Done;
                let offers_tool = state.offers_tool;
                let only_a_tool = state.only_a_tool;
                // The outputs are kept for the NodeFinished event only when one is built;
                // otherwise each port's value (one fanout per port) is taken, not copied,
                // and its last target takes it.
                let keep_outputs = self.shared.events_wanted && !only_a_tool;
                for fanout in &node.outputs {
                    let value = if offers_tool && fanout.port == TOOL_PORT {
                        Some(describe_tool(&graph, outcome.index))
                    } else if keep_outputs {
                        outputs.get(&fanout.port).cloned()
                    } else {
                        outputs.remove(&fanout.port)
                    };
                    if let Some((&(last, last_slot), others)) = fanout.targets.split_last() {
                        for &(target, slot) in others {
                            self.settle(target, slot, value.clone());
                        }
                        self.settle(last, last_slot, value);
                    }
                }
                // A node wired only as a tool has handed over its description, not run:
                // it has nothing to report (a finish without attempts reads as reused).
                if only_a_tool {
                    return;
                }
                self.shared.emit_at(self.clock, || {
                    let declared =
                        |port: &String| node.node.ports().outputs.iter().any(|p| &p.name == port);
                    // Most blocks return only their declared ports: nothing to take out.
                    if !outputs.keys().all(declared) {
                        outputs.retain(|port, _| declared(port));
                    }
                    EventKind::NodeFinished {
                        node: node.id.clone(),
                        outputs,
                        attempts: outcome.attempts,
                        duration_ms: outcome.duration_ms,
                        usage: outcome.usage,
                        outputs_redacted: None,
                    }
                });
            }
            Err(err) => {
                state.status = NodeStatus::Failed;
                self.errors.insert(outcome.index, err.message.clone());
                let error_fanout = node
                    .outputs
                    .iter()
                    .find(|f| f.port == agentloom_core::ERROR_PORT);
                let caught = error_fanout.is_some() && err.class != ErrorClass::Cancelled;
                self.shared.emit_at(self.clock, || EventKind::NodeFailed {
                    node: node.id.clone(),
                    error: err.message.clone(),
                    attempts: outcome.attempts,
                    duration_ms: outcome.duration_ms,
                    usage: outcome.usage,
                    caught,
                });
                if caught {
                    let mut error_value = ValueMap::from([
                        ("message".to_owned(), Value::text(err.message.clone())),
                        ("node".to_owned(), Value::text(node.id.clone())),
                    ]);
                    if let Some(data) = err.data {
                        error_value.insert("data".to_owned(), data);
                    }
                    let error_value = Value::object(error_value);
                    for fanout in &node.outputs {
                        let value = (fanout.port == agentloom_core::ERROR_PORT)
                            .then(|| error_value.clone());
                        for &(target, slot) in &fanout.targets {
                            self.settle(target, slot, value.clone());
                        }
                    }
                } else if err.class == ErrorClass::Cancelled && self.shared.cancel.is_cancelled() {
                    // The run is stopping; the run's own status says why.
                } else if self.failure.is_none() {
                    self.failure = Some(format!("node `{}` failed: {}", node.id, err.message));
                    self.shared.cancel.cancel();
                }
            }
        }
    }

    /// Settles one input slot; starts or skips the node when it has all it needs.
    /// Iterative, so a skip that cascades down a long chain cannot overflow the stack.
    fn settle(&mut self, target: usize, slot: usize, value: Option<Value>) {
        // Only a skip cascading down fills `pending`: most settles need no list.
        let mut first = Some((target, slot, value));
        let mut pending = Vec::new();
        while let Some((target, slot, value)) = first.take().or_else(|| pending.pop()) {
            let state = &mut self.states[target];
            let node = &self.graph.nodes[target];
            let slots = &mut self.slots[state.first_slot..state.first_slot + node.inputs.len()];
            if slots[slot].is_some() {
                continue;
            }
            slots[slot] = Some(value);
            state.waiting -= 1;
            // A seeded node finished already, whatever its inputs.
            if state.waiting > 0 || state.status.is_final() {
                continue;
            }
            let missing = node
                .inputs
                .iter()
                .zip(slots.iter())
                .find(|(spec, value)| spec.required && matches!(value, Some(None)));
            // A node whose inputs are all absent has nothing to work on, even if they are optional.
            let all_absent = slots.iter().all(|v| matches!(v, Some(None)));
            let skip_because = match missing {
                Some((spec, _)) => Some(spec),
                None if all_absent => node.inputs.first(),
                None => None,
            };
            if let Some(spec) = skip_because {
                let source = &self.graph.nodes[spec.source_node].id;
                let reason = format!(
                    "input `{}` has no value: `{source}.{}` was not produced",
                    spec.port, spec.source_port
                );
                state.status = NodeStatus::Skipped;
                self.shared.emit_at(self.clock, || EventKind::NodeSkipped {
                    node: node.id.clone(),
                    reason,
                    block: node.meta.kind.clone(),
                });
                for fanout in &node.outputs {
                    for &(next, next_slot) in &fanout.targets {
                        pending.push((next, next_slot, None));
                    }
                }
            } else {
                self.enqueue(target);
            }
        }
    }

    fn report(self) -> RunReport {
        let limit_error = self.shared.limit_error();
        let paused = self.shared.waiting.lock().is_ok_and(|w| !w.is_empty());
        let status = if self.failure.is_some() || limit_error.is_some() {
            RunStatus::Failed
        } else if paused && (!self.shared.cancel.is_cancelled() || self.shared.pause.is_cancelled())
        {
            RunStatus::Waiting
        } else if self.shared.cancel.is_cancelled()
            || self.states.iter().any(|s| !s.status.is_final())
        {
            RunStatus::Cancelled
        } else {
            RunStatus::Completed
        };
        let mut error = self
            .failure
            .clone()
            .or(limit_error)
            .or_else(|| match status {
                RunStatus::Cancelled => Some("the run was cancelled".to_owned()),
                RunStatus::Waiting => Some(waiting_message(&self.shared)),
                _ => None,
            });
        let mut outputs = self
            .shared
            .outputs
            .lock()
            .map(|o| o.clone())
            .unwrap_or_default();
        // The report goes to `--json` and the caller: the same redaction as the events.
        let redactor = &self.shared.redactor;
        redactor.option(&mut error);
        redactor.map(&mut outputs);
        let usage = self.shared.total_usage();
        let duration_ms = self.shared.duration_ms();
        self.shared.emit(EventKind::RunFinished {
            status,
            outputs: outputs.clone(),
            error: error.clone(),
            usage,
            duration_ms,
        });
        let shared = &self.shared;
        let graph = Arc::clone(&self.graph);
        let states = self.states;
        let mut errors = self.errors;
        let usages = self.usages;
        // Listed by id, each row made in its place (no second list of a large run's rows).
        let mut nodes = Vec::with_capacity(graph.nodes.len());
        nodes.extend(graph.order_by_id().iter().map(|&index| {
            let node = &graph.nodes[index];
            let state = &states[index];
            // A tool's calls are its row; the dataflow only handed over its description.
            if state.only_a_tool
                && let Some(recorded) = shared.recorded_final(&node.id)
            {
                return NodeReport {
                    id: node.id.clone(),
                    status: recorded.status,
                    attempts: recorded.attempts,
                    duration_ms: recorded.duration_ms.unwrap_or(0),
                    error: recorded.error.clone(),
                    usage: recorded.usage,
                };
            }
            NodeReport {
                id: node.id.clone(),
                status: match state.status {
                    // A paused run's node waits for its decision, as `show` says too.
                    waiting @ (NodeStatus::AwaitingApproval | NodeStatus::AtBreakpoint)
                        if status == RunStatus::Waiting =>
                    {
                        waiting
                    }
                    NodeStatus::Queued
                    | NodeStatus::Running
                    | NodeStatus::AwaitingApproval
                    | NodeStatus::AtBreakpoint => NodeStatus::Pending,
                    other => other,
                },
                attempts: state.attempts,
                duration_ms: state.duration_ms,
                error: errors.remove(&index).map(|mut error| {
                    redactor.text(&mut error);
                    error
                }),
                usage: usages.get(&index).copied().unwrap_or_default(),
            }
        }));
        RunReport {
            run_id: self.shared.run_id.clone(),
            status,
            outputs,
            nodes,
            usage,
            duration_ms,
            error,
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The event that restates a row recorded in an earlier segment of the run: the node's
/// finish, failure or skip with its recorded attempts, duration and usage (`None` for a node
/// that had not finished).
fn restated(id: &str, progress: &NodeProgress) -> Option<EventKind> {
    let node = id.to_owned();
    let duration_ms = progress.duration_ms.unwrap_or(0);
    Some(match progress.status {
        NodeStatus::Done => EventKind::NodeFinished {
            node,
            outputs: progress.outputs.clone(),
            attempts: progress.attempts,
            duration_ms,
            usage: progress.usage,
            // Read back from the run log: redacted there if the marker is in them.
            outputs_redacted: Some(crate::redact::holds_marker(&progress.outputs)),
        },
        NodeStatus::Failed => EventKind::NodeFailed {
            node,
            error: progress.error.clone().unwrap_or_default(),
            attempts: progress.attempts,
            duration_ms,
            usage: progress.usage,
            caught: progress.error_caught,
        },
        NodeStatus::Skipped => EventKind::NodeSkipped {
            node,
            reason: progress.skip_reason.clone().unwrap_or_default(),
            block: progress.block.clone(),
        },
        NodeStatus::Pending
        | NodeStatus::Queued
        | NodeStatus::Running
        | NodeStatus::AwaitingApproval
        | NodeStatus::AtBreakpoint => return None,
    })
}
