//! The run's promises hold through sub-runs and echoing services: secrets are redacted from
//! every event and the report, safe mode asks before every side effect however it is
//! reached, and sub-runs share the parent's CPU slots, steps and cost budget.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloom_blocks::Registry;
use agentloom_core::{
    ApprovalDecision, ApprovalRequest, Block, BlockError, BlockMeta, Config, ConfigError, GraphDoc,
    NodeImpl, PortSpec, Ports, RunCtx, Secret, SecretError, SecretSource, Usage, ValueMap,
    ValueType, async_trait, validate,
};
use agentloom_engine::{
    Approver, CollectSink, EventKind, EventSink, Executor, RunOptions, RunReport, RunStatus,
};
use serde_json::json;

const TOKEN: &str = "tok_live_CANARY_4242";

struct OneSecret;

impl SecretSource for OneSecret {
    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        Ok(Secret::new(format!("{TOKEN}-{name}")))
    }
}

/// Reads a secret and fails with a message that quotes it, as a careless service would.
struct Echo(BlockMeta);
struct EchoNode(Ports);

impl Block for Echo {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(EchoNode(Ports::new(
            vec![],
            vec![PortSpec::new("value", ValueType::Text)],
        ))))
    }
}

#[async_trait]
impl NodeImpl for EchoNode {
    fn ports(&self) -> &Ports {
        &self.0
    }
    async fn run(&self, _inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let secret = ctx.secret("gh")?;
        ctx.partial("value", &format!("using {}", secret.expose()));
        Err(BlockError::permanent(format!(
            "401: bad credentials `Bearer {}`",
            secret.expose()
        )))
    }
}

/// Reserves `estimate`, waits, then spends `cost`.
struct Spender(BlockMeta);
struct SpenderNode(Ports);

impl Block for Spender {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(SpenderNode(Ports::new(
            vec![PortSpec::new("value", ValueType::Any).optional()],
            vec![PortSpec::new("value", ValueType::Any)],
        ))))
    }
}

#[async_trait]
impl NodeImpl for SpenderNode {
    fn ports(&self) -> &Ports {
        &self.0
    }
    async fn run(&self, _inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        ctx.reserve_cost(0.6)?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        ctx.settle_cost(
            0.6,
            Usage {
                input_tokens: 1,
                output_tokens: 1,
                cost_usd: 0.6,
            },
        );
        Ok(agentloom_core::outputs([("value", 1.into())]))
    }
}

/// How many `test.busy` jobs run at once, and the most that ever did.
static BUSY_NOW: AtomicUsize = AtomicUsize::new(0);
static BUSY_MOST: AtomicUsize = AtomicUsize::new(0);

/// CPU-bound work (through `run_cpu_bound`) that keeps a core for 50 ms.
struct Busy(BlockMeta);
struct BusyNode(Ports);

impl Block for Busy {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(BusyNode(Ports::new(
            vec![PortSpec::new("value", ValueType::Any)],
            vec![PortSpec::new("value", ValueType::Any)],
        ))))
    }
}

#[async_trait]
impl NodeImpl for BusyNode {
    fn ports(&self) -> &Ports {
        &self.0
    }
    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        agentloom_core::run_cpu_bound(ctx, || {
            let now = BUSY_NOW.fetch_add(1, Ordering::SeqCst) + 1;
            BUSY_MOST.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(50));
            BUSY_NOW.fetch_sub(1, Ordering::SeqCst);
        })
        .await?;
        let value = inputs.remove("value").unwrap_or_default();
        Ok(agentloom_core::outputs([("value", value)]))
    }
}

fn registry() -> Arc<Registry> {
    Arc::new(
        Registry::builtin()
            .with(Box::new(Busy(BlockMeta::new(
                "test.busy",
                "Busy",
                "Test",
                "Keeps a core busy.",
            ))))
            .with(Box::new(Echo(BlockMeta::new(
                "test.echo",
                "Echo",
                "Test",
                "Quotes its secret.",
            ))))
            .with(Box::new(Spender(BlockMeta::new(
                "test.spender",
                "Spender",
                "Test",
                "Spends money.",
            )))),
    )
}

async fn run(executor: &Executor, doc: &GraphDoc) -> (RunReport, Vec<EventKind>) {
    let sink = Arc::new(CollectSink::default());
    let report = run_into(executor, doc, sink.clone()).await;
    (report, sink.events().into_iter().map(|e| e.kind).collect())
}

