//! `agentloom eval`, `agentloom evals` and `agentloom run --replay` end to end: the real
//! binary, real run logs, the hello example with its shipped cases, an `llm.chat` graph and
//! an agent against fakellm and a local HTTP peer, replayed with both stopped.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::Ordering;

use agentloom_tests::FakeLlm;
use serde_json::{Value, json};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/examples")
        .join(name)
}

fn agentloom(args: &[&str], db: &Path, dir: &Path, fake_port: Option<u16>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    command
        .args(args)
        .arg("--db")
        .arg(db)
        .env_remove("AGENTLOOM_LOG")
        .current_dir(dir);
    if let Some(port) = fake_port {
        command
            .env("AGENTLOOM_SECRET_FAKELLM", "sk-fakellm-test")
            .env(
                "AGENTLOOM_SECRET_FAKELLM_HOSTS",
                format!("127.0.0.1:{port}"),
            );
    }
    command.output().unwrap()
}

fn eval(args: &[&str], db: &Path, dir: &Path, fake_port: Option<u16>) -> Output {
    let mut all = vec!["eval"];
    all.extend_from_slice(args);
    agentloom(&all, db, dir, fake_port)
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn the_hello_example_passes_its_shipped_cases_with_the_json_shape_of_the_docs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    let cases = example("hello.cases.jsonl");
    let output = eval(
        &[s(&hello), "--cases", s(&cases), "--json"],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let result = json_of(&output);
    for key in [
        "eval_id",
        "graph",
        "cases",
        "passed",
        "failed",
        "pass_rate",
        "usage",
        "duration_ms",
    ] {
        assert!(result.get(key).is_some(), "no `{key}` in {result}");
    }
    assert_eq!(result["passed"], 3);
    assert_eq!(result["failed"], 0);
    assert_eq!(result["pass_rate"], 1.0);
    let first = &result["cases"][0];
    assert_eq!(first["name"], "greets Ada");
    assert_eq!(first["passed"], true);
    let run = &first["runs"][0];
    assert_eq!(run["passed"], true);
    let check = &run["checks"][0];
    assert_eq!(
        (&check["output"], &check["check"], &check["passed"]),
        (&json!("greeting"), &json!("equals"), &json!(true))
    );
    assert!(check.get("detail").is_some());
    // Every case ran as a normal run in the log, linked to the evaluation.
    let run_id = run["run_id"].as_str().unwrap();
    let shown = agentloom(&["show", run_id, "--json"], &db, dir.path(), None);
    assert_eq!(json_of(&shown)["outputs"]["greeting"], "Hello, Ada!");
    let listed = json_of(&agentloom(&["evals", "--json"], &db, dir.path(), None));
    assert_eq!(listed[0]["id"], result["eval_id"]);
    assert_eq!(listed[0]["passed"], 3);
}

#[test]
fn a_failing_case_exits_1_with_its_reason_unless_the_pass_rate_is_low_enough() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    let cases = write(
        dir.path(),
        "cases.jsonl",
        r#"{"name": "right", "inputs": {"name": "Ada"}, "expect": {"greeting": "Hello, Ada!"}}
{"name": "wrong", "inputs": {"name": "Ada"}, "expect": {"greeting": "Goodbye, Ada!"}}
"#,
    );
    let output = eval(&[s(&hello), "--cases", s(&cases)], &db, dir.path(), None);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("✗ wrong"), "{table}");
    assert!(
        table.contains("expected \"Goodbye, Ada!\"") || table.contains("expected Goodbye"),
        "{table}"
    );
    assert!(table.contains("1 passed, 1 failed"), "{table}");

    // --repeat: each case runs 3 times; the pass rate carries its interval.
    let output = eval(
        &[
            s(&hello),
            "--cases",
            s(&cases),
            "--json",
            "--repeat",
            "3",
            "--concurrency",
            "3",
            "--min-pass-rate",
            "0.5",
        ],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let result = json_of(&output);
    assert_eq!(result["cases"][0]["runs"].as_array().unwrap().len(), 3);
    assert_eq!(result["pass_rate"], 0.5);
    let interval = result["pass_rate_interval"].as_array().unwrap();
    let (low, high) = (interval[0].as_f64().unwrap(), interval[1].as_f64().unwrap());
    assert!(
        low > 0.18 && low < 0.2 && high > 0.8 && high < 0.82,
        "{interval:?}"
    );
}

#[test]
fn a_broken_cases_file_exits_2_naming_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    for (text, wanted) in [
        (
            "{\"name\": \"a\", \"expect\": {\"greeting\": \"Hello, world!\"}}\n{\"name\": \"b\", \"expect\": {\"greeting\": {\"regex\": \"(unclosed\"}}}\n",
            "cases.jsonl:2: expect.greeting.regex: invalid regex",
        ),
        (
            "{\"name\": \"a\", \"inputs\": {\"nmae\": \"Ada\"}, \"expect\": {\"greeting\": \"x\"}}\n",
            "cases.jsonl:1: inputs: the graph has no input `nmae`",
        ),
        (
            "{\"name\": \"a\", \"expect\": {\"greting\": \"x\"}}\n",
            "cases.jsonl:1: expect.greting: the graph has no output `greting`",
        ),
        ("{\"name\": \"a\"\n", "cases.jsonl:1: -: not a JSON object"),
    ] {
        let cases = write(dir.path(), "cases.jsonl", text);
        let output = eval(&[s(&hello), "--cases", s(&cases)], &db, dir.path(), None);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(wanted), "{}", stderr(&output));
    }
}

#[test]
fn csv_cases_compare_expect_columns_and_a_baseline_names_the_newly_failing_case() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    // A baseline is of the same file: the graph is changed where it is.
    let hello = write(
        dir.path(),
        "hello.agentloom.json",
        &std::fs::read_to_string(example("hello.agentloom.json")).unwrap(),
    );
    let cases = write(
        dir.path(),
        "cases.csv",
        "case,name,expect.greeting\nada,Ada,\"Hello, Ada!\"\nbob,Bob,\"Hello, Bob!\"\n",
    );
    let first = json_of(&eval(
        &[s(&hello), "--cases", s(&cases), "--json"],
        &db,
        dir.path(),
        None,
    ));
    assert_eq!(first["passed"], 2, "{first}");
    let first_id = first["eval_id"].as_str().unwrap();

    // The same graph with another greeting: both cases now fail.
    let changed = std::fs::read_to_string(&hello)
        .unwrap()
        .replace("Hello, {{ name }}!", "Hi, {{ name }}!");
    let changed = write(dir.path(), "hello.agentloom.json", &changed);
    let output = eval(
        &[
            s(&changed),
            "--cases",
            s(&cases),
            "--trust",
            "--baseline",
            first_id,
        ],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("now failing: ada, bob"), "{table}");
    assert!(table.contains("pass rate -100.0 points"), "{table}");
    let output = eval(
        &[
            s(&changed),
            "--cases",
            s(&cases),
            "--trust",
            "--json",
            "--baseline",
            first_id,
        ],
        &db,
        dir.path(),
        None,
    );
    let result = json_of(&output);
    assert_eq!(result["baseline"]["now_failing"], json!(["ada", "bob"]));
    assert_eq!(result["baseline"]["pass_rate_delta"], -1.0);
}

