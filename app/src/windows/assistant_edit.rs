//! File → "Let an assistant edit this graph…": the app serves the editing tools of
//! `agentloom mcp --edit` ([`agentloom_runner::edit_server`]) for the open document over
//! streamable HTTP on 127.0.0.1, at a port of its own and behind a fresh bearer token.
//!
//! The server's threads never touch the document: each tool call sends its edit here and
//! waits. The UI thread applies the edits in the order they came, after the person's own
//! commands of the frame, each as one undoable step (so nothing either side does is lost),
//! highlights the nodes it changed for a moment, and refuses edits while paused. Stop ends
//! the server: the port closes and the token is worth nothing.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_core::{GraphDoc, Problem};
use agentloom_engine::RunStore;
use agentloom_runner::GraphSource;
use agentloom_runner::edit_server::http::RunningServer;
use agentloom_runner::edit_server::{EditServer, EditedGraph, GraphEdit, ToolError};
use agentloom_runner::headless::GraphRunner;
use agentloom_runner::trust::TrustStore;
use serde_json::Value as Json;
use tokio_util::sync::CancellationToken;

use crate::theme;

/// The tool error of an edit made while the person has paused editing.
pub const PAUSED_MESSAGE: &str = "the user paused editing of this graph in Agentloom; \
     ask them to resume it, then try again";

/// How long a tool call waits for the window to take its edit (a window that draws no
/// frame still runs its logic, so this is only reached when the app hangs).
const REPLY_WAIT: Duration = Duration::from_secs(30);

/// How long the nodes an edit changed stay highlighted.
const HIGHLIGHT_FOR: Duration = Duration::from_millis(1500);

/// What a tool call asks of the window.
enum Request {
    /// The graph as the canvas shows it now.
    Read(Sender<GraphDoc>),
    /// Apply this edit as one undoable step.
    Edit(GraphEdit, Sender<Result<(Json, GraphDoc), ToolError>>),
}

/// What the server sees of the app's state; the window refreshes it every frame.
struct Shared {
    catalog: Arc<Registry>,
    catalog_problems: Vec<Problem>,
    path: Option<PathBuf>,
    /// Where the user's trust in graph files is kept (the app's).
    trust_store: Option<TrustStore>,
}

/// The open document, as the editing server sees it: every read and edit is a request to
/// the UI thread, answered in order.
struct LiveDocument {
    requests: Sender<Request>,
    shared: Mutex<Shared>,
    repaint: egui::Context,
}

impl LiveDocument {
    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends `request` to the window and waits for its answer.
    fn ask<T>(&self, request: Request, reply: &Receiver<T>) -> Result<T, String> {
        self.requests
            .send(request)
            .map_err(|_| "editing was stopped in Agentloom".to_owned())?;
        self.repaint.request_repaint();
        reply.recv_timeout(REPLY_WAIT).map_err(|err| match err {
            RecvTimeoutError::Timeout => "Agentloom did not take the edit in time".to_owned(),
            RecvTimeoutError::Disconnected => "editing was stopped in Agentloom".to_owned(),
        })
    }
}

impl EditedGraph for LiveDocument {
    fn describe(&self) -> String {
        match &self.shared().path {
            Some(path) => format!("open in Agentloom ({})", path.display()),
            None => "open in Agentloom (not saved to a file yet)".to_owned(),
        }
    }

    fn load(&self) -> Result<GraphDoc, String> {
        let (reply, answer) = mpsc::channel();
        self.ask(Request::Read(reply), &answer)
    }

    fn catalog(&self, _doc: &GraphDoc) -> (Arc<Registry>, Vec<Problem>) {
        let shared = self.shared();
        (shared.catalog.clone(), shared.catalog_problems.clone())
    }

    fn apply(&self, edit: GraphEdit) -> Result<(Json, GraphDoc), ToolError> {
        let (reply, answer) = mpsc::channel();
        self.ask(Request::Edit(edit, reply), &answer)
            .map_err(ToolError::Failed)?
    }

