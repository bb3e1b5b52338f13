//! Executor benchmark (`cargo bench -p agentloom-engine --bench executor`). Prints:
//! - per-node overhead of a chain of no-op blocks at N = 10, 1,000 and 100,000, inside the
//!   executor (no event consumer) and with the SQLite run log recording every event;
//! - the same chain through the `agentloom run` process, when a release binary is found
//!   (`AGENTLOOM_BIN`, else target/release/agentloom), as (t(N) - t(10)) / (N - 10) with
//!   the N-node and 10-node runs taking turns (each meets the same run log), beside
//!   the engine running the same chain in this process, with the log and without; and a
//!   chain of 10,000 `text.template "{{ value }}"` nodes: µs/node both ways and the peak RSS
//!   per node of its `agentloom run` above a 10-node run;
//! - the wall time of a fan-out of 100 `control.delay` blocks of 100 ms, default settings,
//!   in this process; then through `agentloom run`, beside a 1-node run taking turns with
//!   it, and what it takes beyond that start-up over the ideal 100 ms;
//! - `startup`: `agentloom run` of a 1-node graph with the run log, with `--no-log`, and
//!   starting a process that does nothing (`true`), in turns: the floor any process pays;
//! - memory per node of a chain of `text.template` nodes, against one minijinja
//!   environment per node (how templates were kept before) measured in the same run; each
//!   figure is the RSS growth of a fresh process (this one run again), the median of three,
//!   so memory freed by an earlier section cannot hide or inflate it;
//! - the run log's size for a chain handing one large value down, against its distinct bytes;
//! - peak RSS of `agentloom run` processes (with `/usr/bin/time`), when the binary is found.
//!
//! The baseline for time measured in the same run is calling the same block's `run`
//! directly in a loop, so the ratio shows what the scheduling costs on this machine today;
//! the run log's figures are set against the same chain without the log.
//!
//! Arguments name the sections to run (`chain`, `process`, `startup`, `fan-out`, `memory`,
//! `log-size`); none runs them all. `AGENTLOOM_BENCH_QUICK=1` leaves out the chains of
//! 100,000 nodes (a check that every section runs, not figures to quote).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_blocks::testing::TestCtx;
use agentloom_core::{
    BlockCatalog, EdgeDoc, GraphDoc, NodeDoc, Value, ValueMap, validate, validate_shared,
};
use agentloom_engine::{Executor, NullSink, RunOptions, RunStatus, RunStore};

mod support;
use serde_json::json;

// The allocator of the `agentloom` binary, so memory figures are the application's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Set in a child process that measures one memory figure and prints it.
const MEMORY_PROBE: &str = "AGENTLOOM_BENCH_MEMORY_PROBE";
/// Nodes of the template chain measured for memory.
const MEMORY_NODES: usize = 10_000;

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

/// The chain lengths measured out of `sizes`: all, or under `AGENTLOOM_BENCH_QUICK` those
/// below 100,000.
fn lengths<const N: usize>(sizes: [usize; N]) -> Vec<usize> {
    let quick = std::env::var_os("AGENTLOOM_BENCH_QUICK").is_some_and(|v| v != "0");
    sizes
        .into_iter()
        .filter(|&n| !quick || n < 100_000)
        .collect()
}

fn repetitions(n: usize) -> usize {
    (200_000 / n).clamp(3, 200)
}

/// Whether the section named `name` was asked for.
fn wanted(name: &str) -> bool {
    let asked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    asked.is_empty() || asked.iter().any(|a| a == name)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let registry = Arc::new(Registry::builtin());
    let executor = Executor::new(registry.clone());
    if let Ok(probe) = std::env::var(MEMORY_PROBE) {
        memory_probe(&probe, &runtime, &executor, registry.as_ref());
        return;
    }
    let scratch = tempfile::tempdir().expect("temp dir");

    // Baseline: the block's own cost, called directly.
    let passthrough = registry
        .block("control.passthrough")
        .and_then(|b| {
            b.instantiate(&agentloom_core::Config::new(), &registry.config_ctx())
                .ok()
        })
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

    if wanted("chain") {
        chain_figures(
            &runtime,
            &executor,
            &registry,
            direct_per_node,
            scratch.path(),
        );
    }
    if wanted("process") {
        process_figures(&runtime, &executor, &registry, scratch.path());
    }
    if wanted("startup") {
        startup_figures(scratch.path());
    }
    if wanted("fan-out") {
        fan_out_figures(&runtime, &executor, registry.as_ref(), scratch.path());
    }
    if wanted("memory") {
        memory_figures();
    }
    if wanted("log-size") {
        log_size_figures(&runtime, &executor, registry.as_ref(), scratch.path());
    }
}

