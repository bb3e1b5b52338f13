//! What a block is: its description ([`BlockMeta`]), its config-dependent ports
//! ([`Ports`]), and how it runs ([`NodeImpl::run`] with a [`RunCtx`]).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::approval::{ApprovalDecision, ApprovalRequest};
use crate::config::{Config, ConfigError, ConfigField};
use crate::error::BlockError;
use crate::graph::GraphDoc;
use crate::hosts::{BoundHosts, preset_hosts, secret_env_var};
use crate::types::ValueType;
use crate::value::{Value, ValueMap};

/// The output every node has: wire it to catch the node's failure instead of failing the run.
pub const ERROR_PORT: &str = "error";

/// The output every node has that makes it a tool: wired to an input that takes tools (an
/// agent's `tools`), the node is not run by the dataflow but called by that consumer, with
/// its unwired inputs as the arguments. The value on the wire describes the tool
/// (`{name, node, description, parameters, side_effects}`).
pub const TOOL_PORT: &str = "tool";

/// One input or output of a node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PortSpec {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ValueType,
    /// An input the node cannot run without. Outputs are never required.
    pub required: bool,
    pub description: String,
    /// An input that takes any number of wires; the node receives their values as a list.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub many: bool,
}

impl PortSpec {
    pub fn new(name: impl Into<String>, ty: ValueType) -> Self {
        Self {
            name: name.into(),
            ty,
            required: true,
            description: String::new(),
            many: false,
        }
    }

    #[must_use]
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// The type one wire into this input must fit: the item type of a many-wire list
    /// input, else the port's type.
    pub fn wire_type(&self) -> &ValueType {
        match (&self.ty, self.many) {
            (ValueType::List(item), true) => item,
            (ty, _) => ty,
        }
    }

    /// Lets the input take many wires (its value is then the list of theirs).
    #[must_use]
    pub fn many(mut self) -> Self {
        self.many = true;
        self
    }

    #[must_use]
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }
}

/// The ports of one node, as they follow from its config.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Ports {
    pub inputs: Vec<PortSpec>,
    /// Declared outputs; the implicit [`ERROR_PORT`] is not listed here.
    pub outputs: Vec<PortSpec>,
}

impl Ports {
    pub fn new(inputs: Vec<PortSpec>, outputs: Vec<PortSpec>) -> Self {
        Self { inputs, outputs }
    }

    pub fn input(&self, name: &str) -> Option<&PortSpec> {
        self.inputs.iter().find(|p| p.name == name)
    }

    /// Finds an output, including the implicit `error` and `tool` outputs.
    pub fn output(&self, name: &str) -> Option<PortSpec> {
        if let Some(port) = self.outputs.iter().find(|p| p.name == name) {
            return Some(port.clone());
        }
        match name {
            ERROR_PORT => Some(error_port()),
            TOOL_PORT => Some(tool_port()),
            _ => None,
        }
    }

    /// Declared outputs followed by the implicit `error` and `tool` outputs.
    pub fn outputs_with_error(&self) -> Vec<PortSpec> {
        let mut all = self.outputs.clone();
        if !all.iter().any(|p| p.name == ERROR_PORT) {
            all.push(error_port());
        }
        if !all.iter().any(|p| p.name == TOOL_PORT) {
            all.push(tool_port());
        }
        all
    }
}

fn tool_port() -> PortSpec {
    PortSpec::new(TOOL_PORT, ValueType::Tool).describe(
        "This node as a tool: wire it to an agent's `tools` input and the agent calls it, with the unwired inputs as arguments.",
    )
}

fn error_port() -> PortSpec {
    PortSpec::new(ERROR_PORT, ValueType::Object).describe(
        "The failure of this node ({message, node, data}); wiring it keeps the run going.",
    )
}

/// A block's description: what the palette, the inspector and `agentloom blocks` show.
#[derive(Clone, Debug, Serialize)]
pub struct BlockMeta {
    /// Stable kind id, `family.name`, e.g. `http.request`.
    pub kind: String,
    pub title: String,
    /// Palette group, e.g. `Control`, `Data`, `Network`.
    pub category: String,
    pub description: String,
    pub config: Vec<ConfigField>,
    /// Writes to the outside world (sends, creates, deletes): safe mode asks before running it.
    pub side_effects: bool,
    /// The credential provider this block needs (`github`, `openai`…), if any.
    pub credential: Option<String>,
}

