//! What handing a value on costs (`cargo bench -p agentloom-engine --bench values`). Prints:
//! - `handing`: per hop, a chain of N = 1,000 nodes (a constant, then `control.passthrough`)
//!   handing down a one-character text and a 100 KB text, without and with the SQLite run
//!   log, measured in turns in the same run; the ratio of the two is what a value's size
//!   costs (1.0 when handing it on copies nothing);
//! - `growing`: a chain of `text.template "{{ s }}."` nodes, each output one character
//!   longer than its input, without the run log (N from `AGENTLOOM_BENCH_GROWING_N`, default
//!   100,000). Beside it, in turns, three baselines: the same texts made by copying each
//!   once (what a chain costs that writes each text anew); the same chain of `"{{ s }}"`
//!   handing one character on (what a node costs whatever its text); and the growing chain
//!   watched by a sink that keeps the last node's outputs, as the live view does, so that
//!   every node finds its text held elsewhere and must copy it. Then each one's ratio to
//!   copying: unwatched, a node appends to the text it alone holds, so the chain costs what
//!   its nodes cost, not what its texts weigh; watched, it costs a copy per node beside.
//!
//! Arguments name the sections to run; none runs them all.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc, ValidGraph, validate};
use agentloom_engine::{EventKind, EventSink, Executor, RunEvent, RunOptions, RunStatus, RunStore};

mod support;
use serde_json::json;

// The allocator of the `agentloom` binary, so the figures are the application's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Nodes of the handing chain.
const HANDING_NODES: usize = 1_000;
/// The large text handed down.
const LARGE_BYTES: usize = 100 * 1024;
/// Turns of each chain without the log, and with it.
const TURNS: usize = 21;
const LOGGED_TURNS: usize = 9;

/// A constant holding `value`, then `n - 1` nodes of `kind` (with `config`), each fed on
/// its input `input` by the output of the one before (`output`, the constant's `value`).
fn chain(
    n: usize,
    value: &str,
    kind: &str,
    config: &serde_json::Value,
    (input, output): (&str, &str),
) -> GraphDoc {
    let mut doc = GraphDoc::new(kind);
    doc.nodes
        .push(NodeDoc::new("n0", "data.constant").with_config(json!({ "value": value })));
    for i in 1..n {
        let id = format!("n{i}");
        doc.nodes
            .push(NodeDoc::new(&id, kind).with_config(config.clone()));
        let from = if i == 1 { "value" } else { output };
        doc.edges
            .push(EdgeDoc::new(&format!("n{}", i - 1), from, &id, input));
    }
    doc
}

/// `value` handed down `n - 1` pass-throughs.
fn handing_chain(n: usize, value: &str) -> GraphDoc {
    chain(
        n,
        value,
        "control.passthrough",
        &json!({}),
        ("value", "value"),
    )
}

/// `"x"`, then `n - 1` templates each adding a character to the text.
fn growing_chain(n: usize) -> GraphDoc {
    let template = json!({ "template": "{{ s }}." });
    chain(n, "x", "text.template", &template, ("s", "text"))
}

