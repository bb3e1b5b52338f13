//! Quick add: Space or Tab over the canvas opens a search at the pointer; typing narrows the
//! blocks (fuzzy), Enter adds the first one there, Escape closes.

use egui::{Pos2, RichText};

use super::model::{PaletteEntry, search_entries};
use crate::Command;
use crate::theme;

/// How many matches the quick add lists.
const SHOWN: usize = 8;

/// An open quick-add search.
pub struct QuickAdd {
    /// Where the block goes, in graph coordinates.
    pub at: Pos2,
    /// Where the search shows, on screen.
    pub screen: Pos2,
    pub query: String,
    focus: bool,
}

impl QuickAdd {
    pub fn new(at: Pos2, screen: Pos2) -> Self {
        QuickAdd {
            at,
            screen,
            query: String::new(),
            focus: true,
        }
    }
}

/// Shows the quick add when it is open.
pub fn quick_add_ui(
    ctx: &egui::Context,
    open: &mut Option<QuickAdd>,
    entries: &[PaletteEntry],
    commands: &mut Vec<Command>,
) {
    let Some(quick) = open else { return };
    let mut close = false;
    let shown = egui::Area::new(egui::Id::new("quick-add"))
        .order(egui::Order::Foreground)
        .fixed_pos(quick.screen)
        .constrain(true)
        .show(ctx, |ui| {
            egui::Frame::popup(ui.style()).show(ui, |ui| {
                ui.set_width(280.0);
                let search = ui.add(
                    egui::TextEdit::singleline(&mut quick.query)
                        .hint_text("Add a block…")
                        .desired_width(f32::INFINITY),
                );
                search.widget_info(|| {
                    egui::WidgetInfo::labeled(egui::WidgetType::TextEdit, true, "Add a block")
                });
                if quick.focus {
                    search.request_focus();
                    quick.focus = false;
                }
                let found = search_entries(entries, &quick.query);
                if found.is_empty() {
                    ui.label(
                        RichText::new(format!("No block matches “{}”.", quick.query.trim()))
                            .color(theme::TEXT_WEAK),
                    );
                }
                let mut chosen = None;
                for entry in found.iter().take(SHOWN) {
                    let button = egui::Button::new(&entry.title)
                        .right_text(RichText::new(&entry.kind).small().color(theme::TEXT_WEAK))
                        .min_size(egui::vec2(ui.available_width(), 0.0));
                    if ui.add(button).on_hover_text(&entry.description).clicked() {
                        chosen = Some(entry.kind.clone());
                    }
                }
                let (enter, escape) = ui.input(|i| {
                    (
                        i.key_pressed(egui::Key::Enter),
                        i.key_pressed(egui::Key::Escape),
                    )
                });
                if enter && chosen.is_none() {
                    chosen = found.first().map(|e| e.kind.clone());
                }
                if let Some(kind) = chosen {
                    commands.push(Command::AddBlock {
                        kind,
                        pos: Some(quick.at),
                    });
                    close = true;
                }
                if escape {
                    close = true;
                }
            });
        });
    // A click beside it closes it, as a menu does.
    if shown.response.clicked_elsewhere() {
        close = true;
    }
    if close {
        *open = None;
    }
}
