//! What ralph takes from its environment (the project's directory, HOME,
//! the per-user state directory, the block cap, the time), gathered once by
//! the caller: the hooks and every CLI command work from it.

use std::path::{Path, PathBuf};

use crate::storage::registry::{self, Registry};
use crate::storage::store::{self, Project};
use crate::time::Timestamp;

/// What the hooks and the CLI take from their environment.
#[derive(Debug, Clone)]
pub struct Environment {
    pub project_dir: Option<PathBuf>,
    pub process_cwd: Option<PathBuf>,
    pub home: Option<PathBuf>,
    /// `XDG_STATE_HOME`: with `home`, where the record of armed loops is.
    pub state_home: Option<PathBuf>,
    /// `CLAUDE_CODE_STOP_HOOK_BLOCK_CAP` (default 8; 0 disables the cap).
    pub block_cap: u64,
    pub now: Timestamp,
    /// Who sends a loop's last word when a stop ends it (the binary names
    /// `ralph_notify::send`); `None`: each notification is logged as not sent.
    pub courier: Option<crate::fields::notice::Courier>,
}

/// Claude Code's default consecutive-block cap.
pub(crate) const DEFAULT_BLOCK_CAP: u64 = 8;

impl Environment {
    pub fn from_env() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Self {
            project_dir: var("CLAUDE_PROJECT_DIR"),
            process_cwd: std::env::current_dir().ok(),
            home: crate::storage::registry::home_from_env(),
            state_home: var("XDG_STATE_HOME"),
            block_cap: std::env::var("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_BLOCK_CAP),
            now: Timestamp::now(),
            courier: None,
        }
    }

    pub fn locate(&self, session_cwd: Option<&Path>) -> Option<Project> {
        let starts: Vec<&Path> = session_cwd
            .into_iter()
            .chain(self.process_cwd.as_deref())
            .collect();
        let project =
            store::locate_project(self.project_dir.as_deref(), &starts, self.home.as_deref())?;
        // The agent writes the project: no program of ralph's comes from it,
        // whatever PATH says (`node_modules/.bin/git`).
        ralph_fs::process::distrust(&project.root);
        Some(project)
    }

    /// The per-user record of armed loops, if HOME or XDG_STATE_HOME names it.
    pub fn registry(&self) -> Option<Registry> {
        registry::locate(self.state_home.as_deref(), self.home.as_deref())
    }
}
