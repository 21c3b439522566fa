//! Where a fleet (`ralph run --parallel`) keeps its stories in the project: each story's
//! worktree under [`WORKTREES`], on its [`branch`], running the loop [`loop_name`], and its
//! [`StoryRecord`] under [`RECORDS`]. The run writes them; `ralph report`, `ralph watch`,
//! `ralph say --story` and `ralph plan` read them, so they live here, below all of those.
//! Every id is checked by `valid_id` before it names a file, a folder or a branch, and
//! nothing here follows a link: the project is the agent's to write.

use std::path::Path;

use ralph_fs::safe_fs::{self, FsError};
use serde::{Deserialize, Serialize};

use crate::fields::stories::valid_id;
use crate::money::Money;
use crate::storage::store::Project;

/// The folder ralph owns for the worktrees, one per story. Not under
/// `.claude/`: Claude Code refuses edits to any path under a `.claude`
/// folder even with `--permission-mode acceptEdits`, so an agent could not
/// edit a single file of its worktree there (found by the e2e test).
pub const WORKTREES: &str = ".ralph/worktrees";
/// The folder ralph owns for each story's record (one JSON file per story).
pub const RECORDS: &str = ".claude/ralph/stories";

/// The branch a story's loop works on.
pub fn branch(id: &str) -> String {
    format!("ralph/{id}")
}

/// The story's loop name (loop names take no `.`).
pub fn loop_name(id: &str) -> String {
    id.replace('.', "_")
}

/// How a story stands, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoryState {
    /// Merged into the base branch; `passes` is true.
    Merged,
    /// Its loop completed, its checks passed on the rebased branch, and it
    /// was left on its branch (`--merge none`, e.g. for a pull request).
    Ready,
    /// Its loop completed, but rebasing onto the base conflicted.
    Conflict,
    /// Its loop completed, but the verify command failed after the rebase.
    VerifyFailed,
    /// Its loop completed, but the merge into the base was refused.
    MergeFailed,
    /// Its loop ended otherwise (limit, budget, breaker, abort, failure).
    Ended,
    /// Ctrl-C stopped it.
    Cancelled,
}

impl StoryState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Merged => "merged",
            Self::Ready => "ready",
            Self::Conflict => "conflict",
            Self::VerifyFailed => "verify_failed",
            Self::MergeFailed => "merge_failed",
            Self::Ended => "ended",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the loop itself completed (only bringing it home is left).
    pub fn loop_completed(self) -> bool {
        matches!(
            self,
            Self::Merged | Self::Ready | Self::Conflict | Self::VerifyFailed | Self::MergeFailed
        )
    }
}

/// What ralph keeps about one story between runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoryRecord {
    pub story: String,
    pub state: StoryState,
    /// The loop's outcome as its history says (`completed`, `max_iterations`…).
    pub outcome: String,
    pub iterations: u64,
    pub tokens: u64,
    pub seconds: u64,
    pub branch: String,
    /// What to do about it, for the user.
    pub note: String,
    /// What its loop spent, when its agent reported a cost (absent in
    /// records written before the dollar budget).
    #[serde(default)]
    pub cost_usd: Money,
}

impl StoryRecord {
    /// A story whose loop ended with `outcome` (its history's word), before
    /// anything is decided about it.
    pub fn ended(id: &str, outcome: &str, iterations: u64, tokens: u64, seconds: u64) -> Self {
        Self {
            story: id.to_owned(),
            state: StoryState::Ended,
            outcome: outcome.to_owned(),
            iterations,
            tokens,
            seconds,
            branch: branch(id),
            note: String::new(),
            cost_usd: Money(0),
        }
    }

    /// A story whose loop could not be started, and why.
    pub fn not_started(id: &str, why: &dyn std::fmt::Display) -> Self {
        Self {
            note: why.to_string(),
            ..Self::ended(id, "not_started", 0, 0, 0)
        }
    }
}

