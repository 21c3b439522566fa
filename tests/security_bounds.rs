//! Only the user raises a bound (issue 46), through the real binary: the agent's own shell,
//! with no terminal or with a pseudo-terminal it opens itself (`script`), cannot run
//! `ralph resume --add-iterations` (nor `ralph start --force` over its loop), under
//! `ralph run` with and without `--sandbox`, nor write the loop file in the sandbox; the user's `/ralph-resume --add-iterations` typed
//! in the session raises it. One test drives the real client, whose model tries the same from
//! its Bash tool.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;

use serde_json::{Value, json};

use crate::support::project::{Project, UserTerminal};
use crate::support::{BIN, LOOP, text};

/// An agent that tries every route to more iterations, then replies without the promise:
/// `ralph resume --add-iterations 20` with no terminal, under `script` (a terminal of its
/// own, answered `y`), and an edit of the loop file.
const GREEDY: &str = r#"cat > /dev/null
n=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n
if [ $n = 1 ]; then
  # A grandchild left behind by a double fork: its parent exits at once.
  printf '%s\n' 'sleep 0.2' 'ralph resume --add-iterations 20 > .agent/orphan.tmp 2>&1' \
    'echo "exit $?" >> .agent/orphan.tmp' 'mv .agent/orphan.tmp .agent/orphan' > .agent/orphan.sh
  sh -c 'sh .agent/orphan.sh &'
