//! The LLM blocks end to end, through the executor, against the real `fakellm` peer
//! (PyPI `fakellm`: OpenAI `/v1/chat/completions` and Anthropic `/v1/messages`, SSE
//! streaming, tool calls streamed in argument fragments, injected errors), driven by the
//! rules in `tests/fixtures/llm/fakellm.yaml`. Each test starts its own server on a free
//! port of 127.0.0.1 and stops it afterwards.
//!
//! `fakellm` must be on PATH (`pip install fakellm==0.3.5`); set AGENTLOOM_SKIP_PEERS=1 to
//! skip these tests instead.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_core::{
    BoundHosts, EdgeDoc, GraphDoc, NodeDoc, RetryPolicy, Secret, SecretError, SecretSource, Value,
    ValueMap, secret_env_var, validate,
};
use agentloom_engine::{
    CollectSink, EventKind, Executor, NodeStatus, RunEvent, RunOptions, RunReport, RunStatus,
};
use agentloom_tests::FakeLlm;
use serde_json::json;

/// Secrets from memory.
struct Secrets(Vec<(String, String)>);

impl SecretSource for Secrets {
    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            // Any host: these tests are about the providers, not where keys may go.
            .map(|(_, v)| Secret::new(v.clone()).bound_to(BoundHosts::parse(&["*"]).unwrap()))
            .ok_or_else(|| SecretError::Missing {
                name: name.to_owned(),
                env_var: secret_env_var(name),
            })
    }
}

fn node(id: &str, block: &str, config: serde_json::Value) -> NodeDoc {
    NodeDoc::new(id, block).with_config(config)
}

fn output(id: &str, name: &str) -> NodeDoc {
    node(id, "graph.output", json!({"name": name}))
}

async fn run_with(
    doc: &GraphDoc,
    inputs: ValueMap,
    secrets: &[(&str, &str)],
) -> (RunReport, Vec<RunEvent>) {
    let registry = Arc::new(Registry::builtin());
    let graph =
        validate(doc, registry.as_ref()).unwrap_or_else(|p| panic!("invalid graph: {p:#?}"));
    let secrets = Secrets(
        secrets
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
    );
    let executor = Executor::new(registry).with_secrets(Arc::new(secrets));
    let sink = Arc::new(CollectSink::default());
    let report = executor
        .run(Arc::new(graph), inputs, RunOptions::default(), sink.clone())
        .await;
    (report, sink.events())
}

async fn run(doc: &GraphDoc) -> (RunReport, Vec<RunEvent>) {
    run_with(doc, ValueMap::new(), &[]).await
}

fn out_text(report: &RunReport, name: &str) -> String {
    match report.outputs.get(name) {
        Some(Value::Text(text)) => String::clone(text),
        other => panic!("output `{name}` is {other:?}; run: {report:#?}"),
    }
}

fn partials(events: &[RunEvent], node_id: &str) -> String {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::NodePartial { node, port, chunk } if node == node_id && port == "text" => {
                Some(chunk.as_str())
            }
            _ => None,
        })
        .collect()
}

fn node_report<'a>(report: &'a RunReport, id: &str) -> &'a agentloom_engine::NodeReport {
    report.nodes.iter().find(|n| n.id == id).unwrap()
}

const STORY: &str = "Once upon a time a graph of small blocks learned to stream its words, one by one, to a canvas that waited patiently.";

async fn streaming_matches_the_whole_reply(provider: &str, base: String) {
    let mut doc = GraphDoc::new("stream");
    for (id, stream) in [("streamed", true), ("whole", false)] {
        doc.nodes.push(node(
            id,
            "llm.chat",
            json!({"provider": provider, "base_url": base, "model": "test-model", "prompt": "Tell a story", "stream": stream}),
        ));
        doc.nodes.push(output(&format!("{id}_out"), id));
        doc.edges
            .push(EdgeDoc::new(id, "text", &format!("{id}_out"), "value"));
    }
    let (report, events) = run(&doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(out_text(&report, "streamed"), STORY);
    assert_eq!(out_text(&report, "whole"), STORY);
    assert_eq!(
        partials(&events, "streamed"),
        STORY,
        "the canvas saw the same text"
    );
    let pieces = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::NodePartial { node, .. } if node == "streamed"))
        .count();
    assert!(pieces > 10, "streamed word by word, got {pieces} pieces");
    assert_eq!(partials(&events, "whole"), "");
}

