//! The schema of the run log, as an ordered list of steps keyed on `PRAGMA user_version`.
//!
//! Step `n` (1-based) upgrades a database from `user_version = n - 1` to `n`. Steps are
//! only ever appended: a released step never changes.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// Schema steps, applied in order, each in its own transaction.
const MIGRATIONS: &[&str] = &[
    // 1: runs, node executions and events.
    r"
CREATE TABLE runs (
    id              TEXT PRIMARY KEY NOT NULL,
    graph_name      TEXT NOT NULL,
    graph_json      TEXT NOT NULL,
    status          TEXT NOT NULL,
    started_at_ms   INTEGER NOT NULL,
    finished_at_ms  INTEGER,
    duration_ms     INTEGER,
    inputs_json     TEXT NOT NULL DEFAULT '{}',
    outputs_json    TEXT NOT NULL DEFAULT '{}',
    error           TEXT,
    input_tokens    INTEGER NOT NULL DEFAULT 0,
    output_tokens   INTEGER NOT NULL DEFAULT 0,
    cost_usd        REAL NOT NULL DEFAULT 0,
    node_count      INTEGER NOT NULL DEFAULT 0,
    pid             INTEGER,
    owner           TEXT,
    heartbeat_at_ms INTEGER
) STRICT;
CREATE INDEX runs_by_start ON runs (started_at_ms DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status);

CREATE TABLE node_runs (
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    node_id         TEXT NOT NULL,
    block           TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    started_at_ms   INTEGER,
    finished_at_ms  INTEGER,
    duration_ms     INTEGER,
    inputs_json     TEXT,
    outputs_json    TEXT,
    error           TEXT,
    error_caught    INTEGER NOT NULL DEFAULT 0,
    skip_reason     TEXT,
    partial_json    TEXT,
    input_tokens    INTEGER NOT NULL DEFAULT 0,
    output_tokens   INTEGER NOT NULL DEFAULT 0,
    cost_usd        REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, node_id)
) STRICT;

