//! The run's private-network policy (`Executor::with_private_network`): a run told it may
//! not reach the private network (a graph file that is not trusted) reaches no loopback
//! server through a URL its graph chose, even with `allow_private_network: true`, and its
//! sub-runs (`graph.call`, for-each items) inherit that; by default the same graphs reach it.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentloom_blocks::Registry;
use agentloom_core::{GraphDoc, ValueMap, validate};
use agentloom_engine::{CollectSink, Executor, RunOptions, RunReport, RunStatus};
use serde_json::json;

/// A real HTTP server on 127.0.0.1 answering every request `200 ok`; returns its port and
/// the number of requests it received (a connection closed before a byte is sent is none).
fn server() -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let counted = Arc::clone(&counted);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut request = Vec::new();
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            });
        }
    });
    (port, hits)
}

fn write(dir: &Path, name: &str, doc: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

/// One `http.request` to `url` that the graph allows to reach the private network, its
/// body as output `body`.
fn fetching(url: &str) -> serde_json::Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "fetch",
        "nodes": [
            {"id": "get", "block": "http.request", "config": {"url": url, "allow_private_network": true}},
            {"id": "out", "block": "graph.output", "config": {"name": "body"}}
        ],
        "edges": [{"from": ["get", "body"], "to": ["out", "value"]}]
    })
}

/// A for-each's per-item graph: fetches the item (a URL) with `allow_private_network: true`.
fn fetching_each_item() -> serde_json::Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "fetch item",
        "nodes": [
            {"id": "item", "block": "graph.input", "config": {"name": "item", "type": "text"}},
            {"id": "get", "block": "http.request", "config": {"allow_private_network": true}},
            {"id": "out", "block": "graph.output", "config": {"name": "result"}}
        ],
        "edges": [
            {"from": ["item", "value"], "to": ["get", "url"]},
            {"from": ["get", "body"], "to": ["out", "value"]}
        ]
    })
}

/// A graph that fetches `url` three ways: itself, through `graph.call` of `fetch.json`, and
/// in a for-each item.
fn parent(dir: &Path, url: &str) -> (PathBuf, GraphDoc) {
    write(dir, "fetch.json", &fetching(url));
    let file = write(
        dir,
        "parent.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "parent",
            "nodes": [
                {"id": "get", "block": "http.request", "config": {"url": url, "allow_private_network": true}},
                {"id": "direct", "block": "graph.output", "config": {"name": "direct"}},
                {"id": "call", "block": "graph.call", "config": {"path": "fetch.json"}},
                {"id": "called", "block": "graph.output", "config": {"name": "called"}},
                {"id": "items", "block": "data.constant", "config": {"value": [url], "type": "list<text>"}},
                {"id": "each", "block": "control.for_each", "config": {"graph": fetching_each_item()}},
                {"id": "per_item", "block": "graph.output", "config": {"name": "per_item"}}
            ],
            "edges": [
                {"from": ["get", "body"], "to": ["direct", "value"]},
                {"from": ["call", "body"], "to": ["called", "value"]},
                {"from": ["items", "value"], "to": ["each", "items"]},
                {"from": ["each", "results"], "to": ["per_item", "value"]}
            ]
        }),
    );
    let doc = GraphDoc::from_json_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    (file, doc)
}

/// Runs `doc` (read from `file`) with only the node `only` kept among the fetching ones.
async fn run(
    file: &Path,
    doc: &GraphDoc,
    only: &str,
    private_network: Option<bool>,
) -> (RunReport, Vec<String>) {
    let mut doc = doc.clone();
    let dropped: Vec<&str> = [
        ("get", "direct", None),
        ("call", "called", None),
        ("each", "per_item", Some("items")),
    ]
    .into_iter()
    .filter(|(node, _, _)| *node != only)
    .flat_map(|(node, out, feeding)| [Some(node), Some(out), feeding])
    .flatten()
    .collect();
    doc.nodes.retain(|n| !dropped.contains(&n.id.as_str()));
    doc.edges
        .retain(|e| !dropped.contains(&e.from.0.as_str()) && !dropped.contains(&e.to.0.as_str()));
    let mut registry = Registry::builtin();
    registry.for_graph_file(Some(file));
    let registry = Arc::new(registry);
    let graph = validate(&doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    let mut executor = Executor::new(registry);
    if let Some(allowed) = private_network {
        executor = executor.with_private_network(allowed);
    }
    let sink = Arc::new(CollectSink::default());
    let report = executor
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions::default(),
            sink.clone(),
        )
        .await;
    let failures = sink
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            agentloom_engine::EventKind::NodeFailed { node, error, .. } => {
                Some(format!("{node}: {error}"))
            }
            _ => None,
        })
        .collect();
    (report, failures)
}

#[tokio::test]
async fn a_run_that_may_not_reach_the_private_network_passes_that_on_to_its_sub_runs() {
    let (port, hits) = server();
    let dir = tempfile::tempdir().unwrap();
    let (file, doc) = parent(
        dir.path(),
        &format!("http://localhost:{port}/latest/meta-data"),
    );
    for (only, failed_node) in [("get", "get"), ("call", "call/get"), ("each", "each/0/get")] {
        let (report, failures) = run(&file, &doc, only, Some(false)).await;
        assert_eq!(report.status, RunStatus::Failed, "{only}: {report:?}");
        let failure = failures
            .iter()
            .find(|f| f.starts_with(&format!("{failed_node}: ")))
            .unwrap_or_else(|| panic!("{only}: no failure of {failed_node} in {failures:?}"));
        assert!(
            failure.contains("is a loopback address")
                && failure.contains("this run may not reach")
                && failure.contains("not trusted"),
            "{failure}"
        );
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "{only}: the server was reached"
        );
    }
    // By default, and when told it may, the same graph reaches the server all three ways.
    for (only, output) in [("get", "direct"), ("call", "called"), ("each", "per_item")] {
        for allowed in [None, Some(true)] {
            let before = hits.load(Ordering::SeqCst);
            let (report, failures) = run(&file, &doc, only, allowed).await;
            assert_eq!(report.status, RunStatus::Completed, "{only}: {failures:?}");
            let got = report.outputs[output].to_json();
            assert!(got == json!("ok") || got == json!(["ok"]), "{only}: {got}");
            assert_eq!(hits.load(Ordering::SeqCst), before + 1, "{only}");
        }
    }
}
