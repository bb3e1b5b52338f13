//! The block catalog a graph runs with, built in one place for every caller: the built-in
//! blocks, `graph.call` resolving against the graph's file (inside its folder unless the
//! file is trusted), and the tools of its MCP servers when it is trusted; or, for a
//! recorded run, the graph files kept with it.

use std::path::Path;
use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_blocks::graph_call::{self, GraphFiles};
use agentloom_core::{GraphDoc, Problem, SecretSource, ValidGraph, validate, validate_shared};
use agentloom_engine::Replay;

use super::format_problem;
use crate::trust;

/// The built-in blocks for a graph in `file`: `graph.call` resolves against the file, and
/// stays in its folder unless `trusted`.
pub fn builtin_for(file: Option<&Path>, trusted: bool) -> Registry {
    let mut registry = Registry::builtin();
    match file {
        Some(file) if !trusted => registry.for_untrusted_graph_file(file, trust::not_trusted(file)),
        _ => registry.for_graph_file(file),
    };
    registry
}

/// The block catalog for `doc`, the graph file at `file`: the built-in blocks with
/// `graph.call` resolving against the file, and, when `trusted`, the tools of its MCP
/// servers (connected now). Untrusted, no server is started or reached, `graph.call` stays
/// in the file's folder, and each server is one problem saying so. Returns the problems of
/// servers that are not connected.
pub fn catalog_for(
    doc: &GraphDoc,
    file: Option<&Path>,
    trusted: bool,
    secrets: &dyn SecretSource,
) -> (Registry, Vec<Problem>) {
    catalog_replaying(doc, file, trusted, secrets, None)
}

/// [`catalog_for`] for a run that replays `replay`: a server whose tool list it recorded
/// is not started (only a call that goes live starts it).
pub fn catalog_replaying(
    doc: &GraphDoc,
    file: Option<&Path>,
    trusted: bool,
    secrets: &dyn SecretSource,
    replay: Option<&Replay>,
) -> (Registry, Vec<Problem>) {
    let mut registry = builtin_for(file, trusted);
    let problems = match file {
        Some(file) if !trusted => {
            let mut problems = trust::offline_server_problems(doc, file);
            problems.extend(trust::unsandboxed_code_problems(doc, file));
            problems
        }
        _ => agentloom_blocks::mcp::add_mcp_tools_recorded(&mut registry, doc, secrets, &|list| {
            replay?.catalog_answer(&list.source, &list.call())
        }),
    };
    (registry, problems)
}

/// The catalog of the graph file at `path` (holding `doc`) as its trust says, with the
/// problems of its MCP servers that are not connected.
pub fn for_file(path: &Path, doc: &GraphDoc) -> (Registry, Vec<Problem>) {
    let trusted = trust::is_trusted(path);
    let secrets = super::secrets_for(path, trusted);
    catalog_for(doc, Some(path), trusted, secrets.as_ref())
}

/// The catalog of the graph file at `path` (holding `doc`) as its trust says, and every
/// problem of the file with it: servers not connected, then what validation finds (an
/// untrusted file's tool nodes of servers not connected are covered by their server's
/// problem).
pub fn check_file(path: &Path, doc: &GraphDoc) -> (Registry, Vec<Problem>) {
    let (registry, mut problems) = for_file(path, doc);
    if let Err(mut more) = validate(doc, &registry) {
        if !trust::is_trusted(path) {
            trust::drop_offline_tool_nodes(&mut more, doc);
        }
        problems.extend(more);
    }
    (registry, problems)
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
    load_replaying(path, secrets, trusted, None)
}

/// [`load_with_tools`] for a run that replays `replay`: MCP servers whose tool lists it
/// recorded are not started.
pub fn load_replaying(
    path: &Path,
    secrets: &dyn SecretSource,
    trusted: bool,
    replay: Option<&Replay>,
) -> Result<(Arc<Registry>, ValidGraph), Vec<String>> {
    let doc = super::load_graph(path).map_err(|e| vec![e.to_string()])?;
    validate_with_tools(path, doc, secrets, trusted, replay)
}

/// [`load_replaying`] for `doc`, just read from the graph file at `path`.
pub fn validate_with_tools(
    path: &Path,
    doc: GraphDoc,
    secrets: &dyn SecretSource,
    trusted: bool,
    replay: Option<&Replay>,
) -> Result<(Arc<Registry>, ValidGraph), Vec<String>> {
    // Recorded with absolute `graph.call` paths: the run can be resumed from anywhere.
    let mut doc = graph_call::with_absolute_paths(doc, Some(path));
    // An untrusted graph always runs in safe mode: every side effect asks first.
    doc.settings.safe_mode |= !trusted;
    let (registry, problems) = catalog_replaying(&doc, Some(path), trusted, secrets, replay);
    let doc = Arc::new(doc);
    let mut problems: Vec<String> = problems.iter().map(|p| format_problem(path, p)).collect();
    match validate_shared(doc.clone(), &registry) {
        Ok(graph) if problems.is_empty() => Ok((Arc::new(registry), graph)),
        Ok(_) => Err(problems),
        Err(mut more) => {
            if !trusted {
                trust::drop_offline_tool_nodes(&mut more, &doc);
            }
            problems.extend(more.iter().map(|p| format_problem(path, p)));
            Err(problems)
        }
    }
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
