//! Leaving the app never loses a pending approval: while the app asks, the run log lists the
//! run as `waiting` (and `agentloom approve` leaves the decision to the app); quitting
//! (File → Quit, Ctrl+Q, the window's close button all end in `App::close`) leaves it
//! `waiting`, and `agentloom approve` then resumes it. A run that waits for nobody stops.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::path::Path;

use agentloom::app::Command;
use agentloom_engine::{NodeStatus, RunStatus, RunStore};
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable as _;
use support::{
    AppHarness, agentloom_cli, assert_exit_ok, graph, harness, live_agent_graph, paths, wait_until,
};

/// A write that asks first (safe mode), beside a branch that waits `ms` (still going when
/// the app quits).
fn write_beside_a_delay(ms: u64) -> agentloom_core::GraphDoc {
    graph(&WRITE_BESIDE_A_DELAY.replace("DELAY_MS", &ms.to_string()))
}

const WRITE_BESIDE_A_DELAY: &str = r#"{"format":"agentloom.graph","version":1,"name":"write",
  "settings":{"safe_mode":true},
  "nodes":[
    {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"written after quitting","type":"text"}},
    {"id":"write","block":"file.write","position":[250,0],"config":{"path":"note.txt"}},
    {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"path"}},
    {"id":"slow","block":"control.delay","position":[250,200],"config":{"ms":DELAY_MS}},
    {"id":"late","block":"graph.output","position":[500,200],"config":{"name":"late"}}],
  "edges":[{"from":["text","value"],"to":["write","content"]},
           {"from":["write","path"],"to":["out","value"]},
           {"from":["text","value"],"to":["slow","value"]},
           {"from":["slow","value"],"to":["late","value"]}]}"#;

/// Only a long wait: nothing to approve.
const ONLY_A_DELAY: &str = r#"{"format":"agentloom.graph","version":1,"name":"wait",
  "nodes":[
    {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"x","type":"text"}},
    {"id":"slow","block":"control.delay","position":[250,0],"config":{"ms":60000}}],
  "edges":[{"from":["text","value"],"to":["slow","value"]}]}"#;

/// The one run in the run log at `db`.
fn only_run(db: &Path) -> agentloom_engine::RunRow {
    let mut runs = RunStore::open(db).unwrap().list_runs(10).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs.remove(0)
}

/// Run `run_id` read back from `db`, which must have completed.
fn completed_run(db: &Path, run_id: &str) -> agentloom_engine::RunDetail {
    let detail = RunStore::open(db)
        .unwrap()
        .get_run(run_id)
        .unwrap()
        .unwrap();
    assert_eq!(
        detail.run.status,
        RunStatus::Completed,
        "{:?}",
        detail.run.error
    );
    detail
}

fn start_run(h: &mut AppHarness) {
    h.get_by_role_and_label(Role::Button, "▶ Run").click();
    h.run_steps(2);
}

/// File → Quit as the menu sends it, then what eframe does as the window goes.
fn quit(h: &mut AppHarness) {
    h.state_mut().send(Command::Quit);
    h.run_steps(2);
    h.state_mut().close();
}

