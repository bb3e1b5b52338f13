//! The debugger from the command line: real `agentloom` processes, real SQLite run logs, a
//! real `control.delay` as the slow upstream node. A breakpoint pauses a run in the log
//! (exit 3), `agentloom continue` goes on from there in another process, with edited values
//! that reach the next node; Step pauses before the next node; a process killed while
//! paused continues at the breakpoint; a fork reuses its parent's slow upstream node, is
//! recorded with its parent and edit and listed under it; a fork across a graph change
//! reruns or refuses the changed part; bad `--set` items are refused with clear messages.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// n (a number) → slow (a delay of `delay_ms`) → t ("{{ value }} apples") → out.
fn apples(delay_ms: u64, template: &str, n: i64) -> String {
    format!(
        r#"{{"format":"agentloom.graph","version":1,"name":"apples",
 "nodes":[
  {{"id":"n","block":"data.constant","position":[0,0],"config":{{"value":{n},"type":"number"}}}},
  {{"id":"slow","block":"control.delay","position":[200,0],"config":{{"ms":{delay_ms}}}}},
  {{"id":"t","block":"text.template","position":[400,0],"config":{{"template":"{template}"}}}},
  {{"id":"out","block":"graph.output","position":[600,0],"config":{{"name":"result"}}}}],
 "edges":[{{"from":["n","value"],"to":["slow","value"]}},
          {{"from":["slow","value"],"to":["t","value"]}},
          {{"from":["t","text"],"to":["out","value"]}}]}}"#
    )
}

struct Setup {
    _dir: tempfile::TempDir,
    graph: PathBuf,
    db: PathBuf,
}

fn setup(graph: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("apples.json");
    std::fs::write(&path, graph).unwrap();
    let db = dir.path().join("runs.sqlite3");
    Setup {
        graph: path,
        db,
        _dir: dir,
    }
}

/// `agentloom ARGS --db DB` in the graph's folder, with stdin closed (no terminal: a
/// breakpoint pauses the run).
fn agentloom(setup: &Setup, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .current_dir(setup.graph.parent().unwrap())
        .args(args)
        .arg("--db")
        .arg(&setup.db)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(output)
        )
    })
}

fn graph_arg(setup: &Setup) -> &str {
    setup.graph.to_str().unwrap()
}

