//! One read of a project's loop files, each classified once: armed here
//! and running, armed here and paused, foreign (not armed by this user on
//! this machine, with the reason), or unreadable (with why). The rule that
//! a loop may run is [`Armings::classify`]; every front asks it rather than
//! reading the registry itself.

use std::path::{Path, PathBuf};

use crate::fields::state::LoopState;
use crate::lifecycle::Loop;
use crate::storage::registry::{self, Arming, Registry, Unarmed};
use crate::storage::store::{self, Listing, LoopFile, Project, ProjectLock, StoreError};
use ralph_fs::safe_fs::FileStamp;

/// A loop file as one scan found it.
#[derive(Debug, Clone)]
pub enum LoopEntry {
    /// Armed by this user on this machine, and active: it may run.
    Armed(Loop),
    /// Armed here, but paused (`active: false`) or ended and not yet moved.
    Paused(Loop),
    /// Not armed here: inert, whatever session it names, until adopted.
    Foreign { live: Loop, why: Unarmed },
    /// Could not be read (a link, a FIFO, over-long, not UTF-8: `text` is
    /// `None`) or does not parse (`text` is what was read). Reported,
    /// never driven.
    Unreadable {
        file: LoopFile,
        text: Option<String>,
        why: String,
    },
}

impl LoopEntry {
    pub fn file(&self) -> &LoopFile {
        match self {
            LoopEntry::Armed(live) | LoopEntry::Paused(live) | LoopEntry::Foreign { live, .. } => {
                &live.file
            }
            LoopEntry::Unreadable { file, .. } => file,
        }
    }

    /// The loop, when the file parsed, whoever armed it.
    pub fn live(&self) -> Option<&Loop> {
        match self {
            LoopEntry::Armed(live) | LoopEntry::Paused(live) | LoopEntry::Foreign { live, .. } => {
                Some(live)
            }
            LoopEntry::Unreadable { .. } => None,
        }
    }

    /// The parsed state, when the file parsed, whoever armed it.
    pub fn state(&self) -> Option<&LoopState> {
        self.live().map(|live| &live.state)
    }

    /// The text read, even when it did not parse; `None` when the file could
    /// not be read at all (such a file is reported, never rewritten or moved).
    pub fn text(&self) -> Option<&str> {
        match self {
            LoopEntry::Armed(live) | LoopEntry::Paused(live) | LoopEntry::Foreign { live, .. } => {
                Some(&live.text)
            }
            LoopEntry::Unreadable { text, .. } => text.as_deref(),
        }
    }

    /// The session the file names as its owner, when it parsed.
    pub fn session_id(&self) -> Option<&str> {
        self.state().and_then(|s| s.session_id.as_deref())
    }

    /// The loop, when it was armed here (running or paused).
    pub fn ours(&self) -> Option<&Loop> {
        match self {
            LoopEntry::Armed(live) | LoopEntry::Paused(live) => Some(live),
            _ => None,
        }
    }

    /// Whether the loop was armed here, as the registry check answered it.
    pub fn arming(&self) -> Option<Arming> {
        match self {
            LoopEntry::Armed(_) | LoopEntry::Paused(_) => Some(Arming::Armed),
            LoopEntry::Foreign { why, .. } => Some(Arming::Unarmed(why.clone())),
            LoopEntry::Unreadable { .. } => None,
        }
    }
}

/// What the arming check needs, resolved once per scan: the registry (if
/// any) and the project's canonical root (if it resolved).
#[derive(Debug, Clone)]
pub struct Armings {
    registry: Option<Registry>,
    root: Option<PathBuf>,
}

impl Armings {
    pub fn new(registry: Option<Registry>, root: Option<PathBuf>) -> Self {
        Self { registry, root }
    }

    /// Resolves the project's root as records bind it.
    pub fn of_project(registry: Option<&Registry>, project: &Project) -> Self {
        Self::new(registry.cloned(), registry::canonical_root(project).ok())
    }

