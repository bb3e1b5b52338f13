//! MCP both ways, end to end with the real binary:
//! - as a client, against the official `@modelcontextprotocol/server-everything` (npm,
//!   installed in tests/peers/mcp) over stdio: its tools become blocks, graphs call them;
//! - as a server (`agentloom mcp GRAPH...`), driven by an rmcp client over stdio.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agentloom_tests::mcp::server_everything;
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG")
        .env("XDG_DATA_HOME", data_dir());
    cmd
}

/// The data directory (with the trust store) of every command here.
fn data_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// Writes the graph and trusts it (in `dir`'s data directory), as its author would.
fn write_graph(dir: &Path, graph: &Value) -> PathBuf {
    let path = dir.join("graph.agentloom.json");
    std::fs::write(&path, serde_json::to_string_pretty(graph).unwrap()).unwrap();
    let trusted = bin().arg("trust").arg(&path).output().unwrap();
    assert!(trusted.status.success(), "{trusted:?}");
    path
}

fn everything_graph(launcher: &Path, nodes: &Value, edges: &Value) -> Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "MCP tools",
        "mcp_servers": {"everything": {"command": launcher, "args": ["stdio"]}},
        "nodes": nodes,
        "edges": edges
    })
}

fn run_json(graph: &Path, dir: &Path, inputs: &[&str]) -> (Output, Value) {
    let mut cmd = bin();
    cmd.arg("run").arg(graph).arg("--json").arg("--db");
    cmd.arg(dir.join("runs.sqlite3"))
        .arg("--workspace")
        .arg(dir);
    for input in inputs {
        cmd.args(["--input", input]);
    }
    let output = cmd.output().unwrap();
    let json = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output, json)
}

/// A trusted graph file in a new directory whose server `everything` is server-everything
/// over stdio; `None` where server-everything is not installed.
fn everything_graph_file(nodes: &Value, edges: &Value) -> Option<(tempfile::TempDir, PathBuf)> {
    let launcher = server_everything()?;
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(dir.path(), &everything_graph(&launcher, nodes, edges));
    Some((dir, graph))
}

/// The report of a run that must succeed.
fn run_ok(graph: &Path, dir: &Path, inputs: &[&str]) -> Value {
    let (output, report) = run_json(graph, dir, inputs);
    assert!(
        output.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    report
}

#[test]
fn server_everything_tools_are_blocks_a_graph_calls() {
    let Some((dir, graph)) = everything_graph_file(
        &json!([
            {"id": "message", "block": "graph.input", "config": {"name": "message", "type": "text"}},
            {"id": "echo", "block": "mcp.everything.echo"},
            {"id": "a", "block": "data.constant", "config": {"value": 1.5}},
            {"id": "b", "block": "data.constant", "config": {"value": 2}},
            {"id": "sum", "block": "mcp.everything.get-sum"},
            {"id": "echoed", "block": "graph.output", "config": {"name": "echoed"}},
            {"id": "total", "block": "graph.output", "config": {"name": "total"}}
        ]),
        &json!([
            {"from": ["message", "value"], "to": ["echo", "message"]},
            {"from": ["echo", "text"], "to": ["echoed", "value"]},
            {"from": ["a", "value"], "to": ["sum", "a"]},
            {"from": ["b", "value"], "to": ["sum", "b"]},
            {"from": ["sum", "text"], "to": ["total", "value"]}
        ]),
    ) else {
        return;
    };

    // The tools are listed as blocks, their inputs from the tools' input schemas.
    let listed = bin()
        .args(["blocks", "--json", "--graph"])
        .arg(&graph)
        .output()
        .unwrap();
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let blocks: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let block = |kind: &str| {
        blocks
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["kind"] == kind)
            .unwrap_or_else(|| panic!("no block {kind}"))
            .clone()
    };
    let sum = block("mcp.everything.get-sum");
    assert_eq!(sum["category"], "MCP");
    let inputs = sum["ports"]["inputs"].as_array().unwrap();
    let names: Vec<&str> = inputs.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(
        inputs
            .iter()
            .all(|p| p["type"] == "number" && p["required"] == true)
    );
    let echo = block("mcp.everything.echo");
    assert_eq!(echo["ports"]["inputs"][0]["name"], "message");
    assert_eq!(echo["ports"]["inputs"][0]["type"], "text");
    // Descriptions come from the schema when the server gives one (this build of
    // server-everything gives none for `echo`; blocks/src/mcp/tool_block.rs tests them).

    // A graph calls `echo` and `get-sum`.
    let report = run_ok(&graph, dir.path(), &["message=hello from a graph"]);
    assert_eq!(report["outputs"]["echoed"], "Echo: hello from a graph");
    assert_eq!(report["outputs"]["total"], "The sum of 1.5 and 2 is 3.5.");
}

