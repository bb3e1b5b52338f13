//! Runs beyond one machine: `agentloom worker` and `agentloom submit` against a real
//! `nats-server -js` on 127.0.0.1, each worker with its own home directory and run log as if
//! on a machine of its own.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG").env_remove("AGENTLOOM_NATS");
    cmd
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A `nats-server` with JetStream on a free port of 127.0.0.1, its store in its own folder;
/// stopped when dropped.
struct NatsServer {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    fn start() -> NatsServer {
        let dir = tempfile::tempdir().unwrap();
        let port = agentloom_tests::free_port();
        let child = Self::spawn(dir.path(), port);
        NatsServer {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    fn spawn(dir: &Path, port: u16) -> Child {
        let server = agentloom_tests::find_on_path("nats-server")
            .unwrap_or_else(|| panic!("nats-server is not installed: apt-get install nats-server"));
        start_listening(
            Command::new(server)
                .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
                .arg(dir.join("store")),
            port,
            &dir.join("nats.log"),
        )
    }

    /// Starts the server again (after it was killed) on its port and store.
    fn restart(&mut self) {
        let port = self.url.rsplit(':').next().unwrap().parse().unwrap();
        self.child = Self::spawn(self._dir.path(), port);
    }
}

/// Starts `command`, its stderr in `log`, and waits until it listens on `port`.
fn start_listening(command: &mut Command, port: u16, log: &Path) -> Child {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let name = command.get_program().to_string_lossy().into_owned();
    agentloom_tests::wait_until_listening(&mut child, port, log, &name);
    child
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `agentloom worker` with a home directory, run log and workspace of its own.
struct Worker {
    name: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl Worker {
    fn start(nats: &NatsServer, name: &str, extra: &[&str]) -> Worker {
        Self::start_with_env(nats, name, extra, &[])
    }

    /// [`Worker::start`] with `env` set too (this machine's credentials, say).
    fn start_with_env(
        nats: &NatsServer,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Worker {
        Self::start_on(&nats.url, name, extra, env)
    }

    /// [`Worker::start_with_env`] on the server(s) at `url`.
    fn start_on(url: &str, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Worker {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let child = bin()
            .arg("worker")
            .args(["--nats", url, "--name", name])
            .arg("--db")
            .arg(dir.path().join("runs.sqlite3"))
            .arg("--workspace")
            .arg(&home)
            .args(extra)
            .env("HOME", &home)
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("worker.log")).unwrap())
            .spawn()
            .unwrap();
        let worker = Worker {
            name: name.to_owned(),
            child,
            dir,
        };
        worker.wait_until_ready();
        worker
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("worker.log")).unwrap_or_default()
    }

    fn wait_until_ready(&self) {
        let started = Instant::now();
        while !self.log().contains("takes runs from") {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "worker {} did not start:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("runs.sqlite3")
    }

    /// Run id → status of every run in this worker's run log.
    fn runs(&self) -> BTreeMap<String, String> {
        let Ok(conn) = rusqlite::Connection::open(self.db()) else {
            return BTreeMap::new();
        };
        let Ok(mut stmt) = conn.prepare("SELECT id, status FROM runs") else {
            return BTreeMap::new();
        };
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .and_then(Iterator::collect)
            .unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn write_graph(dir: &Path, name: &str, doc: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    path
}

/// A graph that waits `ms` and hands its input `text` to its output `echo`.
fn delay_graph(dir: &Path, ms: u64) -> PathBuf {
    write_graph(
        dir,
        "slow-echo.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "slow echo",
            "nodes": [
                {"id": "text", "block": "graph.input", "config": {"name": "text", "default": "hi"}},
                {"id": "slow", "block": "control.delay", "config": {"ms": ms}},
                {"id": "out", "block": "graph.output", "config": {"name": "echo"}}
            ],
            "edges": [
                {"from": ["text", "value"], "to": ["slow", "value"]},
                {"from": ["slow", "value"], "to": ["out", "value"]}
            ]
        }),
    )
}

fn submit(nats: &NatsServer, graph: &Path, extra: &[&str]) -> Command {
    let mut cmd = bin();
    cmd.arg("submit").arg(graph).args(["--nats", &nats.url]);
    cmd.args(extra);
    cmd
}

/// `submit GRAPH --wait --json --db DB`, which must exit with `code`; its report.
fn submit_and_wait(nats: &NatsServer, graph: &Path, db: &Path, code: i32) -> Value {
    // Trusted where it is submitted; each test's workers decide whether they trust it too.
    let output = submit(nats, graph, &["--trust", "--wait", "--json"])
        .arg("--db")
        .arg(db)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(code), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `submit GRAPH --trust --wait --json --db DB` started, its output piped.
fn submit_following(nats: &NatsServer, graph: &Path, db: &Path) -> Child {
    submit(nats, graph, &["--trust", "--wait", "--json"])
        .arg("--db")
        .arg(db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn two_hundred_runs_complete_once_each_spread_over_three_workers() {
    let nats = NatsServer::start();
    let workers: Vec<Worker> = ["w1", "w2", "w3"]
        .iter()
        .map(|name| Worker::start(&nats, name, &["--concurrency", "8"]))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let graph = delay_graph(dir.path(), 100);
    let mut submitted = BTreeSet::new();
    for i in 0..200 {
        let output = submit(&nats, &graph, &["--input", &format!("text=n{i}")])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        let run_id = String::from_utf8(output.stdout).unwrap().trim().to_owned();
        assert!(!run_id.is_empty());
        submitted.insert(run_id);
    }
    assert_eq!(submitted.len(), 200);
    let completed =
        || -> Vec<BTreeMap<String, String>> { workers.iter().map(Worker::runs).collect() };
    wait_for("200 runs completed", Duration::from_secs(120), || {
        completed()
            .iter()
            .flat_map(BTreeMap::values)
            .filter(|status| *status == "completed")
            .count()
            >= 200
    });
    // Give a run that would run twice the time to show up.
    std::thread::sleep(Duration::from_secs(1));
    let per_worker = completed();
    let mut seen = BTreeMap::<String, usize>::new();
    for runs in &per_worker {
        for (id, status) in runs {
            assert_eq!(status, "completed", "run {id}");
            *seen.entry(id.clone()).or_default() += 1;
        }
    }
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        submitted,
        "the workers ran exactly the submitted runs"
    );
    assert!(
        seen.values().all(|&times| times == 1),
        "every run ran once: {seen:?}"
    );
    // Nothing was handed out twice, nothing is left.
    let (queued, redelivered, unacked) = queue_state(&nats);
    assert_eq!((queued, redelivered, unacked), (0, 0, 0));
    for (worker, runs) in workers.iter().zip(&per_worker) {
        assert!(
            !runs.is_empty(),
            "worker {} ran none of the 200 runs",
            worker.name
        );
    }

    // `--wait` ends like `run --json`, and the submitter's log names the worker.
    let submitter_db = dir.path().join("submitter.sqlite3");
    let output = submit(
        &nats,
        &graph,
        &["--input", "text=waited", "--wait", "--json"],
    )
    .arg("--db")
    .arg(&submitter_db)
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["status"], "completed");
    assert_eq!(report["outputs"]["echo"], "waited");
    let run_id = report["run_id"].as_str().unwrap();
    let shown = show(&submitter_db, run_id);
    assert_eq!(shown["status"], "completed");
    let names: Vec<&str> = workers.iter().map(|w| w.name.as_str()).collect();
    assert!(
        names.contains(&shown["worker"].as_str().unwrap_or_default()),
        "{shown}"
    );
}

/// Requests in the work queue, deliveries that were redeliveries, deliveries not yet acked.
fn queue_state(nats: &NatsServer) -> (u64, u64, u64) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(nats.url.as_str()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let mut queue = js.get_stream("AGENTLOOM_QUEUE").await.unwrap();
        let queued = queue.info().await.unwrap().state.messages;
        let mut consumer: async_nats::jetstream::consumer::PullConsumer =
            queue.get_consumer("workers").await.unwrap();
        let info = consumer.info().await.unwrap();
        (
            queued,
            info.num_redelivered as u64,
            info.num_ack_pending as u64,
        )
    })
}

fn node_status(db: &Path, node: &str) -> Option<String> {
    let conn = rusqlite::Connection::open(db).ok()?;
    conn.query_row(
        "SELECT status FROM node_runs WHERE node_id = ?1",
        [node],
        |row| row.get(0),
    )
    .ok()
}

#[test]
fn a_worker_killed_after_a_post_leaves_the_run_to_another_that_does_not_post_again() {
    let nats = NatsServer::start();
    let server = agentloom_tests::PostCounter::start();
    let trusted = ["--trust", "--ack-wait", "2"];
    let mut workers = [
        Worker::start(&nats, "first", &trusted),
        Worker::start(&nats, "second", &trusted),
    ];
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(
        dir.path(),
        "post-then-wait.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "post then wait",
            "nodes": [
                {"id": "post", "block": "http.request", "config": {
                    "method": "POST", "url": server.url(),
                    "allow_private_network": true}},
                {"id": "slow", "block": "control.delay", "config": {"ms": 4000}},
                {"id": "out", "block": "graph.output", "config": {"name": "status"}}
            ],
            "edges": [
                {"from": ["post", "status"], "to": ["slow", "value"]},
                {"from": ["slow", "value"], "to": ["out", "value"]}
            ]
        }),
    );
    let submitter_db = dir.path().join("submitter.sqlite3");
    let submitter = submit_following(&nats, &graph, &submitter_db);
    // The POST's finish has travelled through NATS to the submitter's run log.
    wait_for(
        "the POST node finished, as the submitter saw",
        Duration::from_secs(30),
        || node_status(&submitter_db, "post").as_deref() == Some("done"),
    );
    assert_eq!(server.posts(), 1);
    let running = workers
        .iter()
        .position(|w| !w.runs().is_empty())
        .expect("a worker has the run in its log");
    assert_eq!(
        node_status(&workers[running].db(), "slow").as_deref(),
        Some("running")
    );
    workers[running].kill();
    let killed = workers[running].name.clone();

