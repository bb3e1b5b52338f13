//! Knowledge end to end against a real embedding model: all-MiniLM-L6-v2 served on
//! 127.0.0.1 by tests/peers/embeddings/server.py (OpenAI's /v1/embeddings wire format),
//! driving the blocks docs.load → text.split → knowledge.add → knowledge.search, and the
//! collection store in a real SQLite file.

use std::path::{Path, PathBuf};

use agentloom_blocks::knowledge::store::KnowledgeStore;
use agentloom_blocks::testing::{TestCtx, inputs, run_block_with};
use agentloom_core::{Value, ValueMap};
use agentloom_tests::embeddings::{EMBEDDING_MODEL, EmbeddingPeer};
use serde_json::json;

const MODEL: &str = EMBEDDING_MODEL;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/knowledge")
        .join(name)
}

/// A workspace holding copies of the named fixtures.
fn workspace_with(fixtures: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in fixtures {
        std::fs::copy(fixture(name), dir.path().join(name)).expect("fixture copied");
    }
    dir
}

fn embedding(peer: &EmbeddingPeer) -> serde_json::Value {
    json!({"provider": "openai", "model": MODEL, "base_url": peer.base_url(), "batch_size": 16})
}

fn with(base: &serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    let mut config = base.clone();
    for (k, v) in extra.as_object().expect("object") {
        config[k] = v.clone();
    }
    config
}

async fn run(ctx: &TestCtx, kind: &str, config: serde_json::Value, given: ValueMap) -> ValueMap {
    match run_block_with(ctx, kind, config, given).await {
        Ok(out) => out,
        Err(e) => panic!("{kind} failed: {}", e.message),
    }
}

/// Loads `paths`, splits with `split`, adds to `collection`; returns knowledge.add's result.
async fn index(
    ctx: &TestCtx,
    peer: &EmbeddingPeer,
    paths: &str,
    split: serde_json::Value,
    collection: &str,
) -> serde_json::Value {
    let loaded = run(ctx, "docs.load", json!({"paths": paths}), ValueMap::new()).await;
    let split = run(
        ctx,
        "text.split",
        split,
        inputs([("documents", loaded["documents"].clone())]),
    )
    .await;
    let added = run(
        ctx,
        "knowledge.add",
        with(&embedding(peer), json!({"collection": collection})),
        inputs([("chunks", split["chunks"].clone())]),
    )
    .await;
    added["result"].to_json()
}

async fn search(
    ctx: &TestCtx,
    peer: &EmbeddingPeer,
    collection: &str,
    mode: &str,
    k: u64,
    query: &str,
) -> Vec<serde_json::Value> {
    let out = run(
        ctx,
        "knowledge.search",
        with(
            &embedding(peer),
            json!({"collection": collection, "mode": mode, "k": k}),
        ),
        inputs([("query", Value::text(query))]),
    )
    .await;
    out["hits"].to_json().as_array().expect("hits").clone()
}

#[tokio::test]
async fn retrieval_recall_at_5_on_the_handbook_beats_chance() {
    let Some(peer) = EmbeddingPeer::start() else {
        return;
    };
    let workspace = workspace_with(&["handbook.jsonl"]);
    let ctx = TestCtx::new().with_workspace(workspace.path());
    let result = index(
        &ctx,
        &peer,
        "handbook.jsonl",
        json!({"method": "characters", "size": 1000, "overlap": 0}),
        "handbook",
    )
    .await;
    assert_eq!(result["added"], 1, "{result}");
    assert_eq!(result["chunks"], 30, "{result}");
    assert!(ctx.usage().input_tokens > 0, "embedding usage is reported");

    let questions: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(fixture("questions.json")).expect("questions"),
    )
    .expect("questions JSON");
    let mut figures = Vec::new();
    for mode in ["hybrid", "vector"] {
        let mut found = 0;
        let mut at_one = 0;
        for question in &questions {
            let hits = search(
                &ctx,
                &peer,
                "handbook",
                mode,
                5,
                question["question"].as_str().expect("text"),
            )
            .await;
            assert!(hits.len() <= 5);
            let lines: Vec<&serde_json::Value> =
                hits.iter().map(|h| &h["metadata"]["line"]).collect();
            if lines.contains(&&question["line"]) {
                found += 1;
            }
            if lines.first() == Some(&&question["line"]) {
                at_one += 1;
            }
            for hit in &hits {
                assert_eq!(hit["source"], "handbook.jsonl");
            }
        }
        let recall = f64::from(found) / questions.len() as f64;
        let top1 = f64::from(at_one) / questions.len() as f64;
        println!(
            "{mode}: recall@5 = {recall:.3} ({found}/{}), top-1 = {top1:.3}; a random ranking's recall@5 is 5/30 = 0.167",
            questions.len()
        );
        figures.push((mode, recall));
    }
    for (mode, recall) in figures {
        // A random ranking finds the passage in its top 5 for 1 question in 6.
        assert!(
            recall >= 0.8,
            "{mode} recall@5 {recall:.3} is below the 0.8 floor"
        );
    }
}

