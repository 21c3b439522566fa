//! What the verification gate and `ralph run` need to run a child command:
//! a scratch file for its output, and a way to stop its whole process group.

use std::fs::File;
use std::process::{Command, Stdio};

/// An unnamed scratch file in the temp folder: created exclusively under a
/// random name and unlinked at once (or never named, where the system
/// allows), so no planted link can redirect it and nothing is left behind.
pub fn scratch_file() -> std::io::Result<File> {
    tempfile::tempfile()
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
