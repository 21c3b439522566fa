//! Checkpoints: the work tree recorded as a git commit in a private
//! object store outside the project, and put back, without moving anything
//! of the user's git state.
//!
//! A snapshot stages the work tree (tracked and untracked files, not ignored
//! ones, `.claude/` left as the user's index has it) into a private index,
//! as `--protect` does (`tree_diff::stage`): a copy of the user's index made
//! exclusively in a private temporary folder, so that git hashes only what
//! changed. Every git process of a checkpoint writes its objects into the
//! private store (`GIT_OBJECT_DIRECTORY`), borrowing the project's own
//! (`GIT_ALTERNATE_OBJECT_DIRECTORIES`): no blob, tree or commit of a
//! checkpoint lands in the project, no ref is written there, so neither
//! the agent nor `git push --mirror` or `git bundle --all` reaches them.
//! The commit ids are kept by the caller, where the agent cannot write.
//!
//! Left out of every checkpoint ([`LeftOut`]): files larger than
//! [`LARGE_FILE_BYTES`] and names that look like secrets ([`secret_name`]),
//! among the untracked and changed files; a restore never touches them.
//!
//! A restore is git's own checkout (`git restore --worktree --no-overlay`)
//! against the private index of a snapshot taken just before, so it writes
//! no file through a link, and it refuses rather than overwrite a file git
//! ignores. Every git process goes through `git_runner` (no program the
//! repository names runs).

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::safe_fs::{self, FsError};
use crate::tree_diff::{self, PrivateIndex, Staging};

/// The longest one checkpoint or restore may take, every git process
/// included; past it the stop goes on without one.
pub(crate) const TIME_LIMIT: Duration = Duration::from_secs(10);

/// The most of a git command's output read.
const MAX_OUTPUT: u64 = 64 * 1024 * 1024;

/// Where older ralphs kept checkpoints, as refs in the project: only ever
/// listed and removed now ([`list`], [`remove`]).
pub const NAMESPACE: &str = "refs/ralph/";

/// The pathspec that leaves ralph's own folder out of a snapshot and a
/// restore: a loop file rolled back would be a loop rewound behind ralph.
const OUTSIDE_CLAUDE: [&str; 3] = ["--", ".", ":(exclude).claude"];

/// [`secret_name`]'s rules as pathspec excludes (case ignored, in any
/// folder): what every restore leaves alone, whatever a checkpoint holds.
/// (Not for staging: each exclude costs a match per file of the tree.)
const SECRET_EXCLUDES: [&str; 13] = [
    ":(exclude,icase,glob)**/.env*",
    ":(exclude,icase,glob)**/*.pem",
    ":(exclude,icase,glob)**/*.key",
    ":(exclude,icase,glob)**/*.p12",
    ":(exclude,icase,glob)**/*.pfx",
    ":(exclude,icase,glob)**/id_rsa*",
    ":(exclude,icase,glob)**/id_dsa*",
    ":(exclude,icase,glob)**/id_ecdsa*",
    ":(exclude,icase,glob)**/id_ed25519*",
    ":(exclude,icase,glob)**/*credentials*",
    ":(exclude,icase,glob)**/.npmrc",
    ":(exclude,icase,glob)**/.pypirc",
    ":(exclude,icase,glob)**/.netrc",
];

/// The largest file a checkpoint holds: a larger one that is untracked or
/// changed is left out (a data file rewritten every turn would otherwise
/// add its size to the store at every stop).
pub(crate) const LARGE_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// The most files one checkpoint leaves out; past it, no checkpoint.
const MAX_LEFT_OUT: usize = 500;

/// How a snapshot stages the work tree: the user's index trusted as it is,
/// `.claude/` left as it has it, and `git add`'s exit 1 taken (with
/// `--ignore-errors`, an unreadable file was skipped and the rest staged,
/// which is the best record there is; or `.claude/` is ignored).
const STAGING: Staging = Staging {
    paths: &OUTSIDE_CLAUDE,
    staged: &[0, 1],
    distrust: false,
};

/// The snapshot a restore takes first (the tree it replaces): the user's
/// assume-unchanged and skip-worktree marks cleared, so that every file
/// the restore may overwrite is in it, marked or not.
const DISTRUSTED: Staging = Staging {
    paths: &OUTSIDE_CLAUDE,
    staged: &[0, 1],
    distrust: true,
};

