//! The desktop app: a node-graph canvas with a block palette, an inspector, a run panel,
//! the run history and a problems list.
//!
//! All UI is behind [`App::show`], shared by the eframe window ([`run_native`]) and the
//! egui_kittest tests. Panels never change the app directly: they push [`Command`]s, which
//! [`App::apply`] carries out after the frame's UI.

mod approval_panel;
mod canvas;
mod credentials;
mod document;
pub mod evaluations;
pub(crate) mod examples;
pub(crate) mod files;
mod groups;
mod history;
mod inspector;
mod json_tree;
mod mcp_servers;
mod minimap;
mod palette;
mod path_prompt;
mod pinned;
mod problems;
mod quick_add;
mod replay;
mod rerun;
mod resume;
mod run;
mod run_panel;
pub mod run_timeline;
mod subgraph;
pub mod theme;
mod trust_banner;
mod wire_menu;
mod wiring;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_core::{BlockCatalog, GraphDoc, Problem, RunInput, validate};
use agentloom_engine::{Executor, RunRow, RunStore};
use egui::{Key, KeyboardShortcut, Modifiers, Pos2, RichText};
use egui_snarl::NodeId;
use egui_snarl::ui::SnarlWidget;

pub use document::{ConnectError, Document};
pub use examples::EXAMPLES;
pub use files::{load_graph, save_graph};

use canvas::{CanvasState, Viewer};
use inspector::InspectorState;
use palette::{PaletteDrag, PaletteEntry};
use path_prompt::PathPurpose;
use run::RunView;
use run_panel::RunForm;

/// The example graph shown on first launch.
pub const EXAMPLE_GRAPH: &str = include_str!("../../../assets/examples/hello.agentloom.json");

/// How long unsaved changes wait before they are autosaved.
const AUTOSAVE_DELAY: Duration = Duration::from_secs(3);

const UNDO: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Z);
const REDO: KeyboardShortcut =
    KeyboardShortcut::new(Modifiers::COMMAND.plus(Modifiers::SHIFT), Key::Z);
const REDO_Y: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Y);
const NEW: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::N);
const OPEN: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::O);
const SAVE: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::S);
const SAVE_AS: KeyboardShortcut =
    KeyboardShortcut::new(Modifiers::COMMAND.plus(Modifiers::SHIFT), Key::S);
const RUN: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Enter);
const STOP: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Period);
const DUPLICATE: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::D);
const COPY: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::C);
const PASTE: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::V);
const QUIT: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Q);
const FIT: KeyboardShortcut = KeyboardShortcut::new(Modifiers::NONE, Key::F);
const ACTUAL_SIZE: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Num0);
const DELETE: KeyboardShortcut = KeyboardShortcut::new(Modifiers::NONE, Key::Delete);
const GROUP: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::G);

/// Everything the UI can ask of the app. Pushed by panels, carried out by [`App::apply`].
#[derive(Clone, Debug)]
pub enum Command {
    /// Start an empty graph.
    New,
    /// Ask for a file, then open it.
    OpenDialog,
    /// Open a graph file (replaces the canvas; undo brings the old one back).
    Open(PathBuf),
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
    SetCredential {
        node: NodeId,
        name: Option<String>,
    },
    DeleteNodes(Vec<NodeId>),
    /// Remove the wires of a pin.
    Disconnect(wiring::Pin),
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
    /// Open the quick-add search at this screen position.
    QuickAdd(Pos2),
    /// Show the node with this document id in the inspector and bring it into view.
    InspectById(String),
    FitView,
    ActualSize,
    /// Zoom about the middle of the canvas by this factor.
    Zoom(f32),
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
    /// Show the credentials manager.
    OpenCredentials,
    /// Show the graph's MCP servers.
    OpenMcpServers,
    /// Add or remove one of the graph's MCP servers.
    EditMcpServers(mcp_servers::McpEdit),
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
}

/// Where the app keeps its files; tests point these at temporary directories.
#[derive(Clone, Debug)]
pub struct AppPaths {
    /// The SQLite run log (`None`: runs are not recorded).
    pub run_log: Option<PathBuf>,
    /// Autosave and last-graph note (`None`: neither).
    pub data_dir: Option<PathBuf>,
    /// The directory file blocks are confined to (`None`: the folder of the graph's file, or
    /// the current directory for a graph never saved).
    pub workspace: Option<PathBuf>,
    /// Where the credentials index lives, the secrets being in the OS keychain (`None`: no
    /// credential store; runs read `AGENTLOOM_SECRET_<NAME>` only).
    pub credentials_dir: Option<PathBuf>,
}

impl AppPaths {
    /// The per-user defaults.
    pub fn user_default(db: Option<PathBuf>) -> Self {
        AppPaths {
            run_log: db.or_else(|| RunStore::default_path().ok()),
            data_dir: files::data_dir(),
            workspace: None,
            credentials_dir: files::data_dir(),
        }
    }
}

/// The app.
pub struct App {
    catalog: Arc<Registry>,
    /// The graph file the catalog's `graph.call` resolves relative paths against.
    graph_file: Option<PathBuf>,
    palette: Vec<PaletteEntry>,
    pub document: Document,
    canvas: CanvasState,
    inspected: Option<NodeId>,
    inspector: InspectorState,
    credentials: credentials::Credentials,
    mcp_window: mcp_servers::McpServersWindow,
    mcp_connector: mcp_servers::McpConnector,
    /// Where trust in graph files is recorded (`None`: trust lasts for this session).
    trust_store: Option<crate::trust::TrustStore>,
    /// The open graph's file when it is not trusted.
    untrusted: Option<trust_banner::Untrusted>,
    /// The graph's MCP servers that could not be reached (shown with the problems).
    mcp_problems: Vec<Problem>,
    commands: Vec<Command>,
    search: String,
    /// The run shown on the canvas.
    pub run: RunView,
    run_form: RunForm,
    runtime: Option<tokio::runtime::Runtime>,
    executor: Executor,
    store: Option<Arc<RunStore>>,
    history: Vec<RunRow>,
    /// Validation problems of the current document, recomputed when it changes.
    problems: Vec<Problem>,
    problems_by_node: HashMap<String, Vec<String>>,
    problems_revision: u64,
    /// Last message for the status bar.
    pub notice: Option<String>,
    clipboard: Option<GraphDoc>,
    data: Option<files::DataFiles>,
    autosave_due: Option<Instant>,
    autosave_delay: Duration,
    /// The document before a drag on the canvas started (one undo step for the move).
    drag_snapshot: Option<GraphDoc>,
    close_prompt: bool,
    /// What waits for an answer to "save changes?" before it replaces the graph.
    discard_prompt: Option<Command>,
    allow_close: bool,
    first_frame: Option<Instant>,
    pending_fit: bool,
    /// Fits still to do once the nodes are laid out (the first fit of a graph guesses their
    /// sizes, and their detail, hence size, follows the zoom the fit chose).
    refits_after_layout: u8,
    last_selection: Vec<NodeId>,
    /// Bumped to clear the canvas selection (see [`App::canvas_id`]).
    selection_epoch: u64,
    /// The graph's name or description is being typed (one undo step for it).
    graph_info_editing: bool,
    /// The graph-info field that has the keyboard.
    graph_info_focus: Option<egui::Id>,
    /// The workspace given at start (`--workspace`), over the graph's folder.
    workspace: Option<PathBuf>,
    /// Whether native file dialogs can appear here; asked on first use.
    native_dialogs: Option<bool>,
    /// The in-app file prompt used where they cannot.
    path_prompt: Option<path_prompt::PathPrompt>,
    /// The wire being dragged, to say why it cannot end where the pointer is.
    wire_drag: wiring::WireDrag,
    /// The quick-add search, when open.
    quick_add: Option<quick_add::QuickAdd>,
    /// The examples gallery is showing.
    examples_open: bool,
    /// The group whose title is being typed (one undo step for it).
    group_title_editing: Option<String>,
    /// The wire picked by a click (Delete removes it).
    selected_wire: Option<(egui_snarl::OutPinId, egui_snarl::InPinId)>,
    /// The menu of a right-clicked wire, while open.
    wire_menu: Option<wire_menu::WireMenu>,
    pub evaluations: evaluations::EvaluationsPanel,
    timeline: run_timeline::RunTimeline,
}

