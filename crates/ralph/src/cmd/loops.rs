//! `ralph start | cancel | pause | resume | status | log`.

use ralph_core::outcome::LoopStatus;
use std::io::{IsTerminal, Read};

use ralph_core::arguments;
use ralph_core::loops::{self, ArmRequest, LoopReport};
use ralph_core::messages;
use ralph_core::time::{Timestamp, format_duration};
use ralph_core::typed::{self, SlashCommand};

use super::{Failure, Outcome};
use crate::cli::{ArmFlags, LogArgs, SelectArgs, StartArgs, StatusArgs};

pub fn start(mut args: StartArgs) -> Outcome {
    let mut notes = Vec::new();
    let session = args
        .session_id
        .clone()
        .filter(|s| !s.trim().is_empty())
        .or_else(super::session_from_env);
    let prompt = if args.raw_arguments || args.typed_arguments {
        let raw = if args.typed_arguments {
            typed_text(session.as_deref(), SlashCommand::Loop)?
        } else {
            read_stdin()?
        };
        let parsed = arguments::parse(&raw)?;
        for (key, value) in &parsed.options {
            apply_option(&mut args, key, value)?;
        }
        for word in &parsed.unknown {
            notes.push(format!(
                "note: `{word}` is not a ralph option; it was kept as part of the task."
            ));
        }
        parsed.prompt
    } else if !args.prompt.is_empty() {
        args.prompt.join(" ")
    } else if !std::io::stdin().is_terminal() {
        read_stdin()?
    } else {
        String::new()
    };
    let project = super::project();
    let request = arm_request(args.name, prompt, args.arm, session, args.force);
    let (path, state) = arm(&project, &request)?;
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
    say!(
        "🔄 Ralph loop `{}` armed: {limit}; owner: {owner}.",
        request.name
    );
    say!(
        "State: {} · cancel: /ralph-cancel (ralph cancel) · status: /ralph-status (ralph status)",
        super::display(&project, &path)
    );
    let guards = messages::guard_summary(&state);
    if !guards.is_empty() {
        say!("Guards: {}", guards.join(", "));
    }
    say!("\nYour task:\n\n{}\n", state.prompt);
    say!("{}", messages::how_to_finish(&state).trim_end());
    say!(
        "When you try to stop, this same task is given back to you; your earlier work stays in the files and git history."
    );
    Ok(())
}

/// The request to arm a loop from the command line's pieces.
pub fn arm_request(
    name: String,
    prompt: String,
    flags: ArmFlags,
    session_id: Option<String>,
    force: bool,
) -> ArmRequest {
    let non_empty = |v: Option<String>| v.filter(|p| !p.trim().is_empty());
    ArmRequest {
        name,
        prompt,
        max_iterations: flags
            .max_iterations
            .unwrap_or(ralph_core::state::DEFAULT_MAX_ITERATIONS),
        completion_promise: non_empty(flags.completion_promise),
        abort_promise: non_empty(flags.abort_promise),
        session_id,
        guards: flags.guards.0,
        force,
        fresh_context: flags.fresh_context,
    }
}

/// Arms a loop; a bad name or an empty prompt is a usage error.
pub fn arm(
    project: &ralph_core::store::Project,
    request: &ArmRequest,
) -> Result<(std::path::PathBuf, ralph_core::state::LoopState), Failure> {
    let registry = super::require_registry()?;
    Ok(loops::arm(project, &registry, request, Timestamp::now())?)
}

