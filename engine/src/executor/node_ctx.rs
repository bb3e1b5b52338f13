//! What a running node sees: the `RunCtx` the executor gives each attempt (its events,
//! usage and cost, secrets, egress checks, replay and recording, the workspace, sub-runs,
//! approvals, tools, request and CPU slots), and one attempt bounded by its timeout.

use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::{Duration, Instant};

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, BlockError, Config, CpuJob, GraphDoc, NodeImpl, RequestSlot,
    RunCtx, Secret, SecretError, TOOL_PORT, Usage, Value, ValueMap,
};
use tokio_util::sync::CancellationToken;

use super::approval::ask_approval;
use super::shared::{RunShared, elapsed_ms};
use super::sub_runs;
use super::tools::tool_call_inputs;
use crate::events::EventKind;
use crate::limits::NodeBudget;

/// What a running node sees.
pub(super) struct NodeCtx<'a> {
    /// Borrowed, as the node's id: the run outlives every node of it.
    pub(super) shared: &'a Arc<RunShared>,
    /// Borrowed from the graph the node runs in.
    pub(super) node_id: &'a str,
    pub(super) attempt: u32,
    pub(super) previous_error: Option<String>,
    /// Cancelled when its parent is or this node timed out: made when first asked for
    /// (most nodes never ask), a child of `parent_cancel`.
    pub(super) cancel: OnceLock<CancellationToken>,
    /// The token this node's is a child of: the calling node's for a tool call, the run's
    /// when `None`.
    pub(super) parent_cancel: Option<CancellationToken>,
    pub(super) usage: Mutex<Usage>,
    pub(super) budget: NodeBudget,
}

#[async_trait::async_trait]
impl RunCtx for NodeCtx<'_> {
    fn run_id(&self) -> &str {
        &self.shared.run_id
    }

    fn node_id(&self) -> &str {
        self.node_id
    }

    fn attempt(&self) -> u32 {
        self.attempt
    }

    fn previous_error(&self) -> Option<&str> {
        self.previous_error.as_deref()
    }

    fn cancel_token(&self) -> &CancellationToken {
        self.cancel
            .get_or_init(|| self.parent_cancel().child_token())
    }

    fn is_cancelled(&self) -> bool {
        self.cancel
            .get()
            .unwrap_or_else(|| self.parent_cancel())
            .is_cancelled()
    }

    fn partial(&self, port: &str, chunk: &str) {
        self.shared.emit(EventKind::NodePartial {
            node: self.node_id.to_owned(),
            port: port.to_owned(),
            chunk: chunk.to_owned(),
        });
    }

    fn report_usage(&self, usage: Usage) {
        self.add_usage(usage);
        if let Err(message) = self.shared.limits.spend(usage.cost_usd, self.node_id) {
            self.shared.stop_for_limit(message);
        }
    }

    fn reserve_cost(&self, estimate_usd: f64) -> Result<(), BlockError> {
        self.shared
            .limits
            .reserve(&self.budget, estimate_usd, self.node_id)
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
        let shared = Arc::clone(self.shared);
        let node = self.node_id.to_owned();
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
        let report = sub_runs::run_nested(
            self.shared,
            self.node_id,
            self.cancel_token(),
            graph,
            inputs,
            scope,
        )
        .await?;
        if !report.usage.is_zero() {
            self.add_usage(report.usage);
        }
        sub_runs::calling_node_result(self.shared, self.node_id, report)
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
        ask_approval(self.shared, self.node_id, &request).await
    }

    fn resume_checkpoint(&self) -> Option<Value> {
        self.shared.checkpoints.get(self.node_id).cloned()
    }

    async fn ask_person(&self, request: ApprovalRequest) -> Result<ApprovalDecision, BlockError> {
        ask_approval(self.shared, self.node_id, &request).await
    }
    async fn call_tool(&self, node: &str, arguments: Value) -> Result<ValueMap, BlockError> {
        let graph = Arc::clone(&self.shared.graph);
        let caller = graph.index_of(self.node_id);
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
        let inputs = tool_call_inputs(self.shared, index, tool, arguments)?;
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
            shared: self.shared,
            node_id: &tool.id,
            attempt: 1,
            previous_error: None,
            cancel: OnceLock::new(),
            parent_cancel: Some(self.cancel_token().clone()),
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
                    outputs_redacted: None,
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
            () = self.cancel_token().cancelled() => Err(BlockError::cancelled()),
        }
    }

    async fn run_cpu(&self, job: CpuJob) -> Result<(), BlockError> {
        let permit = tokio::select! {
            permit = Arc::clone(&self.shared.cpu_slots).acquire_owned() => {
                permit.map_err(|_| BlockError::cancelled())?
            }
            () = self.cancel_token().cancelled() => return Err(BlockError::cancelled()),
        };
        // The slot stays taken until the job really ends, even when the node stopped
        // waiting for it: the core is busy until then.
        let work = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job();
        });
        tokio::select! {
            joined = work => joined.map_err(|e| BlockError::permanent(format!("the work stopped: {e}"))),
            () = self.cancel_token().cancelled() => Err(BlockError::cancelled()),
        }
    }
}

