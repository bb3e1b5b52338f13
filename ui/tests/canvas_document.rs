//! The document a person edits is the one saved: each opened graph has its own undo history
//! and file, a past run never lands under the current file, and nothing unsaved is dropped
//! without asking. Driven through the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command, EXAMPLES, load_graph, save_graph};
use egui::accesskit::Role;
use egui::{Key, Modifiers};
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, drop_file, example, graph, harness_for, ids, keys, paths, wait_until};

/// A graph with no inputs, so Run starts at once.
const CONSTANT: &str = r#"{"format":"agentloom.graph","version":1,"name":"constant","nodes":[
    {"id":"value","block":"data.constant","position":[0,0],"config":{"value":"hi","type":"text"}},
    {"id":"shown","block":"graph.output","position":[300,0],"config":{"name":"shown"}}],
  "edges":[{"from":["value","value"],"to":["shown","value"]}]}"#;

/// Clicks a button through the pointer, then lets the app carry it out.
fn press(h: &mut AppHarness, label: &str) {
    h.get_by_role_and_label(Role::Button, label).click();
    h.run_steps(2);
}

/// Clicks the text field `label`, selects all of it and types `text` over it.
fn retype(h: &mut AppHarness, label: &str, text: &str) {
    h.get_by_role_and_label(Role::TextInput, label).click();
    h.run_steps(1);
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_role_and_label(Role::TextInput, label)
        .type_text(text);
    h.run_steps(2);
}

fn normalized(mut doc: agentloom_core::GraphDoc) -> agentloom_core::GraphDoc {
    doc.normalize();
    doc
}

#[test]
fn an_opened_file_has_its_own_undo_history_so_save_never_writes_the_previous_graph_there() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.agentloom.json");
    let second = dir.path().join("second.agentloom.json");
    save_graph(&example(), &first).unwrap();
    save_graph(&graph(CONSTANT), &second).unwrap();
    let mut h = harness_for(App::new(&example(), Some(first.clone()), &paths(&dir)));
    press(&mut h, "Delay");
    keys(&mut h, Modifiers::COMMAND, Key::S);
    assert!(!h.state().document.dirty);

    h.state_mut().send(Command::Open(second.clone()));
    h.run_steps(3);
    assert_eq!(ids(&h), ["shown", "value"]);
    assert!(
        !h.state().document.can_undo(),
        "a new document, a new history"
    );
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(
        ids(&h),
        ["shown", "value"],
        "undo does not bring the other graph back"
    );
    h.get_by_label_contains("second.agentloom.json");
    keys(&mut h, Modifiers::COMMAND, Key::S);
    assert_eq!(load_graph(&second).unwrap(), normalized(graph(CONSTANT)));
    assert!(load_graph(&first).unwrap().node("delay").is_some());
}

#[test]
fn a_past_run_of_another_graph_opens_as_an_untitled_document_not_under_the_current_file() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let hello = dir.path().join("hello.agentloom.json");
    save_graph(&example(), &hello).unwrap();
    let mut h = harness_for(App::new(&graph(CONSTANT), None, &paths));
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the run", |h| {
        !h.state().run.is_running() && !h.state().history().is_empty()
    });

    h.state_mut().send(Command::Open(hello.clone()));
    h.run_steps(3);
    assert_eq!(h.state().document.path.as_deref(), Some(hello.as_path()));
    // Listed with every graph's runs, under its graph's name.
    h.get_by_role_and_label(Role::CheckBox, "All graphs")
        .click();
    h.run_steps(2);
    h.get_by_label_contains("constant\ncompleted").click();
    h.run_steps(3);
    assert_eq!(ids(&h), ["shown", "value"], "the run's graph is shown");
    assert_eq!(h.state().document.path, None, "untitled, not hello's file");
    assert!(
        !h.state().document.can_undo(),
        "hello's history stays with hello"
    );
    assert!(
        h.state().run.node("value").is_some(),
        "with the run's values"
    );
    h.get_by_label_contains("not saved");
    assert_eq!(load_graph(&hello).unwrap(), normalized(example()));
}

