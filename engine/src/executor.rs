//! The executor: runs a [`ValidGraph`] as a dataflow.
//!
//! One scheduler task owns all run state; node futures are polled on it through a
//! `FuturesUnordered` (no task spawn per node, no locks on the hot path). A node starts when
//! every wired input has either a value or is known to be absent. A node whose required input
//! is absent is skipped, and its outputs become absent in turn: that is how untaken branches
//! are skipped, with no sentinel value on the wires. Ready nodes start in topological order,
//! so event order is deterministic for equal inputs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, BlockCatalog, BlockError, Compat, Config, CpuJob,
    ErrorClass, GraphDoc, GraphInterface, NodeImpl, RequestSlot, RunCtx, Secret, SecretError,
    SecretSource, TOOL_PORT, Usage, ValidGraph, ValidNode, Value, ValueMap, approval_action,
    coerce, resolved_details, tool_descriptor, validate,
};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::approver::Approver;
use crate::breakpoints::{BreakAt, RunDebug};
use crate::events::{EventKind, EventSink, NodeStatus, RunEvent, RunStatus};
use crate::limits::{NodeBudget, RunLimits};
use crate::redact::Redactor;
use crate::run_state::NodeProgress;
use crate::seed::{EarlierSegments, RunSeed};

/// Per-run choices that are not part of the graph.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Defaults to a fresh time-ordered id.
    pub run_id: Option<String>,
    /// Cancel this to stop the run.
    pub cancel: CancellationToken,
    /// Cancel this when nobody is left to decide approvals (the app quitting): the run
    /// stops as with `cancel`, but a node waiting for a decision keeps its stored request
    /// and the run ends `waiting`, to be resumed; a run waiting for nobody ends `cancelled`.
    pub pause: CancellationToken,
    /// Overrides the graph's concurrency setting: how many nodes of this run may do
    /// CPU-bound work at once (the cores by default). Nodes that wait (timers, requests,
    /// people, sub-runs) take no slot.
    pub concurrency: Option<usize>,
    /// Outputs, decisions and checkpoints known before the run starts (a resumed run, a
    /// run from a node); see [`RunSeed`].
    pub seed: Option<Arc<RunSeed>>,
    /// Answers the run's outbound calls from an earlier run's recording
    /// (`agentloom run --replay`); its sub-runs replay too.
    pub replay: Option<Arc<crate::Replay>>,
    /// Asked before every side effect is sent (a remote worker records it started first);
    /// its sub-runs' side effects too.
    pub side_effects: Option<Arc<dyn crate::durable::SideEffectGate>>,
    /// Breakpoints and Step (a run being debugged); its sub-runs share them.
    pub debug: Option<Arc<RunDebug>>,
}

/// What happened to one node.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct NodeReport {
    pub id: String,
    pub status: NodeStatus,
    pub attempts: u32,
    pub duration_ms: u64,
    pub error: Option<String>,
    pub usage: Usage,
}

/// The outcome of a run.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct RunReport {
    pub run_id: String,
    pub status: RunStatus,
    pub outputs: ValueMap,
    /// Sorted by node id.
    pub nodes: Vec<NodeReport>,
    pub usage: Usage,
    pub duration_ms: u64,
    pub error: Option<String>,
}

/// Runs graphs. Cheap to clone; one executor can run many graphs at once.
#[derive(Clone)]
pub struct Executor {
    catalog: Arc<dyn BlockCatalog>,
    secrets: Arc<dyn SecretSource>,
    workspace: PathBuf,
    /// Set by [`Executor::with_workspace_made_on_use`]: made once, when a run first asks
    /// for it.
    workspace_made: Option<Arc<std::sync::OnceLock<()>>>,
    approver: Option<Arc<dyn Approver>>,
    /// See [`Executor::with_private_network`].
    private_network: bool,
    /// See [`Executor::with_memory`].
    memory: Option<Arc<dyn agentloom_core::GraphMemory>>,
}

/// Secrets from `AGENTLOOM_SECRET_<NAME>` environment variables only.
pub struct EnvSecrets;

impl SecretSource for EnvSecrets {
    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        let secret = agentloom_core::env_secret(name)?.ok_or_else(|| SecretError::Missing {
            name: name.to_owned(),
            env_var: agentloom_core::secret_env_var(name),
        })?;
        crate::redact::remember_process_wide(secret.expose());
        Ok(secret)
    }
}

impl Executor {
    pub fn new(catalog: Arc<dyn BlockCatalog>) -> Self {
        Self {
            catalog,
            secrets: Arc::new(EnvSecrets),
            workspace: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            workspace_made: None,
            approver: None,
            private_network: true,
            memory: None,
        }
    }

    #[must_use]
    pub fn with_secrets(mut self, secrets: Arc<dyn SecretSource>) -> Self {
        self.secrets = secrets;
        self
    }

    /// The directory file blocks are confined to.
    pub fn workspace(&self) -> &std::path::Path {
        &self.workspace
    }

    #[must_use]
    pub fn with_workspace(mut self, workspace: PathBuf) -> Self {
        self.workspace = workspace;
        self.workspace_made = None;
        self
    }

    /// [`Executor::with_workspace`] for a directory that need not exist yet: it is made
    /// (with its parents) when a block first asks for the workspace, so that runs that
    /// touch no file (most of a server's) leave no empty directory and cost no `mkdir`.
    #[must_use]
    pub fn with_workspace_made_on_use(mut self, workspace: PathBuf) -> Self {
        self.workspace = workspace;
        self.workspace_made = Some(Arc::new(std::sync::OnceLock::new()));
        self
    }

    /// Whether runs may reach loopback, private and link-local addresses through URLs the
    /// graph chose (`allow_private_network: true`, a `web.search` instance): `true` by
    /// default; `false` for a graph file that is not trusted, whose own say-so must not
    /// open this machine and the local network to it. Sub-runs (`graph.call`, for-each
    /// items) and tool calls inherit it. See [`RunCtx::private_network_allowed`].
    #[must_use]
    pub fn with_private_network(mut self, allowed: bool) -> Self {
        self.private_network = allowed;
        self
    }

    /// The memory the graph keeps across runs, which its nodes read and write through
    /// [`RunCtx::memory`] (sub-runs share it).
    #[must_use]
    pub fn with_memory(mut self, memory: Arc<dyn agentloom_core::GraphMemory>) -> Self {
        self.memory = Some(memory);
        self
    }

    #[must_use]
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// The same executor with another block catalog (e.g. one with a graph's MCP tools).
    #[must_use]
    pub fn with_catalog(mut self, catalog: Arc<dyn BlockCatalog>) -> Self {
        self.catalog = catalog;
        self
    }

    pub fn catalog(&self) -> &Arc<dyn BlockCatalog> {
        &self.catalog
    }

    /// Runs `graph` to the end (completed, failed or cancelled), emitting every event to `sink`.
    pub async fn run(
        &self,
        graph: Arc<ValidGraph>,
        inputs: ValueMap,
        options: RunOptions,
        sink: Arc<dyn EventSink>,
    ) -> RunReport {
        let concurrency = options
            .concurrency
            .or(graph.doc.settings.concurrency)
            .unwrap_or_else(default_concurrency)
            .max(1);
        let requests_per_host = graph
            .doc
            .settings
            .requests_per_host
            .unwrap_or(DEFAULT_REQUESTS_PER_HOST);
        // A resumed run goes on from what it did before it paused: the same budget, and
        // totals and times that include it.
        let earlier = options
            .seed
            .as_deref()
            .and_then(|seed| seed.earlier.as_ref());
        let mut limits = RunLimits::new(
            graph.doc.settings.max_steps,
            graph.doc.settings.max_cost_usd,
        );
        if let Some(earlier) = earlier {
            limits = limits.with_earlier(earlier.steps, earlier.usage.cost_usd);
        }
        let inherited = Inherited {
            limits: Arc::new(limits),
            before: earlier.map(Before::of).unwrap_or_default(),
            redactor: Arc::new(Redactor::default()),
            safe_mode: graph.doc.settings.safe_mode,
            cpu_slots: Arc::new(tokio::sync::Semaphore::new(concurrency)),
            request_slots: Arc::new(RequestSlots::new(requests_per_host)),
            replay: options.replay.clone(),
            path_prefix: String::new(),
            debug: options.debug.clone(),
        };
        self.run_with(graph, inputs, options, sink, inherited).await
    }

