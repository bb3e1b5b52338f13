//! The canary: a known secret stored in the real keychain is used by a graph run
//! (github.list_issues against myworld, through the executor with KeychainSecrets and the
//! SQLite run log), and must appear nowhere: not in the exported graph, not in the run
//! database (main file and WAL), not in the captured logs at TRACE level.
//!
//! Peers: a D-Bus session with an unlocked gnome-keyring, and `myworld` on PATH. Missing
//! peers fail the test unless AGENTLOOM_SKIP_PEERS=1.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agentloom_blocks::Registry;
use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc, ValueMap, validate};
use agentloom_engine::{
    CredentialStore, Executor, KeychainSecrets, RunOptions, RunStatus, RunStore, StoredSecret,
};
use agentloom_tests::CapturedLog;

fn skip() -> bool {
    std::env::var("AGENTLOOM_SKIP_PEERS").is_ok_and(|v| v == "1")
}

struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_secret_never_reaches_the_export_the_run_log_or_the_logs() {
    let logs = CapturedLog::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();

    let dir = tempfile::tempdir().unwrap();
    let store = CredentialStore::open(dir.path());
    if let Err(e) = store.check_available() {
        assert!(
            skip(),
            "the Secret Service is not usable: {e}. Run inside `dbus-run-session` with `gnome-keyring-daemon --unlock --components=secrets`, or set AGENTLOOM_SKIP_PEERS=1"
        );
        return;
    }
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
        Ok(c) => Peer(c),
        Err(e) => {
            assert!(
                skip(),
                "`myworld` could not be started ({e}): pip install 'myworld[gateway]', or set AGENTLOOM_SKIP_PEERS=1"
            );
            return;
        }
    };
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let spec = serde_json::json!({"id": "e1", "spec": {"name": "t", "servers": {"github": {"service": "github"}}}});
    let mut token = None;
    for _ in 0..100 {
        if let Ok(r) = http.post(format!("{base}/envs")).json(&spec).send().await {
            let json: serde_json::Value = r.json().await.unwrap();
            token = json["credentials"]["agent"]["github_token"]
                .as_str()
                .map(str::to_owned);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let canary = token.expect("myworld gave a GitHub token");
    let name = format!("canary-{}", std::process::id());
    // Bound to the peer, where the block sends it.
    let peer = agentloom_core::host_of(&reqwest::Url::parse(&base).unwrap());
    store
        .put_with_hosts(
            &name,
            &StoredSecret::ApiKey {
                provider: "github".into(),
                key: canary.clone(),
            },
            &agentloom_core::BoundHosts::parse(&[peer]).unwrap(),
        )
        .unwrap();
    let store = Arc::new(store);

    let mut doc = GraphDoc::new("canary");
    let gh = |repo: &str| serde_json::json!({"base_url": format!("{base}/gw/api.github.com"), "credential": name, "repo": repo});
    doc.nodes = vec![
        NodeDoc::new("list", "github.list_issues").with_config(gh("acme/api")),
        NodeDoc::new("out", "graph.output").with_config(serde_json::json!({"name": "issues"})),
    ];
    doc.edges = vec![EdgeDoc::new("list", "issues", "out", "value")];
    let registry = Arc::new(Registry::builtin());
    let db = dir.path().join("runs.sqlite");
    let run_store = RunStore::open(&db).unwrap();
    let executor = Executor::new(registry.clone())
        .with_secrets(Arc::new(
            KeychainSecrets::new(store.clone()).keychain_only(),
        ))
        .with_workspace(dir.path().to_path_buf());

    // One run that succeeds, one that fails (unknown repository) with the token on the wire.
    let mut failing = doc.clone();
    failing.nodes[0].config = gh("acme/no-such-repo").as_object().unwrap().clone().into();
    for (graph, expected) in [(&doc, RunStatus::Completed), (&failing, RunStatus::Failed)] {
        let valid = validate(graph, registry.as_ref())
            .map_err(|p| format!("{p:?}"))
            .unwrap();
        let recorder = Arc::new(run_store.recorder(graph).unwrap());
        let report = executor
            .run(
                Arc::new(valid),
                ValueMap::new(),
                RunOptions::default(),
                recorder.clone(),
            )
            .await;
        recorder.finish().unwrap();
        assert_eq!(report.status, expected, "{:?}", report.error);
        if expected == RunStatus::Completed {
            assert!(
                !report.outputs["issues"]
                    .to_json()
                    .as_array()
                    .unwrap()
                    .is_empty()
            );
        }
    }

    let export = doc.to_json_string();
    assert!(
        export.contains(&name),
        "the graph refers to the credential by name"
    );
    assert!(
        !export.contains(&canary),
        "the secret leaked into the exported graph"
    );
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", db.display());
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !contains(&bytes, canary.as_bytes()),
                "the secret leaked into {path}"
            );
        }
    }
    let captured = logs.bytes();
    assert!(!captured.is_empty(), "logs were captured");
    assert!(
        !contains(&captured, canary.as_bytes()),
        "the secret leaked into the logs"
    );
    let index = std::fs::read(store.index_path()).unwrap();
    assert!(
        !contains(&index, canary.as_bytes()),
        "the secret leaked into the credentials index"
    );
    store.delete(&name).unwrap();
    drop(child);
}
