//! MCP servers are untrusted: the real binary against a hostile stdio server
//! (tests/peers/hostile-mcp/server.py) that answers too much or never, starts helpers,
//! quotes its token back and names tools with escapes and paths.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The token the server is given (credential `mcp-token`, from the environment).
const TOKEN: &str = "tok-hostile-9f3c2a7e";
/// A secret in agentloom's environment that the server must not see.
const OTHER_SECRET: &str = "other-secret-51d8b0c4";

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG")
        .env("AGENTLOOM_SECRET_MCP_TOKEN", TOKEN)
        .env("AGENTLOOM_SECRET_OTHER_KEY", OTHER_SECRET)
        .env("HOSTILE_TEST_UNDECLARED", "inherited");
    cmd
}

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/peers/hostile-mcp/server.py")
}

/// A graph whose server `hostile` is the hostile script, with `nodes` and `edges`.
fn write_graph(dir: &Path, nodes: &Value, edges: &Value) -> PathBuf {
    let graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "Hostile MCP",
        "mcp_servers": {"hostile": {
            "command": "python3",
            "args": [server_script()],
            "env": {"DECLARED": "yes"},
            "credential": "mcp-token"
        }},
        "nodes": nodes,
        "edges": edges
    });
    let path = dir.join("graph.agentloom.json");
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();
    // The user trusts the graph they are testing, so its server is started.
    let trusted = in_data_dir(bin(), &path)
        .arg("trust")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    path
}

/// `cmd` with the trust store of the test that wrote `graph` (beside it).
fn in_data_dir(mut cmd: Command, graph: &Path) -> Command {
    cmd.env("XDG_DATA_HOME", graph.parent().unwrap().join("data"));
    cmd
}

/// `agentloom run GRAPH --json` with its run log and workspace in `dir`.
fn run_command(graph: &Path, dir: &Path) -> Command {
    let mut cmd = in_data_dir(bin(), graph);
    cmd.arg("run")
        .arg(graph)
        .arg("--json")
        .arg("--db")
        .arg(dir.join("runs.sqlite3"))
        .arg("--workspace")
        .arg(dir);
    cmd
}

/// Runs `cmd` to its end, failing the test after `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = child.id();
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output().unwrap()));
    waited.recv_timeout(limit).unwrap_or_else(|_| {
        let _ = Command::new("kill")
            .args(["-KILL", &id.to_string()])
            .status();
        panic!("agentloom did not end within {limit:?}")
    })
}

fn one_tool(tool: &str, config: &Value) -> Value {
    json!([
        {"id": "call", "block": format!("mcp.hostile.{tool}"), "config": config},
        {"id": "out", "block": "graph.output", "config": {"name": "out"}}
    ])
}

fn call_to_out() -> Value {
    json!([{"from": ["call", "text"], "to": ["out", "value"]}])
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}):\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_stdio_server_sees_only_a_clean_environment() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(
        dir.path(),
        &one_tool("environment", &json!({})),
        &call_to_out(),
    );
    let mut cmd = run_command(&graph, dir.path());
    cmd.env("LANG", "C.UTF-8");
    let output = output_within(cmd, Duration::from_secs(60));
    let report = report(&output);
    assert_eq!(report["status"], "completed", "{report}");
    let env: Value = serde_json::from_str(report["outputs"]["out"].as_str().unwrap()).unwrap();
    let names: Vec<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert!(
        names.iter().all(|name| !name.starts_with("AGENTLOOM_")),
        "{names:?}"
    );
    assert!(!names.contains(&"HOSTILE_TEST_UNDECLARED"), "{names:?}");
    assert_eq!(env["DECLARED"], "yes");
    assert_eq!(env["LANG"], "C.UTF-8");
    assert!(env["PATH"].is_string(), "{names:?}");
    // The server has its token; the run's output shows it redacted.
    assert_eq!(env["MCP_TOKEN"], "[redacted]");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains(OTHER_SECRET) && !stdout.contains(TOKEN));
}

