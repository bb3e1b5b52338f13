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
/// one's node is on screen, `canvas`: the canvas), with its editor and buttons. A window opens where it
/// covers neither the node nor the badges the node gains while it waits, and stays there
/// (the node's changes do not move it) until the person drags it elsewhere.
pub fn approvals_ui(
    ctx: &egui::Context,
    approvals: &mut [ApprovalPrompt],
    node_rects: &[Option<egui::Rect>],
    canvas: egui::Rect,
    commands: &mut Vec<Command>,
) {
    for (prompt, node_rect) in approvals.iter_mut().zip(node_rects) {
        let mut window = egui::Window::new("Approval needed")
            .id(egui::Id::new(("approval", prompt.node.as_str())))
            .collapsible(false)
            .resizable(true)
            .movable(true)
            .default_width(WINDOW_WIDTH)
            .constrain_to(ctx.content_rect());
        if let Some(rect) = node_rect {
            window = window.default_pos(beside(*rect, canvas));
        }
        window.show(ctx, |ui| {
            ui.push_id(("approval", prompt.node.clone()), |ui| {
                prompt_ui(ui, prompt, commands);
            });
        });
    }
}

/// Where a window beside the node at `node` opens: to its right, else its left, else
/// below it (room left for the badges it gains), inside `canvas` where there is room.
fn beside(node: egui::Rect, canvas: egui::Rect) -> egui::Pos2 {
    let right = node.right() + GAP;
    if right + WINDOW_WIDTH <= canvas.right() {
        return egui::pos2(right, node.top());
    }
    let left = node.left() - GAP - WINDOW_WIDTH;
    if left >= canvas.left() {
        return egui::pos2(left, node.top());
    }
    // Below: the node grows by a few badge lines while it waits.
    egui::pos2(
        node.left().max(canvas.left()),
        node.bottom() + GAP + 3.0 * 18.0,
    )
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
