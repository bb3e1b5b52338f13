//! The Agent Protocol (v1) over one graph: the REST interface AutoGPT's benchmark drives.
//!
//! A task is a run of the graph with the task's input, in a directory of its own. The first
//! step runs the graph; the step ends the task (`is_last`) unless a node reported steps of
//! its own (an output named `steps`, or an agent's `transcript`, holding a list): those are
//! then handed out one per step request. Files the run wrote in the task's directory are listed as agent-created artifacts.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use agentloom_core::{Value, ValueMap, ValueType};
use agentloom_engine::{EventKind, RunStatus};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Multipart, Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use agentloom_blocks::confined;

use crate::runner::headless::{GraphRunner, outputs_as_json, outputs_as_text};

/// The routes under `/ap/v1`.
pub fn router(state: Arc<AgentProtocol>) -> Router {
    Router::new()
        .route("/ap/v1/agent/tasks", get(list_tasks).post(create_task))
        .route("/ap/v1/agent/tasks/{task_id}", get(get_task))
        .route(
            "/ap/v1/agent/tasks/{task_id}/steps",
            get(list_steps).post(execute_step),
        )
        .route(
            "/ap/v1/agent/tasks/{task_id}/steps/{step_id}",
            get(get_step),
        )
        .route(
            "/ap/v1/agent/tasks/{task_id}/artifacts",
            get(list_artifacts).post(upload_artifact),
        )
        .route(
            "/ap/v1/agent/tasks/{task_id}/artifacts/{artifact_id}",
            get(download_artifact),
        )
        .with_state(state)
}

/// The server's tasks, each with its own directory under `tasks_dir`.
pub struct AgentProtocol {
    runner: Arc<GraphRunner>,
    tasks_dir: PathBuf,
    /// Stops the runs in progress when the server shuts down.
    shutdown: CancellationToken,
    tasks: Mutex<Vec<Arc<tokio::sync::Mutex<TaskState>>>>,
    index: Mutex<HashMap<String, usize>>,
}

struct TaskState {
    task: Task,
    workspace: PathBuf,
    steps: Vec<Step>,
    /// Steps a node reported that are not handed out yet.
    pending: Vec<Step>,
    finished: bool,
}

#[derive(Clone, Serialize)]
struct Task {
    task_id: String,
    input: Option<String>,
    additional_input: serde_json::Value,
    created_at: String,
    modified_at: String,
    artifacts: Vec<Artifact>,
}

#[derive(Clone, Serialize)]
struct Step {
    task_id: String,
    step_id: String,
    name: String,
    input: Option<String>,
    additional_input: serde_json::Value,
    status: &'static str,
    output: Option<String>,
    additional_output: serde_json::Value,
    artifacts: Vec<Artifact>,
    is_last: bool,
    created_at: String,
    modified_at: String,
}

#[derive(Clone, Serialize)]
struct Artifact {
    artifact_id: String,
    file_name: String,
    /// The folder of the file within the task's directory (empty at the top).
    relative_path: String,
    agent_created: bool,
    created_at: String,
    modified_at: String,
}

impl Artifact {
    /// The file's path relative to the task's directory.
    fn relative_file(&self) -> String {
        if self.relative_path.is_empty() {
            self.file_name.clone()
        } else {
            format!("{}/{}", self.relative_path, self.file_name)
        }
    }
}

/// An error answered as `{"error": message}` with a status.
struct ApiError(StatusCode, String);

impl ApiError {
    fn bad_request(message: impl Into<String>) -> Self {
        ApiError(StatusCode::BAD_REQUEST, message.into())
    }

    fn not_found(message: impl Into<String>) -> Self {
        ApiError(StatusCode::NOT_FOUND, message.into())
    }

