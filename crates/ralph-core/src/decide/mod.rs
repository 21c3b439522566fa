//! The decision at the end of a turn: a pure function of the loop state and
//! what was observed (the reply, the clock, the guard figures). It touches
//! no file and no clock of its own, so every rule is tested directly.

pub mod effects;
pub mod engine;
pub(crate) mod features;
pub mod gate_place;
pub mod observation;
pub mod path_words;
pub mod prd_turn;
pub mod pricing;
pub(crate) mod stepped;
pub use crate::decide::observation::{
    ChangedPaths, Observation, Verification, fingerprint, fingerprint_words,
};
use crate::reply::promise;
use ralph_state::fields::guards::Tripped;
use ralph_state::fields::limit::Limit;
pub use ralph_state::fields::outcome::Outcome;
use ralph_state::fields::state::{LoopState, MAX_COUNT, MAX_TOKENS, Progress};
use ralph_state::time::{Timestamp, format_duration};

// One value per stop, moved once into the step that acts on it: boxing the
// progress would cost an allocation and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The loop is paused, or the user's queued message must run first: let the stop
    /// through and count nothing.
    Pass,
    /// The promise was spoken and a verification command must run first.
    Verify { command: String },
    /// The loop would go on: its `--check` command must run first.
    Check { command: String },
    /// The loop ends; `detail` says why, with the figures.
    End { outcome: Outcome, detail: String },
    /// Background work will wake the session: let this stop through,
    /// uncounted (the figures counted so far are kept); the loop goes on at
    /// the stop after that work is done.
    /// With `pause`, the loop is also paused (`--max-window`): it waits for
    /// the user's /ralph-resume instead.
    /// Without `tell`, the stop goes through silently (the user was told).
    Wait {
        progress: Progress,
        why: String,
        pause: bool,
        tell: bool,
        /// The agent ended its turn with `<question>…</question>`: the loop
        /// pauses until the user answers (`ralph say`).
        question: Option<String>,
    },
    /// Block the stop and feed the prompt back for turn `next`.
    Continue {
        next: u64,
        progress: Progress,
        /// Lines for the agent under the prompt (refused promise, budget warnings).
        notes: Vec<String>,
        /// Lines for the user (a clock that looks wrong).
        notices: Vec<String>,
    },
}

/// Share of a budget after which the agent is told to wrap up.
const WARN_AT_PERCENT: u64 = 80;

pub fn decide(state: &LoopState, seen: &Observation) -> Decision {
    if !state.active {
        return Decision::Pass;
    }
    match steps(state, seen) {
        // The user's waiting message goes first: this turn ends, uncounted, and the loop
        // carries on at the end of the turn that message starts. An ending still wins.
        Ok(Decision::Continue { .. }) if seen.queued_message => Decision::Pass,
        Ok(decision) => decision,
        Err(Early::Verify(command)) => Decision::Verify { command },
        Err(Early::Check(command)) => Decision::Check { command },
        Err(Early::End(outcome, detail)) => Decision::End { outcome, detail },
    }
}

/// A decision taken before the last step: the loop ends, or the gate runs.
/// Kept small (not a whole `Decision`) so each step can return it with `?`.
enum Early {
    End(Outcome, String),
    Verify(String),
    Check(String),
}

/// What the turn carries forward while the steps run.
struct Turn {
    progress: Progress,
    /// Lines for the agent under the prompt.
    notes: Vec<String>,
    /// Lines for the user.
    notices: Vec<String>,
}

/// The rules in the order they apply: the first that ends the loop wins.
fn steps(state: &LoopState, seen: &Observation) -> Result<Decision, Early> {
    let reply = seen.reply.as_deref().unwrap_or("");
    let mut turn = Turn {
        progress: state.progress.clone(),
        notes: Vec::new(),
        notices: Vec::new(),
    };
    let refused = guarded_paths(state, seen, reply, &mut turn)?;
    if state.prd.is_some() {
        match stories_complete(state, seen, reply, &mut turn) {
            // Every story passes, but the paths refuse it: the loop goes on.
            Err(Early::End(Outcome::Completed, _) | Early::Verify(_)) if refused => {}
            other => other?,
        }
    } else if state.gate_alone() {
        if !refused {
            gate_alone(state, seen, &mut turn)?;
        }
    } else if !refused {
        completion_promise(state, seen, reply, &mut turn)?;
    }
    abort_promise(state, reply)?;
    iteration_limit(state)?;
    time_budget(state, seen, &mut turn)?;
    token_budget(state, seen, &mut turn)?;
    cost_budget(state, seen, &mut turn)?;
    if let (Some(limit), Some((used, resets))) = (state.guards.max_window_pct, &seen.window)
        && *used >= limit
    {
        return Ok(Decision::Wait {
            progress: turn.progress,
            why: format!(
                "the plan's 5-hour window is {used} % used (--max-window {limit}){resets}"
            ),
            pause: true,
            tell: true,
            question: None,
        });
    }
    if let Some(question) = promise::spoken_question(reply) {
        return Ok(asks(turn.progress, question));
    }
    if let Some(work) = &seen.pending_work {
        // Blocking now would spin the model while the work runs; the client
        // wakes the session when it is done, and that stop goes on.
        return Ok(Decision::Wait {
            progress: turn.progress,
            why: format!("waiting for {work} to wake the session"),
            pause: false,
            tell: true,
            question: None,
        });
    }
    if let Some(wait) = goal(state, seen, &mut turn) {
        return Ok(wait);
    }
    if let Some(pause) = fresh_pause(state, seen, &mut turn) {
        return Ok(pause);
    }
    stuck_breaker(state, reply, &mut turn.progress)?;
    no_progress_breaker(state, seen, &mut turn.progress)?;
    block_cap(seen, &mut turn.progress)?;
    check(state, seen, &mut turn)?;
    fresh_wrap_up(state, seen, &mut turn);
    Ok(Decision::Continue {
        next: state.iteration.saturating_add(1),
        progress: turn.progress,
        notes: turn.notes,
        notices: turn.notices,
    })
}

/// The most characters of a question kept (the rest is cut, and says so).
const MAX_QUESTION_CHARS: usize = 2000;

/// The agent asked the user a question: the loop pauses (nothing counted
/// for this stop) until the user answers with `ralph say`, which resumes it.
fn asks(progress: Progress, question: String) -> Decision {
    let question = match question.char_indices().nth(MAX_QUESTION_CHARS) {
        Some((at, _)) => format!("{}…", &question[..at]),
        None => question,
    };
    Decision::Wait {
        progress,
        why: format!("the agent asks: {question}"),
        pause: true,
        tell: true,
        question: Some(question),
    }
}

/// What `--gate` guidance refuses a promise as, where a gate's command
/// would be named.
pub(crate) const GATE_GUIDANCE: &str = "ralph say --gate";

/// `ralph say --gate`: while gate guidance delivered since the last promise
/// exists, the promise is refused once, the guidance repeated, and the
/// refusal counts as a failed gate. The shell spends the guidance once a
/// promise met it (`engine.rs`).
fn gate_guidance(state: &LoopState, seen: &Observation, turn: &mut Turn) -> Result<bool, Early> {
    if seen.gate_guidance.is_empty() {
        return Ok(false);
    }
    turn.notes
        .push(ralph_state::messages::gate_refused(&seen.gate_guidance));
    verify_failures(state, GATE_GUIDANCE, &mut turn.progress)?;
    Ok(true)
}

/// `--fresh-at`, after the wrap-up turn: the loop pauses, uncounted, until
/// the owner's `/clear` (the session hooks hand it, active, to the
/// conversation that opens) or, with `--fresh-via run`, for the run the
/// hook starts. A loop resumed in the same conversation after such a pause
/// starts over: the wrap-up comes again at the threshold. The stage is a
/// field the agent can write, so the pause also needs the context measured
/// at or past the threshold now: a forged stage alone starts nothing.
fn fresh_pause(state: &LoopState, seen: &Observation, turn: &mut Turn) -> Option<Decision> {
    use ralph_state::fields::state::{FRESH_NONE, FRESH_WAITING, FRESH_WRAP_UP};
    let threshold = state.fresh_at?;
    match state.progress.fresh_stage {
        FRESH_WRAP_UP if seen.context.and_then(|f| threshold.reached(&f)) == Some(true) => {
            turn.progress.fresh_stage = FRESH_WAITING;
            let fill = seen
                .context
                .map_or_else(|| "context not measured".to_owned(), |f| f.words());
            Some(Decision::Wait {
                progress: turn.progress.clone(),
                why: format!(
                    "wrapped up for a fresh context ({fill}; --fresh-at {}): waiting for /clear",
                    threshold.render()
                ),
                pause: true,
                tell: true,
                question: None,
            })
        }
        _ => {
            turn.progress.fresh_stage = FRESH_NONE;
            None
        }
    }
}

/// `--fresh-at`: the context the last request sent reached the threshold,
/// so this continuation is the wrap-up turn: the agent is asked to leave
/// what the next agent needs, and the next stop pauses the loop. A
/// percentage with the window unknown never reaches (nothing is guessed).
fn fresh_wrap_up(state: &LoopState, seen: &Observation, turn: &mut Turn) {
    use ralph_state::fields::state::FRESH_WRAP_UP;
    let (Some(threshold), Some(fill)) = (state.fresh_at, seen.context) else {
        return;
    };
    if threshold.reached(&fill) != Some(true) {
        return;
    }
    turn.progress.fresh_stage = FRESH_WRAP_UP;
    turn.notes.push(format!(
        "Context: {} (--fresh-at {}). This is your last turn in this conversation: start no new work. Write what the next agent needs into the project's progress file (what is done, what is next, what failed and why), commit your work, then end your turn. A fresh conversation takes the loop over with the same task and its files.",
        fill.words(),
        threshold.render()
    ));
    turn.notices.push(format!(
        "context {}: one wrap-up turn, then the loop pauses for /clear (--fresh-at {})",
        fill.words(),
        threshold.render()
    ));
}

/// Refusals for the paths before a loop ends this way, when
/// `--max-verify-failures` is off: the breaker that ends a loop whose agent
/// keeps claiming done with a protected path changed.
pub(crate) const PATH_REFUSALS_LIMIT: u64 = 3;

/// The name a story refused by `--protect`/`--scope` gives as its check.
pub(crate) const PATHS_CHECK: &str = "--protect/--scope";

/// Counted like [`PATHS_CHECK`].
pub use ralph_state::fields::stories::CRITERIA_CHECK;

