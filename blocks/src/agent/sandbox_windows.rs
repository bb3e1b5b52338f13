//! Where run_code's Python program runs on Windows: an AppContainer inside a Job Object.
//!
//! - The AppContainer is made for the call and has no capability: no network (not even
//!   loopback), no access to the user's files, registry or named objects beyond what every
//!   app container may read (the system folders). The workspace and a private temporary
//!   folder are granted to the container's SID for the call and taken back after it; the
//!   Python installation is made readable to app containers once (as Program Files is).
//! - The Job Object limits each process's memory, the number of processes and the CPU time
//!   of them all, takes the clipboard and desktop away, and kills every process of the
//!   program when the call ends (kill-on-close). A program that writes more than
//!   [`FILE_SIZE_BYTES`] in all is stopped.
//!
//! Where app containers cannot be made (Windows before 8, a policy that forbids them),
//! run_code refuses and says what is missing; running unsandboxed is an explicit setting of
//! the agent (`run_code_unsandboxed`).

#![allow(
    unsafe_code,
    reason = "AppContainers and process creation with security capabilities are Win32 calls"
)]

use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::windows::ffi::OsStrExt as _;
use std::os::windows::io::{AsRawHandle as _, FromRawHandle as _, OwnedHandle, RawHandle};
use std::os::windows::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{
    ERROR_ALREADY_EXISTS, HANDLE, HANDLE_FLAG_INHERIT, LocalFree, SetHandleInformation,
    WAIT_OBJECT_0,
};
use windows_sys::Win32::Security::Authorization::{
    EXPLICIT_ACCESS_W, GRANT_ACCESS, GetNamedSecurityInfoW, NO_MULTIPLE_TRUSTEE, REVOKE_ACCESS,
    SE_FILE_OBJECT, SetEntriesInAclW, SetNamedSecurityInfoW, TRUSTEE_IS_SID,
    TRUSTEE_IS_WELL_KNOWN_GROUP, TRUSTEE_W,
};
use windows_sys::Win32::Security::Isolation::{
    CreateAppContainerProfile, DeleteAppContainerProfile, DeriveAppContainerSidFromAppContainerName,
};
use windows_sys::Win32::Security::{
    ACL, AllocateAndInitializeSid, DACL_SECURITY_INFORMATION, FreeSid, PSECURITY_DESCRIPTOR, PSID,
    SECURITY_CAPABILITIES, SUB_CONTAINERS_AND_OBJECTS_INHERIT,
};
use windows_sys::Win32::Storage::FileSystem::{
    FILE_ALL_ACCESS, FILE_GENERIC_EXECUTE, FILE_GENERIC_READ,
};
use windows_sys::Win32::System::Threading::{
    CREATE_NO_WINDOW, CREATE_SUSPENDED, CREATE_UNICODE_ENVIRONMENT, CreateProcessW,
    DeleteProcThreadAttributeList, EXTENDED_STARTUPINFO_PRESENT, GetExitCodeProcess,
    InitializeProcThreadAttributeList, LPPROC_THREAD_ATTRIBUTE_LIST,
    PROC_THREAD_ATTRIBUTE_HANDLE_LIST, PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES,
    PROCESS_INFORMATION, ResumeThread, STARTF_USESTDHANDLES, STARTUPINFOEXW, TerminateProcess,
    UpdateProcThreadAttribute, WaitForSingleObject,
};

use super::bounded_output::{Captured, OutputLimits, ProgramOutput, run_to_end, size_in_words};
use crate::windows_job::{Job, Limits};
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
/// Processes alive at once in the program's job.
const PROCESSES: u32 = 128;

/// How run_code's program is isolated on this machine.
#[derive(Clone, Debug)]
pub(crate) enum Isolation {
    AppContainer,
    /// App containers cannot be made here: why.
    Unavailable(String),
}

