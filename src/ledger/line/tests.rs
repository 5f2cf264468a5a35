//! Export then import, by example.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use anyhow::Result;
use jiff::Timestamp;
use uuid::Uuid;

use super::*;
use crate::ledger::{Attempt, ExportedRun, ImportSink, Run, Status};
use crate::process::Containment;

#[derive(Default)]
struct Collect {
    fences: Vec<i64>,
    runs: Vec<(Run, bool)>,
    attempts: Vec<Attempt>,
}

impl ImportSink for Collect {
    fn ledger_fence(&mut self, fence: i64) -> Result<()> {
        self.fences.push(fence);
        Ok(())
    }

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
        note: None,
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
            containment: Some(Containment::PidNamespace),
            cause: Some("killed for memory".into()),
            peak_memory: Some(1 << 20),
            cpu_ms: Some(12),
        }],
        head: true,
        ledger_fence: 7,
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
fn the_ledgers_fence_comes_first_and_a_line_without_it_still_imports() {
    let line = export_line(&exported(b"ok".to_vec())).unwrap();
    let text = String::from_utf8(line).unwrap();
    assert!(
        text.starts_with(r#"{"ledger_fence":7,"key":"k","#),
        "{text}"
    );
    assert_eq!(read_back(text.as_bytes()).fences, vec![7]);

    let older = text.replacen(r#""ledger_fence":7,"#, "", 1);
    let back = read_back(older.as_bytes());
    assert_eq!(back.fences, Vec::<i64>::new(), "no fence to raise");
    assert_eq!(back.runs.len(), 1);

    let below = text.replacen("7", "-1", 1);
    let mut input = below.as_bytes();
    let error = Lines::new(&mut input, "a line")
        .next(&mut Collect::default())
        .unwrap_err();
    assert_eq!(format!("{error:#}"), "line 1: ledger_fence -1 is below 0");
}

#[test]
fn an_attempts_containment_goes_by_its_name_and_an_older_line_has_none() {
    let line = export_line(&exported(b"ok".to_vec())).unwrap();
    let text = String::from_utf8(line).unwrap();
    assert!(text.contains(r#""containment":"pid-namespace""#), "{text}");
    let held = |text: &str| read_back(text.as_bytes()).attempts[0].containment;
    assert_eq!(held(&text), Some(Containment::PidNamespace));
    let guardian = text.replacen("pid-namespace", "guardian", 1);
    assert_eq!(held(&guardian), Some(Containment::GuardianOnly));
    let cgroup = text.replacen("pid-namespace", "cgroup", 1);
    assert_eq!(held(&cgroup), Some(Containment::Cgroup));
    let older = text.replacen(r#""containment":"pid-namespace","#, "", 1);
    assert!(!older.contains("containment"), "{older}");
    assert_eq!(held(&older), None, "not recorded");

    let unknown = text.replacen("pid-namespace", "jail", 1);
    let mut input = unknown.as_bytes();
    let error = Lines::new(&mut input, "a line")
        .next(&mut Collect::default())
        .unwrap_err();
    assert_eq!(
        format!("{error:#}"),
        "line 1: containment 'jail' is none of cgroup, pid-namespace, guardian"
    );
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

// ---- properties, with serde_json as the reference -----------------------

mod properties {
    use std::collections::BTreeSet;

    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    /// Bytes as a run holds them: text (any Unicode), or any bytes, or a
    /// piece repeated past the length the reader cuts while it reads.
    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => ".{0,40}".prop_map(String::into_bytes),
            4 => vec(any::<u8>(), 0..max),
            1 => (vec(any::<u8>(), 1..40), 2_000..5_000usize)
                .prop_map(|(piece, times)| piece.repeat(times)),
            1 => (".{1,20}", 4_000..8_000usize)
                .prop_map(|(piece, times)| piece.repeat(times).into_bytes()),
        ]
    }

    fn time() -> impl Strategy<Value = Timestamp> {
        (0..4_102_444_800_000i64).prop_map(|ms| Timestamp::from_millisecond(ms).unwrap())
    }

    fn status() -> impl Strategy<Value = Status> {
        prop_oneof![
            Just(Status::Running),
            Just(Status::Succeeded),
            Just(Status::Failed),
            Just(Status::Abandoned),
        ]
    }

    fn attempt(number: u32) -> impl Strategy<Value = Attempt> {
        let times = (proptest::option::of(time()), proptest::option::of(time()));
        let codes = (any::<Option<i32>>(), any::<Option<i32>>());
        let held = prop_oneof![
            Just(None),
            Just(Some(Containment::PidNamespace)),
            Just(Some(Containment::GuardianOnly)),
            Just(Some(Containment::Cgroup)),
        ];
        let flags = (any::<(bool, bool)>(), held);
        (times, codes, flags, bytes(300), bytes(300)).prop_map(
            move |(
                (started_at, finished_at),
                (exit_code, signal),
                ((timed_out, cut), containment),
                out,
                err,
            )| {
                Attempt {
                    number,
                    started_at,
                    finished_at,
                    exit_code,
                    signal,
                    timed_out,
                    stdout_tail: out,
                    stderr_tail: err,
                    cut,
                    containment,
                    cause: None,
                    peak_memory: None,
                    cpu_ms: None,
                }
            },
        )
    }

    fn argv() -> impl Strategy<Value = Vec<OsString>> {
        let word = prop_oneof![
            "[^\u{0}]{0,20}".prop_map(String::into_bytes),
            vec(1..=255u8, 0..20),
        ];
        vec(word.prop_map(OsString::from_vec), 1..5)
    }

    prop_compose! {
        fn run()(
            key in "\\PC{1,30}".prop_filter("a valid key", |key| crate::key::validate(key).is_ok()),
            job in "\\PC{1,30}",
            (head, shell, recovered) in any::<(bool, bool, bool)>(),
            run_id in any::<u128>(),
            status in status(),
            (exit_code, signal) in any::<(Option<i32>, Option<i32>)>(),
            attempts in any::<u32>(),
            started_at in time(),
            finished_at in proptest::option::of(time()),
            host in any::<String>(),
            pid in any::<u32>(),
            command in argv(),
            note in proptest::option::of(any::<String>()),
        ) -> Run {
            // A success without its finish is refused: its TTL would never end.
            let finished_at = match status {
                Status::Succeeded => finished_at.or(Some(started_at)),
                _ => finished_at,
            };
            Run {
                key, job, head, run_id: Uuid::from_u128(run_id), status, exit_code, signal,
                attempts, started_at, finished_at, host, pid, command, shell, recovered, note,
            }
        }
    }

    fn exported_run() -> impl Strategy<Value = ExportedRun> {
        let numbers = proptest::collection::btree_set(any::<u32>(), 0..4);
        (run(), numbers, 0..i64::MAX)
            .prop_flat_map(|(run, numbers, fence): (Run, BTreeSet<u32>, i64)| {
                let attempts: Vec<_> = numbers.into_iter().map(attempt).collect();
                (Just(run), attempts, Just(fence))
            })
            .prop_map(|(run, attempts, ledger_fence)| ExportedRun {
                head: run.head,
                run,
                attempts,
                ledger_fence,
            })
    }

    /// The text of a JSON string, quotes and all: characters (a control
    /// character now and then, which JSON refuses), escapes, `\u` escapes
    /// of any code unit (lone surrogates among them) and now and then a bad
    /// escape; repeated, some past the length the reader cuts while it
    /// reads.
    fn json_string() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            8 => any::<char>()
                .prop_filter("not a quote", |c| !matches!(c, '"' | '\\'))
                .prop_map(String::from),
            3 => prop::sample::select(vec!["\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"])
                .prop_map(str::to_owned),
            3 => any::<u16>().prop_map(|unit| format!("\\u{unit:04x}")),
            2 => (0xd800..0xdc00u32, 0xdc00..0xe000u32)
                .prop_map(|(high, low)| format!("\\u{high:04X}\\u{low:04x}")),
            1 => prop::sample::select(vec!["\\x", "\\u12", "\\", "\\U0041"]).prop_map(str::to_owned),
        ];
        let times = prop_oneof![4 => Just(1usize), 1 => 2_000..12_000usize];
        (vec(piece, 0..24), times)
            .prop_map(|(pieces, times)| format!("\"{}\"", pieces.concat().repeat(times)))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn an_exported_run_is_imported_as_it_was(exported in exported_run()) {
            let line = export_line(&exported).unwrap();
            prop_assert!(serde_json::from_slice::<serde_json::Value>(&line).is_ok());
            let back = read_back(&line);
            prop_assert_eq!(back.fences, vec![exported.ledger_fence]);
            prop_assert_eq!(back.runs, vec![(exported.run.clone(), exported.head)]);
            prop_assert_eq!(back.attempts, exported.attempts);
        }

        #[test]
        fn the_reader_reads_a_string_as_serde_json_does(text in json_string()) {
            let exported = exported(b"X".to_vec());
            let line = String::from_utf8(export_line(&exported).unwrap()).unwrap();
            let line = line.replacen(r#""stdout_tail":"X""#, &format!(r#""stdout_tail":{text}"#), 1);
            let mut input = line.as_bytes();
            let mut sink = Collect::default();
            let read = Lines::new(&mut input, "a line").next(&mut sink);
            match serde_json::from_str::<String>(&text) {
                Ok(string) => {
                    prop_assert!(read.is_ok(), "{:#}", read.unwrap_err());
                    let bytes = string.as_bytes();
                    let end = &bytes[bytes.len().saturating_sub(MAX_TAIL)..];
                    prop_assert_eq!(sink.attempts.len(), 1);
                    prop_assert!(sink.attempts[0].stdout_tail == end, "the string's end, as read");
                }
                Err(_) => {
                    let error = read.expect_err("serde_json refuses the string");
                    prop_assert!(error.downcast_ref::<BadLine>().is_some(), "{error:#}");
                }
            }
        }
    }
}
