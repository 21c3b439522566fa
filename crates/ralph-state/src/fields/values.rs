//! Reading one frontmatter value: whole numbers under a cap (decimal, never
//! wrapped), durations, texts, and the error that names the field and the
//! fix. `state` reads the loop's own fields with these, `guards` the guards'.

use crate::time::parse_duration;

/// Where the raw values come from: the frontmatter as written, by field name.
pub trait FieldSource {
    /// The raw value of the field called `name` (`None`: absent or unknown).
    fn get(&self, name: &str) -> Option<&str>;
}

/// The largest iteration count, limit or breaker threshold a file may hold.
pub const MAX_COUNT: u64 = 1_000_000_000;
/// The largest token figure (budget or count) a file may hold.
pub const MAX_TOKENS: u64 = 1_000_000_000_000_000;
/// The largest transcript offset, in bytes (a petabyte).
pub(crate) const MAX_OFFSET: u64 = 1_000_000_000_000_000;

/// Why a state file cannot be used. Every variant names what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error(
        "the file does not start with a `---` line (expected YAML frontmatter); a loop file needs `---`, YAML fields, `---`, then the prompt"
    )]
    NoOpening,
    #[error(
        "the frontmatter has no closing `---` line; a loop file needs `---`, YAML fields, `---`, then the prompt"
    )]
    NoClosing,
    #[error("the frontmatter is not valid YAML ({detail}){near}")]
    Yaml { detail: String, near: String },
    #[error(
        "field `{field}` {problem}, so ralph could not rewrite it safely; write it as `{field}: {example}` on a line of its own (a plain key at the start of the line, outside any other value)"
    )]
    Spelling {
        field: &'static str,
        problem: &'static str,
        example: String,
    },
    #[error("field `{field}` has the value `{value}`, {expected}")]
    Field {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}

impl ralph_fs::error::Exit for StateError {}

pub fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

/// Reads a whole decimal number no larger than `cap`. Leading zeros are
/// decimal (`08` is 8): unlike bash arithmetic, nothing here is octal. A
/// number past its cap is an error, never wrapped or clamped.
pub fn number(
    field: &'static str,
    value: Option<&str>,
    cap: u64,
) -> Result<Option<u64>, StateError> {
    let Some(raw) = value else { return Ok(None) };
    let trimmed = raw.trim().trim_matches(['"', '\'']).replace('_', "");
    if trimmed.is_empty() {
        return Ok(None);
    }
    if !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(StateError::Field {
            field,
            value: raw.to_owned(),
            expected: "expected a whole number such as `5` (0 or more, decimal)",
        });
    }
    let digits = trimmed.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(Some(0));
    }
    match digits.parse::<u64>() {
        Ok(n) if n <= cap => Ok(Some(n)),
        _ => Err(StateError::Field {
            field,
            value: raw.to_owned(),
            expected: cap_message(cap),
        }),
    }
}

fn cap_message(cap: u64) -> &'static str {
    match cap {
        MAX_COUNT => "past the largest count ralph accepts (1000000000); write a smaller number",
        MAX_TOKENS => {
            "past the largest token figure ralph accepts (1000000000000000); write a smaller number"
        }
        _ => "a number this large is not a sensible value; write a smaller number",
    }
}

pub fn duration(field: &'static str, value: Option<&str>) -> Result<Option<u64>, StateError> {
    match value.map(str::trim) {
        None | Some("" | "null") => Ok(None),
        Some(v) => parse_duration(v)
            .map(Some)
            .ok_or_else(|| StateError::Field {
                field,
                value: v.to_owned(),
                expected: "expected a duration such as `90m`, `2h` or `1h30m`, at most 3650d",
            }),
    }
}
