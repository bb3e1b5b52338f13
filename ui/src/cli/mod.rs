//! The command line: `agentloom run|validate|blocks|runs|show|schema|open|serve|mcp`.
//!
//! Exit codes: 0 success, 1 the run failed or was cancelled, 2 invalid graph or arguments,
//! 3 the run waits for approval (`agentloom approve RUN_ID`).

/// `println!` that returns [`StdoutClosed`] (with `?`) instead of panicking when stdout is
/// gone (`agentloom runs --json | head -1`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*).map_err($crate::cli::StdoutClosed)?
    }};
}

pub mod agent;
pub(crate) mod approval;
mod approval_choice;
pub mod credentials;
pub mod debug;
pub mod eval;
mod fork;
mod interrupt;
mod mcp;
mod mcp_edit;
mod mcp_http;
mod mcp_stdio;
mod progress;
mod queue;
mod remote_approval;
mod serve;
mod submit;
mod terminal_approver;
mod trust;
mod worker;
mod workers;

/// Writing to stdout failed. When the reader went away (a closed pipe), the process ends
/// quietly, as other Unix tools do.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to stdout: {0}")]
pub struct StdoutClosed(pub std::io::Error);

/// Whether `err` is stdout's reader having gone away: nothing to report.
pub fn is_closed_stdout(err: &anyhow::Error) -> bool {
    err.downcast_ref::<StdoutClosed>()
        .is_some_and(|e| e.0.kind() == std::io::ErrorKind::BrokenPipe)
}

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_core::{Escaped, escape_control};
use agentloom_core::{GraphDoc, Value, ValueMap};
use agentloom_engine::{RunOptions, RunSeed, RunStatus};
use anyhow::Context as _;

/// The runtime a headless command runs on: the runner's.
pub(crate) use crate::runner::async_runtime;
use crate::runner::{
    self, GraphSource, Launch, Prepared, Trust, check_inputs, format_problem, open_run_log,
};
use clap::{Parser, Subcommand};
use serde_json::json;

/// The run went wrong (exit 1).
pub const EXIT_FAILED: i32 = 1;
/// The graph or the arguments are invalid (exit 2).
pub const EXIT_INVALID: i32 = 2;
/// The run is paused until a person approves or rejects (exit 3).
pub const EXIT_WAITING: i32 = 3;
/// Quit by a second Ctrl-C while the run was stopping (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: i32 = 130;

#[derive(Debug, Parser)]
#[command(
    name = "agentloom",
    version,
    about = "Build and run AI agent graphs. With no command, opens the desktop app (on GRAPH when given).",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// A graph file to open in the desktop app, as `agentloom open GRAPH` does (how a
    /// double-clicked `.agentloom.json` file arrives).
    #[arg(value_name = "GRAPH")]
    pub graph: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<CliCommand>,
}

impl Cli {
    /// The command to run: the one named, else the desktop app (on the graph file given).
    /// A bare word that names no file is a mistyped command more often than a graph, so it
    /// is refused rather than opened as an empty window.
    pub fn into_command(self) -> Result<CliCommand, String> {
        match (self.command, self.graph) {
            (Some(command), _) => Ok(command),
            (None, Some(graph)) if !graph.is_file() => Err(format!(
                "'{}' is neither a command nor a graph file: see `agentloom --help` for the \
                 commands, or give the path of an existing graph file",
                Escaped(&graph.to_string_lossy())
            )),
            (None, graph) => Ok(CliCommand::Open {
                graph,
                db: None,
                workspace: None,
            }),
        }
    }
}

