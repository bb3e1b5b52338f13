//! Runs that reuse what is known, driven through the real UI: the approval panel (a pending
//! action's arguments edited in the JSON editor and approved); a run left waiting resumed
//! from the history after a restart, its finished nodes not run again; "Run from here" and
//! pinned outputs from a node's menu.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{ValueMap, validate};
use agentloom_engine::{DurableApprover, Executor, NodeStatus, RunOptions, RunStatus, RunStore};
use egui::accesskit::Role;
use egui::{Key, Modifiers, PointerButton};
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, click_at, graph, harness, paths, title_of, wait_until};

const WRITE: &str = r#"{"format":"agentloom.graph","version":1,"name":"write",
  "settings":{"safe_mode":true},
  "nodes":[
    {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"written by the test","type":"text"}},
    {"id":"write","block":"file.write","position":[250,0],"config":{"path":"note.txt"}},
    {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"path"}}],
  "edges":[{"from":["text","value"],"to":["write","content"]},
           {"from":["write","path"],"to":["out","value"]}]}"#;

/// Runs `doc` headless, recorded in `db`, until it pauses at an approval with nobody to
/// ask (its process then goes away); returns the run id.
fn run_until_waiting(
    doc: &agentloom_core::GraphDoc,
    db: &std::path::Path,
    workspace: &std::path::Path,
) -> String {
    let store = Arc::new(RunStore::open(db).unwrap());
    let registry = Arc::new(Registry::builtin());
    let valid = validate(doc, registry.as_ref()).unwrap();
    let recorder = Arc::new(store.recorder(doc).unwrap());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime.block_on(
        Executor::new(registry)
            .with_workspace(workspace.to_owned())
            .with_approver(Arc::new(DurableApprover::new(store.clone(), None)))
            .run(
                Arc::new(valid),
                ValueMap::new(),
                RunOptions::default(),
                recorder.clone(),
            ),
    );
    recorder.finish().unwrap();
    assert_eq!(report.status, RunStatus::Waiting);
    report.run_id
}

fn press(h: &mut AppHarness, label: &str) {
    h.get_by_role_and_label(Role::Button, label).click();
    h.run_steps(2);
}

/// Replaces the arguments in the approval panel's editor by typing.
fn type_arguments(h: &mut AppHarness, json: &str) {
    h.get_by_role_and_label(Role::MultilineTextInput, "Arguments")
        .focus();
    h.run_steps(1);
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_role_and_label(Role::MultilineTextInput, "Arguments")
        .type_text(json);
    h.run_steps(2);
}