impl BlockMeta {
    pub fn new(kind: &str, title: &str, category: &str, description: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            title: title.to_owned(),
            category: category.to_owned(),
            description: description.to_owned(),
            config: Vec::new(),
            side_effects: false,
            credential: None,
        }
    }

    #[must_use]
    pub fn field(mut self, field: ConfigField) -> Self {
        self.config.push(field);
        self
    }

    #[must_use]
    pub fn with_side_effects(mut self) -> Self {
        self.side_effects = true;
        self
    }

    #[must_use]
    pub fn needs_credential(mut self, provider: &str) -> Self {
        self.credential = Some(provider.to_owned());
        self
    }

    /// The JSON Schema of this block's config, generated from its field list.
    pub fn config_schema(&self) -> serde_json::Value {
        crate::config::fields_json_schema(&self.config)
    }
}

/// A kind of block, registered in a catalog. Turns a config into a runnable node.
pub trait Block: Send + Sync + 'static {
    fn meta(&self) -> &BlockMeta;

    /// Reads and checks `config` once, and returns the node that runs with it.
    /// Ports may depend on the config (a template's variables become inputs) and on what
    /// `ctx` holds (a for-each takes the ports of the block it wraps from the catalog).
    fn instantiate(
        &self,
        config: &Config,
        ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError>;
}

/// The set of blocks a graph may use, and what its blocks see while they are configured.
pub trait BlockCatalog: Send + Sync {
    fn block(&self, kind: &str) -> Option<&dyn Block>;
    /// Every block, sorted by kind id.
    fn blocks(&self) -> Vec<&dyn Block>;
    /// What a node's block is given while it reads the node's config.
    fn config_ctx(&self) -> ConfigCtx<'_>;
    /// Answers the catalog got from outside while it was built (an MCP server's tool
    /// list), kept with every run so that a replay needs none of them.
    fn catalog_calls(&self) -> Vec<crate::CatalogCall> {
        Vec::new()
    }
}

/// What a block may consult while it reads a node's config; made by the catalog the
/// graph is checked against ([`BlockCatalog::config_ctx`]).
#[derive(Clone, Copy)]
pub struct ConfigCtx<'a> {
    /// The graph's blocks, its MCP tools included: a block that wraps another looks it up here.
    pub catalog: &'a dyn BlockCatalog,
    /// The graph file holding the node, once saved: relative paths are resolved against it.
    pub graph_file: Option<&'a Path>,
    /// Reads the graph files that `graph.call` nodes run; `None` where none may be read.
    pub called_graphs: Option<&'a dyn CalledGraphs>,
}

impl<'a> ConfigCtx<'a> {
    /// The blocks of `catalog`, for a graph that has no file and reads no other.
    pub fn new(catalog: &'a dyn BlockCatalog) -> Self {
        Self {
            catalog,
            graph_file: None,
            called_graphs: None,
        }
    }
}

/// Reads the graph files a catalog's `graph.call` nodes run, each once per validation,
/// and keeps what it read so that a run is recorded with it.
pub trait CalledGraphs: Send + Sync {
    /// The graph file at `path` (absolute, or relative to the working directory), after
    /// checking it and every file it calls in turn; the error says what is wrong and where.
    fn load(&self, path: &Path) -> Result<Arc<GraphDoc>, String>;
}

/// How a node takes part in the graph's interface, if it does.
#[derive(Clone, Debug, PartialEq)]
pub enum GraphInterface {
    /// Receives a run input (asked of the user, or `--input name=…`).
    Input(RunInput),
    /// Publishes its value as the run output `name`.
    Output { name: String },
}

/// A run input a graph declares.
#[derive(Clone, Debug, PartialEq)]
pub struct RunInput {
    pub name: String,
    pub ty: ValueType,
    /// Used when the run is given no value.
    pub default: Option<Value>,
    /// What to give, for the person starting the run; may be empty.
    pub description: String,
    /// Declared `"type": "secret"`: the value (text) is a secret of the run, redacted
    /// wherever the run writes and sent only to these hosts (none when empty).
    pub secret: Option<crate::BoundHosts>,
}

/// A configured node, ready to run any number of times.
#[async_trait::async_trait]
pub trait NodeImpl: Send + Sync {
    fn ports(&self) -> &Ports;

