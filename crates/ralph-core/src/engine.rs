//! One turn of a loop, whoever drives it: the Stop hook (in-session) or
//! `ralph run` (fresh context). Given what was observed, it decides, runs
//! the verification gate if the promise asks for it, writes the state or
//! the history record, and logs the decision. Both drivers share this, so
//! both follow exactly the same rules.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::decide::{self, Decision, Observation, Outcome};
use crate::frontmatter::quote;
use crate::messages;
use crate::registry::{self, Registry};
use crate::rewrite::{self, RewriteError};
use crate::state::{LoopState, Progress};
use crate::store::{self, LoopFile, Project, ProjectLock, StoreError};
use crate::time::Timestamp;
use crate::transcript::Appended;
use crate::verify;

/// A loop as read under the project lock.
pub struct LiveLoop<'a> {
    pub file: &'a LoopFile,
    pub text: &'a str,
    pub state: &'a LoopState,
    /// Where the loop is recorded as armed; its record is removed when it ends.
    pub registry: Option<&'a Registry>,
}

/// What the driver observed for this turn.
pub struct Turn {
    pub seen: Observation,
    /// How far the transcript was read, to remember for the next turn.
    pub transcript: Option<Appended>,
    /// Who drove the turn (a session id, or `run:<pid>`), for the log.
    pub driver: String,
    /// An owner to write into the file with this turn (a claim).
    pub claim: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The loop is paused; nothing was counted.
    Passed,
    /// The loop changed on disk while the verification ran; nothing was written.
    Changed { notice: String },
    /// The loop ended and was moved into the history.
    Ended {
        outcome: Outcome,
        detail: String,
        record: PathBuf,
        notice: String,
    },
    /// The loop goes on: `reason` is the prompt with its footer.
    Continued {
        next: u64,
        reason: String,
        status: String,
        /// The promise was given but the verification command failed.
        promise_refused: bool,
        /// The guard figures after this turn.
        progress: Progress,
    },
}

/// Why a turn could not be completed. The loop file is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{path}: {source}")]
    Rewrite { path: PathBuf, source: RewriteError },
}

