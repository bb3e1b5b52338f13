//! The inspector's fields, driven through the real UI: numbers that are unset look unset,
//! the credential picker without a keychain, and long values that keep the run in view.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::time::{Duration, Instant};

use agentloom::app::{App, AppPaths, Command};
use agentloom_core::GraphDoc;
use egui::accesskit::Role;
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::{AppHarness, graph, harness_for, shown_anywhere};

const AGENT_GRAPH: &str = r#"{"format":"agentloom.graph","version":1,"name":"agent","nodes":[
    {"id":"agent","block":"ai.agent","position":[0,0],"config":{}}]}"#;

fn agent_app(dir: &tempfile::TempDir) -> AppHarness {
    let mut h = harness_for(App::new(&graph(AGENT_GRAPH), None, &support::paths(dir)));
    h.state_mut().send(Command::InspectById("agent".into()));
    h.run_steps(3);
    h
}

/// The agent's config value `field`, if the file has one.
fn config(h: &AppHarness, field: &str) -> Option<serde_json::Value> {
    h.state()
        .document
        .to_doc()
        .node("agent")
        .unwrap()
        .config
        .get(field)
        .cloned()
}

fn field_text(h: &AppHarness, label: &str) -> String {
    h.get_by_role_and_label(Role::TextInput, label)
        .value()
        .unwrap_or_default()
}

fn hint(h: &AppHarness, label: &str) -> String {
    h.get_by_role_and_label(Role::TextInput, label)
        .accesskit_node()
        .placeholder()
        .unwrap_or_default()
        .to_owned()
}

/// Brings the widget `role` `label` into the inspector's view and clicks it.
fn click(h: &mut AppHarness, role: Role, label: &str) {
    h.get_by_role_and_label(role, label).scroll_to_me();
    // The scroll is animated.
    h.run_steps(20);
    h.get_by_role_and_label(role, label).click();
    h.run_steps(2);
}

fn type_into(h: &mut AppHarness, label: &str, text: &str) {
    click(h, Role::TextInput, label);
    h.get_by_role_and_label(Role::TextInput, label)
        .type_text(text);
    h.run_steps(2);
}

fn erase(h: &mut AppHarness, label: &str, count: usize) {
    click(h, Role::TextInput, label);
    h.key_press(egui::Key::End);
    for _ in 0..count {
        h.key_press(egui::Key::Backspace);
    }
    h.run_steps(2);
}

#[test]
fn unset_numbers_show_empty_with_the_default_as_hint_and_clearing_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = agent_app(&dir);

    // Unset: empty, the default (or what empty means) as the hint; not `1` or `0.0`.
    for label in ["Max output tokens", "Max time (ms)", "Max cost (USD)"] {
        assert_eq!(field_text(&h, label), "", "{label}");
    }
    assert!(
        hint(&h, "Max output tokens").contains("provider's default"),
        "{}",
        hint(&h, "Max output tokens")
    );
    assert!(hint(&h, "Max time (ms)").contains("no limit"));
    assert!(hint(&h, "Max cost (USD)").contains("no limit"));
    // A field with a default shows it as the hint, not as a value.
    assert_eq!(field_text(&h, "Max steps"), "");
    assert_eq!(hint(&h, "Max steps"), "20");
    assert!(!h.state().document.dirty, "looking wrote nothing");

    // Typing a number sets it.
    type_into(&mut h, "Max output tokens", "2048");
    assert_eq!(config(&h, "max_tokens"), Some(serde_json::json!(2048)));
    type_into(&mut h, "Max cost (USD)", "0.25");
    assert_eq!(config(&h, "max_cost_usd"), Some(serde_json::json!(0.25)));

    // Clearing the field removes it from the file.
    erase(&mut h, "Max output tokens", 4);
    assert_eq!(config(&h, "max_tokens"), None);
    assert_eq!(field_text(&h, "Max output tokens"), "");

    // Bad text: a red message naming the field and the fix; the file keeps its value.
    type_into(&mut h, "Max time (ms)", "soon");
    assert_eq!(config(&h, "max_wall_ms"), None);
    h.get_by_label_contains("Max time (ms): `soon` is not a whole number");
    erase(&mut h, "Max time (ms)", 4);
    type_into(&mut h, "Max time (ms)", "0");
    assert_eq!(config(&h, "max_wall_ms"), None);
    h.get_by_label_contains("must be at least 1");
    erase(&mut h, "Max time (ms)", 1);
    type_into(&mut h, "Max time (ms)", "500");
    assert_eq!(config(&h, "max_wall_ms"), Some(serde_json::json!(500)));
    assert!(!shown_anywhere(&h, "must be at least"));

    // Out of the field it shows the file's value: after an undo, empty again.
    click(&mut h, Role::Button, "Undo");
    assert_eq!(config(&h, "max_wall_ms"), None);
    assert_eq!(field_text(&h, "Max time (ms)"), "");
}

