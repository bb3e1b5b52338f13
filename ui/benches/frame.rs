//! Frame cost of the canvas: builds graphs of 100, 500 and 2,000 blocks with twice as many
//! wires and prints the CPU time of one frame (egui `Context::run_ui` plus tessellation,
//! timed directly) at fit-to-view and at 1:1 zoom, median and p90.
//!
//! `cargo bench -p agentloom --bench frame`. A baseline (the whole app with an empty graph) is
//! measured at the start and again at the end of the same run, and each figure is also given
//! as a multiple of it, so that a busy machine shows. Environment:
//! - `AGENTLOOM_BENCH_GRAPHS=DIR` also writes the generated graphs there (to open the
//!   500-block one in the app);
//! - `AGENTLOOM_BENCH_SIZES=500,2000` and `AGENTLOOM_BENCH_VIEWS=fit,1:1` pick what to run
//!   (for profiling).
//!
//! Time to the first frame, resident memory and idle CPU of the real app are measured by
//! `ui/benches/desktop.sh` (under Xvfb).

use std::time::{Duration, Instant};

use agentloom::app::{App, AppPaths, Command};
use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FRAMES: usize = 60;
const WARMUP: usize = 5;

fn graph(blocks: usize) -> GraphDoc {
    let mut doc = GraphDoc::new(&format!("bench {blocks}"));
    let columns = 40;
    for i in 0..blocks {
        #[allow(clippy::cast_precision_loss, reason = "small grid")]
        let (x, y) = ((i % columns) as f64 * 260.0, (i / columns) as f64 * 160.0);
        doc.nodes.push(
            NodeDoc::new(format!("n{i:04}"), "text.template")
                .with_config(serde_json::json!({"template": "{{ a }} and {{ b }}"}))
                .at(x, y),
        );
    }
    for i in 0..blocks {
        let to = format!("n{i:04}");
        let a = format!("n{:04}", (i + blocks - 1) % blocks);
        let b = format!("n{:04}", (i + blocks - 2) % blocks);
        doc.edges.push(EdgeDoc::new(&a, "text", &to, "a"));
        doc.edges.push(EdgeDoc::new(&b, "text", &to, "b"));
    }
    doc.normalize();
    doc
}

fn raw_input() -> egui::RawInput {
    egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(1280.0, 800.0),
        )),
        ..egui::RawInput::default()
    }
}

/// CPU time used by this thread so far. On a busy machine wall time counts the time other
/// processes had the core; this does not.
#[cfg(unix)]
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    #[allow(unsafe_code, reason = "clock_gettime has no safe std equivalent")]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    #[allow(clippy::cast_sign_loss, reason = "a clock reading is never negative")]
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time used by this thread so far (kernel and user time, as on Unix).
#[cfg(windows)]
fn thread_cpu_time() -> Duration {
    use windows_sys::Win32::Foundation::FILETIME;
    use windows_sys::Win32::System::Threading::{GetCurrentThread, GetThreadTimes};
    let zero = || FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero(), zero(), zero(), zero());
    // SAFETY: the pseudo handle of this thread and four writable FILETIMEs.
    #[allow(unsafe_code, reason = "GetThreadTimes has no safe std equivalent")]
    let ok = unsafe {
        GetThreadTimes(
            GetCurrentThread(),
            &raw mut created,
            &raw mut exited,
            &raw mut kernel,
            &raw mut user,
        )
    };
    if ok == 0 {
        return Duration::ZERO;
    }
    let hundred_ns = |t: FILETIME| (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime);
    Duration::from_nanos((hundred_ns(kernel) + hundred_ns(user)) * 100)
}

/// One frame: (CPU time, wall time).
fn frame(ctx: &egui::Context, app: &mut App) -> (Duration, Duration) {
    let start = Instant::now();
    let cpu = thread_cpu_time();
    let mut output = ctx.run_ui(raw_input(), |ui| app.show(ui));
    // No GPU here: the font atlas uploads are dropped.
    output.textures_delta.clear();
    let primitives = ctx.tessellate(output.shapes, output.pixels_per_point);
    std::hint::black_box(primitives);
    (thread_cpu_time() - cpu, start.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "index"
    )]
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx]
}

/// Median and p90 of the CPU time, and the median wall time.
struct Figures {
    median: Duration,
    p90: Duration,
    wall: Duration,
}

