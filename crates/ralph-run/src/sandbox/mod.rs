//! `ralph run --sandbox`: each agent process runs confined by a real tool,
//! found in PATH's absolute folders when the agent starts: bubblewrap on
//! Linux, `sandbox-exec` on macOS, or a container engine (Docker, Podman)
//! when the loop names an image. None to be had is an error that says what
//! to install: a sandboxed loop's agent never runs unconfined. What it may
//! reach is gathered in `reach.rs`; each tool's words are its own file. The
//! gate (`--verify`, `--check`, story commands) is not here: it runs in a
//! sandbox of its own, `ralph_fs::gate_jail`.

pub(crate) mod agent_git;
pub mod bwrap;
pub mod container;
pub mod nested_git;
pub mod reach;
pub(crate) mod seatbelt;

use ralph_fs::process::find_program;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use ralph_state::fields::confinement::{Confinement, Network};
use reach::{Reach, ReachFacts, SystemDir};

/// Why a sandbox cannot be had; the message says what to install or fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--sandbox: {problem}; nothing was run unconfined. {fix}")]
pub struct SandboxError {
    pub problem: String,
    pub fix: String,
}

/// A missing tool is the machine's, not a typo.
impl ralph_fs::error::Exit for SandboxError {}

/// The tool that confines the agent, found at an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tool {
    Bubblewrap(PathBuf),
    SandboxExec(PathBuf),
    /// `docker` or `podman`, and the image.
    Engine {
        program: PathBuf,
        name: &'static str,
        image: String,
    },
}

impl Tool {
    /// Its name, as the arming line and the docs say it.
    pub fn name(&self) -> &str {
        match self {
            Self::Bubblewrap(_) => "bubblewrap",
            Self::SandboxExec(_) => "sandbox-exec",
            Self::Engine { name, .. } => name,
        }
    }
}

/// One agent run's sandbox: the tool, what it may reach, and the network.
#[derive(Debug)]
pub struct Sandbox {
    pub tool: Tool,
    pub reach: Reach,
    pub confinement: Confinement,
    /// `pasta`, found when bubblewrap gives the agent the `internet`
    /// network; `None` there: the host's network (said at arming).
    pub pasta: Option<PathBuf>,
    /// The agent's own git folder, when the project is a git repository.
    pub agent_git: Option<agent_git::AgentGit>,
    /// The `.git`s nested in the work tree before the agent started ([`nested_git`]).
    pub nested_git: Vec<nested_git::NestedGit>,
    /// Where a new one goes once the agent has exited: the per-user state folder.
    state_dir: Option<PathBuf>,
    /// The new ones taken out after the agent, for the caller to say.
    quarantined: std::sync::Mutex<Vec<nested_git::Quarantined>>,
}

/// The user-mode network for bubblewrap's `internet`: `pasta`, found in
/// PATH's trusted folders.
fn find_pasta(tool: &Tool, confinement: &Confinement) -> Option<PathBuf> {
    let wanted = matches!(tool, Tool::Bubblewrap(_)) && confinement.network == Network::Internet;
    wanted.then(|| find_program("pasta")).flatten()
}

