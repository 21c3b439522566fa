//! Git folders nested in the work tree (`sub/.git`, a folder or a `gitdir:` file). The
//! project's own `.git` is bound read only whole ([`super::agent_git`]), but the work tree
//! is the sandboxed agent's: a `.git` it makes in `sub/` is read by any git run inside
//! `sub/` later, on the host (its `core.fsmonitor`, hooks and configuration run there).
//! So before each sandboxed iteration ralph lists the nested ones already there (bound
//! read only, [`Reach::kept`](super::reach::Reach)), and once the agent has exited (nothing
//! of it runs any more) every `.git` that is new (another path, or the same path with
//! another or a changed file behind it) is moved out of the project into ralph's per-user state
//! folder, where nothing looks for a repository, or removed when it cannot be moved
//! there. See docs/decisions/sandbox-git.md.

use std::path::{Path, PathBuf};

/// One `.git` below the project's root: where, and which file it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedGit {
    pub path: PathBuf,
    /// Device, inode and change time: a `.git` replaced at the same path is another one
    /// (even where the file system gives it the inode just freed), and one changed is the
    /// agent's now.
    id: (u64, u64, i64, i64),
    /// A link (never bound: a bind follows it).
    pub is_link: bool,
}

/// A new `.git` ralph took out of the work tree after an iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// Where the agent left it.
    pub from: PathBuf,
    pub fate: Fate,
}

/// What became of a new `.git`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Moved there, in the per-user state folder.
    Moved(PathBuf),
    /// Removed: it could not be moved (no state folder, another file system).
    Removed,
    /// Neither could be done (the reason).
    Left(String),
}

impl Quarantined {
    /// What `ralph run` says of it.
    pub fn line(&self) -> String {
        let from = ralph_fs::display::line(&self.from.to_string_lossy()).into_owned();
        let fate = match &self.fate {
            Fate::Moved(to) => format!(
                "It was moved to {}.",
                ralph_fs::display::line(&to.to_string_lossy())
            ),
            Fate::Removed => "It was removed.".to_owned(),
            Fate::Left(why) => format!(
                "ralph could neither move nor remove it ({}): remove it yourself before you run git in that folder.",
                ralph_fs::display::line(why)
            ),
        };
        format!(
            "⚠ The sandboxed agent made a git folder at {from}: a git run in its folder would read its configuration and run its programs (core.fsmonitor, hooks) on this machine. {fate}"
        )
    }
}

/// Records each of `taken` in the decision log of the loop `name` in `project` (best effort,
/// as every log line: a log that cannot be written never costs the loop).
pub fn log(project: &ralph_state::storage::store::Project, name: &str, taken: &[Quarantined]) {
    use ralph_state::lifecycle::{LogEntry, Logged};
    for q in taken {
        let why = q.line().trim_start_matches("⚠ ").to_owned();
        LogEntry::new(ralph_state::time::Timestamp::now(), Logged::Quarantine, why)
            .append(project, name);
    }
}

