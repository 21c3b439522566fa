//! `ralph hook stop` through the real binary. Each test named `fNN_…`
//! reproduces a failure reported against other Ralph loops (numbered NN in the team's survey) and shows it fixed.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::project;

use std::path::Path;
use std::process::Output;

use project::{LOOP, Project, run_ralph};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use ralph_state::fields::state::LoopState;
use serde_json::{Value, json};

/// This module's steps on the shared [`Project`].
trait Steps {
    fn arm(&self, session: &str, iteration: &str, max: &str, promise: &str, prompt: &str);
    fn armed_then_written(&self, text: &str);
    fn state(&self) -> LoopState;
    fn history(&self) -> Vec<String>;
    fn stop(&self, event: Value) -> Answer;
    fn stop_in(&self, cwd: &Path, event: Value) -> Answer;
    fn stop_raw(&self, input: &[u8], cwd: &Path) -> Answer;
    fn hook(&self, input: &[u8], cwd: &Path, env: &[(&str, &str)]) -> Answer;
}

impl Steps for Project {
    /// A loop in the reference plugin's exact layout, adopted as the user
    /// would (`ralph adopt --yes`): a file without a record is never driven,
    /// whoever it names.
    fn arm(&self, session: &str, iteration: &str, max: &str, promise: &str, prompt: &str) {
        self.write(
            LOOP,
            &format!("---\nactive: true\niteration: {iteration}\nsession_id: {session}\nmax_iterations: {max}\ncompletion_promise: {promise}\nstarted_at: \"2026-11-30T00:00:00Z\"\n---\n\n{prompt}\n"),
        );
        self.adopt("ralph");
    }

    /// A loop armed here (`ralph start`) whose file then became `text`,
    /// adopted again when it still reads (its settings are bound).
    fn armed_then_written(&self, text: &str) {
        let out = self.ralph_in(&["start", "placeholder"], self.root(), b"", &[]);
        assert!(out.status.success(), "{out:?}");
        self.write(LOOP, text);
        if LoopState::parse(text).is_ok() {
            self.adopt("ralph");
        }
    }

    fn state(&self) -> LoopState {
        LoopState::parse(&self.read(LOOP)).unwrap()
    }

