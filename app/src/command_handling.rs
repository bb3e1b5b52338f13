//! Carrying out commands: [`App::apply`] is the only code that edits the [`Document`]
//! (through its methods, each edit one undo step), and opening, saving and replacing a
//! graph.

use std::path::{Path, PathBuf};

use agentloom_core::GraphDoc;
use egui::Pos2;
use egui_snarl::NodeId;

use super::command::McpEdit;
use super::document::{self, Document};
use super::path_prompt::{self, PathPurpose};
use super::run::RunView;
use super::subgraph::Caller;
use super::windows::assistant_edit;
use super::{App, Command, examples, files, groups, load_graph, palette, quick_add, wiring};
use super::{save_graph, theme, trust_banner};

impl App {
    /// Whether `command`, which replaces the graph, may go ahead now. With unsaved changes
    /// it waits for the answer to "save changes?" instead.
    pub(super) fn may_discard(&mut self, command: &Command) -> bool {
        if !self.document.dirty {
            return true;
        }
        self.prompts.discard = Some(command.clone());
        false
    }

    pub(super) fn edit_mcp_servers(&mut self, edit: McpEdit) {
        let mut doc = self.document.to_doc();
        match edit {
            McpEdit::Add(name, server) => {
                doc.mcp_servers.insert(name, server);
            }
            McpEdit::Remove(name) => {
                doc.mcp_servers.remove(&name);
            }
        }
        // Still untrusted, the banner asks again with what trusting now allows.
        if let Some(untrusted) = &mut self.untrusted {
            untrusted.needs = agentloom_runner::trust::needs_of(&doc, Some(&untrusted.file));
            untrusted.offline = false;
        }
        self.connect_mcp(&doc);
        // One undo step.
        let catalog = self.catalog.clone();
        self.document.replace(&doc, catalog.as_ref());
        self.document.touch();
    }

    /// Shows `doc` as a document of its own: its own undo history, its own file.
    pub(super) fn open_document(&mut self, doc: &GraphDoc, path: Option<PathBuf>) {
        let graph_file = path.clone();
        self.open_document_resolving(doc, path, graph_file.as_deref());
    }

    /// [`App::open_document`], with `graph.call` paths resolved against `graph_file`.
    pub(super) fn open_document_resolving(
        &mut self,
        doc: &GraphDoc,
        path: Option<PathBuf>,
        graph_file: Option<&Path>,
    ) {
        // Untitled but resolving against a file (an example's copy, a recorded run): it has
        // that file's trust only when it is that file's graph.
        let is_the_file = path.is_some()
            || graph_file
                .and_then(|file| load_graph(file).ok())
                .is_some_and(|on_disk| on_disk == *doc);
        let untrusted = match graph_file {
            Some(file) if !is_the_file => Some(trust_banner::Untrusted::new(doc, file)),
            _ => trust_banner::Untrusted::of(self.trust_store.as_ref(), doc, graph_file),
        };
        self.open_document_trusting(doc, path, graph_file, untrusted);
    }

    /// [`App::open_document_resolving`] with its trust already decided (`untrusted`): a
    /// graph left unsaved for one it calls comes back as trusted as it was.
    pub(super) fn open_document_trusting(
        &mut self,
        doc: &GraphDoc,
        path: Option<PathBuf>,
        graph_file: Option<&Path>,
        untrusted: Option<trust_banner::Untrusted>,
    ) {
        // A run of the graph being replaced is stopped, not left going unseen.
        self.run.stop();
        // The assistant was let edit the graph being replaced, not whichever comes next.
        self.windows.assistant_edit.stop();
        // Another graph: no way back to the callers of this one.
        self.session.callers.clear();
        self.graph_file = graph_file.map(Path::to_path_buf);
        self.untrusted = untrusted;
        self.secrets_follow_trust();
        self.connect_mcp(doc);
        self.document = Document::from_doc(doc, self.catalog.as_ref(), path);
        self.autosave.due = None;
        self.after_document_change();
    }

    pub(super) fn after_document_change(&mut self) {
        self.session.inspected = None;
        self.inspector.clear();
        self.run = RunView::default();
        self.canvas.node_rects.clear();
        self.session.pending_fit = true;
    }

