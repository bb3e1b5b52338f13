//! The node-graph canvas: the egui-snarl viewer for [`CanvasNode`]s.
//!
//! Pins come from each block's declared ports; `connect` asks the engine's compatibility
//! function. Level of detail: when zoomed out, or for nodes outside the view, pin labels
//! and node bodies are not laid out and wires are straight lines.

use std::collections::HashMap;

use agentloom_core::RunSettings;
use agentloom_core::{BlockCatalog, ERROR_PORT, GraphDoc, PortSpec, Value, compatibility};
use agentloom_engine::NodeStatus;
use egui::emath::TSTransform;
use egui::{Pos2, Rect, RichText, Ui};
use egui_snarl::ui::{AnyPins, PinInfo, SnarlViewer, WireStyle};
use egui_snarl::{InPin, InPinId, NodeId, OutPin, OutPinId, Snarl};

use super::Command;
use super::document::{CanvasNode, check_wire, to_doc};
use super::palette::PaletteEntry;
use super::run::RunView;
use super::theme;

/// The canvas's view state that lives across frames.
pub struct CanvasState {
    /// Graph → screen transform of the last frame.
    pub transform: TSTransform,
    /// A transform to apply on the next frame (fit to view, 1:1).
    pub set_transform: Option<TSTransform>,
    /// Each node's rectangle in graph coordinates, from the last frame it was drawn.
    pub node_rects: HashMap<NodeId, Rect>,
    /// The canvas rectangle on screen.
    pub screen_rect: Rect,
}

impl Default for CanvasState {
    fn default() -> Self {
        CanvasState {
            transform: TSTransform::default(),
            set_transform: None,
            node_rects: HashMap::new(),
            screen_rect: Rect::ZERO,
        }
    }
}

impl CanvasState {
    /// The part of the graph visible on screen, in graph coordinates.
    pub fn viewport(&self) -> Rect {
        self.transform.inverse() * self.screen_rect
    }

    /// A transform that shows every node.
    pub fn fit_transform(&self, snarl: &Snarl<CanvasNode>) -> TSTransform {
        let mut bb = Rect::NOTHING;
        for (id, pos, _) in snarl.nodes_pos_ids() {
            let rect = self.node_rects.get(&id).map_or_else(
                || Rect::from_min_size(pos, theme::NODE_SIZE_GUESS),
                |r| Rect::from_min_size(pos, r.size()),
            );
            bb = bb.union(rect);
        }
        if !bb.is_finite() || self.screen_rect.width() <= 0.0 {
            return TSTransform::default();
        }
        let bb = bb.expand(40.0);
        let scale = (self.screen_rect.width() / bb.width())
            .min(self.screen_rect.height() / bb.height())
            .clamp(0.05, 1.0);
        TSTransform::new(
            self.screen_rect.center().to_vec2() - bb.center().to_vec2() * scale,
            scale,
        )
    }

    /// A 1:1 transform centred on what is shown now.
    pub fn actual_size_transform(&self) -> TSTransform {
        let center = self.viewport().center();
        TSTransform::new(self.screen_rect.center().to_vec2() - center.to_vec2(), 1.0)
    }

    /// Screen position → graph position.
    pub fn to_graph(&self, pos: Pos2) -> Pos2 {
        self.transform.inverse() * pos
    }
}

/// The viewer for one frame.
pub struct Viewer<'a> {
    pub catalog: &'a dyn BlockCatalog,
    pub palette: &'a [PaletteEntry],
    pub run: &'a RunView,
    /// Validation problems by node id.
    pub problems: &'a HashMap<String, Vec<String>>,
    pub state: &'a mut CanvasState,
    /// The node shown in the inspector.
    pub inspected: Option<NodeId>,
    /// Set when an edit is made inside the canvas: the document before it (one undo step).
    pub undo_snapshot: &'a mut Option<GraphDoc>,
    pub doc_name: &'a str,
    pub doc_description: &'a str,
    pub doc_settings: &'a RunSettings,
    pub commands: &'a mut Vec<Command>,
    /// Detail drawn this frame: false when zoomed out.
    detailed: bool,
    viewport: Rect,
}

