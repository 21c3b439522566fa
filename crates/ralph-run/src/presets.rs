//! `ralph run --agent NAME`: the command line that runs each coding agent
//! once, unattended, with the prompt on stdin and its reply on stdout.
//!
//! Unattended means the agent does not stop to ask before running a tool;
//! each preset says what that lets it do, because that is the price of
//! leaving it alone (docs/hosts.md).

/// One agent's preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Preset {
    pub name: &'static str,
    /// Run by `sh -c` with the prompt on stdin.
    pub command: &'static str,
    /// What the flags allow, in one line for `--help` and the docs.
    pub allows: &'static str,
}

pub(crate) const PRESETS: [Preset; 4] = [
    Preset {
        name: "claude",
        command: "claude -p --output-format json --dangerously-skip-permissions",
        allows: "every tool (shell, file edits, web) without asking, inside and outside the project",
    },
    Preset {
        name: "codex",
        command: "codex exec --skip-git-repo-check --sandbox workspace-write",
        allows: "shell commands and edits without asking, inside Codex's sandbox: writes only in the project and temp folders, no network",
    },
    Preset {
        name: "gemini",
        command: "gemini --approval-mode=yolo -p \"$(cat)\"",
        allows: "every tool (shell, file edits, web) without asking (YOLO mode); the prompt is passed as one argument (at most 128 KiB)",
    },
    Preset {
        name: "copilot",
        command: "copilot --allow-all --no-auto-update --silent -p \"$(cat)\"",
        allows: "every tool, path and URL without asking (--allow-all); the prompt is passed as one argument (at most 128 KiB)",
    },
];

/// The command for `--agent VALUE`: a preset's when VALUE names one,
/// otherwise VALUE itself (any command that reads stdin and prints a reply).
pub fn resolve(agent: &str) -> String {
    PRESETS
        .iter()
        .find(|p| p.name == agent.trim())
        .map_or_else(|| agent.to_owned(), |p| p.command.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_and_commands_pass_through() {
        assert!(resolve("codex").starts_with("codex exec "));
        assert!(resolve(" gemini ").contains("--approval-mode=yolo"));
        assert_eq!(resolve("./my-agent.sh --x"), "./my-agent.sh --x");
        assert_eq!(resolve("claude -p"), "claude -p");
        for p in PRESETS {
            assert!(!p.allows.is_empty() && p.command.starts_with(p.name));
        }
    }
}

/// The default agent: Claude Code in print mode, one fresh session per iteration.
pub const DEFAULT_AGENT: &str = "claude -p --output-format json";

/// `--permission-mode` belongs to Claude Code in print mode: next to any
/// other agent (which sets its own permissions) it is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--permission-mode goes with the default agent (`{default}`); `{agent}` sets its own permissions: put the flag into the --agent command", default = DEFAULT_AGENT)]
pub struct PermissionModeError {
    pub agent: String,
}

/// What the user typed is wrong.
impl ralph_fs::error::Exit for PermissionModeError {
    fn exit_class(&self) -> ralph_fs::error::ExitClass {
        ralph_fs::error::ExitClass::Usage
    }
}

/// The agent's command line: a preset's (`--agent codex`), or the command
/// as given, with the chosen permission mode for the default agent.
pub fn command_line(
    agent: &str,
    permission_mode: Option<&str>,
) -> Result<String, PermissionModeError> {
    let resolved = resolve(agent);
    match permission_mode {
        None => Ok(resolved),
        Some(mode) if agent == DEFAULT_AGENT => Ok(format!("{resolved} --permission-mode {mode}")),
        Some(_) => Err(PermissionModeError {
            agent: agent.to_owned(),
        }),
    }
}