fn chain_figures(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    registry: &Arc<Registry>,
    direct_per_node: Duration,
    scratch: &Path,
) {
    println!(
        "\nchain of no-op blocks, per node (median), load {}:",
        support::load()
    );
    println!(
        "{:>8}  {:>14}  {:>14}  {:>10}  {:>10}",
        "N", "executor µs", "with log µs", "vs direct", "log vs no"
    );
    for n in lengths([10, 1_000, 10_000, 100_000]) {
        let valid = Arc::new(validate(&chain(n), registry.as_ref()).expect("valid chain"));
        let samples: Vec<Duration> = (0..repetitions(n))
            .map(|_| {
                let started = Instant::now();
                let report = support::run_once(runtime, executor, &valid, None);
                assert_eq!(report.status, RunStatus::Completed);
                started.elapsed()
            })
            .collect();
        let plain = median(samples);
        let store = RunStore::open(&scratch.join(format!("bench-{n}.sqlite3"))).expect("run store");
        let logged: Vec<Duration> = (0..repetitions(n).min(10))
            .map(|_| {
                let started = Instant::now();
                let report = support::run_once(runtime, executor, &valid, Some(&store));
                assert_eq!(report.status, RunStatus::Completed);
                started.elapsed()
            })
            .collect();
        let logged = median(logged);
        #[allow(clippy::cast_precision_loss, reason = "a figure to print")]
        let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        println!(
            "{n:>8}  {:>14.3}  {:>14.3}  {:>9.1}x  {:>9.2}x",
            per(plain),
            per(logged),
            per(plain) / (direct_per_node.as_secs_f64() * 1e6),
            per(logged) / per(plain)
        );
    }
}

fn fan_out_figures(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    registry: &dyn BlockCatalog,
    scratch: &Path,
) {
    println!(
        "\nfan-out of 100 control.delay blocks of 100 ms, default settings, load {}:",
        support::load()
    );
    let valid = Arc::new(validate(&fan_out(100, 100), registry).expect("valid fan-out"));
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
    let Some(binary) = agentloom_binary() else {
        return;
    };
    let fan_out = write_graph(scratch, "fan-out", &fan_out(100, 100));
    let one = write_graph(scratch, "one-node", &chain(1));
    let db = scratch.join("fan-out.sqlite3");
    let (mut fan_samples, mut one_samples) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        one_samples.push(agentloom_run(&binary, &one, Some(&db)));
        fan_samples.push(agentloom_run(&binary, &fan_out, Some(&db)));
    }
    let (fan, one) = (median(fan_samples), median(one_samples));
    let beyond_ms = (fan.as_secs_f64() - one.as_secs_f64()) * 1e3 - 100.0;
    println!(
        "  `agentloom run` with the log: {:.1} ms, a 1-node run {:.1} ms (medians of 7 in turns, load {}): {beyond_ms:.1} ms beyond start-up over the ideal",
        fan.as_secs_f64() * 1e3,
        one.as_secs_f64() * 1e3,
        support::load()
    );
}

/// The `agentloom` binary the process figures time: `AGENTLOOM_BIN`, else the release
/// build; `None` (said) when there is none.
fn agentloom_binary() -> Option<PathBuf> {
    let binary = std::env::var_os("AGENTLOOM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/agentloom")
        });
    if binary.exists() {
        return Some(binary);
    }
    println!(
        "\n(agentloom run: no binary at {}; build with `cargo build --release` to include it)",
        binary.display()
    );
    None
}

