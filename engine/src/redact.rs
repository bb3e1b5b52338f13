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

use std::sync::{Arc, RwLock};

use agentloom_core::{BoundHosts, Secret, Value, ValueMap};
use base64::Engine as _;

use crate::events::EventKind;

pub use agentloom_core::REDACTED;

/// Shorter secrets are not redacted: replacing every `ab` would garble all output, and a
/// secret that short protects nothing.
const MIN_SECRET_LEN: usize = 4;

/// The secrets of one run (shared with its sub-runs).
#[derive(Default)]
pub(crate) struct Redactor {
    needles: RwLock<Vec<String>>,
    /// Each resolved secret with its credential and hosts, for [`Redactor::check_egress`].
    bound: RwLock<Vec<Bound>>,
}

/// A secret a run resolved: where it may go, and the forms it travels in.
struct Bound {
    credential: String,
    hosts: BoundHosts,
    forms: Vec<String>,
}

/// Every secret any run in this process resolved.
static RESOLVED_IN_PROCESS: Redactor = Redactor {
    needles: RwLock::new(Vec::new()),
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
    RESOLVED_IN_PROCESS.add(&forms(&Secret::new(secret.to_owned())));
}

impl Redactor {
    /// Remembers `secret` of credential `credential` and its encodings, here and for the
    /// whole process, with the hosts it may be sent to.
    pub(crate) fn remember(&self, credential: &str, secret: &Secret) {
        let forms = forms(secret);
        self.add(&forms);
        RESOLVED_IN_PROCESS.add(&forms);
        if forms.is_empty() {
            return;
        }
        if let Ok(mut bound) = self.bound.write() {
            let known = bound.iter().any(|b| {
                b.credential == credential && b.forms == forms && b.hosts == *secret.hosts()
            });
            if !known {
                bound.push(Bound {
                    credential: credential.to_owned(),
                    hosts: secret.hosts().clone(),
                    forms,
                });
            }
        }
    }

    /// Refuses a request to `url` whose URL or `parts` (header values, body) carry a
    /// secret in any of its forms that is bound to other hosts: the message names the
    /// credential and the host, never the value. A value stored under several credentials
    /// may go where any of them may.
    pub(crate) fn check_egress(&self, url: &url::Url, parts: &[&[u8]]) -> Result<(), String> {
        let Ok(bound) = self.bound.read() else {
            return Err("the run's secrets could not be read; the request was not sent".to_owned());
        };
        let carried = |b: &Bound| {
            b.forms.iter().any(|form| {
                url.as_str().contains(form.as_str())
                    || parts.iter().any(|part| contains(part, form.as_bytes()))
            })
        };
        for refused in bound.iter().filter(|b| !b.hosts.allows(url)) {
            let allowed_elsewhere = bound
                .iter()
                .any(|b| b.forms[0] == refused.forms[0] && b.hosts.allows(url));
            if !allowed_elsewhere && carried(refused) {
                return Err(agentloom_core::refused_message(
                    &refused.credential,
                    url,
                    &refused.hosts,
                ));
            }
        }
        Ok(())
    }

    fn add(&self, forms: &[String]) {
        if forms.is_empty() {
            return;
        }
        let Ok(mut needles) = self.needles.write() else {
            return;
        };
        for form in forms {
            if !needles.contains(form) {
                needles.push(form.clone());
            }
        }
        // Longest first, so a secret containing another is replaced whole.
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    }

    fn is_empty(&self) -> bool {
        self.needles.read().map(|n| n.is_empty()).unwrap_or(true)
    }

    /// `text` with every remembered secret replaced.
    pub(crate) fn text(&self, text: &mut String) {
        let Ok(needles) = self.needles.read() else {
            return;
        };
        for needle in needles.iter() {
            if text.contains(needle.as_str()) {
                *text = text.replace(needle.as_str(), REDACTED);
            }
        }
    }

    pub(crate) fn option(&self, text: &mut Option<String>) {
        if let Some(text) = text {
            self.text(text);
        }
    }

    /// Redacts `value`. Its contents may be shared with the value a node handed on: they
    /// are copied only when they carry a secret.
    pub(crate) fn value(&self, value: &mut Value) {
        let Ok(needles) = self.needles.read() else {
            return;
        };
        if !carries_any(value, &needles) {
            return;
        }
        drop(needles);
        match value {
            Value::Text(text) => self.text(Arc::make_mut(text)),
            Value::List(items) => Arc::make_mut(items)
                .iter_mut()
                .for_each(|item| self.value(item)),
            Value::Object(map) => self.map(Arc::make_mut(map)),
            Value::Null
            | Value::Bool(_)
            | Value::Integer(_)
            | Value::Number(_)
            | Value::Bytes(_) => {}
        }
    }

    pub(crate) fn map(&self, map: &mut ValueMap) {
        if self.is_empty() {
            return;
        }
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            let mut clean = key.clone();
            self.text(&mut clean);
            if let Some(mut value) = map.remove(&key) {
                self.value(&mut value);
                map.insert(clean, value);
            }
        }
    }

    /// Redacts every text an event carries.
    pub(crate) fn event(&self, kind: &mut EventKind) {
        if self.is_empty() {
            return;
        }
        match kind {
            EventKind::RunStarted { inputs, .. } => self.map(inputs),
            EventKind::NodeStarted { inputs, .. } => self.map(inputs),
            EventKind::NodePartial { chunk, .. } => self.text(chunk),
            EventKind::NodeRetrying { error, .. } => self.text(error),
            EventKind::NodeFinished { outputs, .. } => self.map(outputs),
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

/// Whether a text in `value` (or a key of an object in it) contains one of `needles`.
fn carries_any(value: &Value, needles: &[String]) -> bool {
    let in_text = |text: &str| needles.iter().any(|needle| text.contains(needle.as_str()));
    match value {
        Value::Text(text) => in_text(text),
        Value::List(items) => items.iter().any(|item| carries_any(item, needles)),
        Value::Object(map) => map
            .iter()
            .any(|(key, item)| in_text(key) || carries_any(item, needles)),
        Value::Null | Value::Bool(_) | Value::Integer(_) | Value::Number(_) | Value::Bytes(_) => {
            false
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

/// `secret` as it may appear in output: plain, Base64 (basic authentication),
/// percent-encoded (a query string), the password of `user:password`, and escaped as in a
/// log line's quoted field.
fn forms(secret: &Secret) -> Vec<String> {
    let plain = secret.expose();
    if plain.len() < MIN_SECRET_LEN {
        return Vec::new();
    }
    let mut forms = vec![
        plain.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(plain),
        url::form_urlencoded::byte_serialize(plain.as_bytes()).collect::<String>(),
    ];
    if let Some((_, password)) = plain.split_once(':')
        && password.len() >= MIN_SECRET_LEN
    {
        forms.push(password.to_owned());
    }
    let escaped = plain.escape_debug().to_string();
    if escaped != plain {
        forms.push(escaped);
    }
    forms
}

#[cfg(test)]
mod tests {
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
    fn very_short_secrets_are_not_redacted() {
        let redactor = Redactor::default();
        redactor.remember("short", &Secret::new("ab"));
        let mut text = "about".to_owned();
        redactor.text(&mut text);
        assert_eq!(text, "about");
    }
}
