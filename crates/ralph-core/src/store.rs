//! The project's loop files on disk: finding them, locking them, writing
//! them atomically and moving ended loops into the history.
//!
//! Layout under the project root:
//!   .claude/<name>-loop.local.md        an active (or paused) loop
//!   .claude/ralph/lock                  one lock for every loop of the project
//!   .claude/ralph/logs/<name>.jsonl     the decision log of an active loop
//!   .claude/ralph/history/<stamp>-<name>.md          an ended loop
//!   .claude/ralph/history/<stamp>-<name>.log.jsonl   its decision log

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::time::Timestamp;

pub const LOOP_SUFFIX: &str = "-loop.local.md";

/// How long to wait for another ralph process to release the lock before
/// giving up (and letting the session stop).
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

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
    #[error("another ralph process held {path} for over {secs}s")]
    LockTimeout { path: PathBuf, secs: u64 },
}

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
pub fn locate_project(
    project_dir: Option<&Path>,
    starts: &[&Path],
    home: Option<&Path>,
) -> Option<Project> {
    if let Some(dir) = project_dir.filter(|d| !d.as_os_str().is_empty()) {
        return Some(Project {
            root: dir.to_owned(),
        });
    }
    starts.iter().find_map(|start| {
        start
            .ancestors()
            .filter(|dir| Some(*dir) != home)
            .find(|dir| dir.join(".claude").is_dir())
            .map(|dir| Project {
                root: dir.to_owned(),
            })
    })
}

impl Project {
    pub fn claude_dir(&self) -> PathBuf {
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

    /// The live loop files, sorted by name. A missing `.claude/` means none.
    pub fn loop_files(&self) -> Result<Vec<LoopFile>, StoreError> {
        let dir = self.claude_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("read the folder", &dir)(e)),
        };
        let mut files: Vec<LoopFile> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let file_name = entry.file_name().into_string().ok()?;
                let name = file_name.strip_suffix(LOOP_SUFFIX)?;
                if name.is_empty() || name.starts_with('.') {
                    return None;
                }
                entry.file_type().ok()?.is_file().then(|| LoopFile {
                    name: name.to_owned(),
                    path: entry.path(),
                })
            })
            .collect();
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }

    /// Takes the project's lock, waiting a bounded time for other ralph
    /// processes. Released when the guard is dropped (or the process dies).
    pub fn lock(&self) -> Result<ProjectLock, StoreError> {
        let dir = self.ralph_dir();
        fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        let path = dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("open the lock file", &path))?;
        let started = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(ProjectLock { _file: file }),
                Err(fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_PATIENCE => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(StoreError::LockTimeout {
                        path,
                        secs: LOCK_PATIENCE.as_secs(),
                    });
                }
                Err(fs::TryLockError::Error(e)) => return Err(io_err("lock", &path)(e)),
            }
        }
    }

    /// Moves an ended loop file (already rewritten with its outcome) and its
    /// decision log into the history. Returns the record's path.
    pub fn archive(
        &self,
        file: &LoopFile,
        ended: Timestamp,
        suffix: &str,
    ) -> Result<PathBuf, StoreError> {
        let history = self.history_dir();
        fs::create_dir_all(&history).map_err(io_err("create", &history))?;
        let stem = unique_stem(
            &history,
            &ended.compact(),
            &format!("-{}{suffix}", file.name),
        );
        let record = history.join(format!("{stem}.md"));
        fs::rename(&file.path, &record).map_err(io_err("move the loop file into", &history))?;
        let log = self.log_path(&file.name);
        if log.exists() {
            // Best effort: a log that cannot move stays where status still finds it.
            let _ = fs::rename(&log, history.join(format!("{stem}.log.jsonl")));
        }
        sync_dir(&history);
        sync_dir(&self.claude_dir());
        Ok(record)
    }

    /// Removes temp files left in `.claude/` by ralph processes that died
    /// mid-write (killed between create and rename). Call it under the lock.
    /// Only where `/proc` tells which processes live; elsewhere nothing is removed.
    pub fn remove_stale_temps(&self) {
        if !Path::new("/proc/self").exists() {
            return;
        }
        let Ok(entries) = fs::read_dir(self.claude_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(temp_owner) else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    /// Appends one line to a loop's decision log (best effort: a log that
    /// cannot be written must never cost the user their loop).
    pub fn append_log(&self, name: &str, line: &str) {
        let path = self.log_path(name);
        if let Some(dir) = path.parent() {
            let _ = fs::create_dir_all(dir);
        }
        if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(&path) {
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// The pid in a temp name made by `write_atomic`: `.<file>.<pid>.<n>.tmp`.
fn temp_owner(name: &str) -> Option<u32> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = inner.rsplitn(3, '.');
    let (_n, pid) = (parts.next()?.parse::<u32>().ok()?, parts.next()?);
    parts.next()?;
    pid.parse().ok()
}

/// A name in `dir` that no file has yet: `stem`, `stem-2`, `stem-3`, …
/// A record name no file has yet: `<stamp><rest>`, then `<stamp>.002<rest>`,
/// `<stamp>.003<rest>`, … The counter sits inside the stamp, so the loop's
/// name stays intact and names sort oldest first.
fn unique_stem(dir: &Path, stamp: &str, rest: &str) -> String {
    let taken = |s: &str| dir.join(format!("{s}.md")).exists();
    let first = format!("{stamp}{rest}");
    if !taken(&first) {
        return first;
    }
    (2..)
        .map(|n| format!("{stamp}.{n:03}{rest}"))
        .find(|s| !taken(s))
        .unwrap_or(first)
}

/// Held while a process reads and writes loop files.
pub struct ProjectLock {
    _file: File,
}

static TEMP_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Replaces `path` with `contents` so that readers see the old file or the
/// new one, never a mix: a temp file in the same folder, fsync, rename,
/// fsync of the folder. The temp name never matches `*-loop.local.md`.
pub fn write_atomic(path: &Path, contents: &str) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("state");
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(".{file_name}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        let mut file = File::create(&temp).map_err(io_err("create", &temp))?;
        file.write_all(contents.as_bytes())
            .map_err(io_err("write", &temp))?;
        file.sync_all().map_err(io_err("sync", &temp))?;
        fs::rename(&temp, path).map_err(io_err("replace", path))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    } else {
        sync_dir(dir);
    }
    result
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

pub fn read_to_string(path: &Path) -> Result<String, StoreError> {
    let bytes = fs::read(path).map_err(io_err("read", path))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
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
    fn stale_temps_of_dead_processes_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Project {
            root: tmp.path().into(),
        };
        fs::create_dir_all(p.claude_dir()).unwrap();
        let dead = ".ralph-loop.local.md.4000000000.0.tmp"; // no such pid
        let mine = format!(".ralph-loop.local.md.{}.0.tmp", std::process::id());
        for f in [dead, mine.as_str(), ".notes.tmp", "ralph-loop.local.md"] {
            fs::write(p.claude_dir().join(f), "").unwrap();
        }
        p.remove_stale_temps();
        let mut left: Vec<String> = fs::read_dir(p.claude_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected = vec![
            ".notes.tmp".to_owned(),
            mine,
            "ralph-loop.local.md".to_owned(),
        ];
        expected.sort();
        assert_eq!(left, expected);
        assert_eq!(temp_owner(".x-loop.local.md.123.4.tmp"), Some(123));
        assert_eq!(temp_owner("x.tmp"), None);
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
            p.append_log("ralph", "{}");
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
