//! Keeping a project's PRD history when a new run starts on another branch:
//! the previous `ralph/prd.json` and `ralph/progress.txt` are archived under
//! `ralph/archive/<date>-<branch>/` and a fresh progress log is started, so
//! nothing is lost and the new run does not read the old run's notes.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use ralph_fs::safe_fs;
use ralph_state::time::Timestamp;

use ralph_state::fields::stories::DEFAULT_PRD as PRD;
const PROGRESS: &str = "ralph/progress.txt";
/// What the last run started with: its branch and its PRD.
const LAST_RUN: &str = ".claude/ralph/last-run.json";

const FRESH_PROGRESS: &str = "# Ralph progress log\n\nAppend-only: one entry per story, newest last.\n\n## Codebase Patterns\n\n---\n";

fn branch_of(prd: &str) -> Option<String> {
    let value: Value = serde_json::from_str(prd).ok()?;
    value
        .get("branchName")?
        .as_str()
        .map(str::to_owned)
        .filter(|b| !b.trim().is_empty())
}

fn slug(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    s.trim_matches('-').to_owned()
}

/// Reads a small project file: `None` when it is not there; an error when
/// it is a link, a special file, too long or not UTF-8.
fn read_small(root: &Path, rel: &str) -> std::io::Result<Option<String>> {
    match safe_fs::read_text(&root.join(rel), safe_fs::SMALL_FILE_CAP) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// Archives the previous PRD and progress log when the PRD's `branchName`
/// differs from the last run's, then remembers this run's. Returns the
/// archive folder when one was made. A project without `ralph/prd.json` is
/// left alone. Every path goes through `safe_fs`: the folders must be real
/// folders, the archive folder is new (created exclusively), its files are
/// created exclusively, and the rest is replaced atomically.
pub fn archive_if_branch_changed(root: &Path, now: Timestamp) -> std::io::Result<Option<PathBuf>> {
    let other = std::io::Error::other;
    if !safe_fs::check_dir(root, "ralph").map_err(other)? {
        return Ok(None);
    }
    let Some(prd) = read_small(root, PRD)? else {
        return Ok(None);
    };
    let Some(branch) = branch_of(&prd) else {
        return Ok(None);
    };
    let last: Option<Value> = if safe_fs::check_dir(root, ".claude/ralph").map_err(other)? {
        read_small(root, LAST_RUN)?.and_then(|t| serde_json::from_str(&t).ok())
    } else {
        None
    };
    let last_branch = last
        .as_ref()
        .and_then(|v| v["branch"].as_str())
        .map(str::to_owned);
    let mut archived = None;
    if let Some(old) = last_branch.filter(|old| *old != branch) {
        let date = &now.to_string()[..10];
        let parent = safe_fs::ensure_dir(root, "ralph/archive").map_err(other)?;
        let mut n = 1;
        let dir = loop {
            let name = match n {
                1 => format!("{date}-{}", slug(&old)),
                _ => format!("{date}-{}-{n}", slug(&old)),
            };
            let dir = parent.join(name);
            // create_dir is exclusive: an existing entry (or link) is skipped.
            match std::fs::create_dir(&dir) {
                Ok(()) => break dir,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(e),
            }
        };
        let old_prd = last
            .as_ref()
            .and_then(|v| v["prd"].as_str())
            .unwrap_or_default();
        safe_fs::create_new(&dir.join("prd.json"), old_prd.as_bytes()).map_err(other)?;
        match safe_fs::copy_new(&root.join(PROGRESS), &dir.join("progress.txt")) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(other(e)),
        }
        safe_fs::replace(&root.join(PROGRESS), FRESH_PROGRESS.as_bytes()).map_err(other)?;
        archived = Some(dir);
    }
    safe_fs::ensure_dir(root, ".claude/ralph").map_err(other)?;
    let record = json!({"branch": branch, "prd": prd, "started_at": now.to_string()});
    safe_fs::replace(&root.join(LAST_RUN), record.to_string().as_bytes()).map_err(other)?;
    Ok(archived)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prd(branch: &str) -> String {
        json!({"project": "x", "branchName": branch, "userStories": []}).to_string()
    }

    #[test]
    fn archives_only_when_the_branch_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("ralph")).unwrap();
        std::fs::write(root.join(PRD), prd("ralph/one")).unwrap();
        std::fs::write(root.join(PROGRESS), "notes of one").unwrap();
        let now = Timestamp::parse_rfc3339("2026-11-30T10:00:00Z").unwrap();
        assert_eq!(
            archive_if_branch_changed(root, now).unwrap(),
            None,
            "first run: nothing to archive"
        );
        assert_eq!(
            archive_if_branch_changed(root, now).unwrap(),
            None,
            "same branch"
        );
        std::fs::write(root.join(PRD), prd("ralph/two")).unwrap();
        let archived = archive_if_branch_changed(root, now).unwrap().unwrap();
        assert!(
            archived.ends_with("ralph/archive/2026-11-30-ralph-one"),
            "{archived:?}"
        );
        assert_eq!(
            std::fs::read_to_string(archived.join("prd.json")).unwrap(),
            prd("ralph/one")
        );
        assert_eq!(
            std::fs::read_to_string(archived.join("progress.txt")).unwrap(),
            "notes of one"
        );
        assert!(
            std::fs::read_to_string(root.join(PROGRESS))
                .unwrap()
                .starts_with("# Ralph progress log")
        );
        assert_eq!(
            std::fs::read_to_string(root.join(PRD)).unwrap(),
            prd("ralph/two"),
            "the new PRD is untouched"
        );
    }

    #[test]
    fn no_prd_no_work() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            archive_if_branch_changed(dir.path(), Timestamp(0)).unwrap(),
            None
        );
        assert!(!dir.path().join(".claude").exists());
    }
}
