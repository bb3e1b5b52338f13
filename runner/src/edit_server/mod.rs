//! The MCP server that edits one graph: the tools `list_blocks`, `get_graph`, `add_node`,
//! `set_config`, `connect`, `disconnect`, `remove_node`, `move_node`, `validate`, `run` and
//! `explain_run`, and the graph and the block catalog as resources. `agentloom mcp --edit`
//! serves it for a graph file ([`GraphFile`]); the app serves it for its open document,
//! whose canvas applies each edit. Every edit obeys the rules a canvas edit obeys
//! ([`crate::edit`]); [`http`] serves it over streamable HTTP behind a bearer token.

mod file;
pub mod http;

use std::path::PathBuf;
use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{BlockCatalog, GraphDoc, Problem, Value, ValueMap};
use agentloom_engine::{RunStatus, RunStore};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value as Json, json};
use tokio_util::sync::CancellationToken;

use crate::edit::{self, EditError};
use crate::headless::GraphRunner;

pub use file::{GraphFile, check_editable};

/// The resource holding the graph file as it is now.
const GRAPH_URI: &str = "agentloom://graph";
/// The resource holding the block catalog.
const BLOCKS_URI: &str = "agentloom://blocks";

/// Applies the editing tool `tool` to `doc`; the answer says what changed.
fn edit_op(
    tool: &str,
    args: &Map<String, Json>,
    doc: &mut GraphDoc,
    catalog: &dyn BlockCatalog,
) -> Result<Json, ToolError> {
    Ok(match tool {
        "add_node" => {
            let id = edit::add_node(
                doc,
                catalog,
                str_arg(args, "block")?,
                opt_str_arg(args, "id")?,
                object_arg(args, "config")?,
                position_arg(args)?,
            )?;
            let ports = edit::node_ports(doc, catalog, &id)
                .map(|p| {
                    let outputs = edit::node_outputs(doc, catalog, &p, &id);
                    json!({"inputs": p.inputs, "outputs": outputs})
                })
                .unwrap_or_else(|err| json!({"unknown": err.to_string()}));
            json!({"id": id, "ports": ports})
        }
        "set_config" => {
            let node = str_arg(args, "node")?;
            let dropped = edit::set_config(doc, catalog, node, object_arg(args, "config")?)?;
            json!({"node": node, "removed_wires": dropped})
        }
        "connect" => {
            let replaced =
                edit::connect(doc, catalog, end_arg(args, "from")?, end_arg(args, "to")?)?;
            json!({"connected": true, "replaced_wires": replaced})
        }
        "disconnect" => {
            let from = match args.get("from") {
                None | Some(Json::Null) => None,
                Some(_) => Some(end_arg(args, "from")?),
            };
            let removed = edit::disconnect(doc, from, end_arg(args, "to")?)?;
            json!({"removed_wires": removed})
        }
        "remove_node" => {
            let node = str_arg(args, "node")?;
            let removed = edit::remove_node(doc, node)?;
            json!({"removed": node, "removed_wires": removed})
        }
        "move_node" => {
            let node = str_arg(args, "node")?;
            let position = position_arg(args)?
                .ok_or_else(|| ToolError::Params("`x` and `y` are required".to_owned()))?;
            edit::move_node(doc, node, position)?;
            json!({"node": node, "position": position})
        }
        other => return Err(ToolError::Params(format!("no editing tool `{other}`"))),
    })
}

/// Why a tool call failed: the call itself was malformed (a protocol error), or the tool
/// refused or failed (a tool error the model reads and can act on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    Params(String),
    Failed(String),
}

impl From<EditError> for ToolError {
    fn from(err: EditError) -> Self {
        ToolError::Failed(err.to_string())
    }
}

fn str_arg<'a>(args: &'a Map<String, Json>, name: &str) -> Result<&'a str, ToolError> {
    opt_str_arg(args, name)?.ok_or_else(|| ToolError::Params(format!("`{name}` is required")))
}

fn opt_str_arg<'a>(args: &'a Map<String, Json>, name: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(name) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(text)) => Ok(Some(text)),
        Some(other) => Err(ToolError::Params(format!(
            "`{name}` must be a string, not {other}"
        ))),
    }
}