/// The app on `doc` with a credential store whose keychain may be unreachable.
fn app_with_store(doc: &GraphDoc, dir: &tempfile::TempDir) -> AppHarness {
    let mut paths: AppPaths = support::paths(dir);
    paths.credentials_dir = Some(dir.path().join("credentials"));
    harness_for(App::new(doc, None, &paths))
}

/// The child half of [`without_a_keychain_environment_credentials_are_offered_and_names_typed`]:
/// run in a process whose session bus leads nowhere and with `AGENTLOOM_SECRET_FAKE` set.
#[test]
#[ignore = "run by without_a_keychain_environment_credentials_are_offered_and_names_typed"]
fn child_picks_credentials_without_a_keychain() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = app_with_store(&graph(AGENT_GRAPH), &dir);
    h.state_mut().send(Command::InspectById("agent".into()));
    h.run_steps(3);

    // The dropdown opens and offers the environment's credential, saying where it is from.
    click(&mut h, Role::ComboBox, "Credential");
    click(&mut h, Role::Button, "fake (from environment)");
    assert_eq!(config(&h, "credential"), Some(serde_json::json!("fake")));
    assert_eq!(
        h.get_by_role_and_label(Role::ComboBox, "Credential")
            .value()
            .as_deref(),
        Some("fake (from environment)")
    );
    h.get_by_label_contains("AGENTLOOM_SECRET_FAKE is set");
    assert!(!shown_anywhere(&h, "not stored"));
    assert!(!shown_anywhere(&h, "runs need"));
    assert!(
        !shown_anywhere(&h, "fake-env-secret-value"),
        "no secret shown"
    );

    // A name is typed: not in the environment, the picker says what a run needs.
    click(&mut h, Role::ComboBox, "Credential");
    click(&mut h, Role::Button, "Other…");
    type_into(&mut h, "Credential name", "typed");
    assert_eq!(config(&h, "credential"), Some(serde_json::json!("typed")));
    h.get_by_label_contains("AGENTLOOM_SECRET_TYPED");
    println!("CHILD-OK");
}

#[test]
fn without_a_keychain_environment_credentials_are_offered_and_names_typed() {
    support::run_without_a_keychain(
        "child_picks_credentials_without_a_keychain",
        &[
            ("AGENTLOOM_SECRET_FAKE", "fake-env-secret-value"),
            ("AGENTLOOM_SECRET_FAKE_HOSTS", "127.0.0.1"),
        ],
    );
}

#[test]
fn a_long_value_scrolls_in_its_field_and_the_last_run_stays_in_view() {
    let items: Vec<serde_json::Value> = (0..300)
        .map(|i| serde_json::json!({"item": i, "name": format!("entry {i}")}))
        .collect();
    let doc = GraphDoc::from_json_str(
        &serde_json::json!({
            "format": "agentloom.graph", "version": 1, "name": "big",
            "nodes": [
                {"id": "big", "block": "data.constant", "position": [0, 0],
                 "config": {"value": items}},
                {"id": "out", "block": "graph.output", "position": [300, 0],
                 "config": {"name": "out"}}
            ],
            "edges": [{"from": ["big", "value"], "to": ["out", "value"]}]
        })
        .to_string(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&doc, None, &support::paths(&dir)));
    h.state_mut().send(Command::Run);
    h.run_steps(2);
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.state().run.status.is_none() || h.state().run.is_running() {
        assert!(Instant::now() < deadline, "the run did not finish");
        h.step();
        std::thread::sleep(Duration::from_millis(10));
    }
    h.state_mut().send(Command::InspectById("big".into()));
    h.run_steps(4);

    let last_run = h.get_by_label("Last run").rect();
    let history = h.get_by_label("History").rect();
    assert!(
        last_run.top() > 0.0 && last_run.bottom() < history.top(),
        "`Last run` at {last_run:?} is out of the inspector's view (it ends at {})",
        history.top()
    );
    // The value is all there, in its own scrolling editor.
    let value = h.get_by_role_and_label(Role::TextInput, "Value");
    assert!(value.value().unwrap_or_default().contains("entry 299"));
}
