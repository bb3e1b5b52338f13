//! Outbound HTTP for every block: one process-wide client (one connection pool and one
//! TLS setup, built on first use, so a run that sends nothing never builds it), the run's
//! per-host request slots, and how long to wait before trying a request again.
//!
//! Credentials leave only for their hosts: before every request, and again before every
//! redirect it follows, [`execute`] asks the run ([`RunCtx::check_egress`]) whether the URL,
//! a header or the body carries a secret the run resolved for other hosts, and refuses to
//! send it. The client follows redirects itself (the reqwest client follows none) so that
//! no hop escapes the check: on a hop to another scheme, host or port it drops
//! `Authorization`, cookies, and every header and query parameter that carries a secret
//! not bound to the new host, sends no `Referer`, and fails when the body still carries one.
//! A request to a configured endpoint ([`execute`], [`send`]: a model provider, a service)
//! is not sent on without the credential it was configured with: such a redirect fails,
//! naming the credential and the new host, where a URL the graph chose is followed.
//!
//! Blocks set timeouts per request: the client only bounds connecting.
//!
//! URLs that the graph or its data choose (`http.request`, the agent's `http_get`, the
//! instance `web.search` asks) go through [`client_for`] with a [`Reach`]: the public
//! client refuses a connection whose peer is a loopback, private, link-local or otherwise
//! local address, checked on the address actually connected (after DNS, on every redirect
//! hop), unless the graph allows the private network and the run does too
//! ([`RunCtx::private_network_allowed`], off for a graph file that is not trusted).
//! Configured endpoints (LLM providers, MCP servers, services) may be local and use the
//! open client whatever the run allows: a shared graph using a local model must run.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, BlockError, CallRecording, ErrorClass, OutboundCall,
    RecordedResponse, Replayed, RequestSlot, RunCtx, Secret, SecretError, Value, error_chain,
    host_of,
};
use reqwest::header::{
    AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, HeaderMap, LOCATION,
    PROXY_AUTHORIZATION, REFERER, RETRY_AFTER, TRANSFER_ENCODING,
};
use reqwest::{Method, Request, Response, StatusCode, Url};

pub(crate) const USER_AGENT: &str = concat!("agentloom/", env!("CARGO_PKG_VERSION"));
/// A host that has not accepted the connection by then is not going to.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Redirects followed for one request, as browsers and reqwest do.
const MAX_REDIRECTS: usize = 10;

/// The client every block shares. It follows no redirect: [`execute`] does.
pub(crate) fn client() -> Result<&'static reqwest::Client, BlockError> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .user_agent(USER_AGENT)
                .connect_timeout(CONNECT_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| error_chain(&e))
        })
        .as_ref()
        .map_err(|e| BlockError::permanent(format!("the HTTP client could not be set up: {e}")))
}

/// The shared client, for connections that must not follow redirects at all (MCP over
/// HTTP, whose session and token a redirect would replay elsewhere).
pub(crate) fn client_without_redirects() -> Result<&'static reqwest::Client, BlockError> {
    client()
}

fn built(
    cell: &'static OnceLock<Result<reqwest::Client, String>>,
    builder: impl FnOnce() -> reqwest::ClientBuilder,
) -> Result<&'static reqwest::Client, BlockError> {
    cell.get_or_init(|| builder().build().map_err(|e| error_chain(&e)))
        .as_ref()
        .map_err(|e| BlockError::permanent(format!("the HTTP client could not be set up: {e}")))
}

/// Which addresses a request to a URL the graph chose may connect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Public addresses only.
    Public,
    /// Any address, the machine's own and the local network's included, when the run
    /// allows the private network ([`RunCtx::private_network_allowed`]); else `Public`.
    Any,
}

impl Reach {
    /// `Any` when the graph allows the private network, else `Public`.
    pub(crate) fn allowing_private(allow_private_network: bool) -> Reach {
        if allow_private_network {
            Reach::Any
        } else {
            Reach::Public
        }
    }
}

/// The client a request goes out on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Connect {
    /// Any address.
    Open,
    /// Public addresses only; a refusal says why.
    PublicOnly(Why),
}

impl Connect {
    /// The client for a request to a URL the graph chose, allowed `reach`, in the run of `ctx`.
    fn of(ctx: &dyn RunCtx, reach: Reach) -> Connect {
        let run_allows = ctx.private_network_allowed();
        match (reach, run_allows) {
            (Reach::Any, true) => Connect::Open,
            (Reach::Public, true) => Connect::PublicOnly(Why::GraphSetting),
            (Reach::Any, false) => Connect::PublicOnly(Why::Untrusted),
            (Reach::Public, false) => Connect::PublicOnly(Why::UntrustedAndGraphSetting),
        }
    }

