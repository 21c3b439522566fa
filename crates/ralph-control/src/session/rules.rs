//! The session rules, pure: what a user's prompt, the end of a session and
//! the start of one mean for the loop that session owns. No file, clock or
//! environment here; `session.rs` gathers the facts and does the writing.

use ralph_state::fields::frontmatter;
use ralph_state::fields::state::LoopState;
use ralph_state::time::Timestamp;

/// Frontmatter field: the iteration at which the user was last told that
/// their message goes into the loop (so they are told once per interruption).
pub(crate) const PROMPT_NOTICE_FIELD: &str = "prompt_noticed_at";
/// Frontmatter field: a loop handed from a session that `/clear` ended to the
/// session `/clear` starts: `"<client pid> <unix seconds> <active|paused>"`.
pub(crate) const HANDOVER_FIELD: &str = "clear_handover";
/// Frontmatter field: why a usage or rate limit paused the loop, until the
/// user has been told (at their next prompt or session start).
pub(crate) const LIMIT_PAUSE_FIELD: &str = "limit_pause";
/// How long a `/clear` handover waits for the new session (the client starts
/// it within milliseconds; the window only bounds a stale or forged mark).
pub(crate) const HANDOVER_WINDOW_SECS: i64 = 120;

/// What the session hooks remember in a loop's frontmatter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    pub prompt_noticed_at: Option<u64>,
    pub handover: Option<Handover>,
    /// A limit paused the loop and the user has not been told yet: why.
    pub limit_pause: Option<String>,
}

/// A loop's owner ended its session with `/clear`; the next session of the
/// same client process takes the loop over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handover {
    pub client_pid: u32,
    pub at: Timestamp,
    pub was_active: bool,
}

impl Handover {
    pub fn render(&self) -> String {
        let state = if self.was_active { "active" } else { "paused" };
        format!("{} {} {state}", self.client_pid, self.at.0)
    }

    pub fn parse(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace();
        let client_pid = words.next()?.parse().ok()?;
        let at = Timestamp(words.next()?.parse().ok()?);
        let was_active = match words.next()? {
            "active" => true,
            "paused" => false,
            _ => return None,
        };
        words.next().is_none().then_some(Self {
            client_pid,
            at,
            was_active,
        })
    }

    /// Whether the session starting now, in the client process `client_pid`,
    /// is the one `/clear` opened right after the owner's session ended.
    pub(crate) fn is_for(&self, client_pid: u32, now: Timestamp) -> bool {
        let age = now.0.saturating_sub(self.at.0);
        self.client_pid == client_pid && (0..=HANDOVER_WINDOW_SECS).contains(&age)
    }
}

/// Reads the session marks by a line scan of the frontmatter (ralph writes
/// them as plain one-line scalars). Anything unreadable counts as absent:
/// a wrong mark costs at most one line of text, never a loop.
pub(crate) fn read_marks(text: &str) -> Marks {
    let Ok(layout) = frontmatter::split(text) else {
        return Marks::default();
    };
    let mut marks = Marks::default();
    for line in text[layout.yaml].lines() {
        let value = |key: &str| {
            let rest = line.strip_prefix(key)?.strip_prefix(':')?;
            Some(rest.trim().trim_matches(['"', '\'']).trim().to_owned())
        };
        if let Some(v) = value(PROMPT_NOTICE_FIELD) {
            marks.prompt_noticed_at = v.parse().ok();
        } else if let Some(v) = value(HANDOVER_FIELD) {
            marks.handover = Handover::parse(&v);
        } else if let Some(v) = value(LIMIT_PAUSE_FIELD) {
            marks.limit_pause = Some(v).filter(|v| !v.is_empty());
        }
    }
    marks
}

/// The first word of a prompt, when it is a slash command.
fn command_word(prompt: &str) -> Option<&str> {
    let word = prompt.split_whitespace().next()?;
    word.strip_prefix('/')
}

/// Whether the prompt is one of ralph's own commands (`/ralph-pause`,
/// `/ralph:ralph-cancel`, …): those never get the "goes into the loop" line.
pub(crate) fn is_ralph_command(prompt: &str) -> bool {
    command_word(prompt).is_some_and(|w| w.starts_with("ralph-") || w.starts_with("ralph:"))
}

/// Whether this prompt gets the "this message goes into the loop" line: the
/// loop is active, the prompt is not a ralph command, and the user has not
/// been told yet since the loop last advanced (one line per interruption).
pub(crate) fn tell_on_prompt(prompt: &str, state: &LoopState, marks: &Marks) -> bool {
    state.active && !is_ralph_command(prompt) && marks.prompt_noticed_at != Some(state.iteration)
}

/// What the end of the owning session does to its loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EndRule {
    /// Already paused: nothing changes.
    Leave,
    /// Pause it, recording why.
    Pause { why: String },
    /// `/clear`: pause it and mark it for the session `/clear` opens.
    HandOver { why: String },
}

