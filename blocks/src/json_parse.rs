//! `json.parse`: text to a JSON value.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, InputsExt as _, NodeImpl,
    PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(JsonParse::new())]
}

struct JsonParse {
    meta: BlockMeta,
    node: Arc<JsonParseNode>,
}

impl JsonParse {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "json.parse",
                "Parse JSON",
                "Data",
                "Reads text as JSON and outputs the value.",
            ),
            node: Arc::new(JsonParseNode {
                ports: Ports::new(
                    vec![PortSpec::new("text", ValueType::Text).describe("JSON text.")],
                    vec![PortSpec::new("value", ValueType::Any).describe("The parsed value.")],
                ),
            }),
        }
    }
}

impl Block for JsonParse {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(self.node.clone())
    }
}

struct JsonParseNode {
    ports: Ports,
}

#[async_trait]
impl NodeImpl for JsonParseNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let text = inputs.take_text("text")?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| BlockError::input("text", format!("not valid JSON: {e}")))?;
        Ok(agentloom_core::outputs([("value", Value::from_json(json))]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{inputs, run_block};
    use serde_json::json;

    #[tokio::test]
    async fn parses_json_text() {
        let out = run_block(
            "json.parse",
            json!({}),
            inputs([("text", Value::from(r#"{"a": [1, 2.5, "x"]}"#))]),
        )
        .await
        .unwrap();
        assert_eq!(
            out.get("value"),
            Some(&Value::from_json(json!({"a": [1, 2.5, "x"]})))
        );
    }

    #[tokio::test]
    async fn invalid_json_names_line_and_column() {
        let err = run_block(
            "json.parse",
            json!({}),
            inputs([("text", Value::from("{\n  \"a\": tru\n}"))]),
        )
        .await
        .unwrap_err();
        assert!(!err.is_retryable());
        assert!(
            err.message.starts_with("input `text`: not valid JSON"),
            "{}",
            err.message
        );
        assert!(err.message.contains("at line 3 column"), "{}", err.message);
    }
}
