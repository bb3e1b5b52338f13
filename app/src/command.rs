//! Everything the UI can ask of the app, as one [`Command`] enum. The commands of the menus
//! carry their label, shortcut and menu here, so that the menus and the keyboard
//! shortcuts are both made from [`menu_commands`] and cannot disagree.

use std::path::PathBuf;

use agentloom_core::McpServerDoc;
use egui::{Key, KeyboardShortcut, Modifiers, Pos2};
use egui_snarl::NodeId;

use super::canvas::model::Pin;
use super::debug_command::DebugCommand;
use super::document::NodeFlag;

/// A change the MCP servers window asks for; the app applies it as one undo step.
#[derive(Clone, Debug, PartialEq)]
pub enum McpEdit {
    Add(String, McpServerDoc),
    Remove(String),
}

/// Everything the UI can ask of the app. Pushed by panels, carried out by [`App::apply`].
#[derive(Clone, Debug)]
pub enum Command {
    /// Start an empty graph.
    New,
    /// Ask for a file, then open it.
    OpenDialog,
    /// Open a graph file (replaces the canvas; undo brings the old one back).
    Open(PathBuf),
    /// Open the graph file a graph-call node runs, remembering this graph and its view so
    /// the breadcrumb bar leads back.
    OpenCalled(PathBuf),
    /// Go back to the caller at this place of the breadcrumb bar (0: the first).
    ReturnToCaller(usize),
    /// Show the examples gallery.
    ShowExamples,
    /// Open the example at this index of the gallery as a new untitled document.
    OpenExample(usize),
    /// Save to the current file, or ask for one.
    Save,
    /// Ask for a file, then save there.
    SaveAsDialog,
    /// Save to this file and make it the current one.
    SaveAs(PathBuf),
    /// Ask for a file, then export there.
    ExportDialog,
    /// Write the shareable JSON of the graph here (the current file stays the same).
    Export(PathBuf),
    /// Ask for a file, then import it.
    ImportDialog,
    /// Replace the graph with the one in this file, keeping the current file name.
    Import(PathBuf),
    Undo,
    Redo,
    /// Add a block of this kind at this graph position (the view's centre if none).
    AddBlock {
        kind: String,
        pos: Option<Pos2>,
    },
    /// Wire `from = (node, output)` to `to = (node, input)`; refused with a reason if the
    /// types do not fit.
    Connect {
        from: (String, String),
        to: (String, String),
    },
    /// Add a block of this kind at this graph position wired to these pins (the ends of a
    /// wire dropped on empty canvas).
    AddWired {
        kind: String,
        pos: Pos2,
        pins: Vec<Pin>,
    },
    /// A drag on the canvas ended: the blocks it moved are one undo step.
    FinishMove,
    /// Set (or with `None` remove) a config field of a node.
    SetConfig {
        node: NodeId,
        field: String,
        value: Option<serde_json::Value>,
    },
    SetLabel {
        node: NodeId,
        label: Option<String>,
    },
    DeleteNodes(Vec<NodeId>),
    /// Remove the wires of a pin.
    Disconnect(Pin),
    /// Frame the selected blocks (or an empty spot) in a new titled group.
    GroupSelection(Vec<NodeId>),
    /// Move a group and the blocks inside it by this much (graph units).
    MoveGroup {
        id: String,
        delta: egui::Vec2,
    },
    SetGroupTitle {
        id: String,
        title: String,
    },
    /// Remove a group's frame; its blocks stay.
    RemoveGroup(String),
    /// Remove one wire.
    DeleteWire(egui_snarl::OutPinId, egui_snarl::InPinId),
    DuplicateNodes(Vec<NodeId>),
    /// Bypass the nodes (their inputs pass through, they do not run), or, when all of
    /// them are bypassed, run them again; one undo step.
    ToggleBypass(Vec<NodeId>),
    /// Turn a node flag (bypass, the `error` or `tool` output shown) on or off.
    SetNodeFlag {
        nodes: Vec<NodeId>,
        flag: NodeFlag,
        on: bool,
    },
    Copy(Vec<NodeId>),
    Paste,
    /// Show this node in the inspector.
    Inspect(NodeId),
    /// Rename or describe the graph.
    SetGraphInfo {
        name: String,
        description: String,
    },
    /// Select nothing: the inspector shows the graph.
    ClearSelection,
    /// Select every block (Edit → Select all).
    SelectAll,
    /// Open the quick-add search at this screen position.
    QuickAdd(Pos2),
    /// Show the node with this document id in the inspector and bring it into view.
    InspectById(String),
    FitView,
    ActualSize,
    /// Zoom about the middle of the canvas by this factor.
    Zoom(f32),
    /// Change how the canvas is viewed (View menu); kept between sessions.
    SetViewPrefs(crate::canvas::model::ViewPrefs),
    /// Press Run: ask for inputs if the graph has any, else start.
    Run,
    /// Start the run with the inputs in the form.
    StartRun,
    CloseRunForm,
    StopRun,
    /// Run this node and its dependents again, reusing the shown run's other outputs.
    RunFromHere(NodeId),
    /// Pin (true) the node's outputs from the shown run into the graph, or unpin them.
    PinOutputs(NodeId, bool),
    /// Replace the node's pinned outputs with these (edited in the inspector).
    SetPinned {
        node: NodeId,
        outputs: agentloom_core::ValueMap,
    },
    /// Decide on a pending approval (of the live run, or of a waiting run: resumes it).
    Approve(String, agentloom_core::ApprovalDecision),
    /// Turn safe mode (ask before running blocks with side effects) on or off; saved with
    /// the graph.
    SetSafeMode(bool),
    RefreshHistory,
    /// Show a past run's values on the canvas.
    OpenRun(String),
    /// Run the graph again with a past run's inputs, its outbound calls answered from that
    /// run's recording (History → Replay).
    ReplayRun(String),
    /// Ask for a cases file (prefilled with the last one) to add a past run to as a case
    /// (History → Add to cases).
    AddRunToCases(String),
    /// Add the run asked about by [`Command::AddRunToCases`] to this cases file.
    AddCaseTo(std::path::PathBuf),
    /// Show the Evaluations panel (View → Evaluations).
    OpenEvaluations,
    /// Show the Knowledge window (View → Knowledge).
    OpenKnowledge,
    /// Show the credentials manager.
    OpenCredentials,
    /// Show the graph's MCP servers.
    OpenMcpServers,
    /// Serve the editing tools for the open graph to an MCP client, and show how to
    /// connect (File → Let an assistant edit this graph…).
    OpenAssistantEdit,
    /// Add or remove one of the graph's MCP servers.
    EditMcpServers(McpEdit),
    /// Trust the open graph file as it is now, and connect its MCP servers.
    TrustAndConnect,
    /// Leave the open graph file untrusted and hide the trust banner.
    KeepOffline,
    /// Close the window, through the prompt when there are unsaved changes.
    Quit,
    /// Show a message in the status bar.
    Notify(String),
    /// Close the window even with unsaved changes.
    DiscardAndClose,
    /// Save, then close.
    SaveAndClose,
    /// Keep the window open, or the unsaved graph on screen.
    CancelClose,
    /// Drop the unsaved changes and carry out what replaces the graph (New, Open, a run).
    DiscardAndContinue,
    /// Save, then carry out what replaces the graph.
    SaveAndContinue,
    /// Breakpoints, a paused run, forks (see `panels::debugger`).
    Debug(DebugCommand),
}

