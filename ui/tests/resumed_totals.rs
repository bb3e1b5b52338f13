//! A run resumed after an approval is the same run, through the real doors: an LLM call
//! (fakellm) and a 1.5 s delay before a write that asks first (safe mode). After
//! `agentloom approve`, and after Approve in the app (live, or on a waiting run opened from
//! the History, whether the app or the command line left it waiting), the run reports the
//! tokens and cost of the call made before the pause and a duration of at least 1.5 s: in
//! the approval's report, in `agentloom show` and `agentloom runs`, on the app's screen and
//! in the run log. The model is called once in all.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentloom_core::Usage;
use agentloom_engine::{NodeStatus, RunDetail, RunStatus, RunStore};
use agentloom_tests::FakeLlm;
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable as _;
use serde_json::{Value, json};
use support::{AppHarness, graph, harness, paths, wait_until};

/// The delay between the LLM call and the write that asks.
const DELAY_MS: u64 = 1500;

/// story (llm.chat against fakellm, priced) → wait (1.5 s) → save (file.write, asked in
/// safe mode) → out.
fn graph_json(fake: &FakeLlm) -> Value {
    json!({
        "format": "agentloom.graph", "version": 1, "name": "resumed totals",
        "settings": {"safe_mode": true},
        "nodes": [
            {"id": "story", "block": "llm.chat", "position": [0, 0],
             "config": {"base_url": format!("{}/v1", fake.base()), "model": "test-model",
                        "prompt": "Tell a story", "stream": false,
                        // $1 per input token, $2 per output token: a cost that shows.
                        "price_in": 1_000_000.0, "price_out": 2_000_000.0}},
            {"id": "wait", "block": "control.delay", "position": [300, 0],
             "config": {"ms": DELAY_MS}},
            {"id": "save", "block": "file.write", "position": [600, 0],
             "config": {"path": "story.txt"}},
            {"id": "out", "block": "graph.output", "position": [900, 0],
             "config": {"name": "saved"}}
        ],
        "edges": [
            {"from": ["story", "text"], "to": ["wait", "value"]},
            {"from": ["wait", "value"], "to": ["save", "content"]},
            {"from": ["save", "path"], "to": ["out", "value"]}
        ]
    })
}

/// How many requests fakellm answered in all (its stats, read with a plain socket).
fn llm_requests(fake: &FakeLlm) -> u64 {
    let mut stream = TcpStream::connect(("127.0.0.1", fake.port())).unwrap();
    stream
        .write_all(b"GET /_fakellm/stats HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let stats: Value = serde_json::from_str(body).unwrap();
    stats["total_requests"].as_u64().unwrap()
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn millis(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_millis()).unwrap()
}

/// Usage as the CLI's JSON writes it.
fn usage_json(usage: &Usage) -> Value {
    serde_json::to_value(usage).unwrap()
}

/// A run before the pause: it spent tokens and cost, and took the delay.
fn assert_spent_before_the_pause(usage: &Usage, duration_ms: u64) {
    assert!(
        usage.input_tokens > 0 && usage.output_tokens > 0 && usage.cost_usd > 0.0,
        "{usage:?}"
    );
    assert!(duration_ms >= DELAY_MS, "{duration_ms} ms");
}

/// The run log's record of run `run_id` once it completed after its approval: the usage
/// spent before the pause, a duration between `before_ms` (the first segment's) and
/// `before_ms + resumed_ms` (the pause not counted), `story` done once, before `resumed_at`.
fn assert_recorded_totals(
    db: &Path,
    run_id: &str,
    usage: &Usage,
    before_ms: u64,
    resumed_ms: u64,
    resumed_at: u64,
) -> RunDetail {
    let detail = RunStore::open(db)
        .unwrap()
        .get_run(run_id)
        .unwrap()
        .unwrap();
    let run = &detail.run;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(run.usage, *usage, "the run log's usage");
    let duration = run.duration_ms.unwrap();
    assert!(
        (before_ms..=before_ms + resumed_ms).contains(&duration),
        "the run log's duration {duration} ms, {before_ms} ms before the pause, {resumed_ms} ms resumed"
    );
    let story = detail.node("story").unwrap();
    assert_eq!(story.status, NodeStatus::Done);
    assert_eq!(story.attempts, 1);
    assert_eq!(story.usage, *usage, "the LLM node's usage");
    assert!(
        story.finished_at_ms.unwrap() < resumed_at,
        "the LLM node finished again after the approval: {story:?}"
    );
    let save = detail.node("save").unwrap();
    assert_eq!(save.status, NodeStatus::Done);
    assert!(save.finished_at_ms.unwrap() >= resumed_at, "{save:?}");
    detail
}

/// The real `agentloom`, its trust store and data in `home`, stdin closed (no terminal:
/// approvals pause).
fn agentloom(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn node<'a>(nodes: &'a Value, key: &str, id: &str) -> &'a Value {
    nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n[key] == id)
        .unwrap_or_else(|| panic!("no node `{id}` in {nodes}"))
}

