//! What the CLI does to loops: arm, cancel, pause, resume, and list them.
//! Every change happens under the project lock, with atomic writes, so a
//! command racing a Stop hook never loses an update or revives a loop.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;

use crate::decide::Outcome;
use crate::frontmatter::{self, quote};
use crate::state::LoopState;
use crate::store::{self, LoopFile, Project, StoreError};
use crate::time::Timestamp;

#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "a loop named `{name}` is already active ({path}); cancel it with `ralph cancel --name {name}`, or replace it with --force"
    )]
    NameTaken { name: String, path: PathBuf },
    #[error(
        "this session already drives the loop `{name}`; one session runs one loop at a time. Cancel it first, or use --force to replace it"
    )]
    SessionBusy { name: String },
    #[error("the prompt is empty: give the task as arguments or on stdin")]
    EmptyPrompt,
    #[error("`{0}` is not a valid loop name: use letters, digits, `-` and `_`")]
    BadName(String),
    #[error("no loop named `{0}` is active (see `ralph status`)")]
    NoSuchLoop(String),
    #[error("several loops are active ({0}); name one with --name, or use --all")]
    Ambiguous(String),
    #[error("{path}: {message}")]
    Unreadable { path: PathBuf, message: String },
}

/// Everything `ralph start` writes into a new loop.
#[derive(Debug, Clone, Default)]
pub struct ArmRequest {
    pub name: String,
    pub prompt: String,
    pub max_iterations: u64,
    pub completion_promise: Option<String>,
    pub abort_promise: Option<String>,
    pub session_id: Option<String>,
    pub max_duration: Option<String>,
    pub max_tokens: Option<u64>,
    pub verify: Option<String>,
    pub verify_timeout: Option<String>,
    pub stuck_after: Option<u64>,
    pub no_progress_after: Option<u64>,
    pub force: bool,
}

pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// A YAML scalar: plain when it is a simple token (as the reference setup
/// script writes session ids), double-quoted otherwise.
pub fn scalar(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !matches!(
            value,
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "~"
        )
        && !value.chars().all(|c| c.is_ascii_digit() || c == '.');
    if plain {
        value.to_owned()
    } else {
        quote(value)
    }
}

/// The text of a new loop file, in the reference layout plus our fields.
pub fn render(req: &ArmRequest, now: Timestamp) -> String {
    let mut fm = vec![
        "active: true".to_owned(),
        "iteration: 1".to_owned(),
        format!(
            "session_id: {}",
            req.session_id.as_deref().map(scalar).unwrap_or_default()
        ),
        format!("max_iterations: {}", req.max_iterations),
        format!(
            "completion_promise: {}",
            req.completion_promise
                .as_deref()
                .map_or("null".to_owned(), quote)
        ),
        format!("started_at: {}", quote(&now.to_string())),
    ];
    let mut opt = |key: &str, value: Option<String>| {
        if let Some(v) = value {
            fm.push(format!("{key}: {v}"));
        }
    };
    opt("abort_promise", req.abort_promise.as_deref().map(quote));
    opt("max_duration", req.max_duration.as_deref().map(quote));
    opt("max_tokens", req.max_tokens.map(|n| n.to_string()));
    opt("verify", req.verify.as_deref().map(quote));
    opt("verify_timeout", req.verify_timeout.as_deref().map(quote));
    opt("stuck_after", req.stuck_after.map(|n| n.to_string()));
    opt(
        "no_progress_after",
        req.no_progress_after.map(|n| n.to_string()),
    );
    format!(
        "---\n{}\n---\n\n{}\n",
        fm.join("\n"),
        req.prompt.trim_matches(['\n', '\r'])
    )
}

/// Arms a loop. Returns its file and parsed state.
pub fn arm(
    project: &Project,
    req: &ArmRequest,
    now: Timestamp,
) -> Result<(PathBuf, LoopState), LoopError> {
    if !valid_name(&req.name) {
        return Err(LoopError::BadName(req.name.clone()));
    }
    if req.prompt.trim().is_empty() {
        return Err(LoopError::EmptyPrompt);
    }
    let text = render(req, now);
    let state = LoopState::parse(&text).map_err(|e| LoopError::Unreadable {
        path: project.loop_path(&req.name),
        message: format!("the new loop would not read back: {e}"),
    })?;
    let _lock = project.lock()?;
    let path = project.loop_path(&req.name);
    for live in read_live(project)? {
        let same_name = live.file.name == req.name;
        let same_session = req.session_id.is_some()
            && live.state.as_ref().ok().and_then(|s| s.session_id.as_ref())
                == req.session_id.as_ref();
        if !(same_name || same_session) {
            continue;
        }
        if !req.force {
            return Err(if same_name {
                LoopError::NameTaken {
                    name: req.name.clone(),
                    path,
                }
            } else {
                LoopError::SessionBusy {
                    name: live.file.name,
                }
            });
        }
        end(
            project,
            &live,
            Outcome::Cancelled,
            "replaced by a new loop (--force)",
            now,
        )?;
    }
    store::write_atomic(&path, &text)?;
    Ok((path, state))
}

