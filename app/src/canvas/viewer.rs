//! The node-graph canvas: the egui-snarl viewer for [`CanvasNode`]s.
//!
//! Pins come from each block's declared ports. The viewer changes no graph: wiring,
//! unwiring and adding a block at a dropped wire are commands, carried out by the document
//! (which asks the engine's compatibility function); only the canvas widget's own moves of
//! blocks happen in place, one undo step per drag.
//!
//! Level of detail keeps a frame cheap with thousands of blocks: egui-snarl lays out every
//! node every frame and looks up the wires of every pin it shows, so the viewer shows as
//! little as it can. Nodes outside the view, and every node when zoomed far out, are plain
//! boxes the size they had when last laid out, without pins; the canvas draws their wires
//! itself from the pin positions remembered then. Zoomed out a little, nodes keep their pins
//! but drop pin labels and bodies, and wires are straight.

use std::collections::HashMap;

use agentloom_core::GroupDoc;
use agentloom_core::{Compat, ERROR_PORT, PortSpec, TOOL_PORT, Value, compatibility};
use agentloom_engine::NodeStatus;
use egui::emath::TSTransform;
use egui::epaint::CubicBezierShape;
use egui::{Color32, Id, Painter, Pos2, Rect, RichText, Shape, Stroke, Style, Ui};
use egui_snarl::ui::{AnyPins, BackgroundPattern, PinInfo, SnarlStyle, SnarlViewer, WireStyle};
use egui_snarl::{InPin, NodeId, OutPin, Snarl};

use super::breakpoints;
use super::glyphs::node_text;
use super::model::{Geometry, Lod, PaletteEntry, Pin, WireDrop};
use super::state::CanvasState;
use super::wiring::WireCurve;
use crate::Command;
use crate::document::{CanvasNode, NodeFlag};
use crate::panels::debugger::DebugMarks;
use crate::run::NodeBadge;
use crate::run::RunView;
use crate::theme;

/// The viewer for one frame.
pub struct Viewer<'a> {
    pub palette: &'a [PaletteEntry],
    pub run: &'a RunView,
    /// Validation problems by node id.
    pub problems: &'a HashMap<String, Vec<String>>,
    pub state: &'a mut CanvasState,
    /// The node shown in the inspector.
    pub inspected: Option<NodeId>,
    /// The graph's groups, drawn behind the blocks.
    pub groups: &'a [GroupDoc],
    pub commands: &'a mut Vec<Command>,
    /// Breakpoints and the node a run is paused at.
    pub debug_marks: DebugMarks<'a>,
}

