//! Splitting a slash command's raw `$ARGUMENTS` into ralph's options and the
//! prompt, without a shell: nothing is expanded, and the prompt keeps every
//! character the user typed (quotes, `$HOME`, backticks, newlines).
//!
//! Options are recognised only as whole words outside quotes, as
//! `--name value` or `--name=value`. A lone `--` ends the options: the rest
//! is prompt. If what is left is one quoted string, its outer quotes go.
//!
//! Quotes group words only where a person would mean them to: a quote opens
//! at the start of a word (or after `=`) and only if it is closed later, so
//! the apostrophe in "Don't" is just a letter and never hides the options
//! that follow it.

use ralph_state::fields::guards;
pub use ralph_state::fields::options::{
    ArgumentsError, OptionKind, check_duration, check_money, check_number,
};

/// The options of `ralph start` that come before the guards.
const BEFORE_GUARDS: &[(&str, OptionKind)] = &[
    ("name", OptionKind::Text),
    ("max-iterations", OptionKind::Number),
    ("completion-promise", OptionKind::Text),
    ("abort-promise", OptionKind::Text),
];

/// The options of `ralph start` that come after the guards.
const AFTER_GUARDS: &[(&str, OptionKind)] = &[
    ("fresh-context", OptionKind::Flag),
    ("fresh-at", OptionKind::Text),
    ("fresh-via", OptionKind::Text),
    ("prd", OptionKind::OptionalValue),
    ("notify", OptionKind::Flag),
    ("notify-url", OptionKind::Text),
    ("protect", OptionKind::Text),
    ("unprotect", OptionKind::Text),
    ("no-default-protect", OptionKind::Flag),
    ("scope", OptionKind::Text),
    ("session-id", OptionKind::Text),
    ("force", OptionKind::Flag),
    ("approve-commands", OptionKind::Text),
];

/// Every option of `ralph start`, in one table (the guards' own from
/// `guards::OPTIONS`): the slash command's parser reads it, and a test
/// compares it with clap's own list for `ralph start`.
pub const OPTIONS: &[(&str, OptionKind)] =
    &all_options::<{ BEFORE_GUARDS.len() + guards::OPTIONS.len() + AFTER_GUARDS.len() }>();

const fn all_options<const N: usize>() -> [(&'static str, OptionKind); N] {
    let mut out = [("", OptionKind::Flag); N];
    let mut at = 0;
    let mut i = 0;
    while i < BEFORE_GUARDS.len() {
        out[at] = BEFORE_GUARDS[i];
        at += 1;
        i += 1;
    }
    i = 0;
    while i < guards::OPTIONS.len() {
        out[at] = (guards::OPTIONS[i].flag, guards::OPTIONS[i].kind);
        at += 1;
        i += 1;
    }
    i = 0;
    while i < AFTER_GUARDS.len() {
        out[at] = AFTER_GUARDS[i];
        at += 1;
        i += 1;
    }
    out
}

/// The options `/ralph-loop`'s hint in the client's menu names, with the
/// word for each value, in the order shown: the ones a first loop needs.
/// Every one is in [`OPTIONS`] (a test checks), and the hint is made from
/// this list ([`argument_hint`]); plugin/skills/ralph-loop/SKILL.md holds it.
const HINTED: &[(&str, &str)] = &[
    ("max-iterations", "N"),
    ("completion-promise", "TEXT"),
    ("verify", "CMD"),
    ("check", "CMD"),
    ("prd", "FILE"),
    ("protect", "GLOB"),
    ("scope", "GLOB"),
    ("max-cost", "USD"),
    ("max-duration", "2h"),
    ("max-tokens", "N"),
    ("abort-promise", "TEXT"),
    ("name", "NAME"),
];

/// `/ralph-loop`'s `argument-hint`: `TASK [--max-iterations N] …`, from
/// [`HINTED`] and each option's kind in [`OPTIONS`].
pub fn argument_hint() -> String {
    let mut out = String::from("TASK");
    for (flag, value) in HINTED {
        out.push_str(&match kind_of(flag) {
            Some(OptionKind::Flag) => format!(" [--{flag}]"),
            Some(OptionKind::OptionalValue) => format!(" [--{flag}[={value}]]"),
            _ => format!(" [--{flag} {value}]"),
        });
    }
    out
}

fn kind_of(key: &str) -> Option<OptionKind> {
    OPTIONS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, kind)| *kind)
}

