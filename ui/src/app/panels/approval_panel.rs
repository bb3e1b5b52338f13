//! Pending approvals in the run panel: the action with its arguments in a JSON editor;
//! Approve (with the arguments as edited), or Reject with a message.

use agentloom_core::{ApprovalDecision, ApprovalRequest, Value};
use egui::{RichText, Ui};
use tokio::sync::oneshot;

use crate::app::Command;
use crate::app::theme;

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

/// Every pending approval with its editor and buttons, in a window over the canvas (the
/// run panel is too short for an editor).
pub fn approvals_ui(ui: &mut Ui, approvals: &mut [ApprovalPrompt], commands: &mut Vec<Command>) {
    if approvals.is_empty() {
        return;
    }
    ui.label(RichText::new(format!("{} approval(s) pending", approvals.len())).color(theme::WARN));
    egui::Window::new("Approval needed")
        .collapsible(false)
        .resizable(true)
        .default_width(420.0)
        .anchor(egui::Align2::CENTER_BOTTOM, egui::vec2(0.0, -150.0))
        .show(ui.ctx(), |ui| {
            for prompt in approvals {
                let id = ("approval", prompt.node.clone());
                ui.push_id(id, |ui| {
                    ui.group(|ui| prompt_ui(ui, prompt, commands));
                });
            }
        });
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
                .desired_width(200.0),
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
