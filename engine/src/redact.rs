//! Keeps the secrets a run resolved out of everything the run emits.
//!
//! Every secret a node obtains through [`agentloom_core::RunCtx::secret`] or
//! `refresh_secret` is remembered here, with the encodings it travels in (Base64 for basic
//! authentication, percent-encoding for a query string). The executor passes every event
//! and the final report through [`Redactor`], so errors a service echoed back (a 401 body
//! quoting the `Authorization` header) never reach the terminal, `--json` or the run log.
//!
//! Log lines do not pass through a run: every secret is also added to one process-wide
//! list, which the binary's log writer applies with [`redact_resolved_secrets`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, BoundHosts, Secret, ValidGraph, Value, ValueMap,
};

use crate::events::EventKind;
use crate::secret_forms::{Forms, encoded_forms};

pub use agentloom_core::REDACTED;

/// The secrets of one run (shared with its sub-runs).
#[derive(Default)]
pub(crate) struct Redactor {
    needles: RwLock<Needles>,
    /// Set once `needles` match anything: until then, redaction has nothing to find and
    /// asks no lock (most runs resolve no secret).
    remembered: AtomicBool,
    /// Each resolved secret with its credential and hosts, for [`Redactor::check_egress`].
    bound: RwLock<Vec<Bound>>,
}

/// Every form of every secret remembered, and the same compiled to be found at once.
#[derive(Default)]
struct Needles {
    forms: Vec<String>,
    shortest: usize,
    compiled: Forms,
}

impl Needles {
    const fn new() -> Self {
        Self {
            forms: Vec::new(),
            shortest: usize::MAX,
            compiled: Forms::EMPTY,
        }
    }
}

/// What a secret the run resolved is, for the message refusing it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecretKind {
    /// A credential from the keychain, the environment or a sign-in.
    Credential,
    /// A graph input declared `"type": "secret"`.
    Input,
}

/// A secret a run resolved: where it may go, and the forms it travels in.
struct Bound {
    name: String,
    kind: SecretKind,
    hosts: BoundHosts,
    plain: String,
    forms: Forms,
}

/// Every secret any run in this process resolved.
static RESOLVED_IN_PROCESS: Redactor = Redactor {
    needles: RwLock::new(Needles::new()),
    remembered: AtomicBool::new(false),
    bound: RwLock::new(Vec::new()),
};

/// `text` with every secret any run in this process resolved replaced by [`REDACTED`]:
/// for output that does not pass through a run, such as log lines.
pub fn redact_resolved_secrets(text: &mut String) {
    RESOLVED_IN_PROCESS.text(text);
}

/// Adds `secret` (and its encodings) to the process-wide list, for a secret handled outside
/// any run: the tokens of a sign-in, a key typed into the credentials window.
pub(crate) fn remember_process_wide(secret: &str) {
    RESOLVED_IN_PROCESS.add(secret, &encoded_forms(secret));
}

impl Redactor {
    /// Remembers `secret` of credential `credential` and its encodings, here and for the
    /// whole process, with the hosts it may be sent to.
    pub(crate) fn remember(&self, credential: &str, secret: &Secret) {
        self.remember_as(credential, SecretKind::Credential, secret);
    }

    /// [`Redactor::remember`] for a secret of `kind`, named `name`.
    pub(crate) fn remember_as(&self, name: &str, kind: SecretKind, secret: &Secret) {
        let plain = secret.expose();
        let forms = encoded_forms(plain);
        if forms.is_empty() {
            return;
        }
        self.add(plain, &forms);
        RESOLVED_IN_PROCESS.add(plain, &forms);
        if let Ok(mut bound) = self.bound.write() {
            let known = bound
                .iter()
                .any(|b| b.name == name && b.plain == plain && b.hosts == *secret.hosts());
            if !known {
                bound.push(Bound {
                    name: name.to_owned(),
                    kind,
                    hosts: secret.hosts().clone(),
                    plain: plain.to_owned(),
                    forms: Forms::new(&forms, plain.len()),
                });
            }
        }
    }

    /// Remembers the values of the graph's inputs declared `"type": "secret"` (given, or
    /// their default) before anything of the run is emitted, bound to their `hosts`.
    pub(crate) fn remember_secret_inputs(&self, graph: &ValidGraph, inputs: &ValueMap) {
        for input in graph.interface_inputs() {
            let Some(hosts) = input.secret else {
                continue;
            };
            let Some(value) = inputs.get(&input.name).or(input.default.as_ref()) else {
                continue;
            };
            let text = value
                .as_str()
                .map_or_else(|| value.to_text(), str::to_owned);
            self.remember_as(
                &input.name,
                SecretKind::Input,
                &Secret::new(text).bound_to(hosts),
            );
        }
    }

