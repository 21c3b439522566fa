//! The sandboxed agent's own git folder. The project's `.git` (or a fleet
//! worktree's `.git` file) is bound read only as a whole: a mount point,
//! which the agent can neither write into, rename nor replace. The agent's
//! git works in a private folder outside the project instead (`GIT_DIR`,
//! with the project as its work tree), whose objects borrow the project's
//! (`objects/info/alternates`) and whose HEAD is the loop's branch. Once
//! the agent has exited, ralph imports the branch's new commits into the
//! project: it copies only the object files (never the folder's
//! configuration, refs, alternates or anything else there) into a staging
//! repository of its own, fetches the one commit from there through the
//! hardened git runner (git checks every object it receives), and moves
//! the branch only if it is still where the agent started from. See
//! docs/decisions/sandbox-git.md.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::SandboxError;

/// The most bytes of one file ralph copies (the index, the configuration).
const MAX_FILE: u64 = 512 * 1024 * 1024;
/// The most object files (loose objects and packs) one import copies.
const MAX_OBJECT_FILES: usize = 100_000;
/// How long one git call of the set-up or the import may take.
const GIT_TIME: Duration = Duration::from_secs(120);

/// Where the project's HEAD was when the agent started.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Head {
    /// On a branch (`main`, `ralph/s1`): its short name.
    Branch(String),
    Detached,
}

/// The agent's git folder of one iteration (deleted when dropped).
#[derive(Debug)]
pub struct AgentGit {
    /// Holds `git` (the agent's) and, during the import, `import` (ralph's).
    scratch: tempfile::TempDir,
    project: PathBuf,
    head: Head,
    /// The commit HEAD named at the start (`None`: an unborn branch).
    start: Option<String>,
    /// The project's common git folder (its objects, configuration).
    common: PathBuf,
}

fn failed(problem: impl Into<String>) -> SandboxError {
    SandboxError {
        problem: problem.into(),
        fix: "Check that the project is a git repository git can read (`git status`), and that the temporary folder has room.".to_owned(),
    }
}

/// Runs hardened git in `root` with `overrides`; its output, trimmed.
fn git(root: &Path, args: &[&str], overrides: &[(&str, &str)]) -> Option<String> {
    let overrides: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let mut command = ralph_fs::git_runner::command(root, &overrides).ok()?;
    command.args(args);
    let out = ralph_fs::git_runner::run_until(command, Instant::now() + GIT_TIME, &[0], 64 << 20)?;
    Some(String::from_utf8(out).ok()?.trim().to_owned())
}

/// Whether `text` is a full object id (SHA-1 or SHA-256), in lower-case hex.
fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Copies `from` to `root/rel` when it is a regular file (never a link).
fn copy_if_file(from: &Path, root: &Path, rel: &Path) -> Result<(), SandboxError> {
    if ralph_fs::safe_fs::kind_at(from).is_some_and(|k| k.is_file()) {
        let bytes = ralph_fs::safe_fs::read_capped(from, MAX_FILE)
            .map_err(|e| failed(format!("could not read {}: {e}", from.display())))?;
        write_new(root, rel, &bytes)?;
    }
    Ok(())
}

/// Makes the folder `root/rel` (no component a link).
fn make_dir(root: &Path, rel: impl AsRef<Path>) -> Result<(), SandboxError> {
    ralph_fs::safe_fs::ensure_dir(root, rel)
        .map(drop)
        .map_err(|e| {
            failed(format!(
                "could not create a folder in {}: {e}",
                root.display()
            ))
        })
}

/// Creates the file `root/rel` exclusively, with its folders.
fn write_new(root: &Path, rel: impl AsRef<Path>, bytes: &[u8]) -> Result<(), SandboxError> {
    let rel = rel.as_ref();
    if let Some(parent) = rel.parent() {
        make_dir(root, parent)?;
    }
    let path = root.join(rel);
    ralph_fs::safe_fs::create_new_unsynced(&path, bytes)
        .map_err(|e| failed(format!("could not write {}: {e}", path.display())))
}

