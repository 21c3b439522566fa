//! `ralph run`'s terminal. The run itself (arming aside) is the core's
//! [`Driver`]: every iteration is a new agent process and the decision after
//! it is the Stop hook's own (`engine::step`), so both modes share one state
//! file, one set of rules and one history. Here: the arguments, Ctrl-C, the
//! spinner, the lines and the summary, and the exit code.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ralph_core::decide::Outcome as LoopOutcome;
use ralph_core::loop_file::messages;
use ralph_core::loop_file::state::LoopState;
use ralph_core::loop_file::store::Project;
use ralph_core::run::agent::{self, Finished};
use ralph_core::run::fleet::archive;
use ralph_core::run::reset_wait::{self, Source};
use ralph_core::run::{self, Call, Driver, End, Event, GaveUp, Iteration, ResetWait, Setup};
use ralph_core::time::{Timestamp, format_duration};

use super::loops::{arm, arm_request, read_stdin};
use crate::cli::RunArgs;
use crate::exit::{Failure, Outcome};

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

pub fn run(args: RunArgs) -> Outcome {
    let agent =
        ralph_core::run::presets::command_line(&args.agent, args.permission_mode.as_deref())?;
    // `--agent codex` etc.: a preset's command line (ralph_core::run::presets).
    let args = RunArgs { agent, ..args };
    let (driver, terminal) = start(args)?;
    iterate(driver, terminal)
}

/// What the terminal shows of a run: the spinner while the agent works,
/// a line per iteration, the summary at the end.
struct Terminal {
    /// Set by Ctrl-C; stops the agent.
    stop: Arc<AtomicBool>,
    live_line: bool,
    started: Instant,
    /// The loop's name, escaped for the spinner.
    name: String,
    /// How the last iteration went, for the spinner.
    last: &'static str,
}

