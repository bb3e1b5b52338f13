//! `mcp.<server>.<tool>`: calls one tool of an MCP server. Inputs are the tool's parameters
//! (from its input schema); `result` is the structured result (or the text when there is
//! none) and `text` the text content. A tool error or a broken connection is the node's
//! error, with the tool's own message.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigError, NodeImpl, PortSpec, Ports, RunCtx, Value,
    ValueMap, ValueType, async_trait, value_type_from_schema,
};
use rmcp::model::{CallToolResult, Tool};

use super::connection::McpConnection;

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

    fn instantiate(&self, _config: &Config) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(McpToolNode {
            tool: self.tool.clone(),
            connection: self.connection.clone(),
            ports: self.ports.clone(),
        }))
    }
}

struct McpToolNode {
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

#[async_trait]
impl NodeImpl for McpToolNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let arguments: serde_json::Map<String, serde_json::Value> = inputs
            .into_iter()
            .filter(|(_, value)| *value != Value::Null)
            .map(|(name, value)| (name, value.to_json()))
            .collect();
        let call = {
            let connection = self.connection.clone();
            let tool = self.tool.clone();
            super::runtime().spawn(async move { connection.call(&tool, arguments).await })
        };
        let result = tokio::select! {
            joined = call => joined
                .map_err(|e| BlockError::permanent(format!("the MCP call stopped: {e}")))?
                .map_err(BlockError::permanent)?,
            () = ctx.cancel_token().cancelled() => return Err(BlockError::cancelled()),
        };
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
            .map_or_else(|| Value::Text(text.clone()), Value::from_json);
        Ok(agentloom_core::outputs([
            ("result", structured),
            ("text", Value::Text(text)),
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
