//! The generated files in `completions/` and `man/`: regenerated from the
//! clap definitions and compared byte for byte. `UPDATE_GENERATED=1 cargo
//! test --test main generated` rewrites them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{bold, roman, Roff};
use idem::cli::Cli;

/// The folders this test owns: every file in them is generated.
const FOLDERS: [&str; 2] = ["completions", "man"];

const REFRESH: &str = "UPDATE_GENERATED=1 cargo test --test main generated";

/// Every generated file, by its path in the repository.
fn expected() -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    for (shell, name) in [
        (Shell::Bash, "idem.bash"),
        (Shell::Zsh, "_idem"),
        (Shell::Fish, "idem.fish"),
        (Shell::Elvish, "idem.elv"),
        (Shell::PowerShell, "_idem.ps1"),
    ] {
        // The same function as `idem completions`: clap's script with the
        // hand-over after -- and the keys of the ledger.
        let script = idem::cmd::completions::script(shell);
        files.insert(Path::new("completions").join(name), script);
    }
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    man_pages(command, None, &mut files);
    files
}

/// A page for `command` and each visible subcommand. A page shows the exit
/// codes and environment of its command's `after_long_help`, else of the
/// nearest command above it that has one.
fn man_pages(
    command: clap::Command,
    inherited: Option<String>,
    files: &mut BTreeMap<PathBuf, Vec<u8>>,
) {
    let notes = command
        .get_after_long_help()
        .map(ToString::to_string)
        .or(inherited);
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        man_pages(sub.clone(), notes.clone(), files);
    }
    // clap_mangen would print the notes as one filled paragraph; they are
    // rendered below as proper EXIT STATUS and ENVIRONMENT sections.
    let synopsis_of = command.clone();
    let man = clap_mangen::Man::new(command.after_long_help(None::<&str>))
        .source(format!("idem {}", env!("CARGO_PKG_VERSION")))
        .manual("idem manual");
    let mut page = Vec::new();
    man.render(&mut page).expect("a man page renders");
    let mut page = String::from_utf8(page).expect("roff is UTF-8");
    // clap_mangen's synopsis names the options but not their values.
    let name = synopsis_of
        .get_bin_name()
        .unwrap_or(synopsis_of.get_name())
        .to_owned();
    if let Some(start) = page.find(".SH SYNOPSIS\n") {
        let body = start + ".SH SYNOPSIS\n".len();
        let end = page[body..]
            .find("\n.SH ")
            .map_or(page.len(), |end| body + end + 1);
        page.replace_range(body..end, &synopsis(&synopsis_of, &name));
    }
    if let Some(notes) = &notes {
        let sections = notes_roff(notes);
        let at = page.find("\n.SH VERSION").map_or(page.len(), |at| at + 1);
        page.insert_str(at, &sections);
    }
    files.insert(Path::new("man").join(man.get_filename()), page.into_bytes());
}

/// `idem run [--retries N] ... -- COMMAND...`: every visible argument with
/// the name of its value, optional ones in brackets; an argument and its
/// value are never broken across lines (`\ ` is roff's unbreakable space).
fn synopsis(command: &clap::Command, name: &str) -> String {
    let escape = |text: &str| text.replace('\\', "\\e").replace('-', "\\-");
    let bold = |text: &str| format!("\\fB{}\\fR", escape(text));
    let italic = |text: &str| format!("\\fI{}\\fR", escape(text));
    let mut parts = vec![bold(name).replace(' ', "\\ ")];
    // Options first, then what follows them, the words after -- last.
    let mut arguments: Vec<&clap::Arg> = command.get_arguments().collect();
    arguments.sort_by_key(|arg| (arg.is_positional(), arg.is_last_set()));
    for arg in arguments {
        if arg.is_hide_set() || matches!(arg.get_id().as_str(), "help" | "version") {
            continue;
        }
        let value = arg
            .get_value_names()
            .and_then(|names| names.first())
            .map_or_else(|| arg.get_id().as_str().to_uppercase(), ToString::to_string);
        let mut words = Vec::new();
        if arg.is_positional() {
            if arg.is_last_set() {
                words.push(bold("--"));
            }
            let many = matches!(arg.get_num_args(), Some(range) if range.max_values() > 1);
            words.push(italic(&value) + if many { "..." } else { "" });
        } else {
            let flag = match (arg.get_short(), arg.get_long()) {
                (Some(short), Some(long)) => format!("-{short}|--{long}"),
                (None, Some(long)) => format!("--{long}"),
                (Some(short), None) => format!("-{short}"),
                (None, None) => continue,
            };
            words.push(bold(&flag));
            if arg.get_action().takes_values() {
                words.push(italic(&value));
            }
        }
        let words = words.join("\\ ");
        parts.push(if arg.is_required_set() {
            words
        } else {
            format!("[{words}]")
        });
    }
    if command.has_subcommands() {
        parts.push(italic("COMMAND"));
    }
    format!(".nh\n{}\n.hy\n", parts.join(" "))
}