/// A live loop file and its parsed state.
pub struct Live {
    pub file: LoopFile,
    pub text: String,
    pub state: Result<LoopState, String>,
}

pub fn read_live(project: &Project) -> Result<Vec<Live>, LoopError> {
    let mut out = Vec::new();
    for file in project.loop_files()? {
        let text = store::read_to_string(&file.path)?;
        let state = LoopState::parse(&text).map_err(|e| e.to_string());
        out.push(Live { file, text, state });
    }
    Ok(out)
}

/// Ends a live loop: records the outcome in the file, then moves it (and its
/// log) into the history. Returns the record's path.
fn end(
    project: &Project,
    live: &Live,
    outcome: Outcome,
    why: &str,
    now: Timestamp,
) -> Result<PathBuf, LoopError> {
    let fields = [
        ("active", "false".to_owned()),
        ("outcome", outcome.as_str().to_owned()),
        ("ended_at", quote(&now.to_string())),
    ];
    // A corrupt file cannot be rewritten; it is moved as it is.
    if let Ok(updated) = frontmatter::set_fields(&live.text, &fields)
        && live.state.is_ok()
    {
        store::write_atomic(&live.file.path, &updated)?;
    }
    let iteration = live.state.as_ref().map(|s| s.iteration).unwrap_or(0);
    project.append_log(
        &live.file.name,
        &json!({"time": now.to_string(), "iteration": iteration, "decision": "end", "outcome": outcome.as_str(), "why": why}).to_string(),
    );
    Ok(project.archive(&live.file, now, "")?)
}

