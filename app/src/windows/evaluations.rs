//! The Evaluations panel (View → Evaluations): choose or create a cases file (a case can
//! be added from the shown run's inputs and outputs), run it with progress as a background
//! task of the app (see [`crate::tasks`]), see ✔/❌ per check, open a case's run on the canvas, and follow pass rate and
//! cost over the graph's evaluations on a chart. The same evaluation as `agentloom eval`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_engine::{EvaluationRow, RunStore};

use agentloom_runner::eval::{EvalOptions, EvalPlan, EvalProgress, ReplayMissArg};

use crate::tasks::{BackgroundTasks, Report, Task};

/// What the panel asks of the app.
pub enum EvaluationAction {
    /// Show this run on the canvas.
    OpenRun(String),
}

/// What the panel needs from the app each frame.
pub struct EvaluationEnv<'a> {
    /// The open graph's file (`None`: never saved, nothing to evaluate).
    pub graph_file: Option<&'a Path>,
    pub store: Option<&'a Arc<RunStore>>,
    pub workspace: PathBuf,
    /// The run shown on the canvas, to add as a case.
    pub shown_run: Option<&'a str>,
    /// The graph file is trusted (its runs may use credentials).
    pub trusted: bool,
    /// The graph's recent runs, newest first: each can be replayed.
    pub runs: &'a [agentloom_engine::RunRow],
}

/// How many times each case runs, and how many runs go at once, unless the panel says.
const DEFAULT_REPEAT: u32 = 1;
const DEFAULT_CONCURRENCY: usize = 4;

/// The panel's state, kept between frames.
#[derive(Default)]
pub struct EvaluationsPanel {
    pub open: bool,
    pub cases_path: String,
    /// Runs of each case (empty: [`DEFAULT_REPEAT`]), as typed.
    pub repeat: String,
    /// Runs at once (empty: [`DEFAULT_CONCURRENCY`]), as typed.
    pub concurrency: String,
    /// The earlier evaluation of this graph to compare with.
    pub baseline: Option<String>,
    /// The evaluation or run whose recorded calls answer the cases' calls.
    pub replay: Option<String>,
    /// Replaying, make the calls that were not recorded instead of failing their nodes.
    pub replay_misses_live: bool,
    pub status: String,
    progress: Option<EvalProgress>,
    /// The evaluation under way.
    task: Option<Task>,
    /// "Run evaluation" was pressed this frame.
    start_asked: bool,
    /// The last evaluation's summary (as `agentloom eval --json` prints it).
    pub result: Option<serde_json::Value>,
    history: Vec<EvaluationRow>,
    history_of: Option<PathBuf>,
    /// The run History → Add to cases asks a cases file for.
    case_run: Option<String>,
}

impl EvaluationsPanel {
    pub fn is_running(&self) -> bool {
        self.task.is_some()
    }

