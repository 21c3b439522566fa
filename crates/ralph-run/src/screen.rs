//! What `ralph run` prints, built from the [`Driver`]'s events: the
//! spinner's line, a line per iteration and per wait, and what the run's end
//! says with the kind of exit it makes ([`Closing`]). Text only: the binary
//! writes it, keeps the clock and the terminal, and turns [`RunExit`] into an
//! exit code.

use std::path::PathBuf;

use crate::agent::AgentReply;
use crate::driver::{Driver, Iteration, ResetWait, RunEnd};
use crate::moves::{self, GaveUp, RunError};
use crate::reset_wait::WaitSource;
use ralph_core::decide::Outcome;
use ralph_state::fields::state::LoopState;
use ralph_state::messages;
use ralph_state::storage::store::Project;
use ralph_state::time::format_duration;

/// The spinner's frames, one per tick of the agent's wait.
pub(crate) const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// How a run's end leaves the process; the binary picks each one's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunExit {
    /// Completed, or handed back after `--hand-back-after` iterations, as asked.
    Success,
    /// The loop ended otherwise than completed, or the run stopped before
    /// it completed (gone, cancelled, paused, taken over, changed).
    Ended,
    /// The loop file was deleted or edited during the agent's turn by no
    /// ralph command: ended as `tampered`.
    Tampered,
    /// A rate or usage limit: the loop waits, uncounted, for a later run.
    Limited,
    /// Ctrl-C.
    Interrupted,
}

/// What the run's end prints, line by line, and how it exits.
#[derive(Debug)]
pub struct Closing {
    pub lines: Vec<String>,
    pub exit: RunExit,
}

/// The words of one run's terminal: its loop's name (escaped) and how the
/// last iteration went, which the spinner repeats.
#[derive(Debug)]
pub struct Screen {
    name: String,
    last: &'static str,
    /// The run's clock (seconds) when the current iteration began, so each
    /// line shows that iteration's own time, not the run's.
    iteration_began: u64,
}

/// The times the run's end tells: the last iteration's own, and the run's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    pub iteration_secs: u64,
    pub total_secs: u64,
}

impl Screen {
    pub fn new(name: &str) -> Self {
        Self {
            name: ralph_fs::display::line(name).into_owned(),
            last: "starting",
            iteration_began: 0,
        }
    }

    /// The run's clock `elapsed_secs` as the current iteration's time and the run's.
    pub fn times(&self, elapsed_secs: u64) -> Times {
        Times {
            iteration_secs: elapsed_secs.saturating_sub(self.iteration_began),
            total_secs: elapsed_secs,
        }
    }

    /// The spinner's line while the agent runs (the binary clears the line
    /// before it); `elapsed_secs` is the run's clock, the line shows the
    /// iteration's own time.
    pub fn spinner(&self, frame: usize, label: &str, elapsed_secs: u64) -> String {
        format!(
            "{} ralph run `{}` · iteration {label} · {} so far · last: {}",
            SPINNER[frame % SPINNER.len()],
            self.name,
            format_duration(self.times(elapsed_secs).iteration_secs),
            self.last
        )
    }

    /// The loop was paused when its reply was judged.
    pub fn passed(&mut self) {
        self.last = "paused";
    }

    /// The agent asked a question: the line that starts the wait for the answer.
    pub fn asking(&self, name: &str, question: &str) -> String {
        let name = ralph_fs::display::line(name);
        format!(
            "❓ ralph run `{name}` · the agent asks: {}\n   The run waits for your answer: ralph say --name {name} \"…\" (Ctrl-C or `ralph cancel --name {name}` stops it).",
            ralph_fs::display::line(question)
        )
    }

    /// `--wait-for-reset`: the line that starts a wait.
    pub fn waiting(&self, wait: &ResetWait) -> String {
        let from = match wait.source {
            WaitSource::Window => "the 5-hour window's reset",
            WaitSource::BackOff => "no reset time known: backing off",
        };
        format!(
            "⏸ ralph run `{}` · {} · waiting {} for the reset at {} ({from}); iteration {} was not counted. Ctrl-C or `ralph cancel --name {}` stops the wait.",
            self.name,
            wait.why,
            format_duration(wait.secs),
            wait.until,
            wait.label,
            self.name
        )
    }

