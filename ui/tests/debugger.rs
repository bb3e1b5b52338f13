//! The debugger, driven through the real UI: breakpoints set with F9 and from a node's menu,
//! drawn on the node and kept for the file (not in it) across a restart.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::App;
use egui::accesskit::Role;
use egui::{Key, Modifiers, PointerButton};
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, click_at, harness_for, keys, paths, title_of};

/// A text handed down two templates to the graph's output.
const CHAIN: &str = r#"{"format":"agentloom.graph","version":1,"name":"chain",
  "nodes":[
    {"id":"name","block":"data.constant","position":[0,0],"config":{"value":"world","type":"text"}},
    {"id":"render","block":"text.template","label":"Render greeting","position":[260,0],"config":{"template":"Hello, {{ name }}!"}},
    {"id":"shout","block":"text.template","label":"Shout it","position":[520,0],"config":{"template":"{{ text }}!!"}},
    {"id":"out","block":"graph.output","position":[780,0],"config":{"name":"greeting"}}],
  "edges":[{"from":["name","value"],"to":["render","name"]},
           {"from":["render","text"],"to":["shout","text"]},
           {"from":["shout","text"],"to":["out","value"]}]}"#;

/// Whether a label saying `text` is drawn inside node `id`.
fn label_in(h: &AppHarness, id: &str, text: &str) -> bool {
    let rect = h.state().node_screen_rect(id).unwrap();
    h.query_all_by_label(text)
        .any(|found| rect.contains(h.state().graph_to_screen(found.rect().center())))
}

/// Selects the node titled `title` with a click.
fn select(h: &mut AppHarness, title: &str) {
    let at = title_of(h, title);
    click_at(h, at, PointerButton::Primary, Modifiers::NONE);
}

fn node_menu(h: &mut AppHarness, title: &str) {
    let at = title_of(h, title);
    click_at(h, at, PointerButton::Secondary, Modifiers::NONE);
}

/// The app on the graph file `file`, its data in `paths`.
fn open(file: &std::path::Path, paths: &agentloom::app::AppPaths) -> AppHarness {
    let doc = agentloom::app::load_graph(file).unwrap();
    harness_for(App::new(&doc, Some(file.to_owned()), paths))
}

#[test]
fn f9_and_the_node_menu_set_breakpoints_drawn_on_the_node_and_kept_for_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let file = dir.path().join("chain.agentloom.json");
    std::fs::write(&file, CHAIN).unwrap();
    let mut h = open(&file, &paths);
    assert!(h.query_by_label_contains("Breakpoint").is_none());

    // F9 on the selected node: a breakpoint before it, drawn in its header.
    select(&mut h, "Render greeting");
    keys(&mut h, Modifiers::NONE, Key::F9);
    assert!(label_in(&h, "render", "Breakpoint before"));
    // F9 again removes it.
    keys(&mut h, Modifiers::NONE, Key::F9);
    assert!(h.query_by_label_contains("Breakpoint").is_none());

    // The node's menu offers before and after.
    node_menu(&mut h, "Shout it");
    h.get_by_role_and_label(Role::Button, "Breakpoint after")
        .click();
    h.run_steps(3);
    assert!(label_in(&h, "shout", "Breakpoint after"));
    select(&mut h, "Render greeting");
    keys(&mut h, Modifiers::NONE, Key::F9);
    assert!(label_in(&h, "render", "Breakpoint before"));

    // Typing F9 in a field sets nothing.
    h.state_mut().send(agentloom::app::Command::ClearSelection);
    h.run_steps(2);
    h.get_by_label("Graph name").focus();
    h.run_steps(1);
    keys(&mut h, Modifiers::NONE, Key::F9);
    assert!(label_in(&h, "render", "Breakpoint before"));

    // Kept for the file, not in it: a restarted app on the same file shows them.
    drop(h);
    assert!(!std::fs::read_to_string(&file).unwrap().contains("reak"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), CHAIN);
    let h = open(&file, &paths);
    assert!(label_in(&h, "render", "Breakpoint before"));
    assert!(label_in(&h, "shout", "Breakpoint after"));
    assert!(h.query_all_by_label_contains("Breakpoint").count() == 2);
}