CREATE TABLE events (
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    at_ms           INTEGER NOT NULL,
    kind            TEXT NOT NULL,
    node_id         TEXT,
    payload_json    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;
",
    // 2: the graph document moves to a table of its own; node rows carry the order of
    // their start and finish events. SQLite rewrites a whole row on
    // every update, so a large graph in `runs` made each status update copy it again.
    r"
CREATE TABLE run_graphs (
    run_id          TEXT PRIMARY KEY NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    graph_json      TEXT NOT NULL
) STRICT;
INSERT INTO run_graphs (run_id, graph_json) SELECT id, graph_json FROM runs;
ALTER TABLE runs DROP COLUMN graph_json;
-- A node's first start and its finish are kept in its row, with their place in the event
-- order, rather than as event rows of their own (one row a node instead of three).
ALTER TABLE node_runs ADD COLUMN started_seq INTEGER;
ALTER TABLE node_runs ADD COLUMN finished_seq INTEGER;
",
    // 3: approvals a paused run waits for (safe mode), and the decisions made on them until
    // the run has resumed. No foreign key: the request may be written before the writer
    // thread has inserted the run row.
    r"
CREATE TABLE pending_approvals (
    run_id          TEXT NOT NULL,
    node_id         TEXT NOT NULL,
    action          TEXT NOT NULL,
    arguments_json  TEXT NOT NULL,
    checkpoint_json TEXT,
    requested_at_ms INTEGER NOT NULL,
    decision_json   TEXT,
    PRIMARY KEY (run_id, node_id)
) STRICT;
",
    // 4: large values are stored once per run, keyed by the SHA-256 of their JSON text
    // (deflated, or only a preview beyond the size cap); rows refer to them. Rows written
    // before keep their values inline, which readers still understand.
    r"
CREATE TABLE run_values (
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    hash            TEXT NOT NULL,
    size            INTEGER NOT NULL,
    encoding        TEXT NOT NULL,
    data            BLOB NOT NULL,
    PRIMARY KEY (run_id, hash)
) STRICT;
",
    // 5: the workspace a run's file blocks used, so resuming it elsewhere uses it again.
    r"
CREATE TABLE run_workspaces (
    run_id          TEXT PRIMARY KEY NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    workspace       TEXT NOT NULL
) STRICT;
",
    // 6: an approval is decided once: who decided it (the owner token of the deciding
    // process) and when, so a second `approve` reports the first instead of acting again;
    // what the approved node will do (its configuration with its inputs), shown to the
    // person; and the content of every graph file a run calls, which it resumes with.
    r"
ALTER TABLE pending_approvals ADD COLUMN decided_by TEXT;
ALTER TABLE pending_approvals ADD COLUMN decided_at_ms INTEGER;
ALTER TABLE pending_approvals ADD COLUMN details_json TEXT;
CREATE TABLE run_graph_files (
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    path            TEXT NOT NULL,
    content         TEXT NOT NULL,
    PRIMARY KEY (run_id, path)
) STRICT;
",
    // 7: the runs of graph files their user had not trusted, so resuming one after an
    // approval still gets no credential unless the file has been trusted since.
    r"
CREATE TABLE untrusted_runs (
    run_id          TEXT PRIMARY KEY NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    graph_file      TEXT NOT NULL
) STRICT;
",
    // 8: runs that ran on another machine (`agentloom submit --wait`): the worker that ran
    // them, as it named itself.
    r"
CREATE TABLE remote_runs (
    run_id          TEXT PRIMARY KEY NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    worker          TEXT NOT NULL
) STRICT;
",
    // 9: the responses of a run's outbound calls, to replay it (`run --replay`); and
    // evaluations (`agentloom eval`): one row each, and the runs of their cases.
    r"
CREATE TABLE run_calls (
    run_id          TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    node_id         TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    request_hash    TEXT NOT NULL,
    method          TEXT NOT NULL,
    url             TEXT NOT NULL,
    status          INTEGER NOT NULL,
    headers_json    TEXT NOT NULL,
    response_json   TEXT,
    body_size       INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;
CREATE TABLE evaluations (
    id              TEXT PRIMARY KEY NOT NULL,
    graph_name      TEXT NOT NULL,
    graph_file      TEXT NOT NULL,
    cases_file      TEXT NOT NULL,
    started_at_ms   INTEGER NOT NULL,
    duration_ms     INTEGER,
    passed          INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0,
    pass_rate       REAL,
    input_tokens    INTEGER NOT NULL DEFAULT 0,
    output_tokens   INTEGER NOT NULL DEFAULT 0,
    cost_usd        REAL NOT NULL DEFAULT 0,
    summary_json    TEXT
) STRICT;
CREATE INDEX evaluations_by_graph ON evaluations (graph_file, started_at_ms);
CREATE TABLE evaluation_runs (
    evaluation_id   TEXT NOT NULL REFERENCES evaluations (id) ON DELETE CASCADE,
    case_name       TEXT NOT NULL,
    repeat          INTEGER NOT NULL,
    run_id          TEXT NOT NULL,
    passed          INTEGER NOT NULL,
    checks_json     TEXT NOT NULL,
    PRIMARY KEY (evaluation_id, case_name, repeat)
) STRICT;
",
    // 10: a large graph is stored deflated (`graph_json` is then empty): as text it cost the
    // writer three copies of itself at the start of a run, and the file its whole size.
    r"
ALTER TABLE run_graphs ADD COLUMN graph_deflated BLOB;
",
    // 11: each graph's memory across runs (`memory.get`/`memory.set`, an agent's notes),
    // keyed by the graph's file or, without one, its name.
    r"
CREATE TABLE graph_memory (
    graph           TEXT NOT NULL,
    key             TEXT NOT NULL,
    value_json      TEXT NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    run_id          TEXT NOT NULL,
    PRIMARY KEY (graph, key)
) STRICT, WITHOUT ROWID;
",
    // 12: the debugger: the breakpoints a run was started with (not part of its graph), a
    // run paused at one (the node path, before or after, the values shown and the decision
    // made on them until the run has continued), and a fork's parent run with its edits
    // and what changed in the graph since the parent ran. No foreign keys: they may be
    // written before the writer thread has inserted the run row.
    r"
CREATE TABLE run_breakpoints (
    run_id            TEXT PRIMARY KEY NOT NULL,
    breakpoints_json  TEXT NOT NULL
) STRICT;
CREATE TABLE pending_breakpoints (
    run_id          TEXT NOT NULL,
    node_path       TEXT NOT NULL,
    at              TEXT NOT NULL,
    hit_json        TEXT NOT NULL,
    requested_at_ms INTEGER NOT NULL,
    decision_json   TEXT,
    decided_by      TEXT,
    decided_at_ms   INTEGER,
    PRIMARY KEY (run_id, node_path, at)
) STRICT;
CREATE TABLE run_forks (
    run_id          TEXT PRIMARY KEY NOT NULL,
    parent_run_id   TEXT NOT NULL,
    edits_json      TEXT NOT NULL,
    changes_json    TEXT NOT NULL
) STRICT;
CREATE INDEX run_forks_by_parent ON run_forks (parent_run_id);
",
    // 13: whether redaction replaced a secret in the outputs a node finished with (1), or
    // not (0): such outputs are not the node's own, and a seed does not hand them on. NULL
    // for rows written before: read as redacted when they hold the marker.
    r"
ALTER TABLE node_runs ADD COLUMN outputs_redacted INTEGER;
",
    // 14: a graph's newest runs found without walking every other graph's (the app's
    // History, the editing tools' `explain_run`), which walked every run of every graph.
    r"
CREATE INDEX runs_by_graph ON runs (graph_name, started_at_ms DESC, id DESC);
",
];

/// The schema version this build writes.
#[allow(clippy::cast_possible_truncation, reason = "a handful of steps")]
pub(crate) const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Brings the database up to [`SCHEMA_VERSION`]; refuses one written by a newer build.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let found = user_version(conn).map_err(|source| StoreError::open(path, source))?;
    check_not_newer(found, path)?;
    for (index, step) in MIGRATIONS.iter().enumerate() {
        let version = index + 1;
        #[allow(clippy::cast_possible_wrap, reason = "a handful of steps")]
        let version_i64 = version as i64;
        if found >= version_i64 {
            continue;
        }
        let migrate_error = |source| StoreError::Migrate {
            path: path.to_owned(),
            version,
            source,
        };
        // IMMEDIATE: two processes opening a fresh file at once apply each step only once.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(migrate_error)?;
        let current = user_version(&tx).map_err(migrate_error)?;
        check_not_newer(current, path)?;
        if current >= version_i64 {
            continue;
        }
        tx.execute_batch(step).map_err(migrate_error)?;
        tx.pragma_update(None, "user_version", version_i64)
            .map_err(migrate_error)?;
        tx.commit().map_err(migrate_error)?;
    }
    Ok(())
}

fn check_not_newer(found: i64, path: &Path) -> Result<(), StoreError> {
    if found > i64::from(SCHEMA_VERSION) {
        return Err(StoreError::NewerSchema {
            path: path.to_owned(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    Ok(())
}
