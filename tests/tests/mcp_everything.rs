//! MCP client blocks against the official `@modelcontextprotocol/server-everything`
//! (tests/peers/mcp): over streamable HTTP (tools listed, called from a graph, a server
//! that is down or goes away, a token from the keychain sent as bearer), and an agent that calls an MCP tool wired to it (its model
//! scripted by `fakellm`, tests/fixtures/agent/fakellm.yaml). The stdio transport and the
//! CLI are covered by ui/tests/mcp.rs.
//!
//! Set AGENTLOOM_SKIP_PEERS=1 to skip these tests when the peers are not installed.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::{Arc, Mutex};

use agentloom_blocks::Registry;
use agentloom_blocks::mcp::add_mcp_tools;
use agentloom_core::{
    BlockCatalog as _, Config, EdgeDoc, GraphDoc, McpServerDoc, NodeDoc, Value, ValueMap,
    ValueType, validate,
};
use agentloom_engine::{
    CollectSink, CredentialStore, EnvSecrets, EventKind, Executor, KeychainSecrets, RunOptions,
    RunStatus, StoredSecret,
};
use agentloom_tests::FakeLlm;
use agentloom_tests::mcp::{EverythingHttp, server_everything};
use serde_json::json;

fn http_server(url: &str) -> McpServerDoc {
    McpServerDoc {
        url: Some(url.to_owned()),
        ..McpServerDoc::default()
    }
}

/// `echo` and `get-sum` of the server named `everything`, their texts as outputs.
fn echo_and_sum_graph(server: McpServerDoc) -> GraphDoc {
    let mut doc = GraphDoc::new("MCP over HTTP");
    doc.mcp_servers.insert("everything".to_owned(), server);
    doc.nodes = vec![
        NodeDoc::new("message", "data.constant")
            .with_config(json!({"type": "text", "value": "hello over HTTP"})),
        NodeDoc::new("echo", "mcp.everything.echo"),
        NodeDoc::new("a", "data.constant").with_config(json!({"value": 1.5})),
        NodeDoc::new("b", "data.constant").with_config(json!({"value": 2})),
        NodeDoc::new("sum", "mcp.everything.get-sum"),
        NodeDoc::new("echoed", "graph.output").with_config(json!({"name": "echoed"})),
        NodeDoc::new("total", "graph.output").with_config(json!({"name": "total"})),
    ];
    doc.edges = vec![
        EdgeDoc::new("message", "value", "echo", "message"),
        EdgeDoc::new("echo", "text", "echoed", "value"),
        EdgeDoc::new("a", "value", "sum", "a"),
        EdgeDoc::new("b", "value", "sum", "b"),
        EdgeDoc::new("sum", "text", "total", "value"),
    ];
    doc
}

/// The built-in blocks plus the tools of the servers `doc` names, or the problems.
fn registry_for(doc: &GraphDoc) -> Result<Registry, Vec<agentloom_core::Problem>> {
    let mut registry = Registry::builtin();
    let problems = add_mcp_tools(&mut registry, doc, &EnvSecrets);
    if problems.is_empty() {
        Ok(registry)
    } else {
        Err(problems)
    }
}

async fn run(
    registry: Registry,
    doc: &GraphDoc,
) -> (agentloom_engine::RunReport, Arc<CollectSink>) {
    let registry = Arc::new(registry);
    let graph = validate(doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:#?}"));
    let workspace = tempfile::tempdir().unwrap();
    let sink = Arc::new(CollectSink::default());
    let report = Executor::new(registry)
        .with_workspace(workspace.path().to_path_buf())
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions::default(),
            sink.clone(),
        )
        .await;
    (report, sink)
}

#[tokio::test]
async fn http_server_tools_are_blocks_a_graph_calls() {
    let Some(server) = EverythingHttp::start() else {
        return;
    };
    let doc = echo_and_sum_graph(http_server(&server.url()));
    let registry = registry_for(&doc).unwrap_or_else(|p| panic!("{p:#?}"));

    // The tools are blocks, their inputs from the tools' input schemas.
    let sum = registry.block("mcp.everything.get-sum").unwrap();
    assert_eq!(sum.meta().category, "MCP");
    let node = sum
        .instantiate(&Config::new(), &registry.config_ctx())
        .unwrap();
    let inputs: Vec<(&str, ValueType, bool)> = node
        .ports()
        .inputs
        .iter()
        .map(|p| (p.name.as_str(), p.ty.clone(), p.required))
        .collect();
    assert_eq!(
        inputs,
        [
            ("a", ValueType::Number, true),
            ("b", ValueType::Number, true)
        ]
    );
    assert!(registry.block("mcp.everything.echo").is_some());

    let (report, _) = run(registry, &doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(
        report.outputs["echoed"],
        Value::from("Echo: hello over HTTP")
    );
    assert_eq!(
        report.outputs["total"],
        Value::from("The sum of 1.5 and 2 is 3.5.")
    );
}

#[tokio::test]
async fn an_http_server_that_is_down_is_a_validation_problem_and_a_node_error() {
    let Some(mut server) = EverythingHttp::start() else {
        return;
    };
    let doc = echo_and_sum_graph(http_server(&server.url()));

    // Reached at validation, then gone when the node runs: the node's error names the
    // server and the tool.
    let registry = registry_for(&doc).unwrap_or_else(|p| panic!("{p:#?}"));
    server.stop();
    let (report, _) = run(registry, &doc).await;
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.unwrap();
    assert!(
        error.contains("MCP server `everything` failed while calling"),
        "{error}"
    );

    // Not reachable at all: a problem naming the server, the URL and why.
    let problems = registry_for(&doc).err().unwrap();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].path, "$.mcp_servers.everything");
    let message = &problems[0].message;
    assert!(
        message.starts_with(&format!(
            "MCP server `everything`: `{}` did not complete the MCP handshake: ",
            server.url()
        )) && message.to_lowercase().contains("connection refused"),
        "{message}"
    );
}

