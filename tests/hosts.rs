//! End-to-end tests on the other hosts: the real Codex, Gemini and Copilot CLI clients (pinned
//! in tests/hosts/package.json; `npm ci --prefix tests/hosts` installs them), configured with
//! `ralph install <host>`, armed with `ralph start`, driven offline against a scripted model:
//! Codex through a Responses API mock and Copilot through a streaming Chat Completions mock on
//! 127.0.0.1 (tests/support/model_mock.rs); Gemini through its own `--fake-responses` file, with
//! no HTTP at all.
//!
//! When a client is missing, cargo reports each test that needs it as ignored, with the install
//! command (crates/ralph/build.rs), except on CI (`CI` set) where it fails. Every test has its own HOME, XDG_STATE_HOME, host home and project.

use crate::support::model_mock;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use model_mock::{ScriptedModel, Wire, last_user_text};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::support::{BIN as RALPH, client, repo_root};

const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    Codex,
    Gemini,
    Copilot,
}

impl Host {
    fn name(self) -> &'static str {
        match self {
            Host::Codex => "codex",
            Host::Gemini => "gemini",
            Host::Copilot => "copilot",
        }
    }
}

/// The pinned client, or `None` after a SKIPPED line (a failure on CI).
fn client(host: Host, test: &str) -> Option<PathBuf> {
    let path = repo_root()
        .join("tests/hosts/node_modules/.bin")
        .join(host.name());
    if path.is_file() {
        return Some(path);
    }
    let hint = "run `npm ci --prefix tests/hosts` (it installs the pinned clients of tests/hosts/package.json)";
    assert!(
        !std::env::var_os("CI").is_some(),
        "host test {test}: the {} client is not installed at {}; {hint}",
        host.name(),
        path.display()
    );
    eprintln!(
        "\n*** SKIPPED host test {test}: the {} client is not installed at {}; {hint} ***\n",
        host.name(),
        path.display()
    );
    None
}

/// A throwaway HOME (which is also each host's home), state folder and project, for a host
/// other than Claude Code (`support::client::Sandbox` is Claude Code's).
struct HostSandbox {
    host: Host,
    client: PathBuf,
    dir: TempDir,
}

impl HostSandbox {
    fn new(host: Host, test: &str) -> Option<Self> {
        let client = client(host, test)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("ralph-host-{}-", host.name()))
            .tempdir()
            .expect("temp dir");
        for sub in ["home", "state", "project/.claude"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("sandbox folders");
        }
        let sandbox = Self { host, client, dir };
        sandbox.configure_offline();
        Some(sandbox)
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// The host's own settings for running offline, before `ralph install` adds its hook.
    fn configure_offline(&self) {
        match self.host {
            Host::Codex => {}
            Host::Gemini => {
                let settings = json!({
                    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
                    "general": {"enableAutoUpdate": false},
                    "hooksConfig": {"enabled": true},
                    "hooks": {"BeforeTool": []}
                });
                let dir = self.home().join(".gemini");
                std::fs::create_dir_all(&dir).expect("gemini home");
                std::fs::write(dir.join("settings.json"), settings.to_string()).expect("settings");
            }
            Host::Copilot => {}
        }
    }