const RULES: &str = r#"
rules:
  - name: judge
    when: {messages_contain: "You judge the output"}
    respond: {content: "{\"pass\": true, \"reason\": \"It is a friendly greeting.\"}"}
  - name: hello
    when: {messages_contain: "Greet Ada"}
    respond: {content: "Hello Ada, nice to meet you"}
  - name: fetch
    when: {messages_contain: "TASK-FETCH", turn: 1}
    respond:
      tool_calls: [{name: http_get, arguments: {url: "PEER_URL"}}]
  - name: fetched
    when: {messages_contain: "TASK-FETCH", turn: 2, tool_result_contains: "payload-42"}
    respond:
      tool_calls: [{name: finish, arguments: {answer: "The page says payload-42."}}]
"#;

fn chat_graph(dir: &Path, fake: &FakeLlm, stream: bool) -> PathBuf {
    let graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "greeter",
        "nodes": [
            {"id": "who", "block": "graph.input", "config": {"name": "who", "type": "text"}},
            {"id": "chat", "block": "llm.chat", "config": {"credential": "fakellm",
                "base_url": format!("{}/v1", fake.base()), "model": "test-model",
                "prompt": "Greet {{ who }}", "stream": stream}},
            {"id": "out", "block": "graph.output", "config": {"name": "reply"}}
        ],
        "edges": [
            {"from": ["who", "value"], "to": ["chat", "who"]},
            {"from": ["chat", "text"], "to": ["out", "value"]}
        ]
    });
    write(
        dir,
        "greeter.json",
        &serde_json::to_string_pretty(&graph).unwrap(),
    )
}

#[test]
fn an_llm_graph_is_checked_by_contains_and_by_fakellm_as_judge_then_replayed_offline() {
    let Some(fake) = FakeLlm::start_with_rules(RULES) else {
        return;
    };
    let port = fake.port();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = chat_graph(dir.path(), &fake, false);
    let cases = write(
        dir.path(),
        "cases.jsonl",
        &format!(
            "{}\n",
            json!({"name": "ada", "inputs": {"who": "Ada"}, "expect": {"reply": {
                "contains": "Ada",
                "llm_judge": {"criteria": "The reply greets Ada kindly.", "credential": "fakellm",
                    "base_url": format!("{}/v1", fake.base()), "model": "judge-model"}}}})
        ),
    );
    let output = eval(
        &[s(&graph), "--cases", s(&cases), "--trust", "--json"],
        &db,
        dir.path(),
        Some(port),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let result = json_of(&output);
    let checks = &result["cases"][0]["runs"][0]["checks"];
    assert_eq!(checks[0]["check"], "contains");
    assert_eq!(checks[1]["check"], "llm_judge");
    assert_eq!(checks[1]["passed"], true, "{checks}");
    assert!(
        checks[1]["detail"]
            .as_str()
            .unwrap()
            .contains("It is a friendly greeting."),
        "{checks}"
    );
    let eval_id = result["eval_id"].as_str().unwrap().to_owned();
    drop(fake);

    // The model is gone: the recorded calls answer, the judge's too, with the same verdict.
    let replay = |cases: &Path| {
        let args = [
            s(&graph),
            "--cases",
            s(cases),
            "--trust",
            "--json",
            "--replay",
            &eval_id,
        ];
        eval(&args, &db, dir.path(), Some(port))
    };
    let output = replay(&cases);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let replayed = json_of(&output);
    assert_eq!(replayed["passed"], 1, "{replayed}");
    assert_eq!(
        replayed["cases"][0]["runs"][0]["checks"], *checks,
        "the replayed judge gives the recorded verdict"
    );

    // Another criterion is another request to the judge: not recorded, so it fails.
    let stricter = write(
        dir.path(),
        "stricter.jsonl",
        &format!(
            "{}\n",
            json!({"name": "ada", "inputs": {"who": "Ada"}, "expect": {"reply": {
                "llm_judge": {"criteria": "The reply is in French.", "credential": "fakellm",
                    "base_url": format!("http://127.0.0.1:{port}/v1"), "model": "judge-model"}}}})
        ),
    );
    let output = replay(&stricter);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let judged = &json_of(&output)["cases"][0]["runs"][0]["checks"][0];
    assert_eq!(judged["check"], "llm_judge");
    assert!(
        judged["detail"]
            .as_str()
            .unwrap()
            .contains("not recorded: judge POST http://127.0.0.1:"),
        "{judged}"
    );
}

/// An agent with `http_get` (and `write_file`) whose goal is the graph input `goal`.
fn agent_graph(dir: &Path, fake: &FakeLlm) -> PathBuf {
    let graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "fetcher",
        "nodes": [
            {"id": "goal", "block": "graph.input", "config": {"name": "goal", "type": "text"}},
            {"id": "agent", "block": "ai.agent", "config": {"credential": "fakellm",
                "base_url": format!("{}/v1", fake.base()), "model": "test-model",
                "builtin_tools": "http_get,write_file", "allow_private_network": true}},
            {"id": "out", "block": "graph.output", "config": {"name": "answer"}}
        ],
        "edges": [
            {"from": ["goal", "value"], "to": ["agent", "goal"]},
            {"from": ["agent", "answer"], "to": ["out", "value"]}
        ]
    });
    write(
        dir,
        "agent.json",
        &serde_json::to_string_pretty(&graph).unwrap(),
    )
}

