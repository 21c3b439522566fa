//! The session hooks (`ralph hook prompt | session-start | session-end`) through the real
//! binary: what the user is told, what is written, and what is never touched.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::project;

use std::process::Output;

use project::{LOOP, Project, run_ralph};
use serde_json::{Value, json};

const OWNER: &str = "5b360de9-0000-4000-8000-00000000aaaa";
const OTHER: &str = "5b360de9-0000-4000-8000-00000000bbbb";

/// This module's steps on the shared [`Project`].
trait Steps {
    fn ralph(&self, args: &[&str], stdin: &[u8], client_pid: &str) -> Output;
    fn arm(&self, session: &str, extra: &[&str]);
    fn hook(&self, which: &str, event: &Value) -> Option<String>;
    fn hook_with_pid(&self, which: &str, event: &Value, client_pid: &str) -> Option<String>;
    fn cwd(&self) -> String;
    fn prompt(&self, session: &str, prompt: &str) -> Option<String>;
    fn end(&self, session: &str, reason: &str, client_pid: &str) -> Option<String>;
    fn start(&self, session: &str, source: &str, client_pid: &str) -> Option<String>;
    fn state(&self) -> String;
    fn stop(&self, session: &str, reply: &str);
    fn log(&self) -> Vec<Value>;
}

impl Steps for Project {
    /// `ralph ARGS` in the project as the client whose pid is `client_pid`.
    fn ralph(&self, args: &[&str], stdin: &[u8], client_pid: &str) -> Output {
        self.ralph_with(args, stdin, &[("CLAUDE_PID", client_pid)])
    }

    fn arm(&self, session: &str, extra: &[&str]) {
        let mut args = vec![
            "start",
            "--session-id",
            session,
            "--max-iterations",
            "20",
            "--completion-promise",
            "DONE",
        ];
        args.extend_from_slice(extra);
        args.push("Write the user guide");
        let out = self.ralph(&args, b"", "");
        assert!(out.status.success(), "ralph start failed: {out:?}");
    }

    /// Runs one session hook; checks the contract (exit 0, nothing or one JSON object with
    /// only a systemMessage) and returns the message, if any.
    fn hook(&self, which: &str, event: &Value) -> Option<String> {
        self.hook_with_pid(which, event, "")
    }

    fn hook_with_pid(&self, which: &str, event: &Value, client_pid: &str) -> Option<String> {
        let out = self.ralph(&["hook", which], event.to_string().as_bytes(), client_pid);
        answer(&out)
    }

    fn cwd(&self) -> String {
        self.root().to_str().unwrap().to_owned()
    }

    fn prompt(&self, session: &str, prompt: &str) -> Option<String> {
        self.hook(
            "prompt",
            &json!({"session_id": session, "cwd": self.cwd(), "hook_event_name": "UserPromptSubmit", "prompt": prompt}),
        )
    }

    fn end(&self, session: &str, reason: &str, client_pid: &str) -> Option<String> {
        self.hook_with_pid(
            "session-end",
            &json!({"session_id": session, "cwd": self.cwd(), "hook_event_name": "SessionEnd", "reason": reason}),
            client_pid,
        )
    }

    fn start(&self, session: &str, source: &str, client_pid: &str) -> Option<String> {
        self.hook_with_pid(
            "session-start",
            &json!({"session_id": session, "cwd": self.cwd(), "hook_event_name": "SessionStart", "source": source}),
            client_pid,
        )
    }

    fn state(&self) -> String {
        self.read(LOOP)
    }

    /// Runs the Stop hook once for `session` (the loop advances one iteration).
    fn stop(&self, session: &str, reply: &str) {
        let event = json!({"session_id": session, "cwd": self.cwd(), "hook_event_name": "Stop", "stop_hook_active": true, "last_assistant_message": reply});
        let out = self.ralph(&["hook", "stop"], event.to_string().as_bytes(), "");
        assert!(out.status.success(), "{out:?}");
    }

    fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path(".claude/ralph/logs/ralph.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn answer(out: &Output) -> Option<String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a session hook must exit 0: {out:?}"
    );
    if stdout.is_empty() {
        return None;
    }
    let value: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {stdout:?}"));
    let object = value.as_object().expect("an object");
    assert_eq!(
        object.keys().collect::<Vec<_>>(),
        ["systemMessage"],
        "a session hook only ever tells the user: {stdout}"
    );
    assert!(
        !stdout.trim_end().contains('\n'),
        "exactly one line: {stdout:?}"
    );
    Some(value["systemMessage"].as_str().unwrap().to_owned())
}