    /// Starts evaluating the graph against the cases file, in the background.
    fn start(&mut self, env: &EvaluationEnv<'_>, tasks: &mut BackgroundTasks) {
        let (Some(graph), Some(store)) = (env.graph_file, env.store) else {
            self.status =
                "Save the graph to a file first; evaluations are kept in the run log.".to_owned();
            return;
        };
        if self.cases_path.trim().is_empty() {
            self.status = "Choose a cases file first.".to_owned();
            return;
        }
        let (repeat, concurrency) = match (
            whole_number(&self.repeat, "Repeat", DEFAULT_REPEAT, 1000),
            whole_number(&self.concurrency, "Concurrency", DEFAULT_CONCURRENCY, 64),
        ) {
            (Ok(repeat), Ok(concurrency)) => (repeat, concurrency),
            (Err(message), _) | (_, Err(message)) => {
                self.status = message;
                return;
            }
        };
        let plan = EvalPlan {
            graph: graph.to_owned(),
            cases_file: PathBuf::from(self.cases_path.trim()),
            repeat,
            concurrency,
            baseline: self.baseline.clone(),
            replay: self.replay.clone(),
            replay_miss: if self.replay_misses_live {
                ReplayMissArg::Live
            } else {
                ReplayMissArg::Fail
            },
            workspace: env.workspace.clone(),
            trust: env.trusted,
            nats: None,
        };
        let store = Arc::clone(store);
        // On the runtime's blocking threads: the evaluation waits for its runs, which go on
        // the app's runtime (no runtime of its own).
        let started = tasks.spawn_blocking(
            move |reporter, stop| {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return Report::EvaluationDone(Err("the evaluation has no runtime".to_owned()));
                };
                let progress = |p: EvalProgress| reporter.report(Report::EvaluationProgress(p));
                let done = agentloom_runner::eval::run_evaluation_on(
                    &runtime,
                    &plan,
                    EvalOptions::default(),
                    store,
                    &progress,
                    stop.clone(),
                );
                Report::EvaluationDone(done.map_err(|e| e.to_string()))
            },
            |why| Report::EvaluationDone(Err(format!("The evaluation failed: {why}."))),
        );
        match started {
            Ok(task) => {
                self.status = "Evaluating…".to_owned();
                self.progress = None;
                self.task = Some(task);
            }
            Err(e) => self.status = format!("cannot start the evaluation: {e}"),
        }
    }

    /// One run more checked.
    pub(crate) fn progressed(&mut self, progress: EvalProgress) {
        self.progress = Some(progress);
    }

    /// The evaluation ended with `done`: its summary, or why it did not run.
    pub(crate) fn finished(&mut self, done: Result<serde_json::Value, String>) {
        match done {
            Ok(summary) => {
                let mut counts =
                    format!("{} passed, {} failed", summary["passed"], summary["failed"]);
                if let Some(from) = summary["replay"]["from"].as_str() {
                    counts = format!(
                        "Replay of {}: {counts}",
                        agentloom_core::escape_control(from)
                    );
                }
                self.status = if summary["stopped"] == true {
                    let total = self.progress.as_ref().map_or(0, |p| p.total);
                    format!(
                        "Stopped after {} of {total} runs: {counts}, {} not started",
                        summary["runs"], summary["not_started"]
                    )
                } else {
                    counts
                };
                self.result = Some(summary);
            }
            Err(message) => self.status = message,
        }
        self.task = None;
        // The chart reads the new evaluation.
        self.history_of = None;
    }

    /// Reads the graph's past evaluations for the chart again when the graph changed or an
    /// evaluation ended (from the app's logic, not while drawing).
    pub(crate) fn follow_history(&mut self, store: Option<&RunStore>, graph: Option<&Path>) {
        let (Some(store), Some(graph)) = (store, graph) else {
            return;
        };
        if !self.open || self.history_of.as_deref() == Some(graph) {
            return;
        }
        let file = std::fs::canonicalize(graph).unwrap_or_else(|_| graph.to_owned());
        self.history = store
            .list_evaluations(Some(&file.display().to_string()), 50)
            .unwrap_or_default();
        self.history.reverse();
        self.history_of = Some(graph.to_owned());
        // The cases file of the graph's last evaluation, unless one is named already.
        if self.cases_path.trim().is_empty()
            && let Some(last) = self.history.last()
        {
            self.cases_path.clone_from(&last.cases_file);
        }
    }

    /// Appends the shown run (its inputs, and its outputs as what to expect) to the cases
    /// file as a new JSON Lines case.
    pub fn add_case_from_run(&mut self, store: &RunStore, run_id: &str) {
        if self.cases_path.trim().is_empty() {
            self.status = "Choose or name a cases file first.".to_owned();
            return;
        }
        let path = PathBuf::from(self.cases_path.trim());
        self.status = add_case_to(store, run_id, &path);
    }

    /// The cases file last used: the one the panel names, else the one of the newest
    /// evaluation in the run log (of the graph shown when it has one).
    pub fn last_cases_file(&self, store: Option<&RunStore>) -> Option<String> {
        let named = self.cases_path.trim();
        if !named.is_empty() {
            return Some(named.to_owned());
        }
        if let Some(row) = self.history.last() {
            return Some(row.cases_file.clone());
        }
        store?
            .list_evaluations(None, 1)
            .ok()?
            .into_iter()
            .next()
            .map(|row| row.cases_file)
    }

    /// Draws the panel when it is open; returns what the app should do.
    pub fn show(
        &mut self,
        ctx: &egui::Context,
        env: &EvaluationEnv<'_>,
    ) -> Option<EvaluationAction> {
        if !self.open {
            return None;
        }
        let mut action = None;
        let mut open = self.open;
        egui::Window::new("Evaluations")
            .open(&mut open)
            .default_width(560.0)
            .show(ctx, |ui| action = self.contents(ui, env));
        self.open = open;
        action
    }

    fn contents(&mut self, ui: &mut egui::Ui, env: &EvaluationEnv<'_>) -> Option<EvaluationAction> {
        let mut action = None;
        ui.horizontal(|ui| {
            ui.label("Cases file");
            ui.add(
                egui::TextEdit::singleline(&mut self.cases_path)
                    .hint_text("cases.jsonl")
                    .desired_width(280.0),
            );
            if ui.button("Browse…").clicked() {
                // With no desktop portal or zenity, the dialog would answer as if cancelled.
                // Found out once, for every dialog (usually in the background at start-up).
                if !crate::files::native_dialogs_available() {
                    self.status = "No file dialog here: type the cases file's path.".to_owned();
                } else if let Some(path) = rfd::FileDialog::new()
                    .set_title("Cases file")
                    .add_filter("Cases", &["jsonl", "csv"])
                    .pick_file()
                {
                    self.cases_path = path.display().to_string();
                }
            }
        });
        self.options_ui(ui, env);
        ui.horizontal(|ui| {
            let running = self.is_running();
            if ui
                .add_enabled(!running, egui::Button::new("Run evaluation"))
                .clicked()
            {
                self.start_asked = true;
            }
            if running
                && ui.button("Stop").clicked()
                && let Some(task) = &self.task
            {
                task.stop();
            }
            if ui
                .add_enabled(
                    env.shown_run.is_some() && env.store.is_some(),
                    egui::Button::new("Add the shown run as a case"),
                )
                .clicked()
                && let (Some(store), Some(run)) = (env.store, env.shown_run)
            {
                self.add_case_from_run(store, run);
            }
        });
        if self.is_running() {
            let (done, total, case) = self
                .progress
                .as_ref()
                .map_or((0, 0, ""), |p| (p.done, p.total, p.case.as_str()));
            #[allow(clippy::cast_precision_loss, reason = "a progress fraction")]
            let fraction = done as f32 / total.max(1) as f32;
            let text = if total == 0 {
                "starting…".to_owned()
            } else {
                format!(
                    "{done}/{total} runs done · last: {}",
                    agentloom_core::escape_control(case)
                )
            };
            ui.add(egui::ProgressBar::new(fraction).text(text));
        }
        if !self.status.is_empty() {
            ui.label(&self.status);
        }
        if let Some(result) = &self.result {
            action = results_table(ui, result);
            if let Some(baseline) = result.get("baseline") {
                baseline_ui(ui, baseline);
            }
        }
        if !self.history.is_empty() {
            ui.separator();
            history_chart(ui, &self.history);
        }
        action
    }
}

