//! git's stat cache, made to notice what happens in the second it records.
//!
//! git compares stat data to the second (the builds Debian and most
//! distributions ship are made without `USE_NSEC`) and takes a record as
//! "racy", to be checked again, only by its modification time, which the
//! agent sets back at will. A file rewritten to the same size, or a folder
//! given a new file, in the second git recorded it, with the old
//! modification time put back, matches the record in every field git
//! compares: the change would never be seen by a kept index
//! (`status_staging`, `git add`). Its change time (ctime) moved, but only
//! within that second.
//!
//! So after each staging, ralph smudges the records of its own kept index
//! whose change time is not older than the second before the staging
//! began: a file's recorded size is set to 0 (git's own mark for a racy
//! entry: its bytes are compared again) and a cached folder listing's (or
//! an ignore file's) times are set to 0 (it is listed or read again). Only
//! what changed in the last second or two pays; the index is ralph's own,
//! written under git's lock (`index.lock`, made exclusively).

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::index_tree::word;
use crate::safe_fs;

/// The bytes of one stat record in the untracked cache: ctime, mtime, dev,
/// ino, uid, gid, size.
const STAT_BYTES: usize = 36;

/// Smudges a kept index's records changed since it was made
/// ([`smudge_recent`]) when dropped: made before a staging begins, and
/// held until every use of the index is done, whichever way that ends.
pub(crate) struct Guard {
    index: PathBuf,
    since: u32,
    /// The index as the stop last read it ([`Guard::seen`]).
    seen: Option<(Vec<u8>, Stamp)>,
}

impl Guard {
    /// For the kept index at `index`, staged from now on. Its start is the
    /// second before now, as the kernel may date a change up to a tick
    /// behind the clock read here.
    pub(crate) fn new(index: &Path) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self {
            index: index.to_owned(),
            since: u32::try_from(now.saturating_sub(1)).unwrap_or(u32::MAX),
            seen: None,
        }
    }

    /// The index's bytes as read after its staging ([`read_stamped`]): the
    /// smudge uses them, not a read of its own, while the file keeps that
    /// stamp.
    pub(crate) fn seen(&mut self, read: (Vec<u8>, Stamp)) {
        self.seen = Some(read);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        smudge_recent(&self.index, self.since, self.seen.take());
    }
}

/// Smudges, in the index at `index` (a kept index of ralph's), every record
/// whose change time is at or after `since` (seconds since the epoch, as
/// git records them), once every use of the index this stop is done (git's
/// lock taken only when there is one). When the index cannot be read or
/// written for certain it is removed: the next staging starts afresh,
/// which trusts no record.
fn smudge_recent(index: &Path, since: u32, seen: Option<(Vec<u8>, Stamp)>) {
    if safe_fs::kind_at(index).is_none() {
        return;
    }
    let current = current(index, seen);
    let found = current.and_then(|(bytes, stamp)| {
        let (hash_len, recent) = read(&bytes, since)?;
        Some((
            stamp,
            Smudge {
                bytes,
                hash_len,
                recent,
            },
        ))
    });
    if found
        .as_ref()
        .is_some_and(|(_, smudge)| smudge.recent.is_empty())
    {
        return;
    }
    let mut lock = index.as_os_str().to_owned();
    lock.push(".lock");
    let lock = Path::new(&lock);
    let done = safe_fs::create_new_unsynced(lock, b"").is_ok() && {
        // What was read and found before the lock serves when the file is
        // still the one read then (no writer could have slipped in unseen:
        // any write or replacement moves its stamp); else it is read again.
        let unchanged = found
            .filter(|(stamp, _)| stamp_of(index).as_ref() == Some(stamp))
            .map(|(_, smudge)| smudge);
        let done = smudge_locked(index, since, unchanged);
        safe_fs::remove(lock);
        done
    };
    if !done {
        safe_fs::remove(index);
    }
}

/// An index's bytes, the length of its object ids and the ranges of its
/// records a smudge sets to zero ([`read`]).
struct Smudge {
    bytes: Vec<u8>,
    hash_len: usize,
    recent: Vec<Range<usize>>,
}

/// What tells one version of a file from another without reading it: its
/// size, its modification and change times and, on Unix, its inode.
#[derive(PartialEq, Eq)]
pub(crate) struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    changed: (i64, i64, u64, u64),
}

/// `path`'s [`Stamp`] now (not following a link).
pub(crate) fn stamp_of(path: &Path) -> Option<Stamp> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some(Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
        #[cfg(unix)]
        changed: {
            use std::os::unix::fs::MetadataExt;
            (meta.ctime(), meta.ctime_nsec(), meta.ino(), meta.dev())
        },
    })
}

