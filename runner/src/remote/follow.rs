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
    mut on_event: impl FnMut(RunEvent, &str),
) -> Result<RunReport, RemoteError> {
    let mut messages = ordered(nats, run_id, run_subject(run_id, "*"), after).await?;
    let events = run_subject(run_id, "events");
    let report = run_subject(run_id, "report");
    let give_up = lost_server_limit();
    let mut lost_since: Option<std::time::Instant> = None;
    let mut check = tokio::time::interval(std::time::Duration::from_millis(250));
    loop {
        // The client reconnects on its own, forever: a follower that lost its server for
        // longer than the limit says so instead of waiting with no word.
        let next = tokio::select! {
            next = messages.next() => next,
            _ = check.tick() => {
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
        let Some(message) = next else { break };
        let message = message.map_err(|e| nats.error(format!("following run {run_id}"), e))?;
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
    Err(nats.error(
        format!("following run {run_id}"),
        "the server ended the subscription",
    ))
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

/// Every event of run `run_id` published so far, in order (a worker taking the run over
/// resumes from them).
pub async fn events_so_far(nats: &Nats, run_id: &str) -> Result<Vec<RunEvent>, RemoteError> {
    let Some(last) = nats.last_record(run_id, "events").await? else {
        return Ok(Vec::new());
    };
    let mut messages = ordered(nats, run_id, run_subject(run_id, "events"), None).await?;
    let mut events = Vec::new();
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| nats.error(format!("reading run {run_id}"), e))?;
        let sequence = message
            .info()
            .map(|info| info.stream_sequence)
            .map_err(|e| nats.error(format!("reading run {run_id}"), e))?;
        let event = serde_json::from_slice::<RunEvent>(&message.payload)
            .map_err(|e| nats.error(format!("an event of run {run_id}"), e))?;
        events.push(event);
        if sequence >= last.sequence {
            break;
        }
    }
    Ok(events)
}

async fn ordered(
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
