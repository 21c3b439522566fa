//! A loop `ralph run` drives, found changed after its agent's turn: was it
//! a ralph command (the user's `ralph cancel`, `pause`, `resume`, another
//! run taking over), or was the file deleted or edited by something else —
//! the agent, or a process it left behind? The second is recorded as
//! `tampered`, never as "cancelled by the user", and the run exits non-zero.
//!
//! How they are told apart: every ralph command that ends a loop forgets its
//! registry record (`lifecycle::end`), and every one that rewrites a bound
//! field records it again (`Loop::keep_armed`). A file gone while its record
//! still matches the state the run read was ended by no ralph command; a
//! file that no longer reads, no longer matches its record, or whose
//! iteration or counters moved (no ralph command but the driver's own turn
//! moves them) was edited by hand.

use std::path::PathBuf;

use crate::commands::CommandError;
use ralph_state::fields::outcome::Outcome;
use ralph_state::fields::state::LoopState;
use ralph_state::lifecycle::{self, Ending, Loop};
use ralph_state::storage::registry::{self, Registry};
use ralph_state::storage::store::{self, Project};
use ralph_state::time::Timestamp;

/// What happened to the loop file, when no ralph command did it: `before`
/// is the state the run read before the turn, `now` the file's text now
/// (`None`: gone, or no longer a regular file), `still_armed` whether a
/// state matches the loop's registry record.
pub fn tampering(
    before: &LoopState,
    now: Option<&str>,
    still_armed: impl Fn(&LoopState) -> bool,
) -> Option<String> {
    let Some(text) = now else {
        return still_armed(before).then(|| {
            "its loop file was deleted (or replaced by something that is not a file) while no ralph command ended the loop".to_owned()
        });
    };
    let Ok(after) = LoopState::parse(text) else {
        return Some("its loop file was edited: it no longer reads as a loop".to_owned());
    };
    if !still_armed(&after) {
        return Some(
            "its loop file was edited: its task or settings are no longer the ones armed"
                .to_owned(),
        );
    }
    let moved = after.iteration != before.iteration
        || after.progress != before.progress
        || after.outcome.is_some()
        || after.nonce != before.nonce;
    moved.then(|| {
        "its loop file was edited: its iteration, counters or outcome changed outside ralph"
            .to_owned()
    })
}

/// After a turn of `ralph run`'s agent, `live` (the loop as the run read it
/// before the turn) no longer matches its file: when no ralph command did
/// that ([`tampering`]), the loop is ended as `tampered` from the text ralph
/// last wrote (the agent's edit is not kept) and its record returned with
/// the sentence that says what happened. `None`: a ralph command changed
/// it, and nothing is written.
pub fn end_if_tampered(
    project: &Project,
    registry: &Registry,
    live: &Loop,
    now: Timestamp,
) -> Result<Option<(String, PathBuf)>, CommandError> {
    let lock = project.lock()?;
    let current = store::read_to_string(&live.file.path).ok();
    if current.as_deref() == Some(live.text.as_str()) {
        return Ok(None);
    }
    let root = registry::canonical_root(project).ok();
    let name = &live.file.name;
    let still_armed = |state: &LoopState| {
        registry::arming(Some(registry), root.as_deref(), name, state) == registry::Arming::Armed
    };
    let Some(what) = tampering(&live.state, current.as_deref(), still_armed) else {
        return Ok(None);
    };
    let why = format!(
        "{what}, during the agent's turn at iteration {}; recorded as tampered, not as cancelled by you",
        live.state.iteration
    );
    let ending = Ending {
        outcome: Outcome::Tampered,
        why: &why,
        now,
    };
    let (record, tell) = lifecycle::end_file(
        &lock,
        project,
        Some(registry),
        &live.file,
        &live.text,
        Some(&live.state),
        ending,
    )?;
    drop(lock);
    if let Some(tell) = tell {
        tell.send(Some(ralph_notify::send));
    }
    Ok(Some((why, record)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(extra: &str) -> LoopState {
        LoopState::parse(&format!(
            "---\nactive: true\niteration: 2\nmax_iterations: 9\n{extra}---\nTask\n"
        ))
        .unwrap()
    }

    #[test]
    fn a_ralph_command_is_told_apart_from_a_hand_edit() {
        let before = state("");
        let armed = |_: &LoopState| true;
        let forgotten = |_: &LoopState| false;
        // Gone, its record forgotten: `ralph cancel` ended it.
        assert_eq!(tampering(&before, None, forgotten), None);
        // Gone, its record still there: no ralph command did it.
        assert!(tampering(&before, None, armed).unwrap().contains("deleted"));
        // Paused: a field no record binds, the iteration as it was.
        let paused = "---\nactive: false\niteration: 2\nmax_iterations: 9\n---\nTask\n";
        assert_eq!(tampering(&before, Some(paused), armed), None);
        // The iteration moved back, or the file no longer reads.
        let rewound = "---\nactive: true\niteration: 1\nmax_iterations: 9\n---\nTask\n";
        assert!(
            tampering(&before, Some(rewound), armed)
                .unwrap()
                .contains("iteration")
        );
        assert!(
            tampering(&before, Some("not a loop"), armed)
                .unwrap()
                .contains("no longer reads")
        );
        // The task or a bound setting edited: the record no longer matches.
        assert!(
            tampering(&before, Some(paused), forgotten)
                .unwrap()
                .contains("settings")
        );
    }
}