/// A for-each configures its inner block from the graph's own catalog, so it wraps a
/// tool of the graph's MCP server like any built-in block.
#[test]
fn a_for_each_runs_an_mcp_tool_once_per_item() {
    let Some((dir, graph)) = everything_graph_file(
        &json!([
            {"id": "items", "block": "data.constant", "config": {"value": ["one", "two", "three"]}},
            {"id": "each", "block": "control.for_each",
             "config": {"block": "mcp.everything.echo", "output_port": "text", "concurrency": 2}},
            {"id": "echoed", "block": "graph.output", "config": {"name": "echoed"}}
        ]),
        &json!([
            {"from": ["items", "value"], "to": ["each", "items"]},
            {"from": ["each", "results"], "to": ["echoed", "value"]}
        ]),
    ) else {
        return;
    };
    let report = run_ok(&graph, dir.path(), &[]);
    assert_eq!(
        report["outputs"]["echoed"],
        json!(["Echo: one", "Echo: two", "Echo: three"])
    );
}

#[test]
fn mcp_errors_are_clean() {
    let Some(launcher) = server_everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    // A tool the server does not have is an unknown block, found before anything runs.
    let graph = write_graph(
        dir.path(),
        &everything_graph(
            &launcher,
            &json!([{"id": "x", "block": "mcp.everything.no-such-tool"}]),
            &json!([]),
        ),
    );
    let (output, _) = run_json(&graph, dir.path(), &[]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("mcp.everything.no-such-tool"), "{stderr}");

    // A server that cannot start is a validation problem naming it.
    let broken = write_graph(
        dir.path(),
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "Broken",
            "mcp_servers": {"missing": {"command": dir.path().join("no-such-program")}},
            "nodes": []
        }),
    );
    let output = bin()
        .args(["validate", "--json"])
        .arg(&broken)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    let problem = &result["problems"][0];
    assert_eq!(problem["kind"], "mcp_server");
    assert_eq!(problem["path"], "$.mcp_servers.missing");
    let message = problem["message"].as_str().unwrap();
    assert!(
        message.starts_with("MCP server `missing`: cannot start"),
        "{message}"
    );

    // A tool's own error (isError) is the node's error, with the tool's message.
    let graph = write_graph(
        dir.path(),
        &everything_graph(
            &launcher,
            &json!([
                {"id": "name", "block": "data.constant", "config": {"value": "a.gz"}},
                {"id": "data", "block": "data.constant", "config": {"value": "file:///nonexistent/x"}},
                {"id": "gzip", "block": "mcp.everything.gzip-file-as-resource"},
                {"id": "out", "block": "graph.output", "config": {"name": "out"}}
            ]),
            &json!([
                {"from": ["name", "value"], "to": ["gzip", "name"]},
                {"from": ["data", "value"], "to": ["gzip", "data"]},
                {"from": ["gzip", "text"], "to": ["out", "value"]}
            ]),
        ),
    );
    let (output, report) = run_json(&graph, dir.path(), &[]);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert_eq!(report["status"], "failed");
    let error = report["error"].as_str().unwrap();
    assert!(
        error.contains("MCP tool `gzip-file-as-resource` of server `everything` failed")
            && error.contains("Unsupported URL protocol"),
        "{error}"
    );
}

