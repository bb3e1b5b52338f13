//! A run paused at a breakpoint, in the run panel: where (with a breadcrumb through
//! `graph.call` and `for_each` items), the node's resolved inputs (before) or outputs
//! (after) as JSON to edit, checked against the ports' types as the person types, and
//! Continue (F5), Step (F10), Stop (Shift+F5).

use agentloom_core::{Value, ValueMap};
use agentloom_engine::{BreakAt, BreakpointDecision, BreakpointHandler, BreakpointHit, HitPort};
use egui::{RichText, Ui};
use tokio::sync::{mpsc, oneshot};

use super::debug_command::DebugCommand;
use crate::{Command, theme};

/// A node a run is paused at.
pub struct Paused {
    pub run_id: String,
    pub hit: BreakpointHit,
    /// The values as pretty JSON, as the person edits them.
    pub text: String,
    /// Why the edited values cannot be used (checked as they are typed).
    pub problem: Option<String>,
    /// The live run's answer; `None` for a pause stored with a waiting run (answering it
    /// resumes that run).
    reply: Option<oneshot::Sender<BreakpointDecision>>,
}

/// What the run task hands the window: a pause and where its answer goes.
pub struct PauseMsg {
    run_id: String,
    hit: BreakpointHit,
    reply: oneshot::Sender<BreakpointDecision>,
}

/// The app's breakpoint handler: the pause goes to the window, the run waits (holding no
/// slot) for the person's answer. `None` when the window goes away first: the pause is
/// stored in the run log, so the run stays `waiting` and resumes at it later.
pub struct UiBreakpoints {
    pub tx: mpsc::UnboundedSender<PauseMsg>,
    pub ctx: egui::Context,
}

#[agentloom_core::async_trait]
impl BreakpointHandler for UiBreakpoints {
    async fn at_breakpoint(&self, run_id: &str, hit: &BreakpointHit) -> Option<BreakpointDecision> {
        let (reply, answer) = oneshot::channel();
        let msg = PauseMsg {
            run_id: run_id.to_owned(),
            hit: hit.clone(),
            reply,
        };
        self.tx.send(msg).ok()?;
        self.ctx.request_repaint();
        answer.await.ok()
    }
}

/// The values of a pause as the JSON object the editor shows.
fn values_json(values: &ValueMap) -> String {
    serde_json::to_string_pretty(&Value::object(values.clone()).to_json()).unwrap_or_default()
}

impl Paused {
    fn new(
        run_id: String,
        hit: BreakpointHit,
        reply: Option<oneshot::Sender<BreakpointDecision>>,
    ) -> Self {
        Paused {
            text: values_json(&hit.values),
            run_id,
            hit,
            problem: None,
            reply,
        }
    }

    /// A pause of the live run.
    pub fn live(msg: PauseMsg) -> Self {
        Paused::new(msg.run_id, msg.hit, Some(msg.reply))
    }

    /// A pause stored with a waiting run (shown from the history).
    pub fn stored(run_id: String, hit: BreakpointHit) -> Self {
        Paused::new(run_id, hit, None)
    }

    pub fn is_stored(&self) -> bool {
        self.reply.is_none()
    }

    /// The values as edited, each checked against its port's type; why not, naming the
    /// port and the type, when they cannot be used.
    pub fn edited(&self) -> Result<ValueMap, String> {
        let given = typed_values(&self.text, &self.hit.node, what(self.hit.at))?;
        self.hit.edited(&given)
    }

    /// Checks the text again after an edit.
    pub fn recheck(&mut self) {
        self.problem = self.edited().err();
    }

    /// Sends `decision` to the live run; whether it was still listening.
    pub fn send(mut self, decision: BreakpointDecision) -> bool {
        self.reply
            .take()
            .is_some_and(|reply| reply.send(decision).is_ok())
    }

    /// The decision the person asked for with `command`, with the values as edited.
    pub fn decision(&self, command: &DebugCommand) -> Result<BreakpointDecision, String> {
        Ok(match command {
            DebugCommand::Continue => BreakpointDecision::Continue {
                values: self.edited()?,
            },
            DebugCommand::Step => BreakpointDecision::Step {
                values: self.edited()?,
            },
            _ => BreakpointDecision::Stop,
        })
    }
}

/// What the values of a pause are: the node's inputs before it, its outputs after.
fn what(at: BreakAt) -> &'static str {
    match at {
        BreakAt::Before => "inputs",
        BreakAt::After => "outputs",
    }
}

