//! The workspace each run worked in, so that `agentloom approve` resumes a paused run in
//! the same folder wherever it is typed.

use std::path::{Path, PathBuf};

use rusqlite::{OptionalExtension as _, params};

use super::{RunStore, StoreError};

impl RunStore {
    /// Records that run `run_id` (already in the log) worked in `workspace`. A path that
    /// is not UTF-8 is not recorded: resuming then needs the workspace given again.
    pub fn record_workspace(&self, run_id: &str, workspace: &Path) -> Result<(), StoreError> {
        let Some(text) = workspace.to_str() else {
            return Ok(());
        };
        self.lock()
            .execute(
                "INSERT INTO run_workspaces (run_id, workspace) VALUES (?1, ?2)
                 ON CONFLICT (run_id) DO UPDATE SET workspace = excluded.workspace",
                params![run_id, text],
            )
            .map_err(|source| StoreError::Write {
                path: self.path.clone(),
                source,
            })?;
        Ok(())
    }

    /// The workspace run `run_id` worked in, when recorded.
    pub fn run_workspace(&self, run_id: &str) -> Result<Option<PathBuf>, StoreError> {
        self.lock()
            .query_row(
                "SELECT workspace FROM run_workspaces WHERE run_id = ?1",
                params![run_id],
                |row| row.get::<_, String>(0),
            )
            .optional()
            .map(|found| found.map(PathBuf::from))
            .map_err(|source| StoreError::Read {
                path: self.path.clone(),
                source,
            })
    }
}
