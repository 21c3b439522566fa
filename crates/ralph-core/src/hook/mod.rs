//! The Stop hook from end to end, as one straight line:
//! stdin → event → locate loop → lock → read state → last reply → decide →
//! write state / history / log → answer.
//!
//! Every failure ends in an answer that lets the session stop and says why;
//! nothing here panics or exits.

pub mod answer;
pub mod context;
pub mod host;
pub mod host_install;
pub mod session;
pub mod typed;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::decide::engine::{self, Step, Turn};
use crate::decide::{Observation, Outcome, Verification};
use crate::display;
use crate::fs::git;
use crate::hook::answer::Answer;
use crate::hook::host::Host;
use crate::loop_file::lifecycle::{self, LogEntry, Logged, Loop};
use crate::loop_file::messages;
use crate::loop_file::ownership::{self, Candidate, Selection};
use crate::loop_file::registry::{self, Arming, Registry, RegistryError};
use crate::loop_file::state::{self, LoopState};
use crate::loop_file::store::{self, LoopFile, Project, StoreError};
use crate::reply::event::{EventError, StopEvent};
use crate::reply::transcript;
use crate::time::Timestamp;

pub use crate::hook::context::{DEFAULT_BLOCK_CAP, HookContext};

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(transparent)]
    Event(#[from] EventError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("{path}: {message}")]
    Adopt { path: PathBuf, message: String },
    #[error(transparent)]
    Step(#[from] engine::StepError),
}

/// Answers one Stop event. Never fails: errors become a notice and an allow.
pub fn stop(input: &[u8], ctx: &HookContext) -> Answer {
    stop_for_host(input, ctx, None).answer
}

/// `stop` on an event read straight from `input` (stdin): the raw payload
/// is never held next to the parsed reply.
pub fn stop_reader(input: impl std::io::Read, ctx: &HookContext) -> Answer {
    stop_reader_for_host(input, ctx, None).answer
}

/// The hook's answer and the host it is for, which decides its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAnswer {
    pub answer: Answer,
    pub host: Host,
    /// The loop asked for a fresh context (Gemini's `clearContext`).
    pub fresh_context: bool,
}

impl HostAnswer {
    /// The exact bytes for stdout.
    pub fn render(&self) -> String {
        self.host.render(&self.answer, self.fresh_context)
    }
}

/// Answers one turn-end event of any host: `host` when the caller named it
/// (`--host`), else the host recognised from the event.
pub fn stop_for_host(input: &[u8], ctx: &HookContext, host: Option<Host>) -> HostAnswer {
    answer(StopEvent::parse(input), ctx, host)
}

/// `stop_for_host` on an event read straight from `input` (stdin).
pub fn stop_reader_for_host(
    input: impl std::io::Read,
    ctx: &HookContext,
    host: Option<Host>,
) -> HostAnswer {
    answer(StopEvent::from_reader(input), ctx, host)
}

fn answer(
    parsed: Result<StopEvent, EventError>,
    ctx: &HookContext,
    host: Option<Host>,
) -> HostAnswer {
    let mut out = HostAnswer {
        answer: Answer::Silent,
        host: host.unwrap_or(Host::Claude),
        fresh_context: false,
    };
    let answer = match parsed
        .map_err(HookError::from)
        .and_then(|event| run(event, ctx, host, &mut out))
    {
        Ok(answer) => answer,
        Err(e) => Answer::Notice(format!(
            "⚠ ralph: {}. The stop was allowed; the loop was not advanced.",
            display::line(&e.to_string())
        )),
    };
    out.answer = shown_safely(answer);
    out
}

/// What the user sees (`systemMessage`) may quote a loop file or a reply:
/// its control characters are escaped. The `reason` is the prompt for the
/// model and goes as the user wrote it.
fn shown_safely(answer: Answer) -> Answer {
    match answer {
        Answer::Silent => Answer::Silent,
        Answer::Notice(m) => Answer::Notice(display::block(&m).into_owned()),
        Answer::Block { reason, status } => Answer::Block {
            reason,
            status: display::block(&status).into_owned(),
        },
    }
}

/// A loop file as read under the lock.
/// Whose a loop is for this stop: its `session_id`, except that a loop whose
/// `ralph run` died goes back to the session it was taken from
/// (crate::loop_file::run_owner), which claims it again at its next stop.
fn owner_of(state: &LoopState) -> Option<&str> {
    let owner = state.session_id.as_deref()?;
    Some(crate::loop_file::run_owner::orphaned_for(owner).unwrap_or(owner))
}