/// A subcommand of the binary (the app's own commands are `app::Command`).
#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Open the desktop app, optionally with a graph file.
    Open {
        graph: Option<PathBuf>,
        /// The run log database (default: the per-user data directory).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The directory file blocks are confined to (default: the graph file's folder).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Run a graph headless.
    Run(RunArgs),
    /// Check a graph and list every problem (exit 2 when there are any).
    Validate {
        graph: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// List the available blocks with their ports and config schema.
    Blocks {
        #[arg(long)]
        json: bool,
        /// Also list the tools of this graph file's MCP servers, as blocks.
        #[arg(long)]
        graph: Option<PathBuf>,
    },
    /// List recent runs from the run log.
    Runs {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        db: Option<PathBuf>,
        /// How many runs to list.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Write the whole run log to FILE as one self-contained database (a new file), to
        /// copy or attach alone; lists nothing.
        #[arg(long, value_name = "FILE")]
        export: Option<PathBuf>,
    },
    /// Show one run from the run log (a unique prefix of its id is enough).
    Show {
        run_id: String,
        #[arg(long)]
        json: bool,
        #[arg(long, conflicts_with = "nats")]
        db: Option<PathBuf>,
        /// Read the result of a run submitted to this NATS server (`agentloom submit`), at
        /// any time: the object `run --json` prints, and its exit code.
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
    },
    /// Print the JSON Schema of the graph file format.
    Schema,
    /// Run an agent towards GOAL with every built-in tool, printing each step.
    Agent(agent::AgentArgs),
    /// Manage credentials in the OS keychain (API keys, OAuth sign-in).
    #[command(subcommand)]
    Credentials(credentials::CredentialsCmd),
    /// Approve what a waiting run waits for, and resume it.
    Approve(approval::ApproveArgs),
    /// Reject what a waiting run waits for, and resume it (the node fails with the message).
    Reject(approval::RejectArgs),
    /// Go on from the breakpoint a run is paused at (`run --break`), with edited values.
    Continue(debug::ContinueArgs),
    /// Serve a graph over HTTP: the Agent Protocol, and optionally a webhook and a schedule.
    Serve(serve::ServeArgs),
    /// Serve graphs as MCP tools over stdio (one tool per graph file), or with `--edit`
    /// the tools to build and run one graph file.
    Mcp(mcp::McpArgs),
    /// Trust a graph file as it is now: let it start its MCP servers, use credentials and
    /// call graph files outside its folder. Any change to it (or to a file it calls) undoes it.
    Trust(trust::TrustArgs),
    /// Take runs from a NATS JetStream queue and run them (see `submit`).
    Worker(worker::WorkerArgs),
    /// Queue a run of a graph for the workers of a NATS JetStream server.
    Submit(submit::SubmitArgs),
    /// The NATS queue: runs waiting and being run, requests moved aside; retry one.
    Queue(queue::QueueArgs),
    /// The NATS workers that are up, and what each runs now.
    Workers(workers::WorkersArgs),
    /// Run a graph against test cases and check its outputs (exit 1 under --min-pass-rate).
    Eval(eval::EvalArgs),
    /// List evaluations from the run log.
    Evals {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        db: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    pub graph: PathBuf,
    /// A run input, `NAME=VALUE` (repeatable). Values are converted to the input's type.
    #[arg(long = "input", short = 'i', value_name = "NAME=VALUE")]
    pub inputs: Vec<String>,
    /// Print exactly one JSON object with the result on stdout.
    #[arg(long)]
    pub json: bool,
    /// The run log database (default: the per-user data directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Do not record this run in the run log.
    #[arg(long, conflicts_with = "db")]
    pub no_log: bool,
    /// Keep every value whole in the run log (by default a value over 1 MiB keeps only its
    /// size, SHA-256 and a preview).
    #[arg(long, conflicts_with = "no_log")]
    pub full_log: bool,
    /// The directory file blocks may read and write (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// How many nodes may do CPU-bound work at once; waiting nodes take no slot (default: the graph's setting, else the number of cores).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Run from this node: it and what depends on it run, the rest reuses its outputs from
    /// the run given with --reuse.
    #[arg(long, value_name = "NODE", requires = "reuse")]
    pub from: Option<String>,
    /// The earlier run whose node outputs are reused (with --from).
    #[arg(
        long,
        value_name = "RUN_ID",
        requires = "from",
        conflicts_with = "no_log"
    )]
    pub reuse: Option<String>,
    /// Trust the graph file for this run without asking (see `agentloom trust`).
    #[arg(long)]
    pub trust: bool,
    /// Answer the run's outbound calls (LLM, HTTP, MCP, web search) from what run RUN_ID
    /// recorded, with no network.
    #[arg(long, value_name = "RUN_ID")]
    pub replay: Option<String>,
    /// What a replay does with a call that was not recorded: fail its node, or make it.
    #[arg(long, value_enum, default_value_t = crate::runner::eval::ReplayMissArg::Fail, requires = "replay")]
    pub replay_miss: crate::runner::eval::ReplayMissArg,
    /// Stop at this node, `NODE` (before it runs) or `NODE:after` (repeatable; `call/NODE`
    /// inside a graph.call, `each/*/NODE` in every item of a for-each over a graph).
    #[arg(long = "break", value_name = "NODE[:after]", conflicts_with = "no_log")]
    pub breakpoints: Vec<String>,
    /// Fork run RUN_ID: reuse its outputs upstream of the values edited with --set, run the
    /// rest again.
    #[arg(long, value_name = "RUN_ID", conflicts_with_all = ["no_log", "from"])]
    pub fork: Option<String>,
    /// With --fork: an output of the parent run changed, `NODE.PORT=JSON` (repeatable).
    #[arg(long = "set", value_name = "NODE.PORT=JSON", requires = "fork")]
    pub set: Vec<String>,
}

