//! `ralph run` with its default agent, the real Claude Code client in print
//! mode, against the scripted mock API (issue 11): a model that writes a
//! file is refused without permission (ralph shows the denial and ends the
//! run as `denied`), and succeeds with `--permission-mode acceptEdits`.
//!
//! The client is found as in tests/e2e.rs; when it is missing the tests
//! are reported as ignored, except on CI (`CI` set) where they fail.
//! Unix only: the client is put on PATH through a symbolic link
//! (`Sandbox::ralph_with_client`).
#![cfg(unix)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::{client, describe, mock_api, sandbox_or_skip};

use std::path::Path;

use mock_api::{MockApi, Reply};

/// Every iteration: the model asks to write notes.txt, then (after the
/// tool result) says it is done with the promise.
fn writer_script(project: &Path) -> Vec<Reply> {
    let target = project.join("notes.txt");
    let target = target.to_str().unwrap();
    let mut script = Vec::new();
    for _ in 0..3 {
        script.push(Reply::write("Writing the notes.", target, "three notes\n"));
        script.push(Reply::text("Wrote notes.txt.\n<promise>DONE</promise>"));
    }
    script
}

#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn a_refused_write_is_shown_and_ends_the_run_as_denied_then_accept_edits_completes() {
    let sandbox = sandbox_or_skip!("e2e_run denied then acceptEdits");
    let project = sandbox.project().to_path_buf();
    // `test -f` checks the file really was written: a promise without it is refused.
    let task = [
        "--completion-promise",
        "DONE",
        "--verify",
        "test -f notes.txt",
        "--max-iterations",
        "5",
        "Write three notes into notes.txt",
    ];

    let api = MockApi::start(writer_script(&project));
    let mut args = vec!["run"];
    args.extend_from_slice(&task);
    let denied = sandbox.ralph_with_client(&api, &args, &[]);
    let said = String::from_utf8_lossy(&denied.stdout).into_owned();
    assert_eq!(denied.status.code(), Some(3), "{}", describe(&denied));
    assert!(!project.join("notes.txt").exists());
    let target = project.join("notes.txt").display().to_string();
    assert!(
        said.contains(&format!("⚠ denied: Write {target}")),
        "{}",
        describe(&denied)
    );
    assert!(
        said.contains("stopped: the agent was denied permission")
            && said.contains("--permission-mode acceptEdits"),
        "{}",
        describe(&denied)
    );

    let api = MockApi::start(writer_script(&project));
    let mut args = vec!["run", "--permission-mode", "acceptEdits"];
    args.extend_from_slice(&task);
    let done = sandbox.ralph_with_client(&api, &args, &[]);
    assert!(done.status.success(), "{}", describe(&done));
    assert_eq!(
        std::fs::read_to_string(project.join("notes.txt")).unwrap(),
        "three notes\n"
    );
    let said = String::from_utf8_lossy(&done.stdout);
    if std::env::var_os("RALPH_SHOW_RUNS").is_some() {
        eprintln!("{}\n{}", describe(&denied), describe(&done));
    }
    assert!(!said.contains("denied"), "{}", describe(&done));
    assert!(said.contains("completed"), "{}", describe(&done));
}

/// A typo in `/ralph-loop`'s options: nothing is armed, and ralph's refusal
/// (with its suggestion) reaches the user.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn a_mistyped_slash_option_arms_nothing_and_the_refusal_reaches_the_user() {
    let sandbox = sandbox_or_skip!("e2e_run slash typo");
    let api = MockApi::start(vec![Reply::text("Noted.")]);
    let run = sandbox.claude(
        &api,
        "/ralph:ralph-loop \"Fix it\" --max-iteration 5 --completion-promise DONE",
        &[],
    );
    // The prompt hook refuses it before the model (a block: no model turn), and the
    // client shows the refusal to the user.
    assert!(run.status.success(), "{}", run.describe());
    let shown: Vec<String> = run
        .events()
        .iter()
        .filter(|e| e["prompt_submit_outcome"]["kind"] == "blocked_by_hook")
        .filter_map(|e| e["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        shown.len() == 1 && shown[0].contains(
            "ralph: `--max-iteration` is not a ralph option (did you mean `--max-iterations`?); nothing was armed"
        ),
        "{}",
        run.describe()
    );
    assert_eq!(api.turns().len(), 0, "{}", api.describe());
    assert!(!sandbox.state_file().exists());
}

