//! One chat call to a provider: builds the request for its wire format, sends it, reads
//! the reply (whole or streamed, passing text to the canvas as it arrives), and turns every
//! failure into an error a person can act on.
//!
//! Rate limits (429) and server errors (5xx) are retried here up to `max_retries` times,
//! waiting as `Retry-After` says (or 1 s, 2 s, 4 s… without it), so that they "just work";
//! when those retries run out the error is transient and carries `retry_after`, so the
//! node's own `retry` policy in the graph can take over. Timeouts, refused connections and
//! streams cut off mid-way are transient but not retried here.
//!
//! A key is sent only when the block's config names its credential: none is implied by
//! the provider, so a block naming none calls any server without a key. The API key goes
//! only into a request header marked sensitive. Messages built from a provider's answer
//! have the key removed, should it be echoed.

use std::time::Duration;

use agentloom_core::{BlockError, RunCtx, Secret, SecretError, secret_env_var};
use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};

use super::types::{ChatRequest, Reply};
use super::wire::{Framing, StreamFault, StreamParse, WireFormat};
use super::{anthropic, ollama, openai};
use crate::net;

/// Waits longer than this are not done inside the node: the error goes to the graph's retry policy.
const MAX_INTERNAL_WAIT: Duration = Duration::from_secs(60);
/// Provider messages quoted in errors are cut to this many characters.
const MAX_QUOTE: usize = 400;

/// The `provider` names a block may give, in the order [`PROVIDERS`] lists them.
pub(crate) const PROVIDER_NAMES: [&str; 3] = ["openai", "anthropic", "ollama"];

/// Every wire format a block may speak.
const PROVIDERS: [&dyn WireFormat; 3] = [&openai::OpenAi, &anthropic::Anthropic, &ollama::Ollama];

/// The wire format named `name` in a block's config.
pub(crate) fn wire_format(name: &str) -> Option<&'static dyn WireFormat> {
    PROVIDERS.into_iter().find(|wire| wire.name() == name)
}

/// Where and as whom to call.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    pub wire: &'static dyn WireFormat,
    /// No trailing slash.
    pub base_url: String,
    /// The credential the block's config names, whose key every call carries; it must be
    /// set. `None` when the config names none: then no key is sent, to any server (a local
    /// one needs none; a hosted API answers 401, and the error says to name one). No
    /// credential is ever implied by the provider.
    pub credential: Option<String>,
}

impl Endpoint {
    /// `base_url` may be empty for the provider's default; `credential` is from config.
    pub(crate) fn new(
        wire: &'static dyn WireFormat,
        base_url: &str,
        credential: Option<&str>,
    ) -> Result<Endpoint, String> {
        let base_url = base_url.trim().trim_end_matches('/');
        let base_url = if base_url.is_empty() {
            wire.default_base_url()
        } else {
            base_url
        };
        let parsed = reqwest::Url::parse(base_url)
            .map_err(|e| format!("`{}` is not a valid URL: {e}", shown_url(base_url)))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "URL scheme `{}` is not supported; use http:// or https://",
                parsed.scheme()
            ));
        }
        Ok(Endpoint {
            wire,
            base_url: base_url.to_owned(),
            credential: credential
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
        })
    }

    fn url(&self) -> String {
        self.wire.url(&self.base_url)
    }

    /// How messages name this endpoint: `the OpenAI-compatible server at URL`. Every
    /// failure to reach the model or read its reply contains it.
    pub(crate) fn shown(&self) -> String {
        format!("{} at {}", self.wire.title(), shown_url(&self.base_url))
    }

    /// The key to send ([`Endpoint::key_from`] the run), checked against the host it goes
    /// to: a key that may not be sent there fails the call, naming the credential, the host
    /// and how to allow it, rather than going out without it.
    fn api_key(&self, ctx: &dyn RunCtx) -> Result<Option<Secret>, BlockError> {
        let key = self.key_from(|name| ctx.secret(name))?;
        if let (Some(key), Some(name)) = (&key, &self.credential)
            && let Some(refused) = net::credential_refused(name, key, &self.parsed_url()?)
        {
            return Err(BlockError::permanent(refused));
        }
        Ok(key)
    }

    /// The URL calls go to, parsed (it was checked when the endpoint was made).
    fn parsed_url(&self) -> Result<reqwest::Url, BlockError> {
        reqwest::Url::parse(&self.url()).map_err(|e| {
            BlockError::permanent(format!("`{}` is not a valid URL: {e}", self.shown()))
        })
    }

    /// The key to send, looked up with `secret`: none when the config names no credential
    /// (nothing is looked up then, so a run that may use no credential at all, such as one
    /// of an untrusted file, still reaches a local model). A named credential must give a
    /// key: whatever stops it (not set, no keychain, refused) fails the call before it is
    /// sent.
    fn key_from(
        &self,
        secret: impl FnOnce(&str) -> Result<Secret, SecretError>,
    ) -> Result<Option<Secret>, BlockError> {
        let Some(name) = &self.credential else {
            return Ok(None);
        };
        match secret(name) {
            Ok(secret) if !secret.expose().is_empty() => Ok(Some(secret)),
            Ok(_) => Err(BlockError::permanent(format!(
                "credential `{name}` is empty: {} needs an API key; set it in Credentials, or the environment variable {} for headless runs",
                self.shown(),
                secret_env_var(name)
            ))),
            Err(err) => Err(BlockError::permanent(format!(
                "{} needs an API key: {err}",
                self.shown()
            ))),
        }
    }
}

