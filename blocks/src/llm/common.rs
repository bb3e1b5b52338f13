//! What the LLM blocks share: their connection and tuning config, the prompt template
//! whose variables become inputs, and the usage meter that reports tokens and cost.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::jinja::SharedTemplate;
use agentloom_core::{
    BlockError, BlockMeta, Config, ConfigError, ConfigField, ConfigReader, InputsExt as _,
    PortSpec, RunCtx, Usage, Value, ValueMap, ValueType,
};

use super::price::{Price, PriceTable};
use super::provider::{CallOptions, Endpoint, PROVIDER_NAMES, wire_format};
use super::types::{ChatRequest, Message, Reply, Role, estimate_tokens};
use super::wire::WireFormat;

const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const DEFAULT_MAX_RETRIES: u64 = 2;
const BACKOFF: Duration = Duration::from_secs(1);
/// The longest previous error told to the model on a retry, in characters.
const MAX_FEEDBACK_CHARS: usize = 1500;

/// Adds the fields every LLM block has before its own: provider, model, base URL,
/// credential and system prompt.
pub(crate) fn connection_fields(meta: BlockMeta) -> BlockMeta {
    meta.field(
        ConfigField::choice("provider", "Provider", &PROVIDER_NAMES)
            .default_value(serde_json::json!("openai"))
            .help("openai: any OpenAI-compatible chat-completions API (OpenAI, Ollama's /v1, LM Studio, vLLM, llama.cpp, Groq…). anthropic: Anthropic Messages. ollama: Ollama's native API."),
    )
    .field(
        ConfigField::text("model", "Model")
            .help("The model name, e.g. gpt-4o-mini, claude-sonnet-4-5 or llama3.2 (for Ollama, the models installed on this machine are offered). Empty: taken from the `model` input."),
    )
    .field(ConfigField::text("base_url", "Base URL").help(
        "The API root. Empty: the provider's default (https://api.openai.com/v1, https://api.anthropic.com, http://127.0.0.1:11434), or the `base_url` input when it is wired.",
    ))
    // "openai" is only the kind of credential the picker lists first (the `provider`
    // chosen in config takes over); the field has no default: nothing is implied.
    .field(ConfigField::credential("credential", "Credential", "openai").help(
        "The stored credential whose API key every call sends. Hosted APIs (OpenAI, Anthropic, Groq…) need one: name a stored credential, e.g. `openai`. Empty: no key is sent at all, which suits Ollama and local servers (llama.cpp, LM Studio, vLLM). Headless runs read AGENTLOOM_SECRET_<NAME>.",
    ))
    .field(
        ConfigField::multiline("system", "System prompt")
            .help("Instructions sent before the conversation as the system message."),
    )
}

/// Adds the tuning fields every LLM block has after its own.
pub(crate) fn tuning_fields(meta: BlockMeta, stream_default: bool) -> BlockMeta {
    meta.field(
        ConfigField::number("temperature", "Temperature", Some(0.0), Some(2.0))
            .help("Randomness of the answer: 0 is the most predictable. Empty: the provider's default."),
    )
    .field(
        ConfigField::integer("max_tokens", "Max output tokens", Some(1), None)
            .help("The longest answer, in tokens. Empty: the provider's default (4096 for Anthropic, which requires one)."),
    )
    .field(
        ConfigField::boolean("stream", "Stream")
            .default_value(serde_json::json!(stream_default))
            .help("Show the answer on the canvas while it is written."),
    )
    .field(
        ConfigField::integer("timeout_ms", "Timeout (ms)", Some(1), None)
            .default_value(serde_json::json!(DEFAULT_TIMEOUT_MS))
            .help("The longest wait for the answer to start, and between two streamed pieces. The node's own timeout bounds the whole call."),
    )
    .field(
        ConfigField::integer("max_retries", "Retries on 429/5xx", Some(0), Some(10))
            .default_value(serde_json::json!(DEFAULT_MAX_RETRIES))
            .help("How often a rate-limited (429) or failed (5xx) call is tried again inside the node, waiting as Retry-After says. After that the node's retry policy applies."),
    )
    .field(
        ConfigField::number("price_in", "Price in (USD / M tokens)", Some(0.0), None)
            .help("Overrides the price table for input tokens, in US dollars per million tokens."),
    )
    .field(
        ConfigField::number("price_out", "Price out (USD / M tokens)", Some(0.0), None)
            .help("Overrides the price table for output tokens, in US dollars per million tokens."),
    )
}

