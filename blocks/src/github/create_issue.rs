//! `github.create_issue`: opens an issue.

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
            "github.create_issue",
            "Create GitHub issue",
            "Opens a new issue in a repository.",
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
                PortSpec::new("title", ValueType::Text).describe("The issue title."),
                PortSpec::new("body", ValueType::Text)
                    .optional()
                    .describe("The issue text (Markdown)."),
            ],
            vec![
                PortSpec::new("issue", ValueType::Object)
                    .describe("The created issue (number, html_url…)."),
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
            .describe(&Method::POST, &format!("repos/{}/issues", self.repo))
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let title = inputs.take_text("title")?;
        if title.trim().is_empty() {
            return Err(BlockError::input("title", "is empty"));
        }
        let mut body = serde_json::json!({ "title": title });
        if let Some(text) = inputs.take_optional("body") {
            body["body"] = serde_json::json!(text.to_text());
        }
        let url = self.api.url(&format!("repos/{}/issues", self.repo))?;
        let reply = self.api.send(ctx, Method::POST, url, Some(&body)).await?;
        Ok(agentloom_core::outputs([(
            "issue",
            Value::from_json(reply.json),
        )]))
    }
}