/// `Heading:` blocks of indented `TERM  meaning` lines become man sections
/// with tagged paragraphs; unindented lines become plain paragraphs.
fn notes_roff(notes: &str) -> String {
    let mut roff = Roff::new();
    for block in notes.split("\n\n") {
        let mut lines = block.lines();
        let Some(heading) = lines.next() else {
            continue;
        };
        let title = match heading.trim_end_matches(':') {
            "Exit codes" => "EXIT STATUS".to_owned(),
            other => other.to_uppercase(),
        };
        roff.control("SH", [title.as_str()]);
        let mut in_paragraph = false;
        for line in lines {
            if let Some(example) = line.strip_prefix("    ") {
                // An example command: set apart, one line as typed.
                roff.control("RS", ["4"]);
                roff.control("nf", []);
                roff.text([roman(example)]);
                roff.control("fi", []);
                roff.control("RE", []);
                in_paragraph = false;
            } else if let Some(entry) = line.strip_prefix("  ") {
                let (term, meaning) = entry.split_once("  ").unwrap_or((entry, ""));
                roff.control("TP", []);
                roff.text([bold(term.trim())]);
                roff.text([roman(meaning.trim())]);
                in_paragraph = false;
            } else {
                if !in_paragraph {
                    roff.control("PP", []);
                    in_paragraph = true;
                }
                roff.text([roman(line)]);
            }
        }
    }
    // Roff::render starts with the preamble that the page already has.
    let preamble = Roff::new().render();
    let text = roff.render();
    text.strip_prefix(&preamble).unwrap_or(&text).to_owned()
}

fn actual(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    for folder in FOLDERS {
        let Ok(entries) = std::fs::read_dir(root.join(folder)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a folder entry").path();
            let relative = path.strip_prefix(root).expect("inside the root").to_owned();
            files.insert(relative, std::fs::read(&path).expect("a readable file"));
        }
    }
    files
}

#[test]
fn the_clap_definitions_are_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn completions_and_man_pages_are_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let expected = expected();
    let actual = actual(root);
    if std::env::var_os("UPDATE_GENERATED").is_some_and(|value| !value.is_empty()) {
        for path in actual.keys().filter(|path| !expected.contains_key(*path)) {
            std::fs::remove_file(root.join(path)).expect("removing a stale file");
        }
        for (path, bytes) in &expected {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("a folder")).expect("a folder");
            std::fs::write(&path, bytes).expect("writing a generated file");
        }
        return;
    }
    let mut problems = Vec::new();
    for (path, bytes) in &expected {
        match actual.get(path) {
            None => problems.push(format!("missing: {}", path.display())),
            Some(found) if found != bytes => problems.push(format!("stale: {}", path.display())),
            Some(_) => {}
        }
    }
    for path in actual.keys().filter(|path| !expected.contains_key(*path)) {
        problems.push(format!("extra: {}", path.display()));
    }
    assert!(
        problems.is_empty(),
        "generated files differ from the clap definitions:\n  {}\nrefresh them with: {REFRESH}",
        problems.join("\n  ")
    );
}