    fn history(&self) -> Vec<String> {
        let dir = self.path(".claude/ralph/history");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn stop(&self, event: Value) -> Answer {
        self.stop_raw(event.to_string().as_bytes(), self.root())
    }

    fn stop_in(&self, cwd: &Path, event: Value) -> Answer {
        self.stop_raw(event.to_string().as_bytes(), cwd)
    }

    fn stop_raw(&self, input: &[u8], cwd: &Path) -> Answer {
        self.hook(input, cwd, &[])
    }

    fn hook(&self, input: &[u8], cwd: &Path, env: &[(&str, &str)]) -> Answer {
        Answer::from(self.ralph_in(&["hook", "stop"], cwd, input, env))
    }
}

fn run_hook(input: &[u8], cwd: &Path, env: &[(&str, &str)]) -> Answer {
    Answer::from(run_ralph(&["hook", "stop"], cwd, input, env))
}

/// What the hook printed, checked against the protocol on the way in.
#[derive(Debug)]
struct Answer {
    json: Option<Value>,
    stderr: String,
}

impl From<Output> for Answer {
    fn from(out: Output) -> Self {
        assert_eq!(
            out.status.code(),
            Some(0),
            "the hook must always exit 0; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
        let json = if stdout.is_empty() {
            None
        } else {
            assert!(
                stdout.ends_with('\n') && stdout.trim().lines().count() == 1,
                "one JSON line: {stdout:?}"
            );
            let v: Value =
                serde_json::from_str(&stdout).expect("stdout is one valid JSON document");
            assert!(v.is_object());
            assert_ne!(
                v.get("decision"),
                Some(&json!("allow")),
                "`allow` is not a valid decision"
            );
            Some(v)
        };
        Self {
            json,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Answer {
    fn blocked(&self) -> bool {
        self.json.as_ref().and_then(|v| v.get("decision")) == Some(&json!("block"))
    }
    fn silent(&self) -> bool {
        self.json.is_none()
    }
    fn reason(&self) -> String {
        self.json
            .as_ref()
            .and_then(|v| v["reason"].as_str())
            .unwrap_or_default()
            .to_owned()
    }
    fn message(&self) -> String {
        self.json
            .as_ref()
            .and_then(|v| v["systemMessage"].as_str())
            .unwrap_or_default()
            .to_owned()
    }
}

fn event(session: &str, reply: Option<&str>) -> Value {
    let mut e = json!({"session_id": session, "transcript_path": "/nonexistent/t.jsonl", "hook_event_name": "Stop", "stop_hook_active": false});
    if let Some(r) = reply {
        e["last_assistant_message"] = json!(r);
    }
    e
}

fn transcript_line(id: &str, content: Value, ts: &str) -> String {
    json!({"type": "assistant", "isSidechain": false, "timestamp": ts, "message": {"id": id, "role": "assistant", "content": content}}).to_string()
}

// ---- 1. Loop never starts: the transcript lags or does not exist yet ----

#[test]
fn f01_loop_runs_when_the_transcript_does_not_exist_yet() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    let a = p.stop(event("s1", Some("Started work.")));
    assert!(a.blocked(), "{a:?}");
    assert_eq!(p.state().iteration, 2);
}

#[test]
fn f01_promise_in_last_assistant_message_counts_even_if_transcript_lags() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    p.write(
        "t.jsonl",
        &(transcript_line(
            "m0",
            json!([{"type": "text", "text": "older reply"}]),
            "2026-11-30T00:00:01Z",
        ) + "\n"),
    );
    let mut e = event("s1", Some("All done.\n<promise>DONE</promise>"));
    e["transcript_path"] = json!(p.path("t.jsonl"));
    let a = p.stop(e);
    assert!(a.message().contains("completed"), "{a:?}");
    assert!(!p.exists(LOOP));
}

// ---- 2. Tool-call-only final message; stale promises ----

#[test]
fn f02_tool_only_final_message_keeps_the_loop_going() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    let t = [
        transcript_line("m1", json!([{"type": "text", "text": "<promise>DONE</promise>"}]), "2026-11-30T00:00:01Z"),
        json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "content": "ok"}]}}).to_string(),
        transcript_line("m2", json!([{"type": "tool_use", "name": "Bash", "input": {}}]), "2026-11-30T00:00:02Z"),
    ];
    p.write("t.jsonl", &(t.join("\n") + "\n"));
    let mut e = event("s1", None);
    e["transcript_path"] = json!(p.path("t.jsonl"));
    let a = p.stop(e);
    assert!(
        a.blocked(),
        "a tool-only reply must not end the loop, nor revive an older promise: {a:?}"
    );
}

#[test]
fn f02_promise_from_before_the_loop_started_never_counts() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    let t = transcript_line(
        "m1",
        json!([{"type": "text", "text": "<promise>DONE</promise>"}]),
        "2026-11-29T23:59:00Z",
    );
    p.write("t.jsonl", &(t + "\n"));
    let mut e = event("s1", None);
    e["transcript_path"] = json!(p.path("t.jsonl"));
    assert!(p.stop(e).blocked());
}

#[test]
fn f02_transcript_fallback_finds_a_fresh_promise() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    let t = [
        transcript_line(
            "m1",
            json!([{"type": "text", "text": "Checked everything."}]),
            "2026-11-30T00:00:05Z",
        ),
        transcript_line(
            "m1",
            json!([{"type": "text", "text": "<promise>DONE</promise>"}]),
            "2026-11-30T00:00:05Z",
        ),
    ];
    p.write("t.jsonl", &(t.join("\n") + "\n"));
    let mut e = event("s1", None);
    e["transcript_path"] = json!(p.path("t.jsonl"));
    assert!(p.stop(e).message().contains("completed"));
}

