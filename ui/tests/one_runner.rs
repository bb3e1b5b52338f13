//! Every door starts runs through the one runner: what a graph file may do is decided once,
//! from one read of it. Tried with the real binary as a stranger's file would be: a file's
//! own `allow_private_network` and a loopback search endpoint wait for trust (and a "No" at
//! the terminal keeps them from happening); a file flipped between trusted and evil content
//! while `validate`, `blocks --graph`, `eval` and `run` read it never starts the evil
//! command; a shared graph that uses a local model runs untrusted and sends no key.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

/// The binary with its data directory (the trust store) in `data`, no terminal.
fn bin(data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG")
        .env("XDG_DATA_HOME", data)
        .env("HOME", data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn run(cmd: &mut Command) -> (Option<i32>, String, String) {
    let output = cmd.output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn write(path: &Path, graph: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(graph).unwrap()).unwrap();
}

/// A graph of `node` alone, its `port` the output `result`; `input`, when given, is fed
/// the text "x".
fn graph_with(node: Value, port: &str, input: Option<&str>) -> Value {
    let id = node["id"].as_str().unwrap().to_owned();
    let mut graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "shared",
        "nodes": [node, {"id": "out", "block": "graph.output", "config": {"name": "result"}}],
        "edges": [{"from": [id, port], "to": ["out", "value"]}]
    });
    if let Some(input) = input {
        graph["nodes"].as_array_mut().unwrap().push(
            json!({"id": "given", "block": "data.constant", "config": {"type": "text", "value": "x"}}),
        );
        graph["edges"]
            .as_array_mut()
            .unwrap()
            .push(json!({"from": ["given", "value"], "to": [id, input]}));
    }
    graph
}

/// A graph's own `allow_private_network`, and a search endpoint on a loopback address,
/// each alone in a file that needs nothing else: without a terminal the run is refused
/// with what trusting would allow; "No" at the terminal runs it untrusted, and the local
/// server hears nothing either way.
#[test]
fn a_files_own_private_network_and_a_loopback_search_url_wait_for_trust() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = agentloom_tests::PostCounter::start();
    let admin = format!("{}/admin", server.url().trim_end_matches('/'));
    let cases = [
        (
            "private.json",
            graph_with(
                json!({"id": "peek", "block": "http.request", "config": {
                    "method": "POST", "url": admin, "allow_private_network": true}}),
                "status",
                None,
            ),
            "reach this machine and its local network from node `peek` (allow_private_network)",
        ),
        (
            "search.json",
            graph_with(
                json!({"id": "find", "block": "web.search", "config": {
                    "provider": "searxng",
                    "url": format!("{}/latest/meta-data/iam#", server.url().trim_end_matches('/'))}}),
                "results",
                Some("query"),
            ),
            "a local address, from node `find`",
        ),
    ];
    for (name, graph, need) in cases {
        let path = dir.path().join(name);
        write(&path, &graph);
        let (code, _, stderr) = run(bin(data.path())
            .args(["run", "--no-log", "--workspace"])
            .arg(dir.path())
            .arg(&path));
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains("this file is not trusted") && stderr.contains(need),
            "{name}: {need:?} in {stderr}"
        );

        // "No" at the terminal: it runs, untrusted; nothing reaches the local server.
        let args: Vec<&OsStr> = vec![
            OsStr::new("run"),
            OsStr::new("--no-log"),
            OsStr::new("--workspace"),
            dir.path().as_os_str(),
            path.as_os_str(),
        ];
        let data_dir = data.path().display().to_string();
        let (code, screen) = agentloom_tests::at_a_terminal(
            Path::new(env!("CARGO_BIN_EXE_agentloom")),
            &args,
            &[("XDG_DATA_HOME", &data_dir), ("HOME", &data_dir)],
            "n\nn\nn\n",
        );
        assert!(screen.contains("kept offline"), "{name}: {screen}");
        assert_ne!(code, Some(0), "{name}: {screen}");
        assert!(
            screen.contains("may not reach") || screen.contains("was not approved"),
            "{name}: {screen}"
        );
    }
    assert_eq!(
        server.posts(),
        0,
        "an untrusted file reached the local server"
    );
}

