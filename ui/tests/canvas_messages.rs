//! What the window says, read as a person reads it: commands it suggests work when pasted
//! into a shell, blocks say what they are under a label of their own.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::App;
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::{graph, harness_for, paths};

/// The words a POSIX shell reads `line` as.
fn shell_words(line: &str) -> Vec<String> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "for word in {line}; do printf '%s\\0' \"$word\"; done"
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_terminator('\0')
        .map(str::to_owned)
        .collect()
}

#[test]
#[cfg(unix)]
fn the_trust_command_suggested_for_a_path_with_spaces_pastes_into_a_shell() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("my graphs");
    std::fs::create_dir_all(&folder).unwrap();
    let file = folder.join("shared graph's copy.json");
    let doc = graph(
        r#"{"format":"agentloom.graph","version":1,"name":"shared",
            "mcp_servers":{"files":{"command":"sh","args":["-c","exit 1"]}},
            "nodes":[],"edges":[]}"#,
    );
    agentloom::app::save_graph(&doc, &file).unwrap();
    let h = harness_for(App::new(&doc, Some(file.clone()), &paths(&dir)));
    let message = h
        .get_by_label_contains("agentloom trust")
        .accesskit_node()
        .label()
        .unwrap();
    let command = message
        .split_once("(agentloom trust ")
        .map(|(_, rest)| format!("agentloom trust {}", rest.trim_end_matches(')')))
        .unwrap_or_else(|| panic!("no command in {message:?}"));
    assert_eq!(
        shell_words(&command),
        ["agentloom", "trust", file.to_str().unwrap()],
        "pasted: {command}"
    );
}