fn run(
    mut event: StopEvent,
    ctx: &HookContext,
    host: Option<Host>,
    out: &mut HostAnswer,
) -> Result<Answer, HookError> {
    out.host = host.unwrap_or_else(|| Host::detect(&event));
    let Some(project) = ctx.locate(event.cwd.as_deref()) else {
        return Ok(Answer::Silent);
    };
    // The common case for a session without a loop: one directory read, no lock.
    if project.loop_files()?.is_empty() {
        return Ok(Answer::Silent);
    }
    let Some(session) = event.session().map(str::to_owned) else {
        return Ok(Answer::Notice(
            "⚠ ralph: the Stop event names no session_id, so no loop was advanced (a loop is only driven by the session that owns it). Update Claude Code.".into(),
        ));
    };
    let mut notices = Vec::new();
    // Only now, with loop files present, is the registry consulted.
    let session = session.as_str();
    let gate = Gate {
        registry: ctx.registry(),
        root: registry::canonical_root(&project).ok(),
        session,
    };
    // Read-only first: a project whose loop files are all inert for this
    // session is left exactly as it is (not even the lock file is made).
    if !gate.concerns_us(&project, &mut notices)? {
        return Ok(with_notices(Answer::Silent, notices));
    }
    let lock = project.lock()?;
    project.remove_stale_temps();
    let loaded = load_loops(&project, &gate, ctx.now, &mut notices)?;
    let Some((live, claim)) = choose(&loaded, &gate, session, &mut notices) else {
        return Ok(with_notices(Answer::Silent, notices));
    };
    out.fresh_context = live.state.fresh_context;
    let answer = if out.host == Host::Claude {
        drive(&project, live, &gate, session, claim, &mut event, ctx, lock)?
    } else {
        // Other hosts: the reply from where that host leaves it, and no
        // block cap (only Claude Code has one).
        let mut event = out.host.normalise(&event, live.state.started_at);
        let ctx = HookContext {
            block_cap: 0,
            ..ctx.clone()
        };
        drive(
            &project, live, &gate, session, claim, &mut event, &ctx, lock,
        )?
    };
    Ok(with_notices(answer, notices))
}

/// The loop this stop drives, if any, and whether the session claims it.
/// Only loops armed here are candidates, whatever session they name: a file
/// that names this session proves nothing, since every command the agent
/// runs sees the session id. Anything else is inert and gets its notice once.
fn choose<'a>(
    loaded: &'a [Loop],
    gate: &Gate<'_>,
    session: &str,
    notices: &mut Vec<String>,
) -> Option<(&'a Loop, bool)> {
    let mut drivable: Vec<&Loop> = Vec::new();
    for live in loaded {
        if owner_of(&live.state).is_some_and(|o| o != session) {
            continue; // another session's loop: not this stop's business
        }
        match gate.arming(live) {
            Arming::Armed => drivable.push(live),
            other => {
                if let Some(notice) = gate.notice_once(live, &other) {
                    notices.push(notice);
                }
            }
        }
    }
    let candidates: Vec<Candidate<'_>> = drivable
        .iter()
        .map(|l| Candidate {
            owner: owner_of(&l.state),
            started_at: l.state.started_at,
        })
        .collect();
    match ownership::select(session, &candidates) {
        Selection::None => None,
        Selection::Owned(i) => Some((
            drivable[i],
            drivable[i].state.session_id.as_deref() != Some(session),
        )),
        Selection::Claim(i) => Some((drivable[i], true)),
    }
}

/// The registry check for one stop: which loops were armed here.
struct Gate<'a> {
    registry: Option<Registry>,
    /// The project's canonical path, as records bind it.
    root: Option<PathBuf>,
    session: &'a str,
}

