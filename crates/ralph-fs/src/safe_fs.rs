//! Every file ralph touches under a project goes through here. A project may
//! be a stranger's checkout, so its paths are never trusted:
//!
//! - opens never follow a symbolic link at the last component (`O_NOFOLLOW`)
//!   and never block (`O_NONBLOCK`); what was opened is checked with `fstat`
//!   and only a regular file is accepted (a FIFO, device, socket, folder or
//!   link is a [`FsError::WrongKind`] naming the path and what was found);
//! - folders ralph creates or uses are checked component by component with
//!   `symlink_metadata` from the project root down, and a link is refused;
//! - reads are capped: an over-long file is an error, never a truncation
//!   (only a log *tail* reads the end of a longer file on purpose);
//! - new files are created exclusively (`O_EXCL`) under unpredictable names
//!   ([`TEMP_PREFIX`] + random), so a planted link can never be written
//!   through; a replace is temp + fsync + rename, keeping the old file's mode;
//! - appends (decision logs) are `O_APPEND|O_NOFOLLOW` and checked regular;
//!   a file written in place (a log, the lock) must not be a hard link.
//!
//! The project root itself is the user's choice and may be a link. Unix
//! specifics sit behind `cfg(unix)`; elsewhere the same functions work with
//! the plain checks (`symlink_metadata`, file type after open).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A loop file (live or in the history) is a task and a few fields; this
/// is far above any real one. A longer file is refused, not truncated.
pub const LOOP_FILE_CAP: u64 = 8 * 1024 * 1024;
/// Small JSON and text files ralph reads whole (`last-run.json`,
/// `ralph/prd.json`, `.gitignore`).
pub const SMALL_FILE_CAP: u64 = 8 * 1024 * 1024;
/// How much of a decision log's end `ralph status` and `ralph log` read.
pub const LOG_TAIL_CAP: u64 = 16 * 1024 * 1024;
/// The lock file holds a pid.
const LOCK_FILE_CAP: u64 = 64;

/// Every temp file ralph creates starts with this; nothing else does, and
/// it never matches `*-loop.local.md`.
pub const TEMP_PREFIX: &str = ".ralph-tmp-";
/// A temp file older than this is stale: a write takes milliseconds.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error(
        "{path} is {found}, not {wanted}; ralph never follows links or opens special files inside a project, so it was left alone. Remove it, or replace it with {wanted}"
    )]
    WrongKind {
        path: PathBuf,
        found: &'static str,
        wanted: &'static str,
    },
    #[error("{path} is larger than {cap} bytes, more than ralph reads; it was not read")]
    TooLong { path: PathBuf, cap: u64 },
    #[error(
        "{path} is not valid UTF-8 (first bad byte at offset {offset}); ralph keeps a loop file's bytes exactly and will not guess an encoding, so it was left untouched. Save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
    )]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// A git command of a checkpoint (`fs/checkpoint.rs`) failed.
    #[error("could not {what}: {detail}")]
    Git { what: &'static str, detail: String },
}

impl crate::error::Exit for FsError {}

impl FsError {
    /// The path does not exist (nothing was there to refuse).
    pub fn is_not_found(&self) -> bool {
        matches!(self, FsError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FsError + 'a {
    move |source| FsError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// What a file type is, in words.
pub fn describe(kind: fs::FileType) -> &'static str {
    if kind.is_symlink() {
        return "a symbolic link";
    }
    if kind.is_dir() {
        return "a folder";
    }
    if kind.is_file() {
        return "a regular file";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "a device";
        }
    }
    "a special file"
}

fn wrong_kind(path: &Path, kind: fs::FileType, wanted: &'static str) -> FsError {
    FsError::WrongKind {
        path: path.to_owned(),
        found: describe(kind),
        wanted,
    }
}

/// Windows' `FILE_FLAG_OPEN_REPARSE_POINT`: open a link (or any reparse
/// point) itself instead of what it points to, so the type check after the
/// open sees it and refuses it.
#[cfg(windows)]
pub const FILE_FLAG_OPEN_REPARSE_POINT: u32 = 0x0020_0000;

/// `O_NOFOLLOW | O_NONBLOCK` (and `O_CLOEXEC`, which std sets anyway); on
/// Windows `FILE_FLAG_OPEN_REPARSE_POINT` (no FIFOs there to block on).
fn guarded(options: &mut OpenOptions, follow: bool) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use rustix::fs::OFlags;
        use std::os::unix::fs::OpenOptionsExt;
        let mut flags = OFlags::NONBLOCK | OFlags::CLOEXEC;
        if !follow {
            flags |= OFlags::NOFOLLOW;
        }
        options.custom_flags(open_flags(flags));
    }
    #[cfg(windows)]
    if !follow {
        use std::os::windows::fs::OpenOptionsExt;
        options.custom_flags(FILE_FLAG_OPEN_REPARSE_POINT);
    }
    #[cfg(not(any(unix, windows)))]
    let _ = follow;
    options
}

