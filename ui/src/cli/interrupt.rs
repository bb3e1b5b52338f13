//! Ctrl-C for commands that run a graph: the first cancels the run, a second quits at once.
//!
//! The watch lives on its own thread, not on the run's runtime. After the run, that runtime
//! is shut down while blocking work a cancelled node left behind is abandoned, and then the
//! run log is written (which waits while another process holds the file): a second Ctrl-C
//! must still quit during that wind-down.

use tokio_util::sync::CancellationToken;

use super::EXIT_INTERRUPTED;

/// Cancels `cancel` on the first Ctrl-C and exits with [`EXIT_INTERRUPTED`] on the second.
/// Returns once the signal handler is in place.
pub(crate) fn watch(cancel: CancellationToken) {
    let (ready, is_ready) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("ctrl-c".to_owned())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let mut interrupts = Interrupts::new();
                let _ = ready.send(());
                if interrupts.next().await {
                    eprintln!("\ncancelling… (Ctrl-C again to quit at once)");
                    cancel.cancel();
                }
                // Whatever still runs (a node that ignores cancellation, a run log another
                // process holds) must not keep the process alive.
                if interrupts.next().await {
                    eprintln!("quitting");
                    std::process::exit(EXIT_INTERRUPTED);
                }
            });
        });
    if spawned.is_ok() {
        // Without a handler yet, an early Ctrl-C still ends the process the default way.
        let _ = is_ready.recv();
    }
}

/// A worker's stop: SIGTERM drains (no new run; runs under way go on for up to `drain`,
/// then what still runs is handed back), SIGINT hands back at once; a second signal quits.
pub(crate) fn watch_drain(stop: crate::remote::worker::Stop, drain: std::time::Duration) {
    let (ready, is_ready) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("worker-stop".to_owned())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let mut interrupts = Interrupts::new();
                let mut terminations = Terminations::new();
                let _ = ready.send(());
                tokio::select! {
                    true = interrupts.next() => {
                        eprintln!("\nstopping: runs under way go back to the queue (Ctrl-C again to quit at once)");
                        stop.taking.cancel();
                        stop.running.cancel();
                    }
                    true = terminations.next() => {
                        eprintln!(
                            "draining: no new run; runs under way have {} s to finish",
                            drain.as_secs()
                        );
                        stop.taking.cancel();
                        tokio::select! {
                            () = tokio::time::sleep(drain) => {
                                eprintln!("drain time is up: runs still going go back to the queue");
                            }
                            true = interrupts.next() => {}
                            true = terminations.next() => {}
                        }
                        stop.running.cancel();
                    }
                }
                if interrupts.next().await {
                    eprintln!("quitting");
                    std::process::exit(EXIT_INTERRUPTED);
                }
            });
        });
    if spawned.is_ok() {
        let _ = is_ready.recv();
    }
}

/// SIGTERM, registered when created (on other systems: never).
#[cfg(unix)]
struct Terminations(Option<tokio::signal::unix::Signal>);

#[cfg(unix)]
impl Terminations {
    fn new() -> Self {
        Self(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok())
    }

    async fn next(&mut self) -> bool {
        match &mut self.0 {
            Some(signal) => signal.recv().await.is_some(),
            None => std::future::pending().await,
        }
    }
}

/// Windows has no SIGTERM: a service is stopped by its manager, a console by Ctrl-C
/// (handled as an interrupt).
#[cfg(not(unix))]
struct Terminations;

#[cfg(not(unix))]
impl Terminations {
    fn new() -> Self {
        Self
    }

    async fn next(&mut self) -> bool {
        std::future::pending().await
    }
}

/// SIGINT, registered when created (not at the first wait), so none is missed in between.
#[cfg(unix)]
struct Interrupts(Option<tokio::signal::unix::Signal>);

#[cfg(unix)]
impl Interrupts {
    fn new() -> Self {
        Self(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok())
    }

    async fn next(&mut self) -> bool {
        match &mut self.0 {
            Some(signal) => signal.recv().await.is_some(),
            None => false,
        }
    }
}

#[cfg(not(unix))]
struct Interrupts;

#[cfg(not(unix))]
impl Interrupts {
    fn new() -> Self {
        Self
    }

    async fn next(&mut self) -> bool {
        tokio::signal::ctrl_c().await.is_ok()
    }
}