/// Runs a parsed command; returns the process exit code.
pub fn run_command(command: CliCommand) -> anyhow::Result<i32> {
    match command {
        CliCommand::Open {
            graph,
            db,
            workspace,
        } => {
            if let Some(dir) = workspace.as_deref().filter(|d| !d.is_dir()) {
                eprintln!("--workspace {}: not a directory", dir.display());
                return Ok(EXIT_INVALID);
            }
            crate::app::run_native(graph, db, workspace)?;
            Ok(0)
        }
        CliCommand::Run(args) => run_graph(args),
        CliCommand::Eval(args) => eval::eval_command(args),
        CliCommand::Evals { json, db } => eval::evals_command(db, json),
        CliCommand::Validate { graph, json } => validate_command(&graph, json),
        CliCommand::Blocks { json, graph } => blocks_command(json, graph.as_deref()),
        CliCommand::Runs {
            db,
            export: Some(file),
            ..
        } => export_runs(db, &file),
        CliCommand::Runs {
            json, db, limit, ..
        } => runs_command(db, json, limit),
        CliCommand::Show {
            run_id,
            json,
            nats: Some(url),
            ..
        } => show_remote(&url, &run_id, json),
        CliCommand::Show {
            run_id, json, db, ..
        } => show_command(db, &run_id, json),
        CliCommand::Credentials(cmd) => credentials::credentials_command(cmd),
        CliCommand::Approve(args) => approval::approve_command(args),
        CliCommand::Reject(args) => approval::reject_command(args),
        CliCommand::Continue(args) => debug::continue_command(args),
        CliCommand::Agent(args) => agent::agent_command(args),
        CliCommand::Serve(args) => serve::serve_command(args),
        CliCommand::Mcp(args) => mcp::mcp_command(args),
        CliCommand::Trust(args) => trust::trust_command(args),
        CliCommand::Worker(args) => worker::worker_command(args),
        CliCommand::Submit(args) => submit::submit_command(args),
        CliCommand::Queue(args) => queue::queue_command(args),
        CliCommand::Workers(args) => workers::workers_command(args),
        CliCommand::Schema => {
            out!(
                "{}",
                serde_json::to_string_pretty(&GraphDoc::json_schema())?
            );
            Ok(0)
        }
    }
}

