//! The Evaluations panel (View → Evaluations): choose or create a cases file (a case can
//! be added from the shown run's inputs and outputs), run it with progress on a thread of
//! its own, see ✔/❌ per check, open a case's run on the canvas, and follow pass rate and
//! cost over the graph's evaluations on a chart. The same evaluation as `agentloom eval`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, TryRecvError};

use agentloom_engine::{EvaluationRow, RunStore};
use tokio_util::sync::CancellationToken;

use agentloom_runner::eval::{EvalPlan, EvalProgress, ReplayMissArg, run_evaluation};

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

enum Msg {
    Progress(EvalProgress),
    Done(Result<serde_json::Value, String>),
}

struct Worker {
    rx: Receiver<Msg>,
    cancel: CancellationToken,
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
    worker: Option<Worker>,
    /// The last evaluation's summary (as `agentloom eval --json` prints it).
    pub result: Option<serde_json::Value>,
    history: Vec<EvaluationRow>,
    history_of: Option<PathBuf>,
}

impl EvaluationsPanel {
    pub fn is_running(&self) -> bool {
        self.worker.is_some()
    }

    /// Starts evaluating the graph against the cases file on a thread of its own.
    pub fn start(&mut self, env: &EvaluationEnv<'_>) {
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
        let (tx, rx) = mpsc::channel();
        let cancel = CancellationToken::new();
        let store = Arc::clone(store);
        let stop = cancel.clone();
        let spawned = std::thread::Builder::new()
            .name("agentloom-eval".to_owned())
            .spawn(move || {
                let progress_tx = tx.clone();
                let progress = move |p: EvalProgress| {
                    let _ = progress_tx.send(Msg::Progress(p));
                };
                let done = run_evaluation(&plan, store, &progress, stop);
                let _ = tx.send(Msg::Done(done.map_err(|e| e.to_string())));
            });
        match spawned {
            Ok(_) => {
                self.status = "Evaluating…".to_owned();
                self.progress = None;
                self.worker = Some(Worker { rx, cancel });
            }
            Err(e) => self.status = format!("cannot start the evaluation: {e}"),
        }
    }

    /// Takes what the worker sent since the last frame.
    fn drain(&mut self) {
        let Some(worker) = &self.worker else {
            return;
        };
        loop {
            match worker.rx.try_recv() {
                Ok(Msg::Progress(p)) => self.progress = Some(p),
                Ok(Msg::Done(done)) => {
                    match done {
                        Ok(summary) => {
                            let counts = format!(
                                "{} passed, {} failed",
                                summary["passed"], summary["failed"]
                            );
                            self.status = if summary["stopped"] == true {
                                let total = self.progress.as_ref().map_or(0, |p| p.total);
                                format!(
                                    "Stopped after {} of {total} runs: {counts}",
                                    summary["runs"]
                                )
                            } else {
                                counts
                            };
                            self.result = Some(summary);
                        }
                        Err(message) => self.status = message,
                    }
                    self.worker = None;
                    // The chart reads the new evaluation.
                    self.history_of = None;
                    return;
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.status = "the evaluation stopped unexpectedly".to_owned();
                    self.worker = None;
                    return;
                }
            }
        }
    }

    /// Appends the shown run (its inputs, and its outputs as what to expect) to the cases
    /// file as a new JSON Lines case.
    pub fn add_case_from_run(&mut self, store: &RunStore, run_id: &str) {
        let path = PathBuf::from(self.cases_path.trim());
        if self.cases_path.trim().is_empty() {
            self.status = "Choose or name a cases file first.".to_owned();
            return;
        }
        let detail = match store.get_run(run_id) {
            Ok(Some(detail)) => detail,
            Ok(None) => {
                self.status = format!("run {run_id} is not in the run log");
                return;
            }
            Err(e) => {
                self.status = e.to_string();
                return;
            }
        };
        let existing = std::fs::read_to_string(&path).unwrap_or_default();
        let count = existing.lines().filter(|l| !l.trim().is_empty()).count();
        let to_json = |map: &agentloom_core::ValueMap| {
            serde_json::Value::Object(map.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
        };
        // Each output's value as the check: an object is written as the value it must
        // equal (a bare object names checks); a run with no outputs checks it completes.
        let mut expect: serde_json::Map<String, serde_json::Value> = detail
            .outputs
            .iter()
            .map(|(name, value)| {
                let value = match value.to_json() {
                    object @ serde_json::Value::Object(_) => serde_json::json!({"equals": object}),
                    plain => plain,
                };
                (name.clone(), value)
            })
            .collect();
        if expect.is_empty() {
            expect.insert("run".to_owned(), serde_json::json!("completes"));
        }
        let case = serde_json::json!({
            "name": format!("case {}", count + 1),
            "inputs": to_json(&detail.inputs),
            "expect": expect,
        });
        let mut text = existing;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&case.to_string());
        text.push('\n');
        self.status = match std::fs::write(&path, text) {
            Ok(()) => format!("added case {} to {}", count + 1, path.display()),
            Err(e) => format!("cannot write {}: {e}", path.display()),
        };
    }

