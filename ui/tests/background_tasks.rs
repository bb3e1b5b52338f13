//! The app's background work, driven through the real UI (egui_kittest): it runs on the
//! app's one runtime (no thread of another runtime or of its own), a task the window no
//! longer wants is cancelled (its request closed, nothing it found shown), and a run log
//! that is locked never holds up a frame while the timeline waits for it.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::io::Read as _;
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentloom::app::{App, Command, save_graph};
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, graph, harness_for, paths, wait_for_completed_run, wait_until};

/// A peer that takes connections and reads what they send but never answers; each
/// connection is reported when it opens (with the first bytes read) and when the other
/// side closes it.
fn silent_peer() -> (String, mpsc::Receiver<PeerEvent>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (events, heard) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let events = events.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut first = true;
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => {
                            let _ = events.send(PeerEvent::Closed);
                            return;
                        }
                        Ok(n) if first => {
                            first = false;
                            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                            let _ = events.send(PeerEvent::Asked(text));
                        }
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    (url, heard)
}

#[derive(Debug)]
enum PeerEvent {
    Asked(String),
    Closed,
}

/// Steps frames until the peer reports, for at most 10 s.
fn next_event(h: &mut AppHarness, heard: &mpsc::Receiver<PeerEvent>) -> PeerEvent {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        h.step();
        if let Ok(event) = heard.recv_timeout(Duration::from_millis(20)) {
            return event;
        }
        assert!(Instant::now() < deadline, "the peer heard nothing");
    }
}

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(name) = std::fs::read_to_string(task.path().join("comm")) {
            names.push(name.trim().to_owned());
        }
    }
    names
}

/// An LLM node talking to the Ollama at `base`, beside a template node.
fn ollama_graph(base: &str) -> agentloom_core::GraphDoc {
    graph(
        &serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "asks",
            "nodes": [
                {"id": "chat", "block": "llm.chat",
                 "config": {"provider": "ollama", "base_url": base, "prompt": "hi"}},
                {"id": "other", "block": "text.template", "config": {"template": "x"}}
            ]
        })
        .to_string(),
    )
}

#[test]
fn a_model_list_no_longer_shown_is_cancelled_and_its_request_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (base, heard) = silent_peer();
    let mut h = harness_for(App::new(&ollama_graph(&base), None, &paths(&dir)));
    h.state_mut().send(Command::InspectById("chat".into()));
    let PeerEvent::Asked(request) = next_event(&mut h, &heard) else {
        panic!("the connection closed before asking")
    };
    assert!(request.starts_with("GET /api/tags "), "{request}");
    h.get_by_label("Asking Ollama…");

    // Another node inspected: the list is no longer wanted, and its request is closed.
    h.state_mut().send(Command::InspectById("other".into()));
    assert!(matches!(next_event(&mut h, &heard), PeerEvent::Closed));
    assert_eq!(h.state().background_tasks(), 0);

    // Shown again, it is asked again (not a failure of the cancelled request).
    h.state_mut().send(Command::InspectById("chat".into()));
    assert!(matches!(next_event(&mut h, &heard), PeerEvent::Asked(_)));
    h.get_by_label("Asking Ollama…");
    assert!(h.query_by_label("Ollama not reached").is_none());
}

/// Input → a delay of `ms` → output: an evaluation that takes its time.
const SLOW: &str = r#"{
  "format": "agentloom.graph", "version": 1, "name": "slow",
  "nodes": [
    {"id": "name", "block": "graph.input", "config": {"name": "name", "type": "text"}},
    {"id": "wait", "block": "control.delay", "config": {"ms": 3000}},
    {"id": "greeting", "block": "graph.output", "config": {"name": "greeting"}}
  ],
  "edges": [
    {"from": ["name", "value"], "to": ["wait", "value"]},
    {"from": ["wait", "value"], "to": ["greeting", "value"]}
  ]
}"#;

#[test]
fn an_evaluation_and_a_model_list_run_on_the_apps_one_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let graph_file = dir.path().join("slow.agentloom.json");
    save_graph(&graph(SLOW), &graph_file).unwrap();
    let cases = dir.path().join("slow.cases.jsonl");
    std::fs::write(
        &cases,
        "{\"name\": \"one\", \"inputs\": {\"name\": \"Ada\"}, \"expect\": {\"greeting\": \"Ada\"}}\n\
         {\"name\": \"two\", \"inputs\": {\"name\": \"Bo\"}, \"expect\": {\"greeting\": \"Bo\"}}\n",
    )
    .unwrap();
    // The window shows a graph asking an Ollama that never answers; the file evaluated
    // waits for its delay.
    let (base, heard) = silent_peer();
    let shown = ollama_graph(&base);
    let mut h = harness_for(App::new(&shown, Some(graph_file), &paths(&dir)));
    h.state_mut().evaluations.open = true;
    h.state_mut().evaluations.cases_path = cases.display().to_string();
    h.state_mut().evaluations.concurrency = "1".to_owned();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Run evaluation")
        .click();
    h.run_steps(2);
    assert!(h.state().evaluations.is_running());
    h.state_mut().send(Command::InspectById("chat".into()));
    assert!(matches!(next_event(&mut h, &heard), PeerEvent::Asked(_)));

    // Every thread doing that work is one of the app's runtime.
    assert!(h.state().evaluations.is_running());
    let names = thread_names();
    assert!(
        names.iter().any(|n| n == "agentloom-run"),
        "the app's runtime: {names:?}"
    );
    for other in [
        "tokio-runtime-w",
        "tokio-rt-worker",
        "agentloom-eval",
        "agentloom-model",
    ] {
        assert!(
            !names.iter().any(|n| n == other),
            "a thread `{other}` outside the app's runtime: {names:?}"
        );
    }

    assert_eq!(
        h.state().background_tasks(),
        2,
        "the evaluation and the model list"
    );

    // Stopped from the window, the evaluation says how far it got.
    h.get_by_role_and_label(Role::Button, "Stop").click();
    wait_until(&mut h, "the evaluation to stop", |h| {
        !h.state().evaluations.is_running()
    });
    let status = h.state().evaluations.status.clone();
    assert!(status.starts_with("Stopped after "), "{status}");
    assert_eq!(
        h.state().background_tasks(),
        1,
        "the model list is still asked"
    );
}

#[test]
fn the_timeline_is_read_by_the_apps_logic_never_while_drawing() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&support::example(), None, &paths(&dir)));
    h.state_mut().send(Command::StartRun);
    wait_for_completed_run(&mut h);
    assert_eq!(h.state().background_tasks(), 0);

    // The first frame that draws the timeline has nothing read yet: it asks for the read,
    // which a background task makes, and shows its bars once the poll brings them.
    h.get_by_label("Timeline").click();
    let deadline = Instant::now() + Duration::from_secs(10);
    let first_shown = loop {
        h.step();
        if h.query_by_label("Reading the timeline…").is_some() {
            break "reading";
        }
        if h.query_by_label_contains("Timeline:").is_some() {
            break "bars";
        }
        assert!(Instant::now() < deadline, "the timeline was never drawn");
    };
    assert_eq!(first_shown, "reading", "the run log was read while drawing");
    wait_until(&mut h, "the timeline", |h| {
        h.query_by_label_contains("Timeline:").is_some()
    });
    let bars = h.state().timeline_bars();
    assert!(
        bars.iter()
            .any(|b| b.node == "render" && b.end_ms.is_some()),
        "{bars:?}"
    );
    assert_eq!(h.state().background_tasks(), 0);
}
