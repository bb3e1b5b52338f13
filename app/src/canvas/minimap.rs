//! The minimap: every block as a small rectangle, every group as a frame and the visible
//! part of the graph as a frame, see-through in the canvas's bottom-left corner (View →
//! Minimap hides it); a click or drag there moves the view.

use egui::emath::TSTransform;
use egui::{Color32, Pos2, Rect, Sense, Stroke};
use egui_snarl::Snarl;

use super::groups::shown_group_rect;
use super::model::{MINIMAP_MARGIN, MINIMAP_SIZE};
use super::state::CanvasState;
use agentloom_core::GroupDoc;

use crate::document::CanvasNode;
use crate::theme;

/// Up to this many blocks are drawn one by one.
const MAX_DRAWN: usize = 1500;

/// Draws the minimap in the corner of `canvas`; returns the view to show when it was clicked
/// or dragged.
pub fn minimap_ui(
    ctx: &egui::Context,
    canvas: Rect,
    state: &CanvasState,
    snarl: &Snarl<CanvasNode>,
    groups: &[GroupDoc],
) -> Option<TSTransform> {
    let mut bounds = Rect::NOTHING;
    let rects: Vec<Rect> = snarl
        .nodes_pos_ids()
        .map(|(id, pos, _)| {
            let size = state
                .node_rects
                .get(&id)
                .map_or(theme::NODE_SIZE_GUESS, |r| r.size());
            Rect::from_min_size(pos, size)
        })
        .collect();
    let group_rects: Vec<Rect> = groups
        .iter()
        .map(|g| shown_group_rect(g, snarl, &state.node_rects))
        .collect();
    for rect in rects.iter().chain(&group_rects) {
        bounds = bounds.union(*rect);
    }
    let view = state.viewport();
    if !bounds.is_finite() || !view.is_finite() {
        return None;
    }
    let bounds = bounds.union(view).expand(40.0);
    let mut moved = None;
    egui::Area::new(area_id())
        .order(egui::Order::Middle)
        .pivot(egui::Align2::LEFT_BOTTOM)
        .fixed_pos(canvas.left_bottom() + egui::vec2(MINIMAP_MARGIN, -MINIMAP_MARGIN))
        .show(ctx, |ui| {
            let (response, painter) = ui.allocate_painter(MINIMAP_SIZE, Sense::click_and_drag());
            let area = response.rect;
            let scale = (area.width() / bounds.width()).min(area.height() / bounds.height());
            let offset = area.center().to_vec2() - bounds.center().to_vec2() * scale;
            let to_map = |p: Pos2| (p.to_vec2() * scale + offset).to_pos2();
            // See-through, so that what it covers still shows.
            painter.rect_filled(area, 4.0, theme::PANEL_BG.gamma_multiply(0.6));
            for rect in &group_rects {
                let shown = Rect::from_min_max(to_map(rect.min), to_map(rect.max));
                painter.rect_filled(shown, 2.0, theme::GROUP_FILL.gamma_multiply(0.8));
                painter.rect_stroke(
                    shown,
                    2.0,
                    Stroke::new(1.0, theme::GROUP_BORDER),
                    egui::StrokeKind::Inside,
                );
            }
            // A huge graph is one shape, not thousands, so the minimap costs no frame time.
            if rects.len() <= MAX_DRAWN {
                for rect in &rects {
                    let shown = Rect::from_min_max(to_map(rect.min), to_map(rect.max));
                    painter.rect_filled(shown, 1.0, theme::NODE_BORDER.gamma_multiply(0.8));
                }
            } else {
                let all = Rect::from_min_max(to_map(bounds.min), to_map(bounds.max));
                painter.rect_filled(all.shrink(6.0), 2.0, theme::NODE_BORDER.gamma_multiply(0.6));
            }
            let frame = Rect::from_min_max(to_map(view.min), to_map(view.max)).intersect(area);
            painter.rect_stroke(
                frame,
                2.0,
                Stroke::new(1.5, theme::ACCENT),
                egui::StrokeKind::Inside,
            );
            painter.rect_stroke(
                area,
                4.0,
                Stroke::new(1.0, Color32::from_gray(70)),
                egui::StrokeKind::Inside,
            );
            response.widget_info(|| {
                egui::WidgetInfo::labeled(egui::WidgetType::Other, true, "Minimap")
            });
            if (response.clicked() || response.dragged())
                && let Some(pointer) = response.interact_pointer_pos()
            {
                // Centre the view on the graph point under the pointer.
                let target = ((pointer.to_vec2() - offset) / scale).to_pos2();
                let zoom = state.transform.scaling;
                moved = Some(TSTransform::new(
                    canvas.center().to_vec2() - target.to_vec2() * zoom,
                    zoom,
                ));
            }
        });
    moved
}

/// The minimap's layer, over the canvas.
pub(super) fn area_id() -> egui::Id {
    egui::Id::new("minimap")
}
