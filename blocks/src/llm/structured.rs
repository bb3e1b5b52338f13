//! `llm.structured`: asks a model for JSON matching a JSON Schema, checks the answer, and
//! when it does not match, tells the model what is wrong and asks again.

use std::collections::BTreeMap;
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
use super::types::{Message, Role, messages_from_value};

const RESERVED: [&str; 4] = ["history", "base_url", "model", "prompt"];
const DEFAULT_MAX_ATTEMPTS: u64 = 3;
/// At most this many schema problems are shown to the model and in errors.
const MAX_PROBLEMS: usize = 8;

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(LlmStructured::new())]
}

struct LlmStructured {
    meta: BlockMeta,
}

impl LlmStructured {
    fn new() -> Self {
        let meta = BlockMeta::new(
            "llm.structured",
            "LLM structured output",
            "AI",
            "Asks a language model for JSON that matches a JSON Schema, checks it, and asks again with the problems when it does not match.",
        );
        let meta = connection_fields(meta)
            .field(ConfigField::template("prompt", "Prompt").help(
                "What to extract or produce, in Jinja syntax: {{ name }} inserts input `name`, and every variable becomes an input. Empty: the `prompt` input, or just the history.",
            ))
            .field(ConfigField::json("schema", "JSON Schema").required().help(
                "The JSON Schema the answer must match, e.g. {\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}}, \"required\": [\"name\"]}.",
            ))
            .field(
                ConfigField::integer("max_attempts", "Max attempts", Some(1), Some(10))
                    .default_value(serde_json::json!(DEFAULT_MAX_ATTEMPTS))
                    .help("How many answers to try: after an answer that does not match, the problems are sent back and the model tries again. When all fail, the node's retry policy (if any) runs it again, telling the model why."),
            )
            .field(
                ConfigField::boolean("native_schema", "Send schema to provider")
                    .default_value(serde_json::json!(true))
                    .help("Also pass the schema as the provider's structured-output option (OpenAI response_format, Ollama format). Turn off for servers that reject it; the schema is always in the instructions."),
            );
        Self {
            meta: tuning_fields(meta, true),
        }
    }
}

impl Block for LlmStructured {
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
        let reader = ConfigReader(config);
        let schema = match reader.get("schema") {
            Some(serde_json::Value::String(text)) => serde_json::from_str(text)
                .map_err(|e| ConfigError::new("schema", format!("is not valid JSON: {e}")))?,
            Some(json) => json.clone(),
            None => {
                return Err(ConfigError::new(
                    "schema",
                    "is required: the JSON Schema the answer must match",
                ));
            }
        };
        if !(schema.is_object() || schema.is_boolean()) {
            return Err(ConfigError::new("schema", "must be a JSON Schema object"));
        }
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| ConfigError::new("schema", format!("is not a valid JSON Schema: {e}")))?;
        let max_attempts = reader.u64_or("max_attempts", DEFAULT_MAX_ATTEMPTS)?;
        if !(1..=10).contains(&max_attempts) {
            return Err(ConfigError::new("max_attempts", "must be between 1 and 10"));
        }
        let native_schema = reader.bool_or("native_schema", true)?;
        let inputs = prompt_inputs(
            prompt.as_ref(),
            "The request (config `prompt` is empty).",
            "Earlier messages, sent before the prompt.",
            &settings,
        );
        let ports = Ports::new(
            inputs,
            vec![
                PortSpec::new("object", ValueType::Any).describe("The answer, parsed and checked against the schema."),
                PortSpec::new("usage", ValueType::Object)
                    .describe("Tokens and cost of every attempt together: {model, calls, input_tokens, output_tokens, cost_usd…}."),
            ],
        );
        Ok(Arc::new(StructuredNode {
            settings,
            prompt,
            schema,
            validator,
            max_attempts: u32::try_from(max_attempts).unwrap_or(10),
            native_schema,
            ports,
        }))
    }
}

struct StructuredNode {
    settings: LlmSettings,
    prompt: Option<PromptTemplate>,
    schema: serde_json::Value,
    validator: jsonschema::Validator,
    max_attempts: u32,
    native_schema: bool,
    ports: Ports,
}

