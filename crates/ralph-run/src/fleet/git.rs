//! The repository side of many loops at once: a worktree per story,
//! rebasing a finished branch onto the base, merging it home, `passes`
//! written back under the project's lock. Every git process runs through
//! `ralph_fs::git_runner` (no program the repository's configuration names runs:
//! hooks, fsmonitor, filters, merge drivers, signers, pager, editor), every
//! story branch was checked by `valid_id`, and the base branch,
//! read from the repository's HEAD, by `git_runner::is_branch_name`; each reaches
//! git as `refs/heads/<name>` or after `--end-of-options`/`--`.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

pub use crate::fleet::error::FleetError;
use crate::fleet::{self, MergeMode};
use ralph_fs::safe_fs;
use ralph_state::fields::outcome::RecordedOutcome;
use ralph_state::fields::state::LoopState;
use ralph_state::storage::fleet::{WORKTREES, branch};
use ralph_state::storage::store::Project;

/// Lines ralph adds to `.git/info/exclude` (never to the user's
/// `.gitignore`: the rule `ralph init` follows too): its worktrees, its
/// records, and each worktree's loop file.
const EXCLUDES: &[&str] = &["/.ralph/", "/.claude/ralph/", "/.claude/*.local.md"];

/// Runs `git -C root args…` hardened, every filter and merge driver the
/// configuration defines blanked (a command that checks out, adds, rebases
/// or merges files would run them); its stdout on exit 0, else an error
/// holding git's own message.
pub fn git(root: &Path, args: &[&str]) -> Result<String, FleetError> {
    let overrides =
        ralph_fs::git_runner::driver_overrides(root, Instant::now() + Duration::from_secs(30))
            .unwrap_or_default();
    run(root, args, &overrides)
}

/// [`git`] for a command that reads refs or the index only, and so runs no
/// filter: one git process instead of two.
fn git_plain(root: &Path, args: &[&str]) -> Result<String, FleetError> {
    run(root, args, &[])
}

fn run(root: &Path, args: &[&str], overrides: &[(String, String)]) -> Result<String, FleetError> {
    let mut command = ralph_fs::git_runner::command(root, overrides).map_err(FleetError::NoGit)?;
    command.args(args).stderr(Stdio::piped());
    let out = command.output().map_err(FleetError::NoGit)?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let command = args.join(" ");
    if lacks_identity(&stderr) {
        return Err(FleetError::NoIdentity { command });
    }
    Err(FleetError::Git {
        command,
        status: out.status,
        stderr: ralph_state::messages::escape_controls(stderr.trim()),
    })
}

/// Whether git refused to commit because it knows no name or email (its
/// messages for that since git 2.0).
fn lacks_identity(stderr: &str) -> bool {
    [
        "Please tell me who you are",
        "unable to auto-detect email address",
        "empty ident name",
        "no email was given and auto-detection is disabled",
        "no name was given and auto-detection is disabled",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

/// The branch checked out in `root`; an error on a detached HEAD.
pub(crate) fn current_branch(root: &Path) -> Result<String, FleetError> {
    let name = git_plain(root, &["symbolic-ref", "--short", "-q", "HEAD"])
        .map_err(|_| FleetError::DetachedHead)?;
    let name = name.trim_end_matches('\n');
    if !ralph_fs::git_runner::is_branch_name(name) {
        return Err(FleetError::UnsafeBranch(
            ralph_state::messages::escape_controls(name),
        ));
    }
    Ok(name.to_owned())
}

pub(crate) fn branch_exists(root: &Path, branch: &str) -> bool {
    git_plain(
        root,
        &[
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}"),
        ],
    )
    .is_ok()
}

/// Adds ralph's lines to the repository's `info/exclude` (shared by every
/// worktree), once.
pub(crate) fn ensure_excluded(root: &Path) -> Result<(), FleetError> {
    let common = git_plain(root, &["rev-parse", "--git-common-dir"])?;
    let common = root.join(common.trim());
    safe_fs::ensure_dir(&common, "info")?;
    let path = common.join("info/exclude");
    let now = match safe_fs::read_text(&path, safe_fs::SMALL_FILE_CAP) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => String::new(),
        Err(e) => return Err(e.into()),
    };
    if let Some(add) = exclude_lines(&now) {
        safe_fs::append(&path, add.as_bytes())?;
    }
    Ok(())
}

