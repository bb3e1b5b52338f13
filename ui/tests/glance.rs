//! What the editor shows at a glance: safe mode while it is on, step lines in glyphs the
//! app's fonts have, nothing on a node that only served as a tool, and a graph input named
//! after the pin it came from. Driven through the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command};
use agentloom_blocks::agent::Step;
use egui::accesskit::Role;
use egui::{Key, Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::{By, NodeT as _, Queryable as _};
use support::{
    click_at, drag, example, harness, harness_for, keys, paths, pin, pin_label_in, wires,
};

#[test]
fn safe_mode_shows_in_the_toolbar_while_on_and_clicking_it_turns_it_off_in_one_undo_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness_for(App::new(&example(), None, &paths(&dir)));
    assert!(
        h.query_by_role_and_label(Role::Button, "Safe mode")
            .is_none(),
        "no indicator while safe mode is off"
    );

    h.state_mut().send(Command::SetSafeMode(true));
    h.run_steps(3);
    assert!(h.state().document.settings.safe_mode);
    let indicator = h.get_by_role_and_label(Role::Button, "Safe mode");
    indicator.click();
    h.run_steps(3);
    assert!(
        !h.state().document.settings.safe_mode,
        "clicking the indicator turns safe mode off"
    );
    assert!(
        h.query_by_role_and_label(Role::Button, "Safe mode")
            .is_none(),
        "the indicator goes with it"
    );

    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert!(
        h.state().document.settings.safe_mode,
        "turning it off was one undo step"
    );
    h.get_by_role_and_label(Role::Button, "Safe mode");
}

#[test]
fn an_untrusted_files_forced_safe_mode_shows_in_the_toolbar() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hello.agentloom.json");
    agentloom::app::save_graph(&example(), &file).unwrap();
    let h = harness_for(App::new(&example(), Some(file), &paths(&dir)));
    assert!(!h.state().document.settings.safe_mode);
    h.get_by_label("Safe mode (untrusted file)");
}

/// The characters of `text` that the app's fonts (after its first frames) draw as a box,
/// in either family: the canvas's small text is proportional, step lists are monospace.
fn missing_glyphs(h: &support::AppHarness, text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            [
                egui::FontId::proportional(11.0),
                egui::FontId::monospace(11.0),
            ]
            .iter()
            .any(|font| h.ctx.fonts_mut(|f| f.glyph_width(font, c)) <= 0.0)
        })
        .collect()
}

#[test]
fn the_agents_step_lines_and_the_apps_labels_have_only_characters_its_fonts_draw() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness_for(App::new(&example(), None, &paths(&dir)));
    let step = Step {
        step: 2,
        thought: "save it\nthen check".to_owned(),
        tool: Some("write_file".to_owned()),
        arguments: serde_json::json!({"path": "a.txt", "content": "a\nb"}),
        observation: "wrote 2 bytes\r\nto a.txt\tdone".to_owned(),
        ..Step::default()
    };
    // The node's step line is one line.
    let headline = step.headline(60);
    assert!(!headline.contains('\n'), "{headline:?}");
    assert_eq!(
        missing_glyphs(&h, &headline),
        Vec::<char>::new(),
        "{headline:?}"
    );
    // The inspector's Steps list: each of its lines.
    for line in step.describe().lines() {
        assert_eq!(missing_glyphs(&h, line), Vec::<char>::new(), "{line:?}");
    }
    // Every label the app shows (menus, toolbar, palette, the blocks).
    let labels: Vec<String> = h
        .query_all(By::new().predicate(|_| true))
        .filter_map(|node| node.accesskit_node().label())
        .collect();
    assert!(labels.iter().any(|l| l == "▶ Run"), "{labels:?}");
    for label in &labels {
        for line in label.lines() {
            assert_eq!(missing_glyphs(&h, line), Vec::<char>::new(), "{label:?}");
        }
    }
}

#[test]
fn a_graph_input_made_from_a_pin_is_named_after_it_and_renaming_it_renames_its_title() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = example();
    doc.nodes.retain(|n| n.id != "name");
    doc.edges.retain(|e| e.from.0 != "name");
    let mut h = harness(&doc, &paths(&dir));
    // A wire from the template's `name` input dropped on empty canvas, then Graph input.
    let from = pin(&h, "render", "name", false);
    let render = h.state().node_screen_rect("render").unwrap();
    let to = Pos2::new(render.center().x, render.bottom() + 200.0);
    drag(&mut h, from, to, Modifiers::NONE);
    // The menu's list scrolls inside the canvas: search it.
    h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Search blocks to wire")
        .type_text("graph input");
    h.run_steps(2);
    // The menu's entry, not the palette's: the one nearest the drop.
    let choice = h
        .get_all_by_label("Graph input")
        .map(|n| n.rect().center())
        .min_by(|a, b| a.distance(to).total_cmp(&b.distance(to)))
        .unwrap();
    click_at(&mut h, choice, PointerButton::Primary, Modifiers::NONE);
    h.run_steps(2);
    let added = h.state().document.to_doc();
    let input = added
        .nodes
        .iter()
        .find(|n| n.block == "graph.input")
        .unwrap_or_else(|| panic!("a graph input was added: {:?}", support::ids(&h)));
    assert_eq!(input.id, "name");
    assert_eq!(input.config["name"], "name");
    assert!(
        wires(&h).contains(&"name.value -> render.name".to_owned()),
        "{:?}",
        wires(&h)
    );
    pin_label_in(&h, "name", "name");

    // Renaming it in the inspector renames its title on the canvas.
    h.get_by_role_and_label(Role::TextInput, "Name").click();
    h.run_steps(1);
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_role_and_label(Role::TextInput, "Name")
        .type_text("who");
    h.run_steps(3);
    let renamed = h.state().document.to_doc();
    let input = renamed.nodes.iter().find(|n| n.id == "name").unwrap();
    assert_eq!(input.config["name"], "who");
    pin_label_in(&h, "name", "who");
}
