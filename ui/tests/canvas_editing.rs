//! Editing the graph on the canvas the way a person does: clicks, drags, menus and keys,
//! driven through the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::save_graph;
use egui::{Key, Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::Queryable as _;
use support::{
    AppHarness, canvas_text, click_at, drag, drop_file, example, graph, harness, ids, keys, paths,
    title_of, wires,
};

/// Four blocks: a pair on the left wired together, a pair on the right wired together.
const TWO_PAIRS: &str = r#"{"format":"agentloom.graph","version":1,"name":"pairs","nodes":[
    {"id":"left_in","block":"graph.input","position":[0,0],"config":{"name":"left_in","type":"text"}},
    {"id":"left_tpl","block":"text.template","position":[0,200],"config":{"template":"L {{ x }}"}},
    {"id":"right_in","block":"graph.input","position":[600,0],"config":{"name":"right_in","type":"text"}},
    {"id":"right_tpl","block":"text.template","position":[600,200],"config":{"template":"R {{ x }}"}}],
  "edges":[{"from":["left_in","value"],"to":["left_tpl","x"]},
           {"from":["right_in","value"],"to":["right_tpl","x"]}]}"#;

fn node_position(h: &AppHarness, id: &str) -> [f64; 2] {
    h.state().document.to_doc().node(id).unwrap().position
}

/// A point of the canvas with no node under it.
fn empty_canvas(h: &AppHarness) -> Pos2 {
    let greeting = h.state().node_screen_rect("greeting").unwrap();
    Pos2::new(greeting.center().x, greeting.bottom() + 200.0)
}

/// The one widget labelled `label` that is not in the palette (left panel): the copy in a
/// canvas menu.
fn in_menu(h: &AppHarness, label: &str) -> Pos2 {
    let palette_right = h.get_by_label("Blocks").rect().right() + 40.0;
    let found: Vec<_> = h
        .get_all_by_label(label)
        .map(|n| n.rect())
        .filter(|r| r.left() > palette_right)
        .collect();
    assert_eq!(found.len(), 1, "`{label}` outside the palette: {found:?}");
    found[0].center()
}

#[test]
fn clicking_a_node_inspects_it_and_dragging_its_title_moves_it_in_one_undo_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    assert_eq!(h.state().inspected_id(), None);

    let title = title_of(&h, "render");
    click_at(&mut h, title, PointerButton::Primary, Modifiers::NONE);
    assert_eq!(h.state().inspected_id(), Some("render"));
    h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Template");

    // A click on empty canvas goes back to the graph's summary.
    let empty = empty_canvas(&h);
    click_at(&mut h, empty, PointerButton::Primary, Modifiers::NONE);
    assert_eq!(h.state().inspected_id(), None);
    h.get_by_label_contains("3 blocks");

    let before = node_position(&h, "render");
    drag(
        &mut h,
        title,
        title + egui::vec2(120.0, 80.0),
        Modifiers::NONE,
    );
    let after = node_position(&h, "render");
    let scale = f64::from(
        h.state().graph_to_screen(Pos2::new(1.0, 0.0)).x - h.state().graph_to_screen(Pos2::ZERO).x,
    );
    assert!(
        (after[0] - before[0]) * scale > 80.0 && (after[1] - before[1]) * scale > 50.0,
        "the node follows the pointer: {before:?} -> {after:?}"
    );
    assert!(h.state().document.dirty);

    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(node_position(&h, "render"), before, "one undo puts it back");
}

