//! What the verification gate and `ralph run` need to run a child command:
//! a scratch file for its output, and a way to stop its whole process group.

use std::fs::File;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// An unnamed scratch file: created in the temp folder, then unlinked at
/// once, so nothing is left behind whatever happens to the process.
pub fn scratch_file() -> std::io::Result<File> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(".ralph-scratch-{}-{n}", std::process::id()));
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let _ = std::fs::remove_file(&path);
    Ok(file)
}

/// Sends `signal` (`TERM`, `KILL`) to the process group led by `pid` (a child
/// spawned with `process_group(0)`), so the command's own children stop too.
pub fn signal_group(pid: u32, signal: &str) {
    if pid <= 1 {
        return; // never `kill -1`: that would mean every process
    }
    // `--` first: a bare `-PID` after the signal is read by some kills as a signal.
    let _ = Command::new("kill")
        .args(["-s", signal, "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
