//! The box a gate runs in: a second ralph process between the hook and the
//! gate's shell, which holds none of the hook's streams and ends, when the
//! gate ends, everything the gate started, including a process that left
//! the gate's process group (`setsid`) or its parent (a double fork).
//!
//! On Linux the box is the reaper of its orphans (`PR_SET_CHILD_SUBREAPER`),
//! so every process the gate started stays its descendant; when the shell
//! exits or runs out of time it kills the shell's group, then every child
//! it has left, and the children their deaths hand it, until none is left.
//! On Windows it puts itself in a kill-on-close job before it starts the
//! shell, so the shell and all it starts are in the job from their first
//! instruction; when the box exits, the job ends them. Elsewhere (macOS) it
//! ends the shell's process group, which is all an unprivileged process
//! can do there (docs/security.md says what each system guarantees).
//!
//! The binary calls [`serve_if_asked`] first thing; the gate uses the box
//! only when the running program serves it ([`available`]), and otherwise
//! runs the shell itself (a library user, the core's own tests).

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::process::{self, spawn_in_group, wait_while_then_end_group};

/// The first argument that makes `ralph` a gate's box: not a word a user
/// would type, and never reached by the command line parser.
const BOX_ARG: &str = "--ralph-internal-gate-box";

/// How long the box tries to end what is left before it gives up.
const SWEEP_LIMIT: Duration = Duration::from_secs(5);

/// Set once this program was asked whether it is a box: it is `ralph`,
/// which serves one.
static SERVED: AtomicBool = AtomicBool::new(false);

/// Whether this program can be started again as a gate's box.
pub fn available() -> bool {
    SERVED.load(Ordering::Relaxed)
}

/// `ralph BOX_ARG TIMEOUT_MS COMMAND [BWRAP ARG…]`: runs as the box and
/// returns its exit code; any other command line returns `None` (and marks
/// this program as one that serves the box). With `BWRAP` (an absolute
/// path), the box runs `BWRAP ARG… COMMAND` instead of the shell: the
/// gate's sandbox (`gate_jail`).
pub fn serve_if_asked() -> Option<u8> {
    SERVED.store(true, Ordering::Relaxed);
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new(BOX_ARG)) {
        return None;
    }
    let timeout = args
        .next()
        .and_then(|t| t.to_str()?.parse::<u64>().ok())
        .map(Duration::from_millis);
    let command = args.next().and_then(|c| c.into_string().ok());
    let (Some(timeout), Some(command)) = (timeout, command) else {
        return Some(2);
    };
    let jail = args.next().map(std::path::PathBuf::from);
    if jail.as_ref().is_some_and(|p| !p.is_absolute()) {
        return Some(2);
    }
    let jail_args: Vec<OsString> = args.collect();
    Some(serve(
        &command,
        timeout,
        jail.as_deref().map(|p| (p, &jail_args[..])),
    ))
}

/// bubblewrap (an absolute path) and its arguments up to the command.
pub(crate) type Jail<'a> = (&'a Path, &'a [OsString]);

/// The command that starts this program as the box around `command`, run
/// in `jail` when given.
pub fn command(
    command: &str,
    timeout: Duration,
    jail: Option<Jail<'_>>,
) -> std::io::Result<Command> {
    let mut boxed = process::this_program()?;
    let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    boxed.args([
        OsString::from(BOX_ARG),
        OsString::from(millis.to_string()),
        OsString::from(command),
    ]);
    if let Some((bwrap, args)) = jail {
        boxed.arg(bwrap).args(args);
    }
    Ok(boxed)
}

/// The gate's process: the shell, or bubblewrap around it.
fn gate_process(command: &str, jail: Option<Jail<'_>>) -> std::io::Result<Command> {
    match jail {
        Some((bwrap, args)) => {
            let mut cmd = process::found_program(bwrap);
            cmd.args(args).arg(command);
            Ok(cmd)
        }
        None => process::shell(command),
    }
}

/// The box's work: the shell started in a group of its own, waited for
/// (while the hook that started the box lives), everything it left ended.
/// The exit code is the shell's; a shell killed by a signal, or stopped at
/// its time limit, ends the box by `SIGKILL` as well (the hook tells the
/// two apart by the time).
fn serve(command: &str, timeout: Duration, jail: Option<Jail<'_>>) -> u8 {
    #[cfg(target_os = "linux")]
    {
        process::hide_own_files();
        let _ = process::adopt_orphans();
    }
    // Never closed by us: the system closes it when the box has exited
    // with its code, and then ends whatever is still in the job.
    #[cfg(windows)]
    std::mem::forget(own_job());
    let parent = parent_id();
    let started = spawn_in_group(&mut match gate_process(command, jail) {
        Ok(sh) => sh,
        Err(e) => return could_not_start(&e),
    });
    let mut group = match started {
        Ok(group) => group,
        Err(e) => return could_not_start(&e),
    };
    let status = wait_while_then_end_group(&mut group, timeout, || parent_id() == parent);
    #[cfg(target_os = "linux")]
    let _ = process::end_all_children(Instant::now() + SWEEP_LIMIT);
    #[cfg(not(target_os = "linux"))]
    let _ = (SWEEP_LIMIT, Instant::now());
    match status.map(|s| s.code()) {
        Some(Some(code)) => u8::try_from(code).unwrap_or(1),
        _ => killed(),
    }
}

fn could_not_start(e: &std::io::Error) -> u8 {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "ralph: could not start the command: {e}");
    127
}

/// The box's parent, to see the hook go (Unix: the parent changes when it
/// exits); elsewhere a constant.
fn parent_id() -> u32 {
    #[cfg(unix)]
    {
        rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get().cast_unsigned())
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// Ends the box as the shell ended: by a signal.
fn killed() -> u8 {
    #[cfg(unix)]
    {
        let me = rustix::process::getpid();
        let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
    }
    1
}

/// A kill-on-close job holding the box itself, so every process the
/// shell starts is born in it; `None` if the system refuses.
#[cfg(windows)]
fn own_job() -> Option<win32job::Job> {
    let mut limits = win32job::ExtendedLimitInfo::new();
    limits.limit_kill_on_job_close();
    let job = win32job::Job::create_with_limit_info(&limits).ok()?;
    job.assign_current_process().ok()?;
    Some(job)
}
