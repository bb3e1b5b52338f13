//! Executor semantics on real graphs: concurrency (waits hold no slot, CPU-bound work is bounded), retries, timeouts, cancellation,
//! skipped branches, caught errors, run limits, determinism, very long chains.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_core::{
    ApprovalDecision, ApprovalRequest, Block, BlockError, BlockMeta, Config, ConfigError,
    ConfigReader, EdgeDoc, GraphDoc, NodeDoc, NodeImpl, PortSpec, Ports, RetryPolicy, RunCtx,
    Usage, Value, ValueMap, ValueType, async_trait, validate,
};
use agentloom_engine::{
    Approver, CollectSink, EventKind, Executor, NodeStatus, NullSink, RunOptions, RunReport,
    RunStatus,
};
use serde_json::json;

/// Fails with a transient error until it has been called `fail_times` times.
struct Flaky {
    calls: Arc<AtomicU32>,
    meta: BlockMeta,
}

struct FlakyNode {
    calls: Arc<AtomicU32>,
    fail_times: u32,
    ports: Ports,
}

impl Block for Flaky {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }
    fn instantiate(
        &self,
        config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let fail_times =
            u32::try_from(ConfigReader(config).u64_or("fail_times", 0)?).unwrap_or(u32::MAX);
        Ok(Arc::new(FlakyNode {
            calls: self.calls.clone(),
            fail_times,
            ports: Ports::new(vec![], vec![PortSpec::new("value", ValueType::Integer)]),
        }))
    }
}

#[async_trait]
impl NodeImpl for FlakyNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }
    async fn run(&self, _inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if call <= self.fail_times {
            return Err(BlockError::transient(format!("flaky failure {call}")));
        }
        let mut out = ValueMap::new();
        out.insert("value".into(), Value::Integer(i64::from(ctx.attempt())));
        Ok(out)
    }
}

/// Reports a fixed cost per run, and passes its input on.
struct Costly(BlockMeta);
struct CostlyNode {
    cost: f64,
    ports: Ports,
}

impl Block for Costly {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(CostlyNode {
            cost: ConfigReader(config).f64("cost")?.unwrap_or(0.0),
            ports: Ports::new(
                vec![PortSpec::new("value", ValueType::Any).optional()],
                vec![PortSpec::new("value", ValueType::Any)],
            ),
        }))
    }
}

#[async_trait]
impl NodeImpl for CostlyNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }
    async fn run(&self, inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        ctx.report_usage(Usage {
            input_tokens: 10,
            output_tokens: 5,
            cost_usd: self.cost,
        });
        let mut out = ValueMap::new();
        out.insert(
            "value".into(),
            inputs.get("value").cloned().unwrap_or(Value::Null),
        );
        Ok(out)
    }
}

fn registry_with_test_blocks(calls: Arc<AtomicU32>) -> Arc<Registry> {
    Arc::new(
        Registry::builtin()
            .with(Box::new(Flaky {
                calls,
                meta: BlockMeta::new("test.flaky", "Flaky", "Test", "Fails a few times."),
            }))
            .with(Box::new(Costly(BlockMeta::new(
                "test.costly",
                "Costly",
                "Test",
                "Reports a cost.",
            )))),
    )
}

fn node(id: &str, block: &str, config: serde_json::Value) -> NodeDoc {
    NodeDoc::new(id, block).with_config(config)
}

fn edge(from: &str, from_port: &str, to: &str, to_port: &str) -> EdgeDoc {
    EdgeDoc::new(from, from_port, to, to_port)
}

async fn run_doc(
    registry: Arc<Registry>,
    doc: &GraphDoc,
    inputs: ValueMap,
) -> (RunReport, Vec<EventKind>) {
    run_with(Executor::new(registry), doc, inputs, RunOptions::default()).await
}

