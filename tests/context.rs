//! Issue 50 through the real binary: the context fill in every turn's log line (the window
//! only as the status line reported it), a compaction logged, and `--fresh-at`'s hand-over
//! (a wrap-up turn, the pause and its one line, `/clear` in the same client taking the loop
//! on with its task for the model; another client's `/clear` taking nothing).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::project::{LOOP, Project};

use serde_json::{Value, json};

const OWNER: &str = "5b360de9-0000-4000-8000-00000000aaaa";
const FRESH: &str = "5b360de9-0000-4000-8000-00000000cccc";
const CLIENT: &str = "4242";

fn cwd(s: &Project) -> String {
    s.root().to_str().unwrap().to_owned()
}

/// `ralph ARGS` as the client process `CLIENT`.
fn ralph(s: &Project, args: &[&str], stdin: &[u8], client_pid: &str) -> std::process::Output {
    s.ralph_with(args, stdin, &[("CLAUDE_PID", client_pid)])
}

fn arm(s: &Project, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "start",
        "--session-id",
        OWNER,
        "--max-iterations",
        "20",
        "--completion-promise",
        "DONE",
    ];
    args.extend_from_slice(extra);
    args.push("Write the user guide");
    ralph(s, &args, b"", "")
}

/// The status line as Claude Code refreshes it for `session`, with its context window.
fn statusline(s: &Project, session: &str, window: u64) {
    let input = json!({"session_id": session, "cwd": cwd(s), "workspace": {"current_dir": cwd(s)},
        "context_window": {"context_window_size": window, "used_percentage": 1}});
    let out = ralph(s, &["statusline"], input.to_string().as_bytes(), "");
    assert!(out.status.success(), "{out:?}");
}

