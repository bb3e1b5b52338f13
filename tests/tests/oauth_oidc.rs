//! OAuth 2 against a real OpenID Provider (node-oidc-provider, tests/peers/oidc): the code
//! flow with PKCE through the loopback listener, a refused wrong `state`, the device flow,
//! refresh with rotation, and revocation.
//!
//! Needs `node` and `npm install` in tests/peers/oidc; fails with a clear message when
//! missing, unless AGENTLOOM_SKIP_PEERS=1.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloom_engine::credentials::oauth::{self, BrowserOpener, DeviceCode, Provider};

struct Oidc {
    child: Child,
    issuer: String,
}

impl Drop for Oidc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the provider, or None when peers are skipped.
fn start_oidc() -> Option<Oidc> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/oidc");
    let skip = std::env::var("AGENTLOOM_SKIP_PEERS").is_ok_and(|v| v == "1");
    if !dir.join("node_modules/oidc-provider").is_dir() {
        assert!(
            skip,
            "the OAuth peer is missing: run `npm install` in {} (needs node 20+), or set AGENTLOOM_SKIP_PEERS=1",
            dir.display()
        );
        return None;
    }
    let port = free_port();
    let child = Command::new("node")
        .arg(dir.join("server.js"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            assert!(
                skip,
                "could not start `node` for the OAuth peer: {e}; install Node.js 20+ or set AGENTLOOM_SKIP_PEERS=1"
            );
            return None;
        }
    };
    let issuer = format!("http://127.0.0.1:{port}");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(Oidc { child, issuer });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the OAuth peer did not start on port {port}");
}

/// A tiny browser: no redirects followed automatically, cookies kept by hand.
struct Browser {
    http: reqwest::Client,
    cookies: Mutex<BTreeMap<String, String>>,
}

impl Browser {
    fn new() -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: Mutex::new(BTreeMap::new()),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn keep_cookies(&self, response: &reqwest::Response) {
        for value in response.headers().get_all("set-cookie") {
            let text = value.to_str().unwrap();
            let pair = text.split(';').next().unwrap();
            if let Some((k, v)) = pair.split_once('=') {
                self.cookies
                    .lock()
                    .unwrap()
                    .insert(k.trim().to_owned(), v.to_owned());
            }
        }
    }

    async fn get(&self, url: &str) -> reqwest::Response {
        let r = self
            .http
            .get(url)
            .header("cookie", self.cookie_header())
            .send()
            .await
            .unwrap();
        self.keep_cookies(&r);
        r
    }

    async fn post(&self, url: &str, form: &[(&str, &str)]) -> reqwest::Response {
        let r = self
            .http
            .post(url)
            .header("cookie", self.cookie_header())
            .form(form)
            .send()
            .await
            .unwrap();
        self.keep_cookies(&r);
        r
    }

    /// Follows redirects from `url`, completing login and consent pages, until a redirect
    /// leaves the provider (to the loopback callback); returns that final location.
    async fn sign_in(&self, issuer: &str, mut url: String) -> String {
        for _ in 0..20 {
            let r = self.get(&url).await;
            if r.status().is_redirection() {
                let loc = location(issuer, &r);
                if !loc.starts_with(issuer) {
                    return loc;
                }
                url = loc;
                continue;
            }
            assert_eq!(r.status(), 200, "unexpected page {url}");
            let body = r.text().await.unwrap();
            let form = if body.contains("name=\"login\"") {
                vec![("prompt", "login"), ("login", "alice"), ("password", "pw")]
            } else {
                vec![("prompt", "consent")]
            };
            let r = self.post(&url, &form).await;
            assert!(
                r.status().is_redirection(),
                "interaction {url} answered {}",
                r.status()
            );
            url = location(issuer, &r);
            if !url.starts_with(issuer) {
                return url;
            }
        }
        panic!("the sign-in did not finish");
    }
}

fn location(issuer: &str, r: &reqwest::Response) -> String {
    let loc = r.headers()["location"].to_str().unwrap().to_owned();
    if loc.starts_with('/') {
        format!("{issuer}{loc}")
    } else {
        loc
    }
}

fn hidden(body: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = body
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in page"))
        + marker.len();
    body[start..].split('"').next().unwrap().to_owned()
}

/// Plays the browser on a tokio task; `tamper` may change the final callback URL.
struct TestOpener {
    issuer: String,
    browser: Arc<Browser>,
    tamper: fn(String) -> String,
    done: Mutex<Option<tokio::task::JoinHandle<String>>>,
}

impl BrowserOpener for TestOpener {
    fn open(&self, url: &str) -> Result<(), String> {
        let (issuer, browser, url, tamper) = (
            self.issuer.clone(),
            self.browser.clone(),
            url.to_owned(),
            self.tamper,
        );
        let handle = tokio::spawn(async move {
            let callback = tamper(browser.sign_in(&issuer, url).await);
            let r = browser.http.get(&callback).send().await.unwrap();
            format!("{} {}", r.status().as_u16(), r.text().await.unwrap())
        });
        *self.done.lock().unwrap() = Some(handle);
        Ok(())
    }
}

fn scopes() -> Vec<String> {
    vec!["openid".into(), "offline_access".into()]
}

