//! A loop's checkpoints (`fs/checkpoint.rs` under a loop's names): one per
//! iteration at the stop that ends it, `refs/ralph/<loop>/<nonce>/<n>`, so
//! that two armings of one name never mix; which one was the last whose
//! `--check` passed; and their pruning when the loop's history goes.

use std::path::Path;

use crate::loop_file::fields::state::LoopState;
use crate::loop_file::storage::store::Project;
use ralph_fs::checkpoint;

/// The run part of a loop's checkpoint names: its arming nonce.
pub(crate) fn run_of(state: &LoopState) -> Option<&str> {
    state.nonce.as_deref()
}

/// `refs/ralph/<loop>/<run>/` for a loop, when its names are plain.
pub(crate) fn prefix(name: &str, state: &LoopState) -> Option<String> {
    let run = run_of(state)?;
    checkpoint::ref_name(name, run, "0")?;
    Some(format!("{}{name}/{run}/", checkpoint::NAMESPACE))
}

/// Records the work tree as the checkpoint of iteration `iteration` of the
/// loop `name`; best effort (not a git project, a name git refuses, git
/// failing or slow: no checkpoint, and the loop goes on as before). The
/// ref's name when one was kept. `unchanged`: the turn ran no tool (the
/// transcript shows it), so the tree is the previous checkpoint's: that
/// commit is named again with one `update-ref`, rather than every file of
/// the tree staged anew (80 ms at 30,000 files, at every such stop).
pub(crate) fn take(
    root: &Path,
    name: &str,
    state: &LoopState,
    iteration: u64,
    unchanged: bool,
) -> Option<String> {
    if !checkpoint::in_repository(root) {
        return None;
    }
    let run = run_of(state)?;
    let reference = checkpoint::ref_name(name, run, &iteration.to_string())?;
    let previous = iteration
        .checked_sub(1)
        .and_then(|p| checkpoint::ref_name(name, run, &p.to_string()));
    // A previous checkpoint that is missing fails the update: the tree is then recorded whole.
    if let Some(previous) = previous.filter(|_| unchanged)
        && checkpoint::store(root, &reference, &previous).is_ok()
    {
        return Some(reference);
    }
    let message = format!("ralph {name}: the work tree after iteration {iteration}");
    let snapshot = checkpoint::snapshot(root, &message).ok()?;
    checkpoint::store(root, &reference, &snapshot.commit).ok()?;
    Some(reference)
}

/// The last iteration of the loop whose `--check` passed and whose
/// checkpoint exists, from its decision log (and this turn's verdict,
/// not logged yet).
pub(crate) fn last_green(
    project: &Project,
    name: &str,
    state: &LoopState,
    this_turn_passed: bool,
) -> Option<u64> {
    let prefix = prefix(name, state)?;
    let kept: Vec<u64> = checkpoint::list(&project.root, &prefix)
        .iter()
        .filter_map(|(r, _)| r.strip_prefix(&prefix)?.parse().ok())
        .collect();
    let mut green: Vec<u64> =
        crate::loop_file::storage::store::read_log_tail(&project.log_path(name), 10_000)
            .iter()
            .filter(|e| e["check"]["passed"] == serde_json::Value::Bool(true))
            .filter_map(|e| e["iteration"].as_u64())
            .collect();
    if this_turn_passed {
        green.push(state.iteration);
    }
    green.into_iter().filter(|n| kept.contains(n)).max()
}

/// The sentence an ending adds: the last green checkpoint and the command
/// that puts it back.
pub(crate) fn green_sentence(name: &str, iteration: u64) -> String {
    format!(
        "The last checkpoint where the check passed is iteration {iteration}: `ralph rollback --to {iteration} --name {}` puts that tree back.",
        ralph_fs::display::line(name)
    )
}

/// Removes the checkpoints of every run whose loop has neither a live loop
/// file nor a history record left: checkpoints belong to the history and go
/// when it goes (ralph never prunes the history itself; a user who deletes
/// records frees their checkpoints at the next arming). Best effort; costs
/// one `git for-each-ref` when there are none.
pub(crate) fn prune(project: &Project) {
    if !checkpoint::in_repository(&project.root) {
        return;
    }
    let refs = checkpoint::list(&project.root, checkpoint::NAMESPACE);
    if refs.is_empty() {
        return;
    }
    let alive = nonces(project);
    let gone: Vec<String> = refs
        .into_iter()
        .map(|(r, _)| r)
        .filter(|r| {
            let run = r[checkpoint::NAMESPACE.len()..].split('/').nth(1);
            run.is_some_and(|run| !alive.iter().any(|n| n == run))
        })
        .collect();
    let _ = checkpoint::remove(&project.root, &gone);
}

/// The arming nonces of every live loop file and history record, read by
/// line (`ralph_nonce: "…"`), never through a link.
fn nonces(project: &Project) -> Vec<String> {
    let mut files: Vec<std::path::PathBuf> = project
        .loop_files()
        .unwrap_or_default()
        .into_iter()
        .map(|f| f.path)
        .collect();
    if ralph_fs::safe_fs::check_dir(&project.root, ".claude/ralph/history").unwrap_or(false)
        && let Ok(entries) = std::fs::read_dir(project.history_dir())
    {
        files.extend(
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md")),
        );
    }
    files
        .iter()
        .filter_map(|path| {
            let text = ralph_fs::safe_fs::read_text(path, ralph_fs::safe_fs::LOOP_FILE_CAP).ok()?;
            let line = text.lines().find_map(|l| l.strip_prefix("ralph_nonce:"))?;
            Some(line.trim().trim_matches(['"', '\'']).to_owned())
        })
        .collect()
}
