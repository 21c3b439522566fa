//! The place a gate runs: the work tree as ralph records it (tracked and
//! untracked files, not ignored ones, `.claude/` left out), with every
//! protected path as it was at arming, written out into a folder of its own
//! outside the project, and the held-out files added there.
//!
//! The tree is staged the way `--protect` compares it (`tree_diff::stage`:
//! a private index, the user's marks distrusted), so the tree the gate
//! runs is the tree the receipt names: no ignored file the agent wrote
//! (a `.venv/` shim, stale bytecode, a file hidden by `.git/info/exclude`)
//! reaches it. The folder is kept from gate to gate with an index of its
//! own, and git's `read-tree --reset -u` rewrites only the files that
//! differ from that index or changed on disk since (so build caches keyed
//! on modification times stay warm); files that are not in the tree
//! (a setup step's `.venv/`, `target/`, `__pycache__/`) are kept too.
//!
//! Held-out files are copied in (never linked), each one read without
//! following a link, and their digest compared with the one recorded at
//! arming: a set swapped since is refused, never run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::git_runner;
use crate::safe_fs::{self, FsError};
use crate::tree_diff::{self, Staging};

/// The most of one git listing read.
const MAX_LISTING_BYTES: u64 = 64 * 1024 * 1024;
/// The most held-out files copied, and the largest one.
const MAX_HELD_OUT_FILES: usize = 10_000;
const MAX_HELD_OUT_BYTES: u64 = 64 * 1024 * 1024;

/// The gate's staging: the comparison's (distrusted, every file under the
/// project), so the two see the same tree.
const GATED: Staging = Staging {
    paths: &["--", "."],
    staged: &[0],
    distrust: true,
};

/// The settings the gate folder's git processes get on top of the staging's:
/// no sparse checkout skips a file, every stat field counts.
const CHECKOUT: &[(&str, &str)] = &[
    ("core.sparseCheckout", "false"),
    ("core.sparseCheckoutCone", "false"),
    ("core.trustctime", "true"),
    ("core.checkStat", "default"),
    ("core.symlinks", "true"),
];

/// What the protected paths are compared with: the tree recorded at arming
/// and which paths (relative to the project root) are protected.
pub struct Baseline<'a> {
    pub tree: &'a str,
    pub protected: &'a dyn Fn(&str) -> bool,
}

/// A held-out set: the folder, and its digest recorded at arming.
pub struct HeldOut<'a> {
    pub dir: &'a Path,
    pub sha256: &'a str,
}

/// What to prepare.
pub struct SnapshotRequest<'a> {
    /// The project root (in a git work tree).
    pub root: &'a Path,
    /// The loop's gate folder, outside the project (created when missing).
    pub place: &'a Path,
    pub armed: Option<Baseline<'a>>,
    pub held_out: Option<HeldOut<'a>>,
    pub limit: Duration,
}

/// The folder prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedTree {
    /// Where the gate runs: the snapshot of the project's folder.
    pub dir: PathBuf,
    /// The tree the folder holds (the gate's tree id).
    pub tree: String,
    /// Protected paths put back as they were at arming.
    pub restored: Vec<String>,
}

/// Writes the work tree under `request.root` into `request.place` as the
/// gate's snapshot. Errors name what failed; a gate that cannot be prepared
/// is a gate that did not pass.
pub fn prepare(request: &SnapshotRequest<'_>) -> Result<PreparedTree, FsError> {
    let deadline = Instant::now() + request.limit;
    let scratch = tree_diff::stage(request.root, deadline, &GATED)?;
    let git = Git {
        root: request.root,
        overrides: scratch.overrides().to_vec(),
        deadline,
    };
    let prefix = git.prefix()?;
    let index = scratch.path().to_owned();
    // `.claude/` is ralph's and the host's, not the project's code.
    let claude = git.listing(
        &index,
        None,
        &["ls-files", "-z", "--full-name", "--", ".claude"],
    )?;
    let zero = "0".repeat(40);
    git.index_info(&index, &removals(&claude, &zero))?;
    let restored = match &request.armed {
        Some(armed) => git.put_back(&index, armed, &prefix)?,
        None => Vec::new(),
    };
    let mut tree = git.text(&index, &["write-tree"])?;
    if !prefix.is_empty() {
        // A project below the top of its repository: its own folder's tree.
        let spec = format!("{tree}:{}", prefix.trim_end_matches('/'));
        tree = git.text(&index, &["rev-parse", "--verify", "--quiet", &spec])?;
    }
    if !tree_diff::is_object_id(&tree) {
        return Err(git_error("write the gate's tree", "git wrote no tree"));
    }
    let dir = safe_fs::ensure_dir(request.place, "tree")?;
    git.check_out(&request.place.join("index"), &dir, &tree)?;
    if let Some(held) = &request.held_out {
        copy_held_out(held, &dir)?;
    }
    Ok(PreparedTree {
        dir,
        tree,
        restored,
    })
}

