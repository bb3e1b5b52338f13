//! The keyboard on the canvas: its shortcuts act only while the canvas has the keyboard
//! (never through a dialog, window or field), Select all, shift-click adding to the
//! selection, and a click on the canvas taking the keyboard back from the inspector.
//! Driven through the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::Command;
use egui::accesskit::Role;
use egui::{Key, Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::Queryable as _;
use support::{AppHarness, click_at, example, harness, ids, keys, paths, title_of};

/// What a canvas shortcut could change: the graph, the view, the inspector, the
/// selection, the quick-add search.
#[derive(Debug, PartialEq)]
struct CanvasState {
    graph: String,
    view: (Pos2, Pos2),
    inspected: Option<String>,
    selected: Vec<String>,
    quick_add_open: bool,
}

fn canvas_state(h: &AppHarness) -> CanvasState {
    let ctx = h.ctx.clone();
    let app = h.state();
    CanvasState {
        graph: app.document.to_doc().to_json_string(),
        view: (
            app.graph_to_screen(Pos2::ZERO),
            app.graph_to_screen(Pos2::new(100.0, 100.0)),
        ),
        inspected: app.inspected_id().map(str::to_owned),
        selected: app.selected_ids(&ctx),
        quick_add_open: h
            .query_by_role_and_label(Role::TextInput, "Add a block")
            .is_some(),
    }
}

/// A point of the canvas with no node under it.
fn empty_canvas(h: &AppHarness) -> Pos2 {
    let greeting = h.state().node_screen_rect("greeting").unwrap();
    Pos2::new(greeting.center().x, greeting.bottom() + 200.0)
}

fn send(h: &mut AppHarness, command: Command) {
    h.state_mut().send(command);
    h.run_steps(3);
}

/// The example graph in a state where each canvas shortcut would change something: an
/// edit to undo and one to redo, two blocks selected, the view zoomed away from the fit,
/// the pointer over empty canvas.
fn canvas_ready(dir: &tempfile::TempDir) -> AppHarness {
    let mut h = harness(&example(), &paths(dir));
    h.state_mut().set_native_file_dialogs(false);
    send(
        &mut h,
        Command::SetGraphInfo {
            name: "Hello again".into(),
            description: String::new(),
        },
    );
    send(&mut h, Command::GroupSelection(Vec::new()));
    send(&mut h, Command::Undo);
    send(&mut h, Command::ClearSelection);
    let name = title_of(&h, "Who to greet");
    let render = title_of(&h, "render");
    click_at(&mut h, name, PointerButton::Primary, Modifiers::SHIFT);
    click_at(&mut h, render, PointerButton::Primary, Modifiers::SHIFT);
    send(&mut h, Command::FitView);
    send(&mut h, Command::Zoom(0.7));
    let at = empty_canvas(&h);
    h.event(egui::Event::PointerMoved(at));
    h.run_steps(2);
    assert_eq!(canvas_state(&h).selected, ["name", "render"]);
    h
}

/// A canvas shortcut as a person gives it.
#[derive(Clone, Copy, Debug)]
enum Shortcut {
    Key(Modifiers, Key),
    /// Letters typed as text (the platform sends a key press and the text of each).
    Typed(&'static str),
    /// Ctrl+V: the platform sends the clipboard's text as a paste event.
    PasteGraph,
}

/// Every key the canvas acts on; Escape last, as some dialogs close on it.
const SHORTCUTS: &[Shortcut] = &[
    Shortcut::Key(Modifiers::NONE, Key::F),
    Shortcut::Typed("fake"),
    Shortcut::Key(Modifiers::COMMAND, Key::Num0),
    Shortcut::Key(Modifiers::NONE, Key::Space),
    Shortcut::Key(Modifiers::NONE, Key::Tab),
    Shortcut::Key(Modifiers::COMMAND, Key::A),
    Shortcut::Key(Modifiers::COMMAND, Key::D),
    Shortcut::Key(Modifiers::COMMAND, Key::G),
    Shortcut::Key(Modifiers::COMMAND, Key::Z),
    Shortcut::Key(Modifiers::COMMAND.plus(Modifiers::SHIFT), Key::Z),
    Shortcut::Key(Modifiers::COMMAND, Key::Y),
    Shortcut::PasteGraph,
    Shortcut::Key(Modifiers::NONE, Key::Delete),
    Shortcut::Key(Modifiers::NONE, Key::Backspace),
    Shortcut::Key(Modifiers::NONE, Key::Escape),
];

fn press(h: &mut AppHarness, shortcut: Shortcut) {
    match shortcut {
        Shortcut::Key(modifiers, key) => keys(h, modifiers, key),
        Shortcut::Typed(text) => {
            for letter in text.chars() {
                let key = Key::from_name(&letter.to_uppercase().to_string()).unwrap();
                h.key_press(key);
                h.event(egui::Event::Text(letter.to_string()));
                h.run_steps(1);
            }
            h.run_steps(2);
        }
        Shortcut::PasteGraph => {
            let clip = example().to_json_string();
            h.event(egui::Event::Paste(clip));
            h.run_steps(3);
        }
    }
}

/// The dialogs and windows a person types in, each with the command that opens it.
/// Each with its title.
fn dialogs() -> Vec<(&'static str, Command)> {
    vec![
        // Without a keychain its fields are disabled and never take the keyboard.
        ("Credentials", Command::OpenCredentials),
        ("MCP servers", Command::OpenMcpServers),
        ("Examples", Command::ShowExamples),
        // The path prompt of Save As.
        ("Save graph", Command::SaveAsDialog),
        ("Evaluations", Command::OpenEvaluations),
        ("Run inputs", Command::Run),
    ]
}

/// Presses each canvas shortcut in turn; none may change the canvas.
fn every_shortcut_changes_nothing(h: &mut AppHarness, situation: &str) {
    let before = canvas_state(h);
    for shortcut in SHORTCUTS {
        press(h, *shortcut);
        assert_eq!(
            canvas_state(h),
            before,
            "{shortcut:?} {situation} changed the canvas"
        );
    }
}

#[test]
fn no_canvas_shortcut_acts_while_a_dialog_or_window_is_open() {
    let dir = tempfile::tempdir().unwrap();
    for (dialog, opens) in dialogs() {
        let mut h = canvas_ready(&dir);
        send(&mut h, opens);
        assert!(
            h.query_all_by_label(dialog).next().is_some(),
            "{dialog} is open"
        );
        every_shortcut_changes_nothing(&mut h, &format!("with {dialog} open"));
    }
}

#[test]
fn with_no_dialog_open_each_canvas_shortcut_acts() {
    // The other side of the test above: the same keys, the same state, no dialog.
    let dir = tempfile::tempdir().unwrap();
    for shortcut in SHORTCUTS {
        let mut h = canvas_ready(&dir);
        let before = canvas_state(&h);
        press(&mut h, *shortcut);
        assert_ne!(canvas_state(&h), before, "{shortcut:?} did nothing");
    }
}

#[test]
fn select_all_in_the_edit_menu_and_ctrl_a_select_every_block_but_not_while_typing() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let ctx = h.ctx.clone();

    h.get_by_role_and_label(Role::Button, "Edit").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Select all Ctrl+A")
        .click();
    h.run_steps(3);
    let all = |h: &AppHarness| {
        let mut selected = h.state().selected_ids(&ctx);
        selected.sort();
        selected
    };
    assert_eq!(all(&h), ["greeting", "name", "render"]);
    h.get_by_label("3 blocks selected");
    // Delete acts on all of them; undo brings them back.
    keys(&mut h, Modifiers::NONE, Key::Delete);
    assert!(ids(&h).is_empty());
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    assert_eq!(ids(&h), ["greeting", "name", "render"]);

    // Ctrl+A after a plain click on empty canvas selects all again.
    let empty = empty_canvas(&h);
    click_at(&mut h, empty, PointerButton::Primary, Modifiers::NONE);
    assert!(h.state().selected_ids(&ctx).is_empty());
    keys(&mut h, Modifiers::COMMAND, Key::A);
    assert_eq!(all(&h), ["greeting", "name", "render"]);

    // In a text field Ctrl+A is the field's own: the canvas selection stays as it was.
    click_at(&mut h, empty, PointerButton::Primary, Modifiers::NONE);
    let search = h.get_by_role_and_label(Role::TextInput, "Search blocks");
    search.click();
    search.type_text("json");
    h.run_steps(2);
    keys(&mut h, Modifiers::COMMAND, Key::A);
    assert!(h.state().selected_ids(&ctx).is_empty());
}

#[test]
fn a_shift_drag_box_adds_its_blocks_to_the_one_a_plain_click_picked() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let ctx = h.ctx.clone();
    let name = title_of(&h, "Who to greet");
    click_at(&mut h, name, PointerButton::Primary, Modifiers::NONE);
    let greeting = h.state().node_screen_rect("greeting").unwrap();
    support::drag(
        &mut h,
        greeting.left_top() - egui::vec2(10.0, 10.0),
        greeting.right_bottom() + egui::vec2(10.0, 10.0),
        Modifiers::SHIFT,
    );
    let mut selected = h.state().selected_ids(&ctx);
    selected.sort();
    assert_eq!(selected, ["greeting", "name"]);
}

