//! The buttons' POSTs (`/job/JOB/pause`, `/resume`, `/stop`): who may
//! press them, and what each does, by the ledger's own rules, as `idem
//! pause`, `idem resume` and `idem stop` do, recorded under the name of the
//! user who pressed (`USER@host`, the server's host). Each press is one
//! short write; the answer is a redirect (303) back to the page, whose
//! notice says what came of it.

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use jiff::Timestamp;
use nix::libc;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

use super::auth::Who;
use super::forms::{field, fields, same_site};
use super::pages::{self, Done};
use super::routes::{blocking, html, page_failed, text, unknown_job, Handle, Shared};
use crate::control::stop::{stop_job, Found, Stopping};
use crate::ledger::{self, glob_literal, is_glob, Ledger, PauseRequest};

/// The grace between SIGTERM and SIGKILL for a run stopped from the page,
/// as `idem stop`'s `--kill-after` has it by default.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How often a stop's processes are looked at again.
const POLL: Duration = Duration::from_millis(100);

/// The longest reason kept: a reason is a line on a page, not a document.
const REASON_CHARS: usize = 200;

/// What a button asks for.
enum Action {
    Pause {
        reason: Option<String>,
        until: Option<Timestamp>,
    },
    Resume,
    Stop,
}

pub(super) async fn press(
    State(shared): State<Handle>,
    Extension(who): Extension<Who>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let Some(by) = who.by() else {
        return refuse("this server is read-only: its buttons need a user, so start idem serve with --auth-file FILE or IDEM_SERVE_TOKEN");
    };
    if !same_site(&headers) {
        return refuse("refused: the request came from another site's page; press the button on this server's own page");
    }
    let form = fields(&body);
    let token = field(&form, "token").unwrap_or_default();
    if !shared.config.forms.accepts(&who, token) {
        return refuse(
            "the form's token is missing or not yours; reload the page and press the button again",
        );
    }
    let Some((job, verb)) = path.rsplit_once('/') else {
        return no_button(&shared);
    };
    let job = job.to_owned();
    let action = match verb {
        "pause" => match pause_action(&form) {
            Ok(action) => action,
            Err(line) => return bad_form(&shared, &line),
        },
        "resume" => Action::Resume,
        "stop" => Action::Stop,
        _ => return no_button(&shared),
    };
    let board = field(&form, "back") == Some("board");
    blocking(shared, page_failed, move |shared, now| {
        let Some(done) = act(shared, &job, action, by)? else {
            return Ok(unknown_job(shared, now, &job));
        };
        Ok(back(&job, board, done))
    })
    .await
}

/// The pause form's reason and end; a line that says what is wrong.
fn pause_action(form: &[(String, String)]) -> Result<Action, String> {
    let given = |name| {
        field(form, name)
            .map(str::trim)
            .filter(|text| !text.is_empty())
    };
    let reason = given("reason").map(|reason| reason.chars().take(REASON_CHARS).collect());
    let until = given("until")
        .map(crate::control::pause::until)
        .transpose()
        .map_err(|error| crate::exit::words(&format!("{error:#}")).replace('\n', " "))?;
    Ok(Action::Pause { reason, until })
}

/// Does `action` to `job`; `None` when the ledger knows no such job.
fn act(shared: &Shared, job: &str, action: Action, by: String) -> anyhow::Result<Option<Done>> {
    // A job's name is no glob here, even when it holds `*`: the rules take
    // a glob for a set of jobs, so such a name is given as a glob of itself.
    let target = if is_glob(job) {
        glob_literal(job)
    } else {
        job.to_owned()
    };
    match action {
        Action::Pause { reason, until } => {
            let request = PauseRequest { by, reason, until };
            let paused = shared.reader.write(|ledger| {
                known(ledger, job)?
                    .then(|| ledger.pause(&target, &request))
                    .transpose()
            })?;
            Ok(paused.map(|_| Done::Paused))
        }
        Action::Resume => {
            let resumed = shared.reader.write(|ledger| {
                known(ledger, job)?
                    .then(|| ledger.resume(&target))
                    .transpose()
            })?;
            Ok(resumed.map(|(_, paused)| {
                if paused.is_empty() {
                    Done::NotPaused
                } else {
                    Done::Resumed
                }
            }))
        }
        Action::Stop => stop(shared, job, by),
    }
}

