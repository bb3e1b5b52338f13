//! Durable approvals and seeded runs: a run paused on an approval is stored as `waiting`,
//! resumes from the run log without re-running finished nodes, and a seed or pinned
//! outputs stand in for a node's work.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentloom_blocks::Registry;
use agentloom_core::{
    ApprovalDecision, Block, BlockError, BlockMeta, Config, ConfigError, EdgeDoc, GraphDoc,
    NodeDoc, NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait, validate,
};
use agentloom_engine::{
    Claim, DurableApprover, Executor, NodeStatus, RunOptions, RunReport, RunStatus, RunStore,
};
use serde_json::json;

/// Passes its input on and counts how often it ran (a stand-in for an expensive LLM call).
struct Counter(BlockMeta, Arc<AtomicU32>);
struct CounterNode(Ports, Arc<AtomicU32>);

impl Block for Counter {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(CounterNode(
            Ports::new(
                vec![PortSpec::new("value", ValueType::Any)],
                vec![PortSpec::new("value", ValueType::Any)],
            ),
            self.1.clone(),
        )))
    }
}

#[async_trait]
impl NodeImpl for CounterNode {
    fn ports(&self) -> &Ports {
        &self.0
    }
    async fn run(&self, inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        self.1.fetch_add(1, Ordering::SeqCst);
        Ok(inputs)
    }
}

fn registry(calls: &Arc<AtomicU32>) -> Arc<Registry> {
    Arc::new(Registry::builtin().with(Box::new(Counter(
        BlockMeta::new("test.count", "Count", "Test", "Counts its runs."),
        calls.clone(),
    ))))
}

fn node(id: &str, block: &str, config: serde_json::Value) -> NodeDoc {
    NodeDoc::new(id, block).with_config(config)
}

/// text → count → write (a side effect, asked in safe mode) ; count → out
fn writing_graph() -> GraphDoc {
    let mut doc = GraphDoc::new("durable");
    doc.settings.safe_mode = true;
    doc.nodes
        .push(node("text", "data.constant", json!({"value": "draft"})));
    doc.nodes.push(node("count", "test.count", json!({})));
    doc.nodes
        .push(node("write", "file.write", json!({"path": "note.txt"})));
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "seen"})));
    doc.edges
        .push(EdgeDoc::new("text", "value", "count", "value"));
    doc.edges
        .push(EdgeDoc::new("count", "value", "write", "content"));
    doc.edges
        .push(EdgeDoc::new("count", "value", "out", "value"));
    doc
}

/// Runs `doc` recorded in `store`, pausing at approvals (no one to ask).
async fn run_recorded(
    registry: &Arc<Registry>,
    doc: &GraphDoc,
    store: &Arc<RunStore>,
    workspace: &Path,
    options: RunOptions,
) -> RunReport {
    let graph = validate(doc, registry.as_ref()).unwrap();
    let recorder = Arc::new(store.recorder(doc).unwrap());
    let executor = Executor::new(registry.clone())
        .with_workspace(workspace.to_path_buf())
        .with_approver(Arc::new(DurableApprover::new(store.clone(), None)));
    let report = executor
        .run(Arc::new(graph), ValueMap::new(), options, recorder.clone())
        .await;
    recorder.finish().unwrap();
    report
}