else
  i=0; while [ ! -e .agent/orphan ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
fi
ralph resume --add-iterations 20 > .agent/plain-$n 2>&1; echo "exit $?" >> .agent/plain-$n
printf 'y\n' | script -qec "ralph resume --add-iterations 20" /dev/null > .agent/pty-$n 2>&1; echo "exit $?" >> .agent/pty-$n
ralph start --force --max-iterations 99 Again > .agent/force-$n 2>&1; echo "exit $?" >> .agent/force-$n
ralph adopt --yes > .agent/adopt-$n 2>&1; echo "exit $?" >> .agent/adopt-$n
if [ -n "$RALPH_SANDBOX" ]; then
  sed -i 's/^max_iterations: .*/max_iterations: 99/' .claude/ralph-loop.local.md 2> .agent/edit-$n; echo "exit $?" >> .agent/edit-$n
  echo 'max_iterations: 99' >> .claude/ralph-loop.local.md 2>> .agent/edit-$n; echo "exit $?" >> .agent/edit-$n
fi
echo "still working"
"#;

fn bin_dir() -> String {
    Path::new(BIN).parent().unwrap().display().to_string()
}

fn the_loop(p: &Project) -> Value {
    let out = p.ralph_with(&["status", "--json"], b"", &[]);
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    all["loops"][0].clone()
}

#[cfg(target_os = "linux")]
#[test]
fn the_agent_of_ralph_run_cannot_raise_its_own_bounds_sandboxed_or_not() {
    let sandboxed = crate::sandbox::bwrap_or_skip("security_bounds: ralph run --sandbox");
    let has_script = std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(has_script, "util-linux's `script` is needed");
    for sandbox in [false, true].into_iter().filter(|s| !s || sandboxed) {
        let p = Project::new();
        p.write(".agent/agent.sh", GREEDY);
        let path = format!("{}:{}", bin_dir(), std::env::var("PATH").unwrap());
        let mut args = vec!["run"];
        if sandbox {
            args.push("--sandbox");
        }
        args.extend([
            "--agent",
            "sh .agent/agent.sh",
            "--max-iterations",
            "2",
            "Task",
        ]);
        let out = p.ralph_with(&args, b"", &[("PATH", &path)]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(3), "sandbox {sandbox}: {said}");
        assert_eq!(p.read(".agent/n").trim(), "2", "sandbox {sandbox}: {said}");
        let l = the_loop(&p);
        assert_eq!(
            (l["outcome"].as_str(), l["max_iterations"].as_u64()),
            (Some("max_iterations"), Some(2)),
            "sandbox {sandbox}: {l}"
        );
        for probe in ["plain-1", "pty-1", "force-1", "plain-2", "pty-2", "force-2"] {
            let seen = p.read(&format!(".agent/{probe}"));
            assert!(
                !seen.contains("exit 0"),
                "sandbox {sandbox}: {probe}: {seen}"
            );
        }
        if sandbox {
            let seen = p.read(".agent/edit-1");
            assert!(
                seen.matches("exit ").count() == 2 && !seen.contains("exit 0"),
                "the loop file is read only in the sandbox: {seen}"
            );
        } else {
            for probe in ["pty-1", "force-1", "adopt-1", "orphan"] {
                let seen = p.read(&format!(".agent/{probe}"));
                assert!(seen.contains("below a `ralph run`"), "{probe}: {seen}");
            }
        }
    }
}

/// `/ralph-resume` typed by the user, as the prompt hook gets it.
fn typed(p: &Project, prompt: &str) -> Value {
    let event = json!({"session_id": "s1", "cwd": p.root(), "hook_event_name": "UserPromptSubmit", "prompt": prompt});
    let out = p.ralph_with(&["hook", "prompt"], event.to_string().as_bytes(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn in_a_session_the_agents_shell_cannot_raise_a_bound_and_the_users_slash_command_can() {
    let p = Project::new();
    let out = p.ralph_with(
        &[
            "start",
            "--session-id",
            "s1",
            "--max-iterations",
            "3",
            "Task",
        ],
        b"",
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    // The agent's Bash tool: no terminal.
    let plain = p.ralph_with(&["resume", "--add-iterations", "20"], b"", &[]);
    assert!(!plain.status.success(), "{}", text(&plain));
    assert!(
        text(&plain).contains("Only you raise a loop's bounds"),
        "{}",
        text(&plain)
    );
    // A terminal of its own, made after the loop began, answered by the agent.
    let command = format!("{BIN} resume --add-iterations 20");
    let pty = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(p.root())
        .envs(p.user_env())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            let _ = child.stdin.take().unwrap().write_all(b"y\n");
            child.wait_with_output()
        })
        .unwrap();
    let said = text(&pty);
    assert!(!pty.status.success(), "{said}");
    assert!(said.contains("session began after the loop did"), "{said}");
    assert!(
        p.read(LOOP).contains("max_iterations: 3"),
        "{}",
        p.read(LOOP)
    );
    // The user's own slash command.
    let answer = typed(&p, "/ralph-resume --add-iterations 20");
    assert!(answer.get("decision").is_none(), "{answer}");
    assert!(
        p.read(LOOP).contains("max_iterations: 23"),
        "{}",
        p.read(LOOP)
    );
}

/// One Stop of session s1 after `reply`, answered by the hook.
fn stopped(p: &Project, reply: &str) -> Value {
    let event = json!({"session_id": "s1", "cwd": p.root(), "hook_event_name": "Stop",
        "last_assistant_message": reply});
    let out = p.ralph_with(&["hook", "stop"], event.to_string().as_bytes(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_raised_bound_is_told_to_the_session_at_its_next_stop_once_and_logged() {
    let p = Project::new();
    let out = p.ralph_with(
        &[
            "start",
            "--session-id",
            "s1",
            "--max-iterations",
            "3",
            "--max-cost",
            "5",
            "Task",
        ],
        b"",
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let first = stopped(&p, "step one");
    let reason = first["reason"].as_str().unwrap();
    assert!(!reason.contains("Bounds raised"), "{reason}");
    typed(&p, "/ralph-resume --add-iterations 20");
    typed(&p, "/ralph-resume --add-cost 2.50");
    let told = stopped(&p, "step two");
    let (reason, shown) = (
        told["reason"].as_str().unwrap(),
        told["systemMessage"].as_str().unwrap_or_default(),
    );
    for said in [reason, shown] {
        assert!(
            said.contains("iterations 3 → 23") && said.contains("dollars $5.00 → $7.50"),
            "old and new bound: {said}"
        );
    }
    assert!(reason.contains("## Bounds raised by the user"), "{reason}");
    let again = stopped(&p, "step three");
    let (reason, shown) = (
        again["reason"].as_str().unwrap(),
        again["systemMessage"].as_str().unwrap_or_default(),
    );
    assert!(
        !reason.contains("→") && !shown.contains("bounds raised"),
        "told once: {reason}\n{shown}"
    );
    let log = p.read(".claude/ralph/logs/ralph.jsonl");
    assert!(log.contains("bounds raised: iterations 3 → 23"), "{log}");
    assert_eq!(
        log.matches("Told the agent: bounds raised: iterations 3 → 23, dollars $5.00 → $7.50.")
            .count(),
        1,
        "{log}"
    );
}

/// Issue 46: in a session (no `ralph run` above), the agent's shell cannot force a new
/// loop over the live one, nor adopt a loop file it planted: no terminal, refused; a
/// pseudo-terminal it opens itself (`script`) is younger than the loop, refused too.
#[cfg(target_os = "linux")]
#[test]
fn in_a_session_the_agents_shell_cannot_force_over_the_loop_or_adopt_one() {
    let p = Project::new();
    let armed = p.ralph_with(
        &[
            "start",
            "--session-id",
            "s1",
            "--max-iterations",
            "3",
            "Task",
        ],
        b"",
        &[],
    );
    assert!(armed.status.success(), "{}", text(&armed));
    let force = ["start", "--force", "--max-iterations", "99", "Again"];
    let plain = p.ralph_with(&force, b"", &[]);
    let pty = p.ralph_on_terminal(&force, "y\n");
    for (out, why) in [
        (&plain, "there is no terminal to ask you on"),
        (&pty, "session began after the loop did"),
    ] {
        let said = text(out);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains(why), "{said}");
    }
    assert!(
        p.read(LOOP).contains("max_iterations: 3"),
        "{}",
        p.read(LOOP)
    );
    // A loop file the agent wrote itself, then adopted with --yes.
    p.write(
        ".claude/mine-loop.local.md",
        "---\nactive: true\niteration: 1\nmax_iterations: 99\n---\n\nMore\n",
    );
    let adopt = p.ralph_with(&["adopt", "--yes", "--name", "mine"], b"", &[]);
    let said = text(&adopt);
    assert!(!adopt.status.success(), "{said}");
    assert!(said.contains("no terminal to ask on"), "{said}");
    let status = p.ralph_with(&["status", "--json"], b"", &[]);
    let all: Value = serde_json::from_slice(&status.stdout).unwrap();
    let mine = all["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "mine")
        .cloned()
        .unwrap_or_default();
    assert_eq!(mine["armed"], false, "{all:#}");
}

/// Issue 46: a bound the user raised is named in `ralph run`'s output and in the next
/// continuation's prompt, once, with the old and new bound.
#[cfg(target_os = "linux")]
#[test]
fn a_raised_bound_is_told_in_ralph_runs_output_and_the_next_prompt_once() {
    let p = Project::new();
    p.write(
        ".agent/agent.sh",
        "n=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n\ncat > .agent/prompt-$n\necho \"step $n\"\n",
    );
    // The user's terminal, open before the loop began.
    let mut terminal = UserTerminal::open(&p);
    let agent = ["--agent", "sh .agent/agent.sh"];
    let first = p.ralph_with(
        &["run", agent[0], agent[1], "--max-iterations", "1", "Task"],
        b"",
        &[],
    );
    assert_eq!(first.status.code(), Some(3), "{}", text(&first));
    let (code, screen) = terminal.ralph(&["resume", "--add-iterations", "2"], "y\n");
    assert_eq!(code, 0, "{screen}");
    let again = p.ralph_with(&["run", agent[0], agent[1], "--name", "ralph"], b"", &[]);
    let said = text(&again);
    assert_eq!(again.status.code(), Some(3), "{said}");
    assert_eq!(
        said.matches("bounds raised by you, the agent is told: iterations 1 → 3")
            .count(),
        1,
        "{said}"
    );
    let told = p.read(".agent/prompt-3");
    assert!(
        told.contains("## Bounds raised by the user\n\n- iterations 1 → 3"),
        "{told}"
    );
    assert!(!p.read(".agent/prompt-2").contains("Bounds raised"));
}

/// Issue 46, in a session through the real client (2.1.328, print mode, every Bash command
/// allowed): the model, scripted by the mock, runs `ralph resume --add-iterations 20` and
/// `ralph start --force --max-iterations 50 …` with its Bash tool. Each is refused (the tool
/// result the model is shown says why), and the loop still ends at its two iterations.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn e2e_the_models_bash_cannot_raise_its_loops_bound_in_a_session() {
    use crate::support::mock_api::{MockApi, Reply};
    use crate::support::sandbox_or_skip;
    const OWNER: &str = "5b360de9-4646-4000-8000-00000000abcd";
    let sandbox = sandbox_or_skip!("e2e_the_models_bash_cannot_raise_its_loops_bound_in_a_session");
    let armed = sandbox.ralph(&[
        "start",
        "--session-id",
        OWNER,
        "--max-iterations",
        "2",
        "--completion-promise",
        "DONE",
        "Write the user guide",
    ]);
    assert!(armed.status.success(), "{}", text(&armed));
    let raise = r#""$RALPH_BIN" resume --add-iterations 20; echo "resume exit $?"; "$RALPH_BIN" start --force --max-iterations 50 --completion-promise DONE Keep going; echo "force exit $?""#;
    let mut replies = vec![Reply::bash("I need more room.", raise)];
    replies.extend(
        [
            "Chapter one.",
            "Chapter two.",
            "Chapter three.",
            "Chapter four.",
        ]
        .map(Reply::text),
    );
    let api = MockApi::start(replies);
    let run = sandbox.claude(
        &api,
        "Write the user guide",
        &["--session-id", OWNER, "--allowedTools", "Bash"],
    );
    assert!(run.status.success(), "{}", run.describe());
    let ended = sandbox.loop_status("ralph");
    assert_eq!(
        (
            ended["outcome"].as_str(),
            ended["iteration"].as_u64(),
            ended["max_iterations"].as_u64()
        ),
        (Some("max_iterations"), Some(2), Some(2)),
        "{ended}\n{}\n{}",
        run.describe(),
        api.describe()
    );
    let turns = api.turns();
    assert!(turns.len() >= 2, "{}", api.describe());
    let shown = turns[1].messages_text();
    for refusal in [
        "Raise the bounds of loop `ralph`: refused, there is no terminal to ask you on",
        "resume exit 1",
        "Replace the live loop `ralph` with a new one (--force): refused, there is no terminal",
        "force exit 1",
    ] {
        assert!(shown.contains(refusal), "{refusal}: {}", api.describe());
    }
    assert_eq!(turns.len(), 3, "{}", api.describe());
}