#[tokio::test]
async fn openai_streaming_assembles_the_same_text_as_the_whole_reply() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    streaming_matches_the_whole_reply("openai", format!("{}/v1", fake.base())).await;
}

#[tokio::test]
async fn anthropic_streaming_assembles_the_same_text_as_the_whole_reply() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    streaming_matches_the_whole_reply("anthropic", fake.base()).await;
}

async fn streamed_tool_calls(provider: &str, base: String) {
    let tools = json!([{"name": "get_weather", "description": "The weather forecast for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "array"}}, "required": ["city"]}}]);
    let mut doc = GraphDoc::new("tools");
    doc.nodes.push(node(
        "ask",
        "llm.chat",
        json!({"provider": provider, "base_url": base, "model": "test-model", "prompt": "What is the weather in Oslo?", "tools": tools}),
    ));
    doc.nodes.push(output("calls", "calls"));
    doc.nodes.push(output("conversation", "conversation"));
    doc.edges
        .push(EdgeDoc::new("ask", "tool_calls", "calls", "value"));
    doc.edges
        .push(EdgeDoc::new("ask", "messages", "conversation", "value"));
    let (report, _) = run(&doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    let calls = report.outputs.get("calls").unwrap().to_json();
    assert_eq!(calls.as_array().unwrap().len(), 1, "{calls}");
    assert_eq!(calls[0]["name"], "get_weather");
    assert_eq!(
        calls[0]["arguments"],
        json!({"city": "Oslo", "unit": "celsius", "days": [1, 2, 3]})
    );
    assert!(
        calls[0]["id"].as_str().is_some_and(|id| id.len() > 5),
        "{calls}"
    );
    // The assistant turn keeps the call, ready for the tool result.
    let conversation = report.outputs.get("conversation").unwrap().to_json();
    assert_eq!(conversation[1]["role"], "assistant");
    assert_eq!(conversation[1]["tool_calls"][0]["name"], "get_weather");
}

#[tokio::test]
async fn openai_tool_calls_are_assembled_from_streamed_fragments() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    streamed_tool_calls("openai", format!("{}/v1", fake.base())).await;
}

#[tokio::test]
async fn anthropic_tool_calls_are_assembled_from_streamed_fragments() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    streamed_tool_calls("anthropic", fake.base()).await;
}

fn person_graph(base: &str, max_attempts: u64) -> GraphDoc {
    let mut doc = GraphDoc::new("structured");
    doc.nodes.push(node(
        "extract",
        "llm.structured",
        json!({"base_url": base, "model": "test-model", "max_attempts": max_attempts,
               "prompt": "Extract the person from: {{ text }}",
               "schema": {"type": "object", "properties": {"name": {"type": "string"}, "born": {"type": "integer"}}, "required": ["name", "born"]}}),
    ));
    doc.nodes.push(node(
        "text",
        "data.constant",
        json!({"value": "Ada Lovelace, born 1815, wrote the first program."}),
    ));
    doc.nodes.push(output("person", "person"));
    doc.nodes.push(output("usage", "usage"));
    doc.edges
        .push(EdgeDoc::new("text", "value", "extract", "text"));
    doc.edges
        .push(EdgeDoc::new("extract", "object", "person", "value"));
    doc.edges
        .push(EdgeDoc::new("extract", "usage", "usage", "value"));
    doc
}

#[tokio::test]
async fn structured_output_is_retried_with_the_schema_problems() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let base = format!("{}/v1", fake.base());
    let (report, _) = run(&person_graph(&base, 3)).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(
        report.outputs.get("person").unwrap().to_json(),
        json!({"name": "Ada Lovelace", "born": 1815})
    );
    assert_eq!(report.outputs.get("usage").unwrap().to_json()["calls"], 2);
    let counts = fake.rule_counts().await;
    assert_eq!(counts["structured_first_try"], 1, "{counts}");
    assert_eq!(counts["structured_fixed"], 1, "{counts}");

    // With one attempt the problem is reported, naming the place in the answer.
    let (report, _) = run(&person_graph(&base, 1)).await;
    assert_eq!(report.status, RunStatus::Failed);
    let error = node_report(&report, "extract").error.clone().unwrap();
    assert!(
        error.starts_with("the model's answer did not match the schema after 1 attempt: at /born:"),
        "{error}"
    );
    assert!(
        error.contains("\"eighteen fifteen\" is not of type \"integer\""),
        "{error}"
    );
}

#[tokio::test]
async fn a_429_is_retried_inside_the_node() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let mut doc = GraphDoc::new("429");
    doc.nodes.push(node(
        "ask",
        "llm.chat",
        json!({"base_url": format!("{}/v1", fake.base()), "model": "test-model", "prompt": "Please rate limit me", "stream": false}),
    ));
    doc.nodes.push(output("answer", "answer"));
    doc.edges
        .push(EdgeDoc::new("ask", "text", "answer", "value"));
    let started = Instant::now();
    let (report, _) = run(&doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(
        out_text(&report, "answer"),
        "Answered after the rate limit."
    );
    assert_eq!(node_report(&report, "ask").attempts, 1);
    // fakellm sends no Retry-After: the first backoff is one second.
    assert!(started.elapsed() >= Duration::from_millis(950));
    let counts = fake.rule_counts().await;
    assert_eq!(
        (
            counts["rate_limited_first"].as_u64(),
            counts["rate_limited_then_ok"].as_u64()
        ),
        (Some(1), Some(1)),
        "{counts}"
    );
}

#[tokio::test]
async fn a_429_goes_to_the_node_retry_policy_when_internal_retries_are_off() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let mut doc = GraphDoc::new("429 policy");
    let mut ask = node(
        "ask",
        "llm.chat",
        json!({"base_url": format!("{}/v1", fake.base()), "model": "test-model", "prompt": "rate limit me, by policy", "stream": false, "max_retries": 0}),
    );
    ask.retry = Some(RetryPolicy {
        max_attempts: 2,
        backoff_ms: 50,
        ..RetryPolicy::default()
    });
    doc.nodes.push(ask);
    doc.nodes.push(output("answer", "answer"));
    doc.edges
        .push(EdgeDoc::new("ask", "text", "answer", "value"));
    let (report, events) = run(&doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(
        out_text(&report, "answer"),
        "Answered after the rate limit."
    );
    assert_eq!(node_report(&report, "ask").attempts, 2);
    let retry = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::NodeRetrying { error, .. } => Some(error.clone()),
            _ => None,
        })
        .expect("a retry event");
    assert!(
        retry.contains("is rate limiting requests (HTTP 429: Rate limit reached for requests)"),
        "{retry}"
    );
}

