//! A cheap fingerprint of "has anything changed?" for the no-progress
//! breaker: HEAD, the list of changed paths with their index and HEAD object
//! names, and the size and modification time of each changed file. One `git`
//! call; nothing is hashed by content. `.claude/` is left out: ralph's own
//! files change at every stop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::UNIX_EPOCH;

use crate::decide::fingerprint;

/// `None` when `root` is not a git work tree or git cannot run.
pub fn fingerprint_of(root: &Path) -> Option<String> {
    if !root.join(".git").exists() {
        return None;
    }
    // Porcelain v2 with --branch carries HEAD (`# branch.oid`) too, so one
    // process tells everything.
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "status",
            "--porcelain=v2",
            "--branch",
            "-z",
            "--untracked-files=all",
            "--",
            ".",
            ":(exclude).claude",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let status = String::from_utf8_lossy(&out.stdout);
    let mut summary = status.clone().into_owned();
    for path in changed_paths(&status) {
        if let Ok(meta) = root.join(path).metadata() {
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            summary.push_str(&format!("\0{}:{modified}", meta.len()));
        }
    }
    Some(fingerprint(&summary))
}

/// The paths of `git status --porcelain=v2 -z` entries. A rename (`2`)
/// entry is followed by its original path as a separate field, skipped.
fn changed_paths(status: &str) -> Vec<&str> {
    let mut paths = Vec::new();
    let mut fields = status.split('\0');
    while let Some(entry) = fields.next() {
        let path = match entry.as_bytes().first() {
            Some(b'1') => entry.splitn(9, ' ').nth(8),
            Some(b'2') => {
                let path = entry.splitn(10, ' ').nth(9);
                fields.next();
                path
            }
            Some(b'u') => entry.splitn(11, ' ').nth(10),
            Some(b'?') => entry.get(2..),
            _ => None,
        };
        paths.extend(path.filter(|p| !p.is_empty()));
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_porcelain_v2_paths() {
        let status = "# branch.oid abc\0# branch.head main\0\
            1 .M N... 100644 100644 100644 aaa bbb src/a file.rs\0\
            2 R. N... 100644 100644 100644 aaa bbb R100 new.rs\0old.rs\0\
            u UU N... 100644 100644 100644 100644 a b c conflict.rs\0\
            ? notes.txt\0";
        assert_eq!(
            changed_paths(status),
            ["src/a file.rs", "new.rs", "conflict.rs", "notes.txt"]
        );
    }

    #[test]
    fn changes_when_the_tree_changes() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
                .args(args)
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap()
        };
        assert_eq!(fingerprint_of(dir.path()), None);
        git(&["init", "-q"]);
        std::fs::write(dir.path().join("a"), "1").unwrap();
        let untracked = fingerprint_of(dir.path()).unwrap();
        git(&["add", "a"]);
        git(&["commit", "-qm", "x"]);
        let committed = fingerprint_of(dir.path()).unwrap();
        assert_ne!(untracked, committed);
        assert_eq!(
            fingerprint_of(dir.path()).unwrap(),
            committed,
            "stable when nothing changes"
        );
        std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
        std::fs::write(dir.path().join(".claude/x-loop.local.md"), "ignored").unwrap();
        assert_eq!(
            fingerprint_of(dir.path()).unwrap(),
            committed,
            ".claude/ is left out"
        );
        std::fs::write(dir.path().join("a"), "22").unwrap();
        assert_ne!(fingerprint_of(dir.path()).unwrap(), committed);
    }
}
