//! Running the verification command of a loop's gate, with a time limit.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::fs::process::{Stop, scratch_file, shell, spawn_in_group, stop_group};

/// How much of the command's output is kept for the agent.
const TAIL_BYTES: u64 = 4000;
const TAIL_LINES: usize = 40;

/// Time this process has spent in verification gates: finished gates, and
/// the start of the one running. The hook's overall deadline leaves the
/// gate its own limit by not counting this time.
static GATE_CLOCK: Mutex<(Duration, Option<Instant>)> = Mutex::new((Duration::ZERO, None));

/// What a gate's command did: passed, how it ended, the end of its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    pub passed: bool,
    /// `exit 3`, `timed out after 300s`, `could not start: …`
    pub status: String,
    /// The last lines of its output.
    pub output_tail: String,
}

/// How long this process has spent running verification commands so far,
/// including one still running.
pub fn time_in_gates() -> Duration {
    let clock = GATE_CLOCK.lock().unwrap_or_else(PoisonError::into_inner);
    clock.0 + clock.1.map_or(Duration::ZERO, |since| since.elapsed())
}

/// Marks a gate as running for as long as it lives.
struct GateTimer;

impl GateTimer {
    fn start() -> Self {
        GATE_CLOCK.lock().unwrap_or_else(PoisonError::into_inner).1 = Some(Instant::now());
        Self
    }
}

impl Drop for GateTimer {
    fn drop(&mut self) {
        let mut clock = GATE_CLOCK.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(since) = clock.1.take() {
            clock.0 += since.elapsed();
        }
    }
}

/// Runs `command` through the shell ([`shell`]: `sh -c`, or `cmd /C` on a
/// Windows without `sh`) in `root`, stdout and stderr together, killing its
/// whole process group (Windows: job object) if it outlives `timeout`.
pub fn run(command: &str, root: &Path, timeout: Duration) -> Verification {
    let _timer = GateTimer::start();
    let output = match scratch_file() {
        Ok(f) => f,
        Err(e) => return not_started(&e),
    };
    let (Ok(out), Ok(err)) = (output.try_clone(), output.try_clone()) else {
        return not_started(&std::io::Error::other("cannot share the output file"));
    };
    let mut sh = shell(command);
    sh.current_dir(root)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    let mut group = match spawn_in_group(&mut sh) {
        Ok(g) => g,
        Err(e) => return not_started(&e),
    };
    let started = Instant::now();
    let status = loop {
        match group.child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() >= timeout => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    if status.is_none() {
        // A system call, not a `kill` binary: works whatever PATH holds.
        // If the group cannot be signalled, `stop_group` kills the shell
        // itself; either way the wait below cannot outlive it.
        let _ = stop_group(&mut group, Stop::Kill);
        let _ = group.child.wait();
    }
    let tail = read_tail(output);
    match status {
        Some(s) if s.success() => Verification {
            passed: true,
            status: "exit 0".into(),
            output_tail: tail,
        },
        Some(s) => Verification {
            passed: false,
            status: s
                .code()
                .map_or_else(|| "killed by a signal".to_owned(), |c| format!("exit {c}")),
            output_tail: tail,
        },
        None => Verification {
            passed: false,
            status: format!("timed out after {}s", timeout.as_secs()),
            output_tail: tail,
        },
    }
}

fn not_started(e: &std::io::Error) -> Verification {
    Verification {
        passed: false,
        status: format!("could not start: {e}"),
        output_tail: String::new(),
    }
}

fn read_tail(mut file: File) -> String {
    let len = file.seek(SeekFrom::End(0)).unwrap_or(0);
    let start = len.saturating_sub(TAIL_BYTES);
    let mut buf = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_ok() {
        let _ = file.read_to_end(&mut buf);
    }
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    let keep = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    keep.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn passes_fails_and_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let ok = run("echo fine", dir.path(), Duration::from_secs(5));
        assert!(ok.passed);
        assert_eq!(ok.output_tail, "fine");
        let bad = run("echo broke >&2; exit 3", dir.path(), Duration::from_secs(5));
        assert_eq!(
            (bad.passed, bad.status.as_str(), bad.output_tail.as_str()),
            (false, "exit 3", "broke")
        );
        let started = Instant::now();
        let slow = run("sleep 30", dir.path(), Duration::from_millis(300));
        assert!(!slow.passed && slow.status.starts_with("timed out"));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(time_in_gates() >= Duration::from_millis(300));
    }

    #[cfg(windows)]
    #[test]
    fn passes_fails_and_times_out_through_cmd() {
        let dir = tempfile::tempdir().unwrap();
        let ok = run("echo fine", dir.path(), Duration::from_secs(20));
        assert!(ok.passed, "{ok:?}");
        assert_eq!(ok.output_tail.trim_end(), "fine");
        let bad = run(
            "echo broke 1>&2 & exit 3",
            dir.path(),
            Duration::from_secs(20),
        );
        assert_eq!((bad.passed, bad.status.as_str()), (false, "exit 3"));
        assert_eq!(bad.output_tail.trim_end(), "broke");
    }

    /// Marks the folder the tree helper runs in; elsewhere it does nothing.
    const HELPER_MARK: &str = "ralph-tree-helper";

    /// Not a test: run by [`a_timeout_kills_the_whole_tree`] as the verify
    /// command. The first copy starts a second (the grandchild), which
    /// appends to `ticks` every 20 ms; both live for a minute unless killed.
    #[test]
    #[ignore = "a helper process for a_timeout_kills_the_whole_tree"]
    fn tree_helper() {
        use std::io::Write;
        if !Path::new(HELPER_MARK).is_file() {
            return;
        }
        let parent = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open("parent-started")
            .is_ok();
        if parent {
            let args: Vec<String> = std::env::args().skip(1).collect();
            let me = std::env::current_exe().unwrap();
            let mut grandchild = std::process::Command::new(me).args(args).spawn().unwrap();
            let _ = grandchild.wait();
            return;
        }
        let mut ticks = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open("ticks")
            .unwrap();
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            ticks.write_all(b"x").unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The gate's timeout ends the command and what it started: a
    /// grandchild that was writing stops writing.
    #[test]
    fn a_timeout_kills_the_whole_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(HELPER_MARK), "").unwrap();
        let me = std::env::current_exe().unwrap();
        let command = format!(
            "\"{}\" --exact fs::gate::tests::tree_helper --ignored --test-threads 1",
            me.display()
        );
        let ticks = dir.path().join("ticks");
        let size = || std::fs::metadata(&ticks).map_or(0, |m| m.len());
        // Long enough for both processes to start on a loaded machine (and
        // under Wine); the gate returns at its limit, then the tree is dead.
        let started = Instant::now();
        let result = run(&command, dir.path(), Duration::from_secs(15));
        assert!(result.status.starts_with("timed out"), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(40));
        assert!(size() > 0, "the grandchild never ran: {result:?}");
        // Killing is asynchronous: wait until the size holds still for a second.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut last = (size(), Instant::now());
        while last.1.elapsed() < Duration::from_secs(1) {
            assert!(Instant::now() < deadline, "the grandchild kept writing");
            std::thread::sleep(Duration::from_millis(50));
            if size() != last.0 {
                last = (size(), Instant::now());
            }
        }
    }
}
