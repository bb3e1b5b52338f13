//! A run resumed after an approval is the same run: its usage, duration, cost budget and node
//! rows include what it did before it paused, in its report, in the run log and in the live
//! view (the events' reducer), and nothing is billed twice.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_core::{
    ApprovalRequest, Block, BlockError, BlockMeta, Config, ConfigError, ConfigReader, EdgeDoc,
    GraphDoc, NodeDoc, NodeImpl, PortSpec, Ports, RunCtx, Usage, Value, ValueMap, ValueType,
    async_trait, validate,
};
use agentloom_engine::{
    CollectSink, DurableApprover, EventSink, Executor, FanoutSink, NodeStatus, RunOptions,
    RunReport, RunState, RunStatus, RunStore,
};
use serde_json::json;

/// The node ids that ran a `test.spend` or `test.agent` node, in order.
type Ran = Arc<Mutex<Vec<String>>>;

/// Reports tokens and cost (like an LLM call), takes `sleep_ms`, and passes `value` on. With
/// `reserve`, sets its cost aside first, as a provider does before a request.
struct Spend(BlockMeta, Ran);
struct SpendNode {
    usage: Usage,
    sleep_ms: u64,
    reserve: bool,
    ports: Ports,
    ran: Ran,
}

impl Block for Spend {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let reader = ConfigReader(config);
        Ok(Arc::new(SpendNode {
            usage: Usage {
                input_tokens: reader.u64_or("input_tokens", 0)?,
                output_tokens: reader.u64_or("output_tokens", 0)?,
                cost_usd: reader.f64("cost")?.unwrap_or(0.0),
            },
            sleep_ms: reader.u64_or("sleep_ms", 0)?,
            reserve: reader.bool_or("reserve", false)?,
            ports: Ports::new(
                vec![PortSpec::new("value", ValueType::Any)],
                vec![PortSpec::new("value", ValueType::Any)],
            ),
            ran: self.1.clone(),
        }))
    }
}

#[async_trait]
impl NodeImpl for SpendNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }
    async fn run(&self, inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        self.ran.lock().unwrap().push(ctx.node_id().to_owned());
        if self.reserve {
            ctx.reserve_cost(self.usage.cost_usd)?;
        }
        tokio::time::sleep(Duration::from_millis(self.sleep_ms)).await;
        if self.reserve {
            ctx.settle_cost(self.usage.cost_usd, self.usage);
        } else {
            ctx.report_usage(self.usage);
        }
        Ok(ValueMap::from([(
            "value".to_owned(),
            inputs.get("value").cloned().unwrap_or(Value::Null),
        )]))
    }
}

/// An agent in miniature: spends, calls its tool `lookup` (only before it asks) and its tool
/// `check` (every time it runs), then asks a person with a checkpoint; resumed, it goes on
/// from the checkpoint with the decision.
struct Agent(BlockMeta, Ran);
struct AgentNode(Ports, Ran);

/// What `test.agent` spends each time it runs.
const AGENT_USAGE: Usage = Usage {
    input_tokens: 10,
    output_tokens: 4,
    cost_usd: 0.03,
};

impl Block for Agent {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(AgentNode(
            Ports::new(
                vec![
                    PortSpec::new("tools", ValueType::list_of(ValueType::Tool))
                        .optional()
                        .many(),
                ],
                vec![PortSpec::new("answer", ValueType::Any)],
            ),
            self.1.clone(),
        )))
    }
}

#[async_trait]
impl NodeImpl for AgentNode {
    fn ports(&self) -> &Ports {
        &self.0
    }
    async fn run(&self, _inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        self.1.lock().unwrap().push(ctx.node_id().to_owned());
        let resumed = ctx.resume_checkpoint().is_some();
        ctx.report_usage(AGENT_USAGE);
        if !resumed {
            ctx.call_tool("lookup", Value::from_json(json!({"value": "q"})))
                .await?;
        }
        // Its `value` is wired: the call gets it from the wire.
        ctx.call_tool("check", Value::Null).await?;
        let request = ApprovalRequest::new("send", Value::from_json(json!({"to": "team"})))
            .with_checkpoint(Value::from_json(json!({"step": 2})));
        let decision = ctx.request_approval(request).await?;
        Ok(ValueMap::from([(
            "answer".to_owned(),
            Value::from(decision.is_approved()),
        )]))
    }
}

