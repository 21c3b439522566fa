//! The moves of `ralph run`'s driver (`run::driver`): whether the run may go
//! on with its loop, taking it over and handing it back, how an agent's reply
//! becomes a turn of [`engine::step`], and the ways a run ends a loop.

use std::path::PathBuf;

use crate::agent::AgentReply;
use ralph_control::{self as control, CommandError};
use ralph_core::decide::engine::{self, Step, Turn};
use ralph_core::decide::{Observation, Outcome};
use ralph_state::error::LoopFileError;
use ralph_state::fields::run_owner::RunOwner;
use ralph_state::fields::state::LoopState;
use ralph_state::lifecycle::{LogEntry, Logged, Loop};
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::{self, LoopFile, Project, StoreError};
use ralph_state::time::Timestamp;

/// Where a run stands with its loop before an iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Standing {
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
pub(crate) fn standing(
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
) -> Result<Option<Step>, RunError> {
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
        log: None,
    };
    let (step, effects) = engine::step(project, live, Some(registry), turn, now, lock)?;
    // The lock is let go: the checkpoint is kept now.
    effects.perform(Some(ralph_notify::send));
    Ok(Some(step))
}

/// Why the driver could not read, take, hand back or end its loop.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    LoopFile(#[from] LoopFileError),
    /// No loop of that name to take over (the binary adds how to arm one).
    #[error("no loop named `{0}` to resume")]
    NoLoopToResume(String),
    /// The loop is not (or no longer) armed on this machine.
    #[error("{path}: {note}; nothing was run")]
    NotArmed { path: String, note: String },
    /// Ctrl-C: no loop of that name left to cancel (`control::cancel`).
    #[error("no loop named `{0}` is active (see `ralph status`)")]
    NoSuchLoop(String),
    /// The loop could not be ended: its file does not read (`control::end_driven`).
    #[error("{0}. It was left as it is; fix or remove it by hand")]
    Untouched(String),
    /// Any other refusal of `control`'s, in its own words. `cancel` with a
    /// name and `end_driven` return none today; this keeps the conversion
    /// total without a front's error inside this one.
    #[error("{0}")]
    Control(String),
    /// Arming flags, no task, and no loop of that name to take over.
    #[error(
        "no loop named `{0}` here and no task given; nothing was armed. Give the task as arguments or on stdin: ralph run --completion-promise DONE \"<task>\""
    )]
    NoLoopNoTask(String),
    /// Arming flags and no task for a loop that exists: it would run with its own settings.
    #[error(
        "the loop `{0}` exists; without a task, `ralph run --name {0}` takes it over with its own settings, so arming flags only go with a new task (use --force to replace it)"
    )]
    FlagsNeedTask(String),
    /// The agent could not run (`why`); `fate` says what became of the loop
    /// (`run::screen` words it).
    #[error("{why}\n{fate}")]
    AgentCouldNotRun { why: String, fate: String },
}

impl ralph_fs::error::Exit for RunError {
    fn exit_class(&self) -> ralph_fs::error::ExitClass {
        match self {
            Self::NoLoopNoTask(_) | Self::FlagsNeedTask(_) => ralph_fs::error::ExitClass::Usage,
            _ => ralph_fs::error::ExitClass::Failure,
        }
    }
}

/// The run ends its loop through `control` (`cancel`, `end_driven`): their
/// refusals become the run's own, in the same words, so no front's error
/// sits inside another's.
impl From<CommandError> for RunError {
    fn from(error: CommandError) -> Self {
        match error {
            CommandError::Store(e) => Self::Store(e),
            CommandError::LoopFile(e) => Self::LoopFile(e),
            CommandError::NoSuchLoop(name) => Self::NoSuchLoop(name),
            CommandError::Untouched(why) => Self::Untouched(why),
            other => Self::Control(other.to_string()),
        }
    }
}

