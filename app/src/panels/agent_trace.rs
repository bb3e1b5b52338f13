//! The trace of a node that works in steps (an agent): one row per step, the step under way
//! marked with its tool and how long it has been running. A row opens to its thought, tool,
//! arguments, observation (folded when long), tokens, time and any approval decision, each
//! with its own Copy.
//!
//! Live, the steps come from the node's streamed `transcript` (a line when a step's tool
//! starts, another with its result); once the node has finished, from its `transcript` (or
//! `steps`) output.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use agentloom_blocks::agent::Step;
use agentloom_engine::NodeProgress;
use egui::{RichText, Ui};

use crate::run_panel::usage_text;
use crate::theme;

/// The output ports that hold a list of steps.
const STEP_PORTS: [&str; 2] = ["transcript", "steps"];
/// An observation longer than this (characters or lines) is folded to its start.
const FOLDED_CHARS: usize = 400;
const FOLDED_LINES: usize = 8;

/// What the trace keeps between frames.
#[derive(Default)]
pub struct TraceState {
    /// When each step under way was first seen, by run, node and step.
    started: HashMap<(String, String, u64), Instant>,
    /// Observations unfolded by the person, by node and step.
    unfolded: BTreeSet<(String, u64)>,
    /// When the model was first seen thinking after a number of steps, by run and node.
    thinking: HashMap<(String, String, usize), Instant>,
}

impl TraceState {
    pub fn clear(&mut self) {
        self.started.clear();
        self.unfolded.clear();
        self.thinking.clear();
    }
}

/// The steps of `run`, as they stand: streamed while the node works, else its output.
/// `None` for a node that works in no steps.
pub fn steps_of(run: &NodeProgress) -> Option<Vec<Step>> {
    for port in STEP_PORTS {
        if let Some(text) = run.partial.get(port) {
            let steps = Step::trace(text);
            if !steps.is_empty() {
                return Some(steps);
            }
        }
    }
    STEP_PORTS.iter().find_map(|port| {
        let list = run.outputs.get(*port)?.to_json();
        let items = list.as_array()?;
        let steps: Vec<Step> = items
            .iter()
            .map(|item| serde_json::from_value(item.clone()))
            .collect::<Result<_, _>>()
            .ok()?;
        (!steps.is_empty()).then_some(steps)
    })
}

/// The trace of node `node` of run `run_key` (its id, or empty while unknown). `live`: the
/// node is working now, so a step under way counts up its time.
pub fn trace_ui(
    ui: &mut Ui,
    state: &mut TraceState,
    run_key: &str,
    node: &str,
    steps: &[Step],
    live: bool,
) {
    ui.label(RichText::new("Steps").small().color(theme::TEXT_WEAK));
    let now = Instant::now();
    // Forget the start of steps no longer under way.
    state.started.retain(|(run, at, step), _| {
        run != run_key || at != node || steps.iter().any(|s| s.step == *step && s.running && live)
    });
    for step in steps {
        let mut header = format!("step {} · {}", step.step, step.tool_name());
        if step.running {
            if live {
                // From when the tool started, as the step says; else from when it was
                // first seen here.
                let since = *state
                    .started
                    .entry((run_key.to_owned(), node.to_owned(), step.step))
                    .or_insert(now);
                let running_for = step
                    .running_for()
                    .unwrap_or_else(|| now.duration_since(since));
                header.push_str(&format!(" · running {} s", running_for.as_secs()));
                // The seconds count up while nothing else happens: a frame as each begins.
                crate::run_panel::repaint_as_the_second_turns(ui.ctx(), running_for);
            } else {
                header.push_str(" · did not finish");
            }
        } else {
            if step.duration_ms > 0 {
                header.push_str(&format!(" · {}", duration_text(step.duration_ms)));
            }
            if step.invalid {
                header.push_str(" · invalid");
            }
        }
        let color = if step.running {
            theme::ACCENT
        } else if step.invalid {
            theme::WARN
        } else {
            theme::TEXT
        };
        egui::CollapsingHeader::new(RichText::new(header).color(color))
            .id_salt(("trace", node, step.step))
            .default_open(step.running)
            .show(ui, |ui| step_ui(ui, state, node, step));
    }
    if live && !steps.iter().any(|step| step.running) {
        thinking_ui(ui, state, run_key, node, steps);
    }
}

