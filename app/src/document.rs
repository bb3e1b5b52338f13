//! The open graph: a [`Snarl`] of small [`CanvasNode`]s for the canvas, converted to and
//! from the [`GraphDoc`] file format (the snarl is never saved), plus undo and redo as
//! document snapshots.

use std::collections::HashMap;
use std::path::PathBuf;

use agentloom_core::{
    BlockCatalog, ERROR_PORT, EdgeDoc, GraphDoc, GroupDoc, NodeDoc, PortSpec, RunSettings,
    TOOL_PORT, ValueType, compatibility, instantiate_node,
};
use egui::Pos2;
use egui_snarl::{InPinId, NodeId, OutPinId, Snarl};

use crate::canvas::model::Pin;

/// How many edits undo remembers.
const UNDO_LIMIT: usize = 200;

/// One block on the canvas: its document entry and its ports as they follow from its config.
#[derive(Clone, Debug)]
pub struct CanvasNode {
    /// The node as saved (its `position` is refreshed from the canvas on conversion).
    pub doc: NodeDoc,
    /// Input ports, in pin order.
    pub inputs: Vec<PortSpec>,
    /// The output pins shown, in pin order: the declared outputs, then `error` and `tool`
    /// when wired, turned on (`show_error`, `show_tool`) or while a dragged wire could end
    /// on them. A pin's index is its position here ([`CanvasNode::output_index`]).
    pub outputs: Vec<PortSpec>,
    /// Every output the node has: the declared ones, then `error`, then `tool` (which a
    /// graph input or output has not).
    pub all_outputs: Vec<PortSpec>,
    /// Why the node cannot be instantiated, if it cannot.
    pub config_problem: Option<String>,
    /// The block's title, for the header.
    pub title: String,
    /// The block has a name in the graph's interface (a graph input or output).
    pub interface_named: bool,
}

/// How far from the origin a node may sit on the canvas. A damaged or hand-edited file may
/// put a node anywhere (`1e308` does not even fit the canvas's `f32`); such a node is brought
/// back to this edge, where fit-to-view can still show it beside the others.
pub const CANVAS_EXTENT: f32 = 100_000.0;

/// Whether nodes of this block have a name in the graph's interface (a graph input or
/// output): a required `name` in their config.
pub fn has_interface_name(meta: &agentloom_core::BlockMeta) -> bool {
    meta.config.iter().any(|f| f.name == "name" && f.required)
}

/// Every output of a node with `ports`: the declared ones, then `error`, then `tool`, which a
/// graph input or output (`interface_named`) has not: it is never called as a tool.
pub fn every_output(ports: &agentloom_core::Ports, interface_named: bool) -> Vec<PortSpec> {
    let mut all = ports.outputs_with_error();
    if interface_named {
        all.retain(|p| p.name != TOOL_PORT);
    }
    all
}

/// A saved position as a canvas position, within [`CANVAS_EXTENT`].
pub fn canvas_pos(position: [f64; 2]) -> Pos2 {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "clamped to the canvas first"
    )]
    let coordinate = |v: f64| {
        let limit = f64::from(CANVAS_EXTENT);
        if v.is_nan() {
            0.0
        } else {
            v.clamp(-limit, limit) as f32
        }
    };
    Pos2::new(coordinate(position[0]), coordinate(position[1]))
}

impl CanvasNode {
    /// Builds a canvas node, deriving its ports from its config.
    pub fn new(doc: NodeDoc, catalog: &dyn BlockCatalog) -> Self {
        let mut node = CanvasNode {
            doc,
            inputs: Vec::new(),
            outputs: Vec::new(),
            all_outputs: Vec::new(),
            config_problem: None,
            title: String::new(),
            interface_named: false,
        };
        node.refresh_ports(catalog);
        node
    }

    /// Recomputes ports after the config changed. On a config error the old ports stay, so
    /// wires are not lost while a person is typing.
    pub fn refresh_ports(&mut self, catalog: &dyn BlockCatalog) {
        let block = catalog.block(&self.doc.block);
        self.title = block.map_or_else(|| self.doc.block.clone(), |b| b.meta().title.clone());
        self.interface_named = block.is_some_and(|b| has_interface_name(b.meta()));
        match instantiate_node(0, &self.doc, catalog) {
            Ok((_, imp)) => {
                self.inputs = imp.ports().inputs.clone();
                self.all_outputs = every_output(imp.ports(), self.interface_named);
                // Pins shown before stay until the document settles them, so their wires
                // are kept by name.
                let shown: Vec<String> = self.outputs.iter().map(|p| p.name.clone()).collect();
                self.outputs = self.wanted_outputs(|name| shown.iter().any(|s| s == name), None);
                self.config_problem = None;
            }
            Err(problem) => self.config_problem = Some(problem.message),
        }
    }

