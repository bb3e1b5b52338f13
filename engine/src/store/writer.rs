//! Recording a run: [`RunRecorder::emit`] queues events, a writer thread batches them into
//! SQLite transactions.
//!
//! The writer keeps the run row and every node row in memory and writes whole rows, so a
//! batch that failed (disk full, database locked for too long) is simply written again on
//! the next try.

use std::hash::BuildHasher as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agentloom_core::{GraphDoc, Usage, Value, ValueMap};
use rusqlite::{Connection, Transaction, params};
use serde::Serialize;

use super::approvals::UNDECIDED;
use super::liveness::{HEARTBEAT_INTERVAL_MS, this_process_token};
use super::values::{LogPolicy, StoredGraph, StoredValue, ValueLog, insert_values};
use super::{StoreError, now_ms, to_i64};
use crate::events::{EventKind, EventSink, RunEvent, RunStatus};
use crate::run_state::{KeptValues, NodeProgress, RunState};

/// Events wait at most this long before they are written.
const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// After taking at least this many events at once, the writer pauses for `GATHER_PAUSE`.
const GATHER_MIN_EVENTS: usize = 32;
const GATHER_PAUSE: Duration = Duration::from_millis(1);
/// Rows that changed only by streamed output are rewritten at most this often.
const PARTIAL_INTERVAL: Duration = Duration::from_millis(500);
/// A batch is written as soon as it holds this many changed rows and events: a long run's
/// rows reach the file while it goes on, so that its end waits for one small batch only.
const MAX_BATCH: usize = 2_000;
/// After a failed write, wait this long before trying again.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// Events kept for a database that keeps failing; beyond this they are dropped (the run
/// and node rows are kept).
const MAX_PENDING_EVENTS: usize = 200_000;
/// Error messages longer than this are clipped in the log.
const MAX_ERROR_CHARS: usize = 64 * 1024;
/// How long an idle writer sleeps when there is nothing to do.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

enum Msg {
    /// An event, with the wall clock (Unix ms) when it was emitted for `RunStarted`.
    Event(RunEvent, Option<u64>),
    /// A node's start or finish, its inputs or outputs taken out of the map into `ports`:
    /// a one-entry map allocates room for eleven, and a long run of quick nodes can queue
    /// many of these before the writer catches up.
    NodeValues(RunEvent, Vec<(String, Value)>),
    /// The response of an outbound call, for replay.
    Call(Box<crate::events::RecordedCall>),
    /// Write everything queued so far, then answer.
    Flush(mpsc::SyncSender<Result<(), String>>),
    Shutdown,
}

/// Records one run into the run log. An [`EventSink`]: `emit` never touches SQLite, it
/// queues the event for the writer thread, which owns its own connection.
///
/// Call [`RunRecorder::finish`] when the run is over (dropping the recorder does it too,
/// but cannot report errors). The run row and node rows reach the file within ~50 ms of
/// the events, at once for run start and finish, so a process killed mid-run leaves them.
pub struct RunRecorder {
    path: PathBuf,
    tx: Sender<Msg>,
    handle: Mutex<Option<JoinHandle<Result<(), String>>>>,
}

impl std::fmt::Debug for RunRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRecorder")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RunRecorder {
    pub(super) fn start(
        path: PathBuf,
        conn: Connection,
        graph: Arc<GraphDoc>,
        policy: LogPolicy,
        idle_writers: super::IdleWriters,
    ) -> Result<RunRecorder, StoreError> {
        let (tx, rx) = mpsc::channel();
        let writer_path = path.clone();
        // The writer learns the graph on its own thread (its node ids, its text for the
        // log) while the run starts: events wait in the channel meanwhile.
        let handle = std::thread::Builder::new()
            .name("agentloom-run-log".to_owned())
            .spawn(move || Writer::new(writer_path, conn, &graph, policy, idle_writers).run(&rx))
            .map_err(|e| StoreError::Recording {
                path: path.clone(),
                message: format!("cannot start the writer thread: {e}"),
            })?;
        Ok(RunRecorder {
            path,
            tx,
            handle: Mutex::new(Some(handle)),
        })
    }

    /// The run log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits until every event emitted so far is written (or the write failed).
    pub fn flush(&self) -> Result<(), StoreError> {
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        if self.tx.send(Msg::Flush(ack_tx)).is_err() {
            // Finished already: everything was written then.
            return Ok(());
        }
        match ack_rx.recv() {
            Ok(result) => result.map_err(|message| self.recording_error(message)),
            Err(_) => {
                Err(self.recording_error("the writer thread stopped unexpectedly".to_owned()))
            }
        }
    }

    /// Writes what is left and stops the writer thread. Returns the first write error of
    /// the whole recording, if any. Events emitted afterwards are dropped; calling it
    /// again returns `Ok`.
    pub fn finish(&self) -> Result<(), StoreError> {
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(handle) = handle else {
            return Ok(());
        };
        // A send error means the thread is gone already; join tells how it ended.
        let _ = self.tx.send(Msg::Shutdown);
        match handle.join() {
            Ok(result) => result.map_err(|message| self.recording_error(message)),
            Err(_) => {
                Err(self.recording_error("the writer thread stopped unexpectedly".to_owned()))
            }
        }
    }

    fn recording_error(&self, message: String) -> StoreError {
        StoreError::Recording {
            path: self.path.clone(),
            message,
        }
    }
}

impl EventSink for RunRecorder {
    fn emit(&self, event: &RunEvent) {
        let wall_ms = matches!(event.kind, EventKind::RunStarted { .. }).then(now_ms);
        let compact = |kind: EventKind, map: &ValueMap| {
            let ports = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let event = RunEvent {
                seq: event.seq,
                at_ms: event.at_ms,
                kind,
            };
            Msg::NodeValues(event, ports)
        };
        let msg = match &event.kind {
            EventKind::NodeStarted {
                node,
                attempt,
                inputs,
            } => compact(
                EventKind::NodeStarted {
                    node: node.clone(),
                    attempt: *attempt,
                    inputs: ValueMap::new(),
                },
                inputs,
            ),
            EventKind::NodeFinished {
                node,
                outputs,
                attempts,
                duration_ms,
                usage,
                outputs_redacted,
            } => compact(
                EventKind::NodeFinished {
                    node: node.clone(),
                    outputs: ValueMap::new(),
                    attempts: *attempts,
                    duration_ms: *duration_ms,
                    usage: *usage,
                    outputs_redacted: *outputs_redacted,
                },
                outputs,
            ),
            _ => Msg::Event(event.clone(), wall_ms),
        };
        // After finish() nobody listens; the event is dropped as documented.
        let _ = self.tx.send(msg);
    }

