//! Graphs calling graphs: `graph.call` from the command line (run, validate, show) and on
//! the canvas (double-click opens the called graph, the run panel shows its nodes live).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentloom::app::{App, Command as AppCommand, load_graph};
use egui::accesskit::Role;
use egui::{Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::Queryable as _;
use serde_json::json;
use support::{AppHarness, harness_for, paths, wait_until};

fn write(dir: &Path, name: &str, doc: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    path
}

/// `lib/child.json`: `text` in, waits `wait_ms`, `shout` out (upper-cased).
fn child(wait_ms: u64) -> serde_json::Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "Shout",
        "nodes": [
            {"id": "text", "block": "graph.input", "position": [0, 0], "config": {"name": "text"}},
            {"id": "wait", "block": "control.delay", "position": [250, 0], "config": {"ms": wait_ms}},
            {"id": "upper", "block": "text.template", "position": [500, 0], "config": {"template": "{{ t | upper }}"}},
            {"id": "shout", "block": "graph.output", "position": [750, 0], "config": {"name": "shout"}}
        ],
        "edges": [
            {"from": ["text", "value"], "to": ["wait", "value"]},
            {"from": ["wait", "value"], "to": ["upper", "t"]},
            {"from": ["upper", "text"], "to": ["shout", "value"]}
        ]
    })
}

/// `parent.json`: a run input down into the child, the child's output up into a template.
fn parent() -> serde_json::Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "Parent",
        "nodes": [
            {"id": "word", "block": "graph.input", "position": [0, 0], "config": {"name": "word", "default": "hey"}},
            {"id": "call", "block": "graph.call", "label": "Shout it", "position": [300, 0], "config": {"path": "lib/child.json"}},
            {"id": "echo", "block": "text.template", "position": [600, 0], "config": {"template": "{{ s }}!"}},
            {"id": "result", "block": "graph.output", "position": [900, 0], "config": {"name": "result"}}
        ],
        "edges": [
            {"from": ["word", "value"], "to": ["call", "text"]},
            {"from": ["call", "shout"], "to": ["echo", "s"]},
            {"from": ["echo", "text"], "to": ["result", "value"]}
        ]
    })
}

/// A parent and its child on disk; returns the parent's path.
fn files(dir: &Path, wait_ms: u64) -> PathBuf {
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    write(&dir.join("lib"), "child.json", &child(wait_ms));
    write(dir, "parent.json", &parent())
}

/// Runs the CLI; `run` and `show` use the run log `db`.
fn agentloom(args: &[&str], db: &Path) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG").args(args);
    if matches!(args.first(), Some(&"run" | &"show")) {
        cmd.arg("--db").arg(db);
    }
    cmd.output().unwrap()
}

#[test]
fn the_cli_runs_a_calling_graph_shows_its_child_nodes_and_refuses_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let parent_file = files(dir.path(), 0);
    let parent_arg = parent_file.to_str().unwrap();

    let out = agentloom(&["validate", parent_arg], &db);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = agentloom(&["run", parent_arg, "--json", "--input", "word=go"], &db);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["outputs"]["result"], "GO!");

    let run_id = report["run_id"].as_str().unwrap();
    let out = agentloom(&["show", run_id], &db);
    let shown = String::from_utf8_lossy(&out.stdout);
    for (row, block) in [
        ("call/text", "graph.input"),
        ("call/wait", "control.delay"),
        ("call/upper", "text.template"),
        ("call/shout", "graph.output"),
    ] {
        assert!(
            shown.lines().any(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                words.starts_with(&[row, block, "done"])
            }),
            "no `{row} {block} done` row in:\n{shown}"
        );
    }

    // The child calls the parent back: both files are named, nothing runs.
    let mut looping = child(0);
    looping["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "back", "block": "graph.call", "config": {"path": "../parent.json"}}));
    write(&dir.path().join("lib"), "child.json", &looping);
    let out = agentloom(&["validate", parent_arg], &db);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("reference cycle"), "{stderr}");
    assert!(
        stderr.contains("parent.json") && stderr.contains("child.json"),
        "{stderr}"
    );
    let out = agentloom(&["run", parent_arg], &db);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("reference cycle"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_approval_inside_a_called_graph_is_approved_from_another_directory_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let parent_file = files(dir.path(), 0);
    // The child asks a person before shouting.
    let mut asking = child(0);
    asking["nodes"][1] =
        json!({"id": "wait", "block": "human.approval", "config": {"action": "Shout it?"}});
    write(&dir.path().join("lib"), "child.json", &asking);
    let out = agentloom(&["run", parent_file.to_str().unwrap(), "--json"], &db);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = report["run_id"].as_str().unwrap().to_owned();

    // Approved with an edit from elsewhere: the recorded graph still finds lib/child.json.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .current_dir(elsewhere.path())
        .args([
            "approve",
            &run_id,
            "--node",
            "call/wait",
            "--set",
            "value=quiet",
            "--json",
        ])
        .arg("--db")
        .arg(&db)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resumed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(resumed["status"], "completed");
    assert_eq!(resumed["outputs"]["result"], "QUIET!");
}

