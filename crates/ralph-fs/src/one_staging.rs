//! One staging for a looping stop that keeps a checkpoint and compares
//! the paths changed since arming (`--protect`, `--scope`): the comparison
//! index (`compared`, seeded from the armed tree, never from the user's
//! index; `status_staging`) stages everything the comparison must see, and
//! the checkpoint's tree is written by ralph from that same index
//! (`index_tree`) with the checkpoint's exclusions applied here:
//! `.claude/`, tracked files with a secret's name and tracked files over
//! 10 MiB as the user's index had them at the arming's first such stop
//! (`pinned`, the only read of the user's index, for the checkpoint
//! alone), every other secret's name and large file left out.
//!
//! Where the bytes go: the staging writes its new objects into a scratch
//! object folder beside the store (`compared-objects`), with the store,
//! `held-objects` and the project's objects as alternates (an object any of
//! them holds is not written again). After the stop, each new object a
//! checkpoint's file names is linked into the checkpoint store, and every
//! new object is moved into `held-objects`: the bytes of a secret or a
//! large file are never in the checkpoint store, only in that folder of the
//! same private arming folder, which goes with it.
//!
//! Anything this cannot do for certain (not the top of a repository of its
//! own, a SHA-256 tree, a split index, an index entry it does not read)
//! answers an error and the caller stages twice, as before.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::checkpoint::{LARGE_FILE_BYTES, LeftOut, Objects, Staged, Why, secret_path};
use crate::index_tree::{self, Entry};
use crate::safe_fs::{self, FsError};

/// A set of object ids, hashed by their first eight bytes: they are
/// hashes already (a stop looks up every file's id).
type Ids = HashSet<[u8; 20], BuildHasherDefault<IdHasher>>;

/// [`Ids`]'s hasher: an id's first eight bytes.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for (i, byte) in bytes.iter().take(8).enumerate() {
            self.0 ^= u64::from(*byte) << (8 * i);
        }
    }
}

/// The most files one checkpoint leaves out; past it, no checkpoint.
const MAX_LEFT_OUT: usize = 500;

/// What one staging gave: the paths changed since arming, and this stop's
/// checkpoint (`None` when it could not be written from the comparison's
/// index: the caller stages the loop's kept index for it instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneStaging {
    pub changed: Vec<String>,
    pub checkpoint: Option<Staged>,
}

/// Stages the work tree once into the comparison index kept in the arming
/// folder `dir` and reads both the paths changed since the armed tree
/// `armed` (ignore rules `excludes`, as `tree_diff::changed_since_kept`)
/// and, when `room` (the store not full), the checkpoint's tree, written
/// into `objects.private` without the paths `leave_out` names. An error
/// when this cannot apply or git could not tell: the caller then stages as
/// before (nothing here answers "unchanged" for a comparison not made).
pub fn stage_shared(
    root: &Path,
    objects: &Objects,
    dir: &Path,
    armed: &str,
    excludes: Option<&str>,
    leave_out: &[String],
    room: bool,
) -> Result<OneStaging, FsError> {
    let deadline = Instant::now() + crate::tree_diff::TREE_TIME_LIMIT;
    if armed.len() != 40 || !crate::tree_diff::is_object_id(armed) || !own_repository(root) {
        return Err(cannot(
            "the project is not the top of a SHA-1 repository of its own",
        ));
    }
    let pinned = pinned(root, dir)?;
    let scratch = safe_fs::ensure_dir(dir, "compared-objects")?;
    let held = safe_fs::ensure_dir(dir, "held-objects")?;
    let alternates = [held.as_path(), &objects.private, &objects.borrowed]
        .iter()
        .map(|p| {
            crate::checkpoint::one_alternate(p)
                .to_string_lossy()
                .into_owned()
        })
        .collect::<Vec<_>>()
        .join(":");
    let env = vec![
        ("GIT_OBJECT_DIRECTORY", scratch.clone()),
        (
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            PathBuf::from(alternates),
        ),
    ];
    let index = dir.join("compared");
    // Every read of the index this stop (the checkpoint's too) comes first.
    let mut smudged_after = crate::same_second::Guard::new(&index);
    let mut compared = crate::tree_diff::compare_kept(root, armed, excludes, &index, deadline, env);
    if let Some(read) = compared.as_mut().and_then(|c| c.read.take()) {
        smudged_after.seen(read);
    }
    let fresh = loose_ids(&scratch);
    let entries = compared.as_mut().and_then(|c| c.entries.take());
    let written = match (&compared, entries) {
        // A file only ignore rules added since arming hide is in the
        // comparison's index but not the checkpoint's: the caller stages it.
        (Some(c), Some(entries)) if room && !c.hidden => {
            let held_ids = loose_ids(&held);
            let loose = [&fresh, &held_ids];
            checkpoint(
                root,
                objects,
                (entries, &c.cached),
                &pinned,
                leave_out,
                loose,
                [&scratch, &held],
            )
        }
        _ => None,
    };
    // A full store takes no checkpoint again: nothing new is kept for one.
    let (checkpoint, dropped) = match written {
        Some((staged, large)) => (Some(staged), large),
        None if !room => (None, fresh.clone()),
        None => (None, Ids::default()),
    };
    keep_aside(&scratch, &held, &objects.private, &fresh, &dropped);
    let compared = compared.ok_or_else(|| cannot("git could not compare the work tree"))?;
    Ok(OneStaging {
        changed: compared.changed,
        checkpoint,
    })
}

