//! What `agentloom validate` and `run` do with graph files that call many others, with
//! files that are not regular files, and with control characters anywhere in what they
//! print: real processes on real files.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG").stdin(Stdio::null());
    cmd
}

/// Runs `cmd`, killing it after `limit` (a hang is a failure, not a stuck test).
fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}; stderr so far:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn write_json(path: &Path, doc: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
}

fn graph(name: &str, nodes: Value, edges: Value) -> Value {
    json!({"format": "agentloom.graph", "version": 1, "name": name, "nodes": nodes, "edges": edges})
}

fn call(id: &str, path: &str) -> Value {
    json!({"id": id, "block": "graph.call", "config": {"path": path}})
}

/// level0.json … level{depth}.json, each level calling the next twice; the last has one
/// input with a default, so every call is complete without wires.
fn diamond(dir: &Path, depth: usize) -> PathBuf {
    for level in 0..depth {
        let next = format!("level{}.json", level + 1);
        write_json(
            &dir.join(format!("level{level}.json")),
            &graph(
                &format!("level {level}"),
                json!([call("left", &next), call("right", &next)]),
                json!([]),
            ),
        );
    }
    write_json(
        &dir.join(format!("level{depth}.json")),
        &graph(
            "bottom",
            json!([{"id": "x", "block": "graph.input", "config": {"name": "x", "default": 1}}]),
            json!([]),
        ),
    );
    dir.join("level0.json")
}

#[test]
fn a_diamond_of_called_files_twenty_levels_deep_validates() {
    let dir = tempfile::tempdir().unwrap();
    let top = diamond(dir.path(), 20);
    // Each file checked once: 21 files, not 2^20 calls.
    let output = output_within(bin().arg("validate").arg(&top), Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stderr(&output).contains("valid"), "{}", stderr(&output));
}

#[test]
fn nesting_deeper_than_the_cap_is_a_problem_naming_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let depth = 40;
    for level in 0..depth {
        write_json(
            &dir.path().join(format!("chain{level}.json")),
            &graph(
                "chain",
                json!([call("next", &format!("chain{}.json", level + 1))]),
                json!([]),
            ),
        );
    }
    write_json(
        &dir.path().join(format!("chain{depth}.json")),
        &graph("end", json!([]), json!([])),
    );
    let output = output_within(
        bin().arg("validate").arg(dir.path().join("chain0.json")),
        Duration::from_secs(60),
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(text.contains("nest more than 32 deep"), "{text}");
    assert!(text.contains("chain0.json"), "{text}");
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

#[cfg(unix)]
#[test]
fn a_fifo_as_graph_file_or_called_path_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.json");
    mkfifo(&fifo);
    for verb in ["validate", "run"] {
        let output = output_within(bin().arg(verb).arg(&fifo), Duration::from_secs(20));
        assert_eq!(output.status.code(), Some(2), "{verb}: {}", stderr(&output));
        let text = stderr(&output);
        assert!(text.contains("pipe.json"), "{verb}: {text}");
        assert!(text.contains("FIFO"), "{verb}: {text}");
        assert!(text.contains("not a regular file"), "{verb}: {text}");
    }

    let caller = dir.path().join("caller.json");
    write_json(
        &caller,
        &graph("caller", json!([call("call", "pipe.json")]), json!([])),
    );
    let output = output_within(bin().arg("validate").arg(&caller), Duration::from_secs(20));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("node `call`") || text.contains("nodes[0]"),
        "{text}"
    );
    assert!(text.contains("FIFO"), "{text}");
}

/// No byte below 0x20 but newline and tab: nothing a terminal would act on.
fn assert_no_control_bytes(what: &str, bytes: &[u8]) {
    if let Some(at) = bytes
        .iter()
        .position(|&b| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f)
    {
        panic!(
            "{what} holds the control byte {:#04x} at {at}:\n{}",
            bytes[at],
            String::from_utf8_lossy(bytes)
        );
    }
}

fn assert_clean(what: &str, output: &Output) {
    assert_no_control_bytes(&format!("{what} stdout"), &output.stdout);
    assert_no_control_bytes(&format!("{what} stderr"), &output.stderr);
}

#[test]
fn every_message_escapes_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let esc = "\u{1b}[2J\u{7}\r";

    // validate: an MCP server's name and command, a graph.call path, an edge's port name.
    let broken = dir.path().join("broken.json");
    let mut doc = graph(
        "broken",
        json!([
            call("call", &format!("missing{esc}.json")),
            {"id": "a", "block": "graph.input", "config": {"name": "a", "default": "x"}},
            {"id": "b", "block": "graph.output", "config": {"name": "b"}}
        ]),
        json!([{"from": ["a", format!("value{esc}")], "to": ["b", "value"]}]),
    );
    doc["mcp_servers"] = json!({format!("srv{esc}"): {"command": format!("no-such-program{esc}")}});
    write_json(&broken, &doc);
    let output = output_within(bin().arg("validate").arg(&broken), Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(text.contains("missing\\u{1b}[2J\\u{7}\\r.json"), "{text}");
    assert!(text.contains("value\\u{1b}"), "{text}");
    assert_clean("validate", &output);

    // run: a credential name in the failure.
    let credential = dir.path().join("credential.json");
    write_json(
        &credential,
        &graph(
            "credential",
            json!([{"id": "get", "block": "http.request", "config": {
                "method": "GET", "url": "http://127.0.0.1:9/none", "credential": format!("key{esc}")}}]),
            json!([]),
        ),
    );
    let output = output_within(
        bin()
            .arg("run")
            .arg(&credential)
            .arg("--db")
            .arg(&db)
            .arg("--workspace")
            .arg(dir.path()),
        Duration::from_secs(60),
    );
    assert_ne!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_clean("run", &output);

    // show and runs: a human.approval action.
    let ask = dir.path().join("ask.json");
    write_json(
        &ask,
        &graph(
            "ask",
            json!([
                {"id": "in", "block": "graph.input", "config": {"name": "v", "default": "x"}},
                {"id": "ok", "block": "human.approval", "config": {"action": format!("Ship{esc} it")}}
            ]),
            json!([{"from": ["in", "value"], "to": ["ok", "value"]}]),
        ),
    );
    let output = output_within(
        bin()
            .arg("run")
            .arg(&ask)
            .arg("--json")
            .arg("--db")
            .arg(&db)
            .arg("--workspace")
            .arg(dir.path()),
        Duration::from_secs(60),
    );
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_clean("run (waiting)", &output);
    let run_id = serde_json::from_slice::<Value>(&output.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let output = output_within(
        bin().args(["show", &run_id]).arg("--db").arg(&db),
        Duration::from_secs(30),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(text.contains("Ship\\u{1b}[2J"), "{text}");
    assert_clean("show", &output);
    let output = output_within(
        bin().args(["runs"]).arg("--db").arg(&db),
        Duration::from_secs(30),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_clean("runs", &output);
}