/// A graph file of the test in `dir`.
fn graph_file(dir: &Path, fake: &FakeLlm) -> PathBuf {
    let file = dir.join("totals.agentloom.json");
    std::fs::write(
        &file,
        serde_json::to_string_pretty(&graph_json(fake)).unwrap(),
    )
    .unwrap();
    file
}

/// `agentloom run FILE --trust --json` without a terminal, recorded in `db`: it pauses at
/// the write (exit 3). Returns its report.
fn run_until_waiting(home: &Path, file: &Path, db: &Path, workspace: &Path) -> Value {
    let paused = agentloom(
        home,
        &[
            "run",
            file.to_str().unwrap(),
            "--trust",
            "--json",
            "--db",
            db.to_str().unwrap(),
            "--workspace",
            workspace.to_str().unwrap(),
        ],
    );
    assert_eq!(
        paused.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&paused.stderr)
    );
    let report = stdout_json(&paused);
    assert_eq!(report["status"], "waiting", "{report}");
    // The node that asks reads as `show` reads it: waiting for its decision.
    let save = report["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|node| node["id"] == "save"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(save["status"], "awaiting_approval", "{report}");
    report
}

#[test]
fn approve_show_and_runs_report_the_tokens_and_time_spent_before_the_pause() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&workspace).unwrap();
    let db = dir.path().join("runs.sqlite3");
    let db_arg = db.to_str().unwrap();
    let file = graph_file(dir.path(), &fake);

    let paused = run_until_waiting(&home, &file, &db, &workspace);
    let run_id = paused["run_id"].as_str().unwrap().to_owned();
    let usage: Usage = serde_json::from_value(paused["usage"].clone()).unwrap();
    let before_ms = paused["duration_ms"].as_u64().unwrap();
    assert_spent_before_the_pause(&usage, before_ms);
    assert_eq!(
        node(&paused["nodes"], "id", "story")["usage"],
        paused["usage"]
    );
    assert_eq!(llm_requests(&fake), 1);
    assert!(!workspace.join("story.txt").exists());

    let resumed_at = now_ms();
    let clock = Instant::now();
    let approved = agentloom(
        home.as_path(),
        &["approve", &run_id, "--json", "--db", db_arg],
    );
    let resumed_ms = millis(clock.elapsed());
    support::assert_exit_ok(&approved);
    let report = stdout_json(&approved);
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["run_id"], run_id.as_str());
    assert!(workspace.join("story.txt").exists());
    // The same run: the tokens and cost of the call before the pause, its time too.
    assert_eq!(report["usage"], usage_json(&usage), "{report}");
    let duration = report["duration_ms"].as_u64().unwrap();
    assert!(
        duration >= DELAY_MS && (before_ms..=before_ms + resumed_ms).contains(&duration),
        "approve reports {duration} ms; {before_ms} ms before the pause, {resumed_ms} ms resumed"
    );
    let story = node(&report["nodes"], "id", "story");
    assert_eq!(story["status"], "done", "{story}");
    assert_eq!(story["attempts"], 1, "{story}");
    assert_eq!(story["usage"], usage_json(&usage), "{story}");
    assert_eq!(llm_requests(&fake), 1, "the LLM was called again");

    // `show` and `runs` read the same totals back from the run log.
    let shown = stdout_json(&agentloom(
        &home,
        &["show", &run_id, "--json", "--db", db_arg],
    ));
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["usage"], usage_json(&usage), "{shown}");
    assert_eq!(shown["duration_ms"], duration, "{shown}");
    let story = node(&shown["nodes"], "node_id", "story");
    assert_eq!(story["status"], "done", "{story}");
    assert_eq!(story["attempts"], 1, "{story}");
    assert_eq!(story["usage"], usage_json(&usage), "{story}");
    let listed = stdout_json(&agentloom(&home, &["runs", "--json", "--db", db_arg]));
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["id"], run_id.as_str());
    assert_eq!(listed[0]["usage"], usage_json(&usage), "{listed}");
    assert_eq!(listed[0]["duration_ms"], duration, "{listed}");
    // Said in words too.
    let said = agentloom(&home, &["show", &run_id, "--db", db_arg]);
    let said = String::from_utf8_lossy(&said.stdout);
    assert!(
        said.contains(&format!("duration {duration} ms"))
            && said.contains(&format!(
                "usage {} in / {} out tokens",
                usage.input_tokens, usage.output_tokens
            )),
        "{said}"
    );

    assert_recorded_totals(&db, &run_id, &usage, before_ms, resumed_ms, resumed_at);
}

