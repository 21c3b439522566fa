//! `ralph run`'s terminal. The run itself (arming aside) is the core's
//! [`Driver`]: every iteration is a new agent process and the decision after
//! it is the Stop hook's own (`engine::step`), so both modes share one state
//! file, one set of rules and one history; what the terminal says of it is
//! worded by `run::screen`. Here: the arguments, Ctrl-C, the clock, the live
//! line, printing, and the end mapped to its exit code (`crate::exit`).

use ralph_state::gate_sandbox;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ralph_run::agent::{self, Finished};
use ralph_run::fleet::archive;
use ralph_run::reset_wait;
use ralph_run::sandbox::Sandbox;
use ralph_run::screen::{self, Screen};
use ralph_run::{Call, Driver, Event, ResetWait, RunEnd, Setup};
use ralph_state::time::Timestamp;

use ralph_control::{self as control, arming};

use super::loops::read_stdin;
use crate::exit::{CmdResult, Failure};
use ralph_cli::RunArgs;

pub(super) fn run(args: RunArgs) -> CmdResult {
    // A process the agent double-forks stays below this run (it becomes ours, not
    // init's), so `ralph resume --add-*` and the like know it for the agent's.
    #[cfg(target_os = "linux")]
    let _ = ralph_fs::process::adopt_orphans();
    let agent = ralph_run::presets::command_line(&args.agent, args.permission_mode.as_deref())?;
    // `--agent codex` etc.: a preset's command line (ralph_run::presets).
    // `--sandbox` runs the agent with IS_SANDBOX=1 in a real sandbox (ralph_run::sandbox).
    let sandboxed = args.sandbox
        || std::env::var_os("IS_SANDBOX").is_some_and(|v| v == "1")
        || std::env::var_os("CLAUDE_CODE_BUBBLEWRAP").is_some();
    if let Some(refusal) = screen::root_refusal(
        &agent,
        ralph_state::fields::run_owner::runs_as_root(),
        sandboxed,
    ) {
        return Err(Failure::usage(refusal));
    }
    let args = RunArgs { agent, ..args };
    let (driver, terminal) = start(args)?;
    iterate(driver, terminal)
}

/// The terminal of a run: Ctrl-C, the clock and the live line; what it
/// shows is worded by the core's [`Screen`].
struct Terminal {
    /// The loop's name (its decision log's).
    name: String,
    /// Set by Ctrl-C; stops the agent.
    stop: Arc<AtomicBool>,
    live_line: bool,
    started: Instant,
    screen: Screen,
}

/// The task of a new loop: the words given, else stdin when it is not a
/// terminal; `--prd` alone is a task too (the PRD's stories). `None`: take
/// over the loop armed earlier.
fn task(args: &RunArgs) -> Result<Option<String>, Failure> {
    let typed = if !args.prompt.is_empty() {
        Some(args.prompt.join(" "))
    } else if !std::io::stdin().is_terminal() {
        Some(read_stdin()?).filter(|p| !p.trim().is_empty())
    } else {
        None
    };
    Ok(typed.or_else(|| args.arm.prd.as_ref().map(|_| String::new())))
}

/// The agent's sandbox asked for, refused before anything is armed when it
/// cannot be had or comes with `--gate-sandbox off`.
fn refuse_what_cannot_be_had(
    args: &RunArgs,
) -> Result<Option<ralph_state::fields::confinement::Confinement>, Failure> {
    let asked = args.confinement();
    args.refuse_unconfined_gate()?;
    if let Some(confinement) = &asked {
        ralph_run::sandbox::choose_tool(confinement)?;
    }
    Ok(asked)
}

