//! Runs beyond one machine over NATS JetStream: what travels and where.
//!
//! - `AGENTLOOM_QUEUE` (work queue, subject `agentloom.queue`): one small [`WorkItem`] per
//!   run to start or resume. Workers pull it through the durable consumer `workers` and
//!   acknowledge it only once the run has finished; a worker that dies leaves it unacked
//!   and the server hands it to another after the ack wait.
//! - `AGENTLOOM_RUNS` (subjects `agentloom.run.<id>.*`): per run, the [`RunRequest`]
//!   (`.request`: the graph, every file it calls, inputs; never a secret), every run event
//!   as the worker emits it (`.events`, the worker's name in a header), the approvals a
//!   waiting run waits for (`.approvals`) and the final report (`.report`, the object
//!   `agentloom run --json` prints). A worker that takes over a run reads `.events` back and
//!   resumes from them.
//! - `AGENTLOOM_DEAD` (subjects `agentloom.dead.<id>`): requests moved aside with their
//!   error, instead of being delivered again.

mod auth;
pub mod fence;
pub mod follow;
pub mod local_log;
pub mod owner;
pub mod queue;
pub mod signed;
pub mod status;
pub mod worker;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentloom_core::{ApprovalDecision, ApprovalRequest, GraphDoc, ValueMap};
use agentloom_engine::{RunEvent, RunReport, RunStatus};
use async_nats::jetstream::{self, stream};
use serde::{Deserialize, Serialize};

pub const QUEUE_STREAM: &str = "AGENTLOOM_QUEUE";
pub const QUEUE_SUBJECT: &str = "agentloom.queue";
pub const RUNS_STREAM: &str = "AGENTLOOM_RUNS";
pub const DEAD_STREAM: &str = "AGENTLOOM_DEAD";
pub const WORKERS_CONSUMER: &str = "workers";
/// The header naming the worker on every event it publishes.
pub const WORKER_HEADER: &str = "Agentloom-Worker";
/// The header carrying the error of a request moved aside.
pub const ERROR_HEADER: &str = "Agentloom-Error";
/// How long the records of a run stay in `AGENTLOOM_RUNS` (and dead requests in theirs).
const KEEP_RUNS: Duration = Duration::from_secs(14 * 24 * 3600);
/// How long a connection attempt and each JetStream request may take.
const NATS_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `run_id` is safe as a subject token and a folder name.
pub fn is_plain_run_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && run_id.len() <= 64
        && run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The subject of one of a run's records.
pub fn run_subject(run_id: &str, record: &str) -> String {
    format!("agentloom.run.{run_id}.{record}")
}

pub fn dead_subject(run_id: &str) -> String {
    format!("agentloom.dead.{run_id}")
}

/// One entry of the work queue: a run to start, or a waiting run to resume with a decision.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkItem {
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Resume>,
    /// Unix milliseconds after which no worker starts the run: it was queued for someone
    /// who follows it for so long at most (`submit --wait`, `serve --nats`, `eval --nats`).
    /// A worker that finds it later records it failed ("not started") and moves it aside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_by_ms: Option<i64>,
}

/// How long a run queued for someone who follows it may wait for a worker:
/// `AGENTLOOM_NATS_START_SECS`, else 5 minutes.
pub fn start_within() -> Duration {
    let secs = std::env::var("AGENTLOOM_NATS_START_SECS")
        .ok()
        .and_then(|value| value.trim().parse::<u64>().ok())
        .filter(|secs| *secs > 0)
        .unwrap_or(300);
    Duration::from_secs(secs)
}

/// The deadline of a run queued now that must start within `within`, in Unix milliseconds.
pub fn start_by(within: Duration) -> i64 {
    chrono::Utc::now()
        .timestamp_millis()
        .saturating_add(i64::try_from(within.as_millis()).unwrap_or(i64::MAX))
}

/// A person's decision on what a waiting remote run waits for (`approve --nats`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Resume {
    pub node: String,
    pub request: ApprovalRequest,
    pub decision: ApprovalDecision,
    /// The decider's signature (`approve --sign-with`): a worker with approver keys takes
    /// no decision without one of theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed: Option<signed::Signed>,
}

