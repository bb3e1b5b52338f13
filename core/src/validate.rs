//! Turning a [`GraphDoc`] into a [`ValidGraph`] the executor can run, or into the full
//! list of [`Problem`]s, each naming the node, the port and the JSON path.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Serialize;

use crate::block::{Block, BlockCatalog, BlockMeta, GraphInterface, NodeImpl, PortSpec, RunInput};
use crate::escape::{Escaped, escape_control};
use crate::graph::{EdgeDoc, GraphDoc, NodeDoc, RetryPolicy};
use crate::types::{Compat, ValueType, compatibility};

/// What is wrong, as a machine-readable kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    UnknownBlock,
    BadConfig,
    DuplicateId,
    UnknownNode,
    UnknownPort,
    TypeMismatch,
    MultipleWires,
    MissingInput,
    Cycle,
    DuplicateInterface,
    /// An MCP server of the graph cannot be started or reached.
    McpServer,
    /// An id or a name holds control characters (they would reach terminals raw).
    ControlCharacter,
}

/// One thing wrong with a graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    /// The node the problem is on.
    pub node: Option<String>,
    pub port: Option<String>,
    /// JSON path into the graph file, e.g. `$.edges[3].to`.
    pub path: String,
    /// A sentence that names the node and port and says what to do.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Messages quote ids, ports, paths and names from the file and from servers.
        write!(f, "{}: {}", Escaped(&self.path), Escaped(&self.message))
    }
}

/// A wired input of a valid node.
#[derive(Clone, Debug)]
pub struct InputSlot {
    pub port: String,
    pub ty: ValueType,
    pub required: bool,
    /// Index of the node the wire comes from.
    pub source_node: usize,
    pub source_port: String,
    pub compat: Compat,
    /// The input takes many wires: the node receives the values of all its slots as a list.
    pub many: bool,
}

/// Where one output port of a valid node is wired to.
#[derive(Clone, Debug)]
pub struct OutputFanout {
    pub port: String,
    /// `(node index, input slot index)` pairs.
    pub targets: Vec<(usize, usize)>,
}

/// A node that passed validation, with its wiring resolved to indices.
#[derive(Clone)]
pub struct ValidNode {
    pub id: String,
    /// Shared by every node of the same kind.
    pub meta: Arc<BlockMeta>,
    pub node: Arc<dyn NodeImpl>,
    pub timeout: Option<Duration>,
    pub retry: RetryPolicy,
    pub inputs: Vec<InputSlot>,
    pub outputs: Vec<OutputFanout>,
    /// Not run: its inputs pass through to its outputs ([`crate::bypass_outputs`]).
    pub bypass: bool,
}

/// A graph the executor can run: every block known, every wire typed, no cycles.
#[derive(Clone)]
pub struct ValidGraph {
    /// The document as validated, shared with whoever handed it over.
    pub doc: Arc<GraphDoc>,
    pub nodes: Vec<ValidNode>,
    /// Node indices in a topological order (ties broken by node id, so it is stable).
    pub topo_order: Vec<usize>,
    /// Each node's position in `topo_order`.
    pub topo_rank: Vec<usize>,
    /// Node indices sorted by node id, found the first time they are asked for.
    by_id: OnceLock<Vec<usize>>,
    /// [`ValidGraph::interface_inputs`], found the first time they are asked for (each run
    /// asks, for its secret inputs).
    interface_inputs: OnceLock<Vec<RunInput>>,
    /// Whether a node of the document has pinned outputs, found the first time asked.
    any_pinned: OnceLock<bool>,
}