    let output = submitter.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["outputs"]["status"], 200);
    assert_eq!(
        server.posts(),
        1,
        "the POST reached the server exactly once"
    );

    let other = &workers[1 - running];
    let run_id = report["run_id"].as_str().unwrap();
    assert_eq!(
        other.runs().get(run_id).map(String::as_str),
        Some("completed"),
        "{}",
        other.log()
    );
    let shown = show(&submitter_db, run_id);
    assert_eq!(shown["status"], "completed");
    // Both workers that ran a part of it, the one that took it over last.
    assert_eq!(
        shown["worker"],
        format!("{killed}, {}", other.name),
        "every worker that ran a part"
    );
    let post = shown["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == "post")
        .unwrap();
    assert_eq!(post["status"], "done");
}

#[test]
fn an_invalid_graph_ends_failed_with_its_reason_and_is_moved_aside() {
    let nats = NatsServer::start();
    let worker = Worker::start(&nats, "only", &["--max-deliver", "3"]);
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(
        dir.path(),
        "broken.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "broken",
            "nodes": [{"id": "mystery", "block": "no.such.block"}],
            "edges": []
        }),
    );
    let submitter_db = dir.path().join("submitter.sqlite3");
    let report = submit_and_wait(&nats, &graph, &submitter_db, 1);
    assert_eq!(report["status"], "failed");
    let error = report["error"].as_str().unwrap();
    assert!(
        error.contains("mystery") && error.contains("no.such.block"),
        "{error}"
    );
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        worker.runs().get(&run_id).map(String::as_str),
        Some("failed")
    );
    let runs = bin()
        .args(["runs", "--json", "--db"])
        .arg(&submitter_db)
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(runs[0]["status"], "failed");
    assert_eq!(runs[0]["worker"], "only");
    assert!(runs[0]["error"].as_str().unwrap().contains("no.such.block"));

    // Not delivered again: the queue is empty and the request waits aside with its error.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(queue_state(&nats), (0, 0, 0));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dead = runtime.block_on(async {
        let client = async_nats::connect(nats.url.as_str()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        js.get_stream("AGENTLOOM_DEAD")
            .await
            .unwrap()
            .get_last_raw_message_by_subject(&format!("agentloom.dead.{run_id}"))
            .await
            .unwrap()
    });
    let why = dead.headers.get("Agentloom-Error").unwrap().as_str();
    assert!(why.contains("no.such.block"), "{why}");
}

#[test]
fn a_request_whose_workers_keep_dying_is_given_up_after_max_deliver() {
    let nats = NatsServer::start();
    let flags = ["--ack-wait", "2", "--max-deliver", "2"];
    let dir = tempfile::tempdir().unwrap();
    let graph = delay_graph(dir.path(), 60_000);
    let submitter = submit(&nats, &graph, &["--wait", "--json"])
        .arg("--db")
        .arg(dir.path().join("submitter.sqlite3"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for name in ["first", "second"] {
        let mut worker = Worker::start(&nats, name, &flags);
        wait_for(
            &format!("worker {name} took the run"),
            Duration::from_secs(30),
            || !worker.runs().is_empty(),
        );
        worker.kill();
    }
    let last = Worker::start(&nats, "last", &flags);
    let output = submitter.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["status"], "failed");
    let error = report["error"].as_str().unwrap();
    assert!(error.contains("given up after 2 deliveries"), "{error}");
    assert!(
        last.runs().is_empty() || last.runs().values().all(|s| s == "failed"),
        "the last worker did not run it: {}",
        last.log()
    );
    assert_eq!(queue_state(&nats).0, 0, "the request left the queue");
}

#[test]
fn a_safe_mode_request_waits_for_approve_nats_which_counts_once() {
    let nats = NatsServer::start();
    let server = agentloom_tests::PostCounter::start();
    // In safe mode its POST waits for a person (trusted on both sides: its own
    // allow_private_network counts; untrusted, reaching the local server would be one more
    // question).
    let approver = nkeys::KeyPair::new_user();
    let seed = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(seed.path(), approver.seed().unwrap()).unwrap();
    let key = approver.public_key();
    let _workers = [
        Worker::start(&nats, "first", &["--trust", "--approver-key", &key]),
        Worker::start(&nats, "second", &["--trust", "--approver-key", &key]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(
        dir.path(),
        "post.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "post",
            "settings": {"safe_mode": true},
            "nodes": [
                {"id": "post", "block": "http.request", "config": {
                    "method": "POST", "url": server.url(), "allow_private_network": true}},
                {"id": "out", "block": "graph.output", "config": {"name": "status"}}
            ],
            "edges": [{"from": ["post", "status"], "to": ["out", "value"]}]
        }),
    );
    let db = dir.path().join("submitter.sqlite3");
    let report = submit_and_wait(&nats, &graph, &db, 3);
    assert_eq!(report["status"], "waiting");
    assert_eq!(server.posts(), 0);
    let run_id = report["run_id"].as_str().unwrap();

    let approve = |db: &Path| {
        bin()
            .args([
                "approve",
                &run_id[..12],
                "--nats",
                &nats.url,
                "--json",
                "--sign-with",
            ])
            .arg(seed.path())
            .arg("--db")
            .arg(db)
            .output()
            .unwrap()
    };
    let output = approve(&db);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["outputs"]["status"], 200);
    assert_eq!(server.posts(), 1);
    let shown = show(&db, run_id);
    assert_eq!(shown["status"], "completed");

    // The same wait decided again, from another machine's log: taken, nothing sent again.
    let elsewhere = dir.path().join("elsewhere.sqlite3");
    let output = bin()
        .args(["approve", run_id, "--nats", &nats.url, "--sign-with"])
        .arg(seed.path())
        .arg("--db")
        .arg(&elsewhere)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("not waiting for an approval"),
        "{}",
        stderr(&output)
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.posts(), 1);

    // Two people approving the next run at once: one decision counts, one POST is sent.
    let report = submit_and_wait(&nats, &graph, &db, 3);
    let run_id = report["run_id"].as_str().unwrap();
    let together: Vec<_> = ["a.sqlite3", "b.sqlite3"]
        .iter()
        .map(|name| {
            bin()
                .args(["approve", run_id, "--nats", &nats.url, "--sign-with"])
                .arg(seed.path())
                .arg("--db")
                .arg(dir.path().join(name))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<Option<i32>> = together
        .into_iter()
        .map(|child| child.wait_with_output().unwrap().status.code())
        .collect();
    let mut sorted = codes.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [Some(0), Some(2)], "{codes:?}");
    assert_eq!(server.posts(), 2, "one more POST, for the second run");
}

#[test]
fn serve_nats_queues_webhook_and_agent_protocol_runs_for_the_workers() {
    let nats = NatsServer::start();
    let worker = Worker::start(&nats, "busy", &[]);
    let dir = tempfile::tempdir().unwrap();
    let graph = delay_graph(dir.path(), 10);
    let port = agentloom_tests::free_port();
    let log = dir.path().join("serve.log");
    let db = dir.path().join("serve.sqlite3");
    let mut serve = start_listening(
        bin()
            .arg("serve")
            .arg(&graph)
            .args(["--port", &port.to_string(), "--webhook", "/hooks/echo"])
            .args(["--nats", &nats.url, "--db"])
            .arg(&db)
            .arg("--workspace")
            .arg(dir.path())
            .arg("--tasks-dir")
            .arg(dir.path().join("tasks")),
        port,
        &log,
    );
    let base = format!("http://127.0.0.1:{port}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (hooked, step) = runtime.block_on(async {
        let hooked = post(
            &format!("{base}/hooks/echo"),
            json!({"text": "through the queue"}),
        )
        .await;
        let task = post(
            &format!("{base}/ap/v1/agent/tasks"),
            json!({"input": "a task"}),
        )
        .await;
        let task_id = task["task_id"].as_str().unwrap();
        let step = post(
            &format!("{base}/ap/v1/agent/tasks/{task_id}/steps"),
            json!({}),
        )
        .await;
        (hooked, step)
    });
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(hooked, json!({"echo": "through the queue"}));
    assert_eq!(step["output"], "a task", "{step}");
    assert_eq!(step["is_last"], true, "{step}");
    // Both ran on the worker, and serve's run log names it.
    let ran = worker.runs();
    assert_eq!(ran.len(), 2, "{}", worker.log());
    assert!(ran.values().all(|status| status == "completed"));
    for run_id in ran.keys() {
        let shown = show(&db, run_id);
        assert_eq!(shown["worker"], "busy", "{shown}");
    }
}