/// Opens with `options` (never following a link unless `follow`), then
/// accepts only a regular file. A refused open says what was there.
fn open_checked(path: &Path, options: &mut OpenOptions, follow: bool) -> Result<File, FsError> {
    #[cfg(not(unix))]
    if !follow
        && let Ok(meta) = fs::symlink_metadata(path)
        && meta.file_type().is_symlink()
    {
        return Err(wrong_kind(path, meta.file_type(), "a regular file"));
    }
    let file = guarded(options, follow).open(path).map_err(|e| {
        // O_NOFOLLOW on a link fails (ELOOP); say what it was.
        match fs::symlink_metadata(path) {
            Ok(meta) if !meta.is_file() && e.kind() != io::ErrorKind::NotFound => {
                wrong_kind(path, meta.file_type(), "a regular file")
            }
            _ => io_err("open", path)(e),
        }
    })?;
    let meta = file.metadata().map_err(io_err("inspect", path))?;
    if !meta.is_file() {
        return Err(wrong_kind(path, meta.file_type(), "a regular file"));
    }
    Ok(file)
}

/// Opens a regular file for reading without following a link.
pub(crate) fn open_read(path: &Path) -> Result<File, FsError> {
    open_checked(path, OpenOptions::new().read(true), false)
}

/// Writes each of `patches` (an offset and its bytes) into the regular file
/// at `path`, where it is, without following a link: for a file of
/// ralph's own whose few changed bytes are cheaper written in place than
/// the file written again (a kept index's smudged records).
pub(crate) fn patch(path: &Path, patches: &[(u64, &[u8])]) -> Result<(), FsError> {
    let mut file = open_checked(path, OpenOptions::new().write(true), false)?;
    for (at, bytes) in patches {
        file.seek(SeekFrom::Start(*at))
            .and_then(|_| file.write_all(bytes))
            .map_err(io_err("write", path))?;
    }
    Ok(())
}

/// Opens a regular file for reading, following links: only for paths that
/// come from the client (the transcript), never for a project's own paths.
/// It still never blocks and accepts only a regular file.
pub fn open_read_following(path: &Path) -> Result<File, FsError> {
    open_checked(path, OpenOptions::new().read(true), true)
}

/// Reads a whole regular file of at most `cap` bytes.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, FsError> {
    let file = open_read(path)?;
    let len = file.metadata().map_err(io_err("inspect", path))?.len();
    if len > cap {
        return Err(FsError::TooLong {
            path: path.to_owned(),
            cap,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // One byte past the cap tells a file that grew since the fstat.
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err("read", path))?;
    if bytes.len() as u64 > cap {
        return Err(FsError::TooLong {
            path: path.to_owned(),
            cap,
        });
    }
    Ok(bytes)
}

/// Reads a whole regular UTF-8 file of at most `cap` bytes; other bytes are
/// refused, never replaced.
pub fn read_text(path: &Path, cap: u64) -> Result<String, FsError> {
    let bytes = read_capped(path, cap)?;
    String::from_utf8(bytes).map_err(|e| FsError::NotUtf8 {
        path: path.to_owned(),
        offset: e.utf8_error().valid_up_to(),
    })
}

/// The last `max` bytes of a regular file (all of it when shorter), for
/// logs that only matter at their end.
pub fn read_tail(path: &Path, max: u64) -> Result<Vec<u8>, FsError> {
    let mut file = open_read(path)?;
    let len = file.metadata().map_err(io_err("inspect", path))?.len();
    let start = len.saturating_sub(max);
    file.seek(SeekFrom::Start(start))
        .map_err(io_err("read", path))?;
    let mut bytes = Vec::new();
    file.take(max)
        .read_to_end(&mut bytes)
        .map_err(io_err("read", path))?;
    Ok(bytes)
}

/// The components of `rel` joined onto `root` one by one; `rel` must be a
/// plain relative path (no `..`, no root).
fn steps(root: &Path, rel: &Path) -> Vec<PathBuf> {
    let mut path = root.to_owned();
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(part) => {
                path.push(part);
                Some(path.clone())
            }
            _ => None,
        })
        .collect()
}

