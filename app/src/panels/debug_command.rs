//! What the debugger can be asked: a type of its own, below both the rooms that push it
//! (canvas, history, the pause and fork panels) and the debugger that carries it out.

use egui_snarl::NodeId;

use super::debugger_breakpoints::BreakWhen;

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
    /// Edit the outputs of the node with this document id in the run shown (a past run),
    /// to fork it from there.
    OpenFork(String),
    /// Start the fork with the outputs as edited.
    StartFork,
    CloseFork,
    /// Show this fork beside its parent, the outputs that differ marked.
    CompareWithParent(String),
    CloseComparison,
}