#[test]
fn quitting_while_an_approval_waits_leaves_the_run_waiting_for_agentloom_approve() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let workspace = paths.workspace.clone().unwrap();
    let db = paths.run_log.clone().unwrap();
    let mut h = harness(&write_beside_a_delay(1500), &paths);
    start_run(&mut h);
    wait_until(&mut h, "the approval", |h| {
        !h.state().run.approvals.is_empty()
    });
    h.get_by_label_contains("`write` (Write file: write note.txt) waits for approval");

    // While the app asks, the run log lists the run as waiting…
    let run_id = only_run(&db).id;
    wait_until(&mut h, "the run log to list the run as waiting", |_| {
        only_run(&db).status == RunStatus::Waiting
    });
    let listed = agentloom_cli(&["runs", "--json"], &db);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["status"], "waiting", "{listed}");
    // …and the decision is the app's while it asks: a command line cannot take it over.
    let taken = agentloom_cli(&["approve", &run_id], &db);
    assert_ne!(taken.status.code(), Some(0));
    let said = String::from_utf8_lossy(&taken.stderr);
    assert!(said.contains("still going"), "{said}");
    assert!(!workspace.join("note.txt").exists());
    assert!(h.state().run.is_running());

    quit(&mut h);
    let run = only_run(&db);
    assert_eq!(run.status, RunStatus::Waiting, "{:?}", run.error);
    let store = RunStore::open(&db).unwrap();
    let pending = store.pending_approvals(&run_id).unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].node, "write");
    assert_eq!(pending[0].decision, None);
    drop(store);

    let approved = agentloom_cli(&["approve", &run_id], &db);
    assert_exit_ok(&approved);
    assert_eq!(
        std::fs::read_to_string(workspace.join("note.txt")).unwrap(),
        "written after quitting"
    );
    let detail = completed_run(&db, &run_id);
    // The slow branch the quit stopped ran again on resuming.
    assert_eq!(
        detail.outputs["late"],
        agentloom_core::Value::from("written after quitting")
    );
    assert!(
        detail
            .nodes
            .iter()
            .all(|node| node.status == NodeStatus::Done),
        "{:?}",
        detail.nodes
    );
}

#[test]
fn an_approval_decided_in_the_app_lists_the_run_as_running_again() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let db = paths.run_log.clone().unwrap();
    let mut h = harness(&write_beside_a_delay(10_000), &paths);
    start_run(&mut h);
    wait_until(&mut h, "the approval", |h| {
        !h.state().run.approvals.is_empty()
    });
    wait_until(&mut h, "the run log to list the run as waiting", |_| {
        only_run(&db).status == RunStatus::Waiting
    });
    h.get_by_role_and_label(Role::Button, "Approve").click();
    h.run_steps(2);
    // The slow branch still goes: the run is running again, no longer waiting.
    wait_until(&mut h, "the run log to list the run as running", |_| {
        only_run(&db).status == RunStatus::Running
    });
    assert!(h.state().run.is_running());
    // Quitting now stops it: nothing waits for a decision any more.
    quit(&mut h);
    assert_eq!(only_run(&db).status, RunStatus::Cancelled);
}

#[test]
fn quitting_stops_a_run_that_waits_for_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let db = paths.run_log.clone().unwrap();
    let mut h = harness(&graph(ONLY_A_DELAY), &paths);
    start_run(&mut h);
    wait_until(&mut h, "the delay to start", |h| {
        h.state()
            .run
            .node("slow")
            .is_some_and(|n| n.status == NodeStatus::Running)
    });
    quit(&mut h);
    assert!(!h.state().run.is_running());
    assert_eq!(only_run(&db).status, RunStatus::Cancelled);
}

/// The agent of the report: safe mode, its `write_file` waits for approval, the app quits;
/// `agentloom approve` resumes the agent from its checkpoint and it finishes.
#[test]
fn an_agent_waiting_for_approval_resumes_after_quitting() {
    let Some(fake) = agentloom_tests::FakeLlm::start("agent/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let workspace = paths.workspace.clone().unwrap();
    let db = paths.run_log.clone().unwrap();
    let mut h = harness(&live_agent_graph(&fake.base()), &paths);
    start_run(&mut h);
    wait_until(&mut h, "the approval", |h| {
        !h.state().run.approvals.is_empty()
    });
    wait_until(&mut h, "the run log to list the run as waiting", |_| {
        only_run(&db).status == RunStatus::Waiting
    });
    quit(&mut h);
    let run = only_run(&db);
    assert_eq!(run.status, RunStatus::Waiting, "{:?}", run.error);
    assert!(!workspace.join("live.txt").exists());

    assert_exit_ok(&agentloom_cli(&["approve", &run.id], &db));
    assert_eq!(
        std::fs::read_to_string(workspace.join("live.txt")).unwrap(),
        "x"
    );
    let detail = completed_run(&db, &run.id);
    assert_eq!(
        detail.outputs["answer"],
        agentloom_core::Value::from("Left live.txt alone.")
    );
}
