//! The inspector: the selected node's configuration form, generated from its block's config
//! field list (text, multiline, template, number, bool, choice, type, JSON, credential).
//!
//! Numbers are typed as text: an unset one stays empty with its default as the hint. Long
//! text and JSON values scroll in an editor of bounded height. Credential fields pick from
//! the stored credentials and those given as `AGENTLOOM_SECRET_<NAME>`; the `model` field of
//! a block talking to Ollama offers the models that Ollama has installed (asked by a
//! background task, see [`crate::tasks`], cached per base URL).

use std::collections::{HashMap, HashSet};

use agentloom_core::{BlockCatalog, ConfigField, FieldKind, ValueType};
use agentloom_engine::credentials::CredentialInfo;
use agentloom_engine::{NodeProgress, NodeStatus};
use egui::{RichText, Ui};
use egui_snarl::NodeId;

use crate::Command;
use crate::document::CanvasNode;
use crate::tasks::{BackgroundTasks, Report, Task};
use crate::theme;

/// What the inspector keeps between frames.
#[derive(Default)]
pub struct InspectorState {
    /// Text being typed into JSON fields, kept until it parses.
    json_buffers: HashMap<(NodeId, String), String>,
    /// Text typed into number fields, kept while it is being edited or is not a number.
    number_buffers: HashMap<(NodeId, String), String>,
    /// Credential fields switched to typing a name that is not stored (`None`: the node's
    /// own credential).
    other_credential: HashMap<(NodeId, Option<String>), bool>,
    /// The models of each Ollama asked, by base URL.
    models: HashMap<String, Models>,
    /// The Ollamas whose models the inspector showed since the app's logic last looked.
    models_shown: HashSet<String>,
    /// Pinned outputs being edited.
    pinned: super::pinned::PinnedEditor,
    /// The tab shown.
    tab: InspectorTab,
    /// The node inspected last frame, the run shown and whether it had reached the node.
    seen_run: Option<(NodeId, String, bool)>,
    /// The steps trace of the Last run tab.
    trace: super::agent_trace::TraceState,
}

impl InspectorState {
    pub fn clear(&mut self) {
        self.json_buffers.clear();
        self.number_buffers.clear();
        self.other_credential.clear();
        self.pinned.clear();
        self.trace.clear();
    }
}

/// The models an Ollama has installed, as far as known.
enum Models {
    /// To be asked (by the app's logic, before the next frame).
    Wanted,
    /// Being asked; dropping the task stops asking.
    Loading {
        _asking: Task,
    },
    Ready(Vec<String>),
    Failed(String),
}

impl InspectorState {
    /// Asks the Ollamas whose models are wanted, and stops asking those the inspector no
    /// longer shows (another node inspected, the field gone).
    pub(crate) fn ask_models(&mut self, tasks: &mut BackgroundTasks) {
        let shown = std::mem::take(&mut self.models_shown);
        self.models.retain(|base, models| {
            !matches!(models, Models::Loading { .. }) || shown.contains(base)
        });
        for (base, models) in &mut self.models {
            if !matches!(models, Models::Wanted) {
                continue;
            }
            let asked = base.clone();
            let lost_base = base.clone();
            let lost = move |why: String| Report::Models {
                base: lost_base,
                listed: Err(format!("the model list could not be fetched: {why}")),
            };
            *models = match tasks.spawn(
                move |_, _| async move {
                    let listed = agentloom_blocks::list_local_ollama_models(&asked)
                        .await
                        .map_err(|e| e.to_string());
                    Report::Models {
                        base: asked,
                        listed,
                    }
                },
                lost,
            ) {
                Ok(task) => Models::Loading { _asking: task },
                Err(e) => Models::Failed(format!("could not ask Ollama for its models: {e}")),
            };
        }
    }

    /// What the Ollama at `base` answered.
    pub(crate) fn models_listed(&mut self, base: &str, listed: Result<Vec<String>, String>) {
        if let Some(models) = self.models.get_mut(base) {
            *models = match listed {
                Ok(list) => Models::Ready(list),
                Err(why) => Models::Failed(why),
            };
        }
    }
}

