//! The LLM blocks against small local servers that speak the wire formats (real HTTP on
//! 127.0.0.1): Ollama's NDJSON API, and the failure modes a scripted peer cannot produce
//! (Retry-After, streams cut off or stalled mid-way, slow servers, echoed keys).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloom_core::{ErrorClass, Value, ValueMap};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::testing::{TestCtx, inputs, run_block_with};

const KEY: &str = "sk-test-7f3a9c1e5b2d4f6a8c0e";

/// What the test server saw.
#[derive(Default)]
struct Seen {
    requests: AtomicUsize,
    bodies: Mutex<Vec<serde_json::Value>>,
    headers: Mutex<Vec<HeaderMap>>,
}

impl Seen {
    fn record(&self, headers: &HeaderMap, body: &serde_json::Value) -> usize {
        self.bodies.lock().unwrap().push(body.clone());
        self.headers.lock().unwrap().push(headers.clone());
        self.requests.fetch_add(1, Ordering::SeqCst) + 1
    }
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A body sent in pieces, with a pause before each.
fn chunked(pieces: Vec<String>, pause: Duration) -> Body {
    let stream = futures::stream::unfold(pieces.into_iter(), move |mut rest| async move {
        let piece = rest.next()?;
        tokio::time::sleep(pause).await;
        Some((Ok::<_, std::io::Error>(piece), rest))
    });
    Body::from_stream(stream)
}

/// An Ollama that answers "The sky is blue because of Rayleigh scattering." (streamed as
/// NDJSON cut at odd places, or whole), a tool call for prompts mentioning weather, and
/// lists two models.
async fn ollama(seen: Arc<Seen>) -> String {
    const WORDS: [&str; 8] = [
        "The",
        " sky",
        " is",
        " blue",
        " because",
        " of",
        " Rayleigh",
        " scattering.",
    ];
    let chat = move |headers: HeaderMap, axum::Json(body): axum::Json<serde_json::Value>| {
        let seen = seen.clone();
        async move {
            seen.record(&headers, &body);
            if body["model"] == "missing" {
                return (
                    StatusCode::NOT_FOUND,
                    axum::Json(json!({"error": "model 'missing' not found, try pulling it first"})),
                )
                    .into_response();
            }
            let asks_weather = body["messages"].to_string().contains("weather");
            let done = json!({"model": body["model"], "message": {"role": "assistant", "content": ""}, "done": true,
                "done_reason": "stop", "prompt_eval_count": 26, "eval_count": 8});
            if body["stream"] == false {
                let mut whole = done.clone();
                whole["message"]["content"] = json!(WORDS.concat());
                return axum::Json(whole).into_response();
            }
            let mut lines: Vec<String> = Vec::new();
            if asks_weather {
                lines.push(
                    json!({"message": {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
                ]}, "done": false})
                    .to_string()
                        + "\n",
                );
            } else {
                for word in WORDS {
                    lines.push(
                        json!({"message": {"role": "assistant", "content": word}, "done": false})
                            .to_string()
                            + "\n",
                    );
                }
            }
            lines.push(done.to_string() + "\n");
            // Cut the NDJSON at places that are not line ends, as TCP may.
            let all = lines.concat();
            let (a, rest) = all.split_at(17);
            let (b, c) = rest.split_at(rest.len() / 2);
            Response::builder()
                .header("content-type", "application/x-ndjson")
                .body(chunked(
                    vec![a.to_owned(), b.to_owned(), c.to_owned()],
                    Duration::from_millis(5),
                ))
                .unwrap()
        }
    };
    let app = Router::new().route("/api/chat", post(chat)).route(
        "/api/tags",
        get(|| async {
            axum::Json(json!({"models": [{"name": "qwen2.5:0.5b"}, {"name": "llama3.2:latest"}]}))
        }),
    );
    serve(app).await
}