/// The tool for `confinement` on this system, or what to install.
pub fn choose_tool(confinement: &Confinement) -> Result<Tool, SandboxError> {
    if let Some(image) = &confinement.image {
        return container::ENGINES
            .iter()
            .find_map(|name| {
                find_program(name).map(|program| Tool::Engine {
                    program,
                    name,
                    image: image.clone(),
                })
            })
            .ok_or_else(|| SandboxError {
                problem: format!("--sandbox-image {image} needs Docker or Podman, and neither is on PATH"),
                fix: "Install one (https://docs.docker.com/engine/install/ or https://podman.io), or drop --sandbox-image to use bubblewrap (Linux) or sandbox-exec (macOS).".to_owned(),
            });
    }
    if cfg!(target_os = "linux") {
        find_program("bwrap")
            .map(Tool::Bubblewrap)
            .ok_or_else(|| SandboxError {
                problem: "bubblewrap (`bwrap`) is not on PATH".to_owned(),
                fix: "Install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; Arch: pacman -S bubblewrap), or give --sandbox-image IMAGE to run the agent in Docker or Podman.".to_owned(),
            })
    } else if cfg!(target_os = "macos") {
        find_program("sandbox-exec")
            .map(Tool::SandboxExec)
            .ok_or_else(|| SandboxError {
                problem: "`sandbox-exec` is not on PATH (it ships with macOS in /usr/bin)".to_owned(),
                fix: "Put /usr/bin on PATH, or give --sandbox-image IMAGE to run the agent in Docker or Podman.".to_owned(),
            })
    } else {
        Err(SandboxError {
            problem: "this system has no sandbox ralph can use without an image".to_owned(),
            fix: "Give --sandbox-image IMAGE to run the agent in Docker or Podman (Windows: Docker Desktop), or run ralph inside WSL with bubblewrap.".to_owned(),
        })
    }
}

/// What `ralph run` says once its loop is armed or taken over, when the
/// agent runs sandboxed: the tool it will use (or that none is on PATH) and
/// what the agent may reach.
pub fn arming_line(confinement: Option<&Confinement>) -> Option<String> {
    let confinement = confinement?;
    Some(match choose_tool(confinement) {
        Ok(tool) => {
            let mut line = format!("Sandboxed ({}): {}.", tool.name(), confinement.limits());
            if matches!(tool, Tool::Bubblewrap(_))
                && confinement.network == Network::Internet
                && find_pasta(&tool, confinement).is_none()
            {
                line.push_str(" ⚠ pasta is not on PATH, so the agent shares this machine's network, its loopback and abstract sockets too: install passt (Debian/Ubuntu: apt-get install passt), or give --sandbox-network none.");
            }
            // As `Sandbox::meterable`: bubblewrap with a network (without
            // pasta, `internet` is the host's).
            if matches!(tool, Tool::Bubblewrap(_)) && confinement.network != Network::None {
                line.push_str(" Its calls to the model's API go through ralph's meter, which counts the usage the API reports: each iteration is charged that or what the agent reports, whichever is more.");
            }
            line
        }
        Err(e) => format!("⚠ {e}"),
    })
}

