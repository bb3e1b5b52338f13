//! `agentloom eval` against separate `agentloom run` processes, measured in the same run:
//!
//! 1. N cases (default 1,000) of the hello example (no model) in one `eval`, against N
//!    `agentloom run` processes one after the other; the target is at most a tenth of the time;
//! 2. 200 cases of an `llm.chat` graph against fakellm with `--concurrency 8` (skipped when
//!    fakellm is not on PATH).
//!
//! Each is measured `AGENTLOOM_EVAL_BENCH_ROUNDS` times (default 3) and the median printed,
//! with the machine's load (`uptime`) beside it. Uses the release binary (`AGENTLOOM_BIN`,
//! else target/release/agentloom):
//!
//! ```sh
//! cargo build --release -p agentloom
//! cargo bench -p agentloom --bench eval                       # N = 1000
//! AGENTLOOM_EVAL_BENCH_N=50 cargo bench -p agentloom --bench eval
//! ```

#![allow(clippy::unwrap_used, reason = "a benchmark stops at the first failure")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn binary() -> PathBuf {
    std::env::var_os("AGENTLOOM_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/agentloom"),
        PathBuf::from,
    )
}

fn agentloom(bin: &Path, args: &[&str]) -> std::process::Output {
    let output = Command::new(bin)
        .args(args)
        .env_remove("AGENTLOOM_LOG")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "agentloom {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn main() {
    let bin = binary();
    if !bin.exists() {
        eprintln!(
            "no agentloom binary at {}: build it with `cargo build --release -p agentloom`, or set AGENTLOOM_BIN",
            bin.display()
        );
        return;
    }
    let n: usize = std::env::var("AGENTLOOM_EVAL_BENCH_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    let hello =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    let hello = hello.to_str().unwrap();
    let cases: String = (0..n)
        .map(|i| {
            format!(
                "{{\"name\": \"case {i}\", \"inputs\": {{\"name\": \"N{i}\"}}, \"expect\": {{\"greeting\": \"Hello, N{i}!\"}}}}\n"
            )
        })
        .collect();
    let cases_file = dir.path().join("cases.jsonl");
    std::fs::write(&cases_file, cases).unwrap();
    let rounds: usize = std::env::var("AGENTLOOM_EVAL_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
        .max(1);

    let (mut evals, mut all_processes) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // A run log of their own each round, as a user's first evaluation would find it.
        let eval_db = dir.path().join(format!("eval-{round}.sqlite3"));
        let run_db = dir.path().join(format!("runs-{round}.sqlite3"));
        let started = Instant::now();
        agentloom(
            &bin,
            &[
                "eval",
                hello,
                "--cases",
                cases_file.to_str().unwrap(),
                "--json",
                "--db",
                eval_db.to_str().unwrap(),
            ],
        );
        let one_eval = started.elapsed();

        let started = Instant::now();
        for i in 0..n {
            agentloom(
                &bin,
                &[
                    "run",
                    hello,
                    "--input",
                    &format!("name=N{i}"),
                    "--json",
                    "--db",
                    run_db.to_str().unwrap(),
                ],
            );
        }
        let processes = started.elapsed();
        println!(
            "  round {}: one eval {:.2} s, {n} run processes {:.2} s ({})",
            round + 1,
            one_eval.as_secs_f64(),
            processes.as_secs_f64(),
            load()
        );
        evals.push(one_eval);
        all_processes.push(processes);
    }
    let (one_eval, processes) = (median(&mut evals), median(&mut all_processes));
    let ratio = one_eval.as_secs_f64() / processes.as_secs_f64();
    println!(
        "{n} hello cases, median of {rounds}: one eval {:.2} s, {n} run processes {:.2} s: eval takes {:.1}% of the time ({}); {}",
        one_eval.as_secs_f64(),
        processes.as_secs_f64(),
        ratio * 100.0,
        if ratio <= 0.1 {
            "within the 10% target"
        } else {
            "OVER the 10% target"
        },
        load()
    );

    llm_cases(&bin, dir.path(), rounds);
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The load averages as `uptime` prints them.
fn load() -> String {
    Command::new("uptime")
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .and_then(|text| {
            text.find("load average")
                .map(|at| text[at..].trim().to_owned())
        })
        .unwrap_or_else(|| "load unknown".to_owned())
}

/// 200 `llm.chat` cases against fakellm, 8 at once, `rounds` times.
fn llm_cases(bin: &Path, dir: &Path, rounds: usize) {
    let Some(fake) = agentloom_tests::FakeLlm::start_with_rules(
        "rules:\n  - name: any\n    when: {messages_contain: \"Greet\"}\n    respond: {content: \"Hello there\"}\n",
    ) else {
        println!("200 llm.chat cases: skipped (fakellm is not installed)");
        return;
    };
    let graph = serde_json::json!({
        "format": "agentloom.graph", "version": 1, "name": "bench chat",
        "nodes": [
            {"id": "who", "block": "graph.input", "config": {"name": "who", "type": "text"}},
            {"id": "chat", "block": "llm.chat", "config": {"credential": "fakellm",
                "base_url": format!("{}/v1", fake.base()), "model": "test-model",
                "prompt": "Greet {{ who }}", "stream": false}},
            {"id": "out", "block": "graph.output", "config": {"name": "reply"}}
        ],
        "edges": [
            {"from": ["who", "value"], "to": ["chat", "who"]},
            {"from": ["chat", "text"], "to": ["out", "value"]}
        ]
    });
    let graph_file = dir.join("chat.json");
    std::fs::write(&graph_file, graph.to_string()).unwrap();
    let cases: String = (0..200)
        .map(|i| {
            format!("{{\"name\": \"chat {i}\", \"inputs\": {{\"who\": \"P{i}\"}}, \"expect\": {{\"reply\": {{\"contains\": \"Hello\"}}}}}}\n")
        })
        .collect();
    let cases_file = dir.join("chat.jsonl");
    std::fs::write(&cases_file, cases).unwrap();
    let mut took = Vec::new();
    let mut last = serde_json::Value::Null;
    for round in 0..rounds {
        let db = dir.join(format!("chat-{round}.sqlite3"));
        let started = Instant::now();
        let output = Command::new(bin)
            .args(["eval", graph_file.to_str().unwrap(), "--cases"])
            .arg(&cases_file)
            .args(["--concurrency", "8", "--trust", "--json", "--db"])
            .arg(&db)
            .env_remove("AGENTLOOM_LOG")
            .env("AGENTLOOM_SECRET_FAKELLM", "sk-bench")
            .env(
                "AGENTLOOM_SECRET_FAKELLM_HOSTS",
                format!("127.0.0.1:{}", fake.port()),
            )
            .output()
            .unwrap();
        let elapsed = started.elapsed();
        last = serde_json::from_slice(&output.stdout).unwrap_or_default();
        assert_eq!(
            last["passed"],
            200,
            "the llm.chat cases failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        println!(
            "  round {}: 200 llm.chat cases {:.2} s ({})",
            round + 1,
            elapsed.as_secs_f64(),
            load()
        );
        took.push(elapsed);
    }
    let took = median(&mut took);
    println!(
        "200 llm.chat cases against fakellm, concurrency 8, median of {rounds}: {:.2} s ({:.1} ms a case), {} passed, run time p50 {} ms, p95 {} ms (last round); {}",
        took.as_secs_f64(),
        took.as_secs_f64() * 1000.0 / 200.0,
        last["passed"],
        last["p50_ms"],
        last["p95_ms"],
        load()
    );
}
