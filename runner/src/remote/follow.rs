//! Reading a remote run's records back as they arrive: its events and its final report.

use agentloom_engine::{RunEvent, RunReport};
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use futures::StreamExt as _;

use super::{Nats, RUNS_STREAM, RemoteError, WORKER_HEADER, run_subject};

/// Follows run `run_id` from its first record: `on_event` gets every event (with the name of
/// the worker that published it) in order, including those of an attempt that a worker
/// left unfinished; returns the report once a worker has published it.
/// With `after`, only the records after that stream sequence (a resumed run's).
pub async fn follow(
    nats: &Nats,
    run_id: &str,
    after: Option<u64>,
    on_event: impl FnMut(RunEvent, &str),
) -> Result<RunReport, RemoteError> {
    follow_until(nats, run_id, after, None, on_event).await
}

/// How long a follower's reading may stay quiet before it checks whether the run ended.
const QUIET: std::time::Duration = std::time::Duration::from_secs(5);

/// How long after a run's start deadline its follower still waits for a worker's first word.
const STARTED_LATE: std::time::Duration = std::time::Duration::from_secs(2);

/// [`follow`], giving up once `start_by_ms` (Unix milliseconds, the deadline the run was
/// queued with) is past and no worker has taken the run: none ever will.
pub async fn follow_until(
    nats: &Nats,
    run_id: &str,
    after: Option<u64>,
    mut start_by_ms: Option<i64>,
    mut on_event: impl FnMut(RunEvent, &str),
) -> Result<RunReport, RemoteError> {
    let give_up = lost_server_limit();
    // A cluster electing a new leader answers nothing for a moment: try again, within bound.
    let first_try = std::time::Instant::now();
    let mut messages = loop {
        match ordered(nats, run_id, run_subject(run_id, "*"), after).await {
            Ok(messages) => break messages,
            Err(err) if first_try.elapsed() >= give_up => return Err(err),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(500)).await,
        }
    };
    // The last record read: after a server restart or a cluster fail-over the reading
    // starts again from there.
    let mut seen = after;
    let mut broken_since: Option<std::time::Instant> = None;
    let events = run_subject(run_id, "events");
    let report = run_subject(run_id, "report");
    let request = run_subject(run_id, "request");
    let mut lost_since: Option<std::time::Instant> = None;
    let mut check = tokio::time::interval(std::time::Duration::from_millis(250));
    // When the last record came: a reading that went quiet (its consumer lost with a
    // cluster's leader) is checked against what the server holds.
    let mut quiet_since = std::time::Instant::now();
    let mut read_again = false;
    loop {
        // The client reconnects on its own, forever: a follower that lost its server for
        // longer than the limit says so instead of waiting with no word.
        let next = tokio::select! {
            next = messages.next() => next,
            _ = check.tick() => {
                if quiet_since.elapsed() >= QUIET {
                    quiet_since = std::time::Instant::now();
                    if let Ok(Some(stored)) = nats.last_record(run_id, "report").await
                        && seen.is_none_or(|seen| stored.sequence > seen)
                    {
                        // The run ended and its report never came through this reading:
                        // read again from the last record, then take the report itself.
                        if read_again {
                            return serde_json::from_slice(&stored.payload)
                                .map_err(|e| nats.error(format!("the report of run {run_id}"), e));
                        }
                        read_again = true;
                        if let Ok(again) =
                            ordered(nats, run_id, run_subject(run_id, "*"), seen).await
                        {
                            messages = again;
                        }
                    }
                }
                let late = i64::try_from(STARTED_LATE.as_millis()).unwrap_or_default();
                if let Some(start_by) = start_by_ms
                    && chrono::Utc::now().timestamp_millis() > start_by.saturating_add(late)
                {
                    // Taken (and so running, or being recorded as not started): its report
                    // comes. Else nobody will start it.
                    match nats.last_record(run_id, "owner").await {
                        Ok(Some(_)) => start_by_ms = None,
                        Ok(None) => {
                            return Err(nats.error(
                                format!("following run {run_id}"),
                                "no worker started the run before its deadline, and none will now (is a worker up for this queue?)",
                            ));
                        }
                        Err(_) => {}
                    }
                }
                let connected = matches!(
                    nats.js.client().connection_state(),
                    async_nats::connection::State::Connected
                );
                match (connected, lost_since) {
                    (true, _) => lost_since = None,
                    (false, None) => lost_since = Some(std::time::Instant::now()),
                    (false, Some(since)) if since.elapsed() >= give_up => {
                        return Err(nats.error(
                            format!("following run {run_id}"),
                            format!(
                                "the server has been unreachable for {} s (stopped following; the run may go on on its worker, and its result is kept on the server)",
                                give_up.as_secs()
                            ),
                        ));
                    }
                    (false, Some(_)) => {}
                }
                continue;
            }
        };
        let message = match next {
            Some(Ok(message)) => message,
            failed => {
                let why = match failed {
                    Some(Err(err)) => err.to_string(),
                    _ => "the server ended the subscription".to_owned(),
                };
                let since = *broken_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= give_up {
                    return Err(nats.error(format!("following run {run_id}"), why));
                }
                tracing::debug!(run_id, why, "reading the run again from where it was");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                if let Ok(again) = ordered(nats, run_id, run_subject(run_id, "*"), seen).await {
                    messages = again;
                }
                continue;
            }
        };
        broken_since = None;
        quiet_since = std::time::Instant::now();
        if let Ok(info) = message.info() {
            seen = Some(info.stream_sequence);
        }
        // Anything but the request itself is a worker's word: the run was taken.
        if message.subject.as_str() != request {
            start_by_ms = None;
        }
        if message.subject.as_str() == events {
            let worker = message
                .headers
                .as_ref()
                .and_then(|headers| headers.get(WORKER_HEADER))
                .map(|name| name.as_str().to_owned())
                .unwrap_or_default();
            match serde_json::from_slice::<RunEvent>(&message.payload) {
                Ok(event) => on_event(event, &worker),
                Err(err) => tracing::warn!(%err, run_id, "an event of the run is not readable"),
            }
        } else if message.subject.as_str() == report {
            return serde_json::from_slice(&message.payload)
                .map_err(|e| nats.error(format!("the report of run {run_id}"), e));
        }
    }
}

/// How long a follower waits for a server it lost: `AGENTLOOM_NATS_LOST_SECS`, else 15 s.
fn lost_server_limit() -> std::time::Duration {
    let secs = std::env::var("AGENTLOOM_NATS_LOST_SECS")
        .ok()
        .and_then(|value| value.trim().parse::<u64>().ok())
        .filter(|secs| *secs > 0)
        .unwrap_or(15);
    std::time::Duration::from_secs(secs)
}

pub(super) async fn ordered(
    nats: &Nats,
    run_id: &str,
    filter: String,
    after: Option<u64>,
) -> Result<pull::Ordered, RemoteError> {
    let stream = nats
        .js
        .get_stream_no_info(RUNS_STREAM)
        .await
        .map_err(|e| nats.error(format!("stream {RUNS_STREAM}"), e))?;
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: filter,
            deliver_policy: match after {
                Some(sequence) => DeliverPolicy::ByStartSequence {
                    start_sequence: sequence + 1,
                },
                None => DeliverPolicy::All,
            },
            ..Default::default()
        })
        .await
        .map_err(|e| nats.error(format!("reading run {run_id}"), e))?;
    consumer
        .messages()
        .await
        .map_err(|e| nats.error(format!("reading run {run_id}"), e))
}
