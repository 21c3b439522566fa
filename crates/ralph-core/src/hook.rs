//! The Stop hook from end to end, as one straight line:
//! stdin → event → locate loop → lock → read state → last reply → decide →
//! write state / history / log → answer.
//!
//! Every failure ends in an answer that lets the session stop and says why;
//! nothing here panics or exits.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::answer::Answer;
use crate::decide::{Observation, Outcome, Verification};
use crate::engine::{self, LiveLoop, Step, Turn};
use crate::event::{EventError, StopEvent};
use crate::ownership::{self, Candidate, Selection};
use crate::state::{self, LoopState};
use crate::store::{self, LoopFile, Project, StoreError};
use crate::time::Timestamp;
use crate::{transcript, worktree};

/// What the hook takes from its environment, gathered once by the caller.
#[derive(Debug, Clone)]
pub struct HookContext {
    pub project_dir: Option<PathBuf>,
    pub process_cwd: Option<PathBuf>,
    pub home: Option<PathBuf>,
    /// `CLAUDE_CODE_STOP_HOOK_BLOCK_CAP` (default 8; 0 disables the cap).
    pub block_cap: u64,
    pub now: Timestamp,
}

/// Claude Code's default consecutive-block cap.
pub const DEFAULT_BLOCK_CAP: u64 = 8;

impl HookContext {
    pub fn from_env() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Self {
            project_dir: var("CLAUDE_PROJECT_DIR"),
            process_cwd: std::env::current_dir().ok(),
            home: var("HOME"),
            block_cap: std::env::var("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_BLOCK_CAP),
            now: Timestamp::now(),
        }
    }

