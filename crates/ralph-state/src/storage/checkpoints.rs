//! A loop's checkpoints (`fs/checkpoint.rs`): one per iteration at the
//! stop that ends it, kept outside the project, in the per-user state
//! folder (`Registry::checkpoint_place`), a folder per loop and arming:
//! `checkpoints/<project>/<loop>/<nonce>/` holds the private object store
//! (`objects/`, borrowing the project's), `record` (each checkpoint's label
//! and tree id, or commit id for an arming of an older ralph: the only list
//! a rollback trusts), `left-out` (the files checkpoints left out),
//! `borrows` (the project's object folder), and the loop's kept index
//! (`index`, its stat cache warm from one stop to the next) with the tree
//! it wrote last (`tree`), and, for `--protect`/`--scope`, the index the
//! paths changed since arming are read through (`compared`);
//! `<loop>/latest` names the newest arming. Which one was the last whose
//! `--check` passed; and their pruning when the loop's history goes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fields::state::LoopState;
use crate::storage::registry::Registry;
use crate::storage::store::Project;
use ralph_fs::checkpoint::{self, LeftOut, Objects, Why};
use ralph_fs::safe_fs;

/// The most one arming's store may hold; past it, no more checkpoints.
pub(crate) const MAX_STORE_BYTES: u64 = 1024 * 1024 * 1024;

/// How often (in stops) the store's size is walked while under half of
/// [`MAX_STORE_BYTES`] ([`Kept::has_room`]).
const SIZE_WALK_EVERY: u32 = 16;

/// The most of a record or a left-out list read.
const MAX_RECORD_BYTES: u64 = 4 * 1024 * 1024;

/// One arming's checkpoints, in the per-user state folder.
pub struct Kept {
    dir: PathBuf,
}

/// A file checkpoints left out, as kept in `left-out`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Noted {
    pub path: String,
    pub bytes: u64,
    pub secret: bool,
}

impl Kept {
    /// The checkpoints of the arming `nonce` of loop `name` of the project
    /// at `root`; made when missing and `create` (the store, `borrows`,
    /// `latest`). `None` when a name is not plain or the folder is unsafe.
    pub fn open(
        registry: &Registry,
        root: &Path,
        name: &str,
        nonce: &str,
        create: bool,
    ) -> Option<Kept> {
        if !checkpoint::plain(name) || !checkpoint::plain(nonce) {
            return None;
        }
        let loop_dir = place(registry, root)?.join(name);
        let dir = loop_dir.join(nonce);
        let fresh = std::fs::symlink_metadata(&dir).is_err();
        if fresh && !create {
            return None;
        }
        registry.ensure_private(&dir.join("objects")).ok()?;
        let kept = Kept { dir };
        if fresh {
            let borrowed = checkpoint::project_objects(root).ok()?;
            safe_fs::create_new(&kept.dir.join("borrows"), borrowed.to_str()?.as_bytes()).ok()?;
            safe_fs::replace(&loop_dir.join("latest"), nonce.as_bytes()).ok()?;
            // What the stops leave out by name or size, named from the first
            // (one listing of the tree, at this stop only): each stop's
            // staging lists nothing, and names only the large files it met.
            kept.note_left_out(&checkpoint::would_leave_out(root));
        }
        Some(kept)
    }

    /// The newest arming of loop `name` that kept checkpoints.
    pub fn latest(registry: &Registry, root: &Path, name: &str) -> Option<Kept> {
        if !checkpoint::plain(name) {
            return None;
        }
        let latest = place(registry, root)?.join(name).join("latest");
        let nonce = safe_fs::read_text(&latest, 256).ok()?;
        Kept::open(registry, root, name, nonce.trim(), false)
    }

    /// Where new objects go and which they borrow.
    pub fn objects(&self) -> Option<Objects> {
        let borrowed = safe_fs::read_text(&self.dir.join("borrows"), 64 * 1024).ok()?;
        Some(Objects {
            private: self.dir.join("objects"),
            borrowed: PathBuf::from(borrowed),
        })
    }

