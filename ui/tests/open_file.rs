//! What the desktop entry and the packages rely on, through the real binary: a graph file
//! given alone (`agentloom FILE`, as a double-click runs it) opens the desktop app on it, a
//! mistyped command is not taken for a file, and `--version` prints the version.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::Path;
use std::process::{Command, Output};

/// The binary with no display at all, so that opening the window fails at once and says so.
fn without_display(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .args(args)
        .current_dir(dir)
        .env_remove("AGENTLOOM_LOG")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("WAYLAND_SOCKET")
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir.join("data"))
        .output()
        .expect("agentloom starts")
}

#[test]
fn a_graph_file_given_alone_opens_the_desktop_app() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("Say hello.agentloom.json");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json"),
        &graph,
    )
    .unwrap();
    let output = without_display(&[graph.to_str().unwrap()], dir.path());
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Without a display the window cannot open: that it tried is what tells the file went
    // to the app, not to the command parser.
    assert!(
        stderr.contains("cannot open the window"),
        "agentloom FILE did not try to open the app:\n{stderr}"
    );
    assert_eq!(output.status.code(), Some(1), "{stderr}");
}

#[test]
fn a_word_that_is_neither_a_command_nor_a_file_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let output = without_display(&["valdiate", "graph.json"], dir.path());
    assert_eq!(output.status.code(), Some(2));
    let output = without_display(&["valdiate"], dir.path());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'valdiate' is neither a command nor a graph file")
            && stderr.contains("agentloom --help"),
        "the error does not name the word and the fix:\n{stderr}"
    );
    assert!(
        !stderr.contains("cannot open the window"),
        "a mistyped command opened the app:\n{stderr}"
    );
}

#[test]
fn version_prints_the_package_version() {
    let dir = tempfile::tempdir().unwrap();
    let output = without_display(&["--version"], dir.path());
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("agentloom {}\n", env!("CARGO_PKG_VERSION"))
    );
}
