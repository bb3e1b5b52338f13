//! The app's work that is not drawing: taking the run's events, swapping in the catalog of
//! freshly connected MCP servers, checking the graph again after an edit, autosaving, and
//! following the open file's trust. [`App::logic`] runs from `eframe::App::logic`, so it
//! goes on while the window is hidden.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloom_core::{GraphDoc, validate};
use agentloom_engine::RunStatus;

use agentloom_blocks::Registry;
use agentloom_core::Problem;

use super::tasks::Report;
use super::{App, history, mcp_servers, palette};

/// How often the history is listed again while the live run is not listed as it is (its
/// row not written yet, or not yet waiting while a person is asked).
const LIVE_HISTORY_POLL: Duration = Duration::from_millis(250);
/// The same while the run waits for a person: the window rests meanwhile.
const WAITING_HISTORY_POLL: Duration = Duration::from_secs(1);

impl App {
    /// One step of the non-UI work; call once per frame, drawn or not.
    pub fn logic(&mut self, ctx: &egui::Context) {
        self.frames.logic_ran = true;
        self.take_reports(ctx);
        if self.run.drain() {
            self.refresh_history();
        } else {
            self.follow_history(ctx);
        }
        self.take_assistant_edits();
        self.evaluations
            .follow_history(self.store.as_deref(), self.document.path.as_deref());
        self.revalidate();
        self.autosave_tick(ctx);
    }

    /// Hands what the background tasks reported since the last frame to the rooms that
    /// started them.
    fn take_reports(&mut self, ctx: &egui::Context) {
        for report in self.tasks.poll(ctx) {
            match report {
                Report::EvaluationProgress(_) | Report::EvaluationDone(_) => {
                    self.take_evaluation_report(report);
                }
                Report::McpConnected(catalog, problems) => {
                    self.take_mcp_connection(catalog, problems);
                }
                Report::FileDialogs(available) => {
                    self.prompts.finding_dialogs = None;
                    if let Some(available) = available {
                        self.prompts.native_dialogs.get_or_insert(available);
                    }
                }
                Report::Models { base, listed } => self.inspector.models_listed(&base, listed),
                Report::RunRead {
                    run_id,
                    detail,
                    unchanged,
                } => self.timeline.read(&run_id, detail, unchanged),
                Report::SignInDevice(_) | Report::SignInBrowser(_) | Report::CredentialsDone(_) => {
                    self.credentials.take_report(report)
                }
            }
        }
        // Work the frame drawn last asked for.
        self.inspector.ask_models(&mut self.tasks);
        self.credentials.start_asked(&mut self.tasks);
        self.timeline.follow(self.store.as_ref(), &mut self.tasks);
    }

    /// How many background tasks are under way (see [`crate::tasks`]).
    pub fn background_tasks(&self) -> usize {
        self.tasks.count()
    }

    /// Checks the document again if it changed.
    pub(super) fn revalidate(&mut self) {
        if self.problems.revision == self.document.revision {
            return;
        }
        self.problems.revision = self.document.revision;
        let doc = self.document.to_doc();
        self.problems.list = self.problems.mcp.clone();
        if let Err(mut problems) = validate(&doc, self.catalog.as_ref()) {
            if self.untrusted.is_some() {
                agentloom_runner::trust::drop_offline_tool_nodes(&mut problems, &doc);
            }
            self.problems.list.extend(problems);
        }
        self.problems.by_node.clear();
        for problem in &self.problems.list {
            if let Some(node) = &problem.node {
                self.problems
                    .by_node
                    .entry(node.clone())
                    .or_default()
                    .push(problem.message.clone());
            }
        }
        if self.document.dirty && self.data.is_some() {
            self.autosave
                .due
                .get_or_insert_with(|| Instant::now() + self.autosave.delay);
        } else if !self.document.dirty {
            // Back to what the file holds (an undo): nothing left to recover.
            self.autosave.due = None;
            if let Some(data) = &self.data {
                data.clear_autosave();
            }
        }
    }

    pub(super) fn autosave_tick(&mut self, ctx: &egui::Context) {
        let Some(due) = self.autosave.due else { return };
        let now = Instant::now();
        if now < due {
            ctx.request_repaint_after(due - now);
            return;
        }
        self.autosave.due = None;
        if let Some(data) = &self.data
            && self.document.dirty
            && let Err(err) = data.autosave(&self.document.to_doc(), self.document.path.as_deref())
        {
            self.notice = Some(format!("Autosave failed: {err}"));
        }
    }

    /// Lists the runs of the graph shown again (of every graph with "All graphs").
    pub(super) fn refresh_history(&mut self) {
        let Some(store) = &self.store else { return };
        let graph = (!self.history.all_graphs).then(|| self.document.name.clone());
        let listed = match &graph {
            Some(name) => store.list_runs_of_graph(name, history::HISTORY_LIMIT),
            None => store.list_runs(history::HISTORY_LIMIT),
        };
        match listed {
            Ok(runs) => self.history.rows = runs,
            Err(err) => self.notice = Some(err.to_string()),
        }
        self.history.of = graph;
        self.history.listed_at = Some(Instant::now());
    }

