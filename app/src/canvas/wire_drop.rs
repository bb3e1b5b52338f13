//! The menu a wire dropped on empty canvas opens: the blocks that can take (or feed) it,
//! searchable; the one chosen is added where the wire was dropped, wired. It stays inside
//! the canvas, and a wire runs from the pins to it while it is open.

use agentloom_core::{ERROR_PORT, PortSpec, compatibility};
use egui::{Pos2, RichText};
use egui_snarl::Snarl;

use super::model::{PaletteEntry, Pin, WireDrop, search_entries};
use super::state::CanvasState;
use super::wiring::WireCurve;
use crate::Command;
use crate::document::CanvasNode;
use crate::theme;

/// Room kept between the menu and the canvas's edges.
const MARGIN: f32 = 8.0;
/// The shortest its list of blocks gets, however little room the canvas has.
const MIN_LIST: f32 = 80.0;

/// Whether block `entry` can be wired to all of `pins`: one of its inputs takes each
/// output, one of its outputs (not `error`) feeds each input.
fn fits(entry: &PaletteEntry, pins: &[Pin], snarl: &Snarl<CanvasNode>) -> bool {
    pins.iter().all(|pin| {
        let (node, index, output) = match *pin {
            Pin::Out(p) => (p.node, p.output, true),
            Pin::In(p) => (p.node, p.input, false),
        };
        let Some(canvas) = snarl.get_node(node) else {
            return false;
        };
        let ports = if output {
            &canvas.outputs
        } else {
            &canvas.inputs
        };
        ports.get(index).is_some_and(|port| {
            if output {
                let takes = |i: &PortSpec| compatibility(&port.ty, &i.ty).is_ok();
                entry.inputs.iter().any(takes)
            } else {
                let feeds =
                    |o: &PortSpec| o.name != ERROR_PORT && compatibility(&o.ty, &port.ty).is_ok();
                entry.outputs.iter().any(feeds)
            }
        })
    })
}

/// The wires from the dropped pins to the menu at `to` (screen), as snarl draws a wire
/// being dragged.
fn paint_wires(ctx: &egui::Context, state: &CanvasState, snarl: &Snarl<CanvasNode>, to: Pos2) {
    let painter = ctx
        .layer_painter(egui::LayerId::new(
            egui::Order::Middle,
            egui::Id::new("wire-drop-wires"),
        ))
        .with_clip_rect(state.screen_rect);
    let to = state.to_graph(to);
    for pin in &state
        .wire_drop
        .iter()
        .flat_map(|d| d.pins.clone())
        .collect::<Vec<_>>()
    {
        let (node, output, index) = match *pin {
            Pin::Out(p) => (p.node, true, p.output),
            Pin::In(p) => (p.node, false, p.input),
        };
        let Some(info) = snarl.get_node_info(node) else {
            continue;
        };
        let at = state.pin_pos(node, info.pos, output, index);
        let (from, end) = if output { (at, to) } else { (to, at) };
        let points: Vec<Pos2> = WireCurve::between(state, from, end)
            .points()
            .into_iter()
            .map(|p| state.transform * p)
            .collect();
        painter.add(egui::Shape::line(
            points,
            egui::Stroke::new(2.0, theme::TEXT_WEAK),
        ));
    }
}

/// Shows the open menu, if any; closes it once a block is chosen, on Escape, or on a
/// click elsewhere.
pub fn wire_drop_ui(
    ctx: &egui::Context,
    state: &mut CanvasState,
    palette: &[PaletteEntry],
    snarl: &Snarl<CanvasNode>,
    commands: &mut Vec<Command>,
) {
    let Some(drop) = state.wire_drop.clone() else {
        return;
    };
    if drop.fresh {
        state.wire_menu_query.clear();
    }
    // Read before the search field, which takes Escape for itself.
    let escaped = ctx.input(|i| i.key_pressed(egui::Key::Escape));
    let at = state.transform * drop.at;
    paint_wires(ctx, state, snarl, at);
    let inside = state.screen_rect.shrink(MARGIN);
    // It opens downwards from the drop, or upwards when there is more room above.
    let (below, above) = (inside.bottom() - at.y, at.y - inside.top());
    let (pivot, room) = if below >= above {
        (egui::Align2::LEFT_TOP, below)
    } else {
        (egui::Align2::LEFT_BOTTOM, above)
    };
    let mut chosen = false;
    let shown = egui::Area::new(egui::Id::new("wire-drop-menu"))
        .order(egui::Order::Foreground)
        .pivot(pivot)
        .fixed_pos(at)
        .constrain_to(inside)
        .show(ctx, |ui| {
            egui::Frame::menu(ui.style()).show(ui, |ui| {
                ui.label(RichText::new("Add a block wired here").strong());
                let search = ui.add(
                    egui::TextEdit::singleline(&mut state.wire_menu_query)
                        .hint_text("Search blocks")
                        .desired_width(200.0),
                );
                search.widget_info(|| {
                    egui::WidgetInfo::labeled(
                        egui::WidgetType::TextEdit,
                        true,
                        "Search blocks to wire",
                    )
                });
                if !search.has_focus() && state.wire_menu_query.is_empty() {
                    search.request_focus();
                }
                ui.separator();
                let query = state.wire_menu_query.clone();
                let fitting: Vec<&PaletteEntry> = search_entries(palette, &query)
                    .into_iter()
                    .filter(|entry| fits(entry, &drop.pins, snarl))
                    .collect();
                if fitting.is_empty() {
                    ui.label(RichText::new("No block fits this pin").color(theme::TEXT_WEAK));
                }
                let mut add = |entry: &PaletteEntry| {
                    commands.push(Command::AddWired {
                        kind: entry.kind.clone(),
                        pos: drop.at,
                        pins: drop.pins.clone(),
                    });
                    chosen = true;
                };
                // Enter adds the best match, wired.
                if let Some(first) = fitting.first()
                    && !query.trim().is_empty()
                    && ui.input(|i| i.key_pressed(egui::Key::Enter))
                {
                    add(first);
                    return;
                }
                // The list scrolls rather than run out of the canvas.
                let header = ui.cursor().min.y - ui.min_rect().top();
                let room = room - header - 2.0 * MARGIN;
                egui::ScrollArea::vertical()
                    .max_height(room.max(MIN_LIST))
                    .show(ui, |ui| {
                        for entry in fitting {
                            if ui
                                .button(&entry.title)
                                .on_hover_text(&entry.description)
                                .clicked()
                            {
                                add(entry);
                            }
                        }
                    });
            });
        });
    let dismissed = !drop.fresh && (shown.response.clicked_elsewhere() || escaped);
    state.wire_drop = if chosen || dismissed {
        None
    } else {
        Some(WireDrop {
            fresh: false,
            ..drop
        })
    };
    state.wire_menu_open = state.wire_drop.is_some();
}