/// What to append to an `info/exclude` that reads `now`: ralph's lines it
/// lacks, under a comment; `None` when it has them all.
fn exclude_lines(now: &str) -> Option<String> {
    let missing: Vec<&&str> = EXCLUDES
        .iter()
        .filter(|l| !now.lines().any(|n| n.trim() == **l))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut add = String::new();
    if !now.is_empty() && !now.ends_with('\n') {
        add.push('\n');
    }
    add.push_str("# ralph run --parallel: its worktrees and loop files\n");
    for l in missing {
        add.push_str(l);
        add.push('\n');
    }
    Some(add)
}

/// The story's worktree at `path` on `branch`: reused when it is there (and
/// on that branch), else added, on the existing branch or a new one from
/// `base`.
pub(crate) fn worktree_for(
    root: &Path,
    path: &Path,
    branch: &str,
    base: &str,
) -> Result<(), FleetError> {
    if safe_fs::kind_at(path).is_some_and(|k| k.is_dir()) {
        let head = current_branch(path).unwrap_or_default();
        if head == branch {
            return Ok(());
        }
        return Err(FleetError::NotAWorktree {
            path: path.to_owned(),
            branch: branch.to_owned(),
        });
    }
    let where_ = path.to_string_lossy().into_owned();
    if branch_exists(root, branch) {
        git(root, &["worktree", "add", "--", &where_, branch])?;
    } else {
        git(
            root,
            &[
                "worktree",
                "add",
                "-b",
                branch,
                "--",
                &where_,
                &format!("refs/heads/{base}"),
            ],
        )?;
    }
    Ok(())
}

/// Whether git itself (not a folder that merely looks like one) lists a
/// worktree at `path` on `branch`: a story is brought home only from a
/// worktree ralph added, never from one planted in the project.
pub(crate) fn is_registered(root: &Path, path: &Path, branch: &str) -> bool {
    let Ok(list) = git_plain(root, &["worktree", "list", "--porcelain"]) else {
        return false;
    };
    let want = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    list.split("\n\n").any(|entry| {
        let mut at = None;
        let mut on = None;
        for line in entry.lines() {
            if let Some(p) = line.strip_prefix("worktree ") {
                at = Some(std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p)));
            } else if let Some(b) = line.strip_prefix("branch ") {
                on = Some(b.to_owned());
            }
        }
        at.as_deref() == Some(want.as_path())
            && on.as_deref() == Some(&format!("refs/heads/{branch}"))
    })
}

/// Commits whatever the agent left uncommitted in a worktree; `false`
/// when there was nothing.
pub(crate) fn commit_leftovers(worktree: &Path, message: &str) -> Result<bool, FleetError> {
    git(worktree, &["add", "-A"])?;
    let unchanged = [
        "diff",
        "--cached",
        "--quiet",
        "--no-ext-diff",
        "--no-textconv",
    ];
    if git_plain(worktree, &unchanged).is_ok() {
        return Ok(false);
    }
    git(worktree, &["commit", "-q", "--no-verify", "-m", message])?;
    Ok(true)
}

/// Rebases the worktree's branch onto `base`. A conflict is never forced:
/// the rebase is aborted and `Ok(false)` returned. A rebase that stopped
/// for another reason (no identity to commit with, say) is aborted too,
/// and its error returned: it is not a conflict.
pub fn rebase(worktree: &Path, base: &str) -> Result<bool, FleetError> {
    let onto = format!("refs/heads/{base}");
    match git(worktree, &["rebase", "-q", "--end-of-options", &onto]) {
        Ok(_) => Ok(true),
        Err(e) => {
            let conflicted = git_plain(worktree, &["ls-files", "--unmerged"])
                .is_ok_and(|unmerged| !unmerged.is_empty());
            // Nothing to abort when the rebase refused to start.
            let _ = git_plain(worktree, &["rebase", "--abort"]);
            if conflicted { Ok(false) } else { Err(e) }
        }
    }
}

/// Merges `branch` into the branch checked out in `root`.
pub fn merge(root: &Path, branch: &str, mode: MergeMode, message: &str) -> Result<(), FleetError> {
    let theirs = format!("refs/heads/{branch}");
    let no_ff = [
        "merge",
        "-q",
        "--no-ff",
        "-m",
        message,
        "--end-of-options",
        &theirs,
    ];
    match mode {
        MergeMode::None => Ok(()),
        MergeMode::Ff => {
            if git(
                root,
                &["merge", "-q", "--ff-only", "--end-of-options", &theirs],
            )
            .is_ok()
            {
                return Ok(());
            }
            git(root, &no_ff).map(|_| ())
        }
        MergeMode::Merge => git(root, &no_ff).map(|_| ()),
    }
}

