//! Wiring on the canvas as a person does it: dragging from an output pin to an input pin,
//! and finding the node a validation problem is about.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use egui::accesskit::Role;
use egui::{Key, Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::{
    AppHarness, click_at, drag, example, example_with_constant, harness, keys, paths, pin,
    pin_label_in, wires,
};

#[test]
fn a_new_wire_into_a_wired_input_replaces_the_old_one_in_one_undo_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example_with_constant(), &paths(&dir));
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

/// Presses at `from` and moves to `to` without letting go.
fn drag_without_release(h: &mut AppHarness, from: Pos2, to: Pos2) {
    h.event(egui::Event::PointerMoved(from));
    h.event(egui::Event::PointerButton {
        pos: from,
        button: PointerButton::Primary,
        pressed: true,
        modifiers: Modifiers::NONE,
    });
    h.step();
    for i in 1..=12 {
        #[allow(clippy::cast_precision_loss, reason = "a small count")]
        let t = i as f32 / 12.0;
        h.event(egui::Event::PointerMoved(from + (to - from) * t));
        h.step();
    }
}

fn release(h: &mut AppHarness, at: Pos2) {
    h.event(egui::Event::PointerButton {
        pos: at,
        button: PointerButton::Primary,
        pressed: false,
        modifiers: Modifiers::NONE,
    });
    h.run_steps(3);
}

/// A list input, a number input, a chat block (its history takes messages) and a file read
/// (its path takes text).
const TYPED: &str = r#"{"format":"agentloom.graph","version":1,"name":"typed","nodes":[
    {"id":"names","block":"graph.input","position":[0,0],"config":{"name":"names","type":"list<text>"}},
    {"id":"count","block":"graph.input","position":[0,250],"config":{"name":"count","type":"integer"}},
    {"id":"chat","block":"llm.chat","position":[400,0],"config":{"prompt":"Hi"}},
    {"id":"read","block":"file.read","position":[400,300],"config":{}}],
  "edges":[{"from":["count","value"],"to":["read","path"]}]}"#;

#[test]
fn a_refused_wire_says_why_at_the_cursor_before_it_is_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&support::graph(TYPED), &paths(&dir));
    let before = wires(&h);

    // Types that do not fit: the reason shows beside the pointer while dragging.
    let from = pin(&h, "names", "value", true);
    let to = pin(&h, "chat", "history", false);
    drag_without_release(&mut h, from, to);
    h.get_by_label_contains("Cannot connect: cannot connect list<text> to messages");
    h.get_by_label_contains("a list is not a single value");
    release(&mut h, to);
    assert_eq!(wires(&h), before);
    assert!(h.query_by_label_contains("Cannot connect:").is_none());
    assert!(
        h.state()
            .notice
            .as_deref()
            .is_some_and(|n| n.contains("a list is not a single value")),
        "{:?}",
        h.state().notice
    );

    // An output dropped on another output: why, at the cursor and after letting go.
    let to = pin(&h, "chat", "text", true);
    drag_without_release(&mut h, from, to);
    h.get_by_label_contains("Cannot connect: an output feeds an input");
    release(&mut h, to);
    assert_eq!(wires(&h), before);
    assert!(
        h.state()
            .notice
            .as_deref()
            .is_some_and(|n| n.contains("drop the wire on an input pin")),
        "{:?}",
        h.state().notice
    );
}

#[test]
fn a_converting_wire_is_marked_and_a_pin_menu_disconnects_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&support::graph(TYPED), &paths(&dir));
    assert_eq!(wires(&h), ["count.value -> read.path"]);
    // integer → text is converted on the way: the input says so.
    let mark = h.get_by_label("~");
    let mark_at = h.state().graph_to_screen(mark.rect().center());
    assert!(
        h.state()
            .node_screen_rect("read")
            .unwrap()
            .contains(mark_at)
    );
    h.event(egui::Event::PointerMoved(mark_at));
    h.run_steps(2);
    // Only converting inputs have the mark.
    assert_eq!(h.get_all_by_label("~").count(), 1);

    let path = pin_label_in(&h, "read", "path");
    click_at(&mut h, path, PointerButton::Secondary, Modifiers::NONE);
    h.get_by_role_and_label(Role::Button, "Disconnect").click();
    h.run_steps(2);
    assert!(wires(&h).is_empty());
    assert!(h.query_by_label("~").is_none());
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(wires(&h), ["count.value -> read.path"]);
}

