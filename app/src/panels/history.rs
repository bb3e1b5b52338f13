//! The run history: past runs from the SQLite run log, those of the graph shown unless
//! "All graphs" is ticked; a live run is listed at once with its state. Pick one to see its
//! values on the canvas again.

use agentloom_engine::{RunRow, RunStatus};
use egui::{RichText, Ui};

use crate::Command;
use crate::panels::debug_command::DebugCommand;
use crate::panels::debugger_fork::Lineage;
use crate::run_panel::short_id;
use crate::theme;

/// How many runs the history lists.
pub const HISTORY_LIMIT: usize = 100;

/// The history panel. `graph_name` is the graph shown; `all_graphs` lists every graph's
/// runs (ticking it asks for them).
pub fn history_ui(
    ui: &mut Ui,
    runs: &[RunRow],
    shown: Option<&str>,
    graph_name: &str,
    all_graphs: &mut bool,
    lineage: &Lineage,
    commands: &mut Vec<Command>,
) {
    ui.horizontal(|ui| {
        ui.heading("History");
        if ui.small_button("Refresh").clicked() {
            commands.push(Command::RefreshHistory);
        }
        if ui.checkbox(all_graphs, "All graphs").changed() {
            commands.push(Command::RefreshHistory);
        }
    });
    if runs.is_empty() {
        let empty = if *all_graphs {
            "No runs recorded yet.".to_owned()
        } else {
            format!("No runs of “{graph_name}” yet.")
        };
        ui.label(RichText::new(empty).color(theme::TEXT_WEAK));
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
            // Forks under their parent, indented.
            for (index, depth) in lineage.rows(runs) {
                let run = &runs[index];
                let fork_of = lineage.parent(&run.id);
                let color = match run.status {
                    RunStatus::Completed => theme::OK,
                    RunStatus::Running => theme::ACCENT,
                    RunStatus::Failed => theme::ERROR,
                    RunStatus::Cancelled | RunStatus::Interrupted | RunStatus::Waiting => {
                        theme::WARN
                    }
                };
                let facts = format!(
                    "{}{} · {}",
                    "↳ ".repeat(depth),
                    run.status.as_str(),
                    age(now_ms, run.started_at_ms)
                );
                let mut more = String::new();
                if let Some(ms) = run.duration_ms {
                    more.push_str(&format!(" · {ms} ms"));
                }
                if let Some(worker) = &run.worker {
                    more.push_str(&format!(" · on {worker}"));
                }
                let selected = shown == Some(run.id.as_str());
                // One line per run, so as many runs as fit are listed; where runs of several
                // graphs are listed, a line above with the graph's name, shortened in its
                // middle to fit (both ends of a name tell graphs apart), the rest of the
                // row in the tooltip.
                let button = if *all_graphs {
                    let text = format!("{}\n{facts}", fit_name(ui, &run.graph_name));
                    egui::Button::selectable(selected, RichText::new(text).color(color))
                } else {
                    let text = format!("{facts}{more}");
                    egui::Button::selectable(selected, RichText::new(text).color(color)).truncate()
                };
                let response = ui.add(button);
                let mut hover = format!(
                    "{}\n{facts}{more}\nrun {}",
                    run.graph_name,
                    short_id(&run.id)
                );
                if let Some(parent) = fork_of {
                    hover.push_str(&format!("\nfork of run {}", short_id(parent)));
                }
                if let Some(error) = &run.error {
                    hover.push('\n');
                    hover.push_str(error);
                }
                let response = response.on_hover_text(hover);
                if response.clicked() {
                    commands.push(Command::OpenRun(run.id.clone()));
                }
                response.context_menu(|ui| {
                    if ui.button("Replay").clicked() {
                        commands.push(Command::ReplayRun(run.id.clone()));
                        ui.close();
                    }
                    if ui
                        .button("Add to cases")
                        .on_hover_text(
                            "Write a case from this run's inputs, its outputs as what to expect",
                        )
                        .clicked()
                    {
                        commands.push(Command::AddRunToCases(run.id.clone()));
                        ui.close();
                    }
                    if fork_of.is_some()
                        && ui
                            .button("Compare with parent")
                            .on_hover_text("This fork beside the run it was forked from, the outputs that differ marked")
                            .clicked()
                    {
                        commands.push(Command::Debug(DebugCommand::CompareWithParent(
                            run.id.clone(),
                        )));
                        ui.close();
                    }
                });
            }
        });
}

/// `name` in one line of the row's width, elided in its middle when long.
fn fit_name(ui: &Ui, name: &str) -> String {
    let width = ui.available_width() - 2.0 * ui.spacing().button_padding.x;
    let font = egui::TextStyle::Button.resolve(ui.style());
    let fits = |text: &str| {
        ui.painter()
            .layout_no_wrap(text.to_owned(), font.clone(), egui::Color32::WHITE)
            .size()
            .x
            <= width
    };
    if fits(name) {
        return name.to_owned();
    }
    // The longest middle-elided name that fits, down to a few characters each side.
    let (mut low, mut high) = (MIN_NAME_CHARS, name.chars().count());
    while low < high {
        let mid = (low + high).div_ceil(2);
        if fits(&elide_middle(name, mid)) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    elide_middle(name, low)
}

/// The fewest characters of a name left when it is elided.
const MIN_NAME_CHARS: usize = 7;

/// `name` in at most `max` characters: its start and end around "…".
fn elide_middle(name: &str, max: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= max {
        return name.to_owned();
    }
    let kept = max.saturating_sub(1);
    let tail = kept / 2;
    let head = kept - tail;
    let mut short: String = chars[..head].iter().collect();
    short.push('…');
    short.extend(&chars[chars.len() - tail..]);
    short
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
    use super::{age, elide_middle};

    #[test]
    fn a_long_name_keeps_both_ends() {
        assert_eq!(elide_middle("Summarize issues", 40), "Summarize issues");
        assert_eq!(
            elide_middle("Summarize open issues weekly", 11),
            "Summa…eekly"
        );
        assert_eq!(elide_middle("Grüße aus Köln", 6), "Grü…ln");
    }

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