/// The row under the steps while the model decides the next one (no tool under way): how
/// long it has been thinking, counting up.
fn thinking_ui(ui: &mut Ui, state: &mut TraceState, run_key: &str, node: &str, steps: &[Step]) {
    let key = (run_key.to_owned(), node.to_owned(), steps.len());
    state
        .thinking
        .retain(|seen, _| seen.0 != run_key || seen.1 != node || seen.2 == steps.len());
    let since = *state.thinking.entry(key).or_insert_with(Instant::now);
    let thinking_for = since.elapsed();
    ui.label(RichText::new(format!("thinking… {} s", thinking_for.as_secs())).color(theme::ACCENT));
    crate::run_panel::repaint_as_the_second_turns(ui.ctx(), thinking_for);
}

/// One step's parts, in the order they happened.
fn step_ui(ui: &mut Ui, state: &mut TraceState, node: &str, step: &Step) {
    if !step.thought.is_empty() {
        part_ui(ui, step.step, "Thought", &step.thought);
    }
    part_ui(ui, step.step, "Tool", step.tool_name());
    let arguments = serde_json::to_string_pretty(&step.arguments).unwrap_or_default();
    part_ui(ui, step.step, "Arguments", &arguments);
    if let Some(approval) = &step.approval {
        part_ui(ui, step.step, "Approval", approval);
    }
    if step.running {
        ui.label(
            RichText::new("Observation: the tool is running")
                .small()
                .color(theme::TEXT_WEAK),
        );
    } else {
        observation_ui(ui, state, node, step);
    }
    let mut facts = Vec::new();
    let usage = agentloom_core::Usage {
        input_tokens: step.input_tokens,
        output_tokens: step.output_tokens,
        cost_usd: step.cost_usd,
    };
    if !usage.is_zero() {
        facts.push(usage_text(&usage));
    }
    if step.duration_ms > 0 {
        facts.push(format!("tool ran {}", duration_text(step.duration_ms)));
    }
    if !facts.is_empty() {
        ui.label(
            RichText::new(facts.join(" · "))
                .small()
                .color(theme::TEXT_WEAK),
        );
    }
}

/// A titled part of a step with a Copy button for it.
fn part_ui(ui: &mut Ui, step: u64, title: &str, text: &str) {
    ui.horizontal(|ui| {
        ui.label(RichText::new(title).small().color(theme::TEXT_WEAK));
        copy_button(ui, step, title, text);
    });
    ui.label(RichText::new(text).monospace());
}

fn copy_button(ui: &mut Ui, step: u64, title: &str, text: &str) {
    let name = format!("Copy {} of step {step}", title.to_lowercase());
    let button = ui.small_button("Copy").on_hover_text(&name);
    button.widget_info(|| egui::WidgetInfo::labeled(egui::WidgetType::Button, true, &name));
    if button.clicked() {
        ui.ctx().copy_text(text.to_owned());
    }
}

/// The observation, folded to its start when long ("Show all" opens it).
fn observation_ui(ui: &mut Ui, state: &mut TraceState, node: &str, step: &Step) {
    let text = &step.observation;
    ui.horizontal(|ui| {
        ui.label(RichText::new("Observation").small().color(theme::TEXT_WEAK));
        copy_button(ui, step.step, "Observation", text);
    });
    let long = text.chars().count() > FOLDED_CHARS || text.lines().count() > FOLDED_LINES;
    let key = (node.to_owned(), step.step);
    let open = state.unfolded.contains(&key);
    if !long || open {
        ui.label(RichText::new(text).monospace());
    } else {
        let start: String = text
            .lines()
            .take(FOLDED_LINES)
            .collect::<Vec<_>>()
            .join("\n")
            .chars()
            .take(FOLDED_CHARS)
            .collect();
        ui.label(RichText::new(format!("{start}…")).monospace());
    }
    if long {
        let label = if open {
            "Show less".to_owned()
        } else {
            format!("Show all ({} characters)", text.chars().count())
        };
        if ui.small_button(label).clicked() {
            if open {
                state.unfolded.remove(&key);
            } else {
                state.unfolded.insert(key);
            }
        }
    }
}

/// `850 ms`, `4.2 s`.
fn duration_text(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else {
        #[allow(clippy::cast_precision_loss, reason = "a duration shown to a tenth")]
        let seconds = ms as f64 / 1_000.0;
        format!("{seconds:.1} s")
    }
}
