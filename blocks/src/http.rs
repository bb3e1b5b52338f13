//! `http.request`: one HTTP request, with the response as status, headers, text and JSON.
//!
//! Header values are never logged or put in error messages: they may hold tokens. URLs in
//! messages are shown without their query string for the same reason.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Secret, Value, ValueMap, ValueType,
    async_trait,
};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode, Url};

use crate::net;

const METHODS: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];
const CREDENTIAL_STYLES: [&str; 4] = ["bearer", "header", "basic", "query"];
const DEFAULT_TIMEOUT_MS: u64 = 30_000;
const DEFAULT_MAX_RESPONSE_BYTES: u64 = 10 * 1024 * 1024;

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(HttpRequest::new())]
}

struct HttpRequest {
    meta: BlockMeta,
}

impl HttpRequest {
    fn new() -> Self {
        Self {
            // Side effects follow the method (see `HttpNode::side_effects`): safe mode asks
            // before POST, PUT, PATCH and DELETE, not before GET and HEAD.
            meta: BlockMeta::new(
                "http.request",
                "HTTP request",
                "Network",
                "Sends an HTTP request and outputs the response's status, headers and body.",
            )
            .field(
                ConfigField::choice("method", "Method", &METHODS)
                    .default_value(serde_json::json!("GET"))
                    .help("The HTTP method."),
            )
            .field(
                ConfigField::text("url", "URL")
                    .help("An http:// or https:// URL. Leave empty to take it from the `url` input."),
            )
            .field(ConfigField::json("headers", "Headers").help(
                "A JSON object of header names to values, e.g. {\"Accept\": \"application/json\"}. Put tokens in `credential`, not here.",
            ))
            .field(ConfigField::text("credential", "Credential").help(
                "The name of a credential (Credentials in the app, `agentloom credentials`, or the environment variable AGENTLOOM_SECRET_<NAME>) sent with the request as `credential_style` says. Never shown in logs, errors or the run log.",
            ))
            .field(
                ConfigField::choice("credential_style", "Credential style", &CREDENTIAL_STYLES)
                    .default_value(serde_json::json!("bearer"))
                    .help("bearer: `Authorization: Bearer <secret>`; header: the header named in `credential_param`; basic: the secret is `user:password`, sent as HTTP basic authentication; query: the query parameter named in `credential_param`."),
            )
            .field(ConfigField::text("credential_param", "Credential header / parameter").help(
                "The header name (style `header`, e.g. X-Api-Key) or query parameter name (style `query`, e.g. api_key).",
            ))
            .field(
                ConfigField::json("query", "Query parameters")
                    .help("A JSON object added to the URL's query string; a list value repeats the parameter."),
            )
            .field(
                ConfigField::integer("timeout_ms", "Timeout (ms)", Some(1), None)
                    .default_value(serde_json::json!(DEFAULT_TIMEOUT_MS))
                    .help("Give up when the whole request, body included, takes longer than this."),
            )
            .field(
                ConfigField::integer("max_response_bytes", "Max response size (bytes)", Some(1), None)
                    .default_value(serde_json::json!(DEFAULT_MAX_RESPONSE_BYTES))
                    .help("Fail when the response body is larger than this."),
            )
            .field(
                ConfigField::boolean("idempotency_key", "Send an idempotency key")
                    .default_value(serde_json::json!(false))
                    .help("For services that perform a request once per `Idempotency-Key` (payment and messaging APIs): a POST, PUT, PATCH or DELETE carries a key made from the run, the node and the request, the same every time this request is sent, so a retry, or a run resumed after its worker stopped, is performed once. Off: no key, and a request that may have been sent when its worker stopped is not sent again."),
            )
            .field(
                ConfigField::boolean("allow_private_network", "Allow private network")
                    .default_value(serde_json::json!(false))
                    .help("Let the request reach this machine (localhost) and the local network (private and link-local addresses, such as a router or a cloud metadata service). Off: such an address is refused, whatever name led to it; in safe mode a person is asked. A graph file that is not trusted is refused such an address even when this is on."),
            ),
        }
    }
}

impl Block for HttpRequest {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let reader = ConfigReader(config);
        let method_name = reader.choice_or("method", &METHODS, "GET")?;
        let method = Method::from_bytes(method_name.as_bytes()).map_err(|_| {
            ConfigError::new("method", format!("`{method_name}` is not an HTTP method"))
        })?;
        let url = match reader.str("url")?.map(str::trim).filter(|u| !u.is_empty()) {
            Some(text) => {
                Some(parse_url(text).map_err(|message| ConfigError::new("url", message))?)
            }
            None => None,
        };
        let headers = config_headers(reader.get("headers"))?;
        let credential = config_credential(&reader)?;
        let query = config_query(reader.get("query"))?;
        let timeout_ms = reader.u64_or("timeout_ms", DEFAULT_TIMEOUT_MS)?;
        if timeout_ms == 0 {
            return Err(ConfigError::new("timeout_ms", "must be at least 1"));
        }
        let max_response_bytes = reader.u64_or("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES)?;
        if max_response_bytes == 0 {
            return Err(ConfigError::new("max_response_bytes", "must be at least 1"));
        }
        let reach = net::Reach::allowing_private(reader.bool_or("allow_private_network", false)?);
        let idempotent = reader.bool_or("idempotency_key", false)?;
        let mut inputs = Vec::new();
        if url.is_none() {
            inputs.push(PortSpec::new("url", ValueType::Text).describe("The URL to request."));
        }
        inputs.push(
            PortSpec::new("body", ValueType::Any)
                .optional()
                .describe("The request body: text is sent as is, other values as JSON."),
        );
        let ports = Ports::new(
            inputs,
            vec![
                PortSpec::new("status", ValueType::Integer).describe("The response status code."),
                PortSpec::new("headers", ValueType::Object)
                    .describe("The response headers, by lower-case name."),
                PortSpec::new("body", ValueType::Text).describe("The response body as text."),
                PortSpec::new("json", ValueType::Any)
                    .describe("The body parsed as JSON, or null if it is not JSON."),
            ],
        );
        Ok(Arc::new(HttpNode {
            credential,
            method,
            url,
            headers,
            query,
            timeout: Duration::from_millis(timeout_ms),
            max_response_bytes,
            reach,
            idempotent,
            ports,
        }))
    }
}

