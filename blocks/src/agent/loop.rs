//! The agent loop: ask the model for one tool call, check it, run it, show the result,
//! repeat. The state is plain data, so that it can be handed to an approval as a checkpoint
//! and a resumed run carries on from there without asking the model again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, BlockError, RunCtx, Value, ValueMap, clip_chars,
};
use serde::{Deserialize, Serialize};

use super::bounded_output::OutputLimits;
use super::sandbox::Sandbox;
use super::schema::{Builtin, ToolKind, Toolbox};
use super::step::Step;
use super::tools::{HttpGetSettings, ToolEnv, run_builtin};
use crate::llm::common::{LlmSettings, Meter};
use crate::llm::provider::{Endpoint, complete};
use crate::llm::types::{ChatRequest, Message, Role, ToolCall};
use crate::web_search::SearchSettings;

/// Invalid decisions in a row the model may correct; the next one stops the agent.
const MAX_INVALID_IN_A_ROW: u32 = 3;
/// The same call this often in a row is a loop: warned once, stopped the next time.
const REPEATS_FOR_LOOP: u32 = 3;
const MAX_OBSERVATION_CHARS: usize = 8_000;
/// Steps always kept whole when the transcript is summarised.
const KEEP_RECENT_STEPS: usize = 2;
const SUMMARY_CHARS: usize = 160;

const SYSTEM_PROMPT: &str = "You are an agent working towards the goal the user gives. Work in steps: in each reply, think briefly, then call exactly one of the tools. You will see the tool's result and decide the next step. When the goal is met, call `finish` with the final answer. If a tool fails, read the error and try another way.";

/// When the agent stops unfinished.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub max_steps: u64,
    pub max_cost_usd: Option<f64>,
    pub max_wall: Option<Duration>,
    /// Estimated tokens of transcript before old steps are summarised.
    pub context_budget: u64,
}

/// Everything the loop needs to carry on: the checkpoint of an approval.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct AgentState {
    pub goal: String,
    pub context: Option<String>,
    pub steps: Vec<Step>,
    /// The oldest steps, summarised to fit the context budget.
    pub summary: Vec<String>,
    /// How many of `steps` the summary covers.
    pub summarized: usize,
    pub artifacts: Vec<String>,
    pub invalid_in_a_row: u32,
    pub repeats: u32,
    pub warned_of_loop: bool,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// A step whose side effect waits for approval: its tool has not run yet.
    pub pending: Option<Step>,
}

impl AgentState {
    pub(crate) fn new(goal: String, context: Option<String>) -> Self {
        AgentState {
            goal,
            context,
            ..AgentState::default()
        }
    }

    pub(crate) fn from_checkpoint(checkpoint: &Value) -> Result<Self, BlockError> {
        serde_json::from_value(checkpoint.to_json()).map_err(|e| {
            BlockError::permanent(format!(
                "the agent's saved state cannot be read ({e}); run the graph again"
            ))
        })
    }

    fn checkpoint(&self) -> Value {
        Value::from_json(serde_json::to_value(self).unwrap_or_default())
    }

    fn transcript(&self) -> Value {
        Value::list(
            self.steps
                .iter()
                .map(|s| Value::from_json(serde_json::to_value(s).unwrap_or_default()))
                .collect(),
        )
    }
}

/// One run of the loop.
pub(crate) struct Agent<'a> {
    pub ctx: &'a dyn RunCtx,
    pub settings: &'a LlmSettings,
    pub instructions: Option<&'a str>,
    pub endpoint: Endpoint,
    pub model: String,
    pub meter: Meter,
    pub toolbox: Toolbox,
    pub limits: Limits,
    pub search: Option<&'a SearchSettings>,
    pub http_get: HttpGetSettings,
    pub sandbox: Sandbox<'a>,
    pub run_code_output: OutputLimits,
    /// The knowledge collections wired to the agent (search_knowledge).
    pub knowledge: Vec<super::knowledge::KnowledgeSource>,
}

