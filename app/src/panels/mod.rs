//! The panels around the canvas: the block palette, the inspector (with pinned outputs and
//! a node's sub-runs), the run history, problems, approvals and the trust banner.

pub mod agent_trace;
pub mod approval_panel;
pub mod debug_command;
pub mod debugger;
pub mod debugger_breakpoints;
pub mod debugger_fork;
pub mod debugger_pause;
pub mod graph_info;
pub mod history;
pub mod inspector;
pub mod json_tree;
pub mod palette;
pub mod pinned;
pub mod problems;
pub mod run_list;
pub mod run_timeline;
pub mod subgraph;
pub mod trust_banner;

use agentloom_engine::RunStatus;
use egui::RichText;

use crate::{App, mcp_servers, run_panel, theme};

impl App {
    pub(crate) fn bottom_ui(&mut self, ui: &mut egui::Ui) {
        ui.add_space(4.0);
        if let Some(notice) = &self.notice {
            ui.label(RichText::new(notice).color(theme::WARN));
        }
        ui.columns(2, |cols| {
            if self.document.settings.safe_mode {
                cols[0].label(
                    RichText::new("Safe mode: blocks with side effects ask before they run")
                        .color(theme::WARN),
                );
            }
            // The head stays in view; the outputs, whole, scroll under it.
            let waiting = (self.history.rows.iter()).find(|run| {
                run.status == RunStatus::Waiting && run.graph_name == self.document.name
            });
            run_panel::run_summary_header_ui(&mut cols[0], &self.run, waiting, &mut self.commands);
            self.debugger_pause_header_ui(&mut cols[0]);
            cols[0].separator();
            egui::ScrollArea::vertical()
                .id_salt("run_summary")
                .auto_shrink(false)
                .show(&mut cols[0], |ui| {
                    self.debugger_pause_values_ui(ui);
                    run_panel::run_summary_ui(ui, &self.run);
                    self.timeline_ui(ui);
                });
            if let Some(servers) = self.mcp_connector.connecting() {
                // Until then the servers' tool nodes show as unknown blocks.
                mcp_servers::connecting_ui(
                    &mut cols[1],
                    &format!("MCP servers: {}", servers.join(", ")),
                );
            }
            problems::problems_ui(&mut cols[1], &self.problems.list, &mut self.commands);
        });
    }

    pub(crate) fn side_ui(&mut self, ui: &mut egui::Ui) {
        let history_height = (ui.available_height() * 0.3).max(120.0);
        egui::Panel::bottom("history")
            .resizable(true)
            .default_size(history_height)
            // Not squeezed to a couple of rows under a long inspector.
            .min_size(history_height)
            .show(ui, |ui| {
                let shown = self.run.run_id.clone();
                history::history_ui(
                    ui,
                    &self.history.rows,
                    shown.as_deref(),
                    &self.document.name,
                    &mut self.history.all_graphs,
                    &self.debugger.lineage,
                    &mut self.commands,
                );
            });
        egui::CentralPanel::default_margins().show(ui, |ui| {
            // A block's inspector scrolls each of its tabs itself, below their heads.
            if !self.run_setup.form.open
                && self.selected_ids(ui.ctx()).len() <= 1
                && let Some((id, node)) = self
                    .session
                    .inspected
                    .and_then(|n| self.document.snarl.get_node(n).map(|c| (n, c)))
            {
                let run = self.run.node(&node.doc.id);
                // Working now: in the app's own run, or in one opened from the run log
                // while another process runs it.
                let live = (self.run.is_running()
                    || self.run.status == Some(agentloom_engine::RunStatus::Running))
                    && run.is_some_and(|r| {
                        matches!(
                            r.status,
                            agentloom_engine::NodeStatus::Running
                                | agentloom_engine::NodeStatus::AwaitingApproval
                        )
                    });
                let shown = &self.run;
                inspector::inspector_ui(
                    ui,
                    &mut self.inspector,
                    id,
                    node,
                    inspector::LastRun {
                        node: run,
                        run_key: shown.run_id.as_deref().unwrap_or_default(),
                        live,
                    },
                    self.catalog.as_ref(),
                    self.credentials.list(),
                    &mut self.commands,
                    |ui| subgraph::child_runs_ui(ui, shown, &node.doc.id),
                );
                return;
            }
            egui::ScrollArea::vertical()
                .id_salt("inspector")
                .show(ui, |ui| {
                    if self.run_setup.form.open {
                        run_panel::run_form_ui(ui, &mut self.run_setup.form, &mut self.commands);
                        return;
                    }
                    // Several selected blocks: the inspector names the set Delete acts on.
                    let selected = self.selected_ids(ui.ctx());
                    if selected.len() > 1 {
                        ui.heading(format!("{} blocks selected", selected.len()));
                        ui.label(selected.join(", "));
                        ui.label(
                            RichText::new("Delete, Copy and Duplicate act on these blocks.")
                                .color(theme::TEXT_WEAK),
                        );
                        return;
                    }
                    // No block (or a block since removed) in the inspector.
                    graph_info::graph_info_ui(
                        ui,
                        &self.document,
                        &mut self.graph_info,
                        &mut self.commands,
                    );
                    ui.label(
                        RichText::new(format!(
                            "{} blocks. Select a block to edit it.",
                            self.document.snarl.nodes().count()
                        ))
                        .color(theme::TEXT_WEAK),
                    );
                });
        });
    }
}
