//! A graph file that is not trusted (see [`agentloom_runner::trust`]) opens offline: its MCP servers
//! are not started, its runs get no credential, call no file outside its folder and run in
//! safe mode. When trusting it would allow anything, a banner over the canvas lists exactly
//! what, with Trust and connect / Keep offline.

use std::path::{Path, PathBuf};

use agentloom_core::GraphDoc;
use egui::RichText;

use crate::Command;
use agentloom_runner::trust::{TrustNeeds, TrustStore};

/// The open graph's file, not trusted.
#[derive(Clone, Debug)]
pub struct Untrusted {
    pub file: PathBuf,
    pub needs: TrustNeeds,
    /// Keep offline was chosen: the banner is gone until the graph is opened again.
    pub offline: bool,
}

impl Untrusted {
    /// `None` when the graph `doc` from `file` is trusted, or has no file (made here).
    pub fn of(store: Option<&TrustStore>, doc: &GraphDoc, file: Option<&Path>) -> Option<Self> {
        let file = file?;
        // Decided on one read of the file, which must hold the document shown.
        if agentloom_runner::GraphSource::shows_trusted(store, doc, file) {
            return None;
        }
        Some(Self::new(doc, file))
    }

    /// `doc`, resolving against `file`, untrusted whatever the file's trust.
    pub fn new(doc: &GraphDoc, file: &Path) -> Self {
        Self {
            file: file.to_owned(),
            needs: agentloom_runner::trust::needs_of(doc, Some(file)),
            offline: false,
        }
    }

    /// Whether the banner shows: something to ask about, and no answer yet.
    pub fn asks(&self) -> bool {
        !self.offline && !self.needs.is_empty()
    }
}

/// The banner's content.
pub fn banner_ui(ui: &mut egui::Ui, untrusted: &Untrusted, commands: &mut Vec<Command>) {
    ui.add_space(4.0);
    let name = untrusted.file.file_name().map_or_else(
        || untrusted.file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    ui.label(
        RichText::new(format!(
            "{name} is not trusted: it is open offline. Trusting it lets it:"
        ))
        .strong(),
    );
    for line in untrusted.needs.lines() {
        ui.label(format!("• {line}"));
    }
    ui.horizontal(|ui| {
        if ui.button("Trust and connect").clicked() {
            commands.push(Command::TrustAndConnect);
        }
        if ui.button("Keep offline").clicked() {
            commands.push(Command::KeepOffline);
        }
    });
    ui.add_space(4.0);
}
