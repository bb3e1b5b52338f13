//! `agentloom eval` and `agentloom evals`: a graph run against test cases, and replays.

use std::path::PathBuf;

use agentloom_core::Escaped;
use tokio_util::sync::CancellationToken;

use super::{EXIT_FAILED, EXIT_INVALID};
use crate::runner::eval::{
    EvalFailure, EvalOptions, EvalPlan, EvalProgress, ReplayMissArg, run_evaluation_with,
};

/// `agentloom eval` arguments.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub action: Option<EvalAction>,
    #[arg(required = true)]
    pub graph: Option<PathBuf>,
    /// The cases: JSON Lines (`{"name", "inputs", "expect"}` a line) or CSV (input columns
    /// and `expect.OUTPUT` columns).
    #[arg(long, value_name = "FILE", required = true)]
    pub cases: Option<PathBuf>,
    /// Run each case N times; the pass rate then carries a 95% (Wilson) interval.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    /// How many case runs go at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub concurrency: usize,
    /// Print exactly one JSON object with the result on stdout.
    #[arg(long)]
    pub json: bool,
    /// Compare with an earlier evaluation of the same graph.
    #[arg(long, value_name = "EVAL_ID")]
    pub baseline: Option<String>,
    /// Compare with a baseline that was stopped before all its runs were made (refused
    /// otherwise: the cases it never started would read as changes).
    #[arg(long, requires = "baseline")]
    pub allow_partial_baseline: bool,
    /// Also write the result as JUnit XML to FILE (for CI test reports); `--json` stays
    /// the machine format.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Exit 1 when the pass rate (over runs) is below R.
    #[arg(long, default_value_t = 1.0, value_name = "R")]
    pub min_pass_rate: f64,
    /// Answer every case's outbound calls from what the same case recorded in evaluation
    /// EVAL_ID, with no network.
    #[arg(long, value_name = "EVAL_ID")]
    pub replay: Option<String>,
    /// What a replay does with a call that was not recorded: fail its node, or make it.
    #[arg(long, value_enum, default_value_t = ReplayMissArg::Fail, requires = "replay")]
    pub replay_miss: ReplayMissArg,
    /// The run log database (default: the per-user data directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// The directory file blocks may read and write (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Trust the graph file for this evaluation without asking (see `agentloom trust`).
    #[arg(long)]
    pub trust: bool,
    /// Spread the cases over the workers of this NATS JetStream server (`agentloom worker`)
    /// instead of running them here; the checks and the evaluation stay here.
    #[arg(long, value_name = "URL", conflicts_with = "replay")]
    pub nats: Option<String>,
}

/// What `agentloom eval` does besides evaluating a graph.
#[derive(Debug, clap::Subcommand)]
pub enum EvalAction {
    /// Write a case from a past run's inputs (as the run log holds them) to a cases file.
    AddCase(AddCaseArgs),
}

/// `agentloom eval add-case` arguments.
#[derive(Debug, clap::Args)]
pub struct AddCaseArgs {
    /// The run, by id or unambiguous prefix (`agentloom runs` lists them).
    pub run_id: String,
    /// The JSON Lines cases file: made when missing, appended to otherwise.
    #[arg(long, value_name = "FILE")]
    pub to: PathBuf,
    /// Expect the run's outputs as they are now (an equality check on each); without it
    /// the case checks that the run completes.
    #[arg(long)]
    pub expect_current: bool,
    /// The case's name (by default `run` and the start of the run's id); a name the file
    /// already has is refused.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The run log database (default: the per-user data directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
}

/// `agentloom eval add-case`: exit 0 with the case written, 2 when the run, the name or
/// the file is refused.
fn add_case_command(args: AddCaseArgs) -> anyhow::Result<i32> {
    let store = crate::runner::open_run_log(args.db)?;
    let request = crate::runner::eval::CaseFromRun {
        run: &args.run_id,
        to: &args.to,
        expect_current: args.expect_current,
        name: args.name.as_deref(),
    };
    match crate::runner::eval::add_case_from_run(&store, &request) {
        Ok(added) => {
            eprintln!(
                "{} case {:?} to {} (line {})",
                if added.created { "wrote" } else { "added" },
                Escaped(&added.name).to_string(),
                args.to.display(),
                added.line
            );
            Ok(0)
        }
        Err(message) => {
            eprintln!("{}", Escaped(&message));
            Ok(EXIT_INVALID)
        }
    }
}