#[test]
fn the_approval_panel_edits_arguments_and_approves() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let target = paths.workspace.clone().unwrap().join("note.txt");
    let mut h = harness(&graph(WRITE), &paths);
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the approval", |h| {
        !h.state().run.approvals.is_empty()
    });
    h.get_by_label_contains("`write` (Write file: write note.txt) waits for approval");
    let shown = h
        .get_by_role_and_label(Role::MultilineTextInput, "Arguments")
        .value()
        .unwrap();
    assert!(
        shown.contains(r#""content": "written by the test""#),
        "{shown}"
    );

    // Broken JSON is refused with a reason, and nothing runs.
    type_arguments(&mut h, "{\"content\": ");
    press(&mut h, "Approve");
    h.get_by_label_contains("the arguments are not valid JSON");
    assert!(!target.exists());

    type_arguments(&mut h, r#"{"content": "edited in the app"}"#);
    press(&mut h, "Approve");
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    assert_eq!(
        h.state().run.status,
        Some(RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "edited in the app"
    );
}

#[test]
fn a_waiting_run_resumes_from_the_history_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let workspace = paths.workspace.clone().unwrap();
    let db = paths.run_log.clone().unwrap();

    // A headless run pauses at the approval and its process goes away.
    let doc = graph(WRITE);
    let run_id = run_until_waiting(&doc, &db, &workspace);

    let mut h = harness(&doc, &paths);
    h.get_by_label_contains("waiting · just now").click();
    h.run_steps(3);
    assert_eq!(h.state().run.run_id.as_deref(), Some(run_id.as_str()));
    h.get_by_label_contains("`write` (Write file: write note.txt) waits for approval");
    type_arguments(&mut h, r#"{"content": "approved after a restart"}"#);
    let resumed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    press(&mut h, "Approve");
    wait_until(&mut h, "the resumed run", |h| !h.state().run.is_running());
    let run = &h.state().run;
    assert_eq!(run.status, Some(RunStatus::Completed), "{:?}", run.error);
    assert_eq!(run.run_id.as_deref(), Some(run_id.as_str()));
    // The same run: the node that finished before the pause keeps its recorded attempt,
    // shown done, not reused.
    let text = run.node("text").unwrap();
    assert_eq!((text.status, text.attempts), (NodeStatus::Done, 1));
    assert!(!run.reused.contains("text"), "{:?}", run.reused);
    assert_eq!(run.node("write").map(|n| n.status), Some(NodeStatus::Done));
    assert_eq!(
        std::fs::read_to_string(workspace.join("note.txt")).unwrap(),
        "approved after a restart"
    );
    // It did not run again: the run log keeps its one finish, from before the approval.
    let detail = RunStore::open(&db)
        .unwrap()
        .get_run(&run_id)
        .unwrap()
        .unwrap();
    let text = detail.node("text").unwrap();
    assert_eq!((text.status, text.attempts), (NodeStatus::Done, 1));
    assert!(
        u128::from(text.finished_at_ms.unwrap()) < resumed_at,
        "the finished node ran again: {text:?}"
    );
    assert!(u128::from(detail.node("write").unwrap().finished_at_ms.unwrap()) >= resumed_at);
    // The canvas marks no node reused: nothing was taken from elsewhere.
    h.run_steps(2);
    assert_eq!(h.query_all_by_label("reused").count(), 0);
}

/// A run started in the app and left waiting (the app closed before anyone decided) is
/// resumed by `agentloom approve` typed in another folder, in the app's workspace.
#[test]
fn approving_an_app_started_run_from_the_command_line_resumes_it_in_the_apps_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let workspace = paths.workspace.clone().unwrap();
    let db = paths.run_log.clone().unwrap();
    let run_id = {
        let mut h = harness(&graph(WRITE), &paths);
        press(&mut h, "▶ Run");
        wait_until(&mut h, "the approval", |h| {
            !h.state().run.approvals.is_empty()
        });
        let store = RunStore::open(&db).unwrap();
        let run = store.list_runs(1).unwrap().remove(0);
        assert_eq!(
            store.run_workspace(&run.id).unwrap(),
            Some(std::fs::canonicalize(&workspace).unwrap())
        );
        run.id
    };
    // The app ran in this test's process, which lives on: stand in for the app's process
    // having exited (a run whose recorder is gone and waits for a person is `waiting`).
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE runs SET owner = 'proc:exited', heartbeat_at_ms = 0 WHERE id = ?1",
            [&run_id],
        )
        .unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let approved = std::process::Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .current_dir(&elsewhere)
        .env_remove("AGENTLOOM_LOG")
        .args(["approve", &run_id, "--db"])
        .arg(&db)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    support::assert_exit_ok(&approved);
    assert_eq!(
        std::fs::read_to_string(workspace.join("note.txt")).unwrap(),
        "written by the test"
    );
    assert!(!elsewhere.join("note.txt").exists());
}

const SAVE_AND_DESCRIBE: &str = r#"{"format":"agentloom.graph","version":1,"name":"save",
  "nodes":[
    {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"kept","type":"text"}},
    {"id":"write","block":"file.write","label":"Save","position":[250,0],"config":{"path":"note.txt"}},
    {"id":"describe","block":"text.template","label":"Describe","position":[500,0],"config":{"template":"saved to {{ value }}"}},
    {"id":"out","block":"graph.output","position":[750,0],"config":{"name":"said"}}],
  "edges":[{"from":["text","value"],"to":["write","content"]},
           {"from":["write","path"],"to":["describe","value"]},
           {"from":["describe","text"],"to":["out","value"]}]}"#;

