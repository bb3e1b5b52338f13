//! The debugger, driven through the real UI: breakpoints set with F9 and from a node's menu,
//! drawn on the node and kept for the file (not in it) across a restart; a run paused at
//! one shows the values in the run panel, an edit there (checked against the port's type)
//! is what the next node gets; Step stops before the next node, Stop ends the run; a run
//! left paused by quitting is waiting in the history after a restart and continues there.
//! A finished node of a past run forks it with an edited output: the fork reuses what came
//! before, is listed under its parent, and shows beside it with the outputs that differ.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::App;
use agentloom_core::Value;
use agentloom_engine::{NodeStatus, RunStatus, RunStore};
use egui::accesskit::Role;
use egui::{Key, Modifiers, PointerButton};
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::{AppHarness, click_at, harness_for, keys, paths, title_of, wait_until};

/// A text handed down two templates to the graph's output.
const CHAIN: &str = r#"{"format":"agentloom.graph","version":1,"name":"chain",
  "nodes":[
    {"id":"name","block":"data.constant","position":[0,0],"config":{"value":"world","type":"text"}},
    {"id":"render","block":"text.template","label":"Render greeting","position":[260,0],"config":{"template":"Hello, {{ name }}!"}},
    {"id":"shout","block":"text.template","label":"Shout it","position":[520,0],"config":{"template":"{{ text }}!!"}},
    {"id":"out","block":"graph.output","position":[780,0],"config":{"name":"greeting"}}],
  "edges":[{"from":["name","value"],"to":["render","name"]},
           {"from":["render","text"],"to":["shout","text"]},
           {"from":["shout","text"],"to":["out","value"]}]}"#;

/// Whether a label saying `text` is drawn inside node `id`.
fn label_in(h: &AppHarness, id: &str, text: &str) -> bool {
    let rect = h.state().node_screen_rect(id).unwrap();
    h.query_all_by_label(text)
        .any(|found| rect.contains(h.state().graph_to_screen(found.rect().center())))
}

/// Selects the node titled `title` with a click.
fn select(h: &mut AppHarness, title: &str) {
    let at = title_of(h, title);
    click_at(h, at, PointerButton::Primary, Modifiers::NONE);
}

fn node_menu(h: &mut AppHarness, title: &str) {
    let at = title_of(h, title);
    click_at(h, at, PointerButton::Secondary, Modifiers::NONE);
}

/// The app on the graph file `file`, its data in `paths`.
fn open(file: &std::path::Path, paths: &agentloom::app::AppPaths) -> AppHarness {
    let doc = agentloom::app::load_graph(file).unwrap();
    harness_for(App::new(&doc, Some(file.to_owned()), paths))
}

#[test]
fn f9_and_the_node_menu_set_breakpoints_drawn_on_the_node_and_kept_for_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let file = dir.path().join("chain.agentloom.json");
    std::fs::write(&file, CHAIN).unwrap();
    let mut h = open(&file, &paths);
    assert!(h.query_by_label_contains("Breakpoint").is_none());

    // F9 on the selected node: a breakpoint before it, drawn in its header.
    select(&mut h, "Render greeting");
    keys(&mut h, Modifiers::NONE, Key::F9);
    assert!(label_in(&h, "render", "Breakpoint before"));
    // F9 again removes it.
    keys(&mut h, Modifiers::NONE, Key::F9);
    assert!(h.query_by_label_contains("Breakpoint").is_none());

    // The node's menu offers before and after.
    node_menu(&mut h, "Shout it");
    h.get_by_role_and_label(Role::Button, "Breakpoint after")
        .click();
    h.run_steps(3);
    assert!(label_in(&h, "shout", "Breakpoint after"));
    select(&mut h, "Render greeting");
    keys(&mut h, Modifiers::NONE, Key::F9);
    assert!(label_in(&h, "render", "Breakpoint before"));

    // Typing F9 in a field sets nothing.
    h.state_mut().send(agentloom::app::Command::ClearSelection);
    h.run_steps(2);
    h.get_by_label("Graph name").focus();
    h.run_steps(1);
    keys(&mut h, Modifiers::NONE, Key::F9);
    assert!(label_in(&h, "render", "Breakpoint before"));

    // Kept for the file, not in it: a restarted app on the same file shows them.
    drop(h);
    assert!(!std::fs::read_to_string(&file).unwrap().contains("reak"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), CHAIN);
    let h = open(&file, &paths);
    assert!(label_in(&h, "render", "Breakpoint before"));
    assert!(label_in(&h, "shout", "Breakpoint after"));
    assert!(h.query_all_by_label_contains("Breakpoint").count() == 2);
}

