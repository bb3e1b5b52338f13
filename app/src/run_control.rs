//! Run control: Run (asking for the graph's inputs first), Stop, showing a past run, and
//! "Run from here" and pinned outputs, runs seeded with outputs instead of running nodes;
//! History → Replay, a run answered from a past run's recorded calls; resuming a waiting
//! run from the history: the person's decision is stored with the run, then the recorded
//! graph runs again under the same id, its finished nodes seeded from the run log.
//! What a run's events do to the run shown is [`super::run::RunView`]'s business.

use std::path::{Path, PathBuf};

use agentloom_core::{ApprovalDecision, GraphDoc, RunInput, validate};
use std::sync::Arc;

use agentloom_engine::{Replay, ReplayMiss, RunDetail, RunStatus, RunStore, downstream_of};
use agentloom_runner::Prepared;
use agentloom_runner::resume::{claim_refusal, prepare_recorded, resume_seed};
use egui_snarl::NodeId;

use super::approval_panel::ApprovalPrompt;
use super::run::{self, RunView};
use super::{App, Command, run_panel};

impl App {
    /// Runs `node` and what depends on it; every other node reuses its outputs from the
    /// run shown (the last one), with that run's inputs.
    pub(super) fn run_from_here(&mut self, node: NodeId, ctx: &egui::Context) {
        if let Err(err) = self.try_run_from_here(node, ctx) {
            self.notice = Some(format!("Cannot run from here: {err}"));
        }
    }