/// The menus of the menu bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Menu {
    File,
    Edit,
    View,
    Run,
}

impl Menu {
    pub const ALL: [Menu; 4] = [Menu::File, Menu::Edit, Menu::View, Menu::Run];

    pub fn title(self) -> &'static str {
        match self {
            Menu::File => "File",
            Menu::Edit => "Edit",
            Menu::View => "View",
            Menu::Run => "Run",
        }
    }
}

/// Where a command shows in the menus, and its keys.
#[derive(Clone, Copy, Debug)]
pub struct MenuEntry {
    pub menu: Menu,
    pub label: &'static str,
    pub shortcut: Option<KeyboardShortcut>,
}

pub(crate) const fn entry(
    menu: Menu,
    label: &'static str,
    shortcut: Option<KeyboardShortcut>,
) -> MenuEntry {
    MenuEntry {
        menu,
        label,
        shortcut,
    }
}

pub(crate) const fn keys(modifiers: Modifiers, key: Key) -> Option<KeyboardShortcut> {
    Some(KeyboardShortcut::new(modifiers, key))
}

const COMMAND_SHIFT: Modifiers = Modifiers::COMMAND.plus(Modifiers::SHIFT);

/// Redo's second shortcut, the one other platforms' editors use.
pub const REDO_Y: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Y);

/// Every command of the menus, in menu order; the ones acting on blocks act on `selected`.
pub fn menu_commands(selected: &[NodeId]) -> Vec<Command> {
    vec![
        Command::New,
        Command::OpenDialog,
        Command::Save,
        Command::SaveAsDialog,
        Command::ShowExamples,
        Command::ImportDialog,
        Command::ExportDialog,
        Command::OpenCredentials,
        Command::OpenMcpServers,
        Command::OpenAssistantEdit,
        Command::Quit,
        Command::Undo,
        Command::Redo,
        Command::Copy(selected.to_vec()),
        Command::Paste,
        Command::DuplicateNodes(selected.to_vec()),
        Command::DeleteNodes(selected.to_vec()),
        Command::SelectAll,
        Command::GroupSelection(selected.to_vec()),
        Command::ToggleBypass(selected.to_vec()),
        Command::FitView,
        Command::ActualSize,
        Command::OpenEvaluations,
        Command::OpenKnowledge,
        Command::Run,
        Command::StopRun,
        Command::Debug(DebugCommand::ToggleBreakpoint(selected.to_vec())),
        Command::Debug(DebugCommand::Continue),
        Command::Debug(DebugCommand::Step),
        Command::Debug(DebugCommand::Stop),
    ]
}