/// Two clicks at `pos` within one frame: a double-click.
fn double_click_at(h: &mut AppHarness, pos: Pos2) {
    h.event(egui::Event::PointerMoved(pos));
    h.step();
    for pressed in [true, false, true, false] {
        h.input_mut().events.push(egui::Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed,
            modifiers: Modifiers::NONE,
        });
    }
    h.run_steps(3);
}

#[test]
fn double_clicking_a_call_node_opens_the_called_graph_as_its_own_document() {
    let dir = tempfile::tempdir().unwrap();
    let parent_file = files(dir.path(), 0);
    let doc = load_graph(&parent_file).unwrap();
    let mut h = harness_for(App::new(&doc, Some(parent_file.clone()), &paths(&dir)));
    // The node's ports come from the child file, and the graph is valid.
    assert!(
        h.state().problems().is_empty(),
        "{:?}",
        h.state().problems()
    );
    let rect = h.state().node_screen_rect("call").unwrap();
    double_click_at(&mut h, Pos2::new(rect.center().x, rect.top() + 10.0));
    let child_file = dir.path().join("lib").join("child.json");
    assert_eq!(
        h.state().document.path.as_deref(),
        Some(child_file.as_path())
    );
    assert_eq!(h.state().document.name, "Shout");
    assert!(!h.state().document.can_undo(), "a document of its own");
    assert!(h.state().node_screen_rect("upper").is_some());
}

#[test]
fn the_run_panel_shows_the_called_graphs_nodes_as_they_run() {
    let dir = tempfile::tempdir().unwrap();
    let parent_file = files(dir.path(), 1500);
    let doc = load_graph(&parent_file).unwrap();
    let mut h = harness_for(App::new(&doc, Some(parent_file), &paths(&dir)));
    h.state_mut()
        .send(AppCommand::InspectById("call".to_owned()));
    h.run_steps(2);
    h.state_mut().send(AppCommand::StartRun);
    // While the child waits, its delay node shows as running under the call node.
    wait_until(&mut h, "the child's delay to start", |h| {
        h.state()
            .run
            .node("call/wait")
            .is_some_and(|n| n.status == agentloom_engine::NodeStatus::Running)
    });
    h.get_by_label("Inside this node");
    h.get_by_label("wait");
    assert!(h.query_all_by_label("running").next().is_some());
    wait_until(&mut h, "the run to finish", |h| !h.state().run.is_running());
    assert_eq!(
        h.state().run.status,
        Some(agentloom_engine::RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    for child in ["text", "wait", "upper", "shout"] {
        assert_eq!(
            h.state().run.node(&format!("call/{child}")).unwrap().status,
            agentloom_engine::NodeStatus::Done,
            "{child}"
        );
    }
    h.get_by_label("upper");
    // Each child row names its block kind.
    h.get_by_label("control.delay");
    h.get_by_label("text.template");
    assert_eq!(
        h.state().run.outputs["result"],
        agentloom_core::Value::from("HEY!")
    );
}

#[test]
fn the_calling_example_opens_untitled_from_the_gallery_and_finds_the_graph_it_calls() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&support::example(), None, &paths(&dir)));
    h.state_mut().send(AppCommand::ShowExamples);
    h.run_steps(3);
    h.get_by_role_and_label(egui::accesskit::Role::Button, "Calling a graph")
        .click();
    h.run_steps(4);
    assert_eq!(h.state().document.name, "Calling a graph");
    assert_eq!(h.state().document.path, None);
    assert!(
        h.state().problems().is_empty(),
        "{:?}",
        h.state().problems()
    );
    h.state_mut().send(AppCommand::StartRun);
    wait_until(&mut h, "the example to run", |h| {
        h.state().run.status == Some(agentloom_engine::RunStatus::Completed)
    });
    assert_eq!(
        h.state().run.outputs["result"],
        agentloom_core::Value::from("Hello, Ada! (11 characters)")
    );
    let rect = h.state().node_screen_rect("greet").unwrap();
    double_click_at(&mut h, Pos2::new(rect.center().x, rect.top() + 10.0));
    assert_eq!(h.state().document.name, "Greeting (called graph)");
}

