//! The Stop hook from end to end, as one straight line:
//! stdin → event → locate loop → lock → read state → last reply → decide →
//! write state / history / log → answer.
//!
//! Every failure ends in an answer that lets the session stop and says why;
//! nothing here panics or exits.

pub mod answer;
mod hand_off;
pub mod host;
mod observe;
mod pick;

use crate::decide::engine::{self, Step, Turn};
use crate::hook::answer::Answer;
use crate::hook::host::Host;
use crate::hook::pick::{Chosen, Pick};
use crate::reply::event::{EventError, StopEvent};
use ralph_fs::display;
use ralph_state::error::LoopFileError;
use ralph_state::messages;
use ralph_state::scan::{Armings, FirstLook};
use ralph_state::storage::environment::Environment;
use ralph_state::storage::registry::{self, RegistryError};
use ralph_state::storage::store::{DecisionLog, Listing, Project, ProjectLock, StoreError};

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
pub(crate) fn stop_for_host(input: &[u8], ctx: &Environment, host: Option<Host>) -> HostAnswer {
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
        Answer::Context { context, status } => Answer::Context {
            context,
            status: display::block(&status).into_owned(),
        },
    }
}

/// The loop this stop drives, with what the drive needs besides.
struct Drive<'a> {
    project: &'a Project,
    pick: &'a Pick<'a>,
    chosen: Chosen<'a>,
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
    // The common case for a session without a loop: one directory read, no
    // lock (and one more when a loop's log is there: its file may have been
    // deleted by hand).
    let listing = project.list()?;
    if listing.loops.is_empty() {
        let notices = event
            .session()
            .map(|s| ralph_state::lifecycle::vanished(&project, s, ctx.now))
            .unwrap_or_default();
        return Ok(with_notices(Answer::Silent, notices));
    }
    let Some(session) = event.session().map(str::to_owned) else {
        return Ok(Answer::Notice(
            "⚠ ralph: the Stop event names no session_id, so no loop was advanced (a loop is only driven by the session that owns it). Update Claude Code.".into(),
        ));
    };
    // Only now, with loop files present, is the registry consulted.
    let armings = Armings::new(ctx.registry(), registry::canonical_root(&project).ok());
    let pick = Pick::new(armings, &session);
    let mut notices = Vec::new();
    let answer = stop_with_loops(&project, listing, &pick, &mut event, ctx, out, &mut notices)?;
    pick.inert_notices(&mut notices);
    Ok(with_notices(answer, notices))
}

/// A stop in a project with loop files: the lock-free first look, and only
/// when a file concerns this session, the lock, the tidying and the turn.
fn stop_with_loops(
    project: &Project,
    listing: Listing,
    pick: &Pick<'_>,
    event: &mut StopEvent,
    ctx: &Environment,
    out: &mut HostAnswer,
    notices: &mut Vec<String>,
) -> Result<Answer, HookError> {
    // Read-only first: a project whose loop files are all inert for this
    // session is left exactly as it is (not even the lock file is made).
    let look = FirstLook::take(listing, &pick.armings, pick.session);
    if !pick.concerns_us(&look) {
        return Ok(Answer::Silent);
    }
    let (scan, lock) = look.lock(project, &pick.armings, pick.session)?.split();
    project.remove_stale_temps_listed(&lock, scan.listing());
    let entries = pick.tidy(&scan, &lock, project, ctx.now, notices);
    let Some(chosen) = pick.choose(&entries) else {
        return Ok(Answer::Silent);
    };
    out.fresh_context = chosen.live.state.fresh_context;
    let started_at = chosen.live.state.started_at;
    let drive = Drive {
        project,
        pick,
        chosen,
    };
    if out.host == Host::Claude {
        return drive.turn(event, ctx, lock);
    }
    // Other hosts: the reply from where that host leaves it, and no block
    // cap (only Claude Code has one).
    let mut event = out.host.normalise(event, started_at);
    let ctx = Environment {
        block_cap: 0,
        ..ctx.clone()
    };
    drive.turn(&mut event, &ctx, lock)
}

impl Drive<'_> {
    /// Observes, steps the loop through the engine and words its answer.
    fn turn(
        self,
        event: &mut StopEvent,
        ctx: &Environment,
        lock: ProjectLock,
    ) -> Result<Answer, HookError> {
        let Drive {
            project,
            pick,
            chosen,
        } = self;
        let live = chosen.live;
        let mut notices = Vec::new();
        let log = open_log(project, &live.file.name, &mut notices);
        let (seen, appended) = observe::observe(project, &live.state, event, ctx, &mut notices);
        let queued = seen.queued_message;
        let turn = Turn {
            seen,
            transcript: appended,
            driver: pick.session.to_owned(),
            claim: chosen.claim.then(|| pick.session.to_owned()),
            log,
        };
        let registry = pick.armings.registry();
        let (step, effects) = engine::step(project, live, registry, turn, ctx.now, lock)?;
        // The lock is let go: what the turn left to do is done now.
        effects.perform(ctx.courier);
        let answer = match step {
            Step::Passed if queued => {
                Answer::Notice(messages::queued_goes_first(&live.file.name, &live.state))
            }
            Step::Passed => Answer::Silent,
            Step::Waiting { notice } if hand_off::due(&live.state) => {
                Answer::Notice(hand_off::start_run(project, live).unwrap_or(notice))
            }
            Step::Waiting { notice } | Step::Changed { notice } | Step::Ended { notice, .. } => {
                Answer::Notice(notice)
            }
            Step::Continued { reason, status, .. } => Answer::Block { reason, status },
        };
        Ok(with_notices(answer, notices))
    }
}