/// Whether `root/rel` is a real folder all the way down: `Ok(false)` when a
/// component is missing, an error when one is a link or not a folder.
pub fn check_dir(root: &Path, rel: impl AsRef<Path>) -> Result<bool, FsError> {
    for step in steps(root, rel.as_ref()) {
        match fs::symlink_metadata(&step) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) => return Err(wrong_kind(&step, meta.file_type(), "a folder")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err("inspect", &step)(e)),
        }
    }
    Ok(true)
}

/// Makes sure `root/rel` is a real folder, creating the missing components
/// one at a time; any component that is a link or not a folder is refused.
pub fn ensure_dir(root: &Path, rel: impl AsRef<Path>) -> Result<PathBuf, FsError> {
    let mut last = root.to_owned();
    for step in steps(root, rel.as_ref()) {
        match fs::symlink_metadata(&step) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) => return Err(wrong_kind(&step, meta.file_type(), "a folder")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::create_dir(&step) {
                Ok(()) => {}
                // Created meanwhile by another process: check what it is.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let meta = fs::symlink_metadata(&step).map_err(io_err("inspect", &step))?;
                    if !meta.is_dir() {
                        return Err(wrong_kind(&step, meta.file_type(), "a folder"));
                    }
                }
                Err(e) => return Err(io_err("create", &step)(e)),
            },
            Err(e) => return Err(io_err("inspect", &step)(e)),
        }
        last = step;
    }
    Ok(last)
}

/// What is at `path` without following a link: `None` when nothing is.
pub fn kind_at(path: &Path) -> Option<fs::FileType> {
    fs::symlink_metadata(path).ok().map(|m| m.file_type())
}

/// Creates `path` exclusively (`O_EXCL`: an existing file or link there is an
/// error, never written through) and writes `bytes`.
pub fn create_new(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    let mut file = guarded(OpenOptions::new().write(true).create_new(true), false)
        .open(path)
        .map_err(io_err("create", path))?;
    file.write_all(bytes).map_err(io_err("write", path))?;
    file.sync_all().map_err(io_err("sync", path))
}

/// [`create_new`] without the fsync, for scratch files that do not outlive
/// the process's own use of them (the sandboxed agent's git folder).
pub fn create_new_unsynced(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    let mut file = guarded(OpenOptions::new().write(true).create_new(true), false)
        .open(path)
        .map_err(io_err("create", path))?;
    file.write_all(bytes).map_err(io_err("write", path))
}

/// Replaces `path` with `bytes` so that readers see the old file or the new
/// one, never a mix: a temp file created exclusively under a random name in
/// the same folder, written, given the old file's permission mode, fsynced,
/// then renamed over `path`. The folder is not fsynced: that would only make
/// the rename itself survive a power cut (after one, a reader finds the old
/// file or the new one, both whole), and it costs a journal commit at every
/// stop. Callers that create files other code depends on call [`sync_dir`].
/// A link or special file at
/// `path` is refused (the rename would replace the link itself, but a
/// project's own files are never links, so one there is a sign of tampering).
pub fn replace(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    replace_as(path, bytes, true)
}

/// [`replace`] without the fsync, for a loop's per-turn counters: a reader
/// still sees the old file or the new one, whole, and so does a restart
/// after the process is killed. A power cut may lose the last turn's update;
/// on file systems that flush a file replaced by rename (ext4, btrfs) the
/// file is then the old one or the new one, elsewhere it may read as
/// corrupt, which ralph reports and moves aside without trapping a session.
/// The fsync is most of a blocking stop's cost (about 0.6 ms of 3).
pub fn replace_unsynced(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    replace_as(path, bytes, false)
}

