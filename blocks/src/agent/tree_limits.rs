//! Limits counted across every process a sandboxed program starts: memory, processes and CPU
//! time for the whole tree, not per process (a program could otherwise start many processes
//! each under its own limit, and `RLIMIT_NPROC` does not apply to root at all).
//!
//! - A cgroup made for the run holds the tree where one can be made: a cgroup v2 subtree
//!   delegated to this user (memory and pids controllers), else cgroup v1 memory and pids
//!   hierarchies this process may write to (root in a container). The child joins it before
//!   it executes anything.
//! - A watcher thread does the rest: it finds the tree (the cgroup's processes, or the
//!   program's descendants through /proc), sums the resident memory (PSS), the tasks and the
//!   CPU time of its processes, and kills the whole tree past a limit. It also kills the whole
//!   tree when the cgroup's own memory limit made the kernel kill one of its processes.

use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd as _, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::agent::bounded_output::size_in_words;

/// What the whole tree of a program may use.
#[derive(Clone, Copy, Debug)]
pub(super) struct TreeLimits {
    pub memory_bytes: u64,
    /// Processes and threads.
    pub processes: u64,
    pub cpu_seconds: u64,
}

/// How the process limit holds when no cgroup counts the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProcessesHeldBy {
    /// `RLIMIT_NPROC` in the sandbox's own user namespace (a user other than root), with the
    /// watcher as well.
    UserNamespace,
    /// The program cannot start processes at all (threads are watched).
    NoNewProcesses,
    /// The watcher only.
    Watcher,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Controller {
    /// A cgroup v2 folder with the memory and pids controllers.
    V2,
    V1Memory,
    V1Pids,
}

/// A cgroup made for one run; removed when dropped.
struct Cgroup {
    dir: PathBuf,
    /// `cgroup.procs`, opened before the fork: the child writes "0" to it to join.
    procs: File,
    controller: Controller,
}

