//! What one turn came to ([`Step`]), and work done with the loop's lock
//! let go ([`unlocked`]): shared by the engine and the optional features
//! that run commands (a story's checks), below both.

use std::path::PathBuf;

use ralph_state::error::LoopFileError;
use ralph_state::fields::state::Progress;
use ralph_state::lifecycle::{Loop, Tell};
use ralph_state::messages;
use ralph_state::storage::store::{self, Project, ProjectLock};

use crate::decide::Outcome;

// One value per turn, returned once: boxing the progress would cost an
// allocation per stop and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The loop is paused; nothing was counted.
    Passed,
    /// Background work will wake the session: this stop went through,
    /// uncounted; `notice` says so.
    Waiting { notice: String },
    /// The loop changed on disk while the verification ran; nothing was written.
    Changed { notice: String },
    /// The loop ended and was moved into the history.
    Ended {
        outcome: Outcome,
        detail: String,
        record: PathBuf,
        notice: String,
        /// The loop's last word, moved into the turn's `Effects` by `engine::step`.
        tell: Option<Tell>,
    },
    /// The loop goes on: `reason` is the prompt with its footer.
    Continued {
        next: u64,
        reason: String,
        status: String,
        /// What refused the promise (or a story's passes) at this stop, if anything.
        refused: messages::Refused,
        /// The guard figures after this turn.
        progress: Progress,
        /// Each bound the user raised since the last continuation, old and new
        /// (`iterations 3 → 23`): told in `reason` and `status` this once.
        raised: Vec<String>,
    },
}

/// Work done with the lock dropped: the lock taken again and the work's
/// result, or the loop changed meanwhile and this stop was let through.
/// Returned once per gate, never stored: boxing would only allocate.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Relocked<T> {
    Same(ProjectLock, T),
    Changed(Step),
}

/// Runs `work` without the lock (a gate or a story's checks may run for
/// minutes, and other ralph processes work meanwhile), takes the lock again
/// and makes sure the loop is still the one judged.
pub(crate) fn unlocked<T>(
    lock: ProjectLock,
    project: &Project,
    live: &Loop,
    what: &str,
    work: impl FnOnce() -> T,
) -> Result<Relocked<T>, LoopFileError> {
    drop(lock);
    let out = work();
    let lock = project.lock()?;
    Ok(match changed_meanwhile(live, what) {
        Some(changed) => Relocked::Changed(changed),
        None => Relocked::Same(lock, out),
    })
}

/// `Step::Changed` when the loop file is no longer the one judged (it was
/// cancelled or advanced while a check ran without the lock).
fn changed_meanwhile(live: &Loop, what: &str) -> Option<Step> {
    (store::read_to_string(&live.file.path).ok().as_deref() != Some(live.text.as_str())).then(|| {
        Step::Changed {
            notice: format!(
                "⚠ ralph `{}`: the loop changed while {} ran (cancelled or advanced elsewhere); this stop was allowed.",
                ralph_fs::display::line(&live.file.name),
                ralph_fs::display::line(what)
            ),
        }
    })
}