fn validate_command(path: &Path, json: bool) -> anyhow::Result<i32> {
    let (ok, problems): (bool, Vec<serde_json::Value>) = match GraphSource::read(path) {
        Err(err) => (
            false,
            vec![json!({"kind": "load", "message": err.to_string()})],
        ),
        Ok(source) => {
            // MCP servers of a trusted file are started to learn their tools; one that
            // cannot start is a problem. An untrusted file's are not started at all.
            let trust = Trust::of(source.is_trusted(), Some(path));
            let (_, problems) = runner::launch::check(&source, &trust);
            if !json {
                for p in &problems {
                    eprintln!("{}", format_problem(path, p));
                }
            }
            (
                problems.is_empty(),
                problems
                    .iter()
                    .map(|p| serde_json::to_value(p).unwrap_or_default())
                    .collect(),
            )
        }
    };
    if json {
        out!("{}", json!({"valid": ok, "problems": problems}));
    } else if ok {
        eprintln!("{}: valid", Escaped(&path.display().to_string()));
    } else if let Some(first) = problems.first()
        && first["kind"] == "load"
    {
        eprintln!("{}", Escaped(first["message"].as_str().unwrap_or_default()));
    } else {
        eprintln!("{} problem(s) found", problems.len());
    }
    Ok(if ok { 0 } else { EXIT_INVALID })
}

fn blocks_command(json: bool, graph: Option<&Path>) -> anyhow::Result<i32> {
    let mut registry = runner::catalog::builtin();
    if let Some(path) = graph {
        let source = match GraphSource::read(path) {
            Ok(source) => source,
            Err(err) => {
                eprintln!("{err}");
                return Ok(EXIT_INVALID);
            }
        };
        let trust = Trust::of(source.is_trusted(), Some(path));
        let secrets = runner::launch::secrets_for(&trust, &runner::Credentials::Default);
        let problems;
        (registry, problems) = runner::launch::catalog_for(&source, &trust, secrets.as_ref(), None);
        if !problems.is_empty() {
            for p in &problems {
                eprintln!("{}", format_problem(path, p));
            }
            return Ok(EXIT_INVALID);
        }
    }
    let entries = runner::edit::catalog_entries(&registry);
    if json {
        out!("{}", serde_json::to_string_pretty(&entries)?);
    } else {
        for entry in &entries {
            out!(
                "{:<22} {:<10} {}",
                entry["kind"].as_str().unwrap_or_default(),
                entry["category"].as_str().unwrap_or_default(),
                entry["description"].as_str().unwrap_or_default()
            );
        }
    }
    Ok(0)
}

/// `agentloom runs --export FILE`.
fn export_runs(db: Option<PathBuf>, file: &Path) -> anyhow::Result<i32> {
    let store = open_run_log(db)?;
    if let Err(err) = store.export_to(file) {
        eprintln!("{}", Escaped(&err.to_string()));
        return Ok(EXIT_INVALID);
    }
    eprintln!(
        "the run log {} is copied to {}, one self-contained file",
        store.path().display(),
        file.display()
    );
    Ok(0)
}

fn runs_command(db: Option<PathBuf>, json: bool, limit: usize) -> anyhow::Result<i32> {
    let store = open_run_log(db)?;
    let runs = store.list_runs(limit)?;
    if json {
        // Runs recorded from a queue carry the `worker` that ran them.
        out!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(0);
    }
    if runs.is_empty() {
        eprintln!("no runs yet in {}", store.path().display());
    }
    for (run, depth) in crate::runner::fork::in_lineage(&store, runs) {
        out!(
            "{}{}  {:<11} {:>8}  {}{}{}",
            "  └ ".repeat(depth.min(1)),
            run.id,
            run.status.as_str(),
            run.duration_ms
                .map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms")),
            Escaped(&run.graph_name),
            run.worker
                .map(|w| format!(" on {}", Escaped(&w)))
                .unwrap_or_default(),
            run.error
                .map(|e| format!("  ({})", Escaped(&e)))
                .unwrap_or_default()
        );
    }
    Ok(0)
}

