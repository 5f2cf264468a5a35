//! Fleet control's buttons (pause, resume, stop) and the notice a page
//! shows after one was pressed. Plain HTML forms that POST to the job's
//! path with the user's form token; shown only to a user who signed in
//! (a server without credentials is read-only).

use maud::{html, Markup};

use super::job_href;

/// What a press of a button came to, carried back to the page in its
/// query (`?done=paused`): a word of this list, never free text, so that
/// a link cannot make a page say what it likes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    Paused,
    Resumed,
    NotPaused,
    Stopping,
    NotRunning,
    Abandoned,
}

impl Done {
    const ALL: [Done; 6] = [
        Done::Paused,
        Done::Resumed,
        Done::NotPaused,
        Done::Stopping,
        Done::NotRunning,
        Done::Abandoned,
    ];

    pub fn flag(self) -> &'static str {
        match self {
            Done::Paused => "paused",
            Done::Resumed => "resumed",
            Done::NotPaused => "not-paused",
            Done::Stopping => "stopping",
            Done::NotRunning => "not-running",
            Done::Abandoned => "abandoned",
        }
    }

    pub fn from_flag(flag: &str) -> Option<Done> {
        Done::ALL.into_iter().find(|done| done.flag() == flag)
    }

    /// The notice's words about `job`.
    fn words(self, job: &str) -> String {
        match self {
            Done::Paused => format!("Paused {job}: its runs start nothing until it is resumed."),
            Done::Resumed => format!("Resumed {job}: its next run runs."),
            Done::NotPaused => format!("{job} was not paused."),
            Done::Stopping => format!(
                "Asked the running runs of {job} to stop; each is recorded failed once it has stopped."
            ),
            Done::NotRunning => format!("Nothing of {job} was running."),
            Done::Abandoned => format!(
                "The running run of {job} had lost its owner; it is marked abandoned."
            ),
        }
    }
}

/// The one-line notice of what a button did, if one was pressed.
pub fn notice(done: Option<(Done, &str)>) -> Markup {
    match done {
        Some((done, job)) => html! { p.notice role="status" { (done.words(job)) } },
        None => html! {},
    }
}

/// What a job's buttons need to know.
pub struct Buttons<'a> {
    pub job: &'a str,
    /// The user's form token.
    pub token: &'a str,
    pub paused: bool,
    pub running: bool,
    /// The page to come back to: `board` or `job`.
    pub back: &'static str,
}

/// A job's buttons: Pause (with a reason and an end) or Resume, and Stop
/// while a run of the job runs.
pub fn buttons(buttons: &Buttons) -> Markup {
    let path = job_href(buttons.job);
    let hidden = html! {
        input type="hidden" name="token" value=(buttons.token);
        input type="hidden" name="back" value=(buttons.back);
    };
    html! {
        div.actions {
            @if buttons.paused {
                form method="post" action={ (path) "/resume" } {
                    (hidden)
                    button type="submit" { "Resume" }
                }
            } @else {
                form method="post" action={ (path) "/pause" } {
                    (hidden)
                    input type="text" name="reason" maxlength="200" placeholder="reason"
                        aria-label="reason (optional)";
                    input type="text" name="until" maxlength="40" placeholder="until (2h)"
                        aria-label="until: a duration or a time (optional)";
                    button type="submit" { "Pause" }
                }
            }
            @if buttons.running {
                form method="post" action={ (path) "/stop" } {
                    (hidden)
                    button.stop type="submit" { "Stop" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_reads_back_as_what_was_done_and_nothing_else() {
        for done in Done::ALL {
            assert_eq!(Done::from_flag(done.flag()), Some(done));
        }
        assert_eq!(Done::from_flag("<b>owned</b>"), None);
    }

    #[test]
    fn a_jobs_name_is_text_in_its_buttons() {
        let markup = buttons(&Buttons {
            job: "a\"><script>x</script>",
            token: "t",
            paused: false,
            running: true,
            back: "job",
        })
        .into_string();
        assert!(!markup.contains("<script>"), "{markup}");
        assert!(markup.contains("action=\"/job/a%22%3E%3Cscript%3Ex%3C%2Fscript%3E/pause\""));
        assert!(markup.contains(">Stop</button>"));
    }
}
