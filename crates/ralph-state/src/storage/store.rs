//! The project's loop files on disk: finding them, locking them, writing
//! them atomically and moving ended loops into the history.
//!
//! Layout under the project root:
//!   .claude/<name>-loop.local.md        an active (or paused) loop
//!   .claude/ralph/lock                  one lock for every loop of the project
//!   .claude/ralph/logs/<name>.jsonl     the decision log of an active loop
//!   .claude/ralph/history/<stamp>-<name>.md          an ended loop
//!   .claude/ralph/history/<stamp>-<name>.log.jsonl   its decision log

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::time::Timestamp;
use ralph_fs::safe_fs::{self, FileStamp, FsError};

pub const LOOP_SUFFIX: &str = "-loop.local.md";

/// How long to wait for another ralph process to release the lock before
/// giving up (and letting the session stop).
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// The longest loop name kept whole in a history record's name. Names ralph
/// arms are at most 64 characters; a longer one (a file planted by hand) is
/// shortened with a hash, so `<stamp>.NNN-<name>.corrupt.log.jsonl` always
/// fits in a file name (255 bytes).
const RECORD_NAME_MAX: usize = 64;

#[derive(Debug, Clone)]
pub struct Project {
    pub root: PathBuf,
}

/// One `.claude/<name>-loop.local.md` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopFile {
    pub name: String,
    pub path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("another ralph process ({holder}) held {path} for over {secs}s")]
    LockTimeout {
        path: PathBuf,
        secs: u64,
        holder: String,
    },
}

impl ralph_fs::error::Exit for StoreError {}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Where the project is, by the rule the hook and the CLI share:
/// `CLAUDE_PROJECT_DIR` if set; else the nearest folder at or above `start`
/// (the session's cwd, then the process cwd) that holds `.claude/`, skipping
/// the home folder, whose `.claude/` is Claude Code's own settings.
pub(crate) fn locate_project(
    project_dir: Option<&Path>,
    starts: &[&Path],
    home: Option<&Path>,
) -> Option<Project> {
    if let Some(dir) = project_dir.filter(|d| !d.as_os_str().is_empty()) {
        // The session's own folder: taken as it is, but never with a
        // `.claude/` of another user's (their files, their secrets).
        let claude = dir.join(".claude");
        if fs::symlink_metadata(&claude).is_ok() && !usable_by_user(&claude) {
            return None;
        }
        return Some(Project {
            root: dir.to_owned(),
        });
    }
    starts.iter().find_map(|start| {
        // The first `.claude/` found decides: the user's, or no project
        // (the walk never passes one to look further up).
        let dir =
            walk_up(start, home, usable_by_user).find(|dir| is_real_dir(&dir.join(".claude")))?;
        usable_by_user(&dir.join(".claude")).then(|| Project {
            root: dir.to_owned(),
        })
    })
}

/// The git work tree's root at or above `start` (the nearest folder with
/// `.git`), by the same walk as [`locate_project`]: what `ralph install
/// --project` and a CLI command outside any project take as the project.
pub fn git_root(start: &Path, home: Option<&Path>) -> Option<PathBuf> {
    walk_up(start, home, usable_by_user)
        .find(|dir| fs::symlink_metadata(dir.join(".git")).is_ok())
        .map(Path::to_owned)
}

/// The folders a walk up from `start` may take as the project: `start`
/// and its parents, up to (not including) the home folder, whose
/// `.claude/` is Claude Code's own settings, and the first folder that is
/// not the user's alone ([`usable_by_user`]): a shared parent (`/`,
/// `/tmp`, another user's folder, a team folder others may write to) is
/// never where ralph puts a loop or a configuration, nor passed on the way up.
fn walk_up<'a>(
    start: &'a Path,
    home: Option<&'a Path>,
    usable: impl Fn(&Path) -> bool + 'a,
) -> impl Iterator<Item = &'a Path> + 'a {
    start
        .ancestors()
        .take_while(move |dir| Some(*dir) != home && usable(dir))
}

/// A folder, not a link to one (a committed link would make the project
/// somewhere else).
fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Owned by the user, and not open to others' writes: no write bit for
/// everyone, nor for a group other than the user's own (with a private
/// group per user, the usual `umask 002` folders stay the user's), unless
/// the folder is sticky (like `/tmp`: others may add names there, but not
/// rename or remove the user's, and a `.claude/` they add is not the
/// user's, so it is refused in turn).
#[cfg(unix)]
fn usable_by_user(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = fs::symlink_metadata(path) else {
        return false;
    };
    let mode = meta.mode();
    let others_write = mode & 0o002 != 0
        || (mode & 0o020 != 0 && meta.gid() != rustix::process::getegid().as_raw());
    meta.uid() == rustix::process::geteuid().as_raw() && (!others_write || mode & 0o1000 != 0)
}

