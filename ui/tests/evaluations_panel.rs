//! The Evaluations panel and the run timeline, driven through the real UI (egui_kittest):
//! View → Evaluations, run a cases file, ✔/❌ per check, a case opens its run on the
//! canvas, the shown run added as a case, the chart of the graph's evaluations, and the
//! timeline of the shown run's nodes.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command, save_graph};
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, example, harness_for, paths, wait_until};

fn press(h: &mut AppHarness, role: Role, label: &str) {
    h.get_by_role_and_label(role, label).click();
    h.run_steps(3);
}

#[test]
fn a_cases_file_runs_from_the_panel_and_a_case_opens_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("hello.agentloom.json");
    save_graph(&example(), &graph).unwrap();
    let cases = dir.path().join("hello.cases.jsonl");
    std::fs::write(
        &cases,
        "{\"name\": \"greets Ada\", \"inputs\": {\"name\": \"Ada\"}, \"expect\": {\"greeting\": \"Hello, Ada!\"}}\n\
         {\"name\": \"wrong\", \"inputs\": {\"name\": \"Bob\"}, \"expect\": {\"greeting\": \"Bye\"}}\n",
    )
    .unwrap();
    let mut h = harness_for(App::new(&example(), Some(graph.clone()), &paths(&dir)));
    press(&mut h, Role::Button, "View");
    press(&mut h, Role::Button, "Evaluations");
    assert!(h.state().evaluations.open);
    h.get_by_label("Cases file");
    h.state_mut().evaluations.cases_path = cases.display().to_string();
    h.run_steps(2);
    press(&mut h, Role::Button, "Run evaluation");
    wait_until(&mut h, "the evaluation", |h| {
        h.state().evaluations.result.is_some()
    });
    assert_eq!(h.state().evaluations.status, "1 passed, 1 failed");
    h.get_by_label("✔ greets Ada");
    h.get_by_label("❌ wrong");
    assert!(
        h.query_all_by_label("✔ greeting equals").count() >= 1,
        "a ✔ per passed check"
    );
    h.get_by_label("❌ greeting equals");
    h.get_by_label("Pass rate and cost over 1 evaluations");
    // The cases' runs are in the history at once.
    h.run_steps(2);
    assert_eq!(h.state().history().len(), 2, "{:?}", h.state().history());

    // A case opens its run on the canvas.
    let result = h.state().evaluations.result.clone().unwrap();
    let ada_run = result["cases"][0]["runs"][0]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    h.get_by_label("✔ greets Ada").click();
    h.run_steps(3);
    wait_until(&mut h, "the case's run on the canvas", |h| {
        h.state().run.run_id.as_deref() == Some(ada_run.as_str())
    });

    // The shown run becomes a third case.
    press(&mut h, Role::Button, "Add the shown run as a case");
    let text = std::fs::read_to_string(&cases).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    let added: serde_json::Value = serde_json::from_str(text.lines().nth(2).unwrap()).unwrap();
    assert_eq!(added["inputs"]["name"], "Ada");
    assert_eq!(added["expect"]["greeting"], "Hello, Ada!");

    // History → Replay: the graph runs again with the recorded run's inputs.
    h.state_mut().send(Command::ReplayRun(ada_run.clone()));
    wait_until(&mut h, "the replayed run", |h| {
        !h.state().run.is_running()
            && h.state()
                .run
                .run_id
                .as_deref()
                .is_some_and(|id| id != ada_run)
            && h.state().run.outputs.contains_key("greeting")
    });
    assert_eq!(
        h.state().run.outputs["greeting"],
        agentloom_core::Value::from("Hello, Ada!")
    );

    // The timeline of the shown run lists its nodes.
    h.get_by_label("Timeline").click();
    h.run_steps(3);
    h.get_by_label_contains("Timeline:");
    let bars = h.state().timeline_bars();
    assert!(
        bars.iter()
            .any(|b| b.node == "render" && b.end_ms.is_some()),
        "{bars:?}"
    );
}