async fn run_with(
    executor: Executor,
    doc: &GraphDoc,
    inputs: ValueMap,
    options: RunOptions,
) -> (RunReport, Vec<EventKind>) {
    let valid = match validate(doc, executor.catalog().as_ref()) {
        Ok(valid) => valid,
        Err(problems) => panic!("invalid test graph: {problems:?}"),
    };
    let sink = Arc::new(CollectSink::default());
    let report = executor
        .run(Arc::new(valid), inputs, options, sink.clone())
        .await;
    (report, sink.events().into_iter().map(|e| e.kind).collect())
}

fn status_of(report: &RunReport, id: &str) -> NodeStatus {
    report
        .nodes
        .iter()
        .find(|n| n.id == id)
        .map(|n| n.status)
        .unwrap_or(NodeStatus::Pending)
}

fn builtin() -> Arc<Registry> {
    Arc::new(Registry::builtin())
}

#[tokio::test]
async fn independent_nodes_run_concurrently() {
    let mut doc = GraphDoc::new("fan-out");
    doc.nodes
        .push(node("start", "data.constant", json!({"value": 1})));
    for i in 0..10 {
        let id = format!("wait{i}");
        doc.nodes
            .push(node(&id, "control.delay", json!({"ms": 200})));
        doc.edges.push(edge("start", "value", &id, "value"));
    }
    let started = Instant::now();
    let (report, _) = run_doc(builtin(), &doc, ValueMap::new()).await;
    let elapsed = started.elapsed();
    assert_eq!(report.status, RunStatus::Completed);
    // Ten 200 ms waits one after another would take 2 s.
    assert!(elapsed < Duration::from_millis(1200), "took {elapsed:?}");
}

#[tokio::test]
async fn waiting_nodes_hold_no_concurrency_slot() {
    let mut doc = GraphDoc::new("waits");
    doc.settings.concurrency = Some(1);
    doc.nodes
        .push(node("start", "data.constant", json!({"value": 1})));
    for i in 0..10 {
        let id = format!("wait{i}");
        doc.nodes
            .push(node(&id, "control.delay", json!({"ms": 200})));
        doc.edges.push(edge("start", "value", &id, "value"));
    }
    let started = Instant::now();
    let (report, _) = run_doc(builtin(), &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Completed);
    // Ten 200 ms waits one after another would take 2 s.
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "{:?}",
        started.elapsed()
    );
}

/// Busy for `ms` on the blocking pool, counting how many jobs are busy at once.
struct Busy {
    meta: BlockMeta,
    active: Arc<AtomicU32>,
    peak: Arc<AtomicU32>,
}

struct BusyNode {
    ms: u64,
    active: Arc<AtomicU32>,
    peak: Arc<AtomicU32>,
    ports: Ports,
}

impl Block for Busy {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }
    fn instantiate(
        &self,
        config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(BusyNode {
            ms: ConfigReader(config).u64_or("ms", 50)?,
            active: self.active.clone(),
            peak: self.peak.clone(),
            ports: Ports::new(
                vec![PortSpec::new("value", ValueType::Any)],
                vec![PortSpec::new("value", ValueType::Any)],
            ),
        }))
    }
}

#[async_trait]
impl NodeImpl for BusyNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }
    async fn run(&self, inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let (active, peak, ms) = (self.active.clone(), self.peak.clone(), self.ms);
        agentloom_core::run_cpu_bound(ctx, move || {
            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(ms));
            active.fetch_sub(1, Ordering::SeqCst);
        })
        .await?;
        Ok(inputs)
    }
}

