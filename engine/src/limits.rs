//! The limits a run and all its sub-runs share: steps and money.
//!
//! A sub-run (a `control.for_each` over a graph, any block calling `run_subgraph`) gets
//! the parent's [`RunLimits`], never a fresh budget: a loop inside a loop still runs at most
//! `max_steps` nodes in all and spends at most `max_cost_usd`. (The CPU and request slots
//! are shared with sub-runs the same way, in the executor.)

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The shared budget of a run tree.
pub(crate) struct RunLimits {
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
    pub(crate) fn new(max_steps: Option<u64>, max_cost_usd: Option<f64>) -> Self {
        Self {
            steps: AtomicU64::new(0),
            max_steps,
            money: Mutex::new(Money::default()),
            max_cost_usd,
        }
    }

    /// The same limits with what the run did before it paused already counted (a resumed
    /// run is the same run: it may not spend its whole budget again).
    #[must_use]
    pub(crate) fn with_earlier(mut self, steps: u64, spent_usd: f64) -> Self {
        *self.steps.get_mut() = steps;
        if let Ok(money) = self.money.get_mut() {
            money.spent_usd = spent_usd.max(0.0);
        }
        self
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
        // Without a cost limit nothing is ever set aside.
        if self.max_cost_usd.is_none() {
            return;
        }
        let released = match node_budget.reserved_usd.lock() {
            Ok(mut mine) => {
                let released = amount_usd.max(0.0).min(*mine);
                *mine -= released;
                released
            }
            Err(_) => return,
        };
        // Nothing set aside (no cost limit, or all settled): the run's total stays as it is.
        if released <= 0.0 {
            return;
        }
        if let Ok(mut money) = self.money.lock() {
            money.reserved_usd = (money.reserved_usd - released).max(0.0);
        }
    }

    pub(crate) fn release_all(&self, node_budget: &NodeBudget) {
        self.release(node_budget, f64::INFINITY);
    }
}