    /// Refuses a request to `url` whose URL or `parts` (header values, body) carry a
    /// secret that is not bound to `url`'s host, in any of the forms of
    /// [`crate::secret_forms`] (encoded, escaped, upper-cased): the message names the
    /// credential and the host, never the value. A value stored under several credentials
    /// may go where any of them may.
    pub(crate) fn check_egress(&self, url: &url::Url, parts: &[&[u8]]) -> Result<(), String> {
        let Ok(bound) = self.bound.read() else {
            return Err("the run's secrets could not be read; the request was not sent".to_owned());
        };
        let refused = bound.iter().filter(|refused| {
            !refused.hosts.allows(url)
                && !bound
                    .iter()
                    .any(|b| b.plain == refused.plain && b.hosts.allows(url))
        });
        for refused in refused {
            let carried = std::iter::once(url.as_str().as_bytes())
                .chain(parts.iter().copied())
                .any(|part| refused.forms.find_decoded(part));
            if carried {
                return Err(match refused.kind {
                    SecretKind::Credential => {
                        agentloom_core::refused_message(&refused.name, url, &refused.hosts)
                    }
                    SecretKind::Input => input_refused_message(&refused.name, url, &refused.hosts),
                });
            }
        }
        Ok(())
    }

    fn add(&self, plain: &str, forms: &[String]) {
        if forms.is_empty() {
            return;
        }
        let Ok(mut needles) = self.needles.write() else {
            return;
        };
        let before = needles.forms.len();
        for form in forms {
            if !needles.forms.contains(form) {
                needles.forms.push(form.clone());
            }
        }
        if needles.forms.len() != before {
            needles.shortest = needles.shortest.min(plain.len());
            needles.compiled = Forms::new(&needles.forms, needles.shortest);
            // Still under the lock: a reader that sees the flag finds the forms.
            if !needles.compiled.is_empty() {
                self.remembered.store(true, Ordering::Release);
            }
        }
    }

    fn is_empty(&self) -> bool {
        !self.remembered.load(Ordering::Acquire)
            || self
                .needles
                .read()
                .map(|n| n.compiled.is_empty())
                .unwrap_or(true)
    }

    /// `text` with every remembered secret replaced.
    pub(crate) fn text(&self, text: &mut String) {
        let Ok(needles) = self.needles.read() else {
            return;
        };
        if let Some(clean) = needles.compiled.replaced(text, REDACTED) {
            *text = clean;
        }
    }

    /// `bytes` with every remembered secret replaced.
    pub(crate) fn bytes(&self, bytes: &mut Vec<u8>) {
        let Ok(needles) = self.needles.read() else {
            return;
        };
        if let Some(clean) = needles.compiled.replaced_bytes(bytes, REDACTED.as_bytes()) {
            *bytes = clean;
        }
    }

    /// Whether `data` still carries a remembered secret in a form redaction does not
    /// replace (escaped in a mixed way, inside Base64 of something else): such data is
    /// kept only as its hash and size.
    pub(crate) fn still_carries(&self, data: &[u8]) -> bool {
        self.needles
            .read()
            .map(|needles| needles.compiled.find_decoded(data))
            .unwrap_or(true)
    }

    /// Redacts the body of a recorded response in place, text or bytes. A body that cannot
    /// be checked is emptied and described instead: compressed (a `Content-Encoding` the
    /// client did not undo, or compressed data), binary (a NUL byte: UTF-16 text or data a
    /// secret could hide in, or bytes with many control characters), or still carrying a
    /// secret after redaction. Other bytes that are not UTF-8 (Latin-1 text) are redacted
    /// as bytes.
    pub(crate) fn recorded_body(
        &self,
        headers: &[(String, String)],
        body: &mut Vec<u8>,
    ) -> Option<crate::events::OmittedBody> {
        let encoded = headers.iter().any(|(name, value)| {
            name.eq_ignore_ascii_case("content-encoding")
                && !value.trim().eq_ignore_ascii_case("identity")
        });
        let reason = if encoded {
            Some("compressed body")
        } else if body.contains(&0) {
            // Valid UTF-8 too when it is UTF-16 text: the secret would be spread out.
            Some("binary body")
        } else {
            match std::str::from_utf8(body) {
                Ok(text) => {
                    let mut text = text.to_owned();
                    self.text(&mut text);
                    *body = text.into_bytes();
                    None
                }
                Err(_) if looks_compressed(body) => Some("compressed body"),
                Err(_) if !looks_like_text(body) => Some("binary body"),
                Err(_) => {
                    self.bytes(body);
                    None
                }
            }
        };
        let reason =
            reason.or_else(|| self.still_carries(body).then_some("body carrying a secret"));
        let reason = reason?;
        let omitted = crate::events::OmittedBody {
            reason: reason.to_owned(),
            sha256: crate::replay::sha256_hex(body),
            bytes: body.len(),
        };
        body.clear();
        Some(omitted)
    }