impl Sandbox<'_> {
    /// What the model is told about where its code runs.
    pub(crate) fn note(self) -> &'static str {
        match self {
            Sandbox::Isolated(Isolation::AppContainer) => {
                "The program runs in a sandbox: no network, only the workspace and %TEMP% writable, system folders readable, nothing else of the user's files visible."
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
    let workspace = match probe_workspace() {
        Ok(dir) => dir,
        Err(why) => return Isolation::Unavailable(why),
    };
    let probe = run_python(
        "print('ready')",
        workspace.path(),
        Sandbox::Isolated(&Isolation::AppContainer),
        OutputLimits::default(),
    )
    .await;
    let why = match probe {
        Ok(output) if output.status.success() && output.stdout.kept.starts_with(b"ready") => {
            return Isolation::AppContainer;
        }
        Ok(output) => format!(
            "Python does not start in an AppContainer: {}",
            last_line(&output.stderr.kept)
        ),
        Err(why) => why,
    };
    tracing::warn!(%why, "run_code has no sandbox");
    Isolation::Unavailable(why)
}

/// `python.exe` on PATH, not the Microsoft Store's alias (an app of its own, which cannot
/// start inside another app container).
fn windows_python() -> Option<&'static Path> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .filter(|dir| !dir.to_string_lossy().contains("WindowsApps"))
                .flat_map(|dir| [dir.join("python.exe"), dir.join("python3.exe")])
                .find(|candidate| candidate.is_file())
        })
        .as_deref()
}

/// Reads the program from stdin and runs it as `program.py` (limits come from the job).
const PYTHON_LAUNCHER: &str = r#"import sys
source = sys.stdin.read()
sys.argv = ['program.py']
exec(compile(source, 'program.py', 'exec'), {'__name__': '__main__'})
"#;

/// Runs `code` with Python in `workspace` under `sandbox`, keeping no more of its output
/// than `output` says; how it ended, or why it could not run.
pub(crate) async fn run_python(
    code: &str,
    workspace: &Path,
    sandbox: Sandbox<'_>,
    output: OutputLimits,
) -> Result<ProgramOutput, String> {
    let isolated = match sandbox {
        Sandbox::Isolated(Isolation::Unavailable(why)) => {
            return Err(refusal(
                why,
                "Windows 10 or later with AppContainers allowed, and Python from python.org (not the Microsoft Store alias)",
            ));
        }
        Sandbox::Isolated(Isolation::AppContainer) => true,
        Sandbox::Unsandboxed => false,
    };
    confined::refuse_broad_workspace(workspace)?;
    let python = windows_python()
        .ok_or("Python is not installed on this machine (python.exe on PATH, from python.org)")?;
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
    let launcher = tmp.path().join("launcher.py");
    std::fs::write(&launcher, PYTHON_LAUNCHER)
        .map_err(|e| format!("no temporary folder for the program: {e}"))?;
    let call = Call {
        python: python.to_owned(),
        launcher,
        code: code.to_owned(),
        workspace,
        output_limits: output,
    };
    if !isolated {
        return run_unsandboxed(&call, tmp.path()).await;
    }
    tokio::task::spawn_blocking(move || run_in_app_container(&call, tmp.path()))
        .await
        .map_err(|e| format!("the sandboxed program could not be waited for: {e}"))?
}

/// One run of a program: what runs, where, and how much of its output is kept.
struct Call {
    python: PathBuf,
    launcher: PathBuf,
    code: String,
    workspace: PathBuf,
    output_limits: OutputLimits,
}

/// The environment every program gets: nothing of the user's but what Python needs to start.
fn environment(python: &Path, workspace: &Path, tmp: &Path) -> Vec<(OsString, OsString)> {
    let system_root = std::env::var_os("SystemRoot").unwrap_or_else(|| "C:\\Windows".into());
    let mut path = python.parent().map(OsString::from).unwrap_or_default();
    path.push(";");
    path.push(Path::new(&system_root).join("System32"));
    [
        ("PATH", path),
        ("SystemRoot", system_root),
        ("USERPROFILE", workspace.into()),
        ("HOME", workspace.into()),
        ("TEMP", tmp.into()),
        ("TMP", tmp.into()),
        ("PYTHONIOENCODING", "utf-8".into()),
        ("PYTHONDONTWRITEBYTECODE", "1".into()),
    ]
    .into_iter()
    .map(|(name, value)| (OsString::from(name), value))
    .collect()
}