#[tokio::test]
async fn usage_and_cost_are_summed_per_node_and_per_run() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let mut doc = GraphDoc::new("usage");
    doc.nodes.push(node(
        "text",
        "data.constant",
        json!({"value": "Agentloom is a desktop app for agent graphs."}),
    ));
    doc.nodes.push(node(
        "first",
        "llm.chat",
        json!({"base_url": format!("{}/v1", fake.base()), "model": "test-model", "stream": false,
               "prompt": "Summarize: {{ text }}", "price_in": 3.0, "price_out": 15.0}),
    ));
    doc.nodes.push(node(
        "second",
        "llm.chat",
        json!({"provider": "anthropic", "base_url": fake.base(), "model": "claude-test",
               "prompt": "Summarize again: {{ text }}", "price_in": 5.0, "price_out": 25.0}),
    ));
    doc.nodes.push(output("usage_first", "usage_first"));
    doc.nodes.push(output("usage_second", "usage_second"));
    doc.edges
        .push(EdgeDoc::new("text", "value", "first", "text"));
    doc.edges
        .push(EdgeDoc::new("first", "text", "second", "text"));
    doc.edges
        .push(EdgeDoc::new("first", "usage", "usage_first", "value"));
    doc.edges
        .push(EdgeDoc::new("second", "usage", "usage_second", "value"));
    let (report, events) = run(&doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    let mut total_in = 0;
    let mut total_out = 0;
    let mut total_cost = 0.0;
    for (id, price_in, price_out) in [("first", 3.0, 15.0), ("second", 5.0, 25.0)] {
        let usage = report
            .outputs
            .get(&format!("usage_{id}"))
            .unwrap()
            .to_json();
        let (input, output) = (
            usage["input_tokens"].as_u64().unwrap(),
            usage["output_tokens"].as_u64().unwrap(),
        );
        assert!(input > 0 && output > 0, "{id}: {usage}");
        assert_eq!(usage["estimated"], false, "{id}: the provider's counts");
        #[allow(clippy::cast_precision_loss)]
        let cost = (input as f64 * price_in + output as f64 * price_out) / 1e6;
        assert!(
            (usage["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12,
            "{id}: {usage}"
        );
        let reported = node_report(&report, id).usage;
        assert_eq!(
            (reported.input_tokens, reported.output_tokens),
            (input, output),
            "{id}"
        );
        assert!((reported.cost_usd - cost).abs() < 1e-12, "{id}");
        let from_events: f64 = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::NodeUsage { node, usage } if node == id => Some(usage.cost_usd),
                _ => None,
            })
            .sum();
        assert!((from_events - cost).abs() < 1e-12, "{id}");
        total_in += input;
        total_out += output;
        total_cost += cost;
    }
    assert_eq!(report.usage.input_tokens, total_in);
    assert_eq!(report.usage.output_tokens, total_out);
    assert!((report.usage.cost_usd - total_cost).abs() < 1e-12);
    assert!(total_cost > 0.0);
}