impl EvaluationsPanel {
    /// Repeat, concurrency, the baseline and what to replay, for the next evaluation.
    fn options_ui(&mut self, ui: &mut egui::Ui, env: &EvaluationEnv<'_>) {
        ui.horizontal(|ui| {
            for (name, text, default, help) in [
                (
                    "Repeat",
                    &mut self.repeat,
                    DEFAULT_REPEAT.to_string(),
                    "Runs of each case; with more than one, the pass rate carries a 95% interval.",
                ),
                (
                    "Concurrency",
                    &mut self.concurrency,
                    DEFAULT_CONCURRENCY.to_string(),
                    "Runs at once.",
                ),
            ] {
                let label = ui.label(name);
                ui.add(
                    egui::TextEdit::singleline(text)
                        .hint_text(default)
                        .desired_width(48.0),
                )
                .labelled_by(label.id)
                .on_hover_text(help);
            }
        });
        let evaluations: Vec<(String, String)> = self
            .history
            .iter()
            .rev()
            .map(|row| (row.id.clone(), evaluation_label(row)))
            .collect();
        ui.horizontal(|ui| {
            let label = ui.label("Baseline");
            let shown = choice_label(self.baseline.as_deref(), &evaluations, "none");
            egui::ComboBox::from_id_salt("evaluation baseline")
                .selected_text(shown)
                .width(380.0)
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut self.baseline, None, "none");
                    for (id, text) in &evaluations {
                        ui.selectable_value(&mut self.baseline, Some(id.clone()), text);
                    }
                })
                .response
                .labelled_by(label.id)
                .on_hover_text(
                    "An earlier evaluation of this graph: the cases that now fail or pass, and the changes in pass rate, cost and time.",
                );
        });
        let runs: Vec<(String, String)> = env
            .runs
            .iter()
            .take(20)
            .map(|row| (row.id.clone(), run_label(row)))
            .collect();
        ui.horizontal(|ui| {
            let label = ui.label("Replay");
            let all: Vec<(String, String)> = evaluations.iter().chain(&runs).cloned().collect();
            let shown = choice_label(self.replay.as_deref(), &all, "nothing: calls go out");
            egui::ComboBox::from_id_salt("evaluation replay")
                .selected_text(shown)
                .width(380.0)
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut self.replay, None, "nothing: calls go out");
                    if !evaluations.is_empty() {
                        ui.label("Each case from its run in the evaluation");
                        for (id, text) in &evaluations {
                            ui.selectable_value(&mut self.replay, Some(id.clone()), text);
                        }
                    }
                    if !runs.is_empty() {
                        ui.label("Every case from one run");
                        for (id, text) in &runs {
                            ui.selectable_value(&mut self.replay, Some(id.clone()), text);
                        }
                    }
                })
                .response
                .labelled_by(label.id)
                .on_hover_text(
                    "Answer the cases' model, HTTP and MCP calls (and the judge's) from a recording, with no network.",
                );
            if self.replay.is_some() {
                ui.checkbox(&mut self.replay_misses_live, "Make calls not recorded");
            }
        });
    }
}

