//! A graph's memory across runs, end to end: `agentloom run` twice on real graph files
//! with a real SQLite run log.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn run(graph: &Path, db: &Path, workspace: &Path, inputs: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG")
        .arg("run")
        .arg(graph)
        .arg("--json")
        .arg("--db")
        .arg(db)
        .arg("--workspace")
        .arg(workspace);
    for input in inputs {
        cmd.arg("--input").arg(input);
    }
    cmd.output().expect("agentloom starts")
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// A graph that counts its own runs: recall `runs` (0 when not kept), add one, remember
/// it, output it.
fn counter_graph(dir: &Path, file: &str) -> PathBuf {
    let graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "Counter",
        "nodes": [
            {"id": "recall", "block": "memory.get", "position": [0, 0],
             "config": {"key": "runs", "default": 0}},
            {"id": "next", "block": "text.template", "position": [200, 0],
             "config": {"template": "{{ value + 1 }}"}},
            {"id": "parse", "block": "json.parse", "position": [400, 0], "config": {}},
            {"id": "remember", "block": "memory.set", "position": [600, 0],
             "config": {"key": "runs"}},
            {"id": "count", "block": "graph.output", "position": [800, 0],
             "config": {"name": "count"}}
        ],
        "edges": [
            {"from": ["recall", "value"], "to": ["next", "value"]},
            {"from": ["next", "text"], "to": ["parse", "text"]},
            {"from": ["parse", "value"], "to": ["remember", "value"]},
            {"from": ["remember", "value"], "to": ["count", "value"]}
        ]
    });
    let path = dir.join(file);
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();
    path
}

fn count_of(output: &Output) -> Value {
    let report = report(output);
    assert_eq!(report["status"], "completed", "{report}");
    report["outputs"]["count"].clone()
}

#[test]
fn a_value_set_in_one_run_is_read_by_the_next_and_kept_per_graph() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let first = counter_graph(dir.path(), "counter.agentloom.json");
    assert_eq!(count_of(&run(&first, &db, dir.path(), &[])), json!(1));
    assert_eq!(count_of(&run(&first, &db, dir.path(), &[])), json!(2));
    assert_eq!(count_of(&run(&first, &db, dir.path(), &[])), json!(3));

    // Another file, same graph name: a memory of its own.
    let other_dir = dir.path().join("other");
    std::fs::create_dir(&other_dir).unwrap();
    let other = counter_graph(&other_dir, "counter.agentloom.json");
    assert_eq!(count_of(&run(&other, &db, dir.path(), &[])), json!(1));
    assert_eq!(count_of(&run(&first, &db, dir.path(), &[])), json!(4));

    // The memory is in the run log, keyed by each file, typed JSON.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut rows: Vec<(String, String, String)> = conn
        .prepare("SELECT graph, key, value_json FROM graph_memory ORDER BY graph")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows.sort();
    let first_id = format!("file:{}", first.canonicalize().unwrap().display());
    let other_id = format!("file:{}", other.canonicalize().unwrap().display());
    let mut expected = vec![
        (first_id, "runs".to_owned(), "4".to_owned()),
        (other_id, "runs".to_owned(), "1".to_owned()),
    ];
    expected.sort();
    assert_eq!(rows, expected);
}

#[test]
fn a_value_over_the_cap_fails_the_node_naming_key_and_limit_and_keeps_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "Big note",
        "nodes": [
            {"id": "text", "block": "graph.input", "position": [0, 0],
             "config": {"name": "text", "type": "text"}},
            {"id": "remember", "block": "memory.set", "position": [200, 0],
             "config": {"key": "note"}},
            {"id": "recall", "block": "memory.get", "position": [200, 200],
             "config": {"key": "note"}},
            {"id": "kept", "block": "graph.output", "position": [400, 200],
             "config": {"name": "kept"}}
        ],
        "edges": [
            {"from": ["text", "value"], "to": ["remember", "value"]},
            {"from": ["recall", "value"], "to": ["kept", "value"]}
        ]
    });
    let path = dir.path().join("big.agentloom.json");
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();

    let small = run(&path, &db, dir.path(), &["text=short note"]);
    assert_eq!(report(&small)["status"], "completed", "{}", report(&small));

    let big = format!("text={}", "x".repeat(70 * 1024));
    let output = run(&path, &db, dir.path(), &[&big]);
    let report = report(&output);
    assert_eq!(report["status"], "failed", "{report}");
    let node = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "remember")
        .unwrap();
    let error = node["error"].as_str().unwrap();
    assert!(
        error.contains("memory key `note`") && error.contains("at most 65536 bytes"),
        "{error}"
    );
    assert!(
        !error.contains("xxxx"),
        "the value is not in the message: {error}"
    );

    let conn = rusqlite::Connection::open(&db).unwrap();
    let kept: String = conn
        .query_row(
            "SELECT value_json FROM graph_memory WHERE key = 'note'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, "\"short note\"");
}

#[test]
fn a_run_not_logged_says_it_has_no_memory() {
    let dir = tempfile::tempdir().unwrap();
    let graph = counter_graph(dir.path(), "counter.agentloom.json");
    let output = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .args(["run", "--json", "--no-log", "--workspace"])
        .arg(dir.path())
        .arg(&graph)
        .output()
        .unwrap();
    let report = report(&output);
    assert_eq!(report["status"], "failed", "{report}");
    let text = report.to_string();
    assert!(text.contains("this run has no memory"), "{text}");
}