fn replace_as(path: &Path, bytes: &[u8], synced: bool) -> Result<(), FsError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let old = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => Some(kept_mode(meta.permissions())),
        Ok(meta) => return Err(wrong_kind(path, meta.file_type(), "a regular file")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err("inspect", path)(e)),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(TEMP_PREFIX).suffix("").rand_bytes(12);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // A new file gets the usual 0666 less the umask, as `File::create` would.
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    let mut temp = builder
        .tempfile_in(dir)
        .map_err(io_err("create a temp file in", dir))?;
    if let Some(perms) = old.clone() {
        temp.as_file()
            .set_permissions(perms)
            .map_err(io_err("set the mode of", temp.path()))?;
    }
    temp.write_all(bytes)
        .map_err(io_err("write", temp.path()))?;
    if synced {
        temp.as_file()
            .sync_all()
            .map_err(io_err("sync", temp.path()))?;
    }
    persist(temp, path)?;
    // Windows: the read-only mark set on the open temp file may not survive
    // the rename (it does not under Wine); set it again on the new file.
    #[cfg(windows)]
    if let Some(perms) = old.filter(std::fs::Permissions::readonly)
        && fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
    {
        let _ = fs::set_permissions(path, perms);
    }
    Ok(())
}

/// How long a replace keeps trying while Windows refuses the rename because
/// another program holds the target open without sharing delete access (an
/// editor, a virus scanner, an indexer).
#[cfg(windows)]
const REPLACE_PATIENCE: Duration = Duration::from_secs(3);

/// Renames the temp file over `path`. On Unix one rename. On Windows a
/// read-only target is made writable first (a rename over it is refused,
/// where Unix would replace it: the new file keeps the read-only mark), and
/// a target held open by another program is retried for
/// [`REPLACE_PATIENCE`], then reported. A failed replace leaves no temp.
fn persist(temp: tempfile::NamedTempFile, path: &Path) -> Result<(), FsError> {
    #[cfg(windows)]
    {
        let started = std::time::Instant::now();
        let mut temp = temp;
        let mut pause = Duration::from_millis(10);
        loop {
            match temp.persist(path) {
                Ok(_) => return Ok(()),
                Err(e) if windows_busy(&e.error) && started.elapsed() < REPLACE_PATIENCE => {
                    clear_read_only(path);
                    temp = e.file;
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                // Dropping the returned temp file removes it.
                Err(e) => return Err(io_err("replace", path)(e.error)),
            }
        }
    }
    #[cfg(not(windows))]
    temp.persist(path)
        .map(|_| ())
        .map_err(|e| io_err("replace", path)(e.error))
}

/// Access denied (a read-only target, or one being deleted), a sharing or a
/// lock violation: the errors another program's open handle causes.
#[cfg(windows)]
fn windows_busy(e: &io::Error) -> bool {
    const ACCESS_DENIED: i32 = 5;
    const SHARING_VIOLATION: i32 = 32;
    const LOCK_VIOLATION: i32 = 33;
    matches!(
        e.raw_os_error(),
        Some(ACCESS_DENIED | SHARING_VIOLATION | LOCK_VIOLATION)
    )
}

/// Drops the read-only mark of a regular file (never through a link).
#[cfg(windows)]
fn clear_read_only(path: &Path) {
    if let Ok(meta) = fs::symlink_metadata(path)
        && meta.is_file()
        && meta.permissions().readonly()
    {
        let mut perms = meta.permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        let _ = fs::set_permissions(path, perms);
    }
}

/// The permission bits a rewrite keeps: read, write and execute for each
/// class; never set-id or sticky bits from a file ralph did not make.
fn kept_mode(perms: fs::Permissions) -> fs::Permissions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::Permissions::from_mode(perms.mode() & 0o777)
    }
    #[cfg(not(unix))]
    perms
}

/// What identifies one version of a file without opening it: the inode it
/// is, its size, and when it was last written or had its links changed.
/// Every write ralph makes to a loop file or a record is a rename of a new
/// file over the old, so a later write is always another inode; an edit in
/// place changes the size or the times. Taken before a read, a stamp equal
/// later means the file read is still the file there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp {
    identity: (u64, u64),
    len: u64,
    modified: Option<SystemTime>,
    changed: (i64, i64),
}

impl FileStamp {
    /// The stamp of whatever is at `path` (not following a link); `None`
    /// when nothing is there, which is a stamp too.
    pub fn at(path: &Path) -> Option<Self> {
        fs::symlink_metadata(path).ok().map(|meta| Self::of(&meta))
    }

    pub fn of(meta: &fs::Metadata) -> Self {
        #[cfg(unix)]
        let (identity, changed) = {
            use std::os::unix::fs::MetadataExt;
            ((meta.dev(), meta.ino()), (meta.ctime(), meta.ctime_nsec()))
        };
        #[cfg(not(unix))]
        let (identity, changed) = ((0, 0), (0, 0));
        Self {
            identity,
            len: meta.len(),
            modified: meta.modified().ok(),
            changed,
        }
    }
}

