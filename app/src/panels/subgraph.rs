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
use crate::{App, Command, load_graph, theme};

/// A graph the person walked down from by opening a graph it calls: what the breadcrumb
/// bar returns to, with the view it had.
#[derive(Clone, Debug)]
pub struct Caller {
    /// Its file; `None` for a graph never saved, which `doc` keeps.
    path: Option<PathBuf>,
    /// The file its `graph.call` paths resolved against.
    graph_file: Option<PathBuf>,
    doc: GraphDoc,
    view: TSTransform,
    /// The ids of the nodes selected, and of the node in the inspector.
    selected: Vec<String>,
    inspected: Option<String>,
    /// Its trust as it was left, for a graph never saved (a file's is read again).
    untrusted: Option<super::trust_banner::Untrusted>,
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

impl App {
    /// Opens the graph file a graph-call node runs; the graph shown now becomes its
    /// caller in the breadcrumb bar (after the usual "save changes?").
    pub(crate) fn open_called(&mut self, path: PathBuf, ctx: &egui::Context) {
        if !self.may_discard(&Command::OpenCalled(path.clone())) {
            return;
        }
        let doc = match load_graph(&path) {
            Ok(doc) => doc,
            Err(err) => {
                self.notice = Some(err.to_string());
                return;
            }
        };
        let selected = self.selected_ids(ctx);
        let caller = Caller {
            path: self.document.path.clone(),
            graph_file: self.graph_file.clone(),
            doc: self.document.to_doc(),
            view: self.canvas.transform,
            untrusted: self.untrusted.clone(),
            selected,
            inspected: self.inspected_id().map(str::to_owned),
        };
        let mut callers = std::mem::take(&mut self.callers);
        callers.push(caller);
        self.open_document(&doc, Some(path.clone()));
        self.callers = callers;
        self.fresh_selection();
        if let Some(data) = &self.data {
            data.remember_last(&path);
        }
        self.notice = None;
    }

    /// Goes back to the caller at `index` of the breadcrumb bar, as it was left: its
    /// view, selection and inspected node.
    pub(crate) fn return_to_caller(&mut self, index: usize) {
        if index >= self.callers.len() || !self.may_discard(&Command::ReturnToCaller(index)) {
            return;
        }
        let mut callers = std::mem::take(&mut self.callers);
        callers.truncate(index + 1);
        let Some(caller) = callers.pop() else { return };
        // From its file as saved (changes left unsaved were discarded on the way down).
        let doc = match &caller.path {
            Some(path) => match load_graph(path) {
                Ok(doc) => doc,
                Err(err) => {
                    callers.push(caller);
                    self.callers = callers;
                    self.notice = Some(err.to_string());
                    return;
                }
            },
            None => caller.doc.clone(),
        };
        if caller.path.is_some() {
            self.open_document_resolving(&doc, caller.path.clone(), caller.graph_file.as_deref());
        } else {
            self.open_document_trusting(
                &doc,
                None,
                caller.graph_file.as_deref(),
                caller.untrusted.clone(),
            );
        }
        self.callers = callers;
        self.fresh_selection();
        self.pending_fit = false;
        self.refits_after_layout = 0;
        self.canvas.set_transform = Some(caller.view);
        self.canvas.also_selected = caller
            .selected
            .iter()
            .filter_map(|id| self.document.node_by_id(id))
            .collect();
        self.inspected = caller
            .inspected
            .as_deref()
            .and_then(|id| self.document.node_by_id(id));
        if let Some(path) = &caller.path
            && let Some(data) = &self.data
        {
            data.remember_last(path);
        }
        self.notice = None;
    }

    /// A document shown afresh starts with nothing selected: the canvas widget's
    /// selection (kept by node index) is left behind under a new id.
    fn fresh_selection(&mut self) {
        self.selection_epoch += 1;
        self.canvas.also_selected.clear();
        self.last_selection.clear();
    }

    /// The breadcrumb bar, while the graph shown was opened from a caller.
    pub(crate) fn breadcrumbs_panel(&mut self, ui: &mut Ui) {
        if self.callers.is_empty() {
            return;
        }
        egui::Panel::top("breadcrumbs").show(ui, |ui| {
            breadcrumbs_ui(
                ui,
                &self.callers,
                (self.document.path.as_deref(), &self.document.name),
                &mut self.commands,
            );
        });
    }
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