#[tokio::test]
async fn an_agent_calls_an_mcp_tool_and_finishes_with_its_result() {
    for provider in ["openai", "anthropic"] {
        let Some(launcher) = server_everything() else {
            return;
        };
        let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
            return;
        };
        let base = match provider {
            "anthropic" => fake.base(),
            _ => format!("{}/v1", fake.base()),
        };
        let mut doc = GraphDoc::new("agent with an MCP tool");
        doc.mcp_servers.insert(
            "everything".to_owned(),
            McpServerDoc {
                command: Some(launcher.display().to_string()),
                args: vec!["stdio".to_owned()],
                ..McpServerDoc::default()
            },
        );
        doc.nodes = vec![
            NodeDoc::new("echo", "mcp.everything.echo"),
            NodeDoc::new("goal", "data.constant")
                .with_config(json!({"type": "text", "value": "TASK-MCP: ask the server to echo"})),
            NodeDoc::new("agent", "ai.agent").with_config(
                json!({"provider": provider, "base_url": base, "model": "test-model"}),
            ),
            NodeDoc::new("out", "graph.output").with_config(json!({"name": "answer"})),
        ];
        doc.edges = vec![
            EdgeDoc::new("echo", "tool", "agent", "tools"),
            EdgeDoc::new("goal", "value", "agent", "goal"),
            EdgeDoc::new("agent", "answer", "out", "value"),
        ];
        let registry = registry_for(&doc).unwrap_or_else(|p| panic!("{p:#?}"));
        let (report, sink) = run(registry, &doc).await;
        assert_eq!(
            report.status,
            RunStatus::Completed,
            "{provider}: {:?}",
            report.error
        );
        assert_eq!(
            report.outputs["answer"],
            Value::from("The server said: Echo: hello over MCP")
        );
        // The tool call ran the MCP node, visibly in the run, with the server's answer.
        let echo_outputs: Vec<ValueMap> = sink
            .events()
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::NodeFinished { node, outputs, .. } if node == "echo" => {
                    Some(outputs.clone())
                }
                _ => None,
            })
            .collect();
        assert!(
            echo_outputs
                .iter()
                .any(|o| o.get("text") == Some(&Value::from("Echo: hello over MCP"))),
            "{provider}: {echo_outputs:#?}"
        );
        let counts = fake.rule_counts().await;
        assert_eq!(counts["mcp_call"], 1, "{provider}: {counts}");
        assert_eq!(counts["mcp_finish"], 1, "{provider}: {counts}");
    }
}

