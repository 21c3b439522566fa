//! `--check`, the breakers on its failures (`--max-same-failure`,
//! `--stall-after`) and gates that leave nothing running, through the real
//! binary: loops armed with `ralph start`, stops answered by `ralph hook stop`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::{blocked, project};

use std::time::{Duration, Instant};

use project::Project;
use serde_json::{Value, json};

/// This module's steps on the shared [`Project`].
trait Steps {
    fn ralph(&self, args: &[&str]) -> (i32, String, String);
    fn start(&self, flags: &[&str]);
    fn stop(&self, reply: &str) -> Value;
    fn status_json(&self) -> Value;
    fn last_outcome(&self) -> Option<String>;
}

impl Steps for Project {
    fn ralph(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.ralph_in(
            args,
            self.root(),
            b"",
            &[("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")],
        );
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn start(&self, flags: &[&str]) {
        let mut args = vec!["start", "--session-id", "s1", "--stuck-after", "0"];
        args.extend_from_slice(flags);
        args.push("Fix the build");
        let (code, out, err) = self.ralph(&args);
        assert_eq!(code, 0, "{out}{err}");
    }

    fn stop(&self, reply: &str) -> Value {
        let event =
            json!({"session_id": "s1", "cwd": self.root(), "last_assistant_message": reply});
        let out = self.ralph_in(
            &["hook", "stop"],
            self.root(),
            event.to_string().as_bytes(),
            &[("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")],
        );
        assert_eq!(out.status.code(), Some(0));
        if out.stdout.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&out.stdout).unwrap()
        }
    }

    fn status_json(&self) -> Value {
        let (_, out, _) = self.ralph(&["status", "--json"]);
        serde_json::from_str(&out).unwrap()
    }

    fn last_outcome(&self) -> Option<String> {
        self.status_json()["loops"]
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

#[test]
fn the_check_result_reaches_the_agent_and_the_log() {
    let p = Project::new();
    p.start(&[
        "--check",
        "cat out; test -f fixed",
        "--max-same-failure",
        "0",
    ]);
    p.write("out", "error[E0308]: mismatched types\n");
    let a = p.stop("working");
    assert!(blocked(&a), "{a}");
    let r = reason(&a);
    assert!(
        r.contains("Fix the build")
            && r.contains("The check `cat out; test -f fixed` failed (exit 1)")
            && r.contains("mismatched types"),
        "{r}"
    );
    p.write("fixed", "");
    p.write("out", "test result: ok. 3 passed; 0 failed\n");
    let a = p.stop("fixed it");
    assert!(
        reason(&a).contains("The check `cat out; test -f fixed` passed."),
        "{a}"
    );
    let (_, log, _) = p.ralph(&["log", "--json"]);
    let checks: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["check"].clone())
        .collect();
    assert_eq!(checks[0]["passed"], false);
    assert_eq!(checks[0]["status"], "exit 1");
    assert_eq!(checks[1]["passed"], true);
    assert_eq!(checks[1]["failures"], 0);
}

#[test]
fn the_same_failure_with_only_durations_changed_ends_the_loop() {
    let p = Project::new();
    p.start(&["--check", "cat out; exit 101"]);
    for (i, secs) in ["0.53", "0.61", "1.20"].iter().enumerate() {
        p.write(
            "out",
            &format!("error: test `parses` failed\nfinished in {secs}s, run id 3fa9c2b1d4\n"),
        );
        let a = p.stop(&format!("attempt {i}"));
        if i < 2 {
            assert!(blocked(&a), "{a}");
        } else {
            assert!(!blocked(&a), "{a}");
            let n = notice(&a);
            assert!(
                n.contains("same failure")
                    && n.contains("3 times in a row")
                    && n.contains("parses"),
                "the user sees the repeated failure: {n}"
            );
        }
    }
    assert_eq!(p.last_outcome().as_deref(), Some("same_failure"));
}

#[test]
fn different_failures_do_not_trip_the_breaker() {
    let p = Project::new();
    p.start(&["--check", "cat out; exit 1", "--max-same-failure", "2"]);
    for word in ["alpha", "beta", "gamma", "delta"] {
        p.write("out", &format!("error: cannot find value `{word}`\n"));
        assert!(blocked(&p.stop("trying")), "{word}");
    }
    let loops = p.status_json();
    assert_eq!(loops["loops"][0]["same_failures"], 1, "{loops}");
}

#[test]
fn a_failure_count_that_falls_then_sticks_stalls_the_loop() {
    let p = Project::new();
    p.start(&[
        "--check",
        "cat out; exit 101",
        "--max-same-failure",
        "0",
        "--stall-after",
        "2",
    ]);
    let summary = |n: u64| format!("test result: FAILED. 10 passed; {n} failed; 0 ignored\n");
    for n in [5, 3] {
        p.write("out", &summary(n));
        assert!(blocked(&p.stop("fixing")));
    }
    p.write("out", &summary(3));
    assert!(blocked(&p.stop("still fixing")));
    let (_, status, _) = p.ralph(&["status"]);
    assert!(status.contains("failures 5 → 3 → 3"), "{status}");
    p.write("out", &summary(4));
    let a = p.stop("hmm");
    assert!(!blocked(&a), "{a}");
    assert!(notice(&a).contains("failure count"), "{a}");
    assert_eq!(p.last_outcome().as_deref(), Some("stalled"));
    let (_, log, _) = p.ralph(&["log", "--json"]);
    let counts: Vec<u64> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).unwrap()["check"]["failures"].as_u64())
        .collect();
    assert_eq!(counts, [5, 3, 3, 4]);
}

