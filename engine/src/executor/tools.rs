//! A node offered as a tool: the inputs of one call, its description, and which nodes the
//! dataflow leaves to their callers.

use std::sync::Arc;

use agentloom_core::{
    BlockError, TOOL_PORT, ValidGraph, ValidNode, Value, ValueMap, coerce, tool_descriptor,
};

use super::shared::RunShared;

/// The inputs of one call of tool node `tool`: its wired inputs' values, and `arguments`
/// for the others, each converted to its port's type.
pub(super) fn tool_call_inputs(
    shared: &RunShared,
    index: usize,
    tool: &ValidNode,
    arguments: Value,
) -> Result<ValueMap, BlockError> {
    let mut inputs = shared
        .tool_inputs
        .lock()
        .ok()
        .and_then(|bound| bound.get(&index).cloned())
        .unwrap_or_default();
    let arguments = match arguments {
        Value::Object(map) => Arc::unwrap_or_clone(map),
        Value::Null => ValueMap::new(),
        other => {
            return Err(BlockError::permanent(format!(
                "the arguments of tool `{}` must be an object, not {}",
                tool.id,
                other.kind_name()
            )));
        }
    };
    let ports = tool.node.ports();
    for (name, value) in arguments {
        let Some(spec) = ports.input(&name) else {
            return Err(BlockError::permanent(format!(
                "tool `{}` has no argument `{name}`",
                tool.id
            )));
        };
        if tool.inputs.iter().any(|slot| slot.port == name) {
            return Err(BlockError::permanent(format!(
                "`{name}` of tool `{}` is wired, so it is not an argument",
                tool.id
            )));
        }
        let value = coerce(value, &spec.ty).map_err(|e| BlockError::input(&name, e))?;
        inputs.insert(name, value);
    }
    if let Some(missing) = ports
        .inputs
        .iter()
        .find(|p| p.required && !inputs.contains_key(&p.name))
    {
        return Err(BlockError::permanent(format!(
            "tool `{}` needs argument `{}` ({})",
            tool.id, missing.name, missing.ty
        )));
    }
    Ok(inputs)
}

/// A node's description as a tool, from its ports and which of them are wired.
pub(super) fn describe_tool(graph: &ValidGraph, index: usize) -> Value {
    let node = &graph.nodes[index];
    let wired: Vec<&str> = node.inputs.iter().map(|slot| slot.port.as_str()).collect();
    let label = graph
        .doc
        .nodes
        .iter()
        .find(|n| n.id == node.id)
        .and_then(|n| n.label.as_deref());
    tool_descriptor(&node.id, label, &node.meta, node.node.ports(), &wired)
}

/// A node whose outputs only feed tool wires (and its error): its consumers call it; the
/// dataflow does not run it.
pub(super) fn only_a_tool(node: &ValidNode) -> bool {
    node.outputs.iter().any(|f| f.port == TOOL_PORT)
        && node
            .outputs
            .iter()
            .all(|f| f.port == TOOL_PORT || f.port == agentloom_core::ERROR_PORT)
}
