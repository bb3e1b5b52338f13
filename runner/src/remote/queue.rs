//! What an operator sees of the queue: how many runs wait, how many are being run, and the
//! requests moved aside (`AGENTLOOM_DEAD`) with why; a dead request run again as a new run.

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use futures::StreamExt as _;
use serde::Serialize;

use super::{
    DEAD_STREAM, ERROR_HEADER, Nats, QUEUE_STREAM, RemoteError, RunRequest, WORKER_HEADER,
    WORKERS_CONSUMER, is_plain_run_id,
};

/// The queue as it is now.
#[derive(Debug, Serialize)]
pub struct QueueState {
    /// Work items stored and not yet acknowledged (waiting, or being run).
    pub queued: u64,
    /// Handed to a worker and not yet acknowledged.
    pub running: u64,
    /// Handed out again after their worker went silent.
    pub redelivered: u64,
    pub dead: Vec<DeadRequest>,
}

/// A request moved aside instead of being delivered again.
#[derive(Debug, Serialize)]
pub struct DeadRequest {
    pub run_id: String,
    pub error: String,
    pub worker: String,
    /// Its place in the dead stream.
    pub sequence: u64,
}

impl Nats {
    /// The queue's depth, what the workers hold and every dead request.
    pub async fn queue_state(&self) -> Result<QueueState, RemoteError> {
        let mut queue = self
            .js
            .get_stream(QUEUE_STREAM)
            .await
            .map_err(|e| self.error(format!("stream {QUEUE_STREAM}"), e))?;
        let queued = queue
            .info()
            .await
            .map_err(|e| self.error(format!("stream {QUEUE_STREAM}"), e))?
            .state
            .messages;
        // No worker ever started: nothing is held.
        let (running, redelivered) = match queue.consumer_info(WORKERS_CONSUMER).await {
            Ok(info) => (info.num_ack_pending as u64, info.num_redelivered as u64),
            Err(_) => (0, 0),
        };
        Ok(QueueState {
            queued,
            running,
            redelivered,
            dead: self.dead_requests().await?,
        })
    }

    async fn dead_requests(&self) -> Result<Vec<DeadRequest>, RemoteError> {
        let what = || format!("stream {DEAD_STREAM}");
        let mut stream = self
            .js
            .get_stream(DEAD_STREAM)
            .await
            .map_err(|e| self.error(what(), e))?;
        let state = stream
            .info()
            .await
            .map_err(|e| self.error(what(), e))?
            .state
            .clone();
        if state.messages == 0 {
            return Ok(Vec::new());
        }
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                deliver_policy: DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| self.error(what(), e))?;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| self.error(what(), e))?;
        let mut dead = Vec::new();
        while let Some(message) = messages.next().await {
            let message = message.map_err(|e| self.error(what(), e))?;
            let sequence = message
                .info()
                .map(|info| info.stream_sequence)
                .map_err(|e| self.error(what(), e))?;
            let header = |name: &str| {
                message
                    .headers
                    .as_ref()
                    .and_then(|headers| headers.get(name))
                    .map(|value| value.as_str().to_owned())
                    .unwrap_or_default()
            };
            dead.push(DeadRequest {
                run_id: message
                    .subject
                    .as_str()
                    .strip_prefix("agentloom.dead.")
                    .unwrap_or_default()
                    .to_owned(),
                error: header(ERROR_HEADER),
                worker: header(WORKER_HEADER),
                sequence,
            });
            if sequence >= state.last_sequence {
                break;
            }
        }
        Ok(dead)
    }

    /// Runs dead request `run_id` again as a new run (its request copied under a new id)
    /// and removes it from the dead requests; returns the new run's id.
    pub async fn retry_dead(&self, run_id: &str) -> Result<String, String> {
        if !is_plain_run_id(run_id) {
            return Err(format!(
                "`{}` is not a run id",
                agentloom_core::escape_control(run_id)
            ));
        }
        let dead = self.dead_requests().await.map_err(|e| e.to_string())?;
        let Some(entry) = dead.iter().find(|entry| entry.run_id == run_id) else {
            return Err(format!(
                "run {run_id} is not among the dead requests (`agentloom queue` lists them)"
            ));
        };
        let Some(record) = self
            .last_record(run_id, "request")
            .await
            .map_err(|e| e.to_string())?
        else {
            return Err(format!(
                "run {run_id}: its request is no longer on the server; submit the graph again"
            ));
        };
        let mut request: RunRequest = serde_json::from_slice(&record.payload)
            .map_err(|e| format!("run {run_id}: the request is not readable: {e}"))?;
        request.run_id = agentloom_engine::new_run_id();
        self.submit(&request, None)
            .await
            .map_err(|e| e.to_string())?;
        let stream = self
            .js
            .get_stream_no_info(DEAD_STREAM)
            .await
            .map_err(|e| e.to_string())?;
        if let Err(err) = stream.delete_message(entry.sequence).await {
            tracing::warn!(%err, run_id, "the retried request stays among the dead");
        }
        Ok(request.run_id)
    }
}