#[test]
fn a_check_that_times_out_says_so_and_is_stopped() {
    let p = Project::new();
    p.start(&["--check", "sleep 600", "--check-timeout", "1s"]);
    let started = Instant::now();
    let a = p.stop("working");
    // Far below the check's 600 s: it was stopped at its limit (a hang guard, not a race).
    assert!(started.elapsed() < Duration::from_secs(120));
    assert!(blocked(&a), "{a}");
    assert!(
        reason(&a).contains("The check `sleep 600` timed out after 1s and was stopped"),
        "{a}"
    );
}

/// Whether `pid` is a live process (a zombie waiting for its reaper is not).
#[cfg(unix)]
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

#[cfg(unix)]
fn gone_within(pid: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[cfg(target_os = "linux")]
#[test]
fn a_background_process_in_a_gate_or_a_check_does_not_outlive_it() {
    let p = Project::new();
    p.start(&[
        // The box itself is under test (host pids): not the sandbox around it
        // (`gate_confine.rs` tests what a sandboxed gate leaves).
        "--gate-sandbox",
        "off",
        "--completion-promise",
        "DONE",
        "--verify",
        "sleep 600 & echo $! > gate.pid; exit 0",
        "--check",
        "sleep 600 & echo $! > check.pid; exit 1",
    ]);
    let started = Instant::now();
    assert!(blocked(&p.stop("working")));
    let pid = std::fs::read_to_string(p.path("check.pid")).unwrap();
    assert!(
        gone_within(pid.trim(), Duration::from_secs(60)),
        "the check's sleep survived"
    );
    let a = p.stop("<promise>DONE</promise>");
    assert!(!blocked(&a), "{a}");
    let pid = std::fs::read_to_string(p.path("gate.pid")).unwrap();
    assert!(
        gone_within(pid.trim(), Duration::from_secs(60)),
        "the gate's sleep survived"
    );
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "a stop waited for the 600 s sleep"
    );
    assert_eq!(p.last_outcome().as_deref(), Some("completed"));
}

#[test]
fn start_help_lists_the_check_and_its_breakers() {
    let p = Project::new();
    let (_, help, _) = p.ralph(&["start", "--help"]);
    for flag in [
        "--check",
        "--check-timeout",
        "--max-same-failure",
        "--stall-after",
    ] {
        assert!(
            help.contains(flag),
            "{flag} missing from ralph start --help"
        );
    }
    assert!(help.contains("(as same_failure)") && help.contains("(as stalled)"));
}

fn git(root: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(root)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn a_completion_leaves_a_receipt_that_can_be_shown_and_rechecked() {
    let p = Project::new();
    let root = p.root();
    git(root, &["init", "-q"]);
    p.write("lib.txt", "code\n");
    git(root, &["add", "lib.txt"]);
    git(root, &["commit", "-qm", "one"]);
    let head = git(root, &["rev-parse", "HEAD"]);
    p.start(&[
        "--completion-promise",
        "DONE",
        "--verify",
        "echo all tests passed; test ! -f broken",
    ]);
    let a = p.stop("<promise>DONE</promise>");
    assert!(!blocked(&a), "{a}");
    assert!(
        notice(&a).contains("receipt: `echo all tests passed"),
        "{a}"
    );
    let (code, text, err) = p.ralph(&["receipt"]);
    assert_eq!(code, 0, "{text}{err}");
    assert!(
        text.contains("gate:     `echo all tests passed; test ! -f broken`")
            && text.contains("exit:     0 in")
            && text.contains(&format!("commit:   {head} (clean tree)")),
        "{text}"
    );
    let (_, json, _) = p.ralph(&["receipt", "--json"]);
    let r: Value = serde_json::from_str(&json).unwrap();
    let r = &r["receipt"];
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["commit"], head.as_str());
    assert_eq!(r["clean"], true);
    // The SHA-256 is of the whole output, and the output is in the history.
    let expected = {
        let out = std::process::Command::new("sh")
            .args(["-c", "printf 'all tests passed\\n' | sha256sum"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()[..64].to_owned()
    };
    assert_eq!(r["output_sha256"], expected.as_str());
    let kept = std::fs::read_to_string(r["output_file"].as_str().unwrap()).unwrap();
    assert_eq!(kept, "all tests passed\n");
    let (_, status, _) = p.ralph(&["status"]);
    assert!(
        status.contains("receipt: `echo all tests passed"),
        "{status}"
    );
    let (code, text, _) = p.ralph(&["receipt", "--recheck"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("done still holds") && text.contains("output identical"),
        "{text}"
    );
    p.write("broken", "");
    let (code, text, err) = p.ralph(&["receipt", "--recheck", "--json"]);
    assert_eq!(code, 1, "{text}{err}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["recheck"]["holds"], false);
    assert!(err.contains("no longer passes (exit 1)"), "{err}");
}

#[test]
fn a_receipt_is_read_only_from_this_user_s_state_not_the_project() {
    let p = Project::new();
    // A receipt-looking file planted in the project's history is not one.
    p.write(
        ".claude/ralph/history/ralph.receipt.json",
        r#"{"command":"touch pwned"}"#,
    );
    p.start(&[]);
    let (code, _, err) = p.ralph(&["receipt", "--name", "ralph", "--recheck"]);
    assert_eq!(code, 1);
    assert!(err.contains("no receipt for loop `ralph`"), "{err}");
    assert!(!p.exists("pwned"));
}
