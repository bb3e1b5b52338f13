//! What a run did, at a glance: the inspector's Configure | Last run tabs (Last run opening
//! by itself when a run reaches the block, but not while a field is being typed in), the
//! run panel's head staying in view above outputs shown whole, an agent's live trace with
//! the tool under way counting up (fakellm, from when it started, also in a run opened from
//! the log while another process runs it), a failed agent's steps kept above its error,
//! and the approval window beside its node.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::time::{Duration, Instant};

use agentloom::app::Command;
use agentloom_engine::RunStatus;
use egui::accesskit::Role;
use egui::{Modifiers, PointerButton, Pos2, Rect};
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::{
    AppHarness, click_at, copied_text, drag, graph, harness, live_agent_graph, paths,
    shown_anywhere, wait_for_completed_run, wait_until,
};

/// A constant of `lines` numbered lines into the graph's output `out`.
fn long_text_graph(lines: usize) -> agentloom_core::GraphDoc {
    let text: Vec<String> = (0..lines).map(|i| format!("line {i}")).collect();
    graph(
        &serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "long",
            "nodes": [
                {"id": "long", "block": "data.constant", "position": [0, 0],
                 "config": {"type": "text", "value": text.join("\n")}},
                {"id": "out", "block": "graph.output", "position": [300, 0],
                 "config": {"name": "out"}}
            ],
            "edges": [{"from": ["long", "value"], "to": ["out", "value"]}]
        })
        .to_string(),
    )
}

fn run_to_the_end(h: &mut AppHarness) {
    h.state_mut().send(Command::Run);
    h.run_steps(2);
    wait_for_completed_run(h);
}

/// The Configure tab shows the block's fields; Last run its outputs with their Copy.
fn configure_shown(h: &AppHarness) -> bool {
    h.query_by_role_and_label(Role::TextInput, "Value")
        .is_some()
}

fn last_run_shown(h: &AppHarness) -> bool {
    shown_anywhere(h, "Copy the node's outputs")
}

#[test]
fn last_run_opens_by_itself_when_a_run_reaches_the_block_but_not_while_typing() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&long_text_graph(3), &paths(&dir));
    h.state_mut().send(Command::InspectById("long".into()));
    h.run_steps(3);
    assert!(configure_shown(&h), "a block opens on Configure");
    assert!(!last_run_shown(&h));

    run_to_the_end(&mut h);
    assert!(last_run_shown(&h), "the run reached the block: Last run");
    assert!(!configure_shown(&h));

    // The person goes back to Configure and starts typing a label.
    h.get_by_label("Configure").click();
    h.run_steps(2);
    assert!(configure_shown(&h));
    let field = h
        .get_by_role_and_label(Role::TextInput, "Value")
        .rect()
        .center();
    click_at(&mut h, field, PointerButton::Primary, Modifiers::NONE);
    assert!(
        h.ctx.egui_wants_keyboard_input(),
        "the field has the keyboard"
    );
    run_to_the_end(&mut h);
    assert!(
        configure_shown(&h) && !last_run_shown(&h),
        "a run does not take the tab from a field being typed in"
    );

    // Switching by hand still works.
    h.get_by_label("Last run").click();
    h.run_steps(2);
    assert!(last_run_shown(&h));
}

#[test]
fn the_run_panel_keeps_its_head_in_view_and_shows_long_outputs_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&long_text_graph(80), &paths(&dir));
    run_to_the_end(&mut h);
    h.run_steps(2);

    // The whole answer, to its last line.
    let output = h.get_by_label_contains("line 79").rect();
    let head = h.get_by_label("Run completed").rect();
    let output_top = output.top();
    // Scrolled to its end, the output moves and the head stays where it was.
    let over = Pos2::new(output.left() + 20.0, head.bottom() + 30.0);
    h.event(egui::Event::PointerMoved(over));
    for _ in 0..20 {
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -200.0),
            modifiers: Modifiers::NONE,
            phase: egui::TouchPhase::Move,
        });
        h.step();
    }
    h.run_steps(3);
    assert!(
        h.get_by_label_contains("line 79").rect().top() < output_top - 100.0,
        "the output scrolled"
    );
    assert_eq!(
        h.get_by_label("Run completed").rect(),
        head,
        "the head stayed"
    );

    // Its top edge drags up: more of the output shows, the head still above it.
    let edge = h.state().canvas_screen_rect().bottom();
    let x = output.left() + 200.0;
    drag(
        &mut h,
        Pos2::new(x, edge + 1.0),
        Pos2::new(x, edge - 150.0),
        Modifiers::NONE,
    );
    let taller = h.get_by_label("Run completed").rect();
    assert!(
        taller.top() < head.top() - 120.0,
        "the panel grew: its head went from {head:?} to {taller:?}"
    );

    h.get_by_label("Copy the run's outputs").click();
    h.run_steps(1);
    let copied = copied_text(&h).unwrap();
    assert!(copied.starts_with("line 0\n") && copied.ends_with("line 79"));

    // The block's Last run: its head stays above its outputs, which are whole too.
    h.state_mut().send(Command::InspectById("long".into()));
    h.run_steps(3);
    h.get_by_label("Last run").click();
    h.run_steps(2);
    assert!(last_run_shown(&h));
    assert!(h.get_all_by_label_contains("line 79").count() >= 2);
}