/// Where a checkpoint's objects go: `private`, an object folder of ralph's
/// outside the project; `borrowed`, the project's own object folder, read
/// and never written.
#[derive(Debug, Clone)]
pub struct Objects {
    pub private: PathBuf,
    pub borrowed: PathBuf,
}

impl Objects {
    fn env(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("GIT_OBJECT_DIRECTORY", self.private.clone()),
            (
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                one_alternate(&self.borrowed),
            ),
        ]
    }

    fn apply(&self, command: &mut Command) {
        for (key, value) in self.env() {
            command.env(key, value);
        }
    }
}

/// `path` as the one entry of git's list of alternate object folders
/// (`:`-separated): quoted C-style when it holds a `:` or starts with `"`.
pub(crate) fn one_alternate(path: &Path) -> PathBuf {
    let text = path.to_string_lossy();
    if !text.contains(':') && !text.starts_with('"') {
        return path.to_owned();
    }
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    PathBuf::from(format!("\"{escaped}\""))
}

/// Why a file was left out of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Its name looks like a secret's ([`secret_name`]).
    Secret,
    /// It is larger than [`LARGE_FILE_BYTES`].
    Large,
}

/// A file a checkpoint left out: its path (relative to the root), size
/// and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub path: String,
    pub bytes: u64,
    pub why: Why,
}

/// The work tree as git objects in the private store, what it left out,
/// and the private index that recorded it (removed when this is dropped).
pub struct WorkTreeCopy {
    pub tree: String,
    pub commit: String,
    pub left_out: Vec<LeftOut>,
    index: PrivateIndex,
}

/// Whether `root` holds a git repository of its own (`.git`, a folder or
/// a linked worktree's file).
pub fn in_repository(root: &Path) -> bool {
    safe_fs::kind_at(&root.join(".git")).is_some_and(|k| k.is_dir() || k.is_file())
}

/// Whether `part` may name a checkpoint's folder or label: letters,
/// digits, `-`, `_`, not first `-`, at most 64 characters.
pub fn plain(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 64
        && !part.starts_with('-')
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Whether a file name (its last part) looks like a secret's: `.env*`,
/// `*.pem`, `*.key`, `*.p12`, `*.pfx`, `id_rsa*` and the other ssh keys,
/// `*credentials*`, `.npmrc`, `.pypirc`, `.netrc`, `.git-credentials`.
pub(crate) fn secret_name(path: &str) -> bool {
    secret_path(path.as_bytes())
}

/// [`secret_name`] of a path's bytes, with no allocation (a stop asks it
/// of every file of the tree); case is ignored.
pub(crate) fn secret_path(path: &[u8]) -> bool {
    let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    let starts = |p: &[u8]| {
        name.get(..p.len())
            .is_some_and(|n| n.eq_ignore_ascii_case(p))
    };
    let ends =
        |s: &[u8]| name.len() >= s.len() && name[name.len() - s.len()..].eq_ignore_ascii_case(s);
    starts(b".env")
        || [&b".pem"[..], b".key", b".p12", b".pfx"]
            .iter()
            .any(|x| ends(x))
        || [&b"id_rsa"[..], b"id_dsa", b"id_ecdsa", b"id_ed25519"]
            .iter()
            .any(|k| starts(k))
        || name
            .windows(11)
            .any(|w| w.eq_ignore_ascii_case(b"credentials"))
        || [&b".npmrc"[..], b".pypirc", b".netrc"]
            .iter()
            .any(|w| name.eq_ignore_ascii_case(w))
}

/// The project's object folder, absolute (`.git/objects`, or where git
/// says for a linked worktree).
pub fn project_objects(root: &Path) -> Result<PathBuf, FsError> {
    let dot_git = root.join(".git");
    if safe_fs::kind_at(&dot_git).is_some_and(|k| k.is_dir()) {
        return std::path::absolute(dot_git.join("objects")).map_err(io("resolve", root));
    }
    let mut command = git_command(root, &[])?;
    command.args([
        "rev-parse",
        "--path-format=absolute",
        "--git-path",
        "objects",
    ]);
    let out = run(
        command,
        Instant::now() + TIME_LIMIT,
        &[0],
        "find the objects",
    )?;
    Ok(PathBuf::from(one_line(out)))
}

/// Records the work tree as a commit in `objects`' private store, `message`
/// its message, untracked and changed files that are large or look like
/// secrets left out. `distrust`: the user's index marks are cleared first
/// (the snapshot a restore takes). Touches nothing of the user's.
pub fn snapshot(
    root: &Path,
    objects: &Objects,
    message: &str,
    distrust: bool,
) -> Result<WorkTreeCopy, FsError> {
    let deadline = Instant::now() + TIME_LIMIT;
    let staging = if distrust { &DISTRUSTED } else { &STAGING };
    let found = std::cell::RefCell::new(Vec::new());
    let (index, _) = tree_diff::stage_with(root, deadline, staging, objects.env(), |index| {
        let left = left_out(root, index)?;
        let paths = left.iter().map(|l| l.path.clone()).collect();
        *found.borrow_mut() = left;
        Ok(paths)
    })?;
    let mut write = index.git().map_err(start_error)?;
    write.arg("write-tree");
    let tree = one_line(run(write, deadline, &[0], "write the tree")?);
    let mut commit = git_command(root, index.overrides())?;
    objects.apply(&mut commit);
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
    Ok(WorkTreeCopy {
        tree,
        commit,
        left_out: found.into_inner(),
        index,
    })
}

/// The work tree as a loop's kept index recorded it at one stop: its tree
/// in the private store, and the large files left out of it this time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    pub tree: String,
    pub left_out: Vec<LeftOut>,
}