    fn record_call(&self, call: &crate::events::RecordedCall) {
        self.queue_call(call);
    }
}

impl RunRecorder {
    /// Queues an outbound call's response (see [`EventSink::record_call`]).
    fn queue_call(&self, call: &crate::events::RecordedCall) {
        let _ = self.tx.send(Msg::Call(Box::new(call.clone())));
    }
}

impl Drop for RunRecorder {
    fn drop(&mut self) {
        if let Err(error) = self.finish() {
            tracing::warn!(%error, "the run log is incomplete");
        }
    }
}

/// Whether a node's row waits to be written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Queued {
    No,
    /// In `dirty_nodes`: written with the next batch.
    Row,
    /// In `partial_nodes` only: changed by streamed output, written less often.
    Partial,
}

/// The recorded state of one node: its progress (the one reducer of run events, with
/// values kept as the JSON of the row) and what only the log keeps.
struct NodeState {
    queued: Queued,
    started_at_ms: Option<u64>,
    finished_at_ms: Option<u64>,
    /// The `seq` of the first `node_started` and of `node_finished`, which are stored in
    /// this row instead of as events.
    started_seq: Option<u64>,
    finished_seq: Option<u64>,
    /// The block kind is kept in [`Slots`], not here.
    progress: NodeProgress<JsonValues>,
    /// Its row finished in an earlier segment of the run (read from the file) and the node
    /// has not started in this one: a finish, failure or skip restates the row, it is no
    /// new event.
    restates: bool,
    /// Whether redaction replaced a secret in the outputs it finished with (the row's
    /// `outputs_redacted`; `None`: not known, as for rows written before it was kept).
    outputs_redacted: Option<bool>,
}

impl NodeState {
    fn new() -> Self {
        Self {
            queued: Queued::No,
            started_at_ms: None,
            finished_at_ms: None,
            started_seq: None,
            finished_seq: None,
            progress: NodeProgress::default(),
            restates: false,
            outputs_redacted: None,
        }
    }
}

/// A node's values as the JSON text of its row.
#[derive(Default)]
enum JsonValues {
    /// None yet.
    #[default]
    Unknown,
    /// Not written yet, or the node may still change.
    Held(String),
    /// In the file, and let go: the node had finished when its row was written. A later
    /// write of the row keeps the stored column.
    Stored,
}

impl KeptValues for JsonValues {
    fn keep(&mut self, values: &ValueMap) {
        *self = JsonValues::Held(json_text(values, "{}"));
    }
}

impl JsonValues {
    /// The column's new text (`None`: NULL, or the stored text when [`Self::is_stored`]).
    fn text(&self) -> Option<&str> {
        match self {
            JsonValues::Held(text) => Some(text),
            JsonValues::Unknown | JsonValues::Stored => None,
        }
    }

    fn is_stored(&self) -> bool {
        matches!(self, JsonValues::Stored)
    }

    /// Lets the text go once it is in the file.
    fn written(&mut self) {
        if matches!(self, JsonValues::Held(_)) {
            *self = JsonValues::Stored;
        }
    }
}

/// The recorded state of the run, and what has not reached the file yet.
struct RunEntry {
    id: String,
    /// The row exists in the file.
    inserted: bool,
    /// The recording goes on with a run the file holds (a resumed run): its node rows,
    /// events and calls stay.
    continues: bool,
    /// The row changed since it was last written.
    dirty: bool,
    graph_name: String,
    /// The run's own fields (status, error, totals, duration) as the one reducer of run
    /// events (`RunState::apply`) sets them from `run_started` and `run_finished`; its
    /// nodes stay empty (their rows are `nodes`) and its outputs are kept as
    /// `outputs_json`.
    fields: RunState,
    started_at_ms: u64,
    /// When the run ended, which its events do not say (the row's own column).
    finished_at_ms: Option<u64>,
    inputs_json: String,
    outputs_json: String,
    node_count: usize,
    heartbeat_at_ms: u64,
    /// By slot (see [`Slots`]); `None` for a node that has not started.
    nodes: Vec<Option<NodeState>>,
    /// Slots whose row changed (each once: see [`NodeState::queued`]).
    dirty_nodes: Vec<usize>,
    /// Slots changed only by streamed output (written less often); may hold slots that
    /// have become dirty since, which are written with the dirty ones.
    partial_nodes: Vec<usize>,
    /// The sum of the nodes' usage, valid unless `usage_stale`.
    node_usage: Usage,
    usage_stale: bool,
    events: Vec<RunEvent>,
    /// Outbound calls not written yet, in their logged form.
    calls: Vec<CallRow>,
    /// Calls recorded so far (their `seq`).
    call_count: u64,
}

/// One row of `run_calls` waiting to be written.
struct CallRow {
    seq: u64,
    node: String,
    attempt: u32,
    request_hash: String,
    method: String,
    url: String,
    status: u16,
    headers_json: String,
    /// `{"body": …}` with a large body stored as a value; `None` when over the cap.
    response_json: Option<String>,
    body_size: usize,
}

impl RunEntry {
    fn has_pending(&self) -> bool {
        !self.inserted
            || self.dirty
            || !self.dirty_nodes.is_empty()
            || !self.events.is_empty()
            || !self.calls.is_empty()
    }

    fn batch_full(&self) -> bool {
        self.events.len() + self.dirty_nodes.len() >= MAX_BATCH
    }

    /// The run's status: running until `run_finished` says otherwise.
    fn status(&self) -> RunStatus {
        self.fields.status.unwrap_or(RunStatus::Running)
    }

