//! Groups: titled frames on the canvas (comments) that carry the blocks inside them when
//! moved by their handle. Saved in the graph file (`GraphDoc::groups`); they do not change how
//! the graph runs.

use std::collections::HashMap;

use agentloom_core::GroupDoc;
use egui::{Pos2, Rect, RichText, Vec2};
use egui_snarl::{NodeId, Snarl};

use super::state::CanvasState;
use crate::Command;
use crate::document::{CanvasNode, Document, canvas_pos};
use crate::theme;

/// Room around grouped blocks, and above them for the title.
const PAD: f32 = 24.0;
const TITLE_ROOM: f32 = 40.0;

/// A group's frame in canvas coordinates.
pub fn group_rect(group: &GroupDoc) -> Rect {
    let [x, y, w, h] = group.rect;
    let min = canvas_pos([x, y]);
    let size = canvas_pos([w.max(0.0), h.max(0.0)]);
    Rect::from_min_size(min, size.to_vec2())
}

/// A group's frame as drawn: around the blocks inside its saved frame as they are drawn
/// now (their badges come and go, and the frame follows), or the saved frame when it holds
/// none.
pub fn shown_group_rect(
    group: &GroupDoc,
    snarl: &Snarl<CanvasNode>,
    node_rects: &HashMap<NodeId, Rect>,
) -> Rect {
    let saved = group_rect(group);
    let inside = snarl
        .nodes_pos_ids()
        .map(|(id, pos, _)| {
            node_rects
                .get(&id)
                .copied()
                .unwrap_or_else(|| Rect::from_min_size(pos, theme::NODE_SIZE_GUESS))
        })
        .filter(|rect| saved.contains(rect.center()))
        .fold(Rect::NOTHING, Rect::union);
    if inside.is_finite() {
        Rect::from_min_max(
            inside.min - egui::vec2(PAD, PAD + TITLE_ROOM),
            inside.max + egui::vec2(PAD, PAD),
        )
    } else {
        saved
    }
}

/// A new group framing `rects` (or a default frame at `at` when there are none).
pub fn group_around(id: String, rects: &[Rect], at: Pos2) -> GroupDoc {
    let bounds = rects.iter().fold(Rect::NOTHING, |all, r| all.union(*r));
    let frame = if bounds.is_finite() {
        Rect::from_min_max(
            bounds.min - egui::vec2(PAD, PAD + TITLE_ROOM),
            bounds.max + egui::vec2(PAD, PAD),
        )
    } else {
        Rect::from_min_size(at, egui::vec2(320.0, 200.0))
    };
    GroupDoc {
        id,
        title: "Comment".to_owned(),
        rect: [
            f64::from(frame.min.x),
            f64::from(frame.min.y),
            f64::from(frame.width()),
            f64::from(frame.height()),
        ],
    }
}

/// A group id not used yet.
pub fn fresh_group_id(groups: &[GroupDoc]) -> String {
    (1..)
        .map(|n| format!("group_{n}"))
        .find(|id| groups.iter().all(|g| &g.id != id))
        .unwrap_or_else(|| "group".to_owned())
}

impl Document {
    /// Adds a group (one undo step).
    pub fn add_group(&mut self, group: GroupDoc) {
        self.checkpoint();
        self.groups.push(group);
    }

    /// Retitles group `id`. Typing goes on in one undo step: `new_step` is true for the
    /// first key.
    pub fn set_group_title(&mut self, id: &str, title: String, new_step: bool) {
        if new_step {
            self.checkpoint();
        } else {
            self.touch();
        }
        if let Some(group) = self.groups.iter_mut().find(|g| g.id == id) {
            group.title = title;
        }
    }

    /// Removes group `id`'s frame, its blocks staying (one undo step).
    pub fn remove_group(&mut self, id: &str) {
        if self.groups.iter().any(|g| g.id == id) {
            self.checkpoint();
            self.groups.retain(|g| g.id != id);
        }
    }

