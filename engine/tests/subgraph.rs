//! Sub-runs: a `graph.call` node runs a saved graph file, and its nodes (and those of a
//! for-each's per-item graph) are recorded nested under the calling node.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{GraphDoc, Value, ValueMap, validate};
use agentloom_engine::{
    CollectSink, EventKind, EventSink, Executor, FanoutSink, NodeStatus, RunOptions, RunStatus,
    RunStore,
};
use serde_json::json;

fn write(dir: &Path, name: &str, doc: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

/// `greet.json`: `name` (+ optional `punct`) in, `greeting` out.
fn child() -> serde_json::Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "greet",
        "nodes": [
            {"id": "name", "block": "graph.input", "config": {"name": "name"}},
            {"id": "punct", "block": "graph.input", "config": {"name": "punct", "default": "!"}},
            {"id": "t", "block": "text.template", "config": {"template": "Hello {{ n }}{{ p }}"}},
            {"id": "out", "block": "graph.output", "config": {"name": "greeting"}}
        ],
        "edges": [
            {"from": ["name", "value"], "to": ["t", "n"]},
            {"from": ["punct", "value"], "to": ["t", "p"]},
            {"from": ["t", "text"], "to": ["out", "value"]}
        ]
    })
}

/// The parent: a run input goes down into the child, the child's output comes back up
/// and is used by a node after the call.
fn parent(path: &str) -> serde_json::Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "parent",
        "nodes": [
            {"id": "who", "block": "graph.input", "config": {"name": "who"}},
            {"id": "call", "block": "graph.call", "config": {"path": path}},
            {"id": "wrap", "block": "text.template", "config": {"template": "<{{ g }}>"}},
            {"id": "result", "block": "graph.output", "config": {"name": "result"}}
        ],
        "edges": [
            {"from": ["who", "value"], "to": ["call", "name"]},
            {"from": ["call", "greeting"], "to": ["wrap", "g"]},
            {"from": ["wrap", "text"], "to": ["result", "value"]}
        ]
    })
}

fn registry_for(file: &Path) -> Arc<Registry> {
    let mut registry = Registry::builtin();
    registry.for_graph_file(Some(file));
    Arc::new(registry)
}

#[tokio::test]
async fn a_called_graph_runs_with_values_both_ways_and_is_logged_nested() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("lib")).unwrap();
    write(&dir.path().join("lib"), "greet.json", &child());
    let parent_file = write(dir.path(), "parent.json", &parent("lib/greet.json"));
    let doc = GraphDoc::from_json_str(&std::fs::read_to_string(&parent_file).unwrap()).unwrap();
    let registry = registry_for(&parent_file);
    let graph = validate(&doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:?}"));

    let db = dir.path().join("runs.db");
    let store = RunStore::open(&db).unwrap();
    let recorder = Arc::new(store.recorder(&graph.doc).unwrap());
    let collect = Arc::new(CollectSink::default());
    let sink: Arc<dyn EventSink> = Arc::new(FanoutSink(vec![recorder.clone(), collect.clone()]));
    let inputs = ValueMap::from([("who".to_owned(), Value::from("Ada"))]);
    let report = Executor::new(registry)
        .run(Arc::new(graph), inputs, RunOptions::default(), sink)
        .await;
    recorder.finish().unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.outputs["result"], Value::from("<Hello Ada!>"));

    // The child's nodes are in the parent's event stream, under the calling node, and
    // finish before it does.
    let events: Vec<EventKind> = collect.events().into_iter().map(|e| e.kind).collect();
    let finished: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            EventKind::NodeFinished { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    let call_at = finished.iter().position(|n| *n == "call").unwrap();
    let child_at = finished.iter().position(|n| *n == "call/t").unwrap();
    assert!(child_at < call_at, "{finished:?}");
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, EventKind::RunStarted { .. }))
            .count(),
        1
    );

    // The SQLite file holds one row per child node, keyed under the parent node.
    drop(store);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare("SELECT node_id, status, run_id, block FROM node_runs ORDER BY node_id")
        .unwrap();
    let rows: Vec<(String, String, String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // Each row, nested ones too, names its block kind.
    let ids: Vec<(&str, &str)> = rows.iter().map(|r| (r.0.as_str(), r.3.as_str())).collect();
    assert_eq!(
        ids,
        vec![
            ("call", "graph.call"),
            ("call/name", "graph.input"),
            ("call/out", "graph.output"),
            ("call/punct", "graph.input"),
            ("call/t", "text.template"),
            ("result", "graph.output"),
            ("who", "graph.input"),
            ("wrap", "text.template")
        ]
    );
    assert!(rows.iter().all(|r| r.1 == "done" && r.2 == report.run_id));
    let runs: i64 = conn
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 1, "the child run is part of the parent's run");

    // Read back through the store: the child template's inputs and outputs are there.
    let store = RunStore::open(&db).unwrap();
    let detail = store.get_run(&report.run_id).unwrap().unwrap();
    let t = detail.node("call/t").unwrap();
    assert_eq!(t.status, NodeStatus::Done);
    assert_eq!(t.inputs["n"], Value::from("Ada"));
    assert_eq!(t.outputs["text"], Value::from("Hello Ada!"));

    // Run from `call`: the calling node and everything inside it run again.
    let rerun = ["call", "wrap", "result"].map(str::to_owned).into();
    let seed = store.reuse_seed(&report.run_id, &rerun).unwrap();
    let reused: Vec<&str> = seed.outputs.keys().map(String::as_str).collect();
    assert_eq!(reused, vec!["who"]);
}

