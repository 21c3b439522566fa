//! `ralph install | uninstall codex|gemini|copilot [--project]`: add ralph's
//! turn-end hook (and a `ralph-loop` command or skill) to a host's
//! configuration, or take exactly that out again. Each step is told as a
//! line; the binary prints them.
//!
//! Internal to ralph: its API is the `ralph` command and the plugin, not this
//! crate; `pub` here names only what another of ralph's crates uses.
//!
//! JSON settings (comments allowed) are edited as text (`json_edit`):
//! ralph's own entry is recognised by its command (`… hook stop --host
//! NAME`), and exactly the bytes of that entry are added or taken out, so
//! that an uninstall leaves every file as it was before the install. In a
//! project, whose folders a stranger may have committed, files and folders
//! are written through `safe_fs` (no links followed, nothing special opened).

mod additions;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::additions::{
    CODEX_SKILL, EMPTY_SETTINGS, GEMINI_COMMAND, add_hook, has_hook, hook_args, remove_hook,
    shell_quote,
};
use ralph_core::hook::host::Host;
use ralph_fs::safe_fs::{self, FsError};
use ralph_state::storage::environment::Environment;

/// Why an install or uninstall changed nothing, or stopped half way.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("Claude Code needs no install: load ralph as a plugin (see README.md)")]
    ClaudeNeedsNone,
    #[error("HOME is not set")]
    NoHome,
    #[error(
        "{} is not inside a git repository of yours (no .git at or above it, below your home folder, in folders you own); run `ralph install --project` in the repository",
        .0.display()
    )]
    NotInGit(PathBuf),
    #[error("could not find this ralph binary's path ({0}); pass --command")]
    NoExe(io::Error),
    #[error("this ralph binary's path is not UTF-8; pass --command")]
    ExeNotUtf8,
    #[error("{}: {why}; nothing was changed", .path.display())]
    Settings { path: PathBuf, why: String },
    /// A project's file or folder refused by the safe file layer.
    #[error("{0}; nothing was changed")]
    Unsafe(FsError),
    #[error("{} is not a regular file; ralph leaves it alone (nothing was changed)", .0.display())]
    NotRegular(PathBuf),
    #[error("could not {action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// Claude Code's "install" is a usage error; the rest fail.
impl ralph_fs::error::Exit for InstallError {
    fn exit_class(&self) -> ralph_fs::error::ExitClass {
        match self {
            Self::ClaudeNeedsNone => ralph_fs::error::ExitClass::Usage,
            _ => ralph_fs::error::ExitClass::Failure,
        }
    }
}

fn io_error<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Adds ralph's hook (with `command`, else this binary's own) to `host`'s
/// settings, user-wide or in the current git root (`project`).
pub fn install(
    host: Host,
    project: bool,
    command: Option<String>,
    tell: &mut dyn FnMut(String),
) -> Result<(), InstallError> {
    let plan = Plan::new(host, project)?;
    let command = match command {
        Some(c) => c,
        None => default_command(plan.host)?,
    };
    // A repository's .github/hooks/*.json file carries its format version.
    let version = plan.host == Host::Copilot && plan.project;
    let changed = edit_settings(&plan, |text| add_hook(text, plan.host, &command, version))?;
    tell(report(
        &plan.settings,
        changed,
        "added ralph's hook to",
        "ralph's hook is already in",
    ));
    if let Some((path, text)) = &plan.command_file {
        let same = read_regular(path, plan.project)?.as_deref() == Some(text.as_str());
        if !same {
            write_file(&plan, path, text)?;
        }
        tell(report(path, !same, "wrote", "unchanged:"));
    }
    for note in plan.notes() {
        tell(note.to_owned());
    }
    if let Some(other) = plan.other_scope()
        && read_regular(&other.settings, other.project)
            .ok()
            .flatten()
            .is_some_and(|t| has_hook(&t, plan.host))
    {
        let (there, flag) = if other.project {
            ("this project", " --project")
        } else {
            ("your user", "")
        };
        tell(format!(
            "warning: ralph's hook is also installed for {there} in {}: both hooks would count every turn. Keep one: `ralph uninstall {}{flag}` removes that one.",
            other.settings.display(),
            plan.host.name()
        ));
    }
    Ok(())
}

