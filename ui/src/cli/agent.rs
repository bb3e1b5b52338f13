//! `agentloom agent "GOAL"`: the agent loop from the command line, with a built-in graph
//! (goal → agent with every built-in tool → outputs), each step printed as it happens.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::Arc;

use agentloom_blocks::agent::Step;
use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc, Value, ValueMap};
use agentloom_engine::{Approver, EventKind, EventSink, RunEvent, RunOptions, RunStatus};
use serde_json::json;

use super::terminal_approver::TerminalApprover;
use super::{EXIT_FAILED, EXIT_INVALID, EXIT_WAITING};
use crate::runner::{self, Credentials, GraphSource, Launch, Log, Prepared, Trust, Workspace};

/// Every built-in tool of the agent block.
const ALL_TOOLS: &str = "read_file, write_file, list_files, run_code, http_get, finish";

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// What the agent should achieve.
    pub goal: String,
    /// openai (any OpenAI-compatible server), anthropic or ollama.
    #[arg(long, default_value = "openai")]
    pub provider: String,
    /// The API root, e.g. http://127.0.0.1:11434/v1 for a local server.
    #[arg(long)]
    pub base_url: Option<String>,
    /// The model (default: gpt-4o-mini, claude-sonnet-4-5 or llama3.2 by provider).
    #[arg(long)]
    pub model: Option<String>,
    /// The stored credential with the API key.
    #[arg(long)]
    pub credential: Option<String>,
    /// The folder the agent's file and code tools work in (default: a fresh folder under the
    /// data directory, printed at the start; never `/` or the home folder).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[arg(long, default_value_t = 20)]
    pub max_steps: u64,
    /// Run side effects (write_file, run_code) without asking (safe mode off).
    #[arg(long)]
    pub yes: bool,
    /// Print exactly one JSON object {run_id, status, answer, steps, usage} on stdout.
    #[arg(long)]
    pub json: bool,
    /// The run log database (default: the per-user data directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
}

/// The built-in agent graph.
fn agent_graph(args: &AgentArgs) -> GraphDoc {
    let model = args.model.clone().unwrap_or_else(|| {
        match args.provider.as_str() {
            "anthropic" => "claude-sonnet-4-5",
            "ollama" => "llama3.2",
            _ => "gpt-4o-mini",
        }
        .to_owned()
    });
    let mut config = json!({
        "provider": args.provider,
        "model": model,
        "max_steps": args.max_steps,
        "builtin_tools": ALL_TOOLS,
    });
    if let Some(map) = config.as_object_mut() {
        if let Some(url) = &args.base_url {
            map.insert("base_url".to_owned(), json!(url));
        }
        // A hosted provider's own credential when none is named: the command line's user
        // asks for that provider's API (a graph file gets none it does not name).
        let credential = args.credential.clone().or_else(|| {
            (args.base_url.is_none() && matches!(args.provider.as_str(), "openai" | "anthropic"))
                .then(|| args.provider.clone())
        });
        if let Some(name) = &credential {
            map.insert("credential".to_owned(), json!(name));
        }
    }
    let mut doc = GraphDoc::new("agent");
    doc.settings.safe_mode = !args.yes;
    doc.nodes = vec![
        NodeDoc::new("goal", "data.constant")
            .with_config(json!({"type": "text", "value": args.goal})),
        NodeDoc::new("agent", "ai.agent").with_config(config),
        NodeDoc::new("answer", "graph.output").with_config(json!({"name": "answer"})),
        NodeDoc::new("artifacts", "graph.output").with_config(json!({"name": "artifacts"})),
    ];
    doc.edges = vec![
        EdgeDoc::new("goal", "value", "agent", "goal"),
        EdgeDoc::new("agent", "answer", "answer", "value"),
        EdgeDoc::new("agent", "artifacts", "artifacts", "value"),
    ];
    doc
}

