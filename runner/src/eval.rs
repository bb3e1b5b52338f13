//! An evaluation: a graph run against test cases, each a recorded run, checked; and the
//! recording a replay answers from. Shared by `agentloom eval` and the app's Evaluations panel.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use agentloom_core::{GraphDoc, Usage, Value, ValueMap, clip_chars, escape_control};
use agentloom_engine::eval::{self, CheckResult};
use agentloom_engine::{
    EvaluationRow, EvaluationRun, RecordedCall, Replay, ReplayMiss, RunOptions, RunStatus,
    RunStore, new_run_id,
};
use futures::StreamExt as _;
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::headless::GraphRunner;

/// What a replay does with a call it has no recording for (`--replay-miss`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayMissArg {
    /// Fail the node with "not recorded: …".
    #[default]
    Fail,
    /// Make the call.
    Live,
}

impl From<ReplayMissArg> for ReplayMiss {
    fn from(arg: ReplayMissArg) -> ReplayMiss {
        match arg {
            ReplayMissArg::Fail => ReplayMiss::Fail,
            ReplayMissArg::Live => ReplayMiss::Live,
        }
    }
}

/// The recording of run `run_id` (or an unambiguous prefix) in the run log at `db`.
pub fn load_replay(
    db: Option<PathBuf>,
    run_id: &str,
    miss: ReplayMissArg,
) -> Result<Arc<Replay>, String> {
    let store = super::open_run_log(db).map_err(|e| format!("{e:#}"))?;
    let id = store
        .resolve_run_id(run_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "no run `{run_id}` in {}; `agentloom runs` lists them",
                store.path().display()
            )
        })?;
    let calls = store.recorded_calls(&id).map_err(|e| e.to_string())?;
    Ok(Arc::new(Replay::new(calls, miss.into())))
}

/// One run of one case, checked.
#[derive(Clone, Debug, Serialize)]
struct CaseRun {
    run_id: String,
    /// 0 for the first run of the case (`--repeat`).
    repeat: u32,
    passed: bool,
    status: String,
    duration_ms: u64,
    usage: Usage,
    checks: Vec<CheckResult>,
    /// Replaying: how many calls the run (and its judges) made for real; its usage was
    /// only recorded when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    live_calls: Option<usize>,
}

impl CaseRun {
    /// Whether the run's usage was recorded earlier, not spent now: a replay that made no
    /// call for real.
    fn only_recorded(&self) -> bool {
        self.live_calls == Some(0)
    }
}

/// What to evaluate and how (the CLI's arguments, or the app's panel).
#[derive(Clone, Debug)]
pub struct EvalPlan {
    pub graph: PathBuf,
    pub cases_file: PathBuf,
    pub repeat: u32,
    pub concurrency: usize,
    pub baseline: Option<String>,
    pub replay: Option<String>,
    pub replay_miss: ReplayMissArg,
    pub workspace: PathBuf,
    pub trust: bool,
    /// Run the cases on the workers of this NATS server instead of here.
    pub nats: Option<String>,
}

/// One case run checked.
#[derive(Clone, Debug)]
pub struct EvalProgress {
    pub done: usize,
    pub total: usize,
    pub case: String,
    pub passed: bool,
}

/// Why an evaluation did not run: its input is wrong (exit 2), or the run log failed.
#[derive(Debug)]
pub enum EvalFailure {
    Invalid(String),
    Failed(String),
}

impl std::fmt::Display for EvalFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalFailure::Invalid(message) | EvalFailure::Failed(message) => f.write_str(message),
        }
    }
}

/// What an evaluation may do beyond its plan (`agentloom eval`'s flags).
#[derive(Clone, Copy, Debug, Default)]
pub struct EvalOptions {
    /// Compare with a baseline evaluation that was stopped before all its runs were made
    /// (refused otherwise: its cases not started would read as changes).
    pub allow_partial_baseline: bool,
}

/// Whether an evaluation's summary is of one stopped before all its runs were made; how
/// many of its runs were made and planned, and how many of its cases never started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped {
    pub runs: u64,
    pub planned: u64,
    pub not_started: u64,
}

/// The stop of evaluation `summary`, `None` when it ran to the end. A summary recorded
/// before `not_started` was kept counts its cases without a run instead.
pub fn stopped(summary: &serde_json::Value) -> Option<Stopped> {
    if summary["stopped"] != true {
        return None;
    }
    let cases = summary["cases"].as_array();
    let not_started = summary["not_started"].as_u64().unwrap_or_else(|| {
        cases.map_or(0, |cases| {
            cases
                .iter()
                .filter(|c| c["runs"].as_array().is_none_or(Vec::is_empty))
                .count()
                .try_into()
                .unwrap_or(u64::MAX)
        })
    });
    let runs = summary["runs"].as_u64().unwrap_or_default();
    let planned = summary["runs_planned"].as_u64().unwrap_or_else(|| {
        let repeat = summary["repeat"].as_u64().unwrap_or(1);
        cases.map_or(runs, |cases| {
            u64::try_from(cases.len())
                .unwrap_or(u64::MAX)
                .saturating_mul(repeat)
        })
    });
    Some(Stopped {
        runs,
        planned,
        not_started,
    })
}

