//! `control.branch`: sends a value down one of two paths; the other path is skipped.

use std::cmp::Ordering;
use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

const OPS: [&str; 6] = [
    "truthy",
    "equals",
    "not_equals",
    "contains",
    "greater_than",
    "less_than",
];

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(Branch::new())]
}

struct Branch {
    meta: BlockMeta,
}

impl Branch {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "control.branch",
                "Branch",
                "Control",
                "Tests a condition and continues on the `true` or the `false` output; the other side is skipped.",
            )
            .field(
                ConfigField::choice("op", "Test", &OPS)
                    .default_value(serde_json::json!("truthy"))
                    .help("truthy: not empty, zero, false or null. contains: text contains text, list contains item, object has key."),
            )
            .field(ConfigField::json("operand", "Compare with").help(
                "The value the condition is compared with (not used by truthy); required for contains and the comparisons.",
            )),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Truthy,
    Equals,
    NotEquals,
    Contains,
    GreaterThan,
    LessThan,
}

impl Block for Branch {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let reader = ConfigReader(config);
        let op = match reader.choice_or("op", &OPS, "truthy")? {
            "equals" => Op::Equals,
            "not_equals" => Op::NotEquals,
            "contains" => Op::Contains,
            "greater_than" => Op::GreaterThan,
            "less_than" => Op::LessThan,
            _ => Op::Truthy,
        };
        let operand = reader.get("operand").map(|j| Value::from_json(j.clone()));
        if operand.is_none() && matches!(op, Op::Contains | Op::GreaterThan | Op::LessThan) {
            return Err(ConfigError::new(
                "operand",
                "is required for this test; set the value to compare the condition with",
            ));
        }
        let ports = Ports::new(
            vec![
                PortSpec::new("condition", ValueType::Any).describe("The value tested."),
                PortSpec::new("value", ValueType::Any).optional().describe(
                    "Sent on the taken output; the condition is sent when this is not wired.",
                ),
            ],
            vec![
                PortSpec::new("true", ValueType::Any).describe("Taken when the test holds."),
                PortSpec::new("false", ValueType::Any)
                    .describe("Taken when the test does not hold."),
            ],
        );
        Ok(Arc::new(BranchNode {
            op,
            operand: operand.unwrap_or(Value::Null),
            ports,
        }))
    }
}

struct BranchNode {
    op: Op,
    operand: Value,
    ports: Ports,
}

impl BranchNode {
    fn test(&self, condition: &Value) -> Result<bool, BlockError> {
        let operand = &self.operand;
        Ok(match self.op {
            Op::Truthy => condition.is_truthy(),
            Op::Equals => loose_eq(condition, operand),
            Op::NotEquals => !loose_eq(condition, operand),
            Op::Contains => match (condition, operand) {
                (Value::Text(hay), Value::Text(needle)) => hay.contains(needle.as_str()),
                (Value::Text(hay), other) => hay.contains(&other.to_text()),
                (Value::List(items), needle) => items.iter().any(|item| loose_eq(item, needle)),
                (Value::Object(map), Value::Text(key)) => map.contains_key(key.as_str()),
                (other, _) => {
                    return Err(BlockError::input(
                        "condition",
                        format!(
                            "`contains` needs text, a list or an object (with a text operand), got {}",
                            other.kind_name()
                        ),
                    ));
                }
            },
            Op::GreaterThan => compare(condition, operand)? == Ordering::Greater,
            Op::LessThan => compare(condition, operand)? == Ordering::Less,
        })
    }
}

/// Equality where `1` equals `1.0`, applied through lists and objects.
fn loose_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Integer(_) | Value::Number(_), Value::Integer(_) | Value::Number(_)) => {
            a.as_f64() == b.as_f64()
        }
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(a, b)| loose_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| loose_eq(v, w)))
        }
        _ => a == b,
    }
}

fn compare(a: &Value, b: &Value) -> Result<Ordering, BlockError> {
    match (a, b) {
        (Value::Text(x), Value::Text(y)) => Ok(x.cmp(y)),
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x
                .partial_cmp(&y)
                .ok_or_else(|| BlockError::input("condition", "is not a number (NaN)")),
            _ => Err(BlockError::input(
                "condition",
                format!(
                    "cannot compare {} with {}; comparisons need two numbers or two texts",
                    a.kind_name(),
                    b.kind_name()
                ),
            )),
        },
    }
}