#[tokio::test]
async fn cpu_bound_work_runs_off_the_scheduler_bounded_by_concurrency() {
    let (active, peak) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let registry = Arc::new(Registry::builtin().with(Box::new(Busy {
        meta: BlockMeta::new("test.busy", "Busy", "Test", "Keeps a core busy."),
        active: active.clone(),
        peak: peak.clone(),
    })));
    let mut doc = GraphDoc::new("busy");
    doc.settings.concurrency = Some(2);
    doc.nodes
        .push(node("start", "data.constant", json!({"value": 1})));
    for i in 0..6 {
        let id = format!("busy{i}");
        doc.nodes.push(node(&id, "test.busy", json!({"ms": 50})));
        doc.edges.push(edge("start", "value", &id, "value"));
    }
    // A single-threaded runtime: jobs overlap only if they run off the scheduler's thread.
    let (report, _) = run_doc(registry, &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    assert_eq!(active.load(Ordering::SeqCst), 0);
}

/// Holds a request slot for `url` for 50 ms, counting how many it holds at once per host.
struct Request {
    meta: BlockMeta,
    peaks: Arc<std::sync::Mutex<std::collections::HashMap<String, (u32, u32)>>>,
}

struct RequestNode {
    url: String,
    peaks: Arc<std::sync::Mutex<std::collections::HashMap<String, (u32, u32)>>>,
    ports: Ports,
}

impl Block for Request {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }
    fn instantiate(
        &self,
        config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(RequestNode {
            url: ConfigReader(config)
                .str("url")?
                .unwrap_or_default()
                .to_owned(),
            peaks: self.peaks.clone(),
            ports: Ports::new(
                vec![PortSpec::new("value", ValueType::Any)],
                vec![PortSpec::new("value", ValueType::Any)],
            ),
        }))
    }
}

#[async_trait]
impl NodeImpl for RequestNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }
    async fn run(&self, inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let host = self.url.split('/').nth(2).unwrap_or_default().to_owned();
        let _slot = ctx.request_slot(&self.url).await?;
        {
            let mut peaks = self.peaks.lock().unwrap();
            let (active, peak) = peaks.entry(host.clone()).or_default();
            *active += 1;
            *peak = (*peak).max(*active);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.peaks.lock().unwrap().entry(host).or_default().0 -= 1;
        Ok(inputs)
    }
}

#[tokio::test]
async fn requests_are_bounded_per_host() {
    let peaks = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let registry = Arc::new(Registry::builtin().with(Box::new(Request {
        meta: BlockMeta::new("test.request", "Request", "Test", "Holds a request slot."),
        peaks: peaks.clone(),
    })));
    let mut doc = GraphDoc::new("requests");
    doc.settings.requests_per_host = Some(2);
    doc.nodes
        .push(node("start", "data.constant", json!({"value": 1})));
    for i in 0..8 {
        let id = format!("r{i}");
        let url = if i < 6 {
            format!("https://api.one.example/v1/{i}")
        } else {
            format!("http://two.example:8080/{i}")
        };
        doc.nodes
            .push(node(&id, "test.request", json!({"url": url})));
        doc.edges.push(edge("start", "value", &id, "value"));
    }
    let (report, _) = run_doc(registry, &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    let peaks = peaks.lock().unwrap();
    assert_eq!(peaks["api.one.example"], (0, 2));
    assert_eq!(peaks["two.example:8080"], (0, 2));
}

#[tokio::test]
async fn transient_failures_are_retried_with_backoff() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut doc = GraphDoc::new("retry");
    let mut flaky = node("flaky", "test.flaky", json!({"fail_times": 2}));
    flaky.retry = Some(RetryPolicy {
        max_attempts: 3,
        backoff_ms: 20,
        backoff_factor: 2.0,
        max_backoff_ms: 1000,
    });
    doc.nodes.push(flaky);
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "attempt"})));
    doc.edges.push(edge("flaky", "value", "out", "value"));
    let (report, events) = run_doc(
        registry_with_test_blocks(calls.clone()),
        &doc,
        ValueMap::new(),
    )
    .await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.outputs["attempt"], Value::Integer(3));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let waits: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            EventKind::NodeRetrying { wait_ms, .. } => Some(*wait_ms),
            _ => None,
        })
        .collect();
    assert_eq!(waits, vec![20, 40]);
    assert_eq!(
        report
            .nodes
            .iter()
            .find(|n| n.id == "flaky")
            .map(|n| n.attempts),
        Some(3)
    );
}