/// `agentloom eval`: runs every case (`--repeat` times), checks it, records the evaluation
/// and prints it; exit 0 when the pass rate reaches `--min-pass-rate`, 1 when not, 2 when
/// the cases file or the arguments are wrong.
pub(crate) fn eval_command(args: EvalArgs) -> anyhow::Result<i32> {
    let (graph, cases) = match (args.action, args.graph.clone(), args.cases.clone()) {
        (Some(EvalAction::AddCase(add)), ..) => return add_case_command(add),
        (None, Some(graph), Some(cases)) => (graph, cases),
        _ => {
            eprintln!(
                "agentloom eval GRAPH --cases FILE (or agentloom eval add-case RUN_ID --to FILE)"
            );
            return Ok(EXIT_INVALID);
        }
    };
    if args.repeat == 0 || args.concurrency == 0 {
        eprintln!("--repeat and --concurrency must be at least 1");
        return Ok(EXIT_INVALID);
    }
    if !(0.0..=1.0).contains(&args.min_pass_rate) {
        eprintln!("--min-pass-rate must be between 0 and 1, e.g. 0.9");
        return Ok(EXIT_INVALID);
    }
    let Some(workspace) = super::workspace_dir(args.workspace.clone())? else {
        return Ok(EXIT_INVALID);
    };
    // Found before anything runs: a report that could not be written.
    if let Some(junit) = &args.junit {
        let dir = junit.parent().filter(|dir| !dir.as_os_str().is_empty());
        if junit.file_name().is_none() || dir.is_some_and(|dir| !dir.is_dir()) {
            eprintln!(
                "--junit {}: not a file in an existing directory",
                Escaped(&junit.display().to_string())
            );
            return Ok(EXIT_INVALID);
        }
    }
    let store = crate::runner::open_run_log(args.db.clone())?;
    let plan = EvalPlan {
        graph,
        cases_file: cases,
        repeat: args.repeat,
        concurrency: args.concurrency,
        baseline: args.baseline.clone(),
        replay: args.replay.clone(),
        replay_miss: args.replay_miss,
        workspace,
        trust: args.trust,
        nats: args.nats.clone(),
    };
    let cancel = CancellationToken::new();
    super::interrupt::watch(cancel.clone());
    let progress = |p: EvalProgress| {
        eprintln!(
            "[{}/{}] {} {}",
            p.done,
            p.total,
            if p.passed { "✓" } else { "✗" },
            Escaped(&p.case),
        );
    };
    let options = EvalOptions {
        allow_partial_baseline: args.allow_partial_baseline,
    };
    let summary = match run_evaluation_with(&plan, options, store, &progress, cancel.clone()) {
        Ok(summary) => summary,
        Err(EvalFailure::Invalid(message)) => {
            eprintln!("{}", Escaped(&message));
            return Ok(EXIT_INVALID);
        }
        Err(EvalFailure::Failed(message)) => anyhow::bail!(message),
    };
    if let Some(junit) = &args.junit
        && let Err(err) = crate::runner::junit::write_junit(&summary, junit)
    {
        anyhow::bail!(
            "--junit {}: cannot write the report: {err}",
            Escaped(&junit.display().to_string())
        );
    }
    if args.json {
        out!("{}", serde_json::to_string(&summary)?);
    } else {
        print_table(&summary)?;
    }
    let pass_rate = summary["pass_rate"].as_f64().unwrap_or_default();
    Ok(
        if cancel.is_cancelled() || pass_rate + 1e-9 < args.min_pass_rate {
            EXIT_FAILED
        } else {
            0
        },
    )
}

/// The widest a case name is shown in the table (longer ones end with "…").
const NAME_COLUMNS: usize = 40;

/// `text` padded with spaces to `width` terminal columns (wide characters count two),
/// on the left when `right`; cut with "…" when wider.
fn pad(text: &str, width: usize, right: bool) -> String {
    use unicode_width::UnicodeWidthChar as _;
    let columns = |text: &str| -> usize { text.chars().map(|c| c.width().unwrap_or(0)).sum() };
    let mut shown = text.to_owned();
    if columns(&shown) > width {
        shown.clear();
        let mut used = 0;
        for c in text.chars() {
            let w = c.width().unwrap_or(0);
            if used + w + 1 > width {
                break;
            }
            used += w;
            shown.push(c);
        }
        shown.push('…');
    }
    let fill = " ".repeat(width.saturating_sub(columns(&shown)));
    if right { fill + &shown } else { shown + &fill }
}

/// The display width of `text` in a terminal.
fn columns_of(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
}

