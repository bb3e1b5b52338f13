//! The `agentloom` CLI end to end: real processes, real graph files, real SQLite run logs.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG");
    cmd
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/examples")
        .join(name)
}

fn run(args: &[&str], db: &Path, workspace: &Path) -> Output {
    bin()
        .args(args)
        .arg("--db")
        .arg(db)
        .arg("--workspace")
        .arg(workspace)
        .output()
        .expect("agentloom starts")
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn write_graph(dir: &Path, name: &str, json: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(json).unwrap()).unwrap();
    path
}

#[test]
fn every_example_runs_offline_and_prints_one_json_object() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let mut ran = 0;
    for entry in std::fs::read_dir(example("")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let output = run(&["run", path.to_str().unwrap(), "--json"], &db, dir.path());
        assert!(
            output.status.success(),
            "{} failed: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let report = stdout_json(&output);
        for key in [
            "run_id",
            "status",
            "outputs",
            "nodes",
            "usage",
            "duration_ms",
        ] {
            assert!(report.get(key).is_some(), "{key} missing in {report}");
        }
        assert_eq!(report["status"], "completed");
        for node in report["nodes"].as_array().unwrap() {
            for key in ["id", "status", "attempts", "duration_ms", "error"] {
                assert!(node.get(key).is_some(), "node {key} missing in {node}");
            }
        }
        ran += 1;
    }
    assert!(ran >= 3, "expected at least three examples, found {ran}");
}

#[test]
fn run_outputs_follow_the_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    let output = run(
        &[
            "run",
            hello.to_str().unwrap(),
            "--json",
            "--input",
            "name=Ada",
        ],
        &db,
        dir.path(),
    );
    assert!(output.status.success());
    assert_eq!(stdout_json(&output)["outputs"]["greeting"], "Hello, Ada!");

    let branching = example("branching.agentloom.json");
    let output = run(
        &[
            "run",
            branching.to_str().unwrap(),
            "--json",
            "-i",
            "amount=3",
        ],
        &db,
        dir.path(),
    );
    let report = stdout_json(&output);
    assert_eq!(report["outputs"]["verdict"], "3 is small");
    let big = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "big")
        .unwrap();
    assert_eq!(big["status"], "skipped");

    let pipeline = example("pipeline.agentloom.json");
    let output = run(
        &["run", pipeline.to_str().unwrap(), "--json"],
        &db,
        dir.path(),
    );
    assert!(output.status.success());
    let written = std::fs::read_to_string(dir.path().join("out/greetings.json")).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&written).unwrap(),
        serde_json::json!(["Hi Ada", "Hi Grace", "Hi Linus"])
    );
}