/// Stages the work tree into the loop's own private index `index`, kept
/// between its stops in a private folder of ralph's (seeded once from the
/// user's index, its marks cleared): a `git status` of it and a `git
/// update-index` of what that names ([`stage_changes`]), which stat every
/// file but hash only what changed since the last stop; then its tree,
/// only when it changed something (else the tree is `last`, the one this
/// index wrote at the previous stop), written by ralph from the index
/// (`index_tree`), by `git write-tree` at an arming's first stop or when
/// ralph cannot write it for certain. One git process when nothing
/// changed, two when something did, and no listing of the tree of its own.
///
/// What a checkpoint leaves out is decided without a walk of the tree: new
/// files by ignore rules of ralph's ([`ignore_rules`], beside the index:
/// the user's own, secrets' names and the paths left out so far, which git
/// checks only against untracked files, at no cost per tracked one), and
/// `.claude/` by leaving what the status names there alone. A file staged
/// all the same (a tracked one changed, or a file that grew past
/// [`LARGE_FILE_BYTES`]: one `stat` of each path it named) is taken out of
/// the index again (one more git process, at that stop only), added to the
/// rules and returned.
pub fn stage_kept(
    root: &Path,
    objects: &Objects,
    index: &Path,
    last: Option<&str>,
    leave_out: &[String],
) -> Result<Staged, FsError> {
    let deadline = Instant::now() + TIME_LIMIT;
    let mut smudged_after = crate::same_second::Guard::new(index);
    let rules = index.with_file_name("ignore");
    if safe_fs::kind_at(&rules).is_none() {
        let text = ignore_rules(root, deadline, leave_out);
        safe_fs::create_new(&rules, &text)?;
    }
    let fresh = safe_fs::kind_at(index).is_none();
    let kept = tree_diff::kept_index(root, deadline, objects.env(), index.to_owned(), true)?;
    if fresh {
        skip_tracked_secrets(&kept, deadline)?;
        // A seed copied from the user's index keeps its version: to 4 (a
        // speed-up only, so a failure is no error).
        let mut version = kept.git().map_err(start_error)?;
        version.args(["update-index", "--index-version", "4"]);
        let _ = run(version, deadline, &[0], "compress the kept index");
    }
    let mut changes = stage_changes(root, &kept, &rules, deadline)?;
    let mut written = changes.written.take();
    let left = classify(root, changes.staged);
    if left.len() > MAX_LEFT_OUT {
        return Err(git_error(
            "leave out large files and secrets",
            format!("more than {MAX_LEFT_OUT} of them"),
        ));
    }
    if !left.is_empty() {
        take_out(&kept, &rules, &left, deadline)?;
    }
    // The last tree a SHA-1 id: the store is SHA-1, and ralph writes the
    // tree itself (`index_tree`), git only for what it cannot write for certain.
    let sha1 = last.is_some_and(|l| l.len() == 40 && tree_diff::is_object_id(l));
    let unchanged = last.filter(|l| !changes.any && tree_diff::is_object_id(l));
    let mut written = || {
        if !sha1 {
            return None;
        }
        // The bytes serve the same-second smudge too (no read of its own);
        // those ralph staged, while nothing wrote the index since.
        let read = crate::same_second::current(index, written.take())?;
        let tree = crate::index_tree::tree_of(&read.0, &changes.aside, &objects.private);
        smudged_after.seen(read);
        tree
    };
    let tree = match unchanged.map(str::to_owned).or_else(&mut written) {
        Some(tree) => tree,
        None => {
            // git writes the index as it is: the edits kept aside go in first.
            let git = || kept.git();
            crate::status_staging::settle(&kept.as_kept(&git), &changes.aside)?;
            let mut write = kept.git().map_err(start_error)?;
            write.arg("write-tree");
            one_line(run(write, deadline, &[0], "write the tree")?)
        }
    };
    if !tree_diff::is_object_id(&tree) {
        return Err(git_error("write the tree", "git wrote no tree"));
    }
    Ok(Staged {
        tree,
        left_out: left,
    })
}