impl Sandbox {
    /// The sandbox of one agent run of `command` in `root`: the tool found
    /// and what the agent may reach, read from this machine now.
    pub fn prepare(
        confinement: &Confinement,
        root: &Path,
        command: &str,
        held_out: Option<&Path>,
    ) -> Result<Self, SandboxError> {
        let tool = choose_tool(confinement)?;
        let env = ralph_state::storage::environment::Environment::from_env();
        let Some(home) = env.home.clone().filter(|h| h.is_absolute()) else {
            return Err(SandboxError {
                problem: "HOME is not set to an absolute path".to_owned(),
                fix: "Set HOME: the sandbox hides it from the agent, all but the agent's own settings.".to_owned(),
            });
        };
        let mut facts = gather(root, &home, &env, command);
        facts.held_out = held_out
            .map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.to_path_buf()))
            .into_iter()
            .collect();
        // The project is written whole: one that holds HOME would hand the agent all of it.
        let real_home = std::fs::canonicalize(&home).unwrap_or_else(|_| home.clone());
        if real_home.starts_with(&facts.project) {
            return Err(SandboxError {
                problem: format!(
                    "the project {} is your home folder or holds it, and the agent writes the whole project",
                    ralph_fs::display::line(&facts.project.to_string_lossy())
                ),
                fix: "Run ralph in the project's own folder (one with .git or .claude/ below your home).".to_owned(),
            });
        }
        let mut reach = Reach::from_facts(&facts);
        // The nested `.git`s there now stay as they are (bound read only; a link is
        // not, a bind would follow it); one the agent makes or replaces is taken out
        // after it (`take_new_nested_git`).
        let nested_git = nested_git::scan(&facts.project);
        reach.kept.extend(
            nested_git
                .iter()
                .filter(|entry| !entry.is_link)
                .map(|entry| entry.path.clone()),
        );
        let agent_git = agent_git::AgentGit::prepare(&facts.project)?;
        reach.agent_git = agent_git.as_ref().map(agent_git::AgentGit::dir);
        // What the sandbox lets the agent write is never where ralph takes
        // a program from on the host (`~/.npm/…/git` on PATH).
        for folder in std::iter::once(&reach.project).chain(&reach.writable) {
            ralph_fs::process::distrust(folder);
        }
        Ok(Self {
            pasta: find_pasta(&tool, confinement),
            tool,
            reach,
            confinement: confinement.clone(),
            agent_git,
            nested_git,
            state_dir: facts.state_dir,
            quarantined: std::sync::Mutex::default(),
        })
    }

    /// After the agent has exited, before any git on the host runs: every `.git` in the
    /// work tree that was not there before it started, taken out of the project
    /// ([`nested_git::quarantine`]; what was taken: [`Self::quarantined`]).
    pub(crate) fn take_new_nested_git(&self) {
        let new = nested_git::new_since(&self.nested_git, nested_git::scan(&self.reach.project));
        let taken = nested_git::quarantine(new, self.state_dir.as_deref());
        if let Ok(mut list) = self.quarantined.lock() {
            list.extend(taken);
        }
    }

    /// The nested `.git`s the agent made, taken out of the project after it.
    pub fn quarantined(&self) -> Vec<nested_git::Quarantined> {
        self.quarantined
            .lock()
            .map(|list| list.clone())
            .unwrap_or_default()
    }

    /// After the agent has exited: its new commit on the loop's branch,
    /// brought into the project ([`agent_git::AgentGit::import`]).
    pub(crate) fn import_git(&self) -> Result<Option<String>, SandboxError> {
        self.agent_git
            .as_ref()
            .map_or(Ok(None), agent_git::AgentGit::import)
    }

    /// The network the agent gets: the one asked for, but the host's for
    /// `internet` under bubblewrap without pasta.
    pub fn network(&self) -> Network {
        match (&self.tool, self.confinement.network, &self.pasta) {
            (Tool::Bubblewrap(_), Network::Internet, None) => Network::Host,
            (_, network, _) => network,
        }
    }

    /// Whether the agent's calls to its model go through ralph's meter:
    /// under bubblewrap with a network that reaches the meter's port on the
    /// host's loopback and nothing else of it (`internet` with pasta, which
    /// forwards that one port) or all of it (`host`). Not under `none` (no
    /// network, the model's API included), nor `sandbox-exec` or a container
    /// engine (their agent reaches the API around any meter).
    pub(crate) fn meterable(&self) -> bool {
        matches!(self.tool, Tool::Bubblewrap(_))
            && match self.network() {
                Network::Internet => self.pasta.is_some(),
                Network::Host => true,
                Network::None => false,
            }
    }

    /// Once the sandbox led by `leader` (bubblewrap's process) has started:
    /// for `internet`, pasta gives its own network namespace a user-mode
    /// network that reaches out through this machine's sockets, but with no
    /// port of the host's forwarded in (`-T none -U none`) and the gateway
    /// address not mapped to the host's loopback (`--no-map-gw`); but
    /// `forward`, the meter's port, whose connections on the sandbox's own
    /// loopback reach the same port on the host's (`-T PORT`). The agent
    /// waits for its route ([`bwrap::args`]); pasta is ended with the agent
    /// (the [`Pasta`] returned is dropped then). Without it the agent has no network (never the host's).
    #[cfg(target_os = "linux")]
    pub fn connect(
        &self,
        leader: u32,
        forward: Option<u16>,
    ) -> Result<Option<Pasta>, SandboxError> {
        let Some(pasta) = self
            .pasta
            .as_deref()
            .filter(|_| self.network() == Network::Internet)
        else {
            return Ok(None);
        };
        let failed = |problem: String| {
            SandboxError {
            problem,
            fix: "Check that `pasta` (package passt) runs here, or give --sandbox-network none or host.".to_owned(),
        }
        };
        let inner = sandbox_process(leader)
            .ok_or_else(|| failed("the sandbox's first process did not appear".to_owned()))?;
        loopback_up(inner);
        let uid = std::os::unix::fs::MetadataExt::uid(
            &std::fs::metadata("/proc/self").map_err(|e| failed(e.to_string()))?,
        );
        // In the foreground, as a child of this process, so it ends with the
        // agent (`Pasta`'s drop): attached to a process's namespace, pasta
        // in the background outlives it, one per iteration.
        let mut child = ralph_fs::process::found_program(pasta)
            .args(["--quiet", "--foreground", "--config-net", "--no-map-gw"])
            .args(["-t", "none", "-u", "none", "-U", "none"])
            .arg("-T")
            .arg(forward.map_or_else(|| "none".to_owned(), |port| port.to_string()))
            .arg("--runas")
            .arg(uid.to_string())
            .arg(inner.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| failed(format!("pasta did not start: {e}")))?;
        if let Some(status) = route_up(inner, &mut child) {
            return Err(failed(format!("pasta failed ({status})")));
        }
        Ok(Some(Pasta(child)))
    }

    #[cfg(not(target_os = "linux"))]
    pub fn connect(
        &self,
        _leader: u32,
        _forward: Option<u16>,
    ) -> Result<Option<Pasta>, SandboxError> {
        Ok(None)
    }

    /// The process that runs `sh -c COMMAND` in the sandbox.
    pub fn command(&self, command: &str) -> Command {
        let network = self.network();
        let (program, args): (&Path, Vec<OsString>) = match &self.tool {
            Tool::Bubblewrap(p) => (p, bwrap::args(&self.reach, network, command)),
            Tool::SandboxExec(p) => {
                let profile = seatbelt::profile(&self.reach, network);
                let args = ["-p", &profile, "--", "sh", "-c", command];
                (p, args.iter().map(OsString::from).collect())
            }
            Tool::Engine {
                program,
                name,
                image,
            } => (
                program,
                container::args(
                    name,
                    image,
                    &self.reach,
                    network,
                    ids(&self.reach.home),
                    command,
                ),
            ),
        };
        let mut cmd = ralph_fs::process::found_program(program);
        cmd.args(args);
        if matches!(self.tool, Tool::SandboxExec(_)) {
            cmd.env("IS_SANDBOX", "1")
                .env("RALPH_SANDBOX", "sandbox-exec");
            if let Some(git) = &self.reach.agent_git {
                cmd.env("GIT_DIR", git)
                    .env("GIT_WORK_TREE", &self.reach.project);
            }
        }
        cmd
    }
}