/// POSTs `body` as JSON to `url`; the JSON answer.
async fn post(url: &str, body: Value) -> Value {
    reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `show RUN_ID --json` of the run log `db`.
fn show(db: &Path, run_id: &str) -> Value {
    let output = bin()
        .args(["show", run_id, "--json", "--db"])
        .arg(db)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn eval_nats_spreads_the_cases_over_the_workers_and_checks_them_here() {
    let nats = NatsServer::start();
    let workers: Vec<Worker> = ["e1", "e2"]
        .iter()
        .map(|name| Worker::start(&nats, name, &["--concurrency", "2"]))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let graph = delay_graph(dir.path(), 300);
    let mut cases = String::new();
    for i in 0..8 {
        let expected = if i == 7 { "not what it says" } else { "" };
        let expect = if expected.is_empty() {
            json!({"echo": format!("t{i}")})
        } else {
            json!({"echo": expected})
        };
        cases.push_str(
            &json!({"name": format!("case {i}"), "inputs": {"text": format!("t{i}")}, "expect": expect})
                .to_string(),
        );
        cases.push('\n');
    }
    let cases_file = dir.path().join("cases.jsonl");
    std::fs::write(&cases_file, cases).unwrap();
    let db = dir.path().join("runs.sqlite3");
    let output = bin()
        .arg("eval")
        .arg(&graph)
        .arg("--cases")
        .arg(&cases_file)
        .args([
            "--nats",
            &nats.url,
            "--concurrency",
            "8",
            "--json",
            "--trust",
        ])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    // One case expects another text: the pass rate is 7/8, under the default 1.0.
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["passed"], 7, "{summary}");
    assert_eq!(summary["failed"], 1, "{summary}");
    let run_ids: BTreeSet<String> = summary["cases"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|case| case["runs"].as_array().unwrap().iter())
        .map(|run| run["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(run_ids.len(), 8);
    // Every case ran on a worker, each once, and both workers took some.
    let per_worker: Vec<BTreeMap<String, String>> = workers.iter().map(Worker::runs).collect();
    for run_id in &run_ids {
        let ran: usize = per_worker
            .iter()
            .filter(|runs| runs.contains_key(run_id))
            .count();
        assert_eq!(ran, 1, "run {run_id} ran on {ran} workers");
    }
    for (worker, runs) in workers.iter().zip(&per_worker) {
        assert!(
            runs.keys().any(|id| run_ids.contains(id)),
            "worker {} ran no case",
            worker.name
        );
    }
    // The evaluation is recorded here, and `evals` lists it.
    let listed = bin()
        .args(["evals", "--json"])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
}

/// A graph whose node uses a tool of an MCP server whose command leaves `marker` behind
/// when it starts (a file that needs trust to start it).
fn mcp_graph(marker: &Path) -> Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "starts a command",
        "mcp_servers": {"tools": {
            "command": "sh",
            "args": ["-c", format!("touch '{}'; exit 1", marker.display())]
        }},
        "nodes": [{"id": "echo", "block": "mcp.tools.echo", "config": {}}],
        "edges": []
    })
}

/// A graph whose model call at `base_url` carries credential `api` (which needs trust).
fn credential_graph(base_url: &str) -> Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "sends a key",
        "nodes": [
            {"id": "ask", "block": "llm.chat", "config": {
                "base_url": base_url, "model": "m", "prompt": "hi", "stream": false,
                "credential": "api", "max_retries": 0}},
            {"id": "out", "block": "graph.output", "config": {"name": "text"}}
        ],
        "edges": [{"from": ["ask", "text"], "to": ["out", "value"]}]
    })
}

/// Publishes `request` (raw JSON, as anyone who can publish to the queue may) and queues it.
fn publish_request(nats: &NatsServer, run_id: &str, request: &Value) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let queue = agentloom::remote::Nats::connect(&nats.url, "a stranger")
            .await
            .unwrap();
        queue
            .publish(
                agentloom::remote::run_subject(run_id, "request"),
                None,
                serde_json::to_vec(request).unwrap(),
            )
            .await
            .unwrap();
    });
    queue_item(nats, run_id, "a stranger");
}

/// Puts a work item for `run_id` on the queue as `who` (no message id), as any publisher may.
fn queue_item(nats: &NatsServer, run_id: &str, who: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let queue = agentloom::remote::Nats::connect(&nats.url, who)
            .await
            .unwrap();
        queue
            .queue(&agentloom::remote::WorkItem {
                run_id: run_id.to_owned(),
                resume: None,
                start_by_ms: None,
            })
            .await
            .unwrap();
    });
}

#[test]
fn submit_checks_trust_like_run_and_a_trusting_worker_runs_an_untrusted_request_untrusted() {
    let nats = NatsServer::start();
    let server = agentloom_tests::PostCounter::start();
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let command_doc = mcp_graph(&marker);
    let key_doc = credential_graph(&server.url());
    let command_graph = write_graph(dir.path(), "command.json", &command_doc);
    let key_graph = write_graph(dir.path(), "key.json", &key_doc);
    let submitting = |graph: &Path, extra: &[&str]| {
        let mut cmd = submit(&nats, graph, extra);
        cmd.env("XDG_DATA_HOME", data.path())
            .env("HOME", data.path())
            .stdin(Stdio::null());
        cmd.output().unwrap()
    };

    // `submit` refuses an untrusted file that needs trust, as `run` does: exit 2 with the
    // list (each credential with where it would go), nothing queued, nothing started.
    for (graph, need) in [
        (&command_graph, "start the command `sh -c".to_owned()),
        (
            &key_graph,
            format!(
                "send credential `api` to node `ask` (at 127.0.0.1:{})",
                server
                    .url()
                    .split(':')
                    .nth(2)
                    .unwrap()
                    .split('/')
                    .next()
                    .unwrap()
            ),
        ),
    ] {
        let output = submitting(graph, &[]);
        let said = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{said}");
        assert!(
            said.contains("this file is not trusted")
                && said.contains(&need)
                && said.contains("--trust"),
            "{need:?} in {said}"
        );
    }

    // The same graphs published straight onto the queue, claiming nothing or untrusted, and
    // taken by a worker started with --trust that holds credential `api`: they run
    // untrusted. No MCP command starts, no key is sent.
    // The worker's key is bound to the local server's host, so only trust stops it.
    let server_host = server
        .url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let worker = Worker::start_with_env(
        &nats,
        "trusting",
        &["--trust"],
        &[
            ("AGENTLOOM_SECRET_API", "sk-worker-secret-7f3a"),
            ("AGENTLOOM_SECRET_API_HOSTS", &server_host),
        ],
    );
    let forged = |run_id: &str, doc: &Value, graph: &Path, trusted: Option<bool>| {
        let mut request = json!({
            "run_id": run_id,
            "graph": doc,
            "graph_file": graph.display().to_string(),
            "files": [],
            "inputs": {}
        });
        if let Some(trusted) = trusted {
            request["trusted"] = json!(trusted);
        }
        request
    };
    let runs = [
        (
            "forged-1",
            &command_doc,
            &command_graph,
            None,
            "MCP server `tools`: not connected",
        ),
        ("forged-2", &key_doc, &key_graph, Some(false), "not trusted"),
    ];
    for (run_id, doc, graph, trusted, why) in runs {
        publish_request(&nats, run_id, &forged(run_id, doc, graph, trusted));
        wait_for("the forged run to end", Duration::from_secs(30), || {
            worker
                .runs()
                .get(run_id)
                .is_some_and(|status| status != "running")
        });
        assert_eq!(worker.runs()[run_id], "failed", "{}", worker.log());
        let conn = rusqlite::Connection::open(worker.db()).unwrap();
        let error: String = conn
            .query_row("SELECT error FROM runs WHERE id = ?1", [run_id], |row| {
                row.get(0)
            })
            .unwrap();
        assert!(error.contains(why), "{run_id}: {why:?} in {error}");
    }
    assert!(
        !marker.exists(),
        "the MCP command of an untrusted request started"
    );
    assert_eq!(
        server.posts(),
        0,
        "an untrusted request sent the worker's key"
    );
    // The refused submits queued nothing: the worker ran the two forged requests only.
    assert_eq!(worker.runs().len(), 2, "{:?}", worker.runs());

    // Trusted where it is submitted and by the worker: only then the command starts and the
    // key goes out.
    for graph in [&command_graph, &key_graph] {
        let output = submitting(graph, &["--trust", "--wait", "--json"]);
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    }
    assert!(marker.exists(), "trusted on both sides, the command starts");
    assert!(
        server.posts() >= 1,
        "trusted on both sides, the model is asked"
    );
}

