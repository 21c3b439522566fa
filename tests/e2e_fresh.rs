//! Issue 50 end to end with the real Claude Code client in print mode against the mock,
//! which reports a large context for every request: `--fresh-at`'s wrap-up turn, the pause
//! and its one line, `/clear` and the next message typed as stream-json input, the
//! SessionStart(`clear`) of the same client taking the loop on, and the task in the fresh
//! conversation's first request; a second client's `/clear` takes nothing.

use crate::support::conversation::{Conversation, results};
use crate::support::{client, mock_api, sandbox_or_skip};

use client::Sandbox;
use mock_api::{MockApi, Reply};
use serde_json::Value;

const OWNER: &str = "5b360de9-5050-4000-8000-00000000abcd";
const TASK: &str = "Write the user guide";

fn arm(sandbox: &Sandbox) {
    let out = sandbox.ralph(&[
        "start",
        "--session-id",
        OWNER,
        "--max-iterations",
        "10",
        "--completion-promise",
        "DONE",
        "--fresh-at",
        "150k",
        TASK,
    ]);
    assert!(out.status.success(), "ralph start failed: {out:?}");
}

/// The loop file's `key`, as written.
fn field(sandbox: &Sandbox, key: &str) -> Option<String> {
    std::fs::read_to_string(sandbox.state_file())
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().trim_matches('"').to_owned())
}

/// What the hooks told the user (`<Hook> says: …`).
fn shown(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "system" && e["subtype"] == "informational")
        .filter_map(|e| e["content"].as_str().map(str::to_owned))
        .collect()
}

fn stdout_of(events: &[Value], hook: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["subtype"] == "hook_response" && e["hook_name"] == hook)
        .filter_map(|e| serde_json::from_str(e["stdout"].as_str().unwrap_or("")).ok())
        .collect()
}

#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn fresh_at_wraps_up_pauses_and_the_same_clients_clear_goes_on() {
    let sandbox = sandbox_or_skip!("fresh_at_wraps_up_pauses_and_the_same_clients_clear_goes_on");
    arm(&sandbox);
    let api = MockApi::start(
        [
            "Chapter one.",
            "Chapter two.",
            "Notes in PROGRESS.md, committed.",
            "Chapter three.",
        ]
        .iter()
        .map(|t| Reply::text(*t))
        .collect(),
    );
    api.report_context(160_000);
    let mut talk = Conversation::start(&sandbox, &api, &["--session-id", OWNER]);
    talk.say("Begin");
    talk.wait_for("the loop's pause", |e| {
        shown(e)
            .iter()
            .any(|l| l.contains("type /clear, then any message"))
    });
    talk.wait_for("the turn's end", |e| results(e) >= 1);
    let turns = api.turns();
    let wrap_up = turns
        .iter()
        .position(|t| {
            t.last_user_text()
                .contains("This is your last turn in this conversation")
        })
        .unwrap_or_else(|| panic!("no wrap-up turn:\n{}", api.describe()));
    assert_eq!(
        wrap_up,
        turns.len() - 1,
        "the wrap-up is the last turn before the pause"
    );
    assert_eq!(field(&sandbox, "active").as_deref(), Some("false"));
    let iteration = field(&sandbox, "iteration").unwrap();

    // A second client's /clear, meanwhile, takes nothing.
    let other_api = MockApi::start(vec![Reply::text("ok")]);
    let other = sandbox.claude(&other_api, "/clear", &[]);
    assert!(other.status.success(), "{}", other.describe());
    assert_eq!(field(&sandbox, "session_id").as_deref(), Some(OWNER));
    assert_eq!(field(&sandbox, "active").as_deref(), Some("false"));

    // The owner types /clear, then any message.
    let before = api.turns().len();
    talk.say("/clear");
    talk.wait_for("SessionStart(clear)", |e| {
        !stdout_of(e, "SessionStart:clear").is_empty()
    });
    let fresh = field(&sandbox, "session_id").unwrap();
    assert_ne!(fresh, OWNER, "the new conversation owns the loop");
    assert_eq!(field(&sandbox, "active").as_deref(), Some("true"));
    assert_eq!(
        field(&sandbox, "iteration"),
        Some(iteration.clone()),
        "the same iteration"
    );
    let answer = stdout_of(&talk.events(), "SessionStart:clear").remove(0);
    assert!(
        answer["systemMessage"]
            .as_str()
            .unwrap_or("")
            .contains("send any message to start"),
        "{answer}"
    );
    api.answer_from_now(Reply::text("Chapter three. <promise>DONE</promise>"));
    talk.say("go on");
    talk.wait_for("the fresh turn's end", |e| results(e) >= 2);
    let run = talk.finish();
    let first_fresh = &api.turns()[before];
    let sent = first_fresh.messages_text();
    assert!(
        sent.contains(TASK),
        "the task reaches the fresh conversation:\n{sent}"
    );
    assert!(!sent.contains("Chapter one."), "a fresh context:\n{sent}");
    // The fresh conversation's Stop drove the loop to its end.
    let status = sandbox.ralph(&["status", "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap_or(Value::Null);
    let log = std::fs::read_dir(sandbox.project().join(".claude/ralph/history"))
        .map_or(0, Iterator::count);
    assert!(
        log > 0,
        "the loop ended into the history: {status}\n{}",
        run.describe()
    );
}

/// `/compact` in the real client runs ralph's PostCompact hook: the loop's log gets a
/// `compact` line with the client's trigger, so the report shows where context was lost.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn a_compaction_is_logged_by_the_post_compact_hook() {
    let sandbox = sandbox_or_skip!("a_compaction_is_logged_by_the_post_compact_hook");
    arm(&sandbox);
    // A first turn gives the session a transcript to compact.
    let api = MockApi::start(vec![Reply::text("Chapter one.")]);
    sandbox.claude(&api, "Begin", &["--session-id", OWNER, "--max-turns", "1"]);
    let api = MockApi::start(vec![Reply::text("Summary of the conversation.")]);
    let run = sandbox.claude(&api, "/compact", &["--resume", OWNER]);
    assert!(run.status.success(), "{}", run.describe());
    let log = std::fs::read_to_string(sandbox.project().join(".claude/ralph/logs/ralph.jsonl"))
        .unwrap_or_default();
    let compact: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["decision"] == "compact")
        .collect();
    assert_eq!(compact.len(), 1, "{log}\n{}", run.describe());
    assert_eq!(compact[0]["trigger"], "manual", "{log}");
}