    /// `request` as the person deciding sees it and the run log keeps it (a waiting run's
    /// `pending_approvals`): every text redacted. Hand the decision back through
    /// [`Redactor::restore_decision`].
    pub(crate) fn approval_request(&self, request: &ApprovalRequest) -> ApprovalRequest {
        let mut shown = request.clone();
        if self.is_empty() {
            return shown;
        }
        self.text(&mut shown.action);
        self.value(&mut shown.arguments);
        for value in [&mut shown.checkpoint, &mut shown.details]
            .into_iter()
            .flatten()
        {
            self.value(value);
        }
        shown
    }

    /// `decision` on the redacted `shown` request with the run's own values back wherever
    /// the person left a value as it was shown: an approval as asked runs with the secret,
    /// not with [`REDACTED`].
    pub(crate) fn restore_decision(
        decision: ApprovalDecision,
        original: &ApprovalRequest,
        shown: &ApprovalRequest,
    ) -> ApprovalDecision {
        match decision {
            ApprovalDecision::Approved { arguments } => ApprovalDecision::Approved {
                arguments: restored(arguments, &original.arguments, &shown.arguments),
            },
            rejected @ ApprovalDecision::Rejected { .. } => rejected,
        }
    }

    /// Values `given` by a person over the redacted `shown` values, with the run's own
    /// `original` value back wherever one was left as it was shown.
    pub(crate) fn restore_values(
        given: ValueMap,
        original: &ValueMap,
        shown: &ValueMap,
    ) -> ValueMap {
        given
            .into_iter()
            .map(|(port, value)| {
                let value = match (original.get(&port), shown.get(&port)) {
                    (Some(original), Some(shown)) => restored(value, original, shown),
                    _ => value,
                };
                (port, value)
            })
            .collect()
    }

    pub(crate) fn option(&self, text: &mut Option<String>) {
        if let Some(text) = text {
            self.text(text);
        }
    }

    /// Redacts `value`. Its contents may be shared with the value a node handed on: they
    /// are copied only when they carry a secret. Returns whether it carried one (and was
    /// copied).
    pub(crate) fn value(&self, value: &mut Value) -> bool {
        let Ok(needles) = self.needles.read() else {
            return false;
        };
        if !carries_any(value, &needles.compiled) {
            return false;
        }
        drop(needles);
        match value {
            Value::Text(text) => self.text(Arc::make_mut(text)),
            Value::Bytes(bytes) => self.bytes(Arc::make_mut(bytes)),
            Value::List(items) => Arc::make_mut(items).iter_mut().for_each(|item| {
                self.value(item);
            }),
            Value::Object(map) => {
                self.map(Arc::make_mut(map));
            }
            Value::Null | Value::Bool(_) | Value::Integer(_) | Value::Number(_) => {}
        }
        true
    }

    /// Whether a key or value of `map` carries a remembered secret: what [`Redactor::map`]
    /// would replace (nothing, when this says no), found without changing or copying it.
    pub(crate) fn carries(&self, map: &ValueMap) -> bool {
        if !self.remembered.load(Ordering::Acquire) {
            return false;
        }
        let Ok(needles) = self.needles.read() else {
            return false;
        };
        let forms = &needles.compiled;
        !forms.is_empty()
            && map
                .iter()
                .any(|(key, value)| forms.is_in(key.as_bytes()) || carries_any(value, forms))
    }