    fn client(self) -> Result<&'static reqwest::Client, BlockError> {
        static SETTING: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
        static UNTRUSTED: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
        static BOTH: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
        let (cell, why) = match self {
            Connect::Open => return client(),
            Connect::PublicOnly(why @ Why::GraphSetting) => (&SETTING, why),
            Connect::PublicOnly(why @ Why::Untrusted) => (&UNTRUSTED, why),
            Connect::PublicOnly(why @ Why::UntrustedAndGraphSetting) => (&BOTH, why),
        };
        built(cell, || {
            reqwest::Client::builder()
                .user_agent(USER_AGENT)
                .connect_timeout(CONNECT_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .connector_layer(PublicOnlyLayer(why))
        })
    }
}

/// The shared client for a request to a URL the graph chose, allowed `reach` by the graph,
/// in the run of `ctx`: the open one, or the same set-up that refuses to connect to a local
/// address (when the run may not reach the private network). Send the request with [`send_within`] and
/// the same `reach`: it picks the client again.
pub(crate) fn client_for(
    ctx: &dyn RunCtx,
    reach: Reach,
) -> Result<&'static reqwest::Client, BlockError> {
    Connect::of(ctx, reach).client()
}

/// Why a local address may not be reached: what would let it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// The graph did not allow the private network.
    GraphSetting,
    /// The graph allowed it, but the run may not: its graph file is not trusted.
    Untrusted,
    /// Neither the graph nor the run allows it.
    UntrustedAndGraphSetting,
}

/// Why a connection was refused: its peer is a local address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LocalAddressRefused {
    pub address: std::net::IpAddr,
    pub kind: &'static str,
    pub why: Why,
}

impl std::fmt::Display for LocalAddressRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self { address, kind, .. } = self;
        match self.why {
            Why::GraphSetting => write!(
                f,
                "{address} is {kind} address, which a graph may reach only with allow_private_network: true"
            ),
            Why::Untrusted => write!(
                f,
                "{address} is {kind} address, which this run may not reach: its graph file is not trusted (if you trust it: agentloom trust FILE)"
            ),
            Why::UntrustedAndGraphSetting => write!(
                f,
                "{address} is {kind} address, which this run may not reach: its graph file is not trusted (if you trust it: agentloom trust FILE, and set allow_private_network: true)"
            ),
        }
    }
}

impl std::error::Error for LocalAddressRefused {}

/// The refusal in `err`'s causes, if a local address was why it failed.
pub(crate) fn local_address_refused<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a LocalAddressRefused> {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(refused) = err.downcast_ref::<LocalAddressRefused>() {
            return Some(refused);
        }
        cause = err.source();
    }
    None
}

/// What kind of local address `ip` is, or `None` for a public one.
pub(crate) fn local_kind(ip: std::net::IpAddr) -> Option<&'static str> {
    use std::net::IpAddr;
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("a loopback")
            } else if v4.is_private() {
                Some("a private")
            } else if v4.is_link_local() {
                Some("a link-local")
            } else if v4.is_unspecified() || a == 0 {
                Some("an unspecified")
            } else if a == 100 && (64..128).contains(&b) {
                Some("a shared (carrier-grade NAT)")
            } else if v4.is_broadcast() || v4.is_multicast() {
                Some("a broadcast or multicast")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("a loopback")
            } else if v6.is_unspecified() {
                Some("an unspecified")
            } else if first & 0xfe00 == 0xfc00 {
                Some("a private (unique local)")
            } else if first & 0xffc0 == 0xfe80 {
                Some("a link-local")
            } else if v6.is_multicast() {
                Some("a multicast")
            } else {
                None
            }
        }
    }
}

/// Wraps the client's connector: a connection whose peer is a local address is closed and
/// the request fails with [`LocalAddressRefused`] (saying `Why`) before anything is sent on it.
#[derive(Clone, Copy)]
struct PublicOnlyLayer(Why);

impl<S> tower_layer::Layer<S> for PublicOnlyLayer {
    type Service = PublicOnly<S>;

    fn layer(&self, inner: S) -> PublicOnly<S> {
        PublicOnly(inner, self.0)
    }
}

#[derive(Clone)]
struct PublicOnly<S>(S, Why);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, Request> tower_service::Service<Request> for PublicOnly<S>
where
    S: tower_service::Service<Request, Error = BoxError>,
    S::Response: hyper_util::client::legacy::connect::Connection,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let connecting = self.0.call(request);
        let why = self.1;
        Box::pin(async move {
            use hyper_util::client::legacy::connect::Connection as _;
            let connection = connecting.await?;
            let mut extras = http::Extensions::new();
            connection.connected().get_extras(&mut extras);
            let Some(info) = extras.get::<hyper_util::client::legacy::connect::HttpInfo>() else {
                return Err(
                    "the address connected to is not known, so it cannot be checked".into(),
                );
            };
            let address = info.remote_addr().ip();
            match local_kind(address) {
                Some(kind) => Err(Box::new(LocalAddressRefused { address, kind, why }) as BoxError),
                None => Ok(connection),
            }
        })
    }
}