    /// Whether this node is one of the graph's inputs or outputs.
    fn interface(&self) -> Option<GraphInterface> {
        None
    }

    /// Whether running this node changes the outside world (sends, writes, deletes), as its
    /// config decides (an HTTP `POST` does, a `GET` does not). `None`: as the block declares
    /// ([`BlockMeta::side_effects`]). Safe mode asks before a node that has side effects.
    fn side_effects(&self) -> Option<bool> {
        None
    }

    /// What running with `inputs` will do, in a few words for the person asked to approve
    /// it (`POST https://api.example.com/items`, `write notes/today.md`); `None` when the
    /// block's title says it all. Every approval prompt shows it (the terminal, the app,
    /// `agentloom show`, remote approvals), for a node and for each item a for-each runs.
    fn describe(&self, inputs: &ValueMap) -> Option<String> {
        let _ = inputs;
        None
    }

    /// The idempotency key this node sends with `inputs` as node `node_id` of run `run_id`
    /// ([`RunCtx::run_id`] and [`RunCtx::node_id`] while it runs), when it sends one: the
    /// service performs requests with the same key once. Whoever runs the run records it
    /// with the side effect's start, so that a run taken over after a crash sends the same
    /// request again with the same key rather than failing as "may have happened". `None`
    /// (the default): no key, and a side effect in doubt is never sent again.
    fn idempotency_key(&self, run_id: &str, node_id: &str, inputs: &ValueMap) -> Option<String> {
        let _ = (run_id, node_id, inputs);
        None
    }

    /// Runs once. Inputs have been checked against the ports; outputs not produced are
    /// treated as not taken (their downstream is skipped).
    async fn run(&self, inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError>;
}

/// Tokens and money spent by a node or a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

impl Usage {
    pub fn is_zero(&self) -> bool {
        self.input_tokens == 0 && self.output_tokens == 0 && self.cost_usd == 0.0
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens += rhs.input_tokens;
        self.output_tokens += rhs.output_tokens;
        self.cost_usd += rhs.cost_usd;
    }
}

/// What a secret is replaced with in output.
pub const REDACTED: &str = "[redacted]";

/// A secret value and the hosts it may be sent to. Its `Debug` and `Display` never show it.
#[derive(Clone)]
pub struct Secret {
    value: String,
    hosts: BoundHosts,
}

impl Secret {
    /// A secret bound to no host: a run refuses to send it anywhere until it is
    /// [`Secret::bound_to`] some.
    pub fn new(value: impl Into<String>) -> Self {
        Self {
            value: value.into(),
            hosts: BoundHosts::none(),
        }
    }

    #[must_use]
    pub fn bound_to(mut self, hosts: BoundHosts) -> Self {
        self.hosts = hosts;
        self
    }

    /// The secret itself: pass it to the wire, never to a log or an error.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// The hosts it may be sent to.
    pub fn hosts(&self) -> &BoundHosts {
        &self.hosts
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A credential could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error(
        "credential `{name}` is not set: add it in Credentials, or set the environment variable {env_var} for headless runs"
    )]
    Missing { name: String, env_var: String },
    #[error("the keychain could not be reached ({detail}); {hint}")]
    Unavailable { detail: String, hint: String },
    /// The credential exists but could not be used (e.g. an OAuth refresh was refused).
    #[error("credential `{name}`: {message}")]
    Unusable { name: String, message: String },
}

/// Where secrets come from (keychain, environment…). Implemented by the engine.
pub trait SecretSource: Send + Sync {
    fn secret(&self, name: &str) -> Result<Secret, SecretError>;