#[test]
fn new_open_and_a_dropped_file_ask_before_discarding_unsaved_work() {
    let dir = tempfile::tempdir().unwrap();
    let current = dir.path().join("current.agentloom.json");
    let other = dir.path().join("other.agentloom.json");
    save_graph(&example(), &current).unwrap();
    save_graph(&graph(CONSTANT), &other).unwrap();
    let mut h = harness_for(App::new(&example(), Some(current.clone()), &paths(&dir)));
    press(&mut h, "Delay");
    let edited = h.state().document.to_doc();

    // New: Cancel keeps the work.
    keys(&mut h, Modifiers::COMMAND, Key::N);
    h.get_by_label("Save changes?");
    press(&mut h, "Cancel");
    assert!(h.query_by_label("Save changes?").is_none());
    assert_eq!(h.state().document.to_doc(), edited);
    assert!(h.state().document.dirty);

    // A dropped file: Save writes the work first, then opens the file.
    drop_file(&mut h, &other);
    h.get_by_label("Save changes?");
    assert_eq!(h.state().document.to_doc(), edited, "nothing replaced yet");
    press(&mut h, "Save");
    // Saved without the blocks' declared defaults (the delay's 1000 ms).
    let short =
        agentloom_core::without_declared_defaults(&edited, &agentloom_blocks::Registry::builtin());
    assert_eq!(load_graph(&current).unwrap(), short);
    assert_eq!(ids(&h), ["shown", "value"]);
    assert_eq!(h.state().document.path.as_deref(), Some(other.as_path()));

    // Open: Don't save drops the edit and opens the file.
    press(&mut h, "Delay");
    h.state_mut().send(Command::Open(current.clone()));
    h.run_steps(2);
    h.get_by_label("Save changes?");
    press(&mut h, "Don't save");
    assert_eq!(h.state().document.path.as_deref(), Some(current.as_path()));
    assert_eq!(h.state().document.to_doc(), short);
    assert!(!h.state().document.dirty);
    assert_eq!(load_graph(&other).unwrap(), normalized(graph(CONSTANT)));

    // Without changes nothing is asked.
    keys(&mut h, Modifiers::COMMAND, Key::N);
    assert!(h.query_by_label("Save changes?").is_none());
    assert!(ids(&h).is_empty());
}

#[test]
fn undoing_back_to_the_saved_graph_clears_the_modified_mark() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kept.agentloom.json");
    let mut h = harness_for(App::new(&example(), Some(file), &paths(&dir)));
    h.get_by_label_contains("kept.agentloom.json");
    assert!(h.query_by_label_contains("kept.agentloom.json •").is_none());
    press(&mut h, "Delay");
    h.get_by_label_contains("kept.agentloom.json •");
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert!(!h.state().document.dirty);
    assert!(h.query_by_label_contains("kept.agentloom.json •").is_none());
    keys(&mut h, Modifiers::COMMAND, Key::Y);
    h.get_by_label_contains("kept.agentloom.json •");
}

#[test]
fn a_long_value_stays_in_a_small_badge_and_never_grows_its_node_over_the_one_below() {
    let dir = tempfile::tempdir().unwrap();
    let long = "many words ".repeat(300);
    let doc = graph(&format!(
        r#"{{"format":"agentloom.graph","version":1,"name":"long","nodes":[
        {{"id":"value","block":"data.constant","position":[0,0],"config":{{"value":"{long}","type":"text"}}}},
        {{"id":"below","block":"data.constant","position":[0,170],"config":{{"value":"x","type":"text"}}}},
        {{"id":"shown","block":"graph.output","position":[360,0],"config":{{"name":"shown"}}}}],
      "edges":[{{"from":["value","value"],"to":["shown","value"]}}]}}"#
    ));
    let mut h = harness_for(App::new(&doc, None, &paths(&dir)));
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    h.run_steps(3);
    let value = h.state().node_screen_rect("value").unwrap();
    let below = h.state().node_screen_rect("below").unwrap();
    let shown = h.state().node_screen_rect("shown").unwrap();
    assert!(!value.intersects(below), "{value:?} over {below:?}");
    assert!(!value.intersects(shown), "{value:?} over {shown:?}");
    assert!(!shown.intersects(below), "{shown:?} over {below:?}");
    // The whole value is still a hover or a click away: in the run panel.
    assert!(h.state().run.node("value").is_some());
}

