//! The life of a session as a person sees it: unsaved work autosaved and recovered after a
//! crash, the prompt before closing, runs with inputs, stop, safe-mode approvals and
//! streamed output, driven through the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentloom::app::{App, Command};
use agentloom_engine::{NodeStatus, RunStatus};
use egui::accesskit::Role;
use egui::{Key, Modifiers, ViewportCommand, ViewportId};
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, example, graph, harness, harness_for, keys, paths, wait_until};

const AUTOSAVE: Duration = Duration::from_millis(50);

/// Clicks a button through the pointer, then lets the app carry it out.
fn press(h: &mut AppHarness, label: &str) {
    h.get_by_role_and_label(Role::Button, label).click();
    h.run_steps(2);
}

fn autosave_files(data: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.to_string_lossy();
                    name.contains("autosave") && name.ends_with(".agentloom.json")
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn unsaved_work_is_autosaved_and_recovered_after_a_crash_and_a_save_reopens_next_time() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let data = paths.data_dir.clone().unwrap();

    // First launch: the example graph.
    let mut h = harness_for(App::startup(None, &paths).with_autosave_delay(AUTOSAVE));
    assert_eq!(h.state().document.to_doc(), {
        let mut d = example();
        d.normalize();
        d
    });
    assert!(!h.state().document.dirty);
    std::thread::sleep(AUTOSAVE * 2);
    h.run_steps(2);
    assert!(autosave_files(&data).is_empty(), "nothing to save yet");

    // An edit, then the autosave delay passes.
    press(&mut h, "Delay");
    assert!(h.state().document.dirty);
    let edited = h.state().document.to_doc();
    wait_until(&mut h, "the autosave", |_| {
        !autosave_files(&data).is_empty()
    });
    // The app dies without saving.
    drop(h);

    let mut h = harness_for(App::startup(None, &paths).with_autosave_delay(AUTOSAVE));
    assert_eq!(h.state().document.to_doc(), edited, "the edit came back");
    assert!(h.state().document.dirty, "recovered work is still unsaved");
    h.get_by_label_contains("Recovered unsaved changes");
    h.get_by_label_contains("not saved •");

    // Save As (the file dialog cannot be driven: the command it sends is used instead).
    let file = dir.path().join("mine.agentloom.json");
    h.state_mut().send(Command::SaveAs(file.clone()));
    h.run_steps(2);
    assert!(!h.state().document.dirty);
    assert!(
        autosave_files(&data).is_empty(),
        "a save clears the autosave"
    );
    assert!(h.query_all_by_label_contains("mine.agentloom.json").count() >= 1);
    // The file holds the edit without the values its blocks declare as defaults.
    let saved =
        agentloom_core::without_declared_defaults(&edited, &agentloom_blocks::Registry::builtin());
    assert_eq!(h.state().document.to_doc(), saved);
    drop(h);

    // Next launch reopens the saved graph, clean, with no recovery notice.
    let h = harness_for(App::startup(None, &paths).with_autosave_delay(AUTOSAVE));
    assert_eq!(h.state().document.path.as_deref(), Some(file.as_path()));
    assert_eq!(h.state().document.to_doc(), saved);
    assert!(!h.state().document.dirty);
    assert!(h.query_by_label_contains("Recovered").is_none());
}

#[test]
fn undoing_back_to_the_saved_graph_drops_the_autosave_so_a_crash_recovers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let data = paths.data_dir.clone().unwrap();
    let file = dir.path().join("kept.agentloom.json");
    agentloom::app::save_graph(&example(), &file).unwrap();

    let mut h = harness_for(App::startup(Some(file.clone()), &paths).with_autosave_delay(AUTOSAVE));
    press(&mut h, "Delay");
    wait_until(&mut h, "the autosave", |_| {
        !autosave_files(&data).is_empty()
    });
    // Undo to what the file holds: the "•" goes, and so does the autosave.
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert!(!h.state().document.dirty);
    std::thread::sleep(AUTOSAVE * 2);
    h.run_steps(3);
    assert!(
        autosave_files(&data).is_empty(),
        "the undone change is still autosaved: {:?}",
        autosave_files(&data)
    );
    // The app dies; the next start has nothing to recover.
    drop(h);
    let h = harness_for(App::startup(None, &paths).with_autosave_delay(AUTOSAVE));
    assert!(h.query_by_label_contains("Recovered").is_none());
    assert!(h.state().document.to_doc().node("delay").is_none());
    assert!(!h.state().document.dirty);
}

