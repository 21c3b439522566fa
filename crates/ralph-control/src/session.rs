//! The session hooks around a loop: `UserPromptSubmit` (a prompt after an
//! interrupted loop, and `/ralph-loop` itself), `SessionEnd` (the owner
//! leaves: pause) and `SessionStart` (the owner comes back, compacts or
//! clears). The rules are in `session::rules`; this module reads the event,
//! finds the loops, writes under the project lock and answers.
//!
//! Like the Stop hook: a project without loop files costs one directory
//! read; only loops this session owns are touched (a `/clear` handover is
//! the owner's own, written by its `SessionEnd` in the same client process);
//! every error ends in a notice for the user, never a blocked prompt.

pub mod rules;

use std::path::PathBuf;

use serde::Deserialize;

use ralph_core::hook::HookError;
use ralph_core::hook::answer::Answer;
use ralph_state::fields::frontmatter::quote;
use ralph_state::fields::state::{FRESH_NONE, FRESH_WAITING, LoopState};
use ralph_state::lifecycle::{LogEntry, Logged, Loop};
use ralph_state::messages;
use ralph_state::ownership::{self, Candidate, Selection};
use ralph_state::scan::{LoopEntry, Scan};
use ralph_state::storage::environment::Environment;
use ralph_state::storage::store::{Project, ProjectLock};
use rules::{EndRule, FailureRule, Handover, StartRule};

/// The fields of `UserPromptSubmit`, `SessionStart` and `SessionEnd` that
/// ralph reads; unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SessionEvent {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// `UserPromptSubmit`: the text as typed (a slash command arrives raw).
    #[serde(default)]
    pub prompt: Option<String>,
    /// `SessionStart`: `startup`, `resume`, `clear` or `compact`.
    #[serde(default)]
    pub source: Option<String>,
    /// `SessionEnd`: `clear`, `logout`, `prompt_input_exit`, `other`, …
    #[serde(default)]
    pub reason: Option<String>,
    /// `StopFailure`: `rate_limit`, `billing_error`, `server_error`, …
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub error_details: Option<String>,
    /// `StopFailure`: the error as the client showed it.
    #[serde(default)]
    pub last_assistant_message: Option<String>,
    /// `PostCompact`: `manual` (`/compact`) or `auto`.
    #[serde(default)]
    pub trigger: Option<String>,
}

impl SessionEvent {
    fn parse(input: &[u8]) -> Result<Self, HookError> {
        if input.iter().all(u8::is_ascii_whitespace) {
            return Err(HookError::SessionEmpty);
        }
        serde_json::from_slice(input).map_err(HookError::SessionJson)
    }

    fn session(&self) -> Option<&str> {
        self.session_id.as_deref().filter(|s| !s.trim().is_empty())
    }
}

/// What the session hooks take from their environment.
#[derive(Debug, Clone)]
pub struct SessionContext {
    pub env: Environment,
    /// `CLAUDE_PID`: the client process, the same before and after `/clear`.
    pub client_pid: Option<u32>,
}

impl SessionContext {
    pub fn from_env() -> Self {
        Self {
            env: Environment::from_env(),
            client_pid: std::env::var("CLAUDE_PID")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .filter(|&pid| pid > 1),
        }
    }
}

/// `UserPromptSubmit` for every prompt that is not one of ralph's commands (those are
/// answered before this, in the binary's `cmd/prompt.rs`). Never blocks the prompt.
pub fn prompt(input: &[u8], ctx: &SessionContext) -> Answer {
    answer_or_notice(run_prompt(input, ctx), "your message was sent as usual")
}

/// `SessionStart`.
pub fn start(input: &[u8], ctx: &SessionContext) -> Answer {
    answer_or_notice(run_start(input, ctx), "the session started as usual")
}

/// `SessionEnd`.
pub fn end(input: &[u8], ctx: &SessionContext) -> Answer {
    answer_or_notice(run_end(input, ctx), "no loop was paused")
}

