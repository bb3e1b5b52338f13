//! A run going on from the run log gets back the secrets the log does not keep: a node whose
//! outputs held a secret (redacted in the log) runs again instead of handing on the marker,
//! so the node after it sends the real value; one that would repeat a side effect is refused
//! before anything runs, saying why and what to do. Real `agentloom` processes (the paused
//! one gone before the next starts), real SQLite run logs, a real loopback HTTP server that
//! hands the bearer token back, the secret from `AGENTLOOM_SECRET_SVC`; the app, shown the
//! paused run from its history, says why it cannot go on.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::io::{BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use egui_kittest::kittest::Queryable as _;
use serde_json::{Value, json};

const TOKEN: &str = "tok-SEED-canary-41c7";

/// A loopback HTTP server: `/echo` answers with the bearer token it was sent, anything else
/// with `ok`; every request is kept (method, path and body).
struct Peer {
    base: String,
    port: u16,
    seen: Arc<Mutex<Vec<(String, String, String)>>>,
}

impl Peer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || answer(stream, &kept));
            }
        });
        Self {
            base: format!("http://127.0.0.1:{port}"),
            port,
            seen,
        }
    }

    /// The bodies of the requests to `path`, in order.
    fn bodies(&self, path: &str) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, p, _)| p == path)
            .map(|(_, _, body)| body.clone())
            .collect()
    }
}

fn answer(mut stream: TcpStream, kept: &Mutex<Vec<(String, String, String)>>) {
    let (head, body) =
        agentloom_tests::read_http_request(&mut BufReader::new(stream.try_clone().unwrap()));
    let mut words = head.split(' ');
    let method = words.next().unwrap_or_default().to_owned();
    let path = words.next().unwrap_or("/").to_owned();
    let bearer = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("authorization")
                .then(|| value.trim().strip_prefix("Bearer ").map(str::to_owned))
                .flatten()
        })
        .unwrap_or_default();
    kept.lock().unwrap().push((
        method,
        path.clone(),
        String::from_utf8_lossy(&body).into_owned(),
    ));
    let reply = if path == "/echo" {
        bearer
    } else {
        "ok".to_owned()
    };
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        reply.len()
    );
}

/// `fetch` (`fetch_method` to `/echo` with credential `svc`: its body is the token) →
/// `use` (POSTs that body to the URL `url` hands it) → `out`.
fn graph(dir: &Path, peer: &Peer, fetch_method: &str) -> PathBuf {
    let graph = json!({"format": "agentloom.graph", "version": 1, "name": "seeded secret",
        "nodes": [
            {"id": "fetch", "block": "http.request", "label": "Fetch", "position": [0, 0], "config": {
                "url": format!("{}/echo", peer.base), "method": fetch_method,
                "credential": "svc", "allow_private_network": true}},
            {"id": "url", "block": "data.constant", "position": [0, 300], "config": {
                "value": format!("{}/use", peer.base), "type": "text"}},
            {"id": "use", "block": "http.request", "position": [350, 0], "config": {
                "method": "POST", "allow_private_network": true}},
            {"id": "out", "block": "graph.output", "position": [700, 0], "config": {"name": "answer"}}],
        "edges": [
            {"from": ["fetch", "body"], "to": ["use", "body"]},
            {"from": ["url", "value"], "to": ["use", "url"]},
            {"from": ["use", "body"], "to": ["out", "value"]}]});
    let path = dir.join("seeded.agentloom.json");
    std::fs::write(&path, graph.to_string()).unwrap();
    path
}

/// `agentloom ARGS --db DB` with the secret in the environment and no terminal.
fn agentloom(dir: &Path, peer: &Peer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .env("AGENTLOOM_SECRET_SVC", TOKEN)
        .env(
            "AGENTLOOM_SECRET_SVC_HOSTS",
            format!("127.0.0.1:{}", peer.port),
        )
        .env("XDG_DATA_HOME", dir)
        .current_dir(dir)
        .args(args)
        .arg("--db")
        .arg(dir.join("runs.sqlite3"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(output)
        )
    })
}

/// Runs `graph` (trusted) until it pauses at `at` (`use`, `fetch:after`); the run id.
fn run_until_paused(dir: &Path, peer: &Peer, graph: &Path, at: &str) -> String {
    let output = agentloom(
        dir,
        peer,
        &[
            "run",
            graph.to_str().unwrap(),
            "--trust",
            "--json",
            "--break",
            at,
        ],
    );
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["status"], "waiting", "{report}");
    report["run_id"].as_str().unwrap().to_owned()
}

