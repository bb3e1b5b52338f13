//! Turning texts into vectors with an embedding service: the OpenAI-compatible
//! `/v1/embeddings` (OpenAI, llama.cpp's server, vLLM, LM Studio…) or Ollama's `/api/embed`.
//!
//! Requests go through the one shared client (`net::execute`, under the run's per-host
//! request slots and credential checks); texts are sent in batches; a 429, 408 or 5xx is
//! tried again up to `max_retries` times, waiting as `Retry-After` says or 1 s, 2 s, 4 s…
//! A key is sent only when the config names a credential, only to the hosts it is bound to
//! (`net::credential_for`), and never appears in an error. Each request is bounded in time
//! (`timeout_ms`) and its answer in size; usage and cost are reported like the LLM blocks'.

use std::time::Duration;

use agentloom_core::{
    BlockError, Config, ConfigError, ConfigField, ConfigReader, RunCtx, Secret, Usage, error_chain,
};
use reqwest::header::{AUTHORIZATION, HeaderValue};

use crate::llm::price::PriceTable;
use crate::net;

use super::store::EmbeddingModel;

/// The wire formats an embedding service may speak.
pub const EMBEDDING_PROVIDERS: [&str; 2] = ["openai", "ollama"];
const DEFAULT_BATCH: u64 = 64;
const MAX_BATCH: u64 = 2048;
const DEFAULT_TIMEOUT_MS: u64 = 60_000;
const DEFAULT_RETRIES: u64 = 3;
const BACKOFF: Duration = Duration::from_secs(1);
/// Waits longer than this are left to the node's retry policy.
const MAX_INTERNAL_WAIT: Duration = Duration::from_secs(60);
/// The largest answer read for one batch: 2048 vectors of 8192 numbers as JSON text fit.
const MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;
/// Texts longer than this are refused before sending (a model reads far less anyway).
pub const MAX_TEXT_BYTES: usize = 1024 * 1024;
/// Characters per token when the service reports no usage.
const CHARS_PER_TOKEN: usize = 4;

/// The config fields of a block that embeds texts.
pub(crate) fn fields() -> Vec<ConfigField> {
    vec![
        ConfigField::choice("provider", "Provider", &EMBEDDING_PROVIDERS)
            .default_value(serde_json::json!("openai"))
            .help("openai: any server speaking OpenAI's /v1/embeddings (OpenAI, llama.cpp's server, vLLM, LM Studio); ollama: Ollama's /api/embed."),
        ConfigField::text("model", "Embedding model")
            .required()
            .help("The embedding model's name, e.g. `text-embedding-3-small` or `nomic-embed-text`. A collection records it: searching it needs the same model."),
        ConfigField::text("base_url", "Base URL").help(
            "Empty for the provider's default (https://api.openai.com/v1, http://127.0.0.1:11434). For a local server: e.g. http://127.0.0.1:8080/v1.",
        ),
        ConfigField::credential("credential", "Credential", "openai").help(
            "The stored credential whose key is sent; empty sends no key (a local server needs none).",
        ),
        ConfigField::integer("batch_size", "Texts per request", Some(1), Some(MAX_BATCH as i64))
            .default_value(serde_json::json!(DEFAULT_BATCH))
            .help("How many texts go in one request to the embedding server."),
        ConfigField::integer("timeout_ms", "Timeout per request (ms)", Some(1), None)
            .default_value(serde_json::json!(DEFAULT_TIMEOUT_MS))
            .help("How long one request may take before it fails, in milliseconds."),
        ConfigField::integer("max_retries", "Retries on 429/5xx", Some(0), Some(10))
            .default_value(serde_json::json!(DEFAULT_RETRIES))
            .help("How many times a request refused for load (429) or a server error (5xx) is sent again, waiting as the server asks."),
        ConfigField::number("price_in", "Price (USD / M tokens)", Some(0.0), None).help(
            "What the model costs per million input tokens; empty: the price table's, or 0 for a local server.",
        ),
    ]
}

/// Where and how to embed, read from a block's config.
#[derive(Clone, Debug, PartialEq)]
pub struct EmbeddingSettings {
    /// `openai` or `ollama`.
    pub provider: String,
    pub model: String,
    /// No trailing slash.
    pub base_url: String,
    pub credential: Option<String>,
    pub batch_size: usize,
    pub timeout: Duration,
    pub max_retries: u32,
    pub price_in: Option<f64>,
}