impl<'a> Viewer<'a> {
    #[allow(
        clippy::too_many_arguments,
        reason = "one borrow per piece of app state"
    )]
    pub fn new(
        catalog: &'a dyn BlockCatalog,
        palette: &'a [PaletteEntry],
        run: &'a RunView,
        problems: &'a HashMap<String, Vec<String>>,
        state: &'a mut CanvasState,
        inspected: Option<NodeId>,
        undo_snapshot: &'a mut Option<GraphDoc>,
        doc_meta: (&'a str, &'a str, &'a RunSettings),
        commands: &'a mut Vec<Command>,
    ) -> Self {
        Viewer {
            catalog,
            palette,
            run,
            problems,
            state,
            inspected,
            undo_snapshot,
            doc_name: doc_meta.0,
            doc_description: doc_meta.1,
            doc_settings: doc_meta.2,
            commands,
            detailed: true,
            viewport: Rect::EVERYTHING,
        }
    }

    fn snapshot(&mut self, snarl: &Snarl<CanvasNode>) {
        if self.undo_snapshot.is_none() {
            *self.undo_snapshot = Some(to_doc(
                snarl,
                self.doc_name,
                self.doc_description,
                self.doc_settings,
            ));
        }
    }

    /// Whether a node is drawn in full this frame.
    fn node_detailed(&self, node: NodeId) -> bool {
        self.detailed
            && self
                .state
                .node_rects
                .get(&node)
                .is_none_or(|rect| rect.intersects(self.viewport))
    }

    fn pin_info(&self, port: &PortSpec, connected: bool) -> PinInfo {
        let color = if port.name == ERROR_PORT {
            theme::error_pin_color()
        } else {
            theme::type_color(&port.ty)
        };
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
        info = info.with_wire_style(if self.detailed {
            WireStyle::Bezier3
        } else {
            WireStyle::Line
        });
        info
    }

    /// Adds block `kind` at `pos` wired to the dropped pins; used by the dropped-wire menu.
    fn add_wired(
        &mut self,
        entry: &PaletteEntry,
        pos: Pos2,
        src: &AnyPins,
        snarl: &mut Snarl<CanvasNode>,
    ) {
        self.snapshot(snarl);
        let doc = to_doc(
            snarl,
            self.doc_name,
            self.doc_description,
            self.doc_settings,
        );
        let Some(new) = super::palette::new_node(entry, &doc, self.catalog) else {
            return;
        };
        let id = snarl.insert_node(pos, CanvasNode::new(new, self.catalog));
        match src {
            AnyPins::Out(pins) => {
                for &out in *pins {
                    let Some(src_ty) = snarl
                        .get_node(out.node)
                        .and_then(|n| n.outputs.get(out.output))
                        .map(|p| p.ty.clone())
                    else {
                        continue;
                    };
                    let target = snarl[id]
                        .inputs
                        .iter()
                        .position(|p| compatibility(&src_ty, &p.ty).is_ok());
                    if let Some(input) = target {
                        let to = InPinId { node: id, input };
                        snarl.drop_inputs(to);
                        snarl.connect(out, to);
                    }
                }
            }
            AnyPins::In(pins) => {
                for &inp in *pins {
                    let Some(dst_ty) = snarl
                        .get_node(inp.node)
                        .and_then(|n| n.inputs.get(inp.input))
                        .map(|p| p.ty.clone())
                    else {
                        continue;
                    };
                    let source = snarl[id].outputs.iter().position(|p| {
                        p.name != ERROR_PORT && compatibility(&p.ty, &dst_ty).is_ok()
                    });
                    if let Some(output) = source {
                        snarl.drop_inputs(inp);
                        snarl.connect(OutPinId { node: id, output }, inp);
                    }
                }
            }
        }
        self.commands.push(Command::Inspect(id));
    }
}

fn status_text(status: NodeStatus) -> &'static str {
    match status {
        NodeStatus::AwaitingApproval => "waiting for approval",
        other => other.as_str(),
    }
}

fn value_preview(value: &Value) -> String {
    value.preview(theme::NODE_PREVIEW_CHARS)
}