#[test]
fn a_for_each_over_a_sub_graph_shows_each_items_nodes_in_the_run_panel() {
    let dir = tempfile::tempdir().unwrap();
    let per_item = json!({
        "format": "agentloom.graph", "version": 1, "name": "per item",
        "nodes": [
            {"id": "item", "block": "graph.input", "config": {"name": "item", "type": "json"}},
            {"id": "fmt", "block": "text.template", "config": {"template": "<{{ i }}>"}},
            {"id": "result", "block": "graph.output", "config": {"name": "result"}}
        ],
        "edges": [
            {"from": ["item", "value"], "to": ["fmt", "i"]},
            {"from": ["fmt", "text"], "to": ["result", "value"]}
        ]
    });
    let doc = support::graph(
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "each",
            "nodes": [
                {"id": "items", "block": "data.constant", "position": [0, 0], "config": {"value": ["a", "b"], "type": "list<json>"}},
                {"id": "each", "block": "control.for_each", "position": [300, 0], "config": {"graph": per_item}},
                {"id": "all", "block": "graph.output", "position": [700, 0], "config": {"name": "all"}}
            ],
            "edges": [
                {"from": ["items", "value"], "to": ["each", "items"]},
                {"from": ["each", "results"], "to": ["all", "value"]}
            ]
        })
        .to_string(),
    );
    let mut h = support::harness(&doc, &paths(&dir));
    h.state_mut()
        .send(AppCommand::InspectById("each".to_owned()));
    h.state_mut().send(AppCommand::StartRun);
    // Commands are carried out on the next frame: wait for the run to be over, not yet to
    // begin.
    wait_until(&mut h, "the run", |h| {
        h.state().run.run_id.is_some() && !h.state().run.is_running()
    });
    assert_eq!(
        h.state().run.status,
        Some(agentloom_engine::RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    h.get_by_label("Inside this node");
    for row in ["0/item", "0/fmt", "0/result", "1/item", "1/fmt", "1/result"] {
        h.get_by_label(row);
    }
    assert_eq!(
        h.state().run.node("each/1/fmt").unwrap().outputs["text"],
        agentloom_core::Value::from("<b>")
    );
}

#[test]
fn the_app_shows_a_reference_cycle_as_a_problem_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let calling = |path: &str| {
        json!({
            "format": "agentloom.graph", "version": 1, "name": "loop",
            "nodes": [{"id": "call", "block": "graph.call", "position": [0, 0], "config": {"path": path}}],
            "edges": []
        })
    };
    let a = write(dir.path(), "a.json", &calling("b.json"));
    write(dir.path(), "b.json", &calling("a.json"));
    let mut h = harness_for(App::new(&load_graph(&a).unwrap(), Some(a), &paths(&dir)));
    h.run_steps(2);
    let problems: Vec<String> = h
        .state()
        .problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("reference cycle")
            && problems[0].contains("a.json")
            && problems[0].contains("b.json"),
        "{}",
        problems[0]
    );
    h.state_mut().send(AppCommand::StartRun);
    h.run_steps(2);
    assert!(!h.state().run.is_running());
    assert!(
        h.state()
            .notice
            .as_deref()
            .is_some_and(|n| n.contains("cannot run")),
        "{:?}",
        h.state().notice
    );
}

