//! A loop's life on disk, in one place: a [`Loop`] read under the project
//! lock, its proven rewrites, its end (outcome written, file and decision
//! log moved into the history, registry record forgotten), adoption, the
//! hand-over between drivers, and the one typed line of its decision log.
//! The hook, `ralph run` and the CLI go through this module; none of them
//! writes a loop file itself.
//!
//! Every write here takes the project's [`ProjectLock`] by reference: the
//! guard can only come from `Project::lock`, so a write made without the lock
//! held does not compile, and the borrow keeps the guard alive until the
//! write is done. With the guard, a pause compiles:
//!
//! ```
//! use ralph_state::{lifecycle::Loop, storage::store::Project};
//! fn pause(project: &Project, live: &Loop) -> Result<(), Box<dyn std::error::Error>> {
//!     let lock = project.lock()?;
//!     live.write(&lock, &[("active", "false".to_owned())])?;
//!     Ok(())
//! }
//! ```
//!
//! and the same write without it is refused by the compiler (both run with
//! the crate's tests, `cargo test -p ralph-loop-state`):
//!
//! ```compile_fail
//! use ralph_state::{lifecycle::Loop, storage::store::Project};
//! fn pause(project: &Project, live: &Loop) -> Result<(), Box<dyn std::error::Error>> {
//!     live.write(&[("active", "false".to_owned())])?;
//!     Ok(())
//! }
//! ```

use std::path::PathBuf;

use serde::Serialize;

use crate::error::LoopFileError;
use crate::fields::frontmatter::quote;
use crate::fields::outcome::Outcome;
use crate::fields::state::LoopState;
use crate::rewrite;
use crate::storage::registry::{self, Registry};
use crate::storage::store::{self, DecisionLog, LoopFile, Project, ProjectLock, StoreError};
use crate::time::Timestamp;
use ralph_fs::gate::Verification;

/// A live loop as read under the project lock: its file, the text read and
/// the state parsed from that text.
#[derive(Debug, Clone)]
pub struct Loop {
    pub file: LoopFile,
    pub text: String,
    pub state: LoopState,
}

/// What a line of the decision log says was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Logged {
    Pass,
    Block,
    End,
    Pause,
    Resume,
    Adopt,
    /// The session hooks' entries (`session.rs`).
    Prompt,
    Handover,
    /// What became of a notification of the loop's end (`notify.rs`).
    Notify,
    /// An API error ended a turn (`StopFailure`): logged; a limit also pauses.
    #[serde(rename = "api_error")]
    ApiError,
    /// `ralph run` gave a fresh prompt the guidance `ralph say` queued.
    Guidance,
    /// The client compacted the context (`PostCompact`): what the agent
    /// knew before is a summary from here on.
    Compact,
    /// `ralph run --sandbox` took a `.git` the agent made in the work tree out
    /// of the project (`ralph_run::sandbox::nested_git`).
    Quarantine,
}

/// One line of a loop's decision log (`.claude/ralph/logs/<name>.jsonl`).
/// Every writer fills this; it is serialized only in [`LogEntry::line`].
/// `ralph log` and `ralph status` read `time`, `decision`, `outcome`,
/// `iteration`, `session` and `why`.
#[derive(Debug, Clone, Serialize)]
pub struct LogEntry {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promise_seen: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_excerpt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationEntry>,
    /// The `--check` command's result at this stop, with its failure count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<VerificationEntry>,
    /// A `--prd` loop's story commands that ran at this stop, as one verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stories: Option<VerificationEntry>,
    pub decision: Logged,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "outcome_word"
    )]
    pub outcome: Option<Outcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_iteration: Option<u64>,
    pub why: String,
    /// A pause's cause, as the session hooks log it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The owner a loop was handed over from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_unseen: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_reply_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_progress_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_blocks: Option<u64>,
    /// What the loop spent so far, in dollars (with a dollar budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<crate::money::Money>,
    /// The guidance (`ralph say`) the prompt of `next_iteration` (or, for a
    /// `guidance` line, of `iteration`) carried, `--gate`'s marked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guidance: Option<Vec<GuidanceEntry>>,
    /// The question the agent asked, when this stop paused for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The context the last request sent (input + cache creation + cache
    /// read), when the transcript told it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// The session's context window, when the status line reported it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// `context_tokens` as a whole percent of `context_window`, rounded up;
    /// absent when the window is unknown (never a guessed one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_percent: Option<u64>,
    /// A compaction (`compact` lines): `manual` or `auto`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
}