#[test]
fn shift_click_adds_a_block_to_the_one_a_plain_click_picked() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let ctx = h.ctx.clone();

    let name = title_of(&h, "Who to greet");
    click_at(&mut h, name, PointerButton::Primary, Modifiers::NONE);
    assert_eq!(h.state().inspected_id(), Some("name"));
    let render = title_of(&h, "render");
    click_at(&mut h, render, PointerButton::Primary, Modifiers::SHIFT);
    let mut selected = h.state().selected_ids(&ctx);
    selected.sort();
    assert_eq!(selected, ["name", "render"]);
    h.get_by_label("2 blocks selected");
    let greeting = title_of(&h, "greeting");
    click_at(&mut h, greeting, PointerButton::Primary, Modifiers::SHIFT);
    assert_eq!(h.state().selected_ids(&ctx).len(), 3);

    // Ctrl+D duplicates the three; a plain click afterwards selects one again.
    keys(&mut h, Modifiers::COMMAND, Key::D);
    assert_eq!(
        ids(&h).len(),
        6,
        "Ctrl+D duplicated all three: {:?}",
        ids(&h)
    );
    keys(&mut h, Modifiers::COMMAND, Key::Z);
    let empty = empty_canvas(&h);
    click_at(&mut h, empty, PointerButton::Primary, Modifiers::NONE);
    assert!(h.state().selected_ids(&ctx).is_empty());
    let render = title_of(&h, "render");
    click_at(&mut h, render, PointerButton::Primary, Modifiers::NONE);
    assert!(h.state().selected_ids(&ctx).is_empty());
    assert_eq!(h.state().inspected_id(), Some("render"));
}

