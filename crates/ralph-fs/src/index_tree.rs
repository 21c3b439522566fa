//! The tree of a loop's kept index written by ralph, not by `git write-tree`:
//! one git process fewer at every looping stop that changed a file.
//!
//! The index is ralph's own (in the per-user state folder, where the agent
//! cannot write), so it is read as it is: its entries (versions 2 to 4, the
//! paths of version 4 compressed) give each file's mode, object id and path,
//! and the trees are built from them as git builds them (entries in the
//! index's order, which is the tree order; a folder's entry `40000 name`).
//! Each tree object not yet in the private store is written there as a
//! loose object, zlib-framed with stored (uncompressed) blocks, which git
//! reads like any other. Only SHA-1 objects; anything this does not know
//! for certain (an entry being merged or only intended to be added, a
//! sparse folder entry, a mode git would not write, a short read) answers
//! `None`, and the caller runs `git write-tree` instead.

use std::io::Write as _;
use std::path::Path;

use sha1::Digest as _;

use crate::safe_fs;

/// The largest index read.
pub(crate) const MAX_INDEX_BYTES: u64 = 512 * 1024 * 1024;

/// One file of the index: its mode, its object id and its path.
pub(crate) struct Entry<'a> {
    pub(crate) mode: u32,
    /// The file's size as git recorded it (its low 32 bits).
    pub(crate) size: u32,
    pub(crate) id: [u8; 20],
    pub(crate) path: std::borrow::Cow<'a, [u8]>,
}

/// `entries` with paths of their own (a version 4 index's are already).
pub(crate) fn owned(entries: Vec<Entry<'_>>) -> Vec<Entry<'static>> {
    entries
        .into_iter()
        .map(|e| Entry {
            mode: e.mode,
            size: e.size,
            id: e.id,
            path: std::borrow::Cow::Owned(e.path.into_owned()),
        })
        .collect()
}

/// The tree of the index whose bytes are `index`, with the edits `aside`
/// (kept beside it by `own_staging`) applied, each of its tree objects
/// written into the object folder `objects` when missing there; its id in
/// hex, or `None` when this cannot write it for certain.
pub(crate) fn tree_of(index: &[u8], aside: &[Edit], objects: &Path) -> Option<String> {
    let mut entries = entries(index)?;
    apply_edits(&mut entries, aside)?;
    let (id, _) = build(&entries, 0, objects)?;
    Some(hex(&id))
}

/// An edited file as `own_staging` keeps it beside an index, not in it: what its
/// entry (found by its path, once, in a plain entry) becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    pub path: Vec<u8>,
    pub mode: u32,
    /// The file's size, its low 32 bits (as git records it).
    pub size: u32,
    pub id: [u8; 20],
}