    pub(super) fn save_to(&mut self, path: &Path) -> bool {
        // A new graph saved for the first time is named after its file (its runs' history
        // is no longer every untitled graph's).
        if self.document.path.is_none()
            && self.document.name == UNTITLED
            && let Some(name) = name_from_file(path)
        {
            self.document.name = name;
            self.document.touch();
        }
        let doc = self.document.to_file_doc(self.catalog.as_ref());
        match save_graph(&doc, path) {
            Ok(()) => {
                self.document.mark_saved(path.to_owned());
                self.debugger_saved_to(path);
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
                self.autosave.due = None;
                self.notice = Some(format!("Saved {}", path.display()));
                true
            }
            Err(err) => {
                self.notice = Some(err.to_string());
                false
            }
        }
    }

    /// Carries out one command: the short ones here, each family's longer ones in the
    /// methods below (files, editing, the view, closing).
    pub fn apply(&mut self, command: Command, ctx: &egui::Context) {
        let catalog = self.catalog.clone();
        let catalog = catalog.as_ref();
        match command {
            // Files.
            Command::New => self.new_graph(),
            Command::OpenDialog => self.file_dialog(PathPurpose::Open, ctx),
            Command::ShowExamples => self.prompts.examples_open = true,
            Command::OpenExample(index) => self.open_example(index),
            Command::Open(path) => self.open_path(path),
            Command::OpenCalled(path) => self.open_called(path, ctx),
            Command::ReturnToCaller(index) => self.return_to_caller(index),
            Command::Save => self.save(ctx),
            Command::SaveAsDialog => self.file_dialog(PathPurpose::SaveAs, ctx),
            Command::SaveAs(path) => _ = self.save_to(&path),
            Command::ExportDialog => self.file_dialog(PathPurpose::Export, ctx),
            Command::Export(path) => self.export_to(&path),
            Command::ImportDialog => self.file_dialog(PathPurpose::Import, ctx),
            Command::Import(path) => self.import_from(&path),
            // Editing the graph.
            Command::Undo => self.step_history(true),
            Command::Redo => self.step_history(false),
            Command::AddBlock { kind, pos } => self.add_block_at(&kind, pos),
            Command::Connect { from, to } => self.connect(&from, &to),
            Command::AddWired { kind, pos, pins } => self.add_block(&kind, pos, &pins),
            Command::FinishMove => self.document.finish_move(),
            Command::SetConfig { node, field, value } => {
                self.document.set_config(node, &field, value, catalog, true);
            }
            Command::SetLabel { node, label } => self.edit_node(node, |doc| doc.label = label),
            Command::DeleteNodes(nodes) => self.delete_nodes(&nodes),
            Command::Disconnect(pin) => self.document.disconnect(pin),
            Command::GroupSelection(nodes) => self.group_nodes(&nodes),
            Command::MoveGroup { id, delta } => self.move_group(&id, delta),
            Command::SetGroupTitle { id, title } => self.set_group_title(id, title),
            Command::RemoveGroup(id) => self.document.remove_group(&id),
            Command::DeleteWire(from, to) => self.delete_wire(from, to),
            Command::DuplicateNodes(nodes) => self.duplicate_nodes(&nodes, ctx),
            Command::ToggleBypass(nodes) => self.toggle_bypass(&nodes),
            Command::SetNodeFlag { nodes, flag, on } => self.document.set_flag(&nodes, flag, on),
            Command::Copy(nodes) => self.copy_nodes(&nodes, ctx),
            Command::Paste => self.paste(ctx),
            Command::SetGraphInfo { name, description } => self.set_graph_info(name, description),
            Command::SetPinned { node, outputs } => {
                self.edit_node(node, |doc| doc.pinned = Some(outputs));
            }
            Command::SetSafeMode(on) => self.document.set_safe_mode(on),
            Command::EditMcpServers(edit) => self.edit_mcp_servers(edit),
            // The view.
            Command::Inspect(node) => self.session.inspected = Some(node),
            Command::QuickAdd(screen) => self.open_quick_add(screen),
            Command::ClearSelection => self.select_nothing(ctx),
            Command::SelectAll => self.select_all(),
            Command::InspectById(id) => self.inspect_by_id(&id),
            Command::FitView => self.session.pending_fit = true,
            Command::SetViewPrefs(prefs) => self.set_view_prefs(prefs),
            Command::Zoom(factor) => {
                self.canvas.set_transform = Some(self.canvas.zoom_transform(factor));
            }
            Command::ActualSize => {
                self.canvas.set_transform = Some(self.canvas.actual_size_transform());
            }
            // Runs.
            Command::Run => self.press_run(ctx),
            Command::StartRun => self.start_run(ctx),
            Command::CloseRunForm => self.run_setup.form.open = false,
            Command::StopRun => self.stop_run(),
            Command::Approve(node, decision) => self.decide_approval(&node, decision, ctx),
            Command::RunFromHere(node) => self.run_from_here(node, ctx),
            Command::PinOutputs(node, pin) => self.pin_outputs(node, pin),
            Command::RefreshHistory => self.refresh_history(),
            Command::OpenRun(id) => self.open_run(&id),
            Command::ReplayRun(id) => self.replay_run(&id, ctx),
            Command::AddRunToCases(id) => self.ask_cases_file_for(id),
            Command::AddCaseTo(path) => self.add_asked_case_to(&path),
            Command::Debug(command) => self.apply_debug(command, ctx),
            // Windows and trust.
            Command::OpenEvaluations => self.evaluations.open = true,
            Command::OpenKnowledge => self.knowledge.open = true,
            Command::OpenCredentials => self.credentials.show_window(),
            Command::OpenMcpServers => self.windows.mcp.open = true,
            Command::OpenAssistantEdit => self.open_assistant_edit(ctx),
            Command::TrustAndConnect => self.trust_and_connect(),
            Command::KeepOffline => self.keep_offline(),
            Command::Notify(text) => self.notice = Some(text),
            // Closing, and "save changes?".
            // The same close request as the window's close button: the prompt catches it.
            Command::Quit => ctx.send_viewport_cmd(egui::ViewportCommand::Close),
            Command::DiscardAndClose => self.discard_and_close(ctx),
            Command::SaveAndClose => self.save_and_close(ctx),
            Command::CancelClose => self.cancel_close(),
            Command::DiscardAndContinue => self.discard_and_continue(ctx),
            Command::SaveAndContinue => self.save_and_continue(ctx),
        }
    }
}

