//! The dollar budget (`--max-cost`, issue 30) through the real binary: `ralph run` with a
//! scripted agent that reports `total_cost_usd` (and a fake `claude` on PATH that records the
//! `--max-budget-usd` it is given), and the Stop hook pricing transcripts shaped like Claude
//! Code's, per model, with the shipped table and a user's own.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::Write;
use std::path::PathBuf;
use std::process::{Output, Stdio};

use ralph_state::fields::state::LoopState;
use ralph_state::time::Timestamp;
use serde_json::{Value, json};

use crate::support::project::Project;
use crate::support::{LOOP, text};

/// A scripted agent: the Nth call saves its prompt and its arguments, and prints
/// `.agent/reply-N` (or the last reply written).
const AGENT: &str = r#"n=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n
cat > .agent/prompt-$n
echo "$@" > .agent/args-$n
if [ -f .agent/reply-$n ]; then cat .agent/reply-$n; else cat "$(ls .agent/reply-* | sort -t- -k2 -n | tail -n 1)"; fi"#;

/// This module's steps on the shared [`Project`].
trait Steps {
    fn with_agent(replies: &[String]) -> Self;
    fn ralph(&self, args: &[&str], stdin: &str) -> Output;
    fn calls(&self) -> usize;
    fn status(&self) -> Value;
    fn the_loop(&self) -> Value;
    fn transcript(&self) -> PathBuf;
    fn append(&self, lines: &[String]);
    fn stop(&self, reply: &str) -> Value;
    fn started_at(&self) -> Timestamp;
}

impl Steps for Project {
    /// A project whose scripted agent (`AGENT`, also `claude` on its PATH) prints `replies`
    /// in turn.
    fn with_agent(replies: &[String]) -> Self {
        let p = Project::new();
        std::fs::create_dir_all(p.path(".agent")).unwrap();
        // Outside the project: ralph takes no program from a folder the agent writes.
        let bin = p.home().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        p.write(".agent/agent.sh", AGENT);
        // `claude` on PATH is the same script: the default agent and the preset run it.
        let claude = bin.join("claude");
        std::fs::write(&claude, format!("#!/bin/sh\n{AGENT}\n")).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        for (i, r) in replies.iter().enumerate() {
            p.write(&format!(".agent/reply-{}", i + 1), r);
        }
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        p.with_env("PATH", path)
    }

    fn ralph(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = self.command(args).stdin(Stdio::piped()).spawn().unwrap();
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        child.wait_with_output().unwrap()
    }

    fn calls(&self) -> usize {
        self.read_or_empty(".agent/n").trim().parse().unwrap_or(0)
    }

    fn status(&self) -> Value {
        serde_json::from_slice(&self.ralph(&["status", "--json"], "").stdout).unwrap()
    }

    fn the_loop(&self) -> Value {
        self.status()["loops"][0].clone()
    }

    fn transcript(&self) -> PathBuf {
        self.root().join("session.jsonl")
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

    /// One Stop of session s1, its reply in the event and the transcript beside it.
    fn stop(&self, reply: &str) -> Value {
        let event = json!({"session_id": "s1", "cwd": self.root(), "hook_event_name": "Stop",
            "transcript_path": self.transcript(), "stop_hook_active": true,
            "last_assistant_message": reply});
        let out = self.ralph(&["hook", "stop"], &event.to_string());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        if stdout.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&stdout).unwrap()
        }
    }

    fn started_at(&self) -> Timestamp {
        LoopState::parse(&self.read_or_empty(LOOP))
            .unwrap()
            .started_at
            .unwrap()
    }
}

/// A `claude -p --output-format json` result that cost `usd`.
fn costing(reply: &str, usd: &str) -> String {
    format!(
        r#"{{"type":"result","subtype":"success","is_error":false,"result":"{reply}","total_cost_usd":{usd},"usage":{{"input_tokens":1,"output_tokens":1}}}}"#
    )
}

#[test]
fn run_counts_the_agents_reported_cost_and_ends_at_the_budget() {
    let p = Project::with_agent(&[
        costing("one", "0.4"),
        costing("two", "0.4"),
        costing("three", "0.4"),
        costing("four", "0.4"),
    ]);
    let out = p.ralph(
        &[
            "run",
            "--agent",
            "sh .agent/agent.sh",
            "--max-cost",
            "1",
            "--max-iterations",
            "9",
            "Task",
        ],
        "",
    );
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(3), "{shown}");
    // 0.4 + 0.4 + 0.4 = 1.2 exactly (in floats it is 1.2000000000000002).
    assert_eq!(p.calls(), 3, "$0.40, $0.80, then $1.20 of $1.00: {shown}");
    assert!(
        !p.read_or_empty(".agent/prompt-2").contains("Dollar budget"),
        "40 %"
    );
    assert!(
        p.read_or_empty(".agent/prompt-3")
            .contains("Dollar budget: $0.80 of $1.00 spent. Wrap up"),
        "80 %: {}",
        p.read_or_empty(".agent/prompt-3")
    );
    assert!(
        shown.contains("spent $0.40 of $1.00"),
        "progress line: {shown}"
    );
    assert!(shown.contains("spent $1.20"), "summary: {shown}");
    let l = p.the_loop();
    assert_eq!(l["outcome"], "cost_budget", "{l}");
    assert_eq!(l["cost_usd"].as_f64(), Some(1.2), "{l}");
    assert_eq!(l["max_cost_usd"].as_f64(), Some(1.0), "{l}");
    assert!(
        p.read_or_empty(".agent/args-1").trim().is_empty(),
        "not claude: no flag"
    );
    let log = String::from_utf8_lossy(&p.ralph(&["log"], "").stdout).into_owned();
    assert!(log.contains("spent $1.2"), "{log}");
}

