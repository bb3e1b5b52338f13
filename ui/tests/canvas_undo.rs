//! What the canvas hands to undo, and work the app does without drawing: a drag and a wire
//! made on the canvas are an undo step each, a refused wire none; a run started in the
//! window finishes and is listed while the window draws no frame (a hidden window), and
//! closing the window leaves the run log one file that copies alone.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::time::{Duration, Instant};

use agentloom::app::{App, Command};
use egui::{Key, Modifiers};
use support::{
    AppHarness, drag, example_with_constant, graph, harness, harness_for, keys, paths, pin,
    title_of, wires,
};

fn node_position(h: &AppHarness, id: &str) -> [f64; 2] {
    h.state().document.to_doc().node(id).unwrap().position
}

#[test]
fn a_moved_block_and_a_new_wire_are_one_undo_step_each_and_a_refused_wire_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example_with_constant(), &paths(&dir));
    let wired_before = wires(&h);
    let at_first = node_position(&h, "render");

    let title = title_of(&h, "render");
    drag(
        &mut h,
        title,
        title + egui::vec2(120.0, 80.0),
        Modifiers::NONE,
    );
    let moved = node_position(&h, "render");
    assert_ne!(moved, at_first, "the drag moves the block");

    let from = pin(&h, "other", "value", true);
    let to = pin(&h, "render", "name", false);
    drag(&mut h, from, to, Modifiers::NONE);
    let wired = wires(&h);
    assert!(
        wired.contains(&"other.value -> render.name".to_owned()),
        "{wired:?}"
    );

    // A block wired to itself is refused: nothing changes, nothing to undo.
    let from = pin(&h, "render", "text", true);
    let to = pin(&h, "render", "name", false);
    drag(&mut h, from, to, Modifiers::NONE);
    assert_eq!(wires(&h), wired, "the refused wire is not made");

    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(
        wires(&h),
        wired_before,
        "the first undo takes the new wire back"
    );
    assert_eq!(node_position(&h, "render"), moved, "and leaves the move");

    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(
        node_position(&h, "render"),
        at_first,
        "the second undoes the move"
    );
    assert!(!h.state().document.can_undo(), "and that was all");

    keys(&mut h, Modifiers::COMMAND | Modifiers::SHIFT, Key::Z);
    keys(&mut h, Modifiers::COMMAND | Modifiers::SHIFT, Key::Z);
    assert_eq!(node_position(&h, "render"), moved);
    assert_eq!(wires(&h), wired, "redo brings both back");
}

const CONSTANT: &str = r#"{"format":"agentloom.graph","version":1,"name":"constant","nodes":[
    {"id":"value","block":"data.constant","position":[0,0],"config":{"value":"hi","type":"text"}},
    {"id":"shown","block":"graph.output","position":[300,0],"config":{"name":"shown"}}],
  "edges":[{"from":["value","value"],"to":["shown","value"]}]}"#;

#[test]
fn a_run_finishes_unseen_and_closing_the_window_leaves_the_run_log_one_copyable_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&graph(CONSTANT), None, &paths(&dir)));
    h.state_mut().send(Command::Run);
    h.step();
    assert!(h.state().run.is_running() || h.state().run.run_id.is_some());

    // What eframe calls for a hidden window: the logic step, no frame.
    let ctx = h.ctx.clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.state().run.is_running() || h.state().history().is_empty() {
        assert!(Instant::now() < deadline, "the run did not finish unseen");
        h.state_mut().logic(&ctx);
        std::thread::sleep(Duration::from_millis(10));
    }
    let history = h.state().history();
    assert_eq!(history.len(), 1, "the history lists it");
    assert_eq!(history[0].status, agentloom_engine::RunStatus::Completed);
    let run_id = history[0].id.clone();

    // Closing the window leaves the run log one file a user can copy alone.
    h.state_mut().close();
    let copy = dir.path().join("copied-runs.sqlite3");
    std::fs::copy(dir.path().join("runs.sqlite3"), &copy).unwrap();
    let copied = agentloom_engine::RunStore::open(&copy).unwrap();
    let runs = copied.list_runs(10).unwrap();
    assert_eq!(runs.len(), 1, "the copied run log lost the run");
    assert_eq!(runs[0].id, run_id);
}