    /// The node's title: its label, else the name it has in the graph's interface (a graph
    /// input or output, so renaming it renames the title), else its id.
    pub fn display_name(&self) -> &str {
        let interface_name = self
            .doc
            .config
            .get("name")
            .filter(|_| self.interface_named)
            .and_then(|v| v.as_str())
            .filter(|name| !name.trim().is_empty());
        self.doc
            .label
            .as_deref()
            .or(interface_name)
            .unwrap_or(&self.doc.id)
    }

    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|p| p.name == name)
    }

    /// The pin index of output `name`, if it is shown.
    pub fn output_index(&self, name: &str) -> Option<usize> {
        self.outputs.iter().position(|p| p.name == name)
    }

    /// The outputs to show, in pin order: the declared ones; `error` and `tool` when
    /// `wired` says so of them, their flag is on, or a wire of type `dragged_into` being
    /// dragged from an input could end on them.
    pub fn wanted_outputs(
        &self,
        wired: impl Fn(&str) -> bool,
        dragged_into: Option<&ValueType>,
    ) -> Vec<PortSpec> {
        self.all_outputs
            .iter()
            .filter(|port| {
                let flag = match port.name.as_str() {
                    ERROR_PORT => self.doc.show_error,
                    TOOL_PORT => self.doc.show_tool,
                    _ => return true,
                };
                flag || wired(&port.name)
                    || dragged_into.is_some_and(|into| compatibility(&port.ty, into).is_ok())
            })
            .cloned()
            .collect()
    }

    /// Shows output `name` (appended, so no other pin moves) if the node has it; returns
    /// its pin index.
    fn show_output(&mut self, name: &str) -> Option<usize> {
        if let Some(index) = self.output_index(name) {
            return Some(index);
        }
        let port = self.all_outputs.iter().find(|p| p.name == name)?.clone();
        self.outputs.push(port);
        Some(self.outputs.len() - 1)
    }
}

/// A yes-or-no setting of a node, saved in its file entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeFlag {
    /// Not run: its inputs pass through (`bypass`).
    Bypass,
    /// Its `error` output shows though unwired (`show_error`, "Handle errors here").
    ShowError,
    /// Its `tool` output shows though unwired (`show_tool`, "Use as a tool").
    ShowTool,
}

impl NodeFlag {
    pub fn get(self, doc: &NodeDoc) -> bool {
        match self {
            NodeFlag::Bypass => doc.bypass,
            NodeFlag::ShowError => doc.show_error,
            NodeFlag::ShowTool => doc.show_tool,
        }
    }

    fn set(self, doc: &mut NodeDoc, on: bool) {
        match self {
            NodeFlag::Bypass => doc.bypass = on,
            NodeFlag::ShowError => doc.show_error = on,
            NodeFlag::ShowTool => doc.show_tool = on,
        }
    }
}

/// Why a wire was not made: the reason core gives every editor of a graph.
pub use agentloom_core::ConnectError;

/// The graph being edited.
pub struct Document {
    pub snarl: Snarl<CanvasNode>,
    pub name: String,
    pub description: String,
    pub settings: RunSettings,
    /// Titled frames grouping blocks on the canvas.
    pub groups: Vec<GroupDoc>,
    /// MCP servers the graph's tool blocks come from (edited in File → MCP servers…).
    pub mcp_servers: std::collections::BTreeMap<String, agentloom_core::McpServerDoc>,
    /// The file it was opened from or saved to.
    pub path: Option<PathBuf>,
    /// Changed since it was last saved.
    pub dirty: bool,
    /// Bumped on every edit (autosave and problems watch it).
    pub revision: u64,
    /// The graph as its file holds it (`None`: not known, e.g. recovered work), so that
    /// undoing back to it clears the unsaved mark.
    saved: Option<GraphDoc>,
    undo: Vec<GraphDoc>,
    redo: Vec<GraphDoc>,
    /// The graph when a drag on the canvas began (its moves are one undo step).
    move_start: Option<GraphDoc>,
    /// The revision and dragged wire type the shown output pins were last settled for.
    settled: Option<(u64, Option<ValueType>)>,
}

