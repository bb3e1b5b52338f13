//! Reading back a run's recorded outbound calls, to replay them.

use std::sync::Arc;

use agentloom_core::{RecordedResponse, Value, ValueMap};
use rusqlite::params;

use super::{RunStore, StoreError, values};
use crate::events::{OmittedBody, RecordedCall};

impl RunStore {
    /// The outbound calls run `run_id` recorded, in the order they were made. A response
    /// whose body was over the log's cap is left out (a replay then misses it).
    pub fn recorded_calls(&self, run_id: &str) -> Result<Vec<RecordedCall>, StoreError> {
        let conn = self.lock();
        let read_error = |source| StoreError::Read {
            path: self.path.clone(),
            source,
        };
        let rows: Vec<(RecordedCall, String)> = conn
            .prepare_cached(
                "SELECT node_id, attempt, request_hash, method, url, status, headers_json,
                        response_json
                 FROM run_calls WHERE run_id = ?1 AND response_json IS NOT NULL ORDER BY seq",
            )
            .and_then(|mut stmt| {
                stmt.query_map(params![run_id], |row| {
                    let headers: String = row.get(6)?;
                    let call = RecordedCall {
                        node: row.get(0)?,
                        attempt: row.get(1)?,
                        request_hash: row.get(2)?,
                        method: row.get(3)?,
                        url: row.get(4)?,
                        response: RecordedResponse {
                            status: row.get(5)?,
                            headers: serde_json::from_str(&headers).unwrap_or_default(),
                            body: Vec::new(),
                        },
                        body_omitted: None,
                    };
                    Ok((call, row.get(7)?))
                })?
                .collect()
            })
            .map_err(read_error)?;
        let mut calls = Vec::with_capacity(rows.len());
        for (mut call, response) in rows {
            let mut map: ValueMap = serde_json::from_str(&response).unwrap_or_default();
            values::restore(&conn, run_id, &mut map).map_err(|message| StoreError::Recording {
                path: self.path.clone(),
                message,
            })?;
            call.response.body = match map.remove("body") {
                Some(Value::Text(text)) => Arc::unwrap_or_clone(text).into_bytes(),
                Some(Value::Bytes(bytes)) => Arc::unwrap_or_clone(bytes),
                // Kept as its hash and size only: a replay misses it.
                Some(Value::Object(_)) => continue,
                _ => Vec::new(),
            };
            calls.push(call);
        }
        Ok(calls)
    }

    /// Adds `calls` to run `run_id`'s, after those it recorded itself: calls made for the
    /// run once it had finished (the judge of an evaluation's case). A body over the
    /// default cap keeps only its size, as while a run is recorded.
    pub fn add_calls(&self, run_id: &str, calls: &[RecordedCall]) -> Result<(), StoreError> {
        let max_bytes = super::LogPolicy::default().max_value_bytes;
        let mut conn = self.lock();
        let write_error = |source| StoreError::Write {
            path: self.path.clone(),
            source,
        };
        let tx = conn.transaction().map_err(write_error)?;
        let next: i64 = tx
            .query_row(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM run_calls WHERE run_id = ?1",
                params![run_id],
                |row| row.get(0),
            )
            .map_err(write_error)?;
        for (seq, call) in (next..).zip(calls) {
            let body_size = logged_body_size(call);
            let response_json = (body_size <= max_bytes).then(|| {
                let body = logged_body(call.response.body.clone(), call.body_omitted.clone());
                serde_json::to_string(&ValueMap::from([("body".to_owned(), body)]))
                    .unwrap_or_else(|_| "{}".to_owned())
            });
            tx.execute(
                "INSERT INTO run_calls (run_id, seq, node_id, attempt, request_hash, method, url,
                                        status, headers_json, response_json, body_size)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    run_id,
                    seq,
                    call.node,
                    call.attempt,
                    call.request_hash,
                    call.method,
                    call.url,
                    call.response.status,
                    serde_json::to_string(&call.response.headers)
                        .unwrap_or_else(|_| "[]".to_owned()),
                    response_json,
                    i64::try_from(body_size).unwrap_or(i64::MAX),
                ],
            )
            .map_err(write_error)?;
        }
        tx.commit().map_err(write_error)
    }
}

