//! The line of `ledger export` and `ledger import`: one run with its
//! attempts as a JSON object, its fields in the order the types of
//! [`export`] declare them.
//!
//! argv and output tails are bytes. A field holds them as a string when they
//! are valid UTF-8; otherwise the string is a lossy rendering for people and
//! a sibling `<field>_base64` holds the bytes, and that one wins on import.
//!
//! Import reads a line as it comes, never whole: the run is handed on once
//! its fields are read, then each attempt as it is read (`attempts_detail`
//! comes last, as export writes it), and a string longer than any tail idem
//! keeps is cut to its end while it is read (see [`cutter`]). So memory
//! holds one attempt, whatever the line holds.

mod cutter;
mod export;
mod fields;
mod import;

pub use export::export_line;
pub use import::{BadLine, Lines};

/// The longest line `import` reads: room for a run of several attempts
/// with the largest `--capture` of output, while a line of any length in
/// the input costs no more memory than this.
pub const MAX_LINE: usize = 16 << 20;

/// The most output of one stream a run keeps: the largest `--capture`, and
/// the longest tail `import` takes.
pub const MAX_CAPTURE: u64 = 1 << 20;

/// [`MAX_CAPTURE`] as a length.
const MAX_TAIL: usize = MAX_CAPTURE as usize;

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    use anyhow::Result;
    use jiff::Timestamp;
    use uuid::Uuid;

    use super::*;
    use crate::ledger::{Attempt, ExportedRun, ImportSink, Run, Status};

    #[derive(Default)]
    struct Collect {
        runs: Vec<(Run, bool)>,
        attempts: Vec<Attempt>,
    }

    impl ImportSink for Collect {
        fn run(&mut self, run: &Run, head: bool) -> Result<()> {
            self.runs.push((run.clone(), head));
            Ok(())
        }

        fn attempt(&mut self, attempt: &Attempt) -> Result<()> {
            self.attempts.push(attempt.clone());
            Ok(())
        }
    }

    fn read_back(bytes: &[u8]) -> Collect {
        let mut input = bytes;
        let mut lines = Lines::new(&mut input, "a line");
        let mut sink = Collect::default();
        while lines.next(&mut sink).unwrap() {}
        sink
    }

    fn exported(stdout: Vec<u8>) -> ExportedRun {
        let run = Run {
            key: "k".into(),
            job: "k-{date}".into(),
            head: true,
            run_id: Uuid::now_v7(),
            status: Status::Succeeded,
            exit_code: Some(0),
            signal: None,
            attempts: 1,
            started_at: Timestamp::from_millisecond(1_700_000_000_123).unwrap(),
            finished_at: Some(Timestamp::from_millisecond(1_700_000_001_456).unwrap()),
            host: "h".into(),
            pid: 42,
            command: vec!["printf".into(), OsString::from_vec(vec![0xff, b'x'])],
            shell: false,
            recovered: false,
        };
        ExportedRun {
            run,
            attempts: vec![Attempt {
                number: 1,
                started_at: Some(Timestamp::from_millisecond(1_700_000_000_200).unwrap()),
                finished_at: Some(Timestamp::from_millisecond(1_700_000_001_400).unwrap()),
                exit_code: Some(0),
                signal: None,
                timed_out: false,
                stdout_tail: stdout,
                stderr_tail: b"plain".to_vec(),
                cut: true,
            }],
            head: true,
        }
    }

    #[test]
    fn bytes_round_trip_through_export() {
        let exported = exported(vec![0xfe, b'o', b'k', b'\n']);
        let line = export_line(&exported).unwrap();
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(text.contains("stdout_tail_base64"), "{text}");
        assert!(!text.contains("stderr_tail_base64"), "{text}");
        let back = read_back(&line);
        assert_eq!(back.runs, vec![(exported.run.clone(), true)]);
        assert_eq!(back.attempts, exported.attempts);
    }

    #[test]
    fn a_long_tail_is_cut_to_its_end_as_it_is_read() {
        for stdout in [
            (0..3 * MAX_TAIL)
                .map(|n| b"a\n\"\x01\\"[n % 5])
                .collect::<Vec<u8>>(),
            (0..3 * MAX_TAIL).map(|n| (n % 251) as u8).collect(),
            "é€😀".repeat(MAX_TAIL).into_bytes(),
        ] {
            let exported = exported(stdout.clone());
            let back = read_back(&export_line(&exported).unwrap());
            assert_eq!(back.attempts.len(), 1);
            assert_eq!(
                back.attempts[0].stdout_tail,
                stdout[stdout.len() - MAX_TAIL..],
                "the tail's end is kept"
            );
        }
    }
}