/// Reads the loop under the lock: its text and state, or `None` if it is
/// gone. A loop that is not (or no longer) armed on this machine is refused,
/// at every iteration: its prompt or verify command may have changed.
pub fn read(
    project: &Project,
    registry: &Registry,
    file: &LoopFile,
) -> Result<Option<Loop>, RunError> {
    let lock = project.lock()?;
    let Some(live) = Loop::load(&lock, file.clone())? else {
        return Ok(None);
    };
    require_armed(project, registry, file, &live.state)?;
    Ok(Some(live))
}

/// Refuses a loop that is not armed on this machine, with the way to adopt it.
fn require_armed(
    project: &Project,
    registry: &Registry,
    file: &LoopFile,
    state: &LoopState,
) -> Result<(), RunError> {
    let arming =
        ralph_state::scan::Armings::of_project(Some(registry), project).arming(&file.name, state);
    match control::not_armed_note(&arming, &file.name) {
        None => Ok(()),
        Some(note) => Err(RunError::NotArmed {
            path: ralph_fs::display::line(&file.path.display().to_string()).into_owned(),
            note,
        }),
    }
}

/// A loop this run took over.
#[derive(Debug)]
pub struct TakenOver {
    /// The owner id written (with the session to hand back to, should this run die).
    pub driver: String,
    /// The owner to hand the loop back to when the run ends.
    pub back_to: Option<String>,
    /// The loop's state as it was found.
    pub found: LoopState,
}

/// Takes over a loop armed earlier (by `/ralph-loop` or `ralph start`):
/// its owner becomes this run, so no session's Stop hook drives it meanwhile.
/// Only a loop armed on this machine is taken over.
pub fn take_over(
    project: &Project,
    registry: &Registry,
    name: &str,
    own: &RunOwner,
) -> Result<TakenOver, RunError> {
    let file = LoopFile {
        name: name.to_owned(),
        path: project.loop_path(name),
    };
    let lock = project.lock()?;
    if ralph_fs::safe_fs::kind_at(&file.path).is_none() {
        return Err(RunError::NoLoopToResume(name.to_owned()));
    }
    let Some(live) = Loop::load(&lock, file.clone())? else {
        return Err(RunError::NoLoopToResume(name.to_owned()));
    };
    require_armed(project, registry, &file, &live.state)?;
    let found = live.state.clone();
    let owner = own.taking_over(found.session_id.as_deref());
    let driver = owner.to_string();
    live.set_owner(&lock, &driver)?;
    if !found.active {
        // `ralph run --name` on a paused loop (Ctrl-C, `ralph pause`) is
        // the user's word to go on.
        if let Some(live) = Loop::load(&lock, file.clone())? {
            live.write(&lock, &[("active", "true".to_owned())])?;
            LogEntry::new(Timestamp::now(), Logged::Resume, "resumed by ralph run")
                .iteration(found.iteration)
                .append(project, name);
        }
    }
    // Handed back to the session it came from; a loop taken from a dead run
    // that had no session goes back to that run's id, inert as it was found.
    let back_to = match owner.session {
        Some(session) => Some(session.to_owned()),
        None => found.session_id.clone(),
    };
    Ok(TakenOver {
        driver,
        back_to,
        found,
    })
}

/// Gives the loop back to the session that drove it before (or, if it was
/// armed by this run, to the first session that stops in the project).
pub fn hand_back(
    project: &Project,
    file: &LoopFile,
    driver: &str,
    owner: Option<&str>,
) -> Result<(), RunError> {
    let lock = project.lock()?;
    let Ok(Some(live)) = Loop::load(&lock, file.clone()) else {
        return Ok(());
    };
    live.hand_back(&lock, driver, owner)?;
    Ok(())
}

