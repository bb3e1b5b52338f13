//! `agentloom agent` end to end: the real binary against the `fakellm` peer, scripted by
//! tests/fixtures/agent/fakellm.yaml (set AGENTLOOM_SKIP_PEERS=1 to skip without it).

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::process::{Command, Output, Stdio};

use agentloom_tests::FakeLlm;

fn agent(fake: &FakeLlm, goal: &str, dir: &std::path::Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        // The peer takes any key; the environment keeps the keychain out of it.
        .env("AGENTLOOM_SECRET_OPENAI", "sk-local-test")
        .env(
            "AGENTLOOM_SECRET_OPENAI_HOSTS",
            format!("127.0.0.1:{}", fake.port()),
        )
        .args(["agent", goal, "--model", "test-model", "--base-url"])
        .arg(format!("{}/v1", fake.base()))
        .arg("--workspace")
        .arg(dir)
        .arg("--db")
        .arg(dir.join("runs.sqlite3"))
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn an_agent_runs_from_the_command_line_and_prints_its_steps() {
    let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = agent(
        &fake,
        "TASK-MULTI: compute 6 times 7",
        dir.path(),
        &["--yes", "--json"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "completed");
    assert_eq!(
        result["answer"],
        "The answer is 42, saved in out/answer.txt."
    );
    let steps = result["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0]["tool"], "run_code");
    assert!(result["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(result["run_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out/answer.txt")).unwrap(),
        "42"
    );

    // Human output: each step on stderr, the answer on stdout.
    std::fs::write(dir.path().join("present.txt"), "here").unwrap();
    let out = agent(
        &fake,
        "TASK-RECOVER: read missing.txt",
        dir.path(),
        &["--yes"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("step 1 · read_file {\"path\":\"missing.txt\"} → error: cannot read"),
        "{stderr}"
    );
    assert!(stderr.contains("finished after 3 steps"), "{stderr}");
}

#[test]
fn without_yes_and_without_a_terminal_the_agent_waits_and_resumes_on_approve() {
    let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = agent(
        &fake,
        "TASK-MULTI: compute 6 times 7",
        dir.path(),
        &["--json"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "waiting");
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    assert!(
        stderr.contains(&format!("waiting for approval: agentloom approve {run_id}")),
        "{stderr}"
    );
    assert!(!dir.path().join("out/answer.txt").exists());

    // run_code, then write_file: each side effect waits for its own approval.
    let approve = || {
        Command::new(env!("CARGO_BIN_EXE_agentloom"))
            .env_remove("AGENTLOOM_LOG")
            .env("AGENTLOOM_SECRET_OPENAI", "sk-local-test")
            .env(
                "AGENTLOOM_SECRET_OPENAI_HOSTS",
                format!("127.0.0.1:{}", fake.port()),
            )
            .args(["approve", &run_id, "--db"])
            .arg(dir.path().join("runs.sqlite3"))
            .arg("--workspace")
            .arg(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let first = approve();
    let first_err = String::from_utf8_lossy(&first.stderr);
    assert_eq!(first.status.code(), Some(3), "{first_err}");
    assert!(!dir.path().join("out/answer.txt").exists());
    let second = approve();
    let second_err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{second_err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out/answer.txt")).unwrap(),
        "42"
    );
}

/// At a terminal the agent asks before each side effect, as `agentloom run` does: here the
/// code runs as proposed and the file is written with arguments edited by the person.
#[test]
fn at_a_terminal_each_side_effect_is_asked_and_arguments_can_be_edited() {
    let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let base_url = format!("{}/v1", fake.base());
    let model_host = format!("127.0.0.1:{}", fake.port());
    let (code, shown) = agentloom_tests::at_a_terminal(
        std::path::Path::new(env!("CARGO_BIN_EXE_agentloom")),
        &[
            "agent".as_ref(),
            "TASK-MULTI: compute 6 times 7".as_ref(),
            "--model".as_ref(),
            "test-model".as_ref(),
            "--base-url".as_ref(),
            base_url.as_ref(),
            "--workspace".as_ref(),
            dir.path().as_os_str(),
            "--db".as_ref(),
            dir.path().join("runs.sqlite3").as_os_str(),
        ],
        &[
            ("AGENTLOOM_SECRET_OPENAI", "sk-local-test"),
            ("AGENTLOOM_SECRET_OPENAI_HOSTS", &model_host),
        ],
        "y\ne\n{\"path\": \"out/answer.txt\", \"content\": \"43\"}\ny\n",
    );
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("wants to: run_code"), "{shown}");
    assert!(shown.contains("wants to: write_file"), "{shown}");
    assert!(shown.contains("[e]dit arguments"), "{shown}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out/answer.txt")).unwrap(),
        "43"
    );
}
