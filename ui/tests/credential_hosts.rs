//! Credentials bound to hosts, through the real binary: a capturing HTTP peer on loopback
//! never sees a token for a host the credential is not bound to (directly, through a
//! 307/308 redirect to another port, under another name for loopback, echoed back and
//! forwarded by the next node), while a bound host gets it; `credentials add --host` and
//! `credentials hosts` with the real keychain.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufReader, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

const TOKEN: &str = "tok-CANARY-hosts-7f3a9";

/// A loopback HTTP server that records every request it gets (request line, headers and
/// body). `/307/HOST:PORT/PATH` and `/308/…` redirect to `http://HOST:PORT/PATH`; `/echo`
/// answers with the request it got; anything else with `{"ok": true}`.
struct Peer {
    base: String,
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Peer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = log.clone();
                std::thread::spawn(move || answer(stream, &log));
            }
        });
        Self {
            base: format!("http://127.0.0.1:{port}"),
            port,
            seen,
        }
    }

    /// Everything it received, one request after another.
    fn received(&self) -> String {
        self.seen.lock().unwrap().join("\n----\n")
    }
}

fn answer(mut stream: std::net::TcpStream, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let (head, body) = agentloom_tests::read_http_request(&mut reader);
    let request = format!("{head}\r\n{}", String::from_utf8_lossy(&body));
    log.lock().unwrap().push(request.clone());
    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
    let (status, extra, body) = if let Some(rest) = path
        .strip_prefix("/307/")
        .map(|r| ("307 Temporary Redirect", r))
        .or_else(|| {
            path.strip_prefix("/308/")
                .map(|r| ("308 Permanent Redirect", r))
        }) {
        let (status, target) = rest;
        (
            status,
            format!("location: http://{target}\r\n"),
            String::new(),
        )
    } else if path.starts_with("/echo") {
        (
            "200 OK",
            String::new(),
            json!({"request": request}).to_string(),
        )
    } else {
        ("200 OK", String::new(), json!({"ok": true}).to_string())
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\n{extra}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn write_graph(dir: &Path, nodes: &Value, edges: &Value) -> PathBuf {
    let path = dir.join("graph.agentloom.json");
    let graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "hosts",
        "nodes": nodes, "edges": edges
    });
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();
    path
}

/// `agentloom run GRAPH --json` with `env`, the run log in `dir`.
fn run(dir: &Path, graph: &Path, env: &[(&str, String)]) -> (Output, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG")
        .arg("run")
        .arg(graph)
        .arg("--json")
        .arg("--trust")
        .arg("--db")
        .arg(dir.join("runs.sqlite3"))
        .stdin(Stdio::null());
    for (name, value) in env {
        cmd.env(name, value);
    }
    let output = cmd.output().unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output, report)
}

