//! One read of a project's loop files, each classified once: armed here
//! and running, armed here and paused, foreign (not armed by this user on
//! this machine, with the reason), or unreadable (with why). The rule that
//! a loop may run is [`Armings::classify`]; every front asks it rather than
//! reading the registry itself.

use std::path::{Path, PathBuf};

use crate::loop_file::lifecycle::Loop;
use crate::loop_file::registry::{self, Arming, Registry, Unarmed};
use crate::loop_file::state::LoopState;
use crate::loop_file::store::{self, LoopFile, Project, StoreError};

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
    pub fn read_files(files: Vec<LoopFile>, armings: &Armings) -> Self {
        let entries = files
            .into_iter()
            .map(|file| match store::read_to_string(&file.path) {
                Err(e) => LoopEntry::Unreadable {
                    file,
                    text: None,
                    why: e.to_string(),
                },
                Ok(text) => match LoopState::parse(&text) {
                    Ok(state) => armings.classify(Loop { file, text, state }),
                    Err(e) => LoopEntry::Unreadable {
                        file,
                        text: Some(text),
                        why: e.to_string(),
                    },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    #[test]
    fn one_scan_tells_armed_paused_foreign_and_unreadable_apart() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("p/.claude")).unwrap();
        let project = Project {
            root: tmp.path().join("p"),
        };
        let registry = registry::locate(Some(&tmp.path().join("state")), None).unwrap();
        for (name, session) in [("a-running", "s1"), ("b-paused", "s2")] {
            let req = crate::control::ArmRequest {
                name: name.into(),
                prompt: "task".into(),
                max_iterations: 5,
                session_id: Some(session.into()),
                ..crate::control::ArmRequest::default()
            };
            crate::control::arm(&project, &registry, &req, Timestamp(0)).unwrap();
        }
        crate::control::set_active(
            &project,
            Some(&registry),
            Some("b-paused"),
            false,
            None,
            false,
            Timestamp(1),
        )
        .unwrap();
        // A copy of an armed file under another name is not armed.
        let armed = std::fs::read_to_string(project.loop_path("a-running")).unwrap();
        std::fs::write(project.loop_path("c-copied"), &armed).unwrap();
        std::fs::write(project.loop_path("d-broken"), "not a loop file").unwrap();

        let scan = Scan::read(&project, Some(&registry)).unwrap();
        let kinds: Vec<(&str, &str)> = scan
            .entries
            .iter()
            .map(|e| {
                let kind = match e {
                    LoopEntry::Armed(_) => "armed",
                    LoopEntry::Paused(_) => "paused",
                    LoopEntry::Foreign { .. } => "foreign",
                    LoopEntry::Unreadable { text: Some(_), .. } => "unparsed",
                    LoopEntry::Unreadable { text: None, .. } => "unread",
                };
                (e.file().name.as_str(), kind)
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("a-running", "armed"),
                ("b-paused", "paused"),
                ("c-copied", "foreign"),
                ("d-broken", "unparsed"),
            ]
        );
        assert!(matches!(
            &scan.entries[2],
            LoopEntry::Foreign {
                why: Unarmed::NoRecord,
                ..
            }
        ));
        assert_eq!(scan.ours().count(), 2);
        // Without a registry nothing is ours.
        let none = Scan::read(&project, None).unwrap();
        assert_eq!(none.ours().count(), 0);
        assert!(matches!(
            &none.entries[0],
            LoopEntry::Foreign {
                why: Unarmed::Unavailable(_),
                ..
            }
        ));
    }
}