pub(crate) fn on_end(reason: Option<&str>, state: &LoopState) -> EndRule {
    let why = format!("the session ended: {}", end_reason_words(reason));
    if reason == Some("clear") {
        EndRule::HandOver { why }
    } else if state.active {
        EndRule::Pause { why }
    } else {
        EndRule::Leave
    }
}

/// `SessionEnd.reason` in words.
pub(crate) fn end_reason_words(reason: Option<&str>) -> String {
    match reason {
        Some("clear") => "/clear started a new conversation".into(),
        Some("logout") => "you logged out".into(),
        Some("prompt_input_exit") => "you quit Claude Code".into(),
        Some("resume") => "you switched to another session".into(),
        Some("bypass_permissions_disabled") => "bypass-permissions mode was turned off".into(),
        Some("other") | None => "the client closed it".into(),
        Some(other) => format!(
            "the client closed it ({})",
            ralph_state::messages::printable(other)
        ),
    }
}

/// What an API error that ended a turn (`StopFailure`) does to the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FailureRule {
    /// A rate or usage limit: pause, uncounted, until the user resumes.
    Pause { why: String },
    /// Anything else (overloaded, a server error, …): logged, nothing more;
    /// the next prompt or stop carries on.
    Log { why: String },
}

/// `StopFailure.error` (Claude Code 2.1.328 sends one of
/// `rate_limit`, `billing_error`, `server_error` — also for HTTP 529
/// overloaded —, `authentication_failed`, `invalid_request`, `unknown`, …),
/// with its details and the message the client showed, which may say when
/// the limit resets.
pub(crate) fn on_failure(
    error: Option<&str>,
    details: Option<&str>,
    shown: Option<&str>,
) -> FailureRule {
    let error = error.map(str::trim).filter(|e| !e.is_empty());
    let words = match error {
        Some("rate_limit") => Some("rate limited"),
        Some("billing_error") => Some("usage or billing limit reached"),
        _ => None,
    };
    let said = [details, shown]
        .into_iter()
        .flatten()
        .map(|t| ralph_state::messages::printable(t.lines().next().unwrap_or("")))
        .find(|t| !t.trim().is_empty());
    let reset = [details, shown].into_iter().flatten().find_map(reset_hint);
    if let Some(words) = words {
        let mut why = format!("{words} ({})", error.unwrap_or_default());
        if let Some(reset) = reset {
            why.push_str(&format!("; {reset}"));
        }
        if let Some(said) = said {
            why.push_str(&format!(": {}", excerpt(&said)));
        }
        FailureRule::Pause { why }
    } else {
        let error = ralph_state::messages::printable(error.unwrap_or("unknown"));
        let mut why = format!("an API error ended the turn ({error})");
        if let Some(said) = said {
            why.push_str(&format!(": {}", excerpt(&said)));
        }
        FailureRule::Log { why }
    }
}

/// When the limit resets, if the text says: the words from `reset`
/// (`resets 3pm (Europe/Paris)`, `reset at 2026-12-01T23:00:00Z`) up to
/// the end of that clause.
pub(crate) fn reset_hint(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find("reset")?;
    let clause: String = text[at..]
        .chars()
        .take_while(|c| !matches!(c, '.' | '·' | ';' | '\n' | '|'))
        .take(80)
        .collect();
    let clause = clause.trim().trim_end_matches([',', ' ']).trim();
    (clause.split_whitespace().count() > 1).then(|| ralph_state::messages::printable(clause))
}

fn excerpt(text: &str) -> String {
    let short: String = text.chars().take(200).collect();
    if short.len() < text.len() {
        format!("{short}…")
    } else {
        short
    }
}

/// What the owning session hears about its loop when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartRule {
    /// A paused loop: how to resume it.
    Paused,
    /// An active loop after compaction: it carries on.
    Compacted,
    /// An active loop in a resumed (or restarted) session: the next message
    /// goes into it.
    Armed,
}