#[test]
fn two_windows_autosave_apart_and_each_crashed_window_is_recovered_once() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let data = paths.data_dir.clone().unwrap();

    // Two windows, each with its own edit.
    let mut first = harness_for(App::new(&example(), None, &paths).with_autosave_delay(AUTOSAVE));
    let mut second =
        harness_for(App::new(&graph(NAMED), None, &paths).with_autosave_delay(AUTOSAVE));
    press(&mut first, "Delay");
    press(&mut second, "Delay");
    let first_edit = first.state().document.to_doc();
    let second_edit = second.state().document.to_doc();
    wait_until(&mut first, "the first autosave", |_| {
        !autosave_files(&data).is_empty()
    });
    wait_until(&mut second, "the second autosave", |_| {
        autosave_files(&data).len() == 2
    });
    // Both die without saving.
    drop(first);
    drop(second);

    // Each start recovers one of them, the newest first; one left open holds its own.
    let one = harness_for(App::startup(None, &paths).with_autosave_delay(AUTOSAVE));
    let other = harness_for(App::startup(None, &paths).with_autosave_delay(AUTOSAVE));
    let mut recovered = vec![
        one.state().document.to_doc(),
        other.state().document.to_doc(),
    ];
    recovered.sort_by(|a, b| a.name.cmp(&b.name));
    let mut edits = vec![first_edit, second_edit];
    edits.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(recovered, edits, "each window's work came back once");
    let third = harness_for(App::startup(None, &paths).with_autosave_delay(AUTOSAVE));
    assert!(
        third.query_by_label_contains("Recovered").is_none(),
        "the open windows' autosaves are theirs"
    );
}

fn request_close(h: &mut AppHarness) {
    h.input_mut()
        .viewports
        .entry(ViewportId::ROOT)
        .or_default()
        .events
        .push(egui::ViewportEvent::Close);
    h.step();
}

fn sent(h: &AppHarness, command: &ViewportCommand) -> bool {
    h.output()
        .viewport_output
        .get(&ViewportId::ROOT)
        .is_some_and(|v| v.commands.contains(command))
}

#[test]
fn closing_with_unsaved_changes_asks_save_discard_or_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let data = paths.data_dir.clone().unwrap();

    // Clean: the window just closes.
    let mut h = harness_for(App::new(&example(), None, &paths).with_autosave_delay(AUTOSAVE));
    request_close(&mut h);
    assert!(!sent(&h, &ViewportCommand::CancelClose));
    h.run_steps(2);
    assert!(h.query_by_label("Save changes?").is_none());

    // Unsaved: the close is held and the prompt asks.
    press(&mut h, "Delay");
    wait_until(&mut h, "the autosave", |_| {
        !autosave_files(&data).is_empty()
    });
    request_close(&mut h);
    assert!(sent(&h, &ViewportCommand::CancelClose), "the window stays");
    h.run_steps(2);
    h.get_by_label("Save changes?");
    h.get_by_role_and_label(Role::Button, "Save");
    h.get_by_role_and_label(Role::Button, "Don't save");

    // Cancel: back to work, nothing lost.
    // (One step runs a frame for each queued pointer event: the click is in the last.)
    h.get_by_role_and_label(Role::Button, "Cancel").click();
    h.step();
    assert!(!sent(&h, &ViewportCommand::Close));
    h.run_steps(2);
    assert!(h.query_by_label("Save changes?").is_none());
    assert!(h.state().document.dirty);

    // Escape also keeps the window.
    request_close(&mut h);
    h.run_steps(2);
    keys(&mut h, Modifiers::NONE, Key::Escape);
    assert!(!h.state().close_prompt_open());

    // Ctrl+Q asks the window to close, the same request as its close button.
    // (The key goes down alone: a step runs one frame per queued event, and the request
    // is in the frame of the key press.)
    h.event(egui::Event::Key {
        key: Key::Q,
        physical_key: None,
        pressed: true,
        repeat: false,
        modifiers: Modifiers::COMMAND,
    });
    h.step();
    assert!(
        sent(&h, &ViewportCommand::Close),
        "Ctrl+Q sent no close request"
    );

    // Don't save: the window closes and the autosave is dropped (a deliberate discard).
    request_close(&mut h);
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Don't save").click();
    h.step();
    assert!(sent(&h, &ViewportCommand::Close));
    assert!(autosave_files(&data).is_empty());
    // The close that follows is not held again.
    request_close(&mut h);
    assert!(!sent(&h, &ViewportCommand::CancelClose));
}

