//! `memory.set`: keeps a value under a key in this graph's memory, for later runs.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigReader, InputsExt as _,
    NodeImpl, PortSpec, Ports, RunCtx, ValueMap, ValueType, async_trait,
};

use super::{KeySource, key_field, memory_of, on_disk};

pub(super) struct MemorySet {
    meta: BlockMeta,
}

impl MemorySet {
    pub(super) fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "memory.set",
                "Remember",
                "Memory",
                "Keeps a value (any JSON, at most 64 KiB) under a key in this graph's memory, replacing what was there; later runs of the graph read it with memory.get. The memory is kept in the run log.",
            )
            .field(key_field()),
        }
    }
}

impl Block for MemorySet {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let key = KeySource::from_config(&ConfigReader(config))?;
        let mut inputs = vec![PortSpec::new("value", ValueType::Any).describe("What to keep.")];
        inputs.extend(key.port());
        let ports = Ports::new(
            inputs,
            vec![PortSpec::new("value", ValueType::Any).describe("The value kept, passed on.")],
        );
        Ok(Arc::new(MemorySetNode { key, ports }))
    }
}

struct MemorySetNode {
    key: KeySource,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for MemorySetNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let key = self.key.take(&mut inputs)?;
        let value = inputs.take_value("value")?;
        let memory = memory_of(ctx)?;
        let json = value.to_json();
        let run_id = ctx.run_id().to_owned();
        on_disk(memory, move |memory| memory.set(&key, &json, &run_id)).await?;
        Ok(agentloom_core::outputs([("value", value)]))
    }
}
