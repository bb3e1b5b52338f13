//! The desktop app: a node-graph canvas with a block palette, an inspector, a run panel,
//! the run history and a problems list.
//!
//! All UI is behind [`App::show`], shared by the eframe window ([`run_native`]) and the
//! egui_kittest tests. The UI never changes the app directly: panels, windows, menus and
//! the canvas push [`Command`]s, which [`App::apply`] carries out after the frame's UI.
//!
//! Rooms: `command` (what can be asked, with menu labels and shortcuts), `menus` (menu bar
//! and shortcuts), `command_handling` (`apply`, the only code that edits the [`Document`]),
//! `logic` (work that goes on while the window is hidden), `run_control` (run, stop, run
//! from here, resume), `run` (the run shown), `debugging` (the debugger driven),
//! `canvas/`, `panels/` and `windows/`. [`App`]'s fields are few: what belongs together is
//! one struct of the room that owns it (the canvas session, the prompts, the problems…).

mod canvas;
mod command;
mod command_handling;
mod debugging;
mod document;
pub(crate) mod files;
mod logic;
mod menus;
mod native;
mod panels;
mod run;
mod run_control;
mod run_panel;
mod tasks;
pub mod theme;
mod windows;

use canvas::{groups, quick_add, wire_menu, wiring};
// The run view and its panel reach these through the app.
use panels::{
    approval_panel, debug_command, debugger, graph_info, history, inspector, json_tree, palette,
    problems, run_timeline, subgraph, trust_banner,
};
pub(crate) use windows::examples;
use windows::{credentials, evaluations, mcp_servers, path_prompt};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_core::{BlockCatalog, GraphDoc, Problem};
use agentloom_engine::{RunRow, RunStatus, RunStore};
use egui::RichText;
use egui_snarl::NodeId;

pub use command::Command;
pub use document::{ConnectError, Document};
pub use examples::EXAMPLES;
pub use files::{load_graph, save_graph};
pub use native::run_native;

use canvas::CanvasState;
use canvas::model::PaletteEntry;
use canvas::session::CanvasSession;
use inspector::InspectorState;
use panels::graph_info::GraphInfoTyping;
use panels::problems::Problems;
use panels::run_list::RunList;
use run::RunView;
use run_panel::{RunForm, RunSetup};
use windows::Windows;
use windows::prompts::Prompts;

/// The example graph shown on first launch.
pub const EXAMPLE_GRAPH: &str = include_str!("../../assets/examples/hello.agentloom.json");

/// How long unsaved changes wait before they are autosaved.
const AUTOSAVE_DELAY: Duration = Duration::from_secs(3);
/// How long quitting waits for a live run to stop and be recorded.
const QUIT_WAIT: Duration = Duration::from_secs(5);

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

/// Marks of the frames drawn.
#[derive(Default)]
struct Frames {
    /// When the first frame was drawn.
    first: Option<Instant>,
    /// [`App::logic`] ran for the coming frame.
    logic_ran: bool,
}

