//! A checkpoint's objects checked against their names before a restore puts them back.
//!
//! A checkpoint's tree is in ralph's private object store, but the blobs and trees it shares
//! with the project are borrowed from the project's `.git/objects`, which an agent running as
//! the user can write. Git does not hash a loose object again when it reads it, so one
//! rewritten in place (same name, other bytes) would be restored as it is now. Here every tree
//! and blob of the tree to restore is read once and hashed as git names objects (`<type>
//! <size>\0<bytes>`, SHA-1 or SHA-256 by the name's length); one whose bytes do not match its
//! name refuses the restore. Paid only by `ralph rollback`, never by a stop.

use std::process::Command;
use std::time::Instant;

use sha2::Digest as _;

/// The most object bytes read by one `git cat-file --batch` (its output is held in memory).
const BATCH_BYTES: u64 = 32 * 1024 * 1024;

/// Why a tree could not be vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unverified {
    /// git could not list or read the objects in time.
    Unread(&'static str),
    /// This object's bytes do not hash to its name.
    Altered(String),
}

/// Checks every tree and blob reachable from `target` (a tree or a commit, whose tree is
/// checked) against its name. `git` gives a git command with the checkpoint's object stores.
pub(crate) fn verify(
    git: &dyn Fn() -> std::io::Result<Command>,
    target: &str,
    deadline: Instant,
) -> Result<(), Unverified> {
    let run = |args: &[&str], input: Option<&[u8]>, cap: u64| {
        let mut command = git().ok()?;
        command.args(args);
        match input {
            Some(input) => crate::git_runner::run_with_input(command, input, deadline, cap),
            None => crate::git_runner::run_until(command, deadline, &[0], cap),
        }
    };
    let spec = format!("{target}^{{tree}}");
    let root = run(
        &["rev-parse", "--verify", "--end-of-options", &spec],
        None,
        4096,
    )
    .ok_or(Unverified::Unread("find the checkpoint's tree"))?;
    let root = String::from_utf8_lossy(&root).trim().to_owned();
    let listing = run(
        &["ls-tree", "-r", "-t", "-z", "--full-tree", &root],
        None,
        BATCH_BYTES,
    )
    .ok_or(Unverified::Unread("list the checkpoint's objects"))?;
    let mut names = vec![root];
    names.extend(listed_objects(&listing));
    let sizes = run(
        &["cat-file", "--batch-check"],
        Some(lines(&names).as_bytes()),
        BATCH_BYTES,
    )
    .ok_or(Unverified::Unread("size the checkpoint's objects"))?;
    for (batch, bytes) in batches(&names, &sizes) {
        // Its objects and a header line each: a tracked file larger than a batch (the user's
        // own, which checkpoints keep as the index has it) is read whole, alone.
        let cap = bytes.saturating_add(128 * batch.len() as u64);
        let read = run(
            &["cat-file", "--batch"],
            Some(lines(&batch).as_bytes()),
            cap,
        )
        .ok_or(Unverified::Unread("read the checkpoint's objects"))?;
        check_batch(&read, batch.len())?;
    }
    Ok(())
}

/// The trees and blobs of `git ls-tree -r -t -z` (a submodule's commit is not ours to read).
fn listed_objects(listing: &[u8]) -> Vec<String> {
    listing
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let head = entry.split(|b| *b == b'\t').next()?;
            let head = std::str::from_utf8(head).ok()?;
            let mut parts = head.split(' ');
            let (_mode, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
            matches!(kind, "tree" | "blob").then(|| name.to_owned())
        })
        .collect()
}

fn lines(names: &[String]) -> String {
    names.iter().map(|n| format!("{n}\n")).collect()
}

/// `names` cut into runs whose objects (sizes from `git cat-file --batch-check`) hold at
/// most [`BATCH_BYTES`] together (an object larger alone is a run of its own), each with the
/// bytes its objects hold.
fn batches(names: &[String], sizes: &[u8]) -> Vec<(Vec<String>, u64)> {
    let sizes: Vec<u64> = String::from_utf8_lossy(sizes)
        .lines()
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        })
        .collect();
    let mut out: Vec<(Vec<String>, u64)> = Vec::new();
    for (name, size) in names.iter().zip(sizes.iter().chain(std::iter::repeat(&0))) {
        match out.last_mut() {
            Some((run, held)) if held.saturating_add(*size) <= BATCH_BYTES => {
                run.push(name.clone());
                *held = held.saturating_add(*size);
            }
            _ => out.push((vec![name.clone()], *size)),
        }
    }
    out
}

