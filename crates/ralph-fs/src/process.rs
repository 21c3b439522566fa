//! What the verification gate, `ralph run` and the git fingerprint need to
//! run a child command: the program found in an absolute folder of PATH
//! only ([`program`]), a scratch file for its output, its own process group
//! (a job object on Windows), and a way to stop that whole group with a
//! system call (no `kill` or `taskkill` binary, no shell).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// The absolute folders of `path` (a PATH value), in order. A relative
/// entry (`.`, `node_modules/.bin`, an empty one, which means `.`) names a
/// folder of whatever directory a program runs in, the repository's: a
/// program found there is the repository's, not the user's, so it is left out.
pub fn absolute_entries(path: &OsStr) -> Vec<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .collect()
}

/// Folders the agent may write, registered by whoever learns of them (the
/// project once it is found, a sandbox's writable binds): no program is
/// ever taken from inside one.
static DISTRUSTED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Marks `folder` (and what it resolves to) as one the agent may write:
/// from now on no program is looked up in a PATH folder inside it, nor
/// handed to a child's PATH ([`program`]).
pub fn distrust(folder: &Path) {
    let mut all = DISTRUSTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for form in forms(folder) {
        if !all.contains(&form) {
            all.push(form);
        }
    }
}

/// `folder` as written (when absolute) and as it resolves.
fn forms(folder: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Some(folder.to_path_buf())
        .filter(|f| f.is_absolute())
        .into_iter()
        .collect();
    if let Ok(real) = std::fs::canonicalize(folder)
        && !out.contains(&real)
    {
        out.push(real);
    }
    // The root folder would distrust every program there is.
    out.retain(|f| f.parent().is_some());
    out
}

/// Every folder no program is taken from: those [`distrust`]ed, `extra`,
/// and each git work tree holding the current folder (every folder at or
/// above it with a `.git`, below the home folder: a fleet's worktree and
/// the main project around it).
fn distrusted(extra: &[&Path]) -> Vec<PathBuf> {
    let mut roots = DISTRUSTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    roots.extend(extra.iter().flat_map(|f| forms(f)));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if let Ok(cwd) = std::env::current_dir() {
        let trees = cwd
            .ancestors()
            .take_while(|dir| dir.parent().is_some() && home.as_deref() != Some(*dir))
            .filter(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok())
            .flat_map(forms);
        roots.extend(trees.collect::<Vec<_>>());
    }
    roots
}

/// A PATH folder ralph may take programs from: absolute, existing, and
/// neither as written nor as it resolves (every link on the way followed)
/// inside a folder in `distrusted`. Returns the resolved folder: every
/// part of it is then outside what the agent writes, so it cannot be
/// swapped for a link between this look and the start.
fn trusted_folder(entry: &Path, distrusted: &[PathBuf]) -> Option<PathBuf> {
    let inside = |p: &Path| distrusted.iter().any(|root| p.starts_with(root));
    if !entry.is_absolute() || inside(entry) {
        return None;
    }
    let real = std::fs::canonicalize(entry).ok()?;
    (!inside(&real)).then_some(real)
}

/// The folders of `path` ralph may take programs from ([`trusted_folder`]),
/// each as written and as it resolves.
fn trusted_entries(path: &OsStr, distrusted: &[PathBuf]) -> Vec<(PathBuf, PathBuf)> {
    absolute_entries(path)
        .into_iter()
        .filter_map(|entry| trusted_folder(&entry, distrusted).map(|real| (entry, real)))
        .collect()
}

/// Where a bare program name (`git`, `sh`, `curl`) is found in the
/// absolute folders of PATH ([`absolute_entries`]) that lie outside every
/// folder the agent may write (the git work trees holding the current
/// folder, and those [`distrust`]ed), links resolved: the first regular,
/// executable file of that name (on Windows with each extension of
/// PATHEXT) that does not itself resolve into such a folder. A name with
/// a folder in it is not looked up.
pub fn find_program(name: &str) -> Option<PathBuf> {
    find_program_outside(name, &[])
}

/// [`find_program`], also distrusting `extra` (a git command's work tree).
fn find_program_outside(name: &str, extra: &[&Path]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let distrusted = distrusted(extra);
    let dirs: Vec<PathBuf> = trusted_entries(&path, &distrusted)
        .into_iter()
        .map(|(_, real)| real)
        .collect();
    let found = find_in(name, &dirs)?;
    let real = std::fs::canonicalize(&found).ok()?;
    (!distrusted.iter().any(|root| real.starts_with(root))).then_some(found)
}