impl EmbeddingSettings {
    /// Reads the fields of [`fields`] from `config`.
    pub fn from_config(config: &Config) -> Result<EmbeddingSettings, ConfigError> {
        let read = ConfigReader(config);
        let provider = read.choice_or("provider", &EMBEDDING_PROVIDERS, "openai")?;
        let model = read.required_str("model")?.trim().to_owned();
        if model.is_empty() {
            return Err(ConfigError::new("model", "name the embedding model"));
        }
        let base_url = read.str("base_url")?.unwrap_or_default().trim();
        let base_url = if base_url.is_empty() {
            if provider == "ollama" {
                "http://127.0.0.1:11434"
            } else {
                "https://api.openai.com/v1"
            }
        } else {
            base_url
        }
        .trim_end_matches('/')
        .to_owned();
        let parsed = reqwest::Url::parse(&base_url)
            .map_err(|e| ConfigError::new("base_url", format!("not a valid URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ConfigError::new(
                "base_url",
                "use an http:// or https:// URL",
            ));
        }
        let batch_size = read.u64_or("batch_size", DEFAULT_BATCH)?;
        if !(1..=MAX_BATCH).contains(&batch_size) {
            return Err(ConfigError::new(
                "batch_size",
                format!("give 1 to {MAX_BATCH}"),
            ));
        }
        let timeout_ms = read.u64_or("timeout_ms", DEFAULT_TIMEOUT_MS)?.max(1);
        let max_retries = read.u64_or("max_retries", DEFAULT_RETRIES)?.min(10);
        Ok(EmbeddingSettings {
            provider: provider.to_owned(),
            model,
            base_url,
            credential: read
                .str("credential")?
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            batch_size: usize::try_from(batch_size).unwrap_or(1),
            timeout: Duration::from_millis(timeout_ms),
            max_retries: u32::try_from(max_retries).unwrap_or(10),
            price_in: read.f64("price_in")?,
        })
    }

    fn url(&self) -> String {
        if self.provider == "ollama" {
            format!("{}/api/embed", self.base_url)
        } else {
            format!("{}/embeddings", self.base_url)
        }
    }

    /// How messages name the service.
    fn shown(&self) -> String {
        let kind = if self.provider == "ollama" {
            "the Ollama server"
        } else {
            "the embedding server"
        };
        format!(
            "{kind} at {}",
            crate::llm::provider::shown_url(&self.base_url)
        )
    }

    fn price_per_million(&self) -> f64 {
        if let Some(price) = self.price_in {
            return price;
        }
        PriceTable::load()
            .ok()
            .and_then(|table| table.lookup(&self.model))
            .map_or(0.0, |price| price.input)
    }
}

/// Vectors for a list of texts, in order, and what they cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub model: EmbeddingModel,
    pub usage: Usage,
    /// Requests sent, retries included.
    pub requests: u32,
}

/// Embeds `texts` in batches; fails naming the service when any batch fails, reporting
/// the usage of the batches that were answered.
pub async fn embed_texts(
    ctx: &dyn RunCtx,
    settings: &EmbeddingSettings,
    texts: &[String],
) -> Result<Embedded, BlockError> {
    if let Some((i, text)) = texts
        .iter()
        .enumerate()
        .find(|(_, t)| t.len() > MAX_TEXT_BYTES)
    {
        return Err(BlockError::permanent(format!(
            "text {i} is {} bytes: at most {MAX_TEXT_BYTES} bytes are embedded at once; split it first (text.split)",
            text.len()
        )));
    }
    let url = reqwest::Url::parse(&settings.url()).map_err(|e| {
        BlockError::permanent(format!("`{}` is not a valid URL: {e}", settings.shown()))
    })?;
    let key = match &settings.credential {
        Some(name) => {
            let key = net::credential_for(ctx, name, &url)?;
            if key.expose().is_empty() {
                return Err(BlockError::permanent(format!(
                    "credential `{name}` is empty: {} needs an API key; set it in Credentials",
                    settings.shown()
                )));
            }
            Some(key)
        }
        None => None,
    };
    let price = settings.price_per_million();
    let mut vectors = Vec::with_capacity(texts.len());
    let mut usage = Usage::default();
    let mut requests = 0;
    for batch in texts.chunks(settings.batch_size) {
        let estimate = price * estimate_tokens(batch) as f64 / 1e6;
        ctx.reserve_cost(estimate)?;
        let answered = embed_batch(ctx, settings, &url, key.as_ref(), batch, &mut requests).await;
        let (batch_vectors, tokens) = match answered {
            Ok(answer) => answer,
            Err(error) => {
                ctx.settle_cost(estimate, Usage::default());
                return Err(error);
            }
        };
        let batch_usage = Usage {
            input_tokens: tokens,
            output_tokens: 0,
            cost_usd: price * tokens as f64 / 1e6,
        };
        ctx.settle_cost(estimate, batch_usage);
        usage += batch_usage;
        vectors.extend(batch_vectors);
    }
    let dimensions = vectors.first().map_or(0, Vec::len);
    if let Some((i, v)) = vectors
        .iter()
        .enumerate()
        .find(|(_, v)| v.len() != dimensions)
    {
        return Err(BlockError::permanent(format!(
            "{} gave vectors of different lengths ({dimensions} and {} for text {i}) for model `{}`",
            settings.shown(),
            v.len(),
            settings.model
        )));
    }
    Ok(Embedded {
        vectors,
        model: EmbeddingModel {
            name: settings.model.clone(),
            dimensions,
        },
        usage,
        requests,
    })
}