/// The option a mistyped `--word` most likely meant: the known option
/// within two edits, or one the word starts (or is started by).
pub fn suggestion(word: &str) -> Option<&'static str> {
    let word = word.trim_start_matches('-');
    let word = word.split_once('=').map_or(word, |(k, _)| k);
    OPTIONS
        .iter()
        .map(|(k, _)| (*k, edit_distance(k, word)))
        .filter(|(k, d)| {
            *d <= 2 || (word.len() >= 4 && (k.starts_with(word) || word.starts_with(k)))
        })
        .min_by_key(|(_, d)| *d)
        .map(|(k, _)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawArguments {
    /// `(option, value)` in the order given; a switch has an empty value.
    pub options: Vec<(String, String)>,
    pub prompt: String,
    /// Words that look like options but are not ralph's (kept in the prompt).
    pub unknown: Vec<String>,
}

/// A word of the raw text: its byte span and its text with quotes removed.
#[derive(Debug)]
struct Word {
    start: usize,
    end: usize,
    unquoted: String,
    quoted: bool,
}

fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut unquoted = String::new();
        let mut quoted = false;
        let mut end = start;
        let mut quote: Option<char> = None;
        while let Some(&(i, c)) = chars.peek() {
            let at_word_start = i == start || text[..i].ends_with('=');
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => unquoted.push(c),
                None if c.is_whitespace() => break,
                None if (c == '"' || c == '\'') && at_word_start && text[i + 1..].contains(c) => {
                    quote = Some(c);
                    quoted = true;
                }
                None => unquoted.push(c),
            }
            end = i + c.len_utf8();
            chars.next();
        }
        out.push(Word {
            start,
            end,
            unquoted,
            quoted,
        });
    }
    out
}

pub fn parse(raw: &str) -> Result<RawArguments, ArgumentsError> {
    let words = words(raw);
    let mut result = RawArguments::default();
    let mut removed: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        let text = &raw[word.start..word.end];
        if text == "--" {
            removed.push((word.start, word.end));
            break;
        }
        let Some(option) = text
            .strip_prefix("--")
            .filter(|_| !word.quoted || text.starts_with("--"))
        else {
            i += 1;
            continue;
        };
        let (key, inline) = match option.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (option, None),
        };
        let kind = kind_of(key);
        if matches!(kind, Some(OptionKind::Flag | OptionKind::OptionalValue)) && inline.is_none() {
            result.options.push((key.to_owned(), String::new()));
            removed.push((word.start, word.end));
        } else if kind.is_some_and(|k| k != OptionKind::Flag) {
            let value = if inline.is_some() {
                word.unquoted
                    .split_once('=')
                    .map(|(_, v)| v.to_owned())
                    .unwrap_or_default()
            } else {
                let next = words
                    .get(i + 1)
                    .ok_or_else(|| ArgumentsError::MissingValue(key.to_owned()))?;
                i += 1;
                next.unquoted.clone()
            };
            match kind {
                Some(OptionKind::Number) => {
                    check_number(key, &value)?;
                }
                Some(OptionKind::Duration) => {
                    check_duration(key, &value)?;
                }
                Some(OptionKind::Money) => {
                    check_money(key, &value)?;
                }
                _ => {}
            }
            result.options.push((key.to_owned(), value));
            removed.push((word.start, words[i].end));
        } else if key.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && !word.quoted {
            result.unknown.push(text.to_owned());
        }
        i += 1;
    }
    refuse_unknown(&result)?;
    result.prompt = prompt_without(raw, &removed);
    Ok(result)
}

/// As strict as the command line: a mistyped option next to real ones,
/// or one that is close to a real one, is refused rather than folded
/// into the task (where only the model would see it).
fn refuse_unknown(result: &RawArguments) -> Result<(), ArgumentsError> {
    match result
        .unknown
        .iter()
        .find(|w| !result.options.is_empty() || suggestion(w).is_some())
    {
        Some(word) => Err(ArgumentsError::UnknownOption {
            word: word.clone(),
            suggestion: suggestion(word),
        }),
        None => Ok(()),
    }
}