/// One guidance as a log line records it.
#[derive(Debug, Clone, Serialize)]
pub struct GuidanceEntry {
    pub text: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gate: bool,
}

/// The verification gate's verdict as logged (its output is not).
#[derive(Debug, Clone, Serialize)]
pub struct VerificationEntry {
    pub passed: bool,
    pub status: String,
    /// The failure count a test runner reported, when recognised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failures: Option<u64>,
    /// The exit code, when the command exited (not killed at its time limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The output's last lines ([`TAIL_LINES`]), for `ralph watch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail: Option<String>,
}

/// The lines of a gate's output a log line keeps.
pub const TAIL_LINES: usize = 5;

impl From<&Verification> for VerificationEntry {
    fn from(v: &Verification) -> Self {
        Self {
            passed: v.passed,
            status: v.status.clone(),
            failures: v.failures,
            exit_code: v.exit_code,
            tail: {
                let lines: Vec<&str> = v.output_tail.trim_end().lines().collect();
                let kept = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
                (!kept.is_empty()).then_some(kept)
            },
        }
    }
}

fn outcome_word<S: serde::Serializer>(o: &Option<Outcome>, s: S) -> Result<S::Ok, S::Error> {
    match o {
        Some(o) => s.serialize_str(o.as_str()),
        None => s.serialize_none(),
    }
}

impl LogEntry {
    /// An entry with only the fields every line has.
    pub fn new(now: Timestamp, decision: Logged, why: impl Into<String>) -> Self {
        Self {
            time: now.to_string(),
            session: None,
            iteration: None,
            promise_seen: None,
            reply_excerpt: None,
            verification: None,
            check: None,
            stories: None,
            decision,
            outcome: None,
            next_iteration: None,
            why: why.into(),
            reason: None,
            from: None,
            tokens: None,
            tokens_unseen: None,
            same_reply_count: None,
            no_progress_count: None,
            idle_blocks: None,
            cost_usd: None,
            guidance: None,
            question: None,
            context_tokens: None,
            context_window: None,
            context_percent: None,
            trigger: None,
        }
    }

    /// The context fill, when measured.
    pub fn context(mut self, fill: Option<crate::context::Fill>) -> Self {
        if let Some(fill) = fill {
            self.context_tokens = Some(fill.tokens);
            self.context_window = fill.window;
            self.context_percent = fill.percent();
        }
        self
    }

    pub fn session(mut self, session: &str) -> Self {
        self.session = Some(session.to_owned());
        self
    }

    pub fn iteration(mut self, iteration: u64) -> Self {
        self.iteration = Some(iteration);
        self
    }

    pub fn outcome(mut self, outcome: Outcome) -> Self {
        self.outcome = Some(outcome);
        self
    }