/// `0 <zero id>\t<path>` lines: `update-index --index-info` removes each.
fn removals(paths: &[String], zero: &str) -> Vec<u8> {
    paths
        .iter()
        .flat_map(|p| format!("0 {zero}\t{p}\0").into_bytes())
        .collect()
}

fn git_error(what: &'static str, detail: impl Into<String>) -> FsError {
    FsError::Git {
        what,
        detail: detail.into(),
    }
}

/// git for the gate's folder: hardened as the staging was.
struct Git<'a> {
    root: &'a Path,
    overrides: Vec<(String, String)>,
    deadline: Instant,
}

impl Git<'_> {
    fn command(&self, index: &Path, work: Option<&Path>) -> Result<std::process::Command, FsError> {
        let mut overrides = self.overrides.clone();
        overrides.extend(
            CHECKOUT
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let mut command = git_runner::command(self.root, &overrides)
            .map_err(|e| git_error("start git", e.to_string()))?;
        if let Some(work) = work {
            command.arg("--work-tree").arg(work);
        }
        command.env("GIT_INDEX_FILE", index);
        Ok(command)
    }

    fn run(&self, index: &Path, work: Option<&Path>, args: &[&str]) -> Result<Vec<u8>, FsError> {
        let mut command = self.command(index, work)?;
        command.args(args);
        git_runner::run_until(command, self.deadline, &[0], MAX_LISTING_BYTES).ok_or_else(|| {
            git_error(
                "prepare the gate's snapshot",
                format!("`git {}` failed or did not answer in time", args[0]),
            )
        })
    }

    fn text(&self, index: &Path, args: &[&str]) -> Result<String, FsError> {
        Ok(String::from_utf8_lossy(&self.run(index, None, args)?)
            .trim()
            .to_owned())
    }

    fn listing(
        &self,
        index: &Path,
        work: Option<&Path>,
        args: &[&str],
    ) -> Result<Vec<String>, FsError> {
        Ok(String::from_utf8_lossy(&self.run(index, work, args)?)
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect())
    }

    /// The project root's path inside its repository (`sub/` or empty).
    fn prefix(&self) -> Result<String, FsError> {
        let mut command = git_runner::command(self.root, &self.overrides)
            .map_err(|e| git_error("start git", e.to_string()))?;
        command.args(["rev-parse", "--show-prefix"]);
        let out = git_runner::run_until(command, self.deadline, &[0], MAX_LISTING_BYTES)
            .ok_or_else(|| git_error("find the project in its repository", "git failed"))?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }

    fn index_info(&self, index: &Path, lines: &[u8]) -> Result<(), FsError> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut command = self.command(index, None)?;
        command.args(["update-index", "-z", "--index-info"]);
        git_runner::run_with_input(command, lines, self.deadline, MAX_LISTING_BYTES)
            .map(|_| ())
            .ok_or_else(|| git_error("prepare the gate's snapshot", "`git update-index` failed"))
    }

    /// Every protected path that differs from the armed tree put back as
    /// it was there (or removed, when it was not there); the paths, relative
    /// to the project root.
    fn put_back(
        &self,
        index: &Path,
        armed: &Baseline<'_>,
        prefix: &str,
    ) -> Result<Vec<String>, FsError> {
        if !tree_diff::is_object_id(armed.tree) {
            return Err(git_error("read the tree recorded at arming", "no tree id"));
        }
        let args = [
            "diff-index",
            "--cached",
            "--name-only",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            armed.tree,
            "--",
            ".",
        ];
        let changed: Vec<String> = self
            .listing(index, None, &args)?
            .into_iter()
            .filter(|full| {
                full.strip_prefix(prefix)
                    .is_some_and(|p| (armed.protected)(p))
            })
            .collect();
        if changed.is_empty() {
            return Ok(changed);
        }
        let zero = "0".repeat(armed.tree.len());
        self.index_info(index, &removals(&changed, &zero))?;
        let listing = self.run(
            index,
            None,
            &["ls-tree", "-r", "-z", "--full-tree", armed.tree],
        )?;
        let wanted: std::collections::BTreeSet<&str> = changed.iter().map(String::as_str).collect();
        let lines: Vec<u8> = listing
            .split(|b| *b == 0)
            .filter(|line| {
                let path = line.splitn(2, |b| *b == b'\t').nth(1).unwrap_or_default();
                wanted.contains(String::from_utf8_lossy(path).as_ref())
            })
            .flat_map(|line| line.iter().copied().chain(std::iter::once(0)))
            .collect();
        self.index_info(index, &lines)?;
        Ok(changed
            .iter()
            .map(|full| full.strip_prefix(prefix).unwrap_or(full).to_owned())
            .collect())
    }

    /// The folder `work` made to hold `tree` through its own index: files
    /// that differ (in the index or on disk) rewritten, files gone removed,
    /// everything else (and every file not in the tree) left as it was.
    fn check_out(&self, index: &Path, work: &Path, tree: &str) -> Result<(), FsError> {
        self.run(index, Some(work), &["read-tree", "--reset", "-u", tree])?;
        // A tracked file the last gate changed but whose entry read-tree
        // kept: written again from the index.
        let changed = self.listing(index, Some(work), &["diff-files", "--name-only", "-z"])?;
        if changed.is_empty() {
            return Ok(());
        }
        let mut command = self.command(index, Some(work))?;
        command.args(["checkout-index", "-f", "-z", "--stdin"]);
        let list: Vec<u8> = changed
            .iter()
            .flat_map(|p| p.bytes().chain(std::iter::once(0)))
            .collect();
        git_runner::run_with_input(command, &list, self.deadline, MAX_LISTING_BYTES)
            .map(|_| ())
            .ok_or_else(|| git_error("prepare the gate's snapshot", "`git checkout-index` failed"))
    }
}