fn find_in(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    if name.is_empty() || name.contains(['/', '\\']) {
        return None;
    }
    dirs.iter()
        .flat_map(|dir| candidates(name).into_iter().map(move |n| dir.join(n)))
        .find(|p| is_executable(p))
}

/// The file names `name` may have: itself, and on Windows, when it has no
/// extension, each of PATHEXT's (`git.exe`, `claude.cmd`).
fn candidates(name: &str) -> Vec<OsString> {
    #[cfg(windows)]
    if Path::new(name).extension().is_none() {
        let exts = std::env::var("PATHEXT").unwrap_or_else(|_| ".COM;.EXE;.BAT;.CMD".into());
        return exts
            .split(';')
            .filter(|e| e.starts_with('.'))
            .map(|e| OsString::from(format!("{name}{e}")))
            .collect();
    }
    vec![OsString::from(name)]
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// The one way ralph names a program to start: `name` found in an absolute
/// folder of PATH outside every folder the agent may write
/// ([`find_program`]), never through `.` or another relative entry, nor
/// `node_modules/.bin` of the project however PATH names it, and the
/// child's own PATH cut to those folders, so that nothing it starts by
/// name (a gate's `npm`, git's helpers, the shell's `cat`) can be a
/// program of the project either. On Windows `cmd` is also told not to
/// look in the current folder first (`NoDefaultCurrentDirectoryInExePath`).
pub fn program(name: &str) -> std::io::Result<Command> {
    program_outside(name, &[])
}

/// [`program`], also distrusting `extra`: git's work tree, wherever the
/// current folder is.
pub(crate) fn program_outside(name: &str, extra: &[&Path]) -> std::io::Result<Command> {
    let found = find_program_outside(name, extra).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("`{name}` is not in any absolute folder of PATH outside the project"),
        )
    })?;
    let mut command = Command::new(found);
    confine_path_outside(&mut command, extra);
    Ok(command)
}

/// Gives `command` a PATH of only the folders of ours ralph may take
/// programs from ([`trusted_folder`]), when ours has any other (otherwise
/// it inherits PATH unchanged).
fn confine_path(command: &mut Command) {
    confine_path_outside(command, &[]);
}

fn confine_path_outside(command: &mut Command, extra: &[&Path]) {
    if let Some(path) = std::env::var_os("PATH") {
        let trusted = trusted_entries(&path, &distrusted(extra));
        if std::env::split_paths(&path).count() != trusted.len() {
            let kept = trusted.into_iter().map(|(entry, _)| entry);
            // Joining absolute folders fails only on a `;`/`:` inside one.
            command.env("PATH", std::env::join_paths(kept).unwrap_or_default());
        }
    }
    #[cfg(windows)]
    command.env("NoDefaultCurrentDirectoryInExePath", "1");
}

/// An unnamed scratch file in the temp folder: created exclusively under a
/// random name and unlinked at once (or never named, where the system
/// allows), so no planted link can redirect it and nothing is left behind.
pub fn scratch_file() -> std::io::Result<File> {
    tempfile::tempfile()
}

/// A command line for the shell: `sh -c COMMAND`. On Windows `sh` is used
/// when PATH has one (Git for Windows, which Claude Code needs there, puts
/// it on the hooks' PATH); otherwise `cmd /S /C "COMMAND"`, the text passed
/// as it is (cmd does not read the C runtime's quoting).
///
/// Both found through [`program`]; `Err` when neither is in an absolute
/// folder of PATH.
pub fn shell(command: &str) -> std::io::Result<Command> {
    #[cfg(windows)]
    if find_program("sh").is_none() {
        use std::os::windows::process::CommandExt;
        let mut cmd = program("cmd")?;
        cmd.raw_arg("/S /C").raw_arg(format!("\"{command}\""));
        return Ok(cmd);
    }
    let mut sh = program("sh")?;
    sh.arg("-c").arg(command);
    Ok(sh)
}

/// A child running in its own process group (Unix) or job object (Windows),
/// so that everything it starts can be stopped together with [`stop_group`].
#[derive(Debug)]
pub struct GroupChild {
    pub child: Child,
    /// Closing the job's last handle kills every process in it
    /// (`JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`), so whatever the child left
    /// running also ends when this value is dropped.
    #[cfg(windows)]
    job: Option<win32job::Job>,
}

