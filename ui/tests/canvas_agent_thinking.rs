//! An agent's trace while its model decides the next step: a "thinking…" row counting up,
//! against a model server on loopback that takes its time over the second answer.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::time::Duration;

use agentloom::app::Command;
use agentloom_engine::RunStatus;
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, graph, harness, paths, wait_until};

/// Whether `text` is in a label or value anywhere in the window (once or more).
fn shown_anywhere(h: &AppHarness, text: &str) -> bool {
    h.query_all(egui_kittest::kittest::by().predicate(|node| {
        node.label().is_some_and(|l| l.contains(text))
            || node.value().is_some_and(|v| v.contains(text))
    }))
    .next()
    .is_some()
}

/// How long the model thinks before its second answer.
const THINKING: Duration = Duration::from_millis(3500);

/// An OpenAI-style chat server: the first answer calls `list_files`, the second (after
/// [`THINKING`]) finishes. Returns its base URL.
fn slow_model() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut turn = 0;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            turn += 1;
            let turn = turn - 1;
            let (tool, arguments) = if turn == 0 {
                ("list_files", "{}".to_owned())
            } else {
                std::thread::sleep(THINKING);
                ("finish", r#"{"answer":"nothing to list"}"#.to_owned())
            };
            let answer = serde_json::json!({
                "id": format!("chat-{turn}"), "object": "chat.completion", "created": 0,
                "model": "test-model",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": null,
                    "tool_calls": [{"id": format!("call-{turn}"), "type": "function",
                        "function": {"name": tool, "arguments": arguments}}]}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            })
            .to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    base
}

#[test]
fn while_the_model_decides_the_next_step_the_trace_shows_it_thinking_counting_up() {
    let dir = tempfile::tempdir().unwrap();
    let doc = graph(
        &serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "thinker",
            "nodes": [
                {"id": "goal", "block": "data.constant", "position": [40, 40],
                 "config": {"type": "text", "value": "list the files"}},
                {"id": "agent", "block": "ai.agent", "label": "Worker", "position": [360, 40],
                 "config": {"base_url": slow_model(), "model": "test-model"}},
                {"id": "out", "block": "graph.output", "position": [760, 40],
                 "config": {"name": "answer"}}
            ],
            "edges": [{"from": ["goal", "value"], "to": ["agent", "goal"]},
                      {"from": ["agent", "answer"], "to": ["out", "value"]}]
        })
        .to_string(),
    );
    let mut h = harness(&doc, &paths(&dir));
    h.state_mut().send(Command::InspectById("agent".into()));
    h.run_steps(2);
    h.state_mut().send(Command::Run);
    // After the first step, while the model takes its time: a row says so, counting up.
    wait_until(&mut h, "the first step", |h| {
        shown_anywhere(h, "step 1 · list_files")
    });
    wait_until(&mut h, "the thinking row", |h| {
        shown_anywhere(h, "thinking… 1 s")
    });
    wait_until(&mut h, "its seconds to count up", |h| {
        shown_anywhere(h, "thinking… 2 s")
    });
    wait_until(&mut h, "the run to end", |h| !h.state().run.is_running());
    assert_eq!(
        h.state().run.status,
        Some(RunStatus::Completed),
        "{:?}",
        h.state().run.error
    );
    assert!(
        !shown_anywhere(&h, "thinking…"),
        "the row stays after the run"
    );
}
