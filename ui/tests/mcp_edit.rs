//! `agentloom mcp --edit GRAPH`, end to end with the real binary: the official MCP
//! inspector's command-line client builds the hello example tool by tool from nothing and
//! runs it; an rmcp client sees a refused wire refused with the canvas's own reason; a tool
//! edit leaves a trusted file untrusted until its user trusts it again.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::Command;

use agentloom_core::GraphDoc;
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

/// The item of the JSON array `list` whose `key` is `value`.
fn item<'a>(list: &'a Value, key: &str, value: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|item| item[key] == value)
        .unwrap_or_else(|| panic!("no {key} {value} in {list}"))
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples")
}

/// The inspector's command-line client, or `None` when the peers may be skipped.
fn inspector() -> Option<PathBuf> {
    let inspector = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/peers/mcp/node_modules/.bin/mcp-inspector");
    if inspector.is_file() {
        return Some(inspector);
    }
    if std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1") {
        eprintln!("skipping: the MCP inspector is not installed and AGENTLOOM_SKIP_PEERS=1");
        return None;
    }
    panic!(
        "the MCP inspector is missing: run `(cd tests/peers/mcp && npm install)`, or set AGENTLOOM_SKIP_PEERS=1"
    );
}

/// The arguments of `agentloom` that serve the editing of `graph`, its run log and
/// workspace in `dir`.
fn server_args(dir: &Path, graph: &Path) -> Vec<std::ffi::OsString> {
    vec![
        "mcp".into(),
        "--edit".into(),
        graph.into(),
        "--db".into(),
        dir.join("runs.sqlite3").into(),
        "--workspace".into(),
        dir.into(),
    ]
}

/// One tool call through the inspector, each a new `agentloom mcp --edit` process: what
/// the tools build lives in the file. Returns the tool's structured answer, or its error
/// text as a string.
fn inspect_call(inspector: &Path, dir: &Path, graph: &Path, tool: &str, args: &[String]) -> Value {
    let mut cmd = Command::new(inspector);
    cmd.arg("--cli")
        .arg(env!("CARGO_BIN_EXE_agentloom"))
        .args(server_args(dir, graph))
        .args(["--method", "tools/call", "--tool-name", tool]);
    for arg in args {
        cmd.args(["--tool-arg", arg]);
    }
    let output = cmd
        .env_remove("AGENTLOOM_LOG")
        .env("XDG_DATA_HOME", dir.join("data"))
        .output()
        .unwrap();
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "the inspector did not answer JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    if answer["isError"] == true {
        return answer["content"][0]["text"].clone();
    }
    answer["structuredContent"].clone()
}