#[test]
fn an_agent_case_checks_the_tools_it_called() {
    let (peer_url, _) = support::payload_peer();
    let Some(fake) = FakeLlm::start_with_rules(&RULES.replace("PEER_URL", &peer_url)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = agent_graph(dir.path(), &fake);
    let cases = write(
        dir.path(),
        "cases.jsonl",
        &[
            json!({"name": "fetches", "inputs": {"goal": "TASK-FETCH: read the page"},
                "expect": {"answer": {"contains": "payload-42"}, "run": {"tool_called": "http_get", "status": "completed"}}}),
            // fakellm counts turns per first message: each case its own conversation.
            json!({"name": "writes", "inputs": {"goal": "TASK-FETCH: read the page again"},
                "expect": {"run": {"tool_called": "write_file"}}}),
        ]
        .map(|case| case.to_string())
        .join("\n"),
    );
    let output = eval(
        &[s(&graph), "--cases", s(&cases), "--trust", "--json"],
        &db,
        dir.path(),
        Some(fake.port()),
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let result = json_of(&output);
    assert_eq!(result["cases"][0]["passed"], true, "{result}");
    assert_eq!(result["cases"][1]["passed"], false);
    let check = &result["cases"][1]["runs"][0]["checks"][0];
    assert_eq!(check["check"], "tool_called");
    assert!(
        check["detail"].as_str().unwrap().contains("http_get"),
        "{check}"
    );
}

#[test]
fn an_llm_run_replays_with_the_model_stopped_and_a_changed_prompt_misses() {
    for stream in [false, true] {
        let Some(fake) = FakeLlm::start_with_rules(RULES) else {
            return;
        };
        let port = Some(fake.port());
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("runs.sqlite3");
        let graph = chat_graph(dir.path(), &fake, stream);
        let run = |graph: &Path, extra: &[&str]| {
            let mut args = vec!["run", s(graph), "--trust", "--json", "--input", "who=Ada"];
            args.extend_from_slice(extra);
            agentloom(&args, &db, dir.path(), port)
        };
        let live = json_of(&run(&graph, &[]));
        assert_eq!(live["status"], "completed", "{live}");
        assert_eq!(live["outputs"]["reply"], "Hello Ada, nice to meet you");
        let run_id = live["run_id"].as_str().unwrap().to_owned();
        drop(fake);

        let replayed = json_of(&run(&graph, &["--replay", &run_id]));
        assert_eq!(
            replayed["status"], "completed",
            "stream {stream}: {replayed}"
        );
        assert_eq!(replayed["outputs"], live["outputs"]);

        // Another prompt is another request: not in the recording, so its node fails.
        let text = std::fs::read_to_string(&graph)
            .unwrap()
            .replace("Greet {{ who }}", "Greet {{ who }} warmly");
        let changed = write(dir.path(), "changed.json", &text);
        let missed = run(&changed, &["--replay", &run_id]);
        assert_eq!(missed.status.code(), Some(1));
        let error = json_of(&missed)["error"].as_str().unwrap().to_owned();
        assert!(
            error.contains("not recorded: chat POST http://127.0.0.1:"),
            "{error}"
        );
    }
}

#[test]
fn an_agent_run_replays_its_model_and_tool_calls_with_both_peers_stopped() {
    let (peer_url, served) = support::payload_peer();
    let Some(fake) = FakeLlm::start_with_rules(&RULES.replace("PEER_URL", &peer_url)) else {
        return;
    };
    let port = Some(fake.port());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = agent_graph(dir.path(), &fake);
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            s(&graph),
            "--trust",
            "--json",
            "--input",
            "goal=TASK-FETCH: read the page",
        ];
        args.extend_from_slice(extra);
        json_of(&agentloom(&args, &db, dir.path(), port))
    };
    let live = run(&[]);
    assert_eq!(live["status"], "completed", "{live}");
    assert_eq!(live["outputs"]["answer"], "The page says payload-42.");
    assert_eq!(served.load(Ordering::SeqCst), 1);
    let run_id = live["run_id"].as_str().unwrap().to_owned();
    drop(fake);

    let replayed = run(&["--replay", &run_id]);
    assert_eq!(replayed["status"], "completed", "{replayed}");
    assert_eq!(replayed["outputs"], live["outputs"]);
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "the tool's page came from the recording"
    );
}

#[test]
fn replaying_a_run_that_is_not_in_the_log_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    let output = agentloom(
        &["run", s(&hello), "--replay", "nosuchrun"],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no run `nosuchrun`"),
        "{}",
        stderr(&output)
    );
}

/// A launcher of server-everything that counts its starts in `dir/starts`, and fails to
/// start (as a server that is not installed would) while `dir/offline` exists.
fn counting_launcher(dir: &Path, launcher: &Path) -> PathBuf {
    let script = dir.join("everything.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ -e '{dir}/offline' ]; then echo 'the server is not available' >&2; exit 1; fi\necho started >> '{dir}/starts'\nexec '{launcher}' \"$@\"\n",
            dir = dir.display(),
            launcher = launcher.display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        let mut permissions = std::fs::metadata(&script).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&script, permissions).unwrap();
    }
    script
}

