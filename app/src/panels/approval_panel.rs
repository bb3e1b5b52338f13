//! Pending approvals, each in a window beside its waiting node: the action with its
//! arguments in a JSON editor; Approve (with the arguments as edited), or Reject with a
//! message.

use agentloom_core::{ApprovalDecision, ApprovalRequest, Value};
use egui::{RichText, Ui};
use tokio::sync::oneshot;

use crate::Command;
use crate::theme;

/// A node waiting for a person's decision.
pub struct ApprovalPrompt {
    pub node: String,
    pub request: ApprovalRequest,
    /// The arguments as pretty JSON, as the person edits them.
    pub arguments_text: String,
    /// Why, when rejecting.
    pub message: String,
    /// Why the edited arguments cannot be used.
    pub problem: Option<String>,
    /// The live run's answer channel; `None` for a request stored with a waiting run.
    reply: Option<oneshot::Sender<ApprovalDecision>>,
    /// Its window has been put beside its node (once; then it stays until dragged).
    placed: bool,
    /// Tells this request's window from earlier ones for the same node.
    window_serial: u128,
}

impl ApprovalPrompt {
    fn new(
        node: String,
        request: ApprovalRequest,
        reply: Option<oneshot::Sender<ApprovalDecision>>,
    ) -> Self {
        let arguments_text =
            serde_json::to_string_pretty(&request.arguments.to_json()).unwrap_or_default();
        Self {
            node,
            request,
            arguments_text,
            message: String::new(),
            problem: None,
            reply,
            placed: false,
            window_serial: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos()),
        }
    }

    /// A request of the live run.
    pub fn live(
        node: String,
        request: ApprovalRequest,
        reply: oneshot::Sender<ApprovalDecision>,
    ) -> Self {
        Self::new(node, request, Some(reply))
    }

    /// A request stored with a waiting run (from the history).
    pub fn stored(node: String, request: ApprovalRequest) -> Self {
        Self::new(node, request, None)
    }

    /// Whether the request is stored with a waiting run (deciding it resumes the run)
    /// rather than asked by the live run.
    pub fn is_stored(&self) -> bool {
        self.reply.is_none()
    }

    /// Sends `decision` to the live run; whether it was still listening.
    pub fn send(mut self, decision: ApprovalDecision) -> bool {
        self.reply
            .take()
            .is_some_and(|reply| reply.send(decision).is_ok())
    }

    /// The run stops: the node gets a rejection.
    pub fn cancel(self) {
        self.send(ApprovalDecision::Rejected {
            message: "the run was stopped".to_owned(),
        });
    }

    /// Approval with the arguments as edited, or why they cannot be used.
    fn approval(&self) -> Result<ApprovalDecision, String> {
        let json: serde_json::Value = serde_json::from_str(&self.arguments_text)
            .map_err(|e| format!("the arguments are not valid JSON: {e}"))?;
        if self.request.arguments.to_json().is_object() && !json.is_object() {
            return Err("the arguments must stay a JSON object of named fields".to_owned());
        }
        Ok(ApprovalDecision::Approved {
            arguments: Value::from_json(json),
        })
    }
}

/// The width an approval window opens with (its row of buttons and reason fits in it).
const WINDOW_WIDTH: f32 = 360.0;
/// The gap between a waiting node and its approval window.
const GAP: f32 = 24.0;

/// Each pending approval in a window of its own beside its node (`node_rects`: where each
/// one's node is on screen, `canvas`: the canvas), with its editor and buttons. Each new
/// request's window opens where it covers neither the node, wherever the canvas shows it
/// now, nor the badges the node gains while it waits, inside the canvas; then it stays
/// there (the node's changes do not move it) until the person drags it elsewhere. (A
/// window's place is remembered by egui, across restarts too: a later request for the same
/// node would open where the first one was left.)
pub fn approvals_ui(
    ctx: &egui::Context,
    approvals: &mut [ApprovalPrompt],
    node_rects: &[Option<egui::Rect>],
    canvas: egui::Rect,
    commands: &mut Vec<Command>,
) {
    for (prompt, node_rect) in approvals.iter_mut().zip(node_rects) {
        // Each request's window is new to egui, which would otherwise open it where an
        // earlier one for the node was left (its memory outlives the run, and the app).
        let mut window = egui::Window::new("Approval needed")
            .id(egui::Id::new((
                "approval",
                prompt.node.as_str(),
                prompt.window_serial,
            )))
            .collapsible(false)
            .resizable(true)
            .movable(true)
            .default_width(WINDOW_WIDTH)
            .constrain_to(ctx.content_rect());
        if !prompt.placed
            && let Some(rect) = node_rect
        {
            window = window.current_pos(beside(*rect, canvas, ctx.content_rect()));
            prompt.placed = true;
        }
        window.show(ctx, |ui| {
            ui.push_id(("approval", prompt.node.clone()), |ui| {
                prompt_ui(ui, prompt, commands);
            });
        });
    }
}