#[test]
fn save_in_the_close_prompt_writes_the_file_then_closes() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let file = dir.path().join("kept.agentloom.json");
    let app = App::new(&example(), Some(file.clone()), &paths);
    let mut h = harness_for(app);
    press(&mut h, "Delay");
    request_close(&mut h);
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Save").click();
    h.step();
    assert!(sent(&h, &ViewportCommand::Close));
    let saved = agentloom::app::load_graph(&file).unwrap();
    assert!(saved.node("delay").is_some(), "the edit was saved");
}

#[test]
fn closing_an_untitled_graph_with_save_asks_for_a_path_then_closes_and_cancel_keeps_it_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = App::new(&example(), None, &paths(&dir));
    app.set_native_file_dialogs(false);
    let mut h = harness_for(app);
    press(&mut h, "Delay");

    // Save, then Cancel where the path is asked: the window stays, the changes too.
    request_close(&mut h);
    h.run_steps(2);
    press(&mut h, "Save");
    h.run_steps(2);
    h.get_by_label("Save graph");
    h.get_by_role_and_label(Role::Button, "Cancel").click();
    h.step();
    assert!(!sent(&h, &ViewportCommand::Close));
    h.run_steps(2);
    assert!(h.query_by_label("Save graph").is_none());
    assert!(h.state().document.dirty);

    // Save, a path: saved there, then the window closes as asked.
    request_close(&mut h);
    h.run_steps(2);
    press(&mut h, "Save");
    let file = dir.path().join("closing.agentloom.json");
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_role_and_label(Role::TextInput, "Path")
        .type_text(file.to_str().unwrap());
    h.run_steps(1);
    // Enter goes down alone: the close request is in the frame of the key press.
    h.event(egui::Event::Key {
        key: Key::Enter,
        physical_key: None,
        pressed: true,
        repeat: false,
        modifiers: Modifiers::NONE,
    });
    h.step();
    assert!(sent(&h, &ViewportCommand::Close), "the window closes");
    let saved = agentloom::app::load_graph(&file).unwrap();
    assert!(saved.node("delay").is_some(), "the edit was saved");
    assert!(!h.state().document.dirty);
}

#[test]
fn ctrl_s_saves_to_the_current_file_and_clears_the_unsaved_mark() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let file = dir.path().join("current.agentloom.json");
    let mut h =
        harness_for(App::new(&example(), Some(file.clone()), &paths).with_autosave_delay(AUTOSAVE));
    press(&mut h, "Delay");
    h.get_by_label_contains("current.agentloom.json •");
    keys(&mut h, Modifiers::COMMAND, Key::S);
    assert!(!h.state().document.dirty);
    assert!(
        h.query_by_label_contains("current.agentloom.json •")
            .is_none()
    );
    let saved = agentloom::app::load_graph(&file).unwrap();
    assert_eq!(saved, h.state().document.to_doc());
    assert!(saved.node("delay").is_some());
}