#[tokio::test]
async fn the_cost_limit_stops_the_run() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let base = format!("{}/v1", fake.base());
    let mut doc = GraphDoc::new("expensive");
    doc.settings.max_cost_usd = Some(0.5);
    // A dollar a token: the first answer is over the limit.
    doc.nodes.push(node(
        "first",
        "llm.chat",
        json!({"base_url": base, "model": "test-model", "stream": false, "prompt": "Summarize this", "price_in": 1_000_000.0, "price_out": 1_000_000.0}),
    ));
    doc.nodes.push(node(
        "second",
        "llm.chat",
        json!({"base_url": base, "model": "test-model", "stream": false, "prompt": "Summarize {{ text }}"}),
    ));
    doc.nodes.push(output("out", "out"));
    doc.edges
        .push(EdgeDoc::new("first", "text", "second", "text"));
    doc.edges
        .push(EdgeDoc::new("second", "text", "out", "value"));
    let (report, _) = run(&doc).await;
    assert_eq!(report.status, RunStatus::Failed, "{report:#?}");
    // The call's likely cost (prompt and output at a dollar a token) is set aside before it
    // is sent: it cannot fit in $0.50, so nothing is sent and nothing is spent.
    let error = report.error.clone().unwrap();
    assert!(
        error.contains("cost limit reached: node `first` may spend up to $"),
        "{error}"
    );
    assert!(error.contains("of its max_cost_usd of $0.5000"), "{error}");
    assert_eq!(report.usage.cost_usd, 0.0);
    assert_ne!(node_report(&report, "second").status, NodeStatus::Done);
    let counts = fake.rule_counts().await;
    assert_eq!(
        counts["summarize"].as_u64().unwrap_or(0),
        0,
        "no model call was made: {counts}"
    );
}

#[tokio::test]
async fn the_model_picks_the_branch_and_the_other_is_skipped() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let mut doc = GraphDoc::new("triage");
    doc.nodes.push(node(
        "mail",
        "data.constant",
        json!({"value": "The parcel arrived broken, again."}),
    ));
    doc.nodes.push(node(
        "triage",
        "llm.condition",
        json!({"base_url": format!("{}/v1", fake.base()), "model": "test-model",
               "prompt": "Is this message a complaint or praise?\n\n{{ message }}", "branches": ["complaint", "praise"]}),
    ));
    doc.nodes.push(output("on_complaint", "complaint"));
    doc.nodes.push(output("on_praise", "praise"));
    doc.nodes.push(output("choice", "choice"));
    doc.edges
        .push(EdgeDoc::new("mail", "value", "triage", "message"));
    doc.edges
        .push(EdgeDoc::new("mail", "value", "triage", "value"));
    doc.edges
        .push(EdgeDoc::new("triage", "complaint", "on_complaint", "value"));
    doc.edges
        .push(EdgeDoc::new("triage", "praise", "on_praise", "value"));
    doc.edges
        .push(EdgeDoc::new("triage", "choice", "choice", "value"));
    let (report, _) = run(&doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(
        out_text(&report, "complaint"),
        "The parcel arrived broken, again."
    );
    assert_eq!(out_text(&report, "choice"), "complaint");
    assert!(!report.outputs.contains_key("praise"));
    assert_eq!(
        node_report(&report, "on_praise").status,
        NodeStatus::Skipped
    );
}

