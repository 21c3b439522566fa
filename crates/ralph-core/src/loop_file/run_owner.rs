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

const PREFIX: &str = "ralph-run-";

/// This process's driver id.
pub fn own_id() -> String {
    let pid = std::process::id();
    match start_ticks(pid) {
        Some(start) => format!("{PREFIX}{pid}-{start}"),
        None => format!("{PREFIX}{pid}"),
    }
}

/// The owner a run writes into a loop it takes over from `previous`: its
/// own id, plus the session to hand the loop back to (a previous run's
/// session, when the loop is taken from a run that died).
pub fn taking_over(own: &str, previous: Option<&str>) -> String {
    let session = previous.and_then(|p| match parse(p) {
        Some(_) => p.split_once(':').map(|(_, s)| s),
        None => Some(p),
    });
    match session.filter(|s| !s.is_empty()) {
        Some(s) => format!("{own}:{s}"),
        None => own.to_owned(),
    }
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
    parse(owner).is_some()
}

/// The session a loop goes back to because its driver died: `S` from
/// `ralph-run-<pid>-<start>:S` when that process is gone.
pub fn orphaned_for(owner: &str) -> Option<&str> {
    let (_, session) = owner.split_once(':')?;
    (parse(owner).is_some() && !session.is_empty() && is_gone(owner)).then_some(session)
}

/// Whether `owner` names a `ralph run` whose process no longer runs.
/// Any other owner (a session id) is never "gone" by this test.
pub fn is_gone(owner: &str) -> bool {
    let Some((pid, start)) = parse(owner) else {
        return false;
    };
    process_is_gone(pid, start)
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

/// `ralph-run-<pid>[-<start>]` → `(pid, start)`.
fn parse(owner: &str) -> Option<(u32, Option<u64>)> {
    let rest = owner.strip_prefix(PREFIX)?;
    let rest = rest.split_once(':').map_or(rest, |(id, _)| id);
    let (pid, start) = match rest.split_once('-') {
        Some((p, s)) => (p, Some(s.parse().ok()?)),
        None => (rest, None),
    };
    Some((pid.parse().ok()?, start))
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