/// The raw text without the option words (byte spans in `removed`).
fn prompt_without(raw: &str, removed: &[(usize, usize)]) -> String {
    let mut prompt = String::new();
    let mut pos = 0;
    for (start, end) in removed {
        // Take the spaces before an option with it, so no trailing blank is left behind.
        prompt.push_str(raw[pos..*start].trim_end_matches([' ', '\t']));
        pos = *end;
    }
    prompt.push_str(&raw[pos..]);
    strip_outer_quotes(prompt.trim())
}

/// `"Build it"` → `Build it`, only when the whole text is one quoted word.
fn strip_outer_quotes(text: &str) -> String {
    let ws = words(text);
    if let [only] = ws.as_slice() {
        let first = text.chars().next();
        if only.quoted
            && first
                .is_some_and(|q| (q == '"' || q == '\'') && text.ends_with(q) && text.len() >= 2)
        {
            let inner = &text[1..text.len() - 1];
            if !inner.contains(first.unwrap_or('"')) {
                return inner.to_owned();
            }
        }
    }
    text.to_owned()
}

/// What `/ralph-cancel`, `/ralph-pause` or `/ralph-resume` was given: one
/// loop by name, or all of them (neither: the session's own loop).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    pub name: Option<String>,
    pub all: bool,
}

