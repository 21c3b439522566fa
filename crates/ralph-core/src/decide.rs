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
    // never tells it; end the loop one block earlier, with an explanation.
    if seen.block_cap > 0 && progress.idle_blocks + 1 >= seen.block_cap {
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
    format!(
        "Your promise `{expected}` was refused: the verification command `{command}` failed ({}). Fix the cause, then give the promise again.\nLast lines of its output:\n{}",
        v.status,
        v.output_tail.trim_end()
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
