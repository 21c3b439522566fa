//! The decision at the end of a turn: a pure function of the loop state and
//! what was observed (the reply, the clock, the guard figures). It touches
//! no file and no clock of its own, so every rule is tested directly.

use crate::promise;
use crate::state::{LoopState, Progress};
use crate::time::{Timestamp, format_duration};

/// What the shell observed for this Stop.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// The text of the reply that just finished (`None`: no text, e.g. a tool call).
    pub reply: Option<String>,
    pub now: Option<Timestamp>,
    /// Tokens used since the loop began, when counted.
    pub tokens_used: Option<u64>,
    /// A fingerprint of the working tree and HEAD, when the project is a git repository.
    pub tree_fingerprint: Option<String>,
    /// Whether the turn that just ended ran any tool, when known.
    pub ran_tool: Option<bool>,
    /// Claude Code's consecutive-block cap (0: disabled).
    pub block_cap: u64,
    /// The result of the verification command, once it has run.
    pub verification: Option<Verification>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    pub passed: bool,
    /// `exit 3`, `timed out after 300s`, `could not start: …`
    pub status: String,
    /// The last lines of its output.
    pub output_tail: String,
}

/// How a loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    MaxIterations,
    Aborted,
    TimeBudget,
    TokenBudget,
    Stuck,
    NoProgress,
    Idle,
    Cancelled,
    Corrupt,
    /// `ralph run`: the agent was refused the same permission again.
    Denied,
    /// `ralph run`: the agent could not run, on a loop this run armed.
    Failed,
}

impl Outcome {
    /// The word stored in the `outcome:` field and shown by `ralph status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::MaxIterations => "max_iterations",
            Self::Aborted => "aborted",
            Self::TimeBudget => "time_budget",
            Self::TokenBudget => "token_budget",
            Self::Stuck => "stuck",
            Self::NoProgress => "no_progress",
            Self::Idle => "idle",
            Self::Cancelled => "cancelled",
            Self::Corrupt => "corrupt",
            Self::Denied => "denied",
            Self::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The loop is paused: let the stop through and change nothing.
    Pass,
    /// The promise was spoken and a verification command must run first.
    Verify { command: String },
    /// The loop ends; `detail` says why, with the figures.
    End { outcome: Outcome, detail: String },
    /// Block the stop and feed the prompt back for turn `next`.
    Continue {
        next: u64,
        progress: Progress,
        /// Lines for the agent under the prompt (refused promise, budget warnings).
        notes: Vec<String>,
    },
}

/// How many blocks before Claude Code's cap an idle loop is ended.
pub const IDLE_MARGIN: u64 = 2;

/// Share of a budget after which the agent is told to wrap up.
const WARN_AT_PERCENT: u64 = 80;