/// Hashes each object `git cat-file --batch` printed (`<name> <type> <size>\n<bytes>\n`) and
/// compares it with its name; `expected` objects in all.
fn check_batch(mut read: &[u8], expected: usize) -> Result<(), Unverified> {
    let unread = Unverified::Unread("read the checkpoint's objects");
    for _ in 0..expected {
        let end = read
            .iter()
            .position(|b| *b == b'\n')
            .ok_or(unread.clone())?;
        let header = String::from_utf8_lossy(&read[..end]).into_owned();
        let mut parts = header.split(' ');
        let (name, kind, size) = (parts.next(), parts.next(), parts.next());
        let (Some(name), Some(kind), Some(size)) = (name, kind, size) else {
            return Err(unread);
        };
        let size: usize = size.parse().map_err(|_| unread.clone())?;
        let body = read.get(end + 1..end + 1 + size).ok_or(unread.clone())?;
        if object_name(kind, body, name.len()) != name {
            return Err(Unverified::Altered(name.to_owned()));
        }
        read = read.get(end + 2 + size..).unwrap_or_default();
    }
    Ok(())
}

/// The name git gives an object of `kind` holding `body`: SHA-1 for a 40-digit name,
/// SHA-256 for a 64-digit one.
pub(crate) fn object_name(kind: &str, body: &[u8], digits: usize) -> String {
    let header = format!("{kind} {}\0", body.len());
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    if digits == 64 {
        let mut h = sha2::Sha256::new();
        h.update(header.as_bytes());
        h.update(body);
        hex(&h.finalize())
    } else {
        let mut h = sha1::Sha1::new();
        h.update(header.as_bytes());
        h.update(body);
        hex(&h.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_git_s() {
        // `git hash-object` of "hello\n" and of an empty tree.
        assert_eq!(
            object_name("blob", b"hello\n", 40),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        assert_eq!(
            object_name("tree", b"", 40),
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        );
    }

    #[test]
    fn a_batch_with_bytes_that_do_not_match_a_name_is_refused() {
        let good = b"ce013625030ba8dba906f756967f9e9ca394464a blob 6\nhello\n\n";
        assert_eq!(check_batch(good, 1), Ok(()));
        let bad = b"ce013625030ba8dba906f756967f9e9ca394464a blob 6\nHELLO\n\n";
        assert_eq!(
            check_batch(bad, 1),
            Err(Unverified::Altered(
                "ce013625030ba8dba906f756967f9e9ca394464a".into()
            ))
        );
        assert!(matches!(check_batch(b"", 1), Err(Unverified::Unread(_))));
    }

    #[test]
    fn batches_hold_at_most_their_bytes() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| (*s).to_owned()).collect();
        let big = BATCH_BYTES - 10;
        let sizes = format!("a blob {big}\nb blob 20\nc blob 5\n");
        let runs = batches(&names, sizes.as_bytes());
        assert_eq!(
            runs,
            vec![
                (vec!["a".to_owned()], big),
                (vec!["b".to_owned(), "c".to_owned()], 25)
            ]
        );
        // One object larger than a batch is a run of its own, with its whole size.
        let huge = BATCH_BYTES * 3;
        let runs = batches(&names[..1], format!("a blob {huge}\n").as_bytes());
        assert_eq!(runs, vec![(vec!["a".to_owned()], huge)]);
    }

    #[cfg(unix)]
    #[test]
    fn a_loose_object_rewritten_in_place_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let git = |args: &[&str]| {
            let mut c = crate::git_runner::command(root, &[]).unwrap();
            c.args(args);
            let out = c.output().unwrap();
            assert!(out.status.success(), "{args:?}");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        git(&["init", "-q"]);
        std::fs::write(root.join("a.txt"), "one\n").unwrap();
        git(&["add", "a.txt"]);
        let tree = git(&["write-tree"]);
        let command = || crate::git_runner::command(root, &[]);
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        assert_eq!(verify(&command, &tree, deadline), Ok(()));
        // The blob rewritten in place: same name, other bytes (zlib of another blob).
        let blob = git(&["hash-object", "a.txt"]);
        let other = git(&["hash-object", "-w", "--stdin"]);
        let path = |id: &str| root.join(".git/objects").join(&id[..2]).join(&id[2..]);
        let mut perms = std::fs::metadata(path(&blob)).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(path(&blob), perms).unwrap();
        std::fs::copy(path(&other), path(&blob)).unwrap();
        assert_eq!(
            verify(&command, &tree, deadline),
            Err(Unverified::Altered(blob))
        );
    }
}
