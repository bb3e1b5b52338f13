//! File → Examples: the example graphs shipped with the app, each with its description;
//! one opens as a new untitled document.

use egui::RichText;

use crate::Command;
use crate::theme;
pub use agentloom_runner::examples::{EXAMPLES, example, write_examples};

/// The gallery window, while `open`.
pub fn examples_ui(ctx: &egui::Context, open: &mut bool, commands: &mut Vec<Command>) {
    if !*open {
        return;
    }
    let mut keep = true;
    egui::Window::new("Examples")
        .collapsible(false)
        .default_width(420.0)
        .open(&mut keep)
        .show(ctx, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                for (index, (file, _)) in EXAMPLES.iter().enumerate() {
                    let Some(doc) = example(index) else { continue };
                    ui.horizontal(|ui| {
                        if ui.button(RichText::new(&doc.name).strong()).clicked() {
                            commands.push(Command::OpenExample(index));
                        }
                        ui.label(RichText::new(*file).small().color(theme::TEXT_WEAK));
                    });
                    ui.label(&doc.description);
                    ui.separator();
                }
            });
        });
    *open = keep;
}
