//! The one harness every integration test shares: the binary under test and the one clean
//! command for it ([`ralph_command`], [`scrub`]), the repository's folders, the one throwaway
//! project ([`project::Project`]), the real Claude Code client with its sandbox and clean
//! command ([`client::Sandbox`], [`client::client_command`], [`sandbox_or_skip!`]) and the
//! mock APIs it and the other hosts talk to (`mock_api`, `model_mock`). A module that needs
//! steps of its own puts them in a trait on `Project` (or takes a builder:
//! [`project::Project::with_env`], [`project::Project::bare`]), rather than a type of its own.

#![allow(dead_code)] // each test module uses its own part of the harness

pub(crate) mod client;
pub(crate) mod conversation;
pub(crate) mod mock_api;
pub(crate) mod model_mock;
pub(crate) mod project;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The `ralph` binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_ralph");

/// The loop file `ralph loop` writes when no name is given.
pub(crate) const LOOP: &str = ".claude/ralph-loop.local.md";

/// What a test's `ralph` must never inherit from the shell running the tests: Claude Code's own
/// variables (a test run inside a Claude Code session), the user's homes (their real record of
/// armed loops, their price table and git config) and git's overrides (a test run from a git
/// hook). Each test sets back what it needs.
pub(crate) const SCRUBBED: &[&str] = &[
    "HOME",
    "XDG_STATE_HOME",
    "XDG_CONFIG_HOME",
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_CODE_STOP_HOOK_BLOCK_CAP",
    "GIT_DIR",
    "GIT_WORK_TREE",
];

/// Removes [`SCRUBBED`] from `cmd`'s environment: the one scrub for every process that runs
/// `ralph` (the binary itself, or a shell or timer around it). The real clients start from an
/// empty environment instead ([`client::client_command`]).
pub(crate) fn scrub(cmd: &mut Command) -> &mut Command {
    for var in SCRUBBED {
        cmd.env_remove(var);
    }
    cmd
}

/// The `ralph` binary under test, with its environment scrubbed ([`scrub`]); nothing else set.
pub(crate) fn ralph_command() -> Command {
    let mut cmd = Command::new(BIN);
    scrub(&mut cmd);
    cmd
}

/// The repository root.
pub(crate) fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// A finished command's stdout followed by its stderr, for assertions and failure messages.
pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A finished command's exit code, stdout and stderr, each under its own heading.
pub(crate) fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A [`client::Sandbox`] for the test named `$name`, or `return` from the test when the real
/// client is not installed (off CI; on CI a missing client fails the test, see
/// [`client::skip_or_fail`]).
macro_rules! sandbox_or_skip {
    ($name:expr) => {
        match $crate::support::client::Sandbox::new($name) {
            Some(s) => s,
            None => return,
        }
    };
}
pub(crate) use sandbox_or_skip;

/// Whether a hook answer blocks the turn (`"decision": "block"`).
pub(crate) fn blocked(answer: &Value) -> bool {
    answer["decision"] == "block"
}

/// A stand-in program's tail that holds it until the test lets it go: it waits for `release`
/// to exist (two minutes at most, a hang guard), then creates `finished`. A `ralph` that
/// returns while `finished` is still absent did not wait for the program, whatever the load:
/// no wall-clock bound decides it.
pub(crate) fn held_until(release: &Path, finished: &Path) -> String {
    format!(
        "i=0; while [ ! -e '{release}' ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n: > '{finished}'\n",
        release = release.display(),
        finished = finished.display()
    )
}

/// Waits until `path` exists: polled, with two minutes as a hang guard only (a saturated
/// machine may take seconds to start a process); whether it appeared is the caller's check.
pub(crate) fn wait_for_file(path: &Path) -> bool {
    let guard = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !path.exists() && std::time::Instant::now() < guard {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    path.exists()
}
