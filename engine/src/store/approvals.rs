//! Approvals a paused run waits for, and the seeds that resume or rerun a recorded run.

use std::collections::{BTreeMap, BTreeSet};

use agentloom_core::{ApprovalDecision, ApprovalRequest, Value, ValueMap};
use rusqlite::{OptionalExtension as _, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use super::liveness::{Liveness, STALE_HEARTBEAT_MS, liveness, this_process_token};
use super::{RunStore, StoreError, from_i64, now_ms, to_i64};
use crate::events::NodeStatus;
use crate::run_state::NodeProgress;
use crate::seed::{EarlierSegments, RunSeed};

/// A side effect of a recorded run waiting for (or decided by) a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    pub run_id: String,
    pub node: String,
    pub request: ApprovalRequest,
    /// Unix milliseconds.
    pub requested_at_ms: u64,
    /// Set once a person decided; the run has not resumed with it yet.
    pub decision: Option<ApprovalDecision>,
}

/// What deciding an approval came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// This decision counts and this process resumes the run.
    Won,
    /// Someone decided first.
    AlreadyDecided(EarlierDecision),
    /// The run is not waiting (any more).
    NotWaiting { status: String },
    /// The run waits for no approval of that node.
    NoRequest,
    /// The run is still going in the process that asks for the decision (the app, a
    /// terminal): it is decided there, or once that process has gone.
    AskedElsewhere { pid: Option<u32> },
}

/// The decision that came first.
#[derive(Clone, Debug, PartialEq)]
pub struct EarlierDecision {
    pub approved: bool,
    /// Unix milliseconds (unknown for a decision recorded by an older build).
    pub decided_at_ms: Option<u64>,
    /// The process that decided, when known.
    pub decided_by_pid: Option<u32>,
}

/// The pid in a process token (`linux:<boot>:<pid>:<start>`).
fn token_pid(token: &str) -> Option<u32> {
    token
        .strip_prefix("linux:")?
        .split(':')
        .nth(1)?
        .parse()
        .ok()
}

/// Whether the process that wrote `token` still runs (judged by the heartbeat at
/// `heartbeat_ms` where it cannot be checked).
fn owner_alive(token: &str, heartbeat_ms: Option<i64>) -> bool {
    match liveness(token) {
        Liveness::Alive => true,
        Liveness::Dead => false,
        Liveness::Unknown => {
            now_ms().saturating_sub(heartbeat_ms.map_or(0, from_i64)) <= STALE_HEARTBEAT_MS
        }
    }
}

