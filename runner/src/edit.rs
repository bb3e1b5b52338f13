//! Editing a graph document one operation at a time, with the rules a user's edit on the
//! canvas obeys: a block must exist, ids are unique and never change, a wire is typed by
//! the one compatibility function and refused with the canvas's own reason, an input takes
//! one wire (a new one replaces the old) unless it takes many. The editing tools of
//! `agentloom mcp --edit` are built on these.

use agentloom_core::{
    BlockCatalog, ConnectError, EdgeDoc, GraphDoc, NodeDoc, PortSpec, Ports, Problem, TOOL_PORT,
    check_wire_ports, instantiate_node, validate,
};
use serde_json::json;

/// An edit that was refused, saying why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EditError {
    #[error("no block `{0}`; list_blocks lists them")]
    UnknownBlock(String),
    #[error("no node `{0}` in this graph")]
    UnknownNode(String),
    #[error("node id `{0}` is already used; ids are unique")]
    DuplicateId(String),
    #[error(
        "node id `{0}` is not allowed: use letters, digits, `_` and `-` (at most 64 characters)"
    )]
    BadId(String),
    #[error("the ports of node `{node}` are not known until its config is fixed: {problem}")]
    NoPorts { node: String, problem: String },
    #[error("no wire from `{from}` to `{to}`")]
    NoWire { from: String, to: String },
    #[error("{0}")]
    Connect(#[from] ConnectError),
}

/// Whether `id` may name a node: what a tool name or a file's reader can take safely.
fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether a block's nodes are named by their `name` field (graph inputs and outputs).
fn is_named(catalog: &dyn BlockCatalog, block: &str) -> bool {
    catalog.block(block).is_some_and(|b| {
        b.meta()
            .config
            .iter()
            .any(|f| f.name == "name" && f.required)
    })
}

/// Adds a node of `block` as the palette does: its config fields' defaults, then `config`
/// over them; a graph input or output is named after its id unless `config` names it.
/// Without an id, one is made from the block kind (or the given name); without a position
/// it goes right of the rightmost node. Returns the new node's id.
pub fn add_node(
    doc: &mut GraphDoc,
    catalog: &dyn BlockCatalog,
    block: &str,
    id: Option<&str>,
    config: serde_json::Map<String, serde_json::Value>,
    position: Option<[f64; 2]>,
) -> Result<String, EditError> {
    let Some(kind) = catalog.block(block) else {
        return Err(EditError::UnknownBlock(block.to_owned()));
    };
    let named = is_named(catalog, block);
    let id = match id {
        Some(id) if !is_valid_id(id) => return Err(EditError::BadId(id.to_owned())),
        Some(id) if doc.node(id).is_some() => return Err(EditError::DuplicateId(id.to_owned())),
        Some(id) => id.to_owned(),
        None => {
            let given_name = config
                .get("name")
                .and_then(|n| n.as_str())
                .filter(|_| named);
            let kind_base = block.rsplit('.').next().unwrap_or(block);
            doc.fresh_node_id(given_name.unwrap_or(kind_base))
        }
    };
    let mut node = NodeDoc::new(id.clone(), block);
    for field in &kind.meta().config {
        if let Some(default) = &field.default {
            node.config.insert(field.name.clone(), default.clone());
        }
    }
    if named && !config.contains_key("name") {
        node.config
            .insert("name".to_owned(), serde_json::Value::String(id.clone()));
    }
    for (field, value) in config {
        if !value.is_null() {
            node.config.insert(field, value);
        }
    }
    node.position = position.unwrap_or_else(|| {
        let right = doc
            .nodes
            .iter()
            .map(|n| n.position[0])
            .fold(None, |max: Option<f64>, x| {
                Some(max.map_or(x, |m| m.max(x)))
            });
        [right.map_or(40.0, |x| x + 260.0), 120.0]
    });
    doc.nodes.push(node);
    doc.normalize();
    Ok(id)
}

/// The index of node `id`.
fn node_index(doc: &GraphDoc, id: &str) -> Result<usize, EditError> {
    doc.nodes
        .iter()
        .position(|n| n.id == id)
        .ok_or_else(|| EditError::UnknownNode(id.to_owned()))
}

/// The block kind of node `id` (empty when there is none).
fn node_block(doc: &GraphDoc, id: &str) -> String {
    doc.node(id).map(|n| n.block.clone()).unwrap_or_default()
}

