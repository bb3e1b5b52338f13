//! Trusted files, end to end with the real binary: a graph file that is not trusted starts
//! no MCP command on validate, `blocks --graph` or a run without a terminal; `agentloom
//! trust` lets it; editing one byte of it, or of a file it calls, undoes that. An untrusted
//! file runs in safe mode and calls nothing outside its folder.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

/// The binary with its data directory (the trust store) in `data`, no terminal.
fn bin(data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG")
        .env("XDG_DATA_HOME", data)
        .env("HOME", data)
        .stdin(Stdio::null());
    cmd
}

fn output(cmd: &mut Command) -> (Option<i32>, String) {
    let Output { status, stderr, .. } = cmd.output().unwrap();
    (status.code(), String::from_utf8_lossy(&stderr).into_owned())
}

/// `agentloom run GRAPH` in `dir`, unrecorded, with no terminal.
fn run_offline(data: &Path, graph: &Path, dir: &Path) -> (Option<i32>, String) {
    output(
        bin(data)
            .arg("run")
            .arg(graph)
            .arg("--no-log")
            .arg("--workspace")
            .arg(dir),
    )
}

fn write(path: &Path, graph: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(graph).unwrap()).unwrap();
}

/// A graph whose MCP server command leaves `marker` behind when it starts (then fails the
/// handshake), and that calls `child.json` beside it.
fn marker_graph(dir: &Path, marker: &Path) -> PathBuf {
    write(
        &dir.join("child.json"),
        &json!({"format": "agentloom.graph", "version": 1, "name": "child", "nodes": [], "edges": []}),
    );
    let path = dir.join("shared.json");
    write(
        &path,
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "shared",
            "mcp_servers": {"tools": {
                "command": "sh",
                "args": ["-c", format!("touch '{}'; exit 1", marker.display())],
                "env": {"LEVEL": "1"}
            }},
            "nodes": [
                {"id": "tool", "block": "mcp.tools.echo", "config": {}},
                {"id": "call", "block": "graph.call", "config": {"path": "child.json"}}
            ],
            "edges": []
        }),
    );
    path
}

#[test]
fn an_untrusted_graph_starts_no_mcp_command_until_trusted_and_any_edit_revokes_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let graph = marker_graph(dir.path(), &marker);
    let fix = format!("agentloom trust {}", graph.display());

    // Validate: static, and says why and how.
    let (code, stderr) = output(bin(data.path()).arg("validate").arg(&graph));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "MCP server `tools`: not connected: this file is not trusted ({fix})"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("unknown block"), "{stderr}");
    // blocks --graph and a run without a terminal.
    let (code, stderr) = output(bin(data.path()).args(["blocks", "--graph"]).arg(&graph));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not trusted"), "{stderr}");
    let (code, stderr) = run_offline(data.path(), &graph, dir.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("this file is not trusted; trusting it lets it:")
            && stderr.contains("start the command `sh -c 'touch ")
            && stderr.contains("(MCP server `tools`) with environment LEVEL")
            && stderr.contains(&format!("run `{fix}` (or pass --trust)")),
        "{stderr}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !marker.exists(),
        "an untrusted graph started its MCP command"
    );

    // Trusted, it starts.
    let (code, stderr) = output(bin(data.path()).arg("trust").arg(&graph));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("start the command"), "{stderr}");
    let (_, stderr) = output(bin(data.path()).arg("validate").arg(&graph));
    assert!(marker.exists(), "a trusted graph connects: {stderr}");
    let (code, listed) = {
        let out = bin(data.path()).args(["trust", "--list"]).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(code, Some(0));
    let canonical = std::fs::canonicalize(&graph).unwrap();
    assert!(
        listed.contains(&canonical.display().to_string()),
        "{listed}"
    );

    // One byte more in the file: untrusted again.
    std::fs::remove_file(&marker).unwrap();
    let mut bytes = std::fs::read(&graph).unwrap();
    bytes.push(b' ');
    std::fs::write(&graph, &bytes).unwrap();
    let (code, stderr) = output(bin(data.path()).arg("validate").arg(&graph));
    assert_eq!(code, Some(2));
    assert!(stderr.contains("not trusted"), "{stderr}");
    assert!(!marker.exists(), "an edited file is not trusted any more");
    let out = bin(data.path()).args(["trust", "--list"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("changed since"),
        "{out:?}"
    );

    // Trusted again, then one byte more in the file it calls.
    assert_eq!(output(bin(data.path()).arg("trust").arg(&graph)).0, Some(0));
    let child = dir.path().join("child.json");
    let mut bytes = std::fs::read(&child).unwrap();
    bytes.push(b'\n');
    std::fs::write(&child, &bytes).unwrap();
    let (_, stderr) = output(bin(data.path()).args(["blocks", "--graph"]).arg(&graph));
    assert!(stderr.contains("not trusted"), "{stderr}");
    assert!(
        !marker.exists(),
        "a file whose called file changed is not trusted"
    );

    // Revoking.
    assert_eq!(output(bin(data.path()).arg("trust").arg(&graph)).0, Some(0));
    let (code, stderr) = output(bin(data.path()).args(["trust", "--revoke"]).arg(&graph));
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = output(bin(data.path()).arg("validate").arg(&graph));
    assert_eq!(code, Some(2));
    assert!(stderr.contains("not trusted"), "{stderr}");
    assert!(!marker.exists());
}

/// note (constant) → save (file.write: a side effect)
fn note_graph(path: &Path, call: Option<&str>) {
    let mut nodes = vec![
        json!({"id": "note", "block": "data.constant", "config": {"value": "hello"}}),
        json!({"id": "save", "block": "file.write", "config": {"path": "note.txt"}}),
    ];
    if let Some(target) = call {
        nodes.push(json!({"id": "call", "block": "graph.call", "config": {"path": target}}));
    }
    write(
        path,
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "note",
            "nodes": nodes,
            "edges": [{"from": ["note", "value"], "to": ["save", "content"]}]
        }),
    );
}