/// Takes ralph's hook (and the command file, if as ralph wrote it) out of
/// `host`'s settings again.
pub fn uninstall(
    host: Host,
    project: bool,
    tell: &mut dyn FnMut(String),
) -> Result<(), InstallError> {
    let plan = Plan::new(host, project)?;
    let changed = if read_regular(&plan.settings, plan.project)?.is_some() {
        edit_settings(&plan, |text| remove_hook(text, plan.host))?
    } else {
        false
    };
    // A settings file left as ralph created it (`{}`), or a repository's
    // .github/hooks/ralph.json holding nothing but its version, was ralph's
    // own: it goes, with the folders it leaves empty.
    if changed && let Some(left) = read_regular(&plan.settings, plan.project)? {
        let only_version = plan.host == Host::Copilot
            && plan.project
            && ralph_state::json_edit::parse(&left)
                .is_ok_and(|doc| doc.members().iter().all(|m| m.key == "version"));
        if left == EMPTY_SETTINGS || only_version {
            remove_file(&plan.settings)?;
            plan.remove_empty_folders(&plan.settings);
        }
    }
    tell(report(
        &plan.settings,
        changed,
        "removed ralph's hook from",
        "no ralph hook in",
    ));
    if let Some((path, text)) = &plan.command_file {
        // Only a file exactly as ralph wrote it is removed.
        match read_regular(path, plan.project)? {
            Some(current) if &current == text => {
                remove_file(path)?;
                plan.remove_empty_folders(path);
                tell(format!("removed {}", path.display()));
            }
            Some(_) => tell(format!(
                "kept {} (it was changed since ralph wrote it)",
                path.display()
            )),
            None => {}
        }
    }
    Ok(())
}

fn remove_file(path: &Path) -> Result<(), InstallError> {
    fs::remove_file(path).map_err(io_error("remove", path))
}

/// The git root `ralph install --project` writes into: the nearest folder
/// with `.git` at or above the current folder, found by the walk that finds
/// the project (never at or above the home folder or a folder the user does
/// not own).
fn git_root() -> Result<PathBuf, InstallError> {
    let ctx = Environment::from_env();
    let cwd = ctx
        .process_cwd
        .clone()
        .unwrap_or_else(|| PathBuf::from("."));
    ralph_state::storage::store::git_root(&cwd, ctx.home.as_deref())
        .ok_or(InstallError::NotInGit(cwd))
}

/// Where one host keeps its hooks and commands, user-wide or per project.
struct Plan {
    host: Host,
    project: bool,
    /// The folder everything below is in: the project's root, or the
    /// host's own folder in the home directory; never removed.
    base: PathBuf,
    settings: PathBuf,
    command_file: Option<(PathBuf, String)>,
}

impl Plan {
    fn new(host: Host, project: bool) -> Result<Self, InstallError> {
        let home = |var: &str, sub: &str| -> Result<PathBuf, InstallError> {
            if let Some(dir) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                return Ok(PathBuf::from(dir));
            }
            // HOME, or %USERPROFILE% on Windows outside Git Bash.
            let home =
                ralph_state::storage::registry::home_from_env().ok_or(InstallError::NoHome)?;
            Ok(home.join(sub))
        };
        let root = if project { git_root()? } else { PathBuf::new() };
        let (settings, command_file) = match (host, project) {
            (Host::Claude, _) => return Err(InstallError::ClaudeNeedsNone),
            (Host::Codex, false) => {
                let dir = home("CODEX_HOME", ".codex")?;
                (
                    dir.join("hooks.json"),
                    Some(dir.join("skills/ralph-loop/SKILL.md")),
                )
            }
            (Host::Codex, true) => (
                root.join(".codex/hooks.json"),
                Some(root.join(".agents/skills/ralph-loop/SKILL.md")),
            ),
            (Host::Gemini, false) => {
                let dir = home("GEMINI_CLI_HOME", "")?.join(".gemini");
                (
                    dir.join("settings.json"),
                    Some(dir.join("commands/ralph-loop.toml")),
                )
            }
            (Host::Gemini, true) => (
                root.join(".gemini/settings.json"),
                Some(root.join(".gemini/commands/ralph-loop.toml")),
            ),
            (Host::Copilot, false) => (
                home("COPILOT_HOME", ".copilot")?.join("settings.json"),
                None,
            ),
            (Host::Copilot, true) => (root.join(".github/hooks/ralph.json"), None),
        };
        let command_file = command_file.map(|p| {
            let text = match host {
                Host::Codex => CODEX_SKILL,
                _ => GEMINI_COMMAND,
            };
            (p, text.to_owned())
        });
        // For the user: the folder that holds the host's own (`~` for
        // `~/.codex`), so that a host folder the install created goes too.
        let base = if project {
            root
        } else {
            settings
                .ancestors()
                .nth(2)
                .map(Path::to_owned)
                .unwrap_or_default()
        };
        Ok(Self {
            host,
            project,
            base,
            settings,
            command_file,
        })
    }

    /// The same host's plan in the other scope (user ↔ project).
    fn other_scope(&self) -> Option<Self> {
        Self::new(self.host, !self.project).ok()
    }

    /// Removes the folders above `path` that are now empty, up to `base`
    /// (an install created them; a folder with anything in it stays).
    fn remove_empty_folders(&self, path: &Path) {
        for dir in path.ancestors().skip(1) {
            if dir == self.base || !dir.starts_with(&self.base) || fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }

    /// The folder a file goes in, made sure of: in a project, one
    /// component at a time and never through a link (`safe_fs`).
    fn ensure_parent(&self, path: &Path) -> Result<(), InstallError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        if self.project
            && let Ok(rel) = dir.strip_prefix(&self.base)
        {
            if !rel.as_os_str().is_empty() {
                safe_fs::ensure_dir(&self.base, rel).map_err(InstallError::Unsafe)?;
            }
            return Ok(());
        }
        fs::create_dir_all(dir).map_err(io_error("create", dir))
    }

    fn notes(&self) -> Vec<&'static str> {
        match self.host {
            Host::Codex => vec![
                "note: Codex runs a hook only once you trust it: open /hooks in Codex and approve ralph's.",
                "Arm a loop from Codex with $ralph-loop TASK --completion-promise DONE, or `ralph start` in a shell.",
            ],
            Host::Gemini => vec![
                "note: Gemini runs project hooks only in trusted folders.",
                "Arm a loop from Gemini with /ralph-loop TASK --completion-promise DONE [--fresh-context].",
            ],
            Host::Copilot => vec![
                "note: Copilot loads a repository's hooks only once the folder is trusted.",
                "Arm a loop by asking Copilot to run `ralph start --completion-promise DONE TASK` (it passes COPILOT_AGENT_SESSION_ID), or run it yourself.",
            ],
            Host::Claude => vec![],
        }
    }
}