/// `entries` (an index's, in its order) with `edits` applied
/// (each one's mode, size and id); the paths whose mode or id it changed,
/// or `None` when an edit's path is not one entry's.
pub(crate) fn apply_edits(entries: &mut [Entry<'_>], edits: &[Edit]) -> Option<Vec<Vec<u8>>> {
    let mut changed = Vec::new();
    for edit in edits {
        let at = entries
            .binary_search_by(|e| e.path.as_ref().cmp(edit.path.as_slice()))
            .ok()?;
        let once = |i: Option<usize>| {
            i.and_then(|i| entries.get(i))
                .is_none_or(|e| e.path.as_ref() != edit.path.as_slice())
        };
        if !once(at.checked_sub(1)) || !once(at.checked_add(1)) {
            return None;
        }
        let entry = &mut entries[at];
        if (entry.mode, entry.id) != (edit.mode, edit.id) {
            changed.push(edit.path.clone());
        }
        (entry.mode, entry.size, entry.id) = (edit.mode, edit.size, edit.id);
    }
    Some(changed)
}

/// The tree of `entries` (in the index's order, each path once), each of
/// its tree objects written into `objects` when missing there; its id in
/// hex, or `None` when this cannot write it for certain. A folder `known`
/// names (its path with its `/`) is that tree, not read again: only one
/// whose entries are those of a cached tree of the index they came from.
pub(crate) fn write_entries(
    entries: &[Entry<'_>],
    objects: &Path,
    known: &dyn Fn(&[u8]) -> Option<[u8; 20]>,
) -> Option<String> {
    let (id, used) = build_known(entries, 0, objects, known)?;
    (used == entries.len()).then(|| hex(&id))
}

/// A folder's path with its `/`, and the id of its tree.
pub(crate) type CachedTree = (Vec<u8>, [u8; 20]);

/// An index as read for a tree: its entries and what it caches of trees.
pub(crate) struct IndexRead<'a> {
    pub entries: Vec<Entry<'a>>,
    /// The folders but the top whose tree it caches as valid (git's `TREE`
    /// extension: a folder whose entries did not change since its tree was
    /// recorded) with those trees' ids; none when it has no such extension
    /// or it does not read so.
    pub cached: Vec<CachedTree>,
    /// The tree it holds whole, when it caches it: the top folder's, valid
    /// and of every entry.
    pub whole: Option<[u8; 20]>,
}

/// The [`IndexRead`] of the index `bytes`, `None` when they do not read so.
pub(crate) fn read_index(bytes: &[u8]) -> Option<IndexRead<'_>> {
    let (entries, end) = walk(bytes)?;
    let count = i64::from(word(bytes, 8)?);
    let (cached, top) = cached_trees(bytes, end).unwrap_or_default();
    let whole = top
        .filter(|top| top.entries == count)
        .and_then(|top| top.id);
    Some(IndexRead {
        entries,
        cached,
        whole,
    })
}

/// The valid cached trees of the index `bytes` whose entries end at `end`
/// (but the top's), and the record of the top's; `None` when it has no
/// `TREE` extension or it does not read so.
fn cached_trees(bytes: &[u8], end: usize) -> Option<(Vec<CachedTree>, Option<TreeNode<'_>>)> {
    let data = extension(bytes, end, *b"TREE")?;
    let mut found = Vec::new();
    read_cached(data, b"", &mut found)?;
    Some((found, tree_node(data).map(|(top, _)| top)))
}

/// One cached tree of a `TREE` extension's `data` and those under it (its
/// folder's path `folder`, with its `/`, or empty at the top), the valid
/// ones but the top pushed to `found`; what follows it.
fn read_cached<'d>(data: &'d [u8], folder: &[u8], found: &mut Vec<CachedTree>) -> Option<&'d [u8]> {
    let (node, mut rest) = tree_node(data)?;
    let path = node.path(folder);
    if let Some(id) = node.id
        && !path.is_empty()
    {
        found.push((path.clone(), id));
    }
    for _ in 0..node.subtrees {
        rest = read_cached(rest, &path, found)?;
    }
    Some(rest)
}

/// One record of a `TREE` extension (git's cache of trees): a folder's
/// name, how many entries and folders its tree holds, and its id when it is
/// valid (the count of entries `-1` marks one invalid, with no id).
pub(crate) struct TreeNode<'d> {
    pub(crate) name: &'d [u8],
    pub(crate) entries: i64,
    pub(crate) subtrees: usize,
    pub(crate) id: Option<[u8; 20]>,
}

impl TreeNode<'_> {
    /// The folder's path with its `/` (empty at the top), in `folder`.
    pub(crate) fn path(&self, folder: &[u8]) -> Vec<u8> {
        let mut path = folder.to_vec();
        if !self.name.is_empty() {
            path.extend_from_slice(self.name);
            path.push(b'/');
        }
        path
    }
}