fn text(out: &ValueMap, port: &str) -> String {
    out.get(port)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn ollama_streams_ndjson_and_matches_the_whole_reply() {
    let seen = Arc::new(Seen::default());
    let base = ollama(seen.clone()).await;
    let config = |stream: bool| {
        json!({"provider": "ollama", "base_url": base, "model": "llama3.2", "prompt": "Why is the {{ thing }} blue?",
               "system": "Be brief.", "temperature": 0.2, "max_tokens": 64, "stream": stream})
    };
    let ctx = TestCtx::new();
    let streamed = run_block_with(
        &ctx,
        "llm.chat",
        config(true),
        inputs([("thing", Value::from("sky"))]),
    )
    .await
    .unwrap();
    let partials: Vec<String> = ctx
        .partials()
        .into_iter()
        .filter(|(p, _)| p == "text")
        .map(|(_, c)| c)
        .collect();
    assert_eq!(partials.len(), 8, "{partials:?}");
    assert_eq!(partials.concat(), text(&streamed, "text"));
    let whole_ctx = TestCtx::new();
    let whole = run_block_with(
        &whole_ctx,
        "llm.chat",
        config(false),
        inputs([("thing", Value::from("sky"))]),
    )
    .await
    .unwrap();
    assert!(whole_ctx.partials().is_empty());
    assert_eq!(
        text(&streamed, "text"),
        "The sky is blue because of Rayleigh scattering."
    );
    assert_eq!(text(&whole, "text"), text(&streamed, "text"));

    // What Ollama received: native shape, options, and no key.
    let body = seen.bodies.lock().unwrap()[0].clone();
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "Why is the sky blue?"})
    );
    assert_eq!(
        body["options"],
        json!({"temperature": 0.2, "num_predict": 64})
    );
    assert!(
        seen.headers.lock().unwrap()[0]
            .get("authorization")
            .is_none()
    );

    // Usage from Ollama's counts; local models cost nothing.
    let usage = streamed.get("usage").unwrap().to_json();
    assert_eq!(usage["input_tokens"], 26);
    assert_eq!(usage["output_tokens"], 8);
    assert_eq!(usage["cost_usd"], 0.0);
    assert_eq!(usage["priced"], true);
    assert_eq!(usage["estimated"], false);
    assert_eq!(ctx.usage().input_tokens, 26);
    assert_eq!(ctx.usage().output_tokens, 8);

    // The conversation goes on from `messages`.
    let messages = streamed.get("messages").unwrap().to_json();
    assert_eq!(messages.as_array().unwrap().len(), 2);
    assert_eq!(messages[1]["role"], "assistant");
}