    /// Redacts every key and value of `map`; returns whether anything carried a secret.
    pub(crate) fn map(&self, map: &mut ValueMap) -> bool {
        if self.is_empty() {
            return false;
        }
        let mut carried = false;
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            let mut clean = key.clone();
            self.text(&mut clean);
            carried |= clean != key;
            if let Some(mut value) = map.remove(&key) {
                carried |= self.value(&mut value);
                map.insert(clean, value);
            }
        }
        carried
    }

    /// Redacts every text an event carries. A node's finish also says whether its outputs
    /// carried a secret, for the run log (and so for seeds made from it).
    pub(crate) fn event(&self, kind: &mut EventKind) {
        if let EventKind::NodeFinished {
            outputs,
            outputs_redacted,
            ..
        } = kind
        {
            let found = self.map(outputs);
            // A sub-run's finish comes through here again, renamed and redacted already:
            // what the first pass found holds.
            *outputs_redacted = Some(found || outputs_redacted.unwrap_or(false));
            return;
        }
        if self.is_empty() {
            return;
        }
        match kind {
            EventKind::RunStarted { inputs, .. } | EventKind::NodeStarted { inputs, .. } => {
                self.map(inputs);
            }
            EventKind::NodePartial { chunk, .. } => self.text(chunk),
            EventKind::NodeRetrying { error, .. } => self.text(error),
            EventKind::NodeFinished { .. } => {}
            EventKind::NodeAtBreakpoint { values, .. } => {
                self.map(values);
            }
            EventKind::NodeFailed { error, .. } => self.text(error),
            EventKind::NodeSkipped { reason, .. } => self.text(reason),
            EventKind::RunFinished { outputs, error, .. } => {
                self.map(outputs);
                self.option(error);
            }
            EventKind::NodeQueued { .. }
            | EventKind::NodeUsage { .. }
            | EventKind::NodeAwaitingApproval { .. } => {}
        }
    }
}

/// Whether a text, bytes or key in `values` holds the marker [`REDACTED`]: values read
/// back from the run log with a secret replaced (for rows that do not say so themselves,
/// and values a person sent back as they were shown).
pub fn holds_marker(values: &ValueMap) -> bool {
    values
        .iter()
        .any(|(key, value)| key.contains(REDACTED) || value_holds_marker(value))
}

/// [`holds_marker`] for one value.
pub fn value_holds_marker(value: &Value) -> bool {
    let marker = REDACTED.as_bytes();
    let has = |bytes: &[u8]| bytes.windows(marker.len()).any(|w| w == marker);
    match value {
        Value::Text(text) => has(text.as_bytes()),
        Value::Bytes(bytes) => has(bytes),
        Value::List(items) => items.iter().any(value_holds_marker),
        Value::Object(map) => map
            .iter()
            .any(|(key, item)| has(key.as_bytes()) || value_holds_marker(item)),
        Value::Null | Value::Bool(_) | Value::Integer(_) | Value::Number(_) => false,
    }
}

/// Why a secret run input may not go to `url`, and how to let it.
fn input_refused_message(name: &str, url: &url::Url, bound: &BoundHosts) -> String {
    let host = agentloom_core::host_of(url);
    let allowed = if bound.is_empty() {
        "no host".to_owned()
    } else {
        bound.to_string()
    };
    format!(
        "the secret run input `{name}` may not be sent to {host} (it may go to {allowed}); if that host is meant to get it, add it to the `hosts` of the graph input `{name}`"
    )
}

/// Whether `data` starts like a compressed stream or archive (gzip, zlib, zip, zstd, xz,
/// bzip2, 7z).
fn looks_compressed(data: &[u8]) -> bool {
    const MAGIC: &[&[u8]] = &[
        b"\x1f\x8b",
        b"\x78\x01",
        b"\x78\x5e",
        b"\x78\x9c",
        b"\x78\xda",
        b"PK\x03\x04",
        b"\x28\xb5\x2f\xfd",
        b"\xfd7zXZ\x00",
        b"BZh",
        b"7z\xbc\xaf\x27\x1c",
    ];
    MAGIC.iter().any(|magic| data.starts_with(magic))
}

/// `given` (a person's decision) with `original` wherever it equals `shown`, the redacted
/// `original`, field by field.
fn restored(given: Value, original: &Value, shown: &Value) -> Value {
    if given == *shown {
        return original.clone();
    }
    match (given, original, shown) {
        (Value::Object(mut given), Value::Object(original), Value::Object(shown)) => {
            for (key, value) in Arc::make_mut(&mut given).iter_mut() {
                if let (Some(original), Some(shown)) = (original.get(key), shown.get(key)) {
                    *value = restored(std::mem::take(value), original, shown);
                }
            }
            Value::Object(given)
        }
        (given, _, _) => given,
    }
}