    /// A new secret for credential `name` after a service refused `refused` (HTTP 401).
    /// For an OAuth token set: refreshes it, stores the new tokens (a rotated refresh token
    /// included) and returns the new access token; when the stored token already differs
    /// from `refused` (another node refreshed it meanwhile), returns that one without a new
    /// refresh. `Ok(None)` when the credential cannot be refreshed (an API key, an
    /// environment variable): the refusal stands. `Err` when the refresh itself failed.
    fn refresh_secret(&self, name: &str, refused: &Secret) -> Result<Option<Secret>, SecretError> {
        let _ = (name, refused);
        Ok(None)
    }
}

/// Credential `name` from the environment (`AGENTLOOM_SECRET_<NAME>`), if set, bound to the
/// hosts in `AGENTLOOM_SECRET_<NAME>_HOSTS` (comma-separated; `*` for any host), else to
/// the API hosts of the provider of that name ([`preset_hosts`]), else to none.
pub fn env_secret(name: &str) -> Result<Option<Secret>, SecretError> {
    let env_var = secret_env_var(name);
    let Some(value) = std::env::var(&env_var).ok().filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let hosts_var = format!("{env_var}_HOSTS");
    let hosts = match std::env::var(&hosts_var) {
        Ok(list) => BoundHosts::parse_list(&list).map_err(|problem| SecretError::Unusable {
            name: name.to_owned(),
            message: format!("{hosts_var}: {problem}"),
        })?,
        Err(_) => BoundHosts::parse(preset_hosts(name)).unwrap_or_default(),
    };
    Ok(Some(Secret::new(value).bound_to(hosts)))
}

/// What a running node can ask of the run.
#[async_trait::async_trait]
pub trait RunCtx: Send + Sync {
    fn run_id(&self) -> &str;
    fn node_id(&self) -> &str;
    /// 1 for the first attempt.
    fn attempt(&self) -> u32;
    /// The error of the previous attempt, to feed back to a model on retry.
    fn previous_error(&self) -> Option<&str>;
    /// Cancelled when the run is stopped or this node timed out.
    fn cancel_token(&self) -> &CancellationToken;
    /// Whether [`RunCtx::cancel_token`] is cancelled, asked without making the token when
    /// the context makes it only once a node asks for it.
    fn is_cancelled(&self) -> bool {
        self.cancel_token().is_cancelled()
    }
    /// Streams a piece of output as it arrives (e.g. LLM tokens) to the canvas.
    fn partial(&self, port: &str, chunk: &str);
    /// Adds tokens and cost to this node and the run; the run's cost limit is checked here.
    fn report_usage(&self, usage: Usage);
    /// Sets `estimate_usd` aside from the run's `max_cost_usd` before a paid request is
    /// sent, so requests in flight cannot overshoot it together; fails when the budget cannot
    /// cover it. Settle with [`RunCtx::settle_cost`] once the real usage is known.
    fn reserve_cost(&self, estimate_usd: f64) -> Result<(), BlockError> {
        let _ = estimate_usd;
        Ok(())
    }
    /// Gives back a reservation made with [`RunCtx::reserve_cost`] and reports the real usage.
    fn settle_cost(&self, reserved_usd: f64, usage: Usage) {
        let _ = reserved_usd;
        self.report_usage(usage);
    }
    /// The credential called `name`, from the keychain or the environment.
    fn secret(&self, name: &str) -> Result<Secret, SecretError>;
    /// After a service refused `refused` with HTTP 401: a refreshed secret for credential
    /// `name` (see [`SecretSource::refresh_secret`]), or `Ok(None)` when it cannot be refreshed.
    /// Blocks call this at most once per request, then retry that request once.
    fn refresh_secret(&self, name: &str, refused: &Secret) -> Result<Option<Secret>, SecretError> {
        let _ = (name, refused);
        Ok(None)
    }
    /// Keeps `secret` out of everything the run emits, as [`RunCtx::secret`] does for the
    /// secrets it resolves: for a secret a block was handed before the run (the token of an
    /// MCP server, given when the server was connected).
    fn redact_secret(&self, secret: &Secret) {
        let _ = secret;
    }
    /// The directory file blocks are confined to.
    fn workspace(&self) -> &Path;
    /// The value given for run input `name`, if any.
    fn graph_input(&self, name: &str) -> Option<Value>;
    /// Publishes run output `name`.
    fn set_graph_output(&self, name: &str, value: Value);
    /// Runs `graph` as a sub-run with the given inputs and returns its outputs.
    async fn run_subgraph(
        &self,
        graph: &GraphDoc,
        inputs: ValueMap,
    ) -> Result<ValueMap, BlockError>;
    /// [`RunCtx::run_subgraph`], with the sub-run's node events passed on to the run as
    /// nodes `{this node}/{node}`, or `{this node}/{scope}/{node}` (a for-each item index), so
    /// the run log and the run panel show them nested under this node.
    async fn run_subgraph_in(
        &self,
        graph: &GraphDoc,
        inputs: ValueMap,
        scope: Option<&str>,
    ) -> Result<ValueMap, BlockError> {
        let _ = scope;
        self.run_subgraph(graph, inputs).await
    }
    /// Instantiates block `kind` with `config` from the run's catalog (for blocks that run blocks).
    fn instantiate(&self, kind: &str, config: &Config) -> Result<Arc<dyn NodeImpl>, BlockError>;
    /// Whether the run asks a person before side effects.
    fn safe_mode(&self) -> bool;
    /// Whether this run may reach loopback, private and link-local addresses (this machine,
    /// the local network, a cloud metadata service) through URLs the graph chose: an
    /// `http.request` or an agent's `http_get` with `allow_private_network: true`, the
    /// instance a `web.search` asks. A graph file's own say-so is worth only as much as the
    /// file: one that is not trusted must not reach the machine's services unasked, so its
    /// runs answer `false` and the shared HTTP client (blocks/src/net.rs) then connects to
    /// public addresses only, whatever the graph asks (in safe mode a person may still let
    /// one request through). Model providers and MCP servers are not held to it: a shared
    /// graph using a local model still runs. `true` unless the run was told otherwise.
    fn private_network_allowed(&self) -> bool {
        true
    }
    /// Asks before a side effect this node is about to cause (a tool call, a send). Outside
    /// safe mode it answers at once with the request's own arguments. In safe mode it waits
    /// for a person, who may edit the arguments or reject with a message; it fails (not
    /// approved) when nobody can answer.
    async fn request_approval(
        &self,
        request: ApprovalRequest,
    ) -> Result<ApprovalDecision, BlockError>;
    /// After a paused run was resumed: the checkpoint stored with the approval this node
    /// was waiting on (see [`ApprovalRequest::checkpoint`]).
    fn resume_checkpoint(&self) -> Option<crate::value::Value> {
        None
    }
    /// Like [`RunCtx::request_approval`], but asks even outside safe mode: the graph itself
    /// says a person decides here (`human.approval`).
    async fn ask_person(&self, request: ApprovalRequest) -> Result<ApprovalDecision, BlockError> {
        self.request_approval(request).await
    }
    /// Calls node `node`, whose `tool` output is wired to this node, with `arguments` (an
    /// object) for its unwired inputs; its wired inputs keep their upstream values. Returns
    /// the node's outputs, or its error.
    async fn call_tool(&self, node: &str, arguments: Value) -> Result<ValueMap, BlockError> {
        let _ = arguments;
        Err(BlockError::permanent(format!(
            "tool `{node}` cannot be called here: this run has no wired tools"
        )))
    }
    /// Runs CPU-bound work (rendering, parsing large values) off the scheduler, on a pool
    /// bounded by the run's `concurrency` (the cores by default). Returns when the job is
    /// done, or fails as cancelled when the node is stopped first (the job should also
    /// watch [`RunCtx::cancel_token`] to end early). Without a pool it runs the job inline.
    /// Blocks call it through [`run_cpu_bound`].
    async fn run_cpu(&self, job: CpuJob) -> Result<(), BlockError> {
        job();
        Ok(())
    }
    /// Waits for a slot to send a request to `url`'s host (an API, an LLM provider's
    /// base_url): the run's `requests_per_host` bounds how many are in flight at once per
    /// host. Hold the slot until the answer is read. Fails as cancelled when the node is
    /// stopped while waiting. Without limits it answers at once.
    async fn request_slot(&self, url: &str) -> Result<RequestSlot, BlockError> {
        let _ = url;
        Ok(RequestSlot::unlimited())
    }
    /// Before a request to `url` leaves: fails, naming the credential and the host, when
    /// the URL or any of `parts` (header values, the body) carries a secret this run
    /// resolved (in any common encoding: escaped, Base64, hex, case changed) that is not
    /// bound to `url`'s host. The shared HTTP client calls it before every send and every
    /// redirect it follows.
    fn check_egress(&self, url: &url::Url, parts: &[&[u8]]) -> Result<(), BlockError> {
        let _ = (url, parts);
        Ok(())
    }
    /// The memory this run's graph keeps across runs, when the run is recorded in a run
    /// log (`memory.get`/`memory.set`, an agent's notes).
    fn memory(&self) -> Option<Arc<dyn crate::GraphMemory>> {
        None
    }
    /// Before `call` leaves: whether the run replays a recording and has its answer.
    fn replay_call(&self, call: &crate::OutboundCall<'_>) -> crate::Replayed {
        let _ = call;
        crate::Replayed::Live
    }
    /// A live `call` is about to be made: how to keep its response in the run log, if the
    /// run records calls.
    fn record_call(&self, call: &crate::OutboundCall<'_>) -> Option<crate::CallRecording> {
        let _ = call;
        None
    }
}

/// A slot for one outbound request (see [`RunCtx::request_slot`]); freed when dropped.
pub struct RequestSlot(
    #[allow(dead_code, reason = "held for its drop")] Option<Box<dyn Send + Sync>>,
);

impl RequestSlot {
    /// A slot that limits nothing.
    pub fn unlimited() -> Self {
        Self(None)
    }

