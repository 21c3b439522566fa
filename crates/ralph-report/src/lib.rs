//! `ralph report`: one self-contained HTML file that shows what a loop did
//! (or every loop of the project, with a `--parallel` run's stories).
//! `model` turns what `ralph status` reads into plain data, `html` and
//! `charts` turn that into a page (both pure); this file gathers the data
//! (reading only, never through a link) and writes the page; `open` hands it
//! to the desktop's opener.
//!
//! Internal to ralph: its API is the `ralph` command and the plugin, not this
//! crate; `pub` here names only what another of ralph's crates uses.

mod charts;
mod html;
mod model;
pub mod open;
mod text;

use std::path::{Path, PathBuf};

use ralph_control::{self as control, LoopReport};
use ralph_fs::safe_fs::{self, FsError};
use ralph_state::fields::outcome::LoopStatus;
use ralph_state::storage::fleet;
use ralph_state::storage::registry::Registry;
use ralph_state::storage::store::Project;
use ralph_state::time::Timestamp;

pub use html::render;
pub use model::Report;

/// Where reports go, relative to the project root.
pub(crate) const REPORTS: &str = ".claude/ralph/reports";

/// Which loops a report shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportScope {
    /// Every run of the loop of that name: the live one, then the ended
    /// ones, newest first.
    Name(String),
    /// Every loop, live and ended, and the stories of a `--parallel` run.
    All,
    /// This session's live loop, else the most recent one.
    Default { session: Option<String> },
}

/// Why no report was made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no loop named `{0}` (see `ralph status`)")]
    NoSuchLoop(String),
    #[error("no Ralph loops in this project yet: nothing to report")]
    Nothing,
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Store(#[from] ralph_state::storage::store::StoreError),
}

impl ralph_fs::error::Exit for ReportError {}

/// The report's data for `selection`, read without the lock (as `ralph
/// status` reads).
pub fn gather(
    project: &Project,
    registry: Option<&Registry>,
    selection: &ReportScope,
    now: Timestamp,
) -> Result<Report, ReportError> {
    let mut all = control::report(project, registry, usize::MAX, 0, now)?;
    // The receipts kept for this user, so a loop its gate completed shows one.
    control::listing::attach_receipts(project, registry, &mut all);
    let chosen: Vec<&LoopReport> = match selection {
        ReportScope::All => all.iter().collect(),
        ReportScope::Name(name) => {
            let runs: Vec<&LoopReport> = all.iter().filter(|r| &r.name == name).collect();
            if runs.is_empty() {
                return Err(ReportError::NoSuchLoop(name.clone()));
            }
            runs
        }
        ReportScope::Default { session } => {
            let mine = all.iter().find(|r| {
                session.is_some() && &r.session_id == session && r.state != LoopStatus::Ended
            });
            vec![mine.or_else(|| all.first()).ok_or(ReportError::Nothing)?]
        }
    };
    let stories = match selection {
        ReportScope::All => stories(project),
        _ => Vec::new(),
    };
    let views = chosen
        .into_iter()
        .map(|r| {
            model::loop_view(
                r,
                &ralph_state::storage::store::read_log_tail(&r.log, usize::MAX),
            )
        })
        .collect();
    Ok(Report {
        project: project.root.display().to_string(),
        generated_at: now.to_string(),
        loops: views,
        stories,
    })
}

/// The stories' records of a `--parallel` run, by id (`fleet::read_records`:
/// only from a real folder, only files named by a valid story id).
fn stories(project: &Project) -> Vec<model::StoryRow> {
    fleet::read_records(&project.root)
        .iter()
        .map(model::StoryRow::from)
        .collect()
}

/// The default file of a report: `.claude/ralph/reports/<name>.html`
/// (`all.html` for `--all`); the reports folder is made a real folder.
pub fn default_path(
    project: &Project,
    selection: &ReportScope,
    report: &Report,
) -> Result<PathBuf, ReportError> {
    let dir = project.ensure_dir(REPORTS)?;
    let stem = match (selection, report.loops.as_slice()) {
        (ReportScope::All, _) | (_, []) => "all".to_owned(),
        (_, [first, ..]) => file_stem(&first.name),
    };
    Ok(dir.join(format!("{stem}.html")))
}

/// `ralph status`'s last line when a loop ended: how to see it as a page
/// (handed to `control::status_text`, which lies below this folder).
pub fn page_hint(name: &str) -> String {
    format!(
        "Report: `ralph report --name {}` writes {REPORTS}/{}.html (`ralph report --all`: every loop)",
        ralph_fs::display::line(name),
        file_stem(name)
    )
}

/// A loop name as a file name: letters, digits, `-`, `_` and `.` kept, the
/// rest `_`; never a hidden name, never empty.
pub fn file_stem(name: &str) -> String {
    let mut stem: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if stem.is_empty() || stem.starts_with('.') {
        stem.insert(0, '_');
    }
    stem
}

/// Writes `page` at `path`: a temp file made exclusively beside it, then
/// renamed over it; a link or special file at `path` is refused, never
/// followed (also for an `-o` path outside the project).
pub fn write(path: &Path, page: &str) -> Result<(), ReportError> {
    Ok(safe_fs::replace(path, page.as_bytes())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_stem_is_never_a_path_or_hidden() {
        assert_eq!(file_stem("ralph"), "ralph");
        assert_eq!(file_stem("../x"), "_.._x");
        assert_eq!(file_stem(".hidden"), "_.hidden");
        assert_eq!(file_stem(""), "_");
        assert_eq!(file_stem("a/b\\c d"), "a_b_c_d");
    }

    #[test]
    fn a_link_at_the_output_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        #[cfg(unix)]
        {
            let link = tmp.path().join("r.html");
            std::os::unix::fs::symlink(&target, &link).unwrap();
            assert!(write(&link, "<p>x</p>").is_err());
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        }
        let plain = tmp.path().join("p.html");
        write(&plain, "one").unwrap();
        write(&plain, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&plain).unwrap(), "two");
    }
}