    /// Draws the panel when it is open; returns what the app should do.
    pub fn show(
        &mut self,
        ctx: &egui::Context,
        env: &EvaluationEnv<'_>,
    ) -> Option<EvaluationAction> {
        self.drain();
        if !self.open {
            return None;
        }
        if self.is_running() {
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
        }
        if let (Some(store), Some(graph)) = (env.store, env.graph_file)
            && self.history_of.as_deref() != Some(graph)
        {
            let file = std::fs::canonicalize(graph).unwrap_or_else(|_| graph.to_owned());
            self.history = store
                .list_evaluations(Some(&file.display().to_string()), 50)
                .unwrap_or_default();
            self.history.reverse();
            self.history_of = Some(graph.to_owned());
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
                self.start(env);
            }
            if running
                && ui.button("Stop").clicked()
                && let Some(worker) = &self.worker
            {
                worker.cancel.cancel();
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

/// The table of a finished evaluation: a row a case, ✔/❌ a check; a case's name opens
/// its (first) run.
fn results_table(ui: &mut egui::Ui, result: &serde_json::Value) -> Option<EvaluationAction> {
    let mut action = None;
    egui::Grid::new("evaluation results")
        .striped(true)
        .show(ui, |ui| {
            ui.strong("Case");
            ui.strong("Checks");
            ui.strong("Cost");
            ui.strong("Time");
            ui.end_row();
            for case in result["cases"].as_array().into_iter().flatten() {
                let name = case["name"].as_str().unwrap_or_default();
                let mark = if case["passed"] == true { "✔" } else { "❌" };
                let first_run = case["runs"][0]["run_id"].as_str().unwrap_or_default();
                if ui
                    .link(format!("{mark} {}", agentloom_core::escape_control(name)))
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
                    case["cost_usd"].as_f64().unwrap_or_default()
                ));
                ui.label(format!(
                    "{} ms",
                    case["duration_ms"].as_u64().unwrap_or_default()
                ));
                ui.end_row();
            }
        });
    let bound = |i: usize| result["pass_rate_interval"][i].as_f64().unwrap_or_default() * 100.0;
    let interval = if result["repeat"].as_u64().unwrap_or(1) > 1 {
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

/// Pass rate (%) and cost (USD) of the graph's evaluations, oldest first.
fn history_chart(ui: &mut egui::Ui, history: &[EvaluationRow]) {
    use egui_plot::{Legend, Line, Plot, Points};
    #[allow(clippy::cast_precision_loss, reason = "an index on a chart")]
    let series = |value: &dyn Fn(&EvaluationRow) -> f64| -> Vec<[f64; 2]> {
        history
            .iter()
            .enumerate()
            .map(|(i, row)| [i as f64, value(row)])
            .collect()
    };
    let pass = series(&|row| row.pass_rate.unwrap_or_default() * 100.0);
    let cost = series(&|row| row.cost_usd);
    ui.label(format!(
        "Pass rate and cost over {} evaluations",
        history.len()
    ));
    #[allow(clippy::cast_precision_loss, reason = "an index on a chart")]
    let last = history.len().saturating_sub(1).max(1) as f64;
    Plot::new("evaluation history")
        .height(140.0)
        .legend(Legend::default())
        .allow_scroll(false)
        // From the first evaluation to the last, 0 to 100 %: one evaluation is a point
        // on a chart of its own size, not a dot in an empty field.
        .include_x(0.0)
        .include_x(last)
        .include_y(0.0)
        .include_y(100.0)
        .show(ui, |plot| {
            // Markers too: a single evaluation has no line to draw.
            plot.line(Line::new("pass rate (%)", pass.clone()));
            plot.points(Points::new("pass rate (%)", pass).radius(3.0));
            plot.line(Line::new("cost (USD)", cost.clone()));
            plot.points(Points::new("cost (USD)", cost).radius(3.0));
        });
}

impl crate::App {
    /// The Evaluations panel, when open; a case clicked opens its run on the canvas.
    pub(crate) fn evaluations_ui(&mut self, ctx: &egui::Context) {
        let env = EvaluationEnv {
            graph_file: self.document.path.as_deref(),
            store: self.store.as_ref(),
            workspace: self.run_workspace(),
            shown_run: self.run.run_id.as_deref(),
            trusted: self.untrusted.is_none(),
            runs: &self.history,
        };
        let was_running = self.evaluations.is_running();
        if let Some(EvaluationAction::OpenRun(run_id)) = self.evaluations.show(ctx, &env) {
            self.commands.push(crate::Command::OpenRun(run_id));
        }
        // The cases' runs join the history once the evaluation is over.
        if was_running && !self.evaluations.is_running() {
            self.commands.push(crate::Command::RefreshHistory);
        }
    }
}
