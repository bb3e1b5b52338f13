//! The Evaluations panel and the run timeline, driven through the real UI (egui_kittest):
//! View → Evaluations, run a cases file, ✔/❌ per check, a case opens its run on the
//! canvas, the shown run added as a case, the chart of the graph's evaluations, and the
//! timeline of the shown run's nodes.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command, save_graph};
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, example, harness_for, paths, payload_peer, wait_until};

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

    // The timeline of the shown run lists its nodes (read from the log in the background).
    h.get_by_label("Timeline").click();
    wait_until(&mut h, "the timeline", |h| {
        h.query_by_label_contains("Timeline:").is_some()
    });
    h.get_by_label_contains("Timeline:");
    let bars = h.state().timeline_bars();
    assert!(
        bars.iter()
            .any(|b| b.node == "render" && b.end_ms.is_some()),
        "{bars:?}"
    );
}

/// `doc` saved in `dir`, the panel open on it with `cases` (JSON Lines) as its
/// cases file.
fn panel_on(dir: &tempfile::TempDir, doc: &agentloom_core::GraphDoc, cases: &str) -> AppHarness {
    let graph = dir.path().join("graph.agentloom.json");
    save_graph(doc, &graph).unwrap();
    let cases_file = dir.path().join("cases.jsonl");
    std::fs::write(&cases_file, cases).unwrap();
    let paths = paths(dir);
    // Saved by its user, as the app saves: trusted as it is.
    let store = agentloom::trust::TrustStore::in_dir(paths.data_dir.as_deref().unwrap());
    store
        .trust(agentloom::trust::fingerprint(&graph).unwrap())
        .unwrap();
    let mut h = harness_for(App::new(doc, Some(graph), &paths));
    press(&mut h, Role::Button, "View");
    press(&mut h, Role::Button, "Evaluations");
    h.state_mut().evaluations.cases_path = cases_file.display().to_string();
    h.run_steps(2);
    h
}

/// Replaces what field `label` holds with `text`, typed.
fn type_into(h: &mut AppHarness, label: &str, text: &str) {
    let field = h.get_by_role_and_label(Role::TextInput, label);
    field.click();
    h.run_steps(1);
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    h.get_by_role_and_label(Role::TextInput, label)
        .type_text(text);
    h.run_steps(2);
}

/// Picks `option` in the drop-down labelled `label`.
fn choose(h: &mut AppHarness, label: &str, option: &str) {
    press(h, Role::ComboBox, label);
    press(h, Role::Button, option);
}

fn evaluate(h: &mut AppHarness) -> serde_json::Value {
    h.state_mut().evaluations.result = None;
    press(h, Role::Button, "Run evaluation");
    wait_until(h, "the evaluation", |h| {
        h.state().evaluations.result.is_some() && !h.state().evaluations.is_running()
    });
    h.run_steps(3);
    h.state().evaluations.result.clone().unwrap()
}

fn hello_case(name: &str, who: &str, greeting: &str) -> String {
    format!(
        "{}\n",
        serde_json::json!({"name": name, "inputs": {"name": who}, "expect": {"greeting": greeting}})
    )
}

#[test]
fn repeat_and_concurrency_typed_in_the_panel_shape_the_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let cases = hello_case("ada", "Ada", "Hello, Ada!") + &hello_case("bob", "Bob", "Hello, Bob!");
    let mut h = panel_on(&dir, &example(), &cases);

    // A count that is not one is refused, naming the field, and nothing starts.
    type_into(&mut h, "Repeat", "many");
    press(&mut h, Role::Button, "Run evaluation");
    assert!(!h.state().evaluations.is_running());
    h.get_by_label("Repeat must be a whole number from 1 to 1000, not \"many\"");

    type_into(&mut h, "Repeat", "2");
    type_into(&mut h, "Concurrency", "3");
    let result = evaluate(&mut h);
    assert_eq!(result["repeat"], 2, "{result}");
    assert_eq!(result["concurrency"], 3, "{result}");
    assert_eq!(result["runs"], 4);
    assert_eq!(result["cases"][0]["runs"].as_array().unwrap().len(), 2);
    assert_eq!(h.state().evaluations.status, "2 passed, 0 failed");
    // A check is shown once a case, with how many of its runs passed it.
    assert_eq!(h.query_all_by_label("✔ greeting equals 2/2").count(), 2);
    h.get_by_label_contains("pass rate 100% (95% interval ");
}