/// A Worker agent (not in safe mode) given `goal`, with `config` beside its model.
fn worker_agent_graph(
    fakellm_base: &str,
    goal: &str,
    config: &serde_json::Value,
) -> agentloom_core::GraphDoc {
    let mut agent =
        serde_json::json!({"base_url": format!("{fakellm_base}/v1"), "model": "test-model"});
    agent
        .as_object_mut()
        .unwrap()
        .extend(config.as_object().unwrap().clone());
    graph(
        &serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "worker",
            "nodes": [
                {"id": "goal", "block": "data.constant", "position": [40, 40],
                 "config": {"type": "text", "value": goal}},
                {"id": "agent", "block": "ai.agent", "label": "Worker", "position": [360, 40],
                 "config": agent},
                {"id": "out", "block": "graph.output", "position": [760, 40],
                 "config": {"name": "answer"}}
            ],
            "edges": [{"from": ["goal", "value"], "to": ["agent", "goal"]},
                      {"from": ["agent", "answer"], "to": ["out", "value"]}]
        })
        .to_string(),
    )
}

/// A Worker agent whose fakellm script runs a 3-second program.
fn slow_agent_graph(fakellm_base: &str) -> agentloom_core::GraphDoc {
    worker_agent_graph(
        fakellm_base,
        "TASK-SLOW: take your time",
        &serde_json::json!({}),
    )
}

/// The slow agent's run started, the agent in the inspector; `None` without fakellm.
fn slow_agent_running(dir: &tempfile::TempDir) -> Option<(agentloom_tests::FakeLlm, AppHarness)> {
    let fake = agentloom_tests::FakeLlm::start("agent/fakellm.yaml")?;
    let mut h = harness(&slow_agent_graph(&fake.base()), &paths(dir));
    h.state_mut().send(Command::InspectById("agent".into()));
    h.run_steps(2);
    h.state_mut().send(Command::Run);
    Some((fake, h))
}