    /// `program` with nothing of the caller's environment but what a process needs
    /// (`client::client_command`), and this sandbox's homes and PATH.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = client::client_command(program, &self.home());
        // The binary under test first on PATH, for the commands the agent runs (`ralph start`).
        let ralph_dir = Path::new(RALPH)
            .parent()
            .expect("ralph's folder")
            .to_owned();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let path =
            std::env::join_paths(std::iter::once(ralph_dir).chain(std::env::split_paths(&path)))
                .expect("PATH");
        cmd.env("PATH", path)
            .env("HOME", self.home())
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .env("CODEX_HOME", self.home().join(".codex"))
            .env("GEMINI_CLI_HOME", self.home())
            .env("COPILOT_HOME", self.home().join(".copilot"))
            .current_dir(self.project())
            .stdin(Stdio::null());
        cmd
    }

    fn ralph(&self, args: &[&str]) -> Output {
        let mut cmd = self.command(RALPH);
        cmd.args(args);
        let out = cmd.output().expect("run ralph");
        assert!(
            out.status.success(),
            "ralph {args:?} failed: {}",
            describe(&out)
        );
        out
    }

    fn install(&self) {
        let out = self.ralph(&["install", self.host.name()]);
        let again = self.ralph(&["install", self.host.name()]);
        let said = String::from_utf8_lossy(&again.stdout);
        assert!(
            said.contains("already"),
            "a second install must change nothing: {said}\n(first: {})",
            String::from_utf8_lossy(&out.stdout)
        );
        if self.host == Host::Codex {
            let config = format!(
                "model = \"mock\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"{}\"\nwire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n",
                "http://127.0.0.1:9/v1"
            );
            std::fs::write(self.home().join(".codex/config.toml"), config).expect("codex config");
        }
    }

    fn loop_status(&self, name: &str) -> Value {
        let out = self.ralph(&["status", "--json", "--history", "10"]);
        let status: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
        status["loops"]
            .as_array()
            .and_then(|l| l.iter().find(|l| l["name"] == name).cloned())
            .unwrap_or_else(|| panic!("no loop {name:?} in {status}"))
    }

    fn log(&self, name: &str) -> Vec<Value> {
        let out = self.ralph(&["log", "--name", name, "--json"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("log line"))
            .collect()
    }

    /// Runs the client once, prompt "go", against `model` (Codex, Copilot) or the fake
    /// responses (Gemini); the loop's task reaches the model only through the hook.
    fn run_client(&self, model: Option<&ScriptedModel>, replies: &[&str]) -> Output {
        self.run_client_with(model, replies, "go")
    }

    fn run_client_with(
        &self,
        model: Option<&ScriptedModel>,
        replies: &[&str],
        prompt: &str,
    ) -> Output {
        let mut cmd = self.command(&self.client);
        match self.host {
            Host::Codex => {
                let url = model.expect("a model").base_url();
                let path = self.home().join(".codex/config.toml");
                let config = std::fs::read_to_string(&path).expect("codex config");
                let config = config.replace("http://127.0.0.1:9/v1", &url);
                std::fs::write(&path, config).expect("codex config");
                cmd.env("OPENAI_API_KEY", "test").args([
                    "exec",
                    "--skip-git-repo-check",
                    "--dangerously-bypass-hook-trust",
                    prompt,
                ]);
            }
            Host::Gemini => {
                let fake = self.dir.path().join("fake.jsonl");
                // Gemini's model router takes the first response (a generateContent call);
                // non-strict mode lets it skip a line of the wrong kind.
                let lines: Vec<String> = std::iter::once("router")
                    .chain(replies.iter().copied())
                    .chain(std::iter::repeat_n(*replies.last().unwrap_or(&"ok"), 4))
                    .map(|text| {
                        json!({"method": "generateContentStream", "response": [{"candidates": [{
                            "content": {"parts": [{"text": text}], "role": "model"},
                            "finishReason": "STOP", "index": 0}]}]})
                        .to_string()
                    })
                    .collect();
                std::fs::write(&fake, lines.join("\n") + "\n").expect("fake responses");
                cmd.env("GEMINI_API_KEY", "test")
                    .args(["-p", prompt, "--approval-mode=yolo", "--fake-responses"])
                    .arg(&fake)
                    .arg("--fake-responses-non-strict");
            }
            Host::Copilot => {
                cmd.env("COPILOT_OFFLINE", "true")
                    .env(
                        "COPILOT_PROVIDER_BASE_URL",
                        model.expect("a model").base_url(),
                    )
                    .env("COPILOT_PROVIDER_TYPE", "openai")
                    .env("COPILOT_MODEL", "mock")
                    .args(["-p", "go", "--allow-all", "--no-auto-update"]);
            }
        }
        let out_dir = self.dir.path().join(format!("run-{}", std::process::id()));
        std::fs::create_dir_all(&out_dir).expect("run dir");
        let (stdout, stderr) = (out_dir.join("stdout"), out_dir.join("stderr"));
        cmd.stdout(File::create(&stdout).expect("stdout"))
            .stderr(File::create(&stderr).expect("stderr"));
        let mut child = cmd.spawn().expect("spawn the client");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if started.elapsed() > CLIENT_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} did not finish within {CLIENT_TIMEOUT:?}\nstderr: {}",
                    self.host.name(),
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        Output {
            status,
            stdout: std::fs::read(&stdout).unwrap_or_default(),
            stderr: std::fs::read(&stderr).unwrap_or_default(),
        }
    }

    /// Gemini's chat records: every session file under its home, oldest first. Gemini
    /// starts a file at each reset of the chat (a fresh context), named by the minute: a
    /// run that crosses a minute's end leaves two files of one session (within a minute,
    /// one file it appends to).
    fn gemini_chat(&self) -> String {
        let mut found = Vec::new();
        let mut dirs = vec![self.home().join(".gemini/tmp")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "jsonl")
                    && path.to_string_lossy().contains("/chats/")
                {
                    found.push(path);
                }
            }
        }
        // `session-YYYY-MM-DDTHH-MM-<id>.jsonl`: in name order, in time order.
        found.sort();
        found
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect()
    }
}