/// Whether `root` holds its repository's folder (not a linked worktree or
/// a folder below the top) and its index is not split (`sharedindex.*`).
fn own_repository(root: &Path) -> bool {
    let dot_git = root.join(".git");
    if !safe_fs::kind_at(&dot_git).is_some_and(|k| k.is_dir()) {
        return false;
    }
    let Ok(names) = std::fs::read_dir(&dot_git) else {
        return false;
    };
    !names
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().starts_with("sharedindex."))
}

/// Whether the checkpoint holds `path` only as the user's index had it.
fn pinned_kind(path: &[u8], size: u32) -> bool {
    path == b".claude"
        || path.starts_with(b".claude/")
        || secret_path(path)
        || u64::from(size) > LARGE_FILE_BYTES
}

/// The entries of the user's index the checkpoint holds as they were
/// (`.claude/`, secrets' names, large files), read once per arming and kept
/// as `pinned` in `dir` (`<mode> <id> <path>\0` each).
fn pinned(root: &Path, dir: &Path) -> Result<Vec<Entry<'static>>, FsError> {
    let file = dir.join("pinned");
    if safe_fs::kind_at(&file).is_none() {
        let user = root.join(".git/index");
        let bytes = if safe_fs::kind_at(&user).is_none() {
            Vec::new()
        } else {
            safe_fs::read_capped(&user, index_tree::MAX_INDEX_BYTES)?
        };
        let entries = if bytes.is_empty() {
            Vec::new()
        } else {
            index_tree::entries(&bytes)
                .ok_or_else(|| cannot("your index holds an entry ralph does not read"))?
        };
        let mut text = Vec::new();
        for e in entries.iter().filter(|e| pinned_kind(&e.path, e.size)) {
            text.extend(format!("{:o} {} ", e.mode, index_tree::hex(&e.id)).bytes());
            text.extend_from_slice(&e.path);
            text.push(0);
        }
        safe_fs::create_new(&file, &text)?;
    }
    let text = safe_fs::read_capped(&file, index_tree::MAX_INDEX_BYTES)?;
    text.split(|b| *b == 0)
        .filter(|line| !line.is_empty())
        .map(read_pinned)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| cannot("the pinned entries do not read"))
}

/// One line of `pinned`.
fn read_pinned(line: &[u8]) -> Option<Entry<'static>> {
    let mode_end = line.iter().position(|b| *b == b' ')?;
    let mode = u32::from_str_radix(std::str::from_utf8(&line[..mode_end]).ok()?, 8).ok()?;
    let rest = &line[mode_end + 1..];
    let id = parse_id(std::str::from_utf8(rest.get(..40)?).ok()?)?;
    let path = rest.get(41..)?.to_vec();
    if !index_tree::tree_path(&path) {
        return None;
    }
    Some(Entry {
        mode,
        size: 0,
        id,
        path: std::borrow::Cow::Owned(path),
    })
}