/// Where the pause is, as a breadcrumb: the graph shown, then each `graph.call` node and
/// `for_each` item down to the node (`call/each/3/render` → `graph › call › each ›
/// item 3 › render`).
pub fn breadcrumb(graph: &str, node_path: &str) -> String {
    let mut parts = vec![graph.to_owned()];
    for segment in node_path.split('/') {
        if segment.parse::<u64>().is_ok() {
            parts.push(format!("item {segment}"));
        } else {
            parts.push(segment.to_owned());
        }
    }
    parts.join(" › ")
}

/// The head of a pause, kept in view above the run panel's scrolling part: where it is and
/// the buttons.
pub fn pause_header_ui(ui: &mut Ui, paused: &Paused, graph: &str, commands: &mut Vec<Command>) {
    let hit = &paused.hit;
    let why = if hit.stepping { "Stepped" } else { "Paused" };
    ui.label(
        RichText::new(format!(
            "{why} {} `{}`",
            hit.at.as_str(),
            hit.node.rsplit('/').next().unwrap_or(&hit.node)
        ))
        .color(theme::WARN)
        .strong(),
    );
    if hit.node.contains('/') {
        let crumb = ui.label(RichText::new(breadcrumb(graph, &hit.node)).small());
        crumb.widget_info(|| {
            egui::WidgetInfo::labeled(
                egui::WidgetType::Label,
                true,
                format!("Paused in {}", breadcrumb(graph, &hit.node)),
            )
        });
    }
    ui.horizontal(|ui| {
        for (label, key, command) in [
            ("Continue", "F5", DebugCommand::Continue),
            ("Step", "F10", DebugCommand::Step),
            ("Stop", "Shift+F5", DebugCommand::Stop),
        ] {
            let hover = match command {
                DebugCommand::Continue => "Run on with these values to the next breakpoint",
                DebugCommand::Step => "Run on with these values and stop before the next node",
                _ => "Stop the run here",
            };
            if ui
                .button(label)
                .on_hover_text(format!("{hover} ({key})"))
                .clicked()
            {
                commands.push(Command::Debug(command));
            }
        }
    });
}

/// The values of a pause in a JSON editor, checked as they are typed.
pub fn pause_values_ui(ui: &mut Ui, paused: &mut Paused) {
    let title = match paused.hit.at {
        BreakAt::Before => "Inputs it will run with",
        BreakAt::After => "Outputs it will hand on",
    };
    let title = RichText::new(title).small().color(theme::TEXT_WEAK);
    if values_editor_ui(ui, title, &mut paused.text, &paused.hit.ports) {
        paused.recheck();
    }
    problem_ui(ui, paused.problem.as_deref());
}

/// A node's values as JSON to edit, under `title`, the ports' types on hover; whether the
/// text changed.
pub fn values_editor_ui(
    ui: &mut Ui,
    title: RichText,
    text: &mut String,
    ports: &[HitPort],
) -> bool {
    let label = ui.label(title);
    let types: Vec<String> = ports
        .iter()
        .map(|p| format!("{}: {}", p.name, p.ty))
        .collect();
    ui.add(
        egui::TextEdit::multiline(text)
            .code_editor()
            .desired_rows(4)
            .desired_width(f32::INFINITY),
    )
    .on_hover_text(format!("JSON, one field a port ({})", types.join(", ")))
    .labelled_by(label.id)
    .changed()
}

/// Why the values typed cannot be used, if they cannot.
pub fn problem_ui(ui: &mut Ui, problem: Option<&str>) {
    if let Some(problem) = problem {
        ui.label(RichText::new(problem).color(theme::ERROR));
    }
}

/// The values typed as JSON for `node` (`what` they are: inputs, outputs), by port; why not
/// when it is not JSON or not an object of ports.
pub fn typed_values(text: &str, node: &str, what: &str) -> Result<ValueMap, String> {
    let json: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| format!("the {what} of `{node}` are not valid JSON: {e}"))?;
    let serde_json::Value::Object(fields) = json else {
        return Err(format!(
            "the {what} of `{node}` must stay a JSON object, one field a port"
        ));
    };
    Ok(fields
        .into_iter()
        .map(|(port, value)| (port, Value::from_json(value)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::breadcrumb;

    #[test]
    fn a_breadcrumb_names_each_call_and_item() {
        assert_eq!(breadcrumb("main", "render"), "main › render");
        assert_eq!(
            breadcrumb("main", "call/each/3/render"),
            "main › call › each › item 3 › render"
        );
    }
}
