//! The steps of an attempt's setup after the fork, in the guardian and in
//! the command's process before its exec: each is named, so that one that
//! fails reaches idem as the step and its errno (the guardian's
//! `SETUP_FAILED` report), and nothing of the attempt runs half-guarded.

use std::io;

use crate::exit;

/// A step of the setup after the fork. Its number travels in a frame or
/// on the exec report pipe; its words are said by idem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The command's exec itself: its failure is not a setup's (126, 127).
    Exec = 0,
    BlockSignals,
    GuardianGroup,
    Stdio,
    KeepFds,
    Subreaper,
    WatchChildren,
    ForkCommand,
    LetIn,
    CommandGroup,
    Foreground,
    DeathSignal,
    GuardianGone,
    KeepLock,
    SignalDefaults,
    UnblockSignals,
    EnterCgroup,
    Nice,
    IoNice,
}

/// Every step, in the order of their numbers.
const STEPS: [Step; 19] = [
    Step::Exec,
    Step::BlockSignals,
    Step::GuardianGroup,
    Step::Stdio,
    Step::KeepFds,
    Step::Subreaper,
    Step::WatchChildren,
    Step::ForkCommand,
    Step::LetIn,
    Step::CommandGroup,
    Step::Foreground,
    Step::DeathSignal,
    Step::GuardianGone,
    Step::KeepLock,
    Step::SignalDefaults,
    Step::UnblockSignals,
    Step::EnterCgroup,
    Step::Nice,
    Step::IoNice,
];

impl Step {
    /// What may fix this step's failure, said after its errno.
    fn fix(self) -> Option<&'static str> {
        match self {
            Step::KeepFds => Some("raise the open files limit, ulimit -n, to 103 or more"),
            Step::ForkCommand => Some("raise ulimit -u or the cgroup's pids.max"),
            Step::EnterCgroup => Some("--contain guardian runs without one"),
            _ => None,
        }
    }

    /// What idem says when this step failed.
    fn words(self) -> &'static str {
        match self {
            Step::Exec => "could not execute the command",
            Step::BlockSignals => "could not block signals in the command's guardian",
            Step::GuardianGroup => {
                "could not give the command's guardian a process group of its own"
            }
            Step::Stdio => "could not give the command's guardian its stdin, stdout and stderr",
            Step::KeepFds => "could not move the command's guardian's descriptors out of its way",
            Step::Subreaper => "could not become a subreaper",
            Step::WatchChildren => "could not watch the run's processes end (signalfd)",
            Step::ForkCommand => "could not fork the command's process",
            Step::LetIn => "could not let the command in",
            Step::CommandGroup => "could not give the command a process group of its own",
            Step::Foreground => "could not give the command the terminal's foreground",
            Step::DeathSignal => "could not tie the command to its guardian (PR_SET_PDEATHSIG)",
            Step::GuardianGone => "the command's guardian ended before the command started",
            Step::KeepLock => "could not pass the run's lock on to the command",
            Step::SignalDefaults => "could not restore the command's signal dispositions",
            Step::UnblockSignals => "could not unblock the command's signals",
            Step::EnterCgroup => "could not move the command into the attempt's cgroup",
            Step::Nice => "could not give the command its nice value (--nice)",
            Step::IoNice => "could not give the command its I/O priority (--ionice)",
        }
    }
}

/// A step that failed, with its errno (0: none to tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed {
    pub step: Step,
    pub errno: i32,
}

impl Failed {
    /// The step, with the errno the failed call left. Async-signal-safe.
    pub fn now(step: Step) -> Failed {
        Failed {
            step,
            errno: io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }
    }

    /// The step and errno as they travel: two numbers.
    pub fn to_numbers(self) -> (i32, i32) {
        (self.step as i32, self.errno)
    }

    /// A step and errno from their two numbers; an unknown step (none is
    /// ever written) is taken for the exec's.
    pub fn from_numbers(step: i32, errno: i32) -> Failed {
        let step = usize::try_from(step).ok().and_then(|step| STEPS.get(step));
        Failed {
            step: step.copied().unwrap_or(Step::Exec),
            errno,
        }
    }

    /// What idem says of a step that failed, from its two numbers.
    pub fn words(step: i32, errno: i32) -> String {
        let step = usize::try_from(step).ok().and_then(|step| STEPS.get(step));
        let what = step.map_or("the command's guardian failed to set the run up", |step| {
            step.words()
        });
        let mut said = what.to_owned();
        if errno != 0 {
            let error = io::Error::from_raw_os_error(errno);
            said = format!("{said}: {}", exit::io_words(&error));
        }
        if let Some(fix) = step.and_then(|step| step.fix()) {
            said = format!("{said} ({fix})");
        }
        said
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_travels_as_its_place_in_the_table() {
        for (number, step) in STEPS.iter().enumerate() {
            assert_eq!(*step as usize, number);
        }
        let (step, errno) = Failed {
            step: Step::Subreaper,
            errno: 1,
        }
        .to_numbers();
        assert_eq!(
            Failed::words(step, errno),
            "could not become a subreaper: operation not permitted"
        );
        assert_eq!(
            Failed::words(Step::GuardianGone as i32, 0),
            "the command's guardian ended before the command started"
        );
    }
}