/// A SHA-1 id in hex, as its 20 bytes.
fn parse_id(hex: &str) -> Option<[u8; 20]> {
    if hex.len() != 40 {
        return None;
    }
    let mut id = [0u8; 20];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

/// The checkpoint's tree, from the comparison's index (its `entries`):
/// those but `.claude/`, secrets' names, the paths `leave_out` names and
/// large files not pinned as they are, then the pinned `.claude/` and
/// secrets' entries; each object it names that only `loose` (the new
/// objects, then the held ones, in the folders `folders`) holds linked into
/// the store; with the ids of the large files it left out.
fn checkpoint(
    root: &Path,
    objects: &Objects,
    (entries, cached): (Vec<Entry<'static>>, &[index_tree::CachedTree]),
    pinned: &[Entry<'static>],
    leave_out: &[String],
    loose: [&Ids; 2],
    folders: [&PathBuf; 2],
) -> Option<(Staged, Ids)> {
    let leave: HashSet<&[u8]> = leave_out.iter().map(String::as_bytes).collect();
    // The entries' own vector, filtered in place (a second copy of some
    // 30,000 entries is memory the kernel must hand over page by page).
    let mut kept: Vec<Entry<'_>> = entries;
    let mut left = Vec::new();
    let mut large = Ids::default();
    // The folders whose entries here differ from the comparison index's: a
    // cached tree of theirs is not the checkpoint's.
    let mut differ: HashSet<Vec<u8>> = HashSet::new();
    let mut mark = |path: &[u8]| {
        for (at, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
            differ.insert(path[..=at].to_vec());
        }
    };
    let mut keeps = |entry: &Entry<'_>| {
        if entry.path.as_ref() == b".claude"
            || entry.path.starts_with(b".claude/")
            || secret_path(&entry.path)
            || leave.contains(entry.path.as_ref())
        {
            return false;
        }
        let new = loose.iter().any(|set| set.contains(&entry.id));
        if let Some(large_file) = large_left_out(root, entry, new, pinned) {
            left.push(large_file);
            large.insert(entry.id);
            return false;
        }
        true
    };
    kept.retain(|entry| {
        let keep = keeps(entry);
        if !keep {
            mark(&entry.path);
        }
        keep
    });
    if left.len() > MAX_LEFT_OUT {
        return None;
    }
    let added = pinned.iter().filter(|p| !pinned_kind_large_only(p));
    for entry in added.clone() {
        mark(&entry.path);
    }
    kept.extend(added.map(|p| Entry {
        mode: p.mode,
        size: 0,
        id: p.id,
        path: std::borrow::Cow::Borrowed(p.path.as_ref()),
    }));
    kept.sort_by(|a, b| a.path.cmp(&b.path));
    kept.dedup_by(|a, b| a.path == b.path);
    for entry in &kept {
        let at = loose.iter().position(|set| set.contains(&entry.id));
        if let Some(at) = at {
            link_object(folders[at], &objects.private, &entry.id)?;
        }
    }
    let tree = write_tree(&kept, cached, &differ, &objects.private)?;
    let staged = Staged {
        tree,
        left_out: left,
    };
    Some((staged, large))
}

/// The tree of the checkpoint's entries `kept`, written into `store`: a
/// folder the checkpoint holds as the comparison's index does (not one of
/// `differ`), whose tree that index caches (`cached`) and the store holds,
/// is not hashed again.
fn write_tree(
    kept: &[Entry<'_>],
    cached: &[index_tree::CachedTree],
    differ: &HashSet<Vec<u8>>,
    store: &Path,
) -> Option<String> {
    let cached: std::collections::HashMap<&[u8], [u8; 20]> = cached
        .iter()
        .map(|(folder, id)| (folder.as_slice(), *id))
        .collect();
    let known = |folder: &[u8]| {
        (!differ.contains(folder))
            .then(|| cached.get(folder).copied())
            .flatten()
    };
    index_tree::write_entries(kept, store, &known)
}

/// The entry `entry` of the comparison's index (`new` when only a new or
/// held object names its bytes) as a large file the checkpoint leaves
/// out, when it is one and not pinned as it is.
fn large_left_out(
    root: &Path,
    entry: &Entry<'_>,
    new: bool,
    pinned: &[Entry<'static>],
) -> Option<LeftOut> {
    if !new && u64::from(entry.size) <= LARGE_FILE_BYTES {
        return None;
    }
    let path = String::from_utf8_lossy(&entry.path).into_owned();
    // As the user's index had it, and its bytes in a store already (a pin
    // forged in `.git/index` never brings a large file's new bytes into
    // the store).
    let as_pinned = !new
        && pinned
            .iter()
            .any(|p| p.path == entry.path && p.id == entry.id && p.mode == entry.mode);
    let meta = std::fs::symlink_metadata(root.join(&path)).ok();
    let bytes = meta
        .filter(std::fs::Metadata::is_file)
        .map_or(0, |m| m.len());
    let large = bytes > LARGE_FILE_BYTES || u64::from(entry.size) > LARGE_FILE_BYTES;
    (!as_pinned && large).then(|| LeftOut {
        path,
        bytes: bytes.max(u64::from(entry.size)),
        why: Why::Large,
    })
}

/// Whether a pinned entry is there only for its size (kept by the loop
/// above when the file is as pinned, not added again).
fn pinned_kind_large_only(p: &Entry<'_>) -> bool {
    !(p.path.as_ref() == b".claude" || p.path.starts_with(b".claude/") || secret_path(&p.path))
}

/// The ids of the loose objects in the object folder `folder`.
fn loose_ids(folder: &Path) -> Ids {
    let mut ids = Ids::default();
    let Ok(fans) = std::fs::read_dir(folder) else {
        return ids;
    };
    for fan in fans.filter_map(Result::ok) {
        let prefix = fan.file_name().to_string_lossy().into_owned();
        if prefix.len() != 2 || !fan.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(files) = std::fs::read_dir(fan.path()) else {
            continue;
        };
        for file in files.filter_map(Result::ok) {
            let name = file.file_name().to_string_lossy().into_owned();
            if file.file_type().is_ok_and(|t| t.is_file())
                && let Some(id) = parse_id(&format!("{prefix}{name}"))
            {
                ids.insert(id);
            }
        }
    }
    ids
}

/// Links the loose object `id` of `from` into the object folder `to`.
fn link_object(from: &Path, to: &Path, id: &[u8; 20]) -> Option<()> {
    let name = index_tree::hex(id);
    let source = from.join(&name[..2]).join(&name[2..]);
    let target = to.join(&name[..2]).join(&name[2..]);
    if safe_fs::kind_at(&target).is_some_and(|k| k.is_file()) {
        return Some(());
    }
    if !safe_fs::kind_at(&source).is_some_and(|k| k.is_file()) {
        return None;
    }
    safe_fs::ensure_dir(to, &name[..2]).ok()?;
    match std::fs::hard_link(&source, &target) {
        Ok(()) => Some(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Some(()),
        Err(_) => None,
    }
}

/// Moves the new objects `fresh` of `scratch` that the store `private`
/// did not take into `held`, but those of `dropped` (large files' bytes,
/// which no checkpoint takes): the others go (the scratch folder is empty
/// again for the next stop, whose new objects it then lists).
fn keep_aside(scratch: &Path, held: &Path, private: &Path, fresh: &Ids, dropped: &Ids) {
    for id in fresh {
        let name = index_tree::hex(id);
        let source = scratch.join(&name[..2]).join(&name[2..]);
        let target = held.join(&name[..2]).join(&name[2..]);
        let stored = private.join(&name[..2]).join(&name[2..]);
        let moved = !dropped.contains(id)
            && safe_fs::kind_at(&stored).is_none()
            && safe_fs::kind_at(&target).is_none()
            && safe_fs::ensure_dir(held, &name[..2]).is_ok()
            && safe_fs::move_entry(&source, &target).is_ok();
        if !moved {
            safe_fs::remove(&source);
        }
    }
    if let Ok(fans) = std::fs::read_dir(scratch) {
        for fan in fans.filter_map(Result::ok) {
            let _ = std::fs::remove_dir(fan.path());
        }
    }
}

fn cannot(detail: &str) -> FsError {
    FsError::Git {
        what: "stage once for the checkpoint and the comparison",
        detail: detail.to_owned(),
    }
}

#[cfg(unix)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree_diff::tests::{git_in, repo_ignoring};

    /// Whether the object folder `folder` holds `id` as a loose object.
    fn holds(folder: &Path, id: &str) -> bool {
        folder.join(&id[..2]).join(&id[2..]).is_file()
    }

    /// The files of the checkpoint tree `tree` (objects in the store, or
    /// borrowed from the project's).
    fn files_of(root: &Path, objects: &Objects, tree: &str) -> Vec<String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .env("GIT_OBJECT_DIRECTORY", &objects.private)
            .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", &objects.borrowed)
            .args(["ls-tree", "-r", "--name-only", "-z", tree])
            .output()
            .unwrap();
        assert!(out.status.success(), "ls-tree {tree}");
        String::from_utf8(out.stdout)
            .unwrap()
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_checkpoint_that_reuses_cached_trees_is_the_one_written_from_scratch() {
        let dir = repo_ignoring("target/\n");
        let root = dir.path();
        let write = |path: &str, text: &str| {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        };
        // A secret untracked at arming, in a folder whose tree the
        // comparison's index caches: never in a checkpoint.
        for (path, text) in [
            ("src/a.txt", "a\n"),
            ("src/deep/b.txt", "b\n"),
            ("docs/x.md", "x\n"),
            ("conf/app.txt", "app\n"),
            ("conf/.env.local", "TOKEN=1\n"),
        ] {
            write(path, text);
        }
        let limit = crate::tree_diff::TREE_TIME_LIMIT;
        let armed = crate::tree_diff::snapshot(root, limit).unwrap();
        let stop = |arming: &Path| {
            let objects = Objects {
                private: safe_fs::ensure_dir(arming, "objects").unwrap(),
                borrowed: root.join(".git/objects"),
            };
            let staged = stage_shared(
                root,
                &objects,
                arming,
                &armed.tree,
                armed.excludes.as_deref(),
                &[],
                true,
            )
            .unwrap();
            (staged.checkpoint.unwrap().tree, objects)
        };
        let warm = tempfile::tempdir().unwrap();
        stop(warm.path());
        let edits: [&[(&str, &str)]; 3] = [
            &[("src/deep/b.txt", "b, edited\n")],
            &[("docs/x.md", "x, edited\n"), ("docs/new.md", "new\n")],
            &[
                ("conf/app.txt", "app, edited\n"),
                ("src/a.txt", "a, edited\n"),
            ],
        ];
        for edit in edits {
            for (path, text) in edit {
                write(path, text);
            }
            let (reused, objects) = stop(warm.path());
            let cold = tempfile::tempdir().unwrap();
            let (fresh, _) = stop(cold.path());
            assert_eq!(reused, fresh, "after {edit:?}");
            let files = files_of(root, &objects, &reused);
            assert!(files.contains(&"conf/app.txt".to_owned()), "{files:?}");
            assert!(!files.contains(&"conf/.env.local".to_owned()), "{files:?}");
        }
    }

    #[test]
    fn a_secret_and_a_large_file_are_changes_but_in_no_checkpoint_and_not_in_its_store() {
        let dir = repo_ignoring("target/\n");
        let root = dir.path();
        let limit = crate::tree_diff::TREE_TIME_LIMIT;
        let armed = crate::tree_diff::snapshot(root, limit).unwrap();
        let arming = tempfile::tempdir().unwrap();
        let objects = Objects {
            private: safe_fs::ensure_dir(arming.path(), "objects").unwrap(),
            borrowed: root.join(".git/objects"),
        };
        std::fs::write(root.join(".env"), "TOKEN=hunter2\n").unwrap();
        std::fs::write(root.join("tests/t.sh"), "test 2 = 2\n").unwrap();
        let large = vec![b'x'; usize::try_from(LARGE_FILE_BYTES).unwrap() + 1];
        std::fs::write(root.join("data.bin"), &large).unwrap();
        let stop = || {
            stage_shared(
                root,
                &objects,
                arming.path(),
                &armed.tree,
                armed.excludes.as_deref(),
                &[],
                true,
            )
            .unwrap()
        };
        let shared = stop();
        for path in [".env", "data.bin", "tests/t.sh"] {
            assert!(shared.changed.contains(&path.to_owned()), "{shared:?}");
        }
        let staged = shared.checkpoint.unwrap();
        let files = files_of(root, &objects, &staged.tree);
        assert!(files.contains(&"tests/t.sh".to_owned()), "{files:?}");
        assert!(files.contains(&"lib.txt".to_owned()), "{files:?}");
        assert!(
            !files.iter().any(|f| f == ".env" || f == "data.bin"),
            "{files:?}"
        );
        let left: Vec<&str> = staged.left_out.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(left, ["data.bin"]);
        let id_of = |path: &str| git_in(root, &["hash-object", path]).trim().to_owned();
        let store = &objects.private;
        assert!(
            holds(store, &id_of("tests/t.sh")),
            "the changed file's bytes"
        );
        assert!(
            !holds(store, &id_of(".env")),
            "a secret's bytes in the store"
        );
        assert!(
            !holds(store, &id_of("data.bin")),
            "a large file's bytes in the store"
        );
        let held = arming.path().join("held-objects");
        assert!(holds(&held, &id_of(".env")), "a secret's bytes held");
        assert!(
            !holds(&held, &id_of("data.bin")),
            "a large file's bytes kept"
        );
        // The next stop: the secret changed again, still seen, still left out.
        std::fs::write(root.join(".env"), "TOKEN=swordfish\n").unwrap();
        let shared = stop();
        assert!(shared.changed.contains(&".env".to_owned()), "{shared:?}");
        let files = files_of(root, &objects, &shared.checkpoint.unwrap().tree);
        assert!(
            !files.iter().any(|f| f == ".env" || f == "data.bin"),
            "{files:?}"
        );
        assert!(
            !holds(store, &id_of(".env")),
            "a secret's bytes in the store"
        );
        // Nothing of the user's git state moved.
        assert_eq!(git_in(root, &["status", "--porcelain"]).lines().count(), 3);
    }
}