/// Everything a worker needs to run a graph: no path on the submitter's disk is read there.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRequest {
    pub run_id: String,
    /// The graph document as submitted (its `graph.call` paths made absolute).
    pub graph: serde_json::Value,
    /// Where the graph came from on the submitting machine: a name for messages.
    pub graph_file: String,
    /// The text of every graph file it calls, by the absolute path its nodes name.
    pub files: Vec<(String, String)>,
    pub inputs: ValueMap,
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// The submitter's verdict: its user trusts the graph file as it was read for this
    /// request. A worker runs it trusted only when the worker was started with `--trust`
    /// too; a request without it (an older or a stranger's) is untrusted.
    #[serde(default)]
    pub trusted: bool,
}

impl RunRequest {
    pub fn graph_doc(&self) -> Result<GraphDoc, String> {
        GraphDoc::from_json_value(self.graph.clone()).map_err(|e| e.to_string())
    }
}

/// Why talking to NATS failed, naming the server and what was being done.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("cannot connect to NATS at {url}: {message}")]
    Connect { url: String, message: String },
    #[error("NATS at {url}: {what}: {message}")]
    JetStream {
        url: String,
        what: String,
        message: String,
    },
}

/// A connection to the NATS server and its JetStream context, with the streams in place.
#[derive(Clone)]
pub struct Nats {
    pub url: String,
    pub js: jetstream::Context,
    /// The subjects the server refused this connection to publish on (subject permissions),
    /// as its errors say so: a refused publish gets no other answer.
    refused: Arc<tokio::sync::watch::Sender<Vec<String>>>,
}

impl Nats {
    /// Connects to `url` (comma-separated for a cluster): `nats://user:password@host`,
    /// `nats://TOKEN@host` (or `NATS_USER` + `NATS_PASSWORD`, `NATS_TOKEN`), `tls://` for TLS,
    /// `NATS_NKEY` for an NKey seed file, `NATS_CREDS` for a credentials file, `NATS_CERT` +
    /// `NATS_KEY` for a client certificate, `NATS_CA` for a CA certificate (see [`auth`]);
    /// then creates the streams when they are not there yet. No message shows a password or
    /// token: [`Nats::url`] is `url` with them replaced by `***`.
    pub async fn connect(url: &str, name: &str) -> Result<Nats, RemoteError> {
        let redacted = auth::redact_list(url);
        let connect_error = |message: String| RemoteError::Connect {
            url: redacted.clone(),
            message,
        };
        let mut servers = auth::Servers::parse(url).map_err(connect_error)?;
        let refused = Arc::new(tokio::sync::watch::Sender::new(Vec::new()));
        let heard = refused.clone();
        let options = async_nats::ConnectOptions::new()
            .name(name)
            .connection_timeout(NATS_TIMEOUT)
            .event_callback(move |event| {
                let heard = heard.clone();
                async move {
                    if let async_nats::Event::ServerError(async_nats::ServerError::Other(error)) =
                        &event
                        && let Some(subject) = refused_subject(error)
                    {
                        heard.send_modify(|refused| refused.push(subject));
                    }
                    tracing::debug!(%event, "NATS connection");
                }
            });
        let options = servers
            .options(options)
            .await
            .map_err(|e| connect_error(servers.scrub(&e)))?;
        // Several servers of a cluster: the client tries them in turn.
        let client = options
            .connect(servers.addresses.as_slice())
            .await
            .map_err(|e| connect_error(servers.scrub(&e.to_string())))?;
        let mut js = jetstream::new(client);
        js.set_timeout(NATS_TIMEOUT);
        let nats = Nats {
            url: redacted,
            js,
            refused,
        };
        nats.ensure_streams().await?;
        Ok(nats)
    }

    /// Resolves once the server has refused this connection publishing on `subject` (its
    /// user's subject permissions do not allow it); never otherwise.
    pub async fn refused_publishing(&self, subject: &str) {
        let mut heard = self.refused.subscribe();
        if heard
            .wait_for(|refused| refused.iter().any(|s| s == subject))
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    }

