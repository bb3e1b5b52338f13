//! Is the process that recorded a `running` run still alive?
//!
//! Each recording process writes an owner token into the runs it records:
//!
//! - on Linux, `linux:<boot id>:<pid>:<start time in clock ticks>` from `/proc`. A process
//!   is alive if the machine has not rebooted since and `/proc/<pid>/stat` shows the same
//!   start time: a pid reused by another process (common in containers, where every run
//!   may be pid 1) has a different start time, so it is not mistaken for the recorder;
//! - elsewhere (or when `/proc` cannot be read), `proc:<random id>`. Another process cannot
//!   be checked, so the recorder refreshes a heartbeat in the run row every few seconds and
//!   a run whose heartbeat is older than [`STALE_HEARTBEAT_MS`] counts as abandoned. A run
//!   wrongly marked so (say, a laptop suspended mid-run) is set right by the recorder's next
//!   write, which carries the true status.
//!
//! The current process is always alive: its own token matches.

use std::sync::OnceLock;

/// How often a recorder refreshes the heartbeat of a running run.
pub(crate) const HEARTBEAT_INTERVAL_MS: u64 = 5_000;
/// A run whose owner cannot be checked is abandoned when its heartbeat is this old.
pub(crate) const STALE_HEARTBEAT_MS: u64 = 60_000;

/// What is known about the owner of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    Alive,
    Dead,
    /// Cannot be checked from here: fall back on the heartbeat.
    Unknown,
}

/// The token of the current process (computed once).
pub(crate) fn this_process_token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        linux_token(std::process::id())
            .unwrap_or_else(|| format!("proc:{}", uuid::Uuid::now_v7().simple()))
    })
}

/// The Linux token of a live process, `None` if `/proc` does not say.
pub(crate) fn linux_token(pid: u32) -> Option<String> {
    let boot_id = boot_id()?;
    let start = proc_start_time(pid)?;
    Some(format!("linux:{boot_id}:{pid}:{start}"))
}

/// Whether the process that wrote `token` is still running.
pub(crate) fn liveness(token: &str) -> Liveness {
    if token == this_process_token() {
        return Liveness::Alive;
    }
    let Some(rest) = token.strip_prefix("linux:") else {
        return Liveness::Unknown;
    };
    let mut parts = rest.split(':');
    let (Some(token_boot), Some(pid), Some(start), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Liveness::Unknown;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return Liveness::Unknown;
    };
    // Only a Linux machine with a readable /proc can judge a Linux token.
    let Some(current_boot) = boot_id() else {
        return Liveness::Unknown;
    };
    if current_boot != token_boot {
        // Rebooted since: every process of that boot is gone.
        return Liveness::Dead;
    }
    match proc_start_time(pid) {
        Some(now_start) if now_start == start => Liveness::Alive,
        _ => Liveness::Dead,
    }
}

fn boot_id() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = text.trim();
    (!id.is_empty() && !id.contains(':')).then(|| id.to_owned())
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot.
fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may itself hold spaces or ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields from 3 (state) on; the start time is field 22.
    after_name.split_whitespace().nth(22 - 3)?.parse().ok()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_a_finished_child_is_dead() {
        assert!(this_process_token().starts_with("linux:"));
        assert_eq!(liveness(this_process_token()), Liveness::Alive);

        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let token = linux_token(child.id()).unwrap();
        assert_eq!(liveness(&token), Liveness::Alive);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(liveness(&token), Liveness::Dead);
    }

    #[test]
    fn a_reused_pid_or_another_boot_is_dead() {
        let own = this_process_token();
        let parts: Vec<&str> = own.split(':').collect();
        let other_start = format!(
            "linux:{}:{}:{}",
            parts[1],
            parts[2],
            parts[3].parse::<u64>().unwrap() + 1
        );
        assert_eq!(liveness(&other_start), Liveness::Dead);
        let other_boot = format!("linux:not-this-boot:{}:{}", parts[2], parts[3]);
        assert_eq!(liveness(&other_boot), Liveness::Dead);
        assert_eq!(liveness("proc:0193abcd"), Liveness::Unknown);
        assert_eq!(liveness("linux:garbage"), Liveness::Unknown);
    }
}