/// `--protect` and `--scope`: a protected path that differs from the work
/// tree at arming is named at every continuation; a claim of done (the
/// promise, or every story passing) is refused while one differs or a
/// changed path is outside the scope, before any gate runs. Each refusal
/// counts as a failed gate (`verify_failures`), and the loop ends at
/// `--max-verify-failures`, or at [`PATH_REFUSALS_LIMIT`] when that is off.
/// Returns whether the claim was refused.
fn guarded_paths(
    state: &LoopState,
    seen: &Observation,
    reply: &str,
    turn: &mut Turn,
) -> Result<bool, Early> {
    use crate::decide::path_words as words;
    let rules = &state.paths;
    let Some((protected, outside)) =
        path_violations_but(state, &seen.changed_paths, &seen.dependency_only)
    else {
        return Ok(false);
    };
    if seen.changed_paths == ChangedPaths::Unknown {
        turn.notes.push(words::UNKNOWN.to_owned());
        turn.notices.push(words::unknown_notice());
    }
    let tree = rules.armed_tree.as_deref().unwrap_or("");
    let known = seen.changed_paths != ChangedPaths::Unknown;
    if !protected.is_empty() && known {
        turn.notes.push(words::protected(&protected, tree));
    }
    let promised = state
        .completion_promise
        .as_deref()
        .is_some_and(|p| promise::speaks(reply, p))
        || (state.gate_alone() && turn_changed(state, seen));
    let all_pass = seen
        .prd
        .as_ref()
        .is_some_and(|p| ralph_state::fields::stories::all_pass(&p.stories));
    if !(promised || all_pass) || (protected.is_empty() && outside.is_empty()) {
        if !protected.is_empty() && known {
            turn.notices.push(words::protected_notice(&protected));
        }
        return Ok(false);
    }
    turn.notes
        .push(words::refused(&protected, &outside, &rules.scope));
    let what = if promised {
        "promise"
    } else {
        "passing stories"
    };
    turn.notices.push(words::refused_notice(
        what,
        &protected,
        &outside,
        &rules.scope,
    ));
    let counts = &mut turn.progress.counts;
    counts.verify_failures = counts.verify_failures.saturating_add(1).min(MAX_COUNT);
    let limit = state
        .guards
        .max_verify_failures
        .or(Limit::new(PATH_REFUSALS_LIMIT));
    if limit.reached(counts.verify_failures) {
        return Err(Early::End(
            Outcome::Guard(Tripped::VerifyFailures),
            words::ended(counts.verify_failures, &protected, &outside),
        ));
    }
    Ok(true)
}

/// The progress file the loop's agent keeps (`ralph init`): in every scope.
pub(crate) const PROGRESS_FILE: &str = "ralph/progress.txt";

/// The protected paths that differ and the changed paths outside the
/// scope (the loop's PRD file is in every scope: the agent marks stories
/// there); `None` when the paths were not compared. A comparison that could
/// not be made counts as a protected path changed; a manifest in
/// `dependency_only` (changed only in its dependency lists) does not.
pub(crate) fn path_violations_but(
    state: &LoopState,
    changed: &ChangedPaths,
    dependency_only: &[String],
) -> Option<(Vec<String>, Vec<String>)> {
    use crate::decide::path_words as words;
    let rules = &state.paths;
    match changed {
        ChangedPaths::NotAsked => None,
        ChangedPaths::Unknown => Some((vec![words::UNKNOWN_PATH.to_owned()], Vec::new())),
        ChangedPaths::Known(paths) => {
            let protect = ralph_state::globs::Globs::new(&rules.protect);
            let scope = ralph_state::globs::Globs::new(&rules.scope);
            let prd_file = state.prd.as_ref().map(|p| p.path.as_str());
            let protected = protect
                .matching(paths)
                .into_iter()
                .filter(|p| !dependency_only.iter().any(|d| d == p))
                .map(str::to_owned)
                .collect();
            let outside = paths
                .iter()
                .filter(|p| !scope.is_empty() && !scope.matches(p))
                .filter(|p| Some(p.as_str()) != prd_file && p.as_str() != PROGRESS_FILE)
                .cloned()
                .collect();
            Some((protected, outside))
        }
    }
}

/// The promise completes the loop, or asks for the gate, or (the gate
/// failed) is refused with a note for the agent.
fn completion_promise(
    state: &LoopState,
    seen: &Observation,
    reply: &str,
    turn: &mut Turn,
) -> Result<(), Early> {
    let Some(expected) = &state.completion_promise else {
        return Ok(());
    };
    if !promise::speaks(reply, expected) {
        return Ok(());
    }
    if gate_guidance(state, seen, turn)? {
        return Ok(());
    }
    match (&state.guards.verify, &seen.verification) {
        (None, _) => Err(Early::End(
            Outcome::Completed,
            format!(
                "the agent gave the promise `{expected}` at iteration {}",
                state.iteration
            ),
        )),
        (Some(command), None) => Err(Early::Verify(command.clone())),
        (Some(command), Some(v)) if v.passed => Err(Early::End(
            Outcome::Completed,
            format!(
                "the agent gave the promise `{expected}` and `{command}` passed, at iteration {}",
                state.iteration
            ),
        )),
        (Some(command), Some(v)) => {
            turn.notes.push(refusal(expected, command, v));
            verify_failures(state, command, &mut turn.progress)?;
            same_failure(state, "the gate", command, v, &mut turn.progress)
        }
    }
}

/// Whether the turn that just ended changed the work tree or HEAD (an edit
/// the transcript proves counts as a change): its fingerprint differs from
/// the last stop's, or is unknown (no git, or not read in time), or this is
/// the first stop measured. Both drivers take the fingerprint the same way
/// for a [`LoopState::gate_alone`] loop.
fn turn_changed(state: &LoopState, seen: &Observation) -> bool {
    match (&seen.tree_fingerprint, &state.progress.tree_fingerprint) {
        (Some(now), Some(before)) => now != before,
        _ => true,
    }
}

/// `--verify` without a completion promise: the gate runs at every stop
/// whose turn changed something ([`turn_changed`]); exit 0 completes the
/// loop, a failure is counted as a refused promise would be and its output
/// goes to the agent. A turn that changed nothing leaves the tree the last
/// gate already judged, so the gate does not run again on it.
fn gate_alone(state: &LoopState, seen: &Observation, turn: &mut Turn) -> Result<(), Early> {
    let Some(command) = &state.guards.verify else {
        return Ok(());
    };
    if !turn_changed(state, seen) {
        return Ok(());
    }
    match &seen.verification {
        None => Err(Early::Verify(command.clone())),
        Some(v) if v.passed => Err(Early::End(
            Outcome::Completed,
            format!("`{command}` passed, at iteration {}", state.iteration),
        )),
        Some(v) => {
            let output = match v.output_tail.trim_end() {
                "" => "It printed nothing.".to_owned(),
                tail => format!("Last lines of its output:\n{tail}"),
            };
            turn.notes.push(format!(
                "The loop's gate `{command}` failed ({}); the loop completes once it passes. Fix the cause.\n{output}",
                v.status
            ));
            verify_failures(state, command, &mut turn.progress)?;
            same_failure(state, "the gate", command, v, &mut turn.progress)
        }
    }
}

/// `--prd`: the stories say when the loop is done. A story set back at
/// this stop counts as a failed gate; every story passing completes the
/// loop (once the loop's `--verify` passes); only blocked stories left
/// ends it as blocked; a promise while stories are open is refused.
fn stories_complete(
    state: &LoopState,
    seen: &Observation,
    reply: &str,
    turn: &mut Turn,
) -> Result<(), Early> {
    use ralph_state::messages::stories as words;
    let Some(prd) = &seen.prd else {
        return Ok(());
    };
    // What passes now is what was accepted: only a story that turns to
    // passing after this is checked.
    turn.progress.prd_passed = prd
        .stories
        .iter()
        .filter(|s| s.passes)
        .map(|s| s.id.clone())
        .collect();
    for id in &prd.checked {
        turn.notices.push(words::check_passed(id));
    }
    for refusal in &prd.refused {
        turn.notes.push(words::refused(refusal));
        turn.notices.push(words::refused_notice(&prd.file, refusal));
    }
    if let Some(first) = prd.refused.first() {
        let (command, why) = match first {
            crate::decide::observation::StoryRefusal::Failed {
                command,
                verification,
                ..
            } => (command, verification.status.as_str()),
            crate::decide::observation::StoryRefusal::Unrecorded { command, .. } => (command, ""),
        };
        count_refusal(state, command, why, &mut turn.progress)?;
    } else if !prd.changed.is_empty() {
        // Named at every continuation while the criteria differ, and a PRD
        // whose every story passes only because one was removed or
        // rewritten is not done.
        let why = format!(
            "stories changed since arming: {}",
            crate::decide::path_words::listed(&prd.changed)
        );
        turn.notes.push(words::criteria_changed(&why));
        if ralph_state::fields::stories::all_pass(&prd.stories) {
            return count_refusal(state, CRITERIA_CHECK, &why, &mut turn.progress);
        }
    }
    if ralph_state::fields::stories::all_pass(&prd.stories) {
        return match (&state.guards.verify, &seen.verification) {
            (Some(command), None) => Err(Early::Verify(command.clone())),
            (Some(command), Some(v)) if !v.passed => {
                turn.notes.push(format!(
                    "Every story passes, but the loop's check `{command}` failed ({}). Fix the cause.\n{}",
                    v.status,
                    v.output_tail.trim_end()
                ));
                verify_failures(state, command, &mut turn.progress)
            }
            _ => Err(Early::End(
                Outcome::Completed,
                words::done(prd, state.iteration),
            )),
        };
    }
    if ralph_state::fields::stories::only_blocked_left(&prd.stories) {
        return Err(Early::End(Outcome::Blocked, words::blocked(prd)));
    }
    if let Some(expected) = &state.completion_promise
        && promise::speaks(reply, expected)
    {
        turn.notes
            .push(words::promise_while_open(expected, &prd.stories));
    }
    Ok(())
}

/// Counts a story refusal as a failed gate; `--protect`/`--scope` and
/// criteria refusals end the loop at their own limit when
/// `--max-verify-failures` is off, and say why.
fn count_refusal(
    state: &LoopState,
    command: &str,
    why: &str,
    progress: &mut Progress,
) -> Result<(), Early> {
    if command != PATHS_CHECK && command != CRITERIA_CHECK {
        return verify_failures(state, command, progress);
    }
    let mut limited = state.clone();
    limited.guards.max_verify_failures = limited
        .guards
        .max_verify_failures
        .or(Limit::new(PATH_REFUSALS_LIMIT));
    verify_failures(&limited, command, progress).map_err(|e| match e {
        Early::End(outcome, detail) => Early::End(outcome, format!("{detail} ({why})")),
        other => other,
    })
}

/// Counts a failed gate, and ends the loop once `max_verify_failures`
/// gates have failed. A passing gate completes the loop, so the count
/// never needs resetting: the failures counted are all in a row.
fn verify_failures(state: &LoopState, command: &str, progress: &mut Progress) -> Result<(), Early> {
    progress.counts.verify_failures = progress
        .counts
        .verify_failures
        .saturating_add(1)
        .min(MAX_COUNT);
    let limit = state.guards.max_verify_failures;
    if limit.reached(progress.counts.verify_failures) {
        return Err(Early::End(
            Outcome::Guard(Tripped::VerifyFailures),
            if state.gate_alone() {
                format!(
                    "the gate `{command}` failed {}",
                    ralph_state::plural::times(progress.counts.verify_failures)
                )
            } else {
                format!(
                    "the promise was refused {}: `{command}` kept failing",
                    ralph_state::plural::times(progress.counts.verify_failures)
                )
            },
        ));
    }
    Ok(())
}

/// The `--check` command, at a stop where the loop would go on: run it
/// first (the shell comes back with its result), then tell the agent how
/// it went and feed the breakers on its failures. Not at a stop where the
/// gate just refused the promise: the agent already has that output.
fn check(state: &LoopState, seen: &Observation, turn: &mut Turn) -> Result<(), Early> {
    let Some(command) = &state.guards.check else {
        return Ok(());
    };
    if seen.verification.is_some() {
        return Ok(());
    }
    let Some(v) = &seen.check else {
        return Err(Early::Check(command.clone()));
    };
    turn.notes.push(check_note(command, v));
    same_failure(state, "the check", command, v, &mut turn.progress)?;
    stall(state, command, v, &mut turn.progress)
}