/// An assistant line whose request sent `context` tokens (all but 5 read from the cache).
fn reply(id: &str, context: u64) -> String {
    json!({"type": "assistant", "isSidechain": false, "timestamp": "2099-01-01T00:00:00Z",
        "message": {"id": id, "role": "assistant", "content": [{"type": "text", "text": "working"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 5, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": context - 5, "output_tokens": 40}}})
    .to_string()
}

/// One Stop of `session` after the transcript grew by `lines` (a reply of its own each
/// time, so the stuck breaker stays out of it); the answer.
fn stop(s: &Project, session: &str, lines: &[String]) -> Value {
    let transcript = s.home().join(format!("{session}.jsonl"));
    let mut text = std::fs::read_to_string(&transcript).unwrap_or_default();
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    let said = format!("step {}", text.len());
    std::fs::write(&transcript, text).unwrap();
    let event = json!({"session_id": session, "cwd": cwd(s), "hook_event_name": "Stop",
        "stop_hook_active": true, "last_assistant_message": said,
        "transcript_path": transcript});
    let out = ralph(s, &["hook", "stop"], event.to_string().as_bytes(), "");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn session_hook(s: &Project, which: &str, event: &Value, client_pid: &str) -> Value {
    let out = ralph(
        s,
        &["hook", which],
        event.to_string().as_bytes(),
        client_pid,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn log(s: &Project) -> Vec<Value> {
    s.read_or_empty(".claude/ralph/logs/ralph.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn field(s: &Project, key: &str) -> Option<String> {
    s.read(LOOP)
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().trim_matches('"').to_owned())
}

#[test]
fn each_turn_logs_the_context_sent_and_the_percentage_only_with_a_known_window() {
    let s = Project::new();
    assert!(arm(&s, &[]).status.success());
    // No status line yet: the tokens, never a percentage of a guessed window.
    stop(&s, OWNER, &[reply("m1", 190_000)]);
    let first = log(&s).pop().unwrap();
    assert_eq!(first["context_tokens"], 190_000, "{first}");
    assert_eq!(first.get("context_percent"), None, "{first}");
    statusline(&s, OWNER, 1_000_000);
    stop(&s, OWNER, &[reply("m2", 190_000)]);
    let second = log(&s).pop().unwrap();
    assert_eq!(
        (&second["context_window"], &second["context_percent"]),
        (&json!(1_000_000), &json!(19)),
        "a 1M window is not 200k: {second}"
    );
    let shown = String::from_utf8(s.ralph_with(&["log"], b"", &[]).stdout).unwrap();
    assert!(shown.contains("context 190k, window unknown"), "{shown}");
    assert!(shown.contains("context 19% of 1M"), "{shown}");
    let status = String::from_utf8(s.ralph_with(&["status"], b"", &[]).stdout).unwrap();
    assert!(
        status.contains("context 19% of 1M at iteration 2"),
        "{status}"
    );
    // A compaction is logged where it happened.
    let compact = json!({"session_id": OWNER, "cwd": cwd(&s), "hook_event_name": "PostCompact",
        "trigger": "auto", "compact_summary": "…"});
    assert_eq!(session_hook(&s, "post-compact", &compact, ""), Value::Null);
    let line = log(&s).pop().unwrap();
    assert_eq!(
        (&line["decision"], &line["trigger"]),
        (&json!("compact"), &json!("auto"))
    );
}

#[test]
fn fresh_at_a_share_is_refused_until_the_status_line_reported_the_window() {
    let s = Project::new();
    let out = arm(&s, &["--fresh-at", "60"]);
    assert!(!out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("ralph statusline") && said.contains("Nothing was armed"),
        "{said}"
    );
    assert!(!s.exists(LOOP));
    let alone = arm(&s, &["--fresh-via", "run"]);
    let said = String::from_utf8_lossy(&alone.stderr);
    assert!(
        !alone.status.success() && said.contains("`--fresh-at`, which was not given"),
        "{alone:?}"
    );
    statusline(&s, OWNER, 200_000);
    let armed = arm(&s, &["--fresh-at", "60"]);
    assert!(armed.status.success(), "{armed:?}");
    let said = String::from_utf8_lossy(&armed.stdout);
    assert!(
        said.contains("a fresh conversation at 60% of the context window"),
        "{said}"
    );
    assert_eq!(field(&s, "fresh_at").as_deref(), Some("60%"));
}

#[test]
fn fresh_at_wraps_up_pauses_and_goes_on_after_clear_in_the_same_client_only() {
    let s = Project::new();
    statusline(&s, OWNER, 200_000);
    assert!(arm(&s, &["--fresh-at", "60"]).status.success());
    // Under the threshold: the loop goes on as ever.
    let answer = stop(&s, OWNER, &[reply("m1", 100_000)]);
    assert_eq!(answer["decision"], "block");
    assert!(
        !answer["reason"].as_str().unwrap().contains("last turn"),
        "{answer}"
    );
    // At 65 %: the wrap-up turn.
    let answer = stop(&s, OWNER, &[reply("m2", 130_000)]);
    let reason = answer["reason"].as_str().unwrap();
    assert!(
        reason.contains("Context: 65% of 200k (--fresh-at 60%)"),
        "{reason}"
    );
    assert!(
        reason.contains("progress file") && reason.contains("commit"),
        "{reason}"
    );
    assert_eq!(field(&s, "iteration").as_deref(), Some("3"));
    // Its stop: the loop pauses, uncounted, and the user is told what to type.
    let answer = stop(&s, OWNER, &[reply("m3", 131_000)]);
    assert_eq!(answer.get("decision"), None, "{answer}");
    let told = answer["systemMessage"].as_str().unwrap();
    assert!(
        told.contains("type /clear, then any message, and the loop goes on at iteration 3/20"),
        "{told}"
    );
    assert_eq!(field(&s, "active").as_deref(), Some("false"));
    assert_eq!(field(&s, "iteration").as_deref(), Some("3"));
    // The owner's /clear: SessionEnd marks the loop for this client's next conversation.
    let end = json!({"session_id": OWNER, "cwd": cwd(&s), "hook_event_name": "SessionEnd", "reason": "clear"});
    session_hook(&s, "session-end", &end, CLIENT);
    // Another client's /clear takes nothing.
    let other = json!({"session_id": "another-one", "cwd": cwd(&s), "hook_event_name": "SessionStart", "source": "clear"});
    assert_eq!(
        session_hook(&s, "session-start", &other, "999"),
        Value::Null
    );
    assert_eq!(field(&s, "session_id").as_deref(), Some(OWNER));
    // The same client's fresh conversation takes it, active, with the task for the model.
    let start = json!({"session_id": FRESH, "cwd": cwd(&s), "hook_event_name": "SessionStart", "source": "clear"});
    let answer = session_hook(&s, "session-start", &start, CLIENT);
    let context = answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(context.contains("Write the user guide"), "{answer}");
    assert_eq!(
        answer["hookSpecificOutput"]["hookEventName"],
        "SessionStart"
    );
    assert!(
        answer["systemMessage"]
            .as_str()
            .unwrap()
            .contains("send any message to start"),
        "{answer}"
    );
    assert_eq!(field(&s, "session_id").as_deref(), Some(FRESH));
    assert_eq!(field(&s, "active").as_deref(), Some("true"));
    assert_eq!(field(&s, "fresh_stage").as_deref(), Some("0"));
    // The fresh conversation's first stop goes on from the same iteration, its window carried.
    let answer = stop(&s, FRESH, &[reply("n1", 20_000)]);
    assert_eq!(answer["decision"], "block", "{answer}");
    assert_eq!(field(&s, "iteration").as_deref(), Some("4"));
    let last = log(&s).pop().unwrap();
    assert_eq!(
        (&last["session"], &last["context_percent"]),
        (&json!(FRESH), &json!(10))
    );
}
