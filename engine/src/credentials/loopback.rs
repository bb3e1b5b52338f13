//! A one-shot HTTP listener on 127.0.0.1 that receives the OAuth redirect (RFC 8252 §7.3).

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::CredentialError;

/// The path the provider redirects to.
pub(crate) const CALLBACK_PATH: &str = "/callback";
const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// A listener bound to 127.0.0.1 on a free port.
pub(crate) struct Loopback {
    listener: TcpListener,
    port: u16,
}

impl Loopback {
    pub(crate) async fn bind() -> Result<Self, CredentialError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| {
            CredentialError::OAuth(format!(
                "could not open a local port on 127.0.0.1 for the sign-in redirect: {e}"
            ))
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| CredentialError::OAuth(format!("local port: {e}")))?
            .port();
        Ok(Self { listener, port })
    }

    /// `http://127.0.0.1:PORT/callback`.
    pub(crate) fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}{CALLBACK_PATH}", self.port)
    }

    /// Waits for one request to the callback path and returns its query parameters.
    /// Other paths (a browser's `/favicon.ico`) get a 404 and are ignored.
    /// `respond` chooses the page shown in the browser from the parameters.
    pub(crate) async fn wait(
        &self,
        timeout: Duration,
        respond: impl Fn(&[(String, String)]) -> (u16, &'static str),
    ) -> Result<Vec<(String, String)>, CredentialError> {
        let accept = async {
            loop {
                let (stream, _) = match self.listener.accept().await {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::debug!(error = %e, "loopback accept failed");
                        continue;
                    }
                };
                if let Some(params) = handle(stream, &respond).await {
                    return params;
                }
            }
        };
        tokio::time::timeout(timeout, accept).await.map_err(|_| {
            CredentialError::OAuth(format!(
                "the sign-in was not completed within {} s; run the sign-in again",
                timeout.as_secs()
            ))
        })
    }
}

/// Reads one request; answers it; returns the query if it was the callback.
async fn handle(
    mut stream: TcpStream,
    respond: &impl Fn(&[(String, String)]) -> (u16, &'static str),
) -> Option<Vec<(String, String)>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0_u8; 1024];
    let head_end = loop {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if read == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..read]);
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_REQUEST_BYTES {
            let _ = write_response(&mut stream, 431, "Request too large.").await;
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let request_line = head.lines().next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if method != "GET" || path != CALLBACK_PATH {
        let _ = write_response(&mut stream, 404, "Not found.").await;
        return None;
    }
    let params: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let (status, message) = respond(&params);
    let _ = write_response(&mut stream, status, message).await;
    Some(params)
}

async fn write_response(stream: &mut TcpStream, status: u16, message: &str) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Error",
    };
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Agentloom</title></head><body><p>{message}</p></body></html>"
    );
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_callback_query_and_ignores_other_paths() {
        let lb = Loopback::bind().await.unwrap();
        let uri = lb.redirect_uri();
        assert!(uri.starts_with("http://127.0.0.1:") && uri.ends_with("/callback"));
        let base = uri.trim_end_matches(CALLBACK_PATH).to_owned();
        let client = tokio::spawn(async move {
            let http = reqwest::Client::new();
            let fav = http
                .get(format!("{base}/favicon.ico"))
                .send()
                .await
                .unwrap();
            assert_eq!(fav.status(), 404);
            let ok = http
                .get(format!("{base}/callback?code=abc&state=x%20y"))
                .send()
                .await
                .unwrap();
            (ok.status().as_u16(), ok.text().await.unwrap())
        });
        let params = lb
            .wait(Duration::from_secs(10), |_| (200, "Signed in."))
            .await
            .unwrap();
        assert_eq!(
            params,
            vec![
                ("code".to_owned(), "abc".to_owned()),
                ("state".to_owned(), "x y".to_owned())
            ]
        );
        let (status, body) = client.await.unwrap();
        assert_eq!(status, 200);
        assert!(body.contains("Signed in."));
    }

    #[tokio::test]
    async fn times_out_with_a_clear_message() {
        let lb = Loopback::bind().await.unwrap();
        let err = lb
            .wait(Duration::from_millis(100), |_| (200, "ok"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not completed within"), "{err}");
    }
}
