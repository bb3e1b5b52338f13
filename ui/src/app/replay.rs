//! History → Replay: the graph runs again with a past run's inputs, its outbound calls
//! (LLM, HTTP, MCP, web search) answered from that run's recording, with no network; a
//! call that was not recorded fails its node ("not recorded: …").

use std::sync::Arc;

use agentloom_core::validate;
use agentloom_engine::{Replay, ReplayMiss};

impl super::App {
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
            self.run_form.prepare(&graph.interface_inputs());
            for field in &mut self.run_form.fields {
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
