//! The binary's log output: `AGENTLOOM_LOG` picks what is shown, on stderr, with every
//! secret this process handled (resolved by a run, brought by a sign-in, read or stored as
//! a credential) replaced, whichever block or library logged it.

use std::io::{IsTerminal as _, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Sends log lines to stderr, shown from `warn` unless `AGENTLOOM_LOG` says otherwise.
pub fn init() {
    tracing_subscriber::fmt()
        .with_writer(RedactedLines(std::io::stderr))
        // Colour codes only for a person reading; they would garble a log file.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTLOOM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
}

/// Makes one [`RedactedLine`] per log event, written to what `M` makes (stderr for the
/// binary).
pub struct RedactedLines<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for RedactedLines<M> {
    type Writer = RedactedLine<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedLine {
            text: Vec::new(),
            out: self.0.make_writer(),
        }
    }
}

/// One event's text, kept whole until it is done so a secret split over several writes is
/// still found, then written out redacted: every secret a run resolved, a sign-in brought
/// or the credential store handled in this process.
pub struct RedactedLine<W: Write> {
    text: Vec<u8>,
    out: W,
}

impl<W: Write> Write for RedactedLine<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for RedactedLine<W> {
    fn drop(&mut self) {
        if self.text.is_empty() {
            return;
        }
        let mut text = String::from_utf8_lossy(&self.text).into_owned();
        agentloom_engine::redact_resolved_secrets(&mut text);
        // Nowhere to report a failed write of a log line.
        let _ = self.out.write_all(text.as_bytes());
    }
}