#[test]
fn f02_marketer_payload_shape_is_read() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    let mut e = event("s1", None);
    e["transcript"] = json!([{"role": "assistant", "content": [{"type": "text", "text": "<promise>DONE</promise>"}]}]);
    assert!(p.stop(e).message().contains("completed"));
}

// ---- 3. Bare text; whitespace in the promise ----

#[test]
fn f03_bare_text_equal_to_the_promise_is_not_a_promise() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    assert!(p.stop(event("s1", Some("DONE"))).blocked());
}

#[test]
fn f03_promise_with_inner_whitespace_matches_after_collapsing() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"ALL  DONE\"", "Build it");
    assert!(
        p.stop(event("s1", Some("<promise>ALL\n  DONE</promise>")))
            .message()
            .contains("completed")
    );
}

#[test]
fn f03_promise_is_case_sensitive() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    assert!(
        p.stop(event("s1", Some("<promise>done</promise>")))
            .blocked()
    );
}

// ---- 4. Promise in prose or code ----

#[test]
fn f04_quoting_the_instruction_does_not_end_the_loop() {
    let p = Project::new();
    p.arm("s1", "1", "9", "\"DONE\"", "Build it");
    for reply in [
        "I will output <promise>DONE</promise> when all tests pass.",
        "Example:\n```\n<promise>DONE</promise>\n```",
        "The tag is `<promise>DONE</promise>`.",
        "> <promise>DONE</promise>",
    ] {
        assert!(p.stop(event("s1", Some(reply))).blocked(), "{reply}");
    }
    assert_eq!(p.state().iteration, 5);
}

// ---- 5. Iteration limit ----

#[test]
fn f05_leading_zeros_are_decimal_not_octal() {
    let p = Project::new();
    p.arm("s1", "08", "09", "null", "Build it");
    let a = p.stop(event("s1", Some("working")));
    assert!(a.blocked(), "{a:?}");
    assert_eq!(p.state().iteration, 9);
    let a = p.stop(event("s1", Some("still working")));
    assert!(a.message().contains("limit of 9"), "{a:?}");
    assert!(!p.exists(LOOP));
}

#[test]
fn f05_limit_of_n_gives_n_turns() {
    let p = Project::new();
    p.arm("s1", "1", "3", "null", "Build it");
    let blocks = (0..5)
        .take_while(|i| p.stop(event("s1", Some(&format!("turn {i}")))).blocked())
        .count();
    assert_eq!(blocks, 2, "turns 1 and 2 are blocked, turn 3 ends it");
    assert!(p.history().iter().any(|n| n.ends_with("-ralph.md")));
    let record = p.read(&format!(
        ".claude/ralph/history/{}",
        p.history()
            .iter()
            .find(|n| n.ends_with("-ralph.md"))
            .unwrap()
    ));
    let ended = LoopState::parse(&record).unwrap();
    assert_eq!(
        (ended.outcome.as_deref(), ended.iteration),
        (Some("max_iterations"), 3)
    );
}

#[test]
fn f05_missing_limit_is_finite() {
    let p = Project::new();
    p.write(LOOP, "---\nactive: true\niteration: 50\nsession_id: s1\ncompletion_promise: null\n---\nBuild it\n");
    p.adopt("ralph");
    let a = p.stop(event("s1", Some("working")));
    assert!(a.message().contains("limit of 50"), "{a:?}");
}

#[test]
fn f05_zero_means_unlimited_by_explicit_request() {
    let p = Project::new();
    p.arm("s1", "1000", "0", "null", "Build it");
    assert!(p.stop(event("s1", Some("working"))).blocked());
    assert_eq!(p.state().iteration, 1001);
}

// ---- 6. Missing or broken frontmatter lines ----