/// Runs an evaluation: every case `plan.repeat` times, `plan.concurrency` at once, each a
/// recorded run linked to the evaluation, checked; `progress` hears of each run checked.
/// Returns the summary (`agentloom eval --json`), also kept in the run log.
pub fn run_evaluation(
    plan: &EvalPlan,
    store: Arc<RunStore>,
    progress: &(dyn Fn(EvalProgress) + Sync),
    cancel: CancellationToken,
) -> Result<serde_json::Value, EvalFailure> {
    run_evaluation_with(plan, EvalOptions::default(), store, progress, cancel)
}

/// [`run_evaluation`] with `options`.
pub fn run_evaluation_with(
    plan: &EvalPlan,
    options: EvalOptions,
    store: Arc<RunStore>,
    progress: &(dyn Fn(EvalProgress) + Sync),
    cancel: CancellationToken,
) -> Result<serde_json::Value, EvalFailure> {
    let runtime = super::async_runtime().map_err(|e| EvalFailure::Failed(e.to_string()))?;
    let summary = run_evaluation_on(runtime.handle(), plan, options, store, progress, cancel);
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    summary
}

/// [`run_evaluation_with`] with its runs on `runtime` (a front end's own runtime). It
/// waits for them, so call it from a thread that may block, not from one of `runtime`'s
/// workers (e.g. `spawn_blocking`).
pub fn run_evaluation_on(
    runtime: &tokio::runtime::Handle,
    plan: &EvalPlan,
    options: EvalOptions,
    store: Arc<RunStore>,
    progress: &(dyn Fn(EvalProgress) + Sync),
    cancel: CancellationToken,
) -> Result<serde_json::Value, EvalFailure> {
    let invalid = EvalFailure::Invalid;
    let failed = |e: &dyn std::fmt::Display| EvalFailure::Failed(e.to_string());
    // Read as bytes: the parser names the line of anything that is not UTF-8.
    let text = std::fs::read(&plan.cases_file).map_err(|err| {
        invalid(format!(
            "{}: cannot read the cases file: {err}",
            plan.cases_file.display()
        ))
    })?;
    let cases = eval::parse_cases(&plan.cases_file, &text).map_err(|e| invalid(e.to_string()))?;
    let graph_file = std::fs::canonicalize(&plan.graph).unwrap_or_else(|_| plan.graph.clone());
    let recordings = match &plan.replay {
        Some(id) => Some(
            Recordings::read(&store, id)
                .map_err(|message| invalid(format!("--replay {}: {message}", shown_id(id))))?,
        ),
        None => None,
    };
    // A replay lists the MCP tools it recorded: no server is started to list them.
    let catalog_replay = recordings
        .as_ref()
        .map(|r| Replay::new(r.any_calls(), plan.replay_miss.into()));
    let runner = GraphRunner::load_replaying(
        &plan.graph,
        Some(store.clone()),
        plan.trust,
        catalog_replay.as_ref(),
    )
    .map_err(|problems| invalid(problems.join("\n")))?;
    if let Some(note) = runner.safe_mode_note() {
        tracing::info!("{note}");
    }
    check_cases_fit(&plan.cases_file, &cases, &runner).map_err(|e| invalid(e.to_string()))?;
    let baseline = match &plan.baseline {
        Some(id) => Some(read_baseline(&store, id, &graph_file, &runner, options)?),
        None => None,
    };
    // Before the evaluation is recorded: a server that cannot be reached leaves no trace.
    let runner = match &plan.nats {
        Some(url) => {
            let queue = runtime
                .block_on(crate::remote::Nats::connect(url, "agentloom eval"))
                .map_err(|e| failed(&e))?;
            runner.with_queue(queue)
        }
        None => runner,
    };
    let judge = Judge {
        trust: runner.trust().clone(),
        store: store.clone(),
    };

    let eval_id = new_run_id();
    let mut row = evaluation_row(&eval_id, &runner, &graph_file, plan);
    store.begin_evaluation(&row).map_err(|e| failed(&e))?;
    let started = Instant::now();
    let case_runs = CaseRuns {
        plan,
        cases: &cases,
        recordings: recordings.as_ref(),
        runner: &runner,
        judge: &judge,
        store: &store,
        cancel: &cancel,
        eval_id: &eval_id,
        progress,
        total_runs: cases.len() * plan.repeat as usize,
        done: std::sync::atomic::AtomicUsize::new(0),
    };
    let jobs: Vec<(usize, u32)> = (0..cases.len())
        .flat_map(|case| (0..plan.repeat).map(move |repeat| (case, repeat)))
        .collect();
    let results: Vec<Option<(usize, u32, CaseRun, Usage)>> = runtime.block_on(
        futures::stream::iter(jobs)
            .map(|(index, repeat)| case_runs.run(index, repeat))
            .buffer_unordered(plan.concurrency.max(1))
            .collect(),
    );

    let results = results.into_iter().flatten().collect();
    let mut summary = summarize(
        &eval_id,
        &runner,
        &cases,
        results,
        started.elapsed(),
        cancel.is_cancelled(),
    );
    complete_summary(&mut summary, plan, case_runs.total_runs);
    record_totals(&mut row, &summary);
    if let Some((base_row, base_summary)) = &baseline {
        summary["baseline"] = compare(base_row, base_summary, &summary);
    }
    store
        .finish_evaluation(&row, &summary)
        .map_err(|e| failed(&e))?;
    Ok(summary)
}

