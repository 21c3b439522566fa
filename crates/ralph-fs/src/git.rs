//! "Did this turn change anything?" for the no-progress breaker, answered
//! with the cheapest signal that can decide, so that the common turn does
//! not cost more as the repository grows.
//!
//! 1. **A file edit the transcript proves**: an `Edit`, `Write`, `MultiEdit`
//!    or `NotebookEdit` call whose result was not an error, since the last
//!    stop (found by `transcript::scan_appended`). That is progress, whatever
//!    git would say (an edit reverted by the next edit still counts), and no
//!    process runs.
//! 2. **Otherwise, the working tree**: one `git status --porcelain=v2`
//!    (HEAD, the index, every file `stat`ed), hardened against
//!    repository-configured programs and with a time limit (a second, tiny
//!    `git config` runs first only when the repository's configuration may
//!    define a filter, see `git_config`). This is the
//!    signal that sees a `Bash`-only turn, a commit, or a formatter.
//!
//! The result is a string that the pure `decide` compares with the one
//! stored at the previous stop: equal means "no progress". A proven edit
//! yields a string that differs from the stored one by construction, and a
//! working-tree fingerprint only ever equals a working-tree fingerprint. So
//! after a turn decided by an edit, the next undecided turn sets a new
//! baseline and counts as progress: the breaker can fire one turn later
//! than the strict count, never earlier.
//!
//! HEAD and the index's identity are not a separate, cheaper signal: a
//! commit seen there would still need the tree read to give the next turn
//! its baseline, and `git status` reports both anyway.
//! `.claude/` is left out: ralph's own files change at every stop.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::fingerprint::fingerprint;

/// The longest the working-tree fallback may take (every git process it starts);
/// past it the breaker skips this stop rather than hold the session.
pub const STATUS_TIME_LIMIT: Duration = Duration::from_secs(10);

/// The most of `git status` output kept: past it, the stop is skipped.
const MAX_STATUS_BYTES: u64 = 64 * 1024 * 1024;

/// The fingerprint a file edit the transcript proves gives, without reading
/// the tree: `None` when there is none, or when the previous stop already
/// stood on the same edit (then the tree decides).
pub fn edit_fingerprint(previous: Option<&str>, edit_proven: Option<u64>) -> Option<String> {
    let proven = format!("edit-{}", edit_proven?);
    (previous != Some(proven.as_str())).then_some(proven)
}

/// The no-progress fingerprint of a work tree a loop's kept index staged
/// (`checkpoint::stage_kept`): its tree and HEAD as the repository's files
/// name it (read here, no git process), so a commit is progress too. Only
/// ever equal to another staged fingerprint.
pub fn staged_fingerprint(root: &Path, tree: &str) -> String {
    fingerprint(&format!("staged {tree}\n{}", head_stamp(root)))
}

/// What `HEAD` says and what the branch it names points at (its loose ref,
/// else the packed refs' size and time): enough to tell that HEAD moved.
/// A linked worktree's `.git` file leads to its own folder (`gitdir:`) and
/// that one to the shared one (`commondir`), where the branches are. Read
/// without following a link; what cannot be read is left empty.
fn head_stamp(root: &Path) -> String {
    let read = |path: &Path| crate::safe_fs::read_text(path, 4096).unwrap_or_default();
    let dot_git = root.join(".git");
    let own = match read(&dot_git).trim().strip_prefix("gitdir: ") {
        Some(linked) => root.join(linked),
        None => dot_git,
    };
    let common = match read(&own.join("commondir")).trim() {
        "" => own.clone(),
        shared => own.join(shared),
    };
    let head = read(&own.join("HEAD"));
    let named = head
        .trim()
        .strip_prefix("ref: ")
        .filter(|r| r.starts_with("refs/") && !r.split('/').any(|p| p.is_empty() || p == ".."))
        .map(|r| read(&common.join(r)))
        .unwrap_or_default();
    let packed = std::fs::symlink_metadata(common.join("packed-refs"))
        .ok()
        .map(|m| {
            let modified = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!("{}:{modified}", m.len())
        })
        .unwrap_or_default();
    format!("{head}\0{named}\0{packed}")
}