/// About how tall an approval window opens (its question, three rows of arguments and
/// its buttons).
const WINDOW_HEIGHT: f32 = 180.0;
/// Room for the badge lines a node gains while it waits.
const BADGES: f32 = 3.0 * 18.0;

/// Where a window beside the node at `node` opens: to its right, else its left, else below
/// it (room left for the badges it gains), else above, always inside `canvas` (a node
/// panned out of view gets its window at the nearest edge); where the canvas is too small
/// for any of these to clear the node, over the panels beside it, inside `screen`.
fn beside(node: egui::Rect, canvas: egui::Rect, screen: egui::Rect) -> egui::Pos2 {
    let size = egui::vec2(WINDOW_WIDTH, WINDOW_HEIGHT);
    let waiting_node = node
        .expand2(egui::vec2(0.0, BADGES * 0.5))
        .translate(egui::vec2(0.0, BADGES * 0.5));
    let wanted = [
        egui::pos2(node.right() + GAP, node.top()),
        egui::pos2(node.left() - GAP - WINDOW_WIDTH, node.top()),
        egui::pos2(node.left(), waiting_node.bottom() + GAP),
        egui::pos2(node.left(), node.top() - GAP - WINDOW_HEIGHT),
    ];
    let inside = |pos: egui::Pos2, area: egui::Rect| {
        let max = (area.max - size).max(area.min);
        pos.clamp(area.min, max)
    };
    let covered = |pos: egui::Pos2| {
        egui::Rect::from_min_size(pos, size)
            .intersect(waiting_node)
            .area()
            .max(0.0)
    };
    let in_canvas = wanted.map(|pos| inside(pos, canvas));
    if let Some(clear) = in_canvas.iter().find(|pos| covered(**pos) == 0.0) {
        return *clear;
    }
    let on_screen = wanted.map(|pos| inside(pos, screen));
    (in_canvas.into_iter().chain(on_screen))
        .min_by(|a, b| covered(*a).total_cmp(&covered(*b)))
        .unwrap_or(canvas.min)
}

fn prompt_ui(ui: &mut Ui, prompt: &mut ApprovalPrompt, commands: &mut Vec<Command>) {
    ui.label(
        RichText::new(format!(
            "`{}` ({}) waits for approval",
            prompt.node, prompt.request.action
        ))
        .color(theme::WARN),
    );
    // Where it goes: the node's configuration with its inputs, which the arguments alone
    // may not show (a configured URL).
    if let Some(details) = &prompt.request.details {
        let shown = serde_json::to_string(&details.to_json()).unwrap_or_default();
        ui.label(RichText::new(format!("Will run with {shown}")).small());
    }
    // Text arguments of several lines (a file's content) as they read, not as `\n` escapes.
    if let Some(fields) = prompt.request.arguments.to_json().as_object() {
        for (name, value) in fields {
            if let Some(text) = value.as_str().filter(|text| text.contains('\n')) {
                ui.label(RichText::new(format!("{name}, as it reads:")).small());
                egui::ScrollArea::vertical()
                    .id_salt(("approval text", name.as_str()))
                    .max_height(120.0)
                    .show(ui, |ui| {
                        ui.add(egui::Label::new(RichText::new(text).monospace()).selectable(true));
                    });
            }
        }
    }
    let label = ui.label(RichText::new("Arguments").small());
    ui.add(
        egui::TextEdit::multiline(&mut prompt.arguments_text)
            .code_editor()
            .desired_rows(3)
            .desired_width(f32::INFINITY),
    )
    .on_hover_text("JSON; edit before approving")
    .labelled_by(label.id);
    if let Some(problem) = &prompt.problem {
        ui.label(RichText::new(problem).color(theme::ERROR));
    }
    ui.horizontal(|ui| {
        if ui.button("Approve").clicked() {
            match prompt.approval() {
                Ok(decision) => {
                    prompt.problem = None;
                    commands.push(Command::Approve(prompt.node.clone(), decision));
                }
                Err(problem) => prompt.problem = Some(problem),
            }
        }
        let label = ui.label("Reason");
        ui.add(
            egui::TextEdit::singleline(&mut prompt.message)
                .hint_text("why, if rejecting")
                .desired_width(140.0),
        )
        .labelled_by(label.id);
        if ui.button("Reject").clicked() {
            commands.push(Command::Approve(
                prompt.node.clone(),
                ApprovalDecision::Rejected {
                    message: prompt.message.trim().to_owned(),
                },
            ));
        }
    });
}
