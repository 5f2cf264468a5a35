//! The server's paths, what each answers, and what every answer carries:
//! the credentials check first, security headers last.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, Request, State};
use axum::http::header::{self, HeaderValue};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use jiff::Timestamp;

use super::auth::Who;
use super::config::Config;
use super::forms::{field, fields};
use super::pages::{self, Controls, Done};
use super::press;
use super::read::{self, Reader};
use crate::render;

/// What every request shares.
pub(super) struct Shared {
    pub config: Arc<Config>,
    pub reader: Reader,
    /// The ledger's name on pages, masked.
    pub ledger: String,
}

pub(super) type Handle = Arc<Shared>;

/// The content type Prometheus asks of a text exposition.
const METRICS_TYPE: &str = "text/plain; version=0.0.4";

/// Scripts, frames and every other source are refused: a page is HTML and
/// its inline style sheet, so markup that escaped escaping still runs
/// nothing.
const POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub fn router(config: Arc<Config>) -> Router {
    let shared = Arc::new(Shared {
        reader: Reader::new(config.location.clone()),
        ledger: config.ledger_name(),
        config,
    });
    Router::new()
        .route("/", get(board))
        .route("/job/{*job}", get(job).post(press::press))
        .route("/metrics", get(metrics))
        .route("/api/status", get(api_status))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), guard))
        .layer(middleware::map_response(secure))
        .with_state(shared)
}

/// Lets a request through only with the credentials the server asks for.
async fn guard(State(shared): State<Handle>, request: Request, next: Next) -> Response {
    if shared.config.guard.is_open() {
        let mut request = request;
        request.extensions_mut().insert(Who::Anyone);
        return next.run(request).await;
    }
    let headers = request.headers().clone();
    let checked = shared.clone();
    // bcrypt is slow by design: off the thread that answers HTTP.
    let admitted = tokio::task::spawn_blocking(move || checked.config.guard.admits(&headers))
        .await
        .unwrap_or(None);
    match admitted {
        Some(who) => {
            let mut request = request;
            request.extensions_mut().insert(who);
            next.run(request).await
        }
        None => shared.config.guard.challenge(),
    }
}

async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: with it a browser sends `Origin: null` with
        // a form's POST, and the buttons could not tell their own page
        // from another site's. Other sites still learn no path.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Runs `work` on a blocking thread (the ledger's reads block), with the
/// time the request is answered at; an error is a 503 in `fail`'s words.
pub(super) async fn blocking(
    shared: Handle,
    fail: fn(&Shared, Timestamp, &str) -> Response,
    work: impl FnOnce(&Shared, Timestamp) -> anyhow::Result<Response> + Send + 'static,
) -> Response {
    let result = tokio::task::spawn_blocking(move || {
        let now = Timestamp::now();
        work(&shared, now).unwrap_or_else(|error| {
            let line = crate::exit::words(&format!("{error:#}")).replace('\n', " ");
            fail(&shared, now, &line)
        })
    })
    .await;
    result.unwrap_or_else(|_| {
        text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            "idem serve failed to answer this request; see its stderr\n".to_owned(),
        )
    })
}

pub(super) fn html(status: StatusCode, body: String) -> Response {
    text(status, "text/html; charset=utf-8", body)
}

pub(super) fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}

/// A page that could not read the ledger.
pub(super) fn page_failed(shared: &Shared, now: Timestamp, line: &str) -> Response {
    let page = pages::message("The ledger cannot be read", &shared.ledger, now, line);
    html(StatusCode::SERVICE_UNAVAILABLE, page)
}

/// A script's answer that could not read the ledger: one line.
fn line_failed(_: &Shared, _: Timestamp, line: &str) -> Response {
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        "text/plain; charset=utf-8",
        format!("{line}\n"),
    )
}

