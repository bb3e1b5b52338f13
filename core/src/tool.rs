//! A node offered as a tool: what travels on a `tool` wire ([`TOOL_PORT`]) and the JSON
//! Schema of its arguments, computed from any node's ports, never from its block kind.
//!
//! [`TOOL_PORT`]: crate::TOOL_PORT

use std::collections::BTreeMap;

use crate::block::{BlockMeta, Ports};
use crate::types::ValueType;
use crate::value::Value;

/// The description of node `node_id` as a tool: `{name, node, description, parameters,
/// side_effects}`. `wired` are the inputs fed by wires (they keep their upstream values);
/// every other input becomes an argument.
pub fn tool_descriptor(
    node_id: &str,
    label: Option<&str>,
    meta: &BlockMeta,
    ports: &Ports,
    wired: &[&str],
) -> Value {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for port in ports
        .inputs
        .iter()
        .filter(|p| !wired.contains(&p.name.as_str()))
    {
        let mut schema = type_schema(&port.ty);
        if !port.description.is_empty()
            && let Some(object) = schema.as_object_mut()
        {
            object.insert(
                "description".to_owned(),
                serde_json::Value::String(port.description.clone()),
            );
        }
        properties.insert(port.name.clone(), schema);
        if port.required {
            required.push(serde_json::Value::String(port.name.clone()));
        }
    }
    let parameters = serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    let description = match label.map(str::trim).filter(|l| !l.is_empty()) {
        Some(label) => format!("{label}: {}", meta.description),
        None => format!("{}: {}", meta.title, meta.description),
    };
    Value::object(BTreeMap::from([
        ("name".to_owned(), Value::text(tool_name(node_id))),
        ("node".to_owned(), Value::text(node_id)),
        ("description".to_owned(), Value::text(description)),
        ("parameters".to_owned(), Value::from_json(parameters)),
        ("side_effects".to_owned(), Value::Bool(meta.side_effects)),
    ]))
}

/// A node id as a tool name models accept: letters, digits, `_` and `-`, at most 64.
pub fn tool_name(node_id: &str) -> String {
    let name: String = node_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "tool".to_owned()
    } else {
        name
    }
}

/// The JSON Schema of values of type `ty`.
pub fn type_schema(ty: &ValueType) -> serde_json::Value {
    use serde_json::json;
    match ty {
        ValueType::Any => json!({}),
        ValueType::Text => json!({"type": "string"}),
        ValueType::Number => json!({"type": "number"}),
        ValueType::Integer => json!({"type": "integer"}),
        ValueType::Bool => json!({"type": "boolean"}),
        ValueType::Object | ValueType::Tool => json!({"type": "object"}),
        ValueType::Bytes => json!({"type": "string", "contentEncoding": "base64"}),
        ValueType::Messages => json!({
            "type": "array",
            "items": {"type": "object", "properties": {"role": {"type": "string"}, "content": {"type": "string"}}, "required": ["role", "content"]},
        }),
        ValueType::List(item) => json!({"type": "array", "items": type_schema(item)}),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;
    use crate::block::PortSpec;

    #[test]
    fn unwired_inputs_become_the_arguments_with_types_and_descriptions() {
        let meta = BlockMeta::new("x.y", "Look up", "Data", "Finds things.").with_side_effects();
        let ports = Ports::new(
            vec![
                PortSpec::new("query", ValueType::Text).describe("What to find."),
                PortSpec::new("limit", ValueType::Integer).optional(),
                PortSpec::new("token", ValueType::Text),
            ],
            vec![],
        );
        let tool = tool_descriptor(
            "find issues",
            Some("Issue finder"),
            &meta,
            &ports,
            &["token"],
        );
        let json = tool.to_json();
        assert_eq!(json["name"], "find_issues");
        assert_eq!(json["node"], "find issues");
        assert_eq!(json["side_effects"], true);
        assert_eq!(json["description"], "Issue finder: Finds things.");
        assert_eq!(
            json["parameters"],
            serde_json::json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to find."},
                    "limit": {"type": "integer"},
                },
                "required": ["query"],
                "additionalProperties": false,
            })
        );
    }
}
