//! Breakpoints in the executor: a person asked at a breakpoint edits what a node gets or
//! hands on; a breakpoint inside a `graph.call` sub-run and in every item of a for-each is
//! named by its path; with nobody to ask the pause is stored in a real run log and the run
//! ends waiting; an edit that does not fit its port fails the node naming port and type.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentloom_blocks::Registry;
use agentloom_core::{GraphDoc, Value, ValueMap, validate};
use agentloom_engine::{
    BreakAt, Breakpoint, BreakpointDecision, BreakpointHandler, BreakpointHit, DurableBreakpoints,
    Executor, NodeStatus, NullSink, RunDebug, RunOptions, RunReport, RunStatus, RunStore,
};
use serde_json::json;

/// Answers every breakpoint with `edits` (Continue), remembering where it was asked.
struct Scripted {
    edits: ValueMap,
    asked: Mutex<Vec<(String, BreakAt, ValueMap)>>,
}

#[async_trait::async_trait]
impl BreakpointHandler for Scripted {
    async fn at_breakpoint(
        &self,
        _run_id: &str,
        hit: &BreakpointHit,
    ) -> Option<BreakpointDecision> {
        self.asked
            .lock()
            .unwrap()
            .push((hit.node.clone(), hit.at, hit.values.clone()));
        Some(BreakpointDecision::Continue {
            values: self.edits.clone(),
        })
    }
}

fn scripted(edits: &[(&str, Value)]) -> Arc<Scripted> {
    Arc::new(Scripted {
        edits: edits
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        asked: Mutex::new(Vec::new()),
    })
}

fn write(dir: &Path, name: &str, doc: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

async fn run(file: &Path, debug: RunDebug) -> RunReport {
    let doc = GraphDoc::from_json_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let mut registry = Registry::builtin();
    registry.for_graph_file(Some(file));
    let registry = Arc::new(registry);
    let graph = validate(&doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    Executor::new(registry)
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions {
                debug: Some(Arc::new(debug)),
                ..RunOptions::default()
            },
            Arc::new(NullSink),
        )
        .await
}

/// `greet.json`: `name` in, "Hello NAME" out through `t`.
fn greet() -> serde_json::Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "greet",
        "nodes": [
            {"id": "name", "block": "graph.input", "config": {"name": "name"}},
            {"id": "t", "block": "text.template", "config": {"template": "Hello {{ n }}"}},
            {"id": "out", "block": "graph.output", "config": {"name": "greeting"}}
        ],
        "edges": [
            {"from": ["name", "value"], "to": ["t", "n"]},
            {"from": ["t", "text"], "to": ["out", "value"]}
        ]
    })
}

fn caller() -> serde_json::Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "caller",
        "nodes": [
            {"id": "who", "block": "data.constant", "config": {"value": "Ada", "type": "text"}},
            {"id": "call", "block": "graph.call", "config": {"path": "greet.json"}},
            {"id": "result", "block": "graph.output", "config": {"name": "result"}}
        ],
        "edges": [
            {"from": ["who", "value"], "to": ["call", "name"]},
            {"from": ["call", "greeting"], "to": ["result", "value"]}
        ]
    })
}

#[tokio::test]
async fn a_breakpoint_inside_a_called_graph_edits_what_its_node_gets() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.json", &greet());
    let file = write(dir.path(), "caller.json", &caller());
    let handler = scripted(&[("n", Value::text("Grace"))]);
    let debug =
        RunDebug::new([Breakpoint::new("call/t", BreakAt::Before)]).with_handler(handler.clone());
    let report = run(&file, debug).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.outputs["result"], Value::text("Hello Grace"));
    let asked = handler.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].0, "call/t");
    assert_eq!(asked[0].2["n"], Value::text("Ada"));
}