#[test]
fn invalid_graphs_and_arguments_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let bad = write_graph(
        dir.path(),
        "bad.json",
        &serde_json::json!({"format": "agentloom.graph", "version": 1, "nodes": [
            {"id": "t", "block": "text.template", "config": {"template": "{{ x }}"}}
        ]}),
    );
    let output = run(&["run", bad.to_str().unwrap()], &db, dir.path());
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`t`") && stderr.contains("`x`"), "{stderr}");

    std::fs::write(dir.path().join("broken.json"), "{ not json").unwrap();
    let output = run(
        &["run", dir.path().join("broken.json").to_str().unwrap()],
        &db,
        dir.path(),
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not valid JSON"));

    let newer = write_graph(
        dir.path(),
        "newer.json",
        &serde_json::json!({"format": "agentloom.graph", "version": 99}),
    );
    let output = run(&["run", newer.to_str().unwrap()], &db, dir.path());
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("newer Agentloom"));

    let output = run(
        &["run", dir.path().join("absent.json").to_str().unwrap()],
        &db,
        dir.path(),
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read the file"));

    let hello = example("hello.agentloom.json");
    let output = run(
        &["run", hello.to_str().unwrap(), "--input", "nobody=1"],
        &db,
        dir.path(),
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no input `nobody`"));

    // A value the input's type refuses is a wrong argument too: refused before any run.
    let branching = example("branching.agentloom.json");
    let output = run(
        &["run", branching.to_str().unwrap(), "--input", "amount=lots"],
        &db,
        dir.path(),
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--input amount: expected number"),
        "{stderr}"
    );
    let runs = bin()
        .args(["runs", "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let logged: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(logged, serde_json::json!([]), "nothing ran");

    // The app too refuses a workspace that is not a directory, before opening a window.
    let output = bin()
        .args(["open", "--workspace"])
        .arg(dir.path().join("absent"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a directory"));

    let output = bin().args(["run"]).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "a missing argument is a usage error"
    );
}

#[test]
fn a_failed_run_exits_1_and_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = write_graph(
        dir.path(),
        "fail.json",
        &serde_json::json!({"format": "agentloom.graph", "version": 1, "name": "Fails", "nodes": [
            {"id": "read", "block": "file.read", "config": {"path": "missing.txt"}}
        ]}),
    );
    let output = run(&["run", graph.to_str().unwrap(), "--json"], &db, dir.path());
    assert_eq!(output.status.code(), Some(1));
    let report = stdout_json(&output);
    assert_eq!(report["status"], "failed");
    assert!(report["error"].as_str().unwrap().contains("missing.txt"));

    let runs = bin()
        .args(["runs", "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let runs = stdout_json(&runs);
    assert_eq!(runs[0]["status"], "failed");
    assert_eq!(runs[0]["graph_name"], "Fails");

    let id = report["run_id"].as_str().unwrap();
    let show = bin()
        .args(["show", &id[..12], "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(show.status.success());
    let detail = stdout_json(&show);
    assert_eq!(detail["nodes"][0]["status"], "failed");
}

#[test]
fn validate_blocks_and_schema() {
    let output = bin()
        .args(["validate"])
        .arg(example("pipeline.agentloom.json"))
        .output()
        .unwrap();
    assert!(output.status.success());

    let dir = tempfile::tempdir().unwrap();
    let bad = write_graph(
        dir.path(),
        "bad.json",
        &serde_json::json!({"format": "agentloom.graph", "version": 1, "nodes": [
            {"id": "a", "block": "nope"}, {"id": "a", "block": "control.passthrough"}
        ]}),
    );
    let output = bin()
        .args(["validate", "--json"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let result = stdout_json(&output);
    assert_eq!(result["valid"], false);
    let kinds: Vec<&str> = result["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"unknown_block") && kinds.contains(&"duplicate_id"),
        "{kinds:?}"
    );

    let output = bin().args(["blocks", "--json"]).output().unwrap();
    let blocks = stdout_json(&output);
    let kinds: Vec<&str> = blocks
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "graph.input",
        "graph.output",
        "text.template",
        "control.delay",
        "http.request",
        "file.read",
        "file.write",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let delay = blocks
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "control.delay")
        .unwrap();
    assert_eq!(
        delay["config_schema"]["properties"]["ms"]["type"],
        "integer"
    );
    assert_eq!(delay["ports"]["inputs"][0]["name"], "value");

    let output = bin().arg("schema").output().unwrap();
    let schema = stdout_json(&output);
    assert!(schema["properties"]["nodes"].is_object(), "{schema}");
}

fn slow_graph(dir: &Path) -> PathBuf {
    write_graph(
        dir,
        "slow.json",
        &serde_json::json!({"format": "agentloom.graph", "version": 1, "name": "Slow", "nodes": [
            {"id": "start", "block": "data.constant", "config": {"value": 1}},
            {"id": "wait", "block": "control.delay", "config": {"ms": 60000}}
        ], "edges": [{"from": ["start", "value"], "to": ["wait", "value"]}]}),
    )
}

/// The recorded status of node `node` of run `id`, if the run log has it yet.
fn node_status(db: &Path, id: &str, node: &str) -> Option<String> {
    let show = bin()
        .args(["show", id, "--json", "--db"])
        .arg(db)
        .output()
        .ok()?;
    let detail: Value = serde_json::from_slice(&show.stdout).ok()?;
    detail["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["node_id"] == node)
        .and_then(|n| n["status"].as_str().map(str::to_owned))
}

/// Polls `agentloom runs --json` until the newest run has `status`.
fn wait_for_status(db: &Path, status: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let output = bin()
            .args(["runs", "--json", "--db"])
            .arg(db)
            .output()
            .unwrap();
        if output.status.success()
            && let Ok(runs) = serde_json::from_slice::<Value>(&output.stdout)
            && runs[0]["status"] == status
        {
            return runs[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no run reached `{status}` in {within:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_run_killed_with_sigkill_shows_as_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = slow_graph(dir.path());
    let mut child = bin()
        .args(["run"])
        .arg(&graph)
        .arg("--db")
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = wait_for_status(&db, "running", Duration::from_secs(20));
    // The kill comes once `start` is recorded done (the log writes in small batches), so the
    // test is about what a kill keeps, not about how fast the writer is.
    let id = run["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while node_status(&db, &id, "start").as_deref() != Some("done") {
        assert!(Instant::now() < deadline, "`start` never recorded done");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL on unix
    child.wait().unwrap();
    let run = wait_for_status(&db, "interrupted", Duration::from_secs(10));
    let id = run["id"].as_str().unwrap();
    let show = bin()
        .args(["show", id, "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let detail = stdout_json(&show);
    let start = detail["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == "start")
        .unwrap();
    assert_eq!(start["status"], "done", "work done before the kill is kept");
}

/// Runs `graph` with `--json`, sends SIGINT once it is running; returns its output and
/// how long it took to end after the signal.
fn interrupt_run(graph: &Path, db: &Path) -> (Output, Duration) {
    let child = bin()
        .args(["run", "--json"])
        .arg(graph)
        .arg("--db")
        .arg(db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_status(db, "running", Duration::from_secs(20));
    let started = Instant::now();
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let output = child.wait_with_output().unwrap();
    (output, started.elapsed())
}

#[test]
fn ctrl_c_cancels_cleanly_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let (output, took) = interrupt_run(&slow_graph(dir.path()), &db);
    assert!(took < Duration::from_secs(10));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout_json(&output)["status"], "cancelled");
    wait_for_status(&db, "cancelled", Duration::from_secs(5));
}

fn runaway_template_graph(dir: &Path, timeout_ms: Option<u64>) -> PathBuf {
    let mut node = serde_json::json!({"id": "loop", "block": "text.template", "config": {
        "template": "{% for i in range(100000) %}{% for j in range(100000) %}{{ x }}{% endfor %}{% endfor %}"
    }});
    if let Some(ms) = timeout_ms {
        node["timeout_ms"] = ms.into();
    }
    write_graph(
        dir,
        "runaway.json",
        &serde_json::json!({"format": "agentloom.graph", "version": 1, "name": "Runaway", "nodes": [
            {"id": "start", "block": "data.constant", "config": {"value": ""}},
            node
        ], "edges": [{"from": ["start", "value"], "to": ["loop", "x"]}]}),
    )
}

#[test]
fn ctrl_c_stops_a_runaway_template_within_2_s_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let (output, took) = interrupt_run(&runaway_template_graph(dir.path(), None), &db);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(stdout_json(&output)["status"], "cancelled");
    wait_for_status(&db, "cancelled", Duration::from_secs(5));
}

#[test]
fn a_runaway_template_obeys_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = runaway_template_graph(dir.path(), Some(300));
    let output = run(&["run", graph.to_str().unwrap(), "--json"], &db, dir.path());
    assert_eq!(output.status.code(), Some(1));
    let report = stdout_json(&output);
    assert_eq!(report["status"], "failed");
    let error = report["error"].as_str().unwrap();
    assert!(error.contains("timed out after 300 ms"), "{error}");
}

#[test]
fn a_value_too_big_for_the_log_is_kept_as_size_hash_and_preview() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    // Two million characters: over the 1 MiB a logged value may take by default.
    let graph = write_graph(
        dir.path(),
        "big.json",
        &serde_json::json!({"format": "agentloom.graph", "version": 1, "name": "Big", "nodes": [
            {"id": "big", "block": "text.template", "config": {
                "template": "{% for i in range(20000) %}{{ x }}{% endfor %}"}},
            {"id": "start", "block": "data.constant", "config": {"value": "y".repeat(100)}}
        ], "edges": [{"from": ["start", "value"], "to": ["big", "x"]}]}),
    );
    let output = run(&["run", graph.to_str().unwrap(), "--json"], &db, dir.path());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let id = stdout_json(&output)["run_id"].as_str().unwrap().to_owned();
    let show = bin()
        .args(["show", &id, "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let detail = stdout_json(&show);
    assert_eq!(detail["status"], "completed", "{detail}");
    let node = detail["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == "big")
        .unwrap();
    let text = node["outputs"]["text"].as_str().unwrap();
    assert!(
        text.starts_with("[truncated: 2000002 bytes, sha256 "),
        "{}",
        &text[..text.len().min(120)]
    );
    assert!(text.contains("] \"yyyy"), "{text}");
    assert!(text.len() < 2000, "{} bytes kept", text.len());
}

#[test]
fn credentials_add_list_remove_through_the_keychain() {
    if !agentloom_tests::keychain_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let name = format!("cli-test-{}", std::process::id());
    let secret = "sk-canary-3c1d9e0f";
    let cli = |args: &[&str], stdin: &str| -> Output {
        agentloom_tests::output_with_stdin(
            bin().args(args).env("XDG_DATA_HOME", data.path()),
            stdin,
        )
    };
    let added = cli(
        &["credentials", "add", &name, "--provider", "openai"],
        &format!("{secret}\n"),
    );
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let listed = cli(&["credentials", "list", "--json"], "");
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let text = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(text.contains(&name), "{text}");
    for output in [&added, &listed] {
        assert!(!String::from_utf8_lossy(&output.stdout).contains(secret));
        assert!(!String::from_utf8_lossy(&output.stderr).contains(secret));
    }
    let removed = cli(&["credentials", "remove", &name], "");
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    let listed = cli(&["credentials", "list", "--json"], "");
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&name));
}

/// A run that resolves no credential never asks the keychain: pointed at a session bus that
/// accepts connections and never answers, it still finishes, and the bus saw nobody.
#[cfg(target_os = "linux")]
#[test]
fn a_run_without_credentials_never_contacts_the_keychain() {
    let dir = tempfile::tempdir().unwrap();
    let bus_path = dir.path().join("bus");
    let bus = std::os::unix::net::UnixListener::bind(&bus_path).unwrap();
    bus.set_nonblocking(true).unwrap();
    let hello = example("hello.agentloom.json");
    let mut child = bin()
        .args([
            "run",
            hello.to_str().unwrap(),
            "--json",
            "--input",
            "name=Ada",
        ])
        .arg("--db")
        .arg(dir.path().join("runs.sqlite3"))
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            format!("unix:path={}", bus_path.display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the run waited on the session bus");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout_json(&output)["outputs"]["greeting"], "Hello, Ada!");
    assert!(
        bus.accept().is_err(),
        "the run connected to the session bus although it needed no credential"
    );
}

/// `runs --export FILE` writes one file that holds every run by itself: copied alone,
/// without the `-wal` file beside the log, it still lists the run. It never overwrites.
#[test]
fn an_exported_run_log_is_one_self_contained_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    let ran = run(
        &[
            "run",
            hello.to_str().unwrap(),
            "--json",
            "--input",
            "name=Ada",
        ],
        &db,
        dir.path(),
    );
    assert!(ran.status.success());
    let run_id = stdout_json(&ran)["run_id"].as_str().unwrap().to_owned();
    let exported = dir.path().join("exported.sqlite3");
    let export = |dest: &Path| {
        bin()
            .args(["runs", "--db"])
            .arg(&db)
            .arg("--export")
            .arg(dest)
            .output()
            .unwrap()
    };
    let out = export(&exported);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Only the exported file goes elsewhere.
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("copy.sqlite3");
    std::fs::copy(&exported, &copy).unwrap();
    let listed = bin()
        .args(["runs", "--json", "--db"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(listed.status.success());
    let runs = stdout_json(&listed);
    assert_eq!(runs[0]["id"], run_id.as_str(), "{runs}");
    assert_eq!(runs[0]["status"], "completed");
    // A second export to the same file is refused and leaves it as it was.
    let before = std::fs::read(&exported).unwrap();
    let again = export(&exported);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));
    assert_eq!(std::fs::read(&exported).unwrap(), before);
}