/// How a step ended.
enum Next {
    Continue,
    Finished(String),
}

impl Agent<'_> {
    pub(crate) async fn run(mut self, mut state: AgentState) -> Result<ValueMap, BlockError> {
        let started = Instant::now();
        let outcome = self.steps(&mut state, started).await;
        match outcome {
            Ok(answer) => Ok(agentloom_core::outputs([
                ("answer", Value::text(answer)),
                (
                    "artifacts",
                    Value::list(state.artifacts.iter().cloned().map(Value::text).collect()),
                ),
                ("transcript", state.transcript()),
            ])),
            Err(err) if err.class == agentloom_core::ErrorClass::Cancelled => Err(err),
            Err(err) => {
                let data = Value::object(BTreeMap::from([
                    ("reason".to_owned(), Value::text(err.message.clone())),
                    ("transcript".to_owned(), state.transcript()),
                    (
                        "artifacts".to_owned(),
                        Value::list(state.artifacts.iter().cloned().map(Value::text).collect()),
                    ),
                ]));
                Err(err.with_data(data))
            }
        }
    }

    async fn steps(
        &mut self,
        state: &mut AgentState,
        started: Instant,
    ) -> Result<String, BlockError> {
        // A resumed run first settles the call that was waiting for approval.
        if let Some(step) = state.pending.take()
            && let Next::Finished(answer) = self.act(state, step, started).await?
        {
            return Ok(answer);
        }
        loop {
            if state.steps.len() as u64 >= self.limits.max_steps {
                return Err(BlockError::permanent(format!(
                    "step limit reached: the agent took {} steps without finishing (max_steps {})",
                    state.steps.len(),
                    self.limits.max_steps
                )));
            }
            self.check_time(started)?;
            compact(state, self.limits.context_budget);
            let step = self.decide(state, started).await?;
            if let Some(max) = self.limits.max_cost_usd
                && state.cost_usd > max
            {
                state.steps.push(Step {
                    observation: "(not run: the cost limit was reached)".to_owned(),
                    ..step
                });
                self.show(state);
                return Err(BlockError::permanent(format!(
                    "cost limit reached: the agent spent ${:.4}, more than its max_cost_usd of ${max:.4}",
                    state.cost_usd
                )));
            }
            if let Next::Finished(answer) = self.act(state, step, started).await? {
                return Ok(answer);
            }
        }
    }

    fn check_time(&self, started: Instant) -> Result<(), BlockError> {
        match self.limits.max_wall {
            Some(max) if started.elapsed() >= max => Err(time_limit(max)),
            _ => Ok(()),
        }
    }

    /// `work`, bounded by the time left.
    async fn in_time<T>(
        &self,
        started: Instant,
        work: impl Future<Output = Result<T, BlockError>>,
    ) -> Result<T, BlockError> {
        match self.limits.max_wall {
            Some(max) => {
                let left = max.saturating_sub(started.elapsed());
                tokio::time::timeout(left, work)
                    .await
                    .map_err(|_| time_limit(max))?
            }
            None => work.await,
        }
    }

    /// Asks the model for the next step.
    async fn decide(
        &mut self,
        state: &mut AgentState,
        started: Instant,
    ) -> Result<Step, BlockError> {
        let mut request = self.settings.request(&self.model);
        request.system = Some(match self.instructions {
            Some(extra) => format!("{SYSTEM_PROMPT}\n\n{extra}"),
            None => SYSTEM_PROMPT.to_owned(),
        });
        request.messages = messages(state);
        request.tools = self.toolbox.definitions();
        let before = self.meter.totals();
        // Set the call's cost aside first, so requests in flight cannot overshoot the run's
        // max_cost_usd together.
        let reserved = self.meter.reserve(self.ctx, &request)?;
        let reply = self
            .in_time(
                started,
                complete(
                    &self.endpoint,
                    &request,
                    self.settings.options,
                    self.ctx,
                    "thought",
                ),
            )
            .await?;
        self.meter.record(self.ctx, &request, &reply, reserved);
        let after = self.meter.totals();
        let (input_tokens, output_tokens, cost_usd) =
            (after.0 - before.0, after.1 - before.1, after.2 - before.2);
        state.input_tokens += input_tokens;
        state.output_tokens += output_tokens;
        state.cost_usd += cost_usd;
        let number = state.steps.len() as u64 + 1;
        // One call a step: further calls in the same reply are not run.
        let call = reply.tool_calls.into_iter().next();
        Ok(Step {
            step: number,
            thought: reply.text.trim().to_owned(),
            tool: call.as_ref().map(|c| c.name.clone()),
            arguments: call
                .as_ref()
                .map_or(serde_json::Value::Null, |c| c.arguments.clone()),
            observation: String::new(),
            input_tokens,
            output_tokens,
            cost_usd,
            invalid: false,
            call_id: call
                .map(|c| c.id)
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| format!("call_{number}")),
            ..Step::default()
        })
    }

    /// Checks and carries out one decision.
    async fn act(
        &mut self,
        state: &mut AgentState,
        mut step: Step,
        started: Instant,
    ) -> Result<Next, BlockError> {
        let checked = match &step.tool {
            None => Err("no tool was called: every reply must call exactly one tool (call `finish` with the answer when done)".to_owned()),
            Some(name) => self
                .toolbox
                .check(&ToolCall {
                    id: step.call_id.clone(),
                    name: name.clone(),
                    arguments: step.arguments.clone(),
                })
                .map(|tool| (tool.kind.clone(), tool.side_effects, tool.def.name.clone())),
        };
        let (kind, side_effects, name) = match checked {
            Ok(found) => found,
            Err(problem) => {
                state.invalid_in_a_row += 1;
                step.invalid = true;
                step.observation = format!("invalid decision: {problem}");
                state.steps.push(step);
                self.show(state);
                if state.invalid_in_a_row > MAX_INVALID_IN_A_ROW {
                    return Err(BlockError::permanent(format!(
                        "the model made {} invalid decisions in a row; the last: {problem}",
                        state.invalid_in_a_row
                    )));
                }
                return Ok(Next::Continue);
            }
        };
        state.invalid_in_a_row = 0;
        let mut warning = None;
        let same_as_last = state.steps.last().is_some_and(|last| {
            !last.invalid && last.tool.as_deref() == Some(&name) && last.arguments == step.arguments
        });
        state.repeats = if same_as_last { state.repeats + 1 } else { 1 };
        if state.repeats >= REPEATS_FOR_LOOP {
            if state.warned_of_loop || state.repeats > REPEATS_FOR_LOOP {
                step.observation = "(not run: loop detected)".to_owned();
                state.steps.push(step);
                self.show(state);
                return Err(BlockError::permanent(format!(
                    "loop detected: the model called `{name}` with the same arguments {} times in a row",
                    state.repeats
                )));
            }
            state.warned_of_loop = true;
            warning = Some(format!(
                "\n\nWarning: you called `{name}` with the same arguments {} times in a row. Do something different or call `finish`; one more identical call stops the task.",
                state.repeats
            ));
        }
        if kind == ToolKind::Builtin(Builtin::Finish) {
            let answer = step
                .arguments
                .get("answer")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned();
            step.observation = "finished".to_owned();
            state.steps.push(step);
            self.show(state);
            return Ok(Next::Finished(answer));
        }
        let mut arguments = step.arguments.clone();
        if side_effects {
            state.pending = Some(step.clone());
            let request = ApprovalRequest::new(name.clone(), Value::from_json(arguments.clone()))
                .with_checkpoint(state.checkpoint());
            let decision = self.ctx.request_approval(request).await;
            state.pending = None;
            match decision? {
                ApprovalDecision::Approved {
                    arguments: approved,
                } => {
                    arguments = approved.to_json();
                    // Outside safe mode nobody was asked.
                    if self.ctx.safe_mode() {
                        step.approval = Some(if arguments == step.arguments {
                            "approved".to_owned()
                        } else {
                            "approved with edited arguments".to_owned()
                        });
                    }
                    step.arguments.clone_from(&arguments);
                }
                ApprovalDecision::Rejected { message } => {
                    step.approval = Some(format!("rejected: {message}"));
                    step.observation = format!("A person rejected this action: {message}");
                    state.steps.push(step);
                    self.show(state);
                    return Ok(Next::Continue);
                }
            }
        }
        // Said before the tool runs, so a slow tool shows as the step under way.
        self.show_running(&step);
        let tool_started = Instant::now();
        let observation = self
            .in_time(started, self.call(state, &kind, &arguments))
            .await?;
        step.duration_ms = u64::try_from(tool_started.elapsed().as_millis()).unwrap_or(u64::MAX);
        step.observation =
            clip_chars(&observation, MAX_OBSERVATION_CHARS) + warning.as_deref().unwrap_or("");
        state.steps.push(step);
        self.show(state);
        Ok(Next::Continue)
    }

    /// Runs a tool; its failure is the observation. Only a stopped run is an error.
    async fn call(
        &self,
        state: &mut AgentState,
        kind: &ToolKind,
        arguments: &serde_json::Value,
    ) -> Result<String, BlockError> {
        let result = match kind {
            ToolKind::Builtin(builtin) => {
                let env = ToolEnv {
                    ctx: self.ctx,
                    search: self.search,
                    http_get: self.http_get,
                    sandbox: self.sandbox,
                    run_code_output: self.run_code_output,
                    knowledge: &self.knowledge,
                };
                match run_builtin(*builtin, arguments, &env).await {
                    Ok(done) => {
                        if let Some(path) = done.wrote
                            && !state.artifacts.contains(&path)
                        {
                            state.artifacts.push(path);
                        }
                        Ok(done.observation)
                    }
                    Err(message) => Err(message),
                }
            }
            ToolKind::Wired { node } => match self
                .ctx
                .call_tool(node, Value::from_json(arguments.clone()))
                .await
            {
                Ok(outputs) => Ok(Value::object(outputs).to_json().to_string()),
                Err(err) if err.class == agentloom_core::ErrorClass::Cancelled => return Err(err),
                Err(err) => Err(err.message),
            },
        };
        if self.ctx.cancel_token().is_cancelled() {
            return Err(BlockError::cancelled());
        }
        Ok(match result {
            Ok(observation) => observation,
            Err(message) => format!("error: {message}"),
        })
    }

    /// Publishes a step whose tool starts now (a `running` line on the `transcript` port;
    /// the line with its result follows).
    fn show_running(&self, step: &Step) {
        let running = Step {
            running: true,
            started_at_ms: super::step::unix_ms_now(),
            ..step.clone()
        };
        let line = serde_json::to_string(&running).unwrap_or_default();
        self.ctx.partial("transcript", &format!("{line}\n"));
    }

    /// Publishes the newest step as it happens (one JSON line on the `transcript` port).
    fn show(&self, state: &AgentState) {
        if let Some(step) = state.steps.last() {
            let line = serde_json::to_string(step).unwrap_or_default();
            self.ctx.partial("transcript", &format!("{line}\n"));
        }
    }
}