/// `--fresh-via run`: after the wrap-up turn the hook starts a detached `ralph run`, which
/// takes the loop over with the real client as its agent (API-priced `claude -p`, here the
/// mock) and completes it; the session is not asked to `/clear`.
#[cfg(unix)]
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn fresh_via_run_hands_the_loop_to_a_detached_ralph_run() {
    let sandbox = sandbox_or_skip!("fresh_via_run_hands_the_loop_to_a_detached_ralph_run");
    let out = sandbox.ralph(&[
        "start",
        "--session-id",
        OWNER,
        "--max-iterations",
        "10",
        "--completion-promise",
        "DONE",
        "--fresh-at",
        "150k",
        "--fresh-via",
        "run",
        TASK,
    ]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("API-priced `claude -p` usage"), "{said}");
    // The session's replies, each its own; the run's agent (a conversation without the
    // session's first message) completes the task.
    let api = MockApi::start(
        (1..=9)
            .map(|n| Reply::text(format!("Chapter {n}.")))
            .collect(),
    );
    api.answer_without(
        "Begin the guide",
        Reply::text("Done. <promise>DONE</promise>"),
    );
    api.report_context(160_000);
    let path = sandbox.client_on_path();
    let run = sandbox.claude_with_env(
        &api,
        "Begin the guide",
        &["--session-id", OWNER],
        &[("PATH", &path)],
    );
    assert!(run.status.success(), "{}", run.describe());
    let told = shown(&run.events());
    assert!(
        told.iter()
            .any(|l| l.contains("a detached `ralph run` (pid")),
        "{told:#?}\n{}",
        run.describe()
    );
    // The run drives the loop to its end; the mock stays up meanwhile.
    let history = sandbox.project().join(".claude/ralph/history");
    let started = std::time::Instant::now();
    while std::fs::read_dir(&history).map_or(0, Iterator::count) == 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(90),
            "the run did not end the loop:\n{}",
            api.describe()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let record = std::fs::read_dir(&history)
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .unwrap_or_default();
    assert!(record.contains("resumed by ralph run"), "{record}");
    assert!(record.contains("\"outcome\":\"completed\""), "{record}");
}