fn registry(ran: &Ran) -> Arc<Registry> {
    Arc::new(
        Registry::builtin()
            .with(Box::new(Spend(
                BlockMeta::new("test.spend", "Spend", "Test", "Reports usage."),
                ran.clone(),
            )))
            .with(Box::new(Agent(
                BlockMeta::new("test.agent", "Agent", "Test", "Calls tools, then asks."),
                ran.clone(),
            ))),
    )
}

fn node(id: &str, block: &str, config: serde_json::Value) -> NodeDoc {
    NodeDoc::new(id, block).with_config(config)
}

/// What `spend` spends before the pause.
const BEFORE: Usage = Usage {
    input_tokens: 5,
    output_tokens: 2,
    cost_usd: 0.02,
};
/// How long `spend` takes before the pause.
const BEFORE_MS: u64 = 400;

/// text → spend (tokens and cost, 400 ms) → write (a side effect: asks in safe mode) →
/// after (spends `after_cost`) → done; spend → seen.
fn spending_graph(after: serde_json::Value) -> GraphDoc {
    let mut doc = GraphDoc::new("resumed");
    doc.settings.safe_mode = true;
    doc.nodes
        .push(node("text", "data.constant", json!({"value": "draft"})));
    doc.nodes.push(node(
        "spend",
        "test.spend",
        json!({"input_tokens": BEFORE.input_tokens, "output_tokens": BEFORE.output_tokens,
               "cost": BEFORE.cost_usd, "sleep_ms": BEFORE_MS}),
    ));
    doc.nodes
        .push(node("write", "file.write", json!({"path": "note.txt"})));
    doc.nodes.push(node("after", "test.spend", after));
    doc.nodes
        .push(node("seen", "graph.output", json!({"name": "seen"})));
    doc.nodes
        .push(node("done", "graph.output", json!({"name": "done"})));
    for (from, from_port, to, to_port) in [
        ("text", "value", "spend", "value"),
        ("spend", "value", "write", "content"),
        ("spend", "value", "seen", "value"),
        ("write", "path", "after", "value"),
        ("after", "value", "done", "value"),
    ] {
        doc.edges.push(EdgeDoc::new(from, from_port, to, to_port));
    }
    doc
}

