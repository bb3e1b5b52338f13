//! `agentloom submit GRAPH --nats URL`: queue a run for the workers; with `--wait`, follow
//! it like a local run and record it in this machine's run log.

use std::path::PathBuf;

use agentloom_core::Escaped;
use agentloom_engine::EventSink;
use serde_json::json;

use crate::remote::local_log::LocalRecord;
use crate::remote::{Nats, follow::follow_until, request_for};

use super::{EXIT_FAILED, EXIT_INVALID, async_runtime, parse_inputs, print_report};
use crate::runner::{GraphSource, open_run_log};

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    pub graph: PathBuf,
    /// The NATS server (`nats://host:4222`; see `agentloom worker --help`).
    #[arg(long, value_name = "URL", env = "AGENTLOOM_NATS")]
    pub nats: String,
    /// A run input, `NAME=VALUE` (repeatable).
    #[arg(long = "input", short = 'i', value_name = "NAME=VALUE")]
    pub inputs: Vec<String>,
    /// Follow the run until it ends, recording it in the run log, and exit as `run` does.
    #[arg(long)]
    pub wait: bool,
    /// Print exactly one JSON object on stdout (with --wait: the one `run --json` prints).
    #[arg(long)]
    pub json: bool,
    /// The run log the followed run is recorded in (default: the per-user data directory).
    #[arg(long, requires = "wait")]
    pub db: Option<PathBuf>,
    /// How many nodes of the run may do CPU-bound work at once on the worker.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// With --wait: no worker starts the run once this many seconds passed without one
    /// taking it (the run is recorded failed, "not started"), and the wait ends with a
    /// message then. Default: 300 (`AGENTLOOM_NATS_START_SECS`). Without --wait: only when
    /// given.
    #[arg(long, value_name = "SECS")]
    pub start_within: Option<u64>,
    /// Trust the graph file for this run without asking (see `agentloom trust`). A worker
    /// runs the request trusted only when it was started with `--trust` too.
    #[arg(long)]
    pub trust: bool,
}

pub fn submit_command(args: SubmitArgs) -> anyhow::Result<i32> {
    // Read once, trusted as `run` decides: the request carries the graph that was read and
    // the verdict on it.
    let source = match GraphSource::read(&args.graph) {
        Ok(source) => source,
        Err(err) => {
            eprintln!("{}", Escaped(&err.to_string()));
            return Ok(EXIT_INVALID);
        }
    };
    let Some(trusted) = super::trust::trust_for_run(&args.graph, args.trust, &source) else {
        return Ok(EXIT_INVALID);
    };
    let request = match parse_inputs(&args.inputs)
        .and_then(|inputs| request_for(&source, trusted, inputs, args.concurrency))
    {
        Ok(request) => request,
        Err(message) => {
            eprintln!("{}", Escaped(&message));
            return Ok(EXIT_INVALID);
        }
    };
    let run_id = request.run_id.clone();
    let doc = request.graph_doc().unwrap_or_default();
    // A run someone waits for does not start after they stopped waiting.
    let start_within = match (args.start_within, args.wait) {
        (Some(secs), _) => Some(std::time::Duration::from_secs(secs)),
        (None, true) => Some(crate::remote::start_within()),
        (None, false) => None,
    };
    let start_by_ms = start_within.map(crate::remote::start_by);
    let runtime = async_runtime()?;
    let queued = runtime.block_on(async {
        let nats = Nats::connect(&args.nats, "agentloom submit").await?;
        nats.submit(&request, start_by_ms).await?;
        Ok::<_, crate::remote::RemoteError>(nats)
    });
    let nats = match queued {
        Ok(nats) => nats,
        Err(err) => {
            eprintln!("{err}");
            return Ok(EXIT_FAILED);
        }
    };
    if !args.wait {
        if args.json {
            out!("{}", json!({"run_id": run_id, "status": "queued"}));
        } else {
            out!("{run_id}");
            eprintln!("queued run {run_id} on {}", nats.url);
        }
        return Ok(0);
    }
    if !args.json {
        eprintln!("queued run {run_id} on {}; waiting for a worker", nats.url);
    }
    follow_and_report(
        &runtime,
        &nats,
        &run_id,
        FollowFrom {
            after: None,
            start_by_ms,
        },
        doc,
        args.db,
        args.json,
    )
}

/// Where following a remote run starts and how long it waits for a worker to take it.
pub(super) struct FollowFrom {
    /// Only the records after this stream sequence (a resumed run's).
    pub after: Option<u64>,
    /// The run's start deadline: past it with no worker, the wait ends.
    pub start_by_ms: Option<i64>,
}

/// Follows remote run `run_id` (from the records `from` says) until a worker
/// reports its end: progress on stderr, every event recorded in the local run log with the
/// worker's name, then the report printed and its exit code returned, as `run` does.
pub(super) fn follow_and_report(
    runtime: &tokio::runtime::Runtime,
    nats: &Nats,
    run_id: &str,
    from: FollowFrom,
    doc: agentloom_core::GraphDoc,
    db: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<i32> {
    let store = match open_run_log(db) {
        Ok(store) => Some(store),
        Err(err) => {
            eprintln!("warning: this run will not be logged: {err:#}");
            None
        }
    };
    let local = LocalRecord::new(store, doc);
    let progress = super::progress::ProgressSink::new(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        !json,
    );
    let followed = runtime.block_on(follow_until(
        nats,
        run_id,
        from.after,
        from.start_by_ms,
        |event, worker| {
            local.record(&event, worker);
            progress.emit(&event);
        },
    ));
    progress.finish();
    local.finish();
    match followed {
        Ok(report) => print_report(&report, json),
        Err(err) => {
            eprintln!("{err}");
            Ok(EXIT_FAILED)
        }
    }
}
