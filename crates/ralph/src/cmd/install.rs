//! `ralph install | uninstall codex|gemini|copilot [--project]`: add ralph's
//! turn-end hook (and a `ralph-loop` command or skill) to a host's
//! configuration, or take exactly that out again.
//!
//! JSON settings are edited as data: ralph's own entry is recognised by its
//! command (`… hook stop --host NAME`), every other key and hook is kept.
//! Files are replaced atomically (a new file beside them, then a rename).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use ralph_core::hook::host::Host;
use ralph_core::hook::host_install::{
    CODEX_SKILL, GEMINI_COMMAND, add_hook, hook_args, remove_hook, shell_quote,
};
use serde_json::{Map, Value};

use super::{Failure, Outcome};
use crate::cli::InstallArgs;

pub fn install(args: InstallArgs) -> Outcome {
    let plan = Plan::new(&args)?;
    let command = match args.command {
        Some(c) => c,
        None => default_command(plan.host)?,
    };
    let changed = edit_json(&plan.settings, plan.project, |root| {
        // A repository's .github/hooks/*.json file carries its format version.
        if plan.host == Host::Copilot && plan.project && !root.contains_key("version") {
            root.insert("version".into(), serde_json::json!(1));
        }
        add_hook(root, plan.host, &command)
    })?;
    report(
        &plan.settings,
        changed,
        "added ralph's hook to",
        "ralph's hook is already in",
    );
    if let Some((path, text)) = &plan.command_file {
        let same = read_regular(path, plan.project)?.as_deref() == Some(text.as_str());
        if !same {
            write_atomic(path, text, plan.project)?;
        }
        report(path, !same, "wrote", "unchanged:");
    }
    for note in plan.notes() {
        say!("{note}");
    }
    Ok(())
}

pub fn uninstall(args: InstallArgs) -> Outcome {
    let plan = Plan::new(&args)?;
    let changed = if read_regular(&plan.settings, plan.project)?.is_some() {
        edit_json(&plan.settings, plan.project, |root| {
            remove_hook(root, plan.host)
        })?
    } else {
        false
    };
    // A repository's .github/hooks/ralph.json is ralph's own file: once it holds
    // nothing but its version, it goes.
    if plan.host == Host::Copilot && plan.project {
        let left = read_regular(&plan.settings, true)?
            .and_then(|t| serde_json::from_str::<Value>(&t).ok());
        if left.is_some_and(|v| {
            v.as_object()
                .is_some_and(|o| o.keys().all(|k| k == "version"))
        }) {
            fs::remove_file(&plan.settings)
                .map_err(|e| format!("could not remove {}: {e}", plan.settings.display()))?;
        }
    }
    report(
        &plan.settings,
        changed,
        "removed ralph's hook from",
        "no ralph hook in",
    );
    if let Some((path, text)) = &plan.command_file {
        // Only a file exactly as ralph wrote it is removed.
        match read_regular(path, plan.project)? {
            Some(current) if &current == text => {
                fs::remove_file(path)
                    .map_err(|e| format!("could not remove {}: {e}", path.display()))?;
                if let Some(dir) = path.parent().filter(|_| plan.host == Host::Codex) {
                    let _ = fs::remove_dir(dir);
                }
                say!("removed {}", path.display());
            }
            Some(_) => say!(
                "kept {} (it was changed since ralph wrote it)",
                path.display()
            ),
            None => {}
        }
    }
    Ok(())
}

/// Where one host keeps its hooks and commands, user-wide or per project.
struct Plan {
    host: Host,
    project: bool,
    settings: PathBuf,
    command_file: Option<(PathBuf, String)>,
}

impl Plan {
    fn new(args: &InstallArgs) -> Result<Self, Failure> {
        let host = args.host;
        let home = |var: &str, sub: &str| -> Result<PathBuf, Failure> {
            if let Some(dir) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                return Ok(PathBuf::from(dir));
            }
            // HOME, or %USERPROFILE% on Windows outside Git Bash.
            let home = ralph_core::loop_file::registry::home_from_env()
                .ok_or_else(|| Failure::from("HOME is not set".to_owned()))?;
            Ok(home.join(sub))
        };
        let root = super::project().root;
        let (settings, command_file) = match (host, args.project) {
            (Host::Claude, _) => {
                return Err(Failure::usage(
                    "Claude Code needs no install: load ralph as a plugin (see README.md)",
                ));
            }
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
        Ok(Self {
            host,
            project: args.project,
            settings,
            command_file,
        })
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
fn default_command(host: Host) -> Result<String, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("could not find this ralph binary's path ({e}); pass --command"))?;
    let exe = exe.to_str().ok_or_else(|| {
        Failure::from("this ralph binary's path is not UTF-8; pass --command".to_owned())
    })?;
    Ok(format!("{} {}", shell_quote(exe), hook_args(host)))
}

/// Reads a JSON object file (missing: empty), applies `change`, and writes
/// it back only when something changed.
fn edit_json(
    path: &Path,
    project: bool,
    change: impl FnOnce(&mut Map<String, Value>) -> Result<bool, String>,
) -> Result<bool, Failure> {
    let mut root = match read_regular(path, project)? {
        None => Map::new(),
        Some(text) if text.trim().is_empty() => Map::new(),
        Some(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => {
                return Err(format!(
                    "{}: expected a JSON object; nothing was changed",
                    path.display()
                )
                .into());
            }
            Err(e) => {
                return Err(format!(
                    "{}: not valid JSON ({e}); fix it first (nothing was changed)",
                    path.display()
                )
                .into());
            }
        },
    };
    let changed =
        change(&mut root).map_err(|e| format!("{}: {e}; nothing was changed", path.display()))?;
    if changed {
        let text = serde_json::to_string_pretty(&Value::Object(root))?;
        write_atomic(path, &format!("{text}\n"), project)?;
    }
    Ok(changed)
}

/// The file's text, `None` when it does not exist. In a project (whose files
/// a stranger may have written) a symlink or special file is refused.
fn read_regular(path: &Path, project: bool) -> Result<Option<String>, Failure> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("could not read {}: {e}", path.display()).into()),
    };
    let ok = meta.is_file() || (!project && meta.file_type().is_symlink() && path.is_file());
    if !ok {
        return Err(format!(
            "{} is not a regular file; ralph leaves it alone (nothing was changed)",
            path.display()
        )
        .into());
    }
    fs::read_to_string(path)
        .map(Some)
        .map_err(|e| format!("could not read {}: {e}", path.display()).into())
}

/// Writes through a new file beside the target (created exclusively) and a
/// rename, so a reader never sees half a file. A user's symlinked settings
/// file is written through to its target.
fn write_atomic(path: &Path, text: &str, project: bool) -> Result<(), Failure> {
    let target = if !project && fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
    {
        fs::canonicalize(path).map_err(|e| format!("could not resolve {}: {e}", path.display()))?
    } else {
        path.to_owned()
    };
    let dir = target.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file");
    let temp = dir.join(format!(".{name}.ralph-{}.tmp", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|e| format!("could not create {}: {e}", temp.display()))?;
    if let Ok(meta) = fs::metadata(&target) {
        let _ = file.set_permissions(meta.permissions());
    }
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all());
    if let Err(e) = written.and_then(|()| fs::rename(&temp, &target)) {
        let _ = fs::remove_file(&temp);
        return Err(format!("could not write {}: {e}", target.display()).into());
    }
    Ok(())
}

fn report(path: &Path, changed: bool, did: &str, same: &str) {
    if changed {
        say!("{did} {}", path.display());
    } else {
        say!("{same} {}", path.display());
    }
}