/// Removes a worktree (its branch stays).
pub(crate) fn remove_worktree(root: &Path, path: &Path) -> Result<(), FleetError> {
    let where_ = path.to_string_lossy().into_owned();
    git_plain(root, &["worktree", "remove", "--force", "--", &where_])?;
    Ok(())
}

/// Forgets worktrees whose folders are gone.
pub fn prune(root: &Path) -> Result<(), FleetError> {
    git_plain(root, &["worktree", "prune"]).map(|_| ())
}

/// The story's worktree folder.
pub(crate) fn worktree_path(root: &Path, id: &str) -> PathBuf {
    root.join(WORKTREES).join(id)
}

/// The story's worktree, ready for its child run: ralph's folder, the
/// worktree on the story's branch (from `base` when the branch is new), and
/// its own `.claude/` so that the child's project is the worktree, never
/// the main tree above it.
pub(crate) fn prepare_worktree(
    project: &Project,
    id: &str,
    base: &str,
) -> Result<PathBuf, FleetError> {
    project.ensure_dir(WORKTREES)?;
    let worktree = worktree_path(&project.root, id);
    worktree_for(&project.root, &worktree, &branch(id), base)?;
    safe_fs::ensure_dir(&worktree, ".claude")?;
    Ok(worktree)
}

/// Writes `passes: true` for the story `id` into the PRD, under the
/// project's lock (the rest of the file as it was).
pub(crate) fn mark_passes(project: &Project, id: &str) -> Result<(), FleetError> {
    let _lock = project.lock()?;
    let path = project.root.join(fleet::PRD);
    let text = safe_fs::read_text(&path, safe_fs::SMALL_FILE_CAP)?;
    let updated = fleet::set_passes(&text, id)?;
    safe_fs::replace(&path, updated.as_bytes())?;
    Ok(())
}

/// After a story's merge: its notes (`ralph/notes/<id>.md`, now in the main
/// tree) appended to `ralph/progress.txt` and that file alone committed on
/// the base branch, so the next wave's worktrees hold them. Written by ralph,
/// never merged by git: each story's notes are a file of its own. `false`
/// when the story left no notes.
pub(crate) fn merge_notes(project: &Project, story: &fleet::Story) -> Result<bool, FleetError> {
    let root = &project.root;
    let notes = match safe_fs::read_text(&root.join(fleet::notes_file(&story.id)), fleet::NOTES_CAP)
    {
        Ok(text) if !text.trim().is_empty() => text,
        Ok(_) => return Ok(false),
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let _lock = project.lock()?;
    safe_fs::ensure_dir(root, "ralph")?;
    let entry = fleet::progress_entry(story, &notes);
    safe_fs::append(&root.join(fleet::PROGRESS), entry.as_bytes())?;
    git(root, &["add", "--", fleet::PROGRESS])?;
    let message = format!("{}: its notes appended to {}", story.id, fleet::PROGRESS);
    git(
        root,
        &[
            "commit",
            "-q",
            "--no-verify",
            "-m",
            &message,
            "--only",
            "--",
            fleet::PROGRESS,
        ],
    )?;
    Ok(true)
}

/// How a story's loop ended, as the newest record of it in its worktree's
/// history says (nothing and zeros without one).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct LastRun {
    pub outcome: Option<RecordedOutcome>,
    pub iterations: u64,
    pub tokens: u64,
    pub cost_usd: ralph_state::money::Money,
}

/// The newest history record of the loop `name` in a worktree.
pub(crate) fn last_run(worktree: &Path, name: &str) -> LastRun {
    let history = Project {
        root: worktree.to_owned(),
    }
    .history_dir();
    let marker = format!("-{}", ralph_state::storage::store::record_name(name));
    let newest = std::fs::read_dir(&history).ok().and_then(|entries| {
        entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".md") && f.contains(&marker))
            .max()
    });
    let Some(file) = newest else {
        return LastRun::default();
    };
    match safe_fs::read_text(&history.join(file), safe_fs::SMALL_FILE_CAP)
        .ok()
        .and_then(|t| LoopState::parse(&t).ok())
    {
        Some(s) => LastRun {
            outcome: s.outcome,
            iterations: s.iteration,
            tokens: s.progress.tokens_used,
            cost_usd: s.progress.counts.cost_usd,
        },
        None => LastRun::default(),
    }
}