/// `agentloom show RUN_ID --nats URL`: a submitted run's result as its worker published it.
fn show_remote(url: &str, run_id: &str, json: bool) -> anyhow::Result<i32> {
    // The id names subjects on the server: a wildcard would read another run's records.
    if !crate::remote::is_plain_run_id(run_id) {
        eprintln!(
            "`{}` is not a run id (letters, digits, - and _)",
            Escaped(run_id)
        );
        return Ok(EXIT_INVALID);
    }
    let runtime = async_runtime()?;
    let looked = runtime.block_on(async {
        let nats = crate::remote::Nats::connect(url, "agentloom show").await?;
        let report = nats.last_record(run_id, "report").await?;
        let request = match report {
            Some(_) => None,
            None => nats.last_record(run_id, "request").await?,
        };
        Ok::<_, crate::remote::RemoteError>((nats.url.clone(), report, request))
    });
    let (shown_url, report, request) = match looked {
        Ok(found) => found,
        Err(err) => {
            eprintln!("{err}");
            return Ok(EXIT_FAILED);
        }
    };
    match (report, request) {
        (Some(report), _) => match serde_json::from_slice(&report.payload) {
            Ok(report) => print_report(&report, json),
            Err(err) => {
                eprintln!("run {run_id}: its result on {shown_url} is not readable: {err}");
                Ok(EXIT_FAILED)
            }
        },
        (None, Some(_)) => {
            eprintln!("run {run_id} has no result yet on {shown_url}: it is queued or running");
            Ok(EXIT_WAITING)
        }
        (None, None) => {
            eprintln!(
                "no run `{}` on {shown_url} (its records are kept 14 days)",
                Escaped(run_id)
            );
            Ok(EXIT_INVALID)
        }
    }
}

fn show_command(db: Option<PathBuf>, run_id: &str, json: bool) -> anyhow::Result<i32> {
    let store = open_run_log(db)?;
    let Some(detail) = store.get_run(run_id)? else {
        eprintln!(
            "no run `{run_id}` in {}; `agentloom runs` lists them",
            store.path().display()
        );
        return Ok(EXIT_INVALID);
    };
    if json {
        // A run recorded from a queue (`submit --wait`) carries the `worker` that ran it.
        let mut shown = serde_json::to_value(&detail)?;
        agent::add_steps(&mut shown);
        out!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(0);
    }
    let run = &detail.run;
    out!(
        "run {}  {}  {}",
        run.id,
        Escaped(&run.graph_name),
        run.status.as_str()
    );
    if let Some(ms) = run.duration_ms {
        out!("duration {ms} ms");
    }
    if let Some(worker) = &run.worker {
        out!("worker {}", Escaped(worker));
    }
    if !run.usage.is_zero() {
        out!(
            "usage {} in / {} out tokens, ${:.4}",
            run.usage.input_tokens,
            run.usage.output_tokens,
            run.usage.cost_usd
        );
    }
    if let Some(error) = &run.error {
        out!("error {}", Escaped(error));
    }
    for line in fork::lineage_lines(&store, &run.id) {
        out!("{line}");
    }
    for node in &detail.nodes {
        out!(
            "  {:<20} {:<16} {:<10} attempts {}  {}",
            escape_control(&node.node_id),
            escape_control(&node.block),
            node.status.as_str(),
            node.attempts,
            Escaped(
                node.error
                    .as_deref()
                    .or(node.skip_reason.as_deref())
                    .unwrap_or_default()
            )
        );
    }
    for (name, value) in &detail.outputs {
        out!(
            "output {} = {}",
            Escaped(name),
            Escaped(&value.preview(200))
        );
    }
    if run.status == RunStatus::Waiting {
        let approvals = store.pending_approvals(&run.id)?;
        for pending in &approvals {
            println!(
                "waits for approval: `{}` {} {}",
                Escaped(&pending.node),
                Escaped(&pending.request.action),
                Escaped(&pending.request.shown().preview(400))
            );
        }
        if !approvals.is_empty() {
            println!(
                "decide with: agentloom approve {} | agentloom reject {}",
                run.id, run.id
            );
        }
        debug::show_pauses(&store, &run.id)?;
    }
    Ok(0)
}