    /// Every checkpoint kept, as (label, commit), in the order taken.
    pub fn entries(&self) -> Vec<(String, String)> {
        let text =
            safe_fs::read_text(&self.dir.join("record"), MAX_RECORD_BYTES).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(label, commit)| {
                checkpoint::plain(label) && ralph_fs::tree_diff::is_object_id(commit)
            })
            .map(|(l, c)| (l.to_owned(), c.to_owned()))
            .collect()
    }

    /// The commit recorded for `label` (the last one, if recorded twice).
    pub fn commit(&self, label: &str) -> Option<String> {
        self.entries()
            .into_iter()
            .rev()
            .find(|(l, _)| l == label)
            .map(|(_, c)| c)
    }

    /// Records `commit` as checkpoint `label`.
    pub fn append(&self, label: &str, commit: &str) -> Option<()> {
        if !checkpoint::plain(label) || !ralph_fs::tree_diff::is_object_id(commit) {
            return None;
        }
        safe_fs::append(
            &self.dir.join("record"),
            format!("{label} {commit}\n").as_bytes(),
        )
        .ok()
    }

    /// The files checkpoints of this arming left out, by path.
    pub fn left_out(&self) -> Vec<Noted> {
        let text =
            safe_fs::read_text(&self.dir.join("left-out"), MAX_RECORD_BYTES).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Adds what a snapshot left out to the list (one entry per path, the
    /// newest size).
    pub(crate) fn note_left_out(&self, left: &[LeftOut]) {
        if left.is_empty() {
            return;
        }
        let mut all = self.left_out();
        for l in left {
            all.retain(|n| n.path != l.path);
            all.push(Noted {
                path: l.path.clone(),
                bytes: l.bytes,
                secret: l.why == Why::Secret,
            });
        }
        all.sort_by(|a, b| a.path.cmp(&b.path));
        let text: String = all
            .iter()
            .filter_map(|n| serde_json::to_string(n).ok())
            .map(|l| l + "\n")
            .collect();
        let _ = safe_fs::replace(&self.dir.join("left-out"), text.as_bytes());
    }

    /// The size of the private store.
    pub fn bytes(&self) -> u64 {
        checkpoint::size_of(&self.dir.join("objects"))
    }

    /// Whether the store holds at most [`MAX_STORE_BYTES`]. A walk of it
    /// costs a `stat` per object, and a store holds thousands, so its size
    /// is walked at one stop in [`SIZE_WALK_EVERY`], and at every stop once
    /// a walk found it past half the limit; in between, the last walk's
    /// figure stands (kept in `store-size` as `<bytes> <stops since>`,
    /// written over in place: a figure half written does not read, and the
    /// store is walked again). So
    /// the store passes the limit only if the stops between two walks add
    /// more than half of it.
    fn has_room(&self) -> bool {
        let file = self.dir.join("store-size");
        let noted = safe_fs::read_text(&file, 64).ok().and_then(|text| {
            let mut words = text.split_whitespace();
            Some((
                words.next()?.parse::<u64>().ok()?,
                words.next()?.parse::<u32>().ok()?,
            ))
        });
        let (bytes, since) = match noted {
            // `since` below the period, so one more never wraps.
            Some((bytes, since)) if since < SIZE_WALK_EVERY - 1 && bytes <= MAX_STORE_BYTES / 2 => {
                (bytes, since + 1)
            }
            _ => (self.bytes(), 0),
        };
        if let Ok(noted) = safe_fs::open_lock(&file) {
            let _ = safe_fs::write_over(&noted, format!("{bytes} {since}\n").as_bytes());
        }
        bytes <= MAX_STORE_BYTES
    }

    /// Stages the work tree into this arming's kept index (`index`, beside
    /// the store): the tree, or `None` (the store full, git failing). The
    /// tree the index wrote last (`tree`) is taken out before git runs and
    /// written back after, so a stop that fails half way never leaves a
    /// tree that the index no longer matches.
    fn stage(&self, root: &Path) -> Option<String> {
        if !self.has_room() {
            return None;
        }
        let last_file = self.dir.join("tree");
        let last = safe_fs::read_text(&last_file, 256).ok();
        safe_fs::remove(&last_file);
        let leave: Vec<String> = self.left_out().into_iter().map(|n| n.path).collect();
        let index = self.dir.join("index");
        let objects = self.objects()?;
        let staged = checkpoint::stage_kept(
            root,
            &objects,
            &index,
            last.as_deref().map(str::trim),
            &leave,
        )
        .ok()?;
        self.note_left_out(&staged.left_out);
        safe_fs::replace(&last_file, staged.tree.as_bytes()).ok()?;
        Some(staged.tree)
    }

    /// Stages the work tree once for both the comparison with the armed
    /// tree `armed` and this stop's checkpoint (`one_staging`): the paths
    /// changed, and the tree when it could be written so. The tree the kept
    /// index wrote last (`tree`) is taken out, since this one is not that
    /// index's. `None` when one staging cannot serve (the caller stages twice).
    fn stage_shared(&self, root: &Path, armed: &str, excludes: Option<&str>) -> Option<Shared> {
        let room = self.has_room();
        safe_fs::remove(&self.dir.join("tree"));
        let leave: Vec<String> = self.left_out().into_iter().map(|n| n.path).collect();
        let objects = self.objects()?;
        let shared = ralph_fs::one_staging::stage_shared(
            root, &objects, &self.dir, armed, excludes, &leave, room,
        )
        .ok()?;
        if let Some(staged) = &shared.checkpoint {
            self.note_left_out(&staged.left_out);
        }
        Some(Shared {
            changed: shared.changed,
            tree: shared.checkpoint.map(|s| s.tree),
        })
    }
}

/// What one staging of a looping stop gave (`stage_shared`).
pub struct Shared {
    /// The paths changed since arming.
    pub changed: Vec<String>,
    /// This stop's checkpoint, when it could be written from that staging.
    pub tree: Option<String>,
}

/// One staging for this stop's checkpoint and the paths changed since the
/// tree `armed` recorded at arming (ignore rules `excludes`), when the loop
/// keeps both: `None` when it cannot serve (not a git project, no per-user
/// folder, one of `one_staging`'s cases), and the caller stages twice
/// ([`stage`], [`changed_since`]).
pub fn stage_shared(
    root: &Path,
    registry: Option<&Registry>,
    name: &str,
    state: &LoopState,
    armed: &str,
    excludes: Option<&str>,
) -> Option<Shared> {
    if !checkpoint::in_repository(root) {
        return None;
    }
    let kept = Kept::open(registry?, root, name, state.nonce.as_deref()?, true)?;
    kept.stage_shared(root, armed, excludes)
}

/// The per-user folder of the project at `root`'s checkpoints.
fn place(registry: &Registry, root: &Path) -> Option<PathBuf> {
    let canonical = std::fs::canonicalize(root).ok()?;
    Some(registry.checkpoint_place(&canonical))
}

/// Where this stop's checkpoint takes its tree from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The tree staged at this stop already (its no-progress fingerprint).
    Staged(String),
    /// The turn ran no tool (the transcript shows it), so the tree is the
    /// previous checkpoint's: recorded again, nothing staged.
    Previous,
    /// Nothing staged yet: staged when the checkpoint is kept.
    Stage,
}

