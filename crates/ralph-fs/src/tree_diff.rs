//! The work tree as a git tree object, and the paths that changed since
//! one: what `--protect` and `--scope` compare against (the tree recorded
//! when the loop was armed).
//!
//! Nothing of the user's git state moves. A loop that keeps a per-user
//! folder compares through an index of its own kept there per arming
//! ([`changed_since_kept`], never seeded from the user's index; its new
//! objects go where its caller says: `one_staging.rs`). Otherwise git
//! writes into a scratch index (`GIT_INDEX_FILE`), a copy of `.git/index`
//! made with `O_EXCL` in a private temporary folder; the objects `git add`
//! stores there are new loose objects of the project, which nothing
//! references and which `git gc` prunes in time. HEAD, the branch, the
//! index, the stash and the reflog stay as they were. Every git process
//! goes through `git_runner` (no program the repository's configuration
//! names runs).
//!
//! A copy is not trusted to say what changed, because the agent can write
//! the user's index: an entry marked assume-unchanged or skip-worktree is
//! cleared in the copy first (else `git add` would skip that file), and the
//! copy is dated 1970, so git trusts none of its stat data and compares
//! every file's bytes with its entry (an entry naming the old object beside
//! the new file's stat data is still seen). Tracked and untracked files
//! count, ignored ones do not; ralph's own files in `.claude/` (its loop
//! files and `.claude/ralph/`) and the client's `settings.local.json` are
//! left out of every list of changed paths ([`BOOKKEEPING`]).
//!
//! The staging itself ([`stage`]: the private folder, the copy of the
//! user's index, `git add`) is the one checkpoints (`fs/checkpoint.rs`) go
//! through too, with the user's marks trusted and `.claude/` left as the
//! user's index has it ([`Staging`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::git_runner;
use crate::safe_fs::{self, FsError};

/// The longest one snapshot or comparison may take, every git process it
/// starts included.
pub const TREE_TIME_LIMIT: Duration = Duration::from_secs(30);

/// What of `.claude/` every listing of changed paths leaves out: ralph's
/// own bookkeeping (loop files, `.claude/ralph/`, the temporary files of
/// its atomic writes) and the client's `settings.local.json` (written when
/// the user allows a tool). Everything else in `.claude/` (settings, hooks,
/// commands, agents) is compared, so a gate's defaults can protect it.
const BOOKKEEPING: [&str; 4] = [
    ":(exclude).claude/ralph",
    ":(exclude,glob).claude/*-loop.local.md",
    ":(exclude,glob).claude/.*",
    ":(exclude).claude/settings.local.json",
];

/// The most of one git listing read (paths, NUL-separated).
const MAX_LISTING_BYTES: u64 = 64 * 1024 * 1024;

/// The largest `.git/index` copied; past it the scratch index starts empty
/// (slower: every file is hashed).
const MAX_INDEX_BYTES: u64 = 512 * 1024 * 1024;

/// The most of the ignore rules recorded at arming, per file.
const MAX_RULES_BYTES: u64 = 1024 * 1024;

/// git's own default for `core.excludesFile`: `$XDG_CONFIG_HOME/git/ignore`,
/// else `$HOME/.config/git/ignore`.
pub(crate) fn default_excludes_file() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("XDG_CONFIG_HOME")
        .filter(|p| p.is_absolute())
        .map(|c| c.join("git/ignore"))
        .or_else(|| var("HOME").map(|h| h.join(".config/git/ignore")))
}

/// Settings for the git processes that read the work tree into the
/// scratch index: every stat field counts, none is trusted blindly.
const STAT_CHECKS: &[(&str, &str)] = &[
    ("core.trustctime", "true"),
    ("core.checkStat", "default"),
    ("core.ignoreStat", "false"),
    ("core.splitIndex", "false"),
    ("index.sparse", "false"),
    // The user's attributes file is not the project's, but the agent can
    // write it: no `ident`, `eol` or encoding it names folds a changed
    // file back into the one recorded. (`.git/info/attributes` has no
    // such switch: the gate's snapshot then holds the folded file, never
    // the agent's bytes.)
    ("core.attributesFile", ""),
];

/// The work tree at one moment, as git recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeSnapshot {
    /// The id of the tree object (tracked and untracked files, not ignored ones).
    pub tree: String,
    /// Paths that differ from HEAD's tree (all of them before the first commit),
    /// relative to the project root.
    pub dirty: Vec<String>,
    /// The repository's own ignore rules at this moment (`.git/info/exclude`
    /// and `core.excludesFile`, one after the other) as a blob, so a
    /// comparison can list with them what a rule added since hides.
    pub excludes: Option<String>,
    /// Submodules (gitlinks) under the root, relative to it: the tree
    /// records each one's commit, never its work tree.
    pub submodules: Vec<String>,
}

