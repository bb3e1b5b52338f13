//! What Agentloom writes in the data directory is the user's alone: the run log (and its
//! `-wal` and `-shm` files), the trusted-graphs file, an export, and their folder.

#![cfg(unix)]
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

fn agentloom(data: &Path, args: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .env("XDG_DATA_HOME", data)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "agentloom {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A graph with no side effect in `dir`; its path.
fn write_graph(dir: &Path) -> String {
    let graph = dir.join("hello.agentloom.json");
    std::fs::write(
        &graph,
        r#"{"format": "agentloom.graph", "version": 1, "name": "hello",
            "nodes": [{"id": "c", "block": "data.constant", "config": {"value": "hi"}},
                      {"id": "out", "block": "graph.output", "config": {"name": "out"}}],
            "edges": [{"from": ["c", "value"], "to": ["out", "value"]}]}"#,
    )
    .unwrap();
    graph.to_str().unwrap().to_owned()
}

/// The permissions of `path` in octal, as `ls -l` and `chmod` speak of them.
fn mode(path: &Path) -> String {
    let mode = std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode();
    format!("{:o}", mode & 0o777)
}

#[test]
fn the_run_log_and_the_trusted_graphs_file_are_readable_by_their_user_alone() {
    let data = tempfile::tempdir().unwrap();
    // As a user's umask usually is: new files readable by all unless told otherwise.
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let graph = write_graph(data.path());
    agentloom(data.path(), &["trust", &graph]);
    agentloom(data.path(), &["run", &graph, "--json"]);

    let home = data.path().join("agentloom");
    assert_eq!(mode(&home), "700", "{}", home.display());
    let log = home.join("runs.sqlite3");
    assert_eq!(mode(&log), "600");
    let mut companions = 0;
    for suffix in ["-wal", "-shm"] {
        let file = home.join(format!("runs.sqlite3{suffix}"));
        if file.exists() {
            companions += 1;
            assert_eq!(mode(&file), "600", "{}", file.display());
        }
    }
    assert!(companions > 0, "the run left no -wal or -shm file to check");
    assert_eq!(mode(&home.join("trusted-graphs.json")), "600");
    for entry in std::fs::read_dir(&home).unwrap() {
        let path = entry.unwrap().path();
        let expected = if path.is_dir() { "700" } else { "600" };
        assert_eq!(mode(&path), expected, "{}", path.display());
    }

    let export = data.path().join("export.sqlite3");
    agentloom(data.path(), &["runs", "--export", export.to_str().unwrap()]);
    assert_eq!(mode(&export), "600");
}

#[test]
fn a_run_log_an_earlier_version_left_readable_by_all_is_made_private() {
    let data = tempfile::tempdir().unwrap();
    let home = data.path().join("agentloom");
    std::fs::create_dir_all(&home).unwrap();
    let log = home.join("runs.sqlite3");
    let graph = write_graph(data.path());
    agentloom(data.path(), &["run", &graph, "--json"]);
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
    agentloom(data.path(), &["runs"]);
    assert_eq!(mode(&log), "600");
}
