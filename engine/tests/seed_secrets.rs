//! The run log says which node rows had a secret redacted out of their outputs, as the
//! run's redaction found it (not by looking for the marker again); rows written before it
//! said so read as redacted when they hold the marker. A seed made from such a log sets
//! those outputs apart, and settling it against the graph reruns what a node still to run
//! reads, or refuses when that would repeat a side effect. A real SQLite run log.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::collections::BTreeSet;
use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigError, GraphDoc, NodeImpl, PortSpec, Ports, RunCtx,
    Secret, SecretError, SecretSource, ValueMap, ValueType, async_trait, validate,
};
use agentloom_engine::{
    BreakAt, Breakpoint, BreakpointDecision, BreakpointHandler, BreakpointHit, DurableApprover,
    Executor, REDACTED, RunDebug, RunOptions, RunStatus, RunStore,
};
use serde_json::json;

const TOKEN: &str = "tok-seed-log-CANARY-88";

struct OneSecret;

impl SecretSource for OneSecret {
    fn secret(&self, _name: &str) -> Result<Secret, SecretError> {
        Ok(Secret::new(TOKEN))
    }
}

/// Hands on the secret it reads.
struct Key(BlockMeta);
struct KeyNode(Ports);

impl Block for Key {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(KeyNode(Ports::new(
            vec![],
            vec![PortSpec::new("value", ValueType::Text)],
        ))))
    }
}

#[async_trait]
impl NodeImpl for KeyNode {
    fn ports(&self) -> &Ports {
        &self.0
    }
    async fn run(&self, _inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let secret = ctx.secret("svc")?;
        Ok(agentloom_core::outputs([(
            "value",
            secret.expose().to_owned().into(),
        )]))
    }
}

fn registry() -> Arc<Registry> {
    let meta = |kind: &str| BlockMeta::new(kind, "Key", "Test", "Hands on its secret.");
    Arc::new(
        Registry::builtin()
            .with(Box::new(Key(meta("test.key"))))
            .with(Box::new(Key(meta("test.sent_key").with_side_effects()))),
    )
}

/// `key` (of block `kind`) → `tpl` ("got {{ value }}") → `out`; `n` → `plain`.
fn graph(kind: &str) -> GraphDoc {
    GraphDoc::from_json_str(
        &json!({"format": "agentloom.graph", "version": 1, "name": "keys",
            "nodes": [
                {"id": "key", "block": kind, "credential": "svc"},
                {"id": "tpl", "block": "text.template", "config": {"template": "got {{ value }}"}},
                {"id": "out", "block": "graph.output", "config": {"name": "out"}},
                {"id": "n", "block": "data.constant", "config": {"value": "[redacted] as typed", "type": "text"}},
                {"id": "plain", "block": "graph.output", "config": {"name": "plain"}}],
            "edges": [
                {"from": ["key", "value"], "to": ["tpl", "value"]},
                {"from": ["tpl", "text"], "to": ["out", "value"]},
                {"from": ["n", "value"], "to": ["plain", "value"]}]})
        .to_string(),
    )
    .unwrap()
}

/// `items` (one item) → `each` (a for-each of `inner` per item) → `out`.
fn for_each_item(inner: &serde_json::Value) -> GraphDoc {
    GraphDoc::from_json_str(
        &json!({"format": "agentloom.graph", "version": 1, "name": "each",
            "nodes": [
                {"id": "items", "block": "data.constant", "config": {"value": ["a"], "type": "list<json>"}},
                {"id": "each", "block": "control.for_each", "config": {"graph": inner}},
                {"id": "out", "block": "graph.output", "config": {"name": "all"}}],
            "edges": [
                {"from": ["items", "value"], "to": ["each", "items"]},
                {"from": ["each", "results"], "to": ["out", "value"]}]})
        .to_string(),
    )
    .unwrap()
}

