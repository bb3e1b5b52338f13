//! The example graphs shipped with the binary: the app's gallery opens them, and trust
//! takes them as they are.

use agentloom_core::GraphDoc;

/// The examples, by path under `assets/examples`, built into the binary.
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "hello.agentloom.json",
        include_str!("../../assets/examples/hello.agentloom.json"),
    ),
    (
        "branching.agentloom.json",
        include_str!("../../assets/examples/branching.agentloom.json"),
    ),
    (
        "pipeline.agentloom.json",
        include_str!("../../assets/examples/pipeline.agentloom.json"),
    ),
    (
        "subgraph.agentloom.json",
        include_str!("../../assets/examples/subgraph.agentloom.json"),
    ),
    (
        "greeting.agentloom.json",
        include_str!("../../assets/examples/greeting.agentloom.json"),
    ),
    (
        "online/llm-summarize.agentloom.json",
        include_str!("../../assets/examples/online/llm-summarize.agentloom.json"),
    ),
    (
        "online/research-agent.agentloom.json",
        include_str!("../../assets/examples/online/research-agent.agentloom.json"),
    ),
    (
        "online/github-triage-agent.agentloom.json",
        include_str!("../../assets/examples/online/github-triage-agent.agentloom.json"),
    ),
    (
        "online/answer-from-documents.agentloom.json",
        include_str!("../../assets/examples/online/answer-from-documents.agentloom.json"),
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
            agentloom_engine::private_files::create_dir_all(parent)?;
        }
        if std::fs::read_to_string(&path).ok().as_deref() != Some(*text) {
            agentloom_engine::private_files::write(&path, text)?;
        }
    }
    let (file, _) = EXAMPLES
        .get(index)
        .ok_or_else(|| std::io::Error::other("no such example"))?;
    Ok(dir.join(file))
}
