use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentloom_core::{GraphDoc, NodeDoc, Usage, Value, ValueMap};
use rusqlite::{Connection, params};

use super::*;
use crate::events::{EventKind, EventSink, NodeStatus, RunEvent, RunStatus};

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("data").join(RUN_LOG_FILE);
    (dir, path)
}

fn graph() -> GraphDoc {
    let mut doc = GraphDoc::new("Summarize");
    doc.nodes.push(NodeDoc::new("fetch", "http.request"));
    doc.nodes.push(NodeDoc::new("summarize", "llm.chat"));
    doc.nodes.push(NodeDoc::new("notify", "control.branch"));
    doc.nodes.push(NodeDoc::new("never", "text.template"));
    doc
}

fn map(pairs: &[(&str, Value)]) -> ValueMap {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn ev(seq: u64, at_ms: u64, kind: EventKind) -> RunEvent {
    RunEvent { seq, at_ms, kind }
}

fn usage(input_tokens: u64, output_tokens: u64, cost_usd: f64) -> Usage {
    Usage {
        input_tokens,
        output_tokens,
        cost_usd,
    }
}

fn run_started(run_id: &str) -> RunEvent {
    ev(
        0,
        0,
        EventKind::RunStarted {
            run_id: run_id.to_owned(),
            graph_name: "Summarize".to_owned(),
            node_count: 4,
            inputs: map(&[("topic", Value::from("rust")), ("n", Value::Integer(3))]),
        },
    )
}

/// A complete run: a node that works, one that streams and is retried, one whose error is
/// caught, one never reached.
fn full_run(run_id: &str) -> Vec<RunEvent> {
    let node = |n: &str| n.to_owned();
    vec![
        run_started(run_id),
        ev(
            1,
            1,
            EventKind::NodeQueued {
                node: node("fetch"),
                block: String::new(),
            },
        ),
        ev(
            2,
            2,
            EventKind::NodeStarted {
                node: node("fetch"),
                attempt: 1,
                inputs: map(&[("url", Value::from("http://127.0.0.1:9/x"))]),
            },
        ),
        ev(
            3,
            40,
            EventKind::NodeFinished {
                node: node("fetch"),
                outputs: map(&[
                    ("body", Value::from("hello")),
                    ("status", Value::Integer(200)),
                    ("raw", Value::bytes(vec![0, 159, 255])),
                ]),
                attempts: 1,
                duration_ms: 38,
                usage: Usage::default(),
                outputs_redacted: None,
            },
        ),
        ev(
            4,
            41,
            EventKind::NodeQueued {
                node: node("summarize"),
                block: String::new(),
            },
        ),
        ev(
            5,
            42,
            EventKind::NodeStarted {
                node: node("summarize"),
                attempt: 1,
                inputs: map(&[("prompt", Value::from("hello"))]),
            },
        ),
        ev(
            6,
            50,
            EventKind::NodeRetrying {
                node: node("summarize"),
                attempt: 1,
                error: "HTTP 429 from the provider".to_owned(),
                wait_ms: 10,
            },
        ),
        ev(
            7,
            60,
            EventKind::NodeStarted {
                node: node("summarize"),
                attempt: 2,
                inputs: map(&[("prompt", Value::from("hello"))]),
            },
        ),
        ev(
            8,
            61,
            EventKind::NodePartial {
                node: node("summarize"),
                port: "text".to_owned(),
                chunk: "Hel".to_owned(),
            },
        ),
        ev(
            9,
            62,
            EventKind::NodePartial {
                node: node("summarize"),
                port: "text".to_owned(),
                chunk: "lo!".to_owned(),
            },
        ),
        ev(
            10,
            70,
            EventKind::NodeUsage {
                node: node("summarize"),
                usage: usage(12, 3, 0.25),
            },
        ),
        ev(
            11,
            71,
            EventKind::NodeFinished {
                node: node("summarize"),
                outputs: map(&[("text", Value::from("Hello!"))]),
                attempts: 2,
                duration_ms: 29,
                usage: usage(12, 3, 0.25),
                outputs_redacted: None,
            },
        ),
        ev(
            12,
            72,
            EventKind::NodeAwaitingApproval {
                node: node("notify"),
            },
        ),
        ev(
            13,
            80,
            EventKind::NodeFailed {
                node: node("notify"),
                error: "the webhook answered 500".to_owned(),
                attempts: 1,
                duration_ms: 8,
                usage: Usage::default(),
                caught: true,
            },
        ),
        ev(
            14,
            81,
            EventKind::RunFinished {
                status: RunStatus::Completed,
                outputs: map(&[("summary", Value::from("Hello!"))]),
                error: None,
                usage: usage(12, 3, 0.25),
                duration_ms: 81,
            },
        ),
    ]
}

fn record(store: &RunStore, events: &[RunEvent]) {
    let recorder = store.recorder(&graph()).unwrap();
    for event in events {
        recorder.emit(event);
    }
    recorder.finish().unwrap();
}

fn raw(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

#[test]
fn open_creates_the_file_its_folders_and_the_schema() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    assert!(path.exists());
    assert_eq!(store.path(), path);
    assert!(store.list_runs(10).unwrap().is_empty());

    let conn = raw(&path);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, i64::from(RunStore::schema_version()));
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        tables,
        [
            "evaluation_runs",
            "evaluations",
            "events",
            "graph_memory",
            "node_runs",
            "pending_approvals",
            "pending_breakpoints",
            "remote_runs",
            "run_breakpoints",
            "run_calls",
            "run_forks",
            "run_graph_files",
            "run_graphs",
            "run_values",
            "run_workspaces",
            "runs",
            "untrusted_runs"
        ]
    );
}