/// The facts docs/decisions/stop-continuation.md rests on, pinned for the
/// client in package.json: both answers continue the turn and show the
/// `systemMessage`; `decision: block` reaches the model as a user message
/// "Stop hook feedback:" and raises the "stop hook reported a problem"
/// notice, `additionalContext` reaches it as a system reminder, no notice.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn stop_continuations_block_and_additional_context_as_the_client_shows_them() {
    let sandbox = sandbox_or_skip!("e2e_run stop continuations");
    for (label, answer) in [
        (
            "block",
            r#"{"decision":"block","reason":"TASK AGAIN","systemMessage":"STATUS LINE"}"#,
        ),
        (
            "context",
            r#"{"hookSpecificOutput":{"hookEventName":"Stop","additionalContext":"TASK AGAIN"},"systemMessage":"STATUS LINE"}"#,
        ),
    ] {
        let dir = sandbox.project().join(label);
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("hook.sh");
        // Continue once, then let the stop through.
        std::fs::write(
            &script,
            format!(
                "cat >/dev/null; if [ ! -f {0}/done ]; then touch {0}/done; echo '{1}'; fi\n",
                dir.display(),
                answer
            ),
        )
        .unwrap();
        let settings = format!(
            r#"{{"hooks":{{"Stop":[{{"hooks":[{{"type":"command","command":"sh {}"}}]}}]}}}}"#,
            script.display()
        );
        let api = MockApi::start(vec![
            Reply::text("first reply"),
            Reply::text("second reply"),
        ]);
        let run = sandbox.claude(&api, "hello", &["--settings", &settings]);
        let turns = api.turns();
        assert_eq!(turns.len(), 2, "{label}: {}", run.describe());
        let fed = turns[1].last_user_text();
        let shown = |needle: &str| run.stdout.lines().any(|l| l.contains(needle));
        assert!(
            shown("\"content\":\"Stop says: STATUS LINE\""),
            "{label}: {}",
            run.describe()
        );
        if label == "block" {
            assert_eq!(fed.trim_end(), "Stop hook feedback:\nTASK AGAIN");
            assert!(shown("stop hook reported a problem"), "{}", run.describe());
        } else {
            assert_eq!(
                fed.trim_end(),
                "<system-reminder>\nStop hook additional context: TASK AGAIN\n</system-reminder>"
            );
            assert!(!shown("stop hook reported a problem"), "{}", run.describe());
        }
    }
}

/// Prints a client run as the terminal would show it (the walkthrough's transcript).
fn show(title: &str, run: &client::Run) {
    println!("\n$ claude -p '{title}'");
    for e in run.events() {
        match (e["type"].as_str(), e["subtype"].as_str()) {
            (Some("assistant"), _) => {
                for block in e["message"]["content"].as_array().into_iter().flatten() {
                    if let Some(t) = block["text"].as_str() {
                        println!("● {t}");
                    }
                    if block["type"] == "tool_use" {
                        println!(
                            "● {}({})",
                            block["name"].as_str().unwrap_or(""),
                            block["input"]["command"].as_str().unwrap_or("")
                        );
                    }
                }
            }
            (Some("user"), _) => {
                if let Some(t) = e["message"]["content"][0]["text"].as_str() {
                    println!("  [to the model] {}", t.lines().next().unwrap_or(""));
                }
            }
            (Some("system"), Some("informational")) => {
                println!("  ⎿ {}", e["content"].as_str().unwrap_or(""));
            }
            (Some("system"), Some("notification")) => {
                println!("  [notice] {}", e["text"].as_str().unwrap_or(""));
            }
            (Some("result"), _) => println!("[result] {}", e["result"].as_str().unwrap_or("")),
            _ => {}
        }
    }
}

