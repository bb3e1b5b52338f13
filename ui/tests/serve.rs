//! `agentloom serve` end to end: the real binary on a free port of 127.0.0.1, driven with real
//! HTTP requests (every Agent Protocol route, the webhook, the schedule) and by AutoGPT's own
//! benchmark client (PyPI `agbenchmark` 0.0.10), with the model scripted by `fakellm`.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::Read as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentloom_tests::{FakeLlm, free_port};
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/serve")
        .join(name)
}

/// The file agent graph (an `ai.agent` with file tools), its model at `fake`.
fn file_agent_graph(dir: &Path, fake: &FakeLlm) -> PathBuf {
    let text = std::fs::read_to_string(fixture("file-agent.agentloom.json"))
        .unwrap()
        .replace("FAKELLM_BASE", &format!("{}/v1", fake.base()));
    let path = dir.join("file-agent.agentloom.json");
    std::fs::write(&path, text).unwrap();
    path
}

fn start_fakellm() -> Option<FakeLlm> {
    FakeLlm::start("serve/fakellm.yaml")
}

/// A running `agentloom serve`; killed on drop if the test did not stop it.
struct Server {
    child: Option<Child>,
    port: u16,
    stderr: PathBuf,
}

impl Server {
    /// `agentloom serve GRAPH EXTRA…`, its `fakellm` credential bound to `model`'s host.
    fn start(graph: &Path, dir: &Path, extra: &[&str], model: Option<&FakeLlm>) -> Server {
        let port = free_port();
        let stderr = dir.join("serve.log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentloom"));
        if let Some(model) = model {
            command.env(
                "AGENTLOOM_SECRET_FAKELLM_HOSTS",
                format!("127.0.0.1:{}", model.port()),
            );
        }
        let child = command
            .arg("serve")
            .arg(graph)
            .args(["--port", &port.to_string(), "--db"])
            .arg(dir.join("runs.sqlite3"))
            .arg("--tasks-dir")
            .arg(dir.join("tasks"))
            .arg("--workspace")
            .arg(dir)
            .args(extra)
            .env_remove("AGENTLOOM_LOG")
            // The scripted model takes any key; the graph names this credential.
            .env("AGENTLOOM_SECRET_FAKELLM", "sk-fakellm-test")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut server = Server {
            child: Some(child),
            port,
            stderr,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(Ok(Some(status))) = server.child.as_mut().map(Child::try_wait) {
                panic!("agentloom serve exited ({status}):\n{}", server.log());
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "agentloom serve did not listen within 30 s:\n{}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = std::fs::File::open(&self.stderr) {
            let _ = file.read_to_string(&mut text);
        }
        text
    }