/// The inspector's two tabs, as n8n splits them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InspectorTab {
    /// The node's fields.
    #[default]
    Configure,
    /// What the node did in the run shown: state, outputs, error, usage, steps.
    LastRun,
}

/// The run shown, as far as the inspected node is concerned.
pub struct LastRun<'a> {
    /// What the run said of the node (`None`: nothing).
    pub node: Option<&'a NodeProgress>,
    /// The run's id (empty until it is known).
    pub run_key: &'a str,
    /// The node is working now, in the live run.
    pub live: bool,
}

/// The inspector panel for `node`: its title, then Configure | Last run. Last run opens by
/// itself when a run reaches the node, unless a text field has the keyboard.
#[allow(
    clippy::too_many_arguments,
    reason = "the panel reads several parts of the app"
)]
pub fn inspector_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node_id: NodeId,
    node: &CanvasNode,
    last_run: LastRun<'_>,
    catalog: &dyn BlockCatalog,
    credentials: &[CredentialInfo],
    commands: &mut Vec<Command>,
    sub_runs: impl FnOnce(&mut Ui),
) {
    let Some(block) = catalog.block(&node.doc.block) else {
        ui.label(RichText::new(format!("Unknown block `{}`", node.doc.block)).color(theme::ERROR));
        return;
    };
    let meta = block.meta();
    ui.heading(&meta.title);
    follow_run(ui, state, node_id, &last_run);
    ui.horizontal(|ui| {
        ui.selectable_value(&mut state.tab, InspectorTab::Configure, "Configure");
        ui.selectable_value(&mut state.tab, InspectorTab::LastRun, "Last run");
    });
    ui.separator();
    match state.tab {
        InspectorTab::Configure => {
            egui::ScrollArea::vertical()
                .id_salt("inspector")
                .auto_shrink(false)
                .show(ui, |ui| {
                    configure_ui(ui, state, node_id, node, meta, credentials, commands);
                });
        }
        InspectorTab::LastRun => last_run_ui(ui, state, &node.doc.id, &last_run, sub_runs),
    }
}

/// Opens Last run when the run shown reaches the node (it starts, or another run with it
/// is shown), unless the person is typing in a field.
fn follow_run(ui: &Ui, state: &mut InspectorState, node_id: NodeId, last_run: &LastRun<'_>) {
    let reached = last_run
        .node
        .is_some_and(|n| n.status != NodeStatus::Pending);
    let seen = (node_id, last_run.run_key.to_owned(), reached);
    if let Some((node, run, was_reached)) = &state.seen_run
        && *node == node_id
        && reached
        && (!was_reached || *run != last_run.run_key)
        && !ui.ctx().egui_wants_keyboard_input()
    {
        state.tab = InspectorTab::LastRun;
    }
    state.seen_run = Some(seen);
}

/// The Last run tab: a head that stays in view (state, time, usage, Copy), then the node's
/// steps, outputs, error and inputs, whole, in a scroll area that fills the rest.
fn last_run_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node: &str,
    last_run: &LastRun<'_>,
    sub_runs: impl FnOnce(&mut Ui),
) {
    let Some(run) = last_run
        .node
        .filter(|r| r.status != NodeStatus::Pending || r.cancelled)
    else {
        ui.label(
            RichText::new("Not run yet. Run the graph (Ctrl+Enter) to see what this block does.")
                .color(theme::TEXT_WEAK),
        );
        sub_runs(ui);
        return;
    };
    crate::run_panel::node_run_header_ui(ui, run);
    ui.separator();
    egui::ScrollArea::vertical()
        .id_salt(("last_run", node))
        .auto_shrink(false)
        .show(ui, |ui| {
            let steps = super::agent_trace::steps_of(run);
            let hidden: &[&str] = if steps.is_some() {
                &["transcript", "steps"]
            } else {
                &[]
            };
            if let Some(steps) = &steps {
                super::agent_trace::trace_ui(
                    ui,
                    &mut state.trace,
                    last_run.run_key,
                    node,
                    steps,
                    last_run.live,
                );
            }
            crate::run_panel::node_run_ui(ui, run, hidden);
            sub_runs(ui);
        });
}

