//! What the canvas offers at first touch: a Constant dropped from the palette can be wired
//! at once, an untrusted file's banner covers no block, and a right-click beside a curved
//! wire (within its drawn width and a few points more) opens the wire's menu. Driven
//! through egui_kittest.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::App;
use egui::accesskit::Role;
use egui::{Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::Queryable as _;
use support::*;

#[test]
fn a_constant_dropped_from_the_palette_shows_its_output_and_can_be_wired() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let from = h
        .get_by_role_and_label(Role::Button, "Constant")
        .rect()
        .center();
    let greeting = h.state().node_screen_rect("greeting").unwrap();
    let to = Pos2::new(greeting.center().x, greeting.bottom() + 200.0);
    drag(&mut h, from, to, Modifiers::NONE);
    assert!(
        h.state().document.to_doc().node("constant").is_some(),
        "the dragged Constant was dropped: {:?}",
        ids(&h)
    );
    // Its output pin is there before any value is written, and takes a wire.
    let output = pin(&h, "constant", "value", true);
    let input = pin(&h, "render", "name", false);
    drag(&mut h, output, input, Modifiers::NONE);
    assert!(
        wires(&h).contains(&"constant.value -> render.name".to_owned()),
        "{:?}",
        wires(&h)
    );
}

#[test]
fn the_trust_banner_of_an_untrusted_file_covers_no_block() {
    let dir = tempfile::tempdir().unwrap();
    // The research agent example, renamed: no longer the shipped file, which is trusted.
    let file = dir.path().join("research.agentloom.json");
    let mut shared = graph(include_str!(
        "../../assets/examples/online/research-agent.agentloom.json"
    ));
    shared.name = "Research, shared".to_owned();
    std::fs::write(&file, shared.to_json_string()).unwrap();
    let doc = agentloom::app::load_graph(&file).unwrap();
    let mut h = harness_for(App::new(&doc, Some(file), &paths(&dir)));
    h.run_steps(4);
    h.get_by_label_contains("research.agentloom.json is not trusted");
    let banner_bottom = h
        .get_by_role_and_label(Role::Button, "Keep offline")
        .rect()
        .bottom();
    let canvas = h.state().canvas_screen_rect();
    assert!(
        canvas.top() >= banner_bottom,
        "the canvas {canvas:?} starts under the banner (bottom {banner_bottom})"
    );
    for node in ["topic", "researcher", "summary", "files"] {
        let rect = h.state().node_screen_rect(node).unwrap();
        assert!(
            rect.top() > banner_bottom,
            "`{node}` at {rect:?} is under the banner (bottom {banner_bottom})"
        );
    }
}

#[test]
fn a_right_click_beside_a_curved_wire_opens_its_menu() {
    let dir = tempfile::tempdir().unwrap();
    let doc = graph(include_str!(
        "../../assets/examples/online/research-agent.agentloom.json"
    ));
    let mut h = harness(&doc, &paths(&dir));
    let from = pin(&h, "researcher", "artifacts", true);
    let to = pin(&h, "files", "value", false);
    assert!(
        (to.y - from.y).abs() > 20.0,
        "the wire bends: {from:?} {to:?}"
    );
    let middle = h
        .state()
        .wire_screen_middle(("researcher", "artifacts"), ("files", "value"))
        .unwrap();
    // 8 points off the middle, square to the wire there (its chord, near enough).
    let along = (to - from).normalized();
    let beside = middle + egui::vec2(-along.y, along.x) * 8.0;
    click_at(&mut h, beside, PointerButton::Secondary, Modifiers::NONE);
    h.run_steps(2);
    assert!(
        h.query_by_label("Add block…").is_none(),
        "the canvas menu opened beside the wire"
    );
    h.get_by_role_and_label(Role::Button, "Disconnect").click();
    h.run_steps(2);
    assert!(
        !wires(&h).contains(&"researcher.artifacts -> files.value".to_owned()),
        "{:?}",
        wires(&h)
    );
}
