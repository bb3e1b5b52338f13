//! `gmail.send`: sends a plain-text email.

use std::sync::Arc;

use agentloom_core::{
    BlockError, Config, ConfigError, NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType,
    async_trait,
};
use reqwest::Method;

use crate::rest::{Api, ServiceBlock};

pub(super) fn block() -> ServiceBlock {
    super::block(
        super::meta(
            "gmail.send",
            "Send email (Gmail)",
            "Sends a plain-text email from the signed-in Gmail account.",
        )
        .with_side_effects(),
        make,
    )
}

struct Node {
    api: Api,
    ports: Ports,
}

fn make(config: &Config) -> Result<Arc<dyn NodeImpl>, ConfigError> {
    Ok(Arc::new(Node {
        api: super::api(config)?,
        ports: Ports::new(
            super::message_ports(),
            vec![
                PortSpec::new("message", ValueType::Object)
                    .describe("The sent message as {id, threadId, labelIds}."),
            ],
        ),
    }))
}

#[async_trait]
impl NodeImpl for Node {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    /// To whom, and where the request goes.
    fn describe(&self, inputs: &ValueMap) -> Option<String> {
        super::describe_message(&self.api, "send", "gmail/v1/users/me/messages/send", inputs)
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let raw = super::raw_message(&mut inputs)?;
        let url = self.api.url("gmail/v1/users/me/messages/send")?;
        let reply = self
            .api
            .send(
                ctx,
                Method::POST,
                url,
                Some(&serde_json::json!({ "raw": raw })),
            )
            .await?;
        Ok(agentloom_core::outputs([(
            "message",
            Value::from_json(reply.json),
        )]))
    }
}
