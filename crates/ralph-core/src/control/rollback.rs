//! `ralph rollback --to N [--name NAME]`: the work tree of a checkpoint
//! (`loop_file/storage/checkpoints.rs`) put back, only while its loop is paused or
//! ended. The tree it replaces is kept first as checkpoint `undo-<k>`, so
//! a rollback is undone by another. Ignored files and `.claude/` are never
//! touched (`fs/checkpoint.rs`, `restore`).

use std::path::PathBuf;

use crate::control::CommandError;
use crate::loop_file::fields::state::LoopState;
use crate::loop_file::lifecycle::{LogEntry, Logged, Loop};
use crate::loop_file::scan::{LoopEntry, Scan};
use crate::loop_file::storage::registry::Registry;
use crate::loop_file::storage::store::{LoopFile, Project, ProjectLock, StoreError};
use crate::time::Timestamp;
use ralph_fs::checkpoint;

/// What a rollback did.
#[derive(Debug)]
pub struct RolledBack {
    pub name: String,
    /// The checkpoint put back (`3`, `undo-1`).
    pub to: String,
    /// The checkpoint that now holds the tree it replaced.
    pub undo: String,
}

/// Puts checkpoint `to` of loop `name` (else the only live loop, else the
/// most recently ended) back into the work tree.
pub fn rollback(
    project: &Project,
    registry: Option<&Registry>,
    name: Option<&str>,
    to: &str,
    now: Timestamp,
) -> Result<RolledBack, CommandError> {
    if !checkpoint::in_repository(&project.root) {
        return Err(refused(
            "this project is not a git repository, so its loops keep no checkpoints",
        ));
    }
    let lock = project.lock()?;
    let (loop_name, state, live) = choose(project, &lock, registry, name)?;
    let prefix = crate::loop_file::storage::checkpoints::prefix(&loop_name, &state)
        .ok_or_else(|| refused("this loop has no checkpoint names (no arming nonce)"))?;
    let target_ref = format!("{prefix}{to}");
    let target = checkpoint::ref_name(&loop_name, prefix_run(&prefix), to)
        .and_then(|r| checkpoint::resolve(&project.root, &r))
        .ok_or_else(|| no_such_checkpoint(project, &loop_name, &prefix, to))?;
    let undo = next_undo(project, &prefix);
    let message = format!("ralph {loop_name}: the work tree a rollback to {to} replaced");
    let current = checkpoint::snapshot(&project.root, &message).map_err(StoreError::from)?;
    let undo_ref = format!("{prefix}{undo}");
    checkpoint::store(&project.root, &undo_ref, &current.commit).map_err(StoreError::from)?;
    checkpoint::restore(&project.root, &current, &target).map_err(StoreError::from)?;
    if let Some(live) = live {
        LogEntry::new(
            now,
            Logged::Pass,
            format!("rolled back to {target_ref}; the tree it replaced is {undo_ref}"),
        )
        .iteration(live.state.iteration)
        .append(project, &loop_name);
    }
    drop(lock);
    Ok(RolledBack {
        name: loop_name,
        to: to.to_owned(),
        undo,
    })
}

/// `ralph rollback --list`: the checkpoints loop `name` (else the only live
/// loop, else the one that ended last) keeps, as lines to print: each
/// label with its commit, iterations in order, then the `undo-K` trees.
pub fn list(
    project: &Project,
    registry: Option<&Registry>,
    name: Option<&str>,
) -> Result<Vec<String>, CommandError> {
    if !checkpoint::in_repository(&project.root) {
        return Err(refused(
            "this project is not a git repository, so its loops keep no checkpoints",
        ));
    }
    let lock = project.lock()?;
    let scan = Scan::read(project, registry)?;
    let live = scan
        .entries
        .iter()
        .find(|e| name.is_none_or(|n| e.file().name == n));
    let (loop_name, state) = match live {
        Some(LoopEntry::Paused(l) | LoopEntry::Armed(l)) => (l.file.name.clone(), l.state.clone()),
        _ => {
            let (name, state, _) = choose(project, &lock, registry, name)?;
            (name, state)
        }
    };
    drop(lock);
    let shown = ralph_fs::display::line(&loop_name).into_owned();
    let Some(prefix) = crate::loop_file::storage::checkpoints::prefix(&loop_name, &state) else {
        return Ok(vec![format!("Loop `{shown}` keeps no checkpoints.")]);
    };
    let mut kept: Vec<(String, String)> = checkpoint::list(&project.root, &prefix)
        .into_iter()
        .filter_map(|(r, c)| Some((r.strip_prefix(&prefix)?.to_owned(), c)))
        .collect();
    // Iterations by number, then the trees rollbacks replaced.
    kept.sort_by_key(|(label, _)| (label.parse::<u64>().map_or(u64::MAX, |n| n), label.clone()));
    if kept.is_empty() {
        return Ok(vec![format!("Loop `{shown}` keeps no checkpoints yet.")]);
    }
    let mut out = vec![format!(
        "Checkpoints of loop `{shown}` (`ralph rollback --to N --name {shown}` puts one back):"
    )];
    out.extend(kept.iter().map(|(label, commit)| {
        format!(
            "  {:<8} {}",
            ralph_fs::display::line(label),
            &commit[..commit.len().min(12)]
        )
    }));
    Ok(out)
}

