//! Graphs calling graphs on the canvas: the file a `graph.call` node runs (double-click
//! opens it), and the nodes of its sub-run shown under it in the run panel.

use std::path::{Path, PathBuf};

use agentloom_blocks::graph_call;
use agentloom_core::NodeDoc;
use agentloom_engine::NodeProgress;
use egui::{RichText, Ui};

use crate::app::run::{NodeBadge, RunView};
use crate::app::theme;

/// The graph file `node` runs, if it runs one: `Err` says why it cannot be found.
pub fn child_file(node: &NodeDoc, graph_file: Option<&Path>) -> Option<Result<PathBuf, String>> {
    if node.block != graph_call::KIND {
        return None;
    }
    let path = node
        .config
        .get(graph_call::PATH)
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|p| !p.is_empty());
    Some(match path {
        Some(path) => graph_call::resolve(graph_file, path),
        None => Err(format!(
            "node `{}` names no graph file: set Graph file in the inspector",
            node.id
        )),
    })
}

/// The nodes of the sub-runs of node `id` in `run` (recorded as `id/…`), with their state.
pub fn child_runs_ui(ui: &mut Ui, run: &RunView, id: &str) {
    let prefix = format!("{id}/");
    let mut children: Vec<(&str, &NodeProgress)> = run
        .nodes
        .iter()
        .filter_map(|(node, state)| Some((node.strip_prefix(&prefix)?, state)))
        .collect();
    if children.is_empty() {
        return;
    }
    children.sort_by(|a, b| a.0.cmp(b.0));
    ui.add_space(4.0);
    ui.label(RichText::new("Inside this node").strong());
    for (name, state) in children {
        ui.horizontal(|ui| {
            // `render`, or `0/render` for a for-each item, `inner/render` one call deeper.
            ui.label(RichText::new(name).monospace());
            ui.label(RichText::new(&state.block).color(theme::TEXT_WEAK).small());
            if let Some((text, color)) = state.state() {
                ui.label(RichText::new(text).color(color).small());
            }
            if let Some(error) = &state.error {
                ui.label(RichText::new(error).color(theme::ERROR).small());
            }
        })
        .response
        .on_hover_text(format!("{id}/{name}"));
    }
}