/// Whether a file of the run log (the database, its -wal and -shm) holds the token.
fn run_log_holds_token(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().any(|entry| {
        let path = entry.unwrap().path();
        path.to_string_lossy().contains("runs.sqlite3")
            && std::fs::read(&path)
                .unwrap()
                .windows(TOKEN.len())
                .any(|w| w == TOKEN.as_bytes())
    })
}

#[test]
fn a_run_continued_from_the_log_hands_the_real_secret_on() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::start();
    let graph = graph(dir.path(), &peer, "GET");
    let run_id = run_until_paused(dir.path(), &peer, &graph, "use");
    assert_eq!(peer.bodies("/echo").len(), 1);
    assert!(peer.bodies("/use").is_empty());
    assert!(
        !run_log_holds_token(dir.path()),
        "the run log holds the token"
    );

    // Another process goes on from the log: `fetch` (a GET) runs again, `use` gets the token.
    let output = agentloom(dir.path(), &peer, &["continue", &run_id, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(report(&output)["status"], "completed");
    assert_eq!(peer.bodies("/use"), [TOKEN], "what `use` sent");
    assert_eq!(peer.bodies("/echo").len(), 2, "`fetch` ran again");
    assert!(
        !run_log_holds_token(dir.path()),
        "the run log holds the token"
    );
}

#[test]
fn outputs_left_as_shown_after_a_pause_come_back_with_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::start();
    let graph = graph(dir.path(), &peer, "GET");
    // Paused after `fetch`: its outputs are shown (and kept) with the token replaced.
    let run_id = run_until_paused(dir.path(), &peer, &graph, "fetch:after");
    let output = agentloom(dir.path(), &peer, &["continue", &run_id, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(peer.bodies("/use"), [TOKEN], "what `use` sent");
    assert!(
        !run_log_holds_token(dir.path()),
        "the run log holds the token"
    );
}

#[test]
fn a_continuation_that_would_repeat_a_side_effect_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::start();
    // `fetch` POSTs: running it again would send it twice.
    let graph = graph(dir.path(), &peer, "POST");
    let run_id = run_until_paused(dir.path(), &peer, &graph, "use");
    let output = agentloom(dir.path(), &peer, &["continue", &run_id]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.contains(
            "node `fetch`'s output held a secret, which the run log does not keep, and `fetch` (HTTP request) has side effects"
        ) && said.contains("rerun the graph from the start, or fork from before `fetch`"),
        "{said}"
    );
    assert_eq!(peer.bodies("/echo").len(), 1, "`fetch` sent once");
    assert!(peer.bodies("/use").is_empty(), "nothing ran");
    // Still paused: the decision was not taken.
    let shown = agentloom(dir.path(), &peer, &["show", &run_id, "--json"]);
    assert_eq!(report(&shown)["status"], "waiting");
}

#[test]
fn a_fork_reusing_a_redacted_output_runs_its_node_again() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::start();
    let graph = graph(dir.path(), &peer, "GET");
    let parent = agentloom(
        dir.path(),
        &peer,
        &["run", graph.to_str().unwrap(), "--trust", "--json"],
    );
    assert!(parent.status.success(), "{}", stderr(&parent));
    let parent_id = report(&parent)["run_id"].as_str().unwrap().to_owned();
    assert_eq!(peer.bodies("/use"), [TOKEN]);

    // The fork sends `use` elsewhere: it runs again with `fetch`'s body, which the log keeps
    // redacted, so `fetch` runs again too.
    let elsewhere = format!("url.value=\"{}/use\"", peer.base);
    let fork = agentloom(
        dir.path(),
        &peer,
        &[
            "run",
            graph.to_str().unwrap(),
            "--trust",
            "--fork",
            &parent_id,
            "--set",
            &elsewhere,
            "--json",
        ],
    );
    assert!(fork.status.success(), "{}", stderr(&fork));
    assert_eq!(peer.bodies("/use"), [TOKEN, TOKEN], "what `use` sent");
    assert_eq!(peer.bodies("/echo").len(), 2, "`fetch` ran again");
    assert!(
        !run_log_holds_token(dir.path()),
        "the run log holds the token"
    );
}