/// Whether the ledger knows `job`: a button names a job of the page, and
/// a name made up is not paused for later as `idem pause` would.
fn known(ledger: &mut dyn Ledger, job: &str) -> anyhow::Result<bool> {
    Ok(ledger::job_state(ledger, job)?.is_some() || ledger.paused(job)?.is_some())
}

/// Asks the running runs of `job` to stop, and leaves their processes to
/// a task that signals them until they are gone: the answer does not wait
/// for a run to end, which may take its grace and more.
fn stop(shared: &Shared, job: &str, by: String) -> anyhow::Result<Option<Done>> {
    let found = shared.reader.write(|ledger| {
        if !known(ledger, job)? {
            return Ok(None);
        }
        let found = stop_job(ledger, job, libc::SIGTERM, STOP_GRACE, &by)?;
        Ok(Some(found))
    })?;
    let Some(found) = found else {
        return Ok(None);
    };
    let mut done = Done::NotRunning;
    for found in found {
        match found {
            Found::NotRunning => {}
            Found::Abandoned(_) if done == Done::NotRunning => done = Done::Abandoned,
            Found::Abandoned(_) => {}
            Found::Stopping(stopping) => {
                done = Done::Stopping;
                if stopping.local() {
                    tokio::runtime::Handle::current().spawn(press_until_gone(*stopping));
                }
            }
        }
    }
    Ok(Some(done))
}

/// Signals a stopped run's processes (SIGKILL once the grace is over)
/// until none is left, each look on a blocking thread; gives up a little
/// after the grace, when what is left is not this host's to kill.
async fn press_until_gone(mut stopping: Stopping) {
    let until = Instant::now() + STOP_GRACE + Duration::from_secs(5);
    loop {
        let looked = tokio::task::spawn_blocking(move || {
            stopping.press();
            let lives = stopping.lives();
            (stopping, lives)
        })
        .await;
        let Ok((again, true)) = looked else {
            return;
        };
        if Instant::now() >= until {
            return;
        }
        stopping = again;
        tokio::time::sleep(POLL).await;
    }
}

/// 303 back to the page the button was on, with what it did.
fn back(job: &str, board: bool, done: Done) -> Response {
    let location = if board {
        let job = utf8_percent_encode(job, NON_ALPHANUMERIC);
        format!("/?done={}&job={job}", done.flag())
    } else {
        format!("{}?done={}", pages::job_href(job), done.flag())
    };
    match HeaderValue::from_str(&location) {
        Ok(location) => (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response(),
        Err(_) => {
            refuse("the job's name cannot be written in a link; use idem pause, resume or stop")
        }
    }
}

/// 403 with one line saying why.
fn refuse(line: &str) -> Response {
    text(
        StatusCode::FORBIDDEN,
        "text/plain; charset=utf-8",
        format!("{line}\n"),
    )
}

fn no_button(shared: &Shared) -> Response {
    let line = "No such button. A job's buttons post to /job/JOB/pause, /job/JOB/resume and /job/JOB/stop.";
    let page = pages::message("Not found", &shared.ledger, Timestamp::now(), line);
    html(StatusCode::NOT_FOUND, page)
}

/// 400: a field of the form that cannot be taken (an `until` passed).
fn bad_form(shared: &Shared, line: &str) -> Response {
    let page = pages::message(
        "The job was not paused",
        &shared.ledger,
        Timestamp::now(),
        line,
    );
    html(StatusCode::BAD_REQUEST, page)
}
