//! Running the open graph in-process and following its events, and showing past runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, GraphDoc, Usage, ValidGraph, Value, ValueMap,
};
use agentloom_engine::{
    Approver, EventKind, EventSink, Executor, FanoutSink, LogPolicy, NodeStatus, RunDetail,
    RunEvent, RunOptions, RunReport, RunSeed, RunStatus, RunStore,
};

use crate::runner::record::{RunContext, RunRecording};

pub use super::approval_panel::ApprovalPrompt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What the run task tells the UI.
pub enum RunMsg {
    Event(RunEvent),
    /// A node waits for a person's decision (safe mode, `human.approval`).
    Approval {
        node: String,
        request: ApprovalRequest,
        reply: oneshot::Sender<ApprovalDecision>,
    },
    /// The run is over and recorded (or recording failed with this message).
    Finished(Box<RunReport>, Option<String>),
}

/// Forwards events to the UI's channel and wakes the UI up.
struct UiSink {
    tx: mpsc::UnboundedSender<RunMsg>,
    ctx: egui::Context,
}

impl EventSink for UiSink {
    fn emit(&self, event: &RunEvent) {
        let _ = self.tx.send(RunMsg::Event(event.clone()));
        self.ctx.request_repaint();
    }
}

/// Asks the person at the canvas before side-effecting nodes run (safe mode).
struct UiApprover {
    tx: mpsc::UnboundedSender<RunMsg>,
    ctx: egui::Context,
}