#[test]
fn a_recorded_run_reads_back_in_full_and_survives_reopening() {
    let (_dir, path) = temp_db();
    let run_id = "0193aaaa0000700080000000000000a1";
    let events = full_run(run_id);
    let before = now_ms();
    {
        let store = RunStore::open(&path).unwrap();
        record(&store, &events);
    }
    let store = RunStore::open(&path).unwrap();

    let runs = store.list_runs(10).unwrap();
    assert_eq!(runs.len(), 1);
    let row = &runs[0];
    assert_eq!(row.id, run_id);
    assert_eq!(row.graph_name, "Summarize");
    assert_eq!(row.status, RunStatus::Completed);
    assert_eq!(row.duration_ms, Some(81));
    assert_eq!(row.usage, usage(12, 3, 0.25));
    assert_eq!(row.error, None);
    assert_eq!(row.node_count, 4);
    assert!(
        row.started_at_ms >= before && row.started_at_ms <= now_ms(),
        "{row:?}"
    );
    assert_eq!(row.finished_at_ms, Some(row.started_at_ms + 81));

    let detail = store.get_run(run_id).unwrap().unwrap();
    assert_eq!(&detail.run, row);
    assert_eq!(
        detail.inputs,
        map(&[("n", Value::Integer(3)), ("topic", Value::from("rust"))])
    );
    assert_eq!(detail.outputs, map(&[("summary", Value::from("Hello!"))]));
    assert_eq!(detail.pid, Some(std::process::id()));
    assert_eq!(detail.graph_doc().unwrap(), graph(), "the graph as run");

    let ids: Vec<&str> = detail.nodes.iter().map(|n| n.node_id.as_str()).collect();
    assert_eq!(ids, ["fetch", "never", "notify", "summarize"]);

    let fetch = detail.node("fetch").unwrap();
    assert_eq!(fetch.block, "http.request");
    assert_eq!(fetch.status, NodeStatus::Done);
    assert_eq!(fetch.attempts, 1);
    assert_eq!(fetch.started_at_ms, Some(row.started_at_ms + 2));
    assert_eq!(fetch.finished_at_ms, Some(row.started_at_ms + 40));
    assert_eq!(fetch.duration_ms, Some(38));
    assert_eq!(
        fetch.inputs,
        map(&[("url", Value::from("http://127.0.0.1:9/x"))])
    );
    assert_eq!(
        fetch.outputs.get("raw"),
        Some(&Value::bytes(vec![0, 159, 255]))
    );
    assert_eq!(fetch.outputs.get("status"), Some(&Value::Integer(200)));

    let summarize = detail.node("summarize").unwrap();
    assert_eq!(summarize.block, "llm.chat");
    assert_eq!(summarize.status, NodeStatus::Done);
    assert_eq!(summarize.attempts, 2);
    assert_eq!(
        summarize.started_at_ms,
        Some(row.started_at_ms + 42),
        "first attempt's start"
    );
    assert_eq!(
        summarize.error, None,
        "the retried error is gone once the node succeeded"
    );
    assert_eq!(summarize.usage, usage(12, 3, 0.25));
    assert_eq!(summarize.outputs, map(&[("text", Value::from("Hello!"))]));
    assert!(
        summarize.partial.is_empty(),
        "finished nodes keep no partial output"
    );

    let notify = detail.node("notify").unwrap();
    assert_eq!(notify.status, NodeStatus::Failed);
    assert_eq!(notify.error.as_deref(), Some("the webhook answered 500"));
    assert!(notify.error_caught);

    let never = detail.node("never").unwrap();
    assert_eq!(never.status, NodeStatus::Pending);
    assert_eq!(never.block, "text.template");
    assert_eq!(never.attempts, 0);
    assert_eq!(never.started_at_ms, None);

    // Every event but the streamed chunks and the queued marks, identical (inputs and
    // outputs put back from the node rows) and in order.
    let expected: Vec<RunEvent> = events
        .iter()
        .filter(|e| {
            !matches!(
                e.kind,
                EventKind::NodePartial { .. } | EventKind::NodeQueued { .. }
            )
        })
        .cloned()
        .collect();
    assert_eq!(store.events(run_id).unwrap(), expected);

    let json = serde_json::to_value(&detail).unwrap();
    assert_eq!(json["status"], "completed");
    assert_eq!(json["nodes"][0]["node_id"], "fetch");
    assert_eq!(json["graph"]["name"], "Summarize");
}

#[test]
fn run_start_and_node_rows_reach_the_file_without_an_explicit_flush() {
    // What a process killed mid-run leaves behind: the recorder writes on its own, fast.
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let recorder = store.recorder(&graph()).unwrap();
    let run_id = "0193bbbb000070008000000000000001";
    recorder.emit(&run_started(run_id));
    recorder.emit(&ev(
        1,
        5,
        EventKind::NodeStarted {
            node: "summarize".to_owned(),
            attempt: 1,
            inputs: map(&[("prompt", Value::from("hi"))]),
        },
    ));
    let reader = RunStore::open(&path).unwrap();
    let started = Instant::now();
    let detail = loop {
        if let Some(detail) = reader.get_run(run_id).unwrap()
            && detail.node("summarize").unwrap().status == NodeStatus::Running
        {
            break detail;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "nothing written after 2 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        detail.run.status,
        RunStatus::Running,
        "the recorder's own process is alive"
    );
    assert_eq!(
        detail.nodes.len(),
        4,
        "every graph node has a row from the start"
    );
    recorder.finish().unwrap();
}

#[test]
fn streamed_output_of_a_running_node_is_kept_in_its_row() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let recorder = store.recorder(&graph()).unwrap();
    let run_id = "0193cccc000070008000000000000001";
    recorder.emit(&run_started(run_id));
    recorder.emit(&ev(
        1,
        1,
        EventKind::NodeStarted {
            node: "summarize".to_owned(),
            attempt: 1,
            inputs: ValueMap::new(),
        },
    ));
    for (seq, chunk) in [(2, "Once "), (3, "upon "), (4, "a time")] {
        recorder.emit(&ev(
            seq,
            seq,
            EventKind::NodePartial {
                node: "summarize".to_owned(),
                port: "text".to_owned(),
                chunk: chunk.to_owned(),
            },
        ));
    }
    recorder.flush().unwrap();
    let node = store
        .get_run(run_id)
        .unwrap()
        .unwrap()
        .node("summarize")
        .cloned()
        .unwrap();
    assert_eq!(node.status, NodeStatus::Running);
    assert_eq!(
        node.partial.get("text").map(String::as_str),
        Some("Once upon a time")
    );
    let kinds: Vec<&str> = store
        .events(run_id)
        .unwrap()
        .iter()
        .map(|e| e.kind.name())
        .collect();
    assert_eq!(
        kinds,
        ["run_started", "node_started"],
        "chunks are not stored as events"
    );
    recorder.finish().unwrap();
}

