//! Refresh on a 401, end to end: a real OpenID Provider (node-oidc-provider, tests/peers/oidc,
//! with access tokens that live 3 s and rotating refresh tokens), the real Secret Service,
//! the executor, and a small service on 127.0.0.1 (axum) that accepts a bearer token only
//! when the provider's userinfo endpoint does. The service speaks GitHub's issues API and
//! OpenAI's chat completions, and passes `/token` on to the provider, counting refreshes.
//!
//! The stored credentials carry no expiry, as with a provider that does not say when its
//! tokens expire: the expired token is only found out when the service refuses it.
//!
//! Peers: `node` and `npm install` in tests/peers/oidc; a D-Bus session bus with an unlocked
//! gnome-keyring. Missing peers fail the tests unless AGENTLOOM_SKIP_PEERS=1.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloom_blocks::Registry;
use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc, ValueMap, validate};
use agentloom_engine::credentials::OAuthTokens;
use agentloom_engine::credentials::oauth::{self, BrowserOpener, Provider};
use agentloom_engine::{
    CollectSink, CredentialStore, Executor, KeychainSecrets, RunOptions, RunReport, RunStatus,
    StoredSecret,
};
use agentloom_tests::oidc::{Browser, Oidc};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

/// How long the provider's access tokens live.
const ACCESS_TTL_SECS: u64 = 3;

fn skip() -> bool {
    std::env::var("AGENTLOOM_SKIP_PEERS").is_ok_and(|v| v == "1")
}

/// The real Secret Service, or None when peers are skipped.
fn real_keychain(dir: &std::path::Path) -> Option<Arc<CredentialStore>> {
    let store = CredentialStore::open(dir);
    if let Err(e) = store.check_available() {
        assert!(
            skip(),
            "the Secret Service is not usable: {e}. Run the tests inside `dbus-run-session` with `gnome-keyring-daemon --unlock --components=secrets`, or set AGENTLOOM_SKIP_PEERS=1"
        );
        return None;
    }
    Some(Arc::new(store))
}

/// Plays the browser: follows the provider's redirects and completes its login and consent
/// pages over HTTP, then calls the loopback callback.
struct TestBrowser {
    issuer: String,
    done: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl BrowserOpener for TestBrowser {
    fn open(&self, url: &str) -> Result<(), String> {
        let (issuer, url) = (self.issuer.clone(), url.to_owned());
        *self.done.lock().unwrap() = Some(tokio::spawn(async move {
            let browser = Browser::new(&issuer);
            let callback = browser.sign_in(url).await;
            assert_eq!(
                browser.http.get(&callback).send().await.unwrap().status(),
                200
            );
        }));
        Ok(())
    }
}

/// Signs in with the code flow and PKCE; returns the tokens.
async fn sign_in(oidc: &Oidc) -> OAuthTokens {
    let provider = Provider::discover(&oidc.issuer, "agentloom-test")
        .await
        .unwrap();
    let browser = TestBrowser {
        issuer: oidc.issuer.clone(),
        done: Mutex::new(None),
    };
    let scopes = vec!["openid".to_owned(), "offline_access".to_owned()];
    let tokens = oauth::authorize_code(&provider, &scopes, &browser, Duration::from_secs(30))
        .await
        .unwrap();
    let handle = browser.done.lock().unwrap().take().unwrap();
    handle.await.unwrap();
    assert!(tokens.refresh_token.is_some(), "a refresh token");
    tokens
}

/// What the service saw.
#[derive(Default)]
struct Seen {
    /// `(route, status)` of every API request, in order.
    answers: Mutex<Vec<(&'static str, u16)>>,
    /// Token requests passed on to the provider, with the provider's status.
    refreshes: Mutex<Vec<u16>>,
}

#[derive(Clone)]
struct Service {
    issuer: String,
    http: reqwest::Client,
    seen: Arc<Seen>,
}

impl Service {
    /// Whether the provider's userinfo endpoint accepts the request's bearer token.
    async fn accepts(&self, headers: &HeaderMap) -> bool {
        let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let me = self
            .http
            .get(format!("{}/me", self.issuer))
            .header("authorization", auth)
            .send()
            .await
            .unwrap();
        me.status() == 200
    }

