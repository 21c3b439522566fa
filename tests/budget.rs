//! The token budget (issue 19) and the block cap (issue 16) through the real binary: loops
//! armed with `ralph start`, Stop events fed to `ralph hook stop`, and transcripts shaped
//! exactly like the ones Claude Code 2.1.328 writes (docs/claude-code-notes.md), the lag
//! included: one line per content block, each with the message's usage; the Stop-hook feedback
//! as a meta user line; and the reply that just ended sometimes not written yet.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::Write;
use std::path::PathBuf;

use ralph_state::fields::state::LoopState;
use ralph_state::time::Timestamp;
use serde_json::{Value, json};

use crate::support::LOOP;
use crate::support::project::Project;

struct Answer {
    json: Value,
    stdout: String,
}

impl Answer {
    fn blocked(&self) -> bool {
        self.json["decision"] == "block"
    }
    fn reason(&self) -> &str {
        self.json["reason"].as_str().unwrap_or("")
    }
    fn notice(&self) -> &str {
        self.json["systemMessage"].as_str().unwrap_or("")
    }
}

/// This module's steps on the shared [`Project`].
trait Steps {
    fn transcript(&self) -> PathBuf;
    fn ralph(&self, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> (i32, String, String);
    fn start(&self, flags: &[&str]);
    fn stop(&self, stop_hook_active: bool, cap: &str) -> Answer;
    fn stop_after(&self, stop_hook_active: bool, cap: &str, reply: &str) -> Answer;
    fn state(&self) -> LoopState;
    fn started_at(&self) -> Timestamp;
    fn append(&self, lines: &[String]);
    fn status_json(&self) -> Value;
    fn status_text(&self) -> String;
    fn log_text(&self) -> String;
}

impl Steps for Project {
    fn transcript(&self) -> PathBuf {
        self.root().join("session.jsonl")
    }

    /// `ralph ARGS` as this test's user: exit code, stdout, stderr.
    fn ralph(&self, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> (i32, String, String) {
        let out = self.ralph_with(args, stdin.as_bytes(), env);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn start(&self, flags: &[&str]) {
        let mut args = vec!["start", "--session-id", "s1"];
        args.extend_from_slice(flags);
        args.push("Work");
        let (code, out, err) = self.ralph(&args, "", &[]);
        assert_eq!(code, 0, "{out}{err}");
    }

    /// One Stop of session s1 pointing at the transcript, with the block cap `cap`.
    fn stop(&self, stop_hook_active: bool, cap: &str) -> Answer {
        self.stop_after(stop_hook_active, cap, "step")
    }

    /// A stop whose event carries `reply` as the turn's last message.
    fn stop_after(&self, stop_hook_active: bool, cap: &str, reply: &str) -> Answer {
        let event = json!({"session_id": "s1", "cwd": self.root(), "hook_event_name": "Stop",
            "transcript_path": self.transcript(), "stop_hook_active": stop_hook_active,
            "last_assistant_message": reply});
        let (code, stdout, err) = self.ralph(
            &["hook", "stop"],
            &event.to_string(),
            &[("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", cap)],
        );
        assert_eq!(code, 0, "{stdout}{err}");
        let json = if stdout.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&stdout).unwrap()
        };
        Answer { json, stdout }
    }

    fn state(&self) -> LoopState {
        LoopState::parse(&std::fs::read_to_string(self.root().join(LOOP)).unwrap()).unwrap()
    }

    fn started_at(&self) -> Timestamp {
        self.state().started_at.unwrap()
    }

    fn append(&self, lines: &[String]) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.transcript())
            .unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    }

    fn status_json(&self) -> Value {
        let (code, out, err) = self.ralph(&["status", "--json"], "", &[]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    }

    fn status_text(&self) -> String {
        self.ralph(&["status"], "", &[]).1
    }

    fn log_text(&self) -> String {
        self.ralph(&["log"], "", &[]).1
    }
}