#[tokio::test]
async fn a_paused_run_resumes_from_the_log_with_edited_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let calls = Arc::new(AtomicU32::new(0));
    let registry = registry(&calls);
    let doc = writing_graph();

    let store = Arc::new(RunStore::open(&db).unwrap());
    let paused = run_recorded(&registry, &doc, &store, dir.path(), RunOptions::default()).await;
    assert_eq!(paused.status, RunStatus::Waiting, "{:?}", paused.error);
    assert_eq!(
        paused.error.as_deref(),
        Some("waiting for approval of `write`")
    );
    // The branch that needs no approval ran to the end.
    assert_eq!(paused.outputs["seen"], Value::from("draft"));
    assert!(!dir.path().join("note.txt").exists());
    drop(store);

    // Another process, later: the request is in the log.
    let store = Arc::new(RunStore::open(&db).unwrap());
    let detail = store.get_run(&paused.run_id).unwrap().unwrap();
    assert_eq!(detail.run.status, RunStatus::Waiting);
    assert_eq!(
        detail.node("write").unwrap().status,
        NodeStatus::AwaitingApproval
    );
    let pending = store.pending_approvals(&paused.run_id).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].node, "write");
    assert_eq!(
        pending[0].request.arguments,
        Value::from_json(json!({"content": "draft"}))
    );
    assert!(
        store
            .decide_approval(
                &paused.run_id,
                "write",
                &ApprovalDecision::Approved {
                    arguments: Value::from_json(json!({"content": "edited"})),
                },
            )
            .unwrap()
    );
    // Decided once: a second decision reports the first and changes nothing.
    let again = store
        .claim_decision(
            &paused.run_id,
            "write",
            &ApprovalDecision::Rejected {
                message: "too late".into(),
            },
        )
        .unwrap();
    let Claim::AlreadyDecided(earlier) = again else {
        panic!("decided twice: {again:?}");
    };
    assert!(earlier.approved);
    assert_eq!(earlier.decided_by_pid, Some(std::process::id()));
    assert!(earlier.decided_at_ms.is_some());

    let seed = store.resume_seed(&paused.run_id).unwrap();
    let options = RunOptions {
        run_id: Some(paused.run_id.clone()),
        seed: Some(Arc::new(seed)),
        ..RunOptions::default()
    };
    let resumed = run_recorded(&registry, &doc, &store, dir.path(), options).await;
    store.clear_decided_approvals(&paused.run_id).unwrap();
    assert_eq!(resumed.status, RunStatus::Completed, "{:?}", resumed.error);
    assert_eq!(resumed.run_id, paused.run_id);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the finished node ran again"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "edited"
    );
    assert_eq!(resumed.outputs["seen"], Value::from("draft"));
    let detail = store.get_run(&paused.run_id).unwrap().unwrap();
    assert_eq!(detail.run.status, RunStatus::Completed);
    assert_eq!(detail.node("count").unwrap().status, NodeStatus::Done);
    // It ran once, before the pause: the resumed run keeps its row.
    assert_eq!(
        detail.node("count").unwrap().attempts,
        1,
        "ran again or lost its row"
    );
    assert_eq!(detail.node("write").unwrap().attempts, 1);
    assert!(store.pending_approvals(&paused.run_id).unwrap().is_empty());
}

#[tokio::test]
async fn a_rejection_fails_the_resumed_node_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RunStore::open(&dir.path().join("runs.sqlite3")).unwrap());
    let calls = Arc::new(AtomicU32::new(0));
    let registry = registry(&calls);
    let mut doc = GraphDoc::new("gate");
    doc.nodes
        .push(node("text", "data.constant", json!({"value": "send it"})));
    doc.nodes.push(node(
        "gate",
        "human.approval",
        json!({"action": "Send the mail?"}),
    ));
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "sent"})));
    doc.edges
        .push(EdgeDoc::new("text", "value", "gate", "value"));
    doc.edges
        .push(EdgeDoc::new("gate", "value", "out", "value"));

    // No safe mode: a human.approval block asks all the same.
    let paused = run_recorded(&registry, &doc, &store, dir.path(), RunOptions::default()).await;
    assert_eq!(paused.status, RunStatus::Waiting, "{:?}", paused.error);
    let pending = store.pending_approvals(&paused.run_id).unwrap();
    assert_eq!(pending[0].request.action, "Send the mail?");
    store
        .decide_approval(
            &paused.run_id,
            "gate",
            &ApprovalDecision::Rejected {
                message: "not to this list".into(),
            },
        )
        .unwrap();
    let options = RunOptions {
        run_id: Some(paused.run_id.clone()),
        seed: Some(Arc::new(store.resume_seed(&paused.run_id).unwrap())),
        ..RunOptions::default()
    };
    let resumed = run_recorded(&registry, &doc, &store, dir.path(), options).await;
    assert_eq!(resumed.status, RunStatus::Failed);
    assert_eq!(
        resumed.error.as_deref(),
        Some("node `gate` failed: rejected: not to this list")
    );
    assert!(!resumed.outputs.contains_key("sent"));
}

