//! Wiring on the canvas as a person does it: dragging from an output pin to an input pin,
//! and finding the node a validation problem is about.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use egui::accesskit::Role;
use egui::{Key, Modifiers, PointerButton, Pos2, Rect};
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::{AppHarness, click_at, drag, example, harness, keys, paths, wires};

/// The on-screen centre of the pin label `text` drawn inside node `node`.
fn pin_label_in(h: &AppHarness, node: &str, text: &str) -> Pos2 {
    let rect: Rect = h.state().node_screen_rect(node).unwrap();
    h.get_all_by_label(text)
        .map(|found| h.state().graph_to_screen(found.rect().center()))
        .find(|pos| rect.contains(*pos))
        .unwrap_or_else(|| panic!("no `{text}` label inside node `{node}`"))
}

#[test]
fn a_new_wire_into_a_wired_input_replaces_the_old_one_in_one_undo_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = example();
    doc.nodes.push(
        agentloom_core::NodeDoc::new("other", "data.constant")
            .with_config(serde_json::json!({"value": "planet"}))
            .at(40.0, 300.0),
    );
    let mut h = harness(&doc, &paths(&dir));
    let before = wires(&h);
    assert!(before.contains(&"name.value -> render.name".to_owned()));

    // From the constant's output pin (right edge, level with its name) to the template's
    // `name` input pin (left edge).
    let from = Pos2::new(
        h.state().node_screen_rect("other").unwrap().right(),
        pin_label_in(&h, "other", "value").y,
    );
    let to = Pos2::new(
        h.state().node_screen_rect("render").unwrap().left(),
        pin_label_in(&h, "render", "name").y,
    );
    drag(&mut h, from, to, Modifiers::NONE);

    let after = wires(&h);
    assert!(
        after.contains(&"other.value -> render.name".to_owned()),
        "{after:?}"
    );
    assert!(
        !after.contains(&"name.value -> render.name".to_owned()),
        "one wire per input: the old one is gone: {after:?}"
    );
    assert_eq!(after.len(), before.len(), "{after:?}");

    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(wires(&h), before, "one undo brings the old wire back");
}

#[test]
fn clicking_a_problem_shows_its_node_in_the_inspector() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = example();
    doc.edges.retain(|e| e.to.0 != "render");
    let mut h = harness(&doc, &paths(&dir));
    assert_eq!(h.state().inspected_id(), None);
    let problem = h
        .state()
        .problems()
        .iter()
        .find(|p| p.node.as_deref() == Some("render"))
        .expect("the unwired template input is a problem")
        .message
        .clone();
    assert!(problem.contains("render"), "{problem}");
    assert!(problem.contains("name"), "names the port: {problem}");

    // The message is on the node too; the problems list has it as a clickable item.
    let item = h
        .get_all_by_label(&problem)
        .find(|found| found.accesskit_node().role() != Role::Label)
        .expect("the problem is listed as a clickable item");
    let at = item.rect().center();
    click_at(&mut h, at, PointerButton::Primary, Modifiers::NONE);
    assert_eq!(h.state().inspected_id(), Some("render"));
}