#[test]
fn f06_missing_fields_take_safe_defaults() {
    let p = Project::new();
    p.write(LOOP, "---\nsession_id: s1\n---\nBuild it\n");
    p.adopt("ralph");
    assert!(p.stop(event("s1", Some("working"))).blocked());
    let text = p.read(LOOP);
    assert!(text.contains("iteration: 2\n"), "{text}");
}

#[test]
fn f06_corrupt_state_is_moved_aside_with_a_precise_message() {
    let p = Project::new();
    // Armed here, then broken: a corrupt file that only names the session
    // would be left alone (see tests/security_registry.rs).
    p.armed_then_written("---\niteration: -1\nsession_id: s1\nmax_iterations: 5\n---\nBuild it\n");
    let a = p.stop(event("s1", Some("working")));
    assert!(!a.blocked());
    let m = a.message();
    assert!(
        m.contains("ralph-loop.local.md")
            && m.contains("`iteration`")
            && m.contains("-1")
            && m.contains("whole number"),
        "{m}"
    );
    assert!(!p.exists(LOOP), "a corrupt file must not trap the session");
    assert!(
        p.history().iter().any(|n| n.ends_with(".corrupt.md")),
        "{:?}",
        p.history()
    );
    assert!(p.stop(event("s1", Some("working"))).silent());
}

#[test]
fn f06_unparseable_yaml_and_missing_fences() {
    for text in [
        "---\nsession_id: s1\niteration: [1\n---\nx\n",
        "---\nsession_id: s1\niteration: 1\n",
        "no frontmatter at all",
    ] {
        let p = Project::new();
        p.armed_then_written(text);
        let a = p.stop(event("s1", Some("working")));
        assert!(
            !a.blocked() && a.message().contains("ralph-loop.local.md"),
            "{text:?}: {a:?}"
        );
        assert!(!p.exists(LOOP));
    }
}

#[test]
fn f06_another_sessions_corrupt_file_is_left_alone() {
    let p = Project::new();
    let text = "---\nsession_id: other\niteration: x\n---\nBuild it\n";
    p.write(LOOP, text);
    assert!(p.stop(event("s1", Some("working"))).silent());
    assert_eq!(p.read(LOOP), text);
}

#[test]
fn f06_another_sessions_corrupt_file_does_not_hide_an_unowned_loop() {
    let p = Project::new();
    // Sorted first by name, with no start time: it must still never be chosen.
    let broken = "---\nsession_id: other\niteration: x\n---\nTheirs\n";
    p.write(".claude/aaa-loop.local.md", broken);
    p.arm("", "1", "5", "\"DONE\"", "Build it");
    assert!(
        p.stop(event("s1", Some("working")))
            .reason()
            .starts_with("Build it")
    );
    assert_eq!(p.state().session_id.as_deref(), Some("s1"));
    assert_eq!(p.read(".claude/aaa-loop.local.md"), broken);
}

// ---- 7. Prompts that look like frontmatter ----

#[test]
fn f07_prompt_with_fences_and_field_lines_survives_byte_for_byte() {
    let p = Project::new();
    let prompt = "Step one\n---\niteration: 99\nmax_iterations: 1\n---\n\"quoted\" $HOME `cmd` \\ back\r\nlast";
    p.write(LOOP, &format!("---\nactive: true\niteration: 1\nsession_id: s1\nmax_iterations: 5\ncompletion_promise: \"DONE\"\nx-custom: {{keep: me}}\n---\n\n{prompt}\n"));
    p.adopt("ralph");
    let before = p.read(LOOP);
    let a = p.stop(event("s1", Some("working")));
    assert!(a.reason().starts_with(prompt), "{:?}", a.reason());
    let after = p.read(LOOP);
    // Every line before the closing fence is kept in order (only `iteration`
    // changes); the guard bookkeeping is appended; the body is untouched.
    let kept = before
        .split("x-custom: {keep: me}\n")
        .next()
        .unwrap()
        .replacen("iteration: 1\n", "iteration: 2\n", 1)
        + "x-custom: {keep: me}\n";
    assert!(after.starts_with(&kept), "{after}");
    assert!(after.ends_with(&format!("\n---\n\n{prompt}\n")), "{after}");
    assert_eq!(after.matches("iteration: 99").count(), 1);
}

