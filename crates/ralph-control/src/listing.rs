//! What `ralph status`, `ralph log` and `ralph receipt` show of a project's
//! loops: live ones from their files, ended ones from their history records
//! (with the receipts kept for them), the log `ralph log` picks. Nothing
//! here changes a loop; the live files are read without the lock (a loop
//! file is only ever replaced whole, so a read sees one version). The words
//! are `status_text.rs`'s.

use std::path::PathBuf;

use serde::Serialize;

use crate::commands::CommandError;
use ralph_state::fields::outcome::{LoopStatus, Outcome};
use ralph_state::fields::state::LoopState;
use ralph_state::scan::{LoopEntry, Scan};
use ralph_state::storage::registry::{Arming, Registry};
use ralph_state::storage::store::{self, Project, StoreError};
use ralph_state::time::Timestamp;

/// One loop as `ralph status` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct LoopReport {
    pub name: String,
    pub state: LoopStatus,
    pub outcome: Option<String>,
    pub iteration: Option<u64>,
    pub max_iterations: Option<ralph_state::fields::limit::Limit>,
    pub session_id: Option<String>,
    pub completion_promise: Option<String>,
    /// The task's first line, escaped (what the loop works on).
    pub task: Option<String>,
    /// A `ralph run` owner whose process is gone: nobody drives the loop.
    pub driver_gone: bool,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub elapsed_secs: Option<u64>,
    pub tokens_used: Option<u64>,
    /// Tokens the transcript did not prove yet at the last stop (an estimate
    /// of the last reply); `tokens_used` is the known count.
    pub unseen_tokens: Option<u64>,
    pub abort_promise: Option<String>,
    /// `--prd`: the current story and how many pass (`story US-002 · 1 of 3 pass`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stories: Option<String>,
    /// `--prd`: the story commands the loop has bound, one line each (`approval::bound_lines`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub story_commands: Vec<String>,
    /// `ralph say`: the guidance queued for the next iteration, the question
    /// the loop is paused on, and the guidance delivered (with its iteration).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub guidance_pending: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub guidance_delivered: Vec<crate::guidance::DeliveredGuidance>,
    /// The guards' settings and counters, one JSON field each (named as
    /// in `guards.rs`); absent when the file does not parse.
    #[serde(flatten)]
    pub guard_settings: Option<ralph_state::fields::guards::Guards>,
    #[serde(flatten)]
    pub guard_counts: Option<ralph_state::fields::guards::GuardCounts>,
    /// The guards in words, as `ralph start` announced them.
    pub guards: Vec<String>,
    /// Which usage the loop drains: `session` (the plan's windows, or the
    /// session's API key), `run` (the agent `ralph run` starts), or `next`
    /// (no owner: whichever drives it next).
    pub spends: Option<&'static str>,
    /// `ralph run --sandbox`: what the agent may reach, in words (`None`: not sandboxed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Breaker figures: identical replies in a row, unchanged iterations, idle continuations.
    pub same_reply_count: Option<u64>,
    pub no_progress_count: Option<u64>,
    pub idle_blocks: Option<u64>,
    pub path: String,
    /// For a live loop: whether it is armed on this machine (the hook drives only those).
    pub armed: Option<bool>,
    /// Why a live loop is not armed here, and how to adopt it.
    pub not_armed: Option<String>,
    pub error: Option<String>,
    /// An ended loop's receipt, when its gate completed it on this machine
    /// (`receipt.rs`; filled by `ralph status`, which knows the user).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<ralph_state::storage::receipt::Receipt>,
    /// The last decision-log lines (JSON objects), oldest first.
    pub recent: Vec<serde_json::Value>,
    /// Where its decision log is (live: under `logs/`; ended: beside its
    /// record); empty when the logs folder is not a real folder.
    #[serde(skip)]
    pub log: PathBuf,
}