fn press(h: &mut AppHarness, label: &str) {
    h.get_by_role_and_label(Role::Button, label).click();
    h.run_steps(2);
}

/// The one run in the run log at `db`.
fn only_run(db: &Path) -> agentloom_engine::RunRow {
    let mut runs = RunStore::open(db).unwrap().list_runs(10).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs.remove(0)
}

/// Presses Approve on the app's approval and waits for the run to complete; returns when
/// it was pressed (unix ms) and how long the run took from then on.
fn approve_and_finish(h: &mut AppHarness) -> (u64, u64) {
    let resumed_at = now_ms();
    let clock = Instant::now();
    press(h, "Approve");
    wait_until(h, "the run to end", |h| {
        h.state()
            .run
            .status
            .is_some_and(|s| s != RunStatus::Waiting)
            && !h.state().run.is_running()
    });
    let resumed_ms = millis(clock.elapsed());
    let run = &h.state().run;
    assert_eq!(run.status, Some(RunStatus::Completed), "{:?}", run.error);
    (resumed_at, resumed_ms)
}

/// How many labels on screen show a text that `matches`.
fn labels(h: &AppHarness, matches: impl Fn(&str) -> bool) -> usize {
    h.query_all_by(|node| {
        node.role() == Role::Label
            && (node.value().is_some_and(|v| matches(&v))
                || node.label().is_some_and(|l| matches(&l)))
    })
    .count()
}

/// What the app shows of its completed run: the usage spent before the pause and at least
/// `before_ms`, in its run state and on screen.
fn assert_app_shows(h: &mut AppHarness, run_id: &str, usage: &Usage, before_ms: u64) -> u64 {
    let run = &h.state().run;
    assert_eq!(run.run_id.as_deref(), Some(run_id));
    assert_eq!(run.usage, *usage, "the app's run usage");
    let duration = run.duration_ms.unwrap();
    assert!(
        duration >= DELAY_MS && duration >= before_ms,
        "the app shows {duration} ms, {before_ms} ms before the pause"
    );
    let story = run.node("story").unwrap();
    assert_eq!(story.status, NodeStatus::Done);
    assert_eq!(story.attempts, 1);
    assert_eq!(story.usage, *usage);
    assert!(!run.reused.contains("story"), "{:?}", run.reused);
    h.run_steps(2);
    // The run panel's head: `3 in / 29 out tokens, $61.00` and `1517 ms`, each a label.
    let tokens = format!(
        "{} in / {} out tokens, ",
        usage.input_tokens, usage.output_tokens
    );
    assert!(
        labels(h, |text| text.starts_with(&tokens)) >= 1,
        "the run panel does not show `{tokens}…`"
    );
    let time = format!("{duration} ms");
    assert!(
        labels(h, |text| text == time) >= 1,
        "the run panel does not show `{time}`"
    );
    duration
}

