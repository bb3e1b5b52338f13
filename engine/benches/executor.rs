//! Executor benchmark (`cargo bench -p agentloom-engine --bench executor`). Prints:
//! - per-node overhead of a chain of no-op blocks at N = 10, 1,000 and 100,000, inside the
//!   executor (no event consumer) and with the SQLite run log recording every event;
//! - the same chain through the `agentloom run` process, when a release binary is found
//!   (`AGENTLOOM_BIN`, else target/release/agentloom), as (t(N) - t(10)) / (N - 10);
//! - the wall time of a fan-out of 100 `control.delay` blocks of 100 ms.
//!
//! The baseline measured in the same run is calling the same block's `run` directly in a
//! loop, so the ratio shows what the scheduling costs on this machine today.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_blocks::testing::TestCtx;
use agentloom_core::{BlockCatalog, EdgeDoc, GraphDoc, NodeDoc, Value, ValueMap, validate};
use agentloom_engine::{Executor, NullSink, RunOptions, RunStatus, RunStore};
use serde_json::json;

fn chain(n: usize) -> GraphDoc {
    let mut doc = GraphDoc::new(&format!("chain of {n}"));
    doc.nodes
        .push(NodeDoc::new("n0", "data.constant").with_config(json!({"value": 1})));
    for i in 1..n {
        doc.nodes
            .push(NodeDoc::new(format!("n{i}"), "control.passthrough"));
        doc.edges.push(EdgeDoc::new(
            &format!("n{}", i - 1),
            "value",
            &format!("n{i}"),
            "value",
        ));
    }
    doc
}

fn fan_out(n: usize, ms: u64) -> GraphDoc {
    let mut doc = GraphDoc::new("fan-out");
    doc.settings.concurrency = Some(n);
    doc.nodes
        .push(NodeDoc::new("start", "data.constant").with_config(json!({"value": 1})));
    for i in 0..n {
        let id = format!("d{i}");
        doc.nodes
            .push(NodeDoc::new(&id, "control.delay").with_config(json!({"ms": ms})));
        doc.edges.push(EdgeDoc::new("start", "value", &id, "value"));
    }
    doc
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn repetitions(n: usize) -> usize {
    (200_000 / n).clamp(3, 200)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let registry = Arc::new(Registry::builtin());
    let executor = Executor::new(registry.clone());
    let scratch = tempfile::tempdir().expect("temp dir");

    // Baseline: the block's own cost, called directly.
    let passthrough = registry
        .block("control.passthrough")
        .and_then(|b| b.instantiate(&agentloom_core::Config::new()).ok())
        .expect("passthrough block");
    let ctx = TestCtx::new();
    let direct_per_node = runtime.block_on(async {
        let calls = 100_000;
        let started = Instant::now();
        for _ in 0..calls {
            let inputs = ValueMap::from([("value".to_owned(), Value::Integer(1))]);
            let _ = passthrough.run(inputs, &ctx).await;
        }
        started.elapsed() / calls
    });
    println!(
        "baseline: direct block call {:.3} µs/node",
        direct_per_node.as_secs_f64() * 1e6
    );

    println!("\nchain of no-op blocks, per node (median):");
    println!(
        "{:>8}  {:>14}  {:>14}  {:>10}",
        "N", "executor µs", "with log µs", "vs direct"
    );
    for n in [10, 1_000, 100_000] {
        let valid = Arc::new(validate(&chain(n), registry.as_ref()).expect("valid chain"));
        let samples: Vec<Duration> = (0..repetitions(n))
            .map(|_| {
                let started = Instant::now();
                let report = runtime.block_on(executor.run(
                    valid.clone(),
                    ValueMap::new(),
                    RunOptions::default(),
                    Arc::new(NullSink),
                ));
                assert_eq!(report.status, RunStatus::Completed);
                started.elapsed()
            })
            .collect();
        let plain = median(samples);
        let store =
            RunStore::open(&scratch.path().join(format!("bench-{n}.sqlite3"))).expect("run store");
        let logged: Vec<Duration> = (0..repetitions(n).min(10))
            .map(|_| {
                let started = Instant::now();
                let recorder = Arc::new(store.recorder(&valid.doc).expect("recorder"));
                let report = runtime.block_on(executor.run(
                    valid.clone(),
                    ValueMap::new(),
                    RunOptions::default(),
                    recorder.clone(),
                ));
                recorder.finish().expect("run log written");
                assert_eq!(report.status, RunStatus::Completed);
                started.elapsed()
            })
            .collect();
        let logged = median(logged);
        #[allow(clippy::cast_precision_loss, reason = "a figure to print")]
        let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        println!(
            "{n:>8}  {:>14.3}  {:>14.3}  {:>9.1}x",
            per(plain),
            per(logged),
            per(plain) / (direct_per_node.as_secs_f64() * 1e6)
        );
    }

    process_figures(scratch.path());

    println!("\nfan-out of 100 control.delay blocks of 100 ms:");
    let valid = Arc::new(validate(&fan_out(100, 100), registry.as_ref()).expect("valid fan-out"));
    let samples: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            let report = runtime.block_on(executor.run(
                valid.clone(),
                ValueMap::new(),
                RunOptions::default(),
                Arc::new(NullSink),
            ));
            assert_eq!(report.status, RunStatus::Completed);
            started.elapsed()
        })
        .collect();
    let wall = median(samples);
    println!(
        "  wall {:.1} ms (ideal 100 ms, ratio {:.3})",
        wall.as_secs_f64() * 1e3,
        wall.as_secs_f64() / 0.1
    );
}

/// Times `agentloom run` on chain graphs, with the run log on.
fn process_figures(scratch: &Path) {
    let binary = std::env::var_os("AGENTLOOM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/agentloom")
        });
    if !binary.exists() {
        println!(
            "\n(agentloom run: no binary at {}; build with `cargo build --release` to include it)",
            binary.display()
        );
        return;
    }
    let db = scratch.join("process.sqlite3");
    let time_run = |n: usize| -> Duration {
        let path = scratch.join(format!("chain-{n}.json"));
        std::fs::write(&path, chain(n).to_json_string()).expect("graph written");
        let samples: Vec<Duration> = (0..5)
            .map(|_| {
                let started = Instant::now();
                let status = std::process::Command::new(&binary)
                    .args(["run", "--json", "--db"])
                    .arg(&db)
                    .arg(&path)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .expect("agentloom runs");
                assert!(status.success());
                started.elapsed()
            })
            .collect();
        median(samples)
    };
    let base = time_run(10);
    println!("\n`agentloom run` with the run log, per node ((t(N) - t(10)) / (N - 10)):");
    println!(
        "  process start + 10 nodes: {:.1} ms",
        base.as_secs_f64() * 1e3
    );
    for n in [1_000, 100_000] {
        let total = time_run(n);
        #[allow(clippy::cast_precision_loss, reason = "a figure to print")]
        let per_node = (total.saturating_sub(base)).as_secs_f64() * 1e6 / (n - 10) as f64;
        println!(
            "  N = {n:>7}: total {:.1} ms, {per_node:.2} µs/node",
            total.as_secs_f64() * 1e3
        );
    }
}
