//! What `approve` and `reject` share, locally and for a remote run: their options, which
//! pending approval a command decides, and how a decision is said.

use std::path::PathBuf;

use agentloom_core::{ApprovalDecision, ApprovalRequest, Escaped};
use agentloom_engine::PendingApproval;

#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The node whose approval is decided, when the run waits for several.
    #[arg(long)]
    pub node: Option<String>,
    /// The run log database (default: the per-user data directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// The directory file blocks may read and write (default: the one the run started in,
    /// as recorded in the run log; else the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Print exactly one JSON object with the result on stdout.
    #[arg(long)]
    pub json: bool,
    /// Decide for a run queued on this NATS server (`agentloom submit`): a worker resumes it.
    #[arg(long, value_name = "URL", conflicts_with = "workspace")]
    pub nats: Option<String>,
    /// Sign the decision with the NKey seed in this file (with --nats): workers take only
    /// decisions signed by their approvers (`agentloom worker --approver-key`).
    #[arg(long, value_name = "SEED_FILE", requires = "nats")]
    pub sign_with: Option<PathBuf>,
}

/// "approved `node` (action)", as the commands that decide say it.
pub(super) fn decided_line(approval: &PendingApproval, decision: &ApprovalDecision) -> String {
    let verb = if decision.is_approved() {
        "approved"
    } else {
        "rejected"
    };
    format!(
        "{verb} `{}` ({})",
        Escaped(&approval.node),
        Escaped(&approval.request.action)
    )
}

/// The approval to decide (see [`pick`]) and the decision on it; the error is what to say.
pub(super) fn pick_and_decide(
    run_id: &str,
    pending: &[PendingApproval],
    node: Option<&str>,
    decide: impl FnOnce(&ApprovalRequest) -> Result<ApprovalDecision, String>,
) -> Result<(PendingApproval, ApprovalDecision), String> {
    let approval = pick(pending, node).map_err(|m| format!("run {run_id}: {}", Escaped(&m)))?;
    let decision = decide(&approval.request).map_err(|m| Escaped(&m).to_string())?;
    Ok((approval.clone(), decision))
}

/// The undecided approval to decide: the one of `node`, or the only one.
fn pick<'a>(
    pending: &'a [PendingApproval],
    node: Option<&str>,
) -> Result<&'a PendingApproval, String> {
    let undecided: Vec<&PendingApproval> =
        pending.iter().filter(|p| p.decision.is_none()).collect();
    let candidates = if undecided.is_empty() {
        // Decided before a resume that did not finish: decide again.
        pending.iter().collect()
    } else {
        undecided
    };
    let names = || {
        candidates
            .iter()
            .map(|p| format!("`{}`", p.node))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match node {
        Some(node) => candidates
            .iter()
            .find(|p| p.node == node)
            .copied()
            .ok_or_else(|| format!("no approval of `{node}` is pending; pending: {}", names())),
        None if candidates.len() == 1 => Ok(candidates[0]),
        None => Err(format!(
            "several approvals are pending ({}); choose one with --node NODE",
            names()
        )),
    }
}