    pub fn registry(&self) -> Option<&Registry> {
        self.registry.as_ref()
    }

    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// Whether the loop file `name`, read as `state`, was armed here.
    pub fn arming(&self, name: &str, state: &LoopState) -> Arming {
        registry::arming(self.registry.as_ref(), self.root(), name, state)
    }

    /// Whether a record exists under `name`, whatever it binds.
    pub fn has_record(&self, name: &str) -> bool {
        match (&self.registry, self.root()) {
            (Some(r), Some(root)) => r.lookup(root, name).ok().flatten().is_some(),
            _ => false,
        }
    }

    /// Where the record of `name` is kept, when there is a registry.
    fn record_file(&self, name: &str) -> Option<PathBuf> {
        Some(self.registry.as_ref()?.record_file(self.root()?, name))
    }

    /// The rule: a loop may run only when a record of this user's arming
    /// matches it; armed and active runs, armed and inactive is paused,
    /// anything else is foreign, with the reason.
    pub fn classify(&self, live: Loop) -> LoopEntry {
        match self.arming(&live.file.name, &live.state) {
            Arming::Armed if live.state.active => LoopEntry::Armed(live),
            Arming::Armed => LoopEntry::Paused(live),
            Arming::Unarmed(why) => LoopEntry::Foreign { live, why },
        }
    }
}

/// Every live loop file of a project, sorted by name, each classified once.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub entries: Vec<LoopEntry>,
}

impl Scan {
    /// Reads and classifies every loop file. The project's root is resolved
    /// (and the registry read) only when there is a loop file: a project
    /// without one costs a directory read.
    pub fn read(project: &Project, registry: Option<&Registry>) -> Result<Self, StoreError> {
        let files = project.loop_files()?;
        if files.is_empty() {
            return Ok(Self::default());
        }
        let armings = Armings::of_project(registry, project);
        Ok(Self::read_files(files, &armings))
    }

    /// [`Scan::read`] over files already listed, with the arming resolved.
    pub(crate) fn read_files(files: Vec<LoopFile>, armings: &Armings) -> Self {
        let entries = files
            .into_iter()
            .map(|file| match store::read_to_string(&file.path) {
                Err(e) => unread(file, &e),
                Ok(text) => match LoopState::parse(&text) {
                    Ok(state) => armings.classify(Loop { file, text, state }),
                    Err(e) => unparsed(file, text, &e),
                },
            })
            .collect();
        Self { entries }
    }

    /// The loops armed here, running or paused.
    pub fn ours(&self) -> impl Iterator<Item = &Loop> {
        self.entries.iter().filter_map(LoopEntry::ours)
    }
}

/// Whose a loop is for a stop: its `session_id`, except that a loop whose
/// `ralph run` died goes back to the session it was taken from
/// (crate::fields::run_owner), which claims it again at its next stop.
pub fn stop_owner(state: &LoopState) -> Option<&str> {
    let owner = state.session_id.as_deref()?;
    let orphaned =
        crate::fields::run_owner::RunOwner::parse(owner).and_then(|run| run.orphaned_for());
    Some(orphaned.unwrap_or(owner))
}

/// Whether a stop of `session` has any business with a loop: an ended one
/// (to move it into the history), or one that is nobody's or this
/// session's. Another session's running loop is never even classified.
fn concerns_session(state: &LoopState, session: &str) -> bool {
    state.outcome.is_some() || stop_owner(state).is_none_or(|o| o == session)
}

/// The Stop hook's look at a project's loop files, taken without the lock
/// (so a project whose files are all inert is left exactly as it is): one
/// listing, each file read and parsed once, the arming record of each loop
/// the stop may concern read once. [`FirstLook::lock`] confirms it under
/// the lock by stamps alone (no file is opened again) and gives the
/// [`LockedScan`] a stop writes from.
#[derive(Debug)]
pub struct FirstLook {
    listing: Listing,
    scan: Scan,
    /// The unparsed files that have a record (armed here, now corrupt).
    recorded: Vec<String>,
    /// Every file the look read, with its stamp from before the read.
    witnessed: Vec<(PathBuf, Option<FileStamp>)>,
}

