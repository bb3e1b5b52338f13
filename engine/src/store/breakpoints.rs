//! The debugger's part of the run log: the breakpoints a run was started with, the pauses
//! at them a run waits on (and the decisions made on them until it has continued), and the
//! parent, edits and graph changes of forked runs.

use std::collections::BTreeSet;

use rusqlite::{OptionalExtension as _, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use super::approvals::{claimable_status, refused_claim, take_run};
use super::liveness::this_process_token;
use super::{Claim, RunStore, StoreError, from_i64, now_ms, to_i64};
use crate::breakpoints::{BreakAt, Breakpoint, BreakpointDecision, BreakpointHit};
use crate::fork::ForkRecord;

/// A recorded run paused at a breakpoint (or continued from one, until it ends).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingBreakpoint {
    pub run_id: String,
    pub hit: BreakpointHit,
    /// Unix milliseconds.
    pub requested_at_ms: u64,
    /// Set once someone decided; the run has not continued with it yet.
    pub decision: Option<BreakpointDecision>,
}

/// hit, requested at, decision (JSON texts).
type PauseRow = (String, i64, Option<String>);

impl RunStore {
    /// Keeps the breakpoints run `run_id` was started with, so that continuing it from the
    /// log stops at them too.
    pub fn record_run_breakpoints(
        &self,
        run_id: &str,
        breakpoints: &BTreeSet<Breakpoint>,
    ) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT INTO run_breakpoints (run_id, breakpoints_json) VALUES (?1, ?2)
                 ON CONFLICT (run_id) DO UPDATE SET breakpoints_json = excluded.breakpoints_json",
                params![run_id, json(breakpoints)],
            )
            .map_err(|source| self.write_error(source))?;
        Ok(())
    }

    /// The breakpoints run `run_id` was started with (none when it was not debugged).
    pub fn run_breakpoints(&self, run_id: &str) -> Result<BTreeSet<Breakpoint>, StoreError> {
        let text: Option<String> = self
            .lock()
            .query_row(
                "SELECT breakpoints_json FROM run_breakpoints WHERE run_id = ?1",
                params![run_id],
                |row| row.get(0),
            )
            .optional()
            .map_err(|source| self.read_error(source))?;
        text.map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|err| self.damaged(format!("the breakpoints of run {run_id}: {err}")))
            .map(Option::unwrap_or_default)
    }

    /// Records that run `run_id` pauses at `hit` (replacing an earlier pause there); a going
    /// run is listed as `waiting` from now on.
    pub fn save_breakpoint_pause(
        &self,
        run_id: &str,
        hit: &BreakpointHit,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| self.write_error(source))?;
        tx.execute(
            "INSERT INTO pending_breakpoints (run_id, node_path, at, hit_json, requested_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (run_id, node_path, at) DO UPDATE SET
                hit_json = excluded.hit_json, requested_at_ms = excluded.requested_at_ms,
                decision_json = NULL, decided_by = NULL, decided_at_ms = NULL",
            params![
                run_id,
                hit.node,
                hit.at.as_str(),
                json(hit),
                to_i64(now_ms())
            ],
        )
        .map_err(|source| self.write_error(source))?;
        tx.execute(
            "UPDATE runs SET status = 'waiting' WHERE id = ?1 AND status = 'running'",
            params![run_id],
        )
        .map_err(|source| self.write_error(source))?;
        tx.commit().map_err(|source| self.write_error(source))?;
        Ok(())
    }

    /// The pauses run `run_id` waits on (or that were decided but not yet continued),
    /// oldest first.
    pub fn pending_breakpoints(&self, run_id: &str) -> Result<Vec<PendingBreakpoint>, StoreError> {
        let rows: Vec<PauseRow> = {
            let conn = self.lock();
            let mut stmt = conn
                .prepare(
                    "SELECT hit_json, requested_at_ms, decision_json FROM pending_breakpoints
                     WHERE run_id = ?1 ORDER BY requested_at_ms, node_path, at",
                )
                .map_err(|source| self.read_error(source))?;
            stmt.query_map(params![run_id], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .and_then(Iterator::collect)
            .map_err(|source| self.read_error(source))?
        };
        rows.into_iter()
            .map(|(hit, at, decision)| {
                let hit: BreakpointHit = serde_json::from_str(&hit).map_err(|err| {
                    self.damaged(format!("a breakpoint pause of run {run_id}: {err}"))
                })?;
                let decision = decision
                    .map(|text| serde_json::from_str(&text))
                    .transpose()
                    .map_err(|err| {
                        self.damaged(format!(
                            "the decision at the breakpoint at `{}` of run {run_id}: {err}",
                            hit.node
                        ))
                    })?;
                Ok(PendingBreakpoint {
                    run_id: run_id.to_owned(),
                    hit,
                    requested_at_ms: from_i64(at),
                    decision,
                })
            })
            .collect()
    }

    /// Records a decision at the pause of `node` (`at`) in run `run_id` and claims the run
    /// for continuing, in one transaction: only the first decision counts (as
    /// [`RunStore::claim_decision`] for approvals).
    pub fn claim_breakpoint(
        &self,
        run_id: &str,
        node: &str,
        at: BreakAt,
        decision: &BreakpointDecision,
    ) -> Result<Claim, StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| self.write_error(source))?;
        let status = match claimable_status(&tx, run_id).map_err(|e| self.write_error(e))? {
            Ok(status) => status,
            Err(claim) => return Ok(claim),
        };
        let row: Option<(Option<String>, Option<String>, Option<i64>)> = tx
            .query_row(
                "SELECT decision_json, decided_by, decided_at_ms FROM pending_breakpoints
                 WHERE run_id = ?1 AND node_path = ?2 AND at = ?3",
                params![run_id, node, at.as_str()],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()
            .map_err(|source| self.write_error(source))?;
        let Some((earlier, decided_by, decided_at)) = row else {
            return Ok(match status {
                Some(status) if status != "waiting" => Claim::NotWaiting { status },
                _ => Claim::NoRequest,
            });
        };
        let approved = earlier.map(|_| true);
        if let Some(refused) = refused_claim(approved, decided_by.as_deref(), decided_at, status) {
            return Ok(refused);
        }
        let now = to_i64(now_ms());
        let token = this_process_token();
        tx.execute(
            "UPDATE pending_breakpoints SET decision_json = ?4, decided_by = ?5, decided_at_ms = ?6
             WHERE run_id = ?1 AND node_path = ?2 AND at = ?3",
            params![run_id, node, at.as_str(), json(decision), token, now],
        )
        .map_err(|source| self.write_error(source))?;
        take_run(&tx, run_id, token, now).map_err(|source| self.write_error(source))?;
        tx.commit().map_err(|source| self.write_error(source))?;
        Ok(Claim::Won)
    }

    /// Forgets the pause of `node` at `at` (decided while the run was going).
    pub fn clear_breakpoint_pause(
        &self,
        run_id: &str,
        node: &str,
        at: BreakAt,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| self.write_error(source))?;
        tx.execute(
            "DELETE FROM pending_breakpoints WHERE run_id = ?1 AND node_path = ?2 AND at = ?3",
            params![run_id, node, at.as_str()],
        )
        .map_err(|source| self.write_error(source))?;
        tx.execute(
            &format!(
                "UPDATE runs SET status = 'running'
                 WHERE id = ?1 AND status = 'waiting' AND finished_at_ms IS NULL
                   AND NOT {}",
                super::approvals::UNDECIDED
            ),
            params![run_id],
        )
        .map_err(|source| self.write_error(source))?;
        tx.commit().map_err(|source| self.write_error(source))?;
        Ok(())
    }

    /// Forgets the decided pauses of a run that has continued with them.
    pub fn clear_decided_breakpoints(&self, run_id: &str) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "DELETE FROM pending_breakpoints WHERE run_id = ?1 AND decision_json IS NOT NULL",
                params![run_id],
            )
            .map_err(|source| self.write_error(source))?;
        Ok(())
    }

    /// Records that run `run_id` is a fork (see [`ForkRecord`]).
    pub fn record_fork(&self, run_id: &str, fork: &ForkRecord) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT INTO run_forks (run_id, parent_run_id, edits_json, changes_json)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (run_id) DO UPDATE SET parent_run_id = excluded.parent_run_id,
                    edits_json = excluded.edits_json, changes_json = excluded.changes_json",
                params![
                    run_id,
                    fork.parent_run_id,
                    json(&fork.edits),
                    json(&fork.changes)
                ],
            )
            .map_err(|source| self.write_error(source))?;
        Ok(())
    }

    /// What run `run_id` was forked from, when it is a fork.
    pub fn run_fork(&self, run_id: &str) -> Result<Option<ForkRecord>, StoreError> {
        let row: Option<(String, String, String)> = self
            .lock()
            .query_row(
                "SELECT parent_run_id, edits_json, changes_json FROM run_forks WHERE run_id = ?1",
                params![run_id],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()
            .map_err(|source| self.read_error(source))?;
        row.map(|(parent_run_id, edits, changes)| {
            let damaged = |err: serde_json::Error| {
                self.damaged(format!("the fork record of run {run_id}: {err}"))
            };
            Ok(ForkRecord {
                parent_run_id,
                edits: serde_json::from_str(&edits).map_err(damaged)?,
                changes: serde_json::from_str(&changes).map_err(damaged)?,
            })
        })
        .transpose()
    }

    /// The forks of run `run_id` (their ids, oldest first).
    pub fn forks_of(&self, run_id: &str) -> Result<Vec<String>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("SELECT run_id FROM run_forks WHERE parent_run_id = ?1 ORDER BY run_id")
            .map_err(|source| self.read_error(source))?;
        stmt.query_map(params![run_id], |row| row.get(0))
            .and_then(Iterator::collect)
            .map_err(|source| self.read_error(source))
    }
}

/// What a run killed while paused waits for: an approval, or else a breakpoint.
pub(super) fn waiting_reason(conn: &rusqlite::Connection, run_id: &str) -> &'static str {
    let approval = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM pending_approvals WHERE run_id = ?1)",
            params![run_id],
            |row| row.get::<_, bool>(0),
        )
        .unwrap_or(true);
    if approval {
        "waiting for approval"
    } else {
        "paused at a breakpoint"
    }
}

fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}
