//! What the knowledge.* blocks share: where the store file is, and opening it there.

use std::path::PathBuf;

use agentloom_core::{BlockError, Config, ConfigError, ConfigField, ConfigReader, RunCtx};

use super::store::{KnowledgeStore, StoreError};

/// The store file when the config names none, in the run's workspace.
pub(crate) const DEFAULT_STORE: &str = "knowledge.sqlite";

pub(crate) fn store_field() -> ConfigField {
    ConfigField::text("store", "Store file")
        .default_value(serde_json::json!(DEFAULT_STORE))
        .help("The SQLite file holding the collections: a path relative to the workspace directory, or `data:NAME` for a file kept in your data folder (shared by every workspace).")
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

/// Names a store in the user's data folder rather than the workspace: `data:NAME`.
pub(crate) const DATA_PREFIX: &str = "data:";

/// The store file's full path: `data:NAME` is `NAME` in the data folder's `knowledge`
/// folder (a plain file name), anything else a path checked to lie inside the workspace
/// (no `..`, no link leading out); folders are made as needed.
pub(crate) fn store_path(ctx: &dyn RunCtx, store: &str) -> Result<PathBuf, BlockError> {
    let Some(name) = store.strip_prefix(DATA_PREFIX) else {
        return Ok(crate::workspace_path::for_write(ctx.workspace(), store)?.full);
    };
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', ':'])
        && !name.chars().any(char::is_control);
    if !plain {
        return Err(BlockError::permanent(format!(
            "store `{store}`: after `{DATA_PREFIX}` give a plain file name, e.g. `{DATA_PREFIX}notes.sqlite`"
        )));
    }
    let folder = agentloom_core::user_data_dir()
        .ok_or_else(|| {
            BlockError::permanent(format!(
                "store `{store}`: this system has no per-user data folder; name a file in the workspace instead"
            ))
        })?
        .join("knowledge");
    std::fs::create_dir_all(&folder).map_err(|e| {
        BlockError::permanent(format!(
            "cannot make the knowledge folder {}: {e}",
            folder.display()
        ))
    })?;
    Ok(folder.join(name))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestCtx;

    #[test]
    fn a_data_folder_store_is_a_plain_file_name() {
        let ctx = TestCtx::new();
        for bad in [
            "data:",
            "data:../escape.sqlite",
            "data:a/b.sqlite",
            "data:..",
            "data:c:x",
        ] {
            let err = store_path(&ctx, bad).expect_err(bad).message;
            assert!(
                err.contains("plain file name") && err.contains(bad),
                "{err}"
            );
        }
    }

    /// A block that implies no credential: trusting a file lists only the credentials its
    /// nodes name, and these send a key only when their config names one.
    #[test]
    fn no_embedding_block_implies_a_credential() {
        use agentloom_core::BlockCatalog as _;
        let registry = crate::Registry::builtin();
        for kind in ["knowledge.embed", "knowledge.add", "knowledge.search"] {
            let meta = registry.block(kind).unwrap().meta();
            assert_eq!(meta.credential, None, "{kind}");
            let field = meta
                .config
                .iter()
                .find(|f| f.name == "credential")
                .unwrap_or_else(|| panic!("{kind} has a credential field"));
            assert_eq!(field.default, None, "{kind}");
        }
    }
}
