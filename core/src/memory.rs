//! A graph's memory across runs: a small key-value store of JSON values, one per graph,
//! kept by whoever records the run (the run log) and reached by blocks through
//! [`crate::RunCtx::memory`].

/// The largest value one key may hold, as compact JSON.
pub const MAX_MEMORY_VALUE_BYTES: usize = 64 * 1024;
/// The longest key, in bytes.
pub const MAX_MEMORY_KEY_BYTES: usize = 200;
/// The most keys one graph may keep.
pub const MAX_MEMORY_KEYS: usize = 1_000;

/// Why a memory read or write failed. Messages name the key and the graph, never a value.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("memory key `{key}` is {bytes} bytes of JSON; a value may be at most {max} bytes")]
    TooLarge {
        key: String,
        bytes: usize,
        max: usize,
    },
    #[error("memory key {0:?} is not usable: {1}")]
    BadKey(String, &'static str),
    #[error("the memory of {graph} holds {max} keys already; remove some before adding `{key}`")]
    TooManyKeys {
        graph: String,
        key: String,
        max: usize,
    },
    #[error("the memory of {graph} cannot be read or written: {message}")]
    Store { graph: String, message: String },
}

/// Checks `key` before it is read or written.
pub fn check_memory_key(key: &str) -> Result<(), MemoryError> {
    if key.trim().is_empty() {
        return Err(MemoryError::BadKey(key.to_owned(), "it is empty"));
    }
    if key.len() > MAX_MEMORY_KEY_BYTES {
        return Err(MemoryError::BadKey(
            crate::clip_chars(key, 40),
            "it is longer than 200 bytes",
        ));
    }
    if key.chars().any(char::is_control) {
        return Err(MemoryError::BadKey(
            key.to_owned(),
            "it holds a control character",
        ));
    }
    Ok(())
}

/// The JSON text of `value` for key `key`, refused over [`MAX_MEMORY_VALUE_BYTES`].
pub fn memory_value_text(key: &str, value: &serde_json::Value) -> Result<String, MemoryError> {
    let text = value.to_string();
    if text.len() > MAX_MEMORY_VALUE_BYTES {
        return Err(MemoryError::TooLarge {
            key: key.to_owned(),
            bytes: text.len(),
            max: MAX_MEMORY_VALUE_BYTES,
        });
    }
    Ok(text)
}

/// One graph's memory. Calls touch the disk: call them off the async workers.
pub trait GraphMemory: Send + Sync {
    /// The graph this memory belongs to, as shown in messages (its file, or its name).
    fn graph(&self) -> &str;
    /// The value kept under `key`, if any.
    fn get(&self, key: &str) -> Result<Option<serde_json::Value>, MemoryError>;
    /// Keeps `value` under `key`, replacing what was there; `run_id` is the run writing it.
    fn set(&self, key: &str, value: &serde_json::Value, run_id: &str) -> Result<(), MemoryError>;
    /// Forgets `key`; whether it was there.
    fn remove(&self, key: &str) -> Result<bool, MemoryError>;
}
