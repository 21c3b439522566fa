//! A tracked file the status names as modified, staged into a kept index
//! by ralph itself: the `git update-index` of a looping stop that only
//! edited files, gone (issue 47's hot path: that process read and wrote the
//! whole index, 6–9 ms in a 30,000-file repository, to change one entry).
//!
//! What git would do, done the same way, and only where it is certain to
//! be the same:
//! - the file's bytes are its blob as they are: only when nothing converts
//!   them on the way in (no `.gitattributes` in its folder or above, in the
//!   work tree or the index, no `.git/info/attributes`, no `core.autocrlf`
//!   or include in any configuration file, nothing from the environment;
//!   the user's attributes file and every filter driver are off for a kept
//!   index already), a regular file of at most [`MAX_FILE_BYTES`], of the
//!   mode the status saw (its executable bit as the file has it);
//! - it is opened beneath the project with no link followed at any part
//!   of its path (`openat2`, Linux only), read with its stat data taken
//!   before and checked after, so the record says what the bytes are;
//! - its entry keeps its place and flags; its stat data and id are those
//!   git's `fill_stat_data` writes; the cached trees of its folders are
//!   marked invalid, as git marks them; the untracked cache (which lists no
//!   tracked file) is kept as it is;
//! - the blob is written as a loose object (stored zlib blocks, as
//!   `index_tree` writes trees) into the folder git would write it to,
//!   unless that or one of its alternates has it loose;
//! - the index is written whole under git's own lock (`index.lock`, made
//!   exclusively, then renamed over the index), as git writes it;
//! - or, while the files read are small beside the index, it is not
//!   written at all: the edits are kept beside it for this stop
//!   (`index_tree::Edit`, applied to its entries where they are read), the status
//!   names the files again at the next stop and they are read again. A
//!   large index is then not rewritten for a small edit (2 MB at 30,000
//!   files, the largest cost left in such a stop).
//!
//! Anything else (more than [`MAX_FILES`] files, an entry not found or
//! flagged, an extension other than the cached trees and the untracked
//! cache, a checksum to compute, a file that changed while read) answers
//! `None`, and the caller runs `git update-index` as before.

use std::path::Path;

/// The largest file staged here; a larger one is git's (its loose objects
/// are compressed, these are stored as they are).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // read by the Linux reader
pub(crate) const MAX_FILE_BYTES: u64 = 256 * 1024;

/// The most files one staging takes here; more go to git (each index
/// entry is compared with every one of them).
pub(crate) const MAX_FILES: usize = 64;

/// Where a staging's new objects go: `write` (git's `GIT_OBJECT_DIRECTORY`
/// for the kept index), and the folders whose loose objects need not be
/// written again.
pub(crate) struct ObjectFolders {
    pub write: std::path::PathBuf,
    pub also: Vec<std::path::PathBuf>,
}

