//! Who runs a run: an owner record on `agentloom.run.<id>.owner`, written only when the
//! record the writer looked at is still the last one (JetStream's expected last subject
//! sequence). A second queue entry for a run (a client retrying a publish whose
//! acknowledgement it lost) finds the run taken and is dropped, instead of running the
//! whole run twice.

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use serde_json::json;

use super::{Nats, RemoteError, run_subject};

/// How taking a run went.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// This worker runs it now; `fence` is the sequence of its owner record: the run is
    /// still this worker's while that record is the last one.
    Taken { fence: u64 },
    /// Another worker took it first (or took it over meanwhile).
    Elsewhere,
}

impl Nats {
    /// Takes run `run_id` for `worker` when nobody has: a first delivery of a new run.
    pub async fn claim_new(&self, run_id: &str, worker: &str) -> Result<Claim, RemoteError> {
        self.write_owner(run_id, worker, 0).await
    }

    /// Takes run `run_id` over for `worker` from whoever had it (a redelivery after its
    /// worker went silent, a decision resuming it), unless another worker took it over
    /// since the record read here.
    pub async fn take_over(&self, run_id: &str, worker: &str) -> Result<Claim, RemoteError> {
        let last = self
            .last_record(run_id, "owner")
            .await?
            .map_or(0, |record| record.sequence);
        self.write_owner(run_id, worker, last).await
    }

    async fn write_owner(
        &self,
        run_id: &str,
        worker: &str,
        expected: u64,
    ) -> Result<Claim, RemoteError> {
        let what = format!("taking run {run_id}");
        let record = json!({
            "worker": worker,
            "at_ms": chrono::Utc::now().timestamp_millis(),
        });
        let message = PublishMessage::build()
            .payload(serde_json::to_vec(&record).unwrap_or_default().into())
            .expected_last_subject_sequence(expected);
        let ack = self
            .js
            .send_publish(run_subject(run_id, "owner"), message)
            .await
            .map_err(|e| self.error(&what, e))?;
        match ack.await {
            Ok(ack) => Ok(Claim::Taken {
                fence: ack.sequence,
            }),
            Err(err) if err.kind() == PublishErrorKind::WrongLastSequence => Ok(Claim::Elsewhere),
            Err(err) => Err(self.error(&what, err)),
        }
    }

    /// Whether run `run_id` is still the worker's whose owner record has sequence `fence`
    /// (nobody took it over since).
    pub async fn still_owns(&self, run_id: &str, fence: u64) -> Result<bool, RemoteError> {
        Ok(self
            .last_record(run_id, "owner")
            .await?
            .is_some_and(|record| record.sequence == fence))
    }
}
