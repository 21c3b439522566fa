//! Running a loop's `--verify` gate or `--check` command, with a time limit,
//! in a box ([`crate::gate_box`]) that ends everything it started, its
//! output read through a pipe: the SHA-256 of all of it, only its end kept.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::gate_box;
use crate::gate_jail::{self, GateConfinement, JailPlan};
use crate::process::{shell, spawn_in_group, wait_then_end_group};

/// How much of the command's output is kept for the agent.
const TAIL_BYTES: usize = 4000;
const TAIL_LINES: usize = 40;
/// How much of the output's end ralph keeps at all (in memory, for the
/// failure count and a receipt's copy); the digest covers everything.
pub const KEPT_BYTES: usize = 1024 * 1024;
/// How much of the output's end the failure count is read from: enough
/// for go test's `--- FAIL:` lines of a large package, bounded for speed.
const COUNT_BYTES: usize = 256 * 1024;
/// How long the box may take past the gate's own limit to end what the
/// gate started, before the hook ends the box.
const BOX_GRACE: Duration = Duration::from_secs(15);
/// How long the output is read after the command ended, when something it
/// started (where the system lets it escape) still holds the pipe.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

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
    /// The last lines of its output; when ralph kept only the end of it
    /// ([`KEPT_BYTES`]), a first line says so.
    pub output_tail: String,
    /// The exit code, when it exited with one.
    pub exit_code: Option<i32>,
    /// The failure count a test runner reported (`failure::failure_count`).
    pub failures: Option<u64>,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// The SHA-256 of its whole output, in hex (empty: not started).
    pub output_sha256: String,
    /// The size of its whole output, in bytes.
    pub output_bytes: u64,
    /// How it was confined ([`gate_jail::JailPlan::words`]): `sandboxed
    /// (bubblewrap), no network`, `not sandboxed (--gate-sandbox off)`.
    pub sandbox: String,
}

impl Verification {
    /// Whether the output was longer than ralph keeps ([`KEPT_BYTES`]).
    pub fn output_cut(&self) -> bool {
        self.output_bytes > KEPT_BYTES as u64
    }
}

/// How long this process has spent running verification commands so far,
/// including one still running.
pub fn time_in_gates() -> Duration {
    let clock = GATE_CLOCK.lock().unwrap_or_else(PoisonError::into_inner);
    clock.0 + clock.1.map_or(Duration::ZERO, |since| since.elapsed())
}

/// Runs `work` (a gate's preparation: its snapshot, its setup) counted as
/// time in gates, like the gate itself: the hook's own deadline leaves it
/// the gate's limit.
pub fn counted<T>(work: impl FnOnce() -> T) -> T {
    let _timer = GateTimer::start();
    work()
}

/// Marks a gate as running for as long as it lives; inside another (a
/// gate run while its preparation is counted) it leaves the clock to the
/// outer one.
struct GateTimer {
    outer: bool,
}

impl GateTimer {
    fn start() -> Self {
        let mut clock = GATE_CLOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let outer = clock.1.is_none();
        if outer {
            clock.1 = Some(Instant::now());
        }
        Self { outer }
    }
}

impl Drop for GateTimer {
    fn drop(&mut self) {
        let mut clock = GATE_CLOCK.lock().unwrap_or_else(PoisonError::into_inner);
        if self.outer
            && let Some(since) = clock.1.take()
        {
            clock.0 += since.elapsed();
        }
    }
}

/// Runs `command` through the shell ([`shell`]: `sh -c`, or `cmd /C` on a
/// Windows without `sh`) in `root`, stdin from nothing, stdout and stderr
/// together into a pipe ralph reads, in the gate's box ([`gate_box`]),
/// which ends everything the command started when it exits or outlives
/// `timeout`; in the gate's sandbox ([`gate_jail`]) as `confinement` asks.
pub fn run(
    command: &str,
    root: &Path,
    timeout: Duration,
    confinement: &GateConfinement,
) -> Verification {
    run_keeping(command, root, timeout, confinement).0
}