#[tokio::test]
async fn retries_give_up_after_max_attempts() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut doc = GraphDoc::new("retry");
    let mut flaky = node("flaky", "test.flaky", json!({"fail_times": 10}));
    flaky.retry = Some(RetryPolicy {
        max_attempts: 2,
        backoff_ms: 1,
        ..RetryPolicy::default()
    });
    doc.nodes.push(flaky);
    let (report, _) = run_doc(
        registry_with_test_blocks(calls.clone()),
        &doc,
        ValueMap::new(),
    )
    .await;
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let error = report.error.unwrap_or_default();
    assert!(
        error.contains("node `flaky` failed: flaky failure 2"),
        "{error}"
    );
}

#[tokio::test]
async fn a_node_timeout_fails_the_node() {
    let mut doc = GraphDoc::new("timeout");
    doc.nodes
        .push(node("start", "data.constant", json!({"value": 1})));
    let mut slow = node("slow", "control.delay", json!({"ms": 5000}));
    slow.timeout_ms = Some(100);
    doc.nodes.push(slow);
    doc.edges.push(edge("start", "value", "slow", "value"));
    let started = Instant::now();
    let (report, _) = run_doc(builtin(), &doc, ValueMap::new()).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(report.status, RunStatus::Failed);
    assert!(
        report
            .error
            .clone()
            .unwrap_or_default()
            .contains("timed out after 100 ms")
    );
    assert_eq!(status_of(&report, "slow"), NodeStatus::Failed);
}

#[tokio::test]
async fn cancellation_stops_the_run_promptly() {
    let mut doc = GraphDoc::new("cancel");
    doc.nodes
        .push(node("start", "data.constant", json!({"value": 1})));
    doc.nodes
        .push(node("slow", "control.delay", json!({"ms": 10_000})));
    doc.nodes
        .push(node("after", "control.passthrough", json!({})));
    doc.edges.push(edge("start", "value", "slow", "value"));
    doc.edges.push(edge("slow", "value", "after", "value"));
    let options = RunOptions::default();
    let cancel = options.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let (report, events) = run_with(Executor::new(builtin()), &doc, ValueMap::new(), options).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(report.status, RunStatus::Cancelled);
    assert_eq!(status_of(&report, "after"), NodeStatus::Pending);
    assert!(matches!(
        events.last(),
        Some(EventKind::RunFinished {
            status: RunStatus::Cancelled,
            ..
        })
    ));
}

#[tokio::test]
async fn untaken_branch_is_skipped_not_failed() {
    let doc = GraphDoc::from_json_str(include_str!(
        "../../assets/examples/branching.agentloom.json"
    ))
    .unwrap();
    let inputs = ValueMap::from([("amount".to_owned(), Value::from("3"))]);
    let (report, events) = run_doc(builtin(), &doc, inputs).await;
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.outputs["verdict"], Value::from("3 is small"));
    assert_eq!(status_of(&report, "big"), NodeStatus::Skipped);
    assert_eq!(status_of(&report, "small"), NodeStatus::Done);
    assert!(events.iter().any(|e| matches!(e, EventKind::NodeSkipped { node, reason, .. } if node == "big" && reason.contains("is_big.true"))));
}

#[tokio::test]
async fn skipping_cascades_down_a_chain() {
    let mut doc = GraphDoc::new("cascade");
    doc.nodes
        .push(node("c", "data.constant", json!({"value": false})));
    doc.nodes.push(node("branch", "control.branch", json!({})));
    doc.edges.push(edge("c", "value", "branch", "condition"));
    let mut previous = ("branch".to_owned(), "true".to_owned());
    for i in 0..50 {
        let id = format!("n{i}");
        doc.nodes.push(node(&id, "control.passthrough", json!({})));
        doc.edges.push(edge(&previous.0, &previous.1, &id, "value"));
        previous = (id, "value".to_owned());
    }
    let (report, _) = run_doc(builtin(), &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Completed);
    assert!(
        report
            .nodes
            .iter()
            .filter(|n| n.id.starts_with('n'))
            .all(|n| n.status == NodeStatus::Skipped)
    );
}

