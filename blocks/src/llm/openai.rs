//! The OpenAI chat-completions wire format (`POST {base_url}/chat/completions`), spoken by
//! OpenAI and most local and hosted servers (Ollama's `/v1`, LM Studio, vLLM, llama.cpp,
//! Groq…). Streaming is SSE: `data: {chunk}` lines ending with `data: [DONE]`; tool-call
//! arguments arrive in fragments keyed by the call's `index`.

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use super::types::{ChatRequest, Message, Reply, Role, TokenCounts, ToolCall, parse_arguments};
use super::wire::{About, StreamFault, StreamParse, WireFormat};

/// The request body. `hosted` is true for api.openai.com, which wants
/// `max_completion_tokens` where other servers want `max_tokens`.
pub(crate) fn body(req: &ChatRequest, hosted: bool) -> Json {
    let mut messages = Vec::new();
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.extend(req.messages.iter().map(message));
    let mut body = json!({
        "model": req.model,
        "messages": messages,
        "stream": req.stream,
    });
    if req.stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(n) = req.max_tokens {
        let key = if hosted {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[key] = json!(n);
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
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": false}
        });
    }
    body
}

fn message(m: &Message) -> Json {
    match m.role {
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
        Role::Assistant if !m.tool_calls.is_empty() => json!({
            "role": "assistant",
            "content": if m.content.is_empty() { Json::Null } else { json!(m.content) },
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_text()},
            })).collect::<Vec<_>>(),
        }),
        role => json!({"role": role.as_str(), "content": m.content}),
    }
}

fn usage(json: &Json) -> Option<TokenCounts> {
    let usage = json.get("usage").filter(|u| u.is_object())?;
    Some(TokenCounts {
        input: usage
            .get("prompt_tokens")
            .and_then(Json::as_u64)
            .unwrap_or(0),
        output: usage
            .get("completion_tokens")
            .and_then(Json::as_u64)
            .unwrap_or(0),
        estimated: false,
    })
}

/// Reads a non-streamed reply.
pub(crate) fn parse_reply(json: &Json) -> Result<Reply, String> {
    let choice = json
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| "the reply has no `choices`".to_owned())?;
    let message = choice
        .get("message")
        .ok_or_else(|| "the reply's first choice has no `message`".to_owned())?;
    let text = message
        .get("content")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_owned();
    let tool_calls = message
        .get("tool_calls")
        .and_then(Json::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let function = call.get("function").unwrap_or(call);
                    ToolCall {
                        id: call
                            .get("id")
                            .and_then(Json::as_str)
                            .map_or_else(|| format!("call_{i}"), str::to_owned),
                        name: function
                            .get("name")
                            .and_then(Json::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        arguments: match function.get("arguments") {
                            Some(Json::String(text)) => parse_arguments(text),
                            Some(other) if !other.is_null() => other.clone(),
                            _ => json!({}),
                        },
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Reply {
        text,
        tool_calls,
        usage: usage(json),
        finish_reason: choice
            .get("finish_reason")
            .and_then(Json::as_str)
            .map(str::to_owned),
    })
}

/// A tool call being assembled from fragments.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles a streamed reply.
#[derive(Default)]
pub(crate) struct StreamParser {
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<TokenCounts>,
    finish_reason: Option<String>,
    done: bool,
}

impl StreamParse for StreamParser {
    /// Feeds one SSE event's data; returns the text it adds, if any.
    fn feed(&mut self, _event: &str, data: &str) -> Result<Option<String>, StreamFault> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(None);
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(None);
        }
        let chunk: Json = serde_json::from_str(data)
            .map_err(|e| StreamFault::Malformed(format!("a chunk is not JSON ({e})")))?;
        if let Some(error) = chunk.get("error") {
            let message = error
                .get("message")
                .and_then(Json::as_str)
                .map_or_else(|| error.to_string(), str::to_owned);
            return Err(StreamFault::Provider(message));
        }
        if let Some(counts) = usage(&chunk) {
            self.usage = Some(counts);
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return Ok(None);
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Json::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(None);
        };
        if let Some(calls) = delta.get("tool_calls").and_then(Json::as_array) {
            for (position, call) in calls.iter().enumerate() {
                let index = call
                    .get("index")
                    .and_then(Json::as_u64)
                    .unwrap_or(position as u64);
                let slot = self.calls.entry(index).or_default();
                if let Some(id) = call.get("id").and_then(Json::as_str) {
                    slot.id = id.to_owned();
                }
                let function = call.get("function");
                if let Some(name) = function.and_then(|f| f.get("name")).and_then(Json::as_str) {
                    slot.name.push_str(name);
                }
                if let Some(args) = function
                    .and_then(|f| f.get("arguments"))
                    .and_then(Json::as_str)
                {
                    slot.arguments.push_str(args);
                }
            }
        }
        match delta.get("content").and_then(Json::as_str) {
            Some(piece) if !piece.is_empty() => {
                self.text.push_str(piece);
                Ok(Some(piece.to_owned()))
            }
            _ => Ok(None),
        }
    }

    /// `[DONE]` arrived.
    fn is_done(&self) -> bool {
        self.done
    }

    /// The reply is whole: `[DONE]`, or at least a finish reason (some servers omit `[DONE]`).
    fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    fn text_len(&self) -> usize {
        self.text.chars().count()
    }

    fn into_reply(self: Box<Self>) -> Reply {
        let this = *self;
        Reply {
            text: this.text,
            tool_calls: this
                .calls
                .into_iter()
                .map(|(index, call)| ToolCall {
                    id: if call.id.is_empty() {
                        format!("call_{index}")
                    } else {
                        call.id
                    },
                    name: call.name,
                    arguments: parse_arguments(&call.arguments),
                })
                .collect(),
            usage: this.usage,
            finish_reason: this.finish_reason,
        }
    }
}

