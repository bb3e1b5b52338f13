//! File → "Let an assistant edit this graph…", end to end: the window shows a loopback URL
//! and a token (read back through its Copy buttons); the project's own streamable-HTTP MCP
//! client, on a thread of its own, adds a node and wires it, and both land on the canvas
//! while the window draws, each one undoable step (Ctrl+Z takes the wire, then the node,
//! back); Pause refuses an edit with a tool error saying so; a wrong token is answered
//! 401; Stop closes the port.
#![allow(clippy::unwrap_used, reason = "tests")]

#[path = "support/mcp_client.rs"]
mod mcp_client;
mod support;

use std::future::Future;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloom::app::Command;
use egui::accesskit::Role;
use egui::{Key, Modifiers};
use egui_kittest::kittest::Queryable as _;
use mcp_client::{call_tool as call, connect};
use serde_json::json;
use support::{AppHarness, copied_text, example, harness, ids, keys, paths, wires};

/// Runs an MCP client's `work` on a thread of its own while the window draws frames (the
/// edits wait for the window's UI thread), and returns what it returned.
fn while_drawing<T: Send + 'static>(
    h: &mut AppHarness,
    work: impl Future<Output = T> + Send + 'static,
) -> T {
    while_drawing_and(h, work, |_| {})
}

/// [`while_drawing`], with `each_frame` done by the person before every frame.
fn while_drawing_and<T: Send + 'static>(
    h: &mut AppHarness,
    work: impl Future<Output = T> + Send + 'static,
    mut each_frame: impl FnMut(&mut AppHarness),
) -> T {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = done.send(runtime.block_on(work));
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(value) = result.try_recv() {
            h.run_steps(2);
            return value;
        }
        assert!(Instant::now() < deadline, "the client did not finish");
        each_frame(h);
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Opens File → "Let an assistant edit this graph…" and reads the URL and the token back
/// through the window's Copy buttons.
fn open_window(h: &mut AppHarness) -> (String, String) {
    h.get_by_role_and_label(Role::Button, "File").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Let an assistant edit this graph…")
        .click();
    h.run_steps(3);
    let mut copy = |button: &str| {
        h.get_by_role_and_label(Role::Button, button).click();
        h.run_steps(1);
        let text = copied_text(h).unwrap_or_else(|| panic!("{button} copied nothing"));
        h.run_steps(1);
        text
    };
    let url = copy("Copy URL");
    let token = copy("Copy token");
    let config = copy("Copy configuration");
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    let server = &config["mcpServers"]["agentloom"];
    assert_eq!(server["url"], url.as_str(), "{config}");
    assert_eq!(
        server["headers"]["Authorization"],
        format!("Bearer {token}").as_str(),
        "{config}"
    );
    (url, token)
}

/// Moves the pointer onto the canvas, away from the window, as a person going back to it.
fn point_at_canvas(h: &mut AppHarness) {
    let canvas = h.state().graph_to_screen(egui::pos2(300.0, 400.0));
    h.event(egui::Event::PointerMoved(canvas));
    h.run_steps(2);
}

#[test]
fn an_assistants_edits_land_on_the_canvas_as_undoable_steps() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let before = ids(&h);
    let (url, token) = open_window(&mut h);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert_eq!(token.len(), 64, "a fresh token: {token}");

    let (client_url, client_token) = (url.clone(), token.clone());
    let answers = while_drawing(&mut h, async move {
        let editor = connect(&client_url, &client_token).await?;
        let added = call(
            &editor,
            "add_node",
            json!({"block": "text.template", "id": "shout",
                   "config": {"template": "{{ text }}!"}, "x": 560, "y": 300}),
        )
        .await?;
        let wired = call(
            &editor,
            "connect",
            json!({"from": {"node": "render", "port": "text"},
                   "to": {"node": "shout", "port": "text"}}),
        )
        .await?;
        let refused = call(
            &editor,
            "connect",
            json!({"from": "shout.text", "to": "shout.text"}),
        )
        .await
        .err();
        Ok::<_, String>((added, wired, refused))
    })
    .unwrap();
    let (added, wired, refused) = answers;
    assert_eq!(added["id"], "shout", "{added}");
    assert_eq!(wired["connected"], true, "{wired}");
    assert!(refused.is_some(), "a wire from a node to itself is refused");

    // On the canvas: the node (its title drawn) and its wire; the document is unsaved.
    assert!(ids(&h).contains(&"shout".to_owned()), "{:?}", ids(&h));
    assert!(
        wires(&h).contains(&"render.text -> shout.text".to_owned()),
        "{:?}",
        wires(&h)
    );
    h.get_by_label("shout");
    assert!(
        h.state().document.dirty,
        "an assistant's edit is unsaved work"
    );

    // Ctrl+Z undoes the assistant's edits one at a time: the wire, then the node.
    point_at_canvas(&mut h);
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert!(
        !wires(&h).contains(&"render.text -> shout.text".to_owned()),
        "{:?}",
        wires(&h)
    );
    assert!(ids(&h).contains(&"shout".to_owned()), "one step at a time");
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(ids(&h), before, "the node is taken back");
    assert!(
        h.query_by_label("shout").is_none(),
        "and gone from the canvas"
    );
}

