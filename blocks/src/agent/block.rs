//! `ai.agent`: given a goal, a model chooses tool calls until it finishes or a limit stops it.
//! Config, ports and the node; the loop itself is in `loop.rs`.

use std::sync::Arc;
use std::time::Duration;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    GraphDoc, InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, ValueMap, ValueType, async_trait,
};

use super::bounded_output::{DEFAULT_KEEP_BYTES, OutputLimits};
use super::knowledge::knowledge_sources;
use super::notes::{read_notes, with_notes};
use super::run_loop::{Agent, AgentState, Limits};
use super::sandbox::Sandbox;
use super::schema::{Builtin, Toolbox, wired_tools};
use super::tools::{DEFAULT_HTTP_MAX_BYTES, HttpGetSettings};
use crate::llm::common::{LlmSettings, Meter, connection_fields, tuning_fields};
use crate::net;
use crate::web_search::{SearchSettings, search_fields};

pub(crate) const DEFAULT_MAX_STEPS: u64 = 20;
/// Tokens of transcript kept before old steps are summarised.
pub(crate) const DEFAULT_CONTEXT_BUDGET: u64 = 24_000;
/// The agent's setting that lets run_code run without a sandbox.
pub const UNSANDBOXED_FIELD: &str = "run_code_unsandboxed";
/// The ids of the agent nodes of `doc` that run code without a sandbox: what trusting a
/// shared graph would allow, for its trust prompt.
pub fn unsandboxed_code_nodes(doc: &GraphDoc) -> Vec<String> {
    doc.nodes
        .iter()
        .filter(|n| n.block == "ai.agent")
        .filter(|n| {
            matches!(
                ConfigReader(&n.config).bool_or(UNSANDBOXED_FIELD, false),
                Ok(true)
            )
        })
        .map(|n| n.id.clone())
        .collect()
}

const DEFAULT_TOOLS: &str = "read_file, write_file, list_files, run_code, http_get, finish";

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(AgentBlock::new())]
}

struct AgentBlock {
    meta: BlockMeta,
}

impl AgentBlock {
    fn new() -> Self {
        let meta = BlockMeta::new(
            "ai.agent",
            "Agent",
            "AI",
            "Works towards a goal: the model chooses a tool, the agent runs it and shows the result, until the model calls `finish` or a limit stops it. Built-in tools work in the run's workspace; any node wired to `tools` is a tool too.",
        );
        let mut meta = connection_fields(meta);
        // The agent's own system prompt frames the loop; `instructions` add to it.
        meta.config.retain(|f| f.name != "system");
        let meta = meta
            .field(ConfigField::multiline("instructions", "Instructions").help(
                "How to work: added to the agent's system prompt (role, style, rules).",
            ))
            .field(
                ConfigField::text("builtin_tools", "Built-in tools")
                    .default_value(serde_json::json!(DEFAULT_TOOLS))
                    .help("Comma-separated: read_file, write_file, list_files, run_code, http_get, web_search, finish (always on). write_file and run_code ask first in safe mode."),
            )
            .field(
                ConfigField::boolean("keep_notes", "Keep notes between runs")
                    .default_value(serde_json::json!(false))
                    .help("On: the agent reads its notes from earlier runs of this graph as it starts, and may replace them with the tool save_notes. They are kept in the run log with the graph's memory."),
            )
            .field(
                ConfigField::boolean(UNSANDBOXED_FIELD, "Run code unsandboxed")
                    .default_value(serde_json::json!(false))
                    .help("run_code runs programs in a sandbox (bubblewrap, or Landlock and seccomp), and refuses where there is none. On: without it, with your access to files, network and processes. Only for graphs you wrote."),
            )
            .field(
                ConfigField::integer("max_steps", "Max steps", Some(1), Some(1000))
                    .default_value(serde_json::json!(DEFAULT_MAX_STEPS))
                    .help("The most decisions (model calls) before the agent stops unfinished."),
            )
            .field(
                ConfigField::number("max_cost_usd", "Max cost (USD)", Some(0.0), None)
                    .help("Stop once the model calls cost more than this. Empty: no limit."),
            )
            .field(
                ConfigField::integer("max_wall_ms", "Max time (ms)", Some(1), None)
                    .help("Stop after this long. Empty: no limit but the node's timeout."),
            )
            .field(
                ConfigField::integer("context_budget", "Context budget (tokens)", Some(500), None)
                    .default_value(serde_json::json!(DEFAULT_CONTEXT_BUDGET))
                    .help("When the transcript sent to the model grows past this (estimated), the oldest steps are replaced by a short summary."),
            )
            .field(
                ConfigField::boolean("allow_private_network", "http_get: allow private network")
                    .default_value(serde_json::json!(false))
                    .help("Let http_get reach this machine (localhost) and the local network (private and link-local addresses, such as a router or a cloud metadata service). Off: such an address is refused, whatever name led to it. A graph file that is not trusted is refused such an address even when this is on."),
            )
            .field(
                ConfigField::integer("http_max_bytes", "http_get: max body (bytes)", Some(1), None)
                    .default_value(serde_json::json!(DEFAULT_HTTP_MAX_BYTES))
                    .help("http_get reads at most this much of a response body (10 MiB by default) and says when it cut the rest."),
            )
            .field(
                ConfigField::integer("run_code_output_bytes", "run_code: output kept (bytes)", Some(1), None)
                    .default_value(serde_json::json!(DEFAULT_KEEP_BYTES))
                    .help("run_code keeps at most this much of the program's stdout, and as much of its stderr (1 MiB by default), and counts the rest; a program that writes more than 64 MiB (or twice this) is stopped."),
            );
        let meta = search_fields(meta, "search_");
        let mut meta = tuning_fields(meta, false);
        meta.config.retain(|f| f.name != "stream");
        Self { meta }
    }
}

