//! Ollama's native API: `POST {base_url}/api/chat`, streamed as NDJSON (one JSON object a
//! line, the last with `"done": true` and the token counts), and `GET {base_url}/api/tags`
//! for the models installed on the machine.

use std::time::Duration;

use serde_json::{Value as Json, json};

use super::types::{ChatRequest, Message, Reply, Role, TokenCounts, ToolCall};
use super::wire::{About, Framing, StreamFault, StreamParse, WireFormat};

/// Where a local Ollama listens by default.
pub const DEFAULT_URL: &str = "http://127.0.0.1:11434";

/// How long [`list_models`] waits: it backs a model picker, so it must not hang.
const LIST_TIMEOUT: Duration = Duration::from_millis(1500);

/// The models could not be listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ListModelsError(String);

/// The models installed in the Ollama at `base_url` (e.g. [`DEFAULT_URL`]), sorted by name.
/// Gives up after 1.5 s, so a model picker can call it when nothing is listening.
pub async fn list_models(base_url: &str) -> Result<Vec<String>, ListModelsError> {
    let base = base_url.trim().trim_end_matches('/');
    let base = if base.is_empty() { DEFAULT_URL } else { base };
    let url = format!("{base}/api/tags");
    let client = crate::net::client().map_err(|e| ListModelsError(e.message))?;
    let request = client.get(&url).timeout(LIST_TIMEOUT);
    let response = request.send().await.map_err(|e| {
        ListModelsError(if e.is_timeout() || e.is_connect() {
            format!("no Ollama answers at {base}; start it with `ollama serve`, or install it from ollama.com")
        } else {
            format!("asking Ollama at {base} for its models failed: {}", e.without_url())
        })
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(ListModelsError(format!(
            "Ollama at {base} answered HTTP {status} to GET /api/tags; is this an Ollama server?"
        )));
    }
    let json: Json = response.json().await.map_err(|e| {
        ListModelsError(format!(
            "Ollama at {base} sent a model list that is not JSON: {}",
            e.without_url()
        ))
    })?;
    let Some(models) = json.get("models").and_then(Json::as_array) else {
        return Err(ListModelsError(format!(
            "the reply of {base}/api/tags has no `models` list; is this an Ollama server?"
        )));
    };
    let mut names: Vec<String> = models
        .iter()
        .filter_map(|m| m.get("name").or_else(|| m.get("model")))
        .filter_map(Json::as_str)
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

pub(crate) fn body(req: &ChatRequest) -> Json {
    let mut messages = Vec::new();
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.extend(req.messages.iter().map(message));
    let mut body = json!({"model": req.model, "messages": messages, "stream": req.stream});
    let mut options = serde_json::Map::new();
    if let Some(t) = req.temperature {
        options.insert("temperature".into(), json!(t));
    }
    if let Some(n) = req.max_tokens {
        options.insert("num_predict".into(), json!(n));
    }
    if !options.is_empty() {
        body["options"] = Json::Object(options);
    }
    if !req.tools.is_empty() {
        body["tools"] = Json::Array(
            req.tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters
                    }})
                })
                .collect(),
        );
    }
    if let Some(schema) = &req.json_schema {
        body["format"] = schema.clone();
    }
    body
}

fn message(m: &Message) -> Json {
    let mut out = json!({"role": m.role.as_str(), "content": m.content});
    if m.role == Role::Assistant && !m.tool_calls.is_empty() {
        out["tool_calls"] = Json::Array(
            m.tool_calls
                .iter()
                .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
                .collect(),
        );
    }
    if m.role == Role::Tool
        && let Some(name) = &m.name
    {
        out["tool_name"] = json!(name);
    }
    out
}

