//! "Save changes?" before the window closes or another graph replaces the one shown.

use super::prompts::Prompts;
use crate::Command;

/// "Save changes?" about the graph `name`, while the window is closing or another graph
/// waits to replace it.
pub(crate) fn close_prompt_ui(
    ctx: &egui::Context,
    prompts: &Prompts,
    name: &str,
    commands: &mut Vec<Command>,
) {
    let (save, discard) = if prompts.close {
        (Command::SaveAndClose, Command::DiscardAndClose)
    } else if prompts.discard.is_some() {
        (Command::SaveAndContinue, Command::DiscardAndContinue)
    } else {
        return;
    };
    let response = egui::Modal::new(egui::Id::new("close_prompt")).show(ctx, |ui| {
        ui.heading("Save changes?");
        ui.label(format!("“{name}” has changes that are not saved."));
        ui.horizontal(|ui| {
            if ui.button("Save").clicked() {
                commands.push(save);
            }
            if ui.button("Don't save").clicked() {
                commands.push(discard);
            }
            if ui.button("Cancel").clicked() {
                commands.push(Command::CancelClose);
            }
        });
    });
    // Escape or a click beside the prompt keeps the window open.
    if response.should_close() {
        commands.push(Command::CancelClose);
    }
}
