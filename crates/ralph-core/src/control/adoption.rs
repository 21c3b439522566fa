//! `ralph adopt`'s choice: which loop file, not armed on this machine, is
//! the one to adopt (the one named, or the only one), and whether it can be.
//! Showing it, asking and recording it are the CLI's and `commands::adopt`'s.

use crate::control::LoopError;
use crate::display;
use crate::loop_file::lifecycle::Loop;
use crate::loop_file::registry::{Arming, Registry};
use crate::loop_file::scan::{LoopEntry, Scan};
use crate::loop_file::store::Project;

/// What `ralph adopt` found to do.
pub enum Choice {
    /// Every loop here is armed on this machine.
    Nothing,
    /// The loop named is armed on this machine already.
    AlreadyArmed(String),
    /// This loop is not armed here, and why not.
    Candidate { live: Box<Loop>, arming: Arming },
}

/// The loop to adopt: `name`, or the only loop here not armed on this machine.
pub fn choose(
    project: &Project,
    registry: &Registry,
    name: Option<&str>,
) -> Result<Choice, LoopError> {
    let mut entries = Scan::read(project, Some(registry))
        .map_err(LoopError::from)?
        .entries;
    // A file that does not read was not armed here either: it is a candidate,
    // refused below with why.
    let armed = |entry: &LoopEntry| entry.arming() == Some(Arming::Armed);
    let index = match name {
        Some(name) => entries
            .iter()
            .position(|e| e.file().name == name)
            .ok_or_else(|| LoopError::NotHere(name.to_owned()))?,
        None => {
            let unarmed: Vec<usize> = (0..entries.len())
                .filter(|&i| !armed(&entries[i]))
                .collect();
            match unarmed.as_slice() {
                [] => return Ok(Choice::Nothing),
                [only] => *only,
                several => {
                    let names = several
                        .iter()
                        .map(|&i| display::line(&entries[i].file().name).into_owned())
                        .collect();
                    return Err(LoopError::SeveralUnarmed(names));
                }
            }
        }
    };
    match entries.swap_remove(index) {
        LoopEntry::Unreadable { file, why, .. } => Err(LoopError::UnreadableToAdopt {
            path: file.path.display().to_string(),
            why,
            name: file.name,
        }),
        LoopEntry::Armed(live) | LoopEntry::Paused(live) => {
            Ok(Choice::AlreadyArmed(live.file.name))
        }
        LoopEntry::Foreign { live, why } => Ok(Choice::Candidate {
            live: Box::new(live),
            arming: Arming::Unarmed(why),
        }),
    }
}

/// What `ralph adopt` shows of a loop before the user accepts it, one line
/// per value, every value escaped to one line: a newline in a name, a path or
/// a command is `\n`, so it cannot fake a line. `shown_path` is the file's
/// path as the CLI shows it.
pub fn describe(shown_path: &str, live: &Loop, status: &Arming) -> Vec<String> {
    let one = |text: &str| display::line(text).into_owned();
    let state = &live.state;
    let none = || "(none)".to_owned();
    let mut lines = vec![
        format!(
            "Loop `{}` in {} is not armed on this machine: {}.",
            one(&live.file.name),
            one(shown_path),
            status.why_not()
        ),
        "Read what it would do before you adopt it:".to_owned(),
        String::new(),
        format!(
            "  owner:              {}",
            state.session_id.as_deref().map_or_else(
                || "none yet (the first session that stops in this project takes it)".to_owned(),
                one
            )
        ),
        format!("  iteration:          {}", state.iteration_label()),
        format!(
            "  completion promise: {}",
            state.completion_promise.as_deref().map_or_else(none, one)
        ),
        format!(
            "  abort promise:      {}",
            state.abort_promise.as_deref().map_or_else(none, one)
        ),
        format!(
            "  verify:             {}",
            state
                .guards
                .verify
                .as_deref()
                .map_or_else(none, |v| format!(
                    "{}   ← runs as you (sh -c, in the project root) when the promise comes",
                    one(v)
                ))
        ),
    ];
    for (label, globs) in [
        ("protect", &state.paths.protect),
        ("scope", &state.paths.scope),
    ] {
        if !globs.is_empty() {
            lines.push(format!(
                "  {:<20}{}   ← compared with the git tree {}",
                format!("{label}:"),
                one(&globs.join(" ")),
                one(state
                    .paths
                    .armed_tree
                    .as_deref()
                    .unwrap_or("(none recorded)"))
            ));
        }
    }
    if let Some(check) = state.guards.check.as_deref() {
        lines.push(format!(
            "  check:              {}   ← runs as you (sh -c, in the project root) at every stop that goes on",
            one(check)
        ));
    }
    lines.push("  prompt:".to_owned());
    lines.extend(
        state
            .prompt
            .lines()
            .map(|line| format!("  │ {}", one(line))),
    );
    lines.push(String::new());
    lines
}
