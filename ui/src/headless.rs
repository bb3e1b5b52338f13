//! Runs one graph file many times without a window: the shared core of `agentloom serve`
//! (Agent Protocol tasks, webhook, schedule) and `agentloom mcp`. Every run is recorded in
//! the run log like a run started from the app or `agentloom run`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{RunInput, SecretSource, ValidGraph, ValueMap, validate_shared};
use agentloom_engine::{
    CollectSink, EventSink, Executor, FanoutSink, RunEvent, RunOptions, RunReport, RunStore,
};
use tokio_util::sync::CancellationToken;

/// A validated graph, ready to run with any inputs in any workspace.
pub struct GraphRunner {
    path: PathBuf,
    graph: Arc<ValidGraph>,
    executor: Executor,
    store: Option<Arc<RunStore>>,
    trusted: bool,
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
        let trusted = trust_given || crate::trust::is_trusted(path);
        if !trusted && let Ok(doc) = crate::cli::load_graph(path) {
            let needs = crate::trust::needs_of(&doc, Some(path));
            if !needs.is_empty() {
                return Err(crate::trust::refusal(path, &needs));
            }
        }
        let secrets = secrets_for(path, trusted);
        let (registry, graph) = load_with_tools(path, secrets.as_ref(), trusted)?;
        let executor = Executor::new(registry).with_secrets(secrets);
        Ok(GraphRunner {
            path: path.to_owned(),
            graph: Arc::new(graph),
            executor,
            store,
            trusted,
        })
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
        crate::cli::check_inputs(&self.graph, inputs)
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

    /// [`GraphRunner::run`], its outbound calls answered from `replay` when given.
    pub async fn run_replaying(
        &self,
        inputs: ValueMap,
        workspace: &Path,
        cancel: CancellationToken,
        replay: Option<Arc<agentloom_engine::Replay>>,
    ) -> FinishedRun {
        let collect = Arc::new(CollectSink::default());
        let mut sinks: Vec<Arc<dyn EventSink>> = vec![collect.clone()];
        let recorder = self.store.as_ref().and_then(|store| {
            store
                .recorder(&self.graph.doc)
                .map_err(|err| tracing::warn!("this run will not be logged: {err}"))
                .ok()
                .map(Arc::new)
        });
        if let Some(recorder) = &recorder {
            sinks.push(recorder.clone());
        }
        let options = RunOptions {
            cancel,
            replay,
            ..RunOptions::default()
        };
        let report = self
            .executor
            .clone()
            .with_workspace(workspace.to_owned())
            .run(
                self.graph.clone(),
                inputs,
                options,
                Arc::new(FanoutSink(sinks)),
            )
            .await;
        if let Some(recorder) = recorder {
            let finished = tokio::task::spawn_blocking(move || recorder.finish()).await;
            if let Ok(Err(err)) = finished {
                tracing::warn!("the run log may be incomplete: {err}");
            }
        }
        FinishedRun {
            report,
            events: collect.events(),
        }
    }
}

/// Credentials: `AGENTLOOM_SECRET_<NAME>` first, then the OS keychain (asked only when a
/// block needs a secret, so graphs without credentials never touch the keychain).
pub fn default_secrets() -> Arc<dyn SecretSource> {
    match agentloom_engine::CredentialStore::open_default() {
        Ok(store) => Arc::new(agentloom_engine::KeychainSecrets::new(Arc::new(store))),
        Err(_) => Arc::new(agentloom_engine::EnvSecrets),
    }
}

/// The credentials a run of the graph file at `path` may use: none when it is untrusted.
pub fn secrets_for(path: &Path, trusted: bool) -> Arc<dyn SecretSource> {
    if trusted {
        default_secrets()
    } else {
        Arc::new(crate::trust::UntrustedSecrets::new(path))
    }
}

/// Loads and validates the graph at `path` with the built-in blocks and the tools of the
/// MCP servers it names (connected now, kept for the registry's life). Untrusted, no
/// server is connected and the graph runs in safe mode (see [`crate::trust`]). Every
/// problem names the file.
pub fn load_with_tools(
    path: &Path,
    secrets: &dyn SecretSource,
    trusted: bool,
) -> Result<(Arc<Registry>, ValidGraph), Vec<String>> {
    let doc = crate::cli::load_graph(path).map_err(|e| vec![e])?;
    // Recorded with absolute `graph.call` paths: the run can be resumed from anywhere.
    let mut doc = agentloom_blocks::graph_call::with_absolute_paths(doc, Some(path));
    // An untrusted graph always runs in safe mode: every side effect asks first.
    doc.settings.safe_mode |= !trusted;
    let (registry, problems) = crate::trust::catalog_for(&doc, Some(path), trusted, secrets);
    let doc = Arc::new(doc);
    let mut problems: Vec<String> = problems
        .iter()
        .map(|p| crate::cli::format_problem(path, p))
        .collect();
    match validate_shared(doc.clone(), &registry) {
        Ok(graph) if problems.is_empty() => Ok((Arc::new(registry), graph)),
        Ok(_) => Err(problems),
        Err(mut more) => {
            if !trusted {
                crate::trust::drop_offline_tool_nodes(&mut more, &doc);
            }
            problems.extend(more.iter().map(|p| crate::cli::format_problem(path, p)));
            Err(problems)
        }
    }
}

/// Opens the run log at `db` (default: the per-user one) for a long-running command.
pub fn open_run_log(db: Option<PathBuf>) -> anyhow::Result<Arc<RunStore>> {
    let path = match db {
        Some(path) => path,
        None => RunStore::default_path()?,
    };
    Ok(Arc::new(RunStore::open(&path)?))
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