impl ObjectFolders {
    /// The folders a git process given `env` writes objects to and reads
    /// them from (`GIT_OBJECT_DIRECTORY`, `GIT_ALTERNATE_OBJECT_DIRECTORIES`);
    /// `None` when it writes into the repository's own.
    pub(crate) fn of(env: &[(&'static str, std::path::PathBuf)]) -> Option<Self> {
        let var = |name| env.iter().find(|(key, _)| *key == name).map(|(_, v)| v);
        let write = var("GIT_OBJECT_DIRECTORY")?.clone();
        // A quoted alternate (one with a `:`) is not looked in: at worst a
        // loose object it holds is written once more.
        let also = var("GIT_ALTERNATE_OBJECT_DIRECTORIES")
            .map(|list| {
                list.to_string_lossy()
                    .split(':')
                    .filter(|p| !p.is_empty() && !p.starts_with('"'))
                    .map(std::path::PathBuf::from)
                    .collect()
            })
            .unwrap_or_default();
        Some(Self { write, also })
    }
}

/// One modified file to stage: its path from the top of the repository and
/// the mode the status saw in the work tree (`100644` or `100755`).
pub(crate) struct Modified<'a> {
    pub path: &'a [u8],
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // read by the Linux reader
    pub mode: u32,
}

/// The index as a staging left it: its bytes, and the stamp the file had
/// just after (so a later read can be saved while it keeps it).
pub(crate) type Written = (Vec<u8>, crate::same_second::Stamp);

/// What a staging here did: the index as it is on disk now, and the edits
/// kept beside it rather than written into it (none when it was written).
pub(crate) struct OwnStaged {
    pub index: Written,
    pub aside: Vec<crate::index_tree::Edit>,
}

/// How many times the bytes of the files read at a stop the index must be
/// for them to be kept beside it, not written into it: reading them again
/// at every stop then costs less than writing the index once.
const ASIDE_SHARE: usize = 2;

/// Stages `files` into the kept index `index` of the repository at `root`,
/// their blobs into `objects`: the index written with them, or as it was
/// with them kept beside it ([`OwnStaged`]); `None` when this could not
/// do it for certain (the index is then as it was).
pub(crate) fn stage(
    root: &Path,
    index: &Path,
    objects: &ObjectFolders,
    files: &[Modified<'_>],
) -> Option<OwnStaged> {
    if files.is_empty() || files.len() > MAX_FILES || !conversions_off(root) {
        return None;
    }
    stage_as_they_are(root, index, objects, files, Aside::WhenSmall)
}

/// Whether a staging may keep its edits beside the index.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Aside {
    /// When the files read are small beside the index ([`ASIDE_SHARE`]).
    WhenSmall,
    /// Never: the index is written with them (the write path's own tests,
    /// which run on Linux alone).
    #[cfg_attr(not(all(test, target_os = "linux")), allow(dead_code))]
    Never,
}

/// [`stage`] once it is known that no configuration converts a file.
fn stage_as_they_are(
    root: &Path,
    index: &Path,
    objects: &ObjectFolders,
    files: &[Modified<'_>],
    aside: Aside,
) -> Option<OwnStaged> {
    let (mut bytes, stamp) = crate::same_second::read_stamped(index)?;
    // The index is read for certain before any file is: an index this
    // cannot write costs no read and leaves no object.
    let (found, extensions) = walk(&bytes, files)?;
    let tail = new_extensions(&bytes, extensions, files)?;
    let top = open_top(root)?;
    let mut records = Vec::with_capacity(files.len());
    let mut read = 0usize;
    for file in files {
        let (record, blob) = read_file(&top, file)?;
        crate::index_tree::store_object(&blob, &objects.write, &objects.also)?;
        read = read.saturating_add(blob.len());
        records.push(record);
    }
    if aside == Aside::WhenSmall && read.saturating_mul(ASIDE_SHARE) <= bytes.len() {
        let aside = files
            .iter()
            .zip(&records)
            .map(|(file, record)| edit_of(file, record))
            .collect();
        return Some(OwnStaged {
            index: (bytes, stamp),
            aside,
        });
    }
    for (record, at) in records.iter().zip(found) {
        // The entry stays where it is, its record written over.
        bytes[at..at + 60].copy_from_slice(record);
    }
    bytes.truncate(extensions);
    bytes.extend_from_slice(&tail);
    let written = write_locked(index, &bytes, &stamp)?;
    Some(OwnStaged {
        index: (bytes, written),
        aside: Vec::new(),
    })
}

/// What `file`'s entry becomes, from its `record`.
fn edit_of(file: &Modified<'_>, record: &Record) -> crate::index_tree::Edit {
    let mut id = [0u8; 20];
    id.copy_from_slice(&record[40..]);
    crate::index_tree::Edit {
        path: file.path.to_vec(),
        mode: file.mode,
        size: u32::from_be_bytes([record[36], record[37], record[38], record[39]]),
        id,
    }
}

/// The top of the repository, opened for what is read beneath it.
#[cfg(target_os = "linux")]
fn open_top(root: &Path) -> Option<std::fs::File> {
    crate::safe_fs::open_folder(root).ok()
}

#[cfg(not(target_os = "linux"))]
fn open_top(_root: &Path) -> Option<std::fs::File> {
    None
}

/// Whether nothing converts a file's bytes on their way into the index but
/// what this module checks per file (a `.gitattributes` on its path):
/// `.git` a plain folder with no `info/attributes`, and no configuration
/// file git reads may set `core.autocrlf` (nor include another that might).
fn conversions_off(root: &Path) -> bool {
    let dot_git = root.join(".git");
    std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_dir())
        && crate::safe_fs::kind_at(&dot_git.join("info/attributes")).is_none()
        && crate::git_config::silent_on(root, "autocrlf")
}

/// A staged file's index record: its stat data and id, the first 60 bytes
/// of its entry, as git's `fill_stat_data` and the blob's id make them.
type Record = [u8; 60];

/// Reads `file` beneath the folder `top` (no link followed anywhere on its path):
/// its record and its blob's bytes, or `None` when it is not a regular
/// file of the status's mode and at most [`MAX_FILE_BYTES`], lies under a
/// `.gitattributes`, or changed while read.
#[cfg(target_os = "linux")]
fn read_file(top: &std::fs::File, file: &Modified<'_>) -> Option<(Record, Vec<u8>)> {
    use std::io::Read as _;
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::MetadataExt as _;

    if !crate::index_tree::tree_path(file.path) || !matches!(file.mode, 0o100_644 | 0o100_755) {
        return None;
    }
    let path = std::ffi::OsStr::from_bytes(file.path);
    if under_attributes(top, file.path) {
        return None;
    }
    let fd = beneath(top, path, rustix::fs::OFlags::RDONLY)?;
    let mut opened = std::fs::File::from(fd);
    let before = opened.metadata().ok()?;
    let executable = before.mode() & 0o100 != 0;
    if !before.is_file() || before.len() > MAX_FILE_BYTES || executable != (file.mode == 0o100_755)
    {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(before.len()).ok()?);
    opened
        .by_ref()
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let after = opened.metadata().ok()?;
    let same = |m: &std::fs::Metadata| {
        (
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
            m.ino(),
        )
    };
    if same(&before) != same(&after) || bytes.len() as u64 != before.len() {
        return None;
    }
    let mut blob = format!("blob {}\0", bytes.len()).into_bytes();
    blob.extend_from_slice(&bytes);
    let id = crate::index_tree::object_id(&blob);
    let low = |value: i64| (value.cast_unsigned() & 0xffff_ffff).to_be_bytes();
    let mut record = [0u8; 60];
    let fields = [
        low(before.ctime()),
        low(before.ctime_nsec()),
        low(before.mtime()),
        low(before.mtime_nsec()),
        (before.dev() & 0xffff_ffff).to_be_bytes(),
        (before.ino() & 0xffff_ffff).to_be_bytes(),
        u64::from(file.mode).to_be_bytes(),
        u64::from(before.uid()).to_be_bytes(),
        u64::from(before.gid()).to_be_bytes(),
        (before.len() & 0xffff_ffff).to_be_bytes(),
    ];
    for (slot, field) in record.chunks_exact_mut(4).zip(fields) {
        // Each field is the low 32 bits, big-endian, as git stores it.
        slot.copy_from_slice(&field[4..]);
    }
    record[40..].copy_from_slice(&id);
    Some((record, blob))
}

#[cfg(not(target_os = "linux"))]
fn read_file(_top: &std::fs::File, _file: &Modified<'_>) -> Option<(Record, Vec<u8>)> {
    None
}

/// `path` opened beneath the folder `top` with `flags`, no link followed
/// at any part of it, never blocking on a pipe; `None` when that cannot be
/// done (a kernel without `openat2` too).
#[cfg(target_os = "linux")]
fn beneath(
    top: &std::fs::File,
    path: &std::ffi::OsStr,
    flags: rustix::fs::OFlags,
) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{OFlags, ResolveFlags};
    rustix::fs::openat2(
        top,
        path,
        flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        rustix::fs::Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()
}

/// Whether a `.gitattributes` (of any kind) is in the work tree in the
/// folder of `path` or one above it: its rules might convert the file.
#[cfg(target_os = "linux")]
fn under_attributes(top: &std::fs::File, path: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let folders = std::iter::once(&b""[..]).chain(
        path.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .map(|(at, _)| &path[..=at]),
    );
    folders.into_iter().any(|folder| {
        let mut name = folder.to_vec();
        name.extend_from_slice(b".gitattributes");
        !matches!(
            rustix::fs::statat(
                top,
                std::ffi::OsStr::from_bytes(&name),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            ),
            Err(rustix::io::Errno::NOENT)
        )
    })
}

/// The extensions and the (empty) checksum that end the index `bytes`
/// once `files` are staged, from `extensions` (where its entries end) on:
/// the cached trees of their folders invalidated; `None` when the index
/// carries a checksum (`index.skipHash` writes none) or an extension this
/// does not write ([`rewrite_extensions`]).
fn new_extensions(bytes: &[u8], extensions: usize, files: &[Modified<'_>]) -> Option<Vec<u8>> {
    let body = bytes.len().checked_sub(20)?;
    if extensions > body || bytes[body..].iter().any(|b| *b != 0) {
        return None;
    }
    let mut tail = Vec::with_capacity(bytes.len() - extensions);
    rewrite_extensions(&bytes[extensions..body], files, &mut tail)?;
    tail.extend_from_slice(&[0u8; 20]);
    Some(tail)
}

/// Where the entry of each of `files` starts in the index `bytes` (in the
/// order of `files`), and where its extensions start; `None` for an index
/// this does not read, a file not in it once as a plain entry (stage 0, no
/// flag), or any `.gitattributes` entry (its rules might apply).
fn walk(bytes: &[u8], files: &[Modified<'_>]) -> Option<(Vec<usize>, usize)> {
    let version = crate::index_tree::header(bytes)?;
    let count = crate::index_tree::word(bytes, 8)?;
    let mut found = vec![None; files.len()];
    let mut at = 12usize;
    let mut path: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = at;
        let step = crate::index_tree::step_entry(bytes, at, version, 20, &mut path)?;
        at = step.next;
        if path == b".gitattributes" || path.ends_with(b"/.gitattributes") {
            return None;
        }
        if let Some(i) = files.iter().position(|f| f.path == path.as_slice()) {
            // Stage 0, no extended flag, not marked assume-valid.
            let plain = step.flags & 0xf000 == 0;
            if !plain || found[i].replace(start).is_some() {
                return None;
            }
        }
    }
    let found: Option<Vec<usize>> = found.into_iter().collect();
    Some((found?, at))
}

/// Copies the index's extensions `extensions` after `out`, the cached
/// trees (`TREE`) of the folders of `files` marked invalid; `None` for any
/// other extension but the untracked cache (`UNTR`, kept as it is: it lists
/// no tracked file) or one that does not read.
fn rewrite_extensions(
    mut extensions: &[u8],
    files: &[Modified<'_>],
    out: &mut Vec<u8>,
) -> Option<()> {
    while !extensions.is_empty() {
        let signature = extensions.get(..4)?;
        let len =
            usize::try_from(u32::from_be_bytes(extensions.get(4..8)?.try_into().ok()?)).ok()?;
        let data = extensions.get(8..8usize.checked_add(len)?)?;
        match signature {
            b"TREE" => {
                let mut trees = Vec::with_capacity(data.len());
                let rest = invalidate(data, b"", files, &mut trees)?;
                if !rest.is_empty() {
                    return None;
                }
                out.extend_from_slice(b"TREE");
                out.extend_from_slice(&u32::try_from(trees.len()).ok()?.to_be_bytes());
                out.extend_from_slice(&trees);
            }
            b"UNTR" => out.extend_from_slice(&extensions[..8 + len]),
            _ => return None,
        }
        extensions = &extensions[8 + len..];
    }
    Some(())
}

/// One cached tree of a `TREE` extension and those under it, read from the
/// start of `data` (its folder's path `folder`, with its `/`, or empty at
/// the top) and written to `out`, marked invalid (entry count `-1`, no id)
/// when one of `files` is under it; what follows it.
fn invalidate<'d>(
    data: &'d [u8],
    folder: &[u8],
    files: &[Modified<'_>],
    out: &mut Vec<u8>,
) -> Option<&'d [u8]> {
    let (node, mut rest) = crate::index_tree::tree_node(data)?;
    let path = node.path(folder);
    let touched = files.iter().any(|f| f.path.starts_with(&path));
    out.extend_from_slice(node.name);
    out.push(0);
    match node.id {
        Some(id) if !touched => {
            out.extend_from_slice(format!("{} {}\n", node.entries, node.subtrees).as_bytes());
            out.extend_from_slice(&id);
        }
        _ => out.extend_from_slice(format!("-1 {}\n", node.subtrees).as_bytes()),
    }
    for _ in 0..node.subtrees {
        rest = invalidate(rest, &path, files, out)?;
    }
    Some(rest)
}

/// Writes `bytes` as the index `index` under git's lock: the lock made
/// exclusively with them, then renamed over the index, if the index still
/// has the stamp it had when read (else nothing is written); the stamp of
/// the index written.
fn write_locked(
    index: &Path,
    bytes: &[u8],
    read: &crate::same_second::Stamp,
) -> Option<crate::same_second::Stamp> {
    let mut lock = index.as_os_str().to_owned();
    lock.push(".lock");
    let lock = Path::new(&lock);
    crate::safe_fs::create_new_unsynced(lock, bytes).ok()?;
    let unchanged = crate::same_second::stamp_of(index).as_ref() == Some(read);
    if unchanged && crate::safe_fs::rename_over(lock, index).is_ok() {
        return crate::same_second::stamp_of(index);
    }
    crate::safe_fs::remove(lock);
    None
}

#[cfg(target_os = "linux")]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Command;

    /// `git ARGS` in `root` on the index `index`, new objects into
    /// `objects` (the repository's own as an alternate), with `config`;
    /// its stdout.
    fn git(root: &Path, index: &Path, objects: &Path, config: &[&str], args: &[&str]) -> String {
        let mut command = Command::new("git");
        command
            .current_dir(root)
            .env("GIT_INDEX_FILE", index)
            .env("GIT_OBJECT_DIRECTORY", objects)
            .env(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                root.join(".git/objects"),
            )
            .env("GIT_OPTIONAL_LOCKS", "1")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"]);
        for setting in config {
            command.args(["-c", setting]);
        }
        let out = command.args(args).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// The files whose entry in `index` does not match them.
    fn unstaged(root: &Path, index: &Path, objects: &Path) -> String {
        git(root, index, objects, KEPT, &["diff-files", "--name-only"])
    }

    /// What a kept index is written with (as `tree_diff::KEPT_INDEX`).
    const KEPT: &[&str] = &[
        "index.skipHash=true",
        "index.version=4",
        "core.untrackedCache=true",
        "status.showUntrackedFiles=all",
    ];

    /// A committed repository of files in folders, one executable, one
    /// untracked file, and a kept index of it (seeded by `read-tree`, its
    /// stat data and untracked cache written by a status), with the folder
    /// its objects go to.
    fn repository() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("work");
        for (path, text) in [
            ("a/x.txt", "x\n"),
            ("a/b/y.txt", "y\n"),
            ("c/z.txt", "z\n"),
            ("e/f.txt", "f\n"),
            ("run.sh", "echo run\n"),
        ] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        std::os::unix::fs::PermissionsExt::set_mode(
            &mut std::fs::metadata(root.join("run.sh"))
                .unwrap()
                .permissions(),
            0o755,
        );
        std::fs::set_permissions(
            root.join("run.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let plain = Command::new("git")
            .arg("init")
            .arg("-q")
            .arg(&root)
            .status();
        assert!(plain.unwrap().success());
        let index = dir.path().join("kept");
        let objects = dir.path().join("objects");
        std::fs::create_dir(&objects).unwrap();
        let own = root.join(".git/index");
        git(&root, &own, &objects, &[], &["add", "-A"]);
        git(&root, &own, &objects, &[], &["commit", "-qm", "one"]);
        std::fs::write(root.join("untracked.txt"), "u\n").unwrap();
        git(&root, &index, &objects, KEPT, &["read-tree", "HEAD"]);
        // Older than a second: no record is racy for the status.
        let before = std::time::SystemTime::now() - std::time::Duration::from_secs(5);
        for path in [
            "a/x.txt",
            "a/b/y.txt",
            "c/z.txt",
            "e/f.txt",
            "run.sh",
            "untracked.txt",
        ] {
            let file = std::fs::File::options()
                .append(true)
                .open(root.join(path))
                .unwrap();
            file.set_modified(before).unwrap();
        }
        git(&root, &index, &objects, KEPT, &["status", "--porcelain=v2"]);
        (dir, root, index)
    }

    fn folders(dir: &Path) -> ObjectFolders {
        ObjectFolders {
            write: dir.join("objects"),
            also: vec![dir.join("work/.git/objects")],
        }
    }

    /// The index's `TREE` extension (the cache of its trees).
    fn cached_trees(index: &[u8]) -> Vec<u8> {
        let at = index.windows(4).position(|w| w == b"TREE").unwrap();
        let len = u32::from_be_bytes(index[at + 4..at + 8].try_into().unwrap()) as usize;
        index[at + 8..at + 8 + len].to_vec()
    }

    #[test]
    fn a_file_staged_here_is_what_git_update_index_stages() {
        let (dir, root, index) = repository();
        let objects = dir.path().join("objects");
        let theirs = dir.path().join("theirs");
        std::fs::copy(&index, &theirs).unwrap();
        std::fs::write(root.join("a/b/y.txt"), "y, longer now\n").unwrap();
        std::fs::write(root.join("run.sh"), "echo ran\n").unwrap();
        std::fs::set_permissions(
            root.join("run.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let files = [
            Modified {
                path: b"a/b/y.txt",
                mode: 0o100_644,
            },
            Modified {
                path: b"run.sh",
                mode: 0o100_644,
            },
        ];
        let before = std::fs::read(&index).unwrap();
        let aside = stage_as_they_are(
            &root,
            &index,
            &folders(dir.path()),
            &files,
            Aside::WhenSmall,
        )
        .unwrap();
        // Small files beside a large index: kept beside it, the index as it was.
        assert_eq!(aside.index.0, before);
        assert_eq!(std::fs::read(&index).unwrap(), before);
        assert_eq!(aside.aside.len(), 2);
        let written =
            stage_as_they_are(&root, &index, &folders(dir.path()), &files, Aside::Never).unwrap();
        assert!(written.aside.is_empty());
        assert_eq!(written.index.0, std::fs::read(&index).unwrap());
        let update = ["update-index", "--", "a/b/y.txt", "run.sh"];
        git(&root, &theirs, &objects, KEPT, &update);
        // The edits kept aside, applied, are the entries git's update makes.
        let fields = |e: &crate::index_tree::Entry<'_>| (e.path.to_vec(), e.mode, e.size, e.id);
        let mut applied = crate::index_tree::entries(&before).unwrap();
        let changed = crate::index_tree::apply_edits(&mut applied, &aside.aside).unwrap();
        assert_eq!(changed, [b"a/b/y.txt".to_vec(), b"run.sh".to_vec()]);
        let theirs_now = std::fs::read(&theirs).unwrap();
        assert_eq!(
            applied.iter().map(fields).collect::<Vec<_>>(),
            crate::index_tree::entries(&theirs_now)
                .unwrap()
                .iter()
                .map(fields)
                .collect::<Vec<_>>()
        );

        let debug = ["ls-files", "-s", "--debug"];
        let ours_listed = git(&root, &index, &objects, KEPT, &debug);
        assert_eq!(ours_listed, git(&root, &theirs, &objects, KEPT, &debug));
        assert!(ours_listed.contains("100644 ") && !ours_listed.contains("100755"));
        let (ours, theirs_bytes) = (
            std::fs::read(&index).unwrap(),
            std::fs::read(&theirs).unwrap(),
        );
        assert_eq!(cached_trees(&ours), cached_trees(&theirs_bytes));
        assert!(ours.ends_with(&[0; 20]), "no checksum, as git writes it");
        // Nothing left to hash or stage; the untracked file still listed.
        let status = ["status", "--porcelain=v2", "-uall"];
        let listed = git(&root, &index, &objects, KEPT, &status);
        assert_eq!(listed, git(&root, &theirs, &objects, KEPT, &status));
        assert!(listed.ends_with("\n? untracked.txt\n"), "{listed}");
        assert!(
            listed
                .lines()
                .all(|l| l.starts_with("? ") || l.starts_with("1 M."))
        );
        assert_eq!(unstaged(&root, &index, &objects), "");
        // Its trees are those of the work tree: the blobs are where git reads them.
        let tree = git(&root, &index, &objects, KEPT, &["write-tree"]);
        assert_eq!(tree, git(&root, &theirs, &objects, KEPT, &["write-tree"]));
        let blob = git(
            &root,
            &index,
            &objects,
            KEPT,
            &["rev-parse", &format!("{}:run.sh", tree.trim())],
        );
        let shown = git(
            &root,
            &index,
            &objects,
            KEPT,
            &["cat-file", "-p", blob.trim()],
        );
        assert_eq!(shown, "echo ran\n");
    }

    /// Stages `files` of `root` into `index`, and says whether that was
    /// done: when it was not, the index is as it was.
    fn staged(dir: &Path, root: &Path, index: &Path, files: &[Modified<'_>]) -> bool {
        let before = std::fs::read(index).unwrap();
        let done = stage_as_they_are(root, index, &folders(dir), files, Aside::Never).is_some();
        if !done {
            assert_eq!(std::fs::read(index).unwrap(), before);
        }
        done
    }

    fn edit(root: &Path, path: &str) -> [Modified<'static>; 1] {
        std::fs::write(root.join(path), "changed\n").unwrap();
        let path: &'static str = Box::leak(path.to_owned().into_boxed_str());
        [Modified {
            path: path.as_bytes(),
            mode: 0o100_644,
        }]
    }

    #[test]
    fn what_might_be_converted_or_reached_through_a_link_is_left_to_git() {
        let (dir, root, index) = repository();
        let dir = dir.path();
        let files = edit(&root, "a/b/y.txt");
        // Attributes in a folder above, untracked: their rules might convert it.
        std::fs::write(root.join("a/.gitattributes"), "* text\n").unwrap();
        assert!(!staged(dir, &root, &index, &files));
        std::fs::remove_file(root.join("a/.gitattributes")).unwrap();
        // Not a regular file of the mode the status saw.
        let executable = [Modified {
            path: b"a/b/y.txt",
            mode: 0o100_755,
        }];
        assert!(!staged(dir, &root, &index, &executable));
        // A link where the file was, or at a folder of its path.
        std::fs::remove_file(root.join("c/z.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("c/z.txt")).unwrap();
        assert!(!staged(dir, &root, &index, &edit_only("c/z.txt")));
        std::fs::rename(root.join("e"), dir.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), root.join("e")).unwrap();
        assert!(!staged(dir, &root, &index, &edit_only("e/f.txt")));
        // Too large to be staged here.
        let large = vec![b'x'; usize::try_from(MAX_FILE_BYTES).unwrap() + 1];
        std::fs::write(root.join("a/x.txt"), large).unwrap();
        assert!(!staged(dir, &root, &index, &edit_only("a/x.txt")));
        // A path the index does not hold.
        assert!(!staged(dir, &root, &index, &edit_only("untracked.txt")));
        // And the one that can: staged.
        assert!(staged(dir, &root, &index, &files));
    }

    fn edit_only(path: &'static str) -> [Modified<'static>; 1] {
        [Modified {
            path: path.as_bytes(),
            mode: 0o100_644,
        }]
    }

    #[test]
    fn an_index_this_does_not_write_for_certain_is_left_to_git() {
        let (dir, root, index) = repository();
        let objects = dir.path().join("objects");
        let files = edit(&root, "a/b/y.txt");
        // Tracked attributes anywhere.
        std::fs::write(root.join("c/.gitattributes"), "*.txt -text\n").unwrap();
        git(
            &root,
            &index,
            &objects,
            KEPT,
            &["update-index", "--add", "c/.gitattributes"],
        );
        assert!(!staged(dir.path(), &root, &index, &files));
        git(
            &root,
            &index,
            &objects,
            KEPT,
            &["update-index", "--force-remove", "c/.gitattributes"],
        );
        // An extension it does not know.
        let eoie = ["index.recordEndOfIndexEntries=true", "index.skipHash=true"];
        git(
            &root,
            &index,
            &objects,
            &eoie,
            &["update-index", "--index-version", "3"],
        );
        assert!(!staged(dir.path(), &root, &index, &files));
        // A checksum to compute.
        let checksum = ["index.skipHash=false"];
        git(
            &root,
            &index,
            &objects,
            &checksum,
            &["update-index", "--index-version", "2"],
        );
        assert!(!staged(dir.path(), &root, &index, &files));
        // No checksum, nothing else: staged.
        let plain = ["index.skipHash=true", "index.recordEndOfIndexEntries=false"];
        git(
            &root,
            &index,
            &objects,
            &plain,
            &["update-index", "--index-version", "4"],
        );
        assert!(staged(dir.path(), &root, &index, &files));
        assert_eq!(unstaged(&root, &index, &objects), "");
    }

    #[test]
    fn a_configuration_that_may_convert_line_ends_is_left_to_git() {
        let (dir, root, index) = repository();
        let files = edit(&root, "a/b/y.txt");
        std::fs::write(root.join(".git/info/attributes"), "* text\n").unwrap();
        assert!(stage(&root, &index, &folders(dir.path()), &files).is_none());
        std::fs::remove_file(root.join(".git/info/attributes")).unwrap();
        let config = root.join(".git/config");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str("[core]\n\tautocrlf = input\n");
        std::fs::write(&config, text).unwrap();
        assert!(stage(&root, &index, &folders(dir.path()), &files).is_none());
    }

    #[test]
    fn a_tree_cache_is_invalidated_above_each_file_and_kept_elsewhere() {
        let files = [Modified {
            path: b"a/b/y.txt",
            mode: 0o100_644,
        }];
        let id = [7u8; 20];
        let node = |name: &str, counts: &str, valid: bool| {
            let mut out = format!("{name}\0{counts}\n").into_bytes();
            if valid {
                out.extend_from_slice(&id);
            }
            out
        };
        // Each folder before and after: the top and those above the file
        // marked invalid, `c` kept, `e` invalid already.
        let folders = [
            ("", ("4 3", true), ("-1 3", false)),
            ("a", ("2 1", true), ("-1 1", false)),
            ("b", ("1 0", true), ("-1 0", false)),
            ("c", ("1 0", true), ("1 0", true)),
            ("e", ("-1 0", false), ("-1 0", false)),
        ];
        let before: Vec<u8> = folders
            .iter()
            .flat_map(|(f, (c, v), _)| node(f, c, *v))
            .collect();
        let after: Vec<u8> = folders
            .iter()
            .flat_map(|(f, _, (c, v))| node(f, c, *v))
            .collect();
        let mut out = Vec::new();
        assert_eq!(invalidate(&before, b"", &files, &mut out), Some(&[][..]));
        assert_eq!(out, after);
        // A folder whose name another's starts with is not above the file.
        let named_alike = [Modified {
            path: b"ab/y.txt",
            mode: 0o100_644,
        }];
        let mut out = Vec::new();
        invalidate(&before, b"", &named_alike, &mut out).unwrap();
        assert!(out.windows(8).any(|w| w == b"a\x002 1\n\x07\x07"));
        // Cut short: no answer.
        assert!(invalidate(&before[..before.len() - 5], b"", &files, &mut Vec::new()).is_none());
    }

    proptest::proptest! {
        #[test]
        fn any_index_reads_without_a_panic(bytes in proptest::collection::vec(0u8..=255, 0..600)) {
            let files = [Modified { path: b"a", mode: 0o100_644 }];
            let mut index = b"DIRC\0\0\0\x04\0\0\0\x02".to_vec();
            index.extend_from_slice(&bytes);
            for bytes in [&index, &bytes] {
                if let Some((_, end)) = walk(bytes, &files) {
                    let _ = new_extensions(bytes, end, &files);
                }
            }
        }
    }
}