impl ValidGraph {
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }

    /// Node indices in the order of their ids (a run's report lists its nodes so): sorted
    /// once per graph, however often it runs.
    pub fn order_by_id(&self) -> &[usize] {
        self.by_id.get_or_init(|| {
            let mut order: Vec<usize> = (0..self.nodes.len()).collect();
            // Ids are unique: the unstable sort puts them in the one order there is.
            order.sort_unstable_by(|&a, &b| self.nodes[a].id.cmp(&self.nodes[b].id));
            order
        })
    }

    /// The graph's declared inputs, sorted by name.
    pub fn interface_inputs(&self) -> Vec<RunInput> {
        self.interface_inputs
            .get_or_init(|| {
                let mut inputs: Vec<_> = self
                    .nodes
                    .iter()
                    .filter_map(|n| match n.node.interface() {
                        Some(GraphInterface::Input(input)) => Some(input),
                        _ => None,
                    })
                    .collect();
                inputs.sort_by(|a, b| a.name.cmp(&b.name));
                inputs
            })
            .clone()
    }

    /// Whether any node of the document has pinned outputs (looked for once per graph).
    pub fn any_pinned(&self) -> bool {
        *self
            .any_pinned
            .get_or_init(|| self.doc.nodes.iter().any(|node| node.pinned.is_some()))
    }

    /// The graph's declared output names, sorted.
    pub fn interface_outputs(&self) -> Vec<String> {
        let mut outputs: Vec<_> = self
            .nodes
            .iter()
            .filter_map(|n| match n.node.interface() {
                Some(GraphInterface::Output { name }) => Some(name),
                _ => None,
            })
            .collect();
        outputs.sort();
        outputs
    }
}

/// Instantiates one node from its document, or says why it cannot be.
pub fn instantiate_node(
    index: usize,
    node: &NodeDoc,
    catalog: &dyn BlockCatalog,
) -> Result<(BlockMeta, Arc<dyn NodeImpl>), Problem> {
    instantiate(index, node, catalog).map(|(block, imp)| (block.meta().clone(), imp))
}

/// A node's block metadata (shared per kind) and its instance.
type Instance = (Arc<BlockMeta>, Arc<dyn NodeImpl>);

/// A resolved wire, seen from the node it comes from.
struct Wire<'d> {
    from: usize,
    port: &'d str,
    to: usize,
    /// The wire's input slot on the `to` node.
    slot: usize,
}

/// One node's output fanouts from its wires (sorted by port), each list at its final size.
fn output_fanouts(wires: &[Wire<'_>]) -> Vec<OutputFanout> {
    let mut outputs = Vec::with_capacity(wires.chunk_by(|a, b| a.port == b.port).count());
    outputs.extend(wires.chunk_by(|a, b| a.port == b.port).map(|group| {
        OutputFanout {
            port: group
                .first()
                .map_or_else(String::new, |w| w.port.to_owned()),
            targets: group.iter().map(|w| (w.to, w.slot)).collect(),
        }
    }));
    outputs
}

fn instantiate<'c>(
    index: usize,
    node: &NodeDoc,
    catalog: &'c dyn BlockCatalog,
) -> Result<(&'c dyn Block, Arc<dyn NodeImpl>), Problem> {
    let Some(block) = catalog.block(&node.block) else {
        return Err(Problem {
            kind: ProblemKind::UnknownBlock,
            node: Some(node.id.clone()),
            port: None,
            path: format!("$.nodes[{index}].block"),
            message: format!(
                "node `{}` uses unknown block `{}`; see `agentloom blocks` for the available kinds",
                node.id, node.block
            ),
        });
    };
    match block.instantiate(&node.config, &catalog.config_ctx()) {
        Ok(imp) => Ok((block, imp)),
        Err(err) => Err(Problem {
            kind: ProblemKind::BadConfig,
            node: Some(node.id.clone()),
            port: None,
            path: format!("$.nodes[{index}].config.{}", err.field),
            message: format!("node `{}`: {err}", node.id),
        }),
    }
}

/// Checks a whole graph and resolves it for running. Returns every problem found.
pub fn validate(doc: &GraphDoc, catalog: &dyn BlockCatalog) -> Result<ValidGraph, Vec<Problem>> {
    validate_shared(Arc::new(doc.clone()), catalog)
}

