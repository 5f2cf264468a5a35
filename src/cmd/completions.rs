//! `idem completions SHELL`: clap's scripts, with what clap cannot say.
//!
//! clap writes the options and subcommands. Two things it cannot: after
//! `--`, the words are another command's, so completion hands over to that
//! command's own (bash-completion's `_command_offset`, zsh's `_normal`,
//! fish's `__fish_complete_subcommand`); and keys live in the ledger, so
//! `run --key`, `ledger show` and `ledger forget` ask `idem __complete
//! keys PREFIX`. The checked-in scripts come from this one function.

use clap::CommandFactory;
use clap_complete::Shell;

/// The script for `shell`, as `idem completions` prints it.
pub fn script(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut visible(), "idem", &mut script);
    let script = String::from_utf8_lossy(&script).into_owned();
    let script = match shell {
        Shell::Bash => bash(&script),
        Shell::Zsh => zsh(&script),
        Shell::Fish => fish(&script),
        _ => script,
    };
    script.into_bytes()
}

/// The command line without its hidden subcommands, which clap_complete
/// would offer as candidates.
fn visible() -> clap::Command {
    let full = crate::cli::Cli::command();
    let mut command = clap::Command::new("idem")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .args(full.get_arguments().cloned())
        .subcommands(
            full.get_subcommands()
                .filter(|sub| !sub.is_hide_set())
                .cloned(),
        );
    if let Some(about) = full.get_about() {
        command = command.about(about.clone());
    }
    command
}

const BASH: &str = r#"
# After `run ... --`, the command's own completion (bash-completion's
# _command_offset); keys from the ledger after `run --key` and for
# `ledger show` and `ledger forget`; all else as above.
_idem() {
    local i word db="" path=()
    for (( i = 1; i < COMP_CWORD; i++ )); do
        word=${COMP_WORDS[i]}
        if [[ $word == -- ]]; then
            [[ ${path[0]} == run ]] || break
            if declare -F _command_offset >/dev/null; then
                _command_offset $(( i + 1 ))
            elif (( COMP_CWORD == i + 1 )); then
                COMPREPLY=( $(compgen -c -- "$2") )
            else
                COMPREPLY=( $(compgen -f -- "$2") )
            fi
            return 0
        fi
        case $word in
            --db) (( i++ )); db=${COMP_WORDS[i]} ;;
            --db=*) db=${word#--db=} ;;
            -*) ;;
            *) (( ${#path[@]} < 2 )) && path+=( "$word" ) ;;
        esac
    done
    # A key of {hour} or {minute} holds ':', where bash splits words
    # (COMP_WORDBREAKS): the word being completed and the one before it,
    # whole; bash then replaces only what follows the word's last ':'.
    local cur=$2 prev=$3
    if declare -F _get_comp_words_by_ref >/dev/null; then
        _get_comp_words_by_ref -n : cur prev
    fi
    if [[ $cur != -* ]] && {
        [[ ${path[0]} == run && ( $prev == --key || $prev == -k ) ]] ||
        [[ ${path[0]} == ledger && ( ${path[1]} == show || ${path[1]} == forget ) &&
           $prev != --limit && $prev != --db && $prev != --color ]]
    }; then
        local IFS=$'\n'
        COMPREPLY=( $("$1" ${db:+--db "$db"} __complete keys "$cur" 2>/dev/null) )
        if [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then
            local colon=${cur%"${cur##*:}"}
            COMPREPLY=( "${COMPREPLY[@]#"$colon"}" )
        fi
        return 0
    fi
    _idem_clap "$@"
}
"#;

fn bash(script: &str) -> String {
    let script = script.replacen("_idem() {", "_idem_clap() {", 1);
    match script.find("\nif [[ \"${BASH_VERSINFO[0]}\" -eq 4") {
        Some(at) => format!("{}{BASH}{}", &script[..at], &script[at..]),
        None => format!("{script}{BASH}"),
    }
}

const ZSH: &str = r#"
# Keys from the ledger, for `run --key`, `ledger show` and `ledger forget`.
(( $+functions[_idem_keys] )) ||
_idem_keys() {
    local -a keys
    keys=( ${(f)"$(_call_program keys idem __complete keys ${(q)PREFIX} 2>/dev/null)"} )
    compadd -a keys
}
"#;

fn zsh(script: &str) -> String {
    let script = script
        // After --, the words are a command line of their own.
        .replace(":_cmdambivalent'", ":_normal'")
        .replace(":KEY:_default'", ":KEY:_idem_keys'");
    // The key arguments of `ledger show` and `ledger forget`, found by
    // their names: their help may change.
    let script: String = script
        .split_inclusive('\n')
        .map(|line| {
            let key = line.starts_with("':key -- ") || line.starts_with("'*::keys -- ");
            match line.strip_suffix(":_default' \\\n") {
                Some(spec) if key => format!("{spec}:_idem_keys' \\\n"),
                _ => line.to_owned(),
            }
        })
        .collect();
    match script.find("\nif [ \"$funcstack[1]\" = \"_idem\" ]") {
        Some(at) => format!("{}{ZSH}{}", &script[..at], &script[at..]),
        None => format!("{script}{ZSH}"),
    }
}

const FISH: &str = r#"
# After `run ... --`, the command's own completion; keys from the ledger
# after `run --key` and for `ledger show` and `ledger forget`.
function __fish_idem_after_dashes
    set -l tokens (commandline -opc) (commandline -ct)
    set -l at (contains -i -- -- $tokens)
    or return
    __fish_complete_subcommand --commandline $tokens[(math $at + 1)..-1]
end
function __fish_idem_keys
    set -l tokens (commandline -opc)
    set -l db
    if set -l at (contains -i -- --db $tokens)
        set db --db $tokens[(math $at + 1)]
    end
    $tokens[1] $db __complete keys (commandline -ct) 2>/dev/null
end
complete -c idem -n "__fish_idem_using_subcommand run; and contains -- -- (commandline -opc)" -f -a "(__fish_idem_after_dashes)"
complete -c idem -n "__fish_idem_using_subcommand run; and not contains -- -- (commandline -opc)" -s k -l key -f -r -a "(__fish_idem_keys)"
complete -c idem -n "__fish_idem_using_subcommand ledger; and __fish_seen_subcommand_from show forget" -f -a "(__fish_idem_keys)"
"#;

fn fish(script: &str) -> String {
    format!("{script}{FISH}")
}
