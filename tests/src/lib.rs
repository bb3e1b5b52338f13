//! End-to-end tests live in tests/. This library holds what several test files share:
//! starting the real peers they run against.

pub mod embeddings;
pub mod mcp;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod oidc;
mod terminal;
pub use terminal::at_a_terminal;

/// Log output captured in memory (clones share it): a tracing subscriber's writer.
#[derive(Clone, Default)]
pub struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLog {
    /// Everything written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A running `fakellm serve` (PyPI `fakellm`: OpenAI and Anthropic wire formats); stopped
/// on drop.
pub struct FakeLlm {
    child: Child,
    port: u16,
    /// Rules written for one test, kept while the peer runs.
    _rules: Option<tempfile::TempDir>,
}

impl FakeLlm {
    /// Starts the peer with the rules file `config`, relative to tests/fixtures (e.g.
    /// `agent/fakellm.yaml`), on a free port of 127.0.0.1, or returns `None` when
    /// AGENTLOOM_SKIP_PEERS=1 and it is not installed.
    ///
    /// # Panics
    /// When the peer is missing (and not skipped) or does not listen within 30 s.
    pub fn start(config: &str) -> Option<FakeLlm> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(config);
        Self::start_with_file(&path, None)
    }

    /// [`FakeLlm::start`] with rules written by the test itself (YAML text).
    ///
    /// # Panics
    /// As [`FakeLlm::start`], or when the rules cannot be written.
    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    pub fn start_with_rules(rules: &str) -> Option<FakeLlm> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fakellm.yaml");
        std::fs::write(&file, rules).unwrap();
        Self::start_with_file(&file, Some(dir))
    }

    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    fn start_with_file(config: &Path, rules: Option<tempfile::TempDir>) -> Option<FakeLlm> {
        let Some(binary) = find_on_path("fakellm") else {
            if std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1") {
                eprintln!("skipping: fakellm is not installed and AGENTLOOM_SKIP_PEERS=1");
                return None;
            }
            panic!(
                "the test peer `fakellm` is not on PATH: install it with `pip install fakellm==0.3.5`, or set AGENTLOOM_SKIP_PEERS=1 to skip the tests that need it"
            );
        };
        Self::start_on_ports(&binary, config, rules, free_port)
    }

    /// Starts fakellm on ports from `next_port` until fakellm itself answers on one. A port
    /// picked free can be taken by another test's server before fakellm binds it: then
    /// fakellm exits (its Python start-up is slow) while the other server answers, so a
    /// start counts only once fakellm's own stats endpoint answers as fakellm does.
    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    fn start_on_ports(
        binary: &Path,
        config: &Path,
        rules: Option<tempfile::TempDir>,
        mut next_port: impl FnMut() -> u16,
    ) -> Option<FakeLlm> {
        const ATTEMPTS: u32 = 5;
        let mut last_failure = String::new();
        for _ in 0..ATTEMPTS {
            let port = next_port();
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
                .arg(config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log.reopen().unwrap())
                .spawn()
                .unwrap();
            let mut fake = FakeLlm {
                child,
                port,
                _rules: None,
            };
            match fake.confirm_answering(log.path()) {
                Ok(()) => {
                    fake._rules = rules;
                    return Some(fake);
                }
                // Dropped here: the child is killed before the next port is tried.
                Err(failure) => last_failure = failure,
            }
        }
        panic!("fakellm did not start in {ATTEMPTS} attempts; the last: {last_failure}");
    }

    /// Waits (up to 30 s) until this fakellm answers its stats request on its port; `Err`
    /// when it exits first (another server holds the port) or nothing answers as fakellm.
    fn confirm_answering(&mut self, log: &Path) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let output = std::fs::read_to_string(log).unwrap_or_default();
                return Err(format!(
                    "fakellm exited ({status}) on port {}:\n{output}",
                    self.port
                ));
            }
            // Another server's answer is not fakellm's: wait until fakellm exits (seen
            // above) or, still starting, takes over nothing and the time runs out.
            if answers_as_fakellm(self.port) {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "nothing answered as fakellm on port {} within 30 s",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `http://127.0.0.1:PORT` (OpenAI clients add `/v1`).
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// How often each rule matched.
    ///
    /// # Panics
    /// When the peer does not answer.
    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
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

/// Whether the real Secret Service can be used: tests that need it run inside a private
/// D-Bus session (`scripts/test-all.sh`); elsewhere they fail, unless
/// `AGENTLOOM_SKIP_PEERS=1` says to skip them.
///
/// # Panics
/// Without a D-Bus session, unless peers are skipped.
pub fn keychain_available() -> bool {
    if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some() {
        return true;
    }
    assert!(
        std::env::var("AGENTLOOM_SKIP_PEERS").is_ok_and(|v| v == "1"),
        "no D-Bus session: run the tests with scripts/test-all.sh (gnome-keyring in dbus-run-session), or set AGENTLOOM_SKIP_PEERS=1"
    );
    false
}

/// Runs `command` with `stdin` written to its standard input, and collects its output.
///
/// # Panics
/// When the program cannot be started.
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
pub fn output_with_stdin(command: &mut std::process::Command, stdin: &str) -> std::process::Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A program that exits without reading its input closes the pipe: not a failure here.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// A port of 127.0.0.1 that was free a moment ago.
///
/// # Panics
/// When no port can be had.
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether what answers `GET /_fakellm/stats` on `port` of 127.0.0.1 is fakellm: a 200
/// with its request counts (`total_requests`, `by_rule`), within 2 s.
fn answers_as_fakellm(port: u16) -> bool {
    local_get(port, "/_fakellm/stats").is_some_and(|(head, body)| {
        head.starts_with("HTTP/1.1 200")
            && serde_json::from_str::<serde_json::Value>(&body).is_ok_and(|stats| {
                stats.get("total_requests").is_some() && stats.get("by_rule").is_some()
            })
    })
}

/// `GET path` on 127.0.0.1:`port`, bounded in time and size: the answer's head and body,
/// `None` when nothing answers over HTTP. Tells a test's own peer from whatever else took
/// its port.
pub(crate) fn local_get(port: u16, path: &str) -> Option<(String, String)> {
    use std::io::{Read as _, Write as _};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let limit = Some(Duration::from_secs(2));
    stream.set_read_timeout(limit).ok()?;
    stream.set_write_timeout(limit).ok()?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    // Bounded: the answers looked for are small, whatever else answers may not be.
    let _ = stream.take(64 * 1024).read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n")?;
    Some((head.to_owned(), body.to_owned()))
}

/// Sends SIGINT to process `pid`, as Ctrl-C in its terminal would.
///
/// # Panics
/// When the signal cannot be sent.
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
pub fn interrupt(pid: u32) {
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "cannot send SIGINT to {pid}");
}