    /// Runs `graph` under limits, secrets and safe mode that may come from a parent run.
    async fn run_with(
        &self,
        graph: Arc<ValidGraph>,
        inputs: ValueMap,
        options: RunOptions,
        sink: Arc<dyn EventSink>,
        inherited: Inherited,
    ) -> RunReport {
        let run_id = options.run_id.clone().unwrap_or_else(new_run_id);
        inherited.redactor.remember_secret_inputs(&graph, &inputs);
        let mut seed = seed_with_pins(options.seed.as_deref(), &graph);
        let recorded = seed
            .earlier
            .take()
            .map(|earlier| earlier.nodes)
            .unwrap_or_default();
        // Seeded rows of sub-run nodes (`call/render`) are handed down to those sub-runs.
        let nested_seed = seed
            .outputs
            .iter()
            .filter(|(id, _)| graph.index_of(id).is_none())
            .map(|(id, outputs)| (id.clone(), outputs.clone()))
            .collect();
        let shared = Arc::new(RunShared {
            run_id,
            executor: self.clone(),
            inputs,
            outputs: Mutex::new(seed.graph_outputs.clone()),
            sink,
            started: Instant::now(),
            at_before_ms: inherited.before.since_start_ms,
            duration_before_ms: inherited.before.duration_ms,
            seq: AtomicU64::new(inherited.before.next_seq),
            usage: Mutex::new(inherited.before.usage),
            cancel: options.cancel.clone(),
            pause: options.pause.clone(),
            limit_error: Mutex::new(None),
            limits: inherited.limits,
            redactor: inherited.redactor,
            safe_mode: inherited.safe_mode,
            decisions: Mutex::new(seed.decisions.clone()),
            checkpoints: seed.checkpoints.clone(),
            nested_seed,
            recorded,
            waiting: Mutex::new(BTreeSet::new()),
            graph: Arc::clone(&graph),
            tool_inputs: Mutex::new(HashMap::new()),
            request_slots: inherited.request_slots,
            cpu_slots: inherited.cpu_slots,
            replay: inherited.replay,
            path_prefix: inherited.path_prefix,
            side_effects: options.side_effects.clone(),
            debug: inherited.debug,
            at_breakpoint: Mutex::new(BTreeSet::new()),
        });
        Scheduler::new(graph, shared).run(&seed.outputs).await
    }
}

/// The default number of nodes doing CPU-bound work at once: the cores available.
pub fn default_concurrency() -> usize {
    // Asked once: the answer reads the process's cgroup files, which costs more than a
    // small run (an evaluation or a server starts thousands).
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES
        .get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
}

/// The run's seed with the graph's pinned outputs added (a pin wins over the seed).
fn seed_with_pins(seed: Option<&RunSeed>, graph: &ValidGraph) -> RunSeed {
    let mut seed = seed.cloned().unwrap_or_default();
    for node in &graph.doc.nodes {
        if let Some(pinned) = &node.pinned {
            seed.outputs.insert(node.id.clone(), pinned.clone());
        }
    }
    seed
}

/// What a sub-run takes from its parent: one budget of steps and money, the CPU and request
/// slots, the secrets to redact, and safe mode.
struct Inherited {
    limits: Arc<RunLimits>,
    /// What the run did before it paused (a resumed run; nothing for a sub-run, whose
    /// parent counts it).
    before: Before,
    redactor: Arc<Redactor>,
    safe_mode: bool,
    cpu_slots: Arc<tokio::sync::Semaphore>,
    request_slots: Arc<RequestSlots>,
    replay: Option<Arc<crate::Replay>>,
    /// What the run's node ids are prefixed with in the parent run (`call/`), to find
    /// their recorded calls.
    path_prefix: String,
    debug: Option<Arc<RunDebug>>,
}

/// Where a resumed run's totals and times go on from.
#[derive(Default)]
struct Before {
    /// Wall milliseconds from the run's start to this segment's: its events' `at_ms` go on
    /// from there.
    since_start_ms: u64,
    /// How long the run went on before (its pauses not counted).
    duration_ms: u64,
    usage: Usage,
    /// The `seq` of this segment's first event.
    next_seq: u64,
}

impl Before {
    fn of(earlier: &EarlierSegments) -> Self {
        let since_start = crate::store::now_ms().saturating_sub(earlier.started_at_ms);
        Before {
            // A clock set back since: the run's times still go forwards.
            since_start_ms: since_start.max(earlier.duration_ms),
            duration_ms: earlier.duration_ms,
            usage: earlier.usage,
            next_seq: earlier.next_seq,
        }
    }
}

/// A new run id: time-ordered, so ids sort by start time.
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

/// State shared by the scheduler and every running node.
struct RunShared {
    run_id: String,
    executor: Executor,
    inputs: ValueMap,
    outputs: Mutex<ValueMap>,
    sink: Arc<dyn EventSink>,
    /// When this segment of the run started (a resumed run has earlier ones).
    started: Instant,
    /// Wall milliseconds from the run's start to `started`.
    at_before_ms: u64,
    /// How long the run went on before `started`.
    duration_before_ms: u64,
    seq: AtomicU64,
    /// Spent by the whole run (its earlier segments included).
    usage: Mutex<Usage>,
    cancel: CancellationToken,
    /// Stops the run leaving its approvals pending (see [`RunOptions::pause`]).
    pause: CancellationToken,
    /// Set when a run limit stopped the run.
    limit_error: Mutex<Option<String>>,
    /// Shared with sub-runs: node slots, steps and the cost budget.
    limits: Arc<RunLimits>,
    /// Shared with sub-runs: every secret resolved so far.
    redactor: Arc<Redactor>,
    safe_mode: bool,
    /// Decisions made while the run was paused, each used by the node's next request.
    decisions: Mutex<BTreeMap<String, ApprovalDecision>>,
    checkpoints: BTreeMap<String, Value>,
    /// Seeded outputs of the nodes of sub-runs, by nested id (`call/render`).
    nested_seed: BTreeMap<String, ValueMap>,
    /// What earlier segments of this run recorded of its nodes (a resumed run), by id;
    /// sub-run nodes by nested id.
    recorded: BTreeMap<String, NodeProgress>,
    /// Nodes paused on an approval nobody could give yet.
    waiting: Mutex<BTreeSet<String>>,
    graph: Arc<ValidGraph>,
    /// The wired input values of nodes offered as tools, by node index: a call adds its
    /// arguments to these.
    tool_inputs: Mutex<HashMap<usize, ValueMap>>,
    /// Slots for CPU-bound work on the blocking pool (see [`RunCtx::run_cpu`]).
    cpu_slots: Arc<tokio::sync::Semaphore>,
    /// Slots for outbound requests, per host (see [`RunCtx::request_slot`]).
    request_slots: Arc<RequestSlots>,
    /// The recording this run's outbound calls are answered from, if it replays one.
    replay: Option<Arc<crate::Replay>>,
    /// This run's nodes' prefix in the top run (`call/` in a sub-run), for the replay.
    path_prefix: String,
    side_effects: Option<Arc<dyn crate::durable::SideEffectGate>>,
    /// The run's breakpoints, shared with its sub-runs.
    debug: Option<Arc<RunDebug>>,
    /// Nodes paused at a breakpoint nobody could decide on yet (also in `waiting`).
    at_breakpoint: Mutex<BTreeSet<String>>,
}

/// Requests in flight at once to one host when the graph does not say.
pub const DEFAULT_REQUESTS_PER_HOST: usize = 8;

