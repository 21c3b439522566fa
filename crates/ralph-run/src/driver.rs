//! The iteration loop of `ralph run`: each call of [`Driver::next`] reads
//! the loop, decides whether the run may go on with it, runs the agent once
//! (through [`Agent`], so tests give canned replies) and judges its reply,
//! and returns what happened as an [`Event`]. Every state change of a run
//! happens here; the binary only shows the events and maps the end to an
//! exit code.

use std::io;
use std::path::{Path, PathBuf};

use crate::agent::{self, AgentReply, Finished};
use crate::moves::{self, GaveUp, RunError, Standing};
use crate::reset_wait::{self, WaitPlan};
use ralph_core::decide::Outcome;
use ralph_core::decide::engine::{self, Step};
use ralph_state::fields::run_owner::RunOwner;
use ralph_state::fields::state::LoopState;
use ralph_state::lifecycle::{LogEntry, Logged, Loop};
use ralph_state::messages;
use ralph_state::storage::guidance::Mailbox;
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::{LoopFile, Project};

/// One agent run the driver asks for.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The agent's command line.
    pub command: &'a str,
    /// The folder it runs in (the project's root).
    pub root: &'a Path,
    /// What goes on its stdin.
    pub prompt: &'a str,
    /// The iteration it runs (`3/10`), for the terminal.
    pub label: &'a str,
    /// `--sandbox`: the agent runs confined (the loop's setting, made
    /// stricter by the run's own flags).
    pub sandbox: Option<&'a ralph_state::fields::confinement::Confinement>,
    /// `--holdout`'s folder, hidden from a sandboxed agent.
    pub held_out: Option<&'a Path>,
}

/// Runs the agent of one iteration: [`agent::run_confined`] in the binary (with its
/// spinner), canned replies in tests.
pub trait Agent {
    fn run(&mut self, call: Call<'_>) -> io::Result<Finished>;
}

impl<F: FnMut(Call<'_>) -> io::Result<Finished>> Agent for F {
    fn run(&mut self, call: Call<'_>) -> io::Result<Finished> {
        self(call)
    }
}

/// What a run drives, and with what.
#[derive(Debug)]
pub struct Setup {
    pub project: Project,
    pub registry: Registry,
    /// The loop's name.
    pub name: String,
    /// The agent's command line.
    pub agent: String,
    /// `--hand-back-after`: how many fresh iterations before handing back.
    pub hand_back_after: Option<u64>,
    /// `--sandbox` given to this run: the agent runs confined even when the
    /// loop it takes over was armed without it.
    pub sandbox: Option<ralph_state::fields::confinement::Confinement>,
    /// A fleet's child: Ctrl-C cancels the loop (the fleet runs it again
    /// from its worktree) rather than pausing it.
    pub cancel_on_interrupt: bool,
}

/// What one call of [`Driver::next`] did. After `Iterated` and `Passed`
/// the run goes on; after `Ended` it stops.
// One value per agent run, moved once to the terminal: boxing the ending
// would cost an allocation and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Event {
    /// An iteration ran, was judged, and the loop goes on.
    Iterated(Box<Iteration>),
    /// The loop was paused when the reply was judged: nothing was counted.
    Passed,
    /// The agent stopped on a rate or usage limit and `--wait-for-reset`
    /// is on: nothing was counted; the binary sleeps, watching the loop
    /// ([`Driver::check_while_waiting`]), then calls [`Driver::next`] again.
    Waiting(ResetWait),
    /// The loop is paused on its agent's question (`<question>…</question>`):
    /// the binary waits, watching for the answer ([`Driver::still_asking`]),
    /// then calls [`Driver::next`] again.
    Asking(String),
    /// The run is over.
    Ended(RunEnd),
}

/// A wait for a limit's reset.
#[derive(Debug)]
pub struct ResetWait {
    /// The limit, as the agent said it.
    pub why: String,
    /// The iteration that will run again (`3/10`).
    pub label: String,
    pub secs: u64,
    pub until: ralph_state::time::Timestamp,
    pub source: reset_wait::WaitSource,
}

/// A judged iteration whose loop goes on.
#[derive(Debug)]
pub struct Iteration {
    /// The iteration that ran (`3/10`).
    pub label: String,
    /// The iteration the loop goes on with.
    pub next: u64,
    /// The promise was given but the verification command failed.
    pub promise_refused: bool,
    /// The guard figures after this turn (`messages::guard_figures`), maybe empty.
    pub figures: String,
    /// Why the loop went on, in its own terms (`messages::went_on`).
    pub went_on: &'static str,
    pub reply: AgentReply,
    /// Each bound the user raised since the last iteration, old and new, that
    /// this iteration's continuation tells the agent.
    pub raised: Vec<String>,
}

