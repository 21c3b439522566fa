//! `ralph run`: the fresh-context driver. Every iteration is a new agent
//! process; the decision after it is the Stop hook's own (`engine::step`),
//! so both modes share one state file, one set of rules and one history.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use ralph_core::agent::{self, Finished};
use ralph_core::decide::Outcome as LoopOutcome;
use ralph_core::engine::Step;
use ralph_core::lifecycle::Loop;
use ralph_core::messages;
use ralph_core::prd;
use ralph_core::registry::Registry;
use ralph_core::run_loop::{self, GaveUp, Standing};
use ralph_core::state::LoopState;
use ralph_core::store::{LoopFile, Project};
use ralph_core::time::{Timestamp, format_duration};

use super::loops::{arm, arm_request, read_stdin};
use super::{Failure, Outcome};
use crate::cli::RunArgs;

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

pub fn run(args: RunArgs) -> Outcome {
    if let Some(n) = args.fanout.parallel {
        return super::parallel::run(args, usize::from(n));
    }
    let agent = agent_command(&args)?;
    // `--agent codex` etc.: a preset's command line (ralph_core::agent_presets).
    let args = RunArgs { agent, ..args };
    start(args)?.iterate()
}

/// One `ralph run` and what the terminal shows of it.
struct Run {
    /// The agent's command line.
    agent: String,
    /// `--hand-back-after`: how many fresh iterations before handing back.
    hand_back_after: Option<u64>,
    project: Project,
    registry: Registry,
    file: LoopFile,
    /// The owner id this run writes into the loop.
    driver: String,
    /// Who to hand the loop back to when the run ends.
    previous_owner: Option<String>,
    /// A loop this run armed is this run's alone: if the run cannot go on,
    /// it ends (as failed) rather than wait for the next unrelated session.
    armed_here: bool,
    stop: Arc<AtomicBool>,
    live_line: bool,
    started: Instant,
    done_here: u64,
    last: String,
    /// Refusals of the last iteration, and every one seen, for the summary.
    last_denials: Vec<String>,
    all_denials: Vec<String>,
}

