//! The credentials manager and the inspector's credential and model pickers, driven through
//! the real UI. Secrets go to the real Secret Service: run inside a D-Bus session with an
//! unlocked gnome-keyring (see TESTING.md), as `scripts/test-all.sh` and CI do.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloom::app::{App, AppPaths, Command};
use agentloom_core::GraphDoc;
use agentloom_engine::credentials::oauth::BrowserOpener;
use agentloom_engine::{CredentialError, CredentialStore, StoredSecret};
use agentloom_tests::oidc::{Browser, Oidc};
use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::shown_anywhere;

mod support;

type AppHarness = Harness<'static, App>;

fn paths(dir: &Path) -> AppPaths {
    AppPaths {
        run_log: Some(dir.join("runs.sqlite3")),
        data_dir: None,
        workspace: Some(dir.to_owned()),
        credentials_dir: Some(dir.join("credentials")),
    }
}

fn harness(doc: &GraphDoc, paths: &AppPaths) -> AppHarness {
    let app = App::new(doc, None, paths);
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_ui_state(|ui, app: &mut App| app.show(ui), app);
    harness.run_steps(3);
    harness
}

/// A credential name no other test (or earlier run) uses.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// The store the app uses, opened a second time by the test, failing with the engine's
/// own advice when no keychain is reachable.
fn store(paths: &AppPaths) -> CredentialStore {
    let store = CredentialStore::open(paths.credentials_dir.as_deref().unwrap());
    if let Err(e) = store.check_available() {
        panic!(
            "these tests need the Secret Service (run inside `dbus-run-session` with gnome-keyring unlocked, see TESTING.md): {e}"
        );
    }
    store
}