/// Which live loops a command without `--name` means: the one this session
/// owns, else the only one there is.
fn pick<'a>(
    lives: &'a [Live],
    name: Option<&str>,
    session: Option<&str>,
) -> Result<Vec<&'a Live>, LoopError> {
    if let Some(name) = name {
        return lives
            .iter()
            .find(|l| l.file.name == name)
            .map(|l| vec![l])
            .ok_or_else(|| LoopError::NoSuchLoop(name.to_owned()));
    }
    if let Some(session) = session {
        let owned: Vec<&Live> = lives
            .iter()
            .filter(|l| {
                l.state.as_ref().ok().and_then(|s| s.session_id.as_deref()) == Some(session)
            })
            .collect();
        if !owned.is_empty() {
            return Ok(owned);
        }
    }
    match lives {
        [] => Ok(Vec::new()),
        [only] => Ok(vec![only]),
        _ => Err(LoopError::Ambiguous(
            lives
                .iter()
                .map(|l| l.file.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

/// Whether there is no loop at all, checked before taking the lock so that a
/// command with nothing to do leaves no trace (no `.claude/ralph/` appears).
fn nothing_to_do(project: &Project, name: Option<&str>) -> Result<bool, LoopError> {
    if !project.loop_files()?.is_empty() {
        return Ok(false);
    }
    match name {
        Some(name) => Err(LoopError::NoSuchLoop(name.to_owned())),
        None => Ok(true),
    }
}

/// Cancels loops; returns `(name, iteration, record)` for each one ended.
pub fn cancel(
    project: &Project,
    name: Option<&str>,
    all: bool,
    session: Option<&str>,
    now: Timestamp,
) -> Result<Vec<(String, u64, PathBuf)>, LoopError> {
    if nothing_to_do(project, name)? {
        return Ok(Vec::new());
    }
    let _lock = project.lock()?;
    let lives = read_live(project)?;
    let chosen: Vec<&Live> = if all {
        lives.iter().collect()
    } else {
        pick(&lives, name, session)?
    };
    let mut ended = Vec::new();
    for live in chosen {
        let record = end(
            project,
            live,
            Outcome::Cancelled,
            "cancelled by the user",
            now,
        )?;
        let iteration = live.state.as_ref().map(|s| s.iteration).unwrap_or(0);
        ended.push((live.file.name.clone(), iteration, record));
    }
    Ok(ended)
}

/// Pauses (`active: false`) or resumes loops; returns the names changed.
pub fn set_active(
    project: &Project,
    name: Option<&str>,
    session: Option<&str>,
    active: bool,
    now: Timestamp,
) -> Result<Vec<String>, LoopError> {
    if nothing_to_do(project, name)? {
        return Ok(Vec::new());
    }
    let _lock = project.lock()?;
    let lives = read_live(project)?;
    let mut changed = Vec::new();
    for live in pick(&lives, name, session)? {
        let Ok(state) = &live.state else { continue };
        if state.active == active {
            continue;
        }
        let updated = frontmatter::set_fields(&live.text, &[("active", active.to_string())])
            .map_err(|e| LoopError::Unreadable {
                path: live.file.path.clone(),
                message: e.to_string(),
            })?;
        store::write_atomic(&live.file.path, &updated)?;
        let word = if active { "resume" } else { "pause" };
        project.append_log(&live.file.name, &json!({"time": now.to_string(), "iteration": state.iteration, "decision": word, "why": format!("{word}d by the user")}).to_string());
        changed.push(live.file.name.clone());
    }
    Ok(changed)
}

/// One loop as `ralph status` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct LoopReport {
    pub name: String,
    /// `active`, `paused`, `ended` or `corrupt`.
    pub state: String,
    pub outcome: Option<String>,
    pub iteration: Option<u64>,
    pub max_iterations: Option<u64>,
    pub session_id: Option<String>,
    pub completion_promise: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub elapsed_secs: Option<u64>,
    pub tokens_used: Option<u64>,
    /// Tokens the transcript did not prove yet at the last stop (an estimate
    /// of the last reply); `tokens_used` is the known count.
    pub unseen_tokens: Option<u64>,
    pub abort_promise: Option<String>,
    pub max_duration_secs: Option<u64>,
    pub max_tokens: Option<u64>,
    pub verify: Option<String>,
    pub stuck_after: Option<u64>,
    pub no_progress_after: Option<u64>,
    /// The guards in words, as `ralph start` announced them.
    pub guards: Vec<String>,
    /// Breaker figures: identical replies in a row, unchanged iterations, idle continuations.
    pub same_reply_count: Option<u64>,
    pub no_progress_count: Option<u64>,
    pub idle_blocks: Option<u64>,
    pub path: String,
    pub error: Option<String>,
    /// The last decision-log lines (JSON objects), oldest first.
    pub recent: Vec<serde_json::Value>,
}

/// Every loop of the project: live ones first, then the `history` most
/// recent ended ones (newest first).
pub fn report(
    project: &Project,
    history: usize,
    recent: usize,
    now: Timestamp,
) -> Result<Vec<LoopReport>, LoopError> {
    let mut out = Vec::new();
    for live in read_live(project)? {
        let log = project.log_path(&live.file.name);
        out.push(report_one(
            &live.file.name,
            &live.file.path,
            &live.text,
            &log,
            recent,
            now,
        ));
    }
    let dir = project.history_dir();
    let mut records: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect(),
        Err(_) => Vec::new(),
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
        let text = store::read_to_string(&path).unwrap_or_default();
        let log = path.with_file_name(format!("{stem}.log.jsonl"));
        let mut r = report_one(&name, &path, &text, &log, recent, now);
        if stem.ends_with(".corrupt") {
            r.state = "corrupt".into();
            r.outcome = Some(Outcome::Corrupt.as_str().into());
        }
        out.push(r);
    }
    Ok(out)
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
        state: "corrupt".into(),
        outcome: None,
        iteration: None,
        max_iterations: None,
        session_id: None,
        completion_promise: None,
        started_at: None,
        ended_at: None,
        elapsed_secs: None,
        tokens_used: None,
        unseen_tokens: None,
        abort_promise: None,
        max_duration_secs: None,
        max_tokens: None,
        verify: None,
        stuck_after: None,
        no_progress_after: None,
        guards: Vec::new(),
        same_reply_count: None,
        no_progress_count: None,
        idle_blocks: None,
        path: path.display().to_string(),
        error: None,
        recent: read_log_tail(log, recent),
    };
    match LoopState::parse(text) {
        Ok(s) => {
            r.state = match (&s.outcome, s.active) {
                (Some(_), _) => "ended",
                (None, true) => "active",
                (None, false) => "paused",
            }
            .into();
            r.outcome = s.outcome.clone();
            r.iteration = Some(s.iteration);
            r.max_iterations = Some(s.max_iterations);
            r.session_id = s.session_id.clone();
            r.completion_promise = s.completion_promise.clone();
            r.started_at = s.started_at.map(|t| t.to_string());
            r.ended_at = s.ended_at.map(|t| t.to_string());
            r.elapsed_secs = s
                .started_at
                .map(|start| (s.ended_at.unwrap_or(now).0 - start.0).max(0) as u64);
            r.tokens_used = Some(s.progress.tokens_used);
            r.unseen_tokens = Some(s.progress.unseen_tokens);
            r.abort_promise = s.abort_promise.clone();
            r.max_duration_secs = s.guards.max_duration_secs;
            r.max_tokens = s.guards.max_tokens;
            r.verify = s.guards.verify.clone();
            r.stuck_after = Some(s.guards.stuck_after);
            r.no_progress_after = Some(s.guards.no_progress_after);
            r.guards = crate::messages::guard_summary(&s);
            r.same_reply_count = Some(s.progress.same_reply_count);
            r.no_progress_count = Some(s.progress.no_progress_count);
            r.idle_blocks = Some(s.progress.idle_blocks);
        }
        Err(e) => r.error = Some(e.to_string()),
    }
    r
}

/// The last `n` JSON lines of a decision log (all of them when `n` is `usize::MAX`).
pub fn read_log_tail(path: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    if n == 0 {
        return Vec::new();
    }
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> (tempfile::TempDir, Project) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join(".claude")).unwrap();
        let p = Project {
            root: tmp.path().into(),
        };
        (tmp, p)
    }

    fn req(name: &str, session: Option<&str>) -> ArmRequest {
        ArmRequest {
            name: name.into(),
            prompt: "Do \"it\" $HOME\n---\niteration: 7".into(),
            max_iterations: 5,
            completion_promise: Some("ALL DONE".into()),
            session_id: session.map(Into::into),
            ..ArmRequest::default()
        }
    }

    #[test]
    fn rendered_state_reads_back() {
        let text = render(&req("ralph", Some("abc-1")), Timestamp(0));
        assert!(text.contains("session_id: abc-1\n"), "{text}");
        let s = LoopState::parse(&text).unwrap();
        assert_eq!(s.prompt, "Do \"it\" $HOME\n---\niteration: 7");
        assert_eq!(s.completion_promise.as_deref(), Some("ALL DONE"));
        assert_eq!(s.max_iterations, 5);
    }

    #[test]
    fn arm_refuses_duplicates_without_force() {
        let (_t, p) = project();
        arm(&p, &req("ralph", Some("s")), Timestamp(0)).unwrap();
        assert!(matches!(
            arm(&p, &req("ralph", None), Timestamp(1)),
            Err(LoopError::NameTaken { .. })
        ));
        assert!(matches!(
            arm(&p, &req("other", Some("s")), Timestamp(1)),
            Err(LoopError::SessionBusy { .. })
        ));
        let mut forced = req("other", Some("s"));
        forced.force = true;
        arm(&p, &forced, Timestamp(2)).unwrap();
        let names: Vec<_> = p
            .loop_files()
            .unwrap()
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["other"]);
        let reports = report(&p, 10, 0, Timestamp(3)).unwrap();
        assert_eq!(reports[1].outcome.as_deref(), Some("cancelled"));
    }

    #[test]
    fn cancel_and_pause() {
        let (_t, p) = project();
        arm(&p, &req("a", Some("s1")), Timestamp(0)).unwrap();
        arm(&p, &req("b", Some("s2")), Timestamp(0)).unwrap();
        assert!(matches!(
            cancel(&p, None, false, None, Timestamp(1)),
            Err(LoopError::Ambiguous(_))
        ));
        assert_eq!(
            set_active(&p, None, Some("s2"), false, Timestamp(1)).unwrap(),
            ["b"]
        );
        let ended = cancel(&p, None, false, Some("s1"), Timestamp(1)).unwrap();
        assert_eq!(ended[0].0, "a");
        assert!(cancel(&p, Some("zzz"), false, None, Timestamp(1)).is_err());
        let r = report(&p, 10, 5, Timestamp(2)).unwrap();
        assert_eq!((r[0].name.as_str(), r[0].state.as_str()), ("b", "paused"));
        assert_eq!((r[1].name.as_str(), r[1].state.as_str()), ("a", "ended"));
        assert_eq!(r[1].recent.last().unwrap()["outcome"], "cancelled");
    }

    #[test]
    fn scalars() {
        assert_eq!(scalar("5b360de9-aa"), "5b360de9-aa");
        assert_eq!(scalar("true"), "\"true\"");
        assert_eq!(scalar("123"), "\"123\"");
        assert_eq!(scalar("a b"), "\"a b\"");
    }
}
