//! OAuth 2 against a real OpenID Provider (node-oidc-provider, tests/peers/oidc): the code
//! flow with PKCE through the loopback listener, a refused wrong `state`, the device flow,
//! refresh with rotation, and revocation.
//!
//! Needs `node` and `npm install` in tests/peers/oidc; fails with a clear message when
//! missing, unless AGENTLOOM_SKIP_PEERS=1.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloom_engine::credentials::oauth::{self, BrowserOpener, DeviceCode, Provider};
use agentloom_tests::oidc::{Browser, Oidc};

/// Plays the browser on a tokio task; `tamper` may change the final callback URL.
struct TestOpener {
    browser: Arc<Browser>,
    tamper: fn(String) -> String,
    done: Mutex<Option<tokio::task::JoinHandle<String>>>,
}

impl BrowserOpener for TestOpener {
    fn open(&self, url: &str) -> Result<(), String> {
        let (browser, url, tamper) = (self.browser.clone(), url.to_owned(), self.tamper);
        let handle = tokio::spawn(async move {
            let callback = tamper(browser.sign_in(url).await);
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
    let Some(oidc) = Oidc::start() else { return };
    let provider = Provider::discover(&oidc.issuer, "agentloom-test")
        .await
        .unwrap();
    assert_eq!(
        provider.endpoints.token_url,
        format!("{}/token", oidc.issuer)
    );
    let opener = TestOpener {
        browser: Arc::new(Browser::new(&oidc.issuer)),
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
    let Some(oidc) = Oidc::start() else { return };
    let provider = Provider::discover(&oidc.issuer, "agentloom-test")
        .await
        .unwrap();
    let opener = TestOpener {
        browser: Arc::new(Browser::new(&oidc.issuer)),
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
    let Some(oidc) = Oidc::start() else { return };
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
            Browser::new(&issuer)
                .approve_device_code(&uri, &user_code)
                .await;
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
