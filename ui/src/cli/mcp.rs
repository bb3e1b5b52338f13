//! `agentloom mcp GRAPH...`: serves graphs as MCP tools over stdio, so desktop assistants can
//! call them. One tool per graph: its name from the graph's name, its input schema from the
//! graph inputs, its result the graph outputs. Every call is a run in the run log.

use std::path::PathBuf;
use std::sync::Arc;

use agentloom_core::{Value, ValueMap, value_type_schema};
use agentloom_engine::RunStatus;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::EXIT_INVALID;
use crate::runner::headless::{GraphRunner, outputs_as_json, outputs_as_text};
use crate::runner::open_run_log;

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// The graph files to serve, one tool each.
    #[arg(required_unless_present = "edit")]
    pub graphs: Vec<PathBuf>,
    /// Serve the editing of this graph file instead (made when missing): tools to list
    /// blocks, add, configure, wire and remove nodes, validate, run and explain runs.
    #[arg(long, value_name = "GRAPH", conflicts_with_all = ["graphs", "trust"])]
    pub edit: Option<PathBuf>,
    /// With `--edit`: serve over streamable HTTP at this loopback address (port 0 picks
    /// one) instead of stdio. Every request needs `Authorization: Bearer TOKEN`; the token
    /// is AGENTLOOM_MCP_TOKEN, or one generated and printed on stderr with the URL.
    #[arg(long, value_name = "ADDR", requires = "edit")]
    pub http: Option<std::net::SocketAddr>,
    /// The directory file blocks may read and write (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// The run log database (default: the per-user data directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Trust the graph files without asking (see `agentloom trust`).
    #[arg(long)]
    pub trust: bool,
}

pub fn mcp_command(args: McpArgs) -> anyhow::Result<i32> {
    // Checked here too: clap lets `--http` through beside GRAPH... without `--edit`.
    if args.http.is_some() && args.edit.is_none() {
        eprintln!(
            "--http serves the editing of one graph: give it with `--edit GRAPH` (graphs as tools are served on stdio only)"
        );
        return Ok(EXIT_INVALID);
    }
    if let Some(graph) = args.edit {
        if let Err(message) = super::mcp_edit::check_editable(&graph) {
            eprintln!("{message}");
            return Ok(EXIT_INVALID);
        }
        if let Some(addr) = &args.http
            && let Err(message) = super::mcp_http::check_loopback(addr)
        {
            eprintln!("{message}");
            return Ok(EXIT_INVALID);
        }
        let store = open_run_log(args.db)?;
        let Some(workspace) = super::workspace_dir(args.workspace)? else {
            return Ok(EXIT_INVALID);
        };
        return super::mcp_edit::edit_command(graph, workspace, store, args.http);
    }
    let store = open_run_log(args.db)?;
    let mut tools = Vec::new();
    let mut invalid = false;
    for path in &args.graphs {
        match GraphRunner::load(path, Some(store.clone()), args.trust) {
            Ok(runner) => {
                if let Some(note) = runner.safe_mode_note() {
                    eprintln!("{note}");
                }
                tools.push(Arc::new(runner));
            }
            Err(problems) => {
                invalid = true;
                for problem in problems {
                    eprintln!("{problem}");
                }
            }
        }
    }
    if invalid {
        return Ok(EXIT_INVALID);
    }
    let Some(workspace) = super::workspace_dir(args.workspace)? else {
        return Ok(EXIT_INVALID);
    };
    let server = match GraphTools::new(tools, workspace) {
        Ok(server) => server,
        Err(message) => {
            eprintln!("{message}");
            return Ok(EXIT_INVALID);
        }
    };
    let shutdown = server.shutdown.clone();
    super::mcp_stdio::serve_stdio(server, shutdown)
}

/// The MCP server: graphs by tool name.
struct GraphTools {
    tools: Vec<(Tool, Arc<GraphRunner>)>,
    workspace: PathBuf,
    shutdown: CancellationToken,
}