/// `text` without the API key in it, should a provider echo it.
fn redact(key: Option<&Secret>, text: &str) -> String {
    match key {
        Some(key) if !key.expose().is_empty() => text.replace(key.expose(), "[redacted]"),
        _ => text.to_owned(),
    }
}

/// A URL for messages: no user info, query or fragment.
pub(crate) fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            parsed.set_query(None);
            parsed.set_fragment(None);
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string().trim_end_matches('/').to_owned()
        }
        Err(_) => url.split(['?', '#']).next().unwrap_or_default().to_owned(),
    }
}

/// How patient a call is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallOptions {
    /// The longest wait for the reply to start, and between two streamed pieces.
    pub timeout: Duration,
    /// Extra tries after a 429 or 5xx.
    pub max_retries: u32,
    /// The first wait when the server gives no `Retry-After`; doubled each time.
    pub backoff: Duration,
}

/// A failed attempt, and whether to try again here.
struct Failure {
    error: BlockError,
    retry_here: bool,
    /// HTTP 401: a refreshed credential may cure it.
    unauthorized: bool,
}

impl Failure {
    fn fatal(error: BlockError) -> Self {
        Self {
            error,
            retry_here: false,
            unauthorized: false,
        }
    }
}

/// One chat call, with the internal retries for 429 and 5xx, stopped by cancellation.
/// Text is streamed to output `partial_port` while it arrives. A 401 refreshes the
/// credential once (an OAuth sign-in) and sends the call once more with the new token.
pub(crate) async fn complete(
    endpoint: &Endpoint,
    request: &ChatRequest,
    options: CallOptions,
    ctx: &dyn RunCtx,
    partial_port: &str,
) -> Result<Reply, BlockError> {
    let mut key = endpoint.api_key(ctx)?;
    let cancel = ctx.cancel_token();
    let mut retries = 0;
    let mut refreshed = false;
    loop {
        let attempt = tokio::select! {
            () = cancel.cancelled() => return Err(BlockError::cancelled()),
            result = send_once(endpoint, request, key.as_ref(), options, ctx, partial_port) => result,
        };
        match attempt {
            Ok(reply) => return Ok(reply),
            Err(failure) if failure.unauthorized && refreshed => {
                return Err(BlockError {
                    message: format!(
                        "{} It was refreshed once and refused again: sign in again with `agentloom credentials login`.",
                        failure.error.message
                    ),
                    ..failure.error
                });
            }
            Err(failure) if failure.unauthorized => {
                let Some(refused) = &key else {
                    return Err(failure.error);
                };
                let Some(name) = &endpoint.credential else {
                    return Err(failure.error);
                };
                key = Some(net::refreshed_secret(
                    ctx,
                    &endpoint.shown(),
                    name,
                    &endpoint.parsed_url()?,
                    refused,
                    failure.error,
                )?);
                refreshed = true;
            }
            Err(failure) if failure.retry_here && retries < options.max_retries => {
                let wait = net::retry_wait(failure.error.retry_after, options.backoff, retries);
                if wait > MAX_INTERNAL_WAIT {
                    return Err(failure.error);
                }
                retries += 1;
                tracing::info!(
                    node = ctx.node_id(),
                    wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    retry = retries,
                    "{}; trying again",
                    failure.error.message
                );
                tokio::select! {
                    () = cancel.cancelled() => return Err(BlockError::cancelled()),
                    () = tokio::time::sleep(wait) => {}
                }
            }
            Err(failure) => return Err(failure.error),
        }
    }
}