#[test]
fn the_inspector_builds_the_hello_example_tool_by_tool_and_runs_it() {
    let Some(inspector) = inspector() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("built.agentloom.json");
    let call = |tool: &str, args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        inspect_call(&inspector, dir.path(), &graph, tool, &args)
    };

    // The catalog lists the blocks with their ports, types and config schemas.
    let blocks = call("list_blocks", &[]);
    let template = item(&blocks["blocks"], "kind", "text.template");
    // Its ports come from its template: the catalog says so, and its config schema says
    // what to write.
    assert!(
        template["ports"]["depends_on_config"].is_string(),
        "{template}"
    );
    assert_eq!(
        template["config_schema"]["properties"]["template"]["type"],
        "string"
    );
    let chat = item(&blocks["blocks"], "kind", "llm.chat");
    assert_eq!(chat["ports"]["inputs"][0]["name"], "prompt");
    assert_eq!(chat["ports"]["inputs"][0]["type"], "text");
    assert_eq!(template["config_schema"]["type"], "object");
    assert!(!graph.exists(), "listing blocks writes nothing");

    let added = call(
        "add_node",
        &[
            "block=graph.input",
            "id=name",
            r#"config={"type": "text", "default": "world"}"#,
            "x=40",
            "y=120",
        ],
    );
    assert_eq!(added["id"], "name");
    assert_eq!(added["ports"]["outputs"][0]["name"], "value");
    let added = call(
        "add_node",
        &[
            "block=text.template",
            "id=render",
            r#"config={"template": "Hello, {{ name }}!"}"#,
            "x=300",
            "y=120",
        ],
    );
    // The template's variable became an input; nothing is wired yet.
    assert_eq!(added["ports"]["inputs"][0]["name"], "name");
    assert_eq!(added["problems"][0]["kind"], "missing_input");
    assert_eq!(added["problems"][0]["node"], "render");
    assert_eq!(added["problems"][0]["port"], "name");
    // Without an id, the output is named after its block kind, and named so.
    let added = call("add_node", &["block=graph.output", "x=560", "y=120"]);
    assert_eq!(added["id"], "output");
    let renamed = call("remove_node", &["node=output"]);
    assert_eq!(renamed["removed"], "output");
    call(
        "add_node",
        &["block=graph.output", "id=greeting", "x=500", "y=100"],
    );
    let moved = call("move_node", &["node=greeting", "x=560", "y=120"]);
    assert_eq!(moved["position"], json!([560, 120]));

    let wired = call(
        "connect",
        &[
            r#"from={"node": "name", "port": "value"}"#,
            r#"to={"node": "render", "port": "name"}"#,
        ],
    );
    assert_eq!(wired["connected"], true);
    // The answer says what is still wrong: the output's input, structured.
    let problems = wired["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0]["node"], "greeting");
    assert_eq!(problems[0]["port"], "value");
    assert!(
        problems[0]["path"]
            .as_str()
            .unwrap()
            .starts_with("$.nodes[")
    );
    call(
        "connect",
        &[
            r#"from={"node": "render", "port": "text"}"#,
            r#"to={"node": "greeting", "port": "value"}"#,
        ],
    );
    let checked = call("validate", &[]);
    assert_eq!(checked, json!({"valid": true, "problems": []}));

    // The file holds the hello example's nodes and wires (the example's label aside),
    // without the values its blocks declare as defaults, as the app saves.
    let built = GraphDoc::from_json_str(&std::fs::read_to_string(&graph).unwrap()).unwrap();
    let mut hello = agentloom::app::load_graph(&examples().join("hello.agentloom.json")).unwrap();
    for node in &mut hello.nodes {
        node.label = None;
    }
    let hello =
        agentloom_core::without_declared_defaults(&hello, &agentloom_blocks::Registry::builtin());
    assert_eq!(built.nodes, hello.nodes);
    assert_eq!(built.edges, hello.edges);
    // Written in the canonical form, as the app saves.
    assert_eq!(
        std::fs::read_to_string(&graph).unwrap(),
        built.to_json_string()
    );
    assert_eq!(call("get_graph", &[])["nodes"].as_array().unwrap().len(), 3);

    let ran = call("run", &[r#"inputs={"name": "Ada"}"#]);
    assert_eq!(ran["status"], "completed", "{ran}");
    assert_eq!(ran["outputs"], json!({"greeting": "Hello, Ada!"}));
    let ran = call("run", &[]);
    assert_eq!(ran["outputs"], json!({"greeting": "Hello, world!"}));

    // The newest run, from the run log: every node, its status and timings.
    let explained = call("explain_run", &[]);
    assert_eq!(explained["run_id"], ran["run_id"]);
    assert_eq!(explained["status"], "completed");
    assert_eq!(explained["outputs"], json!({"greeting": "Hello, world!"}));
    let nodes = explained["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    assert!(
        nodes
            .iter()
            .all(|n| n["status"] == "done" && n["started_at_ms"].is_u64())
    );
}

type Client = RunningService<RoleClient, ()>;

/// An rmcp client of `agentloom mcp --edit graph`, its trust store in `dir`/data.
async fn edit_client(dir: &Path, graph: &Path) -> Client {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentloom"));
    command
        .args(server_args(dir, graph))
        .env("XDG_DATA_HOME", dir.join("data"))
        .env_remove("AGENTLOOM_LOG");
    ().serve(TokioChildProcess::new(command).unwrap())
        .await
        .unwrap()
}

async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let request = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap());
    client.call_tool(request).await.unwrap()
}

/// A tool call that must succeed: its structured answer.
async fn call_ok(client: &Client, tool: &str, args: Value) -> Value {
    let result = call(client, tool, args).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    result.structured_content.unwrap()
}

/// A tool call that must be refused: its error text.
async fn call_refused(client: &Client, tool: &str, args: Value) -> String {
    let result = call(client, tool, args).await;
    assert_eq!(result.is_error, Some(true), "{result:?}");
    result.content[0].as_text().unwrap().text.clone()
}

/// What the canvas says when the user drags the wire `from` → `to` in `doc`.
fn canvas_reason(doc: &GraphDoc, from: (&str, &str), to: (&str, &str)) -> String {
    let catalog = agentloom::runner::catalog::builtin();
    let mut document = agentloom::app::Document::from_doc(doc, &catalog, None);
    document.connect_named(from, to).unwrap_err().to_string()
}

