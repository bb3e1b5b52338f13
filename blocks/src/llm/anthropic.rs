//! The Anthropic Messages wire format (`POST {base_url}/v1/messages`). The system prompt
//! is a field of its own, tool calls are `tool_use` content blocks and tool results are
//! `tool_result` blocks in a user message. Streaming is SSE with typed events
//! (`message_start`, `content_block_delta` with `text_delta` or `input_json_delta`,
//! `message_delta`, `message_stop`).

use std::collections::BTreeMap;

use reqwest::header::HeaderName;
use serde_json::{Value as Json, json};

use super::types::{ChatRequest, Reply, Role, TokenCounts, ToolCall, parse_arguments};
use super::wire::{About, StreamFault, StreamParse, WireFormat};

/// Anthropic requires `max_tokens`; this is used when the block sets none.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 4096;
pub(crate) const API_VERSION: &str = "2023-06-01";

pub(crate) fn body(req: &ChatRequest) -> Json {
    let mut system: Vec<String> = req
        .system
        .iter()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect();
    let mut messages: Vec<Json> = Vec::new();
    for m in &req.messages {
        let (role, blocks) = match m.role {
            Role::System => {
                system.push(m.content.clone());
                continue;
            }
            Role::User => ("user", vec![json!({"type": "text", "text": m.content})]),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                })],
            ),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for call in &m.tool_calls {
                    let input = if call.arguments.is_object() {
                        call.arguments.clone()
                    } else {
                        json!({"value": call.arguments})
                    };
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
                ("assistant", blocks)
            }
        };
        // Roles must alternate: merge into the previous message of the same role.
        if let Some(last) = messages.last_mut()
            && last["role"] == role
            && let Some(content) = last["content"].as_array_mut()
        {
            content.extend(blocks);
            continue;
        }
        messages.push(json!({"role": role, "content": blocks}));
    }
    let mut body = json!({
        "model": req.model,
        "max_tokens": req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
        "stream": req.stream,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if !req.tools.is_empty() {
        body["tools"] = Json::Array(
            req.tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect(),
        );
    }
    body
}

fn counts(usage: Option<&Json>) -> (Option<u64>, Option<u64>) {
    let get = |key: &str| usage.and_then(|u| u.get(key)).and_then(Json::as_u64);
    (get("input_tokens"), get("output_tokens"))
}

pub(crate) fn parse_reply(json: &Json) -> Result<Reply, String> {
    let blocks = json
        .get("content")
        .and_then(Json::as_array)
        .ok_or_else(|| "the reply has no `content`".to_owned())?;
    let mut reply = Reply::default();
    for (i, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Json::as_str) {
            Some("text") => reply
                .text
                .push_str(block.get("text").and_then(Json::as_str).unwrap_or_default()),
            Some("tool_use") => reply.tool_calls.push(ToolCall {
                id: block
                    .get("id")
                    .and_then(Json::as_str)
                    .map_or_else(|| format!("toolu_{i}"), str::to_owned),
                name: block
                    .get("name")
                    .and_then(Json::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                arguments: block.get("input").cloned().unwrap_or_else(|| json!({})),
            }),
            _ => {}
        }
    }
    let (input, output) = counts(json.get("usage"));
    if input.is_some() || output.is_some() {
        reply.usage = Some(TokenCounts {
            input: input.unwrap_or(0),
            output: output.unwrap_or(0),
            estimated: false,
        });
    }
    reply.finish_reason = json
        .get("stop_reason")
        .and_then(Json::as_str)
        .map(str::to_owned);
    Ok(reply)
}

enum Block {
    Text,
    Tool {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

/// Assembles a streamed reply.
#[derive(Default)]
pub(crate) struct StreamParser {
    text: String,
    blocks: BTreeMap<u64, Block>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    stop_reason: Option<String>,
    done: bool,
}

impl StreamParse for StreamParser {
    /// Feeds one SSE event; returns the text it adds, if any.
    fn feed(&mut self, event: &str, data: &str) -> Result<Option<String>, StreamFault> {
        if data.trim().is_empty() {
            return Ok(None);
        }
        let json: Json = serde_json::from_str(data)
            .map_err(|e| StreamFault::Malformed(format!("an event is not JSON ({e})")))?;
        let kind = json
            .get("type")
            .and_then(Json::as_str)
            .unwrap_or(event)
            .to_owned();
        let index = json.get("index").and_then(Json::as_u64).unwrap_or(0);
        match kind.as_str() {
            "message_start" => {
                let (input, output) = counts(json.get("message").and_then(|m| m.get("usage")));
                self.input_tokens = input.or(self.input_tokens);
                self.output_tokens = output.or(self.output_tokens);
            }
            "content_block_start" => {
                let block = json.get("content_block");
                let block = match block.and_then(|b| b.get("type")).and_then(Json::as_str) {
                    Some("text") => Block::Text,
                    Some("tool_use") => {
                        let field = |k: &str| {
                            block
                                .and_then(|b| b.get(k))
                                .and_then(Json::as_str)
                                .unwrap_or_default()
                                .to_owned()
                        };
                        Block::Tool {
                            id: field("id"),
                            name: field("name"),
                            json: String::new(),
                        }
                    }
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let delta = json.get("delta");
                match delta.and_then(|d| d.get("type")).and_then(Json::as_str) {
                    Some("text_delta") => {
                        let piece = delta
                            .and_then(|d| d.get("text"))
                            .and_then(Json::as_str)
                            .unwrap_or_default();
                        if !piece.is_empty() {
                            self.text.push_str(piece);
                            return Ok(Some(piece.to_owned()));
                        }
                    }
                    Some("input_json_delta") => {
                        let piece = delta
                            .and_then(|d| d.get("partial_json"))
                            .and_then(Json::as_str)
                            .unwrap_or_default();
                        if let Some(Block::Tool { json, .. }) = self.blocks.get_mut(&index) {
                            json.push_str(piece);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = json
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Json::as_str)
                {
                    self.stop_reason = Some(reason.to_owned());
                }
                let (input, output) = counts(json.get("usage"));
                self.input_tokens = input.or(self.input_tokens);
                self.output_tokens = output.or(self.output_tokens);
            }
            "message_stop" => self.done = true,
            "error" => {
                let error = json.get("error");
                let message = error
                    .and_then(|e| e.get("message"))
                    .and_then(Json::as_str)
                    .unwrap_or("unknown error");
                let kind = error
                    .and_then(|e| e.get("type"))
                    .and_then(Json::as_str)
                    .unwrap_or("error");
                return Err(StreamFault::Provider(format!("{kind}: {message}")));
            }
            _ => {}
        }
        Ok(None)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn is_complete(&self) -> bool {
        self.done
    }

    fn text_len(&self) -> usize {
        self.text.chars().count()
    }

    fn into_reply(self: Box<Self>) -> Reply {
        let this = *self;
        let usage =
            (this.input_tokens.is_some() || this.output_tokens.is_some()).then(|| TokenCounts {
                input: this.input_tokens.unwrap_or(0),
                output: this.output_tokens.unwrap_or(0),
                estimated: false,
            });
        Reply {
            text: this.text,
            tool_calls: this
                .blocks
                .into_iter()
                .filter_map(|(index, block)| match block {
                    Block::Tool { id, name, json } => Some(ToolCall {
                        id: if id.is_empty() {
                            format!("toolu_{index}")
                        } else {
                            id
                        },
                        name,
                        arguments: parse_arguments(&json),
                    }),
                    Block::Text | Block::Other => None,
                })
                .collect(),
            usage,
            finish_reason: this.stop_reason,
        }
    }
}

/// Anthropic's Messages API.
#[derive(Debug)]
pub(crate) struct Anthropic;

impl WireFormat for Anthropic {
    fn about(&self) -> About {
        About::hosted("anthropic", "Anthropic", "https://api.anthropic.com")
    }

    fn url(&self, base_url: &str) -> String {
        if base_url.ends_with("/v1") {
            format!("{base_url}/messages")
        } else {
            format!("{base_url}/v1/messages")
        }
    }

    fn fixed_headers(&self) -> Vec<(HeaderName, &'static str)> {
        vec![(HeaderName::from_static("anthropic-version"), API_VERSION)]
    }

    fn key_header(&self, key: &str) -> (HeaderName, String) {
        (HeaderName::from_static("x-api-key"), key.to_owned())
    }

    fn body(&self, request: &ChatRequest, _base_url: &str) -> Json {
        body(request)
    }

    fn stream_parser(&self) -> Box<dyn StreamParse> {
        Box::new(StreamParser::default())
    }

    fn parse_reply(&self, json: &Json) -> Result<Reply, String> {
        parse_reply(json)
    }

    fn not_found_hint(&self, _model: &str) -> String {
        "; check the model name (e.g. claude-sonnet-4-5) and base_url".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::types::Message;

    #[test]
    fn body_moves_system_out_and_groups_tool_results() {
        let mut assistant = Message::new(Role::Assistant, "let me look");
        assistant.tool_calls = vec![
            ToolCall {
                id: "t1".into(),
                name: "a".into(),
                arguments: json!({"x": 1}),
            },
            ToolCall {
                id: "t2".into(),
                name: "b".into(),
                arguments: json!({}),
            },
        ];
        let mut r1 = Message::new(Role::Tool, "one");
        r1.tool_call_id = Some("t1".into());
        let mut r2 = Message::new(Role::Tool, "two");
        r2.tool_call_id = Some("t2".into());
        let req = ChatRequest {
            model: "claude".into(),
            system: Some("be kind".into()),
            messages: vec![
                Message::new(Role::System, "and brief"),
                Message::new(Role::User, "hi"),
                assistant,
                r1,
                r2,
            ],
            ..ChatRequest::default()
        };
        let b = body(&req);
        assert_eq!(b["system"], "be kind\n\nand brief");
        assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
        let messages = b["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][1]["type"], "tool_use");
        assert_eq!(messages[2]["role"], "user");
        assert_eq!(messages[2]["content"][1]["tool_use_id"], "t2");
    }

    #[test]
    fn stream_assembles_text_and_tool_input_fragments() {
        let events = [
            (
                "message_start",
                r#"{"type":"message_start","message":{"usage":{"input_tokens":12,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"lookup","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\": \"ru"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"st\"}"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
            ),
        ];
        let mut p = StreamParser::default();
        for (event, data) in events {
            p.feed(event, data).unwrap();
        }
        assert!(!p.is_complete(), "no message_stop yet");
        p.feed("message_stop", r#"{"type":"message_stop"}"#)
            .unwrap();
        assert!(p.is_complete());
        let reply = Box::new(p).into_reply();
        assert_eq!(reply.text, "Checking");
        assert_eq!(
            reply.tool_calls,
            vec![ToolCall {
                id: "toolu_1".into(),
                name: "lookup".into(),
                arguments: json!({"q": "rust"})
            }]
        );
        assert_eq!(
            reply.usage,
            Some(TokenCounts {
                input: 12,
                output: 9,
                estimated: false
            })
        );
    }

    #[test]
    fn an_error_event_is_reported() {
        let mut p = StreamParser::default();
        let err = p
            .feed(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
            .unwrap_err();
        assert_eq!(
            err,
            StreamFault::Provider("overloaded_error: Overloaded".into())
        );
    }
}
