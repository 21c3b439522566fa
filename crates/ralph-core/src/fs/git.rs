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

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::fingerprint::fingerprint;
use crate::fs::process::{Stop, spawn_in_group, stop_group};

/// The longest the working-tree fallback may take (every git process it starts);
/// past it the breaker skips this stop rather than hold the session.
pub const STATUS_TIME_LIMIT: Duration = Duration::from_secs(10);

/// The most of `git status` output kept: past it, the stop is skipped.
const MAX_STATUS_BYTES: u64 = 64 * 1024 * 1024;

/// The no-progress fingerprint after this turn; `None` when `root` is not a
/// git work tree or the working tree could not be read in time (the
/// breaker then neither counts nor resets at this stop).
///
/// `previous` is the fingerprint stored at the last stop; `edit_proven` is
/// the transcript offset up to which a successful file edit was proven
/// since then, if one was.
pub fn progress_fingerprint(
    root: &Path,
    previous: Option<&str>,
    edit_proven: Option<u64>,
) -> Option<String> {
    std::fs::symlink_metadata(root.join(".git")).ok()?;
    if let Some(offset) = edit_proven {
        let proven = format!("edit-{offset}");
        if previous != Some(proven.as_str()) {
            return Some(proven);
        }
    }
    working_tree(root, STATUS_TIME_LIMIT)
}

/// Configuration that makes `git status` start a program, switched off.
/// `git status` can run: the fsmonitor hook (`core.fsmonitor`); clean
/// filters (`filter.<driver>.clean` / `.process`, for files whose `stat`
/// changed, chosen by attributes; every driver the configuration defines is
/// blanked: found by reading the configuration when the repository's own
/// file plainly defines none (`git_config`), else by asking git, see
/// [`filter_overrides`]); `git status` inside each submodule
/// (avoided with `--ignore-submodules=dirty`); a lazy fetch in a partial
/// clone (`GIT_NO_LAZY_FETCH`, `protocol.allow=never`); and a pager (output
/// is a pipe; `GIT_PAGER=cat` anyway). It runs no hooks, no textconv and no
/// external diff; those are switched off too, in case a later git does.
const HARDENING: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("diff.external", ""),
    ("protocol.allow", "never"),
    ("status.submoduleSummary", "false"),
    ("submodule.recurse", "false"),
];

/// The environment git would otherwise take from the session: a `GIT_DIR`
/// or index set there must not change which tree is read.
const FOREIGN_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_EXTERNAL_DIFF",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
];

pub(crate) fn git(root: &Path, overrides: &[(String, String)]) -> Command {
    let mut command = Command::new("git");
    command.arg("-C").arg(root);
    for key in FOREIGN_ENV {
        command.env_remove(key);
    }
    // Passed as GIT_CONFIG_KEY_n / VALUE_n: a driver name may hold `=`,
    // which `-c key=value` would split at.
    let all: Vec<(&str, &str)> = HARDENING
        .iter()
        .copied()
        .chain(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    command.env("GIT_CONFIG_COUNT", all.len().to_string());
    for (i, (key, value)) in all.iter().enumerate() {
        command.env(format!("GIT_CONFIG_KEY_{i}"), key);
        command.env(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    command
        .env("GIT_OPTIONAL_LOCKS", "0") // never rewrite the index as a side effect
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .stdout(Stdio::piped());
    command
}

/// Runs a git command until `deadline`, returning its stdout when it exited
/// in time with one of `ok_codes`; on time out its process group is killed.
fn run_until(mut command: Command, deadline: Instant, ok_codes: &[i32]) -> Option<Vec<u8>> {
    let mut group = spawn_in_group(&mut command).ok()?;
    let stdout = group.child.stdout.take()?;
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let read = stdout.take(MAX_STATUS_BYTES + 1).read_to_end(&mut out);
        let _ = sender.send(read.ok().map(|_| out));
    });
    let left = deadline.saturating_duration_since(Instant::now());
    match receiver.recv_timeout(left) {
        Ok(out) => {
            let status = group.child.wait().ok()?;
            let accepted = status.code().is_some_and(|c| ok_codes.contains(&c));
            out.filter(|o| accepted && (o.len() as u64) <= MAX_STATUS_BYTES)
        }
        Err(_) => {
            let _ = stop_group(&mut group, Stop::Kill);
            let _ = group.child.wait();
            None
        }
    }
}

/// Every filter driver the configuration defines (in any scope, includes
/// followed), blanked: a blank command is no filter, and a driver marked
/// `required` is released so that git does not fail instead.
pub(crate) fn filter_overrides(root: &Path, deadline: Instant) -> Option<Vec<(String, String)>> {
    let mut command = git(root, &[]);
    command.args(["config", "-z", "--name-only", "--get-regexp", r"^filter\."]);
    // `git config --get-regexp` exits 1 when nothing matches.
    let out = run_until(command, deadline, &[0, 1])?;
    Some(blanked_drivers(&String::from_utf8_lossy(&out)))
}

/// The overrides for `git status`: [`filter_overrides`], unless the
/// drivers can be known without starting git (`git_config`), which spares
/// a process at every stop that needs the working tree.
fn status_overrides(root: &Path, deadline: Instant) -> Option<Vec<(String, String)>> {
    match crate::fs::git_config::drivers_without_git(root) {
        Some(drivers) => Some(blank(drivers.iter().map(String::as_str))),
        None => filter_overrides(root, deadline),
    }
}

/// From `filter.<driver>.<key>` names (NUL-separated), the overrides that
/// blank every driver.
fn blanked_drivers(names: &str) -> Vec<(String, String)> {
    let mut drivers: Vec<&str> = names
        .split('\0')
        .filter_map(|name| name.strip_prefix("filter."))
        .filter_map(|rest| rest.rsplit_once('.').map(|(driver, _)| driver))
        .collect();
    drivers.sort_unstable();
    drivers.dedup();
    blank(drivers)
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

/// The working tree's fingerprint: HEAD, the changed paths with their index
/// and HEAD object names, and the size and modification time of each
/// changed file (nothing is hashed by content). `None` when git cannot run
/// or does not answer within `limit`.
pub fn working_tree(root: &Path, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    let overrides = status_overrides(root, deadline)?;
    let mut command = git(root, &overrides);
    command.args([
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--untracked-files=all",
        "--ignore-submodules=dirty",
        "--no-renames",
        "--",
        ".",
        ":(exclude).claude",
    ]);
    let out = run_until(command, deadline, &[0])?;
    let status = String::from_utf8_lossy(&out);
    let mut summary = status.clone().into_owned();
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

    #[test]
    fn blanks_every_filter_driver() {
        let names = "filter.lfs.clean\0filter.lfs.process\0filter.a.b=c.smudge\0";
        let o = blanked_drivers(names);
        assert!(o.contains(&("filter.lfs.process".into(), String::new())));
        assert!(o.contains(&("filter.a.b=c.clean".into(), String::new())));
        assert!(o.contains(&("filter.lfs.required".into(), "false".into())));
        assert_eq!(o.len(), 8);
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
