//! The app's background work: every job that would hold up a frame (an evaluation, a
//! credential sign-in, connecting to MCP servers, asking an Ollama for its models, reading
//! a run's timeline from the log) is a task on the app's one tokio runtime. A task reports
//! over one channel that [`BackgroundTasks::poll`] drains once per frame (in
//! `App::logic`), to be handed to the room that started it; drawing code only reads what
//! the poll filled in. A report wakes the window, so nothing has to poll on a timer.
//!
//! Starting a task gives a [`Task`]: dropping it aborts the task
//! (or, for blocking work, which cannot be interrupted, sets its cancel token) and anything
//! it still reports is dropped. [`Task::stop`] only asks it to stop: it still reports how far
//! it got. A task that panics reports what its room said it would hear then (`lost`), so no
//! window waits for it for ever.

use std::collections::HashSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

use agentloom_blocks::Registry;
use agentloom_core::Problem;
use agentloom_engine::RunDetail;
use agentloom_engine::credentials::oauth::DeviceCode;
use agentloom_runner::eval::EvalProgress;
use futures::FutureExt as _;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// What a task hands back to the room that started it.
pub(crate) enum Report {
    /// An evaluation checked one more run.
    EvaluationProgress(EvalProgress),
    /// An evaluation ended: its summary, or why it did not run.
    EvaluationDone(Result<serde_json::Value, String>),
    /// A device-flow sign-in's code, to type at its verification address.
    SignInDevice(DeviceCode),
    /// The sign-in page the browser was asked to open.
    SignInBrowser(String),
    /// A credential job ended: what to tell the person.
    CredentialsDone(Result<String, String>),
    /// The graph's MCP servers are connected: the catalog with their tools, and the servers
    /// that could not be reached.
    McpConnected(Registry, Vec<Problem>),
    /// The models an Ollama at `base` serves.
    Models {
        base: String,
        listed: Result<Vec<String>, String>,
    },
    /// Whether native file dialogs can appear here (see [`crate::files`]); `None`: it
    /// could not be found out in the background.
    FileDialogs(Option<bool>),
    /// Run `run_id` as the run log holds it now; `unchanged`: as last read, so nothing new
    /// to draw.
    RunRead {
        run_id: String,
        detail: Result<Option<RunDetail>, String>,
        unchanged: bool,
    },
}

impl Report {
    /// Whether the window has something new to draw (a report that has not waits for the
    /// next frame, and wakes nothing).
    fn wakes(&self) -> bool {
        !matches!(
            self,
            Report::RunRead {
                unchanged: true,
                ..
            } | Report::FileDialogs(_)
        )
    }
}

/// Which task a report comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TaskId(u64);

struct Message {
    task: TaskId,
    report: Report,
    /// The task's last report: it is over.
    last: bool,
}

/// What a window must hear of: the app's context, once the first frame has given it.
type Waker = Arc<Mutex<Option<egui::Context>>>;

/// The tasks still wanted; a report of any other is dropped.
type Live = Arc<Mutex<HashSet<TaskId>>>;

/// A task's way to report while it runs; each report wakes the window.
#[derive(Clone)]
pub(crate) struct Reporter {
    task: TaskId,
    sender: Sender<Message>,
    waker: Waker,
}

impl Reporter {
    /// Sends `report` to the room that started the task (dropped if it was cancelled).
    pub(crate) fn report(&self, report: Report) {
        self.send(report, false);
    }

    fn send(&self, report: Report, last: bool) {
        let wakes = report.wakes();
        let message = Message {
            task: self.task,
            report,
            last,
        };
        // The app may be gone (closing): nobody to tell then.
        if self.sender.send(message).is_ok()
            && wakes
            && let Some(ctx) = self
                .waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
        {
            ctx.request_repaint();
        }
    }
}

/// A running task, held by the room that started it; dropping it cancels the task.
pub(crate) struct Task {
    id: TaskId,
    cancel: CancellationToken,
    abort: Option<tokio::task::AbortHandle>,
    live: Live,
}

impl Task {
    /// Asks the task to stop; it still reports (e.g. how far it got).
    pub(crate) fn stop(&self) {
        self.cancel.cancel();
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        self.cancel.cancel();
        if let Some(abort) = &self.abort {
            abort.abort();
        }
    }
}