    /// The graph as shown, edits not saved yet included. It runs trusted only when its file
    /// is trusted and holds exactly what is shown: the assistant's own edits run offline in
    /// safe mode until the user saves them.
    fn runner(&self, store: Option<Arc<RunStore>>) -> Result<GraphRunner, Vec<String>> {
        let (path, trust_store, catalog) = {
            let shared = self.shared();
            (
                shared.path.clone(),
                shared.trust_store.clone(),
                shared.catalog.clone(),
            )
        };
        let Some(path) = path else {
            return Err(vec![
                "the graph is not saved to a file yet: ask the user to save it in Agentloom, \
                 then run it"
                    .to_owned(),
            ]);
        };
        let shown = self.load().map_err(|err| vec![err])?;
        let short =
            |doc: &GraphDoc| agentloom_core::without_declared_defaults(doc, catalog.as_ref());
        // The file read once: what its trust is checked against is what runs.
        if let Ok(file) = GraphSource::read(&path)
            && file.is_trusted_in(trust_store.as_ref())
            && short(file.doc())
                == short(&agentloom_blocks::graph_call::with_absolute_paths(
                    shown.clone(),
                    Some(&path),
                ))
        {
            return GraphRunner::of_source(&path, file, true, store);
        }
        let source = GraphSource::of_doc(shown, Some(&path));
        let needs = source.needs();
        if !needs.is_empty() {
            let mut refusal = vec![format!(
                "the graph open in Agentloom is not trusted as it is (changes not saved to {}, \
                 or a file its user has not trusted); trusting it would let it:",
                agentloom_core::Escaped(&path.display().to_string())
            )];
            refusal.extend(needs.lines().iter().map(|line| format!("  - {line}")));
            refusal.push(
                "ask the user to look at the changes and save the graph in Agentloom (saving \
                 trusts it), then run it again"
                    .to_owned(),
            );
            return Err(refusal);
        }
        GraphRunner::of_source(&path, source, false, store)
    }
}

/// The server while it runs.
struct Serving {
    server: RunningServer,
    live: Arc<LiveDocument>,
    requests: Receiver<Request>,
    paused: bool,
    /// Edits taken so far (refused ones too).
    applied: usize,
}

/// What the app needs to start serving its document.
pub struct StartWith<'a> {
    pub runtime: Option<&'a tokio::runtime::Runtime>,
    pub store: Option<Arc<RunStore>>,
    pub workspace: PathBuf,
    pub catalog: Arc<Registry>,
    pub catalog_problems: Vec<Problem>,
    pub path: Option<PathBuf>,
    pub trust_store: Option<TrustStore>,
}

/// The window and its server.
#[derive(Default)]
pub struct AssistantEdit {
    open: bool,
    serving: Option<Serving>,
    /// Why the server could not start.
    error: Option<String>,
    /// The nodes the last edits changed, and when.
    highlighted: Vec<(String, Instant)>,
}

/// A request taken from the server, for the app to answer.
pub enum Incoming {
    Read(GraphReply),
    Edit(IncomingEdit),
}

/// Where the graph a read asked for goes.
pub struct GraphReply(Sender<GraphDoc>);

impl GraphReply {
    pub fn send(self, shown: GraphDoc) {
        let _ = self.0.send(shown);
    }
}

/// One edit taken from the server, for the app to apply.
pub struct IncomingEdit {
    edit: GraphEdit,
    reply: Sender<Result<(Json, GraphDoc), ToolError>>,
}

impl IncomingEdit {
    /// Applies the edit to `before` (the document as it is now): the graph after it and
    /// the edit's answer, or why it was refused (nothing changes then).
    pub fn run(self, before: &GraphDoc) -> Option<(GraphDoc, Json, AnswerTo)> {
        let mut after = before.clone();
        match (self.edit)(&mut after) {
            Ok(answer) => Some((after, answer, AnswerTo(self.reply))),
            Err(err) => {
                let _ = self.reply.send(Err(err));
                None
            }
        }
    }
}

/// Where the answer of an applied edit goes, with the graph as the canvas then holds it.
pub struct AnswerTo(Sender<Result<(Json, GraphDoc), ToolError>>);

impl AnswerTo {
    pub fn send(self, answer: Json, shown: GraphDoc) {
        let _ = self.0.send(Ok((answer, shown)));
    }
}

impl AssistantEdit {
    /// Shows the window, starting the server if it is not running.
    pub fn open(&mut self, with: StartWith<'_>, ctx: &egui::Context) {
        self.open = true;
        if self.serving.is_none() {
            self.start(with, ctx);
        }
    }

