//! Evaluations: a graph run against cases, each run checked (see `agentloom eval`).
//! Reading cases files, the checks and the statistics live here, shared by the CLI and
//! the app; running the cases is theirs (they own the block catalog and the judge).

mod cases;
mod checks;
mod stats;

pub use cases::{Case, CasesError, judges, parse_cases};
pub use checks::{Check, CheckResult, JudgeSpec, RunChecks, RunFacts};
pub use stats::{percentile, wilson_interval};

use crate::events::{EventKind, RunEvent};

/// The tools the agents of a run called, in order, from its events: each agent step
/// streamed on `transcript` names its tool, and a node wired as a tool that started was
/// called by its agent.
pub fn tools_called(events: &[RunEvent], tool_nodes: &[String]) -> Vec<String> {
    let mut tools: Vec<String> = Vec::new();
    let mut add = |tool: &str| {
        if !tools.iter().any(|t| t == tool) {
            tools.push(tool.to_owned());
        }
    };
    for event in events {
        match &event.kind {
            EventKind::NodePartial { port, chunk, .. } if port == "transcript" => {
                for line in chunk.lines() {
                    if let Ok(step) = serde_json::from_str::<serde_json::Value>(line)
                        && let Some(tool) = step.get("tool").and_then(serde_json::Value::as_str)
                    {
                        add(tool);
                    }
                }
            }
            EventKind::NodeStarted { node, .. } if tool_nodes.contains(node) => add(node),
            _ => {}
        }
    }
    tools
}