/// Arms the loop (a task was given) or takes it over, archives a PRD whose
/// branch changed, and sets Ctrl-C to stop the agent.
fn start(args: RunArgs) -> Result<Run, Failure> {
    let project = super::project();
    let registry = super::require_registry()?;
    let own_id = ralph_core::driver::own_id();
    let prompt = if !args.prompt.is_empty() {
        Some(args.prompt.join(" "))
    } else if !std::io::stdin().is_terminal() {
        Some(read_stdin()?).filter(|p| !p.trim().is_empty())
    } else {
        None
    };
    let armed_here = prompt.is_some();
    let (driver, previous_owner) = match prompt {
        Some(prompt) => {
            let request = arm_request(
                args.name.clone(),
                prompt,
                args.arm,
                Some(own_id.clone()),
                args.force,
            );
            arm(&project, &request)?;
            (own_id, None)
        }
        None if args.arm.any() => return Err(flags_without_task(&project, &args.name)),
        None => take_over(&project, &registry, &args.name, &own_id)?,
    };
    match prd::archive_if_branch_changed(&project.root, Timestamp::now()) {
        Ok(Some(dir)) => say!(
            "The PRD names a new branch: the previous prd.json and progress.txt were archived in {}",
            super::display(&project, &dir)
        ),
        Ok(None) => {}
        Err(e) => say!("⚠ The PRD was not archived: {e}"),
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    // A second Ctrl-C while ralph is cleaning up still only sets the flag:
    // the loop is recorded before ralph exits.
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    let file = LoopFile {
        name: args.name.clone(),
        path: project.loop_path(&args.name),
    };
    Ok(Run {
        agent: args.agent,
        hand_back_after: args.hand_back_after,
        project,
        registry,
        file,
        driver,
        previous_owner,
        armed_here,
        stop,
        live_line: std::io::stdout().is_terminal(),
        started: Instant::now(),
        done_here: 0,
        last: String::from("starting"),
        last_denials: Vec::new(),
        all_denials: Vec::new(),
    })
}

/// What an iteration leaves for the next: its prompt, or the run's end.
enum Next {
    Prompt(Option<String>),
    Done(Outcome),
}

impl Run {
    fn iterate(mut self) -> Outcome {
        let mut next_prompt: Option<String> = None;
        loop {
            let Some(live) = run_loop::read(&self.project, &self.registry, &self.file)? else {
                say!(
                    "The loop `{}` is gone (cancelled or ended elsewhere).",
                    self.file.name
                );
                return Ok(());
            };
            if let Some(done) = self.stands_down(&live.state)? {
                return done;
            }
            match self.iteration(live, next_prompt.take())? {
                Next::Prompt(prompt) => next_prompt = prompt,
                Next::Done(outcome) => return outcome,
            }
        }
    }

    /// Stops the run when the loop is no longer this run's to drive.
    fn stands_down(&self, state: &LoopState) -> Result<Option<Outcome>, Failure> {
        let name = &self.file.name;
        match run_loop::standing(state, &self.driver, self.done_here, self.hand_back_after) {
            Standing::Go => return Ok(None),
            Standing::TakenOver(by) => say!(
                "The loop `{name}` was taken over by {}; this run stops.",
                by.as_deref().unwrap_or("another driver")
            ),
            Standing::Paused => {
                self.hand_back()?;
                say!(
                    "The loop `{name}` is paused; handed back. Resume it with `ralph resume` and `ralph run --name {name}`."
                );
            }
            Standing::HandBackDue => {
                self.hand_back()?;
                say!(
                    "Handed the loop `{name}` back after {} fresh iterations, at iteration {}.",
                    self.done_here,
                    state.iteration
                );
            }
        }
        Ok(Some(Ok(())))
    }

    fn hand_back(&self) -> Result<(), Failure> {
        run_loop::hand_back(
            &self.project,
            &self.file,
            &self.driver,
            self.previous_owner.as_deref(),
        )?;
        Ok(())
    }

    /// The agent could not give this iteration a reply: the loop is left
    /// as it was found (or ended, if this run armed it).
    fn give_up_here(&self, why: &str, iteration: u64) -> Failure {
        let previous_owner = self.previous_owner.as_deref();
        let gave_up = run_loop::give_up(
            &self.project,
            &self.registry,
            &self.file,
            &self.driver,
            self.armed_here,
            previous_owner,
            why,
        );
        gave_up_message(
            &self.project,
            &self.file.name,
            gave_up,
            previous_owner,
            why,
            iteration,
        )
    }

    /// Runs the agent once, with the spinner on a terminal.
    fn run_agent(&self, prompt: &str, label: &str) -> std::io::Result<Finished> {
        let mut frame = 0;
        let finished = agent::run(&self.agent, &self.project.root, prompt, &self.stop, || {
            if self.live_line {
                frame += 1;
                // The escape codes are ralph's own; the name is escaped.
                print!(
                    "\r\x1b[2K{} ralph run `{}` · iteration {label} · {} · last: {}",
                    SPINNER[frame % SPINNER.len()],
                    ralph_core::display::line(&self.file.name),
                    format_duration(self.started.elapsed().as_secs()),
                    self.last
                );
                let _ = std::io::stdout().flush();
            }
        });
        if finished.is_ok() && self.live_line {
            print!("\r\x1b[2K");
        }
        finished
    }

    /// One fresh iteration: the agent runs, its reply is judged, the line
    /// for it is printed.
    fn iteration(&mut self, live: Loop, next_prompt: Option<String>) -> Result<Next, Failure> {
        let state = &live.state;
        let prompt = next_prompt.unwrap_or_else(|| {
            format!(
                "{}{}",
                state.prompt,
                messages::footer(&self.file.name, state, state.iteration, &[])
            )
        });
        let label = state.iteration_label();
        let (status, stdout, stderr_tail) = match self.run_agent(&prompt, &label) {
            Err(e) => {
                let why = format!("could not start the agent `{}`: {e}", self.agent);
                return Err(self.give_up_here(&why, state.iteration));
            }
            Ok(Finished::Interrupted) => {
                return Ok(Next::Done(interrupted(
                    &self.project,
                    &self.registry,
                    &self.file,
                    self.started,
                )));
            }
            Ok(Finished::Exited {
                status,
                stdout,
                stderr_tail,
            }) => (status, stdout, stderr_tail),
        };
        let reply = agent::parse_output(&stdout);
        if reply.text.is_empty() && !status.success() {
            let why = format!(
                "the agent `{}` failed ({status}) without a reply.\n{}",
                self.agent,
                messages::escape_controls(&stderr_tail)
            );
            return Err(self.give_up_here(&why, state.iteration));
        }
        for d in &reply.denials {
            if !self.all_denials.contains(d) {
                self.all_denials.push(d.clone());
            }
        }
        let denied_again = !reply.denials.is_empty() && reply.denials == self.last_denials;
        self.last_denials = reply.denials.clone();
        self.done_here += 1;
        let judged = run_loop::judge(&self.project, &self.registry, &live, &reply, &self.driver)?;
        let step = match judged {
            None => {
                say!(
                    "The loop `{}` changed while the agent ran (cancelled or paused elsewhere); this run stops.",
                    self.file.name
                );
                return Ok(Next::Done(Ok(())));
            }
            Some(step) => step,
        };
        self.report(step, &live.state, &reply, &label, denied_again)
    }

    /// The line for a judged iteration, and what comes next.
    fn report(
        &mut self,
        step: Step,
        state: &LoopState,
        reply: &agent::AgentReply,
        label: &str,
        denied_again: bool,
    ) -> Result<Next, Failure> {
        let elapsed = format_duration(self.started.elapsed().as_secs());
        let denied_note = denial_note(reply);
        match step {
            Step::Passed => {
                self.last = "paused".into();
                Ok(Next::Prompt(None))
            }
            Step::Changed { notice } => {
                say!("{notice}");
                Ok(Next::Done(Ok(())))
            }
            Step::Continued {
                next,
                reason,
                promise_refused,
                progress,
                ..
            } => {
                self.last = if promise_refused {
                    "promise refused by --verify".into()
                } else {
                    "no promise yet".into()
                };
                let figures = messages::guard_figures(state, &progress);
                let figures = if figures.is_empty() {
                    String::new()
                } else {
                    format!(" · {figures}")
                };
                say!(
                    "✓ iteration {label} done · {elapsed} · {}{figures}{denied_note} · next: {next}",
                    self.last
                );
                if denied_again {
                    return Ok(Next::Done(end_denied(
                        &self.project,
                        &self.registry,
                        &self.file,
                        &self.driver,
                        &self.all_denials,
                        self.done_here,
                        &elapsed,
                    )));
                }
                Ok(Next::Prompt(Some(reason)))
            }
            Step::Ended {
                outcome, notice, ..
            } => {
                let tokens = seen_tokens(state, reply.tokens);
                say!("✓ iteration {label} done · {elapsed}{tokens}{denied_note}");
                say!("{notice}");
                if !self.all_denials.is_empty() {
                    say!("{}", denials_summary(&self.all_denials));
                }
                say!(
                    "Ran {} fresh iteration(s) in {elapsed}. `ralph log --name {}` shows every decision.",
                    self.done_here,
                    self.file.name
                );
                Ok(Next::Done(match outcome {
                    LoopOutcome::Completed => Ok(()),
                    _ => Err(Failure::ended()),
                }))
            }
        }
    }
}

fn seen_tokens(state: &LoopState, added: Option<u64>) -> String {
    match added {
        Some(t) => format!(" · tokens {}", state.progress.tokens_used.saturating_add(t)),
        None => String::new(),
    }
}

/// Takes over a loop armed earlier and says from whom. Returns the owner
/// id written and the owner to hand the loop back to when the run ends.
fn take_over(
    project: &Project,
    registry: &Registry,
    name: &str,
    own_id: &str,
) -> Result<(String, Option<String>), Failure> {
    let taken = run_loop::take_over(project, registry, name, own_id)?;
    let was = match taken.found.session_id.as_deref() {
        Some(o) if ralph_core::driver::is_gone(o) => {
            format!(
                "its driver {} had ended without handing it back",
                messages::escape_controls(o)
            )
        }
        Some(o) => format!("was driven by {}", messages::escape_controls(o)),
        None => "no session had claimed it yet".to_owned(),
    };
    say!(
        "Resuming loop `{name}` at iteration {} ({was}); fresh context from now on.",
        taken.found.iteration_label(),
    );
    Ok((taken.driver, taken.back_to))
}

/// Ctrl-C: the agent is already stopped; record the loop as cancelled.
fn interrupted(
    project: &Project,
    registry: &Registry,
    file: &LoopFile,
    started: Instant,
) -> Outcome {
    let ended = run_loop::record_interrupted(project, registry, &file.name)?;
    say!();
    for (name, iteration, record) in ended {
        say!(
            "⏹ Interrupted: the agent was stopped and loop `{name}` was recorded as cancelled at iteration {iteration} after {}. Record: {}",
            format_duration(started.elapsed().as_secs()),
            super::display(project, &record)
        );
    }
    Err(Failure::interrupted())
}

/// The agent's command line: a preset's, or the default with the chosen
/// permission mode. `--permission-mode` belongs to Claude Code in print
/// mode, so it is refused next to any other agent (which has its own flags).
pub(super) fn agent_command(args: &RunArgs) -> Result<String, Failure> {
    let resolved = ralph_core::agent_presets::resolve(&args.agent);
    match &args.permission_mode {
        None => Ok(resolved),
        Some(mode) if args.agent == agent::DEFAULT_AGENT => {
            Ok(format!("{resolved} --permission-mode {mode}"))
        }
        Some(_) => Err(Failure::usage(format!(
            "--permission-mode goes with the default agent (`{}`); `{}` sets its own permissions: put the flag into the --agent command",
            agent::DEFAULT_AGENT,
            args.agent
        ))),
    }
}

/// Arming flags without a task: say what `ralph run` does with each.
fn flags_without_task(project: &Project, name: &str) -> Failure {
    if ralph_core::safe_fs::kind_at(&project.loop_path(name)).is_none() {
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

/// The same refusal twice in a row: the loop ends as denied.
fn end_denied(
    project: &Project,
    registry: &Registry,
    file: &LoopFile,
    driver: &str,
    all: &[String],
    done_here: u64,
    elapsed: &str,
) -> Outcome {
    let why = run_loop::DENIED_TWICE;
    if let Some(record) = run_loop::end_denied(project, registry, &file.name, driver)? {
        say!(
            "{}",
            messages::ended(
                &file.name,
                LoopOutcome::Denied,
                why,
                &super::display(project, &record)
            )
        );
    }
    say!("{}", denials_summary(all));
    say!(
        "Ran {done_here} fresh iteration(s) in {elapsed}. Fix: ralph run --permission-mode acceptEdits --name {} \"<task>\" (or allow the tools in .claude/settings.json).",
        file.name
    );
    Err(Failure::ended())
}

/// The agent could not run: what became of the loop, told after `why`.
fn gave_up_message(
    project: &Project,
    name: &str,
    gave_up: GaveUp,
    previous_owner: Option<&str>,
    why: &str,
    iteration: u64,
) -> Failure {
    let to = match gave_up {
        GaveUp::Ended(record) => return format!(
            "{why}\nThe loop `{name}` this run armed was ended as failed at iteration {iteration}, so no other session is fed its task. Record: {}",
            super::display(project, &record)
        )
        .into(),
        GaveUp::NotOurs => return format!("{why}\nThe loop `{name}` is no longer this run's; it was left as it is.").into(),
        GaveUp::EndFailed(e) => return format!("{why}\nThe loop `{name}` could not be ended ({e}); cancel it: ralph cancel --name {name}").into(),
        GaveUp::HandedBack(Err(e)) => format!(
            "could not be handed back ({e}); cancel it or run again"
        ),
        GaveUp::HandedBack(Ok(())) => match previous_owner {
            Some(owner) => format!(
                "was handed back to {} as it was",
                messages::escape_controls(owner)
            ),
            None => "was handed back unclaimed, as it was before this run".to_owned(),
        },
    };
    format!("{why}\nThe loop `{name}` was left at iteration {iteration} and {to}.").into()
}
