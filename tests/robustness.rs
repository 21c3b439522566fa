//! Robustness of `ralph hook stop` as a real process: many hooks racing on
//! one loop, and hooks killed at random points of their run.
//!
//! Neither test asserts anything about timing, so both hold on a loaded
//! machine; only their runtime grows with the load.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ralph_state::fields::state::LoopState;
use ralph_state::storage::store::Project;
use serde_json::{Value, json};

use crate::support::{BIN, LOOP};

const SESSION: &str = "robustness-session";

/// A project in a fresh temporary folder, on a RAM disk when there is one:
/// the hook fsyncs every write, and these tests are about process deaths and
/// races (which the page cache survives), not about power loss.
fn project() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("ralph-robustness-")
            .tempdir_in(shm)
            .or_else(|_| tempfile::tempdir())
    } else {
        tempfile::tempdir()
    }
    .expect("a temporary folder");
    std::fs::create_dir_all(dir.path().join(".claude")).expect("create .claude");
    dir
}

/// This test's HOME, inside its temporary folder (ralph keeps its record of
/// armed loops under it), so that the user's own is never touched.
fn home(root: &Path) -> PathBuf {
    root.join(".home")
}

/// Arms an unlimited loop with the breakers off, through the real CLI.
fn arm(root: &Path) {
    let out = Command::new(BIN)
        .current_dir(root)
        .env("CLAUDE_PROJECT_DIR", root)
        .env("HOME", home(root))
        .env("XDG_STATE_HOME", home(root).join(".local/state"))
        .args([
            "start",
            "--max-iterations",
            "0",
            "--completion-promise",
            "DONE",
            "--session-id",
            SESSION,
            "--stuck-after",
            "0",
            "--no-progress-after",
            "0",
            "Keep improving the code.",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run ralph start");
    assert!(
        out.status.success(),
        "ralph start failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn state(root: &Path) -> LoopState {
    let text = std::fs::read_to_string(root.join(LOOP)).expect("the loop file exists");
    LoopState::parse(&text).unwrap_or_else(|e| panic!("the loop file does not parse: {e}\n{text}"))
}

fn hook(root: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["hook", "stop"])
        .current_dir(root)
        .env("CLAUDE_PROJECT_DIR", root)
        .env("HOME", home(root))
        .env("XDG_STATE_HOME", home(root).join(".local/state"))
        .env("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn event(root: &Path, reply: &str) -> Vec<u8> {
    json!({
        "session_id": SESSION,
        "transcript_path": root.join("no-transcript.jsonl"),
        "cwd": root,
        "hook_event_name": "Stop",
        "stop_hook_active": true,
        "last_assistant_message": reply,
    })
    .to_string()
    .into_bytes()
}

/// Names in `.claude/` that look like the atomic writer's temp files.
fn temp_files(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join(".claude"))
        .expect("read .claude")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(ralph_fs::safe_fs::TEMP_PREFIX))
        .collect();
    names.sort();
    names
}

/// 8 processes × 200 Stop events on one loop: every event blocks exactly
/// once, nothing is lost or counted twice, and no temp file stays behind.
#[test]
fn concurrent_stops_each_advance_the_loop_exactly_once() {
    const WORKERS: usize = 8;
    const EVENTS: usize = 200;
    let dir = project();
    let root: PathBuf = dir.path().to_owned();
    arm(&root);
    let before = state(&root).iteration;

    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let root = root.clone();
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for i in 0..EVENTS {
                    let mut child = hook(&root).spawn().expect("spawn ralph hook stop");
                    let input = event(&root, &format!("worker {w}, event {i}: still going."));
                    child
                        .stdin
                        .take()
                        .expect("stdin")
                        .write_all(&input)
                        .expect("write the event");
                    let out = child.wait_with_output().expect("wait for the hook");
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    let ok = out.status.code() == Some(0)
                        && serde_json::from_str::<Value>(&stdout)
                            .is_ok_and(|v| v["decision"] == "block");
                    if !ok {
                        failures.push(format!(
                            "worker {w} event {i}: status {:?}, stdout {stdout:?}, stderr {:?}",
                            out.status,
                            String::from_utf8_lossy(&out.stderr)
                        ));
                    }
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("worker thread"))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} stops did not block:\n{}",
        failures.len(),
        WORKERS * EVENTS,
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    let after = state(&root);
    assert_eq!(
        after.iteration,
        before + (WORKERS * EVENTS) as u64,
        "each stop advances the loop by exactly one"
    );
    assert!(after.active);
    assert_eq!(after.prompt, "Keep improving the code.");
    assert_eq!(temp_files(&root), Vec::<String>::new(), "temp files left");
    let log = std::fs::read_to_string(root.join(".claude/ralph/logs/ralph.jsonl"))
        .expect("the decision log");
    assert_eq!(
        log.lines().count(),
        WORKERS * EVENTS,
        "one decision-log line per stop"
    );
    for line in log.lines() {
        serde_json::from_str::<Value>(line)
            .unwrap_or_else(|e| panic!("torn decision-log line {line:?}: {e}"));
    }
}