/// The evaluation `--baseline ID` names, with its summary: refused unless it finished, is
/// of the same graph file, and ran to its end (or `options` allow a stopped one).
fn read_baseline(
    store: &RunStore,
    id: &str,
    graph_file: &Path,
    runner: &GraphRunner,
    options: EvalOptions,
) -> Result<(EvaluationRow, serde_json::Value), EvalFailure> {
    let invalid = EvalFailure::Invalid;
    let found = find_evaluation(store, id)
        .map_err(|reason| invalid(format!("--baseline {}: {reason}", shown_id(id))))?;
    let Some(agentloom_engine::EvaluationDetail {
        row,
        summary: Some(summary),
        ..
    }) = found
    else {
        return Err(invalid(format!(
            "--baseline {}: no finished evaluation with that id in {}; `agentloom evals` lists them",
            escape_control(id),
            store.path().display()
        )));
    };
    let this_file = graph_file.display().to_string();
    if row.graph_file != this_file || row.graph_name != runner.name() {
        return Err(invalid(format!(
            "--baseline {}: that evaluation is of graph `{}` ({}), not of `{}` ({}); a baseline is an earlier evaluation of the same graph file",
            escape_control(&row.id),
            escape_control(&row.graph_name),
            escape_control(&row.graph_file),
            escape_control(&runner.name()),
            escape_control(&this_file)
        )));
    }
    if let Some(stop) = stopped(&summary)
        && !options.allow_partial_baseline
    {
        return Err(invalid(format!(
            "--baseline {}: that evaluation was stopped after {}/{} runs ({} cases not started), so its cases not run would read as changes; `agentloom eval --allow-partial-baseline` compares with it anyway",
            escape_control(&row.id),
            stop.runs,
            stop.planned,
            stop.not_started
        )));
    }
    Ok((row, summary))
}

/// What every run of an evaluation's cases shares.
struct CaseRuns<'a> {
    plan: &'a EvalPlan,
    cases: &'a [eval::Case],
    recordings: Option<&'a Recordings>,
    runner: &'a GraphRunner,
    judge: &'a Judge,
    store: &'a Arc<RunStore>,
    cancel: &'a CancellationToken,
    eval_id: &'a str,
    progress: &'a (dyn Fn(EvalProgress) + Sync),
    total_runs: usize,
    /// Runs checked so far.
    done: std::sync::atomic::AtomicUsize,
}

impl CaseRuns<'_> {
    /// Runs case `index` once more (its run `repeat`), checks it, links it to the
    /// evaluation and tells `progress`; `None` when the evaluation was stopped first.
    async fn run(&self, index: usize, repeat: u32) -> Option<(usize, u32, CaseRun, Usage)> {
        let (plan, case) = (self.plan, &self.cases[index]);
        // A case the replayed evaluation did not have has nothing recorded.
        let recorded = self
            .recordings
            .map(|r| r.of(&case.name, repeat, plan.replay_miss));
        let replay = recorded.as_ref().map(|r| r.run.clone());
        let judge_calls = recorded.map(|r| r.judge);
        // Stopped: the runs not started yet are left out.
        if self.cancel.is_cancelled() {
            return None;
        }
        let finished = self
            .runner
            .run_replaying(
                case.inputs.clone(),
                &plan.workspace,
                self.cancel.child_token(),
                replay,
            )
            .await;
        let (mut run, judge_usage) = check_run(
            case,
            repeat,
            &finished,
            self.runner,
            self.judge,
            judge_calls.as_ref(),
        )
        .await;
        if self.recordings.is_some() {
            run.live_calls = Some(live_calls(self.store, &run.run_id));
        }
        let linked = EvaluationRun {
            case_name: case.name.clone(),
            repeat,
            run_id: run.run_id.clone(),
            passed: run.passed,
            checks: serde_json::to_value(&run.checks).unwrap_or_default(),
        };
        if let Err(err) = self.store.record_evaluation_run(self.eval_id, &linked) {
            tracing::warn!(%err, "the case's run is not linked to the evaluation");
        }
        let count = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let mut shown = if plan.repeat > 1 {
            format!("{} (run {})", case.name, repeat + 1)
        } else {
            case.name.clone()
        };
        if self.cancel.is_cancelled() && !run.passed && run.status == RunStatus::Cancelled.as_str()
        {
            shown.push_str(" (cut short by the stop)");
        }
        (self.progress)(EvalProgress {
            done: count,
            total: self.total_runs,
            case: shown,
            passed: run.passed,
        });
        Some((index, repeat, run, judge_usage))
    }
}

/// Adds to an evaluation's summary how it was run (repeats, concurrency, what it replayed,
/// the runs planned), and drops its stop when every run was made anyway.
fn complete_summary(summary: &mut serde_json::Value, plan: &EvalPlan, total_runs: usize) {
    summary["repeat"] = json!(plan.repeat);
    summary["concurrency"] = json!(plan.concurrency.max(1));
    if let Some(from) = &plan.replay {
        let live: usize = summary["cases"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|case| case["runs"].as_array().into_iter().flatten())
            .filter_map(|run| run["live_calls"].as_u64())
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .fold(0, usize::saturating_add);
        summary["replay"] = json!({
            "from": from,
            "miss": match plan.replay_miss {
                ReplayMissArg::Fail => "fail",
                ReplayMissArg::Live => "live",
            },
            "live_calls": live,
        });
    }
    summary["runs_planned"] = json!(total_runs);
    // Stopped once every run was made: nothing is missing, it is a finished evaluation.
    if summary["runs"].as_u64() == u64::try_from(total_runs).ok()
        && summary["cut_short"].as_u64() == Some(0)
        && let Some(object) = summary.as_object_mut()
    {
        for key in ["stopped", "not_started", "cut_short"] {
            object.remove(key);
        }
    }
}

