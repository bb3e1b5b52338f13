//! "Run from here" and pinned outputs: runs seeded with outputs instead of running nodes.

use agentloom_core::validate;
use agentloom_engine::downstream_of;
use egui_snarl::NodeId;

use super::App;

impl App {
    /// Runs `node` and what depends on it; every other node reuses its outputs from the
    /// run shown (the last one), with that run's inputs.
    pub(super) fn run_from_here(&mut self, node: NodeId, ctx: &egui::Context) {
        if let Err(err) = self.try_run_from_here(node, ctx) {
            self.notice = Some(format!("Cannot run from here: {err}"));
        }
    }

    fn try_run_from_here(&mut self, node: NodeId, ctx: &egui::Context) -> Result<(), String> {
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
        let doc = self.runnable_doc();
        let graph = validate(&doc, self.catalog.as_ref())
            .map_err(|problems| format!("the graph has {} problem(s)", problems.len()))?;
        let detail = store
            .get_run(&reuse)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("run {reuse} is no longer in the run log"))?;
        let seed = store
            .reuse_seed(&reuse, &downstream_of(&graph, &node_id))
            .map_err(|e| e.to_string())?;
        let runtime = self
            .runtime
            .as_ref()
            .ok_or("the run threads could not start")?;
        let executor = self.executor.clone().with_workspace(self.run_workspace());
        self.run.start_seeded(
            runtime,
            &executor,
            graph,
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
}