/// The OpenAI chat-completions API, and the servers that speak it.
#[derive(Debug)]
pub(crate) struct OpenAi;

impl WireFormat for OpenAi {
    fn about(&self) -> About {
        About::hosted(
            "openai",
            "the OpenAI-compatible server",
            "https://api.openai.com/v1",
        )
    }

    fn url(&self, base_url: &str) -> String {
        format!("{base_url}/chat/completions")
    }

    fn body(&self, request: &ChatRequest, base_url: &str) -> Json {
        body(request, base_url.starts_with("https://api.openai.com"))
    }

    fn parse_reply(&self, json: &Json) -> Result<Reply, String> {
        parse_reply(json)
    }

    fn stream_parser(&self) -> Box<dyn StreamParse> {
        Box::new(StreamParser::default())
    }

    fn not_found_hint(&self, _model: &str) -> String {
        "; check the model name, and that base_url is the API root (for most OpenAI-compatible servers it ends in /v1)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::types::ToolDef;

    #[test]
    fn body_carries_system_tools_schema_and_history() {
        let mut assistant = Message::new(Role::Assistant, "");
        assistant.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "add".into(),
            arguments: json!({"a": 1}),
        });
        let mut tool = Message::new(Role::Tool, "2");
        tool.tool_call_id = Some("c1".into());
        let req = ChatRequest {
            model: "m".into(),
            system: Some("sys".into()),
            messages: vec![Message::new(Role::User, "hi"), assistant, tool],
            temperature: Some(0.5),
            max_tokens: Some(10),
            tools: vec![ToolDef {
                name: "add".into(),
                description: "adds".into(),
                parameters: json!({"type": "object"}),
            }],
            json_schema: Some(json!({"type": "object"})),
            stream: true,
        };
        let b = body(&req, false);
        assert_eq!(
            b["messages"][0],
            json!({"role": "system", "content": "sys"})
        );
        assert_eq!(b["messages"][2]["content"], Json::Null);
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1}"
        );
        assert_eq!(
            b["messages"][3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "2"})
        );
        assert_eq!(b["max_tokens"], 10);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["tools"][0]["function"]["name"], "add");
        assert_eq!(
            b["response_format"]["json_schema"]["schema"],
            json!({"type": "object"})
        );
        assert_eq!(body(&req, true)["max_completion_tokens"], 10);
    }

    #[test]
    fn stream_assembles_text_and_fragmented_tool_calls() {
        let mut p = StreamParser::default();
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\": \"Oslo\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#,
        ];
        let mut streamed = String::new();
        for c in chunks {
            if let Some(piece) = p.feed("", c).unwrap() {
                streamed.push_str(&piece);
            }
        }
        assert!(p.is_complete() && !p.is_done());
        p.feed("", "[DONE]").unwrap();
        assert!(p.is_done());
        let reply = Box::new(p).into_reply();
        assert_eq!(streamed, "Hello");
        assert_eq!(reply.text, "Hello");
        assert_eq!(reply.tool_calls[0].id, "call_a");
        assert_eq!(reply.tool_calls[0].arguments, json!({"city": "Oslo"}));
        assert_eq!(
            reply.usage,
            Some(TokenCounts {
                input: 7,
                output: 3,
                estimated: false
            })
        );
        assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn parses_a_whole_reply_with_tool_calls() {
        let reply = parse_reply(&json!({
            "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"q\":2}"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1}
        }))
        .unwrap();
        assert_eq!(reply.text, "");
        assert_eq!(reply.tool_calls[0].arguments, json!({"q": 2}));
        assert_eq!(reply.usage.unwrap().input, 5);
        assert!(
            parse_reply(&json!({"object": "list"}))
                .unwrap_err()
                .contains("no `choices`")
        );
    }
}