impl Cgroup {
    fn make(parent: &Path, controller: Controller, limits: &TreeLimits) -> Option<Cgroup> {
        static MADE: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "agentloom-code-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        remove_stale(parent);
        let dir = parent.join(name);
        std::fs::create_dir(&dir).ok()?;
        // From here on, dropping it removes the folder.
        let procs = match File::options().write(true).open(dir.join("cgroup.procs")) {
            Ok(procs) => procs,
            Err(_) => {
                let _ = std::fs::remove_dir(&dir);
                return None;
            }
        };
        let cgroup = Cgroup {
            dir,
            procs,
            controller,
        };
        let set = |file: &str, value: &str| std::fs::write(cgroup.dir.join(file), value).is_ok();
        let memory = limits.memory_bytes.to_string();
        let processes = limits.processes.to_string();
        let ready = match controller {
            Controller::V2 => {
                let controllers = std::fs::read_to_string(cgroup.dir.join("cgroup.controllers"))
                    .unwrap_or_default();
                let has = |name: &str| controllers.split_whitespace().any(|c| c == name);
                let ready = has("memory")
                    && has("pids")
                    && set("memory.max", &memory)
                    && set("pids.max", &processes);
                if ready {
                    // Where offered: no swap on top of the limit, and one kill ends them all.
                    set("memory.swap.max", "0");
                    set("memory.oom.group", "1");
                }
                ready
            }
            Controller::V1Memory => {
                let ready = set("memory.limit_in_bytes", &memory);
                if ready {
                    // Where swap is counted.
                    set("memory.memsw.limit_in_bytes", &memory);
                }
                ready
            }
            Controller::V1Pids => set("pids.max", &processes),
        };
        ready.then_some(cgroup)
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// How many processes the kernel killed because the cgroup ran out of memory.
    fn oom_kills(&self) -> u64 {
        let file = match self.controller {
            Controller::V2 => "memory.events",
            Controller::V1Memory => "memory.oom_control",
            Controller::V1Pids => return 0,
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Kills every process of the cgroup, `root` (the child agentloom started) last: its
    /// children die while it can still reap them, rather than being left to the machine's
    /// init (a zombie nobody reaps keeps the cgroup from being removed).
    fn kill_all(&self, root: Option<i32>) {
        for _ in 0..3 {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            pids.iter()
                .filter(|&&pid| Some(pid) != root)
                .for_each(|&pid| kill(pid));
            if self.controller == Controller::V2 {
                // Also any process started since the list was read.
                let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
            }
            root.into_iter().for_each(kill);
        }
    }
}

/// Removes the empty cgroups of runs whose agentloom process is gone (one killed before it
/// could remove its own).
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix("agentloom-code-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if owner != std::process::id() && !Path::new(&format!("/proc/{owner}")).exists() {
            // Fails, harmlessly, while a process is still in it.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The folder can be removed once its last process is gone and reaped, which may take
        // a moment after the kill: tried here briefly, then from a thread of its own.
        let dir = self.dir.clone();
        let removed = || std::fs::remove_dir(&dir).is_ok() || !dir.exists();
        for _ in 0..10 {
            if removed() {
                return;
            }
            self.kill_all(None);
            std::thread::sleep(Duration::from_millis(10));
        }
        let dir = self.dir.clone();
        let spawned = std::thread::Builder::new()
            .name("agentloom-cgroup-cleanup".into())
            .spawn(move || {
                for _ in 0..600 {
                    if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                tracing::warn!(cgroup = %dir.display(), "a run's cgroup could not be removed");
            });
        if spawned.is_err() {
            tracing::warn!(cgroup = %self.dir.display(), "a run's cgroup could not be removed");
        }
    }
}

/// The limits of one run, prepared before its program is started.
pub(super) struct TreeGuard {
    limits: TreeLimits,
    cgroups: Vec<Cgroup>,
    processes_held_by: ProcessesHeldBy,
}

impl TreeGuard {
    /// Makes a cgroup for the run when `use_cgroups` and one can be made here.
    pub(super) fn prepare(
        limits: TreeLimits,
        use_cgroups: bool,
        processes_held_by: ProcessesHeldBy,
    ) -> TreeGuard {
        let cgroups = if use_cgroups {
            make_cgroups(&limits)
        } else {
            Vec::new()
        };
        TreeGuard {
            limits,
            cgroups,
            processes_held_by,
        }
    }

    fn has(&self, controllers: &[Controller]) -> bool {
        self.cgroups
            .iter()
            .any(|c| controllers.contains(&c.controller))
    }

    fn memory_in_cgroup(&self) -> bool {
        self.has(&[Controller::V2, Controller::V1Memory])
    }

    fn processes_in_cgroup(&self) -> bool {
        self.has(&[Controller::V2, Controller::V1Pids])
    }

    /// The descriptors the child writes "0" to, in `pre_exec`, to join the run's cgroups.
    pub(super) fn join_fds(&self) -> Vec<RawFd> {
        self.cgroups.iter().map(|c| c.procs.as_raw_fd()).collect()
    }

    /// The limits in words, e.g. "memory 512 MiB (whole tree, cgroup), processes 128 (whole
    /// tree, watched), cpu 20 s (whole tree, watched)".
    pub(super) fn describe(&self) -> String {
        let memory = if self.memory_in_cgroup() {
            "cgroup"
        } else {
            "watched"
        };
        let processes = if self.processes_in_cgroup() {
            "whole tree, cgroup"
        } else {
            match self.processes_held_by {
                ProcessesHeldBy::UserNamespace => "whole tree, user namespace",
                ProcessesHeldBy::NoNewProcesses => "no new processes, threads watched",
                ProcessesHeldBy::Watcher => "whole tree, watched",
            }
        };
        format!(
            "memory {} (whole tree, {memory}), processes {} ({processes}), cpu {} s (whole tree, watched)",
            size_in_words(self.limits.memory_bytes),
            self.limits.processes,
            self.limits.cpu_seconds
        )
    }

    /// Starts watching the tree under `root` (the started child) until the returned watch is
    /// ended.
    pub(super) fn watch(self, root: u32) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::new(Mutex::new(None));
        let guard = Arc::new(self);
        let thread = {
            let (stop, stopped, guard) = (stop.clone(), stopped.clone(), guard.clone());
            std::thread::Builder::new()
                .name("agentloom-code-watch".into())
                .spawn(move || watch_loop(&guard, root, &stop, &stopped))
                .ok()
        };
        Watch {
            stop,
            stopped,
            thread,
            guard,
        }
    }
}

/// A tree being watched.
pub(super) struct Watch {
    stop: Arc<AtomicBool>,
    stopped: Arc<Mutex<Option<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    guard: Arc<TreeGuard>,
}

impl Watch {
    /// Kills every process of the tree now (the output limit was passed, or time ran out).
    pub(super) fn kill_tree(&self, root: u32) {
        kill_tree(&self.guard, root);
    }

    /// Ends the watch; why the watcher stopped the program, if it did.
    pub(super) fn end(mut self) -> Option<String> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.stopped.lock().ok().and_then(|mut s| s.take())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

const TICK: Duration = Duration::from_millis(25);

fn watch_loop(guard: &TreeGuard, root: u32, stop: &AtomicBool, stopped: &Mutex<Option<String>>) {
    let root_started = start_time(root);
    let ticks_per_second = clock_ticks_per_second();
    while !stop.load(Ordering::SeqCst) {
        // A root no longer there (or another process with its number) has no tree to watch
        // but a cgroup's.
        let root_alive = root_started.is_some() && start_time(root) == root_started;
        let pids = match guard.cgroups.first() {
            Some(cgroup) => cgroup.pids(),
            // Past the process limit it is not read further: that is enough to stop it.
            None if root_alive => tree_of(root as i32, guard.limits.processes as usize + 1),
            None => Vec::new(),
        };
        if let Some(why) = over_a_limit(guard, &pids, ticks_per_second) {
            kill_tree(guard, root);
            if let Ok(mut stopped) = stopped.lock() {
                stopped.get_or_insert(why);
            }
            return;
        }
        std::thread::sleep(TICK);
    }
}

/// Which limit the tree of `pids` is past, if any: the cheapest checks first, so that a
/// tree growing fast is stopped before the costly ones are read.
fn over_a_limit(guard: &TreeGuard, pids: &[i32], ticks_per_second: u64) -> Option<String> {
    let limits = guard.limits;
    let too_many = || {
        Some(format!(
            "it ran more than {} processes and threads at once",
            limits.processes
        ))
    };
    let too_much_memory = || {
        Some(format!(
            "its processes together used more than {} of memory",
            size_in_words(limits.memory_bytes)
        ))
    };
    let watch_processes = !guard.processes_in_cgroup();
    if watch_processes && pids.len() as u64 > limits.processes {
        return too_many();
    }
    if guard.cgroups.iter().any(|c| c.oom_kills() > 0) {
        return too_much_memory();
    }
    let stats: Vec<Stat> = pids.iter().filter_map(|&pid| stat_of(pid)).collect();
    if watch_processes && stats.iter().map(|s| s.threads).sum::<u64>() > limits.processes {
        return too_many();
    }
    // Resident pages (RSS) are cheap to read but count shared pages in every process:
    // the proportional figure (PSS) is read only when they add up to more than the limit.
    if !guard.memory_in_cgroup()
        && stats.iter().map(|s| s.resident_bytes).sum::<u64>() > limits.memory_bytes
        && pids.iter().map(|&pid| proportional_bytes(pid)).sum::<u64>() > limits.memory_bytes
    {
        return too_much_memory();
    }
    let ticks: u64 = stats.iter().map(|s| s.cpu_ticks).sum();
    if ticks / ticks_per_second > limits.cpu_seconds {
        return Some(format!(
            "its processes together used more than {} s of CPU time",
            limits.cpu_seconds
        ));
    }
    None
}

fn kill_tree(guard: &TreeGuard, root: u32) {
    if let Some(cgroup) = guard.cgroups.first() {
        cgroup.kill_all(i32::try_from(root).ok());
        return;
    }
    // Children first found, then the root: under bubblewrap killing the root ends its PID
    // namespace too.
    for _ in 0..3 {
        let pids = tree_of(root as i32, usize::MAX);
        if pids.is_empty() {
            return;
        }
        pids.into_iter().rev().for_each(kill);
    }
}

fn kill(pid: i32) {
    // SAFETY: kill with integer arguments.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Makes the run's cgroups: a delegated cgroup v2 folder, else writable v1 memory and pids
/// hierarchies; none when neither can be made here.
fn make_cgroups(limits: &TreeLimits) -> Vec<Cgroup> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let root = Path::new("/sys/fs/cgroup");
    // cgroup v2 alone (its root has cgroup.controllers): "0::/path".
    if root.join("cgroup.controllers").exists() {
        let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
            return Vec::new();
        };
        let parent = root.join(path.trim_start_matches('/'));
        // A delegated folder may still need the controllers passed down to its children.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open(parent.join("cgroup.subtree_control"))
            .and_then(|mut f| f.write_all(b"+memory +pids"));
        return Cgroup::make(&parent, Controller::V2, limits)
            .into_iter()
            .collect();
    }
    // cgroup v1: "N:memory:/path" and "N:pids:/path".
    let v1 = |name: &str, controller| {
        let path = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            names.split(',').any(|n| n == name).then_some(path)
        })?;
        Cgroup::make(
            &root.join(name).join(path.trim_start_matches('/')),
            controller,
            limits,
        )
    };
    [
        v1("memory", Controller::V1Memory),
        v1("pids", Controller::V1Pids),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `pid` and its descendants, found through /proc/PID/task/TID/children (or, where the
/// kernel has no such file, every process's parent); no more once `enough` are found.
fn tree_of(root: i32, enough: usize) -> Vec<i32> {
    let mut found = vec![root];
    let mut next = 0;
    let mut children_files = true;
    while next < found.len() && found.len() < enough && children_files {
        let pid = found[next];
        next += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            match std::fs::read_to_string(task.path().join("children")) {
                Ok(children) => found.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<i32>().ok()),
                ),
                // The task may have just ended: the file is missing in its folder only then.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    children_files = task.path().exists();
                }
                Err(_) => {}
            }
        }
    }
    if children_files {
        return found;
    }
    tree_by_parents(root)
}