impl Document {
    /// A document showing `doc`.
    pub fn from_doc(doc: &GraphDoc, catalog: &dyn BlockCatalog, path: Option<PathBuf>) -> Self {
        let mut document = Document {
            snarl: Snarl::new(),
            name: doc.name.clone(),
            description: doc.description.clone(),
            settings: doc.settings.clone(),
            groups: doc.groups.clone(),
            mcp_servers: doc.mcp_servers.clone(),
            path,
            dirty: false,
            revision: 0,
            saved: None,
            undo: Vec::new(),
            redo: Vec::new(),
            move_start: None,
            settled: None,
        };
        document.load(doc, catalog);
        document.saved = Some(document.to_doc());
        document
    }

    /// Shows `doc` on the canvas (no undo step). A node whose id is on the canvas already
    /// keeps its place in the snarl (its `NodeId`), so that after an undo or redo the
    /// selection and the inspector stay on the same blocks instead of whichever block
    /// a rebuilt canvas would have put in their slots.
    fn load(&mut self, doc: &GraphDoc, catalog: &dyn BlockCatalog) {
        // A drag going on is not a move of the graph shown now.
        self.move_start = None;
        self.name.clone_from(&doc.name);
        self.description.clone_from(&doc.description);
        self.settings = doc.settings.clone();
        self.groups.clone_from(&doc.groups);
        self.mcp_servers.clone_from(&doc.mcp_servers);
        // By id; a damaged file may hold the same id twice, so each id has a list.
        let mut existing: HashMap<String, Vec<NodeId>> = HashMap::new();
        for (id, node) in self.snarl.node_ids() {
            existing.entry(node.doc.id.clone()).or_default().push(id);
        }
        for kept in existing.values_mut() {
            kept.reverse();
        }
        let wires: Vec<(OutPinId, InPinId)> = self.snarl.wires().collect();
        for (from, to) in wires {
            self.snarl.disconnect(from, to);
        }
        // Kept and new nodes first, removed ones last: a new node never takes the slot of
        // a node removed in the same step, which a stale selection might still name.
        let mut ids: HashMap<&str, NodeId> = HashMap::with_capacity(doc.nodes.len());
        for node in &doc.nodes {
            let pos = canvas_pos(node.position);
            let shown = CanvasNode::new(node.clone(), catalog);
            let id = match existing
                .get_mut(&node.id)
                .and_then(Vec::pop)
                .and_then(|id| self.snarl.get_node_info_mut(id).map(|info| (id, info)))
            {
                Some((id, info)) => {
                    info.pos = pos;
                    info.value = shown;
                    id
                }
                None => self.snarl.insert_node(pos, shown),
            };
            ids.insert(node.id.as_str(), id);
        }
        for id in existing.into_values().flatten() {
            self.snarl.remove_node(id);
        }
        let wired: std::collections::HashSet<(&str, &str)> = doc
            .edges
            .iter()
            .map(|e| (e.from.0.as_str(), e.from.1.as_str()))
            .collect();
        for (&id, &node) in &ids {
            let canvas = &self.snarl[node];
            if canvas.config_problem.is_none() {
                let wanted = canvas.wanted_outputs(|port| wired.contains(&(id, port)), None);
                self.snarl[node].outputs = wanted;
            }
        }
        self.keep_wires_of_unusable_nodes(doc, &ids);
        for edge in &doc.edges {
            let (Some(&from), Some(&to)) =
                (ids.get(edge.from.0.as_str()), ids.get(edge.to.0.as_str()))
            else {
                continue;
            };
            let (Some(out), Some(inp)) = (
                self.snarl[from].output_index(&edge.from.1),
                self.snarl[to].input_index(&edge.to.1),
            ) else {
                continue;
            };
            self.snarl.connect(
                OutPinId {
                    node: from,
                    output: out,
                },
                InPinId {
                    node: to,
                    input: inp,
                },
            );
        }
        self.revision += 1;
    }

