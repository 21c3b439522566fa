//! Who drives a loop from outside: `ralph run` owns a loop under the name
//! `ralph-run-<pid>-<start>`, where `<start>` is the process's start time
//! (clock ticks since boot, from `/proc/<pid>/stat`). A run that took the
//! loop over from a session appends `:<session>`, so the loop can find its
//! way home. A loop whose driver process is gone is reported by `ralph
//! status`; the next `ralph run --name NAME` takes it over, and the session
//! it was taken from gets it back at its next stop. A loop the run armed
//! itself has no such session: it waits for `ralph run` or `ralph cancel`,
//! and is never fed to an unrelated session.
//!
//! The start time guards against a reused pid: a different process with the
//! same pid has a different start time. Where `/proc` cannot be read the id
//! is `ralph-run-<pid>` and only the pid is checked (a reused pid then looks
//! alive: the loop waits for `ralph run` or `ralph cancel`, it is never fed
//! to a wrong session).
//!
//! On Windows there is no `/proc` and no safe way (without `unsafe` code) to
//! ask whether a pid runs: the id is `ralph-run-<pid>` and such a driver is
//! never taken for gone. A loop whose run died is then not handed back to
//! its session nor flagged by `ralph status`: it waits for `ralph run --name
//! NAME` (which takes it over) or `ralph cancel`, and is never fed to a
//! wrong session. (A known limit, in docs/windows.md.)

use std::fmt;

const PREFIX: &str = "ralph-run-";

/// A `ralph run` owner id, read once: `ralph-run-<pid>[-<start>][:<session>]`.
/// Any other owner (a session id, a malformed id) is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunOwner<'a> {
    pub pid: u32,
    /// The process's start time (clock ticks since boot), where `/proc`
    /// told it.
    pub start: Option<u64>,
    /// The session to hand the loop back to, when the run took it over
    /// from one (never empty).
    pub session: Option<&'a str>,
}

impl RunOwner<'static> {
    /// This process, as the driver of a loop.
    pub fn own() -> Self {
        let pid = std::process::id();
        Self {
            pid,
            start: start_ticks(pid),
            session: None,
        }
    }
}

impl<'a> RunOwner<'a> {
    /// `owner` as a run's id, or `None`: a session id, or an id whose pid
    /// or start time is not a number as ralph writes it (digits, no
    /// leading zero), is no run.
    pub fn parse(owner: &'a str) -> Option<Self> {
        let rest = owner.strip_prefix(PREFIX)?;
        let (id, session) = match rest.split_once(':') {
            Some((id, session)) => (id, Some(session).filter(|s| !s.is_empty())),
            None => (rest, None),
        };
        let (pid, start) = match id.split_once('-') {
            Some((pid, start)) => (pid, Some(canonical(start)?)),
            None => (id, None),
        };
        Some(Self {
            pid: u32::try_from(canonical(pid)?).ok()?,
            start,
            session,
        })
    }

    /// The owner a run (`self`) writes into a loop it takes over from
    /// `previous`: itself, plus the session to hand the loop back to (a
    /// previous run's session, when the loop is taken from a run that
    /// died).
    pub fn taking_over(&self, previous: Option<&'a str>) -> Self {
        let session = previous.and_then(|p| match RunOwner::parse(p) {
            Some(run) => run.session,
            None => Some(p).filter(|s| !s.is_empty()),
        });
        Self { session, ..*self }
    }

    /// The run alone, without the session it carries.
    pub fn driver(&self) -> Self {
        Self {
            session: None,
            ..*self
        }
    }

    /// Whether this run's process no longer runs.
    pub fn is_gone(&self) -> bool {
        process_is_gone(self.pid, self.start)
    }

    /// Whether this process runs under this run: the run's process (with
    /// its start time, where known) is among this process's ancestors —
    /// `ralph cancel` from the agent the run drives. A process that left
    /// the run's tree (a double fork whose parent exited) is no longer
    /// seen as its descendant.
    pub fn is_ancestor(&self) -> bool {
        let mut pid = std::process::id();
        // A process tree deeper than this is no agent's shell.
        for _ in 0..256 {
            let Some(parent) = parent_of(pid).filter(|p| *p > 1) else {
                return false;
            };
            if parent == self.pid {
                return self
                    .start
                    .is_none_or(|start| start_ticks(parent) == Some(start));
            }
            pid = parent;
        }
        false
    }

    /// The session a loop goes back to because this run died.
    pub(crate) fn orphaned_for(&self) -> Option<&'a str> {
        self.session.filter(|_| self.is_gone())
    }
}

/// The id as a loop file's `session_id` holds it.
impl fmt::Display for RunOwner<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}", self.pid)?;
        if let Some(start) = self.start {
            write!(f, "-{start}")?;
        }
        if let Some(session) = self.session {
            write!(f, ":{session}")?;
        }
        Ok(())
    }
}