pub fn decide(state: &LoopState, seen: &Observation) -> Decision {
    if !state.active {
        return Decision::Pass;
    }
    let reply = seen.reply.as_deref().unwrap_or("");
    let mut notes = Vec::new();

    if let Some(expected) = &state.completion_promise
        && promise::speaks(reply, expected)
    {
        {
            match (&state.guards.verify, &seen.verification) {
                (None, _) => {
                    return end(
                        Outcome::Completed,
                        format!(
                            "the agent gave the promise `{expected}` at iteration {}",
                            state.iteration
                        ),
                    );
                }
                (Some(command), None) => {
                    return Decision::Verify {
                        command: command.clone(),
                    };
                }
                (Some(command), Some(v)) if v.passed => {
                    return end(
                        Outcome::Completed,
                        format!(
                            "the agent gave the promise `{expected}` and `{command}` passed, at iteration {}",
                            state.iteration
                        ),
                    );
                }
                (Some(command), Some(v)) => notes.push(refusal(expected, command, v)),
            }
        }
    }

    if let Some(abort) = &state.abort_promise
        && promise::speaks(reply, abort)
    {
        return end(
            Outcome::Aborted,
            format!(
                "the agent said it is blocked (`{abort}`) at iteration {}: {}",
                state.iteration,
                excerpt(reply)
            ),
        );
    }

    if state.at_limit() {
        return end(
            Outcome::MaxIterations,
            format!(
                "reached the limit of {} iterations without the promise",
                state.max_iterations
            ),
        );
    }

    let elapsed = match (state.started_at, seen.now) {
        (Some(start), Some(now)) => Some((now.0 - start.0).max(0) as u64),
        _ => None,
    };
    if let (Some(limit), Some(elapsed)) = (state.guards.max_duration_secs, elapsed) {
        if elapsed >= limit {
            return end(
                Outcome::TimeBudget,
                format!(
                    "ran {} of its {} time budget",
                    format_duration(elapsed),
                    format_duration(limit)
                ),
            );
        }
        if elapsed * 100 >= limit * WARN_AT_PERCENT {
            notes.push(format!("Time budget: {} of {} used. Wrap up: finish the current step, commit, and leave notes for the next run.", format_duration(elapsed), format_duration(limit)));
        }
    }

    let tokens = seen.tokens_used.unwrap_or(state.progress.tokens_used);
    if let Some(limit) = state.guards.max_tokens {
        if tokens >= limit {
            return end(
                Outcome::TokenBudget,
                format!("used {tokens} of its {limit} token budget"),
            );
        }
        if tokens * 100 >= limit * WARN_AT_PERCENT {
            notes.push(format!("Token budget: {tokens} of {limit} used. Wrap up: finish the current step, commit, and leave notes for the next run."));
        }
    }

    let mut progress = state.progress.clone();
    progress.tokens_used = tokens;

    let fingerprint = (!reply.trim().is_empty()).then(|| fingerprint(&promise::normalise(reply)));
    progress.same_reply_count = match (&fingerprint, &progress.reply_fingerprint) {
        (Some(new), Some(old)) if new == old => progress.same_reply_count + 1,
        (Some(_), _) => 1,
        (None, _) => 0,
    };
    progress.reply_fingerprint = fingerprint;
    let stuck_after = state.guards.stuck_after;
    if stuck_after > 0 && progress.same_reply_count >= stuck_after {
        return end(
            Outcome::Stuck,
            format!(
                "the same reply came {} times in a row",
                progress.same_reply_count
            ),
        );
    }

    if let Some(tree) = &seen.tree_fingerprint {
        progress.no_progress_count = match &progress.tree_fingerprint {
            Some(old) if old == tree => progress.no_progress_count + 1,
            _ => 0,
        };
        progress.tree_fingerprint = Some(tree.clone());
        let limit = state.guards.no_progress_after;
        if limit > 0 && progress.no_progress_count >= limit {
            return end(
                Outcome::NoProgress,
                format!(
                    "no change to the working tree or HEAD for {} iterations",
                    progress.no_progress_count
                ),
            );
        }
    }

    progress.idle_blocks = match seen.ran_tool {
        Some(false) => progress.idle_blocks + 1,
        Some(true) => 0,
        None => progress.idle_blocks,
    };
    // Claude Code overrides the hook at the cap-th consecutive idle block and
    // never tells it. The transcript may lag a turn behind, so end the loop
    // two blocks early, with an explanation, rather than be cut silently.
    if seen.block_cap > 0
        && progress.idle_blocks > 0
        && progress.idle_blocks + IDLE_MARGIN >= seen.block_cap
    {
        return end(
            Outcome::Idle,
            format!(
                "{} turns in a row ran no tool; Claude Code ends a turn after {} such blocks, so the loop stops here",
                progress.idle_blocks, seen.block_cap
            ),
        );
    }

    Decision::Continue {
        next: state.iteration + 1,
        progress,
        notes,
    }
}

fn end(outcome: Outcome, detail: String) -> Decision {
    Decision::End { outcome, detail }
}

fn refusal(expected: &str, command: &str, v: &Verification) -> String {
    let output = match v.output_tail.trim_end() {
        "" => "It printed nothing.".to_owned(),
        tail => format!("Last lines of its output:\n{tail}"),
    };
    format!(
        "Your promise `{expected}` was refused: the verification command `{command}` failed ({}). Fix the cause, then give the promise again.\n{output}",
        v.status,
    )
}