/// Two graph-to-screen points: the canvas's pan and zoom.
fn view(h: &AppHarness) -> (Pos2, Pos2) {
    (
        h.state().graph_to_screen(Pos2::ZERO),
        h.state().graph_to_screen(Pos2::new(100.0, 100.0)),
    )
}

/// Double-clicks the title of node `id`.
fn double_click_node(h: &mut AppHarness, id: &str) {
    let rect = h.state().node_screen_rect(id).unwrap();
    double_click_at(h, Pos2::new(rect.center().x, rect.top() + 10.0));
}

#[test]
fn saving_an_untitled_graph_from_the_prompt_goes_on_to_open_the_called_graph() {
    let dir = tempfile::tempdir().unwrap();
    files(dir.path(), 0);
    let child_file = dir.path().join("lib").join("child.json");
    // Never saved: it calls the child by its absolute path.
    let mut untitled = parent();
    untitled["nodes"][1]["config"]["path"] = json!(child_file.to_str().unwrap());
    let doc = support::graph(&untitled.to_string());
    let mut app = App::new(&doc, None, &paths(&dir));
    app.set_native_file_dialogs(false);
    let mut h = harness_for(app);
    h.state_mut().send(AppCommand::AddBlock {
        kind: "control.delay".into(),
        pos: Some(Pos2::new(0.0, 400.0)),
    });
    h.run_steps(3);
    assert!(h.state().document.dirty);

    // Save, then Cancel where the path is asked: nothing is saved, nothing opens.
    double_click_node(&mut h, "call");
    h.get_by_label("Save changes?");
    h.get_by_role_and_label(Role::Button, "Save").click();
    h.run_steps(3);
    h.get_by_label("Save graph");
    h.get_by_role_and_label(Role::Button, "Cancel").click();
    h.run_steps(3);
    assert!(h.query_by_label("Save graph").is_none());
    assert!(!h.state().close_prompt_open());
    assert_eq!(h.state().document.name, "Parent");
    assert_eq!(h.state().document.path, None);
    assert!(h.state().document.dirty);

    // Save, a path: saved there, and the called graph opens as asked.
    double_click_node(&mut h, "call");
    h.get_by_role_and_label(Role::Button, "Save").click();
    h.run_steps(3);
    let saved = dir.path().join("parent.agentloom.json");
    h.key_press_modifiers(Modifiers::COMMAND, egui::Key::A);
    h.get_by_role_and_label(Role::TextInput, "Path")
        .type_text(saved.to_str().unwrap());
    h.run_steps(1);
    h.key_press(egui::Key::Enter);
    h.run_steps(3);
    let on_disk = load_graph(&saved).unwrap();
    assert!(on_disk.node("delay").is_some(), "the edit was saved");
    assert_eq!(
        h.state().document.path.as_deref(),
        Some(child_file.as_path()),
        "notice: {:?}",
        h.state().notice
    );
    assert_eq!(h.state().document.name, "Shout");
    // The way back names the file just saved.
    h.get_by_label("parent.agentloom.json");
}