/// The app.
pub struct App {
    catalog: Arc<Registry>,
    /// The graph file the catalog's `graph.call` resolves relative paths against.
    graph_file: Option<PathBuf>,
    palette: Vec<PaletteEntry>,
    pub document: Document,
    canvas: CanvasState,
    /// The node inspected, the selection, wires picked or dragged, the copied blocks.
    session: CanvasSession,
    inspector: InspectorState,
    credentials: credentials::Credentials,
    mcp_connector: mcp_servers::McpConnector,
    /// Where trust in graph files is recorded (`None`: trust lasts for this session).
    trust_store: Option<agentloom_runner::trust::TrustStore>,
    /// The open graph's file when it is not trusted.
    untrusted: Option<trust_banner::Untrusted>,
    commands: Vec<Command>,
    search: String,
    /// The run shown on the canvas.
    pub run: RunView,
    /// The run form and the workspace given at start.
    run_setup: RunSetup,
    runtime: Option<tokio::runtime::Runtime>,
    /// Work off the window's thread, on `runtime`.
    tasks: tasks::BackgroundTasks,
    /// Where a trusted run's credentials come from (`App::secrets_follow_trust`); an
    /// untrusted file's runs get none whatever this says.
    run_credentials: agentloom_runner::Credentials,
    store: Option<Arc<RunStore>>,
    /// The runs the history lists.
    history: RunList,
    /// Validation problems of the current document, recomputed when it changes, and the
    /// MCP servers that could not be reached.
    problems: Problems,
    /// Last message for the status bar.
    pub notice: Option<String>,
    data: Option<files::DataFiles>,
    autosave: files::AutosaveTimer,
    /// "Save changes?", the examples, quick add, which file dialogs.
    prompts: Prompts,
    /// The graph's name or description being typed.
    graph_info: GraphInfoTyping,
    /// The in-app file prompt used where they cannot.
    path_prompt: Option<path_prompt::PathPrompt>,
    pub evaluations: evaluations::EvaluationsPanel,
    timeline: run_timeline::RunTimeline,
    /// The Knowledge window (View → Knowledge).
    pub knowledge: windows::knowledge::KnowledgeWindow,
    /// The MCP servers and assistant-editing windows.
    windows: Windows,
    /// Breakpoints, a run paused at one, forks of past runs.
    debugger: debugger::Debugger,
    /// When the first frame was drawn; whether [`App::logic`] ran for the coming one.
    frames: Frames,
}

impl App {
    /// An app showing `doc` (from `path`, if it came from a file).
    pub fn new(doc: &GraphDoc, path: Option<PathBuf>, paths: &AppPaths) -> Self {
        let trust_store = paths
            .data_dir
            .as_deref()
            .map(agentloom_runner::trust::TrustStore::in_dir);
        let untrusted = trust_banner::Untrusted::of(trust_store.as_ref(), doc, path.as_deref());
        let catalog = Arc::new(agentloom_runner::catalog::for_editing(
            path.as_deref(),
            &agentloom_runner::Trust::of(untrusted.is_none(), path.as_deref()),
        ));
        let palette = palette::entries(catalog.as_ref());
        let document = Document::from_doc(doc, catalog.as_ref(), path.clone());
        // Its credentials follow the graph's trust (`App::secrets_follow_trust`).
        let credentials = credentials::Credentials::new(paths.credentials_dir.as_deref());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("agentloom-run")
            .enable_all()
            .build()
            .map_err(|e| tracing::error!(error = %e, "cannot start the run threads"))
            .ok();
        let mut tasks = tasks::BackgroundTasks::on(runtime.as_ref().map(|r| r.handle().clone()));
        // Whether file dialogs can appear is a D-Bus round trip on Linux: asked now, in the
        // background, so no dialog waits for it.
        let finding_dialogs = files::find_native_dialogs(&mut tasks);
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
            canvas: CanvasState::with_prefs_in(paths.data_dir.as_deref()),
            session: CanvasSession::default(),
            inspector: InspectorState::default(),
            credentials,
            mcp_connector: mcp_servers::McpConnector::for_graph_file(
                path.clone(),
                untrusted.is_none(),
            ),
            trust_store,
            untrusted,
            graph_file: path,
            commands: Vec::new(),
            search: String::new(),
            run: RunView::default(),
            run_setup: RunSetup {
                form: RunForm::default(),
                workspace: paths.workspace.clone(),
            },
            runtime,
            tasks,
            run_credentials: agentloom_runner::Credentials::Default,
            store,
            history: RunList::default(),
            problems: Problems::default(),
            notice,
            prompts: Prompts {
                finding_dialogs,
                ..Prompts::default()
            },
            graph_info: GraphInfoTyping::default(),
            data: paths.data_dir.clone().map(files::DataFiles::new),
            autosave: files::AutosaveTimer {
                due: None,
                delay: AUTOSAVE_DELAY,
            },
            path_prompt: None,
            evaluations: evaluations::EvaluationsPanel::default(),
            timeline: run_timeline::RunTimeline::default(),
            debugger: debugger::Debugger::kept_in(paths.data_dir.as_deref()),
            knowledge: windows::knowledge::KnowledgeWindow::default(),
            windows: Windows::default(),
            frames: Frames::default(),
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
        // The data files that recovered an autosave hold it now: this window's from here on.
        if data.is_some() {
            app.data = data;
        }
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
        &self.problems.list
    }