/// Sends `request` on the shared open client (for a configured endpoint: a model
/// provider, a service) and follows its redirects (at most [`MAX_REDIRECTS`]), each request
/// checked against the run's secrets before it leaves (see the module header). `failed`
/// words a request that could not be sent.
pub(crate) async fn execute(
    ctx: &dyn RunCtx,
    request: Request,
    failed: impl Fn(reqwest::Error) -> BlockError,
) -> Result<Response, BlockError> {
    execute_on(
        ctx,
        Connect::Open,
        OnRedirect::RefuseWithout,
        None,
        request,
        failed,
    )
    .await
}

/// What a redirect to another origin does with the credentials a request carries (the
/// redirect drops them: `Authorization`, cookies, every secret not bound to the new host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnRedirect {
    /// Followed without them, as browsers do: a URL the graph chose.
    DropCredentials,
    /// Refused, naming the credential and the new host, when a secret of the run would be
    /// left behind: a configured endpoint (a model provider, a service) would otherwise be
    /// called without the key it was configured with, and answer 401 with no hint.
    RefuseWithout,
}

async fn execute_on(
    ctx: &dyn RunCtx,
    connect: Connect,
    on_redirect: OnRedirect,
    approved: Option<&mut ApprovedReach>,
    request: Request,
    failed: impl Fn(reqwest::Error) -> BlockError,
) -> Result<Response, BlockError> {
    let method = request.method().as_str().to_owned();
    let url = request.url().to_string();
    let body = request
        .body()
        .and_then(reqwest::Body::as_bytes)
        .unwrap_or_default()
        .to_vec();
    let call = OutboundCall {
        method: &method,
        url: &url,
        body: &body,
    };
    match ctx.replay_call(&call) {
        Replayed::Answer(recorded) => return Ok(replayed_response(request.url(), recorded)),
        Replayed::Missing(error) => return Err(error),
        Replayed::Live => {}
    }
    let recording = ctx.record_call(&call);
    let response =
        send_following_redirects(ctx, connect, on_redirect, approved, request, failed).await?;
    Ok(match recording {
        Some(recording) => recorded_as_read(response, recording),
        None => response,
    })
}

/// Bodies larger than this are not kept for replay while they are read (the run log keeps
/// a body of at most 1 MiB by default, larger ones with `--full-log`).
const MAX_RECORDED_BODY: usize = 16 << 20;

/// A response built from a recording: status, headers and the whole body at once.
fn replayed_response(url: &Url, recorded: RecordedResponse) -> Response {
    use reqwest::ResponseBuilderExt as _;
    let mut builder = http::Response::builder()
        .status(recorded.status)
        .url(url.clone());
    for (name, value) in &recorded.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let built = builder
        .body(reqwest::Body::from(recorded.body.clone()))
        .unwrap_or_else(|_| {
            // A recorded header that no longer parses: the body and status still answer.
            let mut plain = http::Response::new(reqwest::Body::from(recorded.body));
            *plain.status_mut() =
                http::StatusCode::from_u16(recorded.status).unwrap_or(http::StatusCode::OK);
            plain
        });
    Response::from(built)
}

/// `response` with its body passed on as it is read (a stream stays a stream) and kept by
/// `recording` once read (to its end, or as far as the block read it).
fn recorded_as_read(response: Response, recording: CallRecording) -> Response {
    use reqwest::ResponseBuilderExt as _;
    let status = response.status();
    let url = response.url().clone();
    let version = response.version();
    let mut headers = response.headers().clone();
    // The body read is decoded already, and its length is what is read.
    for header in [CONTENT_ENCODING, CONTENT_LENGTH, TRANSFER_ENCODING] {
        headers.remove(header);
    }
    let kept_headers = headers
        .iter()
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
        .collect();
    let body = RecordingBody {
        inner: Box::pin(response.bytes_stream()),
        status: status.as_u16(),
        headers: kept_headers,
        body: Vec::new(),
        recording: Some(recording),
    };
    let mut builder = http::Response::builder()
        .status(status)
        .version(version)
        .url(url);
    if let Some(map) = builder.headers_mut() {
        *map = headers;
    }
    let built = builder
        .body(reqwest::Body::wrap_stream(body))
        .unwrap_or_else(|_| http::Response::new(reqwest::Body::from(Vec::new())));
    Response::from(built)
}

type ByteStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// A response body that keeps what passes through it and hands it to its recording when
/// it is dropped, unless it broke off or grew over [`MAX_RECORDED_BODY`].
struct RecordingBody {
    inner: ByteStream,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    recording: Option<CallRecording>,
}

impl futures::Stream for RecordingBody {
    type Item = reqwest::Result<bytes::Bytes>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let next = this.inner.as_mut().poll_next(cx);
        match &next {
            std::task::Poll::Ready(Some(Ok(bytes))) if this.recording.is_some() => {
                if this.body.len() + bytes.len() > MAX_RECORDED_BODY {
                    this.recording = None;
                    this.body = Vec::new();
                } else {
                    this.body.extend_from_slice(bytes);
                }
            }
            // A body that broke off is no answer to replay.
            std::task::Poll::Ready(Some(Err(_))) => this.recording = None,
            _ => {}
        }
        next
    }
}

impl Drop for RecordingBody {
    fn drop(&mut self) {
        if let Some(recording) = self.recording.take() {
            recording.keep(RecordedResponse {
                status: self.status,
                headers: std::mem::take(&mut self.headers),
                body: std::mem::take(&mut self.body),
            });
        }
    }
}

/// Sends `request` and follows its redirects (see [`execute`]). With `approved`, a hop
/// refused for its local address is put to a person in safe mode (see [`send_asking`]);
/// a hop to a host and port they approved connects to wherever that is.
async fn send_following_redirects(
    ctx: &dyn RunCtx,
    connect: Connect,
    on_redirect: OnRedirect,
    mut approved: Option<&mut ApprovedReach>,
    mut request: Request,
    failed: impl Fn(reqwest::Error) -> BlockError,
) -> Result<Response, BlockError> {
    let mut from: Option<Url> = None;
    let mut hops = 0;
    while hops <= MAX_REDIRECTS {
        if let Err(refused) = check_egress(ctx, &request) {
            return Err(match &from {
                Some(from) => BlockError::permanent(format!(
                    "the redirect from {} to {} was not followed: {}",
                    host_of(from),
                    host_of(request.url()),
                    refused.message
                )),
                None => refused,
            });
        }
        // Kept to send again on a 307/308; a streamed body cannot be, so that redirect is
        // handed back as the answer.
        let again = request.try_clone();
        let url = request.url().clone();
        let hop = match approved.as_deref() {
            Some(approved) if approved.covers(&url) => Connect::Open,
            _ => connect,
        };
        // Kept to send once more should a person let it reach a local address.
        let retry = approved.as_ref().and_then(|_| request.try_clone());
        let response = match hop.client()?.execute(request).await {
            Ok(response) => response,
            Err(err) => {
                let Some(refused) = local_address_refused(&err).copied() else {
                    return Err(failed(err));
                };
                match (approved.as_deref_mut(), retry) {
                    (Some(approved), Some(retry)) if ctx.safe_mode() => {
                        ask_to_reach(ctx, approved, &retry, refused, from.as_ref()).await?;
                        // The same hop again, now to an approved host and port.
                        request = retry;
                        continue;
                    }
                    _ => {
                        return Err(match &from {
                            Some(from) => redirect_refused(from, &url, refused, None),
                            None => failed(err),
                        });
                    }
                }
            }
        };
        let carried = match on_redirect {
            OnRedirect::RefuseWithout => again.as_ref().map(|again| again.headers().clone()),
            OnRedirect::DropCredentials => None,
        };
        let Some(next) = again.and_then(|again| redirected(ctx, again, &response)) else {
            return Ok(response);
        };
        if let Some(headers) = carried {
            let parts: Vec<&[u8]> = headers.values().map(|v| v.as_bytes()).collect();
            if let Err(refused) = ctx.check_egress(next.url(), &parts) {
                return Err(BlockError::permanent(format!(
                    "the redirect from {} to {} was not followed: {}",
                    host_of(&url),
                    host_of(next.url()),
                    refused.message
                )));
            }
        }
        tracing::debug!(from = %host_of(&url), to = %host_of(next.url()), status = %response.status(), "following a redirect");
        from = Some(url);
        request = next;
        hops += 1;
    }
    Err(BlockError::permanent(format!(
        "more than {MAX_REDIRECTS} redirects from {}; check the URL",
        from.as_ref().map_or_else(String::new, host_of)
    )))
}

/// The local addresses a person let one request reach, each as the host and port of the
/// URL they were shown: a redirect to any other host or port (another loopback address,
/// `[::1]`, `localhost` for `127.0.0.1`, another port) is asked about again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ApprovedReach(Vec<(String, u16)>);

