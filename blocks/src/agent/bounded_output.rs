//! A program's output read without ever holding more than a bounded part of it: the first
//! bytes of stdout and of stderr are kept, the rest is counted and dropped, and reading stops
//! (so that the caller stops the program) once it has written more than a limit in all.
//! Shared by every operating system's sandbox.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

/// How much of stdout and of stderr is kept unless the agent's `run_code_output_bytes` says.
pub(crate) const DEFAULT_KEEP_BYTES: u64 = 1024 * 1024;
/// A program that writes more than this (stdout and stderr together) is stopped.
pub(crate) const DEFAULT_STOP_AFTER_BYTES: u64 = 64 * 1024 * 1024;

/// How much of a program's output is kept, and when it is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OutputLimits {
    /// Bytes kept of stdout, and as many of stderr.
    pub keep_bytes: u64,
    /// The program is stopped once it wrote more than this in all.
    pub stop_after_bytes: u64,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            keep_bytes: DEFAULT_KEEP_BYTES,
            stop_after_bytes: DEFAULT_STOP_AFTER_BYTES,
        }
    }
}

impl OutputLimits {
    /// Keeps `keep_bytes` of each stream; stops the program past the larger of the default
    /// and twice what is kept (so that all that is kept can be written).
    pub(crate) fn keeping(keep_bytes: u64) -> Self {
        OutputLimits {
            keep_bytes,
            stop_after_bytes: DEFAULT_STOP_AFTER_BYTES.max(keep_bytes.saturating_mul(2)),
        }
    }

    /// The limits in words, for the block's output.
    pub(crate) fn describe(&self) -> String {
        format!(
            "output {} kept of stdout and of stderr, stopped past {} in all",
            size_in_words(self.keep_bytes),
            size_in_words(self.stop_after_bytes)
        )
    }
}

/// One stream's output: what was kept, and how much was written in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Captured {
    pub kept: Vec<u8>,
    pub total: u64,
}

impl Captured {
    /// Bytes written but not kept.
    pub(crate) fn cut_bytes(&self) -> u64 {
        self.total.saturating_sub(self.kept.len() as u64)
    }

    /// The note that follows what was kept when more was written, e.g.
    /// "… 2,147,483,648 bytes more cut".
    pub(crate) fn cut_note(&self) -> Option<String> {
        let cut = self.cut_bytes();
        (cut > 0).then(|| format!("… {} bytes more cut", with_commas(cut)))
    }

    fn take(&mut self, chunk: &[u8], keep_bytes: u64) {
        let room = usize::try_from(keep_bytes.saturating_sub(self.kept.len() as u64))
            .unwrap_or(usize::MAX);
        self.kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        self.total += chunk.len() as u64;
    }
}

/// A program's end as the sandbox saw it.
#[derive(Debug)]
pub(crate) struct ProgramOutput {
    pub status: ExitStatus,
    pub stdout: Captured,
    pub stderr: Captured,
    /// Why the sandbox stopped the program before it ended, if it did.
    pub stopped: Option<String>,
    /// The limits that were enforced, in words, e.g. "memory 512 MiB (whole tree, cgroup), …".
    pub limits: String,
}

/// What [`read_both`] read.
#[derive(Debug, Default)]
pub(crate) struct BothStreams {
    pub stdout: Captured,
    pub stderr: Captured,
    /// The program wrote more than `stop_after_bytes`: reading stopped there, and the
    /// program must be stopped too.
    pub overflowed: bool,
}

