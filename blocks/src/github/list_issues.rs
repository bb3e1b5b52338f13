//! `github.list_issues`: the issues of a repository, every page.

use std::sync::Arc;

use agentloom_core::{
    BlockError, Config, ConfigError, ConfigField, ConfigReader, NodeImpl, PortSpec, Ports, RunCtx,
    Value, ValueMap, ValueType, async_trait,
};

use crate::rest::{Api, ServiceBlock, max_items};

const STATES: [&str; 3] = ["open", "closed", "all"];

pub(super) fn block() -> ServiceBlock {
    let meta = super::meta(
        "github.list_issues",
        "List GitHub issues",
        "Lists a repository's issues (pull requests excluded), following every page.",
    )
    .field(
        ConfigField::choice("state", "State", &STATES)
            .default_value(serde_json::json!("open"))
            .help("Which issues to list: open, closed or all."),
    )
    .field(
        ConfigField::integer("max_items", "Max issues", Some(1), None)
            .default_value(serde_json::json!(100))
            .help("Stop after this many issues."),
    );
    super::block(meta, make)
}

struct Node {
    api: Api,
    repo: String,
    state: String,
    max_items: usize,
    ports: Ports,
}

fn make(config: &Config) -> Result<Arc<dyn NodeImpl>, ConfigError> {
    let (api, repo) = super::api_and_repo(config)?;
    let reader = ConfigReader(config);
    Ok(Arc::new(Node {
        api,
        repo,
        state: reader.choice_or("state", &STATES, "open")?.to_owned(),
        max_items: max_items(&reader, 100)?,
        ports: Ports::new(
            vec![],
            vec![
                PortSpec::new("issues", ValueType::list_of(ValueType::Object)).describe(
                    "The issues as GitHub returns them (number, title, body, state, labels…).",
                ),
            ],
        ),
    }))
}

#[async_trait]
impl NodeImpl for Node {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, _inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let mut url = self.api.url(&format!("repos/{}/issues", self.repo))?;
        url.query_pairs_mut()
            .append_pair("state", &self.state)
            .append_pair("per_page", "100");
        let items = self.api.get_all(ctx, url, self.max_items).await?;
        let issues: Vec<Value> = items
            .into_iter()
            .filter(|i| i.get("pull_request").is_none())
            .take(self.max_items)
            .map(Value::from_json)
            .collect();
        Ok(agentloom_core::outputs([("issues", Value::list(issues))]))
    }
}
