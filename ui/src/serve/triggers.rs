//! Unattended runs: a webhook (POST a JSON object of inputs, get the outputs back) and a
//! cron schedule (one run at each tick; a tick that comes while the previous run is still
//! going is skipped and logged).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use agentloom_core::{Value, ValueMap};
use agentloom_engine::RunStatus;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::runner::headless::{GraphRunner, outputs_as_json};

/// Where webhook and scheduled runs work.
pub struct TriggerState {
    pub runner: Arc<GraphRunner>,
    pub workspace: PathBuf,
    pub shutdown: CancellationToken,
}

/// `POST path` with a JSON object body: its keys are run inputs; answers the outputs.
pub fn webhook_router(path: &str, state: Arc<TriggerState>) -> Router {
    Router::new().route(path, post(webhook)).with_state(state)
}

async fn webhook(State(state): State<Arc<TriggerState>>, body: Bytes) -> Response {
    let fail = |status: StatusCode, message: String| {
        (status, Json(json!({"error": message}))).into_response()
    };
    let inputs = if body.iter().all(u8::is_ascii_whitespace) {
        ValueMap::new()
    } else {
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Object(object)) => object
                .into_iter()
                .map(|(name, value)| (name, Value::from_json(value)))
                .collect(),
            Ok(_) => {
                return fail(
                    StatusCode::BAD_REQUEST,
                    "the body must be a JSON object of run inputs, e.g. {\"topic\": \"rust\"}"
                        .to_owned(),
                );
            }
            Err(e) => {
                return fail(
                    StatusCode::BAD_REQUEST,
                    format!("the body is not valid JSON: {e}"),
                );
            }
        }
    };
    if let Err(message) = state.runner.check_inputs(&inputs) {
        return fail(StatusCode::BAD_REQUEST, message);
    }
    let run = state
        .runner
        .run(inputs, &state.workspace, state.shutdown.child_token())
        .await;
    let report = run.report;
    if report.status == RunStatus::Completed {
        (StatusCode::OK, Json(outputs_as_json(&report.outputs))).into_response()
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({
                "error": format!(
                    "the run {}: {}",
                    report.status.as_str(),
                    report.error.unwrap_or_default()
                ),
                "run_id": report.run_id,
            })),
        )
            .into_response()
    }
}

/// A parsed cron expression (5 fields, or 6 with seconds first).
pub fn parse_schedule(text: &str) -> Result<croner::Cron, String> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .build()
        .parse(text)
        .map_err(|e| format!("--schedule `{text}`: not a cron expression: {e}"))
}

/// What the schedule did so far.
#[derive(Default)]
pub struct ScheduleStats {
    pub started: AtomicU64,
    pub skipped: AtomicU64,
}

/// Runs the graph at every tick of `cron` until `shutdown`.
pub async fn run_schedule(cron: croner::Cron, state: Arc<TriggerState>, stats: Arc<ScheduleStats>) {
    let (ticks, received) = tokio::sync::mpsc::channel(1);
    let ticker = tokio::spawn(cron_ticks(cron, ticks));
    run_on_ticks(received, state, stats).await;
    ticker.abort();
}

/// Sends the time of each tick of `cron` when it comes.
async fn cron_ticks(
    cron: croner::Cron,
    ticks: tokio::sync::mpsc::Sender<chrono::DateTime<chrono::Utc>>,
) {
    let mut after = chrono::Utc::now();
    loop {
        let next = match cron.find_next_occurrence(&after, false) {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!("the schedule has no next time: {e}");
                return;
            }
        };
        let wait = (next - chrono::Utc::now()).to_std().unwrap_or_default();
        tokio::time::sleep(wait).await;
        if ticks.send(next).await.is_err() {
            return;
        }
        after = next;
    }
}