/// The table `agentloom eval` prints without `--json`: columns padded to their widest
/// cell as a terminal shows it. A replay's cost column is the cost recorded.
fn print_table(summary: &serde_json::Value) -> anyhow::Result<()> {
    let replay = summary.get("replay");
    let cost_key = if replay.is_some() {
        "recorded_cost_usd"
    } else {
        "cost_usd"
    };
    // Mark, case, checks, cost, time, first failure (or why it has no result).
    let mut rows: Vec<[String; 6]> = Vec::new();
    for case in summary["cases"].as_array().into_iter().flatten() {
        let name = Escaped(case["name"].as_str().unwrap_or_default()).to_string();
        if case["not_started"] == true {
            let cut_short = case["runs"].as_array().is_some_and(|runs| !runs.is_empty());
            let why = if cut_short {
                "cut short by the stop"
            } else {
                "not started"
            };
            let dash = || "-".to_owned();
            rows.push(["·".to_owned(), name, dash(), dash(), dash(), why.to_owned()]);
            continue;
        }
        let runs = case["runs"].as_array().cloned().unwrap_or_default();
        let checks: Vec<&serde_json::Value> = runs
            .iter()
            .flat_map(|r| r["checks"].as_array().into_iter().flatten())
            .collect();
        let ok = checks.iter().filter(|c| c["passed"] == true).count();
        let failure = checks
            .iter()
            .find(|c| c["passed"] == false)
            .map(|c| crate::runner::eval::check_line(c))
            .unwrap_or_default();
        rows.push([
            if case["passed"] == true { "✓" } else { "✗" }.to_owned(),
            name,
            format!("{ok}/{}", checks.len()),
            format!("${:.4}", case[cost_key].as_f64().unwrap_or_default()),
            format!("{} ms", case["duration_ms"].as_u64().unwrap_or_default()),
            Escaped(&agentloom_core::clip_chars(&failure, 120)).to_string(),
        ]);
    }
    let header = [
        String::new(),
        "case".to_owned(),
        "checks".to_owned(),
        if replay.is_some() { "recorded" } else { "cost" }.to_owned(),
        "time".to_owned(),
        "first failure".to_owned(),
    ];
    let width = |column: usize, cap: usize| {
        std::iter::once(&header)
            .chain(&rows)
            .map(|row| columns_of(&row[column]))
            .max()
            .unwrap_or(0)
            .min(cap)
    };
    let widths = [
        width(0, 1),
        width(1, NAME_COLUMNS),
        width(2, usize::MAX),
        width(3, usize::MAX),
        width(4, usize::MAX),
    ];
    for row in std::iter::once(&header).chain(&rows) {
        let line = format!(
            "{} {}  {}  {}  {}  {}",
            pad(&row[0], widths[0], false),
            pad(&row[1], widths[1], false),
            pad(&row[2], widths[2], true),
            pad(&row[3], widths[3], true),
            pad(&row[4], widths[4], true),
            row[5]
        );
        out!("{}", line.trim_end());
    }
    let interval = &summary["pass_rate_interval"];
    if let Some(stop) = crate::runner::eval::stopped(summary) {
        out!(
            "\nstopped after {}/{} runs{}; {} cases not started, counted neither passed nor failed",
            stop.runs,
            stop.planned,
            match summary["cut_short"].as_u64() {
                Some(n) if n > 0 => format!(" ({n} more cut short by the stop, not counted)"),
                _ => String::new(),
            },
            stop.not_started
        );
    }
    out!(
        "\n{} passed, {} failed; pass rate {:.1}% over {} runs (95% interval {:.1}–{:.1}%)",
        summary["passed"],
        summary["failed"],
        summary["pass_rate"].as_f64().unwrap_or_default() * 100.0,
        summary["runs"],
        interval[0].as_f64().unwrap_or_default() * 100.0,
        interval[1].as_f64().unwrap_or(1.0) * 100.0
    );
    let cost = |usage: &serde_json::Value| usage["cost_usd"].as_f64().unwrap_or_default();
    let spent = match replay {
        // Nothing a replay answered was paid for again: what it recorded is shown apart.
        Some(_) => format!(
            "recorded ${:.4}, spent ${:.4}",
            cost(&summary["recorded_usage"]),
            cost(&summary["usage"])
        ),
        None => format!("cost ${:.4}", cost(&summary["usage"])),
    };
    out!(
        "tokens {} in / {} out, {spent}; run time p50 {} ms, p95 {} ms; {} ms in all",
        summary["usage"]["input_tokens"],
        summary["usage"]["output_tokens"],
        summary["p50_ms"],
        summary["p95_ms"],
        summary["duration_ms"]
    );
    if let Some(replay) = replay {
        out!(
            "{}",
            replay_line(replay, summary["repeat"].as_u64().unwrap_or(1))
        );
    }
    if let Some(baseline) = summary.get("baseline") {
        let list = |key: &str| {
            baseline[key]
                .as_array()
                .map(|names| {
                    names
                        .iter()
                        .filter_map(|n| n.as_str().map(|n| Escaped(n).to_string()))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        out!(
            "against {}: pass rate {:+.1} points, cost {:+.4} USD, time {:+} ms",
            baseline["eval_id"].as_str().unwrap_or_default(),
            baseline["pass_rate_delta"].as_f64().unwrap_or_default() * 100.0,
            baseline["cost_usd_delta"].as_f64().unwrap_or_default(),
            baseline["duration_ms_delta"].as_f64().unwrap_or_default()
        );
        let failing = list("now_failing");
        if !failing.is_empty() {
            out!("now failing: {failing}");
        }
        let passing = list("now_passing");
        if !passing.is_empty() {
            out!("now passing: {passing}");
        }
    }
    out!(
        "evaluation {}",
        summary["eval_id"].as_str().unwrap_or_default()
    );
    Ok(())
}

/// What a replayed evaluation says of itself: where its answers came from, what a call
/// not recorded did, how many went out for real, and its repeats.
fn replay_line(replay: &serde_json::Value, repeat: u64) -> String {
    let live = replay["live_calls"].as_u64().unwrap_or_default();
    format!(
        "replay of {} (calls not recorded {}; {}), repeat {}",
        Escaped(replay["from"].as_str().unwrap_or_default()),
        if replay["miss"] == "live" {
            "go out"
        } else {
            "fail"
        },
        match live {
            0 => "no call made for real".to_owned(),
            1 => "1 call made for real".to_owned(),
            n => format!("{n} calls made for real"),
        },
        repeat
    )
}

/// `agentloom evals`: the evaluations in the run log, newest first; a stopped one says
/// after how many runs, a replay what it replayed and what it recorded, not spent.
pub(crate) fn evals_command(db: Option<PathBuf>, json: bool) -> anyhow::Result<i32> {
    let store = crate::runner::open_run_log(db)?;
    let rows = store.list_evaluations(None, 100)?;
    // Stops, replays and repeats are known from the summary, kept whole with its row.
    let mut listed = Vec::with_capacity(rows.len());
    for row in rows {
        let summary = if row.pass_rate.is_some() {
            store.evaluation(&row.id)?.and_then(|detail| detail.summary)
        } else {
            None
        };
        let stop = summary.as_ref().and_then(|summary| {
            let stop = crate::runner::eval::stopped(summary)?;
            // Recorded before the cases not started were counted apart: they were
            // counted as failed.
            let counted_failed = summary.get("not_started").is_none();
            Some((stop, counted_failed))
        });
        listed.push((row, stop, summary.unwrap_or_default()));
    }
    if json {
        let rows: Vec<serde_json::Value> = listed
            .iter()
            .map(|(row, stop, summary)| {
                let mut shown = serde_json::to_value(row).unwrap_or_default();
                if let Some((stop, counted_failed)) = stop {
                    if *counted_failed {
                        shown["failed"] = row.failed.saturating_sub(stop.not_started).into();
                    }
                    shown["stopped"] = true.into();
                    shown["not_started"] = stop.not_started.into();
                    shown["runs"] = stop.runs.into();
                    shown["runs_planned"] = stop.planned.into();
                }
                if let Some(repeat) = summary["repeat"].as_u64() {
                    shown["repeat"] = repeat.into();
                }
                if let Some(replay) = summary.get("replay") {
                    shown["replay"] = replay.clone();
                    shown["recorded_cost_usd"] = summary["recorded_usage"]["cost_usd"]
                        .as_f64()
                        .unwrap_or_default()
                        .into();
                }
                shown
            })
            .collect();
        out!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    if listed.is_empty() {
        eprintln!("no evaluations yet in {}", store.path().display());
    }
    for (row, stop, summary) in listed {
        let rate = row
            .pass_rate
            .map_or_else(|| "-".to_owned(), |rate| format!("{:.0}%", rate * 100.0));
        let (failed, state, not_started) = match stop {
            Some((stop, counted_failed)) => (
                if counted_failed {
                    row.failed.saturating_sub(stop.not_started)
                } else {
                    row.failed
                },
                format!("stopped after {}/{}  ", stop.runs, stop.planned),
                format!(" {:>3} not started", stop.not_started),
            ),
            None => (row.failed, String::new(), String::new()),
        };
        let repeat = summary["repeat"]
            .as_u64()
            .map_or_else(String::new, |n| format!("  ×{n}"));
        let (replay, cost) = match summary.get("replay") {
            Some(replay) => (
                format!(
                    "replay of {}  ",
                    Escaped(replay["from"].as_str().unwrap_or_default())
                ),
                format!(
                    "recorded ${:.4}, spent ${:.4}",
                    summary["recorded_usage"]["cost_usd"]
                        .as_f64()
                        .unwrap_or_default(),
                    row.cost_usd
                ),
            ),
            None => (String::new(), format!("${:.4}", row.cost_usd)),
        };
        out!(
            "{}  {replay}{state}{:>6}  {:>3} passed {:>3} failed{not_started}{repeat}  {cost}  {}  {}",
            row.id,
            rate,
            row.passed,
            failed,
            Escaped(&row.graph_name),
            Escaped(&row.cases_file)
        );
    }
    Ok(0)
}