    pub fn error(&self, what: impl Into<String>, err: impl std::fmt::Display) -> RemoteError {
        RemoteError::JetStream {
            url: self.url.clone(),
            what: what.into(),
            message: err.to_string(),
        }
    }

    async fn ensure_streams(&self) -> Result<(), RemoteError> {
        let streams = [
            stream::Config {
                name: QUEUE_STREAM.to_owned(),
                subjects: vec![QUEUE_SUBJECT.to_owned()],
                retention: stream::RetentionPolicy::WorkQueue,
                ..Default::default()
            },
            stream::Config {
                name: RUNS_STREAM.to_owned(),
                subjects: vec!["agentloom.run.>".to_owned()],
                max_age: KEEP_RUNS,
                ..Default::default()
            },
            stream::Config {
                name: DEAD_STREAM.to_owned(),
                subjects: vec!["agentloom.dead.>".to_owned()],
                max_age: KEEP_RUNS,
                ..Default::default()
            },
        ];
        for config in streams {
            let name = config.name.clone();
            self.js
                .get_or_create_stream(config)
                .await
                .map_err(|e| self.error(format!("stream {name}"), e))?;
        }
        Ok(())
    }

    /// Publishes `payload` on `subject` and waits until the server has stored it.
    pub async fn publish(
        &self,
        subject: String,
        headers: Option<async_nats::HeaderMap>,
        payload: Vec<u8>,
    ) -> Result<(), RemoteError> {
        let what = format!("publishing to {subject}");
        let ack = match headers {
            Some(headers) => {
                self.js
                    .publish_with_headers(subject.clone(), headers, payload.into())
                    .await
            }
            None => self.js.publish(subject.clone(), payload.into()).await,
        }
        .map_err(|e| self.error(&what, e))?;
        self.stored(&subject, &what, ack).await
    }

    /// Waits until the server has stored a publish on `subject`; one the user's subject
    /// permissions refuse fails at once, saying so (no acknowledgement would ever come).
    async fn stored(
        &self,
        subject: &str,
        what: &str,
        ack: jetstream::context::PublishAckFuture,
    ) -> Result<(), RemoteError> {
        tokio::select! {
            stored = ack => stored.map(|_| ()).map_err(|e| self.error(what, e)),
            () = self.refused_publishing(subject) => Err(self.error(
                what,
                "permission denied: this NATS user may not publish on this subject",
            )),
        }
    }

    /// The last record `record` of run `run_id`, when there is one.
    pub async fn last_record(
        &self,
        run_id: &str,
        record: &str,
    ) -> Result<Option<jetstream::message::StreamMessage>, RemoteError> {
        let stream = self
            .js
            .get_stream_no_info(RUNS_STREAM)
            .await
            .map_err(|e| self.error(format!("stream {RUNS_STREAM}"), e))?;
        match stream
            .get_last_raw_message_by_subject(&run_subject(run_id, record))
            .await
        {
            Ok(message) => Ok(Some(message)),
            Err(err) if err.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(err) => Err(self.error(format!("reading the {record} of run {run_id}"), err)),
        }
    }

    /// Queues a run: its request first, then the work item a worker pulls. Each carries a
    /// message id made of the run id, so a submission sent again (its acknowledgement
    /// lost) is stored once. With `start_by_ms`, no worker starts it after that time.
    pub async fn submit(
        &self,
        request: &RunRequest,
        start_by_ms: Option<i64>,
    ) -> Result<(), RemoteError> {
        let payload = serde_json::to_vec(request).map_err(|e| self.error("the request", e))?;
        let run_id = &request.run_id;
        self.publish_once(
            run_subject(run_id, "request"),
            format!("{run_id}.request"),
            payload,
        )
        .await?;
        let item = serde_json::to_vec(&WorkItem {
            run_id: run_id.clone(),
            resume: None,
            start_by_ms,
        })
        .map_err(|e| self.error("the work item", e))?;
        self.publish_once(QUEUE_SUBJECT.to_owned(), format!("{run_id}.queued"), item)
            .await
    }