impl AgentGit {
    /// The agent's folder for `project`; `None` when the project is not a
    /// git repository (nothing to protect, nothing to import).
    pub(crate) fn prepare(project: &Path) -> Result<Option<Self>, SandboxError> {
        let Some(git_dir) = git(project, &["rev-parse", "--absolute-git-dir"], &[]) else {
            return Ok(None);
        };
        // A project inside a larger repository: that repository's `.git` is
        // outside the sandbox, and the agent's git gets none, as before.
        let top = git(project, &["rev-parse", "--show-toplevel"], &[])
            .and_then(|t| std::fs::canonicalize(t).ok());
        if top.as_deref() != std::fs::canonicalize(project).ok().as_deref() {
            return Ok(None);
        }
        let common = git(
            project,
            &["rev-parse", "--path-format=absolute", "--git-common-dir"],
            &[],
        )
        .ok_or_else(|| failed("git could not name the project's common git folder"))?;
        let (git_dir, common) = (PathBuf::from(git_dir), PathBuf::from(common));
        let head = match git(project, &["symbolic-ref", "-q", "--short", "HEAD"], &[]) {
            Some(branch) if ralph_fs::git_runner::is_branch_name(&branch) => Head::Branch(branch),
            Some(branch) => {
                return Err(failed(format!(
                    "the branch {branch:?} has a name ralph does not take"
                )));
            }
            None => Head::Detached,
        };
        let start = git(
            project,
            &["rev-parse", "-q", "--verify", "HEAD^{commit}"],
            &[],
        )
        .filter(|id| is_object_id(id));
        let scratch = tempfile::Builder::new()
            .prefix("ralph-agent-git-")
            .tempdir()
            .map_err(|e| failed(format!("could not create a temporary folder: {e}")))?;
        let this = Self {
            scratch,
            project: project.to_path_buf(),
            head,
            start,
            common,
        };
        this.lay_out(&git_dir, &this.common)?;
        Ok(Some(this))
    }

    /// The agent's git folder (`GIT_DIR` in the sandbox).
    pub(crate) fn dir(&self) -> PathBuf {
        self.scratch.path().join("git")
    }

    /// The agent's folder as git wants it: HEAD on the loop's branch at the
    /// project's commit, the project's objects borrowed, and copies of what
    /// its git reads to answer as the project's would (configuration, index,
    /// excludes, packed refs, shallow list). Only the agent's git reads them.
    fn lay_out(&self, git_dir: &Path, common: &Path) -> Result<(), SandboxError> {
        let dir = self.dir();
        for sub in [
            "refs/heads",
            "refs/tags",
            "objects/info",
            "objects/pack",
            "info",
        ] {
            make_dir(self.scratch.path(), Path::new("git").join(sub))?;
        }
        let head = match (&self.head, &self.start) {
            (Head::Branch(b), start) => {
                if let Some(id) = start {
                    write_new(
                        &dir,
                        format!("refs/heads/{b}"),
                        format!("{id}\n").as_bytes(),
                    )?;
                }
                format!("ref: refs/heads/{b}\n")
            }
            (Head::Detached, Some(id)) => format!("{id}\n"),
            (Head::Detached, None) => return Err(failed("HEAD names no commit")),
        };
        write_new(&dir, "HEAD", head.as_bytes())?;
        let objects = common.join("objects");
        write_new(
            &dir,
            "objects/info/alternates",
            format!("{}\n", objects.display()).as_bytes(),
        )?;
        copy_if_file(&common.join("config"), &dir, Path::new("config"))?;
        if ralph_fs::safe_fs::kind_at(&dir.join("config")).is_none() {
            write_new(&dir, "config", b"[core]\n\trepositoryformatversion = 0\n")?;
        }
        copy_if_file(&git_dir.join("index"), &dir, Path::new("index"))?;
        for rel in ["info/exclude", "packed-refs", "shallow"] {
            copy_if_file(&common.join(rel), &dir, Path::new(rel))?;
        }
        Ok(())
    }

