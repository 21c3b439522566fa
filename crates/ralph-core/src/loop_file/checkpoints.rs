//! A loop's checkpoints (`fs/checkpoint.rs` under a loop's names): one per
//! iteration at the stop that ends it, `refs/ralph/<loop>/<nonce>/<n>`, so
//! that two armings of one name never mix; which one was the last whose
//! `--check` passed; and their pruning when the loop's history goes.

use std::path::Path;

use crate::fs::checkpoint;
use crate::loop_file::state::LoopState;
use crate::loop_file::store::Project;

/// The run part of a loop's checkpoint names: its arming nonce.
pub fn run_of(state: &LoopState) -> Option<&str> {
    state.nonce.as_deref()
}

/// `refs/ralph/<loop>/<run>/` for a loop, when its names are plain.
pub fn prefix(name: &str, state: &LoopState) -> Option<String> {
    let run = run_of(state)?;
    checkpoint::ref_name(name, run, "0")?;
    Some(format!("{}{name}/{run}/", checkpoint::NAMESPACE))
}

/// Records the work tree as the checkpoint of iteration `iteration` of the
/// loop `name`; best effort (not a git project, a name git refuses, git
/// failing or slow: no checkpoint, and the loop goes on as before). The
/// ref's name when one was kept.
pub fn take(root: &Path, name: &str, state: &LoopState, iteration: u64) -> Option<String> {
    if !checkpoint::in_repository(root) {
        return None;
    }
    let reference = checkpoint::ref_name(name, run_of(state)?, &iteration.to_string())?;
    let message = format!("ralph {name}: the work tree after iteration {iteration}");
    let snapshot = checkpoint::snapshot(root, &message).ok()?;
    checkpoint::store(root, &reference, &snapshot.commit).ok()?;
    Some(reference)
}

/// The last iteration of the loop whose `--check` passed and whose
/// checkpoint exists, from its decision log (and this turn's verdict,
/// not logged yet).
pub fn last_green(
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
        crate::loop_file::store::read_log_tail(&project.log_path(name), 10_000)
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
pub fn green_sentence(name: &str, iteration: u64) -> String {
    format!(
        "The last checkpoint where the check passed is iteration {iteration}: `ralph rollback --to {iteration} --name {}` puts that tree back.",
        crate::display::line(name)
    )
}

/// Removes the checkpoints of every run of a loop that has neither a live
/// loop file nor a history record left (`alive` says which runs do): the
/// history is what they belong to. Best effort.
pub fn prune(root: &Path, alive: &dyn Fn(&str, &str) -> bool) {
    if !checkpoint::in_repository(root) {
        return;
    }
    let gone: Vec<String> = checkpoint::list(root, checkpoint::NAMESPACE)
        .into_iter()
        .map(|(r, _)| r)
        .filter(|r| {
            let mut parts = r[checkpoint::NAMESPACE.len()..].split('/');
            match (parts.next(), parts.next()) {
                (Some(name), Some(run)) => !alive(name, run),
                _ => false,
            }
        })
        .collect();
    let _ = checkpoint::remove(root, &gone);
}
