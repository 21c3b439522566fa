//! A gate stays in its box (issue 36, items 3 and 5), through the real binary as a Stop hook:
//! what a `--verify` gate or `--check` starts does not outlive it, even after `setsid`, and
//! cannot hold the hook's stdout (Claude Code's read) open through `/proc/<hook>/fd/1`; a gate
//! that prints far more than ralph keeps is digested whole, kept only at its end, and said cut.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{blocked, project::Project};

/// How long a stop whose gate takes a moment may take, however loaded the machine: far
/// below the 20 s the attacks' processes sleep.
const PROMPT: Duration = Duration::from_secs(10);

fn start(p: &Project, flags: &[&str]) {
    let mut args = vec!["start", "--session-id", "s1", "--stuck-after", "0"];
    args.extend_from_slice(flags);
    args.push("Fix the build");
    let out = p.ralph_with(&args, b"", &[]);
    assert!(out.status.success(), "{out:?}");
}

/// One Stop hook as Claude Code runs it: the hook's pid written to `hook.pid` in the
/// project before the event is sent, stdout read until it closes. Returns the answer and
/// how long stdout stayed open.
fn stop_until_stdout_closes(p: &Project, reply: &str) -> (Value, Duration) {
    let mut hook = p.command(&["hook", "stop"]);
    hook.env("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")
        .stdin(Stdio::piped());
    let mut child = hook.spawn().unwrap();
    p.write("hook.pid", &child.id().to_string());
    let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": reply});
    let started = Instant::now();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(event.to_string().as_bytes()).unwrap();
    drop(stdin);
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let open_for = started.elapsed();
    child.wait().unwrap();
    let answer = if out.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&out).unwrap()
    };
    (answer, open_for)
}

/// Whether `pid` (from a file the gate wrote) is a live process, not a zombie.
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

/// Kills what an attack left behind when the defence failed, so a failing run does not
/// leave sleepers.
fn reap(p: &Project, file: &str) {
    let pid = p.read_or_empty(file);
    if let Ok(pid) = pid.trim().parse::<i32>()
        && alive(&pid.to_string())
    {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_gate_child_that_calls_setsid_does_not_outlive_the_gate() {
    let p = Project::new();
    start(
        &p,
        &[
            // The box itself is under test (host pids): not the sandbox around it.
            "--gate-sandbox",
            "off",
            "--completion-promise",
            "DONE",
            "--verify",
            "setsid sh -c 'echo $$ > escaped.pid; exec sleep 20' </dev/null >/dev/null 2>&1 & \
             while [ ! -s escaped.pid ]; do sleep 0.05; done; exit 0",
        ],
    );
    let (answer, open_for) = stop_until_stdout_closes(&p, "<promise>DONE</promise>");
    let pid = p.read_or_empty("escaped.pid");
    let survived = !pid.is_empty() && {
        // Killing takes a moment: give it one.
        let deadline = Instant::now() + Duration::from_secs(2);
        while alive(&pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        alive(&pid)
    };
    reap(&p, "escaped.pid");
    assert!(
        !pid.is_empty(),
        "the gate never started its child: {answer}"
    );
    assert!(!survived, "the setsid child outlived the gate");
    assert!(!blocked(&answer), "{answer}");
    assert!(open_for < PROMPT, "stdout stayed open {open_for:?}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_gate_child_holding_the_hook_s_stdout_does_not_keep_it_open() {
    let p = Project::new();
    // The child reopens the hook's own stdout through /proc (as root in CI, or where the
    // hook is readable) and leaves the gate's group and session with it.
    start(
        &p,
        &[
            "--check",
            "while [ ! -s hook.pid ]; do sleep 0.05; done; \
             setsid sh -c 'echo $$ > holder.pid; exec sleep 20 >>/proc/$(cat hook.pid)/fd/1' \
               </dev/null >/dev/null 2>&1 & \
             while [ ! -s holder.pid ]; do sleep 0.05; done; sleep 0.2; exit 1",
        ],
    );
    let (answer, open_for) = stop_until_stdout_closes(&p, "working");
    reap(&p, "holder.pid");
    assert!(
        p.exists("holder.pid"),
        "the check never started its child: {answer}"
    );
    assert!(
        open_for < PROMPT,
        "Claude Code's read of the hook stayed open {open_for:?}"
    );
    assert!(blocked(&answer), "{answer}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap_or("")
            .contains("The check `"),
        "{answer}"
    );
}

/// The bytes the gate below prints, made again here for the expected digest.
const FLOOD: &str = "head -c 50000000 /dev/zero | tr '\\0' x; echo; echo the last line";

fn sha256_of_flood() -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("({FLOOD}) | sha256sum")])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

#[cfg(unix)]
#[test]
fn a_gate_that_prints_far_more_than_the_cap_is_digested_whole_and_kept_cut() {
    let p = Project::new();
    start(&p, &["--completion-promise", "DONE", "--verify", FLOOD]);
    let (answer, _) = stop_until_stdout_closes(&p, "<promise>DONE</promise>");
    assert!(!blocked(&answer), "{answer}");
    let out = p.ralph_with(&["receipt", "--json"], b"", &[]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &r["receipt"];
    assert_eq!(r["output_bytes"], 50_000_000 + 1 + "the last line\n".len());
    assert_eq!(r["output_cut"], true, "{r}");
    assert_eq!(r["output_sha256"], sha256_of_flood().as_str());
    let kept = std::fs::metadata(r["output_file"].as_str().unwrap()).unwrap();
    assert!(kept.len() <= 1024 * 1024, "kept {} bytes", kept.len());
    let notice = answer["systemMessage"].as_str().unwrap_or("");
    assert!(
        notice.contains("of 50000015 bytes; the history keeps only the last"),
        "{answer}"
    );
}

#[cfg(unix)]
#[test]
fn a_check_that_prints_far_more_than_the_cap_says_its_output_was_cut() {
    let p = Project::new();
    let flood_then_fail = format!("{FLOOD}; exit 1");
    start(&p, &["--check", &flood_then_fail]);
    let (answer, _) = stop_until_stdout_closes(&p, "working");
    assert!(blocked(&answer), "{answer}");
    let reason = answer["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("[output cut: 50000015 bytes in all; ralph kept the last")
            && reason.contains("the last line"),
        "{reason}"
    );
}
