//! `gmail.search`: message ids matching a Gmail search query, every page.

use std::sync::Arc;

use agentloom_core::{
    BlockError, Config, ConfigError, ConfigField, ConfigReader, NodeImpl, PortSpec, Ports, RunCtx,
    Value, ValueMap, ValueType, async_trait,
};
use reqwest::Method;

use crate::rest::{Api, ServiceBlock, max_items};

pub(super) fn block() -> ServiceBlock {
    let meta = super::meta(
        "gmail.search",
        "Search Gmail",
        "Lists the messages matching a Gmail search query (e.g. `from:bob subject:report`).",
    )
    .field(
        ConfigField::integer("max_items", "Max messages", Some(1), None)
            .default_value(serde_json::json!(50))
            .help("Stop after this many messages."),
    );
    super::block(meta, make)
}

struct Node {
    api: Api,
    max_items: usize,
    ports: Ports,
}

fn make(config: &Config) -> Result<Arc<dyn NodeImpl>, ConfigError> {
    Ok(Arc::new(Node {
        api: super::api(config)?,
        max_items: max_items(&ConfigReader(config), 50)?,
        ports: Ports::new(
            vec![
                PortSpec::new("query", ValueType::Text)
                    .optional()
                    .describe("The Gmail search query; empty lists the newest messages."),
            ],
            vec![
                PortSpec::new("messages", ValueType::list_of(ValueType::Object))
                    .describe("The matches as {id, threadId}; read each with gmail.read_message."),
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
        use agentloom_core::InputsExt as _;
        let query = inputs
            .take_optional("query")
            .map(|v| v.to_text())
            .unwrap_or_default();
        let mut messages = Vec::new();
        let mut page_token: Option<String> = None;
        loop {
            let mut url = self.api.url("gmail/v1/users/me/messages")?;
            {
                let mut pairs = url.query_pairs_mut();
                let page_size = (self.max_items - messages.len()).min(500).to_string();
                pairs.append_pair("maxResults", &page_size);
                if !query.trim().is_empty() {
                    pairs.append_pair("q", &query);
                }
                if let Some(token) = &page_token {
                    pairs.append_pair("pageToken", token);
                }
            }
            let reply = self.api.send(ctx, Method::GET, url, None).await?;
            if let Some(list) = reply.json["messages"].as_array() {
                messages.extend(list.iter().cloned().map(Value::from_json));
            }
            page_token = reply.json["nextPageToken"].as_str().map(str::to_owned);
            if messages.len() >= self.max_items || page_token.is_none() {
                break;
            }
        }
        messages.truncate(self.max_items);
        Ok(agentloom_core::outputs([(
            "messages",
            Value::list(messages),
        )]))
    }
}
