//! Which of a project's loop files the Stop hook picks: whether any concerns
//! this session (judged without the lock, from the [`FirstLook`]), the
//! tidying under the lock (ended loops into the history, corrupt ones
//! armed here moved aside), which loop this stop drives, and the inert
//! files' notices, each told once.

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use ralph_fs::display;
use ralph_state::fields::outcome::Outcome;
use ralph_state::fields::state;
use ralph_state::lifecycle::{self, LogEntry, Logged, Loop};
use ralph_state::ownership::{self, Candidate, Selection};
use ralph_state::scan::{Armings, FirstLook, LoopEntry, stop_owner};
use ralph_state::storage::registry::{self, Unarmed};
use ralph_state::storage::store::{LoopFile, Project, ProjectLock};
use ralph_state::time::Timestamp;

/// The registry check for one stop: which loops were armed here.
pub(super) struct Pick<'a> {
    /// The registry and the project's canonical path, as records bind it.
    pub(super) armings: Armings,
    pub(super) session: &'a str,
    /// The inert loop files met at this stop, told once at its end
    /// ([`Pick::inert_notices`]).
    inert: RefCell<InertFiles>,
}

/// The inert loop files met so far in a stop, each once.
#[derive(Default)]
struct InertFiles {
    seen: HashSet<PathBuf>,
    list: Vec<Inert>,
}

/// An inert loop file's notice, waiting for the end of the stop.
struct Inert {
    path: PathBuf,
    /// The file's shape as the notice marker keys it.
    digest: String,
    notice: String,
}

/// The most inert loop files named one by one in a stop; past it, one
/// summary line counts the rest, so a checkout with thousands of committed
/// loop files costs a few marker lookups per stop, not one per file.
const MAX_INERT_NOTICES: usize = 3;

/// The loop a stop drives, and whether the session claims it with this turn.
pub(super) struct Chosen<'a> {
    pub(super) live: &'a Loop,
    pub(super) claim: bool,
}

impl<'a> Pick<'a> {
    pub(super) fn new(armings: Armings, session: &'a str) -> Self {
        Self {
            armings,
            session,
            inert: RefCell::default(),
        }
    }

    /// Whether any loop file here may be this session's to drive or to tidy
    /// (an ended or corrupt loop of this user). Judged from the lock-free
    /// look; the inert files are noted on the way, for their notice at the
    /// end of the stop.
    pub(super) fn concerns_us(&self, look: &FirstLook) -> bool {
        look.entries()
            .iter()
            .any(|entry| self.concerns(entry, |name| look.has_record(name)))
    }

    fn concerns(&self, entry: &LoopEntry, has_record: impl Fn(&str) -> bool) -> bool {
        match entry {
            LoopEntry::Unreadable { text: None, .. } => true, // reported under the lock
            LoopEntry::Unreadable {
                file,
                text: Some(text),
                why,
            } => {
                if has_record(&file.name) {
                    return true;
                }
                self.note_corrupt_if_ours(file, text, why);
                false
            }
            LoopEntry::Armed(_) | LoopEntry::Paused(_) => true,
            LoopEntry::Foreign { live, why } => {
                // A record exists for this session's own loop: judged under
                // the lock, so that a stop never sees an adoption half done
                // (record written, nonce not yet in the file).
                if stop_owner(&live.state) == Some(self.session) && why.has_record() {
                    return true;
                }
                if live.state.outcome.is_none() {
                    self.note_inert(live, why);
                }
                false
            }
        }
    }

    /// A corrupt file not armed here: inert when it is nobody's or names
    /// this session; another session's broken file is its own business.
    fn note_corrupt_if_ours(&self, file: &LoopFile, text: &str, why: &str) {
        let owner = state::scan_session_id(text);
        if owner.is_none() || owner.as_deref() == Some(self.session) {
            self.note_corrupt(file, text, why);
        }
    }

    /// A corrupt loop file that is nobody's and was not armed here: it is
    /// ignored, said once per session (see [`Pick::inert_notices`]).
    fn note_corrupt(&self, file: &LoopFile, text: &str, why: &str) {
        let notice = format!(
            "⚠ ralph: {} is ignored: it is not a valid loop file ({}) and was not armed by you on this machine.",
            display::line(&file.path.display().to_string()),
            display::line(why)
        );
        self.defer(&file.path, registry::digest_text(text), notice);
    }

