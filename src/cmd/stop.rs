//! `idem stop`: stops the running runs of keys wherever they run, and
//! waits until they are recorded over (see `control::stop`).

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cli::StopArgs;
use crate::control::stop::{stop, Found, State, Stopping};
use crate::exit;
use crate::ledger::{self, Head, Ledger, Location};

/// How often the stopped runs are looked at again.
const POLL: Duration = Duration::from_millis(100);

pub fn run(args: &StopArgs, location: &Location, quiet: bool) -> Result<u8> {
    let say = |text: &str| {
        if !quiet {
            exit::say(text);
        }
    };
    let Some(mut ledger) = ledger::open_existing(location)? else {
        say(&format!("nothing running: {}", args.keys.join(", ")));
        return Ok(exit::NOT_FOUND);
    };
    let keys = super::ledger::expand_globs(ledger.as_mut(), &args.keys)?;
    let grace: Duration = args.kill_after.into();
    let mut stopping = Vec::new();
    let mut abandoned = 0;
    for key in &keys {
        match stop(ledger.as_mut(), key, args.signal.0, grace)? {
            Found::NotRunning => {}
            Found::Abandoned(head) => {
                abandoned += 1;
                say(&format!("{key}: {}; marked abandoned", gone(&head)));
            }
            Found::Stopping(run) => {
                say(&format!(
                    "{key}: stopping run {} (pid {} on {}) with signal {}",
                    run.head.run.run_id, run.head.run.pid, run.head.run.host, args.signal.0
                ));
                stopping.push(*run);
            }
        }
    }
    if stopping.is_empty() && abandoned == 0 {
        say(&format!("nothing running: {}", args.keys.join(", ")));
        return Ok(exit::NOT_FOUND);
    }
    let code = wait(ledger.as_mut(), stopping, args.wait.into(), &say)?;
    ledger.leave();
    Ok(code)
}

/// Waits up to `wait` for each stopped run to be recorded over; says
/// what each came to. 0, or 75 when one still ran at the end.
fn wait(
    ledger: &mut dyn Ledger,
    mut stopping: Vec<Stopping>,
    wait: Duration,
    say: &dyn Fn(&str),
) -> Result<u8> {
    let until = Instant::now() + wait;
    loop {
        let mut going = Vec::new();
        for mut run in stopping {
            let key = run.key.clone();
            match run.look(ledger)? {
                State::Going => going.push(run),
                State::Recorded(Some(status)) => {
                    say(&format!("{key}: stopped, recorded {}", status.as_str()));
                }
                State::Recorded(None) => {
                    say(&format!("{key}: stopped; the key is another run's now"))
                }
                State::Abandoned => say(&format!("{key}: {}; marked abandoned", gone(&run.head))),
            }
        }
        stopping = going;
        if stopping.is_empty() {
            return Ok(exit::SUCCESS);
        }
        if Instant::now() >= until {
            return Ok(ran_out(&stopping, wait, say));
        }
        std::thread::sleep(POLL);
    }
}

/// The runs still not recorded over when `--wait` ran out, said: one whose
/// processes are all gone is stopped (its owner, frozen, records it when it
/// goes on); one that still runs is a conflict.
fn ran_out(stopping: &[Stopping], wait: Duration, say: &dyn Fn(&str)) -> u8 {
    let waited = humantime::format_duration(wait);
    let mut code = exit::SUCCESS;
    for run in stopping {
        let (key, head) = (&run.key, &run.head.run);
        if run.local() && !run.lives() {
            say(&format!(
                "{key}: stopped, but its owner (pid {} on {}) has not recorded it after {waited}: it is stopped or busy, and records it failed when it goes on",
                head.pid, head.host
            ));
        } else {
            code = exit::CONFLICT;
            say(&format!(
                "{key}: still running after {waited}; its owner (pid {} on {}) has the request and stops it at its next heartbeat, or wait longer with --wait",
                head.pid, head.host
            ));
        }
    }
    code
}

/// Why a running run was found without an owner.
fn gone(head: &Head) -> String {
    format!(
        "its owner (pid {} on {}) was gone",
        head.run.pid, head.run.host
    )
}