/// Why the run is over.
#[derive(Debug)]
pub enum RunEnd {
    /// The loop file is gone (cancelled or ended elsewhere).
    Gone,
    /// Someone else drives the loop now (their id, when the file names one).
    TakenOver { by: Option<String> },
    /// The loop was paused; it was handed back.
    Paused,
    /// `--hand-back-after` iterations are done; handed back at `iteration`.
    HandedBack { iteration: u64 },
    /// The loop file changed while the agent ran (a ralph command: a
    /// cancel, a pause, a take-over); nothing was written.
    ChangedWhileAgentRan,
    /// The loop file was deleted or edited during the agent's turn by no
    /// ralph command (`what`): the loop was ended as `tampered` (`record`).
    Tampered { what: String, record: PathBuf },
    /// The agent stopped on a rate or usage limit (`why`): the iteration
    /// is not counted and the loop was handed back at `iteration`.
    Limited { why: String, iteration: u64 },
    /// `--wait-for-reset`: the wait for the limit (`why`) would pass the
    /// time budget (`left` seconds of it), so the loop was ended as
    /// `time_budget` (its record; `None` when it was no longer this run's).
    OutOfTimeWaiting {
        why: String,
        wait: u64,
        left: u64,
        record: Option<PathBuf>,
    },
    /// The loop changed while its verification ran ([`Step::Changed`]).
    Changed { notice: String },
    /// Ctrl-C: the agent was stopped, and the loop paused at `iteration`
    /// (`None`: it was no longer this run's to pause).
    Interrupted { iteration: Option<u64> },
    /// Ctrl-C in a fleet's child: the agent was stopped, and each loop in
    /// `ended` (`(name, iteration, record)`) recorded as cancelled.
    Cancelled { ended: Vec<(String, u64, PathBuf)> },
    /// The reply ended the loop (completed, a limit, a guard…).
    Judged {
        label: String,
        outcome: Outcome,
        notice: String,
        /// The tokens counted so far, when the agent reported some.
        tokens: Option<u64>,
        /// What the loop spent so far, when the agent reported its cost.
        cost: Option<ralph_state::money::Money>,
        reply: AgentReply,
    },
    /// The same refusal twice in a row: ended as denied (its record; `None`
    /// when the loop was no longer this run's).
    Denied { record: Option<PathBuf> },
    /// The agent gave no reply (`why`), at `iteration`; what became of the loop.
    GaveUp {
        why: String,
        iteration: u64,
        gave_up: GaveUp,
    },
}

/// The figures, and what ralph's meter counted of the API's own usage this
/// iteration, when the agent's calls went through it.
fn with_metered(figures: String, reply: &AgentReply) -> String {
    match (reply.metered, figures.is_empty()) {
        (None, _) => figures,
        (Some(m), true) => format!("metered {}", m.dollars()),
        (Some(m), false) => format!("{figures} · metered {}", m.dollars()),
    }
}

/// The figures, and a word when a dollar budget is set but the agent does
/// not report what it cost (only Claude Code's JSON output does).
fn cost_unknown(figures: String, state: &LoopState, reply: &AgentReply) -> String {
    let unknown = match (reply.overcharged, reply.cost) {
        (Some(why), Some(cap)) => format!("{why}: charged its whole cap, {}", cap.dollars()),
        _ if state.guards.max_cost_usd.is_none() || reply.cost.is_some() => return figures,
        _ => "the agent reports no cost: the dollar budget cannot count it".to_owned(),
    };
    if figures.is_empty() {
        unknown
    } else {
        format!("{figures} · {unknown}")
    }
}

/// One `ralph run` driving one loop.
#[derive(Debug)]
pub struct Driver {
    setup: Setup,
    file: LoopFile,
    /// The owner id this run writes into the loop.
    id: String,
    /// Who to hand the loop back to when the run ends.
    previous_owner: Option<String>,
    /// A loop this run armed is this run's alone: if the run cannot go on,
    /// it ends (as failed) rather than wait for the next unrelated session.
    armed_here: bool,
    done_here: u64,
    /// The prompt the last judged turn fed back.
    next_prompt: Option<String>,
    /// Refusals of the last iteration, and every one seen, for the summary.
    last_denials: Vec<String>,
    all_denials: Vec<String>,
    /// The last iteration was refused what the one before was: the next
    /// call ends the loop as denied.
    denied_twice: bool,
    /// `--wait-for-reset`: the first back-off, in seconds.
    wait_for_reset: Option<u64>,
    /// Waits since the last iteration that replied.
    waits: u32,
}

impl Driver {
    /// Drives a loop this run has just armed with `id` as its owner.
    pub fn armed(setup: Setup, id: String) -> Self {
        Self::new(setup, id, None, true)
    }

    /// Takes over a loop armed earlier ([`moves::take_over`]); returns the
    /// driver and the loop's state as it was found.
    pub fn take_over(setup: Setup, own: &RunOwner) -> Result<(Self, LoopState), RunError> {
        let taken = moves::take_over(&setup.project, &setup.registry, &setup.name, own)?;
        let driver = Self::new(setup, taken.driver, taken.back_to, false);
        Ok((driver, taken.found))
    }

    fn new(setup: Setup, id: String, previous_owner: Option<String>, armed_here: bool) -> Self {
        let file = LoopFile {
            name: setup.name.clone(),
            path: setup.project.loop_path(&setup.name),
        };
        Self {
            setup,
            file,
            id,
            previous_owner,
            armed_here,
            done_here: 0,
            next_prompt: None,
            last_denials: Vec::new(),
            all_denials: Vec::new(),
            denied_twice: false,
            wait_for_reset: None,
            waits: 0,
        }
    }