/// A graph that POSTs to `url`, waits `ms`, then POSTs again (two side effects a run must
/// send once each).
fn post_wait_post(dir: &Path, url: &str, ms: u64) -> PathBuf {
    write_graph(
        dir,
        "post-wait-post.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "post wait post",
            "nodes": [
                {"id": "first", "block": "http.request", "config": {
                    "method": "POST", "url": url, "allow_private_network": true}},
                {"id": "slow", "block": "control.delay", "config": {"ms": ms}},
                {"id": "second", "block": "http.request", "config": {
                    "method": "POST", "url": url, "allow_private_network": true}},
                {"id": "out", "block": "graph.output", "config": {"name": "status"}}
            ],
            "edges": [
                {"from": ["first", "status"], "to": ["slow", "value"]},
                {"from": ["slow", "value"], "to": ["second", "body"]},
                {"from": ["second", "status"], "to": ["out", "value"]}
            ]
        }),
    )
}

/// The queue's consumer was made by a worker with a 2 s ack wait; a worker started later
/// with 30 s sets it for the fleet, so its signs of life (every 10 s) come in time and the
/// run is not handed out again while it runs: each POST arrives once.
#[test]
fn a_later_workers_ack_wait_is_the_fleets_and_a_long_run_is_not_repeated() {
    let nats = NatsServer::start();
    let server = agentloom_tests::PostCounter::start();
    let mut first = Worker::start(&nats, "first", &["--trust", "--ack-wait", "2"]);
    first.kill();
    let later = Worker::start(&nats, "later", &["--trust", "--ack-wait", "30"]);
    assert!(
        later
            .log()
            .contains("the queue's ack wait was 2 s; it is 30 s now"),
        "{}",
        later.log()
    );
    let dir = tempfile::tempdir().unwrap();
    let graph = post_wait_post(dir.path(), &server.url(), 5000);
    let report = submit_and_wait(&nats, &graph, &dir.path().join("submitter.sqlite3"), 0);
    assert_eq!(report["status"], "completed", "{report}");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(server.posts(), 2, "each POST once:\n{}", later.log());
    // A worker that asks for nothing takes the fleet's setting.
    let quiet = Worker::start(&nats, "quiet", &["--trust"]);
    assert!(!quiet.log().contains("ack wait was"), "{}", quiet.log());
}