/// Steps frames until `done` holds (background jobs report from their threads).
fn wait_until(h: &mut AppHarness, what: &str, done: impl Fn(&AppHarness) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        h.step();
        if done(h) {
            break;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    h.run_steps(2);
}

fn click(h: &mut AppHarness, role: Role, label: &str) {
    h.get_by_role_and_label(role, label).click();
    h.run_steps(2);
}

fn type_into(h: &mut AppHarness, role: Role, label: &str, text: &str) {
    let field = h.get_by_role_and_label(role, label);
    field.click();
    field.type_text(text);
    h.run_steps(2);
}

fn open_credentials_from_the_menu(h: &mut AppHarness) {
    click(h, Role::Button, "File");
    click(h, Role::Button, "Credentials…");
    // The new window sizes itself over its first frames.
    h.run_steps(4);
    h.get_by_label("Add an API key");
}

#[test]
fn an_api_key_added_in_the_window_is_stored_in_the_keychain_listed_and_removed_after_confirmation()
{
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let store = store(&paths);
    let name = unique("ui-key");
    let secret = format!("sk-SECRET-{}", unique("v"));
    let mut h = harness(&GraphDoc::new("Empty"), &paths);

    open_credentials_from_the_menu(&mut h);
    h.get_by_label("No credentials stored yet.");
    type_into(&mut h, Role::TextInput, "Name", &name);
    type_into(&mut h, Role::TextInput, "Provider", "openai");
    type_into(&mut h, Role::PasswordInput, "Secret", &secret);
    assert!(
        !shown_anywhere(&h, &secret),
        "the secret field is masked while typing"
    );
    click(&mut h, Role::Button, "Add");
    let stored = format!("Stored `{name}` in the keychain.");
    wait_until(&mut h, "the key to be stored", |h| {
        h.query_by_label(&stored).is_some()
    });

    // Listed with kind, provider and status; the secret is never shown again.
    h.get_by_label(&name);
    h.get_by_label("api key");
    h.get_by_label("ok");
    assert!(
        !shown_anywhere(&h, &secret),
        "the secret is not shown again"
    );
    assert_eq!(
        h.get_by_role_and_label(Role::PasswordInput, "Secret")
            .value(),
        Some(String::new()),
        "the secret field is emptied"
    );
    // In the real keychain, and nowhere in the index file.
    assert_eq!(
        store.get(&name).unwrap(),
        StoredSecret::ApiKey {
            provider: "openai".into(),
            key: secret.clone(),
        }
    );
    let index = std::fs::read_to_string(store.index_path()).unwrap();
    assert!(index.contains(&name) && !index.contains(&secret), "{index}");

    // Remove asks first; "Keep" keeps it.
    click(&mut h, Role::Button, &format!("Remove {name}"));
    h.get_by_label_contains(&format!("Remove `{name}` from the keychain?"));
    click(&mut h, Role::Button, "Cancel removal");
    assert!(store.get(&name).is_ok());
    click(&mut h, Role::Button, &format!("Remove {name}"));
    click(&mut h, Role::Button, "Confirm removal");
    let removed = format!("Removed `{name}`.");
    wait_until(&mut h, "the removal", |h| {
        h.query_by_label(&removed).is_some()
    });
    assert!(h.query_by_label(&name).is_none(), "no longer listed");
    assert_eq!(
        store.get(&name).unwrap_err(),
        CredentialError::NotFound { name: name.clone() }
    );
}

#[test]
fn hosts_are_given_when_adding_listed_and_edited_in_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let store = store(&paths);
    let name = unique("ui-hosts");
    let mut h = harness(&GraphDoc::new("Empty"), &paths);
    open_credentials_from_the_menu(&mut h);
    type_into(&mut h, Role::TextInput, "Name", &name);
    type_into(&mut h, Role::TextInput, "Provider", "openai");
    type_into(&mut h, Role::TextInput, "Hosts", "127.0.0.1:8080");
    type_into(&mut h, Role::PasswordInput, "Secret", "sk-SECRET-hosts");
    click(&mut h, Role::Button, "Add");
    let stored = format!("Stored `{name}` in the keychain.");
    wait_until(&mut h, "the key to be stored", |h| {
        h.query_by_label(&stored).is_some()
    });
    h.get_by_label("127.0.0.1:8080");
    let hosts = |store: &CredentialStore| store.info(&name).unwrap().unwrap().hosts;
    assert_eq!(hosts(&store), ["127.0.0.1:8080"]);

    // Edited: one more host.
    click(&mut h, Role::Button, &format!("Edit hosts of {name}"));
    let editor = format!("Hosts of {name}");
    assert_eq!(
        h.get_by_role_and_label(Role::TextInput, &editor).value(),
        Some("127.0.0.1:8080".to_owned())
    );
    type_into(&mut h, Role::TextInput, &editor, ", API.openai.com");
    click(&mut h, Role::Button, "Save hosts");
    h.get_by_label(&format!(
        "`{name}` may be sent to 127.0.0.1:8080, api.openai.com."
    ));
    h.get_by_label("127.0.0.1:8080, api.openai.com");
    assert_eq!(hosts(&store), ["127.0.0.1:8080", "api.openai.com"]);

    // A mistake is named and changes nothing.
    // (The list is read again after a save: let it settle before the next click.)
    h.run_steps(4);
    click(&mut h, Role::Button, &format!("Edit hosts of {name}"));
    type_into(&mut h, Role::TextInput, &editor, "/v1");
    click(&mut h, Role::Button, "Save hosts");
    let refused = h.get_by_label_contains("is not a host: write `host` or `host:port`");
    assert!(format!("{refused:?}").contains("Hosts: `"), "{refused:?}");
    click(&mut h, Role::Button, "Cancel editing hosts");
    assert!(
        h.query_by_role_and_label(Role::TextInput, &editor)
            .is_none()
    );
    assert_eq!(hosts(&store), ["127.0.0.1:8080", "api.openai.com"]);
    store.delete(&name).unwrap();
}

#[test]
fn a_bad_name_or_a_missing_secret_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let mut h = harness(&GraphDoc::new("Empty"), &paths);
    open_credentials_from_the_menu(&mut h);
    let name = unique("ui-empty");
    type_into(&mut h, Role::TextInput, "Name", &name);
    click(&mut h, Role::Button, "Add");
    h.get_by_label("Type or paste the secret first.");
    type_into(&mut h, Role::TextInput, "Name", " has space");
    type_into(&mut h, Role::PasswordInput, "Secret", "x");
    click(&mut h, Role::Button, "Add");
    h.get_by_label_contains("is not a valid credential name: use only letters, digits");
    assert!(store(&paths).list().unwrap().is_empty());
}

const GITHUB_GRAPH: &str = r#"{"format":"agentloom.graph","version":1,"name":"gh","nodes":[
    {"id":"issues","block":"github.list_issues","config":{"repo":"octo/hello","credential":"github"}}]}"#;