/// The README's walk-through, command by command, in a scratch cargo
/// project, printed as a user of print mode sees it (docs/walkthrough.md).
/// Run by hand: `cargo test -p ralph-loop --test integration e2e_run::walkthrough -- --ignored --nocapture`.
#[test]
#[ignore = "prints a transcript for docs/walkthrough.md"]
fn walkthrough() {
    let sandbox = sandbox_or_skip!("walkthrough");
    let project = sandbox.project();
    // `--verify "cargo test"` runs with the sandbox's HOME: lend it this user's toolchain.
    if let Some(real) = std::env::var_os("HOME") {
        for dir in [".rustup", ".cargo"] {
            let _ = std::os::unix::fs::symlink(
                Path::new(&real).join(dir),
                sandbox.home.path().join(dir),
            );
        }
    }
    std::fs::write(
        project.join("Cargo.toml"),
        "[package]\nname = \"scratch\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(
        project.join("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 { a - b }\n#[test]\nfn adds() { assert_eq!(add(2, 2), 4); }\n",
    )
    .unwrap();
    // ralph's commands are answered by the prompt hook: no model turn.
    let api = MockApi::start(vec![Reply::text("(no model turn is expected)")]);
    show(
        "/ralph:ralph-init",
        &sandbox.claude(&api, "/ralph:ralph-init", &[]),
    );
    println!("  [model requests] {}", api.turns().len());
    // The user's step: the example stories replaced by theirs (the example is refused).
    std::fs::write(
        project.join("ralph/prd.json"),
        r#"{
  "project": "scratch",
  "branchName": "ralph/add",
  "description": "Fix the adder.",
  "userStories": [
    {
      "id": "US-001",
      "title": "add adds",
      "description": "add(2, 2) is 4.",
      "acceptanceCriteria": ["cargo test passes"],
      "priority": 1,
      "passes": false,
      "verify": "cargo test",
      "notes": ""
    }
  ]
}
"#,
    )
    .unwrap();
    println!(
        "\n$ $EDITOR ralph/prd.json   # one story, US-001 \"add adds\", verify \"cargo test\""
    );
    let mark = "sed -i 's/\"passes\": false/\"passes\": true/' ralph/prd.json";
    let api = MockApi::start(vec![
        Reply::text("I read ralph/PROMPT.md; the current story is US-001, add adds."),
        Reply::bash("US-001 looks done; marking it as passing.", mark),
        Reply::text("US-001 is marked as passing."),
        Reply::bash(
            "cargo test fails: add subtracts. Fixing it, then marking US-001 again.",
            format!("sed -i 's/a - b/a + b/' src/lib.rs && {mark}"),
        ),
        Reply::text("Fixed; US-001 passes."),
    ]);
    let flags = "--prd \"Follow ralph/PROMPT.md\" --check \"cargo check\" --verify \"cargo test\" --max-cost 5";
    // The story commands are shown first, and nothing is armed until they are approved.
    let prompt = format!("/ralph:ralph-loop {flags}");
    let asked = sandbox.claude(&api, &prompt, &[]);
    show(&prompt, &asked);
    let code = asked
        .events()
        .iter()
        .find_map(|e| e["result"].as_str().and_then(crate::prd::approval_code))
        .expect("the approval code");
    let prompt = format!("/ralph:ralph-loop --approve-commands {code} {flags}");
    show(
        &prompt,
        &sandbox.claude(&api, &prompt, &["--allowedTools", "Bash(sed:*)"]),
    );
    for cmd in [
        "/ralph:ralph-status",
        "/ralph:ralph-pause",
        "/ralph:ralph-cancel",
    ] {
        let api = MockApi::start(vec![Reply::text("(no model turn is expected)")]);
        show(cmd, &sandbox.claude(&api, cmd, &[]));
        println!("  [model requests] {}", api.turns().len());
    }
    let status = sandbox.ralph(&["status"]);
    println!(
        "\n$ ralph status\n{}",
        String::from_utf8_lossy(&status.stdout)
    );
    let log = sandbox.ralph(&["log"]);
    println!("$ ralph log\n{}", String::from_utf8_lossy(&log.stdout));
    let report = sandbox.ralph(&["report", "--open"]);
    println!(
        "$ ralph report --open\n{}",
        String::from_utf8_lossy(&report.stdout)
    );
}
