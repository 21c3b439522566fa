//! One print-mode client fed its user messages one at a time as stream-json input
//! (`claude -p --input-format stream-json`), so a test can type `/clear` and then a message
//! after the loop paused, as a person would, and read each hook's answer as it came.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

use super::client::{Run, Sandbox, client_command, mock_api_env, plugin_root, read_run};
use super::mock_api::MockApi;

/// How long one step of a conversation may take before the test fails.
const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// A running client reading user messages from its stdin.
pub(crate) struct Conversation {
    child: Child,
    stdin: Option<ChildStdin>,
    dir: TempDir,
}

impl Conversation {
    /// Starts the client in `sandbox`'s project with the plugin loaded, against `api`.
    pub(crate) fn start(sandbox: &Sandbox, api: &MockApi, extra_args: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ralph-e2e-conversation-")
            .tempdir()
            .expect("temp run dir");
        let mut cmd = client_command(sandbox.claude_path(), sandbox.home.path());
        cmd.args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
        ])
        .args(["--verbose", "--include-hook-events", "--plugin-dir"])
        .arg(plugin_root())
        .args(extra_args)
        .arg("--debug-file")
        .arg(dir.path().join("debug.log"))
        .current_dir(sandbox.project())
        .env("RALPH_BIN", super::BIN);
        mock_api_env(&mut cmd, api);
        cmd.stdin(Stdio::piped())
            .stdout(File::create(dir.path().join("stdout")).expect("stdout file"))
            .stderr(File::create(dir.path().join("stderr")).expect("stderr file"));
        let mut child = cmd.spawn().expect("spawn the claude client");
        let stdin = child.stdin.take();
        Self { child, stdin, dir }
    }

    /// Sends one user message (`/clear` is one too).
    pub(crate) fn say(&mut self, text: &str) {
        let line = json!({"type": "user", "message": {"role": "user", "content": text}});
        let stdin = self.stdin.as_mut().expect("the conversation is still open");
        writeln!(stdin, "{line}").expect("write to the client");
        stdin.flush().expect("flush the client's stdin");
    }

    /// The stream-json events printed so far.
    pub(crate) fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("stdout"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits until `done` holds of the events, or fails the test with what was printed.
    pub(crate) fn wait_for(&mut self, what: &str, done: impl Fn(&[Value]) -> bool) {
        let started = Instant::now();
        loop {
            let events = self.events();
            if done(&events) {
                return;
            }
            let exited = self.child.try_wait().expect("poll the client").is_some();
            if exited || started.elapsed() > STEP_TIMEOUT {
                let _ = self.child.kill();
                let status = self.child.wait().expect("reap the client");
                let run = self.run(status);
                panic!(
                    "waiting for {what}: the client {}\n{}",
                    if exited { "exited" } else { "timed out" },
                    run.describe()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Closes stdin and waits for the client to end.
    pub(crate) fn finish(mut self) -> Run {
        drop(self.stdin.take());
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("poll the client") {
                break status;
            }
            if started.elapsed() > STEP_TIMEOUT {
                let _ = self.child.kill();
                break self.child.wait().expect("reap the client");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        self.run(status)
    }

    fn run(&self, status: std::process::ExitStatus) -> Run {
        read_run(
            status,
            &self.path("stdout"),
            &self.path("stderr"),
            &self.path("debug.log"),
        )
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// How many turns have ended (`result` events).
pub(crate) fn results(events: &[Value]) -> usize {
    events.iter().filter(|e| e["type"] == "result").count()
}