/// Summarises the oldest steps while the transcript is over the context budget (estimated
/// tokens); the newest steps always stay whole.
fn compact(state: &mut AgentState, budget: u64) {
    while estimated_tokens(state) > budget
        && state.steps.len() - state.summarized > KEEP_RECENT_STEPS
    {
        let step = &state.steps[state.summarized];
        let line = format!(
            "step {}: {}({}) -> {}",
            step.step,
            step.tool.as_deref().unwrap_or("no tool"),
            clip_chars(&step.arguments.to_string(), SUMMARY_CHARS),
            clip_chars(step.observation.trim(), SUMMARY_CHARS).replace('\n', " ")
        );
        state.summary.push(line);
        state.summarized += 1;
    }
}

fn time_limit(max: Duration) -> BlockError {
    BlockError::permanent(format!(
        "time limit reached: the agent ran for more than its max_wall_ms of {} ms",
        max.as_millis()
    ))
}

fn estimated_tokens(state: &AgentState) -> u64 {
    ChatRequest {
        messages: messages(state),
        ..ChatRequest::default()
    }
    .estimated_input_tokens()
}

/// The conversation sent to the model: the goal (with the summary of old steps), then each
/// remaining step as the model's call and the tool's result.
fn messages(state: &AgentState) -> Vec<Message> {
    let mut first = format!("Goal: {}", state.goal);
    if let Some(context) = &state.context {
        first.push_str(&format!("\n\nContext:\n{context}"));
    }
    if !state.summary.is_empty() {
        first.push_str("\n\nEarlier steps, summarised:\n");
        first.push_str(&state.summary.join("\n"));
    }
    let mut messages = vec![Message::new(Role::User, first)];
    for step in &state.steps[state.summarized.min(state.steps.len())..] {
        let mut said = Message::new(Role::Assistant, step.thought.clone());
        match &step.tool {
            Some(name) => {
                said.tool_calls.push(ToolCall {
                    id: step.call_id.clone(),
                    name: name.clone(),
                    arguments: step.arguments.clone(),
                });
                messages.push(said);
                let mut result = Message::new(Role::Tool, step.observation.clone());
                result.tool_call_id = Some(step.call_id.clone());
                result.name = Some(name.clone());
                messages.push(result);
            }
            None => {
                messages.push(said);
                messages.push(Message::new(Role::User, step.observation.clone()));
            }
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(n: u64, observation: &str) -> Step {
        Step {
            step: n,
            tool: Some("read_file".to_owned()),
            arguments: serde_json::json!({"path": format!("f{n}.txt")}),
            observation: observation.to_owned(),
            call_id: format!("call_{n}"),
            ..Step::default()
        }
    }

    #[test]
    fn each_step_is_a_call_and_its_result() {
        let mut state = AgentState::new("Count the files".to_owned(), Some("in /data".to_owned()));
        state.steps.push(step(1, "a.txt"));
        let sent = messages(&state);
        assert_eq!(sent.len(), 3);
        assert_eq!(
            sent[0].content,
            "Goal: Count the files\n\nContext:\nin /data"
        );
        assert_eq!(sent[1].tool_calls[0].name, "read_file");
        assert_eq!(sent[2].role, Role::Tool);
        assert_eq!(sent[2].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn a_checkpoint_round_trips() {
        let mut state = AgentState::new("g".to_owned(), None);
        state.steps.push(step(1, "x"));
        state.pending = Some(step(2, ""));
        state.artifacts.push("a.md".to_owned());
        let back = AgentState::from_checkpoint(&state.checkpoint()).expect("readable");
        assert_eq!(back.steps, state.steps);
        assert_eq!(back.pending, state.pending);
        assert_eq!(back.artifacts, state.artifacts);
    }

    #[test]
    fn old_steps_are_summarised_over_the_budget() {
        let mut state = AgentState::new("g".to_owned(), None);
        for n in 1..=6 {
            state.steps.push(step(n, &"long observation ".repeat(200)));
        }
        let before = estimated_tokens(&state);
        let budget = before / 2;
        compact(&mut state, budget);
        assert!(state.summarized >= 3, "{}", state.summarized);
        assert!(estimated_tokens(&state) <= budget);
        assert!(
            state.summary[0]
                .starts_with("step 1: read_file({\"path\":\"f1.txt\"}) -> long observation")
        );
        let sent = messages(&state);
        assert!(
            sent[0]
                .content
                .contains("Earlier steps, summarised:\nstep 1:")
        );
        assert_eq!(sent.len(), 1 + 2 * (6 - state.summarized));
    }
}
