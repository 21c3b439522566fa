//! `ralph start | cancel | pause | resume | rollback`: the commands that change loops (`status.rs`
//! reports them). What each does and says is the core's (`control::arming`,
//! `control::cancel_pause`); here the arguments are gathered, the core called and its text
//! printed.

use std::io::{BufRead, IsTerminal, Read, Write};

use ralph_control::CommandError;
use ralph_control::arguments::{self, Targets};
use ralph_control::arming::{self, ArmOptions, TypedTask};
use ralph_control::cancel_pause::{self, Toggled};
use ralph_control::revive::{self, Raise};
use ralph_state::storage::store::Project;
use ralph_state::time::Timestamp;

use crate::exit::{CmdResult, EdgeError, Failure};
use ralph_cli::{ResumeArgs, RollbackArgs, SelectArgs, StartArgs};

pub(super) fn start(args: StartArgs) -> CmdResult {
    let session = args
        .session_id
        .filter(|s| !s.trim().is_empty())
        .or_else(crate::env::session_from_env);
    if args.force || args.arm.approve_commands.is_some() {
        not_below_a_run("ralph start --force or --approve-commands")?;
    }
    let mut options = args.arm.into_options(args.name, None, args.force);
    let task = if args.raw_arguments {
        options.apply_raw(&read_stdin()?)?
    } else if !args.prompt.is_empty() {
        TypedTask::from(args.prompt.join(" "))
    } else if !std::io::stdin().is_terminal() {
        TypedTask::from(read_stdin()?)
    } else {
        TypedTask::default()
    };
    // The session found above, whatever the raw text said.
    options.session_id = session;
    if options.force {
        force_on_terminal(&options)?;
    }
    // A code, given as a flag or in the raw text: the user's own step.
    if let Some(given) = options.approve_commands.take() {
        approve_given(&crate::env::project(), &mut options, given)?;
    } else if !args.raw_arguments {
        approve_on_terminal(&crate::env::project(), &mut options)?;
    }
    let activation = arm_and_tell(options, task).map_err(Failure::from)?;
    // Armed with a code: the commands it approved on the user's own screen too, not
    // only in the text a model may be the one to read.
    if let Some(notice) = approved_notice(&activation) {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{}", ralph_fs::display::block(&notice));
    }
    Ok(())
}

/// The story commands `activation`'s loop bound, said for the user
/// (`approval::approved_notice`).
pub(super) fn approved_notice(activation: &arming::Activation) -> Option<String> {
    let prd = activation.armed.state.prd.as_ref()?;
    ralph_control::approval::approved_notice(&crate::env::project().root, prd)
}

/// Before arming from a terminal: a PRD's story commands the user has not approved are
/// shown and asked about; a yes approves exactly the list shown (its code is checked
/// again against the PRD when the loop is armed). Without a terminal nothing is asked,
/// and arming refuses with the list and the flag that approves it.
pub(super) fn approve_on_terminal(
    project: &Project,
    options: &mut ArmOptions,
) -> Result<(), Failure> {
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return Ok(());
    }
    let Some(list) = arming::unapproved(project, options)? else {
        return Ok(());
    };
    if !ask(&list.question())? {
        return Err(EdgeError::NotApproved.into());
    }
    options.approve_commands = Some(list.code);
    Ok(())
}

/// `ralph start --force` over a live loop of the user's: the user's own step
/// (`users_terminal`, on a terminal older than the youngest loop it replaces), asked.
fn force_on_terminal(options: &ArmOptions) -> Result<(), Failure> {
    let Some(registry) = crate::env::registry() else {
        return Ok(());
    };
    let project = crate::env::project();
    let over = ralph_control::forced_over(
        &project,
        &registry,
        &options.name,
        options.session_id.as_deref(),
    );
    if over.is_empty() {
        return Ok(());
    }
    let what = format!(
        "Replace the live loop `{}` with a new one (--force)",
        ralph_fs::display::line(&options.name)
    );
    let only = "end a live loop for a new one: type `/ralph-loop --force …` in the session, or run this in a terminal of yours that was open before the loop started";
    users_terminal(&what, only, || over.iter().flatten().max().copied())?;
    if !ask(&format!("{what}? Only you should answer. [y/N] "))? {
        return Err(not_the_user(&what, "you did not answer yes", only));
    }
    Ok(())
}

