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

/// Records what a resumed run needs as soon as the log holds the run (after `recorder`
/// wrote `run_started`), so that even a run killed while it waits for a decision resumes
/// as it started: its workspace (app runs: `agentloom approve` resumes them in the same
/// folder), the content of the graph files it calls (`graph.call`), not whatever the files
/// hold by then, and, for a file its user has not trusted, that mark.
pub(crate) struct RunContextSink {
    pub recorder: Arc<RunRecorder>,
    pub store: Arc<RunStore>,
    pub workspace: Option<PathBuf>,
    pub graph_files: Option<Arc<agentloom_blocks::graph_call::GraphFiles>>,
    pub untrusted_file: Option<PathBuf>,
}

impl EventSink for RunContextSink {
    fn emit(&self, event: &RunEvent) {
        let EventKind::RunStarted { run_id, .. } = &event.kind else {
            return;
        };
        let files = self
            .graph_files
            .as_ref()
            .map(|files| files.contents())
            .unwrap_or_default();
        if self.workspace.is_none() && files.is_empty() && self.untrusted_file.is_none() {
            return;
        }
        let recorded = self.recorder.flush().and_then(|()| {
            if let Some(workspace) = &self.workspace {
                record_workspace(&self.store, run_id, workspace)?;
            }
            if let Some(file) = &self.untrusted_file {
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