#[cfg(not(unix))]
fn usable_by_user(_dir: &Path) -> bool {
    true
}

impl Project {
    /// A path as the CLI shows it: relative to the root when under it.
    pub fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    pub(crate) fn claude_dir(&self) -> PathBuf {
        self.root.join(".claude")
    }

    pub fn ralph_dir(&self) -> PathBuf {
        self.claude_dir().join("ralph")
    }

    pub fn history_dir(&self) -> PathBuf {
        self.ralph_dir().join("history")
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.ralph_dir().join("logs").join(format!("{name}.jsonl"))
    }

    pub fn loop_path(&self, name: &str) -> PathBuf {
        self.claude_dir().join(format!("{name}{LOOP_SUFFIX}"))
    }

    /// Makes sure `rel` (under the root) is a real folder, never a link.
    pub fn ensure_dir(&self, rel: &str) -> Result<PathBuf, StoreError> {
        Ok(safe_fs::ensure_dir(&self.root, rel)?)
    }

    /// The live loop files, sorted by name. A missing `.claude/` means none;
    /// so does a `.claude` that is a link (ralph never follows it). Every
    /// entry with a loop file's name is listed whatever it is, so that a
    /// FIFO or a link there is reported when read, not silently skipped.
    pub fn loop_files(&self) -> Result<Vec<LoopFile>, StoreError> {
        Ok(self.list()?.loops)
    }

