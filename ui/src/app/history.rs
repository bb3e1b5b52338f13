//! The run history: past runs from the SQLite run log; pick one to see its values on the
//! canvas again.

use agentloom_engine::{RunRow, RunStatus};
use egui::{RichText, Ui};

use super::Command;
use super::run_panel::short_id;
use super::theme;

/// How many runs the history lists.
pub const HISTORY_LIMIT: usize = 100;

/// The history panel.
pub fn history_ui(ui: &mut Ui, runs: &[RunRow], shown: Option<&str>, commands: &mut Vec<Command>) {
    ui.horizontal(|ui| {
        ui.heading("History");
        if ui.small_button("Refresh").clicked() {
            commands.push(Command::RefreshHistory);
        }
    });
    if runs.is_empty() {
        ui.label(RichText::new("No runs recorded yet.").color(theme::TEXT_WEAK));
        return;
    }
    egui::ScrollArea::vertical()
        .id_salt("history")
        .show(ui, |ui| {
            for run in runs {
                let color = match run.status {
                    RunStatus::Completed => theme::OK,
                    RunStatus::Running => theme::ACCENT,
                    RunStatus::Failed => theme::ERROR,
                    RunStatus::Cancelled | RunStatus::Interrupted => theme::WARN,
                };
                let text = format!(
                    "{} {} · {} · {}",
                    short_id(&run.id),
                    run.graph_name,
                    run.status.as_str(),
                    run.duration_ms
                        .map_or_else(String::new, |ms| format!("{ms} ms"))
                );
                let selected = shown == Some(run.id.as_str());
                let response = ui.selectable_label(selected, RichText::new(text).color(color));
                let response = match &run.error {
                    Some(error) => response.on_hover_text(error),
                    None => response,
                };
                if response.clicked() {
                    commands.push(Command::OpenRun(run.id.clone()));
                }
            }
        });
}