    /// The live line of a wait, `secs_left` rounded up (the binary clears
    /// the line before it).
    pub fn still_waiting(&self, secs_left: u64, wait: &ResetWait) -> String {
        format!(
            "⏸ ralph run `{}` · rate or usage limit · waiting {} for the reset at {}",
            self.name,
            format_duration(secs_left),
            wait.until
        )
    }

    /// The wait is over: the line that says so.
    pub fn wait_over(&mut self, wait: &ResetWait) -> String {
        self.last = "waited for a limit's reset";
        format!(
            "▶ ralph run `{}` · the wait is over; iteration {} runs again.",
            self.name, wait.label
        )
    }

    /// The line for an iteration after which the loop goes on, with the
    /// time it took (`elapsed_secs` is the run's clock).
    pub fn iterated(&mut self, it: &Iteration, elapsed_secs: u64) -> String {
        let took = self.times(elapsed_secs).iteration_secs;
        self.iteration_began = elapsed_secs;
        self.last = it.went_on;
        let figures = if it.figures.is_empty() {
            String::new()
        } else {
            format!(" · {}", it.figures)
        };
        let raised = if it.raised.is_empty() {
            String::new()
        } else {
            format!(
                "\n⬆ bounds raised by you, the agent is told: {}",
                ralph_fs::display::line(&it.raised.join(", "))
            )
        };
        format!(
            "✓ iteration {} done in {} · {}{figures}{} · next: {}{raised}",
            it.label,
            format_duration(took),
            self.last,
            denial_note(&it.reply),
            it.next
        )
    }
}

/// What the run's end says, and how it exits; an agent that could not run
/// is an error, told with what became of the loop.
pub fn ended(end: RunEnd, driver: &Driver, times: Times) -> Result<Closing, RunError> {
    let name = driver.name();
    let elapsed = format_duration(times.total_secs);
    let (line, exit) = match end {
        RunEnd::Gone => (
            format!("The loop `{name}` is gone (cancelled or ended elsewhere)."),
            RunExit::Ended,
        ),
        RunEnd::Tampered { what, record } => {
            (tampered_line(driver, &what, &record), RunExit::Tampered)
        }
        RunEnd::TakenOver { by } => (
            format!(
                "The loop `{name}` was taken over by {}; this run stops.",
                by.as_deref().unwrap_or("another driver")
            ),
            RunExit::Ended,
        ),
        RunEnd::Paused => (
            format!(
                "The loop `{name}` is paused; handed back. Resume it with `ralph resume` and `ralph run --name {name}`."
            ),
            RunExit::Ended,
        ),
        RunEnd::HandedBack { iteration } => (handed_back_line(driver, iteration), RunExit::Success),
        RunEnd::Limited { why, iteration } => (
            format!(
                "⏸ The agent stopped on a rate or usage limit: {why}. Iteration {iteration} of the loop `{name}` was not counted; the loop waits. Run `ralph run --name {name}` again once the limit has reset."
            ),
            RunExit::Limited,
        ),
        RunEnd::OutOfTimeWaiting {
            why,
            wait,
            left,
            record,
        } => (
            out_of_time_line(driver, &why, wait, left, record),
            RunExit::Ended,
        ),
        RunEnd::ChangedWhileAgentRan => (
            format!(
                "The loop `{name}` changed while the agent ran (cancelled or paused elsewhere); this run stops."
            ),
            RunExit::Ended,
        ),
        RunEnd::Changed { notice } => (notice, RunExit::Ended),
        RunEnd::Interrupted { iteration } => {
            return Ok(interrupted(driver.name(), iteration, &elapsed));
        }
        RunEnd::Cancelled { ended } => return Ok(cancelled(driver.project(), &ended, &elapsed)),
        RunEnd::Judged {
            label,
            outcome,
            notice,
            tokens,
            cost,
            reply,
        } => {
            let done = judged_line(&label, tokens, cost, times.iteration_secs, &reply);
            return Ok(verdict(driver, vec![done, notice], &elapsed, outcome));
        }
        RunEnd::Denied { record } => return Ok(denied(driver, record, &elapsed)),
        RunEnd::GaveUp {
            why,
            iteration,
            gave_up,
        } => return Err(gave_up_error(driver, gave_up, why, iteration)),
    };
    Ok(Closing {
        lines: vec![line],
        exit,
    })
}