#[tokio::test]
async fn ollama_tool_calls_and_missing_models() {
    let seen = Arc::new(Seen::default());
    let base = ollama(seen.clone()).await;
    let tools = json!([{"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let out = run_block_with(
        &TestCtx::new(),
        "llm.chat",
        json!({"provider": "ollama", "base_url": base, "model": "llama3.2", "prompt": "What is the weather in Oslo?", "tools": tools}),
        ValueMap::new(),
    )
    .await
    .unwrap();
    let calls = out.get("tool_calls").unwrap().to_json();
    assert_eq!(calls[0]["name"], "get_weather");
    assert_eq!(calls[0]["arguments"], json!({"city": "Oslo"}));
    assert_eq!(
        seen.bodies.lock().unwrap()[0]["tools"][0]["function"]["name"],
        "get_weather"
    );

    let err = run_block_with(
        &TestCtx::new(),
        "llm.chat",
        json!({"provider": "ollama", "base_url": base, "model": "missing", "prompt": "hi"}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(
        err.message.starts_with(&format!(
            "model `missing` was not found by Ollama at {base} (HTTP 404: model 'missing' not found"
        )),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("ollama pull missing"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn local_ollama_models_are_listed_sorted_and_absence_is_quick() {
    let base = ollama(Arc::new(Seen::default())).await;
    assert_eq!(
        crate::list_local_ollama_models(&base).await.unwrap(),
        vec!["llama3.2:latest".to_owned(), "qwen2.5:0.5b".to_owned()]
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let started = Instant::now();
    let err = crate::list_local_ollama_models(&closed).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        err.to_string().starts_with(&format!(
            "no Ollama answers at {closed}; start it with `ollama serve`"
        )),
        "{err}"
    );
    let not_ollama = serve(Router::new().route("/api/tags", get(|| async { "hello" }))).await;
    let err = crate::list_local_ollama_models(&not_ollama)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not JSON"), "{err}");
}

/// An OpenAI-compatible server whose behaviour the test picks per request number.
async fn scripted<F>(seen: Arc<Seen>, script: F) -> String
where
    F: Fn(usize, &serde_json::Value) -> Response + Clone + Send + Sync + 'static,
{
    let handler = move |headers: HeaderMap, axum::Json(body): axum::Json<serde_json::Value>| {
        let seen = seen.clone();
        let script = script.clone();
        async move {
            let n = seen.record(&headers, &body);
            script(n, &body)
        }
    };
    serve(
        Router::new()
            .route("/v1/chat/completions", post(handler.clone()))
            .route("/v1/messages", post(handler)),
    )
    .await
}

fn ok_reply(text: &str) -> Response {
    axum::Json(json!({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 10, "completion_tokens": 2}}))
    .into_response()
}

fn sse(pieces: Vec<String>, pause: Duration) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(chunked(pieces, pause))
        .unwrap()
}

fn chunk(content: &str) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": content}}]})
    )
}

#[tokio::test]
async fn rate_limits_are_retried_after_retry_after() {
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |n, _| {
        if n == 1 {
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "1")],
                axum::Json(json!({"error": {"message": "Rate limit reached"}})),
            )
                .into_response()
        } else {
            ok_reply("after the wait")
        }
    })
    .await;
    let config = json!({"base_url": format!("{base}/v1"), "model": "gpt-4o-mini", "prompt": "hi", "stream": false});
    let started = Instant::now();
    let out = run_block_with(&TestCtx::new(), "llm.chat", config.clone(), ValueMap::new())
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(text(&out, "text"), "after the wait");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    assert!(
        waited >= Duration::from_millis(950),
        "waited only {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");

    // Without internal retries the error goes to the node's retry policy, with the wait.
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |_, _| {
        (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "7")],
            "slow down",
        )
            .into_response()
    })
    .await;
    let err = run_block_with(
        &TestCtx::new(),
        "llm.chat",
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "max_retries": 0}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient);
    assert_eq!(err.retry_after, Some(Duration::from_secs(7)));
    assert!(
        err.message
            .contains("is rate limiting requests (HTTP 429: slow down)"),
        "{}",
        err.message
    );
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |_, _| {
        (StatusCode::SERVICE_UNAVAILABLE, "overloaded").into_response()
    })
    .await;
    let started = Instant::now();
    let err = run_block_with(
        &TestCtx::new(),
        "llm.chat",
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "max_retries": 1}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "one backoff of a second"
    );
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    assert_eq!(err.class, ErrorClass::Transient);
    assert_eq!(
        err.message,
        format!(
            "the OpenAI-compatible server at {base}/v1 had a server error (HTTP 503 Service Unavailable: overloaded)"
        )
    );
}

#[tokio::test]
async fn a_stream_cut_off_midway_is_a_clear_transient_error() {
    let base = scripted(Arc::new(Seen::default()), |_, _| {
        sse(
            vec![chunk("Once upon"), chunk(" a time")],
            Duration::from_millis(5),
        )
    })
    .await;
    let ctx = TestCtx::new();
    let err = run_block_with(
        &ctx,
        "llm.chat",
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "story"}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient);
    assert_eq!(
        err.message,
        format!(
            "the reply stream from the OpenAI-compatible server at {base}/v1 was cut off after 16 characters before its end marker; the partial reply was discarded. The connection dropped or a proxy closed it; the node's retry policy can try again"
        )
    );
    assert_eq!(ctx.partials().len(), 2, "what arrived was shown");
    assert!(ctx.usage().is_zero(), "no usage for a lost reply");
}