async fn board(
    State(shared): State<Handle>,
    Extension(who): Extension<Who>,
    RawQuery(query): RawQuery,
) -> Response {
    blocking(shared, page_failed, move |shared, now| {
        let statuses = shared.reader.with(|ledger| read::statuses(ledger, now))?;
        let query = fields(query.as_deref().unwrap_or_default());
        // The notice names a job of the board's alone: a link cannot make
        // the board speak of anything else.
        let done = field(&query, "done")
            .and_then(Done::from_flag)
            .zip(field(&query, "job"))
            .filter(|(_, job)| statuses.iter().any(|status| status.job == *job))
            .map(|(done, job)| (done, job.to_owned()));
        let controls = Controls {
            token: shared.config.forms.token(&who),
            done,
        };
        Ok(html(
            StatusCode::OK,
            pages::board(&statuses, &shared.ledger, now, &controls),
        ))
    })
    .await
}

async fn job(
    State(shared): State<Handle>,
    Extension(who): Extension<Who>,
    Path(job): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    blocking(shared, page_failed, move |shared, now| {
        let page = shared.reader.with(|ledger| match ledger {
            Some(ledger) => read::job_page(ledger, &job, now),
            None => Ok(None),
        })?;
        let query = fields(query.as_deref().unwrap_or_default());
        let controls = Controls {
            token: shared.config.forms.token(&who),
            done: field(&query, "done")
                .and_then(Done::from_flag)
                .map(|done| (done, job.clone())),
        };
        Ok(match page {
            Some(page) => html(
                StatusCode::OK,
                pages::job(&page, &shared.ledger, now, &controls),
            ),
            None => unknown_job(shared, now, &job),
        })
    })
    .await
}

pub(super) fn unknown_job(shared: &Shared, now: Timestamp, job: &str) -> Response {
    let line = format!("The ledger holds no job named {job}.");
    let page = pages::message("No such job", &shared.ledger, now, &line);
    html(StatusCode::NOT_FOUND, page)
}

async fn not_found(State(shared): State<Handle>) -> Response {
    let line = "Nothing is here. The pages are /, /job/JOB, /metrics, /api/status and /healthz.";
    let page = pages::message("Not found", &shared.ledger, Timestamp::now(), line);
    html(StatusCode::NOT_FOUND, page)
}

/// What `idem ledger metrics` prints.
async fn metrics(State(shared): State<Handle>) -> Response {
    blocking(shared, line_failed, |shared, now| {
        let body = shared.reader.with(|ledger| {
            let Some(ledger) = ledger else {
                return Ok(render::metrics::job_metrics_text(&[]));
            };
            let jobs = ledger.jobs(None)?;
            let statuses = crate::jobs::read(ledger, None, now)?;
            let lost = crate::jobs::lost(ledger);
            let mut text = render::metrics::job_metrics_text(&jobs);
            text.push_str(&render::metrics::judged_metrics_text(&statuses, &lost));
            Ok(text)
        })?;
        Ok(text(StatusCode::OK, METRICS_TYPE, body))
    })
    .await
}

/// What `idem status --json` prints.
async fn api_status(State(shared): State<Handle>) -> Response {
    blocking(shared, line_failed, |shared, now| {
        let statuses = shared.reader.with(|ledger| read::statuses(ledger, now))?;
        let mut body = Vec::new();
        render::status::json(&mut body, &statuses)?;
        Ok(text(
            StatusCode::OK,
            "application/json",
            String::from_utf8(body)?,
        ))
    })
    .await
}

/// 200 when the ledger can be read; 503 and why otherwise (a ledger that
/// is not there yet is said so: a typo in --db looks just like it).
async fn healthz(State(shared): State<Handle>) -> Response {
    blocking(shared, line_failed, |shared, _| {
        let found = shared.reader.with(|ledger| match ledger {
            Some(ledger) => ledger.jobs(None).map(|_| true),
            None => Ok(false),
        })?;
        let plain = "text/plain; charset=utf-8";
        Ok(if found {
            text(StatusCode::OK, plain, "ok\n".to_owned())
        } else {
            let line = format!(
                "no ledger at {} yet: nothing has run under it (check --db or IDEM_DB)\n",
                shared.ledger
            );
            text(StatusCode::SERVICE_UNAVAILABLE, plain, line)
        })
    })
    .await
}
