//! The limits a run and all its sub-runs share: node slots (concurrency), steps and money.
//!
//! A sub-run (a `control.for_each` over a graph, any block calling `run_subgraph`) gets
//! the parent's [`RunLimits`], never a fresh budget: a loop inside a loop still runs at most
//! `concurrency` nodes at once, at most `max_steps` nodes in all, and spends at most
//! `max_cost_usd`. A node waiting on its sub-run lends its slot to the sub-run's nodes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The shared budget of a run tree.
pub(crate) struct RunLimits {
    slots: Arc<Semaphore>,
    steps: AtomicU64,
    max_steps: Option<u64>,
    money: Mutex<Money>,
    max_cost_usd: Option<f64>,
}

#[derive(Default)]
struct Money {
    spent_usd: f64,
    /// Estimates of requests in flight, not yet settled.
    reserved_usd: f64,
}

/// What one node attempt has reserved and not yet settled.
#[derive(Default)]
pub(crate) struct NodeBudget {
    reserved_usd: Mutex<f64>,
}

impl RunLimits {
    pub(crate) fn new(
        concurrency: usize,
        max_steps: Option<u64>,
        max_cost_usd: Option<f64>,
    ) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            steps: AtomicU64::new(0),
            max_steps,
            money: Mutex::new(Money::default()),
            max_cost_usd,
        }
    }

    /// A free node slot, if there is one now.
    pub(crate) fn try_slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// Waits for a free slot and takes it.
    pub(crate) async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).acquire_owned().await.ok()
    }

    /// Counts one more node started; fails past `max_steps`.
    pub(crate) fn take_step(&self) -> Result<(), String> {
        let taken = self.steps.fetch_add(1, Ordering::Relaxed);
        match self.max_steps {
            Some(limit) if taken >= limit => Err(format!(
                "step limit reached: the run may execute at most {limit} nodes"
            )),
            _ => Ok(()),
        }
    }

    /// Adds spent money; fails once the run spent more than `max_cost_usd`.
    pub(crate) fn spend(&self, cost_usd: f64, node: &str) -> Result<(), String> {
        let Ok(mut money) = self.money.lock() else {
            return Ok(());
        };
        money.spent_usd += cost_usd;
        match self.max_cost_usd {
            Some(max) if money.spent_usd > max => Err(format!(
                "cost limit reached: the run spent ${:.4}, more than its max_cost_usd of ${max:.4} (node `{node}`)",
                money.spent_usd
            )),
            _ => Ok(()),
        }
    }

    /// Sets `estimate_usd` aside for a request about to be sent; fails when what was spent
    /// and what requests in flight may spend leave no room for it.
    pub(crate) fn reserve(
        &self,
        node_budget: &NodeBudget,
        estimate_usd: f64,
        node: &str,
    ) -> Result<(), String> {
        let Some(max) = self.max_cost_usd else {
            return Ok(());
        };
        let estimate_usd = estimate_usd.max(0.0);
        let Ok(mut money) = self.money.lock() else {
            return Ok(());
        };
        if money.spent_usd + money.reserved_usd + estimate_usd > max {
            return Err(format!(
                "cost limit reached: node `{node}` may spend up to ${estimate_usd:.4}, but the run has spent ${:.4} and ${:.4} is set aside for requests in flight, of its max_cost_usd of ${max:.4}",
                money.spent_usd, money.reserved_usd
            ));
        }
        money.reserved_usd += estimate_usd;
        if let Ok(mut mine) = node_budget.reserved_usd.lock() {
            *mine += estimate_usd;
        }
        Ok(())
    }

    /// Gives back (up to) `amount_usd` this node reserved.
    pub(crate) fn release(&self, node_budget: &NodeBudget, amount_usd: f64) {
        let released = match node_budget.reserved_usd.lock() {
            Ok(mut mine) => {
                let released = amount_usd.max(0.0).min(*mine);
                *mine -= released;
                released
            }
            Err(_) => return,
        };
        if let Ok(mut money) = self.money.lock() {
            money.reserved_usd = (money.reserved_usd - released).max(0.0);
        }
    }

    pub(crate) fn release_all(&self, node_budget: &NodeBudget) {
        self.release(node_budget, f64::INFINITY);
    }
}

/// The slot a running node holds. A node that waits on sub-runs lends it to them, and takes
/// one back before it goes on.
pub(crate) struct SlotHolder {
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    lent: AtomicU64,
}

impl SlotHolder {
    pub(crate) fn new(permit: OwnedSemaphorePermit) -> Self {
        Self {
            permit: Mutex::new(Some(permit)),
            lent: AtomicU64::new(0),
        }
    }

    /// Frees the slot while a sub-run goes (the first of concurrent sub-runs frees it).
    pub(crate) fn lend(&self) {
        if self.lent.fetch_add(1, Ordering::AcqRel) == 0
            && let Ok(mut permit) = self.permit.lock()
        {
            permit.take();
        }
    }

    /// After a sub-run: the last one to end waits for a slot again.
    pub(crate) async fn take_back(&self, limits: &RunLimits) {
        if self.lent.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let fresh = limits.slot().await;
        if let Ok(mut permit) = self.permit.lock()
            && permit.is_none()
        {
            *permit = fresh;
        }
    }
}