#[test]
fn an_untrusted_graph_runs_in_safe_mode_and_trust_lifts_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let graph = dir.path().join("note.json");
    note_graph(&graph, None);
    let run = |extra: &[&str]| {
        output(
            bin(data.path())
                .arg("run")
                .arg(&graph)
                .args(extra)
                .arg("--db")
                .arg(dir.path().join("runs.sqlite3"))
                .arg("--workspace")
                .arg(dir.path()),
        )
    };
    // Nothing needs trust: it runs, but its side effect waits for an approval.
    let (code, stderr) = run(&[]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("is not trusted, so it runs in safe mode")
            && stderr.contains(&format!("agentloom trust {}", graph.display())),
        "{stderr}"
    );
    assert!(!dir.path().join("note.txt").exists());
    // --trust for this run only.
    let (code, stderr) = run(&["--trust"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "hello"
    );
    std::fs::remove_file(dir.path().join("note.txt")).unwrap();
    assert_eq!(run(&[]).0, Some(3), "--trust records nothing");
    // Recorded trust.
    assert_eq!(output(bin(data.path()).arg("trust").arg(&graph)).0, Some(0));
    let (code, stderr) = run(&[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(dir.path().join("note.txt").exists());
}

#[test]
fn an_untrusted_graph_calls_no_file_outside_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let inner = dir.path().join("inner");
    std::fs::create_dir(&inner).unwrap();
    write(
        &dir.path().join("outside.json"),
        &json!({"format": "agentloom.graph", "version": 1, "name": "o", "nodes": [], "edges": []}),
    );
    let graph = inner.join("note.json");
    note_graph(&graph, Some("../outside.json"));
    let outside = std::fs::canonicalize(dir.path().join("outside.json")).unwrap();

    let (code, stderr) = run_offline(data.path(), &graph, dir.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "call the graph file {} (outside its folder)",
            outside.display()
        )),
        "{stderr}"
    );
    let (code, stderr) = output(bin(data.path()).arg("validate").arg(&graph));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("is outside this graph's folder") && stderr.contains("not trusted"),
        "{stderr}"
    );
    assert_eq!(output(bin(data.path()).arg("trust").arg(&graph)).0, Some(0));
    let (code, stderr) = output(bin(data.path()).arg("validate").arg(&graph));
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn serve_refuses_an_untrusted_graph_that_needs_trust_and_says_how() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let graph = marker_graph(dir.path(), &marker);
    let (code, stderr) = output(
        bin(data.path())
            .args(["serve", "--port", "0", "--db"])
            .arg(dir.path().join("runs.sqlite3"))
            .arg(&graph),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("start the command") && stderr.contains("(or pass --trust)"),
        "{stderr}"
    );
    let (code, stderr) = output(
        bin(data.path())
            .args(["mcp", "--db"])
            .arg(dir.path().join("runs.sqlite3"))
            .arg(&graph),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not trusted"), "{stderr}");
    assert!(!marker.exists());
}

/// `agentloom run GRAPH` in `dir` on a real terminal where `typed` is typed; its exit
/// code and what the terminal showed.
fn run_at_a_terminal(
    data: &Path,
    graph: &Path,
    dir: &Path,
    env: &[(&str, &str)],
    typed: &str,
) -> (Option<i32>, String) {
    let data_dir = data.display().to_string();
    let args: Vec<std::ffi::OsString> = vec![
        "run".into(),
        graph.into(),
        "--no-log".into(),
        "--workspace".into(),
        dir.into(),
    ];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsString::as_os_str).collect();
    let mut envs = vec![
        ("XDG_DATA_HOME", data_dir.as_str()),
        ("HOME", data_dir.as_str()),
    ];
    envs.extend_from_slice(env);
    agentloom_tests::at_a_terminal(
        Path::new(env!("CARGO_BIN_EXE_agentloom")),
        &args,
        &envs,
        typed,
    )
}

