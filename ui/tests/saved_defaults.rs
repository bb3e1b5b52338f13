//! A saved graph file holds only what differs from each block's declared defaults: a
//! value left out opens as its default, a value that only looks like nothing (`0`, `""`
//! where the default is something else) stays, and a file saved, opened and saved again is
//! the same bytes, so its trust fingerprint holds. Saved through the app (kittest) and
//! through the editing tools' save path.
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command};
use agentloom_core::{BlockCatalog as _, GraphDoc, NodeDoc};
use serde_json::json;
use support::*;

/// The hello example with a Constant added from the palette (every default written in
/// memory) and an HTTP block whose timeout is set to the default and whose URL is "".
fn graph_with_defaults() -> GraphDoc {
    let mut doc = example();
    let catalog = agentloom_blocks::Registry::builtin();
    let full = |id: &str, kind: &str| {
        let mut node = NodeDoc::new(id, kind);
        for field in &catalog.block(kind).unwrap().meta().config {
            if let Some(default) = &field.default {
                node.config.insert(field.name.clone(), default.clone());
            }
        }
        node
    };
    let mut constant = full("constant", "data.constant").at(40.0, 300.0);
    constant.config.insert("value".to_owned(), json!(0));
    doc.nodes.push(constant);
    let mut render = full("render", "text.template");
    render
        .config
        .insert("template".to_owned(), json!("Hello, {{ name }}!"));
    doc.nodes.retain(|n| n.id != "render");
    doc.nodes.push(render.at(300.0, 120.0));
    doc
}

fn save_in_app(doc: &GraphDoc, file: &std::path::Path, dir: &tempfile::TempDir) -> String {
    let mut h = harness_for(App::new(doc, None, &paths(dir)));
    h.state_mut().send(Command::SaveAs(file.to_owned()));
    h.run_steps(2);
    std::fs::read_to_string(file).unwrap()
}

#[test]
fn a_saved_file_leaves_out_declared_defaults_and_opens_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("short.agentloom.json");
    let doc = graph_with_defaults();
    let text = save_in_app(&doc, &file, &dir);
    let saved: serde_json::Value = serde_json::from_str(&text).unwrap();
    let node = |id: &str| {
        saved["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .unwrap()
            .clone()
    };
    // The constant's type is its default (json): left out. Its value 0 has no default.
    assert_eq!(node("constant")["config"], json!({"value": 0}), "{text}");
    assert_eq!(
        node("render")["config"],
        json!({"template": "Hello, {{ name }}!"}),
        "{text}"
    );

    // Opened again, the left-out type is the default: the output is json, not any.
    let mut h = harness_for(App::new(
        &agentloom::app::load_graph(&file).unwrap(),
        Some(file.clone()),
        &paths(&dir),
    ));
    h.run_steps(2);
    let opened = h.state().document.to_doc();
    let catalog = agentloom_blocks::Registry::builtin();
    let (_, constant) =
        agentloom_core::instantiate_node(0, opened.node("constant").unwrap(), &catalog).unwrap();
    assert_eq!(
        constant.ports().outputs[0].ty.to_string(),
        "json",
        "a type left out is the declared default"
    );
    // Saved again: the same bytes, so the file's trust fingerprint stays.
    h.state_mut().send(Command::SaveAs(file.clone()));
    h.run_steps(2);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    assert_eq!(
        h.state().document.to_doc(),
        agentloom::app::load_graph(&file).unwrap(),
        "the document shown is the file"
    );
}

#[test]
fn a_value_that_only_looks_like_nothing_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kept.agentloom.json");
    let mut doc = example();
    // The graph input's default type is text: "json" differs and stays; an empty
    // default value where the block declares none stays too.
    let input = doc.nodes.iter_mut().find(|n| n.id == "name").unwrap();
    input.config.insert("type".to_owned(), json!("json"));
    input.config.insert("default".to_owned(), json!(""));
    let mut constant = NodeDoc::new("zero", "data.constant").at(40.0, 300.0);
    constant.config.insert("value".to_owned(), json!(""));
    constant.config.insert("type".to_owned(), json!("text"));
    doc.nodes.push(constant);
    let text = save_in_app(&doc, &file, &dir);
    let again = agentloom::app::load_graph(&file).unwrap();
    let name = again.node("name").unwrap();
    assert_eq!(name.config.get("type"), Some(&json!("json")), "{text}");
    assert_eq!(name.config.get("default"), Some(&json!("")), "{text}");
    let zero = again.node("zero").unwrap();
    assert_eq!(zero.config.get("value"), Some(&json!("")), "{text}");
    assert_eq!(zero.config.get("type"), Some(&json!("text")), "{text}");
}