    /// A node that cannot be instantiated (its block is unknown, e.g. an MCP tool whose
    /// server is still connecting or unreachable, or its config is broken) has no ports of
    /// its own: it gets a port of any type for each of its wires, so that the wires stay
    /// on the canvas and in the saved file instead of being lost.
    fn keep_wires_of_unusable_nodes(&mut self, doc: &GraphDoc, ids: &HashMap<&str, NodeId>) {
        for edge in &doc.edges {
            if let Some(&from) = ids.get(edge.from.0.as_str()) {
                let node = &mut self.snarl[from];
                if node.config_problem.is_some() && node.output_index(&edge.from.1).is_none() {
                    node.outputs.push(PortSpec::new(
                        edge.from.1.clone(),
                        agentloom_core::ValueType::Any,
                    ));
                }
            }
            if let Some(&to) = ids.get(edge.to.0.as_str()) {
                let node = &mut self.snarl[to];
                if node.config_problem.is_some() && node.input_index(&edge.to.1).is_none() {
                    node.inputs.push(
                        PortSpec::new(edge.to.1.clone(), agentloom_core::ValueType::Any).optional(),
                    );
                }
            }
        }
    }

    /// The document as it would be saved: sorted, positions from the canvas.
    pub fn to_doc(&self) -> GraphDoc {
        let mut doc = to_doc(
            &self.snarl,
            &self.name,
            &self.description,
            &self.settings,
            &self.groups,
        );
        doc.mcp_servers.clone_from(&self.mcp_servers);
        doc
    }

    /// The document as its file is written: each config without the values its block
    /// declares as defaults (see [`agentloom_core::without_declared_defaults`]). The nodes
    /// shown lose them too, so the document stays equal to its file once saved.
    pub fn to_file_doc(&mut self, catalog: &dyn BlockCatalog) -> GraphDoc {
        for node in self.snarl.nodes_mut() {
            if let Some(block) = catalog.block(&node.doc.block) {
                agentloom_core::leave_out_declared_defaults(&mut node.doc.config, block.meta());
            }
            if node.doc.label.as_deref().is_some_and(str::is_empty) {
                node.doc.label = None;
            }
        }
        agentloom_core::without_declared_defaults(&self.to_doc(), catalog)
    }

    /// Records the current state as an undo step; call before changing anything.
    pub fn checkpoint(&mut self) {
        let snapshot = self.to_doc();
        self.push_undo(snapshot);
    }

    /// Records `snapshot` (the state before an edit already made) as an undo step.
    fn push_undo(&mut self, snapshot: GraphDoc) {
        self.undo.push(snapshot);
        if self.undo.len() > UNDO_LIMIT {
            self.undo.remove(0);
        }
        self.redo.clear();
        self.dirty = true;
        self.revision += 1;
    }

    /// A drag on the canvas begins: the blocks it moves (the canvas widget moves them
    /// itself) become one undo step at [`Document::finish_move`].
    pub fn begin_move(&mut self) {
        self.move_start = Some(self.to_doc());
    }

    /// The drag has ended: one undo step if it moved blocks.
    pub fn finish_move(&mut self) {
        let Some(before) = self.move_start.take() else {
            return;
        };
        let after = self.to_doc();
        let moved = before.nodes.len() == after.nodes.len()
            && before
                .nodes
                .iter()
                .zip(&after.nodes)
                .any(|(a, b)| a.position != b.position);
        if moved {
            self.push_undo(before);
        }
    }

    /// Marks an edit made without an undo step of its own (e.g. within one text edit).
    pub fn touch(&mut self) {
        self.dirty = true;
        self.revision += 1;
    }

    /// Unsaved unless the graph is back to what its file holds.
    fn refresh_dirty(&mut self) {
        self.dirty = self.saved.as_ref() != Some(&self.to_doc());
    }

    /// Forgets what the file holds: the document stays unsaved until it is saved.
    pub fn forget_saved(&mut self) {
        self.saved = None;
        self.dirty = true;
    }

    pub fn can_undo(&self) -> bool {
        !self.undo.is_empty()
    }

    pub fn can_redo(&self) -> bool {
        !self.redo.is_empty()
    }

    /// The graph an undo would go back to.
    pub fn next_undo(&self) -> Option<&GraphDoc> {
        self.undo.last()
    }

    /// The graph a redo would go forward to.
    pub fn next_redo(&self) -> Option<&GraphDoc> {
        self.redo.last()
    }

    /// Shows `doc` again with a new catalog (no undo step): blocks that became known show
    /// their ports and wires. A document without changes stays without changes.
    pub fn reload(&mut self, doc: &GraphDoc, catalog: &dyn BlockCatalog) {
        let was_clean = !self.dirty;
        self.load(doc, catalog);
        if was_clean {
            self.saved = Some(self.to_doc());
        }
        self.refresh_dirty();
    }

