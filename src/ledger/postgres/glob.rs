//! Shell globs (`ledger list --key`, `forget`, `status --job`) as
//! PostgreSQL's regular expressions, so that a glob matches here what it
//! matches in SQLite's GLOB.

/// A shell glob (`*`, `?`, `[...]`, as SQLite's GLOB) as an anchored
/// POSIX regular expression.
pub(super) fn glob_to_regex(glob: &str) -> String {
    let mut regex = String::from("^");
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => regex.push_str(".*"),
            '?' => regex.push('.'),
            '[' => {
                let mut class = String::from("[");
                if chars.peek() == Some(&'^') {
                    chars.next();
                    class.push('^');
                }
                let mut closed = false;
                let mut first = true;
                for c in chars.by_ref() {
                    if c == ']' && !first {
                        closed = true;
                        break;
                    }
                    first = false;
                    if c == '\\' {
                        class.push_str("\\\\");
                    } else {
                        class.push(c);
                    }
                }
                if closed {
                    regex.push_str(&class);
                    regex.push(']');
                } else {
                    regex.push_str(&regex_escape(&class));
                }
            }
            c => regex.push_str(&regex_escape(&c.to_string())),
        }
    }
    regex.push('$');
    regex
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_punctuation() {
                format!("\\{c}")
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_become_anchored_regexes() {
        assert_eq!(glob_to_regex("backup-*"), "^backup\\-.*$");
        assert_eq!(glob_to_regex("a?c"), "^a.c$");
        assert_eq!(glob_to_regex("[ab]x"), "^[ab]x$");
        assert_eq!(glob_to_regex("[^a]"), "^[^a]$");
        assert_eq!(glob_to_regex("a.b"), "^a\\.b$");
        assert_eq!(glob_to_regex("[oops"), "^\\[oops$");
    }
}