/// What one staging of a kept index did: the paths it staged that may be
/// files now (to leave out when large or secret), and whether it changed
/// the index at all (a removal too).
struct Changes {
    staged: Vec<String>,
    any: bool,
    /// The index as ralph left it (`status_staging::Staged::written`).
    written: Option<crate::own_staging::Written>,
    /// The edits ralph kept beside it (`status_staging::Staged::aside`).
    aside: Vec<crate::index_tree::Edit>,
}

/// Stages the work tree but `.claude/` into the kept index, new files
/// checked against the ignore rules `rules`: by a status of the index and
/// an update of what it names where that applies (`status_staging`), else
/// (or when that fails: an unreadable file, which `git add` skips) by `git
/// add -A -v`.
fn stage_changes(
    root: &Path,
    kept: &PrivateIndex,
    rules: &Path,
    deadline: Instant,
) -> Result<Changes, FsError> {
    if crate::status_staging::applies(root) {
        let listing = crate::status_staging::Listing {
            seed: None,
            after_seed: None,
            excludes_file: Some(rules),
            wanted: |path| path != b".claude" && !path.starts_with(b".claude/"),
        };
        let git = || kept.git();
        if let Ok(staged) = crate::status_staging::stage(&kept.as_kept(&git), &listing) {
            return Ok(Changes {
                any: !staged.paths.is_empty(),
                staged: staged
                    .paths
                    .iter()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect(),
                written: staged.written,
                aside: staged.aside,
            });
        }
    }
    let mut add = kept.git().map_err(start_error)?;
    // `add '…'` untranslated, whatever the user's language.
    add.env("LC_ALL", "C").env("LANGUAGE", "C");
    add.arg("-c")
        .arg(format!("core.excludesFile={}", rules.display()))
        .args(["add", "-A", "-v", "--ignore-errors"])
        .args(OUTSIDE_CLAUDE);
    // Exit 1: a file that could not be read was skipped, or `.claude/` is ignored.
    let said = run(add, deadline, &[0, 1], "stage the work tree")?;
    Ok(Changes {
        any: !said.is_empty(),
        staged: added_among(&said),
        written: None,
        aside: Vec::new(),
    })
}

/// Marks the tracked files of a newly seeded kept index whose names look
/// like secrets skip-worktree (in that index only: one listing and one
/// `git update-index`, once per index), so that no staging of it reads
/// them: a checkpoint holds them as your index had them then, never their
/// bytes since.
fn skip_tracked_secrets(kept: &PrivateIndex, deadline: Instant) -> Result<(), FsError> {
    let listed = kept
        .listing(&["ls-files", "-z", "--", "."])
        .ok_or_else(|| git_error("list the tracked files", "git did not answer in time"))?;
    let secrets: Vec<u8> = listed
        .iter()
        .filter(|p| secret_name(p))
        .flat_map(|p| p.bytes().chain(std::iter::once(0)))
        .collect();
    if secrets.is_empty() {
        return Ok(());
    }
    let mut mark = kept.git().map_err(start_error)?;
    mark.args(["update-index", "--skip-worktree", "-z", "--stdin"]);
    crate::git_runner::run_with_input(mark, &secrets, deadline, MAX_OUTPUT)
        .map(|_| ())
        .ok_or_else(|| git_error("leave out tracked secrets", "git did not answer"))
}

/// Takes `left` out of the kept index (one `git update-index`) and adds
/// each path to the ignore rules, so that no later stop stages it.
fn take_out(
    kept: &PrivateIndex,
    rules: &Path,
    left: &[LeftOut],
    deadline: Instant,
) -> Result<(), FsError> {
    let mut remove = kept.git().map_err(start_error)?;
    remove.args(["update-index", "--force-remove", "-z", "--stdin"]);
    let list: Vec<u8> = left
        .iter()
        .flat_map(|l| l.path.bytes().chain(std::iter::once(0)))
        .collect();
    crate::git_runner::run_with_input(remove, &list, deadline, MAX_OUTPUT)
        .ok_or_else(|| git_error("leave out large files and secrets", "git did not answer"))?;
    let more: String = left
        .iter()
        .filter_map(|l| literal_rule(&l.path))
        .map(|r| r + "\n")
        .collect();
    safe_fs::append(rules, more.as_bytes())
}