#[test]
fn copy_paste_duplicate_and_delete_of_two_selected_blocks_keep_their_wire_and_undo() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let original_wires = wires(&h);

    // Shift-click selects (egui-snarl's selection gesture).
    let name = title_of(&h, "Who to greet");
    let render = title_of(&h, "render");
    click_at(&mut h, name, PointerButton::Primary, Modifiers::SHIFT);
    click_at(&mut h, render, PointerButton::Primary, Modifiers::SHIFT);

    // Copy: the platform turns Ctrl+C into a Copy event, which egui_kittest cannot do from
    // a key press, so the event is sent as the platform would send it.
    h.event(egui::Event::Copy);
    h.step();
    let copied = support::copied_text(&h).expect("the selection went to the clipboard");
    let clip = agentloom_core::GraphDoc::from_json_str(&copied).unwrap();
    assert_eq!(clip.nodes.len(), 2);
    assert_eq!(clip.edges.len(), 1, "the wire between them is copied");
    h.run_steps(2);

    // Paste (Ctrl+V arrives as a Paste event with the clipboard's text).
    h.event(egui::Event::Paste(copied));
    h.run_steps(3);
    assert_eq!(
        ids(&h),
        ["greeting", "name", "name_2", "render", "render_2"],
        "pasted with new ids"
    );
    assert!(
        wires(&h).contains(&"name_2.value -> render_2.name".to_owned()),
        "{:?}",
        wires(&h)
    );
    assert_eq!(wires(&h).len(), 3, "{:?}", wires(&h));
    let pasted = node_position(&h, "render_2");
    let source = node_position(&h, "render");
    assert!(pasted != source, "the copy is offset, not on top");

    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(ids(&h), ["greeting", "name", "render"]);
    assert_eq!(wires(&h), original_wires);

    // Duplicate with Ctrl+D, still on the selection.
    keys(&mut h, Modifiers::COMMAND, Key::D);
    assert_eq!(ids(&h).len(), 5, "{:?}", ids(&h));
    assert!(wires(&h).contains(&"name_2.value -> render_2.name".to_owned()));
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(ids(&h), ["greeting", "name", "render"]);

    // Delete removes both and their wires; undo brings them back, wired.
    keys(&mut h, Modifiers::NONE, Key::Delete);
    assert_eq!(ids(&h), ["greeting"]);
    assert!(wires(&h).is_empty());
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(ids(&h), ["greeting", "name", "render"]);
    assert_eq!(wires(&h), original_wires);
    // Redo is Ctrl+Shift+Z.
    keys(&mut h, Modifiers::COMMAND | Modifiers::SHIFT, Key::Z);
    assert_eq!(ids(&h), ["greeting"]);
}

#[test]
fn delete_without_a_selection_removes_the_block_in_the_inspector() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let render = title_of(&h, "render");
    click_at(&mut h, render, PointerButton::Primary, Modifiers::NONE);
    assert_eq!(h.state().inspected_id(), Some("render"));
    keys(&mut h, Modifiers::NONE, Key::Delete);
    assert_eq!(ids(&h), ["greeting", "name"]);
    assert_eq!(h.state().inspected_id(), None);
}

#[test]
fn box_select_then_delete_removes_exactly_the_boxed_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&graph(TWO_PAIRS), &paths(&dir));
    let left_in = h.state().node_screen_rect("left_in").unwrap();
    let left_tpl = h.state().node_screen_rect("left_tpl").unwrap();
    let right_in = h.state().node_screen_rect("right_in").unwrap();
    // From empty canvas above-left of the left pair to between the two pairs, shift held.
    let from = left_in.left_top() - egui::vec2(10.0, 10.0);
    let to = Pos2::new(
        (left_tpl.right() + right_in.left()) / 2.0,
        left_tpl.bottom() + 10.0,
    );
    assert!(
        from.x > h.get_by_label("Blocks").rect().right(),
        "on the canvas"
    );
    drag(&mut h, from, to, Modifiers::SHIFT);
    keys(&mut h, Modifiers::NONE, Key::Delete);
    assert_eq!(ids(&h), ["right_in", "right_tpl"]);
    assert_eq!(wires(&h), ["right_in.value -> right_tpl.x"]);
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(ids(&h).len(), 4);
    assert_eq!(wires(&h).len(), 2);
}

#[test]
fn right_click_on_the_canvas_adds_a_block_where_clicked() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let at = empty_canvas(&h);
    click_at(&mut h, at, PointerButton::Secondary, Modifiers::NONE);
    h.get_by_label("Add block…");
    let delay = in_menu(&h, "Delay");
    click_at(&mut h, delay, PointerButton::Primary, Modifiers::NONE);
    assert!(h.query_by_label("Add block…").is_none(), "the menu closed");
    let doc = h.state().document.to_doc();
    let added = doc.node("delay").expect("a delay block was added");
    assert_eq!(added.block, "control.delay");
    let placed = on_screen(&h, added);
    assert!(
        placed.distance(at) < 30.0,
        "placed where the menu was opened: {placed:?} vs {at:?}"
    );
    assert_eq!(h.state().inspected_id(), Some("delay"));
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert!(h.state().document.to_doc().node("delay").is_none());
}