#[tokio::test]
async fn a_wired_error_output_catches_the_failure() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut doc = GraphDoc::new("caught");
    doc.nodes
        .push(node("flaky", "test.flaky", json!({"fail_times": 1})));
    doc.nodes.push(node(
        "explain",
        "text.template",
        json!({"template": "caught: {{ error.message }} in {{ error.node }}"}),
    ));
    doc.nodes
        .push(node("ok_path", "control.passthrough", json!({})));
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "note"})));
    doc.edges.push(edge("flaky", "error", "explain", "error"));
    doc.edges.push(edge("flaky", "value", "ok_path", "value"));
    doc.edges.push(edge("explain", "text", "out", "value"));
    let (report, events) = run_doc(registry_with_test_blocks(calls), &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(
        report.outputs["note"],
        Value::from("caught: flaky failure 1 in flaky")
    );
    assert_eq!(status_of(&report, "ok_path"), NodeStatus::Skipped);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, EventKind::NodeFailed { caught: true, .. }))
    );
}

#[tokio::test]
async fn an_uncaught_failure_fails_the_run_and_stops_the_rest() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut doc = GraphDoc::new("uncaught");
    doc.nodes
        .push(node("flaky", "test.flaky", json!({"fail_times": 1})));
    doc.nodes
        .push(node("after", "control.passthrough", json!({})));
    doc.edges.push(edge("flaky", "value", "after", "value"));
    let (report, _) = run_doc(registry_with_test_blocks(calls), &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(status_of(&report, "flaky"), NodeStatus::Failed);
    assert_eq!(status_of(&report, "after"), NodeStatus::Pending);
}

#[tokio::test]
async fn max_steps_limit_stops_the_run() {
    let mut doc = GraphDoc::new("steps");
    doc.settings.max_steps = Some(3);
    doc.nodes
        .push(node("n0", "data.constant", json!({"value": 1})));
    for i in 1..10 {
        doc.nodes
            .push(node(&format!("n{i}"), "control.passthrough", json!({})));
        doc.edges.push(edge(
            &format!("n{}", i - 1),
            "value",
            &format!("n{i}"),
            "value",
        ));
    }
    let (report, _) = run_doc(builtin(), &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Failed);
    assert!(
        report
            .error
            .unwrap_or_default()
            .contains("step limit reached")
    );
    assert_eq!(
        report
            .nodes
            .iter()
            .filter(|n| n.status == NodeStatus::Done)
            .count(),
        3
    );
}

#[tokio::test]
async fn max_wall_time_limit_stops_the_run() {
    let mut doc = GraphDoc::new("wall");
    doc.settings.max_wall_ms = Some(100);
    doc.nodes
        .push(node("start", "data.constant", json!({"value": 1})));
    doc.nodes
        .push(node("slow", "control.delay", json!({"ms": 5000})));
    doc.edges.push(edge("start", "value", "slow", "value"));
    let started = Instant::now();
    let (report, _) = run_doc(builtin(), &doc, ValueMap::new()).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(report.status, RunStatus::Failed);
    assert!(
        report
            .error
            .unwrap_or_default()
            .contains("time limit reached")
    );
}

#[tokio::test]
async fn max_cost_limit_stops_the_run_and_usage_is_summed() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut doc = GraphDoc::new("cost");
    doc.settings.max_cost_usd = Some(0.25);
    doc.nodes
        .push(node("a", "test.costly", json!({"cost": 0.1})));
    doc.nodes
        .push(node("b", "test.costly", json!({"cost": 0.1})));
    doc.nodes
        .push(node("c", "test.costly", json!({"cost": 0.1})));
    doc.nodes
        .push(node("d", "test.costly", json!({"cost": 0.1})));
    doc.edges.push(edge("a", "value", "b", "value"));
    doc.edges.push(edge("b", "value", "c", "value"));
    doc.edges.push(edge("c", "value", "d", "value"));
    let (report, _) = run_doc(registry_with_test_blocks(calls), &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.clone().unwrap_or_default();
    assert!(error.contains("cost limit reached"), "{error}");
    assert_eq!(status_of(&report, "d"), NodeStatus::Pending);
    assert_eq!(report.usage.input_tokens, 30);
    assert_eq!(report.usage.output_tokens, 15);
    assert!((report.usage.cost_usd - 0.3).abs() < 1e-9);
}