    fn start(&mut self, with: StartWith<'_>, ctx: &egui::Context) {
        self.error = None;
        let Some(runtime) = with.runtime else {
            self.error = Some("the app's run threads did not start".to_owned());
            return;
        };
        let (requests, incoming) = mpsc::channel();
        let live = Arc::new(LiveDocument {
            requests,
            shared: Mutex::new(Shared {
                catalog: with.catalog,
                catalog_problems: with.catalog_problems,
                path: with.path,
                trust_store: with.trust_store,
            }),
            repaint: ctx.clone(),
        });
        let shutdown = CancellationToken::new();
        let server = EditServer::new(live.clone(), with.workspace, with.store, shutdown.clone());
        match RunningServer::start(runtime.handle(), server, shutdown) {
            Ok(server) => {
                tracing::info!(address = %server.local_addr(), "an assistant may edit the open graph");
                self.serving = Some(Serving {
                    server,
                    live,
                    requests: incoming,
                    paused: false,
                    applied: 0,
                });
            }
            Err(err) => self.error = Some(err),
        }
    }

    /// Stops the server: the port closes, the token is forgotten, waiting calls fail.
    pub fn stop(&mut self) {
        if let Some(mut serving) = self.serving.take() {
            drop(serving.requests);
            serving.server.stop();
            tracing::info!("the assistant's editing stopped");
        }
    }

    /// Whether the server is running.
    pub fn is_serving(&self) -> bool {
        self.serving.is_some()
    }

    /// Keeps what the server sees of the app up to date.
    pub fn follow(&self, catalog: &Arc<Registry>, problems: &[Problem], path: Option<&PathBuf>) {
        let Some(serving) = &self.serving else { return };
        let mut shared = serving.live.shared();
        if !Arc::ptr_eq(&shared.catalog, catalog) {
            shared.catalog = catalog.clone();
            shared.catalog_problems = problems.to_vec();
        }
        if shared.path.as_ref() != path {
            shared.path = path.cloned();
        }
    }

    /// Takes the server's waiting requests, in the order they came. Edits are refused here
    /// while paused.
    pub fn take_requests(&mut self) -> Vec<Incoming> {
        let Some(serving) = &mut self.serving else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        while let Ok(request) = serving.requests.try_recv() {
            match request {
                Request::Read(reply) => taken.push(Incoming::Read(GraphReply(reply))),
                Request::Edit(_, reply) if serving.paused => {
                    let _ = reply.send(Err(ToolError::Failed(PAUSED_MESSAGE.to_owned())));
                }
                Request::Edit(edit, reply) => {
                    serving.applied += 1;
                    taken.push(Incoming::Edit(IncomingEdit { edit, reply }));
                }
            }
        }
        taken
    }

    /// Highlights the nodes that differ between `before` and `after` for a moment.
    pub fn highlight_changes(&mut self, before: &GraphDoc, after: &GraphDoc) {
        let now = Instant::now();
        let mut changed: Vec<String> = after
            .nodes
            .iter()
            .filter(|node| before.node(&node.id) != Some(*node))
            .map(|node| node.id.clone())
            .collect();
        let wires_changed = after
            .edges
            .iter()
            .filter(|e| !before.edges.contains(e))
            .chain(before.edges.iter().filter(|e| !after.edges.contains(e)));
        for edge in wires_changed {
            changed.push(edge.from.0.clone());
            changed.push(edge.to.0.clone());
        }
        self.highlighted.retain(|(id, _)| !changed.contains(id));
        self.highlighted
            .extend(changed.into_iter().map(|id| (id, now)));
    }

    /// The nodes highlighted now, each with how strongly (1 just changed, fading to 0).
    pub fn highlights(&mut self) -> Vec<(String, f32)> {
        let now = Instant::now();
        self.highlighted
            .retain(|(_, since)| now.duration_since(*since) < HIGHLIGHT_FOR);
        self.highlighted
            .iter()
            .map(|(id, since)| {
                let age = now.duration_since(*since).as_secs_f32();
                (id.clone(), 1.0 - age / HIGHLIGHT_FOR.as_secs_f32())
            })
            .collect()
    }

