//! The no-progress breaker's signals at their edges, and the hook's time
//! limits, through the real binary in real git repositories.
//!
//! Every command gets its own `HOME` and `XDG_STATE_HOME`, and a `git` on
//! PATH that records each call before running the real one, so a test can
//! tell whether a stop read the working tree.

#![cfg(unix)] // process groups, /proc and symlinked tool folders
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::{project, ralph_command};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use project::{Project, run_ralph};
use serde_json::{Value, json};

/// The real git, found once on the test's PATH.
fn real_git() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
        .expect("git on PATH")
}

struct Repo {
    project: Project,
    /// HOME, XDG_STATE_HOME, the transcript and the git wrapper live here,
    /// outside the repository.
    outside: tempfile::TempDir,
}

impl Repo {
    fn new() -> Self {
        let project = Project::new();
        let outside = tempfile::tempdir().unwrap();
        for dir in ["home", "state", "bin"] {
            std::fs::create_dir(outside.path().join(dir)).unwrap();
        }
        let wrapper = outside.path().join("bin/git");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
                outside.path().join("git-calls").display(),
                real_git().display()
            ),
        )
        .unwrap();
        make_executable(&wrapper);
        std::fs::write(outside.path().join("t.jsonl"), "{\"type\":\"user\"}\n").unwrap();
        let repo = Self { project, outside };
        repo.git(&["init", "-q"]);
        repo.project.write("src/a.txt", "one\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-qm", "start"]);
        repo
    }

    fn root(&self) -> &Path {
        self.project.root()
    }

    fn git(&self, args: &[&str]) {
        let ok = Command::new(real_git())
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(self.root())
            .env("HOME", self.outside.path().join("home"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    fn env(&self) -> Vec<(String, String)> {
        let path = format!(
            "{}:{}",
            self.outside.path().join("bin").display(),
            std::env::var("PATH").unwrap()
        );
        vec![
            ("HOME".into(), self.dir("home")),
            ("XDG_STATE_HOME".into(), self.dir("state")),
            ("PATH".into(), path),
            ("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP".into(), "0".into()),
        ]
    }

    fn dir(&self, name: &str) -> String {
        self.outside.path().join(name).display().to_string()
    }

    fn ralph(&self, args: &[&str], stdin: &str) -> (i32, String) {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let out = run_ralph(args, self.root(), stdin.as_bytes(), &env);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }

    fn start(&self, flags: &[&str]) {
        let mut args = vec!["start", "--session-id", "s1", "--stuck-after", "0"];
        args.extend_from_slice(flags);
        args.push("Build the thing");
        let (code, out) = self.ralph(&args, "");
        assert_eq!(code, 0, "{out}");
    }

    fn transcript(&self) -> PathBuf {
        self.outside.path().join("t.jsonl")
    }

    fn append(&self, lines: &[String]) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(self.transcript())
            .unwrap();
        for line in lines {
            writeln!(file, "{line}").unwrap();
        }
    }

    /// One Stop; the parsed answer (Null when silent) and whether it read the
    /// working tree: `git status`, or `git add` into the loop's kept index,
    /// whose tree is both the no-progress signal and the checkpoint (issue 47).
    fn stop(&self, reply: &str) -> (Value, bool) {
        let _ = std::fs::remove_file(self.outside.path().join("git-calls"));
        let event = json!({"session_id": "s1", "cwd": self.root(), "transcript_path": self.transcript(), "last_assistant_message": reply});
        let (code, out) = self.ralph(&["hook", "stop"], &event.to_string());
        assert_eq!(code, 0, "{out}");
        let json = out.lines().next().unwrap_or("");
        let answer = if json.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(json).expect("valid JSON")
        };
        (answer, self.tree_reads() > 0)
    }

    /// The git processes the last stop started, one line each.
    fn git_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.outside.path().join("git-calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// How often the last stop read the working tree (`git status`, `git add`).
    fn tree_reads(&self) -> usize {
        self.git_calls()
            .iter()
            .filter(|l| l.split(' ').any(|w| w == "status" || w == "add"))
            .count()
    }

    /// Whether the last stop staged the work tree for a checkpoint: a status
    /// of the loop's kept index (its own ignore rules), or `git add`.
    fn staged(&self) -> bool {
        self.git_calls().iter().any(|l| {
            let words: Vec<&str> = l.split(' ').collect();
            words.contains(&"add")
                || (words.contains(&"status") && l.contains("core.excludesFile="))
        })
    }

    /// The commits of the loop's checkpoints, by iteration, as the per-user
    /// record of its newest arming holds them.
    fn checkpoints(&self) -> Vec<(u64, String)> {
        let places = self.outside.path().join("state/ralph/checkpoints");
        let record = std::fs::read_dir(places)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .flat_map(|place| std::fs::read_dir(place.path()).into_iter().flatten())
            .filter_map(Result::ok)
            .find_map(|l| {
                let nonce = std::fs::read_to_string(l.path().join("latest")).ok()?;
                std::fs::read_to_string(l.path().join(nonce.trim()).join("record")).ok()
            })
            .unwrap_or_default();
        let mut kept: Vec<(u64, String)> = record
            .lines()
            .filter_map(|l| {
                let (label, commit) = l.split_once(' ')?;
                Some((label.parse().ok()?, commit.to_owned()))
            })
            .collect();
        kept.sort();
        kept
    }

    fn blocks(&self, reply: &str) -> bool {
        self.stop(reply).0["decision"] == "block"
    }

    fn no_progress_count(&self) -> u64 {
        let text = self.project.read(project::LOOP);
        let line = text
            .lines()
            .find(|l| l.starts_with("no_progress_count:"))
            .unwrap_or("no_progress_count: 0");
        line.split(':').nth(1).unwrap().trim().parse().unwrap()
    }
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn tool_call(id: &str, tool: &str) -> String {
    json!({"type": "assistant", "message": {"id": format!("msg-{id}"), "role": "assistant",
        "content": [{"type": "tool_use", "id": id, "name": tool, "input": {}}]}})
    .to_string()
}

fn tool_result(id: &str, is_error: bool) -> String {
    json!({"type": "user", "message": {"role": "user",
        "content": [{"type": "tool_result", "tool_use_id": id, "is_error": is_error, "content": "ok"}]}})
    .to_string()
}

fn text_reply(id: &str) -> String {
    json!({"type": "assistant", "message": {"id": id, "role": "assistant",
        "content": [{"type": "text", "text": "Done for now."}]}})
    .to_string()
}

fn ended_with(answer: &Value, words: &str) -> bool {
    answer["decision"] != "block"
        && answer["systemMessage"]
            .as_str()
            .is_some_and(|m| m.contains(words))
}

#[test]
fn a_proven_edit_is_progress_and_reads_the_tree_only_for_its_checkpoint() {
    let r = Repo::new();
    r.start(&["--no-progress-after", "2"]);
    let (first, ran_git) = r.stop("look");
    assert!(
        first["decision"] == "block" && ran_git,
        "first sight of the tree"
    );
    for turn in 0..4 {
        let id = format!("edit{turn}");
        r.project.write("src/a.txt", &format!("turn {turn}\n"));
        r.append(&[
            tool_call(&id, "Edit"),
            tool_result(&id, false),
            text_reply(&format!("r{turn}")),
        ]);
        let (answer, ran_git) = r.stop("edited");
        assert_eq!(answer["decision"], "block", "turn {turn}: {answer}");
        assert!(ran_git, "the checkpoint stages the tree");
        assert_eq!(
            r.tree_reads(),
            1,
            "an editing turn reads the tree once, for its checkpoint: {:?}",
            r.git_calls()
        );
        assert_eq!(r.no_progress_count(), 0);
    }
}

/// The hot path (issue 47): a looping stop whose turn changed files, with
/// the no-progress check and checkpoints on, forks at most two git
/// processes (a status of the loop's kept index and an update of what it
/// named; ralph writes the tree, which is the fingerprint and the
/// checkpoint), no status of the user's index; a turn that changed nothing
/// forks one.
#[test]
fn a_looping_turn_forks_at_most_two_git_processes() {
    let r = Repo::new();
    r.start(&["--no-progress-after", "3"]);
    assert!(r.blocks("look"), "the first stop seeds the kept index");
    let mut trees = Vec::new();
    for turn in 0..3 {
        r.project
            .write("src/b.txt", &format!("made by a script {turn}\n"));
        let id = format!("b{turn}");
        r.append(&[tool_call(&id, "Bash"), tool_result(&id, false)]);
        let (answer, _) = r.stop("ran a script");
        assert_eq!(answer["decision"], "block", "{answer}");
        let calls = r.git_calls();
        // The kept index's status and update; ralph writes its tree.
        assert!(calls.len() <= 2, "turn {turn} forked {calls:?}");
        let kept_index = |c: &String| {
            c.contains(" update-index ")
                || (c.contains("core.excludesFile=") && c.contains(" status "))
        };
        assert!(calls.iter().all(kept_index), "{calls:?}");
        assert_eq!(r.no_progress_count(), 0, "turn {turn}");
        let kept = r.checkpoints();
        trees.push(kept.last().map(|(_, t)| t.clone()));
    }
    assert!(trees.iter().all(Option::is_some), "{trees:?}");
    trees.dedup();
    assert_eq!(trees.len(), 3, "each changed tree is its own checkpoint");
    r.append(&[tool_call("b9", "Bash"), tool_result("b9", false)]);
    assert!(r.blocks("ran the tests"));
    assert!(r.git_calls().len() <= 1, "{:?}", r.git_calls());
    assert_eq!(r.no_progress_count(), 1, "nothing changed");
}

#[test]
fn a_looping_turn_with_protect_or_scope_forks_at_most_two_git_processes() {
    for rule in [["--protect", "tests/**"], ["--scope", "src/**"]] {
        let r = Repo::new();
        r.start(&[rule[0], rule[1], "--no-progress-after", "3"]);
        assert!(r.blocks("look"), "the first stop seeds what it keeps");
        for turn in 0..2 {
            r.project
                .write("src/b.txt", &format!("made by a script {turn}\n"));
            let id = format!("b{turn}");
            r.append(&[tool_call(&id, "Bash"), tool_result(&id, false)]);
            let (answer, _) = r.stop("ran a script");
            assert_eq!(answer["decision"], "block", "{answer}");
            let calls = r.git_calls();
            // The comparison's one staging (a status of its kept index and
            // an update of what it named; ralph writes the tree and
            // compares it with the armed one): nothing listed, copied or
            // read back.
            assert!(calls.len() <= 2, "{rule:?}, turn {turn} forked {calls:?}");
            let words = [
                "add",
                "read-tree",
                "ls-files",
                "cat-file",
                "write-tree",
                "diff-index",
                "ls-tree",
            ];
            assert!(
                !calls
                    .iter()
                    .any(|c| c.split(' ').any(|w| words.contains(&w))),
                "{rule:?}: {calls:?}"
            );
            assert_eq!(r.no_progress_count(), 0, "turn {turn}");
        }
    }
}

#[test]
fn a_looping_turn_with_protect_and_checkpoints_stages_once() {
    // One staging serves the checkpoint and the comparison (issue 47), at a
    // turn the tree tells (Bash) and at one the transcript proves (Edit).
    let cases = [
        (["--protect", "tests/**"], "Bash"),
        (["--scope", "src/**"], "Bash"),
        (["--protect", "tests/**"], "Edit"),
    ];
    for (rule, tool) in cases {
        let r = Repo::new();
        r.start(&[rule[0], rule[1], "--no-progress-after", "3"]);
        assert!(r.blocks("look"), "the first stop seeds what it keeps");
        let mut trees = Vec::new();
        for turn in 0..2 {
            r.project
                .write("src/b.txt", &format!("made by a script {turn}\n"));
            let id = format!("b{turn}");
            r.append(&[tool_call(&id, tool), tool_result(&id, false)]);
            let (answer, _) = r.stop("ran a script");
            assert_eq!(answer["decision"], "block", "{answer}");
            let calls = r.git_calls();
            let count = |word: &str| {
                calls
                    .iter()
                    .filter(|c| c.split(' ').any(|w| w == word))
                    .count()
            };
            // One status of the kept index and, for the new file, one
            // update of it: no `git add` of its own for the checkpoint. The
            // file only edited at the next turn ralph stages itself (Linux).
            let said = format!("{rule:?} {tool}, turn {turn} forked {calls:?}");
            let updates = usize::from(turn == 0 || !cfg!(target_os = "linux"));
            assert_eq!(count("status"), 1, "{said}");
            assert_eq!(count("update-index"), updates, "{said}");
            assert_eq!(count("add"), 0, "{said}");
            assert_eq!(calls.len(), 1 + updates, "{said}");
            trees.push(r.checkpoints().last().map(|(_, t)| t.clone()));
        }
        assert!(trees.iter().all(Option::is_some), "{rule:?}: {trees:?}");
        trees.dedup();
        assert_eq!(
            trees.len(),
            2,
            "{rule:?}: each changed tree is its own checkpoint"
        );
    }
}

#[test]
fn an_edit_reverted_within_the_turn_still_counts_as_progress() {
    // Documented: a successful Edit is progress by the rule, even when the
    // tree ends up as it was.
    let r = Repo::new();
    r.start(&["--no-progress-after", "1"]);
    assert!(r.blocks("look"));
    for turn in 0..3 {
        let id = format!("e{turn}");
        r.append(&[tool_call(&id, "Write"), tool_result(&id, false)]);
        assert!(r.blocks("wrote and put it back"), "turn {turn}");
    }
}

#[test]
fn a_failed_edit_proves_nothing_and_the_breaker_fires() {
    let r = Repo::new();
    r.start(&["--no-progress-after", "2"]);
    assert!(r.blocks("look"));
    r.append(&[tool_call("e1", "Edit"), tool_result("e1", true)]);
    let (answer, ran_git) = r.stop("the edit failed");
    assert!(answer["decision"] == "block" && ran_git, "{answer}");
    r.append(&[tool_call("e2", "MultiEdit"), tool_result("e2", true)]);
    let (answer, _) = r.stop("failed again");
    assert!(
        ended_with(
            &answer,
            "no change to the working tree or HEAD for 2 iterations"
        ),
        "{answer}"
    );
}

#[test]
fn a_bash_only_turn_that_changed_files_is_progress_through_the_fallback() {
    let r = Repo::new();
    r.start(&["--no-progress-after", "2"]);
    assert!(r.blocks("look"));
    assert!(r.blocks("look"));
    assert_eq!(r.no_progress_count(), 1);
    r.project.write("src/b.txt", "made by sed\n");
    r.append(&[tool_call("b1", "Bash"), tool_result("b1", false)]);
    let (answer, ran_git) = r.stop("ran a script");
    assert!(answer["decision"] == "block" && ran_git, "{answer}");
    assert_eq!(r.no_progress_count(), 0);
    // A Bash-only turn that changed nothing counts.
    r.append(&[tool_call("b2", "Bash"), tool_result("b2", false)]);
    assert!(r.blocks("ran the tests"));
    assert_eq!(r.no_progress_count(), 1);
    r.append(&[tool_call("b3", "Bash"), tool_result("b3", false)]);
    let (answer, _) = r.stop("ran the tests again");
    assert!(ended_with(&answer, "for 2 iterations"), "{answer}");
}

#[test]
fn a_file_changed_outside_the_agent_is_seen() {
    // A formatter (or the user) changes a file; the turn itself ran no tool.
    let r = Repo::new();
    r.start(&["--no-progress-after", "2"]);
    assert!(r.blocks("look"));
    assert!(r.blocks("look"));
    r.project.write("src/a.txt", "one\n\n");
    r.append(&[text_reply("t1")]);
    assert!(r.blocks("thinking"));
    assert_eq!(r.no_progress_count(), 0, "the formatter's change counts");
}

#[test]
fn a_turn_with_no_tools_and_no_changes_counts_as_no_progress() {
    let r = Repo::new();
    r.start(&["--no-progress-after", "2"]);
    assert!(r.blocks("look"));
    r.append(&[text_reply("t1")]);
    assert!(r.blocks("thinking"));
    r.append(&[text_reply("t2")]);
    let (answer, _) = r.stop("still thinking");
    assert!(ended_with(&answer, "for 2 iterations"), "{answer}");
}

#[test]
fn a_lagging_transcript_never_ends_a_loop_that_edits() {
    // The turn's lines land after its Stop: the stop sees nothing new, reads
    // the tree, and finds the change; the late lines count at the next stop.
    let r = Repo::new();
    r.start(&["--no-progress-after", "1"]);
    assert!(r.blocks("look"));
    for turn in 0..4 {
        r.project.write("src/a.txt", &format!("lagging {turn}\n"));
        let (answer, ran_git) = r.stop("edited");
        assert_eq!(answer["decision"], "block", "turn {turn}: {answer}");
        // The first stop has only the tree to go by; later ones see the
        // previous turn's late lines, which are progress too.
        assert!(turn > 0 || ran_git);
        let id = format!("late{turn}");
        r.append(&[tool_call(&id, "Edit"), tool_result(&id, false)]);
    }
    assert!(r.blocks("nothing new"), "the last late lines count here");
    // An edit whose result has not landed proves nothing either: the tree decides.
    r.append(&[tool_call("pending", "Edit")]);
    r.project.write("src/a.txt", "pending\n");
    let (answer, ran_git) = r.stop("edited");
    assert!(answer["decision"] == "block" && ran_git, "{answer}");
}

#[test]
fn after_an_edit_the_breaker_fires_at_most_one_turn_later() {
    let r = Repo::new();
    r.start(&["--no-progress-after", "2"]);
    assert!(r.blocks("look"));
    r.project.write("src/a.txt", "edited\n");
    r.append(&[tool_call("e1", "Edit"), tool_result("e1", false)]);
    assert!(r.blocks("edited"));
    // The first undecided turn after it sets the working-tree baseline.
    assert!(r.blocks("look"));
    assert!(r.blocks("look"));
    let (answer, _) = r.stop("look");
    assert!(ended_with(&answer, "for 2 iterations"), "{answer}");
}

// ---- Time limits and process control ----

fn alive(pid: u32) -> bool {
    // Gone, or a zombie nobody reaped yet: either way it runs no more.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn a_verify_timeout_kills_the_group_without_a_kill_binary() {
    let p = Project::new();
    let outside = tempfile::tempdir().unwrap();
    let bin = outside.path().join("bin");
    for dir in ["bin", "home", "state"] {
        std::fs::create_dir(outside.path().join(dir)).unwrap();
    }
    for tool in ["sh", "sleep"] {
        let real = ["/bin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap();
        std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
    }
    let pid_file = outside.path().join("grandchild.pid");
    let verify = format!("sleep 60 & echo $! > '{}'; wait", pid_file.display());
    let env = [
        ("HOME", outside.path().join("home").display().to_string()),
        (
            "XDG_STATE_HOME",
            outside.path().join("state").display().to_string(),
        ),
        ("PATH", bin.display().to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run_ralph(
        &[
            "start",
            "--session-id",
            "s1",
            "--completion-promise",
            "DONE",
            "--verify",
            &verify,
            "--verify-timeout",
            "2s",
            "Task",
        ],
        p.root(),
        b"",
        &env,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": "<promise>DONE</promise>"});
    let started = Instant::now();
    let out = run_ralph(
        &["hook", "stop"],
        p.root(),
        event.to_string().as_bytes(),
        &env,
    );
    let took = started.elapsed();
    assert!(out.status.success());
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["decision"], "block", "{answer}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("timed out after 2s"),
        "{answer}"
    );
    // A hang guard: the words above say the 2 s limit decided.
    assert!(took < Duration::from_secs(45), "a 2 s limit took {took:?}");
    let grandchild: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while alive(grandchild) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !alive(grandchild),
        "the verify command's grandchild survived"
    );
}

/// Runs `ralph hook stop` with stdin left open (a Stop event that never
/// ends), returning the output and how long the hook took.
fn hook_with_open_stdin(p: &Project, env: &[(&str, String)]) -> (std::process::Output, Duration) {
    let mut cmd = ralph_command();
    cmd.args(["hook", "stop"])
        .current_dir(p.root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let stdin = child.stdin.take();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    (out, started.elapsed())
}

#[test]
fn the_hook_answers_by_its_deadline_with_one_allow() {
    let p = Project::new();
    let outside = tempfile::tempdir().unwrap();
    let env = [
        ("HOME", outside.path().display().to_string()),
        ("XDG_STATE_HOME", outside.path().display().to_string()),
        ("RALPH_HOOK_DEADLINE_SECS", "1".to_owned()),
    ];
    let (out, took) = hook_with_open_stdin(&p, &env);
    assert!(out.status.success());
    // A hang guard: stdin never closes, so only the 1 s deadline can end the hook.
    assert!(took < Duration::from_secs(120), "{took:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "exactly one JSON object: {text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert!(answer.get("decision").is_none(), "{answer}");
    assert!(
        answer["systemMessage"]
            .as_str()
            .unwrap()
            .contains("did not finish within 1s")
    );
}

#[test]
fn the_deadline_leaves_the_verify_gate_its_own_limit() {
    let p = Project::new();
    let outside = tempfile::tempdir().unwrap();
    let env = [
        ("HOME", outside.path().display().to_string()),
        ("XDG_STATE_HOME", outside.path().display().to_string()),
        ("RALPH_HOOK_DEADLINE_SECS", "1".to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run_ralph(
        &[
            "start",
            "--session-id",
            "s1",
            "--completion-promise",
            "DONE",
            "--verify",
            "sleep 3",
            "Task",
        ],
        p.root(),
        b"",
        &env,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": "<promise>DONE</promise>"});
    let out = run_ralph(
        &["hook", "stop"],
        p.root(),
        event.to_string().as_bytes(),
        &env,
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert!(
        answer["systemMessage"]
            .as_str()
            .unwrap()
            .contains("completed"),
        "the gate ran past the hook's own deadline and its verdict stood: {answer}"
    );
}

fn said(id: &str, text: &str) -> String {
    json!({"type": "assistant", "message": {"id": id, "role": "assistant",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}})
    .to_string()
}

fn feedback() -> String {
    json!({"type": "user", "isMeta": true, "message": {"role": "user", "content": "Stop hook feedback:\nBuild the thing"}})
        .to_string()
}

/// A turn whose transcript shows no tool call cannot have changed the tree
/// through the agent: no `git status`, and it counts as no progress (it
/// carries the previous fingerprint). A turn that ran a tool reads the tree.
#[test]
fn a_turn_without_tool_calls_runs_no_git_and_counts_as_no_progress() {
    let r = Repo::new();
    r.start(&["--no-progress-after", "4"]);
    let (_, ran_git) = r.stop("look");
    assert!(ran_git, "the first stop sets the baseline from the tree");
    // The first stop's transcript held no reply of the loop (its lines carry
    // no time stamp), so the next stop cannot trust its part: it reads the tree.
    for (turn, count, reads) in [("t1", 1, true), ("t2", 2, false), ("t3", 3, false)] {
        r.append(&[feedback(), said(turn, &format!("Thinking, {turn}."))]);
        let (answer, ran_git) = r.stop(&format!("Thinking, {turn}."));
        assert_eq!(answer["decision"], "block", "{answer}");
        assert_eq!(
            ran_git, reads,
            "{turn}: a turn without tools must not read the tree"
        );
        // Nor stage it for its checkpoint: the last checkpoint is named again.
        assert_eq!(r.staged(), reads, "{turn}: staged for its checkpoint");
        assert_eq!(r.no_progress_count(), count);
    }
    let kept = r.checkpoints();
    let commit = |n: u64| kept.iter().find(|(i, _)| *i == n).map(|(_, c)| c.clone());
    assert!(commit(2).is_some(), "{kept:?}");
    assert_eq!(commit(3), commit(2), "t2 ran nothing: {kept:?}");
    assert_eq!(commit(4), commit(2), "t3 ran nothing: {kept:?}");
    // A shell call that changed a file: the tree is read, progress is seen.
    r.project.write("src/b.txt", "made by a script\n");
    r.append(&[
        feedback(),
        tool_call("b1", "Bash"),
        tool_result("b1", false),
        said("t4", "Ran the script."),
    ]);
    let (answer, ran_git) = r.stop("Ran the script.");
    assert!(answer["decision"] == "block" && ran_git, "{answer}");
    assert_eq!(r.no_progress_count(), 0);
}

/// What the skip must not trust: a transcript that does not (yet) hold this
/// turn's reply, or that was behind at the previous stop, reads the tree.
#[test]
fn a_turn_without_tools_is_trusted_only_when_the_transcript_holds_it() {
    let r = Repo::new();
    r.start(&["--no-progress-after", "5"]);
    assert!(r.stop("look").1);
    // Nothing appended: the transcript lags, the tree decides.
    assert!(r.stop("Edited it.").1, "nothing new in the transcript");
    // The previous stop was behind: this part may be a late turn's.
    r.append(&[feedback(), said("t1", "Edited it.")]);
    assert!(r.stop("Thought again.").1, "the reply is not the event's");
    r.append(&[feedback(), said("t2", "Thought again.")]);
    assert!(r.stop("Thought again.").1, "the previous stop was behind");
    // Caught up: now a tool-free turn is trusted.
    r.append(&[feedback(), said("t3", "Still thinking.")]);
    assert!(!r.stop("Still thinking.").1);
    // A reply that stopped for a tool (its call not written yet) is not tool-free.
    r.append(&[
        feedback(),
        json!({"type": "assistant", "message": {"id": "t4", "role": "assistant",
            "content": [{"type": "text", "text": "Running it."}], "stop_reason": "tool_use"}})
        .to_string(),
    ]);
    assert!(r.stop("Running it.").1);
}

#[test]
fn a_protected_test_rewritten_in_the_second_the_stop_recorded_it_is_still_refused() {
    // git compares stat times to the second and calls a record racy by its
    // mtime alone (`fs/same_second.rs`): the agent's background process
    // rewrites a protected test to the same size in the second a stop
    // recorded it, its old mtime put back. The stop that claims completion
    // still sees the change (a build of the third round completed here).
    let r = Repo::new();
    r.project.write("tests/t.sh", "test 1 = 1\n");
    r.git(&["add", "-A"]);
    r.git(&["commit", "-qm", "tests"]);
    r.start(&["--protect", "tests/**", "--completion-promise", "DONE"]);
    let file = r.root().join("tests/t.sh");
    let put_back = |time| {
        std::fs::File::open(&file)
            .unwrap()
            .set_modified(time)
            .unwrap();
    };
    let old = std::fs::metadata(&file).unwrap().modified().unwrap();
    put_back(old); // its ctime is now, the second the next stop records it
    assert!(r.blocks("looking"));
    std::fs::write(&file, "test 1 = 2\n").unwrap();
    put_back(old);
    let (answer, _) = r.stop("<promise>DONE</promise>");
    assert_eq!(answer["decision"], "block", "{answer}");
    let reason = answer["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("Protected paths differ") && reason.contains("tests/t.sh"),
        "{reason}"
    );
}