#[test]
fn a_running_run_shows_the_usage_of_its_nodes_so_far() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let recorder = store.recorder(&graph()).unwrap();
    let run_id = "0193cccc000070008000000000000002";
    let node = |n: &str| n.to_owned();
    recorder.emit(&run_started(run_id));
    let usage_of_run = |recorder: &RunRecorder| {
        recorder.flush().unwrap();
        store.get_run(run_id).unwrap().unwrap().run.usage
    };
    recorder.emit(&ev(
        1,
        1,
        EventKind::NodeStarted {
            node: node("summarize"),
            attempt: 1,
            inputs: ValueMap::new(),
        },
    ));
    recorder.emit(&ev(
        2,
        2,
        EventKind::NodeUsage {
            node: node("summarize"),
            usage: usage(10, 2, 0.5),
        },
    ));
    // A sub-run's row is counted in its calling node, not again.
    recorder.emit(&ev(
        3,
        3,
        EventKind::NodeUsage {
            node: node("summarize/inner"),
            usage: usage(100, 100, 9.0),
        },
    ));
    assert_eq!(usage_of_run(&recorder), usage(10, 2, 0.5));
    recorder.emit(&ev(
        4,
        4,
        EventKind::NodeFinished {
            node: node("summarize"),
            outputs: ValueMap::new(),
            attempts: 1,
            duration_ms: 3,
            usage: usage(12, 4, 0.75),
            outputs_redacted: None,
        },
    ));
    recorder.emit(&ev(
        5,
        5,
        EventKind::NodeFailed {
            node: node("fetch"),
            error: "refused".to_owned(),
            attempts: 1,
            duration_ms: 1,
            usage: usage(1, 0, 0.25),
            caught: false,
        },
    ));
    assert_eq!(usage_of_run(&recorder), usage(13, 4, 1.0));
    recorder.finish().unwrap();
}

#[test]
fn runs_are_listed_newest_first_and_found_by_unambiguous_prefix() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let ids = ["0193aa01", "0193aa02", "0193bb01"];
    for id in ids {
        record(&store, &full_run(id));
        // Distinct start times.
        std::thread::sleep(Duration::from_millis(3));
    }
    let listed: Vec<String> = store
        .list_runs(10)
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(listed, ["0193bb01", "0193aa02", "0193aa01"]);
    assert_eq!(store.list_runs(2).unwrap().len(), 2);

    assert_eq!(store.get_run("0193b").unwrap().unwrap().run.id, "0193bb01");
    assert_eq!(
        store.get_run("0193aa02").unwrap().unwrap().run.id,
        "0193aa02"
    );
    assert_eq!(
        store.events("0193bb").unwrap().len(),
        11,
        "15 events less 2 chunks and 2 queued marks"
    );
    assert!(store.get_run("0193c").unwrap().is_none());
    assert!(store.get_run("").unwrap().is_none());
    assert!(store.get_run("%").unwrap().is_none(), "no LIKE wildcards");
    let err = store.get_run("0193a").unwrap_err();
    assert!(matches!(err, StoreError::AmbiguousRunId { .. }));
    let text = err.to_string();
    assert!(
        text.contains("0193aa01") && text.contains("0193aa02") && text.contains("type more"),
        "{text}"
    );

    assert!(store.delete_run("0193aa01").unwrap());
    assert!(!store.delete_run("0193aa01").unwrap());
    assert_eq!(store.get_run("0193a").unwrap().unwrap().run.id, "0193aa02");
    let conn = raw(&path);
    let orphans: i64 = conn
        .query_row(
            "SELECT (SELECT count(*) FROM events WHERE run_id = '0193aa01')
                  + (SELECT count(*) FROM node_runs WHERE run_id = '0193aa01')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0, "deleting a run deletes its nodes and events");
}

