//! Checkpoints: the work tree recorded as a git commit under `refs/ralph/`,
//! and put back, without moving anything of the user's git state.
//!
//! A snapshot stages the work tree (tracked and untracked files, not ignored
//! ones, `.claude/` left as the user's index has it) into a private index,
//! as `--protect` does (`tree_diff::stage`): a copy of the user's index made
//! exclusively in a private temporary folder, so that git hashes only what
//! changed. `git write-tree` and `git commit-tree` make objects, `git
//! update-ref --no-deref` with `core.logAllRefUpdates=false` points a ref of
//! ralph's at the commit: HEAD, the branch, the user's index, the stash and every
//! reflog stay as they were. A restore is git's own checkout (`git restore
//! --worktree --no-overlay`) against that private index, so it writes no
//! file through a link, and it refuses rather than overwrite a file git
//! ignores. Every git process goes through `git_runner` (no program the
//! repository names runs).
//!
//! Names: `refs/ralph/<loop>/<run>/<label>`, where `<run>` is the arming's
//! nonce (a new arming of the same name never mixes with an older one) and
//! `<label>` an iteration number or `undo-<k>` (the tree a rollback
//! replaced). Each part is checked before it reaches git.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::safe_fs::{self, FsError};
use crate::tree_diff::{self, PrivateIndex, Staging};

/// The longest one checkpoint or restore may take, every git process
/// included; past it the stop goes on without one.
pub const TIME_LIMIT: Duration = Duration::from_secs(10);

/// The most of a git command's output read.
const MAX_OUTPUT: u64 = 64 * 1024 * 1024;

/// Where the ralph refs live.
pub const NAMESPACE: &str = "refs/ralph/";

/// The pathspec that leaves ralph's own folder out of a snapshot and a
/// restore: a loop file rolled back would be a loop rewound behind ralph.
const OUTSIDE_CLAUDE: [&str; 3] = ["--", ".", ":(exclude).claude"];

/// How a snapshot stages the work tree: the user's index trusted as it is,
/// `.claude/` left as it has it, and `git add`'s exit 1 taken (with
/// `--ignore-errors`, an unreadable file was skipped and the rest staged,
/// which is the best record there is; or `.claude/` is ignored).
const STAGING: Staging = Staging {
    paths: &OUTSIDE_CLAUDE,
    staged: &[0, 1],
    distrust: false,
};

/// The work tree as git objects, and the private index that recorded it
/// (removed when this is dropped).
pub struct Snapshot {
    pub tree: String,
    pub commit: String,
    index: PrivateIndex,
}

/// Whether `root` holds a git repository of its own (`.git`, a folder or
/// a linked worktree's file).
pub fn in_repository(root: &Path) -> bool {
    safe_fs::kind_at(&root.join(".git")).is_some_and(|k| k.is_dir() || k.is_file())
}

/// `refs/ralph/<loop>/<run>/<label>` when every part is a plain name
/// (letters, digits, `-`, `_`, at most 64 characters), else `None`.
pub fn ref_name(loop_name: &str, run: &str, label: &str) -> Option<String> {
    [loop_name, run, label]
        .iter()
        .all(|part| plain(part))
        .then(|| format!("{NAMESPACE}{loop_name}/{run}/{label}"))
}

