//! The guards through the real binary: each one firing and not firing, with
//! the numbers at its edges. Loops are armed with `ralph start`, so the
//! flags are tested on the way in too.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::{blocked, project};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use project::{LOOP, Project};
use ralph_state::fields::state::LoopState;
use ralph_state::time::Timestamp;
use serde_json::{Value, json};

/// This module's steps on the shared [`Project`].
trait Steps {
    fn ralph(&self, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> (i32, String, String);
    fn start(&self, flags: &[&str]);
    fn stop(&self, reply: &str) -> Value;
    fn stop_event(&self, event: Value) -> Value;
    fn state(&self) -> LoopState;
    fn set_field(&self, key: &str, value: &str);
    fn last_outcome(&self) -> Option<String>;
}

impl Steps for Project {
    fn ralph(&self, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> (i32, String, String) {
        // The block cap is off unless a test sets it: these tests are about the other guards.
        let mut all_env = vec![("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")];
        all_env.extend_from_slice(env);
        let out = self.ralph_in(args, self.root(), stdin.as_bytes(), &all_env);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn start(&self, flags: &[&str]) {
        let mut args = vec!["start", "--session-id", "s1"];
        args.extend_from_slice(flags);
        args.push("Build the thing");
        let (code, out, err) = self.ralph(&args, "", &[]);
        assert_eq!(code, 0, "{out}{err}");
    }

    /// One Stop of session s1; returns the parsed answer (or Null when silent).
    fn stop(&self, reply: &str) -> Value {
        self.stop_event(
            json!({"session_id": "s1", "cwd": self.root(), "last_assistant_message": reply}),
        )
    }

    fn stop_event(&self, event: Value) -> Value {
        let (code, out, _) = self.ralph(&["hook", "stop"], &event.to_string(), &[]);
        assert_eq!(code, 0);
        if out.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&out).expect("valid JSON")
        }
    }

    fn state(&self) -> LoopState {
        LoopState::parse(&std::fs::read_to_string(self.path(LOOP)).unwrap()).unwrap()
    }

    fn set_field(&self, key: &str, value: &str) {
        let text = std::fs::read_to_string(self.path(LOOP)).unwrap();
        let updated =
            ralph_state::fields::frontmatter::set_fields(&text, &[(key, value.to_owned())])
                .unwrap();
        std::fs::write(self.path(LOOP), updated).unwrap();
        // A setting is bound to the arming: the user adopts the edit.
        self.ralph_on_terminal(&["adopt", "--yes", "--name", "ralph"], "");
    }

    fn last_outcome(&self) -> Option<String> {
        let (_, out, _) = self.ralph(&["status", "--json"], "", &[]);
        let v: Value = serde_json::from_str(&out).unwrap();
        v["loops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["state"] == "ended")
            .and_then(|l| l["outcome"].as_str().map(str::to_owned))
    }
}

fn reason(answer: &Value) -> &str {
    answer["reason"].as_str().unwrap_or("")
}

fn notice(answer: &Value) -> &str {
    answer["systemMessage"].as_str().unwrap_or("")
}

// ---- 1. Decision log ----

#[test]
fn every_decision_is_logged_and_the_log_outlives_the_loop() {
    let p = Project::new();
    p.start(&["--completion-promise", "DONE"]);
    p.stop("first");
    p.stop("second");
    let (_, out, _) = p.ralph(&["log", "--json"], "", &[]);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["decision"], "block");
        assert_eq!(line["iteration"], i as u64 + 1);
        assert_eq!(line["session"], "s1");
        assert_eq!(line["promise_seen"], false);
        assert!(line["time"].as_str().is_some() && line["why"].as_str().is_some());
        assert!(line.get("same_reply_count").is_some() && line.get("tokens").is_some());
    }
    let (_, human, _) = p.ralph(&["status"], "", &[]);
    assert!(human.contains("iteration 2 block"), "{human}");
    p.stop("<promise>DONE</promise>");
    let (_, out, _) = p.ralph(&["log", "--json"], "", &[]);
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(
        (
            last["decision"].as_str(),
            last["outcome"].as_str(),
            last["promise_seen"].as_bool()
        ),
        (Some("end"), Some("completed"), Some(true))
    );
    assert_eq!(out.lines().count(), 3);
}

// ---- 2. Budgets ----

