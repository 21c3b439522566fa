//! Issue 11, "the first hour with ralph": every surprise a new user met,
//! pinned through the real binary. Each test runs ralph with its own HOME
//! and XDG_STATE_HOME (tests/support/project.rs).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::{describe, project, ralph_command, scrub};

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use project::{BIN, LOOP, Project, UserTerminal};
use serde_json::{Value, json};

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ralph(p: &Project, args: &[&str]) -> Output {
    p.ralph_in(args, p.root(), b"", &[])
}

fn ralph_stdin(p: &Project, args: &[&str], stdin: &str) -> Output {
    p.ralph_in(args, p.root(), stdin.as_bytes(), &[])
}

/// The hook's answer to a Stop of `session` with `reply`.
fn stop(p: &Project, session: &str, reply: &str) -> Value {
    let event = json!({"session_id": session, "cwd": p.root(), "last_assistant_message": reply});
    let o = p.ralph_in(
        &["hook", "stop"],
        p.root(),
        event.to_string().as_bytes(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let text = out(&o);
    if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

fn history(p: &Project) -> Vec<String> {
    std::fs::read_dir(p.path(".claude/ralph/history"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".md"))
                .collect()
        })
        .unwrap_or_default()
}

fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().trim_matches('"'))
}

// --- 3. slash-command options, as strict as the CLI ------------------------

#[test]
fn a_mistyped_slash_option_is_refused_with_the_suggestion_and_nothing_is_armed() {
    let p = Project::new();
    let o = ralph_stdin(
        &p,
        &["start", "--raw-arguments"],
        "\"Fix it\" --max-iteration 5 --completion-promise DONE",
    );
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(
        err(&o).contains("`--max-iteration` is not a ralph option (did you mean `--max-iterations`?); nothing was armed"),
        "{}",
        describe(&o)
    );
    assert!(!p.exists(LOOP));
    // The CLI refuses the same typo (clap), so both paths agree.
    let cli = ralph(&p, &["start", "--max-iteration", "5", "Fix it"]);
    assert_eq!(cli.status.code(), Some(2));
    assert!(err(&cli).contains("--max-iterations"), "{}", describe(&cli));
}

#[test]
fn a_duration_needs_a_unit_on_both_paths() {
    let p = Project::new();
    let cli = ralph(&p, &["start", "--max-duration", "2", "task"]);
    assert_eq!(cli.status.code(), Some(2), "{}", describe(&cli));
    assert!(
        err(&cli).contains("`2` has no unit; write e.g. 2m"),
        "{}",
        describe(&cli)
    );
    let slash = ralph_stdin(&p, &["start", "--raw-arguments"], "task --max-duration 2");
    assert_eq!(slash.status.code(), Some(2), "{}", describe(&slash));
    assert!(
        err(&slash).contains(
            "`--max-duration 2` has no unit; nothing was armed. Write e.g. `--max-duration 2m`"
        ),
        "{}",
        describe(&slash)
    );
    assert!(!p.exists(LOOP));
    let ok = ralph_stdin(&p, &["start", "--raw-arguments"], "task --max-duration 2m");
    assert!(ok.status.success(), "{}", describe(&ok));
    assert_eq!(field(&p.read(LOOP), "max_duration"), Some("2m"));
}

/// The options of `ralph start` (from clap, via `--help`) and the slash
/// command's table are the same list.
#[test]
fn slash_options_and_ralph_start_options_come_from_one_table() {
    let p = Project::new();
    let help = out(&ralph(&p, &["start", "--help"]));
    let mut from_clap: Vec<String> = help
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-h, ").unwrap_or(l);
            let name = l.strip_prefix("--")?;
            Some(name.split([' ', '=', '<', '[']).next()?.to_owned())
        })
        .filter(|n| !["help", "raw-arguments"].contains(&n.as_str()))
        .collect();
    from_clap.sort();
    from_clap.dedup();
    let mut from_table: Vec<String> = ralph_control::arguments::OPTIONS
        .iter()
        .map(|(k, _)| (*k).to_owned())
        .collect();
    from_table.sort();
    assert_eq!(from_clap, from_table, "{help}");
    assert!(from_clap.len() > 10, "{help}");
}

