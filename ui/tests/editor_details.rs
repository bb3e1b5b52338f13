//! Small details of the editor: the palette's drag ghost shows the pins a placed block
//! shows, the quick add stays on screen near the window's edge. Driven through the real
//! UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use egui::accesskit::Role;
use egui::{Modifiers, Pos2, Rect};
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::{AppHarness, example, harness, paths};

/// A point of empty canvas.
fn empty_canvas(h: &AppHarness) -> Pos2 {
    let greeting = h.state().node_screen_rect("greeting").unwrap();
    Pos2::new(greeting.center().x, greeting.bottom() + 60.0)
}

/// Drags the palette's `block` button to `to` without letting go.
fn drag_from_palette(h: &mut AppHarness, block: &str, to: Pos2) {
    let from = h.get_by_role_and_label(Role::Button, block).rect().center();
    h.event(egui::Event::PointerMoved(from));
    h.event(egui::Event::PointerButton {
        pos: from,
        button: egui::PointerButton::Primary,
        pressed: true,
        modifiers: Modifiers::NONE,
    });
    h.step();
    for i in 1..=12 {
        let t = i as f32 / 12.0;
        h.event(egui::Event::PointerMoved(from + (to - from) * t));
        h.step();
    }
    h.run_steps(2);
}

/// The texts shown inside `area`.
fn labels_inside(h: &AppHarness, area: Rect) -> Vec<String> {
    h.query_all_by_role(Role::Label)
        .filter(|n| area.contains_rect(n.rect()))
        .filter_map(|n| n.accesskit_node().value().or(n.accesskit_node().label()))
        .collect()
}

#[test]
fn the_palette_ghost_shows_the_data_pins_a_placed_block_shows_and_no_error_or_tool_pin() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let to = empty_canvas(&h);
    drag_from_palette(&mut h, "Delay", to);
    let ghost = h.get_by_label("Placing Delay").rect();
    let shown = labels_inside(&h, ghost);
    // Delay's input and output, both named `value`, as a placed Delay shows them.
    assert_eq!(
        shown.iter().filter(|t| *t == "value").count(),
        2,
        "the ghost shows {shown:?}"
    );
    assert!(
        !shown.iter().any(|t| t == "error" || t == "tool"),
        "the ghost shows {shown:?}"
    );
}