/// File commands: opening, saving, importing and exporting a graph file.
impl App {
    /// Starts an empty graph (after "save changes?").
    fn new_graph(&mut self) {
        if self.may_discard(&Command::New) {
            self.open_document(&GraphDoc::new(UNTITLED), None);
        }
    }

    /// Saves to the document's file, or asks for one.
    fn save(&mut self, ctx: &egui::Context) {
        match self.document.path.clone() {
            Some(path) => _ = self.save_to(&path),
            None => self.apply(Command::SaveAsDialog, ctx),
        }
    }

    /// Opens the shipped example at `index` (after "save changes?").
    fn open_example(&mut self, index: usize) {
        if let Some(doc) = examples::example(index)
            && self.may_discard(&Command::OpenExample(index))
        {
            self.prompts.examples_open = false;
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

    /// Opens the graph file at `path` (after "save changes?").
    fn open_path(&mut self, path: PathBuf) {
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

    /// Opens the graph file a graph-call node runs; the graph shown now becomes its
    /// caller in the breadcrumb bar (after the usual "save changes?").
    fn open_called(&mut self, path: PathBuf, ctx: &egui::Context) {
        if !self.may_discard(&Command::OpenCalled(path.clone())) {
            return;
        }
        let doc = match load_graph(&path) {
            Ok(doc) => doc,
            Err(err) => {
                self.notice = Some(err.to_string());
                return;
            }
        };
        let caller = Caller {
            path: self.document.path.clone(),
            graph_file: self.graph_file.clone(),
            doc: self.document.to_doc(),
            view: self.canvas.transform,
            untrusted: self.untrusted.clone(),
            selected: self.selected_ids(ctx),
            inspected: self.inspected_id().map(str::to_owned),
        };
        let mut callers = std::mem::take(&mut self.session.callers);
        callers.push(caller);
        self.open_document(&doc, Some(path.clone()));
        self.session.callers = callers;
        self.session.fresh_selection(&mut self.canvas);
        if let Some(data) = &self.data {
            data.remember_last(&path);
        }
        self.notice = None;
    }

    /// Goes back to the caller at `index` of the breadcrumb bar, as it was left: its
    /// view, selection and inspected node.
    fn return_to_caller(&mut self, index: usize) {
        if index >= self.session.callers.len() || !self.may_discard(&Command::ReturnToCaller(index))
        {
            return;
        }
        let mut callers = std::mem::take(&mut self.session.callers);
        callers.truncate(index + 1);
        let Some(caller) = callers.pop() else { return };
        // From its file as saved (changes left unsaved were discarded on the way down).
        let doc = match &caller.path {
            Some(path) => match load_graph(path) {
                Ok(doc) => doc,
                Err(err) => {
                    callers.push(caller);
                    self.session.callers = callers;
                    self.notice = Some(err.to_string());
                    return;
                }
            },
            None => caller.doc.clone(),
        };
        if caller.path.is_some() {
            self.open_document_resolving(&doc, caller.path.clone(), caller.graph_file.as_deref());
        } else {
            self.open_document_trusting(
                &doc,
                None,
                caller.graph_file.as_deref(),
                caller.untrusted.clone(),
            );
        }
        self.session.callers = callers;
        (self.session).back_at(&caller, &mut self.canvas, &self.document);
        if let Some(path) = &caller.path
            && let Some(data) = &self.data
        {
            data.remember_last(path);
        }
        self.notice = None;
    }

    /// Writes the graph to `path`, leaving the document's own file as it is.
    fn export_to(&mut self, path: &Path) {
        let doc = self.document.to_file_doc(self.catalog.as_ref());
        self.notice = Some(match save_graph(&doc, path) {
            Ok(()) => format!("Exported {}", path.display()),
            Err(err) => err.to_string(),
        });
    }

    /// Replaces the graph with the one in `path`: an edit of this document (its file
    /// stays), so undo brings the old graph back.
    fn import_from(&mut self, path: &Path) {
        match load_graph(path) {
            Ok(doc) => {
                self.run.stop();
                let catalog = self.catalog.clone();
                self.document.replace(&doc, catalog.as_ref());
                self.after_document_change();
                self.notice = Some(format!("Imported {}", path.display()));
            }
            Err(err) => self.notice = Some(err.to_string()),
        }
    }
}

/// Editing commands: what changes the graph beyond a single document call.
impl App {
    /// Adds a block of `kind` at `pos`, or where a block added by a click hides no other.
    fn add_block_at(&mut self, kind: &str, pos: Option<Pos2>) {
        let pos = pos
            .unwrap_or_else(|| (self.canvas).free_spot(&self.document.snarl, self.view_center()));
        self.add_block(kind, pos, &[]);
    }

    fn move_group(&mut self, id: &str, delta: egui::Vec2) {
        (self.document).move_group(id, delta, &self.canvas.node_rects);
    }

    fn delete_wire(&mut self, from: egui_snarl::OutPinId, to: egui_snarl::InPinId) {
        self.document.remove_wire(from, to);
        self.session.selected_wire = None;
    }

    fn duplicate_nodes(&mut self, nodes: &[NodeId], ctx: &egui::Context) {
        let clip = self.document.copy(nodes);
        self.paste_clip(&clip, ctx);
    }

    fn paste(&mut self, ctx: &egui::Context) {
        if let Some(clip) = self.session.clipboard.clone() {
            self.paste_clip(&clip, ctx);
        }
    }

    fn set_graph_info(&mut self, name: String, description: String) {
        // Typing in the field is one undo step, not one per key.
        (self.document).set_info(name, description, !self.graph_info.editing);
        self.graph_info.editing = true;
    }

    /// Wires `from` to `to` (node id, port name each), or says why not.
    fn connect(&mut self, from: &(String, String), to: &(String, String)) {
        self.notice = match self
            .document
            .connect_named((&from.0, &from.1), (&to.0, &to.1))
        {
            Ok(()) => None,
            Err(err) => Some(format!("Connection refused: {err}")),
        };
    }

    /// Changes one node's document, as one undo step.
    fn edit_node(&mut self, node: NodeId, edit: impl FnOnce(&mut agentloom_core::NodeDoc)) {
        let catalog = self.catalog.clone();
        self.document.checkpoint();
        self.document.update_node(node, catalog.as_ref(), edit);
    }

    fn delete_nodes(&mut self, nodes: &[NodeId]) {
        self.document.remove_nodes(nodes);
        if self.session.inspected.is_some_and(|n| nodes.contains(&n)) {
            self.session.inspected = None;
        }
    }

    /// Puts a new group around `nodes` as they are laid out.
    fn group_nodes(&mut self, nodes: &[NodeId]) {
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
        self.document
            .add_group(groups::group_around(id, &rects, at));
    }

    fn set_group_title(&mut self, id: String, title: String) {
        // Typing a title is one undo step, not one per key.
        let new_step = self.session.group_title_editing.as_deref() != Some(id.as_str());
        self.document.set_group_title(&id, title, new_step);
        self.session.group_title_editing = Some(id);
    }

    /// Bypasses `nodes`, or brings them back when every one is bypassed already.
    fn toggle_bypass(&mut self, nodes: &[NodeId]) {
        let all_bypassed = nodes.iter().all(|n| {
            self.document
                .snarl
                .get_node(*n)
                .is_some_and(|c| c.doc.bypass)
        });
        self.document
            .set_flag(nodes, document::NodeFlag::Bypass, !all_bypassed);
    }

    /// Copies `nodes` to the app's clipboard and, as JSON, to the system's.
    fn copy_nodes(&mut self, nodes: &[NodeId], ctx: &egui::Context) {
        if !nodes.is_empty() {
            let clip = self.document.copy(nodes);
            ctx.copy_text(clip.to_json_string());
            self.session.clipboard = Some(clip);
        }
    }

    /// Adds the blocks of `clip` where [`App::paste_offset`] finds room; the first is
    /// inspected.
    fn paste_clip(&mut self, clip: &GraphDoc, ctx: &egui::Context) {
        let catalog = self.catalog.clone();
        let offset = self.paste_offset(clip, ctx);
        let added = self.document.paste(clip, offset, catalog.as_ref());
        if let Some(first) = added.first() {
            self.session.inspected = Some(*first);
        }
    }
}

/// View, run and trust commands beyond a field set.
impl App {
    /// Opens the quick-add search at `screen`, its block to go there.
    fn open_quick_add(&mut self, screen: Pos2) {
        let at = self.canvas.to_graph(screen);
        self.prompts.quick_add = Some(quick_add::QuickAdd::new(at, screen));
    }

    /// Nothing selected and nothing inspected.
    fn select_nothing(&mut self, ctx: &egui::Context) {
        self.clear_selection(ctx);
        self.session.inspected = None;
    }

    /// Asks for the cases file to add run `run_id` to, prefilled with the last one used.
    fn ask_cases_file_for(&mut self, run_id: String) {
        let folder = self.graph_folder();
        let suggested = self
            .evaluations
            .ask_cases_file_for(run_id, self.store.as_deref(), &folder);
        self.path_prompt = Some(path_prompt::PathPrompt::new(
            PathPurpose::AddToCases,
            suggested,
        ));
    }

    /// Adds the run asked about to the cases file `path`, and says so.
    fn add_asked_case_to(&mut self, path: &std::path::Path) {
        if let Some(said) = self
            .evaluations
            .add_asked_case_to(self.store.as_deref(), path)
        {
            self.commands.push(Command::Notify(said));
        }
    }

    fn set_view_prefs(&mut self, prefs: crate::canvas::model::ViewPrefs) {
        if let Err(err) = self.canvas.set_prefs(prefs) {
            self.notice = Some(format!("The View settings are not kept: {err}"));
        }
    }

    fn stop_run(&mut self) {
        self.debugger_stop();
        self.run.stop();
    }

    /// The untrusted file's banner answered "Keep offline".
    fn keep_offline(&mut self) {
        if let Some(untrusted) = &mut self.untrusted {
            untrusted.offline = true;
        }
    }
    /// Inspects the node with document id `id`, moving the view to it when it is off
    /// screen.
    fn inspect_by_id(&mut self, id: &str) {
        let Some(node) = self.document.node_by_id(id) else {
            return;
        };
        self.session.inspected = Some(node);
        if let Some(info) = self.document.snarl.get_node_info(node) {
            let view = self.canvas.viewport();
            if !view.contains(info.pos) {
                let scale = self.canvas.transform.scaling;
                let target = info.pos + theme::NODE_SIZE_GUESS / 2.0;
                self.canvas.set_transform = Some(egui::emath::TSTransform::new(
                    self.canvas.screen_rect.center().to_vec2() - target.to_vec2() * scale,
                    scale,
                ));
            }
        }
    }
}

/// Closing commands: the window's "save changes?" answers.
impl App {
    /// Drops the unsaved changes and their autosave.
    fn discard_changes(&mut self) {
        if let Some(data) = &self.data {
            data.clear_autosave();
        }
        self.document.discard_changes();
    }

    fn discard_and_close(&mut self, ctx: &egui::Context) {
        self.discard_changes();
        self.prompts.allow_close = true;
        self.prompts.close = false;
        ctx.send_viewport_cmd(egui::ViewportCommand::Close);
    }

    fn cancel_close(&mut self) {
        self.prompts.close = false;
        self.prompts.discard = None;
    }

    /// Drops the changes, then carries out what waited for the answer.
    fn discard_and_continue(&mut self, ctx: &egui::Context) {
        if let Some(next) = self.prompts.discard.take() {
            self.discard_changes();
            self.apply(next, ctx);
        }
    }

    /// Saves, then carries out what waited for the answer.
    fn save_and_continue(&mut self, ctx: &egui::Context) {
        if let Some(next) = self.prompts.discard.take() {
            self.save_then(next, ctx);
        }
    }

    fn save_and_close(&mut self, ctx: &egui::Context) {
        self.prompts.close = false;
        if self.document.path.is_none() {
            // Saved once a path is given, then the window closes as asked.
            self.save_then(Command::Quit, ctx);
        } else {
            self.apply(Command::Save, ctx);
            if !self.document.dirty {
                self.prompts.allow_close = true;
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            }
        }
    }

    /// Saves, then carries out `next` (what the "save changes?" prompt held). Without a
    /// file, Save asks for one first: `next` goes on once a path is given, not on Cancel.
    fn save_then(&mut self, next: Command, ctx: &egui::Context) {
        match self.document.path.clone() {
            Some(path) => {
                if self.save_to(&path) {
                    self.apply(next, ctx);
                }
            }
            None => self.file_dialog_then(PathPurpose::SaveAs, ctx, Some(next)),
        }
    }

    /// Adds a block of `kind` at `pos`, wired to `pins`, and shows it in the inspector.
    fn add_block(&mut self, kind: &str, pos: Pos2, pins: &[wiring::Pin]) {
        let Some(entry) = self.palette.iter().find(|e| e.kind == kind) else {
            self.notice = Some(format!("There is no block `{kind}`."));
            return;
        };
        let doc = self.document.to_doc();
        let catalog = self.catalog.clone();
        let pin_name = match pins {
            [pin] => self.document.pin_name(*pin),
            _ => None,
        };
        if let Some(node) =
            palette::new_node_for_pin(entry, &doc, catalog.as_ref(), pin_name.as_deref())
        {
            let id = self.document.add_wired(node, pos, pins, catalog.as_ref());
            self.session.inspected = Some(id);
        }
    }

    /// Undoes (`back`) or redoes one edit. Going over an MCP-server change reconnects (the
    /// palette follows).
    fn step_history(&mut self, back: bool) {
        let next = if back {
            self.document.next_undo()
        } else {
            self.document.next_redo()
        };
        let wanted = next
            .filter(|d| d.mcp_servers != self.document.mcp_servers)
            .cloned();
        let catalog = self.catalog.clone();
        let stepped = if back {
            self.document.undo(catalog.as_ref())
        } else {
            self.document.redo(catalog.as_ref())
        };
        if stepped {
            self.after_structure_change();
        }
        if let Some(wanted) = wanted {
            self.connect_mcp(&wanted);
        }
    }

    /// How far to move pasted blocks: to the pointer when it is over the canvas (else the
    /// middle of the view), then down until they cover no block.
    pub(super) fn paste_offset(&self, clip: &GraphDoc, ctx: &egui::Context) -> egui::Vec2 {
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

    /// Asks for a file with the native dialog, or with the in-app prompt where there is none.
    pub(super) fn file_dialog(&mut self, purpose: PathPurpose, ctx: &egui::Context) {
        self.file_dialog_then(purpose, ctx, None);
    }

    /// [`App::file_dialog`], carrying out `then` after the file's command once a file is
    /// picked (nothing when the person cancels).
    fn file_dialog_then(
        &mut self,
        purpose: PathPurpose,
        ctx: &egui::Context,
        then: Option<Command>,
    ) {
        let native = *self
            .prompts
            .native_dialogs
            .get_or_insert_with(files::native_dialogs_available);
        let file_name = format!("{}.agentloom.json", self.document.name);
        if !native {
            let here = self.graph_folder();
            let suggested = match purpose {
                PathPurpose::Open | PathPurpose::Import => {
                    format!("{}{}", here.display(), std::path::MAIN_SEPARATOR)
                }
                PathPurpose::SaveAs | PathPurpose::Export | PathPurpose::AddToCases => self
                    .document
                    .path
                    .clone()
                    .unwrap_or_else(|| here.join(&file_name))
                    .display()
                    .to_string(),
            };
            self.path_prompt = Some(path_prompt::PathPrompt::new(purpose, suggested).then(then));
            return;
        }
        let picked = match purpose {
            PathPurpose::Open | PathPurpose::Import => files::pick_open(purpose.title()),
            PathPurpose::SaveAs | PathPurpose::Export | PathPurpose::AddToCases => {
                files::pick_save(purpose.title(), &file_name)
            }
        };
        if let Some(path) = picked {
            self.apply(purpose.command(path), ctx);
            if let Some(then) = then {
                self.apply(then, ctx);
            }
        }
    }

    pub(super) fn after_structure_change(&mut self) {
        if self
            .session
            .inspected
            .is_some_and(|n| self.document.snarl.get_node(n).is_none())
        {
            self.session.inspected = None;
        }
        self.inspector.clear();
    }

    /// Whether Open, Save As, Import and Export use the platform's file dialogs (when not
    /// set, found out once per process, in the background as the app starts) or the in-app
    /// path prompt.
    pub fn set_native_file_dialogs(&mut self, available: bool) {
        self.prompts.native_dialogs = Some(available);
    }
}

/// The assistant's edits: served, then applied as the person's own, one undo step each.
impl App {
    /// File → "Let an assistant edit this graph…": serves the open document and shows how
    /// to connect.
    pub(crate) fn open_assistant_edit(&mut self, ctx: &egui::Context) {
        let with = assistant_edit::StartWith {
            runtime: self.runtime.as_ref(),
            store: self.store.clone(),
            workspace: self.run_workspace(),
            catalog: self.catalog.clone(),
            catalog_problems: self.problems.mcp.clone(),
            path: self.document.path.clone(),
            trust_store: self.trust_store.clone(),
        };
        self.windows.assistant_edit.open(with, ctx);
    }

    /// Applies the edits an assistant sent since the last frame, in order, each as one
    /// undoable step; answers its reads with the graph as shown. Runs every frame, drawn or
    /// not, after the person's own commands.
    pub(crate) fn take_assistant_edits(&mut self) {
        if !self.windows.assistant_edit.is_serving() {
            return;
        }
        self.windows.assistant_edit.follow(
            &self.catalog,
            &self.problems.mcp,
            self.document.path.as_ref(),
        );
        for incoming in self.windows.assistant_edit.take_requests() {
            match incoming {
                assistant_edit::Incoming::Read(reply) => reply.send(self.document.to_doc()),
                assistant_edit::Incoming::Edit(edit) => self.apply_assistant_edit(edit),
            }
        }
    }

    /// One edit of the assistant on the document as it is now: one undoable step.
    fn apply_assistant_edit(&mut self, edit: assistant_edit::IncomingEdit) {
        let before = self.document.to_doc();
        let Some((after, answer, reply)) = edit.run(&before) else {
            return;
        };
        if after == before {
            reply.send(answer, before);
            return;
        }
        let catalog = self.catalog.clone();
        self.document.replace(&after, catalog.as_ref());
        let shown = self.document.to_doc();
        self.windows
            .assistant_edit
            .highlight_changes(&before, &shown);
        reply.send(answer, shown);
    }
}

/// The name of a graph made with File → New until it is given one.
const UNTITLED: &str = "Untitled";

/// A graph's name from its file's: `My flow.agentloom.json` → `My flow`.
fn name_from_file(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let name = [".agentloom.json", ".json"]
        .iter()
        .find_map(|ending| file.strip_suffix(ending))
        .unwrap_or(file)
        .trim();
    (!name.is_empty()).then(|| name.to_owned())
}