    fn internal(message: impl Into<String>) -> Self {
        ApiError(StatusCode::INTERNAL_SERVER_ERROR, message.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn new_id() -> String {
    agentloom_engine::new_run_id()
}

impl AgentProtocol {
    pub fn new(
        runner: Arc<GraphRunner>,
        tasks_dir: PathBuf,
        shutdown: CancellationToken,
    ) -> AgentProtocol {
        AgentProtocol {
            runner,
            tasks_dir,
            shutdown,
            tasks: Mutex::new(Vec::new()),
            index: Mutex::new(HashMap::new()),
        }
    }

    fn task(&self, task_id: &str) -> ApiResult<Arc<tokio::sync::Mutex<TaskState>>> {
        let position = self
            .index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(task_id)
            .copied();
        position
            .and_then(|i| {
                self.tasks
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get(i)
                    .cloned()
            })
            .ok_or_else(|| ApiError::not_found(format!("no task `{task_id}`")))
    }

    fn all_tasks(&self) -> Vec<Arc<tokio::sync::Mutex<TaskState>>> {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The run inputs of a task: its `input` goes to the graph input named `input`, else to
    /// the first text input; `additional_input` may name any other graph input.
    fn task_inputs(
        &self,
        input: Option<&str>,
        additional: &serde_json::Value,
    ) -> ApiResult<ValueMap> {
        let declared = self.runner.inputs();
        let mut inputs = ValueMap::new();
        if let serde_json::Value::Object(extra) = additional {
            for (name, value) in extra {
                if declared.iter().any(|d| &d.name == name) {
                    inputs.insert(name.clone(), Value::from_json(value.clone()));
                }
            }
        }
        let target = declared
            .iter()
            .find(|d| d.name == "input")
            .or_else(|| declared.iter().find(|d| d.ty == ValueType::Text));
        if let (Some(text), Some(target)) = (input, target) {
            inputs.insert(target.name.clone(), Value::text(text.to_owned()));
        }
        self.runner
            .check_inputs(&inputs)
            .map_err(|message| ApiError::bad_request(format!("input: {message}")))?;
        Ok(inputs)
    }
}

/// Pagination query: `current_page` (from 1) and `page_size`.
#[derive(serde::Deserialize)]
struct PageQuery {
    current_page: Option<String>,
    page_size: Option<String>,
}

fn page_number(raw: Option<&str>, field: &str, default: usize) -> ApiResult<usize> {
    match raw {
        None => Ok(default),
        Some(text) => text
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{field}: expected a whole number from 1, got `{text}`"
                ))
            }),
    }
}

/// One page of `items` and the pagination object that describes it.
fn paginate<T: Clone>(items: &[T], query: &PageQuery) -> ApiResult<(Vec<T>, serde_json::Value)> {
    let current = page_number(query.current_page.as_deref(), "current_page", 1)?;
    let size = page_number(query.page_size.as_deref(), "page_size", 10)?;
    let total = items.len();
    let page: Vec<T> = items
        .iter()
        .skip((current - 1).saturating_mul(size))
        .take(size)
        .cloned()
        .collect();
    let pagination = json!({
        "total_items": total,
        "total_pages": total.div_ceil(size),
        "current_page": current,
        "page_size": size,
    });
    Ok((page, pagination))
}

/// Reads an optional JSON request body `{input, additional_input}`; an empty body is `{}`.
fn request_body(body: &Bytes) -> ApiResult<(Option<String>, serde_json::Value)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((None, serde_json::Value::Null));
    }
    let json: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    let object = match json {
        serde_json::Value::Null => return Ok((None, serde_json::Value::Null)),
        serde_json::Value::Object(object) => object,
        _ => return Err(ApiError::bad_request("the body must be a JSON object")),
    };
    let input = match object.get("input") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(text)) => Some(text.clone()),
        Some(_) => return Err(ApiError::bad_request("input: must be a string")),
    };
    let additional = match object.get("additional_input") {
        None | Some(serde_json::Value::Null) => serde_json::Value::Null,
        Some(value @ serde_json::Value::Object(_)) => value.clone(),
        Some(_) => {
            return Err(ApiError::bad_request(
                "additional_input: must be a JSON object",
            ));
        }
    };
    Ok((input, additional))
}

async fn create_task(
    State(ap): State<Arc<AgentProtocol>>,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    let (input, additional_input) = request_body(&body)?;
    ap.task_inputs(input.as_deref(), &additional_input)?;
    let task_id = new_id();
    // Made when a step's run or an upload first writes into it: most tasks never do.
    let workspace = ap.tasks_dir.join(&task_id);
    let created = now();
    let task = Task {
        task_id: task_id.clone(),
        input,
        additional_input,
        created_at: created.clone(),
        modified_at: created,
        artifacts: Vec::new(),
    };
    let answer = serde_json::to_value(&task).map_err(|e| ApiError::internal(e.to_string()))?;
    let state = TaskState {
        task,
        workspace,
        steps: Vec::new(),
        pending: Vec::new(),
        finished: false,
    };
    let mut tasks = ap
        .tasks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    tasks.push(Arc::new(tokio::sync::Mutex::new(state)));
    ap.index
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(task_id, tasks.len() - 1);
    Ok(Json(answer))
}

