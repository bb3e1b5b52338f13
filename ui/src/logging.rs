//! The binary's log output: `AGENTLOOM_LOG` picks what is shown, on stderr, with every
//! secret a run in this process resolved replaced, whichever block or library logged it.

use std::io::{IsTerminal as _, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Sends log lines to stderr, shown from `warn` unless `AGENTLOOM_LOG` says otherwise.
pub fn init() {
    tracing_subscriber::fmt()
        .with_writer(RedactedStderr)
        // Colour codes only for a person reading; they would garble a log file.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTLOOM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
}

/// Makes one [`RedactedLine`] per log event.
struct RedactedStderr;

impl<'a> MakeWriter<'a> for RedactedStderr {
    type Writer = RedactedLine;

    fn make_writer(&'a self) -> RedactedLine {
        RedactedLine(Vec::new())
    }
}

/// One event's text, kept whole until it is done so a secret split over several writes is
/// still found, then written to stderr redacted.
struct RedactedLine(Vec<u8>);

impl Write for RedactedLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let mut text = String::from_utf8_lossy(&self.0).into_owned();
        agentloom_engine::redact_resolved_secrets(&mut text);
        // Nowhere to report a failed write of a log line.
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}
