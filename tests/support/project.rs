//! A throwaway project for tests that run the `ralph` binary: the one `Project`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub(crate) use super::{BIN, LOOP};

/// A throwaway project: a temporary folder with `.claude/` in it, and a HOME
/// of its own (where ralph keeps its record of armed loops), both removed when
/// dropped. Every `ralph` it runs gets the scrubbed environment
/// (`super::ralph_command`), this HOME and XDG_STATE_HOME, and the variables
/// set with [`Project::with_env`].
pub(crate) struct Project {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Default for Project {
    fn default() -> Self {
        Self::new()
    }
}

impl Project {
    pub(crate) fn new() -> Self {
        let p = Self::bare();
        std::fs::create_dir_all(p.path(".claude")).unwrap();
        p
    }

    /// A project folder with nothing in it, not even `.claude/`.
    pub(crate) fn bare() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            env: Vec::new(),
        }
    }

    /// This project, with `key=value` set for every ralph it runs (before the
    /// variables a single run passes, which win).
    #[must_use]
    pub(crate) fn with_env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    pub(crate) fn home(&self) -> &Path {
        self.home.path()
    }

    /// This test's HOME and XDG_STATE_HOME, for every ralph it runs.
    pub(crate) fn user_env(&self) -> Vec<(&'static str, String)> {
        user_env(self.home())
    }

    /// `ralph ARGS` in the project, as this test's user, not started yet:
    /// stdin empty (`Stdio::null`), stdout and stderr piped.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = super::ralph_command();
        cmd.args(args)
            .current_dir(self.root())
            .envs(self.user_env())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `run_ralph` as this test's user (its own HOME and XDG_STATE_HOME, and
    /// the variables of [`Project::with_env`]), in `cwd`.
    pub(crate) fn ralph_in(
        &self,
        args: &[&str],
        cwd: &Path,
        stdin: &[u8],
        env: &[(&str, &str)],
    ) -> Output {
        let user = self.user_env();
        let mut all: Vec<(&str, &str)> = user.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        all.extend_from_slice(env);
        run_ralph(args, cwd, stdin, &all)
    }

    /// `ralph ARGS` in the project with `stdin` piped in and `env` added.
    pub(crate) fn ralph_with(&self, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
        self.ralph_in(args, self.root(), stdin, env)
    }

    /// `ralph ARGS` in the project on a terminal, `answer` typed into it: `script`
    /// (util-linux) runs it on a pseudo-terminal of its own, whose session begins now.
    /// What it printed comes back as stdout (the terminal's screen).
    pub(crate) fn ralph_on_terminal(&self, args: &[&str], answer: &str) -> Output {
        let quoted: Vec<String> = std::iter::once(BIN)
            .chain(args.iter().copied())
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let mut cmd = Command::new("script");
        super::scrub(&mut cmd);
        cmd.args(["-qec", &quoted.join(" "), "/dev/null"])
            .current_dir(self.root())
            .envs(self.user_env())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("util-linux's `script` is needed");
        let _ = child.stdin.take().unwrap().write_all(answer.as_bytes());
        child.wait_with_output().unwrap()
    }

    /// Registers a hand-written loop file as armed by this user, as a person
    /// would after reading it: `ralph adopt --yes --name NAME`.
    pub(crate) fn adopt(&self, name: &str) {
        let out = self.ralph_in(&["adopt", "--yes", "--name", name], self.root(), b"", &[]);
        assert!(
            out.status.success(),
            "ralph adopt --name {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    pub(crate) fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    pub(crate) fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    /// The file's text, or "" when it is missing or unreadable.
    pub(crate) fn read_or_empty(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    pub(crate) fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }
}

/// HOME and XDG_STATE_HOME for a test user whose home is `home`.
pub(crate) fn user_env(home: &Path) -> Vec<(&'static str, String)> {
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
pub(crate) fn run_ralph(args: &[&str], cwd: &Path, stdin: &[u8], env: &[(&str, &str)]) -> Output {
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