/// The app's background tasks, on its runtime.
pub(crate) struct BackgroundTasks {
    runtime: Option<Handle>,
    sender: Sender<Message>,
    receiver: Receiver<Message>,
    live: Live,
    waker: Waker,
    next_id: u64,
}

impl BackgroundTasks {
    /// Tasks on `runtime` (`None`: the runtime could not start, and no task does).
    pub(crate) fn on(runtime: Option<Handle>) -> Self {
        let (sender, receiver) = channel();
        Self {
            runtime,
            sender,
            receiver,
            live: Live::default(),
            waker: Waker::default(),
            next_id: 0,
        }
    }

    /// How many tasks are under way (started, neither over nor cancelled).
    pub(crate) fn count(&self) -> usize {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn start(&mut self) -> Result<(Handle, Reporter, Task), String> {
        let runtime = self
            .runtime
            .clone()
            .ok_or("the app's background threads could not start")?;
        self.next_id += 1;
        let id = TaskId(self.next_id);
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id);
        let reporter = Reporter {
            task: id,
            sender: self.sender.clone(),
            waker: self.waker.clone(),
        };
        let task = Task {
            id,
            cancel: CancellationToken::new(),
            abort: None,
            live: self.live.clone(),
        };
        Ok((runtime, reporter, task))
    }

    /// Runs the future `work` makes on the runtime's workers; its output is its last report
    /// (`lost`, told why, if it panics). Work that blocks a thread goes to
    /// [`BackgroundTasks::spawn_blocking`].
    pub(crate) fn spawn<F>(
        &mut self,
        work: impl FnOnce(Reporter, CancellationToken) -> F,
        lost: impl FnOnce(String) -> Report + Send + 'static,
    ) -> Result<Task, String>
    where
        F: Future<Output = Report> + Send + 'static,
    {
        let (runtime, reporter, mut task) = self.start()?;
        let future = work(reporter.clone(), task.cancel.clone());
        let handle = runtime.spawn(async move {
            let report = match AssertUnwindSafe(future).catch_unwind().await {
                Ok(report) => report,
                Err(panic) => lost(panic_text(panic.as_ref())),
            };
            reporter.send(report, true);
        });
        task.abort = Some(handle.abort_handle());
        Ok(task)
    }

    /// Runs `work` on the runtime's blocking threads (the keychain, SQLite, a connection
    /// made synchronously); its result is its last report (`lost`, told why, if it panics).
    /// It may wait for futures with the runtime's handle (`Handle::block_on`), and should
    /// watch the token.
    pub(crate) fn spawn_blocking(
        &mut self,
        work: impl FnOnce(&Reporter, &CancellationToken) -> Report + Send + 'static,
        lost: impl FnOnce(String) -> Report + Send + 'static,
    ) -> Result<Task, String> {
        let (runtime, reporter, mut task) = self.start()?;
        let cancel = task.cancel.clone();
        let handle = runtime.spawn_blocking(move || {
            let report = std::panic::catch_unwind(AssertUnwindSafe(|| work(&reporter, &cancel)))
                .unwrap_or_else(|panic| lost(panic_text(panic.as_ref())));
            reporter.send(report, true);
        });
        task.abort = Some(handle.abort_handle());
        Ok(task)
    }

    /// The reports that came since the last poll, of tasks still wanted, oldest first.
    /// Call once per frame; later reports wake `ctx`.
    pub(crate) fn poll(&mut self, ctx: &egui::Context) -> Vec<Report> {
        {
            let mut waker = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
            if waker.is_none() {
                *waker = Some(ctx.clone());
            }
        }
        let mut reports = Vec::new();
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        while let Ok(message) = self.receiver.try_recv() {
            let wanted = if message.last {
                live.remove(&message.task)
            } else {
                live.contains(&message.task)
            };
            if wanted {
                reports.push(message.report);
            }
        }
        reports
    }
}