#[test]
fn a_run_log_of_schema_1_is_upgraded_keeping_its_runs() {
    let (_dir, path) = temp_db();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    {
        // Schema 1 kept the graph in the `runs` row.
        let conn = raw(&path);
        conn.execute_batch(
            "CREATE TABLE runs (
                id TEXT PRIMARY KEY NOT NULL, graph_name TEXT NOT NULL, graph_json TEXT NOT NULL,
                status TEXT NOT NULL, started_at_ms INTEGER NOT NULL, finished_at_ms INTEGER,
                duration_ms INTEGER, inputs_json TEXT NOT NULL DEFAULT '{}',
                outputs_json TEXT NOT NULL DEFAULT '{}', error TEXT,
                input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
                cost_usd REAL NOT NULL DEFAULT 0, node_count INTEGER NOT NULL DEFAULT 0,
                pid INTEGER, owner TEXT, heartbeat_at_ms INTEGER) STRICT;
             CREATE INDEX runs_by_start ON runs (started_at_ms DESC, id DESC);
             CREATE INDEX runs_by_status ON runs (status);
             CREATE TABLE node_runs (
                run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE, node_id TEXT NOT NULL,
                block TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                started_at_ms INTEGER, finished_at_ms INTEGER, duration_ms INTEGER,
                inputs_json TEXT, outputs_json TEXT, error TEXT,
                error_caught INTEGER NOT NULL DEFAULT 0, skip_reason TEXT, partial_json TEXT,
                input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
                cost_usd REAL NOT NULL DEFAULT 0, PRIMARY KEY (run_id, node_id)) STRICT;
             CREATE TABLE events (
                run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE, seq INTEGER NOT NULL,
                at_ms INTEGER NOT NULL, kind TEXT NOT NULL, node_id TEXT,
                payload_json TEXT NOT NULL, PRIMARY KEY (run_id, seq)) STRICT;
             PRAGMA user_version = 1;",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO runs (id, graph_name, graph_json, status, started_at_ms, finished_at_ms,
                               duration_ms, node_count)
             VALUES ('0193old1', 'old graph', ?1, 'completed', 1000, 1500, 500, 2)",
            [graph().to_json_string()],
        )
        .unwrap();
        // Values were inline in their rows then.
        conn.execute(
            "INSERT INTO node_runs (run_id, node_id, block, status, outputs_json)
             VALUES ('0193old1', 'fetch', 'http.request', 'done', ?1)",
            [format!(r#"{{"body":"{}"}}"#, "x".repeat(5000))],
        )
        .unwrap();
    }
    let store = RunStore::open(&path).unwrap();
    let old = store
        .get_run("0193old1")
        .unwrap()
        .expect("the old run is kept");
    assert_eq!(
        old.node("fetch").unwrap().outputs["body"],
        Value::text("x".repeat(5000)),
        "inline values of old rows still read"
    );
    assert_eq!(old.run.graph_name, "old graph");
    let graph_json: serde_json::Value = serde_json::from_str(&graph().to_json_string()).unwrap();
    assert_eq!(
        old.graph, graph_json,
        "its graph moved to the new table intact"
    );
    record(&store, &full_run("0193new1"));
    let new = store
        .get_run("0193new1")
        .unwrap()
        .expect("a new run is recorded");
    assert_eq!(new.graph_doc().unwrap(), graph());
    assert!(store.delete_run("0193old1").unwrap());
    let graphs: i64 = raw(&path)
        .query_row("SELECT count(*) FROM run_graphs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(graphs, 1, "deleting a run deletes its graph");
}

#[test]
fn a_run_log_from_a_newer_build_is_refused() {
    let (_dir, path) = temp_db();
    drop(RunStore::open(&path).unwrap());
    raw(&path).pragma_update(None, "user_version", 99).unwrap();
    let err = RunStore::open(&path).unwrap_err();
    let known = RunStore::schema_version();
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found: 99,
                known: k,
                ..
            } if k == known
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    let known = RunStore::schema_version();
    assert!(
        text.contains(&format!(
            "newer Agentloom (schema 99, this build knows {known})"
        )),
        "{text}"
    );
    assert!(text.contains("--db"), "{text}");
}

#[test]
fn a_file_that_is_not_a_database_is_refused_with_its_path() {
    let (_dir, path) = temp_db();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        "this is a text file, not a database, and it is long enough to be checked",
    )
    .unwrap();
    let err = RunStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()));
}

#[test]
fn a_folder_that_cannot_be_created_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let path = blocker.join("sub").join(RUN_LOG_FILE);
    let err = RunStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::CreateDir { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&blocker.join("sub").display().to_string()),
        "{err}"
    );
}

/// Records the start of a run and a node left running, then stops the recorder as a
/// killed process would have left it.
fn record_unfinished(store: &RunStore, run_id: &str) {
    record(store, &unfinished(run_id));
}

/// The events of [`record_unfinished`]: `fetch` done, `summarize` running, `notify` queued.
fn unfinished(run_id: &str) -> Vec<RunEvent> {
    vec![
        run_started(run_id),
        ev(
            1,
            3,
            EventKind::NodeFinished {
                node: "fetch".to_owned(),
                outputs: map(&[("body", Value::from("ok"))]),
                attempts: 1,
                duration_ms: 3,
                usage: Usage::default(),
                outputs_redacted: None,
            },
        ),
        ev(
            2,
            4,
            EventKind::NodeStarted {
                node: "summarize".to_owned(),
                attempt: 1,
                inputs: ValueMap::new(),
            },
        ),
        ev(
            3,
            5,
            EventKind::NodeQueued {
                node: "notify".to_owned(),
                block: String::new(),
            },
        ),
        ev(
            4,
            6,
            EventKind::NodeUsage {
                node: "summarize".to_owned(),
                usage: usage(7, 1, 0.5),
            },
        ),
    ]
}

/// The liveness token of a real process that has exited.
#[cfg(target_os = "linux")]
fn dead_owner() -> String {
    let mut dead = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let token = liveness::linux_token(dead.id()).unwrap();
    dead.kill().unwrap();
    dead.wait().unwrap();
    token
}

