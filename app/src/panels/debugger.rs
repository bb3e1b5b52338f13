//! The debugger: breakpoints on nodes (F9, or the node's menu), a run paused at one
//! (Continue F5, Step F10, Stop Shift+F5, the values edited first), and forks of past runs.
//! Everything it keeps is in [`Debugger`], one field of the app; the app drives it from
//! debugging.rs.

use std::sync::Arc;

use agentloom_core::GraphDoc;
use agentloom_engine::{BreakAt, Breakpoint, RunDebug};
use tokio::sync::mpsc;

use super::debugger_breakpoints::{BreakWhen, Breakpoints};
use super::debugger_fork::{Comparison, ForkEditor, Lineage};
use super::debugger_pause::{PauseMsg, Paused, UiBreakpoints};
use crate::canvas::breakpoints::HeaderMark;

/// What the debugger keeps between frames.
pub struct Debugger {
    /// The breakpoints of the graph shown.
    pub breakpoints: Breakpoints,
    /// Nodes the run shown is paused at (the first is shown): of the live run, or stored
    /// with a waiting run.
    pub paused: Vec<Paused>,
    /// Where the live run's pauses arrive.
    pub(crate) pauses_tx: mpsc::UnboundedSender<PauseMsg>,
    pub(crate) pauses_rx: mpsc::UnboundedReceiver<PauseMsg>,
    /// The breakpoints' generation the next run was armed with, and whether it was given
    /// any.
    pub(crate) armed: Option<(u64, bool)>,
    /// The waiting run whose stored pauses were read.
    pub(crate) stored_for: Option<String>,
    /// "Edit output and rerun from here", while its editor is open.
    pub(crate) fork: Option<ForkEditor>,
    /// A fork shown beside its parent.
    pub(crate) comparison: Option<Comparison>,
    /// The history's forks under their parents.
    pub lineage: Lineage,
}

impl std::fmt::Debug for Debugger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Debugger")
            .field("breakpoints", &self.breakpoints)
            .field("paused", &self.paused.len())
            .finish_non_exhaustive()
    }
}

/// What the canvas shows of the debugger on each node.
#[derive(Clone, Copy, Debug, Default)]
pub struct DebugMarks<'a> {
    debugger: Option<&'a Debugger>,
}

impl DebugMarks<'_> {
    /// The mark on the node with document id `node`.
    pub fn of(&self, node: &str) -> HeaderMark {
        let Some(debugger) = self.debugger else {
            return HeaderMark {
                breakpoint: None,
                paused: None,
            };
        };
        // A pause inside a called graph or an item marks the node that called it.
        let paused = (debugger.paused.first())
            .filter(|p| p.hit.node.split('/').next() == Some(node))
            .map(|p| match p.hit.at {
                BreakAt::Before => BreakWhen::Before,
                BreakAt::After => BreakWhen::After,
            });
        HeaderMark {
            breakpoint: (!debugger.breakpoints.is_empty())
                .then(|| debugger.breakpoints.at(node))
                .flatten(),
            paused,
        }
    }
}

impl Debugger {
    /// The debugger of a window whose breakpoints are kept in `data_dir`.
    pub fn kept_in(data_dir: Option<&std::path::Path>) -> Self {
        let (pauses_tx, pauses_rx) = mpsc::unbounded_channel();
        Debugger {
            breakpoints: Breakpoints::kept_in(data_dir),
            paused: Vec::new(),
            pauses_tx,
            pauses_rx,
            armed: None,
            stored_for: None,
            fork: None,
            comparison: None,
            lineage: Lineage::default(),
        }
    }

    /// What the canvas draws this frame.
    pub fn marks(&self) -> DebugMarks<'_> {
        DebugMarks {
            debugger: Some(self),
        }
    }

    /// The window goes away: the live run's pauses are left unanswered, so the run log
    /// keeps them and the run stays `waiting`, to be continued after a restart.
    pub fn leave(&mut self) {
        self.paused.clear();
    }

    /// What a run started now is given: the breakpoints as the engine takes them (those set
    /// in the files its `graph.call` nodes run too, as `call/node`), and the handler that
    /// brings their pauses here. `doc`: the graph as it runs (called paths absolute).
    pub(crate) fn run_debug(&self, doc: &GraphDoc, ctx: &egui::Context) -> Option<Arc<RunDebug>> {
        let mut set = Vec::new();
        let top = self
            .breakpoints
            .iter()
            .map(|(node, when)| (node.clone(), *when));
        set.extend(top.map(|(node, when)| Breakpoint::new(node, engine_at(when))));
        self.called_breakpoints(doc, "", 0, &mut set);
        if set.is_empty() {
            return None;
        }
        let handler = Arc::new(UiBreakpoints {
            tx: self.pauses_tx.clone(),
            ctx: ctx.clone(),
        });
        Some(Arc::new(RunDebug::new(set).with_handler(handler)))
    }

    /// The breakpoints kept for the files `doc`'s `graph.call` nodes run, by node path under
    /// `prefix`, and theirs in turn (down to the engine's call depth).
    fn called_breakpoints(
        &self,
        doc: &GraphDoc,
        prefix: &str,
        depth: usize,
        set: &mut Vec<Breakpoint>,
    ) {
        if depth >= agentloom_blocks::graph_call::MAX_CALL_DEPTH {
            return;
        }
        for node in doc
            .nodes
            .iter()
            .filter(|n| n.block == agentloom_blocks::graph_call::KIND)
        {
            let Some(file) = node
                .config
                .get(agentloom_blocks::graph_call::PATH)
                .and_then(|p| p.as_str())
                .map(std::path::PathBuf::from)
            else {
                continue;
            };
            let path = format!("{prefix}{}/", node.id);
            for (inner, when) in self.breakpoints.of_file(&file) {
                set.push(Breakpoint::new(format!("{path}{inner}"), engine_at(when)));
            }
            if let Ok(called) = crate::files::load_graph(&file) {
                let called = agentloom_blocks::graph_call::with_absolute_paths(called, Some(&file));
                self.called_breakpoints(&called, &path, depth + 1, set);
            }
        }
    }
}

/// The engine's word for when a breakpoint stops.
fn engine_at(when: BreakWhen) -> BreakAt {
    match when {
        BreakWhen::Before => BreakAt::Before,
        BreakWhen::After => BreakAt::After,
    }
}