/// A client that lost the acknowledgement of its publish queues the same run again: the
/// second entry finds the run taken (or finished) and is dropped, and each POST of the run
/// arrives once.
#[test]
fn a_duplicate_queue_entry_does_not_run_the_run_twice() {
    let nats = NatsServer::start();
    let server = agentloom_tests::PostCounter::start();
    let workers = [
        Worker::start(&nats, "first", &["--trust"]),
        Worker::start(&nats, "second", &["--trust"]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let graph = post_wait_post(dir.path(), &server.url(), 1500);
    let output = submit(&nats, &graph, &["--trust"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let run_id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    // The same entry once more, as a retrying client publishes it (no message id).
    queue_item(&nats, &run_id, "a retrying client");
    wait_for("the run to complete", Duration::from_secs(30), || {
        workers
            .iter()
            .any(|w| w.runs().get(&run_id).is_some_and(|s| s == "completed"))
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(server.posts(), 2, "each POST once");
    let ran: Vec<&str> = workers
        .iter()
        .filter(|w| w.runs().contains_key(&run_id))
        .map(|w| w.name.as_str())
        .collect();
    assert_eq!(ran.len(), 1, "one worker ran it: {ran:?}");
    assert_eq!(
        queue_state(&nats).0,
        0,
        "both entries are gone from the queue"
    );
}

/// systemd, Docker and Kubernetes stop a worker with SIGTERM: it takes no new run, lets the
/// run under way finish, then exits 0; nothing is handed out again.
#[test]
fn a_worker_drains_on_sigterm() {
    let nats = NatsServer::start();
    let server = agentloom_tests::PostCounter::start();
    let mut worker = Worker::start(&nats, "draining", &["--trust", "--drain-timeout", "20"]);
    let dir = tempfile::tempdir().unwrap();
    let graph = post_wait_post(dir.path(), &server.url(), 2500);
    let output = submit(&nats, &graph, &["--trust"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let run_id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    wait_for("the first POST", Duration::from_secs(30), || {
        server.posts() == 1
    });
    let killed = Command::new("kill")
        .args(["-TERM", &worker.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = worker.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the worker did not end after its run:\n{}",
            worker.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{}", worker.log());
    assert!(worker.log().contains("draining"), "{}", worker.log());
    assert_eq!(worker.runs()[&run_id], "completed", "{}", worker.log());
    assert_eq!(server.posts(), 2);
    // Acknowledged: another worker started now finds nothing to run again.
    let next = Worker::start(&nats, "next", &["--trust"]);
    std::thread::sleep(Duration::from_secs(2));
    assert!(next.runs().is_empty(), "{:?}", next.runs());
    assert_eq!(server.posts(), 2);
}

/// Runs on a worker keep their files apart (each in `runs/<RUN_ID>`), a graph calls only the
/// files carried in its request (never one on the worker's disk), and a run id that is not
/// a plain id is moved aside before it names a folder or a subject.
#[test]
fn a_workers_runs_keep_their_files_apart_and_call_only_what_they_carry() {
    let nats = NatsServer::start();
    let worker = Worker::start(&nats, "isolating", &["--trust", "--keep-workspaces", "all"]);
    let home = worker.dir.path().join("home");
    let dir = tempfile::tempdir().unwrap();
    let writer = write_graph(
        dir.path(),
        "write.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "write",
            "nodes": [
                {"id": "secret", "block": "data.constant", "config": {"type": "text", "value": "run one's"}},
                {"id": "write", "block": "file.write", "config": {"path": "note.txt"}},
                {"id": "out", "block": "graph.output", "config": {"name": "path"}}
            ],
            "edges": [
                {"from": ["secret", "value"], "to": ["write", "content"]},
                {"from": ["write", "path"], "to": ["out", "value"]}
            ]
        }),
    );
    let reader = write_graph(
        dir.path(),
        "read.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "read",
            "nodes": [
                {"id": "read", "block": "file.read", "config": {"path": "note.txt"}},
                {"id": "out", "block": "graph.output", "config": {"name": "content"}}
            ],
            "edges": [{"from": ["read", "content"], "to": ["out", "value"]}]
        }),
    );
    let db = dir.path().join("submitter.sqlite3");
    let written = submit_and_wait(&nats, &writer, &db, 0);
    let run_id = written["run_id"].as_str().unwrap();
    let note = home.join("runs").join(run_id).join("note.txt");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "run one's");
    assert!(!home.join("note.txt").exists());
    let read = submit_and_wait(&nats, &reader, &db, 1);
    assert!(
        read["error"]
            .as_str()
            .unwrap_or_default()
            .contains("note.txt"),
        "another run's file is not there: {read}"
    );

    // A graph file on the worker's own disk, named by a request that does not carry it.
    let on_worker = home.join("local.json");
    std::fs::write(
        &on_worker,
        serde_json::to_string(&json!({
            "format": "agentloom.graph", "version": 1, "name": "local",
            "nodes": [], "edges": []
        }))
        .unwrap(),
    )
    .unwrap();
    let calling = json!({
        "format": "agentloom.graph", "version": 1, "name": "calls the worker's file",
        "nodes": [{"id": "call", "block": "graph.call", "config": {"path": on_worker.display().to_string()}}],
        "edges": []
    });
    let request = |run_id: &str| {
        json!({
            "run_id": run_id, "graph": calling, "graph_file": "calls.json",
            "files": [], "inputs": {}, "trusted": true
        })
    };
    publish_request(&nats, "reaches-out", &request("reaches-out"));
    wait_for("the run to end", Duration::from_secs(30), || {
        worker
            .runs()
            .get("reaches-out")
            .is_some_and(|status| status != "running")
    });
    let conn = rusqlite::Connection::open(worker.db()).unwrap();
    let error: String = conn
        .query_row(
            "SELECT error FROM runs WHERE id = 'reaches-out'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(
        error.contains("not there when this graph was read"),
        "{error}"
    );

    // A queue entry whose run id would climb out of the workspace (no subject can even hold
    // its request).
    queue_item(&nats, "../escape", "a stranger");
    wait_for(
        "the entry to be moved aside",
        Duration::from_secs(30),
        || queue_state(&nats).0 == 0,
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(!worker.runs().contains_key("../escape"));
    assert!(!worker.dir.path().join("escape").exists());
    assert!(!worker.log().contains("panicked"), "{}", worker.log());
}

/// NATS carries no sender identity: a publisher may not approve a side effect by itself. A
/// worker without approver keys, an unsigned decision and one signed by a stranger's key
/// are refused (the run stays waiting, the POST is not sent, the approver is told why); the
/// approver's signature resumes it.
#[test]
fn only_a_decision_signed_by_an_approver_resumes_a_side_effect() {
    let nats = NatsServer::start();
    let server = agentloom_tests::PostCounter::start();
    let approver = nkeys::KeyPair::new_user();
    let stranger = nkeys::KeyPair::new_user();
    let dir = tempfile::tempdir().unwrap();
    let seed_of = |pair: &nkeys::KeyPair, name: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, pair.seed().unwrap()).unwrap();
        path
    };
    let approver_seed = seed_of(&approver, "approver.nk");
    let stranger_seed = seed_of(&stranger, "stranger.nk");
    let graph = write_graph(
        dir.path(),
        "post.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "post",
            "settings": {"safe_mode": true},
            "nodes": [{"id": "post", "block": "http.request", "config": {
                "method": "POST", "url": server.url(), "allow_private_network": true}}],
            "edges": []
        }),
    );
    let db = dir.path().join("submitter.sqlite3");
    let approve = |run_id: &str, seed: Option<&Path>| {
        let mut cmd = bin();
        cmd.args(["approve", run_id, "--nats", &nats.url, "--json", "--db"])
            .arg(&db);
        if let Some(seed) = seed {
            cmd.arg("--sign-with").arg(seed);
        }
        cmd.output().unwrap()
    };

    // A worker with no approver keys takes no decision from the queue.
    let mut keyless = Worker::start(&nats, "keyless", &["--trust"]);
    let report = submit_and_wait(&nats, &graph, &db, 3);
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    let output = approve(&run_id, Some(&approver_seed));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let refused: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("--approver-key"),
        "{refused}"
    );
    assert_eq!(server.posts(), 0);
    keyless.kill();

    // With approver keys: unsigned, and signed by a stranger, refused; the approver's own
    // signature resumes the run and the POST goes once.
    let _worker = Worker::start(
        &nats,
        "guarded",
        &["--trust", "--approver-key", &approver.public_key()],
    );
    let report = submit_and_wait(&nats, &graph, &db, 3);
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    for (seed, why) in [
        (None, "not signed"),
        (
            Some(stranger_seed.as_path()),
            "not one of this worker's approver keys",
        ),
    ] {
        let output = approve(&run_id, seed);
        assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
        let refused: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert!(
            refused["error"].as_str().unwrap_or_default().contains(why),
            "{why:?} in {refused}"
        );
        assert_eq!(server.posts(), 0);
    }
    let output = approve(&run_id, Some(&approver_seed));
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert_eq!(server.posts(), 1);
    assert!(
        !said.contains(&approver.seed().unwrap()),
        "the seed was printed"
    );
}

/// `submit --wait` whose NATS server dies under it says so within its bound (here 2 s,
/// `AGENTLOOM_NATS_LOST_SECS`) instead of waiting with no word.
#[test]
fn submit_wait_gives_up_on_a_lost_server_with_a_message() {
    let mut nats = NatsServer::start();
    let _worker = Worker::start(&nats, "steady", &["--trust"]);
    let dir = tempfile::tempdir().unwrap();
    let graph = delay_graph(dir.path(), 30_000);
    let mut submitter = submit(&nats, &graph, &["--trust", "--wait"])
        .arg("--db")
        .arg(dir.path().join("submitter.sqlite3"))
        .env("AGENTLOOM_NATS_LOST_SECS", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = nats.child.kill();
    let _ = nats.child.wait();
    let killed_at = Instant::now();
    let status = loop {
        if let Some(status) = submitter.try_wait().unwrap() {
            break status;
        }
        if killed_at.elapsed() > Duration::from_secs(20) {
            let _ = submitter.kill();
            panic!("submit --wait still waits 20 s after its server died");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = submitter.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("unreachable for 2 s"),
        "{}",
        stderr(&output)
    );
    assert!(killed_at.elapsed() < Duration::from_secs(10));
}

/// `agentloom show RUN --nats` reads a submitted run's result at any time: none yet while it
/// runs, the `run --json` object once it ended; an unknown id or a wildcard is refused.
#[test]
fn show_nats_reads_a_submitted_runs_result_later() {
    let nats = NatsServer::start();
    let _worker = Worker::start(&nats, "one", &["--trust"]);
    let dir = tempfile::tempdir().unwrap();
    let graph = delay_graph(dir.path(), 1500);
    let output = submit(&nats, &graph, &["--trust", "--input", "text=later"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let run_id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let show = |id: &str| {
        bin()
            .args(["show", id, "--json", "--nats", &nats.url])
            .output()
            .unwrap()
    };
    let early = show(&run_id);
    assert_eq!(early.status.code(), Some(3), "{}", stderr(&early));
    assert!(
        stderr(&early).contains("no result yet"),
        "{}",
        stderr(&early)
    );
    let mut done = None;
    wait_for("the result", Duration::from_secs(30), || {
        let output = show(&run_id);
        let finished = output.status.code() == Some(0);
        done = Some(output);
        finished
    });
    let report: Value = serde_json::from_slice(&done.unwrap().stdout).unwrap();
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["outputs"]["echo"], "later", "{report}");
    assert_eq!(show("no-such-run").status.code(), Some(2));
    let wildcard = show(">");
    assert_eq!(wildcard.status.code(), Some(2));
    assert!(
        stderr(&wildcard).contains("not a run id"),
        "{}",
        stderr(&wildcard)
    );
}

/// `agentloom queue` shows what waits and what was moved aside, with why; `--retry` runs a
/// dead request again as a new run and takes it off the dead list.
#[test]
fn queue_lists_waiting_and_dead_requests_and_retries_one() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let queue = |extra: &[&str]| {
        bin()
            .args(["queue", "--nats", &nats.url])
            .args(extra)
            .output()
            .unwrap()
    };
    let state = |output: &Output| -> Value { serde_json::from_slice(&output.stdout).unwrap() };

    // Nobody takes work yet: a submitted run waits in the queue.
    let waiting = delay_graph(dir.path(), 10);
    let output = submit(&nats, &waiting, &["--trust"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let listed = queue(&["--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    assert_eq!(state(&listed)["queued"], 1, "{}", state(&listed));

    let _worker = Worker::start(&nats, "only", &["--trust"]);
    let broken = write_graph(
        dir.path(),
        "broken.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "broken",
            "nodes": [{"id": "mystery", "block": "no.such.block"}],
            "edges": []
        }),
    );
    let report = submit_and_wait(&nats, &broken, &dir.path().join("s.sqlite3"), 1);
    let dead_id = report["run_id"].as_str().unwrap().to_owned();
    let mut shown = Value::Null;
    wait_for("the queue to empty", Duration::from_secs(30), || {
        shown = state(&queue(&["--json"]));
        shown["queued"] == 0 && shown["dead"].as_array().is_some_and(|d| !d.is_empty())
    });
    let dead = &shown["dead"][0];
    assert_eq!(dead["run_id"], dead_id.as_str(), "{shown}");
    assert!(
        dead["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no.such.block"),
        "{shown}"
    );
    assert_eq!(dead["worker"], "only");
    let text = queue(&[]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains(&format!("dead {dead_id}")),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );

    // Retried: a new run of the same request, which fails the same way and takes the old
    // one's place among the dead.
    let retried = queue(&["--retry", &dead_id]);
    assert_eq!(retried.status.code(), Some(0), "{}", stderr(&retried));
    let new_id = String::from_utf8_lossy(&retried.stdout).trim().to_owned();
    assert_ne!(new_id, dead_id);
    wait_for(
        "the retried run to be moved aside",
        Duration::from_secs(30),
        || {
            shown = state(&queue(&["--json"]));
            let ids: Vec<&str> = shown["dead"]
                .as_array()
                .map(|d| d.iter().filter_map(|e| e["run_id"].as_str()).collect())
                .unwrap_or_default();
            ids == [new_id.as_str()]
        },
    );
    let unknown = queue(&["--retry", "no-such-run"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("not among the dead requests"));
}

/// `agentloom workers` lists who is up and what each runs now.
#[test]
fn workers_lists_who_is_up_and_what_each_runs() {
    let nats = NatsServer::start();
    let _workers = [
        Worker::start(&nats, "alpha", &["--trust", "--concurrency", "2"]),
        Worker::start(&nats, "beta", &["--trust"]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let graph = delay_graph(dir.path(), 4000);
    let output = submit(&nats, &graph, &["--trust"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let run_id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let mut listed = Value::Null;
    wait_for("a worker to list the run", Duration::from_secs(20), || {
        let output = bin()
            .args(["workers", "--json", "--wait-ms", "500", "--nats", &nats.url])
            .output()
            .unwrap();
        listed = serde_json::from_slice(&output.stdout).unwrap_or_default();
        listed.as_array().is_some_and(|all| {
            all.iter()
                .any(|w| w["runs"][0]["run_id"] == run_id.as_str())
        })
    });
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(names, ["alpha", "beta"], "{listed}");
    let alpha = &listed[0];
    assert_eq!(alpha["concurrency"], 2);
    assert_eq!(alpha["draining"], false);
    let text = bin()
        .args(["workers", "--wait-ms", "500", "--nats", &nats.url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("alpha  up") && text.contains("beta  up"),
        "{text}"
    );
}

/// An HTTP server on 127.0.0.1 that answers `200 ok` and records every POST: its path, its
/// body and its `Idempotency-Key`. With `hold_first`, the first POST's answer is never sent
/// (the connection is held open), as when a worker dies while its request is at the server.
/// Like a payment API, it performs a POST whose key it saw before only once
/// ([`Hook::performed`]).
struct Hook {
    port: u16,
    posts: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
    keys: std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

impl Hook {
    fn start(hold_first: bool) -> Hook {
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let posts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keys = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = posts.clone();
        let keyed = keys.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let recorded = recorded.clone();
                let keyed = keyed.clone();
                std::thread::spawn(move || {
                    let mut reader = std::io::BufReader::new(stream);
                    let (head, body) = agentloom_tests::read_http_request(&mut reader);
                    let Some(path) = head.strip_prefix("POST ") else {
                        return;
                    };
                    let path = path.split(' ').next().unwrap_or_default().to_owned();
                    let key = head.lines().find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("idempotency-key")
                            .then(|| value.trim().to_owned())
                    });
                    let first = {
                        let mut posts = recorded.lock().unwrap();
                        posts.push((path, String::from_utf8_lossy(&body).into_owned()));
                        keyed.lock().unwrap().push(key);
                        posts.len() == 1
                    };
                    let mut stream = reader.into_inner();
                    if hold_first && first {
                        std::thread::sleep(Duration::from_secs(120));
                        return;
                    }
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    );
                });
            }
        });
        Hook { port, posts, keys }
    }

    /// The `Idempotency-Key` of each POST, in order (`None`: it had none).
    fn keys(&self) -> Vec<Option<String>> {
        self.keys.lock().unwrap().clone()
    }

    /// How many POSTs were performed: each without a key, and the first with each key.
    fn performed(&self) -> usize {
        let keys = self.keys();
        let keyed: BTreeSet<&String> = keys.iter().flatten().collect();
        keys.iter().filter(|key| key.is_none()).count() + keyed.len()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    fn posts(&self) -> Vec<(String, String)> {
        self.posts.lock().unwrap().clone()
    }

    /// Every (path, body) POSTed more than once.
    fn repeated(&self) -> Vec<(String, String)> {
        let mut seen = BTreeMap::<(String, String), usize>::new();
        for post in self.posts() {
            *seen.entry(post).or_default() += 1;
        }
        seen.into_iter()
            .filter(|(_, times)| *times > 1)
            .map(|(post, _)| post)
            .collect()
    }
}

/// `submit GRAPH --wait --json` under way once the first POST of its run reached `hook`;
/// which of `workers` runs it.
fn submit_until_first_post(
    nats: &NatsServer,
    graph: &Path,
    dir: &Path,
    hook: &Hook,
    workers: &[Worker],
) -> (Child, usize) {
    let submitter = submit_following(nats, graph, &dir.join("submitter.sqlite3"));
    wait_for(
        "the first POST at the server",
        Duration::from_secs(30),
        || hook.posts().len() == 1,
    );
    let running = workers
        .iter()
        .position(|w| !w.runs().is_empty())
        .expect("a worker has the run");
    (submitter, running)
}

fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// A worker frozen (SIGSTOP) past the ack wait loses its run to another worker; thawed
/// (SIGCONT), its next event is refused by the server and it stops the run at once: it
/// sends nothing more. Each POST arrives once and the run completes once.
#[test]
fn a_paused_worker_whose_run_was_taken_over_sends_nothing_more() {
    let nats = NatsServer::start();
    let hook = Hook::start(false);
    let flags = ["--trust", "--ack-wait", "2"];
    let workers = [
        Worker::start(&nats, "paused", &flags),
        Worker::start(&nats, "other", &flags),
    ];
    let dir = tempfile::tempdir().unwrap();
    let graph = post_wait_post(dir.path(), &hook.url("hook"), 3500);
    let (submitter, running) = submit_until_first_post(&nats, &graph, dir.path(), &hook, &workers);
    signal(&workers[running].child, "STOP");
    let other = &workers[1 - running];
    // The other worker takes it over once the ack wait passed, and starts the delay again.
    wait_for(
        "the other worker to take the run over",
        Duration::from_secs(30),
        || node_status(&other.db(), "slow").as_deref() == Some("running"),
    );
    signal(&workers[running].child, "CONT");
    let output = submitter.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["status"], "completed", "{report}");
    // Time for a thawed worker that was not fenced to send its second POST.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        hook.posts().len(),
        2,
        "each POST once:\n{}\n{}",
        workers[running].log(),
        other.log()
    );
    let run_id = report["run_id"].as_str().unwrap();
    let completed: Vec<&str> = workers
        .iter()
        .filter(|w| w.runs().get(run_id).is_some_and(|s| s == "completed"))
        .map(|w| w.name.as_str())
        .collect();
    assert_eq!(
        completed.len(),
        1,
        "the run completes once: {completed:?}\n{}\n{}",
        workers[running].log(),
        other.log()
    );
    assert!(
        workers[running]
            .log()
            .contains("another worker took this run over"),
        "the thawed worker was stopped: {}",
        workers[running].log()
    );
}

/// One POST (its node's config with `config`'s fields added) whose answer the server holds
/// back, and its worker SIGKILLed meanwhile: the server, the hook and the run's report once
/// the other worker ended it.
fn a_post_in_flight_at_a_crash(config: Value) -> (NatsServer, Hook, Value) {
    let nats = NatsServer::start();
    let hook = Hook::start(true);
    let flags = ["--trust", "--ack-wait", "2"];
    let mut workers = [
        Worker::start(&nats, "crashing", &flags),
        Worker::start(&nats, "other", &flags),
    ];
    let dir = tempfile::tempdir().unwrap();
    let graph = one_post(dir.path(), &hook.url("hook"), config);
    let (submitter, running) = submit_until_first_post(&nats, &graph, dir.path(), &hook, &workers);
    workers[running].kill();
    let output = submitter.wait_with_output().unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "no report: {}\n{}",
            stderr(&output),
            workers[1 - running].log()
        )
    });
    (nats, hook, report)
}

/// A worker killed while its POST is at the server (the answer held back): the worker that
/// takes the run over does not send it again; the node fails with "may have happened".
#[test]
fn a_side_effect_in_flight_at_a_crash_is_not_sent_again() {
    let (_nats, hook, report) = a_post_in_flight_at_a_crash(json!({}));
    assert_eq!(report["status"], "failed", "{report}");
    let error = report["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("may have happened: the worker running it stopped"),
        "{report}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(hook.posts().len(), 1, "the POST was not sent again");
    assert_eq!(
        hook.keys(),
        vec![None],
        "no idempotency key unless asked for"
    );
}

/// A graph of one POST to `url`, its node's config with `config`'s fields added.
fn one_post(dir: &Path, url: &str, config: Value) -> PathBuf {
    let mut post = json!({"method": "POST", "url": url, "allow_private_network": true});
    post.as_object_mut()
        .unwrap()
        .extend(config.as_object().unwrap().clone());
    write_graph(
        dir,
        "post.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "one post",
            "nodes": [
                {"id": "post", "block": "http.request", "config": post},
                {"id": "out", "block": "graph.output", "config": {"name": "status"}}
            ],
            "edges": [{"from": ["post", "status"], "to": ["out", "value"]}]
        }),
    )
}

/// A worker frozen between its owner check and the record of its side effect's start (held
/// there by the test hook, then SIGSTOPped) loses the run to another worker, which reads a
/// history without that start and sends the POST. Thawed, the first worker stores its
/// record, finds the run is not its own any more and does not send: the POST arrives once.
#[test]
fn a_run_taken_over_while_its_side_effect_start_is_stored_is_sent_once() {
    let nats = NatsServer::start();
    let hook = Hook::start(false);
    let dir = tempfile::tempdir().unwrap();
    let held = dir.path().join("held");
    let flags = ["--trust", "--ack-wait", "2"];
    let frozen = Worker::start_with_env(
        &nats,
        "frozen",
        &flags,
        &[(
            "AGENTLOOM_TEST_HOLD_BEFORE_EFFECT_RECORD",
            held.to_str().unwrap(),
        )],
    );
    let graph = one_post(dir.path(), &hook.url("hook"), json!({}));
    let submitter = submit_following(&nats, &graph, &dir.path().join("submitter.sqlite3"));
    wait_for(
        "the worker at its side effect, owner checked",
        Duration::from_secs(30),
        || held.exists(),
    );
    signal(&frozen.child, "STOP");
    // Past the ack wait, the request goes to the other worker, which takes the run over.
    let other = Worker::start(&nats, "other", &flags);
    wait_for("the other worker's POST", Duration::from_secs(30), || {
        hook.posts().len() == 1
    });
    std::fs::remove_file(&held).unwrap();
    signal(&frozen.child, "CONT");
    let output = submitter.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("no report: {}", stderr(&output)));
    assert_eq!(report["status"], "completed", "{report}");
    wait_for(
        "the thawed worker to find the run taken",
        Duration::from_secs(20),
        || frozen.log().contains("another worker took this run over"),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        hook.posts().len(),
        1,
        "the POST once:\n--- frozen\n{}\n--- other\n{}",
        frozen.log(),
        other.log()
    );
}