/// The record at the start of a `TREE` extension's `data` (not the ones
/// under it), and what follows it; `None` when it does not read so.
pub(crate) fn tree_node(data: &[u8]) -> Option<(TreeNode<'_>, &[u8])> {
    let nul = data.iter().position(|b| *b == 0)?;
    let newline = nul + 1 + data.get(nul + 1..)?.iter().position(|b| *b == b'\n')?;
    let counts = std::str::from_utf8(&data[nul + 1..newline]).ok()?;
    let (entries, subtrees) = counts.split_once(' ')?;
    let entries: i64 = entries.parse().ok()?;
    let subtrees: usize = subtrees.parse().ok()?;
    let mut rest = &data[newline + 1..];
    let mut id = None;
    if entries >= 0 {
        id = Some(rest.get(..20)?.try_into().ok()?);
        rest = &rest[20..];
    }
    let node = TreeNode {
        name: &data[..nul],
        entries,
        subtrees,
        id,
    };
    Some((node, rest))
}

/// The data of the extension `signature` of the index `bytes` whose
/// entries end at `end` (SHA-1: its last 20 bytes are its checksum).
fn extension(bytes: &[u8], end: usize, signature: [u8; 4]) -> Option<&[u8]> {
    let mut rest = bytes.get(end..bytes.len().checked_sub(20)?)?;
    while rest.len() >= 8 {
        let len = usize::try_from(u32::from_be_bytes(rest[4..8].try_into().ok()?)).ok()?;
        let data = rest.get(8..8usize.checked_add(len)?)?;
        if rest[..4] == signature {
            return Some(data);
        }
        rest = &rest[8 + len..];
    }
    None
}

/// The entries of an index file (`DIRC`, versions 2 to 4); `None` for an
/// entry a tree cannot hold as it is.
pub(crate) fn entries(bytes: &[u8]) -> Option<Vec<Entry<'_>>> {
    walk(bytes).map(|(entries, _)| entries)
}

/// [`entries`], and where they end in `bytes`.
fn walk(bytes: &[u8]) -> Option<(Vec<Entry<'_>>, usize)> {
    let version = header(bytes)?;
    let count = usize::try_from(word(bytes, 8)?).ok()?;
    let mut at = 12;
    let mut previous: Vec<u8> = Vec::new();
    let mut out = Vec::with_capacity(count.min(1 << 20));
    for _ in 0..count {
        let mode = word(bytes, at + 24)?;
        let size = word(bytes, at + 36)?;
        let id: [u8; 20] = bytes.get(at + 40..at + 60)?.try_into().ok()?;
        let step = step_entry(bytes, at, version, 20, &mut previous)?;
        at = step.next;
        if let Some(extended) = step.extended
            && (version < 3 || extended & 0x2000 != 0)
        {
            // Intent-to-add is no file of the tree yet; skip-worktree is
            // one as the index has it.
            return None;
        }
        let path = if version == 4 {
            // One allocation per path, of its length.
            std::borrow::Cow::Owned(previous.clone())
        } else {
            std::borrow::Cow::Borrowed(&bytes[step.name])
        };
        let stage = (step.flags >> 12) & 0x3;
        let known = matches!(mode, 0o100_644 | 0o100_755 | 0o120_000 | 0o160_000);
        if stage != 0 || !known || !tree_path(&path) {
            return None;
        }
        out.push(Entry {
            mode,
            size,
            id,
            path,
        });
    }
    Some((out, at))
}