/// Opens a regular file (created if missing) for appending, never through
/// a link or a second hard link, never blocking on a FIFO: the one open a
/// decision log gets in a stop.
pub fn open_append(path: &Path) -> Result<File, FsError> {
    let file = open_checked(path, OpenOptions::new().append(true).create(true), false)?;
    single_link(path, &file)?;
    Ok(file)
}

/// Appends `bytes` to a regular file (created if missing) in one write,
/// never through a link, never blocking on a FIFO.
pub fn append(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    let mut file = open_append(path)?;
    file.write_all(bytes).map_err(io_err("append to", path))
}

/// A file ralph writes in place (a log, the lock) must have one name only:
/// a hard link planted in a checkout could otherwise lead the write to a
/// file elsewhere. (Replacing by rename never writes through a hard link.)
fn single_link(path: &Path, file: &File) -> Result<(), FsError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().map_err(io_err("inspect", path))?;
        if meta.nlink() > 1 {
            return Err(FsError::WrongKind {
                path: path.to_owned(),
                found: "a file with several hard links",
                wanted: "a file of its own",
            });
        }
    }
    #[cfg(not(unix))]
    let _ = (path, file);
    Ok(())
}

/// Opens (creating if missing) a lock file: read-write so that a FIFO
/// there opens without blocking and is then refused.
pub fn open_lock(path: &Path) -> Result<File, FsError> {
    let file = open_checked(
        path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
        false,
    )?;
    single_link(path, &file)?;
    Ok(file)
}

/// Writes `pid` as the whole content of an open lock file: written over
/// the old content, then cut to its length. Truncating to zero first would
/// free and reallocate the file's block at every stop, which costs a
/// journal commit (about 0.4 ms here, a tenth of a whole stop).
pub fn write_holder(file: &File, pid: u32) -> io::Result<()> {
    write_over(file, pid.to_string().as_bytes())
}

/// Writes `bytes` as the whole content of an open file, over the old
/// content, then cut to its length (no new file, so no new inode, at every
/// stop; a reader may see it half written, so only for a figure that can
/// be worked out again).
pub fn write_over(mut file: &File, bytes: &[u8]) -> io::Result<()> {
    file.seek(SeekFrom::Start(0))?;
    file.write_all(bytes)?;
    file.set_len(bytes.len() as u64)
}

/// The pid written into a lock file by its holder, if one reads back.
pub fn read_holder(path: &Path) -> Option<u32> {
    let bytes = read_capped(path, LOCK_FILE_CAP).ok()?;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

/// Removes ralph's own stale temp files from `dir`: a name starting with
/// [`TEMP_PREFIX`], a regular file (never following a link), last written
/// more than [`STALE_TEMP_AGE`] ago. Call it under the project lock; best
/// effort. Needs no `/proc`: a live writer finishes within milliseconds.
pub fn remove_stale_temps(dir: &Path, now: SystemTime) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if is_temp_name(&entry.file_name()) {
            remove_if_stale(&entry.path(), now);
        }
    }
}

/// Whether a folder entry's name is one of ralph's temp files'.
pub fn is_temp_name(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| n.starts_with(TEMP_PREFIX))
}

/// Removes one temp file found in a listing when it is stale (see
/// [`remove_stale_temps`]).
pub fn remove_if_stale(path: &Path, now: SystemTime) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    let old_enough = meta
        .modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .is_some_and(|age| age > STALE_TEMP_AGE);
    if meta.is_file() && old_enough {
        let _ = fs::remove_file(path);
    }
}

/// Moves the entry at `from` (a folder, file or link: the entry itself, never what a link
/// names) to `to`, which must not exist yet (`rename(2)`; another file system fails).
pub fn move_entry(from: &Path, to: &Path) -> io::Result<()> {
    if fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::from(io::ErrorKind::AlreadyExists));
    }
    fs::rename(from, to)
}

/// Moves the regular file `from` over `to` (`rename(2)`, which replaces it
/// whole): git's lock protocol, for files of ralph's own (a kept index
/// written under its `.lock`).
pub(crate) fn rename_over(from: &Path, to: &Path) -> io::Result<()> {
    if !fs::symlink_metadata(from)?.is_file() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    fs::rename(from, to)
}

