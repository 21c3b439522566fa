//! `ralph cancel`, `pause` and `resume` (and their slash commands) on the loops a selection
//! names, with the text each tells the user. The binary parses, calls, and prints what comes
//! back.

use crate::arguments::Targets;
use crate::commands::{self, Cancelled, CommandError};
use ralph_state::scan::{LoopEntry, Scan};
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::Project;
use ralph_state::time::Timestamp;

/// `ralph cancel` (and `/ralph-cancel`) for `session`: the lines to print, then how it went.
/// Cancelling what is already gone is not an error (cancel is idempotent); a loop that could
/// not be ended is, after the lines for those that were.
pub fn cancel(
    project: &Project,
    registry: Option<&Registry>,
    selection: &Targets,
    session: Option<&str>,
    now: Timestamp,
) -> (Vec<String>, Result<(), CommandError>) {
    let ended = commands::cancel(
        project,
        registry,
        selection.name.as_deref(),
        selection.all,
        session,
        now,
    );
    match ended {
        Err(CommandError::NoSuchLoop(name)) => (
            vec![format!("No active loop named `{name}`; nothing to cancel.")],
            Ok(()),
        ),
        Err(e) => (Vec::new(), Err(e)),
        Ok(done) => cancel_report(project, done),
    }
}

/// What a cancel did, told: each loop ended with its record; those that could not be ended
/// as the error.
pub(crate) fn cancel_report(
    project: &Project,
    done: Cancelled,
) -> (Vec<String>, Result<(), CommandError>) {
    let mut lines = Vec::new();
    if done.ended.is_empty() && done.failed.is_empty() {
        lines.push("No active loop to cancel.".to_owned());
    }
    for (name, iteration, record) in done.ended {
        lines.push(format!(
            "⏹ Cancelled loop `{name}` at iteration {iteration}. Record: {}",
            project.shown(&record)
        ));
    }
    if done.failed.is_empty() {
        (lines, Ok(()))
    } else {
        (lines, Err(CommandError::NotCancelled(done.failed)))
    }
}

/// What `ralph pause` / `ralph resume` changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toggled {
    /// The loops paused or resumed.
    pub changed: Vec<String>,
    pub text: Vec<String>,
}

/// Pauses (`active: false`) or resumes the loops `selection` names, for `session` (only a
/// loop armed here is resumed: `commands::set_active`).
pub fn pause_or_resume(
    project: &Project,
    registry: Option<&Registry>,
    selection: &Targets,
    active: bool,
    session: Option<&str>,
    now: Timestamp,
) -> Result<Toggled, CommandError> {
    // `--all` means every loop file, whatever name was given beside it.
    let name = selection.name.as_deref().filter(|_| !selection.all);
    let changed =
        commands::set_active(project, registry, name, selection.all, session, active, now)?;
    let mut text = toggled_text(&changed, active);
    if active && changed.is_empty() {
        text.extend(not_resumed_here(project, registry, selection));
    }
    Ok(Toggled { changed, text })
}

/// The most loop files a resume names one by one as not armed here; past it,
/// one line counts the rest (a checkout may carry thousands).
const MAX_NAMED: usize = 3;

/// The paused loop files a resume left alone because this user did not arm
/// them here, each with the way to take it over.
fn not_resumed_here(
    project: &Project,
    registry: Option<&Registry>,
    selection: &Targets,
) -> Vec<String> {
    let Ok(scan) = Scan::read(project, registry) else {
        return Vec::new();
    };
    let names: Vec<String> = scan
        .entries
        .iter()
        .filter_map(|entry| match entry {
            LoopEntry::Foreign { live, .. }
                if !live.state.active
                    && selection
                        .name
                        .as_deref()
                        .is_none_or(|name| name == live.file.name) =>
            {
                Some(ralph_fs::display::line(&live.file.name).into_owned())
            }
            _ => None,
        })
        .collect();
    let mut lines: Vec<String> = names
        .iter()
        .take(MAX_NAMED)
        .map(|name| {
            format!(
                "`{name}` is not armed on this machine, so it was not resumed: read it and take it over with `ralph adopt --name {name}`."
            )
        })
        .collect();
    if names.len() > MAX_NAMED {
        lines.push(format!(
            "… and {} more {} not armed here (`ralph status` lists them).",
            names.len() - MAX_NAMED,
            ralph_state::plural::noun((names.len() - MAX_NAMED) as u64, "loop file", "loop files")
        ));
    }
    lines
}