    /// The run's usage: final once the run has finished (`run_finished` sets it with the
    /// duration), until then the sum of its nodes' (summed again only after a node's usage
    /// changed), which no event carries while the run goes on.
    fn usage(&mut self, slots: &Slots) -> Usage {
        if self.fields.duration_ms.is_some() {
            return self.fields.usage;
        }
        if self.usage_stale {
            let mut total = Usage::default();
            for (slot, node) in self.nodes.iter().enumerate() {
                // Rows of sub-run nodes (`call/render`, not in the graph: no block) are
                // already counted in their calling node.
                if let Some(node) = node
                    && slots.in_graph(slot)
                {
                    total += node.progress.usage;
                }
            }
            self.node_usage = total;
            self.usage_stale = false;
        }
        self.node_usage
    }

    fn at(&self, at_ms: u64) -> u64 {
        self.started_at_ms.saturating_add(at_ms)
    }

    /// Whether an event ending the node in `slot` restates its row from an earlier segment.
    fn restates(&self, slot: usize) -> bool {
        matches!(self.nodes.get(slot), Some(Some(state)) if state.restates)
    }

    /// The node's state, created when it has none; its row is queued for the next batch.
    fn node(&mut self, slot: usize) -> &mut NodeState {
        if slot >= self.nodes.len() {
            self.nodes.resize_with(slot + 1, || None);
        }
        let state = self.nodes[slot].get_or_insert_with(NodeState::new);
        if state.queued != Queued::Row {
            state.queued = Queued::Row;
            self.dirty_nodes.push(slot);
        }
        state
    }

    /// The node's state for streamed output: queued with the partial rows unless its row
    /// is queued already (a node without a row yet gets one at the next batch).
    fn partial_node(&mut self, slot: usize) -> &mut NodeState {
        if self.nodes.get(slot).is_none_or(Option::is_none) {
            return self.node(slot);
        }
        let state = self.nodes[slot].get_or_insert_with(NodeState::new);
        if state.queued == Queued::No {
            state.queued = Queued::Partial;
            self.partial_nodes.push(slot);
        }
        state
    }

    /// Applies a node's event to its progress, which queues its row; a change of its
    /// usage makes the run's stale.
    fn apply_to_node(&mut self, slot: usize, kind: &EventKind) -> &mut NodeState {
        let state = self.node(slot);
        let usage = state.progress.usage;
        state.progress.apply(kind);
        let changed = state.progress.usage != usage;
        self.usage_stale |= changed;
        self.node(slot)
    }

    /// After a batch was written: nothing of what it held is queued any more.
    fn written(&mut self, with_partials: bool) {
        let nodes = &mut self.nodes;
        let mut unqueue = |slot: usize, from: Queued| {
            if let Some(Some(state)) = nodes.get_mut(slot)
                && state.queued == from
            {
                state.queued = Queued::No;
                // A finished node's values are in the file: a long run need not hold
                // every node's inputs and outputs as text until it ends.
                if state.progress.status.is_final() {
                    state.progress.inputs.written();
                    state.progress.outputs.written();
                }
            }
        };
        for &slot in &self.dirty_nodes {
            unqueue(slot, Queued::Row);
        }
        self.dirty_nodes.clear();
        if with_partials {
            for &slot in &self.partial_nodes {
                unqueue(slot, Queued::Partial);
            }
            self.partial_nodes.clear();
        } else {
            // Slots written as dirty rows leave the list, so none is listed twice.
            let nodes = &self.nodes;
            self.partial_nodes.retain(|&slot| {
                matches!(nodes.get(slot), Some(Some(state)) if state.queued == Queued::Partial)
            });
        }
    }
}

/// Where each node's state is kept: the graph's nodes by position, then rows of sub-run
/// nodes (`call/render`, not in the graph) as they appear. Events name their node by id;
/// looking it up here allocates nothing. The graph's ids and kinds are read from the graph
/// itself, not copied: a large graph would otherwise be held twice.
struct Slots {
    graph: Arc<GraphDoc>,
    /// Slot by id, hashed with `hasher`.
    by_id: hashbrown::HashTable<usize>,
    /// Seeded at random: ids come from a graph file, which may be made to collide under a
    /// fixed hash and turn every lookup into a scan.
    hasher: hashbrown::DefaultHashBuilder,
    /// Ids of sub-run rows, at slots `graph.nodes.len()` and on.
    sub_ids: Vec<String>,
    /// Their block kinds (empty until an event names one).
    sub_blocks: Vec<String>,
}

/// The id of `slot`, in the graph or among the sub-run rows.
fn slot_id<'a>(graph: &'a GraphDoc, sub_ids: &'a [String], slot: usize) -> Option<&'a str> {
    match graph.nodes.get(slot) {
        Some(node) => Some(&node.id),
        None => sub_ids.get(slot - graph.nodes.len()).map(String::as_str),
    }
}

impl Slots {
    fn new(graph: Arc<GraphDoc>) -> Self {
        let hasher = hashbrown::DefaultHashBuilder::default();
        let id_hash = |id: &str| hasher.hash_one(id);
        let mut by_id = hashbrown::HashTable::with_capacity(graph.nodes.len());
        for (slot, node) in graph.nodes.iter().enumerate() {
            let hash = id_hash(&node.id);
            let rehash = |&s: &usize| id_hash(slot_id(&graph, &[], s).unwrap_or_default());
            // A duplicate id (refused by validation) keeps its first slot.
            if let hashbrown::hash_table::Entry::Vacant(vacant) = by_id.entry(
                hash,
                |&s| slot_id(&graph, &[], s) == Some(node.id.as_str()),
                rehash,
            ) {
                vacant.insert(slot);
            }
        }
        Self {
            graph,
            by_id,
            hasher,
            sub_ids: Vec::new(),
            sub_blocks: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.graph.nodes.len() + self.sub_ids.len()
    }

    fn id(&self, slot: usize) -> Option<&str> {
        slot_id(&self.graph, &self.sub_ids, slot)
    }

    fn block(&self, slot: usize) -> Option<&str> {
        match self.graph.nodes.get(slot) {
            Some(node) => Some(&node.block),
            None => self
                .sub_blocks
                .get(slot - self.graph.nodes.len())
                .map(String::as_str),
        }
    }

    fn slot(&mut self, id: &str) -> usize {
        let Self {
            graph,
            by_id,
            hasher,
            sub_ids,
            sub_blocks,
        } = self;
        let id_hash = |id: &str| hasher.hash_one(id);
        let hash = id_hash(id);
        match by_id.entry(
            hash,
            |&s| slot_id(graph, sub_ids, s) == Some(id),
            |&s| id_hash(slot_id(graph, sub_ids, s).unwrap_or_default()),
        ) {
            hashbrown::hash_table::Entry::Occupied(known) => *known.get(),
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                let slot = graph.nodes.len() + sub_ids.len();
                vacant.insert(slot);
                sub_ids.push(id.to_owned());
                sub_blocks.push(String::new());
                slot
            }
        }
    }

