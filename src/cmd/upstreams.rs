//! `idem status` for jobs that wait for each other (`--after`): what each
//! blocked job waits for, under the table; `status --after` lists each
//! job's upstreams.

use std::io::Write;

use anyhow::Result;

use crate::render;
use crate::render::status::JobStatus;

/// Under the table: what each blocked job waits for.
pub fn blocked_lines(out: &mut dyn Write, statuses: &[JobStatus]) -> Result<()> {
    for status in statuses {
        if let Some(keys) = &status.blocked_on {
            writeln!(
                out,
                "{} is blocked: waiting for {}",
                render::printable(&status.job),
                render::printable(&keys.join(", "))
            )?;
        }
    }
    Ok(())
}

/// `status --after`: each job, its state, its upstream templates, and the
/// keys a blocked one waits for.
pub fn text(out: &mut dyn Write, statuses: &[JobStatus], style: render::Style) -> Result<()> {
    if statuses.is_empty() {
        return Ok(());
    }
    let mut table = render::new_table(style);
    table.set_header(["JOB", "STATE", "AFTER", "WAITING FOR"]);
    for status in statuses {
        let list = |items: &[String]| {
            if items.is_empty() {
                "-".to_owned()
            } else {
                render::printable(&items.join(" ")).into_owned()
            }
        };
        table.add_row([
            render::printable(&status.job).into_owned(),
            status.state.as_str().to_owned(),
            list(&status.after),
            status.blocked_on.as_deref().map_or("-".to_owned(), list),
        ]);
    }
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    writeln!(out, "{}", render::table_text(&table))?;
    Ok(())
}
