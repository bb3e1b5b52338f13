//! Runs that ran on another machine: the worker that ran each one, so that `runs`/`show`
//! say where a run recorded from a queue happened (read back as `RunRow::worker`).

use rusqlite::params;

use super::{RunStore, StoreError};

impl RunStore {
    /// Records that run `run_id` (already in the log) ran on the worker named `worker`.
    pub fn record_worker(&self, run_id: &str, worker: &str) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT INTO remote_runs (run_id, worker) VALUES (?1, ?2)
                 ON CONFLICT (run_id) DO UPDATE SET worker = excluded.worker",
                params![run_id, worker],
            )
            .map_err(|source| StoreError::Write {
                path: self.path.clone(),
                source,
            })?;
        Ok(())
    }
}