/// Runs `doc` recorded in `store`; its run id.
async fn run_recorded(store: &RunStore, doc: &GraphDoc) -> String {
    let registry = registry();
    let graph = validate(doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    let recorder = Arc::new(store.recorder(doc).unwrap());
    let report = Executor::new(registry)
        .with_secrets(Arc::new(OneSecret))
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions::default(),
            recorder.clone(),
        )
        .await;
    recorder.finish().unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    report.run_id
}

/// The `outputs_redacted` column of each node row of run `run_id`, by node.
fn stored_flags(db: &std::path::Path, run_id: &str) -> Vec<(String, Option<bool>)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT node_id, outputs_redacted FROM node_runs WHERE run_id = ?1 ORDER BY node_id",
        )
        .unwrap();
    stmt.query_map([run_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn the_log_says_which_outputs_had_a_secret_redacted_and_a_seed_sets_them_apart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let store = RunStore::open(&db).unwrap();
    let doc = graph("test.key");
    let run_id = run_recorded(&store, &doc).await;

    // As redaction found it: `n`'s text holds the marker as typed, and is its own.
    let flags = stored_flags(&db, &run_id);
    let flag = |id: &str| flags.iter().find(|(n, _)| n == id).unwrap().1;
    assert_eq!(flag("key"), Some(true), "{flags:?}");
    assert_eq!(flag("tpl"), Some(true), "{flags:?}");
    assert_eq!(flag("n"), Some(false), "{flags:?}");
    let detail = store.get_run(&run_id).unwrap().unwrap();
    assert_eq!(
        detail.node("key").unwrap().outputs["value"].as_str(),
        Some(REDACTED)
    );
    assert!(!detail.node("n").unwrap().outputs_redacted);

    // Everything finished and read by seeded nodes only: all seeded, nothing reruns.
    let graph = validate(&doc, registry().as_ref()).unwrap();
    let mut seed = store.reuse_seed(&run_id, &BTreeSet::new()).unwrap();
    assert_eq!(
        seed.redacted.keys().collect::<Vec<_>>(),
        ["key", "tpl"],
        "set apart"
    );
    assert!(!seed.outputs.contains_key("key"));
    seed.settle_redacted(&graph).unwrap();
    assert!(seed.redacted.is_empty());
    assert!(seed.outputs.contains_key("key") && seed.outputs.contains_key("tpl"));

    // `tpl` runs again: `key`, which it reads, is not seeded with the marker; it runs again.
    let rerun = BTreeSet::from(["tpl".to_owned(), "out".to_owned()]);
    let mut seed = store.reuse_seed(&run_id, &rerun).unwrap();
    seed.settle_redacted(&graph).unwrap();
    assert!(!seed.outputs.contains_key("key"), "{seed:?}");
    assert!(seed.redacted.contains_key("key"));
    assert!(seed.outputs.contains_key("n"));
}

#[tokio::test]
async fn a_redacted_node_with_side_effects_is_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = RunStore::open(&dir.path().join("runs.sqlite3")).unwrap();
    let doc = graph("test.sent_key");
    let run_id = run_recorded(&store, &doc).await;
    let graph = validate(&doc, registry().as_ref()).unwrap();
    let rerun = BTreeSet::from(["tpl".to_owned(), "out".to_owned()]);
    let mut seed = store.reuse_seed(&run_id, &rerun).unwrap();
    let refused = seed.settle_redacted(&graph).unwrap_err();
    assert_eq!(
        refused,
        "node `key`'s output held a secret, which the run log does not keep, and `key` (Key) has side effects: running it again to get the secret back would do them twice; rerun the graph from the start, or fork from before `key`"
    );
}

