//! A kept index brought up to the work tree with one `git status` and, only
//! when something changed, one `git update-index` of just those paths: what
//! `git add -A` does, for less (issue 47's hot path). When the only changes
//! are edits of tracked files, and the index's new objects go to a folder of
//! ralph's, ralph stages them itself (`own_staging`): the status alone.
//!
//! Why it is cheaper: `git add -A` lists every folder of the tree at every
//! stop (it cannot use git's untracked cache), and the index it starts from
//! has no cache of its trees, so nothing lets it skip a folder. `git status`
//! on the kept index uses the untracked cache the index keeps (a folder
//! whose stat data and ignore files did not change is not listed again),
//! and its comparison with HEAD skips every folder whose cached tree is
//! still valid: the index is seeded once per arming by `git read-tree` of
//! the armed tree, which records those trees, and staged by status from the
//! first stop on (a status's refresh keeps that cache, where a `git add -A`
//! would drop all of it), and an update invalidates only the folders above
//! what it changed. The stat of every tracked file, what `git status`
//! itself costs, stays.
//!
//! What it trusts is what `git add` trusted: the index is ralph's own (in
//! the per-user state folder), every stat field is checked (ctime
//! included), and a folder's cached listing is used only while its stat
//! data (ctime too, which nothing but the kernel sets) and its ignore files
//! are unchanged. git compares those to the second: what changed in the
//! second a record was made is smudged after the staging (`same_second`),
//! so git reads it again at the next one. The status writes the
//! stat data it refreshed back into the index (`GIT_OPTIONAL_LOCKS=1`, for
//! that index only), so a file is hashed again only after it changed.
//!
//! Only at the top of a repository of its own (where status names paths
//! from the root, as `git add -- .` staged them); elsewhere the caller
//! stages with `git add`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::git_runner;
use crate::safe_fs::{self, FsError};

/// The kept index a staging works on: its file, when every git process
/// must have answered, and git set up for it (hardened, `GIT_INDEX_FILE`
/// and where objects go: `tree_diff::PrivateIndex::git`).
pub(crate) struct Kept<'a> {
    /// The top of the repository (the work tree staged).
    pub root: &'a Path,
    pub index: &'a Path,
    pub deadline: Instant,
    pub git: &'a dyn Fn() -> std::io::Result<Command>,
    /// Where git writes the index's new objects, when not into the
    /// repository's own folder: then a stop that only edited files stages
    /// them itself (`own_staging`), with no `git update-index`.
    pub objects: Option<crate::own_staging::ObjectFolders>,
}

/// The most of one status listing read (paths, NUL-separated).
const MAX_LISTING_BYTES: u64 = 64 * 1024 * 1024;

/// Whether a kept index at `root` can be staged by status: `root` holds
/// its repository's folder.
pub(crate) fn applies(root: &Path) -> bool {
    safe_fs::kind_at(&root.join(".git")).is_some_and(|k| k.is_dir())
}

/// How [`stage`] reads the work tree.
pub(crate) struct Listing<'a> {
    /// The tree an index that does not exist yet is seeded from (`git
    /// read-tree`, which records the tree's entries and the cache of its
    /// trees), then staged by status like any other: the status's refresh
    /// hashes every file once and keeps that cache (a `git add -A` would
    /// invalidate every folder of it, and each later status would then
    /// compare all of HEAD with the index).
    pub seed: Option<&'a str>,
    /// Called with the index just seeded, before anything stages into it
    /// (it holds the seed's entries exactly).
    pub after_seed: Option<&'a dyn Fn(&Path)>,
    /// The ignore rules file the status reads for `core.excludesFile`.
    pub excludes_file: Option<&'a Path>,
    /// Whether a path the status names is staged (else its entry, or its
    /// absence, stays as the index has it).
    pub wanted: fn(&[u8]) -> bool,
}

/// What a staging did.
pub(crate) struct Staged {
    /// The paths it staged (changed, added or removed since the index last
    /// held them; none named when a seed that failed was replaced by a `git
    /// add -A`).
    pub paths: Vec<Vec<u8>>,
    /// The index as ralph left it, when it staged the files itself: a
    /// read of it saved while the file keeps that stamp.
    pub written: Option<crate::own_staging::Written>,
    /// The edits ralph staged beside that index rather than into it: what
    /// reads its entries applies them (`index_tree::apply_edits`), and
    /// anything that hands the index to git settles them first
    /// ([`settle`]).
    pub aside: Vec<crate::index_tree::Edit>,
}