/// Whether `id` reads as a git object id (SHA-1 or SHA-256, in hex).
pub fn is_object_id(id: &str) -> bool {
    (id.len() == 40 || id.len() == 64) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The work tree under `root` as a tree object, with the paths that differ
/// from HEAD. `None` when `root` is not in a git work tree or git did not
/// answer within `limit`.
pub fn snapshot(root: &Path, limit: Duration) -> Option<TreeSnapshot> {
    let scratch = stage(root, Instant::now() + limit, &COMPARED).ok()?;
    let tree = scratch.run(&["write-tree"])?;
    let tree = String::from_utf8_lossy(&tree).trim().to_owned();
    if !is_object_id(&tree) {
        return None;
    }
    let dirty = match scratch.names(&["diff-index", "--cached", "HEAD"]) {
        Some(paths) => paths,
        // No commit yet: every file is new.
        None => {
            let mut args = vec!["ls-files", "-z", "--", "."];
            args.extend(BOOKKEEPING);
            scratch.listing(&args)?
        }
    };
    let excludes = scratch.exclude_rules();
    let staged = scratch.run(&["ls-files", "-s", "-z", "--", "."])?;
    let submodules = String::from_utf8_lossy(&staged)
        .split('\0')
        .filter(|entry| entry.starts_with("160000 "))
        .filter_map(|entry| entry.split_once('\t').map(|(_, path)| path.to_owned()))
        .collect();
    Some(TreeSnapshot {
        tree,
        dirty,
        excludes,
        submodules,
    })
}

/// The paths, relative to `root`, that differ between the tree `tree` and
/// the work tree now: changed, added or removed. `None` when git could not
/// tell within `limit` (the tree object missing, say).
///
/// `excludes`, the ignore rules a [`TreeSnapshot`] recorded: a file that only a
/// rule added since then (to `.git/info/exclude` or `core.excludesFile`,
/// neither of them in the tree) hides is staged all the same, so it counts
/// as the change it is.
pub fn changed_since(
    root: &Path,
    tree: &str,
    excludes: Option<&str>,
    limit: Duration,
) -> Option<Vec<String>> {
    if !is_object_id(tree) {
        return None;
    }
    let scratch = stage(root, Instant::now() + limit, &COMPARED).ok()?;
    if let Some(rules) = excludes {
        scratch.add_hidden(rules)?;
    }
    scratch.names(&["diff-index", "--cached", tree])
}

/// [`changed_since`], through an index of its own that the caller keeps at
/// `index` between stops (a file in a private folder of ralph's, one per
/// arming, [`kept_index`]): seeded from the armed tree (the first stop
/// hashes every file; nothing of the user's index is read) and staged by
/// status (`status_staging`), every stat field checked, so that from then
/// on git's stat cache stays warm and a stop hashes only what changed
/// since the last one. The
/// arming's ignore rules `excludes` are listed with only when the rule files
/// may differ from what they were at arming ([`rules_as_armed`]), and the
/// index is compared with the armed tree by ralph ([`armed_diff`]), by `git
/// diff-index` where it cannot be. `None`
/// when git could not tell; when its staging failed, the index (and a
/// lock git left) is removed too, so the next comparison starts afresh.
pub fn changed_since_kept(
    root: &Path,
    tree: &str,
    excludes: Option<&str>,
    index: &Path,
    limit: Duration,
) -> Option<Vec<String>> {
    if !is_object_id(tree) {
        return None;
    }
    let deadline = Instant::now() + limit;
    let mut smudged_after = crate::same_second::Guard::new(index);
    let mut compared = compare_kept(root, tree, excludes, index, deadline, Vec::new())?;
    if let Some(read) = compared.read.take() {
        smudged_after.seen(read);
    }
    Some(compared.changed)
}

/// What [`compare_kept`] found.
pub(crate) struct Compared {
    /// The paths changed since arming.
    pub changed: Vec<String>,
    /// Whether files hidden by ignore rules added since arming were staged.
    pub hidden: bool,
    /// The kept index's entries as the comparison read them (once a stop).
    pub entries: Option<Vec<crate::index_tree::Entry<'static>>>,
    /// The folders whose tree the kept index caches as valid, with those
    /// trees (it is seeded by `git read-tree` of the armed tree, and git
    /// and `own_staging` mark a folder invalid when they change it).
    pub cached: Vec<crate::index_tree::CachedTree>,
    /// The kept index's bytes those entries were read from, for its
    /// [`crate::same_second::Guard`] (so the smudge reads it no more).
    pub read: Option<(Vec<u8>, crate::same_second::Stamp)>,
}

/// [`changed_since_kept`] before `deadline`, with `env` given to every git
/// process (where new objects go: `one_staging`'s scratch folder).
pub(crate) fn compare_kept(
    root: &Path,
    tree: &str,
    excludes: Option<&str>,
    index: &Path,
    deadline: Instant,
    env: Vec<(&'static str, PathBuf)>,
) -> Option<Compared> {
    // Never seeded from the user's index, whose stat data the agent can
    // forge (an entry with a file's new size, times and ctime, and the
    // armed blob's id, is not hashed again): its first stop hashes every file.
    let kept = kept_index(root, deadline, env, index.to_owned(), false).ok()?;
    let staged = if crate::status_staging::applies(root) {
        let after_seed = |seeded: &Path| keep_armed_entries(seeded, tree);
        let listing = crate::status_staging::Listing {
            seed: Some(tree),
            after_seed: Some(&after_seed),
            excludes_file: None,
            wanted: |_| true,
        };
        crate::status_staging::stage(&kept.as_kept(&|| kept.git()), &listing)
            .map(|staged| (staged.written, staged.aside))
    } else {
        kept.add_all(&COMPARED, &[]).map(|()| (None, Vec::new()))
    };
    let Ok((written, aside)) = staged else {
        // Half done, or a lock a killed git left: the next one starts afresh.
        safe_fs::remove(index);
        let mut lock = index.as_os_str().to_owned();
        lock.push(".lock");
        safe_fs::remove(Path::new(&lock));
        return None;
    };
    let mut hidden = false;
    if let Some(rules) = excludes.filter(|rules| !rules_as_armed(root, rules)) {
        hidden = kept.add_hidden(rules)?;
    }
    // The bytes ralph read or wrote, while nothing wrote the index since.
    let read = crate::same_second::current(kept.path(), written);
    let staged = read
        .as_ref()
        .and_then(|(bytes, _)| staged_entries(bytes, &aside, tree));
    let (entries, cached, changed) = match staged {
        Some(staged) => (Some(staged.entries), staged.cached, staged.changed),
        None => (None, Vec::new(), None),
    };
    let changed = changed
        .or_else(|| {
            let entries = entries.as_deref()?;
            armed_diff(root, tree, &kept, entries)
        })
        .or_else(|| {
            // git reads the index as it is: the edits kept aside go in first.
            let git = || kept.git();
            crate::status_staging::settle(&kept.as_kept(&git), &aside).ok()?;
            kept.names(&["diff-index", "--cached", tree])
        })?;
    Some(Compared {
        changed,
        hidden,
        entries,
        cached,
        read,
    })
}

/// The kept index as a stop staged it: its entries, the edits kept
/// aside applied ([`crate::index_tree::apply_edits`]), the folders whose
/// tree it caches (but those above such an edit), and the paths changed
/// since arming when the index (before those edits) still holds the armed
/// tree whole: then only an edit can differ, and no listing of the armed
/// tree is read.
struct StagedEntries {
    entries: Vec<crate::index_tree::Entry<'static>>,
    cached: Vec<crate::index_tree::CachedTree>,
    changed: Option<Vec<String>>,
}

/// [`StagedEntries`] of the kept index `bytes` with the edits `aside`,
/// compared with the armed tree `tree`; `None` when they do not read so.
fn staged_entries(
    bytes: &[u8],
    aside: &[crate::index_tree::Edit],
    tree: &str,
) -> Option<StagedEntries> {
    let crate::index_tree::IndexRead {
        entries,
        mut cached,
        whole,
    } = crate::index_tree::read_index(bytes)?;
    let mut entries = crate::index_tree::owned(entries);
    let edited = crate::index_tree::apply_edits(&mut entries, aside)?;
    cached.retain(|(folder, _)| !aside.iter().any(|edit| edit.path.starts_with(folder)));
    let armed = whole.is_some_and(|id| crate::index_tree::hex(&id) == tree);
    let changed = armed.then(|| {
        let mut changed: Vec<String> = edited
            .iter()
            .filter(|path| !bookkeeping(path))
            .map(|path| String::from_utf8_lossy(path).into_owned())
            .collect();
        changed.sort_unstable();
        changed
    });
    Some(StagedEntries {
        entries,
        cached,
        changed,
    })
}

/// The paths that differ between the armed tree `tree` and the kept index,
/// compared by ralph (no `git diff-index`): the index's entries against a
/// listing of the tree (`git ls-tree -r`, made once per arming and kept
/// beside the index, its first line the tree's id), [`BOOKKEEPING`] left
/// out. Only at the top of a repository of its own, for a SHA-1 tree;
/// `None` otherwise, or when the listing cannot be read for certain.
fn armed_diff(
    root: &Path,
    tree: &str,
    kept: &PrivateIndex,
    entries: &[crate::index_tree::Entry<'_>],
) -> Option<Vec<String>> {
    if tree.len() != 40 || !crate::status_staging::applies(root) {
        return None;
    }
    let listing_file = kept.path().with_file_name("armed-entries");
    let head = format!("{ARMED_ENTRIES} {tree}\n");
    let kept_listing = safe_fs::read_capped(&listing_file, MAX_LISTING_BYTES)
        .ok()
        .filter(|bytes| bytes.starts_with(head.as_bytes()));
    let now = || {
        entries
            .iter()
            .map(|e| Some((e.path.as_ref(), e.mode, e.id)))
    };
    let body = kept_listing.as_deref().map(|bytes| &bytes[head.len()..]);
    // Read as it is stored, in one pass: both are in path order (an
    // index's, and `armed-entries` as this ralph writes it).
    if let Some(changed) = body.and_then(|body| sorted_diff(listed_entries(body), now())) {
        return Some(changed);
    }
    // A listing an older ralph wrote in the tree's order, or none yet.
    let listed;
    let mut armed = match body {
        Some(body) => decode_entries(body)?,
        None => {
            listed = kept.run(&["ls-tree", "-r", "-z", "--full-tree", tree])?;
            let mut armed = armed_entries(&listed)?;
            write_armed_entries(&listing_file, tree, &mut armed);
            armed
        }
    };
    let mut current: Vec<Listed<'_>> = now().flatten().collect();
    armed.sort_unstable_by(|a, b| a.0.cmp(b.0));
    current.sort_unstable_by(|a, b| a.0.cmp(b.0));
    sorted_diff(armed.into_iter().map(Some), current.into_iter().map(Some))
}

/// The paths (but [`BOOKKEEPING`]) whose mode or id differ between
/// `armed` and `now`, each in path order, or that only one of them holds;
/// `None` when an entry does not read or is out of order (both are checked
/// as they are read).
fn sorted_diff<'a>(
    armed: impl Iterator<Item = Option<Listed<'a>>>,
    now: impl Iterator<Item = Option<Listed<'a>>>,
) -> Option<Vec<String>> {
    let (mut a, mut n) = (in_order(armed).peekable(), in_order(now).peekable());
    let mut changed = Vec::new();
    loop {
        let path = match (a.peek(), n.peek()) {
            (None, None) => break,
            (Some(None), _) | (_, Some(None)) => return None,
            (Some(Some(x)), Some(Some(y))) if x.0 == y.0 => {
                let differs = x.1 != y.1 || x.2 != y.2;
                let path = x.0;
                a.next();
                n.next();
                if !differs {
                    continue;
                }
                path
            }
            (Some(Some(x)), Some(Some(y))) if x.0 < y.0 => a.next()??.0,
            (Some(_) | None, Some(_)) => n.next()??.0,
            (Some(_), None) => a.next()??.0,
        };
        if !bookkeeping(path) {
            changed.push(String::from_utf8_lossy(path).into_owned());
        }
    }
    Some(changed)
}

/// `entries` with each one out of path order (not after the one before)
/// turned into `None`, as one that does not read is.
fn in_order<'a>(
    entries: impl Iterator<Item = Option<Listed<'a>>>,
) -> impl Iterator<Item = Option<Listed<'a>>> {
    let mut last: Option<&'a [u8]> = None;
    entries.map(move |entry| {
        let entry = entry?;
        if last.is_some_and(|last| last >= entry.0) {
            return None;
        }
        last = Some(entry.0);
        Some(entry)
    })
}

/// Writes `armed-entries` beside a kept index just seeded from `tree`,
/// which holds the tree's files exactly: what [`armed_diff`] reads at every
/// stop, with no `git ls-tree`. Nothing when the index does not read so (the
/// comparison then lists the tree with git).
fn keep_armed_entries(index: &Path, tree: &str) {
    let Ok(bytes) = safe_fs::read_capped(index, crate::index_tree::MAX_INDEX_BYTES) else {
        return;
    };
    let Some(entries) = crate::index_tree::entries(&bytes) else {
        return;
    };
    let mut listed: Vec<Listed<'_>> = entries
        .iter()
        .map(|e| (e.path.as_ref(), e.mode, e.id))
        .collect();
    write_armed_entries(&index.with_file_name("armed-entries"), tree, &mut listed);
}