#[tokio::test]
async fn slow_and_stalled_servers_time_out() {
    let base = scripted(Arc::new(Seen::default()), |n, _| {
        if n == 1 {
            // Headers, one piece, then silence.
            sse(vec![chunk("Hel"), chunk("lo")], Duration::from_millis(800))
        } else {
            sse(vec![chunk("late")], Duration::from_secs(5))
        }
    })
    .await;
    let config =
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "timeout_ms": 300});
    let err = run_block_with(&TestCtx::new(), "llm.chat", config.clone(), ValueMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient);
    assert!(err.message.starts_with(&format!("the reply stream from the OpenAI-compatible server at {base}/v1 stalled: nothing arrived for 300 ms")), "{}", err.message);

    let slow = serve(Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            "late"
        }),
    ))
    .await;
    let started = Instant::now();
    let err = run_block_with(
        &TestCtx::new(),
        "llm.chat",
        json!({"base_url": format!("{slow}/v1"), "model": "m", "prompt": "hi", "timeout_ms": 200}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(err.class, ErrorClass::Transient);
    assert!(
        err.message.starts_with(&format!(
            "no reply from the OpenAI-compatible server at {slow}/v1 within 200 ms"
        )),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn cancellation_reaches_the_request() {
    let base = scripted(Arc::new(Seen::default()), |_, _| {
        sse(vec![chunk("never")], Duration::from_secs(10))
    })
    .await;
    let ctx = Arc::new(TestCtx::new());
    let canceller = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let err = run_block_with(
        &ctx,
        "llm.chat",
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi"}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.class, ErrorClass::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn keys_go_in_headers_only_and_never_into_errors() {
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |n, _| match n {
        1 => ok_reply("fine"),
        2 => (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}})),
        )
            .into_response(),
        _ => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"message": format!("bad request for key {KEY}")}})),
        )
            .into_response(),
    })
    .await;
    let ctx = TestCtx::new()
        .with_secret("openai", KEY)
        .with_secret("claude", KEY);
    let config = json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "stream": false, "credential": "openai"});
    run_block_with(&ctx, "llm.chat", config.clone(), ValueMap::new())
        .await
        .unwrap();
    assert_eq!(
        seen.headers.lock().unwrap()[0]
            .get("authorization")
            .unwrap(),
        &format!("Bearer {KEY}")
    );
    let err = run_block_with(&ctx, "llm.chat", config.clone(), ValueMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(
        err.message.contains("refused the API key (HTTP 401)"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("credential `openai`")
            && err.message.contains("AGENTLOOM_SECRET_OPENAI"),
        "{}",
        err.message
    );
    let err = run_block_with(&ctx, "llm.chat", config, ValueMap::new())
        .await
        .unwrap_err();
    assert!(
        err.message.contains("bad request for key [redacted]"),
        "{}",
        err.message
    );
    assert!(!format!("{err:?}").contains(KEY));

    // Anthropic's headers.
    run_block_with(
        &ctx,
        "llm.chat",
        json!({"provider": "anthropic", "base_url": base, "model": "claude-x", "prompt": "hi", "credential": "claude", "stream": false}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    let headers = seen.headers.lock().unwrap()[3].clone();
    assert_eq!(headers.get("x-api-key").unwrap(), KEY);
    assert_eq!(headers.get("anthropic-version").unwrap(), "2023-06-01");
    assert!(headers.get("authorization").is_none());
}

#[tokio::test]
async fn a_credential_the_config_does_not_name_is_not_needed() {
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |n, _| match n {
        2 => (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": {"message": "You didn't provide an API key."}})),
        )
            .into_response(),
        _ => ok_reply("ok"),
    })
    .await;
    // A stored `openai` key, bound to every host, is still not sent: the block names none.
    let ctx = TestCtx::new().with_secret("openai", KEY);
    let config =
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "stream": false});
    let out = run_block_with(&ctx, "llm.chat", config.clone(), ValueMap::new())
        .await
        .unwrap();
    assert_eq!(text(&out, "text"), "ok");
    assert!(
        seen.headers.lock().unwrap()[0]
            .get("authorization")
            .is_none()
    );
    // A server that wants a key says so, and the error says which field to fill in.
    let err = run_block_with(&ctx, "llm.chat", config, ValueMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent);
    assert_eq!(
        err.message,
        format!(
            "the OpenAI-compatible server at {base}/v1 needs an API key (HTTP 401: You didn't provide an API key.), and this block sends none because its `credential` is empty: set the block's `credential` to the name of a stored credential holding the key (e.g. `openai`; add it in Credentials, or set AGENTLOOM_SECRET_OPENAI for headless runs)"
        )
    );
    assert!(
        seen.headers.lock().unwrap()[1]
            .get("authorization")
            .is_none()
    );

    // A named credential must exist, even for a local server, and stops the call before
    // it is sent.
    let err = crate::testing::run_block(
        "llm.chat",
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "credential": "groq"}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.message,
        format!(
            "the OpenAI-compatible server at {base}/v1 needs an API key: credential `groq` is not set: add it in Credentials, or set the environment variable AGENTLOOM_SECRET_GROQ for headless runs"
        )
    );
    // So must the hosted API's, named like its provider.
    let err = crate::testing::run_block(
        "llm.chat",
        json!({"provider": "anthropic", "model": "claude-sonnet-4-5", "prompt": "hi", "credential": "anthropic"}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert!(
        err.message.starts_with("Anthropic at https://api.anthropic.com needs an API key: credential `anthropic` is not set")
            && err.message.contains("AGENTLOOM_SECRET_ANTHROPIC"),
        "{}",
        err.message
    );
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
}

/// Nothing presents a credential as implied: not the block (the trust list would say
/// trusting a file sends it), not the field's default.
#[test]
fn no_llm_block_implies_a_credential() {
    use agentloom_core::BlockCatalog as _;
    let registry = crate::Registry::builtin();
    for kind in ["llm.chat", "llm.structured", "llm.condition", "ai.agent"] {
        let meta = registry.block(kind).unwrap().meta();
        assert_eq!(meta.credential, None, "{kind}");
        let field = meta
            .config
            .iter()
            .find(|f| f.name == "credential")
            .unwrap_or_else(|| panic!("{kind} has a credential field"));
        assert_eq!(field.default, None, "{kind}");
        assert!(!field.required, "{kind}");
        assert!(
            field.help.contains("Empty: no key is sent"),
            "{kind}: {}",
            field.help
        );
    }
}

#[tokio::test]
async fn a_local_server_needing_no_key_works_on_a_machine_without_a_keychain() {
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |_, _| ok_reply("no key needed")).await;
    let ctx = crate::testing::TestCtx::new().without_keychain();
    let out = crate::testing::run_block_with(
        &ctx,
        "llm.chat",
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "stream": false}),
        ValueMap::new(),
    )
    .await
    .unwrap();
    assert_eq!(text(&out, "text"), "no key needed");
    assert!(
        seen.headers.lock().unwrap()[0]
            .get("authorization")
            .is_none()
    );
}

