//! Shared helpers of the canvas tests: an app in a harness, and pointer gestures on the
//! canvas. Widgets inside the canvas are reported by the accessibility tree in graph
//! coordinates; `App::graph_to_screen` places them on screen.
#![allow(dead_code, reason = "each test file uses a part")]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloom::app::{App, AppPaths, EXAMPLE_GRAPH};
use agentloom_core::GraphDoc;
use egui::{Modifiers, PointerButton, Pos2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;

pub type AppHarness = Harness<'static, App>;

/// Paths inside `dir`: a run log, a data directory (autosave) and the file workspace.
pub fn paths(dir: &tempfile::TempDir) -> AppPaths {
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    AppPaths {
        run_log: Some(dir.path().join("runs.sqlite3")),
        data_dir: Some(dir.path().join("data")),
        workspace: Some(dir.path().join("workspace")),
        credentials_dir: None,
    }
}

pub fn example() -> GraphDoc {
    GraphDoc::from_json_str(EXAMPLE_GRAPH).unwrap()
}

pub fn graph(json: &str) -> GraphDoc {
    GraphDoc::from_json_str(json).unwrap()
}

/// `app` in a 1280×800 window, after its first frames.
pub fn harness_for(app: App) -> AppHarness {
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .build_ui_state(|ui, app: &mut App| app.show(ui), app);
    harness.run_steps(3);
    harness
}

pub fn harness(doc: &GraphDoc, paths: &AppPaths) -> AppHarness {
    harness_for(App::new(doc, None, paths))
}

/// The node ids of the document, sorted.
pub fn ids(h: &AppHarness) -> Vec<String> {
    h.state()
        .document
        .to_doc()
        .nodes
        .iter()
        .map(|n| n.id.clone())
        .collect()
}

/// The wires of the document as `from.port -> to.port`, sorted.
pub fn wires(h: &AppHarness) -> Vec<String> {
    h.state()
        .document
        .to_doc()
        .edges
        .iter()
        .map(|e| format!("{}.{} -> {}.{}", e.from.0, e.from.1, e.to.0, e.to.1))
        .collect()
}

/// The on-screen centre of a text drawn inside the canvas (a node title, a pin name).
pub fn canvas_text(h: &AppHarness, text: &str) -> Pos2 {
    let rect = h.get_by_label(text).rect();
    h.state().graph_to_screen(rect.center())
}

/// The on-screen centre of a node's title.
pub fn title_of(h: &AppHarness, title: &str) -> Pos2 {
    canvas_text(h, title)
}

/// Presses and releases `button` at `pos` with `modifiers` held.
pub fn click_at(h: &mut AppHarness, pos: Pos2, button: PointerButton, modifiers: Modifiers) {
    h.event(egui::Event::PointerMoved(pos));
    h.event(egui::Event::ModifiersChanged(modifiers));
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos,
            button,
            pressed,
            modifiers,
        });
    }
    h.event(egui::Event::ModifiersChanged(Modifiers::NONE));
    h.run_steps(2);
}

/// Drags with the primary button from `from` to `to` in small steps, `modifiers` held.
pub fn drag(h: &mut AppHarness, from: Pos2, to: Pos2, modifiers: Modifiers) {
    hold_and_move(h, from, to, modifiers);
    let_go(h, to, modifiers);
}

/// Presses the primary button at `from` and moves to `to` in small steps, `modifiers`
/// held, without letting go.
pub fn hold_and_move(h: &mut AppHarness, from: Pos2, to: Pos2, modifiers: Modifiers) {
    h.event(egui::Event::PointerMoved(from));
    h.event(egui::Event::ModifiersChanged(modifiers));
    h.event(egui::Event::PointerButton {
        pos: from,
        button: PointerButton::Primary,
        pressed: true,
        modifiers,
    });
    h.step();
    let steps = 12;
    for i in 1..=steps {
        #[allow(clippy::cast_precision_loss, reason = "a small count")]
        let t = i as f32 / steps as f32;
        h.event(egui::Event::PointerMoved(from + (to - from) * t));
        h.step();
    }
}

/// Lets go of the primary button at `at`.
pub fn let_go(h: &mut AppHarness, at: Pos2, modifiers: Modifiers) {
    h.event(egui::Event::PointerMoved(at));
    h.event(egui::Event::PointerButton {
        pos: at,
        button: PointerButton::Primary,
        pressed: false,
        modifiers,
    });
    h.event(egui::Event::ModifiersChanged(Modifiers::NONE));
    h.run_steps(3);
}

/// Presses a key with modifiers, as a person at the keyboard.
pub fn keys(h: &mut AppHarness, modifiers: Modifiers, key: egui::Key) {
    h.key_press_modifiers(modifiers, key);
    h.run_steps(2);
}

/// Steps frames until `done` holds (real time passes: runs and autosave are timed).
pub fn wait_until(h: &mut AppHarness, what: &str, mut done: impl FnMut(&AppHarness) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(h) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; notice: {:?}, run: {:?} {:?}",
            h.state().notice,
            h.state().run.status,
            h.state().run.error
        );
        h.step();
        std::thread::sleep(Duration::from_millis(10));
    }
    h.run_steps(2);
}