#[test]
fn time_budget_warns_at_80_percent_and_ends_at_100() {
    let p = Project::new();
    p.start(&["--max-duration", "100s", "--stuck-after", "0"]);
    assert_eq!(p.state().guards.max_duration_secs, Some(100));
    let ago = |secs: i64| format!("\"{}\"", Timestamp(Timestamp::now().0 - secs));
    p.set_field("started_at", &ago(60));
    let a = p.stop("x");
    assert!(blocked(&a) && !reason(&a).contains("Wrap up"), "{a}");
    p.set_field("started_at", &ago(85));
    let a = p.stop("x");
    assert!(
        blocked(&a) && reason(&a).contains("Time budget") && reason(&a).contains("Wrap up"),
        "{a}"
    );
    p.set_field("started_at", &ago(100));
    let a = p.stop("x");
    assert!(!blocked(&a) && notice(&a).contains("time budget"), "{a}");
    assert_eq!(p.last_outcome().as_deref(), Some("time_budget"));
}

fn usage_line(id: &str, input: u64, output: u64) -> String {
    // The reply's text is its id: a stop that follows this line carries it as
    // `last_assistant_message`, as Claude Code's does.
    json!({"type": "assistant", "message": {"id": id, "role": "assistant", "content": [{"type": "text", "text": id}], "stop_reason": "end_turn",
        "usage": {"input_tokens": input, "output_tokens": output, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 50000}}})
    .to_string()
        + "\n"
}

/// A session transcript the test appends to, and Stops that point at it.
struct Transcript(PathBuf);

impl Transcript {
    fn new(p: &Project, first_line: String) -> Self {
        let path = p.path("t.jsonl");
        std::fs::write(&path, first_line).unwrap();
        Self(path)
    }

    fn append(&self, line: &str) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.0)
            .unwrap();
        file.write_all(line.as_bytes()).unwrap();
    }

    fn stop(&self, p: &Project, reply: &str) -> Value {
        p.stop_event(json!({"session_id": "s1", "cwd": p.root(), "transcript_path": self.0, "last_assistant_message": reply}))
    }
}

#[test]
fn token_budget_counts_only_new_transcript_lines() {
    let p = Project::new();
    p.start(&["--max-tokens", "1000", "--stuck-after", "0"]);
    let t = Transcript::new(&p, usage_line("old", 90_000, 90_000));
    let stop = |reply: &str| t.stop(&p, reply);
    let append = |line: String| t.append(&line);
    // The session's past (lines from before the loop) is not counted.
    assert!(blocked(&stop("a")));
    assert_eq!(p.state().progress.tokens_used, 0);
    append(usage_line("m1", 400, 100));
    let a = stop("m1");
    assert!(blocked(&a) && !reason(&a).contains("Token budget"), "{a}");
    append(usage_line("m2", 250, 50));
    let a = stop("m2");
    assert!(
        blocked(&a) && reason(&a).contains("Token budget: 800 of 1000"),
        "{a}"
    );
    append(usage_line("m3", 100, 99));
    assert!(blocked(&stop("m3")));
    assert_eq!(p.state().progress.tokens_used, 999);
    append(usage_line("m4", 1, 0));
    let a = stop("m4");
    assert!(
        !blocked(&a) && notice(&a).contains("1000 of its 1000 token budget"),
        "{a}"
    );
    assert_eq!(p.last_outcome().as_deref(), Some("token_budget"));
}

// ---- 3. Circuit breakers ----

#[test]
fn stuck_breaker_fires_at_k_identical_replies_not_before() {
    let p = Project::new();
    p.start(&["--stuck-after", "3"]);
    assert!(blocked(&p.stop("I am stuck on the same error.")));
    assert!(blocked(&p.stop("I am  stuck on the same error.\n")));
    let a = p.stop("I am stuck on the same error.");
    assert!(
        !blocked(&a) && notice(&a).contains("same reply came 3 times"),
        "{a}"
    );
    assert_eq!(p.last_outcome().as_deref(), Some("stuck"));
}

#[test]
fn stuck_breaker_resets_on_a_new_reply_and_can_be_off() {
    let p = Project::new();
    p.start(&["--stuck-after", "2"]);
    assert!(blocked(&p.stop("a")));
    assert!(blocked(&p.stop("b")));
    assert!(blocked(&p.stop("a")));
    assert!(!blocked(&p.stop("a")));
    let q = Project::new();
    q.start(&["--stuck-after", "0"]);
    for _ in 0..6 {
        assert!(blocked(&q.stop("same")));
    }
}