/// The run-log row of evaluation `id` as it starts: what it evaluates, no totals yet.
fn evaluation_row(
    id: &str,
    runner: &GraphRunner,
    graph_file: &Path,
    plan: &EvalPlan,
) -> EvaluationRow {
    EvaluationRow {
        id: id.to_owned(),
        graph_name: runner.name(),
        graph_file: graph_file.display().to_string(),
        cases_file: std::fs::canonicalize(&plan.cases_file)
            .unwrap_or_else(|_| plan.cases_file.clone())
            .display()
            .to_string(),
        started_at_ms: now_ms(),
        duration_ms: None,
        passed: 0,
        failed: 0,
        pass_rate: None,
        cost_usd: 0.0,
        input_tokens: 0,
        output_tokens: 0,
    }
}

/// The evaluation's row takes its totals from its summary.
fn record_totals(row: &mut EvaluationRow, summary: &serde_json::Value) {
    row.duration_ms = summary["duration_ms"].as_u64();
    row.passed = summary["passed"].as_u64().unwrap_or_default();
    row.failed = summary["failed"].as_u64().unwrap_or_default();
    row.pass_rate = summary["pass_rate"].as_f64();
    row.cost_usd = summary["usage"]["cost_usd"].as_f64().unwrap_or_default();
    row.input_tokens = summary["usage"]["input_tokens"]
        .as_u64()
        .unwrap_or_default();
    row.output_tokens = summary["usage"]["output_tokens"]
        .as_u64()
        .unwrap_or_default();
}

/// How many candidates an ambiguous id names.
const CANDIDATES_SHOWN: usize = 6;

/// Evaluation `id` (or the one evaluation whose id starts with it) in the run log; `None`
/// when there is none. An empty id, or a prefix of several ids, is refused (the reason
/// names them).
pub fn find_evaluation(
    store: &RunStore,
    id: &str,
) -> Result<Option<agentloom_engine::EvaluationDetail>, String> {
    if id.trim().is_empty() {
        return Err("an empty id names no evaluation; `agentloom evals` lists them".to_owned());
    }
    let rows = store
        .list_evaluations(None, usize::MAX)
        .map_err(|e| e.to_string())?;
    let mut matching: Vec<&str> = rows
        .iter()
        .map(|row| row.id.as_str())
        .filter(|candidate| candidate.starts_with(id))
        .collect();
    if matching.len() > 1 && !matching.contains(&id) {
        matching.sort_unstable();
        let more = matching.len().saturating_sub(CANDIDATES_SHOWN);
        let mut named = matching
            .iter()
            .take(CANDIDATES_SHOWN)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if more > 0 {
            named.push_str(&format!(" and {more} more"));
        }
        return Err(format!(
            "several evaluations start with that id ({named}); give more of it"
        ));
    }
    let Some(&found) = matching.iter().find(|c| **c == id).or(matching.first()) else {
        return Ok(None);
    };
    store.evaluation(found).map_err(|e| e.to_string())
}

/// A case made from a recorded run (`agentloom eval add-case`, the app's "Add to cases").
#[derive(Clone, Debug)]
pub struct CaseFromRun<'a> {
    /// The run, by id or unambiguous prefix.
    pub run: &'a str,
    /// The JSON Lines cases file: made when missing, appended to otherwise.
    pub to: &'a Path,
    /// Expect the run's outputs as they are now (an equality check on each); otherwise the
    /// case checks that the run completes.
    pub expect_current: bool,
    /// The case's name (by default `run` and the start of the run's id).
    pub name: Option<&'a str>,
}

/// A case written by [`add_case_from_run`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedCase {
    pub name: String,
    /// Its line in the file, counted from 1.
    pub line: usize,
    /// The file did not exist before.
    pub created: bool,
}