/// A graph file renamed over, again and again, between content its user trusts and evil
/// content whose MCP command leaves a mark: whatever `validate`, `blocks --graph`, `eval`
/// and `run` read, the evil command never starts (the trusted one does, now and then:
/// the race is real).
#[test]
fn a_file_flipped_between_trusted_and_evil_content_never_starts_the_evil_command() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let good_mark = dir.path().join("good-started");
    let evil_mark = dir.path().join("evil-started");
    let content = |mark: &Path| {
        json!({
            "format": "agentloom.graph", "version": 1, "name": "flip",
            "mcp_servers": {"tools": {
                "command": "sh",
                "args": ["-c", format!("touch '{}'; exit 1", mark.display())]
            }},
            "nodes": [
                {"id": "text", "block": "graph.input", "config": {"name": "text", "default": "hi"}},
                {"id": "out", "block": "graph.output", "config": {"name": "echo"}}
            ],
            "edges": [{"from": ["text", "value"], "to": ["out", "value"]}]
        })
    };
    let graph = dir.path().join("graph.json");
    let good = dir.path().join("good.json");
    let evil = dir.path().join("evil.json");
    write(&good, &content(&good_mark));
    write(&evil, &content(&evil_mark));
    std::fs::copy(&good, &graph).unwrap();
    let (code, _, stderr) = run(bin(data.path()).arg("trust").arg(&graph));
    assert_eq!(code, Some(0), "{stderr}");
    let cases = dir.path().join("cases.jsonl");
    std::fs::write(
        &cases,
        "{\"inputs\": {\"text\": \"a\"}, \"expect\": {\"echo\": \"a\"}}\n",
    )
    .unwrap();

    // Renames the good or the evil copy over the graph file, as fast as it can.
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, graph, good, evil) = (stop.clone(), graph.clone(), good.clone(), evil.clone());
        let tmp = dir.path().join("next.json");
        std::thread::spawn(move || {
            let mut flips = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                let from = if flips.is_multiple_of(2) {
                    &evil
                } else {
                    &good
                };
                std::fs::copy(from, &tmp).unwrap();
                std::fs::rename(&tmp, &graph).unwrap();
                flips += 1;
            }
            flips
        })
    };
    let db = dir.path().join("runs.sqlite3");
    let commands: [(&str, Vec<PathBufOrStr>); 4] = [
        ("validate", vec![graph.clone().into()]),
        ("blocks", vec!["--graph".into(), graph.clone().into()]),
        (
            "eval",
            vec![
                graph.clone().into(),
                "--cases".into(),
                cases.clone().into(),
                "--db".into(),
                db.clone().into(),
            ],
        ),
        (
            "run",
            vec![
                "--no-log".into(),
                "--workspace".into(),
                dir.path().to_path_buf().into(),
                graph.clone().into(),
            ],
        ),
    ];
    for round in 0..50 {
        for (command, args) in &commands {
            let _ = run(bin(data.path())
                .arg(command)
                .args(args.iter().map(PathBufOrStr::as_os_str)));
            assert!(
                !evil_mark.exists(),
                "round {round}: `{command}` started the evil command"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips >= 200, "the file was flipped {flips} times");
    assert!(
        good_mark.exists(),
        "the trusted content never ran: the race was not tried"
    );
}

/// A command-line word: a path or a flag.
enum PathBufOrStr {
    Path(PathBuf),
    Str(&'static str),
}

impl PathBufOrStr {
    fn as_os_str(&self) -> &OsStr {
        match self {
            PathBufOrStr::Path(path) => path.as_os_str(),
            PathBufOrStr::Str(text) => OsStr::new(text),
        }
    }
}

impl From<PathBuf> for PathBufOrStr {
    fn from(path: PathBuf) -> Self {
        PathBufOrStr::Path(path)
    }
}

impl From<&'static str> for PathBufOrStr {
    fn from(text: &'static str) -> Self {
        PathBufOrStr::Str(text)
    }
}

/// A shared graph that asks a local model (no `credential`), copied to another folder so
/// its user never trusted it: it simply runs, and no key goes with the request, although
/// this machine has one for `openai`.
#[test]
fn a_copied_graph_using_a_local_model_runs_untrusted_and_sends_no_key() {
    let canary = "sk-canary-5e1d0a9b7c3f";
    let Some(llm) = agentloom_tests::FakeLlm::start_with_rules(&format!(
        "rules:\n  - name: key_sent\n    when:\n      header.authorization: \"Bearer {canary}\"\n    respond:\n      content: \"a key was sent\"\n  - name: local\n    when:\n      messages_contain: \"hello\"\n    respond:\n      content: \"hello from the local model\"\n"
    )) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let copied = dir.path().join("copied");
    std::fs::create_dir(&copied).unwrap();
    let path = copied.join("local-model.json");
    write(
        &path,
        &graph_with(
            json!({"id": "ask", "block": "llm.chat", "config": {
                "provider": "openai", "base_url": format!("{}/v1", llm.base()), "model": "local",
                "prompt": "hello", "stream": false}}),
            "text",
            None,
        ),
    );
    let (code, stdout, stderr) = run(bin(data.path())
        .env("AGENTLOOM_SECRET_OPENAI", canary)
        .args(["run", "--no-log", "--json", "--workspace"])
        .arg(&copied)
        .arg(&path));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["outputs"]["result"], "hello from the local model",
        "{report}"
    );
    assert!(!stderr.contains("not trusted:"), "{stderr}");

    // Its trust list names no credential: the file names none.
    let (code, _, stderr) = run(bin(data.path()).arg("trust").arg(&path));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("credential"), "{stderr}");
}
