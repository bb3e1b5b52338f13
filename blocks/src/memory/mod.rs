//! The graph's memory across runs: `memory.get` and `memory.set` read and write a small
//! key-value store of JSON values that the run log keeps per graph (see
//! [`agentloom_core::GraphMemory`]).
//!
//! | file     | what                                          |
//! |----------|-----------------------------------------------|
//! | `get.rs` | `memory.get`: the value kept under a key       |
//! | `set.rs` | `memory.set`: keeps a value under a key        |

mod get;
mod set;

use std::sync::Arc;

use agentloom_core::{
    BlockError, ConfigError, ConfigField, ConfigReader, GraphMemory, InputsExt as _, MemoryError,
    PortSpec, RunCtx, ValueMap, ValueType,
};

/// The blocks this folder provides.
pub(crate) fn blocks() -> Vec<Box<dyn agentloom_core::Block>> {
    vec![
        Box::new(get::MemoryGet::new()),
        Box::new(set::MemorySet::new()),
    ]
}

/// The `key` field both blocks share: fixed in the config, or else an input.
fn key_field() -> ConfigField {
    ConfigField::text("key", "Key").help(
        "The name the value is kept under, in this graph's memory. Empty: the `key` input gives it.",
    )
}

/// Where a node finds its key.
#[derive(Clone, Debug)]
enum KeySource {
    Fixed(String),
    Input,
}

impl KeySource {
    fn from_config(reader: &ConfigReader<'_>) -> Result<KeySource, ConfigError> {
        match reader.str("key")?.map(str::trim).filter(|k| !k.is_empty()) {
            Some(key) => {
                agentloom_core::check_memory_key(key)
                    .map_err(|e| ConfigError::new("key", e.to_string()))?;
                Ok(KeySource::Fixed(key.to_owned()))
            }
            None => Ok(KeySource::Input),
        }
    }

    /// The `key` input port, when the config does not fix the key.
    fn port(&self) -> Option<PortSpec> {
        matches!(self, KeySource::Input).then(|| {
            PortSpec::new("key", ValueType::Text).describe("The name the value is kept under.")
        })
    }

    fn take(&self, inputs: &mut ValueMap) -> Result<String, BlockError> {
        match self {
            KeySource::Fixed(key) => Ok(key.clone()),
            KeySource::Input => {
                let key = inputs.take_text("key")?;
                agentloom_core::check_memory_key(&key)
                    .map_err(|e| BlockError::input("key", e.to_string()))?;
                Ok(key)
            }
        }
    }
}

/// The run's graph memory, or why there is none.
fn memory_of(ctx: &dyn RunCtx) -> Result<Arc<dyn GraphMemory>, BlockError> {
    ctx.memory().ok_or_else(|| {
        BlockError::permanent(
            "this run has no memory: a graph's memory is kept in the run log, and this run is not recorded in one",
        )
    })
}

/// Runs a memory call off the async workers (it reads or writes the run log's file).
async fn on_disk<T: Send + 'static>(
    memory: Arc<dyn GraphMemory>,
    call: impl FnOnce(&dyn GraphMemory) -> Result<T, MemoryError> + Send + 'static,
) -> Result<T, BlockError> {
    tokio::task::spawn_blocking(move || call(memory.as_ref()))
        .await
        .map_err(|e| BlockError::permanent(format!("the memory call stopped: {e}")))?
        .map_err(|e| match e {
            MemoryError::TooLarge { .. } => BlockError::input("value", e),
            MemoryError::BadKey(..) => BlockError::input("key", e),
            MemoryError::TooManyKeys { .. } => BlockError::permanent(e.to_string()),
            // A busy or locked run log may answer on the next attempt.
            MemoryError::Store { .. } => BlockError::transient(e.to_string()),
        })
}
