//! Keeping a project's PRD history when a new run starts on another branch:
//! the previous `ralph/prd.json` and `ralph/progress.txt` are archived under
//! `ralph/archive/<date>-<branch>/` and a fresh progress log is started, so
//! nothing is lost and the new run does not read the old run's notes.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::store;
use crate::time::Timestamp;

const PRD: &str = "ralph/prd.json";
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

/// Archives the previous PRD and progress log when the PRD's `branchName`
/// differs from the last run's, then remembers this run's. Returns the
/// archive folder when one was made. A project without `ralph/prd.json` is
/// left alone.
pub fn archive_if_branch_changed(root: &Path, now: Timestamp) -> std::io::Result<Option<PathBuf>> {
    let Ok(prd) = std::fs::read_to_string(root.join(PRD)) else {
        return Ok(None);
    };
    let Some(branch) = branch_of(&prd) else {
        return Ok(None);
    };
    let last: Option<Value> = std::fs::read_to_string(root.join(LAST_RUN))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let last_branch = last
        .as_ref()
        .and_then(|v| v["branch"].as_str())
        .map(str::to_owned);
    let mut archived = None;
    if let Some(old) = last_branch.filter(|old| *old != branch) {
        let date = &now.to_string()[..10];
        let mut dir = root
            .join("ralph/archive")
            .join(format!("{date}-{}", slug(&old)));
        let mut n = 2;
        while dir.exists() {
            dir = root
                .join("ralph/archive")
                .join(format!("{date}-{}-{n}", slug(&old)));
            n += 1;
        }
        std::fs::create_dir_all(&dir)?;
        let old_prd = last
            .as_ref()
            .and_then(|v| v["prd"].as_str())
            .unwrap_or_default();
        std::fs::write(dir.join("prd.json"), old_prd)?;
        if let Ok(progress) = std::fs::read_to_string(root.join(PROGRESS)) {
            std::fs::write(dir.join("progress.txt"), progress)?;
        }
        std::fs::write(root.join(PROGRESS), FRESH_PROGRESS)?;
        archived = Some(dir);
    }
    std::fs::create_dir_all(root.join(".claude/ralph"))?;
    let record = json!({"branch": branch, "prd": prd, "started_at": now.to_string()});
    store::write_atomic(&root.join(LAST_RUN), &record.to_string())
        .map_err(std::io::Error::other)?;
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