#[agentloom_core::async_trait]
impl Approver for UiApprover {
    async fn decide(
        &self,
        run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> ApprovalDecision {
        self.decide_or_pause(run_id, node, request)
            .await
            .unwrap_or_else(|| ApprovalDecision::Rejected {
                message: "the run was stopped in the app".to_owned(),
            })
    }

    /// `None` when the app goes away before anyone decides: the stored request keeps the
    /// run waiting, to be decided from the history or with `agentloom approve`. (Stop
    /// answers with a rejection instead.)
    async fn decide_or_pause(
        &self,
        _run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Option<ApprovalDecision> {
        let (reply, answer) = oneshot::channel();
        let msg = RunMsg::Approval {
            node: node.to_owned(),
            request: request.clone(),
            reply,
        };
        self.tx.send(msg).ok()?;
        self.ctx.request_repaint();
        answer.await.ok()
    }
}

/// What is known of one node in the shown run.
#[derive(Clone, Debug, Default)]
pub struct NodeRun {
    /// The block kind, as the run reported it (empty until it did).
    pub block: String,
    pub status: Option<NodeStatus>,
    pub attempts: u32,
    pub inputs: ValueMap,
    pub outputs: ValueMap,
    /// Streamed output so far, by port.
    pub partial: BTreeMap<String, String>,
    pub error: Option<String>,
    pub duration_ms: Option<u64>,
    pub usage: Usage,
    pub skip_reason: Option<String>,
    /// The run was stopped while this node waited or ran.
    pub cancelled: bool,
}

impl NodeRun {
    /// What the node's badge says and in which colour (`None`: nothing to say yet).
    pub fn state(&self) -> Option<(&'static str, egui::Color32)> {
        if self.cancelled {
            return Some(("cancelled", super::theme::WARN));
        }
        let status = self.status.filter(|s| *s != NodeStatus::Pending)?;
        let text = match status {
            NodeStatus::AwaitingApproval => "waiting for approval",
            other => other.as_str(),
        };
        Some((text, super::theme::status_color(status)))
    }
}

/// The run shown on the canvas: live, or loaded from the history.
#[derive(Default)]
pub struct RunView {
    pub run_id: Option<String>,
    pub status: Option<RunStatus>,
    pub nodes: HashMap<String, NodeRun>,
    pub outputs: ValueMap,
    pub error: Option<String>,
    pub usage: Usage,
    pub duration_ms: Option<u64>,
    /// Nodes waiting for a decision: of the live run, or stored with a waiting run.
    pub approvals: Vec<ApprovalPrompt>,
    /// Nodes whose outputs were reused (an earlier run, pinned) rather than run.
    pub reused: std::collections::BTreeSet<String>,
    /// The graph files the next run calls, kept with it in the run log.
    pub graph_files: Option<Arc<agentloom_blocks::graph_call::GraphFiles>>,
    /// The open graph's file when its user has not trusted it: kept with the run.
    pub untrusted_file: Option<std::path::PathBuf>,
    /// Set while a run is going.
    live: Option<LiveRun>,
}

struct LiveRun {
    rx: mpsc::UnboundedReceiver<RunMsg>,
    cancel: CancellationToken,
}

impl RunView {
    pub fn is_running(&self) -> bool {
        self.live.is_some()
    }

    pub fn node(&self, id: &str) -> Option<&NodeRun> {
        self.nodes.get(id)
    }

    /// Starts `graph` on `runtime`; events arrive through [`RunView::drain`].
    pub fn start(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        executor: &Executor,
        graph: ValidGraph,
        inputs: ValueMap,
        store: Option<&Arc<RunStore>>,
        ctx: &egui::Context,
    ) -> Result<(), String> {
        self.start_seeded(runtime, executor, graph, inputs, store, ctx, None, None)
    }

    /// [`RunView::start`] under a given run id (resuming it) and from a seed.
    #[allow(clippy::too_many_arguments, reason = "the run's parts, passed on once")]
    pub fn start_seeded(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        executor: &Executor,
        graph: ValidGraph,
        inputs: ValueMap,
        store: Option<&Arc<RunStore>>,
        ctx: &egui::Context,
        run_id: Option<String>,
        seed: Option<RunSeed>,
    ) -> Result<(), String> {
        let (tx, rx) = mpsc::unbounded_channel();
        let context = RunContext {
            workspace: Some(executor.workspace().to_owned()),
            graph_files: self.graph_files.clone(),
            untrusted_file: self.untrusted_file.clone(),
            resumes: run_id.clone(),
        };
        let recording = match store {
            Some(store) => Some(
                RunRecording::start(store, &graph.doc, LogPolicy::default(), context)
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        let ui_sink: Arc<dyn EventSink> = Arc::new(UiSink {
            tx: tx.clone(),
            ctx: ctx.clone(),
        });
        let mut sinks = vec![ui_sink];
        if let Some(recording) = &recording {
            sinks.extend(recording.sinks());
        }
        let sink = Arc::new(FanoutSink(sinks));
        // Every request is stored before the person is asked: closing the app or a crash
        // leaves the run waiting, to be resumed from the history.
        let ask: Arc<dyn Approver> = Arc::new(UiApprover {
            tx: tx.clone(),
            ctx: ctx.clone(),
        });
        let mut executor = executor.clone();
        if let Some(approver) = crate::runner::approver(store, Some(ask)) {
            executor = executor.with_approver(approver);
        }
        let cancel = CancellationToken::new();
        let options = RunOptions {
            cancel: cancel.clone(),
            run_id,
            seed: seed.map(Arc::new),
            ..RunOptions::default()
        };
        let repaint = ctx.clone();
        *self = RunView {
            status: Some(RunStatus::Running),
            ..RunView::default()
        };
        for node in &graph.nodes {
            self.nodes.insert(
                node.id.clone(),
                NodeRun {
                    status: Some(NodeStatus::Pending),
                    ..NodeRun::default()
                },
            );
        }
        runtime.spawn(async move {
            let report = executor.run(Arc::new(graph), inputs, options, sink).await;
            // The workspace is recorded as the run starts.
            let record_error =
                recording.and_then(|r| r.finish(&report.run_id, None).err().map(|e| e.to_string()));
            let _ = tx.send(RunMsg::Finished(Box::new(report), record_error));
            repaint.request_repaint();
        });
        self.live = Some(LiveRun { rx, cancel });
        Ok(())
    }

    /// Stops the live run.
    pub fn stop(&mut self) {
        if let Some(live) = &self.live {
            live.cancel.cancel();
        }
        for prompt in self.approvals.drain(..) {
            prompt.cancel();
        }
    }

    /// Answers a pending approval of the live run: an approved node runs on, a rejected one
    /// fails (the engine reports it). Returns the prompt when it belongs to a stored,
    /// waiting run instead (deciding it resumes that run).
    pub fn answer(&mut self, node: &str, decision: ApprovalDecision) -> Option<ApprovalPrompt> {
        let pos = self.approvals.iter().position(|p| p.node == node)?;
        let prompt = self.approvals.remove(pos);
        if prompt.is_stored() {
            return Some(prompt);
        }
        let approved = decision.is_approved();
        if prompt.send(decision) && approved {
            self.entry(node).status = Some(NodeStatus::Running);
        }
        None
    }

    /// Applies every message that has arrived. Returns true when the run just finished
    /// (the history should be reloaded).
    pub fn drain(&mut self) -> bool {
        let mut finished = false;
        let mut msgs = Vec::new();
        if let Some(live) = &mut self.live {
            while let Ok(msg) = live.rx.try_recv() {
                msgs.push(msg);
            }
        }
        for msg in msgs {
            match msg {
                RunMsg::Event(event) => self.apply(&event.kind),
                RunMsg::Approval {
                    node,
                    request,
                    reply,
                } => self
                    .approvals
                    .push(ApprovalPrompt::live(node, request, reply)),
                RunMsg::Finished(report, record_error) => {
                    self.run_id = Some(report.run_id.clone());
                    self.status = Some(report.status);
                    self.mark_cancelled();
                    if self.error.is_none() {
                        self.error = report.error.clone().or(record_error);
                    }
                    self.live = None;
                    finished = true;
                }
            }
        }
        finished
    }

    fn apply(&mut self, kind: &EventKind) {
        match kind {
            EventKind::RunStarted { run_id, .. } => self.run_id = Some(run_id.clone()),
            EventKind::NodeQueued { node, block } => {
                let n = self.entry(node);
                n.status = Some(NodeStatus::Queued);
                block.clone_into(&mut n.block);
            }
            EventKind::NodeStarted {
                node,
                attempt,
                inputs,
            } => {
                let n = self.entry(node);
                n.status = Some(NodeStatus::Running);
                n.attempts = *attempt;
                n.inputs.clone_from(inputs);
            }
            EventKind::NodePartial { node, port, chunk } => {
                self.entry(node)
                    .partial
                    .entry(port.clone())
                    .or_default()
                    .push_str(chunk);
            }
            EventKind::NodeUsage { node, usage } => self.entry(node).usage += *usage,
            EventKind::NodeRetrying { node, error, .. } => {
                self.entry(node).error = Some(error.clone())
            }
            EventKind::NodeAwaitingApproval { node } => {
                self.entry(node).status = Some(NodeStatus::AwaitingApproval);
            }
            EventKind::NodeFinished {
                node,
                outputs,
                attempts,
                duration_ms,
                usage,
            } => {
                // A node reused from an earlier run or its pinned outputs did not run.
                if *attempts == 0 {
                    self.reused.insert(node.clone());
                }
                let n = self.entry(node);
                n.status = Some(NodeStatus::Done);
                n.outputs.clone_from(outputs);
                n.attempts = *attempts;
                n.duration_ms = Some(*duration_ms);
                n.usage = *usage;
                n.error = None;
                n.partial.clear();
            }
            EventKind::NodeFailed {
                node,
                error,
                attempts,
                duration_ms,
                usage,
                ..
            } => {
                let n = self.entry(node);
                n.status = Some(NodeStatus::Failed);
                n.error = Some(error.clone());
                n.attempts = *attempts;
                n.duration_ms = Some(*duration_ms);
                n.usage = *usage;
            }
            EventKind::NodeSkipped {
                node,
                reason,
                block,
            } => {
                let n = self.entry(node);
                block.clone_into(&mut n.block);
                n.status = Some(NodeStatus::Skipped);
                n.skip_reason = Some(reason.clone());
            }
            EventKind::RunFinished {
                status,
                outputs,
                error,
                usage,
                duration_ms,
            } => {
                self.status = Some(*status);
                self.mark_cancelled();
                self.outputs.clone_from(outputs);
                self.error.clone_from(error);
                self.usage = *usage;
                self.duration_ms = Some(*duration_ms);
            }
        }
    }

    /// After a stopped run, the nodes it left unfinished show as cancelled.
    fn mark_cancelled(&mut self) {
        if !matches!(
            self.status,
            Some(RunStatus::Cancelled | RunStatus::Interrupted)
        ) {
            return;
        }
        // A node the stop interrupted reports the block error of a cancellation.
        let interrupted = agentloom_core::BlockError::cancelled().message;
        for node in self.nodes.values_mut() {
            node.cancelled = match node.status {
                Some(NodeStatus::Queued | NodeStatus::Running | NodeStatus::AwaitingApproval) => {
                    true
                }
                Some(NodeStatus::Failed) => node.error.as_deref() == Some(interrupted.as_str()),
                _ => false,
            };
        }
    }

    fn entry(&mut self, node: &str) -> &mut NodeRun {
        self.nodes.entry(node.to_owned()).or_default()
    }

    /// Shows a recorded run.
    pub fn from_detail(detail: &RunDetail) -> RunView {
        let mut view = RunView {
            run_id: Some(detail.run.id.clone()),
            status: Some(detail.run.status),
            outputs: detail.outputs.clone(),
            error: detail.run.error.clone(),
            usage: detail.run.usage,
            duration_ms: detail.run.duration_ms,
            ..RunView::default()
        };
        for row in &detail.nodes {
            if row.status == NodeStatus::Done && row.attempts == 0 {
                view.reused.insert(row.node_id.clone());
            }
            view.nodes.insert(
                row.node_id.clone(),
                NodeRun {
                    block: row.block.clone(),
                    status: Some(row.status),
                    attempts: row.attempts,
                    inputs: row.inputs.clone(),
                    outputs: row.outputs.clone(),
                    partial: row.partial.clone(),
                    error: row.error.clone(),
                    duration_ms: row.duration_ms,
                    usage: row.usage,
                    skip_reason: row.skip_reason.clone(),
                    cancelled: false,
                },
            );
        }
        view.mark_cancelled();
        view
    }
}

/// The graph document recorded with a run, if it can be read.
pub fn recorded_graph(detail: &RunDetail) -> Option<GraphDoc> {
    detail.graph_doc().ok()
}

/// Parses what a person typed for a run input of type `ty`, as `--input` does.
pub fn parse_input(text: &str, ty: &agentloom_core::ValueType) -> Result<Value, String> {
    agentloom_core::coerce_given(Value::Text(text.to_owned()), ty).map_err(|e| e.to_string())
}
