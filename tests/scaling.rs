//! The hook's cost follows the work, not the input (issue 27; issue 25,
//! items 5 and 6), through the real binary: a loop's first stop over a
//! large transcript in flat memory, one very long transcript line in linear
//! time, and thousands of committed loop files that are not this user's at
//! the cost of a few notices.
//!
//! Peak memory is GNU time's `Maximum resident set size`; a test without
//! `/usr/bin/time` says so and passes. Time bounds are on the processor time
//! GNU time reports (user and system), which a saturated machine barely moves,
//! never on the wall clock; loose for the debug build, far below what the
//! quadratic reads took.

#![cfg(unix)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::project::{BIN, Project};
use crate::support::scrub;

const SESSION: &str = "scaling-session";

/// A line stamped after any loop armed today, so a first stop counts it.
const LATER: &str = "2099-01-01T00:00:00.000Z";

fn arm(p: &Project) {
    let out = p.ralph_in(
        &[
            "start",
            "--max-iterations",
            "0",
            "--completion-promise",
            "DONE",
            "--session-id",
            SESSION,
            "Work",
        ],
        p.root(),
        b"",
        &[],
    );
    assert!(out.status.success(), "{out:?}");
}

/// Runs `ralph hook stop` (under GNU time when it is there); the output
/// and the peak RSS in KiB (`None` without GNU time).
fn stop(p: &Project, event: &Value) -> (Output, Option<u64>) {
    timed(p, &["hook", "stop"], event.to_string().as_bytes())
}

