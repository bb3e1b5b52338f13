//! A block dragged from the palette, drawn where it will be placed: its frame, title and
//! pins at the current zoom, following the pointer over the canvas.

use agentloom_core::{ERROR_PORT, PortSpec, TOOL_PORT};
use egui::{Pos2, RichText, Vec2};

use super::model::PaletteEntry;
use super::state::CanvasState;
use crate::theme;

/// The smallest text in the ghost, however far out the view is.
const MIN_TEXT: f32 = 4.0;

/// Draws `entry`'s ghost for a block placed at `at` (screen), where the dropped block goes.
pub fn palette_ghost_ui(ctx: &egui::Context, state: &CanvasState, entry: &PaletteEntry, at: Pos2) {
    let scale = state.transform.scaling;
    // A block of the same kind laid out before gives the frame's size and its offset from
    // the block's position (snarl's margin); else the guess.
    let frame = state
        .kind_geometry
        .get(&egui::Id::new(entry.kind.as_str()))
        .filter(|g| g.laid_out)
        .map_or_else(
            || {
                let margin = state.node_margin;
                egui::Rect::from_min_size(
                    Pos2::new(-margin.left, -margin.top),
                    theme::NODE_SIZE_GUESS,
                )
            },
            |g| g.rect,
        );
    let size = frame.size();
    egui::Area::new(egui::Id::new("palette-ghost"))
        .order(egui::Order::Tooltip)
        .fixed_pos(at + frame.min.to_vec2() * scale)
        .interactable(false)
        .constrain(false)
        .show(ctx, |ui| {
            ui.set_clip_rect(state.screen_rect);
            // Text and spacing at the canvas's zoom, as the block will be drawn.
            for font in ui.style_mut().text_styles.values_mut() {
                font.size = (font.size * scale).max(MIN_TEXT);
            }
            ui.style_mut().spacing.item_spacing *= scale;
            ui.style_mut().spacing.interact_size.y *= scale;
            let frame = egui::Frame::NONE
                .fill(theme::NODE_BG.gamma_multiply(0.7))
                .stroke(egui::Stroke::new(1.5, theme::ACCENT))
                .corner_radius(6.0)
                .inner_margin(6.0 * scale);
            let response = frame.show(ui, |ui| {
                ui.set_min_size(size * scale - Vec2::splat(12.0 * scale));
                ui.set_max_width((size.x - 12.0) * scale);
                ui.label(RichText::new(&entry.title).strong());
                if scale >= theme::LOD_SCALE {
                    // A placed block hides its `error` and `tool` outputs until asked for.
                    let outputs: Vec<PortSpec> = entry
                        .outputs
                        .iter()
                        .filter(|p| p.name != ERROR_PORT && p.name != TOOL_PORT)
                        .cloned()
                        .collect();
                    let rows = entry.inputs.len().max(outputs.len());
                    for row in 0..rows {
                        ui.horizontal(|ui| {
                            let name = |ports: &[PortSpec]| {
                                ports.get(row).map(|p| p.name.clone()).unwrap_or_default()
                            };
                            ui.label(RichText::new(name(&entry.inputs)).small());
                            ui.with_layout(
                                egui::Layout::right_to_left(egui::Align::Center),
                                |ui| {
                                    ui.label(RichText::new(name(&outputs)).small());
                                },
                            );
                        });
                    }
                }
            });
            let title = entry.title.clone();
            response.response.widget_info(move || {
                egui::WidgetInfo::labeled(egui::WidgetType::Other, true, format!("Placing {title}"))
            });
        });
}
