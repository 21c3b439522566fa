//! `--check` in the real Claude Code client (print mode, the mock Messages API): a failing
//! check reaches the model in the continuation, the model fixes it with a real Bash tool
//! call, and the next check passes.

use crate::support::{mock_api, sandbox_or_skip};

use mock_api::{MockApi, Reply};
use serde_json::Value;

#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn a_failing_check_steers_the_loop_to_a_fix() {
    let sandbox = sandbox_or_skip!("a_failing_check_steers_the_loop_to_a_fix");
    let api = MockApi::start(vec![
        Reply::text("Started on the build."),
        Reply::bash("The check failed; creating the file.", "touch fixed.txt"),
        Reply::text("Created fixed.txt."),
        Reply::text("The check passes.\n<promise>DONE</promise>"),
    ]);
    let run = sandbox.claude(
        &api,
        "/ralph-loop Fix the build --max-iterations 6 --completion-promise DONE --check 'test -f fixed.txt || { echo \"fixed.txt is missing\"; exit 101; }'",
        &["--allowedTools", "Bash(touch:*)"],
    );
    assert!(run.status.success(), "{}", run.describe());
    let turns = api.turns();
    assert_eq!(turns.len(), 4, "{}\n{}", api.describe(), run.describe());
    let failed = turns[1].last_user_text();
    assert!(
        failed.contains("failed (exit 101)") && failed.contains("fixed.txt is missing"),
        "turn 2 must carry the failed check: {failed:?}\n{}",
        api.describe()
    );
    let passed = turns[3].last_user_text();
    assert!(
        passed.contains("exit 101; }` passed.") && !passed.contains("failed (exit"),
        "turn 4 must say the check passed: {passed:?}\n{}",
        api.describe()
    );
    assert!(sandbox.project().join("fixed.txt").exists());
    let status = sandbox.status_json();
    let ended: &Value = status["loops"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == "ralph"))
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(ended["outcome"], "completed", "{status}");
}