fn plain(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 64
        && !part.starts_with('-')
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Records the work tree as a commit (not yet referenced: see [`store`]),
/// `message` its message. Touches nothing of the user's.
pub fn snapshot(root: &Path, message: &str) -> Result<Snapshot, FsError> {
    let deadline = Instant::now() + TIME_LIMIT;
    let index = tree_diff::stage(root, deadline, &STAGING)?;
    let mut write = index.git().map_err(start_error)?;
    write.arg("write-tree");
    let tree = one_line(run(write, deadline, &[0], "write the tree")?);
    let mut commit = git_command(root, index.overrides())?;
    commit.args(["commit-tree", &tree, "-m", message]);
    for (key, value) in [
        ("GIT_AUTHOR_NAME", "ralph"),
        ("GIT_AUTHOR_EMAIL", "ralph@localhost"),
        ("GIT_COMMITTER_NAME", "ralph"),
        ("GIT_COMMITTER_EMAIL", "ralph@localhost"),
    ] {
        commit.env(key, value);
    }
    let commit = one_line(run(commit, deadline, &[0], "write the commit")?);
    Ok(Snapshot {
        tree,
        commit,
        index,
    })
}

/// Points `reference` (from [`ref_name`]) at `commit`, writing no reflog.
pub fn store(root: &Path, reference: &str, commit: &str) -> Result<(), FsError> {
    let deadline = Instant::now() + TIME_LIMIT;
    let mut command = git_command(
        root,
        &[("core.logAllRefUpdates".to_owned(), "false".to_owned())],
    )?;
    command.args(["update-ref", "--no-deref", reference, commit]);
    run(command, deadline, &[0], "store the checkpoint").map(|_| ())
}

/// The commit `reference` names, when it names one.
pub fn resolve(root: &Path, reference: &str) -> Option<String> {
    if !reference.starts_with(NAMESPACE) {
        return None;
    }
    let mut command = git_command(root, &[]).ok()?;
    command.args([
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        &format!("{reference}^{{commit}}"),
    ]);
    run(
        command,
        Instant::now() + TIME_LIMIT,
        &[0],
        "read a checkpoint",
    )
    .ok()
    .map(one_line)
    .filter(|c| !c.is_empty())
}

/// Every ralph ref under `prefix` (which starts with [`NAMESPACE`]), as
/// (name, commit), in name order.
pub fn list(root: &Path, prefix: &str) -> Vec<(String, String)> {
    if !prefix.starts_with(NAMESPACE) {
        return Vec::new();
    }
    let Ok(mut command) = git_command(root, &[]) else {
        return Vec::new();
    };
    command.args([
        "for-each-ref",
        "--format=%(refname) %(objectname)",
        "--end-of-options",
        prefix,
    ]);
    let Ok(out) = run(command, Instant::now() + TIME_LIMIT, &[0], "list") else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(r, c)| (r.to_owned(), c.to_owned()))
        .collect()
}

/// Deletes the given ralph refs in one git process, writing no reflog.
pub fn remove(root: &Path, references: &[String]) -> Result<(), FsError> {
    let names: Vec<&String> = references
        .iter()
        .filter(|r| r.starts_with(NAMESPACE) && !r.contains(['\0', '\n']))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let mut input = tempfile::tempfile().map_err(io("create a temp file for", root))?;
    for name in names {
        writeln!(input, "delete {name}").map_err(io("write a temp file for", root))?;
    }
    input
        .seek(SeekFrom::Start(0))
        .map_err(io("read a temp file for", root))?;
    let mut command = git_command(
        root,
        &[("core.logAllRefUpdates".to_owned(), "false".to_owned())],
    )?;
    command
        .args(["update-ref", "--no-deref", "--stdin"])
        .stdin(Stdio::from(input));
    run(
        command,
        Instant::now() + TIME_LIMIT,
        &[0],
        "remove checkpoints",
    )
    .map(|_| ())
}

/// Puts the tree of `target` back in the work tree that `current` (taken
/// just before) recorded: files of `target` written, files of `current`
/// that `target` lacks removed, ignored files and `.claude/` untouched.
/// Refuses, changing nothing, when a file `target` holds would land on an
/// ignored file or under a link or file in its way; those paths are the
/// error's detail.
pub fn restore(root: &Path, current: &Snapshot, target: &str) -> Result<(), FsError> {
    let deadline = Instant::now() + TIME_LIMIT;
    let overrides = overrides(root, deadline)?;
    let mut added = git_command(root, &overrides)?;
    added.args([
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--name-only",
        "--diff-filter=A",
        "--end-of-options",
        &current.tree,
        target,
    ]);
    let added = run(added, deadline, &[0], "compare the checkpoints")?;
    let blocked: Vec<String> = added
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter(|p| in_the_way(root, p))
        .take(5)
        .collect();
    if !blocked.is_empty() {
        return Err(git_error(
            "put the checkpoint back",
            format!(
                "it would overwrite what git ignores or a link ({}); move those away and try again",
                crate::display::line(&blocked.join(", "))
            ),
        ));
    }
    let mut command = git_command(root, &overrides)?;
    command
        .env("GIT_INDEX_FILE", current.index.path())
        .args(["restore", "--worktree", "--no-overlay", "--source", target])
        .args(OUTSIDE_CLAUDE);
    run(command, deadline, &[0], "put the checkpoint back").map(|_| ())
}

