//! Closing a run's log entry: the last events written, and the workspace the run used
//! recorded beside it (`agentloom approve` resumes a paused run there), for the commands
//! and the app alike.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_engine::{EventKind, EventSink, RunEvent, RunRecorder, RunStore, StoreError};

/// Finishes `recorder` and records `workspace` for run `run_id`; problems are warnings,
/// since the run itself is done.
pub(crate) fn finish(
    recorder: Option<Arc<RunRecorder>>,
    store: Option<&Arc<RunStore>>,
    run_id: &str,
    workspace: &Path,
) {
    let Some(recorder) = recorder else {
        return;
    };
    if let Err(err) = recorder.finish() {
        eprintln!("warning: the run log may be incomplete: {err}");
        return;
    }
    if let Some(store) = store
        && let Err(err) = record_workspace(store, run_id, workspace)
    {
        eprintln!("warning: the run's workspace is not recorded: {err}");
    }
}

/// Records that run `run_id` (already in the log) works in `workspace`, made absolute so
/// that the run resumes in the same folder from any directory.
pub(crate) fn record_workspace(
    store: &RunStore,
    run_id: &str,
    workspace: &Path,
) -> Result<(), StoreError> {
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_owned());
    store.record_workspace(run_id, &workspace)
}

/// Records a run's workspace as soon as the log holds the run (after `recorder` wrote
/// `run_started`), for runs that may wait for a decision while nobody watches them, as in
/// the app: `agentloom approve` then resumes them in the same folder.
pub(crate) struct WorkspaceSink {
    pub recorder: Arc<RunRecorder>,
    pub store: Arc<RunStore>,
    pub workspace: PathBuf,
    /// The graph files the run calls, kept with it (see [`GraphFilesSink`]).
    pub graph_files: Option<Arc<agentloom_blocks::graph_call::GraphFiles>>,
    /// The graph file, when its user has not trusted it (see [`GraphFilesSink`]).
    pub untrusted_file: Option<std::path::PathBuf>,
}

impl EventSink for WorkspaceSink {
    fn emit(&self, event: &RunEvent) {
        let EventKind::RunStarted { run_id, .. } = &event.kind else {
            return;
        };
        let files = self
            .graph_files
            .as_ref()
            .map(|files| files.contents())
            .unwrap_or_default();
        let recorded = self.recorder.flush().and_then(|()| {
            record_workspace(&self.store, run_id, &self.workspace)?;
            if let Some(file) = &self.untrusted_file {
                self.store
                    .record_untrusted(run_id, &file.display().to_string())?;
            }
            self.store.record_graph_files(run_id, &files)
        });
        if let Err(err) = recorded {
            tracing::warn!(%err, run_id, "the run's workspace or graph files are not recorded");
        }
    }
}

/// Keeps the graph files a run calls (`graph.call`) with it as soon as the log holds the
/// run, so that a run that pauses, even one killed while it waits, resumes with the content
/// it started with rather than whatever the files hold by then.
/// A run of a file its user has not trusted is marked so at the same time.
pub(crate) struct GraphFilesSink {
    pub recorder: Arc<RunRecorder>,
    pub store: Arc<RunStore>,
    pub files: Option<Arc<agentloom_blocks::graph_call::GraphFiles>>,
    pub untrusted_file: Option<std::path::PathBuf>,
}

impl EventSink for GraphFilesSink {
    fn emit(&self, event: &RunEvent) {
        let EventKind::RunStarted { run_id, .. } = &event.kind else {
            return;
        };
        let files = self
            .files
            .as_ref()
            .map(|files| files.contents())
            .unwrap_or_default();
        if files.is_empty() && self.untrusted_file.is_none() {
            return;
        }
        let recorded = self.recorder.flush().and_then(|()| {
            if let Some(file) = &self.untrusted_file {
                self.store
                    .record_untrusted(run_id, &file.display().to_string())?;
            }
            self.store.record_graph_files(run_id, &files)
        });
        if let Err(err) = recorded {
            tracing::warn!(%err, run_id, "the graph files the run calls are not kept with it");
        }
    }
}
