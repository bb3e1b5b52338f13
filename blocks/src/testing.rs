//! Helpers for testing blocks without the executor: a [`TestCtx`] that records what a node
//! does, and [`run_block`] to instantiate and run a built-in block in one call.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, BlockCatalog as _, BlockError, BoundHosts,
    CancellationToken, Config, GraphDoc, NodeImpl, RunCtx, Secret, SecretError, Usage, Value,
    ValueMap, async_trait, secret_env_var,
};

use crate::Registry;

/// A [`RunCtx`] for tests: run inputs and secrets from memory, and a record of partial
/// output, usage and run outputs.
pub struct TestCtx {
    run_id: String,
    node_id: String,
    attempt: u32,
    previous_error: Option<String>,
    cancel: CancellationToken,
    workspace: PathBuf,
    graph_inputs: ValueMap,
    secrets: Mutex<BTreeMap<String, String>>,
    /// The hosts of credentials bound to some only ([`TestCtx::with_bound_secret`]);
    /// the others may go anywhere.
    secret_hosts: BTreeMap<String, BoundHosts>,
    /// Secrets not set fail as on a machine with no keychain, not as missing.
    no_keychain: bool,
    /// What [`RunCtx::refresh_secret`] gives per credential: a new value, or an error text.
    refresh_plans: BTreeMap<String, Result<String, String>>,
    refreshes: Mutex<Vec<String>>,
    partials: Mutex<Vec<(String, String)>>,
    usage: Mutex<Usage>,
    graph_outputs: Mutex<ValueMap>,
    /// Safe mode: approvals are answered from `decisions`, in order.
    safe_mode: bool,
    decisions: Mutex<VecDeque<ApprovalDecision>>,
    approval_requests: Mutex<Vec<ApprovalRequest>>,
    /// What [`RunCtx::resume_checkpoint`] gives: as after a paused run was resumed.
    resume: Option<Value>,
    /// What [`RunCtx::private_network_allowed`] gives.
    private_network: bool,
    /// The blocks [`RunCtx::instantiate`] makes nodes of: the built-in set.
    catalog: Registry,
}

impl Default for TestCtx {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCtx {
    /// A context whose workspace is the system temp dir; use [`TestCtx::with_workspace`]
    /// for tests that touch files.
    pub fn new() -> Self {
        Self {
            run_id: "test-run".to_owned(),
            node_id: "test-node".to_owned(),
            attempt: 1,
            previous_error: None,
            cancel: CancellationToken::new(),
            workspace: std::env::temp_dir(),
            graph_inputs: ValueMap::new(),
            secrets: Mutex::new(BTreeMap::new()),
            secret_hosts: BTreeMap::new(),
            no_keychain: false,
            refresh_plans: BTreeMap::new(),
            refreshes: Mutex::new(Vec::new()),
            partials: Mutex::new(Vec::new()),
            usage: Mutex::new(Usage::default()),
            graph_outputs: Mutex::new(ValueMap::new()),
            safe_mode: false,
            decisions: Mutex::new(VecDeque::new()),
            approval_requests: Mutex::new(Vec::new()),
            resume: None,
            private_network: true,
            catalog: Registry::builtin(),
        }
    }

    /// Credential `name` bound to `hosts` only (`host` or `host:port`), as one stored with
    /// `agentloom credentials add --host`.
    #[must_use]
    pub fn with_bound_secret(mut self, name: &str, value: &str, hosts: &[&str]) -> Self {
        let bound = BoundHosts::parse(hosts).unwrap_or_default();
        self.secret_hosts.insert(name.to_owned(), bound);
        self.with_secret(name, value)
    }

    /// Secrets not set fail with "the keychain could not be reached", as on a headless
    /// machine without a Secret Service.
    #[must_use]
    pub fn without_keychain(mut self) -> Self {
        self.no_keychain = true;
        self
    }

    /// Turns safe mode on: each approval request takes the next of `decisions`; once they
    /// run out, requests are refused as nobody is there to answer.
    #[must_use]
    pub fn with_safe_mode(mut self, decisions: Vec<ApprovalDecision>) -> Self {
        self.safe_mode = true;
        self.decisions = Mutex::new(decisions.into());
        self
    }

    /// Resumes a paused node: [`RunCtx::resume_checkpoint`] gives `checkpoint`.
    #[must_use]
    pub fn with_resume_checkpoint(mut self, checkpoint: Value) -> Self {
        self.resume = Some(checkpoint);
        self
    }

    /// Whether the run may reach the private network through URLs the graph chose
    /// ([`RunCtx::private_network_allowed`]): `false` as for a graph file that is not trusted.
    #[must_use]
    pub fn with_private_network(mut self, allowed: bool) -> Self {
        self.private_network = allowed;
        self
    }

    /// The approval requests made so far, in order.
    pub fn approval_requests(&self) -> Vec<ApprovalRequest> {
        self.approval_requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    #[must_use]
    pub fn with_workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = dir.into();
        self
    }

    /// Gives run input `name`.
    #[must_use]
    pub fn with_input(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.graph_inputs.insert(name.to_owned(), value.into());
        self
    }

