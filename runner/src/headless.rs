//! Runs one graph file many times without a window: the shared core of `agentloom serve`
//! (Agent Protocol tasks, webhook, schedule) and `agentloom mcp`. Every run is recorded in
//! the run log like a run started from the app or `agentloom run`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_core::{RunInput, ValidGraph, ValueMap};
use agentloom_engine::{
    CollectSink, EventSink, Executor, FanoutSink, LogPolicy, RunEvent, RunOptions, RunReport,
    RunStore,
};

use super::record::{RunContext, RunRecording};
use tokio_util::sync::CancellationToken;

/// Where a run's file blocks are confined.
#[derive(Clone, Copy)]
enum Workspace<'a> {
    Existing(&'a Path),
    MadeOnUse(&'a Path),
}

/// A validated graph, ready to run with any inputs in any workspace.
pub struct GraphRunner {
    path: PathBuf,
    graph: Arc<ValidGraph>,
    executor: Executor,
    store: Option<Arc<RunStore>>,
    trusted: bool,
    /// With a queue (`serve --nats`), runs go to its workers instead of running here.
    queue: Option<crate::remote::Nats>,
    /// The text of every graph file the graph calls, as validated (sent with queued runs).
    called_files: Vec<(String, String)>,
}

/// A finished run with every event it emitted (for callers that read node outputs).
pub struct FinishedRun {
    pub report: RunReport,
    pub events: Vec<RunEvent>,
}

impl GraphRunner {
    /// Loads and validates `path`; the error lists every problem, each naming the file.
    /// `store` is the run log every run is recorded in (`None`: not recorded).
    /// An untrusted file (not recorded as trusted, and not `trust_given` by `--trust`) that
    /// needs trust is refused with what trusting would allow; one that needs none runs
    /// offline in safe mode.
    pub fn load(
        path: &Path,
        store: Option<Arc<RunStore>>,
        trust_given: bool,
    ) -> Result<GraphRunner, Vec<String>> {
        Self::load_replaying(path, store, trust_given, None)
    }

    /// [`GraphRunner::load`] for runs that replay `replay`: MCP servers whose tool lists
    /// it recorded are not started.
    pub fn load_replaying(
        path: &Path,
        store: Option<Arc<RunStore>>,
        trust_given: bool,
        replay: Option<&agentloom_engine::Replay>,
    ) -> Result<GraphRunner, Vec<String>> {
        let trusted = trust_given || crate::trust::is_trusted(path);
        if !trusted && let Ok(doc) = super::load_graph(path) {
            let needs = crate::trust::needs_of(&doc, Some(path));
            if !needs.is_empty() {
                return Err(crate::trust::refusal(path, &needs));
            }
        }
        let secrets = super::secrets_for(path, trusted);
        let (registry, graph) =
            super::catalog::load_replaying(path, secrets.as_ref(), trusted, replay)?;
        let called_files = registry
            .graph_files()
            .map(|files| files.contents())
            .unwrap_or_default();
        let executor = Executor::new(registry).with_secrets(secrets);
        Ok(GraphRunner {
            path: path.to_owned(),
            graph: Arc::new(graph),
            executor,
            store,
            trusted,
            queue: None,
            called_files,
        })
    }

    /// Sends every run to the workers of `queue` instead of running it here.
    pub fn with_queue(mut self, queue: crate::remote::Nats) -> GraphRunner {
        self.queue = Some(queue);
        self
    }

    /// Why side effects will need approval, when the file is not trusted.
    pub fn safe_mode_note(&self) -> Option<String> {
        if self.trusted {
            return None;
        }
        crate::trust::safe_mode_note(&self.path, &self.graph)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn graph(&self) -> &ValidGraph {
        &self.graph
    }

    /// The graph's name, or the file name when the graph has none.
    pub fn name(&self) -> String {
        let name = self.graph.doc.name.trim();
        if name.is_empty() {
            self.path
                .file_name()
                .map(|f| f.to_string_lossy().trim_end_matches(".json").to_owned())
                .unwrap_or_default()
        } else {
            name.to_owned()
        }
    }

    pub fn inputs(&self) -> Vec<RunInput> {
        self.graph.interface_inputs()
    }

    /// Checks given inputs against the graph's declared inputs; the error names the input.
    pub fn check_inputs(&self, inputs: &ValueMap) -> Result<(), String> {
        super::check_inputs(&self.graph, inputs)
    }

    /// Runs the graph once with `inputs`, file blocks confined to `workspace`, and records
    /// the run. A run log that cannot be written is a warning: the run is worth more.
    pub async fn run(
        &self,
        inputs: ValueMap,
        workspace: &Path,
        cancel: CancellationToken,
    ) -> FinishedRun {
        self.run_replaying(inputs, workspace, cancel, None).await
    }

    /// [`GraphRunner::run`] in `folder`, which is made (with its parents) only when a block
    /// first uses it: a server's task folders, most of which no run writes into.
    pub async fn run_in_folder_made_on_use(
        &self,
        inputs: ValueMap,
        folder: &Path,
        cancel: CancellationToken,
    ) -> FinishedRun {
        self.run_inner(inputs, Workspace::MadeOnUse(folder), cancel, None)
            .await
    }

    /// [`GraphRunner::run`], its outbound calls answered from `replay` when given.
    pub async fn run_replaying(
        &self,
        inputs: ValueMap,
        workspace: &Path,
        cancel: CancellationToken,
        replay: Option<Arc<agentloom_engine::Replay>>,
    ) -> FinishedRun {
        self.run_inner(inputs, Workspace::Existing(workspace), cancel, replay)
            .await
    }

    async fn run_inner(
        &self,
        inputs: ValueMap,
        workspace: Workspace<'_>,
        cancel: CancellationToken,
        replay: Option<Arc<agentloom_engine::Replay>>,
    ) -> FinishedRun {
        if let Some(queue) = &self.queue {
            let (report, events) = crate::remote::run_queued(
                queue,
                self.store.clone(),
                &self.graph.doc,
                &self.path,
                self.called_files.clone(),
                inputs,
                cancel,
            )
            .await;
            return FinishedRun { report, events };
        }
        let collect = Arc::new(CollectSink::default());
        let mut sinks: Vec<Arc<dyn EventSink>> = vec![collect.clone()];
        // Opening a connection and starting the writer touch the disk: off the async
        // workers, which answer the other requests meanwhile.
        let recording = match self.store.clone() {
            Some(store) => {
                let graph = self.graph.clone();
                tokio::task::spawn_blocking(move || {
                    RunRecording::start(
                        &store,
                        &graph.doc,
                        LogPolicy::default(),
                        RunContext::default(),
                    )
                })
                .await
                .map_err(|err| err.to_string())
                .and_then(|started| started.map_err(|err| err.to_string()))
                .map_err(|err| tracing::warn!("this run will not be logged: {err}"))
                .ok()
            }
            None => None,
        };
        if let Some(recording) = &recording {
            sinks.extend(recording.sinks());
        }
        let options = RunOptions {
            cancel,
            replay,
            ..RunOptions::default()
        };
        let executor = match workspace {
            Workspace::Existing(path) => self.executor.clone().with_workspace(path.to_owned()),
            Workspace::MadeOnUse(path) => self
                .executor
                .clone()
                .with_workspace_made_on_use(path.to_owned()),
        };
        let report = executor
            .run(
                self.graph.clone(),
                inputs,
                options,
                Arc::new(FanoutSink(sinks)),
            )
            .await;
        if let Some(recording) = recording {
            let run_id = report.run_id.clone();
            let finished =
                tokio::task::spawn_blocking(move || recording.finish(&run_id, None)).await;
            if let Ok(Err(err)) = finished {
                tracing::warn!("{err}");
            }
        }
        FinishedRun {
            report,
            events: collect.events(),
        }
    }
}

/// A run's outputs as one text: the single output as is, several as `name: value` lines.
pub fn outputs_as_text(outputs: &ValueMap) -> String {
    if outputs.len() == 1
        && let Some(value) = outputs.values().next()
    {
        return value.to_text();
    }
    outputs
        .iter()
        .map(|(name, value)| format!("{name}: {}", value.to_text()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A run's outputs as a JSON object.
pub fn outputs_as_json(outputs: &ValueMap) -> serde_json::Value {
    serde_json::Value::Object(
        outputs
            .iter()
            .map(|(name, value)| (name.clone(), value.to_json()))
            .collect(),
    )
}