/// Splits `NAME=VALUE` arguments; values stay text, `graph.input` converts them to its type.
pub(crate) fn parse_inputs(raw: &[String]) -> Result<ValueMap, String> {
    let mut inputs = ValueMap::new();
    for item in raw {
        let Some((name, value)) = item.split_once('=') else {
            return Err(format!("--input `{item}`: expected NAME=VALUE"));
        };
        if name.trim().is_empty() {
            return Err(format!("--input `{item}`: the name is empty"));
        }
        inputs.insert(name.trim().to_owned(), Value::text(value.to_owned()));
    }
    Ok(inputs)
}

/// Logs (at debug level, `AGENTLOOM_LOG=debug`) that a step of a headless run is done:
/// the time since the first step and the process's peak memory so far, to see where a
/// large graph's time and memory go.
pub(crate) fn phase(name: &str) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let peak_rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
    static FIRST: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let elapsed_ms = FIRST
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
        * 1e3;
    tracing::debug!(phase = name, elapsed_ms, peak_rss_kib, "run command");
}

fn run_graph(args: RunArgs) -> anyhow::Result<i32> {
    phase("started");
    // Read once: trust is checked against the document that runs, and every file it calls.
    let source = match GraphSource::read(&args.graph) {
        Ok(source) => source,
        Err(err) => {
            eprintln!("{}", Escaped(&err.to_string()));
            return Ok(EXIT_INVALID);
        }
    };
    phase("graph file read");
    let Some(trusted) = trust::trust_for_run(&args.graph, args.trust, &source) else {
        return Ok(EXIT_INVALID);
    };
    phase("trust decided");
    // Before the graph loads: a replay lists MCP tools from the recording, starting no server.
    let replay = match &args.replay {
        Some(run_id) => {
            match crate::runner::eval::load_replay(args.db.clone(), run_id, args.replay_miss) {
                Ok(replay) => Some(replay),
                Err(message) => {
                    eprintln!("--replay {}: {message}", escape_control(run_id));
                    return Ok(EXIT_INVALID);
                }
            }
        }
        None => None,
    };
    let trust = Trust::of(trusted, Some(&args.graph));
    let prepared = match Prepared::new(
        source,
        trust,
        &runner::Credentials::Default,
        replay.as_deref(),
    ) {
        Ok(prepared) => prepared,
        Err(problems) => {
            for p in &problems {
                eprintln!("{}", Escaped(p));
            }
            return Ok(EXIT_INVALID);
        }
    };
    phase("graph validated");
    if let Some(note) = prepared.safe_mode_note() {
        eprintln!("{note}");
    }
    let inputs = match parse_inputs(&args.inputs)
        .and_then(|inputs| check_inputs(prepared.graph(), &inputs).map(|()| inputs))
    {
        Ok(inputs) => inputs,
        Err(message) => {
            eprintln!(
                "{}",
                Escaped(&format!("{}: {message}", args.graph.display()))
            );
            return Ok(EXIT_INVALID);
        }
    };
    let Some(workspace) = workspace_dir(args.workspace)? else {
        return Ok(EXIT_INVALID);
    };
    let debug = match debug::parse_breakpoints(&args.breakpoints, prepared.graph()) {
        Ok(breakpoints) if breakpoints.is_empty() => None,
        Ok(breakpoints) => Some(agentloom_engine::RunDebug::new(breakpoints)),
        Err(message) => {
            eprintln!("{}: {message}", args.graph.display());
            return Ok(EXIT_INVALID);
        }
    };
    let mut run_id = None;
    let seed = match (&args.from, &args.reuse, &args.fork) {
        (_, _, Some(parent)) => {
            match fork::start_fork(args.db.clone(), prepared.graph(), parent, &args.set) {
                Ok((fork_id, seed)) => {
                    run_id = Some(fork_id);
                    Some(seed)
                }
                Err(message) => {
                    eprintln!("{}: {}", args.graph.display(), Escaped(&message));
                    return Ok(EXIT_INVALID);
                }
            }
        }
        (Some(from), Some(reuse), None) => {
            match approval::run_from_seed(args.db.clone(), prepared.graph(), from, reuse) {
                Ok(seed) => Some(seed),
                Err(message) => {
                    eprintln!("{}: {message}", args.graph.display());
                    return Ok(EXIT_INVALID);
                }
            }
        }
        _ => None,
    };
    execute(
        &prepared,
        inputs,
        Execution {
            db: args.db,
            no_log: args.no_log,
            full_log: args.full_log,
            json: args.json,
            workspace,
            concurrency: args.concurrency,
            run_id,
            seed,
            replay,
            debug,
        },
    )
}