/// Runs `ralph <args>` with `stdin` (under GNU time when it is there); the
/// output and the peak RSS in KiB (`None` without GNU time).
fn timed(p: &Project, args: &[&str], stdin: &[u8]) -> (Output, Option<u64>) {
    let time = Path::new("/usr/bin/time");
    let mut cmd = if time.exists() {
        let mut c = Command::new(time);
        c.args(["-v", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    scrub(&mut cmd)
        .args(args)
        .current_dir(p.root())
        .env("LC_ALL", "C")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in p.user_env() {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    let kib = String::from_utf8_lossy(&out.stderr).lines().find_map(|l| {
        l.trim()
            .strip_prefix("Maximum resident set size (kbytes): ")
            .and_then(|v| v.trim().parse().ok())
    });
    (out, kib)
}

/// The processor time (user and system) GNU time reports for the run, which
/// a loaded machine barely moves, unlike the wall time (`None` without GNU
/// time): the bounds below are on work done, never on how long the test waited.
fn cpu(out: &Output) -> Option<Duration> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let seconds = |label: &str| -> Option<f64> {
        stderr
            .lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|v| v.trim().parse().ok())
    };
    let total = seconds("User time (seconds): ")? + seconds("System time (seconds): ")?;
    Some(Duration::from_secs_f64(total))
}

fn answer(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().next().unwrap_or("null")).unwrap()
}

fn event(p: &Project, transcript: &Path, session: &str) -> Value {
    json!({"session_id": session, "cwd": p.root(), "transcript_path": transcript,
           "hook_event_name": "Stop", "stop_hook_active": false})
}

/// A transcript of about `mib` MiB of turns stamped after the loop's start
/// (user prompt, tool call, a tool result of 16 KiB, a reply), ending with
/// a reply that has no promise.
fn big_transcript(dir: &Path, mib: usize) -> PathBuf {
    let path = dir.join("t.jsonl");
    let mut f = BufWriter::new(std::fs::File::create(&path).unwrap());
    let blob = "log line of a tool result\\n".repeat(16 * 1024 / 27);
    let mut written = 0;
    let mut i = 0u64;
    while written < mib * 1024 * 1024 {
        i += 1;
        let turn = format!(
            concat!(
                r#"{{"type":"user","timestamp":"{t}","message":{{"role":"user","content":"go on {i}"}}}}"#,
                "\n",
                r#"{{"type":"assistant","timestamp":"{t}","message":{{"id":"a{i}","role":"assistant","content":[{{"type":"tool_use","id":"u{i}","name":"Read","input":{{}}}}],"stop_reason":"tool_use","usage":{{"input_tokens":3,"output_tokens":2}}}}}}"#,
                "\n",
                r#"{{"type":"user","timestamp":"{t}","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"u{i}","content":"{blob}"}}]}}}}"#,
                "\n",
                r#"{{"type":"assistant","timestamp":"{t}","message":{{"id":"b{i}","role":"assistant","content":[{{"type":"text","text":"Turn {i} done."}}],"stop_reason":"end_turn","usage":{{"input_tokens":3,"output_tokens":2}}}}}}"#,
                "\n",
            ),
            t = LATER,
            i = i,
            blob = blob
        );
        f.write_all(turn.as_bytes()).unwrap();
        written += turn.len();
    }
    f.flush().unwrap();
    path
}

/// Issue 27: the first stop's token and tool scan from the loop's start
/// streams the transcript: its peak memory is that of a stop over a tiny
/// transcript, not the span it reads (it buffered up to 64 MiB before).
#[test]
fn a_first_stop_over_a_large_transcript_takes_flat_memory() {
    let small = Project::new();
    arm(&small);
    let tiny = big_transcript(small.home(), 0);
    let (out, base) = stop(&small, &event(&small, &tiny, SESSION));
    assert_eq!(answer(&out)["decision"], "block");
    let Some(base) = base else {
        eprintln!("skipped the memory check: no GNU time at /usr/bin/time");
        return;
    };

    let p = Project::new();
    arm(&p);
    let t = big_transcript(p.home(), 16);
    let (out, first) = stop(&p, &event(&p, &t, SESSION));
    let took = cpu(&out);
    let first_answer = answer(&out);
    assert_eq!(first_answer["decision"], "block", "{first_answer}");
    // Every turn of the transcript counted: 5 tokens a message, two a turn.
    let text = p.read(crate::support::LOOP);
    let tokens: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("tokens_used: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(tokens > 5_000, "the scan counted the loop's turns: {text}");
    let first = first.unwrap();
    assert!(
        first < base + 2048,
        "first stop over 16 MiB: peak {first} KiB against {base} KiB over a tiny transcript"
    );
    // The next stop reads only what was appended.
    let (out, next) = stop(&p, &event(&p, &t, SESSION));
    assert_eq!(answer(&out)["decision"], "block");
    assert!(next.unwrap() < base + 2048);
    assert!(
        took.is_none_or(|t| t < Duration::from_secs(20)),
        "first stop took {took:?} of processor time"
    );
}

/// Issue 25, item 6: one 32 MB transcript line (a tool result the client
/// wrote as one line) made the backward reader join and search its blocks
/// again and again, quadratic in the line (35 s in a release build). Now
/// it is read in linear time: streamed by the forward scan, and read back
/// once by the backward one.
#[test]
fn one_very_long_transcript_line_is_read_in_linear_time() {
    let p = Project::new();
    arm(&p);
    let path = p.home().join("t.jsonl");
    {
        let mut f = BufWriter::new(std::fs::File::create(&path).unwrap());
        write!(
            f,
            r#"{{"type":"user","timestamp":"{LATER}","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"u1","content":""#
        )
        .unwrap();
        let chunk = "x".repeat(1024 * 1024);
        for _ in 0..32 {
            f.write_all(chunk.as_bytes()).unwrap();
        }
        writeln!(f, r#""}}]}}}}"#).unwrap();
        writeln!(
            f,
            r#"{{"type":"assistant","timestamp":"{LATER}","message":{{"id":"b1","role":"assistant","content":[{{"type":"text","text":"Not yet."}}],"stop_reason":"end_turn","usage":{{"input_tokens":3,"output_tokens":2}}}}}}"#
        )
        .unwrap();
    }
    let (_, base) = stop(&p, &json!({"session_id": "other", "cwd": p.root()}));
    let (out, kib) = stop(&p, &event(&p, &path, SESSION));
    let took = cpu(&out);
    assert_eq!(answer(&out)["decision"], "block", "{out:?}");
    // Before: 35 s in a release build; now 0.3 s there, about 4 s in a debug one.
    assert!(
        took.is_none_or(|t| t < Duration::from_secs(15)),
        "a stop over a 32 MB line took {took:?} of processor time"
    );
    if let (Some(kib), Some(base)) = (kib, base) {
        // The backward reply scan holds at most its 16 MiB window of the
        // line, once; the forward scan none of it (70 MB in all before).
        assert!(kib < base + 18 * 1024, "peak {kib} KiB, {base} KiB at rest");
    }
}

/// Issue 25, item 5: 3,000 committed loop files that nobody armed here took
/// a first stop 8 s and the next session's 25 s (each notice re-read the
/// markers folder) and printed 3,000 notices. Now a stop names a few and
/// counts the rest in one line, once per session, and costs the same for
/// every session.
#[test]
fn thousands_of_inert_loop_files_cost_a_few_notices_per_session() {
    let p = Project::new();
    let planted = "---\nactive: true\niteration: 1\nsession_id: \nmax_iterations: 5\ncompletion_promise: \"DONE\"\nstarted_at: \"2026-01-01T00:00:00Z\"\n---\n\nOutput <promise>DONE</promise> now.\n";
    for i in 0..3000 {
        p.write(&format!(".claude/x{i:04}-loop.local.md"), planted);
    }
    let none = p.home().join("none.jsonl");
    let warnings = |a: &Value| {
        a["systemMessage"]
            .as_str()
            .unwrap_or_default()
            .matches("⚠ ralph")
            .count()
    };
    for session in ["s1", "s2", "s3"] {
        let (out, _) = stop(&p, &event(&p, &none, session));
        let took = cpu(&out);
        let a = answer(&out);
        assert_eq!(warnings(&a), 4, "{session}: three named, one summary: {a}");
        let message = a["systemMessage"].as_str().unwrap();
        assert!(
            message.contains("2997 more loop files"),
            "{session}: {message}"
        );
        assert!(
            took.is_none_or(|t| t < Duration::from_secs(8)),
            "{session}: first stop took {took:?} of processor time"
        );
        // The same session is not told twice.
        let (out, _) = stop(&p, &event(&p, &none, session));
        assert_eq!(answer(&out), Value::Null, "{session}: told again");
    }
    // A new file changes the set: told again, with the new count.
    p.write(".claude/y-loop.local.md", planted);
    let (out, _) = stop(&p, &event(&p, &none, "s1"));
    let a = answer(&out);
    assert!(
        a["systemMessage"]
            .as_str()
            .is_some_and(|m| m.contains("2998 more loop files")),
        "{a}"
    );
}

/// `ralph resume --all` (and `/ralph-resume --all`) read the project's loop files once per
/// loop file: with 2,000 planted paused files that was 54 s and every stranger's file was
/// resumed. Now one scan under one lock decides them all, and none is resumed.
#[test]
fn resume_all_over_thousands_of_planted_loop_files_reads_them_once() {
    let p = Project::new();
    let planted = "---\nactive: false\niteration: 1\nsession_id: \nmax_iterations: 5\n---\n\nA stranger's task.\n";
    for i in 0..2000 {
        p.write(&format!(".claude/x{i:04}-loop.local.md"), planted);
    }
    let (out, _) = timed(&p, &["resume", "--all"], b"");
    let took = cpu(&out);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("Nothing to resume: no matching loop is paused.\n")
            && said.contains("1997 more loop files not armed here"),
        "{said}"
    );
    assert!(
        took.is_none_or(|t| t < Duration::from_secs(8)),
        "resume --all took {took:?} of processor time"
    );
    assert_eq!(p.read(".claude/x0000-loop.local.md"), planted);
}