/// Runs `doc` recorded in `store` (approvals pause: nobody to ask); the report and the
/// state the run's events make (what the app shows live).
async fn run_recorded(
    registry: &Arc<Registry>,
    doc: &GraphDoc,
    store: &Arc<RunStore>,
    workspace: &Path,
    options: RunOptions,
) -> (RunReport, RunState) {
    let graph = validate(doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    let recorder = Arc::new(store.recorder(doc).unwrap());
    let live = Arc::new(CollectSink::default());
    let sink: Arc<dyn EventSink> = Arc::new(FanoutSink(vec![recorder.clone(), live.clone()]));
    let executor = Executor::new(registry.clone())
        .with_workspace(workspace.to_path_buf())
        .with_approver(Arc::new(DurableApprover::new(store.clone(), None)));
    let report = executor
        .run(Arc::new(graph), ValueMap::new(), options, sink)
        .await;
    recorder.finish().unwrap();
    let mut state = RunState::starting(doc);
    for event in live.events() {
        state.apply(&event.kind);
    }
    (report, state)
}

/// Approves the one request of paused run `run_id` as asked, and resumes it under its id.
async fn approve_and_resume(
    registry: &Arc<Registry>,
    doc: &GraphDoc,
    store: &Arc<RunStore>,
    workspace: &Path,
    run_id: &str,
) -> (RunReport, RunState) {
    let pending = store.pending_approvals(run_id).unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let decision = pending[0].request.approve_as_is();
    assert!(
        store
            .decide_approval(run_id, &pending[0].node, &decision)
            .unwrap()
    );
    let options = RunOptions {
        run_id: Some(run_id.to_owned()),
        seed: Some(Arc::new(store.resume_seed(run_id).unwrap())),
        ..RunOptions::default()
    };
    let resumed = run_recorded(registry, doc, store, workspace, options).await;
    store.clear_decided_approvals(run_id).unwrap();
    resumed
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn sum(a: Usage, b: Usage) -> Usage {
    let mut total = a;
    total += b;
    total
}

fn assert_usage(found: Usage, expected: Usage, what: &str) {
    assert_eq!(
        (found.input_tokens, found.output_tokens),
        (expected.input_tokens, expected.output_tokens),
        "{what}: {found:?}"
    );
    assert!(
        close(found.cost_usd, expected.cost_usd),
        "{what}: {found:?}, expected {expected:?}"
    );
}

#[tokio::test]
async fn a_resumed_run_keeps_the_usage_time_and_rows_of_what_it_did_before_the_pause() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let ran = Ran::default();
    let registry = registry(&ran);
    let after = Usage {
        input_tokens: 3,
        output_tokens: 1,
        cost_usd: 0.01,
    };
    let doc = spending_graph(json!({"input_tokens": 3, "output_tokens": 1, "cost": 0.01,
                                    "sleep_ms": 100}));

    let store = Arc::new(RunStore::open(&db).unwrap());
    let (paused, _) =
        run_recorded(&registry, &doc, &store, dir.path(), RunOptions::default()).await;
    assert_eq!(paused.status, RunStatus::Waiting, "{:?}", paused.error);
    assert_usage(paused.usage, BEFORE, "the paused run's usage");
    assert!(paused.duration_ms >= BEFORE_MS, "{}", paused.duration_ms);
    let paused_row = store.get_run(&paused.run_id).unwrap().unwrap();
    let spend_before = paused_row.node("spend").unwrap().clone();
    assert_eq!(spend_before.status, NodeStatus::Done);
    drop(store);

    // Later, another process decides and resumes it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let store = Arc::new(RunStore::open(&db).unwrap());
    let started = Instant::now();
    let (resumed, live) =
        approve_and_resume(&registry, &doc, &store, dir.path(), &paused.run_id).await;
    let resume_ms = u64::try_from(started.elapsed().as_millis()).unwrap();
    assert_eq!(resumed.status, RunStatus::Completed, "{:?}", resumed.error);
    assert_eq!(resumed.run_id, paused.run_id);
    assert_eq!(
        *ran.lock().unwrap(),
        ["spend", "after"],
        "a node that finished before the pause ran again"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "draft"
    );

    // The report: the usage before the pause and after it, each once; the time before the
    // pause and after it, not the time it waited.
    let whole = sum(BEFORE, after);
    assert_usage(resumed.usage, whole, "the resumed run's usage");
    assert!(
        resumed.duration_ms >= paused.duration_ms + 100,
        "{} ms after {} ms before the pause",
        resumed.duration_ms,
        paused.duration_ms
    );
    assert!(
        resumed.duration_ms <= paused.duration_ms + resume_ms + 1,
        "the wait counted: {} ms, {} before and {resume_ms} resuming",
        resumed.duration_ms,
        paused.duration_ms
    );
    let reported = |id: &str| resumed.nodes.iter().find(|n| n.id == id).unwrap();
    assert_eq!(reported("spend").status, NodeStatus::Done);
    assert_eq!(reported("spend").attempts, 1);
    assert!(reported("spend").duration_ms >= BEFORE_MS);
    assert_usage(reported("spend").usage, BEFORE, "spend in the report");
    assert_usage(reported("after").usage, after, "after in the report");

    // The run log: the same run, with the same totals, its rows from before the pause kept.
    let detail = store.get_run(&paused.run_id).unwrap().unwrap();
    assert_eq!(detail.run.status, RunStatus::Completed);
    assert_usage(detail.run.usage, whole, "the run's row");
    assert_eq!(detail.run.duration_ms, Some(resumed.duration_ms));
    assert_eq!(detail.run.started_at_ms, paused_row.run.started_at_ms);
    let listed = store.list_runs(10).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_usage(listed[0].usage, whole, "the listed run");
    assert_eq!(listed[0].duration_ms, Some(resumed.duration_ms));
    let spend = detail.node("spend").unwrap();
    assert_eq!(spend.status, NodeStatus::Done);
    assert_eq!(spend.attempts, 1);
    assert_usage(spend.usage, BEFORE, "spend's row");
    assert_eq!(spend.duration_ms, spend_before.duration_ms);
    assert_eq!(spend.started_at_ms, spend_before.started_at_ms);
    assert_eq!(spend.finished_at_ms, spend_before.finished_at_ms);
    assert_eq!(spend.inputs, spend_before.inputs, "its inputs were lost");
    assert_eq!(detail.node("text").unwrap().attempts, 1);
    assert_eq!(detail.node("write").unwrap().status, NodeStatus::Done);
    assert_usage(detail.node("after").unwrap().usage, after, "after's row");
    // What happened before the pause is still in its events, and no `seq` is taken twice.
    let events = store.events(&paused.run_id).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let named = |name: &str| events.iter().filter(|e| e.kind.name() == name).count();
    assert_eq!(named("run_started"), 2);
    assert_eq!(named("node_awaiting_approval"), 1);
    assert_eq!(named("node_usage"), 2, "usage reported again");

    // The live view (the events' reducer) says the same as the log.
    assert_eq!(live.status, Some(RunStatus::Completed));
    assert_usage(live.usage, whole, "the live view's total");
    assert_eq!(live.duration_ms, Some(resumed.duration_ms));
    let recorded = RunState::from(&detail);
    for id in ["text", "spend", "write", "after", "seen", "done"] {
        let (shown, kept) = (live.node(id).unwrap(), recorded.node(id).unwrap());
        assert_eq!(
            (shown.status, shown.attempts, shown.duration_ms, shown.usage),
            (kept.status, kept.attempts, kept.duration_ms, kept.usage),
            "{id}"
        );
    }
    assert!(live.reused.is_empty(), "{:?}", live.reused);
}

#[tokio::test]
async fn the_tools_an_agent_called_before_the_pause_keep_their_rows_and_its_spend() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RunStore::open(&dir.path().join("runs.sqlite3")).unwrap());
    let ran = Ran::default();
    let registry = registry(&ran);
    let lookup = Usage {
        input_tokens: 2,
        output_tokens: 2,
        cost_usd: 0.005,
    };
    let check = Usage {
        input_tokens: 1,
        output_tokens: 0,
        cost_usd: 0.001,
    };
    let mut doc = GraphDoc::new("agent");
    doc.settings.safe_mode = true;
    doc.nodes
        .push(node("key", "data.constant", json!({"value": "k"})));
    doc.nodes.push(node(
        "lookup",
        "test.spend",
        json!({"input_tokens": 2, "output_tokens": 2, "cost": 0.005}),
    ));
    doc.nodes.push(node(
        "check",
        "test.spend",
        json!({"input_tokens": 1, "cost": 0.001}),
    ));
    doc.nodes.push(node("agent", "test.agent", json!({})));
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "answer"})));
    for (from, from_port, to, to_port) in [
        ("key", "value", "check", "value"),
        ("lookup", "tool", "agent", "tools"),
        ("check", "tool", "agent", "tools"),
        ("agent", "answer", "out", "value"),
    ] {
        doc.edges.push(EdgeDoc::new(from, from_port, to, to_port));
    }

    let (paused, _) =
        run_recorded(&registry, &doc, &store, dir.path(), RunOptions::default()).await;
    assert_eq!(paused.status, RunStatus::Waiting, "{:?}", paused.error);
    let spent_before = sum(sum(AGENT_USAGE, lookup), check);
    assert_usage(paused.usage, spent_before, "the paused run");

    let (resumed, live) =
        approve_and_resume(&registry, &doc, &store, dir.path(), &paused.run_id).await;
    assert_eq!(resumed.status, RunStatus::Completed, "{:?}", resumed.error);
    assert_eq!(resumed.outputs["answer"], Value::from(true));
    assert_eq!(
        *ran.lock().unwrap(),
        ["agent", "lookup", "check", "agent", "check"]
    );
    // The agent ran twice, `check` was called twice, `lookup` once: each spend once.
    let whole = sum(sum(spent_before, AGENT_USAGE), check);
    assert_usage(resumed.usage, whole, "the resumed run");

    let detail = store.get_run(&paused.run_id).unwrap().unwrap();
    assert_usage(detail.run.usage, whole, "the run's row");
    // Called before the pause only: its row stays as it was, not pending.
    let lookup_row = detail.node("lookup").unwrap();
    assert_eq!(lookup_row.status, NodeStatus::Done);
    assert_eq!(lookup_row.attempts, 1);
    assert_usage(lookup_row.usage, lookup, "lookup's row");
    assert!(lookup_row.started_at_ms.is_some() && lookup_row.finished_at_ms.is_some());
    assert_eq!(detail.node("check").unwrap().status, NodeStatus::Done);
    // The agent's row counts what it spent before it asked and after.
    let agent_row = detail.node("agent").unwrap();
    assert_eq!(agent_row.status, NodeStatus::Done);
    assert_usage(
        agent_row.usage,
        sum(AGENT_USAGE, AGENT_USAGE),
        "the agent's row",
    );
    let reported = |id: &str| resumed.nodes.iter().find(|n| n.id == id).unwrap();
    assert_eq!(reported("lookup").status, NodeStatus::Done);
    assert_usage(reported("lookup").usage, lookup, "lookup in the report");
    assert_usage(
        reported("agent").usage,
        sum(AGENT_USAGE, AGENT_USAGE),
        "the agent in the report",
    );

    // Live, as in the log.
    assert_usage(live.usage, whole, "the live view's total");
    let shown = live.node("lookup").unwrap();
    assert_eq!((shown.status, shown.attempts), (NodeStatus::Done, 1));
    assert_usage(shown.usage, lookup, "lookup live");
    assert_usage(
        live.node("agent").unwrap().usage,
        sum(AGENT_USAGE, AGENT_USAGE),
        "the agent live",
    );
}