    /// `--wait-for-reset`: a limit makes the run wait (the first back-off
    /// `first_back_off` seconds) instead of ending it.
    pub fn wait_for_reset(&mut self, first_back_off: u64) {
        self.wait_for_reset = Some(first_back_off);
    }

    /// While the run waits for a reset: the end, when the loop is no longer
    /// this run's to drive (gone, cancelled, paused, taken over).
    pub fn check_while_waiting(&self) -> Result<Option<RunEnd>, RunError> {
        let Some(live) = moves::read(&self.setup.project, &self.setup.registry, &self.file)? else {
            return Ok(Some(RunEnd::Gone));
        };
        self.stands_down(&live.state)
    }

    /// Ctrl-C (the agent, if one ran, already stopped): the loop is
    /// paused, its counters and spend kept.
    pub fn interrupt(&self) -> Result<RunEnd, RunError> {
        let (project, registry) = (&self.setup.project, &self.setup.registry);
        if self.setup.cancel_on_interrupt {
            let ended = moves::record_interrupted(project, registry, &self.file.name)?;
            return Ok(RunEnd::Cancelled { ended });
        }
        let owner = self.previous_owner.as_deref();
        let iteration = moves::pause_interrupted(project, &self.file, &self.id, owner)?;
        Ok(RunEnd::Interrupted { iteration })
    }

    pub fn project(&self) -> &Project {
        &self.setup.project
    }

    pub fn name(&self) -> &str {
        &self.file.name
    }

    /// The fresh iterations this run has run.
    pub(crate) fn done_here(&self) -> u64 {
        self.done_here
    }

    /// Every refusal the agent met in this run, once each, in order.
    pub fn denials(&self) -> &[String] {
        &self.all_denials
    }

    /// Who the loop goes back to when the run ends (`None`: the first
    /// session that stops in the project).
    pub(crate) fn previous_owner(&self) -> Option<&str> {
        self.previous_owner.as_deref()
    }

    /// Runs the next step of the loop: at most one agent process.
    pub fn next(&mut self, agent: &mut impl Agent) -> Result<Event, RunError> {
        if self.denied_twice {
            return Ok(Event::Ended(self.end_denied()?));
        }
        let Some(live) = moves::read(&self.setup.project, &self.setup.registry, &self.file)? else {
            return Ok(Event::Ended(RunEnd::Gone));
        };
        if let Some(question) = self.asking(&live.state) {
            return Ok(Event::Asking(question));
        }
        if let Some(end) = self.stands_down(&live.state)? {
            return Ok(Event::Ended(end));
        }
        self.iteration(live, agent)
    }

    /// The loop's mailbox (`ralph say`'s guidance, the agent's question).
    fn mailbox(&self) -> Option<Mailbox> {
        Mailbox::of_project(&self.setup.registry, &self.setup.project, &self.file.name)
    }

    /// The question this run's loop is paused on, if it is.
    fn asking(&self, state: &LoopState) -> Option<String> {
        if state.active || state.session_id.as_deref() != Some(self.id.as_str()) {
            return None;
        }
        self.mailbox()?.question().map(|q| q.text)
    }

    /// While the run waits for the answer to its agent's question: whether it
    /// still waits (an answer, a resume, a cancel or a take-over ends the wait;
    /// [`Driver::next`] then tells which).
    pub fn still_asking(&self) -> Result<bool, RunError> {
        let live = moves::read(&self.setup.project, &self.setup.registry, &self.file)?;
        Ok(live.is_some_and(|live| self.asking(&live.state).is_some()))
    }

    /// The guidance `ralph say` queued, taken for a fresh prompt (the first
    /// of a run, or the one after a question or a pause), logged with the
    /// iteration that carries it.
    fn deliver(&self, iteration: u64) -> String {
        let Some(mailbox) = self.mailbox() else {
            return String::new();
        };
        let guidance = mailbox.deliver(iteration);
        if guidance.is_empty() {
            return String::new();
        }
        let mut entry = LogEntry::new(
            ralph_state::time::Timestamp::now(),
            Logged::Guidance,
            "guidance from the user (ralph say) in the prompt",
        )
        .session(&self.id)
        .iteration(iteration);
        entry.guidance = engine::logged_guidance(&guidance);
        entry.append(&self.setup.project, &self.file.name);
        engine::guidance_section(&guidance)
    }

    /// Stops the run when the loop is no longer this run's to drive.
    fn stands_down(&self, state: &LoopState) -> Result<Option<RunEnd>, RunError> {
        let hand_back_after = self.setup.hand_back_after;
        Ok(
            match moves::standing(state, &self.id, self.done_here, hand_back_after) {
                Standing::Go => None,
                Standing::TakenOver(by) => Some(RunEnd::TakenOver { by }),
                Standing::Paused => {
                    self.hand_back()?;
                    Some(RunEnd::Paused)
                }
                Standing::HandBackDue => {
                    self.hand_back()?;
                    Some(RunEnd::HandedBack {
                        iteration: state.iteration,
                    })
                }
            },
        )
    }

    fn hand_back(&self) -> Result<(), RunError> {
        let owner = self.previous_owner.as_deref();
        moves::hand_back(&self.setup.project, &self.file, &self.id, owner)
    }

