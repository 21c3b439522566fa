//! Issue 45's policy: a `--verify` gate alone ends the loop (the README's
//! first example completes as written), `ralph run` exits 0 only when the
//! loop completed, and a gate protects the test layouts and the test
//! runner's configuration by default. Each test drives the real binary, in
//! a session (turns simulated by `ralph hook stop` with the payload Claude
//! Code sends) and through `ralph run` with a scripted agent.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::project::Project;
use crate::support::text;

const SESSION: &str = "gate-policy-session";

/// Counts the agent's turns in `.agent/n` (ignored by git, like `.claude/`).
const PRELUDE: &str =
    "cat > /dev/null\nn=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n\n";

/// A git project whose spec is `tests/check.sh` (it fails until
/// `src/parser.sh` prints `ok`), the agent's script in `.agent/agent.sh`,
/// and a `cargo` on PATH whose `cargo test` runs the spec: the README's
/// `--verify "cargo test"` as written, without building a crate.
fn project(agent: &str) -> Project {
    let p = Project::new();
    p.write("src/parser.sh", "echo broken\n");
    p.write(
        "tests/check.sh",
        "[ \"$(sh src/parser.sh)\" = ok ] || { echo 'test parser ... FAILED'; exit 101; }\necho 'test parser ... ok'\n",
    );
    p.write(".agent/agent.sh", &format!("{PRELUDE}{agent}\n"));
    git(p.root(), &["init", "-q"]);
    p.write(".git/info/exclude", ".agent/\n.claude/\n");
    git(p.root(), &["add", "-A"]);
    git(p.root(), &["commit", "-qm", "task"]);
    let bin = p.home().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\n[ \"$1\" = test ] || exit 2\nexec sh tests/check.sh\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    p.with_env("PATH", path)
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// One turn of the agent outside ralph: its reply.
fn agent_turn(p: &Project, prompt: &str) -> String {
    let mut child = Command::new("sh")
        .arg(".agent/agent.sh")
        .current_dir(p.root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), prompt.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ralph status --json`'s first loop.
fn first_loop(p: &Project) -> Value {
    let out = p.command(&["status", "--json"]).output().unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    status["loops"][0].clone()
}

/// How a session's loop ended, and what the user was told then.
struct Session {
    outcome: String,
    told: String,
    turns: u64,
}

/// The in-session mode: `ralph start ARGS` (what `/ralph-loop` arms), then
/// each turn's end a `ralph hook stop`, for at most `turns` turns.
fn session(p: &Project, args: &[&str], turns: u64) -> Session {
    let mut start = vec!["start", "--session-id", SESSION];
    start.extend_from_slice(args);
    let out = p.command(&start).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mut prompt = (*args.first().unwrap()).to_owned();
    for turn in 1..=turns {
        let reply = agent_turn(p, &prompt);
        let event = json!({"session_id": SESSION, "transcript_path": "/nonexistent/t.jsonl",
            "hook_event_name": "Stop", "stop_hook_active": false, "last_assistant_message": reply});
        let out = p.ralph_with(&["hook", "stop"], event.to_string().as_bytes(), &[]);
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if answer["decision"] == "block" {
            prompt = answer["reason"].as_str().unwrap_or_default().to_owned();
            continue;
        }
        let l = first_loop(p);
        return Session {
            outcome: l["outcome"].as_str().unwrap_or("?").to_owned(),
            told: answer["systemMessage"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            turns: turn,
        };
    }
    Session {
        outcome: "still running".to_owned(),
        told: String::new(),
        turns,
    }
}

/// The README's first loop: `"Fix the parser" --verify "cargo test" --max-iterations 30`.
const README_LOOP: &[&str] = &[
    "Fix the parser",
    "--verify",
    "cargo test",
    "--max-iterations",
    "30",
];

/// Reads first, fixes the parser at its third turn, then only talks.
const FIXES_AT_THREE: &str = r#"if [ $n -lt 3 ]; then echo "Reading the parser."; else echo "echo ok" > src/parser.sh; echo "Fixed the parser."; fi"#;

#[test]
fn the_readme_first_loop_completes_in_a_session_once_the_tests_pass() {
    let p = project(FIXES_AT_THREE);
    let armed = p
        .command(&["status"])
        .output()
        .map(|o| text(&o))
        .unwrap_or_default();
    let s = session(&p, README_LOOP, 8);
    assert_eq!(s.outcome, "completed", "{} {armed}", s.told);
    assert_eq!(
        s.turns, 3,
        "the gate passed at the turn that fixed it: {}",
        s.told
    );
    assert!(s.told.contains("cargo test"), "{}", s.told);
    assert!(!s.told.contains("promise"), "{}", s.told);
}

#[test]
fn the_readme_first_loop_completes_in_ralph_run_once_the_tests_pass() {
    let p = project(FIXES_AT_THREE);
    let mut args = vec!["run", "--agent", "sh .agent/agent.sh"];
    args.extend_from_slice(&README_LOOP[1..]);
    args.push(README_LOOP[0]);
    let out = p.command(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let l = first_loop(&p);
    assert_eq!(l["outcome"], "completed", "{}", text(&out));
    assert_eq!(p.read(".agent/n").trim(), "3", "{}", text(&out));
}

#[test]
fn a_gate_alone_tells_the_agent_and_the_user_what_ends_the_loop() {
    let p = project(FIXES_AT_THREE);
    let mut start = vec!["start", "--session-id", SESSION];
    start.extend_from_slice(README_LOOP);
    let out = p.command(&start).output().unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("`cargo test` pass"), "{said}");
    assert!(!said.to_lowercase().contains("promise"), "{said}");
}

/// `ralph run` with the README's loop and the agent's script, `extra` flags
/// before the task; its output and exit code.
fn run(p: &Project, extra: &[&str]) -> (String, Option<i32>) {
    let mut args = vec!["run", "--agent", "sh .agent/agent.sh"];
    args.extend_from_slice(&README_LOOP[1..]);
    args.extend_from_slice(extra);
    args.push(README_LOOP[0]);
    let out = p.command(&args).output().unwrap();
    (text(&out), out.status.code())
}

/// The cheats on the loop file: deleted, or edited, during the agent's turn.
const DELETES_ITS_LOOP: &str =
    r#"rm -f .claude/ralph-loop.local.md; echo "Done, nothing left to do.""#;
const EDITS_ITS_LOOP: &str =
    r#"sed -i 's/Fix the parser/Say hello/' .claude/ralph-loop.local.md; echo "Done.""#;

/// `ralph run` ended the loop as tampered, exited 5, and said so.
fn assert_tampered(p: &Project, said: &str, code: Option<i32>) {
    assert_eq!(code, Some(5), "only a completed loop exits 0: {said}");
    assert!(said.contains("tampered"), "{said}");
    assert!(!said.contains("cancelled by the user"), "{said}");
    let l = first_loop(p);
    assert_eq!(l["outcome"], "tampered", "{l}");
    let log = p.command(&["log", "--name", "ralph"]).output().unwrap();
    assert!(text(&log).contains("tampered"), "{}", text(&log));
}

#[test]
fn an_agent_that_deletes_its_loop_file_is_recorded_as_tampering_and_ralph_run_fails() {
    let p = project(DELETES_ITS_LOOP);
    let (said, code) = run(&p, &[]);
    assert_tampered(&p, &said, code);
}

#[test]
fn an_agent_that_edits_its_loop_file_is_recorded_as_tampering_and_ralph_run_fails() {
    let p = project(EDITS_ITS_LOOP);
    let (said, code) = run(&p, &[]);
    assert_tampered(&p, &said, code);
}

/// Under `--sandbox` the project's `.claude/` is read-only to the agent:
/// the same cheats fail outright, the loop stays the one armed (it ends on
/// a breaker, never completed, never cancelled) and the run does not exit 0.
/// (This held before issue 45 too; the test keeps it holding.)
#[cfg(target_os = "linux")]
#[test]
fn a_sandboxed_agent_cannot_delete_or_edit_its_loop_file() {
    if !crate::sandbox::bwrap_or_skip("gate_policy sandboxed loop file") {
        return;
    }
    for agent in [DELETES_ITS_LOOP, EDITS_ITS_LOOP] {
        let p = project(agent);
        let (said, code) = run(&p, &["--sandbox"]);
        assert_eq!(code, Some(3), "{said}");
        let l = first_loop(&p);
        assert_eq!(l["outcome"], "stuck", "{said}");
    }
}

#[test]
fn an_agent_cannot_cancel_its_own_loop_and_the_run_completes_only_when_the_gate_passes() {
    let cancel = format!(
        r#"if [ $n -lt 2 ]; then "{}" cancel > .agent/cancel.txt 2>&1; echo "exit $?" >> .agent/cancel.txt; echo "Cancelled it."; else echo "echo ok" > src/parser.sh; echo "Fixed."; fi"#,
        crate::support::BIN
    );
    let p = project(&cancel);
    let (said, code) = run(&p, &[]);
    let tried = p.read(".agent/cancel.txt");
    assert!(
        tried.contains("refused") && tried.contains("exit 1"),
        "{tried}"
    );
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(first_loop(&p)["outcome"], "completed", "{said}");
}

#[test]
fn the_user_cancelling_from_another_terminal_is_a_cancel_and_the_run_does_not_exit_0() {
    // The agent's turn stands for the user's terminal: a cancel from outside the
    // run's process tree (`setsid` would keep it inside; the test's own ralph is outside).
    let p = project(
        r#"touch .agent/turn-ran; while [ ! -f .agent/cancelled ]; do sleep 0.05; done; echo "Working.""#,
    );
    let mut args = vec!["run", "--agent", "sh .agent/agent.sh"];
    args.extend_from_slice(&README_LOOP[1..]);
    args.push(README_LOOP[0]);
    let child = p.command(&args).spawn().unwrap();
    while !p.exists(".agent/turn-ran") {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let cancel = p.command(&["cancel"]).output().unwrap();
    assert!(cancel.status.success(), "{}", text(&cancel));
    p.write(".agent/cancelled", "");
    let out = child.wait_with_output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert_eq!(first_loop(&p)["outcome"], "cancelled", "{said}");
}

// ---------------------------------------------------------------------------
// Safe by default: with a gate, the test layouts and the test runner's
// configuration of the ecosystems found are protected.

/// A stand-in for pytest (not installed here), outside the project: it runs
/// `tests/test_*.py` with unittest, honouring what pytest honours outside
/// `tests/`: `addopts = -k "not NAME"` in `pytest.ini` or in
/// `pyproject.toml`'s `[tool.pytest.ini_options]`, and a root `conftest.py`'s
/// `collect_ignore`.
pub(crate) const FAKE_PYTEST: &str = r#"import configparser, os, shlex, sys, tomllib, unittest
opts = []
if os.path.exists("pytest.ini"):
    c = configparser.ConfigParser(); c.read("pytest.ini")
    opts += shlex.split(c.get("pytest", "addopts", fallback=""))
if os.path.exists("pyproject.toml"):
    d = tomllib.load(open("pyproject.toml", "rb"))
    opts += shlex.split(d.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("addopts", ""))
ignore = []
if os.path.exists("conftest.py"):
    ns = {}; exec(open("conftest.py").read(), ns); ignore = ns.get("collect_ignore", [])
skip = opts[opts.index("-k") + 1][4:] if "-k" in opts else None
def cases(suite):
    for t in suite:
        yield from (cases(t) if isinstance(t, unittest.TestSuite) else [t])
suite = unittest.TestSuite()
for f in sorted(os.listdir("tests")):
    if f.startswith("test_") and f.endswith(".py") and f not in ignore:
        for case in cases(unittest.defaultTestLoader.discover("tests", pattern=f)):
            if not (skip and skip in case.id()):
                suite.addTest(case)
result = unittest.TextTestRunner().run(suite)
sys.exit(0 if result.wasSuccessful() and result.testsRun else 1)
"#;

/// A Python project: `src/parser.py` is broken and `tests/test_parser.py`
/// says so; `tests/test_ok.py` passes. The gate is the stand-in pytest.
fn python_project(agent: &str) -> (Project, String) {
    let p = Project::new();
    p.write(
        "pyproject.toml",
        "[project]\nname = \"demo\"\nversion = \"0\"\ndependencies = []\n",
    );
    p.write("src/parser.py", "def parse():\n    return \"broken\"\n");
    p.write("tests/test_ok.py", "import unittest\nclass Ok(unittest.TestCase):\n    def test_ok(self):\n        self.assertTrue(True)\n");
    p.write(
        "tests/test_parser.py",
        "import sys, unittest\nsys.path.insert(0, 'src')\nimport parser as p\nclass Parser(unittest.TestCase):\n    def test_parser(self):\n        self.assertEqual(p.parse(), 'ok')\n",
    );
    p.write(".agent/agent.sh", &format!("{PRELUDE}{agent}\n"));
    commit_all(&p);
    // Where a user's own packages live (`pip install --user`): a toolchain
    // folder the gate's sandbox shows, read only.
    let shim = p.home().join(".local/lib/pyshim/pytest");
    std::fs::create_dir_all(&shim).unwrap();
    std::fs::write(shim.join("__init__.py"), "").unwrap();
    std::fs::write(shim.join("__main__.py"), FAKE_PYTEST).unwrap();
    let gate = format!(
        "PYTHONPATH={} /usr/bin/python3 -m pytest",
        p.home().join(".local/lib/pyshim").display()
    );
    (p, gate)
}

/// A JavaScript project tested by node's own runner through `npm test`.
fn node_project(agent: &str) -> (Project, String) {
    let p = Project::new();
    p.write(
        "package.json",
        "{\n  \"name\": \"demo\",\n  \"version\": \"0.0.0\",\n  \"scripts\": {\n    \"test\": \"node --test test/\"\n  },\n  \"dependencies\": {}\n}\n",
    );
    p.write("src/parser.js", "module.exports = () => \"broken\";\n");
    p.write("test/ok.test.js", "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\ntest(\"ok\", () => assert.ok(true));\n");
    p.write(
        "test/parser.test.js",
        "const test = require(\"node:test\");\nconst assert = require(\"node:assert\");\ntest(\"parser\", () => assert.equal(require(\"../src/parser.js\")(), \"ok\"));\n",
    );
    p.write(".agent/agent.sh", &format!("{PRELUDE}{agent}\n"));
    commit_all(&p);
    (p, "npm test --silent".to_owned())
}

fn commit_all(p: &Project) {
    git(p.root(), &["init", "-q"]);
    p.write(".git/info/exclude", ".agent/\n.claude/\n");
    git(p.root(), &["add", "-A"]);
    git(p.root(), &["commit", "-qm", "task"]);
}

/// How a loop over `p` with the gate `gate` (and `extra` flags) ended: in a
/// session, or through `ralph run` (with `--sandbox` when asked).
#[derive(Clone, Copy, Debug)]
enum Mode {
    Session,
    Run,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Sandboxed,
}

fn outcome(p: &Project, gate: &str, extra: &[&str], mode: Mode) -> (String, String) {
    let mut flags = vec!["Fix the parser", "--verify", gate, "--max-iterations", "6"];
    flags.extend_from_slice(extra);
    match mode {
        Mode::Session => {
            let armed = {
                let mut start = vec!["start", "--session-id", "armed-only", "--name", "probe"];
                start.extend_from_slice(&flags);
                let out = p.command(&start).output().unwrap();
                let _ = p.command(&["cancel", "--name", "probe"]).output();
                text(&out)
            };
            let s = session(p, &flags, 8);
            (s.outcome, format!("{armed}\n{}", s.told))
        }
        Mode::Run | Mode::Sandboxed => {
            let mut args = vec!["run", "--agent", "sh .agent/agent.sh"];
            if matches!(mode, Mode::Sandboxed) {
                args.push("--sandbox");
            }
            args.extend_from_slice(&flags[1..]);
            args.push(flags[0]);
            let out = p.command(&args).output().unwrap();
            let l = first_loop(p);
            (l["outcome"].as_str().unwrap_or("?").to_owned(), text(&out))
        }
    }
}

fn modes() -> Vec<Mode> {
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut all = vec![Mode::Session, Mode::Run];
    #[cfg(target_os = "linux")]
    if crate::sandbox::bwrap_or_skip("gate_policy sandboxed defaults") {
        all.push(Mode::Sandboxed);
    }
    all
}

/// Each cheat leaves `tests/` alone and deselects the failing test from the
/// runner's configuration; it completed before issue 45.
const PYTHON_CHEATS: &[(&str, &str)] = &[
    (
        "a root conftest.py",
        r#"echo 'collect_ignore = ["test_parser.py"]' > conftest.py; echo "Done.""#,
    ),
    (
        "pytest.ini",
        r#"printf '[pytest]\naddopts = -k "not parser"\n' > pytest.ini; echo "Done.""#,
    ),
    (
        "pyproject.toml's addopts",
        r#"printf '\n[tool.pytest.ini_options]\naddopts = "-k not_parser"\n' >> pyproject.toml; sed -i 's/not_parser/"not parser"/; s/"-k "not parser""/'"'"'-k "not parser"'"'"'/' pyproject.toml; echo "Done.""#,
    ),
];

#[test]
fn runner_configuration_outside_tests_cannot_deselect_the_failing_python_test() {
    for (cheat, agent) in PYTHON_CHEATS {
        for mode in modes() {
            let (p, gate) = python_project(agent);
            // Without ralph's defaults the cheat works: the gate passes.
            let (done, said) = outcome(&p, &gate, &["--no-default-protect"], mode);
            assert_eq!(done, "completed", "{cheat} {mode:?}, the probe: {said}");
            let (p, gate) = python_project(agent);
            let (done, said) = outcome(&p, &gate, &[], mode);
            assert_ne!(done, "completed", "{cheat} {mode:?}: {said}");
            assert!(
                said.contains("Protected by default"),
                "{cheat} {mode:?}: {said}"
            );
        }
    }
}

#[test]
fn a_changed_test_script_in_package_json_cannot_deselect_the_failing_node_test() {
    let agent =
        r#"sed -i 's#node --test test/#node --test test/ok.test.js#' package.json; echo "Done.""#;
    for mode in modes() {
        let (p, gate) = node_project(agent);
        let (done, said) = outcome(&p, &gate, &["--no-default-protect"], mode);
        assert_eq!(done, "completed", "{mode:?}, the probe: {said}");
        let (p, gate) = node_project(agent);
        let (done, said) = outcome(&p, &gate, &[], mode);
        assert_ne!(done, "completed", "{mode:?}: {said}");
        assert!(said.contains("package.json"), "{mode:?}: {said}");
    }
}

#[test]
fn an_honest_agent_that_adds_a_dependency_completes() {
    let node = r#"sed -i 's#"dependencies": {}#"dependencies": {"left-pad": "^1.3.0"}#' package.json; echo 'module.exports = () => "ok";' > src/parser.js; echo "Fixed, with a dependency.""#;
    let python = r#"sed -i 's#dependencies = \[\]#dependencies = ["requests>=2"]#' pyproject.toml; printf 'def parse():\n    return "ok"\n' > src/parser.py; echo "Fixed, with a dependency.""#;
    for mode in modes() {
        for (p, gate) in [node_project(node), python_project(python)] {
            // An explicit --protect of the manifest too: its dependencies are not its tests.
            let manifest = if p.exists("package.json") {
                "package.json"
            } else {
                "pyproject.toml"
            };
            let (done, said) = outcome(&p, &gate, &["--protect", manifest], mode);
            assert_eq!(done, "completed", "{manifest} {mode:?}: {said}");
        }
    }
}

#[test]
fn an_honest_agent_that_writes_the_progress_file_completes_within_its_scope() {
    let agent = r#"mkdir -p ralph; echo "fixed the parser" >> ralph/progress.txt; printf 'def parse():\n    return "ok"\n' > src/parser.py; echo "Fixed.""#;
    for mode in modes() {
        let (p, gate) = python_project(agent);
        let (done, said) = outcome(&p, &gate, &["--scope", "src/**"], mode);
        assert_eq!(done, "completed", "{mode:?}: {said}");
    }
}

#[test]
fn claude_settings_are_never_the_agents_to_change_but_ralphs_own_files_are_no_change() {
    let agent = r#"echo '{"disableAllHooks": true}' > .claude/settings.json; printf 'def parse():\n    return "ok"\n' > src/parser.py; echo "Fixed.""#;
    let honest = r#"printf 'def parse():\n    return "ok"\n' > src/parser.py; echo "Fixed.""#;
    for mode in [Mode::Session, Mode::Run] {
        for (policy, completes) in [(agent, false), (honest, true)] {
            let (p, gate) = python_project(policy);
            // `.claude/` tracked like any folder (only the agent's scratch is ignored).
            p.write(".claude/settings.json", "{}\n");
            p.write(".git/info/exclude", ".agent/\n");
            git(p.root(), &["add", "-A"]);
            git(p.root(), &["commit", "-qm", "settings"]);
            let (done, said) = outcome(&p, &gate, &[], mode);
            assert_eq!(done == "completed", completes, "{mode:?} {policy}: {said}");
        }
    }
}

#[test]
fn in_a_session_a_loop_file_the_agent_deleted_is_logged_as_tampered() {
    // Deleted at the second turn, once the first stop logged the loop as this session's.
    let p = project(
        r#"[ $n -ge 2 ] && rm -f .claude/ralph-loop.local.md; echo "Turn $n, nothing to do.""#,
    );
    let s = session(&p, README_LOOP, 3);
    assert_ne!(s.outcome, "completed", "{}", s.told);
    assert!(s.told.contains("deleted outside ralph"), "{}", s.told);
    let log = text(
        &p.command(&["log", "--name", "ralph", "--json"])
            .output()
            .unwrap(),
    );
    assert!(log.contains("\"outcome\":\"tampered\""), "{log}");
}

#[test]
fn the_gate_runs_with_the_dependencies_an_honest_agent_added_to_a_protected_manifest() {
    // A build that reads its dependencies from the manifest (cargo, `npm ci`):
    // the snapshot must hold the manifest as the agent wrote it when only its
    // dependency lists changed, not as armed (the Rust crate was refused).
    let agent = r#"sed -i 's#"dependencies": {}#"dependencies": {"helper": "file:vendor/helper"}#' package.json; echo 'module.exports = () => "ok";' > src/parser.js; echo "Fixed, with a dependency.""#;
    let gate = r#"node -e 'process.exit(require("./package.json").dependencies.helper ? 0 : 1)' && npm test --silent"#;
    for mode in [Mode::Session, Mode::Run] {
        let (p, _) = node_project(agent);
        let (done, said) = outcome(&p, gate, &[], mode);
        assert_eq!(done, "completed", "{mode:?}: {said}");
    }
}
