//! Running the open graph in-process and following its events, and showing past runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloom_core::{ApprovalDecision, ApprovalRequest, GraphDoc, Value, ValueMap};
use agentloom_engine::{
    Approver, EventSink, NodeProgress, NodeStatus, RunDetail, RunEvent, RunOptions, RunReport,
    RunSeed, RunState, RunStatus, RunStore,
};

use agentloom_runner::{Launch, Log, Prepared, Workspace};

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

/// How a node's run state shows on its badge.
pub trait NodeBadge {
    /// What the node's badge says and in which colour (`None`: nothing to say yet).
    fn state(&self) -> Option<(&'static str, egui::Color32)>;
}

impl NodeBadge for NodeProgress {
    fn state(&self) -> Option<(&'static str, egui::Color32)> {
        if self.cancelled {
            return Some(("cancelled", super::theme::WARN));
        }
        let text = match self.status {
            NodeStatus::Pending => return None,
            NodeStatus::AwaitingApproval => "waiting for approval",
            NodeStatus::AtBreakpoint => "paused at breakpoint",
            other => other.as_str(),
        };
        Some((text, super::theme::status_color(self.status)))
    }
}

/// The run shown on the canvas: live, or loaded from the history. What its events say is
/// a [`RunState`] (the reducer the run log's writer shares), read through this view.
#[derive(Default)]
pub struct RunView {
    pub state: RunState,
    /// Nodes waiting for a decision: of the live run, or stored with a waiting run.
    pub approvals: Vec<ApprovalPrompt>,
    /// Set while a run is going.
    live: Option<LiveRun>,
    /// The recording the next run's outbound calls are answered from (History → Replay).
    pub replay: Option<Arc<agentloom_engine::Replay>>,
    /// The breakpoints the next run stops at, and who is asked there.
    pub debug: Option<Arc<agentloom_engine::RunDebug>>,
    /// Counts the live run's messages taken, so views read from the run log follow it.
    pub messages_taken: u64,
}

/// The view reads as its run state (`run.status`, `run.nodes`, …).
impl std::ops::Deref for RunView {
    type Target = RunState;

    fn deref(&self) -> &RunState {
        &self.state
    }
}

impl std::ops::DerefMut for RunView {
    fn deref_mut(&mut self) -> &mut RunState {
        &mut self.state
    }
}

struct LiveRun {
    rx: mpsc::UnboundedReceiver<RunMsg>,
    /// When this window started (or resumed) it, for the time shown while it goes.
    started: Instant,
    cancel: CancellationToken,
    pause: CancellationToken,
}

impl RunView {
    pub fn is_running(&self) -> bool {
        self.live.is_some()
    }

    /// How long the live run has been going in this window.
    pub fn live_for(&self) -> Option<Duration> {
        self.live.as_ref().map(|live| live.started.elapsed())
    }

    /// Whether the live run waits for a person's decision (nothing else moves meanwhile).
    pub fn is_waiting(&self) -> bool {
        self.is_running() && !self.approvals.is_empty()
    }

    /// Starts `prepared` on `runtime`, its file blocks in `workspace`; events arrive
    /// through [`RunView::drain`].
    pub fn start(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        prepared: Prepared,
        workspace: PathBuf,
        inputs: ValueMap,
        store: Option<&Arc<RunStore>>,
        ctx: &egui::Context,
    ) -> Result<(), String> {
        self.start_seeded(runtime, prepared, workspace, inputs, store, ctx, None, None)
    }

