//! CLI tests through the real `ralph` binary.
//!
//! Every test gets its own project folder (the process's cwd) and its own HOME,
//! and runs with the harness's scrubbed environment (`support::scrub`: Claude
//! Code's variables among others removed), so tests are independent and can
//! run in parallel. Nothing sleeps.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::{Value, json};

use crate::support::project::{Project, UserTerminal};
use crate::support::{describe, ralph_command};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// One test's world: an empty project folder (cwd) and a separate HOME.
fn sandbox() -> Project {
    Project::bare()
}

/// This module's steps on the shared [`Project`].
trait Steps {
    fn cmd_in(&self, dir: &Path) -> Command;
    fn cmd(&self) -> Command;
    fn run(&self, args: &[&str]) -> Output;
    fn run_stdin(&self, args: &[&str], stdin: &str) -> Output;
    fn run_as(&self, session: &str, args: &[&str]) -> Output;
    fn start(&self, args: &[&str]) -> Output;
    fn loop_path(&self, name: &str) -> PathBuf;
    fn read_loop(&self, name: &str) -> String;
    fn live_loops(&self) -> Vec<String>;
    fn status_json(&self) -> Value;
    fn stop(&self, session: &str, reply: &str) -> Output;
}

impl Steps for Project {
    /// `ralph` with a clean environment, run from `dir`.
    fn cmd_in(&self, dir: &Path) -> Command {
        let mut cmd = Command::from_std(ralph_command());
        cmd.current_dir(dir).envs(self.user_env());
        cmd
    }

    fn cmd(&self) -> Command {
        self.cmd_in(self.root())
    }

    /// Runs `ralph ARGS` with an empty stdin.
    fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).write_stdin("").output().unwrap()
    }

    fn run_stdin(&self, args: &[&str], stdin: &str) -> Output {
        self.cmd().args(args).write_stdin(stdin).output().unwrap()
    }

    /// Runs `ralph ARGS` as the Claude Code session `session`.
    fn run_as(&self, session: &str, args: &[&str]) -> Output {
        self.cmd()
            .env("CLAUDE_CODE_SESSION_ID", session)
            .args(args)
            .write_stdin("")
            .output()
            .unwrap()
    }

    /// `ralph start ARGS`, which must succeed.
    fn start(&self, args: &[&str]) -> Output {
        let mut all = vec!["start"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert_success(&out, &format!("ralph {}", all.join(" ")));
        out
    }

    fn loop_path(&self, name: &str) -> PathBuf {
        self.root()
            .join(".claude")
            .join(format!("{name}-loop.local.md"))
    }

    fn read_loop(&self, name: &str) -> String {
        let path = self.loop_path(name);
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    /// Names of the live loop files in `.claude/`, sorted.
    fn live_loops(&self) -> Vec<String> {
        live_loops_in(self.root())
    }

    fn status_json(&self) -> Value {
        let out = self.run(&["status", "--json"]);
        assert_success(&out, "ralph status --json");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("status --json is not JSON ({e}):\n{}", stdout(&out)))
    }

    /// Pipes a Stop event to `ralph hook stop`.
    fn stop(&self, session: &str, reply: &str) -> Output {
        let event = json!({
            "session_id": session,
            "cwd": self.root().display().to_string(),
            "hook_event_name": "Stop",
            "stop_hook_active": false,
            "last_assistant_message": reply,
        });
        let out = self
            .cmd()
            .args(["hook", "stop"])
            .write_stdin(event.to_string())
            .output()
            .unwrap();
        assert_success(&out, "ralph hook stop");
        out
    }
}

fn live_loops_in(root: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(root.join(".claude")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix("-loop.local.md")
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_success(out: &Output, what: &str) {
    assert!(out.status.success(), "`{what}` failed: {}", describe(out));
}

fn assert_exit(out: &Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "`{what}`: wrong exit code: {}",
        describe(out)
    );
}

/// The value of `key:` in a loop file's frontmatter, as written (unparsed).
fn field(text: &str, key: &str) -> Option<String> {
    let rest = text.strip_prefix("---\n")?;
    let (yaml, _) = rest.split_once("\n---\n")?;
    yaml.lines().find_map(|line| {
        line.strip_prefix(key)?
            .strip_prefix(':')
            .map(|v| v.trim().to_owned())
    })
}

/// The body (prompt) of a loop file: everything after the closing `---` and
/// the blank line.
fn body(text: &str) -> &str {
    let rest = text.strip_prefix("---\n").expect("file starts with ---");
    rest.split_once("\n---\n\n")
        .expect("frontmatter closes with ---, then a blank line")
        .1
}

/// The loops of `status --json` named `name`.
fn loops_named<'a>(status: &'a Value, name: &str) -> Vec<&'a Value> {
    status["loops"]
        .as_array()
        .expect("status --json has a `loops` array")
        .iter()
        .filter(|l| l["name"] == name)
        .collect()
}

/// The single loop of `status --json` named `name`.
fn loop_named<'a>(status: &'a Value, name: &str) -> &'a Value {
    let found = loops_named(status, name);
    assert_eq!(found.len(), 1, "expected one loop `{name}` in {status:#}");
    found[0]
}

fn is_utc_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

const USER_SUBCOMMANDS: &[&str] = &[
    "start", "cancel", "pause", "resume", "status", "log", "init",
];

// ---------------------------------------------------------------------------
// ralph start
// ---------------------------------------------------------------------------

#[test]
fn start_writes_the_reference_layout() {
    let sb = sandbox();
    sb.start(&[
        "--max-iterations",
        "20",
        "--completion-promise",
        "DONE",
        "Make every test pass",
    ]);
    let text = sb.read_loop("ralph");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "---", "{text}");
    assert_eq!(lines[1], "active: true", "{text}");
    assert_eq!(lines[2], "iteration: 1", "{text}");
    assert_eq!(lines[3].trim_end(), "session_id:", "{text}");
    assert_eq!(lines[4], "max_iterations: 20", "{text}");
    assert_eq!(lines[5], "completion_promise: \"DONE\"", "{text}");
    let started = lines[6]
        .strip_prefix("started_at: \"")
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or_else(|| panic!("started_at is not a quoted string: {text}"));
    assert!(is_utc_timestamp(started), "started_at `{started}`");
    // The nonce that binds the file to its record of this user's armed loops.
    let nonce = lines[7]
        .strip_prefix("ralph_nonce: \"")
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no quoted ralph_nonce after started_at: {text}"));
    assert!(
        nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit()),
        "nonce `{nonce}`"
    );
    assert_eq!(lines[8], "---", "{text}");
    assert_eq!(lines[9], "", "{text}");
    assert_eq!(lines[10], "Make every test pass", "{text}");
    assert_eq!(lines.len(), 11, "{text}");
    assert!(text.ends_with("Make every test pass\n"), "{text:?}");
}

#[test]
fn start_without_promise_writes_null() {
    let sb = sandbox();
    sb.start(&["Do it"]);
    let text = sb.read_loop("ralph");
    assert_eq!(
        field(&text, "completion_promise").as_deref(),
        Some("null"),
        "{text}"
    );
}

#[test]
fn start_joins_prompt_words_from_args() {
    let sb = sandbox();
    sb.start(&["Fix", "the", "parser"]);
    assert_eq!(body(&sb.read_loop("ralph")), "Fix the parser\n");
}

#[test]
fn start_reads_prompt_from_stdin() {
    let sb = sandbox();
    let out = sb.run_stdin(
        &["start", "--completion-promise", "DONE"],
        "Task from stdin\n\nwith a second paragraph\n",
    );
    assert_success(&out, "ralph start < prompt");
    assert_eq!(
        body(&sb.read_loop("ralph")),
        "Task from stdin\n\nwith a second paragraph\n"
    );
}

