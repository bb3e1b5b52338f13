//! The canvas as the app shows it: the snarl widget with its viewer, the zoom buttons,
//! group titles, the minimap, wire hover and picking, and clicks that inspect or open.

use egui::Pos2;
use egui_snarl::ui::SnarlWidget;

use super::viewer::Viewer;
use super::{ghost, groups, minimap, wire_drop, wire_menu, wiring};
use crate::canvas::model::PaletteDrag;
use crate::document::Document;
use crate::{App, Command, subgraph, theme};

impl App {
    /// Where a canvas (graph) position is on screen. The accessibility tree reports widgets
    /// inside the canvas in graph coordinates.
    pub fn graph_to_screen(&self, pos: Pos2) -> Pos2 {
        self.canvas.transform * pos
    }

    /// The middle of the wire `from.port → to.port` on screen, as last drawn.
    pub fn wire_screen_middle(&self, from: (&str, &str), to: (&str, &str)) -> Option<Pos2> {
        let out_node = self.document.node_by_id(from.0)?;
        let in_node = self.document.node_by_id(to.0)?;
        let output = self
            .document
            .snarl
            .get_node(out_node)?
            .output_index(from.1)?;
        let input = self.document.snarl.get_node(in_node)?.input_index(to.1)?;
        let points = wiring::wire_points(
            &self.canvas,
            &self.document.snarl,
            egui_snarl::OutPinId {
                node: out_node,
                output,
            },
            egui_snarl::InPinId {
                node: in_node,
                input,
            },
        )?;
        Some(self.canvas.transform * points[points.len() / 2])
    }

    /// Where the canvas is on screen.
    pub fn canvas_screen_rect(&self) -> egui::Rect {
        self.canvas.screen_rect
    }

    /// The screen rectangle of the node with this document id, as last drawn.
    pub fn node_screen_rect(&self, id: &str) -> Option<egui::Rect> {
        let node = self.document.node_by_id(id)?;
        let rect = self.canvas.node_rects.get(&node)?;
        Some(self.canvas.transform * *rect)
    }

    /// The screen rectangle of group `id`'s frame, as last drawn.
    pub fn group_screen_rect(&self, id: &str) -> Option<egui::Rect> {
        let group = self.document.groups.iter().find(|g| g.id == id)?;
        let rect = groups::shown_group_rect(group, &self.document.snarl, &self.canvas.node_rects);
        Some(self.canvas.transform * rect)
    }

    /// The canvas widget's id (its selection is read back with it). Snarl's selection can
    /// only be added to, so clearing it starts the widget's state afresh under a new id.
    pub(crate) fn canvas_id(&self) -> egui::Id {
        egui::Id::new("agentloom-canvas").with(self.session.selection_epoch)
    }

    /// The nodes selected on the canvas (shift-click, shift-drag a box, Select all).
    pub fn selected_ids(&self, ctx: &egui::Context) -> Vec<String> {
        self.selected_nodes(ctx)
            .into_iter()
            .filter_map(|n| self.document.snarl.get_node(n).map(|c| c.doc.id.clone()))
            .collect()
    }

    /// The canvas selection: egui-snarl's and the blocks added beside it, each once.
    pub(crate) fn selected_nodes(&self, ctx: &egui::Context) -> Vec<egui_snarl::NodeId> {
        let mut selected = egui_snarl::ui::get_selected_nodes(self.canvas_id(), ctx);
        for node in &self.canvas.also_selected {
            if !selected.contains(node) && self.document.snarl.get_node(*node).is_some() {
                selected.push(*node);
            }
        }
        selected
    }

    /// Whether the pointer is over a window: a layer above the canvas that is not one of
    /// the canvas's own (zoom buttons, minimap, group titles). Keys then belong to it.
    pub(crate) fn pointer_over_window(&self, ctx: &egui::Context) -> bool {
        let Some(layer) = ctx.pointer_hover_pos().and_then(|p| ctx.layer_id_at(p)) else {
            return false;
        };
        let canvas_own = layer.id == zoom_buttons_id()
            || layer.id == minimap::area_id()
            || self
                .document
                .groups
                .iter()
                .any(|g| layer.id == groups::title_area_id(&g.id));
        layer.order != egui::Order::Background && !canvas_own
    }