/// The config every LLM block shares, read once.
#[derive(Clone, Debug)]
pub(crate) struct LlmSettings {
    pub provider: &'static dyn WireFormat,
    /// From config; `None` makes a `base_url` input.
    pub base_url: Option<String>,
    pub credential: Option<String>,
    /// From config; `None` makes a `model` input.
    pub model: Option<String>,
    pub system: Option<String>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u64>,
    pub stream: bool,
    pub options: CallOptions,
    pub price_in: Option<f64>,
    pub price_out: Option<f64>,
}

impl LlmSettings {
    pub(crate) fn from_config(config: &Config, stream_default: bool) -> Result<Self, ConfigError> {
        let reader = ConfigReader(config);
        let provider_name = reader.choice_or("provider", &PROVIDER_NAMES, "openai")?;
        let provider = wire_format(provider_name).ok_or_else(|| {
            ConfigError::new("provider", format!("`{provider_name}` is not a provider"))
        })?;
        let model = reader
            .str("model")?
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned);
        let base_url = reader
            .str("base_url")?
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned);
        let credential = reader
            .str("credential")?
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        // Checked now so that a bad URL is a load-time error.
        if let Some(url) = &base_url {
            Endpoint::new(provider, url, credential.as_deref())
                .map_err(|e| ConfigError::new("base_url", e))?;
        }
        let temperature = reader.f64("temperature")?;
        if let Some(t) = temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ConfigError::new("temperature", "must be between 0 and 2"));
        }
        let max_tokens = reader.u64("max_tokens")?;
        if max_tokens == Some(0) {
            return Err(ConfigError::new("max_tokens", "must be at least 1"));
        }
        let timeout_ms = reader.u64_or("timeout_ms", DEFAULT_TIMEOUT_MS)?;
        if timeout_ms == 0 {
            return Err(ConfigError::new("timeout_ms", "must be at least 1"));
        }
        let max_retries = reader.u64_or("max_retries", DEFAULT_MAX_RETRIES)?;
        if max_retries > 10 {
            return Err(ConfigError::new("max_retries", "must be at most 10"));
        }
        let price = |field: &str| -> Result<Option<f64>, ConfigError> {
            match reader.f64(field)? {
                Some(p) if !p.is_finite() || p < 0.0 => {
                    Err(ConfigError::new(field, "must be zero or more"))
                }
                other => Ok(other),
            }
        };
        Ok(LlmSettings {
            provider,
            base_url,
            credential,
            model,
            system: reader
                .str("system")?
                .filter(|s| !s.trim().is_empty())
                .map(str::to_owned),
            temperature,
            max_tokens,
            stream: reader.bool_or("stream", stream_default)?,
            options: CallOptions {
                timeout: Duration::from_millis(timeout_ms),
                max_retries: u32::try_from(max_retries).unwrap_or(10),
                backoff: BACKOFF,
            },
            price_in: price("price_in")?,
            price_out: price("price_out")?,
        })
    }

    /// The `model` and `base_url` inputs, present when config leaves them empty.
    pub(crate) fn ports(&self) -> Vec<PortSpec> {
        let mut ports = Vec::new();
        if self.model.is_none() {
            ports.push(
                PortSpec::new("model", ValueType::Text)
                    .describe("The model name, when config leaves it empty."),
            );
        }
        if self.base_url.is_none() {
            ports.push(
                PortSpec::new("base_url", ValueType::Text)
                    .optional()
                    .describe("The API root, when config leaves it empty; unwired: the provider's default."),
            );
        }
        ports
    }

    /// The configured model, else the `model` input.
    pub(crate) fn model(&self, inputs: &mut ValueMap) -> Result<String, BlockError> {
        if let Some(model) = &self.model {
            return Ok(model.clone());
        }
        let model = inputs.take_text("model")?.trim().to_owned();
        if model.is_empty() {
            return Err(BlockError::input(
                "model",
                "is empty: name the model, e.g. gpt-4o-mini, claude-sonnet-4-5 or llama3.2",
            ));
        }
        Ok(model)
    }

    /// Where to call: the configured URL, else the `base_url` input, else the default.
    pub(crate) fn endpoint(&self, inputs: &mut ValueMap) -> Result<Endpoint, BlockError> {
        let from_input = if self.base_url.is_none() {
            inputs.take_optional("base_url").map(|v| v.to_text())
        } else {
            None
        };
        let url = self.base_url.clone().or(from_input).unwrap_or_default();
        Endpoint::new(self.provider, &url, self.credential.as_deref()).map_err(|e| {
            if self.base_url.is_some() {
                BlockError::permanent(format!("config `base_url`: {e}"))
            } else {
                BlockError::input("base_url", e)
            }
        })
    }

    /// A request with this block's tuning.
    pub(crate) fn request(&self, model: &str) -> ChatRequest {
        ChatRequest {
            model: model.to_owned(),
            system: self.system.clone(),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            stream: self.stream,
            ..ChatRequest::default()
        }
    }
}