/// Runs a graph calling `tool` (with node `config`) and returns the run's error: the run
/// must fail, and end within 30 s.
fn failed_call(tool: &str, config: &Value) -> String {
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(dir.path(), &one_tool(tool, config), &call_to_out());
    let started = Instant::now();
    let output = output_within(run_command(&graph, dir.path()), Duration::from_secs(60));
    let report = report(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert_eq!(report["status"], "failed");
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
    report["error"].as_str().unwrap().to_owned()
}

#[test]
fn a_100_mb_answer_fails_the_node_and_the_run_ends() {
    let error = failed_call("huge", &json!({}));
    assert!(
        error.contains("MCP server `hostile` failed while calling `huge`")
            && error.contains("larger than 16 MiB"),
        "{error}"
    );
}

#[test]
fn a_tool_that_never_answers_times_out_as_the_node_says() {
    let error = failed_call("silent", &json!({"timeout_ms": 700}));
    assert!(
        error.contains("MCP tool `silent` of server `hostile` did not answer within 700 ms"),
        "{error}"
    );

    // The stopped server starts again for the next call: here a node handed the error.
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(
        dir.path(),
        &json!([
            {"id": "silent", "block": "mcp.hostile.silent", "config": {"timeout_ms": 700}},
            {"id": "call", "block": "mcp.hostile.echo"},
            {"id": "out", "block": "graph.output", "config": {"name": "out"}}
        ]),
        &json!([
            {"from": ["silent", "error"], "to": ["call", "message"]},
            {"from": ["call", "text"], "to": ["out", "value"]}
        ]),
    );
    let output = output_within(run_command(&graph, dir.path()), Duration::from_secs(60));
    let report = report(&output);
    assert_eq!(report["status"], "completed", "{report}");
    let echoed = report["outputs"]["out"].as_str().unwrap();
    assert!(
        echoed.starts_with("Echo: ")
            && echoed.contains("did not answer within 700 ms")
            && echoed.contains("the server was stopped and starts again on the next call"),
        "{echoed}"
    );
}

#[test]
fn ctrl_c_of_a_run_stops_the_servers_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let graph = write_graph(
        dir.path(),
        &json!([
            {"id": "file", "block": "data.constant", "config": {"value": pid_file}},
            {"id": "call", "block": "mcp.hostile.spawn-helper"},
            {"id": "out", "block": "graph.output", "config": {"name": "out"}}
        ]),
        &json!([
            {"from": ["file", "value"], "to": ["call", "pid_file"]},
            {"from": ["call", "text"], "to": ["out", "value"]}
        ]),
    );
    let mut child = run_command(&graph, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !pid_file.exists() {
        if started.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("the tool did not start its helper");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let pids = std::fs::read_to_string(&pid_file).unwrap();
    let pids: Vec<u32> = pids.split(' ').map(|p| p.parse().unwrap()).collect();
    assert!(pids.iter().all(|&pid| !is_dead(pid)), "{pids:?}");

    agentloom_tests::interrupt(child.id());
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if stopped.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("agentloom run ignored SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(1));
    // The server and the helper it started are both gone.
    let gone = Instant::now();
    while !pids.iter().all(|&pid| is_dead(pid)) {
        assert!(
            gone.elapsed() < Duration::from_secs(5),
            "still running after Ctrl-C: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `agentloom blocks --graph GRAPH` (with `--json` when `json`, and every log line on
/// stderr): its stdout and stderr.
fn list_blocks(graph: &Path, json: bool) -> (String, String) {
    let mut cmd = in_data_dir(bin(), graph);
    cmd.env("AGENTLOOM_LOG", "trace").arg("blocks");
    if json {
        cmd.arg("--json");
    }
    cmd.arg("--graph").arg(graph);
    let listed = output_within(cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&listed.stderr).into_owned();
    assert!(listed.status.success(), "{stderr}");
    (String::from_utf8_lossy(&listed.stdout).into_owned(), stderr)
}

/// Every file of the run log in `dir`, as one text (the database and its WAL).
fn run_log_text(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("runs.sqlite3") {
            text.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    text
}

#[test]
fn the_servers_token_is_never_shown_from_its_tools_metadata_or_errors() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(dir.path(), &one_tool("leak", &json!({})), &call_to_out());

    // Tool metadata: the description and schema quoting the token, a tool named after it.
    for json in [true, false] {
        let (stdout, stderr) = list_blocks(&graph, json);
        assert!(stdout.contains("mcp.hostile.described"), "{stdout}");
        assert!(
            !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
            "{stdout}\n{stderr}"
        );
    }
    let blocks: Value = serde_json::from_str(&list_blocks(&graph, true).0).unwrap();
    let described = blocks
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "mcp.hostile.described")
        .unwrap();
    assert!(
        described["description"]
            .as_str()
            .unwrap()
            .starts_with("Authenticates with [redacted] for you."),
        "{described}"
    );
    assert_eq!(
        described["ports"]["inputs"][0]["description"],
        "defaults to [redacted]"
    );

    // A tool error quoting the token: not in --json, stderr or the run log.
    let output = output_within(run_command(&graph, dir.path()), Duration::from_secs(60));
    let report = report(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    let error = report["error"].as_str().unwrap();
    assert!(
        error.contains("refused: the token [redacted] is not valid here"),
        "{error}"
    );
    let everything = format!(
        "{}{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        run_log_text(dir.path())
    );
    assert!(everything.contains("the token [redacted]"));
    assert!(!everything.contains(TOKEN));
}

#[test]
fn tool_names_with_escapes_newlines_or_paths_are_left_out_and_never_printed_raw() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(dir.path(), &one_tool("echo", &json!({})), &json!([]));
    for json in [true, false] {
        let (stdout, stderr) = list_blocks(&graph, json);
        assert!(stdout.contains("mcp.hostile.echo"), "{stdout}");
        // No block kind from them, and no control character printed anywhere.
        for raw in [
            "\x1b",
            "\nlines",
            "mcp.hostile.two",
            "../escape",
            "mcp.hostile.tok_",
        ] {
            assert!(!stdout.contains(raw), "{raw:?} in:\n{stdout}");
        }
        for raw in ["\x1b", "two\nlines"] {
            assert!(!stderr.contains(raw), "{raw:?} in:\n{stderr}");
        }
        // Each refused name is said once, escaped.
        assert!(
            stderr.contains(r#"the tool named "esc\u{1b}[31mred" is left out"#),
            "{stderr}"
        );
        assert!(
            stderr.contains(r#"the tool named "two\nlines" is left out"#),
            "{stderr}"
        );
        assert!(
            stderr.contains(r#"the tool named "../escape" is left out"#),
            "{stderr}"
        );
    }
}