/// The error of node `id` in a `--json` report, or "" when it has none.
fn node_error(report: &Value, id: &str) -> String {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .unwrap_or_else(|| panic!("no node `{id}` in {report}"))["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Credential `svc` in the environment, bound to `peer`.
fn svc_bound_to(peer: &Peer) -> [(&'static str, String); 2] {
    [
        ("AGENTLOOM_SECRET_SVC", TOKEN.to_owned()),
        (
            "AGENTLOOM_SECRET_SVC_HOSTS",
            format!("127.0.0.1:{}", peer.port),
        ),
    ]
}

fn request(id: &str, url: &str, extra: &Value) -> Value {
    // The peers listen on loopback, which a graph reaches only when it says so.
    let mut config = json!({"url": url, "credential": "svc", "allow_private_network": true});
    config
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"id": id, "block": "http.request", "config": config})
}

/// Every node's error goes to an output, so that one refusal does not stop the others.
fn caught(ids: &[&str]) -> (Vec<Value>, Vec<Value>) {
    let nodes = ids
        .iter()
        .map(|id| json!({"id": format!("{id}_error"), "block": "graph.output", "config": {"name": format!("{id}_error")}}))
        .collect();
    let edges = ids
        .iter()
        .map(|id| json!({"from": [id, "error"], "to": [format!("{id}_error"), "value"]}))
        .collect();
    (nodes, edges)
}

fn assert_never_saw_the_token(peer: &Peer) {
    let received = peer.received();
    let encoded = base64_of(TOKEN);
    assert!(
        !received.contains(TOKEN) && !received.contains(&encoded),
        "the unbound host got the token:\n{received}"
    );
}

fn base64_of(text: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in text.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn a_credential_reaches_only_its_hosts_directly_and_through_redirects() {
    let dir = tempfile::tempdir().unwrap();
    let (home, away) = (Peer::start(), Peer::start());
    let to_away =
        |code: u16, path: &str| format!("{}/{code}/127.0.0.1:{}/{path}", home.base, away.port);
    let header = |name: &str| json!({"credential_style": "header", "credential_param": name});
    let failing = ["away", "alias"];
    let mut nodes = vec![
        request("home", &format!("{}/ok", home.base), &json!({})),
        request("away", &format!("{}/ok", away.base), &json!({})),
        request(
            "alias",
            &format!("http://localhost:{}/ok", home.port),
            &json!({}),
        ),
        request("hop307", &to_away(307, "landing307"), &header("X-Api-Key")),
        {
            let mut post = request(
                "hop308",
                &to_away(308, "landing308"),
                &header("Private-Token"),
            );
            post["config"]["method"] = json!("POST");
            post
        },
        request(
            "query",
            &to_away(307, "landingq"),
            &json!({"credential_style": "query", "credential_param": "api_key"}),
        ),
        request("bearer307", &to_away(307, "landingb"), &json!({})),
        json!({"id": "payload", "block": "data.constant", "config": {"value": "hello body"}}),
    ];
    let mut edges = vec![json!({"from": ["payload", "value"], "to": ["hop308", "body"]})];
    let (outputs, wires) = caught(&failing);
    nodes.extend(outputs);
    edges.extend(wires);
    let graph = write_graph(dir.path(), &Value::Array(nodes), &Value::Array(edges));
    let (output, report) = run(dir.path(), &graph, &svc_bound_to(&home));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}\n{report}");

    // The bound host got it, in each style.
    let at_home = home.received();
    assert!(at_home.contains(&format!("Bearer {TOKEN}")), "{at_home}");
    assert!(
        at_home
            .to_ascii_lowercase()
            .contains(&format!("x-api-key: {TOKEN}").to_ascii_lowercase()),
        "{at_home}"
    );
    assert!(at_home.contains(&format!("api_key={TOKEN}")), "{at_home}");

    // Another port, and another name for loopback: refused, naming credential and host.
    let away_error = node_error(&report, "away");
    assert!(
        away_error.contains(&format!(
            "credential `svc` may not be sent to 127.0.0.1:{} (it is bound to 127.0.0.1:{})",
            away.port, home.port
        )) && away_error.contains("AGENTLOOM_SECRET_SVC_HOSTS"),
        "{away_error}"
    );
    let alias_error = node_error(&report, "alias");
    assert!(
        alias_error.contains(&format!("may not be sent to localhost:{}", home.port)),
        "{alias_error}"
    );

    // Redirected to the other port: followed without the credential, no Referer, the
    // 308's body sent again.
    for id in ["hop307", "hop308", "query", "bearer307"] {
        assert_eq!(node_error(&report, id), "", "{id}: {report}");
    }
    let at_away = away.received();
    for landing in [
        "GET /landing307",
        "POST /landing308",
        "GET /landingq",
        "GET /landingb",
    ] {
        assert!(at_away.contains(landing), "{landing} missing:\n{at_away}");
    }
    assert!(at_away.contains("hello body"), "{at_away}");
    assert!(
        !at_away.to_ascii_lowercase().contains("referer"),
        "{at_away}"
    );
    assert!(
        !at_away.to_ascii_lowercase().contains("authorization"),
        "{at_away}"
    );
    assert_never_saw_the_token(&away);
    assert!(!String::from_utf8_lossy(&output.stdout).contains(TOKEN));
    assert!(!stderr.contains(TOKEN));
}

#[test]
fn an_echoed_token_forwarded_to_another_host_is_refused_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let (home, away) = (Peer::start(), Peer::start());
    // `forward` and `bounce` have no credential: they send whatever arrives, here the
    // echoed token; `bounce` to the bound host, which redirects it (308: body again) away.
    let mut nodes = vec![
        request("fetch", &format!("{}/echo", home.base), &json!({})),
        json!({"id": "forward", "block": "http.request",
         "config": {"url": format!("{}/collect", away.base), "method": "POST", "allow_private_network": true}}),
        json!({"id": "bounce", "block": "http.request",
         "config": {"url": format!("{}/308/127.0.0.1:{}/bounced", home.base, away.port), "method": "POST", "allow_private_network": true}}),
    ];
    let mut edges = vec![
        json!({"from": ["fetch", "body"], "to": ["forward", "body"]}),
        json!({"from": ["fetch", "body"], "to": ["bounce", "body"]}),
    ];
    let (outputs, wires) = caught(&["forward", "bounce"]);
    nodes.extend(outputs);
    edges.extend(wires);
    let graph = write_graph(dir.path(), &Value::Array(nodes), &Value::Array(edges));
    let (output, report) = run(dir.path(), &graph, &svc_bound_to(&home));
    assert!(output.status.success(), "{report}");
    let bounced = node_error(&report, "bounce");
    assert!(
        bounced.contains(&format!(
            "the redirect from 127.0.0.1:{home_port} to 127.0.0.1:{away_port} was not followed: credential `svc` may not be sent to 127.0.0.1:{away_port}",
            home_port = home.port,
            away_port = away.port
        )),
        "{bounced}"
    );
    assert!(
        home.received().contains(TOKEN),
        "the echo never got the token"
    );
    let error = node_error(&report, "forward");
    assert!(
        error.contains(&format!(
            "credential `svc` may not be sent to 127.0.0.1:{}",
            away.port
        )),
        "{error}"
    );
    assert_never_saw_the_token(&away);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
        "{stdout}\n{stderr}"
    );
    // The echoed body is in the run log redacted, like every output holding a secret.
    let mut log = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().contains("runs.sqlite3") {
            log.extend(std::fs::read(path).unwrap());
        }
    }
    assert!(!log.is_empty());
    assert!(
        !log.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
        "the run log holds the token"
    );
}

