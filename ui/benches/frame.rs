//! Frame cost of the canvas: builds graphs of 100, 500 and 2,000 blocks with twice as many
//! wires and prints the CPU time of one frame (egui `Context::run_ui` plus tessellation,
//! timed directly) at fit-to-view and at 1:1 zoom, median and p90.
//!
//! `cargo bench -p agentloom --bench frame` (set `AGENTLOOM_BENCH_GRAPHS=DIR` to also write
//! the generated graphs there, e.g. to open the 500-block one in the app).

use std::time::{Duration, Instant};

use agentloom::app::{App, AppPaths, Command};
use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FRAMES: usize = 40;
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

fn frame(ctx: &egui::Context, app: &mut App) -> Duration {
    let start = Instant::now();
    let mut output = ctx.run_ui(raw_input(), |ui| app.show(ui));
    // No GPU here: the font atlas uploads are dropped.
    output.textures_delta.clear();
    let primitives = ctx.tessellate(output.shapes, output.pixels_per_point);
    std::hint::black_box(primitives);
    start.elapsed()
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

fn measure(ctx: &egui::Context, app: &mut App) -> (Duration, Duration) {
    for _ in 0..WARMUP {
        frame(ctx, app);
    }
    let mut times: Vec<Duration> = (0..FRAMES).map(|_| frame(ctx, app)).collect();
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.9))
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let paths = AppPaths {
        run_log: None,
        data_dir: None,
        workspace: None,
    };
    let out_dir = std::env::var_os("AGENTLOOM_BENCH_GRAPHS").map(std::path::PathBuf::from);
    println!("blocks  wires  view   median_ms  p90_ms  rss_mib");
    for blocks in [100, 500, 2000] {
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
        // The first frame lays out every node; fit uses the measured sizes from then on.
        frame(&ctx, &mut app);
        app.send(Command::FitView);
        frame(&ctx, &mut app);
        let (fit_median, fit_p90) = measure(&ctx, &mut app);
        let rss = rss_kib().map_or(0.0, |k| k as f64 / 1024.0);
        println!(
            "{blocks:>6}  {:>5}  fit    {:>9.2}  {:>6.2}  {rss:>7.1}",
            doc.edges.len(),
            ms(fit_median),
            ms(fit_p90)
        );
        app.send(Command::ActualSize);
        frame(&ctx, &mut app);
        let (one_median, one_p90) = measure(&ctx, &mut app);
        println!(
            "{blocks:>6}  {:>5}  1:1    {:>9.2}  {:>6.2}",
            doc.edges.len(),
            ms(one_median),
            ms(one_p90)
        );
    }
}