#[tokio::test]
async fn a_breakpoint_after_a_node_in_every_for_each_item_edits_its_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let inner = json!({
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
    });
    let file = write(
        dir.path(),
        "each.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "each",
            "nodes": [
                {"id": "items", "block": "data.constant", "config": {"value": ["a", "b"], "type": "list<json>"}},
                {"id": "each", "block": "control.for_each", "config": {"graph": inner}},
                {"id": "out", "block": "graph.output", "config": {"name": "all"}}
            ],
            "edges": [
                {"from": ["items", "value"], "to": ["each", "items"]},
                {"from": ["each", "results"], "to": ["out", "value"]}
            ]
        }),
    );
    let handler = scripted(&[("text", Value::text("edited"))]);
    let debug = RunDebug::new([Breakpoint::parse("each/*/fmt:after").unwrap()])
        .with_handler(handler.clone());
    let report = run(&file, debug).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    let mut asked: Vec<String> = handler
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|(node, at, values)| {
            assert_eq!(*at, BreakAt::After);
            format!("{node}={}", values["text"].to_text())
        })
        .collect();
    asked.sort();
    assert_eq!(asked, ["each/0/fmt=<a>", "each/1/fmt=<b>"]);
    let all = report.outputs["all"].to_json().to_string();
    assert!(all.contains("edited") && !all.contains("<a>"), "{all}");
}

/// Stops at every breakpoint.
struct Stopper;

#[async_trait::async_trait]
impl BreakpointHandler for Stopper {
    async fn at_breakpoint(
        &self,
        _run_id: &str,
        _hit: &BreakpointHit,
    ) -> Option<BreakpointDecision> {
        Some(BreakpointDecision::Stop)
    }
}

#[tokio::test]
async fn stop_inside_a_called_graph_stops_the_whole_run() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.json", &greet());
    let file = write(dir.path(), "caller.json", &caller());
    let debug =
        RunDebug::new([Breakpoint::new("call/t", BreakAt::Before)]).with_handler(Arc::new(Stopper));
    let report = run(&file, debug).await;
    assert_eq!(report.status, RunStatus::Cancelled, "{:?}", report.error);
    assert!(report.outputs.is_empty());
}

#[tokio::test]
async fn with_nobody_to_ask_the_pause_is_stored_and_the_run_waits() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.json", &greet());
    let file = write(dir.path(), "caller.json", &caller());
    let store = Arc::new(RunStore::open(&dir.path().join("runs.db")).unwrap());
    let debug = RunDebug::new([Breakpoint::new("call/t", BreakAt::Before)])
        .with_handler(Arc::new(DurableBreakpoints::new(store.clone(), None)));
    let report = run(&file, debug).await;
    assert_eq!(report.status, RunStatus::Waiting);
    assert!(
        report
            .error
            .as_deref()
            .unwrap()
            .contains("paused at a breakpoint"),
        "{:?}",
        report.error
    );
    let call = report.nodes.iter().find(|n| n.id == "call").unwrap();
    assert_ne!(call.status, NodeStatus::Done);
    let pending = store.pending_breakpoints(&report.run_id).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].hit.node, "call/t");
    assert_eq!(pending[0].hit.values["n"], Value::text("Ada"));
    assert!(pending[0].decision.is_none());
}

#[tokio::test]
async fn an_edit_that_does_not_fit_its_port_fails_the_node_naming_port_and_type() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "count.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "count",
            "nodes": [
                {"id": "n", "block": "data.constant", "config": {"value": 2, "type": "number"}},
                {"id": "out", "block": "graph.output", "config": {"name": "n"}}
            ],
            "edges": [{"from": ["n", "value"], "to": ["out", "value"]}]
        }),
    );
    let handler = scripted(&[("value", Value::text("two"))]);
    let debug = RunDebug::new([Breakpoint::new("n", BreakAt::After)]).with_handler(handler);
    let report = run(&file, debug).await;
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.unwrap();
    assert!(error.contains("`n.value` takes number"), "{error}");
}
