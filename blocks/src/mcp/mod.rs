//! MCP tools as blocks: each tool of each MCP server a graph names (`mcp_servers` in the
//! graph file) becomes an ordinary block of kind `mcp.<server>.<tool>`, its inputs from the
//! tool's input schema. Connections live on a runtime of their own, so blocks work from any
//! runtime (the CLI's, the app's) and validation can connect from plain threads.

mod connection;
mod http_client;
mod tool_block;

use std::sync::{Arc, OnceLock};

use agentloom_core::{GraphDoc, Problem, ProblemKind, Secret, SecretSource};

pub use connection::McpConnection;
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
    let mut problems = Vec::new();
    for (name, server) in &doc.mcp_servers {
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
        let connecting = {
            let (name, server) = (name.clone(), server.clone());
            on_mcp_runtime(async move { McpConnection::connect(&name, &server, token).await })
        };
        match connecting.and_then(|result| result) {
            Ok((connection, tools)) => {
                let connection = Arc::new(connection);
                for tool in tools {
                    registry.register(Box::new(McpToolBlock::new(connection.clone(), &tool)));
                }
            }
            Err(message) => problems.push(server_problem(name, &message)),
        }
    }
    problems
}

/// Why the token of `credential` may not be sent to the server at `url` (over HTTP): it is
/// bound to other hosts. A stdio server gets it in its environment, sent nowhere.
fn token_refused(credential: &str, token: &Secret, url: Option<&str>) -> Option<String> {
    let url = reqwest::Url::parse(url?).ok()?;
    (!token.hosts().allows(&url))
        .then(|| agentloom_core::refused_message(credential, &url, token.hosts()))
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