    /// Takes the block kind an event names for a sub-run's row (the graph knows the rest).
    fn learn_block(&mut self, slot: usize, block: &str) {
        if let Some(known) = slot
            .checked_sub(self.graph.nodes.len())
            .and_then(|i| self.sub_blocks.get_mut(i))
            && known.is_empty()
        {
            block.clone_into(known);
        }
    }

    fn in_graph(&self, slot: usize) -> bool {
        self.graph
            .nodes
            .get(slot)
            .is_some_and(|node| !node.block.is_empty())
    }
}

enum Control {
    Continue,
    Stop,
}

struct Writer {
    path: PathBuf,
    conn: Connection,
    graph: StoredGraph,
    /// The nodes of the graph as run, and of its sub-runs.
    slots: Slots,
    run: Option<RunEntry>,
    /// When the oldest unwritten change was made.
    first_pending: Option<Instant>,
    /// Write at once (run started or finished, flush asked).
    urgent: bool,
    last_partial_write: Instant,
    last_heartbeat: Instant,
    retry_at: Option<Instant>,
    /// The first error, reported by `finish`.
    error: Option<String>,
    warned_without_start: bool,
    /// Large values, stored once each.
    values: ValueLog,
    /// Where the connection goes when the recording ends well.
    idle_writers: super::IdleWriters,
}

impl Writer {
    fn new(
        path: PathBuf,
        conn: Connection,
        graph: &Arc<GraphDoc>,
        policy: LogPolicy,
        idle_writers: super::IdleWriters,
    ) -> Self {
        let now = Instant::now();
        Self {
            path,
            conn,
            // Compact and as given: the canonical form (a sorted copy, pretty-printed) costs
            // several times more for a large graph, and readers parse it either way.
            graph: StoredGraph::of(graph),
            slots: Slots::new(Arc::clone(graph)),
            run: None,
            first_pending: None,
            urgent: false,
            last_partial_write: now,
            last_heartbeat: now,
            retry_at: None,
            error: None,
            warned_without_start: false,
            values: ValueLog::new(policy),
            idle_writers,
        }
    }