/// The Configure tab: what the block does, its id and label, its fields, its ports and
/// pinned outputs.
fn configure_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node_id: NodeId,
    node: &CanvasNode,
    meta: &agentloom_core::BlockMeta,
    credentials: &[CredentialInfo],
    commands: &mut Vec<Command>,
) {
    ui.label(RichText::new(&meta.description).color(theme::TEXT_WEAK));
    ui.add_space(4.0);
    egui::Grid::new("inspector_head")
        .num_columns(2)
        .spacing([8.0, 4.0])
        .show(ui, |ui| {
            ui.label("Id");
            ui.label(RichText::new(&node.doc.id).monospace());
            ui.end_row();
            ui.label("Label");
            let mut label = node.doc.label.clone().unwrap_or_default();
            if ui
                .add(egui::TextEdit::singleline(&mut label).hint_text(&node.doc.id))
                .changed()
            {
                commands.push(Command::SetLabel {
                    node: node_id,
                    label: (!label.trim().is_empty()).then_some(label),
                });
            }
            ui.end_row();
        });
    ui.separator();
    for field in &meta.config {
        field_ui(ui, state, node_id, node, field, credentials, commands);
    }
    if let Some(problem) = &node.config_problem {
        ui.label(RichText::new(problem).color(theme::ERROR));
    }
    ui.separator();
    ui.label(RichText::new("Ports").strong());
    for port in &node.inputs {
        ui.label(
            RichText::new(format!(
                "in  {}: {}{}",
                port.name,
                port.ty,
                if port.required { "" } else { " (optional)" }
            ))
            .small(),
        );
    }
    for port in &node.outputs {
        ui.label(RichText::new(format!("out {}: {}", port.name, port.ty)).small());
    }
    if let Some(pinned) = &node.doc.pinned {
        super::pinned::pinned_ui(
            ui,
            &mut state.pinned,
            node_id,
            pinned,
            &node.outputs,
            commands,
        );
    }
}

fn field_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node_id: NodeId,
    node: &CanvasNode,
    field: &ConfigField,
    credentials: &[CredentialInfo],
    commands: &mut Vec<Command>,
) {
    let current = node.doc.config.get(&field.name);
    let label = if field.required {
        format!("{} *", field.label)
    } else {
        field.label.clone()
    };
    ui.add_space(2.0);
    let label_id = ui
        .label(RichText::new(label).strong())
        .on_hover_text(&field.help)
        .id;
    if let FieldKind::Credential { provider } = &field.kind {
        let field_of = FieldOf {
            node_id,
            node,
            field,
            label_id,
        };
        credential_field_ui(ui, state, &field_of, provider, credentials, commands);
        return;
    }
    if field.name == "model"
        && let Some(base) = ollama_base_url(&node.doc.config)
    {
        model_picker_ui(
            ui, state, node_id, label_id, field, current, &base, commands,
        );
        return;
    }
    let shown = current.or(field.default.as_ref());
    let mut set = |value: Option<serde_json::Value>| {
        commands.push(Command::SetConfig {
            node: node_id,
            field: field.name.clone(),
            value,
        });
    };
    match &field.kind {
        FieldKind::Text | FieldKind::Credential { .. } => {
            line_field_ui(ui, field, current, &mut set)
        }
        FieldKind::Multiline | FieldKind::Template => {
            let mut text = current
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned();
            let edit = egui::TextEdit::multiline(&mut text)
                .desired_rows(4)
                .code_editor()
                .desired_width(f32::INFINITY);
            if bounded(ui, ("text", node_id, &field.name), edit)
                .labelled_by_name(&field.label)
                .changed()
            {
                set(Some(serde_json::Value::String(text)));
            }
        }
        // Typed as text: an unset field stays empty (its default as the grey hint), so that
        // a value is written only when typed and clearing the field removes it.
        FieldKind::Number { min, max } => {
            let range = NumberRange::Real(*min, *max);
            number_field_ui(ui, state, node_id, field, current, range, &mut set);
        }
        FieldKind::Integer { min, max } => {
            let range = NumberRange::Whole(*min, *max);
            number_field_ui(ui, state, node_id, field, current, range, &mut set);
        }
        FieldKind::Bool => {
            let mut value = shown.and_then(serde_json::Value::as_bool).unwrap_or(false);
            // The heading above names it; a text beside the box would say it twice.
            let tick = ui.checkbox(&mut value, "");
            let (enabled, ticked, name) = (ui.is_enabled(), value, field.label.clone());
            tick.widget_info(|| {
                egui::WidgetInfo::selected(egui::WidgetType::Checkbox, enabled, ticked, &name)
            });
            if tick.changed() {
                set(Some(serde_json::Value::Bool(value)));
            }
        }
        FieldKind::Choice { options } => {
            let selected = shown.and_then(|v| v.as_str()).unwrap_or_default();
            let names = options.iter().map(String::as_str);
            choice_ui(
                ui,
                ("choice", node_id, &field.name),
                selected,
                names,
                &mut set,
            )
            .labelled_by(label_id);
        }
        FieldKind::Type => {
            let selected = current.and_then(|v| v.as_str()).unwrap_or("text");
            let names: Vec<String> = ValueType::common().iter().map(|t| t.to_string()).collect();
            let names = names.iter().map(String::as_str);
            choice_ui(
                ui,
                ("type", node_id, &field.name),
                selected,
                names,
                &mut set,
            );
        }
        FieldKind::Json => json_field_ui(ui, state, node_id, field, current, &mut set),
    }
}

