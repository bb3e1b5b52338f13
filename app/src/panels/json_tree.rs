//! A value as a collapsible JSON tree: objects and lists fold; an open one has a Copy button
//! that puts the JSON of that part on the clipboard.

use egui::{RichText, Ui};
use serde_json::Value;

use crate::theme;

/// How many children of one object or list are listed; the rest are counted.
const SHOWN_CHILDREN: usize = 200;

/// Shows `value` under `name`; `id` keeps each tree's folding apart.
pub fn json_tree_ui(ui: &mut Ui, id: egui::Id, name: &str, value: &Value) {
    match value {
        Value::Object(map) => branch(
            ui,
            id,
            name,
            value,
            &format!("{{…}} {} keys", map.len()),
            |ui| {
                for (key, child) in map.iter().take(SHOWN_CHILDREN) {
                    json_tree_ui(ui, id.with(key), key, child);
                }
                more(ui, map.len());
            },
        ),
        Value::Array(items) => branch(
            ui,
            id,
            name,
            value,
            &format!("[…] {} items", items.len()),
            |ui| {
                for (index, child) in items.iter().take(SHOWN_CHILDREN).enumerate() {
                    json_tree_ui(ui, id.with(index), &index.to_string(), child);
                }
                more(ui, items.len());
            },
        ),
        leaf => {
            let text = match leaf {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new(format!("{name}:")).color(theme::TEXT_WEAK));
                ui.label(RichText::new(text).monospace());
            });
        }
    }
}

fn branch(
    ui: &mut Ui,
    id: egui::Id,
    name: &str,
    value: &Value,
    summary: &str,
    children: impl FnOnce(&mut Ui),
) {
    egui::CollapsingHeader::new(format!("{name} {summary}"))
        .id_salt(id)
        .default_open(false)
        .show(ui, |ui| {
            if ui
                .small_button("Copy")
                .on_hover_text(format!("Copy {name} as JSON"))
                .clicked()
            {
                ui.ctx()
                    .copy_text(serde_json::to_string_pretty(value).unwrap_or_default());
            }
            children(ui);
        });
}

fn more(ui: &mut Ui, count: usize) {
    if count > SHOWN_CHILDREN {
        ui.label(
            RichText::new(format!("… {} more", count - SHOWN_CHILDREN)).color(theme::TEXT_WEAK),
        );
    }
}