/// At most 300 characters of the reply, on one line, for messages.
pub fn excerpt(reply: &str) -> String {
    let flat = promise::normalise(reply);
    match flat.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// FNV-1a 64: stable across runs and versions, unlike std's hasher.
pub fn fingerprint(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(text: &str) -> LoopState {
        LoopState::parse(&format!(
            "---\nsession_id: s\nstarted_at: \"1970-01-01T00:00:00Z\"\n{text}---\nPrompt\n"
        ))
        .unwrap()
    }

    fn seen(reply: &str) -> Observation {
        Observation {
            reply: Some(reply.into()),
            now: Some(Timestamp(0)),
            block_cap: 0,
            ..Observation::default()
        }
    }

    fn outcome(d: &Decision) -> Option<Outcome> {
        match d {
            Decision::End { outcome, .. } => Some(*outcome),
            _ => None,
        }
    }

    #[test]
    fn continues_and_counts() {
        let d = decide(
            &state("iteration: 4\nmax_iterations: 10\n"),
            &seen("working"),
        );
        assert!(matches!(d, Decision::Continue { next: 5, .. }), "{d:?}");
    }

    #[test]
    fn paused_passes() {
        assert_eq!(
            decide(&state("active: false\n"), &seen("<promise>DONE</promise>")),
            Decision::Pass
        );
    }

    #[test]
    fn promise_beats_the_limit() {
        let s = state("iteration: 3\nmax_iterations: 3\ncompletion_promise: DONE\n");
        assert_eq!(
            outcome(&decide(&s, &seen("<promise>DONE</promise>"))),
            Some(Outcome::Completed)
        );
        assert_eq!(
            outcome(&decide(&s, &seen("no"))),
            Some(Outcome::MaxIterations)
        );
    }

    #[test]
    fn no_promise_configured_means_tags_are_ignored() {
        let s = state("max_iterations: 9\n");
        assert!(matches!(
            decide(&s, &seen("<promise>DONE</promise>")),
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn verification_gate() {
        let s = state("completion_promise: DONE\nverify: \"make test\"\nmax_iterations: 9\n");
        let mut o = seen("<promise>DONE</promise>");
        assert_eq!(
            decide(&s, &o),
            Decision::Verify {
                command: "make test".into()
            }
        );
        o.verification = Some(Verification {
            passed: true,
            status: "exit 0".into(),
            output_tail: String::new(),
        });
        assert_eq!(outcome(&decide(&s, &o)), Some(Outcome::Completed));
        o.verification = Some(Verification {
            passed: false,
            status: "exit 2".into(),
            output_tail: "1 failed".into(),
        });
        match decide(&s, &o) {
            Decision::Continue { notes, .. } => {
                assert!(
                    notes[0].contains("make test")
                        && notes[0].contains("exit 2")
                        && notes[0].contains("1 failed"),
                    "{notes:?}"
                );
            }
            d => panic!("{d:?}"),
        }
        // Without the promise, the gate does not run.
        assert!(matches!(
            decide(&s, &seen("working")),
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn abort_promise() {
        let s = state("completion_promise: DONE\nabort_promise: BLOCKED\n");
        match decide(&s, &seen("I need the API key.\n<promise>BLOCKED</promise>")) {
            Decision::End {
                outcome: Outcome::Aborted,
                detail,
            } => assert!(detail.contains("API key"), "{detail}"),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn time_budget_edges() {
        let s = state("max_duration: 100s\n");
        let at = |secs| Observation {
            now: Some(Timestamp(secs)),
            ..seen("x")
        };
        match decide(&s, &at(79)) {
            Decision::Continue { notes, .. } => assert!(notes.is_empty()),
            d => panic!("{d:?}"),
        }
        match decide(&s, &at(80)) {
            Decision::Continue { notes, .. } => assert!(notes[0].contains("Wrap up"), "{notes:?}"),
            d => panic!("{d:?}"),
        }
        assert!(matches!(decide(&s, &at(99)), Decision::Continue { .. }));
        assert_eq!(outcome(&decide(&s, &at(100))), Some(Outcome::TimeBudget));
    }

    #[test]
    fn token_budget_edges() {
        let s = state("max_tokens: 1000\n");
        let with = |t| Observation {
            tokens_used: Some(t),
            ..seen("x")
        };
        assert!(matches!(decide(&s, &with(999)), Decision::Continue { .. }));
        assert_eq!(
            outcome(&decide(&s, &with(1000))),
            Some(Outcome::TokenBudget)
        );
    }

    #[test]
    fn stuck_after_k_identical_replies() {
        let mut s = state("stuck_after: 3\n");
        for n in 1..=2 {
            match decide(&s, &seen("same  reply")) {
                Decision::Continue { progress, .. } => {
                    assert_eq!(progress.same_reply_count, n);
                    s.progress = progress;
                }
                d => panic!("{d:?}"),
            }
        }
        // Whitespace differences do not make a reply new.
        assert_eq!(
            outcome(&decide(&s, &seen("same reply"))),
            Some(Outcome::Stuck)
        );
        assert!(matches!(
            decide(&s, &seen("another reply")),
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn no_progress_after_k_unchanged_iterations() {
        let mut s = state("no_progress_after: 2\nstuck_after: 0\n");
        let tree = |t: &str| Observation {
            tree_fingerprint: Some(t.into()),
            ..seen("x")
        };
        for expected in [0, 1] {
            match decide(&s, &tree("a")) {
                Decision::Continue { progress, .. } => {
                    assert_eq!(progress.no_progress_count, expected);
                    s.progress = progress;
                }
                d => panic!("{d:?}"),
            }
        }
        assert_eq!(outcome(&decide(&s, &tree("a"))), Some(Outcome::NoProgress));
        assert!(matches!(decide(&s, &tree("b")), Decision::Continue { .. }));
    }

    #[test]
    fn breakers_can_be_switched_off() {
        let mut s = state("stuck_after: 0\n");
        s.progress.same_reply_count = 100;
        s.progress.reply_fingerprint = Some(fingerprint("x"));
        assert!(matches!(decide(&s, &seen("x")), Decision::Continue { .. }));
    }

    #[test]
    fn idle_blocks_end_before_the_cap() {
        let mut s = state("stuck_after: 0\n");
        let idle = Observation {
            ran_tool: Some(false),
            block_cap: 8,
            ..seen("x")
        };
        s.progress.idle_blocks = 4;
        assert!(
            matches!(decide(&s, &idle), Decision::Continue { .. }),
            "5 idle + 2 < 8"
        );
        s.progress.idle_blocks = 5;
        assert_eq!(
            outcome(&decide(&s, &idle)),
            Some(Outcome::Idle),
            "6 idle + 2 >= 8"
        );
        let disabled = Observation {
            block_cap: 0,
            ..idle.clone()
        };
        assert!(matches!(decide(&s, &disabled), Decision::Continue { .. }));
        let busy = Observation {
            ran_tool: Some(true),
            ..idle
        };
        assert!(matches!(
            decide(&s, &busy),
            Decision::Continue {
                progress: Progress { idle_blocks: 0, .. },
                ..
            }
        ));
    }
}
