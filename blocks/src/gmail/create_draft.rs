//! `gmail.create_draft`: saves a plain-text draft.

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
            "gmail.create_draft",
            "Create Gmail draft",
            "Saves a plain-text email as a draft without sending it.",
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
            vec![PortSpec::new("draft", ValueType::Object).describe("The draft as {id, message}.")],
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
        super::describe_message(&self.api, "draft", "gmail/v1/users/me/drafts", inputs)
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let raw = super::raw_message(&mut inputs)?;
        let url = self.api.url("gmail/v1/users/me/drafts")?;
        let body = serde_json::json!({ "message": { "raw": raw } });
        let reply = self.api.send(ctx, Method::POST, url, Some(&body)).await?;
        Ok(agentloom_core::outputs([(
            "draft",
            Value::from_json(reply.json),
        )]))
    }
}