#[async_trait]
impl NodeImpl for BranchNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let condition = inputs.take_value("condition")?;
        let taken = if self.test(&condition)? {
            "true"
        } else {
            "false"
        };
        let value = inputs.remove("value").unwrap_or(condition);
        Ok(agentloom_core::outputs([(taken, value)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{config_error, inputs, run_block};
    use serde_json::json;

    async fn branch(
        config: serde_json::Value,
        condition: serde_json::Value,
    ) -> Result<&'static str, BlockError> {
        let out = run_block(
            "control.branch",
            config,
            inputs([("condition", Value::from_json(condition))]),
        )
        .await?;
        assert_eq!(out.len(), 1, "exactly one output is taken: {out:?}");
        Ok(if out.contains_key("true") {
            "true"
        } else {
            "false"
        })
    }

    #[tokio::test]
    async fn only_the_taken_port_is_present_and_carries_the_value() {
        let out = run_block(
            "control.branch",
            json!({}),
            inputs([
                ("condition", Value::Bool(false)),
                ("value", Value::from("payload")),
            ]),
        )
        .await
        .unwrap();
        assert_eq!(out, inputs([("false", Value::from("payload"))]));
        let out = run_block(
            "control.branch",
            json!({}),
            inputs([("condition", Value::from("yes"))]),
        )
        .await
        .unwrap();
        assert_eq!(out, inputs([("true", Value::from("yes"))]));
    }

    #[tokio::test]
    async fn every_test() {
        let cases = [
            (json!({}), json!([]), "false"),
            (json!({}), json!({"a": 1}), "true"),
            (json!({}), json!(0), "false"),
            (json!({"op": "equals", "operand": 2}), json!(2.0), "true"),
            (
                json!({"op": "equals", "operand": {"a": [1]}}),
                json!({"a": [1.0]}),
                "true",
            ),
            (json!({"op": "equals", "operand": "2"}), json!(2), "false"),
            (json!({"op": "equals"}), json!(null), "true"),
            (
                json!({"op": "not_equals", "operand": "done"}),
                json!("open"),
                "true",
            ),
            (
                json!({"op": "contains", "operand": "err"}),
                json!("an error"),
                "true",
            ),
            (
                json!({"op": "contains", "operand": 3}),
                json!([1, 2, 3]),
                "true",
            ),
            (
                json!({"op": "contains", "operand": "k"}),
                json!({"k": null}),
                "true",
            ),
            (
                json!({"op": "contains", "operand": "z"}),
                json!({"k": 1}),
                "false",
            ),
            (
                json!({"op": "greater_than", "operand": 10}),
                json!(10.5),
                "true",
            ),
            (
                json!({"op": "greater_than", "operand": 10}),
                json!(10),
                "false",
            ),
            (
                json!({"op": "less_than", "operand": "b"}),
                json!("a"),
                "true",
            ),
        ];
        for (config, condition, expected) in cases {
            let got = branch(config.clone(), condition.clone()).await;
            assert_eq!(got, Ok(expected), "{config} on {condition}");
        }
    }

    #[tokio::test]
    async fn bad_comparisons_fail_clearly() {
        let err = branch(json!({"op": "greater_than", "operand": 3}), json!("x"))
            .await
            .unwrap_err();
        assert_eq!(
            err.message,
            "input `condition`: cannot compare text with integer; comparisons need two numbers or two texts"
        );
        let err = branch(json!({"op": "contains", "operand": 3}), json!(5))
            .await
            .unwrap_err();
        assert!(
            err.message.contains("`contains` needs text"),
            "{}",
            err.message
        );
        let err = config_error("control.branch", json!({"op": "less_than"})).unwrap();
        assert!(err.starts_with("config `operand`: is required"), "{err}");
        let err = config_error("control.branch", json!({"op": "bigger"})).unwrap();
        assert!(err.contains("`bigger` is not one of truthy"), "{err}");
    }
}