    fn record(&self, route: &'static str, status: StatusCode) {
        self.seen
            .answers
            .lock()
            .unwrap()
            .push((route, status.as_u16()));
    }
}

async fn issues(State(service): State<Service>, headers: HeaderMap) -> Response {
    if !service.accepts(&headers).await {
        service.record("issues", StatusCode::UNAUTHORIZED);
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"message": "Bad credentials"})),
        )
            .into_response();
    }
    service.record("issues", StatusCode::OK);
    axum::Json(json!([{"number": 42, "title": "Tokens expire", "state": "open"}])).into_response()
}

async fn chat(State(service): State<Service>, headers: HeaderMap) -> Response {
    if !service.accepts(&headers).await {
        service.record("chat", StatusCode::UNAUTHORIZED);
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": {"message": "invalid token"}})),
        )
            .into_response();
    }
    service.record("chat", StatusCode::OK);
    axum::Json(json!({"choices": [{"message": {"role": "assistant", "content": "Signed in and answering."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4}}))
    .into_response()
}

/// Passes a token request on to the provider and counts it.
async fn token(State(service): State<Service>, headers: HeaderMap, body: Bytes) -> Response {
    let mut request = service
        .http
        .post(format!("{}/token", service.issuer))
        .body(body);
    for name in ["content-type", "accept", "authorization"] {
        if let Some(value) = headers.get(name) {
            request = request.header(name, value.as_bytes());
        }
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    service.seen.refreshes.lock().unwrap().push(status);
    let content_type = answer
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = answer.bytes().await.unwrap();
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", content_type)],
        bytes,
    )
        .into_response()
}

async fn start_service(issuer: &str) -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let state = Service {
        issuer: issuer.to_owned(),
        http: reqwest::Client::new(),
        seen: seen.clone(),
    };
    let app = Router::new()
        .route("/repos/acme/api/issues", get(issues))
        .route("/v1/chat/completions", post(chat))
        .route("/token", post(token))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

/// Waits until the provider no longer accepts `access_token`.
async fn wait_until_expired(issuer: &str, access_token: &str) {
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let me = http
            .get(format!("{issuer}/me"))
            .bearer_auth(access_token)
            .send()
            .await
            .unwrap();
        if me.status() == 401 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the access token did not expire"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `tokens` as stored for the test: no expiry known, refreshed through the service's
/// counting `/token`.
fn stored(tokens: &OAuthTokens, service: &str) -> StoredSecret {
    let mut tokens = tokens.clone();
    tokens.expires_at = None;
    tokens.client.token_url = format!("{service}/token");
    StoredSecret::OAuth(tokens)
}

/// The credential bound to the service's host, where the blocks send it.
fn hosts_of(service: &str) -> agentloom_core::BoundHosts {
    let url = reqwest::Url::parse(service).unwrap();
    agentloom_core::BoundHosts::parse(&[agentloom_core::host_of(&url)]).unwrap()
}

fn oauth_tokens(store: &CredentialStore, name: &str) -> OAuthTokens {
    match store.get(name).unwrap() {
        StoredSecret::OAuth(tokens) => tokens,
        other => panic!("expected OAuth tokens, got {other:?}"),
    }
}

async fn run_node(
    store: &Arc<CredentialStore>,
    kind: &str,
    config: serde_json::Value,
    port: &str,
) -> RunReport {
    let mut doc = GraphDoc::new("refresh");
    doc.nodes
        .push(NodeDoc::new("call", kind).with_config(config));
    doc.nodes
        .push(NodeDoc::new("out", "graph.output").with_config(json!({"name": "out"})));
    doc.edges.push(EdgeDoc::new("call", port, "out", "value"));
    let registry = Arc::new(Registry::builtin());
    let graph = validate(&doc, registry.as_ref()).unwrap();
    let secrets = KeychainSecrets::new(store.clone()).keychain_only();
    Executor::new(registry)
        .with_secrets(Arc::new(secrets))
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions::default(),
            Arc::new(CollectSink::default()),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refreshed_once_on_a_401_and_the_rotated_refresh_token_is_stored() {
    let Some(oidc) = Oidc::start_with_access_ttl(ACCESS_TTL_SECS) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(store) = real_keychain(dir.path()) else {
        return;
    };
    let name = format!("agentloom-refresh-{}", std::process::id());
    let (service, seen) = start_service(&oidc.issuer).await;
    let signed_in = sign_in(&oidc).await;
    let first_refresh = signed_in.refresh_token.clone().unwrap();
    store
        .put_with_hosts(&name, &stored(&signed_in, &service), &hosts_of(&service))
        .unwrap();
    wait_until_expired(&oidc.issuer, &signed_in.access_token).await;

    // GitHub: the expired token is refused, refreshed once, and the request repeated.
    let report = run_node(
        &store,
        "github.list_issues",
        json!({"base_url": service, "credential": name, "repo": "acme/api"}),
        "issues",
    )
    .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(report.outputs["out"].to_json()[0]["number"], 42);
    assert_eq!(
        *seen.answers.lock().unwrap(),
        vec![("issues", 401), ("issues", 200)]
    );
    assert_eq!(*seen.refreshes.lock().unwrap(), vec![200]);
    let after_first = oauth_tokens(&store, &name);
    let second_refresh = after_first.refresh_token.clone().unwrap();
    assert_ne!(second_refresh, first_refresh, "the refresh token rotated");
    assert_ne!(after_first.access_token, signed_in.access_token);
    assert!(after_first.expires_at.is_some(), "the new expiry is stored");

    // LLM chat, with the expired token put back beside the current refresh token.
    let stale_again = OAuthTokens {
        access_token: signed_in.access_token.clone(),
        ..after_first.clone()
    };
    store.put(&name, &stored(&stale_again, &service)).unwrap();
    let report = run_node(
        &store,
        "llm.chat",
        json!({"base_url": format!("{service}/v1"), "model": "m", "prompt": "hi", "stream": false, "credential": name}),
        "text",
    )
    .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    assert_eq!(
        report.outputs["out"].to_json(),
        json!("Signed in and answering.")
    );
    assert_eq!(
        seen.answers.lock().unwrap()[2..],
        [("chat", 401), ("chat", 200)]
    );
    assert_eq!(*seen.refreshes.lock().unwrap(), vec![200, 200]);
    let after_second = oauth_tokens(&store, &name);
    assert_ne!(after_second.refresh_token.unwrap(), second_refresh);

    // The first refresh token is spent at the provider. (Last: the provider takes its reuse
    // for a stolen token and ends the whole grant.)
    let spent = oauth::refresh(&signed_in).await.unwrap_err().to_string();
    assert!(spent.contains("invalid_grant"), "{spent}");
    store.delete(&name).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_refresh_names_the_credential_and_how_to_sign_in_again() {
    let Some(oidc) = Oidc::start_with_access_ttl(ACCESS_TTL_SECS) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(store) = real_keychain(dir.path()) else {
        return;
    };
    let name = format!("agentloom-refresh-refused-{}", std::process::id());
    let (service, seen) = start_service(&oidc.issuer).await;
    let signed_in = sign_in(&oidc).await;
    // Refreshed elsewhere (another machine, a copied keychain): the stored refresh token is
    // spent.
    oauth::refresh(&signed_in).await.unwrap();
    store
        .put_with_hosts(&name, &stored(&signed_in, &service), &hosts_of(&service))
        .unwrap();
    wait_until_expired(&oidc.issuer, &signed_in.access_token).await;

    let report = run_node(
        &store,
        "github.list_issues",
        json!({"base_url": service, "credential": name, "repo": "acme/api"}),
        "issues",
    )
    .await;
    assert_eq!(report.status, RunStatus::Failed, "{report:#?}");
    let error = report
        .nodes
        .iter()
        .find(|n| n.id == "call")
        .unwrap()
        .error
        .clone()
        .unwrap();
    assert!(
        error.starts_with(&format!(
            "GitHub refused the token of credential `{name}` (HTTP 401) and getting a new one failed: "
        )),
        "{error}"
    );
    assert!(error.contains("invalid_grant"), "{error}");
    assert!(
        error.contains(&format!(
            "sign in again with `agentloom credentials login oidc --issuer {} --name {name} --client-id ID`",
            oidc.issuer
        )),
        "{error}"
    );
    for secret in [
        signed_in.access_token.as_str(),
        signed_in.refresh_token.as_deref().unwrap(),
    ] {
        assert!(!error.contains(secret), "a token leaked: {error}");
    }
    assert_eq!(*seen.answers.lock().unwrap(), vec![("issues", 401)]);
    assert_eq!(*seen.refreshes.lock().unwrap(), vec![400]);
    // Nothing was overwritten.
    assert_eq!(
        oauth_tokens(&store, &name).refresh_token,
        signed_in.refresh_token
    );
    store.delete(&name).unwrap();
}
