//! Which file dialog Open uses, found out by the app itself on a real (private) session bus:
//! with no desktop portal and no zenity, or a portal that cannot show a file chooser, the app
//! asks for the path in a prompt of its own instead of a dialog that never appears.
//!
//! The app reads the bus address and PATH from its environment, so each case runs the
//! kittest below in a child process of this test binary with that environment.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use agentloom::app::{App, AppPaths, EXAMPLE_GRAPH};
use agentloom_core::GraphDoc;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;

/// Set in the child process that runs the app.
const CHILD: &str = "AGENTLOOM_TEST_FILE_DIALOG_CHILD";

/// A session bus of its own, whose only activatable services are those in `services`.
struct PrivateBus {
    daemon: Child,
    address: String,
}

impl PrivateBus {
    fn start(dir: &Path, services: &Path) -> Self {
        let config = dir.join("session.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <servicedir>{}</servicedir>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
                dir.join("bus").display(),
                services.display()
            ),
        )
        .unwrap();
        let mut daemon = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut address = String::new();
        BufReader::new(daemon.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        Self {
            daemon,
            address: address.trim().to_owned(),
        }
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

fn dbus_daemon_installed() -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join("dbus-daemon").is_file())
    })
}

/// Runs `open_asks_for_the_path_in_the_app` in a child process on `bus`, with a PATH that has
/// no zenity.
fn open_in_child(bus: &PrivateBus, dir: &Path) {
    let no_tools = dir.join("bin");
    std::fs::create_dir_all(&no_tools).unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "open_asks_for_the_path_in_the_app",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD, dir)
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .env("PATH", &no_tools)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && said.contains("1 passed"),
        "{said}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn without_a_portal_or_zenity_open_asks_for_the_path() {
    if !dbus_daemon_installed() {
        assert!(
            std::env::var_os("AGENTLOOM_SKIP_PEERS").is_some(),
            "dbus-daemon is not installed (apt dbus-daemon)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let services = dir.path().join("services");
    std::fs::create_dir(&services).unwrap();
    let bus = PrivateBus::start(dir.path(), &services);
    open_in_child(&bus, dir.path());
}

#[test]
fn a_portal_that_cannot_start_is_no_file_dialog() {
    if !dbus_daemon_installed() {
        assert!(
            std::env::var_os("AGENTLOOM_SKIP_PEERS").is_some(),
            "dbus-daemon is not installed (apt dbus-daemon)"
        );
        return;
    }
    // The portal is installed (the bus can start it) but fails as it starts, as one without
    // a working backend does: the dialog would be cancelled before it shows.
    let dir = tempfile::tempdir().unwrap();
    let services = dir.path().join("services");
    std::fs::create_dir(&services).unwrap();
    std::fs::write(
        services.join("org.freedesktop.portal.Desktop.service"),
        "[D-BUS Service]\nName=org.freedesktop.portal.Desktop\nExec=/bin/false\n",
    )
    .unwrap();
    let bus = PrivateBus::start(dir.path(), &services);
    open_in_child(&bus, dir.path());
}

/// The app itself, in the environment its parent test made: File → Open (Ctrl+O) shows the
/// in-app prompt.
#[test]
#[ignore = "run by the tests above, in the environment they prepare"]
fn open_asks_for_the_path_in_the_app() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return;
    };
    let dir = Path::new(&dir);
    let paths = AppPaths {
        run_log: Some(dir.join("runs.sqlite3")),
        data_dir: None,
        workspace: Some(dir.to_owned()),
        credentials_dir: None,
    };
    let doc = GraphDoc::from_json_str(EXAMPLE_GRAPH).unwrap();
    let app = App::new(&doc, None, &paths);
    let mut h = Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .build_ui_state(|ui, app: &mut App| app.show(ui), app);
    h.run_steps(3);
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::O);
    h.run_steps(3);
    h.get_by_label("Open graph");
    h.get_by_label_contains("No file dialog is available");
}