/// Which field of which node a part of the form is for.
struct FieldOf<'a> {
    node_id: NodeId,
    node: &'a CanvasNode,
    field: &'a ConfigField,
    /// The field's heading, which names its widgets.
    label_id: egui::Id,
}

/// A credential field: the picker, for the provider the node's config names.
fn credential_field_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    of: &FieldOf<'_>,
    provider: &str,
    credentials: &[CredentialInfo],
    commands: &mut Vec<Command>,
) {
    let (node_id, field) = (of.node_id, of.field);
    // A `provider` choice in the same config (LLM blocks) says whose key is wanted.
    let provider = (of.node.doc.config.get("provider"))
        .and_then(|v| v.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or(provider);
    let other = state
        .other_credential
        .entry((node_id, Some(field.name.clone())))
        .or_default();
    let picked = credential_picker_ui(
        ui,
        // One per field: an agent has a model and a search credential.
        ("field_credential", node_id, &field.name),
        of.label_id,
        of.node.doc.config.get(&field.name).and_then(|v| v.as_str()),
        provider,
        credentials,
        other,
        commands,
    );
    if let Some(name) = picked {
        commands.push(Command::SetConfig {
            node: node_id,
            field: field.name.clone(),
            value: name.map(serde_json::Value::String),
        });
    }
}

/// A one-line value that wraps at the panel's width, so a long one (a list of tools) shows
/// whole: Enter adds no line and a pasted line break is dropped.
fn line_field_ui(
    ui: &mut Ui,
    field: &ConfigField,
    current: Option<&serde_json::Value>,
    set: &mut impl FnMut(Option<serde_json::Value>),
) {
    let mut text = current
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned();
    let edit = egui::TextEdit::multiline(&mut text)
        .desired_rows(1)
        .return_key(None)
        .desired_width(f32::INFINITY);
    let response = ui.add(edit).labelled_by_name(&field.label);
    ui.ctx().accesskit_node_builder(response.id, |node| {
        node.set_role(egui::accesskit::Role::TextInput);
    });
    if response.changed() {
        let line = text.replace(['\r', '\n'], "");
        set(Some(serde_json::Value::String(line)));
    }
}

/// A combo box of `names`, `selected` shown; picking one sets it.
fn choice_ui<'a>(
    ui: &mut Ui,
    id_salt: impl std::hash::Hash + std::fmt::Debug,
    selected: &str,
    names: impl Iterator<Item = &'a str>,
    set: &mut impl FnMut(Option<serde_json::Value>),
) -> egui::Response {
    egui::ComboBox::from_id_salt(id_salt)
        .selected_text(selected)
        .show_ui(ui, |ui| {
            for name in names {
                if ui.selectable_label(name == selected, name).clicked() {
                    set(Some(serde_json::Value::String(name.to_owned())));
                }
            }
        })
        .response
}