/// `armed` (the files of the tree `tree`), sorted by path, as the kept
/// listing `file` (made anew).
fn write_armed_entries(file: &Path, tree: &str, armed: &mut [Listed<'_>]) {
    armed.sort_unstable_by(|a, b| a.0.cmp(b.0));
    safe_fs::remove(file);
    // What an older ralph kept instead (the listing as text).
    safe_fs::remove(&file.with_file_name("armed-listing"));
    let mut bytes = format!("{ARMED_ENTRIES} {tree}\n").into_bytes();
    encode_entries(armed, &mut bytes);
    let _ = safe_fs::create_new(file, &bytes);
}

/// A file of a tree or an index: its path, mode and SHA-1 object id.
type Listed<'a> = (&'a [u8], u32, [u8; 20]);

/// The entries of `git ls-tree -r -z` (`<mode> <type> <id>\t<path>`), as
/// (path, mode, id); `None` for one that does not read so (a SHA-256 id).
fn armed_entries(listing: &[u8]) -> Option<Vec<Listed<'_>>> {
    // Read byte by byte (a stop reads some 30,000 of them in a large tree).
    let hex = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    listing
        .split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let space = entry.iter().position(|b| *b == b' ').filter(|at| *at > 0)?;
            let mut mode = 0u32;
            for digit in &entry[..space] {
                let value = u32::from(digit.checked_sub(b'0').filter(|d| *d < 8)?);
                mode = mode.checked_mul(8)?.checked_add(value)?;
            }
            let kind = space + 1 + entry[space + 1..].iter().position(|b| *b == b' ')?;
            let id = entry.get(kind + 1..kind + 41)?;
            if entry.get(kind + 41) != Some(&b'\t') {
                return None;
            }
            let mut bytes = [0u8; 20];
            for (i, byte) in bytes.iter_mut().enumerate() {
                *byte = hex(id[2 * i])? << 4 | hex(id[2 * i + 1])?;
            }
            Some((&entry[kind + 42..], mode, bytes))
        })
        .collect()
}

/// The first word of `armed-entries`, the armed tree's files as a kept
/// comparison reads them at every stop: this word and the tree's id on the
/// first line, then each file as its mode (4 bytes), its id (20), its
/// path's length (4, big-endian) and its path.
const ARMED_ENTRIES: &str = "ralph-armed-entries-1";

/// `entries` in `armed-entries`' form, after `out`.
fn encode_entries(entries: &[Listed<'_>], out: &mut Vec<u8>) {
    for (path, mode, id) in entries {
        out.extend_from_slice(&mode.to_be_bytes());
        out.extend_from_slice(id);
        out.extend_from_slice(&u32::try_from(path.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(path);
    }
}

/// The files of `armed-entries` (after its first line); `None` when it
/// does not read so.
fn decode_entries(bytes: &[u8]) -> Option<Vec<Listed<'_>>> {
    // Each entry takes 28 bytes and its path: room for all, never grown.
    let mut entries = Vec::with_capacity(bytes.len() / 28);
    for entry in listed_entries(bytes) {
        entries.push(entry?);
    }
    Some(entries)
}

/// The entries of `armed-entries` (after its first line) one by one, as
/// [`encode_entries`] wrote them; `None` for bytes that do not read so,
/// and nothing after them.
fn listed_entries(mut bytes: &[u8]) -> impl Iterator<Item = Option<Listed<'_>>> {
    std::iter::from_fn(move || {
        if bytes.is_empty() {
            return None;
        }
        let entry = decode_one(bytes);
        bytes = entry.map_or(&[][..], |(_, rest)| rest);
        Some(entry.map(|(listed, _)| listed))
    })
}

/// The first entry of `bytes` and what follows it.
fn decode_one(bytes: &[u8]) -> Option<(Listed<'_>, &[u8])> {
    let mode = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
    let id: [u8; 20] = bytes.get(4..24)?.try_into().ok()?;
    let len = usize::try_from(u32::from_be_bytes(bytes.get(24..28)?.try_into().ok()?)).ok()?;
    let end = 28usize.checked_add(len)?;
    Some(((bytes.get(28..end)?, mode, id), &bytes[end..]))
}

/// Whether `path` is ralph's bookkeeping ([`BOOKKEEPING`], as git's
/// pathspecs match it: a literal one also matches what is under it, a
/// glob's `*` crosses no `/`).
fn bookkeeping(path: &[u8]) -> bool {
    let under = |literal: &[u8]| {
        path == literal || (path.starts_with(literal) && path.get(literal.len()) == Some(&b'/'))
    };
    let child = path
        .strip_prefix(b".claude/")
        .filter(|rest| !rest.contains(&b'/'));
    under(b".claude/ralph")
        || under(b".claude/settings.local.json")
        || child.is_some_and(|name| name.ends_with(b"-loop.local.md") || name.starts_with(b"."))
}

/// Whether the repository's own ignore rules (`.git/info/exclude`, then
/// git's default `core.excludesFile`, read as [`PrivateIndex::exclude_rules`]
/// reads them) hash to `armed`, the blob recorded at arming, known without
/// git: then no rule of theirs added since hides a file, and listing with
/// the armed rules would stage nothing more. `false` whenever that cannot be
/// known so (a linked worktree, `core.excludesFile` set or an include in a
/// configuration file: `git_config::excludes_file_unset`).
fn rules_as_armed(root: &Path, armed: &str) -> bool {
    if !is_object_id(armed) || !crate::git_config::excludes_file_unset(root) {
        return false;
    }
    let info = root.join(".git/info/exclude");
    let mut rules = Vec::new();
    for file in std::iter::once(info).chain(default_excludes_file()) {
        if let Ok(bytes) = safe_fs::read_capped(&file, MAX_RULES_BYTES) {
            rules.extend_from_slice(&bytes);
            rules.push(b'\n');
        }
    }
    // A negated rule makes the order matter, and git orders the two files
    // (`info/exclude` wins) where the armed blob, listed with as one file,
    // does not (its later lines win): no such rule, no difference.
    let negated = rules
        .split(|b| *b == b'\n')
        .any(|line| line.starts_with(b"!"));
    !negated
        && crate::object_check::object_name("blob", &rules, armed.len())
            == armed.to_ascii_lowercase()
}

/// The largest file [`file_in_tree`] reads (a manifest, not a data file).
const MAX_BLOB_BYTES: u64 = 8 * 1024 * 1024;

/// The bytes of `path` (relative to `root`) in the tree `tree`, as git
/// stored them (no filter, no replace ref: `cat-file blob`); `None` when
/// it is not there, is no file, or git did not answer within `limit`.
pub fn file_in_tree(root: &Path, tree: &str, path: &str, limit: Duration) -> Option<Vec<u8>> {
    if !is_object_id(tree) || path.starts_with(['-', ':']) {
        return None;
    }
    let mut command = git_runner::command(root, &[]).ok()?;
    command.env("GIT_NO_REPLACE_OBJECTS", "1").args([
        "cat-file",
        "blob",
        &format!("{tree}:./{path}"),
    ]);
    git_runner::run_until(command, Instant::now() + limit, &[0], MAX_BLOB_BYTES)
}

/// How [`stage`] reads the work tree into a private index.
pub(crate) struct Staging {
    /// What follows `git add -A --ignore-errors`: `--` and the pathspec.
    pub paths: &'static [&'static str],
    /// The exit codes of `git add` taken as staged.
    pub staged: &'static [i32],
    /// Whether the copy of the user's index is distrusted: its
    /// assume-unchanged and skip-worktree marks cleared and every stat field
    /// checked ([`STAT_CHECKS`]), so that no file hidden from git escapes
    /// `git add`.
    pub distrust: bool,
}

/// The comparison's staging: distrusted, `.claude/` staged too and left
/// out of every listing instead (an exclude pathspec that names an ignored
/// folder makes `git add` fail), and a `git add` that fails no answer (a
/// file it could not read would keep the copy's entry, hiding its change).
const COMPARED: Staging = Staging {
    paths: &["--", "."],
    staged: &[0],
    distrust: true,
};

