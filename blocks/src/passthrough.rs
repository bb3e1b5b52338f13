//! `control.passthrough`: hands its input on unchanged.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, NodeImpl, PortSpec, Ports,
    RunCtx, ValueMap, ValueType, async_trait,
};

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(Passthrough::new())]
}

struct Passthrough {
    meta: BlockMeta,
    node: Arc<PassthroughNode>,
}

impl Passthrough {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "control.passthrough",
                "Pass through",
                "Control",
                "Outputs its input unchanged; useful as a junction or a placeholder.",
            ),
            node: Arc::new(PassthroughNode {
                ports: Ports::new(
                    vec![PortSpec::new("value", ValueType::Any)],
                    vec![PortSpec::new("value", ValueType::Any)],
                ),
            }),
        }
    }
}

impl Block for Passthrough {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        // Every instance is the same; share one.
        Ok(self.node.clone())
    }
}

struct PassthroughNode {
    ports: Ports,
}

#[async_trait]
impl NodeImpl for PassthroughNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        // Reuse the input map: no allocation besides what the caller made.
        inputs.retain(|port, _| port == "value");
        if inputs.is_empty() {
            return Err(BlockError::input("value", "no value arrived"));
        }
        Ok(inputs)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{inputs, run_block};
    use agentloom_core::{Value, ValueMap};
    use serde_json::json;

    #[tokio::test]
    async fn hands_the_value_on() {
        let value = Value::from_json(json!({"a": [1, "b"]}));
        let out = run_block(
            "control.passthrough",
            json!({}),
            inputs([("value", value.clone())]),
        )
        .await
        .unwrap();
        assert_eq!(out, inputs([("value", value)]));
        let err = run_block("control.passthrough", json!({}), ValueMap::new())
            .await
            .unwrap_err();
        assert_eq!(err.message, "input `value`: no value arrived");
    }
}
