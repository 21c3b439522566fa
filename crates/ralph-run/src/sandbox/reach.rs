//! What a sandboxed agent may reach, gathered once before it starts: the
//! project (written), its own settings (written), toolchains and the
//! folders on PATH (read), what inside the project it must not change
//! (`.git` as a whole, ralph's own folder), its own git folder, and ralph's
//! state folder (hidden wherever a bound folder would show it). The tools
//! (`bwrap.rs`, `seatbelt.rs`, `container.rs`) turn this into their own
//! words; deciding what goes where is pure ([`Reach::from_facts`]).

use std::path::{Path, PathBuf};

/// The agents' own settings and caches under HOME, written so that their
/// login keeps working: Claude Code, Codex, Gemini CLI, Copilot CLI.
pub(crate) const AGENT_SETTINGS: &[&str] = &[
    ".claude",
    ".claude.json",
    ".cache/claude",
    ".cache/claude-cli-nodejs",
    ".codex",
    ".gemini",
    ".copilot",
    ".npm",
];

/// Toolchains under HOME, read only: compilers, package managers and the
/// agents' own installs (Claude Code's native installer uses `.local/share/claude`).
pub const TOOLCHAINS: &[&str] = &[
    ".cargo",
    ".rustup",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".pyenv",
    ".local/bin",
    ".local/share/claude",
    "go",
    ".sdkman",
];

/// Linux's system folders, read only (a missing one is skipped; one that
/// is a link, as `/bin` often is, is made the same link): the same as the
/// gate's sandbox shows.
pub use ralph_fs::gate_jail::SYSTEM;

/// A system folder as it is on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemDir {
    pub path: PathBuf,
    /// Where it points, when it is a symbolic link (`/bin` → `usr/bin`).
    pub link: Option<PathBuf>,
}

/// Everything the tools need to confine one agent run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reach {
    /// The project's root (for `--parallel`: the story's worktree), written.
    pub project: PathBuf,
    pub home: PathBuf,
    /// Linux's system folders.
    pub system: Vec<SystemDir>,
    /// Read only: toolchains, PATH's folders, the agent program's folder.
    pub read_only: Vec<PathBuf>,
    /// Written: the agents' settings and caches that exist, and for a
    /// fleet's worktree the parts of the main repository git writes.
    pub writable: Vec<PathBuf>,
    /// Inside a written folder, kept read only: the project's `.git` whole
    /// (a folder, or a fleet worktree's `.git` file), `.claude/`. Each is a
    /// mount point, which the agent can neither rename nor replace.
    pub kept: Vec<PathBuf>,
    /// The agent's own git folder ([`super::agent_git`]), written, and
    /// named to its git as `GIT_DIR`.
    pub agent_git: Option<PathBuf>,
    /// ralph's state folder: never shown, even inside a bound folder.
    pub hidden: Vec<PathBuf>,
    /// Temporary folders, fresh and empty for the agent (`/tmp`, `$TMPDIR`).
    pub temp: Vec<PathBuf>,
}

/// What the machine says, read at the edge ([`Reach::gather`]) or given by a test.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReachFacts {
    pub project: PathBuf,
    pub home: PathBuf,
    pub state_dir: Option<PathBuf>,
    /// PATH's entries, in order.
    pub path: Vec<PathBuf>,
    pub tmpdir: Option<PathBuf>,
    /// The agent program's own folder (its canonical path's parent).
    pub program_dir: Option<PathBuf>,
    /// Which of these exist (as anything): only those are bound.
    pub existing: Vec<PathBuf>,
    pub system: Vec<SystemDir>,
    /// A fleet worktree's main repository (`.git`, read whole so git sees
    /// its configuration and refs), the folders there git writes, and the
    /// files there kept read only.
    pub worktree_git_read: Vec<PathBuf>,
    pub worktree_git: Vec<PathBuf>,
    pub worktree_git_kept: Vec<PathBuf>,
    /// `--holdout`'s folder (canonical): held-out checks the agent must
    /// never read, hidden wherever a bound folder would show them.
    pub held_out: Vec<PathBuf>,
}

/// Whether `dir` is `other` or a folder above it.
fn covers(dir: &Path, other: &Path) -> bool {
    other.starts_with(dir)
}