#[test]
fn pause_refuses_edits_a_wrong_token_is_refused_and_stop_closes_the_port() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let before = h.state().document.to_doc();
    let (url, token) = open_window(&mut h);

    // Paused: the edit is refused with a tool error saying why, and nothing changes.
    h.get_by_role_and_label(Role::CheckBox, "Pause editing")
        .click();
    h.run_steps(2);
    let (client_url, client_token) = (url.clone(), token.clone());
    let paused = while_drawing(&mut h, async move {
        let editor = connect(&client_url, &client_token).await.unwrap();
        call(&editor, "remove_node", json!({"node": "render"})).await
    });
    let refusal = paused.err().unwrap();
    assert!(refusal.contains("paused"), "{refusal}");
    assert_eq!(h.state().document.to_doc(), before, "nothing changed");

    // Resumed, the same edit goes through.
    h.get_by_role_and_label(Role::CheckBox, "Pause editing")
        .click();
    h.run_steps(2);
    let (client_url, client_token) = (url.clone(), token.clone());
    let resumed = while_drawing(&mut h, async move {
        let editor = connect(&client_url, &client_token).await.unwrap();
        call(&editor, "remove_node", json!({"node": "render"})).await
    });
    assert_eq!(resumed.unwrap()["removed"], "render");
    assert!(!ids(&h).contains(&"render".to_owned()));

    // A wrong token, or none, is answered 401 before anything is read or changed.
    let shown = h.state().document.to_doc();
    let client_url = url.clone();
    let statuses = while_drawing(&mut h, async move {
        let client = reqwest::Client::new();
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}});
        let mut statuses = Vec::new();
        for authorization in [None, Some("Bearer not-the-token")] {
            let mut request = client
                .post(&client_url)
                .header("accept", "application/json, text/event-stream")
                .json(&list);
            if let Some(value) = authorization {
                request = request.header("authorization", value);
            }
            statuses.push(request.send().await.unwrap().status());
        }
        statuses
    });
    assert_eq!(
        statuses,
        [
            reqwest::StatusCode::UNAUTHORIZED,
            reqwest::StatusCode::UNAUTHORIZED
        ]
    );
    assert_eq!(h.state().document.to_doc(), shown);

    // Stop: the port is closed, so the token opens nothing any more.
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    assert!(std::net::TcpStream::connect(addr).is_ok(), "listening");
    h.get_by_role_and_label(Role::Button, "Stop").click();
    h.run_steps(2);
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "the port is closed after Stop"
    );
    h.get_by_label("Stopped: no assistant can edit this graph.");
    let after_stop = while_drawing(&mut h, async move { connect(&url, &token).await.err() });
    assert!(after_stop.is_some(), "the client cannot connect after Stop");
}

#[test]
fn the_persons_edits_and_the_assistants_made_at_the_same_time_are_all_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let before = h.state().document.to_doc();
    let (url, token) = open_window(&mut h);

    let mut added_by_hand = 0;
    let added = while_drawing_and(
        &mut h,
        async move {
            let editor = connect(&url, &token).await.unwrap();
            let mut ids = Vec::new();
            for n in 0..5 {
                let args = json!({"block": "data.constant", "id": format!("assistant{n}")});
                ids.push(call(&editor, "add_node", args).await.unwrap()["id"].clone());
            }
            ids
        },
        |h| {
            // The person adds a block of their own at every frame for a while.
            if added_by_hand < 5 {
                h.state_mut().send(Command::AddBlock {
                    kind: "text.template".to_owned(),
                    pos: None,
                });
                added_by_hand += 1;
            }
        },
    );
    assert_eq!(added.len(), 5);
    let shown = ids(&h);
    for n in 0..5 {
        assert!(shown.contains(&format!("assistant{n}")), "{shown:?}");
    }
    let templates = h
        .state()
        .document
        .to_doc()
        .nodes
        .iter()
        .filter(|n| n.block == "text.template")
        .count();
    assert_eq!(templates, 1 + added_by_hand, "the person's blocks are kept");

    // Each edit, the person's and the assistant's, is one step: ten undos go back to the
    // graph as it was.
    point_at_canvas(&mut h);
    for _ in 0..10 {
        keys(&mut h, Modifiers::COMMAND, Key::Z);
    }
    assert_eq!(h.state().document.to_doc(), before);
}

#[test]
fn start_again_makes_a_new_token_and_closing_the_window_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let (first_url, first_token) = open_window(&mut h);
    h.get_by_role_and_label(Role::Button, "Stop").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Start again").click();
    h.run_steps(2);
    let (url, token) = open_window(&mut h);
    assert_ne!(token, first_token, "a fresh token");
    let (old, new) = (first_token.clone(), token.clone());
    let client_url = url.clone();
    let refused = while_drawing(&mut h, async move {
        let old_refused = connect(&client_url, &old).await.is_err();
        let new_works = connect(&client_url, &new).await.is_ok();
        (old_refused, new_works)
    });
    assert_eq!(refused, (true, true), "{first_url} then {url}");

    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    h.get_by_role_and_label(Role::Button, "Close window")
        .click();
    h.run_steps(2);
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "closing the window closes the port"
    );
}