impl<'a> Viewer<'a> {
    #[allow(
        clippy::too_many_arguments,
        reason = "one borrow per piece of app state"
    )]
    pub fn new(
        palette: &'a [PaletteEntry],
        run: &'a RunView,
        problems: &'a HashMap<String, Vec<String>>,
        state: &'a mut CanvasState,
        inspected: Option<NodeId>,
        groups: &'a [GroupDoc],
        commands: &'a mut Vec<Command>,
    ) -> Self {
        Viewer {
            palette,
            run,
            problems,
            state,
            inspected,
            groups,
            commands,
            debug_marks: DebugMarks::default(),
        }
    }

    /// Whether a node is drawn in full this frame.
    fn node_detailed(&self, node: NodeId) -> bool {
        self.state.lod(node) == Lod::Full
    }

    fn pin_info(&self, port: &PortSpec, connected: bool) -> PinInfo {
        let color = port_color(port);
        let fill = if connected {
            color
        } else {
            color.gamma_multiply(0.55)
        };
        let mut info = PinInfo::default()
            .with_shape(theme::type_shape(&port.ty))
            .with_fill(fill)
            .with_wire_color(color)
            .with_stroke(egui::Stroke::new(1.0, color));
        info = info.with_wire_style(if self.state.zoom_lod == Lod::Full {
            WireStyle::Bezier3
        } else {
            WireStyle::Line
        });
        info
    }

    /// A right-click on a wired pin's name offers to remove its wires.
    fn disconnect_menu(&mut self, label: &egui::Response, pin: Pin, wired: bool) {
        if !wired {
            return;
        }
        label.context_menu(|ui| {
            if ui.button("Disconnect").clicked() {
                self.commands.push(Command::Disconnect(pin));
                ui.close();
            }
        });
    }

    /// Remembers where a pin is drawn, for the wires the canvas draws when its node is a
    /// plain box.
    fn remember_pin(
        &mut self,
        node: NodeId,
        output: bool,
        index: usize,
        ui: &Ui,
        snarl: &Snarl<CanvasNode>,
    ) {
        let Some(pos) = snarl.get_node_info(node).map(|n| n.pos) else {
            return;
        };
        let Some(geometry) = self.state.geometry_mut(node) else {
            return;
        };
        let ys = if output {
            &mut geometry.outputs
        } else {
            &mut geometry.inputs
        };
        if ys.len() <= index {
            ys.resize(index + 1, 0.0);
        }
        ys[index] = ui.max_rect().center().y - pos.y;
    }

    /// The header of a node drawn as a plain box: no widgets, just the space the whole node
    /// had when last laid out, and its name when there is room to read it.
    fn box_header_ui(&self, node: NodeId, ui: &mut Ui, snarl: &Snarl<CanvasNode>) {
        let Some(info) = snarl.get_node_info(node) else {
            return;
        };
        let rect = self
            .state
            .geometry
            .get(node.0)
            .map_or_else(|| Geometry::default().rect(), Geometry::rect)
            .translate(info.pos.to_vec2());
        if info.open {
            // Snarl adds the frame margin around the header, and the header's bottom margin
            // and one item spacing below it.
            let (node_margin, header_margin) = (self.state.node_margin, self.state.header_margin);
            let max = Pos2::new(
                rect.max.x - node_margin.right,
                rect.max.y
                    - node_margin.bottom
                    - header_margin.bottom
                    - ui.spacing().item_spacing.y,
            );
            let min = ui.min_rect().min;
            if max.x > min.x && max.y > min.y {
                ui.expand_to_include_rect(Rect::from_min_max(min, max));
            }
        }
        let scale = self.state.transform.scaling;
        let mark = self.debug_marks.of(&info.value.doc.id);
        if !mark.is_empty() && ui.is_rect_visible(rect) {
            breakpoints::box_mark(ui.painter(), rect.min, scale, mark);
        }
        if scale >= theme::BOX_TITLE_SCALE && ui.is_rect_visible(rect) {
            let size = (theme::BOX_TITLE_POINTS / scale).min(theme::BOX_TITLE_MAX_SIZE);
            ui.painter().with_clip_rect(rect).text(
                ui.min_rect().min,
                egui::Align2::LEFT_TOP,
                info.value.display_name(),
                egui::FontId::proportional(size),
                theme::TEXT,
            );
        }
    }

    /// The word for a node's run state (`text` from `NodeBadge::state`): outputs reused from an
    /// earlier run (or pinned) rather than run again say so.
    fn state_word(&self, id: &str, text: &'static str) -> &'static str {
        if self.run.reused.contains(id) && text == "done" {
            "reused"
        } else {
            text
        }
    }

    /// The colour that marks a node's state (its border, or a plain box's fill): inspected,
    /// failed or invalid, or its run status; `None` for a node with nothing to show.
    fn state_color(&self, node: NodeId, snarl: &Snarl<CanvasNode>) -> Option<Color32> {
        let canvas = snarl.get_node(node)?;
        let status = self.run.node(&canvas.doc.id).map(|r| r.status);
        let has_problem =
            canvas.config_problem.is_some() || self.problems.contains_key(&canvas.doc.id);
        if Some(node) == self.inspected || self.state.also_selected.contains(&node) {
            Some(theme::ACCENT)
        } else if matches!(status, Some(NodeStatus::Failed)) || has_problem {
            Some(theme::ERROR)
        } else {
            status
                .filter(|s| *s != NodeStatus::Pending)
                .map(theme::status_color)
        }
    }

    /// The node's flags as toggles: bypass, and the `error` and `tool` outputs shown.
    fn flag_menu_items(&mut self, node: NodeId, ui: &mut Ui, snarl: &Snarl<CanvasNode>) {
        let Some(canvas) = snarl.get_node(node) else {
            return;
        };
        let wired = |port: &str| {
            canvas.output_index(port).is_some_and(|output| {
                snarl
                    .wires()
                    .any(|(o, _)| o == egui_snarl::OutPinId { node, output })
            })
        };
        let has = |port: &str| canvas.all_outputs.iter().any(|p| p.name == port);
        let toggles = [
            (
                NodeFlag::Bypass,
                "Bypass",
                "Do not run this node: its inputs pass through to its outputs (Ctrl+B)",
                true,
                false,
            ),
            (
                NodeFlag::ShowError,
                "Handle errors here",
                "Show the error output: wired, a failure goes down it instead of failing the run",
                has(ERROR_PORT),
                wired(ERROR_PORT),
            ),
            (
                NodeFlag::ShowTool,
                "Use as a tool",
                "Show the tool output: wired to an agent's tools, the agent calls this node",
                has(TOOL_PORT),
                wired(TOOL_PORT),
            ),
        ];
        for (flag, label, hover, offered, wired) in toggles {
            if !offered {
                continue;
            }
            let mut on = flag.get(&canvas.doc) || wired;
            let response = ui
                .add_enabled(!wired, egui::Checkbox::new(&mut on, label))
                .on_hover_text(hover)
                .on_disabled_hover_text("Shown while it is wired");
            if response.changed() {
                self.commands.push(Command::SetNodeFlag {
                    nodes: vec![node],
                    flag,
                    on,
                });
                ui.close();
            }
        }
    }

    /// "Run from here" (after a recorded run) and pinning the node's outputs.
    fn rerun_menu_items(&mut self, node: NodeId, ui: &mut Ui, snarl: &Snarl<CanvasNode>) {
        let Some(canvas) = snarl.get_node(node) else {
            return;
        };
        let last_run = self.run.run_id.is_some() && !self.run.is_running();
        if ui
            .add_enabled(last_run, egui::Button::new("Run from here"))
            .on_hover_text("Run this node and what depends on it; the rest reuses the outputs of the run shown")
            .on_disabled_hover_text("Run the graph once first")
            .clicked()
        {
            self.commands.push(Command::RunFromHere(node));
            ui.close();
        }
        if canvas.doc.pinned.is_some() {
            if ui.button("Unpin outputs").clicked() {
                self.commands.push(Command::PinOutputs(node, false));
                ui.close();
            }
        } else {
            let done = self
                .run
                .node(&canvas.doc.id)
                .is_some_and(|r| r.status == NodeStatus::Done);
            if ui
                .add_enabled(done, egui::Button::new("Pin outputs"))
                .on_hover_text("Keep this node's outputs from the run shown: later runs use them instead of running it")
                .on_disabled_hover_text("The node has no outputs in the run shown")
                .clicked()
            {
                self.commands.push(Command::PinOutputs(node, true));
                ui.close();
            }
        }
    }
}

