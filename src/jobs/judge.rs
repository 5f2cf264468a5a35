//! The judge of a job: its state and its figures, from what one read of
//! the ledger holds of it. A job's state is decided in [`state`] and
//! nowhere else.

use jiff::Timestamp;

use super::period::{Periodic, Zones};
use crate::key::{Period, Template};
use crate::ledger::{JobState, Pause, Status, Upstreams};
use crate::render;
use crate::render::status::{JobStatus, Paused, State, STRIP};

/// What the ledger holds of one job: its figures, its latest pause (held
/// or ended), its upstreams, the events it owes.
pub struct Facts<'a> {
    pub job: &'a JobState,
    /// The pause that holds now.
    pub pause: Option<&'a Pause>,
    /// The latest pause, ended (by `idem resume`, or its `--until`).
    pub ended: Option<&'a Pause>,
    pub upstreams: Option<&'a Upstreams>,
    pub owed: u64,
}

/// What a job's state is decided from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signs {
    /// A pause holds.
    pub paused: bool,
    /// Its latest finished run failed, or a run died without an outcome.
    pub failing: bool,
    /// A run of it goes on.
    pub running: bool,
    /// Its latest call waits, or gave up waiting, for an upstream.
    pub blocked: bool,
    /// A period is owed a success (see [`Periodic::overdue`]).
    pub overdue: bool,
    /// Its latest finished run was stopped by a person.
    pub stopped: bool,
}

/// A job's state: the one place it is decided. Failing first, even while
/// another run of the job goes on: its latest finished run failed (the
/// figures follow the order in which runs finished), and a slow job whose
/// runs overlap always has one going. A job whose latest run a person
/// stopped is stopped, until a run goes on or a period is owed. A blocked
/// job is blocked, not failing or overdue, unless a run of it goes on; a
/// paused job is paused.
pub fn state(signs: Signs) -> State {
    let base = if signs.failing {
        State::Failing
    } else if signs.running {
        State::Running
    } else if signs.overdue {
        State::Overdue
    } else if signs.stopped {
        State::Stopped
    } else {
        State::Ok
    };
    if signs.paused {
        State::Paused
    } else if signs.blocked && base != State::Running {
        State::Blocked
    } else {
        base
    }
}

/// A job's state and figures at `now`; the periods that began while it was
/// paused are not missed, a paused job is never overdue, and a resumed one
/// not before a whole period has begun since its resume.
pub fn judge(facts: &Facts<'_>, now: Timestamp, zones: &mut Zones, this_host: &str) -> JobStatus {
    let job = facts.job;
    let template = Template::parse(&job.template).ok();
    let period = template.as_ref().and_then(Template::period);
    let host = job.host.as_deref().unwrap_or(this_host);
    let periodic = match (&template, period) {
        (Some(template), Some(period)) => Some(Periodic {
            template,
            period,
            zone: zones.get(job.zone.as_deref()),
            host,
            paused: match (facts.pause, facts.ended) {
                (Some(held), _) => Some((held.since, None)),
                (None, Some(ended)) => Some((ended.since, ended.until)),
                (None, None) => None,
            },
        }),
        _ => None,
    };
    let died = job.last_status == Some(Status::Running) && job.live == 0;
    let blocked_on = facts
        .upstreams
        .and_then(|upstreams| upstreams.blocked_on.clone());
    let stopped = job.last_stopped();
    let signs = Signs {
        paused: facts.pause.is_some(),
        failing: (job.failures > 0 && !stopped) || died,
        running: job.live > 0,
        blocked: blocked_on.is_some(),
        overdue: periodic.as_ref().is_some_and(|p| p.overdue(job, now)),
        stopped,
    };
    let state = state(signs);
    JobStatus {
        job: job.job.clone(),
        state,
        period: period.map(Period::name),
        template: job.template.clone(),
        zone: job.zone.clone(),
        last_run: job.last_run.map(render::json::rfc3339),
        last_success: job.last_success.map(render::json::rfc3339),
        last_called: job.checked_at.map(render::json::rfc3339),
        failures: job.failures,
        missed: periodic.as_ref().map(|p| p.missed(job, now)),
        strip: strip(job),
        command: render::lossy_words(&job.command),
        shell: job.shell,
        owed: facts.owed,
        argv: job.command.clone(),
        paused: facts.pause.map(shown),
        after: facts
            .upstreams
            .map(|upstreams| upstreams.templates.clone())
            .unwrap_or_default(),
        blocked_on: blocked_on.filter(|_| state == State::Blocked),
    }
}

/// Its latest outcomes, oldest first, then `running` when one goes on.
fn strip(job: &JobState) -> Vec<&'static str> {
    let marks: Vec<char> = job.strip.chars().collect();
    let mut strip: Vec<&'static str> = marks[marks.len().saturating_sub(STRIP)..]
        .iter()
        .map(|mark| match *mark {
            's' => "succeeded",
            'f' => "failed",
            'a' => "abandoned",
            crate::ledger::STOPPED => "stopped",
            _ => "running",
        })
        .collect();
    if job.live > 0 {
        strip.push("running");
    }
    strip
}

/// A pause as `status` shows it.
pub fn shown(pause: &Pause) -> Paused {
    Paused {
        by: pause.by.clone(),
        since: render::json::rfc3339(pause.since),
        reason: pause.reason.clone(),
        until: pause.until.map(render::json::rfc3339),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_wins_and_a_block_gives_way_only_to_a_run_going_on() {
        let signs = Signs {
            failing: true,
            blocked: true,
            ..Signs::default()
        };
        assert_eq!(state(signs), State::Blocked);
        let running = Signs {
            running: true,
            blocked: true,
            ..Signs::default()
        };
        assert_eq!(state(running), State::Running);
        let paused = Signs {
            paused: true,
            ..running
        };
        assert_eq!(state(paused), State::Paused);
        let failing = Signs {
            failing: true,
            running: true,
            overdue: true,
            ..Signs::default()
        };
        assert_eq!(state(failing), State::Failing);
        assert_eq!(state(Signs::default()), State::Ok);
        let stopped = Signs {
            stopped: true,
            ..Signs::default()
        };
        assert_eq!(state(stopped), State::Stopped);
        assert_eq!(
            state(Signs {
                overdue: true,
                ..stopped
            }),
            State::Overdue,
            "a stop does not hide a period owed"
        );
    }
}
