//! The debugger: breakpoints on nodes (F9, or the node's menu), a run paused at one
//! (Continue F5, Step F10, Stop Shift+F5, the values edited first), and forks of past runs.
//! Everything it keeps is in [`Debugger`], one field of the app.

use std::sync::Arc;

use agentloom_engine::{BreakAt, Breakpoint, BreakpointDecision, RunDebug, RunStatus};
use egui_snarl::NodeId;
use tokio::sync::mpsc;

use super::debugger_breakpoints::{BreakWhen, Breakpoints};
use super::debugger_pause::{self, PauseMsg, Paused, UiBreakpoints};
use crate::App;
use crate::canvas::breakpoints::HeaderMark;
use crate::command::{Menu, MenuEntry, entry, keys};

/// What the debugger keeps between frames.
pub struct Debugger {
    /// The breakpoints of the graph shown.
    pub breakpoints: Breakpoints,
    /// Nodes the run shown is paused at (the first is shown): of the live run, or stored
    /// with a waiting run.
    pub paused: Vec<Paused>,
    /// Where the live run's pauses arrive.
    pauses_tx: mpsc::UnboundedSender<PauseMsg>,
    pauses_rx: mpsc::UnboundedReceiver<PauseMsg>,
    /// The breakpoints' generation the next run was armed with.
    armed: Option<u64>,
    /// The waiting run whose stored pauses were read.
    stored_for: Option<String>,
}

impl std::fmt::Debug for Debugger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Debugger")
            .field("breakpoints", &self.breakpoints)
            .field("paused", &self.paused.len())
            .finish_non_exhaustive()
    }
}

/// What the debugger can be asked, as one [`crate::Command::Debug`].
#[derive(Clone, Debug, PartialEq)]
pub enum DebugCommand {
    /// F9: a breakpoint before each of these nodes, or none where there is one.
    ToggleBreakpoint(Vec<NodeId>),
    /// Set (or with `None` remove) the breakpoint at the node with this document id.
    SetBreakpoint {
        node: String,
        when: Option<BreakWhen>,
    },
    /// F5: the paused run goes on, with the values as edited, to the next breakpoint.
    Continue,
    /// F10: the same, pausing again before the next node that starts.
    Step,
    /// Shift+F5: the paused run stops.
    Stop,
}

impl DebugCommand {
    /// Where the command shows in the Run menu, and its key (the usual debugger keys).
    pub fn menu_entry(&self) -> Option<MenuEntry> {
        use egui::{Key, Modifiers};
        Some(match self {
            DebugCommand::ToggleBreakpoint(_) => entry(
                Menu::Run,
                "Toggle breakpoint",
                keys(Modifiers::NONE, Key::F9),
            ),
            DebugCommand::Continue => entry(Menu::Run, "Continue", keys(Modifiers::NONE, Key::F5)),
            DebugCommand::Step => entry(Menu::Run, "Step", keys(Modifiers::NONE, Key::F10)),
            DebugCommand::Stop => entry(
                Menu::Run,
                "Stop at breakpoint",
                keys(Modifiers::SHIFT, Key::F5),
            ),
            DebugCommand::SetBreakpoint { .. } => return None,
        })
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

    /// What a run started now is given: the breakpoints as the engine takes them, and the
    /// handler that brings their pauses here.
    fn run_debug(&self, ctx: &egui::Context) -> Option<Arc<RunDebug>> {
        if self.breakpoints.is_empty() {
            return None;
        }
        let set = self.breakpoints.iter().map(|(node, when)| {
            let at = match when {
                BreakWhen::Before => BreakAt::Before,
                BreakWhen::After => BreakAt::After,
            };
            Breakpoint::new(node.clone(), at)
        });
        let handler = Arc::new(UiBreakpoints {
            tx: self.pauses_tx.clone(),
            ctx: ctx.clone(),
        });
        Some(Arc::new(RunDebug::new(set).with_handler(handler)))
    }
}

impl App {
    /// Once a frame: the breakpoints follow the graph's file (another graph opened), the
    /// live run's pauses arrive, a waiting run's stored pauses are read, and the next run is
    /// given the breakpoints.
    pub(crate) fn debugger_frame(&mut self, ctx: &egui::Context) {
        let debugger = &mut self.debugger;
        debugger
            .breakpoints
            .follow_file(self.document.path.as_deref());
        while let Ok(msg) = debugger.pauses_rx.try_recv() {
            debugger.paused.push(Paused::live(msg));
        }
        let running = self.run.is_running();
        // A live pause of a run that ended (stopped) has nobody to answer.
        debugger.paused.retain(|p| p.is_stored() || running);
        if !running {
            let generation = debugger.breakpoints.generation();
            if self.run.debug.is_none() || debugger.armed != Some(generation) {
                self.run.debug = debugger.run_debug(ctx);
                debugger.armed = Some(generation);
            }
        }
        self.load_stored_pauses();
    }