/// Reads `stdout` and `stderr` to their ends at once, keeping at most `limits.keep_bytes` of
/// each; returns early once more than `limits.stop_after_bytes` were written in all.
pub(crate) async fn read_both<O, E>(
    stdout: Option<O>,
    stderr: Option<E>,
    limits: OutputLimits,
) -> std::io::Result<BothStreams>
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    const CHUNK: usize = 64 * 1024;
    let mut read = BothStreams::default();
    let (mut out, mut err) = (stdout, stderr);
    let mut out_buf = vec![0u8; CHUNK];
    let mut err_buf = vec![0u8; CHUNK];
    while out.is_some() || err.is_some() {
        // Both reads are cancel-safe: the one not chosen has read nothing.
        tokio::select! {
            n = async { Some(out.as_mut()?.read(&mut out_buf).await) }, if out.is_some() => {
                match n {
                    Some(Ok(0)) | None => out = None,
                    Some(Ok(n)) => read.stdout.take(&out_buf[..n], limits.keep_bytes),
                    Some(Err(e)) => return Err(e),
                }
            }
            n = async { Some(err.as_mut()?.read(&mut err_buf).await) }, if err.is_some() => {
                match n {
                    Some(Ok(0)) | None => err = None,
                    Some(Ok(n)) => read.stderr.take(&err_buf[..n], limits.keep_bytes),
                    Some(Err(e)) => return Err(e),
                }
            }
        }
        if read.stdout.total + read.stderr.total > limits.stop_after_bytes {
            read.overflowed = true;
            break;
        }
    }
    Ok(read)
}

/// Feeds `code` to a started program's stdin, reads its output within `limits` and waits for
/// it to end, for at most `timeout`. `kill` stops every process of the program: called once
/// it wrote past the output limit, and when the time is up. `limits_said` is the enforced
/// limits in words, for the result.
pub(crate) async fn run_to_end(
    child: &mut tokio::process::Child,
    code: &str,
    limits: OutputLimits,
    timeout: Duration,
    kill: impl Fn(),
    limits_said: String,
) -> Result<ProgramOutput, String> {
    let stdin = child.stdin.take();
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let ran = async {
        if let Some(mut stdin) = stdin {
            // A program that exits before reading it all closes the pipe: not a failure.
            let _ = stdin.write_all(code.as_bytes()).await;
        }
        let read = read_both(stdout, stderr, limits)
            .await
            .map_err(|e| format!("the program's output could not be read: {e}"))?;
        if read.overflowed {
            // Stopped rather than read on: agentloom's memory stays what it kept.
            kill();
        }
        let status = child
            .wait()
            .await
            .map_err(|e| format!("python3 failed: {e}"))?;
        Ok::<_, String>((read, status))
    };
    let Ok(ran) = tokio::time::timeout(timeout, ran).await else {
        kill();
        // Reaped before its limits are taken down.
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        return Err(format!(
            "the program ran longer than {} s and was stopped",
            timeout.as_secs()
        ));
    };
    let (read, status) = ran?;
    Ok(ProgramOutput {
        status,
        stopped: read.overflowed.then(|| {
            format!(
                "it wrote more than {} of output",
                size_in_words(limits.stop_after_bytes)
            )
        }),
        stdout: read.stdout,
        stderr: read.stderr,
        limits: limits_said,
    })
}

/// 1048576 → "1 MiB", 1500 → "1,500 bytes".
pub(crate) fn size_in_words(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", with_commas(bytes / MIB))
    } else {
        format!("{} bytes", with_commas(bytes))
    }
}

/// 2147483648 → "2,147,483,648".
pub(crate) fn with_commas(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(with_commas(2_147_483_648), "2,147,483,648");
        assert_eq!(with_commas(999), "999");
        assert_eq!(with_commas(1000), "1,000");
        assert_eq!(size_in_words(1024 * 1024), "1 MiB");
        assert_eq!(size_in_words(1500), "1,500 bytes");
    }

    #[tokio::test]
    async fn keeps_the_start_counts_the_rest_and_stops_past_the_limit() {
        let limits = OutputLimits {
            keep_bytes: 10,
            stop_after_bytes: 1000,
        };
        let read = read_both(Some(&b"0123456789abcdef"[..]), Some(&b"err"[..]), limits)
            .await
            .unwrap();
        assert_eq!(read.stdout.kept, b"0123456789");
        assert_eq!(
            read.stdout.cut_note().as_deref(),
            Some("… 6 bytes more cut")
        );
        assert_eq!(read.stderr.kept, b"err");
        assert_eq!(read.stderr.cut_note(), None);
        assert!(!read.overflowed);
        let endless = tokio::io::repeat(b'x');
        let read = read_both(Some(endless), None::<&[u8]>, limits)
            .await
            .unwrap();
        assert!(read.overflowed);
        assert_eq!(read.stdout.kept.len(), 10);
        assert!(read.stdout.total > 1000, "{}", read.stdout.total);
    }
}
