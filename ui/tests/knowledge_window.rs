//! The Knowledge window driven through the real UI (egui_kittest): View → Knowledge lists
//! the collection a real run indexed in the workspace (documents, chunks, sizes), a typed
//! query finds the passage with its score and source through the real embedding model
//! (tests/peers/embeddings), and an unreachable embedding endpoint is said plainly.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::path::Path;
use std::process::Command;

use agentloom::app::{App, load_graph};
use agentloom_tests::embeddings::{EMBEDDING_MODEL, EmbeddingPeer};
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable as _;
use serde_json::json;
use support::{AppHarness, harness_for, paths, wait_until};

/// Whether some node of the accessibility tree shows `text` in its label or value.
fn shown_anywhere(h: &AppHarness, text: &str) -> bool {
    h.query_all_by(|node| {
        node.label().is_some_and(|l| l.contains(text))
            || node.value().is_some_and(|v| v.contains(text))
    })
    .next()
    .is_some()
}

/// Embedding requests the peer has answered.
fn requests(peer: &EmbeddingPeer) -> u64 {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(peer.requests())
}

fn press(h: &mut AppHarness, role: Role, label: &str) {
    h.get_by_role_and_label(role, label).click();
    h.run_steps(3);
}

/// A graph that indexes docs/ into the collection `handbook` and, `with_search`, searches
/// it for `query`; its embedding nodes on `base_url`.
fn docs_graph(base_url: &str, with_search: bool) -> serde_json::Value {
    docs_graph_in("knowledge.sqlite", base_url, with_search)
}

/// [`docs_graph`] with its collection in the store `store`.
fn docs_graph_in(store: &str, base_url: &str, with_search: bool) -> serde_json::Value {
    let embedding = json!({"provider": "openai", "model": EMBEDDING_MODEL, "base_url": base_url, "store": store});
    let with = |extra: serde_json::Value| {
        let mut config = embedding.clone();
        config
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        config
    };
    let mut graph = json!({
        "format": "agentloom.graph", "version": 1, "name": "Handbook",
        "nodes": [
            {"id": "load", "block": "docs.load", "position": [0, 0], "config": {"paths": "docs"}},
            {"id": "split", "block": "text.split", "position": [200, 0],
             "config": {"method": "markdown", "size": 800, "overlap": 0}},
            {"id": "index", "block": "knowledge.add", "position": [400, 0],
             "config": with(json!({"collection": "handbook"}))}
        ],
        "edges": [
            {"from": ["load", "documents"], "to": ["split", "documents"]},
            {"from": ["split", "chunks"], "to": ["index", "chunks"]}
        ]
    });
    if with_search {
        graph["nodes"].as_array_mut().unwrap().extend([
            json!({"id": "query", "block": "graph.input", "position": [0, 200],
                   "config": {"name": "query", "type": "text"}}),
            json!({"id": "search", "block": "knowledge.search", "position": [400, 200],
                   "config": with(json!({"collection": "handbook", "k": 3}))}),
            json!({"id": "hits", "block": "graph.output", "position": [600, 200],
                   "config": {"name": "hits"}}),
        ]);
        graph["edges"].as_array_mut().unwrap().extend([
            json!({"from": ["query", "value"], "to": ["search", "query"]}),
            json!({"from": ["search", "hits"], "to": ["hits", "value"]}),
        ]);
    }
    graph
}

/// Writes the handbook into `workspace`/docs and indexes it with `agentloom run`.
fn index_handbook(graph: &Path, workspace: &Path, db: &Path) {
    index_handbook_with(graph, workspace, db, &[]);
}