/// [`validate`] for a document the caller hands over: the graph keeps it rather than a copy.
pub fn validate_shared(
    doc: Arc<GraphDoc>,
    catalog: &dyn BlockCatalog,
) -> Result<ValidGraph, Vec<Problem>> {
    let (nodes, topo_order, topo_rank) = resolve(&doc, catalog)?;
    Ok(ValidGraph {
        doc,
        nodes,
        topo_order,
        topo_rank,
        by_id: OnceLock::new(),
        interface_inputs: OnceLock::new(),
        any_pinned: OnceLock::new(),
    })
}

/// The nodes of a valid graph, and its topological order and ranks.
type Resolved = (Vec<ValidNode>, Vec<usize>, Vec<usize>);

fn resolve(doc: &GraphDoc, catalog: &dyn BlockCatalog) -> Result<Resolved, Vec<Problem>> {
    let mut problems = Vec::new();

    check_control_characters(doc, &mut problems);
    let index_by_id = index_by_id(doc, &mut problems);
    let instances = instantiate_all(doc, catalog, &mut problems);
    check_interface_names(doc, &instances, &mut problems);
    check_pinned_ports(doc, &instances, &mut problems);
    let (inputs, wired_from) = resolve_wires(doc, &index_by_id, &instances, &mut problems);
    check_required_inputs(doc, &instances, &inputs, &wired_from, &mut problems);
    let topo_order = match topological_order(doc, &inputs) {
        Ok(order) => order,
        Err(cycle) => {
            problems.push(cycle_problem(doc, &cycle));
            Vec::new()
        }
    };

    if !problems.is_empty() {
        return Err(problems);
    }

    let mut topo_rank = vec![0; doc.nodes.len()];
    for (rank, &i) in topo_order.iter().enumerate() {
        topo_rank[i] = rank;
    }
    let mut nodes = Vec::with_capacity(doc.nodes.len());
    for (i, ((doc_node, instance), inputs)) in
        doc.nodes.iter().zip(instances).zip(inputs).enumerate()
    {
        let Some((meta, node)) = instance else {
            continue;
        };
        nodes.push(ValidNode {
            id: doc_node.id.clone(),
            meta,
            node,
            timeout: doc_node.timeout_ms.map(Duration::from_millis),
            retry: doc_node.retry.clone().unwrap_or_default(),
            inputs,
            outputs: output_fanouts(wired_from.of(i)),
            bypass: doc_node.bypass,
        });
    }
    Ok((nodes, topo_order, topo_rank))
}

/// Each node's index by id; an id used twice is a problem.
fn index_by_id<'d>(doc: &'d GraphDoc, problems: &mut Vec<Problem>) -> HashMap<&'d str, usize> {
    let mut index_by_id: HashMap<&str, usize> = HashMap::with_capacity(doc.nodes.len());
    for (i, node) in doc.nodes.iter().enumerate() {
        if index_by_id.insert(node.id.as_str(), i).is_some() {
            problems.push(Problem {
                kind: ProblemKind::DuplicateId,
                node: Some(node.id.clone()),
                port: None,
                path: format!("$.nodes[{i}].id"),
                message: format!(
                    "node id `{}` is used more than once; ids must be unique",
                    node.id
                ),
            });
        }
    }
    index_by_id
}

/// Every node instantiated (`None` for one that cannot be, its problem added); nodes of one
/// block kind share its metadata.
fn instantiate_all(
    doc: &GraphDoc,
    catalog: &dyn BlockCatalog,
    problems: &mut Vec<Problem>,
) -> Vec<Option<Instance>> {
    let mut instances: Vec<Option<Instance>> = Vec::with_capacity(doc.nodes.len());
    let mut metas: HashMap<&str, Arc<BlockMeta>> = HashMap::new();
    for (i, node) in doc.nodes.iter().enumerate() {
        match instantiate(i, node, catalog) {
            Ok((block, imp)) => {
                let meta = metas
                    .entry(node.block.as_str())
                    .or_insert_with(|| Arc::new(block.meta().clone()))
                    .clone();
                instances.push(Some((meta, imp)));
            }
            Err(problem) => {
                problems.push(problem);
                instances.push(None);
            }
        }
    }
    instances
}

