//! `json.query`: picks values out of JSON with a JSONPath query (RFC 9535).

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};
use serde_json_path::JsonPath;

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(JsonQuery::new())]
}

struct JsonQuery {
    meta: BlockMeta,
}

impl JsonQuery {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "json.query",
                "Query JSON",
                "Data",
                "Selects parts of a JSON value with a JSONPath query such as `$.items[*].title`.",
            )
            .field(
                ConfigField::text("query", "Query")
                    .required()
                    .help("A JSONPath query starting at `$`, e.g. `$.items[?@.open == true].id`."),
            )
            .field(
                ConfigField::boolean("first", "First match only")
                    .default_value(serde_json::json!(false))
                    .help("Output the first match instead of the list of all matches; fails when nothing matches."),
            ),
        }
    }
}

impl Block for JsonQuery {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let reader = ConfigReader(config);
        let text = reader.required_str("query")?.trim().to_owned();
        let path = JsonPath::parse(&text).map_err(|e| {
            ConfigError::new(
                "query",
                format!("`{text}` is not a valid JSONPath query: {e}"),
            )
        })?;
        let first = reader.bool_or("first", false)?;
        let ports = Ports::new(
            vec![PortSpec::new("value", ValueType::Any).describe("The JSON to query.")],
            vec![PortSpec::new("result", ValueType::Any).describe(if first {
                "The first match."
            } else {
                "The list of matches, in document order."
            })],
        );
        Ok(Arc::new(JsonQueryNode {
            text,
            path,
            first,
            ports,
        }))
    }
}

struct JsonQueryNode {
    text: String,
    path: JsonPath,
    first: bool,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for JsonQueryNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let json = inputs.take_value("value")?.to_json();
        let matches = self.path.query(&json);
        let result = if self.first {
            let first = matches.first().ok_or_else(|| {
                BlockError::permanent(format!("query `{}` matched nothing", self.text))
            })?;
            Value::from_json(first.clone())
        } else {
            Value::list(
                matches
                    .iter()
                    .map(|m| Value::from_json((*m).clone()))
                    .collect(),
            )
        };
        Ok(agentloom_core::outputs([("result", result)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{config_error, inputs, instantiate, run_block};
    use serde_json::json;

    fn doc() -> Value {
        Value::from_json(json!({
            "items": [
                {"id": 1, "title": "a", "open": true},
                {"id": 2, "title": "b", "open": false},
                {"id": 3, "title": "c", "open": true}
            ]
        }))
    }

    #[tokio::test]
    async fn returns_all_matches_in_order() {
        let out = run_block(
            "json.query",
            json!({"query": "$.items[?@.open == true].id"}),
            inputs([("value", doc())]),
        )
        .await
        .unwrap();
        assert_eq!(out.get("result"), Some(&Value::from_json(json!([1, 3]))));
        let out = run_block(
            "json.query",
            json!({"query": "$.nothing"}),
            inputs([("value", doc())]),
        )
        .await
        .unwrap();
        assert_eq!(out.get("result"), Some(&Value::list(Vec::new())));
    }

    #[tokio::test]
    async fn first_returns_one_value_or_fails() {
        let out = run_block(
            "json.query",
            json!({"query": "$.items[*].title", "first": true}),
            inputs([("value", doc())]),
        )
        .await
        .unwrap();
        assert_eq!(out.get("result"), Some(&Value::from("a")));
        let err = run_block(
            "json.query",
            json!({"query": "$.missing", "first": true}),
            inputs([("value", doc())]),
        )
        .await
        .unwrap_err();
        assert_eq!(err.message, "query `$.missing` matched nothing");
    }

    #[test]
    fn invalid_query_is_a_config_error() {
        let err = config_error("json.query", json!({"query": "$.items[?"})).unwrap();
        assert!(
            err.starts_with("config `query`: `$.items[?` is not a valid JSONPath query"),
            "{err}"
        );
        assert!(instantiate("json.query", json!({})).is_err());
    }
}
