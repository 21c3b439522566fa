//! The Stop hook from end to end, as one straight line:
//! stdin → event → locate loop → lock → read state → last reply → decide →
//! write state / history / log → answer.
//!
//! Every failure ends in an answer that lets the session stop and says why;
//! nothing here panics or exits.

pub mod answer;
pub mod host;
pub mod host_install;
pub mod install;
pub mod session;
pub mod statusline;
pub mod typed;
use std::cell::RefCell;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::decide::engine::{self, Step, Turn};
use crate::decide::{Observation, Outcome, Verification};
use crate::display;
use crate::fs::git;
use crate::hook::answer::Answer;
use crate::hook::host::Host;
use crate::loop_file::error::LoopFileError;
use crate::loop_file::lifecycle::{self, LogEntry, Logged, Loop};
use crate::loop_file::messages;
use crate::loop_file::ownership::{self, Candidate, Selection};
use crate::loop_file::registry::{self, Arming, RegistryError};
use crate::loop_file::scan::Armings;
use crate::loop_file::state::{self, LoopState};
use crate::loop_file::store::{self, LoopFile, Project, StoreError};
use crate::reply::event::{EventError, StopEvent};
use crate::reply::transcript;
use crate::time::Timestamp;

use crate::loop_file::environment::Environment;