    /// One fresh iteration: the agent runs, its reply is judged.
    fn iteration(&mut self, live: Loop, agent: &mut impl Agent) -> Result<Event, RunError> {
        let state = &live.state;
        let prompt = self.next_prompt.take().unwrap_or_else(|| {
            let footer = messages::footer(&self.file.name, state, state.iteration, &[]);
            // A --prd loop's first prompt names its story too (a PRD that
            // cannot be read is told at the first judged turn).
            let story = state
                .prd
                .as_ref()
                .and_then(|prd| {
                    ralph_core::decide::prd_turn::first_section(&self.setup.project.root, prd)
                })
                .unwrap_or_default();
            let guidance = self.deliver(state.iteration);
            format!("{}{story}{guidance}{footer}", state.prompt)
        });
        let label = state.iteration_label();
        let left = state
            .guards
            .max_cost_usd
            .map(|limit| limit.minus(state.progress.counts.cost_usd));
        let with_budget = agent::with_budget(&self.setup.agent, left);
        let sandbox = match (&state.sandbox, &self.setup.sandbox) {
            (Some(armed), Some(asked)) => Some(armed.strictest(asked)),
            (armed, asked) => armed.clone().or_else(|| asked.clone()),
        };
        let finished = agent.run(Call {
            command: &with_budget,
            root: &self.setup.project.root,
            prompt: &prompt,
            label: &label,
            sandbox: sandbox.as_ref(),
            held_out: state.guards.holdout.as_deref().map(Path::new),
        });
        let command = &self.setup.agent;
        let (status, stdout, stderr_tail, metered) = match finished {
            Err(e) => {
                let why = format!("could not start the agent `{command}`: {e}");
                return Ok(Event::Ended(self.give_up(why, state.iteration)));
            }
            Ok(Finished::Interrupted) => return Ok(Event::Ended(self.interrupt()?)),
            Ok(Finished::Exited {
                status,
                stdout,
                stderr_tail,
                metered,
            }) => (status, stdout, stderr_tail, metered),
        };
        let cap = agent::call_cap(&self.setup.agent, left);
        let reply = agent::charge(agent::parse_output(&stdout), cap, status, &stdout);
        // What the API itself counted, priced, when the calls went through the meter.
        let api_limited = metered.as_ref().is_some_and(|m| m.limited);
        let metered = metered.map(|m| ralph_core::decide::pricing::price_metered(&m.per_model()).0);
        let reply = agent::charge_metered(reply, metered, api_limited);
        if let Some(why) = reply.limit.clone() {
            // Not the agent's failure, nor a turn: nothing is judged or counted.
            if let Some(first) = self.wait_for_reset {
                // The same prompt again, after the reset.
                self.next_prompt = Some(prompt);
                return self.limited(why, state, label, first);
            }
            self.hand_back()?;
            return Ok(Event::Ended(RunEnd::Limited {
                why,
                iteration: state.iteration,
            }));
        }
        // Claude Code stopped at its --max-budget-usd: judged, so the
        // dollar budget ends the loop with the cost it reports.
        let budget_spent = reply.subtype.as_deref() == Some(agent::BUDGET_SPENT);
        if reply.text.is_empty() && !status.success() && !budget_spent {
            let why = format!(
                "the agent `{command}` failed ({status}) without a reply.\n{}",
                messages::escape_controls(&stderr_tail)
            );
            return Ok(Event::Ended(self.give_up(why, state.iteration)));
        }
        let denied_again = self.count(&reply);
        self.judged(&live, reply, label, denied_again)
    }

    /// The turn judged, unless the loop file changed while the agent (or the gate) ran.
    fn judged(
        &mut self,
        live: &Loop,
        reply: AgentReply,
        label: String,
        denied_again: bool,
    ) -> Result<Event, RunError> {
        let (project, registry) = (&self.setup.project, &self.setup.registry);
        let Some(step) = moves::judge(project, registry, live, &reply, &self.id)? else {
            return Ok(Event::Ended(
                self.changed_under(live, RunEnd::ChangedWhileAgentRan)?,
            ));
        };
        if let Step::Changed { notice } = step {
            // Changed while the gate ran: by a ralph command, or by what the agent left running.
            return Ok(Event::Ended(
                self.changed_under(live, RunEnd::Changed { notice })?,
            ));
        }
        Ok(self.after(step, &live.state, reply, label, denied_again))
    }

    /// The loop file is no longer what the run read before the turn: ended
    /// as `tampered` when no ralph command changed it (`control::tamper`),
    /// else `otherwise`.
    fn changed_under(&self, live: &Loop, otherwise: RunEnd) -> Result<RunEnd, RunError> {
        let (project, registry) = (&self.setup.project, &self.setup.registry);
        let now = ralph_state::time::Timestamp::now();
        Ok(
            match ralph_control::tamper::end_if_tampered(project, registry, live, now)? {
                Some((what, record)) => RunEnd::Tampered { what, record },
                None => otherwise,
            },
        )
    }

    /// Counts an iteration that replied, and its refusals; whether it was
    /// refused exactly what the one before was.
    fn count(&mut self, reply: &AgentReply) -> bool {
        for d in &reply.denials {
            if !self.all_denials.contains(d) {
                self.all_denials.push(d.clone());
            }
        }
        let denied_again = !reply.denials.is_empty() && reply.denials == self.last_denials;
        self.last_denials.clone_from(&reply.denials);
        self.done_here += 1;
        self.waits = 0;
        denied_again
    }