/// An error or problem inside a node: one line of it, the whole of it on hover.
fn node_message(ui: &mut Ui, message: &str, color: Color32) {
    let shown = agentloom_core::one_line(&agentloom_core::clip_chars(
        message,
        theme::NODE_MESSAGE_CHARS,
    ));
    badge_line(ui, RichText::new(shown).small().color(color)).on_hover_text(message);
}

/// One row of a node's badge: a single line cut to the badge's width.
fn badge_line(ui: &mut Ui, text: RichText) -> egui::Response {
    ui.add(egui::Label::new(text).truncate())
}

/// One output value in a node's badge; hovering shows (much) more of it.
fn value_line(ui: &mut Ui, port: &str, value: &Value) {
    badge_line(
        ui,
        RichText::new(format!("{port} = {}", value_preview(value)))
            .monospace()
            .small(),
    )
    .on_hover_text(value.preview(theme::NODE_HOVER_CHARS));
}

fn value_preview(value: &Value) -> String {
    value.preview(theme::NODE_PREVIEW_CHARS)
}

/// A group's frame, behind the blocks (its title is a widget of its own, see
/// `groups.rs`).
fn draw_group_frame(painter: &Painter, rect: Rect) {
    painter.rect(
        rect,
        8.0,
        theme::GROUP_FILL,
        Stroke::new(1.5, theme::GROUP_BORDER),
        egui::StrokeKind::Inside,
    );
}

/// A pin's colour, also its wire's.
fn port_color(port: &PortSpec) -> Color32 {
    if port.name == ERROR_PORT {
        theme::error_pin_color()
    } else {
        theme::type_color(&port.ty)
    }
}

/// A wire's colour: halfway between its two pins' colours, as snarl mixes them.
fn mix(a: Color32, b: Color32) -> Color32 {
    Color32::from_rgba_premultiplied(
        a.r().midpoint(b.r()),
        a.g().midpoint(b.g()),
        a.b().midpoint(b.b()),
        a.a().midpoint(b.a()),
    )
}

/// The port's hover text: name, type and description.
fn port_hover_ui(ui: &mut Ui, port: &PortSpec) {
    ui.label(format!("{}: {}", port.name, port.ty));
    if !port.description.is_empty() {
        ui.label(&port.description);
    }
}

/// The wires snarl does not draw because one of their ends is a plain box without
/// pins: straight lines, or when at 1:1 detail curves shaped like snarl's `Bezier3`.
fn box_wire_shapes(state: &CanvasState, snarl: &Snarl<CanvasNode>, viewport: Rect) -> Vec<Shape> {
    let scale = state.transform.scaling.max(f32::EPSILON);
    let width = theme::WIRE_WIDTH.max(theme::MIN_WIRE_WIDTH_ON_SCREEN / scale);
    let mut shapes = Vec::new();
    for (out, inp) in snarl.wires() {
        if state.lod(out.node) != Lod::Box && state.lod(inp.node) != Lod::Box {
            continue;
        }
        let (Some(from_node), Some(to_node)) =
            (snarl.get_node_info(out.node), snarl.get_node_info(inp.node))
        else {
            continue;
        };
        let from = state.pin_pos(out.node, from_node.pos, true, out.output);
        let to = state.pin_pos(inp.node, to_node.pos, false, inp.input);
        let curve = WireCurve::between(state, from, to);
        let bend = curve.bend();
        if !Rect::from_two_pos(from, to)
            .expand(bend + width)
            .intersects(viewport)
        {
            continue;
        }
        let color = match (
            from_node.value.outputs.get(out.output),
            to_node.value.inputs.get(inp.input),
        ) {
            (Some(a), Some(b)) => mix(port_color(a), port_color(b)),
            (Some(p), None) | (None, Some(p)) => port_color(p),
            (None, None) => theme::TEXT_WEAK,
        };
        let stroke = Stroke::new(width, color);
        shapes.push(match curve {
            WireCurve::Cubic(points) => Shape::CubicBezier(CubicBezierShape::from_points_stroke(
                points,
                false,
                Color32::TRANSPARENT,
                stroke,
            )),
            WireCurve::Line(ends) => Shape::line_segment(ends, stroke),
        });
    }
    shapes
}

/// The width of the state word in the header of a node drawn without its body.
const STATE_SLOT_WIDTH: f32 = 56.0;