    /// The window: the URL and token to give a client, a client config, Pause and Stop.
    /// Returns true when the person asked to start serving again.
    pub fn window_ui(&mut self, ctx: &egui::Context) -> bool {
        if !self.open {
            return false;
        }
        let mut open = true;
        let mut start_again = false;
        let mut stop = false;
        egui::Window::new("Let an assistant edit this graph")
            .open(&mut open)
            .resizable(false)
            .default_width(460.0)
            .show(ctx, |ui| match &mut self.serving {
                Some(serving) => stop = serving_ui(ui, serving),
                None => {
                    if let Some(error) = &self.error {
                        ui.colored_label(theme::ERROR, format!("Could not start: {error}"));
                    } else {
                        ui.label("Stopped: no assistant can edit this graph.");
                    }
                    start_again = ui.button("Start again").clicked();
                }
            });
        // Closing the window stops the server too: none is left serving unseen (collapse
        // the window to keep it out of the way).
        if stop || !open {
            self.stop();
        }
        self.open = open;
        start_again
    }
}

/// The window's content while serving; true when Stop was pressed.
fn serving_ui(ui: &mut egui::Ui, serving: &mut Serving) -> bool {
    let url = serving.server.url();
    let token = serving.server.token().to_owned();
    ui.label(
        "Any MCP client (a desktop chat app, a code editor, another agent) can now build and \
         change this graph. Each edit lands on the canvas as one step: Ctrl+Z undoes it.",
    );
    ui.add_space(6.0);
    egui::Grid::new("assistant-edit-access")
        .num_columns(3)
        .show(ui, |ui| {
            ui.label("URL");
            ui.monospace(&url);
            if ui.button("Copy URL").clicked() {
                ui.ctx().copy_text(url.clone());
            }
            ui.end_row();
            ui.label("Token");
            ui.monospace(&token);
            if ui.button("Copy token").clicked() {
                ui.ctx().copy_text(token.clone());
            }
            ui.end_row();
        });
    ui.add_space(6.0);
    ui.label("An MCP client's configuration (streamable HTTP):");
    let config = client_config(&url, &token);
    egui::Frame::group(ui.style()).show(ui, |ui| {
        egui::ScrollArea::horizontal().show(ui, |ui| {
            ui.add(egui::Label::new(egui::RichText::new(&config).monospace()).extend());
        });
    });
    if ui.button("Copy configuration").clicked() {
        ui.ctx().copy_text(config);
    }
    ui.add_space(6.0);
    ui.horizontal(|ui| {
        ui.checkbox(&mut serving.paused, "Pause editing")
            .on_hover_text("While paused, the assistant's edits are refused");
        let status = if serving.paused {
            "Paused: edits are refused".to_owned()
        } else {
            format!("Edits received: {}", serving.applied)
        };
        ui.label(status);
    });
    ui.button("Stop")
        .on_hover_text("Close the server: the token stops working")
        .clicked()
}

/// Draws a ring round each node rectangle, as strong as its highlight, over the canvas
/// (`canvas`) and under the windows.
pub fn draw_highlights(ctx: &egui::Context, canvas: egui::Rect, rings: &[(egui::Rect, f32)]) {
    if rings.is_empty() {
        return;
    }
    let painter = ctx
        .layer_painter(egui::LayerId::new(
            egui::Order::Background,
            egui::Id::new("assistant-edit-highlight"),
        ))
        .with_clip_rect(canvas);
    for (rect, strength) in rings {
        painter.rect_stroke(
            rect.expand(4.0),
            8.0,
            egui::Stroke::new(3.0, theme::ACCENT.gamma_multiply(*strength)),
            egui::StrokeKind::Outside,
        );
    }
    // The ring fades out.
    ctx.request_repaint_after(Duration::from_millis(33));
}

/// The JSON an MCP client's configuration takes for this server (the `mcpServers` form of
/// Claude Code, Cursor and others; a client speaking stdio only can reach it through a
/// bridge such as `mcp-remote`).
pub fn client_config(url: &str, token: &str) -> String {
    // Written out rather than serialized, so that the fields keep a reading order.
    let url = Json::String(url.to_owned());
    let authorization = Json::String(format!("Bearer {token}"));
    format!(
        r#"{{
  "mcpServers": {{
    "agentloom": {{
      "type": "http",
      "url": {url},
      "headers": {{ "Authorization": {authorization} }}
    }}
  }}
}}"#
    )
}
