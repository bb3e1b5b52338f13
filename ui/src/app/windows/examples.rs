//! File → Examples: the example graphs shipped with the app, each with its description;
//! one opens as a new untitled document.

use agentloom_core::GraphDoc;
use egui::RichText;

use crate::app::Command;
use crate::app::theme;

/// The examples, by path under `assets/examples`, built into the app.
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "hello.agentloom.json",
        include_str!("../../../../assets/examples/hello.agentloom.json"),
    ),
    (
        "branching.agentloom.json",
        include_str!("../../../../assets/examples/branching.agentloom.json"),
    ),
    (
        "pipeline.agentloom.json",
        include_str!("../../../../assets/examples/pipeline.agentloom.json"),
    ),
    (
        "subgraph.agentloom.json",
        include_str!("../../../../assets/examples/subgraph.agentloom.json"),
    ),
    (
        "greeting.agentloom.json",
        include_str!("../../../../assets/examples/greeting.agentloom.json"),
    ),
    (
        "online/llm-summarize.agentloom.json",
        include_str!("../../../../assets/examples/online/llm-summarize.agentloom.json"),
    ),
    (
        "online/research-agent.agentloom.json",
        include_str!("../../../../assets/examples/online/research-agent.agentloom.json"),
    ),
    (
        "online/github-triage-agent.agentloom.json",
        include_str!("../../../../assets/examples/online/github-triage-agent.agentloom.json"),
    ),
];

/// The example at `index`, read.
pub fn example(index: usize) -> Option<GraphDoc> {
    let (_, text) = EXAMPLES.get(index)?;
    GraphDoc::from_json_str(text).ok()
}

/// Writes the examples into `dir` (as under `assets/examples`), so that an example calling
/// another by a relative path finds it; returns where example `index` is.
pub fn write_examples(dir: &std::path::Path, index: usize) -> std::io::Result<std::path::PathBuf> {
    for (file, text) in EXAMPLES {
        let path = dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if std::fs::read_to_string(&path).ok().as_deref() != Some(*text) {
            std::fs::write(&path, text)?;
        }
    }
    let (file, _) = EXAMPLES
        .get(index)
        .ok_or_else(|| std::io::Error::other("no such example"))?;
    Ok(dir.join(file))
}

/// The gallery window, while `open`.
pub fn examples_ui(ctx: &egui::Context, open: &mut bool, commands: &mut Vec<Command>) {
    if !*open {
        return;
    }
    let mut keep = true;
    egui::Window::new("Examples")
        .collapsible(false)
        .default_width(420.0)
        .open(&mut keep)
        .show(ctx, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                for (index, (file, _)) in EXAMPLES.iter().enumerate() {
                    let Some(doc) = example(index) else { continue };
                    ui.horizontal(|ui| {
                        if ui.button(RichText::new(&doc.name).strong()).clicked() {
                            commands.push(Command::OpenExample(index));
                        }
                        ui.label(RichText::new(*file).small().color(theme::TEXT_WEAK));
                    });
                    ui.label(&doc.description);
                    ui.separator();
                }
            });
        });
    *open = keep;
}