/// The size of a call's response body as received.
pub(super) fn logged_body_size(call: &RecordedCall) -> usize {
    call.body_omitted
        .as_ref()
        .map_or(call.response.body.len(), |omitted| omitted.bytes)
}

/// A call's response body as the log keeps it: text, bytes, or (when it could not be
/// checked for secrets) `{"omitted": why, "sha256": …, "bytes": N}`.
pub(super) fn logged_body(body: Vec<u8>, omitted: Option<OmittedBody>) -> Value {
    if let Some(omitted) = omitted {
        return Value::object(ValueMap::from([
            ("omitted".to_owned(), Value::text(omitted.reason)),
            ("sha256".to_owned(), Value::text(omitted.sha256)),
            (
                "bytes".to_owned(),
                Value::Integer(i64::try_from(omitted.bytes).unwrap_or(i64::MAX)),
            ),
        ]));
    }
    match String::from_utf8(body) {
        Ok(text) => Value::text(text),
        Err(binary) => Value::bytes(binary.into_bytes()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use agentloom_core::{GraphDoc, RecordedResponse, ValueMap};

    use crate::events::{EventKind, EventSink, RecordedCall, RunEvent};
    use crate::store::{LogPolicy, RunStore};

    fn call(node: &str, body: Vec<u8>) -> RecordedCall {
        RecordedCall {
            node: node.to_owned(),
            attempt: 1,
            request_hash: "h".to_owned(),
            method: "POST".to_owned(),
            url: "http://127.0.0.1:1/v1/chat".to_owned(),
            response: RecordedResponse {
                status: 200,
                headers: vec![("content-type".to_owned(), "text/plain".to_owned())],
                body,
            },
            body_omitted: None,
        }
    }

    #[test]
    fn calls_are_read_back_in_order_and_a_body_over_the_cap_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::open(&dir.path().join("runs.sqlite3")).unwrap();
        let recorder = store
            .recorder_with(
                &GraphDoc::new("g"),
                LogPolicy {
                    max_value_bytes: 4096,
                },
            )
            .unwrap();
        recorder.emit(&RunEvent {
            seq: 0,
            at_ms: 0,
            kind: EventKind::RunStarted {
                run_id: "r1".to_owned(),
                graph_name: "g".to_owned(),
                node_count: 0,
                inputs: ValueMap::new(),
            },
        });
        let large = "x".repeat(2000).into_bytes();
        recorder.record_call(&call("a", b"first".to_vec()));
        recorder.record_call(&call("b", large.clone()));
        recorder.record_call(&call("c", vec![0xff, 0x00, 0xfe]));
        recorder.record_call(&call("d", vec![b'y'; 5000]));
        recorder.finish().unwrap();
        let calls = store.recorded_calls("r1").unwrap();
        let nodes: Vec<&str> = calls.iter().map(|c| c.node.as_str()).collect();
        assert_eq!(nodes, ["a", "b", "c"], "the body over the cap is not kept");
        assert_eq!(calls[0].response.body, b"first");
        assert_eq!(
            calls[1].response.body, large,
            "a large body comes back whole"
        );
        assert_eq!(calls[2].response.body, [0xff, 0x00, 0xfe]);
        assert_eq!(calls[0].response.headers[0].0, "content-type");

        // Calls made for the run once it finished (a judge's) come after its own.
        let over_cap = vec![b'z'; super::super::LogPolicy::default().max_value_bytes + 1];
        store
            .add_calls(
                "r1",
                &[
                    call("$.expect.x.llm_judge/judge", b"verdict".to_vec()),
                    call("e", over_cap),
                ],
            )
            .unwrap();
        let calls = store.recorded_calls("r1").unwrap();
        let nodes: Vec<&str> = calls.iter().map(|c| c.node.as_str()).collect();
        assert_eq!(nodes, ["a", "b", "c", "$.expect.x.llm_judge/judge"]);
        assert_eq!(calls[3].response.body, b"verdict");
        assert_eq!(calls[3].response.headers, calls[0].response.headers);
    }
}
