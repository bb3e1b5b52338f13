//! `control.merge`: joins paths that a branch split; outputs whichever input arrived.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, ValueMap, ValueType, async_trait,
};

const MIN_INPUTS: u64 = 2;
const MAX_INPUTS: u64 = 8;

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(Merge::new())]
}

struct Merge {
    meta: BlockMeta,
}

impl Merge {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "control.merge",
                "Merge",
                "Control",
                "Outputs the first of its inputs that has a value, joining the paths of a branch.",
            )
            .field(
                #[allow(clippy::cast_possible_wrap, reason = "small constants")]
                ConfigField::integer(
                    "inputs",
                    "Inputs",
                    Some(MIN_INPUTS as i64),
                    Some(MAX_INPUTS as i64),
                )
                .default_value(serde_json::json!(MIN_INPUTS))
                .help("How many inputs (in1, in2, …) the node has."),
            ),
        }
    }
}

impl Block for Merge {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let count = ConfigReader(config).u64_or("inputs", MIN_INPUTS)?;
        if !(MIN_INPUTS..=MAX_INPUTS).contains(&count) {
            return Err(ConfigError::new(
                "inputs",
                format!("must be between {MIN_INPUTS} and {MAX_INPUTS}, got {count}"),
            ));
        }
        let names: Vec<String> = (1..=count).map(|i| format!("in{i}")).collect();
        let ports = Ports::new(
            names
                .iter()
                .map(|name| PortSpec::new(name.clone(), ValueType::Any).optional())
                .collect(),
            vec![
                PortSpec::new("value", ValueType::Any)
                    .describe("The first input that has a value."),
            ],
        );
        Ok(Arc::new(MergeNode { names, ports }))
    }
}

struct MergeNode {
    names: Vec<String>,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for MergeNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        // A null counts as "nothing arrived"; with no value at all the output is not taken.
        let first = self
            .names
            .iter()
            .find_map(|name| inputs.take_optional(name));
        Ok(first
            .map(|value| agentloom_core::outputs([("value", value)]))
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{config_error, inputs, instantiate, run_block};
    use agentloom_core::{Value, ValueMap};
    use serde_json::json;

    #[tokio::test]
    async fn outputs_the_first_present_input() {
        let out = run_block(
            "control.merge",
            json!({"inputs": 3}),
            inputs([("in2", Value::from("b")), ("in3", Value::from("c"))]),
        )
        .await
        .unwrap();
        assert_eq!(out, inputs([("value", Value::from("b"))]));
        let out = run_block(
            "control.merge",
            json!({}),
            inputs([("in1", Value::Null), ("in2", Value::Integer(2))]),
        )
        .await
        .unwrap();
        assert_eq!(out, inputs([("value", Value::Integer(2))]));
    }

    #[tokio::test]
    async fn nothing_present_means_no_output() {
        let out = run_block("control.merge", json!({}), ValueMap::new())
            .await
            .unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn ports_follow_the_count() {
        let node = instantiate("control.merge", json!({"inputs": 4})).unwrap();
        let names: Vec<&str> = node
            .ports()
            .inputs
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, vec!["in1", "in2", "in3", "in4"]);
        assert!(node.ports().inputs.iter().all(|p| !p.required));
        let err = config_error("control.merge", json!({"inputs": 9})).unwrap();
        assert_eq!(err, "config `inputs`: must be between 2 and 8, got 9");
    }
}
