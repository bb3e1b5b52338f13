//! The agent in the app: tool wires on the canvas document (an agent's `tools` input takes
//! many wires), and its steps appearing in the inspector's run record while it works.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::path::Path;

use agentloom::app::{Document, load_graph};
use agentloom_blocks::Registry;
use agentloom_engine::RunStatus;
use egui::accesskit::Role;
use egui::{Modifiers, PointerButton};
use egui_kittest::kittest::Queryable as _;
use support::{click_at, harness, live_agent_graph, paths, title_of, wait_until};

#[test]
fn agent_steps_appear_while_the_agent_works() {
    let Some(fake) = agentloom_tests::FakeLlm::start("agent/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&live_agent_graph(&fake.base()), &paths(&dir));
    let title = title_of(&h, "Worker");
    click_at(&mut h, title, PointerButton::Primary, Modifiers::NONE);
    h.get_by_role_and_label(Role::Button, "▶ Run").click();
    h.run_steps(2);
    // The second step waits for approval: the first is already shown, the run goes on.
    wait_until(&mut h, "the approval", |h| {
        !h.state().run.approvals.is_empty()
    });
    assert!(h.state().run.is_running());
    // In the inspector's trace (a row a step), and the latest step in the node's body.
    let trace_row = h.query_by(|node| {
        node.label()
            .is_some_and(|l| l.starts_with("step 1 · list_files") && !l.contains('→'))
    });
    assert!(trace_row.is_some());
    h.get_by_label_contains("step 1 · list_files → ");
    h.get_by_role_and_label(Role::Button, "Reject").click();
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    assert_eq!(
        h.state().run.status,
        Some(RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    assert!(!dir.path().join("workspace/live.txt").exists());
}

#[test]
fn an_agent_keeps_every_tool_wired_to_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/examples/online/github-triage-agent.agentloom.json");
    let mut doc = load_graph(&path).unwrap();
    // A graph input is never a tool: a template is the fourth.
    doc.nodes.push(
        agentloom_core::NodeDoc::new("note", "text.template")
            .with_config(serde_json::json!({"template": "{{ x }}"})),
    );
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
        .connect_named(("note", "tool"), ("triager", "tools"))
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
