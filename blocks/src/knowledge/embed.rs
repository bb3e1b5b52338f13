//! `embed`: texts or chunks into vectors with an embedding service (see [`super::embedding`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, InputsExt as _, NodeImpl,
    PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

use super::embedding::{EmbeddingSettings, embed_texts, fields};
use super::values::{chunks_from, chunks_value};

pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(Embed::new())]
}

struct Embed {
    meta: BlockMeta,
}

impl Embed {
    fn new() -> Self {
        let mut meta = BlockMeta::new(
            "knowledge.embed",
            "Embed",
            "Knowledge",
            "Turns texts or chunks into vectors with an embedding model (OpenAI-compatible /v1/embeddings, Ollama, llama.cpp's server).",
        );
        for field in fields() {
            meta = meta.field(field);
        }
        Self { meta }
    }
}

impl Block for Embed {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(EmbedNode {
            settings: EmbeddingSettings::from_config(config)?,
            ports: Ports::new(
                vec![
                    PortSpec::new("input", ValueType::Any)
                        .describe("A text, a list of texts, or chunks from text.split."),
                ],
                vec![
                    PortSpec::new("chunks", ValueType::list_of(ValueType::Object))
                        .describe("The chunks (or texts as chunks) with their `embedding`."),
                    PortSpec::new("embeddings", ValueType::list_of(ValueType::Any))
                        .describe("The vectors alone, in input order."),
                    PortSpec::new("usage", ValueType::Object)
                        .describe("{model, dimensions, input_tokens, cost_usd, requests}."),
                ],
            ),
        }))
    }
}

struct EmbedNode {
    settings: EmbeddingSettings,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for EmbedNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let mut chunks = chunks_from(&inputs.take_value("input")?, "input")?;
        let texts: Vec<String> = chunks.iter().map(|c| c.text.clone()).collect();
        let embedded = if texts.is_empty() {
            None
        } else {
            Some(embed_texts(ctx, &self.settings, &texts).await?)
        };
        let mut vectors = Vec::with_capacity(chunks.len());
        if let Some(embedded) = &embedded {
            for (chunk, vector) in chunks.iter_mut().zip(&embedded.vectors) {
                chunk.embedding = Some(vector.clone());
                vectors.push(Value::list(
                    vector
                        .iter()
                        .map(|x| Value::Number(f64::from(*x)))
                        .collect(),
                ));
            }
        }
        let usage = embedded.as_ref().map(|e| e.usage).unwrap_or_default();
        let usage = Value::object(BTreeMap::from([
            ("model".to_owned(), Value::text(self.settings.model.clone())),
            (
                "dimensions".to_owned(),
                Value::Integer(embedded.as_ref().map_or(0, |e| e.model.dimensions) as i64),
            ),
            (
                "input_tokens".to_owned(),
                Value::Integer(usage.input_tokens as i64),
            ),
            ("cost_usd".to_owned(), Value::Number(usage.cost_usd)),
            (
                "requests".to_owned(),
                Value::Integer(i64::from(embedded.as_ref().map_or(0, |e| e.requests))),
            ),
        ]));
        Ok(agentloom_core::outputs([
            ("chunks", chunks_value(&chunks)),
            ("embeddings", Value::list(vectors)),
            ("usage", usage),
        ]))
    }
}