impl Gate<'_> {
    fn arming(&self, live: &Loop) -> Arming {
        registry::arming(
            self.registry.as_ref(),
            self.root.as_deref(),
            &live.file.name,
            &live.state,
        )
    }

    /// Whether a record exists for this loop's name (a corrupt file armed here).
    fn has_record(&self, name: &str) -> bool {
        match (&self.registry, &self.root) {
            (Some(r), Some(root)) => r.lookup(root, name).ok().flatten().is_some(),
            _ => false,
        }
    }

    /// Whether any loop file here may be this session's to drive or to tidy
    /// (an ended or corrupt loop of this user). Reads only; the inert files
    /// get their notice (once per session) on the way.
    fn concerns_us(&self, project: &Project, notices: &mut Vec<String>) -> Result<bool, HookError> {
        for file in project.loop_files()? {
            let Ok(text) = store::read_to_string(&file.path) else {
                return Ok(true); // reported under the lock, as any unreadable file
            };
            // This session's own armed loop is judged under the lock only
            // (see below); a line scan and the record's presence find it
            // without parsing the file twice. A file that only names this
            // session is judged here, read-only: it may have been planted.
            let names_us = state::scan_session_id(&text).as_deref() == Some(self.session);
            if names_us && self.has_record(&file.name) {
                return Ok(true);
            }
            match LoopState::parse(&text) {
                Ok(state) => {
                    let owner = owner_of(&state).map(str::to_owned);
                    let live = Loop { file, text, state };
                    let ended = live.state.outcome.is_some();
                    if !ended && owner.as_deref().is_some_and(|o| o != self.session) {
                        continue;
                    }
                    // A record exists for this session's own loop: judged under
                    // the lock, so that a stop never sees an adoption half done
                    // (record written, nonce not yet in the file).
                    if owner.as_deref() == Some(self.session) && self.has_record(&live.file.name) {
                        return Ok(true);
                    }
                    match self.arming(&live) {
                        Arming::Armed => return Ok(true),
                        _ if ended => {}
                        other => notices.extend(self.notice_once(&live, &other)),
                    }
                }
                Err(e) => {
                    let owner = state::scan_session_id(&text);
                    if self.has_record(&file.name) {
                        return Ok(true);
                    }
                    if owner.is_none() || owner.as_deref() == Some(self.session) {
                        notices.extend(self.corrupt_notice_once(&file, &text, &e));
                    }
                }
            }
        }
        Ok(false)
    }

    /// The notice for a corrupt loop file that is nobody's and was not armed
    /// here: it is ignored, said once per session.
    fn corrupt_notice_once(
        &self,
        file: &LoopFile,
        text: &str,
        error: &state::StateError,
    ) -> Option<String> {
        let first = self
            .registry
            .as_ref()
            .is_none_or(|r| r.first_notice(self.session, &file.path, &registry::digest_text(text)));
        first.then(|| {
            format!(
                "⚠ ralph: {} is ignored: it is not a valid loop file ({}) and was not armed by you on this machine.",
                display::line(&file.path.display().to_string()),
                display::line(&error.to_string())
            )
        })
    }

    fn forget(&self, name: &str, nonce: Option<&str>) {
        if let (Some(r), Some(root)) = (&self.registry, &self.root) {
            r.forget(root, name, nonce);
        }
    }

    /// The notice for an inert loop, the first time this session meets it
    /// in this shape; `None` afterwards.
    fn notice_once(&self, live: &Loop, arming: &Arming) -> Option<String> {
        let first = match &self.registry {
            Some(r) => r.first_notice(
                self.session,
                &live.file.path,
                &registry::digest(&live.state),
            ),
            None => true,
        };
        first.then(|| inert_notice(&live.file.path, &live.file.name, &arming.why_not()))
    }
}

/// The one notice an inert loop file gets in a session.
fn inert_notice(path: &Path, name: &str, why: &str) -> String {
    format!(
        "⚠ ralph: {} is not driven: {why}. ralph runs only loops you armed on this machine; to run this one, read it and adopt it: `ralph adopt --name {}`",
        display::line(&path.display().to_string()),
        display::line(name)
    )
}