    pub fn undo(&mut self, catalog: &dyn BlockCatalog) -> bool {
        let Some(previous) = self.undo.pop() else {
            return false;
        };
        self.redo.push(self.to_doc());
        self.load(&previous, catalog);
        self.refresh_dirty();
        true
    }

    pub fn redo(&mut self, catalog: &dyn BlockCatalog) -> bool {
        let Some(next) = self.redo.pop() else {
            return false;
        };
        self.undo.push(self.to_doc());
        self.load(&next, catalog);
        self.refresh_dirty();
        true
    }

    /// Finds a node by its document id.
    pub fn node_by_id(&self, id: &str) -> Option<NodeId> {
        self.snarl
            .node_ids()
            .find(|(_, node)| node.doc.id == id)
            .map(|(nid, _)| nid)
    }

    /// Adds `node` at `pos`; returns the new node.
    pub fn add_node(&mut self, node: NodeDoc, pos: Pos2, catalog: &dyn BlockCatalog) -> NodeId {
        self.checkpoint();
        self.snarl.insert_node(pos, CanvasNode::new(node, catalog))
    }

    /// The port name of `pin`, if its node is there.
    pub fn pin_name(&self, pin: Pin) -> Option<String> {
        let port = match pin {
            Pin::Out(out) => self.snarl.get_node(out.node)?.outputs.get(out.output),
            Pin::In(inp) => self.snarl.get_node(inp.node)?.inputs.get(inp.input),
        };
        port.map(|p| p.name.clone())
    }

    /// Adds `node` at `pos` wired to `pins`, the ends of a wire dropped on empty canvas:
    /// each to the first of its ports whose type fits (one undo step).
    pub fn add_wired(
        &mut self,
        node: NodeDoc,
        pos: Pos2,
        pins: &[Pin],
        catalog: &dyn BlockCatalog,
    ) -> NodeId {
        let id = self.add_node(node, pos, catalog);
        for pin in pins {
            match *pin {
                Pin::Out(out) => {
                    let Some(src_ty) = self
                        .snarl
                        .get_node(out.node)
                        .and_then(|n| n.outputs.get(out.output))
                        .map(|p| p.ty.clone())
                    else {
                        continue;
                    };
                    let target = self.snarl[id]
                        .inputs
                        .iter()
                        .position(|p| compatibility(&src_ty, &p.ty).is_ok());
                    if let Some(input) = target {
                        let to = InPinId { node: id, input };
                        self.snarl.drop_inputs(to);
                        self.snarl.connect(out, to);
                    }
                }
                Pin::In(inp) => {
                    let Some(dst_ty) = self
                        .snarl
                        .get_node(inp.node)
                        .and_then(|n| n.inputs.get(inp.input))
                        .map(|p| p.ty.clone())
                    else {
                        continue;
                    };
                    let source = self.snarl[id]
                        .all_outputs
                        .iter()
                        .find(|p| p.name != ERROR_PORT && compatibility(&p.ty, &dst_ty).is_ok())
                        .map(|p| p.name.clone());
                    if let Some(output) = source.and_then(|name| self.snarl[id].show_output(&name))
                    {
                        self.snarl.drop_inputs(inp);
                        self.snarl.connect(OutPinId { node: id, output }, inp);
                    }
                }
            }
        }
        id
    }

    /// Checks whether output `from` may be wired to input `to`.
    pub fn check_connect(&self, from: OutPinId, to: InPinId) -> Result<(), ConnectError> {
        check_wire(&self.snarl, from, to)
    }

    /// Wires output `from` to input `to`, replacing the input's old wire. Refused with the
    /// reason when the types do not fit.
    pub fn connect(&mut self, from: OutPinId, to: InPinId) -> Result<(), ConnectError> {
        self.check_connect(from, to)?;
        self.checkpoint();
        // An input that takes many wires (an agent's tools) keeps the ones it has.
        let many = self.snarl[to.node]
            .inputs
            .get(to.input)
            .is_some_and(|p| p.many);
        if !many {
            self.snarl.drop_inputs(to);
        }
        self.snarl.connect(from, to);
        Ok(())
    }