fn parse_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text)
        .map_err(|e| format!("`{}` is not a valid URL: {e}", without_query(text)))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(format!(
            "URL scheme `{other}` is not supported; use http:// or https://"
        )),
    }
}

/// A credential sent with each request.
struct Credential {
    name: String,
    style: CredentialStyle,
}

enum CredentialStyle {
    Bearer,
    Header(HeaderName),
    Basic,
    Query(String),
}

fn config_credential(reader: &ConfigReader<'_>) -> Result<Option<Credential>, ConfigError> {
    let Some(name) = reader
        .str("credential")?
        .map(str::trim)
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    let param = reader
        .str("credential_param")?
        .map(str::trim)
        .filter(|p| !p.is_empty());
    let style = match reader.choice_or("credential_style", &CREDENTIAL_STYLES, "bearer")? {
        "header" => {
            let param = param.ok_or_else(|| {
                ConfigError::new(
                    "credential_param",
                    "style `header` needs the header's name, e.g. X-Api-Key",
                )
            })?;
            CredentialStyle::Header(HeaderName::from_bytes(param.as_bytes()).map_err(|_| {
                ConfigError::new(
                    "credential_param",
                    format!("`{param}` is not a valid header name"),
                )
            })?)
        }
        "query" => CredentialStyle::Query(
            param
                .ok_or_else(|| {
                    ConfigError::new(
                        "credential_param",
                        "style `query` needs the parameter's name, e.g. api_key",
                    )
                })?
                .to_owned(),
        ),
        "basic" => CredentialStyle::Basic,
        _ => CredentialStyle::Bearer,
    };
    Ok(Some(Credential {
        name: name.to_owned(),
        style,
    }))
}

impl Credential {
    /// Adds the secret to `request` as the style says.
    fn apply(
        &self,
        request: reqwest::RequestBuilder,
        secret: &Secret,
    ) -> Result<reqwest::RequestBuilder, BlockError> {
        use base64::Engine as _;
        let header = |text: String| {
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                BlockError::permanent(format!(
                    "credential `{}` has characters not allowed in an HTTP header",
                    self.name
                ))
            })?;
            value.set_sensitive(true);
            Ok::<_, BlockError>(value)
        };
        Ok(match &self.style {
            CredentialStyle::Bearer => request.header(
                AUTHORIZATION,
                header(format!("Bearer {}", secret.expose()))?,
            ),
            CredentialStyle::Header(name) => {
                request.header(name.clone(), header(secret.expose().to_owned())?)
            }
            CredentialStyle::Basic => request.header(
                AUTHORIZATION,
                header(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(secret.expose())
                ))?,
            ),
            CredentialStyle::Query(param) => request.query(&[(param.as_str(), secret.expose())]),
        })
    }
}

fn config_headers(json: Option<&serde_json::Value>) -> Result<HeaderMap, ConfigError> {
    let mut headers = HeaderMap::new();
    let Some(json) = json else { return Ok(headers) };
    let serde_json::Value::Object(map) = json else {
        return Err(ConfigError::new(
            "headers",
            "must be a JSON object of header names to values",
        ));
    };
    for (name, value) in map {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            ConfigError::new("headers", format!("`{name}` is not a valid header name"))
        })?;
        let text = match value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(_) | serde_json::Value::Bool(_) => value.to_string(),
            _ => {
                return Err(ConfigError::new(
                    "headers",
                    format!("the value of `{name}` must be text"),
                ));
            }
        };
        // The value itself is never echoed: it may be a token.
        let mut value = HeaderValue::from_str(&text).map_err(|_| {
            ConfigError::new(
                "headers",
                format!("the value of `{name}` has characters not allowed in a header"),
            )
        })?;
        value.set_sensitive(true);
        headers.append(header, value);
    }
    Ok(headers)
}

fn config_query(json: Option<&serde_json::Value>) -> Result<Vec<(String, String)>, ConfigError> {
    let Some(json) = json else {
        return Ok(Vec::new());
    };
    let serde_json::Value::Object(map) = json else {
        return Err(ConfigError::new(
            "query",
            "must be a JSON object of parameter names to values",
        ));
    };
    let mut pairs = Vec::new();
    for (name, value) in map {
        let values: Vec<&serde_json::Value> = match value {
            serde_json::Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for value in values {
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                serde_json::Value::Number(_) | serde_json::Value::Bool(_) => value.to_string(),
                _ => {
                    return Err(ConfigError::new(
                        "query",
                        format!("the value of `{name}` must be text, a number or a list of them"),
                    ));
                }
            };
            pairs.push((name.clone(), text));
        }
    }
    Ok(pairs)
}

/// A URL for messages: no query string, no user info.
fn without_query(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut parsed) => {
            parsed.set_query(None);
            parsed.set_fragment(None);
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        Err(_) => url.split(['?', '#']).next().unwrap_or_default().to_owned(),
    }
}

struct HttpNode {
    credential: Option<Credential>,
    method: Method,
    url: Option<Url>,
    headers: HeaderMap,
    query: Vec<(String, String)>,
    timeout: Duration,
    max_response_bytes: u64,
    /// Whether local addresses may be reached.
    reach: net::Reach,
    /// Sends an `Idempotency-Key` with a request that has side effects.
    idempotent: bool,
    ports: Ports,
}

