//! GitHub blocks (REST v3): issues, comments, file contents, pull requests.
//!
//! Config shared by all: `base_url` (GitHub Enterprise: `https://HOST/api/v3`),
//! `credential` (a stored GitHub token or sign-in) and `repo` (`owner/name`).

mod comment;
mod create_issue;
mod create_pull_request;
mod get_issue;
mod list_issues;
mod read_file;

use agentloom_core::{Block, BlockMeta, Config, ConfigError, ConfigField, ConfigReader, Value};

use crate::rest::{Api, ServiceBlock};

pub(crate) const DEFAULT_BASE_URL: &str = "https://api.github.com";
const LOGIN_HINT: &str = "Sign in again with `agentloom credentials login github --name NAME`, or store a new token with `agentloom credentials add NAME --provider github`";

/// The GitHub blocks.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    ServiceBlock::boxed([
        list_issues::block(),
        get_issue::block(),
        create_issue::block(),
        comment::block(),
        read_file::block(),
        create_pull_request::block(),
    ])
}

/// The fields every GitHub block has.
fn meta(kind: &str, title: &str, description: &str) -> BlockMeta {
    BlockMeta::new(kind, title, "GitHub", description)
        .needs_credential("github")
        .field(
            ConfigField::credential("credential", "Credential", "github")
                .default_value(serde_json::json!("github"))
                .required()
                .help("The stored GitHub credential (token or sign-in) to call the API with."),
        )
        .field(
            ConfigField::text("repo", "Repository")
                .required()
                .help("The repository as `owner/name`, e.g. `octocat/hello-world`."),
        )
        .field(
            ConfigField::text("base_url", "API base URL")
                .default_value(serde_json::json!(DEFAULT_BASE_URL))
                .help("The REST API root; for GitHub Enterprise Server use `https://HOST/api/v3`."),
        )
}

fn block(
    meta: BlockMeta,
    make: fn(&Config) -> Result<std::sync::Arc<dyn agentloom_core::NodeImpl>, ConfigError>,
) -> ServiceBlock {
    ServiceBlock { meta, make }
}

/// The API and the `owner/name` from a GitHub block's config.
fn api_and_repo(config: &Config) -> Result<(Api, String), ConfigError> {
    let reader = ConfigReader(config);
    let api = Api::from_config(&reader, "GitHub", DEFAULT_BASE_URL, "github", LOGIN_HINT)?;
    let repo = reader.required_str("repo")?.trim();
    let mut parts = repo.split('/');
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match (parts.next(), parts.next(), parts.next()) {
        (Some(owner), Some(name), None) if valid(owner) && valid(name) => {
            Ok((api, repo.to_owned()))
        }
        _ => Err(ConfigError::new(
            "repo",
            format!("`{repo}` is not `owner/name`"),
        )),
    }
}

/// A positive issue or pull request number from an input.
fn number_input(
    inputs: &mut agentloom_core::ValueMap,
    port: &str,
) -> Result<u64, agentloom_core::BlockError> {
    use agentloom_core::InputsExt as _;
    let value = inputs.take_value(port)?;
    let n = match &value {
        Value::Integer(n) => u64::try_from(*n).ok(),
        Value::Text(t) => t.trim().trim_start_matches('#').parse().ok(),
        Value::Number(f) if f.fract() == 0.0 && *f >= 1.0 => Some(*f as u64),
        _ => None,
    };
    n.filter(|n| *n > 0).ok_or_else(|| {
        agentloom_core::BlockError::input(
            port,
            format!("expected an issue number, got {}", value.kind_name()),
        )
    })
}
