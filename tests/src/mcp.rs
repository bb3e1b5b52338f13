//! The official MCP reference server, `@modelcontextprotocol/server-everything` (npm,
//! installed in tests/peers/mcp), over stdio or streamable HTTP.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The server's launcher, or `None` (skip) when it is not installed and
/// AGENTLOOM_SKIP_PEERS=1.
///
/// # Panics
/// When it is not installed and the peers are not skipped.
pub fn server_everything() -> Option<PathBuf> {
    let launcher = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("peers/mcp/node_modules/.bin/mcp-server-everything");
    if launcher.is_file() {
        return Some(launcher);
    }
    if std::env::var("AGENTLOOM_SKIP_PEERS").as_deref() == Ok("1") {
        eprintln!("skipping: server-everything is not installed and AGENTLOOM_SKIP_PEERS=1");
        return None;
    }
    panic!(
        "the MCP test peer is missing: run `(cd tests/peers/mcp && npm install)` (scripts/test-all.sh does it), or set AGENTLOOM_SKIP_PEERS=1"
    );
}

/// server-everything in streamable-HTTP mode on a free port of 127.0.0.1; stopped on drop.
pub struct EverythingHttp {
    child: Child,
    port: u16,
    log: tempfile::NamedTempFile,
}

impl EverythingHttp {
    /// Starts the server, or returns `None` as [`server_everything`] does.
    ///
    /// # Panics
    /// When it cannot start or does not listen within 30 s.
    #[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
    pub fn start() -> Option<EverythingHttp> {
        let launcher = server_everything()?;
        let port = crate::free_port();
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(launcher)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let mut server = EverythingHttp { child, port, log };
        crate::wait_until_listening(
            &mut server.child,
            port,
            server.log.path(),
            "server-everything",
        );
        Some(server)
    }

    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Stops the server now (a server that goes away while a graph uses it).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for EverythingHttp {
    fn drop(&mut self) {
        self.stop();
    }
}
