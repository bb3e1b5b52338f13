//! `mcp.<server>.<tool>`: calls one tool of an MCP server. Inputs are the tool's parameters
//! (from its input schema); `result` is the structured result (or the text when there is
//! none) and `text` the text content. A tool error, a broken connection or a call that
//! takes longer than the node's `timeout_ms` is the node's error, with the tool's own
//! message. The server's token joins the run's redaction.

use std::sync::Arc;
use std::time::Duration;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    NodeImpl, OutboundCall, PortSpec, Ports, RecordedResponse, Replayed, RunCtx, Value, ValueMap,
    ValueType, async_trait, value_type_from_schema,
};
use rmcp::model::{CallToolResult, Tool};

use super::connection::{CallFailure, McpConnection};

/// How long a call may take unless the node says otherwise.
const DEFAULT_TIMEOUT_MS: u64 = 60_000;

pub struct McpToolBlock {
    meta: BlockMeta,
    tool: String,
    connection: Arc<McpConnection>,
    ports: Ports,
}

impl McpToolBlock {
    pub fn new(connection: Arc<McpConnection>, tool: &Tool) -> McpToolBlock {
        let server = connection.name().to_owned();
        let description = tool
            .description
            .as_deref()
            .map_or_else(String::new, str::to_owned);
        let title = tool.title.clone().unwrap_or_else(|| tool.name.to_string());
        let mut meta = BlockMeta::new(
            &super::tool_kind(&server, &tool.name),
            &title,
            "MCP",
            format!(
                "{description} (tool `{}` of MCP server `{server}`)",
                tool.name
            )
            .trim_start(),
        )
        .field(
            ConfigField::integer("timeout_ms", "Timeout (ms)", Some(1), None)
                .default_value(serde_json::json!(DEFAULT_TIMEOUT_MS))
                .help("Fail the call when the tool has not answered within this; a server started with stdio is then stopped, and starts again on the next call."),
        );
        // Only a tool that says it changes nothing runs without asking in safe mode.
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        if !read_only {
            meta = meta.with_side_effects();
        }
        McpToolBlock {
            meta,
            tool: tool.name.to_string(),
            ports: ports_of(tool),
            connection,
        }
    }
}

/// One input per property of the tool's input schema (required ones required).
fn ports_of(tool: &Tool) -> Ports {
    let schema = tool.input_schema.as_ref();
    let required: Vec<&str> = schema
        .get("required")
        .and_then(serde_json::Value::as_array)
        .map(|names| names.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let mut inputs = Vec::new();
    if let Some(properties) = schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
    {
        for (name, property) in properties {
            let mut port = PortSpec::new(name.clone(), value_type_from_schema(property));
            if let Some(text) = property
                .get("description")
                .and_then(serde_json::Value::as_str)
            {
                port = port.describe(text);
            }
            if !required.contains(&name.as_str()) {
                port = port.optional();
            }
            inputs.push(port);
        }
    }
    Ports::new(
        inputs,
        vec![
            PortSpec::new("result", ValueType::Any)
                .describe("The tool's structured result, or its text when it has none."),
            PortSpec::new("text", ValueType::Text).describe("The text the tool returned."),
        ],
    )
}

impl Block for McpToolBlock {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let timeout_ms = ConfigReader(config).u64_or("timeout_ms", DEFAULT_TIMEOUT_MS)?;
        if timeout_ms == 0 {
            return Err(ConfigError::new("timeout_ms", "must be at least 1"));
        }
        Ok(Arc::new(McpToolNode {
            timeout: Duration::from_millis(timeout_ms),
            tool: self.tool.clone(),
            connection: self.connection.clone(),
            ports: self.ports.clone(),
        }))
    }
}

struct McpToolNode {
    timeout: Duration,
    tool: String,
    connection: Arc<McpConnection>,
    ports: Ports,
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

impl McpToolNode {
    /// Calls the tool, or answers from the run's recording when it replays one; a live
    /// call's result is recorded.
    async fn call_or_replay(
        &self,
        arguments: serde_json::Map<String, serde_json::Value>,
        ctx: &dyn RunCtx,
    ) -> Result<CallToolResult, BlockError> {
        let url = format!("mcp://{}/{}", self.connection.name(), self.tool);
        let body = serde_json::to_vec(&arguments).unwrap_or_default();
        let call = OutboundCall {
            method: "MCP",
            url: &url,
            body: &body,
        };
        match ctx.replay_call(&call) {
            Replayed::Answer(recorded) => {
                return serde_json::from_slice(&recorded.body).map_err(|e| {
                    BlockError::permanent(format!(
                        "the recorded result of MCP tool `{}` does not read: {e}",
                        self.tool
                    ))
                });
            }
            Replayed::Missing(error) => return Err(error),
            Replayed::Live => {}
        }
        let recording = ctx.record_call(&call);
        let result = self
            .connection
            .call(&self.tool, arguments, self.timeout, ctx.cancel_token())
            .await
            .map_err(|failure| match failure {
                CallFailure::Cancelled => BlockError::cancelled(),
                CallFailure::Failed(message) => BlockError::permanent(message),
            })?;
        if let (Some(recording), Ok(body)) = (recording, serde_json::to_vec(&result)) {
            recording.keep(RecordedResponse {
                status: 200,
                headers: Vec::new(),
                body,
            });
        }
        Ok(result)
    }
}

#[async_trait]
impl NodeImpl for McpToolNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    /// Which tool of which server: its arguments are shown beside.
    fn describe(&self, _inputs: &ValueMap) -> Option<String> {
        Some(format!(
            "call tool `{}` of MCP server `{}`",
            self.tool,
            self.connection.name()
        ))
    }

    async fn run(&self, inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let arguments: serde_json::Map<String, serde_json::Value> = inputs
            .into_iter()
            .filter(|(_, value)| *value != Value::Null)
            .map(|(name, value)| (name, value.to_json()))
            .collect();
        if let Some(token) = self.connection.token() {
            ctx.redact_secret(token);
        }
        let result = self.call_or_replay(arguments, ctx).await?;
        let text = text_of(&result);
        if result.is_error == Some(true) {
            return Err(BlockError::permanent(format!(
                "MCP tool `{}` of server `{}` failed: {}",
                self.tool,
                self.connection.name(),
                if text.is_empty() { "no message" } else { &text }
            )));
        }
        let structured = result
            .structured_content
            .map_or_else(|| Value::text(text.clone()), Value::from_json);
        Ok(agentloom_core::outputs([
            ("result", structured),
            ("text", Value::text(text)),
        ]))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    #[test]
    fn inputs_follow_the_tool_schema_with_types_descriptions_and_required() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": "Message to echo"},
                "times": {"type": "integer"}
            },
            "required": ["message"]
        });
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        let ports = ports_of(&Tool::new("echo", "Echoes", schema));
        let message = ports.input("message").unwrap();
        assert_eq!(message.ty, ValueType::Text);
        assert_eq!(message.description, "Message to echo");
        assert!(message.required);
        let times = ports.input("times").unwrap();
        assert_eq!(times.ty, ValueType::Integer);
        assert!(!times.required);
        assert_eq!(ports.outputs.len(), 2);
    }
}
