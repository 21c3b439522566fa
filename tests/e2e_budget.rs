//! Real-client tests for the token budget (issue 19) and the block cap (issue 16): the pinned
//! Claude Code client in print mode, the plugin loaded with `--plugin-dir`, the loop armed with
//! `/ralph:ralph-loop`, and a scripted mock model whose every request costs 15 tokens (10 input,
//! 5 output, as the mock's `usage` says). See tests/e2e.rs for the harness and the skip rule.

use crate::support::{client, mock_api, sandbox_or_skip};

use client::Run;
use mock_api::{MockApi, Reply};

/// What one mock request costs in the transcript (input 10 + output 5).
const TURN_TOKENS: u64 = 15;

/// The client's own warning when it overrides a Stop hook at its block cap.
const OVERRIDE: &str = "overriding and ending turn";

/// Distinct text replies (no tools), so that no reply repeats.
fn text_replies(n: usize) -> Vec<Reply> {
    (1..=n)
        .map(|i| Reply::text(format!("Thinking, step {i}.")))
        .collect()
}

/// Everything the client printed and logged, where its override warning would show.
fn client_output(run: &Run) -> String {
    format!("{}\n{}\n{}", run.stdout, run.stderr, run.debug_log)
}

/// The token budget set between two turn boundaries: real usage reaches 100 at the 7th request
/// (105). The loop must end at most one turn after that, as `token_budget`, and well before the
/// client's block cap (9 requests at the default cap of 8), whether or not the transcript lags.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn token_budget_ends_within_a_turn_of_the_real_usage() {
    let sandbox = sandbox_or_skip!("token_budget_ends_within_a_turn_of_the_real_usage");
    let api = MockApi::start(text_replies(20));
    let run = sandbox.claude(
        &api,
        "/ralph:ralph-loop Work --max-iterations 20 --max-tokens 100 --stuck-after 0 --no-progress-after 0",
        &[],
    );
    assert!(run.status.success(), "{}", run.describe());
    let turns = api.turns().len() as u64;
    let crossing = 100u64.div_ceil(TURN_TOKENS); // the request whose usage reaches 100
    assert!(
        (crossing..=crossing + 1).contains(&turns),
        "{turns} requests; the budget was reached at request {crossing}\n{}\n{}",
        api.describe(),
        run.describe()
    );
    let l = sandbox.loop_status("ralph");
    assert_eq!(l["outcome"], "token_budget", "{l}\n{}", run.describe());
    // What ralph knew plus what it estimated covers the budget; the known count is what
    // the transcript proved (every request, the arming one included, or all but the last).
    let known = l["tokens_used"].as_u64().unwrap();
    let unseen = l["unseen_tokens"].as_u64().unwrap();
    assert!(known + unseen >= 100, "{l}");
    // The transcript may lag the Stop event by several replies (turns come within
    // milliseconds here); ralph counts the stops it answered against the replies the
    // transcript shows, and estimates each missing one: with every request costing the
    // same, known + estimate is the real usage.
    assert_eq!(known + unseen, turns * TURN_TOKENS, "{turns} requests, {l}");
    assert!(
        !client_output(&run).contains(OVERRIDE),
        "{}",
        run.describe()
    );
    let ended = "stopped: budget reached";
    assert!(
        run.stdout.contains(ended),
        "ralph's own notice: {}",
        run.describe()
    );
    let log = sandbox.ralph(&["log"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains(&format!("tokens {known}")),
        "ralph log shows the count: {log}"
    );
}

/// Replies without tools and the breakers off: at the default cap and at 1, 2 and 20, the loop
/// ends itself with its own message at the stop where the client would override the block,
/// and the client never prints its warning.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn block_cap_the_loop_ends_before_the_client_overrides_it() {
    for cap in [None, Some(1), Some(2), Some(20)] {
        let name = format!("block_cap_the_loop_ends_before_the_client_overrides_it (cap {cap:?})");
        let sandbox = sandbox_or_skip!(&name);
        let api = MockApi::start(text_replies(30));
        let cap_text = cap.map(|c: u64| c.to_string());
        let env: Vec<(&str, &str)> = cap_text
            .as_deref()
            .map(|c| ("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", c))
            .into_iter()
            .collect();
        let run = sandbox.claude_with_env(
            &api,
            "/ralph:ralph-loop Ponder --max-iterations 40 --stuck-after 0 --no-progress-after 0",
            &[],
            &env,
        );
        assert!(run.status.success(), "{name}\n{}", run.describe());
        let blocks = cap.unwrap_or(8);
        assert_eq!(
            api.turns().len() as u64,
            blocks + 1,
            "{name}: the client allows {blocks} blocks\n{}\n{}",
            api.describe(),
            run.describe()
        );
        assert!(
            !client_output(&run).contains(OVERRIDE),
            "{name}: the client overrode the hook\n{}",
            run.describe()
        );
        assert!(
            run.stdout
                .contains("stopped before Claude Code's block cap"),
            "{name}: ralph's own message\n{}",
            run.describe()
        );
        let l = sandbox.loop_status("ralph");
        assert_eq!(l["outcome"], "block_cap", "{name}: {l}");
    }
}