const NAMED: &str = r#"{"format":"agentloom.graph","version":1,"name":"named","nodes":[
    {"id":"who","block":"graph.input","position":[0,0],"config":{"name":"who","type":"text","description":"Whom to greet, by name."}},
    {"id":"times","block":"graph.input","position":[0,150],"config":{"name":"times","type":"integer"}},
    {"id":"say","block":"text.template","position":[250,0],"config":{"template":"Hi {{ who }} x{{ times }}"}},
    {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"said"}}],
  "edges":[{"from":["who","value"],"to":["say","who"]},
           {"from":["times","value"],"to":["say","times"]},
           {"from":["say","text"],"to":["out","value"]}]}"#;

#[test]
fn run_asks_for_the_graph_inputs_then_shows_every_node_state_and_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&graph(NAMED), &paths(&dir));
    press(&mut h, "▶ Run");
    h.get_by_label("Run inputs");
    // The window is placed once its size is known, a frame after it appears.
    h.run_steps(3);
    let who = h.get_by_role_and_label(Role::TextInput, "who (text)");
    who.click();
    who.type_text("Ada");
    h.run_steps(2);
    // A bad number is refused with the input's name, and the form stays.
    let times = h.get_by_role_and_label(Role::TextInput, "times (integer)");
    times.click();
    times.type_text("many");
    h.run_steps(2);
    press(&mut h, "Start run");
    assert!(h.state().run.status.is_none(), "not started");
    h.get_by_label_contains("Input `times`");
    h.get_by_label("Run inputs");
    let times = h.get_by_role_and_label(Role::TextInput, "times (integer)");
    times.click();
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    times.type_text("3");
    h.run_steps(2);
    press(&mut h, "Start run");
    assert!(h.query_by_label("Run inputs").is_none(), "the form closed");
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());

    let run = &h.state().run;
    assert_eq!(run.status, Some(RunStatus::Completed), "{:?}", run.error);
    for id in ["who", "times", "say", "out"] {
        assert_eq!(
            run.node(id).map(|n| n.status),
            Some(NodeStatus::Done),
            "{id}"
        );
    }
    assert_eq!(h.get_all_by_label("done").count(), 4);
    h.get_by_label("Run completed");
    // On the node (short) and in the run panel.
    assert!(h.query_all_by_label_contains("Hi Ada x3").count() >= 2);
}

#[test]
fn the_inputs_form_works_from_the_keyboard_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&graph(NAMED), &paths(&dir));
    // Ctrl+Enter opens the form with the first input focused; Escape closes it unrun.
    h.key_press_modifiers(Modifiers::COMMAND, Key::Enter);
    h.run_steps(3);
    h.get_by_label("Run inputs");
    h.key_press(Key::Escape);
    h.run_steps(2);
    assert!(
        h.query_by_label("Run inputs").is_none(),
        "Escape closes the form"
    );
    assert!(h.state().run.status.is_none(), "and starts nothing");

    h.key_press_modifiers(Modifiers::COMMAND, Key::Enter);
    h.run_steps(3);
    let times = h.get_by_role_and_label(Role::TextInput, "times (integer)");
    assert!(times.is_focused(), "the first input takes the keyboard");
    // The graph's description of an input is shown with its field.
    h.get_by_label("Whom to greet, by name.");
    times.type_text("2");
    h.run_steps(1);
    h.key_press(Key::Tab);
    h.run_steps(1);
    let who = h.get_by_role_and_label(Role::TextInput, "who (text)");
    assert!(who.is_focused(), "Tab moves to the next input");
    who.type_text("Grace");
    h.run_steps(1);
    h.key_press(Key::Enter);
    h.run_steps(2);
    assert!(
        h.query_by_label("Run inputs").is_none(),
        "Enter starts the run"
    );
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    let run = &h.state().run;
    assert_eq!(run.status, Some(RunStatus::Completed), "{:?}", run.error);
    assert!(h.query_all_by_label_contains("Hi Grace x2").count() >= 2);
}