async fn run_into(executor: &Executor, doc: &GraphDoc, sink: Arc<dyn EventSink>) -> RunReport {
    let valid = validate(doc, executor.catalog().as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    executor
        .run(
            Arc::new(valid),
            ValueMap::new(),
            RunOptions::default(),
            sink,
        )
        .await
}

fn graph(value: serde_json::Value) -> GraphDoc {
    GraphDoc::from_json_str(&value.to_string()).unwrap()
}

#[tokio::test]
async fn a_secret_quoted_in_an_error_is_redacted_from_events_and_report() {
    let executor = Executor::new(registry()).with_secrets(Arc::new(OneSecret));
    let doc = graph(json!({
        "format": "agentloom.graph", "version": 1, "name": "echo",
        "nodes": [{"id": "call", "block": "test.echo"}],
        "edges": []
    }));
    let (report, events) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Failed);
    let everything = format!(
        "{}\n{}",
        serde_json::to_string(&report).unwrap(),
        serde_json::to_string(&events).unwrap()
    );
    assert!(!everything.contains(TOKEN), "{everything}");
    assert!(
        report
            .error
            .as_deref()
            .unwrap()
            .contains("bad credentials `Bearer [redacted]`"),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_failed_node_keeps_what_it_streamed_in_the_run_log_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let store = agentloom_engine::RunStore::open(&dir.path().join("runs.db")).unwrap();
    let executor = Executor::new(registry()).with_secrets(Arc::new(OneSecret));
    let doc = graph(json!({
        "format": "agentloom.graph", "version": 1, "name": "echo",
        "nodes": [{"id": "call", "block": "test.echo"}],
        "edges": []
    }));
    let recorder = Arc::new(store.recorder(&doc).unwrap());
    let report = run_into(&executor, &doc, recorder.clone()).await;
    recorder.finish().unwrap();
    assert_eq!(report.status, RunStatus::Failed);

    // Read back from the file: the stream above the error, through the same redaction.
    let detail = store.get_run(&report.run_id).unwrap().unwrap();
    let recorded = agentloom_engine::RunState::from(&detail);
    let call = recorded.node("call").unwrap();
    assert!(
        call.error.as_deref().unwrap().contains("[redacted]"),
        "{call:?}"
    );
    assert_eq!(
        call.partial.get("value").map(String::as_str),
        Some("using [redacted]"),
        "{call:?}"
    );
    drop(store);
    for file in std::fs::read_dir(dir.path()).unwrap() {
        let path = file.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(TOKEN),
            "the secret is in {}",
            path.display()
        );
    }
}

#[tokio::test]
async fn a_secret_resolved_in_a_sub_run_is_redacted_from_the_parent() {
    let executor = Executor::new(registry()).with_secrets(Arc::new(OneSecret));
    let doc = graph(json!({
        "format": "agentloom.graph", "version": 1, "name": "outer",
        "nodes": [
            {"id": "items", "block": "data.constant", "config": {"value": [1]}},
            {"id": "each", "block": "control.for_each", "config": {"graph": {
                "format": "agentloom.graph", "version": 1, "name": "inner",
                "nodes": [
                    {"id": "in", "block": "graph.input", "config": {"name": "item", "type": "json"}},
                    {"id": "call", "block": "test.echo"},
                    {"id": "out", "block": "graph.output", "config": {"name": "result"}}
                ],
                "edges": [{"from": ["call", "value"], "to": ["out", "value"]}]
            }}}
        ],
        "edges": [{"from": ["items", "value"], "to": ["each", "items"]}]
    }));
    let (report, events) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Failed);
    let everything = format!("{report:?}{events:?}");
    assert!(!everything.contains(TOKEN), "{everything}");
    assert!(everything.contains("[redacted]"), "{everything}");
}

/// Approves nothing, and remembers what it was asked.
#[derive(Default)]
struct Refuse(Mutex<Vec<String>>);

