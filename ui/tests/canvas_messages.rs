//! What the window says, read as a person reads it: commands it suggests work when pasted
//! into a shell, blocks say what they are under a label of their own.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::App;
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::{graph, harness_for, paths};

/// The words a POSIX shell reads `line` as.
#[cfg(unix)]
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

#[test]
fn a_block_with_a_label_of_its_own_still_says_what_block_it_is_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let doc = graph(
        r#"{"format":"agentloom.graph","version":1,"name":"labelled","nodes":[
            {"id":"greet","block":"text.template","label":"Greeting","position":[0,0],"config":{"template":"Hi"}},
            {"id":"who","block":"graph.input","label":"Who to greet","position":[0,200],"config":{"name":"who","type":"text"}}],
          "edges":[]}"#,
    );
    let h = harness_for(App::new(&doc, None, &paths(&dir)));
    let title = h.get_by_label("Greeting").rect();
    // On the canvas, not the palette's button of the same name.
    let kinds: Vec<_> = h
        .query_all_by_label("Template")
        .filter(|node| node.accesskit_node().role() != egui::accesskit::Role::Button)
        .map(|node| node.rect())
        .collect();
    assert_eq!(kinds.len(), 1, "the block's type is not shown: {kinds:?}");
    let kind = kinds[0];
    // Each on one line, not wrapped into a narrow column.
    assert!(
        title.width() > title.height() * 2.0 && kind.width() > kind.height() * 2.0,
        "wrapped: {title:?} {kind:?}"
    );
    assert!(
        kind.top() >= title.bottom() - 1.0 && kind.left() < title.right(),
        "the type {kind:?} is not under the label {title:?}"
    );
    // A short type under a longer label: the label still on one line.
    let who = h.get_by_label("Who to greet").rect();
    assert!(who.width() > who.height() * 3.0, "wrapped: {who:?}");
}