    /// [`Document::connect`] by node ids and port names.
    pub fn connect_named(
        &mut self,
        from: (&str, &str),
        to: (&str, &str),
    ) -> Result<(), ConnectError> {
        let (from_pin, to_pin) = self.resolve_pins(from, to)?;
        self.connect(from_pin, to_pin)
    }

    /// The pins of a wire by node ids and port names; a hidden `error` or `tool` output
    /// is shown.
    fn resolve_pins(
        &mut self,
        from: (&str, &str),
        to: (&str, &str),
    ) -> Result<(OutPinId, InPinId), ConnectError> {
        let src = self
            .node_by_id(from.0)
            .ok_or_else(|| ConnectError::UnknownNode(from.0.to_owned()))?;
        let dst = self
            .node_by_id(to.0)
            .ok_or_else(|| ConnectError::UnknownNode(to.0.to_owned()))?;
        let output =
            self.snarl[src]
                .show_output(from.1)
                .ok_or_else(|| ConnectError::UnknownPort {
                    node: from.0.to_owned(),
                    port: from.1.to_owned(),
                    side: "output",
                })?;
        let input = self.snarl[dst]
            .input_index(to.1)
            .ok_or_else(|| ConnectError::UnknownPort {
                node: to.0.to_owned(),
                port: to.1.to_owned(),
                side: "input",
            })?;
        Ok((OutPinId { node: src, output }, InPinId { node: dst, input }))
    }

    /// Sets config field `field` of `node` (`None` removes it) and refreshes its pins,
    /// keeping wires whose port names still exist.
    pub fn set_config(
        &mut self,
        node: NodeId,
        field: &str,
        value: Option<serde_json::Value>,
        catalog: &dyn BlockCatalog,
        new_undo_step: bool,
    ) {
        if self.snarl.get_node(node).is_none() {
            return;
        }
        if new_undo_step {
            self.checkpoint();
        } else {
            self.touch();
        }
        self.update_node(node, catalog, |doc| match value {
            Some(v) => {
                doc.config.insert(field.to_owned(), v);
            }
            None => {
                doc.config.remove(field);
            }
        });
    }

    /// Changes a node's document entry and re-derives its ports, keeping wires by name.
    pub fn update_node(
        &mut self,
        node: NodeId,
        catalog: &dyn BlockCatalog,
        change: impl FnOnce(&mut NodeDoc),
    ) {
        let Some(canvas) = self.snarl.get_node(node) else {
            return;
        };
        let old_inputs: Vec<String> = canvas.inputs.iter().map(|p| p.name.clone()).collect();
        let old_outputs: Vec<String> = canvas.outputs.iter().map(|p| p.name.clone()).collect();
        let wires: Vec<(OutPinId, InPinId)> = self
            .snarl
            .wires()
            .filter(|(o, i)| o.node == node || i.node == node)
            .collect();
        for (o, i) in &wires {
            self.snarl.disconnect(*o, *i);
        }
        let canvas = &mut self.snarl[node];
        change(&mut canvas.doc);
        canvas.refresh_ports(catalog);
        for (mut o, mut i) in wires {
            if o.node == node {
                let Some(name) = old_outputs.get(o.output) else {
                    continue;
                };
                let Some(idx) = self.snarl[node].output_index(name) else {
                    continue;
                };
                o.output = idx;
            }
            if i.node == node {
                let Some(name) = old_inputs.get(i.input) else {
                    continue;
                };
                let Some(idx) = self.snarl[node].input_index(name) else {
                    continue;
                };
                i.input = idx;
            }
            self.snarl.connect(o, i);
        }
    }

    /// Shows each node's `error` and `tool` outputs only when wired, turned on, or while
    /// a wire of type `dragged_into` is dragged from an input (they could take it), keeping
    /// every wire. Cheap when nothing changed since the last call.
    pub fn settle_outputs(&mut self, dragged_into: Option<&ValueType>) {
        let key = (self.revision, dragged_into.cloned());
        if self.settled.as_ref() == Some(&key) {
            return;
        }
        self.settled = Some(key);
        let mut wired: HashMap<NodeId, Vec<String>> = HashMap::new();
        for (out, _) in self.snarl.wires() {
            if let Some(port) = self
                .snarl
                .get_node(out.node)
                .and_then(|n| n.outputs.get(out.output))
            {
                wired.entry(out.node).or_default().push(port.name.clone());
            }
        }
        let changed: Vec<(NodeId, Vec<PortSpec>)> = self
            .snarl
            .node_ids()
            .filter(|(_, node)| node.config_problem.is_none())
            .filter_map(|(id, node)| {
                let names = wired.get(&id);
                let wanted = node.wanted_outputs(
                    |port| names.is_some_and(|n| n.iter().any(|w| w == port)),
                    dragged_into,
                );
                let same = wanted.len() == node.outputs.len()
                    && wanted
                        .iter()
                        .zip(&node.outputs)
                        .all(|(a, b)| a.name == b.name);
                (!same).then_some((id, wanted))
            })
            .collect();
        for (node, wanted) in changed {
            self.rewire_outputs(node, |canvas| canvas.outputs = wanted);
        }
    }