async fn run_unsandboxed(call: &Call, tmp: &Path) -> Result<ProgramOutput, String> {
    // The program's processes die together when the call ends, as in the sandbox.
    let job =
        Job::new(None).map_err(|e| format!("the program's Job Object cannot be made: {e}"))?;
    let mut command = tokio::process::Command::new(&call.python);
    command
        .arg("-X")
        .arg("utf8")
        .arg(&call.launcher)
        .current_dir(&call.workspace)
        // A clean environment: no credential reaches the program.
        .env_clear()
        .envs(environment(&call.python, &call.workspace, tmp))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .creation_flags(CREATE_NO_WINDOW)
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|e| format!("python could not be started: {e}"))?;
    if let Some(process) = child.raw_handle() {
        job.assign(process)
            .map_err(|e| format!("the program cannot be put in its Job Object: {e}"))?;
    }
    let output = run_to_end(
        &mut child,
        &call.code,
        call.output_limits,
        TIMEOUT,
        || job.terminate(),
        format!("no limits (unsandboxed), {}", call.output_limits.describe()),
    )
    .await;
    // Whatever the program started ends with it.
    job.terminate();
    output
}

fn timed_out() -> String {
    format!(
        "the program ran longer than {} s and was stopped",
        TIMEOUT.as_secs()
    )
}

/// Why the sandbox stopped a program that wrote too much output.
fn overflowed(stop_after_bytes: u64) -> String {
    format!(
        "it wrote more than {} of output",
        size_in_words(stop_after_bytes)
    )
}

/// A NUL-terminated UTF-16 string.
fn wide(text: &OsStr) -> Vec<u16> {
    text.encode_wide().chain(std::iter::once(0)).collect()
}

/// An AppContainer made for one call, deleted when dropped.
struct AppContainer {
    name: Vec<u16>,
    sid: PSID,
}

impl AppContainer {
    fn create() -> Result<AppContainer, String> {
        static CALLS: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "Agentloom.RunCode.{}.{}",
            std::process::id(),
            CALLS.fetch_add(1, Ordering::Relaxed)
        );
        let name = wide(OsStr::new(&name));
        let display = wide(OsStr::new("Agentloom run_code"));
        let mut sid: PSID = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings; no capabilities (a null list of length 0).
        let hr = unsafe {
            CreateAppContainerProfile(
                name.as_ptr(),
                display.as_ptr(),
                display.as_ptr(),
                std::ptr::null(),
                0,
                &raw mut sid,
            )
        };
        // HRESULT_FROM_WIN32(ERROR_ALREADY_EXISTS): left over by a process that died.
        let already_exists = (0x8007_0000_u32 | ERROR_ALREADY_EXISTS) as i32;
        if hr == already_exists {
            // SAFETY: as above; the SID is allocated by the call.
            let hr =
                unsafe { DeriveAppContainerSidFromAppContainerName(name.as_ptr(), &raw mut sid) };
            if hr < 0 {
                return Err(format!(
                    "the AppContainer's SID cannot be found (HRESULT {hr:#x})"
                ));
            }
        } else if hr < 0 {
            return Err(format!(
                "an AppContainer cannot be made here (HRESULT {hr:#x}): Windows 8 or later is needed, and no policy may forbid app containers"
            ));
        }
        Ok(AppContainer { name, sid })
    }
}

impl Drop for AppContainer {
    fn drop(&mut self) {
        // SAFETY: the profile was made by this value and the SID allocated for it.
        unsafe {
            DeleteAppContainerProfile(self.name.as_ptr());
            FreeSid(self.sid);
        }
    }
}

