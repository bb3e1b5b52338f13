//! What the scheduler and every running node of one run share: its identity, its event
//! stream (the one way out, redacted), its budget and slots, its seed, and which nodes wait
//! for a person.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agentloom_core::{ApprovalDecision, BlockError, Usage, ValidGraph, Value, ValueMap};
use tokio_util::sync::CancellationToken;

use super::Executor;
use crate::breakpoints::RunDebug;
use crate::events::{EventKind, EventSink, RunEvent};
use crate::limits::RunLimits;
use crate::redact::Redactor;
use crate::run_state::NodeProgress;

/// State shared by the scheduler and every running node.
pub(super) struct RunShared {
    pub(super) run_id: String,
    pub(super) executor: Executor,
    pub(super) inputs: ValueMap,
    pub(super) outputs: Mutex<ValueMap>,
    pub(super) sink: Arc<dyn EventSink>,
    /// What the sink said when the run started (see [`EventSink::wants_events`]): when
    /// `false`, no event is built.
    pub(super) events_wanted: bool,
    /// When this segment of the run started (a resumed run has earlier ones).
    pub(super) started: Instant,
    /// Wall milliseconds from the run's start to `started`.
    pub(super) at_before_ms: u64,
    /// How long the run went on before `started`.
    pub(super) duration_before_ms: u64,
    pub(super) seq: AtomicU64,
    /// Spent by the whole run (its earlier segments included).
    pub(super) usage: Mutex<Usage>,
    pub(super) cancel: CancellationToken,
    /// Stops the run leaving its approvals pending (see [`RunOptions::pause`]).
    pub(super) pause: CancellationToken,
    /// Set when a run limit stopped the run.
    pub(super) limit_error: Mutex<Option<String>>,
    /// Shared with sub-runs: node slots, steps and the cost budget.
    pub(super) limits: Arc<RunLimits>,
    /// Shared with sub-runs: every secret resolved so far.
    pub(super) redactor: Arc<Redactor>,
    pub(super) safe_mode: bool,
    /// Decisions made while the run was paused, each used by the node's next request.
    pub(super) decisions: Mutex<BTreeMap<String, ApprovalDecision>>,
    pub(super) checkpoints: BTreeMap<String, Value>,
    /// Seeded outputs of the nodes of sub-runs, by nested id (`call/render`).
    pub(super) nested_seed: BTreeMap<String, ValueMap>,
    /// What earlier segments of this run recorded of its nodes (a resumed run), by id;
    /// sub-run nodes by nested id.
    pub(super) recorded: BTreeMap<String, NodeProgress>,
    /// Nodes paused on an approval nobody could give yet.
    pub(super) waiting: Mutex<BTreeSet<String>>,
    pub(super) graph: Arc<ValidGraph>,
    /// The wired input values of nodes offered as tools, by node index: a call adds its
    /// arguments to these.
    pub(super) tool_inputs: Mutex<HashMap<usize, ValueMap>>,
    /// Slots for CPU-bound work on the blocking pool (see [`RunCtx::run_cpu`]).
    pub(super) cpu_slots: Arc<tokio::sync::Semaphore>,
    /// Slots for outbound requests, per host (see [`RunCtx::request_slot`]).
    pub(super) request_slots: Arc<RequestSlots>,
    /// The recording this run's outbound calls are answered from, if it replays one.
    pub(super) replay: Option<Arc<crate::Replay>>,
    /// This run's nodes' prefix in the top run (`call/` in a sub-run), for the replay.
    pub(super) path_prefix: String,
    pub(super) side_effects: Option<Arc<dyn crate::durable::SideEffectGate>>,
    /// The run's breakpoints, shared with its sub-runs.
    pub(super) debug: Option<Arc<RunDebug>>,
    /// Nodes paused at a breakpoint nobody could decide on yet (also in `waiting`).
    pub(super) at_breakpoint: Mutex<BTreeSet<String>>,
}

/// One semaphore per host a run sends requests to.
pub(super) struct RequestSlots {
    per_host: usize,
    hosts: Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

impl RequestSlots {
    pub(super) fn new(per_host: usize) -> Self {
        Self {
            per_host: per_host.max(1),
            hosts: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The semaphore of `url`'s scheme, host and port.
    pub(super) fn for_url(&self, url: &str) -> Arc<tokio::sync::Semaphore> {
        let key = url::Url::parse(url).map_or_else(
            |_| url.to_owned(),
            |u| {
                format!(
                    "{}://{}:{}",
                    u.scheme(),
                    u.host_str().unwrap_or_default(),
                    u.port_or_known_default().unwrap_or_default()
                )
            },
        );
        let mut hosts = self
            .hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            hosts
                .entry(key)
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.per_host))),
        )
    }
}

impl RunShared {
    /// The one way out of the run for events: secrets are redacted here.
    pub(super) fn emit(&self, kind: EventKind) {
        self.emit_with(|| kind);
    }

    /// [`RunShared::emit`], the event built only when the sink wants events.
    pub(super) fn emit_with(&self, kind: impl FnOnce() -> EventKind) {
        self.emit_at(None, kind);
    }

    /// [`RunShared::emit_with`] for an event that happened at `at`, a clock read taken
    /// just before it with no event between (`None`: now).
    pub(super) fn emit_at(&self, at: Option<Instant>, kind: impl FnOnce() -> EventKind) {
        if !self.events_wanted {
            return;
        }
        let mut kind = kind();
        self.redactor.event(&mut kind);
        self.send(at, kind);
    }