/// How the panel names an earlier evaluation.
fn evaluation_label(row: &EvaluationRow) -> String {
    format!(
        "evaluation {} · {} passed, {} failed",
        row.id, row.passed, row.failed
    )
}

/// How the panel names a recorded run.
fn run_label(row: &agentloom_engine::RunRow) -> String {
    format!("run {} · {}", row.id, row.status.as_str())
}

/// The label of the choice `id` among `choices`, `none` when nothing is chosen.
fn choice_label(id: Option<&str>, choices: &[(String, String)], none: &str) -> String {
    match id {
        None => none.to_owned(),
        Some(id) => choices
            .iter()
            .find(|(choice, _)| choice == id)
            .map_or_else(|| id.to_owned(), |(_, text)| text.clone()),
    }
}

/// A whole number from 1 to `max` typed in field `name`; empty is `default`.
fn whole_number<T>(text: &str, name: &str, default: T, max: u32) -> Result<T, String>
where
    T: TryFrom<u32>,
{
    let text = text.trim();
    if text.is_empty() {
        return Ok(default);
    }
    text.parse::<u32>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| {
            format!(
                "{name} must be a whole number from 1 to {max}, not \"{}\"",
                agentloom_core::escape_control(text)
            )
        })
}

/// What changed since the baseline: the cases that now fail and now pass, and the deltas.
fn baseline_ui(ui: &mut egui::Ui, baseline: &serde_json::Value) {
    let number = |key: &str| baseline[key].as_f64().unwrap_or_default();
    let names = |key: &str| -> String {
        let names: Vec<String> = baseline[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .map(|name| agentloom_core::escape_control(name).into_owned())
            .collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    };
    ui.separator();
    ui.label(format!(
        "Against evaluation {}: pass rate {:+.0} points, cost {:+.4} USD, time {:+.0} ms",
        baseline["eval_id"].as_str().unwrap_or_default(),
        number("pass_rate_delta") * 100.0,
        number("cost_usd_delta"),
        number("duration_ms_delta"),
    ));
    ui.label(format!("Newly failing: {}", names("now_failing")));
    ui.label(format!("Newly passing: {}", names("now_passing")));
}

/// The table of a finished evaluation: a row a case, ✔/❌ a check, a case a stopped
/// evaluation never ran marked as such; a case's name opens its (first) run. A replay
/// shows what its runs recorded, not what was spent.
fn results_table(ui: &mut egui::Ui, result: &serde_json::Value) -> Option<EvaluationAction> {
    let mut action = None;
    let replay = result.get("replay");
    let cost_key = if replay.is_some() {
        "recorded_cost_usd"
    } else {
        "cost_usd"
    };
    egui::Grid::new("evaluation results")
        .striped(true)
        .show(ui, |ui| {
            ui.strong("Case");
            ui.strong("Checks");
            ui.strong(if replay.is_some() {
                "Cost (recorded)"
            } else {
                "Cost"
            });
            ui.strong("Time");
            ui.end_row();
            for case in result["cases"].as_array().into_iter().flatten() {
                let name =
                    agentloom_core::escape_control(case["name"].as_str().unwrap_or_default());
                let first_run = case["runs"][0]["run_id"].as_str().unwrap_or_default();
                if case["not_started"] == true {
                    ui.label(format!("· {name}"));
                    let cut_short = case["runs"].as_array().is_some_and(|runs| !runs.is_empty());
                    ui.label(
                        egui::RichText::new(if cut_short {
                            "cut short by the stop"
                        } else {
                            "not started"
                        })
                        .color(crate::theme::TEXT_WEAK),
                    );
                    ui.label("-");
                    ui.label("-");
                    ui.end_row();
                    continue;
                }
                let mark = if case["passed"] == true { "✔" } else { "❌" };
                if ui
                    .link(format!("{mark} {name}"))
                    .on_hover_text("Open this case's run on the canvas")
                    .clicked()
                    && !first_run.is_empty()
                {
                    action = Some(EvaluationAction::OpenRun(first_run.to_owned()));
                }
                ui.horizontal(|ui| {
                    for check in checks_of_runs(case) {
                        let mark = if check.passed == check.runs {
                            "✔"
                        } else {
                            "❌"
                        };
                        let label = if check.runs > 1 {
                            format!("{mark} {} {}/{}", check.name, check.passed, check.runs)
                        } else {
                            format!("{mark} {}", check.name)
                        };
                        let shown = ui.label(label);
                        if !check.detail.is_empty() {
                            shown.on_hover_text(agentloom_core::escape_control(&check.detail));
                        }
                    }
                });
                ui.label(format!(
                    "${:.4}",
                    case[cost_key].as_f64().unwrap_or_default()
                ));
                ui.label(format!(
                    "{} ms",
                    case["duration_ms"].as_u64().unwrap_or_default()
                ));
                ui.end_row();
            }
        });
    let bound = |i: usize| result["pass_rate_interval"][i].as_f64().unwrap_or_default() * 100.0;
    let repeat = result["repeat"].as_u64().unwrap_or(1);
    let interval = if repeat > 1 {
        format!(" (95% interval {:.0}–{:.0}%)", bound(0), bound(1))
    } else {
        String::new()
    };
    ui.label(format!(
        "pass rate {:.0}%{interval} over {} runs · {} ms",
        result["pass_rate"].as_f64().unwrap_or_default() * 100.0,
        result["runs"].as_u64().unwrap_or_default(),
        result["duration_ms"].as_u64().unwrap_or_default()
    ));
    if let Some(stop) = agentloom_runner::eval::stopped(result) {
        ui.label(format!(
            "Stopped after {}/{} runs: {} cases not started, counted neither passed nor failed",
            stop.runs, stop.planned, stop.not_started
        ));
    }
    if let Some(replay) = replay {
        let cost = |usage: &serde_json::Value| usage["cost_usd"].as_f64().unwrap_or_default();
        ui.label(format!(
            "Replay of {} · recorded ${:.4}, spent ${:.4} · {} calls made for real · repeat {repeat}",
            agentloom_core::escape_control(replay["from"].as_str().unwrap_or_default()),
            cost(&result["recorded_usage"]),
            cost(&result["usage"]),
            replay["live_calls"].as_u64().unwrap_or_default()
        ));
    }
    action
}

/// One check of a case over its runs (`--repeat`): how many of them passed it.
struct CaseCheck {
    /// `OUTPUT CHECK`.
    name: String,
    passed: usize,
    runs: usize,
    /// The first failure's detail, else the first run's.
    detail: String,
}

/// The checks of `case`'s runs, one entry a check, in the order of the first run.
fn checks_of_runs(case: &serde_json::Value) -> Vec<CaseCheck> {
    let mut checks: Vec<CaseCheck> = Vec::new();
    for run in case["runs"].as_array().into_iter().flatten() {
        for check in run["checks"].as_array().into_iter().flatten() {
            let name = format!(
                "{} {}",
                check["output"].as_str().unwrap_or_default(),
                check["check"].as_str().unwrap_or_default()
            );
            let passed = check["passed"] == true;
            let detail = check["detail"].as_str().unwrap_or_default();
            let index = match checks.iter().position(|c| c.name == name) {
                Some(index) => index,
                None => {
                    checks.push(CaseCheck {
                        name,
                        passed: 0,
                        runs: 0,
                        detail: detail.to_owned(),
                    });
                    checks.len() - 1
                }
            };
            let entry = &mut checks[index];
            entry.runs += 1;
            if passed {
                entry.passed += 1;
            } else if entry.passed + 1 == entry.runs {
                // The first failure explains the check.
                entry.detail = detail.to_owned();
            }
        }
    }
    checks
}

/// The colour of the pass-rate line and of its legend entry.
const PASS_RATE_COLOR: egui::Color32 = crate::theme::OK;
/// The colour of the cost line and of its legend entry.
const COST_COLOR: egui::Color32 = crate::theme::ACCENT;

/// Pass rate (%) and cost (USD) of the graph's evaluations, oldest first: two charts, each
/// on an axis of its own, over the same whole-number evaluation index, under a legend
/// drawn in the lines' colours.
fn history_chart(ui: &mut egui::Ui, history: &[EvaluationRow]) {
    use egui_plot::{Line, Plot, Points};
    ui.label(format!(
        "Pass rate and cost over {} evaluations",
        history.len()
    ));
    ui.horizontal(|ui| {
        legend_entry(ui, PASS_RATE_COLOR, "pass rate (%)");
        legend_entry(ui, COST_COLOR, "cost (USD)");
    });
    #[allow(clippy::cast_precision_loss, reason = "an index on a chart")]
    let series = |value: &dyn Fn(&EvaluationRow) -> f64| -> Vec<[f64; 2]> {
        history
            .iter()
            .enumerate()
            .map(|(i, row)| [(i + 1) as f64, value(row)])
            .collect()
    };
    let pass = series(&|row| row.pass_rate.unwrap_or_default() * 100.0);
    let cost = series(&|row| row.cost_usd);
    let highest_cost = history.iter().map(|row| row.cost_usd).fold(0.0, f64::max);
    #[allow(clippy::cast_precision_loss, reason = "an index on a chart")]
    let last = history.len().max(2) as f64;
    let link = ui.id().with("evaluation history index");
    // From the first evaluation to the last: one evaluation is a point on a chart of its
    // own size, not a dot in an empty field.
    let chart = |id: &str, axis: &str| {
        Plot::new(id)
            .height(110.0)
            .allow_scroll(false)
            .allow_zoom(false)
            .allow_drag(false)
            .link_axis(link, [true, false])
            .include_x(1.0)
            .include_x(last)
            .include_y(0.0)
            .x_grid_spacer(whole_number_marks)
            .x_axis_formatter(|mark, _| whole_number_label(mark.value))
            .x_axis_label("evaluation")
            .y_axis_label(axis.to_owned())
    };
    // The legend above names the lines; each axis says its unit.
    chart("evaluation pass rate", "pass rate")
        .include_y(100.0)
        .y_axis_formatter(|mark, _| format!("{:.0}%", mark.value))
        .show(ui, |plot| {
            // Markers too: a single evaluation has no line to draw.
            plot.line(Line::new("pass rate (%)", pass.clone()).color(PASS_RATE_COLOR));
            plot.points(
                Points::new("pass rate (%)", pass)
                    .color(PASS_RATE_COLOR)
                    .radius(3.0),
            );
        });
    chart("evaluation cost", "USD")
        // A chart of nothing spent still has an axis to read.
        .include_y(if highest_cost > 0.0 {
            highest_cost * 1.1
        } else {
            0.01
        })
        .y_axis_formatter(|mark, _| format!("${:.4}", mark.value))
        .show(ui, |plot| {
            plot.line(Line::new("cost (USD)", cost.clone()).color(COST_COLOR));
            plot.points(
                Points::new("cost (USD)", cost)
                    .color(COST_COLOR)
                    .radius(3.0),
            );
        });
}

/// A legend entry: a short bar in the line's colour, then its name in that colour.
fn legend_entry(ui: &mut egui::Ui, color: egui::Color32, name: &str) {
    let (rect, _) = ui.allocate_exact_size(egui::vec2(16.0, 10.0), egui::Sense::hover());
    ui.painter().rect_filled(
        egui::Rect::from_center_size(rect.center(), egui::vec2(16.0, 3.0)),
        1.0,
        color,
    );
    ui.label(egui::RichText::new(name).color(color));
}

/// Grid marks on whole evaluation numbers only, far enough apart to be read: every 1, 2,
/// 5, 10, 20, 50… evaluations.
fn whole_number_marks(input: egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    let wanted = (input.base_step_size * 8.0).max(1.0);
    let mut step = 1.0_f64;
    for factor in [2.0, 2.5, 2.0].iter().cycle() {
        if step >= wanted {
            break;
        }
        step *= factor;
    }
    let (low, high) = input.bounds;
    let mut marks = Vec::new();
    let mut value = (low / step).ceil().max(1.0) * step;
    while value <= high {
        marks.push(egui_plot::GridMark {
            value,
            step_size: step,
        });
        value += step;
    }
    marks
}

/// The label of a mark on the evaluation axis: a whole number from 1, nothing elsewhere.
fn whole_number_label(value: f64) -> String {
    if value >= 1.0 && value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        String::new()
    }
}