/// Captures everything logged, at every level.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn api_keys_never_appear_in_events_errors_reports_or_logs() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    const GOOD: &str = "sk-good-9d8c7b6a5f4e3d2c1b0a";
    const REVOKED: &str = "sk-revoked-1b2c3d4e5f60718293a4";
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let base = format!("{}/v1", fake.base());
    let mut doc = GraphDoc::new("keys");
    // The base URL is a custom one, so naming the credential makes it required.
    doc.nodes.push(node("good", "llm.chat", json!({"base_url": base, "model": "test-model", "prompt": "Summarize the news", "credential": "openai"})));
    doc.nodes.push(node("bad", "llm.chat", json!({"base_url": base, "model": "test-model", "prompt": "Summarize {{ text }}", "credential": "old key", "stream": false})));
    doc.nodes.push(output("out", "out"));
    doc.edges.push(EdgeDoc::new("good", "text", "bad", "text"));
    doc.edges.push(EdgeDoc::new("bad", "text", "out", "value"));
    let (report, events) = run_with(
        &doc,
        ValueMap::new(),
        &[("openai", GOOD), ("old key", REVOKED)],
    )
    .await;
    assert_eq!(report.status, RunStatus::Failed, "{report:#?}");
    assert_eq!(node_report(&report, "good").status, NodeStatus::Done);
    let error = node_report(&report, "bad").error.clone().unwrap();
    assert_eq!(
        error,
        format!(
            "the OpenAI-compatible server at {base} refused the API key (HTTP 401). The key comes from credential `old key`: check or replace it in Credentials, or set AGENTLOOM_SECRET_OLD_KEY for headless runs"
        )
    );
    let everything = format!(
        "{}\n{}\n{report:?}\n{}",
        serde_json::to_string(&events).unwrap(),
        serde_json::to_string(&report).unwrap(),
        String::from_utf8_lossy(&logs.0.lock().unwrap()),
    );
    assert!(
        everything.contains("calling the model"),
        "the logs were captured"
    );
    for key in [GOOD, REVOKED] {
        assert!(!everything.contains(key), "a key leaked");
        assert!(!everything.contains(&key[3..15]), "part of a key leaked");
    }
}

#[tokio::test]
async fn the_summarize_example_runs_against_any_openai_compatible_endpoint() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets/examples/online/llm-summarize.agentloom.json");
    let doc = GraphDoc::from_json_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let inputs = ValueMap::from([
        (
            "base_url".to_owned(),
            Value::from(format!("{}/v1", fake.base())),
        ),
        ("model".to_owned(), Value::from("any-model")),
        (
            "text".to_owned(),
            Value::from("Agentloom is a native desktop app. It runs agent graphs in-process."),
        ),
    ]);
    // The example names its credential (its default base_url is api.openai.com).
    let (report, events) = run_with(&doc, inputs, &[("openai", "sk-local-test")]).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    let summary = out_text(&report, "summary");
    assert_eq!(
        summary,
        "Agentloom runs agent graphs natively, with secrets in the keychain and every run logged to SQLite."
    );
    assert_eq!(partials(&events, "summarize"), summary);
    let usage = report.outputs.get("usage").unwrap().to_json();
    assert_eq!(usage["model"], "any-model");
    assert_eq!(usage["calls"], 1);
}

#[tokio::test]
async fn a_node_retry_tells_the_model_why_the_previous_attempt_failed() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let base = format!("{}/v1", fake.base());
    // One answer per attempt; the graph's retry policy gives a second attempt.
    let mut doc = person_graph(&base, 1);
    doc.nodes[0].retry = Some(RetryPolicy {
        max_attempts: 2,
        backoff_ms: 10,
        ..RetryPolicy::default()
    });
    let (report, events) = run(&doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(
        report.outputs.get("person").unwrap().to_json(),
        json!({"name": "Ada Lovelace", "born": 1815})
    );
    assert_eq!(node_report(&report, "extract").attempts, 2);
    let retried = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::NodeRetrying { error, .. } => Some(error.clone()),
            _ => None,
        })
        .expect("a retry event");
    assert!(
        retried.starts_with("the model's answer did not match the schema after 1 attempt"),
        "{retried}"
    );
    let counts = fake.rule_counts().await;
    assert_eq!(counts["structured_first_try"], 1, "{counts}");
    assert_eq!(counts["structured_after_node_retry"], 1, "{counts}");
}

