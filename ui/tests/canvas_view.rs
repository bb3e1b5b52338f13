//! How the canvas is viewed: the wheel's zoom in small steps, the setting that makes the
//! plain wheel zoom, and the minimap that can be hidden; both settings kept between
//! sessions. Driven through the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::App;
use egui::accesskit::Role;
use egui::{Modifiers, Pos2};
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, example, harness, harness_for, paths};

/// The zoom of the canvas: screen points per graph unit.
fn zoom(h: &AppHarness) -> f32 {
    let app = h.state();
    app.graph_to_screen(Pos2::new(1.0, 0.0)).x - app.graph_to_screen(Pos2::ZERO).x
}

/// A point of empty canvas.
fn empty_canvas(h: &AppHarness) -> Pos2 {
    let greeting = h.state().node_screen_rect("greeting").unwrap();
    Pos2::new(greeting.center().x, greeting.bottom() + 60.0)
}

/// Turns the mouse wheel one notch up at `at` with `modifiers` held, and lets the
/// smoothed scroll play out.
fn wheel_notch(h: &mut AppHarness, at: Pos2, modifiers: Modifiers) {
    h.event(egui::Event::PointerMoved(at));
    h.event(egui::Event::ModifiersChanged(modifiers));
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Line,
        delta: egui::vec2(0.0, 1.0),
        phase: egui::TouchPhase::Move,
        modifiers,
    });
    h.run_steps(60);
    h.event(egui::Event::ModifiersChanged(Modifiers::NONE));
    h.run_steps(2);
}

/// Ticks or unticks the View menu's `label`.
fn toggle_in_view_menu(h: &mut AppHarness, label: &str) {
    h.get_by_label("View").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::CheckBox, label).click();
    h.run_steps(2);
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
}

#[test]
fn ctrl_wheel_zooms_a_tenth_per_notch_about_the_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let at = empty_canvas(&h);
    let under = h.state().graph_to_screen(Pos2::ZERO);
    let before = zoom(&h);
    wheel_notch(&mut h, at, Modifiers::COMMAND);
    let ratio = zoom(&h) / before;
    assert!((1.08..1.12).contains(&ratio), "one notch zoomed by {ratio}");
    assert_ne!(h.state().graph_to_screen(Pos2::ZERO), under, "it zoomed");
}

#[test]
fn the_plain_wheel_scrolls_until_set_to_zoom_and_the_setting_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let at = empty_canvas(&h);
    let before = zoom(&h);
    wheel_notch(&mut h, at, Modifiers::NONE);
    assert!((zoom(&h) - before).abs() < 1e-4, "the plain wheel scrolls");

    toggle_in_view_menu(&mut h, "Zoom with the mouse wheel");
    let before = zoom(&h);
    let origin_before = h.state().graph_to_screen(Pos2::ZERO);
    wheel_notch(&mut h, at, Modifiers::NONE);
    let ratio = zoom(&h) / before;
    assert!(
        (1.08..1.12).contains(&ratio),
        "one plain notch zoomed by {ratio}"
    );
    // About the pointer: the graph point under it stays under it.
    let pointed_before = (at - origin_before) / before;
    let pointed = (at - h.state().graph_to_screen(Pos2::ZERO)) / zoom(&h);
    assert!(
        (pointed - pointed_before).length() < 0.5,
        "the point under the pointer moved: {pointed_before:?} -> {pointed:?}"
    );

    // A new session keeps it.
    drop(h);
    let mut h = harness_for(App::new(&example(), None, &paths(&dir)));
    let at = empty_canvas(&h);
    let before = zoom(&h);
    wheel_notch(&mut h, at, Modifiers::NONE);
    let ratio = zoom(&h) / before;
    assert!(
        (1.08..1.12).contains(&ratio),
        "kept: one plain notch zoomed by {ratio}"
    );
}

#[test]
fn the_minimap_can_be_hidden_and_stays_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    h.get_by_label("Minimap");
    toggle_in_view_menu(&mut h, "Minimap");
    assert!(h.query_by_label("Minimap").is_none(), "hidden");
    drop(h);
    let h = harness_for(App::new(&example(), None, &paths(&dir)));
    assert!(h.query_by_label("Minimap").is_none(), "still hidden");
}