pub(crate) fn on_start(source: Option<&str>, state: &LoopState) -> StartRule {
    match (state.active, source) {
        (false, _) => StartRule::Paused,
        (true, Some("compact")) => StartRule::Compacted,
        (true, _) => StartRule::Armed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(active: bool, iteration: u64) -> LoopState {
        LoopState::parse(&format!(
            "---\nactive: {active}\niteration: {iteration}\nsession_id: s\nmax_iterations: 20\n---\ntask\n"
        ))
        .unwrap()
    }

    #[test]
    fn limits_pause_and_other_api_errors_are_only_logged() {
        let rule = on_failure(
            Some("rate_limit"),
            None,
            Some(
                "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit",
            ),
        );
        assert_eq!(
            rule,
            FailureRule::Pause {
                why: "rate limited (rate_limit): API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit".into()
            }
        );
        let FailureRule::Pause { why } = on_failure(
            Some("billing_error"),
            Some("You've hit your limit · resets 3pm (Europe/Paris)"),
            None,
        ) else {
            panic!("a usage limit pauses")
        };
        assert!(
            why.starts_with(
                "usage or billing limit reached (billing_error); resets 3pm (Europe/Paris):"
            ),
            "{why}"
        );
        for transient in ["server_error", "overloaded", "unknown", ""] {
            assert!(
                matches!(
                    on_failure(Some(transient), None, Some("API Error: 529 Overloaded")),
                    FailureRule::Log { .. }
                ),
                "{transient}"
            );
        }
        assert!(
            matches!(on_failure(None, None, None), FailureRule::Log { why } if why.contains("(unknown)"))
        );
        // Escaped: an error value is printed only through `printable`.
        let FailureRule::Log { why } = on_failure(Some("x\u{1b}[2J"), None, None) else {
            panic!()
        };
        assert!(!why.contains('\u{1b}'), "{why}");
        assert_eq!(reset_hint("limit reached"), None);
        assert_eq!(
            reset_hint("Limit reached. Resets at 2026-12-01T23:00:00Z."),
            Some("Resets at 2026-12-01T23:00:00Z".into())
        );
    }

    #[test]
    fn ralph_commands_are_recognised() {
        for p in [
            "/ralph-loop x",
            "/ralph:ralph-cancel",
            "  /ralph-pause",
            "/ralph-status\n",
        ] {
            assert!(is_ralph_command(p), "{p}");
        }
        for p in ["stop", "/clear", "please /ralph-pause", "/ralphy", ""] {
            assert!(!is_ralph_command(p), "{p}");
        }
    }

    #[test]
    fn the_prompt_line_comes_once_per_interruption() {
        let s = state(true, 3);
        assert!(tell_on_prompt("stop", &s, &Marks::default()));
        let told = Marks {
            prompt_noticed_at: Some(3),
            ..Marks::default()
        };
        assert!(!tell_on_prompt("and now?", &s, &told));
        assert!(tell_on_prompt("and now?", &state(true, 4), &told));
        assert!(!tell_on_prompt("/ralph-pause", &s, &Marks::default()));
        assert!(!tell_on_prompt("hi", &state(false, 3), &Marks::default()));
    }

    #[test]
    fn session_end_pauses_and_clear_hands_over() {
        assert!(matches!(
            on_end(Some("prompt_input_exit"), &state(true, 2)),
            EndRule::Pause { why } if why.contains("you quit Claude Code")
        ));
        assert_eq!(on_end(Some("logout"), &state(false, 2)), EndRule::Leave);
        assert!(matches!(
            on_end(Some("clear"), &state(false, 2)),
            EndRule::HandOver { .. }
        ));
        assert_eq!(
            end_reason_words(Some("odd\u{1b}[2J")),
            "the client closed it (odd\\x1b[2J)"
        );
    }

    #[test]
    fn start_rules() {
        assert_eq!(
            on_start(Some("resume"), &state(false, 2)),
            StartRule::Paused
        );
        assert_eq!(
            on_start(Some("compact"), &state(true, 2)),
            StartRule::Compacted
        );
        assert_eq!(on_start(Some("startup"), &state(true, 2)), StartRule::Armed);
    }

    #[test]
    fn marks_round_trip_and_bad_marks_are_absent() {
        let h = Handover {
            client_pid: 1577,
            at: Timestamp(1_000),
            was_active: true,
        };
        assert_eq!(Handover::parse(&h.render()), Some(h));
        let text = format!(
            "---\nactive: false\n{PROMPT_NOTICE_FIELD}: 7\n{HANDOVER_FIELD}: \"{}\"\n---\nx\n",
            h.render()
        );
        assert_eq!(
            read_marks(&text),
            Marks {
                prompt_noticed_at: Some(7),
                handover: Some(h),
                limit_pause: None,
            }
        );
        let bad =
            format!("---\n{PROMPT_NOTICE_FIELD}: -1\n{HANDOVER_FIELD}: \"x 1 active\"\n---\n");
        assert_eq!(read_marks(&bad), Marks::default());
        assert_eq!(read_marks("no frontmatter"), Marks::default());
        assert!(h.is_for(1577, Timestamp(1_100)));
        assert!(!h.is_for(1577, Timestamp(1_000 + HANDOVER_WINDOW_SECS + 1)));
        assert!(!h.is_for(1577, Timestamp(999)));
        assert!(!h.is_for(1578, Timestamp(1_001)));
        assert!(
            !Handover {
                at: Timestamp(i64::MIN),
                ..h
            }
            .is_for(1577, Timestamp(i64::MAX))
        );
    }
}