// --- 5. messages that were wrong -------------------------------------------

#[test]
fn a_missing_value_is_shown_with_a_value_that_fits() {
    let p = Project::new();
    let o = ralph_stdin(
        &p,
        &["start", "--raw-arguments"],
        "task --completion-promise",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("`--completion-promise` needs a value, e.g. `--completion-promise DONE`"),
        "{}",
        describe(&o)
    );
}

#[test]
fn run_with_flags_and_no_task_in_an_empty_folder_says_nothing_is_there() {
    let p = Project::new();
    let o = ralph(&p, &["run", "--completion-promise", "DONE"]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    let e = err(&o);
    assert!(!e.contains("resumed"), "{e}");
    assert!(
        e.contains("no loop named `ralph` here and no task given; nothing was armed"),
        "{e}"
    );
}

#[test]
fn an_active_name_says_whose_it_is_and_how_to_start_a_second() {
    let p = Project::new();
    assert!(
        ralph(&p, &["start", "--session-id", "S1", "first"])
            .status
            .success()
    );
    let o = ralph(&p, &["start", "--session-id", "S2", "second"]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    let e = err(&o);
    assert!(e.contains("owned by session S1"), "{e}");
    assert!(e.contains("give it another name: --name <other>"), "{e}");
}

#[test]
fn status_of_a_broken_file_keeps_its_intact_owner() {
    let p = Project::new();
    assert!(
        ralph(&p, &["start", "--session-id", "S1", "task"])
            .status
            .success()
    );
    let text = p.read(LOOP).replace("iteration: 1", "iteration: one");
    p.write(LOOP, &text);
    let o = ralph(&p, &["status"]);
    let s = out(&o);
    assert!(s.contains("owner S1"), "{}", describe(&o));
    assert!(!s.contains("unclaimed"), "{s}");
}

#[test]
fn cancel_pause_resume_with_nothing_to_do_say_so_and_the_command_files_claim_nothing() {
    let p = Project::new();
    let c = ralph_stdin(&p, &["cancel", "--raw-arguments"], "");
    assert_eq!(out(&c).trim(), "No active loop to cancel.");
    let pa = ralph_stdin(&p, &["pause", "--raw-arguments"], "");
    assert_eq!(
        out(&pa).trim(),
        "Nothing to pause: no matching loop is active."
    );
    let r = ralph_stdin(&p, &["resume", "--raw-arguments"], "");
    assert_eq!(
        out(&r).trim(),
        "Nothing to resume: no matching loop is paused."
    );
    // The skills run nothing and are granted nothing (issue 25 item 4): the UserPromptSubmit
    // hook answers them; their text reaches the model only when that hook did not run, and
    // then claims only that.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugin/skills");
    for name in [
        "ralph-cancel",
        "ralph-pause",
        "ralph-resume",
        "ralph-status",
        "ralph-init",
        "ralph-loop",
        "ralph-say",
    ] {
        let text = std::fs::read_to_string(dir.join(name).join("SKILL.md")).unwrap();
        for grant in ["allowed-tools", "```!", "!`", "model:"] {
            assert!(!text.contains(grant), "{name} has `{grant}`: {text}");
        }
        for claim in [
            "The loop was",
            "The loop is",
            "loop was cancelled",
            "is paused by",
        ] {
            assert!(!text.contains(claim), "{name}: {text}");
        }
        assert!(
            text.contains("hooks are not active in this session"),
            "{name}"
        );
    }
}

// --- 4. the user sees every decision that matters --------------------------

#[test]
fn the_task_first_line_shows_in_status_log_and_statusline_escaped() {
    let p = Project::new();
    let task = "Fix the \u{1b}[31mlogin\nsecond line";
    assert!(
        ralph_stdin(&p, &["start", "--session-id", "S1"], task)
            .status
            .success()
    );
    let s = out(&ralph(&p, &["status"]));
    assert!(s.contains("  task: Fix the \\x1b[31mlogin\n"), "{s}");
    assert!(!s.contains('\u{1b}') && !s.contains("second line"), "{s}");
    let l = out(&ralph(&p, &["log"]));
    assert!(
        l.starts_with("Loop `ralph` (active) · task: Fix the \\x1b[31mlogin\n"),
        "{l}"
    );
    let line = p.ralph_in(
        &["statusline"],
        p.root(),
        json!({"session_id": "S1", "cwd": p.root()})
            .to_string()
            .as_bytes(),
        &[],
    );
    let line = out(&line);
    assert!(
        line.contains("Fix the \\x1b[31mlogin") && !line.contains('\u{1b}'),
        "{line}"
    );
}

#[test]
fn a_refused_promise_is_shown_to_the_user_with_the_exit_code() {
    let p = Project::new();
    assert!(
        ralph(
            &p,
            &[
                "start",
                "--session-id",
                "S1",
                "--completion-promise",
                "DONE",
                "--verify",
                "exit 3",
                "task"
            ]
        )
        .status
        .success()
    );
    let answer = stop(&p, "S1", "<promise>DONE</promise>");
    assert_eq!(answer["decision"], "block", "{answer}");
    let message = answer["systemMessage"].as_str().unwrap();
    assert!(
        message.contains("promise refused: --verify failed (exit 3)"),
        "{message}"
    );
    let reason = answer["reason"].as_str().unwrap();
    assert!(
        reason.contains("failed (exit 3)") && reason.contains("It printed nothing."),
        "{reason}"
    );
    assert!(!reason.contains("Last lines of its output"), "{reason}");
    // `ralph log` keeps one line per stop (after its header).
    let log = out(&ralph(&p, &["log"]));
    assert_eq!(log.lines().count(), 2, "{log}");
}

// --- 2. a loop never outlives its driver unnoticed --------------------------

#[test]
fn a_run_that_cannot_start_its_agent_ends_the_loop_it_armed_as_failed() {
    let p = Project::new();
    let o = ralph(&p, &["run", "--agent", "no-such-agent-7f3a", "task"]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert!(
        err(&o).contains("was ended as failed at iteration 1, so no other session is fed its task"),
        "{}",
        describe(&o)
    );
    assert!(!p.exists(LOOP));
    assert!(history(&p).iter().any(|n| n.ends_with("-ralph.md")));
    let record = p.read(&format!(".claude/ralph/history/{}", history(&p)[0]));
    assert_eq!(field(&record, "outcome"), Some("failed"));
    // The next unrelated session is not fed the task.
    assert_eq!(stop(&p, "unrelated", "hi"), Value::Null);
}

#[test]
fn a_run_that_cannot_start_its_agent_hands_a_taken_over_loop_back_as_it_was() {
    let p = Project::new();
    assert!(
        ralph(&p, &["start", "--session-id", "S1", "task"])
            .status
            .success()
    );
    let o = ralph(&p, &["run", "--agent", "no-such-agent-7f3a"]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert!(
        err(&o).contains("was handed back to S1 as it was"),
        "{}",
        describe(&o)
    );
    assert_eq!(field(&p.read(LOOP), "session_id"), Some("S1"));
}

/// A scripted agent: prints `.agent/reply-N` for its Nth call (or the last).
fn agent(p: &Project, replies: &[&str]) -> String {
    p.write(
        ".agent/agent.sh",
        "n=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n; cat >/dev/null\n\
         [ -f .agent/hold ] && while [ ! -f .agent/go ]; do sleep 0.05; done\n\
         if [ -f .agent/reply-$n ]; then cat .agent/reply-$n; else cat .agent/reply-last; fi\n",
    );
    for (i, r) in replies.iter().enumerate() {
        p.write(&format!(".agent/reply-{}", i + 1), r);
    }
    p.write(".agent/reply-last", replies.last().unwrap());
    "sh .agent/agent.sh".into()
}

fn calls(p: &Project) -> u32 {
    std::fs::read_to_string(p.path(".agent/n")).map_or(0, |n| n.trim().parse().unwrap())
}

#[test]
fn a_closed_stdout_does_not_end_the_run() {
    let p = Project::new();
    let agent = agent(&p, &["working", "working more", "<promise>DONE</promise>"]);
    let script = format!(
        "'{BIN}' run --agent '{agent}' --completion-promise DONE --max-iterations 5 task | true; sleep 0"
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script]).current_dir(p.root());
    for (k, v) in p.user_env() {
        cmd.env(k, v);
    }
    let status = scrub(&mut cmd).envs(p.user_env()).status().unwrap();
    assert!(status.success());
    // `| true` closes the pipe at once; the run must still drive to the promise.
    let deadline = Instant::now() + Duration::from_secs(120);
    while calls(&p) < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    while p.exists(LOOP) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(calls(&p), 3);
    let record = p.read(&format!(".claude/ralph/history/{}", history(&p)[0]));
    assert_eq!(field(&record, "outcome"), Some("completed"));
}

#[test]
fn a_killed_run_is_reported_by_status_and_the_next_run_takes_it_over() {
    let p = Project::new();
    let agent = agent(&p, &["working", "<promise>DONE</promise>"]);
    p.write(".agent/hold", "");
    let mut cmd = ralph_command();
    cmd.args([
        "run",
        "--agent",
        &agent,
        "--completion-promise",
        "DONE",
        "task",
    ])
    .current_dir(p.root())
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    for (k, v) in p.user_env() {
        cmd.env(k, v);
    }
    let mut run = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while calls(&p) < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    run.kill().unwrap(); // SIGKILL: no chance to hand anything back
    run.wait().unwrap();
    let owner = field(&p.read(LOOP), "session_id").unwrap().to_owned();
    assert!(
        owner.starts_with(&format!("ralph-run-{}-", run.id())),
        "{owner}"
    );
    let s = out(&ralph(&p, &["status"]));
    assert!(
        s.contains(&format!("its driver {owner} is no longer running"))
            && s.contains("ralph run --name ralph"),
        "{s}"
    );
    let json = out(&ralph(&p, &["status", "--json"]));
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["loops"][0]["driver_gone"], true, "{json}");
    // Let the orphaned agent finish, then take the loop over.
    p.write(".agent/go", "");
    std::fs::remove_file(p.path(".agent/hold")).unwrap();
    let o = ralph(&p, &["run", "--agent", &agent]);
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        out(&o).contains(&format!(
            "its driver {owner} had ended without handing it back"
        )),
        "{}",
        describe(&o)
    );
}

#[test]
fn a_killed_run_gives_a_taken_over_loop_back_to_its_session_at_its_next_stop() {
    let p = Project::new();
    assert!(
        ralph(&p, &["start", "--session-id", "S1", "task"])
            .status
            .success()
    );
    let agent = agent(&p, &["working"]);
    p.write(".agent/hold", "");
    let mut cmd = ralph_command();
    cmd.args(["run", "--agent", &agent])
        .current_dir(p.root())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in p.user_env() {
        cmd.env(k, v);
    }
    let mut run = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while calls(&p) < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // While the run lives, S1's stops leave the loop to it.
    assert_eq!(stop(&p, "S1", "hi"), Value::Null);
    run.kill().unwrap();
    run.wait().unwrap();
    p.write(".agent/go", "");
    let owner = field(&p.read(LOOP), "session_id").unwrap().to_owned();
    assert!(owner.ends_with(":S1"), "{owner}");
    let s = out(&ralph(&p, &["status"]));
    assert!(
        s.contains("is no longer running; session S1 gets it back at its next stop"),
        "{s}"
    );
    // An unrelated session is not fed the task; S1 is, and owns it again.
    assert_eq!(stop(&p, "unrelated", "hi"), Value::Null);
    let answer = stop(&p, "S1", "back");
    assert_eq!(answer["decision"], "block", "{answer}");
    assert_eq!(field(&p.read(LOOP), "session_id"), Some("S1"));
}

// --- 1. ralph run reads the agent's permission denials ---------------------

const DENIED: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"I need permission to write notes.txt.","permission_denials":[{"tool_name":"Write","tool_use_id":"t1","tool_input":{"file_path":"notes.txt","content":"x"}}],"usage":{"input_tokens":10,"output_tokens":5}}"#;

