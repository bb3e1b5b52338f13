//! Gmail blocks (Gmail API v1, user `me`): search, read, send, draft.

mod create_draft;
mod read_message;
mod search;
mod send;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigError, ConfigField, ConfigReader, InputsExt as _,
    ValueMap,
};
use base64::Engine as _;

use crate::rest::{Api, ServiceBlock};

pub(crate) const DEFAULT_BASE_URL: &str = "https://gmail.googleapis.com";
const LOGIN_HINT: &str =
    "Sign in again with `agentloom credentials login google --name NAME --client-id ID`";

/// The Gmail blocks.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    ServiceBlock::boxed([
        search::block(),
        read_message::block(),
        send::block(),
        create_draft::block(),
    ])
}

fn meta(kind: &str, title: &str, description: &str) -> BlockMeta {
    BlockMeta::new(kind, title, "Gmail", description)
        .needs_credential("google")
        .field(
            ConfigField::credential("credential", "Credential", "google")
                .default_value(serde_json::json!("gmail"))
                .required()
                .help("The stored Google sign-in (with Gmail scopes) to call the API with."),
        )
        .field(
            ConfigField::text("base_url", "API base URL")
                .default_value(serde_json::json!(DEFAULT_BASE_URL))
                .help("The Gmail API root; change it only for a proxy or a test server."),
        )
}

fn block(
    meta: BlockMeta,
    make: fn(&Config) -> Result<std::sync::Arc<dyn agentloom_core::NodeImpl>, ConfigError>,
) -> ServiceBlock {
    ServiceBlock { meta, make }
}

fn api(config: &Config) -> Result<Api, ConfigError> {
    Api::from_config(
        &ConfigReader(config),
        "Gmail",
        DEFAULT_BASE_URL,
        "gmail",
        LOGIN_HINT,
    )
}

/// `send to ADDRESS: POST URL` for an approval prompt: `verb`, the `to` input (when it
/// has arrived) and the request to `path`.
fn describe_message(api: &Api, verb: &str, path: &str, inputs: &ValueMap) -> Option<String> {
    let request = api.describe(&reqwest::Method::POST, path)?;
    Some(match inputs.get("to") {
        Some(to) => format!("{verb} to {}: {request}", to.to_text()),
        None => request,
    })
}

/// Builds an RFC 5322 message from the `to`, `subject`, `body` (and optional `cc`) inputs,
/// base64url-encoded as the API's `raw` field.
fn raw_message(inputs: &mut ValueMap) -> Result<String, BlockError> {
    let to = inputs.take_text("to")?;
    let subject = inputs.take_text("subject")?;
    let body = inputs.take_text("body")?;
    let cc = inputs.take_optional("cc").map(|v| v.to_text());
    for (port, value) in [
        ("to", Some(&to)),
        ("subject", Some(&subject)),
        ("cc", cc.as_ref()),
    ] {
        if value.is_some_and(|v| v.contains(['\r', '\n'])) {
            return Err(BlockError::input(port, "must be a single line"));
        }
    }
    if !to.contains('@') {
        return Err(BlockError::input("to", "expected an email address"));
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut message = format!("To: {to}\r\n");
    if let Some(cc) = cc.filter(|c| !c.trim().is_empty()) {
        message.push_str(&format!("Cc: {cc}\r\n"));
    }
    let subject_header = if subject.is_ascii() {
        subject
    } else {
        format!("=?UTF-8?B?{}?=", b64.encode(subject.as_bytes()))
    };
    message.push_str(&format!(
        "Subject: {subject_header}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=UTF-8\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n",
        b64.encode(body.as_bytes())
    ));
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(message.as_bytes()))
}

fn message_ports() -> Vec<agentloom_core::PortSpec> {
    use agentloom_core::{PortSpec, ValueType};
    vec![
        PortSpec::new("to", ValueType::Text)
            .describe("The recipient address(es), comma-separated."),
        PortSpec::new("subject", ValueType::Text).describe("The subject line."),
        PortSpec::new("body", ValueType::Text).describe("The plain-text body."),
        PortSpec::new("cc", ValueType::Text)
            .optional()
            .describe("Copy recipients, comma-separated."),
    ]
}