    /// The runs listed in the history panel.
    pub fn history(&self) -> &[RunRow] {
        &self.history.rows
    }

    /// The node shown in the inspector, by document id.
    pub fn inspected_id(&self) -> Option<&str> {
        self.session
            .inspected
            .and_then(|n| self.document.snarl.get_node(n))
            .map(|n| n.doc.id.as_str())
    }

    /// What the window does as it closes, however it is closed (File → Quit, Ctrl+Q, the
    /// window's close button): stops a live run, leaving one that waits for an approval
    /// `waiting` and resumable, and leaves the run log one
    /// self-contained file (its newest pages are in the `-wal` file until then), so the
    /// user can copy or attach `runs.sqlite3` alone.
    pub fn close(&mut self) {
        // A run waiting for a decision stays waiting, whichever way the app is left.
        self.debugger.leave();
        self.run.leave(QUIT_WAIT);
        if let Some(store) = &self.store
            && let Err(err) = store.make_self_contained()
        {
            tracing::warn!("{err}");
        }
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
        self.autosave.delay = delay;
        self
    }

    /// Asks the window to close; with unsaved changes "save changes?" shows first.
    fn handle_close(&mut self, ctx: &egui::Context) {
        if ctx.input(|i| i.viewport().close_requested()) && !self.prompts.allow_close {
            if self.document.dirty {
                ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
                self.prompts.close = true;
            } else if let Some(data) = &self.data {
                data.clear_autosave();
            }
        }
    }

    /// Whether the "save changes?" prompt is showing.
    /// The bars of the timeline last drawn.
    pub fn timeline_bars(&self) -> Vec<run_timeline::Bar> {
        self.timeline.bars().to_vec()
    }

    pub fn close_prompt_open(&self) -> bool {
        self.prompts.close || self.prompts.discard.is_some()
    }
}

impl App {
    /// The Evaluations window, when open; a case clicked opens its run on the canvas, and
    /// "Run evaluation" starts one in the background.
    fn evaluations_window_ui(&mut self, ctx: &egui::Context) {
        let env = evaluations::EvaluationEnv {
            graph_file: self.document.path.as_deref(),
            store: self.store.as_ref(),
            workspace: self.run_workspace(),
            shown_run: self.run.run_id.as_deref(),
            trusted: self.untrusted.is_none(),
            runs: &self.history.rows,
        };
        if let Some(evaluations::EvaluationAction::OpenRun(run_id)) =
            self.evaluations.show(ctx, &env)
        {
            self.commands.push(Command::OpenRun(run_id));
        }
        self.evaluations.start_if_asked(&env, &mut self.tasks);
    }
}

/// The panels around the canvas: the run and problems below it, the inspector, history
/// and graph info beside it.
impl App {
    /// The shown run's timeline, folded under the run summary.
    fn timeline_ui(&mut self, ui: &mut egui::Ui) {
        egui::CollapsingHeader::new("Timeline")
            .default_open(false)
            .show(ui, |ui| {
                self.timeline.show(
                    ui,
                    self.store.is_some(),
                    self.run.run_id.as_deref(),
                    self.run.is_running(),
                    self.run.is_waiting(),
                    self.run.messages_taken,
                );
            });
    }

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

impl App {
    /// Draws the whole app into `ui` and carries out what the person asked for.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        if self.frames.first.is_none() {
            self.frames.first = Some(Instant::now());
            theme::apply(&ctx);
        }
        // eframe runs it before each frame; the tests' harness draws frames only.
        if !std::mem::take(&mut self.frames.logic_ran) {
            self.logic(&ctx);
        }
        self.handle_close(&ctx);
        self.debugger_frame(&ctx);
        self.shortcuts(&ctx);