#[test]
fn man_pages_carry_exit_codes_and_environment() {
    let files = expected();
    for (path, bytes) in files.iter().filter(|(path, _)| path.starts_with("man")) {
        let page = String::from_utf8_lossy(bytes);
        for needed in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", "IDEM_DB", "125"] {
            assert!(page.contains(needed), "{} lacks {needed}", path.display());
        }
    }
    let run = String::from_utf8_lossy(&files[Path::new("man/idem-run.1")]).into_owned();
    for code in ["65", "69", "75", "124", "128+N"] {
        assert!(run.contains(code), "idem-run.1 lacks exit code {code}");
    }
    assert!(run.contains("IDEM_RECOVERED"));
    for page in [
        "idem.1",
        "idem-ledger.1",
        "idem-ledger-list.1",
        "idem-ledger-show.1",
        "idem-ledger-forget.1",
        "idem-ledger-prune.1",
        "idem-ledger-export.1",
        "idem-ledger-import.1",
        "idem-ledger-metrics.1",
        "idem-ledger-path.1",
        "idem-completions.1",
    ] {
        assert!(
            files.contains_key(&Path::new("man").join(page)),
            "no man/{page}"
        );
    }
}

#[test]
fn the_status_page_explains_every_column_and_mark() {
    let files = expected();
    let page = String::from_utf8_lossy(&files[Path::new("man/idem-status.1")]).into_owned();
    for section in [".SH COLUMNS", ".SH EXAMPLES", ".SH \"SEE ALSO\""] {
        assert!(page.contains(section), "idem-status.1 lacks {section}");
    }
    let columns = [
        "JOB",
        "STATE",
        "LAST RUN",
        "LAST SUCCESS",
        "FAILS",
        "MISSED",
        "RECENT",
        "COMMAND",
    ];
    for column in columns {
        assert!(
            page.contains(column),
            "idem-status.1 does not explain {column}"
        );
    }
    for mark in ["+ succeeded", "x failed", "? abandoned", "> running"] {
        assert!(page.contains(mark), "idem-status.1 does not explain {mark}");
    }
    for state in [
        "failing", "overdue", "paused", "blocked", "stopped", "running", "ok",
    ] {
        assert!(
            page.contains(&format!("{state},")) || page.contains(&format!("{state} ")),
            "idem-status.1 does not name the state {state}"
        );
    }
    assert!(
        page.contains("blocked (its latest"),
        "the description names blocked"
    );
}

#[test]
fn no_paragraph_of_a_man_page_is_a_heading() {
    for (path, bytes) in expected() {
        if path.extension().is_none_or(|ext| ext != "1") {
            continue;
        }
        let page = String::from_utf8_lossy(&bytes).into_owned();
        for line in page.lines() {
            let Some(title) = line.strip_prefix(".SH ") else {
                continue;
            };
            // A heading is a few words; a paragraph taken for one is long.
            let title = title.trim_matches('"').trim();
            assert!(
                title.len() <= 20 && title.split_whitespace().count() <= 3,
                "{} renders a paragraph as a heading: {title}",
                path.display()
            );
        }
    }
}

#[test]
fn idem_completions_prints_the_checked_in_scripts() {
    let env = crate::util::Env::new();
    let files = expected();
    for (shell, name) in [
        ("bash", "idem.bash"),
        ("zsh", "_idem"),
        ("fish", "idem.fish"),
        ("elvish", "idem.elv"),
        ("powershell", "_idem.ps1"),
    ] {
        let output = env.cmd(["completions", shell]).succeeds();
        assert_eq!(
            output.output.stdout,
            files[&Path::new("completions").join(name)],
            "idem completions {shell}"
        );
    }
    env.cmd(["completions", "tcsh"]).expect_code(2);
}

#[test]
fn the_bash_completion_loads_and_completes() {
    let root = env!("CARGO_MANIFEST_DIR");
    let script = format!(
        "source {root}/completions/idem.bash && complete -p idem && \
         COMP_WORDS=(idem ledger f) COMP_CWORD=2 COMP_LINE='idem ledger f' COMP_POINT=13 && \
         _idem idem f ledger && printf '%s\\n' \"${{COMPREPLY[@]}}\""
    );
    let output = std::process::Command::new("bash")
        .args(["--norc", "-c", &script])
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("-F _idem idem"), "{stdout}");
    assert!(stdout.lines().any(|line| line == "forget"), "{stdout}");
}