/// Right-clicks the node titled `title` and picks `item` from its menu.
fn node_menu(h: &mut AppHarness, title: &str, item: &str) {
    let at = title_of(h, title);
    click_at(h, at, PointerButton::Secondary, Modifiers::NONE);
    h.get_by_role_and_label(Role::Button, item).click();
    h.run_steps(3);
}

#[test]
fn run_from_here_and_pinned_outputs_do_not_run_the_nodes_they_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let note = paths.workspace.clone().unwrap().join("note.txt");
    let mut h = harness(&graph(SAVE_AND_DESCRIBE), &paths);
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the first run", |h| !h.state().run.is_running());
    assert_eq!(
        h.state().run.status,
        Some(RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    let first = h.state().run.run_id.clone().unwrap();
    std::fs::remove_file(&note).unwrap();

    node_menu(&mut h, "Describe", "Run from here");
    wait_until(&mut h, "the run from here", |h| !h.state().run.is_running());
    let run = &h.state().run;
    assert_eq!(run.status, Some(RunStatus::Completed), "{:?}", run.error);
    assert_ne!(run.run_id.as_deref(), Some(first.as_str()));
    assert!(!note.exists(), "`write` ran again");
    assert!(run.reused.contains("write") && run.reused.contains("text"));
    assert!(!run.reused.contains("describe"));
    assert_eq!(run.node("describe").unwrap().attempts, 1);
    let said = run.outputs["said"].to_text();
    assert!(
        said.starts_with("saved to ") && said.ends_with("note.txt"),
        "{said}"
    );
    h.run_steps(2);
    assert_eq!(
        h.query_all_by_label("reused").count(),
        2,
        "reused nodes are marked"
    );

    // Pin `write`'s outputs: saved in the graph, and a full run does not write again.
    node_menu(&mut h, "Save", "Pin outputs");
    let doc = h.state().document.to_doc();
    let pinned = doc.node("write").unwrap().pinned.clone().unwrap();
    assert!(pinned.contains_key("path"), "{pinned:?}");
    assert!(doc.to_json_string().contains("\"pinned\""));
    h.get_by_label("pinned");
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the pinned run", |h| !h.state().run.is_running());
    assert_eq!(
        h.state().run.status,
        Some(RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    assert!(!note.exists(), "a pinned node ran");
    assert_eq!(h.state().run.outputs["said"].to_text(), said);

    node_menu(&mut h, "Save", "Unpin outputs");
    assert!(
        h.state()
            .document
            .to_doc()
            .node("write")
            .unwrap()
            .pinned
            .is_none()
    );
}

const PINNED: &str = r#"{"format":"agentloom.graph","version":1,"name":"pinned",
  "nodes":[
    {"id":"word","block":"data.constant","position":[0,0],"config":{"value":"live","type":"text"},"pinned":{"value":"old"}},
    {"id":"say","block":"text.template","position":[250,0],"config":{"template":"said {{ w }}"}},
    {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"said"}}],
  "edges":[{"from":["word","value"],"to":["say","w"]},
           {"from":["say","text"],"to":["out","value"]}]}"#;

/// Replaces the text of the inspector's pinned outputs editor and presses Apply.
fn apply_pinned(h: &mut AppHarness, json: &str) {
    // The inspector's Configure tab scrolls: its last field, Apply under it, into view.
    h.get_by_role_and_label(Role::Button, "Apply pinned outputs")
        .scroll_to_me();
    h.run_steps(2);
    h.get_by_role_and_label(Role::MultilineTextInput, "Pinned outputs")
        .focus();
    h.run_steps(1);
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_role_and_label(Role::MultilineTextInput, "Pinned outputs")
        .type_text(json);
    h.run_steps(2);
    press(h, "Apply pinned outputs");
}

fn pinned_word(h: &AppHarness) -> Option<ValueMap> {
    h.state()
        .document
        .to_doc()
        .node("word")
        .unwrap()
        .pinned
        .clone()
}

#[test]
fn pinned_outputs_are_edited_as_json_in_the_inspector_refusing_bad_json_and_undoable() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&graph(PINNED), &paths(&dir));
    let old = pinned_word(&h);
    h.state_mut()
        .send(agentloom::app::Command::InspectById("word".to_owned()));
    h.run_steps(3);

    apply_pinned(&mut h, "{\"value\": ");
    h.get_by_label_contains("Not saved: not valid JSON");
    assert_eq!(pinned_word(&h), old);
    apply_pinned(&mut h, "{\"nope\": 1}");
    h.get_by_label_contains("this node has no output `nope`; it has `value`");
    assert_eq!(pinned_word(&h), old);
    assert!(!h.state().document.can_undo());

    apply_pinned(&mut h, "{\"value\": \"edited\"}");
    assert!(h.query_by_label_contains("Not saved").is_none());
    assert_eq!(
        pinned_word(&h).unwrap()["value"],
        agentloom_core::Value::from("edited")
    );
    // Runs use the edited value instead of running the node.
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    assert_eq!(h.state().run.outputs["said"].to_text(), "said edited");

    h.key_press_modifiers(Modifiers::COMMAND, Key::Z);
    h.run_steps(2);
    assert_eq!(pinned_word(&h), old);
}

