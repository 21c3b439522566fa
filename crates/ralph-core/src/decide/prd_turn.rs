//! The PRD's side of one stop of a `--prd` loop (the shell around
//! `stories`): read the PRD through `safe_fs`, find the stories that
//! turned to passing since the last stop, run their commands (and the
//! loop's `--verify`) with `gate::run`, and set a refused story's
//! `passes` back to `false`, changing only those bytes. `engine::step`
//! calls it, so the hook and `ralph run` check stories the same way.

use std::path::Path;
use std::time::Duration;

use ralph_fs::gate::{self, Verification};
use ralph_fs::safe_fs;
use ralph_state::fields::state::PrdLoop;
use ralph_state::fields::stories::{self, PrdError, PrdSeen, Story, StoryRefusal};

/// Reads and parses the loop's PRD: once per stop, only for a `--prd` loop.
pub fn read(root: &Path, prd: &PrdLoop) -> Result<Vec<Story>, PrdError> {
    let text = read_text(root, &prd.path)?;
    stories::parse(&prd.path, &text)
}

/// The stories of a PRD being armed, and what `ralph prd lint` finds in
/// the same read of it.
pub fn read_and_lint(
    root: &Path,
    prd: &PrdLoop,
) -> Result<(Vec<Story>, Vec<ralph_state::fields::prd_lint::Finding>), PrdError> {
    let text = read_text(root, &prd.path)?;
    let stories = stories::parse(&prd.path, &text)?;
    Ok((
        stories,
        ralph_state::fields::prd_lint::lint(&prd.path, &text),
    ))
}

fn read_text(root: &Path, file: &str) -> Result<String, PrdError> {
    safe_fs::read_text(&root.join(file), safe_fs::SMALL_FILE_CAP).map_err(|source| {
        PrdError::Unreadable {
            file: file.to_owned(),
            source,
        }
    })
}

/// The stories that pass now but were not accepted as passing before
/// (`accepted`: the loop's `prd_passed`).
pub fn turned<'a>(accepted: &[String], stories: &'a [Story]) -> Vec<&'a Story> {
    stories
        .iter()
        .filter(|s| s.passes && !accepted.contains(&s.id))
        .collect()
}

/// Runs each turned story's own command (only the one recorded at arming)
/// and, once, the loop's `--verify`. Returns the stories refused and the
/// `--verify` result when it ran. All of them share one `timeout`, so a
/// stop never outlasts the hook's own limit however many stories turned;
/// a check left without time counts as failed (the story is checked again
/// when the agent marks it once more). Each runs confined as the loop's
/// gate is (`confinement`).
pub(crate) fn run_checks(
    root: &Path,
    prd: &PrdLoop,
    turned: &[&Story],
    loop_verify: Option<&str>,
    (timeout, confinement): (Duration, &ralph_fs::gate_jail::GateConfinement),
) -> (Vec<StoryRefusal>, Option<Verification>) {
    let started = std::time::Instant::now();
    let run = |command: &str| match timeout.checked_sub(started.elapsed()) {
        Some(left) if !left.is_zero() => gate::run(command, root, left, confinement),
        _ => Verification {
            passed: false,
            status: format!(
                "not run: this stop's checks used up their {}",
                ralph_state::time::format_duration(timeout.as_secs())
            ),
            ..Verification::default()
        },
    };
    let mut refused = Vec::new();
    for story in turned {
        let Some(command) = story.verify.as_deref() else {
            continue;
        };
        if !stories::command_recorded(&prd.commands, &story.id, command) {
            refused.push(StoryRefusal::Unrecorded {
                id: story.id.clone(),
                command: command.to_owned(),
            });
            continue;
        }
        let verification = run(command);
        if !verification.passed {
            refused.push(StoryRefusal::Failed {
                id: story.id.clone(),
                command: command.to_owned(),
                verification,
            });
        }
    }
    let gate = loop_verify.map(|command| {
        let verification = run(command);
        if !verification.passed {
            for story in turned {
                if !refused.iter().any(|r| refusal_id(r) == story.id) {
                    refused.push(StoryRefusal::Failed {
                        id: story.id.clone(),
                        command: command.to_owned(),
                        verification: verification.clone(),
                    });
                }
            }
        }
        verification
    });
    (refused, gate)
}

/// Every turned story refused with `verification` (the gate's place could
/// not be prepared, so no check ran), and the loop's `--verify` with it.
pub(crate) fn none_run(
    turned: &[&Story],
    loop_verify: Option<&str>,
    verification: &Verification,
) -> (Vec<StoryRefusal>, Option<Verification>) {
    let refused = turned
        .iter()
        .filter_map(|story| {
            let command = story.verify.as_deref().or(loop_verify)?;
            Some(StoryRefusal::Failed {
                id: story.id.clone(),
                command: command.to_owned(),
                verification: verification.clone(),
            })
        })
        .collect();
    (refused, loop_verify.map(|_| verification.clone()))
}