/// A JSON value, typed as text and kept until it parses; emptied, the field is unset.
fn json_field_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node_id: NodeId,
    field: &ConfigField,
    current: Option<&serde_json::Value>,
    set: &mut impl FnMut(Option<serde_json::Value>),
) {
    let key = (node_id, field.name.clone());
    let buffer = state.json_buffers.entry(key).or_insert_with(|| {
        current.map_or_else(String::new, |v| {
            serde_json::to_string_pretty(v).unwrap_or_default()
        })
    });
    let edit = egui::TextEdit::multiline(buffer)
        .desired_rows(2)
        .code_editor()
        .desired_width(f32::INFINITY);
    if bounded(ui, ("json", node_id, &field.name), edit)
        .labelled_by_name(&field.label)
        .changed()
    {
        if buffer.trim().is_empty() {
            set(None);
        } else if let Ok(value) = serde_json::from_str::<serde_json::Value>(buffer) {
            set(Some(value));
        }
    }
    if !buffer.trim().is_empty() && serde_json::from_str::<serde_json::Value>(buffer).is_err() {
        ui.label(
            RichText::new("Not valid JSON yet")
                .small()
                .color(theme::WARN),
        );
    }
}

/// `edit` in a scroll area no taller than about a third of the inspector's view, so that a
/// long value scrolls in its own field and what follows it (the last run) stays in view.
fn bounded(
    ui: &mut Ui,
    id_salt: impl std::hash::Hash + std::fmt::Debug,
    edit: egui::TextEdit<'_>,
) -> egui::Response {
    let max_height = (ui.clip_rect().height() * 0.35).clamp(80.0, 320.0);
    egui::ScrollArea::vertical()
        .id_salt(id_salt)
        .max_height(max_height)
        .show(ui, |ui| ui.add(edit))
        .inner
}

/// The values a number field takes: whole or real, with optional bounds.
#[derive(Clone, Copy)]
enum NumberRange {
    Whole(Option<i64>, Option<i64>),
    Real(Option<f64>, Option<f64>),
}

impl NumberRange {
    /// `text` as the field's value, or why it is not one.
    fn parse(self, text: &str) -> Result<serde_json::Value, String> {
        match self {
            Self::Whole(min, max) => {
                let value: i64 = text
                    .parse()
                    .map_err(|_| format!("`{text}` is not a whole number"))?;
                if let Some(min) = min.filter(|&min| value < min) {
                    return Err(format!("must be at least {min}"));
                }
                if let Some(max) = max.filter(|&max| value > max) {
                    return Err(format!("must be at most {max}"));
                }
                Ok(serde_json::Value::from(value))
            }
            Self::Real(min, max) => {
                let value: f64 = text
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite())
                    .ok_or_else(|| format!("`{text}` is not a number"))?;
                if let Some(min) = min.filter(|&min| value < min) {
                    return Err(format!("must be at least {min}"));
                }
                if let Some(max) = max.filter(|&max| value > max) {
                    return Err(format!("must be at most {max}"));
                }
                serde_json::Number::from_f64(value)
                    .map(serde_json::Value::Number)
                    .ok_or_else(|| format!("`{text}` is not a number"))
            }
        }
    }
}

/// What an empty number field means: the block's default, else the help's "Empty: …".
fn number_hint(field: &ConfigField) -> String {
    if let Some(default) = &field.default {
        return default.to_string();
    }
    field
        .help
        .split_once("Empty: ")
        .map(|(_, rest)| rest.split(['.', '(']).next().unwrap_or(rest).trim())
        .filter(|hint| !hint.is_empty())
        .unwrap_or("not set")
        .to_owned()
}