#[test]
fn denials_show_on_the_iteration_line_and_the_same_denial_twice_ends_the_run_as_denied() {
    let p = Project::new();
    let agent = agent(&p, &[DENIED]);
    let o = ralph(
        &p,
        &[
            "run",
            "--agent",
            &agent,
            "--completion-promise",
            "DONE",
            "--max-iterations",
            "10",
            "write notes",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
    let s = out(&o);
    assert!(
        s.contains("✓ iteration 1/10 done") && s.contains("⚠ denied: Write notes.txt"),
        "{s}"
    );
    assert!(
        s.contains("stopped: the agent was denied permission"),
        "{s}"
    );
    assert!(s.contains("--permission-mode acceptEdits"), "{s}");
    assert_eq!(calls(&p), 2, "{s}");
    let record = p.read(&format!(".claude/ralph/history/{}", history(&p)[0]));
    assert_eq!(field(&record, "outcome"), Some("denied"));
}

#[test]
fn permission_mode_reaches_the_default_agent_and_is_refused_for_others() {
    let p = Project::new();
    // A `claude` on PATH that records its arguments and gives the promise (outside the
    // project: ralph takes no program from a folder the agent writes).
    let bin = p.home().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("claude"),
        "#!/bin/sh\necho \"$@\" > .agent-args\ncat >/dev/null\necho '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"<promise>DONE</promise>\"}'\n",
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("claude"))
        .status()
        .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let o = p.ralph_in(
        &[
            "run",
            "--permission-mode",
            "acceptEdits",
            "--completion-promise",
            "DONE",
            "task",
        ],
        p.root(),
        b"",
        &[("PATH", &path)],
    );
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(
        p.read(".agent-args").trim(),
        "-p --output-format json --permission-mode acceptEdits"
    );
    let other = ralph(
        &p,
        &[
            "run",
            "--permission-mode",
            "acceptEdits",
            "--agent",
            "codex",
            "task",
        ],
    );
    assert_eq!(other.status.code(), Some(2), "{}", describe(&other));
    assert!(
        err(&other).contains("put the flag into the --agent command"),
        "{}",
        describe(&other)
    );
    let help = out(&ralph(&p, &["run", "--help"]));
    assert!(
        help.contains("--permission-mode acceptEdits") && help.contains("unattended"),
        "{help}"
    );
}

/// Issue 26 item 8: the corrupt-state advice works as written: fix the file, move it back,
/// `ralph adopt --name NAME`, and the loop runs again.
#[test]
fn the_corrupt_state_advice_brings_the_loop_back() {
    let p = Project::new();
    assert!(
        ralph(
            &p,
            &[
                "start",
                "--session-id",
                "S1",
                "--max-iterations",
                "9",
                "task"
            ]
        )
        .status
        .success()
    );
    let good = p.read(LOOP);
    p.write(LOOP, &good.replace("iteration: 1", "iteration: one"));
    let answer = stop(&p, "S1", "working");
    let notice = answer["systemMessage"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        notice.contains("fix it, move it back, then `ralph adopt --name ralph`"),
        "{notice}"
    );
    assert!(!p.exists(LOOP), "moved aside");
    // The user follows the advice.
    p.write(LOOP, &good);
    assert!(
        stop(&p, "S1", "working").get("decision").is_none(),
        "inert until adopted"
    );
    let adopted = p.ralph_on_terminal(&["adopt", "--name", "ralph", "--yes"], "");
    assert!(adopted.status.success(), "{}", describe(&adopted));
    assert_eq!(
        stop(&p, "S1", "working")["decision"],
        "block",
        "it runs again"
    );
}

// --- issue 48: the first hour, round three ---------------------------------

/// The hook's answer to a prompt of `session`, as JSON (Null when silent).
fn prompt(p: &Project, session: &str, text: &str) -> Value {
    let event = json!({"session_id": session, "cwd": p.root(), "hook_event_name": "UserPromptSubmit", "prompt": text});
    let o = p.ralph_in(
        &["hook", "prompt"],
        p.root(),
        event.to_string().as_bytes(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let text = out(&o);
    if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

/// Items 1 and 8: `ralph run --help` says what Ctrl-C and `--notify-url` do now.
#[test]
fn run_help_says_ctrl_c_pauses_and_https_needs_no_curl() {
    let p = Project::new();
    let help = out(&ralph(&p, &["run", "--help"]));
    assert!(
        help.contains("Ctrl-C stops the agent and pauses the loop (exit 130)"),
        "{help}"
    );
    assert!(!help.contains("records the loop as cancelled"), "{help}");
    assert!(help.contains("(http:// or https://)"), "{help}");
    assert!(!help.contains("curl"), "{help}");
}

/// Item 5: `/ralph-resume --add-iterations` shows its glyph once.
#[test]
fn resume_with_more_iterations_shows_one_glyph() {
    let p = Project::new();
    let armed = ralph(
        &p,
        &[
            "start",
            "--session-id",
            "S1",
            "--max-iterations",
            "1",
            "task",
        ],
    );
    assert!(armed.status.success(), "{}", describe(&armed));
    let ended = stop(&p, "S1", "working");
    assert!(!p.exists(LOOP), "ended at its limit: {ended}");
    let answer = prompt(&p, "S1", "/ralph-resume --add-iterations 2");
    let told = answer["systemMessage"].as_str().unwrap_or_default();
    assert!(
        told.starts_with("▶ Loop `ralph` is armed again at iteration"),
        "{answer}"
    );
    assert!(!told.contains("▶ ▶"), "{answer}");
}

fn git(root: &Path, args: &[&str]) {
    let o = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", describe(&o));
}

/// A git project with one commit holding `tests/test_calc.py` and `src/calc.py`.
fn calc_project() -> Project {
    let p = Project::new();
    git(p.root(), &["init", "-q", "-b", "main"]);
    p.write(".gitignore", ".claude/\n");
    p.write("tests/test_calc.py", "assert True\n");
    p.write("src/calc.py", "x = 1\n");
    git(p.root(), &["add", "-A"]);
    git(p.root(), &["commit", "-qm", "start"]);
    p
}

/// Items 2 and 3: `--protect`/`--scope` are on the arming line, a refusal
/// by them is the user's "promise refused" (a scope breach included), and a
/// loop they end is told as such, with the one thing to do.
#[test]
fn a_loop_ended_by_protect_says_so_and_asks_to_put_the_file_back() {
    let p = calc_project();
    let armed = prompt(
        &p,
        "S1",
        "/ralph-loop fix it --completion-promise DONE --protect tests/** --scope src/**",
    );
    let line = armed["systemMessage"].as_str().unwrap_or_default();
    assert!(
        line.contains(
            "it is refused while a protected path (tests/**) changes or a path outside the scope (src/**) changes"
        ),
        "{armed}"
    );
    p.write("tests/test_calc.py", "assert 1\n");
    p.write("NOTES.md", "stray\n");
    let first = stop(&p, "S1", "<promise>DONE</promise>");
    let told = first["systemMessage"].as_str().unwrap_or_default();
    assert!(
        told.contains("⚠ promise refused by --protect/--scope: protected paths changed (tests/test_calc.py); paths changed outside the scope src/** (NOTES.md, tests/test_calc.py)"),
        "{first}"
    );
    stop(&p, "S1", "<promise>DONE</promise>");
    let last = stop(&p, "S1", "<promise>DONE</promise>");
    let ended = last["systemMessage"].as_str().unwrap_or_default();
    assert!(
        ended.contains("stopped: the promise kept being refused: a claim of done was refused 3 times while --protect/--scope was broken"),
        "{last}"
    );
    assert!(!ended.contains("the check kept failing"), "{last}");
    let handover = history(&p)
        .into_iter()
        .find(|n| n.ends_with(".handover.md"))
        .expect("a hand-over");
    let text = p.read(&format!(".claude/ralph/history/{handover}"));
    assert!(
        text.contains("Put the protected paths named above back as they were at arming"),
        "{text}"
    );
    for wrong in ["run the check by hand", "time(s)", "--verify gate refused"] {
        assert!(!text.contains(wrong), "{wrong}: {text}");
    }
}

/// Item 4: the counts of `ralph run`'s last line and of the gate's receipt,
/// singular and plural.
#[test]
fn run_and_receipt_counts_agree_with_one_and_two() {
    for (replies, files, ran, changed) in [
        (
            &["<promise>DONE</promise>"][..],
            "echo 2 > src/calc.py",
            "Ran 1 fresh iteration in",
            "1 changed path with --protect held",
        ),
        (
            &["working", "<promise>DONE</promise>"][..],
            "echo 2 > src/calc.py; echo n > src/notes.py",
            "Ran 2 fresh iterations in",
            "2 changed paths with --protect held",
        ),
    ] {
        let p = calc_project();
        let agent = agent(&p, replies);
        p.write(
            ".agent/agent.sh",
            &format!("{files}\n{}", p.read(".agent/agent.sh")),
        );
        p.write(".gitignore", ".claude/\n.agent/\n");
        git(
            p.root(),
            &["commit", "-qam", "the agent's files are ignored"],
        );
        let o = ralph(
            &p,
            &[
                "run",
                "--agent",
                &agent,
                "--completion-promise",
                "DONE",
                "--verify",
                "true",
                "--protect",
                "tests/**",
                "task",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
        let said = out(&o);
        assert!(said.contains(ran), "{ran}: {said}");
        assert!(!said.contains("(s)"), "{said}");
        let status = out(&ralph(&p, &["status"]));
        assert!(status.contains(changed), "{changed}: {status}");
        let receipt = out(&ralph(&p, &["receipt"]));
        assert!(receipt.contains("(0 bytes)"), "{receipt}");
    }
}

/// Item 13: an end at the iteration limit says how to go on, in a session
/// and after `ralph run`.
#[test]
fn an_end_at_the_limit_says_how_to_add_iterations() {
    let p = Project::new();
    let armed = ralph(
        &p,
        &[
            "start",
            "--session-id",
            "S1",
            "--max-iterations",
            "2",
            "task",
        ],
    );
    assert!(armed.status.success(), "{}", describe(&armed));
    stop(&p, "S1", "working");
    let ended = stop(&p, "S1", "working");
    let told = ended["systemMessage"].as_str().unwrap_or_default();
    assert!(
        told.contains("To go on: `/ralph-resume --add-iterations 2` in this session"),
        "{ended}"
    );
    let p = Project::new();
    let agent = agent(&p, &["working"]);
    let o = ralph(
        &p,
        &["run", "--agent", &agent, "--max-iterations", "1", "task"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
    assert!(
        out(&o).contains(
            "To go on: `ralph resume --name ralph --add-iterations 1`, then `ralph run --name ralph`."
        ),
        "{}",
        describe(&o)
    );
}

/// Items 6 and 7: `--add-cost` on a loop with no dollar budget is refused,
/// not dropped; a `ralph run` loop given more says `ralph run` drives it
/// again, and that run does not call its context newly fresh.
#[test]
fn resume_of_a_run_loop_refuses_a_missing_budget_and_says_who_drives_it() {
    let p = Project::new();
    let agent = agent(&p, &["working", "<promise>DONE</promise>"]);
    // Raising a bound is the user's own step: on a terminal open before the loop began.
    let mut terminal = UserTerminal::open(&p);
    let o = ralph(
        &p,
        &[
            "run",
            "--agent",
            &agent,
            "--max-iterations",
            "1",
            "--completion-promise",
            "DONE",
            "task",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
    let (code, both) = terminal.ralph(
        &["resume", "--add-iterations", "1", "--add-cost", "1"],
        "y\n",
    );
    assert_ne!(code, 0, "{both}");
    assert!(
        both.contains("has no such bound for --add-cost to raise (its limits: 1 iteration); nothing was raised"),
        "{both}"
    );
    assert!(!p.exists(LOOP), "nothing was armed");
    let (code, more) = terminal.ralph(&["resume", "--add-iterations", "1"], "y\n");
    assert_eq!(code, 0, "{more}");
    assert!(
        more.contains("iterations 1 → 2. `ralph run --name ralph` drives it again."),
        "{more}"
    );
    let again = ralph(&p, &["run", "--agent", &agent, "--name", "ralph"]);
    assert_eq!(again.status.code(), Some(0), "{}", describe(&again));
    assert!(
        out(&again).contains("Resuming loop `ralph` at iteration 2"),
        "{}",
        describe(&again)
    );
    assert!(
        !out(&again).contains("fresh context from now on"),
        "{}",
        describe(&again)
    );
    // Item 10: the report marks the turn after the resume.
    let report = ralph(&p, &["report", "-o", "r.html"]);
    assert!(report.status.success(), "{}", describe(&report));
    assert!(p.read("r.html").contains("end (after a resume)"));
}

/// Item 15: `/ralph-loop`'s hint in the client's menu is the one made from
/// the option table.
#[test]
fn the_ralph_loop_hint_is_made_from_the_option_table() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugin/skills/ralph-loop/SKILL.md");
    let text = std::fs::read_to_string(path).unwrap();
    let hint = ralph_control::arguments::argument_hint();
    let line = text
        .lines()
        .find(|l| l.starts_with("argument-hint:"))
        .unwrap();
    assert_eq!(line, format!("argument-hint: \"{hint}\""));
}

/// Item 14: `ralph rollback --list` shows the checkpoints, iterations in
/// order and then the trees a rollback replaced.
#[test]
fn rollback_list_shows_the_checkpoints_in_order() {
    let p = calc_project();
    let agent = agent(&p, &["working", "<promise>DONE</promise>"]);
    p.write(".gitignore", ".claude/\n.agent/\n");
    git(p.root(), &["commit", "-qam", "ignore the agent"]);
    let o = ralph(
        &p,
        &[
            "run",
            "--agent",
            &agent,
            "--completion-promise",
            "DONE",
            "task",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let listed = ralph(&p, &["rollback", "--list"]);
    assert!(listed.status.success(), "{}", describe(&listed));
    let lines: Vec<String> = out(&listed)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_owned())
        .collect();
    assert!(
        out(&listed).starts_with(
            "Checkpoints of loop `ralph` (`ralph rollback --to N --name ralph` puts one back):"
        ),
        "{}",
        describe(&listed)
    );
    assert_eq!(lines[1..], ["1", "2"], "{}", describe(&listed));
    let back = ralph(&p, &["rollback", "--to", "1"]);
    assert!(back.status.success(), "{}", describe(&back));
    let again = out(&ralph(&p, &["rollback", "--list"]));
    let labels: Vec<&str> = again
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(labels, ["1", "2", "undo-1"], "{again}");
}

/// Item 18: `ralph status` says which `ralph` the hooks run, as the last
/// session start recorded it.
#[test]
fn status_says_which_binary_the_hooks_run() {
    let p = Project::new();
    let before = out(&ralph(&p, &["status"]));
    assert!(
        before.contains("Hooks: no session start has run ralph's hooks on this machine yet"),
        "{before}"
    );
    let event = json!({"session_id": "S1", "cwd": p.root(), "hook_event_name": "SessionStart", "source": "startup"});
    let o = p.ralph_in(
        &["hook", "session-start"],
        p.root(),
        event.to_string().as_bytes(),
        &[],
    );
    assert!(o.status.success(), "{}", describe(&o));
    let after = out(&ralph(&p, &["status"]));
    let bin = std::fs::canonicalize(BIN).unwrap();
    assert!(
        after.contains(&format!(
            "Hooks: the last session start ran {} (ralph {}) (this one).",
            bin.display(),
            env!("CARGO_PKG_VERSION")
        )),
        "{after}"
    );
}