/// Whether a file written at `rel` would replace something not in the
/// snapshot: the path itself exists (so git ignores it), or a folder on the
/// way is a link or a file.
fn in_the_way(root: &Path, rel: &str) -> bool {
    let mut at = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        match safe_fs::kind_at(&at) {
            None => return false,
            Some(kind) if i + 1 < parts.len() && kind.is_dir() => {}
            Some(_) => return true,
        }
    }
    false
}

/// The overrides that blank every filter and driver the repository names.
fn overrides(root: &Path, deadline: Instant) -> Result<Vec<(String, String)>, FsError> {
    crate::git::status_overrides(root, deadline)
        .ok_or_else(|| git_error("read the repository's configuration", "git did not answer"))
}

fn run(
    command: Command,
    deadline: Instant,
    ok_codes: &[i32],
    what: &'static str,
) -> Result<Vec<u8>, FsError> {
    crate::git_runner::run_until(command, deadline, ok_codes, MAX_OUTPUT).ok_or_else(|| {
        git_error(
            what,
            "git failed or did not answer in time (is this a git repository?)",
        )
    })
}

/// git for `root`, hardened ([`crate::git_runner::command`]).
fn git_command(root: &Path, overrides: &[(String, String)]) -> Result<Command, FsError> {
    crate::git_runner::command(root, overrides).map_err(start_error)
}

fn start_error(e: std::io::Error) -> FsError {
    git_error("start git", e.to_string())
}

fn one_line(out: Vec<u8>) -> String {
    String::from_utf8_lossy(&out).trim().to_owned()
}

