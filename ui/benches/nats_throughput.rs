//! Throughput of delay-bound runs through NATS JetStream with one worker, then two: the
//! ratio two workers make, the median of several rounds, and the machine's load. Needs
//! `nats-server` on PATH.
//!
//!     cargo bench -p agentloom --bench nats_throughput [-- --rounds 5 --runs 80 --delay-ms 200 --concurrency 4]
//!
//! `AGENTLOOM_BIN=PATH` measures another build of `agentloom`.
//!
//! Each round queues the whole batch first, then starts the workers; its time is the span
//! of the runs in the workers' own logs (first start to last finish), so neither submitting
//! nor starting a worker counts.

#![allow(clippy::unwrap_used, reason = "a benchmark that cannot run stops")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Settings {
    rounds: usize,
    runs: usize,
    delay_ms: u64,
    concurrency: usize,
}

fn settings() -> Settings {
    let mut settings = Settings {
        rounds: 5,
        runs: 80,
        delay_ms: 200,
        concurrency: 4,
    };
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        let value = || pair[1].parse().unwrap();
        match pair[0].as_str() {
            "--rounds" => settings.rounds = value(),
            "--runs" => settings.runs = value(),
            "--delay-ms" => settings.delay_ms = u64::try_from(value()).unwrap(),
            "--concurrency" => settings.concurrency = value(),
            _ => {}
        }
    }
    settings
}

/// `AGENTLOOM_BIN`, else the `agentloom` built with this benchmark's profile.
fn binary() -> PathBuf {
    if let Some(given) = std::env::var_os("AGENTLOOM_BIN") {
        return PathBuf::from(given);
    }
    let bench = std::env::current_exe().unwrap();
    let profile = bench.parent().unwrap().parent().unwrap();
    let built = profile.join("agentloom");
    assert!(
        built.is_file(),
        "no {}: cargo build --release -p agentloom",
        built.display()
    );
    built
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn graph(dir: &Path, delay_ms: u64) -> PathBuf {
    let path = dir.join("delay.json");
    let doc = serde_json::json!({
        "format": "agentloom.graph", "version": 1, "name": "bench delay",
        "nodes": [
            {"id": "text", "block": "graph.input", "config": {"name": "text", "default": "x"}},
            {"id": "slow", "block": "control.delay", "config": {"ms": delay_ms}},
            {"id": "out", "block": "graph.output", "config": {"name": "echo"}}
        ],
        "edges": [
            {"from": ["text", "value"], "to": ["slow", "value"]},
            {"from": ["slow", "value"], "to": ["out", "value"]}
        ]
    });
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

/// Completed runs in a worker's log: (count, first start, last finish) in Unix ms.
fn completed(db: &Path) -> (usize, i64, i64) {
    let Ok(conn) = rusqlite::Connection::open(db) else {
        return (0, 0, 0);
    };
    conn.query_row(
        "SELECT COUNT(*), COALESCE(MIN(started_at_ms), 0), COALESCE(MAX(finished_at_ms), 0) FROM runs WHERE status = 'completed'",
        [],
        |row| Ok((row.get::<_, i64>(0)? as usize, row.get(1)?, row.get(2)?)),
    )
    .unwrap_or((0, 0, 0))
}

/// Seconds a batch of `settings.runs` takes with `workers` workers.
fn round(
    binary: &Path,
    url: &str,
    work: &Path,
    graph: &Path,
    workers: usize,
    settings: &Settings,
    name: &str,
) -> f64 {
    for i in 0..settings.runs {
        let done = Command::new(binary)
            .arg("submit")
            .arg(graph)
            .args(["--nats", url, "--input", &format!("text={name}-{i}")])
            .env_remove("AGENTLOOM_NATS")
            .output()
            .unwrap();
        assert!(
            done.status.success(),
            "{}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    let mut children = Killed(Vec::new());
    let mut dbs = Vec::new();
    for n in 0..workers {
        let home = work.join(format!("{name}-w{n}"));
        std::fs::create_dir_all(&home).unwrap();
        let log = home.join("worker.log");
        children.0.push(
            Command::new(binary)
                .arg("worker")
                .args(["--nats", url, "--name", &format!("{name}-w{n}")])
                .args(["--concurrency", &settings.concurrency.to_string()])
                .arg("--db")
                .arg(home.join("runs.sqlite3"))
                .arg("--workspace")
                .arg(&home)
                .env("HOME", &home)
                .env("XDG_DATA_HOME", home.join("data"))
                .env_remove("AGENTLOOM_LOG")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        dbs.push(home.join("runs.sqlite3"));
    }
    wait_until("the batch to complete", Duration::from_secs(600), || {
        dbs.iter().map(|db| completed(db).0).sum::<usize>() >= settings.runs
    });
    let spans: Vec<(usize, i64, i64)> = dbs.iter().map(|db| completed(db)).collect();
    let first = spans.iter().filter(|s| s.0 > 0).map(|s| s.1).min().unwrap();
    let last = spans.iter().map(|s| s.2).max().unwrap();
    (last - first) as f64 / 1000.0
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let settings = settings();
    let binary = binary();
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let _server = Killed(vec![
        Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(work.path().join("store"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server is not installed: apt-get install nats-server"),
    ]);
    wait_until("nats-server to listen", Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let graph = graph(work.path(), settings.delay_ms);
    let load = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    println!(
        "{}: {} runs of a {} ms delay, {} at once per worker, {} rounds; load before: {}",
        binary.display(),
        settings.runs,
        settings.delay_ms,
        settings.concurrency,
        settings.rounds,
        load()
    );
    let (mut one, mut two, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..settings.rounds {
        let single = round(
            &binary,
            &url,
            work.path(),
            &graph,
            1,
            &settings,
            &format!("r{r}a"),
        );
        let double = round(
            &binary,
            &url,
            work.path(),
            &graph,
            2,
            &settings,
            &format!("r{r}b"),
        );
        println!(
            "round {}: 1 worker {single:.2} s, 2 workers {double:.2} s, ratio {:.2}",
            r + 1,
            single / double
        );
        one.push(single);
        two.push(double);
        ratios.push(single / double);
    }
    let ideal =
        settings.runs as f64 * settings.delay_ms as f64 / 1000.0 / settings.concurrency as f64;
    println!(
        "median: 1 worker {:.2} s (delay-bound ideal {ideal:.2} s), 2 workers {:.2} s, ratio {:.2} (target >= 1.8); load after: {}",
        median(&mut one),
        median(&mut two),
        median(&mut ratios),
        load()
    );
}
