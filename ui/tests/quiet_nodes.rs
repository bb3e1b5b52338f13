//! Quiet nodes and bypass, driven through the real UI: a node shows its `error` and `tool`
//! outputs only when they are wired, turned on from its menu ("Handle errors here", "Use as
//! a tool"), or while a wire dragged from an input could end on them; graph inputs and
//! outputs have no `tool` output; old files keep their wires. A node bypassed from its menu
//! or with Ctrl+B is dimmed, says "bypassed", is saved so, and a run passes its input
//! through without doing what it does; `agentloom run` sends no request for a bypassed
//! `http.request` (a real HTTP server on 127.0.0.1 counts them).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command, EXAMPLES};
use agentloom_core::{ERROR_PORT, TOOL_PORT, Value};
use egui::accesskit::Role;
use egui::{Key, Modifiers, PointerButton};
use egui_kittest::kittest::Queryable as _;
use support::{
    AppHarness, click_at, example, graph, harness, harness_for, hold_and_move, keys, let_go, paths,
    pin, title_of, wait_for_completed_run, wires,
};

/// The output pins node `id` shows, by name.
fn shown_outputs(h: &AppHarness, id: &str) -> Vec<String> {
    let document = &h.state().document;
    let node = document.node_by_id(id).unwrap();
    document.snarl[node]
        .outputs
        .iter()
        .map(|p| p.name.clone())
        .collect()
}

/// Whether a label `text` is drawn inside node `id`.
fn label_in(h: &AppHarness, id: &str, text: &str) -> bool {
    let rect = h.state().node_screen_rect(id).unwrap();
    h.query_all_by_label(text)
        .any(|found| rect.contains(h.state().graph_to_screen(found.rect().center())))
}

fn node_menu(h: &mut AppHarness, title: &str) {
    let at = title_of(h, title);
    click_at(h, at, PointerButton::Secondary, Modifiers::NONE);
}

fn saved_node(h: &AppHarness, id: &str) -> agentloom_core::NodeDoc {
    let doc = h.state().document.to_doc();
    doc.nodes.into_iter().find(|n| n.id == id).unwrap()
}

#[test]
fn the_examples_open_without_error_or_tool_pins_that_nothing_uses() {
    let dir = tempfile::tempdir().unwrap();
    for (index, (file, _)) in EXAMPLES.iter().enumerate() {
        let mut h = harness_for(App::new(&example(), None, &paths(&dir)));
        h.state_mut().send(Command::OpenExample(index));
        h.run_steps(4);
        let doc = h.state().document.to_doc();
        for node in &doc.nodes {
            for port in [ERROR_PORT, TOOL_PORT] {
                let wired = doc
                    .edges
                    .iter()
                    .any(|e| e.from.0 == node.id && e.from.1 == port);
                assert_eq!(
                    shown_outputs(&h, &node.id).iter().any(|p| p == port),
                    wired,
                    "{file}: `{}` shows `{port}` {}",
                    node.id,
                    if wired {
                        "not, though wired"
                    } else {
                        "unwired"
                    }
                );
            }
        }
    }
    // Drawn: no `error` or `tool` pin on the hello example at all.
    let h = harness(&example(), &paths(&dir));
    assert!(h.query_by_label(ERROR_PORT).is_none());
    assert!(h.query_by_label(TOOL_PORT).is_none());
}