async fn list_tasks(
    State(ap): State<Arc<AgentProtocol>>,
    Query(query): Query<PageQuery>,
) -> ApiResult<Json<serde_json::Value>> {
    let mut tasks = Vec::new();
    for task in ap.all_tasks() {
        tasks.push(task.lock().await.task.clone());
    }
    let (page, pagination) = paginate(&tasks, &query)?;
    Ok(Json(json!({"tasks": page, "pagination": pagination})))
}

async fn get_task(
    State(ap): State<Arc<AgentProtocol>>,
    UrlPath(task_id): UrlPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let task = ap.task(&task_id)?;
    let state = task.lock().await;
    Ok(Json(json!(state.task)))
}

async fn list_steps(
    State(ap): State<Arc<AgentProtocol>>,
    UrlPath(task_id): UrlPath<String>,
    Query(query): Query<PageQuery>,
) -> ApiResult<Json<serde_json::Value>> {
    let task = ap.task(&task_id)?;
    let state = task.lock().await;
    let (page, pagination) = paginate(&state.steps, &query)?;
    Ok(Json(json!({"steps": page, "pagination": pagination})))
}

async fn get_step(
    State(ap): State<Arc<AgentProtocol>>,
    UrlPath((task_id, step_id)): UrlPath<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let task = ap.task(&task_id)?;
    let state = task.lock().await;
    let step = state
        .steps
        .iter()
        .find(|s| s.step_id == step_id)
        .ok_or_else(|| ApiError::not_found(format!("task `{task_id}` has no step `{step_id}`")))?;
    Ok(Json(json!(step)))
}

async fn execute_step(
    State(ap): State<Arc<AgentProtocol>>,
    UrlPath(task_id): UrlPath<String>,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    let (step_input, step_additional) = request_body(&body)?;
    let task = ap.task(&task_id)?;
    // Holding the task's lock for the whole run keeps its steps in order.
    let mut state = task.lock().await;
    if state.finished && state.pending.is_empty() {
        return Err(ApiError::bad_request(format!(
            "task `{task_id}` has finished (its last step is done); create a new task to run the graph again"
        )));
    }
    if !state.finished {
        let task_input = step_input.clone().or_else(|| state.task.input.clone());
        let additional = if step_additional.is_null() {
            state.task.additional_input.clone()
        } else {
            step_additional.clone()
        };
        let inputs = ap.task_inputs(task_input.as_deref(), &additional)?;
        let workspace = state.workspace.clone();
        let run = ap
            .runner
            .run_in_folder_made_on_use(inputs, &workspace, ap.shutdown.child_token())
            .await;
        state.finished = true;
        let report = &run.report;
        let output = match report.status {
            RunStatus::Completed => outputs_as_text(&report.outputs),
            other => format!(
                "the run {}: {}",
                other.as_str(),
                report.error.clone().unwrap_or_default()
            ),
        };
        let run_summary = json!({
            "run_id": report.run_id,
            "status": report.status.as_str(),
            "outputs": outputs_as_json(&report.outputs),
            "error": report.error,
        });
        let reported = reported_steps(&run.events);
        let created = now();
        let step_of = |name: String, output: Option<String>, extra: serde_json::Value| Step {
            task_id: task_id.clone(),
            step_id: new_id(),
            name,
            input: step_input.clone(),
            additional_input: step_additional.clone(),
            status: "completed",
            output,
            additional_output: extra,
            artifacts: Vec::new(),
            is_last: false,
            created_at: created.clone(),
            modified_at: created.clone(),
        };
        if reported.is_empty() {
            state
                .pending
                .push(step_of(state_name(&ap), Some(output), run_summary));
        } else {
            let count = reported.len();
            for (i, reported) in reported.into_iter().enumerate() {
                let mut extra = json!({"run_id": report.run_id, "step": reported});
                // The run's own result travels with the last step.
                let name = match reported["tool"].as_str() {
                    Some(tool) => format!("step {}: {tool}", i + 1),
                    None => format!("step {}", i + 1),
                };
                let text = if i + 1 == count {
                    extra["run"] = run_summary.clone();
                    Some(output.clone())
                } else if let Some(observation) = reported["observation"].as_str() {
                    Some(observation.to_owned())
                } else {
                    Some(Value::from_json(reported).to_text())
                };
                state.pending.push(step_of(name, text, extra));
            }
        }
        state.pending.reverse();
        refresh_artifacts(&mut state).await;
    }
    let mut step = state
        .pending
        .pop()
        .ok_or_else(|| ApiError::internal("no step to hand out"))?;
    step.is_last = state.pending.is_empty();
    if step.is_last {
        step.artifacts = state
            .task
            .artifacts
            .iter()
            .filter(|a| a.agent_created)
            .cloned()
            .collect();
    }
    state.task.modified_at = now();
    state.steps.push(step.clone());
    Ok(Json(json!(step)))
}