/// Stages the work tree into `kept` as `git add -A -- .` would, but the
/// paths `listing` does not want: what it staged, or an error when git
/// failed or did not answer in time.
pub(crate) fn stage(kept: &Kept<'_>, listing: &Listing<'_>) -> Result<Staged, FsError> {
    let mut lock = kept.index.as_os_str().to_owned();
    lock.push(".lock");
    if safe_fs::kind_at(Path::new(&lock)).is_some() {
        // A lock a killed git left: the status would quietly not write, so
        // fail as `git add` would, and the caller starts afresh.
        return Err(error("stage the work tree", "the kept index is locked"));
    }
    if let Some(seed) = listing.seed
        && safe_fs::kind_at(kept.index).is_none()
        && !seed_or_add_all(kept, listing, seed)?
    {
        // The seed failed and `git add -A` staged the whole tree: its paths
        // are not listed (a seeded staging's caller reads the index).
        return Ok(Staged {
            paths: Vec::new(),
            written: None,
            aside: Vec::new(),
        });
    }
    let mut status = (kept.git)().map_err(|e| error("start git", e.to_string()))?;
    if let Some(file) = listing.excludes_file {
        let mut rule = std::ffi::OsString::from("core.excludesFile=");
        rule.push(file);
        status.arg("-c").arg(rule);
    }
    status.env("GIT_OPTIONAL_LOCKS", "1").args([
        "status",
        "--porcelain=v2",
        "-z",
        "--no-renames",
        "--ignore-submodules=dirty",
    ]);
    let listed = git_runner::run_until(status, kept.deadline, &[0], MAX_LISTING_BYTES)
        .ok_or_else(|| error("list what changed", "git failed or did not answer in time"))?;
    let mut listed = to_stage(&listed)
        .ok_or_else(|| error("list what changed", "git's status could not be read"))?;
    listed.retain(|change| (listing.wanted)(&change.path));
    let own = stage_edited(kept, &listed);
    let changed: Vec<Vec<u8>> = listed.into_iter().map(|change| change.path).collect();
    if let Some(own) = own {
        return Ok(Staged {
            paths: changed,
            written: Some(own.index),
            aside: own.aside,
        });
    }
    update(kept, changed.iter().map(Vec::as_slice))?;
    Ok(Staged {
        paths: changed,
        written: None,
        aside: Vec::new(),
    })
}

/// The edits a staging kept beside the index (`aside`) staged into it by
/// git, before git reads the index for anything: else it would see the
/// files as they were.
pub(crate) fn settle(kept: &Kept<'_>, aside: &[crate::index_tree::Edit]) -> Result<(), FsError> {
    update(kept, aside.iter().map(|edit| edit.path.as_slice()))
}

/// `git update-index` of `paths` into `kept` (added, removed or replaced
/// as the work tree has them); nothing for none.
fn update<'p>(kept: &Kept<'_>, paths: impl Iterator<Item = &'p [u8]>) -> Result<(), FsError> {
    let list: Vec<u8> = paths
        .flat_map(|p| p.iter().copied().chain(std::iter::once(0)))
        .collect();
    if list.is_empty() {
        return Ok(());
    }
    let mut update = (kept.git)().map_err(|e| error("start git", e.to_string()))?;
    update.args([
        "update-index",
        "--add",
        "--remove",
        "--replace",
        "-z",
        "--stdin",
    ]);
    git_runner::run_with_input(update, &list, kept.deadline, MAX_LISTING_BYTES)
        .map(|_| ())
        .ok_or_else(|| error("stage what changed", "git failed or did not answer in time"))
}

/// The first staging of an arming: the kept index seeded from `seed`
/// (`true`, and `listing`'s `after_seed` called), or, when that fails, the
/// whole tree staged into a new one by `git add -A` (`false`).
fn seed_or_add_all(kept: &Kept<'_>, listing: &Listing<'_>, seed: &str) -> Result<bool, FsError> {
    if seed_from(kept, seed).is_some() {
        if let Some(after_seed) = listing.after_seed {
            after_seed(kept.index);
        }
        return Ok(true);
    }
    // A seed that fails leaves no index.
    safe_fs::remove(kept.index);
    let mut add = (kept.git)().map_err(|e| error("start git", e.to_string()))?;
    add.args(["add", "-A", "--ignore-errors", "--", "."]);
    git_runner::run_until(add, kept.deadline, &[0], MAX_LISTING_BYTES).ok_or_else(|| {
        error(
            "stage the work tree",
            "git failed or did not answer in time",
        )
    })?;
    Ok(false)
}

/// `listed` staged by ralph itself (`own_staging`) when every one is an
/// edited file and the index's objects go to a folder of ralph's: the
/// index as left and the edits kept beside it, or `None` (git's update is
/// then the staging).
fn stage_edited(kept: &Kept<'_>, listed: &[Change]) -> Option<crate::own_staging::OwnStaged> {
    let objects = kept.objects.as_ref()?;
    let files: Option<Vec<crate::own_staging::Modified<'_>>> = listed
        .iter()
        .map(|change| {
            change.edited.map(|mode| crate::own_staging::Modified {
                path: &change.path,
                mode,
            })
        })
        .collect();
    crate::own_staging::stage(kept.root, kept.index, objects, &files?)
}

