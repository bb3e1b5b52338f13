//! `agentloom serve GRAPH`: the graph as an Agent Protocol server, optionally with a webhook
//! and a schedule. Loopback by default; Ctrl-C stops the runs in progress and exits.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use super::EXIT_INVALID;
use crate::remote::Nats;
use crate::runner::headless::GraphRunner;
use crate::runner::open_run_log;
use crate::serve::{ServeConfig, guard, serve, triggers::parse_schedule};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    pub graph: PathBuf,
    /// The port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The address to listen on. Anything but loopback exposes the graph to the network,
    /// and needs --token.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Require `Authorization: Bearer TOKEN` on every request.
    #[arg(
        long,
        env = "AGENTLOOM_SERVE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// The folder Agent Protocol tasks get their directories in (default: ./agentloom-tasks).
    #[arg(long)]
    pub tasks_dir: Option<PathBuf>,
    /// The directory webhook and scheduled runs work in (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Also run the graph on this cron schedule (`MIN HOUR DOM MON DOW`, or with seconds first).
    #[arg(long, value_name = "CRON")]
    pub schedule: Option<String>,
    /// Also accept `POST PATH` with a JSON object of run inputs; answers the outputs as JSON.
    #[arg(long, value_name = "PATH")]
    pub webhook: Option<String>,
    /// The run log database (default: the per-user data directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Trust the graph file without asking (see `agentloom trust`).
    #[arg(long)]
    pub trust: bool,
    /// Queue every run on this NATS server for `agentloom worker`s instead of running it
    /// here (files a run writes stay on its worker).
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
}

pub fn serve_command(args: ServeArgs) -> anyhow::Result<i32> {
    let schedule = match args.schedule.as_deref().map(parse_schedule).transpose() {
        Ok(schedule) => schedule,
        Err(message) => {
            eprintln!("{message}");
            return Ok(EXIT_INVALID);
        }
    };
    let webhook = match args.webhook.as_deref() {
        Some(path) if !path.starts_with('/') || path.starts_with("/ap/") || path.contains('{') => {
            eprintln!(
                "--webhook `{path}`: give a path starting with `/`, outside /ap/, without `{{`"
            );
            return Ok(EXIT_INVALID);
        }
        other => other.map(str::to_owned),
    };
    let token = args.token.clone().filter(|t| !t.trim().is_empty());
    if token.is_none() && !guard::is_loopback_host(&args.host) {
        eprintln!(
            "--host {}: listening beyond loopback lets anyone on the network run this graph; give --token TOKEN (or set AGENTLOOM_SERVE_TOKEN) so that only requests with `Authorization: Bearer TOKEN` are answered",
            args.host
        );
        return Ok(EXIT_INVALID);
    }
    let store = open_run_log(args.db)?;
    // Requests do not wait for the run log's checkpoints.
    if let Err(err) = store.checkpoint_in_background() {
        tracing::warn!("{err}; recordings checkpoint the run log themselves");
    }
    let runtime = super::async_runtime()?;
    let runner = match GraphRunner::load(&args.graph, Some(store), args.trust) {
        Ok(runner) => {
            if let Some(note) = runner.safe_mode_note() {
                eprintln!("{note}");
            }
            match &args.nats {
                Some(url) => match runtime.block_on(Nats::connect(url, "agentloom serve")) {
                    Ok(queue) => Arc::new(runner.with_queue(queue)),
                    Err(err) => {
                        eprintln!("{err}");
                        return Ok(super::EXIT_FAILED);
                    }
                },
                None => Arc::new(runner),
            }
        }
        Err(problems) => {
            for problem in problems {
                eprintln!("{problem}");
            }
            return Ok(EXIT_INVALID);
        }
    };
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let Some(workspace) = super::workspace_dir(args.workspace)? else {
        return Ok(EXIT_INVALID);
    };
    let tasks_dir = args
        .tasks_dir
        .unwrap_or_else(|| cwd.join("agentloom-tasks"));
    std::fs::create_dir_all(&tasks_dir)
        .with_context(|| format!("cannot create the tasks folder {}", tasks_dir.display()))?;
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("cannot listen on {}:{}: {e}", args.host, args.port);
                return Ok(EXIT_INVALID);
            }
        };
        let address = listener.local_addr()?;
        eprintln!(
            "serving {} on http://{address}/ap/v1 (tasks in {})",
            runner.name(),
            tasks_dir.display()
        );
        if let Some(path) = &webhook {
            eprintln!("webhook: POST http://{address}{path}");
        }
        if let Some(text) = &args.schedule {
            eprintln!("schedule: {text}");
        }
        let shutdown = tokio_util::sync::CancellationToken::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nstopping…");
                on_signal.cancel();
            }
        });
        let config = ServeConfig {
            runner,
            tasks_dir,
            workspace,
            webhook,
            schedule,
            guard: Arc::new(guard::Guard::new(&args.host, address.port(), token)),
        };
        serve(config, listener, shutdown).await?;
        eprintln!("stopped");
        Ok(0)
    })
}