/// Older files named a node's credential beside its config: such a file still runs with it.
#[test]
fn a_credential_named_on_the_node_in_an_older_file_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::start();
    let nodes = json!([{
        "id": "get", "block": "http.request", "credential": "svc",
        "config": {"url": format!("{}/data", peer.base), "allow_private_network": true}
    }]);
    let graph = write_graph(dir.path(), &nodes, &json!([]));
    let (output, report) = run(dir.path(), &graph, &svc_bound_to(&peer));
    assert!(
        output.status.success(),
        "{}\n{report}",
        String::from_utf8_lossy(&output.stderr)
    );
    let received = peer.received();
    assert!(
        received.contains(&format!("Bearer {TOKEN}")),
        "the node's credential was not sent:\n{received}"
    );
}

#[test]
fn provider_keys_in_their_own_headers_stay_with_the_provider() {
    let dir = tempfile::tempdir().unwrap();
    let away = Peer::start();
    let nodes = json!([
        {"id": "claude", "block": "llm.chat", "config": {
            "provider": "anthropic", "base_url": away.base, "model": "m", "prompt": "hi",
            "credential": "anthropic"}},
        {"id": "search", "block": "web.search", "config": {
            "provider": "brave", "url": away.base, "credential": "brave"}},
        {"id": "local", "block": "llm.chat", "config": {
            "provider": "openai", "base_url": format!("{}/v1", away.base), "model": "m",
            "prompt": "hi", "stream": false}},
        {"id": "local_error", "block": "graph.output", "config": {"name": "local_error"}},
        {"id": "query", "block": "data.constant", "config": {"value": "rust"}},
        {"id": "claude_error", "block": "graph.output", "config": {"name": "claude_error"}},
        {"id": "search_error", "block": "graph.output", "config": {"name": "search_error"}}
    ]);
    let edges = json!([
        {"from": ["query", "value"], "to": ["search", "query"]},
        {"from": ["claude", "error"], "to": ["claude_error", "value"]},
        {"from": ["search", "error"], "to": ["search_error", "value"]},
        {"from": ["local", "error"], "to": ["local_error", "value"]}
    ]);
    let graph = write_graph(dir.path(), &nodes, &edges);
    // Environment credentials named after their provider get its hosts.
    let (output, report) = run(
        dir.path(),
        &graph,
        &[
            ("AGENTLOOM_SECRET_ANTHROPIC", format!("{TOKEN}-anthropic")),
            ("AGENTLOOM_SECRET_BRAVE", format!("{TOKEN}-brave")),
            ("AGENTLOOM_SECRET_OPENAI", format!("{TOKEN}-openai")),
        ],
    );
    assert!(
        output.status.success(),
        "{}\n{report}",
        String::from_utf8_lossy(&output.stderr)
    );
    let host = format!("127.0.0.1:{}", away.port);
    let claude = node_error(&report, "claude");
    assert!(
        claude.contains(&format!(
            "credential `anthropic` may not be sent to {host} (it is bound to api.anthropic.com)"
        )),
        "{claude}"
    );
    let search = node_error(&report, "search");
    assert!(
        search.contains(&format!(
            "credential `brave` may not be sent to {host} (it is bound to api.search.brave.com)"
        )),
        "{search}\n{report}"
    );
    // The OpenAI key the block was not told to use is not sent to a self-hosted server: it
    // gets the request without it.
    let received = away.received();
    assert!(received.contains("POST /v1/chat/completions"), "{received}");
    assert_never_saw_the_token(&away);
    assert!(
        !received.to_ascii_lowercase().contains("authorization"),
        "{received}"
    );
}