#[test]
fn claude_in_print_mode_is_given_what_is_left_of_the_budget() {
    // IS_SANDBOX=1: the `claude` preset skips permissions, which Claude Code (and so ralph)
    // refuses as root outside a sandbox; these tests may run as root in a container.
    let p = Project::with_agent(&[costing("one", "0.3"), costing("two", "0.25")])
        .with_env("IS_SANDBOX", "1");
    // The default agent (`claude -p --output-format json`) and the `claude` preset.
    for agent in [None, Some("claude")] {
        let _ = std::fs::remove_file(p.root().join(".agent/n"));
        let mut args = vec!["run"];
        if let Some(a) = agent {
            args.extend(["--agent", a]);
        }
        args.extend([
            "--max-cost",
            "0.5",
            "--max-iterations",
            "9",
            "--force",
            "Task",
        ]);
        let out = p.ralph(&args, "");
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        assert_eq!(p.calls(), 2, "{}", text(&out));
        let first = p.read_or_empty(".agent/args-1");
        let second = p.read_or_empty(".agent/args-2");
        assert!(
            first.contains("-p") && first.contains("--max-budget-usd 0.5"),
            "{first}"
        );
        assert!(
            second.contains("--max-budget-usd 0.2"),
            "0.5 - 0.3: {second}"
        );
    }
}

#[test]
fn the_claude_preset_as_root_outside_a_sandbox_is_refused_before_anything_runs() {
    let p = Project::with_agent(&[costing("one", "0.3")]);
    let out = p.ralph(
        &["run", "--agent", "claude", "--max-iterations", "1", "Task"],
        "",
    );
    let shown = text(&out);
    if !ralph_state::fields::run_owner::runs_as_root() {
        // A normal user: nothing to refuse, the run goes ahead.
        assert!(
            !shown.contains("refuses `--dangerously-skip-permissions`"),
            "{shown}"
        );
        eprintln!("not root: only the non-refusal was checked");
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(
        shown.contains("ralph runs as root")
            && shown.contains("IS_SANDBOX=1 ralph run")
            && shown.contains("ralph run --sandbox"),
        "{shown}"
    );
    assert_eq!(p.calls(), 0, "the agent never ran");
    assert!(!p.root().join(LOOP).exists(), "nothing armed");
}

#[test]
fn claude_stopped_by_its_own_budget_ends_the_loop_as_cost_budget() {
    let spent = r#"{"type":"result","subtype":"error_max_budget_usd","is_error":true,"total_cost_usd":0.51,"errors":["Reached maximum budget ($0.5)"]}"#;
    let p = Project::with_agent(&[spent.to_owned()]);
    let out = p.ralph(&["run", "--max-cost", "0.5", "Task"], "");
    // The fake exits 0; the real client exits 1 here, and the result is judged either way.
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let l = p.the_loop();
    assert_eq!(
        (l["outcome"].as_str(), l["cost_usd"].as_f64()),
        (Some("cost_budget"), Some(0.51)),
        "{l}"
    );
}

#[test]
fn an_agent_that_reports_no_cost_says_so() {
    let p = Project::with_agent(&["plain text".to_owned()]);
    let out = p.ralph(
        &[
            "run",
            "--agent",
            "sh .agent/agent.sh",
            "--max-cost",
            "1",
            "--max-iterations",
            "2",
            "Task",
        ],
        "",
    );
    let shown = text(&out);
    assert!(
        shown.contains("the agent reports no cost: the dollar budget cannot count it"),
        "{shown}"
    );
}

#[test]
fn a_bad_amount_is_refused_when_arming() {
    let p = Project::with_agent(&[]);
    for bad in ["-1", "1.2.3", "0.0000001", "5000000000", "1e3", "$"] {
        let out = p.ralph(
            &["start", "--session-id", "s1", "--max-cost", bad, "Work"],
            "",
        );
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out));
        assert!(!p.root().join(LOOP).exists(), "{bad}: nothing armed");
    }
    let out = p.ralph(
        &["start", "--session-id", "s1", "--max-cost", "2.50", "Work"],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        p.read_or_empty(LOOP).contains("max_cost: 2.5\n"),
        "{}",
        p.read_or_empty(LOOP)
    );
    assert!(text(&out).contains("dollar budget $2.50"), "{}", text(&out));
}