    /// Keeps the history up to date: for the graph shown (opened, renamed), and while the
    /// live run is not listed as it is (not yet listed, or asking a person and not listed
    /// as waiting), every [`LIVE_HISTORY_POLL`].
    fn follow_history(&mut self, ctx: &egui::Context) {
        let wanted = (!self.history.all_graphs).then_some(self.document.name.as_str());
        if self.history.of.as_deref() != wanted {
            self.refresh_history();
            return;
        }
        if !self.run.is_running() {
            return;
        }
        let state = if self.run.approvals.is_empty() {
            RunStatus::Running
        } else {
            RunStatus::Waiting
        };
        let listed = self
            .history
            .rows
            .iter()
            .find(|run| self.run.run_id.as_deref() == Some(run.id.as_str()))
            .map(|run| run.status);
        if listed == Some(state) {
            return;
        }
        let poll = if state == RunStatus::Waiting {
            WAITING_HISTORY_POLL
        } else {
            LIVE_HISTORY_POLL
        };
        let due = self
            .history
            .listed_at
            .map_or(Instant::now(), |at| at + poll);
        let now = Instant::now();
        if now >= due {
            self.refresh_history();
            ctx.request_repaint_after(poll);
        } else {
            ctx.request_repaint_after(due - now);
        }
    }

    /// Starts connecting to the MCP servers of `doc` (in the background) when they are not
    /// the ones whose tools the catalog holds; without servers the catalog changes at once.
    pub(super) fn connect_mcp(&mut self, doc: &GraphDoc) {
        let store = self.credentials.store();
        let trusted = self.untrusted.is_none();
        let ready = self.mcp_connector.connect(
            &mut self.tasks,
            doc,
            self.graph_file.as_deref(),
            trusted,
            || {
                let credentials = agentloom_runner::Credentials::of_store(store);
                agentloom_runner::launch::secrets_for(
                    &agentloom_runner::Trust::Trusted,
                    &credentials,
                )
            },
        );
        if let Some(connected) = ready {
            self.use_catalog(connected);
        }
    }

    /// Once connected, the servers' tools are blocks (in the palette, for validation and
    /// runs), their nodes get their ports, and unreachable servers are problems.
    /// What the evaluation under way reported.
    fn take_evaluation_report(&mut self, report: Report) {
        match report {
            Report::EvaluationProgress(progress) => self.evaluations.progressed(progress),
            Report::EvaluationDone(done) => {
                self.evaluations.finished(done);
                // The cases' runs join the history now the evaluation is over.
                self.commands.push(crate::Command::RefreshHistory);
            }
            _ => {}
        }
    }

    fn take_mcp_connection(&mut self, catalog: Registry, problems: Vec<Problem>) {
        let Some(connected) = self.mcp_connector.connected(catalog, problems) else {
            return;
        };
        self.use_catalog(connected);
        // Tool nodes take their ports from the new catalog (their wires were kept meanwhile).
        let doc = self.document.to_doc();
        let catalog = self.catalog.clone();
        self.document.reload(&doc, catalog.as_ref());
    }

    pub(super) fn use_catalog(&mut self, connected: mcp_servers::Connected) {
        self.problems.mcp = connected.problems;
        self.catalog = Arc::new(connected.catalog);
        self.palette = palette::entries(self.catalog.as_ref());
        // Problems are recomputed on the next frame.
        self.problems.revision = u64::MAX;
    }

    /// Records trust in the graph file at `path` as it is now (for this session only when
    /// there is no data directory); returns whether the open graph was untrusted.
    pub(super) fn trust_file(&mut self, path: &Path) -> bool {
        if let Some(store) = &self.trust_store
            && let Err(err) =
                agentloom_runner::trust::fingerprint(path).and_then(|print| store.trust(print))
        {
            self.notice = Some(format!("Trusted for this session only: {err}"));
        }
        let was_untrusted = self.untrusted.take().is_some();
        self.secrets_follow_trust();
        was_untrusted
    }

    /// Trust and connect: the open file is trusted, its servers connected, its calls free.
    pub(super) fn trust_and_connect(&mut self) {
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

    /// Runs of a trusted graph get the stored credentials (the runner gives an untrusted
    /// one's none at all).
    pub(super) fn secrets_follow_trust(&mut self) {
        self.run_credentials = agentloom_runner::Credentials::of_store(self.credentials.store());
    }

    /// What runs of the open graph may do: trusted unless its file is not.
    pub(super) fn run_trust(&self) -> agentloom_runner::Trust {
        match &self.untrusted {
            Some(untrusted) => agentloom_runner::Trust::of(false, Some(&untrusted.file)),
            None => agentloom_runner::Trust::Trusted,
        }
    }

    /// The open graph made ready to run through the runner, checked against the catalog
    /// being edited with; the error says what stops it.
    pub(super) fn prepare_run(&self) -> Result<agentloom_runner::Prepared, String> {
        agentloom_runner::Prepared::with_catalog(
            self.catalog.clone(),
            self.runnable_doc(),
            self.run_trust(),
            &self.run_credentials,
        )
        .map_err(|problems| {
            format!(
                "the graph has {}: {}",
                crate::run_panel::counted(problems.len(), "problem", "problems"),
                problems
                    .first()
                    .map(|p| p.message.as_str())
                    .unwrap_or_default()
            )
        })
    }

    /// Makes the catalog resolve `graph.call` paths against `path`, the file of `doc`.
    /// Returns whether the file changed (the catalog follows: at once without MCP servers,
    /// else once they are connected again).
    pub(super) fn follow_graph_file(&mut self, doc: &GraphDoc, path: Option<&Path>) -> bool {
        if self.graph_file.as_deref() == path {
            return false;
        }
        self.graph_file = path.map(Path::to_path_buf);
        self.connect_mcp(doc);
        true
    }
}
