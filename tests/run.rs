//! `ralph run` (fresh-context mode) through the real binary, with a scripted
//! fake agent, through every way a loop can end; plus `ralph statusline`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::project::Project;
use crate::support::text;

/// A scripted agent: the Nth call saves its prompt as `.agent/prompt-N` and
/// prints `.agent/reply-N` (or the last reply written), after sleeping the
/// seconds in `.agent/delay` (every call) or `.agent/delay-N`. With `.agent/hold`
/// present it waits (up to a minute) until the test creates `.agent/go`, so a
/// test can look at a run mid-iteration without racing a sleep.
const AGENT: &str = r#"n=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n
cat > .agent/prompt-$n
[ -f .agent/delay ] && sleep "$(cat .agent/delay)"
[ -f .agent/delay-$n ] && sleep "$(cat .agent/delay-$n)"
if [ -f .agent/hold ]; then i=0; while [ ! -f .agent/go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; fi
if [ -f .agent/reply-$n ]; then cat .agent/reply-$n; else cat "$(ls .agent/reply-* | sort -t- -k2 -n | tail -n 1)"; fi"#;

/// This module's steps on the shared [`Project`].
trait Steps {
    fn with_agent(replies: &[&str]) -> Self;
    fn run(&self, flags: &[&str]) -> Output;
    fn calls(&self) -> usize;
    fn prompt(&self, n: usize) -> String;
    fn status(&self) -> Value;
    fn loop_json(&self) -> Value;
}

impl Steps for Project {
    /// A project whose scripted agent (`AGENT`) prints `replies` in turn.
    fn with_agent(replies: &[&str]) -> Self {
        let p = Project::new();
        std::fs::create_dir_all(p.path(".agent")).unwrap();
        p.write(".agent/agent.sh", AGENT);
        for (i, r) in replies.iter().enumerate() {
            p.write(&format!(".agent/reply-{}", i + 1), r);
        }
        p
    }

    fn run(&self, flags: &[&str]) -> Output {
        let mut args = vec!["run", "--agent", "sh .agent/agent.sh"];
        args.extend_from_slice(flags);
        self.command(&args).output().unwrap()
    }

    fn calls(&self) -> usize {
        std::fs::read_to_string(self.path(".agent/n")).map_or(0, |n| n.trim().parse().unwrap())
    }

    fn prompt(&self, n: usize) -> String {
        std::fs::read_to_string(self.path(&format!(".agent/prompt-{n}"))).unwrap()
    }

    fn status(&self) -> Value {
        let out = self.command(&["status", "--json"]).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn loop_json(&self) -> Value {
        self.status()["loops"][0].clone()
    }
}

#[test]
fn promise_completes_and_every_iteration_is_fresh() {
    let p = Project::with_agent(&[
        "step one",
        "step two",
        "All checked.\n<promise>DONE</promise>",
    ]);
    let out = p.run(&[
        "--completion-promise",
        "DONE",
        "--max-iterations",
        "5",
        "Build the parser",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(p.calls(), 3);
    assert!(
        p.prompt(1).starts_with("Build the parser") && p.prompt(1).contains("iteration 1 of 5")
    );
    assert!(
        p.prompt(3).contains("iteration 3 of 5") && p.prompt(3).contains("<promise>DONE</promise>")
    );
    let l = p.loop_json();
    assert_eq!(
        (l["outcome"].as_str(), l["iteration"].as_u64()),
        (Some("completed"), Some(3)),
        "{l}"
    );
    let out_text = text(&out);
    assert!(
        out_text.contains("iteration 1/5 done") && out_text.contains("completed"),
        "{out_text}"
    );
}

#[test]
fn iteration_limit_ends_with_exit_code_3() {
    let p = Project::with_agent(&["a", "b", "c", "d"]);
    let out = p.run(&[
        "--completion-promise",
        "DONE",
        "--max-iterations",
        "3",
        "Task",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(p.calls(), 3);
    assert_eq!(p.loop_json()["outcome"], "max_iterations");
}

#[test]
fn token_budget_from_the_agents_json_usage() {
    let usage = |t: &str| {
        json!({"type": "result", "result": t, "usage": {"input_tokens": 300, "cache_creation_input_tokens": 100, "output_tokens": 100, "cache_read_input_tokens": 99999}}).to_string()
    };
    let p = Project::with_agent(&[&usage("one"), &usage("two"), &usage("three")]);
    let out = p.run(&["--max-tokens", "1000", "--max-iterations", "9", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(p.calls(), 2, "500 then 1000 of 1000 tokens");
    assert!(
        !p.prompt(2).contains("Token budget"),
        "500 is under 80 %: no wrap-up yet"
    );
    let l = p.loop_json();
    assert_eq!(
        (l["outcome"].as_str(), l["tokens_used"].as_u64()),
        (Some("token_budget"), Some(1000)),
        "{l}"
    );
}

#[test]
fn time_budget_ends_the_run() {
    let p = Project::with_agent(&["working"]);
    std::fs::write(p.path(".agent/delay"), "1.2").unwrap();
    let out = p.run(&["--max-duration", "1s", "--max-iterations", "9", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(p.calls(), 1);
    assert_eq!(p.loop_json()["outcome"], "time_budget");
}

#[test]
fn stuck_breaker_ends_the_run() {
    let p = Project::with_agent(&["same reply"]);
    let out = p.run(&["--stuck-after", "3", "--max-iterations", "9", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(p.calls(), 3);
    assert_eq!(p.loop_json()["outcome"], "stuck");
}

#[test]
fn verification_gate_refuses_then_accepts() {
    let p = Project::with_agent(&[
        "<promise>DONE</promise>",
        "fixed it\n<promise>DONE</promise>",
    ]);
    // The gate passes once the agent has run twice: a file the agent writes is the evidence.
    let verify = "test \"$(cat .agent/n)\" -ge 2 || { echo 'tests: 1 failed'; exit 1; }";
    let out = p.run(&[
        "--completion-promise",
        "DONE",
        "--verify",
        verify,
        "--max-iterations",
        "5",
        "Task",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(p.calls(), 2);
    let second = p.prompt(2);
    assert!(
        second.contains("was refused")
            && second.contains("exit 1")
            && second.contains("tests: 1 failed"),
        "{second}"
    );
    assert!(text(&out).contains("promise refused"), "{}", text(&out));
    assert_eq!(p.loop_json()["outcome"], "completed");
}

#[test]
fn abort_promise_ends_the_run() {
    let p = Project::with_agent(&[
        "I need the production database password.\n<promise>BLOCKED</promise>",
    ]);
    let out = p.run(&[
        "--completion-promise",
        "DONE",
        "--abort-promise",
        "BLOCKED",
        "Task",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("production database password"),
        "{}",
        text(&out)
    );
    assert_eq!(p.loop_json()["outcome"], "aborted");
}

#[test]
fn ctrl_c_stops_the_agent_and_pauses_the_loop_and_a_second_run_finishes_it() {
    let p = Project::with_agent(&["first", "never seen", "<promise>DONE</promise>"]);
    std::fs::write(p.path(".agent/delay-2"), "600").unwrap();
    let child = p
        .command(&[
            "run",
            "--agent",
            "sh .agent/agent.sh; touch .agent/finished-$(cat .agent/n)",
            "--max-iterations",
            "5",
            "--completion-promise",
            "DONE",
            "Task",
        ])
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !p.path(".agent/prompt-2").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the second iteration never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let interrupted_at = Instant::now();
    let ok = Command::new("kill")
        .args(["-s", "INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    assert!(
        // Far below the agent's 600 s: it was stopped (a hang guard, not a race).
        interrupted_at.elapsed() < Duration::from_secs(120),
        "the 600 s agent must have been stopped"
    );
    assert!(
        text(&out).contains("was paused at iteration 2, its count and spend kept"),
        "{}",
        text(&out)
    );
    let l = p.loop_json();
    assert_eq!(
        (l["state"].as_str(), l["iteration"].as_u64()),
        (Some("paused"), Some(2)),
        "{l}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !p.path(".agent/finished-2").exists(),
        "the agent's process group was killed"
    );
    let leftovers: Vec<_> = std::fs::read_dir(p.path(".claude"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The same loop goes on: iteration 2 again, then the promise.
    let name = l["name"].as_str().unwrap().to_owned();
    let out = p.run(&["--name", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let ended = p.loop_json();
    assert_eq!(ended["outcome"], "completed", "{ended}");
    assert_eq!(ended["iteration"], 2, "{ended}");
}

#[test]
fn resumes_a_loop_armed_in_session_and_hands_it_back() {
    let p = Project::with_agent(&["one", "two", "three"]);
    let armed = p
        .command(&[
            "start",
            "--session-id",
            "sess-1",
            "--max-iterations",
            "9",
            "Shared task",
        ])
        .output()
        .unwrap();
    assert!(armed.status.success());
    let out = p.run(&["--hand-back-after", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(p.calls(), 2);
    assert!(
        text(&out).contains("Handed the loop `ralph` back"),
        "{}",
        text(&out)
    );
    let l = p.loop_json();
    assert_eq!(
        (
            l["state"].as_str(),
            l["iteration"].as_u64(),
            l["session_id"].as_str()
        ),
        (Some("active"), Some(3), Some("sess-1")),
        "{l}"
    );
    // The session's own Stop hook drives it again from where the run left it.
    let mut hook = p
        .command(&["hook", "stop"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    hook.stdin.take().unwrap().write_all(json!({"session_id": "sess-1", "cwd": p.root(), "last_assistant_message": "in session"}).to_string().as_bytes()).unwrap();
    let answer: Value = serde_json::from_slice(&hook.wait_with_output().unwrap().stdout).unwrap();
    assert_eq!(answer["decision"], "block");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("iteration 4 of 9")
    );
}

#[test]
fn a_run_owns_its_loop_so_sessions_do_not_drive_it() {
    let p = Project::with_agent(&["one"]);
    std::fs::write(p.path(".agent/hold"), "").unwrap();
    let child = p
        .command(&[
            "run",
            "--agent",
            "sh .agent/agent.sh",
            "--max-iterations",
            "1",
            "Task",
        ])
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !p.path(".agent/prompt-1").exists() {
        assert!(started.elapsed() < Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = std::fs::read_to_string(p.path(".claude/ralph-loop.local.md")).unwrap();
    let mut hook = p
        .command(&["hook", "stop"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    hook.stdin
        .take()
        .unwrap()
        .write_all(
            json!({"session_id": "someone", "cwd": p.root(), "last_assistant_message": "x"})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    assert!(hook.wait_with_output().unwrap().stdout.is_empty());
    assert_eq!(
        std::fs::read_to_string(p.path(".claude/ralph-loop.local.md")).unwrap(),
        before
    );
    std::fs::write(p.path(".agent/go"), "").unwrap();
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
}

#[test]
fn resuming_needs_a_loop_and_keeps_its_settings() {
    let p = Project::with_agent(&["x"]);
    let out = p.run(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no loop named `ralph`"));
    p.command(&["start", "--session-id", "s", "Task"])
        .output()
        .unwrap();
    let out = p.run(&["--max-iterations", "3"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn agent_failure_ends_the_loop_it_armed_and_says_why() {
    let p = Project::with_agent(&["x"]);
    let out = p
        .command(&[
            "run",
            "--agent",
            "echo 'model overloaded' >&2; exit 7",
            "Task",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // The loop was armed by this run: it ends as failed rather than wait
    // for the next unrelated session (a taken-over loop is handed back:
    // tests/first_hour.rs).
    assert!(
        text(&out).contains("model overloaded") && text(&out).contains("ended as failed"),
        "{}",
        text(&out)
    );
    let l = p.loop_json();
    assert_eq!(
        (
            l["state"].as_str(),
            l["outcome"].as_str(),
            l["iteration"].as_u64()
        ),
        (Some("ended"), Some("failed"), Some(1))
    );
}

#[test]
fn a_new_branch_in_the_prd_archives_the_previous_run() {
    let p = Project::with_agent(&["<promise>DONE</promise>"]);
    std::fs::create_dir_all(p.path("ralph")).unwrap();
    let prd = |b: &str| json!({"branchName": b, "userStories": []}).to_string();
    std::fs::write(p.path("ralph/prd.json"), prd("ralph/first")).unwrap();
    std::fs::write(p.path("ralph/progress.txt"), "first run notes").unwrap();
    assert!(
        p.run(&["--completion-promise", "DONE", "Task one"])
            .status
            .success()
    );
    std::fs::write(p.path("ralph/prd.json"), prd("ralph/second")).unwrap();
    let out = p.run(&["--completion-promise", "DONE", "Task two"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("archived"), "{}", text(&out));
    let archive: Vec<PathBuf> = std::fs::read_dir(p.path("ralph/archive"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(archive.len(), 1);
    assert!(archive[0].to_string_lossy().ends_with("-ralph-first"));
    assert_eq!(
        std::fs::read_to_string(archive[0].join("progress.txt")).unwrap(),
        "first run notes"
    );
    assert_eq!(
        std::fs::read_to_string(archive[0].join("prd.json")).unwrap(),
        prd("ralph/first")
    );
}

#[test]
fn statusline_shows_this_sessions_loop_only() {
    let p = Project::with_agent(&[]);
    let armed = Instant::now();
    p.command(&[
        "start",
        "--session-id",
        "s1",
        "--max-iterations",
        "20",
        "--completion-promise",
        "DONE",
        "Task",
    ])
    .output()
    .unwrap();
    let line = |session: &str| {
        let mut child = p
            .command(&["statusline"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let status = json!({"session_id": session, "cwd": p.root(), "workspace": {"current_dir": p.root(), "project_dir": p.root()}, "model": {"display_name": "Opus"}});
        child
            .stdin
            .take()
            .unwrap()
            .write_all(status.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    // The elapsed time is whole seconds since arming: it may have ticked over
    // between `start` and this line, so allow what the test itself took.
    let armed_for = armed.elapsed().as_secs();
    let shown = line("s1");
    let secs: u64 = shown
        .strip_prefix("🔄 ralph 1/20 · ")
        .and_then(|rest| rest.strip_suffix("s · DONE · Task\n"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected status line {shown:?}"));
    assert!(secs <= armed_for + 1, "{shown:?} after {armed_for}s");
    assert_eq!(line("other"), "");
    p.command(&["pause"]).output().unwrap();
    assert!(line("s1").contains("paused"));
}
