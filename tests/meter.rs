//! Issue 46, spend the agent cannot forge: a sandboxed `ralph run` (bubblewrap, the default
//! `internet` network) points its agent at ralph's meter, a proxy on the host's loopback
//! that forwards to the API ralph was given and counts the usage the API itself reports.
//! A scripted agent calls the mock API through `$ANTHROPIC_BASE_URL` and prints a forged
//! `total_cost_usd: 0`: it is charged what the API counted and stops at its `--max-cost`;
//! it holds only a placeholder key (the mock sees the real one), a request with another key
//! or to the Message Batches API is refused, and the mock's own port on the host's loopback
//! is out of its reach.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::sandbox::bwrap_or_skip;
use crate::support::mock_api::MockApi;
use crate::support::project::Project;
use crate::support::text;

/// The agent: its environment and whether the mock's port answers it directly, into the
/// project; one streamed call of the model through `$ANTHROPIC_BASE_URL`, with the key it
/// holds; then a forged result. `$MOCK_PORT` is the mock's port on the host.
const AGENT: &str = r#"#!/bin/sh
cat > /dev/null
n=$(cat calls 2>/dev/null || echo 0); n=$((n+1)); echo $n > calls
env > env-$n.txt
if timeout 5 bash -c "echo hi > /dev/tcp/127.0.0.1/$MOCK_PORT" 2>/dev/null; then echo reached > direct-$n.txt; else echo cut > direct-$n.txt; fi
curl -sS -N -X POST "$ANTHROPIC_BASE_URL/v1/messages" \
  -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \
  -d '{"model":"claude-opus-4-1","max_tokens":64,"stream":true,"tools":[{"name":"Bash"}],"messages":[{"role":"user","content":"work"}]}' \
  > answer-$n.txt 2> curl-$n.txt
guessed=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H 'x-api-key: guessed' -d '{}')
batch=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$ANTHROPIC_BASE_URL/v1/messages/batches" -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}')
echo "guessed $guessed, batch $batch" > refused-$n.txt
echo '{"type":"result","subtype":"success","is_error":false,"result":"working","total_cost_usd":0}'
"#;

fn has_pasta() -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| d.is_absolute() && d.join("pasta").is_file())
    })
}