/// Reads every loop file under the lock. Files that ended but were not yet
/// moved are moved now (when they are this user's); corrupt files that were
/// armed here, or are this session's, are moved aside with a notice; other
/// corrupt files are left alone; the valid loops are returned.
fn load_loops(
    project: &Project,
    gate: &Gate<'_>,
    now: Timestamp,
    notices: &mut Vec<String>,
) -> Result<Vec<Loop>, HookError> {
    let session = gate.session;
    let mut loaded = Vec::new();
    for file in project.loop_files()? {
        let text = match store::read_to_string(&file.path) {
            Ok(t) => t,
            Err(e) => {
                notices.push(format!("⚠ ralph: {}", display::line(&e.to_string())));
                continue;
            }
        };
        match LoopState::parse(&text) {
            Ok(s) if s.outcome.is_some() => {
                let live = Loop {
                    file,
                    text,
                    state: s,
                };
                if gate.arming(&live) == Arming::Armed {
                    let ended = live.state.ended_at.unwrap_or(now);
                    match lifecycle::archive_as_is(project, &live.file, ended, "") {
                        Ok(_) => gate.forget(&live.file.name, live.state.nonce.as_deref()),
                        Err(e) => notices.push(format!(
                            "⚠ ralph: {}: the loop ended but could not be moved into the history: {}",
                            display::line(&live.file.path.display().to_string()),
                            display::line(&e.to_string())
                        )),
                    }
                }
            }
            Ok(state) => loaded.push(Loop { file, text, state }),
            Err(e) => {
                let owner = state::scan_session_id(&text);
                // Only a file armed here is moved: one that merely names
                // this session may have been planted by any command it ran.
                if gate.has_record(&file.name) {
                    // One bad file is one notice: the other loops still run.
                    match lifecycle::archive_as_is(project, &file, now, ".corrupt") {
                        Ok(record) => {
                            gate.forget(&file.name, None);
                            notices.push(format!(
                                "⚠ ralph: {}: {}. The loop stopped and the file was moved to {} so it cannot trap the session; fix it and move it back, or arm a new loop with /ralph-loop.",
                                display::line(&file.path.display().to_string()),
                                display::line(&e.to_string()),
                                display::line(&record.display().to_string())
                            ));
                        }
                        Err(why) => notices.push(format!(
                            "⚠ ralph: {}: {}. It could not be moved aside ({}); fix or remove it.",
                            display::line(&file.path.display().to_string()),
                            display::line(&e.to_string()),
                            display::line(&why.to_string())
                        )),
                    }
                    LogEntry::new(now, Logged::End, e.to_string())
                        .session(session)
                        .outcome(Outcome::Corrupt)
                        .append(project, &file.name);
                } else if owner.is_none() || owner.as_deref() == Some(session) {
                    // Not armed here, and nobody's or naming this session:
                    // inert, like any loop file that came with the project;
                    // said once per session.
                    notices.extend(gate.corrupt_notice_once(&file, &text, &e));
                }
                // Another session's broken file is its own business: never
                // a candidate here, and left exactly as it is.
            }
        }
    }
    Ok(loaded)
}

#[allow(clippy::too_many_arguments)]
fn drive(
    project: &Project,
    live: &Loop,
    gate: &Gate<'_>,
    session: &str,
    claim: bool,
    event: &mut StopEvent,
    ctx: &HookContext,
    lock: store::ProjectLock,
) -> Result<Answer, HookError> {
    let state = &live.state;
    let mut notices = Vec::new();
    if let Some(problem) = project.log_problem(&live.file.name) {
        notices.push(format!(
            "⚠ ralph `{}`: decisions are not logged: {}",
            display::line(&live.file.name),
            display::line(&problem.to_string())
        ));
    }
    let (seen, appended) = observe(project, state, event, ctx, &mut notices);
    // The user sees a refused promise too, not only the model.
    let refused = seen
        .verification
        .as_ref()
        .filter(|v| !v.passed)
        .map(|v| messages::verify_refused_status(&v.status));
    let turn = Turn {
        seen,
        transcript: appended,
        driver: session.to_owned(),
        claim: claim.then(|| session.to_owned()),
    };
    let answer = match engine::step(project, live, gate.registry.as_ref(), turn, ctx.now, lock)? {
        Step::Passed => Answer::Silent,
        Step::Changed { notice } => Answer::Notice(notice),
        Step::Ended { notice, .. } => Answer::Notice(notice),
        Step::Continued { reason, status, .. } => Answer::Block {
            reason,
            status: match refused {
                Some(refused) => format!("{status} · {refused}"),
                None => status,
            },
        },
    };
    Ok(with_notices(answer, notices))
}

