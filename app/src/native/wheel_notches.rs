//! One wheel notch, one wheel event. Under X11 a wheel that reports itself as buttons 4–7
//! (the XTEST pointer that `xdotool`, VNC and remote desktops drive, mice without smooth
//! scrolling) reaches the window as a press and a release, and winit 0.30 turns both into
//! a wheel turn: each notch then scrolls or zooms twice (Ctrl+wheel 21 %, not 10 %).
//! Wheels with smooth scrolling arrive as one motion per notch and are left alone.

/// Whether the window's wheel events come through X11, where notches can arrive doubled:
/// winit opens the window on X11 unless a Wayland display is named, as below.
#[cfg(target_os = "linux")]
pub(crate) fn wheel_may_double() -> bool {
    let named = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
    !named("WAYLAND_DISPLAY") && !named("WAYLAND_SOCKET") && named("DISPLAY")
}

/// Windows and macOS report one wheel event per notch.
#[cfg(not(target_os = "linux"))]
pub(crate) fn wheel_may_double() -> bool {
    false
}

/// Drops the second wheel event of each press-and-release pair: two whole-line turns in
/// the same direction, one right after the other in the same batch of input (only the
/// modifiers between them).
pub(crate) fn one_event_per_notch(raw: &mut egui::RawInput) {
    let mut previous_kept: Option<egui::Vec2> = None;
    raw.events.retain(|event| {
        let turn = match event {
            egui::Event::MouseWheel {
                unit: egui::MouseWheelUnit::Line,
                delta,
                ..
            } if is_whole_line(*delta) => *delta,
            // winit repeats the modifiers with each button event, between press and release.
            egui::Event::ModifiersChanged(_) => return true,
            _ => {
                previous_kept = None;
                return true;
            }
        };
        if previous_kept == Some(turn) {
            // The release of the notch just kept.
            previous_kept = None;
            false
        } else {
            previous_kept = Some(turn);
            true
        }
    });
}

/// One line up, down, left or right: what a wheel button's press or release becomes.
fn is_whole_line(delta: egui::Vec2) -> bool {
    let one = |v: f32| (v.abs() - 1.0).abs() < f32::EPSILON;
    (one(delta.x) && delta.y == 0.0) || (one(delta.y) && delta.x == 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel(x: f32, y: f32) -> egui::Event {
        egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Line,
            delta: egui::vec2(x, y),
            phase: egui::TouchPhase::Move,
            modifiers: egui::Modifiers::COMMAND,
        }
    }

    fn turns(events: Vec<egui::Event>) -> Vec<egui::Event> {
        let mut raw = egui::RawInput {
            events,
            ..Default::default()
        };
        one_event_per_notch(&mut raw);
        raw.events
    }

    #[test]
    fn a_press_and_its_release_are_one_notch() {
        assert_eq!(turns(vec![wheel(0.0, 1.0), wheel(0.0, 1.0)]).len(), 1);
        assert_eq!(
            turns(vec![wheel(0.0, -1.0); 6]).len(),
            3,
            "three notches down"
        );
    }

    #[test]
    fn other_turns_are_kept() {
        // Up then down, a fraction of a line (smooth scrolling), points.
        assert_eq!(turns(vec![wheel(0.0, 1.0), wheel(0.0, -1.0)]).len(), 2);
        assert_eq!(turns(vec![wheel(0.0, 0.5), wheel(0.0, 0.5)]).len(), 2);
        let points = egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, 1.0),
            phase: egui::TouchPhase::Move,
            modifiers: egui::Modifiers::NONE,
        };
        assert_eq!(turns(vec![points.clone(), points]).len(), 2);
        // The modifiers repeated between a press and its release.
        let ctrl = egui::Event::ModifiersChanged(egui::Modifiers::COMMAND);
        assert_eq!(
            turns(vec![wheel(0.0, 1.0), ctrl.clone(), ctrl, wheel(0.0, 1.0)]).len(),
            3
        );
        // Something else between two notches.
        let key = egui::Event::PointerMoved(egui::pos2(1.0, 1.0));
        assert_eq!(turns(vec![wheel(0.0, 1.0), key, wheel(0.0, 1.0)]).len(), 3);
    }
}