/// A number typed as text. Empty: unset (removed from the file). Text that is not a number
/// in range stays in the field with a red message and leaves the file unchanged.
fn number_field_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node_id: NodeId,
    field: &ConfigField,
    current: Option<&serde_json::Value>,
    range: NumberRange,
    set: &mut impl FnMut(Option<serde_json::Value>),
) {
    let key = (node_id, field.name.clone());
    let saved = current
        .map(serde_json::Value::to_string)
        .unwrap_or_default();
    let mut text = state
        .number_buffers
        .get(&key)
        .cloned()
        .unwrap_or_else(|| saved.clone());
    let hint = number_hint(field);
    let response = ui
        .add(
            egui::TextEdit::singleline(&mut text)
                .hint_text(hint)
                .desired_width(f32::INFINITY),
        )
        .labelled_by_name(&field.label);
    let typed = text.trim();
    let parsed = (!typed.is_empty()).then(|| range.parse(typed)).transpose();
    if response.changed() {
        if let Ok(value) = &parsed
            && value.as_ref() != current
        {
            set(value.clone());
        }
        state.number_buffers.insert(key.clone(), text.clone());
    } else if !response.has_focus() && parsed.is_ok() {
        // Done editing: show the file's value again (also after an undo).
        state.number_buffers.remove(&key);
    }
    if let Err(problem) = parsed {
        ui.label(
            RichText::new(format!(
                "{}: {problem}, so it is not saved. Correct it, or clear the field for {}.",
                field.label,
                number_hint(field)
            ))
            .small()
            .color(theme::ERROR),
        );
    }
}

/// A combo box of the stored credentials (those for `provider` first), the credentials
/// given in the environment (`AGENTLOOM_SECRET_<NAME>`, which runs read first), "(none)",
/// and "Other…" to type any name. Says where the chosen one comes from. Returns the new
/// name when one was picked.
#[allow(clippy::too_many_arguments, reason = "one picker for two places")]
fn credential_picker_ui(
    ui: &mut Ui,
    id_salt: impl std::hash::Hash + std::fmt::Debug,
    label_id: egui::Id,
    current: Option<&str>,
    provider: &str,
    credentials: &[CredentialInfo],
    other: &mut bool,
    commands: &mut Vec<Command>,
) -> Option<Option<String>> {
    use agentloom_engine::credentials::environment_credential;

    let current = current.filter(|c| !c.trim().is_empty());
    let stored = current.and_then(|c| credentials.iter().find(|info| info.name == c));
    // Runs read the environment before the keychain; a bad `_HOSTS` list is said below.
    let from_env = current.map(environment_credential);
    let in_env = matches!(from_env, Some(Ok(true)) | Some(Err(_)));
    if current.is_some() && stored.is_none() && !in_env {
        *other = true;
    }
    let (matching, others): (Vec<&CredentialInfo>, Vec<&CredentialInfo>) =
        credentials.iter().partition(|c| c.provider == provider);
    let selected = match (current, stored) {
        (None, _) if *other => "Other…".to_owned(),
        (None, _) => "(none)".to_owned(),
        (Some(name), _) if in_env => env_label(name),
        (Some(name), Some(_)) => name.to_owned(),
        (Some(name), None) => format!("{name} (not stored)"),
    };
    let now = agentloom_engine::credentials::unix_now();
    let mut picked = None;
    let mut pick_other = false;
    egui::ComboBox::from_id_salt(id_salt)
        .selected_text(selected)
        .width(180.0)
        .show_ui(ui, |ui| {
            if ui
                .selectable_label(current.is_none() && !*other, "(none)")
                .clicked()
            {
                picked = Some(None);
            }
            if let Some(name) = credential_items_ui(ui, current, &matching, &others, now) {
                picked = Some(Some(name));
            }
            ui.separator();
            if ui
                .selectable_label(*other && stored.is_none() && !in_env, "Other…")
                .on_hover_text("Type the name of a credential that is not listed here")
                .clicked()
            {
                pick_other = true;
            }
        })
        .response
        .labelled_by(label_id);
    if pick_other {
        // The name is typed from scratch.
        *other = true;
        if current.is_some() {
            picked = Some(None);
        }
    } else if picked.is_some() {
        *other = false;
    }
    if *other && picked.is_none() {
        let mut name = current.unwrap_or_default().to_owned();
        let edit = egui::TextEdit::singleline(&mut name)
            .hint_text("credential name")
            .desired_width(f32::INFINITY);
        if ui.add(edit).labelled_by_name("Credential name").changed() {
            let name = name.trim().to_owned();
            picked = Some((!name.is_empty()).then_some(name));
        }
    }
    credential_note_ui(ui, current, stored, from_env, now);
    if ui.small_button("Manage credentials…").clicked() {
        commands.push(Command::OpenCredentials);
    }
    picked
}

