//! Asking a person before a side effect (safe mode) or when a node asks: a decision taken
//! while the run was paused, else the run's approver, else the node pauses; a sub-run asks
//! its parent's approver for its nested node.

use std::sync::Arc;

use agentloom_core::{ApprovalDecision, ApprovalRequest, BlockError};

use super::shared::RunShared;
use crate::approver::Approver;
use crate::events::EventKind;
use crate::redact::Redactor;

/// Asks the run's approver about `request` (or takes the decision made while the run was
/// paused); fails when nobody can answer, pauses the node when nobody can answer now.
pub(super) async fn ask_approval(
    shared: &Arc<RunShared>,
    node: &str,
    request: &ApprovalRequest,
) -> Result<ApprovalDecision, BlockError> {
    // Asked and kept redacted: a secret in a node's inputs reaches no person and no log.
    let shown = shared.redactor.approval_request(request);
    let restore = |decision| Redactor::restore_decision(decision, request, &shown);
    if let Some(decision) = shared
        .decisions
        .lock()
        .ok()
        .and_then(|mut d| d.remove(node))
    {
        return Ok(restore(decision));
    }
    let Some(approver) = shared.executor.approver.clone() else {
        return Err(BlockError::permanent(format!(
            "safe mode: `{node}` ({}) has side effects and needs approval, but nobody can approve it here; run it from the app, or turn safe mode off",
            shown.action
        )));
    };
    shared.emit(EventKind::NodeAwaitingApproval {
        node: node.to_owned(),
    });
    tokio::select! {
        decision = approver.decide_or_pause(&shared.run_id, node, &shown) => match decision {
            Some(decision) => Ok(restore(decision)),
            None => Err(shared.wait_for_decision(node)),
        },
        () = shared.cancel.cancelled() => {
            if !shared.pause.is_cancelled() {
                return Err(BlockError::cancelled());
            }
            // Paused: the stored request keeps the node waiting for whoever decides later.
            Err(shared.wait_for_decision(node))
        }
    }
}

/// Asks the parent run's approver for a sub-run's node, as that run's node `{prefix}/{node}`.
pub(super) struct SubRunApprover {
    pub(super) parent: Arc<dyn Approver>,
    pub(super) run_id: String,
    pub(super) prefix: String,
}

#[async_trait::async_trait]
impl Approver for SubRunApprover {
    async fn decide_or_pause(
        &self,
        _run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Option<ApprovalDecision> {
        let nested = format!("{}/{node}", self.prefix);
        self.parent
            .decide_or_pause(&self.run_id, &nested, request)
            .await
    }
}