    #[must_use]
    pub fn with_secret(self, name: &str, value: &str) -> Self {
        self.secrets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), value.to_owned());
        self
    }

    /// Makes credential `name` refreshable, as an OAuth sign-in is: a refresh after a 401
    /// replaces its value with `fresh`.
    #[must_use]
    pub fn with_refresh(mut self, name: &str, fresh: &str) -> Self {
        self.refresh_plans
            .insert(name.to_owned(), Ok(fresh.to_owned()));
        self
    }

    /// Makes a refresh of credential `name` fail with `message` (as a refused refresh token).
    #[must_use]
    pub fn with_failing_refresh(mut self, name: &str, message: &str) -> Self {
        self.refresh_plans
            .insert(name.to_owned(), Err(message.to_owned()));
        self
    }

    /// The credentials refreshed so far, once per refresh, in order.
    pub fn refreshes(&self) -> Vec<String> {
        self.refreshes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    #[must_use]
    pub fn with_node_id(mut self, id: &str) -> Self {
        self.node_id = id.to_owned();
        self
    }

    /// Makes this a retry: attempt `attempt`, after `previous_error`.
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32, previous_error: Option<&str>) -> Self {
        self.attempt = attempt;
        self.previous_error = previous_error.map(str::to_owned);
        self
    }

    /// Cancels the run, as the stop button would.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Every `(port, chunk)` streamed so far, in order.
    pub fn partials(&self) -> Vec<(String, String)> {
        self.partials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The sum of the usage reported so far.
    pub fn usage(&self) -> Usage {
        *self.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The run outputs published so far.
    pub fn graph_outputs(&self) -> ValueMap {
        self.graph_outputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A test secret, bound to every host: block tests send to local servers on any port.
fn any_host(value: &str) -> Secret {
    Secret::new(value).bound_to(BoundHosts::parse(&["*"]).unwrap_or_default())
}

#[async_trait]
impl RunCtx for TestCtx {
    fn run_id(&self) -> &str {
        &self.run_id
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
        self.partials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((port.to_owned(), chunk.to_owned()));
    }

    fn report_usage(&self, usage: Usage) {
        *self.usage.lock().unwrap_or_else(PoisonError::into_inner) += usage;
    }

    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        self.secrets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .map(|s| match self.secret_hosts.get(name) {
                Some(hosts) => Secret::new(s.as_str()).bound_to(hosts.clone()),
                None => any_host(s),
            })
            .ok_or_else(|| {
                if self.no_keychain {
                    SecretError::Unavailable {
                        detail: "no D-Bus session".to_owned(),
                        hint: "set the environment variable instead".to_owned(),
                    }
                } else {
                    SecretError::Missing {
                        name: name.to_owned(),
                        env_var: secret_env_var(name),
                    }
                }
            })
    }

    /// Per [`TestCtx::with_refresh`]: refreshes when `refused` is the current value, gives
    /// the current value when it was already refreshed, and `Ok(None)` for credentials
    /// without a refresh plan (API keys).
    fn refresh_secret(&self, name: &str, refused: &Secret) -> Result<Option<Secret>, SecretError> {
        let Some(plan) = self.refresh_plans.get(name) else {
            return Ok(None);
        };
        let mut secrets = self.secrets.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = secrets.get(name)
            && current != refused.expose()
        {
            return Ok(Some(any_host(current)));
        }
        self.refreshes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name.to_owned());
        match plan {
            Ok(fresh) => {
                secrets.insert(name.to_owned(), fresh.clone());
                Ok(Some(any_host(fresh)))
            }
            Err(message) => Err(SecretError::Unusable {
                name: name.to_owned(),
                message: message.clone(),
            }),
        }
    }

    fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn graph_input(&self, name: &str) -> Option<Value> {
        self.graph_inputs.get(name).cloned()
    }

    fn set_graph_output(&self, name: &str, value: Value) {
        self.graph_outputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), value);
    }

    async fn run_subgraph(
        &self,
        _graph: &GraphDoc,
        _inputs: ValueMap,
    ) -> Result<ValueMap, BlockError> {
        Err(BlockError::permanent("sub-graphs need the executor"))
    }

    fn instantiate(&self, kind: &str, config: &Config) -> Result<Arc<dyn NodeImpl>, BlockError> {
        let block = self
            .catalog
            .block(kind)
            .ok_or_else(|| BlockError::permanent(format!("unknown block kind `{kind}`")))?;
        block
            .instantiate(config, &self.catalog.config_ctx())
            .map_err(|e| BlockError::permanent(format!("block `{kind}`: {e}")))
    }

    fn safe_mode(&self) -> bool {
        self.safe_mode
    }

    async fn request_approval(
        &self,
        request: ApprovalRequest,
    ) -> Result<ApprovalDecision, BlockError> {
        if !self.safe_mode {
            return Ok(request.approve_as_is());
        }
        let action = request.action.clone();
        self.approval_requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
        self.decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
            .ok_or_else(|| BlockError::permanent(format!("`{action}` was not approved")))
    }

    fn resume_checkpoint(&self) -> Option<Value> {
        self.resume.clone()
    }

    fn private_network_allowed(&self) -> bool {
        self.private_network
    }
}

