//! Recording a run in the run log, for the commands, `serve`, `mcp` and the app alike: the
//! recorder on the run's event stream, what a resumed run needs recorded beside it (its
//! workspace, the graph files it calls, the untrusted mark), and closing the entry.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_core::GraphDoc;
use agentloom_engine::{
    EventKind, EventSink, LogPolicy, RunEvent, RunRecorder, RunStore, StoreError,
};

/// Opens the run log at `db` (default: the per-user one).
pub fn open_run_log(db: Option<PathBuf>) -> anyhow::Result<Arc<RunStore>> {
    let path = match db {
        Some(path) => path,
        None => RunStore::default_path()?,
    };
    Ok(Arc::new(RunStore::open(&path)?))
}

/// What is kept with a run besides its events, so that resuming it works as it started.
#[derive(Clone, Default)]
pub struct RunContext {
    /// The workspace, recorded as soon as the run is (a run killed while it waits still
    /// resumes there). `None`: recorded when the run ends, if [`RunRecording::finish`] is
    /// given one.
    pub workspace: Option<PathBuf>,
    /// The graph files the run calls (`graph.call`), kept as they are when it starts.
    pub graph_files: Option<Arc<agentloom_blocks::graph_call::GraphFiles>>,
    /// The graph file, when its user has not trusted it: resuming the run still sends no
    /// credential.
    pub untrusted_file: Option<PathBuf>,
    /// The recorded run this one resumes: its decided approvals are cleared at the end.
    pub resumes: Option<String>,
}

/// Closing a run's entry went wrong; the run itself is done.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("the run log may be incomplete: {0}")]
    Incomplete(StoreError),
    #[error("the run's workspace is not recorded: {0}")]
    Workspace(StoreError),
    #[error("the decided approvals of the resumed run are not cleared: {0}")]
    Approvals(StoreError),
}

/// One run's entry in the run log, from its first event to its end.
pub struct RunRecording {
    store: Arc<RunStore>,
    recorder: Arc<RunRecorder>,
    context: RunContext,
}

impl RunRecording {
    /// A recorder for one run of `doc` in `store`.
    pub fn start(
        store: &Arc<RunStore>,
        doc: &Arc<GraphDoc>,
        policy: LogPolicy,
        context: RunContext,
    ) -> Result<Self, StoreError> {
        Ok(RunRecording {
            store: store.clone(),
            recorder: Arc::new(store.recorder_with(doc, policy)?),
            context,
        })
    }

    /// Opens the log at `db` and starts recording; a log that cannot be opened is a
    /// warning on stderr, not a failure: the run is worth more than its log entry.
    pub fn start_or_warn(
        db: Option<PathBuf>,
        doc: &Arc<GraphDoc>,
        policy: LogPolicy,
        context: RunContext,
    ) -> Option<Self> {
        let started = open_run_log(db)
            .and_then(|store| Ok(RunRecording::start(&store, doc, policy, context)?));
        match started {
            Ok(recording) => Some(recording),
            Err(err) => {
                eprintln!("warning: this run will not be logged: {err:#}");
                None
            }
        }
    }

    pub fn store(&self) -> &Arc<RunStore> {
        &self.store
    }

    /// The sinks that record the run, to add to its event stream: the recorder, then
    /// (after it, since it writes the run's row they refer to) what a resume needs.
    pub fn sinks(&self) -> Vec<Arc<dyn EventSink>> {
        let mut sinks: Vec<Arc<dyn EventSink>> = vec![self.recorder.clone()];
        let context = &self.context;
        let needs_context = context.workspace.is_some()
            || context.graph_files.is_some()
            || context.untrusted_file.is_some();
        if needs_context {
            sinks.push(Arc::new(RunContextSink {
                recorder: self.recorder.clone(),
                store: self.store.clone(),
                context: context.clone(),
            }));
        }
        sinks
    }

    /// Writes the last events and closes the entry: records `workspace` (when given) for
    /// run `run_id`, and clears the decisions a resumed run has used.
    pub fn finish(self, run_id: &str, workspace: Option<&Path>) -> Result<(), RecordError> {
        self.recorder.finish().map_err(RecordError::Incomplete)?;
        if let Some(workspace) = workspace {
            record_workspace(&self.store, run_id, workspace).map_err(RecordError::Workspace)?;
        }
        if let Some(resumed) = &self.context.resumes {
            self.store
                .clear_decided_approvals(resumed)
                .map_err(RecordError::Approvals)?;
        }
        Ok(())
    }
}

/// Records that run `run_id` (already in the log) works in `workspace`, made absolute so
/// that the run resumes in the same folder from any directory.
fn record_workspace(store: &RunStore, run_id: &str, workspace: &Path) -> Result<(), StoreError> {
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_owned());
    store.record_workspace(run_id, &workspace)
}

/// Records what a resumed run needs as soon as the log holds the run (after `recorder`
/// wrote `run_started`), so that even a run killed while it waits for a decision resumes
/// as it started: its workspace (app runs: `agentloom approve` resumes them in the same
/// folder), the content of the graph files it calls (`graph.call`), not whatever the files
/// hold by then, and, for a file its user has not trusted, that mark.
struct RunContextSink {
    recorder: Arc<RunRecorder>,
    store: Arc<RunStore>,
    context: RunContext,
}

impl EventSink for RunContextSink {
    fn emit(&self, event: &RunEvent) {
        let EventKind::RunStarted { run_id, .. } = &event.kind else {
            return;
        };
        let context = &self.context;
        let files = context
            .graph_files
            .as_ref()
            .map(|files| files.contents())
            .unwrap_or_default();
        if context.workspace.is_none() && files.is_empty() && context.untrusted_file.is_none() {
            return;
        }
        let recorded = self.recorder.flush().and_then(|()| {
            if let Some(workspace) = &context.workspace {
                record_workspace(&self.store, run_id, workspace)?;
            }
            if let Some(file) = &context.untrusted_file {
                self.store
                    .record_untrusted(run_id, &file.display().to_string())?;
            }
            self.store.record_graph_files(run_id, &files)
        });
        if let Err(err) = recorded {
            tracing::warn!(%err, run_id, "what the run needs to resume is not recorded");
        }
    }
}