/// The big-endian word at `at` in `bytes`.
pub(crate) fn word(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The version of the index `bytes` (`DIRC`, 2 to 4), `None` for another.
pub(crate) fn header(bytes: &[u8]) -> Option<u32> {
    let version = word(bytes, 4)?;
    (bytes.get(..4)? == b"DIRC" && (2..=4).contains(&version)).then_some(version)
}

/// One entry of an index, stepped over ([`step_entry`]).
pub(crate) struct Step {
    /// Its flags (stage, extended, assume-valid, the name's length).
    pub(crate) flags: u16,
    /// Its extended flags (intent-to-add, skip-worktree), when it has them.
    pub(crate) extended: Option<u16>,
    /// Where its name is stored: the whole path before version 4, what
    /// follows the previous path's kept part in version 4.
    pub(crate) name: std::ops::Range<usize>,
    /// Where the next entry (or the extensions) begins.
    pub(crate) next: usize,
}

/// Steps over the entry at `at` of an index of `version` whose object ids
/// are `hash_len` bytes long, its path made in `path` (which holds the
/// previous entry's: version 4 keeps part of it); `None` for bytes that do
/// not read so.
pub(crate) fn step_entry(
    bytes: &[u8],
    at: usize,
    version: u32,
    hash_len: usize,
    path: &mut Vec<u8>,
) -> Option<Step> {
    let flags_at = at.checked_add(40 + hash_len)?;
    let flags = u16::from_be_bytes(bytes.get(flags_at..flags_at + 2)?.try_into().ok()?);
    let mut name_at = flags_at + 2;
    let mut extended = None;
    if flags & 0x4000 != 0 {
        extended = Some(u16::from_be_bytes(
            bytes.get(name_at..name_at + 2)?.try_into().ok()?,
        ));
        name_at += 2;
    }
    if version == 4 {
        // How much of the path before to keep (a varint, which may be a
        // zero byte), then the rest of the path and its NUL.
        let (strip, used) = varint(bytes.get(name_at..)?)?;
        name_at += used;
        let end = name_at + bytes.get(name_at..)?.iter().position(|b| *b == 0)?;
        let keep = path.len().checked_sub(usize::try_from(strip).ok()?)?;
        path.truncate(keep);
        path.extend_from_slice(&bytes[name_at..end]);
        let name = name_at..end;
        return Some(Step {
            flags,
            extended,
            name,
            next: end + 1,
        });
    }
    let end = name_at + bytes.get(name_at..)?.iter().position(|b| *b == 0)?;
    path.clear();
    path.extend_from_slice(&bytes[name_at..end]);
    Some(Step {
        flags,
        extended,
        name: name_at..end,
        // At least one NUL, the entry padded to a multiple of eight.
        next: at + (end - at + 8) / 8 * 8,
    })
}

/// The most folders deep a path of a tree ralph writes goes (each is one
/// level of [`build`]'s recursion).
const MAX_DEPTH: usize = 1024;

/// Whether `path` is one a tree can hold as git writes them: no empty, `.`
/// or `..` part, no `.git` folder or file, and at most [`MAX_DEPTH`] parts.
/// An index the agent could write (the user's, read for pinned entries)
/// may say anything; such an entry is refused, never written into a tree.
pub(crate) fn tree_path(path: &[u8]) -> bool {
    let mut parts = 0;
    for part in path.split(|b| *b == b'/') {
        parts += 1;
        if part.is_empty() || part == b"." || part == b".." || part.eq_ignore_ascii_case(b".git") {
            return false;
        }
    }
    parts <= MAX_DEPTH
}

/// git's offset varint (version 4's path compression): each byte's high
/// bit says another follows, and each follower adds one before the shift.
pub(crate) fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = u64::from(*bytes.first()? & 0x7f);
    let mut used = 1;
    while bytes[used - 1] & 0x80 != 0 {
        let next = *bytes.get(used)?;
        value = value.checked_add(1)?.checked_mul(128)? | u64::from(next & 0x7f);
        used += 1;
    }
    Some((value, used))
}

/// A file's mode as a tree writes it, with its space: only the modes an
/// index entry ralph reads may have.
fn mode_word(mode: u32) -> Option<&'static [u8]> {
    match mode {
        0o100_644 => Some(b"100644 "),
        0o100_755 => Some(b"100755 "),
        0o120_000 => Some(b"120000 "),
        0o160_000 => Some(b"160000 "),
        _ => None,
    }
}