#[tokio::test]
async fn a_for_each_sub_graph_reports_its_nodes_per_item() {
    let dir = tempfile::tempdir().unwrap();
    let inner: GraphDoc = GraphDoc::from_json_value(json!({
        "format": "agentloom.graph", "version": 1, "name": "per item",
        "nodes": [
            {"id": "item", "block": "graph.input", "config": {"name": "item", "type": "json"}},
            {"id": "fmt", "block": "text.template", "config": {"template": "<{{ i }}>"}},
            {"id": "result", "block": "graph.output", "config": {"name": "result"}}
        ],
        "edges": [
            {"from": ["item", "value"], "to": ["fmt", "i"]},
            {"from": ["fmt", "text"], "to": ["result", "value"]}
        ]
    }))
    .unwrap();
    let file = write(
        dir.path(),
        "each.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "each",
            "nodes": [
                {"id": "items", "block": "data.constant", "config": {"value": ["a", "b"], "type": "list<json>"}},
                {"id": "each", "block": "control.for_each", "config": {"graph": serde_json::to_value(&inner).unwrap()}},
                {"id": "out", "block": "graph.output", "config": {"name": "all"}}
            ],
            "edges": [
                {"from": ["items", "value"], "to": ["each", "items"]},
                {"from": ["each", "results"], "to": ["out", "value"]}
            ]
        }),
    );
    let doc = GraphDoc::from_json_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let registry = registry_for(&file);
    let graph = validate(&doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    let store = RunStore::open(&dir.path().join("runs.db")).unwrap();
    let recorder = Arc::new(store.recorder(&graph.doc).unwrap());
    let collect = Arc::new(CollectSink::default());
    let sink: Arc<dyn EventSink> = Arc::new(FanoutSink(vec![recorder.clone(), collect.clone()]));
    let report = Executor::new(registry)
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions::default(),
            sink,
        )
        .await;
    recorder.finish().unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    // The log's rows of each item's nodes name their block.
    let detail = store.get_run(&report.run_id).unwrap().unwrap();
    for (id, block) in [
        ("each", "control.for_each"),
        ("each/0/item", "graph.input"),
        ("each/1/fmt", "text.template"),
        ("each/1/result", "graph.output"),
    ] {
        assert_eq!(detail.node(id).unwrap().block, block, "{id}");
    }
    let outputs: Vec<(String, Value)> = collect
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::NodeFinished { node, outputs, .. } if node.ends_with("/fmt") => {
                Some((node, outputs["text"].clone()))
            }
            _ => None,
        })
        .collect();
    let mut outputs = outputs;
    outputs.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        outputs,
        vec![
            ("each/0/fmt".to_owned(), Value::from("<a>")),
            ("each/1/fmt".to_owned(), Value::from("<b>"))
        ]
    );
}

/// `ask.json`: `text` in, a person approves (maybe editing) it, then it is upper-cased.
fn asking_child() -> serde_json::Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "ask",
        "nodes": [
            {"id": "text", "block": "graph.input", "config": {"name": "name"}},
            {"id": "ask", "block": "human.approval", "config": {"action": "Shout it?"}},
            {"id": "t", "block": "text.template", "config": {"template": "{{ v | upper }}"}},
            {"id": "out", "block": "graph.output", "config": {"name": "greeting"}}
        ],
        "edges": [
            {"from": ["text", "value"], "to": ["ask", "value"]},
            {"from": ["ask", "value"], "to": ["t", "v"]},
            {"from": ["t", "text"], "to": ["out", "value"]}
        ]
    })
}