/// How a headless run is executed and reported.
struct Execution {
    db: Option<PathBuf>,
    no_log: bool,
    /// Keep every value whole in the run log (`--full-log`).
    full_log: bool,
    json: bool,
    workspace: PathBuf,
    concurrency: Option<usize>,
    /// Set when resuming a recorded run under its own id.
    run_id: Option<String>,
    seed: Option<RunSeed>,
    /// The recording the run's outbound calls are answered from (`--replay`).
    replay: Option<Arc<agentloom_engine::Replay>>,
    /// Breakpoints (`--break`, or those of a continued run).
    debug: Option<agentloom_engine::RunDebug>,
}

/// Runs a prepared graph headless: recorded, with progress on stderr and the result on
/// stdout; returns the exit code (3 when it pauses for an approval).
fn execute(prepared: &Prepared, inputs: ValueMap, run: Execution) -> anyhow::Result<i32> {
    let policy = if run.full_log {
        agentloom_engine::LogPolicy::full()
    } else {
        agentloom_engine::LogPolicy::default()
    };
    let log = if run.no_log {
        None
    } else {
        match open_run_log(run.db.clone()) {
            Ok(store) => Some(runner::Log { store, policy }),
            Err(err) => {
                eprintln!("warning: this run will not be logged: {err:#}");
                None
            }
        }
    };
    let interactive = std::io::stderr().is_terminal();
    let progress = Arc::new(progress::ProgressSink::new(interactive, !run.json));
    let runtime = async_runtime()?;
    // A person at a terminal is asked; otherwise the run pauses, stored in the run log.
    let ask = (std::io::stdin().is_terminal() && interactive && !run.json).then(|| {
        Arc::new(terminal_approver::TerminalApprover::new(Some(
            progress.clone(),
        ))) as _
    });
    let cancel = tokio_util::sync::CancellationToken::new();
    let launch = Launch {
        options: RunOptions {
            cancel: cancel.clone(),
            concurrency: run.concurrency,
            run_id: run.run_id,
            seed: run.seed.map(Arc::new),
            replay: run.replay,
            debug: run
                .debug
                .map(|d| debug::with_terminal(d, ask.is_some(), &progress)),
            ..RunOptions::default()
        },
        log,
        sinks: vec![progress.clone()],
        ask,
        // The CLI records the workspace when the run ends.
        ..Launch::new(inputs, runner::Workspace::Folder(run.workspace))
    };
    phase("run log and runtime ready");
    interrupt::watch(cancel.clone());
    let launched = runtime.block_on(prepared.launch(launch));
    // Blocking work a cancelled node left behind (a read that never returns) is abandoned.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    phase("graph ran");
    progress.finish();
    if let Some(err) = &launched.log_error {
        eprintln!("warning: {err}");
    }
    phase("run log written");

    let shown = print_report(&launched.report, run.json)?;
    phase("result printed");
    Ok(shown)
}