#[tokio::test]
async fn hybrid_search_finds_an_exact_identifier_that_vectors_alone_miss() {
    let Some(peer) = EmbeddingPeer::start() else {
        return;
    };
    let workspace = workspace_with(&["troubleshooting.md"]);
    let ctx = TestCtx::new().with_workspace(workspace.path());
    let result = index(
        &ctx,
        &peer,
        "troubleshooting.md",
        json!({"method": "markdown", "size": 2000, "overlap": 0}),
        "help",
    )
    .await;
    assert_eq!(result["chunks"], 7, "{result}");
    let query = "ERR-7Q3X when saving";
    let is_target =
        |hit: &serde_json::Value| hit["text"].as_str().is_some_and(|t| t.contains("ERR-7Q3X"));
    let vector = search(&ctx, &peer, "help", "vector", 3, query).await;
    let hybrid = search(&ctx, &peer, "help", "hybrid", 3, query).await;
    let shown = |hits: &[serde_json::Value]| {
        hits.iter()
            .map(|h| {
                format!(
                    "{:.4} {}",
                    h["score"].as_f64().unwrap_or(0.0),
                    h["text"]
                        .as_str()
                        .unwrap_or("")
                        .lines()
                        .next()
                        .unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
    };
    println!(
        "vector: {:#?}\nhybrid: {:#?}",
        shown(&vector),
        shown(&hybrid)
    );
    assert!(
        !vector.iter().any(is_target),
        "vectors alone rank the ERR-7Q3X section in the top 3: {:#?}",
        shown(&vector)
    );
    assert!(
        is_target(&hybrid[0]),
        "hybrid search misses the ERR-7Q3X section: {:#?}",
        shown(&hybrid)
    );
    // The identifier alone: first in hybrid search, not first by vectors.
    let vector = search(&ctx, &peer, "help", "vector", 1, "ERR-7Q3X").await;
    let hybrid = search(&ctx, &peer, "help", "hybrid", 1, "ERR-7Q3X").await;
    assert!(!is_target(&vector[0]), "{:#?}", shown(&vector));
    assert!(is_target(&hybrid[0]), "{:#?}", shown(&hybrid));
    let keyword = search(&ctx, &peer, "help", "keyword", 1, "ERR-7Q3X").await;
    assert!(is_target(&keyword[0]));
}

#[tokio::test]
async fn unchanged_documents_are_not_embedded_again_and_changed_ones_replace_their_chunks() {
    let Some(peer) = EmbeddingPeer::start() else {
        return;
    };
    let workspace = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(workspace.path().join("notes")).expect("folder");
    std::fs::write(
        workspace.path().join("notes/a.md"),
        "# Boats\nThe ferry leaves at nine.\n\n# Trains\nThe night train stops in Lyon.\n",
    )
    .expect("write");
    std::fs::write(
        workspace.path().join("notes/b.txt"),
        "Bicycles may be rented at the station.",
    )
    .expect("write");
    let ctx = TestCtx::new().with_workspace(workspace.path());
    let split = json!({"method": "markdown", "size": 500, "overlap": 0});
    let first = index(&ctx, &peer, "notes", split.clone(), "travel").await;
    assert_eq!(
        (first["added"].as_i64(), first["chunks"].as_i64()),
        (Some(2), Some(3)),
        "{first}"
    );
    let requests = peer.requests().await;

    let again = index(&ctx, &peer, "notes", split.clone(), "travel").await;
    assert_eq!(
        (
            again["added"].as_i64(),
            again["replaced"].as_i64(),
            again["unchanged"].as_i64()
        ),
        (Some(0), Some(0), Some(2)),
        "{again}"
    );
    assert_eq!(
        peer.requests().await,
        requests,
        "an unchanged document was embedded again"
    );

    std::fs::write(
        workspace.path().join("notes/a.md"),
        "# Boats\nThe ferry now leaves at ten.\n",
    )
    .expect("write");
    let changed = index(&ctx, &peer, "notes", split, "travel").await;
    assert_eq!(
        (
            changed["replaced"].as_i64(),
            changed["unchanged"].as_i64(),
            changed["chunks"].as_i64()
        ),
        (Some(1), Some(1), Some(1)),
        "{changed}"
    );

    let store = KnowledgeStore::open(&workspace.path().join("knowledge.sqlite")).expect("store");
    let documents = store.documents("travel").expect("documents");
    let counts: Vec<(&str, usize)> = documents
        .iter()
        .map(|d| (d.source.as_str(), d.chunks))
        .collect();
    assert_eq!(counts, vec![("notes/a.md", 1), ("notes/b.txt", 1)]);
    let hits = search(&ctx, &peer, "travel", "hybrid", 5, "night train to Lyon").await;
    assert!(
        hits.iter()
            .all(|h| !h["text"].as_str().unwrap_or("").contains("Lyon")),
        "a replaced chunk is still found: {hits:?}"
    );
    assert!(
        hits.iter()
            .any(|h| h["text"].as_str().unwrap_or("").contains("ten"))
    );

    let forgotten = run(
        &ctx,
        "knowledge.forget",
        json!({"collection": "travel"}),
        inputs([("source", Value::text("notes/b.txt"))]),
    )
    .await;
    assert_eq!(forgotten["forgotten"], Value::Bool(true));
    let store = KnowledgeStore::open(&workspace.path().join("knowledge.sqlite")).expect("store");
    assert_eq!(store.documents("travel").expect("documents").len(), 1);
}

#[tokio::test]
async fn a_collection_refuses_search_with_another_embedding_model() {
    let Some(peer) = EmbeddingPeer::start() else {
        return;
    };
    let workspace = workspace_with(&["troubleshooting.md"]);
    let ctx = TestCtx::new().with_workspace(workspace.path());
    index(
        &ctx,
        &peer,
        "troubleshooting.md",
        json!({"method": "markdown", "size": 2000, "overlap": 0}),
        "help",
    )
    .await;
    let requests = peer.requests().await;
    let config = with(
        &embedding(&peer),
        json!({"collection": "help", "model": "nomic-embed-text"}),
    );
    let err = run_block_with(
        &ctx,
        "knowledge.search",
        config.clone(),
        inputs([("query", Value::text("disk full"))]),
    )
    .await
    .expect_err("another model is refused");
    assert!(
        err.message.contains(MODEL)
            && err.message.contains("nomic-embed-text")
            && err.message.contains("'help'"),
        "{}",
        err.message
    );
    let err = run_block_with(
        &ctx,
        "knowledge.add",
        config,
        inputs([("chunks", Value::text("more text"))]),
    )
    .await
    .expect_err("adding with another model is refused");
    assert!(err.message.contains("nomic-embed-text"), "{}", err.message);
    assert_eq!(
        peer.requests().await,
        requests,
        "the query was embedded although the model is refused"
    );
}

#[tokio::test]
async fn embedding_retries_server_errors_and_keeps_a_bound_key_from_other_hosts() {
    let Some(peer) = EmbeddingPeer::start_with(&["--fail-first", "2"]) else {
        return;
    };
    let ctx = TestCtx::new();
    let out = run(
        &ctx,
        "knowledge.embed",
        with(&embedding(&peer), json!({"max_retries": 3})),
        inputs([(
            "input",
            Value::list(vec![Value::text("one"), Value::text("two")]),
        )]),
    )
    .await;
    let usage = out["usage"].to_json();
    assert_eq!(usage["requests"], 3, "{usage}");
    assert_eq!(usage["dimensions"], 384, "{usage}");
    let vectors = out["embeddings"].to_json();
    assert_eq!(vectors.as_array().map(Vec::len), Some(2));

    let before = peer.requests().await;
    let bound =
        TestCtx::new().with_bound_secret("embedding-key", "sk-secret-value", &["api.example.com"]);
    let err = run_block_with(
        &bound,
        "knowledge.embed",
        with(&embedding(&peer), json!({"credential": "embedding-key"})),
        inputs([("input", Value::text("x"))]),
    )
    .await
    .expect_err("a key bound elsewhere is refused");
    assert!(
        err.message.contains("embedding-key") && err.message.contains("127.0.0.1"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("sk-secret-value"));
    assert_eq!(
        peer.requests().await,
        before,
        "the peer got a request carrying a key bound elsewhere"
    );
}

/// A PDF with one line of text on each page, its cross-reference table computed.
fn pdf_with_pages(pages: &[&str]) -> Vec<u8> {
    let mut objects: Vec<String> = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        String::new(),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_owned(),
    ];
    let mut kids = Vec::new();
    for text in pages {
        let content = format!("BT /F1 18 Tf 72 700 Td ({text}) Tj ET");
        objects.push(format!(
            "<< /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        ));
        let content_id = objects.len();
        objects.push(format!("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content_id} 0 R /Resources << /Font << /F1 3 0 R >> >> >>"));
        kids.push(format!("{} 0 R", objects.len()));
    }
    objects[1] = format!(
        "<< /Type /Pages /Kids [{}] /Count {} >>",
        kids.join(" "),
        pages.len()
    );
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n{object}\nendobj\n", i + 1).as_bytes());
    }
    let xref = pdf.len();
    pdf.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        pdf.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    pdf.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    pdf
}

async fn load(ctx: &TestCtx, paths: &str) -> Result<Vec<serde_json::Value>, String> {
    run_block_with(ctx, "docs.load", json!({"paths": paths}), ValueMap::new())
        .await
        .map(|out| out["documents"].to_json().as_array().expect("list").clone())
        .map_err(|e| e.message)
}

#[tokio::test]
async fn every_file_type_loads_with_its_source_and_place() {
    let dir = tempfile::tempdir().expect("temp dir");
    let w = |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).expect("write");
    w("a.txt", b"plain words");
    w("b.md", b"# Title\nsome *markdown*");
    w("c.html", b"<html><head><style>x{}</style></head><body><h1>Head</h1><p>Caf&eacute; &amp; tea</p><script>no()</script></body></html>");
    w(
        "d.pdf",
        &pdf_with_pages(&["First page words", "Second page words"]),
    );
    w(
        "e.json",
        br#"[{"text": "item zero", "tag": "x"}, "item one"]"#,
    );
    w(
        "f.jsonl",
        b"{\"content\": \"line one\"}\n\n{\"content\": \"line three\"}\n",
    );
    w("g.csv", b"city,country\nLyon,France\nPorto,Portugal\n");
    let ctx = TestCtx::new().with_workspace(dir.path());
    let docs = load(&ctx, "*").await.expect("loads");
    let of = |source: &str| {
        docs.iter()
            .filter(|d| d["source"] == source)
            .collect::<Vec<_>>()
    };
    assert_eq!(of("a.txt")[0]["text"], "plain words");
    assert_eq!(of("b.md")[0]["metadata"]["format"], "markdown");
    let html = of("c.html")[0]["text"].as_str().expect("text").to_owned();
    assert!(
        html.contains("Head")
            && html.contains("& tea")
            && !html.contains("no()")
            && !html.contains('<'),
        "{html}"
    );
    let pdf = of("d.pdf");
    assert_eq!(pdf.len(), 2, "one document per page: {pdf:?}");
    assert!(
        pdf[0]["text"]
            .as_str()
            .expect("text")
            .contains("First page words"),
        "{pdf:?}"
    );
    assert_eq!(pdf[1]["metadata"]["page"], 2);
    assert_eq!(pdf[1]["metadata"]["pages"], 2);
    let json_docs = of("e.json");
    assert_eq!(
        (
            json_docs[0]["text"].as_str(),
            json_docs[0]["metadata"]["tag"].as_str()
        ),
        (Some("item zero"), Some("x"))
    );
    assert_eq!(json_docs[1]["metadata"]["index"], 1);
    let lines = of("f.jsonl");
    assert_eq!(lines[1]["text"], "line three");
    assert_eq!(lines[1]["metadata"]["line"], 3);
    let rows = of("g.csv");
    assert_eq!(rows[1]["text"], "city: Porto\ncountry: Portugal");
    assert_eq!(rows[1]["metadata"]["row"], 2);
}

#[tokio::test]
async fn a_malformed_pdf_is_named_and_nothing_of_the_batch_is_indexed() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("docs")).expect("folder");
    std::fs::write(dir.path().join("docs/good.txt"), "good text").expect("write");
    let mut broken = pdf_with_pages(&["cut short"]);
    broken.truncate(broken.len() / 2);
    std::fs::write(dir.path().join("docs/broken.pdf"), &broken).expect("write");
    let ctx = TestCtx::new().with_workspace(dir.path());
    let err = load(&ctx, "docs")
        .await
        .expect_err("a malformed PDF fails the load");
    assert!(
        err.contains("docs/broken.pdf") && err.contains("not a readable PDF"),
        "{err}"
    );
    // The pipeline stops at the load: no store file, no collection.
    assert!(!dir.path().join("knowledge.sqlite").exists());
    std::fs::write(dir.path().join("docs/broken.pdf"), b"%PDF-1.7\nnot really").expect("write");
    let err = load(&ctx, "docs/*.pdf")
        .await
        .expect_err("garbage after the header fails too");
    assert!(err.contains("docs/broken.pdf"), "{err}");
}

#[tokio::test]
async fn loading_stays_inside_the_workspace() {
    let outside = tempfile::tempdir().expect("temp dir");
    std::fs::write(outside.path().join("secret.txt"), "outside words").expect("write");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("inside.txt"), "inside words").expect("write");
    let ctx = TestCtx::new().with_workspace(dir.path());
    let err = load(&ctx, "../secret.txt")
        .await
        .expect_err("a path out is refused");
    assert!(err.contains("`..`") && err.contains("refused"), "{err}");
    let absolute = outside.path().join("secret.txt");
    let err = load(&ctx, &absolute.display().to_string())
        .await
        .expect_err("an absolute path is refused");
    assert!(!err.is_empty());
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            dir.path().join("link.txt"),
        )
        .expect("link");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("linked-folder")).expect("link");
        let err = load(&ctx, "link.txt")
            .await
            .expect_err("a link out is refused");
        assert!(err.contains("link.txt"), "{err}");
        // A folder or glob walk does not follow links.
        let docs = load(&ctx, "**/*.txt").await.expect("loads what is inside");
        let sources: Vec<&str> = docs.iter().filter_map(|d| d["source"].as_str()).collect();
        assert_eq!(sources, vec!["inside.txt"]);
        assert!(docs.iter().all(|d| d["text"] != "outside words"));
    }
    let err = run_block_with(
        &ctx,
        "knowledge.forget",
        json!({"collection": "c", "store": "../k.sqlite"}),
        inputs([("source", Value::text("x"))]),
    )
    .await
    .expect_err("a store file outside is refused");
    assert!(err.message.contains("../k.sqlite"), "{}", err.message);
    assert!(
        !outside.path().join("k.sqlite").exists()
            && !dir
                .path()
                .parent()
                .expect("parent")
                .join("k.sqlite")
                .exists()
    );
}
