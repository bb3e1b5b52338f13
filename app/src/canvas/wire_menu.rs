//! The menu a right-click on a wire opens (instead of removing the wire at once).

use egui::{Id, Pos2};
use egui_snarl::{InPinId, OutPinId};

use crate::Command;

/// An open wire menu: the wire, and where it was right-clicked (screen).
pub struct WireMenu {
    pub from: OutPinId,
    pub to: InPinId,
    pub at: Pos2,
    /// Opened this frame: the click that opened it does not close it.
    fresh: bool,
}

impl WireMenu {
    pub fn new(from: OutPinId, to: InPinId, at: Pos2) -> Self {
        Self {
            from,
            to,
            at,
            fresh: true,
        }
    }
}

/// Shows the menu. Returns false once it is done: an item was chosen, Escape was pressed
/// or the pointer clicked elsewhere.
pub fn wire_menu_ui(ctx: &egui::Context, menu: &mut WireMenu, commands: &mut Vec<Command>) -> bool {
    let shown = egui::Area::new(Id::new("wire-menu"))
        .order(egui::Order::Foreground)
        .fixed_pos(menu.at)
        .show(ctx, |ui| {
            egui::Frame::menu(ui.style())
                .show(ui, |ui| {
                    let chosen = ui.button("Disconnect").clicked();
                    if chosen {
                        commands.push(Command::DeleteWire(menu.from, menu.to));
                    }
                    chosen
                })
                .inner
        });
    let fresh = std::mem::take(&mut menu.fresh);
    let dismissed = !fresh
        && (shown.response.clicked_elsewhere() || ctx.input(|i| i.key_pressed(egui::Key::Escape)));
    !(shown.inner || dismissed)
}