/// The picker's credentials: the stored ones for the provider, then those for others, then
/// those given in the environment. Returns the one clicked.
fn credential_items_ui(
    ui: &mut Ui,
    current: Option<&str>,
    matching: &[&CredentialInfo],
    others: &[&CredentialInfo],
    now: u64,
) -> Option<String> {
    let mut picked = None;
    let mut item = |ui: &mut Ui, info: &CredentialInfo| {
        if ui
            .selectable_label(current == Some(info.name.as_str()), &info.name)
            .on_hover_text(format!(
                "In the keychain: {}, {}, {}",
                info.kind,
                info.provider,
                info.status(now)
            ))
            .clicked()
        {
            picked = Some(info.name.clone());
        }
    };
    for info in matching {
        item(ui, info);
    }
    if !others.is_empty() {
        ui.separator();
        ui.label(
            RichText::new("For other providers")
                .small()
                .color(theme::TEXT_WEAK),
        );
        for info in others {
            item(ui, info);
        }
    }
    let env_names = agentloom_engine::credentials::environment_credentials();
    if !env_names.is_empty() {
        ui.separator();
        for name in env_names {
            if ui
                .selectable_label(current == Some(name.as_str()), env_label(&name))
                .on_hover_text(format!(
                    "Given to this process as {}",
                    agentloom_core::secret_env_var(&name)
                ))
                .clicked()
            {
                picked = Some(name);
            }
        }
    }
    picked
}

/// Where the credential picked comes from, when a person should know: the environment
/// first, a bad `_HOSTS` list, not stored at all, or a stored one that needs attention.
fn credential_note_ui(
    ui: &mut Ui,
    current: Option<&str>,
    stored: Option<&CredentialInfo>,
    from_env: Option<Result<bool, agentloom_core::SecretError>>,
    now: u64,
) {
    let note = |ui: &mut Ui, text: String, color| {
        ui.label(RichText::new(text).small().color(color));
    };
    match (current, stored, from_env) {
        (Some(name), _, Some(Ok(true))) => note(
            ui,
            format!(
                "{} is set in the environment: runs use it before the keychain.",
                agentloom_core::secret_env_var(name)
            ),
            theme::TEXT_WEAK,
        ),
        (Some(_), _, Some(Err(problem))) => note(ui, problem.to_string(), theme::ERROR),
        (Some(name), None, _) => note(
            ui,
            format!(
                "Not stored here: runs need {} set, or add it under Credentials.",
                agentloom_core::secret_env_var(name)
            ),
            theme::WARN,
        ),
        (Some(_), Some(info), _) if info.status(now) != "ok" => {
            note(ui, info.status(now).to_owned(), theme::WARN);
        }
        _ => {}
    }
}

/// How a credential given in the environment is named in the picker.
fn env_label(name: &str) -> String {
    format!("{name} (from environment)")
}

/// The Ollama a block talks to: `provider` = `ollama` (its default URL when `base_url` is
/// empty) or a `base_url` on Ollama's port; without a trailing `/v1`.
fn ollama_base_url(config: &agentloom_core::Config) -> Option<String> {
    let text = |key: &str| {
        config
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .trim()
    };
    let base = text("base_url");
    if text("provider") != "ollama" && !base.contains(":11434") {
        return None;
    }
    let base = if base.is_empty() {
        agentloom_blocks::OLLAMA_DEFAULT_URL
    } else {
        base
    };
    let base = base.trim_end_matches('/');
    Some(base.strip_suffix("/v1").unwrap_or(base).to_owned())
}

