//! A stdio MCP server's whole process tree, stopped together: the server leads a process
//! group of its own on Unix, and is put in a kill-on-close Job Object on Windows (started
//! suspended, put in the job, then resumed), so that stopping it stops the helpers it
//! started too.

/// Starts the server in a group of its own on Unix, suspended on Windows (before it is
/// spawned; [`ServerProcess::of`] then puts it in its job and lets it run).
pub(super) fn prepare(command: &mut tokio::process::Command) {
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(windows)]
    command.creation_flags(windows_sys::Win32::System::Threading::CREATE_SUSPENDED);
}

/// The process tree a stdio server leads.
pub(super) struct ServerProcess {
    #[cfg(unix)]
    group: Option<i32>,
    #[cfg(windows)]
    job: Option<crate::windows_job::Job>,
}

impl ServerProcess {
    /// The tree of `child`, just spawned with [`prepare`].
    pub(super) fn of(child: &tokio::process::Child) -> ServerProcess {
        #[cfg(unix)]
        {
            ServerProcess {
                group: child.id().and_then(|id| i32::try_from(id).ok()),
            }
        }
        #[cfg(windows)]
        {
            // Still suspended: in the job before it can start any helper.
            let job = child.raw_handle().and_then(|process| {
                let job = crate::windows_job::Job::new(None)
                    .inspect_err(|e| tracing::warn!(error = %e, "no Job Object for an MCP server"))
                    .ok()?;
                job.assign(process)
                    .inspect_err(
                        |e| tracing::warn!(error = %e, "an MCP server is not in its Job Object"),
                    )
                    .ok()?;
                Some(job)
            });
            if let Some(pid) = child.id()
                && let Err(e) = crate::windows_job::resume_process(pid)
            {
                tracing::warn!(error = %e, "an MCP server could not be resumed");
            }
            ServerProcess { job }
        }
    }

    /// Kills every process of the tree (the server and any helper it started).
    pub(super) fn stop(&self) {
        #[cfg(unix)]
        if let Some(group) = self.group {
            // ESRCH: the group is gone already.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(group),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        #[cfg(windows)]
        if let Some(job) = &self.job {
            job.terminate();
        }
    }
}