/// `git -C root …` with the hardening of [`crate::git`]: no program the
/// repository's configuration names runs (fsmonitor, hooks, pager, signer,
/// external diff; filters and merge drivers through `overrides`).
/// `git status` inside each submodule is avoided with
/// `--ignore-submodules=dirty`.
pub(crate) fn git(root: &Path, overrides: &[(String, String)]) -> std::io::Result<Command> {
    crate::git_runner::command(root, overrides)
}

fn run_until(command: Command, deadline: Instant, ok_codes: &[i32]) -> Option<Vec<u8>> {
    crate::git_runner::run_until(command, deadline, ok_codes, MAX_STATUS_BYTES)
}

/// Every filter and merge driver any configuration file reachable from
/// `root` defines (in any scope, includes followed whatever their
/// condition), blanked: see [`crate::git_runner::driver_overrides`].
pub(crate) fn filter_overrides(root: &Path, deadline: Instant) -> Option<Vec<(String, String)>> {
    crate::git_runner::driver_overrides(root, deadline)
}

/// The overrides for `git status`: [`filter_overrides`], unless the
/// drivers can be known without starting git (`git_config`), which spares
/// a process at every stop that needs the working tree.
pub(crate) fn status_overrides(root: &Path, deadline: Instant) -> Option<Vec<(String, String)>> {
    match crate::git_config::drivers_without_git(root) {
        Some(drivers) => Some(blank(drivers.iter().map(String::as_str))),
        None => filter_overrides(root, deadline),
    }
}

/// The overrides that blank each driver: a blank command is no filter, and
/// a driver marked `required` is released so that git does not fail.
fn blank<'a>(drivers: impl IntoIterator<Item = &'a str>) -> Vec<(String, String)> {
    drivers
        .into_iter()
        .flat_map(|d| {
            [
                (format!("filter.{d}.clean"), String::new()),
                (format!("filter.{d}.smudge"), String::new()),
                (format!("filter.{d}.process"), String::new()),
                (format!("filter.{d}.required"), "false".to_owned()),
            ]
        })
        .collect()
}

