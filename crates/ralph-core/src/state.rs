//! The loop state: the typed view of a `.claude/<name>-loop.local.md` file.
//!
//! The reference format (Anthropic's `ralph-loop` plugin) is read as is; the
//! extra fields this project adds are optional, so a file armed by the
//! reference setup script runs here unchanged, and a file armed here still
//! reads in the reference hook.

use serde::Deserialize;

use crate::frontmatter::{self, Split, SplitError};
use crate::time::{Timestamp, parse_duration};

/// `max_iterations` when the field is missing: a finite limit, so a file
/// that lost the line can never loop forever.
pub const DEFAULT_MAX_ITERATIONS: u64 = 50;
/// Identical replies in a row that end a loop as stuck (0 turns the breaker off).
pub const DEFAULT_STUCK_AFTER: u64 = 3;
/// Iterations without any change to the working tree or HEAD that end a loop.
pub const DEFAULT_NO_PROGRESS_AFTER: u64 = 5;
/// The verification command's time limit, in seconds, when none is set.
pub const DEFAULT_VERIFY_TIMEOUT: u64 = 300;
/// The longest verification a loop may ask for: it must finish well inside
/// the hook's own timeout (900 s in hooks/hooks.json).
pub const MAX_VERIFY_TIMEOUT: u64 = 840;

/// A parsed loop state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopState {
    /// `false` means paused: stops go through and are not counted.
    pub active: bool,
    /// The turn that just ran (arming writes 1).
    pub iteration: u64,
    /// The last turn allowed; 0 means unlimited.
    pub max_iterations: u64,
    /// The owning session; `None` while nobody has claimed the loop.
    pub session_id: Option<String>,
    pub completion_promise: Option<String>,
    pub abort_promise: Option<String>,
    pub started_at: Option<Timestamp>,
    pub guards: Guards,
    pub progress: Progress,
    /// Set once the loop has ended (only in history records).
    pub outcome: Option<String>,
    pub ended_at: Option<Timestamp>,
    /// The prompt: the body without its surrounding blank lines.
    pub prompt: String,
}

/// Limits set when arming; every one of them is optional.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Guards {
    pub max_duration_secs: Option<u64>,
    pub max_tokens: Option<u64>,
    pub verify: Option<String>,
    pub verify_timeout_secs: u64,
    pub stuck_after: u64,
    pub no_progress_after: u64,
}

/// What the hook remembers between stops to run the guards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    pub tokens_used: u64,
    /// How far the transcript has been read (bytes).
    pub transcript_offset: u64,
    /// The id of the last assistant message whose tokens were counted.
    pub last_message_id: Option<String>,
    pub reply_fingerprint: Option<String>,
    pub same_reply_count: u64,
    pub tree_fingerprint: Option<String>,
    pub no_progress_count: u64,
    /// ralph's blocks in a row since Claude Code's block count last started
    /// over (a new turn, or a continuation that provably ran a tool).
    pub idle_blocks: u64,
    /// The largest single assistant message counted (tokens): the estimate
    /// for a reply the transcript does not hold yet.
    pub largest_reply_tokens: u64,
    /// The estimate added at the last stop for a reply not yet in the
    /// transcript (0 when the transcript held it): `tokens_used` is known,
    /// this much may be missing.
    pub unseen_tokens: u64,
}

