//! Where `agentloom agent` works: without `--workspace`, a fresh folder under the data
//! directory (printed), never the folder it was typed in; `/` and the home folder are refused
//! before the model is asked anything. The real binary against the `fakellm` peer (set
//! AGENTLOOM_SKIP_PEERS=1 to skip without it), with HOME pointed at a temporary folder.

// The data directory's place (XDG under HOME) and `/` are Linux's.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use agentloom_tests::FakeLlm;

/// `agentloom agent GOAL --yes --json` typed in `home` with HOME set to it; `workspace` is
/// passed as `--workspace` when given.
fn agent_at_home(fake: &FakeLlm, home: &Path, workspace: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    command
        .current_dir(home)
        .env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("AGENTLOOM_LOG")
        .env("AGENTLOOM_SECRET_OPENAI", "sk-local-test")
        .env(
            "AGENTLOOM_SECRET_OPENAI_HOSTS",
            format!("127.0.0.1:{}", fake.port()),
        )
        .args(["agent", "TASK-MULTI: compute 6 times 7"])
        .args(["--model", "test-model", "--base-url"])
        .arg(format!("{}/v1", fake.base()))
        .arg("--db")
        .arg(home.join("runs.sqlite3"))
        .args(["--yes", "--json"])
        .stdin(Stdio::null());
    if let Some(workspace) = workspace {
        command.arg("--workspace").arg(workspace);
    }
    command.output().unwrap()
}

#[test]
fn typed_at_home_without_a_workspace_the_agent_works_in_a_fresh_folder_it_names() {
    let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let out = agent_at_home(&fake, home.path(), None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "completed", "{result:#}");
    let workspace = Path::new(result["workspace"].as_str().unwrap()).to_owned();
    let data_dir = home.path().join(".local/share/agentloom/agent-workspaces");
    assert_eq!(workspace.parent(), Some(data_dir.as_path()), "{result:#}");
    assert!(
        stderr.contains(&format!("workspace: {}", workspace.display())),
        "{stderr}"
    );
    // The agent's file landed there, not in the folder the command was typed in.
    assert_eq!(
        std::fs::read_to_string(workspace.join("out/answer.txt")).unwrap(),
        "42"
    );
    assert!(!home.path().join("out").exists());
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&workspace).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    // A second run gets a folder of its own.
    let again = agent_at_home(&fake, home.path(), None);
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_ne!(again["workspace"], result["workspace"]);
}

#[test]
fn the_home_folder_and_the_root_are_refused_as_the_agents_workspace() {
    let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    for (workspace, what) in [
        (home.path(), "is the home folder"),
        (Path::new("/"), "is the root of the file system"),
    ] {
        let out = agent_at_home(&fake, home.path(), Some(workspace));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(what) && stderr.contains("--workspace DIR"),
            "{stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // Nothing was run: no file written, the model never asked.
    assert!(!home.path().join("out").exists());
    assert!(!home.path().join("runs.sqlite3").exists());
}