/// [`run`], also handing back the end of the output ralph kept (at most
/// [`KEPT_BYTES`]) for a receipt.
pub fn run_keeping(
    command: &str,
    root: &Path,
    timeout: Duration,
    confinement: &GateConfinement,
) -> (Verification, Vec<u8>) {
    let _timer = GateTimer::start();
    // Our own streams are Claude Code's pipes: not to be opened through
    // /proc/<pid>/fd by what the gate starts (when it is not root).
    #[cfg(target_os = "linux")]
    crate::process::hide_own_files();
    let plan = gate_jail::plan(confinement, root);
    let sandbox = plan.words(confinement.network);
    let started = Instant::now();
    let ran = match &plan {
        JailPlan::Refused(why) => Err(std::io::Error::other(format!(
            "the gate's sandbox cannot be had: {why}. Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
        ))),
        JailPlan::Jailed { bwrap, args } => run_boxed(command, root, timeout, Some((bwrap, args))),
        JailPlan::Unconfined(_) => run_boxed(command, root, timeout, None),
    };
    let (status, captured) = match ran {
        Ok(done) => done,
        Err(e) => {
            let verdict = Verification {
                sandbox,
                ..not_started(&e)
            };
            return (verdict, Vec::new());
        }
    };
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (passed, status, exit_code) = match status {
        Ended::Exited(0) => (true, "exit 0".to_owned(), Some(0)),
        Ended::Exited(code) => (false, format!("exit {code}"), Some(code)),
        Ended::Killed => (false, "killed by a signal".to_owned(), None),
        Ended::TimedOut => (
            false,
            format!("timed out after {}s", timeout.as_secs()),
            None,
        ),
    };
    let verdict = Verification {
        passed,
        status,
        output_tail: captured.tail(),
        exit_code,
        failures: crate::failure::failure_count(&captured.end(COUNT_BYTES)),
        duration_ms,
        output_sha256: captured.sha256.clone(),
        output_bytes: captured.total,
        sandbox,
    };
    (verdict, captured.kept)
}

/// How the command ended.
enum Ended {
    Exited(i32),
    Killed,
    TimedOut,
}

/// Starts the command (in the box when this program serves one, in
/// bubblewrap when `jail` names it), reads its output while it runs, and
/// waits for it.
fn run_boxed(
    command: &str,
    root: &Path,
    timeout: Duration,
    jail: Option<gate_box::Jail<'_>>,
) -> std::io::Result<(Ended, Captured)> {
    let boxed = gate_box::available();
    let mut cmd = match (boxed, jail) {
        (true, _) => gate_box::command(command, timeout, jail)?,
        (false, Some((bwrap, args))) => {
            let mut cmd = crate::process::found_program(bwrap);
            cmd.args(args).arg(command);
            cmd
        }
        (false, None) => shell(command)?,
    };
    let (reader, writer) = std::io::pipe()?;
    cmd.current_dir(root)
        .stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer);
    let collector = Collector::start(reader);
    let started = Instant::now();
    let spawned = spawn_in_group(&mut cmd);
    // Our copies of the pipe's writing end go with the command: the read
    // ends when the last process the gate started has gone.
    drop(cmd);
    let mut group = spawned?;
    let limit = if boxed { timeout + BOX_GRACE } else { timeout };
    let status = wait_then_end_group(&mut group, limit);
    let captured = collector.finish(DRAIN_LIMIT);
    let timed_out = started.elapsed() >= timeout;
    let ended = match status.map(|s| s.code()) {
        // The hook's own limit: the box (or the command) did not end.
        None => Ended::TimedOut,
        // The box ends itself by a signal when the command was killed or
        // ran out of time (on Windows with code 1): the time tells which.
        Some(None) if timed_out => Ended::TimedOut,
        Some(None) => Ended::Killed,
        Some(Some(1)) if cfg!(windows) && boxed && timed_out => Ended::TimedOut,
        Some(Some(code)) => Ended::Exited(code),
    };
    Ok((ended, captured))
}

fn not_started(e: &std::io::Error) -> Verification {
    Verification {
        passed: false,
        status: format!("could not start: {e}"),
        ..Verification::default()
    }
}

/// The output as it is read: the digest of all of it, its size, and its
/// last [`KEPT_BYTES`].
#[derive(Debug, Clone)]
struct Captured {
    sha256: String,
    total: u64,
    kept: Vec<u8>,
}

impl Captured {
    /// The last `bytes` of what was kept, as text.
    fn end(&self, bytes: usize) -> String {
        String::from_utf8_lossy(&self.kept[self.kept.len().saturating_sub(bytes)..]).into_owned()
    }

    /// The last [`TAIL_LINES`] lines of the last [`TAIL_BYTES`], after a
    /// line that says so when ralph kept only the output's end.
    fn tail(&self) -> String {
        let text = self.end(TAIL_BYTES);
        let lines: Vec<&str> = text.lines().collect();
        let keep = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
        if self.total > KEPT_BYTES as u64 {
            format!(
                "[output cut: {} bytes in all; ralph kept the last {KEPT_BYTES}, and the SHA-256 covers all of it]\n{keep}",
                self.total
            )
        } else {
            keep
        }
    }
}