    /// The `NodeStarted` of `node`'s attempt `attempt` (at `at`, as [`RunShared::emit_at`]),
    /// handing back `inputs`. Inputs that carry no secret go in the event as they are and
    /// come back from it; only inputs redaction changes are copied (the copy redacted).
    pub(super) fn emit_started(
        &self,
        at: Option<Instant>,
        node: &str,
        attempt: u32,
        inputs: ValueMap,
    ) -> ValueMap {
        if !self.events_wanted {
            return inputs;
        }
        if self.redactor.carries(&inputs) {
            self.emit_at(at, || EventKind::NodeStarted {
                node: node.to_owned(),
                attempt,
                inputs: inputs.clone(),
            });
            return inputs;
        }
        // Redaction would change nothing of it (its inputs are all it redacts).
        let event = self.send(
            at,
            EventKind::NodeStarted {
                node: node.to_owned(),
                attempt,
                inputs,
            },
        );
        match event.kind {
            EventKind::NodeStarted { inputs, .. } => inputs,
            _ => ValueMap::new(),
        }
    }

    /// Numbers and stamps `kind` (redacted already) and hands it to the sink; the event,
    /// for what it holds.
    fn send(&self, at: Option<Instant>, kind: EventKind) -> RunEvent {
        let since_start = match at {
            Some(at) => at.saturating_duration_since(self.started),
            None => self.started.elapsed(),
        };
        let event = RunEvent {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            at_ms: self
                .at_before_ms
                .saturating_add(u64::try_from(since_start.as_millis()).unwrap_or(u64::MAX)),
            kind,
        };
        self.sink.emit(&event);
        event
    }

    /// Keeps what the catalog learnt from outside before the run (an MCP server's tool
    /// list) with the run's calls, so that replaying it needs no server.
    pub(super) fn record_catalog_calls(&self) {
        for answer in self.executor.catalog.catalog_calls() {
            let call = answer.call();
            let recorded = crate::RecordedCall {
                node: answer.source.clone(),
                attempt: 0,
                request_hash: crate::request_hash(&call),
                method: answer.method.clone(),
                url: answer.url.clone(),
                response: answer.response.clone(),
                body_omitted: None,
            };
            self.sink.record_call(&recorded);
        }
    }

    pub(super) fn stop_for_limit(&self, message: String) {
        if let Ok(mut slot) = self.limit_error.lock()
            && slot.is_none()
        {
            *slot = Some(message);
        }
        self.cancel.cancel();
    }

    pub(super) fn limit_error(&self) -> Option<String> {
        self.limit_error.lock().ok().and_then(|slot| slot.clone())
    }

    pub(super) fn total_usage(&self) -> Usage {
        self.usage.lock().map(|u| *u).unwrap_or_default()
    }

    /// How long the run has gone on, its earlier segments included.
    pub(super) fn duration_ms(&self) -> u64 {
        self.duration_before_ms
            .saturating_add(elapsed_ms(self.started))
    }

    /// What an earlier segment recorded of `node` once it had finished.
    pub(super) fn recorded_final(&self, node: &str) -> Option<&NodeProgress> {
        self.recorded
            .get(node)
            .filter(|progress| progress.status.is_final())
    }

    /// Marks `node` as paused at a breakpoint: the error that ends it.
    pub(super) fn wait_at_breakpoint(&self, node: &str) -> BlockError {
        if let Ok(mut paused) = self.at_breakpoint.lock() {
            paused.insert(node.to_owned());
        }
        let mut error = self.wait_for_decision(node);
        error.message = "paused at a breakpoint".to_owned();
        error
    }

    pub(super) fn is_at_breakpoint(&self, node: &str) -> bool {
        self.at_breakpoint.lock().is_ok_and(|p| p.contains(node))
    }

    /// Marks `node` as waiting for a decision: the error that ends its attempt.
    pub(super) fn wait_for_decision(&self, node: &str) -> BlockError {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.insert(node.to_owned());
        }
        BlockError {
            message: "waiting for approval".to_owned(),
            ..BlockError::cancelled()
        }
    }

    pub(super) fn is_waiting(&self, node: &str) -> bool {
        self.waiting.lock().is_ok_and(|w| w.contains(node))
    }
}

pub(super) fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// What a paused run waits for.
pub(super) fn waiting_message(shared: &RunShared) -> String {
    let paused = shared
        .at_breakpoint
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    let listed = |nodes: Vec<&String>| {
        nodes
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let waiting = shared.waiting.lock().map(|w| w.clone()).unwrap_or_default();
    let approvals: Vec<&String> = waiting.iter().filter(|n| !paused.contains(*n)).collect();
    let breakpoints: Vec<&String> = waiting.iter().filter(|n| paused.contains(*n)).collect();
    match (approvals.is_empty(), breakpoints.is_empty()) {
        (_, true) => format!("waiting for approval of {}", listed(approvals)),
        (true, false) => format!("paused at a breakpoint at {}", listed(breakpoints)),
        (false, false) => format!(
            "waiting for approval of {} and paused at a breakpoint at {}",
            listed(approvals),
            listed(breakpoints)
        ),
    }
}
