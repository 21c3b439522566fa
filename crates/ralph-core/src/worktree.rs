//! A cheap fingerprint of "has anything changed?" for the no-progress
//! breaker: HEAD, the list of changed paths, and the size and modification
//! time of each changed file. Two `git` calls; nothing is hashed by content.
//! `.claude/` is left out: ralph's own files change at every stop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::UNIX_EPOCH;

use crate::decide::fingerprint;

/// `None` when `root` is not a git work tree or git cannot run.
pub fn fingerprint_of(root: &Path) -> Option<String> {
    if !root.join(".git").exists() {
        return None;
    }
    let head = git(root, &["rev-parse", "--verify", "-q", "HEAD"]).unwrap_or_default();
    let status = git(
        root,
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--",
            ".",
            ":(exclude).claude",
        ],
    )?;
    let mut summary = format!("{head}\0{status}\0");
    for entry in status.split('\0').filter(|e| e.len() > 3) {
        let path = root.join(&entry[3..]);
        if let Ok(meta) = path.metadata() {
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            summary.push_str(&format!("{}:{modified}\0", meta.len()));
        }
    }
    Some(fingerprint(&summary))
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
