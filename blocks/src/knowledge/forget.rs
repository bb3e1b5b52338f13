//! `knowledge.forget`: removes a document (every chunk of one source) from a collection.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, InputsExt as _, NodeImpl,
    PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

use super::common::{collection_field, store_and_collection, store_field, store_path, with_store};

pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(KnowledgeForget::new())]
}

struct KnowledgeForget {
    meta: BlockMeta,
}

impl KnowledgeForget {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "knowledge.forget",
                "Forget from knowledge",
                "Knowledge",
                "Removes a document (all chunks of one source) from a collection.",
            )
            .with_side_effects()
            .field(store_field())
            .field(collection_field()),
        }
    }
}

impl Block for KnowledgeForget {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let (store, collection) = store_and_collection(config)?;
        Ok(Arc::new(KnowledgeForgetNode {
            store,
            collection,
            ports: Ports::new(
                vec![
                    PortSpec::new("source", ValueType::Text)
                        .describe("The document's source, e.g. `docs/handbook.md`."),
                ],
                vec![
                    PortSpec::new("forgotten", ValueType::Bool)
                        .describe("Whether the collection held that source."),
                ],
            ),
        }))
    }
}

struct KnowledgeForgetNode {
    store: String,
    collection: String,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for KnowledgeForgetNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    fn describe(&self, inputs: &ValueMap) -> Option<String> {
        let source = inputs.get("source").map(Value::to_text).unwrap_or_default();
        Some(format!(
            "forget `{source}` from collection `{}` in {}",
            self.collection, self.store
        ))
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let source = inputs.take_text("source")?;
        let path = store_path(ctx, &self.store)?;
        let collection = self.collection.clone();
        let forgotten =
            with_store(ctx, path, move |store| store.forget(&collection, &source)).await?;
        Ok(agentloom_core::outputs([(
            "forgotten",
            Value::Bool(forgotten),
        )]))
    }
}
