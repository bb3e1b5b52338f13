//! Approvals as a person meets them in the window: each request's window beside its node
//! wherever the canvas shows it now, a waiting run announced when the app starts.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::time::{Duration, Instant};

use agentloom::app::App;
use agentloom_engine::RunStatus;
use egui::accesskit::Role;
use egui::{Modifiers, Pos2, Rect};
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, drag, graph, harness_for, paths, wait_until};

/// Writes a file: in safe mode it waits for a person's approval.
const WRITE: &str = r#"{"format":"agentloom.graph","version":1,"name":"write","settings":{"safe_mode":true},"nodes":[
    {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"written by the test","type":"text"}},
    {"id":"write","block":"file.write","position":[250,0],"config":{"path":"out/note.txt"}},
    {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"path"}}],
  "edges":[{"from":["text","value"],"to":["write","content"]},
           {"from":["write","path"],"to":["out","value"]}]}"#;

fn press(h: &mut AppHarness, label: &str) {
    h.get_by_role_and_label(Role::Button, label).click();
    h.run_steps(2);
}

/// Runs the graph until its approval window shows, and lets the window settle.
fn run_to_the_approval(h: &mut AppHarness) -> Rect {
    press(h, "▶ Run");
    wait_until(h, "the approval", |h| !h.state().run.approvals.is_empty());
    h.run_steps(4);
    approval_window(h)
}

/// The approval window, from its question to its Approve button.
fn approval_window(h: &AppHarness) -> Rect {
    let question = h.get_by_label_contains("waits for approval").rect();
    let approve = h.get_by_role_and_label(Role::Button, "Approve").rect();
    question.union(approve)
}

fn reject(h: &mut AppHarness) {
    press(h, "Reject");
    wait_until(h, "the run to end", |h| !h.state().run.is_running());
}

#[test]
fn each_approval_window_opens_beside_its_node_where_the_canvas_shows_it_now_and_on_screen() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&graph(WRITE), None, &paths(&dir)));
    let screen = Rect::from_min_size(Pos2::ZERO, egui::vec2(1280.0, 800.0));

    let first = run_to_the_approval(&mut h);
    let node = h.state().node_screen_rect("write").unwrap();
    assert!(!first.intersects(node), "{first:?} covers {node:?}");
    reject(&mut h);

    // The canvas panned so that the node sits where that window was.
    let empty = Pos2::new(node.center().x, node.bottom() + 120.0);
    drag(
        &mut h,
        empty,
        empty + (first.center() - node.center()),
        Modifiers::NONE,
    );
    h.run_steps(3);
    let node = h.state().node_screen_rect("write").unwrap();
    assert!(
        node.intersects(first),
        "the pan moved the node under the old window"
    );

    let second = run_to_the_approval(&mut h);
    assert!(
        !second.intersects(node),
        "the second window {second:?} covers its node {node:?}"
    );
    assert!(screen.contains_rect(second), "{second:?} off screen");
    reject(&mut h);

    // The node panned out of view at the bottom right: the window stays on screen.
    let node = h.state().node_screen_rect("write").unwrap();
    let empty = Pos2::new(node.center().x, node.bottom() + 60.0);
    drag(&mut h, empty, Pos2::new(1000.0, 760.0), Modifiers::NONE);
    h.run_steps(3);
    let third = run_to_the_approval(&mut h);
    assert!(screen.contains_rect(third), "{third:?} off screen");
    reject(&mut h);
    assert_eq!(h.state().run.status, Some(RunStatus::Failed));
}

#[test]
fn a_run_left_waiting_is_announced_at_start_with_a_button_that_opens_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let target = paths.workspace.clone().unwrap().join("out/note.txt");
    let mut h = harness_for(App::new(&graph(WRITE), None, &paths));
    run_to_the_approval(&mut h);
    // Quit while it waits: the run stays waiting in the run log.
    h.state_mut().close();
    drop(h);

    let mut h = harness_for(App::new(&graph(WRITE), None, &paths));
    assert!(
        h.query_by_label_contains("No run yet").is_none(),
        "the waiting run is not announced"
    );
    h.get_by_label("A run of this graph waits for your approval");
    press(&mut h, "Open the waiting run");
    wait_until(&mut h, "its approval window", |h| {
        h.query_by_role_and_label(Role::Button, "Approve").is_some()
    });
    press(&mut h, "Approve");
    wait_until(&mut h, "the run to finish", |h| {
        h.state().run.status == Some(RunStatus::Completed)
    });
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written by the test"
    );
    // Nothing waits any more: the head says so.
    assert!(
        h.query_by_label("A run of this graph waits for your approval")
            .is_none()
    );
}