#[tokio::test]
async fn base_url_comes_from_the_input_when_config_is_empty() {
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |_, _| ok_reply("from input")).await;
    let node = crate::testing::instantiate(
        "llm.chat",
        json!({"model": "m", "prompt": "Summarize {{ text }}"}),
    )
    .unwrap();
    let names: Vec<&str> = node
        .ports()
        .inputs
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["text", "history", "tools", "base_url"]);
    let node =
        crate::testing::instantiate("llm.chat", json!({"model": "m", "base_url": "http://h/v1"}))
            .unwrap();
    let names: Vec<&str> = node
        .ports()
        .inputs
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["prompt", "history", "tools"]);
    let out = crate::testing::run_block(
        "llm.chat",
        json!({"model": "m", "prompt": "Summarize {{ text }}", "stream": false}),
        inputs([
            ("text", Value::from("a long text")),
            ("base_url", Value::from(format!("{base}/v1"))),
        ]),
    )
    .await
    .unwrap();
    assert_eq!(text(&out, "text"), "from input");
    assert_eq!(
        seen.bodies.lock().unwrap()[0]["messages"][0]["content"],
        "Summarize a long text"
    );
    let err = crate::testing::run_block(
        "llm.chat",
        json!({"model": "m", "prompt": "x"}),
        inputs([("base_url", Value::from("nope"))]),
    )
    .await
    .unwrap_err();
    assert!(
        err.message
            .starts_with("input `base_url`: `nope` is not a valid URL"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn history_is_sent_first_and_extended() {
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |_, _| ok_reply("Paris, still.")).await;
    let history = Value::from_json(json!([
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."}
    ]));
    let out = crate::testing::run_block(
        "llm.chat",
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "And now?", "stream": false}),
        inputs([("history", history)]),
    )
    .await
    .unwrap();
    let sent = seen.bodies.lock().unwrap()[0]["messages"].clone();
    assert_eq!(sent.as_array().unwrap().len(), 3);
    assert_eq!(sent[2]["content"], "And now?");
    let messages = out.get("messages").unwrap().to_json();
    assert_eq!(messages.as_array().unwrap().len(), 4);
    assert_eq!(
        messages[3],
        json!({"role": "assistant", "content": "Paris, still."})
    );
    let err = crate::testing::run_block(
        "llm.chat",
        json!({"base_url": format!("{base}/v1"), "model": "m", "stream": false}),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.message,
        "input `prompt`: there is nothing to send: the prompt is empty and no history arrived"
    );
}

