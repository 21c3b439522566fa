//! A throwaway project for tests that run the `ralph` binary.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

pub use super::{BIN, LOOP};

/// A temporary folder with `.claude/` in it, and a HOME of its own (where
/// ralph keeps its record of armed loops), both removed when dropped.
pub struct TempProject {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl TempProject {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
        let home = tempfile::tempdir().unwrap();
        Self { dir, home }
    }

    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// This test's HOME and XDG_STATE_HOME, for every ralph it runs.
    pub fn user_env(&self) -> Vec<(&'static str, String)> {
        user_env(self.home())
    }

    /// `run_ralph` as this test's user (its own HOME and XDG_STATE_HOME).
    pub fn ralph(&self, args: &[&str], cwd: &Path, stdin: &[u8], env: &[(&str, &str)]) -> Output {
        let user = self.user_env();
        let mut all: Vec<(&str, &str)> = user.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend_from_slice(env);
        run_ralph(args, cwd, stdin, &all)
    }

    /// Registers a hand-written loop file as armed by this user, as a person
    /// would after reading it: `ralph adopt --yes --name NAME`.
    pub fn adopt(&self, name: &str) {
        let out = self.ralph(&["adopt", "--yes", "--name", name], self.root(), b"", &[]);
        assert!(
            out.status.success(),
            "ralph adopt --name {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }
}

/// HOME and XDG_STATE_HOME for a test user whose home is `home`.
pub fn user_env(home: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("HOME", home.display().to_string()),
        (
            "XDG_STATE_HOME",
            home.join(".local/state").display().to_string(),
        ),
    ]
}

/// Runs `ralph ARGS` in `cwd` with `stdin` piped in, and the environment
/// scrubbed (`super::scrub`: Claude Code's own variables, HOME and
/// XDG_STATE_HOME among them; tests add back what they need
/// through `env`; without a HOME nothing can be armed, and the user's real
/// record of armed loops is never touched).
pub fn run_ralph(args: &[&str], cwd: &Path, stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut cmd = super::ralph_command();
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    // The process may answer before reading everything; a closed pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}