/// The loop's decision log, opened once for the turn; when it cannot be,
/// the user is told and the turn goes on unlogged.
fn open_log(project: &Project, name: &str, notices: &mut Vec<String>) -> Option<DecisionLog> {
    project
        .open_log(name)
        .map_err(|problem| {
            notices.push(format!(
                "⚠ ralph `{}`: decisions are not logged: {}",
                display::line(name),
                display::line(&problem.to_string())
            ));
        })
        .ok()
}

/// The answer with the stop's notices, one line each, for the user.
fn with_notices(answer: Answer, notices: Vec<String>) -> Answer {
    if notices.is_empty() {
        return answer;
    }
    answer.with_notice(notices.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project in `tmp` with the loop `l` armed for session `s1`, and the
    /// environment a hook of that project sees.
    pub(super) fn armed(tmp: &tempfile::TempDir) -> Environment {
        ralph_state::test_support::armed_environment(tmp, 0)
    }

    fn event(session: &str, reply: &str) -> Vec<u8> {
        serde_json::json!({
            "session_id": session,
            "hook_event_name": "Stop",
            "stop_hook_active": true,
            "last_assistant_message": reply,
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn the_owning_session_is_blocked_with_its_prompt() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = armed(&tmp);
        match stop(&event("s1", "working on it"), &ctx) {
            Answer::Block { reason, status } => {
                assert!(reason.starts_with("Fix the parser"), "{reason}");
                assert!(status.contains("`l`") || status.contains('l'), "{status}");
            }
            other => panic!("not a block: {other:?}"),
        }
    }

    #[test]
    fn another_session_passes_silently_and_takes_no_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = armed(&tmp);
        let lock = tmp.path().join("p/.claude/ralph/lock");
        let _ = std::fs::remove_file(&lock);
        assert_eq!(stop(&event("s2", "hello"), &ctx), Answer::Silent);
        assert!(!lock.exists(), "the first look took the lock");
    }

    #[test]
    fn a_stop_without_a_session_id_is_told_and_allowed() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = armed(&tmp);
        let event = br#"{"hook_event_name":"Stop","last_assistant_message":"x"}"#;
        let Answer::Notice(notice) = stop(event, &ctx) else {
            panic!("no notice")
        };
        assert!(notice.contains("names no session_id"), "{notice}");
    }

    #[test]
    fn a_project_without_loop_files_is_silent_and_bad_input_a_notice() {
        let tmp = tempfile::tempdir().unwrap();
        let mut ctx = armed(&tmp);
        ctx.project_dir = Some(tmp.path().join("empty"));
        std::fs::create_dir_all(tmp.path().join("empty/.claude")).unwrap();
        assert_eq!(stop(&event("s1", "x"), &ctx), Answer::Silent);
        let Answer::Notice(notice) = stop(b"{not json", &ctx) else {
            panic!("no notice")
        };
        assert!(notice.contains("the loop was not advanced"), "{notice}");
    }

    #[test]
    fn an_unarmed_copy_is_told_once_and_never_driven() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = armed(&tmp);
        let root = tmp.path().join("p/.claude");
        let text = std::fs::read_to_string(root.join("l-loop.local.md")).unwrap();
        std::fs::remove_file(root.join("l-loop.local.md")).unwrap();
        std::fs::write(root.join("copy-loop.local.md"), text).unwrap();
        let Answer::Notice(notice) = stop(&event("s1", "x"), &ctx) else {
            panic!("no notice")
        };
        assert!(notice.contains("is not driven"), "{notice}");
        assert!(notice.contains("ralph adopt --name copy"), "{notice}");
        assert_eq!(stop(&event("s1", "x"), &ctx), Answer::Silent, "told once");
    }

    #[test]
    fn notices_join_the_answer_they_come_with() {
        let notes = || vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(with_notices(Answer::Silent, vec![]), Answer::Silent);
        assert_eq!(
            with_notices(Answer::Silent, notes()),
            Answer::Notice("a\nb".into())
        );
        assert_eq!(
            with_notices(Answer::Notice("m".into()), notes()),
            Answer::Notice("m\na\nb".into())
        );
        let block = Answer::Block {
            reason: "r".into(),
            status: "s".into(),
        };
        assert_eq!(
            with_notices(block, notes()),
            Answer::Block {
                reason: "r".into(),
                status: "s\na\nb".into()
            }
        );
    }

    #[test]
    fn what_the_user_sees_is_escaped_and_the_prompt_is_not() {
        let shown = shown_safely(Answer::Block {
            reason: "keep\u{1b}[31m".into(),
            status: "st\u{1b}[31m".into(),
        });
        let Answer::Block { reason, status } = shown else {
            panic!()
        };
        assert_eq!(reason, "keep\u{1b}[31m");
        assert!(!status.contains('\u{1b}'), "{status:?}");
    }
}