/// Whether any check would run for these stories.
pub(crate) fn any_check(turned: &[&Story], loop_verify: Option<&str>) -> bool {
    loop_verify.is_some() || turned.iter().any(|s| s.verify.is_some())
}

/// `--protect`/`--scope` at a stop where stories turned to passing: while
/// a protected path differs or a change is outside the scope (`violations`,
/// from `decide::path_violations_but`), each of them is refused, as a failed
/// check named `--protect`/`--scope` whose status says which paths; `None`
/// when nothing turned or nothing is wrong.
pub(crate) fn paths_refusal(
    violations: Option<(Vec<String>, Vec<String>)>,
    turned: &[&Story],
) -> Option<Vec<StoryRefusal>> {
    let (protected, outside) = violations?;
    if turned.is_empty() || (protected.is_empty() && outside.is_empty()) {
        return None;
    }
    let mut why = Vec::new();
    if !protected.is_empty() {
        why.push(format!(
            "protected paths differ from the work tree at arming: {}",
            crate::decide::path_words::listed(&protected)
        ));
    }
    if !outside.is_empty() {
        why.push(format!(
            "changed paths outside the scope: {}",
            crate::decide::path_words::listed(&outside)
        ));
    }
    let verification = Verification {
        passed: false,
        status: why.join("; "),
        ..Verification::default()
    };
    Some(
        turned
            .iter()
            .map(|story| StoryRefusal::Failed {
                id: story.id.clone(),
                command: crate::decide::PATHS_CHECK.to_owned(),
                verification: verification.clone(),
            })
            .collect(),
    )
}

/// The PRD's criteria at a stop where stories turned to passing: while a
/// story's title, description or acceptance criteria differ from those
/// recorded at arming (or a story was added or removed), each story that
/// turned is refused, as a failed check named [`crate::decide::CRITERIA_CHECK`]
/// whose status names the changed stories; `None` when nothing turned,
/// nothing changed, or the loop predates `prd_criteria`.
pub(crate) fn criteria_refusal(
    prd: &PrdLoop,
    stories: &[Story],
    turned: &[&Story],
) -> Option<Vec<StoryRefusal>> {
    let recorded = prd.criteria.as_deref()?;
    let changed = stories::changed_criteria(recorded, stories);
    if turned.is_empty() || changed.is_empty() {
        return None;
    }
    let verification = Verification {
        passed: false,
        status: format!(
            "stories changed since arming: {}",
            crate::decide::path_words::listed(&changed)
        ),
        ..Verification::default()
    };
    Some(
        turned
            .iter()
            .map(|story| StoryRefusal::Failed {
                id: story.id.clone(),
                command: crate::decide::CRITERIA_CHECK.to_owned(),
                verification: verification.clone(),
            })
            .collect(),
    )
}

/// The story a refusal is about.
/// The turned stories whose own command ran and passed: each with a
/// command that was not refused.
pub(crate) fn passed_checks(turned: &[&Story], refused: &[StoryRefusal]) -> Vec<String> {
    turned
        .iter()
        .filter(|s| s.verify.is_some() && !refused.iter().any(|r| refusal_id(r) == s.id))
        .map(|s| s.id.clone())
        .collect()
}

pub(crate) fn refusal_id(refusal: &StoryRefusal) -> &str {
    match refusal {
        StoryRefusal::Failed { id, .. } | StoryRefusal::Unrecorded { id, .. } => id,
    }
}

/// Sets each refused story's `passes` back to `false` in the PRD as it is
/// now (read again: the checks took time), writes it by atomic replace,
/// and returns the stories as they then stand.
pub(crate) fn set_back(
    root: &Path,
    file: &str,
    refused: &[StoryRefusal],
) -> Result<Vec<Story>, PrdError> {
    let mut text = read_text(root, file)?;
    for refusal in refused {
        text = stories::set_passes(file, &text, refusal_id(refusal), false)?;
    }
    safe_fs::replace(&root.join(file), text.as_bytes()).map_err(|source| PrdError::Unreadable {
        file: file.to_owned(),
        source,
    })?;
    stories::parse(file, &text)
}

