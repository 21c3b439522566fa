//! Runs the real Claude Code client (print mode) against the mock API, with the repository's
//! `plugin/` folder loaded as a plugin, in a throwaway HOME and project.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use super::mock_api::MockApi;

pub(crate) use super::{BIN as RALPH, repo_root};

/// How long one client run may take before the test fails.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(90);

/// The install command printed when the client is missing.
const INSTALL_HINT: &str = "run `npm ci --prefix tests/client` in the repository root: it installs the pinned \
     @anthropic-ai/claude-code from tests/client/package.json; or set RALPH_CLAUDE_BIN to a claude binary";

/// The plugin folder, as `claude --plugin-dir` and the marketplace entry see it.
pub(crate) fn plugin_root() -> PathBuf {
    repo_root().join("plugin")
}

/// Where `npm ci --prefix tests/client` puts the pinned client's packages.
pub(crate) fn client_modules() -> PathBuf {
    repo_root().join("tests/client/node_modules")
}

/// The `claude` binary from the pinned client's npm packages for this platform, if installed.
pub(crate) fn installed_client() -> PathBuf {
    // npm installs the native client for this platform only: linux-x64 here and on CI; the
    // other names let a developer on macOS or ARM run the tests too.
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    let modules = client_modules().join("@anthropic-ai");
    let preferred = modules.join("claude-code-linux-x64/claude");
    [
        preferred.clone(),
        modules.join(format!("claude-code-{os}-{arch}/claude")),
        modules.join(format!("claude-code-{os}-{arch}-musl/claude")),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or(preferred)
}

/// Fails the test on CI, or prints a loud SKIPPED line and returns `None` elsewhere.
pub(crate) fn skip_or_fail<T>(test: &str, why: &str) -> Option<T> {
    assert!(!std::env::var_os("CI").is_some(), "e2e test {test}: {why}");
    eprintln!("\n*** SKIPPED e2e test {test}: {why} ***\n");
    None
}

/// The Claude Code binary, or `None` (after a loud SKIPPED line) when it is not installed
/// and we are not on CI. On CI (`CI` set) a missing client is a failure.
pub(crate) fn claude_bin(test: &str) -> Option<PathBuf> {
    let path = match std::env::var_os("RALPH_CLAUDE_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => installed_client(),
    };
    if path.is_file() {
        return Some(path);
    }
    skip_or_fail(
        test,
        &format!(
            "the Claude Code client is not installed at {}; {INSTALL_HINT}",
            path.display()
        ),
    )
}

/// A fresh HOME and a fresh project folder (with `.claude/`), both deleted on drop.
pub(crate) struct Sandbox {
    pub claude: PathBuf,
    pub home: TempDir,
    pub project: TempDir,
}

/// What one client run left behind.
pub(crate) struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub debug_log: String,
}

impl Run {
    /// The stream-json events printed on stdout.
    pub(crate) fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The `result` text of the final `result` event.
    pub(crate) fn result_text(&self) -> String {
        self.events()
            .iter()
            .rev()
            .find(|e| e["type"] == "result")
            .and_then(|e| e["result"].as_str())
            .unwrap_or("")
            .to_string()
    }

    /// Everything, for assertion messages.
    pub(crate) fn describe(&self) -> String {
        let tail = |s: &str, n: usize| -> String {
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        };
        format!(
            "exit status: {}\n--- stdout (last 40 lines) ---\n{}\n--- stderr ---\n{}\n--- debug log (last 40 lines) ---\n{}",
            self.status,
            tail(&self.stdout, 40),
            tail(&self.stderr, 40),
            tail(&self.debug_log, 40)
        )
    }
}

impl Sandbox {
    /// A sandbox, or `None` when the client is missing (see [`claude_bin`]).
    pub(crate) fn new(test: &str) -> Option<Self> {
        let claude = claude_bin(test)?;
        let home = tempfile::Builder::new()
            .prefix("ralph-e2e-home-")
            .tempdir()
            .expect("temp HOME");
        let project = tempfile::Builder::new()
            .prefix("ralph-e2e-proj-")
            .tempdir()
            .expect("temp project");
        std::fs::create_dir_all(project.path().join(".claude")).expect("create .claude");
        Some(Sandbox {
            claude,
            home,
            project,
        })
    }

