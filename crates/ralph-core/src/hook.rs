//! The Stop hook from end to end, as one straight line:
//! stdin → event → locate loop → lock → read state → last reply → decide →
//! write state / history / log → answer.
//!
//! Every failure ends in an answer that lets the session stop and says why;
//! nothing here panics or exits.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::answer::Answer;
use crate::decide::{self, Decision, Observation, Outcome, Verification};
use crate::event::{EventError, StopEvent};
use crate::frontmatter::{self, quote};
use crate::messages;
use crate::ownership::{self, Candidate, Selection};
use crate::state::{self, LoopState, Progress, StateError};
use crate::store::{self, LoopFile, Project, StoreError};
use crate::time::Timestamp;
use crate::{transcript, verify, worktree};

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
    state: Result<LoopState, StateError>,
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
    let mut notices = Vec::new();
    let loaded = load_loops(&project, session, ctx.now, &mut notices)?;
    let candidates: Vec<Candidate<'_>> = loaded
        .iter()
        .map(|l| {
            let state = l.state.as_ref().ok();
            Candidate {
                owner: state.and_then(|s| s.session_id.as_deref()),
                started_at: state.and_then(|s| s.started_at),
            }
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
/// are moved aside with a notice; the rest are returned.
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
            Ok(s) => loaded.push(Loaded {
                file,
                text,
                state: Ok(s),
            }),
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
                } else {
                    loaded.push(Loaded {
                        file,
                        text,
                        state: Err(e),
                    });
                }
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
    let Ok(state) = &live.state else {
        return Ok(Answer::Silent);
    };
    let (mut seen, appended) = observe(project, state, event, ctx);
    let mut decision = decide::decide(state, &seen);
    let mut lock = Some(lock);
    if let Decision::Verify { command } = &decision {
        // The gate may run for minutes: let other ralph processes work
        // meanwhile, then make sure the loop is still the one we judged.
        drop(lock.take());
        let verdict = verify::run(
            command,
            &project.root,
            Duration::from_secs(state.guards.verify_timeout_secs),
        );
        lock = Some(project.lock()?);
        if store::read_to_string(&live.file.path).ok().as_deref() != Some(live.text.as_str()) {
            return Ok(Answer::Notice(format!(
                "⚠ ralph `{}`: the loop changed while `{command}` ran (cancelled or advanced elsewhere); this stop was allowed.",
                live.file.name
            )));
        }
        seen.verification = Some(verdict);
        decision = decide::decide(state, &seen);
    }
    let promise_seen = state
        .completion_promise
        .as_deref()
        .is_some_and(|p| crate::promise::speaks(seen.reply.as_deref().unwrap_or(""), p));
    let mut log = json!({
        "time": ctx.now.to_string(),
        "session": session,
        "iteration": state.iteration,
        "promise_seen": promise_seen,
        "reply_excerpt": decide::excerpt(seen.reply.as_deref().unwrap_or("")),
    });
    if let Some(v) = &seen.verification {
        log["verification"] = json!({"passed": v.passed, "status": v.status});
    }
    let answer = match decision {
        Decision::Pass => {
            if claim {
                write(&live.file, &live.text, &[("session_id", quote(session))])?;
            }
            log["decision"] = json!("pass");
            log["why"] = json!("paused");
            Answer::Silent
        }
        Decision::Verify { .. } => Answer::Silent, // decide() never asks twice
        Decision::End { outcome, detail } => {
            let mut fields = vec![
                ("active", "false".to_owned()),
                ("outcome", outcome.as_str().to_owned()),
                ("ended_at", quote(&ctx.now.to_string())),
            ];
            if claim {
                fields.push(("session_id", quote(session)));
            }
            write(&live.file, &live.text, &fields)?;
            log["decision"] = json!("end");
            log["outcome"] = json!(outcome.as_str());
            log["why"] = json!(detail);
            project.append_log(&live.file.name, &log.to_string());
            let record = project.archive(&live.file, ctx.now, "")?;
            drop(lock);
            return Ok(Answer::Notice(messages::ended(
                &live.file.name,
                outcome,
                &detail,
                &record.display().to_string(),
            )));
        }
        Decision::Continue {
            next,
            mut progress,
            notes,
        } => {
            if let Some(a) = &appended {
                progress.transcript_offset = a.end_offset;
                progress.last_message_id = a.last_message_id.clone();
            }
            let mut fields = vec![("iteration", next.to_string())];
            if claim {
                fields.push(("session_id", quote(session)));
            }
            fields.extend(progress_fields(&state.progress, &progress));
            write(&live.file, &live.text, &fields)?;
            log["decision"] = json!("block");
            log["next_iteration"] = json!(next);
            log["why"] = json!(if notes.is_empty() {
                "no promise yet".to_owned()
            } else {
                notes.join(" ")
            });
            log["tokens"] = json!(progress.tokens_used);
            log["same_reply_count"] = json!(progress.same_reply_count);
            log["no_progress_count"] = json!(progress.no_progress_count);
            log["idle_blocks"] = json!(progress.idle_blocks);
            Answer::Block {
                reason: format!(
                    "{}{}",
                    state.prompt,
                    messages::footer(&live.file.name, state, next, &notes)
                ),
                status: messages::status_line(&live.file.name, state, next),
            }
        }
    };
    project.append_log(&live.file.name, &log.to_string());
    drop(lock);
    Ok(answer)
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
    let wants_transcript = state.guards.max_tokens.is_some() || ctx.block_cap > 0;
    let appended = transcript_path.filter(|_| wants_transcript).and_then(|p| {
        transcript::scan_appended(
            p,
            state.progress.transcript_offset,
            state.progress.last_message_id.as_deref(),
        )
        .ok()
    });
    let tree = (state.guards.no_progress_after > 0)
        .then(|| worktree::fingerprint_of(&project.root))
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

/// The progress fields that changed, as frontmatter values.
fn progress_fields(old: &Progress, new: &Progress) -> Vec<(&'static str, String)> {
    let mut fields = Vec::new();
    let mut num = |key, a: u64, b: u64| {
        if a != b {
            fields.push((key, b.to_string()));
        }
    };
    num("tokens_used", old.tokens_used, new.tokens_used);
    num(
        "transcript_offset",
        old.transcript_offset,
        new.transcript_offset,
    );
    num(
        "same_reply_count",
        old.same_reply_count,
        new.same_reply_count,
    );
    num(
        "no_progress_count",
        old.no_progress_count,
        new.no_progress_count,
    );
    num("idle_blocks", old.idle_blocks, new.idle_blocks);
    let mut text = |key, a: &Option<String>, b: &Option<String>| {
        if a != b {
            fields.push((key, quote(b.as_deref().unwrap_or(""))));
        }
    };
    text(
        "last_message_id",
        &old.last_message_id,
        &new.last_message_id,
    );
    text(
        "reply_fingerprint",
        &old.reply_fingerprint,
        &new.reply_fingerprint,
    );
    text(
        "tree_fingerprint",
        &old.tree_fingerprint,
        &new.tree_fingerprint,
    );
    fields
}

fn write(file: &LoopFile, text: &str, fields: &[(&str, String)]) -> Result<(), StoreError> {
    // The text parsed under this same lock, so its layout is known to be sound.
    let updated = frontmatter::set_fields(text, fields).unwrap_or_else(|_| text.to_owned());
    store::write_atomic(&file.path, &updated)
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
