//! Drives the real app UI through its accessibility tree (no window, no GPU).
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentloom::app::{App, AppPaths, Command, EXAMPLE_GRAPH};
use agentloom_core::GraphDoc;
use agentloom_engine::{NodeStatus, RunStatus};
use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;

fn paths(dir: &tempfile::TempDir) -> AppPaths {
    AppPaths {
        run_log: Some(dir.path().join("runs.sqlite3")),
        data_dir: None,
        workspace: Some(dir.path().to_owned()),
        credentials_dir: None,
    }
}

fn harness(doc: &GraphDoc, paths: &AppPaths) -> Harness<'static, App> {
    let app = App::new(doc, None, paths);
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .build_ui_state(|ui, app: &mut App| app.show(ui), app);
    harness.run_steps(3);
    harness
}

fn example() -> GraphDoc {
    GraphDoc::from_json_str(EXAMPLE_GRAPH).expect("the example graph parses")
}

fn send(harness: &mut Harness<'static, App>, command: Command) {
    harness.state_mut().send(command);
    harness.run_steps(2);
}

/// Steps frames until the live run is over.
fn wait_for_run(harness: &mut Harness<'static, App>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while harness.state().run.is_running() {
        assert!(
            Instant::now() < deadline,
            "the run did not finish within 20 s"
        );
        harness.step();
        std::thread::sleep(Duration::from_millis(10));
    }
    harness.run_steps(2);
}

#[test]
fn adding_a_block_from_the_palette_puts_it_on_the_canvas_and_in_the_inspector() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(&example(), &paths(&dir));
    harness.get_by_role_and_label(Role::Button, "Delay").click();
    harness.run_steps(3);
    let doc = harness.state().document.to_doc();
    let added = doc.node("delay").expect("a delay node was added");
    assert_eq!(added.block, "control.delay");
    assert_eq!(
        added.config["ms"],
        serde_json::json!(1000),
        "defaults are filled in: {added:?}"
    );
    assert_eq!(harness.state().inspected_id(), Some("delay"));
    // The inspector shows the block's form.
    harness.get_by_role_and_label(Role::TextInput, "Wait (ms)");
    // The palette search narrows the list.
    let search = harness.get_by_role_and_label(Role::TextInput, "Search blocks");
    search.click();
    search.type_text("json");
    harness.run_steps(2);
    assert!(
        harness
            .query_by_role_and_label(Role::Button, "Delay")
            .is_none()
    );
    harness.get_by_role_and_label(Role::Button, "Parse JSON");
}

#[test]
fn compatible_pins_connect_and_incompatible_ones_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = example();
    doc.edges.retain(|e| e.to.0 != "render");
    let mut harness = harness(&doc, &paths(&dir));
    assert!(
        !harness.state().problems().is_empty(),
        "the template input is unwired"
    );

    send(
        &mut harness,
        Command::Connect {
            from: ("name".into(), "value".into()),
            to: ("render".into(), "name".into()),
        },
    );
    let now = harness.state().document.to_doc();
    assert_eq!(now.edges, example().edges);
    assert!(
        harness.state().problems().is_empty(),
        "{:?}",
        harness.state().problems()
    );
    harness.get_by_label("No problems");

    // bytes → text is refused by the engine's compatibility function.
    let bytes_graph = GraphDoc::from_json_str(
        r#"{"format":"agentloom.graph","version":1,"name":"b","nodes":[
            {"id":"blob","block":"graph.input","config":{"name":"blob","type":"bytes"}},
            {"id":"parse","block":"json.parse","position":[300,0]}]}"#,
    )
    .unwrap();
    let mut harness = self::harness(&bytes_graph, &paths(&dir));
    send(
        &mut harness,
        Command::Connect {
            from: ("blob".into(), "value".into()),
            to: ("parse".into(), "text".into()),
        },
    );
    assert!(harness.state().document.to_doc().edges.is_empty());
    harness.get_by_label_contains(
        "Connection refused: cannot connect bytes to text: bytes are not text",
    );
}

#[test]
fn editing_a_config_field_updates_pins_and_undo_redo_restore_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(&example(), &paths(&dir));
    send(&mut harness, Command::InspectById("render".into()));
    let field = harness.get_by_role_and_label(Role::TextInput, "Template");
    field.click();
    field.type_text(" {{ mood }}");
    harness.run_steps(3);
    let template = |h: &Harness<'static, App>| {
        h.state().document.to_doc().node("render").unwrap().config["template"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        template(&harness).ends_with("{{ mood }}"),
        "{}",
        template(&harness)
    );
    // The new variable became an input pin, unwired, so validation says so.
    assert!(
        harness
            .state()
            .problems()
            .iter()
            .any(|p| p.port.as_deref() == Some("mood")),
        "{:?}",
        harness.state().problems()
    );

    harness.get_by_role_and_label(Role::Button, "Undo").click();
    harness.run_steps(3);
    assert_eq!(template(&harness), "Hello, {{ name }}!");
    assert!(harness.state().problems().is_empty());
    assert_eq!(harness.state().document.to_doc(), example_normalized());

    harness.get_by_role_and_label(Role::Button, "Redo").click();
    harness.run_steps(3);
    assert!(template(&harness).ends_with("{{ mood }}"));
}

