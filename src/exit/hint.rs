//! What to add when a command is not found because it is a shell's word,
//! not a program: a builtin (`cd`) or shell syntax (`a|b`, `FOO=bar`),
//! which idem runs only under `--shell` (it executes COMMAND directly).

use std::ffi::OsStr;

/// Builtins that scripts and crontab lines use, which PATH seldom holds.
const BUILTINS: &[&str] = &[
    ".", "alias", "cd", "declare", "eval", "exec", "export", "local", "popd", "pushd", "readonly",
    "set", "shopt", "source", "trap", "ulimit", "umask", "unalias", "unset",
];

/// Words that open a compound command.
const KEYWORDS: &[&str] = &[
    "!", "[[", "case", "for", "function", "if", "select", "until", "while", "{",
];

/// What makes a word a pipeline, a redirection, a list or a substitution.
const SYNTAX: &[&str] = &["|", ">", "<", "&&", ";", "$(", "`"];

/// Why a `program` that was not found may want `--shell`, if it looks
/// like a shell's word.
pub fn shell_hint(program: &OsStr) -> Option<&'static str> {
    let word = program.to_str()?;
    if BUILTINS.contains(&word) {
        return Some("it is a shell builtin: run it with --shell");
    }
    // A whole command line given as one word (`'echo hi'`); a path may
    // hold a space, and is a program's.
    let line = word.contains([' ', '\t']) && !word.contains('/');
    let syntax = KEYWORDS.contains(&word)
        || SYNTAX.iter().any(|mark| word.contains(mark))
        || is_assignment(word)
        || line;
    syntax.then_some("it looks like shell syntax: run it with --shell")
}

/// `FOO=bar`: a shell variable's name, then `=`.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first == '_' || first.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn hint(program: &str) -> Option<&'static str> {
        shell_hint(OsStr::new(program))
    }

    #[test]
    fn builtins_are_named_builtins() {
        for program in [
            "cd", "export", "source", ".", "alias", "set", "ulimit", "umask", "exec", "unset",
        ] {
            assert_eq!(
                hint(program),
                Some("it is a shell builtin: run it with --shell"),
                "{program}"
            );
        }
    }

    #[test]
    fn keywords_and_syntax_are_named_syntax() {
        for program in [
            "if",
            "for",
            "while",
            "until",
            "case",
            "[[",
            "ls|wc",
            "echo>out",
            "sort<in",
            "make&&make",
            "a;b",
            "echo $(date)",
            "`date`",
            "FOO=bar",
            "_X1=",
            "cd /tmp && make",
            "echo hi",
        ] {
            assert_eq!(
                hint(program),
                Some("it looks like shell syntax: run it with --shell"),
                "{program}"
            );
        }
    }

    #[test]
    fn programs_get_no_hint() {
        for program in [
            "backup",
            "./run-me",
            "/opt/tool/bin/x",
            "cdx",
            "settings",
            "./a=b",
            "=x",
            "1A=b",
            "x.sh",
            "/opt/My App/bin/x",
            "",
        ] {
            assert_eq!(hint(program), None, "{program}");
        }
        // Not UTF-8 is no reason to say anything.
        assert_eq!(shell_hint(OsStr::from_bytes(b"cd\xff")), None);
    }
}
