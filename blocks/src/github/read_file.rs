//! `github.read_file`: a file's content from a repository.

use std::sync::Arc;

use agentloom_core::{
    BlockError, Config, ConfigError, ConfigField, ConfigReader, InputsExt as _, NodeImpl, PortSpec,
    Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};
use base64::Engine as _;
use reqwest::Method;

use crate::rest::{Api, ServiceBlock};

pub(super) fn block() -> ServiceBlock {
    let meta = super::meta(
        "github.read_file",
        "Read GitHub file",
        "Reads one file of a repository as text.",
    )
    .field(
        ConfigField::text("ref", "Branch, tag or commit")
            .help("Which version to read; empty means the default branch."),
    );
    super::block(meta, make)
}

struct Node {
    api: Api,
    repo: String,
    git_ref: Option<String>,
    ports: Ports,
}

fn make(config: &Config) -> Result<Arc<dyn NodeImpl>, ConfigError> {
    let (api, repo) = super::api_and_repo(config)?;
    let git_ref = ConfigReader(config)
        .str("ref")?
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    Ok(Arc::new(Node {
        api,
        repo,
        git_ref,
        ports: Ports::new(
            vec![
                PortSpec::new("path", ValueType::Text)
                    .describe("The file path in the repository, e.g. `src/main.rs`."),
            ],
            vec![
                PortSpec::new("content", ValueType::Text)
                    .describe("The file's text (invalid UTF-8 replaced)."),
                PortSpec::new("sha", ValueType::Text)
                    .describe("The blob SHA, needed to update the file."),
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
        let path = inputs.take_text("path")?;
        let path = path.trim().trim_start_matches('/');
        if path.is_empty() || path.split('/').any(|s| s == "..") {
            return Err(BlockError::input(
                "path",
                "must be a file path inside the repository",
            ));
        }
        let mut url = self
            .api
            .url(&format!("repos/{}/contents/{path}", self.repo))?;
        if let Some(r) = &self.git_ref {
            url.query_pairs_mut().append_pair("ref", r);
        }
        let reply = self.api.send(ctx, Method::GET, url, None).await?;
        let json = reply.json;
        if json.is_array() {
            return Err(BlockError::input(
                "path",
                format!("`{path}` is a directory, not a file"),
            ));
        }
        let encoded: String = json["content"]
            .as_str()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|e| {
                BlockError::permanent(format!(
                    "GitHub sent `{path}` in a form that could not be decoded: {e}"
                ))
            })?;
        Ok(agentloom_core::outputs([
            (
                "content",
                Value::text(String::from_utf8_lossy(&bytes).into_owned()),
            ),
            (
                "sha",
                Value::text(json["sha"].as_str().unwrap_or_default().to_owned()),
            ),
        ]))
    }
}