/// The index's bytes with the stamp it had before they were read (the
/// same stamp after the read, or `None`: it changed while being read).
pub(crate) fn read_stamped(index: &Path) -> Option<(Vec<u8>, Stamp)> {
    let before = stamp_of(index)?;
    let bytes = safe_fs::read_capped(index, crate::index_tree::MAX_INDEX_BYTES).ok()?;
    (stamp_of(index)? == before).then_some((bytes, before))
}

/// The index's bytes with their stamp: `known` (bytes read or written
/// earlier this stop) while the file still has that stamp (any write or
/// replacement moves it), else read now.
pub(crate) fn current(index: &Path, known: Option<(Vec<u8>, Stamp)>) -> Option<(Vec<u8>, Stamp)> {
    known
        .filter(|(_, stamp)| stamp_of(index).as_ref() == Some(stamp))
        .or_else(|| read_stamped(index))
}

/// The length of the index's object ids (SHA-1 or SHA-256: the one that
/// reads the whole index) and the bytes of its records changed at or after
/// `since` that a smudge sets to zero.
fn read(bytes: &[u8], since: u32) -> Option<(usize, Vec<Range<usize>>)> {
    [20, 32]
        .into_iter()
        .find_map(|len| recent(bytes, since, len).map(|ranges| (len, ranges)))
}

/// [`smudge_recent`] under the lock, of `found` (what was found before it,
/// in bytes still current) or of the index read now.
fn smudge_locked(index: &Path, since: u32, found: Option<Smudge>) -> bool {
    let Some(Smudge {
        mut bytes,
        hash_len,
        recent: changed,
    }) = found.or_else(|| {
        let bytes = safe_fs::read_capped(index, crate::index_tree::MAX_INDEX_BYTES).ok()?;
        let (hash_len, recent) = read(&bytes, since)?;
        Some(Smudge {
            bytes,
            hash_len,
            recent,
        })
    })
    else {
        return false;
    };
    if changed.is_empty() {
        return true;
    }
    for range in &changed {
        bytes[range.clone()].fill(0);
    }
    // An index written with `index.skipHash` ends in zeros: its changed
    // bytes are written in place. Any other gets its checksum again, and
    // is replaced whole.
    let body = bytes.len() - hash_len;
    if bytes[body..].iter().all(|b| *b == 0) {
        return write_in_place(index, &bytes, &changed);
    }
    if hash_len != 20 {
        return false;
    }
    let sum: [u8; 20] = <sha1::Sha1 as sha1::Digest>::digest(&bytes[..body]).into();
    bytes[body..].copy_from_slice(&sum);
    safe_fs::replace_unsynced(index, &bytes).is_ok()
}

/// Writes the `changed` ranges of `bytes` into the file `index` (ralph's
/// own, under git's lock), where they are.
fn write_in_place(index: &Path, bytes: &[u8], changed: &[Range<usize>]) -> bool {
    let patches: Option<Vec<(u64, &[u8])>> = changed
        .iter()
        .map(|range| Some((u64::try_from(range.start).ok()?, bytes.get(range.clone())?)))
        .collect();
    patches.is_some_and(|patches| safe_fs::patch(index, &patches).is_ok())
}

/// The bytes a smudge of the records of the index `bytes` (ids of
/// `hash_len` bytes) changed at or after `since` sets to zero: a file's
/// size, a folder's or an ignore file's ctime and mtime. `None` for an
/// index this does not read for certain.
pub(crate) fn recent(bytes: &[u8], since: u32, hash_len: usize) -> Option<Vec<Range<usize>>> {
    let version = crate::index_tree::header(bytes)?;
    let count = word(bytes, 8)?;
    let mut at = 12;
    let mut smudged = Vec::new();
    let mut path = Vec::new();
    for _ in 0..count {
        let start = at;
        let mode = word(bytes, start + 24)?;
        at = crate::index_tree::step_entry(bytes, at, version, hash_len, &mut path)?.next;
        if mode != 0o160_000 && word(bytes, start)? >= since && word(bytes, start + 36)? != 0 {
            smudged.push(start + 36..start + 40);
        }
    }
    let end = bytes.len().checked_sub(hash_len)?;
    while at < end {
        let size = usize::try_from(word(bytes, at + 4)?).ok()?;
        let data = at + 8..at.checked_add(8)?.checked_add(size)?;
        if data.end > end {
            return None;
        }
        if bytes.get(at..at + 4)? == b"UNTR" {
            let within = untracked(bytes.get(data.clone())?, since, hash_len)?;
            smudged.extend(
                within
                    .into_iter()
                    .map(|r| r.start + data.start..r.end + data.start),
            );
        }
        at = data.end;
    }
    (at == end).then_some(smudged)
}

