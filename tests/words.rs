//! Issue 37 through the real binary: what ralph prints when a loop is armed, goes on and
//! ends, for a loop with a promise, with `--prd` and with neither, holds no escaped control
//! sequence and no sentence about a promise, a limit or a budget the loop does not have.
//! (Every builder is walked in `crates/ralph-run/src/words.rs`; these are the same
//! rules on what the binary really prints.)

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use serde_json::{Value, json};

use crate::support::describe;
use crate::support::project::Project;

const PRD: &str = r#"{"userStories": [
  {"id": "US-001", "title": "One", "priority": 1, "passes": false},
  {"id": "US-002", "title": "Two", "priority": 2, "passes": false}
]}"#;

/// Each escape ralph writes for a control character, which no sentence may show.
fn escapes(text: &str) -> Vec<&'static str> {
    ["\\n", "\\r", "\\t", "\\x1b", "\\u{"]
        .into_iter()
        .filter(|e| text.contains(e))
        .collect()
}

/// `ralph start FLAGS` then two stops of session s1: the arming text, the first stop's
/// answer (the agent's reason and the user's line), and the last stop's (the end).
fn armed_and_stopped(p: &Project, flags: &[&str]) -> Vec<String> {
    let mut args = vec!["start", "--session-id", "s1"];
    args.extend_from_slice(flags);
    args.push("Tidy the docs");
    let out = p.ralph_in(&args, p.root(), b"", &[]);
    assert!(out.status.success(), "{}", describe(&out));
    let mut shown = vec![String::from_utf8_lossy(&out.stdout).into_owned()];
    for _ in 0..2 {
        let event = json!({"session_id": "s1", "cwd": p.root(), "hook_event_name": "Stop",
            "stop_hook_active": true, "last_assistant_message": "still working"});
        let out = p.ralph_in(
            &["hook", "stop"],
            p.root(),
            event.to_string().as_bytes(),
            &[],
        );
        assert!(out.status.success(), "{}", describe(&out));
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        for field in ["reason", "systemMessage"] {
            if let Some(text) = answer[field].as_str() {
                shown.push(text.to_owned());
            }
        }
    }
    let log = p.ralph_in(&["log"], p.root(), b"", &[]);
    shown.push(String::from_utf8_lossy(&log.stdout).into_owned());
    shown
}

#[test]
fn a_prd_loop_speaks_of_stories_never_of_a_promise_or_a_budget() {
    let p = Project::new();
    p.write("ralph/prd.json", PRD);
    let shown = armed_and_stopped(&p, &["--prd", "--max-iterations", "2"]).join("\n");
    assert!(escapes(&shown).is_empty(), "{shown}");
    assert!(!shown.to_lowercase().contains("promise"), "{shown}");
    assert!(!shown.to_lowercase().contains("budget"), "{shown}");
    assert!(shown.contains("every story passes"), "{shown}");
    assert!(
        shown.contains("not every story passes yet"),
        "the log: {shown}"
    );
    assert!(
        shown.contains("reached the limit of 2 iterations before every story passed"),
        "{shown}"
    );
}

#[test]
fn a_loop_without_a_promise_names_what_ends_it() {
    let p = Project::new();
    let shown = armed_and_stopped(&p, &["--max-iterations", "2"]).join("\n");
    assert!(escapes(&shown).is_empty(), "{shown}");
    assert!(
        !shown
            .to_lowercase()
            .replace("no completion promise", "")
            .contains("promise"),
        "{shown}"
    );
    assert!(!shown.to_lowercase().contains("budget"), "{shown}");
    assert!(
        shown.contains("it ends at its limit of 2 iterations"),
        "{shown}"
    );
    assert!(
        shown.contains("went on (no completion promise)"),
        "the log: {shown}"
    );
}

#[test]
fn a_loop_with_a_promise_and_a_token_budget_says_both_and_nothing_else() {
    let p = Project::new();
    let shown = armed_and_stopped(
        &p,
        &[
            "--completion-promise",
            "DONE",
            "--max-iterations",
            "0",
            "--max-tokens",
            "15000",
        ],
    )
    .join("\n");
    assert!(escapes(&shown).is_empty(), "{shown}");
    assert!(shown.contains("<promise>DONE</promise>"), "{shown}");
    assert!(shown.contains("its token budget of 15000"), "{shown}");
    let lower = shown.to_lowercase().replace("no iteration limit", "");
    for phrase in ["iteration limit", "at the limit", "its limit"] {
        assert!(!lower.contains(phrase), "{phrase}: {shown}");
    }
}
