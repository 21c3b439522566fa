//! `ralph run --parallel N`, `ralph plan` and `ralph clean` through the real
//! binary, with a scripted agent in real git worktrees: stories that
//! complete, conflict, hit their limit or are interrupted each end as the
//! issue says, the PRD and the branches say so, and a second run resumes
//! only what is open.

#![cfg(unix)] // sh agents, `kill -INT`, symlinks: Unix only
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{BIN, text};

/// The scripted agent. It knows its story by its branch and counts its
/// calls in `$FAKE_LOG/<story>.calls`.
/// - US-001 commits `shared.txt` = one and completes.
/// - US-002 waits until US-001 is merged into the main tree, then writes
///   `shared.txt` = two (left uncommitted: ralph commits it) and completes,
///   so its rebase onto main conflicts with US-001's change.
/// - US-003 never finishes, so it hits its limit, unless `$FAKE_LOG/finish`
///   exists; then it writes `three.txt` and completes.
/// - US-006 switches its worktree to another branch before committing.
/// - With `$FAKE_LOG/hold` it waits for `$FAKE_LOG/go` (Ctrl-C tests).
const AGENT: &str = r#"set -eu
cat > /dev/null
story=$(git rev-parse --abbrev-ref HEAD); story=${story#ralph/}
echo x >> "$FAKE_LOG/$story.calls"
echo "${FAKE_KEY:-}" > "$FAKE_LOG/$story.key"
if [ -f "$FAKE_LOG/hold" ]; then i=0; while [ ! -f "$FAKE_LOG/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; fi
case $story in
  US-001) echo one > shared.txt; git add shared.txt; git commit -qm "US-001: shared one"; echo "done <promise>DONE</promise>" ;;
  US-002) i=0; while [ ! -f "$FAKE_MAIN/shared.txt" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
          echo two > shared.txt; echo "done <promise>DONE</promise>" ;;
  US-003) if [ -f "$FAKE_LOG/finish" ]; then echo three > three.txt; echo "done <promise>DONE</promise>"; else echo "still working"; fi ;;
  US-006) git checkout -qb elsewhere; echo six > six.txt; git add six.txt; git commit -qm six; echo "done <promise>DONE</promise>" ;;
  *) echo "$story" > "$story.txt"; echo "done <promise>DONE</promise>" ;;
esac
"#;

struct Repo {
    /// The main tree.
    dir: tempfile::TempDir,
    /// HOME (with a .gitconfig), XDG_STATE_HOME, and the agent and its log.
    home: tempfile::TempDir,
}

