//! The real window under Xvfb names itself as the desktop entry expects
//! (`StartupWMClass=agentloom`), so a desktop groups it under the app's icon.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

#[path = "support/xvfb.rs"]
mod xvfb;

use std::path::Path;

#[test]
fn the_window_class_is_the_desktop_entrys() {
    if !xvfb::tools_present(&["Xvfb", "xdotool", "xprop"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let display = xvfb::Display::start();
    let graph =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    let _app = display.open_app(&graph, dir.path(), None, &[]);
    let window = display.app_window();
    let class = display.output("xprop", &["-id", &window, "WM_CLASS"]);
    // `WM_CLASS(STRING) = "instance", "class"`: the class is what StartupWMClass matches.
    let desktop = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/linux/agentloom.desktop"),
    )
    .unwrap();
    assert!(desktop.contains("StartupWMClass=agentloom"), "{desktop}");
    // Both parts: desktops match StartupWMClass against the instance name or the class.
    assert_eq!(
        class.trim_end(),
        "WM_CLASS(STRING) = \"agentloom\", \"agentloom\"",
        "the window's instance name and class are not the desktop entry's agentloom"
    );
}
