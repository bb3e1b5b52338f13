//! `agentloom worker`: pulls runs from the work queue and runs them with the same executor
//! as `agentloom run`, publishing every event; acknowledges a request only once its run
//! has finished, and resumes a run another worker left unfinished from its events.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentloom_core::{GraphDoc, Usage, ValueMap};
use agentloom_engine::{
    EventKind, EventSink, LogPolicy, RunEvent, RunOptions, RunReport, RunSeed, RunStatus, RunStore,
};
use async_nats::jetstream::consumer::{AckPolicy, pull};
use async_nats::jetstream::{AckKind, Message};
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

use super::fence::{EventPublisher, Fence, History, RemoteGate, Standing, history};
use super::is_plain_run_id;
use super::owner::Claim;
use super::{
    ERROR_HEADER, Nats, QUEUE_STREAM, RemoteError, RunRequest, WORKER_HEADER, WORKERS_CONSUMER,
    WorkItem, dead_subject, run_subject,
};
use crate::{Credentials, GraphSource, Launch, Log, Prepared, Trust, Workspace};

/// How one worker runs.
#[derive(Clone)]
pub struct WorkerConfig {
    pub url: String,
    /// The worker's name, on every event it publishes (and so in the submitter's run log).
    pub name: String,
    /// Where runs keep their files: each in `runs/<RUN_ID>` beneath it (made when a block
    /// first writes), so no run reads another's files, unless `shared_workspace`.
    pub workspace: PathBuf,
    /// Every run works in `workspace` itself (for a queue only people you trust publish to).
    pub shared_workspace: bool,
    /// Which runs' folders stay once the run ended.
    pub keep_workspaces: KeepWorkspaces,
    /// The NKey public keys whose signed decisions resume a waiting run; none: no decision
    /// from the queue is taken.
    pub approver_keys: Vec<String>,
    pub concurrency: usize,
    /// How long a request may go without a sign of life before the server hands it to
    /// another worker: one setting of the queue's consumer, for the whole fleet. `Some`
    /// sets it for every worker; `None` takes the fleet's (30 s for a new queue). A running
    /// run sends a sign of life every third of the consumer's setting as it is now.
    pub ack_wait: Option<Duration>,
    /// Deliveries of one request before it is no longer handed out.
    pub max_deliver: i64,
    /// Run requests as trusted: credentials, MCP servers, no safe mode.
    pub trust: bool,
    /// This machine's credentials (its keychain, its environment), for trusted requests.
    pub credentials: Credentials,
}

/// Which runs' folders (`runs/<RUN_ID>`) a worker keeps once the run ended. A run waiting
/// for a decision or handed back to the queue keeps its folder whatever the choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum KeepWorkspaces {
    /// A completed run's folder is removed; a failed or cancelled one's kept to look into.
    #[default]
    Failed,
    /// Every folder is kept.
    All,
    /// Every ended run's folder is removed.
    None,
}

impl KeepWorkspaces {
    fn keeps(self, status: RunStatus) -> bool {
        match status {
            RunStatus::Waiting | RunStatus::Running => true,
            RunStatus::Completed => self == KeepWorkspaces::All,
            _ => self != KeepWorkspaces::None,
        }
    }
}

/// The ack wait of a queue made by a worker that asked for none.
const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

/// The ack wait of the fleet's consumer as it is now (the shortest sensible when it cannot
/// be read: signs of life too often cost little, too rarely repeat a run).
async fn fleet_ack_wait(nats: &Nats) -> Duration {
    const UNKNOWN: Duration = Duration::from_secs(3);
    let read = async {
        let stream = nats.js.get_stream_no_info(QUEUE_STREAM).await.ok()?;
        let info = stream.consumer_info(WORKERS_CONSUMER).await.ok()?;
        Some(info.config.ack_wait)
    };
    tokio::time::timeout(Duration::from_secs(2), read)
        .await
        .ok()
        .flatten()
        .filter(|wait| !wait.is_zero())
        .unwrap_or(UNKNOWN)
}