fn describe(out: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        tail(&String::from_utf8_lossy(&out.stderr), 4000)
    )
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}

fn model_for(host: Host, replies: &[&str]) -> Option<ScriptedModel> {
    match host {
        Host::Codex => Some(ScriptedModel::start(Wire::Responses, replies)),
        Host::Copilot => Some(ScriptedModel::start(Wire::ChatCompletions, replies)),
        Host::Gemini => None,
    }
}

const TASK: &str = "Polish the TASK-7Q parser";

/// The loop continues with the task, a promise refused by `--verify` continues with the
/// reason, and the promise completes the loop once the check passes.
fn continues_refuses_then_completes(host: Host, test: &str) {
    let Some(sandbox) = HostSandbox::new(host, test) else {
        return;
    };
    sandbox.install();
    let fresh: &[&str] = if host == Host::Gemini {
        &["--fresh-context"]
    } else {
        &[]
    };
    let verify = "test -f verified || { touch verified; echo not verified yet; exit 3; }";
    let mut args = vec![
        "start",
        "--max-iterations",
        "6",
        "--completion-promise",
        "DONE",
        "--verify",
        verify,
    ];
    args.extend_from_slice(fresh);
    args.push(TASK);
    sandbox.ralph(&args);

    let replies = [
        "Working on it.",
        "All done.\n<promise>DONE</promise>",
        "Checked again.\n<promise>DONE</promise>",
    ];
    let model = model_for(host, &replies);
    let run = sandbox.run_client(model.as_ref(), &replies);
    assert!(run.status.success(), "{}", describe(&run));

    let status = sandbox.loop_status("ralph");
    let log = sandbox.log("ralph");
    let context = format!("{status}\nlog: {log:?}\n{}", describe(&run));
    assert_eq!(status["outcome"], "completed", "{context}");
    assert_eq!(status["iteration"], 3, "{context}");
    assert_eq!(log.len(), 3, "{context}");
    assert_eq!(log[0]["decision"], "block", "{context}");
    assert_eq!(log[0]["reply_excerpt"], "Working on it.", "{context}");
    assert_eq!(log[1]["decision"], "block", "{context}");
    assert!(
        log[1]["why"].as_str().unwrap_or("").contains("refused"),
        "{context}"
    );
    assert_eq!(log[2]["decision"], "end", "{context}");

    if let Some(model) = &model {
        let turns = model.turns();
        assert_eq!(turns.len(), 3, "three model turns\n{context}");
        assert!(!last_user_text(&turns[0]).contains(TASK), "{context}");
        for turn in &turns[1..] {
            assert!(
                last_user_text(turn).contains(TASK),
                "the hook fed the task back: {:?}\n{context}",
                last_user_text(turn)
            );
        }
        assert!(last_user_text(&turns[2]).contains("refused"), "{context}");
    } else {
        // Gemini: the task fed back twice, and a fresh context for each iteration (the chat
        // history is reset at every continuation: three resets in all).
        let chat = sandbox.gemini_chat();
        assert_eq!(chat.matches(TASK).count(), 2, "{chat}");
        assert_eq!(chat.matches(r#"{"$set":{"messages""#).count(), 3, "{chat}");
        assert!(chat.contains("was refused"), "{chat}");
    }
}

/// A loop armed for another session is never driven (nor its task shown); this session claims
/// the unowned loop, and its iteration limit ends it.
fn leaves_other_sessions_alone_and_stops_at_the_limit(host: Host, test: &str) {
    let Some(sandbox) = HostSandbox::new(host, test) else {
        return;
    };
    sandbox.install();
    sandbox.ralph(&[
        "start",
        "--name",
        "theirs",
        "--session-id",
        "someone-else",
        "Their TASK-9Z",
    ]);
    sandbox.ralph(&["start", "--max-iterations", "2", TASK]);

    let replies = ["Working.", "Still working."];
    let model = model_for(host, &replies);
    let run = sandbox.run_client(model.as_ref(), &replies);
    assert!(run.status.success(), "{}", describe(&run));

    let ours = sandbox.loop_status("ralph");
    let theirs = sandbox.loop_status("theirs");
    let context = format!("ours: {ours}\ntheirs: {theirs}\n{}", describe(&run));
    assert_eq!(ours["outcome"], "max_iterations", "{context}");
    assert_eq!(ours["iteration"], 2, "{context}");
    assert_eq!(theirs["state"], "active", "{context}");
    assert_eq!(theirs["iteration"], 1, "{context}");
    assert_eq!(theirs["session_id"], "someone-else", "{context}");
    if let Some(model) = &model {
        let turns = model.turns();
        assert_eq!(turns.len(), 2, "{context}");
        assert!(
            turns.iter().all(|t| !t.to_string().contains("TASK-9Z")),
            "{context}"
        );
    } else {
        let chat = sandbox.gemini_chat();
        assert!(!chat.contains("TASK-9Z"), "{chat}");
        assert_eq!(chat.matches(TASK).count(), 1, "{chat}");
        assert_eq!(
            chat.matches(r#"{"$set":{"messages""#).count(),
            1,
            "no fresh context unasked"
        );
    }
}

#[test]
#[cfg_attr(
    no_codex_client,
    ignore = "Codex client not installed: npm ci --prefix tests/hosts"
)]
fn codex_loop_continues_refuses_then_completes() {
    continues_refuses_then_completes(Host::Codex, "codex_loop_continues_refuses_then_completes");
}

#[test]
#[cfg_attr(
    no_codex_client,
    ignore = "Codex client not installed: npm ci --prefix tests/hosts"
)]
fn codex_leaves_other_sessions_alone_and_stops_at_the_limit() {
    leaves_other_sessions_alone_and_stops_at_the_limit(
        Host::Codex,
        "codex_leaves_other_sessions_alone_and_stops_at_the_limit",
    );
}

