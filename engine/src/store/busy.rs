//! Waiting out other processes that hold the run log.
//!
//! SQLite's busy handler does not cover every case: changing the journal mode, recovering
//! a WAL another process left behind, and upgrading a read transaction return
//! `SQLITE_BUSY` at once. Parallel `agentloom run` processes on one file hit these, so the
//! store retries such steps itself, with a growing pause, before giving up.

use std::time::{Duration, Instant};

use rusqlite::ErrorCode;

use super::StoreError;

/// How long to keep trying before a busy run log is reported as an error.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);
const FIRST_PAUSE: Duration = Duration::from_millis(2);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

pub(crate) fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

impl StoreError {
    /// Whether another process holding the database caused this.
    pub(crate) fn is_busy(&self) -> bool {
        match self {
            StoreError::Open { source, .. }
            | StoreError::Migrate { source, .. }
            | StoreError::Read { source, .. }
            | StoreError::Write { source, .. } => is_busy(source),
            _ => false,
        }
    }
}

/// Runs `step` again while it fails only because the database is busy.
pub(crate) fn retry<T, E>(
    busy: impl Fn(&E) -> bool,
    mut step: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    // Processes started together would retry in step; a per-process offset spreads them.
    let offset = Duration::from_micros(u64::from(std::process::id() % 997));
    loop {
        match step() {
            Err(err) if busy(&err) && started.elapsed() < GIVE_UP_AFTER => {
                std::thread::sleep(pause + offset);
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            result => return result,
        }
    }
}
