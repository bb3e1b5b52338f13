//! The problems list: what validation finds wrong with the graph; clicking one selects the
//! node it is about.

use std::collections::HashMap;

use agentloom_core::Problem;
use egui::{RichText, Ui};

use crate::Command;
use crate::theme;

/// What is wrong with the graph shown, checked again when the document changes.
pub(crate) struct Problems {
    /// Validation problems of the document, after those of `mcp`.
    pub(crate) list: Vec<Problem>,
    /// Each node's problem messages, by document id (the canvas marks those nodes).
    pub(crate) by_node: HashMap<String, Vec<String>>,
    /// The document revision `list` was made for.
    pub(crate) revision: u64,
    /// The graph's MCP servers that could not be reached.
    pub(crate) mcp: Vec<Problem>,
}

impl Default for Problems {
    fn default() -> Self {
        Problems {
            list: Vec::new(),
            by_node: HashMap::new(),
            // No revision yet: the first frame checks the document.
            revision: u64::MAX,
            mcp: Vec::new(),
        }
    }
}

/// The problems panel.
pub fn problems_ui(ui: &mut Ui, problems: &[Problem], commands: &mut Vec<Command>) {
    if problems.is_empty() {
        ui.label(RichText::new("No problems").color(theme::OK));
        return;
    }
    ui.label(
        RichText::new(crate::run_panel::counted(
            problems.len(),
            "problem",
            "problems",
        ))
        .color(theme::WARN)
        .strong(),
    );
    egui::ScrollArea::vertical()
        .id_salt("problems")
        .max_height(160.0)
        .show(ui, |ui| {
            for problem in problems {
                let response =
                    ui.selectable_label(false, RichText::new(&problem.message).color(theme::WARN));
                let response = response.on_hover_text(&problem.path);
                if response.clicked()
                    && let Some(node) = &problem.node
                {
                    commands.push(Command::InspectById(node.clone()));
                }
            }
        });
}