#[test]
fn dragging_a_block_from_the_palette_drops_it_on_the_canvas() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let from = h
        .get_by_role_and_label(egui::accesskit::Role::Button, "Delay")
        .rect()
        .center();
    let to = empty_canvas(&h);
    drag(&mut h, from, to, Modifiers::NONE);
    let doc = h.state().document.to_doc();
    let added = doc.node("delay").expect("the dragged block was dropped");
    let placed = on_screen(&h, added);
    assert!(
        placed.distance(to) < 30.0,
        "dropped under the pointer: {placed:?} vs {to:?}"
    );
    assert_eq!(ids(&h).len(), 4, "added once: {:?}", ids(&h));
}

/// The example with the template's `text` output unwired, then a wire dragged from it to
/// empty canvas (the dropped-wire menu opens); returns where it was dropped.
fn drop_the_template_text_wire(dir: &tempfile::TempDir) -> (AppHarness, Pos2) {
    drop_the_template_text_wire_at(dir, empty_canvas)
}

/// The same, dropped at the point `to` picks.
fn drop_the_template_text_wire_at(
    dir: &tempfile::TempDir,
    to: impl Fn(&AppHarness) -> Pos2,
) -> (AppHarness, Pos2) {
    let mut doc = example();
    doc.edges.retain(|e| e.from.0 != "render");
    let mut h = harness(&doc, &paths(dir));
    // The `text` output pin sits on the right edge of the node, level with its name.
    let pin = Pos2::new(
        h.state().node_screen_rect("render").unwrap().right(),
        canvas_text(&h, "text").y,
    );
    let to = to(&h);
    drag(&mut h, pin, to, Modifiers::NONE);
    (h, to)
}

#[test]
fn a_wire_dropped_on_empty_canvas_offers_only_blocks_that_accept_it_and_wires_the_choice() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, to) = drop_the_template_text_wire(&dir);
    h.get_by_label("Add a block wired here");
    // Blocks without an input that takes text are not offered.
    for refused in ["Graph input", "Constant"] {
        assert!(
            // (A labelled block on the canvas says its type too: only buttons count.)
            h.query_all_by_role_and_label(egui::accesskit::Role::Button, refused)
                .count()
                == 1,
            "`{refused}` is only in the palette"
        );
    }
    let parse = in_menu(&h, "Parse JSON");
    in_menu(&h, "Template");
    click_at(&mut h, parse, PointerButton::Primary, Modifiers::NONE);
    assert_template_text_feeds_a_parse_at(&h, to);
    // One undo step removes it with its wire.
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(ids(&h), ["greeting", "name", "render"]);
}

#[test]
fn dropping_a_graph_file_on_the_window_opens_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let pairs = graph(TWO_PAIRS);
    let file = dir.path().join("pairs.agentloom.json");
    save_graph(&pairs, &file).unwrap();

    // Not a graph file: ignored.
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    drop_file(&mut h, &text);
    assert_eq!(ids(&h), ["greeting", "name", "render"]);

    drop_file(&mut h, &file);
    let mut expected = pairs;
    expected.normalize();
    assert_eq!(h.state().document.to_doc(), expected);
    assert_eq!(h.state().document.path.as_deref(), Some(file.as_path()));
    assert!(!h.state().document.dirty);
    h.get_by_label_contains("pairs.agentloom.json");

    // A broken JSON file is reported and leaves the graph alone.
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{ not json").unwrap();
    drop_file(&mut h, &broken);
    assert_eq!(h.state().document.to_doc(), expected);
    h.get_by_label_contains("is not a graph Agentloom can open");
}

#[test]
fn menus_show_the_keyboard_shortcuts() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    for (menu, items) in [
        (
            "File",
            &[
                "New Ctrl+N",
                "Open… Ctrl+O",
                "Save Ctrl+S",
                "Save As… Ctrl+Shift+S",
                "Quit Ctrl+Q",
            ][..],
        ),
        (
            "Edit",
            &[
                "Undo Ctrl+Z",
                "Redo Ctrl+Shift+Z",
                "Copy Ctrl+C",
                "Paste Ctrl+V",
                "Duplicate Ctrl+D",
                "Delete Delete",
                "Select all Ctrl+A",
            ][..],
        ),
        ("View", &["Fit graph to view F", "Actual size Ctrl+0"][..]),
        ("Run", &["Run Ctrl+Enter", "Stop Ctrl+Period"][..]),
    ] {
        h.get_by_role_and_label(egui::accesskit::Role::Button, menu)
            .click();
        h.run_steps(2);
        for item in items {
            h.get_by_role_and_label(egui::accesskit::Role::Button, item);
        }
        keys(&mut h, Modifiers::NONE, Key::Escape);
    }
}