/// Gathers what the decision needs: the reply, and the guard figures that
/// are switched on (each costs a read or a process, so none runs unasked).
fn observe(
    project: &Project,
    state: &LoopState,
    event: &mut StopEvent,
    ctx: &HookContext,
    notices: &mut Vec<String>,
) -> (Observation, Option<transcript::Appended>) {
    let transcript_path = event
        .transcript_path
        .take()
        .filter(|p| !p.as_os_str().is_empty());
    let transcript_path = transcript_path.as_deref();
    // A transcript that is there but not a regular file (a FIFO, a device)
    // is refused without blocking; say so once, whichever read met it.
    let mut refused = None;
    let mut note = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::InvalidData && refused.is_none() {
            refused = Some(e.to_string());
        }
    };
    let reply = event.take_reply().or_else(|| {
        let path = transcript_path?;
        let offset = state.progress.transcript_offset;
        transcript::last_reply(path, offset, state.started_at)
            .map_err(&mut note)
            .ok()
            .flatten()
            .map(|r| r.text)
    });
    let wants_progress = state.guards.no_progress_after > 0;
    let wants_transcript = state.guards.max_tokens.is_some() || ctx.block_cap > 0 || wants_progress;
    let mut scan = |p: &Path| {
        transcript::scan_loop(
            p,
            state.progress.transcript_offset,
            state.progress.last_message_id.as_deref(),
            state.started_at,
        )
        .map_err(&mut note)
        .ok()
    };
    let appended = transcript_path.filter(|_| wants_transcript).and_then(|p| {
        let first = scan(p)?;
        Some(
            if block_cap_hinges_on_lag(state, event, ctx, &first, reply.as_deref()) {
                settle(first, reply.as_deref(), || scan(p))
            } else {
                first
            },
        )
    });
    if let Some(why) = refused {
        notices.push(format!("⚠ ralph: the transcript was not read: {why}"));
    }
    let tree = wants_progress
        .then(|| tree_fingerprint(project, state, appended.as_ref()))
        .flatten();
    let seen = Observation {
        now: Some(ctx.now),
        tokens_used: appended
            .as_ref()
            .map(|a| state.progress.tokens_used.saturating_add(a.tokens)),
        tree_fingerprint: tree,
        ran_tool: appended.as_ref().and_then(|a| a.ran_tool),
        block_cap: ctx.block_cap,
        verification: None::<Verification>,
        // `engine::step` reads the PRD, so `ralph run` reads it the same way.
        prd: None,
        check: None,
        stop_hook_active: event.stop_hook_active,
        // No transcript to read (not written yet at a session's first stop):
        // the reply is missing too.
        reply_missing: appended
            .as_ref()
            .is_none_or(|a| a.lacks_reply(reply.as_deref())),
        largest_reply_tokens: appended.as_ref().map_or(0, |a| a.largest_reply),
        turn_ends: appended.as_ref().map(|a| a.turn_ends),
        reply,
    };
    (seen, appended)
}

/// The cheapest signal that decides: an edit the transcript proves, then
/// (only when that cannot tell) the working tree and HEAD through one
/// `git status`. A transcript that lags the Stop event proves nothing, so
/// the tree is read: a lag can delay the breaker, never end a loop falsely.
fn tree_fingerprint(
    project: &Project,
    state: &LoopState,
    appended: Option<&transcript::Appended>,
) -> Option<String> {
    let edit_proven = appended.filter(|a| a.edit_proven).map(|a| a.end_offset);
    git::progress_fingerprint(
        &project.root,
        state.progress.tree_fingerprint.as_deref(),
        edit_proven,
    )
}

/// The longest the hook waits for Claude Code to finish writing the turn
/// into the transcript (it was written within half a second when the machine
/// was idle; on a loaded machine it lagged by two replies at times).
const TRANSCRIPT_SETTLE: Duration = Duration::from_secs(2);

/// Whether this stop would end the loop at the block cap only because the
/// transcript has not caught up: the turn's last reply is not written yet,
/// so a tool call before it may not be either.
fn block_cap_hinges_on_lag(
    state: &LoopState,
    event: &StopEvent,
    ctx: &HookContext,
    seen: &transcript::Appended,
    reply: Option<&str>,
) -> bool {
    ctx.block_cap > 0
        && event.stop_hook_active != Some(false)
        && state.progress.idle_blocks >= ctx.block_cap
        && seen.ran_tool != Some(true)
        && seen.lacks_reply(reply)
}

/// Reads the transcript again until the turn's last reply is in, for at most
/// [`TRANSCRIPT_SETTLE`]. Only the stop that would end a loop at the block
/// cap pays for this, so a loop whose turns run tools is not ended early.
fn settle(
    mut latest: transcript::Appended,
    reply: Option<&str>,
    mut rescan: impl FnMut() -> Option<transcript::Appended>,
) -> transcript::Appended {
    let deadline = Instant::now() + TRANSCRIPT_SETTLE;
    while latest.lacks_reply(reply) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(again) = rescan() {
            latest = again;
        }
    }
    latest
}

fn with_notices(answer: Answer, notices: Vec<String>) -> Answer {
    if notices.is_empty() {
        return answer;
    }
    let extra = notices.join("\n");
    match answer {
        Answer::Silent => Answer::Notice(extra),
        Answer::Notice(m) => Answer::Notice(format!("{m}\n{extra}")),
        Answer::Block { reason, status } => Answer::Block {
            reason,
            status: format!("{status}\n{extra}"),
        },
    }
}
