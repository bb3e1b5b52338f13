//! MCP tools as blocks: each tool of each MCP server a graph names (`mcp_servers` in the
//! graph file) becomes an ordinary block of kind `mcp.<server>.<tool>`, its inputs from the
//! tool's input schema. Connections live on a runtime of their own, so blocks work from any
//! runtime (the CLI's, the app's) and validation can connect from plain threads.
//!
//! What a server says about its tools is untrusted: its own token is redacted from the
//! tools' names, descriptions and schemas before anything prints, logs or sends them to a
//! model, and a tool whose name is not 1 to 128 letters, digits, `_`, `-` or `.` (the
//! names the MCP specification allows) is left out rather than made a block kind.

mod connection;
mod http_client;
mod server_process;
mod tool_block;

use std::sync::{Arc, OnceLock};

use agentloom_core::{
    CatalogCall, GraphDoc, Problem, ProblemKind, REDACTED, RecordedResponse, Secret, SecretSource,
};
use rmcp::model::Tool;

pub use connection::{CallFailure, MAX_MESSAGE_BYTES, McpConnection};
pub use tool_block::McpToolBlock;

use crate::Registry;

/// The block kind of `tool` on `server`.
pub fn tool_kind(server: &str, tool: &str) -> String {
    format!("mcp.{server}.{tool}")
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("agentloom-mcp")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot start the MCP runtime: {e}"))
    })
}

/// Runs `future` on the MCP runtime and waits for it from any thread (also one without a
/// runtime, or a runtime's own thread for a short while).
pub(crate) fn on_mcp_runtime<F>(future: F) -> Result<F::Output, String>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = runtime().spawn(future);
    futures::executor::block_on(handle).map_err(|e| format!("the MCP task failed: {e}"))
}

/// Connects to every MCP server `doc` names and adds one block per tool to `registry`.
/// A server that cannot be started or reached is a problem naming it (its tools are then
/// unknown blocks too, which validation reports on the nodes that use them).
pub fn add_mcp_tools(
    registry: &mut Registry,
    doc: &GraphDoc,
    secrets: &dyn SecretSource,
) -> Vec<Problem> {
    add_mcp_tools_recorded(registry, doc, secrets, &|_| None)
}

/// Where a server's tool list is kept with a run's calls (see [`CatalogCall`]).
fn tool_list_source(server: &str) -> String {
    format!("$.mcp_servers.{server}")
}

fn tool_list_url(server: &str) -> String {
    format!("mcp://{server}/tools/list")
}

/// The recorded tool list a replay answers for `server`, when `recorded` has it
/// (it answers the [`CatalogCall`] of the list with its response).
pub type RecordedToolLists<'a> = dyn Fn(&CatalogCall) -> Option<RecordedResponse> + 'a;

