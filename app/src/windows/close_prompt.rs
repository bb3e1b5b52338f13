//! "Save changes?" before the window closes or another graph replaces the one shown.

use crate::{App, Command};

impl App {
    /// "Save changes?" before the window closes or another graph replaces this one.
    pub(crate) fn close_prompt_ui(&mut self, ctx: &egui::Context) {
        let (save, discard) = if self.prompts.close {
            (Command::SaveAndClose, Command::DiscardAndClose)
        } else if self.prompts.discard.is_some() {
            (Command::SaveAndContinue, Command::DiscardAndContinue)
        } else {
            return;
        };
        let response = egui::Modal::new(egui::Id::new("close_prompt")).show(ctx, |ui| {
            ui.heading("Save changes?");
            ui.label(format!(
                "“{}” has changes that are not saved.",
                self.document.name
            ));
            ui.horizontal(|ui| {
                if ui.button("Save").clicked() {
                    self.commands.push(save);
                }
                if ui.button("Don't save").clicked() {
                    self.commands.push(discard);
                }
                if ui.button("Cancel").clicked() {
                    self.commands.push(Command::CancelClose);
                }
            });
        });
        // Escape or a click beside the prompt keeps the window open.
        if response.should_close() {
            self.commands.push(Command::CancelClose);
        }
    }

    /// Asks the window to close; with unsaved changes a prompt shows first.
    pub(crate) fn handle_close(&mut self, ctx: &egui::Context) {
        if ctx.input(|i| i.viewport().close_requested()) && !self.prompts.allow_close {
            if self.document.dirty {
                ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
                self.prompts.close = true;
            } else if let Some(data) = &self.data {
                data.clear_autosave();
            }
        }
    }
}
