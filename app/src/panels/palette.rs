//! The block palette: searchable, grouped by category, each block with its description.
//! Click a block to add it in the middle of the view, or drag it onto the canvas.

use agentloom_core::{BlockCatalog, GraphDoc, NodeDoc};
use egui::{RichText, Sense, Ui};

use crate::Command;
use crate::canvas::model::{PaletteDrag, PaletteEntry, search_entries};
use crate::theme;

/// Every block of the catalog, sorted by category then title.
pub fn entries(catalog: &dyn BlockCatalog) -> Vec<PaletteEntry> {
    let probe = GraphDoc::new("palette");
    let mut entries: Vec<PaletteEntry> = catalog
        .blocks()
        .into_iter()
        .map(|block| {
            let meta = block.meta();
            let mut entry = PaletteEntry {
                kind: meta.kind.clone(),
                title: meta.title.clone(),
                category: meta.category.clone(),
                description: meta.description.clone(),
                inputs: Vec::new(),
                outputs: Vec::new(),
            };
            // A new node (a constant's value null until written) shows the block's ports to
            // the wire-drop search.
            if let Some(node) = new_node(&entry, &probe, catalog)
                && let Ok((_, imp)) = agentloom_core::instantiate_node(0, &node, catalog)
            {
                entry.inputs = imp.ports().inputs.clone();
                entry.outputs = crate::document::every_output(
                    imp.ports(),
                    crate::document::has_interface_name(meta),
                );
            }
            entry
        })
        .collect();
    entries.sort_by(|a, b| {
        a.category
            .cmp(&b.category)
            .then_with(|| a.title.cmp(&b.title))
    });
    entries
}

/// A new node of `entry`'s kind with its config defaults and an id fresh in `doc`.
pub fn new_node(
    entry: &PaletteEntry,
    doc: &GraphDoc,
    catalog: &dyn BlockCatalog,
) -> Option<NodeDoc> {
    new_node_for_pin(entry, doc, catalog, None)
}

/// [`new_node`] made from a pin (a wire dropped on empty canvas): a block that is named
/// (a graph input or output) takes the pin's name, so an input made for `goal` is `goal`.
pub fn new_node_for_pin(
    entry: &PaletteEntry,
    doc: &GraphDoc,
    catalog: &dyn BlockCatalog,
    pin_name: Option<&str>,
) -> Option<NodeDoc> {
    let block = catalog.block(&entry.kind)?;
    let named = crate::document::has_interface_name(block.meta());
    let kind_base = entry.kind.rsplit('.').next().unwrap_or(&entry.kind);
    let base = pin_name.filter(|_| named).unwrap_or(kind_base);
    let mut node = NodeDoc::new(doc.fresh_node_id(base), entry.kind.clone());
    for field in &block.meta().config {
        if let Some(default) = &field.default {
            node.config.insert(field.name.clone(), default.clone());
        }
    }
    if named {
        node.config.insert(
            "name".to_owned(),
            serde_json::Value::String(node.id.clone()),
        );
    }
    // A constant shows its output (and takes wires) before its value is written.
    Some(with_required_nulls(node, catalog))
}

/// `node` with each required field it lacks set to null, when its block then configures:
/// a block added from the palette or at a dropped wire has ports to wire (a constant's
/// output) while its value is still to be written. Otherwise `node` as it was.
fn with_required_nulls(node: NodeDoc, catalog: &dyn BlockCatalog) -> NodeDoc {
    let Some(block) = catalog.block(&node.block) else {
        return node;
    };
    let mut probed = node.clone();
    for field in block.meta().config.iter().filter(|f| f.required) {
        if !probed.config.contains_key(&field.name) {
            probed
                .config
                .insert(field.name.clone(), serde_json::Value::Null);
        }
    }
    if agentloom_core::instantiate_node(0, &probed, catalog).is_ok() {
        probed
    } else {
        node
    }
}

/// The palette panel.
pub fn palette_ui(
    ui: &mut Ui,
    entries: &[PaletteEntry],
    search: &mut String,
    commands: &mut Vec<Command>,
) {
    ui.add_space(f32::from(theme::PAD));
    ui.heading("Blocks");
    let response = ui.add(
        egui::TextEdit::singleline(search)
            .hint_text("Search blocks")
            .desired_width(f32::INFINITY),
    );
    response.widget_info(|| {
        egui::WidgetInfo::labeled(egui::WidgetType::TextEdit, true, "Search blocks")
    });
    ui.add_space(4.0);
    let found = search_entries(entries, search);
    let grouped = search.trim().is_empty();
    if found.is_empty() {
        ui.label(
            RichText::new(format!("No block matches “{}”.", search.trim())).color(theme::TEXT_WEAK),
        );
    }
    egui::ScrollArea::vertical()
        .id_salt("palette")
        .show(ui, |ui| {
            let mut category = "";
            for entry in found {
                // Ranked results are not grouped.
                if grouped && entry.category != category {
                    category = &entry.category;
                    ui.add_space(6.0);
                    ui.label(
                        RichText::new(category.to_uppercase())
                            .small()
                            .strong()
                            .color(theme::TEXT_WEAK),
                    );
                }
                let response = ui
                    .add(
                        egui::Button::new(RichText::new(&entry.title))
                            .min_size(egui::vec2(ui.available_width(), 0.0))
                            .sense(Sense::click_and_drag()),
                    )
                    .on_hover_text(format!("{}\n\n{}", entry.kind, entry.description));
                if response.clicked() {
                    commands.push(Command::AddBlock {
                        kind: entry.kind.clone(),
                        pos: None,
                    });
                }
                if response.drag_started() {
                    egui::DragAndDrop::set_payload(ui.ctx(), PaletteDrag(entry.kind.clone()));
                }
                if response.dragged() {
                    ui.ctx().set_cursor_icon(egui::CursorIcon::Grabbing);
                }
            }
        });
}