#[tokio::test]
async fn graphs_served_as_mcp_tools() {
    let dir = tempfile::tempdir().unwrap();
    let hello =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    let db = dir.path().join("runs.sqlite3");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentloom"));
    command
        .arg("mcp")
        .arg(&hello)
        .arg("--db")
        .arg(&db)
        .arg("--workspace")
        .arg(dir.path())
        .env_remove("AGENTLOOM_LOG");
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();

    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    let tool = &tools[0];
    assert_eq!(tool.name, "hello");
    assert_eq!(
        tool.description.as_deref(),
        Some("Greets whoever is named in the `name` input.")
    );
    let schema = Value::Object(tool.input_schema.as_ref().clone());
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["name"]["type"], "string");
    assert_eq!(schema["properties"]["name"]["default"], "world");
    assert_eq!(schema["required"], json!([]));

    let mut arguments = serde_json::Map::new();
    arguments.insert("name".to_owned(), json!("Ada"));
    let result = client
        .call_tool(CallToolRequestParams::new("hello").with_arguments(arguments))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true));
    assert_eq!(result.content[0].as_text().unwrap().text, "Hello, Ada!");
    assert_eq!(
        result.structured_content,
        Some(json!({"greeting": "Hello, Ada!"}))
    );

    // A wrong input and an unknown tool are errors that say what is wrong.
    let mut wrong = serde_json::Map::new();
    wrong.insert("nmae".to_owned(), json!("Ada"));
    let err = client
        .call_tool(CallToolRequestParams::new("hello").with_arguments(wrong))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no input `nmae`"), "{err}");
    let err = client
        .call_tool(CallToolRequestParams::new("nope"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no tool `nope`"), "{err}");
    client.cancel().await.unwrap();

    // The call is a run in the run log.
    let runs = bin()
        .args(["runs", "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["graph_name"], "Hello");
    assert_eq!(runs[0]["status"], "completed");
}

fn app_harness(
    dir: &Path,
    doc: &agentloom_core::GraphDoc,
) -> egui_kittest::Harness<'static, agentloom::app::App> {
    use agentloom::app::{App, AppPaths};

    let paths = AppPaths {
        run_log: Some(dir.join("runs.sqlite3")),
        data_dir: None,
        workspace: Some(dir.to_owned()),
        credentials_dir: Some(dir.join("credentials")),
    };
    harness_of(App::new(doc, None, &paths))
}

fn harness_of(app: agentloom::app::App) -> egui_kittest::Harness<'static, agentloom::app::App> {
    let mut h = egui_kittest::Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_ui_state(|ui, app: &mut agentloom::app::App| app.show(ui), app);
    h.run_steps(3);
    h
}

/// Runs frames until `done` holds (connecting happens in the background), at most 60 s.
fn run_until(
    h: &mut egui_kittest::Harness<'static, agentloom::app::App>,
    what: &str,
    done: impl Fn(&agentloom::app::App) -> bool,
) {
    let started = std::time::Instant::now();
    while !done(h.state()) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "not within 60 s: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        h.run_steps(1);
    }
    h.run_steps(2);
}

fn has_block(app: &agentloom::app::App, kind: &str) -> bool {
    app.catalog().block(kind).is_some()
}

fn open_mcp_window(h: &mut egui_kittest::Harness<'static, agentloom::app::App>) {
    use egui::accesskit::Role;
    use egui_kittest::kittest::Queryable as _;

    h.get_by_role_and_label(Role::Button, "File").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "MCP servers…")
        .click();
    h.run_steps(4);
}

fn add_server_in_window(
    h: &mut egui_kittest::Harness<'static, agentloom::app::App>,
    fields: &[(&str, String)],
) {
    use egui::accesskit::Role;
    use egui_kittest::kittest::Queryable as _;

    for (label, text) in fields {
        let field = h.get_by_role_and_label(Role::TextInput, label);
        field.click();
        field.type_text(text);
        h.run_steps(2);
    }
    h.get_by_role_and_label(Role::Button, "Add server").click();
    h.run_steps(1);
}