#[tokio::test]
async fn a_refused_wire_returns_the_canvas_reason_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("wires.agentloom.json");
    let client = edit_client(dir.path(), &graph).await;
    call_ok(
        &client,
        "add_node",
        json!({"block": "graph.input", "id": "count", "config": {"type": "number"}}),
    )
    .await;
    call_ok(
        &client,
        "add_node",
        json!({"block": "llm.chat", "id": "chat"}),
    )
    .await;
    call_ok(
        &client,
        "add_node",
        json!({"block": "text.template", "id": "note", "config": {"template": "hi"}}),
    )
    .await;
    let before = std::fs::read_to_string(&graph).unwrap();
    let doc = GraphDoc::from_json_str(&before).unwrap();

    // Each refusal is the canvas's, word for word: a number is not a conversation; a tool
    // output goes only where tools are taken, and a graph input is no tool; a node is not
    // wired to itself; a port that is not there is named.
    let refusals = [
        (
            ("count", "value"),
            ("chat", "history"),
            "cannot connect number to messages: the types are unrelated",
        ),
        (
            ("note", "tool"),
            ("chat", "prompt"),
            "cannot connect tool to text: a tool is called by the block it is wired to; wire it to an input that takes tools (an agent's `tools`)",
        ),
        (
            ("count", "tool"),
            ("chat", "prompt"),
            "node `count` has no output `tool`",
        ),
        (
            ("chat", "text"),
            ("chat", "prompt"),
            "a node cannot be wired to itself",
        ),
        (
            ("count", "value"),
            ("chat", "nope"),
            "node `chat` has no input `nope`",
        ),
    ];
    for (from, to, reason) in refusals {
        let wire = json!({
            "from": {"node": from.0, "port": from.1},
            "to": {"node": to.0, "port": to.1}
        });
        let refused = call_refused(&client, "connect", wire).await;
        assert_eq!(refused, reason);
        assert_eq!(refused, canvas_reason(&doc, from, to));
    }
    let refused = call_refused(&client, "add_node", json!({"block": "no.such"})).await;
    assert!(refused.contains("no block `no.such`"), "{refused}");
    let refused = call_refused(
        &client,
        "add_node",
        json!({"block": "llm.chat", "id": "chat"}),
    )
    .await;
    assert!(refused.contains("`chat` is already used"), "{refused}");

    // Refusals leave the file as it was.
    assert_eq!(std::fs::read_to_string(&graph).unwrap(), before);

    // A wire the types allow is made; a second into the same input replaces it.
    call_ok(
        &client,
        "add_node",
        json!({"block": "graph.input", "id": "question", "config": {"type": "text"}}),
    )
    .await;
    let wired = call_ok(
        &client,
        "connect",
        json!({"from": "count.value", "to": "chat.prompt"}),
    )
    .await;
    assert_eq!(wired["replaced_wires"], json!([]));
    let wired = call_ok(
        &client,
        "connect",
        json!({"from": "question.value", "to": "chat.prompt"}),
    )
    .await;
    assert_eq!(
        wired["replaced_wires"],
        json!([{"from": ["count", "value"], "to": ["chat", "prompt"]}])
    );
    let removed = call_ok(&client, "disconnect", json!({"to": "chat.prompt"})).await;
    assert_eq!(
        removed["removed_wires"],
        json!([{"from": ["question", "value"], "to": ["chat", "prompt"]}])
    );
    let refused = call_refused(&client, "disconnect", json!({"to": "chat.prompt"})).await;
    assert_eq!(refused, "no wire from `any output` to `chat.prompt`");
    client.cancel().await.unwrap();
}

/// A graph that writes its `text` input to `out.txt` in the workspace (a side effect).
fn writer_graph(path: &Path) {
    std::fs::write(
        path,
        json!({
            "format": "agentloom.graph", "version": 1, "name": "Writer",
            "nodes": [
                {"id": "text", "block": "graph.input", "config": {"name": "text", "type": "text"}},
                {"id": "write", "block": "file.write", "config": {"path": "out.txt"}}
            ],
            "edges": [{"from": ["text", "value"], "to": ["write", "content"]}]
        })
        .to_string(),
    )
    .unwrap();
}

fn trust(dir: &Path, graph: &Path) {
    let trusted = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .arg("trust")
        .arg(graph)
        .env("XDG_DATA_HOME", dir.join("data"))
        .env_remove("AGENTLOOM_LOG")
        .output()
        .unwrap();
    assert!(trusted.status.success(), "{trusted:?}");
}