/// The tree of `entries` (all under one folder, whose path with its `/` is
/// `depth` bytes long), written when missing; its id, and how many entries
/// it took.
fn build(entries: &[Entry<'_>], depth: usize, objects: &Path) -> Option<([u8; 20], usize)> {
    build_known(entries, depth, objects, &|_| None)
}

/// [`build`], a folder `known` names taken as that tree (when the store
/// `objects` holds it: a tree ralph wrote there), its entries not read.
fn build_known(
    entries: &[Entry<'_>],
    depth: usize,
    objects: &Path,
    known: &dyn Fn(&[u8]) -> Option<[u8; 20]>,
) -> Option<([u8; 20], usize)> {
    let mut body = Vec::new();
    let mut taken = 0;
    while taken < entries.len() {
        let rest = entries[taken].path.get(depth..)?;
        match rest.iter().position(|b| *b == b'/') {
            None => {
                let entry = &entries[taken];
                body.extend_from_slice(mode_word(entry.mode)?);
                body.extend_from_slice(rest);
                body.push(0);
                body.extend_from_slice(&entry.id);
                taken += 1;
            }
            Some(slash) => {
                let folder = &entries[taken].path[..=depth + slash];
                let within = entries[taken..]
                    .iter()
                    .take_while(|e| e.path.starts_with(folder))
                    .count();
                let stored = known(folder).filter(|id| holds(objects, id));
                let (id, used) = match stored {
                    Some(id) => (id, within),
                    None => build_known(
                        &entries[taken..taken + within],
                        folder.len(),
                        objects,
                        known,
                    )?,
                };
                if used != within || slash == 0 {
                    return None;
                }
                body.extend_from_slice(b"40000 ");
                body.extend_from_slice(&rest[..slash]);
                body.push(0);
                body.extend_from_slice(&id);
                taken += within;
            }
        }
    }
    let id = store_tree(&body, objects)?;
    Some((id, taken))
}

/// Whether the object folder `objects` holds the object `id` loose.
fn holds(objects: &Path, id: &[u8; 20]) -> bool {
    let name = hex(id);
    std::fs::symlink_metadata(objects.join(&name[..2]).join(&name[2..])).is_ok_and(|m| m.is_file())
}

/// Writes the tree object `body` into `objects` (unless it is there), its id.
fn store_tree(body: &[u8], objects: &Path) -> Option<[u8; 20]> {
    let mut object = format!("tree {}\0", body.len()).into_bytes();
    object.extend_from_slice(body);
    store_object(&object, objects, &[])
}

/// The SHA-1 id of the object whose header and body are `object`.
pub(crate) fn object_id(object: &[u8]) -> [u8; 20] {
    sha1::Sha1::digest(object).into()
}

/// Writes `object` (its header, `<kind> <size>\0`, and its body) into the
/// object folder `objects` as a loose object, unless that folder or one of
/// `also` holds it loose already; its id.
pub(crate) fn store_object(
    object: &[u8],
    objects: &Path,
    also: &[std::path::PathBuf],
) -> Option<[u8; 20]> {
    let id = object_id(object);
    let name = hex(&id);
    let folder = objects.join(&name[..2]);
    let path = folder.join(&name[2..]);
    if std::iter::once(objects)
        .chain(also.iter().map(std::path::PathBuf::as_path))
        .any(|folder| holds(folder, &id))
    {
        return Some(id);
    }
    // Most stops write into folders that exist: one stat, not a mkdir.
    if !std::fs::symlink_metadata(&folder).is_ok_and(|m| m.is_dir()) {
        safe_fs::ensure_dir(objects, &name[..2]).ok()?;
    }
    let mut file = tempfile::Builder::new()
        .prefix("tmp_obj_")
        .tempfile_in(&folder)
        .ok()?;
    file.write_all(&stored_zlib(object)).ok()?;
    match file.persist_noclobber(&path) {
        Ok(_) => Some(id),
        // Written meanwhile by another stop: the same bytes, by its name.
        Err(_) if path.is_file() => Some(id),
        Err(_) => None,
    }
}

/// `data` as a zlib stream of stored (uncompressed) deflate blocks.
fn stored_zlib(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 65535 * 5 + 16);
    out.extend_from_slice(&[0x78, 0x01]);
    let mut blocks = data.chunks(65535).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = u16::try_from(block.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for byte in data {
        a = (a + u32::from(*byte)) % 65521;
        b = (b + a) % 65521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

pub(crate) fn hex(id: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(id.len() * 2);
    for byte in id {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

#[cfg(unix)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_apply_to_the_one_entry_of_their_path_and_name_what_they_changed() {
        let entry = |path: &'static [u8], id: u8| Entry {
            mode: 0o100_644,
            size: 1,
            id: [id; 20],
            path: std::borrow::Cow::Borrowed(path),
        };
        let edit = |path: &[u8], mode: u32, id: u8| Edit {
            path: path.to_vec(),
            mode,
            size: 9,
            id: [id; 20],
        };
        let mut entries = vec![entry(b"a", 1), entry(b"b/c", 2), entry(b"d", 3)];
        // The same bytes again (its size on disk differs): not a change.
        let edits = [edit(b"a", 0o100_644, 1), edit(b"b/c", 0o100_644, 7)];
        let changed = apply_edits(&mut entries, &edits).unwrap();
        assert_eq!(changed, [b"b/c".to_vec()]);
        assert_eq!((entries[1].id, entries[1].size), ([7; 20], 9));
        assert_eq!(entries[0].size, 9);
        // A mode alone is a change.
        let changed = apply_edits(&mut entries, &[edit(b"d", 0o100_755, 3)]).unwrap();
        assert_eq!(changed, [b"d".to_vec()]);
        // A path no entry has, or two entries have, is not applied.
        assert!(apply_edits(&mut entries, &[edit(b"e", 0o100_644, 1)]).is_none());
        let mut twice = vec![entry(b"a", 1), entry(b"a", 2)];
        assert!(apply_edits(&mut twice, &[edit(b"a", 0o100_644, 1)]).is_none());
    }

    #[test]
    fn a_cached_tree_the_store_holds_is_used_and_one_it_lacks_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git_in(root, &["init", "-q"]);
        for path in ["a/x.txt", "a/b/y.txt", "c/z.txt", "top.txt"] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), path).unwrap();
        }
        git_in(root, &["add", "-A"]);
        let theirs = git_in(root, &["write-tree"]).trim().to_owned();
        let bytes = std::fs::read(root.join(".git/index")).unwrap();
        let IndexRead {
            entries,
            cached,
            whole,
        } = read_index(&bytes).unwrap();
        // git's write-tree cached the top's tree too: the tree held whole.
        assert_eq!(hex(&whole.unwrap()), theirs);
        let folders: Vec<&[u8]> = cached.iter().map(|(f, _)| f.as_slice()).collect();
        assert_eq!(folders, [&b"a/"[..], b"a/b/", b"c/"]);
        let known = |folder: &[u8]| cached.iter().find(|(f, _)| f == folder).map(|(_, id)| *id);
        // An empty store: every tree written, the same tree as git's.
        let store = tempfile::tempdir().unwrap();
        assert_eq!(
            write_entries(&entries, store.path(), &known).unwrap(),
            theirs
        );
        // A cached tree the store holds is taken as it is, its entries not
        // read: one named wrongly (as `c/`'s) shows it.
        let c = cached[2].1;
        let wrong = |folder: &[u8]| if folder == b"a/" { Some(c) } else { None };
        let taken = write_entries(&entries, store.path(), &wrong).unwrap();
        assert_ne!(taken, theirs);
        let other = tempfile::tempdir().unwrap();
        assert_eq!(
            write_entries(&entries, other.path(), &wrong).unwrap(),
            theirs,
            "not held: built"
        );
    }

    /// [`tree_of`] of the index file at `index`.
    fn write_tree(index: &Path, objects: &Path) -> Option<String> {
        tree_of(
            &safe_fs::read_capped(index, MAX_INDEX_BYTES).ok()?,
            &[],
            objects,
        )
    }

    /// `git ARGS` in `dir` (a test's repository), its stdout.
    fn git_in(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// The tree ralph writes from the repository's index against git's own,
    /// at each index version, and git reads every object ralph wrote.
    fn same_as_git(root: &Path) {
        for version in ["2", "3", "4"] {
            git_in(root, &["update-index", "--index-version", version]);
            let store = tempfile::tempdir().unwrap();
            let ours = write_tree(&root.join(".git/index"), store.path()).unwrap();
            let theirs = git_in(root, &["write-tree"]);
            assert_eq!(ours, theirs.trim(), "index version {version}");
            // Every tree object ralph wrote reads back as the same tree.
            let objects = store.path().to_str().unwrap().to_owned();
            let listed = std::process::Command::new("git")
                .arg("-C")
                .arg(root)
                .args(["ls-tree", "-r", "-t", &ours])
                .env("GIT_OBJECT_DIRECTORY", &objects)
                .env(
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                    root.join(".git/objects"),
                )
                .output()
                .unwrap();
            assert!(listed.status.success());
            let fsck = std::process::Command::new("git")
                .arg("-C")
                .arg(root)
                .args(["cat-file", "-p", &ours])
                .env("GIT_OBJECT_DIRECTORY", &objects)
                .output()
                .unwrap();
            assert!(fsck.status.success(), "git reads ralph's tree object");
        }
    }

    #[test]
    fn the_tree_is_git_s_own_for_files_folders_links_and_odd_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git_in(root, &["init", "-q"]);
        for (path, text) in [
            ("a-b", "1"),
            ("a.c", "2"),
            ("a/b", "3"),
            ("a/c/d/e.txt", "4"),
            ("a0", "5"),
            ("z/y", "6"),
            ("ü n i/c o d e", "7"),
        ] {
            let file = root.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        std::os::unix::fs::symlink("a/b", root.join("link")).unwrap();
        std::fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        // A long tree: more than one stored block.
        for i in 0..3000 {
            std::fs::write(root.join(format!("z/file-with-a-long-name-{i:05}")), "x").unwrap();
        }
        git_in(root, &["add", "-A"]);
        // A gitlink, and an entry the sparse checkout skips: both in the tree.
        git_in(
            root,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                "160000,4b825dc642cb6eb9a060e54bf8d69288fbee4904,sub",
            ],
        );
        git_in(root, &["update-index", "--skip-worktree", "a.c"]);
        same_as_git(root);
    }

    #[test]
    fn an_empty_index_is_the_empty_tree() {
        let dir = tempfile::tempdir().unwrap();
        git_in(dir.path(), &["init", "-q"]);
        git_in(dir.path(), &["read-tree", "--empty"]);
        same_as_git(dir.path());
    }

    #[test]
    fn what_it_cannot_write_for_certain_is_left_to_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git_in(root, &["init", "-q"]);
        std::fs::write(root.join("new.txt"), "x").unwrap();
        git_in(root, &["add", "-N", "new.txt"]);
        let store = tempfile::tempdir().unwrap();
        assert_eq!(write_tree(&root.join(".git/index"), store.path()), None);
        std::fs::write(root.join(".git/index"), b"DIRC\0\0\0\x02\0\0\0\x05").unwrap();
        assert_eq!(write_tree(&root.join(".git/index"), store.path()), None);
        assert_eq!(write_tree(&root.join("missing"), store.path()), None);
    }

    #[test]
    fn a_path_a_tree_cannot_hold_safely_is_refused() {
        for good in [
            &b"a"[..],
            b"src/lib.rs",
            b".claude/settings.json",
            b".github/x",
        ] {
            assert!(tree_path(good), "{}", String::from_utf8_lossy(good));
        }
        let deep = [b"a/".repeat(MAX_DEPTH), b"a".to_vec()].concat();
        for bad in [
            &b""[..],
            b"/abs",
            b"a//b",
            b"a/",
            b".claude/../../etc/passwd",
            b"./x",
            b".git/config",
            b"sub/.GIT/hooks/pre-commit",
            &deep,
        ] {
            assert!(!tree_path(bad), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn stored_blocks_are_a_zlib_stream_git_reads() {
        assert_eq!(
            stored_zlib(b""),
            [0x78, 0x01, 1, 0, 0, 0xff, 0xff, 0, 0, 0, 1]
        );
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        // git's own encoding of 128: 0x80 0x00.
        assert_eq!(varint(&[0x80, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0x80]), None);
    }
}