impl FirstLook {
    /// Reads and classifies `listing`'s loop files for a stop of `session`
    /// (see [`concerns_session`]: other sessions' running loops are
    /// skipped after their parse, their records never read).
    pub fn take(listing: Listing, armings: &Armings, session: &str) -> Self {
        let mut look = Self {
            scan: Scan::default(),
            recorded: Vec::new(),
            witnessed: Vec::new(),
            listing: Listing::default(),
        };
        for file in &listing.loops {
            look.witness(&file.path);
            let entry = match store::read_to_string(&file.path) {
                Err(e) => unread(file.clone(), &e),
                Ok(text) => match LoopState::parse(&text) {
                    Ok(state) if !concerns_session(&state, session) => continue,
                    Ok(state) => {
                        look.witness_record(armings, &file.name);
                        armings.classify(Loop {
                            file: file.clone(),
                            text,
                            state,
                        })
                    }
                    Err(e) => {
                        look.witness_record(armings, &file.name);
                        if armings.has_record(&file.name) {
                            look.recorded.push(file.name.clone());
                        }
                        unparsed(file.clone(), text, &e)
                    }
                },
            };
            look.scan.entries.push(entry);
        }
        look.listing = listing;
        look
    }

    fn witness(&mut self, path: &Path) {
        self.witnessed.push((path.to_owned(), FileStamp::at(path)));
    }

    fn witness_record(&mut self, armings: &Armings, name: &str) {
        if let Some(record) = armings.record_file(name) {
            self.witness(&record);
        }
    }

    /// The entries the stop may concern, classified.
    pub fn entries(&self) -> &[LoopEntry] {
        &self.scan.entries
    }

    /// Whether the unparsed file `name` has a record (it was armed here).
    pub fn has_record(&self, name: &str) -> bool {
        self.recorded.iter().any(|n| n == name)
    }

    /// The listing of `.claude/` the look was read from (its temp files).
    pub fn listing(&self) -> &Listing {
        &self.listing
    }

    /// Takes the project's lock and confirms the look under it: when
    /// `.claude/` and every file read (loop files and records) still has
    /// the stamp it had, the look is what a read under the lock would give;
    /// otherwise (another ralph wrote meanwhile) everything is read again,
    /// under the lock.
    pub fn lock(
        self,
        project: &Project,
        armings: &Armings,
        session: &str,
    ) -> Result<LockedScan, StoreError> {
        let lock = project.lock()?;
        let look = if self.still_current(project) {
            self
        } else {
            Self::take(project.list()?, armings, session)
        };
        Ok(LockedScan { look, lock })
    }

    fn still_current(&self, project: &Project) -> bool {
        project.still_listed(&self.listing)
            && self
                .witnessed
                .iter()
                .all(|(path, stamp)| FileStamp::at(path) == *stamp)
    }
}

fn unread(file: LoopFile, why: &StoreError) -> LoopEntry {
    LoopEntry::Unreadable {
        file,
        text: None,
        why: why.to_string(),
    }
}

fn unparsed(file: LoopFile, text: String, why: &impl std::fmt::Display) -> LoopEntry {
    LoopEntry::Unreadable {
        file,
        text: Some(text),
        why: why.to_string(),
    }
}

/// A [`FirstLook`] confirmed under the project's lock, with the lock: the
/// only way a stop gets loops it may write (every write takes the guard).
#[derive(Debug)]
pub struct LockedScan {
    look: FirstLook,
    lock: ProjectLock,
}

impl LockedScan {
    /// The look, as under the lock, and the lock itself, for a turn that
    /// drops the lock while a gate runs (see `decide::engine::step`).
    pub fn split(self) -> (FirstLook, ProjectLock) {
        (self.look, self.lock)
    }
}