#[cfg(unix)]
fn id_of(meta: &std::fs::Metadata) -> (u64, u64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

#[cfg(not(unix))]
fn id_of(_meta: &std::fs::Metadata) -> (u64, u64, i64, i64) {
    (0, 0, 0, 0)
}

/// Whether git would take `name` for a repository's `.git` (case-insensitive file
/// systems find `.GIT` too).
fn is_dot_git(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .is_some_and(|n| n.eq_ignore_ascii_case(".git"))
}

/// Every `.git` below `root` but its own, whatever it is (folder, file, link), never
/// following a link nor entering a `.git`.
pub fn scan(root: &Path) -> Vec<NestedGit> {
    let mut found = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if is_dot_git(&entry.file_name()) {
                if folder != root
                    && let Ok(meta) = std::fs::symlink_metadata(&path)
                {
                    found.push(NestedGit {
                        path,
                        id: id_of(&meta),
                        is_link: meta.file_type().is_symlink(),
                    });
                }
            } else if kind.is_dir() {
                folders.push(path);
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// The entries of `now` that `before` did not hold, path and file alike.
pub(crate) fn new_since(before: &[NestedGit], now: Vec<NestedGit>) -> Vec<NestedGit> {
    now.into_iter().filter(|e| !before.contains(e)).collect()
}

/// Moves each of `new` into `<state_dir>/quarantine/nested-git-*/git` (with a note of
/// where it was), or removes it when it cannot be moved (no state folder, another file
/// system).
pub fn quarantine(new: Vec<NestedGit>, state_dir: Option<&Path>) -> Vec<Quarantined> {
    new.into_iter()
        .map(|entry| {
            let fate = match state_dir.and_then(|state| move_into(state, &entry.path)) {
                Some(to) => Fate::Moved(to),
                None => match ralph_fs::safe_fs::remove_entry(&entry.path) {
                    Ok(()) => Fate::Removed,
                    Err(e) => Fate::Left(e.to_string()),
                },
            };
            Quarantined {
                from: entry.path,
                fate,
            }
        })
        .collect()
}

/// `path` renamed into a new folder of ralph's under `state`; `None` when it could not be.
fn move_into(state: &Path, path: &Path) -> Option<PathBuf> {
    let shelf = ralph_fs::safe_fs::ensure_dir(state, "quarantine").ok()?;
    let place = tempfile::Builder::new()
        .prefix("nested-git-")
        .tempdir_in(&shelf)
        .ok()?
        .keep();
    let note = format!("{}\n", path.display());
    let _ = ralph_fs::safe_fs::create_new_unsynced(&place.join("from.txt"), note.as_bytes());
    // Named `git`, not `.git`: nothing here is taken for a repository.
    let to = place.join("git");
    if ralph_fs::safe_fs::move_entry(path, &to).is_ok() {
        Some(to)
    } else {
        let _ = ralph_fs::safe_fs::remove_entry(&place);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Unix: a replaced `.git` is told by its inode and change time (elsewhere only a new
    // path is), and the test makes a link.
    #[cfg(unix)]
    #[test]
    fn a_new_or_replaced_nested_git_is_found_and_moved_out() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        for folder in [".git", "old/.git", "replaced/.git", "deep/a/b"] {
            std::fs::create_dir_all(root.join(folder)).unwrap();
        }
        let before = scan(&root);
        assert_eq!(
            before.len(),
            2,
            "the root's own .git is not nested: {before:?}"
        );
        std::fs::remove_dir(root.join("replaced/.git")).unwrap();
        std::fs::create_dir(root.join("replaced/.git")).unwrap();
        std::fs::create_dir(root.join("deep/a/b/.git")).unwrap();
        std::fs::write(root.join("deep/.GIT"), "gitdir: /elsewhere\n").unwrap();
        std::os::unix::fs::symlink("/elsewhere", root.join("deep/a/.git")).unwrap();
        let new = new_since(&before, scan(&root));
        let names: Vec<String> = new
            .iter()
            .map(|e| {
                let rel = e.path.strip_prefix(&root).unwrap();
                rel.to_string_lossy().replace('\\', "/")
            })
            .collect();
        assert_eq!(
            names,
            ["deep/.GIT", "deep/a/.git", "deep/a/b/.git", "replaced/.git"]
        );
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let done = quarantine(new, Some(&state));
        for q in &done {
            assert!(std::fs::symlink_metadata(&q.from).is_err(), "{q:?}");
            let Fate::Moved(to) = &q.fate else {
                panic!("{q:?}")
            };
            assert!(to.starts_with(state.join("quarantine")), "{q:?}");
            assert!(std::fs::symlink_metadata(to).is_ok(), "{q:?}");
        }
        assert!(root.join("old/.git").is_dir() && root.join(".git").is_dir());
        assert!(done[0].line().contains("deep/.GIT"), "{}", done[0].line());
    }

    #[test]
    fn without_a_state_folder_a_new_nested_git_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sub/.git/hooks")).unwrap();
        let done = quarantine(scan(dir.path()), None);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].fate, Fate::Removed);
        assert!(!dir.path().join("sub/.git").exists());
        assert!(dir.path().join("sub").is_dir());
    }
}