/// The key of [`ApprovedReach`] in an approval's checkpoint.
const APPROVED_REACH: &str = "approved_local_hosts";

impl ApprovedReach {
    fn target(url: &Url) -> Option<(String, u16)> {
        Some((
            url.host_str()?.to_ascii_lowercase(),
            url.port_or_known_default()?,
        ))
    }

    /// Whether a person approved reaching `url`'s host and port.
    pub(crate) fn covers(&self, url: &Url) -> bool {
        Self::target(url).is_some_and(|target| self.0.contains(&target))
    }

    fn add(&mut self, url: &Url) {
        if let Some(target) = Self::target(url)
            && !self.0.contains(&target)
        {
            self.0.push(target);
        }
    }

    /// What was approved before a run paused, from the checkpoint of the approval the
    /// node waited on ([`RunCtx::resume_checkpoint`]); nothing when there is none.
    pub(crate) fn resumed(ctx: &dyn RunCtx) -> Self {
        let checkpoint = ctx.resume_checkpoint();
        let hosts = checkpoint
            .as_ref()
            .and_then(Value::as_object)
            .and_then(|fields| fields.get(APPROVED_REACH))
            .and_then(Value::as_list)
            .unwrap_or_default();
        Self(
            hosts
                .iter()
                .filter_map(|host| {
                    let (name, port) = host.as_str()?.rsplit_once(':')?;
                    Some((name.to_owned(), port.parse().ok()?))
                })
                .collect(),
        )
    }

    fn checkpoint(&self) -> Value {
        Value::object(std::collections::BTreeMap::from([(
            APPROVED_REACH.to_owned(),
            Value::list(self.shown().into_iter().map(Value::text).collect()),
        )]))
    }

    fn shown(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect()
    }
}

/// A URL as a prompt or a message shows it: no user info, query or fragment.
fn shown_url(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

/// Why a redirect from `from` to `to` was not followed: `to`'s address is local.
fn redirect_refused(
    from: &Url,
    to: &Url,
    refused: LocalAddressRefused,
    approved: Option<&ApprovedReach>,
) -> BlockError {
    let covered = match approved {
        Some(approved) if !approved.0.is_empty() => format!(
            " (what was approved covers {} only)",
            approved.shown().join(", ")
        ),
        _ => String::new(),
    };
    BlockError::permanent(format!(
        "the redirect from {} to {} was not followed: {refused}{covered}",
        host_of(from),
        host_of(to)
    ))
}

/// Asks the person whether `request` may reach the local address it was refused (on a
/// redirect from `from`, if any); when they approve, its host and port join `approved`.
/// Fails when they do not, or nobody can answer, naming where it would have gone.
async fn ask_to_reach(
    ctx: &dyn RunCtx,
    approved: &mut ApprovedReach,
    request: &Request,
    refused: LocalAddressRefused,
    from: Option<&Url>,
) -> Result<(), BlockError> {
    let url = request.url();
    let method = request.method();
    let mut action = format!(
        "reach {} address: {method} {}",
        refused.kind,
        shown_url(url)
    );
    let mut arguments = std::collections::BTreeMap::from([
        ("method".to_owned(), Value::text(method.as_str())),
        ("url".to_owned(), Value::text(shown_url(url))),
        (
            "address".to_owned(),
            Value::text(refused.address.to_string()),
        ),
    ]);
    if let Some(from) = from {
        action.push_str(&format!(" (redirected from {})", shown_url(from)));
        arguments.insert("redirected_from".to_owned(), Value::text(shown_url(from)));
    }
    let question = ApprovalRequest::new(action, Value::object(arguments))
        .with_checkpoint(approved.checkpoint());
    let refusal = |why: &str| {
        let mut err = match from {
            Some(from) => redirect_refused(from, url, refused, Some(approved)),
            None => BlockError::permanent(format!(
                "{method} {} was refused: {refused}",
                shown_url(url)
            )),
        };
        if !why.is_empty() {
            err.message = format!("{}; {why}", err.message);
        }
        err
    };
    match ctx.request_approval(question).await {
        Ok(ApprovalDecision::Approved { .. }) => {
            approved.add(url);
            Ok(())
        }
        Ok(ApprovalDecision::Rejected { message }) => {
            Err(refusal(&format!("not approved: {message}")))
        }
        // Stopped, or paused until someone decides: the run says so itself.
        Err(err) if err.class == ErrorClass::Cancelled => Err(err),
        Err(err) => Err(refusal(&err.message)),
    }
}

/// Fails when `request` carries a secret of the run to a host it is not bound to.
fn check_egress(ctx: &dyn RunCtx, request: &Request) -> Result<(), BlockError> {
    let mut parts: Vec<&[u8]> = Vec::with_capacity(request.headers().len() + 1);
    parts.extend(
        request
            .headers()
            .values()
            .map(reqwest::header::HeaderValue::as_bytes),
    );
    if let Some(body) = request.body().and_then(reqwest::Body::as_bytes) {
        parts.push(body);
    }
    ctx.check_egress(request.url(), &parts)
}

/// The request a redirect `response` to `previous` asks for, or `None` when it is not a
/// redirect that can be followed (then it is the answer).
fn redirected(ctx: &dyn RunCtx, mut previous: Request, response: &Response) -> Option<Request> {
    let status = response.status();
    if !matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) {
        return None;
    }
    let location = response.headers().get(LOCATION)?.to_str().ok()?;
    let mut next_url = previous.url().join(location).ok()?;
    if !matches!(next_url.scheme(), "http" | "https") {
        return None;
    }
    next_url.set_fragment(None);
    let same_origin = {
        let old = previous.url();
        old.scheme() == next_url.scheme()
            && old.host_str() == next_url.host_str()
            && old.port_or_known_default() == next_url.port_or_known_default()
    };
    // 303, and 301/302 after a POST, become a GET without the body, as browsers do.
    let becomes_get = (status == StatusCode::SEE_OTHER && previous.method() != Method::HEAD)
        || (matches!(status.as_u16(), 301 | 302) && previous.method() == Method::POST);
    if becomes_get {
        *previous.method_mut() = Method::GET;
        *previous.body_mut() = None;
        for header in [
            CONTENT_TYPE,
            CONTENT_LENGTH,
            CONTENT_ENCODING,
            TRANSFER_ENCODING,
        ] {
            previous.headers_mut().remove(header);
        }
    }
    previous.headers_mut().remove(REFERER);
    if !same_origin {
        for header in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION] {
            previous.headers_mut().remove(header);
        }
        without_foreign_secrets(ctx, previous.headers_mut(), &mut next_url);
    }
    *previous.url_mut() = next_url;
    Some(previous)
}