/// What the reading thread has seen so far.
struct Reading {
    hash: Sha256,
    total: u64,
    /// The output's end: between [`KEPT_BYTES`] and twice that, trimmed to
    /// [`KEPT_BYTES`] when it is taken.
    end: Vec<u8>,
}

/// A thread that reads the command's output as it comes.
struct Collector {
    state: Arc<Mutex<Reading>>,
    finished: std::sync::mpsc::Receiver<()>,
}

impl Collector {
    fn start(mut reader: std::io::PipeReader) -> Self {
        let state = Arc::new(Mutex::new(Reading {
            hash: Sha256::new(),
            total: 0,
            end: Vec::new(),
        }));
        let (tell, finished) = std::sync::mpsc::channel();
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut r = shared.lock().unwrap_or_else(PoisonError::into_inner);
                r.hash.update(&buf[..n]);
                r.total = r.total.saturating_add(n as u64);
                r.end.extend_from_slice(&buf[..n]);
                if r.end.len() > 2 * KEPT_BYTES {
                    let cut = r.end.len() - KEPT_BYTES;
                    r.end.drain(..cut);
                }
            }
            let _ = tell.send(());
        });
        Self { state, finished }
    }

    /// What was read once the pipe closed, or `limit` after the command
    /// ended if something it started still holds it open.
    fn finish(self, limit: Duration) -> Captured {
        let _ = self.finished.recv_timeout(limit);
        let r = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = r.end[r.end.len().saturating_sub(KEPT_BYTES)..].to_vec();
        Captured {
            sha256: r
                .hash
                .clone()
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            total: r.total,
            kept,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn passes_fails_and_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let off = GateConfinement::off();
        let run = |c: &str, d: &Path, t: Duration| super::run(c, d, t, &off);
        let ok = run("echo fine", dir.path(), Duration::from_secs(5));
        assert!(ok.passed);
        assert_eq!(ok.output_tail, "fine");
        let bad = run("echo broke >&2; exit 3", dir.path(), Duration::from_secs(5));
        assert_eq!(
            (bad.passed, bad.status.as_str(), bad.output_tail.as_str()),
            (false, "exit 3", "broke")
        );
        let started = Instant::now();
        let slow = run("sleep 600", dir.path(), Duration::from_millis(300));
        assert!(!slow.passed && slow.status.starts_with("timed out"));
        // Far below the 600 s sleep: stopped at its limit (a hang guard, not a race).
        assert!(started.elapsed() < Duration::from_secs(120));
        assert!(time_in_gates() >= Duration::from_millis(300));
    }

    /// Without the box (this test binary serves none), a sandboxed gate
    /// runs in bubblewrap itself: it writes its folder; what it writes
    /// beside it lands in the sandbox's own `/tmp`, gone when it ends.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_sandboxed_gate_writes_only_its_folder() {
        if crate::process::find_program("bwrap").is_none() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let required = GateConfinement {
            sandboxing: gate_jail::Sandboxing::Required,
            ..GateConfinement::default()
        };
        let v = run(
            "echo \"$RALPH_GATE_SANDBOX\" > inside; echo x > ../beside",
            &root,
            Duration::from_secs(20),
            &required,
        );
        assert_eq!(v.sandbox, "sandboxed (bubblewrap), no network", "{v:?}");
        assert!(v.passed, "{v:?}");
        assert_eq!(
            std::fs::read_to_string(root.join("inside")).unwrap(),
            "bwrap\n"
        );
        assert!(!dir.path().join("beside").exists());
    }

    #[cfg(windows)]
    #[test]
    fn passes_fails_and_times_out_through_cmd() {
        let dir = tempfile::tempdir().unwrap();
        let off = GateConfinement::off();
        let run = |c: &str, d: &Path, t: Duration| super::run(c, d, t, &off);
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
            "\"{}\" --exact gate::tests::tree_helper --ignored --test-threads 1",
            me.display()
        );
        let ticks = dir.path().join("ticks");
        let size = || std::fs::metadata(&ticks).map_or(0, |m| m.len());
        // Long enough for both processes to start on a loaded machine (and
        // under Wine); the gate returns at its limit, then the tree is dead.
        let started = Instant::now();
        let result = run(
            &command,
            dir.path(),
            Duration::from_secs(15),
            &GateConfinement::off(),
        );
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