    pub(crate) fn project(&self) -> &Path {
        self.project.path()
    }

    /// The default loop's state file.
    pub(crate) fn state_file(&self) -> PathBuf {
        self.project().join(".claude/ralph-loop.local.md")
    }

    /// Runs `claude -p PROMPT` in the project with the plugin loaded, against `api`.
    pub(crate) fn claude(&self, api: &MockApi, prompt: &str, extra_args: &[&str]) -> Run {
        self.claude_with_env(api, prompt, extra_args, &[])
    }

    /// Runs the `ralph` binary under test in the project (no Claude Code variables set).
    pub(crate) fn ralph(&self, args: &[&str]) -> std::process::Output {
        self.ralph_with_env(args, &[])
    }

    /// Runs `ralph ARGS` in the project with the mock API's variables set, so that an agent
    /// it starts (`ralph run --agent "<claude> -p …"`) talks to `api`.
    pub(crate) fn ralph_with_api(&self, api: &MockApi, args: &[&str]) -> std::process::Output {
        let mut cmd = self.ralph_command(args);
        mock_api_env(&mut cmd, api);
        cmd.output().expect("run ralph")
    }

    /// `ralph ARGS` in the project with the real client on PATH as `claude` (so the default
    /// agent is the real one, in `ralph run` and in each child of `ralph run --parallel`),
    /// pointed at `api`, with extra environment variables. Unix: the client goes on PATH
    /// through a symbolic link.
    #[cfg(unix)]
    pub(crate) fn ralph_with_client(
        &self,
        api: &MockApi,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> std::process::Output {
        let mut cmd = self.ralph_command(args);
        mock_api_env(&mut cmd, api);
        cmd.env("PATH", self.client_on_path())
            .envs(env.iter().copied());
        cmd.output().expect("run ralph")
    }

    /// A PATH whose first folder holds a `claude` link to this sandbox's client.
    #[cfg(unix)]
    pub(crate) fn client_on_path(&self) -> String {
        let bin = self.home.path().join("bin");
        std::fs::create_dir_all(&bin).expect("create the bin folder");
        let link = bin.join("claude");
        if !link.exists() {
            std::os::unix::fs::symlink(&self.claude, &link).expect("link the client");
        }
        format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// `ralph ARGS` in the project, with a hermetic environment; not started yet.
    fn ralph_command(&self, args: &[&str]) -> Command {
        let mut cmd = client_command(RALPH, self.home.path());
        cmd.args(args)
            .current_dir(self.project())
            .stdin(Stdio::null());
        cmd
    }

    /// The Claude Code binary this sandbox runs.
    pub(crate) fn claude_path(&self) -> &Path {
        &self.claude
    }

    /// `ralph status --json`, parsed.
    pub(crate) fn status_json(&self) -> Value {
        let out = self.ralph(&["status", "--json"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "ralph status --json failed: {}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("ralph status --json is not JSON ({e}): {stdout}"))
    }

    /// The loop named `name` in `ralph status --json`.
    pub(crate) fn loop_status(&self, name: &str) -> Value {
        let status = self.status_json();
        status["loops"]
            .as_array()
            .and_then(|loops| loops.iter().find(|l| l["name"] == name).cloned())
            .unwrap_or_else(|| panic!("no loop named {name:?} in ralph status --json: {status}"))
    }
}

/// Runs `claude -p PROMPT ARGS` in `cwd` with a hermetic environment (HOME = `home`, plus
/// `env`), against `api`, and fails the test when it takes longer than [`CLIENT_TIMEOUT`].
pub(crate) fn run_claude(
    claude: &Path,
    prompt: &str,
    args: &[&std::ffi::OsStr],
    cwd: &Path,
    home: &Path,
    api: &MockApi,
    env: &[(&str, &std::ffi::OsStr)],
) -> Run {
    let out_dir = tempfile::Builder::new()
        .prefix("ralph-e2e-run-")
        .tempdir()
        .expect("temp run dir");
    let stdout_path = out_dir.path().join("stdout");
    let stderr_path = out_dir.path().join("stderr");
    let debug_path = out_dir.path().join("debug.log");

    let mut cmd = client_command(claude, home);
    cmd.arg("-p")
        .arg(prompt)
        .args(args)
        .args([
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-hook-events",
        ])
        .arg("--debug-file")
        .arg(&debug_path)
        .current_dir(cwd);
    mock_api_env(&mut cmd, api);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null())
        .stdout(File::create(&stdout_path).expect("stdout file"))
        .stderr(File::create(&stderr_path).expect("stderr file"));

    let mut child = cmd.spawn().expect("spawn the claude client");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for claude") {
            break status;
        }
        if started.elapsed() > CLIENT_TIMEOUT {
            let _ = child.kill();
            let status = child.wait().expect("reap claude");
            let run = read_run(status, &stdout_path, &stderr_path, &debug_path);
            panic!(
                "claude -p {prompt:?} did not finish within {CLIENT_TIMEOUT:?}\n{}\n--- mock requests ---\n{}",
                run.describe(),
                api.describe()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    read_run(status, &stdout_path, &stderr_path, &debug_path)
}

/// Points Claude Code at the mock API, with every non-essential call switched off.
pub(crate) fn mock_api_env(cmd: &mut Command, api: &MockApi) {
    cmd.env("ANTHROPIC_BASE_URL", api.url())
        .env("ANTHROPIC_API_KEY", "test")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1");
}

/// `program` with [`hermetic_env`]: the one clean command for the real clients (and for a
/// `ralph` a client would start), with HOME and XDG_STATE_HOME under `home`.
pub(crate) fn client_command(program: impl AsRef<std::ffi::OsStr>, home: &Path) -> Command {
    let mut cmd = Command::new(program);
    hermetic_env(&mut cmd, home);
    cmd
}

/// Starts from an empty environment (so that a test run inside Claude Code, or with a real
/// API key, cannot leak into the client) and keeps only what a process needs.
pub(crate) fn hermetic_env(cmd: &mut Command, home: &Path) {
    cmd.env_clear();
    for var in [
        "PATH", "LANG", "LC_ALL", "TMPDIR", "TERM", "USER", "LOGNAME", "SHELL",
    ] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    cmd.env("HOME", home);
    cmd.env("XDG_STATE_HOME", home.join(".local/state"));
}

pub(crate) fn read_run(status: ExitStatus, stdout: &Path, stderr: &Path, debug: &Path) -> Run {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Run {
        status,
        stdout: read(stdout),
        stderr: read(stderr),
        debug_log: read(debug),
    }
}

impl Sandbox {
    /// Like [`Sandbox::claude`], with extra environment variables for the client (and so for
    /// its hooks), e.g. `CLAUDE_CODE_STOP_HOOK_BLOCK_CAP`, or `RALPH_BIN` pointing elsewhere.
    pub(crate) fn claude_with_env(
        &self,
        api: &MockApi,
        prompt: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Run {
        let plugin = plugin_root();
        let mut args: Vec<&std::ffi::OsStr> = vec!["--plugin-dir".as_ref(), plugin.as_os_str()];
        args.extend(extra_args.iter().map(std::ffi::OsStr::new));
        let mut all_env: Vec<(&str, &std::ffi::OsStr)> = vec![("RALPH_BIN", RALPH.as_ref())];
        all_env.extend(env.iter().map(|(k, v)| (*k, std::ffi::OsStr::new(*v))));
        run_claude(
            &self.claude,
            prompt,
            &args,
            self.project(),
            self.home.path(),
            api,
            &all_env,
        )
    }

    /// `ralph ARGS` in the project with extra environment variables.
    pub(crate) fn ralph_with_env(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> std::process::Output {
        let mut cmd = self.ralph_command(args);
        cmd.envs(env.iter().copied());
        cmd.output().expect("run ralph")
    }
}