/// A checkpoint to keep once the turn is written and the loop's lock let
/// go, one of a turn's effects (`decide::effects`): the record of the
/// arming's checkpoints gets the line `<iteration> <tree>`.
pub struct Keep {
    kept: Kept,
    root: PathBuf,
    iteration: u64,
    source: Source,
}

impl std::fmt::Debug for Keep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keep")
            .field("iteration", &self.iteration)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Keep {
    /// The iteration whose checkpoint this is.
    pub fn iteration(&self) -> u64 {
        self.iteration
    }

    /// Where its tree comes from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Records the checkpoint; best effort (git failing or slow, the store
    /// full: no checkpoint, and the loop goes on as before). Its label when
    /// one was kept.
    pub fn perform(self) -> Option<String> {
        let label = self.iteration.to_string();
        let previous = match self.source {
            Source::Previous => self
                .iteration
                .checked_sub(1)
                .and_then(|p| self.kept.commit(&p.to_string())),
            _ => None,
        };
        let tree = match (self.source, previous) {
            (_, Some(previous)) => previous,
            (Source::Staged(tree), None) => tree,
            (Source::Previous | Source::Stage, None) => self.kept.stage(&self.root)?,
        };
        self.kept.append(&label, &tree).map(|()| label)
    }
}

/// The checkpoint of iteration `iteration` of the loop `name`, to keep
/// after the lock (`None` when it can keep none: not a git project, no
/// per-user folder, a name that is not plain).
pub fn plan(
    root: &Path,
    registry: Option<&Registry>,
    name: &str,
    state: &LoopState,
    iteration: u64,
    source: Source,
) -> Option<Keep> {
    if !checkpoint::in_repository(root) {
        return None;
    }
    let kept = Kept::open(registry?, root, name, state.nonce.as_deref()?, true)?;
    Some(Keep {
        kept,
        root: root.to_owned(),
        iteration,
        source,
    })
}