/// Two constants (a text and an integer) rendered by a template, shouted by another.
const TYPED: &str = r#"{"format":"agentloom.graph","version":1,"name":"typed",
  "nodes":[
    {"id":"name","block":"data.constant","label":"Name","position":[0,0],"config":{"value":"world","type":"text"}},
    {"id":"times","block":"data.constant","label":"Times","position":[0,200],"config":{"value":2,"type":"integer"}},
    {"id":"render","block":"text.template","label":"Render greeting","position":[300,0],"config":{"template":"Hello, {{ name }} x{{ times }}!"}},
    {"id":"shout","block":"text.template","label":"Shout it","position":[600,0],"config":{"template":"{{ text }}!!"}},
    {"id":"out","block":"graph.output","position":[900,0],"config":{"name":"greeting"}}],
  "edges":[{"from":["name","value"],"to":["render","name"]},
           {"from":["times","value"],"to":["render","times"]},
           {"from":["render","text"],"to":["shout","text"]},
           {"from":["shout","text"],"to":["out","value"]}]}"#;

/// Waits until the run is paused at `node` (`at`: before or after), as the run panel says.
fn wait_for_pause(h: &mut AppHarness, said: &str) {
    wait_until(h, said, |h| h.query_by_label_contains(said).is_some());
}

/// The JSON editor of the pause (`title`: what its values are).
fn pause_editor_text(h: &AppHarness, title: &str) -> String {
    h.get_by_role_and_label(Role::MultilineTextInput, title)
        .value()
        .unwrap()
}

/// Replaces the pause editor's text by typing.
fn type_values(h: &mut AppHarness, title: &str, json: &str) {
    h.get_by_role_and_label(Role::MultilineTextInput, title)
        .focus();
    h.run_steps(1);
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_role_and_label(Role::MultilineTextInput, title)
        .type_text(json);
    h.run_steps(2);
}

fn run(h: &mut AppHarness) {
    h.get_by_role_and_label(Role::Button, "▶ Run").click();
    h.run_steps(2);
}

/// The app on [`TYPED`] saved in `dir`.
fn typed_graph(dir: &tempfile::TempDir) -> (AppHarness, agentloom::app::AppPaths) {
    let paths = paths(dir);
    let file = dir.path().join("typed.agentloom.json");
    std::fs::write(&file, TYPED).unwrap();
    (open(&file, &paths), paths)
}

/// The app on [`TYPED`] saved in `dir`, F9 pressed on the template `render`.
fn typed_graph_with_a_breakpoint_before_render(
    dir: &tempfile::TempDir,
) -> (AppHarness, agentloom::app::AppPaths) {
    let (mut h, paths) = typed_graph(dir);
    select(&mut h, "Render greeting");
    keys(&mut h, Modifiers::NONE, Key::F9);
    (h, paths)
}

/// Waits for the run shown to end, and checks it completed with `greeting` as its output.
fn finished_with(h: &mut AppHarness, greeting: &str) {
    finished_with_output(h, "greeting", greeting);
}

/// Waits for the run shown to end, and checks it completed with `value` as output `name`.
fn finished_with_output(h: &mut AppHarness, name: &str, value: &str) {
    wait_until(h, "the run", |h| !h.state().run.is_running());
    let state = &h.state().run;
    assert_eq!(
        state.status,
        Some(RunStatus::Completed),
        "{:?}",
        state.error
    );
    assert_eq!(state.outputs.get(name), Some(&Value::from(value)));
}

const INPUTS: &str = "Inputs it will run with";
const OUTPUTS: &str = "Outputs it will hand on";

