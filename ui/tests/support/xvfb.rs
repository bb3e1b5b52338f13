//! The real window under Xvfb: a display of its own, the app opened on it, and xdotool
//! finding and driving its window.
#![cfg(target_os = "linux")]
#![allow(dead_code, reason = "each test uses a part")]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills a process started here when the test ends, however it ends.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `tool` is on the PATH.
pub fn installed(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// Whether every one of `tools` is installed; when one is not, false with
/// `AGENTLOOM_SKIP_PEERS` set (the test is skipped), else a failed test naming it.
pub fn tools_present(tools: &[&str]) -> bool {
    for tool in tools {
        if !installed(tool) {
            assert!(
                std::env::var_os("AGENTLOOM_SKIP_PEERS").is_some(),
                "{tool} is not installed (apt xvfb xdotool x11-utils)"
            );
            return false;
        }
    }
    true
}

/// An Xvfb display of 1280×800, stopped when dropped.
pub struct Display {
    pub name: String,
    _xvfb: Stopped,
}

/// Xvfb, asked to stop (SIGTERM) when the test ends, so it removes its lock file and socket:
/// a killed server leaves them behind and its number is lost to the next tests.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Display {
    /// A new display on a number Xvfb finds free itself (`-displayfd`): choosing one from
    /// the lock files races with other servers starting and with stale files.
    pub fn start() -> Display {
        use std::io::BufRead as _;
        let mut child = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-screen",
                "0",
                "1280x800x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut number = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut number)
            .unwrap();
        let xvfb = Stopped(child);
        let number = number.trim();
        assert!(
            !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()),
            "Xvfb did not say which display it took ({number:?})"
        );
        Display {
            name: format!(":{number}"),
            _xvfb: xvfb,
        }
    }

    /// `agentloom open GRAPH` on this display, its run log and data inside `dir`, its
    /// stderr into `stderr` (else nowhere), with `env` set.
    pub fn open_app(
        &self,
        graph: &Path,
        dir: &Path,
        stderr: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Killed {
        let runtime = dir.join("runtime");
        std::fs::create_dir_all(&runtime).unwrap();
        let stderr = stderr.map_or_else(Stdio::null, |file| {
            Stdio::from(std::fs::File::create(file).unwrap())
        });
        Killed(
            Command::new(env!("CARGO_BIN_EXE_agentloom"))
                .args(["open", graph.to_str().unwrap(), "--db"])
                .arg(dir.join("runs.sqlite3"))
                .env("DISPLAY", &self.name)
                .env_remove("WAYLAND_DISPLAY")
                .env_remove("WAYLAND_SOCKET")
                .env("XDG_RUNTIME_DIR", &runtime)
                .env("XDG_DATA_HOME", dir.join("data"))
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .unwrap(),
        )
    }

    /// The id of the app's window, once it is there (30 s at most).
    pub fn app_window(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = self.output("xdotool", &["search", "--name", "Agentloom"]);
            if let Some(id) = found.lines().next() {
                return id.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "no Agentloom window on {}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What `tool ARGS` prints on this display.
    pub fn output(&self, tool: &str, args: &[&str]) -> String {
        let out = Command::new(tool)
            .args(args)
            .env("DISPLAY", &self.name)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `xdotool ARGS` on this display.
    pub fn xdotool(&self, args: &[&str]) {
        let status = Command::new("xdotool")
            .args(args)
            .env("DISPLAY", &self.name)
            .status()
            .unwrap();
        assert!(status.success(), "xdotool {args:?} failed");
    }
}