/// Opens the folder `path` for opening what is beneath it (`openat2`):
/// the top of a project, as its user named it (a link there is followed,
/// as the user's own path; none below it is).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // `openat2` is Linux's
pub(crate) fn open_folder(path: &Path) -> Result<File, FsError> {
    let folder = File::open(path).map_err(io_err("open", path))?;
    let meta = folder.metadata().map_err(io_err("inspect", path))?;
    if !meta.is_dir() {
        return Err(wrong_kind(path, meta.file_type(), "a folder"));
    }
    Ok(folder)
}

/// Removes the entry at `path`: a link or file itself, a folder with all it holds, never
/// following a link. Nothing there is not an error.
pub fn remove_entry(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the regular file at `path` (a link is never followed, nor
/// removed); nothing there is no error. Best effort: whether it went.
pub fn remove(path: &Path) -> bool {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => fs::remove_file(path).is_ok(),
        Ok(_) => false,
        Err(_) => true,
    }
}

/// Copies a regular file into a new file created exclusively.
pub fn copy_new(from: &Path, to: &Path) -> Result<(), FsError> {
    copy_new_dated(from, to, Dated::Now)
}

/// The modification time a copy gets.
pub(crate) enum Dated {
    /// The time of the copy, as any new file.
    Now,
    /// The source's (never later than now): a copied git index then tells
    /// the files changed in the second it was written as git's own would.
    AsSource,
    /// The first second of 1970: git takes every entry of a copied index as
    /// possibly changed since it was written and compares each file's
    /// bytes, whatever stat data the entry holds.
    Epoch,
}

/// [`copy_new`], with the copy's modification time as `dated` says.
pub(crate) fn copy_new_dated(from: &Path, to: &Path, dated: Dated) -> Result<(), FsError> {
    let mut source = open_read(from)?;
    let modified = match dated {
        Dated::Now => None,
        Dated::AsSource => source.metadata().and_then(|m| m.modified()).ok(),
        // Not 0: git reads an index dated 0 as of no known time, never racy.
        Dated::Epoch => Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1)),
    };
    let mut target = guarded(OpenOptions::new().write(true).create_new(true), false)
        .open(to)
        .map_err(io_err("create", to))?;
    io::copy(&mut source, &mut target).map_err(io_err("copy into", to))?;
    if let Some(modified) = modified {
        target
            .set_modified(modified.min(SystemTime::now()))
            .map_err(io_err("date", to))?;
    }
    target.sync_all().map_err(io_err("sync", to))
}

