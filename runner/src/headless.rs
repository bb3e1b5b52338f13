//! Runs one graph file many times without a window: the shared core of `agentloom serve`
//! (Agent Protocol tasks, webhook, schedule) and `agentloom mcp`. Every run is recorded in
//! the run log like a run started from the app or `agentloom run`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_core::{RunInput, ValidGraph, ValueMap};
use agentloom_engine::{CollectSink, RunEvent, RunOptions, RunReport, RunStore};
use tokio_util::sync::CancellationToken;

use crate::{Credentials, GraphSource, Launch, Log, Prepared, Trust, Workspace};

/// A validated graph, ready to run with any inputs in any workspace.
pub struct GraphRunner {
    path: PathBuf,
    prepared: Prepared,
    store: Option<Arc<RunStore>>,
    /// With a queue (`serve --nats`), runs go to its workers instead of running here.
    queue: Option<crate::remote::Nats>,
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
        // Read once: what trust is checked against is what runs.
        let source = GraphSource::read(path).map_err(|e| vec![e.to_string()])?;
        let trusted = trust_given || source.is_trusted();
        if !trusted {
            let needs = source.needs();
            if !needs.is_empty() {
                return Err(crate::trust::refusal(path, &needs));
            }
        }
        Self::prepare(path, source, trusted, store, replay)
    }

    /// The graph `source` shown from the file at `path` (maybe with changes not saved
    /// yet), trusted as `trusted` says: untrusted, it runs offline in safe mode, and one
    /// that needs trust is refused by the caller, who knows what to tell.
    pub fn of_source(
        path: &Path,
        source: GraphSource,
        trusted: bool,
        store: Option<Arc<RunStore>>,
    ) -> Result<GraphRunner, Vec<String>> {
        Self::prepare(path, source, trusted, store, None)
    }

    fn prepare(
        path: &Path,
        source: GraphSource,
        trusted: bool,
        store: Option<Arc<RunStore>>,
        replay: Option<&agentloom_engine::Replay>,
    ) -> Result<GraphRunner, Vec<String>> {
        let trust = Trust::of(trusted, Some(path));
        let prepared = Prepared::new(source, trust, &Credentials::Default, replay)?;
        Ok(GraphRunner {
            path: path.to_owned(),
            prepared,
            store,
            queue: None,
        })
    }

    /// Sends every run to the workers of `queue` instead of running it here.
    pub fn with_queue(mut self, queue: crate::remote::Nats) -> GraphRunner {
        self.queue = Some(queue);
        self
    }

    /// Why side effects will need approval, when the file is not trusted.
    pub fn safe_mode_note(&self) -> Option<String> {
        self.prepared.safe_mode_note()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn graph(&self) -> &ValidGraph {
        self.prepared.graph()
    }

    /// Whether runs of it are trusted.
    pub fn trust(&self) -> &Trust {
        self.prepared.trust()
    }

    /// The graph's name, or the file name when the graph has none.
    pub fn name(&self) -> String {
        let name = self.graph().doc.name.trim();
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
        self.graph().interface_inputs()
    }

    /// Checks given inputs against the graph's declared inputs; the error names the input.
    pub fn check_inputs(&self, inputs: &ValueMap) -> Result<(), String> {
        super::check_inputs(self.graph(), inputs)
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
        self.run_inner(
            inputs,
            Workspace::MadeOnUse(folder.to_owned()),
            cancel,
            None,
        )
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
        self.run_inner(
            inputs,
            Workspace::Shared(workspace.to_owned()),
            cancel,
            replay,
        )
        .await
    }

    async fn run_inner(
        &self,
        inputs: ValueMap,
        workspace: Workspace,
        cancel: CancellationToken,
        replay: Option<Arc<agentloom_engine::Replay>>,
    ) -> FinishedRun {
        if let Some(queue) = &self.queue {
            let (report, events) = crate::remote::run_queued(
                queue,
                self.store.clone(),
                &self.prepared,
                &self.path,
                inputs,
                cancel,
            )
            .await;
            return FinishedRun { report, events };
        }
        let collect = Arc::new(CollectSink::default());
        let launch = Launch {
            options: RunOptions {
                cancel,
                replay,
                ..RunOptions::default()
            },
            log: self.store.clone().map(Log::new),
            sinks: vec![collect.clone()],
            ..Launch::new(inputs, workspace)
        };
        let launched = self.prepared.launch(launch).await;
        if let Some(err) = launched.log_error {
            tracing::warn!("{err}");
        }
        FinishedRun {
            report: launched.report,
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