/// One semaphore per host a run sends requests to.
struct RequestSlots {
    per_host: usize,
    hosts: Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

impl RequestSlots {
    fn new(per_host: usize) -> Self {
        Self {
            per_host: per_host.max(1),
            hosts: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The semaphore of `url`'s scheme, host and port.
    fn for_url(&self, url: &str) -> Arc<tokio::sync::Semaphore> {
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
    fn emit(&self, mut kind: EventKind) {
        self.redactor.event(&mut kind);
        let event = RunEvent {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            at_ms: self.at_before_ms.saturating_add(elapsed_ms(self.started)),
            kind,
        };
        self.sink.emit(&event);
    }

    /// Keeps what the catalog learnt from outside before the run (an MCP server's tool
    /// list) with the run's calls, so that replaying it needs no server.
    fn record_catalog_calls(&self) {
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

    fn stop_for_limit(&self, message: String) {
        if let Ok(mut slot) = self.limit_error.lock()
            && slot.is_none()
        {
            *slot = Some(message);
        }
        self.cancel.cancel();
    }

    fn limit_error(&self) -> Option<String> {
        self.limit_error.lock().ok().and_then(|slot| slot.clone())
    }

    fn total_usage(&self) -> Usage {
        self.usage.lock().map(|u| *u).unwrap_or_default()
    }

    /// How long the run has gone on, its earlier segments included.
    fn duration_ms(&self) -> u64 {
        self.duration_before_ms
            .saturating_add(elapsed_ms(self.started))
    }

    /// What an earlier segment recorded of `node` once it had finished.
    fn recorded_final(&self, node: &str) -> Option<&NodeProgress> {
        self.recorded
            .get(node)
            .filter(|progress| progress.status.is_final())
    }

    /// Marks `node` as paused at a breakpoint: the error that ends it.
    fn wait_at_breakpoint(&self, node: &str) -> BlockError {
        if let Ok(mut paused) = self.at_breakpoint.lock() {
            paused.insert(node.to_owned());
        }
        let mut error = self.wait_for_decision(node);
        error.message = "paused at a breakpoint".to_owned();
        error
    }

    fn is_at_breakpoint(&self, node: &str) -> bool {
        self.at_breakpoint.lock().is_ok_and(|p| p.contains(node))
    }

    /// Marks `node` as waiting for a decision: the error that ends its attempt.
    fn wait_for_decision(&self, node: &str) -> BlockError {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.insert(node.to_owned());
        }
        BlockError {
            message: "waiting for approval".to_owned(),
            ..BlockError::cancelled()
        }
    }

    fn is_waiting(&self, node: &str) -> bool {
        self.waiting.lock().is_ok_and(|w| w.contains(node))
    }
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl NodeCtx {
    /// What the parent run's seed knows of the sub-run nested as `prefix`: its finished
    /// nodes (but the graph outputs, which set the sub-run's results when they run), the
    /// decisions made on its approvals and their checkpoints.
    fn sub_run_seed(&self, prefix: &str, graph: &ValidGraph) -> RunSeed {
        let nested = format!("{prefix}/");
        let inner = |id: &str| id.strip_prefix(&nested).map(str::to_owned);
        let outputs = self
            .shared
            .nested_seed
            .iter()
            .filter_map(|(id, outputs)| Some((inner(id)?, outputs.clone())))
            .filter(|(id, _)| {
                graph.index_of(id).is_some_and(|i| {
                    !matches!(
                        graph.nodes[i].node.interface(),
                        Some(GraphInterface::Output { .. })
                    )
                }) || id.contains('/')
            })
            .collect();
        let mut decisions = BTreeMap::new();
        if let Ok(mut parent) = self.shared.decisions.lock() {
            let keys: Vec<String> = parent
                .keys()
                .filter(|k| k.starts_with(&nested))
                .cloned()
                .collect();
            for key in keys {
                if let (Some(decision), Some(id)) = (parent.remove(&key), inner(&key)) {
                    decisions.insert(id, decision);
                }
            }
        }
        let checkpoints = self
            .shared
            .checkpoints
            .iter()
            .filter_map(|(id, checkpoint)| Some((inner(id)?, checkpoint.clone())))
            .collect();
        // Its rows recorded before the run paused; its usage and time are the parent's.
        let recorded: BTreeMap<String, NodeProgress> = self
            .shared
            .recorded
            .iter()
            .filter_map(|(id, progress)| Some((inner(id)?, progress.clone())))
            .collect();
        RunSeed {
            outputs,
            decisions,
            checkpoints,
            earlier: (!recorded.is_empty()).then(|| EarlierSegments {
                nodes: recorded,
                ..EarlierSegments::default()
            }),
            ..RunSeed::default()
        }
    }
}

/// Asks the parent run's approver for a sub-run's node, as that run's node `{prefix}/{node}`.
struct SubRunApprover {
    parent: Arc<dyn Approver>,
    run_id: String,
    prefix: String,
}

#[async_trait::async_trait]
impl Approver for SubRunApprover {
    async fn decide_or_pause(
        &self,
        _run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Option<ApprovalDecision> {
        let nested = format!("{}/{node}", self.prefix);
        self.parent
            .decide_or_pause(&self.run_id, &nested, request)
            .await
    }
}

/// Passes a sub-run's node events on to its parent run, each node renamed
/// `{prefix}/{node}`; the sub-run's own start and finish are the parent node's.
struct SubRunSink {
    parent: Arc<RunShared>,
    prefix: String,
}

impl EventSink for SubRunSink {
    fn emit(&self, event: &RunEvent) {
        let mut kind = event.kind.clone();
        let Some(node) = kind.node_mut() else {
            return;
        };
        *node = format!("{}/{node}", self.prefix);
        self.parent.emit(kind);
    }

    fn record_call(&self, call: &crate::RecordedCall) {
        let mut call = call.clone();
        call.node = format!("{}/{}", self.prefix, call.node);
        self.parent.sink.record_call(&call);
    }
}

/// What a running node sees.
struct NodeCtx {
    shared: Arc<RunShared>,
    node_id: String,
    attempt: u32,
    previous_error: Option<String>,
    cancel: CancellationToken,
    usage: Mutex<Usage>,
    budget: NodeBudget,
}

#[async_trait::async_trait]
impl RunCtx for NodeCtx {
    fn run_id(&self) -> &str {
        &self.shared.run_id
    }

    fn node_id(&self) -> &str {
        &self.node_id
    }

    fn attempt(&self) -> u32 {
        self.attempt
    }

    fn previous_error(&self) -> Option<&str> {
        self.previous_error.as_deref()
    }

    fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    fn partial(&self, port: &str, chunk: &str) {
        self.shared.emit(EventKind::NodePartial {
            node: self.node_id.clone(),
            port: port.to_owned(),
            chunk: chunk.to_owned(),
        });
    }

    fn report_usage(&self, usage: Usage) {
        self.add_usage(usage);
        if let Err(message) = self.shared.limits.spend(usage.cost_usd, &self.node_id) {
            self.shared.stop_for_limit(message);
        }
    }

    fn reserve_cost(&self, estimate_usd: f64) -> Result<(), BlockError> {
        self.shared
            .limits
            .reserve(&self.budget, estimate_usd, &self.node_id)
            .map_err(|message| {
                self.shared.stop_for_limit(message.clone());
                BlockError::permanent(message)
            })
    }

    fn settle_cost(&self, reserved_usd: f64, usage: Usage) {
        self.shared.limits.release(&self.budget, reserved_usd);
        self.report_usage(usage);
    }

    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        let secret = self.shared.executor.secrets.secret(name)?;
        self.shared.redactor.remember(name, &secret);
        Ok(secret)
    }

    fn refresh_secret(&self, name: &str, refused: &Secret) -> Result<Option<Secret>, SecretError> {
        let fresh = self.shared.executor.secrets.refresh_secret(name, refused)?;
        if let Some(secret) = &fresh {
            self.shared.redactor.remember(name, secret);
        }
        Ok(fresh)
    }

    fn redact_secret(&self, secret: &Secret) {
        // The token of an MCP server, resolved when the server was connected.
        self.shared.redactor.remember("MCP server token", secret);
    }

    fn check_egress(&self, url: &url::Url, parts: &[&[u8]]) -> Result<(), BlockError> {
        self.shared
            .redactor
            .check_egress(url, parts)
            .map_err(BlockError::permanent)
    }

    fn memory(&self) -> Option<Arc<dyn agentloom_core::GraphMemory>> {
        self.shared.executor.memory.clone()
    }

    fn replay_call(&self, call: &agentloom_core::OutboundCall<'_>) -> agentloom_core::Replayed {
        match &self.shared.replay {
            Some(replay) => replay.answer(
                &format!("{}{}", self.shared.path_prefix, self.node_id),
                self.attempt,
                call,
            ),
            None => agentloom_core::Replayed::Live,
        }
    }

    fn record_call(
        &self,
        call: &agentloom_core::OutboundCall<'_>,
    ) -> Option<agentloom_core::CallRecording> {
        let shared = Arc::clone(&self.shared);
        let node = self.node_id.clone();
        let attempt = self.attempt;
        let request_hash = crate::request_hash(call);
        let method = call.method.to_owned();
        let mut url = call.url.to_owned();
        Some(agentloom_core::CallRecording::new(move |mut response| {
            // Secrets resolved by then (the request's own included) never reach the log.
            let redactor = &shared.redactor;
            redactor.text(&mut url);
            for (_, value) in &mut response.headers {
                redactor.text(value);
            }
            let body_omitted = redactor.recorded_body(&response.headers, &mut response.body);
            shared.sink.record_call(&crate::RecordedCall {
                node,
                attempt,
                request_hash,
                method,
                url,
                response,
                body_omitted,
            });
        }))
    }

    fn workspace(&self) -> &std::path::Path {
        let executor = &self.shared.executor;
        if let Some(made) = &executor.workspace_made {
            made.get_or_init(|| {
                // A failure shows in the file operation that follows, which names the
                // workspace and the reason.
                if let Err(err) = std::fs::create_dir_all(&executor.workspace) {
                    tracing::warn!(workspace = %executor.workspace.display(), %err, "cannot create the workspace");
                }
            });
        }
        &executor.workspace
    }

    fn graph_input(&self, name: &str) -> Option<Value> {
        self.shared.inputs.get(name).cloned()
    }

    fn set_graph_output(&self, name: &str, value: Value) {
        if let Ok(mut outputs) = self.shared.outputs.lock() {
            outputs.insert(name.to_owned(), value);
        }
    }

    async fn run_subgraph(
        &self,
        graph: &GraphDoc,
        inputs: ValueMap,
    ) -> Result<ValueMap, BlockError> {
        self.run_subgraph_in(graph, inputs, None).await
    }

    async fn run_subgraph_in(
        &self,
        graph: &GraphDoc,
        inputs: ValueMap,
        scope: Option<&str>,
    ) -> Result<ValueMap, BlockError> {
        let executor = &self.shared.executor;
        let prefix = match scope {
            Some(scope) => format!("{}/{scope}", self.node_id),
            None => self.node_id.clone(),
        };
        let valid = validate(graph, executor.catalog.as_ref()).map_err(|problems| {
            let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
            BlockError::permanent(format!("the sub-graph is invalid: {}", list.join("; ")))
        })?;
        let seed = self.sub_run_seed(&prefix, &valid);
        let options = RunOptions {
            run_id: Some(format!("{}/{prefix}", self.shared.run_id)),
            cancel: self.cancel.child_token(),
            pause: self.shared.pause.clone(),
            side_effects: self.shared.side_effects.clone(),
            seed: (!seed.is_empty() || !seed.checkpoints.is_empty() || seed.earlier.is_some())
                .then(|| Arc::new(seed)),
            ..RunOptions::default()
        };
        // Approvals are asked, stored and answered as the parent run's, for the nested node.
        let executor = match &executor.approver {
            Some(approver) => executor.clone().with_approver(Arc::new(SubRunApprover {
                parent: Arc::clone(approver),
                run_id: self.shared.run_id.clone(),
                prefix: prefix.clone(),
            })),
            None => executor.clone(),
        };
        let inherited = Inherited {
            limits: Arc::clone(&self.shared.limits),
            before: Before::default(),
            redactor: Arc::clone(&self.shared.redactor),
            safe_mode: self.shared.safe_mode,
            cpu_slots: Arc::clone(&self.shared.cpu_slots),
            request_slots: Arc::clone(&self.shared.request_slots),
            replay: self.shared.replay.clone(),
            path_prefix: format!("{}{prefix}/", self.shared.path_prefix),
            debug: self.shared.debug.clone(),
        };
        // The sub-run's node events join the parent run's stream, nested under this node;
        // its usage counts towards the parent run (its cost is already in the shared budget).
        let sink = Arc::new(SubRunSink {
            parent: Arc::clone(&self.shared),
            prefix,
        });
        let report =
            Box::pin(executor.run_with(Arc::new(valid), inputs, options, sink, inherited)).await;
        if !report.usage.is_zero() {
            self.add_usage(report.usage);
        }
        match report.status {
            RunStatus::Completed => Ok(report.outputs),
            RunStatus::Cancelled => {
                // Stopped at a breakpoint inside: the whole run stops, not only this node.
                if self.shared.debug.as_ref().is_some_and(|d| d.is_stopped()) {
                    self.shared.cancel.cancel();
                }
                Err(BlockError::cancelled())
            }
            // A node inside waits for a person: this node waits with it (the run pauses).
            RunStatus::Waiting
                if report
                    .nodes
                    .iter()
                    .any(|n| n.status == NodeStatus::AtBreakpoint) =>
            {
                Err(self.shared.wait_at_breakpoint(&self.node_id))
            }
            RunStatus::Waiting => Err(self.shared.wait_for_decision(&self.node_id)),
            _ => Err(BlockError::permanent(format!(
                "the sub-graph failed: {}",
                report.error.unwrap_or_else(|| "unknown error".to_owned())
            ))),
        }
    }

    fn instantiate(&self, kind: &str, config: &Config) -> Result<Arc<dyn NodeImpl>, BlockError> {
        let block = self
            .shared
            .executor
            .catalog
            .block(kind)
            .ok_or_else(|| BlockError::permanent(format!("unknown block `{kind}`")))?;
        block
            .instantiate(config, &self.shared.executor.catalog.config_ctx())
            .map_err(|e| BlockError::permanent(format!("block `{kind}`: {e}")))
    }

    fn safe_mode(&self) -> bool {
        self.shared.safe_mode
    }

    fn private_network_allowed(&self) -> bool {
        self.shared.executor.private_network
    }

    async fn request_approval(
        &self,
        request: ApprovalRequest,
    ) -> Result<ApprovalDecision, BlockError> {
        if !self.shared.safe_mode {
            return Ok(request.approve_as_is());
        }
        ask_approval(&self.shared, &self.node_id, &request).await
    }

    fn resume_checkpoint(&self) -> Option<Value> {
        self.shared.checkpoints.get(&self.node_id).cloned()
    }

    async fn ask_person(&self, request: ApprovalRequest) -> Result<ApprovalDecision, BlockError> {
        ask_approval(&self.shared, &self.node_id, &request).await
    }
    async fn call_tool(&self, node: &str, arguments: Value) -> Result<ValueMap, BlockError> {
        let graph = Arc::clone(&self.shared.graph);
        let caller = graph.index_of(&self.node_id);
        let Some(index) = graph.index_of(node) else {
            return Err(BlockError::permanent(format!(
                "tool `{node}` is not a node of this graph"
            )));
        };
        let tool = &graph.nodes[index];
        let wired_here = tool
            .outputs
            .iter()
            .any(|f| f.port == TOOL_PORT && f.targets.iter().any(|&(t, _)| Some(t) == caller));
        if !wired_here {
            return Err(BlockError::permanent(format!(
                "`{node}` is not wired as a tool to `{}`; wire its `tool` output to it",
                self.node_id
            )));
        }
        let inputs = tool_call_inputs(&self.shared, index, tool, arguments)?;
        // Queued first like any node, which tells the log its block.
        self.shared.emit(EventKind::NodeQueued {
            node: tool.id.clone(),
            block: tool.meta.kind.clone(),
        });
        self.shared.emit(EventKind::NodeStarted {
            node: tool.id.clone(),
            attempt: 1,
            inputs: inputs.clone(),
        });
        let ctx = NodeCtx {
            shared: Arc::clone(&self.shared),
            node_id: tool.id.clone(),
            attempt: 1,
            previous_error: None,
            cancel: self.cancel.child_token(),
            usage: Mutex::new(Usage::default()),
            budget: NodeBudget::default(),
        };
        let started = Instant::now();
        let result = if tool.bypass {
            Ok(agentloom_core::bypass_outputs(tool.node.ports(), &inputs))
        } else {
            run_attempt(tool.node.as_ref(), inputs, &ctx, tool.timeout).await
        };
        let usage = ctx.usage.lock().map(|u| *u).unwrap_or_default();
        let duration_ms = elapsed_ms(started);
        match &result {
            Ok(outputs) => {
                let mut shown = outputs.clone();
                shown.retain(|port, _| tool.node.ports().outputs.iter().any(|p| &p.name == port));
                self.shared.emit(EventKind::NodeFinished {
                    node: tool.id.clone(),
                    outputs: shown,
                    attempts: 1,
                    duration_ms,
                    usage,
                });
            }
            Err(err) => self.shared.emit(EventKind::NodeFailed {
                node: tool.id.clone(),
                error: err.message.clone(),
                attempts: 1,
                duration_ms,
                usage,
                // The caller gets the error (an agent shows it to its model).
                caught: true,
            }),
        }
        result
    }

    async fn request_slot(&self, url: &str) -> Result<RequestSlot, BlockError> {
        let host = self.shared.request_slots.for_url(url);
        tokio::select! {
            permit = host.acquire_owned() => permit
                .map(RequestSlot::holding)
                .map_err(|_| BlockError::cancelled()),
            () = self.cancel.cancelled() => Err(BlockError::cancelled()),
        }
    }

    async fn run_cpu(&self, job: CpuJob) -> Result<(), BlockError> {
        let permit = tokio::select! {
            permit = Arc::clone(&self.shared.cpu_slots).acquire_owned() => {
                permit.map_err(|_| BlockError::cancelled())?
            }
            () = self.cancel.cancelled() => return Err(BlockError::cancelled()),
        };
        // The slot stays taken until the job really ends, even when the node stopped
        // waiting for it: the core is busy until then.
        let work = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job();
        });
        tokio::select! {
            joined = work => joined.map_err(|e| BlockError::permanent(format!("the work stopped: {e}"))),
            () = self.cancel.cancelled() => Err(BlockError::cancelled()),
        }
    }
}

/// The inputs of one call of tool node `tool`: its wired inputs' values, and `arguments`
/// for the others, each converted to its port's type.
fn tool_call_inputs(
    shared: &RunShared,
    index: usize,
    tool: &ValidNode,
    arguments: Value,
) -> Result<ValueMap, BlockError> {
    let mut inputs = shared
        .tool_inputs
        .lock()
        .ok()
        .and_then(|bound| bound.get(&index).cloned())
        .unwrap_or_default();
    let arguments = match arguments {
        Value::Object(map) => Arc::unwrap_or_clone(map),
        Value::Null => ValueMap::new(),
        other => {
            return Err(BlockError::permanent(format!(
                "the arguments of tool `{}` must be an object, not {}",
                tool.id,
                other.kind_name()
            )));
        }
    };
    let ports = tool.node.ports();
    for (name, value) in arguments {
        let Some(spec) = ports.input(&name) else {
            return Err(BlockError::permanent(format!(
                "tool `{}` has no argument `{name}`",
                tool.id
            )));
        };
        if tool.inputs.iter().any(|slot| slot.port == name) {
            return Err(BlockError::permanent(format!(
                "`{name}` of tool `{}` is wired, so it is not an argument",
                tool.id
            )));
        }
        let value = coerce(value, &spec.ty).map_err(|e| BlockError::input(&name, e))?;
        inputs.insert(name, value);
    }
    if let Some(missing) = ports
        .inputs
        .iter()
        .find(|p| p.required && !inputs.contains_key(&p.name))
    {
        return Err(BlockError::permanent(format!(
            "tool `{}` needs argument `{}` ({})",
            tool.id, missing.name, missing.ty
        )));
    }
    Ok(inputs)
}

/// A node's description as a tool, from its ports and which of them are wired.
fn describe_tool(graph: &ValidGraph, index: usize) -> Value {
    let node = &graph.nodes[index];
    let wired: Vec<&str> = node.inputs.iter().map(|slot| slot.port.as_str()).collect();
    let label = graph
        .doc
        .nodes
        .iter()
        .find(|n| n.id == node.id)
        .and_then(|n| n.label.as_deref());
    tool_descriptor(&node.id, label, &node.meta, node.node.ports(), &wired)
}

/// The event that restates a row recorded in an earlier segment of the run: the node's
/// finish, failure or skip with its recorded attempts, duration and usage (`None` for a node
/// that had not finished).
fn restated(id: &str, progress: &NodeProgress) -> Option<EventKind> {
    let node = id.to_owned();
    let duration_ms = progress.duration_ms.unwrap_or(0);
    Some(match progress.status {
        NodeStatus::Done => EventKind::NodeFinished {
            node,
            outputs: progress.outputs.clone(),
            attempts: progress.attempts,
            duration_ms,
            usage: progress.usage,
        },
        NodeStatus::Failed => EventKind::NodeFailed {
            node,
            error: progress.error.clone().unwrap_or_default(),
            attempts: progress.attempts,
            duration_ms,
            usage: progress.usage,
            caught: progress.error_caught,
        },
        NodeStatus::Skipped => EventKind::NodeSkipped {
            node,
            reason: progress.skip_reason.clone().unwrap_or_default(),
            block: progress.block.clone(),
        },
        NodeStatus::Pending
        | NodeStatus::Queued
        | NodeStatus::Running
        | NodeStatus::AwaitingApproval
        | NodeStatus::AtBreakpoint => return None,
    })
}

/// A node whose outputs only feed tool wires (and its error): its consumers call it; the
/// dataflow does not run it.
fn only_a_tool(node: &ValidNode) -> bool {
    node.outputs.iter().any(|f| f.port == TOOL_PORT)
        && node
            .outputs
            .iter()
            .all(|f| f.port == TOOL_PORT || f.port == agentloom_core::ERROR_PORT)
}

impl NodeCtx {
    /// Adds to this node's and this run's usage, and tells the watchers.
    fn add_usage(&self, usage: Usage) {
        if let Ok(mut mine) = self.usage.lock() {
            *mine += usage;
        }
        if let Ok(mut total) = self.shared.usage.lock() {
            *total += usage;
        }
        self.shared.emit(EventKind::NodeUsage {
            node: self.node_id.clone(),
            usage,
        });
    }
}

impl Drop for NodeCtx {
    fn drop(&mut self) {
        // Reservations never settled (the request failed) go back to the budget.
        self.shared.limits.release_all(&self.budget);
    }
}

/// The result of running one node (all its attempts).
struct NodeOutcome {
    index: usize,
    result: Result<ValueMap, BlockError>,
    attempts: u32,
    duration_ms: u64,
    usage: Usage,
}

/// Per-node bookkeeping of the scheduler.
struct NodeState {
    status: NodeStatus,
    /// Wired inputs not yet settled (value or absent).
    waiting: usize,
    /// One slot per wired input: `None` until settled, `Some(None)` when absent.
    slots: Vec<Option<Option<Value>>>,
    attempts: u32,
    duration_ms: u64,
    error: Option<String>,
    usage: Usage,
}

struct Scheduler {
    graph: Arc<ValidGraph>,
    shared: Arc<RunShared>,
    states: Vec<NodeState>,
    /// Ready nodes keyed by topological rank.
    ready: BinaryHeap<Reverse<(usize, usize)>>,
    failure: Option<String>,
}

impl Scheduler {
    fn new(graph: Arc<ValidGraph>, shared: Arc<RunShared>) -> Self {
        let states = graph
            .nodes
            .iter()
            .map(|node| NodeState {
                status: NodeStatus::Pending,
                waiting: node.inputs.len(),
                slots: vec![None; node.inputs.len()],
                attempts: 0,
                duration_ms: 0,
                error: None,
                usage: Usage::default(),
            })
            .collect();
        Self {
            graph,
            shared,
            states,
            ready: BinaryHeap::new(),
            failure: None,
        }
    }

    async fn run(mut self, seeded: &BTreeMap<String, ValueMap>) -> RunReport {
        let graph = Arc::clone(&self.graph);
        self.shared.emit(EventKind::RunStarted {
            run_id: self.shared.run_id.clone(),
            graph_name: graph.doc.name.clone(),
            node_count: graph.nodes.len(),
            inputs: self.shared.inputs.clone(),
        });
        if self.shared.path_prefix.is_empty() {
            self.shared.record_catalog_calls();
        }
        // Seeded nodes finish first, in topological order, so their dependents see them;
        // all are marked first so that none is started by a seeded upstream. A node that
        // finished in an earlier segment of this run (a resumed run) finishes as recorded:
        // its attempts, duration and usage (already in the run's total, not spent again),
        // and a failure its error output caught fails the same way again.
        let shared = Arc::clone(&self.shared);
        let known: Vec<(usize, Result<ValueMap, BlockError>)> = graph
            .topo_order
            .iter()
            .filter_map(|&index| {
                let node = &graph.nodes[index];
                // A node wired only as a tool starts again: that binds its wired inputs
                // for the calls to come, and hands over its description.
                if only_a_tool(node) {
                    return None;
                }
                if let Some(outputs) = seeded.get(&node.id) {
                    return Some((index, Ok(outputs.clone())));
                }
                let recorded = shared.recorded_final(&node.id)?;
                let caught = recorded.status == NodeStatus::Failed
                    && recorded.error_caught
                    && node
                        .outputs
                        .iter()
                        .any(|f| f.port == agentloom_core::ERROR_PORT);
                caught.then(|| {
                    let message = recorded.error.clone().unwrap_or_default();
                    (index, Err(BlockError::permanent(message)))
                })
            })
            .collect();
        for (index, result) in &known {
            self.states[*index].status = if result.is_ok() {
                NodeStatus::Done
            } else {
                NodeStatus::Failed
            };
        }
        for (index, result) in known {
            let recorded = shared.recorded_final(&graph.nodes[index].id);
            self.finish(NodeOutcome {
                index,
                result,
                attempts: recorded.map_or(0, |r| r.attempts),
                duration_ms: recorded.and_then(|r| r.duration_ms).unwrap_or(0),
                usage: recorded.map(|r| r.usage).unwrap_or_default(),
            });
        }
        self.restate_recorded();
        for &index in &graph.topo_order {
            if graph.nodes[index].inputs.is_empty() && !self.states[index].status.is_final() {
                self.enqueue(index);
            }
        }

        // The time the run went on before it paused counts too.
        let deadline = graph.doc.settings.max_wall_ms.map(|ms| {
            let left = ms.saturating_sub(self.shared.duration_before_ms);
            tokio::time::Instant::now() + Duration::from_millis(left)
        });
        let mut running: FuturesUnordered<BoxFuture<'static, NodeOutcome>> =
            FuturesUnordered::new();
        loop {
            // Every ready node starts: a node that waits holds no slot, and CPU-bound work
            // is bounded by `cpu_slots` instead.
            while self.failure.is_none() && !self.shared.cancel.is_cancelled() {
                let Some(Reverse((_, index))) = self.ready.pop() else {
                    break;
                };
                if let Err(message) = self.shared.limits.take_step() {
                    self.shared.stop_for_limit(message);
                    break;
                }
                running.push(self.start(index));
            }
            if running.is_empty() {
                break;
            }
            let next = tokio::select! {
                biased;
                outcome = running.next() => outcome,
                () = self.shared.cancel.cancelled() => None,
                () = self.shared.pause.cancelled() => {
                    self.shared.cancel.cancel();
                    None
                }
                () = sleep_until(deadline) => {
                    if let Some(ms) = graph.doc.settings.max_wall_ms {
                        self.shared.stop_for_limit(format!("time limit reached: the run may take at most {ms} ms"));
                    }
                    None
                }
            };
            match next {
                Some(outcome) => self.finish(outcome),
                None => {
                    // Cancelled: give nodes a moment to notice their token, then drop them.
                    let grace = tokio::time::sleep(Duration::from_millis(200));
                    tokio::pin!(grace);
                    loop {
                        tokio::select! {
                            outcome = running.next() => match outcome {
                                Some(outcome) => self.finish(outcome),
                                None => break,
                            },
                            () = &mut grace => break,
                        }
                    }
                    break;
                }
            }
        }
        drop(running);
        self.report()
    }

    /// Restates the rows recorded in earlier segments of this run that no node of this run
    /// settles: those of nodes wired only as tools (called, not run by the dataflow) and
    /// those of sub-run nodes whose calling node does not run again (a calling node that
    /// runs again hands them to its sub-run, which restates them).
    fn restate_recorded(&self) {
        let graph = &self.graph;
        for (id, progress) in &self.shared.recorded {
            let nested = id.split_once('/').map(|(owner, _)| owner);
            let restate = match (nested, graph.index_of(nested.unwrap_or(id))) {
                (None, Some(index)) => only_a_tool(&graph.nodes[index]),
                (Some(_), Some(index)) => {
                    self.states[index].status.is_final() || only_a_tool(&graph.nodes[index])
                }
                (Some(_), None) => true,
                (None, None) => false,
            };
            let Some(kind) = restate.then(|| restated(id, progress)).flatten() else {
                continue;
            };
            // Queued first, which names its block (a sub-run's node is not in the graph).
            if nested.is_some() && !progress.block.is_empty() {
                self.shared.emit(EventKind::NodeQueued {
                    node: id.clone(),
                    block: progress.block.clone(),
                });
            }
            self.shared.emit(kind);
        }
    }

    fn enqueue(&mut self, index: usize) {
        self.states[index].status = NodeStatus::Queued;
        self.ready
            .push(Reverse((self.graph.topo_rank[index], index)));
        let node = &self.graph.nodes[index];
        // A node wired only as a tool runs when it is called, and says so then.
        if only_a_tool(node) {
            return;
        }
        self.shared.emit(EventKind::NodeQueued {
            node: node.id.clone(),
            block: node.meta.kind.clone(),
        });
    }

    /// Builds the future that runs node `index` through all its attempts.
    fn start(&mut self, index: usize) -> BoxFuture<'static, NodeOutcome> {
        let state = &mut self.states[index];
        state.status = NodeStatus::Running;
        let node = &self.graph.nodes[index];
        let mut inputs = ValueMap::new();
        let mut conversion_error = None;
        for (slot, value) in node.inputs.iter().zip(state.slots.iter_mut()) {
            if let Some(Some(value)) = value.take() {
                let value = if slot.compat == Compat::Exact {
                    Ok(value)
                } else {
                    coerce(value, &slot.ty)
                };
                match value {
                    Ok(value) if slot.many => {
                        let list = inputs
                            .entry(slot.port.clone())
                            .or_insert_with(|| Value::list(Vec::new()));
                        if let Some(items) = list.list_mut() {
                            items.push(value);
                        }
                    }
                    Ok(value) => {
                        inputs.insert(slot.port.clone(), value);
                    }
                    Err(err) => {
                        conversion_error.get_or_insert_with(|| {
                            BlockError::input(
                                &slot.port,
                                format!(
                                    "the value from `{}.{}` does not fit: {err}",
                                    self.graph.nodes[slot.source_node].id, slot.source_port
                                ),
                            )
                        });
                    }
                }
            }
        }
        if node.outputs.iter().any(|f| f.port == TOOL_PORT)
            && let Ok(mut bound) = self.shared.tool_inputs.lock()
        {
            bound.insert(index, inputs.clone());
        }
        if only_a_tool(node) {
            return Box::pin(std::future::ready(NodeOutcome {
                index,
                result: Ok(ValueMap::new()),
                attempts: 0,
                duration_ms: 0,
                usage: Usage::default(),
            }));
        }
        if node.bypass {
            // Not run: no approval, no side effect; its inputs are handed on.
            self.shared.emit(EventKind::NodeStarted {
                node: node.id.clone(),
                attempt: 1,
                inputs: inputs.clone(),
            });
            let outputs = agentloom_core::bypass_outputs(node.node.ports(), &inputs);
            return Box::pin(std::future::ready(NodeOutcome {
                index,
                result: Ok(outputs),
                attempts: 1,
                duration_ms: 0,
                usage: Usage::default(),
            }));
        }
        let graph = Arc::clone(&self.graph);
        let shared = Arc::clone(&self.shared);
        // A node that ran in an earlier segment of this run and runs again (it waited for
        // a decision, or the pause stopped it) reports what it had spent and taken then too.
        let (usage_before, duration_before) = shared
            .recorded
            .get(&node.id)
            .map(|progress| (progress.usage, progress.duration_ms.unwrap_or(0)))
            .unwrap_or_default();
        Box::pin(async move {
            let node = &graph.nodes[index];
            let started = Instant::now();
            // A breakpoint before the node: its inputs may be edited, or the run pauses here.
            if let Some(debug) = &shared.debug
                && conversion_error.is_none()
            {
                let ports = &node.node.ports().inputs;
                match breakpoint_pause::pause_at(
                    &shared,
                    debug,
                    &node.id,
                    BreakAt::Before,
                    ports,
                    inputs,
                )
                .await
                {
                    Ok(edited) => inputs = edited,
                    Err(err) => {
                        return NodeOutcome {
                            index,
                            result: Err(err),
                            attempts: 0,
                            duration_ms: duration_before,
                            usage: usage_before,
                        };
                    }
                }
            }
            let node_usage = Mutex::new(Usage::default());
            let mut previous_error: Option<String> = None;
            let mut attempt = 0;
            let result = loop {
                attempt += 1;
                shared.emit(EventKind::NodeStarted {
                    node: node.id.clone(),
                    attempt,
                    inputs: inputs.clone(),
                });
                if let Some(err) = conversion_error.take() {
                    break Err(err);
                }
                // A node resumed from a checkpoint was approved before it asked what it
                // waits on: the decision is for that question.
                if attempt == 1
                    && shared.safe_mode
                    && node.node.side_effects().unwrap_or(node.meta.side_effects)
                    && !shared.checkpoints.contains_key(&node.id)
                {
                    let mut request = ApprovalRequest::new(
                        approval_action(&node.meta.title, node.node.as_ref(), &inputs),
                        Value::object(inputs.clone()),
                    );
                    // The person sees where it goes: a configured URL, path or recipient.
                    if let Some(doc) = graph.doc.nodes.iter().find(|doc| doc.id == node.id) {
                        request = request.with_details(resolved_details(
                            &node.meta,
                            &doc.config,
                            &inputs,
                        ));
                    }
                    match ask_approval(&shared, &node.id, &request).await {
                        Ok(ApprovalDecision::Approved {
                            arguments: Value::Object(edited),
                        }) => inputs = Arc::unwrap_or_clone(edited),
                        Ok(ApprovalDecision::Approved { .. }) => {}
                        Ok(ApprovalDecision::Rejected { message }) => {
                            break Err(BlockError::permanent(format!(
                                "`{}` was not approved: {message}",
                                node.id
                            )));
                        }
                        Err(err) => break Err(err),
                    }
                }
                if let Some(gate) = &shared.side_effects
                    && node.node.side_effects().unwrap_or(node.meta.side_effects)
                    && let Err(message) = gate
                        .before_sending(
                            &format!("{}{}", shared.path_prefix, node.id),
                            attempt,
                            node.node
                                .idempotency_key(&shared.run_id, &node.id, &inputs)
                                .as_deref(),
                        )
                        .await
                {
                    break Err(BlockError::permanent(message));
                }
                let ctx = NodeCtx {
                    shared: Arc::clone(&shared),
                    node_id: node.id.clone(),
                    attempt,
                    previous_error: previous_error.take(),
                    cancel: shared.cancel.child_token(),
                    usage: Mutex::new(Usage::default()),
                    budget: NodeBudget::default(),
                };
                let attempt_result =
                    run_attempt(node.node.as_ref(), inputs.clone(), &ctx, node.timeout).await;
                if let (Ok(mut total), Ok(mine)) = (node_usage.lock(), ctx.usage.lock()) {
                    *total += *mine;
                }
                match attempt_result {
                    Ok(outputs) => break Ok(outputs),
                    Err(err)
                        if err.is_retryable()
                            && attempt < node.retry.max_attempts
                            && !shared.cancel.is_cancelled() =>
                    {
                        let wait = err
                            .retry_after
                            .unwrap_or_default()
                            .max(node.retry.backoff_before(attempt + 1));
                        shared.emit(EventKind::NodeRetrying {
                            node: node.id.clone(),
                            attempt,
                            error: err.message.clone(),
                            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        });
                        previous_error = Some(err.message);
                        tokio::select! {
                            () = tokio::time::sleep(wait) => {}
                            () = shared.cancel.cancelled() => break Err(BlockError::cancelled()),
                        }
                    }
                    Err(err) => break Err(err),
                }
            };
            // A breakpoint after the node: its outputs may be edited before its dependents
            // get them, or the run pauses here.
            let result = match (result, &shared.debug) {
                (Ok(outputs), Some(debug)) => {
                    let ports = &node.node.ports().outputs;
                    breakpoint_pause::pause_at(
                        &shared,
                        debug,
                        &node.id,
                        BreakAt::After,
                        ports,
                        outputs,
                    )
                    .await
                }
                (result, _) => result,
            };
            let mut usage = node_usage.lock().map(|u| *u).unwrap_or_default();
            usage += usage_before;
            NodeOutcome {
                index,
                result,
                attempts: attempt,
                duration_ms: elapsed_ms(started).saturating_add(duration_before),
                usage,
            }
        })
    }

    /// Records a node's outcome and settles its dependents' inputs.
    fn finish(&mut self, outcome: NodeOutcome) {
        let graph = Arc::clone(&self.graph);
        let node = &graph.nodes[outcome.index];
        let state = &mut self.states[outcome.index];
        state.attempts = outcome.attempts;
        state.duration_ms = outcome.duration_ms;
        state.usage = outcome.usage;
        if outcome.result.is_err() && self.shared.is_waiting(&node.id) {
            // Paused on an approval or at a breakpoint: its dependents wait with it, the
            // rest runs on.
            state.status = if self.shared.is_at_breakpoint(&node.id) {
                NodeStatus::AtBreakpoint
            } else {
                NodeStatus::AwaitingApproval
            };
            return;
        }
        match outcome.result {
            Ok(mut outputs) => {
                state.status = NodeStatus::Done;
                for fanout in &node.outputs {
                    let value = if fanout.port == TOOL_PORT {
                        Some(describe_tool(&graph, outcome.index))
                    } else {
                        outputs.get(&fanout.port).cloned()
                    };
                    for &(target, slot) in &fanout.targets {
                        self.settle(target, slot, value.clone());
                    }
                }
                // A node wired only as a tool has handed over its description, not run:
                // it has nothing to report (a finish without attempts reads as reused).
                if only_a_tool(node) {
                    return;
                }
                outputs.retain(|port, _| node.node.ports().outputs.iter().any(|p| &p.name == port));
                self.shared.emit(EventKind::NodeFinished {
                    node: node.id.clone(),
                    outputs,
                    attempts: outcome.attempts,
                    duration_ms: outcome.duration_ms,
                    usage: outcome.usage,
                });
            }
            Err(err) => {
                state.status = NodeStatus::Failed;
                state.error = Some(err.message.clone());
                let error_fanout = node
                    .outputs
                    .iter()
                    .find(|f| f.port == agentloom_core::ERROR_PORT);
                let caught = error_fanout.is_some() && err.class != ErrorClass::Cancelled;
                self.shared.emit(EventKind::NodeFailed {
                    node: node.id.clone(),
                    error: err.message.clone(),
                    attempts: outcome.attempts,
                    duration_ms: outcome.duration_ms,
                    usage: outcome.usage,
                    caught,
                });
                if caught {
                    let mut error_value = ValueMap::from([
                        ("message".to_owned(), Value::text(err.message.clone())),
                        ("node".to_owned(), Value::text(node.id.clone())),
                    ]);
                    if let Some(data) = err.data {
                        error_value.insert("data".to_owned(), data);
                    }
                    let error_value = Value::object(error_value);
                    for fanout in &node.outputs {
                        let value = (fanout.port == agentloom_core::ERROR_PORT)
                            .then(|| error_value.clone());
                        for &(target, slot) in &fanout.targets {
                            self.settle(target, slot, value.clone());
                        }
                    }
                } else if err.class == ErrorClass::Cancelled && self.shared.cancel.is_cancelled() {
                    // The run is stopping; the run's own status says why.
                } else if self.failure.is_none() {
                    self.failure = Some(format!("node `{}` failed: {}", node.id, err.message));
                    self.shared.cancel.cancel();
                }
            }
        }
    }

    /// Settles one input slot; starts or skips the node when it has all it needs.
    /// Iterative, so a skip that cascades down a long chain cannot overflow the stack.
    fn settle(&mut self, target: usize, slot: usize, value: Option<Value>) {
        let mut pending = vec![(target, slot, value)];
        while let Some((target, slot, value)) = pending.pop() {
            let state = &mut self.states[target];
            if state.slots[slot].is_some() {
                continue;
            }
            state.slots[slot] = Some(value);
            state.waiting -= 1;
            // A seeded node finished already, whatever its inputs.
            if state.waiting > 0 || state.status.is_final() {
                continue;
            }
            let node = &self.graph.nodes[target];
            let missing = node
                .inputs
                .iter()
                .zip(&state.slots)
                .find(|(spec, value)| spec.required && matches!(value, Some(None)));
            // A node whose inputs are all absent has nothing to work on, even if they are optional.
            let all_absent = state.slots.iter().all(|v| matches!(v, Some(None)));
            let skip_because = match missing {
                Some((spec, _)) => Some(spec),
                None if all_absent => node.inputs.first(),
                None => None,
            };
            if let Some(spec) = skip_because {
                let source = &self.graph.nodes[spec.source_node].id;
                let reason = format!(
                    "input `{}` has no value: `{source}.{}` was not produced",
                    spec.port, spec.source_port
                );
                state.status = NodeStatus::Skipped;
                self.shared.emit(EventKind::NodeSkipped {
                    node: node.id.clone(),
                    reason,
                    block: node.meta.kind.clone(),
                });
                for fanout in &node.outputs {
                    for &(next, next_slot) in &fanout.targets {
                        pending.push((next, next_slot, None));
                    }
                }
            } else {
                self.enqueue(target);
            }
        }
    }

    fn report(self) -> RunReport {
        let limit_error = self.shared.limit_error();
        let paused = self.shared.waiting.lock().is_ok_and(|w| !w.is_empty());
        let status = if self.failure.is_some() || limit_error.is_some() {
            RunStatus::Failed
        } else if paused && (!self.shared.cancel.is_cancelled() || self.shared.pause.is_cancelled())
        {
            RunStatus::Waiting
        } else if self.shared.cancel.is_cancelled()
            || self.states.iter().any(|s| !s.status.is_final())
        {
            RunStatus::Cancelled
        } else {
            RunStatus::Completed
        };
        let mut error = self
            .failure
            .clone()
            .or(limit_error)
            .or_else(|| match status {
                RunStatus::Cancelled => Some("the run was cancelled".to_owned()),
                RunStatus::Waiting => Some(waiting_message(&self.shared)),
                _ => None,
            });
        let mut outputs = self
            .shared
            .outputs
            .lock()
            .map(|o| o.clone())
            .unwrap_or_default();
        // The report goes to `--json` and the caller: the same redaction as the events.
        let redactor = &self.shared.redactor;
        redactor.option(&mut error);
        redactor.map(&mut outputs);
        let usage = self.shared.total_usage();
        let duration_ms = self.shared.duration_ms();
        self.shared.emit(EventKind::RunFinished {
            status,
            outputs: outputs.clone(),
            error: error.clone(),
            usage,
            duration_ms,
        });
        let shared = &self.shared;
        let mut nodes: Vec<NodeReport> = self
            .graph
            .nodes
            .iter()
            .zip(self.states)
            .map(|(node, state)| {
                // A tool's calls are its row; the dataflow only handed over its description.
                if only_a_tool(node)
                    && let Some(recorded) = shared.recorded_final(&node.id)
                {
                    return NodeReport {
                        id: node.id.clone(),
                        status: recorded.status,
                        attempts: recorded.attempts,
                        duration_ms: recorded.duration_ms.unwrap_or(0),
                        error: recorded.error.clone(),
                        usage: recorded.usage,
                    };
                }
                NodeReport {
                    id: node.id.clone(),
                    status: match state.status {
                        // A paused run's node waits for its decision, as `show` says too.
                        waiting @ (NodeStatus::AwaitingApproval | NodeStatus::AtBreakpoint)
                            if status == RunStatus::Waiting =>
                        {
                            waiting
                        }
                        NodeStatus::Queued
                        | NodeStatus::Running
                        | NodeStatus::AwaitingApproval
                        | NodeStatus::AtBreakpoint => NodeStatus::Pending,
                        other => other,
                    },
                    attempts: state.attempts,
                    duration_ms: state.duration_ms,
                    error: state.error.map(|mut error| {
                        redactor.text(&mut error);
                        error
                    }),
                    usage: state.usage,
                }
            })
            .collect();
        nodes.sort_by(|a, b| a.id.cmp(&b.id));
        RunReport {
            run_id: self.shared.run_id.clone(),
            status,
            outputs,
            nodes,
            usage,
            duration_ms,
            error,
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// One attempt: the node's own future, bounded by its timeout and the run's cancellation.
async fn run_attempt(
    node: &dyn NodeImpl,
    inputs: ValueMap,
    ctx: &NodeCtx,
    timeout: Option<Duration>,
) -> Result<ValueMap, BlockError> {
    let work = node.run(inputs, ctx);
    let bounded = async {
        match timeout {
            Some(limit) => match tokio::time::timeout(limit, work).await {
                Ok(result) => result,
                Err(_) => {
                    ctx.cancel.cancel();
                    Err(BlockError::transient(format!(
                        "timed out after {} ms",
                        limit.as_millis()
                    )))
                }
            },
            None => work.await,
        }
    };
    tokio::select! {
        biased;
        result = bounded => result,
        () = ctx.cancel.cancelled() => Err(BlockError::cancelled()),
    }
}

mod breakpoint_pause;

/// What a paused run waits for.
fn waiting_message(shared: &RunShared) -> String {
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

/// Asks the run's approver about `request` (or takes the decision made while the run was
/// paused); fails when nobody can answer, pauses the node when nobody can answer now.
async fn ask_approval(
    shared: &Arc<RunShared>,
    node: &str,
    request: &ApprovalRequest,
) -> Result<ApprovalDecision, BlockError> {
    // Asked and kept redacted: a secret in a node's inputs reaches no person and no log.
    let shown = shared.redactor.approval_request(request);
    let restore = |decision| Redactor::restore_decision(decision, request, &shown);
    if let Some(decision) = shared
        .decisions
        .lock()
        .ok()
        .and_then(|mut d| d.remove(node))
    {
        return Ok(restore(decision));
    }
    let Some(approver) = shared.executor.approver.clone() else {
        return Err(BlockError::permanent(format!(
            "safe mode: `{node}` ({}) has side effects and needs approval, but nobody can approve it here; run it from the app, or turn safe mode off",
            shown.action
        )));
    };
    shared.emit(EventKind::NodeAwaitingApproval {
        node: node.to_owned(),
    });
    tokio::select! {
        decision = approver.decide_or_pause(&shared.run_id, node, &shown) => match decision {
            Some(decision) => Ok(restore(decision)),
            None => Err(shared.wait_for_decision(node)),
        },
        () = shared.cancel.cancelled() => {
            if !shared.pause.is_cancelled() {
                return Err(BlockError::cancelled());
            }
            // Paused: the stored request keeps the node waiting for whoever decides later.
            Err(shared.wait_for_decision(node))
        }
    }
}
