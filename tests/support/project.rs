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
        let user = self.user_env();
        let mut env: Vec<(&str, &str)> = user.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.extend(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        run_on_terminal(args, self.root(), &env, answer)
    }

    /// Registers a hand-written loop file as armed by this user, as a person
    /// would after reading it: `ralph adopt --name NAME` on a terminal, answered yes
    /// (adopting is the user's own step: never without a terminal).
    #[cfg(unix)]
    pub(crate) fn adopt(&self, name: &str) {
        let out = self.ralph_on_terminal(&["adopt", "--name", name], "y\n");
        assert!(
            out.status.success(),
            "ralph adopt --name {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Windows (the tests run under Wine, with no console to answer on): the
    /// adoption `ralph adopt` records once the user said yes, made by the
    /// core's own function for this test's user.
    #[cfg(windows)]
    pub(crate) fn adopt(&self, name: &str) {
        use ralph_state::storage::{registry, store::Project as Root};
        let home = self.home();
        let registry = registry::locate(Some(&home.join(".local/state")), Some(home))
            .expect("the test user's registry");
        let root = Root {
            root: self.root().to_owned(),
        };
        let text = std::fs::read_to_string(root.loop_path(name)).expect("the loop file");
        ralph_control::adopt(
            &root,
            &registry,
            name,
            &text,
            ralph_state::time::Timestamp::now(),
        )
        .unwrap_or_else(|e| panic!("adopt {name}: {e}"));
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
    let mut child = spawn_despite_wine(&mut cmd);
    // The process may answer before reading everything; a closed pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

/// Wine's process creation, in the Windows tests, sometimes fails on a loaded machine with
/// ERROR_INTERNAL_ERROR (1359) before the program runs at all: that, and only that, is tried
/// again, a few times, so a test never fails for want of a process. Any other error, and
/// every error off Windows, fails the test at once.
fn spawn_despite_wine(cmd: &mut Command) -> std::process::Child {
    const WINE_INTERNAL_ERROR: i32 = 1359;
    let mut tries = 0u64;
    loop {
        match cmd.spawn() {
            Ok(child) => return child,
            Err(e)
                if cfg!(windows) && e.raw_os_error() == Some(WINE_INTERNAL_ERROR) && tries < 8 =>
            {
                tries += 1;
                eprintln!("wine could not create the process ({e}); trying again ({tries} of 8)");
                std::thread::sleep(std::time::Duration::from_millis(100 * tries));
            }
            Err(e) => panic!("spawn {cmd:?}: {e}"),
        }
    }
}

/// `ralph ARGS` in `cwd` on a terminal, with `env` and the environment scrubbed, `keys`
/// typed into it: `script` (util-linux) runs it on a pseudo-terminal of its own, whose
/// session begins now. What it printed comes back as stdout (the terminal's screen).
pub(crate) fn run_on_terminal(
    args: &[&str],
    cwd: &Path,
    env: &[(&str, &str)],
    keys: &str,
) -> Output {
    let quoted: Vec<String> = std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let mut cmd = Command::new("script");
    super::scrub(&mut cmd);
    cmd.args(["-qec", &quoted.join(" "), "/dev/null"])
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("util-linux's `script` is needed");
    let _ = child.stdin.take().unwrap().write_all(keys.as_bytes());
    child.wait_with_output().unwrap()
}

/// Returns once a loop armed from now on began two whole seconds after a terminal session
/// that has already begun, as ralph's check of a user's terminal reads both (the session's
/// start in whole seconds, rounded up: this second or the next). Goes by the clock, never
/// by a fixed sleep: however late the session began, it began before this call.
pub(crate) fn until_younger_loops_tell_apart() {
    let whole_seconds = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let latest_session_start = whole_seconds() + 1;
    while whole_seconds() < latest_session_start + 2 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A terminal of the user's, open before a loop begins: `script` runs `sh` on a
/// pseudo-terminal of its own (the shell leads its session, which begins when the terminal
/// opens), and each [`UserTerminal::ralph`] types a command line and the keys that answer
/// it, as the user would. ralph's own steps (raising a bound, forcing over a live loop)
/// take a terminal whose session began before the loop did.
pub(crate) struct UserTerminal {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    screen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    marks: tempfile::TempDir,
    count: u32,
}

impl UserTerminal {
    /// Opens the terminal in `p`'s folder, as `p`'s user; returns once its shell answers
    /// and a loop armed from now on is younger than its session by what the check tells
    /// apart ([`until_younger_loops_tell_apart`]), however long the shell took to start.
    pub(crate) fn open(p: &Project) -> Self {
        let mut cmd = Command::new("script");
        super::scrub(&mut cmd);
        cmd.args(["-qfc", "sh", "/dev/null"])
            .current_dir(p.root())
            .envs(p.user_env())
            .envs(p.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("util-linux's `script` is needed");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let shown = std::sync::Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
                if n == 0 {
                    break;
                }
                shown.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut terminal = Self {
            child,
            stdin,
            screen,
            marks: tempfile::tempdir().unwrap(),
            count: 0,
        };
        // The shell answering proves its session has begun: by now at the latest.
        let ready = terminal.marks.path().join("ready");
        let line = format!(": > '{}'\n", ready.display());
        terminal.stdin.write_all(line.as_bytes()).unwrap();
        terminal.stdin.flush().unwrap();
        let started = std::time::Instant::now();
        while !ready.exists() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(120),
                "the terminal's shell never answered"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        until_younger_loops_tell_apart();
        terminal
    }

    /// Types `ralph ARGS` (in the project), then `keys`; waits for it to end. Its exit
    /// code, and the screen from the line typed on.
    pub(crate) fn ralph(&mut self, args: &[&str], keys: &str) -> (i32, String) {
        self.count += 1;
        let mark = self.marks.path().join(format!("rc-{}", self.count));
        let mark = mark.display();
        let quoted: Vec<String> = std::iter::once(BIN)
            .chain(args.iter().copied())
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let line = format!(
            "{}; echo $? > '{mark}.tmp'; mv '{mark}.tmp' '{mark}'\n",
            quoted.join(" ")
        );
        let from = self.screen.lock().unwrap().len();
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(keys.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        let started = std::time::Instant::now();
        let code = loop {
            if let Ok(text) = std::fs::read_to_string(mark.to_string()) {
                break text.trim().parse().unwrap_or(-1);
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(120),
                "`ralph {args:?}` never ended on the terminal"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        // The screen catches up with what the command printed before its mark.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let screen = self.screen.lock().unwrap();
        (
            code,
            String::from_utf8_lossy(screen.get(from..).unwrap_or_default()).into_owned(),
        )
    }
}

impl Drop for UserTerminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