#[test]
fn stop_cancels_a_long_run() {
    let dir = tempfile::tempdir().unwrap();
    let doc = graph(
        r#"{"format":"agentloom.graph","version":1,"name":"slow","nodes":[
        {"id":"start","block":"data.constant","position":[0,0],"config":{"value":"x","type":"text"}},
        {"id":"wait","block":"control.delay","position":[250,0],"config":{"ms":600000}},
        {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"out"}}],
      "edges":[{"from":["start","value"],"to":["wait","value"]},
               {"from":["wait","value"],"to":["out","value"]}]}"#,
    );
    let mut h = harness(&doc, &paths(&dir));
    // No inputs: Ctrl+Enter starts at once.
    keys(&mut h, Modifiers::COMMAND, Key::Enter);
    wait_until(&mut h, "the delay to start", |h| {
        h.state().run.node("wait").map(|n| n.status) == Some(NodeStatus::Running)
    });
    h.get_by_label("running");
    let started = Instant::now();
    press(&mut h, "■ Stop");
    wait_until(&mut h, "the run to stop", |h| !h.state().run.is_running());
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(h.state().run.status, Some(RunStatus::Cancelled));
    h.get_by_label("Run cancelled");
    assert_ne!(
        h.state().run.node("wait").map(|n| n.status),
        Some(NodeStatus::Done)
    );
    // The node the stop interrupted says so, instead of running forever.
    assert!(h.state().run.node("wait").unwrap().cancelled);
    assert!(h.query_all_by_label("cancelled").count() >= 1);
    assert!(h.query_by_label("running").is_none());

    // Opening another graph while a run goes stops that run too (it is not left running
    // unseen): the run log records it as cancelled.
    keys(&mut h, Modifiers::COMMAND, Key::Enter);
    wait_until(&mut h, "the second run to start", |h| {
        h.state().run.node("wait").map(|n| n.status) == Some(NodeStatus::Running)
    });
    h.state_mut().send(Command::New);
    h.run_steps(2);
    assert!(!h.state().run.is_running());
    // Listed with every graph's runs: the graph shown is the new one.
    h.get_by_role_and_label(Role::CheckBox, "All graphs")
        .click();
    h.run_steps(2);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // The history's Refresh button.
        h.get_by_role_and_label(Role::Button, "Refresh").click();
        h.run_steps(2);
        let history = h.state().history();
        if history.len() == 2 && history[0].status == RunStatus::Cancelled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second run was not recorded as cancelled: {history:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const WRITE: &str = r#"{"format":"agentloom.graph","version":1,"name":"write","nodes":[
    {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"written by the test","type":"text"}},
    {"id":"write","block":"file.write","position":[250,0],"config":{"path":"out/note.txt"}},
    {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"path"}}],
  "edges":[{"from":["text","value"],"to":["write","content"]},
           {"from":["write","path"],"to":["out","value"]}]}"#;