/// The screen rects of all the document's nodes, by id.
fn node_rects(h: &AppHarness) -> Vec<(String, egui::Rect)> {
    ids(h)
        .into_iter()
        .map(|id| {
            let rect = h.state().node_screen_rect(&id).unwrap();
            (id, rect)
        })
        .collect()
}

#[test]
fn values_arriving_never_widen_a_node_nor_push_it_over_a_neighbour_in_any_example() {
    let dir = tempfile::tempdir().unwrap();
    let long = "a value far longer than any node is wide ".repeat(20);
    let mut overlaps = Vec::new();
    for (index, (file, text)) in EXAMPLES.iter().enumerate() {
        let mut h = harness_for(App::new(&example(), None, &paths(&dir)));
        h.state_mut().send(Command::OpenExample(index));
        // The fit settles as the nodes take the detail of its zoom.
        h.run_steps(12);
        assert_eq!(
            normalized(h.state().document.to_doc()).nodes,
            normalized(graph(text)).nodes,
            "{file} did not open"
        );
        let before = node_rects(&h);
        assert!(!before.is_empty(), "{file} has no nodes");
        // What a finished run shows: every node done, with a long value on each output.
        let ports: Vec<(String, Vec<String>)> = h
            .state()
            .document
            .snarl
            .nodes()
            .map(|n| {
                let outputs = n.outputs.iter().map(|p| p.name.clone());
                (n.doc.id.clone(), outputs.filter(|p| p != "error").collect())
            })
            .collect();
        for (id, outputs) in ports {
            let run = h.state_mut().run.nodes.entry(id).or_default();
            run.status = agentloom_engine::NodeStatus::Done;
            for port in outputs {
                let value = agentloom_core::Value::text(long.clone());
                run.outputs.insert(port, value);
            }
        }
        h.run_steps(40);
        assert_eq!(
            h.get_all_by_label("done").count(),
            before.len(),
            "{file}: every node shows its badge"
        );
        let after = node_rects(&h);
        for ((id, was), (_, now)) in before.iter().zip(&after) {
            assert!(
                (was.width() - now.width()).abs() < 0.5,
                "{file}: `{id}` went from {} to {} points wide",
                was.width(),
                now.width()
            );
        }
        for (i, (a, ra)) in after.iter().enumerate() {
            for (b, rb) in &after[i + 1..] {
                if ra.intersects(*rb) {
                    overlaps.push(format!("{file}: `{a}` {ra:?} overlaps `{b}` {rb:?}"));
                }
            }
        }
    }
    assert!(overlaps.is_empty(), "{}", overlaps.join("\n"));
}

#[test]
fn fit_to_view_shows_a_wide_row_whole_and_small_text_is_not_tiny() {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<String> = (0..8)
        .map(|i| {
            format!(
                r#"{{"id":"n{i}","block":"data.constant","position":[{},0],"config":{{"value":"x","type":"text"}}}}"#,
                i * 320
            )
        })
        .collect();
    let doc = graph(&format!(
        r#"{{"format":"agentloom.graph","version":1,"name":"row","nodes":[{}],"edges":[]}}"#,
        nodes.join(",")
    ));
    let mut h = harness_for(App::new(&doc, None, &paths(&dir)));
    keys(&mut h, Modifiers::NONE, Key::F);
    h.run_steps(2);
    assert_every_node_shown(&h, "the row after F");
    let small = h.ctx.style_of(egui::Theme::Dark).text_styles[&egui::TextStyle::Small].size;
    assert!(small >= 11.0, "small text is {small} points");
}

