//! Who is up: every worker answers `agentloom.workers.status` with its name, since when it
//! runs, and the runs it has now (core NATS request and replies, nothing stored).

use std::time::Duration;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};

use super::{Nats, RemoteError};

/// The subject workers answer on.
pub const STATUS_SUBJECT: &str = "agentloom.workers.status";

/// One worker's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub name: String,
    /// When it started (milliseconds since the Unix epoch).
    pub since_ms: i64,
    pub concurrency: usize,
    /// It takes no new run (it drains before it stops).
    pub draining: bool,
    pub runs: Vec<RunningRun>,
}

/// A run a worker has now.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunningRun {
    pub run_id: String,
    pub since_ms: i64,
}

impl Nats {
    /// Asks every worker who it is and what it runs; the answers that came within `wait`,
    /// by name.
    pub async fn worker_statuses(&self, wait: Duration) -> Result<Vec<WorkerStatus>, RemoteError> {
        let client = self.js.client();
        let inbox = client.new_inbox();
        let mut answers = client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| self.error("asking the workers", e))?;
        client
            .publish_with_reply(STATUS_SUBJECT, inbox, Vec::new().into())
            .await
            .map_err(|e| self.error("asking the workers", e))?;
        let mut statuses = Vec::new();
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                answer = answers.next() => match answer {
                    Some(answer) => match serde_json::from_slice::<WorkerStatus>(&answer.payload) {
                        Ok(status) => statuses.push(status),
                        Err(err) => tracing::warn!(%err, "a worker's answer is not readable"),
                    },
                    None => break,
                },
                () = &mut deadline => break,
            }
        }
        statuses.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(statuses)
    }
}