/// Writes a case from run `request.run`'s inputs (as the run log holds them), with its
/// current outputs as what to expect when asked; refuses a name the file already has, a
/// cases file that cannot be read, and a run that did not complete as an expectation.
pub fn add_case_from_run(store: &RunStore, request: &CaseFromRun<'_>) -> Result<AddedCase, String> {
    let path = request.to;
    if request.run.trim().is_empty() {
        return Err("an empty run id names no run; `agentloom runs` lists them".to_owned());
    }
    if path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("csv"))
    {
        return Err(format!(
            "{}: cases are added as JSON Lines; give a .jsonl file",
            path.display()
        ));
    }
    let detail = store
        .get_run(request.run)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "no run `{}` in {}; `agentloom runs` lists them",
                escape_control(request.run),
                store.path().display()
            )
        })?;
    let run = &detail.run;
    let mut expect = serde_json::Map::new();
    if request.expect_current {
        if run.status != RunStatus::Completed {
            return Err(format!(
                "run {} {}: the outputs of a run that did not complete are no expectation (leave out --expect-current to check that it completes)",
                run.id,
                run.status.as_str()
            ));
        }
        for (output, value) in &detail.outputs {
            // A bare object names checks: an object to equal is written {"equals": …}.
            let check = match value.to_json() {
                object @ serde_json::Value::Object(_) => json!({ "equals": object }),
                plain => plain,
            };
            expect.insert(output.clone(), check);
        }
    }
    if expect.is_empty() {
        expect.insert("run".to_owned(), json!("completes"));
    }
    let name = match request.name {
        Some(name) if name.trim().is_empty() => {
            return Err("--name: a case needs a name that is not empty".to_owned());
        }
        Some(name) => name.to_owned(),
        None => format!("run {}", run.id.get(..12).unwrap_or(&run.id)),
    };
    let existing = match std::fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => {
            return Err(format!(
                "{}: cannot read the cases file: {err}",
                path.display()
            ));
        }
    };
    let text_of = |bytes: &[u8]| -> String {
        String::from_utf8_lossy(bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)).into_owned()
    };
    let mut lines = 0;
    if let Some(bytes) = &existing
        && !text_of(bytes).trim().is_empty()
    {
        let cases = eval::parse_cases(path, bytes)
            .map_err(|e| format!("{e} (fix the cases file before adding to it)"))?;
        if let Some(same) = cases.iter().find(|case| case.name == name) {
            return Err(format!(
                "{}:{}: there is a case named {:?} already; give another with --name",
                path.display(),
                same.line,
                escape_control(&name)
            ));
        }
        lines = text_of(bytes).lines().count();
    }
    let inputs: serde_json::Map<String, serde_json::Value> = detail
        .inputs
        .iter()
        .map(|(name, value)| (name.clone(), value.to_json()))
        .collect();
    // In the order a person reads a case: name, inputs, expect.
    let case = format!(
        "{{\"name\":{},\"inputs\":{},\"expect\":{}}}",
        json!(name),
        serde_json::Value::Object(inputs),
        serde_json::Value::Object(expect)
    );
    let mut line = String::new();
    if existing
        .as_ref()
        .is_some_and(|bytes| !bytes.is_empty() && !bytes.ends_with(b"\n"))
    {
        line.push('\n');
    }
    line.push_str(&case);
    line.push('\n');
    let write = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, line.as_bytes()));
    write.map_err(|err| format!("{}: cannot write the cases file: {err}", path.display()))?;
    Ok(AddedCase {
        name,
        line: lines + 1,
        created: existing.is_none(),
    })
}

/// An id as a message shows it: escaped, and `''` when empty.
fn shown_id(id: &str) -> String {
    if id.is_empty() {
        "''".to_owned()
    } else {
        escape_control(id).into_owned()
    }
}

/// Fails when a case names an input the graph does not have, gives a value it refuses,
/// leaves out a required input, or checks an output the graph does not produce.
fn check_cases_fit(
    file: &Path,
    cases: &[eval::Case],
    runner: &GraphRunner,
) -> Result<(), eval::CasesError> {
    let outputs = runner.graph().interface_outputs();
    let error = |line: usize, field: String, message: String| eval::CasesError {
        file: file.display().to_string(),
        line,
        field,
        message,
    };
    for case in cases {
        if let Err(message) = runner.check_inputs(&case.inputs) {
            return Err(error(case.line, "inputs".to_owned(), message));
        }
        for (output, _) in &case.expect {
            if !outputs.contains(output) {
                return Err(error(
                    case.line,
                    format!("expect.{output}"),
                    if outputs.is_empty() {
                        "the graph has no outputs (graph.output nodes)".to_owned()
                    } else {
                        format!(
                            "the graph has no output `{output}`; its outputs are {}",
                            outputs.join(", ")
                        )
                    },
                ));
            }
        }
    }
    Ok(())
}

/// What an evaluation replays (`--replay ID`): the runs of an earlier evaluation, each
/// answering the same case and repeat, or one run answering every case.
enum Recordings {
    Evaluation(HashMap<(String, u32), Vec<RecordedCall>>),
    Run(Vec<RecordedCall>),
}

/// The replays of one case run: its graph's calls, and its judges'.
struct CaseReplay {
    run: Arc<Replay>,
    judge: JudgeReplays,
}

/// The recorded calls of a case run's judges, by the output judged.
struct JudgeReplays {
    calls: HashMap<String, Vec<RecordedCall>>,
    miss: ReplayMissArg,
}

impl JudgeReplays {
    /// The replay of the judge of `output` (nothing recorded: its calls miss).
    fn of(&self, output: &str) -> Arc<Replay> {
        let calls = self.calls.get(output).cloned().unwrap_or_default();
        Arc::new(Replay::new(calls, self.miss.into()))
    }
}

impl Recordings {
    /// The recordings of evaluation `id` (or else of run `id`, an unambiguous prefix).
    fn read(store: &RunStore, id: &str) -> Result<Recordings, String> {
        if let Some(evaluation) = find_evaluation(store, id)? {
            let mut runs = HashMap::new();
            for run in evaluation.runs {
                let calls = store
                    .recorded_calls(&run.run_id)
                    .map_err(|e| e.to_string())?;
                runs.insert((run.case_name, run.repeat), calls);
            }
            return Ok(Recordings::Evaluation(runs));
        }
        let run_id = store.resolve_run_id(id).map_err(|e| e.to_string())?;
        let Some(run_id) = run_id else {
            return Err(format!(
                "no evaluation or run `{id}` in {}; `agentloom evals` and `agentloom runs` list them",
                store.path().display()
            ));
        };
        let calls = store.recorded_calls(&run_id).map_err(|e| e.to_string())?;
        Ok(Recordings::Run(calls))
    }

    /// Some recorded run's calls (its MCP tool lists answer for the whole evaluation).
    fn any_calls(&self) -> Vec<RecordedCall> {
        match self {
            Recordings::Evaluation(runs) => runs.values().next().cloned().unwrap_or_default(),
            Recordings::Run(calls) => calls.clone(),
        }
    }