#[test]
fn the_agent_trace_shows_the_tool_under_way_counting_up_then_each_steps_parts() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_fake, mut h)) = slow_agent_running(&dir) else {
        return;
    };
    // While the program sleeps: its tool, counting up, in the inspector; on the canvas,
    // the node's step line names it too.
    wait_until(&mut h, "the running step", |h| {
        shown_anywhere(h, "step 1 · run_code · running 1 s")
    });
    assert!(h.state().run.is_running());
    h.get_by_label_contains("step 1 · run_code running…");
    wait_until(&mut h, "the seconds to count up", |h| {
        shown_anywhere(h, "step 1 · run_code · running 2 s")
    });
    wait_until(&mut h, "the run to end", |h| !h.state().run.is_running());
    assert_eq!(
        h.state().run.status,
        Some(RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    // Afterwards, one row a step, the tool's time on it.
    let first = h.get_by_label_contains("step 1 · run_code · ");
    let time = first.accesskit_node().label().unwrap_or_default();
    assert!(time.ends_with(" s"), "{time}");
    assert!(!time.contains("running"), "{time}");
    h.get_by_label_contains("step 2 · finish");
    // Open (as it was while it ran): the step's parts in the order they happened, each
    // with its Copy.
    if h.query_by_label("Observation").is_none() {
        first.click();
        h.run_steps(3);
    }
    let top = |h: &AppHarness, text: &str| h.get_by_label(text).rect().top();
    let tops = ["Tool", "Arguments", "Observation"].map(|part| top(&h, part));
    assert!(tops.is_sorted(), "{tops:?}");
    h.get_by_label("Copy observation of step 1").scroll_to_me();
    h.run_steps(3);
    h.get_by_label("Copy observation of step 1").click();
    h.run_steps(1);
    assert!(copied_text(&h).unwrap().contains("slept"));
    h.get_by_label("Copy arguments of step 1").scroll_to_me();
    h.run_steps(3);
    h.get_by_label("Copy arguments of step 1").click();
    h.run_steps(1);
    assert!(copied_text(&h).unwrap().contains("time.sleep(3)"));
}

#[test]
fn a_step_under_way_when_the_run_is_stopped_did_not_finish_on_the_node_and_in_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_fake, mut h)) = slow_agent_running(&dir) else {
        return;
    };
    wait_until(&mut h, "the running step", |h| {
        shown_anywhere(h, "step 1 · run_code running…")
    });
    h.state_mut().send(Command::StopRun);
    wait_until(&mut h, "the run to stop", |h| !h.state().run.is_running());
    assert_eq!(h.state().run.status, Some(RunStatus::Cancelled));
    h.run_steps(5);
    // On the node (as painted: its badge is cut to the node's width) and in the trace.
    let painted: Vec<String> = h
        .output()
        .shapes
        .iter()
        .filter_map(|clipped| match &clipped.shape {
            egui::Shape::Text(text) => Some(text.galley.text().to_owned()),
            _ => None,
        })
        .filter(|text| text.starts_with("step 1 · run_code"))
        .collect();
    assert_eq!(painted.len(), 2, "{painted:?}");
    for line in &painted {
        assert!(
            !line.contains("running") && line.contains(" did n"),
            "a stopped step still shows as running: {painted:?}"
        );
    }
}

