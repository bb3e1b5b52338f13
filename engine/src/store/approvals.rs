//! Approvals a paused run waits for, and the seeds that resume or rerun a recorded run.

use std::collections::BTreeSet;

use agentloom_core::{ApprovalDecision, ApprovalRequest, Value};
use rusqlite::params;
use serde::Serialize;

use super::{RunStore, StoreError, from_i64, now_ms, to_i64};
use crate::events::NodeStatus;
use crate::seed::RunSeed;

/// A side effect of a recorded run waiting for (or decided by) a person.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PendingApproval {
    pub run_id: String,
    pub node: String,
    pub request: ApprovalRequest,
    /// Unix milliseconds.
    pub requested_at_ms: u64,
    /// Set once a person decided; the run has not resumed with it yet.
    pub decision: Option<ApprovalDecision>,
}

/// node, action, arguments, checkpoint, requested at, decision (JSON texts).
type ApprovalRow = (String, String, String, Option<String>, i64, Option<String>);

impl RunStore {
    /// Records that node `node` of run `run_id` waits for a decision on `request`
    /// (replacing an earlier request of the same node).
    pub fn save_approval_request(
        &self,
        run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO pending_approvals (run_id, node_id, action, arguments_json, checkpoint_json,
                                            requested_at_ms, decision_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL)
             ON CONFLICT (run_id, node_id) DO UPDATE SET
                action = excluded.action, arguments_json = excluded.arguments_json,
                checkpoint_json = excluded.checkpoint_json,
                requested_at_ms = excluded.requested_at_ms, decision_json = NULL",
            params![
                run_id,
                node,
                request.action,
                json(&request.arguments),
                request.checkpoint.as_ref().map(json),
                to_i64(now_ms()),
            ],
        )
        .map_err(|source| self.write_error(source))?;
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
                "SELECT node_id, action, arguments_json, checkpoint_json, requested_at_ms, decision_json
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
                ))
            })
            .and_then(Iterator::collect)
            .map_err(read_error)?;
        rows.into_iter()
            .map(|(node, action, arguments, checkpoint, at, decision)| {
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
                Ok(PendingApproval {
                    run_id: run_id.to_owned(),
                    request: ApprovalRequest {
                        action,
                        arguments,
                        checkpoint,
                    },
                    node,
                    requested_at_ms: from_i64(at),
                    decision,
                })
            })
            .collect()
    }

    /// Records a person's decision on the request of `node` in run `run_id`. Returns
    /// whether there was such a request.
    pub fn decide_approval(
        &self,
        run_id: &str,
        node: &str,
        decision: &ApprovalDecision,
    ) -> Result<bool, StoreError> {
        let conn = self.lock();
        let changed = conn
            .execute(
                "UPDATE pending_approvals SET decision_json = ?3 WHERE run_id = ?1 AND node_id = ?2",
                params![run_id, node, json(decision)],
            )
            .map_err(|source| self.write_error(source))?;
        Ok(changed > 0)
    }

    /// Forgets the request of `node` (answered while the run was going).
    pub fn clear_approval(&self, run_id: &str, node: &str) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            "DELETE FROM pending_approvals WHERE run_id = ?1 AND node_id = ?2",
            params![run_id, node],
        )
        .map_err(|source| self.write_error(source))?;
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

    /// What resumes paused run `run_id`: the outputs of its finished nodes, its graph
    /// outputs so far, and the decisions (with checkpoints) made on its approvals.
    pub fn resume_seed(&self, run_id: &str) -> Result<RunSeed, StoreError> {
        let mut seed = self.reuse_seed(run_id, &BTreeSet::new())?;
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
        let outputs = detail
            .nodes
            .into_iter()
            .filter(|node| node.status == NodeStatus::Done && !reruns(rerun, &node.node_id))
            .map(|node| (node.node_id, node.outputs))
            .collect();
        Ok(RunSeed {
            outputs,
            graph_outputs: detail.outputs,
            from_run: Some(detail.run.id),
            ..RunSeed::default()
        })
    }

    fn write_error(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Write {
            path: self.path.clone(),
            source,
        }
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