fn set_owner(path: &Path, run_id: &str, owner: &str, heartbeat_at_ms: u64) {
    let changed = raw(path)
        .execute(
            "UPDATE runs SET owner = ?2, heartbeat_at_ms = ?3 WHERE id = ?1",
            params![run_id, owner, to_i64(heartbeat_at_ms)],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

#[cfg(target_os = "linux")]
#[test]
fn an_interrupted_run_lasts_until_its_last_recorded_event() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    record_unfinished(&store, "dead-run");
    drop(store);
    let dead_token = dead_owner();
    // Died 42 s into the run, before its first heartbeat after the start.
    let started = now_ms() - 100_000;
    raw(&path)
        .execute(
            "UPDATE runs SET started_at_ms = ?2 WHERE id = ?1",
            params!["dead-run", to_i64(started)],
        )
        .unwrap();
    raw(&path)
        .execute(
            "UPDATE events SET at_ms = 42000 WHERE run_id = 'dead-run'
             AND seq = (SELECT max(seq) FROM events WHERE run_id = 'dead-run')",
            [],
        )
        .unwrap();
    set_owner(&path, "dead-run", &dead_token, started);
    let store = RunStore::open(&path).unwrap();
    let run = store.get_run("dead-run").unwrap().unwrap().run;
    assert_eq!(run.status, RunStatus::Interrupted);
    assert_eq!(run.duration_ms, Some(42_000));
    assert_eq!(run.finished_at_ms, Some(started + 42_000));
}

#[cfg(target_os = "linux")]
#[test]
fn a_run_left_running_by_a_dead_process_is_interrupted_on_reopen() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    record_unfinished(&store, "dead-run");
    record_unfinished(&store, "live-run");
    drop(store);

    // A real process that recorded "dead-run" and is gone, one that is still alive.
    let dead_token = dead_owner();
    let mut live = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let live_token = liveness::linux_token(live.id()).unwrap();
    let last_seen = now_ms() - 1_000;
    set_owner(&path, "dead-run", &dead_token, last_seen);
    set_owner(&path, "live-run", &live_token, last_seen);

    let store = RunStore::open(&path).unwrap();
    let dead_run = store.get_run("dead-run").unwrap().unwrap();
    assert_eq!(dead_run.run.status, RunStatus::Interrupted);
    // The later of the last heartbeat and the last event recorded.
    assert!(dead_run.run.finished_at_ms.unwrap() >= last_seen);
    assert!(
        dead_run
            .run
            .error
            .as_deref()
            .unwrap()
            .contains("stopped before the run finished")
    );
    assert_eq!(dead_run.run.usage, usage(7, 1, 0.5), "usage so far is kept");
    assert_eq!(dead_run.node("fetch").unwrap().status, NodeStatus::Done);
    assert_eq!(
        dead_run.node("fetch").unwrap().outputs,
        map(&[("body", Value::from("ok"))])
    );
    let summarize = dead_run.node("summarize").unwrap();
    assert_eq!(summarize.status, NodeStatus::Failed);
    assert_eq!(
        summarize.error.as_deref(),
        Some("interrupted: the process stopped while this node was running")
    );
    assert_eq!(
        dead_run.node("notify").unwrap().error.as_deref(),
        Some("interrupted: the process stopped while this node was queued")
    );
    assert_eq!(dead_run.node("never").unwrap().status, NodeStatus::Pending);

    assert_eq!(
        store.get_run("live-run").unwrap().unwrap().run.status,
        RunStatus::Running
    );
    live.kill().unwrap();
    live.wait().unwrap();
    assert_eq!(store.recover_interrupted().unwrap(), ["live-run"]);
    assert_eq!(
        store.get_run("live-run").unwrap().unwrap().run.status,
        RunStatus::Interrupted
    );
    assert!(store.recover_interrupted().unwrap().is_empty());
}

/// A process killed (kill -9) while it asked a person: the run log lists the run `waiting`,
/// with a running branch beside the node that asks. The next open ends it as a paused run:
/// still waiting and resumable, the asking node awaiting approval, the rest pending.
#[cfg(target_os = "linux")]
#[test]
fn a_run_killed_while_it_asked_a_person_is_left_consistent_and_waiting() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let mut events = unfinished("asked-run");
    events.extend([
        ev(
            5,
            7,
            EventKind::NodeStarted {
                node: "notify".to_owned(),
                attempt: 1,
                inputs: ValueMap::new(),
            },
        ),
        ev(
            6,
            8,
            EventKind::NodeAwaitingApproval {
                node: "notify".to_owned(),
            },
        ),
        // Asked, then its request lost with the process before it was stored.
        ev(
            7,
            9,
            EventKind::NodeAwaitingApproval {
                node: "never".to_owned(),
            },
        ),
    ]);
    record(&store, &events);
    let request = agentloom_core::ApprovalRequest {
        action: "Notify".to_owned(),
        arguments: Value::from("hello"),
        checkpoint: None,
        details: None,
    };
    store
        .save_approval_request("asked-run", "notify", &request)
        .unwrap();
    drop(store);
    let last_seen = now_ms() - 1_000;
    set_owner(&path, "asked-run", &dead_owner(), last_seen);
    assert_eq!(
        raw(&path)
            .query_row("SELECT status FROM runs WHERE id = 'asked-run'", [], |r| {
                r.get::<_, String>(0)
            })
            .unwrap(),
        "waiting",
        "listed waiting while it asked"
    );

    let store = RunStore::open(&path).unwrap();
    let run = store.get_run("asked-run").unwrap().unwrap();
    assert_eq!(run.run.status, RunStatus::Waiting);
    assert!(
        run.run.finished_at_ms.unwrap() >= last_seen,
        "{:?}",
        run.run
    );
    assert_eq!(run.run.error.as_deref(), Some("waiting for approval"));
    assert_eq!(run.node("fetch").unwrap().status, NodeStatus::Done);
    assert_eq!(
        run.node("notify").unwrap().status,
        NodeStatus::AwaitingApproval
    );
    for node in ["summarize", "never"] {
        let row = run.node(node).unwrap();
        assert_eq!(row.status, NodeStatus::Pending, "{node}");
        assert_eq!(row.error, None, "{node}");
    }
    assert_eq!(run.run.usage, usage(7, 1, 0.5), "usage so far is kept");
    // Decided later, as any paused run.
    let decision = store.pending_approvals("asked-run").unwrap()[0]
        .request
        .approve_as_is();
    assert_eq!(
        store
            .claim_decision("asked-run", "notify", &decision)
            .unwrap(),
        Claim::Won
    );
    // Nothing left to recover on the next open.
    assert!(store.recover_interrupted().unwrap().is_empty());
}

