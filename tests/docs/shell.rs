//! Shell lines as sh reads them, far enough to find idem's words: quotes
//! taken off, each variable or substitution standing for one word, and
//! the simple commands apart. Nothing is run.

/// The simple commands of one line (a pipeline, a list), each its words.
/// `plain` is false when the line redirects or joins more than one
/// command: it does more than run its command.
pub struct Line {
    pub commands: Vec<Vec<String>>,
    pub plain: bool,
}

/// What a `$NAME`, `${...}`, `$(...)` or `` `...` `` stands for: one word.
pub const VALUE: &str = "x";

pub fn split(line: &str) -> Result<Line, String> {
    let chars: Vec<char> = line.chars().collect();
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut skip_target = false;
    let mut plain = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => end_word(&mut word, &mut in_word, &mut words, &mut skip_target),
            '#' if !in_word => break,
            '\'' => {
                let close = find(&chars, i + 1, '\'').ok_or("an unclosed '")?;
                word.extend(&chars[i + 1..close]);
                in_word = true;
                i = close;
            }
            '"' => {
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("an unclosed \"".into()),
                        Some('"') => break,
                        Some('\\') if matches!(chars.get(i + 1), Some('"' | '\\' | '$' | '`')) => {
                            word.push(chars[i + 1]);
                            i += 2;
                        }
                        Some('$' | '`') => {
                            i = substitution(&chars, i)?;
                            word.push_str(VALUE);
                        }
                        Some(&other) => {
                            word.push(other);
                            i += 1;
                        }
                    }
                }
                in_word = true;
            }
            '\\' => {
                if let Some(&next) = chars.get(i + 1) {
                    word.push(next);
                    i += 1;
                }
                in_word = true;
            }
            '$' | '`' => {
                i = substitution(&chars, i)? - 1;
                word.push_str(VALUE);
                in_word = true;
            }
            '|' | '&' | ';' | '(' | ')' => {
                end_word(&mut word, &mut in_word, &mut words, &mut skip_target);
                if !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
                plain = false;
            }
            '>' | '<' => {
                // `2>&1`, `>>file`, `< /dev/null`: the descriptor and the
                // target are no words of the command.
                if word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                end_word(&mut word, &mut in_word, &mut words, &mut skip_target);
                while matches!(chars.get(i + 1), Some('>' | '&')) {
                    i += 1;
                }
                skip_target = true;
                plain = false;
            }
            _ => {
                word.push(c);
                in_word = true;
            }
        }
        i += 1;
    }
    end_word(&mut word, &mut in_word, &mut words, &mut skip_target);
    if !words.is_empty() {
        commands.push(words);
    }
    Ok(Line { commands, plain })
}

/// Ends the word being read: kept, or dropped when it is a redirection's
/// target.
fn end_word(word: &mut String, in_word: &mut bool, words: &mut Vec<String>, skip: &mut bool) {
    if *in_word {
        if *skip {
            *skip = false;
        } else {
            words.push(std::mem::take(word));
        }
    }
    word.clear();
    *in_word = false;
}

fn find(chars: &[char], from: usize, wanted: char) -> Option<usize> {
    (from..chars.len()).find(|&at| chars[at] == wanted)
}

/// The index just past the substitution that starts at `at`.
fn substitution(chars: &[char], at: usize) -> Result<usize, String> {
    if chars[at] == '`' {
        return find(chars, at + 1, '`')
            .map(|close| close + 1)
            .ok_or_else(|| "an unclosed `".into());
    }
    match chars.get(at + 1) {
        Some(&open @ ('(' | '{')) => {
            let close = if open == '(' { ')' } else { '}' };
            let mut depth = 0;
            for (offset, &c) in chars[at + 1..].iter().enumerate() {
                if c == open {
                    depth += 1;
                } else if c == close {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(at + 1 + offset + 1);
                    }
                }
            }
            Err(format!("an unclosed ${open}"))
        }
        Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
            let len = chars[at + 1..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .count();
            Ok(at + 1 + len)
        }
        Some(c) if c.is_ascii_digit() || "?$!#@*-".contains(*c) => Ok(at + 2),
        // A lone `$` is a dollar sign.
        _ => Ok(at + 1),
    }
}

/// The words of idem's command line in `words`, if it runs idem: after
/// the variables set for it (`IDEM_DB=x idem ...`) and `sudo`, `env` or
/// `nohup` before it.
pub fn idem_argv(words: &[String]) -> Option<Vec<String>> {
    let mut rest = words;
    while let Some((first, tail)) = rest.split_first() {
        let assignment = first.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if assignment || ["sudo", "env", "nohup", "exec"].contains(&first.as_str()) {
            rest = tail;
        } else {
            break;
        }
    }
    let program = rest.first()?;
    (program == "idem" || program.ends_with("/idem")).then(|| rest.to_vec())
}

#[test]
fn words_as_sh_reads_them() {
    let line = split(r#"IDEM_DB=copy.db idem run --key "deploy-$SHA" --on-failure 'echo "$X"; exit 1' -- ./a.sh 2>&1 | tee log # note"#).unwrap();
    assert!(!line.plain);
    assert_eq!(line.commands.len(), 2);
    assert_eq!(
        idem_argv(&line.commands[0]).unwrap(),
        [
            "idem",
            "run",
            "--key",
            "deploy-x",
            "--on-failure",
            "echo \"$X\"; exit 1",
            "--",
            "./a.sh"
        ]
    );
    assert_eq!(line.commands[1], ["tee", "log"]);
    let line = split("idem ledger metrics > /tmp/m.prom.tmp && mv a b").unwrap();
    assert_eq!(line.commands[0], ["idem", "ledger", "metrics"]);
    assert!(split("idem run --key 'k -- true").is_err());
    assert_eq!(split("idem status").unwrap().commands, [["idem", "status"]]);
    assert!(split("idem status").unwrap().plain);
}