    /// Moves group `id` by `delta` with the blocks whose middle is inside it.
    pub fn move_group(&mut self, id: &str, delta: Vec2, node_rects: &HashMap<NodeId, Rect>) {
        let Some(group) = self.groups.iter_mut().find(|g| g.id == id) else {
            return;
        };
        let frame = group_rect(group);
        group.rect[0] += f64::from(delta.x);
        group.rect[1] += f64::from(delta.y);
        let inside: Vec<NodeId> = self
            .snarl
            .nodes_pos_ids()
            .filter(|(node, pos, _)| {
                let size = node_rects
                    .get(node)
                    .map_or(theme::NODE_SIZE_GUESS, |r| r.size());
                frame.contains(Rect::from_min_size(*pos, size).center())
            })
            .map(|(node, _, _)| node)
            .collect();
        for node in inside {
            if let Some(info) = self.snarl.get_node_info_mut(node) {
                info.pos += delta;
            }
        }
        self.touch();
    }
}

/// Each group's title bar over the canvas, clipped to it: a handle to drag it, its title
/// to edit (as wide as the title, never cut), a button to remove it. Returns whether a
/// title has the keyboard.
pub fn group_titles_ui(
    ctx: &egui::Context,
    state: &CanvasState,
    snarl: &Snarl<CanvasNode>,
    groups: &[GroupDoc],
    commands: &mut Vec<Command>,
) -> bool {
    let mut typing = false;
    for group in groups {
        let frame = state.transform * shown_group_rect(group, snarl, &state.node_rects);
        if !frame.intersects(state.screen_rect) {
            continue;
        }
        egui::Area::new(title_area_id(&group.id))
            .order(egui::Order::Middle)
            .fixed_pos(frame.min + egui::vec2(6.0, 6.0))
            .constrain(false)
            .show(ctx, |ui| {
                // Over the canvas only, never over the panels beside it.
                ui.set_clip_rect(state.screen_rect);
                ui.horizontal(|ui| {
                    let handle = ui
                        .add(
                            egui::Label::new(RichText::new("Move").color(theme::TEXT_WEAK))
                                .sense(egui::Sense::drag()),
                        )
                        .on_hover_text("Drag to move the group with its blocks");
                    if handle.dragged() {
                        ctx.set_cursor_icon(egui::CursorIcon::Grabbing);
                        let delta = handle.drag_delta() / state.transform.scaling;
                        if delta != Vec2::ZERO {
                            commands.push(Command::MoveGroup {
                                id: group.id.clone(),
                                delta,
                            });
                        }
                    }
                    let mut title = group.title.clone();
                    let font = egui::TextStyle::Heading.resolve(ui.style());
                    let title_width = ctx
                        .fonts_mut(|f| f.layout_no_wrap(title.clone(), font, theme::TEXT).size().x);
                    let edit = ui.add(
                        egui::TextEdit::singleline(&mut title)
                            .desired_width(
                                (title_width + TITLE_SLACK)
                                    .max(frame.width() - 140.0)
                                    .clamp(
                                        MIN_TITLE_WIDTH,
                                        MAX_TITLE_WIDTH.max(title_width + TITLE_SLACK),
                                    ),
                            )
                            .font(egui::TextStyle::Heading),
                    );
                    edit.widget_info(|| {
                        egui::WidgetInfo::labeled(egui::WidgetType::TextEdit, true, "Group title")
                    });
                    typing |= edit.has_focus();
                    if edit.changed() {
                        commands.push(Command::SetGroupTitle {
                            id: group.id.clone(),
                            title,
                        });
                    }
                    if ui
                        .small_button("×")
                        .on_hover_text("Remove the group (its blocks stay)")
                        .clicked()
                    {
                        commands.push(Command::RemoveGroup(group.id.clone()));
                    }
                });
            });
    }
    typing
}

/// Room after a group's title for the text cursor and a letter typed.
const TITLE_SLACK: f32 = 16.0;
/// The narrowest and, for a title that fits, the widest title field.
const MIN_TITLE_WIDTH: f32 = 80.0;
const MAX_TITLE_WIDTH: f32 = 400.0;

/// The layer of a group's title, over the canvas.
pub(super) fn title_area_id(group: &str) -> egui::Id {
    egui::Id::new("group-title").with(group)
}
