//! `ralph prd lint [FILE]` and `ralph prd import FILE.md`: a PRD file read
//! (inside the project, through `safe_fs`), checked by `fields::prd_lint`
//! or converted by `fields::prd_import`, and the new `prd.json` written
//! without replacing one unless asked.

use crate::commands::CommandError;
use ralph_fs::safe_fs;
use ralph_state::fields::prd_lint::{self, Finding};
use ralph_state::fields::stories::{self, PrdError};
use ralph_state::storage::store::Project;

fn read(project: &Project, path: &str) -> Result<String, CommandError> {
    if !stories::inside_project(path) {
        return Err(CommandError::PrdOutside(
            ralph_fs::display::line(path).into_owned(),
        ));
    }
    safe_fs::read_text(&project.root.join(path), safe_fs::SMALL_FILE_CAP).map_err(|source| {
        CommandError::Prd(PrdError::Unreadable {
            file: ralph_fs::display::line(path).into_owned(),
            source,
        })
    })
}

/// What `ralph prd lint` finds in the PRD at `path` (relative to the project).
pub fn lint(project: &Project, path: &str) -> Result<Vec<Finding>, CommandError> {
    let text = read(project, path)?;
    Ok(prd_lint::lint(&ralph_fs::display::line(path), &text))
}

/// Writes the stories of the Markdown PRD `from` as the `prd.json` at `to`
/// (refused when `to` exists, unless `force`); the number of stories, and
/// what the lint finds in the new file.
pub fn import(
    project: &Project,
    from: &str,
    to: &str,
    force: bool,
) -> Result<(usize, Vec<Finding>), CommandError> {
    let markdown = read(project, from)?;
    let shown = ralph_fs::display::line(from).into_owned();
    let name = std::path::Path::new(from)
        .file_stem()
        .map_or_else(|| shown.clone(), |s| s.to_string_lossy().into_owned());
    let text = ralph_state::fields::prd_import::from_markdown(&name, &markdown)
        .ok_or(CommandError::NoStoriesInMarkdown(shown))?;
    if !stories::inside_project(to) {
        return Err(CommandError::PrdOutside(
            ralph_fs::display::line(to).into_owned(),
        ));
    }
    let target = project.root.join(to);
    let unwritable = |source| {
        CommandError::Prd(PrdError::Unreadable {
            file: ralph_fs::display::line(to).into_owned(),
            source,
        })
    };
    if !force && safe_fs::kind_at(&target).is_some() {
        return Err(CommandError::PrdExists(
            ralph_fs::display::line(to).into_owned(),
        ));
    }
    if let Some(parent) = std::path::Path::new(to)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        safe_fs::ensure_dir(&project.root, parent).map_err(unwritable)?;
    }
    let written = if force {
        safe_fs::replace(&target, text.as_bytes())
    } else {
        // O_EXCL: a file that appeared meanwhile is never written through.
        safe_fs::create_new(&target, text.as_bytes())
    };
    written.map_err(unwritable)?;
    let count = stories::parse(to, &text).map_or(0, |s| s.len());
    Ok((count, prd_lint::lint(&ralph_fs::display::line(to), &text)))
}
