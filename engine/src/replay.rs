//! Answering a run's outbound calls from an earlier run's recording (`run --replay`).
//!
//! A call is recognised by its node path, its attempt and the SHA-256 of its method, URL
//! and body. The same call made twice by one node attempt (an agent fetching one page
//! twice) is answered by the recorded responses in order.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use agentloom_core::{BlockError, OutboundCall, RecordedResponse, Replayed, not_recorded};
use sha2::{Digest, Sha256};

use crate::events::RecordedCall;

/// What a replay does with a call it has no recording for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplayMiss {
    /// Fail the node with "not recorded: …".
    #[default]
    Fail,
    /// Make the call.
    Live,
}

/// The recorded responses of one run, handed out as a new run makes the same calls.
#[derive(Debug, Default)]
pub struct Replay {
    /// By (node, attempt, request hash), in the order they were made.
    exact: Mutex<HashMap<(String, u32, String), VecDeque<RecordedResponse>>>,
    miss: ReplayMiss,
}

/// The SHA-256 (hex) that recognises a call: its method, URL and body.
pub fn request_hash(call: &OutboundCall<'_>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(call.method.as_bytes());
    hasher.update(b"\n");
    hasher.update(call.url.as_bytes());
    hasher.update(b"\n");
    hasher.update(call.body);
    hex(&hasher.finalize())
}

/// The SHA-256 (hex) of `data`.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

impl Replay {
    /// A replay of `calls` (as [`crate::RunStore::recorded_calls`] reads them).
    pub fn new(calls: Vec<RecordedCall>, miss: ReplayMiss) -> Self {
        let mut exact: HashMap<(String, u32, String), VecDeque<RecordedResponse>> = HashMap::new();
        for call in calls {
            exact
                .entry((call.node, call.attempt, call.request_hash))
                .or_default()
                .push_back(call.response);
        }
        Self {
            exact: Mutex::new(exact),
            miss,
        }
    }

    /// The recorded answer a catalog got for `call` from `source` before the recorded run
    /// (an MCP server's tool list, see [`agentloom_core::CatalogCall`]); it stays for
    /// the run's own replay.
    pub fn catalog_answer(
        &self,
        source: &str,
        call: &OutboundCall<'_>,
    ) -> Option<RecordedResponse> {
        let exact = self
            .exact
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        exact
            .get(&(source.to_owned(), 0, request_hash(call)))
            .and_then(|queue| queue.front().cloned())
    }

    /// The answer to `call` of node `node` (its full path) at `attempt`: the next recorded
    /// response of that attempt, else of another attempt of the node with the same request.
    pub(crate) fn answer(&self, node: &str, attempt: u32, call: &OutboundCall<'_>) -> Replayed {
        let hash = request_hash(call);
        let mut exact = self
            .exact
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (node.to_owned(), attempt, hash.clone());
        if let Some(response) = exact.get_mut(&key).and_then(VecDeque::pop_front) {
            return Replayed::Answer(response);
        }
        let other = exact
            .iter_mut()
            .find(|((n, _, h), queue)| n == node && *h == hash && !queue.is_empty())
            .and_then(|(_, queue)| queue.pop_front());
        match (other, self.miss) {
            (Some(response), _) => Replayed::Answer(response),
            (None, ReplayMiss::Live) => Replayed::Live,
            (None, ReplayMiss::Fail) => {
                Replayed::Missing(BlockError::permanent(not_recorded(node, call)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(node: &str, attempt: u32, call: &OutboundCall<'_>, body: &str) -> RecordedCall {
        RecordedCall {
            node: node.to_owned(),
            attempt,
            request_hash: request_hash(call),
            method: call.method.to_owned(),
            url: call.url.to_owned(),
            response: RecordedResponse {
                status: 200,
                headers: Vec::new(),
                body: body.as_bytes().to_vec(),
            },
            body_omitted: None,
        }
    }

    fn body(answer: Replayed) -> String {
        match answer {
            Replayed::Answer(response) => String::from_utf8(response.body).unwrap_or_default(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn calls_are_answered_in_order_and_a_changed_request_misses() {
        let call = OutboundCall {
            method: "GET",
            url: "http://127.0.0.1:1/a",
            body: b"",
        };
        let replay = Replay::new(
            vec![
                recorded("fetch", 1, &call, "first"),
                recorded("fetch", 1, &call, "second"),
            ],
            ReplayMiss::Fail,
        );
        assert_eq!(body(replay.answer("fetch", 1, &call)), "first");
        assert_eq!(body(replay.answer("fetch", 1, &call)), "second");
        let Replayed::Missing(error) = replay.answer("fetch", 1, &call) else {
            panic!("a third call is not recorded");
        };
        assert!(
            error
                .message
                .starts_with("not recorded: fetch GET http://127.0.0.1:1/a"),
            "{}",
            error.message
        );
        let changed = OutboundCall { body: b"x", ..call };
        let live = Replay::new(Vec::new(), ReplayMiss::Live);
        assert!(matches!(live.answer("fetch", 1, &changed), Replayed::Live));
    }

    #[test]
    fn a_catalog_answer_stays_for_every_load_and_is_no_nodes_answer() {
        let list = OutboundCall {
            method: "MCP",
            url: "mcp://files/tools/list",
            body: b"",
        };
        let replay = Replay::new(
            vec![recorded("$.mcp_servers.files", 0, &list, "[]")],
            ReplayMiss::Fail,
        );
        for _ in 0..2 {
            let answer = replay.catalog_answer("$.mcp_servers.files", &list);
            assert_eq!(answer.map(|r| r.body), Some(b"[]".to_vec()));
        }
        assert_eq!(replay.catalog_answer("$.mcp_servers.other", &list), None);
    }
}