#[test]
fn handle_errors_here_and_use_as_a_tool_show_the_outputs_saved_and_undoable() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));

    node_menu(&mut h, "render");
    h.get_by_role_and_label(Role::CheckBox, "Handle errors here")
        .click();
    h.run_steps(3);
    assert_eq!(shown_outputs(&h, "render"), ["text", "error"]);
    assert!(label_in(&h, "render", ERROR_PORT));
    assert!(saved_node(&h, "render").show_error);

    node_menu(&mut h, "render");
    h.get_by_role_and_label(Role::CheckBox, "Use as a tool")
        .click();
    h.run_steps(3);
    assert_eq!(shown_outputs(&h, "render"), ["text", "error", "tool"]);
    assert!(label_in(&h, "render", TOOL_PORT));
    let saved = h.state().document.to_doc().to_json_string();
    assert!(
        saved.contains(r#""show_error": true"#) && saved.contains(r#""show_tool": true"#),
        "{saved}"
    );

    // A tool output feeds only an input that takes tools: into the graph output's json it
    // is refused, saying why.
    let before = wires(&h);
    h.state_mut().send(Command::Connect {
        from: ("render".into(), TOOL_PORT.into()),
        to: ("greeting".into(), "value".into()),
    });
    h.run_steps(3);
    assert_eq!(wires(&h), before);
    let notice = h.state().notice.clone().unwrap_or_default();
    assert!(
        notice.contains("Connection refused") && notice.contains("an input that takes tools"),
        "{notice}"
    );

    // Each is one undo step.
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(shown_outputs(&h, "render"), ["text", "error"]);
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(shown_outputs(&h, "render"), ["text"]);
    assert!(!label_in(&h, "render", ERROR_PORT));
    assert!(!saved_node(&h, "render").show_error);

    // A graph input is never a tool: its menu does not offer it, and it has no such output.
    node_menu(&mut h, "Who to greet");
    h.get_by_role_and_label(Role::CheckBox, "Handle errors here");
    assert!(h.query_by_label("Use as a tool").is_none());
    h.key_press(Key::Escape);
    h.run_steps(2);
    for id in ["name", "greeting"] {
        let document = &h.state().document;
        let node = &document.snarl[document.node_by_id(id).unwrap()];
        assert!(node.all_outputs.iter().all(|p| p.name != TOOL_PORT), "{id}");
    }
}

const CAUGHT: &str = r#"{"format":"agentloom.graph","version":1,"name":"caught",
  "nodes":[
    {"id":"parse","block":"json.parse","position":[250,0]},
    {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"{","type":"text"}},
    {"id":"why","block":"graph.output","position":[520,0],"config":{"name":"why"}}],
  "edges":[{"from":["parse","error"],"to":["why","value"]},
           {"from":["text","value"],"to":["parse","text"]}]}"#;

#[test]
fn a_file_with_a_wired_error_output_keeps_its_wire_and_the_pin_goes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&graph(CAUGHT), &paths(&dir));
    assert_eq!(shown_outputs(&h, "parse"), ["value", "error"]);
    assert!(label_in(&h, "parse", ERROR_PORT));
    assert_eq!(
        wires(&h),
        ["parse.error -> why.value", "text.value -> parse.text"]
    );
    assert!(!saved_node(&h, "parse").show_error, "no flag is added");
    // Unwired, the pin goes; the other wires stay where they were.
    let at = support::pin_label_in(&h, "parse", ERROR_PORT);
    click_at(&mut h, at, PointerButton::Secondary, Modifiers::NONE);
    h.get_by_role_and_label(Role::Button, "Disconnect").click();
    h.run_steps(3);
    assert_eq!(wires(&h), ["text.value -> parse.text"]);
    assert_eq!(shown_outputs(&h, "parse"), ["value"]);
    assert!(!label_in(&h, "parse", ERROR_PORT));
}

const AGENT: &str = r#"{"format":"agentloom.graph","version":1,"name":"tools",
  "nodes":[
    {"id":"agent","block":"ai.agent","position":[420,0],"config":{"model":"m","base_url":"http://127.0.0.1:1/v1"}},
    {"id":"goal","block":"graph.input","position":[0,0],"config":{"name":"goal"}},
    {"id":"helper","block":"text.template","position":[0,200],"config":{"template":"{{ x }}"}}],
  "edges":[{"from":["goal","value"],"to":["agent","goal"]}]}"#;

#[test]
fn a_wire_dragged_from_an_agents_tools_shows_the_tool_outputs_it_can_end_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&graph(AGENT), &paths(&dir));
    assert_eq!(shown_outputs(&h, "helper"), ["text"]);
    let tools = pin(&h, "agent", "tools", false);
    let empty = tools - egui::vec2(120.0, -60.0);

    // While the wire is held, the template offers its tool output (a graph input has none);
    // let go on empty canvas and it goes again.
    hold_and_move(&mut h, tools, empty, Modifiers::NONE);
    h.run_steps(2);
    assert_eq!(shown_outputs(&h, "helper"), ["text", "tool"]);
    assert!(label_in(&h, "helper", TOOL_PORT));
    assert_eq!(shown_outputs(&h, "goal"), ["value"]);
    let_go(&mut h, empty, Modifiers::NONE);
    h.key_press(Key::Escape);
    h.run_steps(3);
    assert_eq!(shown_outputs(&h, "helper"), ["text"]);

    // Dropped on it, the wire is made and the pin stays.
    hold_and_move(&mut h, tools, empty, Modifiers::NONE);
    h.run_steps(2);
    let target = pin(&h, "helper", TOOL_PORT, true);
    let_go(&mut h, target, Modifiers::NONE);
    assert_eq!(
        wires(&h),
        ["goal.value -> agent.goal", "helper.tool -> agent.tools"]
    );
    assert_eq!(shown_outputs(&h, "helper"), ["text", "tool"]);
    assert!(!saved_node(&h, "helper").show_tool, "wired, not flagged");
}