#[tokio::test]
async fn rows_written_before_the_log_said_so_read_as_redacted_when_they_hold_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let store = RunStore::open(&db).unwrap();
    let run_id = run_recorded(&store, &graph("test.key")).await;
    drop(store);
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE node_runs SET outputs_redacted = NULL", [])
        .unwrap();
    drop(conn);
    let store = RunStore::open(&db).unwrap();
    let detail = store.get_run(&run_id).unwrap().unwrap();
    assert!(detail.node("key").unwrap().outputs_redacted);
    assert!(detail.node("tpl").unwrap().outputs_redacted);
    // Not known otherwise: the marker typed into a constant reads as redacted too.
    assert!(detail.node("n").unwrap().outputs_redacted);
}

#[tokio::test]
async fn a_sub_run_node_row_says_its_outputs_had_a_secret_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let store = RunStore::open(&db).unwrap();
    let inner = json!({"format": "agentloom.graph", "version": 1, "name": "per item",
        "nodes": [
            {"id": "item", "block": "graph.input", "config": {"name": "item", "type": "json"}},
            {"id": "key", "block": "test.key", "credential": "svc"},
            {"id": "tpl", "block": "text.template", "config": {"template": "{{ i }}: {{ k }}"}},
            {"id": "result", "block": "graph.output", "config": {"name": "result"}}],
        "edges": [
            {"from": ["item", "value"], "to": ["tpl", "i"]},
            {"from": ["key", "value"], "to": ["tpl", "k"]},
            {"from": ["tpl", "text"], "to": ["result", "value"]}]});
    let doc = for_each_item(&inner);
    let run_id = run_recorded(&store, &doc).await;
    let flags = stored_flags(&db, &run_id);
    let flag = |id: &str| {
        flags
            .iter()
            .find(|(n, _)| n == id)
            .unwrap_or_else(|| panic!("no row {id} in {flags:?}"))
            .1
    };
    assert_eq!(flag("each/0/key"), Some(true), "{flags:?}");
    assert_eq!(flag("each/0/tpl"), Some(true), "{flags:?}");
    assert_eq!(flag("each/0/item"), Some(false), "{flags:?}");
    assert_eq!(flag("items"), Some(false), "{flags:?}");
}

#[tokio::test]
async fn a_redacted_node_inside_a_sub_run_that_goes_on_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RunStore::open(&dir.path().join("runs.sqlite3")).unwrap());
    // Each item: `key` hands on the secret, a person approves it (nobody can: the run waits).
    let inner = json!({"format": "agentloom.graph", "version": 1, "name": "per item",
        "nodes": [
            {"id": "item", "block": "graph.input", "config": {"name": "item", "type": "json"}},
            {"id": "key", "block": "test.key", "credential": "svc"},
            {"id": "gate", "block": "human.approval", "config": {"action": "Send it?"}},
            {"id": "result", "block": "graph.output", "config": {"name": "result"}}],
        "edges": [
            {"from": ["key", "value"], "to": ["gate", "value"]},
            {"from": ["gate", "value"], "to": ["result", "value"]}]});
    let doc = for_each_item(&inner);
    let registry = registry();
    let graph = validate(&doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    let recorder = Arc::new(store.recorder(&doc).unwrap());
    let report = Executor::new(registry)
        .with_secrets(Arc::new(OneSecret))
        .with_approver(Arc::new(DurableApprover::new(store.clone(), None)))
        .run(
            Arc::new(graph.clone()),
            ValueMap::new(),
            RunOptions::default(),
            recorder.clone(),
        )
        .await;
    recorder.finish().unwrap();
    assert_eq!(report.status, RunStatus::Waiting, "{report:?}");
    let mut seed = store.resume_seed(&report.run_id).unwrap();
    assert!(seed.redacted.contains_key("each/0/key"), "{seed:?}");
    assert_eq!(
        seed.settle_redacted(&graph).unwrap_err(),
        "node `each/0/key`'s output held a secret, which the run log does not keep, and `each/0/key` runs inside `each`, which goes on: whether running it again would repeat a side effect cannot be told; rerun the graph from the start"
    );
}

/// Goes on from every pause with the values as they were shown.
struct AsShown;