/// The record of the story `id` in `dir` (the project's [`RECORDS`], checked a
/// real folder by the caller), if there is one that reads: a regular file of
/// at most `SMALL_FILE_CAP` bytes, never through a link; `None` for an id
/// that could name another file.
pub fn read_record(dir: &Path, id: &str) -> Option<StoryRecord> {
    if !valid_id(id) {
        return None;
    }
    let text = safe_fs::read_text(&dir.join(format!("{id}.json")), safe_fs::SMALL_FILE_CAP).ok()?;
    serde_json::from_str(&text).ok()
}

/// Every story's record in the project, by id: only from a real [`RECORDS`]
/// folder, only files named by a valid story id (none when the folder is
/// missing or is a link).
pub fn read_records(root: &Path) -> Vec<StoryRecord> {
    if !safe_fs::check_dir(root, RECORDS).unwrap_or(false) {
        return Vec::new();
    }
    let dir = root.join(RECORDS);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
        .filter(|id| valid_id(id))
        .collect();
    ids.sort();
    ids.iter().filter_map(|id| read_record(&dir, id)).collect()
}

/// Writes the record of the story `id` (checked by `valid_id`; never the
/// record's own `story` field, which a planted file may have set) into
/// `dir`, replacing the one before (`safe_fs::replace`: a link there is
/// refused).
pub fn write_record(dir: &Path, id: &str, record: &StoryRecord) -> Result<(), FsError> {
    let path = dir.join(format!("{id}.json"));
    let json = serde_json::to_string_pretty(record).unwrap_or_default();
    safe_fs::replace(&path, json.as_bytes())
}

/// A story's worktree as a project, and its loop's name, when its worktree
/// is a real folder (never through a link): where `ralph say --story` and
/// `ralph watch` find a `--parallel` story's loop.
pub fn story_loop(root: &Path, id: &str) -> Option<(Project, String)> {
    if !valid_id(id) {
        return None;
    }
    let rel = Path::new(WORKTREES).join(id);
    safe_fs::check_dir(root, &rel).ok()?.then(|| {
        let project = Project {
            root: root.join(rel),
        };
        (project, loop_name(id))
    })
}

