//! The runner: what every way of running a graph file shares — the command line, the
//! desktop app, `agentloom serve`, `agentloom mcp`, evaluations and the NATS workers.
//! Loading a graph source, the trust decision, the block catalog, the secret source,
//! checking run inputs, who decides approvals, recording a run in the run log, and
//! resuming a recorded one all happen here, once. Nothing here knows of a window or a
//! command line: the app (`agentloom-app`) and the binary (`agentloom`) sit above it.

pub mod catalog;
pub mod debug;
pub mod edit;
pub mod edit_server;
pub mod eval;
pub mod examples;
pub mod fork;
pub mod headless;
pub mod junit;
pub mod launch;
pub mod paths;
pub mod record;
pub mod remote;
pub mod resume;
pub mod save;
pub mod source;
pub mod trust;

pub use launch::{Credentials, Launch, Launched, Log, Prepared, Trust, Workspace};
pub use source::GraphSource;

pub use paths::data_dir;
pub use record::open_run_log;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_core::{GraphDoc, GraphFileError, Problem, SecretSource, ValidGraph, ValueMap};
use agentloom_engine::{Approver, DurableApprover, RunStore};

/// A graph file that cannot be read or parsed; it names the file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct LoadError {
    pub path: PathBuf,
    pub source: GraphFileError,
}

/// Reads and parses a graph file, up to the graph size limit.
pub fn load_graph(path: &Path) -> Result<GraphDoc, LoadError> {
    agentloom_core::read_graph_file(path, agentloom_core::max_graph_bytes()).map_err(|source| {
        LoadError {
            path: path.to_owned(),
            source,
        }
    })
}

/// A problem of the graph file at `path`, as one line that names the file.
pub fn format_problem(path: &Path, problem: &Problem) -> String {
    format!("{}: {problem}", path.display())
}

/// Checks given inputs against the graph's declared inputs before anything runs; the error
/// names the input and what the graph takes.
pub fn check_inputs(graph: &ValidGraph, inputs: &ValueMap) -> Result<(), String> {
    let declared = graph.interface_inputs();
    for name in inputs.keys() {
        if !declared.iter().any(|input| &input.name == name) {
            let names: Vec<&str> = declared.iter().map(|input| input.name.as_str()).collect();
            return Err(if names.is_empty() {
                format!("the graph has no input `{name}` (it declares no inputs)")
            } else {
                format!(
                    "the graph has no input `{name}`; its inputs are {}",
                    names.join(", ")
                )
            });
        }
    }
    // A value the graph input would refuse is a wrong argument, found before anything runs.
    for input in &declared {
        if let Some(given) = inputs.get(&input.name)
            && let Err(err) = agentloom_core::coerce_given(given.clone(), &input.ty)
        {
            return Err(format!("--input {}: {err}", input.name));
        }
    }
    let missing: Vec<String> = declared
        .iter()
        .filter(|input| input.default.is_none() && !inputs.contains_key(&input.name))
        .map(|input| format!("{} ({})", input.name, input.ty))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "missing run input(s): {}; pass them as --input NAME=VALUE",
            missing.join(", ")
        ))
    }
}

/// Who decides on approvals: with a run log, every request is stored first, and the run
/// pauses when nobody can `ask` (resumed by `agentloom approve` or the app's history);
/// without one, only `ask` can.
pub(crate) fn approver(
    store: Option<&Arc<RunStore>>,
    ask: Option<Arc<dyn Approver>>,
) -> Option<Arc<dyn Approver>> {
    match store {
        Some(store) => Some(Arc::new(DurableApprover::new(store.clone(), ask))),
        None => ask,
    }
}

/// Credentials: `AGENTLOOM_SECRET_<NAME>` first, then the OS keychain (asked only when a
/// block needs a secret, so graphs without credentials never touch the keychain).
pub(crate) fn default_secrets() -> Arc<dyn SecretSource> {
    match agentloom_engine::CredentialStore::open_default() {
        Ok(store) => Arc::new(agentloom_engine::KeychainSecrets::new(Arc::new(store))),
        Err(_) => Arc::new(agentloom_engine::EnvSecrets),
    }
}

/// The runtime a command without a window runs graphs on; its error says what failed.
pub fn async_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| {
            std::io::Error::new(
                error.kind(),
                format!("cannot start the async runtime: {error}"),
            )
        })
}