    /// The JSON line, without its newline.
    pub fn line(&self) -> String {
        // A struct of strings, numbers and booleans always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Appends the entry to the decision log of `name`. Best effort: a log
    /// that cannot be written never costs the user their loop (the hook
    /// reports an unwritable log before the turn).
    pub fn append(&self, project: &Project, name: &str) {
        let _ = project.append_log(name, &self.line());
    }

    /// [`LogEntry::append`] through `log` when the turn opened it already.
    pub fn append_via(&self, log: Option<&mut DecisionLog>, project: &Project, name: &str) {
        match log {
            Some(log) => {
                let _ = log.append_line(&self.line());
            }
            None => self.append(project, name),
        }
    }
}

/// The fields that mark a loop as ended.
fn end_fields(outcome: Outcome, now: Timestamp) -> Vec<(&'static str, String)> {
    vec![
        ("active", "false".to_owned()),
        ("outcome", outcome.as_str().to_owned()),
        ("ended_at", quote(&now.to_string())),
    ]
}

/// Moves an ended loop file and its log into the history and forgets its
/// registry record. Returns the record's path.
fn archive_and_forget(
    project: &Project,
    registry: Option<&Registry>,
    file: &LoopFile,
    nonce: Option<&str>,
    now: Timestamp,
) -> Result<PathBuf, StoreError> {
    let record = project.archive(file, now, "")?;
    if let (Some(registry), Ok(root)) = (registry, registry::canonical_root(project)) {
        registry.forget(&root, &file.name, nonce);
    }
    Ok(record)
}

/// How and when a loop ends, and the sentence that says why.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    pub outcome: Outcome,
    pub why: &'a str,
    pub now: Timestamp,
}

/// Ends a loop file whose state may not parse (the CLI's cancel): the
/// outcome is written when the file can be rewritten, else it is moved as
/// it is; then logged, archived and forgotten. Returns the record's path,
/// and what to tell once the lock is let go.
pub fn end_file(
    _lock: &ProjectLock,
    project: &Project,
    registry: Option<&Registry>,
    file: &LoopFile,
    text: &str,
    state: Option<&LoopState>,
    ending: Ending<'_>,
) -> Result<(PathBuf, Option<Tell>), StoreError> {
    let Ending { outcome, why, now } = ending;
    if let Ok(updated) = rewrite::set_fields(&file.path, text, &end_fields(outcome, now))
        && state.is_some()
    {
        store::write_atomic(&file.path, &updated)?;
    }
    let iteration = state.map_or(0, |s| s.iteration);
    LogEntry::new(now, Logged::End, why)
        .iteration(iteration)
        .outcome(outcome)
        .append(project, &file.name);
    let record = archive_and_forget(
        project,
        registry,
        file,
        state.and_then(|s| s.nonce.as_deref()),
        now,
    )?;
    let tell = state.and_then(|state| Tell::of(project, &file.name, state, ending, &record));
    Ok((record, tell))
}

/// A loop's last word, as its file asks for it (`notify`, `notify_url`):
/// what ending a loop leaves to tell, sent by whoever ended it once the
/// project's lock is let go ([`Tell::send`]), never under it.
#[must_use = "a loop's last word is sent by whoever ended it, after the lock"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tell {
    settings: crate::fields::notice::Settings,
    notice: crate::fields::notice::EndNotice,
    /// The ended loop's decision log, in the history: where each delivery is logged.
    log: PathBuf,
}

impl Tell {
    /// What to tell of the loop `name` that ended as `ending`, its record at
    /// `record`; `None` when its file asks for no notification.
    fn of(
        project: &Project,
        name: &str,
        state: &LoopState,
        ending: Ending<'_>,
        record: &std::path::Path,
    ) -> Option<Self> {
        if !state.notify.any() {
            return None;
        }
        let stem = record
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let log = record.with_file_name(format!("{stem}.log.jsonl"));
        let notice = crate::fields::notice::EndNotice {
            loop_name: name.to_owned(),
            project: project.root.display().to_string(),
            outcome: ending.outcome,
            why: ending.why.to_owned(),
            iterations: state.iteration,
            cost: crate::fields::notice::logged_cost(&log),
        };
        Some(Self {
            settings: state.notify.clone(),
            notice,
            log,
        })
    }