#[tokio::test]
async fn event_order_is_deterministic() {
    let doc = GraphDoc::from_json_str(include_str!(
        "../../assets/examples/branching.agentloom.json"
    ))
    .unwrap();
    let mut orders = Vec::new();
    for _ in 0..5 {
        let (_, events) = run_doc(builtin(), &doc, ValueMap::new()).await;
        let order: Vec<String> = events
            .iter()
            .map(|e| format!("{}:{}", e.name(), e.node().unwrap_or("")))
            .collect();
        orders.push(order);
    }
    assert!(orders.windows(2).all(|w| w[0] == w[1]), "{orders:?}");
}

#[tokio::test]
async fn a_chain_of_100k_nodes_runs_without_stack_overflow() {
    let n = 100_000;
    let mut doc = GraphDoc::new("chain");
    doc.nodes
        .push(node("n0", "data.constant", json!({"value": 7})));
    for i in 1..n {
        doc.nodes
            .push(node(&format!("n{i}"), "control.passthrough", json!({})));
        doc.edges.push(edge(
            &format!("n{}", i - 1),
            "value",
            &format!("n{i}"),
            "value",
        ));
    }
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "result"})));
    doc.edges
        .push(edge(&format!("n{}", n - 1), "value", "out", "value"));
    let executor = Executor::new(builtin());
    let valid = validate(&doc, executor.catalog().as_ref()).unwrap();
    let report = executor
        .run(
            Arc::new(valid),
            ValueMap::new(),
            RunOptions::default(),
            Arc::new(NullSink),
        )
        .await;
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.outputs["result"], Value::Integer(7));
}

#[tokio::test]
async fn for_each_runs_a_subgraph_per_item_in_order() {
    let mut inner = GraphDoc::new("double");
    inner.nodes.push(node(
        "item",
        "graph.input",
        json!({"name": "item", "type": "json"}),
    ));
    inner.nodes.push(node(
        "fmt",
        "text.template",
        json!({"template": "<{{ item }}>"}),
    ));
    inner
        .nodes
        .push(node("result", "graph.output", json!({"name": "result"})));
    inner.edges.push(edge("item", "value", "fmt", "item"));
    inner.edges.push(edge("fmt", "text", "result", "value"));
    let mut doc = GraphDoc::new("outer");
    doc.nodes.push(node(
        "items",
        "data.constant",
        json!({"value": ["a", "b", "c"], "type": "list<json>"}),
    ));
    doc.nodes.push(node(
        "each",
        "control.for_each",
        json!({"graph": serde_json::to_value(&inner).unwrap(), "concurrency": 2}),
    ));
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "all"})));
    doc.edges.push(edge("items", "value", "each", "items"));
    doc.edges.push(edge("each", "results", "out", "value"));
    let (report, _) = run_doc(builtin(), &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(
        report.outputs["all"],
        Value::list(vec![
            Value::from("<a>"),
            Value::from("<b>"),
            Value::from("<c>")
        ])
    );
}

struct Decide(bool);

#[async_trait]
impl Approver for Decide {
    async fn decide_or_pause(
        &self,
        _run: &str,
        _node: &str,
        request: &ApprovalRequest,
    ) -> Option<ApprovalDecision> {
        Some(if self.0 {
            request.approve_as_is()
        } else {
            ApprovalDecision::Rejected {
                message: "no".to_owned(),
            }
        })
    }
}