/// The graph's resolved wires, grouped by the node and port they come from.
struct WiresFrom<'d>(Vec<Wire<'d>>);

impl<'d> WiresFrom<'d> {
    /// Grouped by source node, then port; a stable sort keeps each port's targets in edge
    /// order.
    fn grouped(mut wires: Vec<Wire<'d>>) -> Self {
        wires.sort_by(|a, b| (a.from, a.port).cmp(&(b.from, b.port)));
        WiresFrom(wires)
    }

    /// The wires out of node `i`.
    fn of(&self, i: usize) -> &[Wire<'d>] {
        let start = self.0.partition_point(|w| w.from < i);
        let end = self.0.partition_point(|w| w.from <= i);
        &self.0[start..end]
    }
}

/// Resolves every wire to its nodes and ports: each node's input slots (per input port of
/// the target node) and the wires out of each node, or a problem for each wire that does not
/// hold. Each node's slots are allocated at their final size: a graph keeps them for as
/// long as it runs.
fn resolve_wires<'d>(
    doc: &'d GraphDoc,
    index_by_id: &HashMap<&str, usize>,
    instances: &[Option<Instance>],
    problems: &mut Vec<Problem>,
) -> (Vec<Vec<InputSlot>>, WiresFrom<'d>) {
    let mut wires_in = vec![0usize; doc.nodes.len()];
    for edge in &doc.edges {
        if let Some(&to_index) = index_by_id.get(edge.to.0.as_str()) {
            wires_in[to_index] += 1;
        }
    }
    let mut inputs: Vec<Vec<InputSlot>> = wires_in.into_iter().map(Vec::with_capacity).collect();
    let mut wired_from: Vec<Wire<'_>> = Vec::with_capacity(doc.edges.len());
    let mut wire_into: HashMap<(usize, &str), usize> = HashMap::with_capacity(doc.edges.len());
    for (e, edge) in doc.edges.iter().enumerate() {
        let (from_id, from_port) = (&edge.from.0, &edge.from.1);
        let (to_id, to_port) = (&edge.to.0, &edge.to.1);
        let from_index = index_by_id.get(from_id.as_str()).copied();
        let to_index = index_by_id.get(to_id.as_str()).copied();
        let mut ends_known = true;
        for (end, id, index) in [("from", from_id, from_index), ("to", to_id, to_index)] {
            if index.is_none() {
                ends_known = false;
                problems.push(Problem {
                    kind: ProblemKind::UnknownNode,
                    node: Some(id.clone()),
                    port: None,
                    path: format!("$.edges[{e}].{end}"),
                    message: format!("a wire refers to node `{id}`, which is not in the graph"),
                });
            }
        }
        let (Some(from_index), Some(to_index)) = (from_index, to_index) else {
            continue;
        };
        if !ends_known {
            continue;
        }
        let (Some((_, from_node)), Some((_, to_node))) =
            (&instances[from_index], &instances[to_index])
        else {
            continue;
        };
        let (in_spec, wire_ty, compat) = match check_wire(e, edge, from_node, to_node) {
            Ok(checked) => checked,
            Err(problem) => {
                problems.push(problem);
                continue;
            }
        };
        if let Some(previous) = wire_into.insert((to_index, to_port.as_str()), e)
            && !in_spec.many
        {
            problems.push(Problem {
                kind: ProblemKind::MultipleWires,
                node: Some(to_id.clone()),
                port: Some(to_port.clone()),
                path: format!("$.edges[{e}]"),
                message: format!(
                    "input `{to_id}.{to_port}` has two wires (edges {previous} and {e}); an input takes one wire"
                ),
            });
            continue;
        }
        let slot = inputs[to_index].len();
        inputs[to_index].push(InputSlot {
            port: to_port.clone(),
            ty: wire_ty,
            required: in_spec.required && !in_spec.many,
            source_node: from_index,
            source_port: from_port.clone(),
            compat,
            many: in_spec.many,
        });
        wired_from.push(Wire {
            from: from_index,
            port: from_port,
            to: to_index,
            slot,
        });
    }
    (inputs, WiresFrom::grouped(wired_from))
}