/// Adds run `run_id` as a case to the cases file `path` (its inputs, its outputs as what
/// to expect), as `agentloom eval add-case --expect-current` does; what happened, for a
/// person.
fn add_case_to(store: &RunStore, run_id: &str, path: &Path) -> String {
    let request = agentloom_runner::eval::CaseFromRun {
        run: run_id,
        to: path,
        expect_current: true,
        name: None,
    };
    match agentloom_runner::eval::add_case_from_run(store, &request) {
        Ok(added) => format!(
            "added case \"{}\" to {} (line {})",
            agentloom_core::escape_control(&added.name),
            path.display(),
            added.line
        ),
        Err(message) => agentloom_core::escape_control(&message).into_owned(),
    }
}

impl EvaluationsPanel {
    /// Keeps run `run_id` to add as a case once a cases file is given; returns the file to
    /// suggest, the last one used or `cases.jsonl` in `folder`.
    pub(crate) fn ask_cases_file_for(
        &mut self,
        run_id: String,
        store: Option<&RunStore>,
        folder: &Path,
    ) -> String {
        self.case_run = Some(run_id);
        self.last_cases_file(store)
            .unwrap_or_else(|| folder.join("cases.jsonl").display().to_string())
    }

    /// Adds the run asked about to the cases file `path`; the panel then names that file.
    /// What was done, to tell; `None` when no run was asked about or there is no log.
    pub(crate) fn add_asked_case_to(
        &mut self,
        store: Option<&RunStore>,
        path: &Path,
    ) -> Option<String> {
        let (Some(run_id), Some(store)) = (self.case_run.take(), store) else {
            return None;
        };
        let said = add_case_to(store, &run_id, path);
        if said.starts_with("added case") {
            self.cases_path = path.display().to_string();
        }
        self.status.clone_from(&said);
        Some(said)
    }