#[tokio::test]
async fn usage_is_estimated_when_the_server_reports_none_and_priced_from_config() {
    let base = scripted(Arc::new(Seen::default()), |_, _| {
        sse(
            vec![chunk("twelve chars"), "data: [DONE]\n\n".to_owned()],
            Duration::from_millis(1),
        )
    })
    .await;
    let ctx = TestCtx::new();
    let out = run_block_with(
        &ctx,
        "llm.chat",
        json!({"base_url": format!("{base}/v1"), "model": "my-local-model", "prompt": "sixteen chars!!!", "price_in": 1000000.0, "price_out": 2000000.0}),
        ValueMap::new(),
    )
    .await
    .unwrap();
    let usage = out.get("usage").unwrap().to_json();
    assert_eq!(usage["estimated"], true);
    assert_eq!(usage["input_tokens"], 4);
    assert_eq!(usage["output_tokens"], 3);
    assert_eq!(usage["cost_usd"], 10.0);
    assert!((ctx.usage().cost_usd - 10.0).abs() < 1e-9);
}

/// An OpenAI-compatible server that accepts only `Bearer fresh-token`.
async fn accepts_only_the_fresh_token(seen: Arc<Seen>) -> String {
    let handler = move |headers: HeaderMap, axum::Json(body): axum::Json<serde_json::Value>| {
        let seen = seen.clone();
        async move {
            seen.record(&headers, &body);
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if auth == "Bearer fresh-token" {
                ok_reply("hello with the fresh token")
            } else {
                (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(json!({"error": {"message": "invalid token"}})),
                )
                    .into_response()
            }
        }
    };
    serve(Router::new().route("/v1/chat/completions", post(handler))).await
}