    /// Sends Ctrl-C (SIGINT) and waits for a clean exit; returns the exit code.
    fn interrupt(&mut self) -> i32 {
        let mut child = self.child.take().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        #[allow(unsafe_code, reason = "sending a signal to our own child process")]
        // SAFETY: kill(2) with a pid we spawned and a valid signal number.
        unsafe {
            libc::kill(pid, libc::SIGINT);
        }
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "agentloom serve did not stop within 10 s of Ctrl-C"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn runs_in_log(dir: &Path) -> Vec<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .args(["runs", "--json", "--limit", "100", "--db"])
        .arg(dir.join("runs.sqlite3"))
        .output()
        .unwrap();
    serde_json::from_slice::<Value>(&output.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

async fn json_of(response: reqwest::Response, status: u16) -> Value {
    let actual = response.status().as_u16();
    let body = response.text().await.unwrap();
    assert_eq!(actual, status, "unexpected status; body: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn error_of(body: &Value) -> String {
    body["error"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn agent_protocol_routes_over_http() {
    let Some(fake) = start_fakellm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let graph = file_agent_graph(dir.path(), &fake);
    let mut server = Server::start(&graph, dir.path(), &[], Some(&fake));
    let http = reqwest::Client::new();
    let tasks = server.url("/ap/v1/agent/tasks");

    // Create a task; it is listed and can be fetched.
    let task = json_of(
        http.post(&tasks)
            .json(&json!({"input": "TASK-NOTE: write a note"}))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    let task_id = task["task_id"].as_str().unwrap().to_owned();
    assert_eq!(task["input"], "TASK-NOTE: write a note");
    assert_eq!(task["artifacts"], json!([]));
    let fetched = json_of(
        http.get(format!("{tasks}/{task_id}")).send().await.unwrap(),
        200,
    )
    .await;
    assert_eq!(fetched["task_id"], task_id.as_str());

    // Bad bodies name the field; unknown ids are 404 JSON.
    let bad = json_of(
        http.post(&tasks)
            .json(&json!({"input": 5}))
            .send()
            .await
            .unwrap(),
        400,
    )
    .await;
    assert!(error_of(&bad).starts_with("input"), "{bad}");
    let bad = json_of(
        http.post(&tasks)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap(),
        400,
    )
    .await;
    assert!(error_of(&bad).contains("not valid JSON"), "{bad}");
    let bad = json_of(
        http.post(&tasks)
            .json(&json!({"input": "x", "additional_input": [1]}))
            .send()
            .await
            .unwrap(),
        400,
    )
    .await;
    assert!(error_of(&bad).starts_with("additional_input"), "{bad}");
    for path in [
        "/ap/v1/agent/tasks/nope".to_owned(),
        "/ap/v1/agent/tasks/nope/steps".to_owned(),
        "/ap/v1/agent/tasks/nope/artifacts".to_owned(),
        format!("/ap/v1/agent/tasks/{task_id}/steps/nope"),
        format!("/ap/v1/agent/tasks/{task_id}/artifacts/nope"),
    ] {
        let missing = json_of(http.get(server.url(&path)).send().await.unwrap(), 404).await;
        assert!(error_of(&missing).contains("nope"), "{path}: {missing}");
    }
    let missing = json_of(
        http.post(server.url("/ap/v1/agent/tasks/nope/steps"))
            .send()
            .await
            .unwrap(),
        404,
    )
    .await;
    assert!(error_of(&missing).contains("no task `nope`"));

    // Upload an artifact into a folder; a path out of the task directory is refused.
    let upload = format!("{tasks}/{task_id}/artifacts");
    let form = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(b"given data".to_vec()).file_name("given.txt"),
        )
        .text("relative_path", "inbox");
    let uploaded = json_of(
        http.post(&upload).multipart(form).send().await.unwrap(),
        200,
    )
    .await;
    assert_eq!(uploaded["file_name"], "given.txt");
    assert_eq!(uploaded["relative_path"], "inbox");
    assert_eq!(uploaded["agent_created"], false);
    let task_dir = dir.path().join("tasks").join(&task_id);
    assert_eq!(
        std::fs::read_to_string(task_dir.join("inbox/given.txt")).unwrap(),
        "given data"
    );
    let form = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(b"x".to_vec()).file_name("evil.txt"),
        )
        .text("relative_path", "../..");
    let refused = json_of(
        http.post(&upload).multipart(form).send().await.unwrap(),
        400,
    )
    .await;
    assert!(error_of(&refused).starts_with("relative_path"), "{refused}");
    let form = reqwest::multipart::Form::new().text("relative_path", "inbox");
    let refused = json_of(
        http.post(&upload).multipart(form).send().await.unwrap(),
        400,
    )
    .await;
    assert!(error_of(&refused).starts_with("file"), "{refused}");

    // The first step runs the graph; the agent's decisions are the task's steps, one per
    // request, and the last carries the graph's output.
    let steps = format!("{tasks}/{task_id}/steps");
    let first = json_of(http.post(&steps).send().await.unwrap(), 200).await;
    assert_eq!(first["is_last"], false, "{first}");
    assert_eq!(first["status"], "completed");
    assert_eq!(first["name"], "step 1: write_file", "{first}");
    assert_eq!(
        first["output"], "wrote 6 bytes to notes/note.txt",
        "{first}"
    );
    assert_eq!(
        first["additional_output"]["step"]["arguments"],
        json!({"path": "notes/note.txt", "content": "a note"})
    );
    assert_eq!(
        std::fs::read_to_string(task_dir.join("notes/note.txt")).unwrap(),
        "a note"
    );
    let step = json_of(http.post(&steps).send().await.unwrap(), 200).await;
    assert_eq!(step["is_last"], true, "{step}");
    assert_eq!(step["name"], "step 2: finish", "{step}");
    assert_eq!(step["output"], "notes/note.txt", "{step}");
    assert_eq!(step["additional_output"]["run"]["status"], "completed");
    let run_id = step["additional_output"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let step_id = step["step_id"].as_str().unwrap();
    let again = json_of(
        http.get(format!("{steps}/{step_id}")).send().await.unwrap(),
        200,
    )
    .await;
    assert_eq!(again["step_id"], step_id);
    let listed = json_of(http.get(&steps).send().await.unwrap(), 200).await;
    assert_eq!(listed["steps"].as_array().unwrap().len(), 2);
    assert_eq!(listed["pagination"]["total_items"], 2);
    let finished = json_of(http.post(&steps).send().await.unwrap(), 400).await;
    assert!(error_of(&finished).contains("has finished"), "{finished}");

    // The file the run wrote is an agent-created artifact, and can be downloaded.
    let artifacts = json_of(http.get(&upload).send().await.unwrap(), 200).await;
    let list = artifacts["artifacts"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{artifacts}");
    assert_eq!(artifacts["pagination"]["total_items"], 2);
    let made = list
        .iter()
        .find(|a| a["agent_created"] == true)
        .unwrap_or_else(|| panic!("no agent-created artifact: {artifacts}"));
    assert_eq!(made["file_name"], "note.txt");
    assert_eq!(made["relative_path"], "notes");
    let download = http
        .get(format!(
            "{upload}/{}",
            made["artifact_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(download.status().as_u16(), 200);
    assert_eq!(download.text().await.unwrap(), "a note");

    // Pagination: pages of one; a page size of 0 is refused, naming the field.
    let second = json_of(
        http.get(format!("{upload}?page_size=1&current_page=2"))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(second["artifacts"].as_array().unwrap().len(), 1);
    assert_eq!(second["pagination"]["total_pages"], 2);
    assert_eq!(second["pagination"]["current_page"], 2);
    let bad = json_of(
        http.get(format!("{tasks}?page_size=0"))
            .send()
            .await
            .unwrap(),
        400,
    )
    .await;
    assert!(error_of(&bad).starts_with("page_size"), "{bad}");
    let all = json_of(http.get(&tasks).send().await.unwrap(), 200).await;
    assert_eq!(all["tasks"].as_array().unwrap().len(), 1);

    // Ctrl-C stops the server cleanly; the task's run is in the run log.
    assert_eq!(server.interrupt(), 0, "{}", server.log());
    let runs = runs_in_log(dir.path());
    assert!(
        runs.iter()
            .any(|r| r["id"] == run_id.as_str() && r["status"] == "completed"),
        "run {run_id} not in the log: {runs:?}"
    );
}

#[tokio::test]
async fn webhook_posts_inputs_and_answers_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let graph =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    let mut server = Server::start(&graph, dir.path(), &["--webhook", "/hooks/hello"], None);
    let http = reqwest::Client::new();
    let hook = server.url("/hooks/hello");
    let answer = json_of(
        http.post(&hook)
            .json(&json!({"name": "Ada"}))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(answer, json!({"greeting": "Hello, Ada!"}));
    // No body: the input's default.
    let answer = json_of(http.post(&hook).send().await.unwrap(), 200).await;
    assert_eq!(answer, json!({"greeting": "Hello, world!"}));
    let bad = json_of(
        http.post(&hook)
            .json(&json!({"nmae": "Ada"}))
            .send()
            .await
            .unwrap(),
        400,
    )
    .await;
    assert!(error_of(&bad).contains("no input `nmae`"), "{bad}");
    let bad = json_of(
        http.post(&hook).json(&json!([1])).send().await.unwrap(),
        400,
    )
    .await;
    assert!(error_of(&bad).contains("JSON object"), "{bad}");
    assert_eq!(server.interrupt(), 0);
    let runs = runs_in_log(dir.path());
    assert_eq!(runs.len(), 2, "{runs:?}");
}

#[test]
fn schedule_runs_the_graph_and_skips_overlaps() {
    let dir = tempfile::tempdir().unwrap();
    // A run takes 1.5 s; the schedule ticks every second: every other tick overlaps.
    let graph = dir.path().join("slow.agentloom.json");
    std::fs::write(
        &graph,
        json!({
            "format": "agentloom.graph", "version": 1, "name": "Slow",
            "nodes": [
                {"id": "wait", "block": "control.delay", "config": {"ms": 1500}},
                {"id": "start", "block": "graph.input", "config": {"name": "value", "type": "text", "default": "x"}},
                {"id": "out", "block": "graph.output", "config": {"name": "value"}}
            ],
            "edges": [
                {"from": ["start", "value"], "to": ["wait", "value"]},
                {"from": ["wait", "value"], "to": ["out", "value"]}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let invalid = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .args(["serve", "--schedule", "every minute"])
        .arg(&graph)
        .output()
        .unwrap();
    assert_eq!(invalid.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&invalid.stderr).contains("--schedule `every minute`"));

    // (Exact counts are checked on paused time in the schedule's unit test; here, real
    // processes on a busy machine: at least one run, none overlapping, every one logged.)
    let mut server = Server::start(&graph, dir.path(), &["--schedule", "* * * * * *"], None);
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(server.interrupt(), 0, "{}", server.log());
    let runs = runs_in_log(dir.path());
    let completed = runs.iter().filter(|r| r["status"] == "completed").count();
    assert!(completed >= 1, "no scheduled run completed: {runs:?}");
    assert!(runs.len() <= 3, "runs overlapped: {runs:?}");
    let log = server.log();
    assert!(
        log.contains("skipped: the previous run of Slow is still going"),
        "{log}"
    );
}

/// AutoGPT's benchmark client, in its own virtualenv (`scripts/test-all.sh` makes it).
fn agbenchmark() -> Option<PathBuf> {
    let venv = std::env::var_os("AGBENCHMARK_VENV").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/agbenchmark-venv"),
        PathBuf::from,
    );
    let binary = venv.join("bin/agbenchmark");
    if binary.is_file() {
        return Some(binary);
    }
    if std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1") {
        eprintln!("skipping: agbenchmark is not installed and AGENTLOOM_SKIP_PEERS=1");
        return None;
    }
    panic!(
        "agbenchmark is not installed in {}: run `python3 -m venv {0} && {0}/bin/pip install agbenchmark==0.0.10` (scripts/test-all.sh does it), or set AGENTLOOM_SKIP_PEERS=1",
        venv.display()
    );
}

#[test]
fn autogpt_benchmark_interface_challenges_pass() {
    let Some(agbenchmark) = agbenchmark() else {
        return;
    };
    let Some(fake) = start_fakellm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let graph = file_agent_graph(dir.path(), &fake);
    let server = Server::start(&graph, dir.path(), &[], Some(&fake));
    let bench = dir.path().join("bench");
    std::fs::create_dir_all(bench.join("agbenchmark_config")).unwrap();
    std::fs::write(
        bench.join("agbenchmark_config/config.json"),
        json!({"host": server.url("/ap/v1")}).to_string(),
    )
    .unwrap();
    let output = Command::new(&agbenchmark)
        .args(["start", "-c", "interface"])
        .current_dir(&bench)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = find_report(&bench.join("agbenchmark_config/reports"))
        .unwrap_or_else(|| panic!("no report written; agbenchmark said:\n{stdout}"));
    for test in ["TestWriteFile", "TestReadFile"] {
        let passed = &report["tests"][test]["metrics"]["success"];
        assert_eq!(
            passed,
            true,
            "{test} did not pass: {}\nagbenchmark said:\n{stdout}\nserver log:\n{}",
            report["tests"][test],
            server.log()
        );
    }
}

/// The newest `report.json` under `reports`.
fn find_report(reports: &Path) -> Option<Value> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(reports)
        .ok()?
        .flatten()
        .map(|entry| entry.path().join("report.json"))
        .filter(|path| path.is_file())
        .collect();
    found.sort();
    let text = std::fs::read_to_string(found.last()?).ok()?;
    serde_json::from_str(&text).ok()
}