#[test]
fn a_baseline_chosen_in_the_panel_names_the_newly_failing_and_passing_cases() {
    let dir = tempfile::tempdir().unwrap();
    let cases = hello_case("ada", "Ada", "Hello, Ada!") + &hello_case("bob", "Bob", "Bye, Bob!");
    let mut h = panel_on(&dir, &example(), &cases);
    let first = evaluate(&mut h);
    let first_id = first["eval_id"].as_str().unwrap().to_owned();

    // Now Ada's case fails and Bob's passes.
    let cases = hello_case("ada", "Ada", "Bye, Ada!") + &hello_case("bob", "Bob", "Hello, Bob!");
    std::fs::write(h.state().evaluations.cases_path.clone(), cases).unwrap();
    choose(
        &mut h,
        "Baseline",
        &format!("evaluation {} · 1 passed, 1 failed", first_id),
    );
    assert_eq!(
        h.state().evaluations.baseline.as_deref(),
        Some(first_id.as_str())
    );
    let second = evaluate(&mut h);
    assert_eq!(second["baseline"]["eval_id"], first_id.as_str(), "{second}");
    h.get_by_label("Newly failing: ada");
    h.get_by_label("Newly passing: bob");
    h.get_by_label_contains(&format!(
        "Against evaluation {}: pass rate +0 points, cost +0.0000 USD, time ",
        first_id
    ));
}

#[test]
fn a_replay_chosen_in_the_panel_answers_from_an_evaluation_or_a_run_with_no_request() {
    use std::sync::atomic::Ordering;
    let (url, served) = payload_peer();
    let doc = agentloom_core::GraphDoc::from_json_str(
        &serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "fetch",
            "nodes": [
                {"id": "fetch", "block": "http.request", "config": {"method": "GET", "url": url,
                    "allow_private_network": true}},
                {"id": "out", "block": "graph.output", "config": {"name": "body"}}
            ],
            "edges": [{"from": ["fetch", "body"], "to": ["out", "value"]}]
        })
        .to_string(),
    )
    .unwrap();
    let cases = "{\"name\": \"page\", \"inputs\": {}, \"expect\": {\"body\": {\"contains\": \"payload-42\"}}}\n";
    let dir = tempfile::tempdir().unwrap();
    let mut h = panel_on(&dir, &doc, cases);
    let live = evaluate(&mut h);
    assert_eq!(live["passed"], 1, "{live}");
    assert_eq!(served.load(Ordering::SeqCst), 1);
    let live_id = live["eval_id"].as_str().unwrap().to_owned();
    let run_id = live["cases"][0]["runs"][0]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // From the evaluation: each case answered by its own recorded run.
    choose(
        &mut h,
        "Replay",
        &format!("evaluation {} · 1 passed, 0 failed", live_id),
    );
    let replayed = evaluate(&mut h);
    assert_eq!(replayed["passed"], 1, "{replayed}");
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "answered from the recording"
    );
    // The panel says it was a replay, with what was recorded and spent.
    assert_eq!(
        h.state().evaluations.status,
        format!("Replay of {live_id}: 1 passed, 0 failed")
    );
    h.get_by_label(&format!(
        "Replay of {live_id} · recorded $0.0000, spent $0.0000 · 0 calls made for real · repeat 1"
    ));
    h.get_by_label("Cost (recorded)");

    // From one run of the history: every case answered by it.
    choose(&mut h, "Replay", &format!("run {} · completed", run_id));
    assert_eq!(
        h.state().evaluations.replay.as_deref(),
        Some(run_id.as_str())
    );
    let replayed = evaluate(&mut h);
    assert_eq!(replayed["passed"], 1, "{replayed}");
    assert_eq!(served.load(Ordering::SeqCst), 1, "answered from the run");
}

