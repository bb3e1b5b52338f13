//! The CLI under attack and abuse: secrets echoed back by a service, a closed stdout,
//! Ctrl-C, oversized graph files. Real processes, real files, a real HTTP peer.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

const CANARY: &str = "ghp_CANARY_0123456789abcdef";

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG");
    cmd
}

fn write_graph(dir: &Path, name: &str, json: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(json).unwrap()).unwrap();
    path
}

/// A careless service on 127.0.0.1: answers every request with 404 and an error `message`
/// that quotes the request's `Authorization` header. Returns its base URL.
fn echoing_service() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut authorization = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("authorization")
                {
                    authorization = value.trim().to_owned();
                }
            }
            let body =
                json!({"message": format!("Not Found (you sent `{authorization}`)")}).to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    base
}

/// A graph whose one node waits a minute.
fn slow_graph(dir: &Path) -> PathBuf {
    write_graph(
        dir,
        "slow.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "slow",
            "nodes": [
                {"id": "start", "block": "data.constant", "config": {"value": 1}},
                {"id": "wait", "block": "control.delay", "config": {"ms": 60000}}
            ],
            "edges": [{"from": ["start", "value"], "to": ["wait", "value"]}]
        }),
    )
}

fn interrupt(child: &std::process::Child) {
    assert!(
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// Waits for `child` to exit; kills it and fails with `failure` after `limit`.
fn exit_within(
    child: &mut std::process::Child,
    limit: Duration,
    failure: &str,
) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{failure} within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn a_token_echoed_in_service_errors_reaches_no_output_and_no_run_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let base = echoing_service();
    let graph = write_graph(
        dir.path(),
        "leak.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "leak",
            "nodes": [
                {"id": "issues", "block": "github.list_issues",
                 "config": {"base_url": base, "credential": "gh", "repo": "acme/api"}},
                {"id": "call", "block": "http.request",
                 "config": {"url": format!("{base}/x"), "credential": "gh", "allow_private_network": true}},
                {"id": "caught", "block": "graph.output", "config": {"name": "caught"}},
                {"id": "caught_issues", "block": "graph.output", "config": {"name": "caught_issues"}}
            ],
            "edges": [
                {"from": ["call", "error"], "to": ["caught", "value"]},
                {"from": ["issues", "error"], "to": ["caught_issues", "value"]}
            ]
        }),
    );
    let db = dir.path().join("runs.sqlite3");
    let run = |json: bool| {
        let mut cmd = bin();
        cmd.arg("run")
            .arg(&graph)
            .arg("--trust")
            .arg("--db")
            .arg(&db)
            .env("AGENTLOOM_SECRET_GH", CANARY)
            // Bound to the careless service, so that it gets the token and echoes it.
            .env(
                "AGENTLOOM_SECRET_GH_HOSTS",
                base.trim_start_matches("http://"),
            )
            .env("AGENTLOOM_LOG", "trace");
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    for json in [false, true] {
        let output = run(json);
        assert_eq!(output.status.code(), Some(0));
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        // The service did answer with the token, and the failure is still explained.
        assert!(
            stderr.contains("[redacted]") || stdout.contains("[redacted]"),
            "stdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert!(
            !stderr.contains(CANARY),
            "stderr leaks the token:\n{stderr}"
        );
        assert!(
            !stdout.contains(CANARY),
            "stdout leaks the token:\n{stdout}"
        );
        if json {
            let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            // Both services quoted the header back; both errors arrive, redacted.
            for name in ["caught", "caught_issues"] {
                let caught = report["outputs"][name].to_string();
                assert!(caught.contains("Bearer [redacted]"), "{name}: {caught}");
            }
        }
    }
    // Every file of the run log: the database, its write-ahead log and shared memory.
    let mut checked = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("runs.sqlite3")
        {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !contains(&bytes, CANARY),
                "{} holds the token",
                path.display()
            );
            checked += 1;
        }
    }
    // The database file is always read; a write-ahead log still there is read too (when
    // the last connection closed, SQLite moved its pages into the database file).
    assert!(dir.path().join("runs.sqlite3").exists());
    let wal = dir.path().join("runs.sqlite3-wal").exists();
    assert!(checked > usize::from(wal), "checked {checked} files");
    let shown = bin()
        .args(["show", "--json", "--db"])
        .arg(&db)
        .arg(
            serde_json::from_slice::<serde_json::Value>(&run(true).stdout).unwrap()["run_id"]
                .as_str()
                .unwrap(),
        )
        .output()
        .unwrap();
    assert!(shown.status.success());
    assert!(!contains(&shown.stdout, CANARY));
    assert!(contains(&shown.stdout, "[redacted]"));
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args(["runs", "--json", "--db"])
        .arg(dir.path().join("runs.sqlite3"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before anything is written, as `| head -1` does after a line.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn ctrl_c_ends_a_run_and_the_log_says_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let graph = slow_graph(dir.path());
    let db = dir.path().join("runs.sqlite3");
    let mut child = bin()
        .arg("run")
        .arg(&graph)
        .arg("--json")
        .arg("--db")
        .arg(&db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    interrupt(&child);
    let status = exit_within(
        &mut child,
        Duration::from_secs(5),
        "agentloom run ignored SIGINT",
    );
    assert_eq!(status.code(), Some(1));
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["status"], "cancelled");
    assert!(report["duration_ms"].as_u64().unwrap() >= 1000, "{report}");
    let listed = bin()
        .args(["runs", "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let runs: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(runs[0]["status"], "cancelled");
    assert!(runs[0]["duration_ms"].as_u64().unwrap() >= 1000, "{runs}");
}

#[test]
fn a_graph_file_over_the_size_cap_is_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(
        dir.path(),
        "g.json",
        &json!({"format": "agentloom.graph", "version": 1, "name": "g", "nodes": [], "edges": []}),
    );
    let output = bin()
        .arg("validate")
        .arg(&graph)
        .env("AGENTLOOM_MAX_GRAPH_BYTES", "20")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("g.json: the file is") && stderr.contains("AGENTLOOM_MAX_GRAPH_BYTES"),
        "{stderr}"
    );
    let output = bin().arg("validate").arg(&graph).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
}

/// Reads `stderr` line by line until one contains `needle`; panics after `limit`.
fn wait_for_line(stderr: &mut impl BufRead, needle: &str, limit: Duration) {
    let started = Instant::now();
    let mut seen = String::new();
    while started.elapsed() < limit {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if line.contains(needle) {
            return;
        }
        seen.push_str(&line);
    }
    panic!("no `{needle}` on stderr; saw:\n{seen}");
}

/// The first Ctrl-C cancels the run, but winding down can still wait (here on a run log
/// another process holds locked); a second Ctrl-C quits at once with 130.
#[test]
fn a_second_ctrl_c_quits_at_once_while_the_run_winds_down() {
    let dir = tempfile::tempdir().unwrap();
    let graph = slow_graph(dir.path());
    let db = dir.path().join("runs.sqlite3");
    let mut child = bin()
        .arg("run")
        .arg(&graph)
        .arg("--db")
        .arg(&db)
        .env("AGENTLOOM_LOG", "agentloom=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    wait_for_line(
        &mut stderr,
        "run log and runtime ready",
        Duration::from_secs(30),
    );
    // The run is under way; another process now holds the run log's write lock.
    std::thread::sleep(Duration::from_millis(500));
    let holder = rusqlite::Connection::open(&db).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();

    interrupt(&child);
    wait_for_line(&mut stderr, "Ctrl-C again to quit", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run log is locked, so the first Ctrl-C cannot have finished the command"
    );

    interrupt(&child);
    let status = exit_within(
        &mut child,
        Duration::from_secs(2),
        "a second Ctrl-C did not quit",
    );
    assert_eq!(status.code(), Some(130));
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("quitting"), "{rest}");

    // The run is not lost: once the lock is gone, the log lists it as interrupted.
    holder.execute_batch("COMMIT").unwrap();
    drop(holder);
    let listed = bin()
        .args(["runs", "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let runs: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(runs[0]["status"], "interrupted", "{runs}");
}

/// A block that logs the secret it resolved, as careless code might: at debug level in the
/// message, at trace level in a field, and from another thread.
mod careless_logging {
    use std::sync::Arc;

    use agentloom_core::{
        Block, BlockError, BlockMeta, Config, ConfigError, NodeImpl, PortSpec, Ports, RunCtx,
        ValueMap, ValueType, async_trait,
    };

    pub struct LogsSecret(pub BlockMeta);
    struct LogsSecretNode(Ports);

    impl Block for LogsSecret {
        fn meta(&self) -> &BlockMeta {
            &self.0
        }
        fn instantiate(
            &self,
            _config: &Config,
            _ctx: &agentloom_core::ConfigCtx<'_>,
        ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
            Ok(Arc::new(LogsSecretNode(Ports::new(
                vec![],
                vec![PortSpec::new("value", ValueType::Text)],
            ))))
        }
    }

    #[async_trait]
    impl NodeImpl for LogsSecretNode {
        fn ports(&self) -> &Ports {
            &self.0
        }
        async fn run(&self, _inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
            let secret = ctx.secret("api")?;
            tracing::debug!("calling the service with key {}", secret.expose());
            tracing::trace!(header = ?format!("Bearer {}", secret.expose()), "request headers");
            let copy = secret.expose().to_owned();
            std::thread::spawn(move || tracing::warn!(%copy, "from a worker thread"))
                .join()
                .map_err(|_| BlockError::permanent("the logging thread panicked"))?;
            Ok(agentloom_core::outputs([("value", "sent".into())]))
        }
    }
}

const LOGGING_WORKER_ENV: &str = "AGENTLOOM_TEST_LOGGING_WORKER";

/// In the worker process: the binary's log set-up, then a run of the careless block.
fn run_careless_block() {
    use agentloom_core::{GraphDoc, NodeDoc, ValueMap, validate};
    use agentloom_engine::{CollectSink, EnvSecrets, Executor, RunOptions, RunStatus};
    use std::sync::Arc;

    agentloom::logging::init();
    let registry = Arc::new(agentloom_blocks::Registry::builtin().with(Box::new(
        careless_logging::LogsSecret(agentloom_core::BlockMeta::new(
            "test.logs_secret",
            "Logs secret",
            "Test",
            "",
        )),
    )));
    let mut doc = GraphDoc::new("careless");
    doc.nodes.push(NodeDoc::new("call", "test.logs_secret"));
    let graph = Arc::new(validate(&doc, registry.as_ref()).unwrap());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime.block_on(
        Executor::new(registry)
            .with_secrets(Arc::new(EnvSecrets))
            .run(
                graph,
                ValueMap::new(),
                RunOptions::default(),
                Arc::new(CollectSink::default()),
            ),
    );
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
}

/// Log lines do not pass through a run: whatever a block logs, at any level and from any
/// thread, reaches stderr with every secret a run in the process resolved replaced.
#[test]
fn log_lines_never_show_a_secret_a_run_resolved() {
    if std::env::var_os(LOGGING_WORKER_ENV).is_some() {
        run_careless_block();
        return;
    }
    let secret = "sk-live-CANARY\"quoted\\tail";
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "log_lines_never_show_a_secret_a_run_resolved",
            "--nocapture",
        ])
        .env(LOGGING_WORKER_ENV, "1")
        .env("AGENTLOOM_SECRET_API", secret)
        .env("AGENTLOOM_LOG", "trace")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    for logged in [
        "calling the service with key [redacted]",
        "header=\"Bearer [redacted]\"",
        "from a worker thread copy=[redacted]",
    ] {
        assert!(
            stderr.contains(logged),
            "no `{logged}` in the log:\n{stderr}"
        );
    }
    assert!(
        !stderr.contains("CANARY"),
        "the log leaks the key:\n{stderr}"
    );
}