#[test]
fn safe_mode_asks_before_writing_a_file_approve_writes_deny_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let target = paths.workspace.clone().unwrap().join("out/note.txt");
    let mut h = harness(&graph(WRITE), &paths);

    // Safe mode is a checkbox in the Run menu, saved with the graph and undoable.
    press(&mut h, "Run");
    h.get_by_role_and_label(Role::CheckBox, "Safe mode").click();
    h.run_steps(2);
    assert!(h.state().document.to_doc().settings.safe_mode);
    assert!(h.state().document.dirty);
    keys(&mut h, Modifiers::NONE, Key::Escape);

    press(&mut h, "▶ Run");
    wait_until(&mut h, "the approval", |h| {
        !h.state().run.approvals.is_empty()
    });
    h.get_by_label("waiting for approval");
    h.get_by_label_contains("`write` (Write file: write out/note.txt) waits for approval");
    assert!(!target.exists(), "nothing written before approval");
    press(&mut h, "Approve");
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    assert_eq!(
        h.state().run.status,
        Some(RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    assert_eq!(
        h.state().run.node("write").map(|n| n.status),
        Some(NodeStatus::Done)
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written by the test"
    );

    std::fs::remove_file(&target).unwrap();
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the approval", |h| {
        !h.state().run.approvals.is_empty()
    });
    press(&mut h, "Reject");
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    let run = &h.state().run;
    assert_eq!(run.status, Some(RunStatus::Failed));
    let write = run.node("write").unwrap();
    assert_eq!(write.status, NodeStatus::Failed);
    assert!(
        write
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("not approved"),
        "{write:?}"
    );
    // The failure ends the run (the engine's rule for a failed node without an `error`
    // wire): what depends on it never starts.
    assert_eq!(run.node("out").map(|n| n.status), Some(NodeStatus::Pending));
    assert!(!target.exists(), "a denied write writes nothing");
    assert!(h.query_all_by_label_contains("was not approved").count() >= 1);

    // Safe mode off again: runs without asking.
    press(&mut h, "Run");
    h.get_by_role_and_label(Role::CheckBox, "Safe mode").click();
    h.run_steps(2);
    keys(&mut h, Modifiers::NONE, Key::Escape);
    assert!(!h.state().document.to_doc().settings.safe_mode);
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    assert_eq!(h.state().run.status, Some(RunStatus::Completed));
    assert!(target.exists());
}

#[test]
fn streamed_llm_output_appears_inside_the_node_while_it_runs() {
    // fakellm streams one word every 10 ms: 400 words take about 4 s.
    let story: Vec<String> = (1..=400).map(|i| format!("w{i}")).collect();
    let story = story.join(" ");
    let rules = format!(
        "rules:\n  - name: story\n    when:\n      messages_contain: \"Tell a long story\"\n    respond:\n      content: \"{story}\"\n"
    );
    let Some(fake) = agentloom_tests::FakeLlm::start_with_rules(&rules) else {
        return;
    };
    let doc = graph(&format!(
        r#"{{"format":"agentloom.graph","version":1,"name":"stream","nodes":[
        {{"id":"chat","block":"llm.chat","position":[0,0],"config":{{"provider":"openai","base_url":"http://127.0.0.1:{}/v1","model":"test-model","prompt":"Tell a long story","stream":true}}}},
        {{"id":"out","block":"graph.output","position":[350,0],"config":{{"name":"story"}}}}],
      "edges":[{{"from":["chat","text"],"to":["out","value"]}}]}}"#,
        fake.port()
    ));
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&doc, &paths(&dir));
    press(&mut h, "▶ Run");
    // Partial text shows inside the node (`text … <latest words>`) while the run goes on.
    wait_until(&mut h, "streamed words on the node", |h| {
        h.query_all_by_label_contains("text … ").count() > 0
    });
    assert!(h.state().run.is_running(), "seen before the end");
    assert_eq!(
        h.state().run.node("chat").map(|n| n.status),
        Some(NodeStatus::Running)
    );
    let shown = |h: &AppHarness| {
        h.query_by_label_contains("text … ")
            .and_then(|n| n.value())
            .unwrap_or_default()
    };
    let first = shown(&h);
    wait_until(&mut h, "more words on the node", |h| {
        shown(h) != first || !h.state().run.is_running()
    });
    assert!(
        h.state().run.is_running(),
        "the node showed the words as they came: {first}"
    );
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    assert_eq!(
        h.state().run.status,
        Some(RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    assert!(
        h.query_all_by_label_contains("text … ").count() == 0,
        "streaming over"
    );
    // The finished answer replaces the stream on the node (short) and in the run panel.
    assert_eq!(
        h.state().run.outputs.get("story"),
        Some(&agentloom_core::Value::text(story))
    );
    h.get_by_label_contains("text = w1 w2 w3");
    h.get_by_label("Output `story`");
}

#[test]
fn file_blocks_of_a_saved_graph_work_in_the_graph_folder() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let file = project.join("note.agentloom.json");
    let doc = graph(
        r#"{"format":"agentloom.graph","version":1,"name":"note","nodes":[
        {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"kept beside the graph","type":"text"}},
        {"id":"write","block":"file.write","position":[250,0],"config":{"path":"note.txt","mode":"text"}}],
      "edges":[{"from":["text","value"],"to":["write","content"]}]}"#,
    );
    agentloom::app::save_graph(&doc, &file).unwrap();
    let mut paths = paths(&dir);
    paths.workspace = None;
    // The user's own file, trusted (untrusted, its side effect would wait for approval).
    let store = agentloom::trust::TrustStore::in_dir(paths.data_dir.as_ref().unwrap());
    store
        .trust(agentloom::trust::fingerprint(&file).unwrap())
        .unwrap();
    let mut h = harness_for(App::new(&doc, Some(file), &paths));

    // The Run menu says where file blocks work.
    press(&mut h, "Run");
    h.get_by_label(&format!("File blocks work in {}", project.display()));
    keys(&mut h, Modifiers::NONE, Key::Escape);

    press(&mut h, "▶ Run");
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    assert_eq!(h.state().run.status, Some(RunStatus::Completed));
    assert_eq!(
        std::fs::read_to_string(project.join("note.txt")).unwrap(),
        "kept beside the graph"
    );
    assert!(!dir.path().join("note.txt").exists());
}

