//! The optional features of a turn, behind one seam: `--prd` stories,
//! `--protect`/`--scope`, checkpoints, receipts, the breaker's hand-over and
//! pricing. Which of them a loop has is read once per turn ([`Features`]);
//! `engine::step` calls each through [`Extras`], and a call for a feature the
//! loop does not have returns at once: it reads no file and starts no
//! process. A plain loop's stop (no `--prd`, `--protect`, `--scope`,
//! `--verify` or dollar budget, not in a git project) walks none of them.
//!
//! One file per feature beside this one; the engine names none of them
//! (tidy: `the_engine_reaches_the_optional_features_only_through_their_seam`).

mod checkpoints;
mod handover;
mod paths;
mod receipt;
mod stories;

use crate::decide::Observation;
use crate::decide::stepped::{Relocked, Step};
use ralph_state::error::LoopFileError;
use ralph_state::fields::outcome::Outcome;
use ralph_state::fields::state::LoopState;
use ralph_state::lifecycle::{LogEntry, Loop};
use ralph_state::storage::checkpoints::Keep;
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::{Project, ProjectLock};
use ralph_state::time::Timestamp;

pub(super) use stories::story_verdicts;

/// Which optional features a loop has at this stop. Built once per turn
/// from the loop's state (and, for checkpoints, whether its project can
/// keep them); every other answer of the seam follows from it.
// One switch per feature, read as a set: a state machine would hide that
// each is independent of the others.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Features {
    /// `--prd`: the stories file is read at each stop of an active loop.
    stories: bool,
    /// `--protect`/`--scope` (or a gate's default protection): the paths
    /// changed since arming are compared at each stop of an active loop.
    paths: bool,
    /// A git project, a per-user folder and an arming: each counted stop
    /// keeps a checkpoint, and a breaker's ending names the last green one.
    checkpoints: bool,
    /// `--verify`: a completion through a passing gate leaves a receipt.
    receipt: bool,
    /// A dollar budget: the Stop hook prices the turn's tokens.
    pricing: bool,
}

impl Features {
    /// What the loop's own settings switch on; checkpoints when `checkpoints`
    /// (the project can keep them: see [`Features::here`]).
    pub(crate) fn of(state: &LoopState, checkpoints: bool) -> Self {
        Self {
            stories: state.active && state.prd.is_some(),
            paths: state.active && state.paths.any(),
            checkpoints,
            receipt: state.guards.verify.is_some(),
            pricing: Self::prices(state),
        }
    }

    /// Whether the Stop hook prices the turn's tokens: a dollar budget is
    /// armed. Asked by the hook's observation, before the turn (`ralph run`
    /// takes the agent's own reported cost instead), by this one rule.
    pub(crate) fn prices(state: &LoopState) -> bool {
        state.guards.max_cost_usd.is_some()
    }

    /// The features of `live` in `project`: checkpoints need a git project
    /// (one look at its `.git`), the per-user folder and the arming's nonce.
    fn here(project: &Project, live: &Loop, registry: Option<&Registry>) -> Self {
        let state = &live.state;
        let can_keep = registry.is_some()
            && state.nonce.is_some()
            && ralph_fs::checkpoint::in_repository(&project.root);
        Self::of(state, can_keep)
    }
}

/// The seam `engine::step` calls: the loop's [`Features`] at this stop,
/// with what each feature needs to act.
pub(super) struct Extras<'a> {
    on: Features,
    project: &'a Project,
    live: &'a Loop,
    registry: Option<&'a Registry>,
}

impl<'a> Extras<'a> {
    /// Reads which features the loop has, once for the turn.
    pub(super) fn of(project: &'a Project, live: &'a Loop, registry: Option<&'a Registry>) -> Self {
        Self {
            on: Features::here(project, live, registry),
            project,
            live,
            registry,
        }
    }

    /// The turn's project, loop and per-user folder, for the engine's own work.
    pub(super) fn turn(&self) -> (&'a Project, &'a Loop, Option<&'a Registry>) {
        (self.project, self.live, self.registry)
    }

    /// What is observed under the lock before the decision: the work tree
    /// when the no-progress fingerprint waits for it (a guard's, not a
    /// feature's: one `git status`; staged into the loop's kept index
    /// instead when it keeps checkpoints, and that tree, this stop's
    /// checkpoint, is returned), and the paths changed since arming (both
    /// at one staging when the loop keeps checkpoints and compares paths).
    pub(super) fn observe(&self, seen: &mut Observation) -> Option<String> {
        if self.on.paths
            && let Some(staged) = checkpoints::read_tree_and_paths(self, seen)
        {
            return staged;
        }
        let staged = checkpoints::read_tree(self, seen);
        if self.on.paths {
            paths::observe(self.project, self.live, self.registry, seen);
        }
        staged
    }

    /// A `--prd` loop's stories at this stop (their commands run without
    /// the lock); any other loop's observation comes back as it was.
    pub(super) fn stories(
        &self,
        seen: Observation,
        lock: ProjectLock,
    ) -> Result<Relocked<Observation>, LoopFileError> {
        if !self.on.stories {
            return Ok(Relocked::Same(lock, seen));
        }
        stories::at_stop(self, seen, lock)
    }