/// Arms the loop (a task was given) or takes it over, archives a PRD whose
/// branch changed, and sets Ctrl-C to stop the agent.
fn start(args: RunArgs) -> Result<(Driver, Terminal), Failure> {
    let project = crate::env::project();
    let registry = crate::env::require_registry()?;
    let own_id = ralph_core::loop_file::run_owner::own_id();
    let prompt = if !args.prompt.is_empty() {
        Some(args.prompt.join(" "))
    } else if !std::io::stdin().is_terminal() {
        Some(read_stdin()?).filter(|p| !p.trim().is_empty())
    } else {
        None
    };
    let spends = ralph_core::loop_file::messages::spends_in_run(&args.agent);
    // `--prd` alone is a task: the PRD's stories.
    let prompt = prompt.or_else(|| args.arm.prd.as_ref().map(|_| String::new()));
    let setup = Setup {
        project,
        registry,
        name: args.name.clone(),
        agent: args.agent,
        hand_back_after: args.hand_back_after,
    };
    let mut driver = match prompt {
        Some(prompt) => {
            let request = arm_request(
                &setup.project,
                args.name.clone(),
                prompt,
                args.arm,
                Some(own_id.clone()),
                args.force,
            )?;
            if let Some(prd) = &request.prd {
                say!("{}", super::loops::story_commands(prd));
            }
            arm(&setup.project, &request)?;
            Driver::armed(setup, own_id)
        }
        None if args.arm.any() => return Err(flags_without_task(&setup.project, &args.name)),
        None => {
            let (driver, found) = Driver::take_over(setup, &own_id)?;
            say!("{}", resuming(&args.name, &found));
            driver
        }
    };
    if args.wait_for_reset {
        driver.wait_for_reset(first_back_off());
    }
    say!("Spends: {spends}.");
    let project = driver.project();
    match archive::archive_if_branch_changed(&project.root, Timestamp::now()) {
        Ok(Some(dir)) => say!(
            "The PRD names a new branch: the previous prd.json and progress.txt were archived in {}",
            crate::env::display(project, &dir)
        ),
        Ok(None) => {}
        Err(e) => say!("⚠ The PRD was not archived: {e}"),
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    // A second Ctrl-C while ralph is cleaning up still only sets the flag:
    // the loop is recorded before ralph exits.
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    let terminal = Terminal {
        stop,
        live_line: std::io::stdout().is_terminal(),
        started: Instant::now(),
        name: ralph_core::display::line(&args.name).into_owned(),
        last: "starting",
    };
    Ok((driver, terminal))
}

/// Drives the loop to its end, showing each step.
fn iterate(mut driver: Driver, mut terminal: Terminal) -> Outcome {
    loop {
        let shown = &terminal;
        let event = driver.next(&mut |call: Call<'_>| shown.run_agent(call))?;
        match event {
            Event::Passed => terminal.last = "paused",
            Event::Waiting(wait) => {
                if let Some(end) = terminal.wait(&driver, &wait)? {
                    return terminal.ended(end, &driver);
                }
                terminal.last = "waited for a limit's reset";
            }
            Event::Iterated(iteration) => terminal.iterated(&iteration),
            Event::Ended(end) => return terminal.ended(end, &driver),
        }
    }
}

impl Terminal {
    fn elapsed(&self) -> String {
        format_duration(self.started.elapsed().as_secs())
    }

    /// Runs the agent once, with the spinner on a terminal.
    fn run_agent(&self, call: Call<'_>) -> std::io::Result<Finished> {
        let mut frame = 0;
        let finished = agent::run(call.command, call.root, call.prompt, &self.stop, || {
            if self.live_line {
                frame += 1;
                // The escape codes are ralph's own; the name is escaped.
                let _ = write!(
                    std::io::stdout(),
                    "\r\x1b[2K{} ralph run `{}` · iteration {} · {} · last: {}",
                    SPINNER[frame % SPINNER.len()],
                    self.name,
                    call.label,
                    self.elapsed(),
                    self.last
                );
                let _ = std::io::stdout().flush();
            }
        });
        if finished.is_ok() && self.live_line {
            let _ = write!(std::io::stdout(), "\r\x1b[2K");
        }
        finished
    }

    /// `--wait-for-reset`: sleeps until the reset, a second at a time, with
    /// a live line on a terminal; the end when Ctrl-C, a cancel, a pause or
    /// a takeover came first.
    fn wait(&self, driver: &Driver, wait: &ResetWait) -> Result<Option<End>, Failure> {
        let from = match wait.source {
            Source::Window => "the 5-hour window's reset",
            Source::BackOff => "no reset time known: backing off",
        };
        say!(
            "⏸ ralph run `{}` · {} · waiting {} for the reset at {} ({from}); iteration {} was not counted. Ctrl-C or `ralph cancel --name {}` stops the wait.",
            self.name,
            wait.why,
            format_duration(wait.secs),
            wait.until,
            wait.label,
            self.name
        );
        let deadline = Instant::now() + Duration::from_secs(wait.secs);
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Ok(Some(driver.interrupt()?));
            }
            if let Some(end) = driver.check_while_waiting()? {
                self.clear_live_line();
                return Ok(Some(end));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if self.live_line {
                // Rounded up: "0s" only once the wait is over.
                let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
                let _ = write!(
                    std::io::stdout(),
                    "\r\x1b[2K⏸ ralph run `{}` · rate or usage limit · waiting {} for the reset at {}",
                    self.name,
                    format_duration(secs),
                    wait.until
                );
                let _ = std::io::stdout().flush();
            }
            std::thread::sleep(left.min(Duration::from_secs(1)));
        }
        self.clear_live_line();
        say!(
            "▶ ralph run `{}` · the wait is over; iteration {} runs again.",
            self.name,
            wait.label
        );
        Ok(None)
    }

    fn clear_live_line(&self) {
        if self.live_line {
            let _ = write!(std::io::stdout(), "\r\x1b[2K");
            let _ = std::io::stdout().flush();
        }
    }

    /// The line for an iteration after which the loop goes on.
    fn iterated(&mut self, it: &Iteration) {
        self.last = if it.promise_refused {
            "promise refused by --verify"
        } else {
            "no promise yet"
        };
        let figures = if it.figures.is_empty() {
            String::new()
        } else {
            format!(" · {}", it.figures)
        };
        say!(
            "✓ iteration {} done · {} · {}{figures}{} · next: {}",
            it.label,
            self.elapsed(),
            self.last,
            denial_note(&it.reply),
            it.next
        );
    }

    /// What the run's end says, and its exit code.
    fn ended(&self, end: End, driver: &Driver) -> Outcome {
        let name = driver.name();
        match end {
            End::Gone => say!("The loop `{name}` is gone (cancelled or ended elsewhere)."),
            End::TakenOver { by } => say!(
                "The loop `{name}` was taken over by {}; this run stops.",
                by.as_deref().unwrap_or("another driver")
            ),
            End::Paused => say!(
                "The loop `{name}` is paused; handed back. Resume it with `ralph resume` and `ralph run --name {name}`."
            ),
            End::HandedBack { iteration } => say!(
                "Handed the loop `{name}` back after {} fresh iterations, at iteration {iteration}.",
                driver.done_here()
            ),
            End::Limited { why, iteration } => {
                say!(
                    "⏸ The agent stopped on a rate or usage limit: {why}. Iteration {iteration} of the loop `{name}` was not counted; the loop waits. Run `ralph run --name {name}` again once the limit has reset."
                );
                return Err(crate::exit::Failure {
                    message: String::new(),
                    code: crate::exit::code::LIMITED,
                });
            }
            End::OutOfTimeWaiting {
                why,
                wait,
                left,
                record,
            } => {
                say!(
                    "⏹ The agent stopped on a rate or usage limit: {why}. Waiting {} for the reset would pass the time budget ({} left): the loop `{name}` ended as time_budget.{}",
                    format_duration(wait),
                    format_duration(left),
                    record.map_or_else(String::new, |r| format!(
                        " Record: {}",
                        crate::env::display(driver.project(), &r)
                    ))
                );
                return Err(Failure::ended());
            }
            End::ChangedWhileAgentRan => say!(
                "The loop `{name}` changed while the agent ran (cancelled or paused elsewhere); this run stops."
            ),
            End::Changed { notice } => say!("{notice}"),
            End::Interrupted { ended } => return self.interrupted(driver.project(), ended),
            End::Judged {
                label,
                outcome,
                notice,
                tokens,
                cost,
                reply,
            } => {
                let figures = Figures { tokens, cost };
                return self.judged(driver, &label, outcome, &notice, figures, &reply);
            }
            End::Denied { record } => return self.denied(driver, record),
            End::GaveUp {
                why,
                iteration,
                gave_up,
            } => return Err(gave_up_message(driver, gave_up, &why, iteration)),
        }
        Ok(())
    }

    /// The reply ended the loop: its line, the ending and the summary.
    fn judged(
        &self,
        driver: &Driver,
        label: &str,
        outcome: LoopOutcome,
        notice: &str,
        figures: Figures,
        reply: &agent::AgentReply,
    ) -> Outcome {
        let elapsed = self.elapsed();
        let mut tokens = figures
            .tokens
            .map_or_else(String::new, |t| format!(" · tokens {t}"));
        if let Some(cost) = figures.cost {
            tokens.push_str(&format!(" · spent {}", cost.dollars()));
        }
        say!(
            "✓ iteration {label} done · {elapsed}{tokens}{}",
            denial_note(reply)
        );
        say!("{notice}");
        if !driver.denials().is_empty() {
            say!("{}", denials_summary(driver.denials()));
        }
        say!(
            "Ran {} fresh iteration(s) in {elapsed}. `ralph log --name {}` shows every decision.",
            driver.done_here(),
            driver.name()
        );
        match outcome {
            LoopOutcome::Completed => Ok(()),
            _ => Err(Failure::ended()),
        }
    }

    /// Ctrl-C: the agent was stopped and the loop recorded as cancelled.
    fn interrupted(&self, project: &Project, ended: Vec<(String, u64, PathBuf)>) -> Outcome {
        say!();
        for (name, iteration, record) in ended {
            say!(
                "⏹ Interrupted: the agent was stopped and loop `{name}` was recorded as cancelled at iteration {iteration} after {}. Record: {}",
                self.elapsed(),
                crate::env::display(project, &record)
            );
        }
        Err(Failure::interrupted())
    }

    /// The same refusal twice in a row: the loop was ended as denied.
    fn denied(&self, driver: &Driver, record: Option<PathBuf>) -> Outcome {
        let name = driver.name();
        if let Some(record) = record {
            let record = crate::env::display(driver.project(), &record);
            say!(
                "{}",
                messages::ended(name, LoopOutcome::Denied, run::DENIED_TWICE, &record)
            );
        }
        say!("{}", denials_summary(driver.denials()));
        say!(
            "Ran {} fresh iteration(s) in {}. Fix: ralph run --permission-mode acceptEdits --name {name} \"<task>\" (or allow the tools in .claude/settings.json).",
            driver.done_here(),
            self.elapsed()
        );
        Err(Failure::ended())
    }
}

/// The first back-off of `--wait-for-reset`: five minutes, or
/// `RALPH_RESET_WAIT_SECS` (for tests, so a wait takes seconds).
fn first_back_off() -> u64 {
    std::env::var("RALPH_RESET_WAIT_SECS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(reset_wait::FIRST_BACK_OFF_SECS)
}

/// "Resuming loop …": the loop taken over, and from whom.
fn resuming(name: &str, found: &LoopState) -> String {
    let was = match found.session_id.as_deref() {
        Some(o) if ralph_core::loop_file::run_owner::is_gone(o) => {
            format!(
                "its driver {} had ended without handing it back",
                ralph_core::display::line(o)
            )
        }
        Some(o) => format!("was driven by {}", ralph_core::display::line(o)),
        None => "no session had claimed it yet".to_owned(),
    };
    format!(
        "Resuming loop `{name}` at iteration {} ({was}); fresh context from now on.",
        found.iteration_label(),
    )
}

/// What a judged run counted: tokens and dollars, when the agent said.
struct Figures {
    tokens: Option<u64>,
    cost: Option<ralph_core::money::Money>,
}

/// Arming flags without a task: say what `ralph run` does with each.
fn flags_without_task(project: &Project, name: &str) -> Failure {
    if ralph_core::fs::safe_fs::kind_at(&project.loop_path(name)).is_none() {
        return Failure::usage(format!(
            "no loop named `{name}` here and no task given; nothing was armed. Give the task as arguments or on stdin: ralph run --completion-promise DONE \"<task>\""
        ));
    }
    Failure::usage(format!(
        "the loop `{name}` exists; without a task, `ralph run --name {name}` takes it over with its own settings, so arming flags only go with a new task (use --force to replace it)"
    ))
}

/// ` · denied: Write notes.txt, Bash …` for the iteration line, or the
/// agent's error subtype; empty when the agent was refused nothing.
fn denial_note(reply: &agent::AgentReply) -> String {
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

/// The agent could not run: what became of the loop, told after `why`.
fn gave_up_message(driver: &Driver, gave_up: GaveUp, why: &str, iteration: u64) -> Failure {
    let (project, name) = (driver.project(), driver.name());
    let to = match gave_up {
        GaveUp::Ended(record) => return format!(
            "{why}\nThe loop `{name}` this run armed was ended as failed at iteration {iteration}, so no other session is fed its task. Record: {}",
            crate::env::display(project, &record)
        )
        .into(),
        GaveUp::NotOurs => return format!("{why}\nThe loop `{name}` is no longer this run's; it was left as it is.").into(),
        GaveUp::EndFailed(e) => return format!("{why}\nThe loop `{name}` could not be ended ({e}); cancel it: ralph cancel --name {name}").into(),
        GaveUp::HandedBack(Err(e)) => format!(
            "could not be handed back ({e}); cancel it or run again"
        ),
        GaveUp::HandedBack(Ok(())) => match driver.previous_owner() {
            Some(owner) => format!(
                "was handed back to {} as it was",
                ralph_core::display::line(owner)
            ),
            None => "was handed back unclaimed, as it was before this run".to_owned(),
        },
    };
    format!("{why}\nThe loop `{name}` was left at iteration {iteration} and {to}.").into()
}
