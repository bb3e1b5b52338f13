//! The executor: runs a [`ValidGraph`] as a dataflow.
//!
//! One scheduler task owns all run state; node futures are polled on it through a
//! `FuturesUnordered` (no task spawn per node, no locks on the hot path), a node started
//! while nothing else runs polled once before it goes there, in the order the set would. A node starts when
//! every wired input has either a value or is known to be absent. A node whose required input
//! is absent is skipped, and its outputs become absent in turn: that is how untaken branches
//! are skipped, with no sentinel value on the wires. Ready nodes start in topological order,
//! so event order is deterministic for equal inputs.
//!
//! The rooms: `scheduler` (the dataflow: what is ready, what finished, the report),
//! `node_run` (one node through its approval, attempts and retries), `node_ctx` (what a
//! running node sees: the `RunCtx`), `sub_runs` (a graph run inside a node), `tools` (a node
//! called as a tool), `approval` (asking a person), `shared` (the state every node of a run
//! shares), `breakpoint_pause` (a run being debugged), `env_secrets` (the secret source
//! by default).

mod approval;
mod breakpoint_pause;
mod env_secrets;
mod node_ctx;
mod node_run;
mod scheduler;
mod shared;
mod sub_runs;
mod tools;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agentloom_core::{BlockCatalog, SecretSource, Usage, ValidGraph, ValueMap};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use self::scheduler::Scheduler;
use self::shared::{RequestSlots, RunShared};
use crate::approver::Approver;
use crate::breakpoints::RunDebug;
use crate::events::{EventSink, NodeStatus, RunStatus};
use crate::limits::RunLimits;
use crate::redact::Redactor;
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
            events_wanted: sink.wants_events(),
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
    if !graph.any_pinned() {
        return seed;
    }
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

/// Requests in flight at once to one host when the graph does not say.
pub const DEFAULT_REQUESTS_PER_HOST: usize = 8;

pub use env_secrets::EnvSecrets;