    /// [`RunView::start`] under a given run id (resuming it) and from a seed.
    #[allow(clippy::too_many_arguments, reason = "the run's parts, passed on once")]
    pub fn start_seeded(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        prepared: Prepared,
        workspace: PathBuf,
        inputs: ValueMap,
        store: Option<&Arc<RunStore>>,
        ctx: &egui::Context,
        run_id: Option<String>,
        seed: Option<RunSeed>,
    ) -> Result<(), String> {
        let (tx, rx) = mpsc::unbounded_channel();
        let ui_sink: Arc<dyn EventSink> = Arc::new(UiSink {
            tx: tx.clone(),
            ctx: ctx.clone(),
        });
        // Every request is stored before the person is asked: closing the app or a crash
        // leaves the run waiting, to be resumed from the history.
        let ask: Arc<dyn Approver> = Arc::new(UiApprover {
            tx: tx.clone(),
            ctx: ctx.clone(),
        });
        let cancel = CancellationToken::new();
        let pause = CancellationToken::new();
        let launch = Launch {
            options: RunOptions {
                cancel: cancel.clone(),
                pause: pause.clone(),
                run_id,
                seed: seed.map(Arc::new),
                replay: self.replay.take(),
                debug: self.debug.take(),
                ..RunOptions::default()
            },
            log: store.cloned().map(Log::new),
            sinks: vec![ui_sink],
            ask: Some(ask),
            // Kept as the run starts: `agentloom approve` resumes it in the same folder.
            ..Launch::new(inputs, Workspace::FolderRecordedAtStart(workspace))
        };
        let repaint = ctx.clone();
        *self = RunView {
            state: RunState::starting(&prepared.graph().doc),
            ..RunView::default()
        };
        runtime.spawn(async move {
            let launched = prepared.launch(launch).await;
            let _ = tx.send(RunMsg::Finished(
                Box::new(launched.report),
                launched.log_error,
            ));
            repaint.request_repaint();
        });
        self.live = Some(LiveRun {
            rx,
            started: Instant::now(),
            cancel,
            pause,
        });
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

    /// The app is going away: the live run stops, except that a node waiting for a
    /// decision keeps its stored request, so the run stays `waiting` (decided later from
    /// the history or with `agentloom approve`). Waits up to `limit` for the run log to
    /// record how the run ended.
    pub fn leave(&mut self, limit: Duration) {
        let Some(live) = &self.live else {
            return;
        };
        live.pause.cancel();
        // Nobody answers them now: dropping their replies leaves the requests undecided.
        self.approvals.clear();
        let deadline = Instant::now() + limit;
        while self.is_running() {
            if Instant::now() >= deadline {
                tracing::warn!(
                    "the run did not stop within {} ms of quitting; the run log may still list it as running",
                    limit.as_millis()
                );
                return;
            }
            if !self.drain() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.approvals.clear();
        if self.status == Some(RunStatus::Waiting)
            && let Some(run_id) = &self.run_id
        {
            tracing::info!(
                run_id,
                "the run waits for approval: decide it from the history or with `agentloom approve {run_id}`"
            );
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
            self.state.nodes.entry(node.to_owned()).or_default().status = NodeStatus::Running;
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
        self.messages_taken += msgs.len() as u64;
        for msg in msgs {
            match msg {
                RunMsg::Event(event) => self.state.apply(&event.kind),
                RunMsg::Approval {
                    node,
                    request,
                    reply,
                } => self
                    .approvals
                    .push(ApprovalPrompt::live(node, request, reply)),
                RunMsg::Finished(report, record_error) => {
                    let error = report.error.clone().or(record_error);
                    self.state
                        .apply_report(&report.run_id, report.status, error);
                    self.live = None;
                    finished = true;
                }
            }
        }
        finished
    }

    /// Shows a recorded run.
    pub fn from_detail(detail: &RunDetail) -> RunView {
        RunView {
            state: RunState::from(detail),
            ..RunView::default()
        }
    }
}

/// The graph document recorded with a run, if it can be read.
pub fn recorded_graph(detail: &RunDetail) -> Option<GraphDoc> {
    detail.graph_doc().ok()
}

/// Parses what a person typed for a run input of type `ty`, as `--input` does.
pub fn parse_input(text: &str, ty: &agentloom_core::ValueType) -> Result<Value, String> {
    agentloom_core::coerce_given(Value::text(text.to_owned()), ty).map_err(|e| e.to_string())
}