/// Starts a run at each tick unless the previous run is still going (then the tick is
/// skipped and logged), until `shutdown` or the end of the ticks.
async fn run_on_ticks(
    mut ticks: tokio::sync::mpsc::Receiver<chrono::DateTime<chrono::Utc>>,
    state: Arc<TriggerState>,
    stats: Arc<ScheduleStats>,
) {
    let running = Arc::new(AtomicBool::new(false));
    let mut runs = tokio::task::JoinSet::new();
    loop {
        let tick = tokio::select! {
            () = state.shutdown.cancelled() => break,
            tick = ticks.recv() => match tick {
                Some(tick) => tick,
                None => break,
            },
        };
        while runs.try_join_next().is_some() {}
        if running.swap(true, Ordering::SeqCst) {
            stats.skipped.fetch_add(1, Ordering::SeqCst);
            tracing::warn!(
                "scheduled run at {} skipped: the previous run of {} is still going",
                tick.to_rfc3339(),
                state.runner.name()
            );
            continue;
        }
        stats.started.fetch_add(1, Ordering::SeqCst);
        let state = state.clone();
        let running = running.clone();
        runs.spawn(async move {
            let run = state
                .runner
                .run(
                    ValueMap::new(),
                    &state.workspace,
                    state.shutdown.child_token(),
                )
                .await;
            let report = run.report;
            if report.status != RunStatus::Completed {
                tracing::warn!(
                    "scheduled run {} {}: {}",
                    report.run_id,
                    report.status.as_str(),
                    report.error.unwrap_or_default()
                );
            }
            running.store(false, Ordering::SeqCst);
        });
    }
    // Runs in progress were cancelled with the shutdown token; let them record their end.
    while runs.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use std::time::Duration;

    use super::*;

    /// A graph whose run takes `ms` milliseconds.
    fn slow_graph(dir: &std::path::Path, ms: u64) -> std::path::PathBuf {
        let path = dir.join("slow.agentloom.json");
        let graph = json!({
            "format": "agentloom.graph", "version": 1, "name": "Slow",
            "nodes": [
                {"id": "start", "block": "graph.input", "config": {"name": "value", "type": "text", "default": "x"}},
                {"id": "wait", "block": "control.delay", "config": {"ms": ms}},
                {"id": "out", "block": "graph.output", "config": {"name": "value"}}
            ],
            "edges": [
                {"from": ["start", "value"], "to": ["wait", "value"]},
                {"from": ["wait", "value"], "to": ["out", "value"]}
            ]
        });
        std::fs::write(&path, graph.to_string()).unwrap();
        path
    }

    struct Ticks {
        send: tokio::sync::mpsc::Sender<chrono::DateTime<chrono::Utc>>,
        stats: Arc<ScheduleStats>,
        shutdown: CancellationToken,
        loop_done: tokio::task::JoinHandle<()>,
    }

    fn schedule_with_ticks(ms: u64) -> (Ticks, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let runner = GraphRunner::load(&slow_graph(dir.path(), ms), None, true).unwrap();
        let shutdown = CancellationToken::new();
        let state = Arc::new(TriggerState {
            runner: Arc::new(runner),
            workspace: dir.path().to_owned(),
            shutdown: shutdown.clone(),
        });
        let stats = Arc::new(ScheduleStats::default());
        let (send, received) = tokio::sync::mpsc::channel(1);
        let loop_done = tokio::spawn(run_on_ticks(received, state, stats.clone()));
        (
            Ticks {
                send,
                stats,
                shutdown,
                loop_done,
            },
            dir,
        )
    }

    fn counts(stats: &ScheduleStats) -> (u64, u64) {
        (
            stats.started.load(Ordering::SeqCst),
            stats.skipped.load(Ordering::SeqCst),
        )
    }

    #[tokio::test]
    async fn a_tick_during_a_run_is_skipped_and_shutdown_stops_the_run() {
        let (ticks, _dir) = schedule_with_ticks(30_000);
        ticks.send.send(chrono::Utc::now()).await.unwrap();
        ticks.send.send(chrono::Utc::now()).await.unwrap();
        ticks.send.send(chrono::Utc::now()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(counts(&ticks.stats), (1, 2));
        // The 30 s run is cancelled: the loop ends at once.
        ticks.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), ticks.loop_done)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_tick_after_the_run_ended_starts_the_next() {
        let (ticks, _dir) = schedule_with_ticks(50);
        ticks.send.send(chrono::Utc::now()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        ticks.send.send(chrono::Utc::now()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(counts(&ticks.stats), (2, 0));
        drop(ticks.send);
        ticks.loop_done.await.unwrap();
    }

    #[test]
    fn schedules_with_and_without_seconds() {
        assert!(parse_schedule("*/5 * * * *").is_ok());
        assert!(parse_schedule("0 */5 * * * *").is_ok());
        let err = parse_schedule("every day").unwrap_err();
        assert!(
            err.starts_with("--schedule `every day`: not a cron expression"),
            "{err}"
        );
    }
}