#[test]
fn undo_keeps_the_inspector_and_the_selection_on_the_same_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&graph(TWO_PAIRS), &paths(&dir));
    // `delay` sorts before every other id: a canvas rebuilt in file order on undo would
    // hand its place to another block.
    h.get_by_role_and_label(egui::accesskit::Role::Button, "Delay")
        .click();
    h.run_steps(3);
    assert_eq!(h.state().inspected_id(), Some("delay"));

    // An edit to undo: move another block by its title.
    let before = node_position(&h, "right_tpl");
    let title = title_of(&h, "right_tpl");
    drag(
        &mut h,
        title,
        title + egui::vec2(120.0, 40.0),
        Modifiers::NONE,
    );
    assert_ne!(node_position(&h, "right_tpl"), before);

    // Select the delay block, then undo the move.
    let delay = h.state().node_screen_rect("delay").unwrap();
    let delay_title = Pos2::new(delay.center().x, delay.top() + 12.0);
    click_at(
        &mut h,
        delay_title,
        PointerButton::Primary,
        Modifiers::SHIFT,
    );
    assert_eq!(h.state().inspected_id(), Some("delay"));
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(node_position(&h, "right_tpl"), before, "the move is undone");
    assert_eq!(
        h.state().inspected_id(),
        Some("delay"),
        "still inspecting it"
    );
    h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Wait (ms)");

    // Delete acts on the block that was selected, not on whatever took its place.
    keys(&mut h, Modifiers::NONE, Key::Delete);
    assert_eq!(ids(&h), ["left_in", "left_tpl", "right_in", "right_tpl"]);
    assert_eq!(wires(&h).len(), 2);
}

#[test]
fn looking_at_blocks_changes_nothing() {
    let examples = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/examples");
    for file in [
        "hello.agentloom.json",
        "branching.agentloom.json",
        "pipeline.agentloom.json",
        "online/llm-summarize.agentloom.json",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let doc = agentloom::app::load_graph(&examples.join(file)).unwrap();
        let mut h = harness(&doc, &paths(&dir));
        for node in &doc.nodes {
            // Fit to view keeps a small graph readable, so a block may be a scroll away:
            // bring it into view, inspect nothing, then click it.
            h.state_mut()
                .send(agentloom::app::Command::InspectById(node.id.clone()));
            h.run_steps(3);
            keys(&mut h, Modifiers::NONE, Key::Escape);
            assert_eq!(h.state().inspected_id(), None);
            let rect = h.state().node_screen_rect(&node.id).unwrap();
            let title = Pos2::new(rect.center().x, rect.top() + 10.0);
            click_at(&mut h, title, PointerButton::Primary, Modifiers::NONE);
            assert_eq!(h.state().inspected_id(), Some(node.id.as_str()), "{file}");
            let document = &h.state().document;
            assert!(
                !document.dirty && !document.can_undo(),
                "{file}: inspecting `{}` changed the graph: {:?} became {:?}",
                node.id,
                node,
                document.to_doc().node(&node.id)
            );
        }
        let mut unchanged = doc.clone();
        unchanged.normalize();
        assert_eq!(h.state().document.to_doc(), unchanged, "{file}");
    }
}