/// Wire `e` between two instantiated nodes: the input it goes into, the type one wire
/// brings there and how the value fits it, or why it cannot be (a port either node lacks,
/// types that do not fit).
fn check_wire<'n>(
    e: usize,
    edge: &EdgeDoc,
    from_node: &Arc<dyn NodeImpl>,
    to_node: &'n Arc<dyn NodeImpl>,
) -> Result<(&'n PortSpec, ValueType, Compat), Problem> {
    let (from_id, from_port) = (&edge.from.0, &edge.from.1);
    let (to_id, to_port) = (&edge.to.0, &edge.to.1);
    let Some(out_spec) = from_node.ports().output(from_port) else {
        return Err(unknown_port(
            e,
            "from",
            from_id,
            from_port,
            "output",
            &from_node.ports().outputs_with_error(),
        ));
    };
    let Some(in_spec) = to_node.ports().input(to_port) else {
        return Err(unknown_port(
            e,
            "to",
            to_id,
            to_port,
            "input",
            &to_node.ports().inputs,
        ));
    };
    // Each wire into a many-wire list input brings one item.
    let wire_ty = in_spec.wire_type().clone();
    match compatibility(&out_spec.ty, &wire_ty) {
        Ok(compat) => Ok((in_spec, wire_ty, compat)),
        Err(mismatch) => Err(Problem {
            kind: ProblemKind::TypeMismatch,
            node: Some(to_id.clone()),
            port: Some(to_port.clone()),
            path: format!("$.edges[{e}]"),
            message: format!("wire `{from_id}.{from_port}` -> `{to_id}.{to_port}`: {mismatch}"),
        }),
    }
}

/// Every required input is wired, except on a node offered as a tool (its caller's
/// arguments give them) or bypassed (not run).
fn check_required_inputs(
    doc: &GraphDoc,
    instances: &[Option<Instance>],
    inputs: &[Vec<InputSlot>],
    wired_from: &WiresFrom<'_>,
    problems: &mut Vec<Problem>,
) {
    for (i, node) in doc.nodes.iter().enumerate() {
        let Some((meta, imp)) = &instances[i] else {
            continue;
        };
        // A node offered as a tool gets its unwired inputs from the caller's arguments.
        let is_tool = wired_from
            .of(i)
            .iter()
            .any(|w| w.port == crate::block::TOOL_PORT);
        // A bypassed node is not run: it needs none of its inputs.
        if is_tool || node.bypass {
            continue;
        }
        for port in &imp.ports().inputs {
            if port.required && !inputs[i].iter().any(|slot| slot.port == port.name) {
                // An input that stands in for an empty config field can be given either way.
                let fix = meta
                    .config
                    .iter()
                    .find(|f| f.name == port.name)
                    .map_or_else(
                        || "connect an output to it".to_owned(),
                        |field| format!("set {} in the inspector or wire an input", field.label),
                    );
                problems.push(Problem {
                    kind: ProblemKind::MissingInput,
                    node: Some(node.id.clone()),
                    port: Some(port.name.clone()),
                    path: format!("$.nodes[{i}]"),
                    message: format!(
                        "node `{}`: required input `{}` ({}) is not wired; {fix}",
                        node.id, port.name, port.ty
                    ),
                });
            }
        }
    }
}

