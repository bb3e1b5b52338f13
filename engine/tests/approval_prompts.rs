//! Approval prompts say what will happen, for every block and however it is reached: a
//! node, an item of a for-each, a node of a for-each's sub-graph or of a called graph
//! file. The description comes from the block itself (`NodeImpl::describe`), through the
//! same `Approver` every door uses (terminal, app, `approve`, remote approvals).

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use agentloom_blocks::Registry;
use agentloom_core::{
    ApprovalDecision, ApprovalRequest, GraphDoc, ValueMap, async_trait, validate,
};
use agentloom_engine::{Approver, CollectSink, Executor, RunOptions, RunStatus};
use serde_json::{Value, json};

/// Approves nothing, and remembers each question as `node: action`, with what it showed.
#[derive(Default)]
struct Recording(Mutex<Vec<(String, Value)>>);

#[async_trait]
impl Approver for Recording {
    async fn decide_or_pause(
        &self,
        _run: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Option<ApprovalDecision> {
        self.0.lock().unwrap().push((
            format!("{node}: {}", request.action),
            request.shown().to_json(),
        ));
        Some(ApprovalDecision::Rejected {
            message: "not now".to_owned(),
        })
    }
}

/// A loopback port nobody answers on but which counts who connected: a rejected request
/// must not have reached it.
struct Unreached(TcpListener);

impl Unreached {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Self(listener)
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.0.local_addr().unwrap())
    }

    fn assert_untouched(&self) {
        assert!(
            matches!(self.0.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a request reached the server"
        );
    }
}

async fn asked(registry: Registry, doc: &Value, workspace: &Path) -> Vec<(String, Value)> {
    let approver = Arc::new(Recording::default());
    let executor = Executor::new(Arc::new(registry))
        .with_workspace(workspace.to_path_buf())
        .with_approver(approver.clone());
    let doc = GraphDoc::from_json_str(&doc.to_string()).unwrap();
    let valid = validate(&doc, executor.catalog().as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    let report = executor
        .run(
            Arc::new(valid),
            ValueMap::new(),
            RunOptions::default(),
            Arc::new(CollectSink::default()),
        )
        .await;
    assert_eq!(report.status, RunStatus::Failed, "{report:?}");
    approver.0.lock().unwrap().clone()
}

#[tokio::test]
async fn a_for_each_post_asks_with_the_method_and_url_of_each_item() {
    let dir = tempfile::tempdir().unwrap();
    let server = Unreached::new();
    let url = server.url("/x");
    let doc = json!({
        "format": "agentloom.graph", "version": 1, "name": "posts",
        "settings": {"safe_mode": true},
        "nodes": [
            {"id": "items", "block": "data.constant", "config": {"value": ["a"]}},
            {"id": "fe", "block": "control.for_each", "config": {
                "block": "http.request", "item_port": "body", "concurrency": 1,
                "config": {"method": "POST", "url": url, "allow_private_network": true}
            }}
        ],
        "edges": [{"from": ["items", "value"], "to": ["fe", "items"]}]
    });
    let asked = asked(Registry::builtin(), &doc, dir.path()).await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    let (question, shown) = &asked[0];
    assert_eq!(question, &format!("fe: http.request (item 0): POST {url}"));
    // Beside it, what the item runs with: its body, and the configured method and URL.
    assert_eq!(shown["body"], json!("a"), "{shown}");
    assert_eq!(shown["method"], json!("POST"), "{shown}");
    assert_eq!(shown["url"], json!(url), "{shown}");
    server.assert_untouched();
}

#[tokio::test]
async fn nodes_of_a_sub_graph_and_of_a_called_file_ask_with_their_own_description() {
    let dir = tempfile::tempdir().unwrap();
    let server = Unreached::new();
    let url = server.url("/hook");
    let inner = json!({
        "format": "agentloom.graph", "version": 1, "name": "inner",
        "nodes": [
            {"id": "in", "block": "graph.input", "config": {"name": "item", "type": "text"}},
            {"id": "post", "block": "http.request", "config": {"method": "PUT", "url": url}},
            {"id": "out", "block": "graph.output", "config": {"name": "result"}}
        ],
        "edges": [
            {"from": ["in", "value"], "to": ["post", "body"]},
            {"from": ["post", "status"], "to": ["out", "value"]}
        ]
    });
    // A for-each running a sub-graph per item.
    let each = json!({
        "format": "agentloom.graph", "version": 1, "name": "each",
        "settings": {"safe_mode": true},
        "nodes": [
            {"id": "items", "block": "data.constant", "config": {"value": ["a"]}},
            {"id": "fe", "block": "control.for_each", "config": {"graph": inner}}
        ],
        "edges": [{"from": ["items", "value"], "to": ["fe", "items"]}]
    });
    let asked_each = asked(Registry::builtin(), &each, dir.path()).await;
    assert_eq!(
        asked_each
            .iter()
            .map(|(q, _)| q.as_str())
            .collect::<Vec<_>>(),
        [format!("fe/0/post: HTTP request: PUT {url}").as_str()]
    );

    // A called graph file, and a file write beside it.
    std::fs::write(dir.path().join("inner.json"), inner.to_string()).unwrap();
    let caller = json!({
        "format": "agentloom.graph", "version": 1, "name": "caller",
        "settings": {"safe_mode": true},
        "nodes": [
            {"id": "text", "block": "data.constant", "config": {"value": "a"}},
            {"id": "call", "block": "graph.call", "config": {"path": "inner.json"}},
            {"id": "save", "block": "file.write", "config": {"path": "notes/today.md"}}
        ],
        "edges": [
            {"from": ["text", "value"], "to": ["call", "item"]},
            {"from": ["call", "result"], "to": ["save", "content"]}
        ]
    });
    let caller_file = dir.path().join("caller.json");
    std::fs::write(&caller_file, caller.to_string()).unwrap();
    let mut registry = Registry::builtin();
    registry.for_graph_file(Some(&caller_file));
    let asked_call = asked(registry, &caller, dir.path()).await;
    assert_eq!(
        asked_call
            .iter()
            .map(|(q, _)| q.as_str())
            .collect::<Vec<_>>(),
        [format!("call/post: HTTP request: PUT {url}").as_str()]
    );
    server.assert_untouched();

    // The write, asked on its own: the path and the operation.
    let write = json!({
        "format": "agentloom.graph", "version": 1, "name": "write",
        "settings": {"safe_mode": true},
        "nodes": [
            {"id": "text", "block": "data.constant", "config": {"value": "a"}},
            {"id": "save", "block": "file.write", "config": {"path": "notes/today.md", "append": true}}
        ],
        "edges": [{"from": ["text", "value"], "to": ["save", "content"]}]
    });
    let asked_write = asked(Registry::builtin(), &write, dir.path()).await;
    assert_eq!(
        asked_write
            .iter()
            .map(|(q, _)| q.as_str())
            .collect::<Vec<_>>(),
        ["save: Write file: append to notes/today.md"]
    );
    assert!(!dir.path().join("notes").exists());
}