/// Spawns `command` leading a new process group (Unix: `setpgid`), or in a
/// new job object (Windows: assigned right after the spawn; a grandchild
/// started within those microseconds would escape it).
pub fn spawn_in_group(command: &mut Command) -> std::io::Result<GroupChild> {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    let child = command.spawn()?;
    #[cfg(windows)]
    {
        let job = job_for(&child);
        Ok(GroupChild { child, job })
    }
    #[cfg(not(windows))]
    Ok(GroupChild { child })
}

/// A kill-on-close job holding `child`; `None` if the system refuses (the
/// child alone is then stopped).
#[cfg(windows)]
fn job_for(child: &Child) -> Option<win32job::Job> {
    use std::os::windows::io::AsRawHandle;
    let mut limits = win32job::ExtendedLimitInfo::new();
    limits.limit_kill_on_job_close();
    let job = win32job::Job::create_with_limit_info(&limits).ok()?;
    job.assign_process(child.as_raw_handle() as isize).ok()?;
    Some(job)
}

/// How hard to ask a process group to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: a chance to clean up. (Windows has no such signal for a
    /// console program; there the whole job is ended at once.)
    Terminate,
    /// SIGKILL: no chance.
    Kill,
    /// SIGINT, as Ctrl-C would send: a child `ralph run` records its loop
    /// and exits. (Unix only; elsewhere the process is ended.)
    Interrupt,
}

/// Stops the process group (Unix) or job (Windows) led by `group`, so the
/// command's own children stop too. A group that is already gone is not an
/// error. If the group cannot be stopped, the child itself is killed
/// (`Child::kill`) instead, and that result is returned.
pub fn stop_group(group: &mut GroupChild, how: Stop) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        match signal_unix_group(group.child.id(), how) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {
                return Ok(());
            }
            Err(_) => {}
        }
    }
    #[cfg(windows)]
    {
        let _ = how;
        // The last handle closes: the system ends every process in the job.
        if group.job.take().is_some() {
            let _ = group.child.kill();
            return Ok(());
        }
    }
    #[cfg(not(any(unix, windows)))]
    let _ = how;
    match group.child.kill() {
        // Already exited (and maybe reaped): nothing left to stop.
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
        other => other,
    }
}

/// Waits for the group's leader to exit, or for `timeout`, then ends the
/// whole group either way: a command that exits while something it started
/// in the background still runs (`sleep 30 & true`) must not leave that
/// behind, nor keep a file or pipe of ours open. On Unix the leader's exit
/// is seen without reaping it (`waitid` with `WNOWAIT`), so the group's id
/// cannot be reused by another process before the group is signalled.
/// Returns the exit status, or `None` when the time ran out.
pub(crate) fn wait_then_end_group(
    group: &mut GroupChild,
    timeout: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    wait_while_then_end_group(group, timeout, || true)
}

/// [`wait_then_end_group`], also giving up as soon as `still_wanted` says
/// no (asked between two looks at the leader).
pub(crate) fn wait_while_then_end_group(
    group: &mut GroupChild,
    timeout: std::time::Duration,
    still_wanted: impl Fn() -> bool,
) -> Option<std::process::ExitStatus> {
    let exited = leader_exit_within(group, timeout, &still_wanted);
    // A system call, not a `kill` binary: works whatever PATH holds. If the
    // group cannot be signalled, `stop_group` kills the leader itself; either
    // way the wait below cannot outlive it.
    let _ = stop_group(group, Stop::Kill);
    let status = group.child.wait().ok();
    if exited { status } else { None }
}

/// Whether the group's leader exits within `timeout` (and while
/// `still_wanted`, asked every 50 ms), leaving it waitable (Unix): a
/// thread blocks in `waitid` with `WNOWAIT`, so a quick command is seen
/// the moment it exits, without polling.
#[cfg(all(unix, not(target_os = "openbsd")))]
fn leader_exit_within(
    group: &GroupChild,
    timeout: std::time::Duration,
    still_wanted: &impl Fn() -> bool,
) -> bool {
    use rustix::io::Errno;
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    use std::sync::mpsc::RecvTimeoutError;
    use std::time::{Duration, Instant};
    let Some(pid) = i32::try_from(group.child.id()).ok().and_then(Pid::from_raw) else {
        return false;
    };
    let (tell, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
        let seen = loop {
            match waitid(WaitId::Pid(pid), options) {
                Err(Errno::INTR) => {}
                other => break other.is_ok(),
            }
        };
        let _ = tell.send(seen);
    });
    let started = Instant::now();
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        match exited.recv_timeout(left.min(Duration::from_millis(50))) {
            Ok(seen) => return seen,
            Err(RecvTimeoutError::Disconnected) => return false,
            Err(RecvTimeoutError::Timeout) if left.is_zero() || !still_wanted() => return false,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Whether the group's leader exits within `timeout` (and while
/// `still_wanted`), reaped at once where `waitid` cannot leave it
/// waitable (the job object still holds the group).
#[cfg(not(all(unix, not(target_os = "openbsd"))))]
fn leader_exit_within(
    group: &mut GroupChild,
    timeout: std::time::Duration,
    still_wanted: &impl Fn() -> bool,
) -> bool {
    use std::time::{Duration, Instant};
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match group.child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if started.elapsed() >= timeout || !still_wanted() => return false,
            Ok(None) => {
                // Short first pauses: a quick command costs a quick stop.
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(_) => return false,
        }
    }
}