/// `--hand-back-after`: the run handed the loop back, as asked.
fn handed_back_line(driver: &Driver, iteration: u64) -> String {
    format!(
        "Handed the loop `{}` back after {}, at iteration {iteration}.",
        driver.name(),
        ralph_state::plural::count(driver.done_here(), "fresh iteration", "fresh iterations")
    )
}

/// The loop file was deleted or edited during the agent's turn by no ralph command.
fn tampered_line(driver: &Driver, what: &str, record: &std::path::Path) -> String {
    format!(
        "⚠ The loop `{}` was tampered with: {}. It did not complete. Record: {}",
        driver.name(),
        messages::printable(what),
        driver.project().shown(record)
    )
}

/// `--wait-for-reset` whose wait would pass the time budget: the loop
/// ended as `time_budget` (`record`, when it was still this run's).
fn out_of_time_line(
    driver: &Driver,
    why: &str,
    wait: u64,
    left: u64,
    record: Option<PathBuf>,
) -> String {
    let name = driver.name();
    format!(
        "⏹ The agent stopped on a rate or usage limit: {why}. Waiting {} for the reset would pass the time budget ({} left): the loop `{name}` ended as time_budget.{}",
        format_duration(wait),
        format_duration(left),
        record.map_or_else(String::new, |r| format!(
            " Record: {}",
            driver.project().shown(&r)
        ))
    )
}

/// The line of the iteration whose reply ended the loop: its time
/// (`secs`), the tokens and dollars counted so far, and what the agent was
/// refused in it.
fn judged_line(
    label: &str,
    tokens: Option<u64>,
    cost: Option<ralph_state::money::Money>,
    secs: u64,
    reply: &AgentReply,
) -> String {
    let mut figures = tokens.map_or_else(String::new, |t| format!(" · tokens {t}"));
    if let Some(cost) = cost {
        figures.push_str(&format!(" · spent {} in all", cost.dollars()));
    }
    if let Some(metered) = reply.metered {
        figures.push_str(&format!(" · metered {}", metered.dollars()));
    }
    format!(
        "✓ iteration {label} done in {}{figures}{}",
        format_duration(secs),
        denial_note(reply)
    )
}

/// The end of a run whose last reply ended the loop: `lines` (that
/// iteration's and the verdict's), the refusals of the run, and how many
/// iterations it ran; only a completed loop exits as a success.
fn verdict(driver: &Driver, mut lines: Vec<String>, elapsed: &str, outcome: Outcome) -> Closing {
    if !driver.denials().is_empty() {
        lines.push(denials_summary(driver.denials()));
    }
    lines.push(format!(
        "Ran {} in {elapsed}. `ralph log --name {}` shows every decision.",
        fresh_iterations(driver.done_here()),
        driver.name()
    ));
    let exit = match outcome {
        Outcome::Completed => RunExit::Success,
        _ => RunExit::Ended,
    };
    Closing { lines, exit }
}

/// Ctrl-C: the agent was stopped and the loop paused.
fn interrupted(name: &str, iteration: Option<u64>, elapsed: &str) -> Closing {
    let name = ralph_fs::display::line(name);
    let line = match iteration {
        Some(iteration) => format!(
            "⏸ Interrupted: the agent was stopped after {elapsed} and loop `{name}` was paused at iteration {iteration}, its count and spend kept. `ralph run --name {name}` goes on; `ralph cancel --name {name}` ends it."
        ),
        None => format!(
            "⏹ Interrupted: the agent was stopped after {elapsed}; loop `{name}` was no longer this run's, so it was left as it is."
        ),
    };
    Closing {
        lines: vec![String::new(), line],
        exit: RunExit::Interrupted,
    }
}

