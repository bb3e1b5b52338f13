//! Port types as JSON Schema and back: how graph inputs are described to other tools (MCP
//! tool input schemas) and how other tools' parameters become ports.

use serde_json::json;

use crate::types::ValueType;

/// The JSON Schema of values of type `ty`.
pub fn value_type_schema(ty: &ValueType) -> serde_json::Value {
    match ty {
        ValueType::Any | ValueType::Tool => json!({}),
        ValueType::Text => json!({"type": "string"}),
        ValueType::Number => json!({"type": "number"}),
        ValueType::Integer => json!({"type": "integer"}),
        ValueType::Bool => json!({"type": "boolean"}),
        ValueType::Object => json!({"type": "object"}),
        ValueType::Bytes => json!({"type": "string", "contentEncoding": "base64"}),
        ValueType::Messages => json!({
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"role": {"type": "string"}, "content": {"type": "string"}},
                "required": ["role", "content"]
            }
        }),
        ValueType::List(item) => json!({"type": "array", "items": value_type_schema(item)}),
    }
}

/// The port type that holds values of a JSON Schema; `json` (any) when the schema allows
/// several types or says nothing.
pub fn value_type_from_schema(schema: &serde_json::Value) -> ValueType {
    let types: Vec<&str> = match schema.get("type") {
        Some(serde_json::Value::String(one)) => vec![one.as_str()],
        Some(serde_json::Value::Array(many)) => many
            .iter()
            .filter_map(serde_json::Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => Vec::new(),
    };
    match types.as_slice() {
        ["string"] => ValueType::Text,
        ["number"] => ValueType::Number,
        ["integer"] => ValueType::Integer,
        ["boolean"] => ValueType::Bool,
        ["object"] => ValueType::Object,
        ["array"] => ValueType::list_of(
            schema
                .get("items")
                .map_or(ValueType::Any, value_type_from_schema),
        ),
        _ => ValueType::Any,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_survive_the_round_trip() {
        for ty in [
            ValueType::Text,
            ValueType::Number,
            ValueType::Integer,
            ValueType::Bool,
            ValueType::Object,
            ValueType::Any,
            ValueType::list_of(ValueType::Text),
            ValueType::list_of(ValueType::list_of(ValueType::Integer)),
        ] {
            assert_eq!(value_type_from_schema(&value_type_schema(&ty)), ty);
        }
    }

    #[test]
    fn nullable_and_mixed_schemas() {
        assert_eq!(
            value_type_from_schema(&json!({"type": ["string", "null"]})),
            ValueType::Text
        );
        assert_eq!(
            value_type_from_schema(&json!({"type": ["string", "number"]})),
            ValueType::Any
        );
        assert_eq!(
            value_type_from_schema(&json!({"anyOf": [{"type": "string"}]})),
            ValueType::Any
        );
    }
}