/// Every loop of the project: live ones first, then the `history` most
/// recent ended ones (newest first).
pub fn report(
    project: &Project,
    registry: Option<&Registry>,
    history: usize,
    recent: usize,
    now: Timestamp,
) -> Result<Vec<LoopReport>, StoreError> {
    let mut out = Vec::new();
    // Decision logs are read only from a real folder, never through a link.
    let logs_real =
        ralph_fs::safe_fs::check_dir(&project.root, ".claude/ralph/logs").unwrap_or(false);
    for entry in Scan::read(project, registry)?.entries {
        let file = entry.file();
        let log = if logs_real {
            project.log_path(&file.name)
        } else {
            PathBuf::new()
        };
        let text = match &entry {
            LoopEntry::Unreadable { text, .. } => text.as_deref().unwrap_or_default(),
            LoopEntry::Armed(live) | LoopEntry::Paused(live) | LoopEntry::Foreign { live, .. } => {
                &live.text
            }
        };
        let mut r = report_one(&file.name, &file.path, text, &log, recent, now);
        if let LoopEntry::Unreadable {
            text: None, why, ..
        } = &entry
        {
            r.state = LoopStatus::Unreadable;
            r.error = Some(why.clone());
        }
        if let (Some(live), Some(arming)) = (entry.live(), entry.arming()) {
            r.armed = Some(arming == Arming::Armed);
            r.not_armed = not_armed_note(&arming, &file.name);
            r.stories = live
                .state
                .prd
                .as_ref()
                .map(|prd| ralph_core::decide::prd_turn::status_of(&project.root, prd));
            r.story_commands = live.state.prd.as_ref().map_or_else(Vec::new, |prd| {
                crate::approval::bound_lines(&project.root, prd)
            });
            if arming == Arming::Armed {
                let waiting = crate::guidance::waiting(project, registry, &file.name);
                r.guidance_pending = waiting.pending;
                r.question = waiting.question;
                r.guidance_delivered = waiting.delivered;
            }
        }
        out.push(r);
    }
    out.extend(history_reports(project, history, recent, now));
    Ok(out)
}

/// The `history` most recent ended loops, newest first.
fn history_reports(
    project: &Project,
    history: usize,
    recent: usize,
    now: Timestamp,
) -> Vec<LoopReport> {
    let mut out = Vec::new();
    // The history folder is read only when it is a real folder, never a link.
    let dir = project.history_dir();
    let real =
        ralph_fs::safe_fs::check_dir(&project.root, ".claude/ralph/history").unwrap_or(false);
    let mut records: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) if real => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .filter(|p| !ralph_state::handover::is_handover(p))
            .collect(),
        _ => Vec::new(),
    };
    records.sort();
    records.reverse();
    for path in records.into_iter().take(history) {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let name = stem
            .split_once('-')
            .map_or(stem.as_str(), |(_, n)| n)
            .trim_end_matches(".corrupt")
            .to_owned();
        // A record ralph cannot read (a link to /dev/zero, say) is reported, not followed.
        let (text, unreadable) = match store::read_to_string(&path) {
            Ok(text) => (text, None),
            Err(e) => (String::new(), Some(e.to_string())),
        };
        let log = path.with_file_name(format!("{stem}.log.jsonl"));
        let mut r = report_one(&name, &path, &text, &log, recent, now);
        if let Some(why) = unreadable {
            r.state = LoopStatus::Unreadable;
            r.error = Some(why);
        } else if stem.ends_with(".corrupt") {
            r.state = LoopStatus::Corrupt;
            r.outcome = Some(Outcome::Corrupt.as_str().into());
        }
        out.push(r);
    }
    out
}

