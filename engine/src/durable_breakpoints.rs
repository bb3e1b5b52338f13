//! Durable breakpoints: a pause is stored in the run log before anyone is asked, so a run
//! paused at a breakpoint survives the process (see [`RunStore::save_breakpoint_pause`]).

use std::sync::Arc;

use crate::breakpoints::{BreakpointDecision, BreakpointHandler, BreakpointHit};
use crate::store::RunStore;

/// Stores every pause in the run log, then asks `ask` (the app, a terminal) when there is
/// someone to ask, or pauses the run when there is not.
pub struct DurableBreakpoints {
    store: Arc<RunStore>,
    ask: Option<Arc<dyn BreakpointHandler>>,
}

impl DurableBreakpoints {
    /// `ask: None` pauses the run at every breakpoint (a headless run).
    pub fn new(store: Arc<RunStore>, ask: Option<Arc<dyn BreakpointHandler>>) -> Self {
        Self { store, ask }
    }
}

#[async_trait::async_trait]
impl BreakpointHandler for DurableBreakpoints {
    async fn at_breakpoint(&self, run_id: &str, hit: &BreakpointHit) -> Option<BreakpointDecision> {
        let stored = self.store.save_breakpoint_pause(run_id, hit);
        if let Err(error) = &stored {
            tracing::warn!(%error, run_id, node = hit.node, "cannot store the breakpoint pause");
        }
        let decision = match &self.ask {
            Some(ask) => ask.at_breakpoint(run_id, hit).await,
            None => None,
        };
        let Some(decision) = decision else {
            // A pause nobody could continue would lose the run: go on instead.
            return match stored {
                Ok(()) => None,
                Err(_) => Some(BreakpointDecision::Continue {
                    values: agentloom_core::ValueMap::new(),
                }),
            };
        };
        if stored.is_ok()
            && let Err(error) = self.store.clear_breakpoint_pause(run_id, &hit.node, hit.at)
        {
            tracing::warn!(%error, run_id, node = hit.node, "cannot clear the decided breakpoint pause");
        }
        Some(decision)
    }
}