/// [`add_mcp_tools`], except that a server whose tool list `recorded` holds (a replayed
/// run's) is neither started nor reached: its tools come from the recording, and the
/// server starts only if a call is made live. Every tool list is kept in `registry`, so
/// that each run records it.
pub fn add_mcp_tools_recorded(
    registry: &mut Registry,
    doc: &GraphDoc,
    secrets: &dyn SecretSource,
    recorded: &RecordedToolLists<'_>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (name, server) in &doc.mcp_servers {
        if let Err(why) = check_name(name) {
            problems.push(Problem {
                kind: ProblemKind::McpServer,
                node: None,
                port: None,
                path: "$.mcp_servers".to_owned(),
                message: format!(
                    "MCP server name \"{}\" {why}: rename it",
                    name.escape_debug()
                ),
            });
            continue;
        }
        let token = match server.credential.as_deref().map(|c| secrets.secret(c)) {
            None => None,
            Some(Ok(secret)) => Some(secret),
            Some(Err(err)) => {
                problems.push(server_problem(name, &err.to_string()));
                continue;
            }
        };
        if let (Some(token), Some(credential)) = (&token, &server.credential)
            && let Some(refused) = token_refused(credential, token, server.url.as_deref())
        {
            problems.push(server_problem(name, &refused));
            continue;
        }
        let mut list = CatalogCall {
            source: tool_list_source(name),
            method: "MCP".to_owned(),
            url: tool_list_url(name),
            body: Vec::new(),
            response: RecordedResponse::default(),
        };
        let from_recording = recorded(&list).and_then(|response| {
            serde_json::from_slice::<Vec<Tool>>(&response.body)
                .inspect_err(|e| {
                    tracing::warn!("MCP server `{name}`: the recorded tool list does not read ({e}); the server is asked");
                })
                .ok()
        });
        let connecting = match from_recording {
            Some(tools) => Ok(Ok((McpConnection::unstarted(name, server, token), tools))),
            None => {
                let (name, server) = (name.clone(), server.clone());
                on_mcp_runtime(async move { McpConnection::connect(&name, &server, token).await })
            }
        };
        match connecting.and_then(|result| result) {
            Ok((connection, tools)) => {
                let connection = Arc::new(connection);
                let tools: Vec<Tool> = tools
                    .into_iter()
                    .map(|tool| without_token(tool, connection.token()))
                    .collect();
                if let Ok(body) = serde_json::to_vec(&tools) {
                    list.response = RecordedResponse {
                        status: 200,
                        headers: Vec::new(),
                        body,
                    };
                    registry.keep_catalog_call(list);
                }
                for tool in tools {
                    if let Err(why) = check_name(&tool.name) {
                        tracing::warn!(
                            "MCP server `{name}`: the tool named \"{}\" is left out: its name {why}",
                            tool.name.escape_debug()
                        );
                        continue;
                    }
                    registry.register(Box::new(McpToolBlock::new(connection.clone(), &tool)));
                }
            }
            Err(message) => problems.push(server_problem(name, &message)),
        }
    }
    problems
}

/// Whether `name` can be part of a block kind: 1 to 128 letters, digits, `_`, `-` or `.`
/// (what the MCP specification allows for tool names), so no control character, space or
/// `/` reaches a kind, a message or a path.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > 128 {
        return Err("must be 1 to 128 characters long");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err("may hold only letters, digits, `_`, `-` and `.`");
    }
    Ok(())
}

/// `tool` with the server's `token` redacted from every text it carries (name, title,
/// description, schemas, annotations).
fn without_token(tool: Tool, token: Option<&Secret>) -> Tool {
    let Some(token) = token.map(Secret::expose).filter(|t| t.len() >= 4) else {
        return tool;
    };
    // A tool that does not come back whole keeps only its redacted name.
    let bare = |tool: &Tool| {
        Tool::new(
            tool.name.replace(token, REDACTED),
            "",
            Arc::new(serde_json::Map::new()),
        )
    };
    let Ok(mut json) = serde_json::to_value(&tool) else {
        return bare(&tool);
    };
    redact_json(&mut json, token);
    serde_json::from_value(json).unwrap_or_else(|_| bare(&tool))
}

