//! One step of the agent's transcript: streamed as a JSON line on the `transcript` port
//! while the agent works, kept in its checkpoint, and read back by whoever shows the run
//! (the canvas, the run panel, `agentloom agent` and `agentloom show --json`).

use agentloom_core::{clip_chars, one_line};
use serde::{Deserialize, Serialize};

/// One step of the transcript, as shown live and in the `transcript` output.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub step: u64,
    pub thought: String,
    /// The tool called; `None` when the model called none.
    pub tool: Option<String>,
    pub arguments: serde_json::Value,
    pub observation: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// The decision was refused (unknown tool, bad arguments, no call).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invalid: bool,
    /// The provider's id of the call, to pair the result with it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub call_id: String,
    /// How long its tool ran, in milliseconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duration_ms: u64,
    /// What a person decided on it in safe mode: `approved`, `approved with edited
    /// arguments` or `rejected: …`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// Streamed as its tool starts: the step is under way, its observation still to come
    /// (the line with its result, same `step`, follows). Never in the `transcript` output.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub running: bool,
    /// When the tool of a running step started, in milliseconds since the Unix epoch: a
    /// trace opened later (from the run log, in another process) counts from it too.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub started_at_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Now, in milliseconds since the Unix epoch (0 on a clock set before it).
pub(crate) fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

impl Step {
    /// The steps in streamed `transcript` text, one JSON line each, up to the first line
    /// that is not a step. Empty when the text is something else.
    pub fn parse_lines(text: &str) -> Vec<Step> {
        text.lines()
            .filter(|line| !line.trim().is_empty())
            .map_while(Step::parse_line)
            .collect()
    }

    /// The steps of streamed `transcript` text as they stand: a step still running, then
    /// its result under the same number, is listed once, as its latest line says.
    pub fn trace(text: &str) -> Vec<Step> {
        let mut steps: Vec<Step> = Vec::new();
        for step in Step::parse_lines(text) {
            match steps.last_mut() {
                Some(last) if last.step == step.step && last.running => *last = step,
                _ => steps.push(step),
            }
        }
        steps
    }

    /// One streamed line as a step; `None` when it is not one.
    pub fn parse_line(line: &str) -> Option<Step> {
        serde_json::from_str(line).ok()
    }

    /// How long the tool of a running step has been running, by the clock, when the step
    /// says when it started (lines written by older versions do not).
    pub fn running_for(&self) -> Option<std::time::Duration> {
        (self.running && self.started_at_ms > 0).then(|| {
            std::time::Duration::from_millis(unix_ms_now().saturating_sub(self.started_at_ms))
        })
    }

    /// The tool's name, or what stands for none.
    pub fn tool_name(&self) -> &str {
        self.tool.as_deref().unwrap_or("(no tool)")
    }

    /// `step 2 · write_file {"path":…} → wrote 2 bytes to a.txt  (812 in / 20 out, $0.0001)`,
    /// after the thought on a line of its own when there is one.
    pub fn describe(&self) -> String {
        let observation = clip_chars(&one_line(&self.observation), 200);
        let line = format!(
            "step {} · {} {} → {observation}  ({} in / {} out, ${:.4})",
            self.step,
            self.tool_name(),
            clip_chars(&self.arguments.to_string(), 160),
            self.input_tokens,
            self.output_tokens,
            self.cost_usd,
        );
        if self.thought.is_empty() {
            line
        } else {
            format!("  {}\n{line}", clip_chars(&self.thought, 300))
        }
    }

    /// `step 2 · write_file → wrote 2 bytes`: one short line, the observation clipped to
    /// `max_chars`.
    pub fn headline(&self, max_chars: usize) -> String {
        if self.running {
            return one_line(&format!(
                "step {} · {} running…",
                self.step,
                self.tool_name()
            ));
        }
        one_line(&format!(
            "step {} · {} → {}",
            self.step,
            self.tool_name(),
            clip_chars(&self.observation, max_chars)
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    fn write_step() -> Step {
        Step {
            step: 2,
            thought: "save it".to_owned(),
            tool: Some("write_file".to_owned()),
            arguments: serde_json::json!({"path": "a.txt"}),
            observation: "wrote 2 bytes\nto a.txt".to_owned(),
            input_tokens: 812,
            output_tokens: 20,
            cost_usd: 0.0001,
            ..Step::default()
        }
    }

    #[test]
    fn streamed_lines_read_back_as_the_steps_written() {
        let step = write_step();
        let mut text = serde_json::to_string(&step).unwrap();
        text.push_str("\n\n");
        text.push_str(
            &serde_json::to_string(&Step {
                step: 3,
                ..step.clone()
            })
            .unwrap(),
        );
        text.push_str("\nnot a step\n");
        let steps = Step::parse_lines(&text);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0], step);
        assert_eq!(steps[1].step, 3);
        assert!(Step::parse_lines("plain streamed text").is_empty());
        assert!(Step::parse_lines(r#"{"other": 1}"#).is_empty());
    }

    #[test]
    fn a_step_is_described_with_its_tool_result_and_cost() {
        assert_eq!(
            write_step().describe(),
            "  save it\nstep 2 · write_file {\"path\":\"a.txt\"} → wrote 2 bytes¶to a.txt  \
             (812 in / 20 out, $0.0001)"
        );
        let none = Step {
            step: 1,
            observation: "no call".to_owned(),
            ..Step::default()
        };
        assert_eq!(
            none.describe(),
            "step 1 · (no tool) null → no call  (0 in / 0 out, $0.0000)"
        );
        assert_eq!(write_step().headline(7), "step 2 · write_file → wrote 2…");
    }

    #[test]
    fn a_running_step_is_listed_once_and_replaced_by_its_result() {
        let running = Step {
            observation: String::new(),
            running: true,
            ..write_step()
        };
        assert_eq!(running.headline(20), "step 2 · write_file running…");
        let line = |step: &Step| serde_json::to_string(step).unwrap() + "\n";
        let under_way = line(&Step {
            step: 1,
            ..write_step()
        }) + &line(&running);
        let steps = Step::trace(&under_way);
        assert_eq!(steps.len(), 2);
        assert!(steps[1].running);
        let done = under_way + &line(&write_step());
        let steps = Step::trace(&done);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[1], write_step());
    }
}