/// xorshift64*: a fixed seed, so the sequence of kill delays is repeatable.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Kills the hook with SIGKILL at a random moment of its run, thousands of
/// times: the loop file is always there, always parses, and its iteration
/// only ever moves from n to n or n + 1.
#[test]
fn sigkill_at_any_moment_never_tears_the_loop_file() {
    const RUNS: usize = 2000;
    /// Stop early (still having checked hundreds of kills) on a machine so
    /// loaded that the full count would take unreasonably long.
    const TIME_BUDGET: Duration = Duration::from_secs(50);
    let dir = project();
    let root = dir.path();
    arm(root);
    // Kill delays span 0–3 ms, or the whole run when a hook takes longer
    // (a debug build, a loaded machine), so kills land in every phase of it,
    // including the write.
    let mut samples: Vec<Duration> = (0..5)
        .map(|i| {
            let t = Instant::now();
            let mut child = hook(root).spawn().expect("spawn ralph hook stop");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(&event(root, &format!("warm-up {i}")))
                .expect("write the event");
            let out = child.wait_with_output().expect("wait for the hook");
            assert!(String::from_utf8_lossy(&out.stdout).contains("\"block\""));
            t.elapsed()
        })
        .collect();
    samples.sort();
    let max_delay_us = (samples[2].as_micros() as u64 * 6 / 5).clamp(3000, 20_000);
    let mut iteration = state(root).iteration;
    let mut rng = XorShift(0x5eed_1234_abcd_0042);
    let (mut killed, mut advanced, mut finished) = (0usize, 0usize, 0usize);
    let started = Instant::now();
    let mut runs = 0;

    while runs < RUNS && (runs < 300 || started.elapsed() < TIME_BUDGET) {
        runs += 1;
        let delay = Duration::from_micros(rng.next() % (max_delay_us + 1));
        let mut child = hook(root).spawn().expect("spawn ralph hook stop");
        let input = event(root, &format!("run {runs}: working."));
        if let Some(mut stdin) = child.stdin.take() {
            // The hook may already be dead or gone: a broken pipe is fine.
            let _ = stdin.write_all(&input);
        }
        std::thread::sleep(delay);
        if matches!(child.try_wait(), Ok(Some(_))) {
            finished += 1;
        } else {
            let _ = child.kill();
            killed += 1;
        }
        let _ = child.wait();

        let path = root.join(LOOP);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("run {runs}: the loop file is missing: {e}"));
        assert!(!text.is_empty(), "run {runs}: the loop file is empty");
        let now = LoopState::parse(&text)
            .unwrap_or_else(|e| panic!("run {runs}: the loop file is torn: {e}\n{text}"))
            .iteration;
        assert!(
            now == iteration || now == iteration + 1,
            "run {runs}: iteration went from {iteration} to {now}"
        );
        advanced += usize::from(now == iteration + 1);
        iteration = now;
        assert!(
            std::fs::read_dir(root.join(".claude/ralph/history"))
                .map_or(true, |mut d| d.next().is_none()),
            "run {runs}: the loop was ended or moved aside as corrupt"
        );
    }

    // Leftover temp files can only come from killed writers, and they never
    // pass for a loop: the project still lists exactly one loop, which the
    // next (unkilled) stop advances as usual.
    let leftovers = temp_files(root);
    eprintln!(
        "{runs} runs in {:.1?} (kill delays 0–{max_delay_us} µs): {killed} killed, {finished} finished first, {advanced} advanced the loop; {} temp files left: {:?}",
        started.elapsed(),
        leftovers.len(),
        leftovers.iter().take(5).collect::<Vec<_>>()
    );
    assert!(leftovers.len() <= killed);
    for name in &leftovers {
        assert!(
            !name.ends_with(ralph_state::storage::store::LOOP_SUFFIX),
            "unexpected temp file {name}"
        );
    }
    let listed = loop_names(root);
    assert_eq!(listed, ["ralph"], "temp files must not be taken for loops");

    let mut child = hook(root).spawn().expect("spawn ralph hook stop");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&event(root, "after the storm"))
        .expect("write the event");
    let out = child.wait_with_output().expect("wait for the hook");
    let answer: Value = serde_json::from_slice(&out.stdout).expect("a JSON answer");
    assert_eq!(answer["decision"], "block");
    assert_eq!(state(root).iteration, iteration + 1);
    assert!(runs >= 300, "only {runs} kill runs fit in the time budget");
}