impl Block for AgentBlock {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let settings = LlmSettings::from_config(config, false)?;
        let reader = ConfigReader(config);
        let mut builtins = Vec::new();
        for name in reader
            .str_or("builtin_tools", DEFAULT_TOOLS)?
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
        {
            let tool = Builtin::parse(name).ok_or_else(|| {
                ConfigError::new(
                    "builtin_tools",
                    format!("`{name}` is not a built-in tool; the tools are read_file, write_file, list_files, run_code, http_get, web_search, finish"),
                )
            })?;
            if !builtins.contains(&tool) {
                builtins.push(tool);
            }
        }
        let keep_notes = reader.bool_or("keep_notes", false)?;
        if keep_notes {
            builtins.push(Builtin::SaveNotes);
        }
        let search = if builtins.contains(&Builtin::WebSearch) {
            Some(SearchSettings::from_config(config, "search_")?)
        } else {
            None
        };
        let positive = |field: &str| -> Result<Option<f64>, ConfigError> {
            match reader.f64(field)? {
                Some(v) if !v.is_finite() || v < 0.0 => {
                    Err(ConfigError::new(field, "must be zero or more"))
                }
                other => Ok(other),
            }
        };
        let limits = Limits {
            max_steps: reader.u64_or("max_steps", DEFAULT_MAX_STEPS)?.max(1),
            max_cost_usd: positive("max_cost_usd")?,
            max_wall: reader.u64("max_wall_ms")?.map(Duration::from_millis),
            context_budget: reader
                .u64_or("context_budget", DEFAULT_CONTEXT_BUDGET)?
                .max(500),
        };
        let http_get = HttpGetSettings {
            reach: net::Reach::allowing_private(reader.bool_or("allow_private_network", false)?),
            max_bytes: reader
                .u64_or("http_max_bytes", DEFAULT_HTTP_MAX_BYTES)?
                .max(1),
        };
        let run_code_output = OutputLimits::keeping(
            reader
                .u64_or("run_code_output_bytes", DEFAULT_KEEP_BYTES)?
                .max(1),
        );
        let mut inputs = vec![
            PortSpec::new("goal", ValueType::Text).describe("What the agent should achieve."),
            PortSpec::new("context", ValueType::Any)
                .optional()
                .describe("Anything the agent should know (text or JSON), shown with the goal."),
            PortSpec::new("tools", ValueType::list_of(ValueType::Tool))
                .optional()
                .many()
                .describe(
                    "Nodes the agent may call: wire any node's `tool` output here (many wires).",
                ),
            PortSpec::new("knowledge", ValueType::list_of(ValueType::Tool))
                .optional()
                .many()
                .describe(
                    "Collections the agent may search: wire a knowledge.search node's `tool` output here; the agent gets the tool search_knowledge.",
                ),
        ];
        inputs.extend(settings.ports());
        let ports = Ports::new(
            inputs,
            vec![
                PortSpec::new("answer", ValueType::Text)
                    .describe("The answer the agent finished with."),
                PortSpec::new("artifacts", ValueType::list_of(ValueType::Text))
                    .describe("Workspace-relative paths of the files it wrote."),
                PortSpec::new("transcript", ValueType::list_of(ValueType::Object)).describe(
                    "Every step: {step, thought, tool, arguments, observation, input_tokens, output_tokens, cost_usd}.",
                ),
            ],
        );
        Ok(Arc::new(AgentNode {
            settings,
            instructions: reader
                .str("instructions")?
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            builtins,
            search,
            limits,
            http_get,
            run_code_unsandboxed: reader.bool_or(UNSANDBOXED_FIELD, false)?,
            run_code_output,
            keep_notes,
            ports,
        }))
    }
}

