//! Recovering a loop through the real binary: a checkpoint per iteration
//! (in `ralph run` and at the Stop hook) that moves nothing of the user's
//! git state, `ralph rollback`, `ralph resume --add-*` on an ended loop (and
//! `/ralph-resume --add-iterations` in the real client), a breaker's hand-over
//! and the pruning of checkpoints. Ctrl-C that pauses a run is in `run.rs`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::project::Project;
use crate::support::text;

/// A scripted agent: the Nth call writes `work-N.txt` into the work tree,
/// edits `a.txt`, and prints `.agent/reply-N` (or the last one written).
const AGENT: &str = r#"n=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n
cat > /dev/null
echo "work $n" > work-$n.txt
echo "a after $n" > a.txt
[ -f .agent/delay ] && sleep "$(cat .agent/delay)"
if [ -f .agent/reply-$n ]; then cat .agent/reply-$n; else cat "$(ls .agent/reply-* | sort -t- -k2 -n | tail -n 1)"; fi"#;

fn git(root: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A git project with one commit, a stash, an ignored file, a staged change
/// and the scripted agent (ignored, as an agent's scratch would be).
fn git_project(replies: &[&str]) -> Project {
    let p = Project::new();
    git(p.root(), &["init", "-q", "-b", "main"]);
    p.write(".gitignore", ".agent/\n.claude/\nbuild.log\n");
    p.write("a.txt", "a at the start\n");
    git(p.root(), &["add", "-A"]);
    git(p.root(), &["commit", "-qm", "start"]);
    p.write("a.txt", "stashed\n");
    git(p.root(), &["stash", "-q"]);
    p.write("staged.txt", "staged\n");
    git(p.root(), &["add", "staged.txt"]);
    p.write("build.log", "ignored\n");
    p.write(".agent/agent.sh", AGENT);
    for (i, r) in replies.iter().enumerate() {
        p.write(&format!(".agent/reply-{}", i + 1), r);
    }
    p
}

/// Everything of the user's git state a checkpoint must not move.
fn users_git_state(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut state = vec![
        (
            "HEAD".into(),
            git(root, &["rev-parse", "HEAD"]).into_bytes(),
        ),
        (
            "branch".into(),
            git(root, &["symbolic-ref", "HEAD"]).into_bytes(),
        ),
        ("stash".into(), git(root, &["stash", "list"]).into_bytes()),
        ("refs".into(), git(root, &["for-each-ref"]).into_bytes()),
    ];
    for file in [
        "index",
        "logs/HEAD",
        "logs/refs/heads/main",
        "logs/refs/stash",
    ] {
        state.push((
            file.into(),
            std::fs::read(root.join(".git").join(file)).unwrap(),
        ));
    }
    state
}

fn run(p: &Project, flags: &[&str]) -> std::process::Output {
    let mut args = vec!["run", "--agent", "sh .agent/agent.sh", "--name", "work"];
    args.extend_from_slice(flags);
    p.command(&args).output().unwrap()
}

/// The folder of the newest arming of loop `work`'s checkpoints, in this
/// test user's state folder.
fn arming_dir(p: &Project) -> Option<PathBuf> {
    let places = p.home().join(".local/state/ralph/checkpoints");
    std::fs::read_dir(places)
        .ok()?
        .filter_map(Result::ok)
        .find_map(|place| {
            let loop_dir = place.path().join("work");
            let nonce = std::fs::read_to_string(loop_dir.join("latest")).ok()?;
            Some(loop_dir.join(nonce.trim()))
        })
}

/// The checkpoints of the loop `work`, as (label, commit), labels sorted.
fn checkpoints(p: &Project) -> Vec<(String, String)> {
    let record = arming_dir(p)
        .and_then(|d| std::fs::read_to_string(d.join("record")).ok())
        .unwrap_or_default();
    let mut all: Vec<(String, String)> = record
        .lines()
        .map(|l| {
            let (label, commit) = l.split_once(' ').unwrap();
            (label.to_owned(), commit.to_owned())
        })
        .collect();
    all.sort_by_key(|(l, _)| (l.parse::<u64>().unwrap_or(u64::MAX), l.clone()));
    all
}

/// git in the project, reading the private store of loop `work`'s newest
/// arming too.
fn store_git(p: &Project, args: &[&str]) -> String {
    let objects = arming_dir(p).unwrap().join("objects");
    let out = Command::new("git")
        .arg("-C")
        .arg(p.root())
        .args(args)
        .env("GIT_OBJECT_DIRECTORY", objects)
        .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", p.path(".git/objects"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn files_of(p: &Project, commit: &str) -> String {
    store_git(p, &["ls-tree", "-r", "--name-only", commit])
}

#[test]
fn ralph_run_keeps_a_checkpoint_per_iteration_and_moves_nothing_of_the_users_git() {
    let p = git_project(&["one", "two", "three"]);
    // `git status` refreshes the index: it runs before the state is read.
    git(p.root(), &["status", "--porcelain"]);
    let before = users_git_state(p.root());
    let out = run(&p, &["--max-iterations", "3", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let kept = checkpoints(&p);
    let labels: Vec<&str> = kept.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["1", "2", "3"], "{kept:?}");
    assert_eq!(
        files_of(&p, &kept[0].1),
        ".gitignore\na.txt\nstaged.txt\nwork-1.txt\n"
    );
    assert_eq!(
        files_of(&p, &kept[2].1),
        ".gitignore\na.txt\nstaged.txt\nwork-1.txt\nwork-2.txt\nwork-3.txt\n"
    );
    assert_eq!(
        store_git(&p, &["show", &format!("{}:a.txt", kept[1].1)]),
        "a after 2\n"
    );
    assert_eq!(users_git_state(p.root()), before);
    assert!(!p.path(".git/logs/refs/ralph").exists());
}

#[test]
fn the_stop_hook_keeps_a_checkpoint_per_iteration_and_moves_nothing_of_the_users_git() {
    let p = git_project(&["x"]);
    let out = p
        .command(&[
            "start",
            "--session-id",
            "s1",
            "--name",
            "work",
            "--max-iterations",
            "5",
            "Task",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    git(p.root(), &["status", "--porcelain"]);
    let before = users_git_state(p.root());
    for n in 1..=2 {
        p.write(&format!("work-{n}.txt"), "w\n");
        let event =
            json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": "going on"});
        let out = p.ralph_with(&["hook", "stop"], event.to_string().as_bytes(), &[]);
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["decision"], "block", "{answer}");
    }
    let kept = checkpoints(&p);
    let labels: Vec<&str> = kept.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["1", "2"], "{kept:?}");
    assert!(files_of(&p, &kept[0].1).contains("work-1.txt"));
    assert!(!files_of(&p, &kept[0].1).contains("work-2.txt"));
    assert_eq!(users_git_state(p.root()), before);
}

#[test]
fn a_rollback_puts_an_iteration_back_and_the_tree_it_replaced_stays_recoverable() {
    let p = git_project(&["one", "two", "three"]);
    let out = run(&p, &["--max-iterations", "3", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    p.write("mine.txt", "written after the loop\n");
    let ignored_before = p.read("build.log");
    let index_before = std::fs::read(p.path(".git/index")).unwrap();

    let out = p.ralph_with(&["rollback", "--to", "1", "--name", "work"], b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("back at checkpoint 1"),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("ralph rollback --to undo-1 --name work"),
        "{}",
        text(&out)
    );
    assert_eq!(p.read("a.txt"), "a after 1\n");
    assert!(p.exists("work-1.txt"));
    for gone in ["work-2.txt", "work-3.txt", "mine.txt"] {
        assert!(!p.exists(gone), "{gone} is not in checkpoint 1");
    }
    assert_eq!(p.read("build.log"), ignored_before, "ignored files stay");
    assert!(p.exists(".agent/agent.sh"), "ignored folders stay");
    assert_eq!(std::fs::read(p.path(".git/index")).unwrap(), index_before);

    // Undone: the tree the rollback replaced comes back whole.
    let out = p.ralph_with(&["rollback", "--to", "undo-1", "--name", "work"], b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(p.read("a.txt"), "a after 3\n");
    assert_eq!(p.read("mine.txt"), "written after the loop\n");
    assert!(p.exists("work-3.txt"));
    let labels: Vec<String> = checkpoints(&p).into_iter().map(|(l, _)| l).collect();
    assert_eq!(labels, ["1", "2", "3", "undo-1", "undo-2"]);
}

#[test]
fn a_rollback_is_refused_while_the_loop_runs_and_for_a_checkpoint_it_lacks() {
    let p = git_project(&["one"]);
    let out = p
        .command(&["start", "--session-id", "s1", "--name", "work", "Task"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": "going on"});
    p.ralph_with(&["hook", "stop"], event.to_string().as_bytes(), &[]);
    p.write("a.txt", "kept\n");
    let out = p.ralph_with(&["rollback", "--to", "1", "--name", "work"], b"", &[]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("is running; pause it first"),
        "{}",
        text(&out)
    );
    assert_eq!(p.read("a.txt"), "kept\n");
    let out = p.ralph_with(&["pause", "--name", "work"], b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let out = p.ralph_with(&["rollback", "--to", "7", "--name", "work"], b"", &[]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("no checkpoint `7` (kept: 1)"),
        "{}",
        text(&out)
    );
    let out = p.ralph_with(&["rollback", "--to", "1", "--name", "work"], b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(p.read("a.txt"), "a at the start\n");
}

/// A Claude Code JSON result, `reply`, that spent ten cents.
fn ten_cents(reply: &str) -> String {
    format!(
        r#"{{"type":"result","subtype":"success","is_error":false,"result":"{reply}","total_cost_usd":0.1,"usage":{{"input_tokens":1,"output_tokens":1}}}}"#
    )
}

fn the_loop(p: &Project) -> Value {
    let out = p.ralph_with(&["status", "--json"], b"", &[]);
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    all["loops"][0].clone()
}

#[test]
fn a_loop_that_ended_at_3_of_3_given_two_more_runs_4_and_5_with_its_spend_carried_on() {
    let replies: Vec<String> = (1..=5).map(|n| ten_cents(&format!("step {n}"))).collect();
    let p = git_project(&replies.iter().map(String::as_str).collect::<Vec<_>>());
    let out = run(&p, &["--max-iterations", "3", "--max-cost", "5", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let ended = the_loop(&p);
    assert_eq!(
        (
            ended["outcome"].as_str(),
            ended["iteration"].as_u64(),
            ended["cost_usd"].as_f64()
        ),
        (Some("max_iterations"), Some(3), Some(0.3)),
        "{ended}"
    );

    // Only the user raises a bound: typed in a session (the prompt hook).
    let said = typed_resume(&p, "--name work --add-iterations 2");
    assert!(
        said.contains(
            "is armed again at iteration 4, its count, spend and log kept: iterations 3 → 5"
        ),
        "{said}"
    );
    let out = run(&p, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(p.path(".agent/n")).unwrap().trim(),
        "5",
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("iteration 4/5"), "{}", text(&out));
    let l = the_loop(&p);
    assert_eq!(
        (
            l["outcome"].as_str(),
            l["iteration"].as_u64(),
            l["max_iterations"].as_u64()
        ),
        (Some("max_iterations"), Some(5), Some(5)),
        "{l}"
    );
    assert_eq!(l["cost_usd"].as_f64(), Some(0.5), "the spend went on: {l}");
    let log = p.ralph_with(&["log", "--name", "work", "--json"], b"", &[]);
    let iterations: Vec<u64> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["decision"] == "block" || e["decision"] == "end")
        .filter_map(|e| e["iteration"].as_u64())
        .collect();
    assert_eq!(iterations, [1, 2, 3, 4, 5], "one log, kept");
    // Ended again, it may be given more again.
    let again = typed_resume(&p, "--name work --add-iterations 2");
    assert!(again.contains("is armed again"), "{again}");
}

/// `/ralph-resume TEXT` typed in session s1, as the prompt hook gets it: what the user
/// is shown.
fn typed_resume(p: &Project, text: &str) -> String {
    let event = serde_json::json!({"session_id": "s1", "cwd": p.root(),
        "hook_event_name": "UserPromptSubmit", "prompt": format!("/ralph-resume {text}")});
    let out = p.ralph_with(&["hook", "prompt"], event.to_string().as_bytes(), &[]);
    assert!(out.status.success(), "{}", crate::support::text(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    format!(
        "{}{}",
        answer["systemMessage"].as_str().unwrap_or(""),
        answer["reason"].as_str().unwrap_or("")
    )
}

#[test]
fn a_planted_history_record_is_never_armed_again() {
    let p = git_project(&["x"]);
    p.write(
        ".claude/ralph/history/20261201T000000Z-evil.md",
        "---\nactive: false\niteration: 3\nsession_id: s1\nmax_iterations: 3\ncompletion_promise: null\nverify: \"touch pwned\"\nstarted_at: \"2026-11-30T00:00:00Z\"\nralph_nonce: \"00112233445566778899aabbccddeeff\"\noutcome: max_iterations\nended_at: \"2026-12-01T00:00:00Z\"\n---\n\nTask\n",
    );
    let said = typed_resume(&p, "--name evil --add-iterations 2");
    assert!(
        said.contains("was not armed by you on this machine"),
        "{said}"
    );
    assert!(!p.exists(".claude/evil-loop.local.md"));
    assert!(p.exists(".claude/ralph/history/20261201T000000Z-evil.md"));
}

#[test]
fn checkpoints_go_when_their_history_record_goes() {
    let p = git_project(&["one", "two"]);
    let out = run(&p, &["--max-iterations", "2", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(checkpoints(&p).len(), 2);
    let arm = |name: &str| {
        let out = p
            .command(&["start", "--name", name, "--session-id", name, "Other task"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
    };
    arm("other");
    assert_eq!(
        checkpoints(&p).len(),
        2,
        "its history record is still there"
    );
    for entry in std::fs::read_dir(p.path(".claude/ralph/history")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    arm("third");
    assert!(checkpoints(&p).is_empty(), "{:?}", checkpoints(&p));
}

#[test]
fn a_breaker_names_the_last_green_checkpoint_and_leaves_a_hand_over() {
    let replies: Vec<String> = (1..=6).map(|n| format!("attempt {n}")).collect();
    let p = git_project(&replies.iter().map(String::as_str).collect::<Vec<_>>());
    // Passes after the first iteration only, then fails the same way.
    // The agent's counter is ignored, so not in the gate's snapshot: read where it is,
    // by a check run unconfined (`--gate-sandbox off`: its sandbox shows it only the snapshot).
    let check = format!(
        r#"[ "$(cat {}/.agent/n)" = 1 ] || {{ echo "FAILED: parser_test"; exit 1; }}"#,
        p.root().display()
    );
    let out = run(
        &p,
        &[
            "--max-iterations",
            "9",
            "--check",
            &check,
            // Its own sandbox would hide the counter outside the snapshot.
            "--gate-sandbox",
            "off",
            "--max-same-failure",
            "2",
            "Task",
        ],
    );
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(3), "{shown}");
    assert!(
        shown.contains("The last checkpoint where the check passed is iteration 1: `ralph rollback --to 1 --name work` puts that tree back."),
        "{shown}"
    );
    let handover = std::fs::read_dir(p.path(".claude/ralph/history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".handover.md"))
        .expect("a hand-over beside the record");
    assert!(
        shown.contains("Hand-over for the next agent or person"),
        "{shown}"
    );
    let text = std::fs::read_to_string(handover).unwrap();
    for want in [
        "# Hand-over: loop `work`",
        "It ended as same_failure",
        "  - iteration 2: attempt 2",
        "fingerprint `",
        "`ralph rollback --to 1 --name work`",
        "## Next step",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
    let status = p.ralph_with(&["status", "--json"], b"", &[]);
    let all: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        all["loops"].as_array().unwrap().len(),
        1,
        "the hand-over is no loop: {all}"
    );
}

/// In the real client: a loop that ended at its iteration limit is given five more with
/// `/ralph-resume --add-iterations 5`, and goes on in the same session, its count kept.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn ralph_resume_add_iterations_goes_on_in_the_same_session() {
    use crate::support::{mock_api, sandbox_or_skip};
    use mock_api::{MockApi, Reply};
    const OWNER: &str = "5b360de9-2222-4000-8000-00000000abcd";
    let sandbox = sandbox_or_skip!("ralph_resume_add_iterations_goes_on_in_the_same_session");
    let out = sandbox.ralph(&[
        "start",
        "--session-id",
        OWNER,
        "--max-iterations",
        "2",
        "--completion-promise",
        "DONE",
        "Write the user guide",
    ]);
    assert!(out.status.success(), "ralph start failed: {out:?}");
    let replies = || {
        [
            "Chapter one.",
            "Chapter two.",
            "Chapter three.",
            "Chapter four.",
        ]
        .iter()
        .map(|t| Reply::text(*t))
        .collect::<Vec<_>>()
    };
    let api = MockApi::start(replies());
    let run = sandbox.claude(&api, "Write the user guide", &["--session-id", OWNER]);
    assert!(run.status.success(), "{}", run.describe());
    let ended = sandbox.loop_status("ralph");
    assert_eq!(
        (ended["outcome"].as_str(), ended["iteration"].as_u64()),
        (Some("max_iterations"), Some(2)),
        "{ended}\n{}",
        run.describe()
    );

    let api = MockApi::start(replies());
    let run = sandbox.claude(
        &api,
        "/ralph-resume --add-iterations 5",
        &["--resume", OWNER, "--max-turns", "2"],
    );
    let turns = api.turns();
    assert!(!turns.is_empty(), "{}", run.describe());
    assert!(
        turns[0]
            .messages_text()
            .contains("Your task (Ralph loop `ralph`):\n\nWrite the user guide"),
        "the turn works on the task: {}",
        api.describe()
    );
    let told: Vec<String> = run
        .events()
        .iter()
        .filter(|e| e["type"] == "system" && e["subtype"] == "informational")
        .filter_map(|e| e["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        told.iter().any(|l| l.contains(
            "▶ Loop `ralph` is armed again at iteration 3, its count, spend and log kept: iterations 2 → 7."
        )),
        "{told:#?}\n{}",
        run.describe()
    );
    // Issue 46: the continuation after the resumed turn tells the agent of the raise.
    assert!(
        turns.len() >= 2
            && turns[1]
                .messages_text()
                .contains("## Bounds raised by the user\n\n- iterations 2 → 7"),
        "the next continuation names the raise: {}",
        api.describe()
    );
    let live = sandbox.loop_status("ralph");
    assert_eq!(live["max_iterations"], 7, "{live}");
    assert_eq!(
        live["iteration"].as_u64(),
        Some(3 + turns.len() as u64),
        "each Stop of this session counted its turn: {live}\n{}",
        api.describe()
    );
}

/// The nonce of the newest history record of loop `work`.
fn recorded_nonce(p: &Project) -> String {
    let mut records: Vec<PathBuf> = std::fs::read_dir(p.path(".claude/ralph/history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|f| f.extension().is_some_and(|x| x == "md"))
        .collect();
    records.sort();
    let text = std::fs::read_to_string(records.last().unwrap()).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ralph_nonce:"))
        .unwrap();
    line.trim().trim_matches('"').to_owned()
}

#[test]
fn a_repointed_checkpoint_ref_or_a_planted_history_record_never_chooses_what_a_rollback_writes() {
    let p = git_project(&["one", "two", "three"]);
    let out = run(&p, &["--max-iterations", "3", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let nonce = recorded_nonce(&p);
    // The agent makes a tree of its own and points every name a
    // checkpoint could have at it: the arming's refs, and those of a
    // planted, newer history record of the same loop.
    let evil_blob = git_with_input(p.root(), &["hash-object", "-w", "--stdin"], "evil\n");
    let tree = git_with_input(
        p.root(),
        &["mktree"],
        &format!("100644 blob {}\ta.txt\n", evil_blob.trim()),
    );
    let evil = git(p.root(), &["commit-tree", tree.trim(), "-m", "evil"]);
    let planted = "ffffffffffffffffffffffffffffffff";
    for run in [nonce.as_str(), planted] {
        for n in 1..=3 {
            let r = format!("refs/ralph/work/{run}/{n}");
            git(p.root(), &["update-ref", &r, evil.trim()]);
        }
    }
    let history = std::fs::read_dir(p.path(".claude/ralph/history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|f| f.extension().is_some_and(|x| x == "md"))
        .unwrap();
    let text_of = std::fs::read_to_string(&history).unwrap();
    p.write(
        ".claude/ralph/history/29991231T000000Z-work.md",
        &text_of.replace(&nonce, planted),
    );

    let out = p.ralph_with(&["rollback", "--to", "1", "--name", "work"], b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(p.read("a.txt"), "a after 1\n", "the tree ralph recorded");
    assert!(p.exists("work-1.txt") && !p.exists("work-2.txt"));
    let listed = p.ralph_with(&["rollback", "--list", "--name", "work"], b"", &[]);
    assert!(
        !text(&listed).contains(&evil.trim()[..12]),
        "{}",
        text(&listed)
    );
    // A recorded commit the store no longer holds is refused, not looked up elsewhere.
    let objects = arming_dir(&p).unwrap().join("objects");
    std::fs::remove_dir_all(&objects).unwrap();
    std::fs::create_dir(&objects).unwrap();
    let out = p.ralph_with(&["rollback", "--to", "3", "--name", "work"], b"", &[]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("which its store no longer holds; nothing was rolled back"),
        "{}",
        text(&out)
    );
    assert_eq!(p.read("a.txt"), "a after 1\n");
}

fn git_with_input(root: &Path, args: &[&str], input: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The size of the files under `dir`.
fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                size_of(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

#[test]
fn a_secret_and_a_large_file_never_reach_the_projects_git_a_bundle_or_a_checkpoint() {
    secret_and_large_file(false);
}

#[test]
#[cfg(target_os = "linux")]
fn a_sandboxed_agents_secret_and_large_file_never_reach_the_projects_git_or_a_checkpoint() {
    if crate::sandbox::bwrap_or_skip("recover: checkpoints under --sandbox") {
        secret_and_large_file(true);
    }
}

/// `ralph run` (sandboxed or not) of an agent that writes `.env` and a
/// 20 MiB file of fresh bytes every turn: neither reaches the project's
/// git, a bundle of it, or a checkpoint, and a rollback leaves them.
fn secret_and_large_file(sandbox: bool) {
    let p = git_project(&["one", "two", "three", "four"]);
    // Each turn also rewrites `.env` and a 20 MiB file of fresh bytes.
    p.write(
        ".agent/agent.sh",
        &format!(
            "echo \"TOKEN=$(cat .agent/n 2>/dev/null)\" > .env\nhead -c 20971520 /dev/urandom > big.bin\n{AGENT}"
        ),
    );
    p.write(".env", "TOKEN=0\n");
    git(p.root(), &["gc", "-q"]);
    let before = size_of(&p.path(".git"));
    let mut flags = vec!["--max-iterations", "4"];
    if sandbox {
        flags.push("--sandbox");
    }
    flags.push("Task");
    let out = run(&p, &flags);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains(
            "Left out of the checkpoints (a rollback never touches them): .env (a secret's name)."
        ),
        "named at arming: {}",
        text(&out)
    );
    let grown = size_of(&p.path(".git")).saturating_sub(before);
    assert!(grown < 2 * 1024 * 1024, ".git grew by {grown} bytes");
    let objects = git(p.root(), &["rev-list", "--all", "--objects"]);
    assert!(!objects.contains(".env"), "{objects}");
    assert!(!git(p.root(), &["for-each-ref"]).contains("ralph"));
    let bundle = p.home().join("all.bundle");
    git(
        p.root(),
        &["bundle", "create", bundle.to_str().unwrap(), "--all"],
    );
    let heads = git(
        p.root(),
        &["bundle", "list-heads", bundle.to_str().unwrap()],
    );
    assert!(!heads.contains("ralph"), "{heads}");
    let kept = checkpoints(&p);
    assert_eq!(kept.len(), 4, "{kept:?}");
    for (_, commit) in &kept {
        let files = files_of(&p, commit);
        assert!(
            !files.contains(".env") && !files.contains("big.bin"),
            "{files}"
        );
    }
    let listed = p.ralph_with(&["rollback", "--list", "--name", "work"], b"", &[]);
    let said = text(&listed);
    assert!(
        said.contains(".env (a secret's name)") && said.contains("big.bin (20 MiB)"),
        "{said}"
    );
    // A rollback leaves them as they are.
    let secret = p.read(".env");
    let out = p.ralph_with(&["rollback", "--to", "1", "--name", "work"], b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(p.read(".env"), secret);
    assert_eq!(
        std::fs::metadata(p.path("big.bin")).unwrap().len(),
        20971520
    );
}

#[cfg(unix)]
#[test]
fn a_link_at_git_refs_ralph_is_never_written_through() {
    let p = git_project(&["one", "two"]);
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), p.path(".git/refs/ralph")).unwrap();
    let out = run(&p, &["--max-iterations", "2", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let out = p
        .command(&["start", "--name", "other", "--session-id", "s2", "Other"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = p.ralph_with(&["rollback", "--to", "1", "--name", "work"], b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let written: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
    assert!(written.is_empty(), "{written:?}");
    assert_eq!(checkpoints(&p).len(), 3);
}

#[test]
fn uncommitted_edits_under_assume_unchanged_survive_a_rollback_and_its_undo() {
    let p = git_project(&["one", "two"]);
    p.write("keep.txt", "committed\n");
    git(p.root(), &["add", "keep.txt"]);
    git(p.root(), &["commit", "-qm", "keep"]);
    let out = run(&p, &["--max-iterations", "2", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    // The agent marks the file, then the user edits it (uncommitted).
    git(
        p.root(),
        &["update-index", "--assume-unchanged", "keep.txt"],
    );
    git(p.root(), &["update-index", "--skip-worktree", "a.txt"]);
    p.write("keep.txt", "my uncommitted edit\n");
    p.write("a.txt", "mine too\n");
    let out = p.ralph_with(&["rollback", "--to", "1", "--name", "work"], b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(p.read("a.txt"), "a after 1\n");
    let out = p.ralph_with(&["rollback", "--to", "undo-1", "--name", "work"], b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(p.read("keep.txt"), "my uncommitted edit\n");
    assert_eq!(p.read("a.txt"), "mine too\n");
}

/// A checkpoint borrows the objects it shares with the project from `.git/objects`, which an
/// agent running as the user can write. One rewritten in place (same name, other bytes; git
/// does not hash a loose object again when it reads it) refuses the rollback, and nothing of
/// the work tree is touched (issue 46).
#[cfg(unix)]
#[test]
fn a_borrowed_object_rewritten_in_place_refuses_the_rollback() {
    let p = git_project(&["one", "two"]);
    let out = run(&p, &["--max-iterations", "2", "Task"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let blob = git(p.root(), &["hash-object", ".gitignore"])
        .trim()
        .to_owned();
    p.write("planted.txt", "the agent's bytes\n");
    let planted = git(p.root(), &["hash-object", "-w", "planted.txt"])
        .trim()
        .to_owned();
    let object = |id: &str| p.path(&format!(".git/objects/{}/{}", &id[..2], &id[2..]));
    let mut perms = std::fs::metadata(object(&blob)).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(object(&blob), perms).unwrap();
    std::fs::copy(object(&planted), object(&blob)).unwrap();
    let before = p.read("a.txt");

    let out = p.ralph_with(&["rollback", "--to", "1", "--name", "work"], b"", &[]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "its object {blob} no longer holds what it was recorded with"
        )),
        "{}",
        text(&out)
    );
    assert_eq!(p.read("a.txt"), before, "nothing was put back");
    assert!(p.exists("work-2.txt"));
}