impl Repo {
    fn new(stories: &[(&str, bool)]) -> Self {
        let repo = Self {
            dir: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
        };
        std::fs::write(
            repo.home.path().join(".gitconfig"),
            "[user]\n\tname = Test\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n",
        )
        .unwrap();
        std::fs::create_dir_all(repo.log()).unwrap();
        std::fs::write(repo.home.path().join("agent.sh"), AGENT).unwrap();
        repo.git(&["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(repo.root().join("ralph")).unwrap();
        let list: Vec<Value> = stories
            .iter()
            .enumerate()
            .map(|(i, (id, passes))| {
                json!({"id": id, "title": format!("Story {id}"), "description": "Do it.",
                       "acceptanceCriteria": ["works"], "priority": i + 1, "passes": passes, "notes": ""})
            })
            .collect();
        let prd = json!({"project": "P", "branchName": "ralph/p", "userStories": list});
        std::fs::write(
            repo.root().join("ralph/prd.json"),
            serde_json::to_string_pretty(&prd).unwrap(),
        )
        .unwrap();
        std::fs::write(repo.root().join("README"), "hello\n").unwrap();
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-qm", "start"]);
        repo
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn log(&self) -> PathBuf {
        self.home.path().join("agent-log")
    }

    fn env(&self, cmd: &mut Command) {
        crate::support::scrub(cmd)
            .env("HOME", self.home.path())
            .env("XDG_STATE_HOME", self.home.path().join(".local/state"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("FAKE_LOG", self.log())
            .env("FAKE_MAIN", self.root());
    }

    fn git_in(&self, dir: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(dir).args(args);
        self.env(&mut cmd);
        cmd.output().unwrap()
    }

    fn git(&self, args: &[&str]) -> String {
        let out = self.git_in(self.root(), args);
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn ralph(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .current_dir(self.root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.env(&mut cmd);
        cmd
    }

    fn agent(&self) -> String {
        format!("sh {}", self.home.path().join("agent.sh").display())
    }

    /// `ralph run --parallel N --agent AGENT ARGS…` in the main tree, not started yet.
    fn parallel(&self, n: &str, agent: &str, args: &[&str]) -> Command {
        let mut all = vec!["run", "--parallel", n, "--agent", agent];
        all.extend_from_slice(args);
        self.ralph(&all)
    }

    /// `ralph run --parallel N ARGS…` with the scripted agent, run to its end.
    fn scripted(&self, n: &str, args: &[&str]) -> Output {
        self.parallel(n, &self.agent(), args).output().unwrap()
    }

    /// `ralph run --parallel N ARGS…` with the scripted agent on a terminal of the user's,
    /// answered yes: a code given (`--approve-commands`) is the user's own step (issue 46).
    fn scripted_approved(&self, n: &str, args: &[&str]) -> Output {
        let agent = self.agent();
        let mut all = vec!["run", "--parallel", n, "--agent", &agent];
        all.extend_from_slice(args);
        let home = self.home.path();
        let state = home.join(".local/state");
        let (log, main) = (self.log(), self.root().to_owned());
        let env = [
            ("HOME", home.to_str().unwrap()),
            ("XDG_STATE_HOME", state.to_str().unwrap()),
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("FAKE_LOG", log.to_str().unwrap()),
            ("FAKE_MAIN", main.to_str().unwrap()),
        ];
        crate::support::project::run_on_terminal(&all, self.root(), &env, "y\n")
    }

    /// Three at a time, two iterations each, verified by the file each story writes.
    fn run_parallel(&self) -> Output {
        self.scripted(
            "3",
            &[
                "--max-iterations",
                "2",
                "--verify",
                "test -f shared.txt || test -f three.txt || test -f US-004.txt",
            ],
        )
    }

    fn calls(&self, story: &str) -> usize {
        std::fs::read_to_string(self.log().join(format!("{story}.calls")))
            .map_or(0, |s| s.lines().count())
    }

    fn passes(&self) -> Vec<bool> {
        let prd: Value = serde_json::from_str(
            &std::fs::read_to_string(self.root().join("ralph/prd.json")).unwrap(),
        )
        .unwrap();
        prd["userStories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["passes"].as_bool().unwrap())
            .collect()
    }

    fn record(&self, story: &str) -> Value {
        let path = self
            .root()
            .join(format!(".claude/ralph/stories/{story}.json"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn worktree(&self, story: &str) -> PathBuf {
        self.root().join(format!(".ralph/worktrees/{story}"))
    }

    /// The code `ralph plan` shows for the PRD's story commands.
    fn approval_code(&self) -> String {
        let out = self.ralph(&["plan"]).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        crate::prd::approval_code(&text(&out))
            .unwrap_or_else(|| panic!("no approval code in: {}", text(&out)))
    }

    /// Gives the PRD's first story the check `command` and commits it.
    fn with_story_command(&self, command: &str) {
        let path = self.root().join("ralph/prd.json");
        let mut value: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        value["userStories"][0]["verify"] = json!(command);
        std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
        self.git(&["commit", "-qam", "a story command"]);
    }

    fn show(&self, what: &str) -> String {
        self.git(&["show", what])
    }
}

#[test]
fn three_stories_complete_conflict_and_hit_the_limit_then_resume_only_what_is_open() {
    let repo = Repo::new(&[("US-001", false), ("US-002", false), ("US-003", false)]);
    let out = repo.run_parallel();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(3), "{all}");
    first_run_merges_one_keeps_a_conflict_and_one_at_its_limit(&repo, &all);
    first_run_leaves_a_summary_the_histories_and_a_plan(&repo, &all);
    second_run_resumes_only_what_is_open(&repo);
    a_conflict_resolved_on_its_branch_comes_home(&repo);

    // Nothing open: a run changes nothing; clean has nothing left to remove.
    let out = repo.run_parallel();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = repo.ralph(&["clean"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// After the first run (`all`: what it printed).
fn first_run_merges_one_keeps_a_conflict_and_one_at_its_limit(repo: &Repo, all: &str) {
    // US-001 completed, was verified on main and merged; the PRD says so.
    assert_eq!(repo.passes(), [true, false, false], "{all}");
    assert_eq!(repo.show("main:shared.txt"), "one\n");
    assert_eq!(repo.record("US-001")["state"], "merged");
    assert!(
        !repo.worktree("US-001").exists(),
        "a merged story's worktree goes"
    );

    // US-002 conflicted: nothing forced, its work is on its branch, the
    // rebase was aborted, and the command to resolve it is shown.
    assert_eq!(repo.record("US-002")["state"], "conflict", "{all}");
    assert_eq!(
        repo.show("ralph/US-002:shared.txt"),
        "two\n",
        "nothing is lost"
    );
    assert!(repo.worktree("US-002").is_dir());
    let rebasing = repo.git_in(&repo.worktree("US-002"), &["status"]);
    assert!(
        !String::from_utf8_lossy(&rebasing.stdout).contains("rebase"),
        "the rebase was aborted"
    );
    assert!(all.contains("git rebase main"), "{all}");

    // US-003 hit its limit and is kept for inspection.
    let us3 = repo.record("US-003");
    assert_eq!(us3["state"], "ended");
    assert_eq!(us3["outcome"], "max_iterations", "{us3}");
    assert_eq!(us3["iterations"], 2);
    assert!(repo.worktree("US-003").is_dir());
    assert!(
        repo.git_in(repo.root(), &["rev-parse", "--verify", "ralph/US-003"])
            .status
            .success()
    );
}

/// After the first run (`all`: what it printed).
fn first_run_leaves_a_summary_the_histories_and_a_plan(repo: &Repo, all: &str) {
    // The summary table, and each loop's own history kept in the main tree.
    assert!(all.contains("story") && all.contains("iterations") && all.contains("branch"));
    assert!(all.contains("ralph/US-002"), "{all}");
    let history: Vec<String> = std::fs::read_dir(repo.root().join(".claude/ralph/history"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for story in ["US-001", "US-002", "US-003"] {
        assert!(history.iter().any(|h| h.contains(story)), "{history:?}");
    }
    // ralph's folders stay out of `git status` of the main tree.
    assert_eq!(
        repo.git(&["status", "--porcelain", "--", ".claude", ".ralph"]),
        ""
    );
    assert_eq!(
        (
            repo.calls("US-001"),
            repo.calls("US-002"),
            repo.calls("US-003")
        ),
        (1, 1, 2)
    );
    let plan = repo.ralph(&["plan"]).output().unwrap();
    let plan = String::from_utf8_lossy(&plan.stdout).into_owned();
    assert!(
        plan.contains("US-002  conflict  Story US-002")
            && plan.contains("US-003  ended  Story US-003"),
        "{plan}"
    );
    assert!(!plan.contains("US-001"), "{plan}");
}

/// Second run: only what is open. US-003 runs again (now it finishes);
/// US-002's loop does not, only its rebase is tried again.
fn second_run_resumes_only_what_is_open(repo: &Repo) {
    std::fs::write(repo.log().join("finish"), "").unwrap();
    let out = repo.run_parallel();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(3), "{all}");
    assert_eq!(
        (
            repo.calls("US-001"),
            repo.calls("US-002"),
            repo.calls("US-003")
        ),
        (1, 1, 3),
        "{all}"
    );
    assert_eq!(repo.passes(), [true, false, true], "{all}");
    assert_eq!(repo.show("main:three.txt"), "three\n");
    assert_eq!(repo.record("US-002")["state"], "conflict");
    assert!(!repo.worktree("US-003").exists());
}

/// The user resolves US-002 on its branch; the next run brings it home.
fn a_conflict_resolved_on_its_branch_comes_home(repo: &Repo) {
    let wt = repo.worktree("US-002");
    let _ = repo.git_in(&wt, &["rebase", "main"]);
    std::fs::write(wt.join("shared.txt"), "one\ntwo\n").unwrap();
    assert!(repo.git_in(&wt, &["add", "shared.txt"]).status.success());
    let cont = repo.git_in(&wt, &["-c", "core.editor=true", "rebase", "--continue"]);
    assert!(cont.status.success());
    let out = repo.run_parallel();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.passes(), [true, true, true]);
    assert_eq!(repo.show("main:shared.txt"), "one\ntwo\n");
    assert_eq!(repo.calls("US-002"), 1, "its loop never ran again");
}

#[test]
fn ctrl_c_cancels_every_loop_and_the_next_run_resumes_them() {
    let repo = Repo::new(&[("US-004", false), ("US-005", false)]);
    std::fs::write(repo.log().join("hold"), "").unwrap();
    let child = repo
        .parallel("2", &repo.agent(), &["--max-iterations", "3"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while repo.calls("US-004") == 0 || repo.calls("US-005") == 0 {
        assert!(Instant::now() < deadline, "both agents should start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(130), "{all}");
    for story in ["US-004", "US-005"] {
        assert_eq!(repo.record(story)["state"], "cancelled", "{all}");
        assert!(repo.worktree(story).is_dir());
    }
    assert_eq!(repo.passes(), [false, false]);

    // `ralph clean` removes the kept worktrees; the branches stay.
    let out = repo.ralph(&["clean"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("its branch ralph/US-004 stays"),
        "{}",
        text(&out)
    );
    for story in ["US-004", "US-005"] {
        assert!(!repo.worktree(story).exists());
        let branch = format!("ralph/{story}");
        assert!(
            repo.git_in(repo.root(), &["rev-parse", "--verify", &branch])
                .status
                .success()
        );
    }

    // Resumed: both run again (on their branches, in new worktrees) and complete.
    std::fs::remove_file(repo.log().join("hold")).unwrap();
    let out = repo.scripted("2", &["--max-iterations", "3"]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert_eq!(repo.passes(), [true, true], "{all}");
    assert_eq!(repo.show("main:US-004.txt"), "US-004\n");
    assert_eq!(repo.show("main:US-005.txt"), "US-005\n");
}

/// A story agent for `ralph say --story`: call N of a story saves its prompt as
/// `$FAKE_LOG/<story>.prompt-N`, waits for `$FAKE_LOG/<story>.go-N`, and completes at its
/// second call.
const HELD_STORY_AGENT: &str = r#"story=$(git rev-parse --abbrev-ref HEAD); story=${story#ralph/}
n=$(cat "$FAKE_LOG/$story.n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$FAKE_LOG/$story.n"
cat > "$FAKE_LOG/$story.tmp"; mv "$FAKE_LOG/$story.tmp" "$FAKE_LOG/$story.prompt-$n"
i=0; while [ ! -f "$FAKE_LOG/$story.go-$n" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done
if [ $n -ge 2 ]; then echo "$story" > "$story.txt"; echo "done"; echo "<promise>DONE</promise>"; else echo working; fi
"#;

#[test]
fn guidance_for_one_story_reaches_only_that_storys_next_iteration() {
    let repo = Repo::new(&[("US-004", false), ("US-005", false)]);
    let agent = repo.home.path().join("held.sh");
    std::fs::write(&agent, HELD_STORY_AGENT).unwrap();
    let run = repo
        .parallel(
            "2",
            &format!("sh {}", agent.display()),
            &["--max-iterations", "3"],
        )
        .spawn()
        .unwrap();
    let prompt = |story: &str, n: usize| {
        let path = repo.log().join(format!("{story}.prompt-{n}"));
        let deadline = Instant::now() + Duration::from_secs(120);
        while !path.exists() {
            assert!(
                Instant::now() < deadline,
                "{story} was never called a {n}th time"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::read_to_string(path).unwrap()
    };
    let go = |story: &str, n: usize| {
        std::fs::write(repo.log().join(format!("{story}.go-{n}")), "").unwrap();
    };
    prompt("US-004", 1);
    prompt("US-005", 1);
    let out = repo
        .ralph(&["say", "--story", "US-004", "the API is /v2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    for story in ["US-004", "US-005"] {
        go(story, 1);
    }
    assert!(prompt("US-004", 2).contains("- the API is /v2"));
    assert!(!prompt("US-005", 2).contains("the API is /v2"));
    for story in ["US-004", "US-005"] {
        go(story, 2);
    }
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = repo
        .ralph(&["say", "--story", "US-009", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn flags_a_child_would_refuse_are_refused_once_before_anything_runs() {
    let repo = Repo::new(&[("US-001", false)]);
    let out = repo
        .parallel("2", "codex", &["--permission-mode", "acceptEdits"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--permission-mode goes with the default agent"));
    let out = repo.ralph(&["run", "--story", "US-001"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "--story needs --parallel");
    assert!(!repo.root().join(".ralph/worktrees").exists());
}

#[test]
fn what_the_user_got_wrong_is_a_usage_error_before_anything_runs() {
    let repo = Repo::new(&[("US-001", false)]);
    let cases: [(&[&str], &str); 4] = [
        (
            &["run", "--parallel", "2", "--force"],
            "--hand-back-after and --force go with a single loop, not with --parallel",
        ),
        (
            &["run", "--parallel", "2", "--prd=other.json"],
            "another PRD (--prd=PATH) is for a single loop",
        ),
        (
            &["run", "--parallel", "2", "--story", "US-001", "a task"],
            "with tasks on the command line, leave it out",
        ),
        (
            &["run", "--parallel", "2", "--story", "US-009"],
            "--story US-009: no story with that id in ralph/prd.json",
        ),
    ];
    for (args, said) in cases {
        let out = repo.ralph(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(said), "{args:?}: {}", text(&out));
    }
    std::fs::remove_file(repo.root().join("ralph/prd.json")).unwrap();
    let out = repo.ralph(&["run", "--parallel", "2"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no ralph/prd.json here: write one"));
    assert!(!repo.root().join(".ralph/worktrees").exists());
}

#[test]
fn a_planted_record_brings_nothing_home_without_ralphs_own_worktree() {
    let repo = Repo::new(&[("US-004", false)]);
    // A branch with someone's commit, and a record that says its loop completed.
    repo.git(&["branch", "ralph/US-004"]);
    let planted = repo.root().join(".ralph/worktrees/US-004");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::create_dir_all(repo.root().join(".claude/ralph/stories")).unwrap();
    std::fs::write(
        repo.root().join(".claude/ralph/stories/US-004.json"),
        json!({"story": "US-004", "state": "conflict", "outcome": "completed", "iterations": 1,
               "tokens": 0, "seconds": 0, "branch": "ralph/US-004", "note": ""})
        .to_string(),
    )
    .unwrap();
    let out = repo.scripted("1", &["--max-iterations", "2"]);
    let all = text(&out);
    assert_eq!(repo.calls("US-004"), 0, "{all}");
    assert!(all.contains("is not a worktree on ralph/US-004"), "{all}");
    assert_eq!(repo.passes(), [false], "nothing was merged: {all}");
    assert!(
        repo.git_in(repo.root(), &["show", "main:US-004.txt"])
            .stdout
            .is_empty()
    );
}

/// `--agent codex` / `gemini`: each child resolves the preset itself. Stand-in
/// `codex` and `gemini` programs on PATH (the scripted agent) show that the
/// preset's command line is what runs in each worktree.
#[test]
fn agent_presets_run_in_every_story() {
    let repo = Repo::new(&[("US-004", false), ("US-005", false)]);
    let bin = repo.home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["codex", "gemini"] {
        let script = format!(
            "#!/bin/sh\necho \"$*\" > \"$FAKE_LOG/{name}.args\"\nexec sh {}\n",
            repo.home.path().join("agent.sh").display()
        );
        let path = bin.join(name);
        std::fs::write(&path, script).unwrap();
        let mut perm = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&path, perm).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (preset, story) in [("codex", "US-004"), ("gemini", "US-005")] {
        let out = repo
            .parallel("2", preset, &["--story", story])
            .env("PATH", &path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{preset}: {}", text(&out));
        assert_eq!(repo.calls(story), 1);
    }
    let codex = std::fs::read_to_string(repo.log().join("codex.args")).unwrap();
    assert!(
        codex.contains("exec --skip-git-repo-check --sandbox workspace-write"),
        "{codex}"
    );
    let gemini = std::fs::read_to_string(repo.log().join("gemini.args")).unwrap();
    assert!(
        gemini.contains("--approval-mode=yolo -p") && gemini.contains("US-005"),
        "{gemini}"
    );
    assert_eq!(repo.passes(), [true, true]);
}

#[test]
fn an_agent_that_switches_branches_gets_nothing_merged() {
    let repo = Repo::new(&[("US-006", false)]);
    let out = repo.scripted("1", &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(3), "{all}");
    assert_eq!(repo.record("US-006")["state"], "merge_failed");
    assert!(all.contains("is on elsewhere, not ralph/US-006"), "{all}");
    assert_eq!(repo.passes(), [false]);
    assert!(
        !repo
            .git_in(repo.root(), &["show", "main:six.txt"])
            .status
            .success()
    );
    assert_eq!(
        repo.show("elsewhere:six.txt"),
        "six\n",
        "the work is where the agent put it"
    );
}

#[test]
fn plan_prints_the_open_stories_as_a_matrix() {
    let repo = Repo::new(&[("US-001", true), ("US-002", false), ("a.b_c", false)]);
    let out = repo.ralph(&["plan", "--matrix"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        m,
        json!({"include": [
            {"story": "US-002", "title": "Story US-002", "branch": "ralph/US-002"},
            {"story": "a.b_c", "title": "Story a.b_c", "branch": "ralph/a.b_c"},
        ]})
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

#[test]
fn a_story_id_that_cannot_be_a_branch_is_refused_before_anything_runs() {
    let repo = Repo::new(&[("US-001", false), ("$(touch pwned)", false)]);
    for args in [
        &["plan", "--matrix"][..],
        &["run", "--parallel", "2", "--agent", "true"][..],
    ] {
        let out = repo.ralph(args).output().unwrap();
        let all = text(&out);
        assert!(!out.status.success(), "{all}");
        assert!(all.contains("ralph/prd.json: userStories[1].id"), "{all}");
    }
    assert!(!repo.root().join("pwned").exists());
    assert!(!repo.root().join(".ralph/worktrees").exists());
}

/// The fleet's per-job script (.github/actions/ralph-story/run-story.sh),
/// as a GitHub job runs it, against a local bare repository: no network,
/// no `gh` (the pull request is the action's separate step).
#[test]
fn the_fleet_job_script_runs_one_story_and_pushes_its_branch() {
    let repo = Repo::new(&[("US-001", false), ("US-003", false)]);
    let origin = repo.home.path().join("origin.git");
    assert!(
        Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(&origin)
            .status()
            .unwrap()
            .success()
    );
    repo.git(&["remote", "add", "origin", origin.to_str().unwrap()]);
    repo.git(&["push", "-q", "origin", "main"]);
    let out_dir = repo.home.path().join("out");
    let job = |story: &str| fleet_job(&repo, story, &out_dir);
    let in_origin = |what: &str| {
        let mut cmd = Command::new("git");
        cmd.arg("--git-dir").arg(&origin).args(["show", what]);
        repo.env(&mut cmd);
        cmd.output().unwrap()
    };

    // What an agent could leave in the checkout for the push: a hook, and
    // a remote that points elsewhere (the push goes to REMOTE, never a name).
    let hook = repo.root().join(".git/hooks/pre-push");
    let marker = repo.home.path().join("pre-push-ran");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch '{}'\n", marker.display())).unwrap();
    let mut perm = std::fs::metadata(&hook).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&hook, perm).unwrap();
    repo.git(&["config", "remote.origin.url", "/nonexistent/elsewhere.git"]);
    let (out, outputs) = job("US-001");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!marker.exists(), "the checkout's pre-push hook ran");
    assert!(
        outputs.contains("outcome=ready") && outputs.contains("branch=ralph/US-001"),
        "{outputs}"
    );
    assert_eq!(
        String::from_utf8_lossy(&in_origin("ralph/US-001:shared.txt").stdout),
        "one\n"
    );
    let body = std::fs::read_to_string(out_dir.join("pr-body.md")).unwrap();
    assert!(
        body.contains("**US-001**") && body.contains("**ready**"),
        "{body}"
    );
    assert!(body.contains("Decision log"), "{body}");
    assert!(
        body.contains("receipt: `test -f shared.txt` exit 0"),
        "the pull request shows the gate's receipt: {body}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.log().join("US-001.key")).unwrap(),
        "sekrit\n"
    );
    assert_eq!(
        repo.passes(),
        [false, false],
        "a fleet job merges nothing: its pull request does"
    );
    assert!(!in_origin("main:shared.txt").status.success());

    // A story that hits its limit: not ready, no pull request (exit 3).
    let (out, outputs) = job("US-003");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(outputs.contains("outcome=ended"), "{outputs}");

    // Left ready on its branch; a local run that merges brings it home
    // without running its loop again.
    let out = repo.scripted("1", &["--story", "US-001"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.calls("US-001"), 1);
    assert_eq!(repo.passes(), [true, false]);

    // An id from a matrix that could not be a branch never reaches git.
    let (out, _) = job("x;touch pwned");
    assert_eq!(out.status.code(), Some(2));
    assert!(!repo.root().join("pwned").exists());
}

/// The fleet's per-job script run for `story` as a GitHub job runs it (its
/// files in `out_dir`): what it printed, and what it wrote to `GITHUB_OUTPUT`.
fn fleet_job(repo: &Repo, story: &str, out_dir: &Path) -> (Output, String) {
    fleet_job_with(repo, story, out_dir, &[])
}

/// [`fleet_job`] with more of the job's environment (`vars`).
fn fleet_job_with(
    repo: &Repo,
    story: &str,
    out_dir: &Path,
    vars: &[(&str, &str)],
) -> (Output, String) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.github/actions/ralph-story/run-story.sh"
    );
    let safe: String = story.chars().filter(char::is_ascii_alphanumeric).collect();
    let outputs = repo.home.path().join(format!("{safe}.outputs"));
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .current_dir(repo.root())
        .env("STORY", story)
        .env("AGENT", repo.agent())
        .env("RALPH", BIN)
        .env("MAX_ITERATIONS", "2")
        .env("VERIFY", "test -f shared.txt")
        .env("AGENT_KEY_ENV", "FAKE_KEY")
        .env("AGENT_KEY", "sekrit")
        .env("OUT", out_dir)
        .env("REMOTE", repo.home.path().join("origin.git"))
        .env("GITHUB_OUTPUT", &outputs)
        .envs(vars.iter().copied())
        .stdin(Stdio::null());
    repo.env(&mut cmd);
    let out = cmd.output().unwrap();
    (out, std::fs::read_to_string(&outputs).unwrap_or_default())
}

use crate::support::{client, mock_api};

/// One story with the real Claude Code client (the default agent) against
/// the scripted mock API: it writes a file in its worktree with
/// `--permission-mode acceptEdits`, gives the promise, and the story comes
/// home. Skipped (loudly) without the client, except on CI.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn e2e_the_real_client_completes_a_story_in_its_worktree() {
    let Some(sandbox) = client::Sandbox::new("parallel e2e") else {
        return;
    };
    let project = sandbox.project().to_path_buf();
    let home = sandbox.home.path().to_path_buf();
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = Test\n\temail = test@example.com\n",
    )
    .unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(&project)
            .args(args)
            .env("HOME", &home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(project.join("ralph")).unwrap();
    std::fs::write(
        project.join("ralph/prd.json"),
        r#"{"userStories":[{"id":"US-001","title":"Notes","description":"Write notes.txt","passes":false}]}"#,
    )
    .unwrap();
    git(&["add", "ralph/prd.json"]);
    git(&["commit", "-qm", "start"]);

    let target = project.join(".ralph/worktrees/US-001/notes.txt");
    let api = mock_api::MockApi::start(vec![
        mock_api::Reply::write("Writing the notes.", target.to_str().unwrap(), "notes\n"),
        mock_api::Reply::text("Wrote notes.txt.\n<promise>DONE</promise>"),
    ]);
    let out = sandbox.ralph_with_client(
        &api,
        &[
            "run",
            "--parallel",
            "1",
            "--permission-mode",
            "acceptEdits",
            "--verify",
            "test -f notes.txt",
            "--max-iterations",
            "3",
        ],
        &[("GIT_CONFIG_NOSYSTEM", "1")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(git(&["show", "main:notes.txt"]), "notes\n");
    assert_eq!(
        std::fs::read_to_string(project.join("ralph/prd.json")).unwrap(),
        r#"{"userStories":[{"id":"US-001","title":"Notes","description":"Write notes.txt","passes":true}]}"#,
        "only the one value changed"
    );
}

/// An agent that runs no git itself (git would run the planted programs for
/// it, which would prove nothing about ralph): it knows its story by its
/// worktree's folder and edits one line of `shared.txt`, its own.
const GITLESS_AGENT: &str = r#"cat > /dev/null
story=$(basename "$PWD")
case $story in
  US-A) sed -i 's/^one$/ONE/' shared.txt ;;
  *) sed -i 's/^five$/FIVE/' shared.txt ;;
esac
echo "done <promise>DONE</promise>"
"#;

/// A program that, if anything runs it, leaves `ran/<name>` behind.
fn planted_program(repo: &Repo, name: &str) -> String {
    let ran = repo.home.path().join("ran");
    std::fs::create_dir_all(&ran).unwrap();
    let bin = repo.home.path().join("planted");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\ntouch '{}/{name}'\ncat\n", ran.display()),
    )
    .unwrap();
    let mut perm = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&path, perm).unwrap();
    path.display().to_string()
}

fn ran(repo: &Repo) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.home.path().join("ran"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A stranger's checkout: every program its `.git/config` can name, and
/// hooks, planted; a smudge filter hidden under `includeIf onbranch:` that
/// only a story's branch turns on.
fn plant_programs(repo: &Repo) {
    let git_dir = repo.root().join(".git");
    let config = |key: &str, name: &str| {
        let program = planted_program(repo, name);
        repo.git(&["config", key, &program]);
    };
    config("core.fsmonitor", "fsmonitor");
    config("core.pager", "pager");
    config("pager.status", "pager-status");
    config("core.editor", "editor");
    config("sequence.editor", "sequence-editor");
    config("core.sshCommand", "ssh");
    config("credential.helper", "credential");
    config("gpg.program", "gpg");
    config("diff.external", "external-diff");
    config("diff.planted.textconv", "textconv");
    config("diff.planted.command", "diff-command");
    config("merge.planted.driver", "merge-driver");
    config("filter.planted.clean", "clean");
    repo.git(&["config", "commit.gpgSign", "true"]);
    repo.git(&["config", "tag.gpgSign", "true"]);
    repo.git(&["config", "merge.verifySignatures", "true"]);
    repo.git(&["config", "log.showSignature", "true"]);
    let smudge = planted_program(repo, "smudge");
    std::fs::write(
        git_dir.join("on-branch.cfg"),
        format!("[filter \"hidden\"]\n\tsmudge = {smudge}\n\tclean = {smudge}\n"),
    )
    .unwrap();
    repo.git(&[
        "config",
        "includeIf.onbranch:ralph/**.path",
        "on-branch.cfg",
    ]);
    for hook in [
        "pre-commit",
        "commit-msg",
        "post-commit",
        "post-checkout",
        "post-merge",
        "post-rewrite",
        "pre-rebase",
        "reference-transaction",
    ] {
        let program = planted_program(repo, hook);
        std::fs::copy(program, git_dir.join("hooks").join(hook)).unwrap();
        let mut perm = std::fs::metadata(git_dir.join("hooks").join(hook))
            .unwrap()
            .permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(git_dir.join("hooks").join(hook), perm).unwrap();
    }
}

#[test]
fn a_planted_git_config_runs_no_program_in_the_whole_fleet() {
    let repo = Repo::new(&[("US-A", false), ("US-B", false)]);
    std::fs::write(
        repo.root().join("shared.txt"),
        "one\ntwo\nthree\nfour\nfive\n",
    )
    .unwrap();
    std::fs::write(
        repo.root().join(".gitattributes"),
        "shared.txt merge=planted diff=planted filter=planted\n* filter=hidden\n",
    )
    .unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "attributes"]);
    plant_programs(&repo);
    std::fs::write(repo.home.path().join("gitless.sh"), GITLESS_AGENT).unwrap();
    let agent = format!("sh {}", repo.home.path().join("gitless.sh").display());
    let out = repo
        .parallel("2", &agent, &["--max-iterations", "2"])
        .output()
        .unwrap();
    let all = text(&out);
    assert_eq!(ran(&repo), Vec::<String>::new(), "{all}");
    // Both loops completed; both edited shared.txt, so the second one home
    // needed a three-way merge, where only the planted driver could have
    // said "merged": blanked, it is a conflict, never forced.
    let mut states =
        [repo.record("US-A"), repo.record("US-B")].map(|r| r["state"].as_str().unwrap().to_owned());
    states.sort();
    assert_eq!(states, ["conflict", "merged"], "{all}");

    // The test can fail: plain git runs the planted programs, the hidden
    // filter included once HEAD is on a story's branch.
    let _ = repo.git_in(
        repo.root(),
        &["commit", "-q", "--allow-empty", "-m", "plain"],
    );
    let elsewhere = repo.home.path().join("plain-worktree");
    let _ = repo.git_in(
        repo.root(),
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "ralph/plain",
            elsewhere.to_str().unwrap(),
        ],
    );
    let plain = ran(&repo);
    for name in [
        "pre-commit",
        "gpg",
        "post-checkout",
        "smudge",
        "reference-transaction",
    ] {
        assert!(
            plain.contains(&name.to_owned()),
            "{name} not run by plain git: {plain:?}"
        );
    }
}

#[test]
fn a_base_branch_git_would_read_as_an_option_is_refused_before_anything_runs() {
    let repo = Repo::new(&[("US-004", false)]);
    // A checkout whose HEAD names a branch that `git rebase` would take
    // for `--exec=<command>`.
    let marker = repo.home.path().join("pwned");
    let script = repo.root().join("pwn");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
    )
    .unwrap();
    let mut perm = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).unwrap();
    repo.git(&["add", "pwn"]);
    repo.git(&["commit", "-qm", "pwn"]);
    repo.git(&["update-ref", "refs/heads/--exec=./pwn", "HEAD"]);
    repo.git(&["symbolic-ref", "HEAD", "refs/heads/--exec=./pwn"]);
    let out = repo.scripted("1", &["--max-iterations", "1"]);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("is not a name ralph passes to git"), "{all}");
    assert_eq!(repo.calls("US-004"), 0, "{all}");
    assert!(!marker.exists());
    assert!(!repo.root().join(".ralph/worktrees").exists(), "{all}");
}

#[test]
fn a_user_with_no_git_identity_is_told_so_not_that_the_story_conflicts() {
    let repo = Repo::new(&[("US-A", false), ("US-B", false)]);
    std::fs::write(
        repo.root().join("shared.txt"),
        "one\ntwo\nthree\nfour\nfive\n",
    )
    .unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "shared"]);
    // From here on git knows no name and no email (and may not guess one).
    std::fs::write(
        repo.home.path().join(".gitconfig"),
        "[user]\n\tuseConfigOnly = true\n",
    )
    .unwrap();
    std::fs::write(repo.home.path().join("gitless.sh"), GITLESS_AGENT).unwrap();
    let agent = format!("sh {}", repo.home.path().join("gitless.sh").display());
    let out = repo
        .parallel("2", &agent, &["--max-iterations", "2"])
        .output()
        .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(3), "{all}");
    for story in ["US-A", "US-B"] {
        let record = repo.record(story);
        assert_eq!(record["state"], "merge_failed", "{story}: {all}");
        let note = record["note"].as_str().unwrap();
        assert!(
            note.contains("git knows no name and email to commit with")
                && note.contains("git config --global user.email you@example.com"),
            "{story}: {note}"
        );
    }
    assert!(!all.contains("conflicts with main"), "{all}");
}

/// A story at its limit keeps its worktree; what is uncommitted there is
/// the user's work until it is on the branch.
fn kept_worktree_with_uncommitted_work() -> Repo {
    let repo = Repo::new(&[("US-003", false)]);
    let out = repo.scripted("1", &["--max-iterations", "1"]);
    assert!(repo.worktree("US-003").is_dir(), "{}", text(&out));
    std::fs::write(repo.worktree("US-003").join("precious.txt"), "mine\n").unwrap();
    std::fs::write(repo.worktree("US-003").join("README"), "edited\n").unwrap();
    repo
}

#[test]
fn clean_commits_uncommitted_work_to_its_branch_before_removing_the_worktree() {
    let repo = kept_worktree_with_uncommitted_work();
    let out = repo.ralph(&["clean"]).output().unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("Committed the uncommitted work in .ralph/worktrees/US-003 to ralph/US-003"),
        "{all}"
    );
    assert!(!repo.worktree("US-003").exists(), "{all}");
    assert_eq!(repo.show("ralph/US-003:precious.txt"), "mine\n");
    assert_eq!(repo.show("ralph/US-003:README"), "edited\n");
}

#[test]
fn clean_refuses_to_remove_work_it_cannot_commit_and_says_how() {
    let repo = kept_worktree_with_uncommitted_work();
    std::fs::write(
        repo.home.path().join(".gitconfig"),
        "[user]\n\tuseConfigOnly = true\n",
    )
    .unwrap();
    let out = repo.ralph(&["clean"]).output().unwrap();
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("not removed: it holds uncommitted work")
            && all.contains("git knows no name and email")
            && all.contains("cd .ralph/worktrees/US-003 && git add -A && git commit"),
        "{all}"
    );
    let kept = std::fs::read_to_string(repo.worktree("US-003").join("precious.txt")).unwrap();
    assert_eq!(kept, "mine\n");
}

#[test]
fn marking_a_story_passed_changes_that_one_value_and_no_other_byte() {
    let repo = Repo::new(&[("US-004", false)]);
    let prd = "{\n\t\"project\": \"P\", \"budget\": 123456789012345678901234567890,\n\t\"userStories\": [\n\t\t{\"id\": \"US-004\", \"title\": \"Story\", \"passes\": false, \"tag\": \"a\", \"tag\": \"b\"}\n\t]\n}\n";
    std::fs::write(repo.root().join("ralph/prd.json"), prd).unwrap();
    repo.git(&["commit", "-qam", "prd"]);
    let out = repo.scripted("1", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let after = std::fs::read_to_string(repo.root().join("ralph/prd.json")).unwrap();
    assert_eq!(after, prd.replace("\"passes\": false", "\"passes\": true"));
}

#[test]
fn a_story_comes_home_only_when_its_own_verify_passes() {
    let repo = Repo::new(&[("US-004", false), ("US-005", false), ("US-007", false)]);
    let prd = std::fs::read_to_string(repo.root().join("ralph/prd.json")).unwrap();
    let mut value: Value = serde_json::from_str(&prd).unwrap();
    value["userStories"][0]["verify"] = json!("test -f US-004.txt");
    value["userStories"][1]["verify"] = json!("echo 'no never.txt'; test -f never.txt");
    value["userStories"][2]["blocked"] = json!("needs a person");
    std::fs::write(
        repo.root().join("ralph/prd.json"),
        serde_json::to_string_pretty(&value).unwrap(),
    )
    .unwrap();
    repo.git(&["commit", "-qam", "story checks"]);
    let code = repo.approval_code();
    let out = repo.scripted_approved("2", &["--max-iterations", "2", "--approve-commands", &code]);
    let all = text(&out);
    assert!(
        all.contains("US-004: its check `test -f US-004.txt` runs before it comes home"),
        "{all}"
    );
    assert!(
        all.contains("US-007: blocked (needs a person); skipped"),
        "{all}"
    );
    assert_eq!(repo.record("US-004")["state"], "merged", "{all}");
    // US-005's check refuses its promise inside its own loop, which ends at its limit.
    assert_eq!(repo.record("US-005")["state"], "ended", "{all}");
    assert_eq!(repo.record("US-005")["outcome"], "max_iterations", "{all}");
    assert_eq!(repo.calls("US-005"), 2, "{all}");
    // Its log, not the screen: a status line can be redrawn over before it is seen.
    let log = repo
        .ralph(&["log", "--name", "US-005", "--json"])
        .current_dir(repo.worktree("US-005"))
        .output()
        .unwrap();
    let gates: Vec<Option<bool>> = text(&log)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|l| l.get("verification").map(|v| v["passed"].as_bool()))
        .collect();
    assert_eq!(gates, [Some(false), Some(false)], "{}\n{all}", text(&log));
    assert_eq!(repo.passes(), [true, false, false]);
    assert_eq!(repo.calls("US-007"), 0, "a blocked story never runs");
}

/// Issue 36 item 1, the fleet: a PRD's story commands come from the repository, not from
/// the user. Without a terminal, `ralph run --parallel` starts no agent and runs no story
/// command until `--approve-commands` carries the code of exactly that list (shown by the
/// refusal and by `ralph plan`); a code for another list is refused too.
#[test]
fn the_fleet_runs_no_story_command_until_the_user_approved_exactly_that_list() {
    let repo = Repo::new(&[("US-004", false), ("US-005", false)]);
    // The command runs in the gate's snapshot, confined to it: its mark
    // stays in the snapshot's folder, outside the project.
    let command = "touch story-command-ran; test -f US-004.txt".to_owned();
    repo.with_story_command(&command);
    let ran = || story_command_ran(repo.home.path());

    let out = repo.scripted("2", &["--max-iterations", "1"]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains(&format!("  US-004: {command}"))
            && all.contains("Nothing ran")
            && all.contains("approve-commands"),
        "the refusal lists the command and names the flag: {all}"
    );
    let code = crate::prd::approval_code(&all).expect("the refusal gives the code");
    assert_eq!(
        code,
        repo.approval_code(),
        "`ralph plan` shows the same code"
    );
    assert_eq!(
        repo.calls("US-004") + repo.calls("US-005"),
        0,
        "no agent started: {all}"
    );
    assert!(!ran(), "no story command ran");
    assert!(!repo.root().join(".ralph/worktrees").exists(), "{all}");

    let wrong = repo.scripted_approved(
        "2",
        &[
            "--max-iterations",
            "1",
            "--approve-commands",
            "0123456789ab",
        ],
    );
    assert_eq!(wrong.status.code(), Some(2), "{}", text(&wrong));
    assert!(
        text(&wrong).contains("does not approve"),
        "{}",
        text(&wrong)
    );
    assert_eq!(repo.calls("US-004"), 0);

    let out = repo.scripted_approved("2", &["--max-iterations", "1", "--approve-commands", &code]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert_eq!(repo.calls("US-004"), 1, "{all}");
    assert_eq!(repo.record("US-004")["state"], "merged", "{all}");
    assert!(ran(), "the approved command ran: {all}");
}

/// Whether a story command left its mark (`story-command-ran`) in a gate's
/// snapshot: the gates' folders are in the user's state folder under `home`.
fn story_command_ran(home: &Path) -> bool {
    let gates = home.join(".local/state/ralph/gates");
    std::fs::read_dir(gates).is_ok_and(|places| {
        places
            .flatten()
            .any(|place| place.path().join("tree/story-command-ran").exists())
    })
}

/// The same through the fleet's job script, as a GitHub job runs it (no terminal): the
/// story is refused (exit 2) until the workflow's `approve-commands` input carries the code.
#[test]
fn the_fleet_job_script_runs_story_commands_only_with_the_workflow_s_approval() {
    let repo = Repo::new(&[("US-004", false)]);
    // The command runs in the gate's snapshot, confined to it: its mark
    // stays in the snapshot's folder, outside the project.
    repo.with_story_command("touch story-command-ran; test -f US-004.txt");
    let out_dir = repo.home.path().join("out");
    let job = [("PUSH", "0"), ("VERIFY", "test -f US-004.txt")];
    let (out, outputs) = fleet_job_with(&repo, "US-004", &out_dir, &job);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("  US-004: touch story-command-ran"),
        "{}",
        text(&out)
    );
    assert!(!outputs.contains("outcome=ready"), "{outputs}");
    assert_eq!(repo.calls("US-004"), 0);
    assert!(!story_command_ran(repo.home.path()));

    let code = repo.approval_code();
    let (out, outputs) = fleet_job_with(
        &repo,
        "US-004",
        &out_dir,
        &[job[0], job[1], ("APPROVE_COMMANDS", &code)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(outputs.contains("outcome=ready"), "{outputs}");
    assert_eq!(repo.calls("US-004"), 1);
    assert!(
        story_command_ran(repo.home.path()),
        "the approved command ran"
    );
}

/// The fleet on a terminal (under `script`, which gives ralph one): the story commands are
/// listed and asked about once for the whole run; `n` starts nothing, `y` runs the fleet.
#[test]
fn the_fleet_asks_once_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        println!(
            "the_fleet_asks_once_on_a_terminal: skipped, `script` (util-linux) is not installed"
        );
        return;
    }
    for (answer, runs) in [("n\n", false), ("y\n", true)] {
        let repo = Repo::new(&[("US-004", false), ("US-005", false)]);
        repo.with_story_command("touch story-command-ran; test -f US-004.txt");
        let line = format!(
            "{BIN} run --parallel 2 --max-iterations 1 --agent 'sh {}'",
            repo.home.path().join("agent.sh").display()
        );
        let mut cmd = Command::new("script");
        repo.env(&mut cmd);
        let out = cmd
            .args(["-qec", &line, "/dev/null"])
            .current_dir(repo.root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write as _;
                // The answer, once the question is on the screen.
                std::thread::sleep(Duration::from_millis(500));
                child.stdin.take().unwrap().write_all(answer.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        let screen = text(&out);
        assert_eq!(
            screen.matches("Run them as you for this fleet?").count(),
            1,
            "{answer:?}: {screen}"
        );
        assert!(
            screen.contains("US-004: touch story-command-ran; test -f US-004.txt"),
            "{answer:?}: {screen}"
        );
        assert_eq!(out.status.success(), runs, "{answer:?}: {screen}");
        let calls = repo.calls("US-004") + repo.calls("US-005");
        assert_eq!(calls, if runs { 2 } else { 0 }, "{answer:?}: {screen}");
        if runs {
            assert_eq!(repo.record("US-004")["state"], "merged", "{screen}");
        } else {
            assert!(!repo.root().join(".ralph/worktrees").exists(), "{screen}");
        }
    }
}

/// An agent for the ordered fleet: it notes what its worktree holds
/// (`<story>.saw`, `<story>.progress`), commits `<story>.txt` and its notes
/// file, and completes.
const ORDERED_AGENT: &str = r#"set -eu
cat > /dev/null
story=$(git rev-parse --abbrev-ref HEAD); story=${story#ralph/}
ls > "$FAKE_LOG/$story.saw"
cat ralph/progress.txt > "$FAKE_LOG/$story.progress" 2>/dev/null || true
echo "$story" > "$story.txt"
mkdir -p ralph/notes; echo "learnt by $story" > "ralph/notes/$story.md"
git add -A; git commit -qm "$story"
echo "done <promise>DONE</promise>"
"#;

/// Three stories; US-003 comes first by priority but depends on US-001.
fn ordered_repo() -> Repo {
    let repo = Repo::new(&[("US-001", false), ("US-002", false), ("US-003", false)]);
    let path = repo.root().join("ralph/prd.json");
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    value["userStories"][2]["dependsOn"] = json!(["US-001"]);
    value["userStories"][2]["priority"] = json!(0);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    std::fs::write(repo.root().join("ralph/progress.txt"), "# Progress\n").unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "US-003 after US-001"]);
    std::fs::write(repo.home.path().join("ordered.sh"), ORDERED_AGENT).unwrap();
    repo
}

#[test]
fn a_story_starts_only_once_what_it_depends_on_is_merged_and_reads_its_notes() {
    let repo = ordered_repo();
    let plan = text(&repo.ralph(&["plan"]).output().unwrap());
    assert!(
        plan.contains("Wave 1 (can start now):\n  US-001  open  Story US-001\n  US-002  open  Story US-002\nWave 2 (once wave 1 is merged):\n  US-003  open  Story US-003  (after US-001)"),
        "{plan}"
    );
    let out = repo.ralph(&["plan", "--matrix"]).output().unwrap();
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = m["include"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["story"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["US-001", "US-002"], "the matrix is one wave");

    let agent = format!("sh {}", repo.home.path().join("ordered.sh").display());
    let out = repo
        .parallel("2", &agent, &["--max-iterations", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(repo.passes(), [true, true, true]);
    let saw = |story: &str, what: &str| {
        std::fs::read_to_string(repo.log().join(format!("{story}.{what}"))).unwrap()
    };
    assert!(
        saw("US-003", "saw").contains("US-001.txt"),
        "{}",
        saw("US-003", "saw")
    );
    assert!(!saw("US-001", "saw").contains("US-003.txt"));
    assert!(
        saw("US-003", "progress").contains("learnt by US-001"),
        "the next wave reads what the first learnt: {}",
        saw("US-003", "progress")
    );
    // ralph wrote the progress file itself, each story's notes once, and committed it.
    let progress = repo.show("main:ralph/progress.txt");
    for story in ["US-001", "US-002", "US-003"] {
        assert_eq!(
            progress.matches(&format!("learnt by {story}")).count(),
            1,
            "{progress}"
        );
    }
    assert!(progress.starts_with("# Progress\n"), "{progress}");
}

#[test]
fn a_story_whose_prerequisite_is_not_merged_never_starts() {
    let repo = ordered_repo();
    // Only US-003 is asked for: US-001 is neither passing nor in the run.
    let agent = format!("sh {}", repo.home.path().join("ordered.sh").display());
    let out = repo
        .parallel("2", &agent, &["--story", "US-003", "--max-iterations", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("US-003: not started: it depends on US-001, which was not merged"),
        "{}",
        text(&out)
    );
    assert_eq!(repo.calls("US-003"), 0);
    assert!(!repo.log().join("US-003.saw").exists());
    // A circle of dependsOn is refused before anything runs.
    let path = repo.root().join("ralph/prd.json");
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    value["userStories"][0]["dependsOn"] = json!(["US-003"]);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    let out = repo.parallel("2", &agent, &[]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("go round in a circle (US-001 → US-003 → US-001)"),
        "{}",
        text(&out)
    );
    // A check that cannot fail is a lint error: refused before anything runs.
    value["userStories"][0]["dependsOn"] = json!([]);
    value["userStories"][1]["verify"] = json!("make check || true");
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    let out = repo.parallel("2", &agent, &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("does not pass `ralph prd lint`; nothing was started")
            && text(&out).contains("error[cannot-fail] US-002's verify `make check || true`"),
        "{}",
        text(&out)
    );
    assert!(!repo.worktree("US-001").exists());
}

/// Installs ralph as the fleet's action does when no npm version is given:
/// `install-ralph/install.sh` builds this repository with cargo (here into
/// the tests' own target folder, which holds it built already) and copies
/// the binary out. Its path, and what the script wrote to `GITHUB_OUTPUT`.
fn install_from_source(repo: &Repo) -> (PathBuf, String) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.github/actions/install-ralph/install.sh"
    );
    let target = Path::new(BIN).parent().unwrap().parent().unwrap();
    let bin_dir = repo.home.path().join("ralph-bin");
    let outputs = repo.home.path().join("install.outputs");
    let mut cmd = Command::new("bash");
    // As on a runner: none of the variables cargo gives this test (ring's build script reads
    // CARGO_MANIFEST_DIR and OUT_DIR: with them, cargo would build it all again).
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if (name.starts_with("CARGO") && name != "CARGO_HOME") || name == "OUT_DIR" {
            cmd.env_remove(name);
        }
    }
    let out = cmd
        .arg(script)
        .env("RALPH_CARGO_PROFILE", "dev")
        // The features of the build the tests run on (dev-dependencies'), so nothing is rebuilt.
        .env("RALPH_CARGO_FLAGS", "--tests")
        .env("CARGO_TARGET_DIR", target)
        .env("RALPH_BIN_DIR", &bin_dir)
        .env("GITHUB_OUTPUT", &outputs)
        .env_remove("RALPH_VERSION")
        .env_remove("RALPH_ARCHIVE_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(", installed from source: cargo build of "),
        "it says which it used: {}",
        text(&out)
    );
    (
        bin_dir.join("ralph"),
        std::fs::read_to_string(outputs).unwrap(),
    )
}

/// An agent that completes its story at once and reports $0.30 spent.
const COSTING_AGENT: &str = r#"cat > /dev/null
story=$(git rev-parse --abbrev-ref HEAD); story=${story#ralph/}
echo x >> "$FAKE_LOG/$story.calls"
echo "$story" > "$story.txt"; git add -A; git commit -qm "$story"
echo '{"type":"result","subtype":"success","is_error":false,"result":"done <promise>DONE</promise>","total_cost_usd":0.3,"usage":{"input_tokens":1,"output_tokens":1}}'
"#;

/// The fleet's jobs one after another, as a matrix with `max-parallel: 1`
/// runs them, with ralph installed from source and one budget of $0.60 for
/// three jobs: each takes its share of what is left as `--max-cost`, and the
/// third finds nothing left and does not start.
#[test]
fn the_fleet_jobs_share_one_budget_and_none_starts_past_it() {
    let repo = Repo::new(&[("US-001", false), ("US-004", false), ("US-005", false)]);
    let origin = repo.home.path().join("origin.git");
    repo.git(&["init", "-q", "--bare", origin.to_str().unwrap()]);
    let (ralph, installed) = install_from_source(&repo);
    assert!(installed.contains("from=source"), "{installed}");
    std::fs::write(repo.home.path().join("costing.sh"), COSTING_AGENT).unwrap();
    let agent = format!("sh {}", repo.home.path().join("costing.sh").display());
    let ledger = repo.home.path().join("ledger");
    let out_dir = repo.home.path().join("out");
    let job = |story: &str| {
        fleet_job_with(
            &repo,
            story,
            &out_dir,
            &[
                ("RALPH", ralph.to_str().unwrap()),
                ("AGENT", &agent),
                ("VERIFY", ""),
                ("PUSH", "0"),
                ("FLEET_MAX_COST", "0.60"),
                ("FLEET_JOBS", "3"),
                ("LEDGER", ledger.to_str().unwrap()),
            ],
        )
    };
    let (out, outputs) = job("US-001");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("this job takes $0.2 of what is left"),
        "a third of $0.60: {}",
        text(&out)
    );
    assert!(outputs.contains("outcome=ready"), "{outputs}");
    let (out, _) = job("US-004");
    assert!(
        text(&out).contains("this job takes $0.15 of what is left"),
        "half of the $0.30 left: {}",
        text(&out)
    );
    // $0.60 spent: the third job does not start, and says why.
    let (out, outputs) = job("US-005");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(outputs.contains("outcome=not_started"), "{outputs}");
    assert!(
        text(&out)
            .contains("the fleet's budget of $0.60 is spent or taken by the other jobs ($0.60)"),
        "{}",
        text(&out)
    );
    assert_eq!(repo.calls("US-005"), 0, "its agent never ran");
    let sum = repo
        .ralph(&[
            "fleet-budget",
            "sum",
            "--total",
            "0.60",
            "--ledger",
            ledger.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(
        text(&sum).trim(),
        "The fleet spent $0.60 of its $0.60 budget (2 jobs)."
    );
}