impl Reach {
    /// Decides what is bound how (pure).
    pub(crate) fn from_facts(facts: &ReachFacts) -> Self {
        let exists = |p: &Path| facts.existing.iter().any(|e| e == p);
        let home = &facts.home;
        let state = facts.state_dir.as_deref();
        // A folder that would show HOME or the state folder whole is never bound.
        let too_wide = |p: &Path| {
            !p.is_absolute()
                || p.parent().is_none()
                || covers(p, home)
                || state.is_some_and(|s| covers(p, s) || covers(s, p))
        };
        let mut read_only: Vec<PathBuf> = TOOLCHAINS.iter().map(|t| home.join(t)).collect();
        read_only.extend(facts.path.iter().cloned());
        read_only.extend(facts.program_dir.iter().cloned());
        let mut seen = Vec::new();
        read_only.retain(|p| {
            let keep = exists(p)
                && !too_wide(p)
                && !facts.system.iter().any(|s| covers(&s.path, p))
                && !seen.contains(p);
            seen.push(p.clone());
            keep
        });
        read_only.extend(facts.worktree_git_read.iter().cloned());
        let mut writable: Vec<PathBuf> = AGENT_SETTINGS
            .iter()
            .map(|s| home.join(s))
            .filter(|p| exists(p))
            .collect();
        writable.extend(facts.worktree_git.iter().cloned());
        let project = &facts.project;
        let mut kept: Vec<PathBuf> = [".git", ".claude"]
            .iter()
            .map(|k| project.join(k))
            .filter(|p| exists(p))
            .collect();
        kept.extend(facts.worktree_git_kept.iter().cloned());
        let bound = |s: &Path| {
            covers(project, s)
                || read_only.iter().chain(&writable).any(|b| covers(b, s))
                || facts.system.iter().any(|d| covers(&d.path, s))
        };
        let hidden = state
            .filter(|s| exists(s) && bound(s))
            .map(Path::to_path_buf)
            .into_iter()
            .chain(facts.held_out.iter().filter(|h| bound(h)).cloned())
            .collect();
        let mut temp = vec![PathBuf::from("/tmp")];
        temp.extend(
            facts
                .tmpdir
                .iter()
                .filter(|t| t.is_absolute() && !covers(t, project) && !covers(project, t))
                .filter(|t| t.as_path() != Path::new("/tmp") && !too_wide(t))
                .cloned(),
        );
        Self {
            project: project.clone(),
            home: home.clone(),
            system: facts.system.clone(),
            read_only,
            writable,
            kept,
            hidden,
            temp,
            agent_git: None,
        }
    }
}