fn example_normalized() -> GraphDoc {
    let mut doc = example();
    doc.normalize();
    doc
}

#[test]
fn running_the_example_shows_every_node_done_and_the_output_then_history_reopens_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let mut harness = harness(&example(), &paths);
    harness.get_by_role_and_label(Role::Button, "▶ Run").click();
    harness.run_steps(2);
    // The inputs form asks for `name`, prefilled with its default.
    harness.run_steps(3);
    harness.get_by_label("Start run").click_accesskit();
    harness.step();
    harness.step();
    assert!(
        harness.state().run.status.is_some(),
        "the run started: {:?}",
        harness.state().notice
    );
    wait_for_run(&mut harness);

    let run = &harness.state().run;
    assert_eq!(run.status, Some(RunStatus::Completed), "{:?}", run.error);
    for id in ["name", "render", "greeting"] {
        assert_eq!(
            run.node(id).map(|n| n.status),
            Some(NodeStatus::Done),
            "{id}"
        );
    }
    assert_eq!(harness.get_all_by_label("done").count(), 3);
    harness.get_by_label_contains("Run completed");
    assert!(harness.query_all_by_label_contains("Hello, world!").count() >= 1);
    let run_id = harness.state().run.run_id.clone().unwrap();
    assert_eq!(harness.state().history().len(), 1);

    // A fresh app on the same run log: pick the run in the history.
    let mut harness = self::harness(&example(), &paths);
    assert!(harness.query_by_label("done").is_none());
    // A row of the graph's history says the outcome and when it ran.
    harness
        .get_by_label_contains("completed · just now")
        .click();
    harness.run_steps(3);
    assert_eq!(harness.state().run.run_id.as_deref(), Some(run_id.as_str()));
    assert_eq!(harness.get_all_by_label("done").count(), 3);
    assert!(harness.query_all_by_label_contains("Hello, world!").count() >= 1);
}

#[test]
fn export_then_import_gives_the_same_document() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(&example(), &paths(&dir));
    let exported: PathBuf = dir.path().join("shared.agentloom.json");
    send(&mut harness, Command::Export(exported.clone()));
    let before = harness.state().document.to_doc();
    let text = std::fs::read_to_string(&exported).unwrap();
    assert_eq!(GraphDoc::from_json_str(&text).unwrap(), before);

    // Change the graph, then import the export back.
    send(
        &mut harness,
        Command::AddBlock {
            kind: "control.delay".into(),
            pos: None,
        },
    );
    assert_ne!(harness.state().document.to_doc(), before);
    send(&mut harness, Command::Import(exported));
    assert_eq!(harness.state().document.to_doc(), before);
    // Import is one undoable step.
    send(&mut harness, Command::Undo);
    assert!(harness.state().document.to_doc().node("delay").is_some());
}

#[test]
fn saving_and_opening_round_trips_and_bad_files_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(&example(), &paths(&dir));
    let file = dir.path().join("saved.agentloom.json");
    send(
        &mut harness,
        Command::AddBlock {
            kind: "control.delay".into(),
            pos: None,
        },
    );
    assert!(harness.state().document.dirty);
    send(&mut harness, Command::SaveAs(file.clone()));
    assert!(!harness.state().document.dirty);
    let saved = harness.state().document.to_doc();

    send(&mut harness, Command::New);
    assert!(harness.state().document.to_doc().nodes.is_empty());
    send(&mut harness, Command::Open(file.clone()));
    assert_eq!(harness.state().document.to_doc(), saved);

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"format\": \"something else\"}").unwrap();
    send(&mut harness, Command::Open(bad));
    assert_eq!(
        harness.state().document.to_doc(),
        saved,
        "a bad file leaves the graph alone"
    );
    harness.get_by_label_contains("is not a graph Agentloom can open");
}

#[test]
fn delete_duplicate_copy_paste_keep_inner_wires() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(&example(), &paths(&dir));
    let ids = |h: &Harness<'static, App>| -> Vec<String> {
        h.state()
            .document
            .to_doc()
            .nodes
            .iter()
            .map(|n| n.id.clone())
            .collect()
    };
    let node = |h: &Harness<'static, App>, id: &str| h.state().document.node_by_id(id).unwrap();
    let pair = vec![node(&harness, "name"), node(&harness, "render")];
    send(&mut harness, Command::DuplicateNodes(pair));
    let doc = harness.state().document.to_doc();
    assert_eq!(ids(&harness).len(), 5);
    assert!(
        doc.edges
            .iter()
            .any(|e| e.from.0 == "name_2" && e.to.0 == "render_2"),
        "{:?}",
        doc.edges
    );
    let render = node(&harness, "render");
    send(&mut harness, Command::DeleteNodes(vec![render]));
    assert!(!ids(&harness).contains(&"render".to_owned()));
    send(&mut harness, Command::Undo);
    assert!(ids(&harness).contains(&"render".to_owned()));
}