fn field<'a>(state: &'a str, key: &str) -> Option<&'a str> {
    state
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

#[test]
fn a_project_without_loops_gets_nothing_and_no_files() {
    let s = Project::new();
    assert_eq!(s.prompt(OWNER, "hello"), None);
    assert_eq!(s.start(OWNER, "startup", "4242"), None);
    assert_eq!(s.start(OWNER, "clear", "4242"), None);
    assert_eq!(s.end(OWNER, "prompt_input_exit", "4242"), None);
    assert!(
        !s.exists(".claude/ralph"),
        "the common path must not create .claude/ralph/"
    );
    // Not even a project: a folder without .claude/.
    let bare = tempfile::tempdir().unwrap();
    let event = json!({"session_id": OWNER, "cwd": bare.path(), "prompt": "hi"});
    let out = run_ralph(
        &["hook", "prompt"],
        bare.path(),
        event.to_string().as_bytes(),
        &[("HOME", bare.path().to_str().unwrap())],
    );
    assert_eq!(answer(&out), None);
}

#[test]
fn a_prompt_into_an_armed_loop_is_announced_once_per_interruption() {
    let s = Project::new();
    s.arm(OWNER, &["--name", "ralph"]);
    let line = s.prompt(OWNER, "stop, and tell me what you did").unwrap();
    assert_eq!(
        line,
        "🔄 ralph `ralph` is armed, iteration 1/20: this message goes into the loop — /ralph-pause or /ralph-cancel to stop"
    );
    // The same interruption: no second line.
    assert_eq!(s.prompt(OWNER, "hello?"), None);
    // The loop went on (a stop advanced it) and was interrupted again: a new line.
    s.stop(OWNER, "working on chapter 1");
    let again = s.prompt(OWNER, "wait").unwrap();
    assert!(again.contains("iteration 2/20"), "{again}");
    assert_eq!(
        s.log().iter().filter(|l| l["decision"] == "prompt").count(),
        2
    );
}

/// ralph's own commands are answered by the prompt hook itself (issue 26 item 1): one JSON
/// object, either a block whose `reason` the user reads (nothing reaches the model) or, for
/// `/ralph-loop` and a `/ralph-resume` that resumed, a notice plus the task as context.
enum Command {
    Answered(String),
    Proceed { notice: String, context: String },
}

/// This module's steps on the shared [`Project`].
trait PromptSteps {
    fn prompt_command(&self, session: &str, prompt: &str) -> Command;
    fn answered(&self, session: &str, prompt: &str) -> String;
}

