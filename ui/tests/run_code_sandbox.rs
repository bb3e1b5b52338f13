//! The agent's run_code through the real binary: a scripted model (fakellm) has the program
//! probe the host — agentloom's environment, memory, root and working folder through /proc,
//! ptrace, a listener at the session bus path, TCP to a real local server, other processes —
//! and start a process in a new session. Each probe must be refused, no secret may reach the
//! output or the run log, and nothing the program started may survive the run: with
//! bubblewrap, and with the bwrap lookup pointed at nothing (Landlock + seccomp).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};

use agentloom_blocks::testing::processes_with;
use agentloom_tests::FakeLlm;

/// A credential the run never resolves, so no redaction would hide it if it leaked.
const CANARY: &str = "canary-7f3e9b2c-unused-secret";

/// The probing program; `{bus}` and `{port}` are filled in, `{marker}` names the survivor.
const PROBE: &str = r#"
import ctypes, os, socket, subprocess
def attempt(name, action):
    try:
        got = action()
        print(f'{name}: OPEN {got!r}'[:300])
    except Exception as e:
        print(f'{name}: blocked ({type(e).__name__})')
def read(path):
    with open(path, 'rb') as f:
        return f.read(1 << 20)
def find_agentloom():
    pid = os.getppid()
    while pid > 1:
        if b'agentloom' in read(f'/proc/{pid}/cmdline'):
            return pid
        pid = int(read(f'/proc/{pid}/stat').rsplit(b')', 1)[1].split()[1])
    raise LookupError('agentloom is not visible')
try:
    host = find_agentloom()
except Exception:
    # Without a PID namespace the parent is agentloom even when /proc hides it.
    host = os.getppid() if os.getppid() > 1 else None
def at_host(path):
    if host is None:
        raise LookupError('agentloom is not visible')
    return f'/proc/{host}/{path}'
def environ():
    text = read(at_host('environ'))
    if b'AGENTLOOM_SECRET' in text:
        return text
    raise LookupError('no secret in it')
def mem():
    with open(at_host('mem'), 'rb') as f:
        f.seek(0x400000)
        return f.read(16)
def ptrace():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, host or 1, None, None) != 0:
        raise OSError(ctypes.get_errno(), 'ptrace')
    return 'attached'
def processes():
    pids = [p for p in os.listdir('/proc') if p.isdigit()]
    if len(pids) > 3:
        return len(pids)
    raise LookupError(pids)
def unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return 'connected'
attempt('environ', environ)
attempt('mem', mem)
attempt('root', lambda: os.listdir(at_host('root/')))
attempt('cwd', lambda: os.listdir(at_host('cwd/')))
attempt('ptrace', ptrace)
attempt('processes', processes)
attempt('session_bus', lambda: unix('{bus}'))
attempt('tcp', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2))
try:
    subprocess.Popen(['sleep', '{marker}'], start_new_session=True)
    print('survivor started')
except Exception as e:
    print(f'survivor refused ({type(e).__name__})')
print('probed')
"#;

fn probe_with(bwrap: Option<&str>) {
    // A listener where the session bus would be ($XDG_RUNTIME_DIR/bus); agentloom itself is
    // not pointed at it (its keychain lookup would wait for an answer).
    let runtime = tempfile::tempdir().unwrap();
    let bus_path = runtime.path().join("bus");
    let _bus = UnixListener::bind(&bus_path).unwrap();
    // A number of seconds for `sleep` that no other test uses at the same time (the two
    // tests run in parallel and each looks for survivors of its own).
    let fraction = if bwrap.is_some() { 25 } else { 75 };
    let marker = format!("{}.{fraction}", 800 + std::process::id() % 100);
    // fakellm serves the model: its port is a real listener on 127.0.0.1.
    let port_holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = port_holder.local_addr().unwrap().port();
    let code = PROBE
        .replace("{bus}", &bus_path.display().to_string())
        .replace("{port}", &port.to_string())
        .replace("{marker}", &marker);
    let rules = format!(
        "rules:\n  - name: probe\n    when: {{messages_contain: \"TASK-PROBE\", turn: 1}}\n    respond:\n      tool_calls: [{{name: run_code, arguments: {{code: {}}}}}]\n  - name: done\n    when: {{messages_contain: \"TASK-PROBE\", turn: 2}}\n    respond:\n      tool_calls: [{{name: finish, arguments: {{answer: \"probed\"}}}}]\n",
        serde_json::to_string(&code).unwrap()
    );
    let Some(fake) = FakeLlm::start_with_rules(&rules) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    command
        .env_remove("AGENTLOOM_LOG")
        .env("AGENTLOOM_SECRET_OPENAI", "sk-local-test")
        .env("AGENTLOOM_SECRET_PROBE", CANARY)
        .args(["agent", "TASK-PROBE", "--model", "test-model", "--base-url"])
        .arg(format!("{}/v1", fake.base()))
        .arg("--workspace")
        .arg(dir.path())
        .arg("--db")
        .arg(dir.path().join("runs.sqlite3"))
        .args(["--yes", "--json"])
        .stdin(Stdio::null());
    match bwrap {
        Some(path) => command.env("AGENTLOOM_BWRAP", path),
        None => command.env_remove("AGENTLOOM_BWRAP"),
    };
    let out = command.output().unwrap();
    let survivors = processes_with(&marker);
    for pid in &survivors {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let observation = result["steps"][0]["observation"].as_str().unwrap();
    eprintln!("AGENTLOOM_BWRAP={bwrap:?}:\n{observation}");
    assert!(observation.starts_with("exit code: 0"), "{observation}");
    assert!(observation.contains("probed"), "{observation}");
    for probe in [
        "environ",
        "mem",
        "root",
        "cwd",
        "ptrace",
        "processes",
        "session_bus",
        "tcp",
    ] {
        assert!(
            observation.contains(&format!("{probe}: blocked")),
            "{probe} reached the host (AGENTLOOM_BWRAP={bwrap:?}):\n{observation}"
        );
    }
    assert!(!observation.contains("OPEN"), "{observation}");
    assert_eq!(survivors, Vec::<i32>::new(), "a process outlived the run");
    // The secret is nowhere: not in the output, not in the run log.
    assert!(!stdout.contains(CANARY) && !stderr.contains(CANARY));
    for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let bytes = std::fs::read(entry.path()).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(CANARY),
            "{} holds the secret",
            entry.path().display()
        );
    }
}

#[test]
fn run_code_under_bubblewrap_reaches_nothing_of_the_host() {
    probe_with(None);
}

#[test]
fn run_code_without_bubblewrap_reaches_nothing_of_the_host() {
    // The bwrap lookup points at nothing: Landlock, seccomp and resource limits.
    probe_with(Some(""));
}
