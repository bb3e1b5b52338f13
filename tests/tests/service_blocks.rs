//! The GitHub and Gmail blocks against `myworld[gateway]` (a stateful fake of both APIs at
//! their real paths), credentials in the real Secret Service, and a stale Google sign-in
//! refreshed at myworld's Google token endpoint after a 401.
//!
//! Peers: `myworld` on PATH (pip install 'myworld[gateway]'); a D-Bus session bus with an
//! unlocked gnome-keyring for the keychain tests. Missing peers fail the tests unless
//! AGENTLOOM_SKIP_PEERS=1.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agentloom_blocks::Registry;
use agentloom_blocks::testing::{TestCtx, inputs, run_block_with};
use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc, SecretSource as _, Value, ValueMap, validate};
use agentloom_engine::credentials::{OAuthClientConfig, OAuthTokens};
use agentloom_engine::{
    CollectSink, CredentialStore, Executor, KeychainSecrets, RunOptions, RunStatus, StoredSecret,
};

fn skip() -> bool {
    std::env::var("AGENTLOOM_SKIP_PEERS").is_ok_and(|v| v == "1")
}

struct World {
    child: Child,
    base: String,
    github_token: String,
    google_token: String,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_world() -> Option<World> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = match Command::new("myworld")
        .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            assert!(
                skip(),
                "the GitHub/Gmail peer is missing ({e}): pip install 'myworld[gateway]' so that `myworld` is on PATH, or set AGENTLOOM_SKIP_PEERS=1"
            );
            return None;
        }
    };
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let spec = serde_json::json!({"id": "e1", "spec": {"name": "t", "servers": {
        "gmail": {"service": "gmail"}, "github": {"service": "github"}}}});
    let mut world = World {
        child,
        base: base.clone(),
        github_token: String::new(),
        google_token: String::new(),
    };
    for _ in 0..100 {
        if let Ok(r) = http.post(format!("{base}/envs")).json(&spec).send().await {
            let json: serde_json::Value = r.json().await.unwrap();
            let creds = &json["credentials"]["agent"];
            world.github_token = creds["github_token"].as_str().unwrap().to_owned();
            world.google_token = creds["google_access_token"].as_str().unwrap().to_owned();
            return Some(world);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("myworld did not start on port {port}");
}

#[tokio::test]
async fn github_create_issue_then_list_it_and_a_bad_token_is_a_clear_401() {
    let Some(world) = start_world().await else {
        return;
    };
    let config = serde_json::json!({
        "base_url": format!("{}/gw/api.github.com", world.base),
        "credential": "gh-test",
        "repo": "acme/api",
    });
    let ctx = TestCtx::new().with_secret("gh-test", &world.github_token);
    let out = run_block_with(
        &ctx,
        "github.create_issue",
        config.clone(),
        inputs([
            ("title", Value::from("Canary flaps")),
            ("body", Value::from("Seen twice.")),
        ]),
    )
    .await
    .unwrap();
    let issue = out["issue"].to_json();
    let number = issue["number"].as_i64().unwrap();
    assert_eq!(issue["title"], "Canary flaps");

    let mut list_config = config.clone();
    list_config["max_items"] = serde_json::json!(500);
    let out = run_block_with(&ctx, "github.list_issues", list_config, inputs([]))
        .await
        .unwrap();
    let issues = out["issues"].to_json();
    let found = issues
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["number"] == number)
        .expect("the new issue is listed");
    assert_eq!(found["body"], "Seen twice.");
    assert!(
        issues.as_array().unwrap().len() > 1,
        "pagination followed: {issues}"
    );

    let out = run_block_with(
        &ctx,
        "github.get_issue",
        config.clone(),
        inputs([("number", Value::Integer(number))]),
    )
    .await
    .unwrap();
    assert_eq!(out["issue"].to_json()["title"], "Canary flaps");

    let bad = TestCtx::new().with_secret("gh-test", "gho_not-a-real-token");
    let err = run_block_with(&bad, "github.list_issues", config, inputs([]))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("401") && err.message.contains("`gh-test`"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("agentloom credentials login github"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("gho_not-a-real-token"));
}

#[tokio::test]
async fn gmail_send_then_find_it_by_search_and_read_it() {
    let Some(world) = start_world().await else {
        return;
    };
    let config = serde_json::json!({
        "base_url": format!("{}/gw/gmail.googleapis.com", world.base),
        "credential": "gmail-test",
    });
    let ctx = TestCtx::new().with_secret("gmail-test", &world.google_token);
    let out = run_block_with(
        &ctx,
        "gmail.send",
        config.clone(),
        inputs([
            ("to", Value::from("bob@example.com")),
            ("subject", Value::from("Quarterly zebra report")),
            ("body", Value::from("Numbers are up. Ünïcode too.")),
        ]),
    )
    .await
    .unwrap();
    let id = out["message"].to_json()["id"].as_str().unwrap().to_owned();
    let out = run_block_with(
        &ctx,
        "gmail.search",
        config.clone(),
        inputs([("query", Value::from("subject:zebra"))]),
    )
    .await
    .unwrap();
    let messages = out["messages"].to_json();
    assert!(
        messages
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == id.as_str()),
        "{messages}"
    );
    let out = run_block_with(
        &ctx,
        "gmail.read_message",
        config.clone(),
        inputs([("id", Value::from(id.as_str()))]),
    )
    .await
    .unwrap();
    let message = out["message"].to_json();
    assert_eq!(message["subject"], "Quarterly zebra report");
    assert!(
        out["text"].as_str().unwrap().contains("Ünïcode"),
        "{message}"
    );

    let bad = TestCtx::new().with_secret("gmail-test", "ya29.bad");
    let err = run_block_with(&bad, "gmail.search", config, inputs([]))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("401") && err.message.contains("`gmail-test`"),
        "{}",
        err.message
    );
}

