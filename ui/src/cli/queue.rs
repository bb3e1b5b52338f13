//! `agentloom queue --nats URL`: the queue's depth, what the workers hold, the requests
//! moved aside and why; `--retry RUN_ID` runs a dead request again as a new run.

use agentloom_core::Escaped;

use super::{EXIT_FAILED, EXIT_INVALID, async_runtime};
use crate::remote::Nats;

#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    /// The NATS server (`nats://host:4222`; see `agentloom worker --help`).
    #[arg(long, value_name = "URL", env = "AGENTLOOM_NATS")]
    pub nats: String,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Run this dead request again, as a new run (its id is printed).
    #[arg(long, value_name = "RUN_ID")]
    pub retry: Option<String>,
}

pub fn queue_command(args: QueueArgs) -> anyhow::Result<i32> {
    let runtime = async_runtime()?;
    let nats = match runtime.block_on(Nats::connect(&args.nats, "agentloom queue")) {
        Ok(nats) => nats,
        Err(err) => {
            eprintln!("{err}");
            return Ok(EXIT_FAILED);
        }
    };
    if let Some(run_id) = &args.retry {
        return match runtime.block_on(nats.retry_dead(run_id)) {
            Ok(new_id) => {
                out!("{new_id}");
                eprintln!("run {} queued again as run {new_id}", Escaped(run_id));
                Ok(0)
            }
            Err(message) => {
                eprintln!("{}", Escaped(&message));
                Ok(EXIT_INVALID)
            }
        };
    }
    let state = match runtime.block_on(nats.queue_state()) {
        Ok(state) => state,
        Err(err) => {
            eprintln!("{err}");
            return Ok(EXIT_FAILED);
        }
    };
    if args.json {
        out!("{}", serde_json::to_string_pretty(&state)?);
        return Ok(0);
    }
    out!(
        "{} queued, {} being run, {} handed out again; {} dead",
        state.queued,
        state.running,
        state.redelivered,
        state.dead.len()
    );
    for dead in &state.dead {
        out!(
            "dead {}  {}  (moved aside by {})",
            Escaped(&dead.run_id),
            Escaped(&dead.error),
            Escaped(&dead.worker)
        );
    }
    Ok(0)
}