fn measure(ctx: &egui::Context, app: &mut App) -> Figures {
    for _ in 0..WARMUP {
        frame(ctx, app);
    }
    let (mut cpu, mut wall): (Vec<Duration>, Vec<Duration>) =
        (0..FRAMES).map(|_| frame(ctx, app)).unzip();
    cpu.sort();
    wall.sort();
    Figures {
        median: percentile(&cpu, 0.5),
        p90: percentile(&cpu, 0.9),
        wall: percentile(&wall, 0.5),
    }
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The targets from the issue, in ms: (blocks, view, median at most).
const TARGETS: [(usize, View, f64); 3] = [
    (500, View::OneToOne, 8.0),
    (500, View::Fit, 12.0),
    (2000, View::Fit, 40.0),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum View {
    Fit,
    OneToOne,
}

impl View {
    fn name(self) -> &'static str {
        match self {
            View::Fit => "fit",
            View::OneToOne => "1:1",
        }
    }
}

fn env_list(name: &str) -> Option<Vec<String>> {
    let value = std::env::var(name).ok()?;
    Some(value.split(',').map(|s| s.trim().to_owned()).collect())
}

/// Frame time of the app with an empty graph: the cost of everything but the canvas's
/// nodes and wires, measured in the same run so that a noisy machine shows in the ratios.
fn baseline(paths: &AppPaths) -> Figures {
    let ctx = egui::Context::default();
    let mut app = App::new(&GraphDoc::new("empty"), None, paths);
    frame(&ctx, &mut app);
    measure(&ctx, &mut app)
}

fn main() {
    let paths = AppPaths {
        run_log: None,
        data_dir: None,
        workspace: None,
        credentials_dir: None,
    };
    let out_dir = std::env::var_os("AGENTLOOM_BENCH_GRAPHS").map(std::path::PathBuf::from);
    let sizes: Vec<usize> = env_list("AGENTLOOM_BENCH_SIZES").map_or_else(
        || vec![100, 500, 2000],
        |l| l.iter().filter_map(|n| n.parse().ok()).collect(),
    );
    let views: Vec<View> = env_list("AGENTLOOM_BENCH_VIEWS").map_or_else(
        || vec![View::Fit, View::OneToOne],
        |l| {
            l.iter()
                .filter_map(|n| {
                    [View::Fit, View::OneToOne]
                        .into_iter()
                        .find(|v| v.name() == n)
                })
                .collect()
        },
    );

    let base = baseline(&paths);
    println!(
        "baseline (empty graph, whole app): median {:.3} ms, p90 {:.3} ms CPU ({:.3} ms wall)",
        ms(base.median),
        ms(base.p90),
        ms(base.wall)
    );
    println!("CPU time per frame; x_base = median / baseline median; wall = median wall time");
    println!("blocks  wires  view  median_ms  p90_ms  x_base  target_ms  wall_ms  rss_mib");
    let mut missed = 0;
    for blocks in sizes {
        let doc = graph(blocks);
        if let Some(dir) = &out_dir {
            let _ = std::fs::create_dir_all(dir);
            let _ = std::fs::write(
                dir.join(format!("bench-{blocks}.agentloom.json")),
                doc.to_json_string(),
            );
        }
        let ctx = egui::Context::default();
        let mut app = App::new(&doc, None, &paths);
        // The first frame lays out what is on screen; fit uses the measured sizes from then on.
        frame(&ctx, &mut app);
        for &view in &views {
            app.send(match view {
                View::Fit => Command::FitView,
                View::OneToOne => Command::ActualSize,
            });
            frame(&ctx, &mut app);
            let f = measure(&ctx, &mut app);
            let rss = rss_kib().map_or(0.0, |k| k as f64 / 1024.0);
            let target = TARGETS
                .iter()
                .find(|(b, v, _)| *b == blocks && *v == view)
                .map(|t| t.2);
            let target_text = target.map_or_else(|| "-".to_owned(), |t| format!("{t:.0}"));
            if target.is_some_and(|t| ms(f.median) > t) {
                missed += 1;
            }
            println!(
                "{blocks:>6}  {:>5}  {:<4}  {:>9.2}  {:>6.2}  {:>6.1}  {target_text:>9}  {:>7.2}  {rss:>7.1}",
                doc.edges.len(),
                view.name(),
                ms(f.median),
                ms(f.p90),
                f.median.as_secs_f64() / base.median.as_secs_f64(),
                ms(f.wall),
            );
        }
    }
    let end = baseline(&paths);
    println!(
        "baseline again at the end: median {:.3} ms, p90 {:.3} ms CPU{}",
        ms(end.median),
        ms(end.p90),
        if missed == 0 {
            String::new()
        } else {
            format!("; {missed} target(s) missed")
        }
    );
}