    /// [`Project::loop_files`], with what else the one read of `.claude/`
    /// tells: ralph's temp files there, and the folder's stamp, so that a
    /// listing taken before the lock can be confirmed under it unread.
    pub fn list(&self) -> Result<Listing, StoreError> {
        let dir = self.claude_dir();
        let mut listing = Listing::default();
        match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => listing.stamp = Some(FileStamp::of(&meta)),
            _ => return Ok(listing),
        }
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Listing::default()),
            Err(e) => return Err(io_err("read the folder", &dir)(e)),
        };
        for entry in entries.filter_map(Result::ok) {
            let file_name = entry.file_name();
            if safe_fs::is_temp_name(&file_name) {
                listing.temps.push(entry.path());
            } else if let Some(name) = file_name.to_str().and_then(loop_name) {
                listing.loops.push(LoopFile {
                    name: name.to_owned(),
                    path: entry.path(),
                });
            }
        }
        listing.loops.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(listing)
    }

    /// Whether `.claude/` is still the folder `listing` read: same stamp.
    pub(crate) fn still_listed(&self, listing: &Listing) -> bool {
        FileStamp::at(&self.claude_dir()) == listing.stamp
    }

    /// Takes the project's lock, waiting a bounded time for other ralph
    /// processes. Released when the guard is dropped (or the process dies).
    /// The lock file is opened without following a link and must be a
    /// regular file; the holder writes its pid into it, so that a process
    /// that gives up waiting can name who held it.
    pub fn lock(&self) -> Result<ProjectLock, StoreError> {
        let dir = self.ensure_dir(".claude/ralph")?;
        let path = dir.join("lock");
        let file = safe_fs::open_lock(&path)?;
        let started = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => {
                    // Best effort: the pid only makes a timeout message precise.
                    let _ = safe_fs::write_holder(&file, std::process::id());
                    return Ok(ProjectLock { _file: file });
                }
                Err(fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_PATIENCE => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    let holder = safe_fs::read_holder(&path)
                        .map_or_else(|| "pid unknown".to_owned(), |pid| format!("pid {pid}"));
                    return Err(StoreError::LockTimeout {
                        path,
                        secs: LOCK_PATIENCE.as_secs(),
                        holder,
                    });
                }
                Err(fs::TryLockError::Error(e)) => return Err(io_err("lock", &path)(e)),
            }
        }
    }

    /// Moves an ended loop file (already rewritten with its outcome) and its
    /// decision log into the history. Returns the record's path. Only the
    /// entries are renamed (nothing is opened); the history folder must be
    /// a real folder, and a log that is not a regular file stays behind.
    pub fn archive(
        &self,
        file: &LoopFile,
        ended: Timestamp,
        suffix: &str,
    ) -> Result<PathBuf, StoreError> {
        let history = self.ensure_dir(".claude/ralph/history")?;
        let stem = unique_stem(
            &history,
            &ended.compact(),
            &format!("-{}{suffix}", record_name(&file.name)),
        );
        let record = history.join(format!("{stem}.md"));
        fs::rename(&file.path, &record).map_err(io_err("move the loop file into", &history))?;
        let log = self.log_path(&file.name);
        if safe_fs::kind_at(&log).is_some_and(|k| k.is_file())
            && safe_fs::check_dir(&self.root, ".claude/ralph/logs").unwrap_or(false)
        {
            // Best effort: a log that cannot move stays where status still finds it.
            let _ = fs::rename(&log, history.join(format!("{stem}.log.jsonl")));
        }
        safe_fs::sync_dir(&history);
        safe_fs::sync_dir(&self.claude_dir());
        Ok(record)
    }

    /// Moves a history record (`<stem>.md`, and its `<stem>.log.jsonl`)
    /// back to be the live loop `name`: `ralph resume --add-*`. Refused
    /// when a loop file of that name exists; only entries are renamed (the
    /// record must be a regular file, never a link), and a log that cannot
    /// move stays in the history.
    pub fn unarchive(&self, record: &Path, name: &str) -> Result<LoopFile, StoreError> {
        let path = self.loop_path(name);
        if safe_fs::kind_at(&path).is_some() {
            return Err(io_err("bring the loop back, a file is already at", &path)(
                io::Error::from(io::ErrorKind::AlreadyExists),
            ));
        }
        if !safe_fs::kind_at(record).is_some_and(|k| k.is_file()) {
            return Err(io_err("bring back", record)(io::Error::from(
                io::ErrorKind::InvalidInput,
            )));
        }
        fs::rename(record, &path).map_err(io_err("bring back", record))?;
        let log = record.with_extension("log.jsonl");
        let live_log = self.log_path(name);
        if safe_fs::kind_at(&log).is_some_and(|k| k.is_file())
            && safe_fs::kind_at(&live_log).is_none()
            && self.ensure_dir(".claude/ralph/logs").is_ok()
        {
            let _ = fs::rename(&log, &live_log);
        }
        safe_fs::sync_dir(&self.claude_dir());
        Ok(LoopFile {
            name: name.to_owned(),
            path,
        })
    }

    /// The names of live decision logs (`.claude/ralph/logs/<name>.jsonl`) whose loop file is
    /// gone: a loop file deleted by hand, outside ralph. Costs one directory read, and none
    /// when the logs folder is missing (a project that never had a loop).
    pub(crate) fn logs_without_loop(&self) -> Vec<String> {
        if !safe_fs::check_dir(&self.root, ".claude/ralph/logs").unwrap_or(false) {
            return Vec::new();
        }
        let Ok(entries) = fs::read_dir(self.ralph_dir().join("logs")) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".jsonl").map(str::to_owned))
            .filter(|n| !n.is_empty() && !n.starts_with('.'))
            .filter(|n| safe_fs::kind_at(&self.loop_path(n)).is_none())
            .collect();
        names.sort();
        names
    }

    /// Moves the decision log of a loop whose file is gone into the history, as
    /// `<stamp>-<name>.log.jsonl`, so that `ralph log` keeps it and a new loop of that name
    /// starts a log of its own.
    pub(crate) fn archive_orphan_log(
        &self,
        name: &str,
        ended: Timestamp,
    ) -> Result<PathBuf, StoreError> {
        let history = self.ensure_dir(".claude/ralph/history")?;
        let stem = unique_stem(
            &history,
            &ended.compact(),
            &format!("-{}", record_name(name)),
        );
        let record = history.join(format!("{stem}.log.jsonl"));
        let log = self.log_path(name);
        if safe_fs::kind_at(&log).is_some_and(|k| k.is_file()) {
            fs::rename(&log, &record).map_err(io_err("move the decision log into", &history))?;
        }
        safe_fs::sync_dir(&history);
        Ok(record)
    }

    /// Removes temp files left in `.claude/` and `.claude/ralph/` by ralph
    /// processes that died mid-write. Call it under the lock. Only ralph's
    /// own temps go (see [`safe_fs::remove_stale_temps`]).
    pub fn remove_stale_temps(&self) {
        let now = SystemTime::now();
        for rel in [".claude", ".claude/ralph"] {
            if safe_fs::check_dir(&self.root, rel).unwrap_or(false) {
                safe_fs::remove_stale_temps(&self.root.join(rel), now);
            }
        }
    }

    /// [`Project::remove_stale_temps`] with `.claude/` as `listing` read it
    /// (confirmed under the lock), so a stop lists it once.
    pub fn remove_stale_temps_listed(&self, _lock: &ProjectLock, listing: &Listing) {
        let now = SystemTime::now();
        for temp in &listing.temps {
            safe_fs::remove_if_stale(temp, now);
        }
        if safe_fs::check_dir(&self.root, ".claude/ralph").unwrap_or(false) {
            safe_fs::remove_stale_temps(&self.root.join(".claude/ralph"), now);
        }
    }

    /// Opens the decision log of `name` for appending (created if missing):
    /// a stop opens it once, says why when it cannot, and writes its entry
    /// through the same handle.
    pub fn open_log(&self, name: &str) -> Result<DecisionLog, StoreError> {
        self.ensure_dir(".claude/ralph/logs")?;
        let path = self.log_path(name);
        let file = safe_fs::open_append(&path)?;
        Ok(DecisionLog { file, path })
    }

    /// Appends one line to a loop's decision log. Callers treat an error as
    /// a notice at most: a log that cannot be written must never cost the
    /// user their loop.
    pub(crate) fn append_log(&self, name: &str, line: &str) -> Result<(), StoreError> {
        self.append_bytes(name, format!("{line}\n").as_bytes())
    }

    fn append_bytes(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.ensure_dir(".claude/ralph/logs")?;
        Ok(safe_fs::append(&self.log_path(name), bytes)?)
    }
}