/// `ralph start --approve-commands CODE` (and `ralph run`'s): the user's own step, as
/// raising a bound is (`users_terminal`: never below a `ralph run` nor without a
/// terminal), and the list the code approves shown and asked about there, whatever the
/// code: an agent that read or was handed a code still cannot approve a command with it.
pub(super) fn approve_given(
    project: &Project,
    options: &mut ArmOptions,
    given: String,
) -> Result<(), Failure> {
    approving_users_own()?;
    // Shown as the loop would run them (the list of the PRD as it is now); a
    // code for another list is then refused by arming, as before.
    if let Some(list) = arming::unapproved(project, options)?
        && !ask(&list.question())?
    {
        return Err(EdgeError::NotApproved.into());
    }
    options.approve_commands = Some(given);
    Ok(())
}

/// Refuses `--approve-commands` from anywhere but the user's own terminal
/// (`users_terminal`): below a `ralph run` and without a terminal, a code approves nothing.
pub(super) fn approving_users_own() -> Result<(), Failure> {
    users_terminal(
        "Approve story commands with `--approve-commands`",
        "approve a story command: arm with `/ralph-loop --approve-commands …` in the session, or run this in a terminal of yours",
        || None,
    )
}

/// What `/ralph-loop` did.
pub(super) enum Typed {
    Armed(Box<arming::Activation>),
    /// Nothing was armed: the PRD's story commands wait for the user's approval; the text
    /// (the list and how to approve it) is for the user only.
    Approve(String),
}

/// `/ralph-loop ARGS`, answered by the UserPromptSubmit hook: `raw` is the text typed after
/// the command, as the hook event carries it (never through a shell). Arms the loop for
/// `session` and prints what `ralph start` prints.
pub(super) fn start_typed(raw: &str, session: &str) -> Result<Typed, Failure> {
    let mut options = ArmOptions::default();
    let task = options.apply_raw(raw)?;
    options.session_id = Some(session.to_owned());
    match arm_and_tell(options, task) {
        Ok(activation) => Ok(Typed::Armed(Box::new(activation))),
        Err(CommandError::CommandsUnapproved { list, given }) => {
            Ok(Typed::Approve(list.in_session(given.as_deref(), raw)))
        }
        Err(e) => Err(e.into()),
    }
}

/// Arms the loop (or keeps this session's identical one) and prints the activation text.
fn arm_and_tell(options: ArmOptions, task: TypedTask) -> Result<arming::Activation, CommandError> {
    let activation = arming::arm_and_tell(
        &crate::env::project(),
        crate::env::registry().as_ref(),
        options,
        task,
        Timestamp::now(),
    )?;
    for text in &activation.text {
        say!("{text}");
    }
    Ok(activation)
}

pub(super) fn read_stdin() -> Result<String, EdgeError> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(EdgeError::Stdin)?;
    Ok(text)
}

/// The loops a command names: `--name` / `--all`, or with `--raw-arguments` a slash
/// command's text on stdin (nothing, `NAME`, `--name NAME`, `--name=NAME` or `--all`).
fn selection(args: SelectArgs) -> Result<Targets, Failure> {
    if args.raw_arguments {
        return Ok(arguments::selection(&read_stdin()?)?);
    }
    Ok(Targets {
        name: args.name,
        all: args.all,
    })
}

pub(super) fn cancel(args: SelectArgs) -> CmdResult {
    cancel_as(&selection(args)?, crate::env::session_from_env())
}

/// `ralph cancel` for `session` (the hook passes the one its event names).
pub(super) fn cancel_as(selection: &Targets, session: Option<String>) -> CmdResult {
    cancel_in(&crate::env::project(), selection, session)
}