#[test]
fn an_uncheckable_owner_is_judged_by_its_heartbeat() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    record_unfinished(&store, "stale");
    record_unfinished(&store, "fresh");
    set_owner(
        &path,
        "stale",
        "proc:0193ffff",
        now_ms() - 2 * liveness::STALE_HEARTBEAT_MS,
    );
    set_owner(&path, "fresh", "proc:0193eeee", now_ms());
    assert_eq!(store.recover_interrupted().unwrap(), ["stale"]);
    assert_eq!(
        store.get_run("stale").unwrap().unwrap().run.status,
        RunStatus::Interrupted
    );
    assert_eq!(
        store.get_run("fresh").unwrap().unwrap().run.status,
        RunStatus::Running
    );
}

#[test]
fn a_run_of_this_process_is_never_interrupted_and_finishes_normally() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let recorder = store.recorder(&graph()).unwrap();
    let events = full_run("mine");
    let (start, rest) = events.split_at(3);
    for event in start {
        recorder.emit(event);
    }
    recorder.flush().unwrap();
    // Another window or CLI opening the log meanwhile leaves the run alone.
    let other = RunStore::open(&path).unwrap();
    assert_eq!(
        other.get_run("mine").unwrap().unwrap().run.status,
        RunStatus::Running
    );
    for event in rest {
        recorder.emit(event);
    }
    recorder.finish().unwrap();
    recorder.finish().unwrap();
    // Events after finish are dropped, not written and not a panic.
    recorder.emit(&run_started("after"));
    assert_eq!(
        other.get_run("mine").unwrap().unwrap().run.status,
        RunStatus::Completed
    );
    assert!(other.get_run("after").unwrap().is_none());
}

#[test]
fn events_before_run_started_are_ignored_and_a_rerun_id_starts_clean() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let recorder = store.recorder(&graph()).unwrap();
    recorder.emit(&ev(
        0,
        0,
        EventKind::NodeQueued {
            node: "fetch".to_owned(),
            block: String::new(),
        },
    ));
    recorder.finish().unwrap();
    assert!(store.list_runs(10).unwrap().is_empty());

    record(&store, &full_run("same"));
    record(&store, &[run_started("same")]);
    let detail = store.get_run("same").unwrap().unwrap();
    assert_eq!(detail.run.status, RunStatus::Running);
    assert_eq!(detail.node("fetch").unwrap().status, NodeStatus::Pending);
    assert_eq!(store.events("same").unwrap().len(), 1);
}

/// Set in the child process of the kill test: the database it records into.
#[cfg(target_os = "linux")]
const CHILD_DB_ENV: &str = "AGENTLOOM_STORE_TEST_CHILD_DB";

#[cfg(target_os = "linux")]
#[test]
fn a_recording_process_killed_mid_run_leaves_an_interrupted_run() {
    if let Some(path) = std::env::var_os(CHILD_DB_ENV) {
        // The child: start recording a run, then hang until killed.
        let store = RunStore::open(Path::new(&path)).unwrap();
        let recorder = store.recorder(&graph()).unwrap();
        recorder.emit(&run_started("killed"));
        recorder.emit(&ev(
            1,
            1,
            EventKind::NodeStarted {
                node: "summarize".to_owned(),
                attempt: 1,
                inputs: map(&[("prompt", Value::from("hi"))]),
            },
        ));
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let (_dir, path) = temp_db();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::tests::a_recording_process_killed_mid_run_leaves_an_interrupted_run",
            "--nocapture",
        ])
        .env(CHILD_DB_ENV, &path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let running = path.exists()
            && RunStore::open(&path)
                .unwrap()
                .get_run("killed")
                .unwrap()
                .and_then(|run| {
                    run.node("summarize")
                        .map(|n| n.status == NodeStatus::Running)
                })
                .unwrap_or(false);
        if running {
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the child process recorded nothing within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no final flush.
    child.wait().unwrap();

    let store = RunStore::open(&path).unwrap();
    let run = store.get_run("killed").unwrap().unwrap();
    assert_eq!(run.run.status, RunStatus::Interrupted);
    assert_eq!(run.node("summarize").unwrap().status, NodeStatus::Failed);
    assert_eq!(
        run.node("summarize").unwrap().inputs,
        map(&[("prompt", Value::from("hi"))])
    );
    assert_eq!(store.events("killed").unwrap().len(), 2);
}

#[test]
fn a_run_keeps_its_workspace_until_it_is_deleted() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    record(&store, &full_run("0193ws01"));
    assert_eq!(store.run_workspace("0193ws01").unwrap(), None);
    store
        .record_workspace("0193ws01", Path::new("/home/ada/project"))
        .unwrap();
    store
        .record_workspace("0193ws01", Path::new("/home/ada/elsewhere"))
        .unwrap();
    assert_eq!(
        store.run_workspace("0193ws01").unwrap(),
        Some(PathBuf::from("/home/ada/elsewhere"))
    );
    // Only for a run in the log, and gone with it.
    assert!(
        store
            .record_workspace("0193none", Path::new("/tmp"))
            .is_err()
    );
    assert!(store.delete_run("0193ws01").unwrap());
    let left: i64 = raw(&path)
        .query_row("SELECT count(*) FROM run_workspaces", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 0);
}

