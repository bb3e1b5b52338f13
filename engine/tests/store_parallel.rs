//! Parallel processes recording runs into one run log lose no row: 8 processes × 50 runs,
//! each process a real OS process (this test binary started again as a worker), and a run
//! log opened while another process still holds the fresh file to set it up.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{GraphDoc, NodeDoc, ValueMap, validate};
use agentloom_engine::{Executor, RunOptions, RunStatus, RunStore};
use serde_json::json;

const WORKER_ENV: &str = "AGENTLOOM_TEST_STORE_WORKER_DB";
const PROCESSES: usize = 8;
const RUNS_EACH: usize = 50;

/// Records one run of a one-node graph into `store`, as `agentloom run` does.
fn record_one_run(store: &RunStore, runtime: &tokio::runtime::Runtime) -> String {
    let registry = Arc::new(Registry::builtin());
    let mut doc = GraphDoc::new("parallel");
    doc.nodes
        .push(NodeDoc::new("c", "data.constant").with_config(json!({"value": 1})));
    let valid = Arc::new(validate(&doc, registry.as_ref()).unwrap());
    let recorder = Arc::new(
        store
            .recorder(&doc)
            .unwrap_or_else(|e| panic!("recorder: {e}")),
    );
    let report = runtime.block_on(Executor::new(registry).run(
        valid,
        ValueMap::new(),
        RunOptions::default(),
        recorder.clone(),
    ));
    assert_eq!(report.status, RunStatus::Completed);
    recorder.finish().unwrap_or_else(|e| panic!("finish: {e}"));
    report.run_id
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One worker process: opens the store afresh for every run, as `agentloom run` does.
fn record_runs(db: &Path) {
    let runtime = runtime();
    for _ in 0..RUNS_EACH {
        let store = RunStore::open(db).unwrap_or_else(|e| panic!("open: {e}"));
        record_one_run(&store, &runtime);
    }
}

#[test]
fn parallel_processes_on_one_run_log_lose_no_run() {
    if let Ok(db) = std::env::var(WORKER_ENV) {
        record_runs(Path::new(&db));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let me = std::env::current_exe().unwrap();
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let mut worker = Command::new(&me);
            worker
                .args([
                    "--exact",
                    "parallel_processes_on_one_run_log_lose_no_run",
                    "--nocapture",
                ])
                .env(WORKER_ENV, &db);
            std::thread::spawn(move || worker.output())
        })
        .collect();
    for worker in workers {
        let output = worker.join().unwrap().unwrap();
        assert!(
            output.status.success(),
            "a worker failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let store = RunStore::open(&db).unwrap();
    let runs = store.list_runs(PROCESSES * RUNS_EACH + 10).unwrap();
    assert_eq!(runs.len(), PROCESSES * RUNS_EACH);
    assert!(runs.iter().all(|r| r.status == RunStatus::Completed));
}

/// A process creating the run log holds the write lock while it switches the fresh file to
/// WAL. SQLite answers a second opener's own switch with "database is locked" at once,
/// without waiting (its busy handler does not cover changing the journal mode); that was how
/// parallel runs on a new `--db` lost their rows. Opening must wait the lock out.
#[test]
fn opening_a_fresh_run_log_while_another_process_sets_it_up_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let holder = rusqlite::Connection::open(&db).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        holder.execute_batch("COMMIT").unwrap();
    });

    let store = RunStore::open(&db).unwrap_or_else(|e| panic!("open while set up elsewhere: {e}"));
    release.join().unwrap();
    let run_id = record_one_run(&store, &runtime());
    let runs = store.list_runs(10).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].id, run_id);
    assert_eq!(runs[0].status, RunStatus::Completed);
}
