//! Small details of the editor's panels: a checkbox in the inspector does not repeat its
//! heading, the quick add stays on screen near the window's bottom edge. Driven through
//! the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command};
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable as _;
use support::{graph, harness_for, paths};

const AGENT_GRAPH: &str = r#"{"format":"agentloom.graph","version":1,"name":"agent","nodes":[
    {"id":"agent","block":"ai.agent","position":[0,0],"config":{}}]}"#;

/// How many times `text` is painted on screen.
fn times_painted(h: &support::AppHarness, text: &str) -> usize {
    h.output()
        .shapes
        .iter()
        .filter(|clipped| matches!(&clipped.shape, egui::Shape::Text(s) if s.galley.text() == text))
        .count()
}

#[test]
fn a_checkbox_in_the_inspector_is_named_by_its_heading_once_and_still_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&graph(AGENT_GRAPH), None, &paths(&dir)));
    h.state_mut().send(Command::InspectById("agent".into()));
    h.run_steps(3);
    let field = "Run code unsandboxed";
    h.get_by_role_and_label(Role::CheckBox, field)
        .scroll_to_me();
    h.run_steps(20);
    assert_eq!(times_painted(&h, field), 1, "`{field}` is not shown once");

    h.get_by_role_and_label(Role::CheckBox, field).click();
    h.run_steps(3);
    let config = h
        .state()
        .document
        .to_doc()
        .node("agent")
        .unwrap()
        .config
        .clone();
    assert_eq!(
        config.get("run_code_unsandboxed"),
        Some(&serde_json::Value::Bool(true)),
        "{config:?}"
    );
}
