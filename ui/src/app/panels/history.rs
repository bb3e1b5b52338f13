//! The run history: past runs from the SQLite run log; pick one to see its values on the
//! canvas again.

use agentloom_engine::{RunRow, RunStatus};
use egui::{RichText, Ui};

use crate::app::Command;
use crate::app::run_panel::short_id;
use crate::app::theme;

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
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    // The list fills the panel (no shrinking to a couple of rows), scrolling past that.
    egui::ScrollArea::vertical()
        .id_salt("history")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            for run in runs {
                let color = match run.status {
                    RunStatus::Completed => theme::OK,
                    RunStatus::Running => theme::ACCENT,
                    RunStatus::Failed => theme::ERROR,
                    RunStatus::Cancelled | RunStatus::Interrupted | RunStatus::Waiting => {
                        theme::WARN
                    }
                };
                let mut text = format!(
                    "{} · {} · {} · {}",
                    run.graph_name,
                    run.status.as_str(),
                    age(now_ms, run.started_at_ms),
                    run.duration_ms
                        .map_or_else(String::new, |ms| format!("{ms} ms"))
                );
                if let Some(worker) = &run.worker {
                    text.push_str(&format!(" · on {worker}"));
                }
                let selected = shown == Some(run.id.as_str());
                // One line per run, so as many runs as fit are listed.
                let response = ui.add(
                    egui::Button::selectable(selected, RichText::new(text).color(color)).truncate(),
                );
                let hover = match &run.error {
                    Some(error) => format!("run {}\n{error}", short_id(&run.id)),
                    None => format!("run {}", short_id(&run.id)),
                };
                let response = response.on_hover_text(hover);
                if response.clicked() {
                    commands.push(Command::OpenRun(run.id.clone()));
                }
                response.context_menu(|ui| {
                    if ui.button("Replay").clicked() {
                        commands.push(Command::ReplayRun(run.id.clone()));
                        ui.close();
                    }
                });
            }
        });
}

/// How long ago a run started, for a person: "just now", "5 min ago", "3 h ago", "2 d ago".
fn age(now_ms: u64, started_ms: u64) -> String {
    let seconds = now_ms.saturating_sub(started_ms) / 1000;
    match seconds {
        0..60 => "just now".to_owned(),
        60..3_600 => format!("{} min ago", seconds / 60),
        3_600..86_400 => format!("{} h ago", seconds / 3_600),
        _ => format!("{} d ago", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::age;

    #[test]
    fn ages_read_like_a_person_says_them() {
        let now = 1_800_000_000_000;
        assert_eq!(age(now, now), "just now");
        assert_eq!(age(now, now + 5_000), "just now", "a clock set back");
        assert_eq!(age(now, now - 59_999), "just now");
        assert_eq!(age(now, now - 5 * 60_000), "5 min ago");
        assert_eq!(age(now, now - 3 * 3_600_000 - 1), "3 h ago");
        assert_eq!(age(now, now - 2 * 86_400_000), "2 d ago");
    }
}