fn tree_by_parents(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter_map(|pid| Some((pid, stat_of(pid)?.parent)))
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let pid = found[next];
        next += 1;
        found.extend(parents.iter().filter(|(_, p)| *p == pid).map(|(c, _)| *c));
    }
    found
}

struct Stat {
    parent: i32,
    threads: u64,
    /// User and system time of the process and of its children it waited for.
    cpu_ticks: u64,
    start: u64,
    resident_bytes: u64,
}

/// /proc/PID/stat, read after the command name (which may hold spaces and parentheses).
fn stat_of(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &text[text.rfind(')')? + 2..];
    // Fields from the 3rd (state) on.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        parent: i32::try_from(field(4)?).ok()?,
        threads: field(20)?,
        cpu_ticks: field(14)? + field(15)? + field(16)? + field(17)?,
        start: field(22)?,
        resident_bytes: field(24)?.saturating_mul(page_size()),
    })
}

fn start_time(pid: u32) -> Option<u64> {
    stat_of(i32::try_from(pid).ok()?).map(|s| s.start)
}

/// The memory a process holds, shared pages counted in proportion (PSS), so that processes
/// forked from one another are not counted many times over; RSS where PSS is not offered.
fn proportional_bytes(pid: i32) -> u64 {
    let kib = |text: &str, key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    if let Ok(rollup) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        && let Some(pss) = kib(&rollup, "Pss:")
    {
        return pss * 1024;
    }
    stat_of(pid).map_or(0, |s| s.resident_bytes)
}

fn page_size() -> u64 {
    // SAFETY: sysconf with an integer argument.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf with an integer argument.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// Joins the run's cgroups from the child, between fork and exec: writes "0" (the writing
/// process) to each `cgroup.procs`. Allocates nothing.
pub(super) fn join_cgroups(procs: &[RawFd]) -> std::io::Result<()> {
    for &fd in procs {
        // SAFETY: write of one byte from a static buffer to an open descriptor.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Closes, as the child executes its program, every descriptor above stderr but `keep`:
/// marks them close-on-exec (so that the standard library's own error pipe still reports a
/// failed exec), with close_range where the kernel has it, one by one otherwise. Allocates
/// nothing.
pub(super) fn close_inherited_fds(keep: Option<RawFd>) -> std::io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range with integer arguments.
    let ranged =
        unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) } == 0;
    if !ranged {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        let highest = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } == 0 {
            limit.rlim_cur.min(1 << 20) as RawFd
        } else {
            1024
        };
        for fd in 3..highest {
            // SAFETY: fcntl on a descriptor number; EBADF for one not open.
            unsafe {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
    }
    if let Some(fd) = keep {
        // SAFETY: fcntl on a descriptor of this process.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
