//! Values are shared, not copied: a value handed down a chain is the same allocation at its
//! end as at its start (in the run's report, its events and the run log), and a block that
//! changes a value it was handed changes its own copy, never what an upstream node produced.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, EdgeDoc, GraphDoc, NodeDoc,
    NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait, validate,
};
use agentloom_engine::{
    CollectSink, EventKind, EventSink, Executor, RunEvent, RunOptions, RunReport, RunStatus,
    RunStore,
};
use serde_json::json;

/// Appends `"added"` to the list it is handed and passes the list on.
struct Append(BlockMeta);

struct AppendNode(Ports);

impl Block for Append {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(AppendNode(Ports::new(
            vec![PortSpec::new("value", ValueType::Any)],
            vec![PortSpec::new("value", ValueType::Any)],
        ))))
    }
}

#[async_trait]
impl NodeImpl for AppendNode {
    fn ports(&self) -> &Ports {
        &self.0
    }
    async fn run(&self, mut inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let mut value = inputs.remove("value").unwrap_or_default();
        let items = value
            .list_mut()
            .ok_or_else(|| BlockError::input("value", "expected a list"))?;
        items.push(Value::from("added"));
        Ok(ValueMap::from([("value".to_owned(), value)]))
    }
}

/// Hands every event to both sinks: the events as a test reads them, and the run log.
struct Both(Arc<CollectSink>, Arc<dyn EventSink>);

impl EventSink for Both {
    fn emit(&self, event: &RunEvent) {
        self.0.emit(event);
        self.1.emit(event);
    }
}

/// `graph.input` "v", then `passthroughs` pass-throughs `p1…`, then `tail` (if any), then
/// `graph.output` "v".
fn chain(passthroughs: usize, tail: Option<&str>) -> GraphDoc {
    let mut doc = GraphDoc::new("handing");
    doc.nodes
        .push(NodeDoc::new("in", "graph.input").with_config(json!({"name": "v", "type": "json"})));
    let mut last = "in".to_owned();
    for i in 1..=passthroughs {
        let id = format!("p{i}");
        doc.nodes.push(NodeDoc::new(&id, "control.passthrough"));
        doc.edges.push(EdgeDoc::new(&last, "value", &id, "value"));
        last = id;
    }
    if let Some(kind) = tail {
        doc.nodes.push(NodeDoc::new("change", kind));
        doc.edges
            .push(EdgeDoc::new(&last, "value", "change", "value"));
        last = "change".to_owned();
    }
    doc.nodes
        .push(NodeDoc::new("out", "graph.output").with_config(json!({"name": "v"})));
    doc.edges.push(EdgeDoc::new(&last, "value", "out", "value"));
    doc
}

/// Runs `doc` with `input` as "v", recording into a real run log in `dir`; the report, the
/// events and the store.
async fn run_logged(
    registry: Arc<Registry>,
    doc: &GraphDoc,
    input: &Value,
    dir: &tempfile::TempDir,
) -> (RunReport, Vec<EventKind>, RunStore) {
    let valid = Arc::new(validate(doc, registry.as_ref()).unwrap());
    let store = RunStore::open(&dir.path().join("runs.sqlite3")).unwrap();
    let recorder = Arc::new(store.recorder(doc).unwrap());
    let events = Arc::new(CollectSink::default());
    let report = Executor::new(registry)
        .run(
            valid,
            ValueMap::from([("v".to_owned(), input.clone())]),
            RunOptions::default(),
            Arc::new(Both(events.clone(), recorder.clone())),
        )
        .await;
    recorder.finish().unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    let events = events.events().into_iter().map(|e| e.kind).collect();
    (report, events, store)
}

