//! Debugging a run through the runner: breakpoints kept with the run and asked about through
//! the run log first, and continuing a run paused at one from the log (after a restart, or
//! from another process), as `agentloom continue` and the app do.

use std::sync::Arc;

use agentloom_core::{Escaped, ValidGraph, ValueMap};
use agentloom_engine::{
    BreakAt, BreakpointDecision, DurableBreakpoints, PendingBreakpoint, RunDebug, RunOptions,
    RunSeed, RunStore,
};

/// Makes `options`' breakpoints durable in `store`: the run gets its id now, its breakpoints
/// are kept with it (a continued run stops at them too), and every pause is stored before
/// anyone is asked. Called by [`crate::Prepared::launch`].
pub(crate) fn make_durable(options: &mut RunOptions, store: Option<&Arc<RunStore>>) {
    let (Some(debug), Some(store)) = (&options.debug, store) else {
        return;
    };
    let run_id = options
        .run_id
        .get_or_insert_with(agentloom_engine::new_run_id);
    if let Err(error) = store.record_run_breakpoints(run_id, &debug.breakpoints) {
        tracing::warn!(%error, run_id, "cannot keep the run's breakpoints");
    }
    debug.set_handler(Some(Arc::new(DurableBreakpoints::new(
        Arc::clone(store),
        debug.handler(),
    ))));
}

/// Forgets the decided pauses of a debugged run once it has gone on with them.
pub(crate) fn finish(options_debugged: bool, store: Option<&Arc<RunStore>>, run_id: &str) {
    if let (true, Some(store)) = (options_debugged, store)
        && let Err(error) = store.clear_decided_breakpoints(run_id)
    {
        tracing::warn!(%error, run_id, "cannot clear the decided breakpoint pauses");
    }
}

/// The pause of run `run_id` a decision is about: the one at node path `node` when given,
/// else the only one.
pub fn pick_pause<'a>(
    run_id: &str,
    pending: &'a [PendingBreakpoint],
    node: Option<&str>,
) -> Result<&'a PendingBreakpoint, String> {
    let undecided: Vec<&PendingBreakpoint> =
        pending.iter().filter(|p| p.decision.is_none()).collect();
    let listed = || {
        pending
            .iter()
            .map(|p| format!("{}:{}", p.hit.node, p.hit.at.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match node {
        Some(node) => pending.iter().find(|p| p.hit.node == node).ok_or_else(|| {
            format!(
                "run {run_id} is not paused at `{}` (it is paused at: {})",
                Escaped(node),
                listed()
            )
        }),
        None => match undecided.as_slice() {
            [only] => Ok(only),
            [] => pending
                .first()
                .ok_or_else(|| format!("run {run_id} is not paused at a breakpoint")),
            _ => Err(format!(
                "run {run_id} is paused at several nodes ({}); name one with --node",
                listed()
            )),
        },
    }
}

/// What continuing a paused run from the log takes: its seed (the nodes that finished, the
/// paused node's outputs when it paused after finishing) and its breakpoints with the
/// decision.
pub struct Continuation {
    pub seed: RunSeed,
    pub debug: RunDebug,
}

/// Continuing run `run_id` of `graph` from `pause` with `decision` (claimed before it
/// goes on: see [`RunStore::claim_breakpoint`]): edited values are checked against the
/// node's ports. Outputs the run log keeps with a secret replaced are not handed on as
/// values ([`RunSeed::settle_redacted`]): their node runs again, or, when that would
/// repeat its side effects, the continuation is refused saying so.
pub fn continuation(
    store: &RunStore,
    run_id: &str,
    graph: &ValidGraph,
    pause: &PendingBreakpoint,
    decision: BreakpointDecision,
) -> Result<Continuation, String> {
    let hit = &pause.hit;
    let edited = match decision.values() {
        Some(values) => Some(hit.edited(values)?),
        None => None,
    };
    let mut seed = store.resume_seed(run_id).map_err(|e| e.to_string())?;
    let breakpoints = store.run_breakpoints(run_id).map_err(|e| e.to_string())?;
    let stepping = matches!(decision, BreakpointDecision::Step { .. });
    let mut debug = RunDebug::new(breakpoints).stepping(stepping);
    match (hit.at, edited) {
        // Outputs left as they were shown with a secret replaced are not the node's: it
        // runs again (the secret comes back) and goes on with the values that were changed.
        (BreakAt::After, Some(outputs)) if !unchanged_redacted(hit, &decision).is_empty() => {
            let changed: ValueMap = decision
                .values()
                .into_iter()
                .flatten()
                .filter(|(port, value)| hit.values.get(*port) != Some(*value))
                .map(|(port, value)| (port.clone(), value.clone()))
                .collect();
            // Not asked again before it runs (stepping stays as decided).
            debug = debug
                .with_decision(
                    &hit.node,
                    BreakAt::Before,
                    going_on(stepping, ValueMap::new()),
                )
                .with_decision(&hit.node, BreakAt::After, going_on(stepping, changed));
            seed.redacted.insert(hit.node.clone(), outputs);
        }
        // The node finished before the pause: it hands on its (edited) outputs, not run again.
        (BreakAt::After, Some(outputs)) => {
            seed.outputs.insert(hit.node.clone(), outputs);
        }
        // Stopped: the node does not run again either.
        (BreakAt::After, None) => {
            debug = debug.with_decision(&hit.node, BreakAt::Before, decision);
        }
        (BreakAt::Before, Some(inputs)) => {
            debug = debug.with_decision(&hit.node, BreakAt::Before, going_on(stepping, inputs));
        }
        (BreakAt::Before, None) => {
            debug = debug.with_decision(&hit.node, BreakAt::Before, decision);
        }
    }
    seed.settle_redacted(graph)
        .map_err(|message| format!("cannot go on from `{}`: {message}", hit.node))?;
    Ok(Continuation { seed, debug })
}

/// Going on with `values`: a step when `stepping`, else a continue.
fn going_on(stepping: bool, values: ValueMap) -> BreakpointDecision {
    if stepping {
        BreakpointDecision::Step { values }
    } else {
        BreakpointDecision::Continue { values }
    }
}

/// The outputs of a node paused after it finished that were shown with a secret replaced
/// and that `decision` leaves as they were shown (not given, or given back unchanged).
fn unchanged_redacted<'a>(
    hit: &'a agentloom_engine::BreakpointHit,
    decision: &BreakpointDecision,
) -> Vec<&'a str> {
    let given = decision.values();
    hit.values
        .iter()
        .filter(|(port, shown)| {
            agentloom_engine::value_holds_marker(shown)
                && given
                    .and_then(|values| values.get(*port))
                    .is_none_or(|value| value == *shown)
        })
        .map(|(port, _)| port.as_str())
        .collect()
}

/// `NODE.PORT=JSON` edits of the paused node `node`: the values by port, or why not (the
/// item, and the node it names when it is another).
pub fn edits_of(node: &str, set: &[String]) -> Result<ValueMap, String> {
    let mut values = ValueMap::new();
    for item in set {
        let edit = agentloom_engine::ForkEdit::parse(item)?;
        if edit.node != node {
            return Err(format!(
                "--set {}.{}: the run is paused at `{node}`, not at `{}`",
                edit.node, edit.port, edit.node
            ));
        }
        values.insert(edit.port, edit.value);
    }
    Ok(values)
}
