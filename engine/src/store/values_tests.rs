//! Values in the run log: stored once by hash, deflated, capped, read back.

use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc, Value, ValueMap, validate};
use rusqlite::Connection;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::*;
use crate::{EventKind, Executor, RunOptions, RunStatus};

/// `data.constant` with `value`, then `n - 1` pass-throughs.
fn chain(n: usize, value: &serde_json::Value) -> GraphDoc {
    let mut doc = GraphDoc::new("chain");
    doc.nodes
        .push(NodeDoc::new("n0", "data.constant").with_config(json!({ "value": value })));
    for i in 1..n {
        doc.nodes
            .push(NodeDoc::new(format!("n{i}"), "control.passthrough"));
        doc.edges.push(EdgeDoc::new(
            &format!("n{}", i - 1),
            "value",
            &format!("n{i}"),
            "value",
        ));
    }
    doc
}

/// Runs `doc` with the run log on; returns the run id.
fn run_logged(store: &RunStore, doc: &GraphDoc, policy: LogPolicy) -> String {
    let registry = Arc::new(Registry::builtin());
    let valid = Arc::new(validate(doc, registry.as_ref()).unwrap());
    let recorder = Arc::new(store.recorder_with(doc, policy).unwrap());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = runtime.block_on(Executor::new(registry).run(
        valid,
        ValueMap::new(),
        RunOptions::default(),
        recorder.clone(),
    ));
    recorder.finish().unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    report.run_id
}

fn temp_store() -> (tempfile::TempDir, RunStore, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(RUN_LOG_FILE);
    let store = RunStore::open(&path).unwrap();
    let conn = Connection::open(&path).unwrap();
    (dir, store, conn)
}

#[test]
fn a_value_handed_down_a_chain_is_stored_once_and_deflated() {
    let (_dir, store, conn) = temp_store();
    let text: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    let run_id = run_logged(&store, &chain(50, &json!(text)), LogPolicy::default());

    let (rows, size, stored, encoding): (i64, i64, i64, String) = conn
        .query_row(
            "SELECT count(*), max(size), max(length(data)), max(encoding) FROM run_values",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(rows, 1, "50 nodes hand on one value: one stored copy");
    assert_eq!(size, i64::try_from(json!(text).to_string().len()).unwrap());
    assert_eq!(encoding, "deflate");
    assert!(stored * 3 < size, "deflated {stored} of {size} bytes");

    let detail = store.get_run(&run_id).unwrap().unwrap();
    for node in ["n1", "n25", "n49"] {
        let row = detail.node(node).unwrap();
        assert_eq!(row.inputs["value"], Value::text(text.clone()), "{node}");
        assert_eq!(row.outputs["value"], Value::text(text.clone()), "{node}");
    }
    let finished = store
        .events(&run_id)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::NodeFinished { outputs, .. } => Some(outputs),
            _ => None,
        })
        .count();
    assert_eq!(finished, 50);
}

#[test]
fn a_value_over_the_cap_keeps_size_hash_and_preview_and_the_run_completes() {
    let (_dir, store, conn) = temp_store();
    let text = "é".repeat(6000);
    let json_text = json!(text).to_string();
    let policy = LogPolicy {
        max_value_bytes: 2000,
    };
    let run_id = run_logged(&store, &chain(3, &json!(text)), policy);

    let detail = store.get_run(&run_id).unwrap().unwrap();
    assert_eq!(detail.run.status, RunStatus::Completed);
    let Value::Text(logged) = &detail.node("n2").unwrap().outputs["value"] else {
        panic!("a truncated value reads as text");
    };
    let hash: String = Sha256::digest(json_text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mark = format!(
        "[truncated: {} bytes, sha256 {hash}] \"éééé",
        json_text.len()
    );
    assert!(logged.starts_with(&mark), "{logged}");
    assert!(logged.ends_with("é…"), "{logged}");
    let stored: i64 = conn
        .query_row("SELECT max(length(data)) FROM run_values", [], |r| r.get(0))
        .unwrap();
    assert!(stored <= 1000, "only a preview is kept: {stored} bytes");

    // Full logging keeps it whole.
    let run_id = run_logged(&store, &chain(3, &json!(text)), LogPolicy::full());
    let detail = store.get_run(&run_id).unwrap().unwrap();
    assert_eq!(
        detail.node("n2").unwrap().outputs["value"],
        Value::text(text)
    );
}

#[test]
fn deleting_a_run_deletes_its_values() {
    let (_dir, store, conn) = temp_store();
    let run_id = run_logged(
        &store,
        &chain(2, &json!("v".repeat(1000))),
        LogPolicy::default(),
    );
    assert!(store.delete_run(&run_id).unwrap());
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM run_values", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0);
}

#[test]
fn a_value_handed_down_is_serialized_and_hashed_once() {
    let text: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    let port = |value: &Value| ValueMap::from([("value".to_owned(), value.clone())]);
    let big = Value::list(vec![Value::from(text.as_str()), Value::Integer(7)]);
    let mut log = values::ValueLog::new(LogPolicy::default());
    // As a chain of 100 nodes sees it: each node's inputs, then its outputs.
    let logged: Vec<ValueMap> = (0..200).map(|_| log.shrink(port(&big))).collect();
    assert_eq!(log.hashed, 1, "one distinct value, hashed once");
    assert_eq!(log.pending.len(), 1);
    assert!(logged.windows(2).all(|pair| pair[0] == pair[1]));

    // Same size and shape, other content: not taken for the first.
    let other = Value::list(vec![Value::from(text.replace('9', "8")), Value::Integer(7)]);
    let other_logged = log.shrink(port(&other));
    assert_eq!(log.hashed, 2);
    assert_ne!(other_logged, logged[0]);
    let again = log.shrink(port(&big));
    assert_eq!((log.hashed, &again), (2, &logged[0]));

    // A new run stores its values again.
    log.reset();
    log.shrink(port(&big));
    assert_eq!((log.hashed, log.pending.len()), (3, 1));
}