    /// The replays of run `repeat` of case `case`.
    fn of(&self, case: &str, repeat: u32, miss: ReplayMissArg) -> CaseReplay {
        let calls = match self {
            Recordings::Evaluation(runs) => runs
                .get(&(case.to_owned(), repeat))
                .cloned()
                .unwrap_or_default(),
            Recordings::Run(calls) => calls.clone(),
        };
        let mut judge: HashMap<String, Vec<RecordedCall>> = HashMap::new();
        for call in &calls {
            if let Some((output, node)) = judged_call(&call.node) {
                let mut call = call.clone();
                call.node = node.to_owned();
                judge.entry(output.to_owned()).or_default().push(call);
            }
        }
        CaseReplay {
            run: Arc::new(Replay::new(calls, miss.into())),
            judge: JudgeReplays { calls: judge, miss },
        }
    }
}

/// Where the calls of the judge of `output` are kept among its case run's calls: under
/// `$.expect.OUTPUT.llm_judge/` (never a node id), then the judge graph's node.
fn judge_prefix(output: &str) -> String {
    format!("$.expect.{output}.llm_judge/")
}

/// The output judged and the judge's node, when `node` is a judge's call.
fn judged_call(node: &str) -> Option<(&str, &str)> {
    let rest = node.strip_prefix("$.expect.")?;
    let (output, node) = rest.split_once(".llm_judge/")?;
    Some((output, node))
}

/// Checks one finished run against its case; returns it and what judging it cost.
async fn check_run(
    case: &eval::Case,
    repeat: u32,
    finished: &super::headless::FinishedRun,
    runner: &GraphRunner,
    judge: &Judge,
    replay: Option<&JudgeReplays>,
) -> (CaseRun, Usage) {
    let report = &finished.report;
    let mut checks = Vec::new();
    let mut judge_usage = Usage::default();
    for (output, check) in &case.expect {
        let value = report.outputs.get(output);
        let result = match (check, value) {
            (eval::Check::LlmJudge(spec), Some(value)) => {
                let judging = Judging {
                    run_id: &report.run_id,
                    replay: replay.map(|judges| judges.of(output)),
                };
                let (result, usage) = judge.decide(output, spec, value, judging).await;
                judge_usage += usage;
                result
            }
            _ => check.evaluate(output, value),
        };
        checks.push(result);
    }
    let tool_nodes: Vec<String> = runner
        .graph()
        .doc
        .edges
        .iter()
        .filter(|edge| edge.from.1 == agentloom_core::TOOL_PORT)
        .map(|edge| edge.from.0.clone())
        .collect();
    let facts = eval::RunFacts {
        status: report.status.as_str().to_owned(),
        cost_usd: report.usage.cost_usd,
        duration_ms: report.duration_ms,
        tools_called: eval::tools_called(&finished.events, &tool_nodes),
    };
    checks.extend(case.run.evaluate(&facts));
    // A run that did not complete fails its case unless the case expects that status.
    if report.status != RunStatus::Completed && case.run.status.is_none() {
        checks.insert(
            0,
            CheckResult {
                output: "run".to_owned(),
                check: "status".to_owned(),
                passed: false,
                detail: format!(
                    "the run {}: {}",
                    report.status.as_str(),
                    report.error.as_deref().unwrap_or("no error recorded")
                ),
            },
        );
    }
    let passed = checks.iter().all(|c| c.passed);
    (
        CaseRun {
            run_id: report.run_id.clone(),
            repeat,
            passed,
            status: report.status.as_str().to_owned(),
            duration_ms: report.duration_ms,
            usage: report.usage,
            checks,
            live_calls: None,
        },
        judge_usage,
    )
}

