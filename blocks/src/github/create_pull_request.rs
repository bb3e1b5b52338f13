//! `github.create_pull_request`: opens a pull request.

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
            "github.create_pull_request",
            "Create GitHub pull request",
            "Opens a pull request from a head branch into a base branch.",
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
                PortSpec::new("title", ValueType::Text).describe("The pull request title."),
                PortSpec::new("head", ValueType::Text)
                    .describe("The branch with the changes (`branch` or `owner:branch`)."),
                PortSpec::new("base", ValueType::Text)
                    .describe("The branch to merge into, e.g. `main`."),
                PortSpec::new("body", ValueType::Text)
                    .optional()
                    .describe("The description (Markdown)."),
            ],
            vec![
                PortSpec::new("pull_request", ValueType::Object)
                    .describe("The created pull request (number, html_url…)."),
            ],
        ),
    }))
}

#[async_trait]
impl NodeImpl for Node {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    fn describe(&self, _inputs: &ValueMap) -> Option<String> {
        self.api
            .describe(&Method::POST, &format!("repos/{}/pulls", self.repo))
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let mut body = serde_json::json!({
            "title": inputs.take_text("title")?,
            "head": inputs.take_text("head")?,
            "base": inputs.take_text("base")?,
        });
        if let Some(text) = inputs.take_optional("body") {
            body["body"] = serde_json::json!(text.to_text());
        }
        let url = self.api.url(&format!("repos/{}/pulls", self.repo))?;
        let reply = self.api.send(ctx, Method::POST, url, Some(&body)).await?;
        Ok(agentloom_core::outputs([(
            "pull_request",
            Value::from_json(reply.json),
        )]))
    }
}
