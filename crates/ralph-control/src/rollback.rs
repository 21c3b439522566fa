//! `ralph rollback --to N [--name NAME]`: the work tree of a checkpoint
//! (`loop_file/storage/checkpoints.rs`, kept outside the project) put back,
//! only while its loop is paused or ended. The tree it replaces is kept
//! first as checkpoint `undo-<k>`, every file in it whatever the index's
//! marks say, so a rollback is undone by another. Ignored files, `.claude/`
//! and the files checkpoints leave out are never touched (`fs/checkpoint.rs`,
//! `restore`).

use std::path::PathBuf;

use crate::commands::CommandError;
use ralph_fs::checkpoint;
use ralph_state::lifecycle::{LogEntry, Logged, Loop};
use ralph_state::scan::{LoopEntry, Scan};
use ralph_state::storage::checkpoints::{self, Kept};
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::{Project, ProjectLock, StoreError};
use ralph_state::time::Timestamp;

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
/// most recently ended) back into the work tree. The checkpoint is the
/// tree (an older arming's: the commit) the per-user record names, read
/// from ralph's private store: nothing in the project (a ref, a history
/// record) chooses it.
pub fn rollback(
    project: &Project,
    registry: Option<&Registry>,
    name: Option<&str>,
    to: &str,
    now: Timestamp,
) -> Result<RolledBack, CommandError> {
    let registry = needs(project, registry)?;
    let lock = project.lock()?;
    let (loop_name, kept, live) = choose(project, &lock, registry, name, false)?;
    let kept = kept.ok_or_else(|| no_such_checkpoint(None, &loop_name, to))?;
    let target = kept
        .commit(to)
        .ok_or_else(|| no_such_checkpoint(Some(&kept), &loop_name, to))?;
    let objects = kept.objects().ok_or_else(|| {
        refused("the checkpoints' store names no project objects; nothing was rolled back")
    })?;
    if !checkpoint::holds(&project.root, &objects, &target) {
        return Err(refused(&format!(
            "checkpoint `{}` is recorded as {target}, which its store no longer holds; nothing was rolled back",
            ralph_fs::display::line(to)
        )));
    }
    let undo = next_undo(&kept);
    let message = format!("ralph {loop_name}: the work tree a rollback to {to} replaced");
    let current =
        checkpoint::snapshot(&project.root, &objects, &message, true).map_err(StoreError::from)?;
    kept.append(&undo, &current.commit).ok_or_else(|| {
        refused("the tree a rollback replaces could not be recorded; nothing was rolled back")
    })?;
    checkpoint::restore(&project.root, &objects, &current, &target).map_err(StoreError::from)?;
    if let Some(live) = live {
        LogEntry::new(
            now,
            Logged::Pass,
            format!("rolled back to checkpoint {to} ({target}); the tree it replaced is checkpoint {undo}"),
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
/// label with its commit, iterations in order, then the `undo-K` trees,
/// and the files checkpoints left out.
pub fn list(
    project: &Project,
    registry: Option<&Registry>,
    name: Option<&str>,
) -> Result<Vec<String>, CommandError> {
    let registry = needs(project, registry)?;
    let lock = project.lock()?;
    let (loop_name, kept, _) = choose(project, &lock, registry, name, true)?;
    drop(lock);
    let shown = ralph_fs::display::line(&loop_name).into_owned();
    let Some(kept) = kept else {
        return Ok(vec![format!("Loop `{shown}` keeps no checkpoints yet.")]);
    };
    let mut entries = kept.entries();
    // Iterations by number, then the trees rollbacks replaced.
    entries.sort_by_key(|(label, _)| (label.parse::<u64>().map_or(u64::MAX, |n| n), label.clone()));
    entries.dedup_by(|a, b| a.0 == b.0);
    if entries.is_empty() {
        return Ok(vec![format!("Loop `{shown}` keeps no checkpoints yet.")]);
    }
    let mut out = vec![format!(
        "Checkpoints of loop `{shown}` (`ralph rollback --to N --name {shown}` puts one back):"
    )];
    out.extend(entries.iter().map(|(label, commit)| {
        format!(
            "  {:<8} {}",
            ralph_fs::display::line(label),
            &commit[..commit.len().min(12)]
        )
    }));
    out.extend(checkpoints::left_out_sentence(&kept.left_out()));
    Ok(out)
}

/// The per-user folder checkpoints need, in a git project.
fn needs<'a>(
    project: &Project,
    registry: Option<&'a Registry>,
) -> Result<&'a Registry, CommandError> {
    if !checkpoint::in_repository(&project.root) {
        return Err(refused(
            "this project is not a git repository, so its loops keep no checkpoints",
        ));
    }
    registry.ok_or_else(|| {
        refused("ralph has no per-user state folder (set HOME or XDG_STATE_HOME), where checkpoints are kept")
    })
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

/// The loop a rollback is for, with the checkpoints its arming kept: a
/// live loop of this user's that is paused (a running one is refused
/// unless `running` is taken), else the newest arming of an ended one in
/// the per-user record (the history only names the loop when no name is
/// given).
fn choose(
    project: &Project,
    _lock: &ProjectLock,
    registry: &Registry,
    name: Option<&str>,
    running: bool,
) -> Result<(String, Option<Kept>, Option<Loop>), CommandError> {
    let scan = Scan::read(project, Some(registry))?;
    let live = scan
        .entries
        .iter()
        .find(|e| name.is_none_or(|n| e.file().name == n));
    let open = |l: &Loop| {
        let nonce = l.state.nonce.as_deref()?;
        Kept::open(registry, &project.root, &l.file.name, nonce, false)
    };
    match live {
        Some(LoopEntry::Paused(l)) => {
            return Ok((l.file.name.clone(), open(l), Some(l.clone())));
        }
        Some(LoopEntry::Armed(l)) if running => {
            return Ok((l.file.name.clone(), open(l), None));
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
    let loop_name = match name {
        Some(n) => n.to_owned(),
        None => latest_record(project, None)
            .map(|(_, n)| n)
            .ok_or_else(|| CommandError::NotLogged("(any)".to_owned()))?,
    };
    let kept = Kept::latest(registry, &project.root, &loop_name);
    if kept.is_none() && latest_record(project, Some(&loop_name)).is_none() {
        return Err(CommandError::NotLogged(loop_name));
    }
    Ok((loop_name, kept, None))
}

/// The newest history record (`<stamp>-<name>.md`) of `name` (any name when
/// `None`), with the loop's name. Only a real history folder is read.
pub(crate) fn latest_record(project: &Project, name: Option<&str>) -> Option<(PathBuf, String)> {
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
            (wanted && crate::commands::valid_name(loop_name))
                .then(|| (file.clone(), loop_name.to_owned()))
        })
        .collect();
    found.sort();
    let (file, loop_name) = found.pop()?;
    Some((project.history_dir().join(file), loop_name))
}

/// `undo-<k>`, the first `k` not yet used.
fn next_undo(kept: &Kept) -> String {
    let used: Vec<u64> = kept
        .entries()
        .iter()
        .filter_map(|(l, _)| l.strip_prefix("undo-")?.parse().ok())
        .collect();
    format!(
        "undo-{}",
        used.iter().max().map_or(1, |k| k.saturating_add(1))
    )
}

fn no_such_checkpoint(kept: Option<&Kept>, name: &str, to: &str) -> CommandError {
    let mut labels: Vec<String> = kept
        .map(|k| k.entries().into_iter().map(|(l, _)| l).collect())
        .unwrap_or_default();
    labels.dedup();
    let labels = if labels.is_empty() {
        "none".to_owned()
    } else {
        labels.join(", ")
    };
    refused(&format!(
        "loop `{}` has no checkpoint `{}` (kept: {labels}); nothing was rolled back",
        ralph_fs::display::line(name),
        ralph_fs::display::line(to)
    ))
}

fn refused(why: &str) -> CommandError {
    CommandError::Recover(why.to_owned())
}