#[test]
#[cfg_attr(
    no_gemini_client,
    ignore = "Gemini CLI not installed: npm ci --prefix tests/hosts"
)]
fn gemini_loop_continues_refuses_then_completes_with_fresh_context() {
    continues_refuses_then_completes(
        Host::Gemini,
        "gemini_loop_continues_refuses_then_completes_with_fresh_context",
    );
}

#[test]
#[cfg_attr(
    no_gemini_client,
    ignore = "Gemini CLI not installed: npm ci --prefix tests/hosts"
)]
fn gemini_leaves_other_sessions_alone_and_stops_at_the_limit() {
    leaves_other_sessions_alone_and_stops_at_the_limit(
        Host::Gemini,
        "gemini_leaves_other_sessions_alone_and_stops_at_the_limit",
    );
}

#[test]
#[cfg_attr(
    no_copilot_client,
    ignore = "Copilot CLI not installed: npm ci --prefix tests/hosts"
)]
fn copilot_loop_continues_refuses_then_completes() {
    continues_refuses_then_completes(
        Host::Copilot,
        "copilot_loop_continues_refuses_then_completes",
    );
}

#[test]
#[cfg_attr(
    no_copilot_client,
    ignore = "Copilot CLI not installed: npm ci --prefix tests/hosts"
)]
fn copilot_leaves_other_sessions_alone_and_stops_at_the_limit() {
    leaves_other_sessions_alone_and_stops_at_the_limit(
        Host::Copilot,
        "copilot_leaves_other_sessions_alone_and_stops_at_the_limit",
    );
}