/// Stages the work tree into the loop's kept index at this stop, for its
/// checkpoint and its no-progress fingerprint at once: the tree, or `None`
/// when the loop keeps no checkpoints or git failed (the caller reads the
/// tree with `git status` instead).
pub fn stage(
    root: &Path,
    registry: Option<&Registry>,
    name: &str,
    state: &LoopState,
) -> Option<String> {
    if !checkpoint::in_repository(root) {
        return None;
    }
    Kept::open(registry?, root, name, state.nonce.as_deref()?, true)?.stage(root)
}

/// The paths changed since the tree `tree` recorded at arming (with its
/// ignore rules `excludes`), read through the arming's own comparison index
/// (`compared`, beside its store: `tree_diff::changed_since_kept`, its stat
/// cache warm from one stop to the next). `None` when the loop keeps no
/// such folder (not a git project, no per-user folder) or git could not
/// tell: the caller compares through a copy of the user's index instead.
pub fn changed_since(
    root: &Path,
    registry: Option<&Registry>,
    name: &str,
    state: &LoopState,
    tree: &str,
    excludes: Option<&str>,
) -> Option<Vec<String>> {
    if !checkpoint::in_repository(root) {
        return None;
    }
    let kept = Kept::open(registry?, root, name, state.nonce.as_deref()?, true)?;
    let index = kept.dir.join("compared");
    let limit = ralph_fs::tree_diff::TREE_TIME_LIMIT;
    ralph_fs::tree_diff::changed_since_kept(root, tree, excludes, &index, limit)
}

/// The last iteration of the loop whose `--check` passed and whose
/// checkpoint exists, from its decision log (and this turn's verdict,
/// not logged yet).
pub fn last_green(
    project: &Project,
    registry: Option<&Registry>,
    name: &str,
    state: &LoopState,
    this_turn_passed: bool,
    this_turn_kept: bool,
) -> Option<u64> {
    let kept = Kept::open(
        registry?,
        &project.root,
        name,
        state.nonce.as_deref()?,
        false,
    )?;
    let mut kept: Vec<u64> = kept
        .entries()
        .iter()
        .filter_map(|(l, _)| l.parse().ok())
        .collect();
    if this_turn_kept {
        // Kept after the lock, as the turn's effect.
        kept.push(state.iteration);
    }
    let mut green: Vec<u64> = crate::storage::store::read_log_tail(&project.log_path(name), 10_000)
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
        ralph_fs::display::line(name)
    )
}

/// What arming says of the files checkpoints will leave out (in a git
/// project, when there are any now).
pub fn at_arming(root: &Path) -> Option<String> {
    if !checkpoint::in_repository(root) {
        return None;
    }
    let noted: Vec<Noted> = checkpoint::would_leave_out(root)
        .into_iter()
        .map(|l| Noted {
            path: l.path,
            bytes: l.bytes,
            secret: l.why == Why::Secret,
        })
        .collect();
    left_out_sentence(&noted)
}

