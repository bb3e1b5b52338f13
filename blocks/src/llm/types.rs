//! The provider-neutral shapes of a chat exchange: messages, tool definitions, tool calls
//! and the reply. Each wire format (`openai`, `anthropic`, `ollama`) converts from and to
//! these.
//!
//! On wires, messages are objects `{role, content}`; an assistant message may carry
//! `tool_calls: [{id, name, arguments}]`, and a tool result is
//! `{role: "tool", tool_call_id, name, content}`. OpenAI-shaped tool calls
//! (`{id, function: {name, arguments: "<json text>"}}`) are accepted on input too.

use std::collections::BTreeMap;

use agentloom_core::Value;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    fn parse(text: &str) -> Option<Role> {
        Some(match text {
            "system" | "developer" => Role::System,
            "user" | "human" => Role::User,
            "assistant" | "model" | "ai" => Role::Assistant,
            "tool" | "function" => Role::Tool,
            _ => return None,
        })
    }
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Message {
    pub role: Role,
    pub content: String,
    /// Calls the assistant asked for (assistant messages only).
    pub tool_calls: Vec<ToolCall>,
    /// The call this message answers (tool messages only).
    pub tool_call_id: Option<String>,
    /// The tool's name (tool messages only; Ollama wants it).
    pub name: Option<String>,
}

impl Message {
    pub(crate) fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// The message as it travels on a `messages` wire.
    pub(crate) fn to_value(&self) -> Value {
        let mut map = BTreeMap::from([
            ("role".to_owned(), Value::from(self.role.as_str())),
            ("content".to_owned(), Value::text(self.content.clone())),
        ]);
        if !self.tool_calls.is_empty() {
            map.insert(
                "tool_calls".to_owned(),
                Value::list(self.tool_calls.iter().map(ToolCall::to_value).collect()),
            );
        }
        if let Some(id) = &self.tool_call_id {
            map.insert("tool_call_id".to_owned(), Value::text(id.clone()));
        }
        if let Some(name) = &self.name {
            map.insert("name".to_owned(), Value::text(name.clone()));
        }
        Value::object(map)
    }

    /// Reads one message; `index` is only used in the error.
    pub(crate) fn from_value(value: &Value, index: usize) -> Result<Message, String> {
        let Some(map) = value.as_object() else {
            return Err(format!(
                "message {index} is {}, expected an object {{role, content}}",
                value.kind_name()
            ));
        };
        let role_text = map.get("role").and_then(Value::as_str).unwrap_or_default();
        let role = Role::parse(role_text).ok_or_else(|| {
            format!(
                "message {index} has role `{role_text}`; expected system, user, assistant or tool"
            )
        })?;
        let content = match map.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::Text(text)) => String::clone(text),
            // A list of content parts ({type: "text", text}): keep the text.
            Some(Value::List(parts)) => parts
                .iter()
                .filter_map(|part| match part {
                    Value::Text(text) => Some(String::clone(text)),
                    Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_owned),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(""),
            Some(other) => other.to_text(),
        };
        let mut message = Message::new(role, content);
        if let Some(Value::List(calls)) = map.get("tool_calls") {
            for (n, call) in calls.iter().enumerate() {
                message.tool_calls.push(
                    ToolCall::from_value(call)
                        .ok_or_else(|| format!("message {index}: tool call {n} has no name"))?,
                );
            }
        }
        message.tool_call_id = map
            .get("tool_call_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        message.name = map.get("name").and_then(Value::as_str).map(str::to_owned);
        Ok(message)
    }
}

