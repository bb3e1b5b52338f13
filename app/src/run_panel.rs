//! The run panel: the run inputs form, Run/Stop, the run's state and outputs, approvals,
//! and the full record of the selected node (inputs, outputs, error, attempts, duration,
//! tokens, cost).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use agentloom_core::{RunInput, Value};
use agentloom_engine::{NodeProgress, RunStatus};
use egui::{RichText, Ui};

use super::Command;
use super::run::{NodeBadge, RunView};
use super::theme;

/// One graph input in the form.
pub struct RunFormField {
    pub input: RunInput,
    /// What is typed (the default to start with).
    pub text: String,
}

/// How the next run starts: the form asking its inputs, and the workspace given at start.
#[derive(Default)]
pub(crate) struct RunSetup {
    pub(crate) form: RunForm,
    /// The workspace given at start (`--workspace`), over the graph's folder.
    pub(crate) workspace: Option<PathBuf>,
}

/// The inputs form: one text per graph input.
#[derive(Default)]
pub struct RunForm {
    /// The graph's inputs, sorted by name.
    pub fields: Vec<RunFormField>,
    /// Shown when the form is open.
    pub open: bool,
    /// Set when the form opens, so the first field takes the keyboard focus once.
    focus_first: bool,
}

impl RunForm {
    /// Prepares the form for `inputs`, keeping what was typed for inputs that remain.
    pub fn prepare(&mut self, inputs: &[RunInput]) {
        let old: BTreeMap<String, String> = self
            .fields
            .drain(..)
            .map(|f| (f.input.name, f.text))
            .collect();
        self.fields = inputs
            .iter()
            .map(|input| {
                let text = old.get(&input.name).cloned().unwrap_or_else(|| {
                    input
                        .default
                        .as_ref()
                        .map_or_else(String::new, |v| match v {
                            Value::Text(s) => String::clone(s),
                            other => other.to_json().to_string(),
                        })
                });
                RunFormField {
                    input: input.clone(),
                    text,
                }
            })
            .collect();
        self.focus_first = true;
    }
}

/// The run form, shown in the side panel (beside the canvas, never over its blocks). Each
/// field's text is selected when it takes the keyboard, so typing replaces a default.
pub fn run_form_ui(ui: &mut Ui, form: &mut RunForm, commands: &mut Vec<Command>) {
    ui.heading("Run inputs");
    let mut submitted = false;
    for (index, RunFormField { input, text }) in form.fields.iter_mut().enumerate() {
        // A secret input is typed masked, as a password is.
        let secret = input.secret.is_some();
        let ty = if secret {
            agentloom_core::SECRET_INPUT_TYPE.to_owned()
        } else {
            input.ty.to_string()
        };
        let label = ui.label(format!("{} ({ty})", input.name));
        let mut output = egui::TextEdit::singleline(text)
            .password(secret)
            .desired_width(f32::INFINITY)
            .show(ui);
        let field = output.response.response.clone().labelled_by(label.id);
        let take_focus = index == 0 && std::mem::take(&mut form.focus_first);
        if take_focus {
            field.request_focus();
        }
        if take_focus || field.gained_focus() {
            let all = egui::text::CCursorRange::two(
                egui::text::CCursor::new(0),
                egui::text::CCursor::new(text.chars().count()),
            );
            output.state.cursor.set_char_range(Some(all));
            output.state.store(ui.ctx(), field.id);
        }
        if !input.description.is_empty() {
            ui.label(
                RichText::new(&input.description)
                    .small()
                    .color(theme::TEXT_WEAK),
            );
        }
        // Enter in a field starts the run, as in any dialog with one action.
        submitted |= field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        ui.add_space(4.0);
    }
    ui.horizontal(|ui| {
        if ui.button("Start run").on_hover_text("Enter").clicked() || submitted {
            commands.push(Command::StartRun);
        }
        if ui.button("Cancel").on_hover_text("Escape").clicked()
            || ui.input(|i| i.key_pressed(egui::Key::Escape))
        {
            commands.push(Command::CloseRunForm);
        }
    });
}