fn state_name(ap: &AgentProtocol) -> String {
    format!("run {}", ap.runner.name())
}

/// The output ports whose list is a node's own steps (an agent's decisions are its
/// `transcript`).
const STEP_PORTS: [&str; 2] = ["steps", "transcript"];

/// Steps the run's nodes reported: each list a node put out on a port of [`STEP_PORTS`].
fn reported_steps(events: &[agentloom_engine::RunEvent]) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::NodeFinished { outputs, .. } => {
                STEP_PORTS.iter().find_map(|port| outputs.get(*port))
            }
            _ => None,
        })
        .filter_map(Value::as_list)
        .flat_map(|steps| steps.iter().map(Value::to_json))
        .collect()
}

/// The most files of a task's directory listed as artifacts.
const MAX_ARTIFACTS: usize = 10_000;

/// Lists every file in the task's directory that is not an artifact yet as agent-created
/// (regular files only: a link is neither listed nor followed).
async fn refresh_artifacts(state: &mut TaskState) {
    // A folder nothing was written into is never made (the common case): one `stat`
    // instead of a listing on the blocking pool.
    if std::fs::symlink_metadata(&state.workspace).is_err() {
        return;
    }
    let found = confined::files_under(&state.workspace, MAX_ARTIFACTS).await;
    for relative in found {
        let folder = relative
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file_name = relative
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let known = state
            .task
            .artifacts
            .iter()
            .any(|a| a.relative_path == folder && a.file_name == file_name);
        if !known {
            let created = now();
            state.task.artifacts.push(Artifact {
                artifact_id: new_id(),
                file_name,
                relative_path: folder,
                agent_created: true,
                created_at: created.clone(),
                modified_at: created,
            });
        }
    }
}

async fn list_artifacts(
    State(ap): State<Arc<AgentProtocol>>,
    UrlPath(task_id): UrlPath<String>,
    Query(query): Query<PageQuery>,
) -> ApiResult<Json<serde_json::Value>> {
    let task = ap.task(&task_id)?;
    let state = task.lock().await;
    let (page, pagination) = paginate(&state.task.artifacts, &query)?;
    Ok(Json(json!({"artifacts": page, "pagination": pagination})))
}

/// A folder inside the task directory: relative, no `..`, no root.
fn safe_folder(raw: &str) -> ApiResult<String> {
    let trimmed = raw.trim().trim_matches('/');
    let path = Path::new(trimmed);
    if path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        Ok(trimmed.to_owned())
    } else {
        Err(ApiError::bad_request(format!(
            "relative_path: `{raw}` must be a folder inside the task directory (no `..`, not absolute)"
        )))
    }
}

fn safe_file_name(raw: &str) -> ApiResult<String> {
    let name = Path::new(raw)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .filter(|f| !f.is_empty() && f != "." && f != "..")
        .ok_or_else(|| ApiError::bad_request(format!("file: `{raw}` is not a file name")))?;
    Ok(name)
}

