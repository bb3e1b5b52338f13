//! `data.constant`: a fixed value set in the inspector.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait, coerce,
};

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(Constant::new())]
}

struct Constant {
    meta: BlockMeta,
}

impl Constant {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "data.constant",
                "Constant",
                "Data",
                "Outputs a fixed value written in its config.",
            )
            .field(
                ConfigField::json("value", "Value")
                    .required()
                    .help("Any JSON value: text in quotes, a number, a list, an object, or null."),
            )
            .field(
                ConfigField::value_type("type", "Type")
                    .default_value(serde_json::json!("json"))
                    .help("The type of the output port; the value must fit it."),
            ),
        }
    }
}

impl Block for Constant {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let ty = ConfigReader(config).value_type_or("type", ValueType::Any)?;
        // `null` is a value a constant may hold, so only a missing key is refused.
        let json = config
            .get("value")
            .ok_or_else(|| ConfigError::new("value", "is required"))?;
        let value = coerce(Value::from_json(json.clone()), &ty)
            .map_err(|e| ConfigError::new("value", format!("does not fit type {ty}: {e}")))?;
        Ok(Arc::new(ConstantNode {
            value,
            ports: Ports::new(Vec::new(), vec![PortSpec::new("value", ty)]),
        }))
    }
}

struct ConstantNode {
    value: Value,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for ConstantNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, _inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        Ok(agentloom_core::outputs([("value", self.value.clone())]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{config_error, instantiate, run_block};
    use serde_json::json;

    #[tokio::test]
    async fn outputs_the_configured_value() {
        let out = run_block(
            "data.constant",
            json!({"value": {"a": [1, 2]}}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(
            out.get("value"),
            Some(&Value::from_json(json!({"a": [1, 2]})))
        );
        let out = run_block("data.constant", json!({"value": null}), ValueMap::new())
            .await
            .unwrap();
        assert_eq!(out.get("value"), Some(&Value::Null));
    }

    #[tokio::test]
    async fn coerces_to_the_declared_type() {
        let node = instantiate("data.constant", json!({"value": 2, "type": "number"})).unwrap();
        assert_eq!(node.ports().outputs[0].ty, ValueType::Number);
        let out = run_block(
            "data.constant",
            json!({"value": 2, "type": "number"}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(
            out.get("value"),
            Some(&Value::Integer(2)),
            "a whole number stays integral"
        );
    }

    #[test]
    fn missing_or_ill_typed_value_is_a_config_error() {
        let err = config_error("data.constant", json!({})).unwrap();
        assert!(err.contains("config `value`: is required"), "{err}");
        let err = config_error("data.constant", json!({"value": "x", "type": "integer"})).unwrap();
        assert!(
            err.contains("config `value`: does not fit type integer"),
            "{err}"
        );
    }
}
