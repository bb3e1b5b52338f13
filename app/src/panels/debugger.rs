//! The debugger: breakpoints on nodes (F9, or the node's menu), a run paused at one
//! (Continue F5, Step F10, Stop Shift+F5, the values edited first), and forks of past runs.
//! Everything it keeps is in [`Debugger`], one field of the app.

use egui_snarl::NodeId;

use super::debugger_breakpoints::{BreakWhen, Breakpoints};
use crate::App;
use crate::canvas::breakpoints::HeaderMark;
use crate::command::{Menu, MenuEntry, entry, keys};

/// What the debugger keeps between frames.
#[derive(Debug, Default)]
pub struct Debugger {
    /// The breakpoints of the graph shown.
    pub breakpoints: Breakpoints,
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
        HeaderMark {
            breakpoint: (self.debugger)
                .filter(|d| !d.breakpoints.is_empty())
                .and_then(|d| d.breakpoints.at(node)),
            paused: None,
        }
    }
}

impl Debugger {
    /// The debugger of a window whose breakpoints are kept in `data_dir`.
    pub fn kept_in(data_dir: Option<&std::path::Path>) -> Self {
        Debugger {
            breakpoints: Breakpoints::kept_in(data_dir),
        }
    }

    /// What the canvas draws this frame.
    pub fn marks(&self) -> DebugMarks<'_> {
        DebugMarks {
            debugger: Some(self),
        }
    }
}

impl App {
    /// The breakpoints shown follow the graph's file (another graph opened); once a frame.
    pub(crate) fn debugger_follow_file(&mut self) {
        self.debugger
            .breakpoints
            .follow_file(self.document.path.as_deref());
    }

    /// The graph was saved to `file`: its breakpoints are kept under it.
    pub(crate) fn debugger_saved_to(&mut self, file: &std::path::Path) {
        if let Err(err) = self.debugger.breakpoints.saved_to(file) {
            self.notice = Some(err);
        }
    }

    /// Carries out a debugger command.
    pub(crate) fn apply_debug(&mut self, command: DebugCommand, _ctx: &egui::Context) {
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
        };
        if let Err(err) = kept {
            self.notice = Some(err);
        }
    }
}
