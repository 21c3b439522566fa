//! The CLI's surroundings, as the hook sees them: the project, the git
//! root, the registry of armed loops and the session running the command.

use std::path::PathBuf;

use ralph_state::storage::store::Project;

use crate::exit::Failure;

/// The project the CLI works on, by the hook's own rule (so `ralph start`
/// arms exactly where the hook will look), falling back to the git root or
/// the current folder when no `.claude/` exists yet.
pub(crate) fn project() -> Project {
    let ctx = ralph_state::storage::environment::Environment::from_env();
    if let Some(p) = ctx.locate(None) {
        return p;
    }
    let cwd = ctx
        .process_cwd
        .clone()
        .unwrap_or_else(|| PathBuf::from("."));
    let git_root = ralph_state::storage::store::git_root(&cwd, ctx.home.as_deref());
    Project {
        root: git_root.unwrap_or(cwd),
    }
}

/// The per-user record of armed loops (`$XDG_STATE_HOME/ralph`), by the hook's own rule.
pub(crate) fn registry() -> Option<ralph_state::storage::registry::Registry> {
    ralph_state::storage::environment::Environment::from_env().registry()
}

/// The registry, for commands that arm or adopt a loop and so must record it.
pub(crate) fn require_registry() -> Result<ralph_state::storage::registry::Registry, Failure> {
    registry().ok_or_else(|| ralph_state::storage::registry::RegistryError::NoHome.into())
}

/// The session of the agent that runs this command: the first session
/// variable a host sets for its shell commands (Claude Code, Codex, Gemini).
pub(crate) fn session_from_env() -> Option<String> {
    ralph_core::hook::host::Host::ALL
        .iter()
        .filter_map(|h| h.session_variable())
        .find_map(|var| std::env::var(var).ok().filter(|s| !s.trim().is_empty()))
}

/// A path as the CLI shows it: relative to the project when under it.
pub(crate) fn display(project: &Project, path: &std::path::Path) -> String {
    project.shown(path)
}