/// The outputs node `id` offers on the canvas: its declared ones, `error`, and `tool`
/// unless it is a graph input or output.
pub fn node_outputs(
    doc: &GraphDoc,
    catalog: &dyn BlockCatalog,
    ports: &Ports,
    id: &str,
) -> Vec<PortSpec> {
    let named = is_named(catalog, &node_block(doc, id));
    let mut outputs = ports.outputs_with_error();
    outputs.retain(|port| port.name != TOOL_PORT || !named);
    outputs
}

/// The ports node `id` has with its config as it is.
pub fn node_ports(
    doc: &GraphDoc,
    catalog: &dyn BlockCatalog,
    id: &str,
) -> Result<Ports, EditError> {
    let index = node_index(doc, id)?;
    instantiate_node(index, &doc.nodes[index], catalog)
        .map(|(_, node)| node.ports().clone())
        .map_err(|problem| EditError::NoPorts {
            node: id.to_owned(),
            problem: problem.message,
        })
}

/// Sets config fields of node `id` (a null removes the field). Wires to ports the node no
/// longer has are removed, as on the canvas; they are returned.
pub fn set_config(
    doc: &mut GraphDoc,
    catalog: &dyn BlockCatalog,
    id: &str,
    values: serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<EdgeDoc>, EditError> {
    let index = node_index(doc, id)?;
    let node = &mut doc.nodes[index];
    for (field, value) in values {
        if value.is_null() {
            node.config.remove(&field);
        } else {
            node.config.insert(field, value);
        }
    }
    // A config the block refuses leaves the wires alone: validate names the problem.
    let Ok(ports) = node_ports(doc, catalog, id) else {
        return Ok(Vec::new());
    };
    let (kept, dropped): (Vec<EdgeDoc>, Vec<EdgeDoc>) =
        std::mem::take(&mut doc.edges).into_iter().partition(|e| {
            (e.from.0 != id || ports.output(&e.from.1).is_some())
                && (e.to.0 != id || ports.input(&e.to.1).is_some())
        });
    doc.edges = kept;
    Ok(dropped)
}

/// Wires output `from` (node, port) to input `to` (node, port), refused with the canvas's
/// reason when the ends do not fit. An input that takes one wire loses its old one, which
/// is returned.
pub fn connect(
    doc: &mut GraphDoc,
    catalog: &dyn BlockCatalog,
    from: (&str, &str),
    to: (&str, &str),
) -> Result<Vec<EdgeDoc>, EditError> {
    let from_ports = node_ports(doc, catalog, from.0)?;
    let to_ports = node_ports(doc, catalog, to.0)?;
    // A graph input or output is never a tool: the canvas shows it no `tool` output.
    let out = from_ports
        .output(from.1)
        .filter(|port| port.name != TOOL_PORT || !is_named(catalog, &node_block(doc, from.0)))
        .ok_or_else(|| ConnectError::UnknownPort {
            node: from.0.to_owned(),
            port: from.1.to_owned(),
            side: "output",
        })?;
    let inp = to_ports
        .input(to.1)
        .ok_or_else(|| ConnectError::UnknownPort {
            node: to.0.to_owned(),
            port: to.1.to_owned(),
            side: "input",
        })?;
    check_wire_ports(from.0, &out, to.0, inp)?;
    let wire = EdgeDoc::new(from.0, from.1, to.0, to.1);
    let mut replaced = Vec::new();
    if !inp.many {
        let (kept, old): (Vec<EdgeDoc>, Vec<EdgeDoc>) = std::mem::take(&mut doc.edges)
            .into_iter()
            .partition(|e| e.to != wire.to || *e == wire);
        doc.edges = kept;
        replaced = old;
    }
    if !doc.edges.contains(&wire) {
        doc.edges.push(wire);
    }
    doc.normalize();
    Ok(replaced)
}

/// Removes the wire from `from` to `to`; without `from`, every wire into `to`. Returns what
/// was removed.
pub fn disconnect(
    doc: &mut GraphDoc,
    from: Option<(&str, &str)>,
    to: (&str, &str),
) -> Result<Vec<EdgeDoc>, EditError> {
    let into = (to.0.to_owned(), to.1.to_owned());
    let matches =
        |e: &EdgeDoc| e.to == into && from.is_none_or(|f| e.from.0 == f.0 && e.from.1 == f.1);
    let (removed, kept): (Vec<EdgeDoc>, Vec<EdgeDoc>) = std::mem::take(&mut doc.edges)
        .into_iter()
        .partition(matches);
    doc.edges = kept;
    if removed.is_empty() {
        return Err(EditError::NoWire {
            from: from.map_or_else(|| "any output".to_owned(), |(n, p)| format!("{n}.{p}")),
            to: format!("{}.{}", to.0, to.1),
        });
    }
    Ok(removed)
}

/// Removes node `id` and its wires; returns the wires removed.
pub fn remove_node(doc: &mut GraphDoc, id: &str) -> Result<Vec<EdgeDoc>, EditError> {
    let index = node_index(doc, id)?;
    doc.nodes.remove(index);
    let (removed, kept): (Vec<EdgeDoc>, Vec<EdgeDoc>) = std::mem::take(&mut doc.edges)
        .into_iter()
        .partition(|e| e.from.0 == id || e.to.0 == id);
    doc.edges = kept;
    Ok(removed)
}

/// Moves node `id` to `[x, y]` on the canvas.
pub fn move_node(doc: &mut GraphDoc, id: &str, position: [f64; 2]) -> Result<(), EditError> {
    let index = node_index(doc, id)?;
    doc.nodes[index].position = position;
    Ok(())
}

/// Everything wrong with `doc` (empty when it would run).
pub fn problems(doc: &GraphDoc, catalog: &dyn BlockCatalog) -> Vec<Problem> {
    validate(doc, catalog).err().unwrap_or_default()
}

/// The blocks of `catalog` as JSON: kind, title, category, description, side effects,
/// credential, ports (with the default config; a block whose ports need config says so)
/// and the JSON Schema of its config.
pub fn catalog_entries(catalog: &dyn BlockCatalog) -> Vec<serde_json::Value> {
    catalog
        .blocks()
        .into_iter()
        .map(|block| {
            let meta = block.meta();
            let ports = block
                .instantiate(&agentloom_core::Config::new(), &catalog.config_ctx())
                .map(|node| {
                    let ports = node.ports();
                    json!({"inputs": ports.inputs, "outputs": ports.outputs_with_error()})
                })
                .unwrap_or_else(|e| json!({"depends_on_config": e.to_string()}));
            json!({
                "kind": meta.kind,
                "title": meta.title,
                "category": meta.category,
                "description": meta.description,
                "side_effects": meta.side_effects,
                "credential": meta.credential,
                "ports": ports,
                "config_schema": meta.config_schema(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> agentloom_blocks::Registry {
        agentloom_blocks::Registry::builtin()
    }

    fn map(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn nodes_get_stable_ids_and_the_palettes_defaults() {
        let catalog = catalog();
        let mut doc = GraphDoc::new("t");
        let input = add_node(
            &mut doc,
            &catalog,
            "graph.input",
            None,
            map(json!({"name": "who"})),
            None,
        )
        .unwrap();
        assert_eq!(input, "who");
        assert_eq!(
            doc.node("who").unwrap().config.get("name"),
            Some(&json!("who"))
        );
        let out = add_node(
            &mut doc,
            &catalog,
            "graph.output",
            Some("result"),
            map(json!({})),
            None,
        )
        .unwrap();
        assert_eq!(
            doc.node(&out).unwrap().config.get("name"),
            Some(&json!("result"))
        );
        assert!(doc.node(&out).unwrap().position[0] > doc.node("who").unwrap().position[0]);
        assert_eq!(
            add_node(
                &mut doc,
                &catalog,
                "graph.output",
                Some("result"),
                map(json!({})),
                None
            ),
            Err(EditError::DuplicateId("result".to_owned()))
        );
        assert_eq!(
            add_node(&mut doc, &catalog, "no.such", None, map(json!({})), None),
            Err(EditError::UnknownBlock("no.such".to_owned()))
        );
    }

    #[test]
    fn a_wire_replaces_the_old_one_and_a_refused_one_says_why() {
        let catalog = catalog();
        let mut doc = GraphDoc::new("t");
        for (block, id, config) in [
            ("graph.input", "a", json!({"type": "text"})),
            ("graph.input", "b", json!({"type": "text"})),
            ("graph.output", "out", json!({})),
        ] {
            add_node(&mut doc, &catalog, block, Some(id), map(config), None).unwrap();
        }
        assert!(
            connect(&mut doc, &catalog, ("a", "value"), ("out", "value"))
                .unwrap()
                .is_empty()
        );
        let replaced = connect(&mut doc, &catalog, ("b", "value"), ("out", "value")).unwrap();
        assert_eq!(replaced, [EdgeDoc::new("a", "value", "out", "value")]);
        assert_eq!(doc.edges, [EdgeDoc::new("b", "value", "out", "value")]);
        let err = connect(&mut doc, &catalog, ("a", "value"), ("a", "value")).unwrap_err();
        assert!(err.to_string().contains("no input `value`"), "{err}");
        assert_eq!(
            remove_node(&mut doc, "b").unwrap(),
            [EdgeDoc::new("b", "value", "out", "value")]
        );
        assert!(doc.edges.is_empty());
    }
}