/// Gives `sid` `access` to the folder `path` and all below it; `revoke` takes every access of
/// `sid` away again.
fn change_access(path: &Path, sid: PSID, access: u32, revoke: bool) -> Result<(), String> {
    let fail = |what: &str, code: u32| {
        format!(
            "the sandbox cannot {what} {}: {}",
            path.display(),
            std::io::Error::from_raw_os_error(code as i32)
        )
    };
    let wide_path = wide(path.as_os_str());
    let mut old: *mut ACL = std::ptr::null_mut();
    let mut descriptor: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: the path is NUL-terminated; the descriptor is freed below.
    let rc = unsafe {
        GetNamedSecurityInfoW(
            wide_path.as_ptr(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &raw mut old,
            std::ptr::null_mut(),
            &raw mut descriptor,
        )
    };
    if rc != 0 {
        return Err(fail("read the permissions of", rc));
    }
    let entry = EXPLICIT_ACCESS_W {
        grfAccessPermissions: access,
        grfAccessMode: if revoke { REVOKE_ACCESS } else { GRANT_ACCESS },
        grfInheritance: SUB_CONTAINERS_AND_OBJECTS_INHERIT,
        Trustee: TRUSTEE_W {
            pMultipleTrustee: std::ptr::null_mut(),
            MultipleTrusteeOperation: NO_MULTIPLE_TRUSTEE,
            TrusteeForm: TRUSTEE_IS_SID,
            TrusteeType: TRUSTEE_IS_WELL_KNOWN_GROUP,
            ptstrName: sid.cast(),
        },
    };
    let mut new: *mut ACL = std::ptr::null_mut();
    // SAFETY: one entry; `old` lives in `descriptor`, still allocated.
    let rc = unsafe { SetEntriesInAclW(1, &raw const entry, old, &raw mut new) };
    let result = if rc != 0 {
        Err(fail("change the permissions of", rc))
    } else {
        // SAFETY: `new` is the ACL just built; the path is NUL-terminated.
        let rc = unsafe {
            SetNamedSecurityInfoW(
                wide_path.as_ptr(),
                SE_FILE_OBJECT,
                DACL_SECURITY_INFORMATION,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                new,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            Err(fail("change the permissions of", rc))
        } else {
            Ok(())
        }
    };
    // SAFETY: both were allocated with LocalAlloc by the calls above (or are null).
    unsafe {
        LocalFree(new.cast());
        LocalFree(descriptor);
    }
    result
}

/// Makes the Python installation readable to app containers (ALL APPLICATION PACKAGES, as
/// Program Files is), once per process.
fn python_readable(python: &Path) -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let install = python
            .parent()
            .ok_or("the Python installation has no folder")?;
        // S-1-15-2-1: ALL APPLICATION PACKAGES.
        let authority = windows_sys::Win32::Security::SID_IDENTIFIER_AUTHORITY {
            Value: [0, 0, 0, 0, 0, 15],
        };
        let mut sid: PSID = std::ptr::null_mut();
        // SAFETY: two sub-authorities given, the rest unused; freed below.
        let ok = unsafe {
            AllocateAndInitializeSid(
                &raw const authority,
                2,
                2,
                1,
                0,
                0,
                0,
                0,
                0,
                0,
                &raw mut sid,
            )
        };
        if ok == 0 {
            return Err(format!(
                "the app packages' SID cannot be made: {}",
                std::io::Error::last_os_error()
            ));
        }
        let result = change_access(
            install,
            sid,
            FILE_GENERIC_READ | FILE_GENERIC_EXECUTE,
            false,
        );
        // SAFETY: allocated by AllocateAndInitializeSid above.
        unsafe {
            FreeSid(sid);
        }
        result
    })
    .clone()
}

/// The workspace and the temporary folder, granted to a container for as long as this lives.
struct Granted<'a> {
    container: &'a AppContainer,
    folders: Vec<&'a Path>,
}

impl<'a> Granted<'a> {
    fn new(container: &'a AppContainer, folders: [&'a Path; 2]) -> Result<Granted<'a>, String> {
        let mut granted = Granted {
            container,
            folders: Vec::new(),
        };
        for folder in folders {
            change_access(folder, container.sid, FILE_ALL_ACCESS, false)?;
            granted.folders.push(folder);
        }
        Ok(granted)
    }
}

impl Drop for Granted<'_> {
    fn drop(&mut self) {
        for folder in &self.folders {
            if let Err(why) = change_access(folder, self.container.sid, 0, true) {
                tracing::warn!(%why, "the sandbox's access to a folder was not taken back");
            }
        }
    }
}

/// A pipe for one of the child's standard streams: `child` is inheritable, `ours` is not.
struct StdPipe<Ours> {
    ours: Ours,
    child: OwnedHandle,
}