impl App {
    /// An app showing `doc` (from `path`, if it came from a file).
    pub fn new(doc: &GraphDoc, path: Option<PathBuf>, paths: &AppPaths) -> Self {
        let trust_store = paths
            .data_dir
            .as_deref()
            .map(crate::trust::TrustStore::in_dir);
        let untrusted = trust_banner::Untrusted::of(trust_store.as_ref(), doc, path.as_deref());
        let catalog = Arc::new(crate::trust::builtin_for(
            path.as_deref(),
            untrusted.is_none(),
        ));
        let palette = palette::entries(catalog.as_ref());
        let document = Document::from_doc(doc, catalog.as_ref(), path.clone());
        let mut executor = Executor::new(catalog.clone());
        if let Some(workspace) = &paths.workspace {
            executor = executor.with_workspace(workspace.clone());
        }
        // Its credentials follow the graph's trust (`App::secrets_follow_trust`).
        let credentials = credentials::Credentials::new(paths.credentials_dir.as_deref());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("agentloom-run")
            .enable_all()
            .build()
            .map_err(|e| tracing::error!(error = %e, "cannot start the run threads"))
            .ok();
        let mut notice = None;
        let store = paths
            .run_log
            .as_ref()
            .and_then(|p| match RunStore::open(p) {
                Ok(store) => Some(Arc::new(store)),
                Err(err) => {
                    notice = Some(format!("Runs will not be recorded: {err}"));
                    None
                }
            });
        let mut app = App {
            catalog,
            palette,
            document,
            canvas: CanvasState::default(),
            inspected: None,
            inspector: InspectorState::default(),
            credentials,
            mcp_window: mcp_servers::McpServersWindow::default(),
            evaluations: evaluations::EvaluationsPanel::default(),
            timeline: run_timeline::RunTimeline::default(),
            mcp_connector: mcp_servers::McpConnector::for_graph_file(
                path.clone(),
                untrusted.is_none(),
            ),
            trust_store,
            untrusted,
            mcp_problems: Vec::new(),
            graph_file: path,
            commands: Vec::new(),
            search: String::new(),
            run: RunView::default(),
            run_form: RunForm::default(),
            runtime,
            executor,
            store,
            history: Vec::new(),
            problems: Vec::new(),
            problems_by_node: HashMap::new(),
            problems_revision: u64::MAX,
            notice,
            clipboard: None,
            data: paths.data_dir.clone().map(files::DataFiles::new),
            autosave_due: None,
            autosave_delay: AUTOSAVE_DELAY,
            drag_snapshot: None,
            close_prompt: false,
            discard_prompt: None,
            allow_close: false,
            first_frame: None,
            pending_fit: true,
            refits_after_layout: 0,
            last_selection: Vec::new(),
            selection_epoch: 0,
            graph_info_editing: false,
            graph_info_focus: None,
            native_dialogs: None,
            path_prompt: None,
            workspace: paths.workspace.clone(),
            wire_drag: wiring::WireDrag::default(),
            quick_add: None,
            examples_open: false,
            selected_wire: None,
            wire_menu: None,
            group_title_editing: None,
        };
        app.secrets_follow_trust();
        // The servers' tool nodes show their ports and wires once connected.
        app.connect_mcp(doc);
        app.refresh_history();
        app
    }

    /// The app as a person starts it: the given graph, else unsaved work recovered from a
    /// crash, else the last graph, else the example.
    pub fn startup(path: Option<PathBuf>, paths: &AppPaths) -> Self {
        let example = || GraphDoc::from_json_str(EXAMPLE_GRAPH).unwrap_or_default();
        let data = paths.data_dir.clone().map(files::DataFiles::new);
        let mut notice = None;
        let (doc, doc_path, recovered) = if let Some(path) = path {
            match load_graph(&path) {
                Ok(doc) => (doc, Some(path), false),
                Err(err) => {
                    notice = Some(err.to_string());
                    (example(), None, false)
                }
            }
        } else if let Some((doc, path)) = data.as_ref().and_then(files::DataFiles::recover) {
            (doc, path, true)
        } else if let Some(last) = data.as_ref().and_then(files::DataFiles::last_graph) {
            match load_graph(&last) {
                Ok(doc) => (doc, Some(last), false),
                Err(_) => (example(), None, false),
            }
        } else {
            (example(), None, false)
        };
        let mut app = App::new(&doc, doc_path, paths);
        if recovered {
            app.document.forget_saved();
            app.notice = Some("Recovered unsaved changes from the last session.".to_owned());
        }
        if notice.is_some() {
            app.notice = notice;
        }
        app
    }

    /// The block catalog.
    pub fn catalog(&self) -> &dyn BlockCatalog {
        self.catalog.as_ref()
    }

    /// Validation problems of the document as last checked.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// The runs listed in the history panel.
    pub fn history(&self) -> &[RunRow] {
        &self.history
    }

    /// The node shown in the inspector, by document id.
    pub fn inspected_id(&self) -> Option<&str> {
        self.inspected
            .and_then(|n| self.document.snarl.get_node(n))
            .map(|n| n.doc.id.as_str())
    }

    /// Queues a command, as a panel would.
    pub fn send(&mut self, command: Command) {
        self.commands.push(command);
    }

    /// Replaces how OAuth sign-in pages are opened (the system browser by default).
    pub fn set_browser_opener(
        &mut self,
        opener: Arc<dyn agentloom_engine::credentials::oauth::BrowserOpener>,
    ) {
        self.credentials.set_browser(opener);
    }

    /// Sets how long unsaved changes wait before they are autosaved (3 s by default).
    #[must_use]
    pub fn with_autosave_delay(mut self, delay: Duration) -> Self {
        self.autosave_delay = delay;
        self
    }

    /// Whether the "save changes?" prompt is showing.
    pub fn close_prompt_open(&self) -> bool {
        self.close_prompt || self.discard_prompt.is_some()
    }

    /// Where a canvas (graph) position is on screen. The accessibility tree reports widgets
    /// inside the canvas in graph coordinates.
    pub fn graph_to_screen(&self, pos: Pos2) -> Pos2 {
        self.canvas.transform * pos
    }

    /// The middle of the wire `from.port → to.port` on screen, as last drawn.
    pub fn wire_screen_middle(&self, from: (&str, &str), to: (&str, &str)) -> Option<Pos2> {
        let out_node = self.document.node_by_id(from.0)?;
        let in_node = self.document.node_by_id(to.0)?;
        let output = self
            .document
            .snarl
            .get_node(out_node)?
            .output_index(from.1)?;
        let input = self.document.snarl.get_node(in_node)?.input_index(to.1)?;
        let points = wiring::wire_points(
            &self.canvas,
            &self.document.snarl,
            egui_snarl::OutPinId {
                node: out_node,
                output,
            },
            egui_snarl::InPinId {
                node: in_node,
                input,
            },
        )?;
        Some(self.canvas.transform * points[points.len() / 2])
    }

    /// The screen rectangle of the node with this document id, as last drawn.
    /// Where the canvas is on screen.
    pub fn canvas_screen_rect(&self) -> egui::Rect {
        self.canvas.screen_rect
    }

    pub fn node_screen_rect(&self, id: &str) -> Option<egui::Rect> {
        let node = self.document.node_by_id(id)?;
        let rect = self.canvas.node_rects.get(&node)?;
        Some(self.canvas.transform * *rect)
    }
}

impl App {
    /// The canvas widget's id (its selection is read back with it). Snarl's selection can
    /// only be added to, so clearing it starts the widget's state afresh under a new id.
    fn canvas_id(&self) -> egui::Id {
        egui::Id::new("agentloom-canvas").with(self.selection_epoch)
    }

    /// The nodes selected on the canvas (shift-click, shift-drag a box).
    pub fn selected_ids(&self, ctx: &egui::Context) -> Vec<String> {
        egui_snarl::ui::get_selected_nodes(self.canvas_id(), ctx)
            .into_iter()
            .filter_map(|n| self.document.snarl.get_node(n).map(|c| c.doc.id.clone()))
            .collect()
    }

    /// Empties the canvas selection, keeping the view where it is.
    fn clear_selection(&mut self, ctx: &egui::Context) {
        if egui_snarl::ui::get_selected_nodes(self.canvas_id(), ctx).is_empty() {
            return;
        }
        self.selection_epoch += 1;
        self.canvas.set_transform = Some(self.canvas.transform);
        self.last_selection.clear();
    }
}

fn shortcut_text(ctx: &egui::Context, shortcut: &KeyboardShortcut) -> String {
    ctx.format_shortcut(shortcut)
}