/// What the agent reads about the check under the prompt.
fn check_note(command: &str, v: &Verification) -> String {
    if v.passed {
        return format!("The check `{command}` passed.");
    }
    let what = if v.exit_code.is_none() && v.status.starts_with("timed out") {
        format!("{} and was stopped", v.status)
    } else {
        format!("failed ({})", v.status)
    };
    let output = match v.output_tail.trim_end() {
        "" => "It printed nothing.".to_owned(),
        tail => format!("Last lines of its output:\n{tail}"),
    };
    format!("The check `{command}` {what}: fix what it reports first.\n{output}")
}

/// Counts failures in a row that look the same (the masked output's
/// fingerprint, `failure.rs`), and ends the loop at `max_same_failure`. A
/// pass starts the count over; so does a failure that looks different.
fn same_failure(
    state: &LoopState,
    what: &str,
    command: &str,
    v: &Verification,
    progress: &mut Progress,
) -> Result<(), Early> {
    let counts = &mut progress.counts;
    if v.passed {
        counts.same_failures = 0;
        counts.failure_fingerprint = None;
        return Ok(());
    }
    let print = ralph_fs::failure::failure_fingerprint(command, &v.output_tail);
    counts.same_failures = if counts.failure_fingerprint.as_deref() == Some(print.as_str()) {
        counts.same_failures.saturating_add(1).min(MAX_COUNT)
    } else {
        1
    };
    counts.failure_fingerprint = Some(print);
    let limit = state.guards.max_same_failure;
    if limit.reached(counts.same_failures) {
        // One line: this sentence is the loop's reason, shown on one line
        // by the end notice, `ralph status` and the report; the output's
        // last lines are joined with ⏎, never a line break shown as `\n`.
        let lines: Vec<&str> = v
            .output_tail
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let output = match lines.get(lines.len().saturating_sub(3)..) {
            None | Some([]) => "it printed nothing".to_owned(),
            Some(last) => format!("its output ends: {}", excerpt(&last.join(" ⏎ "))),
        };
        return Err(Early::End(
            Outcome::Guard(Tripped::SameFailure),
            format!(
                "{what} `{command}` failed the same way {} in a row ({}); {output}",
                ralph_state::plural::times(counts.same_failures),
                v.status
            ),
        ));
    }
    Ok(())
}

/// Follows the check's failure count, when its output has one: a new
/// lowest count (or a pass) starts the count of checks without one over;
/// `stall_after` checks in a row without one end the loop.
fn stall(
    state: &LoopState,
    command: &str,
    v: &Verification,
    progress: &mut Progress,
) -> Result<(), Early> {
    let counts = &mut progress.counts;
    let failures = match (v.failures, v.passed) {
        (Some(n), _) => n,
        (None, true) => 0,
        (None, false) => return Ok(()),
    };
    counts.failure_trend = Some(push_trend(counts.failure_trend.as_deref(), failures));
    let new_low = counts.lowest_failures.is_none_or(|low| failures < low);
    if new_low {
        counts.lowest_failures = Some(failures.min(MAX_COUNT));
    }
    counts.stalled_checks = if new_low || v.passed {
        0
    } else {
        counts.stalled_checks.saturating_add(1).min(MAX_COUNT)
    };
    let limit = state.guards.stall_after;
    if limit.reached(counts.stalled_checks) {
        return Err(Early::End(
            Outcome::Guard(Tripped::Stalled),
            format!(
                "`{command}` reported {}; none of the last {} went below {} (counts: {})",
                ralph_state::plural::count(failures, "failure", "failures"),
                ralph_state::plural::count(counts.stalled_checks, "check", "checks"),
                counts.lowest_failures.unwrap_or(failures),
                ralph_state::fields::guards::trend_words(
                    counts.failure_trend.as_deref().unwrap_or("")
                )
            ),
        ));
    }
    Ok(())
}

/// The trend with `failures` added, keeping the last few counts.
fn push_trend(trend: Option<&str>, failures: u64) -> String {
    let mut counts: Vec<String> = trend
        .unwrap_or("")
        .split_whitespace()
        .filter(|w| w.bytes().all(|b| b.is_ascii_digit()) && w.len() <= 20)
        .map(str::to_owned)
        .collect();
    counts.push(failures.min(MAX_COUNT).to_string());
    let drop = counts
        .len()
        .saturating_sub(ralph_state::fields::guards::FAILURE_TREND_LEN);
    counts.drain(..drop);
    counts.join(" ")
}

fn abort_promise(state: &LoopState, reply: &str) -> Result<(), Early> {
    match &state.abort_promise {
        Some(abort) if promise::speaks(reply, abort) => Err(Early::End(
            Outcome::Aborted,
            format!(
                "the agent said it is blocked (`{abort}`) at iteration {}: {}",
                state.iteration,
                excerpt(reply)
            ),
        )),
        _ => Ok(()),
    }
}

fn iteration_limit(state: &LoopState) -> Result<(), Early> {
    if state.at_limit() {
        return Err(Early::End(
            Outcome::MaxIterations,
            ralph_state::messages::limit_reached(state),
        ));
    }
    if state.iteration >= MAX_COUNT {
        return Err(Early::End(
            Outcome::MaxIterations,
            format!("reached {MAX_COUNT} iterations, the most a loop file can count"),
        ));
    }
    Ok(())
}

fn time_budget(state: &LoopState, seen: &Observation, turn: &mut Turn) -> Result<(), Early> {
    let (Some(limit), Some(now)) = (state.guards.max_duration_secs, seen.now) else {
        return Ok(());
    };
    let elapsed = elapsed_time(state, now, &mut turn.progress, &mut turn.notices);
    if elapsed >= limit {
        return Err(Early::End(
            Outcome::Guard(Tripped::TimeBudget),
            format!(
                "ran {} of its {} time budget",
                format_duration(elapsed),
                format_duration(limit)
            ),
        ));
    }
    if percent_reached(elapsed, limit) {
        turn.notes.push(format!("Time budget: {} of {} used. Wrap up: finish the current step, commit, and leave notes for the next run.", format_duration(elapsed), format_duration(limit)));
    }
    Ok(())
}

/// The hook knows the tokens the transcript proves; the reply that just
/// ended may not be written yet. The budget counts it at the size of the
/// largest message seen, so the loop ends before the budget is passed,
/// or at worst one turn after (when that reply was larger than any before).
/// Held at the cap the file can store, so the figure always writes back.
fn token_budget(state: &LoopState, seen: &Observation, turn: &mut Turn) -> Result<(), Early> {
    let tokens = seen
        .tokens_used
        .unwrap_or(state.progress.tokens_used)
        .min(MAX_TOKENS);
    let unseen = unseen_tokens(state, seen);
    if let Some(limit) = state.guards.max_tokens {
        let projected = tokens.saturating_add(unseen);
        if projected >= limit {
            return Err(Early::End(
                Outcome::Guard(Tripped::TokenBudget),
                format!(
                    "used {} of its {limit} token budget",
                    token_words(tokens, unseen)
                ),
            ));
        }
        if percent_reached(projected, limit) {
            turn.notes.push(format!("Token budget: {} of {limit} used. Wrap up: finish the current step, commit, and leave notes for the next run.", token_words(tokens, unseen)));
        }
    }
    turn.progress.tokens_used = tokens;
    turn.progress.largest_reply_tokens = largest_reply(state, seen);
    turn.progress.unseen_tokens = unseen;
    turn.progress.counts.replies_behind = replies_behind(state, seen);
    Ok(())
}

/// The dollar budget: what the loop spent against `max_cost`. `ralph run`
/// knows each iteration's cost from the agent; the hook prices what the
/// transcript proves, so a reply not written yet is counted at the next
/// stop (the loop ends at most one turn late).
fn cost_budget(state: &LoopState, seen: &Observation, turn: &mut Turn) -> Result<(), Early> {
    use ralph_state::money::{MAX_MONEY, Money};
    let spent = seen
        .cost_usd
        .unwrap_or(state.progress.counts.cost_usd)
        .min(MAX_MONEY);
    turn.progress.counts.cost_usd = spent;
    let largest = state
        .progress
        .counts
        .largest_reply_cost_usd
        .max(seen.largest_reply_cost);
    turn.progress.counts.largest_reply_cost_usd = largest;
    let Some(limit) = state.guards.max_cost_usd else {
        return Ok(());
    };
    // Like the token budget: each reply the transcript lacks is counted at
    // the dearest message seen, so a lagging transcript cannot make it late.
    let unseen = Money(largest.0.saturating_mul(replies_behind(state, seen))).min(MAX_MONEY);
    let projected = spent.plus(unseen);
    let words = if unseen.0 == 0 {
        spent.dollars()
    } else {
        format!(
            "{} known + ~{} not yet in the transcript",
            spent.dollars(),
            unseen.dollars()
        )
    };
    if projected >= limit {
        return Err(Early::End(
            Outcome::Guard(Tripped::CostBudget),
            format!("spent {words} of its {} dollar budget", limit.dollars()),
        ));
    }
    if percent_reached(projected.0, limit.0) {
        turn.notes.push(format!("Dollar budget: {words} of {} spent. Wrap up: finish the current step, commit, and leave notes for the next run.", limit.dollars()));
    }
    Ok(())
}

/// `/goal` drives the session: its own Stop hook decides whether the turn
/// goes on, and both hooks share the client's block cap, so ralph lets the
/// stop through (uncounted; budgets above still count) and says so once.
/// The loop goes on at the first stop after the goal is met.
fn goal(state: &LoopState, seen: &Observation, turn: &mut Turn) -> Option<Decision> {
    let active = seen
        .goal_active
        .unwrap_or(state.progress.counts.goal_stops > 0);
    if !active {
        turn.progress.counts.goal_stops = 0;
        return None;
    }
    let before = state.progress.counts.goal_stops;
    let mut progress = turn.progress.clone();
    progress.counts.goal_stops = before.saturating_add(1).min(MAX_COUNT);
    Some(Decision::Wait {
        progress,
        why: "/goal drives this session: its own Stop hook continues the turn, so ralph's loop waits until the goal is met".to_owned(),
        pause: false,
        tell: before == 0,
        question: None,
    })
}

fn stuck_breaker(state: &LoopState, reply: &str, progress: &mut Progress) -> Result<(), Early> {
    let fingerprint = (!reply.trim().is_empty()).then(|| fingerprint_words(reply));
    progress.same_reply_count = match (&fingerprint, &progress.reply_fingerprint) {
        (Some(new), Some(old)) if new == old => progress.same_reply_count.saturating_add(1),
        (Some(_), _) => 1,
        (None, _) => 0,
    };
    progress.reply_fingerprint = fingerprint;
    let stuck_after = state.guards.stuck_after;
    if stuck_after.reached(progress.same_reply_count) {
        return Err(Early::End(
            Outcome::Guard(Tripped::Stuck),
            format!(
                "the same reply came {} in a row",
                ralph_state::plural::times(progress.same_reply_count)
            ),
        ));
    }
    Ok(())
}

fn no_progress_breaker(
    state: &LoopState,
    seen: &Observation,
    progress: &mut Progress,
) -> Result<(), Early> {
    let Some(tree) = &seen.tree_fingerprint else {
        return Ok(());
    };
    progress.no_progress_count = match &progress.tree_fingerprint {
        Some(old) if old == tree => progress.no_progress_count.saturating_add(1),
        _ => 0,
    };
    progress.tree_fingerprint = Some(tree.clone());
    let limit = state.guards.no_progress_after;
    if limit.reached(progress.no_progress_count) {
        return Err(Early::End(
            Outcome::Guard(Tripped::NoProgress),
            format!(
                "no change to the working tree or HEAD for {}",
                ralph_state::plural::iterations(progress.no_progress_count)
            ),
        ));
    }
    Ok(())
}