/// The status of run `run_id` (`None`: no such run) in a deciding transaction, or the claim
/// that ends it: the process running it is asking someone (the app, a terminal) right now.
pub(super) fn claimable_status(
    tx: &rusqlite::Transaction<'_>,
    run_id: &str,
) -> rusqlite::Result<Result<Option<String>, Claim>> {
    let run: Option<RunOwnerRow> = tx
        .query_row(
            "SELECT status, finished_at_ms, owner, heartbeat_at_ms FROM runs WHERE id = ?1",
            params![run_id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .optional()?;
    let asked_by = run
        .as_ref()
        .and_then(|(status, finished, owner, heartbeat)| {
            let owner = owner.as_deref()?;
            (status == "waiting" && finished.is_none() && owner_alive(owner, *heartbeat))
                .then_some(owner)
        });
    if let Some(owner) = asked_by {
        return Ok(Err(Claim::AskedElsewhere {
            pid: token_pid(owner),
        }));
    }
    Ok(Ok(run.map(|(status, ..)| status)))
}

/// Why a decision on a request does not count: it was decided already (`earlier_approved`,
/// by the process `decided_by`, which still runs, or the run is no longer waiting), or the
/// run (`status`) is not waiting. `None`: it counts.
pub(super) fn refused_claim(
    earlier_approved: Option<bool>,
    decided_by: Option<&str>,
    decided_at: Option<i64>,
    status: Option<String>,
) -> Option<Claim> {
    if let Some(approved) = earlier_approved {
        let decider_alive = decided_by.is_some_and(|token| liveness(token) != Liveness::Dead);
        if decider_alive || status.as_deref() != Some("waiting") {
            return Some(Claim::AlreadyDecided(EarlierDecision {
                approved,
                decided_at_ms: decided_at.map(from_i64),
                decided_by_pid: decided_by.and_then(token_pid),
            }));
        }
    }
    if status.as_deref() != Some("waiting") {
        return Some(Claim::NotWaiting {
            status: status.unwrap_or_else(|| "gone".to_owned()),
        });
    }
    None
}

/// Makes run `run_id` this process's (`token`) to resume: another decider sees it taken.
pub(super) fn take_run(
    tx: &rusqlite::Transaction<'_>,
    run_id: &str,
    token: &str,
    now: i64,
) -> rusqlite::Result<usize> {
    tx.execute(
        "UPDATE runs SET status = 'running', pid = ?2, owner = ?3, heartbeat_at_ms = ?4
         WHERE id = ?1",
        params![run_id, i64::from(std::process::id()), token, now],
    )
}

/// SQL: run `?1` has a request (or a breakpoint pause) nobody has decided yet.
pub(super) const UNDECIDED: &str =
    "(EXISTS (SELECT 1 FROM pending_approvals WHERE run_id = ?1 AND decision_json IS NULL)
      OR EXISTS (SELECT 1 FROM pending_breakpoints WHERE run_id = ?1 AND decision_json IS NULL))";

/// status, finished at, owner token, heartbeat at.
type RunOwnerRow = (String, Option<i64>, Option<String>, Option<i64>);

/// node, action, arguments, checkpoint, requested at, decision, details (JSON texts).
type ApprovalRow = (
    String,
    String,
    String,
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
);

impl RunStore {
    /// Records that node `node` of run `run_id` waits for a decision on `request`
    /// (replacing an earlier request of the same node). A going run is listed as `waiting`
    /// from now on, while someone is asked ([`RunStore::clear_approval`] lists it as
    /// running again).
    pub fn save_approval_request(
        &self,
        run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| self.write_error(source))?;
        tx.execute(
            "INSERT INTO pending_approvals (run_id, node_id, action, arguments_json, checkpoint_json,
                                            requested_at_ms, decision_json, details_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7)
             ON CONFLICT (run_id, node_id) DO UPDATE SET
                action = excluded.action, arguments_json = excluded.arguments_json,
                checkpoint_json = excluded.checkpoint_json,
                requested_at_ms = excluded.requested_at_ms, decision_json = NULL,
                decided_by = NULL, decided_at_ms = NULL, details_json = excluded.details_json",
            params![
                run_id,
                node,
                request.action,
                json(&request.arguments),
                request.checkpoint.as_ref().map(json),
                to_i64(now_ms()),
                request.details.as_ref().map(json),
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

    /// The approvals run `run_id` waits for (or that were decided but not yet resumed),
    /// oldest first.
    pub fn pending_approvals(&self, run_id: &str) -> Result<Vec<PendingApproval>, StoreError> {
        let conn = self.lock();
        let read_error = |source| StoreError::Read {
            path: self.path.clone(),
            source,
        };
        let mut stmt = conn
            .prepare(
                "SELECT node_id, action, arguments_json, checkpoint_json, requested_at_ms, decision_json,
                        details_json
                 FROM pending_approvals WHERE run_id = ?1 ORDER BY requested_at_ms, node_id",
            )
            .map_err(read_error)?;
        let rows: Vec<ApprovalRow> = stmt
            .query_map(params![run_id], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                ))
            })
            .and_then(Iterator::collect)
            .map_err(read_error)?;
        rows.into_iter()
            .map(
                |(node, action, arguments, checkpoint, at, decision, details)| {
                    let damaged = |what: &str, err: serde_json::Error| StoreError::Damaged {
                        path: self.path.clone(),
                        message: format!(
                            "the {what} of the approval of `{node}` in run {run_id}: {err}"
                        ),
                    };
                    let arguments: Value =
                        serde_json::from_str(&arguments).map_err(|e| damaged("arguments", e))?;
                    let checkpoint = checkpoint
                        .map(|text| serde_json::from_str::<Value>(&text))
                        .transpose()
                        .map_err(|e| damaged("checkpoint", e))?;
                    let decision = decision
                        .map(|text| serde_json::from_str::<ApprovalDecision>(&text))
                        .transpose()
                        .map_err(|e| damaged("decision", e))?;
                    let details = details
                        .map(|text| serde_json::from_str::<Value>(&text))
                        .transpose()
                        .map_err(|e| damaged("details", e))?;
                    Ok(PendingApproval {
                        run_id: run_id.to_owned(),
                        request: ApprovalRequest {
                            action,
                            arguments,
                            checkpoint,
                            details,
                        },
                        node,
                        requested_at_ms: from_i64(at),
                        decision,
                    })
                },
            )
            .collect()
    }

    /// Records a person's decision on the request of `node` in run `run_id` and claims the
    /// run for resuming, in one transaction: only the first decision counts. A decision
    /// made by a process that has since died (a resume that never finished) may be made
    /// again.
    pub fn claim_decision(
        &self,
        run_id: &str,
        node: &str,
        decision: &ApprovalDecision,
    ) -> Result<Claim, StoreError> {
        let mut conn = self.lock();
        let write_error = |source| StoreError::Write {
            path: self.path.clone(),
            source,
        };
        // IMMEDIATE: two deciders never both read "undecided".
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(write_error)?;
        let status = match claimable_status(&tx, run_id).map_err(write_error)? {
            Ok(status) => status,
            Err(claim) => return Ok(claim),
        };
        let row: Option<(Option<String>, Option<String>, Option<i64>)> = tx
            .query_row(
                "SELECT decision_json, decided_by, decided_at_ms FROM pending_approvals
                 WHERE run_id = ?1 AND node_id = ?2",
                params![run_id, node],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()
            .map_err(write_error)?;
        let Some((earlier, decided_by, decided_at)) = row else {
            return Ok(match status {
                Some(status) if status != "waiting" => Claim::NotWaiting { status },
                _ => Claim::NoRequest,
            });
        };
        let approved = earlier.map(|earlier| {
            serde_json::from_str::<ApprovalDecision>(&earlier).is_ok_and(|d| d.is_approved())
        });
        if let Some(refused) = refused_claim(approved, decided_by.as_deref(), decided_at, status) {
            return Ok(refused);
        }
        let now = to_i64(now_ms());
        let token = this_process_token();
        tx.execute(
            "UPDATE pending_approvals SET decision_json = ?3, decided_by = ?4, decided_at_ms = ?5
             WHERE run_id = ?1 AND node_id = ?2",
            params![run_id, node, json(decision), token, now],
        )
        .map_err(write_error)?;
        // The run is this process's now: another decider sees it taken.
        take_run(&tx, run_id, token, now).map_err(write_error)?;
        tx.commit().map_err(write_error)?;
        Ok(Claim::Won)
    }

    /// [`RunStore::claim_decision`]: whether this decision counts.
    pub fn decide_approval(
        &self,
        run_id: &str,
        node: &str,
        decision: &ApprovalDecision,
    ) -> Result<bool, StoreError> {
        Ok(self.claim_decision(run_id, node, decision)? == Claim::Won)
    }

    /// Keeps the content of the graph files run `run_id` calls (canonical path, JSON text),
    /// so that resuming it runs what it started with, whatever the files hold by then.
    pub fn record_graph_files(
        &self,
        run_id: &str,
        files: &[(String, String)],
    ) -> Result<(), StoreError> {
        if files.is_empty() {
            return Ok(());
        }
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| self.write_error(source))?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO run_graph_files (run_id, path, content) VALUES (?1, ?2, ?3)
                     ON CONFLICT (run_id, path) DO NOTHING",
                )
                .map_err(|source| self.write_error(source))?;
            for (path, content) in files {
                insert
                    .execute(params![run_id, path, content])
                    .map_err(|source| self.write_error(source))?;
            }
        }
        tx.commit().map_err(|source| self.write_error(source))?;
        Ok(())
    }

    /// Marks run `run_id` as a run of the graph file at `graph_file`, which its user had not
    /// trusted: resuming it gives it no credential unless the file is trusted by then.
    pub fn record_untrusted(&self, run_id: &str, graph_file: &str) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT INTO untrusted_runs (run_id, graph_file) VALUES (?1, ?2)
                 ON CONFLICT (run_id) DO NOTHING",
                params![run_id, graph_file],
            )
            .map_err(|source| self.write_error(source))?;
        Ok(())
    }

    /// The untrusted graph file run `run_id` came from, if it was marked so.
    pub fn untrusted_graph_file(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        let conn = self.lock();
        conn.query_row(
            "SELECT graph_file FROM untrusted_runs WHERE run_id = ?1",
            params![run_id],
            |row| row.get(0),
        )
        .optional()
        .map_err(|source| StoreError::Read {
            path: self.path.clone(),
            source,
        })
    }

    /// The graph files kept for run `run_id`: (canonical path, JSON text), by path.
    pub fn graph_files(&self, run_id: &str) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.lock();
        let read_error = |source| StoreError::Read {
            path: self.path.clone(),
            source,
        };
        let mut stmt = conn
            .prepare_cached(
                "SELECT path, content FROM run_graph_files WHERE run_id = ?1 ORDER BY path",
            )
            .map_err(read_error)?;
        stmt.query_map(params![run_id], |row| Ok((row.get(0)?, row.get(1)?)))
            .and_then(Iterator::collect)
            .map_err(read_error)
    }

    /// Forgets the request of `node` (answered while the run was going); the going run is
    /// listed as running again once it waits for no other decision.
    pub fn clear_approval(&self, run_id: &str, node: &str) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|source| self.write_error(source))?;
        tx.execute(
            "DELETE FROM pending_approvals WHERE run_id = ?1 AND node_id = ?2",
            params![run_id, node],
        )
        .map_err(|source| self.write_error(source))?;
        tx.execute(
            &format!(
                "UPDATE runs SET status = 'running'
                 WHERE id = ?1 AND status = 'waiting' AND finished_at_ms IS NULL
                   AND NOT ({UNDECIDED})"
            ),
            params![run_id],
        )
        .map_err(|source| self.write_error(source))?;
        tx.commit().map_err(|source| self.write_error(source))?;
        Ok(())
    }

    /// Forgets the decided requests of a run that has resumed with them.
    pub fn clear_decided_approvals(&self, run_id: &str) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            "DELETE FROM pending_approvals WHERE run_id = ?1 AND decision_json IS NOT NULL",
            params![run_id],
        )
        .map_err(|source| self.write_error(source))?;
        Ok(())
    }

    /// What resumes paused run `run_id` under its id: the outputs of its finished nodes, its
    /// graph outputs so far, the decisions (with checkpoints) made on its approvals, and what
    /// the run did before ([`RunSeed::earlier`]: its start, duration, usage, steps, the
    /// `seq` its events go on from, and its node rows), so that the resumed run is the same
    /// run, with totals, limits and rows that include it.
    pub fn resume_seed(&self, run_id: &str) -> Result<RunSeed, StoreError> {
        let Some(detail) = self.get_run(run_id)? else {
            return Ok(RunSeed::default());
        };
        let next_seq = self.next_seq(&detail.run.id)?;
        let steps = detail
            .nodes
            .iter()
            .filter(|node| {
                node.attempts > 0 && matches!(node.status, NodeStatus::Done | NodeStatus::Failed)
            })
            .count();
        let earlier = EarlierSegments {
            started_at_ms: detail.run.started_at_ms,
            duration_ms: detail.run.duration_ms.unwrap_or(0),
            usage: detail.run.usage,
            steps: u64::try_from(steps).unwrap_or(u64::MAX),
            next_seq,
            nodes: detail
                .nodes
                .iter()
                .filter(|node| node.status != NodeStatus::Pending)
                .map(|node| {
                    // Its inputs stay in the log; the resumed run does not restate them.
                    let progress = NodeProgress {
                        inputs: ValueMap::new(),
                        ..node.progress.clone()
                    };
                    (node.node_id.clone(), progress)
                })
                .collect(),
        };
        let mut seed = seed_from(detail, &BTreeSet::new());
        seed.earlier = Some(earlier);
        for approval in self.pending_approvals(run_id)? {
            if let Some(decision) = approval.decision {
                seed.decisions.insert(approval.node.clone(), decision);
                if let Some(checkpoint) = approval.request.checkpoint {
                    seed.checkpoints.insert(approval.node, checkpoint);
                }
            }
        }
        Ok(seed)
    }

    /// The outputs of the nodes that finished in run `run_id`, except `rerun`, to seed
    /// another run with, and the graph outputs it had set (a rerun node sets its own again).
    pub fn reuse_seed(
        &self,
        run_id: &str,
        rerun: &BTreeSet<String>,
    ) -> Result<RunSeed, StoreError> {
        let Some(detail) = self.get_run(run_id)? else {
            return Ok(RunSeed::default());
        };
        Ok(seed_from(detail, rerun))
    }

    /// The `seq` after every event recorded of run `run_id` (0 for a run with none).
    fn next_seq(&self, run_id: &str) -> Result<u64, StoreError> {
        let conn = self.lock();
        let last: Option<i64> = conn
            .query_row(
                "SELECT max(seq) FROM (
                    SELECT seq FROM events WHERE run_id = ?1
                    UNION ALL SELECT started_seq FROM node_runs WHERE run_id = ?1
                    UNION ALL SELECT finished_seq FROM node_runs WHERE run_id = ?1)",
                params![run_id],
                |row| row.get(0),
            )
            .map_err(|source| StoreError::Read {
                path: self.path.clone(),
                source,
            })?;
        Ok(last.map_or(0, |seq| from_i64(seq).saturating_add(1)))
    }

    pub(super) fn write_error(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Write {
            path: self.path.clone(),
            source,
        }
    }
}

/// The outputs of the nodes that finished in the run `detail`, except `rerun`, and the
/// graph outputs it had set. Outputs the log keeps with a secret replaced are set apart
/// ([`RunSeed::redacted`]): they are not the node's.
fn seed_from(detail: super::RunDetail, rerun: &BTreeSet<String>) -> RunSeed {
    let mut outputs = BTreeMap::new();
    let mut redacted = BTreeMap::new();
    for node in detail.nodes {
        if node.status != NodeStatus::Done || reruns(rerun, &node.node_id) {
            continue;
        }
        let kept = if node.outputs_redacted {
            &mut redacted
        } else {
            &mut outputs
        };
        kept.insert(node.node_id, node.progress.outputs);
    }
    RunSeed {
        outputs,
        redacted,
        graph_outputs: detail.outputs,
        from_run: Some(detail.run.id),
        ..RunSeed::default()
    }
}

/// Whether node `id` runs again: it is in `rerun`, or it ran inside a sub-run of a node
/// that is (`call/render` when `call` reruns).
fn reruns(rerun: &BTreeSet<String>, id: &str) -> bool {
    rerun.contains(id)
        || id
            .match_indices('/')
            .any(|(at, _)| rerun.contains(&id[..at]))
}

fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}