/// `doc` written to `name`.json in `scratch`.
fn write_graph(scratch: &Path, name: &str, doc: &GraphDoc) -> PathBuf {
    let path = scratch.join(format!("{name}.json"));
    std::fs::write(&path, doc.to_json_string()).expect("graph written");
    path
}

/// The wall time of one `agentloom run --json` of `graph`, with the run log in `db`, or
/// `--no-log` without one.
fn agentloom_run(binary: &Path, graph: &Path, db: Option<&Path>) -> Duration {
    let mut command = std::process::Command::new(binary);
    command.args(["run", "--json"]);
    match db {
        Some(db) => command.arg("--db").arg(db),
        None => command.arg("--no-log"),
    };
    command
        .arg(graph)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let started = Instant::now();
    let status = command.status().expect("agentloom runs");
    let took = started.elapsed();
    assert!(status.success(), "{} failed", graph.display());
    took
}

/// Process start: a 1-node graph through `agentloom run` with the run log and without,
/// beside a process that does nothing, 15 turns of the three.
fn startup_figures(scratch: &Path) {
    let Some(binary) = agentloom_binary() else {
        return;
    };
    let one = write_graph(scratch, "one-node", &chain(1));
    let db = scratch.join("startup.sqlite3");
    let nothing = || {
        let started = Instant::now();
        let status = std::process::Command::new("true")
            .status()
            .expect("true runs");
        assert!(status.success());
        started.elapsed()
    };
    agentloom_run(&binary, &one, Some(&db));
    let (mut logged, mut unlogged, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..15 {
        floor.push(nothing());
        logged.push(agentloom_run(&binary, &one, Some(&db)));
        unlogged.push(agentloom_run(&binary, &one, None));
    }
    let ms = |samples: Vec<Duration>| median(samples).as_secs_f64() * 1e3;
    let (logged, unlogged, floor) = (ms(logged), ms(unlogged), ms(floor));
    println!(
        "\nprocess start: `agentloom run` of a 1-node graph (medians of 15 in turns), load {}:",
        support::load()
    );
    println!(
        "  with the log {logged:.2} ms, --no-log {unlogged:.2} ms (ratio {:.2}); a process doing nothing {floor:.2} ms",
        logged / unlogged.max(1e-6)
    );
}

/// A chain of `n` distinct templates after a constant; each output is short.
fn template_chain(n: usize) -> GraphDoc {
    let mut doc = GraphDoc::new(&format!("templates {n}"));
    doc.nodes
        .push(NodeDoc::new("n0", "data.constant").with_config(json!({"value": "start"})));
    for i in 1..n {
        doc.nodes.push(
            NodeDoc::new(format!("n{i}"), "text.template")
                .with_config(json!({"template": format!("step {i}: {{{{ x | length }}}}")})),
        );
        let port = if i == 1 { "value" } else { "text" };
        doc.edges.push(EdgeDoc::new(
            &format!("n{}", i - 1),
            port,
            &format!("n{i}"),
            "x",
        ));
    }
    doc
}

/// Resident memory of this process, in KiB (Linux).
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Prints the RSS growth (KiB) of what `probe` names, measured in this fresh process:
/// `environments` (one minijinja environment per node), `graph` (the chain validated, then
/// run: two figures).
fn memory_probe(
    probe: &str,
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    catalog: &dyn BlockCatalog,
) {
    let n = MEMORY_NODES;
    let doc = template_chain(n);
    let before = rss_kib().unwrap_or(0);
    let grown = || rss_kib().unwrap_or(before).saturating_sub(before);
    if probe == "environments" {
        let envs: Vec<minijinja::Environment<'static>> = (1..n)
            .map(|i| {
                let mut env = minijinja::Environment::new();
                env.add_template_owned("t", format!("step {i}: {{{{ x | length }}}}"))
                    .expect("template compiles");
                env
            })
            .collect();
        println!("{}", grown());
        drop(envs);
        return;
    }
    // The document is handed over, as `agentloom run` does: the graph shares it.
    let valid = Arc::new(validate_shared(Arc::new(doc), catalog).expect("valid template chain"));
    let validated = grown();
    let report = runtime.block_on(executor.run(
        valid.clone(),
        ValueMap::new(),
        RunOptions::default(),
        Arc::new(NullSink),
    ));
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    println!("{validated} {}", grown());
}

/// Runs this benchmark again as a child measuring `probe`; the numbers it printed.
fn run_memory_probe(probe: &str) -> Option<Vec<u64>> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe)
        .env(MEMORY_PROBE, probe)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|field| field.parse().ok())
        .collect()
}