    /// The commit the agent left on the loop's branch (or on HEAD when the
    /// project's was detached), read as text from its folder: a loose ref,
    /// else a line of `packed-refs`. `None` when there is none.
    fn agent_commit(&self) -> Option<String> {
        let dir = self.dir();
        let read = |p: &Path| ralph_fs::safe_fs::read_text(p, 4096).ok();
        let (loose, name) = match &self.head {
            Head::Branch(b) => (dir.join("refs/heads").join(b), format!("refs/heads/{b}")),
            Head::Detached => (dir.join("HEAD"), String::new()),
        };
        if let Some(id) = read(&loose).map(|t| t.trim().to_owned()) {
            return is_object_id(&id).then_some(id);
        }
        let packed = ralph_fs::safe_fs::read_text(&dir.join("packed-refs"), MAX_FILE).ok()?;
        packed.lines().find_map(|line| {
            let (id, r) = line.split_once(' ')?;
            (r == name && is_object_id(id)).then(|| id.to_owned())
        })
    }

    /// Brings the agent's new commit on the loop's branch into the project,
    /// after the agent has exited. `Ok(None)`: it made none.
    pub(crate) fn import(&self) -> Result<Option<String>, SandboxError> {
        let Some(new) = self.agent_commit() else {
            return Ok(None);
        };
        if self.start.as_deref() == Some(new.as_str()) {
            return Ok(None);
        }
        let staging = self.stage(&new)?;
        let staging_arg = staging.to_string_lossy().into_owned();
        git(
            &self.project,
            &[
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--no-recurse-submodules",
                &staging_arg,
                "refs/heads/import",
            ],
            // ralph's own staging folder, written a moment ago: the one
            // place a local fetch is let through.
            &[
                ("protocol.file.allow", "always"),
                ("fetch.fsckObjects", "true"),
            ],
        )
        .ok_or_else(|| failed("git refused the agent's commit (a missing or malformed object)"))?;
        if let Some(path) = self.gitlink_added(&new) {
            return Err(failed(format!(
                "the agent's commit adds a submodule at {}: a git folder of the agent's that your own `git status` would enter; it was not imported",
                ralph_fs::display::line(&path)
            )));
        }
        let old = self.start.clone().unwrap_or_else(|| "0".repeat(new.len()));
        let moved = match &self.head {
            Head::Branch(b) => git(
                &self.project,
                &[
                    "update-ref",
                    "-m",
                    "ralph: the sandboxed agent's commit",
                    &format!("refs/heads/{b}"),
                    &new,
                    &old,
                ],
                &[],
            ),
            Head::Detached => git(
                &self.project,
                &[
                    "update-ref",
                    "--no-deref",
                    "-m",
                    "ralph: the sandboxed agent's commit",
                    "HEAD",
                    &new,
                    &old,
                ],
                &[],
            ),
        };
        moved.ok_or_else(|| failed("the loop's branch moved while the agent ran, or the agent's commit is not a commit; it was not imported"))?;
        // The index follows the branch, the files stay as the agent left them.
        let mut reset = ralph_fs::git_runner::command(&self.project, &[])
            .map_err(|e| failed(format!("git: {e}")))?;
        reset.args(["reset", "-q", "--mixed"]);
        ralph_fs::git_runner::run_until(reset, Instant::now() + GIT_TIME, &[0, 1], 1 << 20);
        Ok(Some(new))
    }

    /// A path the commit `new` makes a submodule (mode 160000) that the
    /// start did not: your `git status` would run git in that folder, with
    /// a `.git` the agent wrote there. Unreadable changes count as one.
    fn gitlink_added(&self, new: &str) -> Option<String> {
        // From the empty tree when the branch had no commit yet.
        let empty = if new.len() == 64 {
            "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"
        } else {
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        };
        let from = self.start.as_deref().unwrap_or(empty);
        let args = [
            "diff-tree",
            "-r",
            "-z",
            "--no-commit-id",
            "--no-renames",
            from,
            new,
        ];
        let Some(out) = git(&self.project, &args, &[]) else {
            return Some("(git could not list the commit's changes)".to_owned());
        };
        let mut fields = out.split('\0');
        while let Some(meta) = fields.next() {
            let path = fields.next()?;
            if meta.split(' ').nth(1) == Some("160000") {
                return Some(path.to_owned());
            }
        }
        None
    }