    /// What an ending adds, read before the log moves into the history: a
    /// breaker's or a budget's last green checkpoint, a breaker's hand-over.
    pub(super) fn ending<'s>(
        &'s self,
        seen: &'s Observation,
        outcome: Outcome,
        entry: &LogEntry,
    ) -> Ending<'s> {
        let (green, handover) = if matches!(outcome, Outcome::Guard(_) | Outcome::MaxIterations) {
            let green = checkpoints::last_green(self, seen);
            let handover = handover::text(self, outcome, entry, &green);
            (green.sentence, handover)
        } else {
            (None, None)
        };
        Ending {
            extras: self,
            seen,
            green,
            handover,
        }
    }

    /// The checkpoint a counted stop keeps after the lock (one that goes on
    /// or ends the loop), when the loop keeps checkpoints.
    pub(super) fn checkpoint(
        &self,
        step: &Step,
        staged: Option<String>,
        no_tool_ran: bool,
    ) -> Option<Keep> {
        if !self.on.checkpoints || !matches!(step, Step::Continued { .. } | Step::Ended { .. }) {
            return None;
        }
        checkpoints::keep(self, staged, no_tool_ran)
    }
}

/// What an ending's features found before the loop moved into the history.
pub(super) struct Ending<'a> {
    extras: &'a Extras<'a>,
    seen: &'a Observation,
    /// The sentence naming the last green checkpoint.
    green: Option<String>,
    /// A breaker's hand-over, to write beside the record.
    handover: Option<String>,
}

impl Ending<'_> {
    /// The lines an ended loop's notice gets, in order: the last green
    /// checkpoint, where the hand-over was written, `more` (the engine's
    /// own), and a passing gate's receipt.
    pub(super) fn told(
        self,
        record: &std::path::Path,
        more: Option<String>,
        gate_output: Option<Vec<u8>>,
        now: Timestamp,
    ) -> Vec<String> {
        let mut lines: Vec<String> = self.green.into_iter().collect();
        lines.extend(handover::write(record, self.handover));
        lines.extend(more);
        if self.extras.on.receipt {
            lines.extend(receipt::keep(
                self.extras,
                self.seen,
                gate_output,
                record,
                now,
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_state::fields::state::PrdLoop;
    use ralph_state::money::Money;

    fn plain_state() -> LoopState {
        let mut state = LoopState::parse(
            "---\nactive: true\niteration: 1\nmax_iterations: 5\ncompletion_promise: \"DONE\"\n---\nWork.\n",
        )
        .expect("a plain loop file");
        state.nonce = Some("n1".into());
        state
    }

    #[test]
    fn a_plain_loop_has_no_optional_feature() {
        let state = plain_state();
        assert_eq!(state.prd, None, "the fixture is plain");
        assert_eq!(Features::of(&state, false), Features::default());
    }

    #[test]
    fn each_option_switches_on_its_feature_and_no_other() {
        let plain = Features::default();
        let with = |change: fn(&mut LoopState), checkpoints: bool| {
            let mut state = plain_state();
            change(&mut state);
            Features::of(&state, checkpoints)
        };
        let prd = |s: &mut LoopState| {
            s.prd = Some(PrdLoop {
                path: "ralph/prd.json".into(),
                commands: String::new(),
                criteria: None,
            });
        };
        assert_eq!(
            with(prd, false),
            Features {
                stories: true,
                ..plain
            }
        );
        let protect = |s: &mut LoopState| s.paths.protect = vec!["Cargo.toml".into()];
        assert_eq!(
            with(protect, false),
            Features {
                paths: true,
                ..plain
            }
        );
        let scope = |s: &mut LoopState| s.paths.scope = vec!["src/**".into()];
        assert_eq!(
            with(scope, false),
            Features {
                paths: true,
                ..plain
            }
        );
        let verify = |s: &mut LoopState| s.guards.verify = Some("make test".into());
        assert_eq!(
            with(verify, false),
            Features {
                receipt: true,
                ..plain
            }
        );
        let cost = |s: &mut LoopState| s.guards.max_cost_usd = Some(Money(5));
        assert_eq!(
            with(cost, false),
            Features {
                pricing: true,
                ..plain
            }
        );
        let git = |_: &mut LoopState| {};
        assert_eq!(
            with(git, true),
            Features {
                checkpoints: true,
                ..plain
            }
        );
    }

    #[test]
    fn a_paused_loop_reads_neither_its_stories_nor_its_paths() {
        let mut state = plain_state();
        state.active = false;
        state.prd = Some(PrdLoop {
            path: "ralph/prd.json".into(),
            commands: String::new(),
            criteria: None,
        });
        state.paths.protect = vec!["Cargo.toml".into()];
        assert_eq!(Features::of(&state, false), Features::default());
    }

    #[test]
    fn a_plain_arming_outside_git_has_no_feature_and_checkpoints_need_git_and_a_per_user_folder() {
        let (_tmp, project, registry) = ralph_state::test_support::project();
        ralph_state::test_support::arm_plain(&project, &registry, "l", None, 5);
        let file = project.loop_files().unwrap().remove(0);
        let text = ralph_state::storage::store::read_to_string(&file.path).unwrap();
        let state = LoopState::parse(&text).unwrap();
        let live = Loop { file, text, state };
        let here = |registry| Features::here(&project, &live, registry);
        // A loop armed plain, outside git: nothing at all.
        assert_eq!(here(Some(&registry)), Features::default());
        std::fs::create_dir(project.root.join(".git")).unwrap();
        assert!(here(Some(&registry)).checkpoints, "a git project");
        assert!(!here(None).checkpoints, "no per-user folder");
    }
}
