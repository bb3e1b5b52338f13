//! `agentloom workers --nats URL`: who is up, since when, and what each runs now.

use std::time::Duration;

use agentloom_core::Escaped;

use super::{EXIT_FAILED, async_runtime};
use crate::remote::Nats;

#[derive(Debug, clap::Args)]
pub struct WorkersArgs {
    /// The NATS server (`nats://host:4222`; see `agentloom worker --help`).
    #[arg(long, value_name = "URL", env = "AGENTLOOM_NATS")]
    pub nats: String,
    /// Print exactly one JSON array on stdout.
    #[arg(long)]
    pub json: bool,
    /// How long to wait for the workers' answers, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub wait_ms: u64,
}

pub fn workers_command(args: WorkersArgs) -> anyhow::Result<i32> {
    let runtime = async_runtime()?;
    let asked = runtime.block_on(async {
        let nats = Nats::connect(&args.nats, "agentloom workers").await?;
        nats.worker_statuses(Duration::from_millis(args.wait_ms))
            .await
    });
    let statuses = match asked {
        Ok(statuses) => statuses,
        Err(err) => {
            eprintln!("{err}");
            return Ok(EXIT_FAILED);
        }
    };
    if args.json {
        out!("{}", serde_json::to_string_pretty(&statuses)?);
        return Ok(0);
    }
    if statuses.is_empty() {
        eprintln!("no worker answered within {} ms", args.wait_ms);
    }
    let now = chrono::Utc::now().timestamp_millis();
    let ago = |ms: i64| format!("{} s", (now - ms).max(0) / 1000);
    for status in &statuses {
        out!(
            "{}  up {}  {}/{} runs{}",
            Escaped(&status.name),
            ago(status.since_ms),
            status.runs.len(),
            status.concurrency,
            if status.draining { "  draining" } else { "" }
        );
        for run in &status.runs {
            out!("  {}  for {}", Escaped(&run.run_id), ago(run.since_ms));
        }
    }
    Ok(0)
}