    /// Changes which output pins `node` shows, keeping its wires by port name.
    fn rewire_outputs(&mut self, node: NodeId, change: impl FnOnce(&mut CanvasNode)) {
        let old: Vec<String> = self.snarl[node]
            .outputs
            .iter()
            .map(|p| p.name.clone())
            .collect();
        let wires: Vec<(OutPinId, InPinId)> =
            self.snarl.wires().filter(|(o, _)| o.node == node).collect();
        for (o, i) in &wires {
            self.snarl.disconnect(*o, *i);
        }
        change(&mut self.snarl[node]);
        for (mut o, i) in wires {
            let Some(index) = old
                .get(o.output)
                .and_then(|name| self.snarl[node].output_index(name))
            else {
                continue;
            };
            o.output = index;
            self.snarl.connect(o, i);
        }
    }

    /// Turns a node flag on or off for `nodes` (one undo step; nothing when none changes).
    pub fn set_flag(&mut self, nodes: &[NodeId], flag: NodeFlag, on: bool) {
        let changes: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|n| {
                self.snarl
                    .get_node(*n)
                    .is_some_and(|c| flag.get(&c.doc) != on)
            })
            .collect();
        if changes.is_empty() {
            return;
        }
        self.checkpoint();
        for node in changes {
            flag.set(&mut self.snarl[node].doc, on);
        }
    }

    /// Removes the wires of a pin (one undo step; nothing when it has none).
    pub fn disconnect(&mut self, pin: Pin) {
        let wired = self.snarl.wires().any(|(o, i)| match pin {
            Pin::Out(p) => o == p,
            Pin::In(p) => i == p,
        });
        if !wired {
            return;
        }
        self.checkpoint();
        let _removed = match pin {
            Pin::Out(p) => self.snarl.drop_outputs(p),
            Pin::In(p) => self.snarl.drop_inputs(p),
        };
    }

    /// Removes nodes and their wires.
    pub fn remove_nodes(&mut self, nodes: &[NodeId]) {
        if nodes.is_empty() {
            return;
        }
        self.checkpoint();
        for &node in nodes {
            if self.snarl.get_node(node).is_some() {
                self.snarl.remove_node(node);
            }
        }
    }

    /// The selected nodes and the wires among them, as a small graph document.
    pub fn copy(&self, nodes: &[NodeId]) -> GraphDoc {
        let doc = self.to_doc();
        let ids: Vec<&str> = nodes
            .iter()
            .filter_map(|n| self.snarl.get_node(*n).map(|c| c.doc.id.as_str()))
            .collect();
        let mut clip = GraphDoc::new("clipboard");
        clip.nodes = doc
            .nodes
            .iter()
            .filter(|n| ids.contains(&n.id.as_str()))
            .cloned()
            .collect();
        clip.edges = doc
            .edges
            .iter()
            .filter(|e| ids.contains(&e.from.0.as_str()) && ids.contains(&e.to.0.as_str()))
            .cloned()
            .collect();
        clip
    }

    /// Adds a copy of `clip` (fresh ids, shifted by `offset`); returns the new nodes.
    pub fn paste(
        &mut self,
        clip: &GraphDoc,
        offset: egui::Vec2,
        catalog: &dyn BlockCatalog,
    ) -> Vec<NodeId> {
        if clip.nodes.is_empty() {
            return Vec::new();
        }
        self.checkpoint();
        let mut doc = self.to_doc();
        let mut renamed: HashMap<String, String> = HashMap::new();
        let mut added = Vec::new();
        for node in &clip.nodes {
            let mut copy = node.clone();
            copy.id = doc.fresh_node_id(&node.id);
            copy.position[0] += f64::from(offset.x);
            copy.position[1] += f64::from(offset.y);
            renamed.insert(node.id.clone(), copy.id.clone());
            doc.nodes.push(copy.clone());
            let pos = canvas_pos(copy.position);
            added.push(self.snarl.insert_node(pos, CanvasNode::new(copy, catalog)));
        }
        for edge in &clip.edges {
            if let (Some(a), Some(b)) = (renamed.get(&edge.from.0), renamed.get(&edge.to.0))
                && let Ok((o, i)) = self.resolve_pins((a, &edge.from.1), (b, &edge.to.1))
            {
                self.snarl.connect(o, i);
            }
        }
        added
    }

    /// Replaces the whole document (open, import): the old one stays reachable by undo.
    pub fn replace(&mut self, doc: &GraphDoc, catalog: &dyn BlockCatalog) {
        self.checkpoint();
        self.load(doc, catalog);
    }

    /// Asks for (true) or stops asking for approval before side effects; one undo step.
    pub fn set_safe_mode(&mut self, on: bool) {
        if self.settings.safe_mode != on {
            self.checkpoint();
            self.settings.safe_mode = on;
        }
    }

    /// Renames or describes the graph. Typing goes on in one undo step: `new_step` is true
    /// for the first key of a field.
    pub fn set_info(&mut self, name: String, description: String, new_step: bool) {
        if new_step {
            self.checkpoint();
        } else {
            self.touch();
        }
        self.name = name;
        self.description = description;
    }

    /// Removes one wire (one undo step; nothing when there is no such wire).
    pub fn remove_wire(&mut self, from: OutPinId, to: InPinId) {
        if self.snarl.wires().any(|w| w == (from, to)) {
            self.checkpoint();
            self.snarl.disconnect(from, to);
        }
    }

    /// Drops the unsaved mark: the person chose not to keep the changes.
    pub fn discard_changes(&mut self) {
        self.dirty = false;
    }

    /// Marks the document as saved to `path`.
    pub fn mark_saved(&mut self, path: PathBuf) {
        self.path = Some(path);
        self.dirty = false;
        self.saved = Some(self.to_doc());
    }
}