/// The id of the run in `db` whose agent has a step under way, once the run log holds it.
fn run_with_a_step_under_way(db: &std::path::Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no running step in the run log");
        std::thread::sleep(Duration::from_millis(50));
        let Ok(store) = agentloom_engine::RunStore::open(db) else {
            continue;
        };
        let Some(run) = store.list_runs(1).unwrap().into_iter().next() else {
            continue;
        };
        let detail = store.get_run(&run.id).unwrap().unwrap();
        let state = agentloom_engine::RunState::from(&detail);
        if state.node("agent").is_some_and(|agent| {
            agent
                .partial
                .get("transcript")
                .is_some_and(|t| t.contains(r#""running":true"#))
        }) {
            return run.id;
        }
    }
}

#[test]
fn a_tool_under_way_counts_from_its_start_in_a_run_opened_from_the_log() {
    let rules = r#"rules:
  - name: long_sleep
    when: {messages_contain: "TASK-LONG", turn: 1}
    respond:
      tool_calls: [{name: run_code, arguments: {code: "import time\ntime.sleep(10)\nprint('slept')"}}]
  - name: long_finish
    when: {messages_contain: "TASK-LONG", turn: 2}
    respond:
      tool_calls: [{name: finish, arguments: {answer: "Slept long."}}]
"#;
    let Some(fake) = agentloom_tests::FakeLlm::start_with_rules(rules) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let db = paths.run_log.clone().unwrap();
    let doc = worker_agent_graph(&fake.base(), "TASK-LONG: sleep", &serde_json::json!({}));
    let file = dir.path().join("long.agentloom.json");
    std::fs::write(&file, doc.to_json_string()).unwrap();
    // Another process runs it: `agentloom run`.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .args(["run", "--trust"])
        .arg(&file)
        .arg("--db")
        .arg(&db)
        .arg("--workspace")
        .arg(paths.workspace.as_ref().unwrap())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run_id = run_with_a_step_under_way(&db);
    // The tool has been running 2 s and more when the app first sees the run.
    std::thread::sleep(Duration::from_millis(2_500));
    let mut h = harness(&doc, &paths);
    h.state_mut().send(Command::OpenRun(run_id));
    h.state_mut().send(Command::InspectById("agent".into()));
    h.run_steps(3);
    if h.query_by_label("Last run").is_some() {
        h.get_by_label("Last run").click();
        h.run_steps(3);
    }
    let row = h.get_by_label_contains("step 1 · run_code · ");
    let label = row.accesskit_node().label().unwrap_or_default();
    let seconds: u64 = label
        .strip_prefix("step 1 · run_code · running ")
        .and_then(|rest| rest.strip_suffix(" s"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a step under way: {label}"));
    assert!(seconds >= 2, "counted from when the app saw it: {label}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A Worker agent whose fakellm script never finishes, stopped by its step limit after two
/// steps.
fn step_limited_agent_graph(fakellm_base: &str) -> agentloom_core::GraphDoc {
    worker_agent_graph(
        fakellm_base,
        "TASK-BUSY: keep looking",
        &serde_json::json!({"max_steps": 2}),
    )
}

/// The agent's Last run shows both steps, above the step-limit error.
fn failed_trace_shown(h: &mut AppHarness) {
    h.state_mut().send(Command::InspectById("agent".into()));
    h.run_steps(3);
    if h.query_by_label("Last run").is_some() {
        h.get_by_label("Last run").click();
        h.run_steps(3);
    }
    // In the inspector, right of the canvas (the node's badge says some of it too).
    let canvas = h.state().canvas_screen_rect();
    let in_inspector = |h: &AppHarness, text: &str| {
        let found: Vec<Rect> = h
            .get_all_by_label_contains(text)
            .map(|n| n.rect())
            .filter(|r| r.left() >= canvas.right() && r.top() < canvas.bottom())
            .collect();
        assert_eq!(found.len(), 1, "`{text}` in the inspector: {found:?}");
        found[0]
    };
    let error = in_inspector(h, "step limit reached");
    for step in ["step 1 · list_files", "step 2 · list_files"] {
        let row = in_inspector(h, step);
        assert!(
            row.top() < error.top(),
            "`{step}` at {row:?} is not above the error at {error:?}"
        );
    }
}

#[test]
fn a_failed_agent_keeps_its_steps_above_the_error_live_and_from_history() {
    let Some(fake) = agentloom_tests::FakeLlm::start("agent/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let doc = step_limited_agent_graph(&fake.base());
    let mut h = harness(&doc, &paths(&dir));
    h.state_mut().send(Command::Run);
    h.run_steps(2);
    wait_until(&mut h, "the run to end", |h| {
        h.state().run.status.is_some() && !h.state().run.is_running()
    });
    assert_eq!(h.state().run.status, Some(RunStatus::Failed));
    failed_trace_shown(&mut h);
    let run_id = h.state().run.run_id.clone().unwrap();
    drop(h);

    // The same run opened from the run log in a fresh app.
    let mut h = harness(&doc, &paths(&dir));
    h.state_mut().send(Command::OpenRun(run_id));
    h.run_steps(3);
    assert_eq!(h.state().run.status, Some(RunStatus::Failed));
    failed_trace_shown(&mut h);
}

/// The rectangle of the approval window's Approve button, if shown.
fn approve_button(h: &AppHarness) -> Option<Rect> {
    h.query_by_role_and_label(Role::Button, "Approve")
        .map(|b| b.rect())
}

#[test]
fn the_approval_window_opens_beside_its_node_stays_put_and_can_be_moved() {
    let Some(fake) = agentloom_tests::FakeLlm::start("agent/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&live_agent_graph(&fake.base()), &paths(&dir));
    h.state_mut().send(Command::Run);
    // From the first frame it shows, the window does not move.
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        if let Some(rect) = approve_button(&h) {
            break rect;
        }
        assert!(Instant::now() < deadline, "no approval window");
        h.step();
        std::thread::sleep(Duration::from_millis(10));
    };
    for _ in 0..10 {
        h.step();
        assert_eq!(
            approve_button(&h),
            Some(first),
            "the window moved by itself"
        );
    }
    h.get_by_label("waiting for approval");
    // Beside the node: neither the node nor its badges are under it.
    let node = h.state().node_screen_rect("agent").unwrap();
    let question = h.get_by_label_contains("waits for approval").rect();
    let window = question.union(first);
    assert!(
        !window.intersects(node),
        "the window {window:?} covers the node {node:?}"
    );
    // Dragged by its title, it goes where it is put, and stays.
    // The title bar, above the window's first line.
    let title = Pos2::new(question.left() + 40.0, question.top() - 14.0);
    drag(
        &mut h,
        title,
        title + egui::vec2(-120.0, 90.0),
        Modifiers::NONE,
    );
    let moved = approve_button(&h).unwrap();
    assert!(
        (moved.center() - first.center() - egui::vec2(-120.0, 90.0)).length() < 10.0,
        "{first:?} -> {moved:?}"
    );
    h.run_steps(5);
    assert_eq!(approve_button(&h), Some(moved));
    h.get_by_role_and_label(Role::Button, "Reject").click();
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
}
