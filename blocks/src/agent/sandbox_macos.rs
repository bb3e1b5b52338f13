//! Where run_code's Python program runs on macOS: under Seatbelt (`sandbox-exec` with a
//! profile made for the call), the mirror of the Windows AppContainer.
//!
//! - The profile denies everything it does not allow: no network of any kind, no Mach
//!   look-ups (so neither the keychain nor the security services can be reached), no new
//!   processes (nothing could end one that outlived the call), reads only of the workspace,
//!   the Python installation and the system's libraries, writes only to the workspace and a
//!   private temporary folder.
//! - Resource limits (memory, CPU time, file size, open files) are set inside, before the
//!   program runs.
//!
//! Where `sandbox-exec` is missing or refuses the profile, run_code refuses and says what is
//! missing; running unsandboxed is an explicit setting of the agent (`run_code_unsandboxed`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use super::bounded_output::{OutputLimits, ProgramOutput, run_to_end, size_in_words};
use crate::{confined, workspace_path};

#[path = "sandbox_common.rs"]
mod common;
pub use common::BWRAP_ENV;
#[allow(
    unused_imports,
    reason = "the sandbox's tests read FILE_SIZE_BYTES, as on Linux"
)]
pub(crate) use common::FILE_SIZE_BYTES;
use common::{CPU_SECONDS, MEMORY_BYTES};
#[allow(
    unused_imports,
    reason = "the tools' tests reach it as sandbox::isolation, as on Linux"
)]
pub(crate) use common::{Sandbox, isolation};
use common::{TIMEOUT, last_line, probe_workspace, refusal};
const OPEN_FILES: u64 = 256;

/// Seatbelt's command line tool, part of every macOS.
const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// How run_code's program is isolated on this machine.
#[derive(Clone, Debug)]
pub(crate) enum Isolation {
    /// `sandbox-exec` at this path.
    Seatbelt(PathBuf),
    /// Seatbelt cannot be used here: why.
    Unavailable(String),
}

impl Sandbox<'_> {
    /// What the model is told about where its code runs.
    pub(crate) fn note(self) -> &'static str {
        match self {
            Sandbox::Isolated(Isolation::Seatbelt(_)) => {
                "The program runs in a sandbox: no network, only the workspace and $TMPDIR writable, system libraries readable, and it cannot start other processes."
            }
            Sandbox::Isolated(Isolation::Unavailable(_)) => {
                "No sandbox is available on this machine: calls are refused with what is missing."
            }
            Sandbox::Unsandboxed => {
                "The program is NOT sandboxed: it has the network and the user's files."
            }
        }
    }
}

async fn detect() -> Isolation {
    let program = PathBuf::from(SANDBOX_EXEC);
    if !program.is_file() {
        return Isolation::Unavailable(format!("{SANDBOX_EXEC} is missing"));
    }
    let workspace = match probe_workspace() {
        Ok(dir) => dir,
        Err(why) => return Isolation::Unavailable(why),
    };
    let isolation = Isolation::Seatbelt(program);
    let probe = run_python(
        "print('ready')",
        workspace.path(),
        Sandbox::Isolated(&isolation),
        OutputLimits::default(),
    )
    .await;
    let why = match probe {
        Ok(output) if output.status.success() && output.stdout.kept.starts_with(b"ready") => {
            return isolation;
        }
        Ok(output) => format!(
            "Python does not start under sandbox-exec: {}",
            last_line(&output.stderr.kept)
        ),
        Err(why) => why,
    };
    tracing::warn!(%why, "run_code has no sandbox");
    Isolation::Unavailable(why)
}

/// Finds `name` on PATH.
pub(super) fn find_program(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// `python3` on PATH (Homebrew's, python.org's or Apple's), its links resolved so that the
/// profile can name the installation it lives in.
fn python() -> Option<&'static Path> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            find_program("python3")
                .or_else(|| Some(PathBuf::from("/usr/bin/python3")).filter(|p| p.is_file()))
                .and_then(|p| p.canonicalize().ok())
        })
        .as_deref()
}

/// The folder holding the Python installation: `…/Frameworks/Python.framework/Versions/3.x`
/// or `…/Cellar/python@3.x/3.x.y` for `…/bin/python3.x`.
fn python_home(python: &Path) -> Option<&Path> {
    python.parent()?.parent()
}

/// The Seatbelt profile: everything denied but what a Python program needs to run on the
/// workspace. Paths come in as parameters (`-D NAME=path`), never spliced into the text.
const PROFILE: &str = r#"(version 1)
(deny default)
(allow process-exec (literal (param "PYTHON")))
(allow file-read*
    (subpath (param "WORKSPACE"))
    (subpath (param "TMP"))
    (subpath (param "PYTHON_HOME"))
    (subpath "/usr/lib")
    (subpath "/usr/share")
    (subpath "/System/Library")
    (subpath "/Library/Frameworks/Python.framework")
    (subpath "/private/var/db/dyld")
    (subpath "/private/var/db/timezone")
    (literal "/dev/null")
    (literal "/dev/random")
    (literal "/dev/urandom")
    (literal "/private/etc/localtime"))