impl Command {
    /// The command's menu, label and shortcut, for the commands the menus offer.
    pub fn menu_entry(&self) -> Option<MenuEntry> {
        use Menu::{Edit, File, Run, View};
        let command = Modifiers::COMMAND;
        Some(match self {
            Command::New => entry(File, "New", keys(command, Key::N)),
            Command::OpenDialog => entry(File, "Open…", keys(command, Key::O)),
            Command::Save => entry(File, "Save", keys(command, Key::S)),
            Command::SaveAsDialog => entry(File, "Save As…", keys(COMMAND_SHIFT, Key::S)),
            Command::ShowExamples => entry(File, "Examples…", None),
            Command::ImportDialog => entry(File, "Import…", None),
            Command::ExportDialog => entry(File, "Export…", None),
            Command::OpenCredentials => entry(File, "Credentials…", None),
            Command::OpenMcpServers => entry(File, "MCP servers…", None),
            Command::OpenAssistantEdit => entry(File, "Let an assistant edit this graph…", None),
            Command::Quit => entry(File, "Quit", keys(command, Key::Q)),
            Command::Undo => entry(Edit, "Undo", keys(command, Key::Z)),
            Command::Redo => entry(Edit, "Redo", keys(COMMAND_SHIFT, Key::Z)),
            Command::Copy(_) => entry(Edit, "Copy", keys(command, Key::C)),
            Command::Paste => entry(Edit, "Paste", keys(command, Key::V)),
            Command::DuplicateNodes(_) => entry(Edit, "Duplicate", keys(command, Key::D)),
            Command::DeleteNodes(_) => entry(Edit, "Delete", keys(Modifiers::NONE, Key::Delete)),
            Command::SelectAll => entry(Edit, "Select all", keys(command, Key::A)),
            Command::GroupSelection(_) => entry(Edit, "Group (comment)", keys(command, Key::G)),
            Command::ToggleBypass(_) => entry(Edit, "Bypass", keys(command, Key::B)),
            Command::FitView => entry(View, "Fit graph to view", keys(Modifiers::NONE, Key::F)),
            Command::ActualSize => entry(View, "Actual size", keys(command, Key::Num0)),
            Command::OpenEvaluations => entry(View, "Evaluations", None),
            Command::OpenKnowledge => entry(View, "Knowledge", None),
            Command::Run => entry(Run, "Run", keys(command, Key::Enter)),
            Command::StopRun => entry(Run, "Stop", keys(command, Key::Period)),
            // The usual debugger keys.
            Command::Debug(DebugCommand::ToggleBreakpoint(_)) => {
                entry(Run, "Toggle breakpoint", keys(Modifiers::NONE, Key::F9))
            }
            Command::Debug(DebugCommand::Continue) => {
                entry(Run, "Continue", keys(Modifiers::NONE, Key::F5))
            }
            Command::Debug(DebugCommand::Step) => {
                entry(Run, "Step", keys(Modifiers::NONE, Key::F10))
            }
            Command::Debug(DebugCommand::Stop) => {
                entry(Run, "Stop at breakpoint", keys(Modifiers::SHIFT, Key::F5))
            }
            _ => return None,
        })
    }

    /// The shortcut shown beside the command in the menus.
    pub fn shortcut(&self) -> Option<KeyboardShortcut> {
        self.menu_entry().and_then(|e| e.shortcut)
    }

    /// How the shortcut handler takes the command's keys.
    pub fn keys(&self) -> Keys {
        match self {
            // They arrive as clipboard events, and Delete goes to a picked wire first.
            Command::Copy(_) | Command::Paste | Command::DeleteNodes(_) => Keys::Own,
            // Text fields keep their own undo and Ctrl+A; these act on the canvas.
            Command::Undo
            | Command::Redo
            | Command::DuplicateNodes(_)
            | Command::SelectAll
            | Command::GroupSelection(_)
            | Command::ToggleBypass(_)
            | Command::FitView
            | Command::ActualSize
            | Command::Debug(DebugCommand::ToggleBreakpoint(_)) => Keys::Canvas,
            _ => Keys::Always,
        }
    }
}

/// When a command's shortcut is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Also while a text field has the keyboard.
    Always,
    /// Only while the canvas has the keyboard: no field has it and no dialog, window or
    /// popup is open.
    Canvas,
    /// Handled by the shortcut handler itself (clipboard events, Delete).
    Own,
}