fn redact_json(value: &mut serde_json::Value, token: &str) {
    match value {
        serde_json::Value::String(text) => {
            if text.contains(token) {
                *text = text.replace(token, REDACTED);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| redact_json(v, token)),
        serde_json::Value::Object(map) => {
            *map = std::mem::take(map)
                .into_iter()
                .map(|(key, mut v)| {
                    redact_json(&mut v, token);
                    (key.replace(token, REDACTED), v)
                })
                .collect();
        }
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
    }
}

/// Why the token of `credential` may not be sent to the server at `url` (over HTTP): it is
/// bound to other hosts. A stdio server gets it in its environment, sent nowhere.
fn token_refused(credential: &str, token: &Secret, url: Option<&str>) -> Option<String> {
    let url = reqwest::Url::parse(url?).ok()?;
    crate::net::credential_refused(credential, token, &url)
}

fn server_problem(name: &str, message: &str) -> Problem {
    Problem {
        kind: ProblemKind::McpServer,
        node: None,
        port: None,
        path: format!("$.mcp_servers.{name}"),
        message: format!("MCP server `{name}`: {message}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use std::sync::Mutex;

    use agentloom_core::{BoundHosts, McpServerDoc, SecretError};

    use super::*;

    /// The token, bound to the given hosts.
    struct OneToken(String);

    impl SecretSource for OneToken {
        fn secret(&self, name: &str) -> Result<Secret, SecretError> {
            assert_eq!(name, "mcp-token");
            let hosts = BoundHosts::parse(&[self.0.as_str()]).unwrap();
            Ok(Secret::new("tok-s3cret".to_owned()).bound_to(hosts))
        }
    }

    #[test]
    fn tool_and_server_names_are_what_the_mcp_specification_allows() {
        for good in ["echo", "get-sum", "files.read_v2", &"x".repeat(128)] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "esc\x1b[31m",
            "two\nlines",
            "../up",
            "a b",
            "é",
            &"x".repeat(129),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_servers_token_is_redacted_from_everything_a_tool_says() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"tok-s3cret": {"type": "string", "description": "uses tok-s3cret"}}
        });
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        let mut tool = Tool::new("call_tok-s3cret", "Sends tok-s3cret along", schema);
        tool.title = Some("tok-s3cret".to_owned());
        let token = Secret::new("tok-s3cret");
        let clean = without_token(tool.clone(), Some(&token));
        let text = serde_json::to_string(&clean).unwrap();
        assert!(!text.contains("tok-s3cret"), "{text}");
        assert_eq!(clean.name, "call_[redacted]");
        assert_eq!(clean.description.as_deref(), Some("Sends [redacted] along"));
        assert_eq!(
            clean.input_schema["properties"]["[redacted]"]["description"],
            "uses [redacted]"
        );
        // Without a token, nothing changes.
        assert_eq!(without_token(tool.clone(), None), tool);
    }

    #[tokio::test]
    async fn an_http_server_gets_the_stored_token_as_bearer_and_a_refusal_never_shows_it() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = seen.clone();
        let refuse = move |headers: axum::http::HeaderMap| {
            let log = log.clone();
            async move {
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
                log.lock()
                    .unwrap()
                    .push(auth.unwrap_or_default().to_owned());
                (
                    axum::http::StatusCode::UNAUTHORIZED,
                    [("www-authenticate", "Bearer realm=\"mcp\"")],
                )
            }
        };
        let app = axum::Router::new().route("/mcp", axum::routing::post(refuse));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });

        let mut doc = GraphDoc::new("secured");
        doc.mcp_servers.insert(
            "secured".to_owned(),
            McpServerDoc {
                url: Some(format!("http://{addr}/mcp")),
                credential: Some("mcp-token".to_owned()),
                ..McpServerDoc::default()
            },
        );
        // Bound to another host: never sent, and the problem says how to allow it.
        let elsewhere = doc.clone();
        let problems = tokio::task::spawn_blocking(move || {
            add_mcp_tools(
                &mut Registry::new(),
                &elsewhere,
                &OneToken("mcp.example.com".into()),
            )
        })
        .await
        .unwrap();
        assert!(seen.lock().unwrap().is_empty());
        let message = &problems[0].message;
        assert!(
            message.contains(&format!(
                "credential `mcp-token` may not be sent to {addr} (it is bound to mcp.example.com)"
            )) && message.contains(&format!(
                "agentloom credentials hosts mcp-token --add {addr}"
            )),
            "{message}"
        );

        let problems = tokio::task::spawn_blocking(move || {
            add_mcp_tools(&mut Registry::new(), &doc, &OneToken(addr.to_string()))
        })
        .await
        .unwrap();
        assert_eq!(*seen.lock().unwrap(), ["Bearer tok-s3cret"]);
        assert_eq!(problems.len(), 1);
        let message = &problems[0].message;
        assert!(
            message.contains("MCP server `secured`")
                && message.contains("refused the request (HTTP 401/403)"),
            "{message}"
        );
        assert!(!message.contains("tok-s3cret"), "{message}");
    }
}
