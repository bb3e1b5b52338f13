//! Durable approvals: a request is stored in the run log before anyone is asked, so a
//! run paused on it survives the process (see [`RunStore::save_approval_request`]).

use std::sync::Arc;

use agentloom_core::{ApprovalDecision, ApprovalRequest};

use crate::approver::Approver;
use crate::store::RunStore;

/// Stores every approval request in the run log, then asks `ask` (the app, a terminal)
/// when there is someone to ask, or pauses the run when there is not.
pub struct DurableApprover {
    store: Arc<RunStore>,
    ask: Option<Arc<dyn Approver>>,
}

impl DurableApprover {
    /// `ask: None` pauses the run at every approval (a headless run).
    pub fn new(store: Arc<RunStore>, ask: Option<Arc<dyn Approver>>) -> Self {
        Self { store, ask }
    }
}

#[async_trait::async_trait]
impl Approver for DurableApprover {
    async fn decide_or_pause(
        &self,
        run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Option<ApprovalDecision> {
        let stored = self.store.save_approval_request(run_id, node, request);
        if let Err(error) = &stored {
            tracing::warn!(%error, run_id, node, "cannot store the approval request");
        }
        let Some(ask) = &self.ask else {
            return match stored {
                Ok(()) => None,
                // A pause nobody could resume would lose the run: refuse instead.
                Err(error) => Some(ApprovalDecision::Rejected {
                    message: format!(
                        "the request could not be stored to wait for a decision: {error}"
                    ),
                }),
            };
        };
        // Whoever was asked may go away undecided (the app closing): the request stays
        // stored and the run waits, as a headless one does.
        let Some(decision) = ask.decide_or_pause(run_id, node, request).await else {
            return match stored {
                Ok(()) => None,
                Err(error) => Some(ApprovalDecision::Rejected {
                    message: format!(
                        "nobody decided and the request could not be stored to wait: {error}"
                    ),
                }),
            };
        };
        if stored.is_ok()
            && let Err(error) = self.store.clear_approval(run_id, node)
        {
            tracing::warn!(%error, run_id, node, "cannot clear the answered approval request");
        }
        Some(decision)
    }
}

/// Told before a node with side effects sends anything, and waited for: whoever runs the
/// run records that the side effect started (so that a run taken over after a crash does
/// not send it again) and may refuse, failing the node with the reason given (the run was
/// taken over by another worker; the side effect may have happened already).
#[async_trait::async_trait]
pub trait SideEffectGate: Send + Sync {
    /// `node` is the node's id in the run (`call/inner` for a sub-run's node);
    /// `idempotency_key` the key the node sends with its request, if any
    /// (`NodeImpl::idempotency_key`).
    async fn before_sending(
        &self,
        node: &str,
        attempt: u32,
        idempotency_key: Option<&str>,
    ) -> Result<(), String>;
}
