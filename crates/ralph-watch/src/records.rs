//! What `ralph watch` reads: ralph's own records only. The loops of a project (and of
//! each `--parallel` story's worktree) as `ralph status` reads them (`control::report`,
//! the mailbox included), and a [`Stamp`] of those records, cheap to take (a few `stat`
//! calls, no file read), so the screen is built again only when one changed.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use ralph_control as control;
use ralph_state::storage::fleet;
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::Project;
use ralph_state::time::Timestamp;

use crate::board::RecordsRead;

/// What is watched: a project, maybe one loop of it.
#[derive(Debug, Clone)]
pub struct Watched {
    pub project: Project,
    pub registry: Option<Registry>,
    /// `--name`: this loop only.
    pub name: Option<String>,
}

/// Ended loops shown under the live ones (each project's most recent).
const HISTORY_SHOWN: usize = 2;
/// Decision-log lines read per loop.
const RECENT_READ: usize = 10;

impl Watched {
    /// The project's loops, then each `--parallel` story's loop; `--name` keeps one.
    pub fn sources(&self, now: Timestamp) -> Vec<RecordsRead> {
        let registry = self.registry.as_ref();
        let mut out: Vec<RecordsRead> =
            control::report(&self.project, registry, HISTORY_SHOWN, RECENT_READ, now)
                .unwrap_or_default()
                .into_iter()
                .filter(|r| self.name.as_deref().is_none_or(|n| n == r.name))
                .map(|report| RecordsRead {
                    report,
                    story: None,
                })
                .collect();
        if self.name.is_some() {
            return out;
        }
        for (id, project, name) in self.stories() {
            let reports =
                control::report(&project, registry, 0, RECENT_READ, now).unwrap_or_default();
            out.extend(
                reports
                    .into_iter()
                    .filter(|r| r.name == name)
                    .map(|report| RecordsRead {
                        report,
                        story: Some(id.clone()),
                    }),
            );
        }
        out
    }

    /// Each story worktree's project and loop name.
    fn stories(&self) -> Vec<(String, Project, String)> {
        fleet::story_ids(&self.project.root)
            .into_iter()
            .filter_map(|id| {
                let (project, name) = fleet::story_loop(&self.project.root, &id)?;
                Some((id, project, name))
            })
            .collect()
    }

    /// The project a row's loop lives in: the story's worktree, or the project.
    pub fn project_of(&self, story: Option<&str>) -> Option<Project> {
        match story {
            None => Some(self.project.clone()),
            Some(id) => fleet::story_loop(&self.project.root, id).map(|(p, _)| p),
        }
    }

    /// A stamp of every record the screen is drawn from.
    pub fn stamp(&self) -> Stamp {
        let mut paths = project_paths(&self.project.root);
        paths.push(self.project.root.join(fleet::WORKTREES));
        for (_, project, _) in self.stories() {
            paths.extend(project_paths(&project.root));
        }
        if let Some(registry) = &self.registry {
            paths.push(registry.dir().join("guidance"));
            // Each mailbox folder changes when an entry comes or goes.
            if let Ok(read) = std::fs::read_dir(registry.dir().join("guidance")) {
                for entry in read.flatten() {
                    let dir = entry.path();
                    paths.push(dir.join("pending"));
                    paths.push(dir.join("delivered"));
                    paths.push(dir);
                }
            }
        }
        Stamp(paths.iter().map(|p| meta(p)).collect())
    }
}

/// The folders and logs of a project whose change the screen shows: a loop file is
/// replaced by a rename (its folder changes), a log is appended to (its size changes).
fn project_paths(root: &Path) -> Vec<PathBuf> {
    let claude = root.join(".claude");
    let logs = claude.join("ralph/logs");
    let mut paths = vec![claude.clone(), logs.clone(), claude.join("ralph/history")];
    if let Ok(read) = std::fs::read_dir(&logs) {
        paths.extend(read.flatten().map(|e| e.path()));
    }
    paths
}

/// A path's modification time and size, without following a link.
fn meta(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The metadata of every record watched: equal stamps, nothing to build again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamp(Vec<Option<(SystemTime, u64)>>);