#[test]
fn looking_at_a_block_of_any_kind_with_an_empty_config_changes_nothing() {
    let registry = agentloom_blocks::Registry::builtin();
    let mut doc = agentloom_core::GraphDoc::new("every kind");
    for (i, kind) in registry.kinds().into_iter().enumerate() {
        #[allow(clippy::cast_precision_loss, reason = "a small grid")]
        let at = ((i % 6) as f64 * 300.0, (i / 6) as f64 * 260.0);
        doc.nodes
            .push(agentloom_core::NodeDoc::new(format!("n{i:02}"), kind).at(at.0, at.1));
    }
    doc.normalize();
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&doc, &paths(&dir));
    for node in &doc.nodes {
        let id = h.state().document.node_by_id(&node.id).unwrap();
        h.state_mut().send(agentloom::app::Command::Inspect(id));
        h.run_steps(2);
        assert_eq!(h.state().inspected_id(), Some(node.id.as_str()));
        let document = &h.state().document;
        assert!(
            !document.dirty && !document.can_undo(),
            "inspecting a `{}` with an empty config changed it to {:?}",
            node.block,
            document.to_doc().node(&node.id).map(|n| &n.config)
        );
    }
    assert_eq!(h.state().document.to_doc(), doc);
}

#[test]
fn a_plain_click_or_escape_replaces_the_selection_and_delete_acts_on_what_the_inspector_shows() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let select_two = |h: &mut AppHarness| {
        let name = title_of(h, "Who to greet");
        let render = title_of(h, "render");
        click_at(h, name, PointerButton::Primary, Modifiers::SHIFT);
        click_at(h, render, PointerButton::Primary, Modifiers::SHIFT);
        h.get_by_label("2 blocks selected");
    };

    // A plain click on another block: that block alone.
    select_two(&mut h);
    let greeting = title_of(&h, "greeting");
    click_at(&mut h, greeting, PointerButton::Primary, Modifiers::NONE);
    let ctx = h.ctx.clone();
    assert!(h.state().selected_ids(&ctx).is_empty());
    assert_eq!(h.state().inspected_id(), Some("greeting"));
    assert!(h.query_by_label("2 blocks selected").is_none());
    keys(&mut h, Modifiers::NONE, Key::Delete);
    assert_eq!(ids(&h), ["name", "render"]);
    keys(&mut h, Modifiers::COMMAND, Key::Z);

    // Escape: nothing, so Delete removes nothing.
    select_two(&mut h);
    keys(&mut h, Modifiers::NONE, Key::Escape);
    assert!(h.state().selected_ids(&ctx).is_empty());
    assert_eq!(h.state().inspected_id(), None);
    keys(&mut h, Modifiers::NONE, Key::Delete);
    assert_eq!(ids(&h), ["greeting", "name", "render"]);

    // A click on empty canvas: nothing either.
    select_two(&mut h);
    let empty = empty_canvas(&h);
    click_at(&mut h, empty, PointerButton::Primary, Modifiers::NONE);
    assert!(h.state().selected_ids(&ctx).is_empty());
    keys(&mut h, Modifiers::NONE, Key::Delete);
    assert_eq!(ids(&h), ["greeting", "name", "render"]);
}

#[test]
fn space_opens_a_fuzzy_quick_add_at_the_pointer_and_enter_adds_the_best_match_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let at = empty_canvas(&h);
    h.event(egui::Event::PointerMoved(at));
    h.run_steps(1);
    keys(&mut h, Modifiers::NONE, Key::Space);
    let search = h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Add a block");
    assert!(search.is_focused(), "typing goes straight into the search");
    search.type_text("zzqx");
    h.run_steps(2);
    h.get_by_label_contains("No block matches “zzqx”");
    let search = h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Add a block");
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    search.type_text("jsnprs");
    h.run_steps(2);
    h.key_press(Key::Enter);
    h.run_steps(3);
    assert!(
        h.query_by_role_and_label(egui::accesskit::Role::TextInput, "Add a block")
            .is_none(),
        "closed"
    );
    let doc = h.state().document.to_doc();
    let added = doc
        .nodes
        .iter()
        .find(|n| n.block == "json.parse")
        .expect("fuzzy `jsnprs` finds Parse JSON");
    let placed = on_screen(&h, added);
    assert!(placed.distance(at) < 30.0, "{placed:?} vs {at:?}");

    // Escape closes it without adding anything.
    keys(&mut h, Modifiers::NONE, Key::Tab);
    h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Add a block");
    h.key_press(Key::Escape);
    h.run_steps(2);
    assert!(
        h.query_by_role_and_label(egui::accesskit::Role::TextInput, "Add a block")
            .is_none()
    );
    assert_eq!(ids(&h).len(), 4);
}

