//! The block catalog the app edits a graph with. A run's own catalog is built by
//! [`crate::launch::catalog_for`] from the graph as read once; while a graph is being
//! edited, `graph.call` must find files as they are now (an edit may name a new one), so
//! the app's catalog reads them as they are called, and a run freezes what it validated.

use std::path::Path;

use agentloom_blocks::Registry;
use agentloom_core::{GraphDoc, Problem, SecretSource};

use crate::launch::{Trust, untrusted_problems};
use crate::trust;

/// The built-in blocks with nothing to call: for listing the blocks (`agentloom blocks`)
/// before a graph is chosen.
pub fn builtin() -> Registry {
    Registry::builtin()
}

/// The built-in blocks for editing the graph of `file` with `trust`: `graph.call` resolves
/// against the file, and stays in its folder unless trusted.
pub fn for_editing(file: Option<&Path>, trust: &Trust) -> Registry {
    let mut registry = Registry::builtin();
    match file {
        Some(file) if !trust.is_trusted() => {
            registry.for_untrusted_graph_file(file, trust::not_trusted(file))
        }
        _ => registry.for_graph_file(file),
    };
    registry
}

/// [`for_editing`] with the tools of `doc`'s MCP servers when trusted (connected now, so
/// call it off the window's thread); untrusted, no server is started or reached and each
/// is a problem, as is an agent that would run code unsandboxed.
pub fn for_editing_with_servers(
    doc: &GraphDoc,
    file: Option<&Path>,
    trust: &Trust,
    secrets: &dyn SecretSource,
) -> (Registry, Vec<Problem>) {
    let mut registry = for_editing(file, trust);
    let problems = if trust.is_trusted() {
        agentloom_blocks::mcp::add_mcp_tools(&mut registry, doc, secrets)
    } else {
        untrusted_problems(doc, file)
    };
    (registry, problems)
}