impl StructuredNode {
    /// The answer as JSON matching the schema, or what is wrong with it.
    fn check(&self, text: &str) -> Result<serde_json::Value, String> {
        let json = extract_json(text).ok_or_else(|| "it is not JSON".to_owned())?;
        let problems: Vec<String> = self
            .validator
            .iter_errors(&json)
            .take(MAX_PROBLEMS)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("at {path}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(json)
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Finds the JSON in a model's answer: the whole text, a fenced block, or the span from
/// the first `{` or `[` to the last `}` or `]`.
fn extract_json(text: &str) -> Option<serde_json::Value> {
    let trimmed = text.trim();
    if let Ok(json) = serde_json::from_str(trimmed) {
        return Some(json);
    }
    if let Some(start) = trimmed.find("```") {
        let rest = &trimmed[start + 3..];
        let rest = rest.strip_prefix("json").unwrap_or(rest);
        if let Some(end) = rest.find("```")
            && let Ok(json) = serde_json::from_str(rest[..end].trim())
        {
            return Some(json);
        }
    }
    let start = trimmed.find(['{', '['])?;
    let end = trimmed.rfind(['}', ']'])?;
    if end <= start {
        return None;
    }
    serde_json::from_str(&trimmed[start..=end]).ok()
}

fn quote(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

#[async_trait]
impl NodeImpl for StructuredNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let endpoint = self.settings.endpoint(&mut inputs)?;
        let model = self.settings.model(&mut inputs)?;
        let mut messages = match inputs.take_optional("history") {
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
        if !prompt.trim().is_empty() {
            messages.push(Message::new(Role::User, prompt));
        }
        if messages.is_empty() {
            return Err(BlockError::input(
                "prompt",
                "there is nothing to send: the prompt is empty and no history arrived",
            ));
        }
        let schema_text =
            serde_json::to_string_pretty(&self.schema).unwrap_or_else(|_| self.schema.to_string());
        let instruction = format!(
            "Reply with a single JSON value that matches this JSON Schema, and nothing else: no explanation, no code fences.\n\n{schema_text}"
        );
        let mut request = self.settings.request(&model);
        request.system = Some(match &self.settings.system {
            Some(system) => format!("{system}\n\n{instruction}"),
            None => instruction,
        });
        if self.native_schema {
            request.json_schema = Some(self.schema.clone());
        }
        request.messages = messages;
        request.messages.extend(retry_feedback(
            ctx,
            &endpoint,
            "Reply again with only JSON that matches the JSON Schema.",
        ));
        let mut meter = Meter::new(&self.settings, &model)?;
        let mut last_problem = String::new();
        let mut last_text = String::new();
        for attempt in 1..=self.max_attempts {
            let reserved = meter.reserve(ctx, &request)?;
            let reply = complete(&endpoint, &request, self.settings.options, ctx, "object").await?;
            meter.record(ctx, &request, &reply, reserved);
            match self.check(&reply.text) {
                Ok(object) => {
                    return Ok(agentloom_core::outputs([
                        ("object", Value::from_json(object)),
                        ("usage", meter.to_value()),
                    ]));
                }
                Err(problem) => {
                    tracing::info!(
                        node = ctx.node_id(),
                        attempt,
                        "the answer did not match the schema: {problem}"
                    );
                    request
                        .messages
                        .push(Message::new(Role::Assistant, reply.text.clone()));
                    request.messages.push(Message::new(
                        Role::User,
                        format!(
                            "Your reply does not match the JSON Schema: {problem}. Reply again with only the corrected JSON."
                        ),
                    ));
                    last_problem = problem;
                    last_text = reply.text;
                }
            }
        }
        // Transient: another answer may match, so the node's retry policy applies (and
        // tells the model these problems).
        Err(BlockError::transient(format!(
            "the model's answer did not match the schema after {} attempt{}: {last_problem}. Its last answer began: {}",
            self.max_attempts,
            if self.max_attempts == 1 { "" } else { "s" },
            quote(last_text.trim(), 200)
        ))
        .with_data(Value::object(BTreeMap::from([
            ("answer".to_owned(), Value::text(last_text)),
            ("problems".to_owned(), Value::text(last_problem)),
            ("usage".to_owned(), meter.to_value()),
        ]))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_found_in_fences_and_prose() {
        assert_eq!(extract_json(" {\"a\": 1} "), Some(json!({"a": 1})));
        assert_eq!(
            extract_json("```json\n{\"a\": 2}\n```"),
            Some(json!({"a": 2}))
        );
        assert_eq!(
            extract_json("Sure! Here it is: {\"a\": 3}. Anything else?"),
            Some(json!({"a": 3}))
        );
        assert_eq!(extract_json("[1, 2]"), Some(json!([1, 2])));
        assert_eq!(extract_json("no json here"), None);
        assert_eq!(extract_json("} backwards {"), None);
    }

    #[test]
    fn schema_problems_name_the_place() {
        let node = crate::testing::instantiate(
            "llm.structured",
            json!({"model": "m", "prompt": "x", "schema": {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["name"]}}),
        )
        .unwrap();
        assert_eq!(node.ports().outputs[0].name, "object");
        let err = crate::testing::config_error(
            "llm.structured",
            json!({"model": "m", "prompt": "x", "schema": {"type": 12}}),
        )
        .unwrap();
        assert!(
            err.starts_with("config `schema`: is not a valid JSON Schema"),
            "{err}"
        );
        let err =
            crate::testing::config_error("llm.structured", json!({"model": "m", "prompt": "x"}))
                .unwrap();
        assert!(err.starts_with("config `schema`: is required"), "{err}");
    }
}