/// `strace`, found on PATH: it lets a test stop ralph at one exact system call.
#[cfg(target_os = "linux")]
fn strace() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("strace"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = "strace is not installed (apt-get install strace)";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("\n*** SKIPPED {why} ***\n");
    }
    found
}

/// Kills the hook with SIGKILL exactly between writing the new loop file and
/// renaming it into place (strace turns the rename into a kill), so the kill
/// is known to land mid-write: the new state is complete in a temp file but
/// not yet the loop. The loop file keeps every byte of the old state, the
/// next stop carries on from it without taking the temp file for a loop, and
/// once the temp file is stale a stop removes it.
#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(no_strace, ignore = "strace not installed: apt-get install strace")]
fn sigkill_between_write_and_rename_leaves_the_old_loop_file_whole() {
    use std::os::unix::process::ExitStatusExt;

    let Some(strace) = strace() else { return };
    let dir = project();
    let root = dir.path();
    arm(root);
    let stop = |reply: &str| -> Value {
        let mut child = hook(root).spawn().expect("spawn ralph hook stop");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(&event(root, reply))
            .expect("write the event");
        let out = child.wait_with_output().expect("wait for the hook");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "not a JSON answer ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    };
    assert_eq!(stop("first turn")["decision"], "block");
    let before = std::fs::read(root.join(LOOP)).expect("read the loop file");
    let iteration = state(root).iteration;
    assert!(temp_files(root).is_empty());

    // The first rename any process of the hook makes is the loop file's:
    // strace fails it and sends SIGKILL before it runs.
    let hook_cmd = hook(root);
    let mut traced = Command::new(strace);
    traced
        .args(["-f", "-qq", "-o", "/dev/null"])
        .arg("-e")
        .arg("inject=rename,renameat,renameat2:error=EIO:signal=KILL:when=1")
        .arg("--")
        .arg(hook_cmd.get_program())
        .args(hook_cmd.get_args())
        .current_dir(root)
        .envs(
            hook_cmd
                .get_envs()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = traced.spawn().expect("spawn strace ralph hook stop");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&event(root, "killed turn"))
        .expect("write the event");
    let out = child.wait_with_output().expect("wait for strace");
    // strace ends the way its tracee did: by SIGKILL, with no answer printed.
    assert_eq!(
        out.status.signal(),
        Some(9),
        "the hook was not killed: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "a killed hook printed an answer");

    // Mid-write: the next state is complete in a temp file; the loop file
    // is byte for byte the old one and still parses.
    let temps = temp_files(root);
    assert_eq!(temps.len(), 1, "one temp file left by the kill: {temps:?}");
    let temp = root.join(".claude").join(&temps[0]);
    let written = std::fs::read_to_string(&temp).expect("read the temp file");
    let next = LoopState::parse(&written)
        .unwrap_or_else(|e| panic!("the temp file holds no whole loop: {e}\n{written}"));
    assert_eq!(
        next.iteration,
        iteration + 1,
        "the temp file is the next state"
    );
    assert_eq!(std::fs::read(root.join(LOOP)).expect("read"), before);
    assert_eq!(state(root).iteration, iteration);

    // The next stop carries on from the old state; a fresh temp file may be
    // a live writer's, so it stays, and it is never listed as a loop.
    assert_eq!(stop("next turn")["decision"], "block");
    assert_eq!(state(root).iteration, iteration + 1);
    assert_eq!(temp_files(root), temps);
    let listed = loop_names(root);
    assert_eq!(
        listed,
        ["ralph"],
        "the temp file must not be taken for a loop"
    );

    // Once older than a write could take, a stop under the lock removes it.
    let long_ago =
        std::time::SystemTime::now() - ralph_fs::safe_fs::STALE_TEMP_AGE - Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&temp)
        .and_then(|f| f.set_modified(long_ago))
        .expect("age the temp file");
    assert_eq!(stop("a later turn")["decision"], "block");
    assert_eq!(state(root).iteration, iteration + 2);
    assert!(
        temp_files(root).is_empty(),
        "the stale temp file was not removed"
    );
}

/// The names of the loop files `root` holds, as the hook lists them.
fn loop_names(root: &std::path::Path) -> Vec<String> {
    Project {
        root: root.to_owned(),
    }
    .loop_files()
    .expect("list loops")
    .into_iter()
    .map(|f| f.name)
    .collect()
}

/// One looping stop touches each of its files once: `.claude/` is listed
/// once, and the loop file, its arming record and its decision log are each
/// opened once (the lock-free first look is confirmed under the lock by
/// stamps, not read again). Counted by strace on the real binary.
#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(no_strace, ignore = "strace not installed: apt-get install strace")]
fn one_looping_stop_lists_claude_once_and_opens_each_file_once() {
    let Some(strace) = strace() else { return };
    let dir = project();
    let root = dir.path();
    arm(root);
    // A first stop claims the loop; the second is the plain looping one.
    // musl's `opendir` and `open` use the `open` system call, glibc's `openat`.
    let (answer, calls) = first_then_traced_stop(root, &strace, "trace=open,openat,getdents64");
    assert_eq!(answer["decision"], "block", "the stop loops");
    let opened = |needle: &str| -> usize {
        calls
            .lines()
            .filter(|l| (l.contains("openat(") || l.contains(" open(")) && !l.contains("ENOENT"))
            .filter(|l| l.contains(needle))
            .count()
    };
    let claude = format!("\"{}\"", root.join(".claude").display());
    let loop_file = format!("\"{}\"", root.join(LOOP).display());
    let log = format!(
        "\"{}\"",
        root.join(".claude/ralph/logs/ralph.jsonl").display()
    );
    let record = format!("{}/ralph/loops/", home(root).join(".local/state").display());
    let counts = [
        ("listings of .claude/", opened(&claude)),
        ("opens of the loop file", opened(&loop_file)),
        ("opens of its arming record", opened(&record)),
        ("opens of its log", opened(&log)),
    ];
    for (what, count) in counts {
        assert_eq!(count, 1, "{what}: {count}, not 1\n{calls}");
    }
}

/// A plain loop (no `--prd`, `--protect`, `--scope`, `--verify` or dollar
/// budget, not in a git project) walks none of a turn's optional features
/// at a blocking stop: it starts no process, opens nothing of the PRD, the
/// receipts, the checkpoints, the hand-over or the price table, and looks at
/// the project's `.git` once (the one look that tells the seam there are no
/// checkpoints to keep). The transcript holds a priced reply, so a stop that
/// priced it would open the price table. Traced by strace on the real binary.
#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(no_strace, ignore = "strace not installed: apt-get install strace")]
fn a_plain_loops_blocking_stop_walks_none_of_the_optional_features() {
    let Some(strace) = strace() else { return };
    let dir = project();
    let root = dir.path();
    arm(root);
    let started = state(root).started_at.expect("armed").0;
    let reply = json!({"type": "assistant", "uuid": "u1", "timestamp":
        ralph_state::time::Timestamp(started + 1).to_string(), "sessionId": SESSION,
        "message": {"id": "m1", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-6", "content": [{"type": "text", "text": "second turn"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 1000, "output_tokens": 1000}}});
    let transcript = root.join("no-transcript.jsonl");
    let (answer, calls) = stop_after(root, &strace, "trace=execve,open,openat,%%stat", || {
        std::fs::write(&transcript, format!("{reply}\n")).expect("transcript");
    });
    assert_eq!(answer["decision"], "block", "the stop loops: {answer}");
    let lines =
        |needle: &str| -> Vec<&str> { calls.lines().filter(|l| l.contains(needle)).collect() };
    let started: Vec<&str> = lines("execve(");
    assert_eq!(started.len(), 1, "only ralph itself runs: {started:#?}");
    for feature in [
        "prd.json",
        "/receipts",
        "/checkpoints",
        "handover",
        "prices.json",
        "/gates/",
    ] {
        let touched = lines(feature);
        assert!(
            touched.is_empty(),
            "a plain stop touched {feature}: {touched:#?}"
        );
    }
    let git = lines(&format!("\"{}\"", root.join(".git").display()));
    assert_eq!(git.len(), 1, "one look at .git, by the seam: {git:#?}");
    assert!(
        lines(&format!("{}/", root.join(".git").display())).is_empty(),
        "nothing under .git"
    );
}

/// A first stop (which claims the loop), then a second one traced by strace
/// with `filter`: its answer and the trace.
#[cfg(target_os = "linux")]
fn first_then_traced_stop(root: &Path, strace: &Path, filter: &str) -> (Value, String) {
    stop_after(root, strace, filter, || {})
}

/// [`first_then_traced_stop`], with `between` run after the first stop.
#[cfg(target_os = "linux")]
fn stop_after(root: &Path, strace: &Path, filter: &str, between: impl FnOnce()) -> (Value, String) {
    let mut first = hook(root).spawn().expect("spawn ralph hook stop");
    first
        .stdin
        .take()
        .expect("stdin")
        .write_all(&event(root, "first turn"))
        .expect("write the event");
    assert!(first.wait_with_output().expect("wait").status.success());
    between();
    let trace = root.join("stop.strace");
    let hook_cmd = hook(root);
    let mut traced = Command::new(strace);
    traced
        .args(["-f", "-qq", "-e", filter, "-o"])
        .arg(&trace)
        .arg("--")
        .arg(hook_cmd.get_program())
        .args(hook_cmd.get_args())
        .current_dir(root)
        .envs(
            hook_cmd
                .get_envs()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = traced.spawn().expect("spawn strace ralph hook stop");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&event(root, "second turn"))
        .expect("write the event");
    let out = child.wait_with_output().expect("wait for strace");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not a JSON answer ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let calls = std::fs::read_to_string(&trace).expect("read the trace");
    (answer, calls)
}
