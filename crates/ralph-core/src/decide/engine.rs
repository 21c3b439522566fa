//! One turn of a loop, whoever drives it: the Stop hook (in-session) or
//! `ralph run` (fresh context). Given what was observed, it decides, runs
//! the verification gate if the promise asks for it, writes the state or
//! the history record, and logs the decision. Both drivers share this, so
//! both follow exactly the same rules.

use std::path::PathBuf;
use std::time::Duration;

use crate::decide::effects::Effects;
use crate::decide::gate_place;
use crate::decide::{self, Decision, Observation, Outcome};
use crate::reply::transcript::Appended;
use ralph_state::error::LoopFileError;
use ralph_state::fields::frontmatter::quote;
use ralph_state::fields::state::FRESH_WAITING;
use ralph_state::fields::state::{LoopState, Progress};
use ralph_state::handover;
use ralph_state::lifecycle::Tell;
use ralph_state::lifecycle::{GuidanceEntry, LogEntry, Logged, Loop, VerificationEntry};
use ralph_state::messages;
use ralph_state::storage::checkpoints;
use ralph_state::storage::guidance::{Guidance, Mailbox, Question};
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::{self, DecisionLog, Project, ProjectLock};
use ralph_state::time::Timestamp;

/// What the driver observed for this turn.
pub struct Turn {
    pub seen: Observation,
    /// How far the transcript was read, to remember for the next turn.
    pub transcript: Option<Appended>,
    /// Who drove the turn (a session id, or `run:<pid>`), for the log.
    pub driver: String,
    /// An owner to write into the file with this turn (a claim).
    pub claim: Option<String>,
    /// The loop's decision log, when the driver opened it already (the hook
    /// does, to tell an unwritable log before the turn); else it is opened
    /// when the entry is written.
    pub log: Option<DecisionLog>,
}

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
        /// The loop's last word, moved into the turn's [`Effects`] by `step`.
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

/// One turn: decide (running the verification gate if the promise asks for
/// it), then write what was decided and log it. The lock is let go before
/// it returns; what is left to do (the checkpoint) comes back as
/// [`Effects`], for the caller to perform.
pub fn step(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    turn: Turn,
    now: Timestamp,
    lock: ProjectLock,
) -> Result<(Step, Effects), LoopFileError> {
    let Turn {
        mut seen,
        transcript,
        driver,
        claim,
        log,
    } = turn;
    // A count past what a file can hold is held at the cap (the budget
    // check and the record agree, and the record always writes back).
    seen.tokens_used = seen
        .tokens_used
        .map(|t| t.min(ralph_state::fields::state::MAX_TOKENS));
    let staged = read_tree(project, live, registry, &mut seen);
    // `--protect`/`--scope`: the paths changed since arming, for both drivers.
    if live.state.active && live.state.paths.any() {
        seen.changed_paths = changed_paths(project, live, registry);
        seen.dependency_only =
            dependency_only(&project.root, &live.state.paths, &seen.changed_paths);
    }
    let mailbox = registry.and_then(|r| Mailbox::of_project(r, project, &live.file.name));
    if live.state.active
        && let Some(mailbox) = &mailbox
    {
        seen.gate_guidance = mailbox.open_gate();
    }
    let (lock, seen) = match prd_stories(project, live, registry, seen, lock)? {
        Relocked::Same(lock, seen) => (lock, seen),
        Relocked::Changed(step) => return Ok((step, Effects::default())),
    };
    let (lock, judged) = match judge(project, live, registry, seen, lock)? {
        Relocked::Same(lock, judged) => (lock, judged),
        Relocked::Changed(step) => return Ok((step, Effects::default())),
    };
    let written = Written {
        entry: turn_entry(&live.state, &judged.seen, &driver, now),
        claim: claim.as_deref().map(|owner| ("session_id", quote(owner))),
        transcript: transcript.as_ref(),
        log,
    };
    let no_tool_ran = judged.seen.tree_unchanged;
    let gate_met = gate_met(&live.state, &judged.seen);
    let mut step = apply(project, live, registry, judged, written, &lock, now)?;
    if let Some(mailbox) = &mailbox
        && gate_met
    {
        // The promise met the gate guidance (and was refused once, or ended
        // the loop another way): spent.
        mailbox.close_gate();
    }
    if let (Some(mailbox), Step::Ended { .. }) = (&mailbox, &step) {
        // A raise not yet told ends with the loop (a revival leaves its own note).
        mailbox.take_raised();
    }
    drop(lock);
    // The iteration's work tree, kept by the caller once the turn is written
    // and the lock is let go.
    let tell = match &mut step {
        Step::Ended { tell, .. } => tell.take(),
        _ => None,
    };
    let effects = Effects {
        checkpoint: checkpoint_of(project, live, registry, &step, staged, no_tool_ran),
        tell,
    };
    Ok((step, effects))
}

