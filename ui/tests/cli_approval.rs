//! Durable approvals and reruns from the command line: real processes, a real `fakellm`
//! peer, real SQLite run logs. A run paused on an approval survives SIGKILL and resumes
//! with `agentloom approve`/`reject` without calling its finished LLM node again;
//! `run --from NODE --reuse RUN_ID` and pinned outputs reuse outputs instead of calling it.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentloom_tests::FakeLlm;
use serde_json::{Value, json};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG")
        .env("AGENTLOOM_SECRET_FAKELLM", "sk-test");
    cmd
}

/// `agentloom ARGS --db DB` with stdin closed (no terminal: approvals pause).
fn agentloom(args: &[&str], db: &Path) -> Output {
    bin()
        .args(args)
        .arg("--db")
        .arg(db)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(output)
        )
    })
}

/// How many requests fakellm's `story` rule answered (read with a plain socket: these tests
/// drive processes and have no async runtime).
fn story_requests(fake: &FakeLlm) -> u64 {
    let mut stream = TcpStream::connect(("127.0.0.1", fake.port())).unwrap();
    stream
        .write_all(b"GET /_fakellm/stats HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let stats: Value = serde_json::from_str(body).unwrap();
    stats["by_rule"]["story"].as_u64().unwrap_or(0)
}

const STORY: &str = "Once upon a time a graph of small blocks learned to stream its words, one by one, to a canvas that waited patiently.";

/// story (LLM) → save (file.write, asked in safe mode) ; story → slow (delay) → out
fn story_graph(dir: &Path, fake: &FakeLlm, safe_mode: bool) -> PathBuf {
    let graph = json!({
        "format": "agentloom.graph",
        "version": 1,
        "name": "story",
        "settings": {"safe_mode": safe_mode},
        "nodes": [
            {"id": "story", "block": "llm.chat", "config": {"credential": "fakellm",
                "base_url": format!("{}/v1", fake.base()), "model": "test-model",
                "prompt": "Tell a story", "stream": false}},
            {"id": "save", "block": "file.write", "config": {"path": "story.txt"}},
            {"id": "slow", "block": "control.delay", "config": {"ms": 2500}},
            {"id": "out", "block": "graph.output", "config": {"name": "story"}}
        ],
        "edges": [
            {"from": ["story", "text"], "to": ["save", "content"]},
            {"from": ["story", "text"], "to": ["slow", "value"]},
            {"from": ["slow", "value"], "to": ["out", "value"]}
        ]
    });
    let path = dir.join("story.json");
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();
    path
}

/// The one run in `db` and the status of node `node` in it, as `agentloom` reads them.
fn run_and_node_status(db: &Path, node: &str) -> Option<(String, String, String)> {
    let runs = stdout_json(&agentloom(&["runs", "--json"], db));
    let run = runs.as_array()?.first()?;
    let id = run["id"].as_str()?.to_owned();
    let detail = stdout_json(&agentloom(&["show", &id, "--json"], db));
    let node_status = detail["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["node_id"] == node)?["status"]
        .as_str()?
        .to_owned();
    Some((id, run["status"].as_str()?.to_owned(), node_status))
}

#[test]
fn a_paused_run_survives_sigkill_and_resumes_with_edited_arguments() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = story_graph(dir.path(), &fake, true);
    // `slow` keeps the process going after `save` paused: it is killed while waiting.
    let mut child = bin()
        .env(
            "AGENTLOOM_SECRET_FAKELLM_HOSTS",
            format!("127.0.0.1:{}", fake.port()),
        )
        .args(["run", "--trust"])
        .arg(&graph)
        .arg("--db")
        .arg(&db)
        .arg("--workspace")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let run_id = loop {
        if let Some((id, _, save)) = run_and_node_status(&db, "save")
            && save == "awaiting_approval"
        {
            break id;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the run never paused"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap(); // SIGKILL on unix
    child.wait().unwrap();
    assert_eq!(story_requests(&fake), 1);

    let (_, status, _) = run_and_node_status(&db, "save").unwrap();
    assert_eq!(
        status, "waiting",
        "a killed run waiting for approval stays waiting"
    );
    let listed = stdout_json(&agentloom(&["runs", "--json"], &db));
    assert_eq!(listed[0]["id"], run_id.as_str());
    assert!(!dir.path().join("story.txt").exists());

    let resumed = bin()
        .args([
            "approve",
            &run_id,
            "--set",
            "content=The edited story.",
            "--json",
        ])
        .arg("--db")
        .arg(&db)
        .arg("--workspace")
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let report = stdout_json(&resumed);
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["run_id"], run_id.as_str());
    assert_eq!(report["outputs"]["story"], STORY);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("story.txt")).unwrap(),
        "The edited story.",
        "exactly the edited side effect"
    );
    assert_eq!(
        story_requests(&fake),
        1,
        "the finished LLM node was called again"
    );
    // The same run: the LLM node keeps the attempt it made before the pause (not run
    // again, as fakellm's count says above) and what it spent.
    let story = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "story")
        .unwrap();
    assert_eq!(story["status"], "done", "{story}");
    assert_eq!(
        story["attempts"], 1,
        "the attempt recorded before the pause"
    );
    assert!(
        story["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{story}"
    );
    assert_eq!(report["usage"], story["usage"], "{report}");

    // Nothing is left to approve.
    let again = agentloom(&["approve", &run_id], &db);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("is completed, not waiting"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn a_headless_run_exits_3_and_a_rejection_fails_it_with_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = dir.path().join("gate.json");
    std::fs::write(
        &graph,
        json!({
            "format": "agentloom.graph",
        "version": 1,
            "name": "gate",
            "nodes": [
                {"id": "text", "block": "data.constant", "config": {"value": "hello"}},
                {"id": "gate", "block": "human.approval", "config": {"action": "Send it?"}},
                {"id": "out", "block": "graph.output", "config": {"name": "sent"}}
            ],
            "edges": [
                {"from": ["text", "value"], "to": ["gate", "value"]},
                {"from": ["gate", "value"], "to": ["out", "value"]}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let paused = agentloom(&["run", graph.to_str().unwrap()], &db);
    assert_eq!(paused.status.code(), Some(3), "{}", stderr(&paused));
    let runs = stdout_json(&agentloom(&["runs", "--json"], &db));
    let run_id = runs[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(runs[0]["status"], "waiting");
    assert!(
        stderr(&paused).contains(&format!("waiting for approval: agentloom approve {run_id}")),
        "{}",
        stderr(&paused)
    );
    let listed = agentloom(&["runs"], &db);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("waiting"));
    let shown = agentloom(&["show", &run_id], &db);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(r#"waits for approval: `gate` Send it? {"value":"hello"}"#),
        "{shown}"
    );

    let rejected = agentloom(
        &["reject", &run_id, "--message", "not today", "--json"],
        &db,
    );
    assert_eq!(rejected.status.code(), Some(1), "{}", stderr(&rejected));
    let report = stdout_json(&rejected);
    assert_eq!(report["status"], "failed");
    assert_eq!(report["error"], "node `gate` failed: rejected: not today");
    assert!(report["outputs"].get("sent").is_none());
}

#[test]
fn run_from_a_node_and_pinned_outputs_reuse_instead_of_calling_the_model() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = story_graph(dir.path(), &fake, false);
    let run = |extra: &[&str]| {
        bin()
            .env(
                "AGENTLOOM_SECRET_FAKELLM_HOSTS",
                format!("127.0.0.1:{}", fake.port()),
            )
            .args(["run", graph.to_str().unwrap(), "--json", "--trust"])
            .args(extra)
            .arg("--db")
            .arg(&db)
            .arg("--workspace")
            .arg(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let first = run(&[]);
    assert!(first.status.success(), "{}", stderr(&first));
    let first_id = stdout_json(&first)["run_id"].as_str().unwrap().to_owned();
    assert_eq!(story_requests(&fake), 1);
    std::fs::remove_file(dir.path().join("story.txt")).unwrap();

    let from = run(&["--from", "save", "--reuse", &first_id]);
    assert!(from.status.success(), "{}", stderr(&from));
    let report = stdout_json(&from);
    assert_ne!(report["run_id"], first_id.as_str());
    assert_eq!(story_requests(&fake), 1, "run from `save` called the model");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("story.txt")).unwrap(),
        STORY
    );
    assert_eq!(report["outputs"]["story"], STORY);

    let unknown = run(&["--from", "nope", "--reuse", &first_id]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("the graph has no node `nope`"),
        "{}",
        stderr(&unknown)
    );

    // Pin the model's answer in the graph file: later runs use it instead of calling.
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&graph).unwrap()).unwrap();
    doc["nodes"][0]["pinned"] = json!({"text": "A pinned story."});
    std::fs::write(&graph, doc.to_string()).unwrap();
    let pinned = run(&[]);
    assert!(pinned.status.success(), "{}", stderr(&pinned));
    assert_eq!(stdout_json(&pinned)["outputs"]["story"], "A pinned story.");
    assert_eq!(story_requests(&fake), 1, "a pinned node called the model");
}

/// `agentloom run GRAPH` on a real terminal, with `typed` as the person's keystrokes.
fn run_at_a_terminal(graph: &Path, dir: &Path, typed: &str) -> (Option<i32>, String) {
    agentloom_tests::at_a_terminal(
        Path::new(env!("CARGO_BIN_EXE_agentloom")),
        &[
            "run".as_ref(),
            graph.as_os_str(),
            "--no-log".as_ref(),
            "--workspace".as_ref(),
            dir.as_os_str(),
        ],
        &[],
        typed,
    )
}

/// note (constant) → save (file.write, asked in safe mode)
fn note_graph(dir: &Path) -> PathBuf {
    let graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "note",
        "settings": {"safe_mode": true},
        "nodes": [
            {"id": "note", "block": "data.constant", "config": {"value": "as generated"}},
            {"id": "save", "block": "file.write", "config": {"path": "note.txt"}}
        ],
        "edges": [{"from": ["note", "value"], "to": ["save", "content"]}]
    });
    let path = dir.join("note.json");
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();
    path
}