#[tokio::test]
async fn the_cost_limit_counts_what_was_spent_before_the_pause() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RunStore::open(&dir.path().join("runs.sqlite3")).unwrap());
    let ran = Ran::default();
    let registry = registry(&ran);
    // 0.02 spent before the pause of a 0.025 budget: `after` may not set 0.01 aside.
    let mut doc = spending_graph(json!({"cost": 0.01, "reserve": true}));
    doc.settings.max_cost_usd = Some(0.025);
    let (paused, _) =
        run_recorded(&registry, &doc, &store, dir.path(), RunOptions::default()).await;
    assert_eq!(paused.status, RunStatus::Waiting, "{:?}", paused.error);

    let (resumed, _) =
        approve_and_resume(&registry, &doc, &store, dir.path(), &paused.run_id).await;
    assert_eq!(resumed.status, RunStatus::Failed, "{resumed:?}");
    let error = resumed.error.clone().unwrap_or_default();
    assert!(
        error.contains("cost limit reached") && error.contains("$0.0200"),
        "{error}"
    );
    assert_usage(resumed.usage, BEFORE, "nothing more was spent");
    let detail = store.get_run(&paused.run_id).unwrap().unwrap();
    assert_eq!(detail.run.status, RunStatus::Failed);
    assert_usage(detail.run.usage, BEFORE, "the run's row");

    // Spent after the fact (no reservation): the run stops as soon as it is over.
    let ran = Ran::default();
    let registry = self::registry(&ran);
    let mut doc = spending_graph(json!({"cost": 0.01}));
    doc.settings.max_cost_usd = Some(0.025);
    let (paused, _) =
        run_recorded(&registry, &doc, &store, dir.path(), RunOptions::default()).await;
    assert_eq!(paused.status, RunStatus::Waiting, "{:?}", paused.error);
    let (resumed, _) =
        approve_and_resume(&registry, &doc, &store, dir.path(), &paused.run_id).await;
    assert_eq!(resumed.status, RunStatus::Failed, "{resumed:?}");
    let error = resumed.error.unwrap_or_default();
    assert!(
        error.contains("cost limit reached: the run spent $0.0300"),
        "{error}"
    );
    assert!(!resumed.outputs.contains_key("done"));
}
