//! The real window under Xvfb names itself as the desktop entry expects
//! (`StartupWMClass=agentloom`), so a desktop groups it under the app's icon.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills a process started here when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn installed(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

#[test]
fn the_window_class_is_the_desktop_entrys() {
    for tool in ["Xvfb", "xdotool", "xprop"] {
        if !installed(tool) {
            if std::env::var_os("AGENTLOOM_SKIP_PEERS").is_some() {
                return;
            }
            panic!("{tool} is not installed (apt xvfb xdotool x11-utils)");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let display = (120..200)
        .find(|n| !Path::new(&format!("/tmp/.X{n}-lock")).exists())
        .unwrap();
    let display = format!(":{display}");
    let _xvfb = Killed(
        Command::new("Xvfb")
            .args([
                display.as_str(),
                "-screen",
                "0",
                "1280x800x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(800));
    let runtime = dir.path().join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let graph =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.agentloom.json");
    let _app = Killed(
        Command::new(env!("CARGO_BIN_EXE_agentloom"))
            .args(["open", graph.to_str().unwrap(), "--db"])
            .arg(dir.path().join("runs.sqlite3"))
            .env("DISPLAY", &display)
            .env_remove("WAYLAND_DISPLAY")
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let window = loop {
        let found = Command::new("xdotool")
            .args(["search", "--name", "Agentloom"])
            .env("DISPLAY", &display)
            .output()
            .unwrap();
        let id = String::from_utf8_lossy(&found.stdout)
            .lines()
            .next()
            .map(str::to_owned);
        if let Some(id) = id {
            break id;
        }
        assert!(
            Instant::now() < deadline,
            "no Agentloom window on {display}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let class = Command::new("xprop")
        .args(["-id", &window, "WM_CLASS"])
        .env("DISPLAY", &display)
        .output()
        .unwrap();
    let class = String::from_utf8_lossy(&class.stdout).into_owned();
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