impl NodeCtx<'_> {
    /// Adds to this node's and this run's usage, and tells the watchers.
    fn add_usage(&self, usage: Usage) {
        if let Ok(mut mine) = self.usage.lock() {
            *mine += usage;
        }
        if let Ok(mut total) = self.shared.usage.lock() {
            *total += usage;
        }
        self.shared.emit(EventKind::NodeUsage {
            node: self.node_id.to_owned(),
            usage,
        });
    }
}

impl NodeCtx<'_> {
    fn parent_cancel(&self) -> &CancellationToken {
        self.parent_cancel.as_ref().unwrap_or(&self.shared.cancel)
    }
}

impl Drop for NodeCtx<'_> {
    fn drop(&mut self) {
        // Reservations never settled (the request failed) go back to the budget.
        self.shared.limits.release_all(&self.budget);
    }
}

/// One attempt: the node's own future, bounded by its timeout and the run's cancellation.
pub(super) async fn run_attempt(
    node: &dyn NodeImpl,
    inputs: ValueMap,
    ctx: &NodeCtx<'_>,
    timeout: Option<Duration>,
) -> Result<ValueMap, BlockError> {
    let work = node.run(inputs, ctx);
    let bounded = async {
        match timeout {
            // Boxed: only a node with a timeout pays for its timer's room.
            Some(limit) => match Box::pin(tokio::time::timeout(limit, work)).await {
                Ok(result) => result,
                Err(_) => {
                    // Unmade, nobody holds it: nothing to tell.
                    if let Some(cancel) = ctx.cancel.get() {
                        cancel.cancel();
                    }
                    Err(BlockError::transient(format!(
                        "timed out after {} ms",
                        limit.as_millis()
                    )))
                }
            },
            None => work.await,
        }
    };
    // What `tokio::select! { biased; .. }` of the work and the parent's cancellation did, the
    // wait for the cancellation made only when the work first waits (most nodes never do).
    // The node's own token is cancelled only with its parent's, or above on a timeout.
    let mut bounded = std::pin::pin!(bounded);
    let mut cancelled = std::pin::pin!(None);
    std::future::poll_fn(|cx| {
        // As `select!`: with the task's budget spent, yield before polling anything (asked
        // then, `poll_proceed` registers the task to be woken; nothing is taken).
        if !tokio::task::coop::has_budget_remaining() {
            let _unspent = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        }
        if let Poll::Ready(result) = bounded.as_mut().poll(cx) {
            return Poll::Ready(result);
        }
        if cancelled.is_none() {
            cancelled.set(Some(ctx.parent_cancel().cancelled()));
        }
        match cancelled.as_mut().as_pin_mut() {
            Some(wait) => wait.poll(cx).map(|()| Err(BlockError::cancelled())),
            None => Poll::Pending,
        }
    })
    .await
}