/// Whether bytes that are not UTF-8 read as text in a single-byte encoding (Latin-1,
/// Windows-1252): few control characters. Compressed or encrypted data has about one byte
/// in four among them.
fn looks_like_text(data: &[u8]) -> bool {
    let control = data
        .iter()
        .filter(|&&b| (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x0c)) || b == 0x7f)
        .count();
    control * 64 <= data.len()
}

/// Whether a text or bytes in `value` (or a key of an object in it) holds one of `forms`.
fn carries_any(value: &Value, forms: &Forms) -> bool {
    match value {
        Value::Text(text) => forms.is_in(text.as_bytes()),
        Value::Bytes(bytes) => forms.is_in(bytes),
        Value::List(items) => items.iter().any(|item| carries_any(item, forms)),
        Value::Object(map) => map
            .iter()
            .any(|(key, item)| forms.is_in(key.as_bytes()) || carries_any(item, forms)),
        Value::Null | Value::Bool(_) | Value::Integer(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    #[test]
    fn secrets_and_their_encodings_are_replaced_everywhere() {
        let redactor = Redactor::default();
        redactor.remember("basic", &Secret::new("alice:s3cret/pw"));
        let b64 = base64::engine::general_purpose::STANDARD.encode("alice:s3cret/pw");
        let mut text =
            format!("got alice:s3cret/pw, Basic {b64}, q=alice%3As3cret%2Fpw and s3cret/pw");
        redactor.text(&mut text);
        assert_eq!(
            text,
            "got [redacted], Basic [redacted], q=[redacted] and [redacted]"
        );
        let mut value = Value::object(ValueMap::from([(
            "s3cret/pw".to_owned(),
            Value::list(vec![Value::text("x s3cret/pw")]),
        )]));
        redactor.value(&mut value);
        assert_eq!(value.to_text(), r#"{"[redacted]":["x [redacted]"]}"#);
    }

    #[test]
    fn secrets_any_run_resolved_are_redacted_process_wide() {
        let one_run = Redactor::default();
        one_run.remember("quoted", &Secret::new("pw\"with-quote"));
        let mut line = r#"DEBUG call failed body="pw\"with-quote" key=pw"with-quote"#.to_owned();
        redact_resolved_secrets(&mut line);
        assert_eq!(
            line,
            r#"DEBUG call failed body="[redacted]" key=[redacted]"#
        );
    }

    #[test]
    fn a_secret_leaves_only_for_its_hosts_in_every_form() {
        let redactor = Redactor::default();
        let bound = BoundHosts::parse(&["api.github.com", "127.0.0.1:4000"]).unwrap();
        redactor.remember("github", &Secret::new("gh-t0ken/x").bound_to(bound));
        let url = |u: &str| url::Url::parse(u).unwrap();
        let home = url("http://127.0.0.1:4000/echo");
        let away = url("http://127.0.0.1:4001/echo");
        assert!(
            redactor
                .check_egress(&home, &[b"Bearer gh-t0ken/x"])
                .is_ok()
        );
        assert!(redactor.check_egress(&away, &[b"nothing secret"]).is_ok());
        let b64 = base64::engine::general_purpose::STANDARD.encode("gh-t0ken/x");
        for part in [
            "Bearer gh-t0ken/x".to_owned(),
            format!("{{\"t\":\"{b64}\"}}"),
        ] {
            let err = redactor
                .check_egress(&away, &[b"x", part.as_bytes()])
                .unwrap_err();
            assert!(
                err.starts_with("credential `github` may not be sent to 127.0.0.1:4001 (it is bound to api.github.com, 127.0.0.1:4000)"),
                "{err}"
            );
            assert!(!err.contains("t0ken"), "{err}");
        }
        let in_query = url("http://127.0.0.1:4001/?key=gh-t0ken%2Fx");
        assert!(redactor.check_egress(&in_query, &[]).is_err());
        // The same value under a credential that may go there.
        let open = BoundHosts::parse(&["127.0.0.1:4001"]).unwrap();
        redactor.remember("copy", &Secret::new("gh-t0ken/x").bound_to(open));
        assert!(redactor.check_egress(&in_query, &[]).is_ok());
    }

    #[test]
    fn a_secret_input_is_refused_everywhere_but_its_hosts() {
        let redactor = Redactor::default();
        let hosts = BoundHosts::parse(&["127.0.0.1:4000"]).unwrap();
        redactor.remember_as(
            "password",
            SecretKind::Input,
            &Secret::new("hunter2-pw").bound_to(hosts),
        );
        let home = url::Url::parse("http://127.0.0.1:4000/").unwrap();
        let away = url::Url::parse("http://127.0.0.1:4001/").unwrap();
        assert!(redactor.check_egress(&home, &[b"hunter2-pw"]).is_ok());
        let err = redactor
            .check_egress(&away, &[b"{\"p\":\"HUNTER2-PW\"}"])
            .unwrap_err();
        assert_eq!(
            err,
            "the secret run input `password` may not be sent to 127.0.0.1:4001 (it may go to 127.0.0.1:4000); if that host is meant to get it, add it to the `hosts` of the graph input `password`"
        );
    }

    #[test]
    fn a_recorded_body_is_redacted_or_described() {
        let redactor = Redactor::default();
        redactor.remember("svc", &Secret::new("tok-9Zq/x"));
        let plain: &[(String, String)] = &[];
        let mut text = b"{\"echo\":\"tok-9Zq/x\"}".to_vec();
        assert!(redactor.recorded_body(plain, &mut text).is_none());
        assert_eq!(text, b"{\"echo\":\"[redacted]\"}");
        let mut latin1 = b"caf\xe9 tok-9Zq/x".to_vec();
        assert!(redactor.recorded_body(plain, &mut latin1).is_none());
        assert_eq!(latin1, b"caf\xe9 [redacted]");
        let mut utf16: Vec<u8> = "tok-9Zq/x"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        let received = utf16.clone();
        let omitted = redactor.recorded_body(plain, &mut utf16).unwrap();
        assert_eq!(omitted.reason, "binary body");
        assert_eq!(omitted.bytes, received.len());
        assert_eq!(omitted.sha256, crate::replay::sha256_hex(&received));
        assert!(utf16.is_empty());
        let mut mixed = br#"{"echo":"tok-9Zq\u002Fx"}"#.to_vec();
        let omitted = redactor.recorded_body(plain, &mut mixed).unwrap();
        assert_eq!(omitted.reason, "body carrying a secret");
        let mut random: Vec<u8> = (0u32..4096)
            .map(|i| ((i.wrapping_mul(2_654_435_761) >> 13) as u8).max(1))
            .collect();
        random[0] = 0xff;
        let omitted = redactor.recorded_body(plain, &mut random).unwrap();
        assert_eq!(omitted.reason, "binary body");
        let brotli = [("Content-Encoding".to_owned(), "br".to_owned())];
        let mut compressed = b"anything".to_vec();
        let omitted = redactor.recorded_body(&brotli, &mut compressed).unwrap();
        assert_eq!(omitted.reason, "compressed body");
    }

    #[test]
    fn an_approval_is_asked_redacted_and_runs_with_the_secret() {
        let redactor = Redactor::default();
        redactor.remember("svc", &Secret::new("tok-approve-9"));
        let object = |body: &str, url: &str| {
            Value::object(ValueMap::from([
                ("body".to_owned(), Value::text(body)),
                ("url".to_owned(), Value::text(url)),
            ]))
        };
        let request = ApprovalRequest::new(
            "POST with tok-approve-9",
            object("key=tok-approve-9", "http://a/"),
        );
        let shown = redactor.approval_request(&request);
        assert_eq!(shown.action, "POST with [redacted]");
        assert_eq!(shown.arguments, object("key=[redacted]", "http://a/"));
        let approve = |arguments| match Redactor::restore_decision(
            ApprovalDecision::Approved { arguments },
            &request,
            &shown,
        ) {
            ApprovalDecision::Approved { arguments } => arguments,
            rejected => panic!("{rejected:?}"),
        };
        assert_eq!(approve(shown.arguments.clone()), request.arguments);
        assert_eq!(
            approve(object("key=[redacted]", "http://b/")),
            object("key=tok-approve-9", "http://b/")
        );
        assert_eq!(
            approve(object("key=typed", "http://a/")),
            object("key=typed", "http://a/")
        );
    }

    #[test]
    fn very_short_secrets_are_not_redacted() {
        let redactor = Redactor::default();
        redactor.remember("short", &Secret::new("ab"));
        let mut text = "about".to_owned();
        redactor.text(&mut text);
        assert_eq!(text, "about");
    }
}
