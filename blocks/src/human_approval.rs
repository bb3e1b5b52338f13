//! `human.approval`: a person decides whether the graph goes on, at any point of it.

use std::sync::Arc;

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, Block, BlockError, BlockMeta, Config, ConfigCtx,
    ConfigError, ConfigField, ConfigReader, InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx,
    Value, ValueMap, ValueType, async_trait,
};

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(HumanApproval::new())]
}

const DEFAULT_ACTION: &str = "Continue with this value";

struct HumanApproval {
    meta: BlockMeta,
}

impl HumanApproval {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "human.approval",
                "Human approval",
                "Control",
                "Waits for a person: passes its value on when approved (as edited, if edited), \
                 fails with the person's message when rejected. The run pauses meanwhile and \
                 survives restarts.",
            )
            .field(
                ConfigField::text("action", "Question")
                    .default_value(serde_json::json!(DEFAULT_ACTION))
                    .help("What the person is asked to approve."),
            ),
        }
    }
}

impl Block for HumanApproval {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let action = ConfigReader(config).str_or("action", DEFAULT_ACTION)?;
        Ok(Arc::new(HumanApprovalNode {
            action: action.to_owned(),
            ports: Ports::new(
                vec![PortSpec::new("value", ValueType::Any)],
                vec![PortSpec::new("value", ValueType::Any)],
            ),
        }))
    }
}

struct HumanApprovalNode {
    action: String,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for HumanApprovalNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let value = inputs.take_value("value")?;
        // The arguments are an object so that `--set value=…` and the app's editor edit it.
        let arguments = Value::object(ValueMap::from([("value".to_owned(), value)]));
        let request = ApprovalRequest::new(self.action.clone(), arguments);
        match ctx.ask_person(request).await? {
            ApprovalDecision::Approved { arguments } => {
                let value = match arguments {
                    Value::Object(map) if map.contains_key("value") => {
                        map.get("value").cloned().unwrap_or(Value::Null)
                    }
                    other => other,
                };
                Ok(agentloom_core::outputs([("value", value)]))
            }
            ApprovalDecision::Rejected { message } => Err(BlockError::permanent(format!(
                "rejected: {}",
                if message.trim().is_empty() {
                    "no reason given"
                } else {
                    message.trim()
                }
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{TestCtx, inputs, run_block_with};
    use agentloom_core::{ApprovalDecision, Value};
    use serde_json::json;

    fn decided(decision: ApprovalDecision) -> TestCtx {
        TestCtx::new().with_safe_mode(vec![decision])
    }

    #[tokio::test]
    async fn approved_passes_the_value_or_its_edit() {
        let value = Value::from_json(json!({"to": "a@example.com"}));
        let ctx = decided(ApprovalDecision::Approved {
            arguments: Value::from_json(json!({"value": {"to": "a@example.com"}})),
        });
        let out = run_block_with(
            &ctx,
            "human.approval",
            json!({"action": "Send?"}),
            inputs([("value", value.clone())]),
        )
        .await
        .unwrap();
        assert_eq!(out, inputs([("value", value.clone())]));
        let asked = ctx.approval_requests();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].action, "Send?");
        assert_eq!(
            asked[0].arguments,
            Value::from_json(json!({"value": {"to": "a@example.com"}}))
        );

        let edited = decided(ApprovalDecision::Approved {
            arguments: Value::from_json(json!({"value": "changed"})),
        });
        let out = run_block_with(
            &edited,
            "human.approval",
            json!({}),
            inputs([("value", value)]),
        )
        .await
        .unwrap();
        assert_eq!(out, inputs([("value", Value::text("changed"))]));
    }

    #[tokio::test]
    async fn rejected_fails_with_the_message() {
        let ctx = decided(ApprovalDecision::Rejected {
            message: "wrong address".into(),
        });
        let err = run_block_with(
            &ctx,
            "human.approval",
            json!({}),
            inputs([("value", Value::text("x"))]),
        )
        .await
        .unwrap_err();
        assert_eq!(err.message, "rejected: wrong address");
    }
}