/// What `ralph rollback` prints.
pub fn rolled_back_text(done: &RolledBack) -> String {
    let name = ralph_fs::display::line(&done.name);
    format!(
        "↩ The work tree of loop `{name}` is back at checkpoint {to}; ignored files and .claude/ were left alone. The tree it replaced is checkpoint {undo}: `ralph rollback --to {undo} --name {name}` puts it back.",
        to = ralph_fs::display::line(&done.to),
        undo = done.undo,
    )
}

fn prefix_run(prefix: &str) -> &str {
    prefix
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
}

/// The loop a rollback is for: a live loop of this user's that is paused
/// (a running one is refused), else an ended one from the history.
fn choose(
    project: &Project,
    lock: &ProjectLock,
    registry: Option<&Registry>,
    name: Option<&str>,
) -> Result<(String, LoopState, Option<Loop>), CommandError> {
    let scan = Scan::read(project, registry)?;
    let live = scan
        .entries
        .iter()
        .find(|e| name.is_none_or(|n| e.file().name == n));
    match live {
        Some(LoopEntry::Paused(l)) => {
            return Ok((l.file.name.clone(), l.state.clone(), Some(l.clone())));
        }
        Some(LoopEntry::Armed(l)) => {
            return Err(refused(&format!(
                "loop `{}` is running; pause it first (`ralph pause --name {0}`), or wait for it to end",
                ralph_fs::display::line(&l.file.name)
            )));
        }
        Some(other) if name.is_some() => {
            return Err(refused(&format!(
                "loop `{}` is not armed by you on this machine; nothing was rolled back",
                ralph_fs::display::line(&other.file().name)
            )));
        }
        _ => {}
    }
    let (record, record_name) = latest_record(project, name)
        .ok_or_else(|| CommandError::NotLogged(name.unwrap_or("(any)").to_owned()))?;
    let ended = Loop::load(
        lock,
        LoopFile {
            name: record_name.clone(),
            path: record,
        },
    )?
    .ok_or_else(|| CommandError::NotLogged(record_name.clone()))?;
    Ok((record_name, ended.state, None))
}

/// The newest history record (`<stamp>-<name>.md`) of `name` (any name when
/// `None`), with the loop's name. Only a real history folder is read.
pub fn latest_record(project: &Project, name: Option<&str>) -> Option<(PathBuf, String)> {
    if !ralph_fs::safe_fs::check_dir(&project.root, ".claude/ralph/history").unwrap_or(false) {
        return None;
    }
    let mut found: Vec<(String, String)> = std::fs::read_dir(project.history_dir())
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|file| {
            let stem = file.strip_suffix(".md")?;
            let (_, loop_name) = stem.split_once('-')?;
            let wanted = name.is_none_or(|n| n == loop_name);
            (wanted && crate::control::valid_name(loop_name))
                .then(|| (file.clone(), loop_name.to_owned()))
        })
        .collect();
    found.sort();
    let (file, loop_name) = found.pop()?;
    Some((project.history_dir().join(file), loop_name))
}

/// `undo-<k>`, the first `k` not yet used under `prefix`.
fn next_undo(project: &Project, prefix: &str) -> String {
    let used: Vec<u64> = checkpoint::list(&project.root, prefix)
        .iter()
        .filter_map(|(r, _)| r.strip_prefix(prefix)?.strip_prefix("undo-")?.parse().ok())
        .collect();
    format!("undo-{}", used.iter().max().map_or(1, |k| k + 1))
}

fn no_such_checkpoint(project: &Project, name: &str, prefix: &str, to: &str) -> CommandError {
    let kept: Vec<String> = checkpoint::list(&project.root, prefix)
        .into_iter()
        .filter_map(|(r, _)| r.strip_prefix(prefix).map(str::to_owned))
        .collect();
    let kept = if kept.is_empty() {
        "none".to_owned()
    } else {
        kept.join(", ")
    };
    refused(&format!(
        "loop `{}` has no checkpoint `{}` (kept: {kept}); nothing was rolled back",
        ralph_fs::display::line(name),
        ralph_fs::display::line(to)
    ))
}

fn refused(why: &str) -> CommandError {
    CommandError::Recover(why.to_owned())
}