impl App {
    /// Draws the whole app into `ui` and carries out what the person asked for.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        if self.first_frame.is_none() {
            self.first_frame = Some(Instant::now());
            theme::apply(&ctx);
        }
        self.handle_close(&ctx);
        if self.run.drain() {
            self.refresh_history();
        }
        self.take_mcp_connection();
        if self.mcp_connector.connecting().is_some() {
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
        }
        self.revalidate();
        self.shortcuts(&ctx);

        egui::Panel::top("menu").show(ui, |ui| self.menu_ui(ui));
        egui::Panel::bottom("status")
            .resizable(true)
            .default_size(120.0)
            .show(ui, |ui| self.bottom_ui(ui));
        egui::Panel::left("palette")
            .resizable(true)
            .default_size(theme::SIDE_PANEL_WIDTH * 0.8)
            .show(ui, |ui| {
                palette::palette_ui(ui, &self.palette, &mut self.search, &mut self.commands);
            });
        egui::Panel::right("inspector")
            .resizable(true)
            .default_size(theme::SIDE_PANEL_WIDTH)
            .show(ui, |ui| self.side_ui(ui));
        if let Some(untrusted) = self.untrusted.as_ref().filter(|u| u.asks()) {
            egui::Panel::top("trust_banner").show(ui, |ui| {
                trust_banner::banner_ui(ui, untrusted, &mut self.commands);
            });
        }
        egui::CentralPanel::no_frame().show(ui, |ui| self.canvas_ui(ui));

        examples::examples_ui(&ctx, &mut self.examples_open, &mut self.commands);
        if let Some(menu) = &mut self.wire_menu
            && !wire_menu::wire_menu_ui(&ctx, menu, &mut self.commands)
        {
            self.wire_menu = None;
        }
        quick_add::quick_add_ui(&ctx, &mut self.quick_add, &self.palette, &mut self.commands);
        path_prompt::path_prompt_ui(&ctx, &mut self.path_prompt, &mut self.commands);
        self.credentials.window_ui(&ctx);
        if let Some(edit) = self.mcp_window.window_ui(
            &ctx,
            &self.document.mcp_servers,
            &self.mcp_problems,
            self.mcp_connector.connecting(),
        ) {
            self.commands.push(Command::EditMcpServers(edit));
        }
        self.evaluations_ui(&ctx);
        self.close_prompt_ui(&ctx);

        let commands = std::mem::take(&mut self.commands);
        for command in commands {
            self.apply(command, &ctx);
        }
        self.revalidate();
        self.autosave_tick(&ctx);
    }

    /// The nodes Delete, Duplicate and Copy act on: the canvas selection, else the node in
    /// the inspector.
    fn targets(&self, ctx: &egui::Context) -> Vec<NodeId> {
        let selected = egui_snarl::ui::get_selected_nodes(self.canvas_id(), ctx);
        if selected.is_empty() {
            self.inspected
                .filter(|n| self.document.snarl.get_node(*n).is_some())
                .into_iter()
                .collect()
        } else {
            selected
        }
    }

    fn shortcuts(&mut self, ctx: &egui::Context) {
        let typing = ctx.egui_wants_keyboard_input();
        // Shortcuts with more modifiers first: Ctrl+Z would also match Ctrl+Shift+Z.
        let pairs = [
            (REDO, Command::Redo),
            (REDO_Y, Command::Redo),
            (UNDO, Command::Undo),
            (NEW, Command::New),
            (OPEN, Command::OpenDialog),
            (SAVE_AS, Command::SaveAsDialog),
            (SAVE, Command::Save),
            (RUN, Command::Run),
            (STOP, Command::StopRun),
            (QUIT, Command::Quit),
        ];
        let mut found = Vec::new();
        let selected = self.targets(ctx);
        // Escape closes an open menu first.
        let popup_open = egui::Popup::is_any_open(ctx) || self.quick_add.is_some();
        let canvas_rect = self.canvas.screen_rect;
        ctx.input_mut(|i| {
            for (shortcut, command) in pairs {
                // Text fields keep their own undo; the graph's undo is for the canvas.
                if typing && matches!(command, Command::Undo | Command::Redo) {
                    continue;
                }
                if i.consume_shortcut(&shortcut) {
                    found.push(command);
                }
            }
            if !typing {
                if i.consume_shortcut(&DUPLICATE) {
                    found.push(Command::DuplicateNodes(selected.clone()));
                }
                if i.consume_shortcut(&GROUP) {
                    found.push(Command::GroupSelection(selected.clone()));
                }
                if i.consume_shortcut(&FIT) {
                    found.push(Command::FitView);
                }
                if i.consume_shortcut(&ACTUAL_SIZE) {
                    found.push(Command::ActualSize);
                }
                if i.key_pressed(Key::Delete) || i.key_pressed(Key::Backspace) {
                    found.push(match self.selected_wire {
                        Some((from, to)) if selected.is_empty() => Command::DeleteWire(from, to),
                        _ => Command::DeleteNodes(selected.clone()),
                    });
                }
                if i.key_pressed(Key::Escape) && !popup_open {
                    found.push(Command::ClearSelection);
                }
                // Space or Tab over the canvas: quick add at the pointer.
                if let Some(pointer) = i.pointer.hover_pos()
                    && canvas_rect.contains(pointer)
                    && !popup_open
                    && (i.consume_key(Modifiers::NONE, Key::Space)
                        || i.consume_key(Modifiers::NONE, Key::Tab))
                {
                    found.push(Command::QuickAdd(pointer));
                }
                for event in &i.events {
                    match event {
                        egui::Event::Copy | egui::Event::Cut => {
                            found.push(Command::Copy(selected.clone()))
                        }
                        egui::Event::Paste(text) => {
                            if let Ok(doc) = GraphDoc::from_json_str(text) {
                                self.clipboard = Some(doc);
                            }
                            found.push(Command::Paste);
                        }
                        _ => {}
                    }
                }
            }
        });
        // A graph file dropped on the window opens it.
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        });
        for path in dropped {
            found.push(Command::Open(path));
        }
        // Copy and paste arrive as events, not key presses.
        let _ = (&COPY, &PASTE);
        self.commands.extend(found);
    }

    fn menu_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| {
                let items = [
                    ("New", Some(NEW), Command::New),
                    ("Open…", Some(OPEN), Command::OpenDialog),
                    ("Save", Some(SAVE), Command::Save),
                    ("Save As…", Some(SAVE_AS), Command::SaveAsDialog),
                    ("Examples…", None, Command::ShowExamples),
                    ("Import…", None, Command::ImportDialog),
                    ("Export…", None, Command::ExportDialog),
                    ("Credentials…", None, Command::OpenCredentials),
                    ("MCP servers…", None, Command::OpenMcpServers),
                    ("Quit", Some(QUIT), Command::Quit),
                ];
                for (label, shortcut, command) in items {
                    let mut button = egui::Button::new(label);
                    if let Some(s) = shortcut {
                        button = button.shortcut_text(shortcut_text(&ctx, &s));
                    }
                    if ui.add(button).clicked() {
                        self.commands.push(command);
                        ui.close();
                    }
                }
            });
            ui.menu_button("Edit", |ui| {
                let selected = self.targets(&ctx);
                let items = [
                    ("Undo", Some(UNDO), Command::Undo, self.document.can_undo()),
                    ("Redo", Some(REDO), Command::Redo, self.document.can_redo()),
                    (
                        "Copy",
                        Some(COPY),
                        Command::Copy(selected.clone()),
                        !selected.is_empty(),
                    ),
                    (
                        "Paste",
                        Some(PASTE),
                        Command::Paste,
                        self.clipboard.is_some(),
                    ),
                    (
                        "Duplicate",
                        Some(DUPLICATE),
                        Command::DuplicateNodes(selected.clone()),
                        !selected.is_empty(),
                    ),
                    (
                        "Delete",
                        Some(DELETE),
                        Command::DeleteNodes(selected.clone()),
                        !selected.is_empty(),
                    ),
                    (
                        "Group (comment)",
                        Some(GROUP),
                        Command::GroupSelection(selected.clone()),
                        true,
                    ),
                ];
                for (label, shortcut, command, enabled) in items {
                    let mut button = egui::Button::new(label);
                    if let Some(s) = shortcut {
                        button = button.shortcut_text(shortcut_text(&ctx, &s));
                    }
                    if ui.add_enabled(enabled, button).clicked() {
                        self.commands.push(command);
                        ui.close();
                    }
                }
            });
            ui.menu_button("View", |ui| {
                if ui
                    .add(
                        egui::Button::new("Fit graph to view")
                            .shortcut_text(shortcut_text(&ctx, &FIT)),
                    )
                    .clicked()
                {
                    self.commands.push(Command::FitView);
                    ui.close();
                }
                if ui
                    .add(
                        egui::Button::new("Actual size")
                            .shortcut_text(shortcut_text(&ctx, &ACTUAL_SIZE)),
                    )
                    .clicked()
                {
                    self.commands.push(Command::ActualSize);
                    ui.close();
                }
                if ui.button("Evaluations").clicked() {
                    self.evaluations.open = true;
                    ui.close();
                }
            });
            let running = self.run.is_running();
            ui.menu_button("Run", |ui| {
                if ui
                    .add_enabled(
                        !running,
                        egui::Button::new("Run").shortcut_text(shortcut_text(&ctx, &RUN)),
                    )
                    .clicked()
                {
                    self.commands.push(Command::Run);
                    ui.close();
                }
                if ui
                    .add_enabled(
                        running,
                        egui::Button::new("Stop").shortcut_text(shortcut_text(&ctx, &STOP)),
                    )
                    .clicked()
                {
                    self.commands.push(Command::StopRun);
                    ui.close();
                }
                ui.separator();
                let mut safe = self.document.settings.safe_mode;
                if ui
                    .checkbox(&mut safe, "Safe mode")
                    .on_hover_text(
                        "Ask before running blocks with side effects (writing files, sending \
                         mail, calling APIs that change things). Saved with the graph.",
                    )
                    .changed()
                {
                    self.commands.push(Command::SetSafeMode(safe));
                }
                ui.separator();
                ui.label(
                    RichText::new(format!(
                        "File blocks work in {}",
                        self.run_workspace().display()
                    ))
                    .small()
                    .color(theme::TEXT_WEAK),
                );
            });
            ui.separator();
            if ui
                .add_enabled(
                    !running,
                    egui::Button::new(RichText::new("▶ Run").color(theme::OK)),
                )
                .on_hover_text(shortcut_text(&ctx, &RUN))
                .clicked()
            {
                self.commands.push(Command::Run);
            }
            if ui
                .add_enabled(running, egui::Button::new("■ Stop"))
                .on_hover_text(shortcut_text(&ctx, &STOP))
                .clicked()
            {
                self.commands.push(Command::StopRun);
            }
            ui.separator();
            if ui
                .add_enabled(self.document.can_undo(), egui::Button::new("Undo"))
                .on_hover_text(shortcut_text(&ctx, &UNDO))
                .clicked()
            {
                self.commands.push(Command::Undo);
            }
            if ui
                .add_enabled(self.document.can_redo(), egui::Button::new("Redo"))
                .on_hover_text(shortcut_text(&ctx, &REDO))
                .clicked()
            {
                self.commands.push(Command::Redo);
            }
            ui.separator();
            let file = self
                .document
                .path
                .as_ref()
                .and_then(|p| p.file_name())
                .map_or_else(
                    || "not saved".to_owned(),
                    |n| n.to_string_lossy().into_owned(),
                );
            let dirty = if self.document.dirty { " •" } else { "" };
            ui.label(
                RichText::new(format!("{} — {file}{dirty}", self.document.name))
                    .color(theme::TEXT_WEAK),
            );
        });
    }

    fn bottom_ui(&mut self, ui: &mut egui::Ui) {
        ui.add_space(4.0);
        if let Some(notice) = &self.notice {
            ui.label(RichText::new(notice).color(theme::WARN));
        }
        ui.columns(2, |cols| {
            egui::ScrollArea::vertical()
                .id_salt("run_summary")
                .show(&mut cols[0], |ui| {
                    run_panel::run_summary_ui(ui, &mut self.run, &mut self.commands);
                    self.timeline_ui(ui);
                });
            if let Some(servers) = self.mcp_connector.connecting() {
                // Until then the servers' tool nodes show as unknown blocks.
                mcp_servers::connecting_ui(
                    &mut cols[1],
                    &format!("MCP servers: {}", servers.join(", ")),
                );
            }
            problems::problems_ui(&mut cols[1], &self.problems, &mut self.commands);
        });
    }

    fn side_ui(&mut self, ui: &mut egui::Ui) {
        let history_height = (ui.available_height() * 0.3).max(120.0);
        egui::Panel::bottom("history")
            .resizable(true)
            .default_size(history_height)
            // Not squeezed to a couple of rows under a long inspector.
            .min_size(history_height)
            .show(ui, |ui| {
                let shown = self.run.run_id.clone();
                history::history_ui(ui, &self.history, shown.as_deref(), &mut self.commands);
            });
        egui::CentralPanel::default_margins().show(ui, |ui| {
            egui::ScrollArea::vertical()
                .id_salt("inspector")
                .show(ui, |ui| {
                    if self.run_form.open {
                        run_panel::run_form_ui(ui, &mut self.run_form, &mut self.commands);
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
                    match self
                        .inspected
                        .and_then(|n| self.document.snarl.get_node(n).map(|c| (n, c)))
                    {
                        Some((id, node)) => {
                            let run = self.run.node(&node.doc.id);
                            inspector::inspector_ui(
                                ui,
                                &mut self.inspector,
                                id,
                                node,
                                run,
                                self.catalog.as_ref(),
                                self.credentials.list(),
                                &mut self.commands,
                            );
                            subgraph::child_runs_ui(ui, &self.run, &node.doc.id);
                        }
                        None => {
                            self.graph_info_ui(ui);
                            ui.label(
                                RichText::new(format!(
                                    "{} blocks. Select a block to edit it.",
                                    self.document.snarl.nodes().count()
                                ))
                                .color(theme::TEXT_WEAK),
                            );
                        }
                    }
                });
        });
    }

    /// The graph's name and description, editable; one undo step per field edit.
    fn graph_info_ui(&mut self, ui: &mut egui::Ui) {
        let mut name = self.document.name.clone();
        let mut description = self.document.description.clone();
        ui.label(RichText::new("Graph").strong());
        let name_edit = ui.add(
            egui::TextEdit::singleline(&mut name)
                .hint_text("Name")
                .desired_width(f32::INFINITY),
        );
        name_edit.widget_info(|| {
            egui::WidgetInfo::labeled(egui::WidgetType::TextEdit, true, "Graph name")
        });
        let description_edit = ui.add(
            egui::TextEdit::multiline(&mut description)
                .hint_text("What this graph does")
                .desired_rows(3)
                .desired_width(f32::INFINITY),
        );
        description_edit.widget_info(|| {
            egui::WidgetInfo::labeled(egui::WidgetType::TextEdit, true, "Graph description")
        });
        // Another field (or none) takes the keyboard: its typing is a new undo step.
        let focused = [&name_edit, &description_edit]
            .into_iter()
            .find(|r| r.has_focus())
            .map(|r| r.id);
        if focused != self.graph_info_focus {
            self.graph_info_focus = focused;
            self.graph_info_editing = false;
        }
        if name_edit.changed() || description_edit.changed() {
            self.commands
                .push(Command::SetGraphInfo { name, description });
        }
    }

    /// Zoom out, the zoom level (click: actual size), zoom in and fit, at the canvas's
    /// bottom-right corner.
    fn zoom_buttons_ui(&mut self, ctx: &egui::Context, canvas: egui::Rect) {
        let scale = self.canvas.transform.scaling;
        egui::Area::new(egui::Id::new("zoom-buttons"))
            .order(egui::Order::Middle)
            .pivot(egui::Align2::RIGHT_BOTTOM)
            .fixed_pos(canvas.right_bottom() - egui::vec2(10.0, 10.0))
            .show(ctx, |ui| {
                egui::Frame::popup(ui.style()).show(ui, |ui| {
                    ui.horizontal(|ui| {
                        if ui.button("−").on_hover_text("Zoom out").clicked() {
                            self.commands.push(Command::Zoom(1.0 / theme::ZOOM_STEP));
                        }
                        if ui
                            .button(format!("{:.0}%", scale * 100.0))
                            .on_hover_text("Actual size")
                            .clicked()
                        {
                            self.commands.push(Command::ActualSize);
                        }
                        if ui.button("+").on_hover_text("Zoom in").clicked() {
                            self.commands.push(Command::Zoom(theme::ZOOM_STEP));
                        }
                        if ui
                            .button("Fit")
                            .on_hover_text("Fit graph to view")
                            .clicked()
                        {
                            self.commands.push(Command::FitView);
                        }
                    });
                });
            });
    }

    /// The wire under a screen position, when no block is.
    fn wire_under(&self, pos: Pos2) -> Option<(egui_snarl::OutPinId, egui_snarl::InPinId)> {
        let at = self.canvas.to_graph(pos);
        if self.canvas.node_rects.values().any(|r| r.contains(at)) {
            return None;
        }
        let radius = 6.0 / self.canvas.transform.scaling.max(f32::EPSILON);
        wiring::wire_at(&self.canvas, &self.document.snarl, at, radius)
    }

    /// The picked wire drawn over, and a hovered wire's ends, types and last value.
    fn wire_hover_ui(&mut self, ctx: &egui::Context, pointer: Option<Pos2>, canvas: egui::Order) {
        let snarl = &self.document.snarl;
        if let Some((from, to)) = self.selected_wire {
            match wiring::wire_points(&self.canvas, snarl, from, to)
                .filter(|_| snarl.wires().any(|w| w == (from, to)))
            {
                Some(points) => {
                    let on_screen = points.iter().map(|p| self.canvas.transform * *p).collect();
                    ctx.layer_painter(egui::LayerId::new(
                        egui::Order::Middle,
                        egui::Id::new("picked-wire"),
                    ))
                    .add(egui::Shape::line(
                        on_screen,
                        egui::Stroke::new(4.0, theme::ACCENT.gamma_multiply(0.8)),
                    ));
                }
                None => self.selected_wire = None,
            }
        }
        let Some(pos) = pointer else { return };
        if ctx.input(|i| i.pointer.any_down())
            || ctx
                .layer_id_at(pos)
                .is_some_and(|layer| layer.order != canvas)
        {
            return;
        }
        if let Some((from, to)) = self.wire_under(pos)
            && let Some(text) = wiring::wire_summary(&self.document.snarl, &self.run, from, to)
        {
            wiring::note_at_cursor(ctx, "wire-hover", pos, &text, theme::TEXT);
        }
    }

    fn canvas_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        let rect = ui.available_rect_before_wrap();
        self.canvas.screen_rect = rect;
        if self.pending_fit || self.refits_after_layout > 0 {
            self.canvas.set_transform = Some(self.canvas.fit_transform(&self.document.snarl));
            // Before the first frame of a graph its nodes' sizes are guesses, which moves
            // the fitted view off centre (a node cut by the side panel): fit again, measured.
            let guessed = self
                .document
                .snarl
                .node_ids()
                .any(|(id, _)| !self.canvas.node_rects.contains_key(&id));
            self.refits_after_layout = if self.pending_fit && guessed {
                2
            } else {
                self.refits_after_layout.saturating_sub(1)
            };
            self.pending_fit = false;
        }
        let pointer = ctx.input(|i| i.pointer.hover_pos());
        let over_canvas = pointer.is_some_and(|p| rect.contains(p));
        if over_canvas && ctx.input(|i| i.pointer.primary_pressed()) {
            self.drag_snapshot = Some(self.document.to_doc());
        }

        // Text inside nodes is not selectable: a press on a node's title grabs the node.
        ui.style_mut().interaction.selectable_labels = false;
        let mut undo_snapshot = None;
        let canvas_id = self.canvas_id();
        let Document {
            snarl,
            name,
            description,
            settings,
            groups,
            ..
        } = &mut self.document;
        let mut viewer = Viewer::new(
            self.catalog.as_ref(),
            &self.palette,
            &self.run,
            &self.problems_by_node,
            &mut self.canvas,
            self.inspected,
            &mut undo_snapshot,
            (
                name.as_str(),
                description.as_str(),
                &*settings,
                groups.as_slice(),
            ),
            &mut self.commands,
        );
        SnarlWidget::new()
            .id(canvas_id)
            .style(theme::snarl_style())
            .show(snarl, &mut viewer, ui);

        if let Some(snapshot) = undo_snapshot {
            self.document.push_undo(snapshot);
            self.drag_snapshot = None;
        }
        // A right-clicked wire is picked and offers Disconnect.
        if let Some((from, to)) = self.canvas.wire_menu_request.take()
            && let Some(at) = pointer
        {
            self.selected_wire = Some((from, to));
            self.wire_menu = Some(wire_menu::WireMenu::new(from, to, at));
        }
        if let Some(reason) =
            self.wire_drag
                .update(&ctx, &self.canvas, &self.document.snarl, pointer)
        {
            self.notice = Some(format!("Connection refused: {reason}"));
        }
        if ctx.input(|i| i.pointer.primary_released())
            && let Some(before) = self.drag_snapshot.take()
        {
            let after = self.document.to_doc();
            let moved = before.nodes.len() == after.nodes.len()
                && before
                    .nodes
                    .iter()
                    .zip(&after.nodes)
                    .any(|(a, b)| a.position != b.position);
            if moved {
                self.document.push_undo(before);
            }
        }

        self.zoom_buttons_ui(&ctx, rect);
        if !groups::group_titles_ui(
            &ctx,
            &self.canvas,
            &self.document.groups,
            &mut self.commands,
        ) {
            self.group_title_editing = None;
        }
        if let Some(view) = minimap::minimap_ui(&ctx, rect, &self.canvas, &self.document.snarl) {
            self.canvas.set_transform = Some(view);
        }

        // A block dropped from the palette.
        if egui::DragAndDrop::has_payload_of_type::<PaletteDrag>(&ctx)
            && ctx.input(|i| i.pointer.any_released())
            && over_canvas
            && let Some(payload) = egui::DragAndDrop::take_payload::<PaletteDrag>(&ctx)
            && let Some(pos) = pointer
        {
            self.commands.push(Command::AddBlock {
                kind: payload.0.clone(),
                pos: Some(self.canvas.to_graph(pos)),
            });
        }

        // A plain click on a node shows it in the inspector; on empty canvas, the graph.
        let canvas_layer = ui.layer_id().order;
        // Canvas menus open where the pointer was right-clicked or a wire was dropped.
        if let Some(pos) = pointer.filter(|_| over_canvas)
            && ctx.input(|i| i.pointer.secondary_clicked() || i.pointer.primary_released())
            && ctx
                .layer_id_at(pos)
                .is_none_or(|layer| layer.order == canvas_layer)
        {
            self.canvas.menu_origin = Some(self.canvas.to_graph(pos));
        }
        if let Some(pos) = pointer.filter(|_| over_canvas)
            && ctx.input(|i| i.pointer.primary_clicked() && i.modifiers.is_none())
            && ctx
                .layer_id_at(pos)
                .is_none_or(|layer| layer.order == canvas_layer)
        {
            let hit = self.node_at(self.canvas.to_graph(pos));
            // A plain click replaces the selection: the clicked node alone, a wire, or
            // nothing.
            self.clear_selection(&ctx);
            self.inspected = hit;
            self.selected_wire = if hit.is_none() {
                self.wire_under(pos)
            } else {
                None
            };
        }
        // A double-click on a node that calls a graph file opens that file.
        if let Some(pos) = pointer.filter(|_| over_canvas)
            && ctx.input(|i| {
                i.pointer
                    .button_double_clicked(egui::PointerButton::Primary)
            })
            && ctx
                .layer_id_at(pos)
                .is_none_or(|layer| layer.order == canvas_layer)
            && let Some(hit) = self.node_at(self.canvas.to_graph(pos))
            && let Some(node) = self.document.snarl.get_node(hit)
            && let Some(child) = subgraph::child_file(&node.doc, self.graph_file.as_deref())
        {
            match child {
                Ok(path) => self.commands.push(Command::Open(path)),
                Err(message) => self.notice = Some(message),
            }
        }
        self.wire_hover_ui(&ctx, pointer.filter(|_| over_canvas), canvas_layer);

        let selected = egui_snarl::ui::get_selected_nodes(self.canvas_id(), &ctx);
        if selected != self.last_selection {
            if let [one] = selected.as_slice() {
                self.inspected = Some(*one);
            }
            self.last_selection = selected;
        }
    }

    /// The document as a run records it: `graph.call` paths absolute, so that the run can
    /// be resumed or approved from anywhere.
    fn runnable_doc(&self) -> GraphDoc {
        let mut doc = agentloom_blocks::graph_call::with_absolute_paths(
            self.document.to_doc(),
            self.graph_file.as_deref(),
        );
        // An untrusted graph always runs in safe mode: every side effect asks first.
        doc.settings.safe_mode |= self.untrusted.is_some();
        doc
    }

    /// The topmost node at graph position `at`.
    fn node_at(&self, at: Pos2) -> Option<egui_snarl::NodeId> {
        self.canvas
            .node_rects
            .iter()
            .filter(|(node, rect)| {
                rect.contains(at) && self.document.snarl.get_node(**node).is_some()
            })
            .map(|(node, _)| *node)
            .max_by_key(|node| node.0)
    }

    /// "Save changes?" before the window closes or another graph replaces this one.
    fn close_prompt_ui(&mut self, ctx: &egui::Context) {
        let (save, discard) = if self.close_prompt {
            (Command::SaveAndClose, Command::DiscardAndClose)
        } else if self.discard_prompt.is_some() {
            (Command::SaveAndContinue, Command::DiscardAndContinue)
        } else {
            return;
        };
        let response = egui::Modal::new(egui::Id::new("close_prompt")).show(ctx, |ui| {
            ui.heading("Save changes?");
            ui.label(format!(
                "“{}” has changes that are not saved.",
                self.document.name
            ));
            ui.horizontal(|ui| {
                if ui.button("Save").clicked() {
                    self.commands.push(save);
                }
                if ui.button("Don't save").clicked() {
                    self.commands.push(discard);
                }
                if ui.button("Cancel").clicked() {
                    self.commands.push(Command::CancelClose);
                }
            });
        });
        // Escape or a click beside the prompt keeps the window open.
        if response.should_close() {
            self.commands.push(Command::CancelClose);
        }
    }

    /// Checks the document again if it changed.
    fn revalidate(&mut self) {
        if self.problems_revision == self.document.revision {
            return;
        }
        self.problems_revision = self.document.revision;
        let doc = self.document.to_doc();
        self.problems = self.mcp_problems.clone();
        if let Err(mut problems) = validate(&doc, self.catalog.as_ref()) {
            if self.untrusted.is_some() {
                crate::trust::drop_offline_tool_nodes(&mut problems, &doc);
            }
            self.problems.extend(problems);
        }
        self.problems_by_node.clear();
        for problem in &self.problems {
            if let Some(node) = &problem.node {
                self.problems_by_node
                    .entry(node.clone())
                    .or_default()
                    .push(problem.message.clone());
            }
        }
        if self.document.dirty && self.data.is_some() {
            self.autosave_due
                .get_or_insert_with(|| Instant::now() + self.autosave_delay);
        }
    }

    fn autosave_tick(&mut self, ctx: &egui::Context) {
        let Some(due) = self.autosave_due else { return };
        let now = Instant::now();
        if now < due {
            ctx.request_repaint_after(due - now);
            return;
        }
        self.autosave_due = None;
        if let Some(data) = &self.data
            && self.document.dirty
            && let Err(err) = data.autosave(&self.document.to_doc(), self.document.path.as_deref())
        {
            self.notice = Some(format!("Autosave failed: {err}"));
        }
    }

    fn refresh_history(&mut self) {
        if let Some(store) = &self.store {
            match store.list_runs(history::HISTORY_LIMIT) {
                Ok(runs) => self.history = runs,
                Err(err) => self.notice = Some(err.to_string()),
            }
        }
    }

    fn view_center(&self) -> Pos2 {
        let view = self.canvas.viewport();
        if view.is_finite() && view.width() > 0.0 {
            view.center() - theme::NODE_SIZE_GUESS / 2.0
        } else {
            Pos2::new(100.0, 100.0)
        }
    }

    /// Whether `command`, which replaces the graph, may go ahead now. With unsaved changes
    /// it waits for the answer to "save changes?" instead.
    fn may_discard(&mut self, command: &Command) -> bool {
        if !self.document.dirty {
            return true;
        }
        self.discard_prompt = Some(command.clone());
        false
    }

    /// Starts connecting to the MCP servers of `doc` (in the background) when they are not
    /// the ones whose tools the catalog holds; without servers the catalog changes at once.
    fn connect_mcp(&mut self, doc: &GraphDoc) {
        let store = self.credentials.store();
        let trusted = self.untrusted.is_none();
        let ready = self
            .mcp_connector
            .connect(doc, self.graph_file.as_deref(), trusted, || match store {
                Some(store) => Arc::new(agentloom_engine::KeychainSecrets::new(store)),
                None => Arc::new(agentloom_engine::EnvSecrets),
            });
        if let Some(connected) = ready {
            self.use_catalog(connected);
        }
    }

    /// Once connected, the servers' tools are blocks (in the palette, for validation and
    /// runs), their nodes get their ports, and unreachable servers are problems.
    fn take_mcp_connection(&mut self) {
        let Some(connected) = self.mcp_connector.poll() else {
            return;
        };
        self.use_catalog(connected);
        // Tool nodes take their ports from the new catalog (their wires were kept meanwhile).
        let doc = self.document.to_doc();
        let catalog = self.catalog.clone();
        self.document.reload(&doc, catalog.as_ref());
    }

    fn use_catalog(&mut self, connected: mcp_servers::Connected) {
        self.mcp_problems = connected.problems;
        self.catalog = Arc::new(connected.catalog);
        self.palette = palette::entries(self.catalog.as_ref());
        self.executor = self.executor.clone().with_catalog(self.catalog.clone());
        // Problems are recomputed on the next frame.
        self.problems_revision = u64::MAX;
    }

    fn edit_mcp_servers(&mut self, edit: mcp_servers::McpEdit) {
        let mut doc = self.document.to_doc();
        match edit {
            mcp_servers::McpEdit::Add(name, server) => {
                doc.mcp_servers.insert(name, server);
            }
            mcp_servers::McpEdit::Remove(name) => {
                doc.mcp_servers.remove(&name);
            }
        }
        // Still untrusted, the banner asks again with what trusting now allows.
        if let Some(untrusted) = &mut self.untrusted {
            untrusted.needs = crate::trust::needs_of(&doc, Some(&untrusted.file));
            untrusted.offline = false;
        }
        self.connect_mcp(&doc);
        // One undo step.
        let catalog = self.catalog.clone();
        self.document.replace(&doc, catalog.as_ref());
        self.document.touch();
    }

    /// Records trust in the graph file at `path` as it is now (for this session only when
    /// there is no data directory); returns whether the open graph was untrusted.
    fn trust_file(&mut self, path: &Path) -> bool {
        if let Some(store) = &self.trust_store
            && let Err(err) = crate::trust::fingerprint(path).and_then(|print| store.trust(print))
        {
            self.notice = Some(format!("Trusted for this session only: {err}"));
        }
        let was_untrusted = self.untrusted.take().is_some();
        self.secrets_follow_trust();
        was_untrusted
    }

    /// Trust and connect: the open file is trusted, its servers connected, its calls free.
    fn trust_and_connect(&mut self) {
        let Some(file) = self.untrusted.as_ref().map(|u| u.file.clone()) else {
            return;
        };
        self.trust_file(&file);
        let doc = self.document.to_doc();
        self.connect_mcp(&doc);
        // `graph.call` nodes may reach outside the folder now.
        let catalog = self.catalog.clone();
        self.document.reload(&doc, catalog.as_ref());
    }

    /// Runs get the stored credentials only when the open graph is trusted.
    fn secrets_follow_trust(&mut self) {
        let secrets: Arc<dyn agentloom_core::SecretSource> =
            match (&self.untrusted, self.credentials.store()) {
                (Some(untrusted), _) => {
                    Arc::new(crate::trust::UntrustedSecrets::new(&untrusted.file))
                }
                (None, Some(store)) => Arc::new(agentloom_engine::KeychainSecrets::new(store)),
                (None, None) => Arc::new(agentloom_engine::EnvSecrets),
            };
        self.executor = self.executor.clone().with_secrets(secrets);
    }

    /// Makes the catalog resolve `graph.call` paths against `path`, the file of `doc`.
    /// Returns whether the file changed (the catalog follows: at once without MCP servers,
    /// else once they are connected again).
    fn follow_graph_file(&mut self, doc: &GraphDoc, path: Option<&Path>) -> bool {
        if self.graph_file.as_deref() == path {
            return false;
        }
        self.graph_file = path.map(Path::to_path_buf);
        self.connect_mcp(doc);
        true
    }

    /// Shows `doc` as a document of its own: its own undo history, its own file.
    fn open_document(&mut self, doc: &GraphDoc, path: Option<PathBuf>) {
        let graph_file = path.clone();
        self.open_document_resolving(doc, path, graph_file.as_deref());
    }

    /// [`App::open_document`], with `graph.call` paths resolved against `graph_file`.
    fn open_document_resolving(
        &mut self,
        doc: &GraphDoc,
        path: Option<PathBuf>,
        graph_file: Option<&Path>,
    ) {
        // A run of the graph being replaced is stopped, not left going unseen.
        self.run.stop();
        self.graph_file = graph_file.map(Path::to_path_buf);
        // Untitled but resolving against a file (an example's copy, a recorded run): it has
        // that file's trust only when it is that file's graph.
        let is_the_file = path.is_some()
            || graph_file
                .and_then(|file| load_graph(file).ok())
                .is_some_and(|on_disk| on_disk == *doc);
        self.untrusted = match graph_file {
            Some(file) if !is_the_file => Some(trust_banner::Untrusted::new(doc, file)),
            _ => trust_banner::Untrusted::of(self.trust_store.as_ref(), doc, graph_file),
        };
        self.secrets_follow_trust();
        self.connect_mcp(doc);
        self.document = Document::from_doc(doc, self.catalog.as_ref(), path);
        self.drag_snapshot = None;
        self.autosave_due = None;
        self.after_document_change();
    }

    fn after_document_change(&mut self) {
        self.inspected = None;
        self.inspector.clear();
        self.run = RunView::default();
        self.canvas.node_rects.clear();
        self.pending_fit = true;
    }

    fn save_to(&mut self, path: &Path) -> bool {
        let doc = self.document.to_doc();
        match save_graph(&doc, path) {
            Ok(()) => {
                self.document.mark_saved(path.to_owned());
                // Saved by its user: trusted as it is now.
                let was_untrusted = self.trust_file(path);
                let moved = self.follow_graph_file(&doc, Some(path));
                if was_untrusted && !moved {
                    self.connect_mcp(&doc);
                }
                // `graph.call` paths are relative to the file now: their ports follow it.
                if moved || was_untrusted {
                    let catalog = self.catalog.clone();
                    for node in self.document.snarl.nodes_mut() {
                        node.refresh_ports(catalog.as_ref());
                    }
                }
                if let Some(data) = &self.data {
                    data.clear_autosave();
                    data.remember_last(path);
                }
                self.autosave_due = None;
                self.notice = Some(format!("Saved {}", path.display()));
                true
            }
            Err(err) => {
                self.notice = Some(err.to_string());
                false
            }
        }
    }

    /// Carries out one command.
    #[allow(clippy::too_many_lines, reason = "one arm per command")]
    pub fn apply(&mut self, command: Command, ctx: &egui::Context) {
        let catalog = self.catalog.clone();
        let catalog = catalog.as_ref();
        match command {
            Command::New => {
                if self.may_discard(&Command::New) {
                    self.open_document(&GraphDoc::new("Untitled"), None);
                }
            }
            Command::OpenDialog => self.file_dialog(PathPurpose::Open, ctx),
            Command::ShowExamples => self.examples_open = true,
            Command::OpenExample(index) => {
                if let Some(doc) = examples::example(index)
                    && self.may_discard(&Command::OpenExample(index))
                {
                    self.examples_open = false;
                    // Untitled, but an example's `graph.call` paths resolve against a copy
                    // of the examples in the data directory.
                    let copy = self.data.as_ref().and_then(|data| {
                        examples::write_examples(&data.dir.join("examples"), index)
                            .map_err(|e| tracing::warn!(error = %e, "cannot write the examples"))
                            .ok()
                    });
                    self.open_document_resolving(&doc, None, copy.as_deref());
                    self.notice = None;
                }
            }
            Command::Open(path) => {
                if !self.may_discard(&Command::Open(path.clone())) {
                    return;
                }
                match load_graph(&path) {
                    Ok(doc) => {
                        if let Some(data) = &self.data {
                            data.remember_last(&path);
                        }
                        self.open_document(&doc, Some(path));
                        self.notice = None;
                    }
                    Err(err) => self.notice = Some(err.to_string()),
                }
            }
            Command::Save => match self.document.path.clone() {
                Some(path) => {
                    self.save_to(&path);
                }
                None => self.apply(Command::SaveAsDialog, ctx),
            },
            Command::SaveAsDialog => self.file_dialog(PathPurpose::SaveAs, ctx),
            Command::SaveAs(path) => {
                self.save_to(&path);
            }
            Command::ExportDialog => self.file_dialog(PathPurpose::Export, ctx),
            Command::Export(path) => match save_graph(&self.document.to_doc(), &path) {
                Ok(()) => self.notice = Some(format!("Exported {}", path.display())),
                Err(err) => self.notice = Some(err.to_string()),
            },
            Command::ImportDialog => self.file_dialog(PathPurpose::Import, ctx),
            Command::Import(path) => match load_graph(&path) {
                Ok(doc) => {
                    // An edit of this document (its file stays): undo brings the old graph back.
                    self.run.stop();
                    self.document.replace(&doc, catalog);
                    self.after_document_change();
                    self.notice = Some(format!("Imported {}", path.display()));
                }
                Err(err) => self.notice = Some(err.to_string()),
            },
            Command::Undo => {
                let wanted = self
                    .document
                    .next_undo()
                    .filter(|d| d.mcp_servers != self.document.mcp_servers)
                    .cloned();
                if self.document.undo(catalog) {
                    self.after_structure_change();
                }
                // Undoing an MCP-server change reconnects (the palette follows).
                if let Some(wanted) = wanted {
                    self.connect_mcp(&wanted);
                }
            }
            Command::Redo => {
                let wanted = self
                    .document
                    .next_redo()
                    .filter(|d| d.mcp_servers != self.document.mcp_servers)
                    .cloned();
                if self.document.redo(catalog) {
                    self.after_structure_change();
                }
                if let Some(wanted) = wanted {
                    self.connect_mcp(&wanted);
                }
            }
            Command::AddBlock { kind, pos } => {
                // A block added by a click (not dropped at a place) must not hide another.
                let pos = pos.unwrap_or_else(|| {
                    self.canvas
                        .free_spot(&self.document.snarl, self.view_center())
                });
                let Some(entry) = self.palette.iter().find(|e| e.kind == kind) else {
                    self.notice = Some(format!("There is no block `{kind}`."));
                    return;
                };
                let doc = self.document.to_doc();
                if let Some(node) = palette::new_node(entry, &doc, catalog) {
                    let id = self.document.add_node(node, pos, catalog);
                    self.inspected = Some(id);
                }
            }
            Command::Connect { from, to } => {
                match self
                    .document
                    .connect_named((&from.0, &from.1), (&to.0, &to.1))
                {
                    Ok(()) => self.notice = None,
                    Err(err) => self.notice = Some(format!("Connection refused: {err}")),
                }
            }
            Command::SetConfig { node, field, value } => {
                self.document.set_config(node, &field, value, catalog, true);
            }
            Command::SetLabel { node, label } => {
                self.document.checkpoint();
                self.document
                    .update_node(node, catalog, |doc| doc.label = label);
            }
            Command::SetCredential { node, name } => {
                self.document.checkpoint();
                self.document
                    .update_node(node, catalog, |doc| doc.credential = name);
            }
            Command::DeleteNodes(nodes) => {
                self.document.remove_nodes(&nodes);
                if self.inspected.is_some_and(|n| nodes.contains(&n)) {
                    self.inspected = None;
                }
            }
            Command::Disconnect(pin) => self.document.disconnect(pin),
            Command::GroupSelection(nodes) => {
                let rects: Vec<egui::Rect> = nodes
                    .iter()
                    .filter_map(|n| {
                        let pos = self.document.snarl.get_node_info(*n)?.pos;
                        let size = self
                            .canvas
                            .node_rects
                            .get(n)
                            .map_or(theme::NODE_SIZE_GUESS, |r| r.size());
                        Some(egui::Rect::from_min_size(pos, size))
                    })
                    .collect();
                let id = groups::fresh_group_id(&self.document.groups);
                let at = self.view_center();
                self.document.checkpoint();
                self.document
                    .groups
                    .push(groups::group_around(id, &rects, at));
            }
            Command::MoveGroup { id, delta } => {
                self.document
                    .move_group(&id, delta, &self.canvas.node_rects);
            }
            Command::SetGroupTitle { id, title } => {
                // Typing a title is one undo step, not one per key.
                if self.group_title_editing.as_deref() == Some(id.as_str()) {
                    self.document.touch();
                } else {
                    self.document.checkpoint();
                    self.group_title_editing = Some(id.clone());
                }
                if let Some(group) = self.document.groups.iter_mut().find(|g| g.id == id) {
                    group.title = title;
                }
            }
            Command::RemoveGroup(id) => {
                if self.document.groups.iter().any(|g| g.id == id) {
                    self.document.checkpoint();
                    self.document.groups.retain(|g| g.id != id);
                }
            }
            Command::DeleteWire(from, to) => {
                if self.document.snarl.wires().any(|w| w == (from, to)) {
                    self.document.checkpoint();
                    self.document.snarl.disconnect(from, to);
                }
                self.selected_wire = None;
            }
            Command::DuplicateNodes(nodes) => {
                let clip = self.document.copy(&nodes);
                let offset = self.paste_offset(&clip, ctx);
                let added = self.document.paste(&clip, offset, catalog);
                if let Some(first) = added.first() {
                    self.inspected = Some(*first);
                }
            }
            Command::Copy(nodes) => {
                if !nodes.is_empty() {
                    let clip = self.document.copy(&nodes);
                    ctx.copy_text(clip.to_json_string());
                    self.clipboard = Some(clip);
                }
            }
            Command::Paste => {
                if let Some(clip) = self.clipboard.clone() {
                    let offset = self.paste_offset(&clip, ctx);
                    let added = self.document.paste(&clip, offset, catalog);
                    if let Some(first) = added.first() {
                        self.inspected = Some(*first);
                    }
                }
            }
            Command::Inspect(node) => self.inspected = Some(node),
            Command::SetGraphInfo { name, description } => {
                // Typing in the field is one undo step, not one per key.
                if self.graph_info_editing {
                    self.document.touch();
                } else {
                    self.document.checkpoint();
                    self.graph_info_editing = true;
                }
                self.document.name = name;
                self.document.description = description;
            }
            Command::QuickAdd(screen) => {
                self.quick_add = Some(quick_add::QuickAdd::new(
                    self.canvas.to_graph(screen),
                    screen,
                ));
            }
            Command::ClearSelection => {
                self.clear_selection(ctx);
                self.inspected = None;
            }
            Command::InspectById(id) => {
                if let Some(node) = self.document.node_by_id(&id) {
                    self.inspected = Some(node);
                    if let Some(info) = self.document.snarl.get_node_info(node) {
                        let view = self.canvas.viewport();
                        if !view.contains(info.pos) {
                            let scale = self.canvas.transform.scaling;
                            let target = info.pos + theme::NODE_SIZE_GUESS / 2.0;
                            self.canvas.set_transform = Some(egui::emath::TSTransform::new(
                                self.canvas.screen_rect.center().to_vec2()
                                    - target.to_vec2() * scale,
                                scale,
                            ));
                        }
                    }
                }
            }
            Command::FitView => self.pending_fit = true,
            Command::Zoom(factor) => {
                self.canvas.set_transform = Some(self.canvas.zoom_transform(factor));
            }
            Command::ActualSize => {
                self.canvas.set_transform = Some(self.canvas.actual_size_transform())
            }
            Command::Run => self.press_run(ctx),
            Command::StartRun => self.start_run(ctx),
            Command::CloseRunForm => self.run_form.open = false,
            Command::StopRun => self.run.stop(),
            Command::Approve(node, decision) => self.decide_approval(&node, decision, ctx),
            Command::RunFromHere(node) => self.run_from_here(node, ctx),
            Command::PinOutputs(node, pin) => self.pin_outputs(node, pin),
            Command::SetPinned { node, outputs } => {
                self.document.checkpoint();
                self.document
                    .update_node(node, catalog, |doc| doc.pinned = Some(outputs));
            }
            Command::SetSafeMode(on) => {
                if self.document.settings.safe_mode != on {
                    self.document.checkpoint();
                    self.document.settings.safe_mode = on;
                }
            }
            Command::RefreshHistory => self.refresh_history(),
            Command::OpenRun(id) => self.open_run(&id),
            Command::ReplayRun(id) => self.replay_run(&id, ctx),
            Command::OpenCredentials => self.credentials.show_window(),
            Command::OpenMcpServers => self.mcp_window.open = true,
            Command::EditMcpServers(edit) => self.edit_mcp_servers(edit),
            Command::TrustAndConnect => self.trust_and_connect(),
            Command::KeepOffline => {
                if let Some(untrusted) = &mut self.untrusted {
                    untrusted.offline = true;
                }
            }
            // The same close request as the window's close button: the prompt catches it.
            Command::Quit => ctx.send_viewport_cmd(egui::ViewportCommand::Close),
            Command::Notify(text) => self.notice = Some(text),
            Command::DiscardAndClose => {
                if let Some(data) = &self.data {
                    data.clear_autosave();
                }
                self.document.dirty = false;
                self.allow_close = true;
                self.close_prompt = false;
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            }
            Command::SaveAndClose => {
                self.apply(Command::Save, ctx);
                self.close_prompt = false;
                if !self.document.dirty {
                    self.allow_close = true;
                    ctx.send_viewport_cmd(egui::ViewportCommand::Close);
                }
            }
            Command::CancelClose => {
                self.close_prompt = false;
                self.discard_prompt = None;
            }
            Command::DiscardAndContinue => {
                if let Some(next) = self.discard_prompt.take() {
                    if let Some(data) = &self.data {
                        data.clear_autosave();
                    }
                    self.document.dirty = false;
                    self.apply(next, ctx);
                }
            }
            Command::SaveAndContinue => {
                if let Some(next) = self.discard_prompt.take() {
                    self.apply(Command::Save, ctx);
                    // Without a file, Save asks for one first; the person goes on from there.
                    if !self.document.dirty {
                        self.apply(next, ctx);
                    }
                }
            }
        }
    }

    /// How far to move pasted blocks: to the pointer when it is over the canvas (else the
    /// middle of the view), then down until they cover no block.
    fn paste_offset(&self, clip: &GraphDoc, ctx: &egui::Context) -> egui::Vec2 {
        let mut bounds = egui::Rect::NOTHING;
        for node in &clip.nodes {
            let pos = document::canvas_pos(node.position);
            bounds = bounds.union(egui::Rect::from_min_size(pos, theme::NODE_SIZE_GUESS));
        }
        if !bounds.is_finite() {
            return egui::Vec2::ZERO;
        }
        let wanted = ctx
            .input(|i| i.pointer.hover_pos())
            .filter(|p| self.canvas.screen_rect.contains(*p))
            .map_or_else(|| self.view_center(), |p| self.canvas.to_graph(p));
        let spot = self
            .canvas
            .free_spot_sized(&self.document.snarl, wanted, bounds.size());
        spot - bounds.min
    }

    /// The directory the file blocks of a run are confined to: the one given at start, else
    /// the folder of the graph's file (a graph and the files it reads travel together), else
    /// the current directory.
    pub fn run_workspace(&self) -> PathBuf {
        self.workspace
            .clone()
            .unwrap_or_else(|| self.graph_folder())
    }

    /// The folder of the graph's file, else the current directory.
    fn graph_folder(&self) -> PathBuf {
        match self.document.path.as_deref().and_then(Path::parent) {
            Some(dir) if !dir.as_os_str().is_empty() => {
                std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
            }
            _ => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        }
    }

    /// Asks for a file with the native dialog, or with the in-app prompt where there is none.
    fn file_dialog(&mut self, purpose: PathPurpose, ctx: &egui::Context) {
        let native = *self
            .native_dialogs
            .get_or_insert_with(files::native_dialogs_available);
        let file_name = format!("{}.agentloom.json", self.document.name);
        if !native {
            let here = self.graph_folder();
            let suggested = match purpose {
                PathPurpose::Open | PathPurpose::Import => {
                    format!("{}{}", here.display(), std::path::MAIN_SEPARATOR)
                }
                PathPurpose::SaveAs | PathPurpose::Export => self
                    .document
                    .path
                    .clone()
                    .unwrap_or_else(|| here.join(&file_name))
                    .display()
                    .to_string(),
            };
            self.path_prompt = Some(path_prompt::PathPrompt::new(purpose, suggested));
            return;
        }
        let picked = match purpose {
            PathPurpose::Open | PathPurpose::Import => files::pick_open(purpose.title()),
            PathPurpose::SaveAs | PathPurpose::Export => {
                files::pick_save(purpose.title(), &file_name)
            }
        };
        if let Some(path) = picked {
            self.apply(purpose.command(path), ctx);
        }
    }

    /// Whether Open, Save As, Import and Export use the platform's file dialogs (found out on
    /// first use when not set) or the in-app path prompt.
    pub fn set_native_file_dialogs(&mut self, available: bool) {
        self.native_dialogs = Some(available);
    }

    fn after_structure_change(&mut self) {
        if self
            .inspected
            .is_some_and(|n| self.document.snarl.get_node(n).is_none())
        {
            self.inspected = None;
        }
        self.inspector.clear();
    }

    /// Validates and either opens the inputs form or starts at once.
    fn press_run(&mut self, ctx: &egui::Context) {
        if self.run.is_running() {
            return;
        }
        let doc = self.document.to_doc();
        match validate(&doc, self.catalog.as_ref()) {
            Ok(graph) => {
                let inputs = graph.interface_inputs();
                if inputs.is_empty() {
                    self.run_form.fields.clear();
                    self.start_run(ctx);
                } else {
                    self.run_form.prepare(&inputs);
                    self.run_form.open = true;
                }
            }
            Err(problems) => {
                self.notice = Some(format!(
                    "The graph cannot run: {} problem(s). {}",
                    problems.len(),
                    problems
                        .first()
                        .map(|p| p.message.as_str())
                        .unwrap_or_default()
                ));
            }
        }
    }

    /// Starts the run with the inputs typed in the form.
    fn start_run(&mut self, ctx: &egui::Context) {
        self.run_form.open = false;
        let doc = self.runnable_doc();
        let graph = match validate(&doc, self.catalog.as_ref()) {
            Ok(graph) => graph,
            Err(problems) => {
                self.notice = Some(format!(
                    "The graph cannot run: {} problem(s).",
                    problems.len()
                ));
                return;
            }
        };
        let mut inputs = agentloom_core::ValueMap::new();
        for run_panel::RunFormField {
            input: RunInput { name, ty, .. },
            text,
        } in &self.run_form.fields
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
                    self.run_form.open = true;
                    return;
                }
            }
        }
        let Some(runtime) = &self.runtime else {
            self.notice =
                Some("Runs are not available: the run threads could not start.".to_owned());
            return;
        };
        let executor = self.executor.clone().with_workspace(self.run_workspace());
        self.run.graph_files = self.catalog.graph_files().cloned();
        self.run.untrusted_file = self.untrusted.as_ref().map(|u| u.file.clone());
        match self
            .run
            .start(runtime, &executor, graph, inputs, self.store.as_ref(), ctx)
        {
            Ok(()) => self.notice = None,
            Err(err) => self.notice = Some(format!("Cannot start the run: {err}")),
        }
    }

    fn open_run(&mut self, id: &str) {
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

    /// Asks the window to close; with unsaved changes a prompt shows first.
    fn handle_close(&mut self, ctx: &egui::Context) {
        if ctx.input(|i| i.viewport().close_requested()) && !self.allow_close {
            if self.document.dirty {
                ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
                self.close_prompt = true;
            } else if let Some(data) = &self.data {
                data.clear_autosave();
            }
        }
    }
}

