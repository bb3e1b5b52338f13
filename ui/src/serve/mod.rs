//! `agentloom serve`: one graph behind HTTP on loopback. The Agent Protocol routes are always
//! there; a webhook route and a cron schedule are optional. Every route is behind
//! [`guard::Guard`].

pub mod agent_protocol;
pub mod guard;
pub mod triggers;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::runner::headless::GraphRunner;

/// What `agentloom serve` serves.
pub struct ServeConfig {
    pub runner: Arc<GraphRunner>,
    /// One folder per Agent Protocol task is made here.
    pub tasks_dir: PathBuf,
    /// Webhook and scheduled runs work here.
    pub workspace: PathBuf,
    /// The webhook route, e.g. `/hooks/build`.
    pub webhook: Option<String>,
    pub schedule: Option<croner::Cron>,
    /// Who is answered: the server's own Host and Origin, and the token if one was set.
    pub guard: Arc<guard::Guard>,
}

/// The whole HTTP interface for `config`.
pub fn router(config: &ServeConfig, shutdown: &CancellationToken) -> Router {
    let protocol = Arc::new(agent_protocol::AgentProtocol::new(
        config.runner.clone(),
        config.tasks_dir.clone(),
        shutdown.clone(),
    ));
    let mut router = agent_protocol::router(protocol);
    if let Some(path) = &config.webhook {
        let state = Arc::new(triggers::TriggerState {
            runner: config.runner.clone(),
            workspace: config.workspace.clone(),
            shutdown: shutdown.clone(),
        });
        router = router.merge(triggers::webhook_router(path, state));
    }
    router
        .fallback(|uri: axum::http::Uri| async move {
            (
                StatusCode::NOT_FOUND,
                axum::Json(json!({"error": format!("no route {uri}")})),
            )
                .into_response()
        })
        .layer(axum::middleware::from_fn_with_state(
            config.guard.clone(),
            guard::check,
        ))
}

/// Serves until `shutdown` is cancelled, then stops the runs in progress and returns.
pub async fn serve(
    config: ServeConfig,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = router(&config, &shutdown);
    let schedule = config.schedule.clone().map(|cron| {
        let state = Arc::new(triggers::TriggerState {
            runner: config.runner.clone(),
            workspace: config.workspace.clone(),
            shutdown: shutdown.clone(),
        });
        tokio::spawn(triggers::run_schedule(
            cron,
            state,
            Arc::new(triggers::ScheduleStats::default()),
        ))
    });
    let stop = shutdown.clone();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Some(schedule) = schedule {
        let _ = schedule.await;
    }
    served
}