#[test]
fn without_a_native_file_dialog_save_and_open_ask_for_the_path_in_the_app() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = App::new(&example(), None, &paths(&dir));
    app.set_native_file_dialogs(false);
    let mut h = Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .build_ui_state(|ui, app: &mut App| app.show(ui), app);
    h.run_steps(3);
    let modified = |h: &mut Harness<'static, App>| {
        h.state_mut().send(Command::AddBlock {
            kind: "control.delay".into(),
            pos: None,
        });
        h.run_steps(2);
    };
    modified(&mut h);

    // Ctrl+S on a graph never saved: the prompt, with a file name to start from.
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::S);
    h.run_steps(3);
    h.get_by_label_contains("No file dialog is available");
    let field = h.get_by_role_and_label(Role::TextInput, "Path");
    assert!(field.is_focused());
    assert!(
        field
            .value()
            .is_some_and(|v| v.ends_with("Hello.agentloom.json")),
        "{:?}",
        field.value()
    );
    let saved = dir.path().join("typed.agentloom.json");
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    h.get_by_role_and_label(Role::TextInput, "Path")
        .type_text(saved.to_str().unwrap());
    h.run_steps(1);
    h.key_press(egui::Key::Enter);
    h.run_steps(3);
    assert!(
        h.query_by_label("Save graph").is_none(),
        "the prompt closed"
    );
    assert_eq!(h.state().document.path.as_deref(), Some(saved.as_path()));
    assert!(!h.state().document.dirty);
    let on_disk = agentloom::app::load_graph(&saved).unwrap();
    assert_eq!(on_disk, h.state().document.to_doc());

    // Ctrl+O, then Escape: nothing opens.
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::O);
    h.run_steps(3);
    h.get_by_label("Open graph");
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
    assert!(h.query_by_label("Open graph").is_none());
    assert_eq!(h.state().document.path.as_deref(), Some(saved.as_path()));

    // Open another graph by typing its path after the suggested folder.
    let other = dir.path().join("other.agentloom.json");
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../assets/examples/branching.agentloom.json"),
        &other,
    )
    .unwrap();
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::O);
    h.run_steps(3);
    let field = h.get_by_role_and_label(Role::TextInput, "Path");
    assert_eq!(
        field.value().map(PathBuf::from).as_deref(),
        Some(dir.path()),
        "it starts in the folder of the open graph"
    );
    field.type_text("other.agentloom.json");
    h.run_steps(1);
    h.get_by_role_and_label(Role::Button, "Open").click();
    h.run_steps(3);
    assert_eq!(h.state().document.path.as_deref(), Some(other.as_path()));
    assert_eq!(h.state().document.name, "Size check");
}

/// A graph opens fitted around its real blocks: centred in the canvas above the minimap,
/// none of it hidden under a side panel while the other side is empty.
#[test]
fn an_opened_graph_is_centred_in_the_canvas() {
    let dir = tempfile::tempdir().unwrap();
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/examples/branching.agentloom.json");
    let doc = GraphDoc::from_json_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let h = harness(&doc, &paths(&dir));
    let app = h.state();
    let blocks = doc
        .nodes
        .iter()
        .map(|n| app.node_screen_rect(&n.id).unwrap())
        .reduce(|a, b| a.union(b))
        .unwrap();
    let canvas = app.canvas_screen_rect();
    let (left, right) = (
        blocks.left() - canvas.left(),
        canvas.right() - blocks.right(),
    );
    let minimap = h.get_by_label("Minimap").rect();
    let (top, bottom) = (blocks.top() - canvas.top(), minimap.top() - blocks.bottom());
    assert!(
        (left - right).abs() < 2.0 && (top - bottom).abs() < 2.0,
        "blocks {blocks:?} in canvas {canvas:?}: margins left {left}, right {right}, top {top}, bottom {bottom}"
    );
}

#[test]
fn blocks_added_by_a_click_do_not_cover_other_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(&example(), &paths(&dir));
    for _ in 0..3 {
        harness.get_by_role_and_label(Role::Button, "Delay").click();
        harness.run_steps(3);
    }
    let app = harness.state();
    let ids: Vec<String> = app
        .document
        .to_doc()
        .nodes
        .iter()
        .map(|n| n.id.clone())
        .collect();
    assert_eq!(ids.len(), 6, "{ids:?}");
    let rects: Vec<(String, egui::Rect)> = ids
        .iter()
        .map(|id| (id.clone(), app.node_screen_rect(id).unwrap()))
        .collect();
    for (i, (a, ra)) in rects.iter().enumerate() {
        for (b, rb) in &rects[i + 1..] {
            assert!(!ra.intersects(*rb), "`{a}` {ra:?} covers `{b}` {rb:?}");
        }
    }
}