/// Presses and releases the primary button at `pos` in separate frames, as a hand does.
fn slow_click(h: &mut AppHarness, pos: Pos2) {
    h.event(egui::Event::PointerMoved(pos));
    h.run_steps(2);
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed,
            modifiers: Modifiers::NONE,
        });
        h.run_steps(2);
    }
}

#[test]
fn a_click_on_empty_canvas_takes_the_keyboard_back_from_the_inspector() {
    // After typing in the inspector, Tab walks the keyboard on through the inspector and
    // the canvas; wherever it is, a click on empty canvas takes it back, so Space and
    // Tab over the canvas open quick add again.
    let dir = tempfile::tempdir().unwrap();
    for tabs in 0..6 {
        let mut h = harness(&example(), &paths(&dir));
        let field = h
            .get_by_role_and_label(Role::TextInput, "Graph name")
            .rect()
            .center();
        slow_click(&mut h, field);
        h.event(egui::Event::Text("!".into()));
        h.run_steps(2);
        assert!(
            h.ctx.egui_wants_keyboard_input(),
            "the field has the keyboard"
        );
        for _ in 0..tabs {
            keys(&mut h, Modifiers::NONE, Key::Tab);
        }

        let empty = empty_canvas(&h);
        slow_click(&mut h, empty);
        assert!(
            !h.ctx.egui_wants_keyboard_input(),
            "after {tabs} Tab(s) a click on the canvas left the keyboard with {:?}",
            h.ctx.memory(|m| m.focused())
        );
        for key in [Key::Space, Key::Tab] {
            h.event(egui::Event::PointerMoved(empty));
            h.run_steps(1);
            keys(&mut h, Modifiers::NONE, key);
            assert!(
                h.query_by_role_and_label(Role::TextInput, "Add a block")
                    .is_some(),
                "{key:?} after {tabs} Tab(s) and a click on the canvas opens quick add"
            );
            h.key_press(Key::Escape);
            h.run_steps(2);
        }
        assert_eq!(
            h.state().document.to_doc().name,
            "Hello!",
            "the edit stayed"
        );
    }
}

/// Writes a file, so that in safe mode the run waits for approval.
const WRITE: &str = r#"{"format":"agentloom.graph","version":1,"name":"write",
  "settings":{"safe_mode":true},"nodes":[
    {"id":"text","block":"data.constant","position":[0,0],"config":{"value":"hi","type":"text"}},
    {"id":"write","block":"file.write","position":[250,0],"config":{"path":"out/note.txt"}},
    {"id":"out","block":"graph.output","position":[500,0],"config":{"name":"path"}}],
  "edges":[{"from":["text","value"],"to":["write","content"]},
           {"from":["write","path"],"to":["out","value"]}]}"#;

#[test]
fn keys_over_the_approval_window_do_not_reach_the_canvas() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&support::graph(WRITE), &paths(&dir));
    send(&mut h, Command::Run);
    support::wait_until(&mut h, "the approval", |h| {
        !h.state().run.approvals.is_empty()
    });
    let text = title_of(&h, "text");
    click_at(&mut h, text, PointerButton::Primary, Modifiers::NONE);
    send(&mut h, Command::Zoom(0.7));
    assert_eq!(h.state().inspected_id(), Some("text"));

    // The pointer rests on the window's text, between its buttons.
    let over = h
        .get_by_label_contains("waits for approval")
        .rect()
        .center();
    h.event(egui::Event::PointerMoved(over));
    h.run_steps(2);
    let before = canvas_state(&h);
    every_shortcut_changes_nothing(&mut h, "over the approval window");
    // Over the canvas again, the keys act.
    let empty = empty_canvas_of(&h, "write");
    h.event(egui::Event::PointerMoved(empty));
    h.run_steps(2);
    keys(&mut h, Modifiers::NONE, Key::F);
    assert_ne!(canvas_state(&h).view, before.view, "F fits the view");
}

/// A point of the canvas with no node under it, above `node`.
fn empty_canvas_of(h: &AppHarness, node: &str) -> Pos2 {
    let rect = h.state().node_screen_rect(node).unwrap();
    Pos2::new(rect.center().x, rect.top() - 60.0)
}