;; Python resolves its paths folder by folder: names and sizes may be looked up, not read.
(allow file-read-metadata)
(allow file-write*
    (subpath (param "WORKSPACE"))
    (subpath (param "TMP"))
    (literal "/dev/null"))
(allow sysctl-read)
(allow signal (target self))
(deny network*)
;; No Mach service at all: neither the keychain (com.apple.SecurityServer, securityd) nor
;; any other is reachable.
(deny mach-lookup)
(deny process-fork)
"#;

/// Sets the resource limits from inside Python, then runs the program read from stdin.
/// macOS refuses some limits (RLIMIT_AS): those are left as they are and the rest still set.
const PYTHON_LAUNCHER: &str = r#"import resource, sys
limits = [int(v) for v in sys.argv[1:5]]
for name, value in zip(('RLIMIT_AS', 'RLIMIT_CPU', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE'), limits):
    try:
        resource.setrlimit(getattr(resource, name), (value, value))
    except (ValueError, OSError):
        pass
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
source = sys.stdin.read()
sys.argv = ['program.py']
exec(compile(source, 'program.py', 'exec'), {'__name__': '__main__'})
"#;

/// Runs `code` with python3 in `workspace` under `sandbox`, keeping no more of its output
/// than `output` says; how it ended, or why it could not run.
pub(crate) async fn run_python(
    code: &str,
    workspace: &Path,
    sandbox: Sandbox<'_>,
    output: OutputLimits,
) -> Result<ProgramOutput, String> {
    let sandbox_exec = match sandbox {
        Sandbox::Isolated(Isolation::Unavailable(why)) => {
            return Err(refusal(
                why,
                "macOS's /usr/bin/sandbox-exec and python3 from Homebrew or python.org",
            ));
        }
        Sandbox::Isolated(Isolation::Seatbelt(program)) => Some(program),
        Sandbox::Unsandboxed => None,
    };
    confined::refuse_broad_workspace(workspace)?;
    let python = python().ok_or("python3 is not installed on this machine")?;
    let workspace = workspace.canonicalize().map_err(|e| {
        format!(
            "the workspace cannot be opened: {}",
            workspace_path::io_reason(&e)
        )
    })?;
    let tmp = tempfile::Builder::new()
        .prefix("agentloom-code-")
        .tempdir()
        .map_err(|e| format!("no temporary folder for the program: {e}"))?;
    // /var/folders/… is /private/var/folders/…: the profile matches resolved paths.
    let tmp_path = tmp
        .path()
        .canonicalize()
        .map_err(|e| format!("no temporary folder for the program: {e}"))?;
    let mut command = match sandbox_exec {
        Some(program) => {
            let home = python_home(python).ok_or("python3's installation has no folder")?;
            let mut command = tokio::process::Command::new(program);
            command
                .arg("-p")
                .arg(PROFILE)
                .arg("-D")
                .arg(param("WORKSPACE", &workspace))
                .arg("-D")
                .arg(param("TMP", &tmp_path))
                .arg("-D")
                .arg(param("PYTHON", python))
                .arg("-D")
                .arg(param("PYTHON_HOME", home))
                .arg(python);
            command
        }
        None => tokio::process::Command::new(python),
    };
    let limits = [MEMORY_BYTES, CPU_SECONDS, FILE_SIZE_BYTES, OPEN_FILES].map(|l| l.to_string());
    command
        .args(["-c", PYTHON_LAUNCHER])
        .args(&limits)
        .current_dir(&workspace)
        // A clean environment: no credential reaches the program.
        .env_clear()
        .env("PATH", "/usr/local/bin:/opt/homebrew/bin:/usr/bin:/bin")
        .env("HOME", &workspace)
        .env("TMPDIR", &tmp_path)
        .env("LANG", "en_US.UTF-8")
        .env("PYTHONIOENCODING", "utf-8")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: no new process can start in the sandbox, but unsandboxed code's
        // helpers are stopped with it.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| match sandbox_exec {
        Some(program) => format!("{} could not be started: {e}", program.display()),
        None => format!("python3 could not be started: {e}"),
    })?;
    let group = child.id().and_then(|id| i32::try_from(id).ok());
    let kill_group = || {
        if let Some(group) = group {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(group),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    };
    let said = format!(
        "memory {} (each process, where macOS allows), processes: none may start (seatbelt), cpu {CPU_SECONDS} s, files {} each, {}",
        size_in_words(MEMORY_BYTES),
        size_in_words(FILE_SIZE_BYTES),
        output.describe()
    );
    let result = run_to_end(&mut child, code, output, TIMEOUT, kill_group, said).await;
    // Unsandboxed code's helpers end with it too.
    kill_group();
    result
}

/// `NAME=path` for `sandbox-exec -D`.
fn param(name: &str, path: &Path) -> std::ffi::OsString {
    let mut param = std::ffi::OsString::from(format!("{name}="));
    param.push(path);
    param
}