/// A command for a program [`find_program`] already found (an absolute
/// path), with the same cut PATH as [`program`] gives.
pub fn found_program(path: &Path) -> Command {
    let mut command = Command::new(path);
    confine_path(&mut command);
    command
}

/// A command that starts this very program again (the gate's box, a
/// fleet's runs): on Linux through `/proc/self/exe`, which names the
/// running binary even when its file was replaced or removed since.
pub fn this_program() -> std::io::Result<Command> {
    #[cfg(target_os = "linux")]
    let exe = PathBuf::from("/proc/self/exe");
    #[cfg(not(target_os = "linux"))]
    let exe = std::env::current_exe()?;
    let mut command = Command::new(exe);
    confine_path(&mut command);
    Ok(command)
}

/// Makes this process the reaper of every orphan among its descendants
/// (`PR_SET_CHILD_SUBREAPER`): a process that leaves its parent, by a
/// double fork or `setsid` and an exit, becomes our child instead of
/// init's, so [`end_all_children`] still finds it.
#[cfg(target_os = "linux")]
pub fn adopt_orphans() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(std::io::Error::from)
}

/// Makes this process's `/proc/<pid>/` owned by root (`PR_SET_DUMPABLE`
/// 0): a process of the same user that is not root can no longer open our
/// standard streams through `/proc/<pid>/fd/`, nor trace us.
#[cfg(target_os = "linux")]
pub(crate) fn hide_own_files() {
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
}