/// Ctrl-C: the agent is already stopped; pauses the loop (its count,
/// spend and log kept; the interrupted iteration is not counted) and gives
/// it back to the session it came from. Returns the iteration it paused
/// at, or `None` when the loop is gone or no longer this run's.
pub(crate) fn pause_interrupted(
    project: &Project,
    file: &LoopFile,
    driver: &str,
    owner: Option<&str>,
) -> Result<Option<u64>, RunError> {
    let lock = project.lock()?;
    let Ok(Some(live)) = Loop::load(&lock, file.clone()) else {
        return Ok(None);
    };
    if live.state.session_id.as_deref() != Some(driver) {
        return Ok(None);
    }
    live.write(&lock, &[("active", "false".to_owned())])?;
    LogEntry::new(
        Timestamp::now(),
        Logged::Pause,
        "paused: Ctrl-C in ralph run",
    )
    .iteration(live.state.iteration)
    .append(project, &file.name);
    if let Some(live) = Loop::load(&lock, file.clone())? {
        live.hand_back(&lock, driver, owner)?;
    }
    Ok(Some(live.state.iteration))
}

/// Ctrl-C in a fleet's child: the agent is already stopped; records the
/// loop as cancelled. Returns `(name, iteration, record)` of each loop ended.
pub(crate) fn record_interrupted(
    project: &Project,
    registry: &Registry,
    name: &str,
) -> Result<Vec<(String, u64, PathBuf)>, RunError> {
    let cancelled = control::cancel(
        project,
        Some(registry),
        Some(name),
        false,
        None,
        Timestamp::now(),
    )?;
    Ok(cancelled.ended)
}

/// Why a loop ends as denied.
pub(crate) const DENIED_TWICE: &str =
    "Claude Code refused the agent the same tool use twice in a row";

/// The same refusal twice in a row: the agent cannot do its task this way,
/// and every further iteration would be spent on it. Ends the loop as
/// denied; returns its record, or `None` if it is no longer this run's.
pub(crate) fn end_denied(
    project: &Project,
    registry: &Registry,
    name: &str,
    driver: &str,
) -> Result<Option<PathBuf>, RunError> {
    let ended = control::end_driven(
        project,
        Some(registry),
        name,
        driver,
        Outcome::Denied,
        DENIED_TWICE,
        Timestamp::now(),
    )?;
    Ok(ended.map(|(_, record)| record))
}

/// What became of a loop when its agent could not run.
#[derive(Debug)]
pub enum GaveUp {
    /// This run armed it: ended as failed, with its record.
    Ended(PathBuf),
    /// This run armed it, but it is no longer this run's: left as it is.
    NotOurs,
    /// This run armed it and could not end it.
    EndFailed(RunError),
    /// Taken over: handed back as it was (or not, with why).
    HandedBack(Result<(), RunError>),
}