/// The head of the run panel, kept in view above its scrolling part: Stop, the run's
/// state, id, time and usage, and Copy for its outputs.
/// `waiting`: a run of the graph (the newest) that waits for a person's decision, announced
/// while no run is shown, with a button to open it.
pub fn run_summary_header_ui(
    ui: &mut Ui,
    run: &RunView,
    waiting: Option<&agentloom_engine::RunRow>,
    commands: &mut Vec<Command>,
) {
    ui.horizontal_wrapped(|ui| {
        if run.is_running() && ui.button("Stop").clicked() {
            commands.push(Command::StopRun);
        }
        match run.status {
            None if waiting.is_some() => {
                ui.label(
                    RichText::new("A run of this graph waits for your approval")
                        .color(theme::WARN)
                        .strong(),
                );
                if let Some(waiting) = waiting
                    && ui.button("Open the waiting run").clicked()
                {
                    commands.push(Command::OpenRun(waiting.id.clone()));
                }
            }
            None => {
                ui.label(
                    RichText::new("No run yet. Press Run (Ctrl+Enter).").color(theme::TEXT_WEAK),
                );
            }
            Some(status) => {
                let color = match status {
                    RunStatus::Completed => theme::OK,
                    RunStatus::Running => theme::ACCENT,
                    RunStatus::Cancelled | RunStatus::Interrupted | RunStatus::Waiting => {
                        theme::WARN
                    }
                    RunStatus::Failed => theme::ERROR,
                };
                let at_breakpoint = (run.nodes.values())
                    .any(|n| n.status == agentloom_engine::NodeStatus::AtBreakpoint);
                let (said, color) = if run.is_waiting() {
                    ("waiting for approval", theme::WARN)
                } else if at_breakpoint && status == RunStatus::Running {
                    ("paused at a breakpoint", theme::WARN)
                } else {
                    (status.as_str(), color)
                };
                ui.label(RichText::new(format!("Run {said}")).color(color).strong());
                // A clock in whole seconds, not a spinner: the window repaints once a
                // second while a run goes (events repaint it too), and rests meanwhile.
                if let Some(going) = run.live_for() {
                    ui.label(RichText::new(format!("{} s", going.as_secs())).monospace());
                    repaint_as_the_second_turns(ui.ctx(), going);
                }
                if let Some(id) = &run.run_id {
                    ui.label(
                        RichText::new(short_id(id))
                            .monospace()
                            .color(theme::TEXT_WEAK),
                    );
                }
                if let Some(ms) = run.duration_ms {
                    ui.label(format!("{ms} ms"));
                }
                if !run.usage.is_zero() {
                    ui.label(usage_text(&run.usage));
                }
            }
        }
        if !run.outputs.is_empty() {
            copy_values_button(ui, "Copy the run's outputs", &run.outputs);
        }
    });
}