    pub(super) fn try_run_from_here(
        &mut self,
        node: NodeId,
        ctx: &egui::Context,
    ) -> Result<(), String> {
        if self.run.is_running() {
            return Err("a run is going".to_owned());
        }
        let store = self
            .store
            .clone()
            .ok_or("there is no run log to reuse outputs from")?;
        let reuse = self.run.run_id.clone().ok_or("run the graph once first")?;
        let node_id = self
            .document
            .snarl
            .get_node(node)
            .map(|n| n.doc.id.clone())
            .ok_or("the node is gone")?;
        let prepared = self.prepare_run()?;
        let detail = store
            .get_run(&reuse)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("run {reuse} is no longer in the run log"))?;
        let mut seed = store
            .reuse_seed(&reuse, &downstream_of(prepared.graph(), &node_id))
            .map_err(|e| e.to_string())?;
        seed.settle_redacted(prepared.graph())?;
        let runtime = self
            .runtime
            .as_ref()
            .ok_or("the run threads could not start")?;
        self.run.start_seeded(
            runtime,
            prepared,
            self.run_workspace(),
            detail.inputs,
            Some(&store),
            ctx,
            None,
            Some(seed),
        )?;
        self.notice = None;
        Ok(())
    }

    /// Pins the node's outputs from the run shown into the graph (runs use them instead of
    /// running it), or removes the pin. Undoable like any edit.
    pub(super) fn pin_outputs(&mut self, node: NodeId, pin: bool) {
        let Some(canvas) = self.document.snarl.get_node(node) else {
            return;
        };
        let pinned = if pin {
            match self.run.node(&canvas.doc.id) {
                // Shown with a secret replaced: pinned, its dependents would get the marker.
                Some(run) if agentloom_engine::holds_marker(&run.outputs) => {
                    self.notice = Some(format!(
                        "`{}`'s outputs are not pinned: they held a secret, which the run shown does not keep, and the nodes after it would get {} instead.",
                        canvas.doc.id,
                        agentloom_engine::REDACTED
                    ));
                    return;
                }
                Some(run) if !run.outputs.is_empty() => Some(run.outputs.clone()),
                _ => {
                    self.notice = Some(format!(
                        "`{}` has no outputs in the run shown to pin.",
                        canvas.doc.id
                    ));
                    return;
                }
            }
        } else {
            None
        };
        let catalog = self.catalog.clone();
        self.document.checkpoint();
        self.document
            .update_node(node, catalog.as_ref(), |doc| doc.pinned = pinned);
    }

    /// Validates and either opens the inputs form or starts at once.
    pub(super) fn press_run(&mut self, ctx: &egui::Context) {
        if self.run.is_running() {
            return;
        }
        let doc = self.document.to_doc();
        match validate(&doc, self.catalog.as_ref()) {
            Ok(graph) => {
                let inputs = graph.interface_inputs();
                if inputs.is_empty() {
                    self.run_setup.form.fields.clear();
                    self.start_run(ctx);
                } else {
                    self.run_setup.form.prepare(&inputs);
                    self.run_setup.form.open = true;
                }
            }
            Err(problems) => {
                self.notice = Some(format!(
                    "The graph cannot run: {}. {}",
                    crate::run_panel::counted(problems.len(), "problem", "problems"),
                    problems
                        .first()
                        .map(|p| p.message.as_str())
                        .unwrap_or_default()
                ));
            }
        }
    }

    /// Starts the run with the inputs typed in the form.
    pub(super) fn start_run(&mut self, ctx: &egui::Context) {
        self.run_setup.form.open = false;
        let prepared = match self.prepare_run() {
            Ok(prepared) => prepared,
            Err(err) => {
                self.notice = Some(format!("The graph cannot run: {err}"));
                return;
            }
        };
        let mut inputs = agentloom_core::ValueMap::new();
        for run_panel::RunFormField {
            input: RunInput { name, ty, .. },
            text,
        } in &self.run_setup.form.fields
        {
            if text.is_empty() {
                continue;
            }
            match run::parse_input(text, ty) {
                Ok(value) => {
                    inputs.insert(name.clone(), value);
                }
                Err(err) => {
                    self.notice = Some(format!("Input `{name}`: {err}"));
                    self.run_setup.form.open = true;
                    return;
                }
            }
        }
        let Some(runtime) = &self.runtime else {
            self.notice =
                Some("Runs are not available: the run threads could not start.".to_owned());
            return;
        };
        match self.run.start(
            runtime,
            prepared,
            self.run_workspace(),
            inputs,
            self.store.as_ref(),
            ctx,
        ) {
            Ok(()) => self.notice = None,
            Err(err) => self.notice = Some(format!("Cannot start the run: {err}")),
        }
    }

    /// The document as a run records it: `graph.call` paths absolute, so that the run can
    /// be resumed or approved from anywhere. (What its trust changes, the runner decides.)
    pub(super) fn runnable_doc(&self) -> GraphDoc {
        agentloom_blocks::graph_call::with_absolute_paths(
            self.document.to_doc(),
            self.graph_file.as_deref(),
        )
    }

    pub(super) fn open_run(&mut self, id: &str) {
        if self.run.is_running() {
            self.notice = Some("A run is going: stop it before showing another one.".to_owned());
            return;
        }
        let Some(store) = &self.store else { return };
        // A run of a file its user had not trusted opens with that file's trust, whatever is
        // open now: its servers stay offline and its runs get no credential.
        let untrusted_file = store
            .untrusted_graph_file(id)
            .ok()
            .flatten()
            .map(PathBuf::from);
        match store.get_run(id) {
            Ok(Some(detail)) => {
                // A run of another graph opens as a new untitled document, never under the
                // current file (where Save would write it).
                if let Some(graph) = run::recorded_graph(&detail) {
                    let current = self.document.to_doc();
                    let same_nodes = graph
                        .nodes
                        .iter()
                        .all(|n| current.node(&n.id).is_some_and(|c| c.block == n.block));
                    if !same_nodes {
                        if !self.may_discard(&Command::OpenRun(id.to_owned())) {
                            return;
                        }
                        // Its `graph.call` paths most likely point where the current
                        // file's do.
                        let graph_file = untrusted_file.or_else(|| self.graph_file.clone());
                        self.open_document_resolving(&graph, None, graph_file.as_deref());
                    }
                }
                self.run = RunView::from_detail(&detail);
                self.load_stored_approvals();
            }
            Ok(None) => self.notice = Some(format!("Run {id} is no longer in the run log.")),
            Err(err) => self.notice = Some(err.to_string()),
        }
    }

    /// The directory the file blocks of a run are confined to: the one given at start, else
    /// the folder of the graph's file (a graph and the files it reads travel together), else
    /// the current directory.
    pub fn run_workspace(&self) -> PathBuf {
        self.run_setup
            .workspace
            .clone()
            .unwrap_or_else(|| self.graph_folder())
    }

    /// Where a recorded run goes on (resumed after an approval, or continued from a
    /// breakpoint): the folder it started in, as `agentloom approve` and `continue` do,
    /// else this graph's [`App::run_workspace`].
    pub(super) fn recorded_run_workspace(&self, store: &RunStore, run_id: &str) -> PathBuf {
        store
            .run_workspace(run_id)
            .ok()
            .flatten()
            .unwrap_or_else(|| self.run_workspace())
    }

    /// The folder of the graph's file, else the current directory.
    pub(super) fn graph_folder(&self) -> PathBuf {
        match self.document.path.as_deref().and_then(Path::parent) {
            Some(dir) if !dir.as_os_str().is_empty() => {
                std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
            }
            _ => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        }
    }

    /// History → Replay: the graph runs again with a past run's inputs, its outbound calls
    /// (LLM, HTTP, MCP, web search) answered from that run's recording, with no network; a
    /// call that was not recorded fails its node ("not recorded: …").
    pub(super) fn replay_run(&mut self, id: &str, ctx: &egui::Context) {
        if self.run.is_running() {
            self.notice = Some("A run is going: stop it before replaying another one.".to_owned());
            return;
        }
        let Some(store) = &self.store else {
            self.notice = Some("Runs are not recorded, so there is nothing to replay.".to_owned());
            return;
        };
        let recorded = store
            .get_run(id)
            .and_then(|detail| Ok((detail, store.recorded_calls(id)?)));
        let (detail, calls) = match recorded {
            Ok((Some(detail), calls)) => (detail, calls),
            Ok((None, _)) => {
                self.notice = Some(format!("Run {id} is not in the run log."));
                return;
            }
            Err(err) => {
                self.notice = Some(format!("Cannot read run {id}: {err}"));
                return;
            }
        };
        // The recorded inputs fill the run form, as if typed.
        if let Ok(graph) = validate(&self.runnable_doc(), self.catalog.as_ref()) {
            self.run_setup.form.prepare(&graph.interface_inputs());
            for field in &mut self.run_setup.form.fields {
                if let Some(value) = detail.inputs.get(&field.input.name) {
                    field.text = value.to_text();
                }
            }
        }
        self.run.replay = Some(Arc::new(Replay::new(calls, ReplayMiss::Fail)));
        self.start_run(ctx);
        // Not started (invalid graph, bad input): the next run is a live one.
        if !self.run.is_running() {
            self.run.replay = None;
        }
    }
}

