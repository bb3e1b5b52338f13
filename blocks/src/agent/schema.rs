//! The agent's tools as the model sees them: the built-in tools with their fixed names and
//! argument schemas, the tools wired on the canvas, and the check of every decision
//! against the chosen tool's JSON Schema.

use agentloom_core::{BlockError, Value};
use serde_json::json;

use crate::llm::types::{ToolCall, ToolDef};

/// A tool the agent has without wiring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Builtin {
    ReadFile,
    WriteFile,
    ListFiles,
    RunCode,
    HttpGet,
    WebSearch,
    Finish,
    /// Replaces the agent's notes between runs; on with `keep_notes`, not listed in
    /// `builtin_tools`.
    SaveNotes,
    /// Searches the knowledge collections wired to the agent's `knowledge` input; on when
    /// one is wired, not listed in `builtin_tools`.
    SearchKnowledge,
}

impl Builtin {
    pub(crate) const ALL: [Builtin; 7] = [
        Builtin::ReadFile,
        Builtin::WriteFile,
        Builtin::ListFiles,
        Builtin::RunCode,
        Builtin::HttpGet,
        Builtin::WebSearch,
        Builtin::Finish,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Builtin::ReadFile => "read_file",
            Builtin::WriteFile => "write_file",
            Builtin::ListFiles => "list_files",
            Builtin::RunCode => "run_code",
            Builtin::HttpGet => "http_get",
            Builtin::WebSearch => "web_search",
            Builtin::Finish => "finish",
            Builtin::SaveNotes => "save_notes",
            Builtin::SearchKnowledge => "search_knowledge",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Changes the outside world: safe mode asks a person first.
    pub(crate) fn side_effects(self) -> bool {
        matches!(self, Builtin::WriteFile | Builtin::RunCode)
    }

    /// The definition sent to the model; `run_code_note` says where run_code's program runs.
    pub(crate) fn definition(self, run_code_note: &str) -> ToolDef {
        let (description, parameters) = match self {
            Builtin::ReadFile => (
                "Reads a text file of the workspace. `path` is relative to the workspace.".to_owned(),
                json!({"type": "object", "properties": {"path": {"type": "string", "description": "Workspace-relative path of the file."}}, "required": ["path"], "additionalProperties": false}),
            ),
            Builtin::WriteFile => (
                "Writes (creates or replaces) a text file in the workspace; parent folders are created.".to_owned(),
                json!({"type": "object", "properties": {"path": {"type": "string", "description": "Workspace-relative path of the file."}, "content": {"type": "string", "description": "The whole new content."}}, "required": ["path", "content"], "additionalProperties": false}),
            ),
            Builtin::ListFiles => (
                "Lists the files and folders of a workspace folder (folders end with `/`).".to_owned(),
                json!({"type": "object", "properties": {"path": {"type": "string", "description": "Workspace-relative folder; empty or absent for the workspace itself."}}, "additionalProperties": false}),
            ),
            Builtin::RunCode => (
                format!(
                    "Runs a Python 3 program in the workspace folder and returns its exit code, stdout and stderr. Time, memory, CPU, file size and processes are limited; the environment holds no secrets. {run_code_note}"
                ),
                json!({"type": "object", "properties": {"code": {"type": "string", "description": "The Python 3 source to run."}}, "required": ["code"], "additionalProperties": false}),
            ),
            Builtin::HttpGet => (
                "Fetches a URL with HTTP GET and returns the status and the start of the body.".to_owned(),
                json!({"type": "object", "properties": {"url": {"type": "string", "description": "An http:// or https:// URL."}}, "required": ["url"], "additionalProperties": false}),
            ),
            Builtin::WebSearch => (
                "Searches the web and returns the top results (title, URL, snippet).".to_owned(),
                json!({"type": "object", "properties": {"query": {"type": "string", "description": "What to search for."}}, "required": ["query"], "additionalProperties": false}),
            ),
            Builtin::SaveNotes => (
                "Replaces your notes: what you write here is shown to you at the start of the next run (facts learnt, what is done, what to do next). Keep them short; the next save replaces them whole.".to_owned(),
                json!({"type": "object", "properties": {"notes": {"type": "string", "description": "The whole new notes."}}, "required": ["notes"], "additionalProperties": false}),
            ),
            Builtin::SearchKnowledge => (
                "Searches the user's documents (the knowledge collections given to you) and returns the best passages, each with its source (file and position). Quote the source of what you use.".to_owned(),
                json!({"type": "object", "properties": {"query": {"type": "string", "description": "What to look for, in words or exact terms."}, "k": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many passages (default 5)."}}, "required": ["query"], "additionalProperties": false}),
            ),
            Builtin::Finish => (
                "Ends the task with the final answer. Call it once the goal is met.".to_owned(),
                json!({"type": "object", "properties": {"answer": {"type": "string", "description": "The final answer for the person who set the goal."}}, "required": ["answer"], "additionalProperties": false}),
            ),
        };
        ToolDef {
            name: self.name().to_owned(),
            description,
            parameters,
        }
    }
}

/// What calling a tool does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ToolKind {
    Builtin(Builtin),
    /// A node wired to the agent's `tools` input, called through the run.
    Wired {
        node: String,
    },
}

/// One tool of the agent, with its compiled argument schema.
pub(crate) struct AgentTool {
    pub def: ToolDef,
    pub kind: ToolKind,
    pub side_effects: bool,
    validator: jsonschema::Validator,
}

impl AgentTool {
    pub(crate) fn new(def: ToolDef, kind: ToolKind, side_effects: bool) -> Result<Self, String> {
        let validator = jsonschema::validator_for(&def.parameters)
            .map_err(|e| format!("tool `{}`: its argument schema is invalid: {e}", def.name))?;
        Ok(AgentTool {
            def,
            kind,
            side_effects,
            validator,
        })
    }
}

/// The tools of one agent run.
pub(crate) struct Toolbox {
    tools: Vec<AgentTool>,
}

impl Toolbox {
    /// The enabled built-in tools (finish always) and the wired ones; a wired tool may not
    /// take a built-in tool's name.
    pub(crate) fn new(
        builtins: &[Builtin],
        run_code_note: &str,
        wired: Vec<AgentTool>,
    ) -> Result<Toolbox, BlockError> {
        let mut tools = Vec::new();
        for &builtin in builtins {
            let tool = AgentTool::new(
                builtin.definition(run_code_note),
                ToolKind::Builtin(builtin),
                builtin.side_effects(),
            )
            .map_err(BlockError::permanent)?;
            tools.push(tool);
        }
        if !builtins.contains(&Builtin::Finish) {
            tools.push(
                AgentTool::new(
                    Builtin::Finish.definition(run_code_note),
                    ToolKind::Builtin(Builtin::Finish),
                    false,
                )
                .map_err(BlockError::permanent)?,
            );
        }
        for tool in wired {
            if tools.iter().any(|t| t.def.name == tool.def.name) {
                return Err(BlockError::input(
                    "tools",
                    format!(
                        "two tools are called `{}`; rename the wired node",
                        tool.def.name
                    ),
                ));
            }
            tools.push(tool);
        }
        Ok(Toolbox { tools })
    }

    pub(crate) fn definitions(&self) -> Vec<ToolDef> {
        self.tools.iter().map(|t| t.def.clone()).collect()
    }

    /// The tool `call` names, if its arguments fit that tool's schema; otherwise the
    /// problem, worded for the model.
    pub(crate) fn check(&self, call: &ToolCall) -> Result<&AgentTool, String> {
        let Some(tool) = self.tools.iter().find(|t| t.def.name == call.name) else {
            let names: Vec<&str> = self.tools.iter().map(|t| t.def.name.as_str()).collect();
            return Err(format!(
                "there is no tool `{}`; the tools are: {}",
                call.name,
                names.join(", ")
            ));
        };
        if let serde_json::Value::String(text) = &call.arguments {
            return Err(format!(
                "the arguments of `{}` are not JSON: {text}",
                call.name
            ));
        }
        let problems: Vec<String> = tool
            .validator
            .iter_errors(&call.arguments)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(tool)
        } else {
            Err(format!(
                "the arguments of `{}` do not match its schema: {}",
                call.name,
                problems.join("; ")
            ))
        }
    }
}

/// Reads the tool descriptions arriving on the `tools` input (one per wire, see
/// [`agentloom_core::tool_descriptor`]).
pub(crate) fn wired_tools(value: &Value) -> Result<Vec<AgentTool>, BlockError> {
    let items = match value {
        Value::List(items) => items.as_slice(),
        other => std::slice::from_ref(other),
    };
    let mut tools = Vec::new();
    for item in items.iter().filter(|v| **v != Value::Null) {
        let json = item.to_json();
        let def = ToolDef::from_json(&json).map_err(|e| BlockError::input("tools", e))?;
        let node = json
            .get("node")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(&def.name)
            .to_owned();
        let side_effects = json
            .get("side_effects")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        let tool = AgentTool::new(def, ToolKind::Wired { node }, side_effects)
            .map_err(|e| BlockError::input("tools", e))?;
        tools.push(tool);
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    fn call(name: &str, arguments: serde_json::Value) -> ToolCall {
        ToolCall {
            id: "c1".to_owned(),
            name: name.to_owned(),
            arguments,
        }
    }

    #[test]
    fn decisions_are_checked_against_the_tool_schema() {
        let toolbox = Toolbox::new(&Builtin::ALL, "", Vec::new()).unwrap();
        assert!(
            toolbox
                .check(&call(
                    "write_file",
                    json!({"path": "a.txt", "content": "x"})
                ))
                .is_ok()
        );
        let missing = toolbox
            .check(&call("write_file", json!({"path": "a.txt"})))
            .err()
            .unwrap();
        assert!(
            missing.contains("\"content\" is a required property"),
            "{missing}"
        );
        let unknown = toolbox.check(&call("delete_all", json!({}))).err().unwrap();
        assert!(
            unknown.contains("there is no tool `delete_all`"),
            "{unknown}"
        );
        assert!(unknown.contains("run_code"), "{unknown}");
        let not_json = toolbox
            .check(&call("finish", json!("{answer: oops")))
            .err()
            .unwrap();
        assert!(not_json.contains("not JSON"), "{not_json}");
    }

    #[test]
    fn a_wired_tool_may_not_shadow_a_builtin() {
        let wired = wired_tools(&Value::from_json(json!([{
            "name": "finish", "node": "finish", "description": "x",
            "parameters": {"type": "object"}, "side_effects": false
        }])))
        .unwrap();
        let err = Toolbox::new(&[Builtin::ReadFile], "", wired).err().unwrap();
        assert!(err.message.contains("two tools are called `finish`"));
    }
}