fn estimate_tokens(texts: &[String]) -> u64 {
    texts
        .iter()
        .map(|t| (t.chars().count() / CHARS_PER_TOKEN + 1) as u64)
        .sum()
}

/// One batch, with retries on 429/408/5xx: its vectors and tokens.
async fn embed_batch(
    ctx: &dyn RunCtx,
    settings: &EmbeddingSettings,
    url: &reqwest::Url,
    key: Option<&Secret>,
    batch: &[String],
    requests: &mut u32,
) -> Result<(Vec<Vec<f32>>, u64), BlockError> {
    let cancel = ctx.cancel_token();
    let mut retries = 0;
    loop {
        *requests += 1;
        let attempt = tokio::select! {
            () = cancel.cancelled() => return Err(BlockError::cancelled()),
            result = send_once(ctx, settings, url, key, batch) => result,
        };
        match attempt {
            Ok(answer) => return Ok(answer),
            Err((error, true)) if retries < settings.max_retries => {
                let wait = net::retry_wait(error.retry_after, BACKOFF, retries);
                if wait > MAX_INTERNAL_WAIT {
                    return Err(error);
                }
                retries += 1;
                tracing::info!(
                    node = ctx.node_id(),
                    retry = retries,
                    wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    "{}; trying again",
                    error.message
                );
                tokio::select! {
                    () = cancel.cancelled() => return Err(BlockError::cancelled()),
                    () = tokio::time::sleep(wait) => {}
                }
            }
            Err((error, _)) => return Err(error),
        }
    }
}

/// One request: the vectors and token count, or the error and whether to retry it here.
async fn send_once(
    ctx: &dyn RunCtx,
    settings: &EmbeddingSettings,
    url: &reqwest::Url,
    key: Option<&Secret>,
    batch: &[String],
) -> Result<(Vec<Vec<f32>>, u64), (BlockError, bool)> {
    let shown = settings.shown();
    let fatal = |e: BlockError| (e, false);
    let body = serde_json::json!({ "model": settings.model, "input": batch });
    let mut request = net::client().map_err(fatal)?.post(url.clone()).json(&body);
    if let Some(key) = key {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
            fatal(BlockError::permanent(format!(
                "the API key in credential `{}` has characters not allowed in an HTTP header; store it again without line breaks",
                settings.credential.as_deref().unwrap_or_default()
            )))
        })?;
        value.set_sensitive(true);
        request = request.header(AUTHORIZATION, value);
    }
    let failed = |e: reqwest::Error| {
        let connect = e.is_connect();
        let cause = error_chain(&e.without_url());
        if connect {
            BlockError::transient(format!("could not connect to {shown}: {cause}"))
        } else {
            BlockError::transient(format!("the request to {shown} failed: {cause}"))
        }
    };
    let timed_out = || {
        (
            BlockError::transient(format!(
                "no answer from {shown} within {} ms; raise timeout_ms if the model is slow",
                settings.timeout.as_millis()
            )),
            false,
        )
    };
    let work = async {
        let sent = net::send(ctx, request, failed).await.map_err(fatal)?;
        let response = sent.response;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = read_capped(response, &shown).await.map_err(fatal)?;
        let text = String::from_utf8_lossy(&bytes);
        let text = match key {
            Some(key) => text.replace(key.expose(), "[redacted]"),
            None => text.into_owned(),
        };
        if !status.is_success() {
            return Err(status_error(settings, status, &headers, &text));
        }
        let (vectors, tokens) = parse_answer(settings, &text, batch.len()).map_err(fatal)?;
        Ok((vectors, tokens.unwrap_or_else(|| estimate_tokens(batch))))
    };
    tokio::time::timeout(settings.timeout, work)
        .await
        .map_err(|_| timed_out())?
}

async fn read_capped(response: reqwest::Response, shown: &str) -> Result<Vec<u8>, BlockError> {
    use futures::StreamExt as _;
    let mut stream = response.bytes_stream();
    let mut bytes = Vec::new();
    while let Some(piece) = stream.next().await {
        let piece = piece.map_err(|e| {
            BlockError::transient(format!(
                "the answer from {shown} was cut off: {}",
                error_chain(&e.without_url())
            ))
        })?;
        if bytes.len() + piece.len() > MAX_ANSWER_BYTES {
            return Err(BlockError::permanent(format!(
                "{shown} answered with more than {} MiB; lower batch_size",
                MAX_ANSWER_BYTES / (1024 * 1024)
            )));
        }
        bytes.extend_from_slice(&piece);
    }
    Ok(bytes)
}