/// The stat records of an untracked cache extension (`UNTR`, as git's
/// `write_untracked_extension` lays it out) changed at or after `since`:
/// those of the two ignore files and of each listed folder; the bytes of
/// their ctime and mtime, from the start of `data`.
fn untracked(data: &[u8], since: u32, hash_len: usize) -> Option<Vec<Range<usize>>> {
    let (ident, used) = crate::index_tree::varint(data)?;
    let mut at = used.checked_add(usize::try_from(ident).ok()?)?;
    let mut records = vec![at, at + STAT_BYTES];
    at += 2 * STAT_BYTES + 4 + 2 * hash_len;
    at += data.get(at..)?.iter().position(|b| *b == 0)? + 1;
    let (folders, used) = crate::index_tree::varint(data.get(at..)?)?;
    at += used;
    if folders > 0 {
        for _ in 0..folders {
            let (names, used) = crate::index_tree::varint(data.get(at..)?)?;
            at += used;
            let (_, used) = crate::index_tree::varint(data.get(at..)?)?;
            at += used;
            // The folder's name, then the names of its untracked files.
            for _ in 0..=names {
                at += data.get(at..)?.iter().position(|b| *b == 0)? + 1;
            }
        }
        let (valid, used) = ewah_ones(data.get(at..)?)?;
        at += used;
        let (_, used) = ewah_ones(data.get(at..)?)?;
        at += used;
        let (hashed, used) = ewah_ones(data.get(at..)?)?;
        at += used;
        // The stat records, then the ignore files' ids, then a NUL: checked
        // before a record is counted (a bitmap may claim any number).
        let stats = valid.checked_mul(STAT_BYTES)?;
        let rest = stats
            .checked_add(hashed.checked_mul(hash_len)?)?
            .checked_add(1)?;
        if at.checked_add(rest)? != data.len() {
            return None;
        }
        records.extend((0..valid).map(|i| at + i * STAT_BYTES));
        at += rest;
    }
    if at != data.len() {
        return None;
    }
    let mut smudged = Vec::new();
    for record in records {
        if word(data, record)? >= since {
            // ctime and mtime, seconds and nanoseconds.
            smudged.push(record..record + 16);
        }
    }
    Some(smudged)
}

/// How many bits an EWAH-compressed bitmap (git's `ewah_serialize`) sets,
/// and its length in bytes.
fn ewah_ones(bytes: &[u8]) -> Option<(usize, usize)> {
    let words = usize::try_from(word(bytes, 4)?).ok()?;
    let len = words.checked_mul(8)?.checked_add(12)?;
    if bytes.len() < len {
        return None;
    }
    let long =
        |i: usize| u64::from_be_bytes(bytes[8 + 8 * i..16 + 8 * i].try_into().unwrap_or([0; 8]));
    let (mut ones, mut i) = (0usize, 0);
    while i < words {
        // A run-length word: bit 0 the run's bit, 32 bits its length in
        // words, 31 bits how many literal words follow.
        let marker = long(i);
        let literals = usize::try_from(marker >> 33).ok()?;
        if marker & 1 == 1 {
            let run = usize::try_from((marker >> 1) & 0xffff_ffff).ok()?;
            ones = ones.checked_add(run.checked_mul(64)?)?;
        }
        let last = i.checked_add(literals)?;
        if last >= words {
            return None;
        }
        for j in i + 1..=last {
            ones += long(j).count_ones() as usize;
        }
        i = last + 1;
    }
    Some((ones, len))
}