#[tokio::test]
async fn safe_mode_asks_before_side_effects() {
    let workspace = tempfile::tempdir().unwrap();
    let mut doc = GraphDoc::new("safe");
    doc.settings.safe_mode = true;
    doc.nodes
        .push(node("text", "data.constant", json!({"value": "hi"})));
    doc.nodes
        .push(node("write", "file.write", json!({"path": "note.txt"})));
    doc.edges.push(edge("text", "value", "write", "content"));

    let denied = Executor::new(builtin())
        .with_workspace(workspace.path().to_path_buf())
        .with_approver(Arc::new(Decide(false)));
    let (report, events) = run_with(denied, &doc, ValueMap::new(), RunOptions::default()).await;
    assert_eq!(report.status, RunStatus::Failed);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, EventKind::NodeAwaitingApproval { node } if node == "write"))
    );
    assert!(!workspace.path().join("note.txt").exists());

    let approved = Executor::new(builtin())
        .with_workspace(workspace.path().to_path_buf())
        .with_approver(Arc::new(Decide(true)));
    let (report, _) = run_with(approved, &doc, ValueMap::new(), RunOptions::default()).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("note.txt")).unwrap(),
        "hi"
    );

    let nobody = Executor::new(builtin()).with_workspace(workspace.path().to_path_buf());
    let (report, _) = run_with(nobody, &doc, ValueMap::new(), RunOptions::default()).await;
    assert!(report.error.unwrap_or_default().contains("needs approval"));
}

#[tokio::test]
async fn values_are_coerced_along_wires() {
    let mut doc = GraphDoc::new("coerce");
    doc.nodes.push(node(
        "n",
        "graph.input",
        json!({"name": "n", "type": "integer"}),
    ));
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "n"})));
    doc.edges.push(edge("n", "value", "out", "value"));
    let inputs = ValueMap::from([("n".to_owned(), Value::from("12"))]);
    let (report, _) = run_doc(builtin(), &doc, inputs).await;
    assert_eq!(report.outputs["n"], Value::Integer(12));
}

/// A bypassed node is not run: each output takes the input of its name, else the first input
/// of its type, else null; nothing it would do (a call, a cost) happens.
#[tokio::test]
async fn a_bypassed_node_hands_on_its_inputs_without_running() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut doc = GraphDoc::new("bypassed");
    doc.nodes
        .push(node("five", "data.constant", json!({"value": 5})));
    doc.nodes
        .push(node("word", "data.constant", json!({"value": "hi"})));
    let mut costly = node("costly", "test.costly", json!({"cost": 1.0}));
    costly.bypass = true;
    doc.nodes.push(costly);
    let mut render = node("render", "text.template", json!({"template": "<{{ a }}>"}));
    render.bypass = true;
    doc.nodes.push(render);
    let mut flaky = node("flaky", "test.flaky", json!({"fail_times": 5}));
    flaky.bypass = true;
    doc.nodes.push(flaky);
    for (id, name) in [("n", "n"), ("t", "t"), ("f", "f")] {
        doc.nodes
            .push(node(id, "graph.output", json!({"name": name})));
    }
    for (from, out, to, input) in [
        ("five", "value", "costly", "value"),
        ("word", "value", "render", "a"),
        ("costly", "value", "n", "value"),
        ("render", "text", "t", "value"),
        ("flaky", "value", "f", "value"),
    ] {
        doc.edges.push(edge(from, out, to, input));
    }
    let registry = registry_with_test_blocks(Arc::clone(&calls));
    let (report, events) = run_doc(registry, &doc, ValueMap::new()).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.outputs["n"], Value::Integer(5), "by name");
    assert_eq!(
        report.outputs["t"],
        Value::from("hi"),
        "by type, not rendered"
    );
    assert_eq!(report.outputs["f"], Value::Null, "no input fits");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the flaky block never ran");
    assert!(
        report.usage.cost_usd.abs() < f64::EPSILON,
        "{:?}",
        report.usage
    );
    assert!(events.iter().any(|e| matches!(
        e,
        EventKind::NodeFinished { node, outputs, .. }
            if node == "render" && outputs.get("text") == Some(&Value::from("hi"))
    )));
}