/// The loop's name as it appears in a history record's name: whole when it
/// is short, else its start and a hash of all of it.
pub fn record_name(name: &str) -> String {
    if name.len() <= RECORD_NAME_MAX {
        return name.to_owned();
    }
    let mut head = String::new();
    for c in name.chars() {
        if head.len() + c.len_utf8() > 40 {
            break;
        }
        head.push(c);
    }
    // FNV-1a: stable across runs and versions, no dependency.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{head}~{hash:016x}")
}

/// A record name no file has yet: `<stamp><rest>`, then `<stamp>.002<rest>`,
/// `<stamp>.003<rest>`, … The counter sits inside the stamp, so the loop's
/// name stays intact and names sort oldest first. A stem is taken when
/// anything (a link included) has its record's or its log's name, so a
/// rename never replaces an entry.
fn unique_stem(dir: &Path, stamp: &str, rest: &str) -> String {
    let taken = |s: &str| {
        [".md", ".log.jsonl"]
            .iter()
            .any(|ext| safe_fs::kind_at(&dir.join(format!("{s}{ext}"))).is_some())
    };
    let first = format!("{stamp}{rest}");
    if !taken(&first) {
        return first;
    }
    // Bounded: a folder planted with every name falls back to the first.
    (2..100_000)
        .map(|n| format!("{stamp}.{n:03}{rest}"))
        .find(|s| !taken(s))
        .unwrap_or(first)
}

/// One read of `.claude/`: the loop files (sorted by name), ralph's temp
/// files, and the folder's stamp when it was read.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub loops: Vec<LoopFile>,
    temps: Vec<PathBuf>,
    stamp: Option<FileStamp>,
}

/// The loop name in a `.claude/` entry's name, if it is a loop file's.
fn loop_name(file_name: &str) -> Option<&str> {
    let name = file_name.strip_suffix(LOOP_SUFFIX)?;
    (!name.is_empty() && !name.starts_with('.')).then_some(name)
}

/// A decision log opened once (see [`Project::open_log`]).
#[derive(Debug)]
pub struct DecisionLog {
    file: File,
    path: PathBuf,
}

impl DecisionLog {
    /// Appends one line in one write.
    pub(crate) fn append_line(&mut self, line: &str) -> Result<(), StoreError> {
        use std::io::Write;
        self.file
            .write_all(format!("{line}\n").as_bytes())
            .map_err(io_err("append to", &self.path))
    }
}

/// Held while a process reads and writes loop files.
#[derive(Debug)]
pub struct ProjectLock {
    _file: File,
}

/// Replaces `path` with `contents` atomically, keeping its mode
/// (see [`safe_fs::replace`]). Temp names never match `*-loop.local.md`.
pub fn write_atomic(path: &Path, contents: &str) -> Result<(), StoreError> {
    Ok(safe_fs::replace(path, contents.as_bytes())?)
}

/// [`write_atomic`] for a loop's per-turn update: as atomic, not fsynced
/// (see [`safe_fs::replace_unsynced`]).
pub fn write_turn(path: &Path, contents: &str) -> Result<(), StoreError> {
    Ok(safe_fs::replace_unsynced(path, contents.as_bytes())?)
}

/// Reads a loop file (live or recorded): a regular file, not through a
/// link, at most [`safe_fs::LOOP_FILE_CAP`] bytes, valid UTF-8.
pub fn read_to_string(path: &Path) -> Result<String, StoreError> {
    Ok(safe_fs::read_text(path, safe_fs::LOOP_FILE_CAP)?)
}