#[tokio::test]
async fn a_tool_edit_leaves_a_trusted_file_untrusted_until_its_user_trusts_it() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("writer.agentloom.json");
    writer_graph(&graph);
    trust(dir.path(), &graph);
    let out = dir.path().join("out.txt");
    let client = edit_client(dir.path(), &graph).await;

    // Trusted by its user: the side effect happens.
    let ran = call_ok(&client, "run", json!({"inputs": {"text": "one"}})).await;
    assert_eq!(ran["trusted"], true);
    assert_eq!(ran["status"], "completed", "{ran}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "one");

    // A tool edit (only a move) changes the file: it is no longer the one its user trusted,
    // so it runs in safe mode and its side effect waits for approval.
    call_ok(
        &client,
        "move_node",
        json!({"node": "write", "x": 320, "y": 80}),
    )
    .await;
    let ran = call_ok(&client, "run", json!({"inputs": {"text": "two"}})).await;
    assert_eq!(ran["trusted"], false);
    assert_eq!(ran["status"], "waiting", "{ran}");
    assert!(
        ran["safe_mode"]
            .as_str()
            .unwrap()
            .contains("is not trusted, so it runs in safe mode"),
        "{ran}"
    );
    let write = item(&ran["nodes"], "id", "write");
    assert_eq!(write["status"], "awaiting_approval");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "one");

    // Its user trusts it as it is now: runs are trusted again.
    trust(dir.path(), &graph);
    let ran = call_ok(&client, "run", json!({"inputs": {"text": "three"}})).await;
    assert_eq!(ran["trusted"], true);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "three");
    client.cancel().await.unwrap();
}

/// The model of the graph-builder example, scripted: one editing tool a turn, each turn
/// only once the previous tool's answer came back.
const BUILDER_RULES: &str = r#"rules:
  - name: add_input
    when: {messages_contain: "TASK-BUILD-TWO", turn: 1}
    respond:
      tool_calls: [{name: add_node, arguments: {block: "graph.input", id: "word", config: {type: "text"}}}]
  - name: add_output
    when: {messages_contain: "TASK-BUILD-TWO", turn: 2, tool_result_contains: "word"}
    respond:
      tool_calls: [{name: add_node, arguments: {block: "graph.output", id: "echo"}}]
  - name: wire
    when: {messages_contain: "TASK-BUILD-TWO", turn: 3, tool_result_contains: "missing_input"}
    respond:
      tool_calls: [{name: connect, arguments: {from: {node: "word", port: "value"}, to: {node: "echo", port: "value"}}}]
  - name: check
    when: {messages_contain: "TASK-BUILD-TWO", turn: 4, tool_result_contains: "replaced_wires"}
    respond:
      tool_calls: [{name: validate, arguments: {}}]
  - name: done
    when: {messages_contain: "TASK-BUILD-TWO", turn: 5, tool_result_contains: "valid"}
    respond:
      tool_calls: [{name: finish, arguments: {answer: "built word -> echo"}}]
"#;

#[test]
fn the_graph_builder_example_builds_a_graph_a_scripted_model_asks_for() {
    let Some(fake) = agentloom_tests::FakeLlm::start_with_rules(BUILDER_RULES) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let built = dir.path().join("built.agentloom.json");
    let text = std::fs::read_to_string(
        examples().join("../../docs/examples/graph-builder-agent.agentloom.json"),
    )
    .unwrap();
    let mut builder: Value = serde_json::from_str(&text).unwrap();
    // The example as shipped starts `agentloom mcp --edit` on its file; here, this build of
    // it on a file of the test's, and the scripted model instead of a hosted one.
    assert_eq!(
        builder["mcp_servers"]["editor"]["args"],
        json!(["mcp", "--edit", "web-summary.agentloom.json"])
    );
    let args: Vec<String> = server_args(dir.path(), &built)
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    builder["mcp_servers"]["editor"] =
        json!({"command": env!("CARGO_BIN_EXE_agentloom"), "args": args});
    for node in builder["nodes"].as_array_mut().unwrap() {
        if node["id"] == "builder" {
            let config = node["config"].as_object_mut().unwrap();
            config.remove("credential");
            config.insert("base_url".into(), json!(format!("{}/v1", fake.base())));
            config.insert("model".into(), json!("test-model"));
        }
    }
    let graph = dir.path().join("builder.agentloom.json");
    std::fs::write(&graph, builder.to_string()).unwrap();
    trust(dir.path(), &graph);

    let run = |graph: &Path, input: &str| -> Value {
        let output = Command::new(env!("CARGO_BIN_EXE_agentloom"))
            .arg("run")
            .arg(graph)
            .arg("--json")
            .arg("--db")
            .arg(dir.path().join("runs.sqlite3"))
            .arg("--workspace")
            .arg(dir.path())
            .args(["--input", input])
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .env_remove("AGENTLOOM_LOG")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let report = run(&graph, "goal=TASK-BUILD-TWO: echo a word");
    assert_eq!(
        report["outputs"]["answer"], "built word -> echo",
        "{report}"
    );

    // The graph the agent built, tool by tool, runs.
    let doc = GraphDoc::from_json_str(&std::fs::read_to_string(&built).unwrap()).unwrap();
    let ids: Vec<&str> = doc.nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["echo", "word"]);
    assert_eq!(
        doc.edges,
        [agentloom_core::EdgeDoc::new(
            "word", "value", "echo", "value"
        )]
    );
    let report = run(&built, "word=hello");
    assert_eq!(report["outputs"], json!({"echo": "hello"}), "{report}");
}