#[test]
fn a_log_made_self_contained_copies_as_one_file_with_every_run() {
    let (dir, path) = temp_db();
    let run_id = "0193aaaa0000700080000000000000c3";
    let store = RunStore::open(&path).unwrap();
    record(&store, &full_run(run_id));
    store.make_self_contained().unwrap();

    // The user copies `runs.sqlite3` alone, while the app that wrote it still has it open.
    let copy = dir.path().join("copied.sqlite3");
    std::fs::copy(&path, &copy).unwrap();
    let wal = path.with_file_name(format!(
        "{}-wal",
        path.file_name().unwrap().to_string_lossy()
    ));
    assert_eq!(
        std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0),
        0,
        "the WAL still holds pages"
    );
    let copied = RunStore::open(&copy).unwrap();
    let runs = copied.list_runs(10).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].id, run_id);
    let original = store.get_run(run_id).unwrap().unwrap();
    let copied = copied.get_run(run_id).unwrap().unwrap();
    assert_eq!(copied.nodes.len(), original.nodes.len());
    assert_eq!(copied.outputs, original.outputs);
}

#[test]
fn many_runs_recorded_by_one_store_one_after_another_and_at_once_each_keep_their_own_rows() {
    // A store hands a finished recording's connection to the next one: nothing of a run
    // may leak into the next run written on the same connection.
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let id = |thread: usize, i: usize| format!("0193aaaa00007000800000000{thread:02}{i:05}");
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let store = &store;
            scope.spawn(move || {
                for i in 0..10 {
                    let run_id = id(thread, i);
                    if i % 2 == 0 {
                        record(store, &full_run(&run_id));
                    } else {
                        record_unfinished(store, &run_id);
                    }
                }
            });
        }
    });
    let store = RunStore::open(&path).unwrap();
    for thread in 0..4 {
        for i in 0..10 {
            let run_id = id(thread, i);
            let detail = store.get_run(&run_id).unwrap().unwrap();
            let nodes: Vec<(&str, NodeStatus)> = detail
                .nodes
                .iter()
                .map(|n| (n.node_id.as_str(), n.status))
                .collect();
            if i % 2 == 0 {
                assert_eq!(detail.run.status, RunStatus::Completed, "{run_id}");
                assert_eq!(detail.outputs, map(&[("summary", Value::from("Hello!"))]));
                assert_eq!(detail.run.usage, usage(12, 3, 0.25), "{run_id}");
                assert_eq!(nodes.len(), 4, "{run_id}: {nodes:?}");
            } else {
                // Left running by this (live) process, then read by a second store.
                assert_eq!(detail.run.usage, usage(7, 1, 0.5), "{run_id}");
                assert!(detail.outputs.is_empty(), "{run_id}: {:?}", detail.outputs);
                assert_eq!(
                    nodes,
                    [
                        ("fetch", NodeStatus::Done),
                        ("never", NodeStatus::Pending),
                        ("notify", NodeStatus::Queued),
                        ("summarize", NodeStatus::Running)
                    ],
                    "{run_id}"
                );
            }
        }
    }
}