/// The work tree the no-progress fingerprint waits for
/// ([`Observation::tree_pending`]), read under the lock: staged into the
/// loop's kept index when it keeps checkpoints (`git add` and at most a
/// `git write-tree`, and that tree is this stop's checkpoint: returned),
/// else one `git status`.
fn read_tree(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    seen: &mut Observation,
) -> Option<String> {
    if !seen.tree_pending {
        return None;
    }
    let root = &project.root;
    let staged = checkpoints::stage(root, registry, &live.file.name, &live.state);
    seen.tree_fingerprint = match &staged {
        Some(tree) => Some(ralph_fs::git::staged_fingerprint(root, tree)),
        None => ralph_fs::git::working_tree(root, ralph_fs::git::STATUS_TIME_LIMIT),
    };
    staged
}

/// The checkpoint a counted stop keeps (one that goes on or ends the loop):
/// the tree staged at this stop, the previous one when the turn ran no
/// tool, else staged after the lock.
fn checkpoint_of(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    step: &Step,
    staged: Option<String>,
    no_tool_ran: bool,
) -> Option<checkpoints::Keep> {
    if !matches!(step, Step::Continued { .. } | Step::Ended { .. }) {
        return None;
    }
    let source = match staged {
        Some(tree) => checkpoints::Source::Staged(tree),
        None if no_tool_ran => checkpoints::Source::Previous,
        None => checkpoints::Source::Stage,
    };
    let state = &live.state;
    checkpoints::plan(
        &project.root,
        registry,
        &live.file.name,
        state,
        state.iteration,
        source,
    )
}

/// Whether this stop's promise met `ralph say --gate` guidance.
fn gate_met(state: &LoopState, seen: &Observation) -> bool {
    !seen.gate_guidance.is_empty()
        && state
            .completion_promise
            .as_deref()
            .is_some_and(|p| crate::reply::promise::speaks(seen.reply.as_deref().unwrap_or(""), p))
}

/// What a turn writes besides the decision: its log entry, a claim, how far
/// the transcript was read, and the log it goes to.
struct Written<'a> {
    entry: LogEntry,
    claim: Option<(&'static str, String)>,
    transcript: Option<&'a Appended>,
    log: Option<DecisionLog>,
}

/// The decision taken, with what was seen (a gate's verdict included).
struct Judged {
    decision: Decision,
    seen: Observation,
    gate_output: Option<Vec<u8>>,
}

/// Work done with the lock dropped: the lock taken again and the work's
/// result, or the loop changed meanwhile and this stop was let through.
/// Returned once per gate, never stored: boxing would only allocate.
#[allow(clippy::large_enum_variant)]
enum Relocked<T> {
    Same(ProjectLock, T),
    Changed(Step),
}

