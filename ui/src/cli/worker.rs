//! `agentloom worker --nats URL`: runs from a NATS JetStream queue, on this machine.

use std::path::PathBuf;
use std::time::Duration;

use crate::remote::worker::{KeepWorkspaces, WorkerConfig, serve};

use super::{EXIT_FAILED, EXIT_INVALID, async_runtime, interrupt, workspace_dir};

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The NATS server (`nats://host:4222`, comma-separated for a cluster; `tls://` for TLS;
    /// NATS_CREDS names a credentials file, NATS_CA a CA certificate).
    #[arg(long, value_name = "URL", env = "AGENTLOOM_NATS")]
    pub nats: String,
    /// The directory under which each run gets a folder of its own, `runs/<RUN_ID>`, made
    /// when a block first writes (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Every run reads and writes the workspace itself, seeing the files of the others:
    /// only for a queue that only people you trust can publish to.
    #[arg(long)]
    pub shared_workspace: bool,
    /// Which runs' folders stay once the run ended: `failed` (the default: a completed run's
    /// folder is removed, a failed or cancelled one's kept to look into), `all`, or `none`.
    /// A run waiting for a decision or handed back keeps its folder.
    #[arg(long, value_name = "WHICH", value_enum, default_value_t = KeepWorkspaces::Failed)]
    pub keep_workspaces: KeepWorkspaces,
    /// The NKey public key (`U…`) of a person whose decisions (`agentloom approve --nats
    /// --sign-with`) may resume a waiting run (repeatable). Without one, no decision from
    /// the queue is taken: anyone who may publish there could approve a side effect.
    #[arg(long = "approver-key", value_name = "PUBLIC_KEY")]
    pub approver_keys: Vec<String>,
    /// The run log this worker records its runs in (default: the per-user data directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// How many runs at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Seconds a run may go without a sign of life before another worker takes it over
    /// (resuming after the nodes that finished). One setting for the whole fleet: given,
    /// it is set for every worker; not given, this worker takes the fleet's (30 for a new
    /// queue).
    #[arg(long, value_name = "SECS")]
    pub ack_wait: Option<u64>,
    /// Deliveries of one request before it is moved aside as failed.
    #[arg(long, default_value_t = 5)]
    pub max_deliver: i64,
    /// This worker's name, shown with the runs it ran (default: host name and process id).
    #[arg(long)]
    pub name: Option<String>,
    /// Trust every request: runs get this machine's credentials, start the MCP servers
    /// their graph names and run without safe mode. Without it a request runs untrusted:
    /// no credential, no MCP server, side effects wait for approval. Only for a queue that
    /// only people you trust can publish to.
    #[arg(long)]
    pub trust: bool,
    /// Seconds a worker told to stop (SIGTERM, as systemd, Docker and Kubernetes stop)
    /// lets its runs under way finish before it hands the rest back to the queue; it takes
    /// no new run meanwhile. Ctrl-C hands them back at once.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub drain_timeout: u64,
}

pub fn worker_command(args: WorkerArgs) -> anyhow::Result<i32> {
    if args.concurrency == 0 || args.ack_wait == Some(0) || args.max_deliver < 1 {
        eprintln!("--concurrency, --ack-wait and --max-deliver must be at least 1");
        return Ok(EXIT_INVALID);
    }
    let Some(workspace) = workspace_dir(args.workspace)? else {
        return Ok(EXIT_INVALID);
    };
    let store = crate::runner::open_run_log(args.db)?;
    let name = args.name.unwrap_or_else(default_name);
    let config = WorkerConfig {
        url: args.nats,
        name,
        workspace,
        shared_workspace: args.shared_workspace,
        keep_workspaces: args.keep_workspaces,
        approver_keys: args.approver_keys,
        concurrency: args.concurrency,
        ack_wait: args.ack_wait.map(Duration::from_secs),
        max_deliver: args.max_deliver,
        trust: args.trust,
        credentials: crate::runner::Credentials::Default,
    };
    let stop = crate::remote::worker::Stop::default();
    interrupt::watch_drain(stop.clone(), Duration::from_secs(args.drain_timeout));
    let runtime = async_runtime()?;
    let served = runtime.block_on(serve(config, store, stop));
    runtime.shutdown_timeout(Duration::from_millis(500));
    match served {
        Ok(()) => Ok(0),
        Err(err) => {
            eprintln!("{err}");
            Ok(EXIT_FAILED)
        }
    }
}

fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    format!("{host}-{}", std::process::id())
}