#[cfg(unix)] // git, which the Windows tests under Wine lack
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree_diff::tests::git_in;

    /// A repository whose index (`version`, with no checksum when
    /// `skip_hash`) git wrote with an untracked cache; its files dated 2020,
    /// so git marks none of them racy itself.
    fn indexed(version: &str, skip_hash: bool) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git_in(root, &["init", "-q"]);
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::create_dir_all(root.join("notes")).unwrap();
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_577_836_800);
        for (path, text) in [
            ("a.txt", "a\n"),
            ("src/b.rs", "b\n"),
            ("src/deep/c.rs", "c\n"),
        ] {
            std::fs::write(root.join(path), text).unwrap();
            std::fs::File::open(root.join(path))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        git_in(root, &["add", "-A"]);
        git_in(root, &["config", "index.skipHash", &skip_hash.to_string()]);
        git_in(root, &["update-index", "--index-version", version]);
        std::fs::write(root.join("notes/untracked.md"), "n\n").unwrap();
        let cached = [
            "-c",
            "core.untrackedCache=true",
            "-c",
            "status.showUntrackedFiles=all",
        ];
        git_in(root, &[&cached[..], &["status", "--porcelain"]].concat());
        let index = root.join(".git/index");
        (dir, index)
    }

    #[test]
    fn every_record_changed_since_a_second_is_smudged_and_git_still_reads_the_index() {
        for (version, skip_hash) in [("2", false), ("4", true), ("4", false)] {
            let (dir, index) = indexed(version, skip_hash);
            let sum = std::fs::read(&index).unwrap();
            let zeros = sum[sum.len() - 20..].iter().all(|b| *b == 0);
            assert_eq!(zeros, skip_hash, "version {version}");
            let bytes = std::fs::read(&index).unwrap();
            assert!(bytes.windows(4).any(|w| w == b"UNTR"), "version {version}");
            // Nothing was changed in the future; everything since 1970.
            assert_eq!(recent(&bytes, u32::MAX, 20), Some(Vec::new()));
            let all = recent(&bytes, 0, 20).unwrap().len();
            // Three files, the two ignore files' records, and the root,
            // `notes`, `src` and `src/deep` listed.
            assert_eq!(all, 3 + 2 + 4, "version {version}");
            smudge_recent(&index, 0, None);
            assert!(index.exists());
            drop(Guard::new(&index));
            let listed = git_in(dir.path(), &["ls-files", "--debug"]);
            assert_eq!(listed.matches("size: 0").count(), 3, "{listed}");
            let cached = [
                "-c",
                "core.untrackedCache=true",
                "-c",
                "status.showUntrackedFiles=all",
            ];
            let status = git_in(
                dir.path(),
                &[&cached[..], &["status", "--porcelain"]].concat(),
            );
            assert_eq!(
                status,
                "A  a.txt\nA  src/b.rs\nA  src/deep/c.rs\n?? notes/untracked.md\n"
            );
            assert!(!dir.path().join(".git/index.lock").exists());
        }
    }

    #[test]
    fn an_index_it_does_not_read_for_certain_is_refused() {
        let (_dir, index) = indexed("4", false);
        let bytes = std::fs::read(&index).unwrap();
        assert_eq!(recent(&bytes, 0, 32), None, "SHA-256 ids");
        let mut cut = bytes.clone();
        cut.truncate(bytes.len() - 30);
        assert_eq!(recent(&cut, 0, 20), None);
        let mut longer = bytes.clone();
        let at = longer.len() - 20;
        longer.splice(at..at, *b"junk");
        assert_eq!(recent(&longer, 0, 20), None);
        assert_eq!(recent(b"DIRC", 0, 20), None);
    }

    #[test]
    fn a_bitmap_claiming_more_folders_than_the_extension_holds_is_refused() {
        // An untracked cache of one folder, its "valid" bitmap made of
        // `words`, then one stat record, no ignore file's id, and a NUL.
        let cache = |words: &[u64]| {
            let mut data = vec![0u8]; // no ident
            data.extend([0u8; 2 * STAT_BYTES + 4 + 2 * 20]);
            data.push(0); // the per-folder ignore file's name, empty
            data.extend([1, 0, 0, 0]); // one folder: no untracked, no subfolder, name ""
            let bitmap = |words: &[u64]| {
                let mut b = 1u32.to_be_bytes().to_vec();
                b.extend(u32::try_from(words.len()).unwrap().to_be_bytes());
                for word in words {
                    b.extend(word.to_be_bytes());
                }
                b.extend(0u32.to_be_bytes());
                b
            };
            data.extend(bitmap(words));
            data.extend(bitmap(&[]));
            data.extend(bitmap(&[]));
            data.extend([0u8; STAT_BYTES + 1]);
            data
        };
        // One literal word with one bit: the folder's record reads (with
        // the two ignore files' records, all changed since 1970).
        assert_eq!(
            untracked(&cache(&[1 << 33, 1]), 0, 20).map(|r| r.len()),
            Some(3)
        );
        // A run of 2^32 words of ones (2^38 bits): refused before anything
        // is counted or kept.
        assert_eq!(untracked(&cache(&[(0xffff_ffff << 1) | 1]), 0, 20), None);
    }

    proptest::proptest! {
        #[test]
        fn any_index_bytes_read_without_a_panic(
            cut in 0usize..4096,
            flips in proptest::collection::vec((0usize..4096, proptest::num::u8::ANY), 0..8),
        ) {
            let (_dir, index) = indexed("4", true);
            let mut bytes = std::fs::read(&index).unwrap();
            for (at, value) in flips {
                let len = bytes.len();
                bytes[at % len] = value;
            }
            bytes.truncate(bytes.len().saturating_sub(cut % 64));
            let _ = read(&bytes, 0);
        }
    }

    #[test]
    fn an_index_it_cannot_smudge_is_dropped() {
        let (_dir, index) = indexed("2", true);
        std::fs::write(index.with_extension("lock"), "").unwrap();
        smudge_recent(&index, 0, None);
        assert!(!index.exists(), "dropped: the next staging starts afresh");
    }
}