/// Converts the canvas to the file format.
pub fn to_doc(
    snarl: &Snarl<CanvasNode>,
    name: &str,
    description: &str,
    settings: &RunSettings,
    groups: &[GroupDoc],
) -> GraphDoc {
    let mut doc = GraphDoc::new(name);
    description.clone_into(&mut doc.description);
    doc.settings = settings.clone();
    doc.groups = groups.to_vec();
    doc.nodes = snarl
        .nodes_pos()
        .map(|(pos, node)| {
            let mut n = node.doc.clone();
            n.position = [f64::from(pos.x.round()), f64::from(pos.y.round())];
            n
        })
        .collect();
    doc.edges = snarl
        .wires()
        .filter_map(|(o, i)| {
            let src = snarl.get_node(o.node)?;
            let dst = snarl.get_node(i.node)?;
            Some(EdgeDoc::new(
                &src.doc.id,
                &src.outputs.get(o.output)?.name,
                &dst.doc.id,
                &dst.inputs.get(i.input)?.name,
            ))
        })
        .collect();
    doc.normalize();
    doc
}

/// Checks whether output `from` may be wired to input `to`, with the engine's own
/// compatibility function.
pub fn check_wire(
    snarl: &Snarl<CanvasNode>,
    from: OutPinId,
    to: InPinId,
) -> Result<(), ConnectError> {
    if from.node == to.node {
        return Err(ConnectError::SelfLoop);
    }
    let src = snarl
        .get_node(from.node)
        .ok_or_else(|| ConnectError::UnknownNode(format!("#{}", from.node.0)))?;
    let dst = snarl
        .get_node(to.node)
        .ok_or_else(|| ConnectError::UnknownNode(format!("#{}", to.node.0)))?;
    let out = src
        .outputs
        .get(from.output)
        .ok_or_else(|| ConnectError::UnknownPort {
            node: src.doc.id.clone(),
            port: format!("#{}", from.output),
            side: "output",
        })?;
    let inp = dst
        .inputs
        .get(to.input)
        .ok_or_else(|| ConnectError::UnknownPort {
            node: dst.doc.id.clone(),
            port: format!("#{}", to.input),
            side: "input",
        })?;
    agentloom_core::check_wire_ports(&src.doc.id, out, &dst.doc.id, inp)
}