#[test]
fn a_run_resumed_after_an_approval_hands_the_real_secret_on() {
    let dir = tempfile::tempdir().unwrap();
    let peer = Peer::start();
    // fetch → gate (a person approves what it hands on) → use.
    let graph = json!({"format": "agentloom.graph", "version": 1, "name": "gated secret",
        "nodes": [
            {"id": "fetch", "block": "http.request", "config": {
                "url": format!("{}/echo", peer.base), "credential": "svc",
                "allow_private_network": true}},
            {"id": "gate", "block": "human.approval", "config": {"action": "Send it?"}},
            {"id": "use", "block": "http.request", "config": {
                "url": format!("{}/use", peer.base), "method": "POST",
                "allow_private_network": true}}],
        "edges": [
            {"from": ["fetch", "body"], "to": ["gate", "value"]},
            {"from": ["gate", "value"], "to": ["use", "body"]}]});
    let path = dir.path().join("gated.agentloom.json");
    std::fs::write(&path, graph.to_string()).unwrap();
    let paused = agentloom(
        dir.path(),
        &peer,
        &["run", path.to_str().unwrap(), "--trust", "--json"],
    );
    assert_eq!(paused.status.code(), Some(3), "{}", stderr(&paused));
    let run_id = report(&paused)["run_id"].as_str().unwrap().to_owned();
    assert!(
        !run_log_holds_token(dir.path()),
        "the run log holds the token"
    );

    // Approved as asked, in another process: `use` sends the token, not the marker.
    let output = agentloom(dir.path(), &peer, &["approve", &run_id, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(peer.bodies("/use"), [TOKEN], "what `use` sent");
    assert!(
        !run_log_holds_token(dir.path()),
        "the run log holds the token"
    );
}

#[test]
fn the_app_says_why_a_run_that_would_repeat_a_side_effect_cannot_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let paths = support::paths(&dir);
    let peer = Peer::start();
    let graph = graph(dir.path(), &peer, "POST");
    let run_id = run_until_paused(dir.path(), &peer, &graph, "use");

    // The app shows the paused run from its history; Continue is refused, saying why.
    let doc = agentloom::app::load_graph(&graph).unwrap();
    let mut h = support::harness_for(agentloom::app::App::new(&doc, Some(graph.clone()), &paths));
    h.get_by_label_contains("waiting · just now").click();
    h.run_steps(3);
    assert_eq!(h.state().run.run_id.as_deref(), Some(run_id.as_str()));
    support::wait_until(&mut h, "the pause", |h| {
        h.query_by_label_contains("Paused before `use`").is_some()
    });
    support::keys(&mut h, egui::Modifiers::NONE, egui::Key::F5);
    h.run_steps(3);
    let notice = h.state().notice.clone().unwrap_or_default();
    assert!(
        notice.starts_with("Cannot continue the run: ")
            && notice
                .contains("node `fetch`'s output held a secret, which the run log does not keep"),
        "{notice}"
    );
    h.get_by_label_contains("rerun the graph from the start, or fork from before `fetch`");
    assert_eq!(peer.bodies("/echo").len(), 1, "`fetch` sent once");
    assert!(peer.bodies("/use").is_empty(), "nothing ran");
}

#[test]
fn outputs_that_held_a_secret_are_not_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let paths = support::paths(&dir);
    let peer = Peer::start();
    let graph = graph(dir.path(), &peer, "GET");
    let ran = agentloom(
        dir.path(),
        &peer,
        &["run", graph.to_str().unwrap(), "--trust", "--json"],
    );
    assert!(ran.status.success(), "{}", stderr(&ran));

    let doc = agentloom::app::load_graph(&graph).unwrap();
    let mut h = support::harness_for(agentloom::app::App::new(&doc, Some(graph.clone()), &paths));
    h.get_by_label_contains("completed · just now").click();
    h.run_steps(3);
    let at = support::title_of(&h, "Fetch");
    support::click_at(
        &mut h,
        at,
        egui::PointerButton::Secondary,
        egui::Modifiers::NONE,
    );
    h.get_by_role_and_label(egui::accesskit::Role::Button, "Pin outputs")
        .click();
    h.run_steps(3);
    let notice = h.state().notice.clone().unwrap_or_default();
    assert!(
        notice.starts_with("`fetch`'s outputs are not pinned: they held a secret, which the run shown does not keep"),
        "{notice}"
    );
    assert!(
        h.state()
            .document
            .to_doc()
            .node("fetch")
            .unwrap()
            .pinned
            .is_none()
    );
}