    fn run(mut self, rx: &Receiver<Msg>) -> Result<(), String> {
        'outer: loop {
            let timeout = self.next_deadline().map_or(IDLE_WAIT, |deadline| {
                deadline.saturating_duration_since(Instant::now())
            });
            match rx.recv_timeout(timeout) {
                Ok(msg) => {
                    if let Control::Stop = self.handle(msg) {
                        break 'outer;
                    }
                    // Take everything already queued into this batch.
                    let mut taken = 1;
                    let mut caught_up = false;
                    while !self.batch_full() {
                        match rx.try_recv() {
                            Ok(msg) => {
                                taken += 1;
                                if let Control::Stop = self.handle(msg) {
                                    break 'outer;
                                }
                            }
                            Err(TryRecvError::Empty) => {
                                caught_up = true;
                                break;
                            }
                            Err(TryRecvError::Disconnected) => break 'outer,
                        }
                    }
                    self.tick(false);
                    if caught_up && taken >= GATHER_MIN_EVENTS {
                        // Events come fast and this thread keeps up: let them queue for a
                        // moment, since waking it costs the emitting thread a system call
                        // per event.
                        std::thread::sleep(GATHER_PAUSE);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.tick(false);
        }
        self.tick(true);
        match self.error {
            Some(error) => Err(error),
            None => {
                // Only a connection with no transaction left open is worth keeping, and
                // not with the page cache a large run filled.
                if self.conn.is_autocommit() && self.conn.release_memory().is_ok() {
                    let mut idle = self
                        .idle_writers
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if idle.len() < super::MAX_IDLE_WRITERS {
                        idle.push(self.conn);
                    }
                }
                Ok(())
            }
        }
    }

    fn handle(&mut self, msg: Msg) -> Control {
        match msg {
            Msg::Event(event, wall_ms) => self.apply(event, wall_ms),
            Msg::NodeValues(mut event, ports) => {
                if let EventKind::NodeStarted { inputs: map, .. }
                | EventKind::NodeFinished { outputs: map, .. } = &mut event.kind
                {
                    map.extend(ports);
                }
                self.apply(event, None);
            }
            Msg::Call(call) => self.keep_call(*call),
            Msg::Flush(ack) => {
                self.tick(true);
                let _ = ack.send(self.error.clone().map_or(Ok(()), Err));
            }
            Msg::Shutdown => return Control::Stop,
        }
        Control::Continue
    }

    fn batch_full(&self) -> bool {
        self.run.as_ref().is_some_and(RunEntry::batch_full)
    }

    /// Queues a call's response in its logged form: the body stored like any value (kept
    /// once, deflated), or only its size when it is over the cap.
    fn keep_call(&mut self, call: crate::events::RecordedCall) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        let body_size = super::calls::logged_body_size(&call);
        let response_json = (body_size <= self.values.max_value_bytes()).then(|| {
            let body = super::calls::logged_body(call.response.body, call.body_omitted);
            let map = self
                .values
                .shrink(ValueMap::from([("body".to_owned(), body)]));
            json_text(&map, "{}")
        });
        let seq = run.call_count;
        run.call_count += 1;
        run.calls.push(CallRow {
            seq,
            node: call.node,
            attempt: call.attempt,
            request_hash: call.request_hash,
            method: call.method,
            url: call.url,
            status: call.response.status,
            headers_json: json_text(&call.response.headers, "[]"),
            response_json,
            body_size,
        });
        self.mark_pending();
    }

    /// When the writer must wake up next, if at all.
    fn next_deadline(&self) -> Option<Instant> {
        let run = self.run.as_ref()?;
        let mut deadline: Option<Instant> = None;
        let mut consider = |at: Instant| deadline = Some(deadline.map_or(at, |d| d.min(at)));
        if run.has_pending() {
            consider(
                self.first_pending
                    .map_or_else(Instant::now, |t| t + FLUSH_INTERVAL),
            );
        }
        if !run.partial_nodes.is_empty() {
            consider(self.last_partial_write + PARTIAL_INTERVAL);
        }
        if run.status() == RunStatus::Running {
            consider(self.last_heartbeat + Duration::from_millis(HEARTBEAT_INTERVAL_MS));
        }
        match (deadline, self.retry_at) {
            (Some(d), Some(retry)) => Some(d.max(retry)),
            (d, _) => d,
        }
    }

    fn mark_pending(&mut self) {
        if self.first_pending.is_none() {
            self.first_pending = Some(Instant::now());
        }
    }

    /// Puts the event's values and errors in their logged form (see `values.rs`).
    fn shrink(&mut self, kind: &mut EventKind) {
        let values = &mut self.values;
        let shrink = |map: &mut agentloom_core::ValueMap, values: &mut ValueLog| {
            *map = values.shrink(std::mem::take(map));
        };
        let clip = |error: &mut String| {
            if error.len() > MAX_ERROR_CHARS {
                *error = agentloom_core::clip_chars(error, MAX_ERROR_CHARS);
            }
        };
        match kind {
            EventKind::RunStarted { inputs, .. } | EventKind::NodeStarted { inputs, .. } => {
                shrink(inputs, values);
            }
            EventKind::NodeFinished { outputs, .. } => shrink(outputs, values),
            EventKind::RunFinished { outputs, error, .. } => {
                shrink(outputs, values);
                if let Some(error) = error {
                    clip(error);
                }
            }
            EventKind::NodeFailed { error, .. } | EventKind::NodeRetrying { error, .. } => {
                clip(error);
            }
            EventKind::NodeSkipped { reason, .. } => clip(reason),
            _ => {}
        }
    }

    /// Goes on with the run the file holds under the started run's id (a resumed run): its
    /// start, node rows, events and calls stay, and the rows go on from what the file says
    /// (the executor restates the rows of nodes that finished before, which changes none of
    /// them). A run the file does not hold is recorded as a new one.
    fn continue_recorded(&mut self) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        let conn = &self.conn;
        let loaded = super::busy::retry(super::busy::is_busy, || recorded_run(conn, &run.id));
        let recorded = match loaded {
            Ok(Some(recorded)) => recorded,
            Ok(None) => return,
            Err(error) => {
                // Its rows stay in the file all the same; those this recording changes are
                // written as it knows them.
                run.continues = true;
                tracing::warn!(db = %self.path.display(), %error, "cannot read the resumed run's earlier rows");
                self.error
                    .get_or_insert_with(|| format!("cannot read the resumed run: {error}"));
                return;
            }
        };
        run.continues = true;
        run.started_at_ms = recorded.started_at_ms;
        run.call_count = recorded.call_count;
        run.usage_stale = true;
        for (id, block, state) in recorded.rows {
            let slot = self.slots.slot(&id);
            self.slots.learn_block(slot, &block);
            if slot >= run.nodes.len() {
                run.nodes.resize_with(slot + 1, || None);
            }
            run.nodes[slot] = Some(state);
        }
    }

