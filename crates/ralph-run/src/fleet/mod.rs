//! Many loops at once (`ralph run --parallel N`, `ralph plan --matrix`): the
//! pure rules. Which stories of `ralph/prd.json` are open, what each
//! story's loop is told, what the fleet's matrix holds, what a story's
//! record says should happen next, and how `passes: true` is written back.
//! Git lives in `git.rs`, the child processes in `driver.rs`; `child.rs`
//! and `screen.rs` word a child's arguments and what the terminal shows.

pub mod archive;
pub mod budget;
pub mod child;
pub mod driver;
pub mod error;
pub mod git;
pub mod screen;

use serde_json::{Value, json};

/// Where the stories live, relative to the project root.
pub const PRD: &str = ralph_state::fields::stories::DEFAULT_PRD;
/// Where each story's loop writes what it learnt, one file a story
/// (`ralph/notes/<id>.md`, on its branch): no two stories share a file, so
/// no merge loses a note; ralph appends each to [`PROGRESS`] once merged.
pub(crate) const NOTES_DIR: &str = "ralph/notes";
/// The progress file every loop reads, written under a fleet by ralph only.
pub const PROGRESS: &str = "ralph/progress.txt";
/// The most of a story's notes ralph appends to the progress file.
pub(crate) const NOTES_CAP: u64 = 64 * 1024;
/// The promise a story's loop gives when nothing else was chosen.
pub(crate) const DEFAULT_PROMISE: &str = "DONE";

pub use ralph_state::fields::stories::{PrdError, Story};
use ralph_state::storage::fleet::{StoryRecord, StoryState, branch, loop_name};

/// The mark before a story's line: home, stopped, or left to fix.
pub(crate) fn mark(state: StoryState) -> &'static str {
    match state {
        StoryState::Merged | StoryState::Ready => "✓",
        StoryState::Cancelled => "⏹",
        _ => "✗",
    }
}

/// The story's notes file, relative to the project root.
pub(crate) fn notes_file(id: &str) -> String {
    format!("{NOTES_DIR}/{id}.md")
}

/// What ralph appends to the progress file for a merged story's `notes`.
pub(crate) fn progress_entry(story: &Story, notes: &str) -> String {
    format!(
        "\n## {}: {} (merged; its notes from {})\n\n{}\n",
        story.id,
        story.title.lines().next().unwrap_or_default(),
        notes_file(&story.id),
        notes.trim()
    )
}

/// The stories of `ralph/prd.json`, in file order (see `stories::parse`).
pub fn stories(prd: &str) -> Result<Vec<Story>, PrdError> {
    ralph_state::fields::stories::parse(PRD, prd)
}

/// The open stories (not passing, not blocked), by priority, then file order.
pub fn open(stories: &[Story]) -> Vec<Story> {
    ralph_state::fields::stories::open(stories)
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
            protect: Vec::new(),
            scope: Vec::new(),
            depends_on: Vec::new(),
            verify: None,
            blocked: None,
            concerns: Vec::new(),
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
        "\nRead `{PROGRESS}` first: it holds what earlier stories learnt. Write what you learn that \
         later stories should know (patterns, gotchas, commands) to `{notes}` and commit it with \
         your work: ralph appends it to `{PROGRESS}` once this story is merged.\n",
        notes = notes_file(&story.id)
    ));
    p.push_str(&format!(
        "\nCommit your work on this branch (`git commit`). Do not edit `{PRD}` or \
         `{PROGRESS}` (every story's branch would conflict there) and do not switch \
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

/// Sets `passes: true` on the story `id`, changing only that value's
/// bytes (`stories::set_passes`). Errors name the file and the field.
pub fn set_passes(prd: &str, id: &str) -> Result<String, PrdError> {
    ralph_state::fields::stories::set_passes(PRD, prd, id, true)
}

/// What a finished child run means for its story.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterRun {
    /// Its loop completed: rebase, verify and merge it.
    BringHome(StoryRecord),
    /// It stays where it is, with the note that says what comes next.
    Stays(StoryRecord),
}

/// Reads a child run's exit: `code` its exit code (`None`: killed),
/// `completed` whether its loop's history says completed, `shown` its
/// worktree as the user sees it.
pub(crate) fn after_run(
    record: StoryRecord,
    code: Option<i32>,
    completed: bool,
    shown: &str,
) -> AfterRun {
    match code {
        Some(0) if completed => AfterRun::BringHome(record),
        Some(130) => AfterRun::Stays(StoryRecord {
            state: StoryState::Cancelled,
            outcome: "cancelled".into(),
            note: format!("stopped by Ctrl-C; kept in {shown}; the next run resumes it"),
            ..record
        }),
        _ => AfterRun::Stays(StoryRecord {
            note: format!(
                "its loop ended as {} ({}); kept for inspection in {shown} until `ralph clean`; `ralph log --name {}` there shows why; the next run starts it again",
                record.outcome,
                code.map_or("killed".into(), |c| format!("exit {c}")),
                loop_name(&record.story),
            ),
            ..record
        }),
    }
}

/// How bringing a completed story home ended. Every step but the last
/// leaves the story on its branch; nothing is forced.
#[derive(Debug)]
pub(crate) enum Homecoming {
    /// The agent left its worktree on another branch (`head`).
    SwitchedBranch { head: String },
    /// What the loop left uncommitted could not be committed.
    NotCommitted(crate::fleet::error::FleetError),
    /// Rebasing onto the base conflicted, and was aborted.
    Conflict,
    /// The rebase failed otherwise.
    RebaseFailed(crate::fleet::error::FleetError),
    /// The verify command failed on the rebased branch.
    VerifyFailed {
        command: String,
        verification: ralph_core::decide::observation::Verification,
    },
    /// Rebased and verified; left on its branch (`--merge none`).
    Ready,
    /// The merge into the base was refused.
    MergeRefused(crate::fleet::error::FleetError),
    /// Merged into the base.
    Merged,
}

/// Where a story's trip home happens, as the notes name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trip<'a> {
    pub branch: &'a str,
    pub base: &'a str,
    /// The worktree, as the user sees it.
    pub shown: &'a str,
}