/// Applies an option found in raw slash-command arguments, with the same
/// checks clap applies on the command line.
fn apply_option(args: &mut StartArgs, key: &str, value: &str) -> Outcome {
    let usage = |e: arguments::ArgumentsError| Failure::usage(e.to_string());
    let number = |v: &str| arguments::check_number(key, v).map_err(usage);
    if let Some(guard) = ralph_core::guards::GuardSettings::option(key) {
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

/// The text the user typed after `/<command>`, as the UserPromptSubmit hook kept it for this
/// session (crates/ralph-core/src/typed.rs says why it never goes through the shell).
pub fn typed_text(session: Option<&str>, command: SlashCommand) -> Result<String, Failure> {
    let session = session.ok_or_else(|| {
        Failure::from(format!(
            "no session id (CLAUDE_CODE_SESSION_ID), so the text typed after /{} cannot be found",
            command.skill()
        ))
    })?;
    let dir = typed::default_dir()?;
    Ok(typed::take(&dir, session, command, Timestamp::now().0)?)
}

/// Fills `--name` / `--all` from a slash command's raw arguments: nothing,
/// `NAME`, `--name NAME`, `--name=NAME` or `--all`.
fn resolve_selection(mut args: SelectArgs, command: SlashCommand) -> Result<SelectArgs, Failure> {
    let raw = if args.typed_arguments {
        typed_text(super::session_from_env().as_deref(), command)?
    } else if args.raw_arguments {
        read_stdin()?
    } else {
        return Ok(args);
    };
    let words: Vec<&str> = raw.split_whitespace().collect();
    match words.as_slice() {
        [] => {}
        ["--all"] => args.all = true,
        ["--name", name] => args.name = Some((*name).to_owned()),
        [word] if word.starts_with("--name=") => {
            args.name = Some(word["--name=".len()..].to_owned())
        }
        [name] if !name.starts_with('-') => args.name = Some((*name).to_owned()),
        _ => {
            return Err(Failure::usage(format!(
                "expected nothing, a loop name, `--name NAME` or `--all`, not `{}`",
                raw.trim()
            )));
        }
    }
    Ok(args)
}

pub fn cancel(args: SelectArgs) -> Outcome {
    let args = resolve_selection(args, SlashCommand::Cancel)?;
    let project = super::project();
    let session = super::session_from_env();
    let ended = loops::cancel(
        &project,
        super::registry().as_ref(),
        args.name.as_deref(),
        args.all,
        session.as_deref(),
        Timestamp::now(),
    );
    let done = match ended {
        // Cancelling what is already gone is not an error: cancel is idempotent.
        Err(loops::LoopError::NoSuchLoop(name)) => {
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
            super::display(&project, &record)
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
    let command = if active {
        SlashCommand::Resume
    } else {
        SlashCommand::Pause
    };
    let args = resolve_selection(args, command)?;
    let project = super::project();
    let session = super::session_from_env();
    let now = Timestamp::now();
    let names: Vec<Option<String>> = if args.all {
        loops::read_live(&project)?
            .into_iter()
            .map(|l| Some(l.file.name))
            .collect()
    } else {
        vec![args.name]
    };
    let mut changed = Vec::new();
    for name in names {
        changed.extend(loops::set_active(
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
    for name in changed {
        say!("{verb} loop `{name}`.");
    }
    Ok(())
}

pub fn status(args: StatusArgs) -> Outcome {
    let project = super::project();
    let reports = loops::report(
        &project,
        super::registry().as_ref(),
        args.history,
        3,
        Timestamp::now(),
    )?;
    if args.json {
        let value =
            serde_json::json!({ "project": project.root.display().to_string(), "loops": reports });
        say_json!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    if reports.is_empty() {
        say!(
            "No Ralph loops in {} (arm one with /ralph-loop or `ralph start`).",
            project.root.display()
        );
        return Ok(());
    }
    for r in &reports {
        print_report(r);
    }
    Ok(())
}

fn print_report(r: &LoopReport) {
    let iteration = match (r.iteration, r.max_iterations) {
        (Some(i), Some(0)) => format!("iteration {i} (no limit)"),
        (Some(i), Some(m)) => format!("iteration {i}/{m}"),
        _ => String::new(),
    };
    let how = r
        .outcome
        .as_deref()
        .map(|o| format!(" ({o})"))
        .unwrap_or_default();
    say!("{} `{}`{how} {iteration}", r.state, one_line(&r.name));
    if let Some(task) = r.task.as_deref().filter(|t| !t.is_empty()) {
        say!("  task: {}", one_line(task));
    }
    if r.driver_gone
        && let Some(owner) = &r.session_id
    {
        let home = match owner.split_once(':') {
            Some((_, session)) => format!(
                "session {} gets it back at its next stop; or ",
                messages::escape_controls(session)
            ),
            None => "nothing drives it: ".to_owned(),
        };
        say!(
            "  ⚠ its driver {} is no longer running; {home}take it over with `ralph run --name {}`, or end it with `ralph cancel --name {}`",
            messages::escape_controls(owner.split_once(':').map_or(owner.as_str(), |(id, _)| id)),
            r.name,
            r.name
        );
    }
    let mut facts = Vec::new();
    if let Some(p) = &r.completion_promise {
        facts.push(format!("promise {}", one_line(p)));
    }
    facts.push(format!(
        "owner {}",
        one_line(r.session_id.as_deref().unwrap_or("unclaimed"))
    ));
    if let Some(s) = &r.started_at {
        facts.push(format!("started {s}"));
    }
    if let Some(e) = r.elapsed_secs {
        facts.push(format!("elapsed {}", format_duration(e)));
    }
    if let Some(e) = &r.ended_at {
        facts.push(format!("ended {e}"));
    }
    if let Some(t) = r.tokens_used.filter(|t| *t > 0) {
        let unseen = r.unseen_tokens.unwrap_or(0);
        facts.push(format!(
            "tokens {}",
            ralph_core::decide::token_words(t, unseen)
        ));
    }
    say!("  {}", facts.join(" · "));
    if !r.guards.is_empty() {
        let figures = match (r.same_reply_count, r.no_progress_count, r.idle_blocks) {
            (Some(a), Some(b), Some(c)) if r.state != LoopStatus::Ended => {
                format!(
                    " · now: {a} same replies, {b} unchanged iterations, {c} blocks without a tool"
                )
            }
            _ => String::new(),
        };
        say!("  guards: {}{figures}", one_line(&r.guards.join(", ")));
    }
    if let Some(note) = &r.not_armed {
        say!("  ⚠ {note}");
    }
    if let Some(err) = &r.error {
        say!("  error: {}", one_line(err));
    }
    say!("  file: {}", one_line(&r.path));
    for line in &r.recent {
        say!("  · {}", log_summary(line));
    }
}

fn log_summary(line: &serde_json::Value) -> String {
    let field = |k: &str| {
        line.get(k)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .unwrap_or_default()
    };
    let known = line.get("tokens").and_then(serde_json::Value::as_u64);
    let unseen = line
        .get("tokens_unseen")
        .and_then(serde_json::Value::as_u64);
    let tokens = match (known, unseen.unwrap_or(0)) {
        (Some(known), unseen) if known > 0 || unseen > 0 => format!(
            " · tokens {}",
            ralph_core::decide::token_words(known, unseen)
        ),
        _ => String::new(),
    };
    // One line per stop: a multi-line reason (a refused promise with the
    // verify output) is folded onto its line.
    let why = field("why")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ⏎ ");
    one_line(&format!(
        "{} iteration {} {} — {why}{tokens}",
        field("time"),
        field("iteration"),
        field("decision"),
    ))
    .into_owned()
}

/// A value shown on one line: its newlines are escaped too.
fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    ralph_core::display::line(text)
}

pub fn log(args: LogArgs) -> Outcome {
    let project = super::project();
    let session = super::session_from_env();
    let reports = loops::report(&project, None, usize::MAX, 0, Timestamp::now())?;
    let chosen = match &args.name {
        Some(name) => reports.iter().find(|r| &r.name == name),
        None => reports
            .iter()
            .find(|r| session.is_some() && r.session_id == session && r.state != LoopStatus::Ended)
            .or_else(|| reports.first()),
    };
    let Some(report) = chosen else {
        return match args.name {
            Some(name) => Err(format!("no loop named `{name}` (see `ralph status`)").into()),
            None => {
                say!("No Ralph loops in this project yet; nothing is logged.");
                Ok(())
            }
        };
    };
    // A linked logs folder is never read (the report's path is empty then).
    let lines = loops::read_log_tail(&report.log, usize::MAX);
    if !args.json {
        let task = report.task.as_deref().unwrap_or("");
        say!("Loop `{}` ({}) · task: {task}", report.name, report.state);
    }
    for line in &lines {
        if args.json {
            say_json!("{line}");
        } else {
            say!("{}", log_summary(line));
        }
    }
    if lines.is_empty() && !args.json {
        say!("The loop `{}` has no decisions logged yet.", report.name);
    }
    Ok(())
}