async fn upload_artifact(
    State(ap): State<Arc<AgentProtocol>>,
    UrlPath(task_id): UrlPath<String>,
    mut multipart: Multipart,
) -> ApiResult<Json<serde_json::Value>> {
    let task = ap.task(&task_id)?;
    let mut file: Option<(String, Bytes)> = None;
    let mut folder = String::new();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return Err(ApiError::bad_request(format!("the multipart body: {e}"))),
        };
        match field.name().unwrap_or_default() {
            "file" => {
                let name = safe_file_name(field.file_name().unwrap_or_default())?;
                let bytes = field
                    .bytes()
                    .await
                    .map_err(|e| ApiError::bad_request(format!("file: {e}")))?;
                file = Some((name, bytes));
            }
            "relative_path" => {
                let text = field
                    .text()
                    .await
                    .map_err(|e| ApiError::bad_request(format!("relative_path: {e}")))?;
                folder = safe_folder(&text)?;
            }
            _ => {}
        }
    }
    let Some((file_name, bytes)) = file else {
        return Err(ApiError::bad_request(
            "file: missing; send the file as the multipart field `file`",
        ));
    };
    let mut state = task.lock().await;
    let created = now();
    let artifact = Artifact {
        artifact_id: new_id(),
        file_name,
        relative_path: folder,
        agent_created: false,
        created_at: created.clone(),
        modified_at: created,
    };
    tokio::fs::create_dir_all(&state.workspace)
        .await
        .map_err(|e| {
            ApiError::internal(format!(
                "cannot create the task directory {}: {e}",
                state.workspace.display()
            ))
        })?;
    // Never through a link: the file and its folders stay inside the task's directory.
    confined::write(
        &state.workspace,
        &artifact.relative_file(),
        bytes.to_vec(),
        false,
    )
    .await
    .map_err(|e| ApiError::bad_request(format!("file: {}", e.message)))?;
    // A new upload of the same path replaces the earlier artifact.
    state.task.artifacts.retain(|a| {
        !(a.relative_path == artifact.relative_path && a.file_name == artifact.file_name)
    });
    state.task.artifacts.push(artifact.clone());
    state.task.modified_at = now();
    Ok(Json(json!(artifact)))
}

async fn download_artifact(
    State(ap): State<Arc<AgentProtocol>>,
    UrlPath((task_id, artifact_id)): UrlPath<(String, String)>,
) -> ApiResult<Response> {
    let task = ap.task(&task_id)?;
    let state = task.lock().await;
    let artifact = state
        .task
        .artifacts
        .iter()
        .find(|a| a.artifact_id == artifact_id)
        .ok_or_else(|| {
            ApiError::not_found(format!("task `{task_id}` has no artifact `{artifact_id}`"))
        })?;
    let (file, size) = confined::open_for_read(&state.workspace, &artifact.relative_file())
        .await
        .map_err(|e| {
            ApiError::not_found(format!(
                "artifact `{artifact_id}` cannot be read: {}",
                e.describe(&state.workspace, "")
            ))
        })?;
    let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(
        tokio::fs::File::from_std(file),
    ));
    let disposition = format!(
        "attachment; filename=\"{}\"",
        artifact.file_name.replace('"', "")
    );
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        body,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use agentloom_core::Usage;
    use agentloom_engine::RunEvent;

    use super::*;

    fn finished(node: &str, outputs: ValueMap) -> RunEvent {
        RunEvent {
            seq: 0,
            at_ms: 0,
            kind: EventKind::NodeFinished {
                node: node.to_owned(),
                outputs,
                attempts: 1,
                duration_ms: 0,
                usage: Usage::default(),
                outputs_redacted: None,
            },
        }
    }

    #[test]
    fn steps_a_node_reported_become_protocol_steps() {
        let mut agent = ValueMap::new();
        agent.insert(
            "steps".to_owned(),
            Value::from_json(json!([{"thought": "read the file"}, {"tool": "write"}])),
        );
        let mut plain = ValueMap::new();
        plain.insert("text".to_owned(), Value::text("no steps here".to_owned()));
        let mut ai_agent = ValueMap::new();
        ai_agent.insert(
            "transcript".to_owned(),
            Value::from_json(json!([{"tool": "finish", "observation": "finished"}])),
        );
        let events = [
            finished("plain", plain),
            finished("agent", agent),
            finished("ai_agent", ai_agent),
        ];
        assert_eq!(
            reported_steps(&events),
            [
                json!({"thought": "read the file"}),
                json!({"tool": "write"}),
                json!({"tool": "finish", "observation": "finished"})
            ]
        );
        assert!(reported_steps(&events[..1]).is_empty());
    }

    #[test]
    fn upload_paths_stay_in_the_task_directory() {
        assert_eq!(safe_folder("a/b/").ok().as_deref(), Some("a/b"));
        assert_eq!(safe_folder("").ok().as_deref(), Some(""));
        assert!(safe_folder("../x").is_err());
        assert!(safe_folder("a/../../x").is_err());
        assert_eq!(
            safe_file_name("dir/evil.txt").ok().as_deref(),
            Some("evil.txt")
        );
        assert!(safe_file_name("..").is_err());
    }
}