#[test]
fn at_a_terminal_the_arguments_can_be_edited_before_approving() {
    let dir = tempfile::tempdir().unwrap();
    let graph = note_graph(dir.path());
    let (code, shown) = run_at_a_terminal(
        &graph,
        dir.path(),
        "e\n{\"content\": \"edited by hand\"}\ny\n",
    );
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("`save` wants to: "), "{shown}");
    assert!(shown.contains("\"content\": \"as generated\""), "{shown}");
    assert!(shown.contains("[e]dit arguments"), "{shown}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "edited by hand"
    );
}

#[test]
fn at_a_terminal_typing_a_reason_rejects_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let graph = note_graph(dir.path());
    let (code, shown) =
        run_at_a_terminal(&graph, dir.path(), "not into the workspace root please\n");
    assert_eq!(code, Some(1), "{shown}");
    assert!(
        shown.contains("`save` was not approved: not into the workspace root please"),
        "{shown}"
    );
    assert!(!dir.path().join("note.txt").exists());
}

/// `agentloom approve` resumes a paused run in the folder it started in, wherever it is
/// typed; a folder that is gone is named, with the way out.
#[test]
fn approving_resumes_in_the_workspace_the_run_started_in() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = note_graph(dir.path());
    let start_in = |folder: &Path| {
        std::fs::create_dir_all(folder).unwrap();
        let paused = bin()
            .current_dir(folder)
            .arg("run")
            .arg(&graph)
            .args(["--json", "--db"])
            .arg(&db)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(paused.status.code(), Some(3), "{}", stderr(&paused));
        stdout_json(&paused)["run_id"].as_str().unwrap().to_owned()
    };
    let approve_from = |folder: &Path, run_id: &str| {
        bin()
            .current_dir(folder)
            .args(["approve", run_id, "--db"])
            .arg(&db)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let started = dir.path().join("project");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();

    let run_id = start_in(&started);
    let resumed = approve_from(&elsewhere, &run_id);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(
        std::fs::read_to_string(started.join("note.txt")).unwrap(),
        "as generated"
    );
    assert!(!elsewhere.join("note.txt").exists());

    let gone = dir.path().join("gone");
    let run_id = start_in(&gone);
    std::fs::remove_dir_all(&gone).unwrap();
    let refused = approve_from(&elsewhere, &run_id);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let said = stderr(&refused);
    assert!(
        said.contains(&format!("worked in {}", gone.display()))
            && said.contains("pass --workspace DIR"),
        "{said}"
    );
    // Told where, it resumes there.
    let told = bin()
        .current_dir(&elsewhere)
        .args(["approve", &run_id, "--db"])
        .arg(&db)
        .arg("--workspace")
        .arg(&elsewhere)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(told.status.code(), Some(0), "{}", stderr(&told));
    assert!(elsewhere.join("note.txt").exists());
}
