//! Asking a person whether a side effect may happen (safe mode).

use agentloom_core::{ApprovalDecision, ApprovalRequest};

/// Asks a person whether a side effect may happen (safe mode). An approver implements one
/// method, [`Approver::decide_or_pause`], which the run asks; [`Approver::decide`] is made
/// from it.
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// Decides on `request`, made by node `node` of run `run_id`: approve (possibly with
    /// edited arguments) or reject with a message. May wait as long as it needs. `None`:
    /// nobody can decide now. The node then waits, the rest of the graph runs as far as it
    /// can, and the run ends `waiting` (to be resumed with the decision through
    /// [`crate::RunOptions::seed`]).
    async fn decide_or_pause(
        &self,
        run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Option<ApprovalDecision>;

    /// Like [`Approver::decide_or_pause`], but always answers: nobody deciding now rejects.
    async fn decide(
        &self,
        run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> ApprovalDecision {
        self.decide_or_pause(run_id, node, request)
            .await
            .unwrap_or_else(|| ApprovalDecision::Rejected {
                message: "nobody can approve it now".to_owned(),
            })
    }
}