    fn forget(&self, name: &str, nonce: Option<&str>) {
        if let (Some(r), Some(root)) = (self.armings.registry(), self.armings.root()) {
            r.forget(root, name, nonce);
        }
    }

    /// An inert loop: its notice, told once per session in this shape (see
    /// [`Pick::inert_notices`]).
    fn note_inert(&self, live: &Loop, why: &Unarmed) {
        let notice = inert_notice(&live.file.path, &live.file.name, &why.why());
        self.defer(&live.file.path, registry::digest(&live.state), notice);
    }

    fn defer(&self, path: &Path, digest: String, notice: String) {
        let mut inert = self.inert.borrow_mut();
        // Met again under the lock: once is enough.
        if inert.seen.insert(path.to_owned()) {
            inert.list.push(Inert {
                path: path.to_owned(),
                digest,
                notice,
            });
        }
    }

    /// Under the lock: files that ended but were not yet moved go into the
    /// history (when they are this user's); corrupt files armed here are
    /// moved aside with a notice; other corrupt files are left alone. The
    /// loops that may still be driven are returned.
    pub(super) fn tidy<'s>(
        &self,
        scan: &'s FirstLook,
        lock: &ProjectLock,
        project: &Project,
        now: Timestamp,
        notices: &mut Vec<String>,
    ) -> Vec<&'s LoopEntry> {
        let mut kept = Vec::new();
        for entry in scan.entries() {
            match entry {
                LoopEntry::Unreadable {
                    text: None, why, ..
                } => {
                    notices.push(format!("⚠ ralph: {}", display::line(why)));
                }
                LoopEntry::Unreadable {
                    file,
                    text: Some(text),
                    why,
                } => {
                    if scan.has_record(&file.name) {
                        notices.push(self.move_corrupt(lock, project, file, why, now));
                    } else {
                        self.note_corrupt_if_ours(file, text, why);
                    }
                }
                LoopEntry::Armed(live) | LoopEntry::Paused(live)
                    if live.state.outcome.is_some() =>
                {
                    notices.extend(self.archive_ended(lock, project, live, now));
                }
                // Ended, not armed here: not this user's to move.
                LoopEntry::Foreign { live, .. } if live.state.outcome.is_some() => {}
                other => kept.push(other),
            }
        }
        kept
    }

    /// An ended loop of this user, not yet moved: into the history now.
    fn archive_ended(
        &self,
        lock: &ProjectLock,
        project: &Project,
        live: &Loop,
        now: Timestamp,
    ) -> Option<String> {
        let ended = live.state.ended_at.unwrap_or(now);
        match lifecycle::archive_as_is(lock, project, &live.file, ended, "") {
            Ok(_) => {
                self.forget(&live.file.name, live.state.nonce.as_deref());
                None
            }
            Err(e) => Some(format!(
                "⚠ ralph: {}: the loop ended but could not be moved into the history: {}",
                display::line(&live.file.path.display().to_string()),
                display::line(&e.to_string())
            )),
        }
    }

    /// A corrupt file armed here: moved aside (one bad file is one notice;
    /// the other loops still run), its record dropped, the ending logged.
    /// Only a file armed here is moved: one that merely names this session
    /// may have been planted by any command it ran.
    fn move_corrupt(
        &self,
        lock: &ProjectLock,
        project: &Project,
        file: &LoopFile,
        why: &str,
        now: Timestamp,
    ) -> String {
        let notice = match lifecycle::archive_as_is(lock, project, file, now, ".corrupt") {
            Ok(record) => {
                self.forget(&file.name, None);
                format!(
                    "⚠ ralph: {}: {}. The loop stopped and the file was moved to {} so it cannot trap the session. To go on with it: fix it, move it back, then `ralph adopt --name {}` (its record was dropped, so a file put back stays inert until you adopt it); or arm a new loop with /ralph-loop.",
                    display::line(&file.path.display().to_string()),
                    display::line(why),
                    display::line(&record.display().to_string()),
                    display::line(&file.name)
                )
            }
            Err(e) => format!(
                "⚠ ralph: {}: {}. It could not be moved aside ({}); fix or remove it.",
                display::line(&file.path.display().to_string()),
                display::line(why),
                display::line(&e.to_string())
            ),
        };
        LogEntry::new(now, Logged::End, why)
            .session(self.session)
            .outcome(Outcome::Corrupt)
            .append(project, &file.name);
        notice
    }

    /// The loop this stop drives, if any, and whether the session claims it.
    /// Only loops armed here are candidates, whatever session they name: a
    /// file that names this session proves nothing, since every command the
    /// agent runs sees the session id. Anything else is inert and gets its
    /// notice once.
    pub(super) fn choose<'s>(&self, entries: &[&'s LoopEntry]) -> Option<Chosen<'s>> {
        let mut drivable: Vec<&Loop> = Vec::new();
        for entry in entries {
            let Some(live) = entry.live() else { continue };
            if stop_owner(&live.state).is_some_and(|o| o != self.session) {
                continue; // another session's loop: not this stop's business
            }
            match entry {
                LoopEntry::Foreign { why, .. } => self.note_inert(live, why),
                _ => drivable.push(live),
            }
        }
        let candidates: Vec<Candidate<'_>> = drivable
            .iter()
            .map(|l| Candidate {
                owner: stop_owner(&l.state),
                started_at: l.state.started_at,
            })
            .collect();
        let (i, claim) = match ownership::select(self.session, &candidates) {
            Selection::None => return None,
            Selection::Owned(i) => (
                i,
                drivable[i].state.session_id.as_deref() != Some(self.session),
            ),
            Selection::Claim(i) => (i, true),
        };
        Some(Chosen {
            live: drivable[i],
            claim,
        })
    }

    /// The notices of the inert loop files met at this stop, for the first
    /// time this session meets them in this shape. Up to
    /// [`MAX_INERT_NOTICES`] files, each has its own marker; past that, the
    /// first few are named and one line counts the rest, under a single
    /// marker for the whole set (so a new or changed file tells again).
    pub(super) fn inert_notices(&self, notices: &mut Vec<String>) {
        let inert = self.inert.take().list;
        let first = |path: &Path, digest: &str| {
            self.armings
                .registry()
                .is_none_or(|r| r.first_notice(self.session, path, digest))
        };
        if inert.len() <= MAX_INERT_NOTICES {
            notices.extend(
                inert
                    .into_iter()
                    .filter(|i| first(&i.path, &i.digest))
                    .map(|i| i.notice),
            );
            return;
        }
        let folder = inert[0].path.parent().unwrap_or(Path::new(".")).to_owned();
        if !first(&folder, &registry::digest_text(&set_key(&inert))) {
            return;
        }
        let more = inert.len() - MAX_INERT_NOTICES;
        notices.extend(inert.into_iter().take(MAX_INERT_NOTICES).map(|i| i.notice));
        notices.push(format!(
            "⚠ ralph: {} more {} in {} {} inert too: not armed by you on this machine, so {} runs. `ralph status` lists them all.",
            more,
            ralph_state::plural::noun(more as u64, "loop file", "loop files"),
            display::line(&folder.display().to_string()),
            ralph_state::plural::noun(more as u64, "is", "are"),
            ralph_state::plural::noun(more as u64, "it never", "none of them")
        ));
    }
}