/// The last `n` JSON lines of a decision log (all of them when `n` is `usize::MAX`).
pub fn read_log_tail(path: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    if n == 0 {
        return Vec::new();
    }
    // Only a regular file, never through a link, and only its end.
    let Ok(bytes) = ralph_fs::safe_fs::read_tail(path, ralph_fs::safe_fs::LOG_TAIL_CAP) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_root_from_a_subfolder() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join(".claude")).unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        let sub = tmp.path().join("a/b");
        let p = locate_project(None, &[&sub], None).unwrap();
        assert_eq!(p.root, tmp.path());
        assert!(
            locate_project(None, &[&sub], Some(tmp.path())).is_none_or(|p| p.root != tmp.path())
        );
        let explicit = locate_project(Some(Path::new("/x")), &[&sub], None).unwrap();
        assert_eq!(explicit.root, Path::new("/x"));
    }

    #[test]
    fn the_walk_stops_at_home_and_at_a_folder_the_user_does_not_own() {
        let start = Path::new("/shared/alice/repo/sub");
        let owned = |d: &Path| d.starts_with("/shared/alice");
        let walked: Vec<&Path> = walk_up(start, None, owned).collect();
        assert_eq!(
            walked,
            [
                Path::new("/shared/alice/repo/sub"),
                Path::new("/shared/alice/repo"),
                Path::new("/shared/alice")
            ]
        );
        let home = Path::new("/shared/alice/repo");
        let walked: Vec<&Path> = walk_up(start, Some(home), |_| true).collect();
        assert_eq!(walked, [Path::new("/shared/alice/repo/sub")]);
    }

    #[cfg(unix)]
    #[test]
    fn a_linked_claude_folder_is_no_project() {
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        let repo = tmp.path().join("repo");
        fs::create_dir_all(&repo).unwrap();
        std::os::unix::fs::symlink(&elsewhere, repo.join(".claude")).unwrap();
        let found = locate_project(None, &[&repo], None);
        assert!(
            found.is_none_or(|p| p.root != repo),
            "a link is no .claude/"
        );
    }

    #[test]
    fn lists_loop_files_only() {
        let tmp = tempfile::tempdir().unwrap();
        let claude = tmp.path().join(".claude");
        fs::create_dir_all(&claude).unwrap();
        for f in [
            "ralph-loop.local.md",
            "ralph-marketer-loop.local.md",
            "settings.json",
            "-loop.local.md",
            ".x-loop.local.md.1.tmp",
        ] {
            fs::write(claude.join(f), "").unwrap();
        }
        let p = Project {
            root: tmp.path().into(),
        };
        let names: Vec<_> = p
            .loop_files()
            .unwrap()
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["ralph", "ralph-marketer"]);
    }

    #[test]
    fn long_names_make_short_record_names() {
        let long = "a".repeat(238);
        let short = record_name(&long);
        assert!(short.len() < 64, "{short}");
        assert_ne!(record_name(&"a".repeat(239)), short);
        assert_eq!(record_name("ralph"), "ralph");
        let tmp = tempfile::tempdir().unwrap();
        let p = Project {
            root: tmp.path().into(),
        };
        fs::create_dir_all(p.claude_dir()).unwrap();
        let file = LoopFile {
            name: long.clone(),
            path: p.loop_path(&long),
        };
        fs::write(&file.path, "x").unwrap();
        p.append_log(&long, "{}").unwrap();
        let record = p.archive(&file, Timestamp(0), ".corrupt").unwrap();
        assert!(record.exists());
        assert!(!file.path.exists());
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x-loop.local.md");
        write_atomic(&path, "one").unwrap();
        write_atomic(&path, "two").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn archive_keeps_distinct_records() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Project {
            root: tmp.path().into(),
        };
        fs::create_dir_all(p.claude_dir()).unwrap();
        for _ in 0..2 {
            let file = LoopFile {
                name: "ralph".into(),
                path: p.loop_path("ralph"),
            };
            fs::write(&file.path, "x").unwrap();
            p.append_log("ralph", "{}").unwrap();
            p.archive(&file, Timestamp(0), "").unwrap();
        }
        let mut names: Vec<_> = fs::read_dir(p.history_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "19700101T000000Z-ralph.log.jsonl",
                "19700101T000000Z-ralph.md",
                "19700101T000000Z.002-ralph.log.jsonl",
                "19700101T000000Z.002-ralph.md"
            ]
        );
    }
}