/// Reads a `messages` value (a list of messages).
pub(crate) fn messages_from_value(value: &Value) -> Result<Vec<Message>, String> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Text(text) => Ok(vec![Message::new(Role::User, String::clone(text))]),
        Value::List(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| Message::from_value(item, i))
            .collect(),
        other => Err(format!(
            "expected a list of messages, got {}",
            other.kind_name()
        )),
    }
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolDef {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

impl ToolDef {
    /// Reads one tool definition in any of the common shapes: `{name, description,
    /// parameters}`, OpenAI's `{type: "function", function: {…}}` or Anthropic's
    /// `{name, description, input_schema}`.
    pub(crate) fn from_json(json: &serde_json::Value) -> Result<ToolDef, String> {
        let inner = json.get("function").unwrap_or(json);
        let name = inner
            .get("name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .trim();
        if name.is_empty() {
            return Err("a tool has no `name`".to_owned());
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            || name.len() > 64
        {
            return Err(format!(
                "tool name `{name}` may only use letters, digits, `_` and `-` (at most 64)"
            ));
        }
        let description = inner
            .get("description")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let parameters = inner
            .get("parameters")
            .or_else(|| inner.get("input_schema"))
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        if !parameters.is_object() {
            return Err(format!(
                "tool `{name}`: `parameters` must be a JSON Schema object"
            ));
        }
        Ok(ToolDef {
            name: name.to_owned(),
            description,
            parameters,
        })
    }
}

/// Reads a list of tool definitions.
pub(crate) fn tools_from_json(json: &serde_json::Value) -> Result<Vec<ToolDef>, String> {
    let items = match json {
        serde_json::Value::Null => return Ok(Vec::new()),
        serde_json::Value::Array(items) => items,
        serde_json::Value::Object(_) => std::slice::from_ref(json),
        _ => return Err("expected a list of tool definitions".to_owned()),
    };
    let mut tools: Vec<ToolDef> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let tool = ToolDef::from_json(item).map_err(|e| format!("tool {i}: {e}"))?;
        if tools.iter().any(|t| t.name == tool.name) {
            return Err(format!("tool {i}: the name `{}` is used twice", tool.name));
        }
        tools.push(tool);
    }
    Ok(tools)
}

/// A call the model asked for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON; text when the model produced something that is not JSON.
    pub arguments: serde_json::Value,
}

impl ToolCall {
    pub(crate) fn to_value(&self) -> Value {
        Value::object(BTreeMap::from([
            ("id".to_owned(), Value::text(self.id.clone())),
            ("name".to_owned(), Value::text(self.name.clone())),
            (
                "arguments".to_owned(),
                Value::from_json(self.arguments.clone()),
            ),
        ]))
    }

    fn from_value(value: &Value) -> Option<ToolCall> {
        let map = value.as_object()?;
        let function = map.get("function").and_then(Value::as_object);
        let name = function
            .and_then(|f| f.get("name"))
            .or_else(|| map.get("name"))
            .and_then(Value::as_str)?
            .to_owned();
        let arguments = function
            .and_then(|f| f.get("arguments"))
            .or_else(|| map.get("arguments"))
            .or_else(|| map.get("input"))
            .cloned()
            .unwrap_or(Value::Null);
        let arguments = match arguments {
            Value::Text(text) => parse_arguments(&text),
            Value::Null => serde_json::json!({}),
            other => other.to_json(),
        };
        Some(ToolCall {
            id: map
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            name,
            arguments,
        })
    }

    /// The arguments as JSON text (OpenAI sends them so).
    pub(crate) fn arguments_text(&self) -> String {
        match &self.arguments {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }
}

/// Parses tool-call arguments streamed as text; empty means `{}`, and text that is not JSON
/// is kept as text so that the caller can show it to the model.
pub(crate) fn parse_arguments(text: &str) -> serde_json::Value {
    if text.trim().is_empty() {
        return serde_json::json!({});
    }
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
}

/// Tokens counted by the provider (or estimated when it did not say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TokenCounts {
    pub input: u64,
    pub output: u64,
    /// The provider gave no counts; these are estimates (about four characters a token).
    pub estimated: bool,
}

/// What the model answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Reply {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<TokenCounts>,
    pub finish_reason: Option<String>,
}

/// What is sent to the model.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChatRequest {
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u64>,
    pub tools: Vec<ToolDef>,
    /// Ask for JSON matching this schema (where the provider supports it natively).
    pub json_schema: Option<serde_json::Value>,
    pub stream: bool,
}

impl ChatRequest {
    /// A rough token count of the request, for providers that report none.
    pub(crate) fn estimated_input_tokens(&self) -> u64 {
        let chars: usize = self.system.as_deref().map_or(0, str::len)
            + self
                .messages
                .iter()
                .map(|m| {
                    m.content.len()
                        + m.tool_calls
                            .iter()
                            .map(|c| c.arguments_text().len())
                            .sum::<usize>()
                })
                .sum::<usize>();
        estimate_tokens(chars)
    }
}

/// About four characters a token, at least one for non-empty text.
pub(crate) fn estimate_tokens(chars: usize) -> u64 {
    if chars == 0 {
        0
    } else {
        u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_round_trip_and_accept_openai_tool_calls() {
        let value = Value::from_json(json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "2"}
        ]));
        let messages = messages_from_value(&value).unwrap();
        assert_eq!(messages[1].content, "hi there");
        assert_eq!(messages[2].tool_calls[0].name, "add");
        assert_eq!(messages[2].tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(messages[3].tool_call_id.as_deref(), Some("c1"));
        let back: Vec<Message> = messages
            .iter()
            .map(Message::to_value)
            .enumerate()
            .map(|(i, v)| Message::from_value(&v, i).unwrap())
            .collect();
        assert_eq!(back, messages);
        let err = messages_from_value(&Value::from_json(
            json!([{"role": "robot", "content": "x"}]),
        ))
        .unwrap_err();
        assert_eq!(
            err,
            "message 0 has role `robot`; expected system, user, assistant or tool"
        );
    }

    #[test]
    fn tools_in_every_shape() {
        let tools = tools_from_json(&json!([
            {"name": "a", "description": "A", "parameters": {"type": "object"}},
            {"type": "function", "function": {"name": "b", "parameters": {"type": "object"}}},
            {"name": "c", "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}}
        ]))
        .unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(tools[2].parameters["properties"]["x"]["type"], "string");
        assert_eq!(
            tools_from_json(&json!([{"name": "a"}, {"name": "a"}])).unwrap_err(),
            "tool 1: the name `a` is used twice"
        );
        assert!(
            tools_from_json(&json!([{"name": "bad name"}]))
                .unwrap_err()
                .contains("may only use")
        );
        assert!(tools_from_json(&json!("x")).is_err());
    }

    #[test]
    fn arguments_that_are_not_json_stay_text() {
        assert_eq!(parse_arguments(""), json!({}));
        assert_eq!(parse_arguments("{\"a\": [1]}"), json!({"a": [1]}));
        assert_eq!(parse_arguments("{\"a\": "), json!("{\"a\": "));
    }
}
