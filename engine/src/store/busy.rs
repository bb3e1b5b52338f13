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

/// How long a connection waits for another writer before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// The first tries of a connection waiting for a lock come this close together…
const SHORT_PAUSE: Duration = Duration::from_micros(100);
const SHORT_TRIES: u32 = 50;
/// …and then this far apart.
const LONG_PAUSE: Duration = Duration::from_millis(1);

/// The busy handler of every connection to the run log: whether to try again after the
/// `tries`-th time the lock was found held. SQLite's own waits 1, 2, 5, 10, 15, 20, 25…
/// ms between tries, so of two runs of one server writing at once, the second waited tens
/// of milliseconds for a lock held a fraction of one; this tries again every 0.1 ms at
/// first, then every millisecond, for [`BUSY_TIMEOUT`] in all.
pub(crate) fn wait_for_lock(tries: i32) -> bool {
    let tries = u32::try_from(tries).unwrap_or(0);
    let waited = if tries < SHORT_TRIES {
        SHORT_PAUSE * tries
    } else {
        SHORT_PAUSE * SHORT_TRIES + LONG_PAUSE * (tries - SHORT_TRIES)
    };
    if waited >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(if tries < SHORT_TRIES {
        SHORT_PAUSE
    } else {
        LONG_PAUSE
    });
    true
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