// ---- 8. Sessions ----

#[test]
fn f08_another_sessions_stop_leaves_the_file_byte_for_byte() {
    let p = Project::new();
    p.arm("owner", "1", "5", "\"DONE\"", "Build it");
    let before = p.read(LOOP);
    let a = p.stop(event("intruder", Some("<promise>DONE</promise>")));
    assert!(a.silent(), "{a:?}");
    assert_eq!(p.read(LOOP), before);
}

#[test]
fn f08_unowned_loop_is_claimed_by_one_session_only() {
    let p = Project::new();
    p.arm("", "1", "5", "\"DONE\"", "Build it");
    assert!(p.stop(event("first", Some("working"))).blocked());
    assert_eq!(p.state().session_id.as_deref(), Some("first"));
    let before = p.read(LOOP);
    assert!(p.stop(event("second", Some("working"))).silent());
    assert_eq!(p.read(LOOP), before);
}

#[test]
fn f08_two_sessions_two_loops_in_one_project() {
    let p = Project::new();
    p.arm("a", "1", "5", "\"DONE\"", "Task A");
    p.write(
        ".claude/docs-loop.local.md",
        "---\niteration: 1\nsession_id: b\nmax_iterations: 5\n---\nTask B\n",
    );
    p.adopt("docs");
    assert!(p.stop(event("a", Some("x"))).reason().starts_with("Task A"));
    assert!(p.stop(event("b", Some("y"))).reason().starts_with("Task B"));
    assert!(p.stop(event("c", Some("z"))).silent());
}

#[test]
fn f08_event_without_session_drives_nothing() {
    let p = Project::new();
    p.arm("", "1", "5", "\"DONE\"", "Build it");
    let before = p.read(LOOP);
    let a = p.stop(json!({"last_assistant_message": "x"}));
    assert!(!a.blocked());
    assert_eq!(p.read(LOOP), before);
}

// ---- 9. Current directory ----

#[test]
fn f09_session_in_a_subfolder_finds_its_loop() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    std::fs::create_dir_all(p.path("src/deep")).unwrap();
    let mut e = event("s1", Some("working"));
    e["cwd"] = json!(p.path("src/deep"));
    assert!(p.stop_in(&p.path("src/deep"), e).blocked());
}

#[test]
fn f09_claude_project_dir_wins() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    let elsewhere = tempfile::tempdir().unwrap();
    let root = p.root().to_str().unwrap();
    let a = p.hook(
        event("s1", Some("x")).to_string().as_bytes(),
        elsewhere.path(),
        &[("CLAUDE_PROJECT_DIR", root)],
    );
    assert!(a.blocked());
}

// ---- 10. stop_hook_active and Claude Code's block cap ----

#[test]
fn f10_stop_hook_active_is_the_normal_state_of_a_loop() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    let mut e = event("s1", Some("working"));
    e["stop_hook_active"] = json!(true);
    assert!(p.stop(e).blocked());
}

