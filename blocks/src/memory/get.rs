//! `memory.get`: the value this graph kept under a key in an earlier run (or this one).

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

use super::{KeySource, key_field, memory_of, on_disk};

pub(super) struct MemoryGet {
    meta: BlockMeta,
}

impl MemoryGet {
    pub(super) fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "memory.get",
                "Recall",
                "Memory",
                "Reads the value this graph kept under a key, in an earlier run or this one (memory.set). The memory is the graph's own, kept in the run log.",
            )
            .field(key_field())
            .field(
                ConfigField::json("default", "When not kept")
                    .help("The value given when nothing is kept under the key (null when empty)."),
            ),
        }
    }
}

impl Block for MemoryGet {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let reader = ConfigReader(config);
        let key = KeySource::from_config(&reader)?;
        let default = reader.get("default").cloned().unwrap_or_default();
        let ports = Ports::new(
            key.port().into_iter().collect(),
            vec![
                PortSpec::new("value", ValueType::Any)
                    .describe("The value kept under the key, or the default."),
                PortSpec::new("found", ValueType::Bool)
                    .describe("Whether a value was kept under the key."),
            ],
        );
        Ok(Arc::new(MemoryGetNode {
            key,
            default,
            ports,
        }))
    }
}

struct MemoryGetNode {
    key: KeySource,
    default: serde_json::Value,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for MemoryGetNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let key = self.key.take(&mut inputs)?;
        let memory = memory_of(ctx)?;
        let kept = on_disk(memory, move |memory| memory.get(&key)).await?;
        let found = kept.is_some();
        let value = kept.unwrap_or_else(|| self.default.clone());
        Ok(agentloom_core::outputs([
            ("value", Value::from_json(value)),
            ("found", Value::from(found)),
        ]))
    }
}
