//! Windows Job Objects: a set of processes stopped together, with limits the kernel enforces.
//! Every job here is kill-on-close, so no process of it outlives the handle; the Unix
//! counterparts are process groups (MCP servers) and the sandbox's namespaces or no-fork
//! rule (run_code).

#![allow(
    unsafe_code,
    reason = "Job Objects are reached through the Win32 API, which has no safe wrapper here"
)]

use std::os::windows::io::{AsRawHandle as _, FromRawHandle as _, OwnedHandle, RawHandle};

use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
    JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION, JOB_OBJECT_LIMIT_JOB_MEMORY,
    JOB_OBJECT_LIMIT_JOB_TIME, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION, JOBOBJECT_BASIC_UI_RESTRICTIONS,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectBasicAndIoAccountingInformation,
    JobObjectBasicUIRestrictions, JobObjectExtendedLimitInformation, QueryInformationJobObject,
    SetInformationJobObject, TerminateJobObject,
};

/// What a job's processes may use together.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Committed memory of all its processes together.
    pub(crate) memory_bytes: u64,
    /// Processes alive at once.
    pub(crate) processes: u32,
    /// User-mode CPU time of all its processes together.
    pub(crate) cpu_seconds: u64,
}

/// A kill-on-close Job Object.
#[derive(Debug)]
pub(crate) struct Job(OwnedHandle);

impl Job {
    /// A new job that kills its processes when dropped, with `limits` when given (then also
    /// no access to the clipboard, the desktop or system settings).
    pub(crate) fn new(limits: Option<Limits>) -> std::io::Result<Job> {
        // SAFETY: no security attributes, no name: a new anonymous job.
        let raw = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if raw.is_null() {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh handle that nothing else owns.
        let job = Job(unsafe { OwnedHandle::from_raw_handle(raw as RawHandle) });
        // SAFETY: an all-zero JOBOBJECT_EXTENDED_LIMIT_INFORMATION is "no limits".
        let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        if let Some(limits) = limits {
            info.BasicLimitInformation.LimitFlags |= JOB_OBJECT_LIMIT_JOB_MEMORY
                | JOB_OBJECT_LIMIT_ACTIVE_PROCESS
                | JOB_OBJECT_LIMIT_JOB_TIME
                | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION;
            info.JobMemoryLimit = usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX);
            info.BasicLimitInformation.ActiveProcessLimit = limits.processes;
            // In units of 100 ns.
            info.BasicLimitInformation.PerJobUserTimeLimit =
                i64::try_from(limits.cpu_seconds.saturating_mul(10_000_000)).unwrap_or(i64::MAX);
        }
        job.set(JobObjectExtendedLimitInformation, &info)?;
        if limits.is_some() {
            let ui = JOBOBJECT_BASIC_UI_RESTRICTIONS {
                // Every JOB_OBJECT_UILIMIT_* flag: clipboard, desktop, display and system
                // settings, global atoms, other processes' windows, exiting Windows.
                UIRestrictionsClass: 0x1ff,
            };
            job.set(JobObjectBasicUIRestrictions, &ui)?;
        }
        Ok(job)
    }

    fn set<T>(&self, class: i32, info: &T) -> std::io::Result<()> {
        let size = u32::try_from(std::mem::size_of::<T>()).unwrap_or(u32::MAX);
        // SAFETY: `info` is the structure `class` names, alive for the call.
        let ok = unsafe {
            SetInformationJobObject(self.raw(), class, std::ptr::from_ref(info).cast(), size)
        };
        if ok == 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn raw(&self) -> windows_sys::Win32::Foundation::HANDLE {
        self.0.as_raw_handle().cast()
    }

    /// Puts the process whose handle is `process` in the job (with the processes it starts
    /// from then on).
    pub(crate) fn assign(&self, process: RawHandle) -> std::io::Result<()> {
        // SAFETY: both handles are open for the call.
        if unsafe { AssignProcessToJobObject(self.raw(), process.cast()) } == 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Kills every process of the job now.
    pub(crate) fn terminate(&self) {
        // SAFETY: the handle is open; a job with no process left is not an error.
        unsafe {
            TerminateJobObject(self.raw(), 1);
        }
    }

    /// Bytes the job's processes have written so far (files and pipes).
    pub(crate) fn bytes_written(&self) -> u64 {
        self.accounting()
            .map_or(0, |info| info.IoInfo.WriteTransferCount)
    }

    /// User-mode CPU time of all the job's processes so far, ended ones included.
    pub(crate) fn cpu_seconds_used(&self) -> u64 {
        self.accounting().map_or(0, |info| {
            // In units of 100 ns.
            u64::try_from(info.BasicInfo.TotalUserTime).unwrap_or(0) / 10_000_000
        })
    }

    fn accounting(&self) -> Option<JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION> {
        // SAFETY: all-zero is a valid value of this plain structure.
        let mut info: JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
        let size = u32::try_from(std::mem::size_of_val(&info)).unwrap_or(u32::MAX);
        // SAFETY: `info` is the structure the class names and is large enough.
        let ok = unsafe {
            QueryInformationJobObject(
                self.raw(),
                JobObjectBasicAndIoAccountingInformation,
                std::ptr::from_mut(&mut info).cast(),
                size,
                std::ptr::null_mut(),
            )
        };
        (ok != 0).then_some(info)
    }
}

/// Resumes every thread of process `pid`, started with `CREATE_SUSPENDED` so that it could be
/// put in a job before it ran (a process started by tokio gives no handle to its thread).
pub(crate) fn resume_process(pid: u32) -> std::io::Result<()> {
    use windows_sys::Win32::System::Diagnostics::ToolHelp::{
        CreateToolhelp32Snapshot, TH32CS_SNAPTHREAD, THREADENTRY32, Thread32First, Thread32Next,
    };
    use windows_sys::Win32::System::Threading::{OpenThread, ResumeThread, THREAD_SUSPEND_RESUME};
    // SAFETY: a snapshot of every thread of the system; closed by the OwnedHandle.
    let raw = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) };
    if raw.is_null() || raw as isize == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh handle that nothing else owns.
    let snapshot = unsafe { OwnedHandle::from_raw_handle(raw as RawHandle) };
    let mut entry = THREADENTRY32 {
        dwSize: u32::try_from(std::mem::size_of::<THREADENTRY32>()).unwrap_or(0),
        cntUsage: 0,
        th32ThreadID: 0,
        th32OwnerProcessID: 0,
        tpBasePri: 0,
        tpDeltaPri: 0,
        dwFlags: 0,
    };
    let mut resumed = 0;
    // SAFETY: `entry` is a THREADENTRY32 with its size set, the snapshot open.
    let mut more = unsafe { Thread32First(snapshot.as_raw_handle().cast(), &raw mut entry) } != 0;
    while more {
        if entry.th32OwnerProcessID == pid {
            // SAFETY: a thread id from the snapshot; the handle is closed by OwnedHandle.
            let thread = unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) };
            if !thread.is_null() {
                // SAFETY: as above.
                let thread = unsafe { OwnedHandle::from_raw_handle(thread as RawHandle) };
                // SAFETY: an open thread handle with THREAD_SUSPEND_RESUME.
                if unsafe { ResumeThread(thread.as_raw_handle().cast()) } != u32::MAX {
                    resumed += 1;
                }
            }
        }
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(snapshot.as_raw_handle().cast(), &raw mut entry) } != 0;
    }
    if resumed == 0 {
        return Err(std::io::Error::other(
            "no thread of the process could be resumed",
        ));
    }
    Ok(())
}