/// `git read-tree` of `tree` into the kept index (which it creates): its
/// entries and the cache of its trees, with no sparse-checkout marks.
fn seed_from(kept: &Kept<'_>, tree: &str) -> Option<()> {
    // An object id, never an option.
    if tree.is_empty() || !tree.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut read = (kept.git)().ok()?;
    read.args(["read-tree", "--no-sparse-checkout", tree]);
    git_runner::run_until(read, kept.deadline, &[0], MAX_LISTING_BYTES).map(|_| ())
}

/// One path a staging takes from the status.
struct Change {
    path: Vec<u8>,
    /// The file's mode in the work tree when it is a tracked file whose
    /// bytes (or only its executable bit) changed, and nothing else: a
    /// regular file before and after, no submodule.
    edited: Option<u32>,
}

/// The paths a `git status --porcelain=v2 -z` listing says differ between
/// the index and the work tree (changed, removed, of another type) or are
/// untracked and not ignored: what `git add -A` would stage. `None` for a
/// listing this does not read for certain (an unmerged entry, a line of
/// another shape).
fn to_stage(listed: &[u8]) -> Option<Vec<Change>> {
    let mut paths = Vec::new();
    let mut records = listed.split(|b| *b == 0).filter(|r| !r.is_empty());
    while let Some(record) = records.next() {
        match record.first()? {
            b'1' | b'2' => {
                // `1 XY sub mH mI mW hH hI path`; `2` adds a score before the
                // path and its old path as the next record.
                let fields = if record[0] == b'1' { 8 } else { 9 };
                let parts: Vec<&[u8]> = record.splitn(fields + 1, |b| *b == b' ').collect();
                let worktree = *parts.get(1)?.get(1)?;
                let path = *parts.get(fields)?;
                if record[0] == b'2' {
                    records.next()?;
                }
                let regular = |mode: &[u8]| matches!(mode, b"100644" | b"100755");
                let edited = (record[0] == b'1'
                    && worktree == b'M'
                    && parts[2].starts_with(b"N")
                    && regular(parts[4])
                    && regular(parts[5]))
                .then(|| {
                    if parts[5] == b"100755" {
                        0o100_755
                    } else {
                        0o100_644
                    }
                });
                if worktree != b'.' {
                    paths.push(Change {
                        path: path.to_vec(),
                        edited,
                    });
                }
            }
            b'?' => {
                let path = record.strip_prefix(b"? ")?;
                // A nested repository is listed as its folder.
                paths.push(Change {
                    path: path.strip_suffix(b"/").unwrap_or(path).to_vec(),
                    edited: None,
                });
            }
            b'#' | b'!' => {}
            _ => return None,
        }
    }
    Some(paths)
}

fn error(what: &'static str, detail: impl Into<String>) -> FsError {
    FsError::Git {
        what,
        detail: detail.into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_listing_names_what_add_would_stage() {
        let listed = b"1 .M N... 100644 100644 100644 aa bb src/a.rs\0\
            1 M. N... 100644 100644 100644 aa bb staged-only.rs\0\
            1 .D N... 100644 100644 000000 aa bb gone.rs\0\
            1 .T N... 100644 100644 120000 aa bb now a link\0\
            2 .M N... 100644 100644 100644 aa bb R100 new name\0old name\0\
            1 .M N... 100644 100644 100755 aa bb run.sh\0\
            1 .M N... 120000 120000 120000 aa bb a link\0\
            1 .M SC.. 160000 160000 160000 aa bb module\0\
            ? new file.txt\0\
            ? nested/\0\
            ! ignored\0";
        let listed: Vec<(String, Option<u32>)> = to_stage(listed)
            .unwrap()
            .iter()
            .map(|c| (String::from_utf8_lossy(&c.path).into_owned(), c.edited))
            .collect();
        let edited = |path: &str, mode| (path.to_owned(), Some(mode));
        let other = |path: &str| (path.to_owned(), None);
        assert_eq!(
            listed,
            [
                edited("src/a.rs", 0o100_644),
                other("gone.rs"),
                other("now a link"),
                other("new name"),
                edited("run.sh", 0o100_755),
                other("a link"),
                other("module"),
                other("new file.txt"),
                other("nested"),
            ]
        );
    }

    proptest::proptest! {
        #[test]
        fn any_listing_reads_without_a_panic(listed in proptest::collection::vec(0u8..=255, 0..512)) {
            let _ = to_stage(&listed);
        }
    }

    #[test]
    fn a_listing_it_cannot_read_for_certain_is_no_answer() {
        assert!(to_stage(b"u UU N... 100644 100644 100644 100644 a b c d\0").is_none());
        assert!(to_stage(b"1 .M\0").is_none());
        assert!(to_stage(b"2 .M N... 100644 100644 100644 aa bb R100 new\0").is_none());
        assert!(to_stage(b"x what\0").is_none());
        assert!(to_stage(b"").unwrap().is_empty());
    }
}