impl PromptSteps for Project {
    fn prompt_command(&self, session: &str, prompt: &str) -> Command {
        let event = json!({"session_id": session, "cwd": self.cwd(), "hook_event_name": "UserPromptSubmit", "prompt": prompt});
        let out = self.ralph(&["hook", "prompt"], event.to_string().as_bytes(), "");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{prompt}: not one JSON object ({e}): {out:?}"));
        if v["decision"] == "block" {
            assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
            Command::Answered(v["reason"].as_str().unwrap().to_owned())
        } else {
            assert_eq!(
                v["hookSpecificOutput"]["hookEventName"], "UserPromptSubmit",
                "{v}"
            );
            Command::Proceed {
                notice: v["systemMessage"].as_str().unwrap().to_owned(),
                context: v["hookSpecificOutput"]["additionalContext"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            }
        }
    }

    fn answered(&self, session: &str, prompt: &str) -> String {
        match self.prompt_command(session, prompt) {
            Command::Answered(reason) => reason,
            Command::Proceed { notice, .. } => panic!("{prompt}: went on to the model: {notice}"),
        }
    }
}

#[test]
fn ralph_commands_are_answered_by_the_hook_and_ralph_loop_arms_there() {
    let s = Project::new();
    s.arm(OWNER, &[]);
    let status = s.answered(OWNER, "/ralph-status");
    assert!(
        status.starts_with("active `ralph` iteration 1/20\n  task: Write the user guide"),
        "{status}"
    );
    assert_eq!(s.answered(OWNER, "/ralph-pause"), "Paused loop `ralph`.");
    assert_eq!(
        s.answered(OWNER, "/ralph-pause"),
        "Nothing to pause: no matching loop is active."
    );
    match s.prompt_command(OWNER, "/ralph:ralph-resume") {
        Command::Proceed { notice, context } => {
            assert_eq!(notice, "▶ Resumed loop `ralph`.");
            assert!(
                context.contains("Your task (Ralph loop `ralph`):\n\nWrite the user guide"),
                "{context}"
            );
        }
        Command::Answered(r) => panic!("resumed, so the turn works on the task: {r}"),
    }
    assert_eq!(field(&s.state(), "prompt_noticed_at"), None);
    assert_eq!(
        field(&s.state(), "iteration"),
        Some("1"),
        "no command counts an iteration"
    );

    // /ralph-loop arms in the hook, before the model's first turn, from the text as typed.
    let other = Project::new();
    let typed = "/ralph-loop Write docs --name docs --max-iterations 12 --completion-promise 'ALL DONE' --verify 'cargo test'";
    let Command::Proceed { notice, context } = other.prompt_command(OWNER, typed) else {
        panic!("armed, so the prompt goes on");
    };
    assert_eq!(
        notice,
        "🔄 ralph `docs`: armed for this session, at most 12 iterations; it ends when the agent outputs <promise>ALL DONE</promise> and `cargo test` passes, or at the limit. Every turn end feeds the task back — /ralph-pause or /ralph-cancel to stop."
    );
    assert!(context.contains("Your task:\n\nWrite docs\n"), "{context}");
    let docs = other.read(".claude/docs-loop.local.md");
    assert_eq!(field(&docs, "session_id"), Some(OWNER));
    // The same command again (Esc un-sent it on screen): the same loop, kept, not refused.
    let Command::Proceed { notice, .. } = other.prompt_command(OWNER, typed) else {
        panic!("the same /ralph-loop again is not refused");
    };
    assert!(
        notice.contains("already armed for this session, iteration 1/12"),
        "{notice}"
    );
    assert_eq!(
        other.read(".claude/docs-loop.local.md"),
        docs,
        "kept byte for byte"
    );
    // Another task while this session drives a loop: refused, saying it is this session's,
    // with advice that works (another --name would be refused as well).
    let refused = other.answered(OWNER, "/ralph:ralph-loop Another task --name other");
    assert!(
        refused.contains("this session already drives the loop `docs`")
            && refused.contains("--force")
            && !refused.contains("--name <other>"),
        "{refused}"
    );
    let refused = other.answered(
        OWNER,
        "/ralph-loop Write docs --name docs --max-iterations 13",
    );
    assert!(
        refused.contains("this session already drives the loop `docs`"),
        "{refused}"
    );
    // Arguments that cannot arm: the error, as `ralph start` prints it; nothing armed.
    let bad = other.answered(OTHER, "/ralph-loop Write docs --max-iterations ten");
    assert_eq!(
        bad,
        "ralph: `--max-iterations ten`: expected a whole number such as 10; nothing was armed"
    );
    assert!(
        other
            .answered(OTHER, "/ralph:ralph-loop")
            .contains("the prompt is empty")
    );
    // Another session, the name taken: the other session's loop, and what works.
    let taken = other.answered(OTHER, "/ralph-loop Another task --name docs");
    assert!(
        taken.contains("owned by session") && taken.contains("--name <other>"),
        "{taken}"
    );
    let bad_name = other.answered(
        OTHER,
        "/ralph-loop x --max-iterations 0 --completion-promise DONE --name \u{1b}[2J",
    );
    assert!(
        bad_name.contains("\\x1b[2J") && !bad_name.contains('\u{1b}'),
        "control characters must be escaped: {bad_name:?}"
    );
    let Command::Proceed {
        notice: unlimited, ..
    } = other.prompt_command(
        OTHER,
        "/ralph-loop x --max-iterations 0 --completion-promise DONE --name free",
    )
    else {
        panic!("armed");
    };
    assert!(unlimited.contains("no iteration limit"), "{unlimited}");
}

#[test]
fn another_sessions_loop_is_never_touched_nor_mentioned() {
    let s = Project::new();
    s.arm(OTHER, &[]);
    let before = s.state();
    assert_eq!(s.prompt(OWNER, "hello"), None);
    assert_eq!(s.start(OWNER, "resume", "4242"), None);
    assert_eq!(s.end(OWNER, "prompt_input_exit", "4242"), None);
    assert_eq!(s.end(OWNER, "clear", "4242"), None);
    assert_eq!(s.start(OWNER, "clear", "4242"), None);
    assert_eq!(s.state(), before, "another session's loop changed");
    // A paused loop of this session is not announced on a prompt either.
    let p = Project::new();
    p.arm(OWNER, &[]);
    let out = p.ralph(&["pause"], b"", "");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(p.prompt(OWNER, "hello"), None);
}

#[test]
fn session_end_pauses_with_the_reason_and_resume_reports_it() {
    let s = Project::new();
    s.arm(OWNER, &[]);
    s.stop(OWNER, "chapter 1 written");
    let told = s.end(OWNER, "prompt_input_exit", "4242").unwrap();
    assert!(
        told.contains("paused at iteration 2/20") && told.contains("you quit Claude Code"),
        "{told}"
    );
    assert_eq!(field(&s.state(), "active"), Some("false"));
    let last = s.log().pop().unwrap();
    assert_eq!(
        (last["decision"].as_str(), last["reason"].as_str()),
        (Some("pause"), Some("prompt_input_exit")),
        "{last}"
    );
    // A paused loop lets the session stop, uncounted.
    s.stop(OWNER, "more");
    assert_eq!(field(&s.state(), "iteration"), Some("2"));
    // Ending again changes nothing.
    let before = s.state();
    assert_eq!(s.end(OWNER, "logout", "4242"), None);
    assert_eq!(s.state(), before);
    // The owner comes back: told that the loop is paused, why, and how to go on.
    let back = s.start(OWNER, "resume", "5151").unwrap();
    assert_eq!(
        back,
        "⏸ ralph `ralph` is paused at iteration 2/20 (the session ended: you quit Claude Code). /ralph-resume carries on, /ralph-cancel ends it."
    );
    // Paused by the user instead: the reason says so.
    let out = s.ralph(&["resume"], b"", "");
    assert!(out.status.success(), "{out:?}");
    let armed = s.start(OWNER, "startup", "5151").unwrap();
    assert!(armed.contains("is armed, iteration 2/20"), "{armed}");
    let out = s.ralph(&["pause"], b"", "");
    assert!(out.status.success(), "{out:?}");
    let back = s.start(OWNER, "resume", "5151").unwrap();
    assert!(back.contains("(paused by the user)"), "{back}");
}

#[test]
fn compaction_keeps_the_loop_and_says_so() {
    let s = Project::new();
    s.arm(OWNER, &[]);
    let before = s.state();
    let told = s.start(OWNER, "compact", "4242").unwrap();
    assert!(
        told.contains("kept after compaction, iteration 1/20"),
        "{told}"
    );
    assert_eq!(s.state(), before, "compaction must not change the loop");
}

#[test]
fn clear_hands_the_loop_to_the_new_conversation_of_the_same_client() {
    const NEW: &str = "5b360de9-0000-4000-8000-00000000cccc";
    let s = Project::new();
    s.arm(OWNER, &[]);
    let told = s.end(OWNER, "clear", "4242").unwrap();
    assert!(
        told.contains("moves to the conversation /clear opens"),
        "{told}"
    );
    let why = s.log().pop().unwrap();
    assert!(
        why["why"]
            .as_str()
            .unwrap()
            .contains("/clear started a new conversation"),
        "{why}"
    );
    assert_eq!(field(&s.state(), "active"), Some("false"));
    // Another client process starting a cleared session takes nothing.
    assert_eq!(s.start(NEW, "clear", "999"), None);
    assert_eq!(field(&s.state(), "session_id"), Some(OWNER));
    // Without the client's pid there is no proof: nothing moves.
    assert_eq!(s.start(NEW, "clear", ""), None);
    // The same client's new conversation takes it over, active as it was.
    let kept = s.start(NEW, "clear", "4242").unwrap();
    assert!(
        kept.contains("kept after /clear and now runs in this conversation, iteration 1/20"),
        "{kept}"
    );
    let state = s.state();
    assert_eq!(
        field(&state, "session_id"),
        Some(format!("\"{NEW}\"").as_str())
    );
    assert_eq!(field(&state, "active"), Some("true"));
    assert_eq!(field(&state, "clear_handover"), Some("\"\""));
    // The handover is spent: a second start takes nothing, the old owner has nothing.
    assert_eq!(s.start("someone-else", "clear", "4242"), None);
    assert_eq!(s.prompt(OWNER, "hi"), None);
    // The new owner drives it; the Stop hook agrees.
    s.stop(NEW, "chapter 1");
    assert_eq!(field(&s.state(), "iteration"), Some("2"));
    let log = s.log();
    assert!(
        log.iter()
            .any(|l| l["decision"] == "handover" && l["from"] == OWNER)
    );
}

#[test]
fn a_paused_loop_stays_paused_across_clear() {
    let s = Project::new();
    s.arm(OWNER, &[]);
    assert!(s.ralph(&["pause"], b"", "").status.success());
    s.end(OWNER, "clear", "4242");
    let kept = s.start("new-one", "clear", "4242").unwrap();
    assert!(kept.contains("still paused"), "{kept}");
    assert_eq!(field(&s.state(), "active"), Some("false"));
}

#[test]
fn bad_events_get_a_notice_never_a_block() {
    let s = Project::new();
    s.arm(OWNER, &[]);
    for which in ["prompt", "session-start", "session-end"] {
        for input in [&b""[..], b"{", b"[1,2]", b"\xff\xfe"] {
            let out = s.ralph(&["hook", which], input, "");
            let told = answer(&out).unwrap_or_else(|| panic!("{which} {input:?}: silent"));
            assert!(told.starts_with("⚠ ralph:"), "{which}: {told}");
        }
        // An event without a session acts on nothing.
        let event = json!({"cwd": s.cwd(), "prompt": "hi", "reason": "other", "source": "resume"});
        let out = s.ralph(&["hook", which], event.to_string().as_bytes(), "");
        assert_eq!(answer(&out), None, "{which}");
    }
    // A corrupt loop file of this session: the hooks say nothing and leave it for the Stop hook.
    s.write(
        LOOP,
        &format!("---\nsession_id: {OWNER}\niteration: [\n---\nx\n"),
    );
    assert_eq!(s.prompt(OWNER, "hello"), None);
    assert_eq!(s.end(OWNER, "other", ""), None);
    assert!(s.state().contains("iteration: ["));
}

/// Without a ralph binary, the plugin's launcher answers the prompt and session-end hooks
/// with nothing at all and exit 0: a prompt is never held up or flagged (session-start says
/// how to install, see tests/e2e.rs `launcher::without_a_binary_the_session_start_says_so`).
#[cfg(unix)]
#[test]
fn without_a_binary_the_launcher_keeps_the_session_hooks_silent() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let launcher = dir.path().join("plugin/bin/ralph");
    std::fs::create_dir_all(launcher.parent().unwrap()).unwrap();
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugin/bin/ralph");
    std::fs::copy(&source, &launcher).unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for which in ["prompt", "session-end"] {
        let mut child = std::process::Command::new("sh")
            .arg(&launcher)
            .args(["hook", which])
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", empty.display()))
            .env("HOME", dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"{\"session_id\":\"s\",\"prompt\":\"hi\"}\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{which}: {out:?}");
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "{which}: {out:?}"
        );
    }
}