fn std_pipes() -> Result<
    (
        StdPipe<std::io::PipeWriter>,
        [StdPipe<std::io::PipeReader>; 2],
    ),
    String,
> {
    let fail = |e: std::io::Error| format!("no pipe for the program: {e}");
    let inheritable = |handle: OwnedHandle| -> Result<OwnedHandle, String> {
        // SAFETY: an open handle of this process.
        let ok = unsafe {
            SetHandleInformation(
                handle.as_raw_handle().cast(),
                HANDLE_FLAG_INHERIT,
                HANDLE_FLAG_INHERIT,
            )
        };
        if ok == 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        Ok(handle)
    };
    let (stdin_read, stdin_write) = std::io::pipe().map_err(fail)?;
    let (stdout_read, stdout_write) = std::io::pipe().map_err(fail)?;
    let (stderr_read, stderr_write) = std::io::pipe().map_err(fail)?;
    Ok((
        StdPipe {
            ours: stdin_write,
            child: inheritable(stdin_read.into())?,
        },
        [
            StdPipe {
                ours: stdout_read,
                child: inheritable(stdout_write.into())?,
            },
            StdPipe {
                ours: stderr_read,
                child: inheritable(stderr_write.into())?,
            },
        ],
    ))
}

/// A Windows command line: each argument quoted as the C runtime parses it.
fn command_line(args: &[&OsStr]) -> Vec<u16> {
    let mut line: Vec<u16> = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            line.push(u16::from(b' '));
        }
        line.push(u16::from(b'"'));
        let mut backslashes = 0usize;
        for unit in arg.encode_wide() {
            if unit == u16::from(b'\\') {
                backslashes += 1;
                continue;
            }
            let doubled = if unit == u16::from(b'"') {
                backslashes * 2 + 1
            } else {
                backslashes
            };
            line.extend(std::iter::repeat_n(u16::from(b'\\'), doubled));
            backslashes = 0;
            line.push(unit);
        }
        line.extend(std::iter::repeat_n(u16::from(b'\\'), backslashes * 2));
        line.push(u16::from(b'"'));
    }
    line.push(0);
    line
}

/// The environment as CreateProcessW takes it: `NAME=value` after another, then an empty one.
fn environment_block(vars: &[(OsString, OsString)]) -> Vec<u16> {
    let mut block: Vec<u16> = Vec::new();
    for (name, value) in vars {
        block.extend(name.encode_wide());
        block.push(u16::from(b'='));
        block.extend(value.encode_wide());
        block.push(0);
    }
    block.push(0);
    block
}

/// A started process and its main thread, killed if dropped before it ended.
struct Process {
    process: OwnedHandle,
}

impl Drop for Process {
    fn drop(&mut self) {
        // SAFETY: the handle is open; killing an ended process does nothing.
        unsafe {
            TerminateProcess(self.process.as_raw_handle().cast(), 1);
        }
    }
}