/// Every node of the open graph is whole on the canvas, and clear of the minimap.
fn assert_every_node_shown(h: &AppHarness, when: &str) {
    let canvas = h.state().canvas_screen_rect();
    let minimap = h.get_by_label("Minimap").rect();
    for node in h.state().document.to_doc().nodes {
        let rect = h.state().node_screen_rect(&node.id).unwrap();
        assert!(
            canvas.contains_rect(rect),
            "{when}: `{}` at {rect:?} is cut by the canvas's edge {canvas:?}",
            node.id
        );
        assert!(
            !rect.intersects(minimap),
            "{when}: `{}` at {rect:?} is under the minimap {minimap:?}",
            node.id
        );
    }
}

#[test]
fn examples_open_fitted_and_fit_brings_every_node_back_after_zooming_in() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&example(), None, &paths(&dir)));
    for name in ["Data pipeline", "Size check"] {
        h.state_mut().send(Command::ShowExamples);
        h.run_steps(2);
        press(&mut h, name);
        h.run_steps(4);
        assert_eq!(h.state().document.name, name);
        assert_every_node_shown(&h, &format!("{name} on open"));
        h.state_mut().send(Command::Zoom(3.0));
        h.run_steps(3);
        keys(&mut h, Modifiers::NONE, Key::F);
        h.run_steps(3);
        assert_every_node_shown(&h, &format!("{name} after zooming in and F"));
        h.state_mut().send(Command::Zoom(3.0));
        h.run_steps(3);
        press(&mut h, "Fit");
        h.run_steps(3);
        assert_every_node_shown(&h, &format!("{name} after the Fit button"));
    }
}

#[test]
fn the_run_form_beside_the_canvas_has_its_default_selected_so_typing_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&example(), None, &paths(&dir)));
    press(&mut h, "▶ Run");
    h.run_steps(2);
    h.get_by_label("Run inputs");
    let field = h.get_by_role_and_label(Role::TextInput, "name (text)");
    assert!(field.is_focused());
    // Over no block.
    let form = [
        field.rect(),
        h.get_by_role_and_label(Role::Button, "Start run").rect(),
    ];
    for id in ["greeting", "name", "render"] {
        let node = h.state().node_screen_rect(id).unwrap();
        assert!(
            form.iter().all(|r| !r.intersects(node)),
            "the form covers `{id}`"
        );
    }
    field.type_text("Ada");
    h.run_steps(1);
    h.key_press(Key::Enter);
    h.run_steps(2);
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    let greeting = h.state().run.outputs.get("greeting").unwrap().to_json();
    assert_eq!(greeting, serde_json::json!("Hello, Ada!"));
}

#[test]
fn the_graph_name_and_description_are_edited_in_the_inspector_in_one_undo_step_each() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&example(), None, &paths(&dir)));
    retype(&mut h, "Graph name", "Greeter");
    retype(&mut h, "Graph description", "Says hello.");
    let doc = h.state().document.to_doc();
    assert_eq!(doc.name, "Greeter");
    assert_eq!(doc.description, "Says hello.");
    assert!(h.state().document.dirty);
    h.get_by_label_contains("Greeter —");

    // Leave the field, then undo: the description, then the name, each in one step.
    h.key_press(Key::Escape);
    h.run_steps(2);
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(h.state().document.description, example().description);
    assert_eq!(h.state().document.name, "Greeter");
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(h.state().document.name, "Hello");
    assert!(!h.state().document.dirty);
}

/// Every example file under assets/examples, read.
fn example_files() -> Vec<agentloom_core::GraphDoc> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples");
    let mut found = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().ends_with(".agentloom.json") {
                found.push(load_graph(&path).unwrap());
            }
        }
    }
    found
}