/// The first `name` on PATH.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Waits until `child` (the peer `name`, logging to `log`) listens on `port` of 127.0.0.1.
///
/// # Panics
/// When the peer exits first (with its log) or does not listen within 30 s.
pub fn wait_until_listening(child: &mut Child, port: u16, log: &Path, name: &str) {
    let started = Instant::now();
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let output = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{name} exited ({status}) before it listened:\n{output}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name} did not listen on port {port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads one HTTP/1.1 request from `reader`: its head (request line and headers, each
/// line with its CRLF) and its body (`Content-Length` bytes; shorter when the peer hangs up).
pub fn read_http_request(reader: &mut impl std::io::BufRead) -> (String, Vec<u8>) {
    let mut head = String::new();
    let mut length = 0u64;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
    }
    let mut body = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::Read::take(reader, length), &mut body);
    (head, body)
}

/// An HTTP server on 127.0.0.1 that answers every request `200 ok` and counts the POSTs:
/// how a test proves a side effect happened exactly once.
pub struct PostCounter {
    pub port: u16,
    posts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl PostCounter {
    /// # Panics
    /// When no port of 127.0.0.1 can be had.
    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    pub fn start() -> PostCounter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let posts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&posts);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let counted = std::sync::Arc::clone(&counted);
                std::thread::spawn(move || answer_counting_posts(stream, &counted));
            }
        });
        PostCounter { port, posts }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn posts(&self) -> usize {
        self.posts.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn answer_counting_posts(stream: TcpStream, posts: &std::sync::atomic::AtomicUsize) {
    use std::io::Write as _;
    let mut reader = std::io::BufReader::new(stream);
    let (head, _) = read_http_request(&mut reader);
    if head.starts_with("POST ") {
        posts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    let mut stream = reader.into_inner();
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::io::{BufReader, Write as _};
    use std::net::TcpListener;
    use std::path::Path;

    use super::{FakeLlm, answers_as_fakellm, find_on_path, free_port, read_http_request};

    /// Another server holds the first port handed to fakellm (as when a test's server takes
    /// a port between its pick and fakellm's bind): the start goes on to a port where
    /// fakellm itself answers, never to the other server.
    #[test]
    fn fakellm_starts_where_it_answers_itself_not_where_another_server_took_its_port() {
        let Some(binary) = find_on_path("fakellm") else {
            assert_eq!(
                std::env::var("AGENTLOOM_SKIP_PEERS").as_deref(),
                Ok("1"),
                "fakellm is not installed: pip install fakellm==0.3.5"
            );
            return;
        };
        let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = squatter.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in squatter.incoming().flatten() {
                let mut reader = BufReader::new(&stream);
                let _ = read_http_request(&mut reader);
                let _ = (&stream).write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                );
            }
        });
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/serve/fakellm.yaml");
        let mut ports = [taken].into_iter();
        let fake = FakeLlm::start_on_ports(&binary, &config, None, || {
            ports.next().unwrap_or_else(free_port)
        })
        .unwrap();
        assert_ne!(
            fake.port(),
            taken,
            "handed out the port another server holds"
        );
        assert!(answers_as_fakellm(fake.port()));
        assert!(!answers_as_fakellm(taken));
    }
}