    /// Updates the in-memory rows from one event.
    fn apply(&mut self, mut event: RunEvent, wall_ms: Option<u64>) {
        if matches!(event.kind, EventKind::RunStarted { .. }) {
            // A recorder reused for a second run: write out the first one completely.
            if self.run.is_some() {
                self.tick(true);
            }
            self.values.reset();
        }
        self.shrink(&mut event.kind);
        if let EventKind::RunStarted {
            run_id,
            graph_name,
            node_count,
            inputs,
        } = &event.kind
        {
            let now = wall_ms.unwrap_or_else(now_ms);
            let started_at_ms = now.saturating_sub(event.at_ms);
            let resumed = event.seq > 0;
            self.run = Some(RunEntry {
                id: run_id.clone(),
                inserted: false,
                continues: false,
                dirty: true,
                graph_name: graph_name.clone(),
                fields: {
                    let mut fields = RunState {
                        status: Some(RunStatus::Running),
                        ..RunState::default()
                    };
                    fields.apply(&event.kind);
                    fields
                },
                started_at_ms,
                finished_at_ms: None,
                inputs_json: json_text(inputs, "{}"),
                outputs_json: "{}".to_owned(),
                node_count: *node_count,
                heartbeat_at_ms: now,
                // Rows are kept and written as nodes change; a node that never started has
                // none (the reader lists it as pending from the graph).
                dirty_nodes: Vec::new(),
                // One state for each node of the graph, allocated once.
                nodes: Vec::with_capacity(self.slots.len()),
                partial_nodes: Vec::new(),
                node_usage: Usage::default(),
                usage_stale: false,
                events: vec![event],
                calls: Vec::new(),
                call_count: 0,
            });
            // Events after the run's first one: a resumed run, which the log holds already.
            if resumed {
                self.continue_recorded();
            }
            self.last_heartbeat = Instant::now();
            self.urgent = true;
            self.mark_pending();
            return;
        }
        let slots = &mut self.slots;
        let Some(run) = self.run.as_mut() else {
            if !self.warned_without_start {
                self.warned_without_start = true;
                tracing::warn!(db = %self.path.display(), "run events before `run_started` are not recorded");
            }
            return;
        };
        let at = run.at(event.at_ms);
        if let EventKind::NodeFinished { node, .. }
        | EventKind::NodeFailed { node, .. }
        | EventKind::NodeSkipped { node, .. } = &event.kind
        {
            let slot = slots.slot(node);
            if run.restates(slot) {
                // The row as the file holds it: no new event, its times and values stay.
                if let EventKind::NodeSkipped { block, .. } = &event.kind {
                    slots.learn_block(slot, block);
                }
                let state = run.apply_to_node(slot, &event.kind);
                state.progress.inputs.written();
                state.progress.outputs.written();
                run.dirty = true;
                self.mark_pending();
                return;
            }
        }
        match &event.kind {
            EventKind::RunStarted { .. } => {}
            EventKind::NodeQueued { node, block } => {
                let slot = slots.slot(node);
                slots.learn_block(slot, block);
                run.apply_to_node(slot, &event.kind);
                // Not stored as an event: the node row holds it, and `node_started`
                // follows at once unless the run is stopped.
                self.mark_pending();
                return;
            }
            EventKind::NodeStarted { node, .. } => {
                let state = run.apply_to_node(slots.slot(node), &event.kind);
                state.restates = false;
                state.outputs_redacted = None;
                state.started_at_ms.get_or_insert(at);
                if state.started_seq.is_none() {
                    state.started_seq = Some(event.seq);
                    self.mark_pending();
                    return;
                }
            }
            EventKind::NodePartial { node, .. } => {
                run.partial_node(slots.slot(node))
                    .progress
                    .apply(&event.kind);
                // Not stored as an event: the node's outputs hold the final text.
                return;
            }
            EventKind::NodeUsage { node, usage } => {
                run.apply_to_node(slots.slot(node), &event.kind);
                run.usage_stale |= !usage.is_zero();
                run.dirty = true;
            }
            EventKind::NodeRetrying { node, .. }
            | EventKind::NodeAwaitingApproval { node }
            | EventKind::NodeAtBreakpoint { node, .. } => {
                run.apply_to_node(slots.slot(node), &event.kind);
            }
            EventKind::NodeFinished {
                node,
                outputs_redacted,
                ..
            } => {
                let outputs_redacted = *outputs_redacted;
                let state = run.apply_to_node(slots.slot(node), &event.kind);
                state.outputs_redacted = outputs_redacted;
                state.finished_at_ms = Some(at);
                state.finished_seq = Some(event.seq);
                run.dirty = true;
                self.mark_pending();
                return;
            }
            EventKind::NodeFailed { node, .. } => {
                let state = run.apply_to_node(slots.slot(node), &event.kind);
                state.finished_at_ms = Some(at);
                run.dirty = true;
            }
            EventKind::NodeSkipped { node, block, .. } => {
                let slot = slots.slot(node);
                slots.learn_block(slot, block);
                run.apply_to_node(slot, &event.kind).finished_at_ms = Some(at);
            }
            EventKind::RunFinished {
                outputs,
                duration_ms,
                ..
            } => {
                run.fields.apply(&event.kind);
                // The row holds the outputs as text; the reducer's copy is not kept.
                run.outputs_json = json_text(outputs, "{}");
                run.fields.outputs = ValueMap::default();
                // A resumed run's duration leaves out the time it waited paused.
                run.finished_at_ms = Some(if run.continues {
                    run.at(event.at_ms)
                } else {
                    run.started_at_ms.saturating_add(*duration_ms)
                });
                run.dirty = true;
                self.urgent = true;
            }
        }
        run.events.push(event);
        self.mark_pending();
    }

    /// Writes what is due (everything when `force`).
    fn tick(&mut self, force: bool) {
        let Some(run) = self.run.as_mut() else {
            return;
        };
        let now = Instant::now();
        if run.status() == RunStatus::Running
            && now.duration_since(self.last_heartbeat)
                >= Duration::from_millis(HEARTBEAT_INTERVAL_MS)
        {
            run.heartbeat_at_ms = now_ms();
            run.dirty = true;
            self.last_heartbeat = now;
            if self.first_pending.is_none() {
                self.first_pending = Some(now);
            }
        }
        let partial_due = force || now.duration_since(self.last_partial_write) >= PARTIAL_INTERVAL;
        let main_due = run.has_pending()
            && (force
                || self.urgent
                || run.batch_full()
                || self
                    .first_pending
                    .is_some_and(|t| now.duration_since(t) >= FLUSH_INTERVAL));
        let partial_pending = partial_due && !run.partial_nodes.is_empty();
        if !main_due && !partial_pending {
            return;
        }
        if !force && self.retry_at.is_some_and(|at| now < at) {
            return;
        }
        let conn = &mut self.conn;
        let graph = &self.graph;
        let values = &self.values.pending;
        let usage = run.usage(&self.slots);
        let batch = Batch {
            graph,
            run,
            slots: &self.slots,
            usage,
            values,
            with_partials: partial_due,
        };
        match super::busy::retry(super::busy::is_busy, || batch.write(conn)) {
            Ok(()) => {
                self.values.pending.clear();
                if !run.inserted {
                    // Written with the run's first row and never again: a large graph's
                    // text need not stay for the whole run.
                    self.graph = StoredGraph::written();
                }
                run.inserted = true;
                run.dirty = false;
                run.written(partial_due);
                if partial_due {
                    self.last_partial_write = now;
                }
                run.events.clear();
                run.calls.clear();
                self.first_pending = None;
                self.urgent = false;
                self.retry_at = None;
            }
            Err(error) => {
                tracing::warn!(db = %self.path.display(), %error, "cannot write to the run log; will try again");
                self.retry_at = Some(now + RETRY_INTERVAL);
                let mut message = error.to_string();
                if run.events.len() > MAX_PENDING_EVENTS {
                    let dropped = run.events.len();
                    run.events.clear();
                    message = format!("{message} ({dropped} events could not be kept)");
                }
                self.error.get_or_insert(message);
            }
        }
    }
}

/// What the file holds of a run that goes on (a resumed run).
struct RecordedRun {
    /// Unix milliseconds.
    started_at_ms: u64,
    /// The `seq` of the next outbound call.
    call_count: u64,
    /// Node id, block kind and state of every node row.
    rows: Vec<(String, String, NodeState)>,
}

