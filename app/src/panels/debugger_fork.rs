//! Forks of past runs: "Edit output and rerun from here" on a finished node of a run shown
//! from the history opens an editor for the node's outputs; the fork is a new run that
//! reuses the parent's upstream results, reruns what depends on the edit, and is recorded
//! with its parent. The history lists forks under their parent, and a fork can be shown
//! beside its parent with the outputs that differ marked.

use std::collections::{BTreeSet, HashMap};

use agentloom_core::{Value, ValueMap};
use agentloom_engine::{ForkEdit, HitPort, RunDetail, RunRow, RunStore, checked_value};
use egui::{RichText, Ui};

use super::debug_command::DebugCommand;
use super::debugger_pause;
use crate::run_panel::short_id;
use crate::{Command, theme};

/// The editor of a node's outputs for a fork, while open.
pub struct ForkEditor {
    /// The run forked.
    pub parent: String,
    /// The node whose outputs are edited.
    pub node: String,
    /// Its output ports, to check the edit against.
    pub ports: Vec<HitPort>,
    /// Its outputs in the parent run.
    pub outputs: ValueMap,
    /// The outputs as pretty JSON, as the person edits them.
    pub text: String,
    /// Why the edit cannot be used (checked as it is typed).
    pub problem: Option<String>,
}

impl ForkEditor {
    pub fn new(parent: String, node: String, ports: Vec<HitPort>, outputs: ValueMap) -> Self {
        let text = serde_json::to_string_pretty(&Value::object(outputs.clone()).to_json())
            .unwrap_or_default();
        ForkEditor {
            parent,
            node,
            ports,
            outputs,
            text,
            problem: None,
        }
    }

    /// The edits typed: one for each output whose value changed, checked against its port's
    /// type; why not, naming the port, when they cannot be used.
    pub fn edits(&self) -> Result<Vec<ForkEdit>, String> {
        let fields = debugger_pause::typed_values(&self.text, &self.node, "outputs")?;
        let mut edits = Vec::new();
        for (port, value) in fields {
            let value = checked_value(&self.node, &self.ports, &port, &value)?;
            if self.outputs.get(&port) != Some(&value) {
                edits.push(ForkEdit {
                    node: self.node.clone(),
                    port,
                    value,
                });
            }
        }
        if edits.is_empty() {
            return Err(format!(
                "change an output of `{}` first: the fork would be the same run",
                self.node
            ));
        }
        Ok(edits)
    }
}

/// The fork editor's window: the outputs to edit, checked as they are typed; "Rerun from
/// here" starts the fork. Returns false once closed.
pub fn fork_editor_ui(
    ctx: &egui::Context,
    editor: &mut ForkEditor,
    commands: &mut Vec<Command>,
) -> bool {
    let mut open = true;
    egui::Window::new(format!("Fork run {}", short_id(&editor.parent)))
        .id(egui::Id::new("fork editor"))
        .collapsible(false)
        .resizable(true)
        .default_width(380.0)
        .open(&mut open)
        .show(ctx, |ui| {
            ui.label(format!(
                "A new run that reuses what run {} computed upstream of `{}` and runs again what depends on it.",
                short_id(&editor.parent),
                editor.node
            ));
            let title = RichText::new(format!("Outputs of `{}`", editor.node)).small();
            if debugger_pause::values_editor_ui(ui, title, &mut editor.text, &editor.ports) {
                editor.problem = editor.edits().err();
            }
            debugger_pause::problem_ui(ui, editor.problem.as_deref());
            ui.horizontal(|ui| {
                if ui.button("Rerun from here").clicked() {
                    commands.push(Command::Debug(DebugCommand::StartFork));
                }
                if ui.button("Cancel").clicked() {
                    commands.push(Command::Debug(DebugCommand::CloseFork));
                }
            });
        });
    open
}