#[test]
fn start_accepts_option_equals_value_and_option_space_value() {
    let sb = sandbox();
    sb.start(&[
        "--name=eq",
        "--max-iterations=7",
        "--completion-promise=ALL DONE",
        "task one",
    ]);
    sb.start(&[
        "--name",
        "sp",
        "--max-iterations",
        "7",
        "--completion-promise",
        "ALL DONE",
        "task two",
    ]);
    for (name, task) in [("eq", "task one"), ("sp", "task two")] {
        let text = sb.read_loop(name);
        assert_eq!(
            field(&text, "max_iterations").as_deref(),
            Some("7"),
            "{text}"
        );
        assert_eq!(
            field(&text, "completion_promise").as_deref(),
            Some("\"ALL DONE\""),
            "{text}"
        );
        assert_eq!(body(&text), format!("{task}\n"));
    }
}

#[test]
fn start_max_iterations_with_leading_zero_is_decimal() {
    let sb = sandbox();
    let out = sb.start(&["--max-iterations=08", "task"]);
    let text = sb.read_loop("ralph");
    assert_eq!(
        field(&text, "max_iterations").as_deref(),
        Some("8"),
        "{text}"
    );
    assert!(
        stdout(&out).contains("at most 8 iterations"),
        "{}",
        describe(&out)
    );
    assert_eq!(loop_named(&sb.status_json(), "ralph")["max_iterations"], 8);
}

#[test]
fn start_malformed_max_iterations_is_a_usage_error_and_writes_nothing() {
    for bad in [
        vec!["--max-iterations", "five"],
        vec!["--max-iterations", "-1"],
        vec!["--max-iterations=-1"],
        vec!["--max-iterations=1.5"],
        vec!["--max-iterations", ""],
    ] {
        let sb = sandbox();
        let mut args = vec!["start"];
        args.extend(bad.iter().copied());
        args.push("task");
        let out = sb.run(&args);
        assert_exit(&out, 2, &args.join(" "));
        if bad != ["--max-iterations", "-1"] {
            // (`-1` after a space: see start_negative_max_iterations_names_the_option)
            assert!(
                stderr(&out).contains("max-iterations"),
                "the error should name the option: {}",
                describe(&out)
            );
        }
        assert!(sb.live_loops().is_empty(), "{args:?} armed a loop");
        assert!(
            !sb.root().join(".claude").exists(),
            "{args:?} created .claude/"
        );
    }
}

/// `--max-iterations -1` is refused (good) but clap reads `-1` as an unknown
/// flag: the message does not name `--max-iterations`, and its tip ("to pass
/// '-1' as a value, use '-- -1'") leads to `ralph start -- -1 task`, which arms
/// a loop with the prompt "-1 task" and the default limit.
#[test]

fn start_negative_max_iterations_names_the_option() {
    let sb = sandbox();
    let out = sb.run(&["start", "--max-iterations", "-1", "task"]);
    assert_exit(&out, 2, "ralph start --max-iterations -1 task");
    let err = stderr(&out);
    assert!(err.contains("--max-iterations"), "{err}");
    assert!(!err.contains("'-- -1'"), "{err}");
}

#[test]
fn start_default_max_iterations_is_50() {
    let sb = sandbox();
    let out = sb.start(&["task"]);
    let text = sb.read_loop("ralph");
    assert_eq!(
        field(&text, "max_iterations").as_deref(),
        Some("50"),
        "{text}"
    );
    assert!(
        stdout(&out).contains("at most 50 iterations"),
        "{}",
        describe(&out)
    );
}

