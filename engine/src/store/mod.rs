//! The run store: every run, node execution and event, in an SQLite file.
//!
//! - [`RunStore::open`] opens (or creates) the file in WAL mode and applies the versioned
//!   migrations; a file from a newer build is refused. Runs left `running` by a process
//!   that no longer exists are marked `interrupted` (see `liveness.rs` for how).
//! - [`RunStore::recorder`] gives a [`RunRecorder`], an [`crate::EventSink`] whose `emit`
//!   only queues the event: a writer thread with its own connection writes them in
//!   batches (one transaction each, at least every 50 ms, at once for run start/finish).
//! - [`RunStore::list_runs`], [`RunStore::get_run`] and [`RunStore::events`] read it back.
//!
//! Streamed partial output (`node_partial` events) is not stored event by event: the
//! writer keeps each running node's text so far in its row (`partial`), dropped once the
//! node has finished and its outputs hold the final text (a failed node keeps it).

mod approvals;
mod breakpoints;
mod busy;
mod calls;
mod evaluations;
mod liveness;
mod memory;
mod migrations;
mod queries;
mod remote;
mod values;
mod workspaces;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, mpsc};
use std::time::Duration;

use agentloom_core::GraphDoc;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, params};

pub use approvals::{Claim, EarlierDecision, PendingApproval};
pub use breakpoints::PendingBreakpoint;
pub use evaluations::{EvaluationDetail, EvaluationRow, EvaluationRun};
pub use queries::{NodeRow, RunDetail, RunRow};
pub use values::{DEFAULT_MAX_VALUE_BYTES, LogPolicy};
pub use writer::RunRecorder;

/// The file name of the run log inside the data directory.
pub const RUN_LOG_FILE: &str = "runs.sqlite3";

/// What went wrong with the run log. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot find a home directory to keep the run log in; pass --db <file> to choose where runs are recorded"
    )]
    NoHomeDir,
    #[error("cannot create the folder {} for the run log: {source}; pass --db <file> to use another location", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the run log at {} or make it readable by its user alone: {source}; check that the file and its folder are yours, or pass --db <file> to use another one", path.display())]
    MakePrivate {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the run log at {}: {source}; check that the file and its folder are writable, or pass --db <file> to use another one", path.display())]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("{} is not an SQLite database, so it cannot hold the run log; move it away or pass --db <file> to use another file", path.display())]
    NotADatabase { path: PathBuf },
    #[error("the run log at {} is from a newer Agentloom (schema {found}, this build knows {known}); update Agentloom, or pass --db <file> to use another run log", path.display())]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: u32,
    },
    #[error("cannot upgrade the run log at {} to schema {version}: {source}", path.display())]
    Migrate {
        path: PathBuf,
        version: usize,
        source: rusqlite::Error,
    },
    #[error("cannot read the run log at {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("cannot write to the run log at {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("the run log at {} holds a damaged record: {message}", path.display())]
    Damaged { path: PathBuf, message: String },
    #[error("`{prefix}` matches several runs ({}); type more of the id", matches.join(", "))]
    AmbiguousRunId {
        prefix: String,
        matches: Vec<String>,
    },
    #[error("could not record the run in {}: {message}", path.display())]
    Recording { path: PathBuf, message: String },
    #[error("cannot export the run log to {}: {message}", path.display())]
    Export { path: PathBuf, message: String },
}

impl StoreError {
    fn open(path: &Path, source: rusqlite::Error) -> StoreError {
        if source.sqlite_error_code() == Some(ErrorCode::NotADatabase) {
            StoreError::NotADatabase {
                path: path.to_owned(),
            }
        } else {
            StoreError::Open {
                path: path.to_owned(),
                source,
            }
        }
    }
}

/// The graph a recorder logs: a shared document is handed to its writer thread as it is,
/// a borrowed one is copied.
pub trait LoggedGraph {
    fn shared(self) -> Arc<GraphDoc>;
}

impl LoggedGraph for &Arc<GraphDoc> {
    fn shared(self) -> Arc<GraphDoc> {
        Arc::clone(self)
    }
}

impl LoggedGraph for &GraphDoc {
    fn shared(self) -> Arc<GraphDoc> {
        Arc::new(self.clone())
    }
}

/// The run log: one SQLite file shared by every Agentloom process of the user.
pub struct RunStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// Writer connections of finished recordings, for the next run of this process.
    idle_writers: IdleWriters,
    /// Set by [`RunStore::checkpoint_in_background`]: the thread that moves the WAL into
    /// the database file (it stops when this sender is dropped with the store).
    checkpointer: OnceLock<mpsc::Sender<()>>,
}