/// A gate in front of `upstream` that passes on only requests with `Bearer {token}` (others
/// get 401), streaming the answers back; returns its URL and the `Authorization` headers seen.
/// With `quote_in_tool_errors` it answers every tool call itself, with an error quoting the
/// `Authorization` header, as a careless server would.
async fn bearer_gate(
    upstream: String,
    token: String,
    quote_in_tool_errors: bool,
) -> (String, Arc<Mutex<Vec<String>>>) {
    use axum::body::Body;
    use axum::http::{Request, Response, StatusCode};

    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let http = reqwest::Client::new();
    let gate = move |request: Request<Body>| {
        let (log, http, upstream, token) =
            (log.clone(), http.clone(), upstream.clone(), token.clone());
        async move {
            let (parts, body) = request.into_parts();
            let auth = parts
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            log.lock().unwrap().push(auth.clone());
            if auth != format!("Bearer {token}") {
                return Response::builder()
                    .status(StatusCode::UNAUTHORIZED)
                    .header("www-authenticate", "Bearer")
                    .body(Body::empty())
                    .unwrap();
            }
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let message: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            if quote_in_tool_errors && message["method"] == "tools/call" {
                let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                    "content": [{"type": "text", "text": format!("refused: {auth}")}],
                    "isError": true
                }});
                return Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from(answer.to_string()))
                    .unwrap();
            }
            let mut forward = http.request(parts.method, &upstream).body(body);
            for (name, value) in &parts.headers {
                if name != "host" && name != "authorization" && name != "content-length" {
                    forward = forward.header(name, value);
                }
            }
            let answer = forward.send().await.unwrap();
            let mut response = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                response = response.header(name, value);
            }
            response
                .body(Body::from_stream(answer.bytes_stream()))
                .unwrap()
        }
    };
    let app = axum::Router::new().route("/mcp", axum::routing::any(gate));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/mcp"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_the_keychain_is_the_bearer_of_an_http_server() {
    let dir = tempfile::tempdir().unwrap();
    let store = CredentialStore::open(dir.path());
    if let Err(e) = store.check_available() {
        assert!(
            std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1"),
            "the Secret Service is not usable: {e}. Run inside `dbus-run-session` with `gnome-keyring-daemon --unlock --components=secrets`, or set AGENTLOOM_SKIP_PEERS=1"
        );
        return;
    }
    let Some(server) = EverythingHttp::start() else {
        return;
    };
    let token = format!("mcp-token-{}", std::process::id());
    let (url, seen) = bearer_gate(server.url(), token.clone(), false).await;
    let name = format!("mcp-gate-{}", std::process::id());
    // Bound to the server's host: a token goes nowhere else.
    let gate = agentloom_core::host_of(&reqwest::Url::parse(&url).unwrap());
    store
        .put_with_hosts(
            &name,
            &StoredSecret::ApiKey {
                provider: "mcp".into(),
                key: token.clone(),
            },
            &agentloom_core::BoundHosts::parse(&[gate]).unwrap(),
        )
        .unwrap();
    let secrets = KeychainSecrets::new(Arc::new(store)).keychain_only();

    // The graph names the credential, never the token.
    let mut doc = echo_and_sum_graph(McpServerDoc {
        credential: Some(name.clone()),
        ..http_server(&url)
    });
    let graph_text = serde_json::to_string(&doc).unwrap();
    assert!(graph_text.contains(&name) && !graph_text.contains(&token));
    let mut registry = Registry::builtin();
    let found = {
        let doc = doc.clone();
        tokio::task::spawn_blocking(move || {
            let problems = add_mcp_tools(&mut registry, &doc, &secrets);
            (registry, problems)
        })
        .await
        .unwrap()
    };
    let (registry, problems) = found;
    assert!(problems.is_empty(), "{problems:#?}");
    let (report, _) = run(registry, &doc).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(
        report.outputs["total"],
        Value::from("The sum of 1.5 and 2 is 3.5.")
    );
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(
        seen.iter().all(|auth| *auth == format!("Bearer {token}")),
        "{seen:?}"
    );

    // Without the credential the gate refuses, and the problem says so.
    doc.mcp_servers.get_mut("everything").unwrap().credential = None;
    let problems = tokio::task::spawn_blocking(move || registry_for(&doc).err().unwrap())
        .await
        .unwrap();
    assert!(
        problems[0]
            .message
            .contains("refused the request (HTTP 401/403)"),
        "{problems:#?}"
    );
    CredentialStore::open(dir.path()).delete(&name).ok();
}

/// The one token of [`an_http_servers_token_quoted_in_a_tool_error_never_leaves_the_run`].
/// The gate's token, bound to the gate's host as a user would bind it.
struct GateToken(String, agentloom_core::BoundHosts);

impl agentloom_core::SecretSource for GateToken {
    fn secret(&self, _name: &str) -> Result<agentloom_core::Secret, agentloom_core::SecretError> {
        Ok(agentloom_core::Secret::new(self.0.clone()).bound_to(self.1.clone()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_servers_token_quoted_in_a_tool_error_never_leaves_the_run() {
    let Some(server) = EverythingHttp::start() else {
        return;
    };
    let token = format!("mcp-quoted-{}", std::process::id());
    let (url, _) = bearer_gate(server.url(), token.clone(), true).await;
    let doc = echo_and_sum_graph(McpServerDoc {
        credential: Some("gate".to_owned()),
        ..http_server(&url)
    });
    let registry = {
        let gate = agentloom_core::host_of(&reqwest::Url::parse(&url).unwrap());
        let hosts = agentloom_core::BoundHosts::parse(&[gate]).unwrap();
        let (doc, secrets) = (doc.clone(), GateToken(token.clone(), hosts));
        tokio::task::spawn_blocking(move || {
            let mut registry = Registry::builtin();
            let problems = add_mcp_tools(&mut registry, &doc, &secrets);
            assert!(problems.is_empty(), "{problems:#?}");
            registry
        })
        .await
        .unwrap()
    };
    let (report, sink) = run(registry, &doc).await;
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.clone().unwrap();
    assert!(error.contains("refused: Bearer [redacted]"), "{error}");
    let everything = format!(
        "{}\n{}",
        serde_json::to_string(&report).unwrap(),
        serde_json::to_string(&sink.events()).unwrap()
    );
    assert!(!everything.contains(&token), "{everything}");
}
