//! The graph's own name and description, above the inspector when no node is shown.

use egui::RichText;

use crate::Command;
use crate::document::Document;

/// Which of the graph's fields is being typed in.
#[derive(Default)]
pub(crate) struct GraphInfoTyping {
    /// The name or description is being typed (one undo step for it).
    pub(crate) editing: bool,
    /// The field that has the keyboard.
    pub(crate) focus: Option<egui::Id>,
}

/// The graph's name and description, editable; one undo step per field edit.
pub(crate) fn graph_info_ui(
    ui: &mut egui::Ui,
    document: &Document,
    typing: &mut GraphInfoTyping,
    commands: &mut Vec<Command>,
) {
    let mut name = document.name.clone();
    let mut description = document.description.clone();
    ui.label(RichText::new("Graph").strong());
    let name_edit = ui.add(
        egui::TextEdit::singleline(&mut name)
            .hint_text("Name")
            .desired_width(f32::INFINITY),
    );
    name_edit
        .widget_info(|| egui::WidgetInfo::labeled(egui::WidgetType::TextEdit, true, "Graph name"));
    let description_edit = ui.add(
        egui::TextEdit::multiline(&mut description)
            .hint_text("What this graph does")
            .desired_rows(3)
            .desired_width(f32::INFINITY),
    );
    description_edit.widget_info(|| {
        egui::WidgetInfo::labeled(egui::WidgetType::TextEdit, true, "Graph description")
    });
    // Another field (or none) takes the keyboard: its typing is a new undo step.
    let focused = [&name_edit, &description_edit]
        .into_iter()
        .find(|r| r.has_focus())
        .map(|r| r.id);
    if focused != typing.focus {
        typing.focus = focused;
        typing.editing = false;
    }
    if name_edit.changed() || description_edit.changed() {
        commands.push(Command::SetGraphInfo { name, description });
    }
}