#[test]
fn f10_idle_continuations_end_before_claude_codes_cap() {
    let p = Project::new();
    p.arm("s1", "1", "0", "\"DONE\"", "Build it");
    let t = p.path("t.jsonl");
    let mut lines = String::new();
    let mut ended_at = None;
    for i in 0..10 {
        lines.push_str(&transcript_line(
            &format!("m{i}"),
            json!([{"type": "text", "text": format!("thinking {i}")}]),
            "2026-11-30T00:00:05Z",
        ));
        lines.push('\n');
        std::fs::write(&t, &lines).unwrap();
        let mut e = event("s1", Some(&format!("thinking {i}")));
        e["transcript_path"] = json!(t);
        e["stop_hook_active"] = json!(i > 0); // continuations of one turn
        let a = p.hook(
            e.to_string().as_bytes(),
            p.root(),
            &[("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "5")],
        );
        if !a.blocked() {
            assert!(a.message().contains("block"), "{a:?}");
            ended_at = Some(i);
            break;
        }
    }
    // Claude Code allows 5 blocks in a row without a tool and overrides the
    // 6th: ralph blocks 5 times (stops 0 to 4) and ends the loop at stop 5.
    assert_eq!(ended_at, Some(5));
}

#[test]
fn f10_tool_use_resets_the_idle_count() {
    let p = Project::new();
    p.arm("s1", "1", "0", "\"DONE\"", "Build it");
    let t = p.path("t.jsonl");
    let mut lines = String::new();
    for i in 0..12 {
        let content = if i % 2 == 0 {
            json!([{"type": "tool_use", "name": "Bash", "input": {}}])
        } else {
            json!([{"type": "text", "text": format!("t{i}")}])
        };
        lines.push_str(&transcript_line(
            &format!("m{i}"),
            content,
            "2026-11-30T00:00:05Z",
        ));
        lines.push('\n');
        std::fs::write(&t, &lines).unwrap();
        let mut e = event("s1", Some(&format!("t{i}")));
        e["transcript_path"] = json!(t);
        assert!(
            p.hook(
                e.to_string().as_bytes(),
                p.root(),
                &[("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "4")]
            )
            .blocked(),
            "stop {i}"
        );
    }
}

// ---- 13. Valid answers whatever the input ----

#[test]
fn f13_hostile_prompt_yields_valid_json() {
    let p = Project::new();
    let prompt =
        "quote \" backslash \\ tab \t nul-ish \u{1} emoji 🚀 </script> {\"decision\":\"allow\"}";
    p.arm("s1", "1", "5", "\"DONE\"", prompt);
    let a = p.stop(event("s1", Some("x")));
    assert!(a.reason().starts_with(prompt));
}

#[test]
fn f13_empty_and_invalid_stdin_allow_with_a_notice() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    for input in [
        &b""[..],
        b"not json",
        b"[1,2]",
        b"{\"session_id\": 5}",
        &[0xff, 0xfe, 0x00],
    ] {
        let a = p.stop_raw(input, p.root());
        assert!(!a.blocked());
        assert!(a.message().contains("Stop event"), "{input:?}: {a:?}");
    }
    assert_eq!(p.state().iteration, 1);
}

#[test]
fn f13_no_loop_means_no_output_at_all() {
    let p = Project::new();
    let a = p.stop(event("s1", Some("x")));
    assert!(a.silent() && a.stderr.is_empty());
    let bare = tempfile::tempdir().unwrap();
    assert!(run_hook(b"{}", bare.path(), &[]).silent());
}

#[test]
fn f13_unwritable_state_folder_allows_with_a_notice() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    // `.claude/ralph` taken by a plain file: no lock can be made there.
    std::fs::remove_dir_all(p.path(".claude/ralph")).unwrap();
    p.write(".claude/ralph", "in the way");
    let a = p.stop(event("s1", Some("x")));
    assert!(
        // Windows names the path with backslashes.
        !a.blocked() && a.message().replace('\\', "/").contains(".claude/ralph"),
        "{a:?}"
    );
}

// ---- the rest of the engine ----

#[test]
fn ended_loops_keep_a_record_and_a_log() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    p.stop(event("s1", Some("working")));
    p.stop(event("s1", Some("<promise>DONE</promise>")));
    let h = p.history();
    assert_eq!(h.len(), 2, "{h:?}");
    let record = LoopState::parse(&p.read(&format!(".claude/ralph/history/{}", h[1]))).unwrap();
    assert_eq!(
        (record.outcome.as_deref(), record.iteration, record.active),
        (Some("completed"), 2, false)
    );
    let log = p.read(&format!(".claude/ralph/history/{}", h[0]));
    let decisions: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        decisions
            .iter()
            .map(|d| d["decision"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["adopt", "block", "end"]
    );
    assert_eq!(decisions[2]["promise_seen"], true);
}

#[test]
fn block_answer_tells_the_agent_how_to_finish() {
    let p = Project::new();
    p.arm("s1", "1", "5", "\"DONE\"", "Build it");
    let a = p.stop(event("s1", Some("x")));
    assert!(a.reason().contains("iteration 2 of 5"), "{}", a.reason());
    assert!(
        a.reason()
            .contains("<promise>DONE</promise> on a line of its own")
    );
    assert!(a.message().contains("2/5"));
}

#[test]
fn concurrent_stops_never_lose_an_increment() {
    let p = Project::new();
    p.arm("s1", "1", "0", "null", "Build it");
    // Distinct replies, no breaker: every stop must count exactly once.
    let text = p.read(LOOP).replace(
        "---\n\nBuild",
        "stuck_after: 0\nno_progress_after: 0\n---\n\nBuild",
    );
    p.write(LOOP, &text);
    p.adopt("ralph");
    let n = 16;
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let root = p.root().to_owned();
            let user = p.user_env();
            std::thread::spawn(move || {
                let e = event("s1", Some(&format!("reply {i}")));
                let mut env: Vec<(&str, &str)> =
                    user.iter().map(|(k, v)| (*k, v.as_str())).collect();
                env.push(("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0"));
                run_hook(e.to_string().as_bytes(), &root, &env)
            })
        })
        .collect();
    for h in handles {
        let answer = h.join().unwrap();
        assert!(answer.blocked(), "{answer:?}");
    }
    assert_eq!(p.state().iteration, 1 + n);
}