#[tokio::test]
async fn an_approval_inside_a_called_graph_pauses_the_run_and_resumes_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ask.json", &asking_child());
    let parent_file = write(dir.path(), "parent.json", &parent("ask.json"));
    let doc = GraphDoc::from_json_str(&std::fs::read_to_string(&parent_file).unwrap()).unwrap();
    let registry = registry_for(&parent_file);
    let graph = Arc::new(validate(&doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:?}")));
    let store = Arc::new(RunStore::open(&dir.path().join("runs.db")).unwrap());
    // Nobody to ask: the request is stored as the parent run's, for the nested node.
    let executor = Executor::new(registry).with_approver(Arc::new(
        agentloom_engine::DurableApprover::new(store.clone(), None),
    ));
    let recorder = Arc::new(store.recorder(&graph.doc).unwrap());
    let inputs = ValueMap::from([("who".to_owned(), Value::from("ada"))]);
    let report = executor
        .run(
            graph.clone(),
            inputs.clone(),
            RunOptions::default(),
            recorder.clone(),
        )
        .await;
    recorder.finish().unwrap();
    assert_eq!(report.status, RunStatus::Waiting, "{:?}", report.error);
    let pending = store.pending_approvals(&report.run_id).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].node, "call/ask");
    assert_eq!(pending[0].request.action, "Shout it?");

    // Decided (edited), then resumed under the same run id: the approval is not asked
    // again and the nodes that had finished, inside the child too, are not run again.
    let edited = agentloom_core::ApprovalDecision::Approved {
        arguments: Value::from_json(json!({"value": "grace"})),
    };
    assert!(
        store
            .decide_approval(&report.run_id, "call/ask", &edited)
            .unwrap()
    );
    let seed = store.resume_seed(&report.run_id).unwrap();
    let collect = Arc::new(CollectSink::default());
    let resumed = executor
        .run(
            graph,
            inputs,
            RunOptions {
                run_id: Some(report.run_id.clone()),
                seed: Some(Arc::new(seed)),
                ..RunOptions::default()
            },
            collect.clone(),
        )
        .await;
    assert_eq!(resumed.status, RunStatus::Completed, "{:?}", resumed.error);
    assert_eq!(resumed.outputs["result"], Value::from("<GRACE>"));
    let attempts = |id: &str| {
        collect
            .events()
            .into_iter()
            .find_map(|e| match e.kind {
                EventKind::NodeFinished { node, attempts, .. } if node == id => Some(attempts),
                _ => None,
            })
            .unwrap_or_else(|| panic!("`{id}` did not finish"))
    };
    // The nodes that finished before the pause finish as recorded (the same run: they ran
    // once, before it), without starting again.
    let started_again = |id: &str| {
        collect
            .events()
            .iter()
            .any(|e| matches!(&e.kind, EventKind::NodeStarted { node, .. } if node == id))
    };
    assert_eq!(attempts("who"), 1, "as recorded");
    assert!(!started_again("who"), "ran again");
    assert_eq!(attempts("call/text"), 1, "as recorded inside the child");
    assert!(!started_again("call/text"), "ran again inside the child");
    assert_eq!(attempts("call/ask"), 1);
    assert_eq!(attempts("call/t"), 1);
}

#[test]
fn a_run_stopped_mid_way_counts_a_sub_runs_cost_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = GraphDoc::new("costly parent");
    doc.nodes
        .push(agentloom_core::NodeDoc::new("call", "graph.call"));
    let store = RunStore::open(&dir.path().join("runs.db")).unwrap();
    let recorder = store.recorder(&doc).unwrap();
    let cost = agentloom_core::Usage {
        input_tokens: 10,
        output_tokens: 5,
        cost_usd: 0.25,
    };
    let events = [
        EventKind::RunStarted {
            run_id: "r1".to_owned(),
            graph_name: doc.name.clone(),
            node_count: 1,
            inputs: ValueMap::new(),
        },
        // The child's model node (its block known, like any node's) reports its cost, then
        // the calling node carries it too.
        EventKind::NodeQueued {
            node: "call/model".to_owned(),
            block: "llm.chat".to_owned(),
        },
        EventKind::NodeUsage {
            node: "call/model".to_owned(),
            usage: cost,
        },
        EventKind::NodeUsage {
            node: "call".to_owned(),
            usage: cost,
        },
    ];
    for (seq, kind) in events.into_iter().enumerate() {
        recorder.emit(&agentloom_engine::RunEvent {
            seq: seq as u64,
            at_ms: 0,
            kind,
        });
    }
    // No `run_finished`: the process stopped; the row's total comes from the node rows.
    recorder.finish().unwrap();
    let detail = store.get_run("r1").unwrap().unwrap();
    assert_eq!(detail.run.usage, cost);
    assert_eq!(detail.node("call/model").unwrap().usage, cost);
    assert_eq!(detail.node("call/model").unwrap().block, "llm.chat");
}