/// One hardened, time-limited `git status --porcelain=v2 --branch -z` of the
/// whole tree but `.claude/` (with `extra` options), as text; `None` when
/// git cannot run or does not answer within `limit`.
fn porcelain_status(root: &Path, limit: Duration, extra: &[&str]) -> Option<String> {
    let deadline = Instant::now() + limit;
    let overrides = status_overrides(root, deadline)?;
    let mut command = git(root, &overrides).ok()?;
    command.args([
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--untracked-files=all",
        "--ignore-submodules=dirty",
    ]);
    command.args(extra).args(["--", ".", ":(exclude).claude"]);
    let out = run_until(command, deadline, &[0])?;
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// The working tree's fingerprint: HEAD, the changed paths with their index
/// and HEAD object names, and the size and modification time of each
/// changed file (nothing is hashed by content). `None` when git cannot run
/// or does not answer within `limit`.
pub fn working_tree(root: &Path, limit: Duration) -> Option<String> {
    let status = porcelain_status(root, limit, &["--no-renames"])?;
    let mut summary = status.clone();
    for path in changed_paths(&status) {
        if let Ok(meta) = root.join(path).symlink_metadata() {
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            summary.push_str(&format!("\0{}:{modified}", meta.len()));
        }
    }
    Some(fingerprint(&summary))
}

/// The commit HEAD names and whether the working tree is clean (`.claude/`
/// aside), read with the same hardened, time-limited `git status` as the
/// fingerprint: a receipt's "passed on". `None` when `root` is no git work
/// tree or git did not answer in time; the commit is `None` before the
/// first commit.
pub fn head_and_clean(root: &Path, limit: Duration) -> Option<(Option<String>, bool)> {
    std::fs::symlink_metadata(root.join(".git")).ok()?;
    let status = porcelain_status(root, limit, &[])?;
    let head = status
        .split('\0')
        .find_map(|f| f.strip_prefix("# branch.oid "))
        .filter(|oid| oid.len() >= 7 && oid.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_owned);
    // Every entry that is not a `# ` header names a changed path.
    let clean = status
        .split('\0')
        .all(|f| f.is_empty() || f.starts_with("# "));
    Some((head, clean))
}

/// The paths of `git status --porcelain=v2 -z` entries. A rename (`2`)
/// entry is followed by its original path as a separate field, skipped.
fn changed_paths(status: &str) -> Vec<&str> {
    let mut paths = Vec::new();
    let mut fields = status.split('\0');
    while let Some(entry) = fields.next() {
        let path = match entry.as_bytes().first() {
            Some(b'1') => entry.splitn(9, ' ').nth(8),
            Some(b'2') => {
                let path = entry.splitn(10, ' ').nth(9);
                fields.next();
                path
            }
            Some(b'u') => entry.splitn(11, ' ').nth(10),
            Some(b'?') => entry.get(2..),
            _ => None,
        };
        paths.extend(path.filter(|p| !p.is_empty()));
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::process::Stdio;

    #[cfg(unix)]
    fn git_in(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    #[cfg(unix)]
    fn tree(dir: &Path) -> Option<String> {
        working_tree(dir, Duration::from_secs(60))
    }

    #[test]
    fn parses_porcelain_v2_paths() {
        let status = "# branch.oid abc\0# branch.head main\0\
            1 .M N... 100644 100644 100644 aaa bbb src/a file.rs\0\
            2 R. N... 100644 100644 100644 aaa bbb R100 new.rs\0old.rs\0\
            u UU N... 100644 100644 100644 100644 a b c conflict.rs\0\
            ? notes.txt\0";
        assert_eq!(
            changed_paths(status),
            ["src/a file.rs", "new.rs", "conflict.rs", "notes.txt"]
        );
    }

    // Needs git, which the Windows tests under Wine do not have.
    #[cfg(unix)]
    #[test]
    fn working_tree_changes_when_the_tree_changes() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(tree(dir.path()), None);
        git_in(dir.path(), &["init", "-q"]);
        std::fs::write(dir.path().join("a"), "1").unwrap();
        let untracked = tree(dir.path()).unwrap();
        git_in(dir.path(), &["add", "a"]);
        git_in(dir.path(), &["commit", "-qm", "x"]);
        let committed = tree(dir.path()).unwrap();
        assert_ne!(untracked, committed);
        assert_eq!(
            tree(dir.path()).unwrap(),
            committed,
            "stable when nothing changes"
        );
        std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
        std::fs::write(dir.path().join(".claude/x-loop.local.md"), "ignored").unwrap();
        assert_eq!(tree(dir.path()).unwrap(), committed, ".claude/ is left out");
        std::fs::write(dir.path().join("a"), "22").unwrap();
        assert_ne!(tree(dir.path()).unwrap(), committed);
    }

    /// The no-progress fingerprint after this turn; `None` when `root` is not a
    /// git work tree or the working tree could not be read in time (the
    /// breaker then neither counts nor resets at this stop).
    ///
    /// `previous` is the fingerprint stored at the last stop; `edit_proven` is
    /// the transcript offset up to which a successful file edit was proven
    /// since then, if one was.
    #[cfg(unix)]
    fn progress_fingerprint(
        root: &Path,
        previous: Option<&str>,
        edit_proven: Option<u64>,
    ) -> Option<String> {
        std::fs::symlink_metadata(root.join(".git")).ok()?;
        if let Some(proven) = edit_fingerprint(previous, edit_proven) {
            return Some(proven);
        }
        working_tree(root, STATUS_TIME_LIMIT)
    }

    #[cfg(unix)]
    #[test]
    fn proven_edits_decide_without_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(progress_fingerprint(root, None, Some(10)), None, "not git");
        git_in(root, &["init", "-q"]);
        git_in(root, &["commit", "-q", "--allow-empty", "-m", "x"]);
        let base = progress_fingerprint(root, None, None).unwrap();
        assert_eq!(
            progress_fingerprint(root, Some(&base), None).as_deref(),
            Some(base.as_str()),
            "nothing changed: the same string"
        );
        let edited = progress_fingerprint(root, Some(&base), Some(100)).unwrap();
        assert_ne!(edited, base);
        let again = progress_fingerprint(root, Some(&edited), Some(100)).unwrap();
        assert_ne!(again, edited, "a proven edit never looks like no change");
        let after_edit = progress_fingerprint(root, Some(&edited), None).unwrap();
        assert_ne!(
            after_edit, edited,
            "the first undecided turn sets a baseline"
        );
        git_in(root, &["commit", "-q", "--allow-empty", "-m", "y"]);
        let moved = progress_fingerprint(root, Some(&after_edit), None).unwrap();
        assert_ne!(moved, after_edit, "a commit is seen");
        std::fs::write(root.join("new"), "x").unwrap();
        let seen = progress_fingerprint(root, Some(&after_edit), None).unwrap();
        assert_ne!(seen, after_edit);
    }

    /// A commit moves the staged fingerprint though the tree is the same,
    /// in a repository and in a linked worktree of it.
    #[cfg(unix)]
    #[test]
    fn a_commit_moves_the_staged_fingerprint_in_a_linked_worktree_too() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("main");
        std::fs::create_dir(&root).unwrap();
        git_in(&root, &["init", "-q"]);
        std::fs::write(root.join("a.txt"), "one\n").unwrap();
        git_in(&root, &["add", "-A"]);
        git_in(&root, &["commit", "-qm", "one"]);
        let linked = dir.path().join("linked");
        git_in(&root, &["worktree", "add", "-q", linked.to_str().unwrap()]);
        for at in [&root, &linked] {
            let before = staged_fingerprint(at, "t");
            assert_eq!(staged_fingerprint(at, "t"), before);
            git_in(at, &["commit", "-q", "--allow-empty", "-m", "empty"]);
            assert_ne!(staged_fingerprint(at, "t"), before, "{}", at.display());
            assert_ne!(staged_fingerprint(at, "u"), staged_fingerprint(at, "t"));
        }
    }

    // Needs git, which the Windows tests under Wine do not have.
    #[cfg(unix)]
    #[test]
    fn a_repository_configured_program_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git_in(root, &["init", "-q"]);
        std::fs::write(root.join("a"), "1").unwrap();
        std::fs::write(root.join("b"), "1").unwrap();
        std::fs::write(root.join(".gitattributes"), "a filter=x\nb filter=y\n").unwrap();
        git_in(root, &["add", "a", "b", ".gitattributes"]);
        let marker = root.join("ran");
        let evil = format!("touch '{}'; cat", marker.display());
        for (key, value) in [
            ("core.fsmonitor", evil.as_str()),
            ("filter.x.clean", evil.as_str()),
            ("filter.x.required", "true"),
            ("filter.y.process", evil.as_str()),
            ("core.pager", evil.as_str()),
        ] {
            git_in(root, &["config", key, value]);
        }
        // A stat change makes git look at the content: a clean filter runs there.
        std::fs::write(root.join("a"), "2").unwrap();
        std::fs::write(root.join("b"), "2").unwrap();
        assert!(tree(root).is_some());
        assert!(!marker.exists(), "a configured program ran");
        // The test can fail: a plain `git status` does run one.
        let _ = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(root)
            .output();
        assert!(
            marker.exists(),
            "the planted programs did not run even unguarded"
        );
    }

    // The repository's config names no filter itself, but includes a file
    // that does: the scan without git must not be fooled into skipping it.
    #[cfg(unix)]
    #[test]
    fn a_filter_from_an_included_file_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git_in(root, &["init", "-q"]);
        std::fs::write(root.join("a"), "1").unwrap();
        std::fs::write(root.join(".gitattributes"), "a filter=x\n").unwrap();
        git_in(root, &["add", "a", ".gitattributes"]);
        let marker = root.join("ran");
        std::fs::write(
            root.join(".git/more.cfg"),
            format!(
                "[filter \"x\"]\n\tclean = touch '{}'; cat\n",
                marker.display()
            ),
        )
        .unwrap();
        git_in(root, &["config", "include.path", "more.cfg"]);
        std::fs::write(root.join("a"), "2").unwrap();
        assert!(tree(root).is_some());
        assert!(!marker.exists(), "an included filter ran");
        let _ = Command::new("git")
            .args(["status"])
            .current_dir(root)
            .output();
        assert!(
            marker.exists(),
            "the included filter did not run even unguarded"
        );
    }
}