/// A loop whose continuations run a tool is not ended by the block-cap guard, even at cap 1:
/// the client starts its count over after a tool, and ralph sees the tool in the transcript.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn block_cap_a_loop_that_runs_tools_is_not_ended() {
    let sandbox = sandbox_or_skip!("block_cap_a_loop_that_runs_tools_is_not_ended");
    let mut script = Vec::new();
    for i in 1..=6 {
        script.push(Reply::bash(format!("Checking, step {i}."), "true"));
        script.push(Reply::text(format!("Checked, step {i}.")));
    }
    let api = MockApi::start(script);
    let run = sandbox.claude_with_env(
        &api,
        "/ralph:ralph-loop Work --max-iterations 5 --stuck-after 0 --no-progress-after 0",
        &["--allowedTools", "Bash(true)"],
        &[("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "1")],
    );
    assert!(run.status.success(), "{}", run.describe());
    let l = sandbox.loop_status("ralph");
    assert_eq!(
        (l["outcome"].as_str(), l["iteration"].as_u64()),
        (Some("max_iterations"), Some(5)),
        "{l}\n{}\n{}",
        api.describe(),
        run.describe()
    );
    assert_eq!(api.turns().len(), 10, "{}", api.describe());
    assert!(
        !client_output(&run).contains(OVERRIDE),
        "{}",
        run.describe()
    );
}

/// `ralph run` reads the usage from the agent's JSON result, which has no lag: 15, 30, 45 of a
/// budget of 40 ends after exactly three processes.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn ralph_run_token_budget_is_exact() {
    let sandbox = sandbox_or_skip!("ralph_run_token_budget_is_exact");
    let api = MockApi::start(text_replies(10));
    let agent = format!(
        "'{}' -p --output-format json",
        sandbox.claude_path().display()
    );
    let out = sandbox.ralph_with_api(
        &api,
        &[
            "run",
            "--agent",
            &agent,
            "--max-tokens",
            "40",
            "--max-iterations",
            "9",
            "--stuck-after",
            "0",
            "Work",
        ],
    );
    assert_eq!(api.turns().len(), 3, "{}\n{out:?}", api.describe());
    let l = sandbox.loop_status("ralph");
    assert_eq!(
        (
            l["outcome"].as_str(),
            l["tokens_used"].as_u64(),
            l["unseen_tokens"].as_u64()
        ),
        (Some("token_budget"), Some(45), Some(0)),
        "{l}"
    );
}

/// What one mock request costs at the shipped price of Claude Sonnet 4.6 ($3 in, $15 out per
/// million): 10 × 3 + 5 × 15 = 105 millionths of a dollar.
const TURN_MICRO_USD: u64 = 105;

/// The dollar budget set between two turn boundaries: the real spend reaches $0.0007 at the
/// 7th request ($0.000735). The hook prices what the transcript proves, so the loop must end
/// as `cost_budget` at that request or at most one later, with the client's own block cap
/// never reached, and its record must hold the exact figure of the requests it counted.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn cost_budget_ends_within_a_turn_of_the_real_spend() {
    let sandbox = sandbox_or_skip!("cost_budget_ends_within_a_turn_of_the_real_spend");
    let api = MockApi::start(text_replies(20));
    let run = sandbox.claude(
        &api,
        "/ralph:ralph-loop Work --max-iterations 20 --max-cost 0.0007 --stuck-after 0 --no-progress-after 0",
        &["--model", "claude-sonnet-4-6"],
    );
    assert!(run.status.success(), "{}", run.describe());
    let models: Vec<String> = api.turns().iter().map(|t| t.model().to_owned()).collect();
    assert!(
        models.iter().all(|m| m == "claude-sonnet-4-6"),
        "the client asked for {models:?}"
    );
    let turns = api.turns().len() as u64;
    let crossing = 700u64.div_ceil(TURN_MICRO_USD);
    assert!(
        (crossing..=crossing + 1).contains(&turns),
        "{turns} requests; the budget was reached at request {crossing}\n{}\n{}",
        api.describe(),
        run.describe()
    );
    let l = sandbox.loop_status("ralph");
    assert_eq!(l["outcome"], "cost_budget", "{l}\n{}", run.describe());
    let spent = (l["cost_usd"].as_f64().unwrap() * 1e6).round() as u64;
    // What the transcript proved, plus one estimate per reply it had not
    // written yet (the hook's view lags the client: README, "Token budget in
    // the hook"): together they reached the budget, and neither is more than
    // what was really spent.
    let unseen_replies = l["unseen_tokens"].as_u64().unwrap_or(0) / TURN_TOKENS;
    let estimate = (l["largest_reply_cost_usd"].as_f64().unwrap_or(0.0) * 1e6).round() as u64;
    assert!(spent + unseen_replies * estimate >= 700, "{l}");
    assert_eq!(
        spent % TURN_MICRO_USD,
        0,
        "whole requests, priced exactly: {l}"
    );
    assert!(spent <= turns * TURN_MICRO_USD, "{l}");
    assert!(
        !client_output(&run).contains(OVERRIDE),
        "{}",
        run.describe()
    );
    assert!(
        run.stdout.contains("stopped: budget reached"),
        "{}",
        run.describe()
    );
}