/// The history's runs in lineage order, each fork right under its parent (when the parent
/// is listed), with its depth; `parents` gives each run's parent, if it is a fork.
pub fn lineage_order(runs: &[RunRow], parents: &HashMap<String, String>) -> Vec<(usize, usize)> {
    let listed: HashMap<&str, usize> = (runs.iter().enumerate())
        .map(|(index, run)| (run.id.as_str(), index))
        .collect();
    let parent_of = |index: usize| {
        parents
            .get(&runs[index].id)
            .and_then(|parent| listed.get(parent.as_str()).copied())
    };
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    for index in 0..runs.len() {
        if let Some(parent) = parent_of(index) {
            children.entry(parent).or_default().push(index);
        }
    }
    let mut ordered = Vec::with_capacity(runs.len());
    let mut seen = BTreeSet::new();
    for root in (0..runs.len()).filter(|i| parent_of(*i).is_none()) {
        let mut stack = vec![(root, 0)];
        while let Some((index, depth)) = stack.pop() {
            if !seen.insert(index) {
                continue;
            }
            ordered.push((index, depth));
            // Newest first among siblings, as the history lists runs.
            for child in children.get(&index).into_iter().flatten().rev() {
                stack.push((*child, depth + 1));
            }
        }
    }
    ordered
}

/// The history's rows in lineage order, and each listed fork's parent.
#[derive(Debug, Default)]
pub struct Lineage {
    /// The runs' ids this was made for.
    made_for: Vec<String>,
    /// Row index and depth, in the order shown.
    order: Vec<(usize, usize)>,
    /// Each known run's parent run, if it is a fork.
    parents: HashMap<String, Option<String>>,
}

impl Lineage {
    /// Follows the history to `runs`: reads the parents of runs not seen yet and orders
    /// them again, when the runs listed changed.
    pub fn follow(&mut self, store: Option<&RunStore>, runs: &[RunRow]) {
        if runs.iter().map(|r| &r.id).eq(self.made_for.iter()) {
            return;
        }
        if let Some(store) = store {
            learn_parents(store, runs, &mut self.parents);
        }
        let parents: HashMap<String, String> = (self.parents.iter())
            .filter_map(|(run, parent)| Some((run.clone(), parent.clone()?)))
            .collect();
        self.order = lineage_order(runs, &parents);
        self.made_for = runs.iter().map(|r| r.id.clone()).collect();
    }

    /// The rows to show, in order, with their depth (forks under their parent); every row
    /// as listed when the lineage was made for other runs.
    pub fn rows(&self, runs: &[RunRow]) -> Vec<(usize, usize)> {
        if runs.iter().map(|r| &r.id).eq(self.made_for.iter()) {
            self.order.clone()
        } else {
            (0..runs.len()).map(|index| (index, 0)).collect()
        }
    }

    /// The run `run` was forked from, if it is a fork.
    pub fn parent(&self, run: &str) -> Option<&str> {
        self.parents.get(run).and_then(|p| p.as_deref())
    }

    /// A fork was just recorded: its parent is known without reading it.
    pub fn learn(&mut self, fork: String, parent: String) {
        self.parents.insert(fork, Some(parent));
        self.made_for.clear();
    }
}

/// Reads whose fork each run of `runs` is, for the ones not known yet (a run's parent
/// never changes once recorded).
fn learn_parents(store: &RunStore, runs: &[RunRow], known: &mut HashMap<String, Option<String>>) {
    for run in runs {
        if known.contains_key(&run.id) {
            continue;
        }
        match store.run_fork(&run.id) {
            Ok(fork) => {
                known.insert(run.id.clone(), fork.map(|f| f.parent_run_id));
            }
            Err(err) => tracing::warn!(run_id = run.id, "cannot read the run's parent: {err}"),
        }
    }
}

/// A fork beside its parent: each node's outputs in both, those that differ marked.
pub struct Comparison {
    pub fork: RunDetail,
    pub parent: RunDetail,
}