#[test]
fn an_mcp_server_added_in_the_app_puts_its_tools_in_the_palette() {
    use egui::accesskit::Role;
    use egui_kittest::kittest::Queryable as _;

    let Some(launcher) = server_everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut h = app_harness(dir.path(), &agentloom_core::GraphDoc::new("Tools"));
    open_mcp_window(&mut h);
    h.get_by_label("This graph uses no MCP server yet.");
    add_server_in_window(
        &mut h,
        &[
            ("Name", "everything".to_owned()),
            ("Command", launcher.display().to_string()),
            ("Arguments", "stdio".to_owned()),
        ],
    );
    // The window goes on drawing while the server starts.
    h.run_steps(2);
    h.get_by_label("Connecting to everything…");
    h.get_by_label("Connecting to MCP servers: everything…");
    run_until(&mut h, "the tools are blocks", |app| {
        has_block(app, "mcp.everything.get-sum")
    });

    // Saved with the graph, and its tools are blocks of the palette.
    let doc = h.state().document.to_doc();
    let server = &doc.mcp_servers["everything"];
    assert_eq!(server.args, ["stdio"]);
    assert!(
        h.state().problems().is_empty(),
        "{:?}",
        h.state().problems()
    );
    assert!(h.query_by_label_contains("Connecting to").is_none());

    // Removing it is one step back to no server.
    h.get_by_role_and_label(Role::Button, "Remove everything")
        .click();
    h.run_steps(1);
    assert!(h.state().document.to_doc().mcp_servers.is_empty());
    run_until(&mut h, "the tools are gone", |app| {
        !has_block(app, "mcp.everything.get-sum")
    });

    // Undo brings the server back and reconnects; redo removes it again.
    h.state_mut()
        .apply(agentloom::app::Command::Undo, &egui::Context::default());
    h.run_steps(1);
    assert!(
        h.state()
            .document
            .to_doc()
            .mcp_servers
            .contains_key("everything")
    );
    run_until(&mut h, "undo reconnects", |app| {
        has_block(app, "mcp.everything.get-sum")
    });
    h.state_mut()
        .apply(agentloom::app::Command::Redo, &egui::Context::default());
    h.run_steps(1);
    assert!(h.state().document.to_doc().mcp_servers.is_empty());
    run_until(&mut h, "redo disconnects", |app| {
        !has_block(app, "mcp.everything.get-sum")
    });
}

#[test]
fn a_graph_with_mcp_tools_opens_at_once_and_keeps_its_wires() {
    let Some(launcher) = server_everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let doc: agentloom_core::GraphDoc = serde_json::from_value(everything_graph(
        &launcher,
        &json!([
            {"id": "message", "block": "graph.input", "config": {"name": "message", "type": "text"}},
            {"id": "echo", "block": "mcp.everything.echo"},
            {"id": "echoed", "block": "graph.output", "config": {"name": "echoed"}}
        ]),
        &json!([
            {"from": ["message", "value"], "to": ["echo", "message"]},
            {"from": ["echo", "text"], "to": ["echoed", "value"]}
        ]),
    ))
    .unwrap();
    let mut h = app_harness(dir.path(), &doc);
    // The window is up while the server starts; the tool node gets its ports and wires
    // once connected, and the graph has no unsaved change for it.
    run_until(&mut h, "the tools are blocks", |app| {
        has_block(app, "mcp.everything.echo")
    });
    let mut shown = h.state().document.to_doc().edges;
    let mut wanted = doc.edges.clone();
    shown.sort_by_key(|e| format!("{e:?}"));
    wanted.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(shown, wanted);
    assert!(!h.state().document.dirty);
    assert!(
        h.state().problems().is_empty(),
        "{:?}",
        h.state().problems()
    );
}