/// Ok when the real Secret Service is usable; panics with what to do otherwise.
fn real_keychain(dir: &std::path::Path) -> Option<CredentialStore> {
    let store = CredentialStore::open(dir);
    if let Err(e) = store.check_available() {
        assert!(
            skip(),
            "the Secret Service is not usable: {e}. Run the tests inside `dbus-run-session` with `gnome-keyring-daemon --unlock --components=secrets`, or set AGENTLOOM_SKIP_PEERS=1"
        );
        return None;
    }
    Some(store)
}

#[test]
fn keychain_round_trip_in_the_real_secret_service() {
    let dir = tempfile::tempdir().unwrap();
    let Some(store) = real_keychain(dir.path()) else {
        return;
    };
    let name = format!("agentloom-test-{}", std::process::id());
    store
        .put(
            &name,
            &StoredSecret::ApiKey {
                provider: "github".into(),
                key: "real-keychain-value-7731".into(),
            },
        )
        .unwrap();
    let store = Arc::new(store);
    let secrets = KeychainSecrets::new(store.clone()).keychain_only();
    assert_eq!(
        secrets.secret(&name).unwrap().expose(),
        "real-keychain-value-7731"
    );
    // A second store (as another process would) reads the same entry.
    let again = CredentialStore::open(dir.path());
    assert_eq!(
        again.get(&name).unwrap(),
        StoredSecret::ApiKey {
            provider: "github".into(),
            key: "real-keychain-value-7731".into()
        }
    );
    assert_eq!(store.list().unwrap()[0].name, name);
    let index = std::fs::read_to_string(store.index_path()).unwrap();
    assert!(!index.contains("real-keychain-value-7731"));
    store.delete(&name).unwrap();
    assert!(
        secrets
            .secret(&name)
            .unwrap_err()
            .to_string()
            .contains("is not set")
    );
}