/// The problem of the wires forming `cycle` (node indices in order).
fn cycle_problem(doc: &GraphDoc, cycle: &[usize]) -> Problem {
    let names: Vec<&str> = cycle.iter().map(|&i| doc.nodes[i].id.as_str()).collect();
    Problem {
        kind: ProblemKind::Cycle,
        node: names.first().map(|s| (*s).to_owned()),
        port: None,
        path: format!("$.nodes[{}]", cycle.first().copied().unwrap_or(0)),
        message: format!(
            "the wires form a cycle through {}; a graph must not loop back on itself (use a for-each or agent block to repeat)",
            cycle_path(&names)
        ),
    }
}

/// Pinned outputs name outputs the node has: a pin for a port it lacks would feed nothing.
fn check_pinned_ports(doc: &GraphDoc, instances: &[Option<Instance>], problems: &mut Vec<Problem>) {
    for (i, (node, instance)) in doc.nodes.iter().zip(instances).enumerate() {
        let (Some(pinned), Some((_, imp))) = (&node.pinned, instance) else {
            continue;
        };
        let outputs = &imp.ports().outputs;
        for port in pinned.keys() {
            if outputs.iter().any(|p| &p.name == port) {
                continue;
            }
            let names: Vec<String> = outputs.iter().map(|p| format!("`{}`", p.name)).collect();
            problems.push(Problem {
                kind: ProblemKind::UnknownPort,
                node: Some(node.id.clone()),
                port: Some(port.clone()),
                path: format!("$.nodes[{i}].pinned.{port}"),
                message: format!(
                    "node `{}` has no output `{port}` to pin; its outputs are {} (unpin it, or pin them again from a run)",
                    node.id,
                    names.join(", ")
                ),
            });
        }
    }
}

fn unknown_port(
    edge: usize,
    end: &str,
    node: &str,
    port: &str,
    direction: &str,
    known: &[crate::block::PortSpec],
) -> Problem {
    let names: Vec<String> = known.iter().map(|p| format!("`{}`", p.name)).collect();
    let choices = if names.is_empty() {
        format!("it has no {direction}s")
    } else {
        format!("its {direction}s are {}", names.join(", "))
    };
    Problem {
        kind: ProblemKind::UnknownPort,
        node: Some(node.to_owned()),
        port: Some(port.to_owned()),
        path: format!("$.edges[{edge}].{end}"),
        message: format!("node `{node}` has no {direction} `{port}`; {choices}"),
    }
}

/// Ids, labels and names are shown in terminals and logs: control characters there could
/// rewrite what a person sees, so they are refused.
fn check_control_characters(doc: &GraphDoc, problems: &mut Vec<Problem>) {
    let has_control = |text: &str| text.chars().any(char::is_control);
    let mut refuse = |node: Option<&str>, path: String, what: &str, text: &str| {
        problems.push(Problem {
            kind: ProblemKind::ControlCharacter,
            node: node.map(|id| escape_control(id).into_owned()),
            port: None,
            path,
            message: format!(
                "{what} \"{}\" contains control characters (newlines, escapes…); use printable text",
                escape_control(text)
            ),
        });
    };
    if has_control(&doc.name) {
        refuse(None, "$.name".to_owned(), "the graph name", &doc.name);
    }
    for (i, node) in doc.nodes.iter().enumerate() {
        if has_control(&node.id) {
            refuse(
                Some(&node.id),
                format!("$.nodes[{i}].id"),
                "the node id",
                &node.id,
            );
        }
        if let Some(label) = node.label.as_deref().filter(|l| has_control(l)) {
            refuse(
                Some(&node.id),
                format!("$.nodes[{i}].label"),
                "the label",
                label,
            );
        }
        if let Some(name) = node
            .config
            .get("name")
            .and_then(|v| v.as_str())
            .filter(|n| has_control(n))
        {
            refuse(
                Some(&node.id),
                format!("$.nodes[{i}].config.name"),
                "the name",
                name,
            );
        }
    }
}

