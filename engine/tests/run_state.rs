//! The live view of a run and its recorded form agree: one event stream (retries, late
//! queued events, streaming, failures, a skip, a sub-run node, a reused node, a stop) is
//! replayed into a `RunState` and into a real SQLite run log, the run is read back, and
//! both say the same of the run and of every node.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use agentloom_core::{GraphDoc, NodeDoc, Usage, Value, ValueMap};
use agentloom_engine::{
    EventKind, EventSink, MAX_PARTIAL_BYTES, NodeStatus, RunEvent, RunState, RunStatus, RunStore,
};

fn graph() -> GraphDoc {
    let mut doc = GraphDoc::new("Agree");
    for (id, block) in [
        ("fetch", "http.request"),
        ("summarize", "llm.chat"),
        ("check", "llm.chat"),
        ("caught", "http.request"),
        ("branch", "control.branch"),
        ("cached", "data.constant"),
        ("call", "graph.call"),
        ("ask", "file.write"),
        ("never", "text.template"),
    ] {
        doc.nodes.push(NodeDoc::new(id, block));
    }
    doc
}

fn values(pairs: &[(&str, &str)]) -> ValueMap {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
        .collect()
}

fn usage(input_tokens: u64, output_tokens: u64, cost_usd: f64) -> Usage {
    Usage {
        input_tokens,
        output_tokens,
        cost_usd,
    }
}

fn queued(node: &str, block: &str) -> EventKind {
    EventKind::NodeQueued {
        node: node.to_owned(),
        block: block.to_owned(),
    }
}

fn started(node: &str, attempt: u32, input: &str) -> EventKind {
    EventKind::NodeStarted {
        node: node.to_owned(),
        attempt,
        inputs: values(&[("in", input)]),
    }
}

fn partial(node: &str, chunk: &str) -> EventKind {
    EventKind::NodePartial {
        node: node.to_owned(),
        port: "text".to_owned(),
        chunk: chunk.to_owned(),
    }
}

fn finished(node: &str, attempts: u32, output: &str, cost: Usage) -> EventKind {
    EventKind::NodeFinished {
        node: node.to_owned(),
        outputs: values(&[("out", output)]),
        attempts,
        duration_ms: 7,
        usage: cost,
        outputs_redacted: None,
    }
}

fn failed(node: &str, error: &str, caught: bool) -> EventKind {
    EventKind::NodeFailed {
        node: node.to_owned(),
        error: error.to_owned(),
        attempts: 1,
        duration_ms: 3,
        usage: Usage::default(),
        caught,
    }
}

/// A run the person stopped: every kind of event, in the order an executor may send them.
fn stream() -> Vec<EventKind> {
    let big = "x".repeat(MAX_PARTIAL_BYTES / 2 + 1);
    vec![
        EventKind::RunStarted {
            run_id: "01-agree".to_owned(),
            graph_name: "Agree".to_owned(),
            node_count: 9,
            inputs: values(&[("topic", "rust")]),
        },
        // Seeded from an earlier run: finished without running.
        finished("cached", 0, "kept", Usage::default()),
        queued("fetch", ""),
        started("fetch", 1, "http://127.0.0.1:9/a"),
        finished("fetch", 1, "page", Usage::default()),
        // A queued event that arrives after the node finished changes nothing.
        queued("fetch", ""),
        // Streams, fails, is retried: the new attempt streams anew.
        queued("summarize", "llm.chat"),
        started("summarize", 1, "page"),
        partial("summarize", "first try, "),
        EventKind::NodeUsage {
            node: "summarize".to_owned(),
            usage: usage(10, 2, 0.001),
        },
        EventKind::NodeRetrying {
            node: "summarize".to_owned(),
            attempt: 2,
            error: "HTTP 503 from 127.0.0.1".to_owned(),
            wait_ms: 10,
        },
        started("summarize", 2, "page"),
        partial("summarize", "second "),
        partial("summarize", "try"),
        finished("summarize", 2, "a summary", usage(30, 8, 0.003)),
        // Streams past the cap, then fails: its streamed text stays, capped.
        queued("check", ""),
        started("check", 1, "a summary"),
        partial("check", &big),
        partial("check", &big),
        partial("check", "dropped"),
        EventKind::NodeUsage {
            node: "check".to_owned(),
            usage: usage(5, 1, 0.0005),
        },
        failed("check", "the model refused", false),
        // A failure caught by the wired `error` output.
        queued("caught", ""),
        started("caught", 1, "http://127.0.0.1:9/b"),
        failed("caught", "connection refused", true),
        EventKind::NodeSkipped {
            node: "branch".to_owned(),
            reason: "the condition was false".to_owned(),
            block: "control.branch".to_owned(),
        },
        // A node of a sub-run, named under its caller, with its block from the event.
        queued("call", ""),
        started("call", 1, "child.json"),
        queued("call/inner", "text.template"),
        started("call/inner", 1, "hi"),
        partial("call/inner", "streaming when the run stopped"),
        // Waits for a person when the run is stopped.
        queued("ask", ""),
        started("ask", 1, "notes.txt"),
        EventKind::NodeAwaitingApproval {
            node: "ask".to_owned(),
        },
        EventKind::RunFinished {
            status: RunStatus::Cancelled,
            outputs: values(&[("summary", "a summary")]),
            error: Some("the run was cancelled".to_owned()),
            usage: usage(35, 9, 0.0035),
            duration_ms: 40,
        },
    ]
}