/// Ctrl-C in a fleet's child: the agent was stopped and each loop
/// recorded as cancelled.
fn cancelled(project: &Project, ended: &[(String, u64, PathBuf)], elapsed: &str) -> Closing {
    let mut lines = vec![String::new()];
    for (name, iteration, record) in ended {
        lines.push(format!(
            "⏹ Interrupted: the agent was stopped and loop `{}` was recorded as cancelled at iteration {iteration} after {elapsed}. Record: {}",
            ralph_fs::display::line(name),
            project.shown(record)
        ));
    }
    Closing {
        lines,
        exit: RunExit::Interrupted,
    }
}

/// `1 fresh iteration`, `3 fresh iterations`.
fn fresh_iterations(n: u64) -> String {
    ralph_state::plural::count(n, "fresh iteration", "fresh iterations")
}

/// The same refusal twice in a row: the loop was ended as denied.
fn denied(driver: &Driver, record: Option<PathBuf>, elapsed: &str) -> Closing {
    let name = driver.name();
    let mut lines = Vec::new();
    if let Some(record) = record {
        let record = driver.project().shown(&record);
        lines.push(messages::ended(
            name,
            Outcome::Denied,
            moves::DENIED_TWICE,
            &record,
        ));
    }
    lines.push(denials_summary(driver.denials()));
    lines.push(format!(
        "Ran {} in {elapsed}. Fix: ralph run --permission-mode acceptEdits --name {name} \"<task>\" (or allow the tools in .claude/settings.json).",
        fresh_iterations(driver.done_here())
    ));
    Closing {
        lines,
        exit: RunExit::Ended,
    }
}

/// The agent could not run: the error, with what became of the loop told
/// after `why`.
fn gave_up_error(driver: &Driver, gave_up: GaveUp, why: String, iteration: u64) -> RunError {
    let (project, name) = (driver.project(), driver.name());
    let left =
        |to: String| format!("The loop `{name}` was left at iteration {iteration} and {to}.");
    let fate = match gave_up {
        GaveUp::Ended(record) => format!(
            "The loop `{name}` this run armed was ended as failed at iteration {iteration}, so no other session is fed its task. Record: {}",
            project.shown(&record)
        ),
        GaveUp::NotOurs => {
            format!("The loop `{name}` is no longer this run's; it was left as it is.")
        }
        GaveUp::EndFailed(e) => format!(
            "The loop `{name}` could not be ended ({e}); cancel it: ralph cancel --name {name}"
        ),
        GaveUp::HandedBack(Err(e)) => left(format!(
            "could not be handed back ({e}); cancel it or run again"
        )),
        GaveUp::HandedBack(Ok(())) => left(match driver.previous_owner() {
            Some(owner) => format!(
                "was handed back to {} as it was",
                ralph_fs::display::line(owner)
            ),
            None => "was handed back unclaimed, as it was before this run".to_owned(),
        }),
    };
    RunError::AgentCouldNotRun { why, fate }
}

/// Claude Code refuses to skip its permission prompts as root outside a
/// sandbox it can see (`IS_SANDBOX=1`, or its own bubblewrap), and exits:
/// every iteration would fail the same way. `Some(why and what to do)`
/// when `command` would meet that refusal; checked before anything is armed.
pub fn root_refusal(command: &str, root: bool, sandboxed: bool) -> Option<String> {
    let program = command.split_whitespace().next().unwrap_or_default();
    let is_claude = program.rsplit(['/', '\\']).next() == Some("claude");
    let skips =
        command.contains("dangerously-skip-permissions") || command.contains("bypassPermissions");
    (root && !sandboxed && is_claude && skips).then(|| {
        "ralph runs as root, and Claude Code refuses `--dangerously-skip-permissions` as root outside a sandbox, so every iteration would fail; nothing was armed. Run ralph as a normal user; or, in a container that is your sandbox, say so yourself: `IS_SANDBOX=1 ralph run …`; or use `ralph run --sandbox`, which sets it inside its own sandbox".to_owned()
    })
}