impl Reach {
    /// The folders bound, in words, for a user whose agent could not run:
    /// `the project /p (written), /usr, /bin (system, read only), …`.
    pub(crate) fn bound_words(&self) -> String {
        let list = |paths: &mut dyn Iterator<Item = &PathBuf>| {
            paths
                .map(|p| ralph_fs::display::line(&p.to_string_lossy()).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = vec![format!(
            "the project {} (written)",
            ralph_fs::display::line(&self.project.to_string_lossy())
        )];
        if !self.system.is_empty() {
            parts.push(format!(
                "{} (system, read only)",
                list(&mut self.system.iter().map(|s| &s.path))
            ));
        }
        if !self.read_only.is_empty() {
            parts.push(format!("{} (read only)", list(&mut self.read_only.iter())));
        }
        if !self.writable.is_empty() {
            parts.push(format!("{} (written)", list(&mut self.writable.iter())));
        }
        parts.push(format!("{} (empty)", list(&mut self.temp.iter())));
        parts.join("; ")
    }
}

/// What git needs of the main repository for a fleet story's worktree
/// (`<main>/.ralph/worktrees/<id>`): its `.git` read (the agent's own git
/// folder borrows its objects); nothing there is written, the agent's
/// commits are imported like a single loop's ([`super::agent_git`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WorktreeGit {
    /// `<main>/.git`, read only (its configuration, hooks and refs).
    pub read: Vec<PathBuf>,
    /// Written: the worktree's own git folder, the objects, the `ralph/`
    /// branches and their logs.
    pub write: Vec<PathBuf>,
    /// The files that tell git where those are, kept read only.
    pub kept: Vec<PathBuf>,
}

/// [`WorktreeGit`] for `root`; empty when `root` is not such a worktree or
/// its `.git` file points anywhere else.
pub(crate) fn worktree_git(root: &Path) -> WorktreeGit {
    let none = WorktreeGit::default();
    let Some(main) = fleet_main(root) else {
        return none;
    };
    let common = main.join(".git");
    let is_dir = |p: &Path| ralph_fs::safe_fs::kind_at(p).is_some_and(|k| k.is_dir());
    if !is_dir(&common) {
        return none;
    }
    let Some(gitdir) = gitdir_of(root) else {
        return none;
    };
    let (Ok(gitdir), Ok(worktrees)) = (
        std::fs::canonicalize(&gitdir),
        std::fs::canonicalize(common.join("worktrees")),
    ) else {
        return none;
    };
    if gitdir.parent() != Some(worktrees.as_path()) || !is_dir(&gitdir) {
        return none;
    }
    WorktreeGit {
        read: vec![common],
        write: Vec::new(),
        kept: Vec::new(),
    }
}

/// `<main>` when `root` is `<main>/.ralph/worktrees/<id>`.
fn fleet_main(root: &Path) -> Option<PathBuf> {
    let worktrees = root.parent()?;
    let dot_ralph = worktrees.parent()?;
    (worktrees.file_name()? == "worktrees" && dot_ralph.file_name()? == ".ralph")
        .then(|| dot_ralph.parent().map(Path::to_path_buf))
        .flatten()
}

/// The `gitdir:` a worktree's `.git` file names (a regular file, read
/// without following a link, at most 4 KiB).
fn gitdir_of(root: &Path) -> Option<PathBuf> {
    let text = ralph_fs::safe_fs::read_text(&root.join(".git"), 4096).ok()?;
    let dir = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let dir = PathBuf::from(dir);
    Some(if dir.is_absolute() {
        dir
    } else {
        root.join(dir)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> ReachFacts {
        let p = PathBuf::from;
        ReachFacts {
            project: p("/home/u/proj"),
            home: p("/home/u"),
            state_dir: Some(p("/home/u/.local/state/ralph")),
            path: vec![
                p("/home/u/.cargo/bin"),
                p("/usr/bin"),
                p("/home/u/bin"),
                p("/home"),
                p("/"),
                p("relative/bin"),
                p("/home/u/.local/state"),
                p("/opt/tools/bin"),
            ],
            tmpdir: Some(p("/var/tmp/me")),
            program_dir: Some(p("/home/u/.local/share/claude/versions")),
            existing: [
                "/home/u/.cargo",
                "/home/u/.cargo/bin",
                "/home/u/bin",
                "/home",
                "/",
                "/home/u/.local/state",
                "/home/u/.local/state/ralph",
                "/home/u/.local/share/claude/versions",
                "/home/u/.claude",
                "/home/u/.claude.json",
                "/home/u/proj/.git",
                "/opt/tools/bin",
            ]
            .iter()
            .map(PathBuf::from)
            .collect(),
            system: vec![SystemDir {
                path: p("/usr"),
                link: None,
            }],
            ..ReachFacts::default()
        }
    }

    #[test]
    #[cfg(unix)]
    fn a_held_out_set_is_hidden_where_a_bound_folder_would_show_it() {
        let mut f = facts();
        f.held_out = vec![
            PathBuf::from("/opt/tools/bin/acceptance"),
            PathBuf::from("/home/u/acceptance"),
        ];
        let reach = Reach::from_facts(&f);
        assert!(
            reach
                .hidden
                .contains(&PathBuf::from("/opt/tools/bin/acceptance"))
        );
        // Not bound at all: nothing to hide, the agent cannot see it anyway.
        assert!(!reach.hidden.contains(&PathBuf::from("/home/u/acceptance")));
    }

    #[test]
    #[cfg(unix)] // Unix paths: on Windows `/home/u` is not absolute (and no sandbox runs there)
    fn home_root_and_the_state_folder_are_never_bound_whole() {
        let reach = Reach::from_facts(&facts());
        let shown: Vec<String> = reach
            .read_only
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            shown,
            [
                "/home/u/.cargo",
                "/home/u/.cargo/bin",
                "/home/u/bin",
                "/opt/tools/bin",
                "/home/u/.local/share/claude/versions"
            ]
        );
        assert_eq!(
            reach.writable,
            [
                PathBuf::from("/home/u/.claude"),
                PathBuf::from("/home/u/.claude.json")
            ]
        );
        assert_eq!(reach.kept, [PathBuf::from("/home/u/proj/.git")]);
        // The state folder is under HOME, which is not shown: nothing to hide.
        assert!(reach.hidden.is_empty());
        assert_eq!(
            reach.temp,
            [PathBuf::from("/tmp"), PathBuf::from("/var/tmp/me")]
        );
    }

    #[test]
    fn a_state_folder_inside_a_bound_folder_is_hidden() {
        let mut f = facts();
        f.state_dir = Some(PathBuf::from("/opt/tools/bin/state"));
        f.existing.push(PathBuf::from("/opt/tools/bin/state"));
        let reach = Reach::from_facts(&f);
        assert!(!reach.read_only.contains(&PathBuf::from("/opt/tools/bin")));
        let mut f = facts();
        f.state_dir = Some(PathBuf::from("/home/u/proj/state"));
        f.existing.push(PathBuf::from("/home/u/proj/state"));
        assert_eq!(
            Reach::from_facts(&f).hidden,
            [PathBuf::from("/home/u/proj/state")]
        );
    }

    #[test]
    fn only_a_fleet_worktree_whose_git_file_points_into_the_main_repository_gets_git_folders() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().canonicalize().unwrap();
        let tree = main.join(".ralph/worktrees/s1");
        let gitdir = main.join(".git/worktrees/s1");
        for d in [&tree, &gitdir, &main.join(".git/objects")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(gitdir.join("commondir"), "../..\n").unwrap();
        std::fs::write(tree.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
        let git = worktree_git(&tree);
        assert_eq!(git.read, [main.join(".git")]);
        assert!(git.write.is_empty() && git.kept.is_empty());
        // A planted `.git` file that points at another folder gets nothing.
        std::fs::create_dir_all(main.join("elsewhere")).unwrap();
        std::fs::write(
            tree.join(".git"),
            format!("gitdir: {}\n", main.join("elsewhere").display()),
        )
        .unwrap();
        assert_eq!(worktree_git(&tree), WorktreeGit::default());
        assert_eq!(worktree_git(&main), WorktreeGit::default());
    }
}