/// Prints a run's report as `run` does: the JSON object, or each output on stdout and the
/// outcome on stderr; returns the exit code of its status.
pub(crate) fn print_report(
    report: &agentloom_engine::RunReport,
    json: bool,
) -> anyhow::Result<i32> {
    if json {
        // Written as it is serialized: a large run's report is never held whole as text.
        use std::io::Write as _;
        let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer(&mut stdout, report).map_err(|err| StdoutClosed(err.into()))?;
        writeln!(stdout)
            .and_then(|()| stdout.flush())
            .map_err(StdoutClosed)?;
    } else {
        for (name, value) in &report.outputs {
            out!("{name}: {}", value.to_text());
        }
        let summary = match report.status {
            RunStatus::Completed => format!("completed in {} ms", report.duration_ms),
            RunStatus::Waiting => format!(
                "waits after {} ms: {}",
                report.duration_ms,
                Escaped(report.error.as_deref().unwrap_or_default())
            ),
            other => format!(
                "{} after {} ms: {}",
                other.as_str(),
                report.duration_ms,
                Escaped(report.error.as_deref().unwrap_or_default())
            ),
        };
        eprintln!("run {} {summary}", report.run_id);
    }
    Ok(match report.status {
        RunStatus::Completed => 0,
        RunStatus::Waiting => {
            let paused = report
                .nodes
                .iter()
                .any(|n| n.status == agentloom_engine::NodeStatus::AtBreakpoint);
            if paused {
                eprintln!(
                    "paused at a breakpoint: agentloom continue {}",
                    report.run_id
                );
            }
            if !paused
                || report
                    .error
                    .as_deref()
                    .is_some_and(|e| e.contains("approval"))
            {
                eprintln!("waiting for approval: agentloom approve {}", report.run_id);
            }
            EXIT_WAITING
        }
        _ => EXIT_FAILED,
    })
}

/// A recorded run made ready to go on (an approval decided, a breakpoint continued): its
/// graph and the files it calls as they were when it started, with the trust it had
/// (unless its file has been trusted since); `None`, said on stderr, when it cannot be.
pub(crate) fn prepare_recorded_run(
    store: &agentloom_engine::RunStore,
    detail: &agentloom_engine::RunDetail,
) -> Option<runner::Prepared> {
    let run_id = &detail.run.id;
    let doc = match detail.graph_doc() {
        Ok(doc) => doc,
        Err(err) => {
            eprintln!(
                "run {run_id}: the recorded graph cannot be read: {}",
                Escaped(&err.to_string())
            );
            return None;
        }
    };
    match runner::resume::prepare_recorded(
        store,
        run_id,
        doc,
        crate::trust::is_trusted,
        &runner::Credentials::Default,
    ) {
        Ok(prepared) => Some(prepared),
        Err(message) => {
            eprintln!("run {run_id}: {}", Escaped(&message));
            None
        }
    }
}

/// Where a recorded run goes on (`verb`: "resume", "continue"): the folder it worked in
/// (`recorded`, read only when `given` is `None`), else `--workspace` or the current
/// directory; `None` (said on stderr) when that is not a directory.
pub(crate) fn recorded_run_workspace(
    recorded: Option<PathBuf>,
    given: Option<PathBuf>,
    run_id: &str,
    verb: &str,
) -> anyhow::Result<Option<PathBuf>> {
    match recorded {
        Some(dir) if dir.is_dir() => Ok(Some(dir)),
        Some(dir) => {
            eprintln!(
                "run {run_id} worked in {}, which is no longer a directory; pass --workspace DIR to {verb} it elsewhere",
                dir.display()
            );
            Ok(None)
        }
        None => workspace_dir(given),
    }
}

/// `--workspace`, else the current directory; `None` (said on stderr) when not a directory.
pub(crate) fn workspace_dir(given: Option<PathBuf>) -> anyhow::Result<Option<PathBuf>> {
    let workspace = match given {
        Some(dir) => dir,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    if workspace.is_dir() {
        Ok(Some(workspace))
    } else {
        eprintln!("--workspace {}: not a directory", workspace.display());
        Ok(None)
    }
}