#[async_trait]
impl BreakpointHandler for AsShown {
    async fn at_breakpoint(
        &self,
        _run_id: &str,
        hit: &BreakpointHit,
    ) -> Option<BreakpointDecision> {
        assert_eq!(
            hit.values["value"].as_str(),
            Some(REDACTED),
            "shown redacted"
        );
        Some(BreakpointDecision::Continue {
            values: hit.values.clone(),
        })
    }
}

/// What `test.seen` nodes were given, in order.
static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Keeps the text it is given in [`SEEN`].
struct Seen(BlockMeta);
struct SeenNode(Ports);

impl Block for Seen {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(SeenNode(Ports::new(
            vec![PortSpec::new("value", ValueType::Text)],
            vec![],
        ))))
    }
}

#[async_trait]
impl NodeImpl for SeenNode {
    fn ports(&self) -> &Ports {
        &self.0
    }
    async fn run(&self, inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let text = inputs["value"].as_str().unwrap_or_default().to_owned();
        SEEN.lock().unwrap().push(text);
        Ok(ValueMap::new())
    }
}

#[tokio::test]
async fn outputs_sent_back_as_shown_in_the_pausing_process_keep_their_secret() {
    let doc = GraphDoc::from_json_str(
        &json!({"format": "agentloom.graph", "version": 1, "name": "seen",
            "nodes": [
                {"id": "key", "block": "test.key", "credential": "svc"},
                {"id": "seen", "block": "test.seen"}],
            "edges": [{"from": ["key", "value"], "to": ["seen", "value"]}]})
        .to_string(),
    )
    .unwrap();
    let registry = Arc::new(
        Registry::builtin()
            .with(Box::new(Key(BlockMeta::new(
                "test.key",
                "Key",
                "Test",
                "Hands on its secret.",
            ))))
            .with(Box::new(Seen(BlockMeta::new(
                "test.seen",
                "Seen",
                "Test",
                "Keeps its input.",
            )))),
    );
    let graph = validate(&doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    let debug =
        RunDebug::new([Breakpoint::new("key", BreakAt::After)]).with_handler(Arc::new(AsShown));
    let report = Executor::new(registry)
        .with_secrets(Arc::new(OneSecret))
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions {
                debug: Some(Arc::new(debug)),
                ..RunOptions::default()
            },
            Arc::new(agentloom_engine::CollectSink::default()),
        )
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(*SEEN.lock().unwrap(), [TOKEN], "what `seen` was given");
}

#[tokio::test]
async fn the_events_of_a_run_say_which_outputs_had_a_secret_redacted_wherever_they_are_recorded() {
    // The run's events, as a worker sends them over the queue (JSON), then recorded by
    // another process taking the run over, with no redaction of its own to ask.
    let doc = graph("test.key");
    let registry = registry();
    let graph = validate(&doc, registry.as_ref()).unwrap();
    let events = Arc::new(agentloom_engine::CollectSink::default());
    let report = Executor::new(registry)
        .with_secrets(Arc::new(OneSecret))
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions::default(),
            events.clone(),
        )
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    let sent = serde_json::to_string(&events.events()).unwrap();
    assert!(!sent.contains(TOKEN), "an event holds the token");
    let received: Vec<agentloom_engine::RunEvent> = serde_json::from_str(&sent).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let store = RunStore::open(&db).unwrap();
    let recorder = store
        .recorder_with(&doc, agentloom_engine::LogPolicy::full())
        .unwrap();
    for event in &received {
        agentloom_engine::EventSink::emit(&recorder, event);
    }
    recorder.finish().unwrap();
    let flags = stored_flags(&db, &report.run_id);
    let flag = |id: &str| flags.iter().find(|(n, _)| n == id).unwrap().1;
    assert_eq!(flag("key"), Some(true), "{flags:?}");
    assert_eq!(flag("tpl"), Some(true), "{flags:?}");
    // Its text holds the marker as typed: known not redacted, not guessed from the marker.
    assert_eq!(flag("n"), Some(false), "{flags:?}");
}