#[test]
fn the_palette_search_is_fuzzy_and_says_when_nothing_matches() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let search = h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Search blocks");
    search.click();
    search.type_text("jsnprs");
    h.run_steps(2);
    assert_eq!(h.get_all_by_label("Parse JSON").count(), 1);
    assert!(
        h.query_by_role_and_label(egui::accesskit::Role::Button, "Graph input")
            .is_none()
    );
    let search = h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Search blocks");
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    search.type_text("zzqx");
    h.run_steps(2);
    h.get_by_label_contains("No block matches “zzqx”");
}

/// Types `query` into the search of an open dropped-wire menu.
fn search_the_wire_menu(h: &mut AppHarness, query: &str) {
    let search = h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Search blocks to wire");
    search.type_text(query);
    h.run_steps(2);
}

/// The block of kind `block` the document now holds.
fn added_block(h: &AppHarness, block: &str) -> agentloom_core::NodeDoc {
    h.state()
        .document
        .to_doc()
        .nodes
        .into_iter()
        .find(|n| n.block == block)
        .unwrap_or_else(|| panic!("no `{block}` added"))
}

#[test]
fn a_dropped_wire_menu_searches_and_enter_adds_the_match_wired() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, _) = drop_the_template_text_wire(&dir);
    h.run_steps(2);
    search_the_wire_menu(&mut h, "jsnprs");
    h.key_press(Key::Enter);
    h.run_steps(3);
    let added = added_block(&h, "json.parse");
    assert!(
        wires(&h).contains(&format!("render.text -> {}.text", added.id)),
        "{:?}",
        wires(&h)
    );
}

#[test]
fn duplicate_lands_at_the_pointer_without_covering_other_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let title = title_of(&h, "render");
    click_at(&mut h, title, PointerButton::Primary, Modifiers::NONE);
    let at = empty_canvas(&h);
    for _ in 0..2 {
        h.event(egui::Event::PointerMoved(at));
        h.run_steps(1);
        keys(&mut h, Modifiers::COMMAND, Key::D);
    }
    h.run_steps(2);
    assert_eq!(ids(&h).len(), 5, "{:?}", ids(&h));
    let first = h.state().node_screen_rect("render_2").unwrap();
    assert!(first.min.distance(at) < 30.0, "{first:?} vs {at:?}");
    let rects: Vec<(String, egui::Rect)> = ids(&h)
        .into_iter()
        .map(|id| {
            let rect = h.state().node_screen_rect(&id).unwrap();
            (id, rect)
        })
        .collect();
    for (i, (a, ra)) in rects.iter().enumerate() {
        for (b, rb) in &rects[i + 1..] {
            assert!(!ra.intersects(*rb), "`{a}` covers `{b}`");
        }
    }
}

fn button<'h>(h: &'h AppHarness, label: &'h str) -> egui_kittest::Node<'h> {
    h.get_by_role_and_label(egui::accesskit::Role::Button, label)
}

#[test]
fn zoom_buttons_show_the_zoom_level_and_change_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    h.state_mut().send(agentloom::app::Command::ActualSize);
    h.run_steps(3);
    button(&h, "100%");
    button(&h, "+").click();
    h.run_steps(3);
    button(&h, "125%");
    button(&h, "−").click();
    h.run_steps(2);
    button(&h, "−").click();
    h.run_steps(3);
    button(&h, "80%");
    // The level is also the way back to actual size.
    button(&h, "80%").click();
    h.run_steps(3);
    button(&h, "100%");
}

#[test]
fn a_click_on_the_minimap_moves_the_view_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let map = h.get_by_label("Minimap").rect();
    let origin = h.state().graph_to_screen(Pos2::ZERO);
    // The left edge of the map is left of every block: the view moves left, so the graph
    // moves right on screen.
    click_at(
        &mut h,
        map.left_center() + egui::vec2(4.0, 0.0),
        PointerButton::Primary,
        Modifiers::NONE,
    );
    h.run_steps(2);
    let moved = h.state().graph_to_screen(Pos2::ZERO);
    assert!(moved.x > origin.x + 20.0, "{origin:?} → {moved:?}");
    assert!(!h.state().document.can_undo(), "the graph did not change");
}