fn headers(endpoint: &Endpoint, key: Option<&Secret>) -> Result<HeaderMap, BlockError> {
    let mut headers = HeaderMap::new();
    let secret_header = |value: String| {
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            BlockError::permanent(format!(
                "the API key in credential `{}` has characters not allowed in an HTTP header; store it again without line breaks",
                endpoint.credential.as_deref().unwrap_or_default()
            ))
        })?;
        value.set_sensitive(true);
        Ok::<_, BlockError>(value)
    };
    for (name, value) in endpoint.wire.fixed_headers() {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if let Some(key) = key {
        let (name, value) = endpoint.wire.key_header(key.expose());
        headers.insert(name, secret_header(value)?);
    }
    Ok(headers)
}

async fn send_once(
    endpoint: &Endpoint,
    request: &ChatRequest,
    key: Option<&Secret>,
    options: CallOptions,
    ctx: &dyn RunCtx,
    partial_port: &str,
) -> Result<Reply, Failure> {
    let shown = endpoint.shown();
    let redact = |text: &str| redact(key, text);
    // Held until the whole reply has streamed in.
    let _slot = net::request_slot(ctx, &endpoint.base_url)
        .await
        .map_err(Failure::fatal)?;
    let http = net::client().map_err(Failure::fatal)?;
    let call = http
        .post(endpoint.url())
        .headers(headers(endpoint, key).map_err(Failure::fatal)?)
        .json(&endpoint.wire.body(request, &endpoint.base_url))
        .build()
        .map_err(|e| Failure::fatal(send_error(endpoint, e)))?;
    tracing::debug!(provider = endpoint.wire.name(), model = %request.model, stream = request.stream, "calling the model");
    let timed_out = || {
        Failure::fatal(BlockError::transient(format!(
            "no reply from {shown} within {} ms; raise the block's timeout_ms if the model is slow to start",
            options.timeout.as_millis()
        )))
    };
    let sending = net::execute(ctx, call, |e| send_error(endpoint, e));
    let response = tokio::time::timeout(options.timeout, sending)
        .await
        .map_err(|_| timed_out())?
        .map_err(Failure::fatal)?;
    let status = response.status();
    if !status.is_success() {
        let headers = response.headers().clone();
        let text = match tokio::time::timeout(options.timeout, response.text()).await {
            Ok(Ok(text)) => text,
            _ => String::new(),
        };
        return Err(status_failure(
            endpoint,
            &request.model,
            status,
            &headers,
            &redact(&text),
        ));
    }
    if !request.stream {
        let text = tokio::time::timeout(options.timeout, response.text())
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| {
                Failure::fatal(BlockError::transient(format!(
                    "the reply from {shown} was cut off: {}",
                    agentloom_core::error_chain(&e.without_url())
                )))
            })?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            Failure::fatal(BlockError::permanent(format!(
                "{shown} answered with something that is not JSON ({e}): {}; check that base_url points at the API",
                quote(&redact(&text))
            )))
        })?;
        return endpoint.wire.parse_reply(&json).map_err(|problem| {
            Failure::fatal(BlockError::permanent(format!(
                "{shown} answered in an unexpected shape: {problem}; check that `provider` matches the server"
            )))
        });
    }
    read_stream(endpoint, response, options, ctx, partial_port, key).await
}