#[test]
fn progress_shows_the_runs_done_and_stop_ends_the_evaluation_early() {
    let dir = tempfile::tempdir().unwrap();
    let doc = agentloom_core::GraphDoc::from_json_str(
        &serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "slow",
            "nodes": [
                {"id": "name", "block": "graph.input", "config": {"name": "name", "type": "text"}},
                {"id": "wait", "block": "control.delay", "config": {"ms": 400}},
                {"id": "out", "block": "graph.output", "config": {"name": "greeting"}}
            ],
            "edges": [
                {"from": ["name", "value"], "to": ["wait", "value"]},
                {"from": ["wait", "value"], "to": ["out", "value"]}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let cases: String = (1..=8)
        .map(|i| hello_case(&format!("c{i}"), "Ada", "Ada"))
        .collect();
    let mut h = panel_on(&dir, &doc, &cases);
    type_into(&mut h, "Concurrency", "1");
    press(&mut h, Role::Button, "Run evaluation");
    assert!(h.state().evaluations.is_running());
    wait_until(&mut h, "the first run done", |h| {
        h.query_by_label_contains("1/8 runs done · last: c1")
            .is_some()
    });
    press(&mut h, Role::Button, "Stop");
    wait_until(&mut h, "the evaluation stopped", |h| {
        !h.state().evaluations.is_running()
    });
    let status = h.state().evaluations.status.clone();
    assert!(status.starts_with("Stopped after "), "{status}");
    assert!(status.contains(" of 8 runs: "), "{status}");
    let result = h.state().evaluations.result.clone().unwrap();
    assert_eq!(result["stopped"], true);
    assert!(result["runs"].as_u64().unwrap() < 8, "{result}");
    // The cases never started are shown as such, not as failed.
    h.run_steps(2);
    h.get_by_label("· c8");
    assert!(h.query_by_label("❌ c8").is_none());
    let not_started = result["not_started"].as_u64().unwrap();
    assert!(not_started > 0, "{result}");
    assert_eq!(
        h.query_all_by_label("not started").count()
            + h.query_all_by_label("cut short by the stop").count(),
        usize::try_from(not_started).unwrap()
    );
    h.get_by_label_contains(&format!(
        "Stopped after {}/8 runs: {not_started} cases not started",
        result["runs"]
    ));
}

#[test]
fn the_chart_has_a_legend_and_the_last_cases_file_is_named_again() {
    let dir = tempfile::tempdir().unwrap();
    let cases = hello_case("ada", "Ada", "Hello, Ada!") + &hello_case("bob", "Bob", "Bye, Bob!");
    let mut h = panel_on(&dir, &example(), &cases);
    evaluate(&mut h);
    evaluate(&mut h);
    h.get_by_label("Pass rate and cost over 2 evaluations");
    // The legend names both lines, outside the charts (drawn in their colours).
    h.get_by_label("pass rate (%)");
    h.get_by_label("cost (USD)");
    let cases_file = h.state().evaluations.cases_path.clone();

    // Opened again, the panel names the cases file of the graph's last evaluation.
    let graph = dir.path().join("graph.agentloom.json");
    let mut h = harness_for(App::new(&example(), Some(graph), &paths(&dir)));
    press(&mut h, Role::Button, "View");
    press(&mut h, Role::Button, "Evaluations");
    h.run_steps(2);
    assert_eq!(
        std::fs::canonicalize(&h.state().evaluations.cases_path).unwrap(),
        std::fs::canonicalize(&cases_file).unwrap()
    );
    h.get_by_label("Pass rate and cost over 2 evaluations");
}

#[test]
fn add_to_cases_in_the_history_writes_the_run_as_a_case_that_passes() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = panel_on(&dir, &example(), &hello_case("ada", "Ada", "Hello, Ada!"));
    let cases_file = h.state().evaluations.cases_path.clone();
    let first = evaluate(&mut h);
    assert_eq!(first["passed"], 1);
    h.state_mut().send(Command::RefreshHistory);
    h.run_steps(3);
    let run_id = h.state().history()[0].id.clone();

    // History → right click → Add to cases: the path asked, prefilled with the last file.
    h.query_all_by_label_contains("completed · ")
        .next()
        .unwrap()
        .click_secondary();
    h.run_steps(3);
    press(&mut h, Role::Button, "Add to cases");
    h.get_by_label("The JSON Lines cases file to add the run to (made when missing):");
    assert_eq!(
        h.get_by_role_and_label(Role::TextInput, "Path")
            .value()
            .as_deref(),
        Some(cases_file.as_str())
    );
    press(&mut h, Role::Button, "Add");
    let text = std::fs::read_to_string(&cases_file).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    let added: serde_json::Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
    assert_eq!(added["name"], format!("run {}", &run_id[..12]));
    assert_eq!(added["inputs"]["name"], "Ada");
    assert_eq!(added["expect"]["greeting"], "Hello, Ada!");
    assert!(
        h.state()
            .evaluations
            .status
            .starts_with("added case \"run "),
        "{}",
        h.state().evaluations.status
    );

    // The round trip: the case passes on the same graph; the same run again is refused.
    let second = evaluate(&mut h);
    assert_eq!(
        (second["passed"].as_u64(), second["failed"].as_u64()),
        (Some(2), Some(0))
    );
    h.state_mut().send(Command::AddRunToCases(run_id));
    h.run_steps(3);
    press(&mut h, Role::Button, "Add");
    assert!(
        h.state()
            .evaluations
            .status
            .contains("there is a case named"),
        "{}",
        h.state().evaluations.status
    );
    assert_eq!(std::fs::read_to_string(&cases_file).unwrap(), text);
}
