//! Running a command on a real terminal: a pty from util-linux `script`, with the test's
//! text as the person's keystrokes.

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `program args…` on a pty with `envs` set, types `typed`, and returns the exit code
/// and everything the terminal showed (the typed text echoed among it).
///
/// # Panics
/// When `script` cannot be started.
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
pub fn at_a_terminal(
    program: &Path,
    args: &[&OsStr],
    envs: &[(&str, &str)],
    typed: &str,
) -> (Option<i32>, String) {
    let command = std::iter::once(program.as_os_str())
        .chain(args.iter().copied())
        .map(|word| shell_quote(&word.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    let mut script = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .env_remove("AGENTLOOM_LOG")
        .envs(envs.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux `script` gives the command a terminal");
    script
        .stdin
        .take()
        .unwrap()
        .write_all(typed.as_bytes())
        .unwrap();
    let output = script.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}