#[allow(clippy::cast_precision_loss, reason = "figures to print")]
fn memory_figures() {
    let n = MEMORY_NODES;
    println!(
        "\nmemory per node, chain of {n} text.template nodes (RSS growth of a fresh process / N, median of 3):"
    );
    if rss_kib().is_none() {
        println!("  (no /proc/self/status here)");
        return;
    }
    // Each field's median over three processes.
    let medians = |probe: &str| -> Option<Vec<u64>> {
        let runs = (0..3)
            .map(|_| run_memory_probe(probe))
            .collect::<Option<Vec<Vec<u64>>>>()?;
        let fields = runs.first()?.len();
        (0..fields)
            .map(|field| {
                let mut samples: Vec<u64> =
                    runs.iter().filter_map(|r| r.get(field)).copied().collect();
                samples.sort_unstable();
                samples.get(samples.len() / 2).copied()
            })
            .collect()
    };
    let baseline = medians("environments").and_then(|f| f.first().copied());
    let graph = medians("graph");
    let (Some(baseline), Some(&[validated, after_run])) = (baseline, graph.as_deref()) else {
        println!("  (a measuring process failed)");
        return;
    };
    let per = |kib: u64| kib as f64 * 1024.0 / n as f64;
    println!(
        "  baseline (an environment per node): {:.0} B/node",
        per(baseline)
    );
    println!(
        "  validated graph: {:.0} B/node (ratio {:.3}); after running it: {:.0} B/node",
        per(validated),
        per(validated) / per(baseline).max(1.0),
        per(after_run)
    );
}

/// The run log of a chain handing one 100 KB value down, against the value's size.
#[allow(clippy::cast_precision_loss, reason = "figures to print")]
fn log_size_figures(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    catalog: &dyn BlockCatalog,
    scratch: &Path,
) {
    let n = 1_000;
    let value: String = (0..10_000).map(|i| format!("{i:>9}\n")).collect();
    let mut doc = chain(n);
    doc.nodes[0] = NodeDoc::new("n0", "data.constant").with_config(json!({ "value": value }));
    let valid = Arc::new(validate(&doc, catalog).expect("valid chain"));
    // Baselines: the chain without the log, and what serializing and hashing the value at
    // every node it passes (inputs and outputs) costs.
    let started = Instant::now();
    let report = runtime.block_on(executor.run(
        valid.clone(),
        ValueMap::new(),
        RunOptions::default(),
        Arc::new(NullSink),
    ));
    let without_log = started.elapsed();
    assert_eq!(report.status, RunStatus::Completed);
    let handed = Value::text(value.clone());
    let started = Instant::now();
    for _ in 0..2 * n {
        use sha2::Digest as _;
        let text = serde_json::to_vec(&handed).expect("serializes");
        std::hint::black_box(sha2::Sha256::digest(&text));
    }
    let hash_every_node = started.elapsed();
    let path = scratch.join("log-size.sqlite3");
    let store = RunStore::open(&path).expect("run store");
    let recorder = Arc::new(store.recorder(&valid.doc).expect("recorder"));
    let started = Instant::now();
    let report = runtime.block_on(executor.run(
        valid,
        ValueMap::new(),
        RunOptions::default(),
        recorder.clone(),
    ));
    recorder.finish().expect("run log written");
    let took = started.elapsed();
    assert_eq!(report.status, RunStatus::Completed);
    drop(store);
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let wal = path.with_extension("sqlite3-wal");
    let bytes = size(&path) + size(&wal);
    let inline = 2 * n * value.len();
    println!(
        "\nrun log of a chain of {n} handing down one {} KB value, load {}:",
        value.len() / 1000,
        support::load()
    );
    println!(
        "  {:.1} ms, {} KB on disk (file + WAL); stored inline per row it would be {} KB (ratio {:.4})",
        took.as_secs_f64() * 1e3,
        bytes / 1000,
        inline / 1000,
        bytes as f64 / inline as f64
    );
    println!(
        "  without the log {:.1} ms; serializing and hashing the value at every node would add {:.1} ms (the log adds {:.1} ms)",
        without_log.as_secs_f64() * 1e3,
        hash_every_node.as_secs_f64() * 1e3,
        took.saturating_sub(without_log).as_secs_f64() * 1e3
    );
}