/// The app's run of the graph, approved in the app while it asks.
#[test]
fn the_app_shows_the_tokens_and_time_of_a_run_approved_while_it_asks() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let db = paths.run_log.clone().unwrap();
    let mut h = harness(&graph(&graph_json(&fake).to_string()), &paths);
    press(&mut h, "▶ Run");
    wait_until(&mut h, "the approval", |h| {
        !h.state().run.approvals.is_empty()
    });
    h.get_by_label_contains("`save` (Write file: write story.txt) waits for approval");
    let usage = h.state().run.node("story").unwrap().usage;
    let run_id = h.state().run.run_id.clone().unwrap();
    let waited = h.state().run.node("wait").unwrap().duration_ms.unwrap();
    assert_spent_before_the_pause(&usage, waited);

    let (resumed_at, _) = approve_and_finish(&mut h);
    let duration = assert_app_shows(&mut h, &run_id, &usage, waited);
    let detail = RunStore::open(&db)
        .unwrap()
        .get_run(&run_id)
        .unwrap()
        .unwrap();
    assert_eq!(detail.run.usage, usage);
    assert_eq!(detail.run.duration_ms, Some(duration));
    let story = detail.node("story").unwrap();
    assert_eq!((story.status, story.attempts), (NodeStatus::Done, 1));
    assert!(story.finished_at_ms.unwrap() < resumed_at);
    assert_eq!(llm_requests(&fake), 1, "the LLM was called again");
}

/// Opens the waiting run from the History of a new app on `paths`, approves it there and
/// checks the totals: those of the segment before the pause (`usage`, `before_ms`).
fn approve_from_the_history(
    fake: &FakeLlm,
    paths: &agentloom::app::AppPaths,
    run_id: &str,
    usage: &Usage,
    before_ms: u64,
) {
    let db = paths.run_log.clone().unwrap();
    let mut h = harness(&graph(&graph_json(fake).to_string()), paths);
    h.get_by_label_contains("waiting · just now").click();
    h.run_steps(3);
    assert_eq!(h.state().run.run_id.as_deref(), Some(run_id));
    h.get_by_label_contains("`save` (Write file: write story.txt) waits for approval");
    let (resumed_at, resumed_ms) = approve_and_finish(&mut h);
    let duration = assert_app_shows(&mut h, run_id, usage, before_ms);
    assert!(
        duration <= before_ms + resumed_ms,
        "the app shows {duration} ms: {before_ms} ms before the pause, {resumed_ms} ms resumed"
    );
    let detail = assert_recorded_totals(&db, run_id, usage, before_ms, resumed_ms, resumed_at);
    assert_eq!(detail.run.duration_ms, Some(duration));
    assert!(paths.workspace.as_ref().unwrap().join("story.txt").exists());
    assert_eq!(llm_requests(fake), 1, "the LLM was called again");
}

/// The app closed while the approval waited; a new app resumes the run from its History.
#[test]
fn a_run_left_waiting_by_the_app_and_approved_from_the_history_keeps_its_totals() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let db = paths.run_log.clone().unwrap();
    let run_id = {
        let mut h = harness(&graph(&graph_json(&fake).to_string()), &paths);
        press(&mut h, "▶ Run");
        wait_until(&mut h, "the approval", |h| {
            !h.state().run.approvals.is_empty()
        });
        wait_until(&mut h, "the run log to list the run as waiting", |_| {
            only_run(&db).status == RunStatus::Waiting
        });
        let run_id = h.state().run.run_id.clone().unwrap();
        h.state_mut().send(agentloom::app::Command::Quit);
        h.run_steps(2);
        h.state_mut().close();
        run_id
    };
    let waiting = only_run(&db);
    assert_eq!(waiting.id, run_id);
    assert_eq!(waiting.status, RunStatus::Waiting, "{:?}", waiting.error);
    let before_ms = waiting.duration_ms.unwrap();
    assert_spent_before_the_pause(&waiting.usage, before_ms);
    assert_eq!(llm_requests(&fake), 1);

    approve_from_the_history(&fake, &paths, &run_id, &waiting.usage, before_ms);
}

/// `agentloom run` left the run waiting; the app resumes it from its History.
#[test]
fn a_run_left_waiting_by_the_command_line_and_approved_in_the_app_keeps_its_totals() {
    let Some(fake) = FakeLlm::start("llm/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let db = paths.run_log.clone().unwrap();
    let file = graph_file(dir.path(), &fake);
    let paused = run_until_waiting(&home, &file, &db, paths.workspace.as_ref().unwrap());
    let run_id = paused["run_id"].as_str().unwrap().to_owned();
    let usage: Usage = serde_json::from_value(paused["usage"].clone()).unwrap();
    let before_ms = paused["duration_ms"].as_u64().unwrap();
    assert_spent_before_the_pause(&usage, before_ms);
    assert_eq!(llm_requests(&fake), 1);

    approve_from_the_history(&fake, &paths, &run_id, &usage, before_ms);
}