/// `StopFailure`: an API error ended the turn instead of a stop. A rate
/// or usage limit pauses this session's loop (uncounted; the user is told
/// at the next prompt or session start, `/ralph-resume` goes on); any
/// other error is logged. The client ignores this hook's output.
pub fn stop_failure(input: &[u8], ctx: &SessionContext) -> Answer {
    answer_or_notice(run_failure(input, ctx), "the loop was left as it was")
}

/// `PostCompact`: the client compacted this session's context. Logged for
/// the loop this session drives, so the log and the report show where what
/// the agent knew became a summary. The client shows this hook's output to
/// no one: it answers nothing.
pub fn post_compact(input: &[u8], ctx: &SessionContext) -> Answer {
    answer_or_notice(run_post_compact(input, ctx), "nothing was logged")
}

fn run_post_compact(input: &[u8], ctx: &SessionContext) -> Result<Answer, HookError> {
    let event = SessionEvent::parse(input)?;
    let Some(project) = locate(&event, ctx)? else {
        return Ok(Answer::Silent);
    };
    let session = event.session().unwrap_or_default();
    // Under the lock, like every log append of a live loop.
    let _lock = project.lock()?;
    let lives = live_loops(&project, ctx)?;
    let Some(i) = driven(&lives, session) else {
        return Ok(Answer::Silent);
    };
    let live = &lives[i];
    let trigger = event
        .trigger
        .as_deref()
        .map_or_else(|| "unknown".to_owned(), messages::printable);
    LogEntry {
        trigger: Some(trigger.clone()),
        ..LogEntry::new(
            ctx.env.now,
            Logged::Compact,
            format!("the client compacted the context ({trigger}): from here the agent works from a summary"),
        )
    }
    .session(session)
    .iteration(live.state.iteration)
    .append(&project, &live.file.name);
    Ok(Answer::Silent)
}

fn answer_or_notice(result: Result<Answer, HookError>, what_happened: &str) -> Answer {
    result.unwrap_or_else(|e| {
        Answer::Notice(messages::printable(&format!(
            "⚠ ralph: {e}; {what_happened}."
        )))
    })
}

/// The project and this session, or `None` when there is nothing to do:
/// no project, no loop file (one directory read), or no session named.
fn locate(event: &SessionEvent, ctx: &SessionContext) -> Result<Option<Project>, HookError> {
    let Some(project) = ctx.env.locate(event.cwd.as_deref()) else {
        return Ok(None);
    };
    if event.session().is_none() {
        return Ok(None);
    }
    if project.loop_files()?.is_empty() {
        return Ok(None);
    }
    // Read-only first: loop files that came with the project (not armed
    // here) are inert, so a project holding only those is left exactly as
    // it is; not even the lock file is made.
    if live_loops(&project, ctx)?.is_empty() {
        return Ok(None);
    }
    Ok(Some(project))
}

/// The loop this session drives (its newest own loop), as the Stop hook
/// picks it; unowned loops are not this hook's to claim.
fn driven(lives: &[Loop], session: &str) -> Option<usize> {
    let valid: Vec<(usize, &LoopState)> = lives
        .iter()
        .enumerate()
        .map(|(i, l)| (i, &l.state))
        .collect();
    let candidates: Vec<Candidate<'_>> = valid
        .iter()
        .map(|(_, s)| Candidate {
            owner: s.session_id.as_deref(),
            started_at: s.started_at,
        })
        .collect();
    match ownership::select(session, &candidates) {
        Selection::Owned(i) => Some(valid[i].0),
        Selection::Claim(_) | Selection::None => None,
    }
}

/// Every valid loop this session owns.
fn owned<'a>(lives: &'a [Loop], session: &str) -> impl Iterator<Item = (&'a Loop, &'a LoopState)> {
    lives
        .iter()
        .filter(move |l| l.state.session_id.as_deref() == Some(session))
        .map(|l| (l, &l.state))
}

