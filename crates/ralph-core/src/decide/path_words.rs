//! What `--protect` and `--scope` say: to the agent under the prompt, to
//! the user beside the status line, and when they end a loop.

use ralph_fs::display::line;

/// Stands for the paths when git could not compare them.
pub(crate) const UNKNOWN_PATH: &str = "(the work tree could not be compared)";

/// The agent's note when git could not compare the work tree.
pub(crate) const UNKNOWN: &str = "ralph could not compare the work tree with the tree recorded when the loop was armed (git failed, timed out, or the tree object is gone), so the loop cannot complete until it can.";

/// The user's notice when git could not compare the work tree.
pub(crate) fn unknown_notice() -> String {
    format!("⚠ {UNKNOWN}")
}

/// At most ten paths, then how many more, on one line.
pub fn listed(paths: &[String]) -> String {
    let mut shown: Vec<String> = paths
        .iter()
        .take(10)
        .map(|p| line(p).into_owned())
        .collect();
    let more = paths.len().saturating_sub(shown.len());
    if more > 0 {
        shown.push(format!("and {more} more"));
    }
    shown.join(", ")
}

/// The agent's note at every continuation while a protected path differs.
pub(crate) fn protected(paths: &[String], tree: &str) -> String {
    format!(
        "Protected paths differ from the work tree when the loop was armed: {}. You must not change them. Put them back as they were (`git restore --source={tree} --worktree -- PATH` restores a changed or deleted file; delete a file that is new); while one differs, the loop cannot complete.",
        listed(paths)
    )
}

/// The user's notice at every continuation while a protected path differs.
pub(crate) fn protected_notice(paths: &[String]) -> String {
    format!(
        "⚠ protected paths changed since the loop was armed: {}; the agent is asked to put them back.",
        listed(paths)
    )
}

/// The agent's note when its claim of done is refused.
pub(crate) fn refused(protected: &[String], outside: &[String], scope: &[String]) -> String {
    let mut why = Vec::new();
    if !protected.is_empty() {
        why.push(format!("protected paths differ ({})", listed(protected)));
    }
    if !outside.is_empty() {
        why.push(format!(
            "changed paths are outside the scope {} ({}); undo those changes",
            line(&scope.join(", ")),
            listed(outside)
        ));
    }
    format!(
        "Your claim that the task is done was refused: {}. Each refusal counts toward ending the loop unfinished.",
        why.join("; ")
    )
}

/// The ending's detail when the refusals end the loop.
pub(crate) fn ended(count: u64, protected: &[String], outside: &[String]) -> String {
    let mut why = Vec::new();
    if !protected.is_empty() {
        why.push(format!(
            "protected paths differed from the work tree at arming ({})",
            listed(protected)
        ));
    }
    if !outside.is_empty() {
        why.push(format!(
            "changed paths were outside the scope ({})",
            listed(outside)
        ));
    }
    format!(
        "a claim of done was refused {} {BROKEN} (--max-verify-failures, or 3 with --protect/--scope when it is off); at the last, {}",
        ralph_state::plural::times(count),
        why.join(" and ")
    )
}

// What an ending by `--protect`/`--scope` says of itself.
use ralph_state::handover::PATH_RULES_BROKEN as BROKEN;

/// The user's notice when a claim of done was refused by `--protect`/`--scope`:
/// the refusal first, then what broke (a scope breach included).
pub(crate) fn refused_notice(
    what: &str,
    protected: &[String],
    outside: &[String],
    scope: &[String],
) -> String {
    let mut why = Vec::new();
    if !protected.is_empty() {
        why.push(format!("protected paths changed ({})", listed(protected)));
    }
    if !outside.is_empty() {
        why.push(format!(
            "paths changed outside the scope {} ({})",
            line(&scope.join(", ")),
            listed(outside)
        ));
    }
    format!(
        "⚠ {what} refused by --protect/--scope: {}; the agent is asked to undo that.",
        why.join("; ")
    )
}