/// Flushes a folder's entries (a rename) to disk; best effort.
pub fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    {
        use rustix::fs::OFlags;
        use std::os::unix::fs::OpenOptionsExt;
        if let Ok(d) = OpenOptions::new()
            .read(true)
            .custom_flags(open_flags(
                OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::NONBLOCK,
            ))
            .open(dir)
        {
            let _ = d.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// `open(2)` flags as `OpenOptionsExt::custom_flags` takes them. The flags
/// ralph sets are small constants, far below `i32::MAX`: none is dropped.
#[cfg(unix)]
fn open_flags(flags: rustix::fs::OFlags) -> i32 {
    i32::try_from(flags.bits()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[cfg(unix)]
    fn fifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    #[test]
    fn reads_a_regular_file_within_its_cap() {
        let d = dir();
        let p = d.path().join("a");
        fs::write(&p, "hello").unwrap();
        assert_eq!(read_text(&p, 5).unwrap(), "hello");
        assert!(matches!(
            read_text(&p, 4),
            Err(FsError::TooLong { cap: 4, .. })
        ));
        assert!(
            read_text(&d.path().join("missing"), 5)
                .unwrap_err()
                .is_not_found()
        );
    }

    #[test]
    fn refuses_bytes_that_are_not_utf8() {
        let d = dir();
        let p = d.path().join("latin1");
        fs::write(&p, b"caf\xe9").unwrap();
        let e = read_text(&p, 100).unwrap_err();
        assert!(matches!(e, FsError::NotUtf8 { offset: 3, .. }), "{e}");
        assert!(e.to_string().contains("UTF-8"));
    }

    #[cfg(unix)]
    #[test]
    fn never_follows_a_link_and_refuses_special_files() {
        let d = dir();
        let target = d.path().join("target");
        fs::write(&target, "secret").unwrap();
        let link = d.path().join("link");
        symlink(&target, &link).unwrap();
        let e = read_text(&link, 100).unwrap_err();
        assert!(
            matches!(
                e,
                FsError::WrongKind {
                    found: "a symbolic link",
                    ..
                }
            ),
            "{e}"
        );
        assert!(append(&link, b"x").is_err());
        assert!(open_lock(&link).is_err());
        assert!(create_new(&link, b"x").is_err());
        assert!(replace(&link, b"x").is_err());
        assert_eq!(fs::read_to_string(&target).unwrap(), "secret");

        let f = d.path().join("fifo");
        fifo(&f);
        let started = std::time::Instant::now();
        for e in [
            read_text(&f, 100).unwrap_err(),
            append(&f, b"x").unwrap_err(),
            open_lock(&f).unwrap_err(),
            read_tail(&f, 10).unwrap_err(),
        ] {
            assert!(e.to_string().contains("FIFO"), "{e}");
        }
        // A blocking open would never return: this only stops a hung test.
        assert!(started.elapsed() < Duration::from_secs(60));
        let e = read_text(Path::new("/dev/null"), 100);
        assert!(e.is_err());
        let e = open_read_following(d.path()).unwrap_err();
        assert!(
            matches!(
                e,
                FsError::WrongKind {
                    found: "a folder",
                    ..
                }
            ),
            "{e}"
        );
        // The transcript may be reached through a link, but only to a regular file.
        assert_eq!(open_read_following(&link).map(|_| ()).ok(), Some(()));
        let fifo_link = d.path().join("fifo-link");
        symlink(&f, &fifo_link).unwrap();
        assert!(open_read_following(&fifo_link).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn folders_are_checked_component_by_component() {
        let d = dir();
        let outside = dir();
        let root = d.path();
        assert!(!check_dir(root, ".claude/ralph").unwrap());
        let made = ensure_dir(root, ".claude/ralph/logs").unwrap();
        assert_eq!(made, root.join(".claude/ralph/logs"));
        assert!(check_dir(root, ".claude/ralph/logs").unwrap());
        symlink(outside.path(), root.join(".claude/ralph/history")).unwrap();
        let e = ensure_dir(root, ".claude/ralph/history/x").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(check_dir(root, ".claude/ralph/history").is_err());
        fs::write(root.join("plain"), "").unwrap();
        assert!(ensure_dir(root, "plain/sub").is_err());
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[cfg(unix)]
    #[test]
    fn replace_keeps_the_mode_and_every_byte() {
        let d = dir();
        let p = d.path().join("x-loop.local.md");
        let body = b"\xef\xbb\xbf---\r\nactive: true\r\n---\r\n\r\nbody\r\n";
        fs::write(&p, body).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        replace(&p, body).unwrap();
        assert_eq!(fs::read(&p).unwrap(), body);
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let fresh = d.path().join("fresh");
        replace(&fresh, b"new").unwrap();
        // A new file gets the mode `File::create` would give it (0666 less the umask).
        let plain = d.path().join("plain");
        fs::write(&plain, "").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&fresh), mode(&plain));
        fs::remove_file(&plain).unwrap();
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 2, "no temp left");
    }

    #[cfg(unix)]
    #[test]
    fn stale_temps_are_ralphs_own_old_regular_files_only() {
        let d = dir();
        let outside = dir();
        let victim = outside.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let names = [
            ".ralph-tmp-old",
            ".ralph-tmp-link",
            ".other.tmp",
            "x-loop.local.md",
        ];
        for n in &names[..] {
            if *n == ".ralph-tmp-link" {
                symlink(&victim, d.path().join(n)).unwrap();
            } else {
                fs::write(d.path().join(n), "").unwrap();
            }
        }
        // Nothing is old yet: nothing goes.
        remove_stale_temps(d.path(), SystemTime::now());
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 4);
        // An hour later the regular temp goes; the link, others and the target stay.
        remove_stale_temps(d.path(), SystemTime::now() + Duration::from_secs(3600));
        let mut left: Vec<String> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, [".other.tmp", ".ralph-tmp-link", "x-loop.local.md"]);
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
    }

    #[cfg(unix)]
    #[test]
    fn in_place_writes_refuse_a_hard_link() {
        let d = dir();
        let victim = d.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let planted = d.path().join("log");
        fs::hard_link(&victim, &planted).unwrap();
        let e = append(&planted, b"x").unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        assert!(open_lock(&planted).is_err());
        // A replace renames a new file over the name: the other name keeps its bytes.
        replace(&planted, b"new").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
    }

    #[test]
    fn lock_holder_pid_round_trips() {
        let d = dir();
        let p = d.path().join("lock");
        let f = open_lock(&p).unwrap();
        write_holder(&f, 4242).unwrap();
        write_holder(&f, 17).unwrap();
        assert_eq!(read_holder(&p), Some(17));
        fs::write(&p, "garbage").unwrap();
        assert_eq!(read_holder(&p), None);
    }

    #[test]
    fn tails_and_copies() {
        let d = dir();
        let p = d.path().join("log");
        append(&p, b"one\n").unwrap();
        append(&p, b"two\n").unwrap();
        assert_eq!(read_tail(&p, 4).unwrap(), b"two\n");
        assert_eq!(read_tail(&p, 100).unwrap(), b"one\ntwo\n");
        let copy = d.path().join("copy");
        copy_new(&p, &copy).unwrap();
        assert_eq!(fs::read(&copy).unwrap(), b"one\ntwo\n");
        assert!(copy_new(&p, &copy).is_err(), "never overwrites");
        assert!(create_new(&copy, b"x").is_err());
    }

    #[test]
    fn a_dated_copy_keeps_the_sources_time_or_takes_1970s() {
        let d = dir();
        let p = d.path().join("index");
        fs::write(&p, "entries").unwrap();
        let then = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(then)
            .unwrap();
        let modified = |name: &str| {
            fs::metadata(d.path().join(name))
                .unwrap()
                .modified()
                .unwrap()
        };
        copy_new_dated(&p, &d.path().join("kept"), Dated::AsSource).unwrap();
        assert_eq!(modified("kept"), then);
        copy_new_dated(&p, &d.path().join("old"), Dated::Epoch).unwrap();
        assert_eq!(
            modified("old"),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1)
        );
        copy_new_dated(&p, &d.path().join("new"), Dated::Now).unwrap();
        assert!(modified("new") > then);
        assert_eq!(fs::read(d.path().join("old")).unwrap(), b"entries");
    }

    /// Windows refuses a rename over a read-only file (Unix replaces it);
    /// the replace clears the mark, and the new file keeps it. CRLF bytes
    /// travel unchanged.
    #[cfg(windows)]
    #[test]
    fn replace_over_a_read_only_file_on_windows() {
        let d = dir();
        let p = d.path().join("x-loop.local.md");
        fs::write(&p, "---\r\nactive: true\r\n---\r\n").unwrap();
        let mut perms = fs::metadata(&p).unwrap().permissions();
        perms.set_readonly(true);
        fs::set_permissions(&p, perms).unwrap();
        let body = b"---\r\nactive: false\r\n---\r\n\r\nbody\r\n";
        replace(&p, body).unwrap();
        assert_eq!(fs::read(&p).unwrap(), body);
        assert!(fs::metadata(&p).unwrap().permissions().readonly());
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "no temp left");
    }

    /// A target another program holds open without sharing delete access
    /// (an editor, a scanner): the replace waits for it within
    /// [`REPLACE_PATIENCE`], and past that fails, leaving no temp file.
    #[cfg(windows)]
    #[test]
    fn replace_waits_for_a_target_held_open_on_windows() {
        use std::os::windows::fs::OpenOptionsExt;
        use std::sync::mpsc;
        let d = dir();
        let p = d.path().join("x-loop.local.md");
        fs::write(&p, "old").unwrap();
        let hold = |p: &Path| {
            OpenOptions::new()
                .read(true)
                .share_mode(1) // FILE_SHARE_READ only: no delete, no rename over it
                .open(p)
                .unwrap()
        };
        // Held for good: refused after the patience, the old bytes and no temp left.
        let held = hold(&p);
        let started = std::time::Instant::now();
        let e = replace(&p, b"new").unwrap_err();
        assert!(started.elapsed() >= REPLACE_PATIENCE, "{e}");
        assert!(e.to_string().contains("replace"), "{e}");
        drop(held);
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "no temp left");
        // Released while the replace waits: the replace goes through.
        let (opened, wait_for_open) = mpsc::channel();
        let holder = {
            let p = p.clone();
            std::thread::spawn(move || {
                let file = hold(&p);
                opened.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(500));
                drop(file);
            })
        };
        wait_for_open.recv().unwrap();
        replace(&p, b"new").unwrap();
        holder.join().unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "no temp left");
    }
}