#[async_trait]
impl Approver for Refuse {
    async fn decide_or_pause(
        &self,
        _run: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Option<ApprovalDecision> {
        self.0
            .lock()
            .unwrap()
            .push(format!("{node}: {}", request.action));
        Some(ApprovalDecision::Rejected {
            message: "not now".to_owned(),
        })
    }
}

fn safe_executor(workspace: &std::path::Path) -> (Executor, Arc<Refuse>) {
    let approver = Arc::new(Refuse::default());
    let executor = Executor::new(registry())
        .with_workspace(workspace.to_path_buf())
        .with_approver(approver.clone());
    (executor, approver)
}

#[tokio::test]
async fn safe_mode_asks_before_each_write_of_a_for_each_over_a_block() {
    let dir = tempfile::tempdir().unwrap();
    let (executor, approver) = safe_executor(dir.path());
    let doc = graph(json!({
        "format": "agentloom.graph", "version": 1, "name": "loop",
        "settings": {"safe_mode": true},
        "nodes": [
            {"id": "items", "block": "data.constant", "config": {"value": ["a.txt", "b.txt"]}},
            {"id": "text", "block": "data.constant", "config": {"value": "x"}},
            {"id": "each", "block": "control.for_each", "config": {
                "block": "file.write", "item_port": "path", "config": {}
            }}
        ],
        "edges": [
            {"from": ["items", "value"], "to": ["each", "items"]},
            {"from": ["text", "value"], "to": ["each", "content"]}
        ]
    }));
    let (report, _) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Failed, "{report:?}");
    assert!(
        report
            .error
            .as_deref()
            .unwrap()
            .contains("was not approved"),
        "{report:?}"
    );
    assert!(!approver.0.lock().unwrap().is_empty());
    assert!(!dir.path().join("a.txt").exists());
    assert!(!dir.path().join("b.txt").exists());
}

#[tokio::test]
async fn a_sub_graph_inherits_safe_mode_and_the_approver() {
    let dir = tempfile::tempdir().unwrap();
    let (executor, approver) = safe_executor(dir.path());
    // The inner graph says nothing of safe mode; the parent's setting holds.
    let doc = graph(json!({
        "format": "agentloom.graph", "version": 1, "name": "loop",
        "settings": {"safe_mode": true},
        "nodes": [
            {"id": "items", "block": "data.constant", "config": {"value": ["x"]}},
            {"id": "each", "block": "control.for_each", "config": {"graph": {
                "format": "agentloom.graph", "version": 1, "name": "inner",
                "nodes": [
                    {"id": "in", "block": "graph.input", "config": {"name": "item", "type": "text"}},
                    {"id": "write", "block": "file.write", "config": {"path": "escaped.txt"}},
                    {"id": "out", "block": "graph.output", "config": {"name": "result"}}
                ],
                "edges": [
                    {"from": ["in", "value"], "to": ["write", "content"]},
                    {"from": ["write", "path"], "to": ["out", "value"]}
                ]
            }}}
        ],
        "edges": [{"from": ["items", "value"], "to": ["each", "items"]}]
    }));
    let (report, _) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Failed, "{report:?}");
    assert_eq!(approver.0.lock().unwrap().len(), 1, "{report:?}");
    assert!(!dir.path().join("escaped.txt").exists());
}

#[tokio::test]
async fn safe_mode_asks_before_an_http_post_but_not_a_get() {
    let dir = tempfile::tempdir().unwrap();
    let (executor, approver) = safe_executor(dir.path());
    for (method, asked) in [("POST", true), ("DELETE", true), ("GET", false)] {
        approver.0.lock().unwrap().clear();
        // Port 9 (discard) on localhost: nothing answers, so an unasked request just fails.
        let doc = graph(json!({
            "format": "agentloom.graph", "version": 1, "name": "http",
            "settings": {"safe_mode": true},
            "nodes": [{"id": "call", "block": "http.request", "config": {
                "method": method, "url": "http://127.0.0.1:9/x", "timeout_ms": 500
            }}],
            "edges": []
        }));
        let (report, _) = run(&executor, &doc).await;
        assert_eq!(report.status, RunStatus::Failed);
        assert_eq!(
            !approver.0.lock().unwrap().is_empty(),
            asked,
            "{method}: {report:?}"
        );
    }
}

