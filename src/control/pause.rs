//! Pausing and resuming jobs, as `idem pause`, `idem resume` and the
//! board's buttons ask it: what a pause's end given as text means.

use anyhow::Result;
use jiff::Timestamp;

use crate::exit::Failure;
use crate::render;
use crate::when::{parse_time, When};

/// `--until`: a duration from now, or a time to come (`idem serve`'s
/// pause button reads its field so too).
pub fn until(text: &str) -> Result<Timestamp> {
    let now = Timestamp::now();
    let at = match parse_time("--until", text, false)? {
        When::Ago(after) => now.checked_add(after).unwrap_or(Timestamp::MAX),
        When::At(at) => at,
    };
    if at <= now {
        return Err(Failure::usage(format!(
            "--until {} has passed; give a time to come or a duration (2h)",
            render::printable(text)
        ))
        .into());
    }
    Ok(at)
}
