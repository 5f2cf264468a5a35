//! `--ping cronitor:URL`: Cronitor's telemetry API, a GET of the
//! monitor's URL (`https://cronitor.link/p/API_KEY/MONITOR`) with `state`
//! (`run` at the claim, `complete` or `fail` at the outcome), `series`
//! (the run id, which pairs them), `status_code` (the exit code) and
//! `message` (the output tail, at most Cronitor's 2,000 characters).

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

use super::events::Payload;
use super::http::Request;
use crate::ledger::NewEvent;

/// The most of a message Cronitor keeps.
pub const MESSAGE_LIMIT: usize = 2000;

/// The telemetry ping for `event`, or none for an event Cronitor has no
/// state for (`slow`). A failure below `--alert-after` completes with its
/// exit code, so that Cronitor keeps its record without an alert.
pub fn request(url: &str, event: &NewEvent, payload: &Payload) -> Option<Request<'static>> {
    let state = match event.kind.as_str() {
        "start" => "run",
        "success" | "recovery" => "complete",
        "failure" if payload.alert => "fail",
        "failure" | "stopped" => "complete",
        _ => return None,
    };
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut query: Vec<String> = query.map(str::to_owned).into_iter().collect();
    query.push(format!("state={state}"));
    query.push(format!("series={}", event.run_id));
    if let Some(code) = payload.exit_code {
        query.push(format!("status_code={code}"));
    }
    let message = message(&event.body);
    if !message.is_empty() {
        query.push(format!(
            "message={}",
            utf8_percent_encode(&message, NON_ALPHANUMERIC)
        ));
    }
    Some(Request {
        post: false,
        url: format!("{base}?{}", query.join("&")),
        headers: Vec::new(),
        body: Vec::new().into(),
    })
}

/// The output's last characters that fit a message, cut at a character.
fn message(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    let chars = text.chars().count();
    text.chars()
        .skip(chars.saturating_sub(MESSAGE_LIMIT))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_the_outputs_last_characters_cut_at_a_character() {
        let output = "é".repeat(MESSAGE_LIMIT + 5) + "end";
        let kept = message(output.as_bytes());
        assert_eq!(kept.chars().count(), MESSAGE_LIMIT);
        assert!(kept.ends_with("éend"));
    }
}