    /// A limit struck and the run waits for its reset ([`reset_wait::plan`]),
    /// or ends the loop as `time_budget` when the wait would pass it.
    fn limited(
        &mut self,
        why: String,
        state: &LoopState,
        label: String,
        first: u64,
    ) -> Result<Event, RunError> {
        let now = ralph_state::time::Timestamp::now();
        let window = ralph_state::storage::window::load(self.setup.registry.dir());
        let left = reset_wait::budget_left(state, now);
        let reset = window.and_then(|w| w.resets_at);
        match reset_wait::plan(now, reset, self.waits, first, left) {
            WaitPlan::Wait {
                secs,
                until,
                source,
            } => {
                self.waits = self.waits.saturating_add(1);
                Ok(Event::Waiting(ResetWait {
                    why,
                    label,
                    secs,
                    until,
                    source,
                }))
            }
            WaitPlan::PastBudget { wait, left } => {
                let because = format!(
                    "the wait for a rate or usage limit's reset ({}) would pass its time budget ({} left)",
                    ralph_state::time::format_duration(wait),
                    ralph_state::time::format_duration(left)
                );
                let ended = ralph_control::end_driven(
                    &self.setup.project,
                    Some(&self.setup.registry),
                    &self.file.name,
                    &self.id,
                    Outcome::Guard(ralph_state::fields::guards::Tripped::TimeBudget),
                    &because,
                    now,
                )
                .map_err(RunError::from)?;
                Ok(Event::Ended(RunEnd::OutOfTimeWaiting {
                    why,
                    wait,
                    left,
                    record: ended.map(|(_, record)| record),
                }))
            }
        }
    }

    /// What a judged turn leaves: the next prompt, or the run's end.
    fn after(
        &mut self,
        step: Step,
        state: &LoopState,
        reply: AgentReply,
        label: String,
        denied_again: bool,
    ) -> Event {
        match step {
            // A fresh agent process has no background work to wait for.
            Step::Passed | Step::Waiting { .. } => Event::Passed,
            Step::Changed { notice } => Event::Ended(RunEnd::Changed { notice }),
            Step::Continued {
                next,
                reason,
                refused,
                progress,
                raised,
                ..
            } => {
                self.next_prompt = Some(reason);
                // Refused twice: this iteration is shown first, the next call ends the loop.
                self.denied_twice = denied_again;
                Event::Iterated(Box::new(Iteration {
                    label,
                    next,
                    promise_refused: refused != messages::Refused::Not,
                    figures: with_metered(
                        cost_unknown(messages::guard_figures(state, &progress), state, &reply),
                        &reply,
                    ),
                    went_on: messages::went_on_after(state, refused),
                    reply,
                    raised,
                }))
            }
            Step::Ended {
                outcome, notice, ..
            } => Event::Ended(RunEnd::Judged {
                label,
                outcome,
                notice,
                tokens: reply
                    .tokens
                    .map(|t| state.progress.tokens_used.saturating_add(t)),
                cost: reply.cost.map(|c| state.progress.counts.cost_usd.plus(c)),
                reply,
            }),
        }
    }

    /// The same refusal twice in a row: the loop ends as denied.
    fn end_denied(&mut self) -> Result<RunEnd, RunError> {
        self.denied_twice = false;
        let (project, registry) = (&self.setup.project, &self.setup.registry);
        let record = moves::end_denied(project, registry, &self.file.name, &self.id)?;
        Ok(RunEnd::Denied { record })
    }