fn git(root: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

#[test]
fn no_progress_breaker_fires_after_k_unchanged_iterations() {
    let p = Project::new();
    git(p.root(), &["init", "-q"]);
    std::fs::write(p.path("a.txt"), "1").unwrap();
    git(p.root(), &["add", "a.txt"]);
    git(p.root(), &["commit", "-qm", "start"]);
    p.start(&["--no-progress-after", "2", "--stuck-after", "0"]);
    assert!(blocked(&p.stop("look")), "first sight of the tree");
    assert!(blocked(&p.stop("look")), "1 unchanged");
    std::fs::write(p.path("a.txt"), "2").unwrap();
    assert!(blocked(&p.stop("edit")), "a change resets the count");
    assert!(blocked(&p.stop("look")), "1 unchanged");
    std::fs::write(p.path("b.txt"), "new").unwrap();
    git(p.root(), &["add", "-A"]);
    git(p.root(), &["commit", "-qm", "more"]);
    assert!(blocked(&p.stop("commit")), "a commit resets the count");
    assert!(blocked(&p.stop("look")), "1 unchanged");
    let a = p.stop("look");
    assert!(
        !blocked(&a)
            && notice(&a).contains("no change to the working tree or HEAD for 2 iterations"),
        "{a}"
    );
    assert_eq!(p.last_outcome().as_deref(), Some("no_progress"));
}

#[test]
fn no_progress_breaker_ignores_projects_without_git() {
    let p = Project::new();
    p.start(&["--no-progress-after", "1", "--stuck-after", "0"]);
    for _ in 0..4 {
        assert!(blocked(&p.stop("x")));
    }
}

// ---- 5. Verification gate ----

#[test]
fn verification_gate_refuses_until_the_command_passes() {
    let p = Project::new();
    p.start(&[
        "--completion-promise",
        "DONE",
        "--verify",
        "echo checking; test -f ok || { echo 'ok missing' >&2; exit 3; }",
    ]);
    let a = p.stop("<promise>DONE</promise>");
    assert!(blocked(&a), "{a}");
    let r = reason(&a);
    assert!(
        r.contains("refused")
            && r.contains("exit 3")
            && r.contains("ok missing")
            && r.contains("test -f ok"),
        "{r}"
    );
    assert_eq!(p.state().iteration, 2);
    assert!(
        blocked(&p.stop("working on it")),
        "no promise: the gate does not run"
    );
    std::fs::write(p.path("ok"), "").unwrap();
    let a = p.stop("<promise>DONE</promise>");
    assert!(!blocked(&a) && notice(&a).contains("passed"), "{a}");
    assert_eq!(p.last_outcome().as_deref(), Some("completed"));
    let (_, log, _) = p.ralph(&["log", "--json"], "", &[]);
    let gates: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l.get("verification").is_some())
        .collect();
    assert_eq!(gates.len(), 2);
    assert_eq!(
        (
            gates[0]["verification"]["passed"].as_bool(),
            gates[1]["verification"]["passed"].as_bool()
        ),
        (Some(false), Some(true))
    );
}

#[test]
fn max_verify_failures_ends_the_loop_after_that_many_refused_promises() {
    let p = Project::new();
    p.start(&[
        "--completion-promise",
        "DONE",
        "--verify",
        "exit 1",
        "--max-verify-failures",
        "2",
    ]);
    let a = p.stop("<promise>DONE</promise>");
    assert!(blocked(&a) && reason(&a).contains("refused"), "{a}");
    let s = p.state();
    assert_eq!(
        (
            s.guards.max_verify_failures.count(),
            s.progress.counts.verify_failures
        ),
        (2, 1)
    );
    let (_, json_out, _) = p.ralph(&["status", "--json"], "", &[]);
    let l = &serde_json::from_str::<Value>(&json_out).unwrap()["loops"][0];
    assert_eq!(
        (
            l["max_verify_failures"].as_u64(),
            l["verify_failures"].as_u64()
        ),
        (Some(2), Some(1)),
        "status --json shows the guard and its count: {l}"
    );
    assert!(blocked(&p.stop("working on it")));
    assert_eq!(
        p.state().progress.counts.verify_failures,
        1,
        "a turn without the gate keeps the count"
    );
    let a = p.stop("<promise>DONE</promise>");
    assert!(!blocked(&a) && notice(&a).contains("kept failing"), "{a}");
    assert_eq!(p.last_outcome().as_deref(), Some("verify_failures"));
}