/// The evaluation as one JSON object (the `--json` output, kept in the run log). Stopped,
/// it says so; a run the stop cancelled is shown (`cut_short`) but not counted, a case
/// with no run made to the end counts neither as passed nor as failed (`not_started`, its
/// `passed` null), and the pass rate is over the runs made.
fn summarize(
    eval_id: &str,
    runner: &GraphRunner,
    cases: &[eval::Case],
    mut results: Vec<(usize, u32, CaseRun, Usage)>,
    elapsed: std::time::Duration,
    stopped: bool,
) -> serde_json::Value {
    results.sort_by_key(|(case, repeat, ..)| (*case, *repeat));
    // Spent now, and (replaying) answered from a recording with nothing spent.
    let (mut usage, mut recorded) = (Usage::default(), Usage::default());
    let mut durations = Vec::new();
    let (mut runs_passed, mut runs_total) = (0usize, 0usize);
    let mut shown = Vec::new();
    let (mut passed, mut failed, mut not_started, mut cut_short) = (0u64, 0u64, 0u64, 0usize);
    for (index, case) in cases.iter().enumerate() {
        let runs: Vec<&CaseRun> = results
            .iter()
            .filter(|(i, ..)| *i == index)
            .map(|(_, _, run, _)| run)
            .collect();
        let (mut case_cost, mut case_recorded_cost) = (0.0, 0.0);
        for (_, _, run, judged) in results.iter().filter(|(i, ..)| *i == index) {
            let (total, cost) = if run.only_recorded() {
                (&mut recorded, &mut case_recorded_cost)
            } else {
                (&mut usage, &mut case_cost)
            };
            *total += run.usage;
            *total += *judged;
            *cost += run.usage.cost_usd;
            durations.push(run.duration_ms);
        }
        // A run the stop cancelled says nothing of the case: it is shown, not counted.
        let is_cut_short =
            |run: &CaseRun| stopped && !run.passed && run.status == RunStatus::Cancelled.as_str();
        let counted: Vec<&CaseRun> = runs.iter().copied().filter(|r| !is_cut_short(r)).collect();
        cut_short += runs.len() - counted.len();
        runs_total += counted.len();
        runs_passed += counted.iter().filter(|r| r.passed).count();
        let case_passed = !counted.is_empty() && counted.iter().all(|r| r.passed);
        let started = !(stopped && counted.is_empty());
        if !started {
            not_started += 1;
        } else if case_passed {
            passed += 1;
        } else {
            failed += 1;
        }
        let case_ms: u64 = runs.iter().map(|r| r.duration_ms).sum();
        let shown_runs: Vec<serde_json::Value> = runs
            .iter()
            .map(|run| {
                let mut shown = serde_json::to_value(run).unwrap_or_default();
                if is_cut_short(run) {
                    shown["cut_short"] = json!(true);
                }
                shown
            })
            .collect();
        let mut shown_case = json!({
            "name": case.name,
            "passed": if started { json!(case_passed) } else { serde_json::Value::Null },
            "cost_usd": case_cost,
            "duration_ms": case_ms,
            "runs": shown_runs,
        });
        if !started {
            shown_case["not_started"] = json!(true);
        }
        if runs.iter().any(|r| r.live_calls.is_some()) {
            shown_case["recorded_cost_usd"] = json!(case_recorded_cost);
        }
        shown.push(shown_case);
    }
    #[allow(clippy::cast_precision_loss, reason = "counts of runs")]
    let pass_rate = if runs_total == 0 {
        0.0
    } else {
        runs_passed as f64 / runs_total as f64
    };
    let (low, high) = eval::wilson_interval(runs_passed, runs_total);
    let mut summary = json!({
        "eval_id": eval_id,
        "graph": runner.path().display().to_string(),
        "graph_name": runner.name(),
        "cases": shown,
        "passed": passed,
        "failed": failed,
        "pass_rate": pass_rate,
        "pass_rate_interval": [low, high],
        "runs": runs_total,
        "usage": usage,
        "duration_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        "p50_ms": eval::percentile(&durations, 50.0),
        "p95_ms": eval::percentile(&durations, 95.0),
    });
    if stopped {
        summary["stopped"] = json!(true);
        summary["not_started"] = json!(not_started);
        summary["cut_short"] = json!(cut_short);
    }
    if results
        .iter()
        .any(|(_, _, run, _)| run.live_calls.is_some())
    {
        summary["recorded_usage"] = json!(recorded);
    }
    summary
}

/// The calls run `run_id` (and its judges) made for real, as its recording in the run log
/// holds them: a replayed answer is not recorded again, an MCP server's tool list is.
fn live_calls(store: &RunStore, run_id: &str) -> usize {
    match store.recorded_calls(run_id) {
        Ok(calls) => calls
            .iter()
            .filter(|call| !call.node.starts_with("$.mcp_servers."))
            .count(),
        Err(err) => {
            tracing::warn!(%err, "the replayed run's calls cannot be read");
            // Unknown: its usage counts as spent.
            usize::MAX
        }
    }
}