/// Drops the headers and query parameters that carry a secret not bound to `url`'s host.
fn without_foreign_secrets(ctx: &dyn RunCtx, headers: &mut HeaderMap, url: &mut Url) {
    let mut bare = url.clone();
    bare.set_query(None);
    let foreign = |part: &[u8]| ctx.check_egress(&bare, &[part]).is_err();
    let carrying: Vec<_> = headers
        .iter()
        .filter(|(_, value)| foreign(value.as_bytes()))
        .map(|(name, _)| name.clone())
        .collect();
    for name in carrying {
        headers.remove(name);
    }
    if url.query().is_some() {
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(key, value)| !foreign(key.as_bytes()) && !foreign(value.as_bytes()))
            .map(|(key, value)| (key.into_owned(), value.into_owned()))
            .collect();
        url.set_query(None);
        if !kept.is_empty() {
            url.query_pairs_mut().extend_pairs(kept);
        }
    }
}

/// Waits for a slot to send a request to `url`'s host: the run's `requests_per_host`
/// (shared with its sub-runs) bounds the requests in flight per host. Hold the slot until
/// the answer is read. Fails as cancelled when the node is stopped while waiting.
pub(crate) async fn request_slot(ctx: &dyn RunCtx, url: &str) -> Result<RequestSlot, BlockError> {
    ctx.request_slot(url).await
}

/// A response sent under the run's per-host limit; its slot is freed when this is dropped,
/// so keep it until the body is read.
pub(crate) struct Sent {
    pub response: reqwest::Response,
    _slot: RequestSlot,
}

/// Waits for a request slot for the request's host, then sends it with [`execute`] (the
/// open client: for configured endpoints). Fails as cancelled when the node is stopped
/// first; `failed` words a request that could not be built or sent (unreachable host,
/// timeout…).
pub(crate) async fn send(
    ctx: &dyn RunCtx,
    request: reqwest::RequestBuilder,
    failed: impl Fn(reqwest::Error) -> BlockError,
) -> Result<Sent, BlockError> {
    send_on(
        ctx,
        Connect::Open,
        OnRedirect::RefuseWithout,
        None,
        request,
        failed,
    )
    .await
}

/// [`send`] for a URL the graph chose, on the client for `reach` in this run (see
/// [`client_for`]).
pub(crate) async fn send_within(
    ctx: &dyn RunCtx,
    reach: Reach,
    request: reqwest::RequestBuilder,
    failed: impl Fn(reqwest::Error) -> BlockError,
) -> Result<Sent, BlockError> {
    send_on(
        ctx,
        Connect::of(ctx, reach),
        OnRedirect::DropCredentials,
        None,
        request,
        failed,
    )
    .await
}