/// Arms the loop (a task was given) or takes it over, archives a PRD whose
/// branch changed, and sets Ctrl-C to stop the agent.
fn start(args: RunArgs) -> Result<(Driver, Terminal), Failure> {
    let project = crate::env::project();
    let registry = crate::env::require_registry()?;
    let own = ralph_state::fields::run_owner::RunOwner::own();
    let prompt = task(&args)?;
    let spends = screen::spends(&args.agent);
    let asked = refuse_what_cannot_be_had(&args)?;
    let setup = Setup {
        project,
        registry,
        name: args.name.clone(),
        agent: args.agent,
        hand_back_after: args.hand_back_after,
        sandbox: asked.clone(),
        cancel_on_interrupt: args.cancel_on_interrupt,
    };
    let mut sandbox = asked.clone();
    let gate_words;
    let mut driver = match prompt {
        Some(prompt) => {
            let armed = arm_new(
                setup, args.arm, &args.name, &own, args.force, &asked, prompt,
            )?;
            gate_words = armed.1;
            armed.0
        }
        None if args.arm.any() => {
            return Err(screen::flags_without_task(&setup.project, &args.name).into());
        }
        None => {
            let (driver, found) = Driver::take_over(setup, &own)?;
            say!("{}", screen::resuming(&args.name, &found));
            let sandboxed = found.sandbox.is_some() || asked.is_some();
            gate_words = gate_sandbox::words(&found.guards, found.prd.is_some(), sandboxed);
            sandbox = match (found.sandbox, asked) {
                (Some(armed), Some(asked)) => Some(armed.strictest(&asked)),
                (armed, asked) => armed.or(asked),
            };
            driver
        }
    };
    let gate_line = gate_words.map(|words| format!("Gate: {words}."));
    for line in ralph_run::sandbox::arming_line(sandbox.as_ref())
        .into_iter()
        .chain(gate_line)
    {
        say!("{line}");
    }
    if args.wait_for_reset {
        driver.wait_for_reset(first_back_off());
    }
    say!("{spends}");
    let project = driver.project();
    let archived = archive::archive_if_branch_changed(&project.root, Timestamp::now());
    if let Some(note) = screen::archived(project, &archived) {
        say!("{note}");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    // A second Ctrl-C while ralph is cleaning up still only sets the flag:
    // the loop is recorded before ralph exits.
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    let terminal = Terminal {
        name: args.name.clone(),
        stop,
        live_line: std::io::stdout().is_terminal(),
        started: Instant::now(),
        screen: Screen::new(&args.name),
    };
    Ok((driver, terminal))
}

/// Arms the loop `ralph run` was given a task for, after the story commands'
/// approval, saying what its gate's sandbox and default protection are;
/// returns the driver and the gate's words.
fn arm_new(
    setup: Setup,
    arm: ralph_cli::ArmFlags,
    name: &str,
    own: &ralph_state::fields::run_owner::RunOwner,
    force: bool,
    asked: &Option<ralph_state::fields::confinement::Confinement>,
    prompt: String,
) -> Result<(Driver, Option<String>), Failure> {
    let mut options = arm.into_options(name.to_owned(), Some(own.to_string()), force);
    // A code given is the user's own step, as with `ralph start --approve-commands`.
    if let Some(given) = options.approve_commands.take() {
        super::loops::approve_given(&setup.project, &mut options, given)?;
    } else {
        super::loops::approve_on_terminal(&setup.project, &mut options)?;
    }
    options.sandbox.clone_from(asked);
    let guards = options.guards.guards().ok();
    let request = options.request(&setup.project, prompt)?;
    let gate_words = guards
        .and_then(|guards| gate_sandbox::words(&guards, request.prd.is_some(), asked.is_some()));
    if let Some(prd) = &request.prd {
        say!("{}", arming::story_commands(prd));
    }
    for line in arming::run_arming_lines(&setup.project, &request) {
        say!("{line}");
    }
    control::arm(&setup.project, &setup.registry, &request, Timestamp::now())?;
    Ok((Driver::armed(setup, own.to_string()), gate_words))
}

/// Drives the loop to its end, showing each step.
fn iterate(mut driver: Driver, mut terminal: Terminal) -> CmdResult {
    loop {
        let shown = &terminal;
        let event = driver.next(&mut |call: Call<'_>| shown.run_agent(call))?;
        let end = match event {
            Event::Passed => {
                terminal.screen.passed();
                continue;
            }
            Event::Asking(question) => match terminal.ask(&driver, &question)? {
                Some(end) => end,
                None => continue,
            },
            Event::Waiting(wait) => match terminal.wait(&driver, &wait)? {
                Some(end) => end,
                None => continue,
            },
            Event::Iterated(iteration) => {
                say!(
                    "{}",
                    terminal.screen.iterated(&iteration, terminal.elapsed())
                );
                continue;
            }
            Event::Ended(end) => end,
        };
        let times = terminal.screen.times(terminal.elapsed());
        let closing = screen::ended(end, &driver, times)?;
        for line in &closing.lines {
            say!("{line}");
        }
        return crate::exit::run_exit(closing.exit);
    }
}

impl Terminal {
    fn elapsed(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// Writes a live line over the last one (terminal only). The escape
    /// codes are ralph's own; the core's text is escaped.
    fn live(&self, text: &str) {
        if self.live_line {
            let _ = write!(std::io::stdout(), "\r\x1b[2K{text}");
            let _ = std::io::stdout().flush();
        }
    }

    fn clear_live_line(&self) {
        self.live("");
    }

    /// Runs the agent once, with the spinner on a terminal.
    fn run_agent(&self, call: Call<'_>) -> std::io::Result<Finished> {
        let mut frame = 0;
        // The sandbox is read from this machine at each iteration; one that
        // cannot be had is an agent that could not run, never an unconfined one.
        let sandbox = call
            .sandbox
            .map(|c| Sandbox::prepare(c, call.root, call.command, call.held_out))
            .transpose()
            .map_err(std::io::Error::other)?;
        let finished = agent::run_confined(
            sandbox.as_ref(),
            call.command,
            call.root,
            call.prompt,
            &self.stop,
            || {
                frame += 1;
                self.live(&self.screen.spinner(frame, call.label, self.elapsed()));
            },
        );
        if finished.is_ok() && self.live_line {
            let _ = write!(std::io::stdout(), "\r\x1b[2K");
        }
        // A `.git` the sandboxed agent made in the work tree, taken out after it:
        // said here and in the loop's decision log.
        let taken: Vec<_> = sandbox.iter().flat_map(Sandbox::quarantined).collect();
        for one in &taken {
            self.clear_live_line();
            say!("{}", one.line());
        }
        let project = ralph_state::storage::store::Project {
            root: call.root.to_owned(),
        };
        ralph_run::sandbox::nested_git::log(&project, &self.name, &taken);
        finished
    }

    /// `--wait-for-reset`: sleeps until the reset, a second at a time, with
    /// a live line on a terminal; the end when Ctrl-C, a cancel, a pause or
    /// a takeover came first.
    /// The agent asked a question: the run waits for the answer (`ralph say`),
    /// looking twice a second (a few small reads), or for Ctrl-C.
    fn ask(&mut self, driver: &Driver, question: &str) -> Result<Option<RunEnd>, Failure> {
        say!("{}", self.screen.asking(driver.name(), question));
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Ok(Some(driver.interrupt()?));
            }
            if !driver.still_asking()? {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn wait(&mut self, driver: &Driver, wait: &ResetWait) -> Result<Option<RunEnd>, Failure> {
        say!("{}", self.screen.waiting(wait));
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
            // Rounded up: "0s" only once the wait is over.
            let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            self.live(&self.screen.still_waiting(secs, wait));
            std::thread::sleep(left.min(Duration::from_secs(1)));
        }
        self.clear_live_line();
        say!("{}", self.screen.wait_over(wait));
        Ok(None)
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