/// The comparison's window. Returns false once closed.
pub fn comparison_ui(ctx: &egui::Context, comparison: &Comparison) -> bool {
    let mut open = true;
    let (fork, parent) = (&comparison.fork, &comparison.parent);
    egui::Window::new(format!(
        "Fork {} beside its parent {}",
        short_id(&fork.run.id),
        short_id(&parent.run.id)
    ))
    .id(egui::Id::new("fork comparison"))
    .default_width(560.0)
    .open(&mut open)
    .show(ctx, |ui| {
        egui::ScrollArea::vertical()
            .max_height(420.0)
            .show(ui, |ui| {
                egui::Grid::new("fork comparison grid")
                    .striped(true)
                    .num_columns(3)
                    .show(ui, |ui| {
                        ui.label(RichText::new("node").strong());
                        ui.label(
                            RichText::new(format!("parent {}", short_id(&parent.run.id))).strong(),
                        );
                        ui.label(
                            RichText::new(format!("fork {}", short_id(&fork.run.id))).strong(),
                        );
                        ui.end_row();
                        let nodes: BTreeSet<&str> = (parent.nodes.iter())
                            .chain(&fork.nodes)
                            .map(|n| n.node_id.as_str())
                            .collect();
                        for node in nodes {
                            let before = parent.node(node).map(|n| &n.outputs);
                            let after = fork.node(node).map(|n| &n.outputs);
                            comparison_row(ui, node, before, after);
                        }
                    });
            });
    });
    open
}

fn comparison_row(ui: &mut Ui, node: &str, before: Option<&ValueMap>, after: Option<&ValueMap>) {
    let differs = before != after;
    let name = if differs {
        RichText::new(format!("≠ {node}"))
            .color(theme::WARN)
            .strong()
    } else {
        RichText::new(node)
    };
    let label = ui.label(name);
    if differs {
        label.widget_info(|| {
            egui::WidgetInfo::labeled(egui::WidgetType::Label, true, format!("{node} differs"))
        });
    }
    for outputs in [before, after] {
        let text = outputs.map_or_else(
            || "not run".to_owned(),
            |o| serde_json::to_string(&Value::object(o.clone()).to_json()).unwrap_or_default(),
        );
        let color = if differs { theme::WARN } else { theme::TEXT };
        ui.add(
            egui::Label::new(RichText::new(text).monospace().color(color))
                .truncate()
                .selectable(true),
        );
    }
    ui.end_row();
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use agentloom_engine::{RunRow, RunStatus};

    use super::lineage_order;

    fn row(id: &str) -> RunRow {
        RunRow {
            id: id.to_owned(),
            graph_name: "g".to_owned(),
            status: RunStatus::Completed,
            started_at_ms: 0,
            finished_at_ms: None,
            duration_ms: None,
            usage: agentloom_core::Usage::default(),
            error: None,
            node_count: 0,
            worker: None,
        }
    }

    #[test]
    fn forks_are_listed_under_their_parent() {
        // Newest first: two forks of `a` (one forked again), then `b`, then `a`.
        let runs: Vec<RunRow> = ["fork2", "forkfork", "fork1", "b", "a"]
            .into_iter()
            .map(row)
            .collect();
        let parents: HashMap<String, String> = [
            ("fork1", "a"),
            ("fork2", "a"),
            ("forkfork", "fork1"),
            ("orphan", "gone"),
        ]
        .into_iter()
        .map(|(c, p)| (c.to_owned(), p.to_owned()))
        .collect();
        let shown: Vec<(&str, usize)> = lineage_order(&runs, &parents)
            .into_iter()
            .map(|(i, depth)| (runs[i].id.as_str(), depth))
            .collect();
        assert_eq!(
            shown,
            [
                ("b", 0),
                ("a", 0),
                ("fork2", 1),
                ("fork1", 1),
                ("forkfork", 2)
            ]
        );
    }
}