/// The regular files of a held-out folder, relative to it, sorted: links
/// and special files are refused, so a set is what its files say.
fn held_out_files(dir: &Path) -> Result<Vec<PathBuf>, FsError> {
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = dir.join(&rel);
        let entries = std::fs::read_dir(&here).map_err(|source| FsError::Io {
            action: "list the held-out folder",
            path: here.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = rel.join(entry.file_name());
            let kind = entry.file_type().map_err(|source| FsError::Io {
                action: "inspect",
                path: dir.join(&path),
                source,
            })?;
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                found.push(path);
            } else {
                return Err(FsError::WrongKind {
                    path: dir.join(&path),
                    found: safe_fs::describe(kind),
                    wanted: "a regular file or a folder",
                });
            }
            if found.len() > MAX_HELD_OUT_FILES {
                return Err(git_error(
                    "read the held-out set",
                    format!("more than {MAX_HELD_OUT_FILES} files"),
                ));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The SHA-256 of a held-out set: each file's path and contents, in order.
/// What arming records and every gate checks again.
pub fn held_out_digest(dir: &Path) -> Result<String, FsError> {
    let mut hash = Sha256::new();
    for rel in held_out_files(dir)? {
        let bytes = safe_fs::read_capped(&dir.join(&rel), MAX_HELD_OUT_BYTES)?;
        digest_one(&mut hash, &rel, &bytes);
    }
    Ok(hex(&hash.finalize()))
}

fn digest_one(hash: &mut Sha256, rel: &Path, bytes: &[u8]) {
    let name = rel.to_string_lossy();
    hash.update((name.len() as u64).to_le_bytes());
    hash.update(name.as_bytes());
    hash.update((bytes.len() as u64).to_le_bytes());
    hash.update(bytes);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Copies the held-out set into `dir` (merged at its root), checking its
/// digest on the bytes copied; never through a link in `dir`.
fn copy_held_out(held: &HeldOut<'_>, dir: &Path) -> Result<(), FsError> {
    let mut hash = Sha256::new();
    let mut copies = Vec::new();
    for rel in held_out_files(held.dir)? {
        let bytes = safe_fs::read_capped(&held.dir.join(&rel), MAX_HELD_OUT_BYTES)?;
        digest_one(&mut hash, &rel, &bytes);
        copies.push((rel, bytes));
    }
    let found = hex(&hash.finalize());
    if found != held.sha256 {
        return Err(git_error(
            "use the held-out set",
            format!(
                "{} changed since the loop was armed (sha256 {found}, armed with {}); arm the loop again to use the new set",
                held.dir.display(),
                held.sha256
            ),
        ));
    }
    for (rel, bytes) in copies {
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            safe_fs::ensure_dir(dir, parent)?;
        }
        safe_fs::replace_unsynced(&dir.join(&rel), &bytes)?;
    }
    Ok(())
}

#[cfg(unix)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> tempfile::TempDir {
        crate::tree_diff::tests::repo_ignoring("venv/\n")
    }

    fn request<'a>(
        root: &'a Path,
        place: &'a Path,
        armed: Option<Baseline<'a>>,
    ) -> SnapshotRequest<'a> {
        SnapshotRequest {
            root,
            place,
            armed,
            held_out: None,
            limit: Duration::from_secs(30),
        }
    }

    #[test]
    fn the_snapshot_holds_the_tree_without_ignored_files_and_with_protected_paths_as_armed() {
        let dir = repo();
        let root = dir.path();
        let armed = tree_diff::snapshot(root, Duration::from_secs(30))
            .unwrap()
            .tree;
        std::fs::write(root.join("tests/t.sh"), "true\n").unwrap();
        std::fs::write(root.join("tests/new.sh"), "true\n").unwrap();
        std::fs::write(root.join("lib.txt"), "two\n").unwrap();
        std::fs::create_dir_all(root.join("venv")).unwrap();
        std::fs::write(root.join("venv/shim"), "x").unwrap();
        std::fs::write(root.join(".git/info/exclude"), "hidden\n").unwrap();
        std::fs::write(root.join("hidden"), "x").unwrap();
        let place = tempfile::tempdir().unwrap();
        let protected = |p: &str| p.starts_with("tests/");
        let armed = Baseline {
            tree: &armed,
            protected: &protected,
        };
        let done = prepare(&request(root, place.path(), Some(armed))).unwrap();
        let read = |p: &str| std::fs::read_to_string(done.dir.join(p)).ok();
        assert_eq!(read("tests/t.sh").as_deref(), Some("test 1 = 1\n"));
        assert_eq!(read("tests/new.sh"), None, "a new protected file stays out");
        assert_eq!(read("lib.txt").as_deref(), Some("two\n"));
        assert_eq!(read("venv/shim"), None);
        assert_eq!(read("hidden"), None);
        assert_eq!(done.restored, ["tests/new.sh", "tests/t.sh"]);
        // The next gate puts back what the last one changed, keeps its caches.
        std::fs::write(done.dir.join("lib.txt"), "gate wrote\n").unwrap();
        std::fs::write(done.dir.join("cache"), "warm").unwrap();
        let again = prepare(&request(root, place.path(), None)).unwrap();
        assert_eq!(read("lib.txt").as_deref(), Some("two\n"));
        assert_eq!(read("cache").as_deref(), Some("warm"));
        assert_eq!(read("tests/t.sh").as_deref(), Some("true\n"));
        assert_ne!(again.tree, done.tree);
    }

    #[test]
    fn a_held_out_set_is_copied_in_and_a_swapped_one_refused() {
        let dir = repo();
        let held = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(held.path().join("acceptance")).unwrap();
        std::fs::write(held.path().join("acceptance/a.sh"), "exit 0\n").unwrap();
        let sha = held_out_digest(held.path()).unwrap();
        let place = tempfile::tempdir().unwrap();
        let mut req = request(dir.path(), place.path(), None);
        req.held_out = Some(HeldOut {
            dir: held.path(),
            sha256: &sha,
        });
        let done = prepare(&req).unwrap();
        assert!(done.dir.join("acceptance/a.sh").is_file());
        std::fs::write(held.path().join("acceptance/a.sh"), "exit 1\n").unwrap();
        let err = prepare(&req).unwrap_err().to_string();
        assert!(err.contains("changed since the loop was armed"), "{err}");
    }
}