    /// Tells it through `courier` (`None`: each channel is logged as not
    /// sent) and logs what became of each channel beside the record. Never
    /// fails and never takes longer than the courier's budget.
    pub fn send(self, courier: Option<crate::fields::notice::Courier>) {
        use crate::fields::notice::Delivery;
        let deliveries = match courier {
            Some(courier) => courier(&self.settings, &self.notice),
            None => crate::fields::notice::undelivered(&self.settings),
        };
        for (channel, delivery) in deliveries {
            let words = match delivery {
                Delivery::Posted(status) => format!("{channel}: posted (HTTP {status})"),
                Delivery::HandedOff(program) => format!("{channel}: handed to {program}"),
                Delivery::Failed(why) => format!("{channel}: failed: {why}"),
            };
            let line = LogEntry::new(Timestamp::now(), Logged::Notify, words).line();
            // Best effort, like every log line; never through a link.
            let _ = ralph_fs::safe_fs::append(&self.log, format!("{line}\n").as_bytes());
        }
    }
}

/// Writes a newly armed loop's file (the caller has proven it reads back).
pub fn create(_lock: &ProjectLock, path: &std::path::Path, text: &str) -> Result<(), StoreError> {
    store::write_atomic(path, text)
}

/// Moves a loop file into the history as it is (`suffix` is `.corrupt` for
/// a file that does not parse), under the time it ended.
pub fn archive_as_is(
    _lock: &ProjectLock,
    project: &Project,
    file: &LoopFile,
    ended: Timestamp,
    suffix: &str,
) -> Result<PathBuf, StoreError> {
    project.archive(file, ended, suffix)
}

/// `text` (the file's text as read) with `fields` set, proven to read back
/// as intended.
fn rewritten(
    file: &LoopFile,
    text: &str,
    fields: &[(&str, String)],
) -> Result<String, LoopFileError> {
    rewrite::set_fields(&file.path, text, fields)
}

/// [`Loop::write`] for a loop file read as `text` under the lock the caller
/// holds (the session hooks, which read every live loop at once): writes
/// `fields`, or refuses and writes nothing.
pub(crate) fn write_fields(
    _lock: &ProjectLock,
    file: &LoopFile,
    text: &str,
    fields: &[(&str, String)],
) -> Result<(), LoopFileError> {
    let updated = rewritten(file, text, fields)?;
    Ok(store::write_atomic(&file.path, &updated)?)
}

impl Loop {
    /// Reads `file` under the lock the caller holds: `None` when it is gone.
    pub fn load(_lock: &ProjectLock, file: LoopFile) -> Result<Option<Self>, LoopFileError> {
        if ralph_fs::safe_fs::kind_at(&file.path).is_none() {
            return Ok(None);
        }
        let text = store::read_to_string(&file.path)?;
        let state = LoopState::parse(&text).map_err(|source| LoopFileError::Parse {
            path: file.path.clone(),
            source,
        })?;
        Ok(Some(Self { file, text, state }))
    }

    /// The file's text with `fields` set, proven to read back as intended.
    fn rewritten(&self, fields: &[(&str, String)]) -> Result<String, LoopFileError> {
        rewritten(&self.file, &self.text, fields)
    }

    /// Writes `fields` into the file, or refuses (and writes nothing) when
    /// the rewrite does not read back exactly as intended.
    pub fn write(
        &self,
        lock: &ProjectLock,
        fields: &[(&str, String)],
    ) -> Result<(), LoopFileError> {
        write_fields(lock, &self.file, &self.text, fields)
    }

    /// [`Loop::write`] for a turn that goes on: the counters need not survive
    /// a power cut, so the file is replaced without an fsync (see
    /// `store::write_turn`); still whole, old or new, for every reader.
    pub fn write_turn(
        &self,
        _lock: &ProjectLock,
        fields: &[(&str, String)],
    ) -> Result<(), LoopFileError> {
        let updated = self.rewritten(fields)?;
        Ok(store::write_turn(&self.file.path, &updated)?)
    }