#[test]
fn another_graph_opened_stops_the_assistants_editing_of_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let (url, token) = open_window(&mut h);
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    assert!(std::net::TcpStream::connect(addr).is_ok(), "serving");
    h.state_mut().send(Command::New);
    h.run_steps(3);
    assert!(
        h.state().document.to_doc().nodes.is_empty(),
        "File → New showed an empty graph"
    );
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "the server editing the example went on serving the new graph"
    );
    let refused = while_drawing(&mut h, async move { connect(&url, &token).await.is_err() });
    assert!(refused, "the old token still edits");
    assert!(
        h.query_by_role_and_label(Role::Button, "Start again")
            .is_some(),
        "the window offers to start again for the graph shown now"
    );
}

/// Everything logged in this process, as the binary would write it.
#[derive(Clone, Default)]
struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_token_is_never_logged_even_at_trace_level() {
    // The server answers on the app's own threads: the whole process is captured.
    let logs = CapturedLog::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let (url, token) = open_window(&mut h);
    let (client_url, client_token) = (url.clone(), token.clone());
    let added = while_drawing(&mut h, async move {
        let refused = connect(&client_url, "not-the-token").await.is_err();
        let editor = connect(&client_url, &client_token).await.unwrap();
        let added = call(&editor, "add_node", json!({"block": "data.constant"})).await;
        (refused, added.is_ok())
    });
    assert_eq!(added, (true, true));
    h.get_by_role_and_label(Role::Button, "Stop").click();
    h.run_steps(2);

    let logged = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    let port = url.trim_end_matches("/mcp").rsplit(':').next().unwrap();
    assert!(
        logged.contains("an assistant may edit the open graph") && logged.contains(port),
        "the log is captured: {logged}"
    );
    assert!(!logged.contains(&token), "the token is in the log");
}

#[test]
fn run_runs_the_graph_as_shown_trusted_only_as_its_user_saved_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let file = dir.path().join("hello.agentloom.json");
    std::fs::write(&file, agentloom::app::EXAMPLE_GRAPH).unwrap();
    // Its user trusts the file as it is.
    let trust = agentloom_runner::trust::TrustStore::in_dir(paths.data_dir.as_ref().unwrap());
    trust
        .trust(agentloom_runner::trust::fingerprint(&file).unwrap())
        .unwrap();
    let mut h = support::harness_for(agentloom::app::App::new(
        &example(),
        Some(file.clone()),
        &paths,
    ));
    let (url, token) = open_window(&mut h);
    let run = |h: &mut AppHarness, edit: Option<serde_json::Value>| {
        let (url, token) = (url.clone(), token.clone());
        while_drawing(h, async move {
            let editor = connect(&url, &token).await?;
            if let Some(config) = edit {
                call(&editor, "set_config", config).await?;
            }
            call(&editor, "run", json!({"inputs": {"name": "Ada"}})).await
        })
    };

    // As saved: the file's trust.
    let saved = run(&mut h, None).unwrap();
    assert_eq!(saved["outputs"]["greeting"], "Hello, Ada!", "{saved}");
    assert_eq!(saved["trusted"], true, "{saved}");

    // Changed by the assistant, not saved: its run shows the change (the file still says
    // "Hello"), offline in safe mode.
    let changed = run(
        &mut h,
        Some(json!({"node": "render", "config": {"template": "Bye, {{ name }}!"}})),
    )
    .unwrap();
    assert_eq!(changed["outputs"]["greeting"], "Bye, Ada!", "{changed}");
    assert_eq!(changed["trusted"], false, "{changed}");
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("Hello, {{ name }}!"),
        "the file was written"
    );

    // A change that would need trust is refused, saying what it would allow and what to do.
    let (client_url, client_token) = (url.clone(), token.clone());
    let refused = while_drawing(&mut h, async move {
        let editor = connect(&client_url, &client_token).await.unwrap();
        call(
            &editor,
            "add_node",
            json!({"block": "http.request", "id": "probe",
                   "config": {"url": "http://127.0.0.1:9/", "allow_private_network": true}}),
        )
        .await
        .unwrap();
        call(&editor, "run", json!({"inputs": {"name": "Ada"}})).await
    });
    let refusal = refused.unwrap_err();
    assert!(refusal.contains("node `probe`"), "{refusal}");
    assert!(refusal.contains("save the graph in Agentloom"), "{refusal}");

    // The person takes the probe back and saves: saving trusts what is shown.
    point_at_canvas(&mut h);
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert!(!ids(&h).contains(&"probe".to_owned()), "{:?}", ids(&h));
    keys(&mut h, Modifiers::COMMAND, Key::S);
    assert!(!h.state().document.dirty, "saved");
    let saved_again = run(&mut h, None).unwrap();
    assert_eq!(
        saved_again["outputs"]["greeting"], "Bye, Ada!",
        "{saved_again}"
    );
    assert_eq!(saved_again["trusted"], true, "{saved_again}");
}