/// Reads run `run_id`'s start, node rows and calls, if the file holds the run.
fn recorded_run(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<RecordedRun>> {
    use rusqlite::OptionalExtension as _;
    let Some(started_at_ms) = conn
        .prepare_cached("SELECT started_at_ms FROM runs WHERE id = ?1")?
        .query_row(params![run_id], |row| row.get::<_, i64>(0))
        .optional()?
    else {
        return Ok(None);
    };
    let calls: i64 = conn
        .prepare_cached("SELECT coalesce(max(seq) + 1, 0) FROM run_calls WHERE run_id = ?1")?
        .query_row(params![run_id], |row| row.get(0))?;
    let kept = |stored: bool| {
        if stored {
            JsonValues::Stored
        } else {
            JsonValues::Unknown
        }
    };
    let rows = conn
        .prepare_cached(
            "SELECT node_id, block, status, attempts, started_at_ms, finished_at_ms, duration_ms,
                    inputs_json IS NOT NULL, outputs_json IS NOT NULL, error, error_caught,
                    skip_reason, partial_json, input_tokens, output_tokens, cost_usd, started_seq,
                    finished_seq, outputs_redacted
             FROM node_runs WHERE run_id = ?1",
        )?
        .query_map(params![run_id], |row| {
            let status = crate::events::NodeStatus::parse(&row.get::<_, String>(2)?)
                .unwrap_or(crate::events::NodeStatus::Pending);
            let partial = row
                .get::<_, Option<String>>(12)?
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default();
            let progress = NodeProgress {
                block: String::new(),
                status,
                attempts: row.get(3)?,
                duration_ms: row.get::<_, Option<i64>>(6)?.map(super::from_i64),
                inputs: kept(row.get(7)?),
                outputs: kept(row.get(8)?),
                error: row.get(9)?,
                error_caught: row.get(10)?,
                skip_reason: row.get(11)?,
                partial,
                usage: Usage {
                    input_tokens: super::from_i64(row.get(13)?),
                    output_tokens: super::from_i64(row.get(14)?),
                    cost_usd: row.get(15)?,
                },
                cancelled: false,
            };
            let state = NodeState {
                queued: Queued::No,
                started_at_ms: row.get::<_, Option<i64>>(4)?.map(super::from_i64),
                finished_at_ms: row.get::<_, Option<i64>>(5)?.map(super::from_i64),
                started_seq: row.get::<_, Option<i64>>(16)?.map(super::from_i64),
                finished_seq: row.get::<_, Option<i64>>(17)?.map(super::from_i64),
                restates: status.is_final(),
                outputs_redacted: row.get(18)?,
                progress,
            };
            Ok((row.get(0)?, row.get(1)?, state))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Some(RecordedRun {
        started_at_ms: super::from_i64(started_at_ms),
        call_count: super::from_i64(calls),
        rows,
    }))
}

/// A node's row, its stored inputs and outputs kept when ?20 and ?21 say so (a row written
/// before holds them, and this batch does not).
const UPSERT_NODE_ROW: &str = "
    INSERT INTO node_runs (run_id, node_id, block, status, attempts, started_at_ms, finished_at_ms,
                           duration_ms, inputs_json, outputs_json, error, error_caught, skip_reason,
                           partial_json, input_tokens, output_tokens, cost_usd, started_seq,
                           finished_seq, outputs_redacted)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
            ?22)
    ON CONFLICT (run_id, node_id) DO UPDATE SET
       block = excluded.block, status = excluded.status, attempts = excluded.attempts,
       started_at_ms = excluded.started_at_ms, finished_at_ms = excluded.finished_at_ms,
       duration_ms = excluded.duration_ms,
       inputs_json = CASE WHEN ?20 THEN node_runs.inputs_json ELSE excluded.inputs_json END,
       outputs_json = CASE WHEN ?21 THEN node_runs.outputs_json ELSE excluded.outputs_json END,
       error = excluded.error, error_caught = excluded.error_caught,
       skip_reason = excluded.skip_reason, partial_json = excluded.partial_json,
       input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
       cost_usd = excluded.cost_usd, started_seq = excluded.started_seq,
       finished_seq = excluded.finished_seq, outputs_redacted = excluded.outputs_redacted";

/// What one transaction writes: the run row, the changed node rows, the new events.
struct Batch<'a> {
    graph: &'a StoredGraph,
    run: &'a RunEntry,
    slots: &'a Slots,
    usage: Usage,
    values: &'a [StoredValue],
    with_partials: bool,
}