/// Gemini's `/ralph-loop` command (installed by `ralph install gemini`) arms the loop from
/// inside the session, with the user's words kept as written, and the loop runs to its promise.
#[test]
#[cfg_attr(
    no_gemini_client,
    ignore = "Gemini CLI not installed: npm ci --prefix tests/hosts"
)]
fn gemini_ralph_loop_command_arms_and_runs() {
    let Some(sandbox) = HostSandbox::new(Host::Gemini, "gemini_ralph_loop_command_arms_and_runs")
    else {
        return;
    };
    sandbox.install();
    let replies = ["Working.", "<promise>OK</promise>"];
    let run = sandbox.run_client_with(
        None,
        &replies,
        "/ralph-loop Fix the \"quoted\" bug's $HOME --max-iterations 4 --completion-promise OK",
    );
    assert!(run.status.success(), "{}", describe(&run));
    let status = sandbox.loop_status("ralph");
    let context = format!("{status}\n{}", describe(&run));
    assert_eq!(status["outcome"], "completed", "{context}");
    assert_eq!(status["iteration"], 2, "{context}");
    assert_eq!(status["max_iterations"], 4, "{context}");
    let chat = sandbox.gemini_chat();
    assert!(
        chat.contains(r#"Fix the \"quoted\" bug's $HOME\n\n---\nRalph loop"#),
        "{chat}"
    );
}

/// `ralph uninstall` takes out exactly what `ralph install` put in: the user's other hooks and
/// settings stay.
#[test]
fn uninstall_restores_the_users_configuration() {
    let dir = tempfile::tempdir().expect("temp");
    let home = dir.path().join("home");
    let project = dir.path().join("project");
    std::fs::create_dir_all(home.join(".gemini")).expect("home");
    std::fs::create_dir_all(project.join(".claude")).expect("project");
    std::fs::create_dir_all(project.join(".git")).expect("git root");
    // The user's own settings: a comment (Gemini CLI reads them), tabs, a
    // number no float holds, a duplicate key.
    let theirs = "{\n\t// my settings\n\t\"hooks\": {\"AfterAgent\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"notify-me\"}]}]},\n\t\"ui\": {\"theme\": \"x\", \"theme\": \"y\"},\n\t\"seed\": 123456789012345678901234567890\n}\n";
    std::fs::write(home.join(".gemini/settings.json"), theirs).expect("settings");
    let run = |args: &[&str]| {
        let out = client::client_command(RALPH, &home)
            .args(args)
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .env("CODEX_HOME", home.join(".codex"))
            .env("COPILOT_HOME", home.join(".copilot"))
            .current_dir(&project)
            .output()
            .expect("ralph");
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = snapshot(dir.path());
    for host in ["codex", "gemini", "copilot"] {
        assert!(!run(&["install", host]).contains("warning"));
        let said = run(&["install", host, "--project"]);
        assert!(
            said.contains("warning: ralph's hook is also installed for your user")
                && said.contains(&format!("`ralph uninstall {host}` removes that one")),
            "{said}"
        );
    }
    let text = std::fs::read_to_string(home.join(".gemini/settings.json")).expect("read");
    assert!(text.starts_with("{\n\t// my settings\n"), "{text}");
    assert!(text.contains("123456789012345678901234567890"), "{text}");
    assert!(
        text.contains("ralph") && text.contains("hook stop --host gemini"),
        "{text}"
    );
    assert!(project.join(".github/hooks/ralph.json").is_file());
    assert!(project.join(".gemini/commands/ralph-loop.toml").is_file());
    assert!(home.join(".codex/skills/ralph-loop/SKILL.md").is_file());
    for host in ["codex", "gemini", "copilot"] {
        let said = run(&["uninstall", host]);
        assert!(said.contains("removed"), "{said}");
        run(&["uninstall", host, "--project"]);
    }
    // Every file byte for byte, no file or folder left behind.
    let after = snapshot(dir.path());
    assert_eq!(after, before);
}

/// A user who put their own hook into ralph's group keeps it.
#[test]
fn uninstall_keeps_the_users_hook_in_ralphs_group() {
    let dir = tempfile::tempdir().expect("temp");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let run = |args: &[&str]| {
        let out = client::client_command(RALPH, &home)
            .args(args)
            .env("CODEX_HOME", home.join(".codex"))
            .current_dir(&home)
            .output()
            .expect("ralph");
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
    };
    run(&[
        "install",
        "codex",
        "--command",
        "ralph hook stop --host codex",
    ]);
    let path = home.join(".codex/hooks.json");
    let installed: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    let ralphs = installed["hooks"]["Stop"][0]["hooks"][0].clone();
    assert!(
        ralphs["command"]
            .as_str()
            .is_some_and(|c| c.contains("hook stop"))
    );
    let mine = json!({"type": "command", "command": "notify-me"});
    let shared = json!({"hooks": {"Stop": [{"hooks": [mine, ralphs]}]}});
    std::fs::write(&path, shared.to_string()).expect("write");
    run(&["uninstall", "codex"]);
    let left: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("kept")).expect("json");
    assert_eq!(
        left,
        json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-me"}]}]}})
    );
}

/// `ralph install claude` is a usage error that says what to do instead,
/// and a settings file that is not JSON a failure that names it.
#[test]
fn install_errors_keep_their_exit_codes() {
    let dir = tempfile::tempdir().expect("temp");
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".codex")).expect("home");
    std::fs::write(home.join(".codex/hooks.json"), "[not json").expect("settings");
    let run = |args: &[&str]| {
        Command::new(RALPH)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("CODEX_HOME", home.join(".codex"))
            .current_dir(&home)
            .output()
            .expect("ralph")
    };
    let out = run(&["install", "claude"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(describe(&out).contains("Claude Code needs no install"));
    let out = run(&["install", "codex"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        describe(&out).contains("hooks.json: ") && describe(&out).contains("; nothing was changed"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".codex/hooks.json")).expect("kept"),
        "[not json"
    );
}

/// Every file and folder under `dir`, with each file's bytes.
fn snapshot(dir: &std::path::Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("list").flatten() {
            let path = e.path();
            let rel = path
                .strip_prefix(dir)
                .expect("inside")
                .display()
                .to_string();
            if rel.starts_with("state") {
                continue; // ralph's own per-user state
            }
            if e.file_type().expect("type").is_dir() {
                out.push((rel, None));
                stack.push(path);
            } else {
                out.push((rel, Some(std::fs::read(&path).expect("read"))));
            }
        }
    }
    out.sort();
    out
}

