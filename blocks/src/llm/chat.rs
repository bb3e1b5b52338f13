//! `llm.chat`: one turn of a conversation with a model; the prompt template's variables
//! become inputs, and the answer streams onto the canvas.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

use super::common::{
    LlmSettings, Meter, PromptTemplate, connection_fields, prompt_inputs, retry_feedback,
    tuning_fields,
};
use super::provider::complete;
use super::types::{Message, Role, ToolDef, messages_from_value, tools_from_json};

const RESERVED: [&str; 5] = ["history", "base_url", "model", "prompt", "tools"];

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(LlmChat::new())]
}

struct LlmChat {
    meta: BlockMeta,
}

impl LlmChat {
    fn new() -> Self {
        let meta = BlockMeta::new(
            "llm.chat",
            "LLM chat",
            "AI",
            "Sends a prompt (and an optional conversation history) to a language model and outputs its answer, the extended conversation and any tool calls.",
        );
        let meta = connection_fields(meta)
            .field(ConfigField::template("prompt", "Prompt").help(
                "The user message, in Jinja syntax: {{ name }} inserts input `name`, and every variable becomes an input. Empty: the `prompt` input, or just the history.",
            ))
            .field(ConfigField::json("tools", "Tools").help(
                "Optional tool definitions the model may call: a list of {name, description, parameters (JSON Schema)}; the OpenAI and Anthropic shapes are accepted too. Calls come out on `tool_calls`. Tools computed by the graph can arrive on the `tools` input as well.",
            ));
        Self {
            meta: tuning_fields(meta, true),
        }
    }
}

impl Block for LlmChat {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let settings = LlmSettings::from_config(config, true)?;
        let prompt = PromptTemplate::from_config(config, "prompt", &RESERVED)?;
        let tools = match ConfigReader(config).get("tools") {
            Some(json) => tools_from_json(json).map_err(|e| ConfigError::new("tools", e))?,
            None => Vec::new(),
        };
        let mut inputs = prompt_inputs(
            prompt.as_ref(),
            "The user message (config `prompt` is empty).",
            "Earlier messages of the conversation, sent before the prompt.",
            &settings,
        );
        let after_history = inputs
            .iter()
            .position(|p| p.name == "history")
            .map_or(inputs.len(), |i| i + 1);
        inputs.insert(
            after_history,
            PortSpec::new("tools", ValueType::Any).optional().describe(
                "More tool definitions, computed by the graph: a list (or one) of {name, description, parameters}, in the same shapes as config `tools`. Added to those; one with the name of a config tool replaces it.",
            ),
        );
        let ports = Ports::new(
            inputs,
            vec![
                PortSpec::new("text", ValueType::Text).describe("The model's answer."),
                PortSpec::new("messages", ValueType::Messages)
                    .describe("The history, the prompt and the answer: feed it to the next turn."),
                PortSpec::new("tool_calls", ValueType::list_of(ValueType::Any))
                    .describe("The tools the model asked to call: [{id, name, arguments}]; empty when none."),
                PortSpec::new("usage", ValueType::Object)
                    .describe("Tokens and cost of this call: {model, input_tokens, output_tokens, cost_usd…}."),
            ],
        );
        Ok(Arc::new(ChatNode {
            settings,
            prompt,
            tools,
            ports,
        }))
    }
}

struct ChatNode {
    settings: LlmSettings,
    prompt: Option<PromptTemplate>,
    tools: Vec<ToolDef>,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for ChatNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let endpoint = self.settings.endpoint(&mut inputs)?;
        let model = self.settings.model(&mut inputs)?;
        let history = match inputs.take_optional("history") {
            Some(value) => {
                messages_from_value(&value).map_err(|e| BlockError::input("history", e))?
            }
            None => Vec::new(),
        };
        let prompt = match &self.prompt {
            Some(template) => template.render(&mut inputs, ctx).await?,
            None => inputs
                .take_optional("prompt")
                .map(|v| v.to_text())
                .unwrap_or_default(),
        };
        let mut messages = history;
        if !prompt.trim().is_empty() {
            messages.push(Message::new(Role::User, prompt));
        }
        if messages.is_empty() {
            return Err(BlockError::input(
                "prompt",
                "there is nothing to send: the prompt is empty and no history arrived",
            ));
        }
        let tools = match inputs.take_optional("tools") {
            Some(value) => merge_tools(&self.tools, &value)?,
            None => self.tools.clone(),
        };
        let mut meter = Meter::new(&self.settings, &model)?;
        let mut request = self.settings.request(&model);
        // The conversation output holds what the graph sent, not a retry's feedback.
        let mut conversation: Vec<Value> = messages.iter().map(Message::to_value).collect();
        request.messages = messages;
        request
            .messages
            .extend(retry_feedback(ctx, &endpoint, "Answer again."));
        request.tools = tools;
        let reserved = meter.reserve(ctx, &request)?;
        let reply = complete(&endpoint, &request, self.settings.options, ctx, "text").await?;
        meter.record(ctx, &request, &reply, reserved);
        let mut answer = Message::new(Role::Assistant, reply.text.clone());
        answer.tool_calls = reply.tool_calls.clone();
        conversation.push(answer.to_value());
        Ok(agentloom_core::outputs([
            ("text", Value::text(reply.text)),
            ("messages", Value::list(conversation)),
            (
                "tool_calls",
                Value::list(
                    reply
                        .tool_calls
                        .iter()
                        .map(super::types::ToolCall::to_value)
                        .collect(),
                ),
            ),
            ("usage", meter.to_value()),
        ]))
    }
}

/// The config's tools with those of the `tools` input added; an input tool with the name of
/// a config tool replaces it.
fn merge_tools(configured: &[ToolDef], value: &Value) -> Result<Vec<ToolDef>, BlockError> {
    let json = match value {
        // JSON text, e.g. from a template.
        Value::Text(text) => serde_json::from_str(text).map_err(|e| {
            BlockError::input(
                "tools",
                format!("the text is not JSON tool definitions: {e}"),
            )
        })?,
        other => other.to_json(),
    };
    let given = tools_from_json(&json).map_err(|e| BlockError::input("tools", e))?;
    let mut tools = configured.to_vec();
    for tool in given {
        match tools.iter_mut().find(|t| t.name == tool.name) {
            Some(slot) => *slot = tool,
            None => tools.push(tool),
        }
    }
    Ok(tools)
}