/// The selection typed after a slash command, split on whitespace: nothing,
/// `NAME`, `--name NAME`, `--name=NAME` or `--all`; anything else is
/// refused rather than guessed.
pub fn selection(raw: &str) -> Result<Targets, ArgumentsError> {
    let words: Vec<&str> = raw.split_whitespace().collect();
    let mut out = Targets::default();
    match words.as_slice() {
        [] => {}
        ["--all"] => out.all = true,
        ["--name", name] => out.name = Some((*name).to_owned()),
        [word] if word.starts_with("--name=") => {
            out.name = Some(word["--name=".len()..].to_owned());
        }
        [name] if !name.starts_with('-') => out.name = Some((*name).to_owned()),
        _ => return Err(ArgumentsError::BadSelection(raw.trim().to_owned())),
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// `ralph start --help`'s text below the options.

const START_EXAMPLES: &str = "Examples:
  ralph start --max-iterations 20 --completion-promise DONE \"Make every test in tests/ pass\"
  ralph start --completion-promise DONE --verify 'cargo test' --max-duration 2h < ralph/PROMPT.md
  ralph start --abort-promise BLOCKED --max-tokens 2000000 --name docs \"Write the user guide\"";

/// The abort promise is no guard (it is the agent's way out) but belongs
/// beside them in the help.
const ABORT_PROMISE_HELP: (&str, &str) = (
    "--abort-promise BLOCKED",
    "the agent may end the loop (as aborted) with <promise>BLOCKED</promise> when only a person can unblock it; you see its explanation",
);

const BLOCK_CAP_HELP: &str =
    "Claude Code's block cap (CLAUDE_CODE_STOP_HOOK_BLOCK_CAP, default 8) is honoured: a loop that
continues the turn that many times in a row without a tool call is ended (as block_cap) before
Claude Code would override it.";

/// `ralph start --help`'s text below the options: the examples, then every
/// guard's entry from `ralph_state::fields::ralph_state::fields::guards::OPTIONS`, so a new guard is
/// explained without an edit here.
pub fn start_help() -> String {
    let mut out = format!(
        "{START_EXAMPLES}\n\nGuards (each optional; shown by `ralph status`, logged at every stop):\n"
    );
    let entries = ralph_state::fields::guards::OPTIONS
        .iter()
        .map(|g| (g.example, g.explains))
        .chain([ABORT_PROMISE_HELP]);
    for (example, explains) in entries {
        out.push_str(&help_entry(example, explains));
    }
    out.push_str(BLOCK_CAP_HELP);
    out
}

/// One entry: the example in the first column, the words wrapped beside it.
fn help_entry(example: &str, explains: &str) -> String {
    const COLUMN: usize = 24;
    const WIDTH: usize = 76;
    let mut lines = vec![String::new()];
    for word in explains.split(' ') {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && line.len() + 1 + word.len() > WIDTH {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let first = if i == 0 { example } else { "" };
        // An example longer than the column gets one space before its words.
        let pad = COLUMN.saturating_sub(first.len()).max(1);
        out.push_str(&format!("  {first}{:pad$}{line}\n", ""));
    }
    out
}

#[cfg(test)]
mod tests {
    /// `ralph start --help` explains every guard below its option list,
    /// each on its own entry.
    #[test]
    fn the_start_help_explains_every_guard() {
        let help = start_help();
        for guard in ralph_state::fields::guards::OPTIONS {
            let entry = help
                .lines()
                .find(|l| l.trim_start().starts_with(guard.example))
                .unwrap_or_else(|| panic!("--{} has no entry in:\n{help}", guard.flag));
            assert!(
                guard.example.starts_with(&format!("--{} ", guard.flag)),
                "{entry}"
            );
        }
    }

    #[test]
    fn help_entries_wrap_beside_their_example() {
        let entry = help_entry("--stuck-after 3", &"word ".repeat(40));
        let lines: Vec<&str> = entry.lines().collect();
        assert!(lines.len() > 1, "{entry}");
        assert!(lines[0].starts_with("  --stuck-after 3 "), "{entry}");
        for line in &lines {
            assert!(line.len() <= 2 + 24 + 76, "{line}");
            assert_eq!(line.find("word"), Some(26), "{entry}");
        }
    }

    #[test]
    fn every_guard_is_an_option_of_ralph_start_and_a_field_of_the_loop_file() {
        let starts_at = crate::arguments::OPTIONS
            .iter()
            .position(|(flag, _)| *flag == ralph_state::fields::guards::OPTIONS[0].flag)
            .unwrap();
        for (i, g) in ralph_state::fields::guards::OPTIONS.iter().enumerate() {
            assert_eq!(crate::arguments::OPTIONS[starts_at + i], (g.flag, g.kind));
            assert!(
                ralph_state::fields::state::KNOWN_FIELDS.contains(&g.field),
                "{} is not read from the loop file",
                g.field
            );
            assert_eq!(g.field, g.flag.replace('-', "_"));
        }
    }

    #[test]
    fn the_readme_options_table_lists_every_option_with_its_default() {
        let readme = include_str!("../../../README.md");
        let rows: Vec<&str> = readme.lines().filter(|l| l.starts_with("| `--")).collect();
        for (flag, _) in crate::arguments::OPTIONS {
            let row = rows
                .iter()
                .find(|r| {
                    r.strip_prefix(&format!("| `--{flag}"))
                        .is_some_and(|rest| rest.starts_with([' ', '`']))
                })
                .unwrap_or_else(|| panic!("README's options table lacks --{flag}"));
            if let Some(g) = ralph_state::fields::guards::OPTIONS
                .iter()
                .find(|g| g.flag == *flag)
            {
                let default = row.split('|').nth(2).unwrap_or_default().trim();
                assert_eq!(default, g.default, "README default of --{flag}");
            }
        }
    }
    #[test]
    fn the_hint_names_only_options_ralph_start_has_and_the_first_loops_need() {
        for (flag, _) in HINTED {
            assert!(kind_of(flag).is_some(), "--{flag} is not an option");
        }
        let hint = argument_hint();
        for needed in [
            "--prd[=FILE]",
            "--check CMD",
            "--max-cost USD",
            "--protect GLOB",
            "--scope GLOB",
        ] {
            assert!(hint.contains(needed), "{needed}: {hint}");
        }
    }

    use super::*;

    #[test]
    fn a_selection_is_a_name_or_all_and_nothing_else() {
        let named = |n: &str| Targets {
            name: Some(n.to_owned()),
            all: false,
        };
        assert_eq!(selection("  ").unwrap(), Targets::default());
        assert_eq!(selection("x").unwrap(), named("x"));
        assert_eq!(selection("--name x").unwrap(), named("x"));
        assert_eq!(selection("--name=x").unwrap(), named("x"));
        assert!(selection("--all").unwrap().all);
        let refused = selection(" a b ").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "expected nothing, a loop name, `--name NAME` or `--all`, not `a b`"
        );
        assert!(selection("--bogus").is_err());
    }

    fn opts(r: &RawArguments) -> Vec<(&str, &str)> {
        r.options
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn options_anywhere_prompt_verbatim() {
        let r = parse("Fix the \"quotes\" in $HOME and `ls`\nsecond line --max-iterations 5 --completion-promise=DONE").unwrap();
        assert_eq!(
            r.prompt,
            "Fix the \"quotes\" in $HOME and `ls`\nsecond line"
        );
        assert_eq!(
            opts(&r),
            [("max-iterations", "5"), ("completion-promise", "DONE")]
        );
    }

    #[test]
    fn quoted_prompt_and_values() {
        let r = parse("\"Build a todo app\" --completion-promise \"ALL DONE\" --force").unwrap();
        assert_eq!(r.prompt, "Build a todo app");
        assert_eq!(
            opts(&r),
            [("completion-promise", "ALL DONE"), ("force", "")]
        );
    }

    #[test]
    fn options_inside_quotes_are_prompt() {
        let r = parse("'add a --max-iterations flag' --name cli").unwrap();
        assert_eq!(r.prompt, "add a --max-iterations flag");
        assert_eq!(opts(&r), [("name", "cli")]);
    }

    #[test]
    fn double_dash_ends_options() {
        let r = parse("--max-iterations 3 -- add --name support").unwrap();
        assert_eq!(r.prompt, "add --name support");
        assert_eq!(opts(&r), [("max-iterations", "3")]);
    }

    #[test]
    fn unknown_options_far_from_ralph_s_stay_in_the_prompt() {
        let r = parse("add a --verbose flag").unwrap();
        assert_eq!(r.prompt, "add a --verbose flag");
        assert_eq!(r.unknown, ["--verbose"]);
    }

    #[test]
    fn a_mistyped_option_is_refused_with_the_suggestion() {
        let e = parse("\"Fix it\" --max-iteration 5 --completion-promise DONE").unwrap_err();
        assert_eq!(
            e,
            ArgumentsError::UnknownOption {
                word: "--max-iteration".into(),
                suggestion: Some("max-iterations")
            }
        );
        assert!(e.to_string().contains("did you mean `--max-iterations`?"));
        // Alone, a near miss is refused too; next to a real option, any stranger is.
        assert!(parse("do it --max-iteration 5").is_err());
        assert!(parse("do it --verbose --name x").is_err());
        assert!(parse("do it -- --verbose --name x").is_ok());
    }

    #[test]
    fn durations_need_a_unit_and_numbers_are_numbers() {
        let e = parse("t --max-duration 2").unwrap_err();
        assert!(e.to_string().contains("`--max-duration 2m`"), "{e}");
        assert!(parse("t --verify-timeout=30").is_err());
        assert!(parse("t --max-duration 1h30m").is_ok());
        assert!(matches!(
            parse("t --max-iterations five"),
            Err(ArgumentsError::BadNumber { .. })
        ));
    }

    #[test]
    fn apostrophes_are_letters() {
        let r = parse("Don't touch the README --max-iterations 5").unwrap();
        assert_eq!(r.prompt, "Don't touch the README");
        assert_eq!(opts(&r), [("max-iterations", "5")]);
        let r = parse("it's 'quoted text' here --name x").unwrap();
        assert_eq!(r.prompt, "it's 'quoted text' here");
        assert_eq!(opts(&r), [("name", "x")]);
        let r = parse("\"unclosed --max-iterations 2").unwrap();
        assert_eq!(opts(&r), [("max-iterations", "2")]);
    }

    #[test]
    fn no_blank_is_left_where_an_option_was() {
        let r = parse("Fix it --max-iterations 5\nsecond").unwrap();
        assert_eq!(r.prompt, "Fix it\nsecond");
    }

    #[test]
    fn missing_value_is_an_error() {
        assert_eq!(
            parse("task --max-iterations"),
            Err(ArgumentsError::MissingValue("max-iterations".into()))
        );
        let e = parse("task --completion-promise").unwrap_err().to_string();
        assert!(e.contains("e.g. `--completion-promise DONE`"), "{e}");
    }

    #[test]
    fn mixed_quotes_are_kept() {
        assert_eq!(parse("\"a\" and \"b\"").unwrap().prompt, "\"a\" and \"b\"");
        assert_eq!(parse("").unwrap().prompt, "");
    }
}