/// `ralph hook stop` through the binary: each host's payload (as the pinned clients send it)
/// gets exactly the answer shape that host accepts.
mod answers {
    use super::*;
    use crate::support::project::Project;

    /// This module's steps on the shared [`Project`].
    trait Steps {
        fn cmd(&self, args: &[&str]) -> Command;
        fn start(&self, args: &[&str]);
        fn hook(&self, payload: &Value, host: Option<&str>) -> Value;
        fn file(&self, name: &str, lines: &[Value]) -> PathBuf;
        fn cwd(&self) -> String;
    }

    impl Steps for Project {
        /// `ralph ARGS` in the project, with nothing of the caller's environment but what a
        /// process needs, as a host would start it.
        fn cmd(&self, args: &[&str]) -> Command {
            let mut cmd = client::client_command(RALPH, self.home());
            cmd.args(args).current_dir(self.root());
            cmd
        }

        fn start(&self, args: &[&str]) {
            let out = self
                .cmd(&[&["start"], args].concat())
                .stdin(Stdio::null())
                .output()
                .expect("start");
            assert!(out.status.success(), "{}", describe(&out));
        }

        /// The hook's stdout for `payload`, parsed (`Null` when empty).
        fn hook(&self, payload: &Value, host: Option<&str>) -> Value {
            let mut args = vec!["hook", "stop"];
            if let Some(h) = host {
                args.extend(["--host", h]);
            }
            let mut child = self
                .cmd(&args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("hook");
            {
                use std::io::Write;
                let mut stdin = child.stdin.take().expect("stdin");
                stdin
                    .write_all(payload.to_string().as_bytes())
                    .expect("payload");
            }
            let out = child.wait_with_output().expect("hook output");
            assert!(out.status.success(), "{}", describe(&out));
            let stdout = String::from_utf8_lossy(&out.stdout);
            if stdout.trim().is_empty() {
                return Value::Null;
            }
            assert_eq!(stdout.matches('\n').count(), 1, "one JSON line: {stdout:?}");
            serde_json::from_str(&stdout).expect("JSON answer")
        }

        /// A transcript named `name`, outside the project.
        fn file(&self, name: &str, lines: &[Value]) -> PathBuf {
            let path = self.home().join(name);
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            std::fs::write(&path, text).expect("transcript");
            path
        }

        fn cwd(&self) -> String {
            self.root().to_string_lossy().into_owned()
        }
    }