fn check_interface_names(
    doc: &GraphDoc,
    instances: &[Option<Instance>],
    problems: &mut Vec<Problem>,
) {
    let mut seen: HashMap<(bool, String), &str> = HashMap::new();
    for (i, instance) in instances.iter().enumerate() {
        let Some((_, imp)) = instance else { continue };
        let key = match imp.interface() {
            Some(GraphInterface::Input(RunInput { name, .. })) => (true, name),
            Some(GraphInterface::Output { name }) => (false, name),
            None => continue,
        };
        let id = doc.nodes[i].id.as_str();
        if let Some(first) = seen.get(&key) {
            let what = if key.0 { "input" } else { "output" };
            problems.push(Problem {
                kind: ProblemKind::DuplicateInterface,
                node: Some(id.to_owned()),
                port: None,
                path: format!("$.nodes[{i}].config.name"),
                message: format!(
                    "node `{id}` declares graph {what} `{}`, which node `{first}` declares already; names must be unique",
                    key.1
                ),
            });
        } else {
            seen.insert(key, id);
        }
    }
}

/// The nodes of a cycle as `a` -> `b` -> `a`; a long cycle is cut in the middle so that the
/// message stays readable in a problems list.
fn cycle_path(names: &[&str]) -> String {
    const SHOWN_AT_EACH_END: usize = 3;
    let quoted = |n: &&str| format!("`{n}`");
    let Some(first) = names.first() else {
        return String::new();
    };
    let cut = names.len() > 2 * SHOWN_AT_EACH_END + 1;
    let mut parts: Vec<String> = if cut {
        let mut parts: Vec<String> = names[..SHOWN_AT_EACH_END].iter().map(quoted).collect();
        parts.push(format!("… {} more …", names.len() - 2 * SHOWN_AT_EACH_END));
        parts.extend(names[names.len() - SHOWN_AT_EACH_END..].iter().map(quoted));
        parts
    } else {
        names.iter().map(quoted).collect()
    };
    parts.push(quoted(first));
    let path = parts.join(" -> ");
    if cut {
        format!("{path} ({} blocks)", names.len())
    } else {
        path
    }
}

/// Kahn's algorithm, iterative (graphs of 100,000 nodes must not overflow the stack).
/// Ready nodes are taken in document order, so the result is stable.
fn topological_order(doc: &GraphDoc, inputs: &[Vec<InputSlot>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = doc.nodes.len();
    let mut indegree = vec![0usize; n];
    let mut wires_out = vec![0usize; n];
    for slot in inputs.iter().flatten() {
        wires_out[slot.source_node] += 1;
    }
    let mut dependents: Vec<Vec<usize>> = wires_out.into_iter().map(Vec::with_capacity).collect();
    for (target, slots) in inputs.iter().enumerate() {
        for slot in slots {
            indegree[target] += 1;
            dependents[slot.source_node].push(target);
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..n)
        .filter(|&i| indegree[i] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &d in &dependents[i] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                ready.push(std::cmp::Reverse(d));
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk back along unfinished inputs from any node left to find one actual cycle.
    let Some(start) = (0..n).find(|&i| indegree[i] > 0) else {
        return Err(Vec::new());
    };
    let mut path = vec![start];
    let mut position: HashMap<usize, usize> = HashMap::from([(start, 0)]);
    let mut current = start;
    loop {
        let Some(next) = inputs[current]
            .iter()
            .map(|slot| slot.source_node)
            .find(|&s| indegree[s] > 0)
        else {
            return Err(path);
        };
        if let Some(&at) = position.get(&next) {
            let mut cycle: Vec<usize> = path[at..].to_vec();
            cycle.reverse();
            return Err(cycle);
        }
        position.insert(next, path.len());
        path.push(next);
        current = next;
    }
}