#[tokio::test]
async fn seeded_and_pinned_nodes_do_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RunStore::open(&dir.path().join("runs.sqlite3")).unwrap());
    let calls = Arc::new(AtomicU32::new(0));
    let registry = registry(&calls);
    let mut doc = writing_graph();
    doc.settings.safe_mode = false;
    let first = run_recorded(&registry, &doc, &store, dir.path(), RunOptions::default()).await;
    assert_eq!(first.status, RunStatus::Completed, "{:?}", first.error);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Run from `write`: everything upstream comes from the first run.
    let rerun: BTreeSet<String> = ["write".to_owned()].into();
    let seed = store.reuse_seed(&first.run_id, &rerun).unwrap();
    assert!(seed.outputs.contains_key("count") && !seed.outputs.contains_key("write"));
    std::fs::remove_file(dir.path().join("note.txt")).unwrap();
    let options = RunOptions {
        seed: Some(Arc::new(seed)),
        ..RunOptions::default()
    };
    let second = run_recorded(&registry, &doc, &store, dir.path(), options).await;
    assert_eq!(second.status, RunStatus::Completed, "{:?}", second.error);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "an upstream node ran again"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "draft"
    );

    // Pinned outputs in the graph replace the node's work, even with its input changed.
    let count = doc.nodes.iter_mut().find(|n| n.id == "count").unwrap();
    count.pinned = Some(ValueMap::from([(
        "value".to_owned(),
        Value::from("pinned"),
    )]));
    let third = run_recorded(&registry, &doc, &store, dir.path(), RunOptions::default()).await;
    assert_eq!(third.status, RunStatus::Completed, "{:?}", third.error);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "a pinned node ran");
    assert_eq!(third.outputs["seen"], Value::from("pinned"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "pinned"
    );
}

/// Asks before a tool call with a checkpoint (as an agent does), and reports what it got.
struct AsksWithCheckpoint(BlockMeta);
struct AsksWithCheckpointNode(Ports);

impl Block for AsksWithCheckpoint {
    fn meta(&self) -> &BlockMeta {
        &self.0
    }
    fn instantiate(
        &self,
        _config: &Config,
        _ctx: &agentloom_core::ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        Ok(Arc::new(AsksWithCheckpointNode(Ports::new(
            vec![],
            vec![PortSpec::new("seen", ValueType::Any)],
        ))))
    }
}

#[async_trait]
impl NodeImpl for AsksWithCheckpointNode {
    fn ports(&self) -> &Ports {
        &self.0
    }
    async fn run(&self, _inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let resumed_from = ctx.resume_checkpoint().unwrap_or(Value::Null);
        let request = agentloom_core::ApprovalRequest::new(
            "write_file",
            Value::from_json(json!({"path": "a.txt"})),
        )
        .with_checkpoint(Value::from_json(json!({"step": 3})));
        // A pause comes back as an error: the node stops here and runs again on resume.
        let decision = ctx.request_approval(request).await?;
        let seen = json!({"checkpoint": resumed_from.to_json(), "decision": serde_json::to_value(&decision).unwrap()});
        Ok(ValueMap::from([(
            "seen".to_owned(),
            Value::from_json(seen),
        )]))
    }
}

#[tokio::test]
async fn a_node_asking_with_a_checkpoint_gets_it_back_with_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RunStore::open(&dir.path().join("runs.sqlite3")).unwrap());
    let registry = Arc::new(Registry::builtin().with(Box::new(AsksWithCheckpoint(
        BlockMeta::new("test.asks", "Asks", "Test", "Asks with a checkpoint."),
    ))));
    let mut doc = GraphDoc::new("tool");
    doc.settings.safe_mode = true;
    doc.nodes.push(node("agent", "test.asks", json!({})));
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "seen"})));
    doc.edges
        .push(EdgeDoc::new("agent", "seen", "out", "value"));
    let paused = run_recorded(&registry, &doc, &store, dir.path(), RunOptions::default()).await;
    assert_eq!(paused.status, RunStatus::Waiting, "{:?}", paused.error);
    let pending = store.pending_approvals(&paused.run_id).unwrap();
    assert_eq!(
        pending[0].request.checkpoint,
        Some(Value::from_json(json!({"step": 3})))
    );
    store
        .decide_approval(
            &paused.run_id,
            "agent",
            &ApprovalDecision::Approved {
                arguments: Value::from_json(json!({"path": "b.txt"})),
            },
        )
        .unwrap();
    let options = RunOptions {
        run_id: Some(paused.run_id.clone()),
        seed: Some(Arc::new(store.resume_seed(&paused.run_id).unwrap())),
        ..RunOptions::default()
    };
    let resumed = run_recorded(&registry, &doc, &store, dir.path(), options).await;
    assert_eq!(resumed.status, RunStatus::Completed, "{:?}", resumed.error);
    assert_eq!(
        resumed.outputs["seen"].to_json(),
        json!({"checkpoint": {"step": 3}, "decision": {"decision": "approved", "arguments": {"path": "b.txt"}}})
    );
}