/// Why a state file cannot be used. Every variant names what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("{0}; a loop file needs `---`, YAML fields, `---`, then the prompt")]
    Layout(#[from] SplitError),
    #[error("the frontmatter is not valid YAML ({detail}){near}")]
    Yaml { detail: String, near: String },
    #[error("field `{field}` has the value `{value}`, {expected}")]
    Field {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// The frontmatter as written, every field a raw scalar. Unknown fields are
/// ignored here and kept in the file by the in-place rewrite.
#[derive(Debug, Default, Deserialize)]
struct RawFields {
    active: Option<String>,
    iteration: Option<String>,
    max_iterations: Option<String>,
    session_id: Option<String>,
    completion_promise: Option<String>,
    abort_promise: Option<String>,
    started_at: Option<String>,
    max_duration: Option<String>,
    max_tokens: Option<String>,
    verify: Option<String>,
    verify_timeout: Option<String>,
    stuck_after: Option<String>,
    no_progress_after: Option<String>,
    tokens_used: Option<String>,
    transcript_offset: Option<String>,
    last_message_id: Option<String>,
    reply_fingerprint: Option<String>,
    same_reply_count: Option<String>,
    tree_fingerprint: Option<String>,
    no_progress_count: Option<String>,
    idle_blocks: Option<String>,
    largest_reply_tokens: Option<String>,
    unseen_tokens: Option<String>,
    outcome: Option<String>,
    ended_at: Option<String>,
}

impl LoopState {
    /// Parses a whole state file.
    pub fn parse(text: &str) -> Result<Self, StateError> {
        let layout = frontmatter::split(text)?;
        Self::parse_split(text, &layout)
    }

    pub fn parse_split(text: &str, layout: &Split) -> Result<Self, StateError> {
        let yaml = &text[layout.yaml.clone()];
        let raw: RawFields = if yaml.trim().is_empty() {
            RawFields::default()
        } else {
            serde_saphyr::from_str(yaml).map_err(|e| yaml_error(yaml, &e.to_string()))?
        };
        let body = &text[layout.body.clone()];
        Ok(Self {
            active: boolean("active", raw.active.as_deref(), true)?,
            iteration: number("iteration", raw.iteration.as_deref())?.unwrap_or(1),
            max_iterations: number("max_iterations", raw.max_iterations.as_deref())?
                .unwrap_or(DEFAULT_MAX_ITERATIONS),
            session_id: non_empty(raw.session_id),
            completion_promise: promise(raw.completion_promise),
            abort_promise: promise(raw.abort_promise),
            started_at: timestamp("started_at", raw.started_at.as_deref())?,
            guards: Guards {
                max_duration_secs: duration("max_duration", raw.max_duration.as_deref())?,
                max_tokens: number("max_tokens", raw.max_tokens.as_deref())?.filter(|&n| n > 0),
                verify: non_empty(raw.verify),
                verify_timeout_secs: duration("verify_timeout", raw.verify_timeout.as_deref())?
                    .unwrap_or(DEFAULT_VERIFY_TIMEOUT)
                    .clamp(1, MAX_VERIFY_TIMEOUT),
                stuck_after: number("stuck_after", raw.stuck_after.as_deref())?
                    .unwrap_or(DEFAULT_STUCK_AFTER),
                no_progress_after: number("no_progress_after", raw.no_progress_after.as_deref())?
                    .unwrap_or(DEFAULT_NO_PROGRESS_AFTER),
            },
            progress: Progress {
                tokens_used: number("tokens_used", raw.tokens_used.as_deref())?.unwrap_or(0),
                transcript_offset: number("transcript_offset", raw.transcript_offset.as_deref())?
                    .unwrap_or(0),
                last_message_id: non_empty(raw.last_message_id),
                reply_fingerprint: non_empty(raw.reply_fingerprint),
                same_reply_count: number("same_reply_count", raw.same_reply_count.as_deref())?
                    .unwrap_or(0),
                tree_fingerprint: non_empty(raw.tree_fingerprint),
                no_progress_count: number("no_progress_count", raw.no_progress_count.as_deref())?
                    .unwrap_or(0),
                idle_blocks: number("idle_blocks", raw.idle_blocks.as_deref())?.unwrap_or(0),
                largest_reply_tokens: number(
                    "largest_reply_tokens",
                    raw.largest_reply_tokens.as_deref(),
                )?
                .unwrap_or(0),
                unseen_tokens: number("unseen_tokens", raw.unseen_tokens.as_deref())?.unwrap_or(0),
            },
            outcome: non_empty(raw.outcome),
            ended_at: timestamp("ended_at", raw.ended_at.as_deref())?,
            prompt: body.trim_matches(['\n', '\r', ' ', '\t']).to_owned(),
        })
    }

    /// Whether `max_iterations` is reached at the current iteration.
    pub fn at_limit(&self) -> bool {
        self.max_iterations > 0 && self.iteration >= self.max_iterations
    }

    /// `3/20`, or `3/∞` for an unlimited loop.
    pub fn iteration_label(&self) -> String {
        if self.max_iterations == 0 {
            format!("{}/∞", self.iteration)
        } else {
            format!("{}/{}", self.iteration, self.max_iterations)
        }
    }
}

/// Finds the value of `session_id:` by a plain line scan, for files whose
/// YAML does not parse: it decides whether a broken file is ours to move.
pub fn scan_session_id(text: &str) -> Option<String> {
    let layout = frontmatter::split(text).ok();
    let yaml = layout.map_or(text, |l| &text[l.yaml]);
    yaml.lines().find_map(|line| {
        let value = line.strip_prefix("session_id:")?.trim();
        let value = value.trim_matches(['"', '\'']).trim();
        (!value.is_empty() && value != "null" && value != "~").then(|| value.to_owned())
    })
}

fn yaml_error(yaml: &str, message: &str) -> StateError {
    let detail = message
        .lines()
        .next()
        .unwrap_or(message)
        .trim_start_matches("error: ")
        .to_owned();
    let near = line_number(&detail)
        .and_then(|n| yaml.lines().nth(n.saturating_sub(1)))
        .map(|line| format!(" near `{}`", line.trim()))
        .unwrap_or_default();
    StateError::Yaml { detail, near }
}

fn line_number(detail: &str) -> Option<usize> {
    let rest = &detail[detail.find("line ")? + 5..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

/// A promise of `null`, empty text or only spaces means "no promise".
fn promise(value: Option<String>) -> Option<String> {
    non_empty(value).filter(|v| v != "null")
}

/// Reads a whole decimal number. Leading zeros are decimal (`08` is 8):
/// unlike bash arithmetic, nothing here is octal.
fn number(field: &'static str, value: Option<&str>) -> Result<Option<u64>, StateError> {
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
    digits.parse().map(Some).map_err(|_| StateError::Field {
        field,
        value: raw.to_owned(),
        expected: "a number this large is not a sensible limit",
    })
}

fn boolean(field: &'static str, value: Option<&str>, default: bool) -> Result<bool, StateError> {
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v.is_empty() => Ok(default),
        Some(v) if matches!(v.as_str(), "true" | "yes" | "on") => Ok(true),
        Some(v) if matches!(v.as_str(), "false" | "no" | "off") => Ok(false),
        Some(_) => Err(StateError::Field {
            field,
            value: value.unwrap_or_default().to_owned(),
            expected: "expected `true` or `false`",
        }),
    }
}

fn timestamp(field: &'static str, value: Option<&str>) -> Result<Option<Timestamp>, StateError> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => Timestamp::parse_rfc3339(v)
            .map(Some)
            .ok_or_else(|| StateError::Field {
                field,
                value: v.to_owned(),
                expected: "expected a UTC time such as `2026-11-30T01:27:56Z`",
            }),
    }
}

fn duration(field: &'static str, value: Option<&str>) -> Result<Option<u64>, StateError> {
    match value.map(str::trim) {
        None | Some("") | Some("null") => Ok(None),
        Some(v) => parse_duration(v)
            .map(Some)
            .ok_or_else(|| StateError::Field {
                field,
                value: v.to_owned(),
                expected: "expected a duration such as `90m`, `2h` or `1h30m`",
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE: &str = "---\nactive: true\niteration: 1\nsession_id: \nmax_iterations: 0\ncompletion_promise: \"DONE\"\nstarted_at: \"2026-11-30T00:00:00Z\"\n---\n\nBuild the thing.\n";

    #[test]
    fn reads_the_reference_format() {
        let s = LoopState::parse(REFERENCE).unwrap();
        assert!(s.active);
        assert_eq!(s.iteration, 1);
        assert_eq!(s.max_iterations, 0);
        assert_eq!(s.session_id, None);
        assert_eq!(s.completion_promise.as_deref(), Some("DONE"));
        assert_eq!(s.prompt, "Build the thing.");
        assert!(!s.at_limit());
    }

    #[test]
    fn numbers_are_decimal() {
        let s = LoopState::parse("---\niteration: 08\nmax_iterations: 010\n---\nx").unwrap();
        assert_eq!((s.iteration, s.max_iterations), (8, 10));
    }

    #[test]
    fn missing_limit_is_finite() {
        let s = LoopState::parse("---\niteration: 3\n---\nx").unwrap();
        assert_eq!(s.max_iterations, DEFAULT_MAX_ITERATIONS);
    }

    #[test]
    fn bad_numbers_name_the_field() {
        let err = LoopState::parse("---\niteration: -1\n---\nx").unwrap_err();
        assert!(err.to_string().contains("`iteration`"), "{err}");
        assert!(err.to_string().contains("-1"), "{err}");
        let err = LoopState::parse("---\nmax_iterations: five\n---\nx").unwrap_err();
        assert!(err.to_string().contains("max_iterations"), "{err}");
    }

    #[test]
    fn null_promise_means_none() {
        let s = LoopState::parse("---\ncompletion_promise: null\n---\nx").unwrap();
        assert_eq!(s.completion_promise, None);
    }

    #[test]
    fn yaml_errors_point_at_the_line() {
        let err = LoopState::parse("---\niteration: 1\nbroken: [1\n---\nx").unwrap_err();
        assert!(err.to_string().contains("broken"), "{err}");
    }

    #[test]
    fn scans_session_of_broken_files() {
        assert_eq!(
            scan_session_id("---\nsession_id: abc\nx: [\n---\n").as_deref(),
            Some("abc")
        );
        assert_eq!(scan_session_id("---\nsession_id: \n---\n"), None);
    }
}
