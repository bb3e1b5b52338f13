//! Resuming a waiting run from the history: the person's decision is stored with the run,
//! then the recorded graph runs again under the same id, its finished nodes seeded from
//! the run log.

use agentloom_core::ApprovalDecision;
use std::sync::Arc;

use agentloom_engine::{RunDetail, RunStatus, RunStore};
use agentloom_runner::Prepared;

use agentloom_runner::resume::{claim_refusal, prepare_recorded};

use super::App;
use super::approval_panel::ApprovalPrompt;

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
        let claim = store
            .claim_decision(&run_id, node, decision)
            .map_err(|e| e.to_string())?;
        if let Some(refusal) = claim_refusal(&run_id, node, &claim) {
            return Err(refusal);
        }
        let seed = store.resume_seed(&run_id).map_err(|e| e.to_string())?;
        // Where the run started, as `agentloom approve` would resume it.
        let workspace = store
            .run_workspace(&run_id)
            .ok()
            .flatten()
            .unwrap_or_else(|| self.run_workspace());
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