/// The loops these hooks may touch: armed on this machine, whatever session
/// they name. A loop file that came with the project, or that a command of
/// this session planted, is as inert here as it is to the Stop hook.
fn live_loops(project: &Project, ctx: &SessionContext) -> Result<Vec<Loop>, HookError> {
    let scan = Scan::read(project, ctx.env.registry().as_ref())?;
    Ok(scan
        .entries
        .into_iter()
        .filter_map(|entry| match entry {
            LoopEntry::Armed(live) | LoopEntry::Paused(live) => Some(live),
            LoopEntry::Foreign { .. } | LoopEntry::Unreadable { .. } => None,
        })
        .collect())
}

/// A proven rewrite (`rewrite::set_fields`): every field written reads back,
/// nothing else changes; otherwise nothing is written.
fn rewrite(lock: &ProjectLock, live: &Loop, fields: &[(&str, String)]) -> Result<(), HookError> {
    Ok(live.write(lock, fields)?)
}

fn run_prompt(input: &[u8], ctx: &SessionContext) -> Result<Answer, HookError> {
    let event = SessionEvent::parse(input)?;
    let prompt = event.prompt.as_deref().unwrap_or("");
    // ralph's own commands are answered before this (the binary's `cmd/prompt.rs`); any
    // other `/ralph-…` word gets no "goes into the loop" line.
    if rules::is_ralph_command(prompt) {
        return Ok(Answer::Silent);
    }
    // This session's loop file deleted by hand: say so (once) rather than nothing.
    if let (Some(project), Some(session)) = (ctx.env.locate(event.cwd.as_deref()), event.session())
        && project.loop_files()?.is_empty()
    {
        return Ok(notice(&ralph_state::lifecycle::vanished(
            &project,
            session,
            ctx.env.now,
        )));
    }
    let Some(project) = locate(&event, ctx)? else {
        return Ok(Answer::Silent);
    };
    let session = event.session().unwrap_or_default();
    let lock = project.lock()?;
    let lives = live_loops(&project, ctx)?;
    let Some(i) = driven(&lives, session) else {
        return Ok(Answer::Silent);
    };
    let live = &lives[i];
    let state = &live.state;
    let marks = rules::read_marks(&live.text);
    if let Some(why) = marks.limit_pause.as_deref().filter(|_| !state.active) {
        // Told once: the mark goes with this prompt.
        rewrite(&lock, live, &[(rules::LIMIT_PAUSE_FIELD, quote(""))])?;
        return Ok(Answer::Notice(messages::paused_for_limit(
            &live.file.name,
            state,
            why,
        )));
    }
    if !rules::tell_on_prompt(prompt, state, &marks) {
        return Ok(Answer::Silent);
    }
    rewrite(
        &lock,
        live,
        &[(rules::PROMPT_NOTICE_FIELD, state.iteration.to_string())],
    )?;
    LogEntry::new(
        ctx.env.now,
        Logged::Prompt,
        "the user wrote to the session while the loop was armed (its turn had ended without a stop: interrupted or cut)",
    )
    .session(session)
    .iteration(state.iteration)
    .append(&project, &live.file.name);
    Ok(Answer::Notice(messages::prompt_into_loop(
        &live.file.name,
        state,
    )))
}

