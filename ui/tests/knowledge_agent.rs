//! The agent with knowledge and notes, end to end through `agentloom run` with a real run
//! log: the shipped example "Answer from my documents" indexes a docs/ folder with a real
//! embedding model (all-MiniLM-L6-v2, tests/peers/embeddings) and a scripted model
//! (fakellm) calls search_knowledge and answers with the source it was shown; an agent
//! keeping notes reads in its second run what it saved in its first.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agentloom_tests::FakeLlm;
use agentloom_tests::embeddings::{EMBEDDING_MODEL, EmbeddingPeer};
use serde_json::{Value, json};

fn run(graph: &Path, db: &Path, workspace: &Path, inputs: &[&str]) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG")
        .args(["run", "--json", "--trust"])
        .arg(graph)
        .arg("--db")
        .arg(db)
        .arg("--workspace")
        .arg(workspace);
    for input in inputs {
        cmd.arg("--input").arg(input);
    }
    let output: Output = cmd.output().expect("agentloom starts");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The transcript of agent `node` as `agentloom show --json` reads it from the run log.
fn agent_steps(db: &Path, run_id: &str, node: &str) -> Vec<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .args(["show", "--json", run_id, "--db"])
        .arg(db)
        .output()
        .expect("agentloom starts");
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
    shown["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == node)
        .and_then(|n| n["outputs"]["transcript"].as_array().cloned())
        .unwrap_or_else(|| panic!("no steps of `{node}` in {shown}"))
}

const SEARCH_RULES: &str = r#"
rules:
  - name: search_first
    when: {messages_contain: "How long do refunds take", turn: 1, tools_include: search_knowledge}
    respond:
      content: "Let me look in the documents."
      tool_calls: [{name: search_knowledge, arguments: {query: "how many days until a refund is paid"}}]
  - name: answer_with_source
    when: {messages_contain: "How long do refunds take", turn: 2, tool_result_contains: "docs/refunds.md (bytes 0"}
    respond:
      tool_calls: [{name: finish, arguments: {answer: "Refunds are paid within 14 days [docs/refunds.md, bytes 0]."}}]
"#;

/// The shipped example with its three model nodes pointed at the local peers and no
/// credential (the peers need no key).
fn example_on_peers(dir: &Path, llm: &FakeLlm, embeddings: &EmbeddingPeer) -> PathBuf {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../assets/examples/online/answer-from-documents.agentloom.json"),
    )
    .unwrap();
    let mut graph: Value = serde_json::from_str(&text).unwrap();
    for node in graph["nodes"].as_array_mut().unwrap() {
        let block = node["block"].as_str().unwrap().to_owned();
        let config = &mut node["config"];
        match block.as_str() {
            "knowledge.add" | "knowledge.search" => {
                config["base_url"] = json!(embeddings.base_url());
                config["model"] = json!(EMBEDDING_MODEL);
                config.as_object_mut().unwrap().remove("credential");
            }
            "ai.agent" => {
                config["base_url"] = json!(format!("{}/v1", llm.base()));
                config["model"] = json!("test-model");
                config.as_object_mut().unwrap().remove("credential");
            }
            _ => {}
        }
    }
    let path = dir.join("answer.agentloom.json");
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();
    path
}

#[test]
fn the_documents_example_answers_quoting_the_source_search_knowledge_gave() {
    let Some(llm) = FakeLlm::start_with_rules(SEARCH_RULES) else {
        return;
    };
    let Some(embeddings) = EmbeddingPeer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(
        docs.join("refunds.md"),
        "# Refunds\n\nA refund is paid back to the card used within 14 days of the return reaching our warehouse.\n",
    )
    .unwrap();
    std::fs::write(
        docs.join("shipping.md"),
        "# Shipping\n\nParcels leave the warehouse on weekdays and arrive in two to four days.\n",
    )
    .unwrap();
    let graph = example_on_peers(dir.path(), &llm, &embeddings);
    let db = dir.path().join("runs.sqlite3");

    let report = run(
        &graph,
        &db,
        dir.path(),
        &["question=How long do refunds take?"],
    );
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(
        report["outputs"]["answer"],
        "Refunds are paid within 14 days [docs/refunds.md, bytes 0]."
    );
    // The tool's answer quoted the passage with its path and position, best first.
    let steps = agent_steps(&db, report["run_id"].as_str().unwrap(), "answerer");
    let searched = steps
        .iter()
        .find(|s| s["tool"] == "search_knowledge")
        .unwrap_or_else(|| panic!("search_knowledge was not called: {steps:?}"));
    let observation = searched["observation"].as_str().unwrap();
    assert!(
        observation.starts_with("[1] docs/refunds.md (bytes 0–"),
        "{observation}"
    );
    assert!(observation.contains("within 14 days"), "{observation}");
    // The search node ran as the agent's tool: its row is in the run log.
    let nodes = report["nodes"].as_array().unwrap();
    assert!(
        nodes
            .iter()
            .any(|n| n["id"] == "search_docs" && n["status"] == "done"),
        "{report}"
    );
    // The collection is in the workspace's store.
    assert!(dir.path().join("knowledge.sqlite").is_file());
}

const NOTES_RULES: &str = r#"
rules:
  - name: first_run_saves
    when: {messages_contain: "(none yet)", turn: 1, tools_include: save_notes}
    respond:
      tool_calls: [{name: save_notes, arguments: {notes: "The customer's order number is A-7731."}}]
  - name: first_run_finishes
    when: {messages_contain: "(none yet)", turn: 2, tool_result_contains: "saved your notes"}
    respond:
      tool_calls: [{name: finish, arguments: {answer: "noted"}}]
  - name: second_run_reads
    when: {messages_contain: "The customer's order number is A-7731.", turn: 1}
    respond:
      tool_calls: [{name: finish, arguments: {answer: "The order number is A-7731."}}]
"#;

#[test]
fn an_agent_keeping_notes_reads_in_its_next_run_what_it_saved() {
    let Some(llm) = FakeLlm::start_with_rules(NOTES_RULES) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "Note keeper",
        "nodes": [
            {"id": "task", "block": "graph.input", "position": [0, 0],
             "config": {"name": "task", "type": "text"}},
            {"id": "keeper", "block": "ai.agent", "position": [200, 0],
             "config": {"provider": "openai", "base_url": format!("{}/v1", llm.base()),
                        "model": "test-model", "builtin_tools": "finish", "keep_notes": true}},
            {"id": "answer", "block": "graph.output", "position": [400, 0],
             "config": {"name": "answer"}}
        ],
        "edges": [
            {"from": ["task", "value"], "to": ["keeper", "goal"]},
            {"from": ["keeper", "answer"], "to": ["answer", "value"]}
        ]
    });
    let path = dir.path().join("notes.agentloom.json");
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();
    let db = dir.path().join("runs.sqlite3");

    let first = run(&path, &db, dir.path(), &["task=Take the order."]);
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(first["outputs"]["answer"], "noted");
    let second = run(&path, &db, dir.path(), &["task=Which order was it?"]);
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(second["outputs"]["answer"], "The order number is A-7731.");
}
