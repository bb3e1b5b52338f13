//! Editing a node's pinned outputs in the inspector: a JSON object, one key per output,
//! applied as one undoable edit; text that is not such an object is refused with the reason.

use std::collections::HashMap;

use agentloom_core::{PortSpec, Value, ValueMap};
use egui::{RichText, Ui};
use egui_snarl::NodeId;

use crate::Command;
use crate::theme;

/// The text being edited per node, and why the last Apply was refused.
#[derive(Default)]
pub struct PinnedEditor {
    buffers: HashMap<NodeId, String>,
    errors: HashMap<NodeId, String>,
}

impl PinnedEditor {
    pub fn clear(&mut self) {
        self.buffers.clear();
        self.errors.clear();
    }
}

/// `pinned` as the JSON object shown for editing.
fn as_text(pinned: &ValueMap) -> String {
    let object: serde_json::Map<String, serde_json::Value> = pinned
        .iter()
        .map(|(port, value)| (port.clone(), value.to_json()))
        .collect();
    serde_json::to_string_pretty(&object).unwrap_or_default()
}

/// Reads edited pinned outputs: a JSON object whose keys are outputs of the node.
pub fn parse(text: &str, outputs: &[PortSpec]) -> Result<ValueMap, String> {
    let json: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| format!("Not saved: not valid JSON ({e}). Fix it and apply again."))?;
    let serde_json::Value::Object(object) = json else {
        return Err(
            "Not saved: pinned outputs are a JSON object, one key per output, e.g. {\"text\": \"hi\"}."
                .to_owned(),
        );
    };
    let mut pinned = ValueMap::new();
    for (port, value) in object {
        if !outputs.iter().any(|p| p.name == port) {
            let names: Vec<String> = outputs.iter().map(|p| format!("`{}`", p.name)).collect();
            return Err(format!(
                "Not saved: this node has no output `{port}`; it has {}.",
                names.join(", ")
            ));
        }
        pinned.insert(port, Value::from_json(value));
    }
    Ok(pinned)
}

/// The pinned outputs of node `node_id` as editable JSON, with Apply.
pub fn pinned_ui(
    ui: &mut Ui,
    editor: &mut PinnedEditor,
    node_id: NodeId,
    pinned: &ValueMap,
    outputs: &[PortSpec],
    commands: &mut Vec<Command>,
) {
    ui.separator();
    let label = ui.label(RichText::new("Pinned outputs").strong());
    ui.label(
        RichText::new("Runs use these instead of running the node. Edit the JSON, then Apply.")
            .small()
            .color(theme::TEXT_WEAK),
    );
    let buffer = editor
        .buffers
        .entry(node_id)
        .or_insert_with(|| as_text(pinned));
    let edit = egui::TextEdit::multiline(buffer)
        .desired_rows(3)
        .code_editor()
        .desired_width(f32::INFINITY);
    ui.add(edit).labelled_by(label.id);
    if ui.button("Apply pinned outputs").clicked() {
        match parse(buffer, outputs) {
            Ok(edited) => {
                editor.errors.remove(&node_id);
                if edited != *pinned {
                    commands.push(Command::SetPinned {
                        node: node_id,
                        outputs: edited,
                    });
                }
            }
            Err(message) => {
                editor.errors.insert(node_id, message);
            }
        }
    }
    if let Some(message) = editor.errors.get(&node_id) {
        ui.label(RichText::new(message).color(theme::ERROR));
    }
}