#[test]
fn the_inspector_offers_the_stored_github_credentials_and_other_names() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let store = store(&paths);
    let gh = unique("ui-gh");
    let other = unique("ui-openai");
    store
        .put(
            &gh,
            &StoredSecret::ApiKey {
                provider: "github".into(),
                key: "ghp_SECRET".into(),
            },
        )
        .unwrap();
    store
        .put(
            &other,
            &StoredSecret::ApiKey {
                provider: "openai".into(),
                key: "sk-SECRET".into(),
            },
        )
        .unwrap();
    let doc = GraphDoc::from_json_str(GITHUB_GRAPH).unwrap();
    let mut h = harness(&doc, &paths);
    h.state_mut().send(Command::InspectById("issues".into()));
    h.run_steps(3);

    // `github` is not stored here: the picker says so and how a run gets it instead.
    let picker = h.get_by_role_and_label(Role::ComboBox, "Credential *");
    assert_eq!(picker.value().as_deref(), Some("github (not stored)"));
    h.get_by_label_contains("AGENTLOOM_SECRET_GITHUB");
    click(&mut h, Role::ComboBox, "Credential *");
    h.get_by_label("For other providers");
    let listed_first = h.get_by_label(&gh).rect().top();
    assert!(
        listed_first < h.get_by_label(&other).rect().top(),
        "GitHub credentials come first"
    );
    click(&mut h, Role::Button, &gh);
    let config = |h: &AppHarness| {
        h.state().document.to_doc().node("issues").unwrap().config["credential"].clone()
    };
    assert_eq!(config(&h), serde_json::json!(gh));
    assert_eq!(
        h.get_by_role_and_label(Role::ComboBox, "Credential *")
            .value()
            .as_deref(),
        Some(gh.as_str())
    );

    // "Other…" takes a name that is not stored (e.g. an environment variable in CI).
    click(&mut h, Role::ComboBox, "Credential *");
    click(&mut h, Role::Button, "Other…");
    type_into(&mut h, Role::TextInput, "Credential name", "ci");
    assert_eq!(config(&h), serde_json::json!("ci"));
    h.get_by_label_contains("AGENTLOOM_SECRET_CI");

    // "Manage credentials…" opens the manager, listing both.
    click(&mut h, Role::Button, "Manage credentials…");
    h.get_by_label("Add an API key");
    h.get_by_label_contains(&format!("Remove {gh}"));

    for name in [&gh, &other] {
        store.delete(name).unwrap();
    }
}

/// A minimal HTTP server answering every request with `body` as JSON, on a free port;
/// records each request (head and body).
fn serve_json(body: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let request = read_request(&mut stream);
            log.lock().unwrap().push(request);
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (base, seen)
}

/// Reads one HTTP/1.1 request: the head, then `content-length` bytes of body.
fn read_request(stream: &mut std::net::TcpStream) -> String {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                break;
            }
        }
    }
    String::from_utf8_lossy(&data).into_owned()
}

const TAGS: &str = r#"{"models":[{"name":"qwen2.5:0.5b","model":"qwen2.5:0.5b","size":1},{"name":"llama3.2:1b","model":"llama3.2:1b","size":2}]}"#;

fn llm_graph(config: serde_json::Value) -> GraphDoc {
    GraphDoc::from_json_str(
        &serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "llm",
            "nodes": [{"id": "chat", "block": "llm.chat", "config": config}]
        })
        .to_string(),
    )
    .unwrap()
}