#[test]
fn a_run_pauses_at_a_breakpoint_and_the_edit_there_is_what_the_next_node_gets() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, paths) = typed_graph_with_a_breakpoint_before_render(&dir);
    // After the integer too, from its menu.
    node_menu(&mut h, "Times");
    h.get_by_role_and_label(Role::Button, "Breakpoint after")
        .click();
    h.run_steps(3);

    run(&mut h);
    wait_for_pause(&mut h, "Paused after `times`");
    assert!(label_in(&h, "times", "Breakpoint after, Paused after"));
    assert_eq!(pause_editor_text(&h, OUTPUTS), "{\n  \"value\": 2\n}");
    assert_eq!(
        h.state().run.node("times").map(|n| n.status),
        Some(NodeStatus::AtBreakpoint)
    );

    // A value its port cannot take is refused as it is typed, naming port and type, and
    // Continue does not go on with it.
    type_values(&mut h, OUTPUTS, r#"{"value": "many"}"#);
    h.get_by_label_contains("`times.value` takes integer");
    keys(&mut h, Modifiers::NONE, Key::F5);
    assert!(h.query_by_label_contains("Paused after `times`").is_some());
    type_values(&mut h, OUTPUTS, r#"{"value": 3}"#);
    assert!(h.query_by_label_contains("takes integer").is_none());
    keys(&mut h, Modifiers::NONE, Key::F5);

    // Before the template: its inputs resolved, the edited integer among them.
    wait_for_pause(&mut h, "Paused before `render`");
    let shown = pause_editor_text(&h, INPUTS);
    assert!(shown.contains(r#""times": 3"#), "{shown}");
    assert!(shown.contains(r#""name": "world""#), "{shown}");
    type_values(&mut h, INPUTS, r#"{"name": "debugger", "times": 3}"#);
    h.get_by_role_and_label(Role::Button, "Continue").click();
    finished_with(&mut h, "Hello, debugger x3!!!");
    let state = &h.state().run;
    // What the template got, in the run log too.
    let run_id = state.run_id.clone().unwrap();
    let store = RunStore::open(paths.run_log.as_ref().unwrap()).unwrap();
    let detail = store.get_run(&run_id).unwrap().unwrap();
    let render = detail.nodes.iter().find(|n| n.node_id == "render").unwrap();
    assert_eq!(render.inputs.get("name"), Some(&Value::from("debugger")));
    assert!(h.query_by_label_contains("Paused").is_none());
}

#[test]
fn step_stops_before_the_next_node_and_stop_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, _paths) = typed_graph_with_a_breakpoint_before_render(&dir);

    run(&mut h);
    wait_for_pause(&mut h, "Paused before `render`");
    keys(&mut h, Modifiers::NONE, Key::F10);
    wait_for_pause(&mut h, "Stepped before `shout`");
    assert!(label_in(&h, "shout", "Paused before"));
    let render = h.state().run.node("render").unwrap();
    assert_eq!(render.status, NodeStatus::Done);
    assert_eq!(
        render.outputs.get("text"),
        Some(&Value::from("Hello, world x2!"))
    );
    assert_ne!(
        h.state().run.node("out").map(|n| n.status),
        Some(NodeStatus::Done)
    );

    // Shift+F5: the run stops there; the nodes after it never run.
    keys(&mut h, Modifiers::SHIFT, Key::F5);
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    assert_eq!(h.state().run.status, Some(RunStatus::Cancelled));
    assert!(h.state().run.outputs.is_empty());
    assert!(h.query_by_label_contains("Paused").is_none());
}

#[test]
fn a_run_paused_when_the_app_quits_continues_at_the_breakpoint_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, paths) = typed_graph_with_a_breakpoint_before_render(&dir);
    run(&mut h);
    wait_for_pause(&mut h, "Paused before `render`");
    let run_id = h.state().run.run_id.clone().unwrap();
    // Quitting leaves the run waiting at the breakpoint, stored in the run log.
    h.state_mut().close();
    drop(h);
    let db = paths.run_log.clone().unwrap();
    let detail = RunStore::open(&db)
        .unwrap()
        .get_run(&run_id)
        .unwrap()
        .unwrap();
    assert_eq!(detail.run.status, RunStatus::Waiting);
    let paused_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();

    // A new window: the history lists it waiting; opened, it shows the pause to continue.
    let file = dir.path().join("typed.agentloom.json");
    let mut h = open(&file, &paths);
    h.get_by_label_contains("waiting · just now").click();
    h.run_steps(3);
    assert_eq!(h.state().run.run_id.as_deref(), Some(run_id.as_str()));
    wait_for_pause(&mut h, "Paused before `render`");
    let shown = pause_editor_text(&h, INPUTS);
    assert!(shown.contains(r#""name": "world""#), "{shown}");
    type_values(&mut h, INPUTS, r#"{"name": "again", "times": 2}"#);
    keys(&mut h, Modifiers::NONE, Key::F5);
    finished_with(&mut h, "Hello, again x2!!!");
    assert_eq!(h.state().run.run_id.as_deref(), Some(run_id.as_str()));
    // The constants finished before the pause and did not run again.
    let detail = RunStore::open(&db)
        .unwrap()
        .get_run(&run_id)
        .unwrap()
        .unwrap();
    let name = detail.node("name").unwrap();
    assert_eq!((name.status, name.attempts), (NodeStatus::Done, 1));
    assert!(u128::from(name.finished_at_ms.unwrap()) < paused_at);
    assert!(u128::from(detail.node("render").unwrap().finished_at_ms.unwrap()) >= paused_at);
}

#[test]
fn a_past_run_forked_from_an_edited_output_is_listed_under_it_and_compared() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, paths) = typed_graph(&dir);
    run(&mut h);
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    let parent = h.state().run.run_id.clone().unwrap();

    // The past run, opened from the history; the integer's menu forks it.
    h.get_by_label_contains("completed · just now").click();
    h.run_steps(3);
    node_menu(&mut h, "Times");
    h.get_by_role_and_label(Role::Button, "Edit output and rerun from here")
        .click();
    h.run_steps(3);
    const EDITOR: &str = "Outputs of `times`";
    assert_eq!(pause_editor_text(&h, EDITOR), "{\n  \"value\": 2\n}");
    type_values(&mut h, EDITOR, r#"{"value": "lots"}"#);
    h.get_by_label_contains("`times.value` takes integer");
    type_values(&mut h, EDITOR, r#"{"value": 7}"#);
    h.get_by_role_and_label(Role::Button, "Rerun from here")
        .click();
    h.run_steps(2);
    finished_with(&mut h, "Hello, world x7!!!");
    let state = &h.state().run;
    let fork = state.run_id.clone().unwrap();
    assert_ne!(fork, parent);
    // Recorded with its parent and the edit; what came before the edit is reused, not run.
    let store = RunStore::open(paths.run_log.as_ref().unwrap()).unwrap();
    let record = store.run_fork(&fork).unwrap().unwrap();
    assert_eq!(record.parent_run_id, parent);
    assert_eq!(record.edits.len(), 1);
    assert_eq!(
        (record.edits[0].node.as_str(), record.edits[0].port.as_str()),
        ("times", "value")
    );
    assert!(state.reused.contains("name"), "{:?}", state.reused);
    let detail = store.get_run(&fork).unwrap().unwrap();
    assert_eq!(detail.node("name").unwrap().attempts, 0);
    assert_eq!(detail.node("render").unwrap().attempts, 1);

    // The history lists the fork right under its parent.
    let rows: Vec<String> = h
        .query_all_by_label_contains("· just now")
        .filter_map(|n| n.accesskit_node().label())
        .collect();
    let rows: Vec<&str> = rows
        .iter()
        .map(|r| r.split(" · ").next().unwrap())
        .collect();
    assert_eq!(rows, ["completed", "↳ completed"]);

    // Beside its parent: the outputs that differ are marked, the reused ones are not.
    let at = h.get_by_label_contains("↳ completed").rect().center();
    click_at(&mut h, at, PointerButton::Secondary, Modifiers::NONE);
    h.get_by_role_and_label(Role::Button, "Compare with parent")
        .click();
    h.run_steps(3);
    for node in ["times", "render", "shout"] {
        assert!(
            h.query_by_label(&format!("{node} differs")).is_some(),
            "{node}"
        );
    }
    assert!(h.query_by_label("name differs").is_none());
    // The parent's value is shown only there (the canvas and run panel show the fork's).
    h.get_by_label_contains("Hello, world x2!!!");
}

/// `lib/child.json`: `text` in, upper-cased by `upper`, `shout` out.
const CHILD: &str = r#"{"format":"agentloom.graph","version":1,"name":"Shout",
  "nodes":[
    {"id":"text","block":"graph.input","position":[0,0],"config":{"name":"text"}},
    {"id":"upper","block":"text.template","label":"Upper","position":[300,0],"config":{"template":"{{ t | upper }}"}},
    {"id":"shout","block":"graph.output","position":[600,0],"config":{"name":"shout"}}],
  "edges":[{"from":["text","value"],"to":["upper","t"]},
           {"from":["upper","text"],"to":["shout","value"]}]}"#;

/// `main.json`: a constant down into the child (`call`), its output to the graph's.
const MAIN: &str = r#"{"format":"agentloom.graph","version":1,"name":"Main",
  "nodes":[
    {"id":"word","block":"data.constant","position":[0,0],"config":{"value":"hey","type":"text"}},
    {"id":"call","block":"graph.call","label":"Call shout","position":[300,0],"config":{"path":"lib/child.json"}},
    {"id":"result","block":"graph.output","position":[600,0],"config":{"name":"result"}}],
  "edges":[{"from":["word","value"],"to":["call","text"]},
           {"from":["call","shout"],"to":["result","value"]}]}"#;

#[test]
fn a_breakpoint_set_in_a_called_graph_pauses_its_callers_run_with_a_breadcrumb() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    std::fs::create_dir_all(dir.path().join("lib")).unwrap();
    let child = dir.path().join("lib/child.json");
    std::fs::write(&child, CHILD).unwrap();
    let main = dir.path().join("main.json");
    std::fs::write(&main, MAIN).unwrap();

    // F9 in the called graph, opened on its own.
    let mut h = open(&child, &paths);
    select(&mut h, "Upper");
    keys(&mut h, Modifiers::NONE, Key::F9);
    assert!(label_in(&h, "upper", "Breakpoint before"));
    drop(h);

    // The caller's run stops inside the call, and says where.
    let mut h = open(&main, &paths);
    run(&mut h);
    wait_for_pause(&mut h, "Paused before `upper`");
    h.get_by_label("Paused in Main › call › upper");
    assert!(label_in(&h, "call", "Paused before"));
    type_values(&mut h, INPUTS, r#"{"t": "edited inside"}"#);
    keys(&mut h, Modifiers::NONE, Key::F5);
    finished_with_output(&mut h, "result", "EDITED INSIDE");
}

/// `each.json`: a list of two words, each shouted by a sub-graph run per item (one at a
/// time, so the items pause in order).
const EACH: &str = r#"{"format":"agentloom.graph","version":1,"name":"Each",
  "nodes":[
    {"id":"words","block":"data.constant","position":[0,0],"config":{"value":["a","b"],"type":"list<json>"}},
    {"id":"each","block":"control.for_each","label":"Shout each","position":[300,0],"config":{"concurrency":1,"graph":{
      "format":"agentloom.graph","version":1,"name":"per item",
      "nodes":[
        {"id":"item","block":"graph.input","config":{"name":"item","type":"json"}},
        {"id":"upper","block":"text.template","label":"Upper","config":{"template":"{{ t | upper }}"}},
        {"id":"result","block":"graph.output","config":{"name":"result"}}],
      "edges":[{"from":["item","value"],"to":["upper","t"]},
               {"from":["upper","text"],"to":["result","value"]}]}}},
    {"id":"all","block":"graph.output","position":[700,0],"config":{"name":"all"}}],
  "edges":[{"from":["words","value"],"to":["each","items"]},
           {"from":["each","results"],"to":["all","value"]}]}"#;

#[test]
fn a_breakpoint_in_every_item_of_a_for_each_pauses_each_item_with_a_breadcrumb() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let file = dir.path().join("each.json");
    std::fs::write(&file, EACH).unwrap();
    let mut h = open(&file, &paths);

    // The for-each node's menu: a breakpoint before `upper`, in every item.
    node_menu(&mut h, "Shout each");
    // Submenus say so with an arrow after their label.
    h.get_by_label_contains("Breakpoint in every item").click();
    h.run_steps(2);
    h.get_by_label_contains("Upper (upper)").click();
    h.run_steps(2);
    // The submenu's own "Breakpoint before", beside the node's.
    h.query_all_by_role_and_label(Role::Button, "Breakpoint before")
        .last()
        .unwrap()
        .click();
    h.run_steps(3);
    // Kept for the file as the engine's path.
    let kept =
        std::fs::read_to_string(paths.data_dir.as_ref().unwrap().join("breakpoints.json")).unwrap();
    assert!(kept.contains("each/*/upper"), "{kept}");

    run(&mut h);
    wait_for_pause(&mut h, "Paused before `upper`");
    h.get_by_label("Paused in Each › each › item 0 › upper");
    assert!(label_in(&h, "each", "Paused before"));
    type_values(&mut h, INPUTS, r#"{"t": "edited"}"#);
    keys(&mut h, Modifiers::NONE, Key::F5);
    wait_until(&mut h, "the second item's pause", |h| {
        h.query_by_label("Paused in Each › each › item 1 › upper")
            .is_some()
    });
    keys(&mut h, Modifiers::NONE, Key::F5);
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    let state = &h.state().run;
    assert_eq!(
        state.status,
        Some(RunStatus::Completed),
        "{:?}",
        state.error
    );
    assert_eq!(
        state.outputs.get("all").map(Value::to_json),
        Some(serde_json::json!(["EDITED", "B"]))
    );
}