#[tokio::test]
async fn code_flow_with_pkce_refresh_rotation_and_revocation() {
    let Some(oidc) = start_oidc() else { return };
    let provider = Provider::discover(&oidc.issuer, "agentloom-test")
        .await
        .unwrap();
    assert_eq!(
        provider.endpoints.token_url,
        format!("{}/token", oidc.issuer)
    );
    let opener = TestOpener {
        issuer: oidc.issuer.clone(),
        browser: Arc::new(Browser::new()),
        tamper: |u| u,
        done: Mutex::new(None),
    };
    let tokens = oauth::authorize_code(&provider, &scopes(), &opener, Duration::from_secs(30))
        .await
        .unwrap();
    let handle = opener.done.lock().unwrap().take().unwrap();
    let page = handle.await.unwrap();
    assert!(
        page.starts_with("200") && page.contains("Signed in"),
        "{page}"
    );
    assert!(!tokens.access_token.is_empty());
    let first_refresh = tokens.refresh_token.clone().expect("a refresh token");
    assert!(tokens.expires_at.is_some());
    assert!(
        tokens.scopes.contains(&"openid".to_owned()),
        "{:?}",
        tokens.scopes
    );

    // The access token works at the userinfo endpoint.
    let http = reqwest::Client::new();
    let me = format!("{}/me", oidc.issuer);
    let ok = http
        .get(&me)
        .bearer_auth(&tokens.access_token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);

    // Refresh rotates the refresh token; the old one is then refused.
    let fresh = oauth::refresh(&tokens).await.unwrap();
    let second_refresh = fresh.refresh_token.clone().unwrap();
    assert_ne!(second_refresh, first_refresh);
    assert_ne!(fresh.access_token, tokens.access_token);
    let err = oauth::refresh(&tokens).await.unwrap_err().to_string();
    assert!(err.contains("invalid_grant"), "{err}");
    assert!(!err.contains(&first_refresh), "{err}");

    // Revocation: the token stops working.
    assert!(oauth::revoke(&fresh).await.unwrap());
    let gone = http
        .get(&me)
        .bearer_auth(&fresh.access_token)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 401);
    let err = oauth::refresh(&fresh).await.unwrap_err().to_string();
    assert!(err.contains("invalid_grant"), "{err}");
}

#[tokio::test]
async fn a_wrong_state_is_refused() {
    let Some(oidc) = start_oidc() else { return };
    let provider = Provider::discover(&oidc.issuer, "agentloom-test")
        .await
        .unwrap();
    let opener = TestOpener {
        issuer: oidc.issuer.clone(),
        browser: Arc::new(Browser::new()),
        tamper: |u| {
            let (base, query) = u.split_once('?').unwrap();
            let pairs: Vec<String> = query
                .split('&')
                .map(|p| {
                    if p.starts_with("state=") {
                        "state=forged".to_owned()
                    } else {
                        p.to_owned()
                    }
                })
                .collect();
            format!("{base}?{}", pairs.join("&"))
        },
        done: Mutex::new(None),
    };
    let err = oauth::authorize_code(&provider, &scopes(), &opener, Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`state` did not match"), "{err}");
    let handle = opener.done.lock().unwrap().take().unwrap();
    let page = handle.await.unwrap();
    assert!(page.starts_with("400"), "{page}");
}

#[tokio::test]
async fn device_flow_is_approved_on_the_provider_pages() {
    let Some(oidc) = start_oidc() else { return };
    let provider = Provider::discover(&oidc.issuer, "agentloom-test")
        .await
        .unwrap();
    let issuer = oidc.issuer.clone();
    let approver: Mutex<Option<tokio::task::JoinHandle<()>>> = Mutex::new(None);
    let show = |code: &DeviceCode| {
        assert_eq!(
            code.interval,
            Duration::from_secs(5),
            "RFC 8628 default interval"
        );
        let (issuer, user_code, uri) = (
            issuer.clone(),
            code.user_code.clone(),
            code.verification_uri.clone(),
        );
        *approver.lock().unwrap() = Some(tokio::spawn(async move {
            let b = Browser::new();
            let page = b.get(&uri).await.text().await.unwrap();
            let r = b
                .post(
                    &uri,
                    &[("xsrf", &hidden(&page, "xsrf")), ("user_code", &user_code)],
                )
                .await;
            let confirm = r.text().await.unwrap();
            let r = b
                .post(
                    &uri,
                    &[
                        ("xsrf", &hidden(&confirm, "xsrf")),
                        ("user_code", &user_code),
                        ("confirm", "yes"),
                    ],
                )
                .await;
            assert!(r.status().is_redirection());
            let next = location(&issuer, &r);
            // Login and consent, then the device success page.
            let mut url = next;
            for _ in 0..10 {
                let r = b.get(&url).await;
                if r.status().is_redirection() {
                    url = location(&issuer, &r);
                    continue;
                }
                let body = r.text().await.unwrap();
                if body.contains("Sign-in Success") {
                    return;
                }
                let form = if body.contains("name=\"login\"") {
                    vec![("prompt", "login"), ("login", "alice"), ("password", "pw")]
                } else {
                    vec![("prompt", "consent")]
                };
                let r = b.post(&url, &form).await;
                url = location(&issuer, &r);
            }
            panic!("device approval did not finish");
        }));
    };
    let tokens = tokio::time::timeout(
        Duration::from_secs(60),
        oauth::authorize_device(&provider, &scopes(), &show),
    )
    .await
    .expect("device flow timed out")
    .unwrap();
    let handle = approver.lock().unwrap().take().unwrap();
    handle.await.unwrap();
    assert!(!tokens.access_token.is_empty());
    assert!(tokens.refresh_token.is_some());
}