    /// ralph's staging repository: its own HEAD, configuration and the one
    /// ref, the project's objects borrowed, and copies of the agent's object
    /// files (loose objects and packs, regular files with object names).
    fn stage(&self, new: &str) -> Result<PathBuf, SandboxError> {
        make_dir(self.scratch.path(), "import")?;
        let staging = self.scratch.path().join("import");
        let config = if new.len() == 64 {
            "[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectformat = sha256\n"
        } else {
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
        };
        write_new(&staging, "config", config.as_bytes())?;
        write_new(&staging, "HEAD", b"ref: refs/heads/import\n")?;
        write_new(&staging, "refs/heads/import", format!("{new}\n").as_bytes())?;
        make_dir(&staging, "refs/tags")?;
        write_new(
            &staging,
            "objects/info/alternates",
            format!("{}\n", self.common.join("objects").display()).as_bytes(),
        )?;
        make_dir(&staging, "objects/pack")?;
        let files = object_files(&self.dir().join("objects"));
        if files.len() > MAX_OBJECT_FILES {
            return Err(failed(format!(
                "the agent's git folder holds {} object files, more than the {MAX_OBJECT_FILES} ralph imports",
                files.len()
            )));
        }
        for (from, to) in files {
            copy_if_file(&from, &staging, &Path::new("objects").join(to))?;
        }
        Ok(staging)
    }
}

/// The agent's object files: `xx/<rest>` loose objects and
/// `pack/pack-<id>.{pack,idx}`, each with its path under `objects/`.
/// Nothing else there is taken (`info/alternates` above all).
fn object_files(objects: &Path) -> Vec<(PathBuf, PathBuf)> {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let names = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for fan in names(objects)
        .into_iter()
        .filter(|n| n.len() == 2 && hex(n))
    {
        let is_dir = ralph_fs::safe_fs::kind_at(&objects.join(&fan)).is_some_and(|k| k.is_dir());
        if !is_dir {
            continue;
        }
        for rest in names(&objects.join(&fan)) {
            if matches!(rest.len(), 38 | 62) && hex(&rest) {
                out.push((objects.join(&fan).join(&rest), Path::new(&fan).join(&rest)));
            }
        }
    }
    for name in names(&objects.join("pack")) {
        let pack = name
            .strip_prefix("pack-")
            .and_then(|n| n.strip_suffix(".pack").or_else(|| n.strip_suffix(".idx")));
        if pack.is_some_and(is_object_id) {
            out.push((
                objects.join("pack").join(&name),
                Path::new("pack").join(&name),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_object_files_are_taken_from_the_agents_folder() {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path();
        let id = "a".repeat(40);
        for (path, bytes) in [
            (format!("ab/{}", "c".repeat(38)), "x"),
            ("ab/not-an-object".to_owned(), "x"),
            ("info/alternates".to_owned(), "/elsewhere"),
            (format!("pack/pack-{id}.pack"), "x"),
            (format!("pack/pack-{id}.keep"), "x"),
            ("zz/".to_owned() + &"c".repeat(38), "x"),
        ] {
            let path = objects.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        let mut taken: Vec<String> = object_files(objects)
            .into_iter()
            // Compared as `/`-joined parts: Windows writes `\\`.
            .map(|(_, to)| {
                to.iter()
                    .map(|part| part.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        taken.sort();
        assert_eq!(
            taken,
            [
                format!("ab/{}", "c".repeat(38)),
                format!("pack/pack-{id}.pack")
            ]
        );
    }

    #[test]
    fn an_object_id_is_full_lower_case_hex() {
        assert!(is_object_id(&"0".repeat(40)));
        assert!(is_object_id(&"f".repeat(64)));
        assert!(!is_object_id(&"F".repeat(40)));
        assert!(!is_object_id("ref: refs/heads/main"));
    }
}