#[test]
fn the_live_state_and_the_recorded_run_agree_event_for_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = RunStore::open(&dir.path().join("runs.db")).unwrap();
    let doc = graph();
    let recorder = store.recorder(&doc).unwrap();
    let mut live = RunState::starting(&doc);
    for (seq, kind) in stream().into_iter().enumerate() {
        live.apply(&kind);
        let seq = seq as u64;
        recorder.emit(&RunEvent {
            seq,
            at_ms: seq,
            kind,
        });
    }
    recorder.finish().unwrap();
    let detail = store.get_run("01-agree").unwrap().unwrap();
    let recorded = RunState::from(&detail);

    // What the events say, as the live view shows it.
    let node = |id: &str| live.node(id).unwrap();
    assert_eq!(
        node("fetch").status,
        NodeStatus::Done,
        "a late queued event"
    );
    let summarize = node("summarize");
    assert_eq!(summarize.attempts, 2);
    assert!(summarize.partial.is_empty(), "{:?}", summarize.partial);
    assert_eq!(summarize.usage, usage(30, 8, 0.003));
    assert_eq!(
        node("check").partial["text"].len(),
        MAX_PARTIAL_BYTES / 2 + 1 + MAX_PARTIAL_BYTES / 2 + 1,
        "a failure keeps its stream, to the cap"
    );
    assert_eq!(node("check").error.as_deref(), Some("the model refused"));
    assert!(node("caught").error_caught);
    assert_eq!(node("call/inner").block, "text.template");
    assert_eq!(
        node("call/inner").partial["text"],
        "streaming when the run stopped"
    );
    assert!(node("call/inner").cancelled && node("ask").cancelled);
    assert_eq!(node("never").status, NodeStatus::Pending);
    assert!(live.reused.contains("cached"));

    // The retried attempt's first stream, then the cap: the same in both.
    let mut retried = live.clone();
    retried.apply(&started("summarize", 3, "page"));
    retried.apply(&partial("summarize", "third"));
    assert_eq!(retried.node("summarize").unwrap().partial["text"], "third");
    assert_eq!(retried.node("summarize").unwrap().attempts, 3);

    // And the run log says exactly the same.
    assert_eq!(recorded.run_id, live.run_id);
    assert_eq!(recorded.status, live.status);
    assert_eq!(recorded.outputs, live.outputs);
    assert_eq!(recorded.error, live.error);
    assert_eq!(recorded.usage, live.usage);
    assert_eq!(recorded.duration_ms, live.duration_ms);
    assert_eq!(recorded.reused, live.reused);
    let ids = |state: &RunState| state.nodes.keys().cloned().collect::<Vec<_>>();
    assert_eq!(ids(&recorded), ids(&live));
    for (id, live_node) in &live.nodes {
        assert_eq!(&recorded.nodes[id], live_node, "node `{id}`");
    }
    assert_eq!(recorded, live);
}

#[test]
fn streamed_text_stops_growing_at_the_cap() {
    let mut state = RunState::default();
    let chunk = "y".repeat(MAX_PARTIAL_BYTES / 2 + 1);
    state.apply(&started("n", 1, "in"));
    for _ in 0..4 {
        state.apply(&partial("n", &chunk));
    }
    assert_eq!(
        state.node("n").unwrap().partial["text"].len(),
        chunk.len() * 2
    );
}