/// What changed since `base`: cases that now fail and now pass, and the deltas.
fn compare(
    base_row: &EvaluationRow,
    base: &serde_json::Value,
    now: &serde_json::Value,
) -> serde_json::Value {
    let outcome = |summary: &serde_json::Value| -> HashMap<String, bool> {
        summary["cases"]
            .as_array()
            .map(|cases| {
                cases
                    .iter()
                    .filter_map(|c| Some((c["name"].as_str()?.to_owned(), c["passed"].as_bool()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (before, after) = (outcome(base), outcome(now));
    let mut now_failing: Vec<&String> = after
        .iter()
        .filter(|(name, passed)| !**passed && before.get(*name) == Some(&true))
        .map(|(name, _)| name)
        .collect();
    let mut now_passing: Vec<&String> = after
        .iter()
        .filter(|(name, passed)| **passed && before.get(*name) == Some(&false))
        .map(|(name, _)| name)
        .collect();
    now_failing.sort();
    now_passing.sort();
    let number = |summary: &serde_json::Value, pointer: &str| {
        summary
            .pointer(pointer)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_default()
    };
    json!({
        "eval_id": base_row.id,
        "now_failing": now_failing,
        "now_passing": now_passing,
        "pass_rate_delta": number(now, "/pass_rate") - number(base, "/pass_rate"),
        "cost_usd_delta": number(now, "/usage/cost_usd") - number(base, "/usage/cost_usd"),
        "duration_ms_delta": number(now, "/duration_ms") - number(base, "/duration_ms"),
        "p50_ms_delta": number(now, "/p50_ms") - number(base, "/p50_ms"),
    })
}

/// Asks a model whether an output meets a case's criteria (`llm_judge`): a one-node
/// `llm.chat` graph run like any other. Its calls are kept with the case's run (under
/// [`judge_prefix`]), so that `eval --replay` answers the judge from them too.
struct Judge {
    /// The graph's trust: an untrusted graph's judge gets no credential either.
    trust: crate::Trust,
    store: Arc<RunStore>,
}

/// The case run a judge decides on, and the recording that answers the judge's calls.
struct Judging<'a> {
    run_id: &'a str,
    replay: Option<Arc<Replay>>,
}

/// Keeps the calls of a judge's run.
#[derive(Default)]
struct JudgeCalls(std::sync::Mutex<Vec<RecordedCall>>);

impl agentloom_engine::EventSink for JudgeCalls {
    fn emit(&self, _event: &agentloom_engine::RunEvent) {}

    fn record_call(&self, call: &RecordedCall) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(call.clone());
    }
}

impl Judge {
    async fn decide(
        &self,
        output: &str,
        spec: &eval::JudgeSpec,
        value: &Value,
        judging: Judging<'_>,
    ) -> (CheckResult, Usage) {
        let result = |passed: bool, detail: String| CheckResult {
            output: output.to_owned(),
            check: "llm_judge".to_owned(),
            passed,
            detail,
        };
        let mut config = serde_json::Map::new();
        config.insert("prompt".to_owned(), json!("{{ request }}"));
        config.insert("stream".to_owned(), json!(false));
        for (key, given) in [
            ("provider", &spec.provider),
            ("model", &spec.model),
            ("credential", &spec.credential),
            ("base_url", &spec.base_url),
        ] {
            if let Some(given) = given {
                config.insert(key.to_owned(), json!(given));
            }
        }
        let doc = json!({
            "format": "agentloom.graph", "version": 1, "name": "judge",
            "nodes": [
                {"id": "request", "block": "graph.input", "config": {"name": "request", "type": "text"}},
                {"id": "judge", "block": "llm.chat", "config": config},
                {"id": "verdict", "block": "graph.output", "config": {"name": "verdict"}}
            ],
            "edges": [
                {"from": ["request", "value"], "to": ["judge", "request"]},
                {"from": ["judge", "text"], "to": ["verdict", "value"]}
            ]
        });
        let prepared = GraphDoc::from_json_str(&doc.to_string())
            .map_err(|e| e.to_string())
            .and_then(|doc| {
                let source = crate::GraphSource::of_doc(doc, None);
                crate::Prepared::new(
                    source,
                    self.trust.clone(),
                    &crate::Credentials::Default,
                    None,
                )
                .map_err(|problems| problems.join("; "))
            });
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(problem) => {
                return (
                    result(false, format!("the judge is not usable: {problem}")),
                    Usage::default(),
                );
            }
        };
        let request = format!(
            "You judge the output of an AI workflow.\nCriteria: {}\nOutput:\n{}\n\nAnswer with one JSON object and nothing else: {{\"pass\": true or false, \"reason\": \"one sentence\"}}",
            spec.criteria,
            value.to_text()
        );
        let calls = Arc::new(JudgeCalls::default());
        let launch = crate::Launch {
            options: RunOptions {
                replay: judging.replay,
                ..RunOptions::default()
            },
            sinks: vec![calls.clone()],
            ..crate::Launch::new(
                ValueMap::from([("request".to_owned(), Value::text(request))]),
                crate::Workspace::Shared(std::env::temp_dir()),
            )
        };
        let report = prepared.launch(launch).await.report;
        let mut calls = std::mem::take(
            &mut *calls
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for call in &mut calls {
            call.node = format!("{}{}", judge_prefix(output), call.node);
        }
        if let Err(err) = self.store.add_calls(judging.run_id, &calls) {
            tracing::warn!(%err, "the judge's calls are not kept for a replay");
        }
        if report.status != RunStatus::Completed {
            return (
                result(
                    false,
                    format!(
                        "the judge failed: {}",
                        report.error.as_deref().unwrap_or("no error recorded")
                    ),
                ),
                report.usage,
            );
        }
        let answer = report
            .outputs
            .get("verdict")
            .map(Value::to_text)
            .unwrap_or_default();
        let (passed, reason) = read_verdict(&answer);
        (
            result(
                passed,
                format!(
                    "verdict: {}; {reason}",
                    if passed { "pass" } else { "fail" }
                ),
            ),
            report.usage,
        )
    }
}

/// A judge's answer: `{"pass": bool, "reason": …}` anywhere in the text (or `"verdict":
/// "pass"|"fail"`), else a text that starts with PASS or FAIL.
fn read_verdict(answer: &str) -> (bool, String) {
    if let (Some(start), Some(end)) = (answer.find('{'), answer.rfind('}'))
        && start < end
        && let Ok(object) = serde_json::from_str::<serde_json::Value>(&answer[start..=end])
    {
        let passed = object["pass"].as_bool().or_else(|| {
            object["verdict"]
                .as_str()
                .map(|v| v.eq_ignore_ascii_case("pass"))
        });
        if let Some(passed) = passed {
            let reason = object["reason"].as_str().unwrap_or_default().to_owned();
            return (passed, reason);
        }
    }
    let upper = answer.trim_start().to_ascii_uppercase();
    if upper.starts_with("PASS") {
        return (true, answer.trim().to_owned());
    }
    (
        false,
        format!(
            "the judge's answer is not a verdict: {}",
            clip_chars(answer, 200)
        ),
    )
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One check of a summary's run as a person reads it: `OUTPUT CHECK: DETAIL` (the table's
/// first failure, each failure in a JUnit report).
pub fn check_line(check: &serde_json::Value) -> String {
    format!(
        "{} {}: {}",
        check["output"].as_str().unwrap_or_default(),
        check["check"].as_str().unwrap_or_default(),
        check["detail"].as_str().unwrap_or_default()
    )
}