#[test]
fn a_missing_model_says_to_set_it_in_the_inspector_or_wire_it() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(&support::graph(TYPED), &paths(&dir));
    let problem = h
        .state()
        .problems()
        .iter()
        .find(|p| p.port.as_deref() == Some("model"))
        .expect("the chat block has no model")
        .message
        .clone();
    assert!(
        problem.contains("set Model in the inspector or wire an input"),
        "{problem}"
    );
}

#[test]
fn hovering_a_wire_shows_its_last_value_and_a_clicked_wire_is_deleted_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    h.get_by_role_and_label(Role::Button, "▶ Run").click();
    h.run_steps(3);
    h.key_press(Key::Enter);
    h.run_steps(2);
    support::wait_until(&mut h, "the run", |h| !h.state().run.is_running());

    let from = pin(&h, "render", "text", true);
    let to = pin(&h, "greeting", "value", false);
    let middle = from + (to - from) / 2.0;
    h.event(egui::Event::PointerMoved(middle));
    h.run_steps(2);
    h.get_by_label_contains("render.text -> greeting.value");
    h.get_by_label_contains("Last value: Hello, world!");

    click_at(&mut h, middle, PointerButton::Primary, Modifiers::NONE);
    keys(&mut h, Modifiers::NONE, Key::Delete);
    assert_eq!(wires(&h), ["name.value -> render.name"]);
    assert_eq!(h.state().document.to_doc().nodes.len(), 3, "no block went");
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(wires(&h).len(), 2);
}

#[test]
fn a_right_clicked_wire_offers_disconnect_instead_of_vanishing() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let both = ["name.value -> render.name", "render.text -> greeting.value"];
    assert_eq!(wires(&h), both);
    let middle = h
        .state()
        .wire_screen_middle(("render", "text"), ("greeting", "value"))
        .unwrap();

    // A right-click opens the menu and leaves the wire; Escape closes it.
    click_at(&mut h, middle, PointerButton::Secondary, Modifiers::NONE);
    assert_eq!(wires(&h), both);
    h.get_by_role_and_label(Role::Button, "Disconnect");
    keys(&mut h, Modifiers::NONE, Key::Escape);
    assert!(h.query_by_label("Disconnect").is_none());
    assert_eq!(wires(&h), both);

    // Disconnect removes that wire only, in one undo step.
    click_at(&mut h, middle, PointerButton::Secondary, Modifiers::NONE);
    h.get_by_role_and_label(Role::Button, "Disconnect").click();
    h.run_steps(2);
    assert_eq!(wires(&h), ["name.value -> render.name"]);
    assert!(h.query_by_label("Disconnect").is_none());
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(wires(&h), both);
}

/// The research agent example, as File → Examples opens it.
fn research_agent() -> agentloom_core::GraphDoc {
    let (_, text) = agentloom::app::EXAMPLES
        .iter()
        .find(|(file, _)| file.contains("research-agent"))
        .unwrap();
    support::graph(text)
}

#[test]
fn right_clicking_a_curved_wire_where_its_note_shows_opens_its_menu() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&research_agent(), &paths(&dir));
    let from = pin(&h, "researcher", "answer", true);
    let to = pin(&h, "summary", "value", false);
    assert!(
        (from.y - to.y).abs() > 10.0,
        "the wire bends: {from:?} {to:?}"
    );

    // Move down across the wire a quarter of the way along until its note shows, as a
    // person hovers it; then right-click without moving.
    let x = from.x + (to.x - from.x) / 4.0;
    let (top, bottom) = (from.y.min(to.y) - 30.0, from.y.max(to.y) + 30.0);
    let mut at = None;
    let mut y = top;
    while y < bottom {
        h.event(egui::Event::PointerMoved(Pos2::new(x, y)));
        h.run_steps(2);
        if h.query_by_label_contains("researcher.answer -> summary.value")
            .is_some()
        {
            at = Some(Pos2::new(x, y));
            break;
        }
        y += 1.0;
    }
    let at = at.expect("the wire's note shows somewhere across it");
    click_at(&mut h, at, PointerButton::Secondary, Modifiers::NONE);
    assert!(
        h.query_by_label("Add block…").is_none(),
        "not the canvas menu"
    );
    h.get_by_role_and_label(Role::Button, "Disconnect").click();
    h.run_steps(2);
    assert!(
        !wires(&h).contains(&"researcher.answer -> summary.value".to_owned()),
        "{:?}",
        wires(&h)
    );
}
