//! `github.get_issue`: one issue by number.

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
            "github.get_issue",
            "Get GitHub issue",
            "Reads one issue of a repository by its number.",
        ),
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
            vec![PortSpec::new("number", ValueType::Integer).describe("The issue number.")],
            vec![
                PortSpec::new("issue", ValueType::Object)
                    .describe("The issue as GitHub returns it."),
            ],
        ),
    }))
}

#[async_trait]
impl NodeImpl for Node {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let number = super::number_input(&mut inputs, "number")?;
        let url = self
            .api
            .url(&format!("repos/{}/issues/{number}", self.repo))?;
        let reply = self.api.send(ctx, Method::GET, url, None).await?;
        Ok(agentloom_core::outputs([(
            "issue",
            Value::from_json(reply.json),
        )]))
    }
}
