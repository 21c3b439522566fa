//! Running a loop's `--verify` gate or `--check` command, with a time limit.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::fs::process::{scratch_file, shell, spawn_in_group, wait_then_end_group};

/// How much of the command's output is kept for the agent.
const TAIL_BYTES: u64 = 4000;
const TAIL_LINES: usize = 40;

/// Time this process has spent in verification gates: finished gates, and
/// the start of the one running. The hook's overall deadline leaves the
/// gate its own limit by not counting this time.
static GATE_CLOCK: Mutex<(Duration, Option<Instant>)> = Mutex::new((Duration::ZERO, None));

/// What a gate's (or check's) command did: passed, how it ended, the end
/// of its output, and what a receipt and the breakers need of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verification {
    pub passed: bool,
    /// `exit 3`, `timed out after 300s`, `could not start: …`
    pub status: String,
    /// The last lines of its output.
    pub output_tail: String,
    /// The exit code, when it exited with one.
    pub exit_code: Option<i32>,
    /// The failure count a test runner reported (`failure::failure_count`).
    pub failures: Option<u64>,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// The SHA-256 of its whole output, in hex (empty: not started).
    pub output_sha256: String,
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
/// Windows without `sh`) in `root`, stdin from nothing, stdout and stderr
/// together into an unlinked scratch file, in its own process group
/// (Windows: job object), which is ended when the command exits and when
/// it outlives `timeout`: nothing it started in the background lives on.
pub fn run(command: &str, root: &Path, timeout: Duration) -> Verification {
    run_keeping(command, root, timeout).0
}

/// [`run`], also handing back the whole output (rewound) for a receipt.
pub fn run_keeping(command: &str, root: &Path, timeout: Duration) -> (Verification, Option<File>) {
    let _timer = GateTimer::start();
    let output = match scratch_file() {
        Ok(f) => f,
        Err(e) => return (not_started(&e), None),
    };
    let (Ok(out), Ok(err)) = (output.try_clone(), output.try_clone()) else {
        return (
            not_started(&std::io::Error::other("cannot share the output file")),
            None,
        );
    };
    let mut sh = shell(command);
    sh.current_dir(root)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    let started = Instant::now();
    let mut group = match spawn_in_group(&mut sh) {
        Ok(g) => g,
        Err(e) => return (not_started(&e), None),
    };
    let status = wait_then_end_group(&mut group, timeout);
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut output = output;
    let read = read_output(&mut output);
    let (passed, status, exit_code) = match status {
        Some(s) if s.success() => (true, "exit 0".to_owned(), Some(0)),
        Some(s) => (
            false,
            s.code()
                .map_or_else(|| "killed by a signal".to_owned(), |c| format!("exit {c}")),
            s.code(),
        ),
        None => (
            false,
            format!("timed out after {}s", timeout.as_secs()),
            None,
        ),
    };
    let verdict = Verification {
        passed,
        status,
        output_tail: read.tail,
        exit_code,
        failures: crate::failure::failure_count(&read.end),
        duration_ms,
        output_sha256: read.sha256,
    };
    let kept = output.seek(SeekFrom::Start(0)).is_ok().then_some(output);
    (verdict, kept)
}

fn not_started(e: &std::io::Error) -> Verification {
    Verification {
        passed: false,
        status: format!("could not start: {e}"),
        ..Verification::default()
    }
}

/// What is read back from a command's output file.
struct ReadOutput {
    /// The last [`TAIL_LINES`] lines (of the last [`TAIL_BYTES`]).
    tail: String,
    /// The last [`COUNT_BYTES`], where a test runner's summary is.
    end: String,
    /// The SHA-256 of all of it.
    sha256: String,
}

/// How much of the output's end the failure count is read from: enough
/// for go test's `--- FAIL:` lines of a large package, bounded for speed.
const COUNT_BYTES: u64 = 256 * 1024;

fn read_output(file: &mut File) -> ReadOutput {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let mut len = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    if file.seek(SeekFrom::Start(0)).is_ok() {
        while let Ok(n) = file.read(&mut buf) {
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
            len = len.saturating_add(n as u64);
        }
    }
    let sha256 = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let mut from_end = |bytes: u64| {
        let mut out = Vec::new();
        if file
            .seek(SeekFrom::Start(len.saturating_sub(bytes)))
            .is_ok()
        {
            let _ = file.take(bytes).read_to_end(&mut out);
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    let end = from_end(COUNT_BYTES);
    let text = from_end(TAIL_BYTES);
    let lines: Vec<&str> = text.lines().collect();
    let keep = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    ReadOutput {
        tail: keep.join("\n"),
        end,
        sha256,
    }
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
