//! Tool wires on the canvas document: an agent's `tools` input takes many wires.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::Path;

use agentloom::app::{Document, load_graph};
use agentloom_blocks::Registry;

#[test]
fn an_agent_keeps_every_tool_wired_to_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/examples/online/github-triage-agent.agentloom.json");
    let doc = load_graph(&path).unwrap();
    let registry = Registry::builtin();
    let mut document = Document::from_doc(&doc, &registry, None);
    let tool_wires = |d: &Document| {
        d.to_doc()
            .edges
            .iter()
            .filter(|e| e.from.1 == "tool" && e.to == ("triager".to_owned(), "tools".to_owned()))
            .count()
    };
    assert_eq!(tool_wires(&document), 3);
    // One more tool: the others stay (a one-wire input would drop its old wire).
    document
        .connect_named(("goal", "tool"), ("triager", "tools"))
        .unwrap();
    assert_eq!(tool_wires(&document), 4);
    // A one-wire input still replaces its wire.
    document
        .connect_named(("get_issue", "issue"), ("triager", "goal"))
        .unwrap();
    let into_goal: Vec<_> = document
        .to_doc()
        .edges
        .into_iter()
        .filter(|e| e.to == ("triager".to_owned(), "goal".to_owned()))
        .collect();
    assert_eq!(into_goal.len(), 1);
    assert_eq!(
        into_goal[0].from,
        ("get_issue".to_owned(), "issue".to_owned())
    );
}