    /// Selects every block (Edit → Select all).
    pub(crate) fn select_all(&mut self) {
        self.canvas.also_selected = self.document.snarl.node_ids().map(|(id, _)| id).collect();
    }

    /// Empties the canvas selection, keeping the view where it is.
    pub(crate) fn clear_selection(&mut self, ctx: &egui::Context) {
        self.canvas.also_selected.clear();
        if egui_snarl::ui::get_selected_nodes(self.canvas_id(), ctx).is_empty() {
            self.session.last_selection.clear();
            return;
        }
        self.session.selection_epoch += 1;
        self.canvas.set_transform = Some(self.canvas.transform);
        self.session.last_selection.clear();
    }

    /// Zoom out, the zoom level (click: actual size), zoom in and fit, at the canvas's
    /// bottom-right corner.
    pub(crate) fn zoom_buttons_ui(&mut self, ctx: &egui::Context, canvas: egui::Rect) {
        let scale = self.canvas.transform.scaling;
        egui::Area::new(zoom_buttons_id())
            .order(egui::Order::Middle)
            .pivot(egui::Align2::RIGHT_BOTTOM)
            .fixed_pos(canvas.right_bottom() - egui::vec2(10.0, 10.0))
            .show(ctx, |ui| {
                egui::Frame::popup(ui.style()).show(ui, |ui| {
                    ui.horizontal(|ui| {
                        if ui.button("−").on_hover_text("Zoom out").clicked() {
                            self.commands.push(Command::Zoom(1.0 / theme::ZOOM_STEP));
                        }
                        if ui
                            .button(format!("{:.0}%", scale * 100.0))
                            .on_hover_text("Actual size")
                            .clicked()
                        {
                            self.commands.push(Command::ActualSize);
                        }
                        if ui.button("+").on_hover_text("Zoom in").clicked() {
                            self.commands.push(Command::Zoom(theme::ZOOM_STEP));
                        }
                        if ui
                            .button("Fit")
                            .on_hover_text("Fit graph to view")
                            .clicked()
                        {
                            self.commands.push(Command::FitView);
                        }
                    });
                });
            });
    }

    /// The wire under a screen position, when no block is.
    pub(crate) fn wire_under(
        &self,
        pos: Pos2,
    ) -> Option<(egui_snarl::OutPinId, egui_snarl::InPinId)> {
        let at = self.canvas.to_graph(pos);
        if self.canvas.node_rects.values().any(|r| r.contains(at)) {
            return None;
        }
        wiring::wire_at(&self.canvas, &self.document.snarl, at, self.wire_reach())
    }

    /// How far from a wire's middle line a pointer still touches it, in graph units: half
    /// its drawn width and a hand's slack (10 points at 100 %, scaled with the zoom), never
    /// less than 6 points on screen, so a wire zoomed far out can still be hit.
    fn wire_reach(&self) -> f32 {
        const SLACK: f32 = 9.0;
        const LEAST_ON_SCREEN: f32 = 6.0;
        let scale = self.canvas.transform.scaling.max(f32::EPSILON);
        (theme::WIRE_WIDTH / 2.0 + SLACK).max(LEAST_ON_SCREEN / scale)
    }

    /// The picked wire drawn over, and a hovered wire's ends, types and last value.
    pub(crate) fn wire_hover_ui(
        &mut self,
        ctx: &egui::Context,
        pointer: Option<Pos2>,
        canvas: egui::Order,
    ) {
        let snarl = &self.document.snarl;
        if let Some((from, to)) = self.session.selected_wire {
            match wiring::wire_points(&self.canvas, snarl, from, to)
                .filter(|_| snarl.wires().any(|w| w == (from, to)))
            {
                Some(points) => {
                    let on_screen = points.iter().map(|p| self.canvas.transform * *p).collect();
                    ctx.layer_painter(egui::LayerId::new(
                        egui::Order::Middle,
                        egui::Id::new("picked-wire"),
                    ))
                    .add(egui::Shape::line(
                        on_screen,
                        egui::Stroke::new(4.0, theme::ACCENT.gamma_multiply(0.8)),
                    ));
                }
                None => self.session.selected_wire = None,
            }
        }
        let Some(pos) = pointer else { return };
        if ctx.input(|i| i.pointer.any_down())
            || ctx
                .layer_id_at(pos)
                .is_some_and(|layer| layer.order != canvas)
        {
            return;
        }
        if let Some((from, to)) = self.wire_under(pos)
            && let Some(text) = wiring::wire_summary(&self.document.snarl, &self.run, from, to)
        {
            wiring::note_at_cursor(ctx, "wire-hover", pos, &text, theme::TEXT);
        }
    }