/// One assistant reply as the client writes it, with this usage and model.
fn reply_line(id: &str, model: &str, ts: &str, usage: Value) -> String {
    json!({"parentUuid": "p", "isSidechain": false, "type": "assistant", "uuid": "u", "timestamp": ts,
        "sessionId": "s1", "version": "2.1.328",
        "message": {"id": id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": format!("step {id}")}], "stop_reason": "end_turn", "usage": usage}})
    .to_string()
}

fn feedback(ts: &str) -> String {
    json!({"type": "user", "isMeta": true, "isSidechain": false, "timestamp": ts,
        "message": {"role": "user", "content": "Stop hook feedback: …"}})
    .to_string()
}

fn at(t: Timestamp, secs: i64) -> String {
    Timestamp(t.0 + secs).to_string().replace('Z', ".250Z")
}

#[test]
fn the_hook_prices_the_transcript_per_model_and_ends_at_the_budget() {
    let p = Project::with_agent(&[]);
    let out = p.ralph(
        &[
            "start",
            "--session-id",
            "s1",
            "--max-cost",
            "0.05",
            "--stuck-after",
            "0",
            "--no-progress-after",
            "0",
            "Work",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = p.started_at();
    // Sonnet 4.6: 1000 in × $3 + 1000 out × $15 + 10000 cache reads × $0.30 per million
    // = $0.003 + $0.015 + $0.003 = $0.021 a reply.
    let usage = json!({"input_tokens": 1000, "output_tokens": 1000, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 10000});
    p.append(&[reply_line(
        "m1",
        "claude-sonnet-4-6",
        &at(t, 1),
        usage.clone(),
    )]);
    let first = p.stop("step m1");
    assert_eq!(first["decision"], "block", "{first}");
    assert!(
        first["reason"]
            .as_str()
            .unwrap()
            .contains("Spent: $0.02 of $0.05."),
        "{first}"
    );
    assert!(
        p.read_or_empty(LOOP).contains("cost_usd: 0.021\n"),
        "{}",
        p.read_or_empty(LOOP)
    );
    p.append(&[
        feedback(&at(t, 2)),
        reply_line("m2", "claude-sonnet-4-6", &at(t, 3), usage.clone()),
    ]);
    let second = p.stop("step m2");
    assert!(
        second["reason"]
            .as_str()
            .unwrap()
            .contains("Dollar budget: $0.04 of $0.05 spent. Wrap up"),
        "$0.042 is 84 %: {second}"
    );
    let statusline = p.ralph(
        &["statusline"],
        &json!({"session_id": "s1", "workspace": {"project_dir": p.root()}}).to_string(),
    );
    let statusline = String::from_utf8_lossy(&statusline.stdout).into_owned();
    assert!(statusline.contains("$0.04/$0.05"), "{statusline}");
    let l = p.the_loop();
    assert_eq!(l["cost_usd"].as_f64(), Some(0.042), "{l}");
    let status = String::from_utf8_lossy(&p.ralph(&["status"], "").stdout).into_owned();
    assert!(status.contains("spent $0.04 of $0.05"), "{status}");
    p.append(&[
        feedback(&at(t, 4)),
        reply_line("m3", "claude-sonnet-4-6", &at(t, 5), usage),
    ]);
    let third = p.stop("step m3");
    assert_ne!(third["decision"], "block", "{third}");
    assert!(
        third["systemMessage"]
            .as_str()
            .unwrap()
            .contains("spent $0.06 of its $0.05 dollar budget"),
        "{third}"
    );
    let l = p.the_loop();
    assert_eq!(
        (l["outcome"].as_str(), l["cost_usd"].as_f64()),
        (Some("cost_budget"), Some(0.063)),
        "{l}"
    );
}

#[test]
fn an_unknown_model_costs_the_dearest_rate_until_the_user_prices_it() {
    let p = Project::with_agent(&[]);
    let out = p.ralph(
        &["start", "--session-id", "s1", "--max-cost", "100", "Work"],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = p.started_at();
    let usage = json!({"input_tokens": 1_000_000, "output_tokens": 0});
    p.append(&[reply_line(
        "m1",
        "gateway-model\u{1b}[2J",
        &at(t, 1),
        usage.clone(),
    )]);
    let first = p.stop("step m1");
    let notice = first["systemMessage"].as_str().unwrap();
    assert!(
        notice.contains("no price for the model `gateway-model\\x1b[2J`"),
        "named, escaped: {notice}"
    );
    // The dearest input price of the shipped table: $15 per million (Opus 4.1).
    assert!(
        p.read_or_empty(LOOP).contains("cost_usd: 15\n"),
        "{}",
        p.read_or_empty(LOOP)
    );

    let config = p.home().join(".config/ralph");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("prices.json"),
        r#"{"checked":"2027-01-01","source":"test","models":{"gateway-model":{"input":"0.5","output":1,"cache_write":1,"cache_read":0.1}}}"#,
    )
    .unwrap();
    p.append(&[
        feedback(&at(t, 2)),
        reply_line("m2", "gateway-model", &at(t, 3), usage.clone()),
    ]);
    let second = p.stop("step m2");
    assert!(
        !second["systemMessage"]
            .as_str()
            .unwrap_or("")
            .contains("no price"),
        "{second}"
    );
    assert!(
        p.read_or_empty(LOOP).contains("cost_usd: 15.5\n"),
        "{}",
        p.read_or_empty(LOOP)
    );

    std::fs::write(
        config.join("prices.json"),
        r#"{"models":{"gateway-model":{"input":"x"}}}"#,
    )
    .unwrap();
    p.append(&[
        feedback(&at(t, 4)),
        reply_line("m3", "gateway-model", &at(t, 5), usage),
    ]);
    let third = p.stop("step m3");
    let notice = third["systemMessage"].as_str().unwrap();
    assert!(
        notice.contains("prices.json") && notice.contains("models.gateway-model.input"),
        "the file, the field: {notice}"
    );
    assert_eq!(
        third["decision"], "block",
        "a bad table still counts: {third}"
    );
    assert!(
        p.read_or_empty(LOOP).contains("cost_usd: 30.5\n"),
        "shipped prices meanwhile"
    );
}

/// `ralph hook NAME` with `event` (session s1, this project), its `systemMessage`.
fn session_hook(p: &Project, name: &str, event: Value) -> Option<String> {
    let mut event = event;
    event["session_id"] = json!("s1");
    event["cwd"] = json!(p.root());
    let out = p.ralph(&["hook", name], &event.to_string());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    (!stdout.trim().is_empty()).then(|| {
        serde_json::from_str::<Value>(&stdout).unwrap()["systemMessage"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    })
}

/// What Claude Code 2.1.328 sends to a StopFailure hook when the API answered 429
/// (captured in print mode against a mock; no reset time, no `error_details`).
fn rate_limited() -> Value {
    json!({"hook_event_name": "StopFailure", "transcript_path": "/nonexistent.jsonl",
        "prompt_id": "p1", "effort": {"level": "medium"}, "error": "rate_limit",
        "last_assistant_message": "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit"})
}

#[test]
fn a_rate_limit_pauses_the_loop_uncounted_and_the_user_is_told_once() {
    let p = Project::with_agent(&[]);
    let out = p.ralph(&["start", "--session-id", "s1", "Work"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let before = p.read_or_empty(LOOP);
    let said = session_hook(&p, "stop-failure", rate_limited()).unwrap();
    assert!(
        said.contains("paused at iteration 1/50: rate limited (rate_limit)"),
        "{said}"
    );
    let l = p.the_loop();
    assert_eq!(
        (l["state"].as_str(), l["iteration"].as_u64()),
        (Some("paused"), Some(1)),
        "{l}"
    );
    assert_ne!(p.read_or_empty(LOOP), before);
    // The next prompt tells the user, once; /ralph-resume (a ralph command) is silent.
    let told = session_hook(&p, "prompt", json!({"prompt": "what now?"})).unwrap();
    assert!(
        told.contains("rate limited") && told.contains("/ralph-resume"),
        "{told}"
    );
    assert_eq!(
        session_hook(&p, "prompt", json!({"prompt": "again?"})),
        None,
        "told once"
    );
    let log = String::from_utf8_lossy(&p.ralph(&["log"], "").stdout).into_owned();
    assert!(log.contains("pause — rate limited (rate_limit)"), "{log}");
    // `ralph resume` (what /ralph-resume runs) goes on.
    let out = p.ralph(&["resume"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(p.the_loop()["state"], "active");
}

#[test]
fn a_rate_limit_is_told_at_session_start_too() {
    let p = Project::with_agent(&[]);
    p.ralph(&["start", "--session-id", "s1", "Work"], "");
    session_hook(&p, "stop-failure", rate_limited()).unwrap();
    let told = session_hook(&p, "session-start", json!({"source": "resume"})).unwrap();
    assert!(
        told.contains("is paused at iteration 1/50 (rate limited"),
        "{told}"
    );
    assert_eq!(
        session_hook(&p, "prompt", json!({"prompt": "hi"})),
        None,
        "already told"
    );
}

#[test]
fn transient_api_errors_are_logged_and_change_nothing_else() {
    let p = Project::with_agent(&[]);
    p.ralph(&["start", "--session-id", "s1", "Work"], "");
    let before = p.read_or_empty(LOOP);
    // HTTP 529 and 500 both reach the hook as `server_error` in Claude Code 2.1.328.
    let event = json!({"hook_event_name": "StopFailure", "error": "server_error",
        "last_assistant_message": "API Error: 529 Overloaded. This is a server-side issue"});
    assert_eq!(session_hook(&p, "stop-failure", event), None);
    assert_eq!(p.read_or_empty(LOOP), before, "byte for byte");
    let log = String::from_utf8_lossy(&p.ralph(&["log"], "").stdout).into_owned();
    assert!(
        log.contains("api_error — an API error ended the turn (server_error)"),
        "{log}"
    );
    // Another session's failure leaves this loop alone.
    let out = p.ralph(
        &["hook", "stop-failure"],
        &json!({"session_id": "other", "cwd": p.root(), "error": "rate_limit"}).to_string(),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(p.read_or_empty(LOOP), before);
    // A malformed event is an allow-style notice, never a failure.
    let out = p.ralph(&["hook", "stop-failure"], "{not json");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(p.the_loop()["state"], "active");
}

#[test]
fn run_stops_on_a_usage_limit_without_counting_the_iteration() {
    let limited = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error","terminal_reason":"api_error","result":"API Error: Request rejected (429) · rate limit","total_cost_usd":0}"#;
    let p = Project::with_agent(&[costing("one", "0.1"), limited.to_owned()]);
    let out = p.ralph(
        &[
            "run",
            "--agent",
            "sh .agent/agent.sh",
            "--max-iterations",
            "9",
            "Task",
        ],
        "",
    );
    let shown = text(&out);
    assert_eq!(
        out.status.code(),
        Some(4),
        "the limit's own exit code: {shown}"
    );
    assert!(
        shown.contains("stopped on a rate or usage limit: API Error: Request rejected (429)"),
        "{shown}"
    );
    let l = p.the_loop();
    assert_eq!(
        (l["state"].as_str(), l["iteration"].as_u64()),
        (Some("active"), Some(2)),
        "live, and the limited iteration not counted: {l}"
    );
    // A later run takes it up again.
    std::fs::write(
        p.root().join(".agent/reply-3"),
        costing("three <promise>DONE</promise>", "0.1"),
    )
    .unwrap();
    let out = p.ralph(&["run", "--agent", "sh .agent/agent.sh"], "");
    assert!(text(&out).contains("iteration 2"), "{}", text(&out));
}

#[test]
fn a_stop_with_background_work_or_a_scheduled_wake_up_is_let_through_uncounted() {
    let p = Project::with_agent(&[]);
    let out = p.ralph(
        &[
            "start",
            "--session-id",
            "s1",
            "--max-tokens",
            "1000",
            "--no-progress-after",
            "0",
            "Work",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = p.started_at();
    let usage = json!({"input_tokens": 100, "output_tokens": 20});
    p.append(&[reply_line(
        "m1",
        "claude-sonnet-4-6",
        &at(t, 1),
        usage.clone(),
    )]);
    let stop = |extra: Value| {
        let mut event = json!({"session_id": "s1", "cwd": p.root(), "hook_event_name": "Stop",
            "transcript_path": p.transcript(), "stop_hook_active": false,
            "last_assistant_message": "I will wait for the build."});
        for (k, v) in extra.as_object().unwrap() {
            event[k] = v.clone();
        }
        let out = p.ralph(&["hook", "stop"], &event.to_string());
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null)
    };
    // What Claude Code 2.1.328 sends while a `run_in_background` Bash command runs.
    let first = stop(
        json!({"background_tasks": [{"id": "bz9", "type": "shell", "status": "running",
        "description": "build", "command": "make"}], "session_crons": []}),
    );
    assert_ne!(first["decision"], "block", "{first}");
    assert!(
        first["systemMessage"]
            .as_str()
            .unwrap()
            .contains("waiting for 1 background task (build)"),
        "{first}"
    );
    let l = p.the_loop();
    assert_eq!(
        (l["iteration"].as_u64(), l["tokens_used"].as_u64()),
        (Some(1), Some(120)),
        "uncounted, but its tokens are spent: {l}"
    );
    // A scheduled wake-up is the same.
    let second = stop(
        json!({"background_tasks": [], "session_crons": [{"id": "c1", "prompt": "check CI"}]}),
    );
    assert!(
        second["systemMessage"]
            .as_str()
            .unwrap()
            .contains("1 scheduled wake-up (check CI)"),
        "{second}"
    );
    // The stop after the work is done goes on with the loop.
    p.append(&[
        feedback(&at(t, 2)),
        reply_line("m2", "claude-sonnet-4-6", &at(t, 3), usage),
    ]);
    let third = stop(json!({"background_tasks": [], "session_crons": []}));
    assert_eq!(third["decision"], "block", "{third}");
    assert_eq!(p.the_loop()["iteration"].as_u64(), Some(2));
}

#[test]
fn the_arming_line_and_status_say_which_usage_a_loop_spends() {
    let p = Project::with_agent(&[costing("<promise>DONE</promise>", "0.01")]);
    let out = p.ralph(
        &[
            "start",
            "--session-id",
            "s1",
            "--completion-promise",
            "DONE",
            "Work",
        ],
        "",
    );
    assert!(
        text(&out).contains("Spends: this session's usage: the plan's 5-hour and weekly windows on a subscription, or the account of the API key it runs with."),
        "{}",
        text(&out)
    );
    let status = String::from_utf8_lossy(&p.ralph(&["status"], "").stdout).into_owned();
    assert!(status.contains("spends: this session's usage"), "{status}");
    assert_eq!(p.the_loop()["spends"], "session");
    p.ralph(&["cancel"], "");
    // `ralph run` with Claude Code: API-priced print mode.
    let out = p.ralph(&["run", "--completion-promise", "DONE", "Work"], "");
    assert!(
        text(&out).contains("Spends: API-priced `claude -p` usage (on subscription plans, the separate credit for print mode)"),
        "{}",
        text(&out)
    );
    let out = p.ralph(
        &[
            "run",
            "--agent",
            "sh .agent/agent.sh",
            "--completion-promise",
            "DONE",
            "Work",
        ],
        "",
    );
    assert!(
        text(&out).contains("Spends: whatever `sh` bills"),
        "{}",
        text(&out)
    );
}

#[test]
fn max_window_pauses_by_what_the_status_line_last_saw() {
    let p = Project::with_agent(&[]);
    let arm = [
        "start",
        "--session-id",
        "s1",
        "--max-window",
        "80",
        "--no-progress-after",
        "0",
        "Work",
    ];
    let out = p.ralph(&arm, "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("set `ralph statusline` as Claude Code's status line"),
        "{}",
        text(&out)
    );
    assert!(!p.root().join(LOOP).exists(), "nothing armed");
    let out = p.ralph(
        &["start", "--session-id", "s1", "--max-window", "101", "Work"],
        "",
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // What Claude Code gives the status line on a subscription plan.
    let refresh = |used: f64| {
        let input = json!({"session_id": "s1", "workspace": {"project_dir": p.root()},
            "rate_limits": {"five_hour": {"used_percentage": used, "resets_at": 4_102_444_800_i64},
                "seven_day": {"used_percentage": 10, "resets_at": 4_102_444_800_i64}}});
        p.ralph(&["statusline"], &input.to_string())
    };
    refresh(42.0);
    let kept = p.home().join(".local/state/ralph/window.json");
    assert!(
        std::fs::read_to_string(&kept)
            .unwrap()
            .contains("\"used_percentage\":42")
    );
    let out = p.ralph(&arm, "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("pauses at 80 % of the 5-hour window"),
        "{}",
        text(&out)
    );
    let stop = || {
        let event = json!({"session_id": "s1", "cwd": p.root(), "hook_event_name": "Stop",
            "stop_hook_active": false, "last_assistant_message": "step"});
        let out = p.ralph(&["hook", "stop"], &event.to_string());
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null)
    };
    assert_eq!(stop()["decision"], "block", "42 % of the window");
    refresh(80.5);
    let paused = stop();
    assert_ne!(paused["decision"], "block", "{paused}");
    assert!(
        paused["systemMessage"]
            .as_str()
            .unwrap()
            .contains("paused at iteration 2/50: the plan's 5-hour window is 81 % used (--max-window 80), resets 2100-01-01T00:00:00Z"),
        "{paused}"
    );
    assert_eq!(p.the_loop()["state"], "paused");
    assert_eq!(
        stop(),
        Value::Null,
        "paused: the next stop goes through silently"
    );
}

/// The attachment Claude Code 2.1.328 writes into the transcript when `/goal` sets a goal.
fn goal_status(met: bool, ts: &str) -> String {
    json!({"parentUuid": null, "isSidechain": false, "type": "attachment", "timestamp": ts,
        "attachment": {"type": "goal_status", "met": met, "sentinel": true, "condition": "Make the tests pass"},
        "sessionId": "s1", "version": "2.1.328"})
    .to_string()
}

#[test]
fn a_turn_that_goal_drives_is_never_continued_by_the_loop() {
    let p = Project::with_agent(&[]);
    let out = p.ralph(
        &[
            "start",
            "--session-id",
            "s1",
            "--no-progress-after",
            "0",
            "Work",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = p.started_at();
    let usage = json!({"input_tokens": 10, "output_tokens": 5});
    p.append(&[
        goal_status(false, &at(t, 1)),
        reply_line("m1", "claude-sonnet-4-6", &at(t, 2), usage.clone()),
    ]);
    let first = p.stop("step m1");
    assert_ne!(first["decision"], "block", "{first}");
    assert!(
        first["systemMessage"]
            .as_str()
            .unwrap()
            .contains("/goal drives this session"),
        "said once: {first}"
    );
    p.append(&[
        feedback(&at(t, 3)),
        reply_line("m2", "claude-sonnet-4-6", &at(t, 4), usage.clone()),
    ]);
    assert_eq!(p.stop("step m2"), Value::Null, "still the goal's: silent");
    assert_eq!(p.the_loop()["iteration"].as_u64(), Some(1), "uncounted");
    // The goal is met: the next stop is the loop's again.
    p.append(&[
        goal_status(true, &at(t, 5)),
        reply_line("m3", "claude-sonnet-4-6", &at(t, 6), usage),
    ]);
    let after = p.stop("step m3");
    assert_eq!(after["decision"], "block", "{after}");
    assert_eq!(p.the_loop()["iteration"].as_u64(), Some(2));
}

/// Issue 48 item 17: a goal set before the loop was armed is seen too (the
/// guide said it was not): the client records the goal's status again at
/// each turn it drives, and ralph waits for it as for one set during the loop.
#[test]
fn a_goal_set_before_arming_is_seen_and_waited_for() {
    let p = Project::with_agent(&[]);
    let before = Timestamp(Timestamp::now().0 - 60);
    p.append(&[goal_status(false, &at(before, 0))]);
    let out = p.ralph(&["start", "--session-id", "s1", "Work"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = p.started_at();
    let usage = json!({"input_tokens": 10, "output_tokens": 5});
    p.append(&[
        goal_status(false, &at(t, 1)),
        reply_line("m1", "claude-sonnet-4-6", &at(t, 2), usage),
    ]);
    let first = p.stop("step m1");
    assert_ne!(first["decision"], "block", "{first}");
    assert!(
        first["systemMessage"]
            .as_str()
            .unwrap_or_default()
            .contains("/goal drives this session"),
        "{first}"
    );
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide.md"),
    )
    .unwrap();
    assert!(!guide.contains("before the loop was armed is not seen"));
}

/// Claude Code's print-mode result for an API 429 (as 2.1.328 prints it).
const LIMITED: &str = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error","terminal_reason":"api_error","result":"API Error: Request rejected (429) · rate limit","total_cost_usd":0}"#;

#[test]
fn run_with_wait_for_reset_sleeps_through_a_limit_and_goes_on() {
    let p = Project::with_agent(&[
        costing("one", "0.1"),
        LIMITED.to_owned(),
        costing("two <promise>DONE</promise>", "0.1"),
    ]);
    let mut cmd = p.command(&[
        "run",
        "--agent",
        "sh .agent/agent.sh",
        "--wait-for-reset",
        "--completion-promise",
        "DONE",
        "Task",
    ]);
    cmd.env("RALPH_RESET_WAIT_SECS", "1");
    let started = std::time::Instant::now();
    let out = cmd.output().unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "it waited"
    );
    assert!(
        shown.contains("· API Error: Request rejected (429) · rate limit (rate_limit_error) · waiting 1s for the reset at "),
        "{shown}"
    );
    assert!(
        shown.contains("no reset time known: backing off"),
        "{shown}"
    );
    assert!(shown.contains("the wait is over; iteration 2/"), "{shown}");
    assert_eq!(p.calls(), 3);
    // The limited iteration ran again with the same prompt, and was not counted.
    assert_eq!(p.read(".agent/prompt-2"), p.read(".agent/prompt-3"));
    assert!(p.read(".agent/prompt-3").contains("iteration 2 of"));
    assert!(
        !shown.contains("\x1b["),
        "plain lines when piped: {shown:?}"
    );
}

/// Starts `ralph run --wait-for-reset` on an agent that is always limited, and waits
/// until the run is sleeping.
fn waiting_run(p: &Project, extra: &[&str], wait_secs: &str) -> std::process::Child {
    let mut args = vec!["run", "--agent", "sh .agent/agent.sh", "--wait-for-reset"];
    args.extend_from_slice(extra);
    args.push("Task");
    let mut cmd = p.command(&args);
    cmd.env("RALPH_RESET_WAIT_SECS", wait_secs);
    let child = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while p.calls() < 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child
}

/// Runs `ralph run --wait-for-reset` into a 10-minute wait, does `act` once the run says it
/// waits, and returns what it showed, its exit code and how long it took to end after `act`.
fn interrupted_wait(
    p: &Project,
    act: impl FnOnce(&std::process::Child),
) -> (String, Option<i32>, std::time::Duration) {
    let mut child = waiting_run(p, &[], "600");
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut lines = std::io::BufRead::lines(stdout);
    let mut shown = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        shown.push_str(&line);
        shown.push('\n');
        if line.contains("waiting 10m") {
            break;
        }
    }
    act(&child);
    let acted = std::time::Instant::now();
    for line in lines {
        shown.push_str(&line.unwrap());
        shown.push('\n');
    }
    let out = child.wait_with_output().unwrap();
    shown.push_str(&text(&out));
    (shown, out.status.code(), acted.elapsed())
}

#[test]
fn ralph_cancel_ends_a_run_waiting_for_a_reset_promptly() {
    let p = Project::with_agent(&[LIMITED.to_owned()]);
    let (shown, code, took) = interrupted_wait(&p, |_| {
        let cancel = p.ralph(&["cancel", "--name", "ralph"], "");
        assert!(cancel.status.success(), "{}", text(&cancel));
    });
    assert!(
        took < std::time::Duration::from_secs(120),
        "ended within a few polls, not after the 10-minute wait: {shown}"
    );
    assert!(
        shown.contains("no reset time known: backing off"),
        "{shown}"
    );
    assert!(
        shown.contains("is gone (cancelled or ended elsewhere)"),
        "{shown}"
    );
    // Only a completed loop exits 0 (issue 45).
    assert_eq!(code, Some(3), "{shown}");
    assert_eq!(p.calls(), 1, "the agent did not run again");
}

#[test]
fn ralph_pause_ends_a_run_waiting_for_a_reset_and_hands_the_loop_back() {
    let p = Project::with_agent(&[LIMITED.to_owned()]);
    let (shown, code, took) = interrupted_wait(&p, |_| {
        let pause = p.ralph(&["pause", "--name", "ralph"], "");
        assert!(pause.status.success(), "{}", text(&pause));
    });
    assert!(took < std::time::Duration::from_secs(120), "{shown}");
    assert!(shown.contains("is paused; handed back"), "{shown}");
    assert_eq!(code, Some(3), "only a completed loop exits 0: {shown}");
    let l = p.the_loop();
    assert_eq!(
        (l["state"].as_str(), l["iteration"].as_u64()),
        (Some("paused"), Some(1)),
        "{l}"
    );
}

#[cfg(unix)]
#[test]
fn ctrl_c_pauses_a_run_waiting_for_a_reset() {
    let p = Project::with_agent(&[LIMITED.to_owned()]);
    let (shown, code, took) = interrupted_wait(&p, |child| {
        let pid = child.id().to_string();
        let kill = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap();
        assert!(kill.success());
    });
    assert!(took < std::time::Duration::from_secs(120), "{shown}");
    assert_eq!(code, Some(130), "{shown}");
    assert!(shown.contains("was paused at iteration 1"), "{shown}");
    assert_eq!(p.the_loop()["state"], "paused");
    // Issue 48 item 7: status names who may drive it next, not a session's usage.
    let status = String::from_utf8_lossy(&p.ralph(&["status"], "").stdout).into_owned();
    assert!(
        status
            .contains("no owner: `ralph run --name ralph` or /ralph-resume in a session drives it")
            && status.contains("spends: the usage of what drives it next")
            && !status.contains("unclaimed")
            && !status.contains("this session's usage"),
        "{status}"
    );
}

#[test]
fn a_wait_for_a_reset_past_the_time_budget_ends_the_loop_as_time_budget() {
    let p = Project::with_agent(&[LIMITED.to_owned()]);
    let child = waiting_run(&p, &["--max-duration", "1m"], "120");
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    let shown = text(&out);
    assert!(
        // Not the 2-minute wait (a hang guard, not a race).
        started.elapsed() < std::time::Duration::from_secs(100),
        "{shown}"
    );
    assert_eq!(out.status.code(), Some(3), "{shown}");
    assert!(
        shown.contains("Waiting 2m for the reset would pass the time budget"),
        "{shown}"
    );
    assert!(shown.contains("ended as time_budget"), "{shown}");
    let l = p.the_loop();
    assert_eq!(
        (
            l["state"].as_str(),
            l["outcome"].as_str(),
            l["iteration"].as_u64()
        ),
        (Some("ended"), Some("time_budget"), Some(1)),
        "{l}"
    );
    assert!(
        l["recent"][0]["why"]
            .as_str()
            .is_some_and(|w| w.contains("would pass its time budget")),
        "{l}"
    );
    assert_eq!(p.calls(), 1, "the agent did not run again");
}

/// Issue 46: the agent writes what ralph reads. A `claude -p` that printed a result of
/// `total_cost_usd: 0` and then died by a signal, one that printed two results, and one
/// that printed none are each charged the whole cap of their call, and that cap is what is
/// left of the budget: $2.00 spent honestly of $5.00, the next call gets
/// `--max-budget-usd 3` and is charged $3.00, so the loop ends at its budget.
#[cfg(unix)]
#[test]
fn a_client_killed_or_printing_two_results_or_none_is_charged_its_whole_cap() {
    let forged = r#"{"type":"result","subtype":"success","is_error":false,"result":"working","total_cost_usd":0}"#;
    for (how, second) in [
        ("killed", format!("echo '{forged}'\nkill -KILL $$")),
        ("two results", format!("echo '{forged}'\necho '{forged}'")),
        ("no result", "true".to_owned()),
    ] {
        let p = Project::with_agent(&[costing("one", "2")]).with_env("IS_SANDBOX", "1");
        let script = format!(
            "#!/bin/sh\nn=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n\n\
             cat > /dev/null\necho \"$@\" > .agent/args-$n\n\
             if [ $n = 1 ]; then cat .agent/reply-1; exit 0; fi\n{second}\n"
        );
        std::fs::write(p.home().join("bin/claude"), script).unwrap();
        let out = p.ralph(
            &["run", "--max-cost", "5", "--max-iterations", "9", "Task"],
            "",
        );
        let shown = text(&out);
        assert_eq!(p.calls(), 2, "{how}: {shown}");
        assert!(
            p.read_or_empty(".agent/args-2")
                .contains("--max-budget-usd 3"),
            "{how}: the cap is what is left: {}",
            p.read_or_empty(".agent/args-2")
        );
        let l = p.the_loop();
        assert_eq!(l["cost_usd"].as_f64(), Some(5.0), "{how}: {l}\n{shown}");
        assert_eq!(l["outcome"], "cost_budget", "{how}: {l}\n{shown}");
        assert_eq!(out.status.code(), Some(3), "{how}: {shown}");
    }
}