#[test]
fn the_breadcrumb_bar_leads_back_to_the_caller_as_it_was_left() {
    let dir = tempfile::tempdir().unwrap();
    let parent_file = files(dir.path(), 0);
    let doc = load_graph(&parent_file).unwrap();
    let mut h = harness_for(App::new(&doc, Some(parent_file.clone()), &paths(&dir)));
    assert!(
        h.query_by_label("parent.json").is_none(),
        "no bar at the top"
    );

    // The caller's view: zoomed, and two blocks selected (echo in the inspector).
    h.state_mut().send(AppCommand::Zoom(1.25));
    h.run_steps(3);
    let echo = support::title_of(&h, "echo");
    support::click_at(&mut h, echo, PointerButton::Primary, Modifiers::NONE);
    let call = support::title_of(&h, "Shout it");
    support::click_at(&mut h, call, PointerButton::Primary, Modifiers::SHIFT);
    let mut selected = h.state().selected_ids(&h.ctx);
    selected.sort();
    assert_eq!(selected, ["call", "echo"]);
    let inspected = h.state().inspected_id().map(str::to_owned);
    let left = view(&h);

    // Opened as a double-click does (the command it sends), the selection left as it is.
    let child_file = dir.path().join("lib").join("child.json");
    h.state_mut()
        .send(AppCommand::OpenCalled(child_file.clone()));
    h.run_steps(3);
    assert_eq!(
        h.state().document.path.as_deref(),
        Some(child_file.as_path())
    );
    // "parent.json › child.json"
    h.get_by_label("parent.json");
    h.get_by_label("child.json");
    assert!(
        h.state().selected_ids(&h.ctx).is_empty(),
        "the caller's selection stays with it"
    );

    // Changed, then back: the usual prompt; Don't save returns to the caller as left.
    h.state_mut().send(AppCommand::AddBlock {
        kind: "control.delay".into(),
        pos: Some(Pos2::new(0.0, 400.0)),
    });
    h.run_steps(3);
    h.get_by_label("parent.json").click();
    h.run_steps(3);
    h.get_by_label("Save changes?");
    h.get_by_role_and_label(Role::Button, "Don't save").click();
    h.run_steps(4);
    assert_eq!(
        h.state().document.path.as_deref(),
        Some(parent_file.as_path())
    );
    assert_eq!(h.state().document.name, "Parent");
    assert_eq!(view(&h), left, "pan and zoom kept");
    let mut selected = h.state().selected_ids(&h.ctx);
    selected.sort();
    assert_eq!(selected, ["call", "echo"]);
    assert_eq!(h.state().inspected_id().map(str::to_owned), inspected);
    assert!(h.query_by_label("parent.json").is_none(), "the bar is gone");
    assert!(
        load_graph(&child_file).unwrap().node("delay").is_none(),
        "the child's change was not saved"
    );

    // Down by a double-click and back unchanged: no prompt, the node double-clicked in
    // the inspector. Opening another file forgets the way.
    double_click_node(&mut h, "call");
    assert_eq!(h.state().document.name, "Shout");
    h.get_by_label("parent.json").click();
    h.run_steps(4);
    assert!(!h.state().close_prompt_open());
    assert_eq!(h.state().document.name, "Parent");
    assert_eq!(h.state().inspected_id(), Some("call"));
    assert_eq!(view(&h), left);
    double_click_node(&mut h, "call");
    h.state_mut().send(AppCommand::Open(parent_file.clone()));
    h.run_steps(3);
    assert!(h.query_by_label("parent.json").is_none());
}

#[test]
fn back_through_the_breadcrumb_an_unsaved_example_keeps_its_trust() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&support::example(), None, &paths(&dir)));
    h.state_mut().send(AppCommand::ShowExamples);
    h.run_steps(3);
    h.get_by_role_and_label(Role::Button, "Calling a graph")
        .click();
    h.run_steps(4);
    assert!(h.query_by_label("Safe mode (untrusted file)").is_none());
    // Changed (not saved), down into the graph it calls, and back.
    h.state_mut().send(AppCommand::AddBlock {
        kind: "control.delay".into(),
        pos: Some(Pos2::new(0.0, 400.0)),
    });
    h.run_steps(3);
    double_click_node(&mut h, "greet");
    if h.query_by_label("Save changes?").is_some() {
        h.get_by_role_and_label(Role::Button, "Don't save").click();
        h.run_steps(4);
    }
    assert_eq!(h.state().document.name, "Greeting (called graph)");
    h.get_by_label("Calling a graph").click();
    h.run_steps(4);
    assert_eq!(h.state().document.name, "Calling a graph");
    assert!(
        h.query_by_label("Safe mode (untrusted file)").is_none(),
        "the example came back untrusted"
    );
}