#[test]
fn file_examples_lists_every_example_with_its_description_and_opens_one_untitled() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mine.agentloom.json");
    let mut h = harness_for(App::new(&example(), Some(file), &paths(&dir)));
    h.get_by_label("File").click();
    h.run_steps(2);
    h.get_by_label("Examples…").click();
    h.run_steps(3);
    let examples = example_files();
    assert!(examples.len() >= 4);
    for doc in &examples {
        h.get_by_role_and_label(Role::Button, &doc.name);
        h.get_by_label(&doc.description);
    }
    press(&mut h, "Data pipeline");
    let pipeline = examples.iter().find(|d| d.name == "Data pipeline").unwrap();
    assert_eq!(h.state().document.to_doc(), normalized(pipeline.clone()));
    assert_eq!(h.state().document.path, None, "a new untitled document");
    assert!(h.query_by_label("Examples").is_none(), "the gallery closed");
}

#[test]
fn a_node_output_shows_as_a_folding_json_tree_with_copy() {
    let dir = tempfile::tempdir().unwrap();
    let doc = graph(
        r#"{"format":"agentloom.graph","version":1,"name":"tree","nodes":[
        {"id":"person","block":"data.constant","position":[0,0],"config":{"type":"json","value":{"user":{"name":"Ada","tags":["math","engines"]}}}},
        {"id":"shown","block":"graph.output","position":[360,0],"config":{"name":"shown"}}],
      "edges":[{"from":["person","value"],"to":["shown","value"]}]}"#,
    );
    let mut h = harness_for(App::new(&doc, None, &paths(&dir)));
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    h.state_mut()
        .send(Command::InspectById("person".to_owned()));
    h.run_steps(3);
    h.get_by_label("Last run").click();
    h.run_steps(2);
    // Folded: the keys are not listed yet. The inspector is scrolled down to its outputs.
    let header = |h: &AppHarness, text: &str| h.get_by_label_contains(text).rect().center();
    let inspector = header(&h, "value {…} 1 keys") - egui::vec2(0.0, 200.0);
    for text in ["value {…} 1 keys", "user {…} 2 keys", "tags […] 2 items"] {
        h.event(egui::Event::PointerMoved(inspector));
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -2000.0),
            modifiers: Modifiers::NONE,
            phase: egui::TouchPhase::Move,
        });
        h.run_steps(3);
        let at = header(&h, text);
        support::click_at(&mut h, at, egui::PointerButton::Primary, Modifiers::NONE);
    }
    h.get_by_label("Ada");
    h.get_by_label("engines");

    // Copy on the opened `user` puts its JSON on the clipboard.
    let copy = h
        .get_all_by_role_and_label(Role::Button, "Copy")
        .nth(1)
        .unwrap();
    copy.click();
    h.step();
    let copied = support::copied_text(&h).expect("copied");
    let copied: serde_json::Value = serde_json::from_str(&copied).unwrap();
    assert_eq!(
        copied,
        serde_json::json!({"name": "Ada", "tags": ["math", "engines"]})
    );
}

#[test]
fn the_history_lists_as_many_runs_as_fit_in_its_panel() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&graph(CONSTANT), None, &paths(&dir)));
    for done in 1..=6 {
        keys(&mut h, Modifiers::COMMAND, Key::Enter);
        wait_until(&mut h, "the run", |h| {
            !h.state().run.is_running() && h.state().history().len() == done
        });
    }
    h.run_steps(3);
    let status_top = h.get_by_label_contains("Run completed").rect().top();
    let rows: Vec<egui::Rect> = h
        .get_all_by_label_contains("completed · just now")
        .map(|row| row.rect())
        .collect();
    assert_eq!(rows.len(), 6);
    for row in rows {
        assert!(
            row.bottom() <= status_top,
            "a run is cut off below the panel: {row:?}, the status bar starts at {status_top}"
        );
    }
}