#[test]
fn the_model_field_of_an_ollama_block_lists_the_installed_models() {
    let dir = tempfile::tempdir().unwrap();
    let (base, seen) = serve_json(TAGS);
    let doc = llm_graph(serde_json::json!({
        "provider": "ollama", "base_url": base, "prompt": "hi"
    }));
    let mut h = harness(&doc, &paths(dir.path()));
    h.state_mut().send(Command::InspectById("chat".into()));
    wait_until(&mut h, "the model list", |h| {
        h.query_by_role_and_label(Role::ComboBox, "Model").is_some()
    });
    assert!(
        seen.lock().unwrap()[0].starts_with("GET /api/tags HTTP/1.1\r\n"),
        "{:?}",
        seen.lock().unwrap()
    );
    click(&mut h, Role::ComboBox, "Model");
    h.get_by_label("qwen2.5:0.5b");
    click(&mut h, Role::Button, "llama3.2:1b");
    let model =
        |h: &AppHarness| h.state().document.to_doc().node("chat").unwrap().config["model"].clone();
    assert_eq!(model(&h), serde_json::json!("llama3.2:1b"));
    // A name Ollama does not list can still be typed.
    type_into(&mut h, Role::TextInput, "Model", "-custom");
    assert_eq!(model(&h), serde_json::json!("llama3.2:1b-custom"));
    // The list is cached per base URL; the refresh button asks again.
    assert_eq!(seen.lock().unwrap().len(), 1);
    click(&mut h, Role::Button, "Refresh models");
    wait_until(&mut h, "the second model list", |h| {
        h.query_by_role_and_label(Role::ComboBox, "Model").is_some()
    });
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[test]
fn without_an_answering_ollama_the_model_is_typed_with_a_short_note() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    // Ollama's OpenAI-compatible `/v1` root works too; a closed port answers nothing.
    let doc = llm_graph(serde_json::json!({
        "provider": "ollama", "base_url": closed, "prompt": "hi"
    }));
    let mut h = harness(&doc, &paths(dir.path()));
    h.state_mut().send(Command::InspectById("chat".into()));
    wait_until(&mut h, "the note", |h| {
        h.query_by_label_contains("no Ollama answers at").is_some()
    });
    assert!(h.query_by_role_and_label(Role::ComboBox, "Model").is_none());
    type_into(&mut h, Role::TextInput, "Model", "llama3.2");
    assert_eq!(
        h.state().document.to_doc().node("chat").unwrap().config["model"],
        serde_json::json!("llama3.2")
    );

    // An OpenAI block with its default URL is not asked at all.
    let doc = llm_graph(serde_json::json!({"provider": "openai", "prompt": "hi"}));
    let mut h = harness(&doc, &paths(dir.path()));
    h.state_mut().send(Command::InspectById("chat".into()));
    h.run_steps(3);
    assert!(h.query_by_label_contains("Ollama").is_none());
    h.get_by_role_and_label(Role::TextInput, "Model");
}

const COMPLETION: &str = r#"{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello from the fake"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;

#[test]
fn runs_started_in_the_app_read_the_key_from_the_keychain() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let store = store(&paths);
    let name = unique("ui-run");
    let secret = format!("sk-SECRET-{}", unique("run"));
    let (base, seen) = serve_json(COMPLETION);
    // Bound to the local server the block calls.
    let local = agentloom_core::host_of(&reqwest::Url::parse(&base).unwrap());
    store
        .put_with_hosts(
            &name,
            &StoredSecret::ApiKey {
                provider: "openai".into(),
                key: secret.clone(),
            },
            &agentloom_core::BoundHosts::parse(&[local]).unwrap(),
        )
        .unwrap();
    let doc = llm_graph(serde_json::json!({
        "provider": "openai", "base_url": base, "model": "m", "prompt": "hi",
        "stream": false, "credential": name,
    }));
    let mut h = harness(&doc, &paths);
    h.state_mut().send(Command::Run);
    h.run_steps(2);
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    let run = &h.state().run;
    assert_eq!(
        run.status,
        Some(agentloom_engine::RunStatus::Completed),
        "{:?}",
        run.error
    );
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(
        requests[0].to_ascii_lowercase().contains(&format!(
            "authorization: bearer {}",
            secret.to_ascii_lowercase()
        )),
        "the key from the keychain is sent"
    );
    // The run log holds the answer but never the key: not in the database, and not in its
    // write-ahead log, where a fresh run's rows are until a checkpoint.
    let mut files = 0;
    for suffix in ["", "-wal"] {
        let path = dir.path().join(format!("runs.sqlite3{suffix}"));
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&secret),
                "{} holds the key",
                path.display()
            );
            files += 1;
        }
    }
    assert!(files >= 1, "no run log was written");
    store.delete(&name).unwrap();
}

/// The child half of [`the_window_says_when_the_keychain_cannot_be_reached`]: run in a
/// process whose session bus address leads nowhere.
#[test]
#[ignore = "run by the_window_says_when_the_keychain_cannot_be_reached"]
fn child_without_a_keychain() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&GraphDoc::new("Empty"), &paths(dir.path()));
    open_credentials_from_the_menu(&mut h);
    let shown = h.get_by_label_contains("The keychain cannot be used");
    let message = format!("{shown:?}");
    assert!(
        message.contains("the keychain could not be reached")
            && message.contains("DBUS_SESSION_BUS_ADDRESS")
            && message.contains("AGENTLOOM_SECRET_"),
        "{message}"
    );
    assert!(
        h.get_by_role_and_label(Role::Button, "Add")
            .accesskit_node()
            .is_disabled(),
        "nothing can be added"
    );
    println!("CHILD-OK");
}