async fn read_stream(
    endpoint: &Endpoint,
    response: reqwest::Response,
    options: CallOptions,
    ctx: &dyn RunCtx,
    partial_port: &str,
    key: Option<&Secret>,
) -> Result<Reply, Failure> {
    let shown = endpoint.shown();
    let mut parser = endpoint.wire.stream_parser();
    let idle = |parser: &dyn StreamParse| {
        Failure::fatal(BlockError::transient(format!(
            "the reply stream from {shown} stalled: nothing arrived for {} ms after {} characters; the partial reply was discarded (raise timeout_ms if the model is this slow)",
            options.timeout.as_millis(),
            parser.text_len()
        )))
    };
    let cut = |parser: &dyn StreamParse, cause: &str| {
        Failure::fatal(BlockError::transient(format!(
            "the reply stream from {shown} was cut off after {} characters{cause}; the partial reply was discarded. The connection dropped or a proxy closed it; the node's retry policy can try again",
            parser.text_len()
        )))
    };
    let fault = |fault: StreamFault| match fault {
        StreamFault::Provider(message) => Failure::fatal(BlockError::transient(format!(
            "{shown} reported an error in the middle of its reply: {}",
            quote(&redact(key, &message))
        ))),
        StreamFault::Malformed(message) => Failure::fatal(BlockError::permanent(format!(
            "the reply stream from {shown} is not in the expected format: {message}; check that `provider` matches the server"
        ))),
    };
    let emit = |piece: Option<String>| {
        if let Some(piece) = piece {
            ctx.partial(partial_port, &piece);
        }
    };
    match endpoint.wire.framing() {
        Framing::ServerSentEvents => {
            let mut events = response.bytes_stream().eventsource();
            loop {
                let next = tokio::time::timeout(options.timeout, events.next())
                    .await
                    .map_err(|_| idle(&*parser))?;
                match next {
                    None => break,
                    Some(Err(err)) => {
                        let cause = match err {
                            eventsource_stream::EventStreamError::Transport(e) => {
                                agentloom_core::error_chain(&e.without_url())
                            }
                            other => other.to_string(),
                        };
                        return Err(cut(&*parser, &format!(" ({cause})")));
                    }
                    Some(Ok(event)) => {
                        emit(parser.feed(&event.event, &event.data).map_err(fault)?);
                        if parser.is_done() {
                            break;
                        }
                    }
                }
            }
        }
        Framing::JsonLines => {
            let mut bytes = response.bytes_stream();
            let mut buffer: Vec<u8> = Vec::new();
            'read: loop {
                let next = tokio::time::timeout(options.timeout, bytes.next())
                    .await
                    .map_err(|_| idle(&*parser))?;
                match next {
                    None => break,
                    Some(Err(e)) => {
                        return Err(cut(
                            &*parser,
                            &format!(" ({})", agentloom_core::error_chain(&e.without_url())),
                        ));
                    }
                    Some(Ok(chunk)) => {
                        buffer.extend_from_slice(&chunk);
                        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                            let line: Vec<u8> = buffer.drain(..=end).collect();
                            let line = String::from_utf8_lossy(&line);
                            emit(parser.feed("", &line).map_err(fault)?);
                            if parser.is_done() {
                                break 'read;
                            }
                        }
                    }
                }
            }
            if !parser.is_done() && !buffer.is_empty() {
                let line = String::from_utf8_lossy(&buffer).into_owned();
                emit(parser.feed("", &line).map_err(fault)?);
            }
        }
    }
    if !parser.is_complete() {
        return Err(cut(&*parser, " before its end marker"));
    }
    Ok(parser.into_reply())
}