    /// Ends the loop as `outcome`: writes it (with `extra` fields, such as
    /// the final token count), logs `entry` (its `why` is the reason given),
    /// moves the file and its log into the history and forgets its registry
    /// record. Returns the record's path, the sentence that says why it
    /// ended, and what to tell once the lock is let go.
    #[allow(clippy::too_many_arguments)]
    pub fn end(
        &self,
        lock: &ProjectLock,
        project: &Project,
        registry: Option<&Registry>,
        outcome: Outcome,
        mut entry: LogEntry,
        extra: Vec<(&'static str, String)>,
        now: Timestamp,
    ) -> Result<(PathBuf, String, Option<Tell>), LoopFileError> {
        entry.decision = Logged::End;
        entry.outcome = Some(outcome);
        let mut fields = end_fields(outcome, now);
        fields.extend(extra);
        self.write(lock, &fields)?;
        entry.append(project, &self.file.name);
        let record = archive_and_forget(
            project,
            registry,
            &self.file,
            self.state.nonce.as_deref(),
            now,
        )?;
        let notice = crate::messages::ended(
            &self.file.name,
            outcome,
            &entry.why,
            &record.display().to_string(),
        );
        let ending = Ending {
            outcome,
            why: &entry.why,
            now,
        };
        let tell = Tell::of(project, &self.file.name, &self.state, ending, &record);
        Ok((record, notice, tell))
    }

    /// Writes a new nonce into the file and records the loop as armed on
    /// this machine (an adoption). The new loop is returned; `refused`
    /// explains a nonce that would not read back.
    pub fn adopt(
        &self,
        _lock: &ProjectLock,
        registry: &Registry,
        root: &std::path::Path,
        now: Timestamp,
    ) -> Result<Self, LoopFileError> {
        let nonce = registry::new_nonce()?;
        let text = self.rewritten(&[(registry::NONCE_FIELD, quote(&nonce))])?;
        let state = LoopState::parse(&text).map_err(|source| LoopFileError::Parse {
            path: self.file.path.clone(),
            source,
        })?;
        if state.nonce.as_deref() != Some(nonce.as_str()) {
            return Err(LoopFileError::NonceLost {
                path: self.file.path.clone(),
            });
        }
        registry.record(root, &self.file.name, &nonce, &state, now)?;
        store::write_atomic(&self.file.path, &text)?;
        Ok(Self {
            file: self.file.clone(),
            text,
            state,
        })
    }

    /// After ralph itself wrote `fields` into this loop (as read, under the
    /// lock): when one of them is bound to the arming (a counter missing
    /// from `registry::BOOKKEEPING`), the record follows the write, so ralph's
    /// own rewrite never makes its loop inert. Only a loop whose record
    /// matched as read is re-recorded, so this never arms a loop. Best
    /// effort: a record that cannot be written leaves the loop inert, with
    /// the usual notice at the next stop.
    pub fn keep_armed(
        &self,
        _lock: &ProjectLock,
        registry: Option<&Registry>,
        project: &Project,
        fields: &[(&str, String)],
        now: Timestamp,
    ) {
        if fields.iter().all(|(field, _)| !registry::is_bound(field)) {
            return; // the common case: nothing bound changed, nothing to do
        }
        let Some(registry) = registry else { return };
        let Ok(root) = registry::canonical_root(project) else {
            return;
        };
        if registry::arming(Some(registry), Some(&root), &self.file.name, &self.state)
            != registry::Arming::Armed
        {
            return;
        }
        let (Ok(text), Some(nonce)) = (self.rewritten(fields), self.state.nonce.as_deref()) else {
            return;
        };
        if let Ok(state) = LoopState::parse(&text) {
            let _ = registry.record(&root, &self.file.name, nonce, &state, now);
        }
    }

    /// Makes `owner` the loop's driver (`ralph run` taking over).
    pub fn set_owner(&self, lock: &ProjectLock, owner: &str) -> Result<(), LoopFileError> {
        self.write(
            lock,
            &[("session_id", crate::fields::frontmatter::scalar(owner))],
        )
    }

    /// Gives the loop back to `owner` (none: the first session that stops
    /// claims it), if `driver` still drives it; otherwise leaves it alone.
    pub fn hand_back(
        &self,
        lock: &ProjectLock,
        driver: &str,
        owner: Option<&str>,
    ) -> Result<(), LoopFileError> {
        if self.state.session_id.as_deref() != Some(driver) {
            return Ok(());
        }
        let value = owner.map_or_else(|| "\"\"".to_owned(), crate::fields::frontmatter::scalar);
        self.write(lock, &[("session_id", value)])
    }
}

/// A loop of `session` whose file was deleted by hand (outside ralph) while it was live: its
/// decision log is still in `.claude/ralph/logs/`. The log gets an entry saying so and moves
/// into the history (so `ralph log` keeps it), and the user is told once. Loops of other
/// sessions are left alone.
pub fn vanished(project: &Project, session: &str, now: Timestamp) -> Vec<String> {
    let mut notices = Vec::new();
    for name in project.logs_without_loop() {
        let last = crate::storage::store::read_log_tail(&project.log_path(&name), 1);
        let Some(last) = last.first() else { continue };
        // A log whose last word is an ending belongs to a loop that ended (a corrupt file
        // moved aside, say): nothing vanished.
        if last["session"].as_str() != Some(session) || last["decision"] == "end" {
            continue;
        }
        let Ok(_lock) = project.lock() else { continue };
        // Under the lock: armed again meanwhile means nothing vanished.
        if ralph_fs::safe_fs::kind_at(&project.loop_path(&name)).is_some() {
            continue;
        }
        let why = format!(
            "the loop file .claude/{name}-loop.local.md was deleted outside ralph (no ralph command ended it: recorded as tampered); the loop no longer runs"
        );
        LogEntry::new(now, Logged::End, &why)
            .session(session)
            .outcome(Outcome::Tampered)
            .append(project, &name);
        let kept = project.archive_orphan_log(&name, now).map_or_else(
            |e| format!("its decision log could not be moved: {e}"),
            |p| {
                format!(
                    "its decision log is kept: `ralph log --name {name}` ({})",
                    p.display()
                )
            },
        );
        notices.push(crate::messages::printable(&format!(
            "⚠ ralph `{name}`: {why}, so this session is no longer looped; {kept}. Arm a new one with /ralph-loop."
        )));
    }
    notices
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_keep_the_keys_readers_use_and_skip_the_empty_ones() {
        let line = LogEntry::new(Timestamp(0), Logged::End, "cancelled by the user")
            .iteration(3)
            .outcome(Outcome::Cancelled)
            .line();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["decision"], "end");
        assert_eq!(v["outcome"], "cancelled");
        assert_eq!(v["iteration"], 3);
        assert_eq!(v["why"], "cancelled by the user");
        assert!(v["time"].as_str().is_some());
        assert!(v.get("session").is_none() && v.get("tokens").is_none());
        let paused = LogEntry::new(Timestamp(0), Logged::Pause, "paused by the user").line();
        assert!(paused.contains("\"decision\":\"pause\""), "{paused}");
        assert!(!paused.contains("outcome"), "{paused}");
    }