    fn keys(v: &Value) -> Vec<&str> {
        let mut k: Vec<&str> = v
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn codex_gets_only_keys_its_schema_allows() {
        let p = Project::new();
        p.start(&[
            "--session-id",
            "cx-1",
            "--max-iterations",
            "3",
            "Codex TASK",
        ]);
        let payload = json!({"session_id": "cx-1", "turn_id": "t1", "transcript_path": null, "cwd": p.cwd(),
            "hook_event_name": "Stop", "model": "mock", "permission_mode": "bypassPermissions",
            "stop_hook_active": false, "last_assistant_message": "working"});
        let answer = p.hook(&payload, None);
        assert_eq!(keys(&answer), ["decision", "reason", "systemMessage"]);
        assert!(
            answer["reason"]
                .as_str()
                .unwrap_or("")
                .contains("Codex TASK")
        );
    }

    #[test]
    fn gemini_fresh_context_goes_under_hook_specific_output() {
        let p = Project::new();
        p.start(&["--session-id", "gm-1", "--fresh-context", "Gemini TASK"]);
        let chat = p.file("chat.jsonl", &[
            json!({"id": "u", "timestamp": "2099-01-01T00:00:00.000Z", "type": "user", "content": [{"text": "go"}]}),
            json!({"id": "g", "timestamp": "2099-01-01T00:00:01.000Z", "type": "gemini", "content": "working"}),
        ]);
        let payload = json!({"session_id": "gm-1", "transcript_path": chat, "cwd": p.cwd(),
            "hook_event_name": "AfterAgent", "timestamp": "2099-01-01T00:00:01.100Z", "prompt": "go",
            "prompt_response": "<promise>OLD</promise> working", "stop_hook_active": false});
        let answer = p.hook(&payload, None);
        assert_eq!(
            keys(&answer),
            ["decision", "hookSpecificOutput", "reason", "systemMessage"]
        );
        assert_eq!(answer["decision"], "block");
        assert_eq!(
            answer["hookSpecificOutput"],
            json!({"hookEventName": "AfterAgent", "clearContext": true})
        );
        assert!(answer.get("stopReason").is_none());
    }

    #[test]
    fn copilot_gets_decision_and_reason_only_and_its_reply_from_the_events_file() {
        let p = Project::new();
        p.start(&[
            "--session-id",
            "cp-1",
            "--completion-promise",
            "DONE",
            "Copilot TASK",
        ]);
        let events = p.file("events.jsonl", &[
            json!({"type": "user.message", "data": {"content": "go"}, "timestamp": "2099-01-01T00:00:00.000Z"}),
            json!({"type": "assistant.message", "data": {"content": "not yet"}, "timestamp": "2099-01-01T00:00:01.000Z"}),
            json!({"type": "hook.start", "data": {"input": {"timestamp": 4070908801000_i64}}, "timestamp": "2099-01-01T00:00:01.100Z"}),
        ]);
        let camel = json!({"sessionId": "cp-1", "timestamp": 4070908801000_i64, "cwd": p.cwd(),
            "transcriptPath": events, "stopReason": "end_turn", "stop_hook_active": false});
        let answer = p.hook(&camel, None);
        assert_eq!(keys(&answer), ["decision", "reason"]);
        assert!(
            answer["reason"]
                .as_str()
                .unwrap_or("")
                .contains("Copilot TASK")
        );
        // the promise in the events file ends the loop: an empty answer (the notice goes to stderr)
        let done = p.file("events2.jsonl", &[
            json!({"type": "assistant.message", "data": {"content": "<promise>DONE</promise>"}, "timestamp": "2099-01-01T00:00:02.000Z"}),
            json!({"type": "hook.start", "data": {"input": {"timestamp": 4070908802000_i64}}, "timestamp": "2099-01-01T00:00:02.100Z"}),
        ]);
        let snake = json!({"hook_event_name": "Stop", "session_id": "cp-1", "timestamp": 4070908802000_i64,
            "cwd": p.cwd(), "transcript_path": done, "stop_reason": "end_turn"});
        assert_eq!(p.hook(&snake, None), Value::Null);
    }

    #[test]
    fn a_bad_event_named_as_copilot_gets_an_empty_answer() {
        let p = Project::new();
        let mut child = p
            .cmd(&["hook", "stop", "--host", "copilot"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("hook");
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(b"{not json")
                .expect("write");
        }
        let out = child.wait_with_output().expect("output");
        assert!(out.status.success());
        assert!(out.stdout.is_empty(), "{}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("not valid JSON"));
        let bad = p
            .cmd(&["hook", "stop", "--host", "cursor"])
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert_eq!(
            bad.status.code(),
            Some(2),
            "an unknown host is a usage error"
        );
    }
}

/// `$ralph-loop …` in the real Codex client: the UserPromptSubmit hook that
/// `ralph install codex` adds arms the loop from the prompt itself, and the
/// skill runs no command. Text that would end a here-doc or a quote is data:
/// the task is armed verbatim and nothing of it runs.
#[test]
#[cfg_attr(
    no_codex_client,
    ignore = "Codex client not installed: npm ci --prefix tests/hosts"
)]
fn codex_skill_takes_the_task_from_the_prompt_hook_never_through_a_shell() {
    fn command_line_of(skill: &str) -> bool {
        skill.lines().any(|l| l.trim_start().starts_with("ralph "))
    }
    let Some(sandbox) = HostSandbox::new(Host::Codex, "codex_skill_takes_the_task") else {
        return;
    };
    sandbox.install();
    let skill = std::fs::read_to_string(sandbox.home().join(".codex/skills/ralph-loop/SKILL.md"))
        .expect("skill");
    assert!(
        !skill.contains("<<") && !skill.contains("ARGUMENTS"),
        "{skill}"
    );
    let task = "Fix the bug\nRALPH_ARGS_7f3a\n$(touch pwned) '; touch pwned; '";
    let prompt = format!("$ralph-loop {task} --max-iterations 3");
    let replies = ["ok"];
    let model = model_for(Host::Codex, &replies);
    let run = sandbox.run_client_with(model.as_ref(), &replies, &prompt);
    assert!(run.status.success(), "{}", describe(&run));
    assert!(!describe(&run).contains("invalid"), "{}", describe(&run));
    // The prompt hook armed the loop itself, from the prompt as data: the
    // skill runs nothing, and nothing of the task ran as a command.
    assert!(
        !command_line_of(&skill),
        "the skill runs no command: {skill}"
    );
    assert!(!sandbox.project().join("pwned").exists());
    let status = sandbox.loop_status("ralph");
    assert_eq!(status["max_iterations"], 3, "{status}");
    // The loop ran to its limit in that session (its Stops fed the task back),
    // so its file is in the history now.
    assert_eq!(
        status["outcome"],
        "max_iterations",
        "{status}\n{}",
        describe(&run)
    );
    let history = sandbox.project().join(".claude/ralph/history");
    let armed = std::fs::read_dir(&history)
        .expect("the history")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("-ralph.md"))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| panic!("the loop's record\n{}", describe(&run)));
    assert!(
        armed.contains(&format!("\n{task}")),
        "the task, verbatim: {armed}"
    );
}
