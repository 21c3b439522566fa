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

/// Options that take a value.
pub const VALUE_OPTIONS: &[&str] = &[
    "name",
    "max-iterations",
    "completion-promise",
    "abort-promise",
    "max-duration",
    "max-tokens",
    "verify",
    "verify-timeout",
    "stuck-after",
    "no-progress-after",
    "session-id",
];
/// Options that are switches.
pub const FLAG_OPTIONS: &[&str] = &["force", "fresh-context"];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawArguments {
    /// `(option, value)` in the order given; a switch has an empty value.
    pub options: Vec<(String, String)>,
    pub prompt: String,
    /// Words that look like options but are not ralph's (kept in the prompt).
    pub unknown: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentsError {
    #[error("`--{0}` needs a value, e.g. `--{0} 10`")]
    MissingValue(String),
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
        if FLAG_OPTIONS.contains(&key) && inline.is_none() {
            result.options.push((key.to_owned(), String::new()));
            removed.push((word.start, word.end));
        } else if VALUE_OPTIONS.contains(&key) {
            let value = match inline {
                Some(_) => word
                    .unquoted
                    .split_once('=')
                    .map(|(_, v)| v.to_owned())
                    .unwrap_or_default(),
                None => {
                    let next = words
                        .get(i + 1)
                        .ok_or_else(|| ArgumentsError::MissingValue(key.to_owned()))?;
                    i += 1;
                    next.unquoted.clone()
                }
            };
            result.options.push((key.to_owned(), value));
            removed.push((word.start, words[i].end));
        } else if key.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && !word.quoted {
            result.unknown.push(text.to_owned());
        }
        i += 1;
    }
    let mut prompt = String::new();
    let mut pos = 0;
    for (start, end) in &removed {
        // Take the spaces before an option with it, so no trailing blank is left behind.
        prompt.push_str(raw[pos..*start].trim_end_matches([' ', '\t']));
        pos = *end;
    }
    prompt.push_str(&raw[pos..]);
    result.prompt = strip_outer_quotes(prompt.trim());
    Ok(result)
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn unknown_options_stay_in_the_prompt() {
        let r = parse("do it --max-iteration 5").unwrap();
        assert_eq!(r.prompt, "do it --max-iteration 5");
        assert_eq!(r.unknown, ["--max-iteration"]);
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
    }

    #[test]
    fn mixed_quotes_are_kept() {
        assert_eq!(parse("\"a\" and \"b\"").unwrap().prompt, "\"a\" and \"b\"");
        assert_eq!(parse("").unwrap().prompt, "");
    }
}