    pub(crate) fn canvas_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        let rect = ui.available_rect_before_wrap();
        self.canvas.screen_rect = rect;
        self.fit_when_due();
        let pointer = ctx.input(|i| i.pointer.hover_pos());
        let over_canvas = pointer.is_some_and(|p| rect.contains(p));
        if over_canvas && ctx.input(|i| i.pointer.primary_pressed()) {
            self.document.begin_move();
        }

        let dragged_into = self.session.wire_drag.dragged_into(&self.document.snarl);
        self.document.settle_outputs(dragged_into.as_ref());

        let canvas_layer = ui.layer_id().order;
        let right_clicked_wire = self.canvas_menu_origin(&ctx, pointer, over_canvas, canvas_layer);
        self.plain_wheel_zoom(&ctx, pointer.filter(|_| over_canvas), canvas_layer);
        self.snarl_ui(ui);
        self.wire_gestures_ui(&ctx, pointer, right_clicked_wire);
        self.canvas_overlays_ui(&ctx, rect);
        self.palette_drop_ui(&ctx, pointer.filter(|_| over_canvas));
        self.canvas_clicks(&ctx, pointer.filter(|_| over_canvas), canvas_layer);
        self.wire_hover_ui(&ctx, pointer.filter(|_| over_canvas), canvas_layer);
        self.follow_selection(&ctx);
    }

    /// Over the canvas: the zoom buttons, the group titles and the minimap.
    fn canvas_overlays_ui(&mut self, ctx: &egui::Context, rect: egui::Rect) {
        self.zoom_buttons_ui(ctx, rect);
        if !groups::group_titles_ui(
            ctx,
            &self.canvas,
            &self.document.snarl,
            &self.document.groups,
            &mut self.commands,
        ) {
            self.session.group_title_editing = None;
        }
        if self.canvas.prefs.minimap
            && let Some(view) = minimap::minimap_ui(
                ctx,
                rect,
                &self.canvas,
                &self.document.snarl,
                &self.document.groups,
            )
        {
            self.canvas.set_transform = Some(view);
        }
    }

    /// A block dragged from the palette: where it will go, and where it is dropped.
    fn palette_drop_ui(&mut self, ctx: &egui::Context, on_canvas: Option<Pos2>) {
        // A block dragged from the palette shows where it will go.
        if let Some(payload) = egui::DragAndDrop::payload::<PaletteDrag>(ctx)
            && let Some(pos) = on_canvas
            && let Some(entry) = self.palette.iter().find(|e| e.kind == payload.0)
        {
            ghost::palette_ghost_ui(ctx, &self.canvas, entry, pos);
        }
        // A block dropped from the palette.
        if egui::DragAndDrop::has_payload_of_type::<PaletteDrag>(ctx)
            && ctx.input(|i| i.pointer.any_released())
            && let Some(payload) = egui::DragAndDrop::take_payload::<PaletteDrag>(ctx)
            && let Some(pos) = on_canvas
        {
            self.commands.push(Command::AddBlock {
                kind: payload.0.clone(),
                pos: Some(self.canvas.to_graph(pos)),
            });
        }
    }

    /// Fits the view to the graph when asked, and again while the first frames measure
    /// its nodes or the canvas settles.
    fn fit_when_due(&mut self) {
        if self.session.pending_fit
            || self.session.refits_after_layout > 0
            || self.canvas.fit_is_stale(&self.document.snarl)
        {
            let view = self.canvas.fit_transform(&self.document.snarl);
            self.canvas.set_transform = Some(view);
            self.canvas.remember_fit(view, &self.document.snarl);
            // Before the first frame of a graph its nodes' sizes are guesses, which moves
            // the fitted view off centre (a node cut by the side panel): fit again, measured.
            let guessed = self
                .document
                .snarl
                .node_ids()
                .any(|(id, _)| !self.canvas.node_rects.contains_key(&id));
            self.session.refits_after_layout = if self.session.pending_fit && guessed {
                2
            } else {
                self.session.refits_after_layout.saturating_sub(1)
            };
            self.session.pending_fit = false;
        }
    }

    /// Where canvas menus open (where the pointer was right-clicked or a wire was dropped,
    /// known before the canvas widget runs, which opens a dropped wire's menu in the same
    /// frame), and the wire right-clicked, if one was.
    fn canvas_menu_origin(
        &mut self,
        ctx: &egui::Context,
        pointer: Option<Pos2>,
        over_canvas: bool,
        canvas_layer: egui::Order,
    ) -> Option<(egui_snarl::OutPinId, egui_snarl::InPinId)> {
        // A right-click where a wire is hovered opens that wire's menu: the same hit test
        // as the hover, so whatever shows a wire's note offers Disconnect.
        let right_clicked_wire = pointer
            .filter(|_| over_canvas && ctx.input(|i| i.pointer.secondary_clicked()))
            .filter(|pos| {
                ctx.layer_id_at(*pos)
                    .is_none_or(|layer| layer.order == canvas_layer)
            })
            .and_then(|pos| self.wire_under(pos));
        self.canvas.right_click_on_wire = right_clicked_wire.is_some();
        if let Some(pos) = pointer.filter(|_| over_canvas)
            && ctx.input(|i| i.pointer.secondary_clicked() || i.pointer.primary_released())
            && ctx
                .layer_id_at(pos)
                .is_none_or(|layer| layer.order == canvas_layer)
        {
            self.canvas.menu_origin = Some(self.canvas.to_graph(pos));
        }

        right_clicked_wire
    }

    /// With "Zoom with the mouse wheel" on, the plain wheel over the canvas zooms about
    /// the pointer (Shift+wheel still scrolls; Ctrl+wheel zooms either way).
    fn plain_wheel_zoom(
        &mut self,
        ctx: &egui::Context,
        on_canvas: Option<Pos2>,
        canvas_layer: egui::Order,
    ) {
        if self.canvas.prefs.wheel_zooms
            && let Some(pos) = on_canvas
            && ctx
                .layer_id_at(pos)
                .is_none_or(|layer| layer.order == canvas_layer)
            && ctx.input(|i| i.modifiers.is_none())
        {
            let turned = ctx.input_mut(|i| std::mem::take(&mut i.smooth_scroll_delta));
            if turned != egui::Vec2::ZERO {
                let factor = (theme::WHEEL_ZOOM_SPEED * (turned.x + turned.y)).exp();
                self.canvas.set_transform = Some(self.canvas.zoom_about(pos, factor));
            }
        }
    }

    /// The snarl widget with its viewer: the nodes, their pins and the wires.
    fn snarl_ui(&mut self, ui: &mut egui::Ui) {
        // Text inside nodes is not selectable: a press on a node's title grabs the node.
        ui.style_mut().interaction.selectable_labels = false;
        let canvas_id = self.canvas_id();
        let Document { snarl, groups, .. } = &mut self.document;
        let mut viewer = Viewer::new(
            &self.palette,
            &self.run,
            &self.problems.by_node,
            &mut self.canvas,
            self.session.inspected,
            groups.as_slice(),
            &mut self.commands,
        );
        viewer.debug_marks = self.debugger.marks();
        SnarlWidget::new()
            .id(canvas_id)
            .style(theme::snarl_style())
            .show(snarl, &mut viewer, ui);
    }

    /// A dropped wire's block search, a right-clicked wire's menu, and the wire being
    /// dragged (refused connections said).
    fn wire_gestures_ui(
        &mut self,
        ctx: &egui::Context,
        pointer: Option<Pos2>,
        right_clicked_wire: Option<(egui_snarl::OutPinId, egui_snarl::InPinId)>,
    ) {
        wire_drop::wire_drop_ui(
            ctx,
            &mut self.canvas,
            &self.palette,
            &self.document.snarl,
            &mut self.commands,
        );
        // A right-clicked wire is picked and offers Disconnect.
        if let Some((from, to)) = self.canvas.wire_menu_request.take().or(right_clicked_wire)
            && let Some(at) = pointer
        {
            self.session.selected_wire = Some((from, to));
            self.session.wire_menu = Some(wire_menu::WireMenu::new(from, to, at));
        }
        if let Some(reason) =
            self.session
                .wire_drag
                .update(ctx, &self.canvas, &self.document.snarl, pointer)
        {
            self.notice = Some(format!("Connection refused: {reason}"));
        }
        if ctx.input(|i| i.pointer.primary_released()) {
            self.commands.push(Command::FinishMove);
        }
    }

    /// Clicks on the canvas: a press takes the keyboard back, a plain click inspects a
    /// node (or the graph, or picks a wire), a double-click opens a called graph.
    fn canvas_clicks(
        &mut self,
        ctx: &egui::Context,
        on_canvas: Option<Pos2>,
        canvas_layer: egui::Order,
    ) {
        // A plain click on a node shows it in the inspector; on empty canvas, the graph.
        // A press on the canvas takes the keyboard from whichever widget has it, so that
        // the canvas's keys work again. egui leaves it with a widget pressed on, and Tab
        // from the inspector walks it onto the canvas widget itself.
        if let Some(pos) = on_canvas
            && ctx.input(|i| i.pointer.any_pressed())
            && ctx
                .layer_id_at(pos)
                .is_none_or(|layer| layer.order == canvas_layer)
        {
            ctx.memory_mut(egui::Memory::stop_text_input);
        }
        if let Some(pos) = on_canvas
            && ctx.input(|i| i.pointer.primary_clicked() && i.modifiers.is_none())
            && ctx
                .layer_id_at(pos)
                .is_none_or(|layer| layer.order == canvas_layer)
        {
            let hit = self.node_at(self.canvas.to_graph(pos));
            // A plain click replaces the selection: the clicked node alone, a wire, or
            // nothing.
            self.clear_selection(ctx);
            self.session.inspected = hit;
            self.session.selected_wire = if hit.is_none() {
                self.wire_under(pos)
            } else {
                None
            };
        }
        // A double-click on a node that calls a graph file opens that file.
        if let Some(pos) = on_canvas
            && ctx.input(|i| {
                i.pointer
                    .button_double_clicked(egui::PointerButton::Primary)
            })
            && ctx
                .layer_id_at(pos)
                .is_none_or(|layer| layer.order == canvas_layer)
            && let Some(hit) = self.node_at(self.canvas.to_graph(pos))
            && let Some(node) = self.document.snarl.get_node(hit)
            && let Some(child) = subgraph::child_file(&node.doc, self.graph_file.as_deref())
        {
            match child {
                Ok(path) => self.commands.push(Command::OpenCalled(path)),
                Err(message) => self.notice = Some(message),
            }
        }
    }

    /// Keeps the inspector on the one selected node, and a shift-click's selection whole.
    fn follow_selection(&mut self, ctx: &egui::Context) {
        let mut selected = self.selected_nodes(ctx);
        // Shift adds to the selection (a click or a box): the block a plain click picked
        // counts as selected, so it stays in (snarl's selection starts with what shift
        // touched).
        if self.session.last_selection.is_empty()
            && !selected.is_empty()
            && ctx.input(|i| i.modifiers.shift)
            && let Some(shown) = self.session.inspected
            && !selected.contains(&shown)
            && self.document.snarl.get_node(shown).is_some()
        {
            self.canvas.also_selected.push(shown);
            selected.push(shown);
        }
        if selected != self.session.last_selection {
            if let [one] = selected.as_slice() {
                self.session.inspected = Some(*one);
            }
            self.session.last_selection = selected;
        }
    }

    /// The topmost node at graph position `at`.
    pub(crate) fn node_at(&self, at: Pos2) -> Option<egui_snarl::NodeId> {
        self.canvas
            .node_rects
            .iter()
            .filter(|(node, rect)| {
                rect.contains(at) && self.document.snarl.get_node(**node).is_some()
            })
            .map(|(node, _)| *node)
            .max_by_key(|node| node.0)
    }

    pub(crate) fn view_center(&self) -> Pos2 {
        let view = self.canvas.viewport();
        if view.is_finite() && view.width() > 0.0 {
            view.center() - theme::NODE_SIZE_GUESS / 2.0
        } else {
            Pos2::new(100.0, 100.0)
        }
    }
}

/// The zoom buttons' layer, over the canvas.
fn zoom_buttons_id() -> egui::Id {
    egui::Id::new("zoom-buttons")
}