/// Why a hook could not do its work: the Stop hook's and the session
/// hooks' (`session`). Every one ends in a notice and an allow, never a
/// blocked stop or prompt.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(transparent)]
    Event(#[from] EventError),
    /// A session hook's event (`UserPromptSubmit`, `SessionStart`, …) is empty.
    #[error("the hook event on stdin is empty")]
    SessionEmpty,
    #[error("the hook event on stdin is not valid JSON: {0}")]
    SessionJson(serde_json::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    LoopFile(#[from] LoopFileError),
}

/// Answers one Stop event. Never fails: errors become a notice and an allow.
pub fn stop(input: &[u8], ctx: &Environment) -> Answer {
    stop_for_host(input, ctx, None).answer
}

/// `stop` on an event read straight from `input` (stdin): the raw payload
/// is never held next to the parsed reply.
pub fn stop_reader(input: impl std::io::Read, ctx: &Environment) -> Answer {
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
pub fn stop_for_host(input: &[u8], ctx: &Environment, host: Option<Host>) -> HostAnswer {
    answer(StopEvent::parse(input), ctx, host)
}

/// `stop_for_host` on an event read straight from `input` (stdin).
pub fn stop_reader_for_host(
    input: impl std::io::Read,
    ctx: &Environment,
    host: Option<Host>,
) -> HostAnswer {
    answer(StopEvent::from_reader(input), ctx, host)
}

fn answer(
    parsed: Result<StopEvent, EventError>,
    ctx: &Environment,
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
    ctx: &Environment,
    host: Option<Host>,
    out: &mut HostAnswer,
) -> Result<Answer, HookError> {
    out.host = host.unwrap_or_else(|| Host::detect(&event));
    let Some(project) = ctx.locate(event.cwd.as_deref()) else {
        return Ok(Answer::Silent);
    };
    // The common case for a session without a loop: one directory read, no lock (and one
    // more when a loop's log is there: its file may have been deleted by hand).
    if project.loop_files()?.is_empty() {
        let notices = event
            .session()
            .map(|s| crate::control::vanished(&project, s, ctx.now))
            .unwrap_or_default();
        return Ok(with_notices(Answer::Silent, notices));
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
        armings: Armings::new(ctx.registry(), registry::canonical_root(&project).ok()),
        session,
        inert: RefCell::default(),
    };
    // Read-only first: a project whose loop files are all inert for this
    // session is left exactly as it is (not even the lock file is made).
    if !gate.concerns_us(&project)? {
        gate.inert_notices(&mut notices);
        return Ok(with_notices(Answer::Silent, notices));
    }
    let lock = project.lock()?;
    project.remove_stale_temps();
    let loaded = load_loops(&lock, &project, &gate, ctx.now, &mut notices)?;
    let Some((live, claim)) = choose(&loaded, &gate, session) else {
        gate.inert_notices(&mut notices);
        return Ok(with_notices(Answer::Silent, notices));
    };
    out.fresh_context = live.state.fresh_context;
    let answer = if out.host == Host::Claude {
        drive(&project, live, &gate, session, claim, &mut event, ctx, lock)?
    } else {
        // Other hosts: the reply from where that host leaves it, and no
        // block cap (only Claude Code has one).
        let mut event = out.host.normalise(&event, live.state.started_at);
        let ctx = Environment {
            block_cap: 0,
            ..ctx.clone()
        };
        drive(
            &project, live, &gate, session, claim, &mut event, &ctx, lock,
        )?
    };
    gate.inert_notices(&mut notices);
    Ok(with_notices(answer, notices))
}

/// The loop this stop drives, if any, and whether the session claims it.
/// Only loops armed here are candidates, whatever session they name: a file
/// that names this session proves nothing, since every command the agent
/// runs sees the session id. Anything else is inert and gets its notice once.
fn choose<'a>(loaded: &'a [Loop], gate: &Gate<'_>, session: &str) -> Option<(&'a Loop, bool)> {
    let mut drivable: Vec<&Loop> = Vec::new();
    for live in loaded {
        if owner_of(&live.state).is_some_and(|o| o != session) {
            continue; // another session's loop: not this stop's business
        }
        match gate.arming(live) {
            Arming::Armed => drivable.push(live),
            other => gate.note_inert(live, &other),
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
    /// The registry and the project's canonical path, as records bind it.
    armings: Armings,
    session: &'a str,
    /// The inert loop files met at this stop, told once at its end
    /// ([`Gate::inert_notices`]).
    inert: RefCell<InertFiles>,
}

/// The inert loop files met so far in a stop, each once.
#[derive(Default)]
struct InertFiles {
    seen: HashSet<PathBuf>,
    list: Vec<Inert>,
}

/// An inert loop file's notice, waiting for the end of the stop.
struct Inert {
    path: PathBuf,
    /// The file's shape as the notice marker keys it.
    digest: String,
    notice: String,
}

/// The most inert loop files named one by one in a stop; past it, one
/// summary line counts the rest, so a checkout with thousands of committed
/// loop files costs a few marker lookups per stop, not one per file.
const MAX_INERT_NOTICES: usize = 3;

impl Gate<'_> {
    fn arming(&self, live: &Loop) -> Arming {
        self.armings.arming(&live.file.name, &live.state)
    }

    /// Whether a record exists for this loop's name (a corrupt file armed here).
    fn has_record(&self, name: &str) -> bool {
        match (self.armings.registry(), self.armings.root()) {
            (Some(r), Some(root)) => r.lookup(root, name).ok().flatten().is_some(),
            _ => false,
        }
    }

    /// Whether any loop file here may be this session's to drive or to tidy
    /// (an ended or corrupt loop of this user). Reads only; the inert files
    /// are noted on the way, for their notice at the end of the stop.
    fn concerns_us(&self, project: &Project) -> Result<bool, HookError> {
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
                        other => self.note_inert(&live, &other),
                    }
                }
                Err(e) => {
                    let owner = state::scan_session_id(&text);
                    if self.has_record(&file.name) {
                        return Ok(true);
                    }
                    if owner.is_none() || owner.as_deref() == Some(self.session) {
                        self.note_corrupt(&file, &text, &e);
                    }
                }
            }
        }
        Ok(false)
    }

    /// A corrupt loop file that is nobody's and was not armed here: it is
    /// ignored, said once per session (see [`Gate::inert_notices`]).
    fn note_corrupt(&self, file: &LoopFile, text: &str, error: &state::StateError) {
        let notice = format!(
            "⚠ ralph: {} is ignored: it is not a valid loop file ({}) and was not armed by you on this machine.",
            display::line(&file.path.display().to_string()),
            display::line(&error.to_string())
        );
        self.defer(&file.path, registry::digest_text(text), notice);
    }

    fn forget(&self, name: &str, nonce: Option<&str>) {
        if let (Some(r), Some(root)) = (self.armings.registry(), self.armings.root()) {
            r.forget(root, name, nonce);
        }
    }

    /// An inert loop: its notice, told once per session in this shape (see
    /// [`Gate::inert_notices`]).
    fn note_inert(&self, live: &Loop, arming: &Arming) {
        let notice = inert_notice(&live.file.path, &live.file.name, &arming.why_not());
        self.defer(&live.file.path, registry::digest(&live.state), notice);
    }

    fn defer(&self, path: &Path, digest: String, notice: String) {
        let mut inert = self.inert.borrow_mut();
        // Met again under the lock: once is enough.
        if inert.seen.insert(path.to_owned()) {
            inert.list.push(Inert {
                path: path.to_owned(),
                digest,
                notice,
            });
        }
    }

    /// The notices of the inert loop files met at this stop, for the first
    /// time this session meets them in this shape. Up to
    /// [`MAX_INERT_NOTICES`] files, each has its own marker; past that, the
    /// first few are named and one line counts the rest, under a single
    /// marker for the whole set (so a new or changed file tells again).
    fn inert_notices(&self, notices: &mut Vec<String>) {
        let inert = self.inert.take().list;
        let first = |path: &Path, digest: &str| {
            self.armings
                .registry()
                .is_none_or(|r| r.first_notice(self.session, path, digest))
        };
        if inert.len() <= MAX_INERT_NOTICES {
            for i in inert {
                if first(&i.path, &i.digest) {
                    notices.push(i.notice);
                }
            }
            return;
        }
        let mut set = String::new();
        for i in &inert {
            set.push_str(&i.path.display().to_string());
            set.push('\0');
            set.push_str(&i.digest);
            set.push('\0');
        }
        let folder = inert[0].path.parent().unwrap_or(Path::new(".")).to_owned();
        if !first(&folder, &registry::digest_text(&set)) {
            return;
        }
        let more = inert.len() - MAX_INERT_NOTICES;
        notices.extend(inert.into_iter().take(MAX_INERT_NOTICES).map(|i| i.notice));
        notices.push(format!(
            "⚠ ralph: {more} more loop files in {} are inert too: not armed by you on this machine, so none of them runs. `ralph status` lists them all.",
            messages::escape_controls(&folder.display().to_string())
        ));
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
    lock: &store::ProjectLock,
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
                    match lifecycle::archive_as_is(lock, project, &live.file, ended, "") {
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
                    match lifecycle::archive_as_is(lock, project, &file, now, ".corrupt") {
                        Ok(record) => {
                            gate.forget(&file.name, None);
                            notices.push(format!(
                                "⚠ ralph: {}: {}. The loop stopped and the file was moved to {} so it cannot trap the session. To go on with it: fix it, move it back, then `ralph adopt --name {}` (its record was dropped, so a file put back stays inert until you adopt it); or arm a new loop with /ralph-loop.",
                                display::line(&file.path.display().to_string()),
                                display::line(&e.to_string()),
                                display::line(&record.display().to_string()),
                                display::line(&file.name)
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
                    gate.note_corrupt(&file, &text, &e);
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
    ctx: &Environment,
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
    let queued = seen.queued_message;
    // The user sees a refused promise too, not only the model.
    let refused = seen
        .verification
        .as_ref()
        .filter(|v| !v.passed)
        .map(|v| messages::verify_refused_status(state, &v.status));
    let turn = Turn {
        seen,
        transcript: appended,
        driver: session.to_owned(),
        claim: claim.then(|| session.to_owned()),
    };
    let answer = match engine::step(project, live, gate.armings.registry(), turn, ctx.now, lock)? {
        Step::Passed if queued => {
            Answer::Notice(messages::queued_goes_first(&live.file.name, state))
        }
        Step::Passed => Answer::Silent,
        Step::Waiting { notice } | Step::Changed { notice } => Answer::Notice(notice),
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
    ctx: &Environment,
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
    let reply = event.take_reply();
    let reply_from_transcript = reply.is_none();
    let reply = reply.or_else(|| {
        let path = transcript_path?;
        let offset = state.progress.transcript_offset;
        transcript::last_reply(path, offset, state.started_at)
            .map_err(&mut note)
            .ok()
            .flatten()
            .map(|r| r.text)
    });
    let wants_progress = state.guards.no_progress_after > 0;
    let wants_cost = state.guards.max_cost_usd.is_some();
    let wants_transcript =
        state.guards.max_tokens.is_some() || ctx.block_cap > 0 || wants_progress || wants_cost;
    // An active loop reads what was appended at every stop, for the user's queue if for
    // nothing else, so the offset moves on and no stop reads a part twice. Without a
    // guard that counts, a first look counts nothing (no start time: a baseline).
    let counts_from = state.started_at.filter(|_| wants_transcript);
    let mut scan = |p: &Path| {
        transcript::scan_loop(
            p,
            state.progress.transcript_offset,
            state.progress.last_message_id.as_deref(),
            counts_from,
        )
        .map_err(&mut note)
        .ok()
    };
    let scanned = transcript_path
        .filter(|_| wants_transcript || state.active)
        .and_then(|p| {
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
    // Only a guard that is on sees the figures; the offset moves on either way.
    let queued = scanned.as_ref().is_some_and(|a| a.queued > 0);
    let appended = scanned.as_ref().filter(|_| wants_transcript);
    let tree = wants_progress
        .then(|| {
            let from_event = reply.as_deref().filter(|_| !reply_from_transcript);
            tree_fingerprint(project, state, appended, from_event)
        })
        .flatten();
    let priced = appended.filter(|_| wants_cost).map(|a| price(a, notices));
    let cost_usd = priced.map(|(cost, _)| state.progress.counts.cost_usd.plus(cost));
    // What `ralph statusline` last saw of the plan's window (per user).
    let window = state
        .guards
        .max_window_pct
        .and_then(|_| ctx.registry())
        .and_then(|r| crate::loop_file::window::load(r.dir()))
        .map(|w| (w.used_now(ctx.now), w.reset_words()));
    let seen = Observation {
        largest_reply_cost: priced.map_or(crate::money::Money(0), |(_, largest)| largest),
        goal_active: appended.and_then(|a| a.goal_active),
        window,
        pending_work: event.pending_work(),
        cost_usd,
        now: Some(ctx.now),
        tokens_used: appended.map(|a| state.progress.tokens_used.saturating_add(a.tokens)),
        tree_fingerprint: tree,
        ran_tool: appended.and_then(|a| a.ran_tool),
        block_cap: ctx.block_cap,
        verification: None::<Verification>,
        // `engine::step` reads the PRD, so `ralph run` reads it the same way.
        prd: None,
        check: None,
        // `engine::step` compares the paths, as it reads the PRD.
        changed_paths: crate::decide::ChangedPaths::NotAsked,
        stop_hook_active: event.stop_hook_active,
        // No transcript to read (not written yet at a session's first stop):
        // the reply is missing too.
        reply_missing: appended.is_none_or(|a| a.lacks_reply(reply.as_deref())),
        largest_reply_tokens: appended.map_or(0, |a| a.largest_reply),
        turn_ends: appended.map(|a| a.turn_ends),
        // Only an active loop keeps a turn going, so only then can a message wait on it.
        queued_message: state.active && queued,
        reply,
    };
    (seen, scanned)
}

/// What the tokens of this stop's part of the transcript cost, by the
/// shipped price table with the user's over it. A table that cannot be read
/// and a model it does not know are told; neither makes tokens free.
/// Also the price of the largest message alone (the estimate for a reply
/// the transcript does not hold yet).
fn price(
    appended: &transcript::Appended,
    notices: &mut Vec<String>,
) -> (crate::money::Money, crate::money::Money) {
    use crate::decide::pricing::PriceTable;
    let zero = crate::money::Money(0);
    if appended.per_model.is_empty() {
        return (zero, zero);
    }
    let table = match PriceTable::load(crate::decide::pricing::user_file_from_env().as_deref()) {
        Ok(table) => table,
        Err(e) => {
            notices.push(format!(
                "⚠ ralph: {e}; ralph's own prices are used meanwhile."
            ));
            match PriceTable::shipped() {
                Ok(table) => table,
                Err(e) => {
                    notices.push(format!("⚠ ralph: {e}"));
                    return (zero, zero);
                }
            }
        }
    };
    let priced = table.price(&appended.per_model);
    for model in &priced.unknown {
        notices.push(format!(
            "⚠ ralph: no price for the model `{}`; its tokens are priced at the dearest rate known. Give its prices in {} (docs/cost.md).",
            crate::display::line(model),
            crate::decide::pricing::user_file_from_env()
                .map_or_else(
                    || "~/.config/ralph/prices.json".to_owned(),
                    |p| crate::display::line(&p.display().to_string()).into_owned()
                )
        ));
    }
    let largest = appended
        .largest_message
        .as_ref()
        .map_or(zero, |m| table.price(std::slice::from_ref(m)).cost);
    (priced.cost, largest)
}

/// The cheapest signal that decides: an edit the transcript proves, then
/// (only when that cannot tell) the working tree and HEAD through one
/// `git status`. A transcript that lags the Stop event proves nothing, so
/// the tree is read: a lag can delay the breaker, never end a loop falsely.
///
/// A turn that ran no tool at all cannot have changed the tree through the
/// agent, so it needs no `git status`: it carries the previous fingerprint,
/// which makes it a turn without progress, as it is by definition. Only
/// when that is proven: this stop's part of the transcript holds the reply
/// the Stop event carries, no line of it called, answered or announced a
/// tool, and the previous stop's transcript held its own reply (so this
/// part is this turn's, not a late one's). Anything less reads the tree.
fn tree_fingerprint(
    project: &Project,
    state: &LoopState,
    appended: Option<&transcript::Appended>,
    reply_from_event: Option<&str>,
) -> Option<String> {
    if let (Some(a), Some(previous)) = (appended, &state.progress.tree_fingerprint)
        && turn_ran_nothing(a, reply_from_event, state.progress.counts.replies_behind)
    {
        return Some(previous.clone());
    }
    let edit_proven = appended.filter(|a| a.edit_proven).map(|a| a.end_offset);
    git::progress_fingerprint(
        &project.root,
        state.progress.tree_fingerprint.as_deref(),
        edit_proven,
    )
}

/// Whether the turn provably ran no tool (see [`tree_fingerprint`]): the
/// transcript holds its reply (`reply`, from the Stop event) and nothing of
/// a tool, and was not behind at the previous stop.
fn turn_ran_nothing(
    appended: &transcript::Appended,
    reply: Option<&str>,
    replies_behind_before: u64,
) -> bool {
    let Some(reply) = reply.filter(|r| !r.trim().is_empty()) else {
        return false;
    };
    replies_behind_before == 0
        && appended.ran_tool == Some(false)
        && !appended.tool_seen
        && appended.last_text.is_some()
        && !appended.lacks_reply(Some(reply))
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
    ctx: &Environment,
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