/// Starts `python launcher` suspended in `container`, with only the three pipe ends
/// inherited; the caller puts it in a job before it runs.
fn spawn_suspended(
    container: &AppContainer,
    args: &[&OsStr],
    env: &[(OsString, OsString)],
    cwd: &Path,
    inherited: [&OwnedHandle; 3],
) -> Result<(Process, OwnedHandle), String> {
    let fail = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    let capabilities = SECURITY_CAPABILITIES {
        AppContainerSid: container.sid,
        Capabilities: std::ptr::null_mut(),
        CapabilityCount: 0,
        Reserved: 0,
    };
    let handles: [HANDLE; 3] = inherited.map(|h| h.as_raw_handle().cast());
    let mut size = 0usize;
    // SAFETY: asks for the size of a list of two attributes (fails with the size set).
    unsafe {
        InitializeProcThreadAttributeList(std::ptr::null_mut(), 2, 0, &raw mut size);
    }
    // usize-aligned storage for the opaque list.
    let mut storage = vec![0usize; size.div_ceil(std::mem::size_of::<usize>())];
    let list: LPPROC_THREAD_ATTRIBUTE_LIST = storage.as_mut_ptr().cast();
    // SAFETY: `storage` has the size the call asked for.
    if unsafe { InitializeProcThreadAttributeList(list, 2, 0, &raw mut size) } == 0 {
        return Err(fail("the process attributes cannot be prepared"));
    }
    struct ListGuard(LPPROC_THREAD_ATTRIBUTE_LIST);
    impl Drop for ListGuard {
        fn drop(&mut self) {
            // SAFETY: initialised above, deleted once.
            unsafe { DeleteProcThreadAttributeList(self.0) }
        }
    }
    let _guard = ListGuard(list);
    // SAFETY: the values outlive the list (both live until the end of this function).
    let ok = unsafe {
        UpdateProcThreadAttribute(
            list,
            0,
            PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES as usize,
            (&raw const capabilities).cast(),
            std::mem::size_of::<SECURITY_CAPABILITIES>(),
            std::ptr::null_mut(),
            std::ptr::null(),
        ) != 0
            && UpdateProcThreadAttribute(
                list,
                0,
                PROC_THREAD_ATTRIBUTE_HANDLE_LIST as usize,
                handles.as_ptr().cast(),
                std::mem::size_of_val(&handles),
                std::ptr::null_mut(),
                std::ptr::null(),
            ) != 0
    };
    if !ok {
        return Err(fail("the process attributes cannot be set"));
    }
    // SAFETY: all-zero is a valid STARTUPINFOEXW before the fields set below.
    let mut startup: STARTUPINFOEXW = unsafe { std::mem::zeroed() };
    startup.StartupInfo.cb = u32::try_from(std::mem::size_of::<STARTUPINFOEXW>()).unwrap_or(0);
    startup.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    [
        startup.StartupInfo.hStdInput,
        startup.StartupInfo.hStdOutput,
        startup.StartupInfo.hStdError,
    ] = handles;
    startup.lpAttributeList = list;
    let mut line = command_line(args);
    let env_block = environment_block(env);
    let cwd = wide(cwd.as_os_str());
    let mut info = PROCESS_INFORMATION {
        hProcess: std::ptr::null_mut(),
        hThread: std::ptr::null_mut(),
        dwProcessId: 0,
        dwThreadId: 0,
    };
    // SAFETY: every pointer is to a NUL-terminated buffer or a structure alive for the call.
    let ok = unsafe {
        CreateProcessW(
            std::ptr::null(),
            line.as_mut_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            1,
            CREATE_SUSPENDED
                | CREATE_NO_WINDOW
                | CREATE_UNICODE_ENVIRONMENT
                | EXTENDED_STARTUPINFO_PRESENT,
            env_block.as_ptr().cast(),
            cwd.as_ptr(),
            &raw const startup.StartupInfo,
            &raw mut info,
        )
    };
    if ok == 0 {
        return Err(fail("python could not be started in the AppContainer"));
    }
    // SAFETY: both handles were just returned to this process, owned by nothing else.
    let process = Process {
        process: unsafe { OwnedHandle::from_raw_handle(info.hProcess as RawHandle) },
    };
    let thread = unsafe { OwnedHandle::from_raw_handle(info.hThread as RawHandle) };
    Ok((process, thread))
}

/// Reads a pipe to its end on a thread of its own, keeping `keep_bytes` of it and adding
/// every byte read to `written`.
fn read_bounded(
    mut pipe: std::io::PipeReader,
    keep_bytes: u64,
    written: Arc<AtomicU64>,
) -> std::sync::mpsc::Receiver<Captured> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut captured = Captured::default();
        let mut chunk = vec![0u8; 64 * 1024];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            let room = usize::try_from(keep_bytes.saturating_sub(captured.kept.len() as u64))
                .unwrap_or(usize::MAX);
            captured.kept.extend_from_slice(&chunk[..n.min(room)]);
            captured.total += n as u64;
            written.fetch_add(n as u64, Ordering::Relaxed);
        }
        let _ = sender.send(captured);
    });
    receiver
}