/// The agent could not run. A loop taken over goes back to its owner as it
/// was; a loop this run armed ends as failed (with the first line of `why`),
/// so no unrelated session that stops here later is fed its task.
pub(crate) fn give_up(
    project: &Project,
    registry: &Registry,
    file: &LoopFile,
    driver: &str,
    armed_here: bool,
    previous_owner: Option<&str>,
    why: &str,
) -> GaveUp {
    if !armed_here {
        return GaveUp::HandedBack(hand_back(project, file, driver, previous_owner));
    }
    let ended = control::end_driven(
        project,
        Some(registry),
        &file.name,
        driver,
        Outcome::Failed,
        why.lines().next().unwrap_or(why),
        Timestamp::now(),
    );
    match ended {
        Ok(Some((_, record))) => GaveUp::Ended(record),
        Ok(None) => GaveUp::NotOurs,
        Err(e) => GaveUp::EndFailed(e.into()),
    }
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
        // Read by `engine::step` under the lock (the kept index's tree, which
        // is the checkpoint too; else `git status`).
        tree_pending: (state.guards.no_progress_after.is_set() || state.gate_alone())
            && std::fs::symlink_metadata(project.root.join(".git")).is_ok(),
        ran_tool: None,
        tree_unchanged: false,
        block_cap: 0,
        verification: None,
        cost_usd: reply.cost.map(|c| state.progress.counts.cost_usd.plus(c)),
        ..Observation::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn control_refusals_become_the_runs_own_in_the_same_words() {
        for error in [
            CommandError::NoSuchLoop("l".into()),
            CommandError::Untouched("l.md: bad".into()),
            CommandError::Ambiguous("a, b".into()),
        ] {
            let words = error.to_string();
            let run = RunError::from(error);
            assert!(!matches!(run, RunError::Store(_)), "{run}");
            assert_eq!(run.to_string(), words);
        }
    }

    #[test]
    fn a_run_goes_on_only_while_it_drives_an_active_loop_within_its_share() {
        let text = ralph_control::render(
            &ralph_control::ArmRequest {
                name: "l".into(),
                prompt: "task".into(),
                max_iterations: 5.into(),
                session_id: Some("run:1".into()),
                ..ralph_control::ArmRequest::default()
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

    /// A loop `l` ("task", at most 5 iterations) armed for `session`.
    fn armed(session: Option<&str>) -> (tempfile::TempDir, Project, Registry, LoopFile) {
        armed_with(ralph_control::ArmRequest {
            session_id: session.map(Into::into),
            ..ralph_control::ArmRequest::default()
        })
    }

    /// The loop `l` armed by `request` (its name, prompt and limit filled
    /// in when empty) in a throwaway project and registry.
    pub(crate) fn armed_with(
        mut request: ralph_control::ArmRequest,
    ) -> (tempfile::TempDir, Project, Registry, LoopFile) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("p/.claude")).unwrap();
        let project = Project {
            root: tmp.path().join("p"),
        };
        let registry =
            ralph_state::storage::registry::locate(Some(&tmp.path().join("state")), None).unwrap();
        request.name = "l".into();
        if request.prompt.is_empty() {
            request.prompt = "task".into();
        }
        if !request.max_iterations.is_set() {
            request.max_iterations = 5.into();
        }
        ralph_control::arm(&project, &registry, &request, Timestamp(0)).unwrap();
        let file = LoopFile {
            name: "l".into(),
            path: project.loop_path("l"),
        };
        (tmp, project, registry, file)
    }

    #[test]
    fn a_run_takes_a_loop_over_and_hands_it_back_to_its_session() {
        let (_tmp, project, registry, file) = armed(Some("s1"));
        let own = RunOwner::own();
        let taken = take_over(&project, &registry, "l", &own).unwrap();
        assert_eq!(taken.driver, format!("{own}:s1"));
        assert_eq!(taken.back_to.as_deref(), Some("s1"));
        assert_eq!(taken.found.session_id.as_deref(), Some("s1"));
        let live = read(&project, &registry, &file).unwrap().unwrap();
        assert_eq!(live.state.session_id, Some(format!("{own}:s1")));
        hand_back(&project, &file, &taken.driver, Some("s1")).unwrap();
        let live = read(&project, &registry, &file).unwrap().unwrap();
        assert_eq!(live.state.session_id.as_deref(), Some("s1"));
        assert!(matches!(
            take_over(&project, &registry, "other", &own),
            Err(RunError::NoLoopToResume(name)) if name == "other"
        ));
    }

    #[test]
    fn a_run_that_armed_its_loop_ends_it_when_the_agent_cannot_run() {
        let (_tmp, project, registry, file) = armed(Some("run-1"));
        let gave_up = give_up(
            &project,
            &registry,
            &file,
            "run-1",
            true,
            None,
            "no agent\nmore",
        );
        assert!(matches!(gave_up, GaveUp::Ended(_)), "{gave_up:?}");
        assert!(read(&project, &registry, &file).unwrap().is_none());
        // Gone already: nothing to hand back, and no error.
        let gave_up = give_up(&project, &registry, &file, "run-1", false, None, "no agent");
        assert!(matches!(gave_up, GaveUp::HandedBack(Ok(()))), "{gave_up:?}");
    }
}