    /// The agent could not give this iteration a reply: the loop is left
    /// as it was found (or ended, if this run armed it).
    fn give_up(&self, why: String, iteration: u64) -> RunEnd {
        let gave_up = moves::give_up(
            &self.setup.project,
            &self.setup.registry,
            &self.file,
            &self.id,
            self.armed_here,
            self.previous_owner.as_deref(),
            &why,
        );
        RunEnd::GaveUp {
            why,
            iteration,
            gave_up,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::process::ExitStatus;

    use super::*;
    use crate::moves::tests::armed_with;
    use ralph_control::ArmRequest;
    use ralph_state::time::Timestamp;

    /// An agent with canned results, given out in order; it keeps the
    /// prompts it was given.
    struct Canned {
        results: VecDeque<io::Result<Finished>>,
        prompts: Vec<String>,
    }

    impl Canned {
        fn new(results: impl IntoIterator<Item = io::Result<Finished>>) -> Self {
            Self {
                results: results.into_iter().collect(),
                prompts: Vec::new(),
            }
        }
    }

    impl Agent for Canned {
        fn run(&mut self, call: Call<'_>) -> io::Result<Finished> {
            assert_eq!(call.command, "fake agent");
            self.prompts.push(call.prompt.to_owned());
            self.results.pop_front().expect("one agent run too many")
        }
    }

    fn exit_status(code: u8) -> ExitStatus {
        #[cfg(unix)]
        let status = std::os::unix::process::ExitStatusExt::from_raw(i32::from(code) << 8);
        #[cfg(windows)]
        let status = std::os::windows::process::ExitStatusExt::from_raw(u32::from(code));
        status
    }

    fn replied(stdout: &str) -> io::Result<Finished> {
        Ok(Finished::Exited {
            status: exit_status(0),
            stdout: stdout.to_owned(),
            stderr_tail: String::new(),
            metered: None,
        })
    }

    fn denied(what: &str, reply: &str) -> io::Result<Finished> {
        let json = serde_json::json!({
            "result": reply,
            "permission_denials": [{"tool_name": "Write", "tool_input": {"file_path": what}}],
        });
        replied(&json.to_string())
    }

    /// A project with the loop `l` armed for `session` (`DONE` completes it).
    struct Fixture {
        _tmp: tempfile::TempDir,
        project: Project,
        registry: Registry,
        file: LoopFile,
    }

    impl Fixture {
        fn new(session: &str) -> Self {
            let (_tmp, project, registry, file) = armed_with(ArmRequest {
                session_id: Some(session.into()),
                completion_promise: Some("DONE".into()),
                ..ArmRequest::default()
            });
            Self {
                _tmp,
                project,
                registry,
                file,
            }
        }

        fn setup(&self, hand_back_after: Option<u64>) -> Setup {
            Setup {
                project: self.project.clone(),
                registry: self.registry.clone(),
                name: "l".into(),
                agent: "fake agent".into(),
                hand_back_after,
                sandbox: None,
                cancel_on_interrupt: false,
            }
        }

        /// A run that armed the loop itself, as `run-1`.
        fn armed_here(&self) -> Driver {
            Driver::armed(self.setup(None), "run-1".into())
        }

        /// The loop as it is on disk; `None` once it has ended.
        fn state(&self) -> Option<LoopState> {
            crate::moves::read(&self.project, &self.registry, &self.file)
                .unwrap()
                .map(|live| live.state)
        }

        fn text(&self) -> String {
            std::fs::read_to_string(&self.file.path).unwrap()
        }

        /// The `outcome:` of each ended loop's record.
        fn outcomes(&self) -> Vec<String> {
            let Ok(entries) = std::fs::read_dir(self.project.history_dir()) else {
                return Vec::new();
            };
            let mut outcomes: Vec<String> = entries
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .map(|p| LoopState::parse(&std::fs::read_to_string(p).unwrap()).unwrap())
                .map(|s| s.outcome.map(|o| o.as_str().to_owned()).unwrap_or_default())
                .collect();
            outcomes.sort();
            outcomes
        }
    }

    #[test]
    fn an_iteration_without_the_promise_goes_on_with_the_fed_back_prompt() {
        let f = Fixture::new("run-1");
        let mut driver = f.armed_here();
        let mut agent = Canned::new([replied("working"), replied("still working")]);
        let Event::Iterated(first) = driver.next(&mut agent).unwrap() else {
            panic!("the loop goes on");
        };
        assert_eq!(
            (first.label.as_str(), first.next, first.promise_refused),
            ("1/5", 2, false)
        );
        assert_eq!(first.reply.text, "working");
        let state = f.state().unwrap();
        assert_eq!((state.iteration, state.active), (2, true));
        assert_eq!(state.session_id.as_deref(), Some("run-1"));
        assert!(matches!(driver.next(&mut agent).unwrap(), Event::Iterated(it) if it.next == 3));
        assert_eq!(f.state().unwrap().iteration, 3);
        assert!(agent.prompts[0].starts_with("task\n\n---\nRalph loop `l`, iteration 1 of 5."));
        assert!(agent.prompts[1].starts_with("task"));
        assert!(agent.prompts[1].contains("iteration 2 of 5"));
        assert_eq!(driver.done_here(), 2);
        assert!(f.outcomes().is_empty());
    }

    #[test]
    fn the_promise_completes_the_loop_and_counts_its_tokens() {
        let f = Fixture::new("run-1");
        let mut driver = f.armed_here();
        let reply =
            r#"{"result":"<promise>DONE</promise>","usage":{"input_tokens":10,"output_tokens":5}}"#;
        let mut agent = Canned::new([replied(reply)]);
        match driver.next(&mut agent).unwrap() {
            Event::Ended(RunEnd::Judged {
                label,
                outcome,
                tokens,
                ..
            }) => assert_eq!(
                (label.as_str(), outcome, tokens),
                ("1/5", Outcome::Completed, Some(15))
            ),
            other => panic!("{other:?}"),
        }
        assert!(f.state().is_none());
        assert_eq!(f.outcomes(), ["completed"]);
        assert_eq!(driver.done_here(), 1);
    }

    #[test]
    fn an_agent_that_cannot_start_ends_the_loop_its_run_armed() {
        let f = Fixture::new("run-1");
        let mut driver = f.armed_here();
        let missing = io::Error::new(io::ErrorKind::NotFound, "no such program");
        let mut agent = Canned::new([Err(missing)]);
        match driver.next(&mut agent).unwrap() {
            Event::Ended(RunEnd::GaveUp {
                why,
                iteration,
                gave_up: GaveUp::Ended(_),
            }) => {
                assert_eq!(
                    why,
                    "could not start the agent `fake agent`: no such program"
                );
                assert_eq!(iteration, 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(f.state().is_none());
        assert_eq!(f.outcomes(), ["failed"]);
        assert_eq!(driver.done_here(), 0);
    }

    #[test]
    fn an_agent_that_cannot_run_leaves_a_loop_taken_over_as_found() {
        let f = Fixture::new("s1");
        let before = f.text();
        let own = RunOwner::own();
        let (mut driver, found) = Driver::take_over(f.setup(None), &own).unwrap();
        assert_eq!(found.session_id.as_deref(), Some("s1"));
        assert_eq!(driver.previous_owner(), Some("s1"));
        assert_eq!(f.state().unwrap().session_id, Some(format!("{own}:s1")));
        let missing = io::Error::new(io::ErrorKind::NotFound, "no such program");
        match driver.next(&mut Canned::new([Err(missing)])).unwrap() {
            Event::Ended(RunEnd::GaveUp {
                iteration: 1,
                gave_up: GaveUp::HandedBack(Ok(())),
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(f.text(), before, "the loop is back as it was found");
        // Taken over again, the agent now exits without a reply.
        let (mut driver, _) = Driver::take_over(f.setup(None), &own).unwrap();
        let mut agent = Canned::new([Ok(Finished::Exited {
            status: exit_status(1),
            stdout: String::new(),
            stderr_tail: "model overloaded\x1b[2K".into(),
            metered: None,
        })]);
        match driver.next(&mut agent).unwrap() {
            Event::Ended(RunEnd::GaveUp {
                why,
                iteration: 1,
                gave_up: GaveUp::HandedBack(Ok(())),
            }) => {
                assert!(why.starts_with("the agent `fake agent` failed ("), "{why}");
                assert!(
                    why.ends_with(") without a reply.\nmodel overloaded\\x1b[2K"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(f.text(), before, "the loop is back as it was found");
        assert!(f.outcomes().is_empty());
        assert_eq!(driver.done_here(), 0);
    }

    #[test]
    fn ctrl_c_pauses_the_loop_and_keeps_its_count() {
        let f = Fixture::new("run-1");
        let mut driver = f.armed_here();
        let mut agent = Canned::new([replied("working"), Ok(Finished::Interrupted)]);
        assert!(matches!(
            driver.next(&mut agent).unwrap(),
            Event::Iterated(_)
        ));
        match driver.next(&mut agent).unwrap() {
            Event::Ended(RunEnd::Interrupted { iteration }) => assert_eq!(iteration, Some(2)),
            other => panic!("{other:?}"),
        }
        let state = f.state().unwrap();
        assert!(!state.active);
        assert_eq!(state.iteration, 2);
        assert!(f.outcomes().is_empty());
    }

    #[test]
    fn the_same_refusal_twice_in_a_row_ends_the_loop_as_denied() {
        let f = Fixture::new("run-1");
        let mut driver = f.armed_here();
        let mut agent = Canned::new([
            denied("a.txt", "could not"),
            denied("b.txt", "could not either"),
            denied("b.txt", "still could not"),
        ]);
        // Refused a.txt, then b.txt: two refusals, but not the same one twice.
        for next in [2, 3] {
            match driver.next(&mut agent).unwrap() {
                Event::Iterated(it) => assert_eq!(it.next, next),
                other => panic!("{other:?}"),
            }
        }
        // b.txt again: the line for it first, the loop still there…
        let Event::Iterated(third) = driver.next(&mut agent).unwrap() else {
            panic!("the iteration is shown before the loop ends");
        };
        assert_eq!(third.reply.denials, ["Write b.txt"]);
        assert_eq!(f.state().unwrap().iteration, 4);
        // …then the next step ends it, without running the agent again.
        match driver.next(&mut agent).unwrap() {
            Event::Ended(RunEnd::Denied {
                record: Some(record),
            }) => assert!(record.exists()),
            other => panic!("{other:?}"),
        }
        assert_eq!(agent.prompts.len(), 3);
        assert!(f.state().is_none());
        assert_eq!(f.outcomes(), ["denied"]);
        assert_eq!(driver.denials(), ["Write a.txt", "Write b.txt"]);
        assert_eq!(driver.done_here(), 3);
    }

    #[test]
    fn a_run_hands_the_loop_back_after_its_share_of_iterations() {
        let f = Fixture::new("s1");
        let (mut driver, _) = Driver::take_over(f.setup(Some(2)), &RunOwner::own()).unwrap();
        let mut agent = Canned::new([replied("one"), replied("two")]);
        assert!(matches!(
            driver.next(&mut agent).unwrap(),
            Event::Iterated(_)
        ));
        assert!(matches!(
            driver.next(&mut agent).unwrap(),
            Event::Iterated(_)
        ));
        match driver.next(&mut agent).unwrap() {
            Event::Ended(RunEnd::HandedBack { iteration }) => assert_eq!(iteration, 3),
            other => panic!("{other:?}"),
        }
        assert_eq!(agent.prompts.len(), 2);
        let state = f.state().unwrap();
        assert_eq!(state.session_id.as_deref(), Some("s1"));
        assert_eq!((state.iteration, state.active), (3, true));
    }

    #[test]
    fn a_loop_paused_while_the_agent_ran_is_not_counted_and_then_handed_back() {
        let f = Fixture::new("run-1");
        let mut driver = f.armed_here();
        let mut pausing = |_: Call<'_>| {
            ralph_control::set_active(
                &f.project,
                None,
                Some("l"),
                false,
                None,
                false,
                Timestamp(1),
            )
            .unwrap();
            replied("<promise>DONE</promise>")
        };
        assert!(matches!(
            driver.next(&mut pausing).unwrap(),
            Event::Ended(RunEnd::ChangedWhileAgentRan)
        ));
        let state = f.state().unwrap();
        assert_eq!((state.iteration, state.active), (1, false));
        assert_eq!(state.session_id.as_deref(), Some("run-1"));
        let mut agent = Canned::new([]);
        assert!(matches!(
            driver.next(&mut agent).unwrap(),
            Event::Ended(RunEnd::Paused)
        ));
        // Armed by this run: handed back to no one, for the next `ralph run`
        // or the first session that resumes it.
        assert_eq!(f.state().unwrap().session_id, None);
    }

    const LIMITED: &str = r#"{"type":"result","is_error":true,"api_error_status":429,"result":"API Error: Request rejected (429)"}"#;

    #[test]
    fn with_wait_for_reset_a_limit_waits_uncounted_and_runs_the_same_prompt_again() {
        let f = Fixture::new("run-1");
        let mut driver = f.armed_here();
        driver.wait_for_reset(7);
        let mut agent = Canned::new([replied(LIMITED), replied(LIMITED), replied("working")]);
        for secs in [7, 14] {
            match driver.next(&mut agent).unwrap() {
                Event::Waiting(wait) => {
                    assert_eq!((wait.label.as_str(), wait.secs), ("1/5", secs));
                    assert_eq!(wait.source, reset_wait::WaitSource::BackOff);
                    assert!(wait.why.starts_with("API Error: Request rejected (429)"));
                }
                other => panic!("{other:?}"),
            }
            let state = f.state().unwrap();
            assert_eq!((state.iteration, state.active), (1, true), "not counted");
            assert_eq!(
                state.session_id.as_deref(),
                Some("run-1"),
                "still this run's"
            );
            assert!(driver.check_while_waiting().unwrap().is_none());
        }
        assert!(matches!(driver.next(&mut agent).unwrap(), Event::Iterated(it) if it.next == 2));
        assert_eq!(agent.prompts[0], agent.prompts[1]);
        assert_eq!(agent.prompts[1], agent.prompts[2]);
        assert_eq!(driver.done_here(), 1);
        // A cancel during the wait ends the run.
        ralph_control::cancel(
            &f.project,
            Some(&f.registry),
            Some("l"),
            false,
            None,
            Timestamp(2),
        )
        .unwrap();
        assert!(matches!(
            driver.check_while_waiting().unwrap(),
            Some(RunEnd::Gone)
        ));
    }

    #[test]
    fn a_wait_past_the_time_budget_ends_the_loop_as_time_budget() {
        let mut guards = ralph_state::fields::guards::GuardSettings::default();
        let option = ralph_state::fields::guards::GuardSettings::option("max-duration").unwrap();
        guards.set(option, "1m").unwrap();
        let (_tmp, project, registry, file) = armed_with(ArmRequest {
            session_id: Some("run-1".into()),
            guards,
            ..ArmRequest::default()
        });
        let setup = Setup {
            project: project.clone(),
            registry,
            name: "l".into(),
            agent: "fake agent".into(),
            hand_back_after: None,
            sandbox: None,
            cancel_on_interrupt: false,
        };
        let mut driver = Driver::armed(setup, "run-1".into());
        driver.wait_for_reset(300);
        match driver.next(&mut Canned::new([replied(LIMITED)])).unwrap() {
            Event::Ended(RunEnd::OutOfTimeWaiting {
                wait: 300,
                left,
                record: Some(record),
                ..
            }) => {
                assert!(left <= 60);
                let ended = LoopState::parse(&std::fs::read_to_string(record).unwrap()).unwrap();
                assert_eq!(ended.outcome.unwrap().as_str(), "time_budget");
            }
            other => panic!("{other:?}"),
        }
        assert!(!file.path.exists());
    }

    #[test]
    fn a_run_stops_when_its_loop_is_taken_over_or_gone() {
        let f = Fixture::new("run-1");
        let mut driver = f.armed_here();
        let mut agent = Canned::new([replied("working")]);
        assert!(matches!(
            driver.next(&mut agent).unwrap(),
            Event::Iterated(_)
        ));
        {
            let lock = f.project.lock().unwrap();
            let live = Loop::load(&lock, f.file.clone()).unwrap().unwrap();
            live.set_owner(&lock, "run-2").unwrap();
        }
        match driver.next(&mut agent).unwrap() {
            Event::Ended(RunEnd::TakenOver { by }) => assert_eq!(by.as_deref(), Some("run-2")),
            other => panic!("{other:?}"),
        }
        assert_eq!(f.state().unwrap().session_id.as_deref(), Some("run-2"));
        let cancelled = ralph_control::cancel(
            &f.project,
            Some(&f.registry),
            Some("l"),
            false,
            None,
            Timestamp(2),
        );
        assert_eq!(cancelled.unwrap().ended.len(), 1);
        assert!(matches!(
            driver.next(&mut agent).unwrap(),
            Event::Ended(RunEnd::Gone)
        ));
    }
}
