//! `agentloom run GRAPH --fork RUN_ID --set NODE.PORT=JSON`: a new run that reuses what a
//! recorded run computed upstream of the edited values and runs the rest again; and the
//! lineage `runs` and `show` print (forks under their parent).

use std::path::PathBuf;

use agentloom_core::{Escaped, ValidGraph};
use agentloom_engine::{ForkEdit, RunSeed, RunStore};

use crate::runner::fork::plan_fork;
use crate::runner::open_run_log;

/// The fork's run id and seed, its record already kept in the run log; or why not.
pub(super) fn start_fork(
    db: Option<PathBuf>,
    graph: &ValidGraph,
    parent: &str,
    set: &[String],
) -> Result<(String, RunSeed), String> {
    let edits = set
        .iter()
        .map(|item| ForkEdit::parse(item))
        .collect::<Result<Vec<_>, _>>()?;
    let store = open_run_log(db).map_err(|e| format!("{e:#}"))?;
    let plan = plan_fork(&store, parent, graph, &edits)?;
    let run_id = agentloom_engine::new_run_id();
    store
        .record_fork(&run_id, &plan.record)
        .map_err(|e| e.to_string())?;
    // On stderr, so `--json` still prints one object on stdout.
    let parent = &plan.record.parent_run_id;
    if !plan.record.changes.is_empty() {
        eprintln!(
            "the graph changed since run {parent}: {}; a changed node is not reused, it runs again",
            Escaped(&plan.record.changes.to_string())
        );
    }
    eprintln!(
        "forking run {parent}: {} node(s) reused, {} run again",
        plan.seed.outputs.len(),
        plan.rerun.len()
    );
    Ok((run_id, plan.seed))
}

/// The lines `show` prints of a run's lineage: its parent and edits, what changed in the
/// graph, and its forks.
pub(super) fn lineage_lines(store: &RunStore, run_id: &str) -> Vec<String> {
    let mut lines = Vec::new();
    if let Ok(Some(fork)) = store.run_fork(run_id) {
        lines.push(format!("forked from {}", fork.parent_run_id));
        for edit in &fork.edits {
            lines.push(format!(
                "  edited {}.{} = {}",
                Escaped(&edit.node),
                Escaped(&edit.port),
                Escaped(&edit.value.preview(200))
            ));
        }
        if !fork.changes.is_empty() {
            lines.push(format!(
                "  graph changed since: {}",
                Escaped(&fork.changes.to_string())
            ));
        }
    }
    if let Ok(forks) = store.forks_of(run_id) {
        for fork in forks {
            lines.push(format!("fork {fork}"));
        }
    }
    lines
}