/// The inputs of a prompting block: the prompt template's variables (or a `prompt` input when
/// config leaves the prompt empty), an optional `history`, then the connection settings.
pub(crate) fn prompt_inputs(
    prompt: Option<&PromptTemplate>,
    prompt_help: &str,
    history_help: &str,
    settings: &LlmSettings,
) -> Vec<PortSpec> {
    let mut inputs: Vec<PortSpec> = match prompt {
        Some(template) => template.ports().collect(),
        None => vec![
            PortSpec::new("prompt", ValueType::Text)
                .optional()
                .describe(prompt_help),
        ],
    };
    inputs.push(
        PortSpec::new("history", ValueType::Messages)
            .optional()
            .describe(history_help),
    );
    inputs.extend(settings.ports());
    inputs
}

/// A prompt template: its variables become required inputs.
pub(crate) struct PromptTemplate {
    template: SharedTemplate,
}

impl PromptTemplate {
    /// Reads template field `field`; `None` when it is empty. Variables may not use
    /// `reserved` names (those are the block's own inputs).
    pub(crate) fn from_config(
        config: &Config,
        field: &str,
        reserved: &[&str],
    ) -> Result<Option<Self>, ConfigError> {
        let Some(source) = ConfigReader(config)
            .str(field)?
            .filter(|s| !s.trim().is_empty())
        else {
            return Ok(None);
        };
        let template = SharedTemplate::parse(source).map_err(|why| ConfigError::new(field, why))?;
        let variables = template.variables();
        if let Some(clash) = variables.iter().find(|v| reserved.contains(&v.as_str())) {
            return Err(ConfigError::new(
                field,
                format!(
                    "the variable `{clash}` has the name of one of the block's own inputs ({}); rename it",
                    reserved.join(", ")
                ),
            ));
        }
        Ok(Some(PromptTemplate { template }))
    }

    /// One required input per variable.
    pub(crate) fn ports(&self) -> impl Iterator<Item = PortSpec> + '_ {
        self.template.variables().iter().map(|name| {
            PortSpec::new(name.clone(), ValueType::Any).describe("A value the prompt uses.")
        })
    }

    /// Renders with the variables taken out of `inputs`.
    pub(crate) async fn render(
        &self,
        inputs: &mut ValueMap,
        ctx: &dyn RunCtx,
    ) -> Result<String, BlockError> {
        let values: BTreeMap<String, Value> = self
            .template
            .variables()
            .iter()
            .filter_map(|name| inputs.remove(name).map(|v| (name.clone(), v)))
            .collect();
        self.template
            .render(values, ctx, "the prompt did not render")
            .await
    }
}

/// Counts a node's calls, reports each one's usage to the run, and sums them for the
/// `usage` output.
pub(crate) struct Meter {
    model: String,
    price: Option<Price>,
    calls: u64,
    input_tokens: u64,
    output_tokens: u64,
    cost_usd: f64,
    estimated: bool,
}

impl Meter {
    /// Finds the model's price: block config, else the price table (built-in and the
    /// user's file); Ollama models not in the table are free (they run locally).
    pub(crate) fn new(settings: &LlmSettings, model: &str) -> Result<Meter, BlockError> {
        let listed = match (settings.price_in, settings.price_out) {
            (Some(_), Some(_)) => None,
            _ => PriceTable::load()
                .map_err(|e| BlockError::permanent(e.to_string()))?
                .lookup(model),
        };
        let price = match (settings.price_in, settings.price_out, listed) {
            (Some(input), Some(output), _) => Some(Price { input, output }),
            (input, output, Some(listed)) => Some(Price {
                input: input.unwrap_or(listed.input),
                output: output.unwrap_or(listed.output),
            }),
            (None, None, None) if settings.provider.runs_locally() => Some(Price {
                input: 0.0,
                output: 0.0,
            }),
            (None, None, None) => {
                tracing::warn!(
                    model,
                    "no price known for this model; its cost counts as 0 (set price_in/price_out or add it to the price table)"
                );
                None
            }
            (input, output, None) => Some(Price {
                input: input.unwrap_or(0.0),
                output: output.unwrap_or(0.0),
            }),
        };
        Ok(Meter {
            model: model.to_owned(),
            price,
            calls: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            estimated: false,
        })
    }