/// A tool name MCP clients accept: letters, digits, `_` and `-`, at most 64 characters.
fn tool_name(graph_name: &str) -> String {
    let mut name: String = graph_name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(64);
    if name.trim_matches('_').is_empty() {
        "graph".to_owned()
    } else {
        name
    }
}

/// The tool's input schema: one property per graph input; those without default required.
fn input_schema(runner: &GraphRunner) -> serde_json::Map<String, serde_json::Value> {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for input in runner.inputs() {
        let mut schema = value_type_schema(&input.ty);
        if !input.description.is_empty() {
            schema["description"] = json!(input.description);
        }
        if let Some(default) = &input.default {
            schema["default"] = default.to_json();
        } else {
            required.push(json!(input.name));
        }
        properties.insert(input.name.clone(), schema);
    }
    let mut schema = serde_json::Map::new();
    schema.insert("type".to_owned(), json!("object"));
    schema.insert(
        "properties".to_owned(),
        serde_json::Value::Object(properties),
    );
    schema.insert("required".to_owned(), serde_json::Value::Array(required));
    schema
}

impl GraphTools {
    fn new(runners: Vec<Arc<GraphRunner>>, workspace: PathBuf) -> Result<GraphTools, String> {
        let mut tools: Vec<(Tool, Arc<GraphRunner>)> = Vec::new();
        for runner in runners {
            let name = tool_name(&runner.name());
            if let Some((_, other)) = tools.iter().find(|(tool, _)| tool.name == name) {
                return Err(format!(
                    "{} and {} would both be the tool `{name}`: give the graphs different names",
                    other.path().display(),
                    runner.path().display()
                ));
            }
            let description = match runner.graph().doc.description.trim() {
                "" => format!("Runs the Agentloom graph {}.", runner.name()),
                text => text.to_owned(),
            };
            let tool = Tool::new(name, description, Arc::new(input_schema(&runner)));
            tools.push((tool, runner));
        }
        Ok(GraphTools {
            tools,
            workspace,
            shutdown: CancellationToken::new(),
        })
    }

    async fn call(&self, request: CallToolRequestParams) -> Result<CallToolResult, ErrorData> {
        let Some((_, runner)) = self
            .tools
            .iter()
            .find(|(tool, _)| tool.name == request.name)
        else {
            let names: Vec<&str> = self.tools.iter().map(|(t, _)| t.name.as_ref()).collect();
            return Err(ErrorData::invalid_params(
                format!(
                    "no tool `{}`; the tools are {}",
                    request.name,
                    names.join(", ")
                ),
                None,
            ));
        };
        let inputs: ValueMap = request
            .arguments
            .unwrap_or_default()
            .into_iter()
            .map(|(name, value)| (name, Value::from_json(value)))
            .collect();
        if let Err(message) = runner.check_inputs(&inputs) {
            return Err(ErrorData::invalid_params(message, None));
        }
        let run = runner
            .run(inputs, &self.workspace, self.shutdown.child_token())
            .await;
        let report = run.report;
        Ok(if report.status == RunStatus::Completed {
            let mut result =
                CallToolResult::success(vec![ContentBlock::text(outputs_as_text(&report.outputs))]);
            result.structured_content = Some(outputs_as_json(&report.outputs));
            result
        } else {
            CallToolResult::error(vec![ContentBlock::text(format!(
                "the run {} {}: {}",
                report.run_id,
                report.status.as_str(),
                report.error.unwrap_or_default()
            ))])
        })
    }
}

impl ServerHandler for GraphTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agentloom", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.tools.iter().map(|(tool, _)| tool.clone()).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request).await.map(CallToolResponse::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_what_clients_accept() {
        assert_eq!(tool_name("Summarise issues"), "summarise_issues");
        assert_eq!(tool_name("  "), "graph");
        assert_eq!(tool_name(&"x".repeat(100)).len(), 64);
        assert_eq!(tool_name("a-b_C"), "a-b_c");
    }
}
