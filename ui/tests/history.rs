//! The run history panel: the graph shown's runs by default and every graph's with "All
//! graphs", a live run listed at once with its state, long names shortened in the middle.
//! Driven through the real UI (egui_kittest), runs recorded in a real SQLite run log.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command};
use agentloom_engine::RunStatus;
use egui::accesskit::Role;
use egui_kittest::kittest::{By, NodeT as _, Queryable as _};
use serde_json::json;
use support::{AppHarness, agentloom_cli, assert_exit_ok, harness_for, paths, wait_until};

const OTHER: &str = "Weekly digest of the open issues and pull requests of every repository";

/// The state the history lists the live run in, if it lists it.
fn listed(h: &AppHarness) -> Option<RunStatus> {
    let id = h.state().run.run_id.clone()?;
    h.state()
        .history()
        .iter()
        .find(|run| run.id == id)
        .map(|run| run.status)
}

#[test]
fn the_history_lists_this_graphs_runs_live_and_every_graphs_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let db = paths.run_log.clone().unwrap();
    // A run of another graph, from the command line.
    let other = dir.path().join("digest.json");
    std::fs::write(
        &other,
        json!({
            "format": "agentloom.graph", "version": 1, "name": OTHER,
            "nodes": [
                {"id": "text", "block": "data.constant", "config": {"value": "hi", "type": "text"}},
                {"id": "out", "block": "graph.output", "config": {"name": "out"}}
            ],
            "edges": [{"from": ["text", "value"], "to": ["out", "value"]}]
        })
        .to_string(),
    )
    .unwrap();
    assert_exit_ok(&agentloom_cli(&["run", other.to_str().unwrap()], &db));

    // This graph: a wait, then a person is asked.
    let gate = support::graph(
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "Gate",
            "nodes": [
                {"id": "text", "block": "data.constant", "position": [0, 0], "config": {"value": "hello", "type": "text"}},
                {"id": "wait", "block": "control.delay", "position": [250, 0], "config": {"ms": 1500}},
                {"id": "gate", "block": "human.approval", "position": [500, 0], "config": {"action": "Send it?"}},
                {"id": "out", "block": "graph.output", "position": [750, 0], "config": {"name": "sent"}}
            ],
            "edges": [
                {"from": ["text", "value"], "to": ["wait", "value"]},
                {"from": ["wait", "value"], "to": ["gate", "value"]},
                {"from": ["gate", "value"], "to": ["out", "value"]}
            ]
        })
        .to_string(),
    );
    let mut h = harness_for(App::new(&gate, None, &paths));
    assert!(h.state().history().is_empty(), "{:?}", h.state().history());
    h.get_by_label("No runs of “Gate” yet.");

    // Listed while it runs, not once it ends.
    h.state_mut().send(Command::StartRun);
    wait_until(&mut h, "the run listed as running", |h| {
        listed(h) == Some(RunStatus::Running)
    });
    assert!(
        h.state().run.approvals.is_empty(),
        "listed only when the wait was over"
    );
    h.get_by_label_contains("running · just now");

    // Asking: listed as waiting.
    wait_until(&mut h, "the run listed as waiting", |h| {
        listed(h) == Some(RunStatus::Waiting)
    });
    assert!(h.state().run.is_running());
    h.get_by_label_contains("waiting · just now");

    // Decided: completed.
    h.get_by_role_and_label(Role::Button, "Approve").click();
    wait_until(&mut h, "the run to end", |h| !h.state().run.is_running());
    wait_until(&mut h, "the run listed as completed", |h| {
        listed(h) == Some(RunStatus::Completed)
    });
    assert_eq!(h.state().history().len(), 1, "{:?}", h.state().history());

    // All graphs: the other graph's run too, its long name shortened in the middle.
    h.get_by_role_and_label(Role::CheckBox, "All graphs")
        .click();
    h.run_steps(3);
    assert_eq!(h.state().history().len(), 2, "{:?}", h.state().history());
    let row = h
        .query_all(By::new().predicate(|_| true))
        .filter_map(|node| node.accesskit_node().label())
        .find(|label| label.starts_with("We") && label.contains("completed"))
        .expect("a row of the other graph");
    // The graph's name above the run's state.
    let (name, facts) = row.split_once('\n').unwrap();
    assert!(facts.starts_with("completed · just now"), "{row}");
    let (head, tail) = name.split_once('…').expect("shortened in the middle");
    assert!(
        OTHER.starts_with(head) && OTHER.ends_with(tail) && head.len() + tail.len() >= 24,
        "both ends kept: {row}"
    );
    h.get_by_label_contains("Gate\ncompleted · just now");

    // Back to this graph's runs.
    h.get_by_role_and_label(Role::CheckBox, "All graphs")
        .click();
    h.run_steps(3);
    assert_eq!(h.state().history().len(), 1);
    assert!(h.query_by_label_contains("Weekly").is_none());
}