/// Resuming a waiting run.
impl App {
    /// Answers the live run's request, or decides a waiting run's and resumes it.
    pub(super) fn decide_approval(
        &mut self,
        node: &str,
        decision: ApprovalDecision,
        ctx: &egui::Context,
    ) {
        let Some(stored) = self.run.answer(node, decision.clone()) else {
            return;
        };
        if let Err(err) = self.resume_waiting_run(node, &decision, ctx) {
            self.notice = Some(format!("Cannot resume the run: {err}"));
            self.run.approvals.push(stored);
        }
    }

    fn resume_waiting_run(
        &mut self,
        node: &str,
        decision: &ApprovalDecision,
        ctx: &egui::Context,
    ) -> Result<(), String> {
        let run_id = self.run.run_id.clone().ok_or("no run is shown")?;
        let (store, detail, prepared) = self.prepare_waiting_run(&run_id)?;
        let runtime = self
            .runtime
            .as_ref()
            .ok_or("the run threads could not start")?;
        // Refused before the decision is claimed: the run stays waiting.
        resume_seed(&store, &run_id, prepared.graph())?;
        let claim = store
            .claim_decision(&run_id, node, decision)
            .map_err(|e| e.to_string())?;
        if let Some(refusal) = claim_refusal(&run_id, node, &claim) {
            return Err(refusal);
        }
        // With the decision now stored.
        let seed = resume_seed(&store, &run_id, prepared.graph())?;
        let workspace = self.recorded_run_workspace(&store, &run_id);
        self.run.start_seeded(
            runtime,
            prepared,
            workspace,
            detail.inputs.clone(),
            Some(&store),
            ctx,
            Some(run_id),
            Some(seed),
        )?;
        self.notice = None;
        Ok(())
    }

    /// A waiting run of the run log, ready to go on: the log, what it recorded of the run,
    /// and the run prepared from it.
    pub(super) fn prepare_waiting_run(
        &self,
        run_id: &str,
    ) -> Result<(Arc<RunStore>, RunDetail, Prepared), String> {
        let store = self.store.clone().ok_or("there is no run log")?;
        let detail = store
            .get_run(run_id)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("run {run_id} is no longer in the run log"))?;
        if detail.run.status != RunStatus::Waiting {
            return Err(format!(
                "run {run_id} is {}, not waiting",
                detail.run.status.as_str()
            ));
        }
        let doc = detail.graph_doc().map_err(|e| e.to_string())?;
        // The graph files the run calls as they were when it started, and the trust it ran
        // with: a run of a file its user had not trusted gets no credential when resumed
        // either, unless the file has been trusted since.
        let trusted = |file: &std::path::Path| {
            agentloom_runner::trust::is_trusted_in(self.trust_store.as_ref(), file)
        };
        let prepared = prepare_recorded(&store, run_id, doc, trusted, &self.run_credentials)?;
        Ok((store, detail, prepared))
    }

    /// The requests a waiting run shown from the history waits for, to decide on.
    pub(super) fn load_stored_approvals(&mut self) {
        let (Some(store), Some(run_id)) = (&self.store, &self.run.run_id) else {
            return;
        };
        if self.run.status != Some(RunStatus::Waiting) {
            return;
        }
        match store.pending_approvals(run_id) {
            Ok(pending) => {
                let undecided = pending.iter().any(|p| p.decision.is_none());
                self.run.approvals = pending
                    .into_iter()
                    .filter(|p| !undecided || p.decision.is_none())
                    .map(|p| ApprovalPrompt::stored(p.node, p.request))
                    .collect();
            }
            Err(err) => self.notice = Some(err.to_string()),
        }
    }
}