/// What came back.
struct Response {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl HttpNode {
    /// Sends the request. In safe mode a local address refused (by the graph's settings, or
    /// because the run may not reach the private network) is put to a person, for the
    /// request and for each redirect to a host and port not approved yet (`approved`).
    async fn send(
        &self,
        ctx: &dyn RunCtx,
        approved: &mut net::ApprovedReach,
        url: Url,
        body: Option<Value>,
        secret: Option<&Secret>,
        idempotency_key: Option<String>,
    ) -> Result<Response, BlockError> {
        let reach = self.reach;
        let shown = format!("{} {}", self.method, without_query(url.as_str()));
        let mut request = net::client_for(ctx, reach)?
            .request(self.method.clone(), url)
            .headers(self.headers.clone())
            .timeout(self.timeout);
        if let Some(key) = idempotency_key {
            request = request.header(IDEMPOTENCY_KEY, key);
        }
        if !self.query.is_empty() {
            request = request.query(&self.query);
        }
        if let (Some(credential), Some(secret)) = (&self.credential, secret) {
            request = credential.apply(request, secret)?;
        }
        let has_content_type = self.headers.contains_key(CONTENT_TYPE);
        match body {
            None => {}
            Some(Value::Text(text)) => {
                if !has_content_type {
                    request = request.header(CONTENT_TYPE, "text/plain; charset=utf-8");
                }
                request = request.body(String::clone(&text));
            }
            Some(Value::Bytes(bytes)) => {
                if !has_content_type {
                    request = request.header(CONTENT_TYPE, "application/octet-stream");
                }
                request = request.body(Vec::clone(&bytes));
            }
            Some(other) => {
                if !has_content_type {
                    request = request.header(CONTENT_TYPE, "application/json");
                }
                request = request.body(other.to_json().to_string());
            }
        }
        tracing::debug!(method = %self.method, "sending HTTP request");
        // Holds the host's request slot until the body is read.
        let mut sent = net::send_asking(ctx, reach, approved, request, |e| {
            self.request_error(&shown, e)
        })
        .await?;
        let response = &mut sent.response;
        let cap = self.max_response_bytes;
        let too_big = || {
            BlockError::permanent(format!(
                "the response from {shown} is larger than max_response_bytes ({cap} bytes); raise the limit if this is expected"
            ))
        };
        if response.content_length().is_some_and(|len| len > cap) {
            return Err(too_big());
        }
        let status = response.status();
        let headers = response.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.request_error(&shown, e))?
        {
            if body.len() as u64 + chunk.len() as u64 > cap {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    fn request_error(&self, shown: &str, err: reqwest::Error) -> BlockError {
        if err.is_timeout() {
            return BlockError::transient(format!(
                "{shown} timed out after {} ms",
                self.timeout.as_millis()
            ));
        }
        if let Some(refused) = net::local_address_refused(&err) {
            return BlockError::permanent(format!("{shown} was refused: {refused}")).with_data(
                Value::object(BTreeMap::from([(
                    LOCAL_ADDRESS.to_owned(),
                    Value::text(refused.address.to_string()),
                )])),
            );
        }
        let err = err.without_url();
        if err.is_builder() {
            return BlockError::permanent(format!(
                "{shown} could not be sent: {}",
                agentloom_core::error_chain(&err)
            ));
        }
        if err.is_connect() {
            return BlockError::transient(format!(
                "could not connect for {shown}: {}",
                agentloom_core::error_chain(&err)
            ));
        }
        BlockError::transient(format!(
            "{shown} failed: {}",
            agentloom_core::error_chain(&err)
        ))
    }
}

/// The header a service de-duplicates requests by.
const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The key made from the run, the node, the method, the URL and the body: the same each time
/// this node sends this request in this run, whichever worker sends it.
fn idempotency_key(
    run_id: &str,
    node_id: &str,
    method: &Method,
    url: &str,
    body: Option<&Value>,
) -> String {
    use sha2::{Digest as _, Sha256};
    let mut hash = Sha256::new();
    for part in [run_id, node_id, method.as_str(), url] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    if let Some(body) = body {
        hash.update(body.to_json().to_string().as_bytes());
    }
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("agentloom-{hex}")
}

/// The key of a refused local address in a refusal's data.
const LOCAL_ADDRESS: &str = "local_address";

fn headers_value(headers: &HeaderMap) -> Value {
    let mut map: BTreeMap<String, Value> = BTreeMap::new();
    for name in headers.keys() {
        let values: Vec<String> = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        map.insert(name.as_str().to_owned(), Value::text(values.join(", ")));
    }
    Value::object(map)
}

#[async_trait]
impl NodeImpl for HttpNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    fn side_effects(&self) -> Option<bool> {
        Some(!matches!(self.method, Method::GET | Method::HEAD))
    }

    fn idempotency_key(&self, run_id: &str, node_id: &str, inputs: &ValueMap) -> Option<String> {
        if !self.idempotent || self.side_effects() != Some(true) {
            return None;
        }
        let url = match &self.url {
            Some(url) => url.as_str().to_owned(),
            None => inputs.get("url")?.to_text().trim().to_owned(),
        };
        Some(idempotency_key(
            run_id,
            node_id,
            &self.method,
            &url,
            inputs.get("body"),
        ))
    }

    /// `POST http://host/path`: the method and the URL without its query (which may carry
    /// a credential).
    fn describe(&self, inputs: &ValueMap) -> Option<String> {
        let url = match &self.url {
            Some(url) => without_query(url.as_str()),
            None => without_query(inputs.get("url")?.to_text().trim()),
        };
        Some(format!("{} {url}", self.method))
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        // Made from the inputs as given, as whoever runs the run made it before sending.
        let key = self.idempotency_key(ctx.run_id(), ctx.node_id(), &inputs);
        let url = match &self.url {
            Some(url) => url.clone(),
            None => parse_url(inputs.take_text("url")?.trim())
                .map_err(|message| BlockError::input("url", message))?,
        };
        let secret = match &self.credential {
            Some(credential) => Some(net::credential_for(ctx, &credential.name, &url)?),
            None => None,
        };
        let body = inputs.take_optional("body");
        let shown = format!("{} {}", self.method, without_query(url.as_str()));
        let mut approved = net::ApprovedReach::resumed(ctx);
        let response = tokio::select! {
            () = ctx.cancel_token().cancelled() => return Err(BlockError::cancelled()),
            response = self.send(ctx, &mut approved, url, body, secret.as_ref(), key) => response?,
        };
        let status = response.status;
        let headers = headers_value(&response.headers);
        let text = String::from_utf8_lossy(&response.body).into_owned();
        if !status.is_success() {
            let data = Value::object(BTreeMap::from([
                (
                    "status".to_owned(),
                    Value::Integer(i64::from(status.as_u16())),
                ),
                ("headers".to_owned(), headers),
                ("body".to_owned(), Value::text(text)),
            ]));
            let message = format!("HTTP {status} from {shown}");
            let err = if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
                let err = BlockError::transient(message);
                match net::retry_after(&response.headers) {
                    Some(wait) => err.with_retry_after(wait),
                    None => err,
                }
            } else {
                BlockError::permanent(message)
            };
            return Err(err.with_data(data));
        }
        let json = serde_json::from_slice::<serde_json::Value>(&response.body)
            .map(Value::from_json)
            .unwrap_or(Value::Null);
        Ok(agentloom_core::outputs([
            ("status", Value::Integer(i64::from(status.as_u16()))),
            ("headers", headers),
            ("body", Value::text(text)),
            ("json", json),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestCtx, config_error, inputs, instantiate, run_block, run_block_with};
    use agentloom_core::{ApprovalDecision, ErrorClass};
    use axum::Router;
    use axum::extract::{Path, Query};
    use axum::http::{HeaderMap as AxumHeaders, StatusCode as AxumStatus};
    use axum::response::IntoResponse;
    use axum::routing::{any, get};
    use serde_json::json;

    /// A real HTTP server on 127.0.0.1 with a free port; returns its base URL.
    async fn server() -> String {
        async fn echo(
            method: axum::http::Method,
            headers: AxumHeaders,
            body: String,
        ) -> axum::Json<serde_json::Value> {
            let content_type = headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            axum::Json(
                json!({"method": method.as_str(), "body": body, "content_type": content_type}),
            )
        }
        async fn inspect(
            Query(query): Query<Vec<(String, String)>>,
            headers: AxumHeaders,
        ) -> axum::Json<serde_json::Value> {
            let get = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            };
            axum::Json(
                json!({"query": query, "x_test": get("x-test"), "user_agent": get("user-agent"),
                       "authorization": get("authorization"), "x_api_key": get("x-api-key")}),
            )
        }
        async fn status(Path(code): Path<u16>) -> impl IntoResponse {
            let status = AxumStatus::from_u16(code).unwrap_or(AxumStatus::INTERNAL_SERVER_ERROR);
            let mut headers = AxumHeaders::new();
            if code == 429 {
                headers.insert("retry-after", "7".parse().unwrap());
            }
            (status, headers, format!("status body {code}"))
        }
        async fn streamed() -> axum::body::Body {
            let chunks = (0..10).map(|_| Ok::<_, std::io::Error>(vec![b'x'; 500]));
            axum::body::Body::from_stream(futures::stream::iter(chunks))
        }
        let app = Router::new()
            .route(
                "/json",
                get(|| async { axum::Json(json!({"hello": "world", "n": [1, 2]})) }),
            )
            .route("/text", get(|| async { "plain words" }))
            .route("/echo", any(echo))
            .route("/inspect", get(inspect))
            .route("/status/{code}", get(status))
            .route("/big", get(|| async { vec![b'y'; 5000] }))
            .route("/streamed", get(streamed))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    "late"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_credential_is_sent_in_each_style_from_the_run_secrets() {
        let base = server().await;
        let ctx = TestCtx::new().with_secret("svc", "alice:pa55word");
        let cases = [
            (json!({}), ("Bearer alice:pa55word", "", json!([]))),
            (
                json!({"credential_style": "header", "credential_param": "X-Api-Key"}),
                ("", "alice:pa55word", json!([])),
            ),
            (
                json!({"credential_style": "basic"}),
                ("Basic YWxpY2U6cGE1NXdvcmQ=", "", json!([])),
            ),
            (
                json!({"credential_style": "query", "credential_param": "api_key"}),
                ("", "", json!([["api_key", "alice:pa55word"]])),
            ),
        ];
        for (style, (authorization, api_key, query)) in cases {
            let mut config = json!({"allow_private_network": true, "url": format!("{base}/inspect"), "credential": "svc"});
            config
                .as_object_mut()
                .unwrap()
                .extend(style.as_object().unwrap().clone());
            let out = run_block_with(&ctx, "http.request", config, ValueMap::new())
                .await
                .unwrap();
            let json = out.get("json").unwrap().to_json();
            assert_eq!(json["authorization"], authorization);
            assert_eq!(json["x_api_key"], api_key);
            assert_eq!(json["query"], query);
        }
        // A missing credential names the environment variable to set.
        let err = run_block(
            "http.request",
            json!({"allow_private_network": true, "url": format!("{base}/inspect"), "credential": "svc"}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert!(
            err.message.contains("AGENTLOOM_SECRET_SVC"),
            "{}",
            err.message
        );
        assert_eq!(
            config_error(
                "http.request",
                json!({"url": "http://h/", "credential": "svc", "credential_style": "header"})
            )
            .unwrap(),
            "config `credential_param`: style `header` needs the header's name, e.g. X-Api-Key"
        );
    }

    #[tokio::test]
    async fn local_addresses_are_refused_unless_the_graph_allows_them() {
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        let app = Router::new().route(
            "/admin",
            any(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { "admin page" }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        // The same loopback server under other spellings: a short IPv4 form, an IPv4-mapped
        // IPv6 address, a name that resolves to it.
        for (url, shown) in [
            (format!("http://127.1:{port}/admin"), "127.0.0.1"),
            (
                format!("http://[::ffff:127.0.0.1]:{port}/admin"),
                "127.0.0.1",
            ),
            (
                format!("http://localhost:{port}/admin"),
                "is a loopback address",
            ),
        ] {
            let err = run_block(
                "http.request",
                json!({"url": url, "method": "POST"}),
                ValueMap::new(),
            )
            .await
            .unwrap_err();
            assert_eq!(err.class, ErrorClass::Permanent, "{url}: {}", err.message);
            assert!(
                err.message.contains(shown)
                    && err.message.contains("is a loopback address")
                    && err.message.contains("allow_private_network: true"),
                "{url}: {}",
                err.message
            );
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        let out = run_block(
            "http.request",
            json!({"url": format!("http://localhost:{port}/admin"), "allow_private_network": true}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(out.get("body"), Some(&Value::from("admin page")));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn in_safe_mode_a_person_may_let_a_request_reach_a_local_address() {
        let base = server().await.replace("127.0.0.1", "localhost");
        let config = json!({"url": format!("{base}/json")});
        let rejected = TestCtx::new().with_safe_mode(vec![ApprovalDecision::Rejected {
            message: "no".to_owned(),
        }]);
        let err = run_block_with(&rejected, "http.request", config.clone(), ValueMap::new())
            .await
            .unwrap_err();
        assert!(
            err.message.contains("is a loopback address"),
            "{}",
            err.message
        );
        let asked = rejected.approval_requests();
        assert_eq!(asked.len(), 1);
        assert_eq!(
            asked[0].action,
            format!("reach a loopback address: GET {base}/json")
        );
        assert_eq!(
            asked[0].arguments.as_object().unwrap()["url"],
            Value::from(format!("{base}/json"))
        );
        let approved = TestCtx::new().with_safe_mode(vec![ApprovalDecision::Approved {
            arguments: Value::Null,
        }]);
        let out = run_block_with(&approved, "http.request", config, ValueMap::new())
            .await
            .unwrap();
        assert_eq!(out.get("status"), Some(&Value::Integer(200)));
    }

    /// A loopback server counting the requests it received, on `ip` (a loopback address).
    async fn counting_server(ip: &str) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        let app = Router::new().route(
            "/latest/meta-data/iam",
            any(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { "admin page" }
            }),
        );
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (port, hits)
    }

    #[tokio::test]
    async fn a_run_that_may_not_reach_the_private_network_is_refused_whatever_the_graph_says() {
        let (port, hits) = counting_server("127.0.0.1").await;
        let (other_port, other_hits) = counting_server("127.0.0.2").await;
        let untrusted = TestCtx::new().with_private_network(false);
        for url in [
            format!("http://127.0.0.1:{port}/latest/meta-data/iam#"),
            format!("http://127.1:{port}/latest/meta-data/iam"),
            format!("http://[::ffff:127.0.0.1]:{port}/latest/meta-data/iam"),
            format!("http://localhost:{port}/latest/meta-data/iam"),
            format!("http://127.0.0.2:{other_port}/latest/meta-data/iam"),
        ] {
            let allowed = json!({"url": url, "allow_private_network": true});
            let err = run_block_with(&untrusted, "http.request", allowed, ValueMap::new())
                .await
                .unwrap_err();
            assert_eq!(err.class, ErrorClass::Permanent, "{url}: {}", err.message);
            assert!(
                err.message.contains("is a loopback address, which this run may not reach: its graph file is not trusted (if you trust it: agentloom trust FILE)"),
                "{url}: {}",
                err.message
            );
            // Without the graph's setting, the message says that both are needed.
            let err = run_block_with(
                &untrusted,
                "http.request",
                json!({"url": url}),
                ValueMap::new(),
            )
            .await
            .unwrap_err();
            assert!(
                err.message.contains("its graph file is not trusted (if you trust it: agentloom trust FILE, and set allow_private_network: true)"),
                "{url}: {}",
                err.message
            );
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(other_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        // A run that may (the default) reaches it as the graph allows.
        for ctx in [TestCtx::new(), TestCtx::new().with_private_network(true)] {
            let out = run_block_with(
                &ctx,
                "http.request",
                json!({"url": format!("http://localhost:{port}/latest/meta-data/iam"), "allow_private_network": true}),
                ValueMap::new(),
            )
            .await
            .unwrap();
            assert_eq!(out.get("body"), Some(&Value::from("admin page")));
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn in_safe_mode_a_person_may_let_an_untrusted_run_reach_a_local_address() {
        let (port, hits) = counting_server("127.0.0.1").await;
        let config = json!({"url": format!("http://127.0.0.1:{port}/latest/meta-data/iam"), "allow_private_network": true});
        let rejected = TestCtx::new()
            .with_private_network(false)
            .with_safe_mode(vec![ApprovalDecision::Rejected {
                message: "no".to_owned(),
            }]);
        let err = run_block_with(&rejected, "http.request", config.clone(), ValueMap::new())
            .await
            .unwrap_err();
        assert!(err.message.contains("not trusted"), "{}", err.message);
        let asked = rejected.approval_requests();
        assert_eq!(asked.len(), 1);
        assert!(
            asked[0]
                .action
                .starts_with("reach a loopback address: GET http://127.0.0.1:"),
            "{asked:?}"
        );
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        let approved = TestCtx::new()
            .with_private_network(false)
            .with_safe_mode(vec![ApprovalDecision::Approved {
                arguments: Value::Null,
            }]);
        let out = run_block_with(&approved, "http.request", config, ValueMap::new())
            .await
            .unwrap();
        assert_eq!(out.get("body"), Some(&Value::from("admin page")));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A loopback server on `ip` that counts every request, whatever its path.
    async fn landing(ip: &str) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        let app = Router::new().fallback(any(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { "landed" }
        }));
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (port, hits)
    }

    /// A server on 127.0.0.1 answering every request with a 307 to `target` (which keeps
    /// the method and body); returns its URL.
    async fn redirecting_to(target: String) -> String {
        let app = Router::new().fallback(any(move || {
            let target = target.clone();
            async move {
                (
                    AxumStatus::TEMPORARY_REDIRECT,
                    [(axum::http::header::LOCATION, target)],
                )
            }
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://127.0.0.1:{port}/start")
    }

    fn approve() -> ApprovalDecision {
        ApprovalDecision::Approved {
            arguments: Value::Null,
        }
    }

    /// Where an approval to reach 127.0.0.1:PORT does not reach: each a redirect target
    /// (another loopback address, IPv6 loopback, another port, an IPv4-mapped address)
    /// with the host it is named by, and its counter.
    async fn elsewhere() -> Vec<(String, String, Arc<std::sync::atomic::AtomicUsize>)> {
        let (v6, v6_hits) = landing("::1").await;
        let (other, other_hits) = landing("127.0.0.2").await;
        let (port, port_hits) = landing("127.0.0.1").await;
        vec![
            (
                format!("http://[::1]:{v6}/x"),
                format!("[::1]:{v6}"),
                v6_hits,
            ),
            (
                format!("http://127.0.0.2:{other}/x"),
                format!("127.0.0.2:{other}"),
                other_hits,
            ),
            (
                format!("http://127.0.0.1:{port}/x"),
                format!("127.0.0.1:{port}"),
                port_hits.clone(),
            ),
            (
                format!("http://[::ffff:127.0.0.1]:{port}/x"),
                format!("[::ffff:7f00:1]:{port}"),
                port_hits,
            ),
        ]
    }

    #[tokio::test]
    async fn an_approval_to_reach_a_local_address_covers_its_host_and_port_only() {
        let hits =
            |h: &Arc<std::sync::atomic::AtomicUsize>| h.load(std::sync::atomic::Ordering::SeqCst);
        for (target, host, landed) in elsewhere().await {
            let start = redirecting_to(target.clone()).await;
            let config = json!({"url": start, "method": "POST"});
            let body = ValueMap::from([("body".to_owned(), Value::from("a"))]);

            // The person approves the URL they were shown, and is asked again for the
            // redirect, naming where it goes; saying no there sends nothing to it.
            let ctx = TestCtx::new().with_safe_mode(vec![
                approve(),
                ApprovalDecision::Rejected {
                    message: "not there".to_owned(),
                },
            ]);
            let err = run_block_with(&ctx, "http.request", config.clone(), body.clone())
                .await
                .unwrap_err();
            let asked = ctx.approval_requests();
            assert_eq!(asked.len(), 2, "{target}: {asked:?}");
            assert!(asked[0].action.contains(&start), "{:?}", asked[0]);
            assert!(
                asked[1].action.contains(&format!("POST http://{host}/x"))
                    && asked[1]
                        .action
                        .contains(&format!("redirected from {start}")),
                "{target}: {:?}",
                asked[1]
            );
            assert!(
                err.message.contains(&format!("to {host} was not followed")),
                "{target}: {}",
                err.message
            );
            assert_eq!(hits(&landed), 0, "{target}");

            // Nobody there to ask (a run with no one at the terminal): refused, naming the
            // redirect's target and how to allow it.
            let ctx = TestCtx::new().with_safe_mode(vec![approve()]);
            let err = run_block_with(&ctx, "http.request", config.clone(), body.clone())
                .await
                .unwrap_err();
            assert_eq!(err.class, ErrorClass::Permanent, "{}", err.message);
            assert!(
                err.message.contains(&format!(
                    "the redirect from {} to {host} was not followed",
                    start
                        .trim_start_matches("http://")
                        .trim_end_matches("/start")
                )) && err.message.contains("allow_private_network: true"),
                "{target}: {}",
                err.message
            );
            assert_eq!(hits(&landed), 0, "{target}");

            // Approved too: it goes there, once.
            let ctx = TestCtx::new().with_safe_mode(vec![approve(), approve()]);
            let out = run_block_with(&ctx, "http.request", config, body)
                .await
                .unwrap();
            assert_eq!(out.get("body"), Some(&Value::from("landed")), "{target}");
            assert_eq!(ctx.approval_requests().len(), 2);
            assert_eq!(hits(&landed), 1, "{target}");
            landed.store(0, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_redirect_within_the_approved_host_and_port_is_not_asked_again() {
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        let app = Router::new()
            .route(
                "/hop",
                any(|| async {
                    (
                        AxumStatus::TEMPORARY_REDIRECT,
                        [(axum::http::header::LOCATION, "/x")],
                    )
                }),
            )
            .route(
                "/away",
                any(|headers: AxumHeaders| async move {
                    // This server's own port, under the name `localhost`.
                    let host = headers
                        .get("host")
                        .and_then(|h| h.to_str().ok())
                        .unwrap_or_default()
                        .replace("127.0.0.1", "localhost");
                    (
                        AxumStatus::TEMPORARY_REDIRECT,
                        [(axum::http::header::LOCATION, format!("http://{host}/x"))],
                    )
                }),
            )
            .fallback(any(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { "landed" }
            }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let ctx = TestCtx::new().with_safe_mode(vec![approve()]);
        let out = run_block_with(
            &ctx,
            "http.request",
            json!({"url": format!("http://127.0.0.1:{port}/hop")}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(out.get("body"), Some(&Value::from("landed")));
        assert_eq!(ctx.approval_requests().len(), 1);
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        // The same server and port under another name is another host: asked again.
        let ctx = TestCtx::new().with_safe_mode(vec![approve()]);
        let err = run_block_with(
            &ctx,
            "http.request",
            json!({"url": format!("http://127.0.0.1:{port}/away")}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        let asked = ctx.approval_requests();
        assert_eq!(asked.len(), 2, "{asked:?}");
        assert!(
            asked[1]
                .action
                .contains(&format!("GET http://localhost:{port}/x")),
            "{asked:?}"
        );
        assert!(
            err.message
                .contains(&format!("to localhost:{port} was not followed")),
            "{}",
            err.message
        );
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_resumed_request_keeps_what_was_approved_before_the_pause() {
        let (port, landed) = landing("::1").await;
        let start = redirecting_to(format!("http://[::1]:{port}/x")).await;
        let config = json!({"url": start});
        // The start approved, then nobody to answer for the redirect (a paused run).
        let ctx = TestCtx::new().with_safe_mode(vec![approve()]);
        run_block_with(&ctx, "http.request", config.clone(), ValueMap::new())
            .await
            .unwrap_err();
        let asked = ctx.approval_requests();
        assert_eq!(asked.len(), 2, "{asked:?}");
        let checkpoint = asked[1].checkpoint.clone().unwrap();
        // Resumed with the decision on the redirect: only the redirect is asked about.
        let ctx = TestCtx::new()
            .with_safe_mode(vec![approve()])
            .with_resume_checkpoint(checkpoint);
        let out = run_block_with(&ctx, "http.request", config, ValueMap::new())
            .await
            .unwrap();
        assert_eq!(out.get("body"), Some(&Value::from("landed")));
        let asked = ctx.approval_requests();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(
            asked[0].action.contains(&format!("[::1]:{port}")),
            "{asked:?}"
        );
        assert_eq!(landed.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn local_address_kinds() {
        for (ip, kind) in [
            ("127.0.0.1", Some("a loopback")),
            ("::1", Some("a loopback")),
            ("::ffff:127.0.0.1", Some("a loopback")),
            ("10.1.2.3", Some("a private")),
            ("172.16.0.1", Some("a private")),
            ("192.168.1.1", Some("a private")),
            ("169.254.169.254", Some("a link-local")),
            ("fe80::1", Some("a link-local")),
            ("fd00::1", Some("a private (unique local)")),
            ("0.0.0.0", Some("an unspecified")),
            ("100.64.0.1", Some("a shared (carrier-grade NAT)")),
            ("93.184.216.34", None),
            ("2606:4700::1111", None),
        ] {
            assert_eq!(net::local_kind(ip.parse().unwrap()), kind, "{ip}");
        }
    }

    #[tokio::test]
    async fn get_json() {
        let base = server().await;
        let out = run_block(
            "http.request",
            json!({"allow_private_network": true, "url": format!("{base}/json")}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(out.get("status"), Some(&Value::Integer(200)));
        assert_eq!(
            out.get("json"),
            Some(&Value::from_json(json!({"hello": "world", "n": [1, 2]})))
        );
        assert_eq!(
            out.get("body"),
            Some(&Value::from(r#"{"hello":"world","n":[1,2]}"#))
        );
        let headers = out.get("headers").and_then(Value::as_object).unwrap();
        assert_eq!(
            headers.get("content-type"),
            Some(&Value::from("application/json"))
        );
        // A body that is not JSON gives null.
        let out = run_block(
            "http.request",
            json!({"allow_private_network": true, "url": format!("{base}/text")}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(out.get("json"), Some(&Value::Null));
        assert_eq!(out.get("body"), Some(&Value::from("plain words")));
    }

    #[tokio::test]
    async fn post_sends_text_as_is_and_other_values_as_json() {
        let base = server().await;
        let config =
            json!({"method": "POST", "allow_private_network": true, "url": format!("{base}/echo")});
        let out = run_block(
            "http.request",
            config.clone(),
            inputs([("body", Value::from("hi there"))]),
        )
        .await
        .unwrap();
        assert_eq!(
            out.get("json"),
            Some(&Value::from_json(
                json!({"method": "POST", "body": "hi there", "content_type": "text/plain; charset=utf-8"})
            ))
        );
        let out = run_block(
            "http.request",
            config,
            inputs([("body", Value::from_json(json!({"a": 1})))]),
        )
        .await
        .unwrap();
        assert_eq!(
            out.get("json"),
            Some(&Value::from_json(
                json!({"method": "POST", "body": "{\"a\":1}", "content_type": "application/json"})
            ))
        );
    }

    #[tokio::test]
    async fn url_comes_from_the_input_when_not_configured() {
        let base = server().await;
        let node = instantiate("http.request", json!({"method": "PUT"})).unwrap();
        let names: Vec<&str> = node
            .ports()
            .inputs
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, vec!["url", "body"]);
        let out = run_block(
            "http.request",
            json!({"method": "PUT", "allow_private_network": true}),
            inputs([("url", Value::from(format!("{base}/echo")))]),
        )
        .await
        .unwrap();
        assert_eq!(
            out.get("json")
                .and_then(|j| j.as_object())
                .and_then(|o| o.get("method")),
            Some(&Value::from("PUT"))
        );
        let err = run_block(
            "http.request",
            json!({}),
            inputs([("url", Value::from("ftp://x/y"))]),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.message,
            "input `url`: URL scheme `ftp` is not supported; use http:// or https://"
        );
    }

    #[tokio::test]
    async fn sends_query_parameters_and_headers() {
        let base = server().await;
        let out = run_block(
            "http.request",
            json!({
                "allow_private_network": true, "url": format!("{base}/inspect?fixed=1"),
                "query": {"q": "rust lang", "tag": ["a", "b"], "n": 3},
                "headers": {"X-Test": "yes"}
            }),
            ValueMap::new(),
        )
        .await
        .unwrap();
        let json = out.get("json").unwrap().to_json();
        assert_eq!(
            json["query"],
            json!([
                ["fixed", "1"],
                ["n", "3"],
                ["q", "rust lang"],
                ["tag", "a"],
                ["tag", "b"]
            ])
        );
        assert_eq!(json["x_test"], "yes");
        assert!(
            json["user_agent"]
                .as_str()
                .unwrap()
                .starts_with("agentloom/")
        );
    }

    #[tokio::test]
    async fn not_found_is_permanent_with_data() {
        let base = server().await;
        let err = run_block(
            "http.request",
            json!({"allow_private_network": true, "url": format!("{base}/status/404?token=abc")}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::Permanent);
        assert_eq!(
            err.message,
            format!("HTTP 404 Not Found from GET {base}/status/404")
        );
        assert!(!err.message.contains("abc"));
        let data = err.data.unwrap().to_json();
        assert_eq!(data["status"], 404);
        assert_eq!(data["body"], "status body 404");
        assert!(data["headers"].is_object());
    }

    #[tokio::test]
    async fn server_errors_and_rate_limits_are_transient() {
        let base = server().await;
        let err = run_block(
            "http.request",
            json!({"allow_private_network": true, "url": format!("{base}/status/503")}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::Transient);
        assert_eq!(err.retry_after, None);
        assert!(
            err.message.starts_with("HTTP 503 Service Unavailable"),
            "{}",
            err.message
        );
        let err = run_block(
            "http.request",
            json!({"allow_private_network": true, "url": format!("{base}/status/429")}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::Transient);
        assert_eq!(err.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(err.data.unwrap().to_json()["headers"]["retry-after"], "7");
    }

    #[tokio::test]
    async fn responses_over_the_cap_are_refused() {
        let base = server().await;
        for path in ["big", "streamed"] {
            let err = run_block(
                "http.request",
                json!({"allow_private_network": true, "url": format!("{base}/{path}"), "max_response_bytes": 1000}),
                ValueMap::new(),
            )
            .await
            .unwrap_err();
            assert_eq!(err.class, ErrorClass::Permanent, "{path}");
            assert!(
                err.message
                    .contains("larger than max_response_bytes (1000 bytes)"),
                "{path}: {}",
                err.message
            );
        }
        let out = run_block(
            "http.request",
            json!({"allow_private_network": true, "url": format!("{base}/streamed"), "max_response_bytes": 5000}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(
            out.get("body").and_then(Value::as_str).map(str::len),
            Some(5000)
        );
    }

    #[tokio::test]
    async fn timeout_is_transient() {
        let base = server().await;
        let started = std::time::Instant::now();
        let err = run_block(
            "http.request",
            json!({"allow_private_network": true, "url": format!("{base}/slow"), "timeout_ms": 200}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(err.class, ErrorClass::Transient);
        assert_eq!(
            err.message,
            format!("GET {base}/slow timed out after 200 ms")
        );
    }

    #[tokio::test]
    async fn cancellation_stops_the_request() {
        let base = server().await;
        let ctx = Arc::new(TestCtx::new());
        let canceller = ctx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            canceller.cancel();
        });
        let err = run_block_with(
            &ctx,
            "http.request",
            json!({"allow_private_network": true, "url": format!("{base}/slow")}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::Cancelled);
    }

    #[tokio::test]
    async fn connection_refused_is_transient() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = run_block(
            "http.request",
            json!({"url": format!("http://{addr}/x")}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::Transient);
        assert!(
            err.message
                .starts_with(&format!("could not connect for GET http://{addr}/x")),
            "{}",
            err.message
        );
    }

    #[test]
    fn config_errors_do_not_echo_header_values() {
        let err = config_error(
            "http.request",
            json!({"headers": {"Authorization": "Bearer sec\nret"}}),
        )
        .unwrap();
        assert_eq!(
            err,
            "config `headers`: the value of `Authorization` has characters not allowed in a header"
        );
        let err = config_error("http.request", json!({"headers": {"bad name": "x"}})).unwrap();
        assert_eq!(
            err,
            "config `headers`: `bad name` is not a valid header name"
        );
        let err = config_error("http.request", json!({"url": "not a url"})).unwrap();
        assert!(
            err.starts_with("config `url`: `not a url` is not a valid URL"),
            "{err}"
        );
        let err = config_error("http.request", json!({"method": "FETCH"})).unwrap();
        assert!(
            err.starts_with("config `method`: `FETCH` is not one of GET"),
            "{err}"
        );
        let err = config_error("http.request", json!({"query": [1]})).unwrap();
        assert!(
            err.starts_with("config `query`: must be a JSON object"),
            "{err}"
        );
    }

    #[test]
    fn an_idempotency_key_is_the_same_for_the_same_request_of_the_same_node_only() {
        let url = "https://api.example.com/charges?key=secret";
        let keyed = |config: serde_json::Value| {
            let node = instantiate("http.request", config).unwrap();
            move |run: &str, node_id: &str, body: &str| {
                node.idempotency_key(run, node_id, &inputs([("body", Value::text(body))]))
            }
        };
        let post = keyed(json!({"method": "POST", "url": url, "idempotency_key": true}));
        let key = post("run1", "charge", "10 EUR").unwrap();
        assert!(key.starts_with("agentloom-"), "{key}");
        assert!(!key.contains("secret"), "{key}");
        assert_eq!(post("run1", "charge", "10 EUR").as_ref(), Some(&key));
        assert_ne!(post("run2", "charge", "10 EUR").as_ref(), Some(&key));
        assert_ne!(post("run1", "refund", "10 EUR").as_ref(), Some(&key));
        assert_ne!(post("run1", "charge", "20 EUR").as_ref(), Some(&key));
        // Off by default, and never for a request without side effects.
        let plain = keyed(json!({"method": "POST", "url": url}));
        assert_eq!(plain("run1", "charge", "10 EUR"), None);
        let get = keyed(json!({"method": "GET", "url": url, "idempotency_key": true}));
        assert_eq!(get("run1", "charge", "10 EUR"), None);
    }
}