proptest! {
    // Failing cases are kept beside this file, in tests/hook.proptest-regressions (the
    // default would look for them beside the test binary's main.rs instead).
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_stdin_gets_a_valid_answer(input in proptest::collection::vec(any::<u8>(), 0..300)) {
        let p = Project::new();
        p.arm("s1", "1", "5", "\"DONE\"", "Build it");
        let _ = p.stop_raw(&input, p.root()); // Answer::from asserts exit 0 and valid JSON
    }

    #[test]
    fn any_state_file_gets_a_valid_answer(state in "(---\n)?[ -~\n\u{feff}\r]{0,200}(\n---\n)?[ -~\n]{0,50}") {
        let p = Project::new();
        p.write(LOOP, &state);
        let a = p.stop(event("s1", Some("working")));
        if a.blocked() {
            prop_assert!(p.exists(LOOP));
        }
    }

    #[test]
    fn rewrite_preserves_body_and_unknown_fields(
        body in "[ -~\n\r]{0,120}",
        extra in proptest::collection::btree_map("[a-z]{1,8}_x", "[a-zA-Z0-9 ]{0,12}", 0..4),
        crlf in any::<bool>(),
    ) {
        let nl = if crlf { "\r\n" } else { "\n" };
        let extra_lines: String = extra.iter().map(|(k, v)| format!("{k}: \"{v}\"{nl}")).collect();
        let text = format!("---{nl}iteration: 1{nl}{extra_lines}session_id: s1{nl}---{nl}{body}");
        let updated = ralph_state::fields::frontmatter::set_fields(&text, &[("iteration", "2".into()), ("tokens_used", "7".into())]).unwrap();
        let layout = ralph_state::fields::frontmatter::split(&updated).unwrap();
        prop_assert_eq!(&updated[layout.body.clone()], body.as_str());
        for (k, v) in &extra {
            let line = format!("{k}: \"{v}\"{nl}");
            prop_assert!(updated.contains(&line));
        }
        let s = LoopState::parse(&updated).unwrap();
        prop_assert_eq!((s.iteration, s.progress.tokens_used), (2, 7));
    }
}