/// A POST that opts in to an idempotency key, in flight when its worker is SIGKILLed (the
/// answer held back): the worker that takes the run over sends it again with the same key,
/// recorded with the side effect's start, and the server, which de-duplicates by key,
/// performs it once. The run completes.
#[test]
fn a_side_effect_in_flight_at_a_crash_is_sent_again_with_its_idempotency_key() {
    let (nats, hook, report) = a_post_in_flight_at_a_crash(json!({"idempotency_key": true}));
    assert_eq!(report["status"], "completed", "{report}");
    let keys = hook.keys();
    assert_eq!(keys.len(), 2, "sent again: {keys:?}");
    let key = keys[0].clone().expect("the first POST carries a key");
    assert!(key.starts_with("agentloom-"), "{key}");
    assert_eq!(keys[1].as_deref(), Some(key.as_str()), "the same key");
    assert_eq!(hook.performed(), 1);
    // The key is the one recorded with the side effect's start.
    let run_id = report["run_id"].as_str().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let recorded: Value = runtime.block_on(async {
        let client = async_nats::connect(nats.url.as_str()).await.unwrap();
        let runs = async_nats::jetstream::new(client)
            .get_stream("AGENTLOOM_RUNS")
            .await
            .unwrap();
        let effect = runs
            .get_last_raw_message_by_subject(&format!("agentloom.run.{run_id}.effects"))
            .await
            .unwrap();
        serde_json::from_slice(&effect.payload).unwrap()
    });
    assert_eq!(recorded["idempotency_key"], key.as_str(), "{recorded}");
}