/// How often the background checkpointer moves the WAL into the database file.
const BACKGROUND_CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// WAL pages after which a recording moves the WAL into the database file, when no
/// background checkpointer does. The WAL a process leaves behind is read whole by the next
/// one that opens the log (the index SQLite keeps of it does not outlive the last
/// connection): at SQLite's default of 1,000 pages (4 MiB), a 1-node `agentloom run` took
/// 6.6 ms of CPU beside a full WAL against 4.8 beside an empty one.
const AUTOCHECKPOINT_PAGES: i64 = 200;

/// Connections set up for a recorder, with their statements prepared: a fresh one reads
/// the whole schema again and prepares every statement, which costs more than recording a
/// small run (an evaluation or a server records many runs in one process).
pub(crate) type IdleWriters = Arc<Mutex<Vec<Connection>>>;

/// Writer connections kept idle at most: runs recorded at once beyond this open their own.
pub(crate) const MAX_IDLE_WRITERS: usize = 8;

impl std::fmt::Debug for RunStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RunStore {
    /// `<per-user data dir>/runs.sqlite3`, e.g. `~/.local/share/agentloom/runs.sqlite3`.
    pub fn default_path() -> Result<PathBuf, StoreError> {
        let data = agentloom_core::user_data_dir().ok_or(StoreError::NoHomeDir)?;
        Ok(data.join(RUN_LOG_FILE))
    }

    /// Opens (creating it and its folders if needed) the run log at `path`, brings its
    /// schema up to date and marks runs whose process died as interrupted. The log holds
    /// what runs read and wrote: its folders and files are the user's alone
    /// ([`crate::private_files`]).
    pub fn open(path: &Path) -> Result<RunStore, StoreError> {
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            crate::private_files::create_dir_all(parent).map_err(|source| {
                StoreError::CreateDir {
                    path: parent.to_owned(),
                    source,
                }
            })?;
        }
        make_private(path)?;
        busy::retry(StoreError::is_busy, || {
            let mut conn = connect(path)?;
            migrations::migrate(&mut conn, path)?;
            let store = RunStore {
                path: path.to_owned(),
                conn: Mutex::new(conn),
                idle_writers: IdleWriters::default(),
                checkpointer: OnceLock::new(),
            };
            store.recover_interrupted()?;
            Ok(store)
        })
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes every run to `dest` as one self-contained database file (its recent pages
    /// included, which live in the `-wal` file beside the log until a checkpoint), to copy
    /// or attach alone. Never overwrites: `dest` must not exist.
    pub fn export_to(&self, dest: &Path) -> Result<(), StoreError> {
        let failed = |message: String| StoreError::Export {
            path: dest.to_owned(),
            message,
        };
        if dest.symlink_metadata().is_ok() {
            return Err(failed(
                "the file exists already; choose a new file name".to_owned(),
            ));
        }
        let target = dest
            .to_str()
            .ok_or_else(|| failed("the path is not valid UTF-8".to_owned()))?;
        // An empty file of the user alone, which VACUUM INTO fills: the export holds what
        // the log holds.
        crate::private_files::open_options()
            .write(true)
            .create_new(true)
            .open(dest)
            .map_err(|e| failed(e.to_string()))?;
        // A consistent snapshot of the whole log, WAL included, written compactly.
        self.lock()
            .execute("VACUUM INTO ?1", [target])
            .map_err(|e| failed(e.to_string()))?;
        Ok(())
    }

    /// Moves every page waiting in the `-wal` file into the database file and empties the
    /// WAL, so that `runs.sqlite3` copied or attached alone holds every run. Called when the
    /// app closes; short CLI runs skip it (see [`connect`]). Another process reading or
    /// writing the log at the same time leaves part of the WAL in place: not an error.
    pub fn make_self_contained(&self) -> Result<(), StoreError> {
        let (busy, _log_pages, _moved): (i64, i64, i64) = self
            .lock()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .map_err(|source| StoreError::Write {
                path: self.path.clone(),
                source,
            })?;
        if busy != 0 {
            tracing::info!(db = %self.path.display(), "the run log is in use elsewhere; its newest pages stay in the -wal file");
        }
        Ok(())
    }

    /// Moves the WAL into the database file from a thread of its own, every 100 ms, instead
    /// of in the recording that fills it past SQLite's threshold: that recording would wait
    /// for the copy and its `fsync`, and so would the request it answers. For a process
    /// that records runs all the time (`agentloom serve`); call it before recording.
    pub fn checkpoint_in_background(&self) -> Result<(), StoreError> {
        if self.checkpointer.get().is_some() {
            return Ok(());
        }
        let conn = busy::retry(StoreError::is_busy, || connect(&self.path))?;
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        if self.checkpointer.set(stop_tx).is_err() {
            return Ok(());
        }
        let path = self.path.clone();
        std::thread::Builder::new()
            .name("agentloom-checkpoint".to_owned())
            .spawn(move || {
                // Until the store is dropped (the sender with it).
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stop_rx.recv_timeout(BACKGROUND_CHECKPOINT_EVERY)
                {
                    // PASSIVE: copies what no reader still needs and never waits for one.
                    if let Err(err) =
                        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::debug!(db = %path.display(), %err, "background checkpoint");
                    }
                }
            })
            .map_err(|e| StoreError::Recording {
                path: self.path.clone(),
                message: format!("cannot start the checkpoint thread: {e}"),
            })?;
        Ok(())
    }

