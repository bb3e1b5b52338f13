//! `github.comment`: comments on an issue or pull request.

use std::sync::Arc;

use agentloom_core::{
    BlockError, Config, ConfigError, InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Value,
    ValueMap, ValueType, async_trait,
};
use reqwest::Method;

use crate::rest::{Api, ServiceBlock};

pub(super) fn block() -> ServiceBlock {
    super::block(
        super::meta(
            "github.comment",
            "Comment on GitHub issue",
            "Adds a comment to an issue or pull request.",
        )
        .with_side_effects(),
        make,
    )
}

struct Node {
    api: Api,
    repo: String,
    ports: Ports,
}

fn make(config: &Config) -> Result<Arc<dyn NodeImpl>, ConfigError> {
    let (api, repo) = super::api_and_repo(config)?;
    Ok(Arc::new(Node {
        api,
        repo,
        ports: Ports::new(
            vec![
                PortSpec::new("number", ValueType::Integer)
                    .describe("The issue or pull request number."),
                PortSpec::new("body", ValueType::Text).describe("The comment (Markdown)."),
            ],
            vec![
                PortSpec::new("comment", ValueType::Object)
                    .describe("The created comment (id, html_url…)."),
            ],
        ),
    }))
}

#[async_trait]
impl NodeImpl for Node {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    fn describe(&self, inputs: &ValueMap) -> Option<String> {
        let number = inputs.get("number")?.to_text();
        self.api.describe(
            &Method::POST,
            &format!("repos/{}/issues/{number}/comments", self.repo),
        )
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let number = super::number_input(&mut inputs, "number")?;
        let text = inputs.take_text("body")?;
        let url = self
            .api
            .url(&format!("repos/{}/issues/{number}/comments", self.repo))?;
        let reply = self
            .api
            .send(
                ctx,
                Method::POST,
                url,
                Some(&serde_json::json!({ "body": text })),
            )
            .await?;
        Ok(agentloom_core::outputs([(
            "comment",
            Value::from_json(reply.json),
        )]))
    }
}