const WRITE: &str = r#"{"format":"agentloom.graph","version":1,"name":"write",
  "settings":{"safe_mode":true},
  "nodes":[
    {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"handed on","type":"text"}},
    {"id":"write","block":"file.write","label":"Write note","position":[250,0],"config":{"path":"note.txt"}},
    {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"path"}}],
  "edges":[{"from":["text","value"],"to":["write","content"]},
           {"from":["write","path"],"to":["out","value"]}]}"#;

#[test]
fn a_bypassed_node_is_marked_saved_undoable_and_runs_pass_its_input_through() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let note = paths.workspace.clone().unwrap().join("note.txt");
    let mut h = harness(&graph(WRITE), &paths);
    assert!(h.query_by_label("bypassed").is_none());

    // Ctrl+B on the selected block.
    let at = title_of(&h, "Write note");
    click_at(&mut h, at, PointerButton::Primary, Modifiers::NONE);
    keys(&mut h, Modifiers::COMMAND, Key::B);
    assert!(saved_node(&h, "write").bypass);
    assert!(label_in(&h, "write", "bypassed"));
    assert!(
        h.state()
            .document
            .to_doc()
            .to_json_string()
            .contains(r#""bypass": true"#)
    );
    // Undo, then the node menu's toggle.
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert!(!saved_node(&h, "write").bypass);
    assert!(h.query_by_label("bypassed").is_none());
    node_menu(&mut h, "Write note");
    h.get_by_role_and_label(Role::CheckBox, "Bypass").click();
    h.run_steps(3);
    assert!(saved_node(&h, "write").bypass);

    // Safe mode asks nothing and no file is written: the text goes straight through.
    h.get_by_role_and_label(Role::Button, "▶ Run").click();
    wait_for_completed_run(&mut h);
    assert!(h.state().run.approvals.is_empty());
    assert!(!note.exists());
    let write = h.state().run.node("write").unwrap();
    assert_eq!(write.outputs.get("path"), Some(&Value::from("handed on")));

    // Ctrl+B again runs it again.
    let at = title_of(&h, "Write note");
    click_at(&mut h, at, PointerButton::Primary, Modifiers::NONE);
    keys(&mut h, Modifiers::COMMAND, Key::B);
    assert!(!saved_node(&h, "write").bypass);
}

/// `agentloom run` of a graph whose POST is bypassed sends nothing and hands the body on;
/// the same graph with the node running again posts once.
#[test]
fn agentloom_run_of_a_bypassed_request_sends_nothing() {
    let server = agentloom_tests::PostCounter::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph_path = dir.path().join("post.agentloom.json");
    let write = |bypass: bool| {
        let doc = serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "post",
            "nodes": [
                {"id": "payload", "block": "data.constant", "config": {"value": "payload", "type": "text"}},
                {"id": "post", "block": "http.request", "bypass": bypass,
                 "config": {"method": "POST", "url": server.url(), "allow_private_network": true}},
                {"id": "out", "block": "graph.output", "config": {"name": "body"}}],
            "edges": [
                {"from": ["payload", "value"], "to": ["post", "body"]},
                {"from": ["post", "body"], "to": ["out", "value"]}]
        });
        std::fs::write(&graph_path, doc.to_string()).unwrap();
    };
    let run = || {
        let output = support::agentloom_cli(
            &["run", graph_path.to_str().unwrap(), "--json", "--trust"],
            &db,
        );
        support::assert_exit_ok(&output);
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };

    write(true);
    let report = run();
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["outputs"]["body"], "payload", "the body handed on");
    assert_eq!(server.posts(), 0, "a bypassed request is never sent");

    write(false);
    let report = run();
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["outputs"]["body"], "ok");
    assert_eq!(server.posts(), 1);
}