/// [`send_within`] for a request a person may let through: in safe mode, a local address
/// refused, for the request or for any redirect it follows, is put to the person naming
/// the method and URL (and where it was redirected from). Each approval covers that URL's
/// host and port only, so a redirect elsewhere is asked about again. `approved` starts
/// with what was approved before (see [`ApprovedReach::resumed`]) and gains each approval.
pub(crate) async fn send_asking(
    ctx: &dyn RunCtx,
    reach: Reach,
    approved: &mut ApprovedReach,
    request: reqwest::RequestBuilder,
    failed: impl Fn(reqwest::Error) -> BlockError,
) -> Result<Sent, BlockError> {
    send_on(
        ctx,
        Connect::of(ctx, reach),
        OnRedirect::DropCredentials,
        Some(approved),
        request,
        failed,
    )
    .await
}

async fn send_on(
    ctx: &dyn RunCtx,
    connect: Connect,
    on_redirect: OnRedirect,
    approved: Option<&mut ApprovedReach>,
    request: reqwest::RequestBuilder,
    failed: impl Fn(reqwest::Error) -> BlockError,
) -> Result<Sent, BlockError> {
    let request = request.build().map_err(&failed)?;
    let slot = request_slot(ctx, request.url().as_str()).await?;
    let response = tokio::select! {
        () = ctx.cancel_token().cancelled() => return Err(BlockError::cancelled()),
        response = execute_on(ctx, connect, on_redirect, approved, request, failed) => response?,
    };
    Ok(Sent {
        response,
        _slot: slot,
    })
}

/// How long the server asks us to wait: `retry-after-ms`, else `Retry-After` in seconds
/// (fractions allowed; the HTTP-date form is not read), else `x-ratelimit-reset` (epoch
/// seconds, as GitHub sends) minus now.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    // `try_`: a huge number must not panic.
    let seconds = |secs: f64| Duration::try_from_secs_f64(secs).ok();
    if let Some(wait) = text("retry-after-ms")
        .and_then(|t| t.parse::<f64>().ok())
        .and_then(|ms| seconds(ms / 1000.0))
    {
        return Some(wait);
    }
    if let Some(wait) = text(RETRY_AFTER.as_str())
        .and_then(|t| t.parse::<f64>().ok())
        .and_then(seconds)
    {
        return Some(wait);
    }
    let reset = text("x-ratelimit-reset")?.parse::<u64>().ok()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(reset.saturating_sub(now).max(1)))
}

/// The wait before retry number `retries` (0 for the first): what the server asked for,
/// else `backoff` doubled for each retry before.
pub(crate) fn retry_wait(asked: Option<Duration>, backoff: Duration, retries: u32) -> Duration {
    asked.unwrap_or_else(|| backoff.saturating_mul(1 << retries.min(10)))
}

/// Credential `name`, which a block is configured to send with a request to `url`: the
/// run's secret, or a failure naming the credential, the host and how to allow it when the
/// credential may not be sent there. Every block that sends a configured credential gets it
/// here (or checks it with [`credential_refused`]), so none sends the request without it.
pub(crate) fn credential_for(
    ctx: &dyn RunCtx,
    name: &str,
    url: &Url,
) -> Result<Secret, BlockError> {
    let secret = ctx.secret(name)?;
    match credential_refused(name, &secret, url) {
        Some(refused) => Err(BlockError::permanent(refused)),
        None => Ok(secret),
    }
}

/// Why `secret`, of credential `name`, may not be sent to `url`: it is bound to other
/// hosts (see [`agentloom_core::refused_message`]). `None` when it may.
pub(crate) fn credential_refused(name: &str, secret: &Secret, url: &Url) -> Option<String> {
    (!secret.hosts().allows(url))
        .then(|| agentloom_core::refused_message(name, url, secret.hosts()))
}

