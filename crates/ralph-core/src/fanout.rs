//! Many loops at once (`ralph run --parallel N`, `ralph plan --matrix`): the
//! pure rules. Which stories of `ralph/prd.json` are open, what each
//! story's loop is told, what the fleet's matrix holds, what a story's
//! record says should happen next, and how `passes: true` is written back.
//! Files, git and processes live in `fanout_git` and the CLI.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Where the stories live, relative to the project root.
pub const PRD: &str = "ralph/prd.json";
/// The folder ralph owns for the worktrees, one per story. Not under
/// `.claude/`: Claude Code refuses edits to any path under a `.claude`
/// folder even with `--permission-mode acceptEdits`, so an agent could not
/// edit a single file of its worktree there (found by the e2e test).
pub const WORKTREES: &str = ".ralph/worktrees";
/// The folder ralph owns for each story's record (one JSON file per story).
pub const RECORDS: &str = ".claude/ralph/stories";
/// The promise a story's loop gives when nothing else was chosen.
pub const DEFAULT_PROMISE: &str = "DONE";

/// One story (or one task named on the command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Story {
    pub id: String,
    pub title: String,
    pub description: String,
    pub criteria: Vec<String>,
    pub passes: bool,
    pub priority: Option<i64>,
}

/// A story id is used as a branch name, a folder name and a loop name:
/// ASCII letters, digits, `.`, `_`, `-`; at most 64; no leading `-` or
/// `.`, no `..`, no trailing `.` or `.lock` (which git refuses in a ref).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !id.starts_with(['-', '.'])
        && !id.ends_with('.')
        && !id.ends_with(".lock")
        && !id.contains("..")
}

/// The branch a story's loop works on.
pub fn branch(id: &str) -> String {
    format!("ralph/{id}")
}

/// The story's loop name (loop names take no `.`).
pub fn loop_name(id: &str) -> String {
    id.replace('.', "_")
}

/// The stories of a PRD, in file order. Every id is checked; a bad one is
/// refused with the file, the field and the rule.
pub fn stories(prd: &str) -> Result<Vec<Story>, String> {
    let value: Value =
        serde_json::from_str(prd).map_err(|e| format!("{PRD} is not valid JSON: {e}"))?;
    let Some(list) = value.get("userStories").and_then(Value::as_array) else {
        return Err(format!(
            "{PRD}: the field `userStories` is missing or not a list; see `ralph init` for the shape"
        ));
    };
    let mut out: Vec<Story> = Vec::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        let field = |name: &str| format!("{PRD}: userStories[{i}].{name}");
        let id = s
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{} is missing or not a string", field("id")))?;
        if !valid_id(id) {
            return Err(format!(
                "{} = {:?} cannot name a branch: use ASCII letters, digits, `.`, `_` and `-` only (at most 64, not starting with `-` or `.`), e.g. \"US-001\"",
                field("id"),
                crate::display::line(id)
            ));
        }
        if out.iter().any(|o| loop_name(&o.id) == loop_name(id)) {
            return Err(format!(
                "{}: the id {id:?} is used twice; every story needs its own",
                field("id")
            ));
        }
        let text = |name: &str| {
            s.get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        out.push(Story {
            id: id.to_owned(),
            title: text("title"),
            description: text("description"),
            criteria: s
                .get("acceptanceCriteria")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            passes: s.get("passes").and_then(Value::as_bool).unwrap_or(false),
            priority: s.get("priority").and_then(Value::as_i64),
        });
    }
    Ok(out)
}

/// The open stories (`passes` false), by priority, then file order.
pub fn open(stories: &[Story]) -> Vec<Story> {
    let mut open: Vec<Story> = stories.iter().filter(|s| !s.passes).cloned().collect();
    open.sort_by_key(|s| s.priority.unwrap_or(i64::MAX));
    open
}