/// The `prd_passed` value after this stop: the stories that pass now.
pub fn passed_field(stories: &[Story]) -> String {
    stories
        .iter()
        .filter(|s| s.passes)
        .map(|s| s.id.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `story US-002 · 1 of 3 pass` for `ralph status` and the status line
/// (read without the lock, like them); why not, when the PRD is unusable.
pub fn status_of(root: &Path, prd: &PrdLoop) -> String {
    match read(root, prd) {
        Ok(stories) => ralph_state::messages::stories::status(&stories),
        Err(e) => format!("⚠ {}", ralph_fs::display::line(&e.to_string())),
    }
}

/// The current story's section for a loop's first prompt (no check runs).
pub fn first_section(root: &Path, prd: &PrdLoop) -> Option<String> {
    let stories = read(root, prd).ok()?;
    Some(ralph_state::messages::stories::section(&PrdSeen {
        file: prd.path.clone(),
        stories,
        refused: Vec::new(),
        checked: Vec::new(),
        changed: Vec::new(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_fs::gate_jail::GateConfinement;

    fn prd_of(stories: &[Story]) -> PrdLoop {
        PrdLoop {
            path: "p.json".into(),
            commands: stories::record_commands(stories),
            criteria: Some(stories::record_criteria(stories)),
        }
    }

    // `sleep` is a Unix command: under Windows' `cmd` the check fails at once.
    #[cfg(unix)]
    #[test]
    fn the_checks_of_one_stop_share_one_time_limit() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"{"userStories": [
            {"id": "A", "passes": true, "verify": "sleep 600"},
            {"id": "B", "passes": true, "verify": "true"}]}"#;
        let all = stories::parse("p.json", text).unwrap();
        let prd = prd_of(&all);
        let turned = turned(&[], &all);
        let started = std::time::Instant::now();
        let (refused, gate) = run_checks(
            dir.path(),
            &prd,
            &turned,
            None,
            (Duration::from_secs(1), &GateConfinement::off()),
        );
        assert!(
            // Far below the check's 600 s: stopped at its 1 s limit (a hang guard).
            started.elapsed() < Duration::from_secs(120),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(gate, None);
        let why: Vec<(&str, String)> = refused
            .iter()
            .map(|r| match r {
                StoryRefusal::Failed {
                    id, verification, ..
                } => (id.as_str(), verification.status.clone()),
                StoryRefusal::Unrecorded { id, .. } => (id.as_str(), "unrecorded".into()),
            })
            .collect();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].1.contains("timed out"), "{why:?}");
        assert!(why[1].1.starts_with("not run"), "{why:?}");
    }

    #[test]
    fn a_story_turned_while_criteria_changed_is_refused_naming_the_changed_story() {
        let armed = stories::parse(
            "p.json",
            r#"{"userStories": [
            {"id": "A", "title": "a", "acceptanceCriteria": ["x > 1"]},
            {"id": "B", "title": "b", "acceptanceCriteria": ["y"]}]}"#,
        )
        .unwrap();
        let prd = prd_of(&armed);
        let weakened = stories::parse(
            "p.json",
            r#"{"userStories": [
            {"id": "A", "title": "a", "acceptanceCriteria": ["x > 0"], "passes": true},
            {"id": "B", "title": "b", "acceptanceCriteria": ["y"], "passes": true}]}"#,
        )
        .unwrap();
        let both = turned(&[], &weakened);
        let refused = criteria_refusal(&prd, &weakened, &both).unwrap();
        assert_eq!(refused.len(), 2, "every story that turned is refused");
        for (refusal, id) in refused.iter().zip(["A", "B"]) {
            let StoryRefusal::Failed {
                id: refused_id,
                command,
                verification,
            } = refusal
            else {
                panic!("{refusal:?}");
            };
            assert_eq!(
                (refused_id.as_str(), command.as_str()),
                (id, crate::decide::CRITERIA_CHECK)
            );
            assert_eq!(verification.status, "stories changed since arming: A");
        }
        // Only `passes` changed: accepted. A story removed: refused, named.
        let mut honest = armed.clone();
        honest[0].passes = true;
        assert_eq!(criteria_refusal(&prd, &honest, &turned(&[], &honest)), None);
        let fewer = &honest[..1];
        let refused = criteria_refusal(&prd, fewer, &turned(&[], fewer)).unwrap();
        assert!(
            matches!(&refused[..], [StoryRefusal::Failed { verification, .. }]
                if verification.status == "stories changed since arming: B"),
            "{refused:?}"
        );
        // A loop file from before `prd_criteria`: no check.
        let old = PrdLoop {
            criteria: None,
            ..prd
        };
        assert_eq!(criteria_refusal(&old, &weakened, &both), None);
    }

    #[test]
    fn only_stories_that_turned_are_checked_and_only_recorded_commands_run() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"{"userStories": [
            {"id": "A", "passes": true, "verify": "touch a-ran"},
            {"id": "B", "passes": true, "verify": "touch b-ran"},
            {"id": "C", "passes": false, "verify": "touch c-ran"}]}"#;
        let all = stories::parse("p.json", text).unwrap();
        let mut prd = prd_of(&all);
        prd.commands = stories::record_commands(&all[1..]);
        let turned = turned(&["B".to_owned()], &all);
        assert_eq!(turned.len(), 1);
        let (refused, _) = run_checks(
            dir.path(),
            &prd,
            &turned,
            None,
            (Duration::from_secs(30), &GateConfinement::off()),
        );
        assert!(matches!(&refused[..], [StoryRefusal::Unrecorded { id, .. }] if id == "A"));
        for ran in ["a-ran", "b-ran", "c-ran"] {
            assert!(!dir.path().join(ran).exists(), "{ran}");
        }
    }
}
