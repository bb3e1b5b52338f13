//! Progress of a headless run on stderr: one line per node as it settles, and a spinner
//! naming the nodes still running when stderr is a terminal.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use agentloom_engine::{EventKind, EventSink, RunEvent};
use indicatif::{ProgressBar, ProgressStyle};

pub struct ProgressSink {
    spinner: Option<ProgressBar>,
    print_lines: bool,
    running: Mutex<BTreeSet<String>>,
}

impl ProgressSink {
    pub fn new(interactive: bool, print_lines: bool) -> Self {
        let spinner = (interactive && print_lines).then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            spinner,
            print_lines,
            running: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.spinner {
            bar.finish_and_clear();
        }
    }

    /// Runs `f` with the spinner hidden (a question at the terminal).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.spinner {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    fn line(&self, text: &str) {
        if !self.print_lines {
            return;
        }
        // Node ids and errors come from the graph file and from peers.
        let text = agentloom_core::escape_control(text);
        let text = text.as_ref();
        match &self.spinner {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    fn update_running(&self, add: Option<&str>, remove: Option<&str>) {
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        if let Some(node) = add {
            running.insert(node.to_owned());
        }
        if let Some(node) = remove {
            running.remove(node);
        }
        if let Some(bar) = &self.spinner {
            let names: Vec<&str> = running.iter().take(4).map(String::as_str).collect();
            let more = running.len().saturating_sub(names.len());
            let suffix = if more > 0 {
                format!(" +{more}")
            } else {
                String::new()
            };
            bar.set_message(format!("running {}{suffix}", names.join(", ")));
        }
    }
}

impl EventSink for ProgressSink {
    fn emit(&self, event: &RunEvent) {
        match &event.kind {
            EventKind::NodeStarted { node, .. } => self.update_running(Some(node), None),
            EventKind::NodeFinished {
                node,
                duration_ms,
                attempts,
                usage,
                ..
            } => {
                self.update_running(None, Some(node));
                let retries = if *attempts > 1 {
                    format!(", {attempts} attempts")
                } else {
                    String::new()
                };
                let cost = if usage.is_zero() {
                    String::new()
                } else {
                    format!(
                        ", {} tokens, ${:.4}",
                        usage.input_tokens + usage.output_tokens,
                        usage.cost_usd
                    )
                };
                self.line(&format!("✓ {node} ({duration_ms} ms{retries}{cost})"));
            }
            EventKind::NodeFailed {
                node,
                error,
                caught,
                ..
            } => {
                self.update_running(None, Some(node));
                let note = if *caught {
                    " (caught by its error output)"
                } else {
                    ""
                };
                self.line(&format!("✗ {node}: {error}{note}"));
            }
            EventKind::NodeSkipped { node, reason, .. } => {
                self.line(&format!("- {node} skipped: {reason}"))
            }
            EventKind::NodeRetrying {
                node,
                attempt,
                error,
                wait_ms,
            } => {
                self.line(&format!(
                    "↻ {node} attempt {attempt} failed: {error}; retrying in {wait_ms} ms"
                ));
            }
            EventKind::NodeAwaitingApproval { node } => {
                self.line(&format!("? {node} is waiting for approval"))
            }
            _ => {}
        }
    }
}
