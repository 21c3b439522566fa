//! The hand-over a breaker leaves beside a loop's history record
//! (`<record>.handover.md`): what was tried, the failures with their
//! fingerprint and counts, the last checkpoint where the check passed, and
//! the next step, for the next agent or person. Worded here from the loop's
//! state and its decision log (pure); `decide/engine.rs` writes it.

use crate::fields::guards::Tripped;
use crate::fields::state::LoopState;

/// The hand-over's name beside a record `<stem>.md`: `<stem>.handover.md`.
pub const SUFFIX: &str = ".handover.md";

/// Whether a history entry is a hand-over (not a loop's record).
pub fn is_handover(path: &std::path::Path) -> bool {
    path.to_string_lossy().ends_with(SUFFIX)
}

/// What an ending by `--protect`/`--scope` says of itself (in its detail),
/// so the hand-over can tell it from the `--verify` gate's.
pub const PATH_RULES_BROKEN: &str = "while --protect/--scope was broken";

/// How many of the last replies the hand-over quotes.
const REPLIES_SHOWN: usize = 5;

/// Whether this ending leaves a hand-over: a breaker (not a budget, the
/// user's own bound).
pub fn wanted(tripped: Tripped) -> bool {
    !matches!(
        tripped,
        Tripped::TimeBudget | Tripped::TokenBudget | Tripped::CostBudget
    )
}

/// What the hand-over is made of.
pub struct HandoverFacts<'a> {
    pub name: &'a str,
    pub state: &'a LoopState,
    pub tripped: Tripped,
    pub detail: &'a str,
    /// The decision log's entries, oldest first.
    pub log: &'a [serde_json::Value],
    /// The last iteration whose check passed, with a checkpoint kept.
    pub last_green: Option<u64>,
    /// Whether the loop kept checkpoints at all (a git project).
    pub checkpoints: bool,
}

/// The hand-over, as Markdown; every value from the loop escaped.
pub fn render(f: &HandoverFacts<'_>) -> String {
    let line = |s: &str| ralph_fs::display::line(s).into_owned();
    let name = line(f.name);
    let state = f.state;
    let counts = &state.progress.counts;
    let mut out = vec![
        format!("# Hand-over: loop `{name}`"),
        String::new(),
        format!(
            "It ended as {} at iteration {}: {}",
            f.tripped.as_str(),
            state.iteration,
            line(f.detail)
        ),
        String::new(),
        "## What was tried".to_owned(),
        String::new(),
        format!(
            "- The task: {}",
            line(
                state
                    .prompt
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
            )
        ),
        format!(
            "- {}; spent {}; {}.",
            crate::plural::iterations(state.iteration),
            counts.cost_usd.dollars(),
            crate::plural::count(state.progress.tokens_used, "token", "tokens")
        ),
    ];
    let replies: Vec<String> = f
        .log
        .iter()
        .filter_map(|e| {
            let excerpt = e["reply_excerpt"].as_str().filter(|r| !r.is_empty())?;
            Some(format!(
                "  - iteration {}: {}",
                e["iteration"].as_u64().unwrap_or(0),
                line(excerpt)
            ))
        })
        .collect();
    if !replies.is_empty() {
        out.push("- The last replies (newest last):".to_owned());
        out.extend(
            replies[replies.len().saturating_sub(REPLIES_SHOWN)..]
                .iter()
                .cloned(),
        );
    }
    out.extend([String::new(), "## Failures".to_owned(), String::new()]);
    out.extend(failures(f));
    out.extend([
        String::new(),
        "## Last green checkpoint".to_owned(),
        String::new(),
    ]);
    out.push(match (f.last_green, f.checkpoints) {
        (Some(n), _) => format!(
            "Iteration {n}: `ralph rollback --to {n} --name {name}` puts its work tree back (the tree it replaces is kept)."
        ),
        (None, true) if state.guards.check.is_some() => {
            "None: the check never passed at a kept checkpoint.".to_owned()
        }
        (None, true) => "None: the loop has no --check, so no checkpoint is known green.".to_owned(),
        (None, false) => "None: checkpoints are kept only in a git project.".to_owned(),
    });
    out.extend([String::new(), "## Next step".to_owned(), String::new()]);
    out.push(if broke_path_rules(f) {
        path_rules_step(state)
    } else {
        next_step(f.tripped).to_owned()
    });
    out.push(String::new());
    out.join("\n")
}