/// Claude Code lets a Stop hook block `block_cap` times in a row and
/// overrides the next block, ending the turn with its own warning. Its
/// count starts over at a new turn (`stop_hook_active: false`) and after a
/// continuation that ran a tool. ralph counts its own blocks the same way,
/// trusting only tool use the transcript proves (a tool it cannot see yet
/// makes it end early, never late), and ends the loop itself at the stop
/// where one more block would be overridden.
fn block_cap(seen: &Observation, progress: &mut Progress) -> Result<(), Early> {
    let blocks = if seen.stop_hook_active == Some(false) || seen.ran_tool == Some(true) {
        0
    } else {
        progress.idle_blocks
    };
    if seen.block_cap > 0 && blocks >= seen.block_cap {
        return Err(Early::End(
            Outcome::BlockCap,
            format!(
                "it continued the turn {} in a row without a tool call, the most Claude Code allows (CLAUDE_CODE_STOP_HOOK_BLOCK_CAP={}); one more would be overridden, so the loop ends here",
                ralph_state::plural::times(blocks),
                seen.block_cap
            ),
        ));
    }
    progress.idle_blocks = blocks.saturating_add(1);
    Ok(())
}

/// Whether `used` reached [`WARN_AT_PERCENT`] of `limit`, without overflow.
fn percent_reached(used: u64, limit: u64) -> bool {
    u128::from(used) * 100 >= u128::from(limit) * u128::from(WARN_AT_PERCENT)
}

/// The time counted against the budget, brought up to `now`; records the
/// new total in `progress`. Two readings, and the larger one counts: the
/// time since `started_at`, and the running total kept in the file, which
/// grows at each stop by the non-negative step since the clock reading of
/// the previous stop. A clock set back (or a `started_at` in the future)
/// can pause the count for a step, but never lowers it or switches the
/// budget off.
fn elapsed_time(
    state: &LoopState,
    now: Timestamp,
    progress: &mut Progress,
    notices: &mut Vec<String>,
) -> u64 {
    let since_start = match state.started_at {
        Some(start) if start > now => {
            notices.push(format!(
                "⚠ ralph: the loop's started_at ({start}) is later than the clock ({now}); the time budget goes on counting from the time already used."
            ));
            0
        }
        Some(start) => now.secs_since(start),
        None => 0,
    };
    let counted = match (progress.elapsed_secs, progress.clock_at) {
        (Some(counted), Some(last)) => counted.saturating_add(now.secs_since(last)),
        _ => 0,
    };
    let elapsed = counted.max(since_start);
    progress.elapsed_secs = Some(elapsed);
    progress.clock_at = Some(now);
    elapsed
}

/// The largest single message seen in the loop, this stop included.
fn largest_reply(state: &LoopState, seen: &Observation) -> u64 {
    state
        .progress
        .largest_reply_tokens
        .max(seen.largest_reply_tokens)
}

/// The estimate for the replies the transcript does not hold yet: the
/// largest message seen so far for each (0 when the transcript holds the
/// reply, or when no message was seen yet and there is nothing to go by).
pub fn unseen_tokens(state: &LoopState, seen: &Observation) -> u64 {
    largest_reply(state, seen)
        .saturating_mul(replies_behind(state, seen))
        .min(MAX_TOKENS)
}

/// How many replies the transcript lacks at this stop. Each stop brings one
/// reply that ends a turn; the transcript shows `turn_ends` of them since
/// the last stop. So what it lacked then, plus this stop's reply, minus
/// those it shows now, is missing; at least this stop's reply when the
/// transcript does not end with it, and none when it does (which also
/// clears any miscount).
pub fn replies_behind(state: &LoopState, seen: &Observation) -> u64 {
    if !seen.reply_missing {
        return 0;
    }
    let Some(turn_ends) = seen.turn_ends else {
        return 1;
    };
    let before = state.progress.counts.replies_behind;
    before
        .saturating_add(1)
        .saturating_sub(turn_ends)
        .clamp(1, MAX_COUNT)
}

/// `120`, or `105 known + ~15 not yet in the transcript` (while the loop
/// runs: the transcript may still record them).
pub fn token_words(known: u64, unseen: u64) -> String {
    if unseen == 0 {
        known.to_string()
    } else {
        format!("{known} known + ~{unseen} not yet in the transcript")
    }
}

/// Tokens of a loop that has ended: what the transcript proved, and the
/// estimate for replies it never showed while the loop ran (nothing will
/// count them later).
pub fn token_words_final(known: u64, unseen: u64) -> String {
    if unseen == 0 {
        known.to_string()
    } else {
        format!(
            "{known} counted + ~{unseen} estimated for replies the transcript had not recorded when the loop ended"
        )
    }
}

/// The footer's token line: the count against the budget, and, when this
/// turn's reply is not in the transcript yet, that it is counted at the
/// next stop (so `0 of 15000` after a long turn reads as what it is).
pub fn token_note(known: u64, unseen: u64, replies_behind: u64, limit: u64) -> String {
    if unseen > 0 {
        format!(
            "Tokens: {known} of {limit} known, and ~{unseen} more for replies not in the transcript yet (counted once it shows them)."
        )
    } else if replies_behind > 0 {
        format!(
            "Tokens: {known} of {limit} counted so far; the last reply is not in the transcript yet and is counted at the next stop."
        )
    } else {
        format!("Tokens: {known} of {limit}.")
    }
}

fn refusal(expected: &str, command: &str, v: &Verification) -> String {
    let output = match v.output_tail.trim_end() {
        "" => "It printed nothing.".to_owned(),
        tail => format!("Last lines of its output:\n{tail}"),
    };
    format!(
        "Your promise `{expected}` was refused: the verification command `{command}` failed ({}). Fix the cause, then give the promise again.\n{output}",
        v.status,
    )
}

