//! The validator: one test per kind of problem, each checking that the message names the
//! node and the port, and that the JSON path points at the right place.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use agentloom_blocks::Registry;
use agentloom_core::{EdgeDoc, GraphDoc, NodeDoc, Problem, ProblemKind, validate};
use serde_json::json;

fn node(id: &str, block: &str, config: serde_json::Value) -> NodeDoc {
    NodeDoc::new(id, block).with_config(config)
}

fn problems(doc: &GraphDoc) -> Vec<Problem> {
    match validate(doc, &Registry::builtin()) {
        Ok(_) => Vec::new(),
        Err(problems) => problems,
    }
}

fn only(doc: &GraphDoc, kind: ProblemKind) -> Problem {
    let found = problems(doc);
    let matching: Vec<&Problem> = found.iter().filter(|p| p.kind == kind).collect();
    assert_eq!(matching.len(), 1, "expected one {kind:?} in {found:#?}");
    matching[0].clone()
}

/// `greet` (template with variable `name`) fed by a text input, out to an output.
fn valid_graph() -> GraphDoc {
    let mut doc = GraphDoc::new("ok");
    doc.nodes
        .push(node("who", "graph.input", json!({"name": "who"})));
    doc.nodes.push(node(
        "greet",
        "text.template",
        json!({"template": "Hi {{ name }}"}),
    ));
    doc.nodes
        .push(node("out", "graph.output", json!({"name": "out"})));
    doc.edges
        .push(EdgeDoc::new("who", "value", "greet", "name"));
    doc.edges
        .push(EdgeDoc::new("greet", "text", "out", "value"));
    doc
}

#[test]
fn a_valid_graph_has_no_problems() {
    assert!(problems(&valid_graph()).is_empty());
}

#[test]
fn unknown_block() {
    let mut doc = valid_graph();
    doc.nodes.push(node("mystery", "nope.nothing", json!({})));
    let p = only(&doc, ProblemKind::UnknownBlock);
    assert_eq!(p.node.as_deref(), Some("mystery"));
    assert_eq!(p.path, "$.nodes[3].block");
    assert!(
        p.message.contains("`mystery`") && p.message.contains("`nope.nothing`"),
        "{}",
        p.message
    );
}

#[test]
fn pinned_output_the_node_lacks() {
    let mut doc = valid_graph();
    doc.nodes[1].pinned = Some(agentloom_core::ValueMap::from([(
        "nope".to_owned(),
        agentloom_core::Value::from("x"),
    )]));
    let p = only(&doc, ProblemKind::UnknownPort);
    assert_eq!(p.path, "$.nodes[1].pinned.nope");
    assert!(
        p.message.contains(&format!(
            "node `{}` has no output `nope` to pin",
            doc.nodes[1].id
        )),
        "{}",
        p.message
    );
}

#[test]
fn bad_config() {
    let mut doc = valid_graph();
    doc.nodes
        .push(node("wait", "control.delay", json!({"ms": "soon"})));
    let p = only(&doc, ProblemKind::BadConfig);
    assert_eq!(p.path, "$.nodes[3].config.ms");
    assert!(
        p.message.contains("`wait`") && p.message.contains("`ms`"),
        "{}",
        p.message
    );
}

#[test]
fn duplicate_id() {
    let mut doc = valid_graph();
    doc.nodes
        .push(node("greet", "control.passthrough", json!({})));
    let p = only(&doc, ProblemKind::DuplicateId);
    assert_eq!(p.node.as_deref(), Some("greet"));
    assert_eq!(p.path, "$.nodes[3].id");
}

#[test]
fn unknown_node_in_a_wire() {
    let mut doc = valid_graph();
    doc.edges
        .push(EdgeDoc::new("ghost", "value", "out", "value"));
    let p = only(&doc, ProblemKind::UnknownNode);
    assert_eq!(p.node.as_deref(), Some("ghost"));
    assert_eq!(p.path, "$.edges[2].from");
}

#[test]
fn unknown_port() {
    let mut doc = valid_graph();
    doc.edges[0] = EdgeDoc::new("who", "value", "greet", "nmae");
    let found = problems(&doc);
    let p = found
        .iter()
        .find(|p| p.kind == ProblemKind::UnknownPort)
        .expect("unknown port reported");
    assert_eq!(p.node.as_deref(), Some("greet"));
    assert_eq!(p.port.as_deref(), Some("nmae"));
    assert_eq!(p.path, "$.edges[0].to");
    assert!(
        p.message.contains("`name`"),
        "lists the real inputs: {}",
        p.message
    );
    // The real input is now unwired, which is its own problem.
    assert!(
        found
            .iter()
            .any(|p| p.kind == ProblemKind::MissingInput && p.port.as_deref() == Some("name"))
    );
}