#[test]
fn tool_nodes_of_a_server_that_cannot_start_keep_their_wires_when_saved() {
    let dir = tempfile::tempdir().unwrap();
    let doc: agentloom_core::GraphDoc = serde_json::from_value(json!({
        "format": "agentloom.graph", "version": 1, "name": "Gone",
        "mcp_servers": {"gone": {"command": dir.path().join("no-such-program")}},
        "nodes": [
            {"id": "message", "block": "graph.input", "config": {"name": "message", "type": "text"}},
            {"id": "echo", "block": "mcp.gone.echo"},
            {"id": "echoed", "block": "graph.output", "config": {"name": "echoed"}}
        ],
        "edges": [
            {"from": ["message", "value"], "to": ["echo", "message"]},
            {"from": ["echo", "text"], "to": ["echoed", "value"]}
        ]
    }))
    .unwrap();
    let mut h = app_harness(dir.path(), &doc);
    run_until(&mut h, "the server is a problem", |app| {
        app.problems()
            .iter()
            .any(|p| p.path == "$.mcp_servers.gone")
    });
    // The node is an unknown block (a problem), yet its wires stay, also in the saved file.
    assert!(
        h.state()
            .problems()
            .iter()
            .any(|p| p.message.contains("unknown block `mcp.gone.echo`")),
        "{:?}",
        h.state().problems()
    );
    let saved = dir.path().join("saved.agentloom.json");
    h.state_mut().apply(
        agentloom::app::Command::SaveAs(saved.clone()),
        &egui::Context::default(),
    );
    let saved = agentloom::app::load_graph(&saved).unwrap();
    let sorted = |mut edges: Vec<agentloom_core::EdgeDoc>| {
        edges.sort_by_key(|e| format!("{e:?}"));
        edges
    };
    assert_eq!(sorted(saved.edges), sorted(doc.edges));
}

#[test]
fn an_unreachable_or_silent_http_server_does_not_hold_up_the_app() {
    use egui_kittest::kittest::Queryable as _;

    let dir = tempfile::tempdir().unwrap();
    let mut h = app_harness(dir.path(), &agentloom_core::GraphDoc::new("Tools"));
    open_mcp_window(&mut h);

    // A server that accepts the connection and never answers: the app keeps drawing
    // "connecting", and undoing the change drops the connection attempt.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/mcp", silent.local_addr().unwrap());
    add_server_in_window(
        &mut h,
        &[("Name", "silent".to_owned()), ("URL", silent_url)],
    );
    for _ in 0..5 {
        h.run_steps(1);
    }
    h.get_by_label("Connecting to silent…");
    h.state_mut()
        .apply(agentloom::app::Command::Undo, &egui::Context::default());
    h.run_steps(2);
    assert!(h.state().document.to_doc().mcp_servers.is_empty());
    assert!(h.query_by_label_contains("Connecting to").is_none());

    // Nothing listening: the window says which server and why.
    let port = agentloom_tests::free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    add_server_in_window(&mut h, &[("Name", "down".to_owned()), ("URL", url.clone())]);
    run_until(&mut h, "the connection fails", |app| {
        !app.problems().is_empty()
    });
    let problem = &h.state().problems()[0];
    assert_eq!(problem.path, "$.mcp_servers.down");
    let expected = format!("MCP server `down`: `{url}` did not complete the MCP handshake");
    assert!(
        problem.message.starts_with(&expected),
        "{}",
        problem.message
    );
    assert!(h.query_all_by_label_contains(&expected).count() >= 1);
    drop(silent);
}

/// The MCP inspector's command-line client (npm `@modelcontextprotocol/inspector`), another
/// implementation than rmcp, lists and calls the graphs `agentloom mcp` serves.
#[test]
fn the_mcp_inspector_lists_and_calls_graph_tools() {
    let inspector = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/peers/mcp/node_modules/.bin/mcp-inspector");
    if !inspector.is_file() {
        if std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1") {
            eprintln!("skipping: the MCP inspector is not installed and AGENTLOOM_SKIP_PEERS=1");
            return;
        }
        panic!(
            "the MCP inspector is missing: run `(cd tests/peers/mcp && npm install)`, or set AGENTLOOM_SKIP_PEERS=1"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let hello =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    let inspect = |method: &[&str]| -> Value {
        let output = Command::new(&inspector)
            .arg("--cli")
            .arg(env!("CARGO_BIN_EXE_agentloom"))
            .arg("mcp")
            .arg(&hello)
            .arg("--db")
            .arg(dir.path().join("runs.sqlite3"))
            .arg("--workspace")
            .arg(dir.path())
            .args(method)
            .env_remove("AGENTLOOM_LOG")
            .output()
            .unwrap();
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "the inspector did not answer JSON ({e}):\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        })
    };
    let listed = inspect(&["--method", "tools/list"]);
    assert_eq!(listed["tools"][0]["name"], "hello");
    assert_eq!(
        listed["tools"][0]["inputSchema"]["properties"]["name"]["type"],
        "string"
    );
    let called = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "hello",
        "--tool-arg",
        "name=Inspector",
    ]);
    assert_eq!(called["content"][0]["text"], "Hello, Inspector!");
    assert_eq!(called["structuredContent"]["greeting"], "Hello, Inspector!");
    assert_eq!(called["isError"], false);
}

