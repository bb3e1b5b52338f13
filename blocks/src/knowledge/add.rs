//! `knowledge.add`: chunks into a collection. Chunks are grouped into documents by source;
//! a source stored with the same content is skipped before anything is embedded, a changed
//! one replaces its chunks. Chunks without an `embedding` are embedded here with the
//! collection's model.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, InputsExt as _, NodeImpl,
    PortSpec, Ports, RunCtx, Usage, Value, ValueMap, ValueType, async_trait,
};

use super::common::{collection_field, store_and_collection, store_field, store_path, with_store};
use super::embedding::{EmbeddingSettings, embed_texts, fields};
use super::store::{AddOutcome, EmbeddingModel, NewChunk, NewDocument, StoreError, content_hash};
use super::values::{Chunk, chunks_from};

pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(KnowledgeAdd::new())]
}

struct KnowledgeAdd {
    meta: BlockMeta,
}

impl KnowledgeAdd {
    fn new() -> Self {
        let mut meta = BlockMeta::new(
            "knowledge.add",
            "Add to knowledge",
            "Knowledge",
            "Stores chunks (from text.split or embed) in a named collection of a SQLite file: unchanged documents are skipped, changed ones replaced.",
        )
        .with_side_effects()
        .field(store_field())
        .field(collection_field());
        for field in fields() {
            meta = meta.field(field);
        }
        Self { meta }
    }
}

impl Block for KnowledgeAdd {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let (store, collection) = store_and_collection(config)?;
        Ok(Arc::new(KnowledgeAddNode {
            store,
            collection,
            settings: EmbeddingSettings::from_config(config)?,
            ports: Ports::new(
                vec![PortSpec::new("chunks", ValueType::Any).describe(
                    "Chunks from text.split (embedded here) or from embed (with `embedding`).",
                )],
                vec![PortSpec::new("result", ValueType::Object).describe(
                    "{added, replaced, unchanged (documents), chunks (stored), input_tokens, cost_usd}.",
                )],
            ),
        }))
    }
}

struct KnowledgeAddNode {
    store: String,
    collection: String,
    settings: EmbeddingSettings,
    ports: Ports,
}

/// Chunks grouped by source, in first-seen order.
fn by_source(chunks: Vec<Chunk>) -> Vec<(String, Vec<Chunk>)> {
    let mut groups: Vec<(String, Vec<Chunk>)> = Vec::new();
    for chunk in chunks {
        match groups
            .iter_mut()
            .find(|(source, _)| *source == chunk.source)
        {
            Some((_, group)) => group.push(chunk),
            None => groups.push((chunk.source.clone(), vec![chunk])),
        }
    }
    groups
}

#[async_trait]
impl NodeImpl for KnowledgeAddNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    fn describe(&self, _inputs: &ValueMap) -> Option<String> {
        Some(format!(
            "add to collection `{}` in {}",
            self.collection, self.store
        ))
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let groups = by_source(chunks_from(&inputs.take_value("chunks")?, "chunks")?);
        let path = store_path(ctx, &self.store)?;
        let collection = self.collection.clone();
        let model_name = self.settings.model.clone();
        let sources: Vec<String> = groups.iter().map(|(s, _)| s.clone()).collect();
        // What is stored already: the collection's model (checked before anything is
        // embedded) and each source's hash.
        let stored = with_store(ctx, path.clone(), move |store| {
            let Some(existing) = store.collection(&collection)? else {
                return Ok((None, Vec::new()));
            };
            if existing.model.name != model_name {
                return Err(StoreError::ModelMismatch {
                    collection: collection.clone(),
                    recorded_model: existing.model.name.clone(),
                    recorded_dimensions: existing.model.dimensions,
                    asked_model: model_name,
                    asked_dimensions: existing.model.dimensions,
                });
            }
            let hashes = sources
                .iter()
                .map(|source| store.document_hash(&collection, source))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((Some(existing.model), hashes))
        })
        .await?;
        let (recorded_model, hashes) = stored;
        let mut unchanged = 0;
        let mut changed: Vec<(String, String, Vec<Chunk>)> = Vec::new();
        for (i, (source, chunks)) in groups.into_iter().enumerate() {
            let hash = content_hash(chunks.iter().map(|c| (c.text.as_str(), c.start, c.end)));
            if hashes.get(i).and_then(Option::as_ref) == Some(&hash) {
                unchanged += 1;
            } else {
                changed.push((source, hash, chunks));
            }
        }
        // Embed what has no vector yet, in one batched pass.
        let missing: Vec<String> = changed
            .iter()
            .flat_map(|(_, _, chunks)| chunks.iter())
            .filter(|c| c.embedding.is_none())
            .map(|c| c.text.clone())
            .collect();
        let mut usage = Usage::default();
        if !missing.is_empty() {
            let embedded = embed_texts(ctx, &self.settings, &missing).await?;
            usage = embedded.usage;
            let mut vectors = embedded.vectors.into_iter();
            for chunk in changed
                .iter_mut()
                .flat_map(|(_, _, chunks)| chunks.iter_mut())
            {
                if chunk.embedding.is_none() {
                    chunk.embedding = vectors.next();
                }
            }
        }
        let dimensions = changed
            .iter()
            .flat_map(|(_, _, chunks)| chunks.iter())
            .find_map(|c| c.embedding.as_ref().map(Vec::len))
            .or(recorded_model.as_ref().map(|m| m.dimensions))
            .unwrap_or(0);
        let model = EmbeddingModel {
            name: self.settings.model.clone(),
            dimensions,
        };
        let documents: Vec<NewDocument> = changed
            .into_iter()
            .map(|(source, hash, chunks)| NewDocument {
                source,
                content_hash: hash,
                metadata: serde_json::Map::new(),
                chunks: chunks
                    .into_iter()
                    .map(|c| NewChunk {
                        vector: c.embedding.unwrap_or_default(),
                        text: c.text,
                        start: c.start,
                        end: c.end,
                        metadata: c.metadata,
                    })
                    .collect(),
            })
            .collect();
        let collection = self.collection.clone();
        let outcomes = if documents.is_empty() {
            Vec::new()
        } else {
            with_store(ctx, path, move |store| {
                store.ensure_collection(&collection, &model)?;
                documents
                    .iter()
                    .map(|d| {
                        store
                            .add_document(&collection, &model, d)
                            .map(|outcome| (outcome, d.chunks.len()))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .await?
        };
        let count = |wanted: AddOutcome| outcomes.iter().filter(|(o, _)| *o == wanted).count();
        let stored_chunks: usize = outcomes
            .iter()
            .filter(|(o, _)| *o != AddOutcome::Unchanged)
            .map(|(_, n)| n)
            .sum();
        let result = Value::object(BTreeMap::from([
            (
                "added".to_owned(),
                Value::Integer(count(AddOutcome::Added) as i64),
            ),
            (
                "replaced".to_owned(),
                Value::Integer(count(AddOutcome::Replaced) as i64),
            ),
            (
                "unchanged".to_owned(),
                Value::Integer((unchanged + count(AddOutcome::Unchanged)) as i64),
            ),
            ("chunks".to_owned(), Value::Integer(stored_chunks as i64)),
            (
                "input_tokens".to_owned(),
                Value::Integer(usage.input_tokens as i64),
            ),
            ("cost_usd".to_owned(), Value::Number(usage.cost_usd)),
        ]));
        Ok(agentloom_core::outputs([("result", result)]))
    }
}
