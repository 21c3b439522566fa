//! `ralph init` (and `/ralph-init ARGS`): a template's PRD, progress log and
//! prompt written into `ralph/`, and ralph's state files into the
//! repository's `info/exclude` (never into the project's `.gitignore`: the
//! state is this machine's, and the user's files are theirs).
//! Every file goes through `safe_fs`: a project's folders may hold a link
//! planted by a stranger, and nothing is written through one.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::templates::{self, TEMPLATES};
use ralph_fs::safe_fs::{self, FsError};
use ralph_state::storage::store::{Project, StoreError};

/// ralph's state, kept out of git: the same lines `ralph run --parallel` adds.
const EXCLUDE_LINES: [&str; 2] = ["/.claude/*.local.md", "/.claude/ralph/"];

/// Why `ralph init` wrote nothing, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("no template named `{name}`; choose one of:\n{}", names())]
    NoTemplate { name: String },
    #[error("`--template` needs a value")]
    TemplateNeedsValue,
    #[error("`{0}` is not an option of /ralph-init; use `[software|marketing] [--force]`")]
    NotAnOption(String),
    #[error("{} already {}; nothing was written. Use --force to overwrite.", .0.join(", "), ralph_state::plural::noun(.0.len() as u64, "exists", "exist"))]
    Exists(Vec<String>),
    #[error("could not write ralph/{file}: {source}")]
    Write { file: String, source: FsError },
    #[error("{}; .git/info/exclude was not edited (add {} yourself)", .0, EXCLUDE_LINES.join(" and "))]
    ExcludeUnreadable(FsError),
    #[error("could not update .git/info/exclude: {0}")]
    ExcludeWrite(FsError),
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A template or option the user typed is wrong: a usage error; the rest fail.
impl ralph_fs::error::Exit for InitError {
    fn exit_class(&self) -> ralph_fs::error::ExitClass {
        match self {
            Self::NoTemplate { .. } | Self::TemplateNeedsValue | Self::NotAnOption(_) => {
                ralph_fs::error::ExitClass::Usage
            }
            _ => ralph_fs::error::ExitClass::Failure,
        }
    }
}

fn names() -> String {
    let names: Vec<String> = TEMPLATES
        .iter()
        .map(|t| format!("  {}: {}", t.name, t.summary))
        .collect();
    names.join("\n")
}

/// `/ralph-init [TEMPLATE] [--template TEMPLATE] [--force]`, split on
/// whitespace: a template name has no spaces, and anything else is refused
/// rather than guessed.
pub fn apply_typed(template: &mut String, force: &mut bool, typed: &str) -> Result<(), InitError> {
    let mut words = typed.split_whitespace();
    while let Some(word) = words.next() {
        match word {
            "--force" => *force = true,
            "--template" => {
                words
                    .next()
                    .ok_or(InitError::TemplateNeedsValue)?
                    .clone_into(template);
            }
            w if w.starts_with("--template=") => w["--template=".len()..].clone_into(template),
            w if !w.starts_with('-') => w.clone_into(template),
            other => return Err(InitError::NotAnOption(other.to_owned())),
        }
    }
    Ok(())
}

/// Writes the template's files into `ralph/` (refused when any is there
/// already, unless `force`), each told as it is written; then adds ralph's
/// state files to `.git/info/exclude` in a git project: what it added, if anything.
pub fn init(
    project: &Project,
    template: &str,
    force: bool,
    tell: &mut dyn FnMut(String),
) -> Result<Option<String>, InitError> {
    let template = templates::find(template).ok_or_else(|| InitError::NoTemplate {
        name: template.to_owned(),
    })?;
    // The hook looks for `.claude/` to find the project.
    project.ensure_dir(".claude")?;
    let dir = project.root.join("ralph");
    // Anything already there counts, a link included (it is never written through).
    let existing: Vec<String> = template
        .files
        .iter()
        .filter(|(f, _)| safe_fs::kind_at(&dir.join(f)).is_some())
        .map(|(f, _)| format!("ralph/{f}"))
        .collect();
    if !existing.is_empty() && !force {
        return Err(InitError::Exists(existing));
    }
    safe_fs::ensure_dir(&project.root, "ralph")?;
    for (file, contents) in template.files {
        let path = dir.join(file);
        safe_fs::replace(&path, contents.as_bytes()).map_err(|source| InitError::Write {
            file: (*file).to_owned(),
            source,
        })?;
        tell(format!("wrote ralph/{file}"));
    }
    ignore_loop_files(&project.root)
}

/// Adds ralph's state files to the repository's `info/exclude` in a git
/// project, once.
fn ignore_loop_files(root: &Path) -> Result<Option<String>, InitError> {
    if !root.join(".git").exists() {
        return Ok(None);
    }
    let common = git_common_dir(root).unwrap_or_else(|| root.join(".git"));
    safe_fs::ensure_dir(&common, "info").map_err(InitError::ExcludeWrite)?;
    let path = common.join("info/exclude");
    let current = match safe_fs::read_text(&path, safe_fs::SMALL_FILE_CAP) {
        Ok(text) => text,
        Err(e) if e.is_not_found() => String::new(),
        Err(e) => return Err(InitError::ExcludeUnreadable(e)),
    };
    let missing: Vec<&str> = EXCLUDE_LINES
        .iter()
        .copied()
        .filter(|l| !current.lines().any(|c| c.trim() == *l))
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    let mut text = String::new();
    if !current.is_empty() && !current.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# ralph: loop state, per machine\n");
    for line in &missing {
        text.push_str(line);
        text.push('\n');
    }
    safe_fs::append(&path, text.as_bytes()).map_err(InitError::ExcludeWrite)?;
    Ok(Some(missing.join(" and ")))
}

/// The repository's common git folder (shared by its worktrees), as git
/// names it; `None` when git did not answer.
fn git_common_dir(root: &Path) -> Option<PathBuf> {
    let mut command = ralph_fs::git_runner::command(root, &[]).ok()?;
    command.args(["rev-parse", "--git-common-dir"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = ralph_fs::git_runner::run_until(command, deadline, &[0], 64 * 1024)?;
    let dir = String::from_utf8(out).ok()?;
    Some(root.join(dir.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_fs::error::{Exit as _, ExitClass};

    #[test]
    fn slash_arguments_pick_the_template_and_force() {
        let (mut template, mut force) = ("software".to_owned(), false);
        apply_typed(&mut template, &mut force, "marketing --force").unwrap();
        assert_eq!((template.as_str(), force), ("marketing", true));
        apply_typed(&mut template, &mut force, "--template=x").unwrap();
        assert_eq!(template, "x");
        let refused = apply_typed(&mut template, &mut force, "--bogus").unwrap_err();
        assert_eq!(refused.exit_class(), ExitClass::Usage);
        let missing = apply_typed(&mut template, &mut force, "--template").unwrap_err();
        assert_eq!(missing.to_string(), "`--template` needs a value");
        assert_eq!(
            InitError::Exists(vec!["ralph/prd.json".into()]).exit_class(),
            ExitClass::Failure
        );
    }
}