/// The secret to send again after `service` refused `refused`, the secret of credential
/// `name`, with HTTP 401 (`unauthorized`, the error that answer gave): the refreshed OAuth
/// token ([`RunCtx::refresh_secret`]). `unauthorized` stands when the credential cannot be
/// refreshed (an API key, an environment variable); a refresh that failed says so, and so
/// does a refreshed token that may not be sent to `url` ([`credential_refused`]).
pub(crate) fn refreshed_secret(
    ctx: &dyn RunCtx,
    service: &str,
    name: &str,
    url: &Url,
    refused: &Secret,
    unauthorized: BlockError,
) -> Result<Secret, BlockError> {
    match ctx.refresh_secret(name, refused) {
        Ok(Some(fresh)) if !fresh.expose().is_empty() => {
            if let Some(refused) = credential_refused(name, &fresh, url) {
                return Err(BlockError::permanent(refused));
            }
            tracing::info!(
                service,
                credential = name,
                "token refused (HTTP 401); trying once more with the refreshed token"
            );
            Ok(fresh)
        }
        Ok(_) => Err(unauthorized),
        Err(err) => {
            let why = match err {
                SecretError::Unusable { message, .. } => message,
                other => other.to_string(),
            };
            let mut failed = BlockError::permanent(format!(
                "{service} refused the token of credential `{name}` (HTTP 401) and getting a new one failed: {why}"
            ));
            failed.data = unauthorized.data;
            Err(failed)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;
    use reqwest::header::HeaderValue;

    /// A server on 127.0.0.1 counting every request; returns its port and the count.
    async fn counting_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        let app = axum::Router::new().fallback(axum::routing::any(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { "{}" }
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (port, hits)
    }

    #[tokio::test]
    async fn a_credential_a_block_may_not_send_to_its_host_fails_the_node_before_sending() {
        use crate::testing::{TestCtx, run_block_with};
        use agentloom_core::{Value, ValueMap};
        use serde_json::json;
        let (port, hits) = counting_server().await;
        let base = format!("http://127.0.0.1:{port}");
        // Bound to 127.0.0.1 on the scheme's default port: not this server's port.
        let ctx = TestCtx::new().with_bound_secret("k", "sk-bound-elsewhere", &["127.0.0.1"]);
        let query = ValueMap::from([("query".to_owned(), Value::from("rust"))]);
        for (kind, config, inputs) in [
            (
                "llm.chat",
                json!({"provider": "openai", "base_url": format!("{base}/v1"), "model": "m",
                       "prompt": "hi", "credential": "k", "max_retries": 0}),
                ValueMap::new(),
            ),
            (
                "llm.chat",
                json!({"provider": "anthropic", "base_url": base, "model": "m",
                       "prompt": "hi", "credential": "k", "max_retries": 0}),
                ValueMap::new(),
            ),
            (
                "http.request",
                json!({"url": format!("{base}/x"), "credential": "k",
                       "allow_private_network": true}),
                ValueMap::new(),
            ),
            (
                "github.get_issue",
                json!({"repo": "o/r", "base_url": base, "credential": "k"}),
                ValueMap::from([("number".to_owned(), Value::Integer(1))]),
            ),
            (
                "web.search",
                json!({"provider": "brave", "url": base, "credential": "k"}),
                query.clone(),
            ),
        ] {
            let err = run_block_with(&ctx, kind, config, inputs)
                .await
                .unwrap_err();
            assert!(
                err.message.contains(&format!(
                    "credential `k` may not be sent to 127.0.0.1:{port} (it is bound to 127.0.0.1); if that host is meant to get it, allow it with `agentloom credentials hosts k --add 127.0.0.1:{port}`"
                )),
                "{kind}: {}",
                err.message
            );
            assert!(!err.message.contains("sk-bound-elsewhere"), "{kind}");
            assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0, "{kind}");
        }
        // Bound to this very port: sent.
        let ctx =
            TestCtx::new().with_bound_secret("k", "sk-bound-here", &[&format!("127.0.0.1:{port}")]);
        run_block_with(
            &ctx,
            "http.request",
            json!({"url": format!("{base}/x"), "credential": "k", "allow_private_network": true}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn every_block_gets_the_same_client() {
        let first: *const reqwest::Client = client().unwrap();
        let second: *const reqwest::Client = client().unwrap();
        assert_eq!(first, second);
    }

    #[test]
    fn retry_after_reads_ms_fractions_seconds_and_rate_limit_resets() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        h.insert(
            "x-ratelimit-reset",
            HeaderValue::from_str(&(now + 30).to_string()).unwrap(),
        );
        let reset = retry_after(&h).unwrap();
        assert!(
            reset <= Duration::from_secs(30) && reset >= Duration::from_secs(28),
            "{reset:?}"
        );
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after", HeaderValue::from_static("1.5"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut dated = HeaderMap::new();
        dated.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&dated), None);
        dated.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&dated), None);
        dated.insert("retry-after", HeaderValue::from_static("1e300"));
        assert_eq!(retry_after(&dated), None);
    }

    #[test]
    fn the_wait_is_the_servers_else_doubling_backoff() {
        let base = Duration::from_millis(100);
        assert_eq!(retry_wait(None, base, 0), base);
        assert_eq!(retry_wait(None, base, 3), Duration::from_millis(800));
        let asked = Some(Duration::from_secs(2));
        assert_eq!(retry_wait(asked, base, 5), Duration::from_secs(2));
        // Doubling stops growing at 2^10, and never overflows.
        assert_eq!(retry_wait(None, base, 40), base * 1024);
    }
}
