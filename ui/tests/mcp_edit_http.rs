//! `agentloom mcp --edit GRAPH --http ADDR`, end to end with the real binary on loopback:
//! the project's own streamable-HTTP MCP client, with the printed token, adds a node and
//! reads the graph back; a request without the token or with another one is answered 401
//! and leaves the file as it was, as does a body over 1 MiB (413); an address other machines could reach is refused.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agentloom_blocks::mcp::McpConnection;
use serde_json::{Value, json};

#[path = "support/mcp_client.rs"]
mod mcp_client;
use mcp_client::{call_tool, connect};

/// A running `agentloom mcp --edit --http` server, stopped when dropped.
struct HttpEditServer {
    child: Child,
    url: String,
    /// The stderr lines up to and including the one with the URL and the token's line.
    banner: Vec<String>,
}

impl Drop for HttpEditServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HttpEditServer {
    /// Starts the server for `graph` on 127.0.0.1, port 0, with `token` as
    /// AGENTLOOM_MCP_TOKEN (or a generated token), and waits for its URL on stderr.
    fn start(dir: &Path, graph: &Path, token: Option<&str>) -> HttpEditServer {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
        cmd.arg("mcp")
            .arg("--edit")
            .arg(graph)
            .args(["--http", "127.0.0.1:0", "--db"])
            .arg(dir.join("runs.sqlite3"))
            .arg("--workspace")
            .arg(dir)
            .env_remove("AGENTLOOM_LOG")
            .env_remove("AGENTLOOM_MCP_TOKEN")
            .env("XDG_DATA_HOME", dir.join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(token) = token {
            cmd.env("AGENTLOOM_MCP_TOKEN", token);
        }
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut banner = Vec::new();
        let mut url = None;
        while let Some(Ok(line)) = lines.next() {
            if url.is_none() {
                url = line
                    .split_whitespace()
                    .find(|word| word.starts_with("http://"))
                    .map(str::to_owned);
                banner.push(line);
            } else {
                banner.push(line);
                break;
            }
        }
        // Keeps reading stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let url = url.unwrap_or_else(|| panic!("no URL on stderr: {banner:?}"));
        HttpEditServer { child, url, banner }
    }

    /// The token printed with the URL.
    fn printed_token(&self) -> String {
        let line = self
            .banner
            .iter()
            .find_map(|line| line.split("Authorization: Bearer ").nth(1))
            .unwrap_or_else(|| panic!("no token on stderr: {:?}", self.banner));
        line.trim().to_owned()
    }
}

/// Calls `tool` and returns its structured answer; a failure fails the test.
async fn call(connection: &Arc<McpConnection>, tool: &str, args: Value) -> Value {
    call_tool(connection, tool, args)
        .await
        .unwrap_or_else(|message| panic!("{tool} failed: {message}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_the_printed_token_adds_a_node_and_reads_the_graph_back() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("built.agentloom.json");
    let server = HttpEditServer::start(dir.path(), &graph, None);
    let token = server.printed_token();
    assert_eq!(token.len(), 64, "a generated token: {token}");

    let editor = connect(&server.url, &token).await.unwrap();
    let added = call(
        &editor,
        "add_node",
        json!({"block": "graph.input", "id": "name", "config": {"type": "text"}}),
    )
    .await;
    assert_eq!(added["id"], "name");
    let graph_back = call(&editor, "get_graph", json!({})).await;
    let nodes = graph_back["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{graph_back}");
    assert_eq!(nodes[0]["id"], "name");
    assert_eq!(nodes[0]["block"], "graph.input");
    // The edit is in the file.
    let on_disk: Value = serde_json::from_slice(&std::fs::read(&graph).unwrap()).unwrap();
    assert_eq!(on_disk["nodes"][0]["id"], "name");
}

/// A JSON-RPC POST to `url` with the `authorization` header given, answered with its status.
async fn post(url: &str, authorization: Option<&str>, body: Value) -> reqwest::StatusCode {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.send().await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_the_token_or_with_another_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("hello.agentloom.json");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples");
    std::fs::copy(examples.join("hello.agentloom.json"), &graph).unwrap();
    let before = std::fs::read(&graph).unwrap();
    let token = "the-right-token-0123456789";
    let server = HttpEditServer::start(dir.path(), &graph, Some(token));
    assert!(
        !server.banner.iter().any(|line| line.contains(token)),
        "a token from the environment is not printed: {:?}",
        server.banner
    );

    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let remove = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "remove_node", "arguments": {"node": "render"}}});
    for authorization in [
        None,
        Some("Bearer the-wrong-token"),
        Some("Bearer "),
        Some(token),
        Some("Basic dGhlLXJpZ2h0LXRva2Vu"),
    ] {
        for body in [&initialize, &remove] {
            assert_eq!(
                post(&server.url, authorization, body.clone()).await,
                reqwest::StatusCode::UNAUTHORIZED,
                "{authorization:?} {body}"
            );
        }
    }
    // The project's client with a wrong token cannot even list the tools.
    let refused = connect(&server.url, "the-wrong-token").await.err().unwrap();
    assert!(!refused.contains("the-wrong-token"), "{refused}");
    assert_eq!(std::fs::read(&graph).unwrap(), before, "the file changed");

    // A body over 1 MiB is refused, even with the right token.
    let huge = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "set_config", "arguments": {"node": "render",
        "config": {"template": "x".repeat(2 * 1024 * 1024)}}}});
    assert_eq!(
        post(&server.url, Some(&format!("Bearer {token}")), huge).await,
        reqwest::StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(std::fs::read(&graph).unwrap(), before, "the file changed");

    // The right token is let through (so the 401s above are the token's doing).
    assert_eq!(
        post(
            &server.url,
            Some(&format!("Bearer {token}")),
            initialize.clone()
        )
        .await,
        reqwest::StatusCode::OK
    );
    assert_eq!(
        post(&server.url, Some(&format!("bearer {token}")), initialize).await,
        reqwest::StatusCode::OK,
        "the scheme's name is case-insensitive"
    );
    let editor = connect(&server.url, token).await.unwrap();
    let removed = call(&editor, "remove_node", json!({"node": "render"})).await;
    assert_eq!(removed["removed"], "render");
    assert_ne!(std::fs::read(&graph).unwrap(), before);
}

#[test]
fn http_without_edit_is_refused() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples");
    let output = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .arg("mcp")
        .arg(examples.join("hello.agentloom.json"))
        .args(["--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--edit GRAPH"), "{stderr}");
}

#[test]
fn an_address_other_machines_reach_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("g.agentloom.json");
    for addr in ["0.0.0.0:0", "[::]:0", "192.0.2.1:8080"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentloom"))
            .args(["mcp", "--edit"])
            .arg(&graph)
            .args(["--http", addr, "--db"])
            .arg(dir.path().join("runs.sqlite3"))
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A server that started listening would never end by itself.
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("{addr}: the server started instead of refusing the address");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{addr}: {stderr}");
        assert!(
            stderr.contains("loopback") && stderr.contains(addr),
            "{addr}: {stderr}"
        );
        assert!(!graph.exists());
    }
}