/// The eframe wrapper.
struct DesktopApp {
    app: App,
    started: Instant,
    logged_first_frame: bool,
}

impl eframe::App for DesktopApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.show(ui);
        if !self.logged_first_frame {
            self.logged_first_frame = true;
            tracing::info!(
                elapsed_ms = self.started.elapsed().as_millis(),
                nodes = self.app.document.snarl.nodes().count(),
                "first frame"
            );
        }
    }

    fn on_exit(&mut self, _gl: Option<&eframe::glow::Context>) {
        self.app.run.stop();
    }
}

/// Opens the desktop window on `graph` (or the last/example graph), recording runs in `db`
/// (or the per-user run log).
pub fn run_native(
    path: Option<PathBuf>,
    db: Option<PathBuf>,
    workspace: Option<PathBuf>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut paths = AppPaths::user_default(db);
    paths.workspace = workspace;
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("Agentloom")
            .with_inner_size([1280.0, 800.0])
            .with_min_inner_size([640.0, 400.0])
            .with_drag_and_drop(true),
        renderer: eframe::Renderer::Glow,
        ..eframe::NativeOptions::default()
    };
    eframe::run_native(
        "Agentloom",
        options,
        Box::new(move |_cc| {
            let app = App::startup(path, &paths);
            Ok(Box::new(DesktopApp {
                app,
                started,
                logged_first_frame: false,
            }))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}