    /// Before a call: sets its highest likely cost aside from the run's budget (the prompt
    /// and `max_tokens` of output, or [`RESERVED_OUTPUT_TOKENS`]), so calls in flight cannot
    /// overshoot `max_cost_usd` together. Returns what was reserved, for [`Meter::record`].
    pub(crate) fn reserve(
        &self,
        ctx: &dyn RunCtx,
        request: &ChatRequest,
    ) -> Result<f64, BlockError> {
        let Some(price) = self.price else {
            return Ok(0.0);
        };
        let estimate = price.cost(
            request.estimated_input_tokens(),
            request.max_tokens.unwrap_or(RESERVED_OUTPUT_TOKENS),
        );
        ctx.reserve_cost(estimate)?;
        Ok(estimate)
    }

    /// Reports one call's usage to the run (where the cost limit is checked), settling what
    /// [`Meter::reserve`] set aside. When the provider gave no counts, they are estimated
    /// from the text.
    pub(crate) fn record(
        &mut self,
        ctx: &dyn RunCtx,
        request: &ChatRequest,
        reply: &Reply,
        reserved_usd: f64,
    ) {
        let counts = reply.usage.unwrap_or_else(|| super::types::TokenCounts {
            input: request.estimated_input_tokens(),
            output: estimate_tokens(
                reply.text.len()
                    + reply
                        .tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments_text().len())
                        .sum::<usize>(),
            ),
            estimated: true,
        });
        let cost = self
            .price
            .map_or(0.0, |p| p.cost(counts.input, counts.output));
        self.calls += 1;
        self.input_tokens += counts.input;
        self.output_tokens += counts.output;
        self.cost_usd += cost;
        self.estimated |= counts.estimated;
        ctx.settle_cost(
            reserved_usd,
            Usage {
                input_tokens: counts.input,
                output_tokens: counts.output,
                cost_usd: cost,
            },
        );
    }

    /// Input tokens, output tokens and cost recorded so far.
    pub(crate) fn totals(&self) -> (u64, u64, f64) {
        (self.input_tokens, self.output_tokens, self.cost_usd)
    }

    /// `{model, calls, input_tokens, output_tokens, cost_usd, priced, estimated}`.
    pub(crate) fn to_value(&self) -> Value {
        let int = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
        Value::object(BTreeMap::from([
            ("model".to_owned(), Value::text(self.model.clone())),
            ("calls".to_owned(), int(self.calls)),
            ("input_tokens".to_owned(), int(self.input_tokens)),
            ("output_tokens".to_owned(), int(self.output_tokens)),
            ("cost_usd".to_owned(), Value::Number(self.cost_usd)),
            ("priced".to_owned(), Value::Bool(self.price.is_some())),
            ("estimated".to_owned(), Value::Bool(self.estimated)),
        ]))
    }
}

/// The output a call is assumed to produce, for its cost reservation, when the block sets
/// no `max_tokens`.
pub(crate) const RESERVED_OUTPUT_TOKENS: u64 = 1024;

/// On a retry of the node by the graph's retry policy: the previous attempt's error as a
/// user message, "The previous attempt failed: …", followed by `answer_again`, so that the
/// model can correct what went wrong. Failures in reaching the model or reading its reply
/// (they name `endpoint`: HTTP statuses, refused connections, streams cut off) say nothing
/// the model could fix and are not sent. `None` on a first attempt.
pub(crate) fn retry_feedback(
    ctx: &dyn RunCtx,
    endpoint: &Endpoint,
    answer_again: &str,
) -> Option<Message> {
    if ctx.attempt() <= 1 {
        return None;
    }
    let error = ctx.previous_error()?.trim();
    if error.is_empty() || error.contains(&endpoint.shown()) {
        return None;
    }
    let mut told: String = error.chars().take(MAX_FEEDBACK_CHARS).collect();
    if told.len() < error.len() {
        told.push('…');
    }
    let told = told.trim_end_matches(['.', ' ']);
    Some(Message::new(
        Role::User,
        format!("The previous attempt failed: {told}. {answer_again}"),
    ))
}