#[test]
fn a_group_frames_the_selection_carries_its_blocks_and_is_saved_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("grouped.agentloom.json");
    let app = agentloom::app::App::new(&example(), Some(file.clone()), &paths(&dir));
    let mut h = support::harness_for(app);
    let name = title_of(&h, "Who to greet");
    let render = title_of(&h, "render");
    click_at(&mut h, name, PointerButton::Primary, Modifiers::SHIFT);
    click_at(&mut h, render, PointerButton::Primary, Modifiers::SHIFT);
    keys(&mut h, Modifiers::COMMAND, Key::G);
    h.run_steps(2);
    let group = h.state().document.groups[0].clone();
    for id in ["name", "render"] {
        let rect = h.state().node_screen_rect(id).unwrap();
        let frame = h
            .state()
            .graph_to_screen(Pos2::new(group.rect[0] as f32, group.rect[1] as f32));
        assert!(
            rect.min.x > frame.x && rect.min.y > frame.y,
            "`{id}` is inside"
        );
    }

    let title = h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Group title");
    title.click();
    h.run_steps(1);
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Group title")
        .type_text("Make the greeting");
    h.run_steps(2);
    h.key_press(Key::Escape);
    h.run_steps(2);

    let before = (
        node_position(&h, "name"),
        node_position(&h, "render"),
        node_position(&h, "greeting"),
    );
    let handle = h.get_by_label("Move").rect().center();
    drag(
        &mut h,
        handle,
        handle + egui::vec2(0.0, 150.0),
        Modifiers::NONE,
    );
    let after = (
        node_position(&h, "name"),
        node_position(&h, "render"),
        node_position(&h, "greeting"),
    );
    assert!(after.0[1] > before.0[1] + 50.0, "{before:?} → {after:?}");
    assert!(after.1[1] > before.1[1] + 50.0, "{before:?} → {after:?}");
    assert_eq!(after.2, before.2, "the block outside stays");

    keys(&mut h, Modifiers::COMMAND, Key::S);
    let saved = agentloom::app::load_graph(&file).unwrap();
    assert_eq!(saved.groups.len(), 1);
    assert_eq!(saved.groups[0].title, "Make the greeting");
    assert!(saved.groups[0].rect[1] > group.rect[1] + 50.0);

    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(
        node_position(&h, "name"),
        before.0,
        "the move is one undo step"
    );
}

#[test]
fn a_constant_feeds_a_text_input_from_the_dropped_wire_menu() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = example();
    doc.edges.retain(|e| e.to.0 != "render");
    let mut h = harness(&doc, &paths(&dir));
    // The `name` input pin sits on the left edge of the node, level with its name.
    let pin = Pos2::new(
        h.state().node_screen_rect("render").unwrap().left(),
        canvas_text(&h, "name").y,
    );
    let to = empty_canvas(&h);
    drag(&mut h, pin, to, Modifiers::NONE);
    h.run_steps(2);
    search_the_wire_menu(&mut h, "constant");
    assert!(h.query_by_label("No block fits this pin").is_none());
    h.key_press(Key::Enter);
    h.run_steps(3);
    let added = added_block(&h, "data.constant");
    assert!(
        wires(&h).contains(&format!("{}.value -> render.name", added.id)),
        "{:?}",
        wires(&h)
    );
}

/// How a person leaves a dropped-wire menu in which nothing was found.
#[derive(Clone, Copy, Debug)]
enum Leave {
    Open,
    Escape,
    ClickAway,
}

#[test]
fn a_block_added_at_a_dropped_wire_lands_at_the_latest_drop_not_an_earlier_menu() {
    for leave in [Leave::Open, Leave::Escape, Leave::ClickAway] {
        // The first on the right, the second on the left, far from it.
        block_lands_at_the_latest_drop(leave, empty_canvas, |h, first| {
            let name = h.state().node_screen_rect("name").unwrap();
            Pos2::new(name.center().x, first.y - 40.0)
        });
    }
}

#[test]
fn a_wire_dropped_where_an_empty_menu_shows_adds_its_block_at_that_drop() {
    // The first on the left, the second a little right of it, where the first menu ("No
    // block fits", left open) shows: the block once landed at the first drop.
    for leave in [Leave::Open, Leave::Escape, Leave::ClickAway] {
        block_lands_at_the_latest_drop(
            leave,
            |h| {
                let name = h.state().node_screen_rect("name").unwrap();
                Pos2::new(name.center().x, name.bottom() + 80.0)
            },
            |_, first| first + egui::vec2(90.0, 30.0),
        );
    }
}

