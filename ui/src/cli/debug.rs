//! Debugging at the terminal: `agentloom run GRAPH --break NODE[:after]` stops at a node and
//! asks (Enter continues, `s` steps, `q` stops, a path reads edited values from a JSON
//! file); with nobody at the terminal the run pauses, stored in the run log (exit 3), and
//! `agentloom continue RUN_ID` goes on from there.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

use agentloom_core::{Escaped, Value, ValueMap};
use agentloom_engine::{
    BreakAt, Breakpoint, BreakpointDecision, BreakpointHandler, BreakpointHit, RunDebug, RunStatus,
};

use super::progress::ProgressSink;
use super::{EXIT_INVALID, Execution, execute, prepare_recorded_run, recorded_run_workspace};
use crate::runner::debug::{continuation, edits_of, pick_pause};
use crate::runner::open_run_log;
use crate::runner::resume::claim_refusal;

/// The breakpoints of `--break NODE[:after]` (each checked against the graph's node paths
/// where it names a node of the graph itself).
pub(super) fn parse_breakpoints(
    raw: &[String],
    graph: &agentloom_core::ValidGraph,
) -> Result<Vec<Breakpoint>, String> {
    raw.iter()
        .map(|text| {
            let breakpoint = Breakpoint::parse(text).map_err(|e| format!("--break: {e}"))?;
            let top = breakpoint.node.split('/').next().unwrap_or_default();
            if graph.index_of(top).is_none() {
                return Err(format!(
                    "--break {}: the graph has no node `{top}`",
                    Escaped(text)
                ));
            }
            Ok(breakpoint)
        })
        .collect()
}

/// Asks at the terminal at each breakpoint; hides the progress spinner while asking.
pub(super) struct TerminalBreakpoints {
    pub(super) progress: Option<Arc<ProgressSink>>,
}

#[agentloom_core::async_trait]
impl BreakpointHandler for TerminalBreakpoints {
    async fn at_breakpoint(
        &self,
        _run_id: &str,
        hit: &BreakpointHit,
    ) -> Option<BreakpointDecision> {
        let hit = hit.clone();
        let progress = self.progress.clone();
        let asked = tokio::task::spawn_blocking(move || {
            let ask_here = || ask(&hit, &mut std::io::stdin().lock(), &mut std::io::stderr());
            match progress {
                Some(progress) => progress.suspend(ask_here),
                None => ask_here(),
            }
        })
        .await;
        match asked {
            Ok(Ok(decision)) => decision,
            // Nobody can answer here any more: the run pauses, to be continued later.
            _ => None,
        }
    }
}

/// Shows `hit` and reads what to do from `input`, one line at a time: an empty line
/// continues, `s` steps, `q` stops, any other text is a JSON file of edited values (an
/// object by port), read and checked, then asked again. End of input pauses the run.
pub(crate) fn ask(
    hit: &BreakpointHit,
    input: &mut impl BufRead,
    out: &mut impl Write,
) -> std::io::Result<Option<BreakpointDecision>> {
    show_hit(hit, out)?;
    let mut edits = ValueMap::new();
    loop {
        write!(
            out,
            "[Enter] continue, [s] step, [q] stop, or a JSON file of edited values: "
        )?;
        out.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        match line.trim() {
            "" => return Ok(Some(BreakpointDecision::Continue { values: edits })),
            "s" => return Ok(Some(BreakpointDecision::Step { values: edits })),
            "q" => return Ok(Some(BreakpointDecision::Stop)),
            path => match read_edits(hit, &PathBuf::from(path)) {
                Ok(read) => {
                    edits = read;
                    writeln!(out, "edited values read from {}", Escaped(path))?;
                }
                Err(message) => writeln!(out, "{}", Escaped(&message))?,
            },
        }
    }
}

/// Prints where the run stopped and the values, as JSON by port.
fn show_hit(hit: &BreakpointHit, out: &mut impl Write) -> std::io::Result<()> {
    let what = match hit.at {
        BreakAt::Before => "before it runs; its inputs",
        BreakAt::After => "after it ran; its outputs",
    };
    let why = if hit.stepping { " (step)" } else { "" };
    writeln!(out, "⏸ {}{why}: {what}:", Escaped(&hit.node))?;
    let json = Value::object(hit.values.clone()).to_json();
    let text = serde_json::to_string_pretty(&json).unwrap_or_default();
    writeln!(out, "{}", Escaped(&text))
}

