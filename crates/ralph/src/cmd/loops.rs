//! `ralph start | cancel | pause | resume`: the commands that change loops
//! (`status.rs` reports them).

use std::io::{IsTerminal, Read};

use ralph_core::control::arguments;
use ralph_core::control::{self, ArmRequest};
use ralph_core::loop_file::messages;
use ralph_core::time::Timestamp;

use crate::cli::{ArmFlags, SelectArgs, StartArgs};
use crate::exit::{Failure, Outcome};

pub fn start(mut args: StartArgs) -> Outcome {
    let mut notes = Vec::new();
    let session = args
        .session_id
        .clone()
        .filter(|s| !s.trim().is_empty())
        .or_else(crate::env::session_from_env);
    let prompt = if args.raw_arguments {
        let raw = read_stdin()?;
        apply_raw(&mut args, &raw, &mut notes)?
    } else if !args.prompt.is_empty() {
        args.prompt.join(" ")
    } else if !std::io::stdin().is_terminal() {
        read_stdin()?
    } else {
        String::new()
    };
    args.session_id = session;
    arm_and_tell(args, prompt, &notes).map(|_| ())
}

/// `/ralph-loop ARGS`, answered by the UserPromptSubmit hook: `raw` is the text typed after
/// the command, as the hook event carries it (never through a shell). Arms the loop for
/// `session` and prints what `ralph start` prints; returns its name and what was armed.
pub fn start_typed(raw: &str, session: &str) -> Result<(String, control::Armed), Failure> {
    let mut args = StartArgs {
        name: "ralph".to_owned(),
        arm: ArmFlags::default(),
        session_id: None,
        force: false,
        raw_arguments: false,
        prompt: Vec::new(),
    };
    let mut notes = Vec::new();
    let prompt = apply_raw(&mut args, raw, &mut notes)?;
    args.session_id = Some(session.to_owned());
    let name = args.name.clone();
    Ok((name, arm_and_tell(args, prompt, &notes)?))
}

/// The task of each loop named, as a resumed loop's first turn needs it (the loop's prompt and
/// how to finish it).
pub fn tasks_of(names: &[String]) -> String {
    let Ok(lives) = control::read_live(&crate::env::project()) else {
        return String::new();
    };
    let mut out = Vec::new();
    for live in &lives {
        if let (true, Ok(state)) = (names.contains(&live.file.name), &live.state) {
            out.push(format!(
                "Your task (Ralph loop `{}`):\n\n{}\n\n{}",
                live.file.name,
                state.prompt,
                messages::how_to_finish(state).trim_end()
            ));
        }
    }
    out.join("\n\n")
}

/// A slash command's raw arguments applied to `args`, with the same checks clap applies;
/// returns the prompt, and notes about words kept in it.
fn apply_raw(args: &mut StartArgs, raw: &str, notes: &mut Vec<String>) -> Result<String, Failure> {
    let parsed = arguments::parse(raw)?;
    for (key, value) in &parsed.options {
        apply_option(args, key, value)?;
    }
    for word in &parsed.unknown {
        notes.push(format!(
            "note: `{word}` is not a ralph option; it was kept as part of the task."
        ));
    }
    Ok(parsed.prompt)
}

/// Arms the loop (or keeps this session's identical one) and prints the activation text.
fn arm_and_tell(
    args: StartArgs,
    prompt: String,
    notes: &[String],
) -> Result<control::Armed, Failure> {
    let project = crate::env::project();
    window_seen(&args.arm)?;
    let request = arm_request(
        &project,
        args.name,
        prompt,
        args.arm,
        args.session_id,
        args.force,
    )?;
    let registry = crate::env::require_registry()?;
    let armed = control::arm_or_keep(&project, &registry, &request, Timestamp::now())?;
    let (path, state) = (&armed.path, &armed.state);
    for note in notes {
        say!("{note}");
    }
    let limit = if state.max_iterations == 0 {
        "no iteration limit".to_owned()
    } else {
        format!("at most {} iterations", state.max_iterations)
    };
    let owner = state
        .session_id
        .as_deref()
        .map_or("the first session that stops claims it".to_owned(), |s| {
            format!("session {s}")
        });
    if armed.kept {
        say!(
            "🔄 Ralph loop `{}` is already armed for this session with this task and these settings (iteration {}); it was kept as it is.",
            request.name,
            state.iteration_label()
        );
    } else {
        say!(
            "🔄 Ralph loop `{}` armed: {limit}; owner: {owner}.",
            request.name
        );
    }
    say!(
        "State: {} · cancel: /ralph-cancel (ralph cancel) · status: /ralph-status (ralph status)",
        crate::env::display(&project, path)
    );
    let guards = messages::guard_summary(state);
    if !guards.is_empty() {
        say!("Guards: {}", guards.join(", "));
    }
    if let Some(prd) = &request.prd {
        say!("{}", story_commands(prd));
    }
    let story = state
        .prd
        .as_ref()
        .and_then(|prd| ralph_core::decide::prd_turn::first_section(&project.root, prd))
        .unwrap_or_default();
    if let Some(words) = state.notify.summary() {
        say!("When it ends: {words}.");
    }
    if !state
        .session_id
        .as_deref()
        .is_some_and(ralph_core::loop_file::run_owner::is_run)
    {
        say!("Spends: {}.", messages::SPENDS_IN_SESSION);
    }
    say!("\nYour task:\n\n{}{story}\n", state.prompt);
    say!("{}", messages::how_to_finish(state).trim_end());
    say!(
        "When you try to stop, this same task is given back to you; your earlier work stays in the files and git history."
    );
    Ok(armed)
}