/// At most 300 characters of the reply, whitespace collapsed, for
/// messages. Reads only as far as it needs: a huge reply is never copied.
pub fn excerpt(reply: &str) -> String {
    const MAX_CHARS: usize = 300;
    let mut out = String::new();
    let mut count = 0;
    for word in reply.split_whitespace() {
        let space = (!out.is_empty()).then_some(' ');
        for c in space.into_iter().chain(word.chars()) {
            if count == MAX_CHARS {
                out.push('…');
                return out;
            }
            out.push(c);
            count += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(text: &str) -> LoopState {
        LoopState::parse(&format!(
            "---\nsession_id: s\nstarted_at: \"1970-01-01T00:00:00Z\"\n{text}---\nPrompt\n"
        ))
        .unwrap()
    }

    fn seen(reply: &str) -> Observation {
        Observation {
            reply: Some(reply.into()),
            now: Some(Timestamp(0)),
            block_cap: 0,
            ..Observation::default()
        }
    }

    /// A stop whose last request sent `tokens` into a window the status line reported
    /// (`None`: unknown).
    fn filled(reply: &str, tokens: u64, window: Option<u64>) -> Observation {
        Observation {
            context: Some(ralph_state::context::Fill { tokens, window }),
            ..seen(reply)
        }
    }

    #[test]
    fn fresh_at_asks_one_wrap_up_then_pauses_for_clear() {
        use ralph_state::fields::state::{FRESH_NONE, FRESH_WAITING, FRESH_WRAP_UP};
        let armed = state("iteration: 3\nfresh_at: \"60%\"\n");
        // Under the threshold, or the window unknown: the loop goes on as ever.
        for under in [
            filled("a", 119_000, Some(200_000)),
            filled("a", 190_000, None),
            seen("a"),
        ] {
            match decide(&armed, &under) {
                Decision::Continue {
                    progress, notes, ..
                } => {
                    assert_eq!(progress.fresh_stage, FRESH_NONE);
                    assert!(notes.is_empty(), "{notes:?}");
                }
                other => panic!("{other:?}"),
            }
        }
        // At 60 %: the wrap-up turn, counted like any continuation.
        let Decision::Continue {
            next,
            progress,
            notes,
            notices,
        } = decide(&armed, &filled("b", 120_000, Some(200_000)))
        else {
            panic!("not a continuation");
        };
        assert_eq!((next, progress.fresh_stage), (4, FRESH_WRAP_UP));
        assert!(
            notes[0].contains("last turn in this conversation"),
            "{notes:?}"
        );
        assert!(notices[0].contains("60% of 200k"), "{notices:?}");
        // Its stop: paused, uncounted, waiting for /clear.
        let wrapped = state("iteration: 4\nfresh_at: \"60%\"\nfresh_stage: 1\n");
        match decide(&wrapped, &filled("c", 121_000, Some(200_000))) {
            Decision::Wait {
                progress,
                pause,
                why,
                ..
            } => {
                assert!(pause);
                assert_eq!(progress.fresh_stage, FRESH_WAITING);
                assert!(why.contains("waiting for /clear"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // A stage the agent wrote, with the context under the threshold: nothing happens.
        match decide(&wrapped, &filled("c", 20_000, Some(200_000))) {
            Decision::Continue { progress, .. } => assert_eq!(progress.fresh_stage, FRESH_NONE),
            other => panic!("{other:?}"),
        }
        // Resumed in the same conversation instead: the stage starts over.
        let resumed = state("iteration: 4\nfresh_at: \"60%\"\nfresh_stage: 2\n");
        match decide(&resumed, &filled("d", 10_000, Some(200_000))) {
            Decision::Continue { progress, .. } => assert_eq!(progress.fresh_stage, FRESH_NONE),
            other => panic!("{other:?}"),
        }
        // Tokens need no window.
        let tokens = state("fresh_at: \"150000\"\n");
        match decide(&tokens, &filled("e", 150_000, None)) {
            Decision::Continue { progress, .. } => assert_eq!(progress.fresh_stage, FRESH_WRAP_UP),
            other => panic!("{other:?}"),
        }
    }

    /// A `--prd` stop: the stories as `(id, passes, blocked)`.
    fn with_stories(reply: &str, stories: &[(&str, bool, Option<&str>)]) -> Observation {
        let text = serde_json::json!({"userStories": stories
            .iter()
            .map(|(id, passes, blocked)| serde_json::json!({"id": id, "passes": passes, "blocked": blocked}))
            .collect::<Vec<_>>()})
        .to_string();
        Observation {
            prd: Some(crate::decide::observation::PrdSeen {
                file: "ralph/prd.json".into(),
                stories: ralph_state::fields::stories::parse("ralph/prd.json", &text).unwrap(),
                refused: Vec::new(),
                checked: Vec::new(),
                changed: Vec::new(),
            }),
            ..seen(reply)
        }
    }

    const TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

    fn guarded(extra: &str) -> LoopState {
        state(&format!(
            "completion_promise: DONE\nverify: make\nprotect: \"tests/**\"\nscope: \"src/** tests/**\"\narmed_tree: \"{TREE}\"\n{extra}"
        ))
    }

    fn changed(reply: &str, paths: &[&str]) -> Observation {
        Observation {
            changed_paths: ChangedPaths::Known(paths.iter().map(|p| (*p).to_owned()).collect()),
            ..seen(reply)
        }
    }

    #[test]
    fn a_gate_alone_is_refused_before_it_runs_while_a_protected_path_differs_but_not_for_a_dependency()
     {
        let s = state(&format!(
            "verify: make\nprotect: \"tests/** package.json\"\nscope: \"src/** package.json\"\narmed_tree: \"{TREE}\"\n"
        ));
        let d = decide(&s, &changed("done", &["tests/t.sh", "src/a.rs"]));
        let Decision::Continue {
            notes, progress, ..
        } = d
        else {
            panic!("refused, not run: {d:?}")
        };
        assert_eq!(progress.counts.verify_failures, 1);
        assert!(notes.iter().all(|n| !n.contains("promise")), "{notes:?}");
        // A manifest changed only in its dependencies, and the progress file: the gate runs.
        let mut o = changed("done", &["package.json", "src/a.rs", "ralph/progress.txt"]);
        o.dependency_only = vec!["package.json".into()];
        assert_eq!(
            decide(&s, &o),
            Decision::Verify {
                command: "make".into()
            }
        );
    }

    #[test]
    fn a_changed_protected_path_is_named_and_refuses_the_promise_before_the_gate() {
        let s = guarded("");
        let d = decide(&s, &changed("working", &["tests/t.sh", "src/a.rs"]));
        let Decision::Continue {
            notes,
            notices,
            progress,
            ..
        } = d
        else {
            panic!("goes on: {d:?}");
        };
        assert!(
            notes.iter().any(|n| n.contains("Protected paths differ")
                && n.contains("tests/t.sh")
                && n.contains(TREE)),
            "{notes:?}"
        );
        assert!(
            notices.iter().any(|n| n.contains("tests/t.sh")),
            "{notices:?}"
        );
        assert_eq!(progress.counts.verify_failures, 0, "no claim, no refusal");
        // The promise: refused without running `make`, and counted.
        let d = decide(&s, &changed("<promise>DONE</promise>", &["tests/t.sh"]));
        let Decision::Continue {
            notes, progress, ..
        } = d
        else {
            panic!("the promise is refused: {d:?}");
        };
        assert!(
            notes
                .iter()
                .any(|n| n.contains("was refused")
                    && n.contains("protected paths differ (tests/t.sh)")),
            "{notes:?}"
        );
        assert_eq!(progress.counts.verify_failures, 1);
        // The third refusal ends the loop, --max-verify-failures being off.
        let s = guarded("verify_failures: 2\n");
        let d = decide(&s, &changed("<promise>DONE</promise>", &["tests/t.sh"]));
        let Decision::End { outcome, detail } = d else {
            panic!("the breaker ends it: {d:?}");
        };
        assert_eq!(outcome, Outcome::Guard(Tripped::VerifyFailures));
        assert!(
            detail.contains("refused 3 times") && detail.contains("tests/t.sh"),
            "{detail}"
        );
        // A set --max-verify-failures is the limit instead.
        let s = guarded("verify_failures: 2\nmax_verify_failures: 5\n");
        assert!(matches!(
            decide(&s, &changed("<promise>DONE</promise>", &["tests/t.sh"])),
            Decision::Continue { .. }
        ));
        // Put back: the promise goes to the gate.
        let d = decide(
            &guarded(""),
            &changed("<promise>DONE</promise>", &["src/a.rs"]),
        );
        assert_eq!(
            d,
            Decision::Verify {
                command: "make".into()
            }
        );
    }

    #[test]
    fn a_change_outside_the_scope_refuses_the_promise_with_the_list() {
        let d = decide(
            &guarded(""),
            &changed("<promise>DONE</promise>", &["src/a.rs", "README.md"]),
        );
        let Decision::Continue { notes, .. } = d else {
            panic!("refused: {d:?}");
        };
        assert!(
            notes
                .iter()
                .any(|n| n.contains("outside the scope src/**, tests/** (README.md)")),
            "{notes:?}"
        );
        // Without the promise, a change outside the scope is not mentioned.
        let d = decide(&guarded(""), &changed("working", &["README.md"]));
        let Decision::Continue { notes, .. } = d else {
            panic!("{d:?}")
        };
        assert!(notes.iter().all(|n| !n.contains("scope")), "{notes:?}");
    }

    #[test]
    fn a_comparison_that_cannot_be_made_refuses_the_promise() {
        let seen = Observation {
            changed_paths: ChangedPaths::Unknown,
            ..seen("<promise>DONE</promise>")
        };
        let d = decide(&guarded(""), &seen);
        let Decision::Continue { notes, notices, .. } = d else {
            panic!("refused: {d:?}");
        };
        assert!(
            notes.iter().any(|n| n.contains("could not compare")),
            "{notes:?}"
        );
        assert!(!notices.is_empty());
    }

    #[test]
    fn with_a_prd_the_stories_decide_completion() {
        let s = state("prd: ralph/prd.json\ncompletion_promise: DONE\n");
        let open = with_stories(
            "<promise>DONE</promise>",
            &[("A", true, None), ("B", false, None)],
        );
        match decide(&s, &open) {
            Decision::Continue { notes, .. } => {
                assert!(
                    notes.iter().any(|n| n.contains("do not pass yet: B")),
                    "{notes:?}"
                );
            }
            d => panic!("a promise while B is open must be refused: {d:?}"),
        }
        let done = with_stories("no promise at all", &[("A", true, None), ("B", true, None)]);
        assert_eq!(outcome(&decide(&s, &done)), Some(Outcome::Completed));
        let stuck = with_stories("x", &[("A", true, None), ("B", false, Some("key"))]);
        assert_eq!(outcome(&decide(&s, &stuck)), Some(Outcome::Blocked));
        let skipped = with_stories("x", &[("A", false, None), ("B", false, Some("key"))]);
        assert_eq!(outcome(&decide(&s, &skipped)), None, "A is still open");
    }

    #[test]
    fn with_a_prd_the_loops_verify_gates_completion_and_refusals_count() {
        let s = state("prd: ralph/prd.json\nverify: make\nmax_verify_failures: 1\n");
        let done = with_stories("x", &[("A", true, None)]);
        assert_eq!(
            decide(&s, &done),
            Decision::Verify {
                command: "make".into()
            }
        );
        let mut refused = with_stories("x", &[("A", false, None)]);
        refused.prd.as_mut().unwrap().refused.push(
            crate::decide::observation::StoryRefusal::Unrecorded {
                id: "A".into(),
                command: "make a".into(),
            },
        );
        assert_eq!(
            outcome(&decide(&s, &refused)),
            Some(Outcome::Guard(Tripped::VerifyFailures)),
            "a refused story counts as a failed gate"
        );
    }

    #[test]
    fn with_prd_criteria_changed_the_story_is_named_and_all_passing_is_not_done() {
        let s = state("prd: ralph/prd.json\n");
        // B was rewritten (or removed) and A passes: named, not completed, counted.
        let mut weakened = with_stories("x", &[("A", true, None)]);
        weakened.prd.as_mut().unwrap().changed = vec!["B".into()];
        match decide(&s, &weakened) {
            Decision::Continue {
                notes, progress, ..
            } => {
                assert!(
                    notes
                        .iter()
                        .any(|n| n.contains("stories changed since arming: B")
                            && n.contains("restore them")),
                    "{notes:?}"
                );
                assert_eq!(progress.counts.verify_failures, 1);
            }
            d => panic!("changed criteria must not complete the loop: {d:?}"),
        }
        let at_limit = state(&format!(
            "prd: ralph/prd.json\nverify_failures: {}\n",
            PATH_REFUSALS_LIMIT - 1
        ));
        match decide(&at_limit, &weakened) {
            Decision::End { outcome, detail } => {
                assert_eq!(outcome, Outcome::Guard(Tripped::VerifyFailures));
                assert!(
                    detail.contains("stories changed since arming: B"),
                    "{detail}"
                );
            }
            d => panic!("the breaker ends it: {d:?}"),
        }
        // Restored: a stop with every story passing completes.
        let restored = with_stories("x", &[("A", true, None)]);
        assert_eq!(outcome(&decide(&s, &restored)), Some(Outcome::Completed));
    }

    fn outcome(d: &Decision) -> Option<Outcome> {
        match d {
            Decision::End { outcome, .. } => Some(*outcome),
            _ => None,
        }
    }

    #[test]
    fn continues_and_counts() {
        let d = decide(
            &state("iteration: 4\nmax_iterations: 10\n"),
            &seen("working"),
        );
        assert!(matches!(d, Decision::Continue { next: 5, .. }), "{d:?}");
    }

    #[test]
    fn a_queued_message_lets_the_turn_end_uncounted_but_an_ending_still_wins() {
        let queued = |reply: &str| Observation {
            queued_message: true,
            ..seen(reply)
        };
        let s = state("iteration: 4\nmax_iterations: 10\ncompletion_promise: DONE\n");
        assert_eq!(decide(&s, &queued("working")), Decision::Pass);
        assert!(matches!(
            decide(&s, &queued("<promise>DONE</promise>")),
            Decision::End { .. }
        ));
        let at_limit = state("iteration: 10\nmax_iterations: 10\n");
        assert!(matches!(
            decide(&at_limit, &queued("working")),
            Decision::End { .. }
        ));
    }

    #[test]
    fn paused_passes() {
        assert_eq!(
            decide(&state("active: false\n"), &seen("<promise>DONE</promise>")),
            Decision::Pass
        );
    }

    #[test]
    fn promise_beats_the_limit() {
        let s = state("iteration: 3\nmax_iterations: 3\ncompletion_promise: DONE\n");
        assert_eq!(
            outcome(&decide(&s, &seen("<promise>DONE</promise>"))),
            Some(Outcome::Completed)
        );
        assert_eq!(
            outcome(&decide(&s, &seen("no"))),
            Some(Outcome::MaxIterations)
        );
    }

    #[test]
    fn no_promise_configured_means_tags_are_ignored() {
        let s = state("max_iterations: 9\n");
        assert!(matches!(
            decide(&s, &seen("<promise>DONE</promise>")),
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn verification_gate() {
        let s = state("completion_promise: DONE\nverify: \"make test\"\nmax_iterations: 9\n");
        let mut o = seen("<promise>DONE</promise>");
        assert_eq!(
            decide(&s, &o),
            Decision::Verify {
                command: "make test".into()
            }
        );
        o.verification = Some(Verification {
            passed: true,
            status: "exit 0".into(),
            output_tail: String::new(),
            ..Verification::default()
        });
        assert_eq!(outcome(&decide(&s, &o)), Some(Outcome::Completed));
        o.verification = Some(Verification {
            passed: false,
            status: "exit 2".into(),
            output_tail: "1 failed".into(),
            ..Verification::default()
        });
        match decide(&s, &o) {
            Decision::Continue { notes, .. } => {
                assert!(
                    notes[0].contains("make test")
                        && notes[0].contains("exit 2")
                        && notes[0].contains("1 failed"),
                    "{notes:?}"
                );
            }
            d => panic!("{d:?}"),
        }
        // Without the promise, the gate does not run.
        assert!(matches!(
            decide(&s, &seen("working")),
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn a_gate_alone_runs_when_the_turn_changed_the_tree_and_completes_on_a_pass() {
        let mut s = state("verify: \"make test\"\nmax_iterations: 9\n");
        assert!(s.gate_alone());
        let mut o = seen("working");
        // The first stop, and a tree that cannot be read: the gate runs.
        let gate = Decision::Verify {
            command: "make test".into(),
        };
        assert_eq!(decide(&s, &o), gate);
        o.tree_fingerprint = Some("a".into());
        assert_eq!(decide(&s, &o), gate);
        o.verification = Some(Verification {
            passed: false,
            status: "exit 2".into(),
            output_tail: "1 failed".into(),
            ..Verification::default()
        });
        let Decision::Continue {
            progress, notes, ..
        } = decide(&s, &o)
        else {
            panic!("a failed gate goes on")
        };
        assert!(
            notes[0].contains("make test") && notes[0].contains("1 failed"),
            "{notes:?}"
        );
        assert!(!notes[0].contains("promise"), "{notes:?}");
        assert_eq!(progress.counts.verify_failures, 1);
        // The same tree again: the gate does not run on what it judged.
        s.progress = progress;
        let unchanged = Observation {
            tree_fingerprint: Some("a".into()),
            ..seen("still working")
        };
        assert!(matches!(decide(&s, &unchanged), Decision::Continue { .. }));
        // A changed tree: it runs, and its pass completes the loop.
        let mut changed = Observation {
            tree_fingerprint: Some("b".into()),
            ..seen("fixed")
        };
        assert_eq!(decide(&s, &changed), gate);
        changed.verification = Some(Verification {
            passed: true,
            status: "exit 0".into(),
            ..Verification::default()
        });
        assert_eq!(outcome(&decide(&s, &changed)), Some(Outcome::Completed));
        // With a promise, the gate waits for it as before.
        let promised = state("completion_promise: DONE\nverify: \"make test\"\n");
        assert!(!promised.gate_alone());
        assert!(matches!(
            decide(&promised, &seen("working")),
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn max_verify_failures_ends_after_that_many_failed_gates() {
        let mut s = state("completion_promise: DONE\nverify: make check\nmax_verify_failures: 2\n");
        let mut o = seen("<promise>DONE</promise>");
        o.verification = Some(Verification {
            passed: false,
            status: "exit 1".into(),
            output_tail: String::new(),
            ..Verification::default()
        });
        let Decision::Continue {
            progress, notes, ..
        } = decide(&s, &o)
        else {
            panic!("the first failure is refused, not the end")
        };
        assert_eq!(progress.counts.verify_failures, 1);
        assert!(notes[0].contains("was refused"), "{notes:?}");
        // A turn without the promise keeps the count.
        s.progress = progress;
        let Decision::Continue { progress, .. } = decide(&s, &seen("working")) else {
            panic!()
        };
        assert_eq!(progress.counts.verify_failures, 1);
        s.progress = progress;
        match decide(&s, &o) {
            Decision::End { outcome, detail } => {
                assert_eq!(outcome, Outcome::Guard(Tripped::VerifyFailures));
                assert_eq!(outcome.as_str(), "verify_failures");
                assert!(detail.contains("refused 2 times"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // Off (the default): failures are counted, never end the loop.
        s.guards.max_verify_failures = 0.into();
        s.progress.counts.verify_failures = 1_000;
        assert!(matches!(decide(&s, &o), Decision::Continue { .. }));
    }

    #[test]
    fn gate_guidance_refuses_the_first_promise_once_and_counts_it() {
        let s = state("completion_promise: DONE\n");
        let mut at_promise = seen("done\n<promise>DONE</promise>");
        at_promise.gate_guidance = vec!["check auth.rs, not auth_old.rs".into()];
        match decide(&s, &at_promise) {
            Decision::Continue {
                notes, progress, ..
            } => {
                assert!(
                    notes[0].contains("check auth.rs, not auth_old.rs"),
                    "{notes:?}"
                );
                assert_eq!(progress.counts.verify_failures, 1);
            }
            d => panic!("{d:?}"),
        }
        // The same guidance, no promise: nothing refused.
        let mut working = seen("still working");
        working.gate_guidance = at_promise.gate_guidance.clone();
        match decide(&s, &working) {
            Decision::Continue { notes, .. } => assert!(notes.is_empty(), "{notes:?}"),
            d => panic!("{d:?}"),
        }
        // Spent (the shell closes it): the next promise completes.
        assert!(matches!(
            decide(&s, &seen("done\n<promise>DONE</promise>")),
            Decision::End {
                outcome: Outcome::Completed,
                ..
            }
        ));
        // Refusals count toward --max-verify-failures like a gate's.
        let limited = state("completion_promise: DONE\nmax_verify_failures: 1\n");
        assert!(matches!(
            decide(&limited, &at_promise),
            Decision::End {
                outcome: Outcome::Guard(Tripped::VerifyFailures),
                ..
            }
        ));
    }

    #[test]
    fn a_question_pauses_the_loop_uncounted_and_a_promise_still_wins() {
        let s = state("completion_promise: DONE\n");
        match decide(
            &s,
            &seen("Two ways to go.\n<question>Postgres or SQLite?</question>"),
        ) {
            Decision::Wait {
                pause: true,
                question: Some(q),
                progress,
                ..
            } => {
                assert_eq!(q, "Postgres or SQLite?");
                assert_eq!(progress, s.progress);
            }
            d => panic!("{d:?}"),
        }
        // Quoted or in code, it is no question.
        assert!(matches!(
            decide(&s, &seen("I could write `<question>x</question>` here")),
            Decision::Continue { .. }
        ));
        assert!(matches!(
            decide(
                &s,
                &seen("<question>why?</question>\n<promise>DONE</promise>")
            ),
            Decision::End { .. }
        ));
    }

    #[test]
    fn abort_promise() {
        let s = state("completion_promise: DONE\nabort_promise: BLOCKED\n");
        match decide(&s, &seen("I need the API key.\n<promise>BLOCKED</promise>")) {
            Decision::End {
                outcome: Outcome::Aborted,
                detail,
            } => assert!(detail.contains("API key"), "{detail}"),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn time_budget_edges() {
        let s = state("max_duration: 100s\n");
        let at = |secs| Observation {
            now: Some(Timestamp(secs)),
            ..seen("x")
        };
        match decide(&s, &at(79)) {
            Decision::Continue { notes, .. } => assert!(notes.is_empty()),
            d => panic!("{d:?}"),
        }
        match decide(&s, &at(80)) {
            Decision::Continue { notes, .. } => assert!(notes[0].contains("Wrap up"), "{notes:?}"),
            d => panic!("{d:?}"),
        }
        assert!(matches!(decide(&s, &at(99)), Decision::Continue { .. }));
        assert_eq!(
            outcome(&decide(&s, &at(100))),
            Some(Outcome::Guard(Tripped::TimeBudget))
        );
    }

    #[test]
    fn token_budget_edges() {
        let s = state("max_tokens: 1000\n");
        let with = |t| Observation {
            tokens_used: Some(t),
            ..seen("x")
        };
        assert!(matches!(decide(&s, &with(999)), Decision::Continue { .. }));
        assert_eq!(
            outcome(&decide(&s, &with(1000))),
            Some(Outcome::Guard(Tripped::TokenBudget))
        );
    }

    #[test]
    fn cost_budget_ends_at_the_exact_figure_and_warns_at_80_percent() {
        use ralph_state::money::Money;
        let s = state("max_cost: 2.50\ncost_usd: 1.00\n");
        assert_eq!(s.guards.max_cost_usd, Some(Money(2_500_000)));
        let with = |micros| Observation {
            cost_usd: Some(Money(micros)),
            ..seen("x")
        };
        match decide(&s, &with(1_999_999)) {
            Decision::Continue {
                notes, progress, ..
            } => {
                assert!(notes.is_empty(), "{notes:?}");
                assert_eq!(progress.counts.cost_usd, Money(1_999_999));
            }
            d => panic!("{d:?}"),
        }
        match decide(&s, &with(2_000_000)) {
            Decision::Continue { notes, .. } => {
                assert!(
                    notes[0].starts_with("Dollar budget: $2.00 of $2.50"),
                    "{notes:?}"
                );
            }
            d => panic!("{d:?}"),
        }
        assert!(matches!(
            decide(&s, &with(2_499_999)),
            Decision::Continue { .. }
        ));
        match decide(&s, &with(2_500_000)) {
            Decision::End { outcome, detail } => {
                assert_eq!(outcome, Outcome::Guard(Tripped::CostBudget));
                assert_eq!(detail, "spent $2.50 of its $2.50 dollar budget");
            }
            d => panic!("{d:?}"),
        }
        // Nothing counted at this stop: the figure kept in the file decides.
        let spent = state("max_cost: 1\ncost_usd: 1\n");
        assert_eq!(
            outcome(&decide(&spent, &seen("x"))),
            Some(Outcome::Guard(Tripped::CostBudget))
        );
        // A reply the transcript lacks is counted at the dearest message seen.
        let lagging = Observation {
            cost_usd: Some(Money(2_000_000)),
            largest_reply_cost: Money(600_000),
            reply_missing: true,
            turn_ends: Some(0),
            ..seen("x")
        };
        match decide(&s, &lagging) {
            Decision::End { outcome, detail } => {
                assert_eq!(outcome, Outcome::Guard(Tripped::CostBudget));
                assert_eq!(
                    detail,
                    "spent $2.00 known + ~$0.60 not yet in the transcript of its $2.50 dollar budget"
                );
            }
            d => panic!("{d:?}"),
        }
        // A bad figure in the file is refused, never read as free.
        assert!(LoopState::parse("---\ncost_usd: -1\n---\nP").is_err());
        assert!(LoopState::parse("---\nmax_cost: 1e3\n---\nP").is_err());
    }

    #[test]
    fn background_work_lets_the_stop_through_uncounted_but_budgets_still_end_it() {
        let s = state("iteration: 4\nmax_tokens: 100\n");
        let waiting = |tokens| Observation {
            pending_work: Some("1 background task (bg)".into()),
            tokens_used: Some(tokens),
            ..seen("It runs; I will wait.")
        };
        match decide(&s, &waiting(40)) {
            Decision::Wait {
                progress,
                why,
                pause: false,
                ..
            } => {
                assert_eq!(progress.tokens_used, 40, "counted, not skipped");
                assert_eq!(progress.same_reply_count, 0, "the breakers are not fed");
                assert_eq!(
                    why,
                    "waiting for 1 background task (bg) to wake the session"
                );
            }
            d => panic!("{d:?}"),
        }
        assert_eq!(
            outcome(&decide(&s, &waiting(100))),
            Some(Outcome::Guard(Tripped::TokenBudget))
        );
        let done = state("completion_promise: DONE\n");
        assert_eq!(
            outcome(&decide(
                &done,
                &Observation {
                    pending_work: Some("x".into()),
                    ..seen("<promise>DONE</promise>")
                }
            )),
            Some(Outcome::Completed)
        );
    }

    #[test]
    fn the_window_guard_pauses_at_its_share_of_the_5_hour_window() {
        let s = state("max_window: 80\n");
        let at = |used| Observation {
            window: Some((used, ", resets 2026-12-01T23:00:00Z".into())),
            ..seen("x")
        };
        assert!(matches!(decide(&s, &at(79)), Decision::Continue { .. }));
        match decide(&s, &at(80)) {
            Decision::Wait {
                why, pause: true, ..
            } => assert_eq!(
                why,
                "the plan's 5-hour window is 80 % used (--max-window 80), resets 2026-12-01T23:00:00Z"
            ),
            d => panic!("{d:?}"),
        }
        // Nothing seen: nothing to go by (arming refuses that case).
        assert!(matches!(decide(&s, &seen("x")), Decision::Continue { .. }));
    }

    #[test]
    fn stuck_after_k_identical_replies() {
        let mut s = state("stuck_after: 3\n");
        for n in 1..=2 {
            match decide(&s, &seen("same  reply")) {
                Decision::Continue { progress, .. } => {
                    assert_eq!(progress.same_reply_count, n);
                    s.progress = progress;
                }
                d => panic!("{d:?}"),
            }
        }
        // Whitespace differences do not make a reply new.
        assert_eq!(
            outcome(&decide(&s, &seen("same reply"))),
            Some(Outcome::Guard(Tripped::Stuck))
        );
        assert!(matches!(
            decide(&s, &seen("another reply")),
            Decision::Continue { .. }
        ));
    }

    #[test]
    fn no_progress_after_k_unchanged_iterations() {
        let mut s = state("no_progress_after: 2\nstuck_after: 0\n");
        let tree = |t: &str| Observation {
            tree_fingerprint: Some(t.into()),
            ..seen("x")
        };
        for expected in [0, 1] {
            match decide(&s, &tree("a")) {
                Decision::Continue { progress, .. } => {
                    assert_eq!(progress.no_progress_count, expected);
                    s.progress = progress;
                }
                d => panic!("{d:?}"),
            }
        }
        assert_eq!(
            outcome(&decide(&s, &tree("a"))),
            Some(Outcome::Guard(Tripped::NoProgress))
        );
        assert!(matches!(decide(&s, &tree("b")), Decision::Continue { .. }));
    }

    #[test]
    fn one_unchanged_iteration_reads_as_one_iteration() {
        let mut s = state("no_progress_after: 1\nstuck_after: 0\n");
        let tree = Observation {
            tree_fingerprint: Some("a".into()),
            ..seen("x")
        };
        if let Decision::Continue { progress, .. } = decide(&s, &tree) {
            s.progress = progress;
        }
        let words = format!("{:?}", decide(&s, &tree));
        assert!(
            words.contains("no change to the working tree or HEAD for 1 iteration\""),
            "{words}"
        );
    }

    #[test]
    fn breakers_can_be_switched_off() {
        let mut s = state("stuck_after: 0\n");
        s.progress.same_reply_count = 100;
        s.progress.reply_fingerprint = Some(fingerprint("x"));
        assert!(matches!(decide(&s, &seen("x")), Decision::Continue { .. }));
    }

    #[test]
    fn block_cap_counts_own_blocks_and_starts_over() {
        let s = state("stuck_after: 0\n");
        let stop = |active: bool, tool: Option<bool>, cap: u64| Observation {
            stop_hook_active: Some(active),
            ran_tool: tool,
            block_cap: cap,
            ..seen("x")
        };
        for cap in [1, 2, 8, 20] {
            // The client allows `cap` blocks in a row; ralph ends at the next stop.
            let mut s = s.clone();
            let mut blocked = 0;
            let mut active = false;
            loop {
                match decide(&s, &stop(active, Some(false), cap)) {
                    Decision::Continue { progress, .. } => {
                        blocked += 1;
                        s.progress = progress;
                        active = true;
                    }
                    d => {
                        assert_eq!(outcome(&d), Some(Outcome::BlockCap), "{d:?}");
                        break;
                    }
                }
                assert!(blocked <= cap, "cap {cap}: blocked {blocked} times");
            }
            assert_eq!(blocked, cap, "cap {cap}: never earlier than needed");
        }
        let mut s = s.clone();
        s.progress.idle_blocks = 2;
        assert_eq!(
            outcome(&decide(&s, &stop(true, None, 2))),
            Some(Outcome::BlockCap),
            "unknown tool use does not reset"
        );
        assert_eq!(
            outcome(&decide(&s, &stop(true, Some(false), 2))),
            Some(Outcome::BlockCap)
        );
        for fresh in [stop(true, Some(true), 2), stop(false, None, 2)] {
            match decide(&s, &fresh) {
                Decision::Continue { progress, .. } => assert_eq!(progress.idle_blocks, 1),
                d => panic!("a tool or a new turn starts the count over: {d:?}"),
            }
        }
        assert!(
            matches!(
                decide(&s, &stop(true, Some(false), 0)),
                Decision::Continue { .. }
            ),
            "cap 0: off"
        );
    }

    /// Turns faster than the transcript is written: the stops go on while it
    /// shows no reply, then it catches up at once. Every missing reply is
    /// estimated, so known + estimate is the real usage at every stop.
    #[test]
    fn token_budget_estimates_every_reply_a_lagging_transcript_lacks() {
        let mut s = state("max_tokens: 1000\nstuck_after: 0\n");
        s.progress.largest_reply_tokens = 15;
        s.progress.tokens_used = 15; // stop 1 saw the arming turn's reply
        let lagging = |turn_ends| Observation {
            tokens_used: Some(15 + 15 * turn_ends),
            reply_missing: true,
            turn_ends: Some(turn_ends),
            ..seen("x")
        };
        // Stops 2, 3 and 4 see no new reply; the real usage is 30, 45, 60.
        for real in [30, 45, 60] {
            let Decision::Continue { progress, .. } = decide(&s, &lagging(0)) else {
                panic!("goes on")
            };
            assert_eq!(progress.tokens_used + progress.unseen_tokens, real);
            s.progress = progress;
        }
        assert_eq!(s.progress.counts.replies_behind, 3);
        // Stop 5: three replies land, this stop's is still missing: 60 known + ~15.
        let Decision::Continue { progress, .. } = decide(&s, &lagging(3)) else {
            panic!("goes on")
        };
        assert_eq!((progress.tokens_used, progress.unseen_tokens), (60, 15));
        s.progress = progress;
        // Stop 6: the transcript ends with this stop's reply: nothing is estimated.
        let caught_up = Observation {
            tokens_used: Some(90),
            reply_missing: false,
            turn_ends: Some(2),
            ..seen("x")
        };
        let Decision::Continue { progress, .. } = decide(&s, &caught_up) else {
            panic!("goes on")
        };
        assert_eq!(
            (progress.unseen_tokens, progress.counts.replies_behind),
            (0, 0)
        );
        // Without a transcript read, one reply at most, as before.
        let unread = Observation {
            reply_missing: true,
            turn_ends: None,
            ..seen("x")
        };
        s.progress.counts.replies_behind = 7;
        assert_eq!(replies_behind(&s, &unread), 1);
    }

    #[test]
    fn token_budget_counts_the_unseen_reply() {
        let mut s = state("max_tokens: 100\n");
        s.progress.largest_reply_tokens = 15;
        let with = |known, missing| Observation {
            tokens_used: Some(known),
            reply_missing: missing,
            ..seen("x")
        };
        // 75 known and the reply written: 75, under 80 %.
        match decide(&s, &with(75, false)) {
            Decision::Continue {
                progress, notes, ..
            } => {
                assert_eq!((progress.tokens_used, progress.unseen_tokens), (75, 0));
                assert!(notes.is_empty(), "{notes:?}");
            }
            d => panic!("{d:?}"),
        }
        // 75 known, the last reply missing: ~90, past 80 %: the wrap-up note says both.
        match decide(&s, &with(75, true)) {
            Decision::Continue {
                progress, notes, ..
            } => {
                assert_eq!(progress.unseen_tokens, 15);
                assert!(notes[0].contains("75 known + ~15"), "{notes:?}");
            }
            d => panic!("{d:?}"),
        }
        // 90 known + ~15 unseen reaches 100: the loop ends before the budget is passed.
        match decide(&s, &with(90, true)) {
            Decision::End {
                outcome: Outcome::Guard(Tripped::TokenBudget),
                detail,
            } => {
                assert!(detail.contains("90 known + ~15"), "{detail}");
            }
            d => panic!("{d:?}"),
        }
        assert!(matches!(
            decide(&s, &with(90, false)),
            Decision::Continue { .. }
        ));
        // A larger message raises the estimate.
        let big = Observation {
            largest_reply_tokens: 40,
            ..with(60, true)
        };
        assert_eq!(
            outcome(&decide(&s, &big)),
            Some(Outcome::Guard(Tripped::TokenBudget))
        );
        // Exact counts (`ralph run`): nothing is added.
        s.progress.largest_reply_tokens = 0;
        assert!(matches!(
            decide(&s, &with(99, false)),
            Decision::Continue { .. }
        ));
        assert_eq!(
            outcome(&decide(&s, &with(u64::MAX, true))),
            Some(Outcome::Guard(Tripped::TokenBudget))
        );
    }

    #[test]
    fn token_figures_say_what_is_known_and_when_the_rest_will_be() {
        // After a 6,000-token turn whose reply the transcript does not show yet: not a bare 0.
        let note = token_note(0, 0, 1, 15_000);
        assert_eq!(
            note,
            "Tokens: 0 of 15000 counted so far; the last reply is not in the transcript yet and is counted at the next stop."
        );
        assert_eq!(token_note(6_000, 0, 0, 15_000), "Tokens: 6000 of 15000.");
        assert_eq!(
            token_note(6_000, 2_000, 1, 15_000),
            "Tokens: 6000 of 15000 known, and ~2000 more for replies not in the transcript yet (counted once it shows them)."
        );
        // After the loop ended, nothing will count them: an estimate, said so.
        let ended = token_words_final(6_000, 2_000);
        assert!(!ended.contains("not yet"), "{ended}");
        assert!(ended.contains("estimated"), "{ended}");
    }

    #[test]
    fn excerpt_and_fingerprint_match_the_normalised_text() {
        for reply in [
            "",
            " a  b\n c ",
            &"word ".repeat(100),
            &"x".repeat(301),
            &"é".repeat(300),
        ] {
            let flat = promise::normalise(reply);
            let want = match flat.char_indices().nth(300) {
                Some((cut, _)) => format!("{}…", &flat[..cut]),
                None => flat.clone(),
            };
            assert_eq!(excerpt(reply), want, "{reply:?}");
            assert_eq!(fingerprint_words(reply), fingerprint(&flat), "{reply:?}");
        }
    }

    #[test]
    fn a_clock_set_back_does_not_switch_the_time_budget_off() {
        let mut s = state("max_duration: 100s\nstuck_after: 0\n");
        let at = |secs| Observation {
            now: Some(Timestamp(secs)),
            ..seen("x")
        };
        // 60 s in, then the clock jumps back a year: the count pauses for
        // that step, then goes on from 60.
        let Decision::Continue { progress, .. } = decide(&s, &at(60)) else {
            panic!()
        };
        assert_eq!(
            (progress.elapsed_secs, progress.clock_at),
            (Some(60), Some(Timestamp(60)))
        );
        s.progress = progress;
        let back = -365 * 86_400;
        let Decision::Continue {
            progress, notes, ..
        } = decide(&s, &at(back))
        else {
            panic!()
        };
        assert_eq!(progress.elapsed_secs, Some(60));
        assert!(notes.is_empty());
        s.progress = progress;
        let Decision::Continue {
            progress, notes, ..
        } = decide(&s, &at(back + 25))
        else {
            panic!()
        };
        assert_eq!(progress.elapsed_secs, Some(85));
        assert!(notes[0].contains("Wrap up"), "{notes:?}");
        s.progress = progress;
        assert_eq!(
            outcome(&decide(&s, &at(back + 40))),
            Some(Outcome::Guard(Tripped::TimeBudget))
        );
    }

    #[test]
    fn a_started_at_in_the_future_is_reported_and_the_budget_still_counts() {
        let mut s = state("max_duration: 100s\n");
        s.started_at = Some(Timestamp(1_000_000));
        let at = |secs| Observation {
            now: Some(Timestamp(secs)),
            ..seen("x")
        };
        let Decision::Continue {
            progress, notices, ..
        } = decide(&s, &at(10))
        else {
            panic!()
        };
        assert!(notices[0].contains("started_at"), "{notices:?}");
        assert_eq!(progress.elapsed_secs, Some(0));
        s.progress = progress;
        assert_eq!(
            outcome(&decide(&s, &at(110))),
            Some(Outcome::Guard(Tripped::TimeBudget))
        );
    }

    fn checked(text: &str) -> Verification {
        Verification {
            passed: false,
            status: "exit 101".into(),
            exit_code: Some(101),
            output_tail: text.into(),
            failures: ralph_fs::failure::failure_count(text),
            ..Verification::default()
        }
    }

    /// Runs one stop with the check's result, returning the decision and
    /// carrying the counters forward as the file would.
    fn stop_with_check(s: &mut LoopState, v: Verification) -> Decision {
        let mut o = seen("working");
        assert_eq!(
            decide(s, &o),
            Decision::Check {
                command: s.guards.check.clone().unwrap()
            }
        );
        o.check = Some(v);
        let d = decide(s, &o);
        if let Decision::Continue { progress, .. } = &d {
            s.progress = progress.clone();
        }
        d
    }

    #[test]
    fn the_check_runs_where_the_loop_goes_on_and_its_result_is_a_note() {
        let mut s = state("check: cargo check\nstuck_after: 0\n");
        let d = stop_with_check(&mut s, checked("error[E0308]: mismatched types"));
        let Decision::Continue { notes, .. } = d else {
            panic!("{d:?}")
        };
        assert!(
            notes[0].starts_with("The check `cargo check` failed (exit 101)")
                && notes[0].contains("mismatched types"),
            "{notes:?}"
        );
        let pass = Verification {
            passed: true,
            status: "exit 0".into(),
            exit_code: Some(0),
            ..Verification::default()
        };
        let Decision::Continue {
            notes, progress, ..
        } = stop_with_check(&mut s, pass)
        else {
            panic!()
        };
        assert_eq!(notes, ["The check `cargo check` passed."]);
        assert_eq!(progress.counts.same_failures, 0);
        let slow = Verification {
            status: "timed out after 2s".into(),
            ..Verification::default()
        };
        let Decision::Continue { notes, .. } = stop_with_check(&mut s, slow) else {
            panic!()
        };
        assert!(
            notes[0].contains("timed out after 2s and was stopped"),
            "{notes:?}"
        );
        // A loop that ends does not run the check first.
        let done = state("check: x\ncompletion_promise: DONE\n");
        assert_eq!(
            outcome(&decide(&done, &seen("<promise>DONE</promise>"))),
            Some(Outcome::Completed)
        );
    }

    #[test]
    fn the_same_failure_three_times_ends_the_loop_and_a_different_one_resets() {
        let mut s = state("check: cargo test\nstuck_after: 0\nstall_after: 0\n");
        assert_eq!(s.guards.max_same_failure.count(), DEFAULT_SAME);
        let fail = |secs: &str| checked(&format!("test a ... FAILED\nfinished in {secs}s"));
        assert!(matches!(
            stop_with_check(&mut s, fail("0.53")),
            Decision::Continue { .. }
        ));
        // Different failure: the count starts over.
        assert!(matches!(
            stop_with_check(&mut s, checked("error: other")),
            Decision::Continue { .. }
        ));
        assert_eq!(s.progress.counts.same_failures, 1);
        assert!(matches!(
            stop_with_check(&mut s, fail("0.53")),
            Decision::Continue { .. }
        ));
        assert!(matches!(
            stop_with_check(&mut s, fail("0.61")),
            Decision::Continue { .. }
        ));
        match stop_with_check(&mut s, fail("1.02")) {
            Decision::End { outcome, detail } => {
                assert_eq!(outcome.as_str(), "same_failure");
                assert!(
                    detail.contains("3 times in a row") && detail.contains("test a"),
                    "{detail}"
                );
                assert!(
                    detail.ends_with("its output ends: test a ... FAILED ⏎ finished in 1.02s"),
                    "one line, no line break to be shown as \\n: {detail}"
                );
            }
            d => panic!("{d:?}"),
        }
        // The gate refusing the promise counts too.
        let mut g = state("completion_promise: DONE\nverify: make test\n");
        let mut o = seen("<promise>DONE</promise>");
        o.verification = Some(checked("1 failed in 0.2s"));
        for _ in 0..2 {
            let Decision::Continue { progress, .. } = decide(&g, &o) else {
                panic!()
            };
            g.progress = progress;
        }
        o.verification = Some(checked("1 failed in 0.9s"));
        assert_eq!(
            outcome(&decide(&g, &o)).map(Outcome::as_str),
            Some("same_failure")
        );
    }

    const DEFAULT_SAME: u64 = ralph_state::fields::guards::DEFAULT_MAX_SAME_FAILURE;

    #[test]
    fn a_count_that_falls_then_sticks_stalls() {
        let mut s =
            state("check: cargo test\nstuck_after: 0\nmax_same_failure: 0\nstall_after: 3\n");
        let run = |n: u64| {
            checked(&format!(
                "test result: FAILED. 1 passed; {n} failed; 0 ignored"
            ))
        };
        for n in [9, 7, 4] {
            assert!(matches!(
                stop_with_check(&mut s, run(n)),
                Decision::Continue { .. }
            ));
            assert_eq!(s.progress.counts.stalled_checks, 0);
        }
        assert!(matches!(
            stop_with_check(&mut s, run(4)),
            Decision::Continue { .. }
        ));
        assert!(matches!(
            stop_with_check(&mut s, run(6)),
            Decision::Continue { .. }
        ));
        assert_eq!(s.progress.counts.stalled_checks, 2);
        match stop_with_check(&mut s, run(4)) {
            Decision::End { outcome, detail } => {
                assert_eq!(outcome.as_str(), "stalled");
                assert!(detail.contains("9 → 7 → 4 → 4 → 6 → 4"), "{detail}");
            }
            d => panic!("{d:?}"),
        }
        // An output without a count is not a stall.
        let mut t = state("check: make\nstuck_after: 0\nmax_same_failure: 0\nstall_after: 1\n");
        for _ in 0..3 {
            assert!(matches!(
                stop_with_check(&mut t, checked("boom")),
                Decision::Continue { .. }
            ));
        }
    }

    #[test]
    fn extreme_figures_neither_wrap_nor_panic() {
        let mut s = state("max_tokens: 1000000000000000\nmax_duration: 3650d\n");
        s.iteration = u64::MAX;
        s.max_iterations = 0.into();
        assert_eq!(
            outcome(&decide(&s, &seen("x"))),
            Some(Outcome::MaxIterations)
        );
        s.iteration = 1;
        s.progress.same_reply_count = u64::MAX;
        s.progress.no_progress_count = u64::MAX;
        s.progress.idle_blocks = u64::MAX;
        s.progress.elapsed_secs = Some(u64::MAX);
        s.progress.clock_at = Some(Timestamp(i64::MIN));
        s.guards.stuck_after = 0.into();
        s.guards.no_progress_after = 0.into();
        let extreme = Observation {
            now: Some(Timestamp(i64::MAX)),
            tokens_used: Some(u64::MAX),
            ran_tool: Some(false),
            block_cap: u64::MAX,
            ..seen("x")
        };
        assert!(decide(&s, &extreme) != Decision::Pass);
        s.guards.max_duration_secs = None;
        s.guards.max_tokens = None;
        let extreme = Observation {
            ran_tool: None,
            block_cap: 0,
            ..extreme
        };
        match decide(&s, &extreme) {
            Decision::Continue { progress, .. } => assert_eq!(progress.tokens_used, MAX_TOKENS),
            d => panic!("{d:?}"),
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn extreme_u64() -> impl Strategy<Value = u64> {
            prop_oneof![
                Just(0),
                Just(1),
                Just(u64::MAX),
                Just(u64::MAX - 1),
                Just(MAX_COUNT),
                Just(MAX_TOKENS),
                any::<u64>(),
                0u64..100,
            ]
        }

        fn extreme_i64() -> impl Strategy<Value = i64> {
            prop_oneof![
                Just(i64::MIN),
                Just(i64::MAX),
                Just(0),
                any::<i64>(),
                -100i64..100
            ]
        }

        proptest! {
            /// The fuzz target `decide` (fuzz/fuzz_targets/decide.rs), in CI.
            #[test]
            fn decide_never_panics_and_never_runs_past_its_limit(
                iteration in extreme_u64(),
                max_iterations in extreme_u64(),
                counters in proptest::array::uniform4(extreme_u64()),
                elapsed in proptest::option::of(extreme_u64()),
                clock in proptest::option::of(extreme_i64()),
                started in proptest::option::of(extreme_i64()),
                now in proptest::option::of(extreme_i64()),
                tokens in proptest::option::of(extreme_u64()),
                max_tokens in proptest::option::of(extreme_u64()),
                max_duration in proptest::option::of(extreme_u64()),
                guards in proptest::array::uniform3(extreme_u64()),
                ran_tool in proptest::option::of(any::<bool>()),
                reply in proptest::option::of("(<promise>DONE</promise>|x|\n){0,3}"),
            ) {
                let mut s = state("completion_promise: DONE\n");
                s.iteration = iteration;
                s.max_iterations = max_iterations.into();
                s.started_at = started.map(Timestamp);
                s.progress.tokens_used = counters[0];
                s.progress.same_reply_count = counters[1];
                s.progress.no_progress_count = counters[2];
                s.progress.idle_blocks = counters[3];
                s.progress.elapsed_secs = elapsed;
                s.progress.clock_at = clock.map(Timestamp);
                s.progress.tree_fingerprint = Some("t".into());
                s.guards.max_tokens = max_tokens;
                s.guards.max_duration_secs = max_duration;
                s.guards.stuck_after = guards[0].into();
                s.guards.no_progress_after = guards[1].into();
                let seen = Observation {
                    reply,
                    now: now.map(Timestamp),
                    tokens_used: tokens,
                    tree_fingerprint: Some("t".into()),
                    ran_tool,
                    block_cap: guards[2],
                    verification: None,
                    ..Observation::default()
                };
                match decide(&s, &seen) {
                    Decision::Continue { next, progress, .. } => {
                        prop_assert!(max_iterations == 0 || iteration < max_iterations);
                        prop_assert!(iteration < MAX_COUNT);
                        prop_assert_eq!(next, iteration + 1);
                        prop_assert!(progress.tokens_used <= MAX_TOKENS);
                        if let (Some(limit), Some(e)) = (max_duration.filter(|_| now.is_some()), progress.elapsed_secs) {
                            prop_assert!(e < limit);
                        }
                        if let Some(limit) = max_tokens {
                            prop_assert!(progress.tokens_used < limit);
                        }
                    }
                    Decision::End { detail, .. } => prop_assert!(!detail.is_empty()),
                    Decision::Pass | Decision::Wait { .. } | Decision::Verify { .. } | Decision::Check { .. } => prop_assert!(false),
                }
            }

            /// The token budget with a lagging transcript: whatever the counts (kept by
            /// ralph or planted in the file), the estimate never wraps, and a loop that
            /// goes on is under its budget with the estimate included.
            #[test]
            fn the_estimate_for_missing_replies_never_wraps(
                known in extreme_u64(),
                largest in extreme_u64(),
                behind in extreme_u64(),
                turn_ends in proptest::option::of(extreme_u64()),
                reply_missing in any::<bool>(),
                max_tokens in proptest::option::of(extreme_u64()),
            ) {
                let mut s = state("stuck_after: 0\n");
                s.guards.max_tokens = max_tokens;
                s.progress.largest_reply_tokens = largest;
                s.progress.counts.replies_behind = behind;
                let seen = Observation {
                    reply: Some("x".into()),
                    tokens_used: Some(known),
                    reply_missing,
                    turn_ends,
                    ..Observation::default()
                };
                match decide(&s, &seen) {
                    Decision::Continue { progress, .. } => {
                        prop_assert!(progress.unseen_tokens <= MAX_TOKENS);
                        prop_assert!(progress.counts.replies_behind <= MAX_COUNT);
                        prop_assert_eq!(progress.counts.replies_behind == 0, !reply_missing);
                        if let Some(limit) = max_tokens {
                            prop_assert!(progress.tokens_used.saturating_add(progress.unseen_tokens) < limit);
                        }
                    }
                    Decision::End { detail, .. } => prop_assert!(!detail.is_empty()),
                    Decision::Pass | Decision::Wait { .. } | Decision::Verify { .. } | Decision::Check { .. } => prop_assert!(false),
                }
            }
        }
    }
}