fn run_end(input: &[u8], ctx: &SessionContext) -> Result<Answer, HookError> {
    let event = SessionEvent::parse(input)?;
    let Some(project) = locate(&event, ctx)? else {
        return Ok(Answer::Silent);
    };
    let session = event.session().unwrap_or_default();
    let reason = event.reason.as_deref();
    let lock = project.lock()?;
    let lives = live_loops(&project, ctx)?;
    let mut notices = Vec::new();
    for (live, state) in owned(&lives, session) {
        let rule = rules::on_end(reason, state);
        let handing_over = matches!(rule, EndRule::HandOver { .. }) && ctx.client_pid.is_some();
        let (why, mut fields) = match rule {
            EndRule::Leave => continue,
            EndRule::Pause { why } => (why, Vec::new()),
            EndRule::HandOver { why } => {
                // Paused for `--fresh-at`'s /clear: the new conversation runs it.
                let waiting = state.progress.fresh_stage == FRESH_WAITING;
                let handover = ctx.client_pid.map(|client_pid| Handover {
                    client_pid,
                    at: ctx.env.now,
                    was_active: state.active || waiting,
                });
                let fields = handover
                    .map(|h| (rules::HANDOVER_FIELD, quote(&h.render())))
                    .into_iter()
                    .collect();
                (why, fields)
            }
        };
        fields.push(("active", "false".to_owned()));
        rewrite(&lock, live, &fields)?;
        LogEntry {
            reason: reason.map(str::to_owned),
            ..LogEntry::new(ctx.env.now, Logged::Pause, why.as_str())
        }
        .session(session)
        .iteration(state.iteration)
        .append(&project, &live.file.name);
        notices.push(if handing_over {
            messages::handed_over_at_clear(&live.file.name, state)
        } else {
            messages::paused_at_session_end(&live.file.name, state, &why)
        });
    }
    Ok(notice(&notices))
}

fn run_failure(input: &[u8], ctx: &SessionContext) -> Result<Answer, HookError> {
    let event = SessionEvent::parse(input)?;
    let Some(project) = locate(&event, ctx)? else {
        return Ok(Answer::Silent);
    };
    let session = event.session().unwrap_or_default();
    let rule = rules::on_failure(
        event.error.as_deref(),
        event.error_details.as_deref(),
        event.last_assistant_message.as_deref(),
    );
    let lock = project.lock()?;
    let lives = live_loops(&project, ctx)?;
    let Some(i) = driven(&lives, session) else {
        return Ok(Answer::Silent);
    };
    let live = &lives[i];
    let state = &live.state;
    let (decision, why) = match rule {
        FailureRule::Pause { why } if state.active => {
            rewrite(
                &lock,
                live,
                &[
                    ("active", "false".to_owned()),
                    (rules::LIMIT_PAUSE_FIELD, quote(&why)),
                ],
            )?;
            (Logged::Pause, why)
        }
        FailureRule::Pause { why } | FailureRule::Log { why } => (Logged::ApiError, why),
    };
    LogEntry {
        reason: event.error.as_deref().map(messages::printable),
        ..LogEntry::new(ctx.env.now, decision, why.as_str())
    }
    .session(session)
    .iteration(state.iteration)
    .append(&project, &live.file.name);
    Ok(match decision {
        Logged::Pause => Answer::Notice(messages::paused_for_limit(&live.file.name, state, &why)),
        _ => Answer::Silent,
    })
}

fn run_start(input: &[u8], ctx: &SessionContext) -> Result<Answer, HookError> {
    let event = SessionEvent::parse(input)?;
    let Some(project) = locate(&event, ctx)? else {
        return Ok(Answer::Silent);
    };
    let session = event.session().unwrap_or_default();
    let source = event.source.as_deref();
    let lock = project.lock()?;
    let mut lives = live_loops(&project, ctx)?;
    let mut notices = Vec::new();
    let mut for_the_model = Vec::new();
    if source == Some("clear")
        && let Some(client_pid) = ctx.client_pid
    {
        let taken = take_over(&lock, &project, &lives, session, client_pid, ctx)?;
        notices.extend(taken.notices);
        for_the_model = taken.context;
        lives = live_loops(&project, ctx)?;
    }
    for (live, state) in owned(&lives, session) {
        if source == Some("clear") {
            continue; // told by the handover, or a fresh session's own business
        }
        let text = match rules::on_start(source, state) {
            StartRule::Paused => {
                if rules::read_marks(&live.text).limit_pause.is_some() {
                    rewrite(&lock, live, &[(rules::LIMIT_PAUSE_FIELD, quote(""))])?;
                }
                let why = last_pause_reason(&project, &live.file.name);
                messages::paused_on_start(&live.file.name, state, why.as_deref())
            }
            StartRule::Compacted => messages::kept_after_compaction(&live.file.name, state),
            // Not marked as told: print mode never shows this message, and
            // the first prompt's line is the one that says where it goes.
            StartRule::Armed => messages::armed_on_start(&live.file.name, state),
        };
        notices.push(text);
    }
    if for_the_model.is_empty() {
        return Ok(notice(&notices));
    }
    Ok(Answer::Context {
        context: for_the_model.join("\n\n"),
        status: notices.join("\n"),
    })
}

