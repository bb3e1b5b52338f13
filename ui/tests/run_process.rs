//! `agentloom run` of a long graph end to end: the real binary, a graph file of thousands of
//! nodes read once, the SQLite run log checked straight in the file after the process has
//! returned.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

/// Nodes in the chain: enough that the run log is written in several batches.
const NODES: usize = 5_000;

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG");
    cmd
}

/// A constant, `NODES - 2` passthroughs and the graph's output `out`.
fn chain_graph(dir: &Path) -> PathBuf {
    let mut nodes = vec![json!({"id": "n0", "block": "data.constant", "config": {"value": 42}})];
    let mut edges = Vec::new();
    for i in 1..NODES - 1 {
        nodes.push(json!({"id": format!("n{i}"), "block": "control.passthrough"}));
        edges.push(
            json!({"from": [format!("n{}", i - 1), "value"], "to": [format!("n{i}"), "value"]}),
        );
    }
    nodes.push(json!({"id": "out", "block": "graph.output", "config": {"name": "out"}}));
    edges.push(json!({"from": [format!("n{}", NODES - 2), "value"], "to": ["out", "value"]}));
    let path = dir.join("chain.agentloom.json");
    let graph = json!({"format": "agentloom.graph", "version": 1, "name": "chain",
        "nodes": nodes, "edges": edges});
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();
    path
}

fn run_chain(dir: &Path, graph: &Path, db: &Path, json: bool) -> Output {
    let mut cmd = bin();
    cmd.arg("run").arg(graph).arg("--db").arg(db);
    cmd.arg("--workspace")
        .arg(dir)
        .env("HOME", dir.join("home"));
    if json {
        cmd.arg("--json");
    }
    cmd.output().unwrap()
}

/// The run's status, its node rows, those done, and its `run_finished` events: read from
/// the file with SQLite itself.
fn logged(db: &Path, run_id: &str) -> (String, usize, usize, usize) {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let status: String = conn
        .query_row("SELECT status FROM runs WHERE id = ?1", [run_id], |row| {
            row.get(0)
        })
        .unwrap();
    let count = |sql: &str| -> usize {
        conn.query_row(sql, [run_id], |row| row.get::<_, i64>(0))
            .map(|n| usize::try_from(n).unwrap())
            .unwrap()
    };
    let nodes = count("SELECT count(*) FROM node_runs WHERE run_id = ?1");
    let done = count("SELECT count(*) FROM node_runs WHERE run_id = ?1 AND status = 'done'");
    let finished = count("SELECT count(*) FROM events WHERE run_id = ?1 AND kind = 'run_finished'");
    (status, nodes, done, finished)
}

#[test]
fn a_long_run_is_wholly_in_the_run_log_when_run_returns() {
    let dir = tempfile::tempdir().unwrap();
    let graph = chain_graph(dir.path());
    let db = dir.path().join("runs.sqlite3");

    // The JSON report: one object, every node done, exit 0.
    let ran = run_chain(dir.path(), &graph, &db, true);
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let report: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert_eq!(report["status"], "completed");
    assert_eq!(report["outputs"]["out"], 42);
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), NODES);
    assert!(nodes.iter().all(|n| n["status"] == "done"));
    let run_id = report["run_id"].as_str().unwrap();
    // The process has exited: every row it wrote is in the file now.
    assert_eq!(
        logged(&db, run_id),
        ("completed".to_owned(), NODES, NODES, 1)
    );

    // As text: the output on stdout, the outcome on stderr, exit 0; logged just the same.
    let ran = run_chain(dir.path(), &graph, &db, false);
    assert_eq!(ran.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "out: 42\n");
    let stderr = String::from_utf8_lossy(&ran.stderr);
    let outcome = stderr.lines().last().unwrap();
    assert!(
        outcome.starts_with("run ") && outcome.contains(" completed in "),
        "{stderr}"
    );
    let run_id = outcome.split_whitespace().nth(1).unwrap();
    assert_eq!(
        logged(&db, run_id),
        ("completed".to_owned(), NODES, NODES, 1)
    );
}

#[test]
fn a_damaged_long_graph_file_names_the_place_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let graph = chain_graph(dir.path());
    let db = dir.path().join("runs.sqlite3");
    // The same key twice, deep in the file.
    let text = std::fs::read_to_string(&graph).unwrap().replacen(
        "\"block\": \"control.passthrough\"",
        "\"block\": \"control.passthrough\", \"block\": \"data.constant\"",
        1,
    );
    std::fs::write(&graph, text).unwrap();
    let ran = run_chain(dir.path(), &graph, &db, true);
    assert_eq!(ran.status.code(), Some(2));
    assert!(ran.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(
        stderr.contains("duplicate key `block` in $.nodes[1]"),
        "{stderr}"
    );
    assert!(stderr.contains("chain.agentloom.json"), "{stderr}");
    assert!(!db.exists(), "nothing ran, so nothing was logged");
}