/// A graph whose `control.for_each` (4 at once) runs, per item of `items`, a sub-graph of
/// an `in` input, `inner_nodes` and an `out` output.
fn for_each_graph(
    settings: serde_json::Value,
    items: serde_json::Value,
    inner_nodes: serde_json::Value,
    inner_edges: serde_json::Value,
) -> GraphDoc {
    let mut nodes = vec![
        json!({"id": "in", "block": "graph.input", "config": {"name": "item", "type": "json"}}),
        json!({"id": "out", "block": "graph.output", "config": {"name": "result"}}),
    ];
    nodes.extend(inner_nodes.as_array().unwrap().iter().cloned());
    graph(json!({
        "format": "agentloom.graph", "version": 1, "name": "outer",
        "settings": settings,
        "nodes": [
            {"id": "items", "block": "data.constant", "config": {"value": items}},
            {"id": "each", "block": "control.for_each", "config": {"concurrency": 4, "graph": {
                "format": "agentloom.graph", "version": 1, "name": "inner",
                "nodes": nodes, "edges": inner_edges
            }}}
        ],
        "edges": [{"from": ["items", "value"], "to": ["each", "items"]}]
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_for_each_sub_graph_obeys_the_parent_concurrency() {
    // `concurrency` bounds CPU-bound work; a sub-run gets the parent's slots, not its own,
    // so four items of a for_each that runs four at a time still work one at a time.
    let executor = Executor::new(registry());
    let doc = for_each_graph(
        json!({"concurrency": 1}),
        json!([1, 2, 3, 4]),
        json!([{"id": "work", "block": "test.busy"}]),
        json!([
            {"from": ["in", "value"], "to": ["work", "value"]},
            {"from": ["work", "value"], "to": ["out", "value"]}
        ]),
    );
    let (report, _) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(BUSY_NOW.load(Ordering::SeqCst), 0);
    assert_eq!(
        BUSY_MOST.load(Ordering::SeqCst),
        1,
        "CPU-bound work of sub-runs ran side by side under concurrency 1"
    );
}

#[tokio::test]
async fn a_sub_run_counts_towards_the_parent_step_limit() {
    let executor = Executor::new(registry());
    let doc = for_each_graph(
        json!({"max_steps": 6}),
        json!([1, 2, 3, 4, 5]),
        json!([]),
        json!([{"from": ["in", "value"], "to": ["out", "value"]}]),
    );
    let (report, _) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Failed, "{report:?}");
    assert!(
        report.error.as_deref().unwrap().contains("step limit"),
        "{report:?}"
    );
}

#[tokio::test]
async fn requests_in_flight_cannot_overshoot_the_cost_limit() {
    let executor = Executor::new(registry());
    let doc = graph(json!({
        "format": "agentloom.graph", "version": 1, "name": "spend",
        "settings": {"max_cost_usd": 1.0},
        "nodes": [
            {"id": "a", "block": "test.spender"},
            {"id": "b", "block": "test.spender"},
            {"id": "c", "block": "test.spender"}
        ],
        "edges": []
    }));
    let (report, _) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Failed, "{report:?}");
    assert!(
        report.usage.cost_usd <= 1.0,
        "spent {} of a 1.0 limit",
        report.usage.cost_usd
    );
    assert!(
        report.error.as_deref().unwrap().contains("cost limit"),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_workspace_made_on_use_exists_only_once_a_run_touches_files() {
    let parent = tempfile::tempdir().unwrap();
    let untouched = parent.path().join("task-a");
    let doc = graph(json!({
        "format": "agentloom.graph", "version": 1, "name": "text only",
        "nodes": [
            {"id": "text", "block": "data.constant", "config": {"value": "hi"}},
            {"id": "shout", "block": "text.template", "config": {"template": "{{ value }}!"}}
        ],
        "edges": [{"from": ["text", "value"], "to": ["shout", "value"]}]
    }));
    let executor = Executor::new(registry()).with_workspace_made_on_use(untouched.clone());
    let (report, _) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert!(
        !untouched.exists(),
        "a run that touches no file makes no folder"
    );

    // Two levels that do not exist yet: the first file operation makes both.
    let written = parent.path().join("tasks/task-b");
    let doc = graph(json!({
        "format": "agentloom.graph", "version": 1, "name": "writes",
        "nodes": [
            {"id": "text", "block": "data.constant", "config": {"value": "a note"}},
            {"id": "write", "block": "file.write", "config": {"path": "notes/n.txt"}}
        ],
        "edges": [{"from": ["text", "value"], "to": ["write", "content"]}]
    }));
    let executor = Executor::new(registry()).with_workspace_made_on_use(written.clone());
    let (report, _) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(
        std::fs::read_to_string(written.join("notes/n.txt")).unwrap(),
        "a note"
    );

    // A place that cannot be a folder: the write fails naming the workspace.
    let blocked = parent.path().join("file-in-the-way");
    std::fs::write(&blocked, "not a folder").unwrap();
    let executor = Executor::new(registry()).with_workspace_made_on_use(blocked.join("task"));
    let (report, _) = run(&executor, &doc).await;
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.unwrap_or_default();
    assert!(error.contains("file-in-the-way"), "{error}");
}