    pub fn locate(&self, session_cwd: Option<&Path>) -> Option<Project> {
        let starts: Vec<&Path> = session_cwd
            .into_iter()
            .chain(self.process_cwd.as_deref())
            .collect();
        store::locate_project(self.project_dir.as_deref(), &starts, self.home.as_deref())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(transparent)]
    Event(#[from] EventError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Answers one Stop event. Never fails: errors become a notice and an allow.
pub fn stop(input: &[u8], ctx: &HookContext) -> Answer {
    match run(input, ctx) {
        Ok(answer) => answer,
        Err(e) => Answer::Notice(format!(
            "⚠ ralph: {e}. The stop was allowed; the loop was not advanced."
        )),
    }
}

/// A loop file as read under the lock.
struct Loaded {
    file: LoopFile,
    text: String,
    state: LoopState,
}

fn run(input: &[u8], ctx: &HookContext) -> Result<Answer, HookError> {
    let event = StopEvent::parse(input)?;
    let Some(project) = ctx.locate(event.cwd.as_deref()) else {
        return Ok(Answer::Silent);
    };
    // The common case for a session without a loop: one directory read, no lock.
    if project.loop_files()?.is_empty() {
        return Ok(Answer::Silent);
    }
    let Some(session) = event.session() else {
        return Ok(Answer::Notice(
            "⚠ ralph: the Stop event names no session_id, so no loop was advanced (a loop is only driven by the session that owns it). Update Claude Code.".into(),
        ));
    };
    let lock = project.lock()?;
    project.remove_stale_temps();
    let mut notices = Vec::new();
    let loaded = load_loops(&project, session, ctx.now, &mut notices)?;
    let candidates: Vec<Candidate<'_>> = loaded
        .iter()
        .map(|l| Candidate {
            owner: l.state.session_id.as_deref(),
            started_at: l.state.started_at,
        })
        .collect();
    let answer = match ownership::select(session, &candidates) {
        Selection::None => Answer::Silent,
        Selection::Owned(i) => drive(&project, &loaded[i], session, false, &event, ctx, lock)?,
        Selection::Claim(i) => drive(&project, &loaded[i], session, true, &event, ctx, lock)?,
    };
    Ok(with_notices(answer, notices))
}

/// Reads every loop file under the lock. Files that ended but were not yet
/// moved are moved now; corrupt files that are (or may be) this session's
/// are moved aside with a notice; other sessions' corrupt files are left
/// alone; the valid loops are returned.
fn load_loops(
    project: &Project,
    session: &str,
    now: Timestamp,
    notices: &mut Vec<String>,
) -> Result<Vec<Loaded>, HookError> {
    let mut loaded = Vec::new();
    for file in project.loop_files()? {
        let text = match store::read_to_string(&file.path) {
            Ok(t) => t,
            Err(e) => {
                notices.push(format!("⚠ ralph: {e}"));
                continue;
            }
        };
        match LoopState::parse(&text) {
            Ok(s) if s.outcome.is_some() => {
                let ended = s.ended_at.unwrap_or(now);
                project.archive(&file, ended, "")?;
            }
            Ok(state) => loaded.push(Loaded { file, text, state }),
            Err(e) => {
                let owner = state::scan_session_id(&text);
                let ours = owner.as_deref().is_none_or(|o| o == session);
                if ours {
                    let record = project.archive(&file, now, ".corrupt")?;
                    notices.push(format!(
                        "⚠ ralph: {}: {e}. The loop stopped and the file was moved to {} so it cannot trap the session; fix it and move it back, or arm a new loop with /ralph-loop.",
                        file.path.display(),
                        record.display()
                    ));
                    project.append_log(&file.name, &json!({"time": now.to_string(), "session": session, "decision": "end", "outcome": Outcome::Corrupt.as_str(), "why": e.to_string()}).to_string());
                }
                // Another session's broken file is its own business: never
                // a candidate here, and left exactly as it is.
            }
        }
    }
    Ok(loaded)
}

fn drive(
    project: &Project,
    live: &Loaded,
    session: &str,
    claim: bool,
    event: &StopEvent,
    ctx: &HookContext,
    lock: store::ProjectLock,
) -> Result<Answer, HookError> {
    let state = &live.state;
    let (seen, appended) = observe(project, state, event, ctx);
    let turn = Turn {
        seen,
        transcript: appended,
        driver: session.to_owned(),
        claim: claim.then(|| session.to_owned()),
    };
    let current = LiveLoop {
        file: &live.file,
        text: &live.text,
        state,
    };
    Ok(
        match engine::step(project, &current, turn, ctx.now, lock)? {
            Step::Passed => Answer::Silent,
            Step::Changed { notice } => Answer::Notice(notice),
            Step::Ended { notice, .. } => Answer::Notice(notice),
            Step::Continued { reason, status, .. } => Answer::Block { reason, status },
        },
    )
}

/// Gathers what the decision needs: the reply, and the guard figures that
/// are switched on (each costs a read or a process, so none runs unasked).
fn observe(
    project: &Project,
    state: &LoopState,
    event: &StopEvent,
    ctx: &HookContext,
) -> (Observation, Option<transcript::Appended>) {
    let transcript_path = event
        .transcript_path
        .as_deref()
        .filter(|p| !p.as_os_str().is_empty());
    let reply = event.reply_in_payload().or_else(|| {
        let path = transcript_path?;
        let offset = state.progress.transcript_offset;
        transcript::last_reply(path, offset, state.started_at)
            .ok()
            .flatten()
            .map(|r| r.text)
    });
    let wants_progress = state.guards.no_progress_after > 0;
    let wants_transcript = state.guards.max_tokens.is_some() || ctx.block_cap > 0 || wants_progress;
    let appended = transcript_path.filter(|_| wants_transcript).and_then(|p| {
        transcript::scan_appended(
            p,
            state.progress.transcript_offset,
            state.progress.last_message_id.as_deref(),
        )
        .ok()
    });
    // The cheapest signal that decides: an edit the transcript proves, then
    // HEAD and the index, then (only when those cannot tell) the working
    // tree. A transcript that lags the Stop event proves nothing, so the
    // tree is read: a lag can delay the breaker, never end a loop falsely.
    let tree = wants_progress
        .then(|| {
            let edit_proven = appended
                .as_ref()
                .filter(|a| a.edit_proven)
                .map(|a| a.end_offset);
            worktree::progress_fingerprint(
                &project.root,
                state.progress.tree_fingerprint.as_deref(),
                edit_proven,
            )
        })
        .flatten();
    let seen = Observation {
        reply,
        now: Some(ctx.now),
        tokens_used: appended
            .as_ref()
            .map(|a| state.progress.tokens_used + a.tokens),
        tree_fingerprint: tree,
        ran_tool: appended.as_ref().and_then(|a| a.ran_tool),
        block_cap: ctx.block_cap,
        verification: None::<Verification>,
    };
    (seen, appended)
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