/// "Resuming loop …": the loop taken over, and from whom.
pub fn resuming(name: &str, found: &LoopState) -> String {
    let was = match found.session_id.as_deref() {
        Some(o) if ralph_state::fields::run_owner::is_gone(o) => {
            format!(
                "its driver {} had ended without handing it back",
                ralph_fs::display::line(o)
            )
        }
        Some(o) => format!("was driven by {}", ralph_fs::display::line(o)),
        None => "no driver had it".to_owned(),
    };
    // A loop `ralph run` drove (or armed) had fresh context at every turn.
    let fresh = match found.session_id.as_deref() {
        Some(o) if !ralph_state::fields::run_owner::is_run(o) => "; fresh context from now on",
        _ => "",
    };
    format!(
        "Resuming loop `{name}` at iteration {} ({was}){fresh}.",
        found.iteration_label(),
    )
}

/// Which usage a run of `agent` spends.
pub fn spends(agent: &str) -> String {
    format!("Spends: {}.", messages::spends_in_run(agent))
}

/// What archiving the previous PRD did, when it did anything.
pub fn archived(project: &Project, result: &std::io::Result<Option<PathBuf>>) -> Option<String> {
    match result {
        Ok(Some(dir)) => Some(format!(
            "The PRD names a new branch: the previous prd.json and progress.txt were archived in {}",
            project.shown(dir)
        )),
        Ok(None) => None,
        Err(e) => Some(format!("⚠ The PRD was not archived: {e}")),
    }
}

/// Arming flags without a task: what `ralph run` does with each, as the
/// error (there is a loop `name` to take over, or none).
pub fn flags_without_task(project: &Project, name: &str) -> RunError {
    let exists = ralph_fs::safe_fs::kind_at(&project.loop_path(name)).is_some();
    flags_error(name, exists)
}

fn flags_error(name: &str, exists: bool) -> RunError {
    if exists {
        RunError::FlagsNeedTask(name.to_owned())
    } else {
        RunError::NoLoopNoTask(name.to_owned())
    }
}

/// ` · denied: Write notes.txt, Bash …` for the iteration line, or the
/// agent's error subtype; empty when the agent was refused nothing.
fn denial_note(reply: &AgentReply) -> String {
    let mut note = String::new();
    if !reply.denials.is_empty() {
        note.push_str(&format!(" · ⚠ denied: {}", reply.denials.join(", ")));
    }
    if reply.is_error {
        note.push_str(&format!(
            " · agent error: {}",
            reply.subtype.as_deref().unwrap_or("unknown")
        ));
    }
    note
}