/// A graph whose two POSTs go to the URL its input `url` names (one per run), with a wait
/// between them.
fn post_wait_post_to_input(dir: &Path, ms: u64) -> PathBuf {
    write_graph(
        dir,
        "post-wait-post-to.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "post wait post to",
            "nodes": [
                {"id": "url", "block": "graph.input", "config": {"name": "url"}},
                {"id": "first", "block": "http.request", "config": {
                    "method": "POST", "allow_private_network": true}},
                {"id": "slow", "block": "control.delay", "config": {"ms": ms}},
                {"id": "second", "block": "http.request", "config": {
                    "method": "POST", "allow_private_network": true}},
                {"id": "out", "block": "graph.output", "config": {"name": "status"}}
            ],
            "edges": [
                {"from": ["url", "value"], "to": ["first", "url"]},
                {"from": ["url", "value"], "to": ["second", "url"]},
                {"from": ["first", "status"], "to": ["slow", "value"]},
                {"from": ["slow", "value"], "to": ["second", "body"]},
                {"from": ["second", "status"], "to": ["out", "value"]}
            ]
        }),
    )
}

/// nats-server killed (SIGKILL) and started again on its store in the middle of a batch:
/// every run ends completed or failed with a reason, and no POST reaches the server twice.
#[test]
fn a_server_killed_and_restarted_mid_batch_repeats_no_post() {
    let mut nats = NatsServer::start();
    let hook = Hook::start(false);
    let flags = ["--trust", "--ack-wait", "3", "--concurrency", "4"];
    let _workers = [
        Worker::start(&nats, "w1", &flags),
        Worker::start(&nats, "w2", &flags),
    ];
    let dir = tempfile::tempdir().unwrap();
    let graph = post_wait_post_to_input(dir.path(), 1500);
    let submitters: Vec<Child> = (0..6)
        .map(|i| {
            submit(&nats, &graph, &["--trust", "--wait", "--json"])
                .args(["--input", &format!("url={}", hook.url(&format!("run{i}")))])
                .arg("--db")
                .arg(dir.path().join(format!("submitter{i}.sqlite3")))
                .env("AGENTLOOM_NATS_LOST_SECS", "30")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    wait_for("some first POSTs", Duration::from_secs(30), || {
        hook.posts().len() >= 3
    });
    let _ = nats.child.kill();
    let _ = nats.child.wait();
    // Down long enough for runs to send their second POST and end meanwhile.
    std::thread::sleep(Duration::from_secs(4));
    nats.restart();
    let mut ended = 0;
    for submitter in submitters {
        let output = submitter.wait_with_output().unwrap();
        let Ok(report) = serde_json::from_slice::<Value>(&output.stdout) else {
            panic!("no report: {}", stderr(&output));
        };
        match report["status"].as_str() {
            Some("completed") => {}
            Some("failed") => assert!(
                report["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{report}"
            ),
            _ => panic!("{report}"),
        }
        ended += 1;
    }
    assert_eq!(ended, 6);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        hook.repeated(),
        Vec::<(String, String)>::new(),
        "{:?}",
        hook.posts()
    );
}

/// A run queued for `submit --wait` that no worker takes before its deadline: the wait ends
/// with a message within its bound, and a worker that comes up later does not start it (it
/// records it failed, "not started"). The same for `eval --nats`.
#[test]
fn a_run_nobody_waits_for_any_more_never_starts() {
    let nats = NatsServer::start();
    let hook = Hook::start(false);
    let dir = tempfile::tempdir().unwrap();
    let graph = write_graph(
        dir.path(),
        "post.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "one post",
            "nodes": [
                {"id": "text", "block": "graph.input", "config": {"name": "text", "default": "hi"}},
                {"id": "post", "block": "http.request", "config": {
                    "method": "POST", "url": hook.url("hook"), "allow_private_network": true}},
                {"id": "out", "block": "graph.output", "config": {"name": "echo"}}
            ],
            "edges": [
                {"from": ["text", "value"], "to": ["post", "body"]},
                {"from": ["text", "value"], "to": ["out", "value"]}
            ]
        }),
    );
    let started = Instant::now();
    let output = submit(&nats, &graph, &["--trust", "--wait", "--start-within", "2"])
        .arg("--db")
        .arg(dir.path().join("submitter.sqlite3"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no worker started the run before its deadline"),
        "{}",
        stderr(&output)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let run_id = stderr(&output)
        .split_whitespace()
        .skip_while(|word| *word != "run")
        .nth(1)
        .unwrap()
        .to_owned();

    let cases_file = dir.path().join("cases.jsonl");
    std::fs::write(
        &cases_file,
        "{\"name\": \"one\", \"inputs\": {\"text\": \"a\"}, \"expect\": {\"echo\": \"a\"}}\n",
    )
    .unwrap();
    let started = Instant::now();
    let output = bin()
        .arg("eval")
        .arg(&graph)
        .arg("--cases")
        .arg(&cases_file)
        .args(["--nats", &nats.url, "--json", "--trust"])
        .arg("--db")
        .arg(dir.path().join("eval.sqlite3"))
        .env("AGENTLOOM_NATS_START_SECS", "2")
        .output()
        .unwrap();
    assert_ne!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        summary
            .to_string()
            .contains("no worker started the run before its deadline"),
        "{summary}"
    );

    // A worker comes up: neither run starts, both are recorded as not started.
    let worker = Worker::start(&nats, "late", &["--trust"]);
    wait_for(
        "both runs recorded not started",
        Duration::from_secs(20),
        || worker.runs().len() == 2,
    );
    assert!(worker.runs().values().all(|status| status == "failed"));
    std::thread::sleep(Duration::from_secs(1));
    assert!(hook.posts().is_empty(), "{:?}", hook.posts());
    let shown = bin()
        .args(["show", &run_id, "--json", "--nats", &nats.url])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["status"], "failed", "{shown}");
    assert!(
        shown["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not started"),
        "{shown}"
    );
}

