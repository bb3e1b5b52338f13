//! Closing a command's run log entry: the last events written, and the workspace the run
//! used recorded beside it (`agentloom approve` resumes a paused run there).

use std::path::Path;
use std::sync::Arc;

use agentloom_engine::{RunRecorder, RunStore};

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
    // Absolute, so that the run resumes in the same folder from any directory.
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_owned());
    if let Some(store) = store
        && let Err(err) = store.record_workspace(run_id, &workspace)
    {
        eprintln!("warning: the run's workspace is not recorded: {err}");
    }
}