impl Batch<'_> {
    /// Writes the batch in one transaction.
    fn write(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        // IMMEDIATE: take the write lock first (waiting for it), never upgrade a read.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let run = self.run;
        if !run.inserted {
            self.insert_run(&tx)?;
        } else if run.dirty {
            self.update_run(&tx)?;
        }
        insert_values(&tx, &run.id, self.values)?;
        self.upsert_nodes(&tx)?;
        self.insert_events(&tx)?;
        self.insert_calls(&tx)?;
        tx.commit()
    }

    /// The run's row as it stands now, the run inserted before.
    fn update_run(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let (run, usage) = (self.run, self.usage);
        // A going run asking a person is listed as waiting (see
        // `RunStore::save_approval_request`).
        let sql = format!(
            "UPDATE runs SET status = CASE WHEN ?2 = 'running' AND {UNDECIDED} THEN 'waiting' ELSE ?2 END,
                    finished_at_ms = ?3, duration_ms = ?4, outputs_json = ?5, error = ?6,
                    input_tokens = ?7, output_tokens = ?8, cost_usd = ?9, heartbeat_at_ms = ?10
             WHERE id = ?1"
        );
        tx.prepare_cached(&sql)?.execute(params![
            run.id,
            run.status().as_str(),
            run.finished_at_ms.map(to_i64),
            run.fields.duration_ms.map(to_i64),
            run.outputs_json,
            run.fields.error,
            to_i64(usage.input_tokens),
            to_i64(usage.output_tokens),
            usage.cost_usd,
            to_i64(run.heartbeat_at_ms),
        ])?;
        Ok(())
    }

    /// The run's first row and its graph; a run id recorded before (a rerun under the same
    /// id) starts from a clean slate, unless this is the same run resumed.
    fn insert_run(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let (graph, run, usage) = (self.graph, self.run, self.usage);
        if !run.continues {
            tx.prepare_cached("DELETE FROM events WHERE run_id = ?1")?
                .execute(params![run.id])?;
            tx.prepare_cached("DELETE FROM node_runs WHERE run_id = ?1")?
                .execute(params![run.id])?;
            tx.prepare_cached("DELETE FROM run_calls WHERE run_id = ?1")?
                .execute(params![run.id])?;
        }
        let sql = format!(
            "INSERT INTO runs (id, graph_name, status, started_at_ms, finished_at_ms, duration_ms,
                               inputs_json, outputs_json, error, input_tokens, output_tokens,
                               cost_usd, node_count, pid, owner, heartbeat_at_ms)
             VALUES (?1, ?2, CASE WHEN ?3 = 'running' AND {UNDECIDED} THEN 'waiting' ELSE ?3 END,
                     ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
             ON CONFLICT (id) DO UPDATE SET
                graph_name = excluded.graph_name, status = excluded.status,
                started_at_ms = excluded.started_at_ms, finished_at_ms = excluded.finished_at_ms,
                duration_ms = excluded.duration_ms, inputs_json = excluded.inputs_json,
                outputs_json = excluded.outputs_json, error = excluded.error,
                input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
                cost_usd = excluded.cost_usd, node_count = excluded.node_count, pid = excluded.pid,
                owner = excluded.owner, heartbeat_at_ms = excluded.heartbeat_at_ms"
        );
        tx.prepare_cached(&sql)?.execute(params![
            run.id,
            run.graph_name,
            run.status().as_str(),
            to_i64(run.started_at_ms),
            run.finished_at_ms.map(to_i64),
            run.fields.duration_ms.map(to_i64),
            run.inputs_json,
            run.outputs_json,
            run.fields.error,
            to_i64(usage.input_tokens),
            to_i64(usage.output_tokens),
            usage.cost_usd,
            to_i64(u64::try_from(run.node_count).unwrap_or(u64::MAX)),
            i64::from(std::process::id()),
            this_process_token(),
            to_i64(run.heartbeat_at_ms),
        ])?;
        let (graph_text, graph_deflated) = graph.columns();
        tx.prepare_cached(
            "INSERT INTO run_graphs (run_id, graph_json, graph_deflated) VALUES (?1, ?2, ?3)
             ON CONFLICT (run_id) DO UPDATE SET graph_json = excluded.graph_json,
                                                graph_deflated = excluded.graph_deflated",
        )?
        .execute(params![run.id, graph_text, graph_deflated])?;
        Ok(())
    }

    /// The rows of the nodes changed since the last batch (and, when asked, of those with
    /// partial output only).
    fn upsert_nodes(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let (run, slots) = (self.run, self.slots);
        let mut upsert = tx.prepare_cached(UPSERT_NODE_ROW)?;
        let partials = if self.with_partials {
            run.partial_nodes.as_slice()
        } else {
            &[]
        };
        let rows = run
            .dirty_nodes
            .iter()
            .map(|&slot| (slot, Queued::Row))
            .chain(partials.iter().map(|&slot| (slot, Queued::Partial)));
        for (slot, listed) in rows {
            let (Some(Some(node)), Some(id), Some(block)) =
                (run.nodes.get(slot), slots.id(slot), slots.block(slot))
            else {
                continue;
            };
            // A partial row that became dirty since is written with the dirty ones.
            if node.queued != listed {
                continue;
            }
            let progress = &node.progress;
            let partial =
                (!progress.partial.is_empty()).then(|| json_text(&progress.partial, "{}"));
            upsert.execute(params![
                run.id,
                id,
                block,
                progress.status.as_str(),
                progress.attempts,
                node.started_at_ms.map(to_i64),
                node.finished_at_ms.map(to_i64),
                progress.duration_ms.map(to_i64),
                progress.inputs.text(),
                progress.outputs.text(),
                progress.error,
                progress.error_caught,
                progress.skip_reason,
                partial,
                to_i64(progress.usage.input_tokens),
                to_i64(progress.usage.output_tokens),
                progress.usage.cost_usd,
                node.started_seq.map(to_i64),
                node.finished_seq.map(to_i64),
                progress.inputs.is_stored(),
                progress.outputs.is_stored(),
                node.outputs_redacted,
            ])?;
        }
        Ok(())
    }

    /// The events since the last batch. Plain INSERT: a rerun under the same id deleted its
    /// old events, and a failed batch was rolled back whole.
    fn insert_events(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let run = self.run;
        let mut insert = tx.prepare_cached(
            "INSERT INTO events (run_id, seq, at_ms, kind, node_id, payload_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for event in &run.events {
            insert.execute(params![
                run.id,
                to_i64(event.seq),
                to_i64(event.at_ms),
                event.kind.name(),
                event.kind.node(),
                stored_payload(&event.kind),
            ])?;
        }
        Ok(())
    }

    /// The calls to the outside world recorded since the last batch.
    fn insert_calls(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let run = self.run;
        let mut insert = tx.prepare_cached(
            "INSERT INTO run_calls (run_id, seq, node_id, attempt, request_hash, method, url,
                                    status, headers_json, response_json, body_size)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?;
        for call in &run.calls {
            insert.execute(params![
                run.id,
                to_i64(call.seq),
                call.node,
                call.attempt,
                call.request_hash,
                call.method,
                call.url,
                call.status,
                call.headers_json,
                call.response_json,
                to_i64(u64::try_from(call.body_size).unwrap_or(u64::MAX)),
            ])?;
        }
        Ok(())
    }
}

/// The `payload_json` of an event. A retried node's inputs are in its row already, so
/// `node_started` leaves them out (the reader puts them back).
fn stored_payload(kind: &EventKind) -> String {
    #[derive(Serialize)]
    #[serde(tag = "event", rename_all = "snake_case")]
    enum Slim<'a> {
        NodeStarted { node: &'a str, attempt: u32 },
    }
    match kind {
        EventKind::NodeStarted { node, attempt, .. } => json_text(
            &Slim::NodeStarted {
                node,
                attempt: *attempt,
            },
            "null",
        ),
        other => json_text(other, "null"),
    }
}

/// JSON text of plain data (serializing it cannot fail; `fallback` keeps the row valid).
fn json_text<T: Serialize + ?Sized>(value: &T, fallback: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| fallback.to_owned())
}