/// `ralph cancel` in `project` (this one, or a `--parallel` story's worktree for `ralph watch`).
pub(super) fn cancel_in(
    project: &ralph_state::storage::store::Project,
    selection: &Targets,
    session: Option<String>,
) -> CmdResult {
    let (lines, outcome) = cancel_pause::cancel(
        project,
        crate::env::registry().as_ref(),
        selection,
        session.as_deref(),
        Timestamp::now(),
    );
    for line in lines {
        say!("{line}");
    }
    Ok(outcome?)
}

pub(super) fn pause_or_resume(args: SelectArgs, active: bool) -> CmdResult {
    let selection = selection(args)?;
    pause_or_resume_as(&selection, active, crate::env::session_from_env()).map(|_| ())
}

/// `ralph pause` / `ralph resume` for `session`; returns the loops it changed.
pub(super) fn pause_or_resume_as(
    selection: &Targets,
    active: bool,
    session: Option<String>,
) -> Result<Vec<String>, Failure> {
    pause_or_resume_in(&crate::env::project(), selection, active, session)
}

/// `ralph pause` / `ralph resume` in `project` (for `ralph watch`, maybe a story's worktree).
pub(super) fn pause_or_resume_in(
    project: &ralph_state::storage::store::Project,
    selection: &Targets,
    active: bool,
    session: Option<String>,
) -> Result<Vec<String>, Failure> {
    let Toggled { changed, text } = cancel_pause::pause_or_resume(
        project,
        crate::env::registry().as_ref(),
        selection,
        active,
        session.as_deref(),
        Timestamp::now(),
    )?;
    for line in text {
        say!("{line}");
    }
    Ok(changed)
}

/// `ralph rollback --to N [--name NAME]`, or `--list`.
pub(super) fn rollback(args: &RollbackArgs) -> CmdResult {
    let Some(to) = args.to.as_deref().filter(|_| !args.list) else {
        let lines = ralph_control::rollback::list(
            &crate::env::project(),
            crate::env::registry().as_ref(),
            args.name.as_deref(),
        )?;
        for line in lines {
            say!("{line}");
        }
        return Ok(());
    };
    let done = ralph_control::rollback::rollback(
        &crate::env::project(),
        crate::env::registry().as_ref(),
        args.name.as_deref(),
        to,
        Timestamp::now(),
    )?;
    say!("{}", ralph_control::rollback::rolled_back_text(&done));
    Ok(())
}

/// `ralph resume`, and with `--add-*` its bounds raised (`control::revive`).
pub(super) fn resume(args: ResumeArgs) -> CmdResult {
    let mut raise = Raise::default();
    let given = [
        ("--add-iterations", &args.add_iterations),
        ("--add-cost", &args.add_cost),
        ("--add-time", &args.add_time),
        ("--add-tokens", &args.add_tokens),
    ];
    for (flag, value) in given {
        if let Some(value) = value {
            raise.set(flag, value).map_err(Failure::usage)?;
        }
    }
    if !raise.any() {
        return pause_or_resume(args.select, true);
    }
    let selection = selection(args.select)?;
    let name = selection.name.as_deref();
    // A raise the loop cannot take is refused before anyone is asked.
    let peeked =
        crate::env::registry().and_then(|r| revive::peek(&crate::env::project(), &r, name));
    if let Some((loop_name, state)) = &peeked {
        revive::check_bounds(&raise, loop_name, state)?;
    }
    let started = || peeked.and_then(|(_, state)| state.started_at);
    let what = format!("Raise the bounds of loop `{}`", name.unwrap_or("ralph"));
    users_own_step(&what, "/ralph-resume", started)?;
    // The loop keeps its owner: a terminal is no session to drive it.
    revive_as(name, &raise, None).map(|_| ())
}

