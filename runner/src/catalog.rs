//! The block catalog of a recorded run: the graph files kept with it, never as they are now.
//! (A graph source's catalog is [`crate::launch::catalog_for`].)

use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_blocks::graph_call::GraphFiles;
use agentloom_core::{GraphDoc, ValidGraph, validate};

/// The built-in blocks with nothing to call: for listing blocks and making palettes
/// before a graph is chosen.
pub fn builtin() -> Registry {
    Registry::builtin()
}

/// The graph of a recorded run, validated with the graph files kept with it (as they
/// were when it started, never as they are now). The error says why it cannot run.
pub fn recorded_graph(
    doc: &GraphDoc,
    kept: Vec<(String, String)>,
) -> Result<(Arc<Registry>, ValidGraph), String> {
    let files = GraphFiles::kept(kept)?;
    let mut registry = Registry::builtin();
    registry.for_kept_graph_files(Arc::new(files));
    let registry = Arc::new(registry);
    let graph = validate(doc, registry.as_ref()).map_err(|problems| {
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    Ok((registry, graph))
}
