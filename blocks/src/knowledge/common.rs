//! What the knowledge.* blocks share: where the store file is, and opening it there.

use std::path::PathBuf;

use agentloom_core::{BlockError, Config, ConfigError, ConfigField, ConfigReader, RunCtx};

use super::store::{KnowledgeStore, StoreError};

/// The store file when the config names none, in the run's workspace.
pub(crate) const DEFAULT_STORE: &str = "knowledge.sqlite";

pub(crate) fn store_field() -> ConfigField {
    ConfigField::text("store", "Store file")
        .default_value(serde_json::json!(DEFAULT_STORE))
        .help("The SQLite file holding the collections, relative to the workspace directory.")
}

pub(crate) fn collection_field() -> ConfigField {
    ConfigField::text("collection", "Collection")
        .required()
        .help("The collection's name, e.g. `handbook`.")
}

/// The store path and collection name from config.
pub(crate) fn store_and_collection(config: &Config) -> Result<(String, String), ConfigError> {
    let read = ConfigReader(config);
    let store = read.str_or("store", DEFAULT_STORE)?.trim();
    let store = if store.is_empty() {
        DEFAULT_STORE
    } else {
        store
    };
    let collection = read.required_str("collection")?;
    if collection.trim().is_empty() || collection.trim() != collection {
        return Err(ConfigError::new(
            "collection",
            "give a name without leading or trailing spaces",
        ));
    }
    Ok((store.to_owned(), collection.to_owned()))
}

/// The store file's full path, checked to lie inside the workspace (no `..`, no link
/// leading out), folders made as needed.
pub(crate) fn store_path(ctx: &dyn RunCtx, relative: &str) -> Result<PathBuf, BlockError> {
    Ok(crate::workspace_path::for_write(ctx.workspace(), relative)?.full)
}

/// Runs `work` on the store at `path` on the blocking pool.
pub(crate) async fn with_store<T: Send + 'static>(
    ctx: &dyn RunCtx,
    path: PathBuf,
    work: impl FnOnce(&mut KnowledgeStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, BlockError> {
    let joined = tokio::task::spawn_blocking(move || {
        let mut store = KnowledgeStore::open(&path)?;
        work(&mut store)
    });
    let result = tokio::select! {
        () = ctx.cancel_token().cancelled() => return Err(BlockError::cancelled()),
        joined = joined => joined,
    };
    result
        .map_err(|e| BlockError::permanent(format!("the knowledge store task failed: {e}")))?
        .map_err(store_error)
}

pub(crate) fn store_error(error: StoreError) -> BlockError {
    BlockError::permanent(error.to_string())
}
