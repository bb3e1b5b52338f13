//! run_code's output through the real binary: a scripted model (fakellm) has the program
//! print 2 GiB; agentloom keeps the first MiB, says how much more was cut, stops the program,
//! and stays under 100 MB resident the whole time (its peak, from the kernel's account of
//! the processes this test waited for).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::process::{Command, Stdio};

use agentloom_tests::FakeLlm;

const TWO_GIB: &str = "import sys\nchunk = b'x' * (1 << 20)\nfor _ in range(2048):\n    sys.stdout.buffer.write(chunk)\n";

/// The largest peak resident size, in kB, of any process this one has waited for (and of
/// their descendants that were waited for).
#[allow(
    unsafe_code,
    reason = "getrusage, which the standard library does not offer"
)]
fn children_peak_kib() -> i64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &raw mut usage) };
    assert_eq!(rc, 0);
    usage.ru_maxrss
}

#[test]
fn two_gib_of_output_leave_agentloom_under_100_mb_and_are_counted() {
    let rules = format!(
        "rules:\n  - name: flood\n    when: {{messages_contain: \"TASK-FLOOD\", turn: 1}}\n    respond:\n      tool_calls: [{{name: run_code, arguments: {{code: {}}}}}]\n  - name: done\n    when: {{messages_contain: \"TASK-FLOOD\", turn: 2}}\n    respond:\n      tool_calls: [{{name: finish, arguments: {{answer: \"flooded\"}}}}]\n",
        serde_json::to_string(TWO_GIB).unwrap()
    );
    let Some(fake) = FakeLlm::start_with_rules(&rules) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let before = children_peak_kib();
    let out = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .env("AGENTLOOM_SECRET_OPENAI", "sk-local-test")
        .env(
            "AGENTLOOM_SECRET_OPENAI_HOSTS",
            format!("127.0.0.1:{}", fake.port()),
        )
        .args(["agent", "TASK-FLOOD", "--model", "test-model", "--base-url"])
        .arg(format!("{}/v1", fake.base()))
        .arg("--workspace")
        .arg(dir.path())
        .arg("--db")
        .arg(dir.path().join("runs.sqlite3"))
        .args(["--yes", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let peak = children_peak_kib();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let observation = result["steps"][0]["observation"].as_str().unwrap();
    eprintln!(
        "peak resident {peak} kB (before: {before} kB)\n{}",
        &observation[observation.len().saturating_sub(400)..]
    );
    assert!(
        observation.contains("stopped by the sandbox: it wrote more than 64 MiB of output"),
        "{observation}"
    );
    assert!(observation.contains(" bytes more cut]"), "{observation}");
    assert!(
        observation.contains("limits: memory 512 MiB"),
        "{observation}"
    );
    assert!(peak < 100 * 1024, "agentloom reached {peak} kB resident");
}