/// An object argument; a client that can only send strings may send it as JSON text.
fn object_arg(args: &Map<String, Json>, name: &str) -> Result<Map<String, Json>, ToolError> {
    match args.get(name) {
        None | Some(Json::Null) => Ok(Map::new()),
        Some(Json::Object(map)) => Ok(map.clone()),
        Some(Json::String(text)) => match serde_json::from_str(text) {
            Ok(Json::Object(map)) => Ok(map),
            _ => Err(ToolError::Params(format!("`{name}` must be a JSON object"))),
        },
        Some(other) => Err(ToolError::Params(format!(
            "`{name}` must be an object, not {other}"
        ))),
    }
}

/// A wire end: `{"node": …, "port": …}`, or `"node.port"`.
fn end_arg<'a>(args: &'a Map<String, Json>, name: &str) -> Result<(&'a str, &'a str), ToolError> {
    let bad = || {
        ToolError::Params(format!(
            "`{name}` must be {{\"node\": …, \"port\": …}} or \"node.port\""
        ))
    };
    match args.get(name) {
        Some(Json::Object(end)) => {
            let node = end.get("node").and_then(Json::as_str).ok_or_else(bad)?;
            let port = end.get("port").and_then(Json::as_str).ok_or_else(bad)?;
            Ok((node, port))
        }
        Some(Json::String(text)) => text.rsplit_once('.').ok_or_else(bad),
        _ => Err(bad()),
    }
}

fn position_arg(args: &Map<String, Json>) -> Result<Option<[f64; 2]>, ToolError> {
    let number = |name: &str| match args.get(name) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Number(n)) => Ok(n.as_f64()),
        Some(Json::String(text)) => text
            .parse::<f64>()
            .map(Some)
            .map_err(|_| ToolError::Params(format!("`{name}` must be a number"))),
        Some(_) => Err(ToolError::Params(format!("`{name}` must be a number"))),
    };
    Ok(match (number("x")?, number("y")?) {
        (Some(x), Some(y)) => Some([x, y]),
        (None, None) => None,
        _ => return Err(ToolError::Params("give both `x` and `y`".to_owned())),
    })
}

/// One edit, applied to the graph as it is when its turn comes.
pub type GraphEdit = Box<dyn FnOnce(&mut GraphDoc) -> Result<Json, ToolError> + Send>;

/// The graph the tools edit: a graph file (`agentloom mcp --edit`), or a document open in
/// the app, whose canvas applies each edit as one undoable step.
pub trait EditedGraph: Send + Sync + 'static {
    /// What the graph is, for people: its file, or the app's document.
    fn describe(&self) -> String;
    /// The graph as it is now.
    fn load(&self) -> Result<GraphDoc, String>;
    /// The blocks the graph is edited with, and the problems of its MCP servers. May
    /// connect to servers, so it is called off the async threads.
    fn catalog(&self, doc: &GraphDoc) -> (Arc<Registry>, Vec<Problem>);
    /// Applies `edit` to the graph as it is now, as one step: kept when it succeeds,
    /// nothing changed when it fails. Returns the edit's answer and the graph after it.
    fn apply(&self, edit: GraphEdit) -> Result<(Json, GraphDoc), ToolError>;
    /// What `run` runs: the graph as it is now, recorded in `store`, with the trust its
    /// user gave exactly that; or why it cannot run (each line a problem). May read files
    /// and wait for the app's window, so it is called off the async threads.
    fn runner(&self, store: Option<Arc<RunStore>>) -> Result<GraphRunner, Vec<String>>;
}

/// The MCP server: one graph, its editing tools and its runs.
#[derive(Clone)]
pub struct EditServer {
    graph: Arc<dyn EditedGraph>,
    workspace: PathBuf,
    /// The run log (`None`: runs are not recorded and cannot be explained).
    store: Option<Arc<RunStore>>,
    /// One edit at a time: each reads the graph, changes it and writes it back.
    edits: Arc<tokio::sync::Mutex<()>>,
    shutdown: CancellationToken,
}

/// A problem as JSON: what, node, port, JSON path and message.
fn problem_json(problem: &Problem) -> Json {
    json!({
        "kind": problem.kind,
        "node": problem.node,
        "port": problem.port,
        "path": problem.path,
        "message": problem.message,
    })
}