fn failures(f: &HandoverFacts<'_>) -> Vec<String> {
    let counts = &f.state.progress.counts;
    let guards = &f.state.guards;
    let mut out = Vec::new();
    for (label, command) in [("check", &guards.check), ("gate", &guards.verify)] {
        if let Some(command) = command {
            out.push(format!(
                "- The {label}: `{}`",
                ralph_fs::display::line(command)
            ));
        }
    }
    if let Some(last) = f.log.iter().rev().find_map(|e| {
        let c = if e["check"].is_object() {
            &e["check"]
        } else {
            &e["verification"]
        };
        c["status"]
            .as_str()
            .map(|s| (s.to_owned(), c["failures"].as_u64()))
    }) {
        let count = last.1.map_or(String::new(), |n| format!(", {n} failing"));
        out.push(format!(
            "- Last result: {}{count}.",
            ralph_fs::display::line(&last.0)
        ));
    }
    if let Some(fp) = &counts.failure_fingerprint {
        out.push(format!(
            "- The same failure {} in a row, fingerprint `{}`.",
            crate::plural::times(counts.same_failures),
            ralph_fs::display::line(fp)
        ));
    }
    if let Some(trend) = &counts.failure_trend {
        out.push(format!(
            "- Failure counts, oldest first: {}.",
            ralph_fs::display::line(trend)
        ));
    }
    // A refusal that ended the loop is told by the first line (its turn's
    // count is not in the state read here).
    if counts.verify_failures > 0 && f.tripped != Tripped::VerifyFailures {
        out.push(format!(
            "- A claim of done was refused {} before the last turn.",
            crate::plural::times(counts.verify_failures),
        ));
    }
    if out.is_empty() {
        out.push("- No check or gate ran.".to_owned());
    }
    out
}

/// Whether `--protect`/`--scope` ended the loop (not the `--verify` gate).
fn broke_path_rules(f: &HandoverFacts<'_>) -> bool {
    f.tripped == Tripped::VerifyFailures && f.detail.contains(PATH_RULES_BROKEN)
}

/// The one thing to do when `--protect`/`--scope` ended the loop.
fn path_rules_step(state: &LoopState) -> String {
    let tree = state.paths.armed_tree.as_deref().unwrap_or("HEAD");
    format!(
        "Put the protected paths named above back as they were at arming (`git restore --source={} --worktree -- PATH`; delete a protected file that is new) and undo the changes outside the scope, then arm the loop again. No check or gate is at fault.",
        ralph_fs::display::line(tree)
    )
}

fn next_step(tripped: Tripped) -> &'static str {
    match tripped {
        Tripped::Stuck => {
            "The agent gave the same reply again and again: read the last replies above, then change the task (a smaller step, the missing fact) before arming a new loop."
        }
        Tripped::NoProgress => {
            "Nothing in the work tree changed for several turns: the agent may be waiting for something it cannot do (a permission, a tool, a decision). Give it that, or do the step by hand."
        }
        Tripped::VerifyFailures | Tripped::SameFailure | Tripped::Stalled => {
            "Start from the failure above: run the check by hand, read its first error, and fix that or narrow the task to it. To start again from the last tree where the check passed, roll back first (see above)."
        }
        Tripped::TimeBudget | Tripped::TokenBudget | Tripped::CostBudget => {
            "The budget ran out: `ralph resume --add-iterations/--add-cost/--add-time/--add-tokens` goes on with the same count and spend."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_over_says_what_was_tried_the_failure_the_green_checkpoint_and_what_next() {
        let text = "---\nactive: true\niteration: 4\nsession_id: s\nmax_iterations: 9\ncompletion_promise: null\ncheck: \"cargo test\"\nsame_failures: 3\nfailure_fingerprint: \"ab12\"\nfailure_trend: \"5 4 4 4\"\nstarted_at: \"2026-11-30T00:00:00Z\"\n---\n\nFix the parser\u{1b}[2J\n";
        let state = LoopState::parse(text).unwrap();
        let log = vec![
            serde_json::json!({"iteration": 3, "reply_excerpt": "tried the lexer", "check": {"passed": false, "status": "exit 101", "failures": 4}}),
            serde_json::json!({"iteration": 4, "reply_excerpt": "tried again"}),
        ];
        let out = render(&HandoverFacts {
            name: "fix",
            state: &state,
            tripped: Tripped::SameFailure,
            detail: "the same failure 3 times",
            log: &log,
            last_green: Some(2),
            checkpoints: true,
        });
        for want in [
            "It ended as same_failure at iteration 4",
            "- The task: Fix the parser\\x1b[2J",
            "  - iteration 3: tried the lexer",
            "- The check: `cargo test`",
            "- Last result: exit 101, 4 failing.",
            "fingerprint `ab12`",
            "oldest first: 5 4 4 4.",
            "`ralph rollback --to 2 --name fix`",
            "run the check by hand",
        ] {
            assert!(out.contains(want), "{want}\n{out}");
        }
        assert!(!out.contains('\u{1b}'));
        assert!(out.contains("- 4 iterations; spent"), "{out}");
    }

    #[test]
    fn a_hand_over_after_one_iteration_says_one_iteration() {
        let text = "---\nactive: true\niteration: 1\nsession_id: s\nmax_iterations: 9\ncompletion_promise: null\nstarted_at: \"2026-11-30T00:00:00Z\"\n---\n\nFix it\n";
        let state = LoopState::parse(text).unwrap();
        let out = render(&HandoverFacts {
            name: "fix",
            state: &state,
            tripped: Tripped::SameFailure,
            detail: "the same failure once",
            log: &[],
            last_green: None,
            checkpoints: false,
        });
        assert!(out.contains("- 1 iteration; spent"), "{out}");
    }
}
