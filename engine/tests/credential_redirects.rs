//! A credential a block is configured to send is never dropped on the way: an `llm.chat`
//! whose key may not go where its request goes (another port, or a redirect to one) fails
//! with the message that names the credential, the host and how to allow it, and the
//! server there receives nothing. Real HTTP servers on 127.0.0.1, the real executor.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentloom_blocks::Registry;
use agentloom_core::{BoundHosts, GraphDoc, Secret, SecretError, SecretSource, ValueMap, validate};
use agentloom_engine::{CollectSink, Executor, RunOptions, RunReport, RunStatus};
use serde_json::json;

const KEY: &str = "sk-configured-key-4242";

/// Credential `k`, bound to the hosts given.
struct BoundKey(BoundHosts);

impl SecretSource for BoundKey {
    fn secret(&self, _name: &str) -> Result<Secret, SecretError> {
        Ok(Secret::new(KEY).bound_to(self.0.clone()))
    }
}

/// Answers every request on a fresh 127.0.0.1 port with `answer`, counting the requests
/// (a connection that sends no request line is not one). Returns the port and the count.
fn serve(answer: String) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                continue;
            }
            counted.fetch_add(1, Ordering::SeqCst);
            // The headers; the body is not read (the answer does not depend on it).
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (port, hits)
}

async fn chat(base_url: &str, bound: &[&str]) -> RunReport {
    let executor = Executor::new(Arc::new(Registry::builtin()))
        .with_secrets(Arc::new(BoundKey(BoundHosts::parse(bound).unwrap())));
    let doc = GraphDoc::from_json_str(
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "chat",
            "nodes": [{"id": "chat", "block": "llm.chat", "config": {
                "provider": "openai", "base_url": base_url, "model": "m", "prompt": "hi",
                "credential": "k", "stream": false, "max_retries": 0}}],
            "edges": []
        })
        .to_string(),
    )
    .unwrap();
    let valid = validate(&doc, executor.catalog().as_ref()).unwrap_or_else(|p| panic!("{p:?}"));
    executor
        .run(
            Arc::new(valid),
            ValueMap::new(),
            RunOptions::default(),
            Arc::new(CollectSink::default()),
        )
        .await
}

fn refusal(report: &RunReport) -> String {
    assert_eq!(report.status, RunStatus::Failed, "{report:?}");
    let error = report.error.clone().unwrap_or_default();
    assert!(!error.contains(KEY), "{error}");
    error
}

#[tokio::test]
async fn a_key_bound_to_another_port_fails_the_node_and_the_server_gets_nothing() {
    let (port, hits) = serve(
        "HTTP/1.1 401 Unauthorized\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}".to_owned(),
    );
    // Bound to 127.0.0.1 on http's default port; the model server is on another.
    let report = chat(&format!("http://127.0.0.1:{port}/v1"), &["127.0.0.1"]).await;
    let error = refusal(&report);
    assert!(
        error.contains(&format!(
            "credential `k` may not be sent to 127.0.0.1:{port} (it is bound to 127.0.0.1); if that host is meant to get it, allow it with `agentloom credentials hosts k --add 127.0.0.1:{port}`"
        )),
        "{error}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_redirect_that_would_leave_the_key_behind_is_not_followed() {
    let (away, away_hits) = serve(
        "HTTP/1.1 401 Unauthorized\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}".to_owned(),
    );
    let (home, home_hits) = serve(format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{away}/v1/chat/completions\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    ));
    let report = chat(
        &format!("http://127.0.0.1:{home}/v1"),
        &[&format!("127.0.0.1:{home}")],
    )
    .await;
    let error = refusal(&report);
    assert!(
        error.contains(&format!(
            "the redirect from 127.0.0.1:{home} to 127.0.0.1:{away} was not followed: credential `k` may not be sent to 127.0.0.1:{away}"
        )),
        "{error}"
    );
    assert_eq!(home_hits.load(Ordering::SeqCst), 1);
    assert_eq!(
        away_hits.load(Ordering::SeqCst),
        0,
        "sent on without its key"
    );
}