pub fn step(
    project: &Project,
    live: &LiveLoop<'_>,
    turn: Turn,
    now: Timestamp,
    lock: ProjectLock,
) -> Result<Step, StepError> {
    let state = live.state;
    let mut seen = turn.seen;
    // A count past what a file can hold is held at the cap (the budget
    // check and the record agree, and the record always writes back).
    seen.tokens_used = seen.tokens_used.map(|t| t.min(crate::state::MAX_TOKENS));
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
        if store::read_to_string(&live.file.path).ok().as_deref() != Some(live.text) {
            return Ok(Step::Changed {
                notice: format!(
                    "⚠ ralph `{}`: the loop changed while `{}` ran (cancelled or advanced elsewhere); this stop was allowed.",
                    crate::display::line(&live.file.name),
                    crate::display::line(command)
                ),
            });
        }
        seen.verification = Some(verdict);
        decision = decide::decide(state, &seen);
    }
    let reply = seen.reply.as_deref().unwrap_or("");
    let promise_seen = state
        .completion_promise
        .as_deref()
        .is_some_and(|p| crate::promise::speaks(reply, p));
    let mut log = json!({
        "time": now.to_string(),
        "session": turn.driver,
        "iteration": state.iteration,
        "promise_seen": promise_seen,
        "reply_excerpt": decide::excerpt(reply),
    });
    if let Some(v) = &seen.verification {
        log["verification"] = json!({"passed": v.passed, "status": v.status});
    }
    let claim = turn
        .claim
        .as_deref()
        .map(|owner| ("session_id", quote(owner)));
    let result = match decision {
        Decision::Pass | Decision::Verify { .. } => {
            // (`decide` never asks to verify twice.) Paused turns are not
            // counted: the transcript read so far is skipped on resume.
            let mut fields: Vec<(&str, String)> = claim.into_iter().collect();
            if let Some(a) = &turn.transcript {
                let mut skipped = state.progress.clone();
                skipped.transcript_offset = a.end_offset;
                skipped.last_message_id = a.last_message_id.clone();
                fields.extend(progress_fields(&state.progress, &skipped));
            }
            if !fields.is_empty() {
                write(live, &fields)?;
            }
            log["decision"] = json!("pass");
            log["why"] = json!("paused");
            Step::Passed
        }
        Decision::End { outcome, detail } => {
            let mut fields = vec![
                ("active", "false".to_owned()),
                ("outcome", outcome.as_str().to_owned()),
                ("ended_at", quote(&now.to_string())),
            ];
            fields.extend(claim);
            // The record keeps the final token count (the budget that ended it, say).
            if let Some(tokens) = seen
                .tokens_used
                .filter(|t| *t != state.progress.tokens_used)
            {
                fields.push(("tokens_used", tokens.to_string()));
                log["tokens"] = json!(tokens);
            }
            let unseen = decide::unseen_tokens(state, &seen);
            if unseen != state.progress.unseen_tokens {
                fields.push(("unseen_tokens", unseen.to_string()));
            }
            if unseen > 0 {
                log["tokens_unseen"] = json!(unseen);
            }
            write(live, &fields)?;
            log["decision"] = json!("end");
            log["outcome"] = json!(outcome.as_str());
            log["why"] = json!(detail);
            // Best effort; the hook reports a log it cannot write before the turn.
            let _ = project.append_log(&live.file.name, &log.to_string());
            let record = project.archive(live.file, now, "")?;
            if let (Some(registry), Ok(root)) = (live.registry, registry::canonical_root(project)) {
                registry.forget(&root, &live.file.name, state.nonce.as_deref());
            }
            let notice = messages::ended(
                &live.file.name,
                outcome,
                &detail,
                &record.display().to_string(),
            );
            return Ok(Step::Ended {
                outcome,
                detail,
                record,
                notice,
            });
        }
        Decision::Continue {
            next,
            mut progress,
            notes,
            notices,
        } => {
            if let Some(a) = &turn.transcript {
                progress.transcript_offset = a.end_offset;
                progress.last_message_id = a.last_message_id.clone();
            }
            let mut fields = vec![("iteration", next.to_string())];
            fields.extend(claim);
            fields.extend(progress_fields(&state.progress, &progress));
            write_turn(live, &fields)?;
            log["decision"] = json!("block");
            log["next_iteration"] = json!(next);
            log["why"] = json!(if notes.is_empty() {
                "no promise yet".to_owned()
            } else {
                notes.join(" ")
            });
            log["tokens"] = json!(progress.tokens_used);
            if progress.unseen_tokens > 0 {
                log["tokens_unseen"] = json!(progress.unseen_tokens);
            }
            log["same_reply_count"] = json!(progress.same_reply_count);
            log["no_progress_count"] = json!(progress.no_progress_count);
            log["idle_blocks"] = json!(progress.idle_blocks);
            Step::Continued {
                next,
                reason: format!(
                    "{}{}",
                    state.prompt,
                    messages::footer(
                        &live.file.name,
                        state,
                        next,
                        &footer_notes(state, &progress, notes)
                    )
                ),
                // The user sees a refused promise too, not only the model.
                status: std::iter::once(match seen.verification.as_ref().filter(|v| !v.passed) {
                    Some(v) => format!(
                        "{} · {}",
                        messages::status_line(&live.file.name, state, next),
                        messages::verify_refused_status(&v.status)
                    ),
                    None => messages::status_line(&live.file.name, state, next),
                })
                .chain(notices)
                .collect::<Vec<_>>()
                .join("\n"),
                promise_refused: seen.verification.as_ref().is_some_and(|v| !v.passed),
                progress,
            }
        }
    };
    let _ = project.append_log(&live.file.name, &log.to_string());
    drop(lock);
    Ok(result)
}

/// The footer's notes: the decision's, plus the token count when a budget
/// is set (known, and what may be missing), unless a wrap-up note says it.
fn footer_notes(state: &LoopState, progress: &Progress, mut notes: Vec<String>) -> Vec<String> {
    if let Some(limit) = state.guards.max_tokens
        && !notes.iter().any(|n| n.starts_with("Token budget"))
    {
        notes.push(format!(
            "Tokens: {} of {limit}.",
            decide::token_words(progress.tokens_used, progress.unseen_tokens)
        ));
    }
    notes
}

/// The progress fields that changed, as frontmatter values.
fn progress_fields(old: &Progress, new: &Progress) -> Vec<(&'static str, String)> {
    new.changed_fields(old)
}

/// Writes the fields, or refuses (and writes nothing) when the rewrite does
/// not read back exactly as intended.
fn write(live: &LiveLoop<'_>, fields: &[(&str, String)]) -> Result<(), StepError> {
    Ok(store::write_atomic(
        &live.file.path,
        &rewritten(live, fields)?,
    )?)
}

/// [`write`] for a turn that goes on: the counters need not survive a power
/// cut, so the file is replaced without an fsync (see `store::write_turn`).
fn write_turn(live: &LiveLoop<'_>, fields: &[(&str, String)]) -> Result<(), StepError> {
    Ok(store::write_turn(
        &live.file.path,
        &rewritten(live, fields)?,
    )?)
}

fn rewritten(live: &LiveLoop<'_>, fields: &[(&str, String)]) -> Result<String, StepError> {
    rewrite::set_fields(live.text, fields).map_err(|source| StepError::Rewrite {
        path: live.file.path.clone(),
        source,
    })
}