#[test]
fn no_keychain_says_why_and_what_to_do() {
    // A child process of this test binary with a session bus address that leads nowhere.
    if std::env::var("AGENTLOOM_NO_KEYCHAIN_CHILD").is_ok() {
        let dir = tempfile::tempdir().unwrap();
        let store = CredentialStore::open(dir.path());
        let err = store.check_available().unwrap_err();
        println!("NO-KEYCHAIN: {err}");
        let secrets = KeychainSecrets::new(Arc::new(store)).keychain_only();
        println!("SECRET-ERROR: {}", secrets.secret("anything").unwrap_err());
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "no_keychain_says_why_and_what_to_do",
            "--nocapture",
        ])
        .env("AGENTLOOM_NO_KEYCHAIN_CHILD", "1")
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/nonexistent/agentloom-bus",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("NO-KEYCHAIN: the keychain could not be reached"),
        "{stdout}"
    );
    assert!(
        stdout.contains("dbus-run-session") || stdout.contains("gnome-keyring"),
        "{stdout}"
    );
    assert!(stdout.contains("AGENTLOOM_SECRET_"), "{stdout}");
    assert!(
        stdout.contains("SECRET-ERROR: the keychain could not be reached"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gmail_refreshes_a_stale_google_sign_in_on_a_401_and_finds_the_mail() {
    let Some(world) = start_world().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(store) = real_keychain(dir.path()) else {
        return;
    };
    let gmail = format!("{}/gw/gmail.googleapis.com", world.base);
    // A mail to find, sent with a working token.
    let sender = TestCtx::new().with_secret("gmail-setup", &world.google_token);
    let sent = run_block_with(
        &sender,
        "gmail.send",
        serde_json::json!({"base_url": gmail, "credential": "gmail-setup"}),
        inputs([
            ("to", Value::from("carol@example.com")),
            ("subject", Value::from("Refreshed pelican notes")),
            ("body", Value::from("Found after a token refresh.")),
        ]),
    )
    .await
    .unwrap();
    let sent_id = sent["message"].to_json()["id"].as_str().unwrap().to_owned();

    // A Google sign-in whose access token the API no longer takes, with no expiry known; its
    // refresh token is good at Google's token endpoint (myworld's, at the real path).
    let name = format!("agentloom-gmail-refresh-{}", std::process::id());
    let stale = OAuthTokens {
        provider: "google".into(),
        access_token: "ya29.a0expired-access-token".into(),
        refresh_token: Some(world.google_token.clone()),
        expires_at: None,
        scopes: vec!["https://www.googleapis.com/auth/gmail.modify".into()],
        client: OAuthClientConfig {
            client_id: "myworld.apps.googleusercontent.com".into(),
            client_secret: Some("myworld".into()),
            token_url: format!("{}/gw/oauth2.googleapis.com/token", world.base),
            revocation_url: None,
        },
    };
    let store = Arc::new(store);
    let gmail_host = agentloom_core::host_of(&reqwest::Url::parse(&gmail).unwrap());
    let hosts = agentloom_core::BoundHosts::parse(&[gmail_host]).unwrap();
    store
        .put_with_hosts(&name, &StoredSecret::OAuth(stale), &hosts)
        .unwrap();

    let mut doc = GraphDoc::new("gmail refresh");
    doc.nodes.push(
        NodeDoc::new("search", "gmail.search")
            .with_config(serde_json::json!({"base_url": gmail, "credential": name})),
    );
    doc.nodes.push(
        NodeDoc::new("query", "data.constant")
            .with_config(serde_json::json!({"value": "subject:pelican"})),
    );
    doc.nodes.push(
        NodeDoc::new("out", "graph.output").with_config(serde_json::json!({"name": "found"})),
    );
    doc.edges
        .push(EdgeDoc::new("query", "value", "search", "query"));
    doc.edges
        .push(EdgeDoc::new("search", "messages", "out", "value"));
    let registry = Arc::new(Registry::builtin());
    let graph = validate(&doc, registry.as_ref()).unwrap();
    let secrets = KeychainSecrets::new(store.clone()).keychain_only();
    let report = Executor::new(registry)
        .with_secrets(Arc::new(secrets))
        .run(
            Arc::new(graph),
            ValueMap::new(),
            RunOptions::default(),
            Arc::new(CollectSink::default()),
        )
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:#?}");
    let found = report.outputs["found"].to_json();
    assert_eq!(found.as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found[0]["id"], sent_id.as_str(), "{found}");
    // The new access token is stored with its expiry; Google keeps the refresh token.
    let StoredSecret::OAuth(now) = store.get(&name).unwrap() else {
        panic!("the credential changed kind");
    };
    assert_eq!(now.access_token, world.google_token);
    assert_eq!(
        now.refresh_token.as_deref(),
        Some(world.google_token.as_str())
    );
    assert!(now.expires_at.is_some());
    store.delete(&name).unwrap();
}