#[test]
fn type_mismatch() {
    let mut doc = GraphDoc::new("mismatch");
    doc.nodes.push(node(
        "text",
        "graph.input",
        json!({"name": "t", "type": "text"}),
    ));
    doc.nodes.push(node(
        "each",
        "control.for_each",
        json!({"block": "control.passthrough"}),
    ));
    doc.edges
        .push(EdgeDoc::new("text", "value", "each", "items"));
    let p = only(&doc, ProblemKind::TypeMismatch);
    assert_eq!(p.node.as_deref(), Some("each"));
    assert_eq!(p.port.as_deref(), Some("items"));
    assert!(
        p.message.contains("`text.value` -> `each.items`"),
        "{}",
        p.message
    );
    assert!(
        p.message.contains("cannot connect text to list<json>"),
        "{}",
        p.message
    );
}

#[test]
fn multiple_wires_into_one_input() {
    let mut doc = valid_graph();
    doc.nodes
        .push(node("other", "graph.input", json!({"name": "other"})));
    doc.edges
        .push(EdgeDoc::new("other", "value", "greet", "name"));
    let p = only(&doc, ProblemKind::MultipleWires);
    assert_eq!(p.node.as_deref(), Some("greet"));
    assert_eq!(p.port.as_deref(), Some("name"));
}

#[test]
fn missing_required_input() {
    let mut doc = valid_graph();
    doc.edges.remove(0);
    let p = only(&doc, ProblemKind::MissingInput);
    assert_eq!(p.node.as_deref(), Some("greet"));
    assert_eq!(p.port.as_deref(), Some("name"));
    assert!(
        p.message.contains("`greet`") && p.message.contains("`name`"),
        "{}",
        p.message
    );
}

#[test]
fn cycle() {
    let mut doc = GraphDoc::new("loop");
    doc.nodes.push(node("a", "control.passthrough", json!({})));
    doc.nodes.push(node("b", "control.passthrough", json!({})));
    doc.nodes.push(node("c", "control.passthrough", json!({})));
    doc.edges.push(EdgeDoc::new("a", "value", "b", "value"));
    doc.edges.push(EdgeDoc::new("b", "value", "c", "value"));
    doc.edges.push(EdgeDoc::new("c", "value", "a", "value"));
    let p = only(&doc, ProblemKind::Cycle);
    for id in ["`a`", "`b`", "`c`"] {
        assert!(p.message.contains(id), "{}", p.message);
    }
}

#[test]
fn a_long_cycle_is_named_by_its_ends_and_its_length() {
    let mut doc = GraphDoc::new("ring");
    for i in 0..40 {
        doc.nodes
            .push(node(&format!("n{i:02}"), "control.passthrough", json!({})));
        let next = (i + 1) % 40;
        doc.edges.push(EdgeDoc::new(
            &format!("n{i:02}"),
            "value",
            &format!("n{next:02}"),
            "value",
        ));
    }
    let p = only(&doc, ProblemKind::Cycle);
    assert!(p.message.contains("(40 blocks)"), "{}", p.message);
    assert!(p.message.contains("34 more"), "{}", p.message);
    let first = p.node.clone().expect("a cycle names a node");
    let path = p.message.split(';').next().unwrap_or_default();
    // Short enough for a line or two of the problems list, and it still closes the loop.
    assert!(path.chars().count() < 120, "{path}");
    assert!(
        path.starts_with(&format!("the wires form a cycle through `{first}`")),
        "{path}"
    );
    assert!(path.ends_with(&format!("`{first}` (40 blocks)")), "{path}");
}

