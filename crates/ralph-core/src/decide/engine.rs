//! One turn of a loop, whoever drives it: the Stop hook (in-session) or
//! `ralph run` (fresh context). Given what was observed, it decides, runs
//! the verification gate if the promise asks for it, writes the state or
//! the history record, and logs the decision. Both drivers share this, so
//! both follow exactly the same rules.

use std::time::Duration;

use crate::decide::effects::Effects;
use crate::decide::features::{self, Extras};
use crate::decide::gate_place;
pub use crate::decide::stepped::Step;
use crate::decide::stepped::{Relocked, unlocked};
use crate::decide::{self, Decision, Observation, Outcome};
use crate::reply::transcript::Appended;
use ralph_state::error::LoopFileError;
use ralph_state::fields::frontmatter::quote;
use ralph_state::fields::state::FRESH_WAITING;
use ralph_state::fields::state::{LoopState, Progress};
use ralph_state::lifecycle::{GuidanceEntry, LogEntry, Logged, Loop, VerificationEntry};
use ralph_state::messages;
use ralph_state::storage::guidance::{Guidance, Mailbox, Question};
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::{DecisionLog, Project, ProjectLock};
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

/// One turn: decide (running the verification gate if the promise asks for
/// it), then write what was decided and log it. The lock is let go before
/// it returns; what is left to do (the checkpoint) comes back as
/// [`Effects`], for the caller to perform.
///
/// In order: what the loop's optional features observe, its stories, the
/// decision (and its gate), the turn written (an ending adds what its
/// features say), the effects. Each optional feature is one call on
/// `features::Extras`, which does nothing for a feature the loop does not have.
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
    // The loop's optional features, read once: each call on them below does
    // nothing for a feature the loop does not have.
    let extras = Extras::of(project, live, registry);
    let staged = extras.observe(&mut seen);
    let mailbox = registry.and_then(|r| Mailbox::of_project(r, project, &live.file.name));
    if live.state.active
        && let Some(mailbox) = &mailbox
    {
        seen.gate_guidance = mailbox.open_gate();
    }
    let (lock, seen) = match extras.stories(seen, lock)? {
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
    let mut step = apply(&extras, judged, written, &lock, now)?;
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
        checkpoint: extras.checkpoint(&step, staged, no_tool_ran),
        tell,
    };
    Ok((step, effects))
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
        let place = gate_place::Place::of_loop(&project.root, registry, live);
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
    extras: &Extras<'_>,
    judged: Judged,
    written: Written<'_>,
    lock: &ProjectLock,
    now: Timestamp,
) -> Result<Step, LoopFileError> {
    let (project, live, registry) = extras.turn();
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
            return end(lock, extras, &seen, claim, log, ended, now);
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
        .and_then(|prd| features::story_verdicts(prd, state.guards.verify.as_deref()));
    log
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
fn end(
    lock: &ProjectLock,
    extras: &Extras<'_>,
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
    let (project, live, registry) = extras.turn();
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
    // Read before the log moves into the history.
    let extra = extras.ending(seen, outcome, &log);
    let (record, mut notice, tell) =
        live.end(lock, project, registry, outcome, log, fields, now)?;
    let more = (outcome == Outcome::MaxIterations)
        .then(|| messages::add_iterations(&live.file.name, &live.state));
    for line in extra.told(&record, more, gate_output, now) {
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

/// A turn written: what it was, its log line, and the fields written.
type Done = (Step, LogEntry, Vec<(&'static str, String)>);

/// How the loop ends, and the output of the gate that let it (if one ran).
struct Ended {
    outcome: Outcome,
    detail: String,
    gate_output: Option<Vec<u8>>,
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
    #[cfg(unix)]
    use ralph_state::storage::checkpoints;
    use ralph_state::storage::store;
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
