//! A graph input declared `"type": "secret"` is typed masked in the app's run form, and what
//! was typed is in no output shown nor in the run log. Driven through the real UI
//! (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::App;
use egui::Key;
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable as _;
use support::{graph, harness_for, paths, wait_until};

const TYPED: &str = "typed-SECRET-9q7";

const GRAPH: &str = r#"{"format":"agentloom.graph","version":1,"name":"secret form","nodes":[
    {"id":"password","block":"graph.input","position":[0,0],"config":{"name":"password","type":"secret"}},
    {"id":"render","block":"text.template","position":[300,0],"config":{"template":"got {{ password }}"}},
    {"id":"shown","block":"graph.output","position":[600,0],"config":{"name":"shown"}}],
  "edges":[{"from":["password","value"],"to":["render","password"]},
           {"from":["render","text"],"to":["shown","value"]}]}"#;

#[test]
fn a_secret_input_is_typed_masked_and_kept_out_of_outputs_and_the_run_log() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(&dir);
    let mut h = harness_for(App::new(&graph(GRAPH), None, &paths));
    h.get_by_role_and_label(Role::Button, "▶ Run").click();
    h.run_steps(3);
    let field = h.get_by_role_and_label(Role::PasswordInput, "password (secret)");
    field.type_text(TYPED);
    h.run_steps(2);
    let field = h.get_by_role_and_label(Role::PasswordInput, "password (secret)");
    let shown = field.value().unwrap_or_default();
    assert_eq!(shown.chars().count(), TYPED.len(), "{shown:?}");
    assert!(!shown.contains("SECRET"), "{shown:?}");
    h.key_press(Key::Enter);
    h.run_steps(2);
    wait_until(&mut h, "the run", |h| !h.state().run.is_running());
    let output = h.state().run.outputs.get("shown").unwrap().to_json();
    assert_eq!(output, serde_json::json!("got [redacted]"));
    drop(h);

    let mut log = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().contains("runs.sqlite3") {
            log.extend(std::fs::read(path).unwrap());
        }
    }
    assert!(log.len() > 4096);
    assert!(
        !log.windows(TYPED.len()).any(|w| w == TYPED.as_bytes()),
        "the run log holds the typed secret"
    );
}
