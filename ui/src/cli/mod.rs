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
pub mod credentials;
pub mod eval;
mod interrupt;
mod mcp;
mod progress;
pub(crate) mod recording;
mod serve;
mod terminal_approver;
mod trust;

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

use agentloom_blocks::Registry;
use agentloom_core::{BlockCatalog, GraphDoc, Problem, ValidGraph, Value, ValueMap, validate};
use agentloom_core::{Escaped, escape_control};
use agentloom_engine::{
    DurableApprover, EventSink, Executor, FanoutSink, RunOptions, RunSeed, RunStatus, RunStore,
};
use anyhow::Context as _;
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
    about = "Build and run AI agent graphs. With no command, opens the desktop app."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
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
        #[arg(long)]
        db: Option<PathBuf>,
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
    /// Serve a graph over HTTP: the Agent Protocol, and optionally a webhook and a schedule.
    Serve(serve::ServeArgs),
    /// Serve graphs as MCP tools over stdio (one tool per graph file).
    Mcp(mcp::McpArgs),
    /// Trust a graph file as it is now: let it start its MCP servers, use credentials and
    /// call graph files outside its folder. Any change to it (or to a file it calls) undoes it.
    Trust(trust::TrustArgs),
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
    #[arg(long, value_enum, default_value_t = eval::ReplayMissArg::Fail, requires = "replay")]
    pub replay_miss: eval::ReplayMissArg,
}

/// Runs a parsed command; returns the process exit code.
pub fn run_command(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Open {
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
        Command::Run(args) => run_graph(args),
        Command::Eval(args) => eval::eval_command(args),
        Command::Evals { json, db } => eval::evals_command(db, json),
        Command::Validate { graph, json } => validate_command(&graph, json),
        Command::Blocks { json, graph } => blocks_command(json, graph.as_deref()),
        Command::Runs {
            db,
            export: Some(file),
            ..
        } => export_runs(db, &file),
        Command::Runs {
            json, db, limit, ..
        } => runs_command(db, json, limit),
        Command::Show { run_id, json, db } => show_command(db, &run_id, json),
        Command::Credentials(cmd) => credentials::credentials_command(cmd),
        Command::Approve(args) => approval::approve_command(args),
        Command::Reject(args) => approval::reject_command(args),
        Command::Agent(args) => agent::agent_command(args),
        Command::Serve(args) => serve::serve_command(args),
        Command::Mcp(args) => mcp::mcp_command(args),
        Command::Trust(args) => trust::trust_command(args),
        Command::Schema => {
            out!(
                "{}",
                serde_json::to_string_pretty(&GraphDoc::json_schema())?
            );
            Ok(0)
        }
    }
}

