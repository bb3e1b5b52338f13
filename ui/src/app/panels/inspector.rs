//! The inspector: the selected node's configuration form, generated from its block's config
//! field list (text, multiline, template, number, bool, choice, type, JSON, credential).
//!
//! Credential fields pick from the stored credentials; the `model` field of a block talking
//! to Ollama offers the models that Ollama has installed (asked off the UI thread, cached
//! per base URL).

use std::collections::HashMap;
use std::sync::mpsc;

use agentloom_core::{BlockCatalog, ConfigField, FieldKind, ValueType};
use agentloom_engine::NodeProgress;
use agentloom_engine::credentials::CredentialInfo;
use egui::{RichText, Ui};
use egui_snarl::NodeId;

use crate::app::Command;
use crate::app::document::CanvasNode;
use crate::app::theme;

/// What the inspector keeps between frames.
#[derive(Default)]
pub struct InspectorState {
    /// Text being typed into JSON fields, kept until it parses.
    json_buffers: HashMap<(NodeId, String), String>,
    /// Credential fields switched to typing a name that is not stored (`None`: the node's
    /// own credential).
    other_credential: HashMap<(NodeId, Option<String>), bool>,
    /// The models of each Ollama asked, by base URL.
    models: HashMap<String, Models>,
    /// Pinned outputs being edited.
    pinned: super::pinned::PinnedEditor,
}

impl InspectorState {
    pub fn clear(&mut self) {
        self.json_buffers.clear();
        self.other_credential.clear();
        self.pinned.clear();
    }
}

/// The models an Ollama has installed, as far as known.
enum Models {
    Loading(mpsc::Receiver<Result<Vec<String>, String>>),
    Ready(Vec<String>),
    Failed(String),
}

/// The inspector panel for `node`.
#[allow(
    clippy::too_many_arguments,
    reason = "the panel reads several parts of the app"
)]
pub fn inspector_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node_id: NodeId,
    node: &CanvasNode,
    run: Option<&NodeProgress>,
    catalog: &dyn BlockCatalog,
    credentials: &[CredentialInfo],
    commands: &mut Vec<Command>,
) {
    let Some(block) = catalog.block(&node.doc.block) else {
        ui.label(RichText::new(format!("Unknown block `{}`", node.doc.block)).color(theme::ERROR));
        return;
    };
    let meta = block.meta();
    ui.heading(&meta.title);
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
    // Blocks whose config has a credential field read the name from there; the node's own
    // credential is offered only to blocks without one.
    let has_credential_field = meta
        .config
        .iter()
        .any(|f| matches!(f.kind, FieldKind::Credential { .. }));
    if let Some(provider) = meta.credential.as_ref().filter(|_| !has_credential_field) {
        ui.separator();
        let label = ui.label(RichText::new(format!("Credential ({provider})")).strong());
        let other = state.other_credential.entry((node_id, None)).or_default();
        let picked = credential_picker_ui(
            ui,
            ("node_credential", node_id),
            label.id,
            node.doc.credential.as_deref(),
            provider,
            credentials,
            other,
            commands,
        );
        if let Some(name) = picked {
            commands.push(Command::SetCredential {
                node: node_id,
                name,
            });
        }
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
    if let Some(run) = run {
        ui.separator();
        crate::app::run_panel::node_run_ui(ui, run);
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
        // A `provider` choice in the same config (LLM blocks) says whose key is wanted.
        let provider = node
            .doc
            .config
            .get("provider")
            .and_then(|v| v.as_str())
            .filter(|p| !p.is_empty())
            .unwrap_or(provider);
        let other = state
            .other_credential
            .entry((node_id, Some(field.name.clone())))
            .or_default();
        let picked = credential_picker_ui(
            ui,
            ("field_credential", node_id),
            label_id,
            current.and_then(|v| v.as_str()),
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
            let mut text = current
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned();
            let edit = egui::TextEdit::singleline(&mut text).desired_width(f32::INFINITY);
            if ui.add(edit).labelled_by_name(&field.label).changed() {
                set(Some(serde_json::Value::String(text)));
            }
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
            if ui.add(edit).labelled_by_name(&field.label).changed() {
                set(Some(serde_json::Value::String(text)));
            }
        }
        // An unset field shows the block's default, inside the field's range, so that only an
        // edit writes it: the value shown is never saved merely by being looked at.
        FieldKind::Number { min, max } => {
            let (low, high) = (
                min.unwrap_or(f64::NEG_INFINITY),
                max.unwrap_or(f64::INFINITY),
            );
            let shown = shown
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.0)
                .clamp(low, high);
            let mut value = shown;
            if ui
                .add(
                    egui::DragValue::new(&mut value)
                        .range(low..=high)
                        .speed(0.1),
                )
                .changed()
                && value != shown
            {
                set(serde_json::Number::from_f64(value).map(serde_json::Value::Number));
            }
        }
        FieldKind::Integer { min, max } => {
            let (low, high) = (min.unwrap_or(i64::MIN), max.unwrap_or(i64::MAX));
            let shown = shown
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0)
                .clamp(low, high);
            let mut value = shown;
            if ui
                .add(egui::DragValue::new(&mut value).range(low..=high))
                .changed()
                && value != shown
            {
                set(Some(serde_json::Value::from(value)));
            }
        }
        FieldKind::Bool => {
            let mut value = shown.and_then(serde_json::Value::as_bool).unwrap_or(false);
            if ui.checkbox(&mut value, &field.label).changed() {
                set(Some(serde_json::Value::Bool(value)));
            }
        }
        FieldKind::Choice { options } => {
            let selected = shown
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned();
            egui::ComboBox::from_id_salt(("choice", node_id, &field.name))
                .selected_text(&selected)
                .show_ui(ui, |ui| {
                    for option in options {
                        if ui.selectable_label(*option == selected, option).clicked() {
                            set(Some(serde_json::Value::String(option.clone())));
                        }
                    }
                })
                .response
                .labelled_by(label_id);
        }
        FieldKind::Type => {
            let selected = current
                .and_then(|v| v.as_str())
                .unwrap_or("text")
                .to_owned();
            egui::ComboBox::from_id_salt(("type", node_id, &field.name))
                .selected_text(&selected)
                .show_ui(ui, |ui| {
                    for ty in ValueType::common() {
                        let name = ty.to_string();
                        if ui.selectable_label(name == selected, &name).clicked() {
                            set(Some(serde_json::Value::String(name)));
                        }
                    }
                });
        }
        FieldKind::Json => {
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
            if ui.add(edit).labelled_by_name(&field.label).changed() {
                if buffer.trim().is_empty() {
                    set(None);
                } else if let Ok(value) = serde_json::from_str::<serde_json::Value>(buffer) {
                    set(Some(value));
                }
            }
            if !buffer.trim().is_empty()
                && serde_json::from_str::<serde_json::Value>(buffer).is_err()
            {
                ui.label(
                    RichText::new("Not valid JSON yet")
                        .small()
                        .color(theme::WARN),
                );
            }
        }
    }
}