fn quote(text: &str) -> String {
    let said = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|json| {
            let error = json.get("error").cloned().unwrap_or(json);
            error
                .get("message")
                .and_then(|m| m.as_str().map(str::to_owned))
                .or_else(|| error.as_str().map(str::to_owned))
        })
        .unwrap_or_else(|| text.trim().to_owned());
    let mut cut: String = said.chars().take(400).collect();
    if cut.len() < said.len() {
        cut.push('…');
    }
    cut
}

fn status_error(
    settings: &EmbeddingSettings,
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
    body: &str,
) -> (BlockError, bool) {
    let shown = settings.shown();
    let code = status.as_u16();
    let said = quote(body);
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    };
    match code {
        401 | 403 => {
            let how = match &settings.credential {
                Some(name) => format!(
                    "the key comes from credential `{name}`: check or replace it in Credentials"
                ),
                None => "this block sends no key: set its `credential` to a stored credential holding one".to_owned(),
            };
            (
                BlockError::permanent(format!("{shown} refused the request (HTTP {code}); {how}")),
                false,
            )
        }
        404 => (
            BlockError::permanent(format!(
                "{shown} has no embedding model `{}` or no such route (HTTP 404{said}); check `model` and `base_url` (OpenAI-compatible servers: the URL ends in /v1)",
                settings.model
            )),
            false,
        ),
        408 | 429 | 500..=599 => {
            let mut error =
                BlockError::transient(format!("{shown} could not embed now (HTTP {code}{said})"));
            if let Some(wait) = net::retry_after(headers) {
                error = error.with_retry_after(wait);
            }
            (error, true)
        }
        _ => (
            BlockError::permanent(format!("{shown} rejected the request (HTTP {code}{said})")),
            false,
        ),
    }
}

/// The vectors (in input order) and token count of an answer.
fn parse_answer(
    settings: &EmbeddingSettings,
    text: &str,
    expected: usize,
) -> Result<(Vec<Vec<f32>>, Option<u64>), BlockError> {
    let shown = settings.shown();
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        BlockError::permanent(format!(
            "{shown} answered with something that is not JSON ({e}); check base_url and provider"
        ))
    })?;
    let shape = |what: &str| {
        BlockError::permanent(format!(
            "{shown} answered in an unexpected shape: {what}; check that `provider` matches the server"
        ))
    };
    let to_vector = |value: &serde_json::Value| -> Option<Vec<f32>> {
        value
            .as_array()?
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32))
            .collect()
    };
    let (vectors, tokens) = if settings.provider == "ollama" {
        let list = json
            .get("embeddings")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| shape("no `embeddings` list"))?;
        let vectors = list
            .iter()
            .map(to_vector)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| shape("an embedding that is not a list of numbers"))?;
        let tokens = json
            .get("prompt_eval_count")
            .and_then(serde_json::Value::as_u64);
        (vectors, tokens)
    } else {
        let data = json
            .get("data")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| shape("no `data` list"))?;
        let mut indexed = Vec::with_capacity(data.len());
        for (position, item) in data.iter().enumerate() {
            let index = item
                .get("index")
                .and_then(serde_json::Value::as_u64)
                .map_or(position, |i| usize::try_from(i).unwrap_or(usize::MAX));
            let vector = item
                .get("embedding")
                .and_then(to_vector)
                .ok_or_else(|| shape("an `embedding` that is not a list of numbers"))?;
            indexed.push((index, vector));
        }
        indexed.sort_by_key(|(index, _)| *index);
        if indexed
            .iter()
            .enumerate()
            .any(|(i, (index, _))| i != *index)
        {
            return Err(shape(
                "the `index` fields do not number the inputs 0, 1, 2…",
            ));
        }
        let tokens = json
            .get("usage")
            .and_then(|u| u.get("prompt_tokens").or_else(|| u.get("total_tokens")))
            .and_then(serde_json::Value::as_u64);
        (indexed.into_iter().map(|(_, v)| v).collect(), tokens)
    };
    if vectors.len() != expected {
        return Err(shape(&format!(
            "{} vectors for {expected} texts",
            vectors.len()
        )));
    }
    if vectors
        .iter()
        .any(|v| v.is_empty() || v.iter().any(|x| !x.is_finite()))
    {
        return Err(shape(
            "an empty vector or one holding a value that is not a finite number",
        ));
    }
    Ok((vectors, tokens))
}