    /// The schema version this build writes.
    pub fn schema_version() -> u32 {
        migrations::SCHEMA_VERSION
    }

    /// Starts recording a run of `graph` (the document as run): hand the recorder to the
    /// executor as its sink (or in a [`crate::FanoutSink`]), then call
    /// [`RunRecorder::finish`] once the run has ended.
    pub fn recorder(&self, graph: impl LoggedGraph) -> Result<RunRecorder, StoreError> {
        self.recorder_with(graph, LogPolicy::default())
    }

    /// [`RunStore::recorder`] keeping as much of each value as `policy` says.
    pub fn recorder_with(
        &self,
        graph: impl LoggedGraph,
        policy: LogPolicy,
    ) -> Result<RunRecorder, StoreError> {
        let idle = self
            .idle_writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.writer_connection()?,
        };
        RunRecorder::start(
            self.path.clone(),
            conn,
            graph.shared(),
            policy,
            self.idle_writers.clone(),
        )
    }

    /// A new connection with the recorder's settings.
    fn writer_connection(&self) -> Result<Connection, StoreError> {
        let conn = busy::retry(StoreError::is_busy, || connect(&self.path))?;
        // Big batches of a large run touch many pages: spilling them mid-transaction costs
        // more than the writes themselves.
        conn.pragma_update(None, "cache_size", -32_768)
            // The writer inserts a run's row before any row that refers to it (in the same
            // or an earlier transaction) and deletes no run: checking the reference costs a
            // lookup per node row.
            .and_then(|()| conn.pragma_update(None, "foreign_keys", "OFF"))
            // A background checkpointer does the checkpoints, not the recordings.
            .and_then(|()| {
                let pages = if self.checkpointer.get().is_some() {
                    0
                } else {
                    AUTOCHECKPOINT_PAGES
                };
                conn.pragma_update(None, "wal_autocheckpoint", pages)
            })
            // …and the WAL file is cut back to this size once a checkpoint has emptied it.
            .and_then(|()| {
                conn.pragma_update_and_check(None, "journal_size_limit", 16 << 20, |row| {
                    row.get::<_, i64>(0)
                })
                .map(drop)
            })
            .map_err(|source| StoreError::open(&self.path, source))?;
        Ok(conn)
    }

    /// Marks every `running` run whose recording process is gone as `interrupted`, along
    /// with its unfinished nodes, and ends a run left `waiting` by a process killed while
    /// it asked a person: its waiting nodes keep their requests, its other unfinished nodes
    /// are pending again. Returns the ids marked. Called by [`RunStore::open`].
    pub fn recover_interrupted(&self) -> Result<Vec<String>, StoreError> {
        let now = now_ms();
        let read_error = |source| StoreError::Read {
            path: self.path.clone(),
            source,
        };
        let write_error = |source| StoreError::Write {
            path: self.path.clone(),
            source,
        };
        let mut conn = self.lock();
        type Candidate = (String, Option<String>, Option<i64>, i64, Option<i64>);
        let candidates: Vec<Candidate> = {
            // The last event recorded tells how long the run really went on, even when the
            // process died between two heartbeats.
            let mut stmt = conn
                .prepare(
                    "SELECT id, owner, heartbeat_at_ms, started_at_ms,
                            (SELECT max(at_ms) FROM events WHERE events.run_id = runs.id)
                     FROM runs
                     WHERE status = 'running' OR (status = 'waiting' AND finished_at_ms IS NULL)",
                )
                .map_err(read_error)?;
            stmt.query_map([], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .and_then(Iterator::collect)
            .map_err(read_error)?
        };
        let mut abandoned = Vec::new();
        for (id, owner, heartbeat, started, last_event) in candidates {
            let last_seen = from_i64(heartbeat.unwrap_or(started));
            let ended =
                last_seen.max(from_i64(started).saturating_add(from_i64(last_event.unwrap_or(0))));
            let dead = match owner
                .as_deref()
                .map_or(liveness::Liveness::Unknown, liveness::liveness)
            {
                liveness::Liveness::Alive => false,
                liveness::Liveness::Dead => true,
                liveness::Liveness::Unknown => {
                    now.saturating_sub(last_seen) > liveness::STALE_HEARTBEAT_MS
                }
            };
            if dead {
                abandoned.push((id, ended));
            }
        }
        if abandoned.is_empty() {
            return Ok(Vec::new());
        }
        // IMMEDIATE: take the write lock first (waiting for it), never upgrade a read.
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(write_error)?;
        for (id, last_seen) in &abandoned {
            // A run that was waiting for a person stays resumable: its request is stored.
            // One killed while it asked (listed `waiting` already) ends as a paused run
            // does: waiting nodes awaiting approval, the rest of its unfinished nodes pending.
            let waiting = tx
                .execute(
                    "UPDATE runs SET status = 'waiting',
                            error = CASE WHEN status = 'waiting' THEN coalesce(error, ?3) ELSE ?3 END,
                            finished_at_ms = CASE WHEN status = 'waiting' THEN ?2 ELSE finished_at_ms END,
                            duration_ms = CASE WHEN status = 'waiting' THEN max(0, ?2 - started_at_ms)
                                               ELSE duration_ms END
                     WHERE id = ?1 AND status IN ('running', 'waiting')
                       AND (EXISTS (SELECT 1 FROM pending_approvals WHERE run_id = ?1)
                            OR EXISTS (SELECT 1 FROM pending_breakpoints WHERE run_id = ?1))",
                    params![id, to_i64(*last_seen), breakpoints::waiting_reason(&tx, id)],
                )
                .map_err(write_error)?;
            if waiting > 0 {
                tx.execute(
                    "UPDATE node_runs SET status = 'pending', error = NULL
                     WHERE run_id = ?1
                       AND (status IN ('queued', 'running')
                            OR (status = 'awaiting_approval'
                                AND NOT EXISTS (SELECT 1 FROM pending_approvals
                                                WHERE run_id = ?1 AND node_id = node_runs.node_id)))",
                    params![id],
                )
                .map_err(write_error)?;
                continue;
            }
            tx.execute(
                "UPDATE runs SET status = 'interrupted',
                        finished_at_ms = ?2,
                        duration_ms = max(0, ?2 - started_at_ms),
                        error = coalesce(error, 'the process recording this run stopped before the run finished')
                 WHERE id = ?1 AND status IN ('running', 'waiting')",
                params![id, to_i64(*last_seen)],
            )
            .map_err(write_error)?;
            tx.execute(
                "UPDATE node_runs SET status = 'failed',
                        error = coalesce(error, 'interrupted: the process stopped while this node was ' ||
                                         replace(status, '_', ' '))
                 WHERE run_id = ?1 AND status IN ('queued', 'running', 'awaiting_approval')",
                params![id],
            )
            .map_err(write_error)?;
        }
        tx.commit().map_err(write_error)?;
        let ids: Vec<String> = abandoned.into_iter().map(|(id, _)| id).collect();
        tracing::info!(count = ids.len(), db = %self.path.display(), "marked runs of stopped processes as interrupted");
        Ok(ids)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves the connection itself usable.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Opens one connection with the run log's settings.
/// Creates the run log's file as the user's alone before SQLite opens it (an empty file is
/// a new database; SQLite gives its `-wal` and `-shm` files the same permissions), and takes
/// other users' access off a log an earlier version created readable by all.
fn make_private(path: &Path) -> Result<(), StoreError> {
    let failed = |source: std::io::Error| StoreError::MakePrivate {
        path: path.to_owned(),
        source,
    };
    match crate::private_files::open_options()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            for file in [
                path.to_owned(),
                sqlite_companion(path, "-wal"),
                sqlite_companion(path, "-shm"),
            ] {
                crate::private_files::restrict_to_owner(&file).map_err(failed)?;
            }
            Ok(())
        }
        Err(err) => Err(failed(err)),
    }
}

/// `path` with `suffix` appended to its file name (`runs.sqlite3-wal`).
fn sqlite_companion(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn connect(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags)
        .map_err(|source| StoreError::open(path, source))?;
    conn.busy_handler(Some(busy::wait_for_lock))
        .map_err(|source| StoreError::open(path, source))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|source| StoreError::open(path, source))?;
    if !mode.eq_ignore_ascii_case("wal") {
        // Some network file systems cannot do WAL; the log still works, only slower.
        tracing::warn!(db = %path.display(), mode = %mode, "the run log could not switch to WAL mode");
    }
    // Closing the last connection would copy the whole WAL into the file, sync it and
    // delete it, and the next process's first write would create and sync it again: ~10 ms
    // on every short CLI run, more after a large one. The recorder's automatic checkpoints
    // move the pages instead, and the WAL keeps its size limit.
    conn.pragma_update(None, "synchronous", "NORMAL")
        .and_then(|()| conn.pragma_update(None, "foreign_keys", "ON"))
        .and_then(|()| {
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
                .map(drop)
        })
        .map_err(|source| StoreError::open(path, source))?;
    Ok(conn)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// SQLite integers are signed; our counters never reach `i64::MAX`.
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn from_i64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod values_tests;