/// A message the user queued while the agent worked, as the client's transcript records it,
/// and its sending.
const ENQUEUE: &str = r#"{"type":"queue-operation","operation":"enqueue","timestamp":"2026-12-01T21:15:07.241Z","sessionId":"s","content":"/ralph-cancel"}"#;
const DEQUEUE: &str = r#"{"type":"queue-operation","operation":"dequeue","timestamp":"2026-12-01T21:15:29.465Z","sessionId":"s"}"#;

/// One Stop of the owner whose transcript holds `lines` (a reply "working"), and the answer.
fn stop_with_transcript(s: &Project, transcript: &std::path::Path, lines: &[&str]) -> Value {
    std::fs::write(transcript, lines.join("\n") + "\n").unwrap();
    let event = json!({"session_id": OWNER, "cwd": s.cwd(), "hook_event_name": "Stop",
        "stop_hook_active": true, "last_assistant_message": "working",
        "transcript_path": transcript});
    let out = s.ralph(&["hook", "stop"], event.to_string().as_bytes(), "");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// Issue 26 item 2: a message the user typed while the agent worked waits in the client's
/// queue (the transcript shows its `enqueue` line at once). The Stop hook lets that turn
/// end, uncounted, so the message runs; once it was sent (`dequeue`), the loop goes on.
#[test]
fn a_queued_message_ends_the_turn_uncounted() {
    let s = Project::new();
    s.arm(OWNER, &[]);
    let transcript = s.home().join("transcript.jsonl");
    let (enqueue, dequeue) = (ENQUEUE, DEQUEUE);
    let stop = |lines: &[&str]| stop_with_transcript(&s, &transcript, lines);
    let answer = stop(&[enqueue]);
    assert_eq!(answer.get("decision"), None, "the turn may end: {answer}");
    assert!(
        answer["systemMessage"].as_str().is_some_and(|m| m
            .contains("your queued message goes first")
            && m.contains("iteration 1/20")
            && m.contains("after /ralph-pause, for /ralph-resume")
            && !m.contains("send any message to carry on")),
        "{answer}"
    );
    assert_eq!(field(&s.state(), "iteration"), Some("1"), "not counted");
    let answer = stop(&[enqueue, dequeue]);
    assert_eq!(
        answer["decision"], "block",
        "sent: the loop goes on: {answer}"
    );
    assert_eq!(field(&s.state(), "iteration"), Some("2"));
}

/// A stop reads only what was appended since the previous one, whatever guards are on: with
/// no guard that counts (breaker off, no budget, no block cap), the queue check still moves
/// the transcript offset on, so a long session's tail is not read again at every stop.
#[test]
fn every_stop_reads_only_what_was_appended_with_the_guards_off() {
    let s = Project::new();
    s.arm(OWNER, &["--no-progress-after", "0"]);
    let transcript = s.home().join("transcript.jsonl");
    let (enqueue, dequeue) = (ENQUEUE, DEQUEUE);
    let reply = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"working"}]}}"#;
    let stop = |lines: &[&str]| stop_with_transcript(&s, &transcript, lines);
    let offset = || field(&s.state(), "transcript_offset").map(str::to_owned);
    let len = |lines: &[&str]| Some((lines.join("\n").len() + 1).to_string());
    let answer = stop(&[enqueue]);
    assert_eq!(
        answer.get("decision"),
        None,
        "queued: the turn may end: {answer}"
    );
    assert_eq!(offset(), len(&[enqueue]), "the offset moved on");
    let answer = stop(&[enqueue, dequeue, reply]);
    assert_eq!(answer["decision"], "block", "{answer}");
    assert_eq!(offset(), len(&[enqueue, dequeue, reply]));
    let answer = stop(&[enqueue, dequeue, reply, reply]);
    assert_eq!(answer["decision"], "block", "{answer}");
    assert_eq!(offset(), len(&[enqueue, dequeue, reply, reply]));
}