fn starts(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("starts"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn an_mcp_run_replays_without_its_server_and_a_miss_goes_live_only_when_asked() {
    let Some(everything) = agentloom_tests::mcp::server_everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let launcher = counting_launcher(dir.path(), &everything);
    let graph = write(
        dir.path(),
        "echo.json",
        &serde_json::to_string_pretty(&json!({
            "format": "agentloom.graph", "version": 1, "name": "echo",
            "mcp_servers": {"everything": {"command": launcher, "args": ["stdio"]}},
            "nodes": [
                {"id": "message", "block": "graph.input", "config": {"name": "message", "type": "text"}},
                {"id": "echo", "block": "mcp.everything.echo"},
                {"id": "out", "block": "graph.output", "config": {"name": "echoed"}}
            ],
            "edges": [
                {"from": ["message", "value"], "to": ["echo", "message"]},
                {"from": ["echo", "text"], "to": ["out", "value"]}
            ]
        }))
        .unwrap(),
    );
    let run = |message: &str, extra: &[&str]| {
        let input = format!("message={message}");
        let mut args = vec!["run", s(&graph), "--trust", "--json", "--input", &input];
        args.extend_from_slice(extra);
        agentloom(&args, &db, dir.path(), None)
    };
    let live = json_of(&run("hi", &[]));
    assert_eq!(live["status"], "completed", "{live}");
    assert_eq!(live["outputs"]["echoed"], "Echo: hi");
    assert_eq!(starts(dir.path()), 1);
    let run_id = live["run_id"].as_str().unwrap().to_owned();

    // The server cannot start now: the replay lists its tools and answers its call from
    // the recording, starting nothing.
    std::fs::write(dir.path().join("offline"), "").unwrap();
    let output = run("hi", &["--replay", &run_id]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let replayed = json_of(&output);
    assert_eq!(replayed["outputs"], live["outputs"]);
    // Another message is a call the recording does not have: the node fails, no server.
    let missed = run("bye", &["--replay", &run_id]);
    assert_eq!(missed.status.code(), Some(1), "{}", stderr(&missed));
    let error = json_of(&missed)["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("not recorded: echo MCP mcp://everything/echo"),
        "{error}"
    );
    assert_eq!(starts(dir.path()), 1, "no replay started the server");

    // With --replay-miss live, the call that was not recorded starts the server.
    std::fs::remove_file(dir.path().join("offline")).unwrap();
    let output = run("bye", &["--replay", &run_id, "--replay-miss", "live"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json_of(&output)["outputs"]["echoed"], "Echo: bye");
    assert_eq!(starts(dir.path()), 2);
    // A replay of a replayed run lists the tools offline too: the list is recorded again.
    std::fs::write(dir.path().join("offline"), "").unwrap();
    let again = json_of(&output)["run_id"].as_str().unwrap().to_owned();
    let output = run("bye", &["--replay", &again]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json_of(&output)["outputs"]["echoed"], "Echo: bye");
    assert_eq!(starts(dir.path()), 2);
}

/// The JUnit XML at `path` as Python's XML parser reads it (any malformed byte fails the
/// test): the root's tag and every `<testsuite>` with its attributes and its test cases,
/// each with its attributes and its `<failure>`, `<error>` or `<skipped>` if any.
fn junit_of(path: &Path) -> Value {
    const READ: &str = r#"
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
out = {"root": root.tag, "suites": []}
for suite in suites:
    cases = []
    for case in suite.findall("testcase"):
        shown = {"attrib": case.attrib}
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                shown[kind] = {"attrib": found.attrib, "text": found.text or ""}
        cases.append(shown)
    out["suites"].append({"attrib": suite.attrib, "cases": cases})
print(json.dumps(out))
"#;
    let output = Command::new("python3")
        .arg("-c")
        .arg(READ)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "not well-formed XML: {}\n{}",
        stderr(&output),
        std::fs::read_to_string(path).unwrap_or_default()
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The one `<testsuite>` of a JUnit report, with the attributes the JUnit schema requires.
fn only_suite(report: &Value) -> &Value {
    assert_eq!(report["root"], "testsuites", "{report}");
    let suites = report["suites"].as_array().unwrap();
    assert_eq!(suites.len(), 1, "{report}");
    let suite = &suites[0];
    for key in ["name", "tests", "failures", "errors", "time"] {
        assert!(suite["attrib"].get(key).is_some(), "no `{key}` in {suite}");
    }
    for case in suite["cases"].as_array().unwrap() {
        for key in ["name", "classname", "time"] {
            assert!(case["attrib"].get(key).is_some(), "no `{key}` in {case}");
        }
        for kind in ["failure", "error"] {
            if let Some(element) = case.get(kind) {
                assert!(element["attrib"].get("message").is_some(), "{case}");
            }
        }
    }
    suite
}

fn count(suite: &Value, attribute: &str) -> u64 {
    suite["attrib"][attribute]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn testcase<'a>(suite: &'a Value, name: &str) -> &'a Value {
    suite["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|case| case["attrib"]["name"] == name)
        .unwrap_or_else(|| panic!("no test case `{name}` in {suite}"))
}

#[test]
fn junit_reports_every_case_run_with_its_failed_checks_as_well_formed_xml() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    // A hostile name and expectation: markup, quotes and a control character XML refuses.
    let cases = write(
        dir.path(),
        "cases.jsonl",
        r#"{"name": "right", "inputs": {"name": "Ada"}, "expect": {"greeting": "Hello, Ada!"}}
{"name": "wrong", "inputs": {"name": "Ada"}, "expect": {"greeting": "Goodbye, Ada!"}}
{"name": "bad <&\"\u0001' ]]>", "inputs": {"name": "<&\"\u0001"}, "expect": {"greeting": "</failure>&\u0001"}}
"#,
    );
    let report = dir.path().join("reports").join("junit.xml");
    std::fs::create_dir(report.parent().unwrap()).unwrap();
    let output = eval(
        &[
            s(&hello),
            "--cases",
            s(&cases),
            "--json",
            "--repeat",
            "2",
            "--junit",
            s(&report),
        ],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let summary = json_of(&output);
    let junit = junit_of(&report);
    let suite = only_suite(&junit);
    assert_eq!(suite["attrib"]["name"], "Hello");
    // The counts are the summary's: every case run a test case, every failed run a failure.
    let failed_runs = summary["cases"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|case| case["runs"].as_array().unwrap())
        .filter(|run| run["passed"] == false)
        .count() as u64;
    assert_eq!(count(suite, "tests"), summary["runs"].as_u64().unwrap());
    assert_eq!(count(suite, "tests"), 6);
    assert_eq!(count(suite, "failures"), failed_runs);
    assert_eq!(count(suite, "failures"), 4);
    assert_eq!(count(suite, "errors"), 0);
    for case in suite["cases"].as_array().unwrap() {
        assert_eq!(case["attrib"]["classname"], "Hello", "{case}");
    }
    for name in ["right #1", "right #2"] {
        let case = testcase(suite, name);
        assert!(case.get("failure").is_none(), "{case}");
    }
    // A failing case shows its check, what was expected and what came.
    let wrong = testcase(suite, "wrong #2");
    let message = wrong["failure"]["attrib"]["message"].as_str().unwrap();
    assert!(message.starts_with("greeting equals: "), "{message}");
    let text = wrong["failure"]["text"].as_str().unwrap();
    let detail = summary["cases"][1]["runs"][1]["checks"][0]["detail"]
        .as_str()
        .unwrap();
    assert!(
        text.contains(&format!("greeting equals: {detail}")),
        "{text}"
    );
    assert!(text.contains("Goodbye, Ada!"), "{text}");
    let run_id = summary["cases"][1]["runs"][1]["run_id"].as_str().unwrap();
    assert!(text.contains(run_id), "{text}");
    // The hostile case reads back as its name without the control character.
    let hostile = testcase(suite, "bad <&\"' ]]> #1");
    let text = hostile["failure"]["text"].as_str().unwrap();
    assert!(text.contains("</failure>&"), "{text}");
    assert!(!text.contains('\u{1}'), "{text}");
    // Written whole: nothing but the report is left beside it.
    let left: Vec<_> = std::fs::read_dir(report.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("junit.xml")]);

    // A run that errors is an <error>, not a failure.
    let parse = write(
        dir.path(),
        "parse.agentloom.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "Parse",
            "nodes": [
                {"id": "text", "block": "graph.input", "config": {"name": "text", "type": "text"}},
                {"id": "parse", "block": "json.parse"},
                {"id": "out", "block": "graph.output", "config": {"name": "parsed"}}
            ],
            "edges": [
                {"from": ["text", "value"], "to": ["parse", "text"]},
                {"from": ["parse", "value"], "to": ["out", "value"]}
            ]
        })
        .to_string(),
    );
    let cases = write(
        dir.path(),
        "parse.jsonl",
        r#"{"name": "fine", "inputs": {"text": "[1]"}, "expect": {"parsed": {"contains": "1"}}}
{"name": "broken", "inputs": {"text": "{"}, "expect": {"parsed": {"contains": "1"}}}
"#,
    );
    let output = eval(
        &[
            s(&parse),
            "--cases",
            s(&cases),
            "--trust",
            "--junit",
            s(&report),
        ],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let junit = junit_of(&report);
    let suite = only_suite(&junit);
    assert_eq!(suite["attrib"]["name"], "Parse");
    assert_eq!(
        (
            count(suite, "tests"),
            count(suite, "failures"),
            count(suite, "errors")
        ),
        (2, 0, 1),
        "{suite}"
    );
    assert!(testcase(suite, "fine").get("error").is_none());
    let error = &testcase(suite, "broken")["error"];
    let message = error["attrib"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("run status: the run failed"),
        "{message}"
    );

    // A report that could not be written is found before anything runs.
    let nowhere = dir.path().join("missing").join("junit.xml");
    let output = eval(
        &[s(&hello), "--cases", s(&cases), "--junit", s(&nowhere)],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--junit"), "{}", stderr(&output));
}

/// Eight cases of 400 ms each, one at a time: an evaluation that can be stopped midway.
fn slow_evaluation(dir: &Path) -> (PathBuf, PathBuf) {
    let graph = write(
        dir,
        "slow.agentloom.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "slow",
            "nodes": [
                {"id": "name", "block": "graph.input", "config": {"name": "name", "type": "text"}},
                {"id": "wait", "block": "control.delay", "config": {"ms": 400}},
                {"id": "out", "block": "graph.output", "config": {"name": "greeting"}}
            ],
            "edges": [
                {"from": ["name", "value"], "to": ["wait", "value"]},
                {"from": ["wait", "value"], "to": ["out", "value"]}
            ]
        })
        .to_string(),
    );
    let cases: String = (1..=8)
        .map(|i| {
            format!(
                "{{\"name\": \"c{i}\", \"inputs\": {{\"name\": \"Ada\"}}, \"expect\": {{\"greeting\": \"Ada\"}}}}\n"
            )
        })
        .collect();
    (graph, write(dir, "slow.jsonl", &cases))
}

#[test]
fn a_stopped_evaluation_is_listed_as_stopped_and_is_no_baseline_unless_allowed() {
    use std::io::BufRead as _;

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let (graph, cases) = slow_evaluation(dir.path());
    let report = dir.path().join("junit.xml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .args(["eval", s(&graph), "--cases", s(&cases), "--trust", "--json"])
        .args(["--concurrency", "1", "--junit", s(&report), "--db", s(&db)])
        .env_remove("AGENTLOOM_LOG")
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Ctrl+C once the first case is done.
    loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the first case is done");
        if line.starts_with("[1/8]") {
            break;
        }
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let output = child.wait_with_output().unwrap();
    let errors: Vec<String> = rx.try_iter().collect();
    assert_eq!(output.status.code(), Some(1), "{errors:?}");
    let summary = json_of(&output);
    assert_eq!(summary["stopped"], true, "{summary}");
    let runs = summary["runs"].as_u64().unwrap();
    let not_started = summary["not_started"].as_u64().unwrap();
    assert!((1..8).contains(&runs), "{summary}");
    assert_eq!(summary["runs_planned"], 8, "{summary}");
    // The cases not started count neither as passed nor as failed; the pass rate is over
    // the runs made, all of which passed (the one the stop cut short is not one of them).
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["passed"].as_u64().unwrap(), runs, "{summary}");
    assert_eq!(runs + not_started, 8, "{summary}");
    assert_eq!(summary["pass_rate"], 1.0, "{summary}");
    let never = summary["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|case| case["not_started"] == true)
        .count() as u64;
    assert_eq!(never, not_started, "{summary}");
    let eval_id = summary["eval_id"].as_str().unwrap();

    // The JUnit report skips what did not run, and is valid under the JUnit schema.
    if let Some(schema) = junit_schema() {
        validate_against(&schema, &report).unwrap_or_else(|reasons| {
            panic!(
                "not valid JUnit XML: {reasons}\n{}",
                std::fs::read_to_string(&report).unwrap()
            )
        });
    }
    let junit = junit_of(&report);
    let suite = only_suite(&junit);
    assert_eq!(count(suite, "tests"), 8, "{suite}");
    assert_eq!(count(suite, "skipped"), not_started, "{suite}");
    assert_eq!(
        (count(suite, "failures"), count(suite, "errors")),
        (0, 0),
        "{suite}"
    );

    // Listed as stopped, with its cases not started apart.
    let listed = agentloom(&["evals"], &db, dir.path(), None);
    let table = String::from_utf8_lossy(&listed.stdout);
    let line = table.lines().find(|l| l.starts_with(eval_id)).unwrap();
    assert!(line.contains(&format!("stopped after {runs}/8")), "{line}");
    assert!(line.contains("100%"), "{line}");
    assert!(
        line.contains(&format!("{runs:>3} passed   0 failed")),
        "{line}"
    );
    assert!(
        line.contains(&format!("{not_started:>3} not started")),
        "{line}"
    );
    let listed = json_of(&agentloom(&["evals", "--json"], &db, dir.path(), None));
    assert_eq!(listed[0]["id"], eval_id);
    assert_eq!(listed[0]["stopped"], true);
    assert_eq!(listed[0]["not_started"], not_started);
    assert_eq!(listed[0]["failed"], 0);

    // Not a baseline: its cases not run would read as changes.
    let output = eval(
        &[
            s(&graph),
            "--cases",
            s(&cases),
            "--trust",
            "--baseline",
            eval_id,
        ],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let why = stderr(&output);
    assert!(
        why.contains(&format!("stopped after {runs}/8 runs")),
        "{why}"
    );
    assert!(why.contains("--allow-partial-baseline"), "{why}");
    // Unless asked for; it then runs and compares.
    let output = eval(
        &[
            s(&graph),
            "--cases",
            s(&cases),
            "--trust",
            "--json",
            "--concurrency",
            "8",
            "--baseline",
            eval_id,
            "--allow-partial-baseline",
        ],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let result = json_of(&output);
    assert_eq!(result["baseline"]["eval_id"], eval_id);
    assert_eq!(result["baseline"]["now_failing"], json!([]));
    assert_eq!(result["baseline"]["now_passing"], json!([]));
    assert!(result.get("stopped").is_none(), "{result}");
    // A finished evaluation is listed as before.
    let listed = agentloom(&["evals"], &db, dir.path(), None);
    let table = String::from_utf8_lossy(&listed.stdout);
    let line = table
        .lines()
        .find(|l| l.starts_with(result["eval_id"].as_str().unwrap()))
        .unwrap();
    assert!(!line.contains("stopped"), "{line}");
    assert!(line.contains("  8 passed   0 failed"), "{line}");
}

#[test]
fn a_stopped_evaluation_recorded_before_not_started_was_kept_is_listed_as_stopped_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    let cases = example("hello.cases.jsonl");
    let summary = json_of(&eval(
        &[s(&hello), "--cases", s(&cases), "--json"],
        &db,
        dir.path(),
        None,
    ));
    let eval_id = summary["eval_id"].as_str().unwrap();
    // As an earlier version kept a stopped evaluation: its cases with no run counted as
    // failed, nothing said how many were not started.
    let mut old = summary.clone();
    old["stopped"] = json!(true);
    old["cases"][1]["runs"] = json!([]);
    old["cases"][1]["passed"] = json!(false);
    old["cases"][2]["runs"] = json!([]);
    old["cases"][2]["passed"] = json!(false);
    old["runs"] = json!(1);
    old["passed"] = json!(1);
    old["failed"] = json!(2);
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute(
        "UPDATE evaluations SET passed = 1, failed = 2, summary_json = ?1 WHERE id = ?2",
        rusqlite::params![old.to_string(), eval_id],
    )
    .unwrap();
    drop(conn);
    let listed = agentloom(&["evals"], &db, dir.path(), None);
    let table = String::from_utf8_lossy(&listed.stdout);
    let line = table.lines().find(|l| l.starts_with(eval_id)).unwrap();
    assert!(line.contains("stopped after 1/3"), "{line}");
    assert!(
        line.contains("  1 passed   0 failed   2 not started"),
        "{line}"
    );
    let output = eval(
        &[s(&hello), "--cases", s(&cases), "--baseline", eval_id],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("stopped after 1/3 runs (2 cases not started)"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_baseline_of_another_graph_an_empty_id_and_an_ambiguous_id_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let text = std::fs::read_to_string(example("hello.agentloom.json")).unwrap();
    let hello = write(dir.path(), "hello.agentloom.json", &text);
    let mut other: Value = serde_json::from_str(&text).unwrap();
    other["name"] = json!("other");
    let other = write(
        dir.path(),
        "other.agentloom.json",
        &serde_json::to_string_pretty(&other).unwrap(),
    );
    let cases = example("hello.cases.jsonl");
    let evaluate = |graph: &Path, more: &[&str]| {
        let mut args = vec![s(graph), "--cases", s(&cases), "--trust", "--json"];
        args.extend_from_slice(more);
        eval(&args, &db, dir.path(), None)
    };
    let first = json_of(&evaluate(&hello, &[]));
    let first_id = first["eval_id"].as_str().unwrap().to_owned();

    // Another graph's evaluation: exit 2, both graphs named, nothing evaluated.
    let output = evaluate(&other, &["--baseline", &first_id]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    for named in [
        "`Hello`",
        "hello.agentloom.json",
        "`other`",
        "other.agentloom.json",
        first_id.as_str(),
    ] {
        assert!(message.contains(named), "`{named}` not in: {message}");
    }
    assert!(output.stdout.is_empty());

    // The same file, changed: its baseline is the evaluation of before.
    let changed = text.replace("Hello, {{ name }}!", "Hi, {{ name }}!");
    std::fs::write(&hello, changed).unwrap();
    let output = evaluate(&hello, &["--baseline", &first_id]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let second = json_of(&output);
    assert_eq!(second["baseline"]["eval_id"], first_id.as_str());
    assert!(
        second["baseline"]["pass_rate_delta"].as_f64().unwrap() < 0.0,
        "{second}"
    );
    let second_id = second["eval_id"].as_str().unwrap();

    // An empty id names no evaluation (it once matched the only one).
    let output = evaluate(&hello, &["--baseline", ""]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--baseline '': an empty id names no evaluation"),
        "{}",
        stderr(&output)
    );
    let output = evaluate(&hello, &["--replay", ""]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("an empty id"),
        "{}",
        stderr(&output)
    );

    // A prefix of both ids (UUIDv7s made a moment apart share their start) names both.
    let shared: String = first_id
        .chars()
        .zip(second_id.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a)
        .collect();
    assert!(!shared.is_empty(), "{first_id} {second_id}");
    let output = evaluate(&hello, &["--baseline", &shared]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(message.contains("several evaluations"), "{message}");
    assert!(
        message.contains(first_id.as_str()) && message.contains(second_id),
        "{message}"
    );
    let listed = json_of(&agentloom(&["evals", "--json"], &db, dir.path(), None));
    assert_eq!(
        listed.as_array().unwrap().len(),
        2,
        "no evaluation was added"
    );
}

/// An `llm.chat` graph against fakellm at $1 an input token, $2 an output token.
fn priced_chat_graph(dir: &Path, fake: &FakeLlm) -> PathBuf {
    let graph = chat_graph(dir, fake, false);
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&graph).unwrap()).unwrap();
    doc["nodes"][1]["config"]["price_in"] = json!(1_000_000.0);
    doc["nodes"][1]["config"]["price_out"] = json!(2_000_000.0);
    std::fs::write(&graph, doc.to_string()).unwrap();
    graph
}

#[test]
fn a_replay_says_so_with_its_cost_recorded_not_spent_and_its_repeats() {
    let Some(fake) = FakeLlm::start_with_rules(RULES) else {
        return;
    };
    let port = fake.port();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = priced_chat_graph(dir.path(), &fake);
    let case =
        json!({"name": "ada", "inputs": {"who": "Ada"}, "expect": {"reply": {"contains": "Ada"}}});
    let cases = write(dir.path(), "ada.jsonl", &format!("{case}\n"));
    let evaluate = |more: &[&str]| {
        let mut args = vec![s(&graph), "--cases", s(&cases), "--trust", "--repeat", "2"];
        args.extend_from_slice(more);
        eval(&args, &db, dir.path(), Some(port))
    };
    let output = evaluate(&["--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let live = json_of(&output);
    let spent = live["usage"]["cost_usd"].as_f64().unwrap();
    assert!(spent > 0.0, "{live}");
    assert!(live.get("replay").is_none(), "{live}");
    let live_id = live["eval_id"].as_str().unwrap().to_owned();
    drop(fake);

    // Nothing goes out: what the runs cost is what was recorded, nothing is spent.
    let output = evaluate(&["--json", "--replay", &live_id]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let replayed = json_of(&output);
    assert_eq!(
        replayed["replay"],
        json!({"from": live_id, "miss": "fail", "live_calls": 0})
    );
    assert_eq!(replayed["repeat"], 2);
    assert_eq!(replayed["usage"]["cost_usd"], 0.0, "{replayed}");
    assert_eq!(replayed["usage"]["input_tokens"], 0, "{replayed}");
    let recorded = replayed["recorded_usage"]["cost_usd"].as_f64().unwrap();
    assert!((recorded - spent).abs() < 1e-9, "{recorded} != {spent}");
    assert_eq!(replayed["cases"][0]["cost_usd"], 0.0);
    assert!((replayed["cases"][0]["recorded_cost_usd"].as_f64().unwrap() - spent).abs() < 1e-9);
    let replayed_id = replayed["eval_id"].as_str().unwrap().to_owned();

    // The table says it too.
    let output = evaluate(&["--replay", &live_id]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains(&format!("recorded ${spent:.4}, spent $0.0000")),
        "{table}"
    );
    assert!(
        table.contains(&format!(
            "replay of {live_id} (calls not recorded fail; no call made for real), repeat 2"
        )),
        "{table}"
    );
    assert!(
        table.lines().next().unwrap().contains("recorded"),
        "{table}"
    );

    // And the list: the replays marked with what they recorded; every evaluation's repeats.
    let output = agentloom(&["evals"], &db, dir.path(), None);
    let listing = String::from_utf8_lossy(&output.stdout);
    let line_of = |id: &str| {
        listing
            .lines()
            .find(|line| line.starts_with(id))
            .unwrap_or_else(|| panic!("{id} not in {listing}"))
            .to_owned()
    };
    let line = line_of(&replayed_id);
    assert!(line.contains(&format!("replay of {live_id}")), "{line}");
    assert!(
        line.contains(&format!("recorded ${spent:.4}, spent $0.0000")),
        "{line}"
    );
    assert!(line.contains("×2"), "{line}");
    let line = line_of(&live_id);
    assert!(!line.contains("replay"), "{line}");
    assert!(
        line.contains(&format!("${spent:.4}")) && line.contains("×2"),
        "{line}"
    );
    let listed = json_of(&agentloom(&["evals", "--json"], &db, dir.path(), None));
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["id"] == replayed_id.as_str())
        .unwrap();
    assert_eq!(row["replay"]["from"], live_id.as_str());
    assert_eq!(row["cost_usd"], 0.0);
    assert_eq!(row["repeat"], 2);
    assert!((row["recorded_cost_usd"].as_f64().unwrap() - spent).abs() < 1e-9);
}

#[test]
fn add_case_writes_a_past_runs_inputs_and_outputs_as_a_case_that_passes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = write(
        dir.path(),
        "hello.agentloom.json",
        &std::fs::read_to_string(example("hello.agentloom.json")).unwrap(),
    );
    let run_with = |name: &str| {
        let input = format!("name={name}");
        let output = agentloom(
            &["run", s(&hello), "--input", &input, "--json"],
            &db,
            dir.path(),
            None,
        );
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        json_of(&output)["run_id"].as_str().unwrap().to_owned()
    };
    let (zoe, ada) = (run_with("Zoë"), run_with("Ada"));
    let cases = dir.path().join("from-runs.jsonl");
    let add = |more: &[&str]| {
        let mut args = vec!["eval", "add-case"];
        args.extend_from_slice(more);
        agentloom(&args, &db, dir.path(), None)
    };

    // A missing file is made; the run's inputs and its outputs as what to expect.
    let output = add(&[&zoe, "--to", s(&cases), "--expect-current"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = std::fs::read_to_string(&cases).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["inputs"], json!({"name": "Zoë"}));
    assert_eq!(first["expect"], json!({"greeting": "Hello, Zoë!"}));
    assert_eq!(first["name"], format!("run {}", &zoe[..12]));

    // Appended by a prefix of its id under a name; the same name again is refused.
    let output = add(&[
        &ada[..20],
        "--to",
        s(&cases),
        "--expect-current",
        "--name",
        "Ada",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stderr(&output).contains("(line 2)"), "{}", stderr(&output));
    let output = add(&[&zoe, "--to", s(&cases), "--name", "Ada"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("from-runs.jsonl:2: there is a case named \"Ada\" already"),
        "{}",
        stderr(&output)
    );
    // Without --expect-current the case checks that the run completes.
    let output = add(&[&zoe, "--to", s(&cases), "--name", "completes"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = std::fs::read_to_string(&cases).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    let third: Value = serde_json::from_str(text.lines().nth(2).unwrap()).unwrap();
    assert_eq!(third["expect"], json!({"run": "completes"}));

    // The round trip: the cases written pass on the same graph.
    let output = eval(
        &[s(&hello), "--cases", s(&cases), "--json"],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let result = json_of(&output);
    assert_eq!(
        (result["passed"].as_u64(), result["failed"].as_u64()),
        (Some(3), Some(0))
    );
    // And they fail on a changed one: the expectations are real.
    let changed = std::fs::read_to_string(&hello)
        .unwrap()
        .replace("Hello, {{ name }}!", "Hi, {{ name }}!");
    std::fs::write(&hello, changed).unwrap();
    let output = eval(
        &[s(&hello), "--cases", s(&cases), "--json"],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(json_of(&output)["failed"], 2);

    // A file a Windows editor saved (BOM, CRLF, no last newline) is appended to cleanly.
    let windows = write(
        dir.path(),
        "windows.jsonl",
        "\u{feff}{\"name\": \"a\", \"inputs\": {\"name\": \"A\"}, \"expect\": {\"run\": \"completes\"}}\r\n\r\n{\"name\": \"b\", \"inputs\": {}, \"expect\": {\"run\": \"completes\"}}",
    );
    let output = add(&[&ada, "--to", s(&windows), "--expect-current"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stderr(&output).contains("(line 4)"), "{}", stderr(&output));
    let output = eval(&[s(&hello), "--cases", s(&windows)], &db, dir.path(), None);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("run "),
        "the added case is read: {}",
        stderr(&output)
    );

    // Refused: an unknown run, an empty id, a CSV file, a broken cases file.
    for (args, said) in [
        (vec!["nosuchrun", "--to", s(&cases)], "no run `nosuchrun`"),
        (vec!["", "--to", s(&cases)], "an empty run id"),
        (
            vec![ada.as_str(), "--to", "cases.csv"],
            "give a .jsonl file",
        ),
    ] {
        let output = add(&args);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(said), "{}", stderr(&output));
    }
    let broken = write(dir.path(), "broken.jsonl", "{\"name\": \"x\"\n");
    let output = add(&[&ada, "--to", s(&broken)]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("broken.jsonl:1:"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&broken).unwrap(),
        "{\"name\": \"x\"\n"
    );
}

#[test]
fn the_table_lines_up_names_of_any_width_as_a_terminal_shows_them() {
    use unicode_width::UnicodeWidthStr as _;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    // Wide characters (two columns each), an accent made of two characters, a tab.
    let names = ["ada", "日本語の挨拶", "Zoe\u{301} 👋", "tab\there"];
    let cases: String = names
        .iter()
        .map(|name| {
            format!(
                "{}\n",
                json!({"name": name, "inputs": {"name": "Ada"}, "expect": {"greeting": "Hello, Ada!"}})
            )
        })
        .collect();
    let cases = write(dir.path(), "cases.jsonl", &cases);
    let output = eval(&[s(&hello), "--cases", s(&cases)], &db, dir.path(), None);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    let lines: Vec<&str> = table.lines().take(1 + names.len()).collect();
    // Where each column ends on screen: after "checks"/"1/1", "cost"/"$0.0000", "time"/"N ms".
    let end_of = |line: &str, cell: &str| -> usize {
        let at = line
            .find(cell)
            .unwrap_or_else(|| panic!("no `{cell}` in `{line}`"));
        line[..at + cell.len()].width()
    };
    let header = lines[0];
    let expected = [end_of(header, "checks"), end_of(header, "cost")];
    for line in &lines[1..] {
        assert_eq!(
            [end_of(line, "1/1"), end_of(line, "$0.0000")],
            expected,
            "columns do not line up:\n{table}"
        );
        let time_end = line.find(" ms").unwrap() + 3;
        assert_eq!(
            line[..time_end].width(),
            end_of(header, "time"),
            "\n{table}"
        );
    }
}

/// The JUnit schema (Jenkins' junit-10.xsd, as pytest's source ships it), where
/// `scripts/test-all.sh` puts it, or `AGENTLOOM_JUNIT_XSD`; `None` (the test skipped) only
/// with `AGENTLOOM_SKIP_PEERS=1`.
fn junit_schema() -> Option<PathBuf> {
    let path = std::env::var_os("AGENTLOOM_JUNIT_XSD").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/junit-schema/junit-10.xsd"),
        PathBuf::from,
    );
    let validator = Command::new("python3")
        .args(["-c", "import xmlschema"])
        .status()
        .is_ok_and(|status| status.success());
    if path.is_file() && validator {
        return Some(path);
    }
    assert!(
        std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1"),
        "no JUnit schema at {} or no python3 xmlschema: scripts/test-all.sh installs both \
         (or set AGENTLOOM_SKIP_PEERS=1 to skip the tests that need them)",
        path.display()
    );
    None
}

/// Whether the XML at `report` is valid under the XSD at `schema`; the validator's reasons.
fn validate_against(schema: &Path, report: &Path) -> Result<(), String> {
    const VALIDATE: &str = r#"
import sys, xmlschema
schema = xmlschema.XMLSchema(sys.argv[1])
errors = [str(e) for e in schema.iter_errors(sys.argv[2])]
print("\n".join(errors))
sys.exit(1 if errors else 0)
"#;
    let output = Command::new("python3")
        .args(["-c", VALIDATE])
        .arg(schema)
        .arg(report)
        .output()
        .unwrap();
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(&output)
        ))
    }
}

#[test]
fn junit_validates_against_the_junit_schema_and_a_failure_shows_its_checks_detail() {
    let Some(schema) = junit_schema() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let hello = example("hello.agentloom.json");
    let cases = write(
        dir.path(),
        "cases.jsonl",
        &[
            hello_case_line("ada", "Ada", json!("Hello, Ada!")),
            hello_case_line("bob <&> \"quoted\"", "Bob", json!({"contains": "Goodbye"})),
        ]
        .concat(),
    );
    let report = dir.path().join("report.xml");
    let output = eval(
        &[
            s(&hello),
            "--cases",
            s(&cases),
            "--repeat",
            "2",
            "--json",
            "--junit",
            s(&report),
        ],
        &db,
        dir.path(),
        None,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let detail = json_of(&output)["cases"][1]["runs"][0]["checks"][0]["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    if let Err(reasons) = validate_against(&schema, &report) {
        panic!(
            "not valid JUnit XML: {reasons}\n{}",
            std::fs::read_to_string(&report).unwrap()
        );
    }
    let suite = only_suite(&junit_of(&report)).clone();
    let failed = testcase(&suite, "bob <&> \"quoted\" #2");
    let message = failed["failure"]["attrib"]["message"].as_str().unwrap();
    assert_eq!(message, format!("greeting contains: {detail}"), "{failed}");
    assert!(detail.contains("Goodbye"), "{detail}");
    assert!(testcase(&suite, "ada #1").get("failure").is_none());
}

/// One hello case as a JSON line: `who` greeted, `expect` of the greeting.
fn hello_case_line(name: &str, who: &str, expect: Value) -> String {
    format!(
        "{}\n",
        json!({"name": name, "inputs": {"name": who}, "expect": {"greeting": expect}})
    )
}