/// [`secret_name`]'s rules in the words of a `.gitignore` (any folder).
const SECRET_RULES: [&str; 13] = [
    ".env*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*credentials*",
    ".npmrc",
    ".pypirc",
    ".netrc",
];

/// The ignore rules a loop's kept index stages with (`core.excludesFile`,
/// which replaces the user's own for that one git process): the user's own
/// rules first (the file `core.excludesFile` names, else git's default
/// one), then the secrets' names (any case), then each path of
/// `leave_out`. Read once, as the index is made: one `git config`.
fn ignore_rules(root: &Path, deadline: Instant, leave_out: &[String]) -> Vec<u8> {
    let named = git_command(root, &[]).ok().and_then(|mut command| {
        command.args(["config", "--path", "--get", "core.excludesFile"]);
        run(command, deadline, &[0], "read core.excludesFile").ok()
    });
    let users = named
        .map(|out| root.join(one_line(out)))
        .filter(|p| !p.as_os_str().is_empty())
        .or_else(tree_diff::default_excludes_file);
    let mut text = users
        .and_then(|p| safe_fs::read_capped(&p, 1024 * 1024).ok())
        .unwrap_or_default();
    text.push(b'\n');
    for rule in SECRET_RULES {
        text.extend(any_case(rule).bytes());
        text.push(b'\n');
    }
    for rule in leave_out.iter().filter_map(|p| literal_rule(p)) {
        text.extend(rule.bytes());
        text.push(b'\n');
    }
    text
}