#[test]
fn the_window_says_when_the_keychain_cannot_be_reached() {
    support::run_without_a_keychain("child_without_a_keychain", &[]);
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Plays the person approving a device code on the provider's pages (another device).
fn approve_device_code(issuer: &str, verification_uri: &str, user_code: &str) {
    block_on(Browser::new(issuer).approve_device_code(verification_uri, user_code));
}

/// Signs in on the provider's pages when the app opens one, then follows the redirect to
/// the app's loopback listener, as the system browser would.
struct TestBrowser {
    issuer: String,
    opened: Arc<Mutex<Vec<String>>>,
}

impl BrowserOpener for TestBrowser {
    fn open(&self, url: &str) -> Result<(), String> {
        self.opened.lock().unwrap().push(url.to_owned());
        let (issuer, url) = (self.issuer.clone(), url.to_owned());
        std::thread::spawn(move || {
            block_on(async {
                let b = Browser::new(&issuer);
                let callback = b.sign_in(url).await;
                assert!(callback.starts_with("http://127.0.0.1:"), "{callback}");
                b.get(&callback).await;
            });
        });
        Ok(())
    }
}

/// The device code and verification address the window shows.
fn shown_device_code(h: &AppHarness) -> Option<(String, String)> {
    let texts: Vec<String> = h
        .query_all_by(|n| n.role() == Role::Label)
        .filter_map(|n| n.value())
        .collect();
    let uri = texts
        .iter()
        .find(|t| t.starts_with("http") && t.ends_with("/device"))?;
    let code = texts.iter().find(|t| {
        t.len() == 9
            && t.as_bytes()[4] == b'-'
            && t.chars().all(|c| c == '-' || c.is_ascii_uppercase())
    })?;
    Some((uri.clone(), code.clone()))
}

fn wait_long(h: &mut AppHarness, what: &str, done: impl Fn(&AppHarness) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(h) {
        if Instant::now() > deadline {
            let texts: Vec<String> = h
                .query_all_by(|n| n.role() == Role::Label)
                .filter_map(|n| n.value())
                .collect();
            panic!("timed out waiting for {what}; the window shows {texts:#?}");
        }
        h.step();
        std::thread::sleep(Duration::from_millis(50));
    }
    h.run_steps(2);
}

#[test]
fn signing_in_with_an_openid_provider_by_device_code_then_again_then_removing_revokes() {
    let Some(oidc) = Oidc::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let store = store(&paths);
    let name = unique("ui-oidc");
    let mut h = harness(&GraphDoc::new("Empty"), &paths);
    open_credentials_from_the_menu(&mut h);
    click(&mut h, Role::ComboBox, "Provider");
    click(&mut h, Role::Button, "OpenID provider (issuer URL)");
    type_into(&mut h, Role::TextInput, "Credential name", &name);
    type_into(&mut h, Role::TextInput, "Client id", "agentloom-test");
    type_into(&mut h, Role::TextInput, "Issuer URL", &oidc.issuer);
    click(
        &mut h,
        Role::CheckBox,
        "Use the device flow (type a code on any device) instead of the browser",
    );

    // A sign-in can be cancelled while it waits.
    click(&mut h, Role::Button, "Sign in");
    wait_long(&mut h, "the device code", |h| {
        shown_device_code(h).is_some()
    });
    click(&mut h, Role::Button, "Cancel");
    wait_long(&mut h, "the cancellation", |h| {
        h.query_by_label("Sign-in cancelled.").is_some()
    });
    assert!(store.info(&name).unwrap().is_none());

    // Sign in: the code shown is approved on the provider's pages, as on another device.
    click(&mut h, Role::Button, "Sign in");
    wait_long(&mut h, "the device code", |h| {
        shown_device_code(h).is_some()
    });
    let (uri, code) = shown_device_code(&h).unwrap();
    assert!(uri.starts_with(&oidc.issuer), "{uri}");
    approve_device_code(&oidc.issuer, &uri, &code);
    let signed_in = format!("Signed in; stored as credential `{name}`.");
    wait_long(&mut h, "the sign-in", |h| {
        h.query_by_label(&signed_in).is_some()
    });
    h.get_by_label("oauth");
    h.get_by_label(&oidc.issuer);
    h.get_by_label("openid offline_access");
    let StoredSecret::OAuth(first) = store.get(&name).unwrap() else {
        panic!("an OAuth credential")
    };
    assert!(first.refresh_token.is_some());
    assert!(!shown_anywhere(&h, &first.access_token));

    // Re-authorize signs in again with the stored client and replaces the tokens.
    click(&mut h, Role::Button, &format!("Re-authorize {name}"));
    wait_long(&mut h, "the second device code", |h| {
        shown_device_code(h).is_some_and(|(_, c)| c != code)
    });
    let (uri, code) = shown_device_code(&h).unwrap();
    approve_device_code(&oidc.issuer, &uri, &code);
    wait_long(&mut h, "the second sign-in", |h| {
        h.query_by_label(&signed_in).is_some() && h.query_by_label("Cancel").is_none()
    });
    let StoredSecret::OAuth(second) = store.get(&name).unwrap() else {
        panic!("an OAuth credential")
    };
    assert_ne!(second.access_token, first.access_token);

    // Removing revokes at the provider: the token stops working.
    click(&mut h, Role::Button, &format!("Remove {name}"));
    click(&mut h, Role::Button, "Confirm removal");
    let removed = format!("Revoked and removed `{name}`.");
    wait_long(&mut h, "the removal", |h| {
        h.query_by_label(&removed).is_some()
    });
    assert!(store.info(&name).unwrap().is_none());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = runtime.block_on(async {
        reqwest::Client::new()
            .get(format!("{}/me", oidc.issuer))
            .bearer_auth(&second.access_token)
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status, 401);
}

#[test]
fn signing_in_in_the_browser_goes_through_the_loopback_listener() {
    let Some(oidc) = Oidc::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let store = store(&paths);
    let name = unique("ui-code");
    let mut h = harness(&GraphDoc::new("Empty"), &paths);
    let opened = Arc::new(Mutex::new(Vec::new()));
    h.state_mut().set_browser_opener(Arc::new(TestBrowser {
        issuer: oidc.issuer.clone(),
        opened: opened.clone(),
    }));
    open_credentials_from_the_menu(&mut h);
    click(&mut h, Role::ComboBox, "Provider");
    click(&mut h, Role::Button, "OpenID provider (issuer URL)");
    type_into(&mut h, Role::TextInput, "Credential name", &name);
    type_into(&mut h, Role::TextInput, "Client id", "agentloom-test");
    type_into(&mut h, Role::TextInput, "Issuer URL", &oidc.issuer);
    click(&mut h, Role::Button, "Sign in");
    let signed_in = format!("Signed in; stored as credential `{name}`.");
    wait_long(&mut h, "the sign-in", |h| {
        h.query_by_label(&signed_in).is_some()
    });
    let opened = opened.lock().unwrap().clone();
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert!(
        opened[0].starts_with(&format!("{}/auth?", oidc.issuer))
            && opened[0].contains("code_challenge_method=S256")
            && opened[0].contains("redirect_uri=http%3A%2F%2F127.0.0.1%3A"),
        "{}",
        opened[0]
    );
    let StoredSecret::OAuth(tokens) = store.get(&name).unwrap() else {
        panic!("an OAuth credential")
    };
    assert!(tokens.refresh_token.is_some());
    assert_eq!(tokens.provider, oidc.issuer);
    h.get_by_label("oauth");
    store.delete(&name).unwrap();
}

#[test]
fn the_window_shows_the_sign_in_address_while_waiting_for_the_browser() {
    let Some(oidc) = Oidc::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let name = unique("ui-wait");
    let mut h = harness(&GraphDoc::new("Empty"), &paths);
    // A browser that never comes back: the window shows where to sign in, and cancels.
    struct Nowhere;
    impl BrowserOpener for Nowhere {
        fn open(&self, _url: &str) -> Result<(), String> {
            Err("no browser here".to_owned())
        }
    }
    h.state_mut().set_browser_opener(Arc::new(Nowhere));
    open_credentials_from_the_menu(&mut h);
    click(&mut h, Role::ComboBox, "Provider");
    click(&mut h, Role::Button, "OpenID provider (issuer URL)");
    type_into(&mut h, Role::TextInput, "Credential name", &name);
    type_into(&mut h, Role::TextInput, "Client id", "agentloom-test");
    type_into(&mut h, Role::TextInput, "Issuer URL", &oidc.issuer);
    click(&mut h, Role::Button, "Sign in");
    wait_long(&mut h, "the sign-in address", |h| {
        h.query_by_label_contains("Waiting for the browser")
            .is_some()
    });
    let auth = format!("{}/auth?", oidc.issuer);
    h.get_by_label_contains(&auth);
    click(&mut h, Role::Button, "Cancel");
    wait_long(&mut h, "the cancellation", |h| {
        h.query_by_label("Sign-in cancelled.").is_some()
    });
    assert!(h.query_by_label_contains(&auth).is_none());
    assert!(store(&paths).info(&name).unwrap().is_none());
}