/// What checkpoints leave out, as a sentence naming the files (`None`
/// when nothing was).
pub fn left_out_sentence(noted: &[Noted]) -> Option<String> {
    if noted.is_empty() {
        return None;
    }
    let shown: Vec<String> = noted
        .iter()
        .take(10)
        .map(|n| {
            let why = if n.secret {
                "a secret's name".to_owned()
            } else {
                format!("{} MiB", n.bytes / (1024 * 1024))
            };
            format!("{} ({why})", ralph_fs::display::line(&n.path))
        })
        .collect();
    let more = noted.len().saturating_sub(shown.len());
    let more = if more > 0 {
        format!(
            " and {}",
            crate::plural::count(more as u64, "more file", "more files")
        )
    } else {
        String::new()
    };
    Some(format!(
        "Left out of the checkpoints (a rollback never touches them): {}{more}.",
        shown.join(", ")
    ))
}

/// Removes the checkpoints of every arming whose loop has neither a live
/// loop file nor a history record left: checkpoints belong to the history
/// and go when it goes (ralph never prunes the history itself; a user who
/// deletes records frees their checkpoints at the next arming). Also the
/// checkpoints older ralphs kept under `refs/ralph/` in the project, of
/// such armings. Best effort.
pub fn prune(project: &Project, registry: Option<&Registry>) {
    let alive = nonces(project);
    if let Some(project_place) = registry.and_then(|r| place(r, &project.root)) {
        prune_kept(&project_place, &alive);
    }
    prune_refs(project, &alive);
}

/// Removes the arming folders under `project_place` whose nonce is not alive.
fn prune_kept(project_place: &Path, alive: &[String]) {
    let Ok(loops) = std::fs::read_dir(project_place) else {
        return;
    };
    for loop_dir in loops.filter_map(Result::ok).map(|e| e.path()) {
        if !safe_fs::kind_at(&loop_dir).is_some_and(|k| k.is_dir()) {
            continue;
        }
        let Ok(armings) = std::fs::read_dir(&loop_dir) else {
            continue;
        };
        for arming in armings.filter_map(Result::ok) {
            let nonce = arming.file_name().to_string_lossy().into_owned();
            let is_dir = arming.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && !alive.contains(&nonce) {
                let _ = std::fs::remove_dir_all(arming.path());
            }
        }
    }
}

/// Removes the refs older ralphs kept in the project of armings no longer
/// alive; never when `.git/refs/ralph` is a link.
fn prune_refs(project: &Project, alive: &[String]) {
    if !checkpoint::in_repository(&project.root) {
        return;
    }
    let dot_refs = project.root.join(".git/refs/ralph");
    if safe_fs::kind_at(&dot_refs).is_some_and(|k| !k.is_dir()) {
        return;
    }
    let refs = checkpoint::list(&project.root, checkpoint::NAMESPACE);
    if refs.is_empty() {
        return;
    }
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

#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_walked_at_one_stop_in_sixteen_while_under_half_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let kept = Kept {
            dir: dir.path().to_owned(),
        };
        std::fs::create_dir_all(dir.path().join("objects/ab")).unwrap();
        std::fs::write(dir.path().join("objects/ab/one"), [0u8; 10]).unwrap();
        let noted = || std::fs::read_to_string(dir.path().join("store-size")).unwrap();
        assert!(kept.has_room());
        assert_eq!(noted(), "10 0\n");
        std::fs::write(dir.path().join("objects/ab/two"), [0u8; 5]).unwrap();
        for stop in 1..SIZE_WALK_EVERY {
            assert!(kept.has_room());
            assert_eq!(
                noted(),
                format!("10 {stop}\n"),
                "the last walk's figure stands"
            );
        }
        assert!(kept.has_room());
        assert_eq!(noted(), "15 0\n", "walked again");
        // Past half the limit (or a figure that does not read): every stop walks.
        for text in [
            format!("{} 3\n", MAX_STORE_BYTES / 2 + 1),
            "what\n".to_owned(),
        ] {
            std::fs::write(dir.path().join("store-size"), text).unwrap();
            assert!(kept.has_room());
            assert_eq!(noted(), "15 0\n");
        }
    }
}