/// What becomes of a request once handled.
enum Outcome {
    /// The run finished (or cannot ever run): acknowledge it.
    Done,
    /// This worker stops: hand the request to another worker now.
    Release,
    /// Another worker took the run over: its request is that worker's now, left alone.
    Fenced,
}

/// How a worker stops: `taking` ends pulling new requests (a drain: runs under way go on
/// to their end); `running` stops the runs still going, whose requests are handed back to
/// the queue, to be resumed by another worker.
#[derive(Clone, Default)]
pub struct Stop {
    pub taking: CancellationToken,
    pub running: CancellationToken,
}

/// Pulls and runs requests until `stop.taking` is cancelled, then waits for the runs under
/// way: to their end, or, once `stop.running` is cancelled, until they handed their requests
/// back.
pub async fn serve(
    config: WorkerConfig,
    store: Arc<RunStore>,
    stop: Stop,
) -> Result<(), RemoteError> {
    let nats = Nats::connect(&config.url, &config.name).await?;
    let stream = nats
        .js
        .get_stream(QUEUE_STREAM)
        .await
        .map_err(|e| nats.error(format!("stream {QUEUE_STREAM}"), e))?;
    let wanted = pull::Config {
        durable_name: Some(WORKERS_CONSUMER.to_owned()),
        ack_policy: AckPolicy::Explicit,
        ack_wait: config.ack_wait.unwrap_or(DEFAULT_ACK_WAIT),
        max_deliver: config.max_deliver,
        ..Default::default()
    };
    let mut consumer = stream
        .get_or_create_consumer(WORKERS_CONSUMER, wanted.clone())
        .await
        .map_err(|e| nats.error(format!("consumer {WORKERS_CONSUMER}"), e))?;
    // The consumer keeps the settings of the worker that made it: one asked for another
    // ack wait sets it for the fleet, so no worker's signs of life come too late.
    let fleet = consumer
        .info()
        .await
        .map_err(|e| nats.error(format!("consumer {WORKERS_CONSUMER}"), e))?
        .config
        .ack_wait;
    if let Some(asked) = config.ack_wait.filter(|asked| *asked != fleet) {
        // Creating a durable consumer again with an editable field changed updates it.
        consumer = stream.create_consumer(wanted).await.map_err(|e| {
            nats.error(
                format!("setting the ack wait of consumer {WORKERS_CONSUMER}"),
                e,
            )
        })?;
        let now = consumer
            .info()
            .await
            .map_err(|e| nats.error(format!("consumer {WORKERS_CONSUMER}"), e))?
            .config
            .ack_wait;
        if now != asked {
            return Err(nats.error(
                format!("consumer {WORKERS_CONSUMER}"),
                format!(
                    "the queue's ack wait is {} s and could not be set to the {} s asked; start this worker with --ack-wait {} (or without it)",
                    now.as_secs_f64(),
                    asked.as_secs_f64(),
                    now.as_secs_f64()
                ),
            ));
        }
        eprintln!(
            "the queue's ack wait was {} s; it is {} s now, for every worker",
            fleet.as_secs_f64(),
            asked.as_secs_f64()
        );
    }
    tracing::info!(worker = %config.name, url = %nats.url, "worker ready");
    eprintln!(
        "worker {} takes runs from {} ({} at once)",
        config.name, nats.url, config.concurrency
    );
    let slots = Arc::new(tokio::sync::Semaphore::new(config.concurrency));
    let worker = Arc::new(Worker {
        nats: nats.clone(),
        store,
        config: config.clone(),
        stop: stop.running.clone(),
        running: std::sync::Mutex::new(std::collections::BTreeMap::new()),
    });
    // Who is up and what it runs, for `agentloom workers`.
    let mut asked = nats
        .js
        .client()
        .subscribe(super::status::STATUS_SUBJECT)
        .await
        .map_err(|e| nats.error("listening for status requests", e))?;
    {
        let worker = worker.clone();
        let taking = stop.taking.clone();
        let since_ms = chrono::Utc::now().timestamp_millis();
        tokio::spawn(async move {
            while let Some(request) = asked.next().await {
                let Some(reply) = request.reply else { continue };
                let runs = worker
                    .running
                    .lock()
                    .map(|runs| {
                        runs.iter()
                            .map(|(run_id, since_ms)| super::status::RunningRun {
                                run_id: run_id.clone(),
                                since_ms: *since_ms,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let status = super::status::WorkerStatus {
                    name: worker.config.name.clone(),
                    since_ms,
                    concurrency: worker.config.concurrency,
                    draining: taking.is_cancelled(),
                    runs,
                };
                let payload = serde_json::to_vec(&status).unwrap_or_default();
                if let Err(err) = worker.nats.js.client().publish(reply, payload.into()).await {
                    tracing::warn!(%err, "cannot answer a status request");
                }
            }
        });
    }
    // A request whose every delivery ended with its worker gone is no longer handed out;
    // the server says so, and one of the workers ends its run and moves it aside.
    let mut given_up = nats
        .js
        .client()
        .queue_subscribe(
            format!("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{QUEUE_STREAM}.{WORKERS_CONSUMER}"),
            "agentloom-workers".to_owned(),
        )
        .await
        .map_err(|e| nats.error("listening for requests delivered too often", e))?;
    {
        let worker = worker.clone();
        tokio::spawn(async move {
            while let Some(advisory) = given_up.next().await {
                worker.give_up(&stream, &advisory.payload).await;
            }
        });
    }
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = stop.taking.cancelled() => break,
        };
        let Ok(slot) = slot else { break };
        let batch = consumer
            .fetch()
            .max_messages(1)
            .expires(Duration::from_secs(2))
            .messages()
            .await;
        let mut batch = match batch {
            Ok(batch) => batch,
            Err(err) => {
                tracing::warn!(%err, "cannot ask for work; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let next = tokio::select! {
            next = batch.next() => next,
            () = stop.taking.cancelled() => break,
        };
        match next {
            Some(Ok(message)) => {
                let worker = worker.clone();
                tokio::spawn(async move {
                    worker.handle(message).await;
                    drop(slot);
                });
            }
            Some(Err(err)) => {
                tracing::warn!(%err, "cannot take work; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            None => {}
        }
    }
    // Runs under way finish, or hand their work back once `stop.running` is cancelled.
    let all = u32::try_from(config.concurrency).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
    Ok(())
}

struct Worker {
    nats: Nats,
    store: Arc<RunStore>,
    config: WorkerConfig,
    stop: CancellationToken,
    /// The runs it has now, with when each started here (for `agentloom workers`).
    running: std::sync::Mutex<std::collections::BTreeMap<String, i64>>,
}

impl Worker {
    async fn handle(&self, message: Message) {
        let message = Arc::new(message);
        let delivered = message.info().map(|info| info.delivered).unwrap_or(1);
        // Signs of life while the run goes on, so the server does not hand it to another.
        let alive = CancellationToken::new();
        let beat = {
            let message = message.clone();
            let alive = alive.clone();
            let nats = self.nats.clone();
            tokio::spawn(async move {
                loop {
                    // Well inside the consumer's ack wait as it is now: another worker may
                    // have changed it for the fleet since this one started.
                    let every = fleet_ack_wait(&nats).await / 3;
                    tokio::select! {
                        () = tokio::time::sleep(every) => {}
                        () = alive.cancelled() => break,
                    }
                    if let Err(err) = message.ack_with(AckKind::Progress).await {
                        tracing::warn!(%err, "cannot tell the server the run goes on");
                    }
                }
            })
        };
        let outcome = self.run_item(&message.payload, delivered).await;
        alive.cancel();
        let _ = beat.await;
        let acked = match outcome {
            Outcome::Done => message.double_ack().await,
            Outcome::Release => message.ack_with(AckKind::Nak(None)).await,
            Outcome::Fenced => return,
        };
        if let Err(err) = acked {
            tracing::warn!(%err, "cannot acknowledge the request; it may run again");
        }
    }

    /// Where run `run_id` keeps its files.
    fn run_workspace(&self, run_id: &str) -> Workspace {
        if self.config.shared_workspace {
            Workspace::Shared(self.config.workspace.clone())
        } else {
            Workspace::MadeOnUse(self.config.workspace.join("runs").join(run_id))
        }
    }

    async fn run_item(&self, payload: &[u8], delivered: i64) -> Outcome {
        let item: WorkItem = match serde_json::from_slice(payload) {
            Ok(item) => item,
            Err(err) => {
                let reason = format!("the work item is not readable: {err}");
                self.move_aside("unreadable", payload, &reason).await;
                return Outcome::Done;
            }
        };
        // Anyone who may publish to the queue could decide: only a decision signed by one of
        // this worker's approvers resumes a run. The run stays waiting, and says why.
        if let Some(resume) = item
            .resume
            .as_ref()
            .filter(|_| is_plain_run_id(&item.run_id))
        {
            let checked = super::signed::verify(
                &self.config.approver_keys,
                resume.signed.as_ref(),
                &item.run_id,
                &resume.node,
                &resume.decision,
            )
            .and(self.decision_recorded(&item.run_id, resume).await);
            if let Err(reason) = checked {
                tracing::warn!(run_id = %item.run_id, reason, "a decision is refused");
                // The wait is open again: a signed decision may still come.
                if let Ok(Some(approvals)) = self.nats.last_record(&item.run_id, "approvals").await
                {
                    self.publish_record(&item.run_id, "approvals", approvals.payload.to_vec())
                        .await;
                }
                self.publish_report(&RunReport {
                    run_id: item.run_id.clone(),
                    status: RunStatus::Waiting,
                    outputs: ValueMap::new(),
                    nodes: Vec::new(),
                    usage: Usage::default(),
                    duration_ms: 0,
                    error: Some(format!(
                        "the decision on `{}` is refused: {reason}",
                        resume.node
                    )),
                })
                .await;
                return Outcome::Done;
            }
        }
        // A run id names subjects and a folder: anything but a plain id is refused before
        // it is used in either.
        if !is_plain_run_id(&item.run_id) {
            let reason = format!(
                "`{}` is not a run id (letters, digits, - and _ only, at most 64)",
                agentloom_core::escape_control(&item.run_id)
            );
            self.move_aside("unreadable", payload, &reason).await;
            return Outcome::Done;
        }
        let run_id = item.run_id.clone();
        let request = match self.request(&run_id).await {
            Ok(request) => request,
            Err(reason) => {
                self.fail(&run_id, "", &ValueMap::new(), &reason).await;
                self.move_aside(&run_id, payload, &reason).await;
                return Outcome::Done;
            }
        };
        match self.nats.last_record(&run_id, "report").await {
            // Finished before (the worker that ran it stopped before acknowledging).
            Ok(Some(report)) if item.resume.is_none() || !reported_waiting(&report.payload) => {
                return Outcome::Done;
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%err, run_id, "cannot tell whether the run finished; it runs");
            }
        }
        // Queued for someone who no longer waits for it: never started, it does not start.
        if item.resume.is_none()
            && let Some(start_by) = item.start_by_ms
            && chrono::Utc::now().timestamp_millis() > start_by
            && matches!(self.nats.last_record(&run_id, "owner").await, Ok(None))
        {
            if let Ok(Claim::Taken { .. }) = self.nats.claim_new(&run_id, &self.config.name).await {
                let late = chrono::Utc::now().timestamp_millis() - start_by;
                let reason = format!(
                    "not started: no worker took the run before its deadline (passed {} s ago), and whoever queued it no longer waits for it",
                    late / 1000
                );
                let name = request.graph_doc().map(|doc| doc.name).unwrap_or_default();
                self.fail(&run_id, &name, &request.inputs, &reason).await;
                self.move_aside(&run_id, payload, &reason).await;
            }
            return Outcome::Done;
        }
        // One worker runs a run: a first delivery takes it only when nobody has (a second
        // queue entry for it is dropped); a redelivery or a decision takes it over.
        let fresh = item.resume.is_none() && delivered <= 1;
        let claim = if fresh {
            self.nats.claim_new(&run_id, &self.config.name).await
        } else {
            self.nats.take_over(&run_id, &self.config.name).await
        };
        let fence = match claim {
            Ok(Claim::Taken { fence }) => fence,
            Ok(Claim::Elsewhere) => {
                tracing::info!(
                    run_id,
                    "another worker has this run: this queue entry is dropped"
                );
                return Outcome::Done;
            }
            // Nobody can tell who runs it now: another delivery tries again.
            Err(err) => {
                tracing::warn!(%err, run_id, "cannot take the run now");
                tokio::time::sleep(Duration::from_secs(1)).await;
                return Outcome::Release;
            }
        };
        let doc = match request.graph_doc() {
            Ok(doc) => doc,
            Err(message) => {
                let reason = format!("{}: {message}", request.graph_file);
                self.fail(&run_id, &request.graph_file, &request.inputs, &reason)
                    .await;
                self.move_aside(&run_id, payload, &reason).await;
                return Outcome::Done;
            }
        };
        let name = doc.name.clone();
        let prepared = match self.load(&request, doc) {
            Ok(loaded) => loaded,
            Err(reason) => {
                self.fail(&run_id, &name, &request.inputs, &reason).await;
                self.move_aside(&run_id, payload, &reason).await;
                return Outcome::Done;
            }
        };
        // What earlier attempts stored: where this one resumes from and what it must not
        // send again.
        let history = if fresh {
            Ok(History::default())
        } else {
            history(&self.nats, &run_id)
                .await
                .map_err(|e| e.to_string())
        };
        let seeded = match history {
            Ok(history) => self
                .seed(&item, &prepared.graph().doc, &history.events)
                .await
                .map(|seed| (seed, history)),
            Err(reason) => Err(reason),
        };
        let (mut seed, history) = match seeded {
            Ok(seeded) => seeded,
            // The events cannot be read now: another delivery tries again.
            Err(reason) => {
                tracing::warn!(run_id, reason, "cannot resume the run now");
                tokio::time::sleep(Duration::from_secs(1)).await;
                return Outcome::Release;
            }
        };
        // Outputs the log keeps with a secret replaced run again here; when that would
        // repeat a side effect, no worker can take the run over.
        if let Some(Err(reason)) = seed
            .as_mut()
            .map(|seed| seed.settle_redacted(prepared.graph()))
        {
            let reason = format!("cannot take the run over: {reason}");
            self.fail(&run_id, &name, &request.inputs, &reason).await;
            self.move_aside(&run_id, payload, &reason).await;
            return Outcome::Done;
        }
        self.execute(&request, &prepared, seed, fence, history)
            .await
    }

    /// Ends the run of a request the server no longer hands out (every delivery ended with
    /// its worker gone) as failed, moves the request aside and out of the queue.
    async fn give_up(&self, queue: &async_nats::jetstream::stream::Stream, advisory: &[u8]) {
        let advisory: serde_json::Value = serde_json::from_slice(advisory).unwrap_or_default();
        let Some(sequence) = advisory["stream_seq"].as_u64() else {
            tracing::warn!(%advisory, "an advisory without the request's sequence");
            return;
        };
        let deliveries = advisory["deliveries"].as_u64().unwrap_or_default();
        let payload = match queue.get_raw_message(sequence).await {
            Ok(message) => message.payload,
            // Acknowledged meanwhile, or handled by another worker.
            Err(_) => return,
        };
        let run_id = serde_json::from_slice::<WorkItem>(&payload)
            .map(|item| item.run_id)
            .ok()
            .filter(|run_id| is_plain_run_id(run_id))
            .unwrap_or_else(|| "unreadable".to_owned());
        let reason = format!(
            "given up after {deliveries} deliveries: each time, the worker running it stopped before the run ended"
        );
        let (name, inputs) = match self.request(&run_id).await {
            Ok(request) => (
                request.graph_doc().map(|doc| doc.name).unwrap_or_default(),
                request.inputs,
            ),
            Err(_) => (String::new(), ValueMap::new()),
        };
        self.fail(&run_id, &name, &inputs, &reason).await;
        self.move_aside(&run_id, &payload, &reason).await;
        if let Err(err) = queue.delete_message(sequence).await {
            tracing::warn!(%err, run_id, "the request given up stays in the queue");
        }
    }

    /// Whether the decision in a queue entry is the one recorded on the run's `decision`
    /// subject since it began to wait: where subject permissions let only approvers
    /// publish, a queue entry from anyone else resumes nothing.
    async fn decision_recorded(&self, run_id: &str, resume: &super::Resume) -> Result<(), String> {
        let recorded = self.nats.last_record(run_id, "decision").await;
        let waiting_since = self.nats.last_record(run_id, "approvals").await;
        let (Ok(Some(decision)), Ok(waiting_since)) = (recorded, waiting_since) else {
            return Err("no decision is recorded for the run".to_owned());
        };
        let record: serde_json::Value =
            serde_json::from_slice(&decision.payload).unwrap_or_default();
        let since = waiting_since.map_or(0, |approvals| approvals.sequence);
        if decision.sequence < since
            || record["node"] != resume.node.as_str()
            || record["approved"] != resume.decision.is_approved()
        {
            return Err(format!(
                "the decision recorded for the run is not this one on `{}`",
                resume.node
            ));
        }
        Ok(())
    }

    async fn request(&self, run_id: &str) -> Result<RunRequest, String> {
        let found = self
            .nats
            .last_record(run_id, "request")
            .await
            .map_err(|e| e.to_string())?;
        let Some(message) = found else {
            return Err(format!(
                "run {run_id}: its request is not in the stream (expired, or deleted)"
            ));
        };
        serde_json::from_slice(&message.payload)
            .map_err(|e| format!("run {run_id}: the request is not readable: {e}"))
    }

    /// The request made ready to run: trusted only when the worker was started with
    /// `--trust` and the request was trusted where it was submitted.
    fn load(&self, request: &RunRequest, doc: GraphDoc) -> Result<Prepared, String> {
        let name = &request.graph_file;
        let trusted = self.config.trust && request.trusted;
        let trust = Trust::of(trusted, Some(Path::new(name)));
        // Every file it calls came with it: nothing is read from this machine's disk.
        let source = GraphSource::with_files(doc, Some(Path::new(name)), request.files.clone());
        Prepared::new(source, trust, &self.config.credentials, None)
            .map_err(|problems| format!("invalid graph: {}", problems.join("; ")))
    }

    /// What the run starts from: nothing for a first delivery; else the outputs of the nodes
    /// that finished in earlier attempts (read back from the events stream into this
    /// worker's run log, where the engine's resume reads them), with the decision given.
    async fn seed(
        &self,
        item: &WorkItem,
        doc: &GraphDoc,
        events: &[RunEvent],
    ) -> Result<Option<RunSeed>, String> {
        if events.is_empty() && item.resume.is_none() {
            return Ok(None);
        }
        let events = events.to_vec();
        let store = self.store.clone();
        let doc = doc.clone();
        let item = item.clone();
        tokio::task::spawn_blocking(move || -> Result<Option<RunSeed>, String> {
            let run_id = &item.run_id;
            store.delete_run(run_id).map_err(|e| e.to_string())?;
            replay(&store, &doc, &events).map_err(|e| e.to_string())?;
            if let Some(resume) = &item.resume {
                store
                    .save_approval_request(run_id, &resume.node, &resume.request)
                    .and_then(|()| store.decide_approval(run_id, &resume.node, &resume.decision))
                    .map_err(|e| e.to_string())?;
            }
            store
                .resume_seed(run_id)
                .map(Some)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())?
    }

    async fn execute(
        &self,
        request: &RunRequest,
        prepared: &Prepared,
        seed: Option<RunSeed>,
        owner: u64,
        history: History,
    ) -> Outcome {
        let run_id = request.run_id.clone();
        let resumed = seed.is_some();
        if let Ok(mut running) = self.running.lock() {
            running.insert(run_id.clone(), chrono::Utc::now().timestamp_millis());
        }
        let cancel = self.stop.child_token();
        // Stopped at once, by this worker or by its publisher, when the run is not its own
        // any more.
        let lost = CancellationToken::new();
        let fence = Fence {
            owner,
            last_event: history.last_event,
            run: lost.clone(),
        };
        let publisher = Arc::new(EventPublisher::start(
            self.nats.clone(),
            &run_id,
            &self.config.name,
            Some(&fence),
        ));
        let gate = Arc::new(RemoteGate {
            nats: self.nats.clone(),
            run_id: run_id.clone(),
            worker: self.config.name.clone(),
            owner,
            publisher: publisher.clone(),
            run: lost.clone(),
            in_doubt: std::sync::Mutex::new(history.in_doubt),
        });
        let stop_on_loss = {
            let cancel = cancel.clone();
            let lost = lost.clone();
            tokio::spawn(async move {
                lost.cancelled().await;
                cancel.cancel();
            })
        };
        let launch = Launch {
            options: RunOptions {
                cancel: cancel.clone(),
                concurrency: request.concurrency,
                run_id: Some(run_id.clone()),
                seed: seed.map(Arc::new),
                side_effects: Some(gate.clone()),
                ..RunOptions::default()
            },
            log: Some(Log {
                store: self.store.clone(),
                policy: LogPolicy::full(),
            }),
            sinks: vec![publisher.sink.clone()],
            // Nobody to ask here: an approval pauses the run (decided by `approve --nats`).
            ask: None,
            ..Launch::new(request.inputs.clone(), self.run_workspace(&run_id))
        };
        let launched = prepared.launch(launch).await;
        if let Some(err) = &launched.log_error {
            tracing::warn!(%err, run_id, "the run log here may be incomplete");
        }
        let report = launched.report;
        if let Ok(mut running) = self.running.lock() {
            running.remove(&run_id);
        }
        stop_on_loss.abort();
        drop(gate);
        let standing = match Arc::try_unwrap(publisher) {
            Ok(publisher) => publisher.finish().await,
            Err(publisher) => publisher.flush().await,
        };
        match standing {
            Standing::Publishing => {}
            Standing::Fenced => {
                tracing::warn!(
                    run_id,
                    "another worker took this run over: this worker stopped it and leaves it"
                );
                return Outcome::Fenced;
            }
            Standing::Lost => {
                tracing::warn!(run_id, "the run's events cannot be stored: handed back");
                return Outcome::Release;
            }
        }
        if report.status == RunStatus::Cancelled && self.stop.is_cancelled() {
            // This worker stops, not the run: another worker resumes it.
            return Outcome::Release;
        }
        if report.status == RunStatus::Waiting {
            match self.store.pending_approvals(&run_id) {
                Ok(pending) => {
                    let payload = serde_json::to_vec(&pending).unwrap_or_default();
                    self.publish_record(&run_id, "approvals", payload).await;
                }
                Err(err) => tracing::warn!(%err, run_id, "cannot read the run's approvals"),
            }
        } else if resumed && let Err(err) = self.store.clear_decided_approvals(&run_id) {
            tracing::warn!(%err, run_id, "decided approvals stay in the run log");
        }
        self.publish_report(&report).await;
        if !self.config.shared_workspace && !self.config.keep_workspaces.keeps(report.status) {
            let folder = self.config.workspace.join("runs").join(&run_id);
            if let Err(err) = std::fs::remove_dir_all(&folder)
                && err.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(%err, folder = %folder.display(), "the run's folder stays");
            }
        }
        Outcome::Done
    }

    /// Ends run `run_id` as failed with `reason`, without running anything: recorded here
    /// and published like any run's events.
    async fn fail(&self, run_id: &str, graph_name: &str, inputs: &ValueMap, reason: &str) {
        tracing::warn!(run_id, reason, "the run cannot run");
        let events = [
            RunEvent {
                seq: 0,
                at_ms: 0,
                kind: EventKind::RunStarted {
                    run_id: run_id.to_owned(),
                    graph_name: graph_name.to_owned(),
                    node_count: 0,
                    inputs: inputs.clone(),
                },
            },
            RunEvent {
                seq: 1,
                at_ms: 0,
                kind: EventKind::RunFinished {
                    status: RunStatus::Failed,
                    outputs: ValueMap::new(),
                    error: Some(reason.to_owned()),
                    usage: Usage::default(),
                    duration_ms: 0,
                },
            },
        ];
        let publisher = EventPublisher::start(self.nats.clone(), run_id, &self.config.name, None);
        for event in &events {
            publisher.sink.emit(event);
        }
        publisher.finish().await;
        let store = self.store.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            store.delete_run(&events_run_id(&events))?;
            replay(&store, &GraphDoc::default(), &events)
        })
        .await;
        if let Ok(Err(err)) = recorded {
            tracing::warn!(%err, run_id, "the failed run is not logged here");
        }
        self.publish_report(&RunReport {
            run_id: run_id.to_owned(),
            status: RunStatus::Failed,
            outputs: ValueMap::new(),
            nodes: Vec::new(),
            usage: Usage::default(),
            duration_ms: 0,
            error: Some(reason.to_owned()),
        })
        .await;
    }

    /// Moves a request aside with its error, so that it is not delivered again.
    async fn move_aside(&self, run_id: &str, payload: &[u8], reason: &str) {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(ERROR_HEADER, one_line(reason).as_str());
        headers.insert(WORKER_HEADER, self.config.name.as_str());
        if let Err(err) = self
            .nats
            .publish(dead_subject(run_id), Some(headers), payload.to_vec())
            .await
        {
            tracing::warn!(%err, run_id, "cannot move the request aside");
        }
    }

    async fn publish_report(&self, report: &RunReport) {
        match serde_json::to_vec(report) {
            Ok(payload) => {
                self.publish_record(&report.run_id, "report", payload).await;
            }
            Err(err) => tracing::warn!(%err, "the report is not serializable"),
        }
    }

    async fn publish_record(&self, run_id: &str, record: &str, payload: Vec<u8>) {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(WORKER_HEADER, self.config.name.as_str());
        if let Err(err) = self
            .nats
            .publish(run_subject(run_id, record), Some(headers), payload)
            .await
        {
            tracing::warn!(%err, run_id, record, "cannot publish");
        }
    }
}

fn events_run_id(events: &[RunEvent]) -> String {
    events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::RunStarted { run_id, .. } => Some(run_id.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn reported_waiting(payload: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(payload)
        .is_ok_and(|report| report["status"] == RunStatus::Waiting.as_str())
}

/// A header value holds one line.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(4096)
        .collect()
}

/// Records `events` (of one run, possibly several attempts, each from its `run_started`)
/// into `store`, as the run's own recorder would have.
pub(crate) fn replay(
    store: &RunStore,
    doc: &GraphDoc,
    events: &[RunEvent],
) -> Result<(), agentloom_engine::StoreError> {
    let mut recorder = None;
    for event in events {
        if matches!(event.kind, EventKind::RunStarted { .. }) {
            if let Some(earlier) = recorder.take() {
                agentloom_engine::RunRecorder::finish(&earlier)?;
            }
            recorder = Some(store.recorder_with(doc, LogPolicy::full())?);
        }
        if let Some(recorder) = &recorder {
            recorder.emit(event);
        }
    }
    if let Some(recorder) = recorder {
        recorder.finish()?;
    }
    Ok(())
}
