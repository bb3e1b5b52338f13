//! The debugger as the app drives it: once a frame (pauses arriving, the next run armed
//! with the breakpoints, a waiting run's stored pauses), its commands, and its windows. What
//! it keeps is [`crate::panels::debugger::Debugger`].

use std::sync::Arc;

use agentloom_engine::{BreakpointDecision, RunStatus};
use agentloom_runner::debug::continuation;
use agentloom_runner::resume::claim_refusal;

use crate::App;
use crate::panels::debug_command::DebugCommand;
use crate::panels::debugger_fork::{self, Comparison, ForkEditor};
use crate::panels::debugger_pause::{self, Paused, UiBreakpoints};

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
            // Armed again when the breakpoints changed, or a run took the last arming.
            let generation = debugger.breakpoints.generation();
            let taken = self.run.debug.is_none() && debugger.armed.is_some_and(|(_, some)| some);
            if taken || debugger.armed.map(|(g, _)| g) != Some(generation) {
                let doc = self.runnable_doc();
                let debug = self.debugger.run_debug(&doc, ctx);
                self.debugger.armed = Some((generation, debug.is_some()));
                self.run.debug = debug;
            }
        }
        self.load_stored_pauses();
        let store = self.store.clone();
        self.debugger
            .lineage
            .follow(store.as_deref(), &self.history.rows);
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
            DebugCommand::OpenFork(node) => self.open_fork(&node),
            DebugCommand::StartFork => {
                self.start_fork(ctx);
                Ok(())
            }
            DebugCommand::CloseFork => {
                self.debugger.fork = None;
                Ok(())
            }
            DebugCommand::CompareWithParent(fork) => self.compare_with_parent(&fork),
            DebugCommand::CloseComparison => {
                self.debugger.comparison = None;
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

    /// Continues a run stored waiting at a breakpoint (shown from the history, after a
    /// restart): the decision is stored with the run (the first decider wins), which goes on
    /// under the same id, its finished nodes seeded from the run log, its breakpoints kept.
    fn continue_stored(
        &mut self,
        paused: &Paused,
        decision: BreakpointDecision,
        ctx: &egui::Context,
    ) -> Result<(), String> {
        let run_id = paused.run_id.as_str();
        let (store, detail, prepared) = self.prepare_waiting_run(run_id)?;
        let runtime = (self.runtime.as_ref()).ok_or("the run threads could not start")?;
        let pending = store
            .pending_breakpoints(run_id)
            .map_err(|e| e.to_string())?;
        let hit = &paused.hit;
        let pause = pending
            .iter()
            .find(|p| p.hit.node == hit.node && p.hit.at == hit.at)
            .ok_or_else(|| format!("run {run_id} no longer waits at `{}`", hit.node))?;
        // Refused (a secret the log does not keep, a value that does not fit) before the
        // decision is claimed: the run stays paused.
        let going_on = continuation(&store, run_id, prepared.graph(), pause, decision.clone())?;
        let claim = store
            .claim_breakpoint(run_id, &hit.node, hit.at, &decision)
            .map_err(|e| e.to_string())?;
        if let Some(refusal) = claim_refusal(run_id, &hit.node, &claim) {
            return Err(refusal);
        }
        let handler = Arc::new(UiBreakpoints {
            tx: self.debugger.pauses_tx.clone(),
            ctx: ctx.clone(),
        });
        self.run.debug = Some(Arc::new(going_on.debug.with_handler(handler)));
        let workspace = self.recorded_run_workspace(&store, run_id);
        self.run.start_seeded(
            runtime,
            prepared,
            workspace,
            detail.inputs.clone(),
            Some(&store),
            ctx,
            Some(run_id.to_owned()),
            Some(going_on.seed),
        )?;
        self.notice = None;
        Ok(())
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

    /// The fork editor and the comparison, each in a window while open.
    pub(crate) fn debugger_windows_ui(&mut self, ctx: &egui::Context) {
        if let Some(editor) = &mut self.debugger.fork
            && !debugger_fork::fork_editor_ui(ctx, editor, &mut self.commands)
        {
            self.debugger.fork = None;
        }
        if let Some(comparison) = &self.debugger.comparison
            && !debugger_fork::comparison_ui(ctx, comparison)
        {
            self.debugger.comparison = None;
        }
    }

    /// Opens the editor of `node`'s outputs in the run shown, to fork it from there.
    fn open_fork(&mut self, node: &str) -> Result<(), String> {
        let parent = (self.run.run_id.clone())
            .filter(|_| !self.run.is_running())
            .ok_or("show a finished run from the history first")?;
        let outputs = (self.run.node(node))
            .filter(|n| n.status == agentloom_engine::NodeStatus::Done)
            .map(|n| n.outputs.clone())
            .ok_or_else(|| format!("`{node}` did not finish in the run shown"))?;
        let canvas = (self.document.node_by_id(node))
            .and_then(|n| self.document.snarl.get_node(n))
            .ok_or_else(|| format!("the graph has no node `{node}` now"))?;
        let ports = agentloom_engine::HitPort::of(&canvas.all_outputs);
        self.debugger.fork = Some(ForkEditor::new(parent, node.to_owned(), ports, outputs));
        Ok(())
    }

    /// Starts the fork typed in the editor: a new run recorded with its parent and the
    /// edit, the parent's upstream results reused, the rest run again.
    fn start_fork(&mut self, ctx: &egui::Context) {
        let Some(editor) = &mut self.debugger.fork else {
            return;
        };
        let edits = match editor.edits() {
            Ok(edits) => edits,
            Err(problem) => {
                editor.problem = Some(problem);
                return;
            }
        };
        let parent = editor.parent.clone();
        match self.try_start_fork(&parent, &edits, ctx) {
            Ok(()) => self.debugger.fork = None,
            Err(problem) => {
                if let Some(editor) = &mut self.debugger.fork {
                    editor.problem = Some(problem);
                }
            }
        }
    }

    fn try_start_fork(
        &mut self,
        parent: &str,
        edits: &[agentloom_engine::ForkEdit],
        ctx: &egui::Context,
    ) -> Result<(), String> {
        if self.run.is_running() {
            return Err("a run is going".to_owned());
        }
        let store = self.store.clone().ok_or("there is no run log")?;
        let prepared = self.prepare_run()?;
        let plan = agentloom_runner::fork::plan_fork(&store, parent, prepared.graph(), edits)?;
        let detail = store
            .get_run(&plan.record.parent_run_id)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("run {parent} is no longer in the run log"))?;
        let runtime = (self.runtime.as_ref()).ok_or("the run threads could not start")?;
        let run_id = agentloom_engine::new_run_id();
        store
            .record_fork(&run_id, &plan.record)
            .map_err(|e| e.to_string())?;
        self.run.start_seeded(
            runtime,
            prepared,
            self.run_workspace(),
            detail.inputs,
            Some(&store),
            ctx,
            Some(run_id.clone()),
            Some(plan.seed),
        )?;
        self.debugger
            .lineage
            .learn(run_id, plan.record.parent_run_id.clone());
        self.notice = (!plan.record.changes.is_empty()).then(|| {
            format!(
                "The graph changed since run {}: {}; a changed node is not reused, it runs again.",
                crate::run_panel::short_id(&plan.record.parent_run_id),
                plan.record.changes
            )
        });
        Ok(())
    }

    /// Shows fork `fork` beside its parent.
    fn compare_with_parent(&mut self, fork: &str) -> Result<(), String> {
        let store = self.store.clone().ok_or("there is no run log")?;
        let read = |id: &str| {
            store
                .get_run(id)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("run {id} is no longer in the run log"))
        };
        let parent = (store.run_fork(fork).map_err(|e| e.to_string())?)
            .map(|f| f.parent_run_id)
            .ok_or_else(|| format!("run {fork} is not a fork"))?;
        self.debugger.comparison = Some(Comparison {
            fork: read(fork)?,
            parent: read(&parent)?,
        });
        Ok(())
    }
}
