//! Small details of the editor's panels: a checkbox in the inspector does not repeat its
//! heading, the quick add stays on screen near the window's bottom edge. Driven through
//! the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command};
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, graph, harness_for, paths};

const AGENT_GRAPH: &str = r#"{"format":"agentloom.graph","version":1,"name":"agent","nodes":[
    {"id":"agent","block":"ai.agent","position":[0,0],"config":{}}]}"#;

/// How many times `text` is painted on screen.
fn times_painted(h: &AppHarness, text: &str) -> usize {
    h.output()
        .shapes
        .iter()
        .filter(|clipped| matches!(&clipped.shape, egui::Shape::Text(s) if s.galley.text() == text))
        .count()
}

/// The agent node's config as the document holds it.
fn agent_config(h: &AppHarness) -> agentloom_core::Config {
    h.state()
        .document
        .to_doc()
        .node("agent")
        .unwrap()
        .config
        .clone()
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
    let config = agent_config(&h);
    assert_eq!(
        config.get("run_code_unsandboxed"),
        Some(&serde_json::Value::Bool(true)),
        "{config:?}"
    );
}

#[test]
fn a_text_field_longer_than_the_inspector_is_shown_whole() {
    let tools = "read_file, write_file, list_files, run_code, http_get, web_search, finish";
    let json = AGENT_GRAPH.replace(
        r#""config":{}"#,
        &format!(r#""config":{{"builtin_tools":"{tools}"}}"#),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&graph(&json), None, &paths(&dir)));
    h.state_mut().send(Command::InspectById("agent".into()));
    h.run_steps(3);
    h.get_by_role_and_label(Role::TextInput, "Built-in tools")
        .scroll_to_me();
    h.run_steps(20);
    let field = h
        .get_by_role_and_label(Role::TextInput, "Built-in tools")
        .rect();
    let painted: Vec<egui::Rect> = h
        .output()
        .shapes
        .iter()
        .filter_map(|clipped| match &clipped.shape {
            egui::Shape::Text(s) if s.galley.text() == tools => {
                Some(s.visual_bounding_rect().intersect(clipped.clip_rect))
            }
            _ => None,
        })
        .collect();
    assert_eq!(painted.len(), 1, "{painted:?}");
    let whole = h
        .output()
        .shapes
        .iter()
        .find_map(|clipped| match &clipped.shape {
            egui::Shape::Text(s) if s.galley.text() == tools => Some(s.visual_bounding_rect()),
            _ => None,
        })
        .unwrap();
    assert!(
        field.contains_rect(whole) && painted[0].size() == whole.size(),
        "`{tools}` ({whole:?}) is cut to {:?} by its field {field:?}",
        painted[0]
    );

    // Still one line: a line break typed or pasted into it is dropped.
    h.get_by_role_and_label(Role::TextInput, "Built-in tools")
        .click();
    h.run_steps(2);
    h.key_press(egui::Key::End);
    h.event(egui::Event::Paste(",\nweb_search".into()));
    h.key_press(egui::Key::Enter);
    h.run_steps(3);
    let config = agent_config(&h);
    let value = config
        .get("builtin_tools")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    assert!(
        !value.contains('\n') && value.contains("finish"),
        "{value:?}"
    );
}
