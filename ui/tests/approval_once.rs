//! An approval is decided once, a waiting run resumes the graph files it started with, and
//! approval prompts show where a side effect goes: real `agentloom` processes, a real HTTP
//! server on 127.0.0.1 counting the POSTs that reach it, real SQLite run logs.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG").stdin(Stdio::null());
    cmd
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn write_json(path: &Path, doc: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
}

/// A safe-mode graph whose only node POSTs to `url` (configured, not wired).
fn posting_graph(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("post.json");
    write_json(
        &path,
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "post",
            "settings": {"safe_mode": true},
            "nodes": [{"id": "post", "block": "http.request",
                       "config": {"method": "POST", "url": url, "allow_private_network": true}}],
            "edges": []
        }),
    );
    path
}

/// Runs `graph` headless until it waits for an approval; returns the run id.
fn run_until_waiting(graph: &Path, db: &Path, workspace: &Path) -> String {
    // Trusted (its own allow_private_network needs it); its safe mode still asks.
    let output = bin()
        .arg("run")
        .arg(graph)
        .arg("--trust")
        .arg("--json")
        .arg("--db")
        .arg(db)
        .arg("--workspace")
        .arg(workspace)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    report["run_id"].as_str().unwrap().to_owned()
}

/// Starts `agentloom VERB RUN_ID --db DB` for every verb at once; their outputs.
fn decide_together(verbs: &[&str], run_id: &str, db: &Path) -> Vec<Output> {
    let children: Vec<_> = verbs
        .iter()
        .map(|verb| {
            bin()
                .args([verb, run_id])
                .arg("--db")
                .arg(db)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect()
}

fn show_json(run_id: &str, db: &Path) -> Value {
    let output = bin()
        .args(["show", run_id, "--json"])
        .arg("--db")
        .arg(db)
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn three_approvals_started_together_resume_the_run_once() {
    let server = agentloom_tests::PostCounter::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = posting_graph(dir.path(), &server.url());
    for round in 1..=3 {
        let run_id = run_until_waiting(&graph, &db, dir.path());
        let outputs = decide_together(&["approve", "approve", "approve"], &run_id, &db);
        let resumed: Vec<&Output> = outputs.iter().filter(|o| o.status.success()).collect();
        assert_eq!(resumed.len(), 1, "exactly one approve resumes the run");
        for loser in outputs.iter().filter(|o| !o.status.success()) {
            assert_eq!(loser.status.code(), Some(2), "{}", stderr(loser));
            let text = stderr(loser);
            assert!(
                text.contains("was already approved by process")
                    || text.contains("not waiting for an approval"),
                "{text}"
            );
        }
        assert_eq!(server.posts(), round, "one POST per approved run");
        assert_eq!(show_json(&run_id, &db)["status"], "completed");
    }
    // A late approve reports the run as done and sends nothing.
    let run_id = run_until_waiting(&graph, &db, dir.path());
    let first = decide_together(&["approve"], &run_id, &db);
    assert!(first[0].status.success(), "{}", stderr(&first[0]));
    let late = decide_together(&["approve"], &run_id, &db);
    assert_eq!(late[0].status.code(), Some(2));
    assert_eq!(server.posts(), 4);
}

#[test]
fn approve_and_reject_started_together_agree_with_what_happened() {
    let server = agentloom_tests::PostCounter::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = posting_graph(dir.path(), &server.url());
    for round in 0..4 {
        let before = server.posts();
        let run_id = run_until_waiting(&graph, &db, dir.path());
        let verbs = if round % 2 == 0 {
            ["approve", "reject"]
        } else {
            ["reject", "approve"]
        };
        let outputs = decide_together(&verbs, &run_id, &db);
        let winners: Vec<usize> = (0..2)
            .filter(|&i| outputs[i].status.code() != Some(2))
            .collect();
        assert_eq!(winners.len(), 1, "one decision counts");
        let loser = &outputs[1 - winners[0]];
        let text = stderr(loser);
        assert!(
            text.contains("was already approved")
                || text.contains("was already rejected")
                || text.contains("not waiting for an approval"),
            "{text}"
        );
        let sent = server.posts() - before;
        let shown = show_json(&run_id, &db);
        let post = shown["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node_id"] == "post")
            .unwrap()
            .clone();
        if verbs[winners[0]] == "approve" {
            assert_eq!(sent, 1, "the approval sent the POST once");
            assert_eq!(shown["status"], "completed");
            assert_eq!(post["status"], "done");
        } else {
            assert_eq!(sent, 0, "a rejected POST is never sent");
            assert_eq!(shown["status"], "failed");
            assert!(
                post["error"].as_str().unwrap().contains("was not approved"),
                "{post}"
            );
        }
    }
}

/// parent.json calls child.json, whose `save` writes a file (asked in safe mode).
fn calling_graphs(dir: &Path) -> PathBuf {
    write_json(
        &dir.join("child.json"),
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "child",
            "nodes": [
                {"id": "text", "block": "graph.input", "config": {"name": "text", "default": "kept"}},
                {"id": "save", "block": "file.write", "config": {"path": "saved.txt"}}
            ],
            "edges": [{"from": ["text", "value"], "to": ["save", "content"]}]
        }),
    );
    let parent = dir.join("parent.json");
    write_json(
        &parent,
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "parent",
            "settings": {"safe_mode": true},
            "nodes": [{"id": "call", "block": "graph.call", "config": {"path": "child.json"}}],
            "edges": []
        }),
    );
    parent
}

#[test]
fn an_approved_run_resumes_the_called_graph_it_started_with_not_a_swapped_one() {
    let server = agentloom_tests::PostCounter::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let parent = calling_graphs(dir.path());
    let run_id = run_until_waiting(&parent, &db, dir.path());
    // While the run waits for `call/save` (a file write), the child becomes a POST.
    write_json(
        &dir.path().join("child.json"),
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "child",
            "nodes": [{"id": "save", "block": "http.request",
                       "config": {"method": "POST", "url": server.url(), "allow_private_network": true}}],
            "edges": []
        }),
    );
    let output = bin()
        .args(["approve", &run_id])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(server.posts(), 0, "the swapped child never ran");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("saved.txt")).unwrap(),
        "kept"
    );
}

#[test]
fn the_approval_prompt_shows_the_configured_url_and_method() {
    let server = agentloom_tests::PostCounter::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = posting_graph(dir.path(), &server.url());
    let run_id = run_until_waiting(&graph, &db, dir.path());
    let output = bin()
        .args(["show", &run_id])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("waits for approval"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(&server.url()), "{line}");
    assert!(line.contains("POST"), "{line}");
    assert_eq!(server.posts(), 0);
}