/// Copies a worktree's loop history into the main tree's, so it outlives
/// the worktree (files already there are left alone).
pub(crate) fn keep_history(worktree: &Path, project: &Project) {
    let from = Project {
        root: worktree.to_owned(),
    }
    .history_dir();
    let Ok(entries) = std::fs::read_dir(&from) else {
        return;
    };
    let Ok(to) = project.ensure_dir(".claude/ralph/history") else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = safe_fs::copy_new(&e.path(), &to.join(e.file_name()));
        }
    }
}

/// Ctrl-C for a child run: SIGINT to its process group (it leads one), so
/// that `ralph run` stops its agent and records its loop as cancelled.
pub fn interrupt(child: &mut Child) {
    #[cfg(unix)]
    if ralph_fs::process::signal_unix_group(child.id(), ralph_fs::process::Stop::Interrupt).is_ok()
    {
        return;
    }
    let _ = child.kill();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_add_only_the_missing_lines_once() {
        let all = exclude_lines("").unwrap();
        assert_eq!(
            all,
            "# ralph run --parallel: its worktrees and loop files\n/.ralph/\n/.claude/ralph/\n/.claude/*.local.md\n"
        );
        assert_eq!(exclude_lines(&all), None);
        // A file without its last newline gets one before ralph's lines.
        let some = exclude_lines("*.o\n /.ralph/ \n/.claude/ralph/").unwrap();
        assert_eq!(
            some,
            "\n# ralph run --parallel: its worktrees and loop files\n/.claude/*.local.md\n"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_refused_git_command_says_what_git_said() {
        use std::os::unix::process::ExitStatusExt;
        let refused = |stderr: &str| FleetError::Git {
            command: "merge -q --ff-only ralph/a".into(),
            status: std::process::ExitStatus::from_raw(256),
            stderr: stderr.into(),
        };
        assert_eq!(
            refused("").to_string(),
            "`git merge -q --ff-only ralph/a` failed (exit status: 1)"
        );
        assert_eq!(
            refused("fatal: no").to_string(),
            "`git merge -q --ff-only ralph/a` failed (exit status: 1): fatal: no"
        );
        let planted = FleetError::NotAWorktree {
            path: "/p/.ralph/worktrees/a".into(),
            branch: "ralph/a".into(),
        };
        assert_eq!(
            planted.to_string(),
            "/p/.ralph/worktrees/a exists but is not a worktree on ralph/a; remove it with `ralph clean`"
        );
    }

    /// A history record of the loop `name`, ended as `outcome` after `iteration`.
    fn ended_loop(history: &Path, file: &str, outcome: &str, iteration: u64) {
        let text = format!(
            "---\nactive: false\niteration: {iteration}\nmax_iterations: 5\noutcome: {outcome}\ntokens_used: 42\nstarted_at: \"2026-11-30T00:00:00Z\"\n---\n\nTask.\n"
        );
        std::fs::write(history.join(file), text).unwrap();
    }

    #[test]
    fn the_newest_record_of_the_loop_says_how_it_ended() {
        let worktree = tempfile::tempdir().unwrap();
        assert_eq!(last_run(worktree.path(), "US-1"), LastRun::default());
        let history = worktree.path().join(".claude/ralph/history");
        std::fs::create_dir_all(&history).unwrap();
        ended_loop(&history, "20261130T010000Z-US-1.md", "max_iterations", 5);
        ended_loop(&history, "20261130T020000Z-US-1.md", "completed", 2);
        ended_loop(&history, "20261130T030000Z-US-2.md", "aborted", 1);
        let last = last_run(worktree.path(), "US-1");
        assert_eq!(
            last.outcome,
            Some(RecordedOutcome::Known(
                ralph_state::fields::outcome::Outcome::Completed
            ))
        );
        assert_eq!((last.iterations, last.tokens), (2, 42));

        // Kept in the main tree; a record already there is left alone.
        let main = tempfile::tempdir().unwrap();
        let project = Project {
            root: main.path().to_owned(),
        };
        let kept = project.history_dir();
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::write(kept.join("20261130T030000Z-US-2.md"), "mine").unwrap();
        keep_history(worktree.path(), &project);
        assert_eq!(std::fs::read_dir(&kept).unwrap().count(), 3);
        let mine = std::fs::read_to_string(kept.join("20261130T030000Z-US-2.md")).unwrap();
        assert_eq!(mine, "mine");
    }
}
