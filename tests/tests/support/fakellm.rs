//! The `fakellm` peer (PyPI `fakellm`: OpenAI and Anthropic wire formats), started on a
//! free port of 127.0.0.1 with a rules file from tests/fixtures, stopped on drop. Also
//! used by the CLI tests of the `agentloom` crate.
#![allow(dead_code, reason = "each test binary uses a part")]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `fakellm serve`; stopped on drop.
pub struct FakeLlm {
    child: Child,
    port: u16,
}

impl FakeLlm {
    /// Starts the peer, or returns `None` when AGENTLOOM_SKIP_PEERS=1 and it is not installed.
    /// `config` is relative to tests/fixtures.
    pub fn start(config: &str) -> Option<FakeLlm> {
        let Some(binary) = find_on_path("fakellm") else {
            if std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1") {
                eprintln!("skipping: fakellm is not installed and AGENTLOOM_SKIP_PEERS=1");
                return None;
            }
            panic!(
                "the test peer `fakellm` is not on PATH: install it with `pip install fakellm==0.3.5`, or set AGENTLOOM_SKIP_PEERS=1 to skip the tests that need it"
            );
        };
        // From the workspace root, so that other crates' tests can use it too.
        let config = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(config);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(binary)
            .args([
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--config",
            ])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let mut fake = FakeLlm { child, port };
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(fake);
            }
            if let Ok(Some(status)) = fake.child.try_wait() {
                let stderr = std::fs::read_to_string(log.path()).unwrap_or_default();
                panic!("fakellm exited ({status}) before it listened:\n{stderr}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "fakellm did not listen on port {port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How often each rule matched.
    pub async fn rule_counts(&self) -> serde_json::Value {
        let stats: serde_json::Value = reqwest::get(format!("{}/_fakellm/stats", self.base()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        stats["by_rule"].clone()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