fn report_one(
    name: &str,
    path: &std::path::Path,
    text: &str,
    log: &std::path::Path,
    recent: usize,
    now: Timestamp,
) -> LoopReport {
    let mut r = LoopReport {
        name: name.to_owned(),
        state: LoopStatus::Corrupt,
        outcome: None,
        iteration: None,
        max_iterations: None,
        session_id: None,
        completion_promise: None,
        task: None,
        driver_gone: false,
        started_at: None,
        ended_at: None,
        elapsed_secs: None,
        tokens_used: None,
        unseen_tokens: None,
        abort_promise: None,
        stories: None,
        story_commands: Vec::new(),
        guidance_pending: Vec::new(),
        question: None,
        guidance_delivered: Vec::new(),
        guard_settings: None,
        guard_counts: None,
        guards: Vec::new(),
        spends: None,
        sandbox: None,
        same_reply_count: None,
        no_progress_count: None,
        idle_blocks: None,
        path: path.display().to_string(),
        armed: None,
        not_armed: None,
        error: None,
        receipt: None,
        recent: ralph_state::storage::store::read_log_tail(log, recent),
        log: log.to_owned(),
    };
    match LoopState::parse(text) {
        Ok(s) => fill_from_state(&mut r, &s, now),
        Err(e) => {
            // The rest is unreadable, but an intact `session_id:` line still says whose it is.
            r.session_id = ralph_state::fields::state::scan_session_id(text);
            r.error = Some(e.to_string());
        }
    }
    r
}

/// The report's figures from a loop's parsed state.
fn fill_from_state(r: &mut LoopReport, s: &LoopState, now: Timestamp) {
    r.state = match (&s.outcome, s.active) {
        (Some(_), _) => LoopStatus::Ended,
        (None, true) => LoopStatus::Active,
        (None, false) => LoopStatus::Paused,
    };
    r.outcome = s.outcome.as_ref().map(|o| o.as_str().to_owned());
    r.iteration = Some(s.iteration);
    r.max_iterations = Some(s.max_iterations);
    r.session_id = s.session_id.clone();
    r.completion_promise = s.completion_promise.clone();
    r.task = Some(ralph_state::messages::task_line(&s.prompt, 80));
    r.driver_gone = s.outcome.is_none()
        && s.session_id
            .as_deref()
            .is_some_and(ralph_state::fields::run_owner::is_gone);
    r.started_at = s.started_at.map(|t| t.to_string());
    r.ended_at = s.ended_at.map(|t| t.to_string());
    r.elapsed_secs = s
        .started_at
        .map(|start| s.ended_at.unwrap_or(now).secs_since(start));
    r.tokens_used = Some(s.progress.tokens_used);
    r.unseen_tokens = Some(s.progress.unseen_tokens);
    r.abort_promise = s.abort_promise.clone();
    r.guard_settings = Some(s.guards.clone());
    r.guard_counts = Some(s.progress.counts.clone());
    r.guards = ralph_state::messages::guard_summary(s);
    r.spends = Some(match s.session_id.as_deref() {
        Some(owner) if ralph_state::fields::run_owner::is_run(owner) => "run",
        Some(_) => "session",
        // Paused by Ctrl-C in `ralph run`, or armed and not yet claimed:
        // whichever drives it next spends.
        None => "next",
    });
    r.sandbox = s
        .sandbox
        .as_ref()
        .map(ralph_state::fields::confinement::Confinement::reach);
    r.same_reply_count = Some(s.progress.same_reply_count);
    r.no_progress_count = Some(s.progress.no_progress_count);
    r.idle_blocks = Some(s.progress.idle_blocks);
}

#[cfg(any(test, feature = "test-support"))]
impl LoopReport {
    /// A report of a loop `name` whose file says nothing (for other modules' tests).
    pub fn for_tests(name: &str) -> Self {
        report_one(
            name,
            std::path::Path::new(""),
            "",
            std::path::Path::new(""),
            0,
            Timestamp(0),
        )
    }
}

