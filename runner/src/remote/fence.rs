//! Publishing a run's events so that only the worker that owns the run can: every event
//! carries the sequence of the run's last event as this worker knows it
//! (`Nats-Expected-Last-Subject-Sequence`), so once another worker took the run over and
//! published, the server refuses this one's next event and the run stops here at once. A
//! side effect is recorded as started (`agentloom.run.<id>.effects`) after every event
//! before it is stored and the owner record is checked (again once it is stored), and only
//! then sent: a worker that takes a run over does not send again a side effect that started
//! and never finished, unless it was sent with an idempotency key (recorded with its start)
//! and is sent again with the same one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentloom_engine::{EventKind, EventSink, RunEvent, SideEffectGate};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use futures::StreamExt as _;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Nats, RemoteError, WORKER_HEADER, run_subject};

/// How long a worker keeps trying to store one record before it stops the run and hands
/// it back (well inside the ack wait of a fleet at its default).
const PUBLISH_TRIES_FOR: Duration = Duration::from_secs(20);

/// Whether the worker may still publish for the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Every event so far is stored.
    Publishing,
    /// Another worker took the run over: this one publishes and sends nothing more, and
    /// leaves the request alone (it is the other worker's now).
    Fenced,
    /// An event could not be stored (the server unreachable, or a stray event in between):
    /// the run stops here and its request is handed back, to be resumed from what is stored.
    Lost,
}

/// What the worker holds of the run it runs.
pub struct Fence {
    /// The sequence of this worker's owner record.
    pub owner: u64,
    /// The sequence of the run's last stored event, as this worker read it (0: none).
    pub last_event: u64,
    /// Cancelled when the worker loses the run: it stops at once.
    pub run: CancellationToken,
}

enum Sent {
    Event(Box<RunEvent>),
    /// Answered once every event sent before is stored (or cannot be).
    Flush(oneshot::Sender<Standing>),
}

/// Publishes a run's events in order, each stored by the server before the next is sent;
/// streamed chunks stay local (the node's finished event carries its whole output).
pub struct EventPublisher {
    pub sink: Arc<ChannelSink>,
    standing: Arc<Mutex<Standing>>,
    task: tokio::task::JoinHandle<()>,
}

pub struct ChannelSink(Mutex<Option<mpsc::UnboundedSender<Sent>>>);

impl EventSink for ChannelSink {
    fn emit(&self, event: &RunEvent) {
        if matches!(event.kind, EventKind::NodePartial { .. }) {
            return;
        }
        if let Some(tx) = &*self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            let _ = tx.send(Sent::Event(Box::new(event.clone())));
        }
    }
}

impl EventPublisher {
    /// Publishes run `run_id`'s events as `worker`'s; fenced by `fence` when given (a run
    /// this worker owns), else unconditionally (a run ended before anything ran).
    pub fn start(nats: Nats, run_id: &str, worker: &str, fence: Option<&Fence>) -> EventPublisher {
        let (tx, mut rx) = mpsc::unbounded_channel::<Sent>();
        let subject = run_subject(run_id, "events");
        let worker = worker.to_owned();
        let standing = Arc::new(Mutex::new(Standing::Publishing));
        let mut expected = fence.map(|fence| fence.last_event);
        let owner = fence.map(|fence| fence.owner);
        let run = fence.map(|fence| fence.run.clone());
        // Message ids unique to this attempt: a try sent again after its acknowledgement was
        // lost is stored once (and acknowledged with the first one's sequence).
        let attempt = agentloom_engine::new_run_id();
        let task = {
            let standing = standing.clone();
            let run_id = run_id.to_owned();
            tokio::spawn(async move {
                while let Some(sent) = rx.recv().await {
                    let event = match sent {
                        Sent::Flush(answer) => {
                            let _ = answer.send(*lock(&standing));
                            continue;
                        }
                        Sent::Event(event) => event,
                    };
                    if *lock(&standing) != Standing::Publishing {
                        continue;
                    }
                    let Ok(payload) = serde_json::to_vec(&event) else {
                        continue;
                    };
                    let id = format!("{run_id}.{attempt}.{}", event.seq);
                    let stored =
                        store(&nats, &subject, &worker, &id, expected, payload.clone()).await;
                    let lost = match stored {
                        Ok(sequence) => {
                            expected = expected.map(|_| sequence);
                            continue;
                        }
                        Err(Refusal::NotLast) => match owner {
                            Some(fence) => match nats.still_owns(&run_id, fence).await {
                                Ok(false) => Standing::Fenced,
                                _ => Standing::Lost,
                            },
                            None => Standing::Lost,
                        },
                        Err(Refusal::Unreachable) => Standing::Lost,
                    };
                    tracing::warn!(
                        run_id,
                        event = event.kind.name(),
                        ?lost,
                        "an event is not stored: the run stops here"
                    );
                    *lock(&standing) = lost;
                    if let Some(run) = &run {
                        run.cancel();
                    }
                }
            })
        };
        EventPublisher {
            sink: Arc::new(ChannelSink(Mutex::new(Some(tx)))),
            standing,
            task,
        }
    }