#[tokio::test]
async fn a_401_refreshes_an_oauth_credential_once_and_retries_once() {
    let seen = Arc::new(Seen::default());
    let base = accepts_only_the_fresh_token(seen.clone()).await;
    let config = json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "stream": false, "credential": "idp"});
    let auth = |i: usize| {
        seen.headers.lock().unwrap()[i]
            .get("authorization")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    };

    // A refreshable credential: one refresh, and the call is repeated with the new token.
    let ctx = TestCtx::new()
        .with_secret("idp", "stale-token")
        .with_refresh("idp", "fresh-token");
    let out = run_block_with(&ctx, "llm.chat", config.clone(), ValueMap::new())
        .await
        .unwrap();
    assert_eq!(text(&out, "text"), "hello with the fresh token");
    assert_eq!(ctx.refreshes(), vec!["idp".to_owned()]);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    assert_eq!(auth(0), "Bearer stale-token");
    assert_eq!(auth(1), "Bearer fresh-token");
    // The next call uses the refreshed token directly.
    run_block_with(&ctx, "llm.chat", config.clone(), ValueMap::new())
        .await
        .unwrap();
    assert_eq!(ctx.refreshes().len(), 1);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);

    // An API key cannot be refreshed: the 401 is reported after one request.
    let ctx = TestCtx::new().with_secret("idp", "stale-token");
    let err = run_block_with(&ctx, "llm.chat", config.clone(), ValueMap::new())
        .await
        .unwrap_err();
    assert!(
        err.message.contains("refused the API key (HTTP 401)"),
        "{}",
        err.message
    );
    assert_eq!(seen.requests.load(Ordering::SeqCst), 4);

    // Refreshed, and refused again: one refresh, two requests, then a clear error.
    let ctx = TestCtx::new()
        .with_secret("idp", "stale-token")
        .with_refresh("idp", "also-refused");
    let err = run_block_with(&ctx, "llm.chat", config.clone(), ValueMap::new())
        .await
        .unwrap_err();
    assert_eq!(ctx.refreshes().len(), 1);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 6);
    assert_eq!(err.class, ErrorClass::Permanent);
    assert!(
        err.message.contains("credential `idp`")
            && err.message.contains("refreshed once and refused again")
            && err.message.contains("agentloom credentials login"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("stale-token") && !err.message.contains("also-refused"));

    // The refresh itself fails: the error names the credential and passes on what to do.
    let ctx = TestCtx::new()
        .with_secret("idp", "stale-token")
        .with_failing_refresh(
            "idp",
            "the provider refused refreshing the token: invalid_grant; sign in again with `agentloom credentials login oidc --issuer https://id.example --name idp --client-id ID`",
        );
    let err = run_block_with(&ctx, "llm.chat", config, ValueMap::new())
        .await
        .unwrap_err();
    assert_eq!(seen.requests.load(Ordering::SeqCst), 7);
    assert!(
        err.message.contains("refused the token of credential `idp` (HTTP 401) and getting a new one failed: the provider refused refreshing the token: invalid_grant; sign in again with `agentloom credentials login oidc"),
        "{}",
        err.message
    );
    assert_eq!(err.data.unwrap().to_json()["status"], 401);
}

#[tokio::test]
async fn node_retries_tell_the_model_what_failed() {
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |_, body| {
        if body["messages"]
            .to_string()
            .contains("The previous attempt failed")
        {
            ok_reply(r#"{"city": "Oslo"}"#)
        } else {
            ok_reply("not json at all")
        }
    })
    .await;
    let last_message = |i: usize| {
        seen.bodies.lock().unwrap()[i]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone()
    };
    let structured = json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "Where?", "stream": false,
        "max_attempts": 1, "schema": {"type": "object", "required": ["city"]}});

    // First attempt: no feedback; the failure is transient so that a retry policy applies.
    let err = run_block_with(
        &TestCtx::new(),
        "llm.structured",
        structured.clone(),
        ValueMap::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient);
    assert!(
        err.message
            .starts_with("the model's answer did not match the schema"),
        "{}",
        err.message
    );
    assert_eq!(last_message(0)["content"], "Where?");

    // The node's second attempt: the model is told why the first one failed.
    let retry = TestCtx::new().with_attempt(2, Some(&err.message));
    let out = run_block_with(&retry, "llm.structured", structured, ValueMap::new())
        .await
        .unwrap();
    assert_eq!(out["object"].to_json(), json!({"city": "Oslo"}));
    let told = last_message(1);
    assert_eq!(told["role"], "user");
    let told = told["content"].as_str().unwrap();
    assert!(
        told.starts_with("The previous attempt failed: the model's answer did not match the schema after 1 attempt: it is not JSON")
            && told.ends_with("Reply again with only JSON that matches the JSON Schema."),
        "{told}"
    );

    // llm.chat: the feedback is sent, but the conversation output holds only what the graph sent.
    let chat = json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "Weather?", "stream": false});
    let retry = TestCtx::new().with_attempt(2, Some("timed out after 500 ms"));
    let out = run_block_with(&retry, "llm.chat", chat.clone(), ValueMap::new())
        .await
        .unwrap();
    assert_eq!(
        last_message(2)["content"],
        "The previous attempt failed: timed out after 500 ms. Answer again."
    );
    let conversation = out["messages"].to_json();
    assert_eq!(conversation.as_array().unwrap().len(), 2, "{conversation}");
    assert_eq!(conversation[0]["content"], "Weather?");

    // A failure in reaching the model is nothing the model can fix: not sent.
    let unreachable = format!(
        "the OpenAI-compatible server at {base}/v1 had a server error (HTTP 502 Bad Gateway)"
    );
    let retry = TestCtx::new().with_attempt(2, Some(&unreachable));
    run_block_with(&retry, "llm.chat", chat, ValueMap::new())
        .await
        .unwrap();
    assert_eq!(last_message(3)["content"], "Weather?");

    // llm.condition asks for one of its branches again.
    let retry = TestCtx::new().with_attempt(2, Some("the model did not pick one of the branches (yes, no) in 1 attempt; it answered `maybe`"));
    let _ = run_block_with(
        &retry,
        "llm.condition",
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "Rain?", "max_attempts": 1}),
        ValueMap::new(),
    )
    .await;
    let told = last_message(4)["content"].as_str().unwrap().to_owned();
    assert!(
        told.contains("it answered `maybe`")
            && told.ends_with("Answer with exactly one of: yes, no."),
        "{told}"
    );
}