fn git_error(what: &'static str, detail: impl Into<String>) -> FsError {
    FsError::Git {
        what,
        detail: detail.into(),
    }
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> FsError + 'a {
    move |source| FsError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)] // git and sh, which the Windows tests under Wine lack
    fn git(root: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[cfg(unix)] // git and sh, which the Windows tests under Wine lack
    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q"]);
        std::fs::write(root.join(".gitignore"), "ignored\n").unwrap();
        std::fs::write(root.join("a.txt"), "one\n").unwrap();
        git(root, &["add", "."]);
        git(root, &["commit", "-qm", "first"]);
        dir
    }

    #[test]
    fn names_are_plain_parts_only() {
        assert_eq!(
            ref_name("fix-tests", "ab12", "3").as_deref(),
            Some("refs/ralph/fix-tests/ab12/3")
        );
        for bad in ["", "-x", "a/b", "a..b", "a b", "x\n", "a.lock"] {
            assert_eq!(ref_name(bad, "r", "1"), None, "{bad:?}");
            assert_eq!(ref_name("l", bad, "1"), None, "{bad:?}");
        }
    }

    #[cfg(unix)] // git and sh, which the Windows tests under Wine lack
    #[test]
    fn a_snapshot_records_untracked_files_and_moves_nothing_of_the_users() {
        let dir = repo();
        let root = dir.path();
        std::fs::write(root.join("a.txt"), "two\n").unwrap();
        std::fs::write(root.join("new.txt"), "new\n").unwrap();
        std::fs::write(root.join("ignored"), "secret\n").unwrap();
        // (A plain `git status` refreshes the index: it runs first.)
        let status_before = git(root, &["status", "--porcelain"]);
        let index_before = std::fs::read(root.join(".git/index")).unwrap();
        let shot = snapshot(root, "test").unwrap();
        store(root, "refs/ralph/l/r/1", &shot.commit).unwrap();
        assert_eq!(
            std::fs::read(root.join(".git/index")).unwrap(),
            index_before
        );
        assert_eq!(git(root, &["status", "--porcelain"]), status_before);
        let files = git(root, &["ls-tree", "-r", "--name-only", "refs/ralph/l/r/1"]);
        assert_eq!(files, ".gitignore\na.txt\nnew.txt\n");
        assert_eq!(git(root, &["show", "refs/ralph/l/r/1:a.txt"]), "two\n");
        assert!(!root.join(".git/logs/refs/ralph").exists());
        assert_eq!(
            resolve(root, "refs/ralph/l/r/1").as_deref(),
            Some(shot.commit.as_str())
        );
        assert_eq!(list(root, "refs/ralph/l/").len(), 1);
        remove(root, &["refs/ralph/l/r/1".to_owned()]).unwrap();
        assert!(list(root, "refs/ralph/").is_empty());
    }

    #[cfg(unix)] // git and sh, which the Windows tests under Wine lack
    #[test]
    fn a_snapshot_in_a_linked_worktree_with_claude_ignored_moves_nothing_of_the_users() {
        let dir = repo();
        let outside = tempfile::tempdir().unwrap();
        let linked = outside.path().join("linked");
        git(
            dir.path(),
            &["worktree", "add", "-q", linked.to_str().unwrap()],
        );
        std::fs::write(dir.path().join(".git/info/exclude"), ".claude/\n").unwrap();
        std::fs::create_dir(linked.join(".claude")).unwrap();
        std::fs::write(linked.join(".claude/loop.md"), "x\n").unwrap();
        std::fs::write(linked.join("a.txt"), "linked\n").unwrap();
        let index = git(
            &linked,
            &["rev-parse", "--path-format=absolute", "--git-path", "index"],
        );
        let index = Path::new(index.trim());
        let before = std::fs::read(index).unwrap();
        let shot = snapshot(&linked, "linked").unwrap();
        assert_eq!(std::fs::read(index).unwrap(), before);
        let files = git(&linked, &["ls-tree", "-r", "--name-only", &shot.commit]);
        assert_eq!(files, ".gitignore\na.txt\n");
        assert_eq!(
            git(&linked, &["show", &format!("{}:a.txt", shot.commit)]),
            "linked\n"
        );
    }

    #[cfg(unix)] // git and sh, which the Windows tests under Wine lack
    #[test]
    fn a_restore_puts_the_tree_back_and_leaves_ignored_files() {
        let dir = repo();
        let root = dir.path();
        let first = snapshot(root, "first").unwrap();
        std::fs::write(root.join("a.txt"), "changed\n").unwrap();
        std::fs::write(root.join("later.txt"), "later\n").unwrap();
        std::fs::write(root.join("ignored"), "keep\n").unwrap();
        let now = snapshot(root, "now").unwrap();
        restore(root, &now, &first.commit).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(!root.join("later.txt").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("ignored")).unwrap(),
            "keep\n"
        );
        // And back again.
        let back = snapshot(root, "back").unwrap();
        restore(root, &back, &now.commit).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("later.txt")).unwrap(),
            "later\n"
        );
    }

    #[cfg(unix)] // git and sh, which the Windows tests under Wine lack
    #[test]
    fn a_restore_never_writes_through_a_link_or_over_an_ignored_file() {
        let dir = repo();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f"), "mine\n").unwrap();
        let with_sub = snapshot(root, "sub").unwrap();
        std::fs::remove_dir_all(root.join("sub")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(root.join(".gitignore"), "ignored\nsub\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("sub")).unwrap();
        let now = snapshot(root, "now").unwrap();
        let refused = restore(root, &now, &with_sub.commit).unwrap_err();
        assert!(refused.to_string().contains("sub/f"), "{refused}");
        assert!(!outside.path().join("f").exists());
        assert!(
            std::fs::symlink_metadata(root.join("sub"))
                .unwrap()
                .is_symlink()
        );
    }
}