    /// The pauses a waiting run shown from the history waits at, to continue from.
    fn load_stored_pauses(&mut self) {
        let waiting = (!self.run.is_running() && self.run.status == Some(RunStatus::Waiting))
            .then(|| self.run.run_id.clone())
            .flatten();
        if waiting == self.debugger.stored_for {
            return;
        }
        self.debugger.paused.retain(|p| !p.is_stored());
        self.debugger.stored_for.clone_from(&waiting);
        let (Some(store), Some(run_id)) = (&self.store, waiting) else {
            return;
        };
        match store.pending_breakpoints(&run_id) {
            Ok(pending) => self.debugger.paused.extend(
                pending
                    .into_iter()
                    .filter(|p| p.decision.is_none())
                    .map(|p| Paused::stored(run_id.clone(), p.hit)),
            ),
            Err(err) => self.notice = Some(err.to_string()),
        }
    }

    /// The graph was saved to `file`: its breakpoints are kept under it.
    pub(crate) fn debugger_saved_to(&mut self, file: &std::path::Path) {
        if let Err(err) = self.debugger.breakpoints.saved_to(file) {
            self.notice = Some(err);
        }
    }

    /// Stop: a pause of the live run is answered with a stop.
    pub(crate) fn debugger_stop(&mut self) {
        for paused in self.debugger.paused.drain(..) {
            if !paused.is_stored() {
                paused.send(BreakpointDecision::Stop);
            }
        }
    }

    /// Carries out a debugger command.
    pub(crate) fn apply_debug(&mut self, command: DebugCommand, ctx: &egui::Context) {
        let kept = match command {
            DebugCommand::ToggleBreakpoint(nodes) => {
                let ids: Vec<String> = nodes
                    .iter()
                    .filter_map(|n| self.document.snarl.get_node(*n))
                    .map(|n| n.doc.id.clone())
                    .collect();
                if ids.is_empty() {
                    self.notice = Some("Select a block to set a breakpoint on (F9).".to_owned());
                    return;
                }
                ids.iter()
                    .try_for_each(|id| self.debugger.breakpoints.toggle(id))
            }
            DebugCommand::SetBreakpoint { node, when } => {
                self.debugger.breakpoints.set(&node, when)
            }
            DebugCommand::Continue | DebugCommand::Step | DebugCommand::Stop => {
                self.answer_pause(&command, ctx);
                Ok(())
            }
        };
        if let Err(err) = kept {
            self.notice = Some(err);
        }
    }

    /// Continue, Step or Stop at the pause shown.
    fn answer_pause(&mut self, command: &DebugCommand, ctx: &egui::Context) {
        let Some(paused) = self.debugger.paused.first_mut() else {
            self.notice = Some("No run is paused at a breakpoint.".to_owned());
            return;
        };
        let decision = match paused.decision(command) {
            Ok(decision) => decision,
            Err(problem) => {
                // The person sees why in the panel; nothing goes on.
                paused.problem = Some(problem);
                return;
            }
        };
        let paused = self.debugger.paused.remove(0);
        if paused.is_stored() {
            if let Err(err) = self.continue_stored(&paused, decision, ctx) {
                self.notice = Some(format!("Cannot continue the run: {err}"));
                self.debugger.paused.insert(0, paused);
            }
            return;
        }
        let stopping = decision == BreakpointDecision::Stop;
        if !paused.send(decision) {
            self.notice = Some("The paused run is gone.".to_owned());
        }
        if stopping {
            self.debugger_stop();
            self.run.stop();
        }
    }

    /// Continues a run stored waiting at a breakpoint (shown from the history): the
    /// decision is stored with the run, which runs on under the same id from the run log.
    fn continue_stored(
        &mut self,
        paused: &Paused,
        decision: BreakpointDecision,
        ctx: &egui::Context,
    ) -> Result<(), String> {
        let _ = (decision, ctx);
        Err(format!(
            "run {} waits at `{}`: continue it with `agentloom continue {}`",
            paused.run_id, paused.hit.node, paused.run_id
        ))
    }

    /// The pause shown in the run panel: its head (where, the buttons), kept in view.
    pub(crate) fn debugger_pause_header_ui(&mut self, ui: &mut egui::Ui) {
        if let Some(paused) = self.debugger.paused.first() {
            debugger_pause::pause_header_ui(ui, paused, &self.document.name, &mut self.commands);
        }
    }

    /// The pause's values to edit, in the run panel's scrolling part.
    pub(crate) fn debugger_pause_values_ui(&mut self, ui: &mut egui::Ui) {
        if let Some(paused) = self.debugger.paused.first_mut() {
            debugger_pause::pause_values_ui(ui, paused);
            ui.separator();
        }
    }
}