/// A run of a file its user had not trusted, left waiting, opened from the history while an
/// untitled graph is open: the file's MCP command is not started, the trust banner shows,
/// and the resumed run gets no credential.
#[test]
fn an_untrusted_run_opened_from_the_history_stays_offline_and_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let workspace = paths.workspace.clone().unwrap();
    let db = paths.run_log.clone().unwrap();
    let marker = dir.path().join("marker");
    let file = dir.path().join("shared.agentloom.json");
    let shared = serde_json::json!({
        "format": "agentloom.graph", "version": 1, "name": "shared",
        "settings": {"safe_mode": true},
        "mcp_servers": {"files": {"command": "sh",
                                  "args": ["-c", format!("touch {}", marker.display())]}},
        "nodes": [{"id": "post", "block": "http.request", "position": [0, 0],
                   "config": {"method": "POST", "url": "http://127.0.0.1:9/",
                              "credential": "api", "allow_private_network": true}}],
        "edges": []
    });
    std::fs::write(&file, serde_json::to_string_pretty(&shared).unwrap()).unwrap();
    let doc = graph(&shared.to_string());
    // Run untrusted (offline), it waits for the approval of the POST.
    let run_id = run_until_waiting(&doc, &db, &workspace);
    RunStore::open(&db)
        .unwrap()
        .record_untrusted(&run_id, &file.display().to_string())
        .unwrap();

    let mut h = harness(&support::example(), &paths);
    // A run of another graph: listed with every graph's runs.
    h.get_by_role_and_label(Role::CheckBox, "All graphs")
        .click();
    h.run_steps(2);
    h.get_by_label_contains("shared\nwaiting").click();
    h.run_steps(3);
    assert_eq!(h.state().run.run_id.as_deref(), Some(run_id.as_str()));
    h.get_by_label("Trust and connect");
    std::thread::sleep(std::time::Duration::from_millis(500));
    h.run_steps(2);
    assert!(!marker.exists(), "the untrusted file's MCP command ran");
    press(&mut h, "Approve");
    wait_until(&mut h, "the resumed run", |h| !h.state().run.is_running());
    let error = h
        .state()
        .run
        .node("post")
        .and_then(|n| n.error.clone())
        .unwrap_or_default();
    assert!(
        error.contains(&format!("graph file {} is not trusted", file.display())),
        "{error}"
    );
    assert!(!marker.exists(), "the untrusted file's MCP command ran");
}