/// A chain of `n` nodes after a constant, each `text.template "{{ value }}"`.
fn value_template_chain(n: usize) -> GraphDoc {
    let mut doc = GraphDoc::new(&format!("value templates {n}"));
    doc.nodes
        .push(NodeDoc::new("n0", "data.constant").with_config(json!({"value": "start"})));
    for i in 1..n {
        doc.nodes.push(
            NodeDoc::new(format!("n{i}"), "text.template")
                .with_config(json!({"template": "{{ value }}"})),
        );
        let port = if i == 1 { "value" } else { "text" };
        doc.edges.push(EdgeDoc::new(
            &format!("n{}", i - 1),
            port,
            &format!("n{i}"),
            "value",
        ));
    }
    doc
}

/// The engine's time for one run of `doc`, median of `runs`: in this process, with the
/// run log at `db` (`Some`) or without one.
fn engine_run_time(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    registry: &Registry,
    doc: &GraphDoc,
    db: Option<&Path>,
    runs: usize,
) -> Duration {
    let valid = Arc::new(validate(doc, registry).expect("valid graph"));
    let store = db.map(|db| RunStore::open(db).expect("run store"));
    let samples = (0..runs)
        .map(|_| {
            let started = Instant::now();
            let report = support::run_once(runtime, executor, &valid, store.as_ref());
            assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
            started.elapsed()
        })
        .collect();
    median(samples)
}