#[test]
fn the_history_names_the_worker_of_a_run_recorded_from_a_queue() {
    let dir = tempfile::tempdir().unwrap();
    let constant = r#"{"format":"agentloom.graph","version":1,"name":"constant","nodes":[
        {"id":"c","block":"data.constant","config":{"value":"hi"}},
        {"id":"out","block":"graph.output","config":{"name":"out"}}],
        "edges":[{"from":["c","value"],"to":["out","value"]}]}"#;
    let mut h = harness(&graph(constant), &paths(&dir));
    h.state_mut().send(Command::Run);
    h.run_steps(2);
    wait_until(&mut h, "the run", |h| {
        !h.state().run.is_running() && !h.state().history().is_empty()
    });
    let run_id = h.state().history()[0].id.clone();
    assert!(h.query_by_label_contains("on worker-7").is_none());
    // What `agentloom submit --wait` records for a run a worker ran.
    agentloom_engine::RunStore::open(&dir.path().join("runs.sqlite3"))
        .unwrap()
        .record_worker(&run_id, "worker-7")
        .unwrap();
    h.get_by_role_and_label(Role::Button, "Refresh").click();
    h.run_steps(2);
    assert_eq!(h.state().history()[0].worker.as_deref(), Some("worker-7"));
    h.get_by_label_contains("· on worker-7");
}

#[test]
fn a_new_graph_saved_for_the_first_time_is_named_after_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&example(), None, &paths(&dir)));
    h.state_mut().send(Command::New);
    h.run_steps(3);
    assert_eq!(h.state().document.name, "Untitled");
    press(&mut h, "Delay");
    let file = dir.path().join("My flow.agentloom.json");
    h.state_mut().send(Command::SaveAs(file.clone()));
    h.run_steps(3);
    assert_eq!(h.state().document.name, "My flow");
    assert!(!h.state().document.dirty);
    let saved = agentloom::app::load_graph(&file).unwrap();
    assert_eq!(saved.name, "My flow");
    // Named already: a later Save As keeps its name.
    let other = dir.path().join("copy.json");
    h.state_mut().send(Command::SaveAs(other.clone()));
    h.run_steps(3);
    assert_eq!(agentloom::app::load_graph(&other).unwrap().name, "My flow");
}