fn denials_summary(all: &[String]) -> String {
    format!(
        "⚠ Claude Code refused the agent: {}. In print mode nobody can approve a tool; give `--permission-mode acceptEdits` (edits in the project) or allow the tools in .claude/settings.json.",
        all.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Setup;
    use crate::reset_wait::WaitSource;
    use ralph_state::storage::registry::locate;
    use ralph_state::time::Timestamp;

    /// A run that armed `l` in `/p`; nothing is read or written.
    fn driver() -> Driver {
        let setup = Setup {
            project: Project { root: "/p".into() },
            // An absolute path on every platform (`/state` is not one on Windows).
            registry: locate(Some(&std::env::temp_dir().join("state")), None).unwrap(),
            name: "l".into(),
            agent: "agent".into(),
            hand_back_after: None,
            sandbox: None,
            cancel_on_interrupt: false,
        };
        Driver::armed(setup, "run-1".into())
    }

    fn reply() -> AgentReply {
        AgentReply::default()
    }

    fn closing(end: RunEnd) -> Closing {
        let times = Times {
            iteration_secs: 120,
            total_secs: 120,
        };
        ended(end, &driver(), times).unwrap()
    }

    #[test]
    fn claude_skipping_permissions_as_root_outside_a_sandbox_is_refused_first() {
        let preset = "claude -p --output-format json --dangerously-skip-permissions";
        let refusal = root_refusal(preset, true, false).unwrap();
        assert!(
            refusal.contains("normal user")
                && refusal.contains("IS_SANDBOX=1")
                && refusal.contains("ralph run --sandbox"),
            "{refusal}"
        );
        assert!(
            root_refusal(
                "/usr/bin/claude -p --permission-mode bypassPermissions",
                true,
                false
            )
            .is_some()
        );
        assert_eq!(root_refusal(preset, false, false), None, "not root");
        assert_eq!(root_refusal(preset, true, true), None, "sandboxed");
        assert_eq!(
            root_refusal("claude -p --output-format json", true, false),
            None,
            "asks"
        );
        assert_eq!(
            root_refusal("codex exec --dangerously-skip-permissions", true, false),
            None
        );
    }

    #[test]
    fn an_iteration_line_tells_its_figures_refusals_and_what_the_spinner_repeats() {
        let mut screen = Screen::new("l\u{1b}x");
        assert_eq!(
            screen.spinner(1, "1/5", 0),
            "⠙ ralph run `l\\x1bx` · iteration 1/5 · 0s so far · last: starting"
        );
        let reply = AgentReply {
            denials: vec!["Write a.txt".into()],
            is_error: true,
            ..reply()
        };
        let it = Iteration {
            label: "1/5".into(),
            next: 2,
            promise_refused: true,
            figures: "spent $0.10".into(),
            went_on: "promise refused by --verify",
            reply,
            raised: Vec::new(),
        };
        assert_eq!(
            screen.iterated(&it, 120),
            "✓ iteration 1/5 done in 2m · promise refused by --verify · spent $0.10 · ⚠ denied: Write a.txt · agent error: unknown · next: 2"
        );
        assert!(
            screen
                .spinner(0, "2/5", 0)
                .ends_with("last: promise refused by --verify")
        );
        screen.passed();
        assert!(screen.spinner(0, "2/5", 0).ends_with("last: paused"));
        // Each line tells its own iteration's time, not the run's so far.
        assert!(
            screen.spinner(0, "2/5", 150).contains(" · 30s so far · "),
            "{}",
            screen.spinner(0, "2/5", 150)
        );
        let second = screen.iterated(&it, 200);
        assert!(
            second.starts_with("✓ iteration 1/5 done in 1m · "),
            "{second}"
        );
    }

    #[test]
    fn a_wait_for_the_reset_is_told_when_it_starts_while_it_lasts_and_when_it_is_over() {
        let mut screen = Screen::new("l");
        let wait = ResetWait {
            why: "429".into(),
            label: "3/5".into(),
            secs: 300,
            until: Timestamp(0),
            source: WaitSource::BackOff,
        };
        assert_eq!(
            screen.waiting(&wait),
            "⏸ ralph run `l` · 429 · waiting 5m for the reset at 1970-01-01T00:00:00Z (no reset time known: backing off); iteration 3/5 was not counted. Ctrl-C or `ralph cancel --name l` stops the wait."
        );
        assert_eq!(
            screen.still_waiting(59, &wait),
            "⏸ ralph run `l` · rate or usage limit · waiting 59s for the reset at 1970-01-01T00:00:00Z"
        );
        assert_eq!(
            screen.wait_over(&wait),
            "▶ ralph run `l` · the wait is over; iteration 3/5 runs again."
        );
        assert!(
            screen
                .spinner(0, "3/5", 0)
                .ends_with("last: waited for a limit's reset")
        );
    }

    #[test]
    fn each_end_has_its_words_and_its_exit() {
        let gone = closing(RunEnd::Gone);
        assert_eq!(
            gone.lines,
            ["The loop `l` is gone (cancelled or ended elsewhere)."]
        );
        assert_eq!(gone.exit, RunExit::Ended, "only a completed loop exits 0");
        let limited = closing(RunEnd::Limited {
            why: "429".into(),
            iteration: 3,
        });
        assert_eq!(limited.exit, RunExit::Limited);
        assert!(limited.lines[0].starts_with(
            "⏸ The agent stopped on a rate or usage limit: 429. Iteration 3 of the loop `l`"
        ));
        let late = closing(RunEnd::OutOfTimeWaiting {
            why: "429".into(),
            wait: 600,
            left: 60,
            record: Some("/p/.claude/ralph/history/r.md".into()),
        });
        assert_eq!(late.exit, RunExit::Ended);
        assert!(
            late.lines[0].ends_with(
                "(1m left): the loop `l` ended as time_budget. Record: .claude/ralph/history/r.md"
            ),
            "{}",
            late.lines[0]
        );
        let stopped = closing(RunEnd::Interrupted { iteration: Some(2) });
        assert_eq!(stopped.exit, RunExit::Interrupted);
        assert_eq!(stopped.lines[0], "", "a new line after the spinner's");
        assert_eq!(
            stopped.lines[1],
            "⏸ Interrupted: the agent was stopped after 2m and loop `l` was paused at iteration 2, its count and spend kept. `ralph run --name l` goes on; `ralph cancel --name l` ends it."
        );
    }

    #[test]
    fn a_judged_end_exits_by_its_outcome_and_sums_the_run_up() {
        let judged = |outcome| {
            closing(RunEnd::Judged {
                label: "2/5".into(),
                outcome,
                notice: "the notice".into(),
                tokens: Some(1200),
                cost: None,
                reply: reply(),
            })
        };
        let done = judged(Outcome::Completed);
        assert_eq!(done.exit, RunExit::Success);
        assert_eq!(
            done.lines,
            [
                "✓ iteration 2/5 done in 2m · tokens 1200",
                "the notice",
                "Ran 0 fresh iterations in 2m. `ralph log --name l` shows every decision.",
            ]
        );
        assert_eq!(judged(Outcome::MaxIterations).exit, RunExit::Ended);
        let denied = closing(RunEnd::Denied { record: None });
        assert_eq!(denied.exit, RunExit::Ended);
        assert!(denied.lines[0].starts_with("⚠ Claude Code refused the agent: ."));
        assert!(denied.lines[1].starts_with(
            "Ran 0 fresh iterations in 2m. Fix: ralph run --permission-mode acceptEdits --name l"
        ));
    }

    #[test]
    fn an_agent_that_could_not_run_is_an_error_that_tells_what_became_of_the_loop() {
        let gave_up = |gave_up| {
            let end = RunEnd::GaveUp {
                why: "no agent".into(),
                iteration: 3,
                gave_up,
            };
            ended(
                end,
                &driver(),
                Times {
                    iteration_secs: 0,
                    total_secs: 0,
                },
            )
            .unwrap_err()
            .to_string()
        };
        assert_eq!(
            gave_up(GaveUp::Ended("/p/.claude/ralph/history/r.md".into())),
            "no agent\nThe loop `l` this run armed was ended as failed at iteration 3, so no other session is fed its task. Record: .claude/ralph/history/r.md"
        );
        assert_eq!(
            gave_up(GaveUp::NotOurs),
            "no agent\nThe loop `l` is no longer this run's; it was left as it is."
        );
        assert_eq!(
            gave_up(GaveUp::HandedBack(Ok(()))),
            "no agent\nThe loop `l` was left at iteration 3 and was handed back unclaimed, as it was before this run."
        );
        assert_eq!(
            gave_up(GaveUp::HandedBack(Err(RunError::NoLoopToResume(
                "l".into()
            )))),
            "no agent\nThe loop `l` was left at iteration 3 and could not be handed back (no loop named `l` to resume); cancel it or run again."
        );
        assert_eq!(
            gave_up(GaveUp::EndFailed(RunError::NoLoopToResume("l".into()))),
            "no agent\nThe loop `l` could not be ended (no loop named `l` to resume); cancel it: ralph cancel --name l"
        );
    }

    #[test]
    fn arming_flags_without_a_task_are_a_usage_error_worded_by_whether_the_loop_exists() {
        use ralph_fs::error::{Exit as _, ExitClass};
        let none = flags_error("l", false);
        assert_eq!(none.exit_class(), ExitClass::Usage);
        assert!(
            none.to_string()
                .starts_with("no loop named `l` here and no task given")
        );
        let there = flags_error("l", true);
        assert_eq!(there.exit_class(), ExitClass::Usage);
        assert!(
            there
                .to_string()
                .starts_with("the loop `l` exists; without a task")
        );
        assert_eq!(
            spends("true"),
            format!("Spends: {}.", messages::spends_in_run("true"))
        );
    }
}
