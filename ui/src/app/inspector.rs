//! The inspector: the selected node's configuration form, generated from its block's config
//! field list (text, multiline, template, number, bool, choice, type, JSON, credential).

use std::collections::HashMap;

use agentloom_core::{BlockCatalog, ConfigField, FieldKind, ValueType};
use egui::{RichText, Ui};
use egui_snarl::NodeId;

use super::Command;
use super::document::CanvasNode;
use super::run::NodeRun;
use super::theme;

/// Text being typed into JSON fields, kept until it parses.
#[derive(Default)]
pub struct InspectorState {
    json_buffers: HashMap<(NodeId, String), String>,
}

impl InspectorState {
    pub fn clear(&mut self) {
        self.json_buffers.clear();
    }
}

/// The inspector panel for `node`.
pub fn inspector_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node_id: NodeId,
    node: &CanvasNode,
    run: Option<&NodeRun>,
    catalog: &dyn BlockCatalog,
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
        field_ui(ui, state, node_id, node, field, commands);
    }
    if let Some(problem) = &node.config_problem {
        ui.label(RichText::new(problem).color(theme::ERROR));
    }
    if let Some(provider) = &meta.credential {
        ui.separator();
        ui.label(format!("Credential ({provider})"));
        let mut name = node.doc.credential.clone().unwrap_or_default();
        if ui
            .add(egui::TextEdit::singleline(&mut name).hint_text("name of a stored credential"))
            .changed()
        {
            commands.push(Command::SetCredential {
                node: node_id,
                name: (!name.trim().is_empty()).then_some(name),
            });
        }
    }
    ui.separator();
    ui.label(RichText::new("Ports").strong());
    for port in &node.inputs {
        ui.label(
            RichText::new(format!(
                "→ {}: {}{}",
                port.name,
                port.ty,
                if port.required { "" } else { " (optional)" }
            ))
            .small(),
        );
    }
    for port in &node.outputs {
        ui.label(RichText::new(format!("← {}: {}", port.name, port.ty)).small());
    }
    if let Some(run) = run {
        ui.separator();
        super::run_panel::node_run_ui(ui, run);
    }
}

fn field_ui(
    ui: &mut Ui,
    state: &mut InspectorState,
    node_id: NodeId,
    node: &CanvasNode,
    field: &ConfigField,
    commands: &mut Vec<Command>,
) {
    let current = node.doc.config.get(&field.name);
    let label = if field.required {
        format!("{} *", field.label)
    } else {
        field.label.clone()
    };
    ui.add_space(2.0);
    ui.label(RichText::new(label).strong())
        .on_hover_text(&field.help);
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
        FieldKind::Number { min, max } => {
            let mut value = current.and_then(serde_json::Value::as_f64).unwrap_or(0.0);
            let range = min.unwrap_or(f64::NEG_INFINITY)..=max.unwrap_or(f64::INFINITY);
            if ui
                .add(egui::DragValue::new(&mut value).range(range).speed(0.1))
                .changed()
            {
                set(serde_json::Number::from_f64(value).map(serde_json::Value::Number));
            }
        }
        FieldKind::Integer { min, max } => {
            let mut value = current.and_then(serde_json::Value::as_i64).unwrap_or(0);
            let range = min.unwrap_or(i64::MIN)..=max.unwrap_or(i64::MAX);
            if ui
                .add(egui::DragValue::new(&mut value).range(range))
                .changed()
            {
                set(Some(serde_json::Value::from(value)));
            }
        }
        FieldKind::Bool => {
            let mut value = current
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false);
            if ui.checkbox(&mut value, &field.label).changed() {
                set(Some(serde_json::Value::Bool(value)));
            }
        }
        FieldKind::Choice { options } => {
            let selected = current
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
                });
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
