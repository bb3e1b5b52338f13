//! `knowledge.search`: the best chunks of a collection for a question — by vector, by
//! keywords (FTS5 BM25), or both fused by reciprocal rank — with scores and sources, and a
//! `context` text quoting them for a prompt.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

use super::common::{collection_field, store_and_collection, store_field, store_path, with_store};
use super::embedding::{EmbeddingSettings, embed_texts, fields};
use super::store::{Filter, Hit, MAX_K, Query, SearchMode, StoreError, quoted_context};

const MODES: [&str; 3] = ["hybrid", "vector", "keyword"];
const DEFAULT_K: u64 = 5;

pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(KnowledgeSearch::new())]
}

struct KnowledgeSearch {
    meta: BlockMeta,
}

impl KnowledgeSearch {
    fn new() -> Self {
        let mut meta = BlockMeta::new(
            "knowledge.search",
            "Search knowledge",
            "Knowledge",
            "Finds the chunks of a collection that best answer a query, with scores and sources.",
        )
        .field(store_field())
        .field(collection_field())
        .field(
            ConfigField::integer("k", "Results", Some(1), Some(MAX_K as i64))
                .default_value(serde_json::json!(DEFAULT_K))
                .help("How many passages to return, best first."),
        )
        .field(
            ConfigField::choice("mode", "Ranking", &MODES)
                .default_value(serde_json::json!("hybrid"))
                .help("hybrid: vectors and keywords fused by reciprocal rank (finds exact identifiers too); vector: meaning only; keyword: BM25 only (no embedding call)."),
        )
        .field(ConfigField::json("filter", "Metadata filter").help(
            "An object of field → value that every hit's metadata must equal, e.g. {\"format\": \"pdf\"}; `source` matches the document's source.",
        ));
        for field in fields() {
            meta = meta.field(field);
        }
        Self { meta }
    }
}

impl Block for KnowledgeSearch {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let (store, collection) = store_and_collection(config)?;
        let read = ConfigReader(config);
        let k = read.u64_or("k", DEFAULT_K)?;
        if !(1..=MAX_K as u64).contains(&k) {
            return Err(ConfigError::new("k", format!("give 1 to {MAX_K}")));
        }
        let mode = match read.choice_or("mode", &MODES, "hybrid")? {
            "vector" => SearchMode::Vector,
            "keyword" => SearchMode::Keyword,
            _ => SearchMode::Hybrid,
        };
        let filter = Filter::from_json(read.get("filter").unwrap_or(&serde_json::Value::Null))
            .map_err(|e| ConfigError::new("filter", e.to_string()))?;
        Ok(Arc::new(KnowledgeSearchNode {
            store,
            collection,
            k: usize::try_from(k).unwrap_or(MAX_K),
            mode,
            filter,
            settings: EmbeddingSettings::from_config(config)?,
            ports: Ports::new(
                vec![PortSpec::new("query", ValueType::Text).describe("The question or words to look for.")],
                vec![
                    PortSpec::new("hits", ValueType::list_of(ValueType::Object)).describe(
                        "Best first: {text, source, start, end, metadata, score, similarity, vector_rank, keyword_rank}.",
                    ),
                    PortSpec::new("context", ValueType::Text)
                        .describe("The hits quoted with their sources, numbered, for a prompt."),
                ],
            ),
        }))
    }
}

struct KnowledgeSearchNode {
    store: String,
    collection: String,
    k: usize,
    mode: SearchMode,
    filter: Filter,
    settings: EmbeddingSettings,
    ports: Ports,
}

fn hit_value(hit: &Hit) -> Value {
    let optional_rank =
        |rank: Option<usize>| rank.map_or(Value::Null, |r| Value::Integer(r as i64));
    Value::object(BTreeMap::from([
        ("text".to_owned(), Value::text(hit.text.clone())),
        ("source".to_owned(), Value::text(hit.source.clone())),
        ("start".to_owned(), Value::Integer(hit.start as i64)),
        ("end".to_owned(), Value::Integer(hit.end as i64)),
        (
            "metadata".to_owned(),
            Value::from_json(hit.metadata.clone()),
        ),
        ("score".to_owned(), Value::Number(hit.score)),
        (
            "similarity".to_owned(),
            hit.similarity.map_or(Value::Null, Value::Number),
        ),
        ("vector_rank".to_owned(), optional_rank(hit.vector_rank)),
        ("keyword_rank".to_owned(), optional_rank(hit.keyword_rank)),
    ]))
}

#[async_trait]
impl NodeImpl for KnowledgeSearchNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let query = inputs.take_text("query")?;
        if query.trim().is_empty() {
            return Err(BlockError::input("query", "the query is empty"));
        }
        let path = store_path(ctx, &self.store)?;
        // The collection's model is checked before the query is embedded.
        let collection = self.collection.clone();
        let model_name = self.settings.model.clone();
        with_store(ctx, path.clone(), move |store| {
            let existing = store
                .collection(&collection)?
                .ok_or_else(|| StoreError::NoSuchCollection(collection.clone()))?;
            if existing.model.name != model_name {
                return Err(StoreError::ModelMismatch {
                    collection,
                    recorded_model: existing.model.name,
                    recorded_dimensions: existing.model.dimensions,
                    asked_model: model_name,
                    asked_dimensions: existing.model.dimensions,
                });
            }
            Ok(())
        })
        .await?;
        let vector = if self.mode == SearchMode::Keyword {
            None
        } else {
            let embedded = embed_texts(ctx, &self.settings, std::slice::from_ref(&query)).await?;
            let model = embedded.model;
            embedded.vectors.into_iter().next().map(|v| (model, v))
        };
        let search = Query {
            text: Some(query),
            vector,
            k: self.k,
            filter: self.filter.clone(),
            mode: self.mode,
        };
        let collection = self.collection.clone();
        let hits = with_store(ctx, path, move |store| store.search(&collection, &search)).await?;
        Ok(agentloom_core::outputs([
            ("context", Value::text(quoted_context(&hits))),
            ("hits", Value::list(hits.iter().map(hit_value).collect())),
        ]))
    }
}