/// A number as ralph writes one: digits, without a leading zero.
fn canonical(digits: &str) -> Option<u64> {
    let leading_zero = digits.len() > 1 && digits.starts_with('0');
    if leading_zero || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether this process runs as root (its real user id is 0), the test
/// Claude Code makes before refusing to skip its permission prompts.
pub fn runs_as_root() -> bool {
    #[cfg(unix)]
    {
        rustix::process::getuid().is_root()
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// Whether `owner` is a `ralph run` (alive or not), not a session.
pub fn is_run(owner: &str) -> bool {
    RunOwner::parse(owner).is_some()
}

/// Whether `owner` names a `ralph run` whose process no longer runs.
/// Any other owner (a session id) is never "gone" by this test.
pub fn is_gone(owner: &str) -> bool {
    RunOwner::parse(owner).is_some_and(|run| run.is_gone())
}

#[cfg(not(unix))]
fn process_is_gone(_pid: u32, _start: Option<u64>) -> bool {
    false
}

#[cfg(unix)]
fn process_is_gone(pid: u32, start: Option<u64>) -> bool {
    use rustix::process::{Pid, test_kill_process};
    let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return true;
    };
    let exists = match test_kill_process(raw) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    };
    if !exists {
        return true;
    }
    match (start, stat_fields(pid)) {
        // A zombie has ended; it only waits for its parent.
        (_, Some((state, _))) if state == 'Z' || state == 'X' => true,
        (Some(expected), Some((_, now))) => expected != now,
        _ => false,
    }
}

/// The parent of `pid`, from `/proc/<pid>/stat` (`None` where there is no `/proc`).
#[cfg(unix)]
fn parent_of(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(not(unix))]
fn parent_of(_pid: u32) -> Option<u32> {
    None
}

fn start_ticks(pid: u32) -> Option<u64> {
    stat_fields(pid).map(|(_, start)| start)
}

/// The state letter and start time from `/proc/<pid>/stat`.
#[cfg(not(unix))]
fn stat_fields(_pid: u32) -> Option<(char, u64)> {
    None
}

/// The state letter and start time from `/proc/<pid>/stat`.
#[cfg(unix)]
fn stat_fields(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: read after the last `)`.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 22 of the whole line; field 3 is the first after the name.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_id() -> String {
        RunOwner::own().to_string()
    }

    #[cfg(unix)]
    fn taking_over(own: &str, previous: Option<&str>) -> String {
        let own = RunOwner::parse(own).unwrap();
        own.taking_over(previous).to_string()
    }

    #[cfg(unix)]
    fn orphaned_for(owner: &str) -> Option<&str> {
        RunOwner::parse(owner)?.orphaned_for()
    }

    #[test]
    fn an_owner_id_reads_into_its_parts_and_prints_back_as_written() {
        for (id, pid, start, session) in [
            ("ralph-run-42", 42, None, None),
            ("ralph-run-42-9001", 42, Some(9001), None),
            ("ralph-run-42-0:s-1", 42, Some(0), Some("s-1")),
            ("ralph-run-7:a:b", 7, None, Some("a:b")),
        ] {
            let run = RunOwner::parse(id).unwrap();
            assert_eq!((run.pid, run.start, run.session), (pid, start, session));
            assert_eq!(run.to_string(), id);
        }
        let run = RunOwner::parse("ralph-run-42-9:s1").unwrap();
        assert_eq!(run.driver().to_string(), "ralph-run-42-9");
        // An empty session is none.
        assert_eq!(RunOwner::parse("ralph-run-5:").unwrap().session, None);
    }

    #[test]
    fn a_session_or_a_malformed_id_is_no_run() {
        for owner in [
            "4f2a-session",
            "run-1",
            "ralph-run-",
            "ralph-run-x",
            "ralph-run-:s1",
            "ralph-run-1-",
            "ralph-run-1-x",
            "ralph-run-1-2-3",
            "ralph-run-+1",
            "ralph-run-01",
            "ralph-run-1-02",
            "ralph-run-4294967296",
            " ralph-run-1",
        ] {
            assert_eq!(RunOwner::parse(owner), None, "{owner}");
            assert!(!is_run(owner) && !is_gone(owner), "{owner}");
        }
    }

    #[test]
    fn this_process_is_alive_and_others_are_not_drivers() {
        let me = own_id();
        assert!(me.starts_with(PREFIX));
        assert!(!is_gone(&me));
        assert!(!is_gone("4f2a-session"));
        assert!(!is_gone("ralph-run-x"));
    }

    #[cfg(unix)]
    #[test]
    fn a_taken_over_loop_remembers_its_session() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = format!("{PREFIX}{}", child.id());
        child.wait().unwrap();
        let me = own_id();
        assert_eq!(taking_over(&me, Some("S1")), format!("{me}:S1"));
        assert_eq!(taking_over(&me, None), me);
        // From a run that died: the session it had is carried on.
        assert_eq!(
            taking_over(&me, Some(&format!("{dead}:S1"))),
            format!("{me}:S1")
        );
        assert_eq!(taking_over(&me, Some(&dead)), me);
        assert_eq!(orphaned_for(&format!("{dead}:S1")), Some("S1"));
        assert_eq!(orphaned_for(&format!("{me}:S1")), None);
        assert_eq!(orphaned_for(&dead), None);
        assert_eq!(orphaned_for("S1:x"), None);
    }

    #[cfg(unix)]
    #[test]
    fn an_ended_process_or_a_reused_pid_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(is_gone(&format!("{PREFIX}{pid}")));
        let me = std::process::id();
        if let Some(start) = start_ticks(me) {
            assert!(is_gone(&format!("{PREFIX}{me}-{}", start + 1)));
        }
    }
}