/// Tasks named on the command line. Each id is `task-` and a hash of its
/// text, so the same command resumes the same tasks and another task never
/// inherits an earlier one's record.
pub fn tasks(texts: &[String]) -> Vec<Story> {
    use sha2::{Digest, Sha256};
    texts
        .iter()
        .map(|t| Story {
            id: format!(
                "task-{}",
                Sha256::digest(t.as_bytes())
                    .iter()
                    .take(4)
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
            title: t.lines().next().unwrap_or_default().to_owned(),
            description: t.clone(),
            criteria: Vec::new(),
            passes: false,
            priority: None,
        })
        .collect()
}

/// What one story's loop is told at every iteration.
pub fn prompt(story: &Story, promise: &str) -> String {
    let mut p = format!(
        "You work on ONE story, alone, in a git worktree on the branch `{}`. Other stories run in \
         other worktrees at the same time: touch only what this story needs.\n\n## Story {}: {}\n\n{}\n",
        branch(&story.id),
        story.id,
        story.title,
        story.description
    );
    if !story.criteria.is_empty() {
        p.push_str("\n### Acceptance criteria\n\n");
        for c in &story.criteria {
            p.push_str(&format!("- {c}\n"));
        }
    }
    p.push_str(&format!(
        "\nCommit your work on this branch (`git commit`). Do not edit `{PRD}` or \
         `ralph/progress.txt` (every story's branch would conflict there) and do not switch \
         branches: ralph merges the branch and marks the story done once its checks pass. When the \
         story is implemented, its checks pass and the work is committed, reply with \
         <promise>{promise}</promise>.\n"
    ));
    p
}

/// The open stories as a GitHub Actions matrix.
pub fn matrix(open: &[Story]) -> Value {
    let include: Vec<Value> = open
        .iter()
        .map(|s| json!({"story": s.id, "title": s.title, "branch": branch(&s.id)}))
        .collect();
    json!({ "include": include })
}

/// Sets `passes: true` on the story `id`, keeping the rest of the JSON as
/// it was (key order included). Errors name the file and the field.
pub fn set_passes(prd: &str, id: &str) -> Result<String, String> {
    let mut value: Value =
        serde_json::from_str(prd).map_err(|e| format!("{PRD} is not valid JSON: {e}"))?;
    let story = value
        .get_mut("userStories")
        .and_then(Value::as_array_mut)
        .and_then(|list| {
            list.iter_mut()
                .find(|s| s.get("id").and_then(Value::as_str) == Some(id))
        })
        .and_then(Value::as_object_mut)
        .ok_or_else(|| format!("{PRD}: no story with id {id:?} in `userStories` any more"))?;
    story.insert("passes".into(), Value::Bool(true));
    let mut text = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
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
}

/// What a run does with an open story.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Run its loop (again): never run, cancelled, or ended without completing.
    RunLoop,
    /// Its loop completed earlier: only rebase, verify and merge again.
    BringHome,
    /// Nothing: already merged or left ready on its branch.
    Skip,
}

/// What to do with an open story, from its record; `merging` is false
/// under `--merge none` (a story left ready on its branch stays so).
pub fn next(record: Option<&StoryRecord>, merging: bool) -> Next {
    match record.map(|r| r.state) {
        Some(StoryState::Merged) => Next::Skip,
        Some(StoryState::Ready) if !merging => Next::Skip,
        Some(s) if s.loop_completed() => Next::BringHome,
        _ => Next::RunLoop,
    }
}

/// How a finished branch goes into the base branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeMode {
    /// Fast-forward (the branch was just rebased onto the base); a merge
    /// commit only if the base moved meanwhile.
    Ff,
    /// Always a merge commit (`--no-ff`).
    Merge,
    /// Leave the story on its branch (for a pull request).
    None,
}