/// A rate limit in the real client: the arming turn ends, the Stop hook feeds the prompt back,
/// and the API answers that continuation with HTTP 429 (Anthropic's error JSON, `retry-after`
/// and `anthropic-ratelimit-requests-reset` headers; the client's own retries off with
/// `CLAUDE_CODE_MAX_RETRIES=0`). The client runs `StopFailure` instead of Stop: the loop is
/// paused at the iteration it was on, uncounted, and says why (or, when the exiting client
/// stops that hook first, `SessionEnd` pauses it). `/ralph:ralph-resume` in the same session
/// then takes it out of the pause, and the loop runs to its promise.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn a_rate_limit_pauses_the_loop_and_ralph_resume_goes_on() {
    const SESSION: &str = "5b360de9-3030-4000-8000-0000000000aa";
    let sandbox = sandbox_or_skip!("a_rate_limit_pauses_the_loop_and_ralph_resume_goes_on");
    let api = MockApi::start(vec![Reply::text("Started."), Reply::RateLimited]);
    let run = sandbox.claude_with_env(
        &api,
        "/ralph:ralph-loop Work --max-iterations 10 --completion-promise DONE",
        &["--session-id", SESSION],
        &[("CLAUDE_CODE_MAX_RETRIES", "0")],
    );
    assert_eq!(
        api.turns().len(),
        2,
        "{}\n{}",
        api.describe(),
        run.describe()
    );
    let l = sandbox.loop_status("ralph");
    assert_eq!(
        (l["state"].as_str(), l["iteration"].as_u64()),
        (Some("paused"), Some(2)),
        "paused where the limit struck, uncounted: {l}\n{}",
        run.describe()
    );
    // The client runs the plugin's StopFailure hook with the error it classified.
    assert!(
        run.debug_log.contains(
            "StopFailure:rate_limit [\"${CLAUDE_PLUGIN_ROOT}\"/bin/ralph hook stop-failure]"
        ),
        "{}",
        run.describe()
    );
    // In print mode the session ends right after the failed turn, and the client may stop
    // the fire-and-forget StopFailure hook on its way out ("completed with status 1", in
    // about half of the runs here); then SessionEnd's pause is the one that holds. Either
    // way the loop waits, uncounted, at the iteration the limit struck.
    let log = sandbox.ralph(&["log"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains("pause — rate limited (rate_limit): API Error")
            || log.contains("pause — the session ended"),
        "{log}\n{}",
        run.describe()
    );

    let api = MockApi::start(vec![
        Reply::text("Resumed."),
        Reply::text("<promise>DONE</promise>"),
    ]);
    let run = sandbox.claude_with_env(
        &api,
        "/ralph:ralph-resume",
        &["--resume", SESSION],
        &[("CLAUDE_CODE_MAX_RETRIES", "0")],
    );
    assert!(run.status.success(), "{}", run.describe());
    let l = sandbox.loop_status("ralph");
    assert_eq!(
        l["outcome"],
        "completed",
        "{l}\n{}\n{}",
        api.describe(),
        run.describe()
    );
}

/// Background work in the real client: the agent starts a `Bash` command with
/// `run_in_background: true` and ends its turn. The Stop input carries it in
/// `background_tasks` (`[{"id","type":"shell","status":"running","description","command"}]`),
/// so ralph lets that stop through, uncounted, instead of feeding the prompt back while the
/// command runs; when it finishes the client wakes the session with a new turn (its
/// task-notification as the prompt), and the stop after that goes on with the loop.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn a_loop_with_background_work_is_not_spun() {
    let sandbox = sandbox_or_skip!("a_loop_with_background_work_is_not_spun");
    let api = MockApi::start(vec![
        Reply::tool(
            "Starting the build in the background.",
            "Bash",
            serde_json::json!({"command": "sleep 2; echo built", "run_in_background": true, "description": "build"}),
        ),
        Reply::text("The build runs in the background; I will wait for it."),
        Reply::text("The build finished."),
        Reply::text("<promise>DONE</promise>"),
    ]);
    let run = sandbox.claude(
        &api,
        "/ralph:ralph-loop Work --max-iterations 10 --completion-promise DONE --no-progress-after 0",
        &[],
    );
    assert!(run.status.success(), "{}", run.describe());
    let l = sandbox.loop_status("ralph");
    assert_eq!(
        (l["outcome"].as_str(), l["iteration"].as_u64()),
        (Some("completed"), Some(2)),
        "the wait was not counted: {l}\n{}\n{}",
        api.describe(),
        run.describe()
    );
    assert_eq!(
        api.turns().len(),
        4,
        "no continuation while the build ran: {}",
        api.describe()
    );
    let log = sandbox.ralph(&["log"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains(
            "iteration 1 pass — waiting for 1 background task (build) to wake the session"
        ),
        "{log}"
    );
    // The continuation came after the task's notification, not while it ran.
    let third = api.turns()[2].messages_text();
    assert!(third.contains("task-notification"), "{third}");
}