/// A wire dropped at `first` and its menu left (`leave`) with nothing found, then another
/// dropped at `second` (given the first drop) and a block picked there: it lands at
/// `second`.
fn block_lands_at_the_latest_drop(
    leave: Leave,
    first: fn(&AppHarness) -> Pos2,
    second: fn(&AppHarness, Pos2) -> Pos2,
) {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, first) = drop_the_template_text_wire_at(&dir, first);
    h.run_steps(2);
    eprintln!("leaving the first menu by {leave:?}");
    search_the_wire_menu(&mut h, "zzqx");
    h.get_by_label("No block fits this pin");
    match leave {
        Leave::Open => {}
        Leave::Escape => keys(&mut h, Modifiers::NONE, Key::Escape),
        Leave::ClickAway => {
            let away = first - egui::vec2(60.0, 120.0);
            click_at(&mut h, away, PointerButton::Primary, Modifiers::NONE);
        }
    }

    // Another dropped, and a block picked there.
    let pin = Pos2::new(
        h.state().node_screen_rect("render").unwrap().right(),
        support::pin_label_in(&h, "render", "text").y,
    );
    let latest = second(&h, first);
    assert!(latest.distance(first) > 60.0, "{first:?} {latest:?}");
    drag(&mut h, pin, latest, Modifiers::NONE);
    h.run_steps(2);
    // The new menu starts with an empty search; the block is searched for and picked
    // (picked from the list as it stands should a menu show no search field, so that a
    // block landing elsewhere is what fails).
    if h.query_by_role_and_label(egui::accesskit::Role::TextInput, "Search blocks to wire")
        .is_some()
    {
        search_the_wire_menu(&mut h, "parse");
    }
    let parse = in_menu(&h, "Parse JSON");
    click_at(&mut h, parse, PointerButton::Primary, Modifiers::NONE);
    assert_template_text_feeds_a_parse_at(&h, latest);
}

/// Where a block of the document is on screen.
fn on_screen(h: &AppHarness, node: &agentloom_core::NodeDoc) -> Pos2 {
    h.state()
        .graph_to_screen(Pos2::new(node.position[0] as f32, node.position[1] as f32))
}

/// A Parse JSON block was added, wired from the template's `text`, at `at` on screen.
fn assert_template_text_feeds_a_parse_at(h: &AppHarness, at: Pos2) {
    let added = added_block(h, "json.parse");
    let placed = on_screen(h, &added);
    assert!(
        placed.distance(at) < 30.0,
        "placed where the wire was dropped: {placed:?} vs {at:?}"
    );
    assert!(
        wires(h).contains(&format!("render.text -> {}.text", added.id)),
        "{:?}",
        wires(h)
    );
}

#[test]
fn a_dropped_wire_menu_near_the_canvas_bottom_stays_inside_the_canvas() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, _) = drop_the_template_text_wire_at(&dir, |h| {
        let greeting = h.state().node_screen_rect("greeting").unwrap();
        Pos2::new(
            greeting.center().x,
            h.state().canvas_screen_rect().bottom() - 150.0,
        )
    });
    h.run_steps(3);
    let canvas = h.state().canvas_screen_rect();
    let title = h.get_by_label("Add a block wired here").rect().center();
    let layer = h.ctx.layer_id_at(title).unwrap();
    let menu = h.ctx.memory(|m| m.area_rect(layer.id)).unwrap();
    assert!(
        canvas.contains_rect(menu.shrink(0.5)),
        "the menu {menu:?} runs out of the canvas {canvas:?}"
    );
}

#[test]
fn escape_closes_a_dropped_wire_menu_even_while_its_search_has_the_keyboard() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, _) = drop_the_template_text_wire(&dir);
    h.run_steps(2);
    assert!(
        h.get_by_role_and_label(egui::accesskit::Role::TextInput, "Search blocks to wire")
            .is_focused()
    );
    keys(&mut h, Modifiers::NONE, Key::Escape);
    assert!(
        h.query_by_label("Add a block wired here").is_none(),
        "closed"
    );
    assert_eq!(ids(&h), ["greeting", "name", "render"], "nothing added");
}