#[test]
fn start_max_iterations_zero_with_nothing_else_to_end_it_is_refused() {
    let sb = sandbox();
    let out = sb.run(&["start", "--max-iterations", "0", "task"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("only a breaker or you could end")
            && err.contains("--completion-promise DONE")
            && err.contains("--max-iterations 20"),
        "{err}"
    );
    assert!(!sb.loop_path("ralph").exists(), "nothing armed");
    // A budget, a promise or a PRD bounds it: armed.
    for bounded in [
        ["--max-tokens", "5000"],
        ["--max-cost", "2"],
        ["--max-duration", "2h"],
    ] {
        // The previous one cancelled first (forcing over a live loop is the user's own
        // step, on a terminal: start_force_replaces_and_records_the_old_loop_as_cancelled).
        assert_success(&sb.run(&["cancel"]), "ralph cancel");
        let mut args = vec!["--max-iterations", "0"];
        args.extend(bounded);
        args.push("task");
        let out = sb.start(&args);
        assert!(out.status.success(), "{bounded:?}: {}", describe(&out));
        assert!(
            stdout(&out).contains("it ends at its"),
            "{}",
            describe(&out)
        );
    }
}

#[test]
fn start_max_iterations_zero_is_unlimited() {
    let sb = sandbox();
    let out = sb.start(&[
        "--max-iterations",
        "0",
        "--completion-promise",
        "DONE",
        "task",
    ]);
    let text = sb.read_loop("ralph");
    assert_eq!(
        field(&text, "max_iterations").as_deref(),
        Some("0"),
        "{text}"
    );
    assert!(
        stdout(&out).contains("no iteration limit"),
        "{}",
        describe(&out)
    );
    let status = sb.run(&["status"]);
    assert!(
        stdout(&status).contains("(no limit)"),
        "{}",
        describe(&status)
    );
    assert_eq!(loop_named(&sb.status_json(), "ralph")["max_iterations"], 0);
}

#[test]
fn start_binds_to_the_session_in_the_environment() {
    let sb = sandbox();
    let out = sb.run_as("5b360de9-aa01", &["start", "task"]);
    assert_success(&out, "CLAUDE_CODE_SESSION_ID=… ralph start");
    let text = sb.read_loop("ralph");
    assert_eq!(
        field(&text, "session_id").as_deref(),
        Some("5b360de9-aa01"),
        "{text}"
    );
    assert!(
        stdout(&out).contains("session 5b360de9-aa01"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        loop_named(&sb.status_json(), "ralph")["session_id"],
        "5b360de9-aa01"
    );
}

#[test]
fn start_binds_to_the_session_id_flag_over_the_environment() {
    let sb = sandbox();
    let out = sb.run_as("from-env", &["start", "--session-id", "from-flag", "task"]);
    assert_success(&out, "ralph start --session-id");
    let text = sb.read_loop("ralph");
    assert_eq!(
        field(&text, "session_id").as_deref(),
        Some("from-flag"),
        "{text}"
    );

    let sb = sandbox();
    sb.start(&["--session-id=only-flag", "task"]);
    assert_eq!(
        loop_named(&sb.status_json(), "ralph")["session_id"],
        "only-flag"
    );
}

#[test]
fn start_without_session_leaves_the_loop_unclaimed() {
    let sb = sandbox();
    let out = sb.start(&["task"]);
    assert!(
        stdout(&out).contains("the first session that stops claims it"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        loop_named(&sb.status_json(), "ralph")["session_id"],
        Value::Null
    );
}

#[test]
fn start_session_id_with_spaces_and_colon_round_trips() {
    let sb = sandbox();
    sb.start(&["--session-id", "a b: c", "task"]);
    let text = sb.read_loop("ralph");
    assert_eq!(
        field(&text, "session_id").as_deref(),
        Some("\"a b: c\""),
        "{text}"
    );
    assert_eq!(
        loop_named(&sb.status_json(), "ralph")["session_id"],
        "a b: c"
    );
}

#[test]
fn start_prompt_with_frontmatter_lines_survives_a_stop() {
    let sb = sandbox();
    let prompt = "---\niteration: 7\nactive: false\n---\nreal task";
    let out = sb.run_stdin(&["start", "--session-id", "P"], prompt);
    assert_success(&out, "ralph start < prompt with ---");
    assert_eq!(body(&sb.read_loop("ralph")), format!("{prompt}\n"));
    let answer: Value = serde_json::from_slice(&sb.stop("P", "working").stdout).unwrap();
    assert_eq!(answer["decision"], "block", "{answer:#}");
    assert!(
        answer["reason"].as_str().unwrap_or("").starts_with(prompt),
        "{answer:#}"
    );
    let text = sb.read_loop("ralph");
    assert_eq!(field(&text, "iteration").as_deref(), Some("2"), "{text}");
    assert_eq!(body(&text), format!("{prompt}\n"), "{text}");
}

#[test]
fn start_refuses_a_second_loop_of_the_same_name() {
    let sb = sandbox();
    sb.start(&["first task"]);
    let before = sb.read_loop("ralph");
    let out = sb.run(&["start", "second task"]);
    assert_exit(&out, 1, "ralph start (second)");
    let err = stderr(&out);
    assert!(err.contains("--force"), "{}", describe(&out));
    assert!(err.contains("ralph"), "{}", describe(&out));
    assert_eq!(sb.read_loop("ralph"), before, "the first loop was changed");
}

#[test]
fn start_refuses_a_second_loop_of_the_same_session_under_another_name() {
    let sb = sandbox();
    assert_success(
        &sb.run_as("S", &["start", "--name", "one", "a"]),
        "start one",
    );
    let out = sb.run_as("S", &["start", "--name", "two", "b"]);
    assert_exit(&out, 1, "ralph start --name two (same session)");
    assert!(stderr(&out).contains("one"), "{}", describe(&out));
    assert!(stderr(&out).contains("--force"), "{}", describe(&out));
    assert_eq!(sb.live_loops(), ["one"]);

    // Another session may run its own loop next to it.
    assert_success(
        &sb.run_as("T", &["start", "--name", "two", "b"]),
        "start two as T",
    );
    assert_eq!(sb.live_loops(), ["one", "two"]);
}

#[test]
fn start_force_replaces_and_records_the_old_loop_as_cancelled() {
    let sb = sandbox();
    // Forcing over a live loop is the user's own step: on a terminal open before it began.
    let mut terminal = UserTerminal::open(&sb);
    sb.start(&["--max-iterations", "3", "old task"]);
    let (code, screen) = terminal.ralph(
        &["start", "--force", "--max-iterations", "9", "new task"],
        "y\n",
    );
    assert_eq!(code, 0, "{screen}");
    let text = sb.read_loop("ralph");
    assert_eq!(body(&text), "new task\n");
    assert_eq!(field(&text, "max_iterations").as_deref(), Some("9"));

    let status = sb.status_json();
    let both = loops_named(&status, "ralph");
    assert_eq!(both.len(), 2, "{status:#}");
    let live = both.iter().find(|l| l["state"] == "active").expect("live");
    assert_eq!(live["max_iterations"], 9);
    let old = both.iter().find(|l| l["state"] == "ended").expect("ended");
    assert_eq!(old["outcome"], "cancelled");
    assert_eq!(old["max_iterations"], 3);

    let human = stdout(&sb.run(&["status"]));
    assert!(human.contains("ended `ralph` (cancelled)"), "{human}");
}

#[test]
fn start_force_replaces_the_same_sessions_loop_under_another_name() {
    let sb = sandbox();
    let mut terminal = UserTerminal::open(&sb);
    assert_success(
        &sb.run_as("S", &["start", "--name", "one", "a"]),
        "start one",
    );
    let (code, screen) = terminal.ralph(
        &[
            "start",
            "--session-id",
            "S",
            "--name",
            "two",
            "--force",
            "b",
        ],
        "y\n",
    );
    assert_eq!(code, 0, "start two --force: {screen}");
    assert_eq!(sb.live_loops(), ["two"]);
    let status = sb.status_json();
    let one = loop_named(&status, "one");
    assert_eq!(
        (&one["state"], &one["outcome"]),
        (&json!("ended"), &json!("cancelled"))
    );
}

#[test]
fn start_with_an_empty_prompt_is_an_error() {
    let sb = sandbox();
    for (args, stdin) in [
        (vec!["start"], ""),
        (vec!["start"], "  \n\n"),
        (vec!["start", "   "], ""),
        (vec!["start", "--max-iterations", "5"], ""),
    ] {
        let out = sb.run_stdin(&args, stdin);
        assert!(
            !out.status.success(),
            "{args:?} {stdin:?}: {}",
            describe(&out)
        );
        assert!(
            stderr(&out).contains("prompt is empty"),
            "{}",
            describe(&out)
        );
        assert!(sb.live_loops().is_empty());
    }
}

#[test]
fn start_rejects_a_bad_name() {
    for name in ["a/b", "../x", "", "a b", "x.y"] {
        let sb = sandbox();
        let out = sb.run(&["start", "--name", name, "task"]);
        assert!(!out.status.success(), "--name {name:?}: {}", describe(&out));
        assert!(
            stderr(&out).contains("not a valid loop name"),
            "--name {name:?}: {}",
            describe(&out)
        );
        assert!(sb.live_loops().is_empty(), "--name {name:?}");
        assert!(
            !sb.root().join("a").exists(),
            "--name {name:?} made a folder"
        );
        assert!(
            !sb.root().join("x-loop.local.md").exists(),
            "--name {name:?} wrote outside .claude/"
        );
    }
}

#[test]
fn start_prints_the_activation_text() {
    let sb = sandbox();
    let out = sb.start(&[
        "--completion-promise",
        "DONE",
        "--max-iterations",
        "4",
        "Write the user guide",
    ]);
    let text = stdout(&out);
    assert!(text.contains("Write the user guide"), "{text}");
    assert!(text.contains("<promise>DONE</promise>"), "{text}");
    assert!(text.contains("at most 4 iterations"), "{text}");
    // Windows names the path with a backslash.
    assert!(
        text.replace('\\', "/")
            .contains(".claude/ralph-loop.local.md"),
        "{text}"
    );
    assert!(stderr(&out).is_empty(), "{}", describe(&out));
}

// ---------------------------------------------------------------------------
// ralph start --raw-arguments
// ---------------------------------------------------------------------------

#[test]
fn raw_arguments_keep_the_task_verbatim_and_apply_options() {
    let sb = sandbox();
    let task = "Fix the \"quotes\" in $HOME, run $(whoami) and `date`, then glob *.rs\n\
                second line keeps    its spaces";
    let raw = format!("--max-iterations 5 {task} --completion-promise \"ALL DONE\"");
    let out = sb.run_stdin(&["start", "--raw-arguments"], &raw);
    assert_success(&out, "ralph start --raw-arguments");
    let text = sb.read_loop("ralph");
    assert_eq!(body(&text), format!("{task}\n"), "{text}");
    assert_eq!(
        field(&text, "max_iterations").as_deref(),
        Some("5"),
        "{text}"
    );
    assert_eq!(
        field(&text, "completion_promise").as_deref(),
        Some("\"ALL DONE\""),
        "{text}"
    );
    assert!(
        stdout(&out).contains("<promise>ALL DONE</promise>"),
        "{}",
        describe(&out)
    );
    // Nothing was expanded by a shell on the way.
    let home = sb.home().display().to_string();
    assert!(!text.contains(&home), "{text}");
}

#[test]
fn raw_arguments_with_equals_and_a_quoted_prompt() {
    let sb = sandbox();
    let raw =
        "\"Build a todo app\" --completion-promise=\"ALL DONE\" --max-iterations=08 --name=todo";
    assert_success(
        &sb.run_stdin(&["start", "--raw-arguments"], raw),
        "ralph start --raw-arguments",
    );
    let text = sb.read_loop("todo");
    assert_eq!(body(&text), "Build a todo app\n");
    assert_eq!(field(&text, "max_iterations").as_deref(), Some("8"));
    assert_eq!(
        field(&text, "completion_promise").as_deref(),
        Some("\"ALL DONE\"")
    );
}

#[test]
fn raw_arguments_double_dash_ends_options() {
    let sb = sandbox();
    let out = sb.run_stdin(
        &["start", "--raw-arguments"],
        "--max-iterations 3 -- add --name support and --max-iterations 9",
    );
    assert_success(&out, "ralph start --raw-arguments");
    let text = sb.read_loop("ralph");
    assert_eq!(body(&text), "add --name support and --max-iterations 9\n");
    assert_eq!(field(&text, "max_iterations").as_deref(), Some("3"));
}

#[test]
fn raw_arguments_unknown_option_stays_in_the_prompt_with_a_note() {
    let sb = sandbox();
    // A word far from any ralph option, with no ralph option beside it, is
    // part of the task (a near miss such as `--max-iteration` is refused:
    // tests/first_hour.rs).
    let out = sb.run_stdin(&["start", "--raw-arguments"], "add a --verbose flag");
    assert_success(&out, "ralph start --raw-arguments");
    let text = sb.read_loop("ralph");
    assert_eq!(body(&text), "add a --verbose flag\n");
    assert_eq!(field(&text, "max_iterations").as_deref(), Some("50"));
    let said = stdout(&out);
    assert!(
        said.contains("--verbose") && said.contains("not a ralph option"),
        "{}",
        describe(&out)
    );
}

/// With `--raw-arguments`, the prompt comes from stdin only: words given on
/// the command line as well are dropped without a word.
#[test]

fn raw_arguments_with_positional_words_does_not_drop_them() {
    let sb = sandbox();
    let out = sb.run_stdin(
        &["start", "--raw-arguments", "positional words"],
        "from stdin",
    );
    if out.status.success() {
        let text = sb.read_loop("ralph");
        assert!(text.contains("positional words"), "dropped: {text}");
    } else {
        assert!(sb.live_loops().is_empty());
    }
}

#[test]
fn raw_arguments_option_without_value_is_an_error() {
    let sb = sandbox();
    let out = sb.run_stdin(&["start", "--raw-arguments"], "do it --max-iterations");
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        stderr(&out).contains("--max-iterations"),
        "{}",
        describe(&out)
    );
    assert!(sb.live_loops().is_empty());
}

#[test]
fn raw_arguments_non_number_is_an_error() {
    for raw in [
        "do it --max-iterations abc",
        "do it --max-iterations=-1",
        "--max-iterations five do it",
    ] {
        let sb = sandbox();
        let out = sb.run_stdin(&["start", "--raw-arguments"], raw);
        assert!(!out.status.success(), "{raw:?}: {}", describe(&out));
        assert!(
            stderr(&out).contains("max-iterations"),
            "{}",
            describe(&out)
        );
        assert!(sb.live_loops().is_empty(), "{raw:?} armed a loop");
    }
}

/// The CLI documents exit 2 for bad usage, and `--max-iterations five` on the
/// command line exits 2; the same mistake through `--raw-arguments` exits 1.
#[test]

fn raw_arguments_usage_errors_exit_2_like_the_command_line() {
    let sb = sandbox();
    for raw in ["do it --max-iterations abc", "do it --max-iterations"] {
        let out = sb.run_stdin(&["start", "--raw-arguments"], raw);
        assert_exit(&out, 2, &format!("ralph start --raw-arguments <<< {raw:?}"));
    }
}

/// An apostrophe (`Don't`) opens a "quote" that never closes, so every option
/// after it is silently swallowed into the prompt: the limit is ignored and the
/// loop runs with the default (prior art item 5, by another road), with no note.
#[test]

fn raw_arguments_options_after_an_apostrophe_still_apply() {
    let sb = sandbox();
    let out = sb.run_stdin(
        &["start", "--raw-arguments"],
        "Don't touch the README --max-iterations 5 --completion-promise DONE",
    );
    assert_success(&out, "ralph start --raw-arguments");
    let text = sb.read_loop("ralph");
    assert_eq!(body(&text), "Don't touch the README\n", "{text}");
    assert_eq!(
        field(&text, "max_iterations").as_deref(),
        Some("5"),
        "{text}"
    );
    assert_eq!(
        field(&text, "completion_promise").as_deref(),
        Some("\"DONE\""),
        "{text}"
    );
}

// ---------------------------------------------------------------------------
// ralph cancel
// ---------------------------------------------------------------------------

#[test]
fn cancel_ends_this_sessions_loop() {
    let sb = sandbox();
    assert_success(
        &sb.run_as("S", &["start", "--name", "mine", "a"]),
        "start mine",
    );
    assert_success(
        &sb.run_as("T", &["start", "--name", "theirs", "b"]),
        "start theirs",
    );
    let out = sb.run_as("S", &["cancel"]);
    assert_success(&out, "ralph cancel (as S)");
    assert!(stdout(&out).contains("`mine`"), "{}", describe(&out));
    assert_eq!(sb.live_loops(), ["theirs"]);
}

#[test]
fn cancel_ends_the_only_loop() {
    let sb = sandbox();
    sb.start(&["--session-id", "someone-else", "task"]);
    let out = sb.run(&["cancel"]);
    assert_success(&out, "ralph cancel");
    assert!(
        stdout(&out).contains("Cancelled loop `ralph`"),
        "{}",
        describe(&out)
    );
    assert!(sb.live_loops().is_empty());
}

#[test]
fn cancel_by_name() {
    let sb = sandbox();
    sb.start(&["--name", "a", "task a"]);
    sb.start(&["--name", "b", "task b"]);
    let out = sb.run(&["cancel", "--name", "b"]);
    assert_success(&out, "ralph cancel --name b");
    assert_eq!(sb.live_loops(), ["a"]);

    // Cancelling what is not there is not an error: cancel is idempotent.
    let out = sb.run(&["cancel", "--name", "zzz"]);
    assert_exit(&out, 0, "ralph cancel --name zzz");
    assert!(stdout(&out).contains("zzz"), "{}", describe(&out));
    assert_eq!(sb.live_loops(), ["a"]);
}

#[test]
fn cancel_and_pause_with_raw_arguments() {
    let sb = sandbox();
    sb.start(&["--name", "a", "--session-id", "S1", "x"]);
    sb.start(&["--name", "b", "--session-id", "S2", "y"]);
    sb.start(&["--name", "c", "--session-id", "S3", "z"]);
    let out = sb.run_stdin(&["pause", "--raw-arguments"], "b\n");
    assert_success(&out, "ralph pause --raw-arguments <<< b");
    assert_eq!(
        field(&sb.read_loop("b"), "active").as_deref(),
        Some("false")
    );
    let out = sb.run_stdin(&["cancel", "--raw-arguments"], "--name=a");
    assert_success(&out, "ralph cancel --raw-arguments <<< --name=a");
    assert_eq!(sb.live_loops(), ["b", "c"]);
    let out = sb.run_stdin(&["cancel", "--raw-arguments"], "two words");
    assert!(!out.status.success(), "{}", describe(&out));
    assert_eq!(sb.live_loops(), ["b", "c"]);
    let out = sb.run_stdin(&["cancel", "--raw-arguments"], " --all ");
    assert_success(&out, "ralph cancel --raw-arguments <<< --all");
    assert!(sb.live_loops().is_empty());
}

#[test]
fn cancel_with_several_loops_and_no_name_lists_them() {
    let sb = sandbox();
    sb.start(&["--name", "alpha", "--session-id", "S1", "a"]);
    sb.start(&["--name", "beta", "--session-id", "S2", "b"]);
    let out = sb.run(&["cancel"]);
    assert_exit(&out, 1, "ralph cancel (ambiguous)");
    let err = stderr(&out);
    assert!(
        err.contains("alpha") && err.contains("beta"),
        "{}",
        describe(&out)
    );
    assert!(
        err.contains("--name") && err.contains("--all"),
        "{}",
        describe(&out)
    );
    assert_eq!(sb.live_loops(), ["alpha", "beta"]);

    // A session that owns none of them is just as ambiguous.
    let out = sb.run_as("S3", &["cancel"]);
    assert_exit(&out, 1, "ralph cancel (as a stranger)");
    assert_eq!(sb.live_loops(), ["alpha", "beta"]);
}

#[test]
fn cancel_all() {
    let sb = sandbox();
    sb.start(&["--name", "alpha", "--session-id", "S1", "a"]);
    sb.start(&["--name", "beta", "--session-id", "S2", "b"]);
    sb.start(&["--name", "gamma", "c"]);
    let out = sb.run(&["cancel", "--all"]);
    assert_success(&out, "ralph cancel --all");
    for name in ["alpha", "beta", "gamma"] {
        assert!(
            stdout(&out).contains(&format!("`{name}`")),
            "{}",
            describe(&out)
        );
    }
    assert!(sb.live_loops().is_empty());
    let status = sb.status_json();
    for name in ["alpha", "beta", "gamma"] {
        assert_eq!(loop_named(&status, name)["outcome"], "cancelled");
    }
}

#[test]
fn cancel_without_a_loop_is_fine() {
    let sb = sandbox();
    let out = sb.run(&["cancel"]);
    assert_exit(&out, 0, "ralph cancel");
    assert!(
        stdout(&out).contains("No active loop"),
        "{}",
        describe(&out)
    );

    let out = sb.run(&["cancel", "--all"]);
    assert_exit(&out, 0, "ralph cancel --all");
    assert!(
        stdout(&out).contains("No active loop"),
        "{}",
        describe(&out)
    );
}

#[test]
fn cancel_twice_is_idempotent() {
    let sb = sandbox();
    sb.start(&["task"]);
    assert_success(&sb.run(&["cancel"]), "first cancel");
    let out = sb.run(&["cancel"]);
    assert_exit(&out, 0, "second cancel");
    assert!(
        stdout(&out).contains("No active loop"),
        "{}",
        describe(&out)
    );
    assert_eq!(loops_named(&sb.status_json(), "ralph").len(), 1);
}

#[test]
fn cancel_removes_the_file_and_records_the_loop_as_cancelled() {
    let sb = sandbox();
    sb.start(&["--completion-promise", "DONE", "--session-id", "S", "task"]);
    assert!(sb.loop_path("ralph").exists());
    assert_success(&sb.run(&["cancel"]), "ralph cancel");
    assert!(
        !sb.loop_path("ralph").exists(),
        "the live file is still there"
    );

    let out = sb.run(&["status", "--json"]);
    let compact = {
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v.to_string()
    };
    assert!(
        compact.contains("\"state\":\"ended\"") && compact.contains("\"outcome\":\"cancelled\""),
        "{compact}"
    );
    let status = sb.status_json();
    let l = loop_named(&status, "ralph");
    assert_eq!(l["state"], "ended");
    assert_eq!(l["outcome"], "cancelled");
    assert_eq!(l["iteration"], 1);
    assert_eq!(l["session_id"], "S");
    assert_eq!(l["completion_promise"], "DONE");
}

/// `ralph cancel` (and pause/resume) in a folder with no loop at all creates
/// `.claude/ralph/lock`, which turns that folder into a "project" for the next
/// `ralph start` / Stop hook run from below it (prior art item 9).
#[test]

fn cancel_without_any_project_leaves_no_trace() {
    let sb = sandbox();
    for args in [["cancel"].as_slice(), &["pause"], &["resume"], &["status"]] {
        assert_success(&sb.run(args), &args.join(" "));
        assert!(
            !sb.root().join(".claude").exists(),
            "`ralph {}` created .claude/",
            args.join(" ")
        );
    }
}

// ---------------------------------------------------------------------------
// ralph pause / resume
// ---------------------------------------------------------------------------

#[test]
fn pause_and_resume_flip_active() {
    let sb = sandbox();
    sb.start(&["task"]);
    let out = sb.run(&["pause"]);
    assert_success(&out, "ralph pause");
    assert!(
        stdout(&out).contains("Paused loop `ralph`"),
        "{}",
        describe(&out)
    );
    let text = sb.read_loop("ralph");
    assert_eq!(field(&text, "active").as_deref(), Some("false"), "{text}");
    assert_eq!(body(&text), "task\n");
    assert_eq!(loop_named(&sb.status_json(), "ralph")["state"], "paused");

    let out = sb.run(&["resume"]);
    assert_success(&out, "ralph resume");
    assert!(
        stdout(&out).contains("Resumed loop `ralph`"),
        "{}",
        describe(&out)
    );
    let text = sb.read_loop("ralph");
    assert_eq!(field(&text, "active").as_deref(), Some("true"), "{text}");
    assert_eq!(loop_named(&sb.status_json(), "ralph")["state"], "active");
}

#[test]
fn pause_and_resume_by_name_and_twice() {
    let sb = sandbox();
    sb.start(&["--name", "a", "--session-id", "S1", "x"]);
    sb.start(&["--name", "b", "--session-id", "S2", "y"]);
    assert_exit(&sb.run(&["pause"]), 1, "ralph pause (ambiguous)");
    assert_success(&sb.run(&["pause", "--name", "b"]), "pause b");
    assert_eq!(field(&sb.read_loop("a"), "active").as_deref(), Some("true"));
    assert_eq!(
        field(&sb.read_loop("b"), "active").as_deref(),
        Some("false")
    );

    let again = sb.run(&["pause", "--name", "b"]);
    assert_exit(&again, 0, "pause b again");
    assert!(
        stdout(&again).contains("Nothing to pause"),
        "{}",
        describe(&again)
    );

    assert_success(&sb.run_as("S2", &["resume"]), "resume as S2");
    assert_eq!(field(&sb.read_loop("b"), "active").as_deref(), Some("true"));
}

#[test]
fn paused_loop_lets_a_stop_through_and_resume_blocks_again() {
    let sb = sandbox();
    sb.start(&["--session-id", "S", "--completion-promise", "DONE", "task"]);
    assert_success(&sb.run(&["pause"]), "ralph pause");

    let out = sb.stop("S", "x");
    assert!(
        out.stdout.is_empty(),
        "a paused loop blocked: {}",
        describe(&out)
    );
    let text = sb.read_loop("ralph");
    assert_eq!(field(&text, "iteration").as_deref(), Some("1"), "{text}");
    assert_eq!(field(&text, "active").as_deref(), Some("false"), "{text}");

    assert_success(&sb.run(&["resume"]), "ralph resume");
    let out = sb.stop("S", "x");
    let answer: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", describe(&out)));
    assert_eq!(answer["decision"], "block", "{answer:#}");
    assert!(
        answer["reason"].as_str().unwrap_or("").starts_with("task"),
        "{answer:#}"
    );
    assert_eq!(
        field(&sb.read_loop("ralph"), "iteration").as_deref(),
        Some("2")
    );
}

// ---------------------------------------------------------------------------
// ralph status
// ---------------------------------------------------------------------------

#[test]
fn status_lists_active_and_ended_loops() {
    let sb = sandbox();
    sb.start(&[
        "--name",
        "done",
        "--session-id",
        "S1",
        "--completion-promise",
        "FIN",
        "--max-iterations",
        "7",
        "first",
    ]);
    assert_success(&sb.run(&["cancel", "--name", "done"]), "cancel done");
    sb.start(&[
        "--name",
        "live",
        "--session-id",
        "S2",
        "--completion-promise",
        "DONE",
        "--max-iterations",
        "9",
        "second",
    ]);

    let status = sb.status_json();
    let project = status["project"].as_str().unwrap_or_default();
    assert_eq!(
        fs::canonicalize(project).ok(),
        fs::canonicalize(sb.root()).ok(),
        "{status:#}"
    );
    let keys = [
        "name",
        "state",
        "outcome",
        "iteration",
        "max_iterations",
        "session_id",
        "completion_promise",
        "started_at",
    ];
    for name in ["done", "live"] {
        let l = loop_named(&status, name);
        for key in keys {
            assert!(l.get(key).is_some(), "`{name}` lacks `{key}`: {l:#}");
        }
        assert!(
            is_utc_timestamp(l["started_at"].as_str().unwrap_or_default()),
            "{l:#}"
        );
    }
    let live = loop_named(&status, "live");
    assert_eq!(live["state"], "active");
    assert_eq!(live["outcome"], Value::Null);
    assert_eq!(live["iteration"], 1);
    assert_eq!(live["max_iterations"], 9);
    assert_eq!(live["session_id"], "S2");
    assert_eq!(live["completion_promise"], "DONE");
    let done = loop_named(&status, "done");
    assert_eq!(done["state"], "ended");
    assert_eq!(done["outcome"], "cancelled");
    assert_eq!(done["max_iterations"], 7);
    assert_eq!(done["session_id"], "S1");
    assert_eq!(done["completion_promise"], "FIN");
    // Live loops come first.
    assert_eq!(status["loops"][0]["name"], "live", "{status:#}");

    let out = sb.run(&["status"]);
    assert_success(&out, "ralph status");
    let human = stdout(&out);
    for needle in [
        "active `live`",
        "iteration 1/9",
        "owner S2",
        "promise DONE",
        "ended `done` (cancelled)",
        "iteration 1/7",
        "owner S1",
        "promise FIN",
        "started 20",
    ] {
        assert!(human.contains(needle), "`{needle}` missing from:\n{human}");
    }
}

#[test]
fn status_of_an_empty_project() {
    let sb = sandbox();
    let out = sb.run(&["status"]);
    assert_success(&out, "ralph status");
    assert!(
        stdout(&out).contains("No Ralph loops"),
        "{}",
        describe(&out)
    );
    let status = sb.status_json();
    assert_eq!(status["loops"], json!([]), "{status:#}");
}

#[test]
fn status_shows_a_loop_completed_by_the_hook() {
    let sb = sandbox();
    sb.start(&["--session-id", "S", "--completion-promise", "DONE", "task"]);
    let first = sb.stop("S", "still working");
    assert!(!first.stdout.is_empty(), "the first stop was not blocked");
    let last = sb.stop("S", "All tests pass.\n<promise>DONE</promise>");
    let answer: Value = serde_json::from_slice(&last.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", describe(&last)));
    assert!(answer.get("decision").is_none(), "{answer:#}");
    assert!(sb.live_loops().is_empty(), "the loop file is still live");

    let status = sb.status_json();
    let l = loop_named(&status, "ralph");
    assert_eq!(l["state"], "ended", "{l:#}");
    assert_eq!(l["outcome"], "completed", "{l:#}");
    assert_eq!(l["iteration"], 2, "{l:#}");
    let human = stdout(&sb.run(&["status"]));
    assert!(
        human.contains("ended `ralph` (completed) iteration 2/50"),
        "{human}"
    );
}

/// Two loops of the same name that end within the same second are archived as
/// `<stamp>-ralph.md` and `<stamp>-ralph-2.md`; status then reports the second
/// one as a loop named `ralph-2` (and lists the older record first).
#[test]

fn status_names_each_ended_loop_by_its_own_name() {
    let sb = sandbox();
    for max in ["1", "2", "3"] {
        sb.start(&["--max-iterations", max, "task"]);
        assert_success(&sb.run(&["cancel"]), "ralph cancel");
    }
    let status = sb.status_json();
    let seen: Vec<(&str, u64)> = status["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap_or_default(),
                l["max_iterations"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    // Every record is the loop `ralph`, newest first.
    assert_eq!(
        seen,
        [("ralph", 3), ("ralph", 2), ("ralph", 1)],
        "{status:#}"
    );
    // `ralph log` without a name shows the most recent loop.
    let log = sb.run(&["log", "--json"]);
    assert_eq!(stdout(&log).lines().count(), 1, "{}", describe(&log));
}

// ---------------------------------------------------------------------------
// ralph log
// ---------------------------------------------------------------------------

#[test]
fn log_shows_the_decisions_of_two_stops() {
    let sb = sandbox();
    sb.start(&["--session-id", "S", "--completion-promise", "DONE", "task"]);
    sb.stop("S", "first reply");
    sb.stop("S", "second reply");

    let out = sb.run(&["log", "--json"]);
    assert_success(&out, "ralph log --json");
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "{}", describe(&out));
    assert_eq!(lines[0]["decision"], "block");
    assert_eq!(lines[0]["iteration"], 1);
    assert_eq!(lines[0]["reply_excerpt"], "first reply");
    assert_eq!(lines[1]["decision"], "block");
    assert_eq!(lines[1]["iteration"], 2);
    assert_eq!(lines[1]["next_iteration"], 3);

    let out = sb.run(&["log"]);
    assert_success(&out, "ralph log");
    let human = stdout(&out);
    // A header naming the loop and its task, then one line per stop.
    assert_eq!(human.lines().count(), 3, "{human}");
    assert_eq!(
        human.lines().next(),
        Some("Loop `ralph` (active) · task: task"),
        "{human}"
    );
    assert!(human.contains("iteration 1 block"), "{human}");
    assert!(human.contains("iteration 2 block"), "{human}");

    // The same log, by name, for the session, and after the loop ended.
    let by_name = sb.run(&["log", "--name", "ralph"]);
    assert_eq!(stdout(&by_name), human);
    let as_owner = sb.run_as("S", &["log"]);
    assert_eq!(stdout(&as_owner), human);
    assert_success(&sb.run(&["cancel"]), "ralph cancel");
    let after = sb.run(&["log", "--json"]);
    assert_eq!(stdout(&after).lines().count(), 3, "{}", describe(&after));
}

#[test]
fn log_of_a_loop_without_decisions() {
    let sb = sandbox();
    sb.start(&["task"]);
    let out = sb.run(&["log"]);
    assert_success(&out, "ralph log");
    assert!(
        stdout(&out).contains("no decisions logged yet"),
        "{}",
        describe(&out)
    );
    let out = sb.run(&["log", "--json"]);
    assert_success(&out, "ralph log --json");
    assert!(out.stdout.is_empty(), "{}", describe(&out));

    let out = sb.run(&["log", "--name", "nope"]);
    assert_exit(&out, 1, "ralph log --name nope");
    assert!(stderr(&out).contains("nope"), "{}", describe(&out));
}

/// Every other "nothing to do" (cancel, pause, resume, status) exits 0, and
/// the CLI documents 0 for "nothing to do"; `ralph log` in a project without
/// loops exits 1.
#[test]

fn log_without_any_loop_is_not_a_failure() {
    let sb = sandbox();
    let out = sb.run(&["log"]);
    assert_exit(&out, 0, "ralph log");
}

// ---------------------------------------------------------------------------
// ralph init
// ---------------------------------------------------------------------------

fn init_files(root: &Path) -> Vec<(String, String)> {
    ["PROMPT.md", "prd.json", "progress.txt"]
        .iter()
        .map(|f| {
            let path = root.join("ralph").join(f);
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            ((*f).to_owned(), text)
        })
        .collect()
}

fn story_count(root: &Path) -> usize {
    let text = fs::read_to_string(root.join("ralph/prd.json")).unwrap();
    let prd: Value = serde_json::from_str(&text).expect("prd.json is valid JSON");
    prd["userStories"]
        .as_array()
        .expect("prd.json has a userStories array")
        .len()
}

#[test]
fn init_writes_the_software_template() {
    let sb = sandbox();
    let out = sb.run(&["init"]);
    assert_success(&out, "ralph init");
    let files = init_files(sb.root());
    assert!(files.iter().all(|(_, t)| !t.trim().is_empty()));
    assert!(
        files[0].1.contains("<promise>"),
        "PROMPT.md: {}",
        files[0].1
    );
    assert!(story_count(sb.root()) > 0);
    let said = stdout(&out);
    for f in ["ralph/PROMPT.md", "ralph/prd.json", "ralph/progress.txt"] {
        assert!(said.contains(f), "{said}");
    }
    // Not a git repository: no .gitignore appears.
    assert!(!sb.root().join(".gitignore").exists());
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let sb = sandbox();
    assert_success(&sb.run(&["init"]), "ralph init");
    fs::write(sb.root().join("ralph/prd.json"), "{\"mine\": true}").unwrap();
    let before = init_files(sb.root());
    let out = sb.run(&["init"]);
    assert_exit(&out, 1, "ralph init (again)");
    assert!(stderr(&out).contains("--force"), "{}", describe(&out));
    assert_eq!(init_files(sb.root()), before, "files changed");

    // One existing file is enough to refuse, and the others are not written.
    let sb = sandbox();
    fs::create_dir_all(sb.root().join("ralph")).unwrap();
    fs::write(sb.root().join("ralph/progress.txt"), "my notes").unwrap();
    let out = sb.run(&["init", "--template", "marketing"]);
    assert_exit(&out, 1, "ralph init (progress.txt exists)");
    assert!(
        stderr(&out).contains("ralph/progress.txt"),
        "{}",
        describe(&out)
    );
    assert!(!sb.root().join("ralph/PROMPT.md").exists());
    assert_eq!(
        fs::read_to_string(sb.root().join("ralph/progress.txt")).unwrap(),
        "my notes"
    );
}

#[test]
fn init_force_overwrites() {
    let sb = sandbox();
    assert_success(&sb.run(&["init"]), "ralph init");
    let fresh = init_files(sb.root());
    fs::write(sb.root().join("ralph/prd.json"), "{\"mine\": true}").unwrap();
    fs::write(sb.root().join("ralph/PROMPT.md"), "mine").unwrap();
    assert_success(&sb.run(&["init", "--force"]), "ralph init --force");
    assert_eq!(init_files(sb.root()), fresh);
}

#[test]
fn init_marketing_template_has_12_stories() {
    let sb = sandbox();
    assert_success(
        &sb.run(&["init", "--template", "marketing"]),
        "ralph init --template marketing",
    );
    assert_eq!(story_count(sb.root()), 12);

    let sw = sandbox();
    assert_success(&sw.run(&["init", "--template=software"]), "ralph init");
    assert_ne!(
        init_files(sb.root())[0].1,
        init_files(sw.root())[0].1,
        "marketing and software share a PROMPT.md"
    );
}

#[test]
fn init_unknown_template_lists_the_templates() {
    let sb = sandbox();
    let out = sb.run(&["init", "--template", "cooking"]);
    assert!(!out.status.success(), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("cooking"), "{err}");
    assert!(
        err.contains("software") && err.contains("marketing"),
        "{err}"
    );
    assert!(!sb.root().join("ralph").exists());
}

#[test]
fn init_in_a_git_repo_ignores_loop_files_once() {
    let sb = sandbox();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(sb.root())
        .env("HOME", sb.home())
        .status();
    if !git.is_ok_and(|s| s.success()) {
        // Without git, the marker ralph looks for is enough.
        fs::create_dir_all(sb.root().join(".git")).unwrap();
    }
    fs::write(sb.root().join(".gitignore"), "target/").unwrap();

    // Issue 48 item 16: ralph's state goes to .git/info/exclude, as `--parallel`'s does;
    // the project's .gitignore is the user's and is left alone.
    let exclude = sb.root().join(".git/info/exclude");
    let before = fs::read_to_string(&exclude).unwrap_or_default();
    let out = sb.run(&["init"]);
    assert_success(&out, "ralph init");
    assert!(
        stdout(&out).contains("to .git/info/exclude"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        fs::read_to_string(sb.root().join(".gitignore")).unwrap(),
        "target/"
    );
    let once = fs::read_to_string(&exclude).unwrap();
    assert_eq!(
        once,
        format!("{before}# ralph: loop state, per machine\n/.claude/*.local.md\n/.claude/ralph/\n")
    );

    let again = sb.run(&["init", "--force"]);
    assert_success(&again, "ralph init --force");
    assert!(!stdout(&again).contains("exclude"), "{}", describe(&again));
    assert_eq!(fs::read_to_string(&exclude).unwrap(), once);
}

// ---------------------------------------------------------------------------
// Help, version, usage errors
// ---------------------------------------------------------------------------

#[test]
fn every_subcommand_help_has_examples() {
    let sb = sandbox();
    for sub in USER_SUBCOMMANDS {
        let out = sb.run(&[sub, "--help"]);
        assert_exit(&out, 0, &format!("ralph {sub} --help"));
        assert!(
            stdout(&out).contains("Examples"),
            "`ralph {sub} --help` has no Examples:\n{}",
            stdout(&out)
        );
        let out = sb.run(&["help", sub]);
        assert_exit(&out, 0, &format!("ralph help {sub}"));
        assert!(stdout(&out).contains("Examples"), "`ralph help {sub}`");
    }
}

#[test]

fn hook_and_top_level_help_have_examples() {
    let sb = sandbox();
    for args in [
        ["hook", "--help"].as_slice(),
        &["hook", "stop", "--help"],
        &["--help"],
    ] {
        let out = sb.run(args);
        assert_exit(&out, 0, &args.join(" "));
        assert!(
            stdout(&out).contains("Examples"),
            "`ralph {}` has no Examples:\n{}",
            args.join(" "),
            stdout(&out)
        );
    }
}

#[test]
fn version_prints_the_package_version() {
    let sb = sandbox();
    for flag in ["--version", "-V"] {
        let out = sb.run(&[flag]);
        assert_exit(&out, 0, flag);
        assert_eq!(
            stdout(&out).trim(),
            format!("ralph {}", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let sb = sandbox();
    let out = sb.run(&["bogus"]);
    assert_exit(&out, 2, "ralph bogus");
    assert!(stderr(&out).contains("bogus"), "{}", describe(&out));
    assert_exit(&sb.run(&[]), 2, "ralph");
    assert_exit(
        &sb.run(&["start", "--no-such-flag", "x"]),
        2,
        "unknown flag",
    );
    assert!(sb.live_loops().is_empty());
}

// ---------------------------------------------------------------------------
// Project root
// ---------------------------------------------------------------------------

#[test]
fn start_from_a_subfolder_arms_at_the_project_root() {
    let sb = sandbox();
    fs::create_dir_all(sb.root().join(".claude")).unwrap();
    let sub = sb.root().join("src/deep");
    fs::create_dir_all(&sub).unwrap();
    let out = sb
        .cmd_in(&sub)
        .args(["start", "task from below"])
        .write_stdin("")
        .output()
        .unwrap();
    assert_success(&out, "ralph start (from src/deep)");
    assert_eq!(body(&sb.read_loop("ralph")), "task from below\n");
    assert!(!sub.join(".claude").exists(), "armed in the subfolder");
    assert!(!sb.root().join("src/.claude").exists(), "armed in src/");

    // The other commands find it from the subfolder too.
    let status = sb.cmd_in(&sub).args(["status", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["loops"][0]["name"], "ralph", "{v:#}");
    let cancel = sb.cmd_in(&sub).arg("cancel").output().unwrap();
    assert_success(&cancel, "ralph cancel (from src/deep)");
    assert!(sb.live_loops().is_empty());
}

#[test]
fn start_in_a_git_subfolder_arms_at_the_git_root() {
    let sb = sandbox();
    fs::create_dir_all(sb.root().join(".git")).unwrap();
    let sub = sb.root().join("pkg");
    fs::create_dir_all(&sub).unwrap();
    let out = sb
        .cmd_in(&sub)
        .args(["start", "task"])
        .write_stdin("")
        .output()
        .unwrap();
    assert_success(&out, "ralph start (from pkg/)");
    assert_eq!(sb.live_loops(), ["ralph"]);
    assert!(!sub.join(".claude").exists());
}

#[test]
fn claude_project_dir_wins() {
    let sb = sandbox();
    fs::create_dir_all(sb.root().join(".claude")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let out = sb
        .cmd()
        .env("CLAUDE_PROJECT_DIR", elsewhere.path())
        .args(["start", "task"])
        .write_stdin("")
        .output()
        .unwrap();
    assert_success(&out, "CLAUDE_PROJECT_DIR=… ralph start");
    assert_eq!(live_loops_in(elsewhere.path()), ["ralph"]);
    assert!(sb.live_loops().is_empty(), "armed in the cwd");

    let status = sb
        .cmd()
        .env("CLAUDE_PROJECT_DIR", elsewhere.path())
        .args(["status", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["loops"][0]["name"], "ralph", "{v:#}");
}

/// Issue 26 item 3: options after the task are options, on the command line and in a slash
/// command's text alike; `--` ends them; a typo after the task is refused like one before it.
#[test]
fn options_after_the_task_are_options_in_both_parsers() {
    // (command-line words, the same as typed after /ralph-loop, prompt, max_iterations, promise)
    let cases: &[(&[&str], &str, &str, &str, &str)] = &[
        (
            &[
                "Fix it",
                "--max-iterations",
                "5",
                "--completion-promise",
                "DONE",
            ],
            "\"Fix it\" --max-iterations 5 --completion-promise DONE",
            "Fix it",
            "5",
            "\"DONE\"",
        ),
        (
            &[
                "--max-iterations",
                "4",
                "Fix",
                "it",
                "--completion-promise=DONE",
            ],
            "--max-iterations 4 Fix it --completion-promise=DONE",
            "Fix it",
            "4",
            "\"DONE\"",
        ),
        (
            &["--max-iterations", "3", "--", "add", "--name", "support"],
            "--max-iterations 3 -- add --name support",
            "add --name support",
            "3",
            "null",
        ),
    ];
    for (argv, typed, prompt, max, promise) in cases {
        for via_slash in [false, true] {
            let sb = sandbox();
            let out = if via_slash {
                sb.run_stdin(&["start", "--raw-arguments"], typed)
            } else {
                let mut all = vec!["start"];
                all.extend_from_slice(argv);
                sb.run(&all)
            };
            let what = format!("{argv:?} / {typed:?} (slash: {via_slash})");
            assert_success(&out, &what);
            let text = sb.read_loop("ralph");
            assert_eq!(body(&text), format!("{prompt}\n"), "{what}: {text}");
            assert_eq!(
                field(&text, "max_iterations").as_deref(),
                Some(*max),
                "{what}"
            );
            assert_eq!(
                field(&text, "completion_promise").as_deref(),
                Some(*promise),
                "{what}"
            );
        }
    }
    // A typo after the task: refused by both, nothing armed, the right option named.
    for (args, stdin) in [
        (vec!["start", "Fix it", "--max-iteration", "5"], ""),
        (vec!["start", "--raw-arguments"], "Fix it --max-iteration 5"),
        (vec!["run", "Fix it", "--max-iteration", "5"], ""),
    ] {
        let sb = sandbox();
        let out = sb.run_stdin(&args, stdin);
        assert_exit(&out, 2, &format!("{args:?} {stdin:?}"));
        assert!(
            stderr(&out).contains("--max-iterations"),
            "{}",
            describe(&out)
        );
        assert!(sb.live_loops().is_empty(), "{args:?}: nothing is armed");
    }
}

/// Issue 26 item 5: a promise written with its tags could never be said; it is refused with
/// the option named and the text to give instead, on the command line and after /ralph-loop.
#[test]
fn a_promise_with_its_tags_is_refused_with_the_fix() {
    for (args, stdin, option) in [
        (
            vec![
                "start",
                "Fix it",
                "--completion-promise",
                "<promise>DONE</promise>",
            ],
            "",
            "completion-promise",
        ),
        (
            vec!["start", "--raw-arguments"],
            "Fix it --completion-promise '<promise>DONE</promise>'",
            "completion-promise",
        ),
        (
            vec!["start", "Fix it", "--abort-promise", "<PROMISE>BLOCKED"],
            "",
            "abort-promise",
        ),
    ] {
        let sb = sandbox();
        let out = sb.run_stdin(&args, stdin);
        assert_exit(&out, 2, &format!("{args:?}"));
        let said = stderr(&out);
        let inner = if option == "abort-promise" {
            "BLOCKED"
        } else {
            "DONE"
        };
        assert!(
            said.contains(&format!("e.g. `--{option} {inner}`"))
                && said.contains("Nothing was armed"),
            "{}",
            describe(&out)
        );
        assert!(sb.live_loops().is_empty(), "{args:?}: nothing is armed");
    }
}

/// ARCHITECTURE.md: the binary writes no file itself; every write goes
/// through a core function (`safe_fs` and the core's own atomic writes).
#[test]
fn the_binary_writes_no_file_itself() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![dir.clone()];
    let mut seen = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        seen += 1;
        for call in [
            "fs::write",
            "File::create",
            "OpenOptions",
            "safe_fs::replace",
            "create_dir",
            "remove_file",
            "remove_dir",
            "fs::rename",
            "fs::copy",
        ] {
            assert!(!text.contains(call), "{} calls {call}", path.display());
        }
    }
    assert!(seen > 10, "read only {seen} files under {}", dir.display());
}