/// Reads one reply object (a whole reply, or one line of a stream).
fn read_message(json: &Json, reply: &mut Reply) -> Option<String> {
    let message = json.get("message")?;
    if let Some(calls) = message.get("tool_calls").and_then(Json::as_array) {
        for call in calls {
            let function = call.get("function").unwrap_or(call);
            let n = reply.tool_calls.len();
            reply.tool_calls.push(ToolCall {
                id: call
                    .get("id")
                    .and_then(Json::as_str)
                    .map_or_else(|| format!("call_{n}"), str::to_owned),
                name: function
                    .get("name")
                    .and_then(Json::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                arguments: match function.get("arguments") {
                    Some(Json::String(text)) => super::types::parse_arguments(text),
                    Some(other) if !other.is_null() => other.clone(),
                    _ => json!({}),
                },
            });
        }
    }
    let piece = message.get("content").and_then(Json::as_str)?;
    reply.text.push_str(piece);
    (!piece.is_empty()).then(|| piece.to_owned())
}

fn read_done(json: &Json, reply: &mut Reply) {
    let input = json.get("prompt_eval_count").and_then(Json::as_u64);
    let output = json.get("eval_count").and_then(Json::as_u64);
    if input.is_some() || output.is_some() {
        reply.usage = Some(TokenCounts {
            input: input.unwrap_or(0),
            output: output.unwrap_or(0),
            estimated: false,
        });
    }
    reply.finish_reason = json
        .get("done_reason")
        .and_then(Json::as_str)
        .map(str::to_owned)
        .or_else(|| Some("stop".to_owned()));
}

pub(crate) fn parse_reply(json: &Json) -> Result<Reply, String> {
    if json.get("message").is_none() {
        return Err("the reply has no `message`".to_owned());
    }
    let mut reply = Reply::default();
    read_message(json, &mut reply);
    read_done(json, &mut reply);
    Ok(reply)
}

/// Assembles a streamed (NDJSON) reply.
#[derive(Default)]
pub(crate) struct StreamParser {
    reply: Reply,
    done: bool,
}

impl StreamParse for StreamParser {
    /// Feeds one line; returns the text it adds, if any.
    fn feed(&mut self, _event: &str, line: &str) -> Result<Option<String>, StreamFault> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(None);
        }
        let json: Json = serde_json::from_str(line)
            .map_err(|e| StreamFault::Malformed(format!("a line is not JSON ({e})")))?;
        if let Some(error) = json.get("error") {
            return Err(StreamFault::Provider(
                error
                    .as_str()
                    .map_or_else(|| error.to_string(), str::to_owned),
            ));
        }
        let piece = read_message(&json, &mut self.reply);
        if json.get("done").and_then(Json::as_bool) == Some(true) {
            read_done(&json, &mut self.reply);
            self.done = true;
        }
        Ok(piece)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn is_complete(&self) -> bool {
        self.done
    }

    fn text_len(&self) -> usize {
        self.reply.text.chars().count()
    }

    fn into_reply(self: Box<Self>) -> Reply {
        let this = *self;
        this.reply
    }
}

/// Ollama's native chat API.
#[derive(Debug)]
pub(crate) struct Ollama;

impl WireFormat for Ollama {
    fn about(&self) -> About {
        About {
            name: "ollama",
            title: "Ollama",
            default_base_url: DEFAULT_URL,
            runs_locally: true,
        }
    }

    fn url(&self, base_url: &str) -> String {
        format!("{base_url}/api/chat")
    }

    fn body(&self, request: &ChatRequest, _base_url: &str) -> Json {
        body(request)
    }

    fn parse_reply(&self, json: &Json) -> Result<Reply, String> {
        parse_reply(json)
    }

    fn framing(&self) -> Framing {
        Framing::JsonLines
    }

    fn stream_parser(&self) -> Box<dyn StreamParse> {
        Box::new(StreamParser::default())
    }

    fn not_found_hint(&self, model: &str) -> String {
        format!("; download it with `ollama pull {model}`, or pick an installed model")
    }

    fn connect_hint(&self) -> &'static str {
        "; is Ollama running? Start it with `ollama serve`"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::types::ToolDef;

    #[test]
    fn body_uses_options_format_and_tool_names() {
        let mut tool = Message::new(Role::Tool, "sunny");
        tool.name = Some("weather".into());
        let req = ChatRequest {
            model: "llama3.2".into(),
            system: Some("s".into()),
            messages: vec![Message::new(Role::User, "hi"), tool],
            temperature: Some(0.1),
            max_tokens: Some(5),
            tools: vec![ToolDef {
                name: "weather".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }],
            json_schema: Some(json!({"type": "object"})),
            stream: true,
        };
        let b = body(&req);
        assert_eq!(b["options"], json!({"temperature": 0.1, "num_predict": 5}));
        assert_eq!(b["format"], json!({"type": "object"}));
        assert_eq!(b["messages"][2]["tool_name"], "weather");
        assert_eq!(b["tools"][0]["function"]["name"], "weather");
    }

    #[test]
    fn stream_lines_assemble_and_the_last_carries_counts() {
        let mut p = StreamParser::default();
        assert_eq!(
            p.feed(
                "",
                r#"{"message":{"role":"assistant","content":"Hi"},"done":false}"#
            )
            .unwrap()
            .as_deref(),
            Some("Hi")
        );
        p.feed("", r#"{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":false}"#).unwrap();
        assert!(!p.is_complete());
        p.feed("", r#"{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":4,"eval_count":2}"#).unwrap();
        assert!(p.is_complete());
        let reply = Box::new(p).into_reply();
        assert_eq!(reply.text, "Hi");
        assert_eq!(reply.tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(
            reply.usage,
            Some(TokenCounts {
                input: 4,
                output: 2,
                estimated: false
            })
        );
        let mut p = StreamParser::default();
        assert_eq!(
            p.feed("", r#"{"error":"model 'x' not found"}"#)
                .unwrap_err(),
            StreamFault::Provider("model 'x' not found".into())
        );
    }
}
