//! Graphs calling graphs on the canvas: the file a `graph.call` node runs (double-click
//! opens it, with a breadcrumb bar back to its caller), and the nodes of its sub-run shown
//! under it in the run panel.

use std::path::{Path, PathBuf};

use agentloom_blocks::graph_call;
use agentloom_core::{GraphDoc, NodeDoc};
use agentloom_engine::NodeProgress;
use egui::emath::TSTransform;
use egui::{RichText, Ui};

use crate::run::{NodeBadge, RunView};
use crate::{Command, theme};

/// A graph the person walked down from by opening a graph it calls: what the breadcrumb
/// bar returns to, with the view it had.
#[derive(Clone, Debug)]
pub struct Caller {
    /// Its file; `None` for a graph never saved, which `doc` keeps.
    pub(crate) path: Option<PathBuf>,
    /// The file its `graph.call` paths resolved against.
    pub(crate) graph_file: Option<PathBuf>,
    pub(crate) doc: GraphDoc,
    pub(crate) view: TSTransform,
    /// The ids of the nodes selected, and of the node in the inspector.
    pub(crate) selected: Vec<String>,
    pub(crate) inspected: Option<String>,
    /// Its trust as it was left, for a graph never saved (a file's is read again).
    pub(crate) untrusted: Option<super::trust_banner::Untrusted>,
}

impl Caller {
    /// What its crumb says: the file's name, else the graph's.
    fn label(&self) -> String {
        crumb_label(self.path.as_deref(), &self.doc.name)
    }
}

/// A graph's crumb: its file's name (`parent.agentloom.json`), else its own name.
fn crumb_label(path: Option<&Path>, name: &str) -> String {
    path.and_then(Path::file_name)
        .map_or_else(|| name.to_owned(), |f| f.to_string_lossy().into_owned())
}

/// The breadcrumb bar above the canvas, "parent.agentloom.json › child.json": a click on
/// a caller goes back to it.
pub fn breadcrumbs_ui(
    ui: &mut Ui,
    callers: &[Caller],
    current: (Option<&Path>, &str),
    commands: &mut Vec<Command>,
) {
    ui.horizontal_wrapped(|ui| {
        for (index, caller) in callers.iter().enumerate() {
            let crumb = ui
                .link(caller.label())
                .on_hover_text(caller.path.as_deref().map_or_else(
                    || format!("Back to “{}” (not saved)", caller.doc.name),
                    |p| format!("Back to {}", p.display()),
                ));
            if crumb.clicked() {
                commands.push(Command::ReturnToCaller(index));
            }
            ui.label(RichText::new("›").color(theme::TEXT_WEAK));
        }
        let (path, name) = current;
        ui.label(RichText::new(crumb_label(path, name)).strong())
            .on_hover_text(path.map_or_else(|| name.to_owned(), |p| p.display().to_string()));
    });
}

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