    /// A slot that frees `guard` when dropped.
    pub fn holding(guard: impl Send + Sync + 'static) -> Self {
        Self(Some(Box::new(guard)))
    }
}

/// A piece of CPU-bound work handed to [`RunCtx::run_cpu`].
pub type CpuJob = Box<dyn FnOnce() + Send + 'static>;

/// Runs `work` through [`RunCtx::run_cpu`] and returns its result.
pub async fn run_cpu_bound<T: Send + 'static>(
    ctx: &dyn RunCtx,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BlockError> {
    let slot = Arc::new(std::sync::Mutex::new(None));
    let filled = Arc::clone(&slot);
    ctx.run_cpu(Box::new(move || {
        let result = work();
        if let Ok(mut slot) = filled.lock() {
            *slot = Some(result);
        }
    }))
    .await?;
    let result = slot.lock().ok().and_then(|mut slot| slot.take());
    result.ok_or_else(|| BlockError::permanent("the work ended without a result (it panicked)"))
}

impl From<SecretError> for BlockError {
    fn from(err: SecretError) -> Self {
        BlockError::permanent(err.to_string())
    }
}

/// Reads typed inputs with errors that name the port.
pub trait InputsExt {
    fn take_value(&mut self, port: &str) -> Result<Value, BlockError>;
    fn take_text(&mut self, port: &str) -> Result<String, BlockError>;
    fn take_optional(&mut self, port: &str) -> Option<Value>;
}

impl InputsExt for ValueMap {
    fn take_value(&mut self, port: &str) -> Result<Value, BlockError> {
        self.remove(port)
            .ok_or_else(|| BlockError::input(port, "no value arrived"))
    }