#[tokio::test]
async fn tools_computed_by_the_graph_reach_the_model() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let mut doc = GraphDoc::new("computed tools");
    doc.nodes.push(node(
        "tools",
        "data.constant",
        json!({"value": [{"type": "function", "function": {"name": "get_weather", "description": "The weather forecast for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}),
    ));
    doc.nodes.push(node(
        "ask",
        "llm.chat",
        json!({"base_url": format!("{}/v1", fake.base()), "model": "test-model", "prompt": "What is the weather in Oslo?"}),
    ));
    doc.nodes.push(output("calls", "calls"));
    doc.edges
        .push(EdgeDoc::new("tools", "value", "ask", "tools"));
    doc.edges
        .push(EdgeDoc::new("ask", "tool_calls", "calls", "value"));
    let (report, _) = run(&doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    let calls = report.outputs.get("calls").unwrap().to_json();
    assert_eq!(calls[0]["name"], "get_weather", "{calls}");
    assert_eq!(calls[0]["arguments"]["city"], "Oslo");
    let counts = fake.rule_counts().await;
    assert_eq!(counts["weather_tool"], 1, "{counts}");
}

/// Secrets whose `oauth` credential refreshes to a new token, counting refreshes.
struct RefreshingSecrets {
    current: Mutex<String>,
    fresh: String,
    refreshes: Mutex<u32>,
}

impl SecretSource for RefreshingSecrets {
    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        match name {
            "oauth" => Ok(Secret::new(self.current.lock().unwrap().clone())
                .bound_to(BoundHosts::parse(&["*"]).unwrap())),
            _ => Err(SecretError::Missing {
                name: name.to_owned(),
                env_var: secret_env_var(name),
            }),
        }
    }

    fn refresh_secret(&self, name: &str, refused: &Secret) -> Result<Option<Secret>, SecretError> {
        assert_eq!(name, "oauth");
        let mut current = self.current.lock().unwrap();
        if *current == refused.expose() {
            *self.refreshes.lock().unwrap() += 1;
            current.clone_from(&self.fresh);
        }
        Ok(Some(
            Secret::new(current.clone()).bound_to(BoundHosts::parse(&["*"]).unwrap()),
        ))
    }
}

#[tokio::test]
async fn a_refused_token_is_refreshed_once_through_the_executor() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    // Not streamed: fakellm answers a streamed request with its mock text even for an
    // error rule.
    const REVOKED: &str = "sk-revoked-1b2c3d4e5f60718293a4";
    let mut doc = GraphDoc::new("refresh");
    doc.nodes.push(node(
        "ask",
        "llm.chat",
        json!({"base_url": format!("{}/v1", fake.base()), "model": "test-model", "prompt": "Summarize the news", "credential": "oauth", "stream": false}),
    ));
    doc.nodes.push(output("summary", "summary"));
    doc.edges
        .push(EdgeDoc::new("ask", "text", "summary", "value"));
    let registry = Arc::new(Registry::builtin());
    let graph = validate(&doc, registry.as_ref()).unwrap();
    let secrets = Arc::new(RefreshingSecrets {
        current: Mutex::new(REVOKED.to_owned()),
        fresh: "sk-fresh-5e6f7a8b9c0d1e2f3a4b".to_owned(),
        refreshes: Mutex::new(0),
    });
    let executor = Executor::new(registry).with_secrets(secrets.clone());
    let sink = Arc::new(CollectSink::default());
    let report = executor
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions::default(),
            sink,
        )
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    let summary = out_text(&report, "summary");
    assert!(
        summary.starts_with("Agentloom runs agent graphs"),
        "{summary}"
    );
    assert_eq!(node_report(&report, "ask").attempts, 1);
    assert_eq!(*secrets.refreshes.lock().unwrap(), 1);
    let counts = fake.rule_counts().await;
    assert_eq!(
        (counts["revoked_key"].as_u64(), counts["summarize"].as_u64()),
        (Some(1), Some(1)),
        "{counts}"
    );
}

/// What the runs of a graph file that is not trusted get for every credential (as
/// `UntrustedSecrets` in the app): a refusal saying how to trust the file.
struct RefusingSecrets;

const REFUSAL: &str = "graph file /shared/copied.agentloom.json is not trusted: run `agentloom trust /shared/copied.agentloom.json`";

impl SecretSource for RefusingSecrets {
    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        Err(SecretError::Unusable {
            name: name.to_owned(),
            message: REFUSAL.to_owned(),
        })
    }
}

async fn run_refused(doc: &GraphDoc) -> RunReport {
    let registry = Arc::new(Registry::builtin());
    let graph =
        validate(doc, registry.as_ref()).unwrap_or_else(|p| panic!("invalid graph: {p:#?}"));
    let executor = Executor::new(registry).with_secrets(Arc::new(RefusingSecrets));
    executor
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions::default(),
            Arc::new(CollectSink::default()),
        )
        .await
}