fn run_in_app_container(call: &Call, tmp: &Path) -> Result<ProgramOutput, String> {
    python_readable(&call.python)?;
    let container = AppContainer::create()?;
    let _granted = Granted::new(&container, [call.workspace.as_path(), tmp])?;
    let job = Job::new(Some(Limits {
        memory_bytes: MEMORY_BYTES,
        processes: PROCESSES,
        cpu_seconds: CPU_SECONDS,
    }))
    .map_err(|e| format!("the program's Job Object cannot be made: {e}"))?;
    let (stdin, [stdout, stderr]) = std_pipes()?;
    let args = [
        call.python.as_os_str(),
        OsStr::new("-X"),
        OsStr::new("utf8"),
        call.launcher.as_os_str(),
    ];
    let env = environment(&call.python, &call.workspace, tmp);
    let (process, thread) = spawn_suspended(
        &container,
        &args,
        &env,
        &call.workspace,
        [&stdin.child, &stdout.child, &stderr.child],
    )?;
    // Our copies of the child's ends: the reads end when the child's processes are gone.
    drop((stdin.child, stdout.child, stderr.child));
    job.assign(process.process.as_raw_handle())
        .map_err(|e| format!("the program cannot be put in its Job Object: {e}"))?;
    // SAFETY: the suspended main thread of the process just made.
    if unsafe { ResumeThread(thread.as_raw_handle().cast()) } == u32::MAX {
        return Err(format!(
            "the sandboxed program cannot be started: {}",
            std::io::Error::last_os_error()
        ));
    }
    drop(thread);
    let output_written = Arc::new(AtomicU64::new(0));
    let stdout = read_bounded(
        stdout.ours,
        call.output_limits.keep_bytes,
        output_written.clone(),
    );
    let stderr = read_bounded(
        stderr.ours,
        call.output_limits.keep_bytes,
        output_written.clone(),
    );
    let mut stdin = stdin.ours;
    let code = call.code.as_bytes().to_owned();
    std::thread::spawn(move || {
        // A program that exits before reading it all closes the pipe: not a failure.
        let _ = stdin.write_all(&code);
    });
    let started = Instant::now();
    let mut stopped = None;
    let status = loop {
        // SAFETY: the process handle is open.
        let waited = unsafe { WaitForSingleObject(process.process.as_raw_handle().cast(), 50) };
        if waited == WAIT_OBJECT_0 {
            let mut code = 0u32;
            // SAFETY: the process has ended; its handle is open.
            unsafe {
                GetExitCodeProcess(process.process.as_raw_handle().cast(), &raw mut code);
            }
            break ExitStatus::from_raw(code);
        }
        // Output is counted by the readers; files by the job (which counts the pipes too).
        let output = output_written.load(Ordering::Relaxed);
        if stopped.is_none() && output > call.output_limits.stop_after_bytes {
            stopped = Some(overflowed(call.output_limits.stop_after_bytes));
            job.terminate();
        } else if stopped.is_none() && job.bytes_written().saturating_sub(output) > FILE_SIZE_BYTES
        {
            stopped = Some(format!(
                "it wrote more than {} to files",
                size_in_words(FILE_SIZE_BYTES)
            ));
            job.terminate();
        }
        if started.elapsed() > TIMEOUT {
            job.terminate();
            return Err(timed_out());
        }
    };
    // Whatever the program started ends with it.
    job.terminate();
    // The job ends every process once their CPU time is spent: say so, as for the others.
    if stopped.is_none() && job.cpu_seconds_used() >= CPU_SECONDS {
        stopped = Some(format!("it used {CPU_SECONDS} s of CPU time"));
    }
    // A pipe end inherited by an unrelated process started meanwhile would keep a read
    // open: wait a little, then take what there is.
    let collect = |receiver: std::sync::mpsc::Receiver<Captured>| {
        receiver
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_default()
    };
    Ok(ProgramOutput {
        status,
        stdout: collect(stdout),
        stderr: collect(stderr),
        stopped,
        limits: format!(
            "memory {} (whole tree, job object), processes {PROCESSES} (whole tree, job object), cpu {CPU_SECONDS} s (whole tree, job object), files {} written in all, {}",
            size_in_words(MEMORY_BYTES),
            size_in_words(FILE_SIZE_BYTES),
            call.output_limits.describe()
        ),
    })
}