impl SnarlViewer<CanvasNode> for Viewer<'_> {
    fn title(&mut self, node: &CanvasNode) -> String {
        node.display_name().to_owned()
    }

    fn current_transform(&mut self, to_global: &mut TSTransform, _snarl: &mut Snarl<CanvasNode>) {
        if let Some(t) = self.state.set_transform.take() {
            *to_global = t;
        }
        self.state.transform = *to_global;
        self.detailed = to_global.scaling >= theme::LOD_SCALE;
        self.viewport = self.state.viewport();
    }

    fn node_frame(
        &mut self,
        default: egui::Frame,
        node: NodeId,
        _inputs: &[InPin],
        _outputs: &[OutPin],
        snarl: &Snarl<CanvasNode>,
    ) -> egui::Frame {
        let Some(canvas) = snarl.get_node(node) else {
            return default;
        };
        let status = self.run.node(&canvas.doc.id).and_then(|r| r.status);
        let has_problem =
            canvas.config_problem.is_some() || self.problems.contains_key(&canvas.doc.id);
        let stroke_color = if Some(node) == self.inspected {
            theme::ACCENT
        } else if matches!(status, Some(NodeStatus::Failed)) || has_problem {
            theme::ERROR
        } else if let Some(s) = status.filter(|s| *s != NodeStatus::Pending) {
            theme::status_color(s)
        } else {
            return default;
        };
        default.stroke(egui::Stroke::new(1.5, stroke_color))
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
        let status = self.run.node(&canvas.doc.id).and_then(|r| r.status);
        let detailed = self.node_detailed(node);
        ui.horizontal(|ui| {
            ui.label(RichText::new(canvas.display_name()).strong());
            if detailed && canvas.doc.label.is_none() {
                ui.label(RichText::new(&canvas.title).color(theme::TEXT_WEAK).small());
            }
            if let Some(status) = status.filter(|s| *s != NodeStatus::Pending) {
                ui.label(
                    RichText::new(status_text(status))
                        .color(theme::status_color(status))
                        .small(),
                );
            }
        });
    }

    fn inputs(&mut self, node: &CanvasNode) -> usize {
        node.inputs.len()
    }

    fn outputs(&mut self, node: &CanvasNode) -> usize {
        node.outputs.len()
    }

    #[allow(refining_impl_trait)]
    fn show_input(&mut self, pin: &InPin, ui: &mut Ui, snarl: &mut Snarl<CanvasNode>) -> PinInfo {
        let Some(port) = snarl
            .get_node(pin.id.node)
            .and_then(|n| n.inputs.get(pin.id.input))
        else {
            return PinInfo::default();
        };
        let info = self.pin_info(port, !pin.remotes.is_empty());
        if self.node_detailed(pin.id.node) {
            let text = if port.required {
                RichText::new(&port.name)
            } else {
                RichText::new(&port.name).color(theme::TEXT_WEAK)
            };
            ui.label(text)
                .on_hover_text(format!("{}: {}\n{}", port.name, port.ty, port.description));
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
        let info = self.pin_info(port, !pin.remotes.is_empty());
        if self.node_detailed(pin.id.node) {
            let text = if port.name != ERROR_PORT {
                RichText::new(&port.name).color(theme::TEXT)
            } else if pin.remotes.is_empty() {
                RichText::new(&port.name).small().color(theme::TEXT_WEAK)
            } else {
                RichText::new(&port.name).color(theme::ERROR)
            };
            ui.label(text)
                .on_hover_text(format!("{}: {}\n{}", port.name, port.ty, port.description));
        }
        info
    }

    fn has_body(&mut self, node: &CanvasNode) -> bool {
        self.detailed
            && (node.config_problem.is_some()
                || self.problems.contains_key(&node.doc.id)
                || self.run.node(&node.doc.id).is_some_and(|r| {
                    !r.outputs.is_empty() || !r.partial.is_empty() || r.error.is_some()
                }))
    }

    fn show_body(
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
        ui.set_max_width(240.0);
        ui.vertical(|ui| {
            if let Some(run) = self.run.node(&canvas.doc.id) {
                for (port, value) in &run.outputs {
                    ui.label(
                        RichText::new(format!("{port} = {}", value_preview(value)))
                            .monospace()
                            .small(),
                    );
                }
                for (port, text) in &run.partial {
                    let tail: String = text
                        .chars()
                        .rev()
                        .take(theme::NODE_PREVIEW_CHARS)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    ui.label(
                        RichText::new(format!("{port} … {tail}"))
                            .monospace()
                            .small()
                            .color(theme::ACCENT),
                    );
                }
                if let Some(error) = &run.error {
                    ui.label(RichText::new(error).small().color(theme::ERROR));
                }
            }
            if let Some(problem) = &canvas.config_problem {
                ui.label(RichText::new(problem).small().color(theme::ERROR));
            } else if let Some(problems) = self.problems.get(&canvas.doc.id) {
                for p in problems {
                    ui.label(RichText::new(p).small().color(theme::WARN));
                }
            }
        });
    }

    fn final_node_rect(
        &mut self,
        node: NodeId,
        rect: Rect,
        _ui: &mut Ui,
        _snarl: &mut Snarl<CanvasNode>,
    ) {
        self.state.node_rects.insert(node, rect);
    }

    fn connect(&mut self, from: &OutPin, to: &InPin, snarl: &mut Snarl<CanvasNode>) {
        match check_wire(snarl, from.id, to.id) {
            Ok(()) => {
                self.snapshot(snarl);
                snarl.drop_inputs(to.id);
                snarl.connect(from.id, to.id);
            }
            Err(err) => self
                .commands
                .push(Command::Notify(format!("Connection refused: {err}"))),
        }
    }

    fn disconnect(&mut self, from: &OutPin, to: &InPin, snarl: &mut Snarl<CanvasNode>) {
        self.snapshot(snarl);
        snarl.disconnect(from.id, to.id);
    }

    fn drop_outputs(&mut self, pin: &OutPin, snarl: &mut Snarl<CanvasNode>) {
        self.snapshot(snarl);
        snarl.drop_outputs(pin.id);
    }

    fn drop_inputs(&mut self, pin: &InPin, snarl: &mut Snarl<CanvasNode>) {
        self.snapshot(snarl);
        snarl.drop_inputs(pin.id);
    }

    fn has_graph_menu(&mut self, _pos: Pos2, _snarl: &mut Snarl<CanvasNode>) -> bool {
        true
    }

    fn show_graph_menu(&mut self, pos: Pos2, ui: &mut Ui, _snarl: &mut Snarl<CanvasNode>) {
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

    fn has_dropped_wire_menu(&mut self, _src: AnyPins, _snarl: &mut Snarl<CanvasNode>) -> bool {
        true
    }

    fn show_dropped_wire_menu(
        &mut self,
        pos: Pos2,
        ui: &mut Ui,
        src: AnyPins,
        snarl: &mut Snarl<CanvasNode>,
    ) {
        ui.label(RichText::new("Add a block wired here").strong());
        ui.separator();
        let fits: Vec<&PaletteEntry> = self
            .palette
            .iter()
            .filter(|entry| match &src {
                AnyPins::Out(pins) => pins.iter().all(|p| {
                    snarl
                        .get_node(p.node)
                        .and_then(|n| n.outputs.get(p.output))
                        .is_some_and(|port| {
                            entry
                                .inputs
                                .iter()
                                .any(|i| compatibility(&port.ty, &i.ty).is_ok())
                        })
                }),
                AnyPins::In(pins) => pins.iter().all(|p| {
                    snarl
                        .get_node(p.node)
                        .and_then(|n| n.inputs.get(p.input))
                        .is_some_and(|port| {
                            entry.outputs.iter().any(|o| {
                                o.name != ERROR_PORT && compatibility(&o.ty, &port.ty).is_ok()
                            })
                        })
                }),
            })
            .collect();
        if fits.is_empty() {
            ui.label(RichText::new("No block fits this pin").color(theme::TEXT_WEAK));
        }
        for entry in fits {
            if ui
                .button(&entry.title)
                .on_hover_text(&entry.description)
                .clicked()
            {
                self.add_wired(entry, pos, &src, snarl);
                ui.close();
            }
        }
    }

    fn has_node_menu(&mut self, _node: &CanvasNode) -> bool {
        true
    }

    fn show_node_menu(
        &mut self,
        node: NodeId,
        _inputs: &[InPin],
        _outputs: &[OutPin],
        ui: &mut Ui,
        _snarl: &mut Snarl<CanvasNode>,
    ) {
        if ui.button("Inspect").clicked() {
            self.commands.push(Command::Inspect(node));
            ui.close();
        }
        if ui.button("Duplicate").clicked() {
            self.commands.push(Command::DuplicateNodes(vec![node]));
            ui.close();
        }
        if ui.button("Delete").clicked() {
            self.commands.push(Command::DeleteNodes(vec![node]));
            ui.close();
        }
    }
}