/// The edited values in the JSON file at `path` (an object by port), checked against the
/// node's ports.
fn read_edits(hit: &BreakpointHit, path: &PathBuf) -> Result<ValueMap, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let serde_json::Value::Object(map) = json else {
        return Err(format!(
            "{}: expected a JSON object of values by port",
            path.display()
        ));
    };
    let values: ValueMap = map
        .into_iter()
        .map(|(port, value)| (port, Value::from_json(value)))
        .collect();
    hit.edited(&values)
        .map(|_| values)
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[derive(Debug, clap::Args)]
pub struct ContinueArgs {
    /// The run paused at a breakpoint (a unique prefix of its id is enough).
    pub run_id: String,
    /// The paused node's path, when the run is paused at several.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Change a value before going on, `NODE.PORT=JSON` (repeatable): an input of a node
    /// paused before it runs, an output of one paused after.
    #[arg(long = "set", value_name = "NODE.PORT=JSON")]
    pub set: Vec<String>,
    /// Go on and pause again before the next node that starts.
    #[arg(long, conflicts_with = "stop")]
    pub step: bool,
    /// Stop the run instead (it ends cancelled).
    #[arg(long, conflicts_with = "set")]
    pub stop: bool,
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Where file blocks are confined (default: where the run started).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// `agentloom continue RUN_ID`: decides at the breakpoint a run is paused at and goes on
/// from the run log, under the same run id.
pub fn continue_command(args: ContinueArgs) -> anyhow::Result<i32> {
    let store = open_run_log(args.db.clone())?;
    let Some(detail) = store.get_run(&args.run_id)? else {
        eprintln!(
            "no run `{}` in {}; `agentloom runs` lists them",
            Escaped(&args.run_id),
            store.path().display()
        );
        return Ok(EXIT_INVALID);
    };
    let run_id = detail.run.id.clone();
    let pending = store.pending_breakpoints(&run_id)?;
    if pending.is_empty() || detail.run.status != RunStatus::Waiting {
        eprintln!(
            "run {run_id} is {}, not paused at a breakpoint",
            detail.run.status.as_str()
        );
        return Ok(EXIT_INVALID);
    }
    let pause = match pick_pause(&run_id, &pending, args.node.as_deref()) {
        Ok(pause) => pause.clone(),
        Err(message) => {
            eprintln!("{message}");
            return Ok(EXIT_INVALID);
        }
    };
    let decision = if args.stop {
        BreakpointDecision::Stop
    } else {
        let values = match edits_of(&pause.hit.node, &args.set)
            .and_then(|values| pause.hit.edited(&values).map(|_| values))
        {
            Ok(values) => values,
            Err(message) => {
                eprintln!("{}", Escaped(&message));
                return Ok(EXIT_INVALID);
            }
        };
        if args.step {
            BreakpointDecision::Step { values }
        } else {
            BreakpointDecision::Continue { values }
        }
    };
    let Some(prepared) = prepare_recorded_run(&store, &detail) else {
        return Ok(EXIT_INVALID);
    };
    // Refused before the decision is claimed: the run stays paused.
    let going_on = match continuation(&store, &run_id, prepared.graph(), &pause, decision.clone()) {
        Ok(going_on) => going_on,
        Err(message) => {
            eprintln!("run {run_id}: {}", Escaped(&message));
            return Ok(EXIT_INVALID);
        }
    };
    // One decision counts: a second `continue` finds it taken and changes nothing.
    let claim = store.claim_breakpoint(&run_id, &pause.hit.node, pause.hit.at, &decision)?;
    if let Some(refusal) = claim_refusal(&run_id, &pause.hit.node, &claim) {
        eprintln!("{refusal}");
        return Ok(EXIT_INVALID);
    }
    let recorded = match args.workspace {
        Some(_) => None,
        None => store.run_workspace(&run_id)?,
    };
    drop(store);
    let Some(workspace) = recorded_run_workspace(recorded, args.workspace, &run_id, "continue")?
    else {
        return Ok(EXIT_INVALID);
    };
    if !args.json {
        eprintln!(
            "going on from `{}` ({}); continuing run {run_id}",
            Escaped(&pause.hit.node),
            pause.hit.at.as_str()
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
            seed: Some(going_on.seed),
            replay: None,
            debug: Some(going_on.debug),
        },
    )
}

/// What `show` prints of a run paused at breakpoints: each pause with its values, and how
/// to go on.
pub(super) fn show_pauses(store: &agentloom_engine::RunStore, run_id: &str) -> anyhow::Result<()> {
    let pauses = store.pending_breakpoints(run_id)?;
    for pause in pauses.iter().filter(|p| p.decision.is_none()) {
        let values = Value::object(pause.hit.values.clone());
        println!(
            "paused at a breakpoint {} `{}`: {}",
            pause.hit.at.as_str(),
            Escaped(&pause.hit.node),
            Escaped(&values.preview(400))
        );
    }
    if !pauses.is_empty() {
        println!(
            "go on with: agentloom continue {run_id} [--set NODE.PORT=JSON] [--step | --stop]"
        );
    }
    Ok(())
}

/// The run's debugging choices for `execute`: asked at the terminal when someone is there.
pub(super) fn with_terminal(
    debug: RunDebug,
    interactive: bool,
    progress: &Arc<ProgressSink>,
) -> Arc<RunDebug> {
    let debug = if interactive {
        debug.with_handler(Arc::new(TerminalBreakpoints {
            progress: Some(progress.clone()),
        }))
    } else {
        debug
    };
    Arc::new(debug)
}
