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
            .arg("--trust")
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
        #[cfg(unix)]
        {
            let pid = i32::try_from(child.id()).unwrap();
            #[allow(unsafe_code, reason = "sending a signal to our own child process")]
            // SAFETY: kill(2) with a pid we spawned and a valid signal number.
            unsafe {
                libc::kill(pid, libc::SIGINT);
            }
        }
        // Windows sends Ctrl-C only to processes of the sender's own console: these tests
        // run on Linux, and there the server is stopped outright.
        #[cfg(windows)]
        child.kill().unwrap();
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

/// Sends `request` as it is on a new connection to 127.0.0.1:`port`; the status and body.
fn raw_request(port: u16, request: &str) -> (u16, String) {
    use std::io::Write as _;
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn serve_answers_only_requests_addressed_to_it_from_its_own_pages() {
    let dir = tempfile::tempdir().unwrap();
    let graph =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    let mut server = Server::start(&graph, dir.path(), &["--webhook", "/hooks/hello"], None);
    let port = server.port;
    let own = format!("127.0.0.1:{port}");
    let post = |target: &str, headers: &str, body: &str| {
        raw_request(
            port,
            &format!(
                "POST {target} HTTP/1.1\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let input = r#"{"name": "Ada"}"#;

    // A page of another site, after DNS rebinding: its Host is its own name.
    let (status, body) = post(
        "/ap/v1/agent/tasks",
        "Host: rebind.evil.example\r\nContent-Type: application/json\r\n",
        "{}",
    );
    assert_eq!(status, 421, "{body}");
    assert!(body.contains(&own), "{body}");
    // A browser's "simple request" from another site's page: text/plain, foreign Origin.
    let (status, body) = post(
        "/hooks/hello",
        &format!("Host: {own}\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\n"),
        input,
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Origin"), "{body}");
    // A proxy-style absolute target, and no Host at all.
    let (status, body) = post(
        "http://evil.example/ap/v1/agent/tasks",
        &format!("Host: {own}\r\n"),
        "{}",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("absolute-form"), "{body}");
    let (status, _) = raw_request(
        port,
        "POST /ap/v1/agent/tasks HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
    );
    assert_eq!(status, 400);
    assert!(
        runs_in_log(dir.path()).is_empty(),
        "a refused request ran the graph"
    );
    std::fs::create_dir_all(dir.path().join("tasks")).unwrap();
    assert_eq!(
        std::fs::read_dir(dir.path().join("tasks")).unwrap().count(),
        0,
        "a refused request created a task"
    );

    // Its own pages and clients without an Origin are answered, under each loopback name.
    let (status, body) = post(
        "/hooks/hello",
        &format!("Host: {own}\r\nOrigin: http://{own}\r\nContent-Type: text/plain\r\n"),
        input,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Hello, Ada!"), "{body}");
    for host in [format!("localhost:{port}"), format!("[::1]:{port}")] {
        let (status, body) = raw_request(
            port,
            &format!(
                "GET /ap/v1/agent/tasks HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(status, 200, "{host}: {body}");
    }
    assert_eq!(server.interrupt(), 0, "{}", server.log());
}

#[tokio::test]
async fn serve_with_a_token_answers_only_requests_that_carry_it() {
    let dir = tempfile::tempdir().unwrap();
    let graph =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    // Beyond loopback without a token: refused before listening.
    let refused = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .arg("serve")
        .arg(&graph)
        .args(["--host", "0.0.0.0", "--port", "0", "--db"])
        .arg(dir.path().join("runs.sqlite3"))
        .env_remove("AGENTLOOM_SERVE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--host 0.0.0.0") && stderr.contains("--token"),
        "{stderr}"
    );

    let token = "serve-token-4d1f";
    let server = Server::start(
        &graph,
        dir.path(),
        &["--webhook", "/hooks/hello", "--token", token],
        None,
    );
    let http = reqwest::Client::new();
    let tasks = server.url("/ap/v1/agent/tasks");
    for (route, authorization) in [
        (&tasks, None),
        (&tasks, Some("Bearer wrong-token")),
        (&tasks, Some(token)),
    ] {
        let mut request = http.get(route.as_str());
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        let answer = json_of(request.send().await.unwrap(), 401).await;
        assert!(
            error_of(&answer).contains("Authorization: Bearer"),
            "{answer}"
        );
    }
    let hook = json_of(
        http.post(server.url("/hooks/hello"))
            .json(&json!({"name": "Ada"}))
            .send()
            .await
            .unwrap(),
        401,
    )
    .await;
    assert!(!hook.to_string().contains(token), "{hook}");
    assert!(!server.log().contains(token), "{}", server.log());
    let listed = json_of(
        http.get(&tasks).bearer_auth(token).send().await.unwrap(),
        200,
    )
    .await;
    assert_eq!(listed["tasks"], json!([]));
    let answer = json_of(
        http.post(server.url("/hooks/hello"))
            .bearer_auth(token)
            .json(&json!({"name": "Ada"}))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(answer, json!({"greeting": "Hello, Ada!"}));
}

/// Uploads `content` as `folder/name` to a task; the answer's status and JSON.
#[cfg(target_os = "linux")]
async fn upload(
    http: &reqwest::Client,
    artifacts: &str,
    folder: &str,
    name: &str,
    content: &str,
) -> (u16, Value) {
    let form = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(content.as_bytes().to_vec()).file_name(name.to_owned()),
        )
        .text("relative_path", folder.to_owned());
    let answer = http.post(artifacts).multipart(form).send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_never_go_through_a_link_in_the_task_directory() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f.txt"), "SECRET").unwrap();
    let graph =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    let server = Server::start(&graph, dir.path(), &[], None);
    let http = reqwest::Client::new();
    let task = json_of(
        http.post(server.url("/ap/v1/agent/tasks"))
            .json(&json!({"input": "Ada"}))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    let task_id = task["task_id"].as_str().unwrap();
    let task_dir = dir.path().join("tasks").join(task_id);
    let artifacts = server.url(&format!("/ap/v1/agent/tasks/{task_id}/artifacts"));
    // The task's folder is made by the first upload (or file a run writes), not before.
    assert!(!task_dir.exists(), "an empty task has no folder");
    let (status, answer) = upload(&http, &artifacts, "", "first.txt", "x").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        std::fs::read_to_string(task_dir.join("first.txt")).unwrap(),
        "x"
    );

    // A folder that is a link out of the task directory: no upload lands outside.
    std::os::unix::fs::symlink(outside.path(), task_dir.join("link")).unwrap();
    let (status, answer) = upload(&http, &artifacts, "link", "new.txt", "x").await;
    assert_eq!(status, 400, "{answer}");
    assert!(error_of(&answer).contains("outside"), "{answer}");
    assert!(!outside.path().join("new.txt").exists());
    // A file swapped for a link after its upload is not downloaded.
    let (status, uploaded) = upload(&http, &artifacts, "", "g.txt", "mine").await;
    assert_eq!(status, 200, "{uploaded}");
    std::fs::remove_file(task_dir.join("g.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("f.txt"), task_dir.join("g.txt")).unwrap();
    let download = http
        .get(format!(
            "{artifacts}/{}",
            uploaded["artifact_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(download.status().as_u16(), 404);
    assert!(!download.text().await.unwrap().contains("SECRET"));

    // A folder flipping between itself and a link while artifacts go up and down.
    let (status, uploaded) = upload(&http, &artifacts, "sub", "f.txt", "inside").await;
    assert_eq!(status, 200, "{uploaded}");
    let download = format!("{artifacts}/{}", uploaded["artifact_id"].as_str().unwrap());
    let flipper = agentloom_blocks::testing::Flipper::start(&task_dir.join("sub"), outside.path());
    let (mut downloads, mut uploads) = (0, 0);
    for i in 0..300 {
        let answer = http.get(&download).send().await.unwrap();
        if answer.status().is_success() {
            assert_eq!(
                answer.text().await.unwrap(),
                "inside",
                "download {i} escaped"
            );
            downloads += 1;
        }
        if upload(&http, &artifacts, "sub", "w.txt", "x").await.0 == 200 {
            uploads += 1;
        }
        assert!(!outside.path().join("w.txt").exists(), "upload {i} escaped");
    }
    drop(flipper);
    assert!(
        downloads > 0 && uploads > 0,
        "downloads {downloads}, uploads {uploads}"
    );
}
