//! The OAuth peer: a real OpenID Provider (node-oidc-provider, tests/peers/oidc), and a
//! small browser that completes its login, consent and device pages over HTTP.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::free_port;

/// A running provider; stopped on drop. Its one client is `agentloom-test` (public, PKCE,
/// code, refresh and device grants); any login name with any password signs in.
pub struct Oidc {
    child: Child,
    /// `http://127.0.0.1:PORT`, the provider's issuer and base address.
    pub issuer: String,
}

impl Drop for Oidc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Oidc {
    /// Starts the provider on a free port of 127.0.0.1 (access tokens live an hour), or
    /// returns `None` when AGENTLOOM_SKIP_PEERS=1 and it is not installed.
    ///
    /// # Panics
    /// When the peer is missing (and not skipped) or does not start in five tries.
    pub fn start() -> Option<Oidc> {
        Self::start_with_access_ttl(3600)
    }

    /// [`Oidc::start`] with access tokens that expire after `seconds`.
    ///
    /// # Panics
    /// As [`Oidc::start`].
    pub fn start_with_access_ttl(seconds: u64) -> Option<Oidc> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/oidc");
        let skip = std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1");
        if !dir.join("node_modules/oidc-provider").is_dir() {
            assert!(
                skip,
                "the OAuth peer is missing: run `npm install` in {} (needs node 20+), or set AGENTLOOM_SKIP_PEERS=1",
                dir.display()
            );
            eprintln!("skipping: the OAuth peer is not installed and AGENTLOOM_SKIP_PEERS=1");
            return None;
        }
        // A port picked free can be taken by another test's server before the provider
        // binds it: it then exits while the other server answers. A start counts once the
        // provider's own discovery document answers with its issuer.
        const ATTEMPTS: u32 = 5;
        let mut last_failure = String::new();
        for _ in 0..ATTEMPTS {
            let port = free_port();
            let child = match Command::new("node")
                .arg(dir.join("server.js"))
                .arg(port.to_string())
                .arg(seconds.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            {
                Ok(child) => child,
                Err(e) => {
                    assert!(
                        skip,
                        "could not start `node` for the OAuth peer: {e}; install Node.js 20+ or set AGENTLOOM_SKIP_PEERS=1"
                    );
                    return None;
                }
            };
            let mut oidc = Oidc {
                child,
                issuer: format!("http://127.0.0.1:{port}"),
            };
            match oidc.confirm_answering(port) {
                Ok(()) => return Some(oidc),
                // Dropped here: the child is killed before the next port is tried.
                Err(failure) => last_failure = failure,
            }
        }
        panic!("the OAuth peer did not start in {ATTEMPTS} attempts; the last: {last_failure}");
    }

    /// Waits (up to 20 s) until this provider serves its discovery document on `port`;
    /// `Err` when it exits first or nothing answers as it would.
    fn confirm_answering(&mut self, port: u16) -> Result<(), String> {
        let started = Instant::now();
        let issuer = format!("\"issuer\":\"{}\"", self.issuer);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("the provider exited ({status}) on port {port}"));
            }
            let answered = crate::local_get(port, "/.well-known/openid-configuration").is_some_and(
                |(head, body)| head.starts_with("HTTP/1.1 200") && body.contains(&issuer),
            );
            if answered {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err(format!(
                    "nothing answered as the provider on port {port} within 20 s"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A tiny browser for the provider's pages: no redirects followed, cookies kept by hand.
pub struct Browser {
    /// The client it sends with (no automatic redirects).
    pub http: reqwest::Client,
    issuer: String,
    cookies: Mutex<BTreeMap<String, String>>,
}

impl Browser {
    /// # Panics
    /// When the HTTP client cannot be built.
    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    pub fn new(issuer: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            issuer: issuer.to_owned(),
            cookies: Mutex::new(BTreeMap::new()),
        }
    }

    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    async fn send(&self, request: reqwest::RequestBuilder) -> reqwest::Response {
        let header = self
            .cookies
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let response = request.header("cookie", header).send().await.unwrap();
        for value in response.headers().get_all("set-cookie") {
            let pair = value.to_str().unwrap().split(';').next().unwrap();
            if let Some((k, v)) = pair.split_once('=') {
                self.cookies
                    .lock()
                    .unwrap()
                    .insert(k.trim().to_owned(), v.to_owned());
            }
        }
        response
    }

    /// # Panics
    /// When the request cannot be sent.
    pub async fn get(&self, url: &str) -> reqwest::Response {
        self.send(self.http.get(url)).await
    }

    /// # Panics
    /// When the request cannot be sent.
    pub async fn post(&self, url: &str, form: &[(&str, &str)]) -> reqwest::Response {
        self.send(self.http.post(url).form(form)).await
    }

    /// Where a redirect points, as an absolute address.
    ///
    /// # Panics
    /// When the response is no redirect.
    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    pub fn location(&self, response: &reqwest::Response) -> String {
        let location = response.headers()["location"].to_str().unwrap().to_owned();
        if location.starts_with('/') {
            format!("{}{location}", self.issuer)
        } else {
            location
        }
    }

    /// Follows `url` through the login (as `alice`) and consent pages until a redirect
    /// leaves the provider (to the app's callback) or a page says the sign-in succeeded;
    /// returns that last address.
    ///
    /// # Panics
    /// When a page answers unexpectedly or the sign-in takes more than 20 pages.
    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    pub async fn sign_in(&self, mut url: String) -> String {
        for _ in 0..20 {
            let r = self.get(&url).await;
            if r.status().is_redirection() {
                url = self.location(&r);
                if !url.starts_with(&self.issuer) {
                    return url;
                }
                continue;
            }
            assert_eq!(r.status(), 200, "unexpected page {url}");
            let body = r.text().await.unwrap();
            if body.contains("Sign-in Success") {
                return url;
            }
            let form: &[(&str, &str)] = if body.contains("name=\"login\"") {
                &[("prompt", "login"), ("login", "alice"), ("password", "pw")]
            } else {
                &[("prompt", "consent")]
            };
            let r = self.post(&url, form).await;
            assert!(r.status().is_redirection(), "{url}: {}", r.status());
            url = self.location(&r);
            if !url.starts_with(&self.issuer) {
                return url;
            }
        }
        panic!("the sign-in did not finish");
    }

    /// Plays the person approving `user_code` on the provider's device pages (on another
    /// device), through login and consent.
    ///
    /// # Panics
    /// When a page answers unexpectedly.
    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    pub async fn approve_device_code(&self, verification_uri: &str, user_code: &str) {
        let page = self.get(verification_uri).await.text().await.unwrap();
        let confirm = self
            .post(
                verification_uri,
                &[("xsrf", &hidden(&page, "xsrf")), ("user_code", user_code)],
            )
            .await
            .text()
            .await
            .unwrap();
        let r = self
            .post(
                verification_uri,
                &[
                    ("xsrf", &hidden(&confirm, "xsrf")),
                    ("user_code", user_code),
                    ("confirm", "yes"),
                ],
            )
            .await;
        assert!(r.status().is_redirection(), "{}", r.status());
        let last = self.sign_in(self.location(&r)).await;
        assert!(last.starts_with(&self.issuer), "{last}");
    }
}

/// The value of the hidden form field `name` in `body`.
fn hidden(body: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = body
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in page"))
        + marker.len();
    body[start..]
        .split('"')
        .next()
        .unwrap_or_default()
        .to_owned()
}