/// Each ended loop's receipt, when the one kept for its name is for this
/// very record (a later run of the same name has its own).
pub fn attach_receipts(project: &Project, registry: Option<&Registry>, reports: &mut [LoopReport]) {
    let (Some(registry), Ok(root)) = (
        registry,
        ralph_state::storage::registry::canonical_root(project),
    ) else {
        return;
    };
    for r in reports.iter_mut().filter(|r| r.state == LoopStatus::Ended) {
        let Ok(receipt) = ralph_state::storage::receipt::load(registry, &root, &r.name) else {
            continue;
        };
        let file_name = |p: &str| std::path::Path::new(p).file_name().map(ToOwned::to_owned);
        if file_name(&receipt.record).is_some() && file_name(&receipt.record) == file_name(&r.path)
        {
            r.receipt = Some(receipt);
        }
    }
}

/// The loop `ralph receipt` tells of when none is named: this session's,
/// else the most recently ended one; `None` when the project has no loops.
pub fn most_recent(
    project: &Project,
    session: Option<&str>,
    now: Timestamp,
) -> Result<Option<String>, CommandError> {
    let reports = report(project, None, usize::MAX, 0, now)?;
    Ok(reports
        .iter()
        .find(|r| session.is_some() && r.session_id.as_deref() == session)
        .or_else(|| reports.iter().find(|r| r.state == LoopStatus::Ended))
        .map(|r| r.name.clone()))
}

/// What `ralph log` shows.
#[derive(Debug)]
pub enum LogChoice {
    /// A loop's report (its `log` is where its decisions are).
    Loop(Box<LoopReport>),
    /// A decision log in the history whose loop file was deleted by hand.
    Orphan(PathBuf),
}

/// The loop `ralph log` shows: the one named, else this session's live
/// one, else the first; a log left without its loop file when no report
/// matches. `None`: nothing to show and no name given; a name that matches
/// nothing is an error.
pub fn choose_log(
    project: &Project,
    name: Option<&str>,
    session: Option<&str>,
    now: Timestamp,
) -> Result<Option<LogChoice>, CommandError> {
    let reports = report(project, None, usize::MAX, 0, now)?;
    let chosen = match name {
        Some(name) => reports.into_iter().find(|r| r.name == name),
        None => {
            let mine = reports.iter().position(|r| {
                session.is_some()
                    && r.session_id.as_deref() == session
                    && r.state != LoopStatus::Ended
            });
            reports.into_iter().nth(mine.unwrap_or(0))
        }
    };
    if let Some(report) = chosen {
        return Ok(Some(LogChoice::Loop(Box::new(report))));
    }
    // A loop whose file was deleted by hand has no report, but its log was kept.
    if let Some(log) = orphan_log(project, name) {
        return Ok(Some(LogChoice::Orphan(log)));
    }
    match name {
        Some(name) => Err(CommandError::NotLogged(name.to_owned())),
        None => Ok(None),
    }
}

/// The newest decision log in the history without a loop record beside it
/// (a loop whose file was deleted by hand), of the loop `name` if given.
fn orphan_log(project: &Project, name: Option<&str>) -> Option<PathBuf> {
    let history = project.history_dir();
    let mut logs: Vec<String> = std::fs::read_dir(&history)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.strip_suffix(".log.jsonl").is_some_and(|stem| {
                !history.join(format!("{stem}.md")).exists()
                    && name.is_none_or(|name| stem.ends_with(&format!("-{name}")))
            })
        })
        .collect();
    // Record names start with the time they ended: the last is the newest.
    logs.sort();
    logs.pop().map(|n| history.join(n))
}

/// What `ralph status` says of a loop that is not armed here.
/// Whoever the loop names, without a record it is inert.
pub fn not_armed_note(arming: &Arming, name: &str) -> Option<String> {
    let name = ralph_fs::display::line(name);
    match arming {
        Arming::Armed => None,
        other => Some(format!(
            "not armed on this machine: {} — `ralph adopt --name {name}`",
            other.why_not()
        )),
    }
}