#[test]
fn a_large_graph_is_stored_deflated_and_reads_back_whole_a_small_one_stays_text() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let mut large = GraphDoc::new("Large");
    for i in 0..2_000 {
        large
            .nodes
            .push(NodeDoc::new(format!("n{i}"), "text.template").with_config(
                serde_json::json!({"template": format!("step {i}: {{{{ value }}}}")}),
            ));
    }
    let record_graph = |id: &str, doc: &GraphDoc| {
        let recorder = store.recorder(doc).unwrap();
        let mut start = run_started(id);
        if let EventKind::RunStarted { node_count, .. } = &mut start.kind {
            *node_count = doc.nodes.len();
        }
        recorder.emit(&start);
        recorder.finish().unwrap();
    };
    let (large_id, small_id) = (
        "0193aaaa0000700080000000000000d1",
        "0193aaaa0000700080000000000000d2",
    );
    record_graph(large_id, &large);
    record_graph(small_id, &graph());

    assert_eq!(
        store
            .get_run(large_id)
            .unwrap()
            .unwrap()
            .graph_doc()
            .unwrap(),
        large
    );
    assert_eq!(
        store
            .get_run(small_id)
            .unwrap()
            .unwrap()
            .graph_doc()
            .unwrap(),
        graph()
    );
    let columns = |id: &str| -> (i64, Option<i64>) {
        raw(&path)
            .query_row(
                "SELECT length(graph_json), length(graph_deflated) FROM run_graphs WHERE run_id = ?1",
                [id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap()
    };
    let json_len = i64::try_from(serde_json::to_string(&large).unwrap().len()).unwrap();
    let (text, deflated) = columns(large_id);
    assert_eq!(text, 0);
    let deflated = deflated.unwrap();
    assert!(
        deflated * 5 < json_len,
        "{deflated} bytes deflated from {json_len}"
    );
    // A small graph stays readable in any SQLite tool.
    let (text, deflated) = columns(small_id);
    assert!(text > 0 && deflated.is_none(), "{text} {deflated:?}");

    // A damaged blob is a damaged run, named, not a crash.
    raw(&path)
        .execute(
            "UPDATE run_graphs SET graph_deflated = x'00ff00ff' WHERE run_id = ?1",
            [large_id],
        )
        .unwrap();
    let err = store.get_run(large_id).unwrap_err().to_string();
    assert!(
        err.contains(large_id) && err.contains("does not inflate"),
        "{err}"
    );
}

#[test]
fn a_finished_nodes_row_written_again_keeps_its_values_and_a_rerun_replaces_them() {
    // The writer lets a finished node's values go once its row is in the file; a later
    // change of the row (usage reported late, the node run again) must not lose them.
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    let run_id = "0193aaaa0000700080000000000000e1";
    let recorder = store.recorder(&graph()).unwrap();
    let node = || "fetch".to_owned();
    let finished = |seq, body: &str| {
        ev(
            seq,
            seq,
            EventKind::NodeFinished {
                node: node(),
                outputs: map(&[("body", Value::from(body))]),
                attempts: 1,
                duration_ms: 1,
                usage: Usage::default(),
                outputs_redacted: None,
            },
        )
    };
    let started = |seq, url: &str| {
        ev(
            seq,
            seq,
            EventKind::NodeStarted {
                node: node(),
                attempt: 1,
                inputs: map(&[("url", Value::from(url))]),
            },
        )
    };
    recorder.emit(&run_started(run_id));
    recorder.emit(&started(1, "http://127.0.0.1:9/a"));
    recorder.emit(&finished(2, "first"));
    recorder.flush().unwrap();
    recorder.emit(&ev(
        3,
        3,
        EventKind::NodeUsage {
            node: node(),
            usage: usage(5, 2, 0.125),
        },
    ));
    recorder.flush().unwrap();
    let fetch = store.get_run(run_id).unwrap().unwrap();
    let fetch = fetch.node("fetch").unwrap();
    assert_eq!(fetch.progress.usage, usage(5, 2, 0.125));
    assert_eq!(
        fetch.progress.inputs,
        map(&[("url", Value::from("http://127.0.0.1:9/a"))])
    );
    assert_eq!(
        fetch.progress.outputs,
        map(&[("body", Value::from("first"))])
    );

    // Run again (a loop, a resume): the new values replace the stored ones.
    recorder.emit(&started(4, "http://127.0.0.1:9/b"));
    recorder.emit(&finished(5, "second"));
    recorder.finish().unwrap();
    let detail = store.get_run(run_id).unwrap().unwrap();
    let fetch = detail.node("fetch").unwrap();
    assert_eq!(
        fetch.progress.inputs,
        map(&[("url", Value::from("http://127.0.0.1:9/b"))])
    );
    assert_eq!(
        fetch.progress.outputs,
        map(&[("body", Value::from("second"))])
    );
}

/// Runs the main database file alone holds (a copy without its `-wal`).
fn runs_in_the_file_alone(path: &Path, copy: &Path) -> i64 {
    let _ = std::fs::remove_file(copy);
    std::fs::copy(path, copy).unwrap();
    Connection::open(copy)
        .and_then(|conn| conn.query_row("SELECT count(*) FROM runs", [], |r| r.get(0)))
        .unwrap_or(0)
}

#[test]
fn a_background_checkpointer_moves_recorded_runs_into_the_database_file() {
    let record_five = |store: &RunStore, prefix: &str| {
        for i in 0..5 {
            record(store, &full_run(&format!("{prefix}-{i}")));
        }
    };
    // Two stores on one file, as two `serve` processes: each checkpoints beside the
    // other's recordings, and every run of both reaches the file.
    let (dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    store.checkpoint_in_background().unwrap();
    let other = RunStore::open(&path).unwrap();
    other.checkpoint_in_background().unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| record_five(&other, "other"));
        record_five(&store, "run");
    });
    let copy = dir.path().join("copy.sqlite3");
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs_in_the_file_alone(&path, &copy) < 10 {
        assert!(
            Instant::now() < deadline,
            "the recorded runs never reached the database file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Without it, a few small runs stay in the WAL (SQLite checkpoints at 1,000 pages).
    let (dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    record_five(&store, "run");
    std::thread::sleep(Duration::from_millis(300));
    let copy = dir.path().join("copy.sqlite3");
    assert_eq!(runs_in_the_file_alone(&path, &copy), 0);
    drop(store);
}

#[test]
fn a_graphs_newest_runs_are_found_through_its_own_index() {
    let (_dir, path) = temp_db();
    let store = RunStore::open(&path).unwrap();
    {
        let conn = raw(&path);
        for i in 0..300_i64 {
            let graph = if i % 30 == 0 { "quiet" } else { "busy" };
            conn.execute(
                "INSERT INTO runs (id, graph_name, status, started_at_ms) VALUES (?1, ?2, 'completed', ?3)",
                params![format!("r{i:04}"), graph, 1_000 + i],
            )
            .unwrap();
        }
    }
    let ids = |rows: Vec<crate::store::RunRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_runs_of_graph("quiet", 3).unwrap()),
        ["r0270", "r0240", "r0210"]
    );
    assert_eq!(ids(store.list_runs(2).unwrap()), ["r0299", "r0298"]);
    assert!(store.list_runs_of_graph("none", 3).unwrap().is_empty());

    // Neither walks the other graphs' runs nor sorts them.
    let conn = raw(&path);
    for (of_graph, index) in [(true, "runs_by_graph"), (false, "runs_by_start")] {
        let sql = format!(
            "EXPLAIN QUERY PLAN {}",
            super::queries::newest_runs_sql(of_graph)
        );
        let mut stmt = conn.prepare(&sql).unwrap();
        let detail = |row: &rusqlite::Row<'_>| row.get::<_, String>(3);
        let plan: Vec<String> = if of_graph {
            stmt.query_map(params!["quiet", 3], detail)
                .unwrap()
                .collect::<Result<_, _>>()
        } else {
            stmt.query_map(params![3], detail)
                .unwrap()
                .collect::<Result<_, _>>()
        }
        .unwrap();
        let plan = plan.join("; ");
        assert!(plan.contains(&format!("USING INDEX {index}")), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        if of_graph {
            assert!(plan.starts_with("SEARCH"), "{plan}");
        }
    }
}