impl Homecoming {
    /// The story's record after its trip home: its state, and the note
    /// that says what to do (none once merged).
    pub(crate) fn record(self, completed: StoryRecord, trip: Trip) -> StoryRecord {
        let Trip {
            branch,
            base,
            shown,
        } = trip;
        let (state, note) = match self {
            Self::SwitchedBranch { head } => (
                StoryState::MergeFailed,
                format!(
                    "its worktree {shown} is on {head}, not {branch} (the agent switched branches); nothing was merged. Bring the work onto {branch} there, then run again"
                ),
            ),
            Self::NotCommitted(e) => (
                StoryState::MergeFailed,
                format!("could not commit the loop's work in {shown}: {e}"),
            ),
            Self::Conflict => (
                StoryState::Conflict,
                format!(
                    "conflicts with {base}; nothing was forced. Resolve: cd {shown} && git rebase {base} (fix, git add, git rebase --continue), then run the same `ralph run --parallel` again"
                ),
            ),
            // Not a conflict: nothing in the files disagreed (git could
            // not commit, say), and the note says what git said.
            Self::RebaseFailed(e) => (
                StoryState::MergeFailed,
                format!("the rebase onto {base} failed: {e}; the story stays on {branch}"),
            ),
            Self::VerifyFailed {
                command,
                verification: v,
            } => (
                StoryState::VerifyFailed,
                format!(
                    "`{command}` failed ({}) on {branch} rebased onto {base}; fix it in {shown}, then run again. Output:\n{}",
                    v.status,
                    ralph_state::messages::escape_controls(v.output_tail.trim_end())
                ),
            ),
            Self::Ready => (
                StoryState::Ready,
                format!("rebased onto {base} and verified; left on {branch}"),
            ),
            Self::MergeRefused(e) => (
                StoryState::MergeFailed,
                format!("the merge into {base} was refused: {e}; the story stays on {branch}"),
            ),
            Self::Merged => (StoryState::Merged, String::new()),
        };
        StoryRecord {
            state,
            note,
            outcome: "completed".into(),
            ..completed
        }
    }
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
    pub(crate) fn parse(text: &str) -> Option<Self> {
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
pub struct SummaryRow {
    pub story: String,
    pub outcome: String,
    pub iterations: u64,
    pub seconds: u64,
    pub tokens: u64,
    pub branch: String,
    pub cost: ralph_state::money::Money,
}

impl SummaryRow {
    /// The story `id`'s row, from its record (whose own `story` field a
    /// planted file may have set: the table names the id ralph checked).
    pub(crate) fn of(id: &str, record: &StoryRecord) -> Self {
        Self {
            story: id.to_owned(),
            outcome: record.state.as_str().to_owned(),
            iterations: record.iterations,
            seconds: record.seconds,
            tokens: record.tokens,
            branch: record.branch.clone(),
            cost: record.cost_usd,
        }
    }
}

/// Whether every story of the run came home (merged, or ready on its branch).
pub(crate) fn all_home(rows: &[SummaryRow]) -> bool {
    rows.iter()
        .all(|r| r.outcome == "merged" || r.outcome == "ready")
}

/// The summary table, columns aligned.
pub fn table(rows: &[SummaryRow]) -> String {
    let head = [
        "story",
        "outcome",
        "iterations",
        "time",
        "tokens",
        "cost",
        "branch",
    ];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.story.clone(),
                r.outcome.clone(),
                r.iterations.to_string(),
                ralph_state::time::format_duration(r.seconds),
                r.tokens.to_string(),
                if r.cost.0 > 0 {
                    r.cost.dollars()
                } else {
                    "–".to_owned()
                },
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
    use ralph_state::fields::stories::valid_id;

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
    fn duplicate_ids_are_found_in_linear_time() {
        let n = 40_000;
        let list: Vec<String> = (0..n).map(|i| format!(r#"{{"id":"US-{i}"}}"#)).collect();
        let prd = format!(r#"{{"userStories":[{}]}}"#, list.join(","));
        let started = std::time::Instant::now();
        assert_eq!(stories(&prd).unwrap().len(), n);
        // Quadratic, this took 38 s in a release build (minutes unoptimised); linear, well
        // under a second even unoptimised, so 30 s holds on a saturated machine too.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        let twice = prd.replace(r#"{"id":"US-39999"}"#, r#"{"id":"US.7"},{"id":"US_7"}"#);
        let e = stories(&twice).unwrap_err().to_string();
        assert!(
            e.contains("userStories[40000].id") && e.contains("used twice"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_id_names_the_file_and_field() {
        let e = stories(r#"{"userStories":[{"id":"ok"},{"id":"../../x; rm -rf /"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("ralph/prd.json: userStories[1].id"), "{e}");
        let e = stories(r#"{"userStories":[{"id":"a.b"},{"id":"a_b"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("used twice"), "{e}");
        let e = stories(r#"{"userStories":[{"title":"no id"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("userStories[0].id is missing"), "{e}");
        assert!(
            stories("{")
                .unwrap_err()
                .to_string()
                .contains("not valid JSON")
        );
    }

    #[test]
    fn prd_errors_read_as_the_user_has_always_seen_them() {
        let said = |prd: &str| stories(prd).unwrap_err().to_string();
        assert_eq!(
            said(r#"{"userStories":[{"id":"a b"}]}"#),
            "ralph/prd.json: userStories[0].id = \"a b\" cannot name a branch: use ASCII letters, digits, `.`, `_` and `-` only (at most 64, not starting with `-` or `.`), e.g. \"US-001\""
        );
        assert_eq!(
            said(r#"{"userStories":[{"id":"a.b"},{"id":"a_b"}]}"#),
            "ralph/prd.json: userStories[1].id: the id \"a_b\" is used twice; every story needs its own"
        );
        assert_eq!(
            said(r#"{"stories":[]}"#),
            "ralph/prd.json: the field `userStories` is missing or not a list; see `ralph init` for the shape"
        );
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
        // Exactly one value changes: big numbers and duplicate keys stay.
        let text = "{\n  \"userStories\": [\n    {\"id\": \"A\", \"passes\": false, \"estimate\": 123456789012345678901234567890, \"x\": 1, \"x\": 2}\n  ]\n}\n";
        assert_eq!(
            set_passes(text, "A").unwrap(),
            text.replace("false", "true")
        );
        let no_field = "{\"userStories\": [{\"id\": \"A\"}]}";
        assert_eq!(
            set_passes(no_field, "A").unwrap(),
            "{\"userStories\": [{\"id\": \"A\", \"passes\": true}]}"
        );
        assert_eq!(
            set_passes(PRD_TEXT, "US-9").unwrap_err().to_string(),
            "ralph/prd.json: no story with id \"US-9\" in `userStories` any more"
        );
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
            cost_usd: ralph_state::money::Money(0),
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
        let t = table(&[SummaryRow {
            story: "US-001".into(),
            outcome: "merged".into(),
            iterations: 2,
            seconds: 61,
            tokens: 0,
            branch: "ralph/US-001".into(),
            cost: ralph_state::money::Money(1_250_000),
        }]);
        assert!(t.lines().nth(1).unwrap().contains(" $1.25 "), "{t}");
        assert!(t.starts_with("story   outcome"), "{t}");
        assert!(t.lines().nth(1).unwrap().ends_with("ralph/US-001"));
        let t = tasks(&["fix a\nmore".into(), "other".into()]);
        assert_eq!(t[0].title, "fix a");
        assert!(t[0].id.starts_with("task-") && t[0].id.len() == 13 && valid_id(&t[0].id));
        assert_ne!(t[0].id, t[1].id);
        assert_eq!(t[0].id, tasks(&["fix a\nmore".into()])[0].id);
    }

    fn record(state: StoryState) -> StoryRecord {
        StoryRecord {
            state,
            ..StoryRecord::ended("US-1.a", "max_iterations", 2, 7, 9)
        }
    }

    #[test]
    fn a_child_runs_exit_decides_where_its_story_goes() {
        let ended = record(StoryState::Ended);
        assert_eq!(
            after_run(ended.clone(), Some(0), true, "wt"),
            AfterRun::BringHome(ended.clone())
        );
        let AfterRun::Stays(cancelled) = after_run(ended.clone(), Some(130), true, "wt") else {
            panic!("Ctrl-C keeps the story")
        };
        assert_eq!(cancelled.state, StoryState::Cancelled);
        assert_eq!(cancelled.outcome, "cancelled");
        assert_eq!(
            cancelled.note,
            "stopped by Ctrl-C; kept in wt; the next run resumes it"
        );
        // Exit 0 without a completed loop, another code, or killed: kept for inspection.
        for (code, said) in [(Some(0), "exit 0"), (Some(3), "exit 3"), (None, "killed")] {
            let AfterRun::Stays(kept) = after_run(ended.clone(), code, false, "wt") else {
                panic!("{code:?} keeps the story")
            };
            assert_eq!(kept.state, StoryState::Ended);
            assert_eq!(
                kept.note,
                format!(
                    "its loop ended as max_iterations ({said}); kept for inspection in wt until `ralph clean`; `ralph log --name US-1_a` there shows why; the next run starts it again"
                )
            );
        }
    }

    #[test]
    fn each_way_home_has_its_state_and_note() {
        use crate::fleet::error::FleetError;
        use ralph_core::decide::observation::Verification;
        let trip = Trip {
            branch: "ralph/a",
            base: "main",
            shown: "wt",
        };
        let cases = [
            (
                Homecoming::SwitchedBranch {
                    head: "elsewhere".into(),
                },
                StoryState::MergeFailed,
                "its worktree wt is on elsewhere, not ralph/a (the agent switched branches); nothing was merged. Bring the work onto ralph/a there, then run again",
            ),
            (
                Homecoming::NotCommitted(FleetError::DetachedHead),
                StoryState::MergeFailed,
                "could not commit the loop's work in wt: the main tree is not on a branch",
            ),
            (
                Homecoming::Conflict,
                StoryState::Conflict,
                "conflicts with main; nothing was forced. Resolve: cd wt && git rebase main (fix, git add, git rebase --continue), then run the same `ralph run --parallel` again",
            ),
            (
                Homecoming::RebaseFailed(FleetError::NotAllRemoved),
                StoryState::MergeFailed,
                "the rebase onto main failed: some worktrees were not removed; the story stays on ralph/a",
            ),
            (
                Homecoming::VerifyFailed {
                    command: "make test".into(),
                    verification: Verification {
                        passed: false,
                        status: "exit 2".into(),
                        output_tail: "bad\x1b[2J\n\n".into(),
                        ..Verification::default()
                    },
                },
                StoryState::VerifyFailed,
                "`make test` failed (exit 2) on ralph/a rebased onto main; fix it in wt, then run again. Output:\nbad\\x1b[2J",
            ),
            (
                Homecoming::Ready,
                StoryState::Ready,
                "rebased onto main and verified; left on ralph/a",
            ),
            (
                Homecoming::MergeRefused(FleetError::NotAllRemoved),
                StoryState::MergeFailed,
                "the merge into main was refused: some worktrees were not removed; the story stays on ralph/a",
            ),
            (Homecoming::Merged, StoryState::Merged, ""),
        ];
        for (home, state, note) in cases {
            let said = format!("{home:?}");
            let out = home.record(record(StoryState::Ended), trip);
            assert_eq!(out.state, state, "{said}");
            assert!(out.note.starts_with(note), "{said}: {}", out.note);
            assert_eq!(out.outcome, "completed", "{said}");
            assert_eq!((out.iterations, out.tokens, out.seconds), (2, 7, 9));
        }
    }

    #[test]
    fn rows_marks_and_whether_all_came_home() {
        let rows: Vec<SummaryRow> = [StoryState::Merged, StoryState::Ready]
            .map(|s| SummaryRow::of("US-1.a", &record(s)))
            .into();
        assert!(all_home(&rows));
        assert_eq!(rows[0].branch, "ralph/US-1.a");
        assert_eq!((rows[1].outcome.as_str(), rows[1].tokens), ("ready", 7));
        let mut rows = rows;
        rows.push(SummaryRow::of("b", &record(StoryState::Conflict)));
        assert_eq!(
            rows[2].story, "b",
            "the id ralph checked, not the record's field"
        );
        assert!(!all_home(&rows));
        assert!(all_home(&[]));
        assert_eq!(mark(StoryState::Ready), "✓");
        assert_eq!(mark(StoryState::Cancelled), "⏹");
        assert_eq!(mark(StoryState::VerifyFailed), "✗");
        let not = StoryRecord::not_started("a", &crate::fleet::error::FleetError::NotAllRemoved);
        assert_eq!(
            (not.outcome.as_str(), not.note.as_str()),
            ("not_started", "some worktrees were not removed")
        );
    }
}
