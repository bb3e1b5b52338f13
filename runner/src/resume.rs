//! Resuming a recorded run: what a decision that was not the first one says.

use std::path::{Path, PathBuf};

use agentloom_core::{Escaped, ValidGraph};
use agentloom_engine::{Claim, RunSeed, RunStore, StoreError};

/// What paused run `run_id` of `graph` resumes from after an approval: its seed from the
/// log, outputs kept with a secret replaced settled ([`RunSeed::settle_redacted`]), or why
/// it cannot resume. Asked before the decision is claimed (a refusal leaves the run
/// waiting) and again after (the seed then holds the decision).
pub fn resume_seed(store: &RunStore, run_id: &str, graph: &ValidGraph) -> Result<RunSeed, String> {
    let mut seed = store.resume_seed(run_id).map_err(|e| e.to_string())?;
    seed.settle_redacted(graph)?;
    Ok(seed)
}

/// Why a decision on `node` of run `run_id` did not count, or `None` when it did.
pub fn claim_refusal(run_id: &str, node: &str, claim: &Claim) -> Option<String> {
    let node = Escaped(node);
    match claim {
        Claim::Won => None,
        Claim::AlreadyDecided(earlier) => {
            let verb = if earlier.approved {
                "approved"
            } else {
                "rejected"
            };
            let by = earlier
                .decided_by_pid
                .map(|pid| format!(" by process {pid}"))
                .unwrap_or_default();
            let when = earlier
                .decided_at_ms
                .and_then(|ms| chrono::DateTime::from_timestamp_millis(i64::try_from(ms).ok()?))
                .map(|at| {
                    format!(
                        " at {}",
                        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    )
                })
                .unwrap_or_default();
            Some(format!(
                "run {run_id}: `{node}` was already {verb}{by}{when}; this decision changed nothing (`agentloom show {run_id}` shows how the run goes on)"
            ))
        }
        Claim::NotWaiting { status } => Some(format!(
            "run {run_id} is {status}, not waiting for an approval"
        )),
        Claim::NoRequest => Some(format!(
            "run {run_id} does not wait for an approval of `{node}`"
        )),
        Claim::AskedElsewhere { pid } => {
            let by = pid
                .map(|pid| format!(" (process {pid})"))
                .unwrap_or_default();
            Some(format!(
                "run {run_id} is still going{by}: decide it in the app or terminal that asks, or here once that has stopped (the run stays waiting)"
            ))
        }
    }
}

/// The graph file of run `run_id` when its user had not trusted it and, as the file is
/// now, still has not (`trusted` decides): the resumed run gets no credential either.
pub fn still_untrusted_file(
    store: &RunStore,
    run_id: &str,
    trusted: impl Fn(&Path) -> bool,
) -> Result<Option<PathBuf>, StoreError> {
    Ok(store
        .untrusted_graph_file(run_id)?
        .map(PathBuf::from)
        .filter(|file| !trusted(file)))
}

/// Recorded run `run_id` (holding `doc`) made ready to resume under its own id: the graph
/// files it calls as kept with it (never as they are now), and the trust it ran with: a
/// run of a file its user had not trusted stays without credentials, servers or private
/// network, unless the file as it is now is `trusted`.
pub fn prepare_recorded(
    store: &RunStore,
    run_id: &str,
    doc: agentloom_core::GraphDoc,
    trusted: impl Fn(&Path) -> bool,
    credentials: &crate::Credentials,
) -> Result<crate::Prepared, String> {
    let kept = store.graph_files(run_id).map_err(|e| e.to_string())?;
    let untrusted = still_untrusted_file(store, run_id, trusted).map_err(|e| e.to_string())?;
    let trust = crate::Trust::of(untrusted.is_none(), untrusted.as_deref());
    let source = crate::GraphSource::with_files(doc, untrusted.as_deref(), kept);
    crate::Prepared::new(source, trust, credentials, None).map_err(|problems| {
        format!(
            "the recorded graph cannot run any more: {}",
            problems.join("; ")
        )
    })
}