/// What a panic said, for a person.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let said = (panic.downcast_ref::<&str>().copied())
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no reason given");
    format!("it stopped unexpectedly ({said})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn poll_until(tasks: &mut BackgroundTasks, done: impl Fn(&[Report]) -> bool) -> Vec<Report> {
        let ctx = egui::Context::default();
        let started = Instant::now();
        let mut all = Vec::new();
        while started.elapsed() < Duration::from_secs(5) {
            all.extend(tasks.poll(&ctx));
            if done(&all) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        all
    }

    fn lost(why: String) -> Report {
        Report::CredentialsDone(Err(why))
    }

    fn text(report: &Report) -> Option<&str> {
        match report {
            Report::CredentialsDone(Ok(text)) => Some(text),
            _ => None,
        }
    }

    #[test]
    fn a_task_reports_then_ends_and_a_cancelled_one_reports_nothing() {
        let runtime = runtime();
        let mut tasks = BackgroundTasks::on(Some(runtime.handle().clone()));
        let finished = tasks
            .spawn(
                |reporter, _| async move {
                    reporter.report(Report::SignInBrowser("https://id.test".to_owned()));
                    Report::CredentialsDone(Ok("done".to_owned()))
                },
                lost,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let cancelled = tasks
            .spawn_blocking(
                move |_, _| {
                    let _ = started_tx.send(());
                    let _ = released.recv();
                    Report::CredentialsDone(Ok("too late".to_owned()))
                },
                lost,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tasks.count(), 2);
        // Cancelled while it runs (blocking work cannot be interrupted: it runs on).
        assert!(started.recv_timeout(Duration::from_secs(5)).is_ok());
        drop(cancelled);
        let _ = release.send(());
        let reports = poll_until(&mut tasks, |all| {
            all.iter().any(|r| text(r) == Some("done"))
        });
        assert!(matches!(reports[0], Report::SignInBrowser(_)));
        assert_eq!(text(&reports[1]), Some("done"));
        // The blocking task ran to its end; what it said was not wanted any more.
        std::thread::sleep(Duration::from_millis(50));
        assert!(tasks.poll(&egui::Context::default()).is_empty());
        assert_eq!(tasks.count(), 0);
        drop(finished);
    }

    #[test]
    fn dropping_a_task_aborts_its_future() {
        let runtime = runtime();
        let mut tasks = BackgroundTasks::on(Some(runtime.handle().clone()));
        let (dropped_tx, dropped_rx) = std::sync::mpsc::channel::<()>();
        struct Tell(Sender<()>);
        impl Drop for Tell {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let task = tasks
            .spawn(
                move |_, _| {
                    let tell = Tell(dropped_tx);
                    async move {
                        let _tell = tell;
                        std::future::pending::<()>().await;
                        Report::CredentialsDone(Ok("never".to_owned()))
                    }
                },
                lost,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        drop(task);
        assert!(
            dropped_rx.recv_timeout(Duration::from_secs(5)).is_ok(),
            "the aborted future was dropped"
        );
        assert_eq!(tasks.count(), 0);
    }

    #[test]
    fn a_task_that_panics_reports_what_its_room_hears_then() {
        let runtime = runtime();
        let mut tasks = BackgroundTasks::on(Some(runtime.handle().clone()));
        let _blocking = tasks
            .spawn_blocking(|_, _| panic!("the keychain went away"), lost)
            .unwrap_or_else(|e| panic!("{e}"));
        let _future = tasks
            .spawn(|_, _| async { panic!("no answer") }, lost)
            .unwrap_or_else(|e| panic!("{e}"));
        let failed = |r: &Report| match r {
            Report::CredentialsDone(Err(why)) => Some(why.clone()),
            _ => None,
        };
        let reports = poll_until(&mut tasks, |all| all.iter().filter_map(failed).count() == 2);
        let mut said: Vec<String> = reports.iter().filter_map(failed).collect();
        said.sort();
        assert_eq!(
            said,
            [
                "it stopped unexpectedly (no answer)",
                "it stopped unexpectedly (the keychain went away)"
            ]
        );
        assert_eq!(tasks.count(), 0);
    }

    #[test]
    fn without_a_runtime_a_task_says_why_it_cannot_start() {
        let mut tasks = BackgroundTasks::on(None);
        let refused = tasks.spawn_blocking(|_, _| Report::CredentialsDone(Ok(String::new())), lost);
        assert!(refused.is_err());
    }
}