/// A combo box of the stored credentials (those for `provider` first), "(none)", and
/// "Other…" to type a name that is not stored here (e.g. given to headless runs as an
/// environment variable). Returns the new name when one was picked.
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
    let current = current.filter(|c| !c.trim().is_empty());
    let stored = current.and_then(|c| credentials.iter().find(|info| info.name == c));
    if current.is_some() && stored.is_none() {
        *other = true;
    }
    let (matching, others): (Vec<&CredentialInfo>, Vec<&CredentialInfo>) =
        credentials.iter().partition(|c| c.provider == provider);
    let selected = match (current, stored) {
        (None, _) if *other => "Other…".to_owned(),
        (None, _) => "(none)".to_owned(),
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
            let mut item = |ui: &mut Ui, info: &CredentialInfo| {
                if ui
                    .selectable_label(current == Some(info.name.as_str()), &info.name)
                    .on_hover_text(format!(
                        "{}, {}, {}",
                        info.kind,
                        info.provider,
                        info.status(now)
                    ))
                    .clicked()
                {
                    picked = Some(Some(info.name.clone()));
                }
            };
            for info in &matching {
                item(ui, info);
            }
            if !others.is_empty() {
                ui.separator();
                ui.label(
                    RichText::new("For other providers")
                        .small()
                        .color(theme::TEXT_WEAK),
                );
                for info in &others {
                    item(ui, info);
                }
            }
            ui.separator();
            if ui
                .selectable_label(*other && stored.is_none(), "Other…")
                .on_hover_text("Type the name of a credential that is not stored here")
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
    match (current, stored) {
        (Some(name), None) => {
            ui.label(
                RichText::new(format!(
                    "Not stored here: runs need {} set, or add it under Credentials.",
                    agentloom_core::secret_env_var(name)
                ))
                .small()
                .color(theme::WARN),
            );
        }
        (Some(_), Some(info)) if info.status(now) != "ok" => {
            ui.label(RichText::new(info.status(now)).small().color(theme::WARN));
        }
        _ => {}
    }
    if ui.small_button("Manage credentials…").clicked() {
        commands.push(Command::OpenCredentials);
    }
    picked
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

/// Asks the Ollama at `base` for its models on a thread of its own.
fn fetch_models(ctx: &egui::Context, base: &str) -> Models {
    let (tx, rx) = mpsc::channel();
    let base = base.to_owned();
    let ctx = ctx.clone();
    let spawned = std::thread::Builder::new()
        .name("agentloom-models".to_owned())
        .spawn(move || {
            let result = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime
                    .block_on(agentloom_blocks::list_local_ollama_models(&base))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("could not start the network runtime: {e}")),
            };
            // The inspector may be gone: nothing to tell then.
            let _ = tx.send(result);
            ctx.request_repaint();
        });
    match spawned {
        Ok(_) => Models::Loading(rx),
        Err(e) => Models::Failed(format!("could not ask Ollama for its models: {e}")),
    }
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
    let ctx = ui.ctx().clone();
    let models = state
        .models
        .entry(base.to_owned())
        .or_insert_with(|| fetch_models(&ctx, base));
    if let Models::Loading(rx) = models {
        match rx.try_recv() {
            Ok(Ok(list)) => *models = Models::Ready(list),
            Ok(Err(e)) => *models = Models::Failed(e),
            Err(mpsc::TryRecvError::Empty) => {}
            Err(mpsc::TryRecvError::Disconnected) => {
                *models = Models::Failed("the model list could not be fetched".to_owned());
            }
        }
    }
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
            Models::Loading(_) => {
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
        if !matches!(models, Models::Loading(_)) {
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
        state
            .models
            .insert(base.to_owned(), fetch_models(&ctx, base));
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
        json.as_object().cloned().unwrap_or_default()
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