/// Every problem of `doc` checked against `catalog`, after its servers' `server_problems`.
fn problems(doc: &GraphDoc, catalog: &Registry, server_problems: Vec<Problem>) -> Vec<Json> {
    let mut problems = server_problems;
    problems.extend(edit::problems(doc, catalog));
    problems.iter().map(problem_json).collect()
}

/// Applies one editing tool to the graph as it is now. The answer says what changed and
/// what is still wrong with the graph.
fn apply_tool(
    graph: &dyn EditedGraph,
    tool: String,
    args: Map<String, Json>,
) -> Result<Json, ToolError> {
    let doc = graph.load().map_err(ToolError::Failed)?;
    let (catalog, server_problems) = graph.catalog(&doc);
    let edit_catalog = catalog.clone();
    let (mut answer, after) = graph.apply(Box::new(move |doc| {
        edit_op(&tool, &args, doc, edit_catalog.as_ref())
    }))?;
    answer["problems"] = Json::Array(problems(&after, &catalog, server_problems));
    Ok(answer)
}

/// A JSON Schema object with `properties`, of which `required` must be given.
fn schema(properties: Json, required: &[&str]) -> Arc<Map<String, Json>> {
    let schema = json!({"type": "object", "properties": properties, "required": required});
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

/// A wire end's schema.
fn end_schema(what: &str) -> Json {
    json!({
        "type": "object",
        "description": format!("{what}: the node id and the port name"),
        "properties": {"node": {"type": "string"}, "port": {"type": "string"}},
        "required": ["node", "port"]
    })
}

fn tools() -> Vec<Tool> {
    let node = json!({"type": "string", "description": "The node id"});
    vec![
        Tool::new(
            "list_blocks",
            "Lists the blocks a graph can use: kind, description, input and output ports with their types, and the JSON Schema of each block's config.",
            schema(json!({}), &[]),
        ),
        Tool::new(
            "get_graph",
            "Returns the graph file as it is now (nodes with their config and position, wires, settings).",
            schema(json!({}), &[]),
        ),
        Tool::new(
            "add_node",
            "Adds a node of a block kind (see list_blocks). Its config starts from the block's defaults; a graph.input or graph.output is named after its id unless config names it. Returns the node's id and ports.",
            schema(
                json!({
                    "block": {"type": "string", "description": "The block kind, e.g. text.template"},
                    "id": {"type": "string", "description": "The node id (default: made from the block kind); ids never change"},
                    "config": {"type": "object", "description": "Config fields, as in the block's config schema"},
                    "x": {"type": "number"},
                    "y": {"type": "number"}
                }),
                &["block"],
            ),
        ),
        Tool::new(
            "set_config",
            "Sets config fields of a node (null removes one). Wires to ports the node no longer has are removed.",
            schema(
                json!({"node": node, "config": {"type": "object"}}),
                &["node", "config"],
            ),
        ),
        Tool::new(
            "connect",
            "Wires an output port to an input port. Refused, with the reason, when the types do not fit. An input takes one wire: a new one replaces the old (except inputs that take many, such as an agent's tools).",
            schema(
                json!({"from": end_schema("The output"), "to": end_schema("The input")}),
                &["from", "to"],
            ),
        ),
        Tool::new(
            "disconnect",
            "Removes the wire from an output to an input; without `from`, every wire into the input.",
            schema(
                json!({"from": end_schema("The output"), "to": end_schema("The input")}),
                &["to"],
            ),
        ),
        Tool::new(
            "remove_node",
            "Removes a node and its wires.",
            schema(json!({"node": node}), &["node"]),
        ),
        Tool::new(
            "move_node",
            "Moves a node on the canvas.",
            schema(
                json!({"node": node, "x": {"type": "number"}, "y": {"type": "number"}}),
                &["node", "x", "y"],
            ),
        ),
        Tool::new(
            "validate",
            "Checks the graph. Returns every problem with its node, port, JSON path into the file and a message saying what to do; none means it can run.",
            schema(json!({}), &[]),
        ),
        Tool::new(
            "run",
            "Runs the graph as it is now (in the Agentloom app: as shown, changes not saved yet included) with inputs (by graph input name) and returns its outputs and each node's status and error. The run is recorded in the run log. A graph changed by these tools is not trusted until its user saves it in Agentloom or runs `agentloom trust`: until then it runs offline in safe mode, without credentials or MCP servers, and one that would need trust is refused, saying what trusting it would allow.",
            schema(
                json!({"inputs": {"type": "object", "description": "Graph inputs by name"}}),
                &[],
            ),
        ),
        Tool::new(
            "explain_run",
            "Explains a past run from the run log: its status, outputs and each node's status, error, attempts and timings. Without run_id, the graph's newest run.",
            schema(json!({"run_id": {"type": "string"}}), &[]),
        ),
    ]
}

/// A tool's successful answer: the JSON as text and as structured content.
fn answer(value: Json) -> CallToolResult {
    let text = serde_json::to_string_pretty(&value).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

impl EditServer {
    /// A server editing `graph`; `run` runs it in `workspace` and records runs in `store`.
    /// Cancelling `shutdown` stops the runs still going.
    pub fn new(
        graph: Arc<dyn EditedGraph>,
        workspace: PathBuf,
        store: Option<Arc<RunStore>>,
        shutdown: CancellationToken,
    ) -> Self {
        EditServer {
            graph,
            workspace,
            store,
            edits: Arc::new(tokio::sync::Mutex::new(())),
            shutdown,
        }
    }

    /// Runs `work` on a blocking thread (it reads and writes files and may connect to the
    /// graph's MCP servers).
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn EditedGraph) -> T + Send + 'static,
    ) -> Result<T, ErrorData> {
        let graph = self.graph.clone();
        tokio::task::spawn_blocking(move || work(graph.as_ref()))
            .await
            .map_err(|err| ErrorData::internal_error(format!("the tool failed: {err}"), None))
    }

    async fn call(&self, request: CallToolRequestParams) -> Result<CallToolResult, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let name = request.name.to_string();
        let outcome: Result<Json, ToolError> = match name.as_str() {
            "list_blocks" => {
                self.blocking(|graph| {
                    let doc = graph.load().map_err(ToolError::Failed)?;
                    let (catalog, _) = graph.catalog(&doc);
                    Ok(json!({"blocks": edit::catalog_entries(catalog.as_ref())}))
                })
                .await?
            }
            "get_graph" => {
                self.blocking(|graph| {
                    let doc = graph.load().map_err(ToolError::Failed)?;
                    serde_json::to_value(&doc).map_err(|e| ToolError::Failed(e.to_string()))
                })
                .await?
            }
            "validate" => {
                self.blocking(|graph| {
                    let doc = graph.load().map_err(ToolError::Failed)?;
                    let (catalog, server_problems) = graph.catalog(&doc);
                    let problems = problems(&doc, &catalog, server_problems);
                    Ok(json!({"valid": problems.is_empty(), "problems": problems}))
                })
                .await?
            }
            "run" => self.run(&args).await,
            "explain_run" => {
                // It may read the graph, which waits for the app's window.
                let server = self.clone();
                tokio::task::spawn_blocking(move || server.explain_run(&args))
                    .await
                    .map_err(|err| {
                        ErrorData::internal_error(format!("the tool failed: {err}"), None)
                    })?
            }
            "add_node" | "set_config" | "connect" | "disconnect" | "remove_node" | "move_node" => {
                let _one_at_a_time = self.edits.lock().await;
                self.blocking(move |graph| apply_tool(graph, name, args))
                    .await?
            }
            other => {
                let names: Vec<String> = tools().iter().map(|t| t.name.to_string()).collect();
                Err(ToolError::Params(format!(
                    "no tool `{other}`; the tools are {}",
                    names.join(", ")
                )))
            }
        };
        match outcome {
            Ok(value) => Ok(answer(value)),
            Err(ToolError::Failed(message)) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(message)]))
            }
            Err(ToolError::Params(message)) => Err(ErrorData::invalid_params(message, None)),
        }
    }

    /// Runs the file as it is now, with its trust as it is now.
    async fn run(&self, args: &Map<String, Json>) -> Result<Json, ToolError> {
        let inputs: ValueMap = object_arg(args, "inputs")?
            .into_iter()
            .map(|(name, value)| (name, Value::from_json(value)))
            .collect();
        let store = self.store.clone();
        let loaded = {
            let _no_edit_meanwhile = self.edits.lock().await;
            let graph = Arc::clone(&self.graph);
            tokio::task::spawn_blocking(move || graph.runner(store))
                .await
                .map_err(|err| ToolError::Failed(format!("the run could not start: {err}")))?
        };
        let runner = loaded.map_err(|problems| ToolError::Failed(problems.join("\n")))?;
        runner.check_inputs(&inputs).map_err(ToolError::Failed)?;
        let run = runner
            .run(inputs, &self.workspace, self.shutdown.child_token())
            .await;
        let report = run.report;
        let nodes: Vec<Json> = report
            .nodes
            .iter()
            .map(|node| {
                json!({
                    "id": node.id,
                    "status": node.status.as_str(),
                    "attempts": node.attempts,
                    "duration_ms": node.duration_ms,
                    "error": node.error,
                })
            })
            .collect();
        Ok(json!({
            "run_id": report.run_id,
            "status": report.status.as_str(),
            "completed": report.status == RunStatus::Completed,
            "outputs": crate::headless::outputs_as_json(&report.outputs),
            "error": report.error,
            "trusted": runner.trust().is_trusted(),
            "safe_mode": runner.safe_mode_note(),
            "nodes": nodes,
        }))
    }

    /// A recorded run: the one named, else the graph's newest.
    fn explain_run(&self, args: &Map<String, Json>) -> Result<Json, ToolError> {
        let failed = |err: agentloom_engine::StoreError| ToolError::Failed(err.to_string());
        let store = self.store.as_ref().ok_or_else(|| {
            ToolError::Failed("runs are not recorded here, so none can be explained".to_owned())
        })?;
        let run_id = match opt_str_arg(args, "run_id")? {
            Some(id) => id.to_owned(),
            None => {
                let doc = self.graph.load().map_err(ToolError::Failed)?;
                let newest = store.list_runs_of_graph(&doc.name, 1).map_err(failed)?;
                newest.into_iter().next().map(|run| run.id).ok_or_else(|| {
                    ToolError::Failed(format!(
                        "the graph `{}` has no recorded run yet; call run first",
                        doc.name
                    ))
                })?
            }
        };
        let detail = store
            .get_run(&run_id)
            .map_err(failed)?
            .ok_or_else(|| ToolError::Failed(format!("no run `{run_id}` in the run log")))?;
        let nodes: Vec<Json> = detail
            .nodes
            .iter()
            .map(|node| {
                json!({
                    "id": node.node_id,
                    "block": node.block,
                    "status": node.status.as_str(),
                    "attempts": node.attempts,
                    "error": node.error,
                    "skip_reason": node.skip_reason,
                    "started_at_ms": node.started_at_ms,
                    "finished_at_ms": node.finished_at_ms,
                    "duration_ms": node.duration_ms,
                })
            })
            .collect();
        let run = &detail.run;
        Ok(json!({
            "run_id": run.id,
            "graph": run.graph_name,
            "status": run.status.as_str(),
            "error": run.error,
            "started_at_ms": run.started_at_ms,
            "duration_ms": run.duration_ms,
            "inputs": crate::headless::outputs_as_json(&detail.inputs),
            "outputs": crate::headless::outputs_as_json(&detail.outputs),
            "nodes": nodes,
        }))
    }

    fn resources(&self) -> Vec<Resource> {
        vec![
            Resource::new(GRAPH_URI, "graph")
                .with_title(format!("The graph {}", self.graph.describe()))
                .with_mime_type("application/json"),
            Resource::new(BLOCKS_URI, "blocks")
                .with_title("The blocks a graph can use, with their ports and config schemas")
                .with_mime_type("application/json"),
        ]
    }
}

impl ServerHandler for EditServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new(
            "agentloom-edit",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request).await.map(CallToolResponse::from)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(self.resources()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let text = match uri.as_str() {
            GRAPH_URI => {
                self.blocking(|graph| graph.load().map(|doc| doc.to_json_string()))
                    .await?
            }
            BLOCKS_URI => {
                self.blocking(|graph| {
                    let doc = graph.load()?;
                    let (catalog, _) = graph.catalog(&doc);
                    serde_json::to_string_pretty(&edit::catalog_entries(catalog.as_ref()))
                        .map_err(|e| e.to_string())
                })
                .await?
            }
            other => {
                return Err(ErrorData::resource_not_found(
                    format!(
                        "no resource `{other}`; the resources are {GRAPH_URI} and {BLOCKS_URI}"
                    ),
                    None,
                ));
            }
        }
        .map_err(|message| ErrorData::internal_error(message, None))?;
        let contents = ResourceContents::text(text, uri).with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}