/// `rule` matching in any case: each letter as `[xX]`.
fn any_case(rule: &str) -> String {
    rule.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The ignore rule that matches exactly `path` (relative to the root):
/// anchored, every wildcard escaped; `None` for a name with a line break,
/// which no rule can hold.
fn literal_rule(path: &str) -> Option<String> {
    if path.is_empty() || path.contains(['\n', '\r']) {
        return None;
    }
    let mut rule = String::from("/");
    for c in path.chars() {
        if matches!(c, '\\' | '*' | '?' | '[' | ' ' | '!' | '#') {
            rule.push('\\');
        }
        rule.push(c);
    }
    Some(rule)
}

/// The paths `git add -v` said it added (`add '<path>'` lines; a line
/// that starts no such entry continues the path before it, whose name held
/// a line break).
fn added_among(said: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(said);
    let mut paths: Vec<String> = Vec::new();
    let mut adding = false;
    for line in text.strip_suffix('\n').unwrap_or(&text).split('\n') {
        if let Some(path) = line.strip_prefix("add '") {
            paths.push(path.to_owned());
            adding = true;
        } else if line.starts_with("remove '") {
            adding = false;
        } else if adding && let Some(last) = paths.last_mut() {
            last.push('\n');
            last.push_str(line);
        }
    }
    paths
        .into_iter()
        .filter_map(|p| p.strip_suffix('\'').map(str::to_owned))
        .filter(|p| !p.is_empty())
        .collect()
}

/// What `git ls-files` lists as untracked or changed (ignored files aside;
/// `.claude/` is dropped by [`classify`], cheaper than an exclude pathspec).
const CHANGED: [&str; 7] = [
    "ls-files",
    "-o",
    "-m",
    "--exclude-standard",
    "-z",
    "--",
    ".",
];

/// The untracked and changed files (as the seeded `index` sees them, ignored
/// ones and `.claude/` aside) that a checkpoint leaves out: large ones and
/// names that look like secrets. One `git ls-files`.
fn left_out(root: &Path, index: &PrivateIndex) -> Result<Vec<LeftOut>, FsError> {
    let listed = index
        .listing(&CHANGED)
        .ok_or_else(|| git_error("list the changed files", "git did not answer in time"))?;
    let left = classify(root, listed);
    if left.len() > MAX_LEFT_OUT {
        return Err(git_error(
            "leave out large files and secrets",
            format!("more than {MAX_LEFT_OUT} of them"),
        ));
    }
    Ok(left)
}

/// What checkpoints would leave out of the work tree now, as the user's
/// index sees it (read, never written): for arming to name. One `git
/// ls-files`; nothing when git does not answer.
pub fn would_leave_out(root: &Path) -> Vec<LeftOut> {
    let deadline = Instant::now() + TIME_LIMIT;
    // `-m` hashes changed files, through their filters: every one blanked.
    let Some(overrides) = crate::git::status_overrides(root, deadline) else {
        return Vec::new();
    };
    let Ok(mut command) = git_command(root, &overrides) else {
        return Vec::new();
    };
    command.args(CHANGED);
    let Ok(out) = run(command, deadline, &[0], "list") else {
        return Vec::new();
    };
    let listed = String::from_utf8_lossy(&out)
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    classify(root, listed)
}

/// The regular files among `listed` (relative to `root`) that look like
/// secrets or are larger than [`LARGE_FILE_BYTES`], in path order.
fn classify(root: &Path, listed: Vec<String>) -> Vec<LeftOut> {
    let mut left: Vec<LeftOut> = listed
        .into_iter()
        .filter(|path| !path.starts_with(".claude/"))
        .filter_map(|path| {
            let meta = std::fs::symlink_metadata(root.join(&path)).ok()?;
            let why = if !meta.is_file() {
                return None;
            } else if secret_name(&path) {
                Why::Secret
            } else if meta.len() > LARGE_FILE_BYTES {
                Why::Large
            } else {
                return None;
            };
            Some(LeftOut {
                path,
                bytes: meta.len(),
                why,
            })
        })
        .collect();
    left.sort_by(|a, b| a.path.cmp(&b.path));
    left.dedup_by(|a, b| a.path == b.path);
    left
}

/// Whether `commit` is a commit or a tree (what a loop's kept index
/// records, [`stage_kept`]) the private store (or the project's objects it
/// borrows) holds.
pub fn holds(root: &Path, objects: &Objects, commit: &str) -> bool {
    if !tree_diff::is_object_id(commit) {
        return false;
    }
    let Ok(mut command) = git_command(root, &[]) else {
        return false;
    };
    objects.apply(&mut command);
    command.args(["cat-file", "-t", commit]);
    run(
        command,
        Instant::now() + TIME_LIMIT,
        &[0],
        "read a checkpoint",
    )
    .is_ok_and(|out| ["commit", "tree"].contains(&one_line(out).as_str()))
}

/// The total size of the files under `dir` (links not followed).
pub fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.path(), std::fs::symlink_metadata(e.path()).ok()?)))
        .map(|(path, meta)| {
            if meta.is_dir() {
                size_of(&path)
            } else {
                meta.len()
            }
        })
        .fold(0u64, u64::saturating_add)
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