/// `'<absolute path of this binary>' hook stop --host NAME`.
fn default_command(host: Host) -> Result<String, InstallError> {
    let exe = std::env::current_exe().map_err(InstallError::NoExe)?;
    let exe = exe.to_str().ok_or(InstallError::ExeNotUtf8)?;
    Ok(format!("{} {}", shell_quote(exe), hook_args(host)))
}

/// Reads a settings file (missing: empty), applies `change` to its text,
/// and writes it back only when something changed.
fn edit_settings(
    plan: &Plan,
    change: impl FnOnce(&str) -> Result<Option<String>, String>,
) -> Result<bool, InstallError> {
    let path = &plan.settings;
    let text = read_regular(path, plan.project)?.unwrap_or_default();
    let Some(updated) = change(&text).map_err(|why| InstallError::Settings {
        path: path.clone(),
        why,
    })?
    else {
        return Ok(false);
    };
    write_file(plan, path, &updated)?;
    Ok(true)
}

/// Writes a file of the plan: in a project through `safe_fs` (folders
/// checked, an exclusive temp file, a rename; a link there is refused),
/// for the user through [`write_atomic`].
fn write_file(plan: &Plan, path: &Path, text: &str) -> Result<(), InstallError> {
    plan.ensure_parent(path)?;
    if plan.project {
        return safe_fs::replace(path, text.as_bytes()).map_err(InstallError::Unsafe);
    }
    write_atomic(path, text)
}

/// The file's text, `None` when it does not exist. In a project (whose files
/// a stranger may have written) a symlink or special file is refused.
fn read_regular(path: &Path, project: bool) -> Result<Option<String>, InstallError> {
    if project {
        // A project's file may be a stranger's: read through the safe layer
        // (no link followed, nothing but a regular file opened, capped), so
        // nothing can be swapped in between a check and the read.
        return match safe_fs::read_text(path, safe_fs::SMALL_FILE_CAP) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(InstallError::Unsafe(e)),
        };
    }
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error("read", path)(e)),
    };
    // The user's own file: a link to their settings is followed.
    let ok = meta.is_file() || (meta.file_type().is_symlink() && path.is_file());
    if !ok {
        return Err(InstallError::NotRegular(path.to_owned()));
    }
    fs::read_to_string(path)
        .map(Some)
        .map_err(io_error("read", path))
}

/// Writes through a new file beside the target (created exclusively) and a
/// rename, so a reader never sees half a file. A user's symlinked settings
/// file is written through to its target.
fn write_atomic(path: &Path, text: &str) -> Result<(), InstallError> {
    let target = if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        fs::canonicalize(path).map_err(io_error("resolve", path))?
    } else {
        path.to_owned()
    };
    let dir = target.parent().unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file");
    let temp = dir.join(format!(".{name}.ralph-{}.tmp", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(io_error("create", &temp))?;
    if let Ok(meta) = fs::metadata(&target) {
        let _ = file.set_permissions(meta.permissions());
    }
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all());
    if let Err(e) = written.and_then(|()| fs::rename(&temp, &target)) {
        let _ = fs::remove_file(&temp);
        return Err(io_error("write", &target)(e));
    }
    Ok(())
}

fn report(path: &Path, changed: bool, did: &str, same: &str) -> String {
    if changed {
        format!("{did} {}", path.display())
    } else {
        format!("{same} {}", path.display())
    }
}
