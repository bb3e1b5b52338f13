//! Property tests: the graph loader gives a clear error or a graph for any input, never a panic.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use agentloom_core::GraphDoc;
use proptest::prelude::*;

/// Arbitrary JSON values, biased towards graph-like shapes.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "[a-z.<>]{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("id".to_owned()),
                    Just("block".to_owned()),
                    Just("from".to_owned()),
                    Just("to".to_owned()),
                    Just("config".to_owned()),
                    Just("position".to_owned()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..6
            )
            .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = GraphDoc::from_json_str(&text);
    }

    #[test]
    fn arbitrary_graph_shaped_json_never_panics(
        version in 0u64..3,
        nodes in json_value(),
        edges in json_value(),
        extra in json_value(),
    ) {
        let doc = serde_json::json!({
            "format": "agentloom.graph", "version": version,
            "nodes": nodes, "edges": edges, "settings": extra,
        });
        match GraphDoc::from_json_str(&doc.to_string()) {
            Ok(graph) => {
                // Whatever loads saves and loads back to the same document.
                let again = GraphDoc::from_json_str(&graph.to_json_string()).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let mut expected = graph;
                expected.normalize();
                prop_assert_eq!(again, expected);
            }
            Err(err) => prop_assert!(!err.to_string().is_empty()),
        }
    }
}