/// The recorded run `run_id` as `show --json` prints it.
fn show(setup: &Setup, run_id: &str) -> Value {
    let output = agentloom(setup, &["show", run_id, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    json_of(&output)
}

fn node<'a>(run: &'a Value, id: &str) -> &'a Value {
    run["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == id)
        .unwrap_or_else(|| panic!("no node {id} in {run}"))
}

/// Runs the graph with `--break` items until it pauses (exit 3); returns the run id.
fn run_until_paused(setup: &Setup, breaks: &[&str]) -> String {
    let mut args = vec!["run", graph_arg(setup), "--json"];
    for b in breaks {
        args.extend(["--break", b]);
    }
    let output = agentloom(setup, &args);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report = json_of(&output);
    assert_eq!(report["status"], "waiting");
    report["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn a_breakpoint_pauses_the_run_and_an_edited_input_reaches_the_node() {
    let setup = setup(&apples(10, "{{ value }} apples", 2));
    let run_id = run_until_paused(&setup, &["t"]);

    // Paused before `t`, with the input it would get; `out` never ran.
    let run = show(&setup, &run_id);
    assert_eq!(run["status"], "waiting");
    assert_eq!(node(&run, "t")["status"], "at_breakpoint");
    assert_eq!(node(&run, "t")["inputs"]["value"], 2);
    assert_eq!(node(&run, "out")["status"], "pending");
    let plain = agentloom(&setup, &["show", &run_id]);
    assert!(String::from_utf8_lossy(&plain.stdout).contains("at_breakpoint"));

    // Another process goes on with an edited input: the node gets it.
    let output = agentloom(
        &setup,
        &["continue", &run_id, "--set", "t.value=7", "--json"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let report = json_of(&output);
    assert_eq!(report["run_id"], run_id.as_str());
    assert_eq!(report["outputs"]["result"], "7 apples");
    let run = show(&setup, &run_id);
    assert_eq!(run["status"], "completed");
    assert_eq!(node(&run, "t")["inputs"]["value"], 7);
    // Continuing again changes nothing.
    let again = agentloom(&setup, &["continue", &run_id]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("not paused at a breakpoint"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn a_breakpoint_after_a_node_edits_its_outputs_without_running_it_again() {
    let setup = setup(&apples(1500, "{{ value }} apples", 2));
    let run_id = run_until_paused(&setup, &["slow:after"]);
    let run = show(&setup, &run_id);
    assert_eq!(node(&run, "slow")["status"], "at_breakpoint");
    assert_eq!(node(&run, "slow")["outputs"]["value"], 2);
    assert_eq!(node(&run, "t")["status"], "pending");

    let started = Instant::now();
    let output = agentloom(
        &setup,
        &["continue", &run_id, "--set", "slow.value=9", "--json"],
    );
    let took = started.elapsed();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(json_of(&output)["outputs"]["result"], "9 apples");
    // The 1.5 s delay did not run again.
    assert!(
        took < Duration::from_millis(1400),
        "continuing took {took:?}"
    );
}

#[test]
fn step_pauses_before_the_next_node() {
    let setup = setup(&apples(10, "{{ value }} apples", 2));
    let run_id = run_until_paused(&setup, &["slow"]);
    assert_eq!(
        node(&show(&setup, &run_id), "slow")["status"],
        "at_breakpoint"
    );

    let output = agentloom(&setup, &["continue", &run_id, "--step", "--json"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let run = show(&setup, &run_id);
    assert_eq!(node(&run, "slow")["status"], "done");
    assert_eq!(node(&run, "t")["status"], "at_breakpoint");
    assert_eq!(node(&run, "out")["status"], "pending");

    // Step again: `out` is next.
    let output = agentloom(&setup, &["continue", &run_id, "--step"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("agentloom continue"),
        "{}",
        stderr(&output)
    );
    let run = show(&setup, &run_id);
    assert_eq!(node(&run, "t")["status"], "done");
    assert_eq!(node(&run, "out")["status"], "at_breakpoint");

    let output = agentloom(&setup, &["continue", &run_id, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(json_of(&output)["outputs"]["result"], "2 apples");
}

#[test]
fn stop_at_a_breakpoint_cancels_the_run() {
    let setup = setup(&apples(10, "{{ value }} apples", 2));
    let run_id = run_until_paused(&setup, &["t"]);
    let output = agentloom(&setup, &["continue", &run_id, "--stop", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let run = show(&setup, &run_id);
    assert_eq!(run["status"], "cancelled");
    assert_ne!(node(&run, "out")["status"], "done");
}

/// A graph whose second branch keeps the run going for `busy_ms` after `t` paused.
fn apples_with_a_busy_branch(busy_ms: u64) -> String {
    let base = apples(10, "{{ value }} apples", 2);
    let mut doc: Value = serde_json::from_str(&base).unwrap();
    doc["nodes"].as_array_mut().unwrap().push(serde_json::json!(
        {"id":"busy","block":"control.delay","position":[200,200],"config":{"ms":busy_ms}}));
    doc["edges"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"from":["n","value"],"to":["busy","value"]}));
    doc.to_string()
}

#[test]
fn a_process_killed_while_paused_continues_at_the_breakpoint() {
    let setup = setup(&apples_with_a_busy_branch(4_000));
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .current_dir(setup.graph.parent().unwrap())
        .args(["run", graph_arg(&setup), "--break", "t", "--db"])
        .arg(&setup.db)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the pause is in the log, then kill the process (the busy branch still runs).
    let deadline = Instant::now() + Duration::from_secs(30);
    let run_id = loop {
        assert!(Instant::now() < deadline, "the run never paused");
        std::thread::sleep(Duration::from_millis(100));
        if !setup.db.exists() {
            continue;
        }
        let runs = agentloom(&setup, &["runs", "--json"]);
        let Ok(runs) = serde_json::from_slice::<Value>(&runs.stdout) else {
            continue;
        };
        let Some(run) = runs.as_array().and_then(|r| r.first()) else {
            continue;
        };
        if run["status"] == "waiting" {
            break run["id"].as_str().unwrap().to_owned();
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();

    let run = show(&setup, &run_id);
    assert_eq!(run["status"], "waiting", "{run}");
    let output = agentloom(
        &setup,
        &["continue", &run_id, "--set", "t.value=3", "--json"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(json_of(&output)["outputs"]["result"], "3 apples");
    let run = show(&setup, &run_id);
    assert_eq!(node(&run, "t")["inputs"]["value"], 3);
    assert_eq!(node(&run, "t")["status"], "done");
}

#[test]
fn a_fork_reuses_the_slow_upstream_and_is_listed_under_its_parent() {
    let setup = setup(&apples(1500, "{{ value }} apples", 2));
    let parent = agentloom(&setup, &["run", graph_arg(&setup), "--json"]);
    assert!(parent.status.success(), "{}", stderr(&parent));
    let parent_id = json_of(&parent)["run_id"].as_str().unwrap().to_owned();

    let started = Instant::now();
    let fork = agentloom(
        &setup,
        &[
            "run",
            graph_arg(&setup),
            "--fork",
            &parent_id[..12],
            "--set",
            "slow.value=5",
            "--json",
        ],
    );
    let took = started.elapsed();
    assert!(fork.status.success(), "{}", stderr(&fork));
    let report = json_of(&fork);
    assert_eq!(report["outputs"]["result"], "5 apples");
    let fork_id = report["run_id"].as_str().unwrap().to_owned();
    assert_ne!(fork_id, parent_id);
    assert!(took < Duration::from_millis(1400), "the fork took {took:?}");

    // Reused, not run again: no attempts, not billed.
    let run = show(&setup, &fork_id);
    assert_eq!(node(&run, "slow")["attempts"], 0);
    assert_eq!(node(&run, "n")["attempts"], 0);
    assert_eq!(node(&run, "t")["attempts"], 1);
    assert_eq!(node(&run, "t")["inputs"]["value"], 5);

    // The record names the parent and the edit; the parent names its fork.
    let shown = agentloom(&setup, &["show", &fork_id]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains(&format!("forked from {parent_id}")), "{text}");
    assert!(text.contains("edited slow.value = 5"), "{text}");
    let shown = agentloom(&setup, &["show", &parent_id]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains(&format!("fork {fork_id}")),
        "{}",
        String::from_utf8_lossy(&shown.stdout)
    );
    // `runs` lists the fork right under its parent (a later unrelated run first).
    let other = agentloom(&setup, &["run", graph_arg(&setup), "--json"]);
    assert!(other.status.success());
    let runs = agentloom(&setup, &["runs"]);
    let listed = String::from_utf8_lossy(&runs.stdout).into_owned();
    let lines: Vec<&str> = listed.lines().collect();
    let at_parent = lines
        .iter()
        .position(|l| l.starts_with(&parent_id))
        .unwrap();
    assert!(
        lines[at_parent + 1].starts_with(&format!("  └ {fork_id}")),
        "{listed}"
    );
}

#[test]
fn a_fork_across_a_graph_change_reruns_the_changed_node_and_refuses_to_edit_above_it() {
    let setup = setup(&apples(1500, "{{ value }} apples", 2));
    let parent = agentloom(&setup, &["run", graph_arg(&setup), "--json"]);
    let parent_id = json_of(&parent)["run_id"].as_str().unwrap().to_owned();

    // `t` reconfigured: it runs again (with its new template), the slow upstream is reused.
    std::fs::write(&setup.graph, apples(1500, "{{ value }} pears", 2)).unwrap();
    let fork = agentloom(
        &setup,
        &[
            "run",
            graph_arg(&setup),
            "--fork",
            &parent_id,
            "--set",
            "slow.value=5",
            "--json",
        ],
    );
    assert!(fork.status.success(), "{}", stderr(&fork));
    assert!(
        stderr(&fork).contains("reconfigured `t`"),
        "{}",
        stderr(&fork)
    );
    let report = json_of(&fork);
    assert_eq!(report["outputs"]["result"], "5 pears");
    let run = show(&setup, report["run_id"].as_str().unwrap());
    assert_eq!(node(&run, "slow")["attempts"], 0);

    // `n` reconfigured: `slow` depends on it and runs again, so its edit is refused; so is
    // an edit of `n` itself.
    std::fs::write(&setup.graph, apples(1500, "{{ value }} apples", 3)).unwrap();
    let refused = agentloom(
        &setup,
        &[
            "run",
            graph_arg(&setup),
            "--fork",
            &parent_id,
            "--set",
            "slow.value=5",
        ],
    );
    assert_eq!(refused.status.code(), Some(2));
    let message = stderr(&refused);
    assert!(
        message.contains("`slow` depends on a node that changed"),
        "{message}"
    );
    assert!(message.contains("reconfigured `n`"), "{message}");
    let edited_n = agentloom(
        &setup,
        &[
            "run",
            graph_arg(&setup),
            "--fork",
            &parent_id,
            "--set",
            "n.value=4",
        ],
    );
    assert_eq!(edited_n.status.code(), Some(2));
    assert!(
        stderr(&edited_n).contains("`n` changed since run"),
        "{}",
        stderr(&edited_n)
    );
}

#[test]
fn bad_set_items_are_refused_with_what_and_where() {
    let setup = setup(&apples(10, "{{ value }} apples", 2));
    let parent = agentloom(&setup, &["run", graph_arg(&setup), "--json"]);
    let parent_id = json_of(&parent)["run_id"].as_str().unwrap().to_owned();
    let fork = |set: &str| {
        let output = agentloom(
            &setup,
            &["run", graph_arg(&setup), "--fork", &parent_id, "--set", set],
        );
        assert_eq!(output.status.code(), Some(2), "{set}: {}", stderr(&output));
        stderr(&output)
    };
    assert!(fork("nope.value=1").contains("the graph has no node `nope`"));
    assert!(fork("slow.value=oops").contains("--set slow.value: the value is not JSON"));
    let wrong = fork("n.value=\"abc\"");
    assert!(wrong.contains("`n.value` takes number"), "{wrong}");
    assert!(fork("n.colour=1").contains("`n` has no port `colour`"));
    assert!(fork("novalue").contains("expected NODE.PORT=JSON"));
    let unknown = agentloom(
        &setup,
        &[
            "run",
            graph_arg(&setup),
            "--fork",
            "ffffffff",
            "--set",
            "n.value=1",
        ],
    );
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("--fork ffffffff: no such run"));

    // At a breakpoint: a port the paused node lacks, and a breakpoint on no node.
    let run_id = run_until_paused(&setup, &["t"]);
    let output = agentloom(&setup, &["continue", &run_id, "--set", "t.colour=1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("`t` has no port `colour`"),
        "{}",
        stderr(&output)
    );
    let output = agentloom(&setup, &["continue", &run_id, "--set", "n.value=1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("paused at `t`"),
        "{}",
        stderr(&output)
    );
    let output = agentloom(&setup, &["run", graph_arg(&setup), "--break", "ghost"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("the graph has no node `ghost`"));
    // The run is still paused and goes on.
    let output = agentloom(&setup, &["continue", &run_id, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn at_a_terminal_step_and_an_edits_file_change_what_the_next_node_gets() {
    let setup = setup(&apples(10, "{{ value }} apples", 2));
    let folder = setup.graph.parent().unwrap();
    let edits = folder.join("edits.json");
    std::fs::write(&edits, r#"{"value": 7}"#).unwrap();
    let bad = folder.join("bad.json");
    std::fs::write(&bad, r#"{"colour": 7}"#).unwrap();
    // At `slow`: step. At `t` (the step): a file with a port `t` lacks (refused, asked
    // again), then the edits file, then Enter.
    let typed = format!("s\n{}\n{}\n\n", bad.display(), edits.display());
    let (code, shown) = agentloom_tests::at_a_terminal(
        Path::new(env!("CARGO_BIN_EXE_agentloom")),
        &[
            "run".as_ref(),
            setup.graph.as_os_str(),
            "--break".as_ref(),
            "slow".as_ref(),
            "--db".as_ref(),
            setup.db.as_os_str(),
        ],
        &[],
        &typed,
    );
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("⏸ slow: before it runs"), "{shown}");
    assert!(shown.contains("⏸ t (step): before it runs"), "{shown}");
    assert!(shown.contains("`t` has no port `colour`"), "{shown}");
    assert!(shown.contains("result: 7 apples"), "{shown}");
}

#[test]
fn a_paused_run_whose_folder_is_gone_says_so_and_continues_elsewhere() {
    let setup = setup(&apples(10, "{{ value }} apples", 2));
    let folder = setup.graph.parent().unwrap().join("work");
    std::fs::create_dir(&folder).unwrap();
    let output = agentloom(
        &setup,
        &[
            "run",
            graph_arg(&setup),
            "--json",
            "--break",
            "t",
            "--workspace",
            folder.to_str().unwrap(),
        ],
    );
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let run_id = json_of(&output)["run_id"].as_str().unwrap().to_owned();
    std::fs::remove_dir(&folder).unwrap();

    let output = agentloom(&setup, &["continue", &run_id, "--json"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "which is no longer a directory; pass --workspace DIR to continue it elsewhere"
        ),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        show(&setup, &run_id)["status"],
        "waiting",
        "nothing decided"
    );

    let elsewhere = setup.graph.parent().unwrap().to_str().unwrap().to_owned();
    let output = agentloom(
        &setup,
        &["continue", &run_id, "--json", "--workspace", &elsewhere],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(show(&setup, &run_id)["status"], "completed");
}