/// The app opened on the graph file `graph`, its trust kept in `data`.
fn app_for(graph: &Path, data: &Path) -> egui_kittest::Harness<'static, agentloom::app::App> {
    use agentloom::app::{App, AppPaths};
    let paths = AppPaths {
        run_log: None,
        data_dir: Some(data.to_owned()),
        workspace: graph.parent().map(Path::to_path_buf),
        credentials_dir: None,
    };
    let doc = agentloom::app::load_graph(graph).unwrap();
    harness_of(App::new(&doc, Some(graph.to_owned()), &paths))
}

/// A graph whose server is server-everything, started through `sh` so that it leaves
/// `marker` behind.
fn marked_everything_graph(path: &Path, launcher: &Path, marker: &Path) {
    std::fs::write(
        path,
        json!({
            "format": "agentloom.graph", "version": 1, "name": "shared",
            "mcp_servers": {"everything": {
                "command": "sh",
                "args": ["-c", format!("touch '{}'; exec '{}' stdio", marker.display(), launcher.display())]
            }},
            "nodes": [{"id": "echo", "block": "mcp.everything.echo", "config": {}}],
            "edges": []
        })
        .to_string(),
    )
    .unwrap();
}

#[test]
fn the_app_opens_an_untrusted_file_offline_until_trust_and_connect_or_save() {
    use egui::accesskit::Role;
    use egui_kittest::kittest::Queryable as _;

    let Some(launcher) = agentloom_tests::mcp::server_everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let marker = dir.path().join("marker");
    let graph = dir.path().join("shared.json");
    marked_everything_graph(&graph, &launcher, &marker);

    let mut h = app_for(&graph, &data);
    for _ in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        h.run_steps(1);
    }
    assert!(
        !marker.exists(),
        "opening an untrusted file started its MCP command"
    );
    assert!(!has_block(h.state(), "mcp.everything.echo"));
    h.get_by_label_contains("shared.json is not trusted");
    h.get_by_label_contains("start the command `sh -c");
    let problems: Vec<String> = h
        .state()
        .problems()
        .iter()
        .map(|p| p.message.clone())
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("not connected: this file is not trusted")),
        "{problems:?}"
    );
    assert!(
        !problems.iter().any(|p| p.contains("unknown block")),
        "{problems:?}"
    );

    h.get_by_role_and_label(Role::Button, "Trust and connect")
        .click();
    h.run_steps(2);
    run_until(&mut h, "trusting connects", |app| {
        has_block(app, "mcp.everything.echo")
    });
    assert!(marker.exists());
    assert!(
        h.query_by_label_contains("shared.json is not trusted")
            .is_none()
    );
    drop(h);

    // The trust was recorded: opened again, it connects at once.
    std::fs::remove_file(&marker).unwrap();
    let mut h = app_for(&graph, &data);
    run_until(&mut h, "a trusted file connects on opening", |app| {
        has_block(app, "mcp.everything.echo")
    });
    assert!(marker.exists());
    drop(h);

    // Changed on disk: offline again. Keep offline hides the banner; saving trusts.
    std::fs::remove_file(&marker).unwrap();
    std::fs::write(&graph, std::fs::read_to_string(&graph).unwrap() + "\n").unwrap();
    let mut h = app_for(&graph, &data);
    h.get_by_role_and_label(Role::Button, "Keep offline")
        .click();
    h.run_steps(3);
    assert!(
        h.query_by_label_contains("shared.json is not trusted")
            .is_none()
    );
    assert!(!marker.exists());
    h.state_mut()
        .apply(agentloom::app::Command::Save, &egui::Context::default());
    run_until(&mut h, "saving trusts and connects", |app| {
        has_block(app, "mcp.everything.echo")
    });
    assert!(marker.exists());
}