    fn armed(owner: &str) -> (tempfile::TempDir, Project, Registry, Loop) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("p/.claude")).unwrap();
        let project = Project {
            root: tmp.path().join("p"),
        };
        let registry = registry::locate(Some(&tmp.path().join("state")), None).unwrap();
        crate::test_support::arm_plain(&project, &registry, "l", Some(owner), 5);
        let file = LoopFile {
            name: "l".into(),
            path: project.loop_path("l"),
        };
        let live = Loop::load(&project.lock().unwrap(), file).unwrap().unwrap();
        (tmp, project, registry, live)
    }

    #[test]
    fn end_writes_the_outcome_logs_once_and_moves_file_and_log_into_the_history() {
        let (_tmp, project, registry, live) = armed("s1");
        let lock = project.lock().unwrap();
        let entry =
            LogEntry::new(Timestamp(5), Logged::End, "the agent gave the promise").iteration(1);
        let (record, notice, tell) = live
            .end(
                &lock,
                &project,
                Some(&registry),
                Outcome::Completed,
                entry,
                Vec::new(),
                Timestamp(5),
            )
            .unwrap();
        assert!(!live.file.path.exists());
        assert_eq!(
            tell, None,
            "a loop that asks for no notification has nothing to tell"
        );
        let text = std::fs::read_to_string(&record).unwrap();
        assert!(text.contains("\noutcome: completed\n"), "{text}");
        assert!(!LoopState::parse(&text).unwrap().active);
        let log = record.with_file_name(
            record.file_stem().unwrap().to_str().unwrap().to_owned() + ".log.jsonl",
        );
        let lines = std::fs::read_to_string(log).unwrap();
        assert_eq!(lines.lines().count(), 1, "{lines}");
        assert!(lines.contains("\"outcome\":\"completed\""), "{lines}");
        assert!(notice.contains("completed"), "{notice}");
        assert!(Loop::load(&lock, live.file.clone()).unwrap().is_none());
    }

    #[test]
    fn ralphs_own_write_of_a_bound_field_keeps_the_loop_armed_and_never_arms_one() {
        let (_tmp, project, registry, live) = armed("s1");
        let lock = project.lock().unwrap();
        let root = registry::canonical_root(&project).unwrap();
        // A field not on the bookkeeping list, as a counter added later
        // would be: written by ralph, the record follows.
        let fields = [("max_iterations", "9".to_owned())];
        live.write_turn(&lock, &fields).unwrap();
        live.keep_armed(&lock, Some(&registry), &project, &fields, Timestamp(1));
        let after = Loop::load(&lock, live.file.clone()).unwrap().unwrap();
        assert_eq!(after.state.max_iterations.count(), 9);
        assert_eq!(
            registry.check(&root, "l", &after.state),
            registry::Arming::Armed
        );
        // A loop whose record did not match as read is never re-recorded.
        let edited = after.text.replace("task", "other task");
        std::fs::write(&after.file.path, &edited).unwrap();
        let planted = Loop::load(&lock, live.file.clone()).unwrap().unwrap();
        let fields = [("max_iterations", "10".to_owned())];
        planted.write_turn(&lock, &fields).unwrap();
        planted.keep_armed(&lock, Some(&registry), &project, &fields, Timestamp(2));
        let reread = Loop::load(&lock, live.file.clone()).unwrap().unwrap();
        assert_ne!(
            registry.check(&root, "l", &reread.state),
            registry::Arming::Armed
        );
    }

    #[test]
    fn hand_back_only_touches_a_loop_the_driver_still_drives() {
        let (_tmp, project, _registry, live) = armed("run:1");
        let lock = project.lock().unwrap();
        live.hand_back(&lock, "run:2", Some("s1")).unwrap();
        assert_eq!(
            live.file.path.metadata().unwrap().len(),
            live.text.len() as u64
        );
        let reread = Loop::load(&lock, live.file.clone()).unwrap().unwrap();
        assert_eq!(reread.text, live.text);
        live.hand_back(&lock, "run:1", Some("s1")).unwrap();
        let back = Loop::load(&lock, live.file.clone()).unwrap().unwrap();
        assert_eq!(back.state.session_id.as_deref(), Some("s1"));
        back.hand_back(&lock, "s1", None).unwrap();
        let unclaimed = Loop::load(&lock, live.file.clone()).unwrap().unwrap();
        assert_eq!(unclaimed.state.session_id, None);
    }
}
