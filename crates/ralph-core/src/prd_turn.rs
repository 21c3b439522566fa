//! The PRD's side of one stop of a `--prd` loop (the shell around
//! `stories`): read the PRD through `safe_fs`, find the stories that
//! turned to passing since the last stop, run their commands (and the
//! loop's `--verify`) with `verify::run`, and set a refused story's
//! `passes` back to `false`, changing only those bytes. `engine::step`
//! calls it, so the hook and `ralph run` check stories the same way.

use std::path::Path;
use std::time::Duration;

use crate::observation::{StoryRefusal, Verification};
use crate::safe_fs;
use crate::state::PrdLoop;
use crate::stories::{self, PrdError, Story};
use crate::verify;

/// Reads and parses the loop's PRD: once per stop, only for a `--prd` loop.
pub fn read(root: &Path, prd: &PrdLoop) -> Result<Vec<Story>, PrdError> {
    let text = read_text(root, &prd.path)?;
    stories::parse(&prd.path, &text)
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
/// `--verify` result when it ran.
pub fn run_checks(
    root: &Path,
    prd: &PrdLoop,
    turned: &[&Story],
    loop_verify: Option<&str>,
    timeout: Duration,
) -> (Vec<StoryRefusal>, Option<Verification>) {
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
        let verification = verify::run(command, root, timeout);
        if !verification.passed {
            refused.push(StoryRefusal::Failed {
                id: story.id.clone(),
                command: command.to_owned(),
                verification,
            });
        }
    }
    let gate = loop_verify.map(|command| {
        let verification = verify::run(command, root, timeout);
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

/// The story a refusal is about.
pub fn refusal_id(refusal: &StoryRefusal) -> &str {
    match refusal {
        StoryRefusal::Failed { id, .. } | StoryRefusal::Unrecorded { id, .. } => id,
    }
}

/// Sets each refused story's `passes` back to `false` in the PRD as it is
/// now (read again: the checks took time), writes it by atomic replace,
/// and returns the stories as they then stand.
pub fn set_back(root: &Path, file: &str, refused: &[StoryRefusal]) -> Result<Vec<Story>, PrdError> {
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
        Ok(stories) => crate::messages::stories::status(&stories),
        Err(e) => format!("⚠ {}", crate::display::line(&e.to_string())),
    }
}

/// The current story's section for a loop's first prompt (no check runs).
pub fn first_section(root: &Path, prd: &PrdLoop) -> Option<String> {
    let stories = read(root, prd).ok()?;
    Some(crate::messages::stories::section(
        &crate::observation::PrdSeen {
            file: prd.path.clone(),
            stories,
            refused: Vec::new(),
        },
    ))
}
