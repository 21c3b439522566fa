//! The decisions of `ralph run` (the fresh-context driver) between agent
//! processes: whether the run may go on with its loop, and how an agent's
//! reply becomes a turn of [`engine::step`]. The terminal (spinner, lines,
//! summary, exit code) stays in the binary; loop files are touched only
//! through [`crate::lifecycle`].

use crate::agent::AgentReply;
use crate::decide::Observation;
use crate::engine::{self, Step, StepError, Turn};
use crate::lifecycle::Loop;
use crate::registry::Registry;
use crate::state::LoopState;
use crate::store::{self, Project, StoreError};
use crate::time::Timestamp;
use crate::worktree;

/// Where a run stands with its loop before an iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Someone else drives it now (their id, when the file names one).
    TakenOver(Option<String>),
    /// Paused: the run hands it back and stops.
    Paused,
    /// `--hand-back-after` iterations are done.
    HandBackDue,
    /// The run goes on.
    Go,
}

/// Whether the run that drives as `driver`, having run `done_here` fresh
/// iterations, may run another.
pub fn standing(
    state: &LoopState,
    driver: &str,
    done_here: u64,
    hand_back_after: Option<u64>,
) -> Standing {
    if state.session_id.as_deref() != Some(driver) {
        return Standing::TakenOver(state.session_id.clone());
    }
    if !state.active {
        return Standing::Paused;
    }
    if hand_back_after.is_some_and(|n| done_here >= n) {
        return Standing::HandBackDue;
    }
    Standing::Go
}

#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Step(#[from] StepError),
}

/// Under the lock, if the loop is still as it was read before the agent
/// ran, decides the turn on the agent's reply (the Stop hook's own rules)
/// and writes it. `None`: the loop file changed while the agent ran, and
/// nothing was written.
pub fn judge(
    project: &Project,
    registry: &Registry,
    live: &Loop,
    reply: &AgentReply,
    driver: &str,
) -> Result<Option<Step>, JudgeError> {
    let lock = project.lock()?;
    let current = store::read_to_string(&live.file.path).ok();
    if current.as_deref() != Some(live.text.as_str()) {
        return Ok(None);
    }
    let now = Timestamp::now();
    let turn = Turn {
        seen: observe(project, &live.state, reply, now),
        transcript: None,
        driver: driver.to_owned(),
        claim: None,
    };
    Ok(Some(engine::step(
        project,
        live,
        Some(registry),
        turn,
        now,
        lock,
    )?))
}

/// What the decision needs from a fresh-context iteration: the reply, its
/// tokens and, when the no-progress guard is on, the tree's fingerprint.
fn observe(
    project: &Project,
    state: &LoopState,
    reply: &AgentReply,
    now: Timestamp,
) -> Observation {
    Observation {
        reply: Some(reply.text.clone()),
        now: Some(now),
        tokens_used: reply
            .tokens
            .map(|t| state.progress.tokens_used.saturating_add(t)),
        tree_fingerprint: (state.guards.no_progress_after > 0)
            .then(|| {
                worktree::progress_fingerprint(
                    &project.root,
                    state.progress.tree_fingerprint.as_deref(),
                    None,
                )
            })
            .flatten(),
        ran_tool: None,
        block_cap: 0,
        verification: None,
        ..Observation::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_goes_on_only_while_it_drives_an_active_loop_within_its_share() {
        let text = crate::loops::render(
            &crate::loops::ArmRequest {
                name: "l".into(),
                prompt: "task".into(),
                max_iterations: 5,
                session_id: Some("run:1".into()),
                ..crate::loops::ArmRequest::default()
            },
            "n",
            Timestamp(0),
        );
        let mut state = LoopState::parse(&text).unwrap();
        assert_eq!(standing(&state, "run:1", 0, None), Standing::Go);
        assert_eq!(standing(&state, "run:1", 2, Some(3)), Standing::Go);
        assert_eq!(standing(&state, "run:1", 3, Some(3)), Standing::HandBackDue);
        assert_eq!(
            standing(&state, "run:2", 0, None),
            Standing::TakenOver(Some("run:1".into()))
        );
        state.active = false;
        assert_eq!(standing(&state, "run:1", 0, None), Standing::Paused);
        state.session_id = None;
        assert_eq!(
            standing(&state, "run:1", 0, None),
            Standing::TakenOver(None)
        );
    }
}