/// Bubblewrap's first process inside the sandbox (its child, in the new
/// namespaces), looked for during at most five seconds.
#[cfg(target_os = "linux")]
fn sandbox_process(leader: u32) -> Option<i32> {
    let leader = i32::try_from(leader).ok()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if let Some(&child) = ralph_fs::process::children_of(leader).first() {
            return Some(child);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The owner of HOME, as the ids the container runs with.
fn ids(home: &Path) -> Option<container::Ids> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(home).ok().map(|m| container::Ids {
            uid: m.uid(),
            gid: m.gid(),
        })
    }
    #[cfg(not(unix))]
    {
        let _ = home;
        None
    }
}

/// What the machine says for [`Reach::from_facts`]: canonical paths, which
/// of them exist, the system folders and their links.
fn gather(
    root: &Path,
    home: &Path,
    env: &ralph_state::storage::environment::Environment,
    command: &str,
) -> ReachFacts {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let project = canonical(root);
    let state_dir = env.registry().map(|r| r.dir().to_path_buf());
    let path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| ralph_fs::process::absolute_entries(&p))
        .unwrap_or_default();
    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    let program_dir = program_of(command, &project)
        .and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let system = reach::SYSTEM
        .iter()
        .map(PathBuf::from)
        .filter(|p| ralph_fs::safe_fs::kind_at(p).is_some())
        .map(|path| SystemDir {
            link: std::fs::read_link(&path).ok(),
            path,
        })
        .collect();
    let git = reach::worktree_git(&project);
    let candidates: Vec<PathBuf> = reach::TOOLCHAINS
        .iter()
        .chain(reach::AGENT_SETTINGS)
        .map(|t| home.join(t))
        .chain(path.iter().cloned())
        .chain(program_dir.iter().cloned())
        .chain(state_dir.iter().cloned())
        .collect();
    // The user's own folders may be links (dotfiles); a link in the project
    // is never followed into the sandbox's view.
    let mut existing: Vec<PathBuf> = candidates.into_iter().filter(|p| p.exists()).collect();
    existing.extend(
        [".claude", ".git"]
            .map(|k| project.join(k))
            .into_iter()
            .filter(|p| ralph_fs::safe_fs::kind_at(p).is_some_and(|k| !k.is_symlink())),
    );
    ReachFacts {
        project,
        home: home.to_path_buf(),
        state_dir,
        path,
        tmpdir,
        program_dir,
        existing,
        system,
        worktree_git_read: git.read,
        worktree_git: git.write,
        worktree_git_kept: git.kept,
        held_out: Vec::new(),
    }
}

