//! Pausing a node at a breakpoint of its run ([`crate::RunDebug`]): the values shown
//! (redacted), the decision asked for or taken from a continued run, and the values the node
//! goes on with.

use std::sync::Arc;

use agentloom_core::{BlockError, PortSpec, ValueMap};

use super::shared::RunShared;
use crate::breakpoints::{BreakAt, BreakpointDecision, BreakpointHit, HitPort, RunDebug};
use crate::events::EventKind;
use crate::redact::Redactor;

/// The values node `node_id` goes on with at `at` (`values` themselves when the run does not
/// pause there), or the error that ends it: paused with nobody to decide now (the run ends
/// `waiting`), stopped, or edited values that do not fit their ports.
pub(super) async fn pause_at(
    shared: &Arc<RunShared>,
    debug: &Arc<RunDebug>,
    node_id: &str,
    at: BreakAt,
    ports: &[PortSpec],
    values: ValueMap,
) -> Result<ValueMap, BlockError> {
    let path = format!("{}{node_id}", shared.path_prefix);
    let decided = debug.take_decision(&path, at);
    let stepping = match (&decided, debug.pauses_at(&path, at)) {
        (Some(_), pauses) => pauses.unwrap_or(false),
        (None, Some(stepping)) => stepping,
        (None, None) => return Ok(values),
    };
    // Shown and kept redacted: a secret in a node's values reaches no person and no log.
    let mut shown = values.clone();
    shared.redactor.map(&mut shown);
    let hit = BreakpointHit {
        node: path.clone(),
        at,
        values: shown,
        ports: HitPort::of(ports),
        stepping,
    };
    let decision = match decided {
        Some(decision) => decision,
        None => match ask(shared, debug, node_id, &hit).await {
            Ok(decision) => decision,
            Err(err) => return Err(err),
        },
    };
    debug.note_decision(&decision);
    let edits = match decision {
        BreakpointDecision::Stop => {
            shared.cancel.cancel();
            return Err(BlockError::cancelled());
        }
        BreakpointDecision::Continue { values: edits }
        | BreakpointDecision::Step { values: edits } => edits,
    };
    // A value left as it was shown goes on as the node had it (its secrets back).
    let edits = Redactor::restore_values(edits, &values, &hit.values);
    let checked = BreakpointHit { values, ..hit };
    checked.edited(&edits).map_err(BlockError::permanent)
}

/// Asks the run's breakpoint handler at `hit`; with none, or nobody deciding now, the node
/// waits and the run ends `waiting`.
async fn ask(
    shared: &Arc<RunShared>,
    debug: &Arc<RunDebug>,
    node_id: &str,
    hit: &BreakpointHit,
) -> Result<BreakpointDecision, BlockError> {
    shared.emit(EventKind::NodeAtBreakpoint {
        node: node_id.to_owned(),
        at: hit.at,
        values: hit.values.clone(),
    });
    let Some(handler) = debug.handler() else {
        return Err(shared.wait_at_breakpoint(node_id));
    };
    // A sub-run's pause is its top run's (`RUN/call` → `RUN`).
    let run_id = shared
        .run_id
        .split('/')
        .next()
        .unwrap_or(&shared.run_id)
        .to_owned();
    tokio::select! {
        decision = handler.at_breakpoint(&run_id, hit) => match decision {
            Some(decision) => Ok(decision),
            None => Err(shared.wait_at_breakpoint(node_id)),
        },
        () = shared.cancel.cancelled() => {
            if !shared.pause.is_cancelled() {
                return Err(BlockError::cancelled());
            }
            Err(shared.wait_at_breakpoint(node_id))
        }
    }
}