/// The `model` field of a block talking to Ollama: its installed models, and a text field
/// for any other name.
#[allow(clippy::too_many_arguments, reason = "a field_ui branch")]
fn model_picker_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node_id: NodeId,
    label_id: egui::Id,
    field: &ConfigField,
    current: Option<&serde_json::Value>,
    base: &str,
    commands: &mut Vec<Command>,
) {
    state.models_shown.insert(base.to_owned());
    let models = state
        .models
        .entry(base.to_owned())
        .or_insert(Models::Wanted);
    let asking = matches!(models, Models::Wanted | Models::Loading { .. });
    let mut text = current
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned();
    let mut picked = None;
    let mut refresh = false;
    ui.horizontal(|ui| {
        match &*models {
            Models::Ready(list) if !list.is_empty() => {
                let shown = if text.is_empty() {
                    "(choose a model)"
                } else {
                    text.as_str()
                };
                egui::ComboBox::from_id_salt(("model", node_id, &field.name))
                    .selected_text(shown)
                    .width(180.0)
                    .show_ui(ui, |ui| {
                        for model in list {
                            if ui.selectable_label(*model == text, model).clicked() {
                                picked = Some(model.clone());
                            }
                        }
                    })
                    .response
                    .labelled_by(label_id);
            }
            Models::Ready(_) => {
                ui.label(
                    RichText::new("Ollama has no models")
                        .small()
                        .color(theme::TEXT_WEAK),
                );
            }
            Models::Wanted | Models::Loading { .. } => {
                ui.spinner();
                ui.label(
                    RichText::new("Asking Ollama…")
                        .small()
                        .color(theme::TEXT_WEAK),
                );
            }
            Models::Failed(_) => {
                ui.label(
                    RichText::new("Ollama not reached")
                        .small()
                        .color(theme::TEXT_WEAK),
                );
            }
        }
        if !asking {
            let button = ui.small_button("⟳").on_hover_text("Ask Ollama again");
            button.widget_info(|| {
                egui::WidgetInfo::labeled(egui::WidgetType::Button, true, "Refresh models")
            });
            if button.clicked() {
                refresh = true;
            }
        }
    });
    match &*models {
        Models::Ready(list) if list.is_empty() => {
            ui.label(
                RichText::new(format!("Install one with `ollama pull llama3.2` ({base})."))
                    .small()
                    .color(theme::TEXT_WEAK),
            );
        }
        Models::Failed(why) => {
            ui.label(RichText::new(why).small().color(theme::TEXT_WEAK));
        }
        _ => {}
    }
    let edit = egui::TextEdit::singleline(&mut text)
        .hint_text("model name")
        .desired_width(f32::INFINITY);
    if ui.add(edit).labelled_by_name(&field.label).changed() {
        picked = Some(text);
    }
    if let Some(model) = picked {
        commands.push(Command::SetConfig {
            node: node_id,
            field: field.name.clone(),
            value: Some(serde_json::Value::String(model)),
        });
    }
    if refresh {
        state.models.insert(base.to_owned(), Models::Wanted);
    }
}

/// Accessibility label for a form field.
trait Labelled {
    fn labelled_by_name(self, name: &str) -> Self;
}

impl Labelled for egui::Response {
    fn labelled_by_name(self, name: &str) -> Self {
        let name = name.to_owned();
        self.widget_info(|| egui::WidgetInfo::labeled(egui::WidgetType::TextEdit, true, &name));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> agentloom_core::Config {
        json.as_object().cloned().unwrap_or_default().into()
    }

    #[test]
    fn the_ollama_asked_for_models_is_found_from_provider_or_port() {
        let url = |json| ollama_base_url(&config(json));
        assert_eq!(
            url(serde_json::json!({"provider": "ollama"})).as_deref(),
            Some(agentloom_blocks::OLLAMA_DEFAULT_URL)
        );
        assert_eq!(
            url(
                serde_json::json!({"provider": "openai", "base_url": "http://localhost:11434/v1/"})
            )
            .as_deref(),
            Some("http://localhost:11434")
        );
        assert_eq!(
            url(serde_json::json!({"provider": "ollama", "base_url": "http://gpu-box:8080"}))
                .as_deref(),
            Some("http://gpu-box:8080")
        );
        assert_eq!(url(serde_json::json!({"provider": "openai"})), None);
        assert_eq!(
            url(
                serde_json::json!({"provider": "anthropic", "base_url": "https://api.anthropic.com"})
            ),
            None
        );
    }
}