    /// Publishes `payload` on `subject` with message id `id` (the server stores a second
    /// message with the same id as the first, within its duplicate window) and waits until
    /// the server has stored it.
    async fn publish_once(
        &self,
        subject: String,
        id: String,
        payload: Vec<u8>,
    ) -> Result<(), RemoteError> {
        let what = format!("publishing to {subject}");
        let message = async_nats::jetstream::message::PublishMessage::build()
            .payload(payload.into())
            .message_id(id);
        let ack = self
            .js
            .send_publish(subject.clone(), message)
            .await
            .map_err(|e| self.error(&what, e))?;
        self.stored(&subject, &what, ack).await
    }

    pub async fn queue(&self, item: &WorkItem) -> Result<(), RemoteError> {
        let payload = serde_json::to_vec(item).map_err(|e| self.error("the work item", e))?;
        self.publish(QUEUE_SUBJECT.to_owned(), None, payload).await
    }
}

/// The subject of a server error refusing a publish: `Permissions Violation for Publish to
/// "SUBJECT"`.
fn refused_subject(error: &str) -> Option<String> {
    let subject = error
        .strip_prefix("Permissions Violation for Publish to")?
        .trim()
        .trim_matches('"');
    Some(subject.to_owned())
}

/// The request for running `source`, read once (its `graph.call` paths absolute, the text
/// of every file it calls as read with it), with the submitter's trust verdict.
pub fn request_for(
    source: &crate::GraphSource,
    trusted: bool,
    inputs: ValueMap,
    concurrency: Option<usize>,
) -> Result<RunRequest, String> {
    let label = source
        .path()
        .map(|path| path.display().to_string())
        .unwrap_or_default();
    let graph = serde_json::to_value(source.doc()).map_err(|e| format!("{label}: {e}"))?;
    Ok(RunRequest {
        run_id: agentloom_engine::new_run_id(),
        graph,
        graph_file: label,
        files: source.files().contents(),
        inputs,
        concurrency,
        trusted,
    })
}

/// Queues a run of `doc` (the graph file at `path`, validated, with the text of the files
/// it calls) and waits for a worker to finish it, recording its events in `store` as they
/// arrive: how `serve --nats` runs. Cancelling stops waiting, not the run.
pub async fn run_queued(
    nats: &Nats,
    store: Option<Arc<agentloom_engine::RunStore>>,
    prepared: &crate::Prepared,
    path: &Path,
    inputs: ValueMap,
    cancel: tokio_util::sync::CancellationToken,
) -> (RunReport, Vec<RunEvent>) {
    let run_id = agentloom_engine::new_run_id();
    let failed = |error: String| RunReport {
        run_id: run_id.clone(),
        status: RunStatus::Failed,
        outputs: ValueMap::new(),
        nodes: Vec::new(),
        usage: agentloom_core::Usage::default(),
        duration_ms: 0,
        error: Some(error),
    };
    let doc = &prepared.graph().doc;
    let request = RunRequest {
        run_id: run_id.clone(),
        graph: serde_json::to_value(doc.as_ref()).unwrap_or_default(),
        graph_file: path.display().to_string(),
        files: prepared.called_files(),
        inputs,
        concurrency: None,
        trusted: prepared.trust().is_trusted(),
    };
    // Nobody follows it once this waiting ends: a run no worker started by then never starts.
    let start_by_ms = start_by(start_within());
    if let Err(err) = nats.submit(&request, Some(start_by_ms)).await {
        return (failed(format!("cannot queue the run: {err}")), Vec::new());
    }
    let local = local_log::LocalRecord::new(store, doc.as_ref().clone());
    let mut events = Vec::new();
    let followed = tokio::select! {
        followed = follow::follow_until(nats, &run_id, None, Some(start_by_ms), |event, worker| {
            local.record(&event, worker);
            events.push(event);
        }) => followed.map_err(|e| e.to_string()),
        () = cancel.cancelled() => Err(format!("stopped waiting for run {run_id}; it goes on on its worker")),
    };
    local.finish();
    let report = followed.unwrap_or_else(failed);
    (report, events)
}