/// What arming a `--prd` loop shows: the stories, and each command ralph
/// would run (recorded now; one added or changed later never runs).
pub fn story_commands(prd: &control::ArmPrd) -> String {
    let (pass, total) = ralph_core::loop_file::stories::tally(&prd.stories);
    let mut out = format!(
        "Stories: {} ({pass} of {total} pass).",
        ralph_core::display::line(&prd.path)
    );
    let commands: Vec<String> = prd
        .stories
        .iter()
        .filter_map(|s| {
            s.verify.as_ref().map(|c| {
                format!(
                    "  {}: {}",
                    ralph_core::display::line(&s.id),
                    ralph_core::display::line(c)
                )
            })
        })
        .collect();
    if commands.is_empty() {
        out.push_str(" No story has a verify command.");
    } else {
        out.push_str(&format!(
            "\nStory commands ralph will run, as you (a story's command added or changed later never runs; arm again to approve it):\n{}",
            commands.join("\n")
        ));
    }
    out
}

/// The request to arm a loop from the command line's pieces; `--prd`
/// reads the PRD now (and gives a task when none was typed).
pub fn arm_request(
    project: &ralph_core::loop_file::store::Project,
    name: String,
    prompt: String,
    flags: ArmFlags,
    session_id: Option<String>,
    force: bool,
) -> Result<ArmRequest, Failure> {
    let non_empty = |v: Option<String>| v.filter(|p| !p.trim().is_empty());
    let prd = match &flags.prd {
        Some(path) => Some(control::read_prd(project, path)?),
        None => None,
    };
    let prompt = match &prd {
        Some(p) if prompt.trim().is_empty() => {
            ralph_core::loop_file::stories::default_task(&p.path)
        }
        _ => prompt,
    };
    Ok(ArmRequest {
        name,
        prompt,
        max_iterations: flags
            .max_iterations
            .unwrap_or(ralph_core::loop_file::state::DEFAULT_MAX_ITERATIONS),
        completion_promise: non_empty(flags.completion_promise),
        abort_promise: non_empty(flags.abort_promise),
        session_id,
        guards: flags.guards.0,
        force,
        fresh_context: flags.fresh_context,
        prd,
        notify: ralph_core::loop_file::notify::Settings {
            desktop: flags.notify,
            url: non_empty(flags.notify_url),
        },
    })
}

/// Arms a loop; a bad name or an empty prompt is a usage error.
pub fn arm(
    project: &ralph_core::loop_file::store::Project,
    request: &ArmRequest,
) -> Result<(std::path::PathBuf, ralph_core::loop_file::state::LoopState), Failure> {
    let registry = crate::env::require_registry()?;
    Ok(control::arm(project, &registry, request, Timestamp::now())?)
}

/// `--max-window` goes by what `ralph statusline` last saw of the plan's
/// 5-hour window: without that, the guard could never fire, so arming is
/// refused with the fix.
fn window_seen(arm: &ArmFlags) -> Outcome {
    let Some(pct) = arm.guards.0.get("max-window") else {
        return Ok(());
    };
    if pct.trim().parse::<u64>().is_ok_and(|p| p > 100) {
        return Err(Failure::usage(format!(
            "`--max-window {pct}`: a share of the window, 1 to 100; nothing was armed"
        )));
    }
    let seen = crate::env::require_registry()
        .ok()
        .and_then(|r| ralph_core::loop_file::window::load(r.dir()));
    if seen.is_none() {
        return Err(Failure::usage(
            "`--max-window` pauses the loop by the plan's 5-hour window as `ralph statusline` last saw it, and it has seen none yet: set `ralph statusline` as Claude Code's status line (README, \"Status line\"; only subscription plans report the window), let it refresh once, then arm again; nothing was armed".to_owned(),
        ));
    }
    Ok(())
}

