//! What the three systems' sandboxes share: the agent's choice between its machine's
//! isolation and none, that isolation found once, the limits and the refusal. Each
//! system's file defines its own `Isolation`, `detect` and `Sandbox::note`.

use std::time::Duration;

use tokio::sync::OnceCell;

use super::{Isolation, detect};

/// How long a program may run.
pub(super) const TIMEOUT: Duration = Duration::from_secs(30);
/// Memory of the program (its whole tree on Linux and Windows, each process on macOS).
pub(super) const MEMORY_BYTES: u64 = 512 * 1024 * 1024;
pub(super) const CPU_SECONDS: u64 = 20;
/// The largest file the program may write (on Windows: all it writes to files together).
pub(crate) const FILE_SIZE_BYTES: u64 = 64 * 1024 * 1024;

/// Names `bwrap` (a path) on Linux, or is empty to act as if bubblewrap were not installed;
/// other systems ignore it (settings and tests name one variable on every system).
pub const BWRAP_ENV: &str = "AGENTLOOM_BWRAP";

/// How one agent runs code: isolated (the default), or unsandboxed because its graph says so.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Sandbox<'a> {
    Isolated(&'a Isolation),
    Unsandboxed,
}

impl Sandbox<'static> {
    /// The sandbox for an agent; `unsandboxed` is the agent's `run_code_unsandboxed` setting.
    pub(crate) async fn for_agent(unsandboxed: bool) -> Self {
        if unsandboxed {
            Sandbox::Unsandboxed
        } else {
            Sandbox::Isolated(isolation().await)
        }
    }
}

/// How this machine isolates code, found once (the first call tries it for real).
pub(crate) async fn isolation() -> &'static Isolation {
    static ISOLATION: OnceCell<Isolation> = OnceCell::const_new();
    ISOLATION.get_or_init(detect).await
}

/// A folder for the probe's program, or why there is none.
pub(super) fn probe_workspace() -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix("agentloom-probe-")
        .tempdir()
        .map_err(|e| format!("no temporary folder: {e}"))
}

/// The last line the probe's program wrote to stderr: what went wrong.
pub(super) fn last_line(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .trim()
        .lines()
        .last()
        .unwrap_or("no output")
        .to_owned()
}

/// Why run_code refuses a program when this machine cannot isolate it: `why`, and what it
/// `needs`; and the explicit way out.
pub(super) fn refusal(why: &str, needs: &str) -> String {
    format!(
        "run_code refuses to run the program: it cannot be isolated on this machine ({why}). It needs {needs}; or, only for a graph you wrote yourself, set the agent's `run_code_unsandboxed` to run code with your own access to files, network and processes"
    )
}