/// `"x"`, then `n - 1` templates handing it on as it is.
fn flat_chain(n: usize) -> GraphDoc {
    let template = json!({ "template": "{{ s }}" });
    chain(n, "x", "text.template", &template, ("s", "text"))
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Whether the section named `name` was asked for.
fn wanted(name: &str) -> bool {
    let asked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    asked.is_empty() || asked.iter().any(|a| a == name)
}

/// One run of `valid`, with the run log in `store` when given; its wall time.
fn run_once(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    valid: &Arc<ValidGraph>,
    store: Option<&RunStore>,
) -> Duration {
    let started = Instant::now();
    let report = support::run_once(runtime, executor, valid, store);
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    started.elapsed()
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
    if wanted("handing") {
        handing(&runtime, &executor, &registry, scratch.path());
    }
    if wanted("growing") {
        growing(&runtime, &executor, &registry);
    }
}

fn handing(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    registry: &Arc<Registry>,
    scratch: &Path,
) {
    let n = HANDING_NODES;
    let small = Arc::new(validate(&handing_chain(n, "x"), registry.as_ref()).expect("valid"));
    let large_text: String = (0..LARGE_BYTES)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let large =
        Arc::new(validate(&handing_chain(n, &large_text), registry.as_ref()).expect("valid"));
    // Warm-up: the allocator's pages, the code, the run log's file.
    let store = RunStore::open(&scratch.join("values.sqlite3")).expect("run store");
    for valid in [&small, &large] {
        run_once(runtime, executor, valid, None);
        run_once(runtime, executor, valid, Some(&store));
    }
    #[allow(clippy::cast_precision_loss, reason = "a figure to print")]
    let per_hop = |d: Duration| d.as_secs_f64() * 1e6 / (n - 1) as f64;
    println!(
        "\nhanding a text down {n} nodes, per hop (median of turns A B A B …), load {}:",
        support::load()
    );
    println!(
        "{:>10}  {:>12}  {:>12}  {:>8}",
        "", "1 char µs", "100 KB µs", "ratio"
    );
    for (label, store, turns) in [
        ("no log", None, TURNS),
        ("with log", Some(&store), LOGGED_TURNS),
    ] {
        let mut small_samples = Vec::with_capacity(turns);
        let mut large_samples = Vec::with_capacity(turns);
        for _ in 0..turns {
            small_samples.push(run_once(runtime, executor, &small, store));
            large_samples.push(run_once(runtime, executor, &large, store));
        }
        let (small, large) = (
            per_hop(median(small_samples)),
            per_hop(median(large_samples)),
        );
        println!(
            "{label:>10}  {small:>12.3}  {large:>12.3}  {:>7.2}x",
            large / small
        );
    }
}

fn growing(runtime: &tokio::runtime::Runtime, executor: &Executor, registry: &Arc<Registry>) {
    let n: usize = std::env::var("AGENTLOOM_BENCH_GROWING_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let valid = Arc::new(validate(&growing_chain(n), registry.as_ref()).expect("valid"));
    let flat = Arc::new(validate(&flat_chain(n), registry.as_ref()).expect("valid"));
    // Baselines, in turns with the chain: the text copied once per node into a new text one
    // character longer, each handed on as a shared value, what any chain must at least do;
    // and the chain's nodes without the growth, what they cost whatever their text.
    let (mut chain_samples, mut copy_samples, mut flat_samples, mut watched_samples) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        copy_samples.push(copy_growing_text(n));
        chain_samples.push(run_once(runtime, executor, &valid, None));
        flat_samples.push(run_once(runtime, executor, &flat, None));
        watched_samples.push(run_watched(runtime, executor, &valid));
    }
    let (took, copying, flat, watched) = (
        median(chain_samples),
        median(copy_samples),
        median(flat_samples),
        median(watched_samples),
    );
    #[allow(clippy::cast_precision_loss, reason = "a figure to print")]
    let per_node = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    println!(
        "\ngrowing text: {n} text.template nodes \"{{{{ s }}}}.\", no log (median of 3, in turns), load {}:",
        support::load()
    );
    let copying_s = copying.as_secs_f64().max(1e-9);
    println!(
        "  chain {:.3} s ({:.2} µs/node); copying the text once per node {:.3} s ({:.2} µs/node); ratio {:.2}",
        took.as_secs_f64(),
        per_node(took),
        copying.as_secs_f64(),
        per_node(copying),
        took.as_secs_f64() / copying_s
    );
    println!(
        "  the same chain not growing (\"{{{{ s }}}}\") {:.3} s ({:.2} µs/node); the growth adds {:.3} s: {:.2}x copying",
        flat.as_secs_f64(),
        per_node(flat),
        took.as_secs_f64() - flat.as_secs_f64(),
        (took.as_secs_f64() - flat.as_secs_f64()) / copying_s
    );
    println!(
        "  the same chain watched (each text kept by the sink until the next, so every node copies it) {:.3} s ({:.2} µs/node); ratio {:.2}",
        watched.as_secs_f64(),
        per_node(watched),
        watched.as_secs_f64() / copying_s
    );
}

/// Keeps the outputs of the node that finished last, as the live view shows them.
#[derive(Default)]
struct KeepsLastOutputs(std::sync::Mutex<Option<agentloom_core::ValueMap>>);

impl EventSink for KeepsLastOutputs {
    fn emit(&self, event: &RunEvent) {
        if let EventKind::NodeFinished { outputs, .. } = &event.kind {
            *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(outputs.clone());
        }
    }
}

/// One run of `valid` watched by [`KeepsLastOutputs`]; its wall time.
fn run_watched(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    valid: &Arc<ValidGraph>,
) -> Duration {
    let started = Instant::now();
    let report = runtime.block_on(executor.run(
        valid.clone(),
        agentloom_core::ValueMap::new(),
        RunOptions::default(),
        Arc::new(KeepsLastOutputs::default()),
    ));
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    started.elapsed()
}

/// The time to make the texts of a growing chain of `n` nodes by copying: each a new text
/// with the one before copied into it and one character added, the one before then dropped.
fn copy_growing_text(n: usize) -> Duration {
    let started = Instant::now();
    let mut text = agentloom_core::Value::text("x");
    for _ in 1..n {
        let before = text.as_str().unwrap_or_default();
        let mut next = String::with_capacity(before.len() + 1);
        next.push_str(before);
        next.push('.');
        text = std::hint::black_box(agentloom_core::Value::text(next));
    }
    std::hint::black_box(&text);
    started.elapsed()
}