#[test]
fn stored_credentials_carry_their_hosts_from_the_cli_to_a_run() {
    if !agentloom_tests::keychain_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let (home, away) = (Peer::start(), Peer::start());
    let name = format!("hosts-test-{}", std::process::id());
    let cli = |args: &[&str], stdin: &str| -> (bool, String) {
        let output = agentloom_tests::output_with_stdin(
            Command::new(env!("CARGO_BIN_EXE_agentloom"))
                .env_remove("AGENTLOOM_LOG")
                .env("XDG_DATA_HOME", data.path())
                .args(args),
            stdin,
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!text.contains(TOKEN), "{text}");
        (output.status.success(), text)
    };
    let home_host = format!("127.0.0.1:{}", home.port);
    let (ok, text) = cli(
        &["credentials", "add", &name, "--host", &home_host],
        &format!("{TOKEN}\n"),
    );
    assert!(
        ok && text.contains(&format!("it may be sent to {home_host}")),
        "{text}"
    );
    let (ok, text) = cli(
        &["credentials", "add", "bad-host", "--host", "https://x/y"],
        "x\n",
    );
    assert!(
        !ok && text.contains("--host: `https://x/y` is not a host"),
        "{text}"
    );

    let (ok, text) = cli(&["credentials", "list"], "");
    assert!(
        ok && text.contains(&name) && text.contains(&home_host),
        "{text}"
    );
    // The list names the system's keychain the secrets are in.
    assert!(
        text.contains(&format!(
            "Secrets are kept in {}",
            agentloom_engine::credentials::KEYCHAIN_NAME
        )) && (text.contains("Secret Service") || !cfg!(target_os = "linux")),
        "{text}"
    );
    let alias = format!("localhost:{}", home.port);
    let (ok, text) = cli(&["credentials", "hosts", &name, "--add", &alias], "");
    assert!(
        ok && text.contains(&format!("may be sent to {home_host}, {alias}")),
        "{text}"
    );
    let (ok, text) = cli(&["credentials", "list", "--json"], "");
    let listed: Value = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
    let entry = listed
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == name.as_str()))
        .cloned()
        .unwrap_or_else(|| panic!("{text}"));
    assert!(ok);
    assert_eq!(entry["hosts"], json!([home_host, alias]));

    // A run with the stored credential: the bound host gets it, the other is refused.
    let nodes = json!([
        {"id": "home", "block": "http.request", "config": {"url": format!("{}/ok", home.base), "credential": name, "allow_private_network": true}},
        {"id": "away", "block": "http.request", "config": {"url": format!("{}/ok", away.base), "credential": name, "allow_private_network": true}},
        {"id": "away_error", "block": "graph.output", "config": {"name": "away_error"}}
    ]);
    let edges = json!([{"from": ["away", "error"], "to": ["away_error", "value"]}]);
    let graph = write_graph(data.path(), &nodes, &edges);
    let (output, report) = run(
        data.path(),
        &graph,
        &[("XDG_DATA_HOME", data.path().display().to_string())],
    );
    let removed = cli(&["credentials", "remove", &name], "");
    assert!(
        output.status.success(),
        "{}\n{report}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(home.received().contains(&format!("Bearer {TOKEN}")));
    let error = node_error(&report, "away");
    assert!(
        error.contains(&format!(
            "`agentloom credentials hosts {name} --add 127.0.0.1:{}`",
            away.port
        )),
        "{error}"
    );
    assert_never_saw_the_token(&away);
    assert!(removed.0, "{}", removed.1);
}