/// Reads and parses a graph file; the error names the file.
pub(crate) fn load_graph(path: &Path) -> Result<GraphDoc, String> {
    agentloom_core::read_graph_file(path, agentloom_core::max_graph_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

pub(crate) fn format_problem(path: &Path, problem: &Problem) -> String {
    format!("{}: {problem}", path.display())
}

fn validate_command(path: &Path, json: bool) -> anyhow::Result<i32> {
    let (ok, problems): (bool, Vec<serde_json::Value>) = match load_graph(path) {
        Err(message) => (false, vec![json!({"kind": "load", "message": message})]),
        Ok(doc) => {
            // MCP servers of a trusted file are started to learn their tools; one that
            // cannot start is a problem. An untrusted file's are not started at all.
            let trusted = crate::trust::is_trusted(path);
            let secrets = crate::headless::secrets_for(path, trusted);
            let (registry, mut problems) =
                crate::trust::catalog_for(&doc, Some(path), trusted, secrets.as_ref());
            if let Err(mut more) = validate(&doc, &registry) {
                if !trusted {
                    crate::trust::drop_offline_tool_nodes(&mut more, &doc);
                }
                problems.extend(more);
            }
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
    let mut registry = Registry::builtin();
    if let Some(path) = graph {
        let doc = match load_graph(path) {
            Ok(doc) => doc,
            Err(message) => {
                eprintln!("{message}");
                return Ok(EXIT_INVALID);
            }
        };
        let trusted = crate::trust::is_trusted(path);
        let secrets = crate::headless::secrets_for(path, trusted);
        let problems;
        (registry, problems) =
            crate::trust::catalog_for(&doc, Some(path), trusted, secrets.as_ref());
        if !problems.is_empty() {
            for p in &problems {
                eprintln!("{}", format_problem(path, p));
            }
            return Ok(EXIT_INVALID);
        }
    }
    let mut entries = Vec::new();
    for block in registry.blocks() {
        let meta = block.meta();
        // Ports with the default config; blocks whose ports need config say so.
        let ports = block
            .instantiate(&agentloom_core::Config::new())
            .map(|node| {
                let ports = node.ports();
                json!({"inputs": ports.inputs, "outputs": ports.outputs_with_error()})
            })
            .unwrap_or_else(|e| json!({"depends_on_config": e.to_string()}));
        entries.push(json!({
            "kind": meta.kind,
            "title": meta.title,
            "category": meta.category,
            "description": meta.description,
            "side_effects": meta.side_effects,
            "credential": meta.credential,
            "ports": ports,
            "config_schema": meta.config_schema(),
        }));
    }
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

fn open_store(db: Option<PathBuf>) -> anyhow::Result<RunStore> {
    let path = match db {
        Some(path) => path,
        None => RunStore::default_path()?,
    };
    Ok(RunStore::open(&path)?)
}

/// The run log and a recorder for one run of `graph`. A log that cannot be opened is a
/// warning, not a failure: the run is worth more than its log entry.
fn open_recorder(
    db: Option<PathBuf>,
    graph: &agentloom_core::GraphDoc,
    policy: agentloom_engine::LogPolicy,
) -> (
    Option<Arc<RunStore>>,
    Option<Arc<agentloom_engine::RunRecorder>>,
) {
    let opened = open_store(db).and_then(|store| {
        let recorder = store.recorder_with(graph, policy)?;
        Ok((Arc::new(store), Arc::new(recorder)))
    });
    match opened {
        Ok((store, recorder)) => (Some(store), Some(recorder)),
        Err(err) => {
            eprintln!("warning: this run will not be logged: {err:#}");
            (None, None)
        }
    }
}

/// `agentloom runs --export FILE`.
fn export_runs(db: Option<PathBuf>, file: &Path) -> anyhow::Result<i32> {
    let store = open_store(db)?;
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
    let store = open_store(db)?;
    let runs = store.list_runs(limit)?;
    if json {
        out!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(0);
    }
    if runs.is_empty() {
        eprintln!("no runs yet in {}", store.path().display());
    }
    for run in runs {
        out!(
            "{}  {:<11} {:>8}  {}{}",
            run.id,
            run.status.as_str(),
            run.duration_ms
                .map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms")),
            Escaped(&run.graph_name),
            run.error
                .map(|e| format!("  ({})", Escaped(&e)))
                .unwrap_or_default()
        );
    }
    Ok(0)
}

fn show_command(db: Option<PathBuf>, run_id: &str, json: bool) -> anyhow::Result<i32> {
    let store = open_store(db)?;
    let Some(detail) = store.get_run(run_id)? else {
        eprintln!(
            "no run `{run_id}` in {}; `agentloom runs` lists them",
            store.path().display()
        );
        return Ok(EXIT_INVALID);
    };
    if json {
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
        for pending in store.pending_approvals(&run.id)? {
            println!(
                "waits for approval: `{}` {} {}",
                Escaped(&pending.node),
                Escaped(&pending.request.action),
                Escaped(&pending.request.shown().preview(400))
            );
        }
        println!(
            "decide with: agentloom approve {} | agentloom reject {}",
            run.id, run.id
        );
    }
    Ok(0)
}

/// Splits `NAME=VALUE` arguments; values stay text, `graph.input` converts them to its type.
fn parse_inputs(raw: &[String]) -> Result<ValueMap, String> {
    let mut inputs = ValueMap::new();
    for item in raw {
        let Some((name, value)) = item.split_once('=') else {
            return Err(format!("--input `{item}`: expected NAME=VALUE"));
        };
        if name.trim().is_empty() {
            return Err(format!("--input `{item}`: the name is empty"));
        }
        inputs.insert(name.trim().to_owned(), Value::Text(value.to_owned()));
    }
    Ok(inputs)
}

/// Checks given inputs against the graph's declared inputs before anything runs.
pub(crate) fn check_inputs(graph: &ValidGraph, inputs: &ValueMap) -> Result<(), String> {
    let declared = graph.interface_inputs();
    for name in inputs.keys() {
        if !declared.iter().any(|input| &input.name == name) {
            let names: Vec<&str> = declared.iter().map(|input| input.name.as_str()).collect();
            return Err(if names.is_empty() {
                format!("the graph has no input `{name}` (it declares no inputs)")
            } else {
                format!(
                    "the graph has no input `{name}`; its inputs are {}",
                    names.join(", ")
                )
            });
        }
    }
    // A value the graph input would refuse is a wrong argument, found before anything runs.
    for input in &declared {
        if let Some(given) = inputs.get(&input.name)
            && let Err(err) = agentloom_core::coerce_given(given.clone(), &input.ty)
        {
            return Err(format!("--input {}: {err}", input.name));
        }
    }
    let missing: Vec<String> = declared
        .iter()
        .filter(|input| input.default.is_none() && !inputs.contains_key(&input.name))
        .map(|input| format!("{} ({})", input.name, input.ty))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "missing run input(s): {}; pass them as --input NAME=VALUE",
            missing.join(", ")
        ))
    }
}

fn run_graph(args: RunArgs) -> anyhow::Result<i32> {
    let Some(trusted) = trust::trust_for_run(&args.graph, args.trust) else {
        return Ok(EXIT_INVALID);
    };
    let secrets = crate::headless::secrets_for(&args.graph, trusted);
    let (registry, graph) =
        match crate::headless::load_with_tools(&args.graph, secrets.as_ref(), trusted) {
            Ok(loaded) => loaded,
            Err(problems) => {
                for p in &problems {
                    eprintln!("{}", Escaped(p));
                }
                return Ok(EXIT_INVALID);
            }
        };
    if let Some(note) = (!trusted)
        .then(|| crate::trust::safe_mode_note(&args.graph, &graph))
        .flatten()
    {
        eprintln!("{note}");
    }
    let inputs = match parse_inputs(&args.inputs)
        .and_then(|inputs| check_inputs(&graph, &inputs).map(|()| inputs))
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
    let replay = match &args.replay {
        Some(run_id) => match eval::load_replay(args.db.clone(), run_id, args.replay_miss) {
            Ok(replay) => Some(replay),
            Err(message) => {
                eprintln!("--replay {}: {message}", escape_control(run_id));
                return Ok(EXIT_INVALID);
            }
        },
        None => None,
    };
    let seed = match (&args.from, &args.reuse) {
        (Some(from), Some(reuse)) => {
            match approval::run_from_seed(args.db.clone(), &graph, from, reuse) {
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
        registry,
        graph,
        inputs,
        Execution {
            db: args.db,
            no_log: args.no_log,
            full_log: args.full_log,
            json: args.json,
            workspace,
            concurrency: args.concurrency,
            run_id: None,
            seed,
            secrets,
            untrusted_file: (!trusted).then(|| args.graph.clone()),
            replay,
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
    /// The credentials the run may use (none for an untrusted file).
    secrets: Arc<dyn agentloom_core::SecretSource>,
    /// The graph file, when its user has not trusted it: kept with the run, so that
    /// resuming it after an approval still sends no credential.
    untrusted_file: Option<PathBuf>,
    /// The recording the run's outbound calls are answered from (`--replay`).
    replay: Option<Arc<agentloom_engine::Replay>>,
}

/// Runs a validated graph headless: recorded, with progress on stderr and the result on
/// stdout; returns the exit code (3 when it pauses for an approval).
fn execute(
    registry: Arc<Registry>,
    graph: ValidGraph,
    inputs: ValueMap,
    run: Execution,
) -> anyhow::Result<i32> {
    let started = std::time::Instant::now();
    let phase = |name: &str| {
        tracing::debug!(
            phase = name,
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "run command"
        )
    };
    phase("graph loaded and validated");
    let mut sinks: Vec<Arc<dyn EventSink>> = Vec::new();
    let (store, recorder) = if run.no_log {
        (None, None)
    } else {
        let policy = if run.full_log {
            agentloom_engine::LogPolicy::full()
        } else {
            agentloom_engine::LogPolicy::default()
        };
        open_recorder(run.db.clone(), &graph.doc, policy)
    };
    if let Some(recorder) = &recorder {
        sinks.push(recorder.clone());
    }
    // After the recorder: it writes the run's row the files refer to.
    if let (Some(recorder), Some(store)) = (&recorder, &store) {
        let files = registry.graph_files().cloned();
        // What runs is what was validated, whatever happens to the files meanwhile.
        if let Some(files) = &files {
            files.freeze();
        }
        // The CLI records the workspace when the run ends (`recording::finish`).
        sinks.push(Arc::new(recording::RunContextSink {
            recorder: recorder.clone(),
            store: store.clone(),
            workspace: None,
            graph_files: files,
            untrusted_file: run.untrusted_file.clone(),
        }));
    }
    let interactive = std::io::stderr().is_terminal();
    let progress = Arc::new(progress::ProgressSink::new(interactive, !run.json));
    sinks.push(progress.clone());

    let runtime = async_runtime()?;
    let mut executor = Executor::new(registry)
        .with_workspace(run.workspace.clone())
        .with_secrets(run.secrets.clone());
    // A person at a terminal is asked; otherwise the run pauses, stored in the run log.
    let ask = (std::io::stdin().is_terminal() && interactive && !run.json).then(|| {
        Arc::new(terminal_approver::TerminalApprover::new(Some(
            progress.clone(),
        ))) as _
    });
    if let Some(approver) = headless_approver(store.as_ref(), ask) {
        executor = executor.with_approver(approver);
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let resumed = run.run_id.clone();
    let options = RunOptions {
        cancel: cancel.clone(),
        concurrency: run.concurrency,
        run_id: run.run_id,
        seed: run.seed.map(Arc::new),
        replay: run.replay,
    };
    phase("run log and runtime ready");
    interrupt::watch(cancel.clone());
    let report = runtime.block_on(async {
        executor
            .run(
                Arc::new(graph),
                inputs,
                options,
                Arc::new(FanoutSink(sinks)),
            )
            .await
    });
    // Blocking work a cancelled node left behind (a read that never returns) is abandoned.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    phase("graph ran");
    progress.finish();
    recording::finish(recorder, store.as_ref(), &report.run_id, &run.workspace);
    phase("run log written");
    if let (Some(store), Some(run_id)) = (&store, &resumed)
        && let Err(err) = store.clear_decided_approvals(run_id)
    {
        eprintln!("warning: {err}");
    }

    if run.json {
        out!("{}", serde_json::to_string(&report)?);
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
    phase("result printed");
    Ok(match report.status {
        RunStatus::Completed => 0,
        RunStatus::Waiting => {
            eprintln!("waiting for approval: agentloom approve {}", report.run_id);
            EXIT_WAITING
        }
        _ => EXIT_FAILED,
    })
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

/// Who decides on approvals in a headless run: with a run log, every request is stored
/// first and the run pauses when nobody can `ask` (resumed by `agentloom approve`); without
/// one, only a person at the terminal can.
pub(crate) fn headless_approver(
    store: Option<&Arc<RunStore>>,
    ask: Option<Arc<dyn agentloom_engine::Approver>>,
) -> Option<Arc<dyn agentloom_engine::Approver>> {
    match store {
        Some(store) => Some(Arc::new(DurableApprover::new(store.clone(), ask))),
        None => ask,
    }
}

/// The runtime a headless command runs on.
pub(crate) fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
