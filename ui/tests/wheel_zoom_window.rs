//! Ctrl+wheel zooms the canvas a tenth per notch in the real window under Xvfb, where a
//! notch turned with `xdotool click 4` reaches winit as a button press and a release.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

#[path = "support/xvfb.rs"]
mod xvfb;

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

/// Waits until `log` (the app's stderr, written to a file) holds `text`.
fn wait_for_log(log: &Path, text: &str, deadline: Instant) -> String {
    loop {
        let mut seen = String::new();
        if let Ok(mut file) = std::fs::File::open(log) {
            file.read_to_string(&mut seen).unwrap();
        }
        if seen.contains(text) {
            return seen;
        }
        assert!(Instant::now() < deadline, "no `{text}` in the log:\n{seen}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn three_ctrl_wheel_notches_zoom_a_tenth_each_in_the_real_window() {
    if !xvfb::tools_present(&["Xvfb", "xdotool"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let display = xvfb::Display::start();
    let log = dir.path().join("app.log");
    let graph =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    let mut app = display.open_app(
        &graph,
        dir.path(),
        Some(&log),
        &[("AGENTLOOM_LOG", "agentloom_app=debug")],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    wait_for_log(&log, "first frame", deadline);
    std::thread::sleep(Duration::from_millis(1500));
    // No window manager: the keyboard goes to the window once it is given the focus.
    display.xdotool(&["windowfocus", "--sync", &display.app_window()]);

    // The pointer over empty canvas under the graph, the view at 100 %.
    display.xdotool(&["mousemove", "640", "500"]);
    std::thread::sleep(Duration::from_millis(300));
    display.xdotool(&["key", "ctrl+0"]);
    std::thread::sleep(Duration::from_millis(800));
    display.xdotool(&["keydown", "ctrl"]);
    for _ in 0..3 {
        display.xdotool(&["click", "4"]);
        std::thread::sleep(Duration::from_millis(700));
    }
    display.xdotool(&["keyup", "ctrl"]);
    std::thread::sleep(Duration::from_millis(1000));
    display.xdotool(&["key", "ctrl+q"]);

    let seen = wait_for_log(&log, "zoom as the window closes", deadline);
    let line = seen
        .lines()
        .find(|l| l.contains("zoom as the window closes"))
        .unwrap();
    let zoom: f32 = line
        .split("zoom=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no zoom in `{line}`"))
        .parse()
        .unwrap();
    assert!(
        (zoom - 1.1_f32.powi(3)).abs() < 0.02,
        "three notches from 100 % zoomed to {:.1} % (10 % a notch is 133.1 %)",
        zoom * 100.0
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the app did not quit on Ctrl+Q");
        std::thread::sleep(Duration::from_millis(100));
    }
}
