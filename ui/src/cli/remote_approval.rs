//! `agentloom approve|reject RUN_ID --nats URL`: decide what a remote run waits for. The
//! decision is published once (a second decision on the same wait finds it taken), then a
//! worker resumes the run from its events, and this command follows it like `submit --wait`.

use agentloom_core::{ApprovalDecision, ApprovalRequest, Escaped};
use agentloom_engine::PendingApproval;
use async_nats::jetstream::message::PublishMessage;
use serde_json::json;

use crate::remote::{Nats, Resume, WorkItem, run_subject};

use super::approval_choice::{ResumeArgs, decided_line, pick_and_decide};
use super::{EXIT_FAILED, EXIT_INVALID, async_runtime};
use crate::runner::open_run_log;

pub(super) fn decide_remote(
    run_id: &str,
    args: ResumeArgs,
    url: &str,
    decide: impl FnOnce(&ApprovalRequest) -> Result<ApprovalDecision, String>,
) -> anyhow::Result<i32> {
    // A prefix is enough for a run this machine's log knows (one followed with `--wait`).
    let run_id = open_run_log(args.db.clone())
        .ok()
        .and_then(|store| store.resolve_run_id(run_id).ok().flatten())
        .unwrap_or_else(|| run_id.to_owned());
    let runtime = async_runtime()?;
    let looked = runtime.block_on(async {
        let nats = Nats::connect(url, "agentloom approve").await?;
        let approvals = nats.last_record(&run_id, "approvals").await?;
        let report = nats.last_record(&run_id, "report").await?;
        let decided = nats.last_record(&run_id, "decision").await?;
        let request = nats.last_record(&run_id, "request").await?;
        Ok::<_, crate::remote::RemoteError>((nats, approvals, report, decided, request))
    });
    let (nats, approvals, report, decided, request) = match looked {
        Ok(found) => found,
        Err(err) => {
            eprintln!("{err}");
            return Ok(EXIT_FAILED);
        }
    };
    let Some(request) = request else {
        eprintln!("no run `{}` on {}", Escaped(&run_id), nats.url);
        return Ok(EXIT_INVALID);
    };
    let status = report
        .as_ref()
        .and_then(|report| serde_json::from_slice::<serde_json::Value>(&report.payload).ok())
        .and_then(|report| report["status"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "running".to_owned());
    let Some(approvals) = approvals.filter(|_| status == "waiting") else {
        eprintln!("run {run_id} is {status}, not waiting for an approval");
        return Ok(EXIT_INVALID);
    };
    if let Some(earlier) = decided.as_ref().filter(|d| d.sequence > approvals.sequence) {
        eprintln!("{}", taken(&run_id, &earlier.payload));
        return Ok(EXIT_INVALID);
    }
    let pending: Vec<PendingApproval> =
        serde_json::from_slice(&approvals.payload).unwrap_or_default();
    let (approval, decision) =
        match pick_and_decide(&run_id, &pending, args.node.as_deref(), decide) {
            Ok(decided) => decided,
            Err(message) => {
                eprintln!("{message}");
                return Ok(EXIT_INVALID);
            }
        };
    // Signed before anything is published: a seed that cannot sign decides nothing.
    let signed = match &args.sign_with {
        Some(file) => match std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|seed| crate::remote::signed::sign(&seed, &run_id, &approval.node, &decision))
        {
            Ok(signed) => Some(signed),
            Err(err) => {
                eprintln!("--sign-with {}: {err}", file.display());
                return Ok(EXIT_INVALID);
            }
        },
        None => None,
    };
    let record = json!({
        "node": approval.node,
        "approved": decision.is_approved(),
        "decided_by": format!("process {}", std::process::id()),
        "decided_at_ms": chrono::Utc::now().timestamp_millis(),
    });
    // Published only when no decision came since the one looked at: one decision counts.
    let expected = decided.as_ref().map_or(0, |d| d.sequence);
    let subject = run_subject(&run_id, "decision");
    let published = runtime.block_on(async {
        let message = PublishMessage::build()
            .payload(serde_json::to_vec(&record).unwrap_or_default().into())
            .expected_last_subject_sequence(expected);
        let publish = async {
            let ack = nats
                .js
                .send_publish(subject.clone(), message)
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map(|ack| ack.sequence).map_err(|e| e.to_string())
        };
        // A publish the user's permissions refuse gets no answer but the server's error.
        tokio::select! {
            published = publish => published.map_err(Some),
            () = nats.refused_publishing(&subject) => Err(None),
        }
    });
    let decided_at = match published {
        Ok(sequence) => sequence,
        Err(None) => {
            eprintln!(
                "permission denied: this NATS user may not publish approvals on {subject} (on {}); approve as a user whose subject permissions allow it",
                nats.url
            );
            return Ok(EXIT_INVALID);
        }
        Err(Some(err)) => {
            let latest = runtime
                .block_on(nats.last_record(&run_id, "decision"))
                .ok()
                .flatten();
            match latest {
                Some(earlier) => eprintln!("{}", taken(&run_id, &earlier.payload)),
                None => eprintln!("{}", nats.error("publishing the decision", err)),
            }
            return Ok(EXIT_INVALID);
        }
    };
    let queued = runtime.block_on(nats.queue(&WorkItem {
        run_id: run_id.clone(),
        resume: Some(Resume {
            node: approval.node.clone(),
            request: approval.request.clone(),
            decision: decision.clone(),
            signed,
        }),
        start_by_ms: None,
    }));
    if let Err(err) = queued {
        eprintln!("{err}");
        return Ok(EXIT_FAILED);
    }
    if !args.json {
        eprintln!(
            "{}; run {run_id} resumes on a worker",
            decided_line(&approval, &decision)
        );
    }
    let doc = serde_json::from_slice::<crate::remote::RunRequest>(&request.payload)
        .ok()
        .and_then(|request| request.graph_doc().ok())
        .unwrap_or_default();
    super::submit::follow_and_report(
        &runtime,
        &nats,
        &run_id,
        super::submit::FollowFrom {
            after: Some(decided_at),
            start_by_ms: None,
        },
        doc,
        args.db,
        args.json,
    )
}

/// What to say when another decision on the same wait came first.
fn taken(run_id: &str, earlier: &[u8]) -> String {
    let earlier: serde_json::Value = serde_json::from_slice(earlier).unwrap_or_default();
    let verb = if earlier["approved"] == true {
        "approved"
    } else {
        "rejected"
    };
    format!(
        "run {run_id}: `{}` was already {verb} by {}; this decision changed nothing",
        Escaped(earlier["node"].as_str().unwrap_or_default()),
        Escaped(earlier["decided_by"].as_str().unwrap_or("someone"))
    )
}