/// A file dropped on the window, as the platform hands it to egui.
#[derive(Debug)]
struct Dropped(PathBuf);

impl egui::DroppedFile for Dropped {
    fn path(&self) -> &Path {
        &self.0
    }

    fn bytes(&self) -> Result<Vec<u8>, String> {
        std::fs::read(&self.0).map_err(|e| e.to_string())
    }
}

/// Drops `path` on the window.
pub fn drop_file(h: &mut AppHarness, path: &Path) {
    h.input_mut()
        .dropped_files
        .push(Arc::new(Dropped(path.to_owned())));
    h.run_steps(3);
}

/// Whether any node of the accessibility tree shows `text` as its label or value.
pub fn shown_anywhere(h: &AppHarness, text: &str) -> bool {
    h.query_by(|node| {
        node.label().is_some_and(|l| l.contains(text))
            || node.value().is_some_and(|v| v.contains(text))
    })
    .is_some()
}

/// Runs the ignored test `child` of this test binary in a process of its own whose session
/// bus leads nowhere (no keychain), with `env` set, and checks it printed `CHILD-OK`.
pub fn run_without_a_keychain(child: &str, env: &[(&str, &str)]) {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--ignored", "--nocapture"])
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/nonexistent/agentloom-test-bus",
        )
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("CHILD-OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The text the last frame put on the clipboard, if any.
pub fn copied_text(h: &AppHarness) -> Option<String> {
    h.output()
        .platform_output
        .commands
        .iter()
        .find_map(|c| match c {
            egui::OutputCommand::CopyText(text) => Some(text.clone()),
            _ => None,
        })
}

/// The example graph with a second source of text: a constant `other` under `name`.
pub fn example_with_constant() -> GraphDoc {
    let mut doc = example();
    doc.nodes.push(
        agentloom_core::NodeDoc::new("other", "data.constant")
            .with_config(serde_json::json!({"value": "planet"}))
            .at(40.0, 300.0),
    );
    doc
}

/// The on-screen centre of the pin label `text` drawn inside node `node`.
pub fn pin_label_in(h: &AppHarness, node: &str, text: &str) -> Pos2 {
    let rect = h.state().node_screen_rect(node).unwrap();
    h.get_all_by_label(text)
        .map(|found| h.state().graph_to_screen(found.rect().center()))
        .find(|pos| rect.contains(*pos))
        .unwrap_or_else(|| panic!("no `{text}` label inside node `{node}`"))
}

/// Where a pin is: the edge of its node level with the pin's name.
pub fn pin(h: &AppHarness, node: &str, name: &str, output: bool) -> Pos2 {
    let rect = h.state().node_screen_rect(node).unwrap();
    let x = if output { rect.right() } else { rect.left() };
    Pos2::new(x, pin_label_in(h, node, name).y)
}

/// The real `agentloom ARGS --db DB`, with stdin closed (no terminal: approvals pause).
pub fn agentloom_cli(args: &[&str], db: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .args(args)
        .arg("--db")
        .arg(db)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Fails unless the command exited 0, showing what it said on stderr.
pub fn assert_exit_ok(output: &std::process::Output) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// An agent in safe mode against fakellm's `TASK-LIVE` script (tests/fixtures/agent):
/// a `list_files` step, then a `write_file` of `live.txt` that waits for approval.
pub fn live_agent_graph(fakellm_base: &str) -> GraphDoc {
    graph(&format!(
        r#"{{"format":"agentloom.graph","version":1,"name":"live agent","settings":{{"safe_mode":true}},
  "nodes":[{{"id":"goal","block":"data.constant","position":[40,40],"config":{{"type":"text","value":"TASK-LIVE: look around"}}}},
           {{"id":"agent","block":"ai.agent","label":"Worker","position":[360,40],"config":{{"base_url":"{fakellm_base}/v1","model":"test-model"}}}},
           {{"id":"out","block":"graph.output","position":[760,40],"config":{{"name":"answer"}}}}],
  "edges":[{{"from":["goal","value"],"to":["agent","goal"]}},{{"from":["agent","answer"],"to":["out","value"]}}]}}"#
    ))
}

/// A plain HTTP server on 127.0.0.1 answering every request with `payload-42`; its URL and
/// how many requests it served.
pub fn payload_peer() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/data", listener.local_addr().unwrap());
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let _ = agentloom_tests::read_http_request(&mut reader);
            count.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\nconnection: close\r\n\r\npayload-42",
            );
        }
    });
    (url, served)
}

/// Waits for the run shown to end and asserts that it completed (its error otherwise).
pub fn wait_for_completed_run(h: &mut AppHarness) {
    wait_until(h, "the run to end", |h| {
        h.state().run.status.is_some() && !h.state().run.is_running()
    });
    assert_eq!(
        h.state().run.status,
        Some(agentloom_engine::RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
}