/// [`index_handbook`] with `env` set for the run.
fn index_handbook_with(graph: &Path, workspace: &Path, db: &Path, env: &[(&str, &Path)]) {
    let docs = workspace.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("vacation.md"),
        "# Vacation\n\nEvery employee gets 28 days of paid vacation a year; unused days carry over until March.\n",
    )
    .unwrap();
    std::fs::write(
        docs.join("expenses.md"),
        "# Expenses\n\nTravel expenses are reimbursed within 30 days once the receipts are uploaded to the portal.\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .envs(env.iter().copied())
        .args(["run", "--json", "--trust"])
        .arg(graph)
        .arg("--db")
        .arg(db)
        .arg("--workspace")
        .arg(workspace)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_knowledge_window_lists_a_collection_and_finds_a_passage_with_its_source() {
    let Some(peer) = EmbeddingPeer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let workspace = paths.workspace.clone().unwrap();
    let graph = dir.path().join("handbook.agentloom.json");
    std::fs::write(&graph, docs_graph(&peer.base_url(), false).to_string()).unwrap();
    index_handbook(&graph, &workspace, &dir.path().join("cli-runs.sqlite3"));
    std::fs::write(&graph, docs_graph(&peer.base_url(), true).to_string()).unwrap();

    let doc = load_graph(&graph).unwrap();
    let mut h = harness_for(App::new(&doc, Some(graph.clone()), &paths));
    press(&mut h, Role::Button, "View");
    press(&mut h, Role::Button, "Knowledge");
    assert!(h.state().knowledge.open);
    let store = workspace.join("knowledge.sqlite");
    assert!(shown_anywhere(
        &h,
        &format!("{} (workspace)", store.display())
    ));
    assert!(
        shown_anywhere(&h, "handbook — 2 documents, 2 chunks"),
        "the collection is listed"
    );
    assert!(shown_anywhere(
        &h,
        &format!("{EMBEDDING_MODEL} (384 dimensions)")
    ));
    h.get_by(|n| n.label().is_some_and(|l| l.starts_with("handbook — ")))
        .click();
    h.run_steps(3);
    h.get_by_label("docs/expenses.md");
    h.get_by_label("docs/vacation.md");

    press(&mut h, Role::TextInput, "Query");
    h.get_by_role_and_label(Role::TextInput, "Query")
        .type_text("when do I get my travel money back");
    h.run_steps(2);
    press(&mut h, Role::Button, "Search");
    wait_until(&mut h, "the hits", |h| !h.state().knowledge.hits.is_empty());
    let hits = h.state().knowledge.hits.clone();
    assert_eq!(hits[0].source, "docs/expenses.md", "{hits:?}");
    assert!(hits[0].text.contains("reimbursed within 30 days"));
    assert!(hits[0].score > 0.0);
    assert!(
        shown_anywhere(&h, "[1] docs/expenses.md (bytes 0–"),
        "the best hit is shown with its source"
    );
    assert!(shown_anywhere(&h, "· score "));
    assert_eq!(h.state().knowledge.status, "2 hits.");
}

#[test]
fn an_unreachable_embedding_endpoint_is_said_in_the_window() {
    let Some(peer) = EmbeddingPeer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let workspace = paths.workspace.clone().unwrap();
    let graph = dir.path().join("handbook.agentloom.json");
    std::fs::write(&graph, docs_graph(&peer.base_url(), false).to_string()).unwrap();
    index_handbook(&graph, &workspace, &dir.path().join("cli-runs.sqlite3"));
    // The same graph, its endpoint now a port nobody listens on.
    let closed = format!("http://127.0.0.1:{}/v1", agentloom_tests::free_port());
    std::fs::write(&graph, docs_graph(&closed, true).to_string()).unwrap();

    let doc = load_graph(&graph).unwrap();
    let mut h = harness_for(App::new(&doc, Some(graph.clone()), &paths));
    h.state_mut().knowledge.open = true;
    h.run_steps(3);
    h.get_by(|n| n.label().is_some_and(|l| l.starts_with("handbook — ")))
        .click();
    h.run_steps(3);
    press(&mut h, Role::TextInput, "Query");
    h.get_by_role_and_label(Role::TextInput, "Query")
        .type_text("vacation days");
    h.run_steps(2);
    press(&mut h, Role::Button, "Search");
    wait_until(&mut h, "the search to fail", |h| {
        h.state().knowledge.status.starts_with("Search failed")
    });
    let status = h.state().knowledge.status.clone();
    assert!(
        status.contains(&closed.replace("/v1", "")) || status.contains("127.0.0.1"),
        "{status}"
    );
    assert!(shown_anywhere(&h, "Search failed"), "{status}");
    assert!(h.state().knowledge.hits.is_empty());
}

#[test]
fn a_collection_in_the_data_folder_is_listed_and_searched_as_the_graph_sets_it_up() {
    let Some(peer) = EmbeddingPeer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    let mut paths = paths(&dir);
    let workspace = paths.workspace.clone().unwrap();
    let graph = dir.path().join("handbook.agentloom.json");
    let store = "data:team.sqlite";
    std::fs::write(
        &graph,
        docs_graph_in(store, &peer.base_url(), false).to_string(),
    )
    .unwrap();
    index_handbook_with(
        &graph,
        &workspace,
        &dir.path().join("cli-runs.sqlite3"),
        &[("XDG_DATA_HOME", &xdg)],
    );
    // The app's data folder is the one the run used.
    let file = std::fs::read_dir(&xdg)
        .unwrap()
        .map(|e| e.unwrap().path().join("knowledge/team.sqlite"))
        .find(|p| p.is_file())
        .expect("the store in the data folder's knowledge folder");
    paths.data_dir = Some(file.parent().unwrap().parent().unwrap().to_path_buf());
    std::fs::write(
        &graph,
        docs_graph_in(store, &peer.base_url(), true).to_string(),
    )
    .unwrap();

    let doc = load_graph(&graph).unwrap();
    let mut h = harness_for(App::new(&doc, Some(graph.clone()), &paths));
    h.state_mut().knowledge.open = true;
    h.run_steps(3);
    assert!(shown_anywhere(
        &h,
        &format!("{} (data folder)", file.display())
    ));
    h.get_by(|n| n.label().is_some_and(|l| l.starts_with("handbook — ")))
        .click();
    h.run_steps(3);
    press(&mut h, Role::TextInput, "Query");
    h.get_by_role_and_label(Role::TextInput, "Query")
        .type_text("how many days off do I have");
    h.run_steps(2);
    let embedded_before = requests(&peer);
    press(&mut h, Role::Button, "Search");
    wait_until(&mut h, "the hits", |h| !h.state().knowledge.hits.is_empty());
    // Searched by meaning with the graph's embedding settings: the query was embedded.
    assert_eq!(requests(&peer), embedded_before + 1);
    assert_eq!(h.state().knowledge.hits[0].source, "docs/vacation.md");
}