/// Kills every child of this process, reaps it, and does the same for the
/// children that their deaths hand to us (see [`adopt_orphans`]), until
/// none is left or `deadline` passes. Returns whether none is left.
/// A process a child forks as it dies is handed to us in turn: the loop
/// goes on until a look finds nobody.
#[cfg(target_os = "linux")]
pub(crate) fn end_all_children(deadline: std::time::Instant) -> bool {
    use rustix::process::{Pid, Signal, WaitOptions, kill_process, wait};
    let me = rustix::process::getpid().as_raw_nonzero().get();
    loop {
        // Reaped first: with no child at all (ECHILD, the usual case) there
        // is nothing to look for in /proc.
        loop {
            match wait(WaitOptions::NOHANG) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return true,
            }
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        for pid in children_of(me) {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The processes whose parent is `parent`, from `/proc/<pid>/stat` (works
/// without the kernel's optional `children` lists).
#[cfg(target_os = "linux")]
pub fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // `pid (comm) state ppid …`: comm may hold spaces and `)`.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

/// Whether a `ralph run` is among this process's ancestors: the agent of a
/// run, and every process it starts, are (the run reaps orphans,
/// [`adopt_orphans`], so a double fork stays below it). Read from each
/// ancestor's command line in `/proc`, which no descendant can rewrite.
#[cfg(target_os = "linux")]
pub fn under_ralph_run() -> bool {
    let mut pid = parent_of(std::process::id());
    let mut steps = 0;
    while let Some(p) = pid.filter(|&p| p > 1 && steps < 4096) {
        if is_ralph_run(p) {
            return true;
        }
        pid = parent_of(p);
        steps += 1;
    }
    false
}

#[cfg(not(target_os = "linux"))]
pub fn under_ralph_run() -> bool {
    false
}

/// The parent of `pid`, from `/proc/<pid>/stat`.
#[cfg(target_os = "linux")]
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_field(&stat, 1)?.parse().ok()
}

/// Field `n` after `pid (comm)` of a `/proc/<pid>/stat` line: 0 the state,
/// 1 the parent, 19 the start time.
#[cfg(target_os = "linux")]
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    // `comm` may hold spaces and `)`.
    stat.rsplit_once(')')?.1.split_whitespace().nth(n)
}

/// Whether `pid` runs `ralph run` (or `ralph-loop run`): its program's
/// name starts with `ralph` and its first argument is `run`.
#[cfg(target_os = "linux")]
fn is_ralph_run(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let mut args = cmdline.split(|&b| b == 0);
    let program = args.next().unwrap_or_default();
    let name = program.rsplit(|&b| b == b'/').next().unwrap_or_default();
    name.starts_with(b"ralph") && args.next() == Some(b"run".as_slice())
}

/// When the session of the terminal on standard input began (its leader's
/// start), if standard input is a terminal. A pseudo-terminal that a
/// process opens itself (`script`, `expect`, `tmux new-window`) starts a
/// session of its own, now: one that began before a loop did was not made
/// by that loop's agent.
#[cfg(target_os = "linux")]
pub fn terminal_session_start() -> Option<std::time::SystemTime> {
    let stdin = std::io::stdin();
    if !rustix::termios::isatty(&stdin) {
        return None;
    }
    let leader = rustix::termios::tcgetsid(&stdin)
        .ok()?
        .as_raw_nonzero()
        .get();
    let stat = std::fs::read_to_string(format!("/proc/{leader}/stat")).ok()?;
    let ticks: u64 = stat_field(&stat, 19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    // Rounded up, and `btime` is whole seconds: never earlier than it was by
    // more than a second.
    let secs = boot.checked_add(ticks.div_ceil(per_second))?;
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs))
}

#[cfg(not(target_os = "linux"))]
pub fn terminal_session_start() -> Option<std::time::SystemTime> {
    None
}

/// Sends `how` to the process group `pid` leads.
#[cfg(unix)]
pub fn signal_unix_group(pid: u32, how: Stop) -> std::io::Result<()> {
    use rustix::process::{Pid, Signal, kill_process_group};
    // Never 0 or 1 (our own group, or "every process"), nor a pid that
    // does not fit: a child spawned by us has neither.
    let pid = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 1)
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::other("not a child's process group"))?;
    let signal = match how {
        Stop::Terminate => Signal::TERM,
        Stop::Kill => Signal::KILL,
        Stop::Interrupt => Signal::INT,
    };
    kill_process_group(pid, signal).map_err(std::io::Error::from)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Read;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    fn alive(pid: i32) -> bool {
        // Signal 0 through the system call: exists (even as a zombie) or not.
        rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
    }

    #[test]
    fn stops_the_whole_group_without_a_kill_binary() {
        let mut command = Command::new("sh");
        command
            .args(["-c", "sleep 60 & echo $!; wait"])
            .env("PATH", "/nonexistent-no-kill-here:/usr/bin:/bin")
            .stdout(Stdio::piped());
        let mut group = spawn_in_group(&mut command).unwrap();
        let mut line = Vec::new();
        let mut out = group.child.stdout.take().unwrap();
        let mut byte = [0u8];
        while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        let grandchild: i32 = String::from_utf8(line).unwrap().trim().parse().unwrap();
        assert!(alive(grandchild));
        stop_group(&mut group, Stop::Kill).unwrap();
        group.child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while alive(grandchild) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(grandchild), "the grandchild survived");
        // A group that is gone is not an error.
        stop_group(&mut group, Stop::Kill).unwrap();
    }

    #[test]
    fn a_path_folder_in_or_through_a_distrusted_folder_is_never_trusted() {
        let project = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let bin = project.path().join("node_modules/.bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(&bin, outside.path().join("into")).unwrap();
        std::os::unix::fs::symlink(outside.path(), project.path().join("out")).unwrap();
        let roots = forms(project.path());
        assert_eq!(trusted_folder(&bin, &roots), None);
        assert_eq!(trusted_folder(&outside.path().join("into"), &roots), None);
        // A link inside the project could be repointed after the look.
        assert_eq!(trusted_folder(&project.path().join("out"), &roots), None);
        assert_eq!(trusted_folder(Path::new("node_modules/.bin"), &roots), None);
        let real = std::fs::canonicalize(outside.path()).unwrap();
        assert_eq!(trusted_folder(outside.path(), &roots), Some(real));
        assert!(forms(Path::new("/")).is_empty(), "never every folder");
    }

    #[test]
    fn scratch_files_are_unlinked_and_distinct() {
        use std::io::{Seek, Write};
        let mut a = scratch_file().unwrap();
        let mut b = scratch_file().unwrap();
        a.write_all(b"a").unwrap();
        b.write_all(b"b").unwrap();
        a.rewind().unwrap();
        let mut s = String::new();
        a.read_to_string(&mut s).unwrap();
        assert_eq!(s, "a");
    }
}