/// `count` with its noun, singular or plural: "1 problem", "3 problems".
pub fn counted(count: usize, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

/// Asks for a frame just after a clock that has run for `elapsed` shows its next whole
/// second. (egui wakes a little early, by a predicted frame's time; a frame before the
/// second turns would ask again at once and spin until it does.)
pub fn repaint_as_the_second_turns(ctx: &egui::Context, elapsed: Duration) {
    const PAST_THE_TURN: Duration = Duration::from_millis(50);
    let to_next_second = Duration::from_secs(1)
        .saturating_sub(Duration::from_nanos(u64::from(elapsed.subsec_nanos())));
    ctx.request_repaint_after(to_next_second + PAST_THE_TURN);
}

/// The scrolling part of the run panel: pending approvals, the run's error and its outputs,
/// each whole.
pub fn run_summary_ui(ui: &mut Ui, run: &RunView) {
    if !run.approvals.is_empty() {
        ui.label(
            RichText::new(format!(
                "{} pending",
                counted(run.approvals.len(), "approval", "approvals")
            ))
            .color(theme::WARN),
        );
    }
    if let Some(error) = &run.error {
        ui.label(RichText::new(error).color(theme::ERROR));
    }
    for (name, value) in &run.outputs {
        // "Output `result`": an output named "output" no longer reads "output output".
        ui.label(RichText::new(format!("Output `{name}`")).strong());
        ui.add(egui::Label::new(RichText::new(whole_text(value)).monospace()).selectable(true));
    }
}

/// Values shown whole (text as it is, anything else as pretty JSON), up to a bound that
/// keeps a frame quick; Copy takes all of it.
const SHOWN_CHARS: usize = 200_000;

/// `value` as shown in full in the run panel.
pub fn whole_text(value: &Value) -> String {
    let text = match value {
        Value::Text(s) => String::clone(s),
        other => serde_json::to_string_pretty(&other.to_json()).unwrap_or_default(),
    };
    let count = text.chars().count();
    if count <= SHOWN_CHARS {
        return text;
    }
    let shown: String = text.chars().take(SHOWN_CHARS).collect();
    format!(
        "{shown}\n… {} more characters (Copy takes them all)",
        count - SHOWN_CHARS
    )
}

/// A Copy button that puts `values` on the clipboard: one text value as it is, else the
/// values as a JSON object.
fn copy_values_button(ui: &mut Ui, name: &str, values: &agentloom_core::ValueMap) {
    let button = ui.small_button("Copy").on_hover_text(name);
    button.widget_info(|| egui::WidgetInfo::labeled(egui::WidgetType::Button, true, name));
    if button.clicked() {
        let text = match values.values().next() {
            Some(Value::Text(text)) if values.len() == 1 => String::clone(text),
            _ => serde_json::to_string_pretty(&Value::object(values.clone()).to_json())
                .unwrap_or_default(),
        };
        ui.ctx().copy_text(text);
    }
}

/// The head of a node's last run, kept in view above its scrolling part: its state,
/// attempts, time and usage, and Copy for its outputs (or its error).
pub fn node_run_header_ui(ui: &mut Ui, run: &NodeProgress) {
    ui.horizontal_wrapped(|ui| {
        match run.state() {
            Some((text, color)) => ui.label(RichText::new(text).color(color).strong()),
            None => ui.label(RichText::new("not reached").color(theme::TEXT_WEAK)),
        };
        let mut facts = Vec::new();
        if run.attempts > 0 {
            facts.push(counted(run.attempts as usize, "attempt", "attempts"));
        }
        if let Some(ms) = run.duration_ms {
            facts.push(format!("{ms} ms"));
        }
        if !run.usage.is_zero() {
            facts.push(usage_text(&run.usage));
        }
        if !facts.is_empty() {
            ui.label(facts.join(" · "));
        }
        if !run.outputs.is_empty() {
            copy_values_button(ui, "Copy the node's outputs", &run.outputs);
        } else if let Some(error) = &run.error {
            let button = ui.small_button("Copy").on_hover_text("Copy the error");
            button.widget_info(|| {
                egui::WidgetInfo::labeled(egui::WidgetType::Button, true, "Copy the error")
            });
            if button.clicked() {
                ui.ctx().copy_text(error.clone());
            }
        }
    });
}

/// The rest of a node's last run: why it was skipped, its error, inputs, outputs (all but
/// `hidden`, which are shown otherwise) and what it is streaming.
pub fn node_run_ui(ui: &mut Ui, run: &NodeProgress, hidden: &[&str]) {
    if let Some(reason) = &run.skip_reason {
        ui.label(RichText::new(reason).color(theme::TEXT_WEAK));
    }
    if let Some(error) = &run.error {
        ui.label(RichText::new(error).color(theme::ERROR));
    }
    for (title, map) in [("Outputs", &run.outputs), ("Inputs", &run.inputs)] {
        if map.keys().all(|port| hidden.contains(&port.as_str())) {
            continue;
        }
        ui.label(RichText::new(title).small().color(theme::TEXT_WEAK));
        for (port, value) in map {
            if hidden.contains(&port.as_str()) {
                continue;
            }
            let id = ui.id().with(title).with(port);
            super::json_tree::json_tree_ui(ui, id, port, &value.to_json());
        }
    }
    // A node that failed or was stopped keeps what it streamed, which no output holds.
    let state = if run.status.is_final() || run.cancelled {
        "streamed before it stopped"
    } else {
        "streaming"
    };
    for (port, text) in &run.partial {
        if hidden.contains(&port.as_str()) {
            continue;
        }
        ui.label(
            RichText::new(format!("{port} ({state}) = {text}"))
                .monospace()
                .color(theme::ACCENT),
        );
    }
}

/// `812 in / 20 out tokens, $0.0001`.
pub fn usage_text(usage: &agentloom_core::Usage) -> String {
    format!(
        "{} in / {} out tokens, {}",
        usage.input_tokens,
        usage.output_tokens,
        cost_text(usage.cost_usd)
    )
}

/// The first 12 characters of a run id: its start time to the millisecond (run ids are
/// UUIDv7), so runs started a moment apart still differ, and a prefix `agentloom show` takes.
pub fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// A cost in dollars with enough digits to show it: cents for a cent or more, else two
/// significant digits, so a nonzero cost never reads as $0.0000.
pub fn cost_text(usd: f64) -> String {
    if usd == 0.0 || !usd.is_finite() {
        return format!("${usd:.2}");
    }
    if usd.abs() >= 0.01 {
        return format!("${usd:.2}");
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a small positive digit count"
    )]
    let decimals = (1.0 - usd.abs().log10().floor()).clamp(2.0, 12.0) as usize;
    format!("${usd:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::cost_text;

    #[test]
    fn a_nonzero_cost_never_reads_as_zero() {
        assert_eq!(cost_text(0.0), "$0.00");
        assert_eq!(cost_text(1.5), "$1.50");
        assert_eq!(cost_text(0.0123), "$0.01");
        assert_eq!(cost_text(0.005), "$0.0050");
        assert_eq!(cost_text(0.000_012_3), "$0.000012");
        assert_eq!(cost_text(0.000_000_4), "$0.00000040");
    }
}