#[test]
fn at_a_terminal_run_asks_and_no_keeps_it_offline() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let graph = marker_graph(dir.path(), &marker);
    let (code, screen) = run_at_a_terminal(data.path(), &graph, dir.path(), &[], "n\n");
    assert!(
        screen.contains("start the command")
            && screen.contains("Trust this file and connect? [y/N]"),
        "{screen}"
    );
    assert!(screen.contains("kept offline"), "{screen}");
    assert_eq!(
        code,
        Some(2),
        "offline, its MCP tool node cannot run: {screen}"
    );
    assert!(!marker.exists());

    let (_, screen) = run_at_a_terminal(data.path(), &graph, dir.path(), &[], "y\n");
    assert!(screen.contains("trusted"), "{screen}");
    assert!(marker.exists(), "yes connects: {screen}");
    // And the answer was recorded.
    let out = bin(data.path()).args(["trust", "--list"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("shared.json"),
        "{out:?}"
    );
}

/// A server on 127.0.0.1 that records every request it gets: its port and what it saw.
fn recording_server() -> (u16, std::sync::Arc<std::sync::Mutex<String>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            use std::io::{Read as _, Write as _};
            let mut stream = stream.unwrap();
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).unwrap_or(0);
            log.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        }
    });
    (port, seen)
}

#[test]
fn an_untrusted_run_resumed_after_an_approval_still_sends_no_credential() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (port, seen) = recording_server();
    let graph = dir.path().join("post.json");
    write(
        &graph,
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "post",
            "nodes": [{"id": "post", "block": "http.request",
                       "config": {"method": "POST", "url": format!("http://127.0.0.1:{port}/"),
                                  "credential": "api", "allow_private_network": true}}],
            "edges": []
        }),
    );
    let db = dir.path().join("runs.sqlite3");
    let hosts = format!("127.0.0.1:{port}");
    let secret_env = [
        ("AGENTLOOM_SECRET_API", "sk-canary-resumed"),
        ("AGENTLOOM_SECRET_API_HOSTS", hosts.as_str()),
    ];
    // Kept offline at a terminal; with --json nobody is asked, so the POST waits (exit 3).
    let data_dir = data.path().display().to_string();
    let args: Vec<std::ffi::OsString> = vec![
        "run".into(),
        graph.clone().into(),
        "--json".into(),
        "--db".into(),
        db.clone().into(),
        "--workspace".into(),
        dir.path().into(),
    ];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsString::as_os_str).collect();
    let mut envs = vec![
        ("XDG_DATA_HOME", data_dir.as_str()),
        ("HOME", data_dir.as_str()),
    ];
    envs.extend_from_slice(&secret_env);
    let (code, screen) = agentloom_tests::at_a_terminal(
        Path::new(env!("CARGO_BIN_EXE_agentloom")),
        &args,
        &envs,
        "n\n",
    );
    assert_eq!(code, Some(3), "{screen}");
    let run_id = screen
        .split('"')
        .skip_while(|part| *part != "run_id")
        .nth(2)
        .unwrap_or_else(|| panic!("no run id in {screen}"))
        .to_owned();
    // Approved by someone at another shell: the resumed run still gets no credential.
    let mut approve = bin(data.path());
    approve
        .args(["approve", &run_id, "--db"])
        .arg(&db)
        .envs(secret_env);
    let (code, stderr) = output(&mut approve);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("graph file {} is not trusted", graph.display())),
        "{stderr}"
    );
    assert!(!seen.lock().unwrap().contains("sk-canary-resumed"));
}

#[test]
fn kept_offline_a_run_sends_no_credential_and_says_how_to_trust() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (port, seen) = recording_server();
    let graph = dir.path().join("fetch.json");
    write(
        &graph,
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "fetch",
            "nodes": [{"id": "fetch", "block": "http.request",
                       "config": {"url": format!("http://127.0.0.1:{port}/"), "credential": "api",
                                  "allow_private_network": true}}],
            "edges": []
        }),
    );
    let hosts = format!("127.0.0.1:{port}");
    let secret = [
        ("AGENTLOOM_SECRET_API", "sk-canary-offline"),
        ("AGENTLOOM_SECRET_API_HOSTS", hosts.as_str()),
    ];
    let (code, screen) = run_at_a_terminal(data.path(), &graph, dir.path(), &secret, "n\n");
    assert!(
        screen.contains("send credential `api` to node `fetch`"),
        "{screen}"
    );
    assert_eq!(code, Some(1), "{screen}");
    assert!(
        screen.contains(&format!(
            "graph file {} is not trusted: run `agentloom trust {}`",
            graph.display(),
            graph.display()
        )),
        "{screen}"
    );
    assert!(!seen.lock().unwrap().contains("sk-canary-offline"));

    // With --trust the same run sends it.
    let (code, stderr) = output(
        bin(data.path())
            .arg("run")
            .arg(&graph)
            .args(["--trust", "--no-log", "--workspace"])
            .arg(dir.path())
            .env("AGENTLOOM_SECRET_API", "sk-canary-offline")
            .env("AGENTLOOM_SECRET_API_HOSTS", &hosts),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(seen.lock().unwrap().contains("sk-canary-offline"));
}