#[test]
fn max_verify_failures_is_an_option_of_the_slash_command_too() {
    let p = Project::new();
    let (code, out, err) = p.ralph(
        &["start", "--session-id", "s1", "--raw-arguments"],
        "--completion-promise DONE --verify 'exit 1' --max-verify-failures=4 Build it",
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let s = p.state();
    assert_eq!(s.guards.max_verify_failures.count(), 4);
    assert_eq!(s.prompt, "Build it");
    assert!(out.contains("ends after 4 failed checks"), "{out}");
    let (code, _, err) = p.ralph(
        &["start", "--name", "x", "--raw-arguments"],
        "--max-verify-failures=many Build it",
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expected a whole number"), "{err}");
}

#[test]
fn verification_gate_times_out() {
    let p = Project::new();
    p.start(&[
        "--completion-promise",
        "DONE",
        "--verify",
        "sleep 600",
        "--verify-timeout",
        "1s",
    ]);
    let started = std::time::Instant::now();
    let a = p.stop("<promise>DONE</promise>");
    // Far below the gate's 600 s: stopped at its limit (a hang guard, not a race).
    assert!(started.elapsed().as_secs() < 120);
    assert!(
        blocked(&a) && reason(&a).contains("timed out after 1s"),
        "{a}"
    );
}

// ---- 6. Abort promise ----

#[test]
fn abort_promise_ends_the_loop_with_the_agents_explanation() {
    let p = Project::new();
    p.start(&["--completion-promise", "DONE", "--abort-promise", "BLOCKED"]);
    assert!(
        blocked(&p.stop("I will say <promise>BLOCKED</promise> if I get stuck.")),
        "quoting it is not saying it"
    );
    let a = p.stop("The deploy key is missing; a person must add it.\n<promise>BLOCKED</promise>");
    assert!(
        !blocked(&a) && notice(&a).contains("deploy key is missing"),
        "{a}"
    );
    assert_eq!(p.last_outcome().as_deref(), Some("aborted"));
}

// ---- 7. Pause and resume ----

#[test]
fn paused_loop_lets_stops_through_uncounted() {
    let p = Project::new();
    p.start(&[]);
    let (code, out, _) = p.ralph(&["pause"], "", &[]);
    assert_eq!(code, 0, "{out}");
    assert!(p.stop("x").is_null());
    assert!(p.stop("y").is_null());
    assert_eq!(p.state().iteration, 1);
    p.ralph(&["resume"], "", &[]);
    assert!(blocked(&p.stop("z")));
    assert_eq!(p.state().iteration, 2);
}

#[test]
fn tokens_spent_while_paused_are_not_counted() {
    let p = Project::new();
    p.start(&["--max-tokens", "1000", "--stuck-after", "0"]);
    let t = Transcript::new(&p, usage_line("m0", 1, 1));
    let stop = |reply: &str| t.stop(&p, reply);
    let append = |line: String| t.append(&line);
    assert!(blocked(&stop("a")), "nothing of the loop yet");
    p.ralph(&["pause"], "", &[]);
    append(usage_line("paused-1", 5000, 5000));
    assert!(stop("b").is_null());
    p.ralph(&["resume"], "", &[]);
    append(usage_line("m1", 100, 0));
    assert!(blocked(&stop("m1")));
    assert_eq!(p.state().progress.tokens_used, 100);
}

// ---- status shows the guards ----

#[test]
fn status_shows_guards_and_figures() {
    let p = Project::new();
    p.start(&[
        "--max-duration",
        "2h",
        "--max-tokens",
        "5000",
        "--verify",
        "make test",
        "--abort-promise",
        "BLOCKED",
        "--stuck-after",
        "4",
    ]);
    p.stop("x");
    let (_, out, _) = p.ralph(&["status"], "", &[]);
    for needle in [
        "time budget 2h00m",
        "token budget 5000",
        "verify `make test`",
        "abort promise BLOCKED",
        "stuck after 4",
        "now: 1 same reply, 0 unchanged iterations, 1 block without a tool",
    ] {
        assert!(out.contains(needle), "{needle} missing from:\n{out}");
    }
    let (_, json_out, _) = p.ralph(&["status", "--json"], "", &[]);
    let v: Value = serde_json::from_str(&json_out).unwrap();
    let l = &v["loops"][0];
    assert_eq!(
        (
            l["max_tokens"].as_u64(),
            l["max_duration_secs"].as_u64(),
            l["stuck_after"].as_u64()
        ),
        (Some(5000), Some(7200), Some(4))
    );
}