/// Issue 26 item 8: the loop file deleted by hand mid-loop is not silent: the next prompt
/// (or stop) of its session says so, once, and `ralph log` still shows what it decided.
#[test]
fn a_loop_file_deleted_mid_loop_is_told_and_its_log_kept() {
    let s = Project::new();
    s.arm(OWNER, &[]);
    s.stop(OWNER, "chapter one");
    std::fs::remove_file(s.path(LOOP)).unwrap();
    assert_eq!(
        s.prompt(OTHER, "hello"),
        None,
        "another session's loop is not mentioned"
    );
    let told = s.prompt(OWNER, "what now?").expect("told");
    assert!(
        told.contains("was deleted outside ralph") && told.contains("`ralph log --name ralph`"),
        "{told}"
    );
    assert_eq!(s.prompt(OWNER, "and now?"), None, "once");
    let log = s.ralph(&["log", "--name", "ralph"], b"", "");
    let text = String::from_utf8_lossy(&log.stdout);
    assert!(log.status.success(), "{log:?}");
    assert!(
        text.contains("iteration 1 block") && text.contains("was deleted outside ralph"),
        "{text}"
    );
}

/// `/ralph-say` is answered by the hook, with no model turn: the guidance is queued for the
/// loop's next iteration (`ralph status` shows it waiting), and a misuse is told, not guessed.
#[test]
fn ralph_say_is_answered_by_the_hook_and_queues_guidance() {
    let s = Project::new();
    s.arm(OWNER, &[]);
    assert_eq!(
        s.answered(OWNER, "/ralph-say --gate check auth.rs, not auth_old.rs"),
        "💬 Guidance queued for `ralph` (--gate: the first promise after it is refused once): it goes into the next iteration's prompt, once."
    );
    let out = s.ralph(&["status", "--json"], b"", "");
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status["loops"][0]["guidance_pending"],
        json!(["check auth.rs, not auth_old.rs"])
    );
    let misuse = s.answered(OWNER, "/ralph-say --bogus x");
    assert!(misuse.contains("/ralph-say takes --name NAME"), "{misuse}");
}