/// How long the app asked to wait before its next frame, after the last one.
fn repaint_delay(h: &AppHarness) -> Duration {
    h.output().viewport_output[&egui::ViewportId::ROOT].repaint_delay
}

/// Frames drawn in `span` of real time by an event loop that draws a frame when the app
/// asks for one (as eframe does): no input, nothing but the app's own requests.
fn frames_while_left_alone(h: &mut AppHarness, span: Duration) -> usize {
    let end = Instant::now() + span;
    let mut frames = 0;
    while Instant::now() < end {
        h.step();
        frames += 1;
        let wait = repaint_delay(h).min(end.saturating_duration_since(Instant::now()));
        std::thread::sleep(wait);
    }
    frames
}

#[test]
fn a_window_whose_run_waits_for_an_approval_repaints_at_most_once_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let app = App::new(&graph(WRITE), None, &paths(&dir));
    // Frames predicted as a real window's (egui asks for repaints that much early).
    let mut h = egui_kittest::Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .with_step_dt(1.0 / 60.0)
        .build_ui_state(|ui, app: &mut App| app.show(ui), app);
    h.run_steps(3);
    run_to_the_approval(&mut h);
    // The timeline unfolded too: it follows the run while it goes.
    h.get_by_label("Timeline").click();
    h.run_steps(60);
    let frames = frames_while_left_alone(&mut h, Duration::from_secs(4));
    assert!(
        frames <= 10,
        "{frames} frames in 4 s while the run waits for an approval"
    );
    assert!(!h.state().run.approvals.is_empty(), "it still waits");
    // Said as a person would: one approval, not "approval(s)".
    h.get_by_label("1 approval pending");
    reject(&mut h);
}

#[test]
fn the_timeline_follows_a_run_through_its_approval_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&graph(WRITE), None, &paths(&dir)));
    h.get_by_label("Timeline").click();
    h.run_steps(3);
    run_to_the_approval(&mut h);
    // Read again while it waits (the run log is written a few milliseconds behind).
    wait_until(&mut h, "the waiting node on the timeline", |h| {
        (h.state().timeline_bars().iter()).any(|bar| bar.node == "write" && bar.end_ms.is_none())
    });
    press(&mut h, "Approve");
    wait_until(&mut h, "the run to end", |h| !h.state().run.is_running());
    h.run_steps(3);
    // The timeline reads the log in the background: its last read is in.
    wait_until(&mut h, "the timeline's last read", |h| {
        h.state().background_tasks() == 0
    });
    assert_eq!(h.state().run.status, Some(RunStatus::Completed));
    let bars = h.state().timeline_bars();
    assert_eq!(bars.len(), 3, "{bars:?}");
    assert!(
        bars.iter().all(|bar| bar.end_ms.is_some()),
        "a node of the finished run still runs on its timeline: {bars:?}"
    );
    let duration = h.state().run.duration_ms.unwrap();
    let last_end = bars.iter().filter_map(|bar| bar.end_ms).max().unwrap();
    assert!(
        last_end <= duration + 5,
        "{last_end} ms past the run's {duration} ms"
    );
    h.get_by_label(format!("Timeline: {last_end} ms").as_str());
    // Its output, named as such once: "Output `path`".
    h.get_by_label("Output `path`");
}

#[test]
fn an_approval_shows_text_of_several_lines_as_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let doc = graph(&WRITE.replace("written by the test", "first line\\nsecond line"));
    let mut h = harness_for(App::new(&doc, None, &paths(&dir)));
    run_to_the_approval(&mut h);
    h.get_by_label("content, as it reads:");
    h.get_by_label("first line\nsecond line");
    reject(&mut h);
}