/// The agent program, the command's first word: found in PATH's absolute
/// folders when it is a bare name, taken as written when it has a `/`
/// (relative to the project).
fn program_of(command: &str, project: &Path) -> Option<PathBuf> {
    let first = command.split_whitespace().next()?;
    if first.contains('/') {
        Some(project.join(first))
    } else {
        find_program(first)
    }
}

/// The agent's user-mode network (pasta), a child of this process: ended
/// when dropped, once the agent's process has ended.
pub struct Pasta(std::process::Child);

impl Drop for Pasta {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (at most five seconds) until pasta has given the namespace of
/// `inner` its default route; `Some(status)` when pasta ended first (it
/// could not configure it).
#[cfg(target_os = "linux")]
fn route_up(inner: i32, pasta: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let route = format!("/proc/{inner}/net/route");
    for _ in 0..500 {
        if let Ok(Some(status)) = pasta.try_wait() {
            return Some(status);
        }
        let table = ralph_fs::safe_fs::read_text(std::path::Path::new(&route), 1 << 20);
        // The default route's destination is 00000000.
        if table.is_ok_and(|t| {
            t.lines()
                .skip(1)
                .any(|l| l.split_whitespace().nth(1) == Some("00000000"))
        }) {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

/// Waits (at most two seconds) until bubblewrap has brought up the
/// sandbox's own loopback in its new network namespace: the address's local
/// route appears only once `lo` has it and is up. pasta configures the same
/// namespace from outside; attached before that, the two race and
/// bubblewrap fails (`loopback: Failed RTM_NEWADDR`). Past the wait pasta is
/// attached anyway, as before.
#[cfg(target_os = "linux")]
fn loopback_up(inner: i32) {
    let trie = format!("/proc/{inner}/net/fib_trie");
    for _ in 0..200 {
        if ralph_fs::safe_fs::read_text(std::path::Path::new(&trie), 1 << 20)
            .is_ok_and(|t| t.contains("127.0.0.1"))
        {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_says_what_to_install() {
        let err = SandboxError {
            problem: "bubblewrap (`bwrap`) is not on PATH".into(),
            fix: "Install it".into(),
        };
        assert_eq!(
            err.to_string(),
            "--sandbox: bubblewrap (`bwrap`) is not on PATH; nothing was run unconfined. Install it"
        );
    }

    #[test]
    fn the_program_is_the_commands_first_word() {
        let project = Path::new("/p");
        assert_eq!(
            program_of("./agent.sh --x", project),
            Some(PathBuf::from("/p/./agent.sh"))
        );
        assert_eq!(
            program_of("/usr/bin/env a", project),
            Some(PathBuf::from("/usr/bin/env"))
        );
    }
}
