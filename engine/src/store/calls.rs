//! Reading back a run's recorded outbound calls, to replay them.

use agentloom_core::{RecordedResponse, Value, ValueMap};
use rusqlite::params;

use super::{RunStore, StoreError, values};
use crate::events::RecordedCall;

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
                Some(Value::Text(text)) => text.into_bytes(),
                Some(Value::Bytes(bytes)) => bytes,
                _ => Vec::new(),
            };
            calls.push(call);
        }
        Ok(calls)
    }
}