/// A graph that writes `note.txt` in its run's folder, then POSTs its path to `url`.
fn write_then_post(dir: &Path, url: &str) -> PathBuf {
    write_graph(
        dir,
        "write-then-post.json",
        &json!({
            "format": "agentloom.graph", "version": 1, "name": "write then post",
            "nodes": [
                {"id": "text", "block": "data.constant", "config": {"type": "text", "value": "kept?"}},
                {"id": "write", "block": "file.write", "config": {"path": "note.txt"}},
                {"id": "post", "block": "http.request", "config": {
                    "method": "POST", "url": url, "allow_private_network": true}},
                {"id": "out", "block": "graph.output", "config": {"name": "status"}}
            ],
            "edges": [
                {"from": ["text", "value"], "to": ["write", "content"]},
                {"from": ["write", "path"], "to": ["post", "body"]},
                {"from": ["post", "status"], "to": ["out", "value"]}
            ]
        }),
    )
}

/// A worker removes a completed run's folder and keeps a failed one's to look into (the
/// default); `--keep-workspaces none` removes both, `all` keeps both.
#[test]
fn run_folders_are_removed_or_kept_by_policy() {
    let nats = NatsServer::start();
    let hook = Hook::start(false);
    let dir = tempfile::tempdir().unwrap();
    let completes = write_then_post(dir.path(), &hook.url("hook"));
    let fails_dir = dir.path().join("fails");
    std::fs::create_dir_all(&fails_dir).unwrap();
    // Nothing listens on port 1: the POST fails, and so the run.
    let fails = write_then_post(&fails_dir, "http://127.0.0.1:1/hook");
    let db = dir.path().join("submitter.sqlite3");
    for (policy, completed_kept, failed_kept) in [
        (None, false, true),
        (Some("none"), false, false),
        (Some("all"), true, true),
    ] {
        let mut flags = vec!["--trust"];
        if let Some(policy) = policy {
            flags.extend(["--keep-workspaces", policy]);
        }
        let mut worker = Worker::start(&nats, "tidy", &flags);
        let folder = |report: &Value| {
            let run_id = report["run_id"].as_str().unwrap();
            worker.dir.path().join("home/runs").join(run_id)
        };
        let completed = submit_and_wait(&nats, &completes, &db, 0);
        let failed = submit_and_wait(&nats, &fails, &db, 1);
        assert_eq!(failed["status"], "failed", "{failed}");
        assert_eq!(
            folder(&completed).join("note.txt").exists(),
            completed_kept,
            "{policy:?}: the completed run's folder"
        );
        assert_eq!(
            folder(&failed).join("note.txt").exists(),
            failed_kept,
            "{policy:?}: the failed run's folder"
        );
        worker.kill();
    }
}

/// Three `nats-server -js` routed to each other, each with its own store; stopped when dropped.
struct Cluster {
    servers: Vec<Option<Child>>,
    names: Vec<String>,
    ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let server = agentloom_tests::find_on_path("nats-server")
            .unwrap_or_else(|| panic!("nats-server is not installed: apt-get install nats-server"));
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<u16> = (0..3).map(|_| agentloom_tests::free_port()).collect();
        let routes: Vec<u16> = (0..3).map(|_| agentloom_tests::free_port()).collect();
        let route_list = routes
            .iter()
            .map(|port| format!("nats://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let names: Vec<String> = (1..=3).map(|i| format!("nats-{i}")).collect();
        let servers = (0..3)
            .map(|i| {
                let log = dir.path().join(format!("{}.log", names[i]));
                let mut child = Command::new(&server)
                    .args(["-js", "-a", "127.0.0.1", "-p", &ports[i].to_string()])
                    .args(["-n", &names[i], "--cluster_name", "agentloom"])
                    .args(["--cluster", &format!("nats://127.0.0.1:{}", routes[i])])
                    .args(["--routes", &route_list, "-sd"])
                    .arg(dir.path().join(&names[i]))
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .unwrap();
                agentloom_tests::wait_until_listening(&mut child, ports[i], &log, "nats-server");
                Some(child)
            })
            .collect();
        Cluster {
            servers,
            names,
            ports,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        self.ports
            .iter()
            .map(|port| format!("nats://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Creates the streams replicated on the three servers (once the cluster has a leader),
    /// as an operator does before the first worker starts; the name of the runs stream's
    /// leader.
    fn create_replicated_streams(&self) -> String {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let url = format!("nats://127.0.0.1:{}", self.ports[0]);
        runtime.block_on(async {
            let client = async_nats::connect(url.as_str()).await.unwrap();
            let js = async_nats::jetstream::new(client);
            let streams = [
                ("AGENTLOOM_QUEUE", "agentloom.queue", true),
                ("AGENTLOOM_RUNS", "agentloom.run.>", false),
                ("AGENTLOOM_DEAD", "agentloom.dead.>", false),
            ];
            for (name, subject, work_queue) in streams {
                let config = async_nats::jetstream::stream::Config {
                    name: name.to_owned(),
                    subjects: vec![subject.to_owned()],
                    num_replicas: 3,
                    retention: if work_queue {
                        async_nats::jetstream::stream::RetentionPolicy::WorkQueue
                    } else {
                        async_nats::jetstream::stream::RetentionPolicy::Limits
                    },
                    ..Default::default()
                };
                let started = Instant::now();
                loop {
                    match js.get_or_create_stream(config.clone()).await {
                        Ok(_) => break,
                        Err(err) if started.elapsed() < Duration::from_secs(30) => {
                            let _ = err;
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                        Err(err) => panic!("stream {name}: {err}"),
                    }
                }
            }
            let mut runs = js.get_stream("AGENTLOOM_RUNS").await.unwrap();
            let info = runs.info().await.unwrap();
            info.cluster.as_ref().unwrap().leader.clone().unwrap()
        })
    }

    fn kill(&mut self, name: &str) {
        let index = self.names.iter().position(|n| n == name).unwrap();
        if let Some(mut child) = self.servers[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.servers.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn losing_the_stream_leader_of_a_three_node_cluster_ends_every_run_once() {
    const RUNS: usize = 12;
    /// How long each `submit --wait` may take at the most, fail-over included.
    const BOUND: Duration = Duration::from_secs(45);
    let mut cluster = Cluster::start();
    let leader = cluster.create_replicated_streams();
    let url = cluster.url();
    let flags = ["--trust", "--ack-wait", "4", "--concurrency", "8"];
    let workers = [
        Worker::start_on(&url, "w1", &flags, &[]),
        Worker::start_on(&url, "w2", &flags, &[]),
    ];
    let hook = Hook::start(false);
    let dir = tempfile::tempdir().unwrap();
    let graph = post_wait_post_to_input(dir.path(), 2000);
    let started = Instant::now();
    let mut submitters: Vec<Child> = (0..RUNS)
        .map(|i| {
            bin()
                .arg("submit")
                .arg(&graph)
                .args(["--nats", &url, "--trust", "--wait", "--json"])
                .args(["--start-within", "30"])
                .args(["--input", &format!("url={}", hook.url(&format!("run{i}")))])
                .arg("--db")
                .arg(dir.path().join(format!("submitter{i}.sqlite3")))
                .env("AGENTLOOM_NATS_LOST_SECS", "20")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    while hook.posts().len() < RUNS / 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "no POSTs");
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster.kill(&leader);
    let killed = Instant::now();
    let mut reports = Vec::new();
    let mut late = false;
    for submitter in &mut submitters {
        while submitter.try_wait().unwrap().is_none() {
            if killed.elapsed() > BOUND {
                late = true;
                let _ = submitter.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if late {
        let said: Vec<String> = submitters
            .into_iter()
            .map(|s| {
                let output = s.wait_with_output().unwrap();
                format!(
                    "{}\n{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                )
            })
            .collect();
        let tail = |log: String| log.lines().rev().take(30).collect::<Vec<_>>().join("\n");
        panic!(
            "a submit --wait still waited {BOUND:?} after the leader was lost:\n{}\nruns: {:?} {:?}\n--- w1\n{}\n--- w2\n{}",
            said.join("\n---\n"),
            workers[0].runs(),
            workers[1].runs(),
            tail(workers[0].log()),
            tail(workers[1].log())
        );
    }
    for submitter in submitters {
        let output = submitter.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let report: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("no report: {stderr}"));
        match report["status"].as_str() {
            Some("completed") => {}
            Some("failed") => assert!(
                report["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{report}"
            ),
            _ => panic!("{report}\n{stderr}"),
        }
        reports.push(report);
    }
    assert_eq!(reports.len(), RUNS);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        hook.repeated(),
        Vec::<(String, String)>::new(),
        "POSTed twice"
    );
}