#[test]
fn duplicate_graph_input_names() {
    let mut doc = valid_graph();
    doc.nodes
        .push(node("who2", "graph.input", json!({"name": "who"})));
    let p = only(&doc, ProblemKind::DuplicateInterface);
    assert_eq!(p.node.as_deref(), Some("who2"));
    assert!(p.message.contains("`who`"), "{}", p.message);
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut doc = valid_graph();
    doc.nodes.push(node("mystery", "nope", json!({})));
    doc.nodes
        .push(node("greet", "control.passthrough", json!({})));
    doc.edges
        .push(EdgeDoc::new("ghost", "value", "out", "value"));
    let kinds: Vec<ProblemKind> = problems(&doc).iter().map(|p| p.kind).collect();
    for kind in [
        ProblemKind::UnknownBlock,
        ProblemKind::DuplicateId,
        ProblemKind::UnknownNode,
    ] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
}

/// An agent with two templates wired to its `tools` input: the many-wire input takes both,
/// and a tool's unwired inputs are its arguments, not missing inputs.
#[test]
fn many_tool_wires_into_an_agent_and_tools_need_no_wired_inputs() {
    let mut doc = GraphDoc::new("tools");
    doc.nodes
        .push(node("goal", "graph.input", json!({"name": "goal"})));
    doc.nodes.push(node(
        "agent",
        "ai.agent",
        json!({"model": "m", "base_url": "http://127.0.0.1:1/v1"}),
    ));
    for id in ["first", "second"] {
        doc.nodes
            .push(node(id, "text.template", json!({"template": "{{ x }}"})));
        doc.edges.push(EdgeDoc::new(id, "tool", "agent", "tools"));
    }
    doc.edges
        .push(EdgeDoc::new("goal", "value", "agent", "goal"));
    assert!(problems(&doc).is_empty(), "{:#?}", problems(&doc));

    // A one-wire input still takes one wire, and a tool input takes only tools.
    doc.nodes
        .push(node("goal2", "graph.input", json!({"name": "goal2"})));
    doc.edges
        .push(EdgeDoc::new("goal2", "value", "agent", "goal"));
    let p = only(&doc, ProblemKind::MultipleWires);
    assert_eq!(p.port.as_deref(), Some("goal"));
    doc.edges.pop();
    doc.nodes.pop();
    doc.nodes.push(node(
        "count",
        "graph.input",
        json!({"name": "n", "type": "integer"}),
    ));
    doc.edges
        .push(EdgeDoc::new("count", "value", "agent", "tools"));
    let p = only(&doc, ProblemKind::TypeMismatch);
    assert_eq!(p.port.as_deref(), Some("tools"));
}

/// A `tool` output hands on a description of its node, for an agent to call: wired into
/// an input that takes no tools (json, text) it is refused, naming both ends.
#[test]
fn a_tool_output_wired_into_an_input_that_takes_no_tools() {
    let mut into_json = valid_graph();
    into_json.edges[1] = EdgeDoc::new("greet", "tool", "out", "value");
    let mut into_text = valid_graph();
    into_text.nodes.push(node("parse", "json.parse", json!({})));
    into_text
        .edges
        .push(EdgeDoc::new("greet", "tool", "parse", "text"));
    for (doc, from, to, ty) in [
        (into_json, "greet.tool", "out.value", "json"),
        (into_text, "greet.tool", "parse.text", "text"),
    ] {
        let p = only(&doc, ProblemKind::TypeMismatch);
        let (node, port) = to.split_once('.').unwrap();
        assert_eq!(p.node.as_deref(), Some(node));
        assert_eq!(p.port.as_deref(), Some(port));
        assert!(
            p.message.contains(&format!("`{from}` -> `{to}`"))
                && p.message.contains(&format!("cannot connect tool to {ty}"))
                && p.message.contains("an input that takes tools"),
            "{}",
            p.message
        );
    }
}

#[test]
fn control_characters_in_ids_and_names_are_refused() {
    let mut doc = valid_graph();
    doc.nodes[1].id = "gre\u{1b}[2Jet".to_owned();
    let problem = only(&doc, ProblemKind::ControlCharacter);
    assert_eq!(problem.path, "$.nodes[1].id");
    assert!(
        problem
            .message
            .starts_with(r#"the node id "gre\u{1b}[2Jet" contains control characters"#),
        "{}",
        problem.message
    );

    let mut doc = valid_graph();
    doc.name = "ok\nfake: line".to_owned();
    doc.nodes[0]
        .config
        .insert("name".to_owned(), json!("w\rho"));
    let found: Vec<String> = problems(&doc)
        .into_iter()
        .filter(|p| p.kind == ProblemKind::ControlCharacter)
        .map(|p| p.path)
        .collect();
    assert_eq!(found, ["$.name", "$.nodes[0].config.name"]);
}
