//! Each graph's memory across runs (`memory.get`/`memory.set`, an agent's notes): a small
//! key-value table of JSON values in the run log, keyed by the graph's identity (its file,
//! or its name when it has none; see the runner's `Prepared`).

use std::sync::Arc;

use agentloom_core::{
    GraphMemory, MAX_MEMORY_KEYS, MemoryError, check_memory_key, memory_value_text,
};
use rusqlite::{OptionalExtension as _, params};

use super::{RunStore, now_ms, to_i64};

/// One graph's memory in a run log.
struct StoredMemory {
    store: Arc<RunStore>,
    graph: String,
}

impl RunStore {
    /// The memory of the graph identified by `graph` in this run log.
    pub fn graph_memory(self: &Arc<Self>, graph: &str) -> Arc<dyn GraphMemory> {
        Arc::new(StoredMemory {
            store: Arc::clone(self),
            graph: graph.to_owned(),
        })
    }
}

impl StoredMemory {
    fn failed(&self, err: &rusqlite::Error) -> MemoryError {
        MemoryError::Store {
            graph: self.graph.clone(),
            message: format!("{err} (run log {})", self.store.path.display()),
        }
    }
}

impl GraphMemory for StoredMemory {
    fn graph(&self) -> &str {
        &self.graph
    }

    fn get(&self, key: &str) -> Result<Option<serde_json::Value>, MemoryError> {
        check_memory_key(key)?;
        let text: Option<String> = self
            .store
            .lock()
            .query_row(
                "SELECT value_json FROM graph_memory WHERE graph = ?1 AND key = ?2",
                params![self.graph, key],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.failed(&e))?;
        text.map(|text| {
            serde_json::from_str(&text).map_err(|e| MemoryError::Store {
                graph: self.graph.clone(),
                message: format!("the value of `{key}` is damaged: {e}"),
            })
        })
        .transpose()
    }

    fn set(&self, key: &str, value: &serde_json::Value, run_id: &str) -> Result<(), MemoryError> {
        check_memory_key(key)?;
        let text = memory_value_text(key, value)?;
        let mut conn = self.store.lock();
        let tx = conn.transaction().map_err(|e| self.failed(&e))?;
        let (keys, present): (i64, bool) = tx
            .query_row(
                "SELECT COUNT(*), COALESCE(MAX(key = ?2), 0) FROM graph_memory WHERE graph = ?1",
                params![self.graph, key],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(|e| self.failed(&e))?;
        if !present && usize::try_from(keys).unwrap_or(usize::MAX) >= MAX_MEMORY_KEYS {
            return Err(MemoryError::TooManyKeys {
                graph: self.graph.clone(),
                key: key.to_owned(),
                max: MAX_MEMORY_KEYS,
            });
        }
        tx.execute(
            "INSERT INTO graph_memory (graph, key, value_json, updated_at_ms, run_id)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (graph, key) DO UPDATE SET value_json = excluded.value_json,
                 updated_at_ms = excluded.updated_at_ms, run_id = excluded.run_id",
            params![self.graph, key, text, to_i64(now_ms()), run_id],
        )
        .map_err(|e| self.failed(&e))?;
        tx.commit().map_err(|e| self.failed(&e))
    }

    fn remove(&self, key: &str) -> Result<bool, MemoryError> {
        check_memory_key(key)?;
        let removed = self
            .store
            .lock()
            .execute(
                "DELETE FROM graph_memory WHERE graph = ?1 AND key = ?2",
                params![self.graph, key],
            )
            .map_err(|e| self.failed(&e))?;
        Ok(removed > 0)
    }
}