impl SnarlViewer<CanvasNode> for Viewer<'_> {
    fn title(&mut self, node: &CanvasNode) -> String {
        node.display_name().to_owned()
    }

    fn current_transform(&mut self, to_global: &mut TSTransform, _snarl: &mut Snarl<CanvasNode>) {
        if let Some(t) = self.state.set_transform.take() {
            *to_global = t;
        }
        self.state.transform = *to_global;
    }

    /// Called once per frame before any node is drawn: plans the level of detail, draws the
    /// background and the wires of nodes drawn as plain boxes.
    fn draw_background(
        &mut self,
        background: Option<&BackgroundPattern>,
        viewport: &Rect,
        snarl_style: &SnarlStyle,
        style: &Style,
        painter: &Painter,
        snarl: &Snarl<CanvasNode>,
    ) {
        let keep_pins = self.state.wire_menu_open
            || painter
                .ctx()
                .input(|i| i.pointer.any_down() || i.pointer.any_released());
        self.state.wire_menu_open = false;
        if self.state.plan_lod(snarl, keep_pins) {
            painter
                .ctx()
                .request_discard("nodes on screen got their pins back");
        }
        if let Some(background) = background {
            background.draw(viewport, snarl_style, style, painter);
        }
        for group in self.groups {
            let rect = super::groups::shown_group_rect(group, snarl, &self.state.node_rects);
            draw_group_frame(painter, rect);
        }
        painter.add(Shape::Vec(box_wire_shapes(self.state, snarl, *viewport)));
    }

    fn node_frame(
        &mut self,
        default: egui::Frame,
        node: NodeId,
        _inputs: &[InPin],
        _outputs: &[OutPin],
        snarl: &Snarl<CanvasNode>,
    ) -> egui::Frame {
        self.state.node_margin = default.total_margin();
        if self.state.lod(node) == Lod::Box {
            // A plain box is its header, coloured by state; the frame paints nothing but
            // keeps the margins (the border's width goes to the inner margin).
            #[allow(
                clippy::cast_possible_truncation,
                reason = "a border is a few points wide"
            )]
            let border = default.stroke.width.round() as i8;
            let m = default.inner_margin;
            return default
                .fill(Color32::TRANSPARENT)
                .stroke(Stroke::NONE)
                .corner_radius(0)
                .inner_margin(egui::Margin {
                    left: m.left + border,
                    right: m.right + border,
                    top: m.top + border,
                    bottom: m.bottom + border,
                });
        }
        // A bypassed node is drawn dimmed: it is there, but runs pass over it.
        let default = if snarl.get_node(node).is_some_and(|n| n.doc.bypass) {
            default
                .fill(default.fill.gamma_multiply(theme::BYPASSED_OPACITY))
                .stroke(Stroke::new(
                    default.stroke.width,
                    default.stroke.color.gamma_multiply(theme::BYPASSED_OPACITY),
                ))
        } else {
            default
        };
        match self.state_color(node, snarl) {
            // The wider border takes its width from the inner margin, so that a node does not
            // grow when a run marks it.
            Some(color) => {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "a border is a few points wide"
                )]
                let extra = (theme::STATUS_BORDER - default.stroke.width).round() as i8;
                let m = default.inner_margin;
                default
                    .stroke(Stroke::new(theme::STATUS_BORDER, color))
                    .inner_margin(egui::Margin {
                        left: m.left - extra,
                        right: m.right - extra,
                        top: m.top - extra,
                        bottom: m.bottom - extra,
                    })
            }
            None => default,
        }
    }

    fn header_frame(
        &mut self,
        default: egui::Frame,
        node: NodeId,
        _inputs: &[InPin],
        _outputs: &[OutPin],
        snarl: &Snarl<CanvasNode>,
    ) -> egui::Frame {
        self.state.header_margin = default.total_margin();
        if self.state.lod(node) != Lod::Box {
            return default;
        }
        let fill = self
            .state_color(node, snarl)
            .map_or(default.fill, |c| c.gamma_multiply(theme::BOX_STATE_FILL));
        default.corner_radius(0).fill(fill)
    }

    fn show_header(
        &mut self,
        node: NodeId,
        _inputs: &[InPin],
        _outputs: &[OutPin],
        ui: &mut Ui,
        snarl: &mut Snarl<CanvasNode>,
    ) {
        let Some(canvas) = snarl.get_node(node) else {
            return;
        };
        if self.state.lod(node) == Lod::Box {
            self.box_header_ui(node, ui, snarl);
            return;
        }
        let state = self.run.node(&canvas.doc.id).and_then(NodeBadge::state);
        let detailed = self.node_detailed(node);
        // A detailed node says its state in the badge below its pins, so that nothing a run
        // brings changes the node's width.
        let scale = self.state.transform.scaling;
        let mark = self.debug_marks.of(&canvas.doc.id);
        ui.horizontal(|ui| {
            breakpoints::header_mark_ui(ui, mark);
            let title = node_text(ui, RichText::new(canvas.display_name()).strong(), scale);
            let kind = RichText::new(&canvas.title).color(theme::TEXT_WEAK).small();
            if !detailed {
                ui.label(title);
            } else if canvas.doc.label.is_none() {
                // Its id, then what it is.
                ui.label(title);
                ui.label(node_text(ui, kind, scale));
            } else {
                // A label of its own says what it does here; what it is stays under it.
                ui.vertical(|ui| {
                    ui.spacing_mut().item_spacing.y = 0.0;
                    // Each on one line: the column is as wide as the longer of the two.
                    ui.add(egui::Label::new(title).extend());
                    let kind = node_text(ui, kind, scale);
                    ui.add(egui::Label::new(kind).extend());
                });
            }
            if canvas.doc.pinned.is_some() {
                ui.label(RichText::new("pinned").color(theme::ACCENT).small())
                    .on_hover_text("Runs use this node's pinned outputs instead of running it");
            }
            if canvas.doc.bypass {
                ui.label(RichText::new("bypassed").color(theme::WARN).small())
                    .on_hover_text("Runs do not run this node: its inputs pass through to its outputs (Ctrl+B turns it back on)");
            }
            // Less detailed, the state is a word in the header, in a slot of its own width
            // whatever the state: the node keeps its width as a run goes on.
            if !detailed {
                let word = state.map(|(text, color)| {
                    RichText::new(self.state_word(&canvas.doc.id, text))
                        .color(color)
                        .small()
                });
                let height = ui.spacing().interact_size.y;
                ui.add_sized(
                    [STATE_SLOT_WIDTH, height],
                    egui::Label::new(word.unwrap_or_default()).truncate(),
                );
            }
        });
    }

    fn inputs(&mut self, node: &CanvasNode) -> usize {
        if self.state.lod_of(node) == Lod::Box {
            0
        } else {
            node.inputs.len()
        }
    }

    fn outputs(&mut self, node: &CanvasNode) -> usize {
        if self.state.lod_of(node) == Lod::Box {
            0
        } else {
            node.outputs.len()
        }
    }

    #[allow(refining_impl_trait)]
    fn show_input(&mut self, pin: &InPin, ui: &mut Ui, snarl: &mut Snarl<CanvasNode>) -> PinInfo {
        let Some(port) = snarl
            .get_node(pin.id.node)
            .and_then(|n| n.inputs.get(pin.id.input))
        else {
            return PinInfo::default();
        };
        if snarl.get_node(pin.id.node).is_some_and(|n| n.doc.bypass) {
            ui.multiply_opacity(theme::BYPASSED_OPACITY);
        }
        let mut info = self.pin_info(port, !pin.remotes.is_empty());
        self.remember_pin(pin.id.node, false, pin.id.input, ui, snarl);
        // A wire whose value is converted on the way (the coercion table) looks different.
        let converted_from = pin
            .remotes
            .first()
            .and_then(|from| snarl.get_node(from.node)?.outputs.get(from.output))
            .map(|from| &from.ty)
            .filter(|from| compatibility(from, &port.ty) == Ok(Compat::Coerce));
        if converted_from.is_some() {
            info = info.with_wire_color(theme::CONVERTING_WIRE);
        }
        if self.node_detailed(pin.id.node) {
            let text = if port.required {
                RichText::new(&port.name)
            } else {
                RichText::new(&port.name).color(theme::TEXT_WEAK)
            };
            let text = node_text(ui, text, self.state.transform.scaling);
            let label = ui
                .add(egui::Label::new(text).sense(egui::Sense::click()))
                .on_hover_ui(|ui| port_hover_ui(ui, port));
            self.disconnect_menu(&label, Pin::In(pin.id), !pin.remotes.is_empty());
            if let Some(from) = converted_from {
                ui.label(RichText::new("~").color(theme::CONVERTING_WIRE))
                    .on_hover_text(format!("converted from {from} to {}", port.ty));
            }
        } else {
            // Snarl gives the pin the next automatic id: it must not change with the level of
            // detail, or a wire being dragged from it while zooming is lost.
            ui.skip_ahead_auto_ids(1);
        }
        info
    }

    #[allow(refining_impl_trait)]
    fn show_output(&mut self, pin: &OutPin, ui: &mut Ui, snarl: &mut Snarl<CanvasNode>) -> PinInfo {
        let Some(port) = snarl
            .get_node(pin.id.node)
            .and_then(|n| n.outputs.get(pin.id.output))
        else {
            return PinInfo::default();
        };
        if snarl.get_node(pin.id.node).is_some_and(|n| n.doc.bypass) {
            ui.multiply_opacity(theme::BYPASSED_OPACITY);
        }
        let info = self.pin_info(port, !pin.remotes.is_empty());
        self.remember_pin(pin.id.node, true, pin.id.output, ui, snarl);
        if self.node_detailed(pin.id.node) {
            let text = if port.name != ERROR_PORT {
                RichText::new(&port.name).color(theme::TEXT)
            } else if pin.remotes.is_empty() {
                RichText::new(&port.name).small().color(theme::TEXT_WEAK)
            } else {
                RichText::new(&port.name).color(theme::ERROR)
            };
            let text = node_text(ui, text, self.state.transform.scaling);
            let label = ui
                .add(egui::Label::new(text).sense(egui::Sense::click()))
                .on_hover_ui(|ui| port_hover_ui(ui, port));
            self.disconnect_menu(&label, Pin::Out(pin.id), !pin.remotes.is_empty());
        } else {
            // Snarl gives the pin the next automatic id: it must not change with the level of
            // detail, or a wire being dragged from it while zooming is lost.
            ui.skip_ahead_auto_ids(1);
        }
        info
    }

    fn has_footer(&mut self, node: &CanvasNode) -> bool {
        self.state.lod_of(node) == Lod::Full
            && (node.config_problem.is_some()
                || self.problems.contains_key(&node.doc.id)
                || self.run.node(&node.doc.id).is_some_and(|r| {
                    r.state().is_some()
                        || !r.outputs.is_empty()
                        || !r.partial.is_empty()
                        || r.error.is_some()
                }))
    }

    fn show_footer(
        &mut self,
        node: NodeId,
        _inputs: &[InPin],
        _outputs: &[OutPin],
        ui: &mut Ui,
        snarl: &mut Snarl<CanvasNode>,
    ) {
        if !self.node_detailed(node) {
            return;
        }
        let Some(canvas) = snarl.get_node(node) else {
            return;
        };
        // The badge below the pins: one-line rows cut to the width the node already has
        // (from its title and pins), so a run never widens a node over its neighbours. The
        // full text is on hover, in the inspector and in the run panel.
        ui.vertical(|ui| {
            ui.set_max_width(ui.available_width());
            if let Some(run) = self.run.node(&canvas.doc.id) {
                let shown = run.outputs.len().min(theme::NODE_BADGE_LINES);
                let mut values = run.outputs.iter().take(shown);
                // The state word and the first value share a row: a finished node gets one
                // row taller, not two.
                let first = values.next();
                let state = run.state();
                if state.is_some() || first.is_some() {
                    ui.horizontal(|ui| {
                        if let Some((text, color)) = state {
                            badge_line(
                                ui,
                                RichText::new(self.state_word(&canvas.doc.id, text))
                                    .color(color)
                                    .small(),
                            );
                        }
                        if let Some((port, value)) = first {
                            value_line(ui, port, value);
                        }
                    });
                }
                for (port, value) in values {
                    value_line(ui, port, value);
                }
                if run.outputs.len() > shown {
                    badge_line(
                        ui,
                        RichText::new(format!(
                            "+{} more in the inspector",
                            run.outputs.len() - shown
                        ))
                        .small()
                        .color(theme::TEXT_WEAK),
                    );
                }
                for (port, text) in &run.partial {
                    // An agent's latest step (its steps stream one JSON line each).
                    let last_line = text.lines().last().unwrap_or_default();
                    if let Some(step) = agentloom_blocks::agent::Step::parse_line(last_line) {
                        // A step under way when the node failed or was stopped never ended.
                        let headline = if step.running && (run.status.is_final() || run.cancelled) {
                            agentloom_core::one_line(&format!(
                                "step {} · {} did not finish",
                                step.step,
                                step.tool_name()
                            ))
                        } else {
                            step.headline(theme::NODE_PREVIEW_CHARS)
                        };
                        badge_line(
                            ui,
                            RichText::new(headline)
                                .monospace()
                                .small()
                                .color(theme::ACCENT),
                        );
                        continue;
                    }
                    let tail: String = text
                        .chars()
                        .rev()
                        .take(theme::NODE_PREVIEW_CHARS)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    badge_line(
                        ui,
                        RichText::new(agentloom_core::one_line(&format!("{port} … {tail}")))
                            .monospace()
                            .small()
                            .color(theme::ACCENT),
                    );
                }
                if let Some(error) = &run.error {
                    node_message(ui, error, theme::ERROR);
                }
            }
            if let Some(problem) = &canvas.config_problem {
                node_message(ui, problem, theme::ERROR);
            } else if let Some(problems) = self.problems.get(&canvas.doc.id) {
                for p in problems.iter().take(theme::NODE_BADGE_LINES) {
                    node_message(ui, p, theme::WARN);
                }
            }
        });
    }

    fn final_node_rect(
        &mut self,
        node: NodeId,
        rect: Rect,
        _ui: &mut Ui,
        snarl: &mut Snarl<CanvasNode>,
    ) {
        self.state.node_rects.insert(node, rect);
        if self.state.lod(node) == Lod::Box {
            return;
        }
        let Some(info) = snarl.get_node_info(node) else {
            return;
        };
        let (pos, inputs, outputs) = (info.pos, info.value.inputs.len(), info.value.outputs.len());
        let kind = Id::new(info.value.doc.block.as_str());
        let state = &mut *self.state;
        if let Some(geometry) = state.geometry.get_mut(node.0) {
            geometry.rect = rect.translate(-pos.to_vec2());
            geometry.inputs.truncate(inputs);
            geometry.outputs.truncate(outputs);
            geometry.laid_out = true;
            if state
                .kind_geometry
                .get(&kind)
                .is_none_or(|k| k.rect != geometry.rect)
            {
                state.kind_geometry.insert(kind, geometry.clone());
            }
        }
    }

    fn connect(&mut self, from: &OutPin, to: &InPin, snarl: &mut Snarl<CanvasNode>) {
        let (Some(src), Some(dst)) = (snarl.get_node(from.id.node), snarl.get_node(to.id.node))
        else {
            return;
        };
        let (Some(output), Some(input)) =
            (src.outputs.get(from.id.output), dst.inputs.get(to.id.input))
        else {
            return;
        };
        self.commands.push(Command::Connect {
            from: (src.doc.id.clone(), output.name.clone()),
            to: (dst.doc.id.clone(), input.name.clone()),
        });
    }

    /// Snarl calls this when a wire is right-clicked: a menu asks first.
    fn disconnect(&mut self, from: &OutPin, to: &InPin, _snarl: &mut Snarl<CanvasNode>) {
        self.state.wire_menu_request = Some((from.id, to.id));
    }

    fn drop_outputs(&mut self, pin: &OutPin, _snarl: &mut Snarl<CanvasNode>) {
        self.commands.push(Command::Disconnect(Pin::Out(pin.id)));
    }

    fn drop_inputs(&mut self, pin: &InPin, _snarl: &mut Snarl<CanvasNode>) {
        self.commands.push(Command::Disconnect(Pin::In(pin.id)));
    }

    fn has_graph_menu(&mut self, _pos: Pos2, _snarl: &mut Snarl<CanvasNode>) -> bool {
        // A right-click on a wire opens the wire's menu instead.
        !self.state.right_click_on_wire
    }

    fn show_graph_menu(&mut self, pos: Pos2, ui: &mut Ui, _snarl: &mut Snarl<CanvasNode>) {
        let pos = self.state.menu_origin.unwrap_or(pos);
        ui.label(RichText::new("Add block…").strong());
        ui.separator();
        let mut category = "";
        for entry in self.palette {
            if entry.category != category {
                category = &entry.category;
                ui.label(RichText::new(category).small().color(theme::TEXT_WEAK));
            }
            if ui
                .button(&entry.title)
                .on_hover_text(&entry.description)
                .clicked()
            {
                self.commands.push(Command::AddBlock {
                    kind: entry.kind.clone(),
                    pos: Some(pos),
                });
                ui.close();
            }
        }
        ui.separator();
        if ui.button("Paste").clicked() {
            self.commands.push(Command::Paste);
            ui.close();
        }
        if ui.button("Fit graph to view").clicked() {
            self.commands.push(Command::FitView);
            ui.close();
        }
    }

    fn has_dropped_wire_menu(&mut self, src: AnyPins, _snarl: &mut Snarl<CanvasNode>) -> bool {
        // The canvas shows its own menu for the dropped wire (kept inside the canvas, at the
        // latest drop); snarl's is not opened.
        let pins = match src {
            AnyPins::Out(pins) => pins.iter().map(|p| Pin::Out(*p)).collect(),
            AnyPins::In(pins) => pins.iter().map(|p| Pin::In(*p)).collect(),
        };
        let at = self
            .state
            .menu_origin
            .unwrap_or_else(|| self.state.viewport().center());
        self.state.wire_drop = Some(WireDrop::new(pins, at));
        false
    }

    fn has_node_menu(&mut self, node: &CanvasNode) -> bool {
        // A box at a zoom that shows pins is off screen: nobody can right-click it.
        self.state.zoom_lod == Lod::Box || self.state.lod_of(node) != Lod::Box
    }

    fn show_node_menu(
        &mut self,
        node: NodeId,
        _inputs: &[InPin],
        _outputs: &[OutPin],
        ui: &mut Ui,
        snarl: &mut Snarl<CanvasNode>,
    ) {
        if ui.button("Inspect").clicked() {
            self.commands.push(Command::Inspect(node));
            ui.close();
        }
        if ui.button("Duplicate").clicked() {
            self.commands.push(Command::DuplicateNodes(vec![node]));
            ui.close();
        }
        self.rerun_menu_items(node, ui, snarl);
        ui.separator();
        if let Some(canvas) = snarl.get_node(node) {
            let at = self.debug_marks.of(&canvas.doc.id).breakpoint;
            breakpoints::breakpoint_menu_items(ui, &canvas.doc.id, at, self.commands);
            let items = breakpoints::item_graph_nodes(&canvas.doc);
            if !items.is_empty() {
                let marks = self.debug_marks;
                breakpoints::item_breakpoint_menu(
                    ui,
                    &canvas.doc.id,
                    &items,
                    |path| marks.of(path).breakpoint,
                    self.commands,
                );
            }
            // A node that finished in a past run shown: fork the run from its outputs.
            let finished = !self.run.is_running()
                && (self.run.node(&canvas.doc.id)).is_some_and(|r| r.status == NodeStatus::Done);
            breakpoints::fork_menu_item(ui, &canvas.doc.id, finished, self.commands);
            ui.separator();
        }
        self.flag_menu_items(node, ui, snarl);
        ui.separator();
        if ui.button("Delete").clicked() {
            self.commands.push(Command::DeleteNodes(vec![node]));
            ui.close();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc};
    use egui::emath::TSTransform;
    use egui::{Pos2, Shape, vec2};
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable as _;
    use egui_snarl::NodeId;

    use super::{Lod, box_wire_shapes};
    use crate::{App, AppPaths};

    /// `blocks` templates in rows of 10, 260 × 160 apart, each fed by the two before it.
    fn grid(blocks: usize) -> GraphDoc {
        let mut doc = GraphDoc::new("grid");
        for i in 0..blocks {
            #[allow(clippy::cast_precision_loss, reason = "small grid")]
            let (x, y) = ((i % 10) as f64 * 260.0, (i / 10) as f64 * 160.0);
            doc.nodes.push(
                NodeDoc::new(format!("n{i:03}"), "text.template")
                    .with_config(serde_json::json!({"template": "{{ a }} and {{ b }}"}))
                    .at(x, y),
            );
        }
        for i in 2..blocks {
            let to = format!("n{i:03}");
            doc.edges
                .push(EdgeDoc::new(&format!("n{:03}", i - 1), "text", &to, "a"));
            doc.edges
                .push(EdgeDoc::new(&format!("n{:03}", i - 2), "text", &to, "b"));
        }
        doc.normalize();
        doc
    }

    fn harness(doc: &GraphDoc) -> Harness<'static, App> {
        let paths = AppPaths {
            run_log: None,
            data_dir: None,
            workspace: None,
            credentials_dir: None,
        };
        let app = App::new(doc, None, &paths);
        let mut harness = Harness::builder()
            .with_size(vec2(1280.0, 800.0))
            .build_ui_state(|ui, app: &mut App| app.show(ui), app);
        harness.run_steps(3);
        harness
    }

    /// Shows the graph at `scale` with graph point `at` in the middle of the canvas.
    fn look_at(harness: &mut Harness<'static, App>, at: Pos2, scale: f32) {
        let canvas = &mut harness.state_mut().canvas;
        canvas.set_transform = Some(TSTransform::new(
            canvas.screen_rect.center().to_vec2() - at.to_vec2() * scale,
            scale,
        ));
        harness.run_steps(3);
    }

    fn node(harness: &Harness<'static, App>, id: &str) -> NodeId {
        harness.state().document.node_by_id(id).unwrap()
    }

    #[test]
    fn a_node_saved_absurdly_far_away_is_brought_back_and_fit_to_view_shows_every_node() {
        let mut doc = grid(3);
        doc.nodes[1].position = [1e308, -1e308];
        doc.nodes[2].position = [-5e9, 120.0];
        let mut harness = harness(&doc);
        harness.state_mut().commands.push(crate::Command::FitView);
        harness.run_steps(3);
        let app = harness.state();
        let canvas = &app.canvas;
        assert!(canvas.transform.scaling.is_finite() && canvas.transform.scaling > 0.0);
        for (id, pos, node) in app.document.snarl.nodes_pos_ids() {
            assert!(
                pos.x.abs() <= 100_000.0 && pos.y.abs() <= 100_000.0,
                "{pos:?}"
            );
            let on_screen = canvas.transform * pos;
            assert!(
                canvas.screen_rect.contains(on_screen),
                "`{}` at {on_screen:?} is outside {:?} ({id:?})",
                node.doc.id,
                canvas.screen_rect
            );
        }
        // Saved again, the positions are the canvas's, no longer absurd.
        let saved = app.document.to_doc();
        assert!(saved.nodes.iter().all(|n| n.position[0].abs() <= 100_000.0));
    }

    #[test]
    fn nodes_off_screen_lose_their_pins_but_keep_their_wires() {
        let mut harness = harness(&grid(200));
        look_at(&mut harness, Pos2::new(400.0, 200.0), 1.0);
        let near = node(&harness, "n011");
        let far = node(&harness, "n190");
        let canvas = &harness.state().canvas;
        assert_eq!(canvas.lod(near), Lod::Full);
        assert_eq!(canvas.lod(far), Lod::Box);
        // At 1:1 the visible node shows its pin labels, the far one nothing.
        harness.get_by_label("n011");
        assert!(harness.query_by_label("n190").is_none());

        // The wire n011 → n012 is snarl's; n189 → n190 and n190 → n191, between boxes, are
        // the canvas's own and only drawn when on screen.
        let state = &harness.state().canvas;
        let snarl = &harness.state().document.snarl;
        let on_screen = box_wire_shapes(state, snarl, state.viewport());
        let everywhere = box_wire_shapes(state, snarl, egui::Rect::EVERYTHING);
        assert!(
            on_screen.len() < everywhere.len() / 4,
            "off-screen wires are culled"
        );
        // Every wire with a box end is among them, from the pin remembered for its source.
        let boxed_wires = snarl
            .wires()
            .filter(|(o, i)| state.lod(o.node) == Lod::Box || state.lod(i.node) == Lod::Box)
            .count();
        assert_eq!(everywhere.len(), boxed_wires);
        let from = state.pin_pos(near, snarl.get_node_info(near).unwrap().pos, true, 0);
        let rect = state.node_rects[&near];
        assert!((from.x - rect.right()).abs() < 1.0 && rect.y_range().contains(from.y));

        // Zoomed far out every node is a box and every wire is the canvas's, straight.
        look_at(&mut harness, Pos2::new(1300.0, 1600.0), 0.1);
        let state = &harness.state().canvas;
        let snarl = &harness.state().document.snarl;
        assert!(snarl.node_ids().all(|(id, _)| state.lod(id) == Lod::Box));
        let shapes = box_wire_shapes(state, snarl, state.viewport());
        assert_eq!(shapes.len(), snarl.wires().count());
        assert!(
            shapes
                .iter()
                .all(|s| matches!(s, Shape::LineSegment { .. }))
        );
    }

    #[test]
    fn a_wire_dragged_while_zooming_out_is_still_dropped_and_offers_blocks() {
        let mut harness = harness(&grid(200));
        look_at(&mut harness, Pos2::new(400.0, 200.0), 1.0);
        let source = node(&harness, "n011");
        let canvas = &harness.state().canvas;
        let pos = harness
            .state()
            .document
            .snarl
            .get_node_info(source)
            .unwrap()
            .pos;
        let pin = canvas.transform * canvas.pin_pos(source, pos, true, 0);

        let button = |pos, pressed| egui::Event::PointerButton {
            pos,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: egui::Modifiers::NONE,
        };
        harness.event(egui::Event::PointerMoved(pin));
        harness.event(button(pin, true));
        harness.step();
        for i in 1..=6 {
            #[allow(clippy::cast_precision_loss, reason = "a few steps")]
            harness.event(egui::Event::PointerMoved(pin + vec2(10.0, 40.0) * i as f32));
            harness.step();
        }
        // Zoom out past both thresholds while the wire is held: its pin must stay.
        look_at(&mut harness, Pos2::new(1300.0, 1600.0), 0.1);
        assert_ne!(harness.state().canvas.lod(source), Lod::Box);
        // Above the zoom buttons in the corner.
        let empty = harness.state().canvas.screen_rect.right_bottom() - vec2(30.0, 90.0);
        harness.event(egui::Event::PointerMoved(empty));
        harness.step();
        harness.event(button(empty, false));
        harness.run_steps(3);
        harness.get_by_label("Add a block wired here");
        // The menu's wire survives zooming and the menu closing.
        look_at(&mut harness, Pos2::new(1300.0, 1600.0), 0.05);
        harness.key_press(egui::Key::Escape);
        harness.run_steps(3);
        look_at(&mut harness, Pos2::new(400.0, 200.0), 1.0);
        assert_eq!(harness.state().canvas.lod(source), Lod::Full);
    }
}