    /// Waits until every event emitted so far is stored (or known not to be).
    pub async fn flush(&self) -> Standing {
        let (answer, answered) = oneshot::channel();
        let sent = lock(&self.sink.0)
            .as_ref()
            .is_some_and(|tx| tx.send(Sent::Flush(answer)).is_ok());
        if !sent {
            return *lock(&self.standing);
        }
        answered.await.unwrap_or(Standing::Lost)
    }

    /// Marks the run lost or fenced from outside the event stream (the owner record checked
    /// before a side effect).
    pub fn lose(&self, standing: Standing) {
        let mut now = lock(&self.standing);
        if *now == Standing::Publishing {
            *now = standing;
        }
    }

    /// Waits until every event emitted so far is stored (or known not to be): how the run
    /// stands at its end.
    pub async fn finish(self) -> Standing {
        lock(&self.sink.0).take();
        let _ = self.task.await;
        *lock(&self.standing)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

enum Refusal {
    /// The subject's last record is not the one expected: someone else published.
    NotLast,
    /// The server did not store it, try after try.
    Unreachable,
}

/// Stores `payload` on `subject` with message id `id` (and, when `expected` is given, only
/// if the subject's last record has that sequence), trying again for a while when the
/// server does not answer; the stored record's sequence.
async fn store(
    nats: &Nats,
    subject: &str,
    worker: &str,
    id: &str,
    expected: Option<u64>,
    payload: Vec<u8>,
) -> Result<u64, Refusal> {
    let give_up = Instant::now() + PUBLISH_TRIES_FOR;
    let mut wait = Duration::from_millis(250);
    loop {
        let mut message = PublishMessage::build()
            .payload(payload.clone().into())
            .header(WORKER_HEADER, worker)
            .message_id(id);
        if let Some(expected) = expected {
            message = message.expected_last_subject_sequence(expected);
        }
        let stored = match nats.js.send_publish(subject.to_owned(), message).await {
            Ok(ack) => ack.await,
            Err(err) => Err(err),
        };
        match stored {
            Ok(ack) => return Ok(ack.sequence),
            Err(err) if err.kind() == PublishErrorKind::WrongLastSequence => {
                return Err(Refusal::NotLast);
            }
            Err(err) if Instant::now() + wait >= give_up => {
                tracing::warn!(%err, subject, "a record is not stored; giving up");
                return Err(Refusal::Unreachable);
            }
            Err(err) => {
                tracing::warn!(%err, subject, "a record is not stored yet; trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Said before each side effect of a run a worker owns: the side effect is sent only once
/// every event before it is stored, the run is still this worker's, and the start is
/// recorded. A side effect an earlier worker started and did not finish is not sent again.
pub struct RemoteGate {
    pub nats: Nats,
    pub run_id: String,
    pub worker: String,
    pub owner: u64,
    pub publisher: Arc<EventPublisher>,
    pub run: CancellationToken,
    /// Side-effect nodes an earlier worker started and did not finish, with the idempotency
    /// key each was sent with (if any).
    pub in_doubt: Mutex<BTreeMap<String, Option<String>>>,
}

/// The record of a side effect about to be sent.
#[derive(serde::Serialize, serde::Deserialize)]
struct EffectStarted {
    node: String,
    attempt: u32,
    worker: String,
    /// The key the request is sent with: sent again with it, it is performed once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idempotency_key: Option<String>,
}

impl RemoteGate {
    /// Ok while this worker still owns the run; else the run is stopped.
    async fn still_owner(&self) -> Result<(), String> {
        match self.nats.still_owns(&self.run_id, self.owner).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.stop(Standing::Fenced)),
            Err(err) => {
                tracing::warn!(%err, run_id = self.run_id, "cannot read the run's owner");
                Err(self.stop(Standing::Lost))
            }
        }
    }

    fn stop(&self, standing: Standing) -> String {
        self.publisher.lose(standing);
        self.run.cancel();
        match standing {
            Standing::Fenced => {
                "another worker took this run over: nothing more is sent from here".to_owned()
            }
            _ => "the run's records cannot be stored now: the run stops here and is handed back"
                .to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl SideEffectGate for RemoteGate {
    async fn before_sending(
        &self,
        node: &str,
        attempt: u32,
        idempotency_key: Option<&str>,
    ) -> Result<(), String> {
        let in_doubt = lock(&self.in_doubt).remove(node);
        if let Some(sent_with) = in_doubt {
            // Sent again with the key it was first sent with, the service performs it once;
            // without one (or with another), it is not sent again.
            if sent_with.is_none() || sent_with.as_deref() != idempotency_key {
                return Err(format!(
                    "`{node}` may have happened: the worker running it stopped before it was known to finish, so it is not sent again"
                ));
            }
            tracing::info!(
                run_id = self.run_id,
                node,
                "a side effect in doubt is sent again with the idempotency key it was sent with"
            );
        }
        let standing = self.publisher.flush().await;
        if standing != Standing::Publishing {
            return Err(self.stop(standing));
        }
        self.still_owner().await?;
        hold_before_recording_for_test().await;
        let record = EffectStarted {
            node: node.to_owned(),
            attempt,
            worker: self.worker.clone(),
            idempotency_key: idempotency_key.map(str::to_owned),
        };
        let payload = serde_json::to_vec(&record).unwrap_or_default();
        let id = format!(
            "{}.effect.{}.{node}.{attempt}",
            self.run_id,
            agentloom_engine::new_run_id()
        );
        let subject = run_subject(&self.run_id, "effects");
        if store(&self.nats, &subject, &self.worker, &id, None, payload)
            .await
            .is_err()
        {
            return Err(self.stop(Standing::Lost));
        }
        // Owner again once the record is stored: storing may take seconds (a cluster electing
        // a leader), and a worker that took the run over meanwhile read its history before
        // this record was there. Checked after it, a take-over comes later and sees the start.
        self.still_owner().await
    }
}

/// Names a file: the first time a worker comes to record a side effect's start, between
/// its owner check and the record, it creates the file and waits there until the file is
/// removed. A test hook (debug builds only; release builds never read it), for freezing a
/// worker at that very point so that another worker takes the run over meanwhile.
pub const HOLD_BEFORE_EFFECT_RECORD_ENV: &str = "AGENTLOOM_TEST_HOLD_BEFORE_EFFECT_RECORD";

#[cfg(debug_assertions)]
async fn hold_before_recording_for_test() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static HELD: AtomicBool = AtomicBool::new(false);
    let Some(file) = std::env::var_os(HOLD_BEFORE_EFFECT_RECORD_ENV) else {
        return;
    };
    if HELD.swap(true, Ordering::SeqCst) || std::fs::write(&file, b"held").is_err() {
        return;
    }
    while std::path::Path::new(&file).exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(not(debug_assertions))]
async fn hold_before_recording_for_test() {}

/// What a run's stored records say, for a worker taking it over.
#[derive(Default)]
pub struct History {
    /// Every event, in order (several attempts, each from its `run_started`).
    pub events: Vec<RunEvent>,
    /// The sequence of the last event (0: none).
    pub last_event: u64,
    /// Side-effect nodes whose start was recorded with no end after it, with the
    /// idempotency key of that start (if any).
    pub in_doubt: BTreeMap<String, Option<String>>,
}

/// Reads run `run_id`'s events and side-effect starts back, in the order they were stored.
pub async fn history(nats: &Nats, run_id: &str) -> Result<History, RemoteError> {
    let last_event = nats
        .last_record(run_id, "events")
        .await?
        .map_or(0, |record| record.sequence);
    let last_effect = nats
        .last_record(run_id, "effects")
        .await?
        .map_or(0, |record| record.sequence);
    let end = last_event.max(last_effect);
    let mut history = History {
        last_event,
        ..History::default()
    };
    if end == 0 {
        return Ok(history);
    }
    let reading = |e: &dyn std::fmt::Display| nats.error(format!("reading run {run_id}"), e);
    let mut messages = super::follow::ordered(nats, run_id, run_subject(run_id, "*"), None).await?;
    let events = run_subject(run_id, "events");
    let effects = run_subject(run_id, "effects");
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| reading(&e))?;
        let sequence = message
            .info()
            .map(|info| info.stream_sequence)
            .map_err(|e| reading(&e))?;
        if message.subject.as_str() == events {
            let event = serde_json::from_slice::<RunEvent>(&message.payload)
                .map_err(|e| nats.error(format!("an event of run {run_id}"), e))?;
            if let EventKind::NodeFinished { node, .. }
            | EventKind::NodeFailed { node, .. }
            | EventKind::NodeSkipped { node, .. } = &event.kind
            {
                history.in_doubt.remove(node);
            }
            history.events.push(event);
        } else if message.subject.as_str() == effects
            && let Ok(started) = serde_json::from_slice::<EffectStarted>(&message.payload)
        {
            history
                .in_doubt
                .insert(started.node, started.idempotency_key);
        }
        if sequence >= end {
            break;
        }
    }
    Ok(history)
}