/// Puts the tree of `target` (a commit of `objects`' store) back in the
/// work tree that `current` (taken just before, distrusted) recorded: files
/// of `target` written, files of `current` that `target` lacks removed;
/// ignored files, `.claude/` and what `current` left out untouched.
/// Refuses, changing nothing, when a file `target` holds would land on an
/// ignored file or under a link or file in its way; those paths are the
/// error's detail.
pub fn restore(
    root: &Path,
    objects: &Objects,
    current: &WorkTreeCopy,
    target: &str,
) -> Result<(), FsError> {
    let deadline = Instant::now() + TIME_LIMIT;
    let overrides = overrides(root, deadline)?;
    // Its objects as they were recorded, or nothing is put back: a borrowed one may have
    // been rewritten in place in the project's store.
    let git = || {
        crate::git_runner::command(root, &overrides).map(|mut command| {
            objects.apply(&mut command);
            command
        })
    };
    crate::object_check::verify(&git, target, deadline).map_err(|why| match why {
        crate::object_check::Unverified::Unread(what) => {
            git_error(what, "git failed or did not answer in time")
        }
        crate::object_check::Unverified::Altered(name) => git_error(
            "put the checkpoint back",
            format!(
                "its object {name} no longer holds what it was recorded with (rewritten in the project's .git/objects?); nothing was put back"
            ),
        ),
    })?;
    let mut paths: Vec<String> = OUTSIDE_CLAUDE
        .iter()
        .chain(&SECRET_EXCLUDES)
        .map(|p| (*p).to_owned())
        .collect();
    paths.extend(
        current
            .left_out
            .iter()
            .map(|l| format!(":(exclude,literal){}", l.path)),
    );
    let mut added = git_command(root, &overrides)?;
    objects.apply(&mut added);
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
    added.args(&paths);
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
    objects.apply(&mut command);
    command
        .env("GIT_INDEX_FILE", current.index.path())
        .args(["restore", "--worktree", "--no-overlay", "--source", target])
        .args(&paths);
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

    /// A private store (in `store`) borrowing `root`'s objects.
    #[cfg(unix)]
    fn objects(root: &Path, store: &tempfile::TempDir) -> Objects {
        let private = store.path().join("objects");
        std::fs::create_dir(&private).unwrap();
        Objects {
            private,
            borrowed: project_objects(root).unwrap(),
        }
    }

    #[test]
    fn names_are_plain_parts_only() {
        assert!(plain("fix-tests") && plain("ab12") && plain("undo-3"));
        for bad in ["", "-x", "a/b", "a..b", "a b", "x\n", "a.lock"] {
            assert!(!plain(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_borrowed_folder_with_a_colon_is_quoted_as_git_reads_it() {
        assert_eq!(
            one_alternate(Path::new("/p/.git/objects")),
            Path::new("/p/.git/objects")
        );
        assert_eq!(
            one_alternate(Path::new("/a:b/\"q\\/.git/objects")),
            Path::new("\"/a:b/\\\"q\\\\/.git/objects\"")
        );
    }

    #[test]
    fn secret_names_are_recognised_and_others_are_not() {
        for secret in [
            ".env",
            "app/.env.local",
            "server.pem",
            "tls/private.KEY",
            "id_rsa",
            "id_ed25519.pub",
            "aws_credentials.json",
            ".npmrc",
            "sub/.pypirc",
        ] {
            assert!(secret_name(secret), "{secret}");
        }
        for plain_file in ["src/main.rs", "environment.md", "keys.rs", "README"] {
            assert!(!secret_name(plain_file), "{plain_file}");
        }
    }

    #[cfg(unix)] // git and sh, which the Windows tests under Wine lack
    #[test]
    fn a_snapshot_records_untracked_files_into_the_private_store_and_moves_nothing_of_the_users() {
        let dir = repo();
        let root = dir.path();
        let store = tempfile::tempdir().unwrap();
        let objects = objects(root, &store);
        std::fs::write(root.join("a.txt"), "two\n").unwrap();
        std::fs::write(root.join("new.txt"), "new\n").unwrap();
        std::fs::write(root.join("ignored"), "secret\n").unwrap();
        std::fs::write(root.join(".env"), "TOKEN=x\n").unwrap();
        // (A plain `git status` refreshes the index: it runs first.)
        let status_before = git(root, &["status", "--porcelain"]);
        let index_before = std::fs::read(root.join(".git/index")).unwrap();
        let objects_before = size_of(&root.join(".git/objects"));
        let shot = snapshot(root, &objects, "test", false).unwrap();
        assert_eq!(
            std::fs::read(root.join(".git/index")).unwrap(),
            index_before
        );
        assert_eq!(git(root, &["status", "--porcelain"]), status_before);
        assert_eq!(size_of(&root.join(".git/objects")), objects_before);
        assert!(
            git(root, &["for-each-ref"])
                .lines()
                .all(|l| !l.contains("ralph"))
        );
        assert!(holds(root, &objects, &shot.commit));
        assert!(!holds(root, &objects, &"0".repeat(40)));
        assert_eq!(
            shot.left_out,
            [LeftOut {
                path: ".env".into(),
                bytes: 8,
                why: Why::Secret
            }]
        );
    }

    /// The files of `tree` (in the private store), one per line.
    #[cfg(unix)]
    fn files_of(root: &Path, objects: &Objects, tree: &str) -> Vec<String> {
        let mut command = git_command(root, &[]).unwrap();
        objects.apply(&mut command);
        command.args(["ls-tree", "-r", "--name-only", tree]);
        let out = run(command, Instant::now() + TIME_LIMIT, &[0], "list").unwrap();
        String::from_utf8_lossy(&out)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[cfg(unix)] // git and sh, which the Windows tests under Wine lack
    #[test]
    fn a_kept_index_stages_only_what_changed_and_leaves_secrets_and_large_files_out() {
        let dir = repo();
        let root = dir.path();
        let store = tempfile::tempdir().unwrap();
        let objects = objects(root, &store);
        let index = store.path().join("index");
        std::fs::create_dir(root.join("sub")).unwrap();
        for secret in [
            ".env.local",
            "sub/Server.PEM",
            "sub/id_rsa",
            "aws_credentials.json",
        ] {
            std::fs::write(root.join(secret), "secret\n").unwrap();
        }
        std::fs::write(root.join("sub/new.txt"), "new\n").unwrap();
        let index_before = std::fs::read(root.join(".git/index")).unwrap();
        let first = stage_kept(root, &objects, &index, None, &[]).unwrap();
        assert_eq!(
            files_of(root, &objects, &first.tree),
            [".gitignore", "a.txt", "sub/new.txt"]
        );
        assert!(first.left_out.is_empty());
        // Nothing changed: the add says nothing and the last tree stands.
        let again = stage_kept(root, &objects, &index, Some("f".repeat(40).as_str()), &[]);
        assert_eq!(again.unwrap().tree, "f".repeat(40));
        // A large file is staged once, taken out again and named.
        let big = std::fs::File::create(root.join("data.bin")).unwrap();
        big.set_len(LARGE_FILE_BYTES + 1).unwrap();
        std::fs::write(root.join("a.txt"), "two\n").unwrap();
        let third = stage_kept(root, &objects, &index, Some(&first.tree), &[]).unwrap();
        assert_ne!(third.tree, first.tree);
        assert_eq!(
            files_of(root, &objects, &third.tree),
            [".gitignore", "a.txt", "sub/new.txt"]
        );
        assert_eq!(third.left_out.len(), 1);
        assert_eq!(third.left_out[0].path, "data.bin");
        let fourth = stage_kept(root, &objects, &index, Some(&third.tree), &[]).unwrap();
        assert_eq!(fourth.tree, third.tree, "left out from then on");
        assert!(fourth.left_out.is_empty());
        assert_eq!(
            std::fs::read(root.join(".git/index")).unwrap(),
            index_before
        );
        // A tracked file with a secret's name: kept as the user's index had it.
        git(root, &["add", "-f", ".env.local"]);
        std::fs::remove_file(&index).unwrap();
        let seeded = stage_kept(root, &objects, &index, None, &[]).unwrap();
        assert!(files_of(root, &objects, &seeded.tree).contains(&".env.local".to_owned()));
        std::fs::write(root.join(".env.local"), "TOKEN=new\n").unwrap();
        let changed = stage_kept(root, &objects, &index, Some(&seeded.tree), &[]).unwrap();
        assert_eq!(changed.tree, seeded.tree, "its change is never read");
        assert!(changed.left_out.is_empty());
        assert!(holds(root, &objects, &third.tree));
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
        let store = tempfile::tempdir().unwrap();
        let objects = objects(&linked, &store);
        let shot = snapshot(&linked, &objects, "linked", false).unwrap();
        assert_eq!(std::fs::read(index).unwrap(), before);
        assert!(holds(&linked, &objects, &shot.commit));
    }

    #[cfg(unix)] // git and sh, which the Windows tests under Wine lack
    #[test]
    fn a_restore_puts_the_tree_back_and_leaves_ignored_files() {
        let dir = repo();
        let root = dir.path();
        let store = tempfile::tempdir().unwrap();
        let objects = objects(root, &store);
        let first = snapshot(root, &objects, "first", false).unwrap();
        std::fs::write(root.join("a.txt"), "changed\n").unwrap();
        std::fs::write(root.join("later.txt"), "later\n").unwrap();
        std::fs::write(root.join("ignored"), "keep\n").unwrap();
        std::fs::write(root.join("server.pem"), "key\n").unwrap();
        let now = snapshot(root, &objects, "now", true).unwrap();
        restore(root, &objects, &now, &first.commit).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(!root.join("later.txt").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("ignored")).unwrap(),
            "keep\n"
        );
        assert!(root.join("server.pem").exists(), "left out, left alone");
        // And back again.
        let back = snapshot(root, &objects, "back", true).unwrap();
        restore(root, &objects, &back, &now.commit).unwrap();
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
        let store = tempfile::tempdir().unwrap();
        let objects = objects(root, &store);
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f"), "mine\n").unwrap();
        let with_sub = snapshot(root, &objects, "sub", false).unwrap();
        std::fs::remove_dir_all(root.join("sub")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(root.join(".gitignore"), "ignored\nsub\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("sub")).unwrap();
        let now = snapshot(root, &objects, "now", true).unwrap();
        let refused = restore(root, &objects, &now, &with_sub.commit).unwrap_err();
        assert!(refused.to_string().contains("sub/f"), "{refused}");
        assert!(!outside.path().join("f").exists());
        assert!(
            std::fs::symlink_metadata(root.join("sub"))
                .unwrap()
                .is_symlink()
        );
    }
}
