//! The problems list: what validation finds wrong with the graph; clicking one selects the
//! node it is about.

use agentloom_core::Problem;
use egui::{RichText, Ui};

use crate::Command;
use crate::theme;

/// The problems panel.
pub fn problems_ui(ui: &mut Ui, problems: &[Problem], commands: &mut Vec<Command>) {
    if problems.is_empty() {
        ui.label(RichText::new("No problems").color(theme::OK));
        return;
    }
    ui.label(
        RichText::new(crate::run_panel::counted(
            problems.len(),
            "problem",
            "problems",
        ))
        .color(theme::WARN)
        .strong(),
    );
    egui::ScrollArea::vertical()
        .id_salt("problems")
        .max_height(160.0)
        .show(ui, |ui| {
            for problem in problems {
                let response =
                    ui.selectable_label(false, RichText::new(&problem.message).color(theme::WARN));
                let response = response.on_hover_text(&problem.path);
                if response.clicked()
                    && let Some(node) = &problem.node
                {
                    commands.push(Command::InspectById(node.clone()));
                }
            }
        });
}