/// Every story worktree `ralph run --parallel` keeps, by id, sorted (only
/// from a real [`WORKTREES`] folder, only names that are valid ids).
pub fn story_ids(root: &Path) -> Vec<String> {
    if !safe_fs::check_dir(root, WORKTREES).unwrap_or(false) {
        return Vec::new();
    }
    let Ok(read) = std::fs::read_dir(root.join(WORKTREES)) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = read
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|id| valid_id(id))
        .collect();
    ids.sort();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records_in(root: &Path) -> std::path::PathBuf {
        let dir = root.join(RECORDS);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_record_is_written_under_the_id_it_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let planted = StoryRecord {
            story: "../elsewhere".into(),
            ..StoryRecord::ended("US-1", "completed", 1, 0, 0)
        };
        write_record(dir.path(), "US-1", &planted).unwrap();
        assert_eq!(read_record(dir.path(), "US-1"), Some(planted));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(read_record(dir.path(), "US-2"), None);
    }

    #[test]
    fn records_are_read_by_valid_id_only_sorted_and_capped() {
        let root = tempfile::tempdir().unwrap();
        assert!(read_records(root.path()).is_empty());
        let dir = records_in(root.path());
        for id in ["US-2", "US-1"] {
            write_record(&dir, id, &StoryRecord::ended(id, "completed", 1, 0, 0)).unwrap();
        }
        // A record beside the folder, named by an id that climbs out of it.
        let outside = StoryRecord::ended("x", "completed", 1, 0, 0);
        write_record(root.path(), "x", &outside).unwrap();
        assert_eq!(read_record(&dir, "../../../x"), None);
        std::fs::write(dir.join("..json"), b"{}").unwrap();
        // A record that reads, padded past the cap.
        let mut big = serde_json::to_vec(&StoryRecord::ended("big", "completed", 1, 0, 0)).unwrap();
        big.resize(usize::try_from(safe_fs::SMALL_FILE_CAP).unwrap() + 1, b' ');
        std::fs::write(dir.join("big.json"), big).unwrap();
        std::fs::write(dir.join("bad.json"), b"not json").unwrap();
        let read: Vec<String> = read_records(root.path())
            .into_iter()
            .map(|r| r.story)
            .collect();
        assert_eq!(read, ["US-1", "US-2"]);
    }

    #[cfg(unix)]
    #[test]
    fn no_record_or_worktree_is_read_through_a_link() {
        let elsewhere = tempfile::tempdir().unwrap();
        let dir = records_in(elsewhere.path());
        write_record(
            &dir,
            "US-1",
            &StoryRecord::ended("US-1", "completed", 1, 0, 0),
        )
        .unwrap();
        std::fs::create_dir_all(elsewhere.path().join(WORKTREES).join("US-1")).unwrap();

        // The whole folder a link: nothing is read.
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join(".claude/ralph")).unwrap();
        std::os::unix::fs::symlink(&dir, root.path().join(RECORDS)).unwrap();
        std::fs::create_dir_all(root.path().join(".ralph")).unwrap();
        std::os::unix::fs::symlink(
            elsewhere.path().join(WORKTREES),
            root.path().join(WORKTREES),
        )
        .unwrap();
        assert!(read_records(root.path()).is_empty());
        assert!(story_ids(root.path()).is_empty());
        assert!(story_loop(root.path(), "US-1").is_none());

        // One record, one worktree a link in a real folder: neither is read.
        let root = tempfile::tempdir().unwrap();
        let own = records_in(root.path());
        std::os::unix::fs::symlink(dir.join("US-1.json"), own.join("US-1.json")).unwrap();
        assert!(read_records(root.path()).is_empty());
        std::fs::create_dir_all(root.path().join(WORKTREES)).unwrap();
        std::os::unix::fs::symlink(
            elsewhere.path().join(WORKTREES).join("US-1"),
            root.path().join(WORKTREES).join("US-1"),
        )
        .unwrap();
        assert!(story_loop(root.path(), "US-1").is_none());
    }

    #[test]
    fn a_stories_worktree_is_found_by_its_valid_id() {
        let root = tempfile::tempdir().unwrap();
        assert!(story_ids(root.path()).is_empty());
        for id in ["US-2.a", "US-1", "-x"] {
            std::fs::create_dir_all(root.path().join(WORKTREES).join(id)).unwrap();
        }
        assert_eq!(story_ids(root.path()), ["US-1", "US-2.a"]);
        let (project, name) = story_loop(root.path(), "US-2.a").unwrap();
        assert_eq!(project.root, root.path().join(WORKTREES).join("US-2.a"));
        assert_eq!(name, "US-2_a");
        assert!(story_loop(root.path(), "-x").is_none());
        assert!(story_loop(root.path(), "US-3").is_none());
    }

    #[test]
    fn a_record_says_its_state_in_snake_case() {
        let record = StoryRecord {
            state: StoryState::VerifyFailed,
            ..StoryRecord::not_started("US-1", &"no worktree")
        };
        let json = serde_json::to_string(&record).unwrap();
        assert!(json.contains("\"verify_failed\""), "{json}");
        assert_eq!(StoryState::VerifyFailed.as_str(), "verify_failed");
        assert_eq!(record.note, "no worktree");
        assert_eq!(record.branch, "ralph/US-1");
        // A record from before the dollar budget reads, its cost zero.
        let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(old.as_object_mut().unwrap().remove("cost_usd").is_some());
        let read: StoryRecord = serde_json::from_value(old).unwrap();
        assert_eq!(read.cost_usd, Money(0));
        assert!(StoryState::Conflict.loop_completed() && !StoryState::Cancelled.loop_completed());
    }
}