#[tokio::test]
async fn tools_from_the_input_extend_and_replace_the_configured_ones() {
    let seen = Arc::new(Seen::default());
    let base = scripted(seen.clone(), |_, _| ok_reply("ok")).await;
    let config = json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "stream": false,
    "tools": [
        {"name": "search", "description": "Search the web", "parameters": {"type": "object"}},
        {"name": "lookup", "description": "old lookup", "parameters": {"type": "object"}}
    ]});
    let node = crate::testing::instantiate("llm.chat", config.clone()).unwrap();
    let port = node.ports().input("tools").expect("a tools input");
    assert!(!port.required);
    let tool_names = |i: usize| -> Vec<(String, String)> {
        seen.bodies.lock().unwrap()[i]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .map(|t| {
                        (
                            t["function"]["name"].as_str().unwrap().to_owned(),
                            t["function"]["description"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    // In the OpenAI shape, one replacing a configured tool and one new.
    let computed = Value::from_json(json!([
        {"type": "function", "function": {"name": "lookup", "description": "new lookup", "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}},
        {"name": "get_weather", "description": "Weather for a city", "input_schema": {"type": "object"}}
    ]));
    run_block_with(
        &TestCtx::new(),
        "llm.chat",
        config.clone(),
        inputs([("tools", computed)]),
    )
    .await
    .unwrap();
    assert_eq!(
        tool_names(0),
        [
            ("search".to_owned(), "Search the web".to_owned()),
            ("lookup".to_owned(), "new lookup".to_owned()),
            ("get_weather".to_owned(), "Weather for a city".to_owned()),
        ]
    );
    // JSON text and a single tool are accepted; with no config tools, only the input's.
    let only_input =
        json!({"base_url": format!("{base}/v1"), "model": "m", "prompt": "hi", "stream": false});
    run_block_with(
        &TestCtx::new(),
        "llm.chat",
        only_input.clone(),
        inputs([(
            "tools",
            Value::from(r#"{"name": "echo", "description": "Echo"}"#),
        )]),
    )
    .await
    .unwrap();
    assert_eq!(tool_names(1), [("echo".to_owned(), "Echo".to_owned())]);
    // Bad definitions are an input error naming the problem; nothing is sent.
    let err = run_block_with(
        &TestCtx::new(),
        "llm.chat",
        only_input,
        inputs([(
            "tools",
            Value::from_json(json!([{"description": "no name"}])),
        )]),
    )
    .await
    .unwrap_err();
    assert!(
        err.message.starts_with("input `tools`: tool 0"),
        "{}",
        err.message
    );
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
}