fn finished_output(events: &[EventKind], id: &str) -> Value {
    events
        .iter()
        .find_map(|event| match event {
            EventKind::NodeFinished { node, outputs, .. } if node == id => {
                outputs.get("value").cloned()
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("`{id}` did not finish"))
}

#[tokio::test]
async fn a_value_handed_down_a_chain_is_the_same_allocation_at_its_end() {
    let text: String = (0..100_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let input = Value::text(text.clone());
    let dir = tempfile::tempdir().unwrap();
    let (report, events, store) = run_logged(
        Arc::new(Registry::builtin()),
        &chain(200, None),
        &input,
        &dir,
    )
    .await;

    let Value::Text(start) = &input else {
        unreachable!()
    };
    let Value::Text(end) = &report.outputs["v"] else {
        panic!("the output is {:?}", report.outputs["v"].kind_name());
    };
    assert!(Arc::ptr_eq(start, end), "the text was copied on its way");
    for id in ["p1", "p100", "p200"] {
        assert!(
            finished_output(&events, id).shares_with(&input),
            "`{id}`'s finished event holds a copy"
        );
    }
    // The run log reads back the whole text for every node, stored once.
    let run = store.get_run(&report.run_id).unwrap().unwrap();
    for id in ["p1", "p200"] {
        assert_eq!(
            run.node(id).unwrap().outputs["value"],
            Value::text(text.clone())
        );
    }
}

#[tokio::test]
async fn a_block_changing_a_value_leaves_the_upstream_output_as_it_was() {
    let registry = Arc::new(Registry::builtin().with(Box::new(Append(BlockMeta::new(
        "test.append",
        "Append",
        "Test",
        "Appends an item to a list.",
    )))));
    let big: String = "x".repeat(5_000);
    let input = Value::list(vec![Value::text(big.clone()), Value::Integer(1)]);
    let dir = tempfile::tempdir().unwrap();
    let (report, events, store) =
        run_logged(registry, &chain(2, Some("test.append")), &input, &dir).await;

    let original = Value::list(vec![Value::text(big.clone()), Value::Integer(1)]);
    let changed = Value::list(vec![
        Value::text(big),
        Value::Integer(1),
        Value::from("added"),
    ]);
    assert_eq!(report.outputs["v"], changed);
    assert_eq!(input, original, "the run's input itself was changed");
    // Upstream, in the events and in the run log: the list as it was handed on.
    assert_eq!(finished_output(&events, "p2"), original);
    assert!(finished_output(&events, "p2").shares_with(&input));
    assert_eq!(finished_output(&events, "change"), changed);
    let run = store.get_run(&report.run_id).unwrap().unwrap();
    assert_eq!(run.node("p2").unwrap().outputs["value"], original);
    assert_eq!(run.node("change").unwrap().inputs["value"], original);
    assert_eq!(run.node("change").unwrap().outputs["value"], changed);
}

/// `"x"`, then `n` templates `"{{ s }}."`, each appending a dot to the text before it, the
/// last one's text the graph's output `text`.
fn growing_chain(n: usize) -> GraphDoc {
    let mut doc = GraphDoc::new("growing");
    doc.nodes
        .push(NodeDoc::new("t0", "data.constant").with_config(json!({"value": "x"})));
    for i in 1..=n {
        let id = format!("t{i}");
        doc.nodes
            .push(NodeDoc::new(&id, "text.template").with_config(json!({"template": "{{ s }}."})));
        let from = if i == 1 { "value" } else { "text" };
        doc.edges
            .push(EdgeDoc::new(&format!("t{}", i - 1), from, &id, "s"));
    }
    doc.nodes
        .push(NodeDoc::new("out", "graph.output").with_config(json!({"name": "text"})));
    doc.edges
        .push(EdgeDoc::new(&format!("t{n}"), "text", "out", "value"));
    doc
}

async fn run_growing(n: usize, sink: Arc<dyn EventSink>) -> RunReport {
    let registry = Arc::new(Registry::builtin());
    let valid = Arc::new(validate(&growing_chain(n), registry.as_ref()).unwrap());
    let report = Executor::new(registry)
        .run(valid, ValueMap::new(), RunOptions::default(), sink)
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    report
}

#[tokio::test]
async fn a_template_appends_to_a_text_nobody_else_holds_and_copies_one_that_is_watched() {
    let n = 1_000;
    let expected = format!("x{}", ".".repeat(n));
    // Nobody watches: each node's text is handed to the next alone, which appends in place
    // (a copy is made to the text's exact size; appending leaves room to grow).
    let report = run_growing(n, Arc::new(agentloom_engine::NullSink)).await;
    let Value::Text(end) = &report.outputs["text"] else {
        panic!("the output is {:?}", report.outputs["text"].kind_name());
    };
    assert_eq!(**end, expected);
    assert!(
        end.capacity() > end.len(),
        "the chain's text was copied at every node"
    );
    // Watched: every node's finished event keeps the text that node wrote, so none may
    // be appended to afterwards.
    let events = Arc::new(CollectSink::default());
    let report = run_growing(n, events.clone()).await;
    assert_eq!(report.outputs["text"], Value::text(expected));
    let events: Vec<EventKind> = events.events().into_iter().map(|e| e.kind).collect();
    let mut seen = 0;
    for event in &events {
        if let EventKind::NodeFinished { node, outputs, .. } = event
            && let Some(dots) = node.strip_prefix('t').filter(|_| node != "t0")
        {
            let dots: usize = dots.parse().unwrap();
            assert_eq!(
                outputs["text"],
                Value::text(format!("x{}", ".".repeat(dots))),
                "`{node}`'s text changed after it finished"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, n);
}