/// Someone asked who never answers (a person at the app who quits instead).
struct NeverAnswers;

#[async_trait]
impl agentloom_engine::Approver for NeverAnswers {
    async fn decide_or_pause(
        &self,
        _run_id: &str,
        _node: &str,
        _request: &agentloom_core::ApprovalRequest,
    ) -> Option<ApprovalDecision> {
        std::future::pending().await
    }
}

/// Approval of the one request of run `run_id`, as asked.
fn as_asked(store: &RunStore, run_id: &str) -> ApprovalDecision {
    store.pending_approvals(run_id).unwrap()[0]
        .request
        .approve_as_is()
}

/// `writing_graph` run with someone to ask, stopped by `stop` once the run log lists it as
/// waiting; what the run ended as, its run log (in `dir`) and its id.
async fn asked_then_stopped(
    dir: &tempfile::TempDir,
    stop: impl FnOnce(&RunOptions),
) -> (RunStatus, Arc<RunStore>, String) {
    let store = Arc::new(RunStore::open(&dir.path().join("runs.sqlite3")).unwrap());
    let registry = registry(&Arc::new(AtomicU32::new(0)));
    let doc = writing_graph();
    let graph = validate(&doc, registry.as_ref()).unwrap();
    let recorder = Arc::new(store.recorder(&doc).unwrap());
    let executor = Executor::new(registry.clone())
        .with_workspace(dir.path().to_path_buf())
        .with_approver(Arc::new(DurableApprover::new(
            store.clone(),
            Some(Arc::new(NeverAnswers)),
        )));
    let options = RunOptions::default();
    let run = tokio::spawn({
        let options = options.clone();
        let recorder = recorder.clone();
        async move {
            executor
                .run(Arc::new(graph), ValueMap::new(), options, recorder)
                .await
        }
    });
    // While the person is asked, the run log says waiting, and the decision is theirs.
    let run_id = loop {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        if let Some(run) = store.list_runs(1).unwrap().pop()
            && run.status == RunStatus::Waiting
        {
            break run.id;
        }
    };
    let claim = store
        .claim_decision(&run_id, "write", &as_asked(&store, &run_id))
        .unwrap();
    assert!(matches!(claim, Claim::AskedElsewhere { .. }), "{claim:?}");
    stop(&options);
    let report = run.await.unwrap();
    recorder.finish().unwrap();
    assert_eq!(
        store.get_run(&run_id).unwrap().unwrap().run.status,
        report.status
    );
    (report.status, store, run_id)
}

#[tokio::test]
async fn a_run_paused_while_a_person_is_asked_stays_waiting_and_can_be_decided_later() {
    let dir = tempfile::tempdir().unwrap();
    let (status, store, run_id) = asked_then_stopped(&dir, |options| options.pause.cancel()).await;
    assert_eq!(status, RunStatus::Waiting);
    let claim = store
        .claim_decision(&run_id, "write", &as_asked(&store, &run_id))
        .unwrap();
    assert_eq!(claim, Claim::Won);
}

#[tokio::test]
async fn a_run_cancelled_while_a_person_is_asked_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let (status, ..) = asked_then_stopped(&dir, |options| options.cancel.cancel()).await;
    assert_eq!(status, RunStatus::Cancelled);
}