/// Times `agentloom run` on chain graphs, with the run log and without, beside the engine
/// running the same chains in this process; then a chain of `text.template` nodes, its
/// time per node and its peak RSS per node above a 10-node run.
#[allow(clippy::cast_precision_loss, reason = "figures to print")]
fn process_figures(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    registry: &Registry,
    scratch: &Path,
) {
    let Some(binary) = agentloom_binary() else {
        return;
    };
    let db = scratch.join("process.sqlite3");
    let engine_db = scratch.join("process-engine.sqlite3");
    let write_graph = |name: &str, doc: &GraphDoc| write_graph(scratch, name, doc);
    // One `agentloom run` of `path`, with the log or without it (`--no-log`).
    let run_once =
        |path: &Path, logged: bool| agentloom_run(&binary, path, logged.then_some(db.as_path()));
    let time_run = |path: &Path, logged: bool| -> Duration {
        median((0..7).map(|_| run_once(path, logged)).collect())
    };
    // `path` and the 10-node graph `base` run in turns, seven pairs: each new process reads
    // the run log's WAL whole, and the WAL grows with every run until a checkpoint, so
    // runs timed one group after the other would meet different logs.
    let time_paired = |path: &Path, base: &Path, logged: bool| -> (Duration, Duration) {
        let (mut times, mut base_times) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            base_times.push(run_once(base, logged));
            times.push(run_once(path, logged));
        }
        (median(times), median(base_times))
    };
    let peak_rss = |path: &Path| -> Option<u64> {
        let samples: Option<Vec<u64>> = (0..3)
            .map(|_| {
                let out = scratch.join("rss.txt");
                let status = std::process::Command::new("/usr/bin/time")
                    .args(["-f", "%M", "-o"])
                    .arg(&out)
                    .arg(&binary)
                    .args(["run", "--json", "--db"])
                    .arg(&db)
                    .arg(path)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .ok()?;
                status.success().then_some(())?;
                std::fs::read_to_string(out).ok()?.trim().parse().ok()
            })
            .collect();
        let mut samples = samples?;
        samples.sort_unstable();
        samples.get(samples.len() / 2).copied()
    };
    let small = write_graph("chain-10", &chain(10));
    let base = time_run(&small, true);
    let base_without = time_run(&small, false);
    println!(
        "\n`agentloom run` per node ((t(N) - t(10)) / (N - 10), medians of 7 runs taking turns) beside the engine in this process (t(N) / N), load {}:",
        support::load()
    );
    println!(
        "  process start + 10 nodes: {:.1} ms ({:.1} ms with --no-log)",
        base.as_secs_f64() * 1e3,
        base_without.as_secs_f64() * 1e3
    );
    println!(
        "{:>10}  {:>12}  {:>12}  {:>8}  {:>12}  {:>12}  {:>8}",
        "N", "engine log", "run log", "ratio", "engine none", "run --no-log", "ratio"
    );
    for n in lengths([1_000, 10_000, 100_000]) {
        let doc = chain(n);
        let path = write_graph(&format!("chain-{n}"), &doc);
        let runs = (20_000 / n).clamp(3, 7);
        let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        let process_per = |total: Duration, base: Duration| {
            total.saturating_sub(base).as_secs_f64() * 1e6 / (n - 10) as f64
        };
        let engine_logged = per(engine_run_time(
            runtime,
            executor,
            registry,
            &doc,
            Some(&engine_db),
            runs,
        ));
        let engine_plain = per(engine_run_time(
            runtime, executor, registry, &doc, None, runs,
        ));
        let (total, base) = time_paired(&path, &small, true);
        let logged = process_per(total, base);
        let (total, base) = time_paired(&path, &small, false);
        let without = process_per(total, base);
        println!(
            "{n:>10}  {engine_logged:>9.2} µs  {logged:>9.2} µs  {:>7.2}x  {engine_plain:>9.2} µs  {without:>9.2} µs  {:>7.2}x",
            logged / engine_logged.max(0.001),
            without / engine_plain.max(0.001)
        );
    }

    let n = MEMORY_NODES;
    let doc = value_template_chain(n);
    let path = write_graph("value-templates", &doc);
    let engine = engine_run_time(runtime, executor, registry, &doc, Some(&engine_db), 3);
    let (process, base) = time_paired(&path, &small, true);
    println!(
        "\nchain of {n} `text.template \"{{{{ value }}}}\"`, with the run log, load {}:",
        support::load()
    );
    println!(
        "  engine {:.2} µs/node; `agentloom run` {:.2} µs/node end to end ((t - t(10 nodes)) / N), ratio {:.2}",
        engine.as_secs_f64() * 1e6 / n as f64,
        process.saturating_sub(base).as_secs_f64() * 1e6 / n as f64,
        process.saturating_sub(base).as_secs_f64() / engine.as_secs_f64().max(1e-9)
    );
    match (peak_rss(&path), peak_rss(&small)) {
        (Some(chain_kib), Some(small_kib)) => println!(
            "  peak RSS {:.1} MiB, {:.2} KiB/node above a 10-node run ({:.1} MiB); median of 3",
            chain_kib as f64 / 1024.0,
            chain_kib.saturating_sub(small_kib) as f64 / n as f64,
            small_kib as f64 / 1024.0
        ),
        _ => println!("  peak RSS: (no /usr/bin/time)"),
    }

    println!("\n`agentloom run` peak RSS (with the run log, median of 3):");
    for n in lengths([10, 10_000, 100_000]) {
        let path = scratch.join(format!("chain-{n}.json"));
        if !path.exists() {
            write_graph(&format!("chain-{n}"), &chain(n));
        }
        match peak_rss(&path) {
            Some(kib) => println!("  N = {n:>7}: {:.1} MiB", kib as f64 / 1024.0),
            None => println!("  N = {n:>7}: (no /usr/bin/time)"),
        }
    }
}