    /// Starts the evaluation "Run evaluation" asked for in the frame just drawn.
    pub(crate) fn start_if_asked(&mut self, env: &EvaluationEnv<'_>, tasks: &mut BackgroundTasks) {
        if std::mem::take(&mut self.start_asked) {
            self.start(env, tasks);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{whole_number_label, whole_number_marks};

    #[test]
    fn the_evaluation_axis_is_marked_on_whole_numbers_only() {
        for (bounds, base) in [((0.8, 2.2), 0.01), ((0.5, 7.5), 0.05), ((1.0, 180.0), 0.9)] {
            let marks = whole_number_marks(egui_plot::GridInput {
                bounds,
                base_step_size: base,
            });
            assert!(!marks.is_empty(), "{bounds:?}");
            for mark in &marks {
                assert_eq!(mark.value.fract(), 0.0, "{mark:?}");
                assert!(mark.value >= 1.0 && mark.value <= bounds.1, "{mark:?}");
                assert!(mark.step_size >= 1.0);
            }
        }
        // Many evaluations on a narrow chart: fewer, rounder marks.
        let crowded = whole_number_marks(egui_plot::GridInput {
            bounds: (1.0, 180.0),
            base_step_size: 0.9,
        });
        assert!(crowded.len() <= 30, "{}", crowded.len());
        assert_eq!(whole_number_label(3.0), "3");
        assert_eq!(whole_number_label(2.5), "");
        assert_eq!(whole_number_label(0.0), "");
    }
}