/// A TCP relay in front of fakellm that keeps every byte the clients sent. fakellm
/// matches a header only by its exact value, so whether one was sent at all is read here.
struct Relay {
    port: u16,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl Relay {
    async fn start(to: u16) -> Relay {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let kept = sent.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(("127.0.0.1", to))
                    .await
                    .unwrap();
                let (mut client_in, mut client_out) = client.into_split();
                let (mut server_in, mut server_out) = server.into_split();
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 16 * 1024];
                    while let Ok(n @ 1..) = client_in.read(&mut buf).await {
                        kept.lock().unwrap().extend_from_slice(&buf[..n]);
                        if server_out.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = server_out.shutdown().await;
                });
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_in, &mut client_out).await;
                });
            }
        });
        Relay { port, sent }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything sent so far, lower-cased.
    fn sent(&self) -> String {
        String::from_utf8_lossy(&self.sent.lock().unwrap()).to_ascii_lowercase()
    }
}

/// A graph copied from elsewhere is not trusted and may use no credential; a local model
/// it calls without naming one still answers, and gets no key.
#[tokio::test]
async fn a_credential_the_graph_does_not_name_is_not_needed_and_no_key_is_sent() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let relay = Relay::start(fake.port()).await;
    let mut doc = GraphDoc::new("local model, untrusted file");
    for (id, provider, base, stream) in [
        ("openai", "openai", format!("{}/v1", relay.base()), true),
        (
            "openai_whole",
            "openai",
            format!("{}/v1", relay.base()),
            false,
        ),
        ("anthropic", "anthropic", relay.base(), true),
    ] {
        doc.nodes.push(node(
            id,
            "llm.chat",
            json!({"provider": provider, "base_url": base, "model": "test-model", "prompt": "Summarize the news", "stream": stream}),
        ));
        doc.nodes.push(output(&format!("{id}_out"), id));
        doc.edges
            .push(EdgeDoc::new(id, "text", &format!("{id}_out"), "value"));
    }
    let report = run_refused(&doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    for id in ["openai", "openai_whole", "anthropic"] {
        assert_eq!(
            out_text(&report, id),
            "Agentloom runs agent graphs natively, with secrets in the keychain and every run logged to SQLite."
        );
    }
    let sent = relay.sent();
    assert_eq!(
        sent.matches("post /v1/chat/completions ").count(),
        2,
        "{sent}"
    );
    assert_eq!(sent.matches("post /v1/messages ").count(), 1, "{sent}");
    for header in ["\r\nauthorization:", "\r\nx-api-key:"] {
        assert!(!sent.contains(header), "{header} was sent:\n{sent}");
    }
    let counts = fake.rule_counts().await;
    assert_eq!(counts["summarize"], 3, "{counts}");
}

/// A credential the graph names is needed: refused, the node fails with the refusal
/// (how to trust the file) before anything is sent.
#[tokio::test]
async fn a_credential_the_graph_names_is_needed_and_its_refusal_is_the_error() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let relay = Relay::start(fake.port()).await;
    let base = format!("{}/v1", relay.base());
    let mut doc = GraphDoc::new("named credential, untrusted file");
    doc.nodes.push(node(
        "ask",
        "llm.chat",
        json!({"base_url": base, "model": "test-model", "prompt": "Summarize the news", "credential": "openai"}),
    ));
    doc.nodes.push(output("summary", "summary"));
    doc.edges
        .push(EdgeDoc::new("ask", "text", "summary", "value"));
    let report = run_refused(&doc).await;
    assert_eq!(report.status, RunStatus::Failed, "{report:#?}");
    assert_eq!(
        node_report(&report, "ask").error.as_deref(),
        Some(
            format!(
                "the OpenAI-compatible server at {base} needs an API key: credential `openai`: {REFUSAL}"
            )
            .as_str()
        )
    );
    assert_eq!(relay.sent(), "", "nothing is sent");
    let counts = fake.rule_counts().await;
    assert_eq!(counts, json!({}), "{counts}");
}