impl MergeMode {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ff" => Some(Self::Ff),
            "merge" => Some(Self::Merge),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

/// One row of the summary table.
#[derive(Debug, Clone)]
pub struct Row {
    pub story: String,
    pub outcome: String,
    pub iterations: u64,
    pub seconds: u64,
    pub tokens: u64,
    pub branch: String,
}

/// The summary table, columns aligned.
pub fn table(rows: &[Row]) -> String {
    let head = ["story", "outcome", "iterations", "time", "tokens", "branch"];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.story.clone(),
                r.outcome.clone(),
                r.iterations.to_string(),
                crate::time::format_duration(r.seconds),
                r.tokens.to_string(),
                r.branch.clone(),
            ]
        })
        .collect();
    let mut widths = head.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_owned()
    };
    let mut out = line(&head.map(str::to_owned));
    for row in &cells {
        out.push('\n');
        out.push_str(&line(row));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRD_TEXT: &str = r#"{"project":"x","branchName":"ralph/f","userStories":[
        {"id":"US-002","title":"Two","priority":2,"passes":false,"notes":""},
        {"id":"US-001","title":"One","description":"d","acceptanceCriteria":["a","b"],"priority":1,"passes":false},
        {"id":"US-003","title":"Three","priority":3,"passes":true}]}"#;

    #[test]
    fn ids_must_be_safe_for_git_and_folders() {
        for good in ["US-001", "a.b_c-d", "7"] {
            assert!(valid_id(good), "{good}");
        }
        for bad in [
            "", "-x", ".x", "a..b", "x.", "x.lock", "a/b", "a b", "a;rm", "é", "x\n",
        ] {
            assert!(!valid_id(bad), "{bad:?}");
        }
        assert!(!valid_id(&"a".repeat(65)));
    }

    #[test]
    fn open_stories_by_priority() {
        let all = stories(PRD_TEXT).unwrap();
        let open: Vec<String> = open(&all).into_iter().map(|s| s.id).collect();
        assert_eq!(open, ["US-001", "US-002"]);
        let m = matrix(&super::open(&all));
        assert_eq!(m["include"][0]["branch"], "ralph/US-001");
        assert_eq!(m["include"][1]["story"], "US-002");
        assert_eq!(m["include"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_bad_id_names_the_file_and_field() {
        let e = stories(r#"{"userStories":[{"id":"ok"},{"id":"../../x; rm -rf /"}]}"#).unwrap_err();
        assert!(e.contains("ralph/prd.json: userStories[1].id"), "{e}");
        let e = stories(r#"{"userStories":[{"id":"a.b"},{"id":"a_b"}]}"#).unwrap_err();
        assert!(e.contains("used twice"), "{e}");
        let e = stories(r#"{"userStories":[{"title":"no id"}]}"#).unwrap_err();
        assert!(e.contains("userStories[0].id is missing"), "{e}");
        assert!(stories("{").unwrap_err().contains("not valid JSON"));
    }

    #[test]
    fn set_passes_keeps_the_rest_in_order() {
        let out = set_passes(PRD_TEXT, "US-002").unwrap();
        let all = stories(&out).unwrap();
        assert!(all[0].passes && !all[1].passes && all[2].passes);
        // Key order is kept: project before branchName before userStories.
        let p = out.find("\"project\"").unwrap();
        let b = out.find("\"branchName\"").unwrap();
        let u = out.find("\"userStories\"").unwrap();
        assert!(p < b && b < u, "{out}");
        assert!(out.find("\"notes\"").unwrap() > out.find("\"passes\"").unwrap());
        assert!(set_passes(PRD_TEXT, "US-9").unwrap_err().contains("US-9"));
    }

    #[test]
    fn records_decide_what_runs_again() {
        let rec = |state| StoryRecord {
            story: "a".into(),
            state,
            outcome: String::new(),
            iterations: 1,
            tokens: 0,
            seconds: 0,
            branch: "ralph/a".into(),
            note: String::new(),
        };
        assert_eq!(next(None, true), Next::RunLoop);
        assert_eq!(next(Some(&rec(StoryState::Cancelled)), true), Next::RunLoop);
        assert_eq!(next(Some(&rec(StoryState::Ended)), true), Next::RunLoop);
        assert_eq!(
            next(Some(&rec(StoryState::Conflict)), true),
            Next::BringHome
        );
        assert_eq!(
            next(Some(&rec(StoryState::VerifyFailed)), true),
            Next::BringHome
        );
        assert_eq!(next(Some(&rec(StoryState::Merged)), true), Next::Skip);
        // Left ready by `--merge none`: merged by a run that merges.
        assert_eq!(next(Some(&rec(StoryState::Ready)), false), Next::Skip);
        assert_eq!(next(Some(&rec(StoryState::Ready)), true), Next::BringHome);
        let json = serde_json::to_string(&rec(StoryState::VerifyFailed)).unwrap();
        assert!(json.contains("\"verify_failed\""));
    }

    #[test]
    fn prompt_and_table() {
        let all = stories(PRD_TEXT).unwrap();
        let p = prompt(&all[1], "DONE");
        assert!(
            p.contains("ralph/US-001")
                && p.contains("- b\n")
                && p.contains("<promise>DONE</promise>")
        );
        let t = table(&[Row {
            story: "US-001".into(),
            outcome: "merged".into(),
            iterations: 2,
            seconds: 61,
            tokens: 0,
            branch: "ralph/US-001".into(),
        }]);
        assert!(t.starts_with("story   outcome"), "{t}");
        assert!(t.lines().nth(1).unwrap().ends_with("ralph/US-001"));
        let t = tasks(&["fix a\nmore".into(), "other".into()]);
        assert_eq!(t[0].title, "fix a");
        assert!(t[0].id.starts_with("task-") && t[0].id.len() == 13 && valid_id(&t[0].id));
        assert_ne!(t[0].id, t[1].id);
        assert_eq!(t[0].id, tasks(&["fix a\nmore".into()])[0].id);
    }
}
