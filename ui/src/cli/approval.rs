//! `agentloom approve|reject RUN_ID`: decide what a waiting run waits for and resume it
//! from the run log; seeds for `run --from`.

use std::path::PathBuf;

use agentloom_core::{ApprovalDecision, ApprovalRequest, Escaped, ValidGraph, Value};
use agentloom_engine::{RunSeed, RunStatus};

pub use super::approval_choice::ResumeArgs;
use super::approval_choice::{decided_line, pick_and_decide};
use super::{EXIT_INVALID, Execution, execute, prepare_recorded_run, recorded_run_workspace};
use crate::runner::open_run_log;
use crate::runner::resume::{claim_refusal, resume_seed};

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The waiting run (a unique prefix of its id is enough).
    pub run_id: String,
    /// Change an argument before approving, `NAME=VALUE` (repeatable). VALUE is JSON when
    /// it parses as JSON and the argument is not text, else text.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub resume: ResumeArgs,
}

#[derive(Debug, clap::Args)]
pub struct RejectArgs {
    /// The waiting run (a unique prefix of its id is enough).
    pub run_id: String,
    /// Why: the node fails with it (an agent hands it to its model).
    #[arg(long, default_value = "")]
    pub message: String,
    #[command(flatten)]
    pub resume: ResumeArgs,
}

pub fn approve_command(args: ApproveArgs) -> anyhow::Result<i32> {
    let set = args.set;
    decide_and_resume(&args.run_id, args.resume, move |request| {
        approve_with(request, &set)
    })
}

pub fn reject_command(args: RejectArgs) -> anyhow::Result<i32> {
    let message = args.message;
    decide_and_resume(&args.run_id, args.resume, move |_| {
        Ok(ApprovalDecision::Rejected { message })
    })
}

/// The request's arguments with each `NAME=VALUE` of `--set` applied.
fn approve_with(request: &ApprovalRequest, set: &[String]) -> Result<ApprovalDecision, String> {
    let mut arguments = request.arguments.clone();
    for item in set {
        let Some((name, text)) = item.split_once('=') else {
            return Err(format!("--set `{item}`: expected NAME=VALUE"));
        };
        let Some(map) = arguments.object_mut() else {
            return Err(format!(
                "--set {name}: the arguments of `{}` are not named fields",
                request.action
            ));
        };
        let value = match map.get(name) {
            Some(Value::Text(_)) => Value::text(text),
            _ => serde_json::from_str(text)
                .map(Value::from_json)
                .unwrap_or_else(|_| Value::text(text)),
        };
        map.insert(name.to_owned(), value);
    }
    Ok(ApprovalDecision::Approved { arguments })
}

fn decide_and_resume(
    run_id: &str,
    args: ResumeArgs,
    decide: impl FnOnce(&ApprovalRequest) -> Result<ApprovalDecision, String>,
) -> anyhow::Result<i32> {
    if let Some(url) = args.nats.clone() {
        return super::remote_approval::decide_remote(run_id, args, &url, decide);
    }
    let store = open_run_log(args.db.clone())?;
    let Some(detail) = store.get_run(run_id)? else {
        eprintln!(
            "no run `{}` in {}; `agentloom runs` lists them",
            Escaped(run_id),
            store.path().display()
        );
        return Ok(EXIT_INVALID);
    };
    let run_id = detail.run.id.clone();
    let pending = store.pending_approvals(&run_id)?;
    // A decided approval stays until its resumed run ends: deciding it again reports who
    // decided first.
    let decided = pending.iter().any(|p| p.decision.is_some());
    if pending.is_empty() || (detail.run.status != RunStatus::Waiting && !decided) {
        eprintln!(
            "run {run_id} is {}, not waiting for an approval",
            detail.run.status.as_str()
        );
        return Ok(EXIT_INVALID);
    }
    let (approval, decision) =
        match pick_and_decide(&run_id, &pending, args.node.as_deref(), decide) {
            Ok(decided) => decided,
            Err(message) => {
                eprintln!("{message}");
                return Ok(EXIT_INVALID);
            }
        };
    // The graph files the run calls as they were when it started, not as they are now; a
    // run of a file its user had not trusted stays untrusted, unless the file (as it is
    // now) has been trusted since.
    let Some(prepared) = prepare_recorded_run(&store, &detail) else {
        return Ok(EXIT_INVALID);
    };
    // Outputs the log keeps with a secret replaced run again, or the resume is refused
    // before the decision is claimed: the run stays waiting.
    if let Err(message) = resume_seed(&store, &run_id, prepared.graph()) {
        eprintln!("run {run_id} cannot resume: {}", Escaped(&message));
        return Ok(EXIT_INVALID);
    }
    // One decision counts: a second `approve`/`reject` finds it taken and changes nothing.
    let claim = store.claim_decision(&run_id, &approval.node, &decision)?;
    if let Some(refusal) = claim_refusal(&run_id, &approval.node, &claim) {
        eprintln!("{refusal}");
        return Ok(EXIT_INVALID);
    }
    // With the decision now stored.
    let seed = match resume_seed(&store, &run_id, prepared.graph()) {
        Ok(seed) => seed,
        Err(message) => {
            eprintln!("run {run_id} cannot resume: {}", Escaped(&message));
            return Ok(EXIT_INVALID);
        }
    };
    // The run resumes where it started, wherever this is typed, unless told otherwise.
    let recorded = match args.workspace {
        Some(_) => None,
        None => store.run_workspace(&run_id)?,
    };
    drop(store);
    let Some(workspace) = recorded_run_workspace(recorded, args.workspace, &run_id, "resume")?
    else {
        return Ok(EXIT_INVALID);
    };
    if !args.json {
        eprintln!(
            "{}; resuming run {run_id}",
            decided_line(&approval, &decision)
        );
    }
    execute(
        &prepared,
        detail.inputs.clone(),
        Execution {
            db: args.db,
            no_log: false,
            full_log: false,
            json: args.json,
            workspace,
            concurrency: None,
            run_id: Some(run_id),
            seed: Some(seed),
            replay: None,
            debug: None,
        },
    )
}

/// `run --from NODE --reuse RUN_ID`: the outputs of `reuse` for every node that neither is
/// `from` nor depends on it.
pub(super) fn run_from_seed(
    db: Option<PathBuf>,
    graph: &ValidGraph,
    from: &str,
    reuse: &str,
) -> Result<RunSeed, String> {
    if !graph.nodes.iter().any(|n| n.id == from) {
        return Err(format!("--from {from}: the graph has no node `{from}`"));
    }
    let store = open_run_log(db).map_err(|e| format!("{e:#}"))?;
    let Some(run_id) = store.resolve_run_id(reuse).map_err(|e| e.to_string())? else {
        return Err(format!(
            "--reuse {reuse}: no such run in {}; `agentloom runs` lists them",
            store.path().display()
        ));
    };
    let rerun = agentloom_engine::downstream_of(graph, from);
    let mut seed = store
        .reuse_seed(&run_id, &rerun)
        .map_err(|e| e.to_string())?;
    seed.settle_redacted(graph)?;
    Ok(seed)
}