        egui::Panel::top("menu").show(ui, |ui| self.menu_ui(ui));
        // A few lines of output under its head; drag its top edge for more.
        // A run paused at a breakpoint shows its values to edit there: room for them (else
        // egui's own minimum).
        let status_min = if self.debugger.paused.is_empty() {
            20.0
        } else {
            (ui.available_height() * 0.35).max(200.0)
        };
        egui::Panel::bottom("status")
            .resizable(true)
            .default_size(120.0)
            .min_size(status_min)
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
        // While the graph shown was opened from a caller: the way back.
        if !self.session.callers.is_empty() {
            egui::Panel::top("breadcrumbs").show(ui, |ui| {
                subgraph::breadcrumbs_ui(
                    ui,
                    &self.session.callers,
                    (self.document.path.as_deref(), &self.document.name),
                    &mut self.commands,
                );
            });
        }
        egui::CentralPanel::no_frame().show(ui, |ui| self.canvas_ui(ui));
        let waiting: Vec<Option<egui::Rect>> = (self.run.approvals.iter())
            .map(|prompt| self.node_screen_rect(&prompt.node))
            .collect();
        approval_panel::approvals_ui(
            &ctx,
            &mut self.run.approvals,
            &waiting,
            self.canvas.screen_rect,
            &mut self.commands,
        );
        self.debugger_windows_ui(&ctx);

        examples::examples_ui(&ctx, &mut self.prompts.examples_open, &mut self.commands);
        if let Some(menu) = &mut self.session.wire_menu
            && !wire_menu::wire_menu_ui(&ctx, menu, &mut self.commands)
        {
            self.session.wire_menu = None;
        }
        quick_add::quick_add_ui(
            &ctx,
            &mut self.prompts.quick_add,
            &self.palette,
            &mut self.commands,
        );
        path_prompt::path_prompt_ui(&ctx, &mut self.path_prompt, &mut self.commands);
        self.credentials.window_ui(&ctx);
        if let Some(edit) = self.windows.mcp.window_ui(
            &ctx,
            &self.document.mcp_servers,
            &self.problems.mcp,
            self.mcp_connector.connecting(),
        ) {
            self.commands.push(Command::EditMcpServers(edit));
        }
        self.evaluations_window_ui(&ctx);
        if self.knowledge.open {
            let env = windows::knowledge::KnowledgeEnv {
                document: &self.document,
                workspace: self.run_workspace(),
                data_dir: self.data.as_ref().map(|d| d.dir.as_path()),
                trusted: self.untrusted.is_none(),
                runtime: self.runtime.as_ref(),
                catalog: &self.catalog,
                credentials: &self.run_credentials,
            };
            self.knowledge.show(&ctx, &env);
        }
        self.assistant_edit_ui(&ctx);
        windows::close_prompt::close_prompt_ui(
            &ctx,
            &self.prompts,
            &self.document.name,
            &mut self.commands,
        );

        let commands = std::mem::take(&mut self.commands);
        for command in commands {
            self.apply(command, &ctx);
        }
        // An assistant's edits land after the person's commands of the frame.
        self.take_assistant_edits();
        self.revalidate();
        self.autosave_tick(&ctx);
    }

    /// The window and the highlight of the nodes the assistant changed.
    fn assistant_edit_ui(&mut self, ctx: &egui::Context) {
        if self.windows.assistant_edit.window_ui(ctx) {
            self.open_assistant_edit(ctx);
        }
        let rings: Vec<(egui::Rect, f32)> = (self.windows.assistant_edit.highlights().into_iter())
            .filter_map(|(id, strength)| Some((self.node_screen_rect(&id)?, strength)))
            .collect();
        windows::assistant_edit::draw_highlights(ctx, self.canvas.screen_rect, &rings);
    }

    /// The nodes Delete, Duplicate and Copy act on: the canvas selection, else the node in
    /// the inspector.
    fn targets(&self, ctx: &egui::Context) -> Vec<NodeId> {
        let selected = self.selected_nodes(ctx);
        if selected.is_empty() {
            self.session
                .inspected
                .filter(|n| self.document.snarl.get_node(*n).is_some())
                .into_iter()
                .collect()
        } else {
            selected
        }
    }
}