/// Refuses `what` below a `ralph run`: its agent (and everything the agent starts) never
/// arms, adopts, forces over a live loop or approves a command. (A session's agent runs as
/// the user with no such mark: docs/security.md says what holds there.)
pub(super) fn not_below_a_run(what: &str) -> Result<(), Failure> {
    if ralph_fs::process::under_ralph_run() {
        return Err(EdgeError::NotTheUser(format!(
            "{what}: refused, this runs below a `ralph run`, where the agent works; only you take this step, from a terminal of yours or a slash command in your session"
        ))
        .into());
    }
    Ok(())
}

/// A step only the user takes (raising a bound): `users_terminal`'s refusals, then
/// asked on the terminal, where only the user's keys answer. `typed`: the slash command
/// that does it in a session.
pub(super) fn users_own_step(
    what: &str,
    typed: &str,
    loop_started: impl FnOnce() -> Option<Timestamp>,
) -> Result<(), Failure> {
    let only = format!(
        "raise a loop's bounds: type `{typed} …` in the session, or run this in a terminal of yours that was open before the loop started"
    );
    users_terminal(what, &only, loop_started)?;
    if !ask(&format!("{what}? Only you should answer. [y/N] "))? {
        return Err(not_the_user(what, "you did not answer yes", &only));
    }
    Ok(())
}

fn not_the_user(what: &str, why: &str, only: &str) -> Failure {
    EdgeError::NotTheUser(format!("{what}: refused, {why}. Only you {only}")).into()
}

/// Refuses a step only the user takes from a process below a `ralph run` (its agent,
/// and all the agent starts), without a terminal on standard input and output, and on
/// a terminal whose session began after the loop did (a pseudo-terminal the agent
/// opened: `script`, `expect`). `only`: what only the user does, and how in a session.
/// `loop_started`: when the loop the step changes began (`None`: no such loop).
pub(super) fn users_terminal(
    what: &str,
    only: &str,
    loop_started: impl FnOnce() -> Option<Timestamp>,
) -> Result<(), Failure> {
    let refuse = |why: &str| Err(not_the_user(what, why, only));
    if ralph_fs::process::under_ralph_run() {
        return refuse("this runs below a `ralph run`, where the agent works");
    }
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return refuse("there is no terminal to ask you on");
    }
    if cfg!(target_os = "linux") {
        let began = ralph_fs::process::terminal_session_start();
        let before = |t: Timestamp| {
            began.is_some_and(|b| {
                b.duration_since(std::time::UNIX_EPOCH)
                    // A second's margin: the boot time /proc gives is whole seconds.
                    .is_ok_and(|d| {
                        i64::try_from(d.as_secs()).is_ok_and(|s| s.saturating_add(1) < t.0)
                    })
            })
        };
        // Read only now, after the cheap refusals: it waits for the project's lock.
        if !loop_started().is_none_or(before) {
            return refuse(
                "this terminal's session began after the loop did (one its agent could have opened)",
            );
        }
    }
    Ok(())
}

/// `--add-*` for the loop `name` (`session`: the one `/ralph-resume` came from, which then
/// drives it); returns the loop's name.
pub(super) fn revive_as(
    name: Option<&str>,
    raise: &Raise,
    session: Option<String>,
) -> Result<String, Failure> {
    revive_in(&crate::env::project(), name, raise, session)
}

/// `--add-*` in `project` (for `ralph watch`, maybe a story's worktree).
pub(super) fn revive_in(
    project: &ralph_state::storage::store::Project,
    name: Option<&str>,
    raise: &Raise,
    session: Option<String>,
) -> Result<String, Failure> {
    let registry = crate::env::require_registry()?;
    let done = revive::revive(
        project,
        &registry,
        name,
        session.as_deref(),
        raise,
        Timestamp::now(),
    )?;
    say!("{}", revive::revived_text(&done));
    Ok(done.name)
}

/// Asks `question` on the terminal; only `y` or `yes` is a yes.
pub(super) fn ask(question: &str) -> Result<bool, Failure> {
    let _ = write!(std::io::stdout(), "{question}");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(EdgeError::Answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}