/// What identifies a set of inert files for its one marker: each path and
/// digest.
fn set_key(inert: &[Inert]) -> String {
    let mut set = String::new();
    for i in inert {
        set.push_str(&i.path.display().to_string());
        set.push('\0');
        set.push_str(&i.digest);
        set.push('\0');
    }
    set
}

/// The one notice an inert loop file gets in a session.
fn inert_notice(path: &Path, name: &str, why: &str) -> String {
    format!(
        "⚠ ralph: {} is not driven: {why}. ralph runs only loops you armed on this machine; to run this one, read it and adopt it: `ralph adopt --name {}`",
        display::line(&path.display().to_string()),
        display::line(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_state::storage::registry::Registry;
    use ralph_state::test_support::{arm_plain, project};

    fn arm(project: &Project, registry: &Registry, name: &str, session: Option<&str>) {
        arm_plain(project, registry, name, session, 5);
    }

    fn pick<'a>(project: &Project, registry: &Registry, session: &'a str) -> Pick<'a> {
        Pick::new(Armings::of_project(Some(registry), project), session)
    }

    fn look(project: &Project, pick: &Pick<'_>) -> FirstLook {
        FirstLook::take(project.list().unwrap(), &pick.armings, pick.session)
    }

    #[test]
    fn another_sessions_loop_is_not_ours_and_its_record_is_not_read() {
        let (_tmp, project, registry) = project();
        arm(&project, &registry, "theirs", Some("s2"));
        let pick = pick(&project, &registry, "s1");
        let look = look(&project, &pick);
        assert!(look.entries().is_empty(), "skipped after its parse");
        assert!(!pick.concerns_us(&look));
        let mut notices = Vec::new();
        pick.inert_notices(&mut notices);
        assert!(notices.is_empty(), "{notices:?}");
    }

    #[test]
    fn our_armed_loop_concerns_us_and_is_chosen() {
        let (_tmp, project, registry) = project();
        arm(&project, &registry, "ours", Some("s1"));
        let pick = pick(&project, &registry, "s1");
        let look = look(&project, &pick);
        assert!(pick.concerns_us(&look));
        let (scan, lock) = look.lock(&project, &pick.armings, "s1").unwrap().split();
        let mut notices = Vec::new();
        let kept = pick.tidy(&scan, &lock, &project, Timestamp(9), &mut notices);
        let chosen = pick.choose(&kept).expect("a loop to drive");
        assert_eq!(chosen.live.file.name, "ours");
        assert!(!chosen.claim, "already this session's");
        assert!(notices.is_empty(), "{notices:?}");
    }

    #[test]
    fn a_loop_of_nobody_is_claimed_by_the_first_session_to_stop() {
        let (_tmp, project, registry) = project();
        arm(&project, &registry, "open", None);
        let pick = pick(&project, &registry, "s1");
        let look = look(&project, &pick);
        let (scan, lock) = look.lock(&project, &pick.armings, "s1").unwrap().split();
        let kept = pick.tidy(&scan, &lock, &project, Timestamp(9), &mut Vec::new());
        assert!(pick.choose(&kept).expect("chosen").claim);
    }

    #[test]
    fn a_file_written_between_the_look_and_the_lock_is_read_again() {
        let (_tmp, project, registry) = project();
        arm(&project, &registry, "ours", Some("s1"));
        let pick = pick(&project, &registry, "s1");
        let first = look(&project, &pick);
        // Another ralph moves the loop on meanwhile (a rename, as every write).
        let path = project.loop_path("ours");
        let text = std::fs::read_to_string(&path).unwrap();
        let moved_on = text.replace("iteration: 1", "iteration: 2");
        let temp = path.with_extension("tmp");
        std::fs::write(&temp, &moved_on).unwrap();
        std::fs::rename(&temp, &path).unwrap();
        let (scan, _lock) = first.lock(&project, &pick.armings, "s1").unwrap().split();
        let live = scan.entries()[0].live().unwrap();
        assert_eq!(live.text, moved_on, "the locked scan reads what is there");
    }

    #[test]
    fn a_corrupt_file_armed_here_is_moved_aside_and_a_strangers_left_alone() {
        let (_tmp, project, registry) = project();
        arm(&project, &registry, "broken", Some("s1"));
        std::fs::write(project.loop_path("broken"), "---\nnot: [valid\n---\n").unwrap();
        std::fs::write(project.loop_path("planted"), "not a loop file").unwrap();
        let pick = pick(&project, &registry, "s1");
        let look = look(&project, &pick);
        assert!(pick.concerns_us(&look), "armed here, now corrupt");
        let (scan, lock) = look.lock(&project, &pick.armings, "s1").unwrap().split();
        let mut notices = Vec::new();
        let kept = pick.tidy(&scan, &lock, &project, Timestamp(9), &mut notices);
        assert!(kept.is_empty());
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(notices[0].contains("was moved to"), "{}", notices[0]);
        assert!(!project.loop_path("broken").exists());
        assert!(project.loop_path("planted").exists());
        pick.inert_notices(&mut notices);
        assert!(notices[1].contains("is ignored"), "{notices:?}");
    }

    #[test]
    fn past_three_inert_files_one_line_counts_the_rest() {
        let (_tmp, project, registry) = project();
        for i in 0..5 {
            std::fs::write(project.loop_path(&format!("p{i}")), "not a loop file").unwrap();
        }
        let pick = pick(&project, &registry, "s1");
        assert!(!pick.concerns_us(&look(&project, &pick)));
        let mut notices = Vec::new();
        pick.inert_notices(&mut notices);
        assert_eq!(notices.len(), 4, "{notices:?}");
        assert!(notices[3].starts_with("⚠ ralph: 2 more loop files in "));
        // Told once for the same set.
        let again = self::pick(&project, &registry, "s1");
        assert!(!again.concerns_us(&look(&project, &again)));
        let mut later = Vec::new();
        again.inert_notices(&mut later);
        assert!(later.is_empty(), "{later:?}");
    }
}