/// What pausing or resuming `changed` tells.
pub(crate) fn toggled_text(changed: &[String], active: bool) -> Vec<String> {
    let verb = if active { "Resumed" } else { "Paused" };
    if changed.is_empty() {
        return vec![format!(
            "Nothing to {}: no matching loop is {}.",
            verb.to_lowercase().trim_end_matches('d'),
            if active { "paused" } else { "active" }
        )];
    }
    changed
        .iter()
        .map(|name| format!("{verb} loop `{name}`."))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::project;

    #[test]
    fn a_loop_not_cancelled_is_a_failure() {
        use ralph_fs::error::{Exit as _, ExitClass};
        assert_eq!(
            CommandError::NotCancelled(Vec::new()).exit_class(),
            ExitClass::Failure
        );
    }

    #[test]
    fn a_cancel_tells_what_ended_and_what_could_not() {
        let (_t, p, _r) = project();
        let (lines, outcome) = cancel_report(&p, Cancelled::default());
        assert_eq!(lines, ["No active loop to cancel."]);
        assert!(outcome.is_ok());
        let done = Cancelled {
            ended: vec![("a".into(), 4, p.root.join(".claude/ralph/history/x-a.md"))],
            failed: vec![("b".into(), "unreadable".into())],
        };
        let (lines, outcome) = cancel_report(&p, done);
        assert_eq!(
            lines,
            ["⏹ Cancelled loop `a` at iteration 4. Record: .claude/ralph/history/x-a.md"]
        );
        assert_eq!(
            outcome.unwrap_err().to_string(),
            "could not cancel:\n  `b`: unreadable"
        );
        let named = Targets {
            name: Some("gone".into()),
            all: false,
        };
        let (lines, outcome) = cancel(&p, None, &named, None, Timestamp(0));
        assert_eq!(lines, ["No active loop named `gone`; nothing to cancel."]);
        assert!(outcome.is_ok());
    }

    #[test]
    fn pausing_and_resuming_say_what_changed() {
        assert_eq!(
            toggled_text(&[], false),
            ["Nothing to pause: no matching loop is active."]
        );
        assert_eq!(
            toggled_text(&[], true),
            ["Nothing to resume: no matching loop is paused."]
        );
        assert_eq!(
            toggled_text(&["a".into(), "b".into()], true),
            ["Resumed loop `a`.", "Resumed loop `b`."]
        );
        assert_eq!(toggled_text(&["a".into()], false), ["Paused loop `a`."]);
    }

    #[test]
    fn a_resume_names_the_paused_files_not_armed_here_and_counts_past_three() {
        let (_t, p, r) = project();
        let planted = "---\nactive: false\niteration: 1\nsession_id: \nmax_iterations: 5\n---\n\nA stranger's task.\n";
        for name in ["a", "b", "c", "d", "e"] {
            std::fs::write(p.loop_path(name), planted).unwrap();
        }
        let all = Targets {
            name: None,
            all: true,
        };
        let told = pause_or_resume(&p, Some(&r), &all, true, None, Timestamp(0)).unwrap();
        assert!(told.changed.is_empty());
        let hint = |n: &str| {
            format!(
                "`{n}` is not armed on this machine, so it was not resumed: read it and take it over with `ralph adopt --name {n}`."
            )
        };
        assert_eq!(
            told.text,
            [
                "Nothing to resume: no matching loop is paused.".to_owned(),
                hint("a"),
                hint("b"),
                hint("c"),
                "… and 2 more loop files not armed here (`ralph status` lists them).".to_owned(),
            ]
        );
        std::fs::remove_file(p.loop_path("e")).unwrap();
        let told = pause_or_resume(&p, Some(&r), &all, true, None, Timestamp(0)).unwrap();
        assert_eq!(
            told.text[4],
            "… and 1 more loop file not armed here (`ralph status` lists them)."
        );
        let one = Targets {
            name: Some("d".into()),
            all: false,
        };
        let told = pause_or_resume(&p, Some(&r), &one, true, None, Timestamp(0)).unwrap();
        assert_eq!(told.text[1..], [hint("d")]);
        for name in ["a", "b", "c", "d"] {
            assert_eq!(std::fs::read_to_string(p.loop_path(name)).unwrap(), planted);
        }
    }
}