/// Instantiates built-in block `kind` with `config` (a JSON object) and runs it once on
/// `inputs` with a fresh [`TestCtx`].
pub async fn run_block(
    kind: &str,
    config: serde_json::Value,
    inputs: ValueMap,
) -> Result<ValueMap, BlockError> {
    run_block_with(&TestCtx::new(), kind, config, inputs).await
}

/// [`run_block`] with a given context.
pub async fn run_block_with(
    ctx: &TestCtx,
    kind: &str,
    config: serde_json::Value,
    inputs: ValueMap,
) -> Result<ValueMap, BlockError> {
    let node = ctx.instantiate(kind, &config_object(config)?)?;
    node.run(inputs, ctx).await
}

/// Instantiates built-in block `kind` with `config`, returning the config error as text.
pub fn instantiate(kind: &str, config: serde_json::Value) -> Result<Arc<dyn NodeImpl>, String> {
    let config = config_object(config).map_err(|e| e.message)?;
    let catalog = Registry::builtin();
    let block = catalog
        .block(kind)
        .ok_or_else(|| format!("unknown block kind `{kind}`"))?;
    block
        .instantiate(&config, &catalog.config_ctx())
        .map_err(|e| e.to_string())
}

/// The config error instantiating built-in block `kind` with `config` gives, if any.
pub fn config_error(kind: &str, config: serde_json::Value) -> Option<String> {
    instantiate(kind, config).err()
}

fn config_object(config: serde_json::Value) -> Result<Config, BlockError> {
    match config {
        serde_json::Value::Object(map) => Ok(map.into()),
        serde_json::Value::Null => Ok(Config::new()),
        other => Err(BlockError::permanent(format!(
            "a config must be a JSON object, got {other}"
        ))),
    }
}

/// Builds an input map from `(port, value)` pairs.
pub fn inputs<const N: usize>(pairs: [(&str, Value); N]) -> ValueMap {
    agentloom_core::outputs(pairs)
}

/// Swaps a directory with a symbolic link to a directory outside, over and over (an atomic
/// exchange, so the name always exists), until dropped: races a confined file operation
/// against a directory turned into a link between its check and its open.
#[cfg(target_os = "linux")]
pub struct Flipper {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[cfg(target_os = "linux")]
impl Flipper {
    /// Starts swapping `dir` (an existing directory) with a link to `outside`; the link is
    /// parked next to `dir` as `{dir}.parked` while `dir` is the real one.
    ///
    /// # Panics
    /// When the link cannot be made.
    #[allow(clippy::missing_panics_doc, reason = "a test helper")]
    pub fn start(dir: &Path, outside: &Path) -> Flipper {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        let mut parked = dir.as_os_str().to_owned();
        parked.push(".parked");
        let parked = PathBuf::from(parked);
        #[allow(clippy::unwrap_used, reason = "a test helper")]
        std::os::unix::fs::symlink(outside, &parked).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (dir, flag) = (dir.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if renameat_with(CWD, &dir, CWD, &parked, RenameFlags::EXCHANGE).is_ok() {
                    swaps += 1;
                }
                // A pause while the directory is the real one, so that some operations get
                // through however busy the machine is and the race is really run.
                if swaps.is_multiple_of(16) {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            }
        });
        Flipper {
            stop,
            thread: Some(thread),
        }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Flipper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The pids of this machine's processes whose command line holds `marker`: how a test finds
/// a process that outlived what started it.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_what_a_node_reports() {
        let ctx = TestCtx::new()
            .with_secret("github", "tok")
            .with_input("q", "hi");
        ctx.partial("text", "a");
        ctx.partial("text", "b");
        ctx.report_usage(Usage {
            input_tokens: 3,
            output_tokens: 4,
            cost_usd: 0.5,
        });
        ctx.report_usage(Usage {
            input_tokens: 1,
            output_tokens: 0,
            cost_usd: 0.25,
        });
        ctx.set_graph_output("out", Value::Integer(1));
        assert_eq!(
            ctx.partials(),
            vec![("text".into(), "a".into()), ("text".into(), "b".into())]
        );
        assert_eq!(ctx.usage().input_tokens, 4);
        assert!((ctx.usage().cost_usd - 0.75).abs() < 1e-9);
        assert_eq!(ctx.graph_outputs().get("out"), Some(&Value::Integer(1)));
        assert_eq!(ctx.graph_input("q"), Some(Value::from("hi")));
        assert_eq!(
            ctx.secret("github").map(|s| s.expose().to_owned()),
            Ok("tok".to_owned())
        );
        let missing = ctx.secret("open ai").unwrap_err();
        assert!(
            missing.to_string().contains("AGENTLOOM_SECRET_OPEN_AI"),
            "{missing}"
        );
        let sub = ctx
            .run_subgraph(&GraphDoc::new("x"), ValueMap::new())
            .await
            .unwrap_err();
        assert!(sub.message.contains("sub-graphs need the executor"));
        assert!(ctx.instantiate("no.such", &Config::new()).is_err());
    }
}
