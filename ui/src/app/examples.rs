//! File → Examples: the example graphs shipped with the app, each with its description;
//! one opens as a new untitled document.

use agentloom_core::GraphDoc;
use egui::RichText;

use super::Command;
use super::theme;

/// The examples, by path under `assets/examples`, built into the app.
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "hello.agentloom.json",
        include_str!("../../../assets/examples/hello.agentloom.json"),
    ),
    (
        "branching.agentloom.json",
        include_str!("../../../assets/examples/branching.agentloom.json"),
    ),
    (
        "pipeline.agentloom.json",
        include_str!("../../../assets/examples/pipeline.agentloom.json"),
    ),
    (
        "subgraph.agentloom.json",
        include_str!("../../../assets/examples/subgraph.agentloom.json"),
    ),
    (
        "greeting.agentloom.json",
        include_str!("../../../assets/examples/greeting.agentloom.json"),
    ),
    (
        "online/llm-summarize.agentloom.json",
        include_str!("../../../assets/examples/online/llm-summarize.agentloom.json"),
    ),
    (
        "online/research-agent.agentloom.json",
        include_str!("../../../assets/examples/online/research-agent.agentloom.json"),
    ),
    (
        "online/github-triage-agent.agentloom.json",
        include_str!("../../../assets/examples/online/github-triage-agent.agentloom.json"),
    ),
];

/// The example at `index`, read.
pub fn example(index: usize) -> Option<GraphDoc> {
    let (_, text) = EXAMPLES.get(index)?;
    GraphDoc::from_json_str(text).ok()
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
