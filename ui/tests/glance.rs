//! What the editor shows at a glance: safe mode while it is on, step lines in glyphs the
//! app's fonts have, nothing on a node that only served as a tool, and a graph input named
//! after the pin it came from. Driven through the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::{App, Command};
use egui::accesskit::Role;
use egui::{Key, Modifiers};
use egui_kittest::kittest::Queryable as _;
use support::{example, harness_for, keys, paths};

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