/// What a `/clear` handover tells: the user's lines, and the model's (the
/// task of a loop `--fresh-at` paused for this fresh conversation).
struct TakenOver {
    notices: Vec<String>,
    context: Vec<String>,
}

/// `/clear` ended the owner's session and started this one in the same
/// client process: the loops the ended session marked move to this one.
fn take_over(
    lock: &ProjectLock,
    project: &Project,
    lives: &[Loop],
    session: &str,
    client_pid: u32,
    ctx: &SessionContext,
) -> Result<TakenOver, HookError> {
    let mut notices = Vec::new();
    let mut context = Vec::new();
    for live in lives {
        let state = &live.state;
        let Some(handover) = rules::read_marks(&live.text).handover else {
            continue;
        };
        if !handover.is_for(client_pid, ctx.env.now) || state.session_id.as_deref() == Some(session)
        {
            continue;
        }
        let fresh = state.progress.fresh_stage == FRESH_WAITING;
        let mut fields = vec![
            ("session_id", quote(session)),
            ("active", handover.was_active.to_string()),
            (rules::HANDOVER_FIELD, quote("")),
            (rules::PROMPT_NOTICE_FIELD, state.iteration.to_string()),
        ];
        if fresh {
            fields.push(("fresh_stage", FRESH_NONE.to_string()));
            carry_window(state.session_id.as_deref(), session, ctx);
        }
        rewrite(lock, live, &fields)?;
        LogEntry {
            from: state.session_id.clone(),
            ..LogEntry::new(
                ctx.env.now,
                Logged::Handover,
                "kept across /clear: the new conversation of the same client owns the loop now",
            )
        }
        .session(session)
        .iteration(state.iteration)
        .append(project, &live.file.name);
        if fresh {
            notices.push(messages::fresh_taken_over(&live.file.name, state));
            context.push(messages::fresh_context(&live.file.name, state));
        } else {
            notices.push(messages::kept_after_clear(
                &live.file.name,
                state,
                handover.was_active,
            ));
        }
    }
    Ok(TakenOver { notices, context })
}

/// The conversation `/clear` opened runs the same model in the same client:
/// its context window is the old one's until the status line says.
fn carry_window(from: Option<&str>, to: &str, ctx: &SessionContext) {
    use ralph_state::storage::window;
    let (Some(from), Some(registry)) = (from, ctx.env.registry()) else {
        return;
    };
    let windows = window::load_context_windows(registry.dir());
    if let (Some(size), None) = (windows.of(from), windows.of(to)) {
        let _ = window::keep_context_window(registry.dir(), to, size, ctx.env.now);
    }
}

/// Why the loop was last paused, from its decision log (a session end or
/// the user), or `None` when it was resumed since or the log says nothing.
fn last_pause_reason(project: &Project, name: &str) -> Option<String> {
    let recent = ralph_state::storage::store::read_log_tail(&project.log_path(name), 50);
    let last = recent
        .iter()
        .rev()
        .find(|l| matches!(l["decision"].as_str(), Some("pause" | "resume")))?;
    (last["decision"] == "pause")
        .then(|| last["why"].as_str().map(str::to_owned))
        .flatten()
}

fn notice(notices: &[String]) -> Answer {
    if notices.is_empty() {
        Answer::Silent
    } else {
        Answer::Notice(notices.join("\n"))
    }
}