    fn take_text(&mut self, port: &str) -> Result<String, BlockError> {
        match self.take_value(port)? {
            Value::Text(s) => Ok(std::sync::Arc::unwrap_or_clone(s)),
            other => Ok(other.to_text()),
        }
    }

    fn take_optional(&mut self, port: &str) -> Option<Value> {
        self.remove(port).filter(|v| *v != Value::Null)
    }
}

/// Builds an output map from `(port, value)` pairs.
pub fn outputs<const N: usize>(pairs: [(&str, Value); N]) -> ValueMap {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// What an approval prompt calls a node's action: `title` (the block's, or what a for-each
/// item is called), then what the node will do with `inputs` when it says
/// ([`NodeImpl::describe`]): `HTTP request: POST http://127.0.0.1:8080/items`.
pub fn approval_action(title: &str, node: &dyn NodeImpl, inputs: &ValueMap) -> String {
    match node.describe(inputs) {
        Some(what) => format!("{title}: {what}"),
        None => title.to_owned(),
    }
}

/// What a node will do, for an approval prompt: the defaults of its block's config fields,
/// its config over them, and its inputs over both (an input may replace a configured URL).
pub fn resolved_details(meta: &BlockMeta, config: &Config, inputs: &ValueMap) -> Value {
    let mut details = ValueMap::new();
    for field in &meta.config {
        if let Some(default) = &field.default {
            details.insert(field.name.clone(), Value::from_json(default.clone()));
        }
    }
    for (name, value) in config {
        details.insert(name.clone(), Value::from_json(value.clone()));
    }
    for (name, value) in inputs {
        details.insert(name.clone(), value.clone());
    }
    Value::object(details)
}
