//! The command line: `agentloom run|validate|blocks|runs|show|schema|open`.
//!
//! Exit codes: 0 success, 1 the run failed or was cancelled, 2 invalid graph or arguments.

/// `println!` that returns [`StdoutClosed`] (with `?`) instead of panicking when stdout is
/// gone (`agentloom runs --json | head -1`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*).map_err($crate::cli::StdoutClosed)?
    }};
}

pub mod credentials;
mod progress;

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
use agentloom_engine::{EventSink, Executor, FanoutSink, RunOptions, RunStatus, RunStore};
use anyhow::Context as _;
use clap::{Parser, Subcommand};
use serde_json::json;

/// The run went wrong (exit 1).
pub const EXIT_FAILED: i32 = 1;
/// The graph or the arguments are invalid (exit 2).
pub const EXIT_INVALID: i32 = 2;
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
    /// Manage credentials in the OS keychain (API keys, OAuth sign-in).
    #[command(subcommand)]
    Credentials(credentials::CredentialsCmd),
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
    /// The directory file blocks may read and write (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// How many nodes may run at once (default: the graph's setting, else 8).
    #[arg(long)]
    pub concurrency: Option<usize>,
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
        Command::Validate { graph, json } => validate_command(&graph, json),
        Command::Blocks { json } => blocks_command(json),
        Command::Runs { json, db, limit } => runs_command(db, json, limit),
        Command::Show { run_id, json, db } => show_command(db, &run_id, json),
        Command::Credentials(cmd) => credentials::credentials_command(cmd),
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
fn load_graph(path: &Path) -> Result<GraphDoc, String> {
    agentloom_core::read_graph_file(path, agentloom_core::max_graph_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn load_and_validate(path: &Path, catalog: &dyn BlockCatalog) -> Result<ValidGraph, Vec<String>> {
    let doc = load_graph(path).map_err(|e| vec![e])?;
    validate(&doc, catalog)
        .map_err(|problems| problems.iter().map(|p| format_problem(path, p)).collect())
}

fn format_problem(path: &Path, problem: &Problem) -> String {
    format!("{}: {problem}", path.display())
}

fn validate_command(path: &Path, json: bool) -> anyhow::Result<i32> {
    let registry = Registry::builtin();
    let (ok, problems): (bool, Vec<serde_json::Value>) = match load_graph(path) {
        Err(message) => (false, vec![json!({"kind": "load", "message": message})]),
        Ok(doc) => match validate(&doc, &registry) {
            Ok(_) => (true, Vec::new()),
            Err(problems) => {
                if !json {
                    for p in &problems {
                        eprintln!("{}", format_problem(path, p));
                    }
                }
                (
                    false,
                    problems
                        .iter()
                        .map(|p| serde_json::to_value(p).unwrap_or_default())
                        .collect(),
                )
            }
        },
    };
    if json {
        out!("{}", json!({"valid": ok, "problems": problems}));
    } else if ok {
        eprintln!("{}: valid", path.display());
    } else if let Some(first) = problems.first()
        && first["kind"] == "load"
    {
        eprintln!("{}", first["message"].as_str().unwrap_or_default());
    } else {
        eprintln!("{} problem(s) found", problems.len());
    }
    Ok(if ok { 0 } else { EXIT_INVALID })
}

fn blocks_command(json: bool) -> anyhow::Result<i32> {
    let registry = Registry::builtin();
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
            run.graph_name,
            run.error.map(|e| format!("  ({e})")).unwrap_or_default()
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
        out!("{}", serde_json::to_string_pretty(&detail)?);
        return Ok(0);
    }
    let run = &detail.run;
    out!(
        "run {}  {}  {}",
        run.id,
        run.graph_name,
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
        out!("error {error}");
    }
    for node in &detail.nodes {
        out!(
            "  {:<20} {:<10} attempts {}  {}",
            node.node_id,
            node.status.as_str(),
            node.attempts,
            node.error
                .clone()
                .or_else(|| node.skip_reason.clone())
                .unwrap_or_default()
        );
    }
    for (name, value) in &detail.outputs {
        out!("output {name} = {}", value.preview(200));
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
fn check_inputs(graph: &ValidGraph, inputs: &ValueMap) -> Result<(), String> {
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
    let started = std::time::Instant::now();
    let phase = |name: &str| {
        tracing::debug!(
            phase = name,
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "run command"
        )
    };
    let registry = Arc::new(Registry::builtin());
    let graph = match load_and_validate(&args.graph, registry.as_ref()) {
        Ok(graph) => graph,
        Err(problems) => {
            for p in &problems {
                eprintln!("{p}");
            }
            return Ok(EXIT_INVALID);
        }
    };
    let inputs = match parse_inputs(&args.inputs)
        .and_then(|inputs| check_inputs(&graph, &inputs).map(|()| inputs))
    {
        Ok(inputs) => inputs,
        Err(message) => {
            eprintln!("{}: {message}", args.graph.display());
            return Ok(EXIT_INVALID);
        }
    };
    let workspace = match args.workspace {
        Some(dir) => dir,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    if !workspace.is_dir() {
        eprintln!("--workspace {}: not a directory", workspace.display());
        return Ok(EXIT_INVALID);
    }

    phase("graph loaded and validated");
    let mut sinks: Vec<Arc<dyn EventSink>> = Vec::new();
    let recorder = if args.no_log {
        None
    } else {
        match open_store(args.db.clone())
            .and_then(|store| Ok(Arc::new(store.recorder(&graph.doc)?)))
        {
            Ok(recorder) => {
                sinks.push(recorder.clone());
                Some(recorder)
            }
            Err(err) => {
                // The run is worth more than its log entry: warn and go on.
                eprintln!("warning: this run will not be logged: {err:#}");
                None
            }
        }
    };
    let interactive = std::io::stderr().is_terminal();
    let progress = Arc::new(progress::ProgressSink::new(interactive, !args.json));
    sinks.push(progress.clone());

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut executor = Executor::new(registry).with_workspace(workspace);
    // Credentials: `AGENTLOOM_SECRET_<NAME>` first, then the OS keychain (asked only when a
    // block needs a secret, so graphs without credentials never touch the keychain).
    if let Ok(store) = agentloom_engine::CredentialStore::open_default() {
        executor = executor.with_secrets(Arc::new(agentloom_engine::KeychainSecrets::new(
            Arc::new(store),
        )));
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let options = RunOptions {
        cancel: cancel.clone(),
        concurrency: args.concurrency,
        ..RunOptions::default()
    };
    phase("run log and runtime ready");
    let report = runtime.block_on(async {
        let ctrl_c = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ncancelling… (Ctrl-C again to quit at once)");
                ctrl_c.cancel();
            }
            // A node that does not notice cancellation must not keep the process alive.
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("quitting");
                std::process::exit(EXIT_INTERRUPTED);
            }
        });
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
    if let Some(recorder) = recorder
        && let Err(err) = recorder.finish()
    {
        eprintln!("warning: the run log may be incomplete: {err}");
    }
    phase("run log written");

    if args.json {
        out!("{}", serde_json::to_string(&report)?);
    } else {
        for (name, value) in &report.outputs {
            out!("{name}: {}", value.to_text());
        }
        let summary = match report.status {
            RunStatus::Completed => format!("completed in {} ms", report.duration_ms),
            other => format!(
                "{} after {} ms: {}",
                other.as_str(),
                report.duration_ms,
                report.error.clone().unwrap_or_default()
            ),
        };
        eprintln!("run {} {summary}", report.run_id);
    }
    phase("result printed");
    Ok(if report.status == RunStatus::Completed {
        0
    } else {
        EXIT_FAILED
    })
}