/// A timestamp `secs` after `t`, as the client writes them (milliseconds, `Z`).
fn at(t: Timestamp, secs: i64) -> String {
    Timestamp(t.0 + secs).to_string().replace('Z', ".250Z")
}

/// One line of an assistant message, as the client writes it: one per content block,
/// each with the message's final usage (10 in + 5 out here, plus cache reads that do not count).
fn block(id: &str, content: Value, stop: &str, ts: &str, input: u64) -> String {
    json!({"parentUuid": "p", "isSidechain": false, "type": "assistant", "uuid": "u", "timestamp": ts,
        "sessionId": "s1", "version": "2.1.328", "requestId": "req_1",
        "message": {"id": id, "type": "message", "role": "assistant", "model": "m", "content": [content],
            "stop_reason": stop,
            "usage": {"input_tokens": input, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 40000}}})
    .to_string()
}

/// A reply that ends the turn (15 tokens).
fn reply(id: &str, ts: &str) -> String {
    block(
        id,
        json!({"type": "text", "text": "step"}),
        "end_turn",
        ts,
        10,
    )
}

/// A message that calls Bash (two lines, 15 tokens once), and its result.
fn tool_call(id: &str, ts: &str) -> Vec<String> {
    vec![
        block(id, json!({"type": "text", "text": "running"}), "tool_use", ts, 10),
        block(
            id,
            json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": "Bash", "input": {"command": "true"}}),
            "tool_use",
            ts,
            10,
        ),
        json!({"type": "user", "isSidechain": false, "timestamp": ts,
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_{id}"), "content": ""}]}})
        .to_string(),
    ]
}

fn user(text: &str, meta: bool, ts: &str) -> String {
    json!({"type": "user", "isMeta": meta, "isSidechain": false, "timestamp": ts,
        "message": {"role": "user", "content": text}})
    .to_string()
}

fn feedback(ts: &str) -> String {
    user("Stop hook feedback:\nWork", true, ts)
}

// ---- the token budget ----

#[test]
fn the_arming_turn_counts_and_the_sessions_past_does_not() {
    let p = Project::new();
    p.start(&["--max-tokens", "1000", "--stuck-after", "0"]);
    let t = p.started_at();
    // An hour of session before the loop: 180 000 tokens that are not the loop's.
    p.append(&[
        user("hello", false, &at(t, -3600)),
        block(
            "msg_old",
            json!({"type": "text", "text": "hi"}),
            "end_turn",
            &at(t, -3600),
            180_000,
        ),
        json!({"type": "attachment", "timestamp": at(t, -1)}).to_string(),
    ]);
    // The arming turn: the command's prompt, then the reply.
    p.append(&[
        user("/ralph:ralph-loop Work", false, &at(t, 0)),
        reply("msg_1", &at(t, 1)),
    ]);
    let a = p.stop(false, "0");
    assert!(a.blocked(), "{}", a.stdout);
    assert_eq!(p.state().progress.tokens_used, 15);
    assert!(
        a.reason().contains("Tokens: 15 of 1000."),
        "the footer says the count: {}",
        a.reason()
    );
}

#[test]
fn a_reply_not_yet_in_the_transcript_is_estimated_shown_and_ends_the_loop_in_time() {
    let p = Project::new();
    p.start(&["--max-tokens", "50", "--stuck-after", "0"]);
    let t = p.started_at();
    // Stop 1: the arming turn is written. 15 known, nothing missing.
    p.append(&[
        user("/ralph:ralph-loop Work", false, &at(t, 0)),
        reply("msg_1", &at(t, 1)),
    ]);
    let a = p.stop(false, "0");
    assert!(a.reason().contains("Tokens: 15 of 50."), "{}", a.reason());
    // Stop 2: the feedback is written, the reply that ended turn 2 is not yet.
    p.append(&[feedback(&at(t, 2))]);
    let a = p.stop(true, "0");
    assert!(a.blocked(), "{}", a.stdout);
    let words = "15 known + ~15 not yet in the transcript";
    assert!(
        a.reason()
            .contains("Tokens: 15 of 50 known, and ~15 more for replies not in the transcript yet"),
        "footer: {}",
        a.reason()
    );
    let s = p.state().progress;
    assert_eq!((s.tokens_used, s.unseen_tokens), (15, 15));
    let status = p.status_text();
    assert!(
        status.contains(&format!("tokens {words}")),
        "status: {status}"
    );
    let l = &p.status_json()["loops"][0];
    assert_eq!(
        (l["tokens_used"].as_u64(), l["unseen_tokens"].as_u64()),
        (Some(15), Some(15)),
        "{l}"
    );
    assert!(
        p.log_text().contains(&format!("tokens {words}")),
        "log: {}",
        p.log_text()
    );
    // Stop 3: reply 2 arrived late, turn 3 is complete: 45 known, past 80 % of 50.
    p.append(&[
        reply("msg_2", &at(t, 3)),
        feedback(&at(t, 4)),
        reply("msg_3", &at(t, 5)),
    ]);
    let a = p.stop(true, "0");
    assert!(
        a.blocked() && a.reason().contains("Token budget: 45 of 50 used. Wrap up"),
        "{}",
        a.reason()
    );
    // Stop 4: reply 4 is missing again. 45 known + ~15 reaches 50 (the real usage is 60):
    // the loop ends now, not a turn later when the transcript shows it.
    p.append(&[feedback(&at(t, 6))]);
    let a = p.stop(true, "0");
    assert!(!a.blocked(), "{}", a.stdout);
    assert!(
        a.notice()
            .contains("used 45 known + ~15 not yet in the transcript of its 50 token budget"),
        "{}",
        a.notice()
    );
    let l = &p.status_json()["loops"][0];
    assert_eq!(
        (
            l["outcome"].as_str(),
            l["tokens_used"].as_u64(),
            l["unseen_tokens"].as_u64()
        ),
        (Some("token_budget"), Some(45), Some(15)),
        "{l}"
    );
    assert!(
        p.log_text().contains("end — used 45 known"),
        "{}",
        p.log_text()
    );
}

/// Turns faster than the client writes its transcript: three stops pass with no new reply
/// in it, then three replies land at once. Each missing reply is estimated, so the figure
/// follows the real usage (15 per reply) at every stop, and nothing is estimated once the
/// transcript has caught up.
#[test]
fn every_reply_a_lagging_transcript_lacks_is_estimated() {
    let p = Project::new();
    p.start(&["--max-tokens", "1000", "--stuck-after", "0"]);
    let t = p.started_at();
    // Reply n says `step n`, and so does the Stop event that follows it.
    let reply_n = |n: i64| {
        block(
            &format!("msg_{n}"),
            json!({"type": "text", "text": format!("step {n}")}),
            "end_turn",
            &at(t, 2 * n - 1),
            10,
        )
    };
    let feedback_before = |n: i64| feedback(&at(t, 2 * n - 2));
    p.append(&[user("/ralph:ralph-loop Work", false, &at(t, 0)), reply_n(1)]);
    let a = p.stop_after(false, "0", "step 1");
    assert!(a.reason().contains("Tokens: 15 of 1000."), "{}", a.reason());
    for (n, missing) in [(2, 15), (3, 30), (4, 45)] {
        let a = p.stop_after(true, "0", &format!("step {n}"));
        let words = format!(
            "Tokens: 15 of 1000 known, and ~{missing} more for replies not in the transcript yet (counted once it shows them)."
        );
        assert!(a.reason().contains(&words), "{words}: {}", a.reason());
    }
    p.append(&[
        feedback_before(2),
        reply_n(2),
        feedback_before(3),
        reply_n(3),
        feedback_before(4),
        reply_n(4),
    ]);
    let a = p.stop_after(true, "0", "step 5");
    assert!(
        a.reason()
            .contains("Tokens: 60 of 1000 known, and ~15 more for replies not in the transcript yet (counted once it shows them)."),
        "the fifth reply is still missing: {}",
        a.reason()
    );
    p.append(&[
        feedback_before(5),
        reply_n(5),
        feedback_before(6),
        reply_n(6),
    ]);
    let a = p.stop_after(true, "0", "step 6");
    assert!(a.reason().contains("Tokens: 90 of 1000."), "{}", a.reason());
    assert_eq!(p.state().progress.unseen_tokens, 0);
}

#[test]
fn a_tool_call_spread_over_two_lines_is_counted_once() {
    let p = Project::new();
    p.start(&["--max-tokens", "1000", "--stuck-after", "0"]);
    let t = p.started_at();
    let mut lines = vec![user("/ralph:ralph-loop Work", false, &at(t, 0))];
    lines.extend(tool_call("msg_1", &at(t, 1)));
    lines.push(reply("msg_2", &at(t, 2)));
    p.append(&lines);
    let a = p.stop(false, "0");
    assert!(a.blocked());
    assert_eq!(p.state().progress.tokens_used, 30);
}

// ---- ralph run: the agent's JSON result is exact, nothing is estimated ----

#[test]
fn ralph_run_counts_the_agents_usage_exactly() {
    let p = Project::new();
    let agent = "n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n; cat > /dev/null; \
        echo '{\"type\":\"result\",\"result\":\"step\",\"usage\":{\"input_tokens\":400,\"cache_creation_input_tokens\":0,\"output_tokens\":50,\"cache_read_input_tokens\":9999}}'";
    std::fs::write(p.root().join("agent.sh"), agent).unwrap();
    let (code, out, err) = p.ralph(
        &[
            "run",
            "--agent",
            "sh agent.sh",
            "--max-tokens",
            "1000",
            "--max-iterations",
            "9",
            "--stuck-after",
            "0",
            "Task",
        ],
        "",
        &[],
    );
    assert_eq!(code, 3, "{out}{err}");
    // 450, 900 (an estimate of the next call would end it here), then 1350.
    let calls = std::fs::read_to_string(p.root().join("n")).unwrap();
    assert_eq!(calls.trim(), "3", "{out}{err}");
    let l = &p.status_json()["loops"][0];
    assert_eq!(
        (
            l["outcome"].as_str(),
            l["tokens_used"].as_u64(),
            l["unseen_tokens"].as_u64()
        ),
        (Some("token_budget"), Some(1350), Some(0)),
        "{l}"
    );
    assert!(!p.status_text().contains("known"), "{}", p.status_text());
}

// ---- the block cap ----

/// Drives text-only continuations until the loop stops blocking; returns how many blocks.
fn blocks_until_the_loop_ends(p: &Project, cap: &str, stops: usize) -> (usize, Answer) {
    let t = p.started_at();
    for i in 0..stops {
        let ts = at(t, i as i64);
        p.append(&[feedback(&ts), reply(&format!("msg_{i}"), &ts)]);
        let a = p.stop(i > 0, cap);
        if !a.blocked() {
            return (i, a); // stops 0..i blocked
        }
    }
    panic!("cap {cap}: still blocking after {stops} stops");
}

#[test]
fn the_loop_ends_itself_where_claude_code_would_override_the_block() {
    for (cap, expected) in [("1", 1), ("2", 2), ("8", 8), ("20", 20)] {
        let p = Project::new();
        p.start(&[
            "--max-iterations",
            "100",
            "--stuck-after",
            "0",
            "--no-progress-after",
            "0",
        ]);
        let (blocks, a) = blocks_until_the_loop_ends(&p, cap, 30);
        // Claude Code lets `cap` blocks through and overrides the next one.
        assert_eq!(blocks, expected, "cap {cap}");
        assert!(
            a.notice().contains("block cap") && a.notice().contains(&format!("={cap})")),
            "cap {cap}: {}",
            a.notice()
        );
        assert_eq!(
            p.status_json()["loops"][0]["outcome"].as_str(),
            Some("block_cap")
        );
    }
}

#[test]
fn the_default_cap_is_eight_and_zero_switches_the_guard_off() {
    let p = Project::new();
    p.start(&["--max-iterations", "100", "--stuck-after", "0"]);
    let t = p.started_at();
    for i in 0..12 {
        let ts = at(t, i);
        p.append(&[feedback(&ts), reply(&format!("msg_{i}"), &ts)]);
        assert!(p.stop(i > 0, "0").blocked(), "stop {i}");
    }
    let p = Project::new();
    p.start(&["--max-iterations", "100", "--stuck-after", "0"]);
    // No CLAUDE_CODE_STOP_HOOK_BLOCK_CAP: the client's default, 8.
    let t = p.started_at();
    let mut blocks = 0;
    for i in 0..12 {
        let ts = at(t, i);
        p.append(&[feedback(&ts), reply(&format!("msg_{i}"), &ts)]);
        let event = json!({"session_id": "s1", "cwd": p.root(), "transcript_path": p.transcript(),
            "stop_hook_active": i > 0, "last_assistant_message": "step"});
        let (_, out, _) = p.ralph(&["hook", "stop"], &event.to_string(), &[]);
        if !out.contains("\"decision\":\"block\"") {
            assert!(out.contains("block cap"), "{out}");
            break;
        }
        blocks += 1;
    }
    assert_eq!(blocks, 8);
}

#[test]
fn continuations_that_run_tools_and_new_turns_start_the_count_over() {
    let p = Project::new();
    p.start(&["--max-iterations", "100", "--stuck-after", "0"]);
    let t = p.started_at();
    let mut n = 0;
    let mut next = |p: &Project, tool: bool| {
        n += 1;
        let ts = at(t, n);
        let mut lines = vec![feedback(&ts)];
        if tool {
            lines.extend(tool_call(&format!("msg_t{n}"), &ts));
        }
        lines.push(reply(&format!("msg_{n}"), &ts));
        p.append(&lines);
    };
    // Cap 2: two idle blocks, then a continuation with a tool, then two idle blocks again…
    for round in 0..4 {
        next(&p, true);
        assert!(p.stop(round > 0, "2").blocked(), "round {round}: tool");
        next(&p, false);
        assert!(p.stop(true, "2").blocked(), "round {round}: idle 2");
    }
    // Two idle blocks since the last tool: one more would be overridden.
    next(&p, false);
    assert!(p.stop(true, "2").notice().contains("block cap"));
    // A new turn (a user prompt: stop_hook_active false) also starts over.
    let p2 = Project::new();
    p2.start(&["--max-iterations", "100", "--stuck-after", "0"]);
    let t2 = p2.started_at();
    for i in 0..6 {
        let ts = at(t2, i);
        p2.append(&[feedback(&ts), reply(&format!("msg_{i}"), &ts)]);
        // Every stop the first of its turn: the client's count never passes 1.
        assert!(p2.stop(false, "1").blocked(), "stop {i}");
    }
}

#[test]
fn at_the_cap_the_hook_waits_for_a_lagging_transcript_before_ending() {
    let p = Project::new();
    p.start(&["--max-iterations", "100", "--stuck-after", "0"]);
    let t = p.started_at();
    p.append(&[
        user("/ralph:ralph-loop Work", false, &at(t, 0)),
        reply("msg_0", &at(t, 0)),
    ]);
    assert!(p.stop(false, "1").blocked());
    // The continuation ran a tool, but at the stop only the feedback line is written; the
    // client writes the rest a moment later, while the hook runs.
    p.append(&[feedback(&at(t, 1))]);
    let transcript = p.transcript();
    let late = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut lines = tool_call("msg_1", &at(t, 1));
        lines.push(reply("msg_2", &at(t, 1)));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(transcript)
            .unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    });
    let a = p.stop(true, "1");
    late.join().unwrap();
    assert!(
        a.blocked(),
        "the tool call arrived late: not ended: {}",
        a.stdout
    );
    // Nothing more is written this time: after the wait, the loop ends at the cap.
    p.append(&[feedback(&at(t, 2))]);
    let a = p.stop(true, "1");
    assert!(a.notice().contains("block cap"), "{}", a.stdout);
}