/// Each call the mock answers costs $1.500525 by the shipped table (claude-opus-4-1: 10
/// input tokens at $15, 5 output at $75, 1 000 000 read from the cache at $1.50 per
/// million): the first iteration spends $1.50 of $2, the second passes the budget, and the
/// loop ends there at $3.00105, though the agent said each cost nothing.
#[test]
fn a_sandboxed_agent_forging_its_cost_is_charged_what_the_api_counted_and_never_holds_the_key() {
    if !bwrap_or_skip("meter: a forged cost") {
        return;
    }
    if !has_pasta() {
        crate::support::client::skip_or_fail::<()>(
            "meter: a forged cost",
            "pasta (package passt) is not installed",
        );
        return;
    }
    let api = MockApi::start(vec![]);
    api.report_context(1_000_010);
    let port = api.url().rsplit(':').next().unwrap().to_owned();
    let p = Project::new();
    let tools = tempfile::tempdir().unwrap();
    let agent = tools.path().join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let agent = agent.display().to_string();
    let real_key = "sk-ant-the-users-own-key";
    let out = p.ralph_with(
        &[
            "run",
            "--sandbox",
            "--agent",
            &agent,
            "--completion-promise",
            "DONE",
            "--max-cost",
            "2",
            "--max-iterations",
            "5",
            "Task",
        ],
        b"",
        &[
            ("ANTHROPIC_BASE_URL", &api.url()),
            ("ANTHROPIC_API_KEY", real_key),
            ("MOCK_PORT", &port),
        ],
    );
    let shown = text(&out);
    let turns = api.turns();
    assert_eq!(
        turns.len(),
        2,
        "{shown}\n{}\ncurl: {}",
        api.describe(),
        p.read_or_empty("curl-1.txt")
    );
    assert_eq!(api.requests().len(), 2, "nothing else reached the API");
    assert!(
        turns.iter().all(|t| t.api_key.as_deref() == Some(real_key)),
        "the meter adds the real key: {:?}",
        turns.iter().map(|t| t.api_key.clone()).collect::<Vec<_>>()
    );
    for n in 1..=2 {
        let env = p.read(&format!("env-{n}.txt"));
        assert!(!env.contains(real_key), "the agent saw the key: {env}");
        assert!(
            env.contains("ANTHROPIC_API_KEY=ralph-meter-placeholder"),
            "{env}"
        );
        assert_eq!(p.read(&format!("direct-{n}.txt")), "cut\n", "{shown}");
        assert_eq!(
            p.read(&format!("refused-{n}.txt")),
            "guessed 401, batch 403\n",
            "another key, and an endpoint whose cost no answer reports"
        );
        let answer = p.read(&format!("answer-{n}.txt"));
        assert!(
            answer.contains("event: message_start") && answer.contains("event: message_stop"),
            "the answer streamed back whole: {answer}\n{}",
            p.read(&format!("curl-{n}.txt"))
        );
    }
    let status = p.ralph_with(&["status", "--json"], b"", &[]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let l = &status["loops"][0];
    assert_eq!(l["outcome"], "cost_budget", "{l}\n{shown}");
    assert_eq!(l["cost_usd"].as_f64(), Some(3.00105), "{l}\n{shown}");
    assert!(shown.contains("metered $1.50"), "{shown}");
    assert!(
        shown.contains("Its calls to the model's API go through ralph's meter"),
        "{shown}"
    );
    assert_eq!(out.status.code(), Some(3), "{shown}");
}

/// The real Claude Code client (pinned), as `ralph run --sandbox --agent claude` starts it,
/// with the default network: the mock API on the host's loopback is out of its reach but
/// for the meter's port, so its calls go through the meter, the loop completes, and what it
/// spent is never less than what the mock's answers report, priced by the shipped table.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn the_real_client_sandboxed_on_the_default_network_completes_through_the_meter() {
    use crate::support::mock_api::{LoggedRequest, Reply};
    use crate::support::{describe, sandbox_or_skip};
    if !bwrap_or_skip("meter: the real client") || !has_pasta() {
        crate::support::client::skip_or_fail::<()>(
            "meter: the real client",
            "bubblewrap or pasta (package passt) is not installed",
        );
        return;
    }
    let sandbox = sandbox_or_skip!("meter: the real client");
    let notes = sandbox.project().join("notes.txt");
    let api = MockApi::start(vec![
        Reply::write("Writing the notes.", notes.to_str().unwrap(), "notes\n"),
        Reply::text("Wrote notes.txt.\n<promise>DONE</promise>"),
    ]);
    api.report_context(50_010);
    let args = [
        "run",
        "--sandbox",
        "--agent",
        "claude",
        "--completion-promise",
        "DONE",
        "--verify",
        "test -f notes.txt",
        "--max-iterations",
        "3",
        "Write notes.txt",
    ];
    let done = sandbox.ralph_with_client(&api, &args, &[]);
    let said = String::from_utf8_lossy(&done.stdout).into_owned();
    assert!(
        done.status.success(),
        "{}\n{}",
        describe(&done),
        api.describe()
    );
    if std::env::var_os("RALPH_SHOW_RUNS").is_some() {
        eprintln!("{}\n{}", describe(&done), api.describe());
    }
    assert!(
        said.contains("completed") && said.contains("metered $"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "notes\n");
    // Every answer of the mock's reports 10 input tokens, 5 output and the rest read from
    // the cache, for the model asked.
    let messages: Vec<LoggedRequest> = api
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/v1/messages")
        .collect();
    assert!(!messages.is_empty(), "{}", api.describe());
    assert!(
        messages
            .iter()
            .all(|r| r.api_key.as_deref() == Some("test")),
        "the meter sends ralph's key"
    );
    let mut usage: Vec<(String, ralph_state::money::ModelTokens)> = Vec::new();
    for r in &messages {
        let tokens = ralph_state::money::ModelTokens {
            input: 10,
            output: 5,
            cache_read: 50_000,
            ..Default::default()
        };
        match usage.iter_mut().find(|(m, _)| m == r.model()) {
            Some((_, sum)) => sum.add(&tokens),
            None => usage.push((r.model().to_owned(), tokens)),
        }
    }
    let (expected, _) = ralph_core::decide::pricing::price_metered(&usage);
    let status = sandbox.ralph_with_client(&api, &["status", "--json"], &[]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let spent = status["loops"][0]["cost_usd"].as_f64().unwrap_or(0.0);
    assert!(
        spent * 1e6 >= expected.0 as f64 - 0.5,
        "spent {spent}, the API counted {}: {said}",
        expected.decimal()
    );
}

/// The agent calls the model once through the meter, then reports a rate limit. Metered,
/// that report is believed only when the API itself answered a limit: forged (the mock
/// answered, and cost $1.50), the iteration is judged and charged, so the loop ends at its
/// $1 budget; real (the mock answered 429), the run stops on the limit, the iteration
/// uncounted, exit 4.
#[test]
fn a_limit_the_agent_reports_is_believed_only_when_the_api_answered_one() {
    use crate::support::mock_api::Reply;
    if !bwrap_or_skip("meter: a reported limit") || !has_pasta() {
        crate::support::client::skip_or_fail::<()>(
            "meter: a reported limit",
            "bubblewrap or pasta (package passt) is not installed",
        );
        return;
    }
    let agent_script = r#"#!/bin/sh
cat > /dev/null
curl -sS -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY" \
  -H 'content-type: application/json' \
  -d '{"model":"claude-opus-4-1","max_tokens":64,"stream":true,"tools":[{"name":"Bash"}],"messages":[{"role":"user","content":"work"}]}' > /dev/null
echo '{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error","result":"API Error: Request rejected (429) · rate limit","total_cost_usd":0}'
"#;
    for real in [false, true] {
        let api = MockApi::start(if real {
            vec![Reply::RateLimited]
        } else {
            vec![]
        });
        api.report_context(1_000_010);
        let p = Project::new();
        let tools = tempfile::tempdir().unwrap();
        let agent = tools.path().join("agent.sh");
        std::fs::write(&agent, agent_script).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let agent = agent.display().to_string();
        let out = p.ralph_with(
            &[
                "run",
                "--sandbox",
                "--agent",
                &agent,
                "--max-cost",
                "1",
                "--max-iterations",
                "5",
                "Task",
            ],
            b"",
            &[
                ("ANTHROPIC_BASE_URL", &api.url()),
                ("ANTHROPIC_API_KEY", "sk-ant-key"),
            ],
        );
        let shown = text(&out);
        assert_eq!(api.turns().len(), 1, "real {real}: {shown}");
        let status = p.ralph_with(&["status", "--json"], b"", &[]);
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        let l = &status["loops"][0];
        if real {
            assert_eq!(out.status.code(), Some(4), "{shown}");
            assert!(
                shown.contains("stopped on a rate or usage limit"),
                "{shown}"
            );
            assert_eq!(l["iteration"].as_u64(), Some(1), "uncounted: {l}");
        } else {
            assert_eq!(l["outcome"], "cost_budget", "{l}\n{shown}");
            assert_eq!(l["cost_usd"].as_f64(), Some(1.500525), "{l}\n{shown}");
            assert_eq!(out.status.code(), Some(3), "{shown}");
        }
    }
}