fn send_error(endpoint: &Endpoint, err: reqwest::Error) -> BlockError {
    let shown = endpoint.shown();
    let (connect, timeout) = (err.is_connect(), err.is_timeout());
    let cause = agentloom_core::error_chain(&err.without_url());
    if connect {
        let hint = endpoint.wire.connect_hint();
        return BlockError::transient(format!("could not connect to {shown}: {cause}{hint}"));
    }
    if timeout {
        return BlockError::transient(format!("the request to {shown} timed out: {cause}"));
    }
    BlockError::transient(format!("the request to {shown} failed: {cause}"))
}

/// The provider's own message from an error body, else the body itself, cut short.
fn provider_message(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|json| {
            let error = json.get("error").unwrap_or(&json);
            error
                .get("message")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
                .or_else(|| error.as_str().map(str::to_owned))
        });
    quote(from_json.as_deref().unwrap_or(body.trim()))
}

fn quote(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= MAX_QUOTE {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(MAX_QUOTE).collect();
        cut.push('…');
        cut
    }
}

fn status_failure(
    endpoint: &Endpoint,
    model: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &str,
) -> Failure {
    let shown = endpoint.shown();
    let code = status.as_u16();
    let said = provider_message(body);
    let said_part = if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    };
    let data = agentloom_core::Value::object(std::collections::BTreeMap::from([
        (
            "status".to_owned(),
            agentloom_core::Value::Integer(i64::from(code)),
        ),
        (
            "provider_message".to_owned(),
            agentloom_core::Value::text(said.clone()),
        ),
    ]));
    let credential = endpoint.credential.as_deref().unwrap_or_default();
    let (error, retry_here) = match code {
        401 | 403 if endpoint.credential.is_some() => {
            let env = secret_env_var(credential);
            let what = if code == 401 {
                "refused the API key"
            } else {
                "denied access with the API key"
            };
            // The provider's message is left out for 401: some echo part of the key.
            let detail = if code == 403 {
                said_part.clone()
            } else {
                String::new()
            };
            (
                BlockError::permanent(format!(
                    "{shown} {what} (HTTP {code}{detail}). The key comes from credential `{credential}`: check or replace it in Credentials, or set {env} for headless runs"
                )),
                false,
            )
        }
        401 | 403 => {
            // No key was sent: none is implied, so say which field to fill in.
            let example = if endpoint.wire.runs_locally() {
                "my-key"
            } else {
                endpoint.wire.name()
            };
            (
                BlockError::permanent(format!(
                    "{shown} needs an API key (HTTP {code}{said_part}), and this block sends none because its `credential` is empty: set the block's `credential` to the name of a stored credential holding the key (e.g. `{example}`; add it in Credentials, or set {} for headless runs)",
                    secret_env_var(example)
                )),
                false,
            )
        }
        404 => {
            let hint = endpoint.wire.not_found_hint(model);
            (
                BlockError::permanent(format!(
                    "model `{model}` was not found by {shown} (HTTP 404{said_part}){hint}"
                )),
                false,
            )
        }
        429 => {
            let mut error = BlockError::transient(format!(
                "{shown} is rate limiting requests (HTTP 429{said_part})"
            ));
            if let Some(wait) = net::retry_after(headers) {
                error = error.with_retry_after(wait);
            }
            (error, true)
        }
        408 => (
            BlockError::transient(format!(
                "{shown} timed out the request (HTTP 408{said_part})"
            )),
            true,
        ),
        500..=599 => {
            let mut error = BlockError::transient(format!(
                "{shown} had a server error (HTTP {status}{said_part})"
            ));
            if let Some(wait) = net::retry_after(headers) {
                error = error.with_retry_after(wait);
            }
            (error, true)
        }
        _ => (
            BlockError::permanent(format!(
                "{shown} rejected the request (HTTP {status}{said_part})"
            )),
            false,
        ),
    };
    Failure {
        error: error.with_data(data),
        retry_here,
        unauthorized: code == 401,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(kind: &str, base: &str, credential: Option<&str>) -> Endpoint {
        Endpoint::new(wire_format(kind).unwrap(), base, credential).unwrap()
    }

    #[test]
    fn every_provider_name_has_its_wire_format() {
        let names: Vec<&str> = PROVIDERS.iter().map(|wire| wire.name()).collect();
        assert_eq!(names, PROVIDER_NAMES);
        assert!(wire_format("nope").is_none());
    }

    #[test]
    fn endpoints_default_their_url_but_never_their_credential() {
        let e = endpoint("openai", "", None);
        assert_eq!(e.url(), "https://api.openai.com/v1/chat/completions");
        // Not even the hosted API implies a credential: none named, none sent.
        assert_eq!(e.credential, None);
        let e = endpoint("openai", "http://127.0.0.1:8080/v1/", None);
        assert_eq!(e.url(), "http://127.0.0.1:8080/v1/chat/completions");
        assert_eq!(e.credential, None);
        let e = endpoint("openai", "http://127.0.0.1:8080/v1", Some(" groq "));
        assert_eq!(e.credential.as_deref(), Some("groq"));
        assert_eq!(endpoint("openai", "", Some("  ")).credential, None);
        let e = endpoint("anthropic", "", None);
        assert_eq!(e.url(), "https://api.anthropic.com/v1/messages");
        assert_eq!(e.credential, None);
        assert_eq!(
            endpoint("anthropic", "http://h/v1", None).url(),
            "http://h/v1/messages"
        );
        let e = endpoint("ollama", "", None);
        assert_eq!(e.url(), "http://127.0.0.1:11434/api/chat");
        assert_eq!(e.credential, None);
        assert!(
            Endpoint::new(wire_format("openai").unwrap(), "ftp://x", None)
                .unwrap_err()
                .contains("ftp")
        );
        assert_eq!(
            shown_url("https://u:p@h.example/v1?key=abc"),
            "https://h.example/v1"
        );
    }

    /// What an untrusted graph file's runs get for every credential.
    fn refused(name: &str) -> Result<Secret, SecretError> {
        Err(SecretError::Unusable {
            name: name.to_owned(),
            message: "graph file /tmp/x.json is not trusted: run `agentloom trust /tmp/x.json`"
                .to_owned(),
        })
    }

    #[test]
    fn a_credential_the_config_does_not_name_is_not_looked_up() {
        for (kind, base) in [
            ("openai", ""),
            ("openai", "http://127.0.0.1:11434/v1"),
            ("anthropic", ""),
            ("ollama", ""),
        ] {
            let e = endpoint(kind, base, None);
            let key = e
                .key_from(|name| panic!("credential `{name}` was looked up for {kind} {base}"))
                .unwrap();
            assert!(key.is_none(), "{kind} {base}");
            // Refusing every credential changes nothing when none is asked for.
            assert!(e.key_from(refused).unwrap().is_none(), "{kind} {base}");
        }
    }

    #[test]
    fn a_named_credential_is_required_whatever_the_endpoint() {
        for base in ["", "http://127.0.0.1:8080/v1"] {
            let e = endpoint("openai", base, Some("groq"));
            let err = e.key_from(refused).unwrap_err();
            assert!(!err.is_retryable());
            assert_eq!(
                err.message,
                format!(
                    "{} needs an API key: credential `groq`: graph file /tmp/x.json is not trusted: run `agentloom trust /tmp/x.json`",
                    e.shown()
                )
            );
            let err = e
                .key_from(|name| {
                    Err(SecretError::Missing {
                        name: name.to_owned(),
                        env_var: secret_env_var(name),
                    })
                })
                .unwrap_err();
            assert!(
                err.message.contains("credential `groq` is not set")
                    && err.message.contains("AGENTLOOM_SECRET_GROQ"),
                "{}",
                err.message
            );
            let err = e
                .key_from(|_| {
                    Err(SecretError::Unavailable {
                        detail: "no D-Bus session".to_owned(),
                        hint: "set the environment variable instead".to_owned(),
                    })
                })
                .unwrap_err();
            assert!(err.message.contains("no D-Bus session"), "{}", err.message);
            let err = e.key_from(|_| Ok(Secret::new(String::new()))).unwrap_err();
            assert!(
                err.message.starts_with("credential `groq` is empty"),
                "{}",
                err.message
            );
            let key = e
                .key_from(|name| {
                    assert_eq!(name, "groq");
                    Ok(Secret::new("sk-groq".to_owned()))
                })
                .unwrap()
                .unwrap();
            assert_eq!(key.expose(), "sk-groq");
        }
    }

    #[test]
    fn a_401_without_a_credential_says_to_name_one() {
        for (kind, example) in [
            ("openai", "openai"),
            ("anthropic", "anthropic"),
            ("ollama", "my-key"),
        ] {
            let e = endpoint(kind, "", None);
            let f = status_failure(
                &e,
                "m",
                StatusCode::UNAUTHORIZED,
                &HeaderMap::new(),
                r#"{"error":{"message":"You didn't provide an API key."}}"#,
            );
            assert!(!f.retry_here && !f.error.is_retryable());
            assert!(f.unauthorized);
            assert!(
                f.error.message.starts_with(&format!(
                    "{} needs an API key (HTTP 401: You didn't provide an API key.), and this block sends none because its `credential` is empty: set the block's `credential` to the name of a stored credential holding the key (e.g. `{example}`",
                    e.shown()
                )),
                "{}",
                f.error.message
            );
            assert!(
                f.error.message.contains(&secret_env_var(example)),
                "{}",
                f.error.message
            );
        }
    }

    #[test]
    fn statuses_become_actionable_errors() {
        let e = endpoint("openai", "http://127.0.0.1:1/v1", Some("openai"));
        let mut headers = HeaderMap::new();
        let f = status_failure(
            &e,
            "gpt-x",
            StatusCode::UNAUTHORIZED,
            &headers,
            r#"{"error":{"message":"Incorrect API key provided: sk-abc"}}"#,
        );
        assert!(!f.retry_here);
        assert!(
            f.error.message.contains("refused the API key (HTTP 401)"),
            "{}",
            f.error.message
        );
        assert!(f.error.message.contains("credential `openai`"));
        assert!(f.error.message.contains("AGENTLOOM_SECRET_OPENAI"));
        assert!(!f.error.message.contains("sk-abc"));

        let f = status_failure(
            &e,
            "gpt-x",
            StatusCode::NOT_FOUND,
            &headers,
            r#"{"error":{"message":"no such model"}}"#,
        );
        assert!(f.error.message.starts_with("model `gpt-x` was not found by the OpenAI-compatible server at http://127.0.0.1:1/v1 (HTTP 404: no such model)"), "{}", f.error.message);

        headers.insert("retry-after", HeaderValue::from_static("3"));
        let f = status_failure(
            &e,
            "m",
            StatusCode::TOO_MANY_REQUESTS,
            &headers,
            "slow down",
        );
        assert!(f.retry_here);
        assert!(f.error.is_retryable());
        assert_eq!(f.error.retry_after, Some(Duration::from_secs(3)));
        assert_eq!(f.error.data.as_ref().unwrap().to_json()["status"], 429);

        let f = status_failure(&e, "m", StatusCode::BAD_GATEWAY, &HeaderMap::new(), "");
        assert!(f.retry_here && f.error.is_retryable());
        assert!(
            f.error
                .message
                .contains("server error (HTTP 502 Bad Gateway)")
        );

        let f = status_failure(
            &e,
            "m",
            StatusCode::BAD_REQUEST,
            &HeaderMap::new(),
            &"x".repeat(2000),
        );
        assert!(!f.error.is_retryable());
        assert!(f.error.message.chars().count() < 600);

        let o = endpoint("ollama", "", None);
        let f = status_failure(
            &o,
            "llama9",
            StatusCode::NOT_FOUND,
            &HeaderMap::new(),
            r#"{"error":"model 'llama9' not found"}"#,
        );
        assert!(
            f.error.message.contains("ollama pull llama9"),
            "{}",
            f.error.message
        );
    }
}