pub fn agent_command(args: AgentArgs) -> anyhow::Result<i32> {
    // The command line's own graph: its user typed every part of it, so it is trusted.
    let source = GraphSource::of_doc(agent_graph(&args), None);
    let prepared = match Prepared::new(source, Trust::Trusted, &Credentials::Default, None) {
        Ok(prepared) => prepared,
        Err(problems) => {
            for p in &problems {
                eprintln!("{p}");
            }
            return Ok(EXIT_INVALID);
        }
    };
    let workspace = match &args.workspace {
        Some(given) => {
            let Some(workspace) = super::workspace_dir(Some(given.clone()))? else {
                return Ok(EXIT_INVALID);
            };
            // Said now rather than by every tool call the model makes.
            if let Err(refused) = agentloom_blocks::confined::refuse_broad_workspace(&workspace) {
                eprintln!("--workspace {}: {refused}", workspace.display());
                return Ok(EXIT_INVALID);
            }
            workspace
        }
        None => match fresh_workspace() {
            Ok(workspace) => {
                eprintln!(
                    "workspace: {} (--workspace DIR chooses another)",
                    workspace.display()
                );
                workspace
            }
            Err(err) => {
                eprintln!("{err:#}; choose a folder with --workspace DIR");
                return Ok(EXIT_INVALID);
            }
        },
    };
    let steps = Arc::new(StepPrinter {
        print: !args.json,
        steps: std::sync::Mutex::new(Vec::new()),
    });
    let log = match runner::open_run_log(args.db.clone()) {
        Ok(store) => Some(Log::new(store)),
        Err(err) => {
            eprintln!("warning: this run will not be logged: {err:#}");
            None
        }
    };
    // Safe mode asks on the terminal. Without one, the run pauses, stored in the run log
    // (exit 3), until `agentloom approve` or `agentloom reject` resumes it.
    let ask = (!args.yes && std::io::stdin().is_terminal())
        .then(|| Arc::new(TerminalApprover::new(None)) as Arc<dyn Approver>);
    let runtime = super::async_runtime()?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let launch = Launch {
        options: RunOptions {
            cancel: cancel.clone(),
            ..RunOptions::default()
        },
        log,
        sinks: vec![steps.clone()],
        ask,
        ..Launch::new(ValueMap::new(), Workspace::Folder(workspace.clone()))
    };
    super::interrupt::watch(cancel.clone());
    let launched = runtime.block_on(prepared.launch(launch));
    if let Some(err) = &launched.log_error {
        eprintln!("warning: {err}");
    }
    let report = launched.report;
    let answer = report.outputs.get("answer").map(Value::to_text);
    let steps = steps.steps.lock().map(|s| s.clone()).unwrap_or_default();
    if args.json {
        let object = json!({
            "run_id": report.run_id,
            "workspace": workspace,
            "status": report.status.as_str(),
            "answer": answer,
            "error": report.error,
            "steps": steps,
            "usage": report.usage,
        });
        println!("{object}");
    } else {
        if let Some(answer) = &answer {
            println!("{answer}");
        }
        let outcome = match report.status {
            RunStatus::Completed => "finished".to_owned(),
            other => format!(
                "{}: {}",
                other.as_str(),
                report.error.clone().unwrap_or_default()
            ),
        };
        eprintln!(
            "run {} {outcome} after {} steps; {} tokens in, {} out, ${:.4}",
            report.run_id,
            steps.len(),
            report.usage.input_tokens,
            report.usage.output_tokens,
            report.usage.cost_usd
        );
    }
    Ok(match report.status {
        RunStatus::Completed => 0,
        RunStatus::Waiting => {
            eprintln!(
                "waiting for approval: agentloom approve {} (or agentloom reject {})",
                report.run_id, report.run_id
            );
            EXIT_WAITING
        }
        _ => EXIT_FAILED,
    })
}

/// A new folder of its own for an agent run started without `--workspace`:
/// `agent-workspaces/DATE-TIME-N` under the data directory, readable by its user only.
fn fresh_workspace() -> anyhow::Result<PathBuf> {
    use anyhow::Context as _;
    let parent = runner::data_dir()
        .context("there is no data directory for a fresh workspace (no home folder)")?
        .join("agent-workspaces");
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    // Only Unix sets a mode; elsewhere the folder inherits its parent's permissions.
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(&parent)
        .with_context(|| format!("cannot make {}", parent.display()))?;
    for n in 1..1000 {
        let folder = parent.join(format!("{stamp}-{n}"));
        match builder.create(&folder) {
            Ok(()) => return Ok(folder),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("cannot make {}", folder.display()));
            }
        }
    }
    anyhow::bail!("cannot make a fresh folder in {}", parent.display())
}

/// Prints each agent step as it arrives (the agent streams one JSON line per step on its
/// `transcript` port) and keeps them for the summary.
struct StepPrinter {
    print: bool,
    steps: std::sync::Mutex<Vec<Step>>,
}

impl EventSink for StepPrinter {
    fn emit(&self, event: &RunEvent) {
        let EventKind::NodePartial { port, chunk, .. } = &event.kind else {
            return;
        };
        if port != "transcript" {
            return;
        }
        for line in chunk.lines().filter(|l| !l.trim().is_empty()) {
            // A step under way is printed once its result comes.
            let Some(step) = Step::parse_line(line).filter(|step| !step.running) else {
                continue;
            };
            if self.print {
                eprintln!("{}", step.describe());
            }
            if let Ok(mut steps) = self.steps.lock() {
                steps.push(step);
            }
        }
    }
}

/// Gives each node of a shown run that streamed agent steps (JSON lines on its
/// `transcript` port) a `steps` list, parsed from the run log.
pub fn add_steps(run: &mut serde_json::Value) {
    let Some(nodes) = run
        .get_mut("nodes")
        .and_then(serde_json::Value::as_array_mut)
    else {
        return;
    };
    for node in nodes {
        let Some(lines) = node
            .pointer("/partial/transcript")
            .and_then(serde_json::Value::as_str)
        else {
            continue;
        };
        let steps = serde_json::to_value(Step::trace(lines)).unwrap_or_default();
        if let Some(object) = node.as_object_mut() {
            object.insert("steps".to_owned(), steps);
        }
    }
}
