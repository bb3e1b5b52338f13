//! Secrets handled outside any run never reach the binary's log output: the tokens of an
//! OAuth sign-in against a real OpenID Provider (tests/peers/oidc), and a key stored in
//! the credential store, are redacted from log lines whoever logs them.
//!
//! Needs `node` and `npm install` in tests/peers/oidc; fails with a clear message when
//! missing, unless AGENTLOOM_SKIP_PEERS=1.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloom::logging::RedactedLines;
use agentloom_engine::credentials::oauth::{self, BrowserOpener, Provider};
use agentloom_engine::{CredentialStore, REDACTED, StoredSecret};
use agentloom_tests::CapturedLog;
use agentloom_tests::oidc::{Browser, Oidc};

/// Signs in on the provider's pages as a person in a browser would.
struct SigningIn {
    browser: Arc<Browser>,
    done: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl BrowserOpener for SigningIn {
    fn open(&self, url: &str) -> Result<(), String> {
        let (browser, url) = (self.browser.clone(), url.to_owned());
        *self.done.lock().unwrap() = Some(tokio::spawn(async move {
            let callback = browser.sign_in(url).await;
            browser.http.get(&callback).send().await.unwrap();
        }));
        Ok(())
    }
}

#[tokio::test]
async fn the_tokens_of_a_sign_in_and_a_stored_key_are_redacted_from_log_lines() {
    let Some(oidc) = Oidc::start() else { return };
    // The log output, as the binary would write it to stderr.
    let logs = CapturedLog::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(RedactedLines(move || writer.clone()))
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);

    let provider = Provider::discover(&oidc.issuer, "agentloom-test")
        .await
        .unwrap();
    let opener = SigningIn {
        browser: Arc::new(Browser::new(&oidc.issuer)),
        done: Mutex::new(None),
    };
    let scopes = ["openid".to_owned(), "offline_access".to_owned()];
    let tokens = oauth::authorize_code(&provider, &scopes, &opener, Duration::from_secs(30))
        .await
        .unwrap();
    let signing_in = opener.done.lock().unwrap().take().unwrap();
    signing_in.await.unwrap();
    let refresh = tokens.refresh_token.clone().unwrap();

    // A key typed into the credentials window goes to the store.
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<keyring_core::CredentialStore> = keyring_core::mock::Store::new().unwrap();
    let store = CredentialStore::with_backend(backend, dir.path());
    let key = "sk-typed-into-the-window-4242";
    store
        .put(
            "openai",
            &StoredSecret::ApiKey {
                provider: "openai".to_owned(),
                key: key.to_owned(),
            },
        )
        .unwrap();

    // Whoever logs them (a library dumping a response, a careless message)…
    tracing::warn!(
        body = %format!(r#"{{"access_token":"{}","refresh_token":"{refresh}"}}"#, tokens.access_token),
        "token endpoint answered"
    );
    tracing::warn!("calling with Authorization: Bearer {key}");
    let text = logs.text();
    assert!(text.contains("token endpoint answered"), "{text}");
    assert_eq!(text.matches(REDACTED).count(), 3, "{text}");
    for secret in [tokens.access_token.as_str(), refresh.as_str(), key] {
        assert!(!text.contains(secret), "a secret is in the log:\n{text}");
    }
}