/// Runs `work` without the lock (a gate or a story's checks may run for
/// minutes, and other ralph processes work meanwhile), takes the lock again
/// and makes sure the loop is still the one judged.
fn unlocked<T>(
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

/// A `--prd` loop's stories at this stop: those that turned to passing have
/// their commands run (without the lock); a refused one is set back. A
/// paused loop passes without reading anything.
fn prd_stories(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    mut seen: Observation,
    lock: ProjectLock,
) -> Result<Relocked<Observation>, LoopFileError> {
    let state = &live.state;
    let Some(prd) = state.prd.as_ref().filter(|_| state.active) else {
        return Ok(Relocked::Same(lock, seen));
    };
    let stories = crate::decide::prd_turn::read(&project.root, prd)?;
    let turned = crate::decide::prd_turn::turned(&state.progress.prd_passed, &stories);
    let mut found = ralph_state::fields::stories::PrdSeen {
        file: prd.path.clone(),
        stories: stories.clone(),
        refused: Vec::new(),
        checked: Vec::new(),
        changed: prd
            .criteria
            .as_deref()
            .map(|armed| ralph_state::fields::stories::changed_criteria(armed, &stories))
            .unwrap_or_default(),
    };
    let mut lock = lock;
    let paths_refusal = crate::decide::prd_turn::paths_refusal(
        decide::path_violations_but(state, &seen.changed_paths, &seen.dependency_only),
        &turned,
    )
    .or_else(|| crate::decide::prd_turn::criteria_refusal(prd, &stories, &turned));
    if let Some(refused) = paths_refusal {
        // `--protect`/`--scope`, or criteria changed since arming, refuse
        // the stories before any check runs.
        found.stories = crate::decide::prd_turn::set_back(&project.root, &prd.path, &refused)?;
        found.refused = refused;
    } else if !turned.is_empty() {
        let checks = || story_checks(project, registry, live, prd, &turned);
        let (relocked, (refused, gate, ran)) =
            match unlocked(lock, project, live, "the story checks", checks)? {
                Relocked::Same(relocked, out) => (relocked, out),
                Relocked::Changed(step) => return Ok(Relocked::Changed(step)),
            };
        lock = relocked;
        if !refused.is_empty() {
            found.stories = crate::decide::prd_turn::set_back(&project.root, &prd.path, &refused)?;
        }
        found.checked = crate::decide::prd_turn::passed_checks(&turned, &refused);
        found.refused = refused;
        if gate.is_some() {
            seen.gate_ran = ran;
        }
        seen.verification = gate;
    }
    seen.prd = Some(found);
    Ok(Relocked::Same(lock, seen))
}

/// The commands of the stories that turned to passing, and the loop's
/// `--verify`, run in the gate's place: who was refused, the gate's
/// verdict, and how it ran.
fn story_checks(
    project: &Project,
    registry: Option<&Registry>,
    live: &Loop,
    prd: &ralph_state::fields::state::PrdLoop,
    turned: &[&ralph_state::fields::stories::Story],
) -> StoryChecks {
    let state = &live.state;
    let verify = state.guards.verify.as_deref();
    if !crate::decide::prd_turn::any_check(turned, verify) {
        return (Vec::new(), None, None);
    }
    let place = gate_place::Place::of(
        &project.root,
        registry,
        &live.file.name,
        &state.guards,
        &state.paths,
        ralph_state::gate_sandbox::confinement(&state.guards, state.sandbox.is_some()),
    );
    let timeout = Duration::from_secs(state.guards.verify_timeout_secs);
    let prepared = gate_place::prepare(&place, timeout);
    let ran = Some(prepared.ran);
    let (refused, gate) = match prepared.dir {
        Ok(dir) => crate::decide::prd_turn::run_checks(
            &dir,
            prd,
            turned,
            verify,
            (timeout, &place.confinement),
        ),
        Err(failed) => crate::decide::prd_turn::none_run(turned, verify, &failed),
    };
    (refused, gate, ran)
}

/// What [`story_checks`] found.
type StoryChecks = (
    Vec<ralph_state::fields::stories::StoryRefusal>,
    Option<crate::decide::Verification>,
    Option<ralph_state::storage::receipt::GateRan>,
);

/// Decides; when the decision asks for the `--verify` gate or the
/// `--check` command, runs it without the lock and decides again with its
/// verdict (`decide` never asks to run a command twice).
fn judge(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    mut seen: Observation,
    lock: ProjectLock,
) -> Result<Relocked<Judged>, LoopFileError> {
    let state = &live.state;
    let decision = decide::decide(state, &seen);
    let (command, timeout, verifies) = match &decision {
        Decision::Verify { command } => (command.clone(), state.guards.verify_timeout_secs, true),
        Decision::Check { command } => (command.clone(), state.guards.check_timeout_secs, false),
        _ => {
            let judged = Judged {
                decision,
                seen,
                gate_output: None,
            };
            return Ok(Relocked::Same(lock, judged));
        }
    };
    let run = || {
        let place = gate_place::Place::of(
            &project.root,
            registry,
            &live.file.name,
            &state.guards,
            &state.paths,
            ralph_state::gate_sandbox::confinement(&state.guards, state.sandbox.is_some()),
        );
        let timeout = Duration::from_secs(timeout);
        gate_place::run_keeping(gate_place::prepare(&place, timeout), &command, timeout)
    };
    let (lock, (verdict, output, ran)) =
        match unlocked(lock, project, live, &format!("`{command}`"), run)? {
            Relocked::Same(lock, out) => (lock, out),
            Relocked::Changed(step) => return Ok(Relocked::Changed(step)),
        };
    let mut gate_output = None;
    if verifies {
        seen.verification = Some(verdict);
        seen.gate_ran = Some(ran);
        gate_output = Some(output);
    } else {
        seen.check = Some(verdict);
    }
    let judged = Judged {
        decision: decide::decide(state, &seen),
        seen,
        gate_output,
    };
    Ok(Relocked::Same(lock, judged))
}

/// Writes what was decided (the file rewritten, or the loop ended into the
/// history), keeps the arming record in step, and logs the turn.
fn apply(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    judged: Judged,
    written: Written<'_>,
    lock: &ProjectLock,
    now: Timestamp,
) -> Result<Step, LoopFileError> {
    let Judged {
        decision,
        seen,
        gate_output,
    } = judged;
    let Written {
        entry: log,
        claim,
        transcript,
        log: mut decision_log,
    } = written;
    let (step, entry) = match decision {
        Decision::Pass | Decision::Verify { .. } | Decision::Check { .. } => {
            let done = pass(lock, live, claim, transcript, log)?;
            live.keep_armed(lock, registry, project, &done.2, now);
            (done.0, done.1)
        }
        Decision::Wait {
            progress,
            why,
            pause,
            tell,
            question,
        } => {
            let (step, mut log) = wait(lock, live, transcript, log, progress, why, pause)?;
            let step = match question {
                Some(question) => {
                    log.question = Some(question.clone());
                    ask(project, live, registry, question, now)
                }
                None => step,
            };
            (if tell { step } else { Step::Passed }, log)
        }
        Decision::End { outcome, detail } => {
            let ended = Ended {
                outcome,
                detail,
                gate_output,
            };
            return end(lock, project, live, registry, &seen, claim, log, ended, now);
        }
        Decision::Continue {
            next,
            progress,
            notes,
            notices,
        } => {
            let turn_done = Continue {
                next,
                progress,
                notes,
                notices,
                mailbox: registry.and_then(|r| Mailbox::of_project(r, project, &live.file.name)),
            };
            let done = go_on(lock, live, &seen, claim, transcript, log, turn_done)?;
            live.keep_armed(lock, registry, project, &done.2, now);
            (done.0, done.1)
        }
    };
    entry.append_via(decision_log.as_mut(), project, &live.file.name);
    Ok(step)
}

/// The paths that differ from the work tree at arming, or `Unknown` when
/// git could not tell (or no tree was recorded): through the arming's own
/// comparison index, else a copy of the user's index.
fn changed_paths(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
) -> decide::ChangedPaths {
    let (root, rules) = (&project.root, &live.state.paths);
    let limit = ralph_fs::tree_diff::TREE_TIME_LIMIT;
    rules
        .armed_tree
        .as_deref()
        .and_then(|tree| {
            let excludes = rules.armed_excludes.as_deref();
            let name = &live.file.name;
            checkpoints::changed_since(root, registry, name, &live.state, tree, excludes)
                .or_else(|| ralph_fs::tree_diff::changed_since(root, tree, excludes, limit))
        })
        .map_or(decide::ChangedPaths::Unknown, decide::ChangedPaths::Known)
}

/// The changed, protected manifests whose only change is in their
/// dependency lists (`protect_defaults::dependency_only_change`): the file
/// as armed (from the armed tree) against the file now.
fn dependency_only(
    root: &std::path::Path,
    rules: &ralph_state::fields::state::PathRules,
    changed: &decide::ChangedPaths,
) -> Vec<String> {
    use ralph_state::protect_defaults::{dependency_only_change, is_manifest};
    let (decide::ChangedPaths::Known(paths), Some(tree)) = (changed, rules.armed_tree.as_deref())
    else {
        return Vec::new();
    };
    let protect = ralph_state::globs::Globs::new(&rules.protect);
    let limit = ralph_fs::tree_diff::TREE_TIME_LIMIT;
    paths
        .iter()
        .filter(|p| is_manifest(p) && protect.matches(p))
        .filter(|p| {
            let before = ralph_fs::tree_diff::file_in_tree(root, tree, p, limit);
            let after = ralph_fs::safe_fs::read_text(&root.join(p.as_str()), 8 * 1024 * 1024);
            match (before, after) {
                (Some(before), Ok(after)) => {
                    dependency_only_change(p, &String::from_utf8_lossy(&before), &after)
                }
                _ => false,
            }
        })
        .cloned()
        .collect()
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

/// The log entry's fields every turn has.
fn turn_entry(state: &LoopState, seen: &Observation, driver: &str, now: Timestamp) -> LogEntry {
    let reply = seen.reply.as_deref().unwrap_or("");
    let promise_seen = state
        .completion_promise
        .as_deref()
        .is_some_and(|p| crate::reply::promise::speaks(reply, p));
    let mut log = LogEntry::new(now, Logged::Pass, "")
        .session(driver)
        .iteration(state.iteration)
        .context(seen.context);
    log.promise_seen = Some(promise_seen);
    log.reply_excerpt = Some(decide::excerpt(reply));
    log.verification = seen.verification.as_ref().map(VerificationEntry::from);
    log.check = seen.check.as_ref().map(VerificationEntry::from);
    log.stories = seen
        .prd
        .as_ref()
        .and_then(|prd| story_verdicts(prd, state.guards.verify.as_deref()));
    log
}

/// The story commands that ran at this stop, as one logged verdict:
/// `US-001 passed; US-002 failed (exit 1)`; `None` when none ran. (A
/// refusal by `--protect`/`--scope`, changed criteria or the loop's own
/// `--verify` ran no story command.)
fn story_verdicts(
    prd: &ralph_state::fields::stories::PrdSeen,
    loop_verify: Option<&str>,
) -> Option<VerificationEntry> {
    use ralph_state::fields::stories::StoryRefusal;
    let mut passed = true;
    let mut said: Vec<String> = prd
        .checked
        .iter()
        .map(|id| format!("{id} passed"))
        .collect();
    for refusal in &prd.refused {
        match refusal {
            StoryRefusal::Failed {
                id,
                command,
                verification,
            } if command != decide::PATHS_CHECK
                && command != decide::CRITERIA_CHECK
                && Some(command.as_str()) != loop_verify =>
            {
                passed = false;
                said.push(format!("{id} failed ({})", verification.status));
            }
            _ => {}
        }
    }
    (!said.is_empty()).then(|| VerificationEntry {
        passed,
        status: said.join("; "),
        failures: None,
        exit_code: None,
        tail: None,
    })
}

/// A paused loop: nothing is counted; the transcript read so far is
/// skipped on resume.
fn pass(
    lock: &ProjectLock,
    live: &Loop,
    claim: Option<(&'static str, String)>,
    transcript: Option<&Appended>,
    mut log: LogEntry,
) -> Result<Done, LoopFileError> {
    let state = &live.state;
    let mut fields: Vec<(&str, String)> = claim.into_iter().collect();
    if let Some(a) = transcript {
        let mut skipped = state.progress.clone();
        skipped.transcript_offset = a.end_offset;
        skipped.last_message_id = a.last_message_id.clone();
        fields.extend(progress_fields(&state.progress, &skipped));
    }
    if !fields.is_empty() {
        live.write(lock, &fields)?;
    }
    log.decision = Logged::Pass;
    log.why = if state.active {
        "a message the user queued goes first (the turn ends, not counted)"
    } else {
        "paused"
    }
    .to_owned();
    Ok((Step::Passed, log, fields))
}

/// Background work will wake the session: the figures are written (tokens
/// and dollars spent stay spent), the iteration is not, and the stop goes
/// through.
#[allow(clippy::too_many_arguments)]
fn wait(
    lock: &ProjectLock,
    live: &Loop,
    transcript: Option<&Appended>,
    mut log: LogEntry,
    mut progress: Progress,
    why: String,
    pause: bool,
) -> Result<(Step, LogEntry), LoopFileError> {
    let state = &live.state;
    if let Some(a) = transcript {
        progress.transcript_offset = a.end_offset;
        progress.last_message_id = a.last_message_id.clone();
    }
    // The client's block count starts over with the turn that wakes it.
    progress.idle_blocks = 0;
    let mut fields = progress_fields(&state.progress, &progress);
    if pause {
        fields.push(("active", "false".to_owned()));
    }
    if !fields.is_empty() {
        live.write_turn(lock, &fields)?;
    }
    log.decision = if pause { Logged::Pause } else { Logged::Pass };
    log.tokens = Some(progress.tokens_used);
    let notice = if pause && progress.fresh_stage == FRESH_WAITING {
        ralph_state::messages::fresh_pause(&live.file.name, state)
    } else if pause {
        format!(
            "⏸ ralph `{}` paused at iteration {}: {why}. /ralph-resume carries on, /ralph-cancel ends it.",
            ralph_fs::display::line(&live.file.name),
            state.iteration_label()
        )
    } else {
        format!(
            "⏳ ralph `{}` (iteration {}): {why}; the loop goes on at the next stop.",
            ralph_fs::display::line(&live.file.name),
            state.iteration_label()
        )
    };
    log.why = why;
    Ok((Step::Waiting { notice }, log))
}

/// The loop ends: its record keeps the final token count (the budget that
/// ended it, say), and it moves into the history.
#[allow(clippy::too_many_arguments)]
fn end(
    lock: &ProjectLock,
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    seen: &Observation,
    claim: Option<(&'static str, String)>,
    mut log: LogEntry,
    ended: Ended,
    now: Timestamp,
) -> Result<Step, LoopFileError> {
    let Ended {
        outcome,
        detail,
        gate_output,
    } = ended;
    let state = &live.state;
    let mut fields: Vec<(&'static str, String)> = claim.into_iter().collect();
    if let Some(tokens) = seen
        .tokens_used
        .filter(|t| *t != state.progress.tokens_used)
    {
        fields.push(("tokens_used", tokens.to_string()));
        log.tokens = Some(tokens);
    }
    let unseen = decide::unseen_tokens(state, seen);
    if unseen != state.progress.unseen_tokens {
        fields.push(("unseen_tokens", unseen.to_string()));
    }
    if unseen > 0 {
        log.tokens_unseen = Some(unseen);
    }
    fields.extend(state.progress.counts.ending_fields(seen.cost_usd));
    // The running total, logged whenever something was counted (the
    // report and the webhook read the last one; they never add them up).
    let spent = seen.cost_usd.unwrap_or(state.progress.counts.cost_usd);
    log.cost_usd = (state.guards.max_cost_usd.is_some() || spent.0 > 0).then_some(spent);
    log.why.clone_from(&detail);
    let (green, handover) = ended_checkpoint(project, live, registry, seen, outcome, &log);
    let (record, mut notice, tell) =
        live.end(lock, project, registry, outcome, log, fields, now)?;
    let more = (outcome == Outcome::MaxIterations)
        .then(|| messages::add_iterations(&live.file.name, &live.state));
    for line in green
        .into_iter()
        .chain(write_handover(&record, handover))
        .chain(more)
    {
        notice.push('\n');
        notice.push_str(&line);
    }
    if let Some(line) = keep_receipt(project, live, registry, seen, gate_output, &record, now) {
        notice.push('\n');
        notice.push_str(&line);
    }
    Ok(Step::Ended {
        outcome,
        detail,
        record,
        notice,
        tell,
    })
}

/// When a breaker or a budget ended the loop, the sentence that names the
/// last checkpoint whose check passed, and a breaker's hand-over (both read
/// before the log moves into the history).
fn ended_checkpoint(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    seen: &Observation,
    outcome: Outcome,
    entry: &LogEntry,
) -> (Option<String>, Option<String>) {
    let state = &live.state;
    let name = &live.file.name;
    if !matches!(outcome, Outcome::Guard(_) | Outcome::MaxIterations) {
        return (None, None);
    }
    // This iteration's checkpoint is kept after the lock (the turn's effect).
    let source = checkpoints::Source::Stage;
    let kept = checkpoints::plan(
        &project.root,
        registry,
        name,
        state,
        state.iteration,
        source,
    )
    .is_some();
    let passed = seen.check.as_ref().is_some_and(|c| c.passed);
    let green = checkpoints::last_green(project, registry, name, state, passed, kept);
    let handover = match outcome {
        Outcome::Guard(tripped) if handover::wanted(tripped) => {
            let mut log = store::read_log_tail(&project.log_path(name), 200);
            log.extend(serde_json::from_str(&entry.line()).ok());
            Some(handover::render(&handover::HandoverFacts {
                name,
                state,
                tripped,
                detail: &entry.why,
                log: &log,
                last_green: green,
                checkpoints: kept,
            }))
        }
        _ => None,
    };
    let sentence = green.map(|n| checkpoints::green_sentence(name, n));
    (sentence, handover)
}

/// Writes a breaker's hand-over beside the history record; the line that
/// says where (or why it could not be written).
fn write_handover(record: &std::path::Path, text: Option<String>) -> Option<String> {
    let text = text?;
    let path = record.with_extension(&handover::SUFFIX[1..]);
    Some(
        match ralph_fs::safe_fs::create_new(&path, text.as_bytes()) {
            Ok(()) => format!(
                "Hand-over for the next agent or person: {}",
                ralph_fs::display::line(&path.display().to_string())
            ),
            Err(e) => format!("The hand-over could not be written: {e}"),
        },
    )
}

/// A turn written: what it was, its log line, and the fields written.
type Done = (Step, LogEntry, Vec<(&'static str, String)>);

/// How the loop ends, and the output of the gate that let it (if one ran).
struct Ended {
    outcome: Outcome,
    detail: String,
    gate_output: Option<Vec<u8>>,
}

/// A completion through a passing gate leaves a receipt (`receipt.rs`):
/// its line for the notice, or why it could not be kept. Best effort: the
/// loop has ended either way.
fn keep_receipt(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    seen: &Observation,
    output: Option<Vec<u8>>,
    record: &std::path::Path,
    now: Timestamp,
) -> Option<String> {
    let verdict = seen.verification.as_ref().filter(|v| v.passed)?;
    let command = live.state.guards.verify.as_deref()?;
    let receipt = ralph_state::storage::receipt::build(ralph_state::storage::receipt::Passed {
        name: &live.file.name,
        root: &project.root,
        command,
        verdict,
        output,
        iteration: live.state.iteration,
        record,
        now: now.to_string(),
        paths: paths_held(&live.state, seen),
        gate: seen.gate_ran.clone(),
    });
    let line = ralph_state::storage::receipt::one_line(&receipt);
    Some(
        match registry.map(|r| ralph_state::storage::receipt::save(r, &receipt)) {
            Some(Ok(_)) => line,
            Some(Err(e)) => format!("{line} (not kept: {e})"),
            None => format!("{line} (not kept: no per-user state folder)"),
        },
    )
}

/// What `--protect` and `--scope` held at a completion, for its receipt.
fn paths_held(
    state: &LoopState,
    seen: &Observation,
) -> Option<ralph_state::storage::receipt::PathsHeld> {
    let rules = &state.paths;
    let decide::ChangedPaths::Known(changed) = &seen.changed_paths else {
        return None;
    };
    let (protected, outside) =
        decide::path_violations_but(state, &seen.changed_paths, &seen.dependency_only)?;
    Some(ralph_state::storage::receipt::PathsHeld {
        protect: rules.protect.clone(),
        scope: rules.scope.clone(),
        armed_tree: rules.armed_tree.clone().unwrap_or_default(),
        changed: changed.clone(),
        protect_held: protected.is_empty(),
        scope_held: outside.is_empty(),
    })
}

/// What `decide` said for a turn that goes on.
struct Continue {
    next: u64,
    progress: Progress,
    notes: Vec<String>,
    notices: Vec<String>,
    /// Where `ralph say`'s guidance waits for the next iteration.
    mailbox: Option<Mailbox>,
}

/// The loop goes on: the counters are written and the prompt is fed back
/// with its footer.
fn go_on(
    lock: &ProjectLock,
    live: &Loop,
    seen: &Observation,
    claim: Option<(&'static str, String)>,
    transcript: Option<&Appended>,
    mut log: LogEntry,
    turn: Continue,
) -> Result<Done, LoopFileError> {
    let state = &live.state;
    let Continue {
        next,
        mut progress,
        notes,
        notices,
        mailbox,
    } = turn;
    if let Some(a) = transcript {
        progress.transcript_offset = a.end_offset;
        progress.last_message_id = a.last_message_id.clone();
    }
    let mut fields = vec![("iteration", next.to_string())];
    fields.extend(claim);
    fields.extend(progress_fields(&state.progress, &progress));
    live.write_turn(lock, &fields)?;
    // Taken only once the turn is written: guidance is never spent on a
    // continuation that did not happen.
    let guidance = mailbox
        .as_ref()
        .map(|m| {
            // A loop that goes on asks nothing any more (resumed without an answer).
            m.answer();
            m.deliver(next)
        })
        .unwrap_or_default();
    // A bound the user raised since the last continuation: told once, here.
    let raised = mailbox
        .as_ref()
        .map(Mailbox::take_raised)
        .unwrap_or_default();
    log.decision = Logged::Block;
    log.next_iteration = Some(next);
    log.guidance = logged_guidance(&guidance);
    log.why = if notes.is_empty() {
        messages::went_on(state).to_owned()
    } else {
        notes.join(" ")
    };
    if !raised.is_empty() {
        log.why = format!("{} {}", log.why, messages::raised_told(&raised));
    }
    log_figures(&mut log, state, &progress);
    let status = continue_status(live, seen, next, notices, &raised);
    let reason = format!(
        "{}{}{}{}{}",
        state.prompt,
        seen.prd
            .as_ref()
            .map(messages::stories::section)
            .unwrap_or_default(),
        guidance_section(&guidance),
        messages::raised_section(&raised),
        messages::footer(
            &live.file.name,
            state,
            next,
            &footer_notes(state, &progress, notes)
        )
    );
    let step = Step::Continued {
        next,
        reason,
        status,
        refused: refusal(state, seen, &progress),
        progress,
        raised,
    };
    Ok((step, log, fields))
}

/// The guidance as a log line keeps it (`None` when there was none).
pub fn logged_guidance(guidance: &[Guidance]) -> Option<Vec<GuidanceEntry>> {
    (!guidance.is_empty()).then(|| {
        guidance
            .iter()
            .map(|g| GuidanceEntry {
                text: g.text.clone(),
                gate: g.gate,
            })
            .collect()
    })
}

/// The section of a prompt that carries `guidance`.
pub fn guidance_section(guidance: &[Guidance]) -> String {
    let texts: Vec<(String, bool)> = guidance.iter().map(|g| (g.text.clone(), g.gate)).collect();
    messages::guidance_section(&texts)
}

/// The agent asked a question: kept in the loop's mailbox for `ralph say`
/// to answer, and the user told how.
fn ask(
    project: &Project,
    live: &Loop,
    registry: Option<&Registry>,
    question: String,
    now: Timestamp,
) -> Step {
    let name = ralph_fs::display::line(&live.file.name).into_owned();
    let kept = registry
        .and_then(|r| Mailbox::of_project(r, project, &live.file.name))
        .map(|m| {
            m.ask(&Question {
                text: question.clone(),
                at: now.to_string(),
                iteration: live.state.iteration,
            })
        });
    let how = match kept {
        Some(Ok(())) => format!(
            "answer with `ralph say --name {name} \"…\"` (or /ralph-say …): the loop goes on by itself"
        ),
        _ => {
            "ralph could not keep the question; answer with /ralph-resume and your reply".to_owned()
        }
    };
    Step::Waiting {
        notice: format!(
            "❓ ralph `{name}` paused at iteration {}: the agent asks: {}\n{how}.",
            live.state.iteration_label(),
            ralph_fs::display::block(&question)
        ),
    }
}

/// The guard figures a continuation's log line keeps.
fn log_figures(log: &mut LogEntry, state: &LoopState, progress: &Progress) {
    log.tokens = Some(progress.tokens_used);
    log.tokens_unseen = (progress.unseen_tokens > 0).then_some(progress.unseen_tokens);
    log.same_reply_count = Some(progress.same_reply_count);
    log.no_progress_count = Some(progress.no_progress_count);
    log.idle_blocks = Some(progress.idle_blocks);
    log.cost_usd = (state.guards.max_cost_usd.is_some() || progress.counts.cost_usd.0 > 0)
        .then_some(progress.counts.cost_usd);
}

/// The one-line status the user sees as the loop goes on: a refused
/// promise too, not only the model, then the turn's notices, then the bounds
/// the user raised that this continuation tells the agent of.
fn continue_status(
    live: &Loop,
    seen: &Observation,
    next: u64,
    mut notices: Vec<String>,
    raised: &[String],
) -> String {
    if !raised.is_empty() {
        notices.push(messages::raised_notice(&live.file.name, raised));
    }
    let state = &live.state;
    let mut line = messages::status_line(&live.file.name, state, next);
    if let Some(prd) = &seen.prd {
        line = format!("{line} · {}", messages::stories::status(&prd.stories));
    }
    let refused = seen.verification.as_ref().filter(|v| !v.passed);
    std::iter::once(match refused {
        Some(v) => format!(
            "{line} · {}",
            messages::verify_refused_status(state, &v.status)
        ),
        None => line,
    })
    .chain(notices)
    .collect::<Vec<_>>()
    .join("\n")
}

/// What refused a claim of done at this stop: the gate, or `--protect`/
/// `--scope` (a refusal counted without a gate run), or nothing.
fn refusal(state: &LoopState, seen: &Observation, progress: &Progress) -> messages::Refused {
    if seen.verification.as_ref().is_some_and(|v| !v.passed) {
        messages::Refused::ByVerify
    } else if seen.verification.is_none()
        && seen.changed_paths != decide::ChangedPaths::NotAsked
        && progress.counts.verify_failures > state.progress.counts.verify_failures
    {
        messages::Refused::ByPaths
    } else {
        messages::Refused::Not
    }
}

/// The footer's notes: the decision's, plus the token count when a budget
/// is set (known, and what may be missing), unless a wrap-up note says it.
fn footer_notes(state: &LoopState, progress: &Progress, mut notes: Vec<String>) -> Vec<String> {
    if let Some(limit) = state.guards.max_tokens
        && !notes.iter().any(|n| n.starts_with("Token budget"))
    {
        notes.push(decide::token_note(
            progress.tokens_used,
            progress.unseen_tokens,
            progress.counts.replies_behind,
            limit,
        ));
    }
    if let Some(limit) = state.guards.max_cost_usd
        && !notes.iter().any(|n| n.starts_with("Dollar budget"))
    {
        notes.push(format!(
            "Spent: {} of {}.",
            progress.counts.cost_usd.dollars(),
            limit.dollars()
        ));
    }
    notes
}

/// The progress fields that changed, as frontmatter values.
fn progress_fields(old: &Progress, new: &Progress) -> Vec<(&'static str, String)> {
    new.changed_fields(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_state::test_support::{arm_plain, project};

    fn armed() -> (tempfile::TempDir, Project, Loop) {
        let (tmp, project, registry) = project();
        arm_plain(&project, &registry, "l", None, 5);
        let file = project.loop_files().unwrap().remove(0);
        let text = store::read_to_string(&file.path).unwrap();
        let state = LoopState::parse(&text).unwrap();
        (tmp, project, Loop { file, text, state })
    }

    /// A turn of a loop in a git project: `step` returns the iteration's
    /// checkpoint as an effect and does not keep it; performing it does.
    #[cfg(unix)] // git, which the Windows tests under Wine lack
    #[test]
    fn a_turn_returns_its_checkpoint_as_an_effect_and_does_not_keep_it() {
        let (_tmp, project, registry) = project();
        let mut init = ralph_fs::git_runner::command(&project.root, &[]).unwrap();
        init.args(["init", "-q"]);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        ralph_fs::git_runner::run_until(init, deadline, &[0], 4096).expect("git init");
        std::fs::write(project.root.join("a.txt"), "one\n").unwrap();
        arm_plain(&project, &registry, "l", None, 5);
        let file = project.loop_files().unwrap().remove(0);
        let text = store::read_to_string(&file.path).unwrap();
        let state = LoopState::parse(&text).unwrap();
        let live = Loop { file, text, state };
        let turn = Turn {
            seen: Observation {
                reply: Some("working on it".into()),
                ..Observation::default()
            },
            transcript: None,
            driver: "s1".into(),
            claim: None,
            log: None,
        };
        let lock = project.lock().unwrap();
        let (step, effects) = step(&project, &live, Some(&registry), turn, Timestamp(1), lock)
            .expect("the turn is written");
        assert!(matches!(step, Step::Continued { .. }), "{step:?}");
        let keep = effects.checkpoint.as_ref().expect("a checkpoint to keep");
        assert_eq!(keep.source(), &checkpoints::Source::Stage);
        let label = keep.iteration().to_string();
        let kept = checkpoints::Kept::latest(&registry, &project.root, "l").unwrap();
        assert_eq!(kept.commit(&label), None, "step kept no checkpoint itself");
        effects.perform(None);
        assert!(kept.commit(&label).is_some(), "performed, it is kept");
    }

    #[test]
    fn work_without_the_lock_goes_on_when_the_loop_is_untouched() {
        let (_tmp, project, live) = armed();
        let lock = project.lock().unwrap();
        let out = unlocked(lock, &project, &live, "`true`", || {
            // The lock is free while the work runs.
            drop(project.lock().expect("free meanwhile"));
            7
        })
        .unwrap();
        assert!(matches!(out, Relocked::Same(_, 7)));
    }

    #[test]
    fn work_without_the_lock_is_let_through_when_the_loop_changed() {
        let (_tmp, project, live) = armed();
        let lock = project.lock().unwrap();
        let out = unlocked(lock, &project, &live, "`make test`", || {
            std::fs::write(&live.file.path, "cancelled").unwrap();
        })
        .unwrap();
        let Relocked::Changed(Step::Changed { notice }) = out else {
            panic!("not changed")
        };
        assert!(
            notice.contains("the loop changed while `make test` ran"),
            "{notice}"
        );
    }
}