/// A private index holding the work tree, in a private temporary folder
/// (removed, with the index in it, when this is dropped), or kept by the
/// caller between stops (no folder of its own).
pub(crate) struct PrivateIndex {
    root: PathBuf,
    overrides: Vec<(String, String)>,
    /// Variables every git process of the index gets (where objects go).
    env: Vec<(&'static str, PathBuf)>,
    deadline: Instant,
    index: PathBuf,
    folder: Option<tempfile::TempDir>,
}

/// The work tree under `root` staged into a private index (`git add`, as
/// `staging` says) before `deadline`, every git process hardened and told
/// the private index (`GIT_INDEX_FILE`): nothing of the user's git state
/// moves. The index starts as a copy of the user's, made exclusively in a
/// private temporary folder, so that git hashes only what changed; a copy
/// that cannot be made or that git cannot read is dropped and the work
/// tree read into an empty index instead.
pub(crate) fn stage(
    root: &Path,
    deadline: Instant,
    staging: &Staging,
) -> Result<PrivateIndex, FsError> {
    stage_with(root, deadline, staging, Vec::new(), |_| Ok(Vec::new())).map(|(index, _)| index)
}

/// [`stage`], with `env` given to every git process (where new objects go)
/// and the paths `leave_out` names (from the seeded index, before `git
/// add`) left out of the staging: those paths, too.
pub(crate) fn stage_with(
    root: &Path,
    deadline: Instant,
    staging: &Staging,
    env: Vec<(&'static str, PathBuf)>,
    leave_out: impl Fn(&PrivateIndex) -> Result<Vec<String>, FsError>,
) -> Result<(PrivateIndex, Vec<String>), FsError> {
    let mut overrides = crate::git::status_overrides(root, deadline)
        .ok_or_else(|| git_error("read the repository's configuration", "git did not answer"))?;
    if staging.distrust {
        overrides.extend(
            STAT_CHECKS
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
    }
    let folder = tempfile::Builder::new()
        .prefix("ralph-index-")
        .tempdir()
        .map_err(|source| FsError::Io {
            action: "create a private index for",
            path: root.to_owned(),
            source,
        })?;
    let fresh = folder.path().join("fresh-index");
    let mut private = PrivateIndex {
        root: root.to_owned(),
        overrides,
        env,
        deadline,
        index: folder.path().join("index"),
        folder: Some(folder),
    };
    if private.seed(staging.distrust)
        && let Ok(left) = leave_out(&private)
        && private.add_all(staging, &left).is_ok()
    {
        return Ok((private, left));
    }
    private.index = fresh;
    let left = leave_out(&private)?;
    private.add_all(staging, &left)?;
    Ok((private, left))
}

/// What makes an index kept between stops cheap to read and write again,
/// in git's own words (read by nothing but ralph's git processes): no
/// checksum written (`index.skipHash`), paths stored compressed (version 4,
/// for an index git starts), and git's cache of untracked folders (each
/// folder's listing kept with its stat data and the ignore rules' ids, so
/// a folder whose stat did not change is not read again; the user's own
/// index never gets one from ralph), kept for the listing of every
/// untracked file (`status_staging`'s, which stages them one by one).
const KEPT_INDEX: &[(&str, &str)] = &[
    ("index.skipHash", "true"),
    ("index.version", "4"),
    // No extension `own_staging` does not write (a user's `index.threads`
    // would add them).
    ("index.recordEndOfIndexEntries", "false"),
    ("index.recordOffsetTable", "false"),
    ("core.untrackedCache", "true"),
    ("status.showUntrackedFiles", "all"),
];

/// The private index a loop keeps at `index` between its stops (a file in
/// a private folder of ralph's, `checkpoint::stage_kept`), so that git's
/// stat cache stays warm: every stat field checked ([`STAT_CHECKS`]), as a
/// distrusted staging. When it does not exist yet and `seed` says so, it is
/// seeded from the user's index with its assume-unchanged and skip-worktree
/// marks cleared (a mark set later in the user's index never reaches it); a
/// seed that fails is removed, and git starts the index empty.
pub(crate) fn kept_index(
    root: &Path,
    deadline: Instant,
    env: Vec<(&'static str, PathBuf)>,
    index: PathBuf,
    seed: bool,
) -> Result<PrivateIndex, FsError> {
    let mut overrides = crate::git::status_overrides(root, deadline)
        .ok_or_else(|| git_error("read the repository's configuration", "git did not answer"))?;
    overrides.extend(
        STAT_CHECKS
            .iter()
            .chain(KEPT_INDEX)
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let private = PrivateIndex {
        root: root.to_owned(),
        overrides,
        env,
        deadline,
        index,
        folder: None,
    };
    if seed && safe_fs::kind_at(&private.index).is_none() && !private.seed(true) {
        safe_fs::remove(&private.index);
    }
    Ok(private)
}

fn git_error(what: &'static str, detail: impl Into<String>) -> FsError {
    FsError::Git {
        what,
        detail: detail.into(),
    }
}

impl PrivateIndex {
    /// The index file.
    pub(crate) fn path(&self) -> &Path {
        &self.index
    }

    /// This index as `status_staging` works on it, with `git` (this
    /// index's [`Self::git`]).
    pub(crate) fn as_kept<'a>(
        &'a self,
        git: &'a dyn Fn() -> std::io::Result<Command>,
    ) -> crate::status_staging::Kept<'a> {
        crate::status_staging::Kept {
            root: &self.root,
            index: &self.index,
            deadline: self.deadline,
            git,
            objects: crate::own_staging::ObjectFolders::of(&self.env),
        }
    }

    /// The configuration overrides every git process of the staging had.
    pub(crate) fn overrides(&self) -> &[(String, String)] {
        &self.overrides
    }

    /// git, hardened, with the private index.
    pub(crate) fn git(&self) -> std::io::Result<Command> {
        let mut command = git_runner::command(&self.root, &self.overrides)?;
        command
            .env("GIT_INDEX_FILE", &self.index)
            .env("GIT_ATTR_NOSYSTEM", "1");
        for (key, value) in &self.env {
            command.env(key, value);
        }
        Ok(command)
    }

    /// `git add -A` of what `staging` names, but the paths `left_out`.
    fn add_all(&self, staging: &Staging, left_out: &[String]) -> Result<(), FsError> {
        let mut add = self
            .git()
            .map_err(|e| git_error("start git", e.to_string()))?;
        add.args(["add", "-A", "--ignore-errors"])
            .args(staging.paths)
            .args(left_out.iter().map(|p| format!(":(exclude,literal){p}")));
        git_runner::run_until(add, self.deadline, staging.staged, MAX_LISTING_BYTES)
            .map(|_| ())
            .ok_or_else(|| {
                git_error(
                    "stage the work tree",
                    "git failed or did not answer in time (is this a git repository?)",
                )
            })
    }

    /// Copies the user's index into the private one (exclusively created).
    /// A trusted copy keeps the index's modification time, so that git
    /// still re-reads a file changed in the second the index was written
    /// (a copy dated now would take its stat data as settled). A
    /// `distrust`ed copy trusts no stat data at all: the agent can write the
    /// user's index, and an entry naming the old object with the new file's
    /// stat data (ctime included) would make `git add` keep the old bytes.
    /// It is dated 1970, so git compares every file's bytes with its entry,
    /// and its assume-unchanged and skip-worktree marks are cleared.
    fn seed(&self, distrust: bool) -> bool {
        let Some(user_index) = self.user_index() else {
            return false;
        };
        let fits = std::fs::symlink_metadata(&user_index)
            .is_ok_and(|m| m.is_file() && m.len() <= MAX_INDEX_BYTES);
        let dated = if distrust {
            safe_fs::Dated::Epoch
        } else {
            safe_fs::Dated::AsSource
        };
        if !fits || safe_fs::copy_new_dated(&user_index, &self.index, dated).is_err() {
            return false;
        }
        !distrust || self.clear_marks()
    }

    /// The user's index: `.git/index` when `root` holds the repository's
    /// folder, else where git says it is (a linked worktree's, or `root`
    /// below the top of its repository).
    fn user_index(&self) -> Option<PathBuf> {
        let dot_git = self.root.join(".git");
        if safe_fs::kind_at(&dot_git).is_some_and(|k| k.is_dir()) {
            return Some(dot_git.join("index"));
        }
        let out = self.plain(&["rev-parse", "--git-path", "index"])?;
        let named = String::from_utf8_lossy(&out).trim_end().to_owned();
        Some(self.root.join(named))
    }

    /// Clears the assume-unchanged and skip-worktree marks of the private
    /// index.
    fn clear_marks(&self) -> bool {
        let Some((assumed, skipped)) = self.flagged() else {
            return false;
        };
        // One mark per call: git applies only the last of the two options.
        self.clear("--no-assume-unchanged", &assumed) && self.clear("--no-skip-worktree", &skipped)
    }

    /// `git update-index <option>` on `paths` of the private index.
    fn clear(&self, option: &str, paths: &[String]) -> bool {
        if paths.is_empty() {
            return true;
        }
        let Ok(mut clear) = self.git() else {
            return false;
        };
        clear.args(["update-index", option, "-z", "--stdin"]);
        let list: Vec<u8> = paths
            .iter()
            .flat_map(|p| p.bytes().chain(std::iter::once(0)))
            .collect();
        git_runner::run_with_input(clear, &list, self.deadline, MAX_LISTING_BYTES).is_some()
    }

    /// Entries of the private index marked assume-unchanged (a lower-case
    /// tag) or skip-worktree (`S`), as `git ls-files -v` shows them: those
    /// under the root, by their paths relative to it (as `update-index` reads them).
    fn flagged(&self) -> Option<(Vec<String>, Vec<String>)> {
        let out = self.run(&["ls-files", "-v", "-z", "--", "."])?;
        let (mut assumed, mut skipped) = (Vec::new(), Vec::new());
        for entry in String::from_utf8_lossy(&out).split('\0') {
            let Some((tag, path)) = entry.split_once(' ') else {
                continue;
            };
            if tag == "S" || tag == "s" {
                skipped.push(path.to_owned());
            }
            if tag.chars().all(|c| c.is_ascii_lowercase()) {
                assumed.push(path.to_owned());
            }
        }
        Some((assumed, skipped))
    }

    /// The repository's own ignore rules (`.git/info/exclude`, then the
    /// file `core.excludesFile` names, or git's default one) stored as a
    /// blob: its id, or `None` when git did not answer.
    fn exclude_rules(&self) -> Option<String> {
        let mut rules = Vec::new();
        let info = self.plain(&["rev-parse", "--git-path", "info/exclude"])?;
        let info = self.root.join(String::from_utf8_lossy(&info).trim_end());
        let user = self
            .plain(&["config", "--path", "--get", "core.excludesFile"])
            .map(|out| PathBuf::from(String::from_utf8_lossy(&out).trim_end()))
            .or_else(default_excludes_file);
        for file in std::iter::once(info).chain(user) {
            if let Ok(bytes) = safe_fs::read_capped(&file, MAX_RULES_BYTES) {
                rules.extend_from_slice(&bytes);
                rules.push(b'\n');
            }
        }
        let mut store = git_runner::command(&self.root, &self.overrides).ok()?;
        store.args(["hash-object", "-w", "--stdin"]);
        let id = git_runner::run_with_input(store, &rules, self.deadline, MAX_LISTING_BYTES)?;
        let id = String::from_utf8_lossy(&id).trim().to_owned();
        is_object_id(&id).then_some(id)
    }

    /// Stages the untracked files the ignore rules `rules` (a blob from
    /// [`Self::exclude_rules`]) and the work tree's `.gitignore` files do
    /// not hide, whatever the repository's own rules say now: whether there
    /// were any.
    fn add_hidden(&self, rules: &str) -> Option<bool> {
        if !is_object_id(rules) {
            return None;
        }
        let text = self.run(&["cat-file", "blob", rules])?;
        // A kept index has no folder of its own: one for this file alone.
        let own = match &self.folder {
            Some(_) => None,
            None => Some(
                tempfile::Builder::new()
                    .prefix("ralph-rules-")
                    .tempdir()
                    .ok()?,
            ),
        };
        let folder = self.folder.as_ref().or(own.as_ref())?;
        let file = folder.path().join("armed-excludes");
        safe_fs::create_new(&file, &text).ok()?;
        let from = format!("--exclude-from={}", file.display());
        let args = [
            "ls-files",
            "-o",
            "-z",
            "--exclude-per-directory=.gitignore",
            &from,
            "--",
            ".",
        ];
        // A folder (a nested repository) is listed as such: not a file to stage.
        let hidden: Vec<String> = self
            .listing(&args)?
            .into_iter()
            .filter(|p| !p.ends_with('/'))
            .collect();
        if hidden.is_empty() {
            return Some(false);
        }
        let mut add = self.git().ok()?;
        add.args(["update-index", "--add", "-z", "--stdin"]);
        let list: Vec<u8> = hidden
            .iter()
            .flat_map(|p| p.bytes().chain(std::iter::once(0)))
            .collect();
        git_runner::run_with_input(add, &list, self.deadline, MAX_LISTING_BYTES).map(|_| true)
    }

    /// The paths (relative to the root, [`BOOKKEEPING`] left out) a diff
    /// command names.
    fn names(&self, diff: &[&str]) -> Option<Vec<String>> {
        let mut args = diff.to_vec();
        args.extend(["--name-only", "-z", "--no-renames", "--relative", "--", "."]);
        args.extend(BOOKKEEPING);
        self.listing(&args)
    }

    pub(crate) fn listing(&self, args: &[&str]) -> Option<Vec<String>> {
        let out = self.run(args)?;
        Some(
            String::from_utf8_lossy(&out)
                .split('\0')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    fn run(&self, args: &[&str]) -> Option<Vec<u8>> {
        let mut command = self.git().ok()?;
        command.args(args);
        git_runner::run_until(command, self.deadline, &[0], MAX_LISTING_BYTES)
    }

    /// git without the private index (it reads nothing of an index).
    fn plain(&self, args: &[&str]) -> Option<Vec<u8>> {
        let mut command = git_runner::command(&self.root, &self.overrides).ok()?;
        command.args(args);
        git_runner::run_until(command, self.deadline, &[0], MAX_LISTING_BYTES)
    }
}

#[cfg(unix)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::process::Stdio;

    /// `git ARGS` in `dir` (a test's repository), its stdout.
    pub(crate) fn git_in(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn repo() -> tempfile::TempDir {
        repo_ignoring("target/\n")
    }

    /// A committed repository (`tests/t.sh`, `lib.txt`) whose `.gitignore`
    /// says `ignored`.
    pub(crate) fn repo_ignoring(ignored: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git_in(root, &["init", "-q"]);
        std::fs::create_dir_all(root.join("tests")).unwrap();
        std::fs::write(root.join("tests/t.sh"), "test 1 = 1\n").unwrap();
        std::fs::write(root.join("lib.txt"), "one\n").unwrap();
        std::fs::write(root.join(".gitignore"), ignored).unwrap();
        git_in(root, &["add", "-A"]);
        git_in(root, &["commit", "-qm", "start"]);
        dir
    }

    /// HEAD, the index file's bytes and the stash list: what the user sees.
    fn user_state(root: &Path) -> (String, Vec<u8>, String) {
        (
            git_in(root, &["rev-parse", "HEAD"]),
            std::fs::read(root.join(".git/index")).unwrap(),
            git_in(root, &["stash", "list"]),
        )
    }

    #[test]
    fn a_snapshot_sees_untracked_files_not_ignored_ones_and_moves_nothing_of_the_users() {
        let dir = repo();
        let root = dir.path();
        std::fs::write(root.join("new.txt"), "x").unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::fs::write(root.join("target/out"), "x").unwrap();
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::fs::write(root.join(".claude/ralph-loop.local.md"), "x").unwrap();
        let before = user_state(root);
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        assert_eq!(before, user_state(root), "the user's git state moved");
        assert!(is_object_id(&snap.tree));
        assert_eq!(snap.dirty, ["new.txt"]);
        let listed = git_in(root, &["ls-tree", "-r", "--name-only", &snap.tree]);
        assert!(listed.contains("new.txt") && listed.contains("tests/t.sh"));
        assert!(!listed.contains("target/"), "an ignored file was recorded");
        assert_eq!(
            changed_since(root, &snap.tree, None, TREE_TIME_LIMIT).unwrap(),
            [""; 0]
        );
    }

    #[test]
    fn a_change_is_seen_even_when_the_index_is_told_to_look_away() {
        let dir = repo();
        let root = dir.path();
        // An ignored `.claude/` (a common .gitignore line) is no obstacle.
        std::fs::write(root.join(".git/info/exclude"), ".claude/\n").unwrap();
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::fs::write(root.join(".claude/ralph-loop.local.md"), "x").unwrap();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        git_in(root, &["update-index", "--assume-unchanged", "tests/t.sh"]);
        git_in(root, &["update-index", "--skip-worktree", "lib.txt"]);
        // Same size, same modification time: only the content and ctime differ.
        let stamp = std::fs::metadata(root.join("tests/t.sh"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(root.join("tests/t.sh"), "true   1 1\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(root.join("tests/t.sh"))
            .unwrap()
            .set_modified(stamp)
            .unwrap();
        std::fs::write(root.join("lib.txt"), "two\n").unwrap();
        std::fs::remove_file(root.join(".gitignore")).unwrap();
        std::fs::write(root.join("added"), "").unwrap();
        let before = user_state(root);
        let changed = changed_since(root, &snap.tree, None, TREE_TIME_LIMIT).unwrap();
        assert_eq!(before, user_state(root));
        assert_eq!(changed, [".gitignore", "added", "lib.txt", "tests/t.sh"]);
    }

    #[test]
    fn an_index_entry_forged_to_name_the_old_bytes_with_the_new_stat_data_is_still_a_change() {
        let dir = repo();
        let root = dir.path();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        let old = git_in(root, &["rev-parse", ":lib.txt"]);
        // New bytes of the same size, dated in the past, so that the entry
        // git writes for them is settled in any index written since.
        std::fs::write(root.join("lib.txt"), "two\n").unwrap();
        let past = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        set_modified(&root.join("lib.txt"), past);
        // No checksum to forge (`index.skipHash`): git reads such an index.
        git_in(root, &["-c", "index.skipHash=true", "add", "lib.txt"]);
        let new = git_in(root, &["rev-parse", ":lib.txt"]);
        // The forgery: the entry names the old object again, with the new
        // file's stat data, and the index is dated ahead.
        let index_path = root.join(".git/index");
        let index = std::fs::read(&index_path).unwrap();
        let (old, new) = (raw_id(old.trim()), raw_id(new.trim()));
        let at = index.windows(new.len()).position(|w| w == new).unwrap();
        let mut forged = index.clone();
        forged[at..at + old.len()].copy_from_slice(&old);
        std::fs::write(&index_path, forged).unwrap();
        let ahead = std::time::SystemTime::now() + Duration::from_secs(3600);
        set_modified(&index_path, ahead);
        assert_eq!(
            git_in(root, &["status", "--porcelain"]),
            "",
            "the forged entry fools git itself"
        );
        let changed = changed_since(root, &snap.tree, None, TREE_TIME_LIMIT).unwrap();
        assert_eq!(changed, ["lib.txt"]);
    }

    fn set_modified(path: &Path, when: std::time::SystemTime) {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }

    fn raw_id(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn a_file_hidden_by_an_exclude_rule_added_since_arming_is_still_a_change() {
        let dir = repo();
        let root = dir.path();
        std::fs::write(root.join(".git/info/exclude"), "*.log\n").unwrap();
        std::fs::write(root.join("old.log"), "ignored at arming").unwrap();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        let rules = snap.excludes.clone().unwrap();
        std::fs::write(root.join("tests/conftest.sh"), "exit 0\n").unwrap();
        std::fs::write(root.join("new.log"), "still ignored").unwrap();
        std::fs::write(root.join(".git/info/exclude"), "*.log\nconftest.sh\n").unwrap();
        let unseen = changed_since(root, &snap.tree, None, TREE_TIME_LIMIT).unwrap();
        assert!(unseen.is_empty(), "today's rules hide it: {unseen:?}");
        let seen = changed_since(root, &snap.tree, Some(&rules), TREE_TIME_LIMIT).unwrap();
        assert_eq!(seen, ["tests/conftest.sh"]);
    }

    /// The folders of an index's cache of trees (its `TREE` extension), each
    /// with whether git may still trust it (a count of entries, not -1).
    fn cached_trees(index: &[u8]) -> Vec<(String, bool)> {
        let at = index.windows(4).rposition(|w| w == b"TREE").unwrap();
        let len = u32::from_be_bytes(index[at + 4..at + 8].try_into().unwrap());
        let data = &index[at + 8..at + 8 + len as usize];
        let (mut p, mut out) = (0, Vec::new());
        while p < data.len() {
            let nul = p + data[p..].iter().position(|b| *b == 0).unwrap();
            let path = String::from_utf8_lossy(&data[p..nul]).into_owned();
            let nl = nul + data[nul..].iter().position(|b| *b == b'\n').unwrap();
            let counts = std::str::from_utf8(&data[nul + 1..nl]).unwrap();
            let valid = !counts.starts_with('-');
            p = nl + 1 + if valid { 20 } else { 0 };
            out.push((path, valid));
        }
        out
    }

    #[test]
    fn a_kept_index_seeded_after_changes_stages_them_and_keeps_the_cache_of_its_other_folders() {
        let dir = repo();
        let root = dir.path();
        for folder in ["one", "two"] {
            std::fs::create_dir_all(root.join(folder)).unwrap();
            std::fs::write(root.join(folder).join("a"), "armed\n").unwrap();
        }
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        // Changed before the first stop, which seeds the index.
        std::fs::write(root.join("one/a"), "changed\n").unwrap();
        std::fs::write(root.join("one/new"), "new\n").unwrap();
        std::fs::remove_file(root.join("tests/t.sh")).unwrap();
        let keep = tempfile::tempdir().unwrap();
        let index = keep.path().join("compared");
        let deadline = Instant::now() + TREE_TIME_LIMIT;
        let compared = compare_kept(root, &snap.tree, None, &index, deadline, Vec::new()).unwrap();
        assert_eq!(compared.changed, ["one/a", "one/new", "tests/t.sh"]);
        // The armed files were listed from the seed, in path order: no `git ls-tree`.
        let listing = std::fs::read(keep.path().join("armed-entries")).unwrap();
        assert!(listing.starts_with(format!("{ARMED_ENTRIES} {}\n", snap.tree).as_bytes()));
        let armed = decode_entries(&listing[ARMED_ENTRIES.len() + 42..]).unwrap();
        let paths: Vec<&[u8]> = armed.iter().map(|e| e.0).collect();
        assert_eq!(
            paths,
            [
                &b".gitignore"[..],
                b"lib.txt",
                b"one/a",
                b"tests/t.sh",
                b"two/a"
            ]
        );
        // A listing out of path order (as no ralph writes it) is sorted first.
        let mut reversed = armed.clone();
        reversed.reverse();
        let mut bytes = format!("{ARMED_ENTRIES} {}\n", snap.tree).into_bytes();
        encode_entries(&reversed, &mut bytes);
        std::fs::write(keep.path().join("armed-entries"), bytes).unwrap();
        let again = compare_kept(root, &snap.tree, None, &index, deadline, Vec::new()).unwrap();
        assert_eq!(again.changed, compared.changed);
        // The seed's cache of trees still holds every folder nothing changed
        // in (so git's status skips them when it compares HEAD with the
        // index); `git add -A` of the whole tree would have dropped it all.
        let trees = cached_trees(&std::fs::read(&index).unwrap());
        let valid = |name: &str| trees.iter().find(|(p, _)| p == name).unwrap().1;
        assert!(valid("two"), "{trees:?}");
        assert!(!valid("one") && !valid("tests") && !valid(""), "{trees:?}");
        // The index holds what `git add -A` stages.
        let added = keep.path().join("added");
        let kept = kept_index(root, deadline, Vec::new(), added.clone(), false).unwrap();
        kept.add_all(&COMPARED, &[]).unwrap();
        let files = |index: &Path| {
            let bytes = std::fs::read(index).unwrap();
            let entries = crate::index_tree::entries(&bytes).unwrap();
            let key = |e: &crate::index_tree::Entry<'_>| (e.path.to_vec(), e.mode, e.id);
            entries.iter().map(key).collect::<Vec<_>>()
        };
        assert_eq!(files(&index), files(&added));
    }

    #[test]
    fn a_diff_of_listings_in_path_order_names_what_differs_and_refuses_what_is_out_of_order() {
        let entry = |path: &'static str, id: u8| Some((path.as_bytes(), 0o100_644, [id; 20]));
        let armed = vec![entry("a", 1), entry("b", 1), entry("c", 1)];
        let now = vec![
            entry(".claude/x-loop.local.md", 1),
            entry("a", 1),
            entry("b", 2),
            entry("d", 1),
        ];
        let diff = sorted_diff(armed.clone().into_iter(), now.into_iter()).unwrap();
        assert_eq!(diff, ["b", "c", "d"]);
        let shuffled = vec![entry("b", 1), entry("a", 1)];
        assert!(sorted_diff(shuffled.into_iter(), armed.clone().into_iter()).is_none());
        let twice = vec![entry("a", 1), entry("a", 1)];
        assert!(sorted_diff(armed.clone().into_iter(), twice.into_iter()).is_none());
        assert!(sorted_diff(vec![None].into_iter(), armed.into_iter()).is_none());
    }

    /// [`changed_since_kept`] with its index in `keep` (a private folder).
    fn kept_changes(root: &Path, keep: &Path, snap: &TreeSnapshot) -> Option<Vec<String>> {
        let excludes = snap.excludes.as_deref();
        changed_since_kept(
            root,
            &snap.tree,
            excludes,
            &keep.join("index"),
            TREE_TIME_LIMIT,
        )
    }

    /// Sets the modification time of `path` (a file or a folder) to `time`.
    fn put_back(path: &Path, time: std::time::SystemTime) {
        std::fs::File::open(path)
            .unwrap()
            .set_modified(time)
            .unwrap();
    }

    /// Rewrites `lib.txt` to the same size and adds `tests/new.sh`, then
    /// puts back the modification times `lib` (of `lib.txt`) and `tests`
    /// (of its folder).
    fn edit_and_put_back(root: &Path, lib: std::time::SystemTime, tests: std::time::SystemTime) {
        std::fs::write(root.join("lib.txt"), "two\n").unwrap();
        put_back(&root.join("lib.txt"), lib);
        std::fs::write(root.join("tests/new.sh"), "true\n").unwrap();
        put_back(&root.join("tests"), tests);
    }

    #[test]
    fn a_kept_comparison_sees_changes_whose_times_were_put_back() {
        // The kept index's stat data and its cache of untracked folders
        // (`status_staging`) are trusted only while every stat field
        // matches: a file rewritten to the same size and a file added to a
        // folder, each with the old modification time put back, are still
        // changes (their ctime moved, or they are in the second the index
        // was written), and so is a file taken away the same way.
        let dir = repo();
        let root = dir.path();
        let keep = tempfile::tempdir().unwrap();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        assert_eq!(kept_changes(root, keep.path(), &snap).unwrap(), [""; 0]);
        let modified = |p: &str| std::fs::metadata(root.join(p)).unwrap().modified().unwrap();
        let (lib, tests) = (modified("lib.txt"), modified("tests"));
        edit_and_put_back(root, lib, tests);
        let seen = kept_changes(root, keep.path(), &snap).unwrap();
        assert_eq!(seen, ["lib.txt", "tests/new.sh"]);
        assert_eq!(kept_changes(root, keep.path(), &snap).unwrap(), seen);
        std::fs::remove_file(root.join("tests/new.sh")).unwrap();
        put_back(&root.join("tests"), tests);
        std::fs::remove_file(root.join("tests/t.sh")).unwrap();
        put_back(&root.join("tests"), tests);
        let seen = kept_changes(root, keep.path(), &snap).unwrap();
        assert_eq!(seen, ["lib.txt", "tests/t.sh"]);
    }

    #[test]
    fn a_change_made_in_the_second_the_kept_index_recorded_it_is_still_seen() {
        // git compares stat data to the second and takes a record as racy
        // only by its modification time: a file rewritten to the same size,
        // or a folder given a file, in the second a stop recorded them, with
        // the old modification time put back, would match their records.
        // `same_second` smudges what changed in that second.
        let dir = repo();
        let root = dir.path();
        let keep = tempfile::tempdir().unwrap();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        let old = std::time::UNIX_EPOCH + Duration::from_secs(1_577_836_800);
        for path in ["lib.txt", "tests/t.sh", "tests"] {
            put_back(&root.join(path), old);
        }
        assert_eq!(kept_changes(root, keep.path(), &snap).unwrap(), [""; 0]);
        // Their change times are now; recorded now; changed again now.
        for path in ["lib.txt", "tests"] {
            put_back(&root.join(path), old);
        }
        assert_eq!(kept_changes(root, keep.path(), &snap).unwrap(), [""; 0]);
        edit_and_put_back(root, old, old);
        let seen = kept_changes(root, keep.path(), &snap).unwrap();
        assert_eq!(seen, ["lib.txt", "tests/new.sh"]);
    }

    #[test]
    fn a_kept_comparison_sees_what_a_fresh_one_sees_whatever_the_users_index_says() {
        let dir = repo();
        let root = dir.path();
        let keep = tempfile::tempdir().unwrap();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        git_in(root, &["update-index", "--assume-unchanged", "tests/t.sh"]);
        assert_eq!(kept_changes(root, keep.path(), &snap).unwrap(), [""; 0]);
        assert!(keep.path().join("index").exists(), "the index is kept");
        git_in(root, &["update-index", "--skip-worktree", "lib.txt"]);
        let stamp = std::fs::metadata(root.join("tests/t.sh"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(root.join("tests/t.sh"), "true   1 1\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(root.join("tests/t.sh"))
            .unwrap()
            .set_modified(stamp)
            .unwrap();
        std::fs::write(root.join("lib.txt"), "two\n").unwrap();
        std::fs::write(root.join("added"), "").unwrap();
        std::fs::create_dir_all(root.join(".claude/commands")).unwrap();
        std::fs::write(root.join(".claude/commands/x.md"), "x").unwrap();
        std::fs::write(root.join(".claude/ralph-loop.local.md"), "x").unwrap();
        let before = user_state(root);
        let changed = kept_changes(root, keep.path(), &snap).unwrap();
        assert_eq!(before, user_state(root), "the user's git state moved");
        assert_eq!(
            changed,
            [".claude/commands/x.md", "added", "lib.txt", "tests/t.sh"]
        );
        // Put back as armed: no change any more.
        std::fs::write(root.join("tests/t.sh"), "test 1 = 1\n").unwrap();
        std::fs::write(root.join("lib.txt"), "one\n").unwrap();
        std::fs::remove_file(root.join("added")).unwrap();
        std::fs::remove_dir_all(root.join(".claude/commands")).unwrap();
        assert_eq!(kept_changes(root, keep.path(), &snap).unwrap(), [""; 0]);
    }

    #[test]
    fn a_kept_comparison_is_not_fooled_by_stat_data_forged_in_the_users_index() {
        use sha1::Digest as _;
        let dir = repo();
        let root = dir.path();
        let keep = tempfile::tempdir().unwrap();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        let armed = git_in(root, &["rev-parse", "HEAD:tests/t.sh"]);
        // Same size, an old modification time; the user's index then holds
        // the file's true stat data (its ctime too) with the armed blob's id.
        let file = root.join("tests/t.sh");
        std::fs::write(&file, "exit 0 # ok\n").unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(old)
            .unwrap();
        git_in(root, &["add", "tests/t.sh"]);
        let new = git_in(root, &["rev-parse", ":tests/t.sh"]);
        let hex = |id: &str| {
            (0..20)
                .map(|i| u8::from_str_radix(&id.trim()[2 * i..2 * i + 2], 16).unwrap())
                .collect::<Vec<u8>>()
        };
        let mut index = std::fs::read(root.join(".git/index")).unwrap();
        let at = index.windows(20).position(|w| w == hex(&new)).unwrap();
        index[at..at + 20].copy_from_slice(&hex(&armed));
        let body = index.len() - 20;
        let sum = sha1::Sha1::digest(&index[..body]);
        index[body..].copy_from_slice(&sum);
        std::fs::write(root.join(".git/index"), &index).unwrap();
        assert_eq!(git_in(root, &["rev-parse", ":tests/t.sh"]), armed);
        let changed = kept_changes(root, keep.path(), &snap).unwrap();
        assert_eq!(changed, ["tests/t.sh"]);
    }

    #[test]
    fn ralphs_diff_against_the_armed_tree_is_git_diff_index_s() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = repo();
        let root = dir.path();
        let write = |path: &str, text: &str| {
            let file = root.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        };
        let bookkeeping_and_more = [
            ".claude/commands/x.md",
            ".claude/ralph/state",
            ".claude/a-loop.local.md",
            ".claude/.tmp123",
            ".claude/.d/y",
            ".claude/settings.local.json",
            ".claude/sub/b-loop.local.md",
            ".claude/ralphs",
            "a-b",
            "a/b",
            "a.c",
        ];
        for path in bookkeeping_and_more {
            write(path, "armed");
        }
        std::os::unix::fs::symlink("lib.txt", root.join("link")).unwrap();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        // An index staged at arming (seeded, then staged by status),
        // staged again below after the changes (a status and an update).
        let keep = tempfile::tempdir().unwrap();
        let deadline = Instant::now() + TREE_TIME_LIMIT;
        let by_status = keep.path().join("by-status");
        let status_kept = kept_index(root, deadline, Vec::new(), by_status.clone(), false).unwrap();
        let listing = crate::status_staging::Listing {
            seed: Some(&snap.tree),
            after_seed: None,
            excludes_file: None,
            wanted: |_| true,
        };
        let git = || status_kept.git();
        crate::status_staging::stage(&status_kept.as_kept(&git), &listing).unwrap();
        for path in bookkeeping_and_more {
            write(path, "changed");
            write(&format!("{path}-new"), "new");
        }
        write(".claude/.e/z", "new");
        std::fs::set_permissions(root.join("lib.txt"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::remove_file(root.join("link")).unwrap();
        std::os::unix::fs::symlink("tests/t.sh", root.join("link")).unwrap();
        std::fs::remove_file(root.join("tests/t.sh")).unwrap();
        // A file that became a folder, and a folder that became a file.
        std::fs::remove_file(root.join("a.c")).unwrap();
        write("a.c/inner", "new");
        std::fs::remove_dir_all(root.join("a")).unwrap();
        write("a", "a file now");
        let index = keep.path().join("index");
        let kept = kept_index(root, deadline, Vec::new(), index.clone(), false).unwrap();
        kept.add_all(&COMPARED, &[]).unwrap();
        let read = |index: &Path| {
            let bytes = std::fs::read(index).unwrap();
            let entries = crate::index_tree::entries(&bytes).unwrap();
            crate::index_tree::owned(entries)
        };
        let added = read(&index);
        let ours = armed_diff(root, &snap.tree, &kept, &added).unwrap();
        let gits = kept.names(&["diff-index", "--cached", &snap.tree]).unwrap();
        assert_eq!(ours, gits);
        assert!(ours.len() > 10, "{ours:?}");
        // Kept for the next stop: the same answer without listing again.
        assert!(keep.path().join("armed-entries").exists());
        assert_eq!(armed_diff(root, &snap.tree, &kept, &added).unwrap(), gits);
        // A status of the index staged at arming, and an update of what it
        // names, stage what `git add -A` staged.
        let staged = crate::status_staging::stage(&status_kept.as_kept(&git), &listing).unwrap();
        assert!(staged.paths.len() > 10, "{:?}", staged.paths);
        let key = |e: &crate::index_tree::Entry<'_>| (e.path.to_vec(), e.mode, e.id);
        let by_status: Vec<_> = read(&by_status).iter().map(key).collect();
        assert_eq!(by_status, added.iter().map(key).collect::<Vec<_>>());
    }

    /// git's environment for a kept index whose new objects go to a folder
    /// of its own (`objects` in `keep`, made here), as `one_staging`'s do,
    /// the repository's read as alternates.
    fn objects_of_their_own(root: &Path, keep: &Path) -> Vec<(&'static str, PathBuf)> {
        let objects = keep.join("objects");
        std::fs::create_dir(&objects).unwrap();
        vec![
            ("GIT_OBJECT_DIRECTORY", objects),
            (
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                root.join(".git/objects"),
            ),
        ]
    }

    #[test]
    fn a_stop_that_only_edited_files_stages_them_with_the_status_alone() {
        let dir = repo();
        let root = dir.path();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        let keep = tempfile::tempdir().unwrap();
        let env = objects_of_their_own(root, keep.path());
        let objects = keep.path().join("objects");
        let deadline = Instant::now() + TREE_TIME_LIMIT;
        let index = keep.path().join("index");
        let kept = kept_index(root, deadline, env, index.clone(), false).unwrap();
        let listing = crate::status_staging::Listing {
            seed: Some(&snap.tree),
            after_seed: None,
            excludes_file: None,
            wanted: |_| true,
        };
        let calls = std::cell::Cell::new(0);
        let git = || {
            calls.set(calls.get() + 1);
            kept.git()
        };
        crate::status_staging::stage(&kept.as_kept(&git), &listing).unwrap();
        let last = std::cell::RefCell::new(None);
        let stop = |edit: &dyn Fn()| {
            edit();
            calls.set(0);
            let staged = crate::status_staging::stage(&kept.as_kept(&git), &listing).unwrap();
            let paths: Vec<String> = staged
                .paths
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            last.replace(Some(staged));
            (paths, calls.get())
        };
        // Edited files (longer: the status sees them whatever the clock):
        // the status alone, the entries as git would stage them.
        let edited = stop(&|| {
            std::fs::write(root.join("lib.txt"), "one, and more\n").unwrap();
            std::fs::write(root.join("tests/t.sh"), "test 2 = 2 # more\n").unwrap();
        });
        // (Where the user's own configuration might convert line ends, git's
        // update still stages them: one more process.)
        let here = cfg!(target_os = "linux") && crate::git_config::silent_on(root, "autocrlf");
        let processes = if here { 1 } else { 2 };
        assert_eq!(
            edited,
            (
                vec!["lib.txt".to_owned(), "tests/t.sh".to_owned()],
                processes
            )
        );
        // Small files beside the index: kept aside, not written; the tree
        // with them applied is the one git writes once they are settled.
        let staged = last.take().unwrap();
        let aside = staged.aside;
        assert_eq!(aside.len(), if here { 2 } else { 0 });
        let bytes = std::fs::read(&index).unwrap();
        let ours = crate::index_tree::tree_of(&bytes, &aside, &objects);
        let diff = kept.run(&["diff-files", "--name-only"]).unwrap();
        let unstaged = if here { "lib.txt\ntests/t.sh\n" } else { "" };
        assert_eq!(String::from_utf8_lossy(&diff), unstaged);
        crate::status_staging::settle(&kept.as_kept(&git), &aside).unwrap();
        let diff = kept.run(&["diff-files", "--name-only"]).unwrap();
        assert!(diff.is_empty(), "{}", String::from_utf8_lossy(&diff));
        let tree = String::from_utf8(kept.run(&["write-tree"]).unwrap()).unwrap();
        if here {
            assert_eq!(ours.unwrap(), tree.trim());
        }
        let shown = kept
            .run(&["show", &format!("{}:lib.txt", tree.trim())])
            .unwrap();
        assert_eq!(shown, b"one, and more\n");
        // A new file: git's update, as before.
        let added = stop(&|| std::fs::write(root.join("new.txt"), "new\n").unwrap());
        assert_eq!(added, (vec!["new.txt".to_owned()], 2));
        assert!(kept.run(&["diff-files", "--name-only"]).unwrap().is_empty());
    }

    #[test]
    fn a_comparison_of_edits_kept_aside_names_what_git_diff_index_names() {
        let dir = repo();
        let root = dir.path();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        let keep = tempfile::tempdir().unwrap();
        let private = objects_of_their_own(root, keep.path());
        let env = || private.clone();
        let index = keep.path().join("compared");
        let deadline = Instant::now() + TREE_TIME_LIMIT;
        let compare = || compare_kept(root, &snap.tree, None, &index, deadline, env()).unwrap();
        // What `git add -A` and `git diff-index` name, in an index of their own.
        let gits = || {
            let added = keep.path().join("added");
            let _ = std::fs::remove_file(&added);
            let kept = kept_index(root, deadline, env(), added, false).unwrap();
            kept.add_all(&COMPARED, &[]).unwrap();
            kept.names(&["diff-index", "--cached", &snap.tree]).unwrap()
        };
        assert!(compare().changed.is_empty());
        let listing = keep.path().join("armed-entries");
        let here = cfg!(target_os = "linux") && crate::git_config::silent_on(root, "autocrlf");
        let edit = |path: &str, text: &str| {
            std::fs::write(root.join(path), text).unwrap();
            let _ = std::fs::remove_file(&listing);
            let compared = compare();
            assert_eq!(compared.changed, gits(), "after {path}");
            // The index still holds the armed tree, the edits beside it: no
            // listing of the armed tree was needed (nor made) to compare.
            assert_eq!(listing.exists(), !here, "after {path}");
            compared.changed
        };
        assert_eq!(edit("lib.txt", "one, and more\n"), ["lib.txt"]);
        assert_eq!(
            edit("tests/t.sh", "test 2 = 2 # more\n"),
            ["lib.txt", "tests/t.sh"]
        );
        // Back as armed (other bytes on disk than at the last stop): not changed.
        assert_eq!(edit("lib.txt", "one\n"), ["tests/t.sh"]);
    }

    #[test]
    fn a_kept_comparison_sees_a_file_hidden_by_a_rule_added_since_arming() {
        let dir = repo();
        let root = dir.path();
        let keep = tempfile::tempdir().unwrap();
        std::fs::write(root.join(".git/info/exclude"), "*.log\n").unwrap();
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        let armed = snap.excludes.clone().unwrap();
        assert_eq!(kept_changes(root, keep.path(), &snap).unwrap(), [""; 0]);
        std::fs::write(root.join("tests/conftest.sh"), "exit 0\n").unwrap();
        std::fs::write(root.join("new.log"), "still ignored").unwrap();
        std::fs::write(root.join(".git/info/exclude"), "*.log\nconftest.sh\n").unwrap();
        assert!(!rules_as_armed(root, &armed), "the rules changed");
        let seen = kept_changes(root, keep.path(), &snap).unwrap();
        assert_eq!(seen, ["tests/conftest.sh"]);
    }

    #[test]
    fn rules_as_armed_only_when_they_hash_to_the_armed_blob_and_negate_nothing() {
        let dir = repo();
        let root = dir.path();
        std::fs::write(root.join(".git/info/exclude"), "*.log\n").unwrap();
        let armed = snapshot(root, TREE_TIME_LIMIT).unwrap().excludes.unwrap();
        // The test's own user configuration may name an excludes file: then never.
        let knowable = crate::git_config::excludes_file_unset(root);
        assert_eq!(rules_as_armed(root, &armed), knowable);
        std::fs::write(root.join(".git/info/exclude"), "*.log\n*.txt\n").unwrap();
        assert!(!rules_as_armed(root, &armed));
        std::fs::write(root.join(".git/info/exclude"), "!keep.log\n").unwrap();
        let negated = snapshot(root, TREE_TIME_LIMIT).unwrap().excludes.unwrap();
        assert!(!rules_as_armed(root, &negated));
        std::fs::write(root.join(".git/info/exclude"), "*.log\n").unwrap();
        std::fs::write(root.join(".git/config"), "[include]\n\tpath = elsewhere\n").unwrap();
        assert!(!rules_as_armed(root, &armed), "an include may name one");
    }

    #[test]
    fn a_kept_comparison_that_fails_gives_no_answer_and_starts_afresh() {
        let dir = repo();
        let root = dir.path();
        let keep = tempfile::tempdir().unwrap();
        let index = keep.path().join("index");
        let snap = snapshot(root, TREE_TIME_LIMIT).unwrap();
        assert!(kept_changes(root, keep.path(), &snap).is_some());
        let missing = "0123456789012345678901234567890123456789";
        assert_eq!(
            changed_since_kept(root, missing, None, &index, TREE_TIME_LIMIT),
            None
        );
        assert!(index.exists(), "the index itself is sound");
        // A lock a killed git left behind costs one answer, not every one.
        assert!(kept_changes(root, keep.path(), &snap).is_some());
        std::fs::write(keep.path().join("index.lock"), "").unwrap();
        assert_eq!(kept_changes(root, keep.path(), &snap), None);
        assert!(!keep.path().join("index.lock").exists());
        assert_eq!(kept_changes(root, keep.path(), &snap).unwrap(), [""; 0]);
    }

    #[test]
    fn no_repository_or_an_unknown_tree_gives_no_answer() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(snapshot(dir.path(), TREE_TIME_LIMIT), None);
        let dir = repo();
        let missing = "0123456789012345678901234567890123456789";
        assert_eq!(
            changed_since(dir.path(), missing, None, TREE_TIME_LIMIT),
            None
        );
        assert_eq!(
            changed_since(dir.path(), "HEAD", None, TREE_TIME_LIMIT),
            None
        );
    }

    #[test]
    fn a_project_below_the_top_of_its_repository_sees_its_own_paths() {
        let dir = repo();
        let sub = dir.path().join("tests");
        let snap = snapshot(&sub, TREE_TIME_LIMIT).unwrap();
        std::fs::write(sub.join("t.sh"), "changed\n").unwrap();
        std::fs::write(dir.path().join("lib.txt"), "outside\n").unwrap();
        assert_eq!(
            changed_since(&sub, &snap.tree, None, TREE_TIME_LIMIT).unwrap(),
            ["t.sh"]
        );
    }
}