/// Applies an option found in raw slash-command arguments, with the same
/// checks clap applies on the command line.
fn apply_option(args: &mut StartArgs, key: &str, value: &str) -> Outcome {
    let usage = |e: arguments::ArgumentsError| Failure::usage(e.to_string());
    let number = |v: &str| arguments::check_number(key, v).map_err(usage);
    if let Some(guard) = ralph_core::loop_file::guards::GuardSettings::option(key) {
        return args.arm.guards.0.set(guard, value).map_err(usage);
    }
    match key {
        "name" => args.name = value.to_owned(),
        "max-iterations" => args.arm.max_iterations = Some(number(value)?),
        "completion-promise" => args.arm.completion_promise = Some(value.to_owned()),
        "abort-promise" => args.arm.abort_promise = Some(value.to_owned()),
        "session-id" => args.session_id = Some(value.to_owned()),
        "force" => args.force = true,
        "fresh-context" => args.arm.fresh_context = true,
        "prd" if value.is_empty() => {
            args.arm.prd = Some(ralph_core::loop_file::stories::DEFAULT_PRD.into());
        }
        "prd" => args.arm.prd = Some(value.to_owned()),
        "notify" => args.arm.notify = true,
        "notify-url" => args.arm.notify_url = Some(value.to_owned()),
        other => return Err(Failure::usage(format!("unknown option --{other}"))),
    }
    Ok(())
}

pub fn read_stdin() -> Result<String, String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| format!("could not read stdin: {e}"))?;
    Ok(text)
}

/// Fills `--name` / `--all` from a slash command's raw arguments: nothing,
/// `NAME`, `--name NAME`, `--name=NAME` or `--all`.
fn resolve_selection(args: SelectArgs) -> Result<SelectArgs, Failure> {
    if !args.raw_arguments {
        return Ok(args);
    }
    let raw = read_stdin()?;
    apply_selection(args, &raw)
}

/// The selection typed after `/ralph-cancel`, `/ralph-pause` or `/ralph-resume`.
pub fn typed_selection(raw: &str) -> Result<SelectArgs, Failure> {
    let none = SelectArgs {
        name: None,
        all: false,
        raw_arguments: false,
    };
    apply_selection(none, raw)
}

fn apply_selection(mut args: SelectArgs, raw: &str) -> Result<SelectArgs, Failure> {
    let typed = arguments::selection(raw)?;
    args.all |= typed.all;
    if typed.name.is_some() {
        args.name = typed.name;
    }
    Ok(args)
}

pub fn cancel(args: SelectArgs) -> Outcome {
    let args = resolve_selection(args)?;
    cancel_as(args, crate::env::session_from_env())
}

/// `ralph cancel` for `session` (the hook passes the one its event names).
pub fn cancel_as(args: SelectArgs, session: Option<String>) -> Outcome {
    let project = crate::env::project();
    let ended = control::cancel(
        &project,
        crate::env::registry().as_ref(),
        args.name.as_deref(),
        args.all,
        session.as_deref(),
        Timestamp::now(),
    );
    let done = match ended {
        // Cancelling what is already gone is not an error: cancel is idempotent.
        Err(control::LoopError::NoSuchLoop(name)) => {
            say!("No active loop named `{name}`; nothing to cancel.");
            return Ok(());
        }
        other => other?,
    };
    if done.ended.is_empty() && done.failed.is_empty() {
        say!("No active loop to cancel.");
    }
    for (name, iteration, record) in done.ended {
        say!(
            "⏹ Cancelled loop `{name}` at iteration {iteration}. Record: {}",
            crate::env::display(&project, &record)
        );
    }
    // What could not be ended is listed, and the exit code says so.
    if !done.failed.is_empty() {
        let list: Vec<String> = done
            .failed
            .iter()
            .map(|(name, why)| format!("  `{name}`: {why}"))
            .collect();
        return Err(format!("could not cancel:\n{}", list.join("\n")).into());
    }
    Ok(())
}

pub fn pause_or_resume(args: SelectArgs, active: bool) -> Outcome {
    let args = resolve_selection(args)?;
    pause_or_resume_as(args, active, crate::env::session_from_env()).map(|_| ())
}

/// `ralph pause` / `ralph resume` for `session`; returns the loops it changed.
pub fn pause_or_resume_as(
    args: SelectArgs,
    active: bool,
    session: Option<String>,
) -> Result<Vec<String>, Failure> {
    let project = crate::env::project();
    let now = Timestamp::now();
    let names: Vec<Option<String>> = if args.all {
        control::read_live(&project)?
            .into_iter()
            .map(|l| Some(l.file.name))
            .collect()
    } else {
        vec![args.name]
    };
    let mut changed = Vec::new();
    for name in names {
        changed.extend(control::set_active(
            &project,
            name.as_deref(),
            session.as_deref(),
            active,
            now,
        )?);
    }
    let verb = if active { "Resumed" } else { "Paused" };
    if changed.is_empty() {
        say!(
            "Nothing to {}: no matching loop is {}.",
            verb.to_lowercase().trim_end_matches('d'),
            if active { "paused" } else { "active" }
        );
    }
    for name in &changed {
        say!("{verb} loop `{name}`.");
    }
    Ok(changed)
}
