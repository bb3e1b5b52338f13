//! A person's approval to reach a local address covers the URL they were shown: real
//! `agentloom` processes with no terminal (each question stored, the run waiting), real
//! HTTP servers on 127.0.0.1 and [::1], a real SQLite run log.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG").stdin(Stdio::null());
    cmd
}

/// Serves every request on `listener` with `answer`, counting them.
fn serve(listener: TcpListener, answer: String) -> Arc<AtomicUsize> {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            // A connection closed before a request line (a local address refused once
            // connected) sent nothing.
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                continue;
            }
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    hits
}

fn show(run_id: &str, db: &Path) -> String {
    let output = bin()
        .args(["show", run_id])
        .arg("--db")
        .arg(db)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("waits for approval"))
        .unwrap_or_else(|| panic!("{text}"))
        .to_owned()
}

fn approve(run_id: &str, db: &Path) -> Output {
    bin()
        .args(["approve", run_id])
        .arg("--db")
        .arg(db)
        .output()
        .unwrap()
}

#[test]
fn a_redirect_from_an_approved_loopback_url_to_ipv6_loopback_is_asked_about_again() {
    let landing = TcpListener::bind("[::1]:0").unwrap();
    let landing_url = format!("http://[::1]:{}/x", landing.local_addr().unwrap().port());
    let landed = serve(
        landing,
        "HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nlanded".to_owned(),
    );
    let start = TcpListener::bind("127.0.0.1:0").unwrap();
    let start_url = format!("http://{}/start", start.local_addr().unwrap());
    serve(
        start,
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {landing_url}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.sqlite3");
    let graph = dir.path().join("post.json");
    std::fs::write(
        &graph,
        serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "post",
            "settings": {"safe_mode": true},
            "nodes": [{"id": "post", "block": "http.request",
                       "config": {"method": "POST", "url": start_url}}],
            "edges": []
        })
        .to_string(),
    )
    .unwrap();
    let output = bin()
        .arg("run")
        .arg(&graph)
        .arg("--trust")
        .arg("--json")
        .arg("--db")
        .arg(&db)
        .arg("--workspace")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let run_id = report["run_id"].as_str().unwrap().to_owned();

    // The POST itself, then its loopback address, then the redirect: each asked in turn.
    let asked = show(&run_id, &db);
    assert!(
        asked.contains(&format!("HTTP request: POST {start_url}")),
        "{asked}"
    );
    assert_eq!(approve(&run_id, &db).status.code(), Some(3));
    let asked = show(&run_id, &db);
    assert!(
        asked.contains(&format!("reach a loopback address: POST {start_url}")),
        "{asked}"
    );
    assert_eq!(approve(&run_id, &db).status.code(), Some(3));
    let asked = show(&run_id, &db);
    assert!(
        asked.contains(&format!(
            "reach a loopback address: POST {landing_url} (redirected from {start_url})"
        )),
        "{asked}"
    );
    assert_eq!(landed.load(Ordering::SeqCst), 0, "reached before approval");

    // Approved too: it lands, once.
    let last = approve(&run_id, &db);
    assert_eq!(
        last.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    assert_eq!(landed.load(Ordering::SeqCst), 1);
}
