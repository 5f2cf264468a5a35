//! The select lists both backends read alike: a job's figures and an
//! attempt, by the same column names in both schemas.

select_list! {
    /// A job's figures (the jobs table).
    pub(super) enum JobCol {
        Job = "job",
        Template = "template",
        Zone = "zone",
        Host = "host",
        Command = "command",
        Shell = "shell",
        FirstRun = "first_run",
        LastRun = "last_run",
        LastStatus = "last_status",
        LastExit = "last_exit",
        LastSuccess = "last_success",
        Failures = "failures",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        Abandoned = "abandoned",
        CheckedAt = "checked_at",
        Strip = "strip",
        OkKeys = "ok_keys",
    }
}

select_list! {
    /// An attempt (`a`: the attempts table), with its run's row id.
    pub(super) enum AttemptCol {
        Run = "a.run",
        Number = "a.n",
        StartedAt = "a.started_at",
        FinishedAt = "a.finished_at",
        ExitCode = "a.exit_code",
        Signal = "a.signal",
        TimedOut = "a.timed_out",
        Stdout = "a.stdout_tail",
        Stderr = "a.stderr_tail",
        Cut = "a.cut",
        Containment = "a.containment",
        Cause = "a.cause",
        PeakMemory = "a.peak_memory",
        CpuMs = "a.cpu_ms",
    }
}

/// The [`AttemptCol`] list, with the output tails or with `null` (the
/// dialect's NULL of their type, read as empty) in their place, so that a
/// history leaves them on disk.
pub(super) fn attempt_list(output: bool, null: &str) -> String {
    if output {
        AttemptCol::LIST.to_owned()
    } else {
        AttemptCol::LIST.replace("a.stdout_tail, a.stderr_tail", &format!("{null}, {null}"))
    }
}