struct AgentNode {
    settings: LlmSettings,
    instructions: Option<String>,
    builtins: Vec<Builtin>,
    search: Option<SearchSettings>,
    limits: Limits,
    http_get: HttpGetSettings,
    run_code_unsandboxed: bool,
    run_code_output: OutputLimits,
    keep_notes: bool,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for AgentNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let endpoint = self.settings.endpoint(&mut inputs)?;
        let model = self.settings.model(&mut inputs)?;
        let wired = match inputs.take_optional("tools") {
            Some(value) => wired_tools(&value)?,
            None => Vec::new(),
        };
        let knowledge = match inputs.take_optional("knowledge") {
            Some(value) => knowledge_sources(&value)?,
            None => Vec::new(),
        };
        let mut builtins = self.builtins.clone();
        if !knowledge.is_empty() {
            builtins.push(Builtin::SearchKnowledge);
        }
        let sandbox = Sandbox::for_agent(self.run_code_unsandboxed).await;
        let toolbox = Toolbox::new(&builtins, sandbox.note(), wired)?;
        let state = match ctx.resume_checkpoint() {
            Some(checkpoint) => AgentState::from_checkpoint(&checkpoint)?,
            None => {
                let goal = inputs.take_text("goal")?;
                if goal.trim().is_empty() {
                    return Err(BlockError::input(
                        "goal",
                        "is empty: say what the agent should achieve",
                    ));
                }
                let context = inputs.take_optional("context").map(|c| c.to_text());
                let context = if self.keep_notes {
                    with_notes(context, read_notes(ctx).await?.as_deref())
                } else {
                    context
                };
                AgentState::new(goal, context)
            }
        };
        let agent = Agent {
            ctx,
            settings: &self.settings,
            instructions: self.instructions.as_deref(),
            endpoint,
            meter: Meter::new(&self.settings, &model)?,
            model,
            toolbox,
            limits: self.limits,
            search: self.search.as_ref(),
            http_get: self.http_get,
            sandbox,
            run_code_output: self.run_code_output,
            knowledge,
        };
        agent.run(state).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    #[test]
    fn a_graph_names_its_agents_that_run_code_unsandboxed() {
        let doc = GraphDoc::from_json_str(
            r#"{"format":"agentloom.graph","version":1,"name":"g","nodes":[
            {"id":"open","block":"ai.agent","position":[0,0],"config":{"run_code_unsandboxed":true}},
            {"id":"boxed","block":"ai.agent","position":[0,0],"config":{}},
            {"id":"other","block":"text.template","position":[0,0],"config":{"run_code_unsandboxed":true}}],
            "edges":[]}"#,
        )
        .unwrap();
        assert_eq!(unsandboxed_code_nodes(&doc), vec!["open".to_owned()]);
    }
}
