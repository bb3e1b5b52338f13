//! `gmail.read_message`: one message with headers, decoded body and attachment list.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentloom_core::{
    BlockError, Config, ConfigError, InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Value,
    ValueMap, ValueType, async_trait,
};
use base64::Engine as _;
use reqwest::Method;

use crate::rest::{Api, ServiceBlock};

pub(super) fn block() -> ServiceBlock {
    super::block(
        super::meta(
            "gmail.read_message",
            "Read Gmail message",
            "Reads one message: headers, the decoded text and HTML body, and the attachments' names and sizes.",
        ),
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
            vec![PortSpec::new("id", ValueType::Text).describe("The message id (from gmail.search).")],
            vec![
                PortSpec::new("message", ValueType::Object)
                    .describe("{id, threadId, labelIds, snippet, headers, from, to, subject, date, text, html, attachments}."),
                PortSpec::new("text", ValueType::Text).describe("The plain-text body (or the snippet)."),
            ],
        ),
    }))
}

#[derive(Default)]
struct Parts {
    text: String,
    html: String,
    attachments: Vec<Value>,
}

fn decode(data: &str) -> String {
    let trimmed = data.trim_end_matches('=');
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(trimmed.as_bytes())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

fn walk(part: &serde_json::Value, out: &mut Parts) {
    let mime = part["mimeType"].as_str().unwrap_or_default();
    let filename = part["filename"].as_str().unwrap_or_default();
    let body = &part["body"];
    if !filename.is_empty() || body.get("attachmentId").is_some() {
        out.attachments.push(Value::from_json(serde_json::json!({
            "filename": filename,
            "mime_type": mime,
            "size": body["size"].as_u64().unwrap_or(0),
            "attachment_id": body["attachmentId"].as_str().unwrap_or_default(),
        })));
    } else if let Some(data) = body["data"].as_str() {
        if mime.starts_with("text/html") {
            out.html.push_str(&decode(data));
        } else if mime.starts_with("text/") || mime.is_empty() {
            out.text.push_str(&decode(data));
        }
    }
    if let Some(children) = part["parts"].as_array() {
        for child in children {
            walk(child, out);
        }
    }
}

#[async_trait]
impl NodeImpl for Node {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let id = inputs.take_text("id")?;
        let id = id.trim();
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(BlockError::input("id", "expected a Gmail message id"));
        }
        let mut url = self.api.url(&format!("gmail/v1/users/me/messages/{id}"))?;
        url.query_pairs_mut().append_pair("format", "full");
        let json = self.api.send(ctx, Method::GET, url, None).await?.json;
        let payload = &json["payload"];
        let mut headers = BTreeMap::new();
        for header in payload["headers"].as_array().into_iter().flatten() {
            if let (Some(name), Some(value)) = (header["name"].as_str(), header["value"].as_str()) {
                headers
                    .entry(name.to_ascii_lowercase())
                    .and_modify(|v: &mut String| {
                        v.push_str(", ");
                        v.push_str(value);
                    })
                    .or_insert_with(|| value.to_owned());
            }
        }
        let mut parts = Parts::default();
        walk(payload, &mut parts);
        let text = if parts.text.is_empty() {
            json["snippet"].as_str().unwrap_or_default().to_owned()
        } else {
            parts.text.clone()
        };
        let header = |name: &str| headers.get(name).cloned().unwrap_or_default();
        let message = serde_json::json!({
            "id": json["id"],
            "threadId": json["threadId"],
            "labelIds": json["labelIds"],
            "snippet": json["snippet"],
            "from": header("from"),
            "to": header("to"),
            "subject": header("subject"),
            "date": header("date"),
            "headers": headers,
            "text": parts.text,
            "html": parts.html,
        });
        let mut message = Value::from_json(message);
        if let Some(map) = message.object_mut() {
            map.insert("attachments".to_owned(), Value::list(parts.attachments));
        }
        Ok(agentloom_core::outputs([
            ("message", message),
            ("text", Value::text(text)),
        ]))
    }
}
