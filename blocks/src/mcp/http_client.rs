//! rmcp's streamable-HTTP client transport spoken over the reqwest client the rest of the
//! workspace uses: rmcp only needs the three HTTP exchanges below (POST a message, GET the
//! server's event stream, DELETE the session), so one reqwest serves both.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue, WWW_AUTHENTICATE};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, SseError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};

type HttpError = StreamableHttpError<reqwest::Error>;

/// The HTTP side of an MCP connection to a streamable-HTTP server.
#[derive(Clone)]
pub struct McpHttpClient {
    client: reqwest::Client,
}

impl McpHttpClient {
    pub fn new() -> Result<McpHttpClient, String> {
        // The shared set-up, minus redirects: one would replay the session id and the token
        // to another origin.
        let client = crate::net::client_without_redirects()
            .map_err(|e| e.message)?
            .clone();
        Ok(McpHttpClient { client })
    }
}

fn request(
    mut builder: reqwest::RequestBuilder,
    session_id: Option<&str>,
    token: Option<String>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(session_id) = session_id {
        builder = builder.header(HEADER_SESSION_ID, session_id);
    }
    if let Some(token) = token {
        builder = builder.bearer_auth(token);
    }
    for (name, value) in custom_headers {
        builder = builder.header(name, value);
    }
    builder
}

fn media_type_is(content_type: Option<&HeaderValue>, expected: &str) -> bool {
    content_type
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(expected))
}

/// 401 with a challenge is "authorization required"; 429 and 5xx keep their status.
fn status_error(response: &reqwest::Response) -> Option<HttpError> {
    let status = response.status();
    if status == StatusCode::UNAUTHORIZED {
        let challenge = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        return Some(StreamableHttpError::AuthRequired(AuthRequiredError::new(
            challenge.to_owned(),
        )));
    }
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        return Some(HttpStatusError::new(status.as_u16(), None).into());
    }
    None
}

/// Reads at most `limit` bytes of the body; a longer body is an error, not a truncation.
async fn read_body(response: reqwest::Response, limit: usize) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(StreamableHttpError::Client)?;
        if body.len() + chunk.len() > limit {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The server's events, each at most `max_event_size` bytes: a server that never ends an
/// event cannot make the client buffer without bound.
fn event_stream(
    response: reqwest::Response,
    max_event_size: usize,
) -> BoxStream<'static, Result<Sse, SseError>> {
    SseStream::from_bytes_stream(bounded_events(response.bytes_stream(), max_event_size)).boxed()
}

/// Passes the bytes on while no event (the bytes up to a blank line) is longer than
/// `max_event_size`; then ends with an error.
fn bounded_events<S, E>(
    bytes: S,
    max_event_size: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut event_size = 0usize;
    let mut after_newline = false;
    let mut failed = false;
    bytes.map(move |chunk| {
        if failed {
            return Err(std::io::Error::other(
                "the event stream ended after an error",
            ));
        }
        let chunk = chunk.map_err(std::io::Error::other)?;
        for &byte in chunk.iter() {
            match byte {
                // A line ends with LF or CRLF; an empty line ends the event.
                b'\r' => {}
                b'\n' if after_newline => event_size = 0,
                b'\n' => after_newline = true,
                _ => after_newline = false,
            }
            event_size += 1;
            if event_size > max_event_size {
                failed = true;
                return Err(std::io::Error::other(format!(
                    "the server sent an event longer than {max_event_size} bytes"
                )));
            }
        }
        Ok(chunk)
    })
}

impl StreamableHttpClient for McpHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let builder = self.client.post(uri.as_ref()).header(
            ACCEPT,
            format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"),
        );
        let response = request(builder, session_id.as_deref(), auth_header, custom_headers)
            .json(&message)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        let awaits_no_response = !matches!(message, ClientJsonRpcMessage::Request(_));
        let content_type = response.headers().get(CONTENT_TYPE).cloned();
        let is_json = media_type_is(content_type.as_ref(), JSON_MIME_TYPE);
        let new_session_id = response
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        if !status.is_success() {
            // A JSON-RPC error in the body says more than the status does.
            if is_json && status != StatusCode::UNAUTHORIZED {
                let body = read_body(response, limits.max_json_response_size).await?;
                if let Ok(error @ ServerJsonRpcMessage::Error(_)) =
                    serde_json::from_slice::<ServerJsonRpcMessage>(&body)
                {
                    return Ok(StreamableHttpPostResponse::Json(error, new_session_id));
                }
                return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                    format!("HTTP {status}"),
                )));
            }
            return Err(status_error(&response).unwrap_or_else(|| {
                StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!("HTTP {status}")))
            }));
        }
        if media_type_is(content_type.as_ref(), EVENT_STREAM_MIME_TYPE) {
            return Ok(StreamableHttpPostResponse::Sse(
                event_stream(response, limits.max_sse_event_size),
                new_session_id,
            ));
        }
        if is_json {
            let body = read_body(response, limits.max_json_response_size).await?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, new_session_id)),
                Err(_) if awaits_no_response => Ok(StreamableHttpPostResponse::Accepted),
                Err(e) => Err(StreamableHttpError::Deserialize(e)),
            };
        }
        if awaits_no_response {
            // Some servers answer a notification with an empty 200 instead of 202.
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(
            content_type.map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()),
        ))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        let builder = self.client.delete(uri.as_ref());
        let response = request(builder, Some(&session_id), auth_header, custom_headers)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        // A server without session deletion answers 405: nothing to clean up then.
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        response
            .error_for_status()
            .map(|_| ())
            .map_err(StreamableHttpError::Client)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        let mut builder = self.client.get(uri.as_ref()).header(
            ACCEPT,
            format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"),
        );
        if let Some(last_event_id) = last_event_id {
            builder = builder.header(HEADER_LAST_EVENT_ID, last_event_id);
        }
        let response = request(builder, session_id.as_deref(), auth_header, custom_headers)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if let Some(error) = status_error(&response) {
            return Err(error);
        }
        let response = response
            .error_for_status()
            .map_err(StreamableHttpError::Client)?;
        let content_type = response.headers().get(CONTENT_TYPE);
        if !media_type_is(content_type, EVENT_STREAM_MIME_TYPE) {
            return Err(StreamableHttpError::UnexpectedContentType(
                content_type.map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()),
            ));
        }
        Ok(event_stream(response, max_sse_event_size))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    async fn events(chunks: &[&'static str], max: usize) -> Vec<Result<String, String>> {
        let bytes = futures::stream::iter(
            chunks
                .iter()
                .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::from_static(c.as_bytes())))
                .collect::<Vec<_>>(),
        );
        SseStream::from_bytes_stream(bounded_events(bytes, max))
            .map(|event| {
                event
                    .map(|e| e.data.unwrap_or_default())
                    .map_err(|e| e.to_string())
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn events_pass_within_the_limit_split_anywhere_and_a_longer_one_stops_the_stream() {
        // The events are at most 16 bytes with their blank line; CRLF ends lines too.
        let within = events(&["data: first\n", "\ndata: sec", "ond\r\n\r\n"], 16).await;
        assert_eq!(within, [Ok("first".to_owned()), Ok("second".to_owned())]);
        let too_long = events(&["data: ok\n\n", "data: 0123456789abcdef\n\n"], 16).await;
        assert_eq!(too_long[0], Ok("ok".to_owned()));
        assert!(
            too_long[1]
                .as_ref()
                .unwrap_err()
                .contains("longer than 16 bytes"),
            "{too_long:?}"
        );
    }
}
