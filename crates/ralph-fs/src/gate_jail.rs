//! The gate's own sandbox. On Linux every gate command (`--verify`,
//! `--check`, a story's `verify`) runs in bubblewrap, found in an absolute
//! folder of PATH: every namespace new (its own process tree, whose first
//! process ends all the others when the command exits; no IPC and, unless
//! the loop asks for `--gate-network open`, no network but its own
//! loopback, so no abstract socket of the host either), the system folders
//! and toolchains read only, an empty HOME, a private `/tmp` (and
//! `$TMPDIR`) in memory, no `/run` (so no `$XDG_RUNTIME_DIR` and none of
//! the sockets of a server the user runs there), and only the folder it runs
//! in written. ralph's state folder is covered wherever a bound folder
//! would show it.
//!
//! Whether it is used ([`Sandboxing`]): always when the loop's agent runs
//! sandboxed (no bubblewrap is then a gate that fails, never one that runs
//! unconfined); by default wherever bubblewrap works; never when the loop
//! asked for `--gate-sandbox off`. Elsewhere (macOS, Windows) the gate runs
//! in its box only (`gate_box`): the process tree is ended, nothing else is
//! confined, and [`JailPlan::words`] says so. Deciding what is bound how is
//! pure ([`Layout::from_facts`]); reading the machine is [`plan`]'s.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Toolchains and package caches under HOME the gate reads (never writes):
/// compilers, package managers and the packages they installed. Never the
/// user's keys and credentials (`.ssh`, `.gnupg`, `.aws`, `.config`), shell
/// start-up files, or ralph's state folder (`.local/state`).
pub const TOOLCHAINS: &[&str] = &[
    ".cargo",
    ".rustup",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".npm",
    ".pyenv",
    ".local/bin",
    ".local/lib",
    ".local/share/uv",
    ".cache/uv",
    ".cache/pip",
    ".cache/go-build",
    "go",
    ".m2",
    ".gradle",
    ".sdkman",
];

/// Linux's system folders, read only (a missing one is skipped; one that
/// is a link, as `/bin` often is, is made the same link).
pub const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix",
];

/// Variables that name a way out to a server the user runs (an agent, a
/// bus, a terminal multiplexer): unset in the sandbox, whose sockets are
/// out of its reach anyway.
const UNSET: &[&str] = &[
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
    "TMUX",
    "TMUX_PANE",
    "STY",
    "DISPLAY",
    "WAYLAND_DISPLAY",
];

/// Whether a loop's gate runs in its sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sandboxing {
    /// Wherever bubblewrap works (the default); elsewhere the gate runs in
    /// its box only, and says so.
    #[default]
    Auto,
    /// Always (the loop's agent runs sandboxed): without bubblewrap the
    /// gate does not run at all.
    Required,
    /// Never: `--gate-sandbox off`.
    Off,
}

/// Where a confined gate may connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GateNetwork {
    /// Nowhere but its own loopback (the default).
    #[default]
    None,
    /// The host's network, as the user has it (`--gate-network open`).
    Open,
}

/// How one gate is to be confined: the loop's settings, and ralph's state
/// folder (to be covered wherever a bound folder would show it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GateConfinement {
    pub sandboxing: Sandboxing,
    pub network: GateNetwork,
    pub hidden: Vec<PathBuf>,
}

impl GateConfinement {
    /// No sandbox: a library user's or a test's gate.
    pub fn off() -> Self {
        Self {
            sandboxing: Sandboxing::Off,
            ..Self::default()
        }
    }
}

/// What to do with one gate, decided before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JailPlan {
    /// Run it in bubblewrap: the program and its arguments up to the command.
    Jailed { bwrap: PathBuf, args: Vec<OsString> },
    /// Run it in the box only; the words say why.
    Unconfined(String),
    /// Do not run it: the sandbox is required and cannot be had.
    Refused(String),
}

impl JailPlan {
    /// How the gate ran, in a few words, for the receipt and the notices.
    pub(crate) fn words(&self, network: GateNetwork) -> String {
        match self {
            Self::Jailed { .. } => match network {
                GateNetwork::None => "sandboxed (bubblewrap), no network".to_owned(),
                GateNetwork::Open => "sandboxed (bubblewrap), the host's network".to_owned(),
            },
            Self::Unconfined(why) => format!("not sandboxed ({why})"),
            Self::Refused(why) => format!("not run ({why})"),
        }
    }
}

/// What the gate's sandbox needs to know of this machine.
#[derive(Debug, Clone, Default)]
pub struct JailFacts {
    /// The folder the gate runs in (canonical), written.
    pub root: PathBuf,
    pub home: Option<PathBuf>,
    /// PATH's absolute entries, in order.
    pub path: Vec<PathBuf>,
    pub tmpdir: Option<PathBuf>,
    /// Which candidate paths exist: only those are bound.
    pub existing: Vec<PathBuf>,
    /// The system folders that exist, and where each points if a link.
    pub system: Vec<(PathBuf, Option<PathBuf>)>,
    pub hidden: Vec<PathBuf>,
    /// The shell, an absolute path.
    pub shell: PathBuf,
}

/// What is bound how, decided from [`JailFacts`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    pub root: PathBuf,
    pub system: Vec<(PathBuf, Option<PathBuf>)>,
    /// In memory, empty: `/tmp`, HOME, `$TMPDIR`.
    pub empty: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
    /// Covered by an empty folder: ralph's state folder, where shown.
    pub hidden: Vec<PathBuf>,
    pub shell: PathBuf,
}

/// Whether `dir` is `other` or a folder above it.
fn covers(dir: &Path, other: &Path) -> bool {
    other.starts_with(dir)
}

impl Layout {
    /// Decides the sandbox's view (pure); `Err` says why there is none to
    /// be had: a folder that holds HOME would hand the gate all of it.
    pub fn from_facts(facts: &JailFacts) -> Result<Self, String> {
        let root = &facts.root;
        let home = facts.home.as_deref().filter(|h| h.is_absolute());
        if !root.is_absolute() || root.parent().is_none() {
            return Err(format!(
                "the gate's folder {} is not one bubblewrap can bind alone",
                crate::display::line(&root.to_string_lossy())
            ));
        }
        if let Some(home) = home.filter(|h| covers(root, h)) {
            return Err(format!(
                "the gate's folder {} holds the home folder {}",
                crate::display::line(&root.to_string_lossy()),
                crate::display::line(&home.to_string_lossy())
            ));
        }
        let exists = |p: &Path| facts.existing.iter().any(|e| e == p);
        let too_wide = |p: &Path| {
            !p.is_absolute()
                || p.parent().is_none()
                || home.is_some_and(|h| covers(p, h))
                || covers(p, root)
        };
        let mut read_only: Vec<PathBuf> = home
            .map(|h| TOOLCHAINS.iter().map(|t| h.join(t)).collect())
            .unwrap_or_default();
        read_only.extend(facts.path.iter().cloned());
        read_only.extend(facts.path.iter().filter_map(|p| manager_root(p)));
        let mut seen = Vec::new();
        read_only.retain(|p| {
            let keep = exists(p)
                && !too_wide(p)
                && !covers(root, p)
                && !facts.system.iter().any(|(s, _)| covers(s, p))
                && !seen.contains(p);
            seen.push(p.clone());
            keep
        });
        let inside_another = |p: &PathBuf| read_only.iter().any(|o| o != p && covers(o, p));
        let nested: Vec<PathBuf> = read_only
            .iter()
            .filter(|p| inside_another(p))
            .cloned()
            .collect();
        read_only.retain(|p| !nested.contains(p));
        let mut empty = vec![PathBuf::from("/tmp")];
        empty.extend(home.map(Path::to_path_buf));
        empty.extend(
            facts
                .tmpdir
                .iter()
                .filter(|t| !too_wide(t) && !covers(t, root) && !covers(root, t))
                .filter(|t| t.as_path() != Path::new("/tmp"))
                .cloned(),
        );
        let shown = |s: &Path| {
            covers(root, s)
                || read_only.iter().any(|b| covers(b, s))
                || facts.system.iter().any(|(d, _)| covers(d, s))
        };
        let hidden = facts
            .hidden
            .iter()
            .filter(|s| s.is_absolute() && exists(s) && shown(s))
            .cloned()
            .collect();
        Ok(Self {
            root: root.clone(),
            system: facts.system.clone(),
            empty,
            read_only,
            hidden,
            shell: facts.shell.clone(),
        })
    }

    /// bubblewrap's arguments up to (not including) the command's text.
    pub fn args(&self, network: GateNetwork) -> Vec<OsString> {
        let mut out = Args::default();
        out.words(&["--unshare-all", "--die-with-parent", "--new-session"]);
        if network == GateNetwork::Open {
            out.words(&["--share-net"]);
        }
        for (path, link) in &self.system {
            match link {
                Some(target) => out.two("--symlink", target, path),
                None => out.two("--ro-bind", path, path),
            }
        }
        if network == GateNetwork::Open {
            // `/etc/resolv.conf` often points there.
            out.words(&[
                "--ro-bind-try",
                "/run/systemd/resolve",
                "/run/systemd/resolve",
            ]);
        }
        out.words(&["--proc", "/proc", "--dev", "/dev"]);
        // `/tmp` first (a HOME under it is mounted inside), then HOME, then
        // `$TMPDIR` (which may be under HOME).
        for dir in &self.empty {
            out.one("--tmpfs", dir);
        }
        for path in &self.read_only {
            out.two("--ro-bind", path, path);
        }
        out.two("--bind", &self.root, &self.root);
        for path in &self.hidden {
            out.one("--tmpfs", path);
        }
        for name in UNSET {
            out.words(&["--unsetenv", name]);
        }
        out.words(&["--setenv", "RALPH_GATE_SANDBOX", "bwrap"]);
        out.one("--chdir", &self.root);
        out.words(&["--"]);
        out.0.push(self.shell.clone().into());
        out.words(&["-c"]);
        out.0
    }
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn words(&mut self, words: &[&str]) {
        self.0.extend(words.iter().map(OsString::from));
    }
    fn one(&mut self, flag: &str, path: &Path) {
        self.0.push(flag.into());
        self.0.push(path.into());
    }
    fn two(&mut self, flag: &str, from: &Path, to: &Path) {
        self.0.push(flag.into());
        self.0.push(from.into());
        self.0.push(to.into());
    }
}

/// Decides how the gate in `root` runs, reading this machine now.
pub fn plan(confinement: &GateConfinement, root: &Path) -> JailPlan {
    let (bwrap, shell) = match tool(confinement) {
        Ok(found) => found,
        Err(plan) => return plan,
    };
    let facts = gather(root, confinement, shell);
    // A PATH folder inside the gate's folder is the project's: its `bwrap`
    // or `sh` would be the agent's to write.
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if [&bwrap, &facts.shell]
        .iter()
        .any(|p| canonical(p).starts_with(&facts.root))
    {
        return refuse_or_run(
            confinement,
            "`bwrap` or `sh` is found in a PATH folder inside the gate's folder".to_owned(),
        );
    }
    match Layout::from_facts(&facts) {
        Ok(layout) => JailPlan::Jailed {
            bwrap,
            args: layout.args(confinement.network),
        },
        Err(why) => refuse_or_run(confinement, why),
    }
}

/// What the gate's sandbox is on this machine, in words for the arming
/// notice and `ralph status`: what is confined and what is not.
pub fn describe(confinement: &GateConfinement) -> String {
    const BOX_ONLY: &str = "it runs as you, with your HOME, network, /tmp and files; only the processes it starts are ended with it";
    match tool(confinement) {
        Ok(_) => {
            let network = match confinement.network {
                GateNetwork::None => "no network",
                GateNetwork::Open => "the host's network",
            };
            format!(
                "sandboxed (bubblewrap): an empty HOME with toolchains read only, {network}, its own process tree ended with it, a private /tmp, writes only the folder it runs in"
            )
        }
        Err(JailPlan::Refused(why)) => format!("not run: {why}"),
        Err(plan) => format!("{}: {BOX_ONLY}", plan.words(confinement.network)),
    }
}

/// The gate's plan when the sandbox is refused or skipped for `why`.
fn refuse_or_run(confinement: &GateConfinement, why: String) -> JailPlan {
    match confinement.sandboxing {
        Sandboxing::Required => {
            JailPlan::Refused(format!("{why}, and the loop's agent runs sandboxed"))
        }
        _ => JailPlan::Unconfined(why),
    }
}

/// bubblewrap and the shell, when the gate is to be sandboxed here; else
/// the plan without them.
fn tool(confinement: &GateConfinement) -> Result<(PathBuf, PathBuf), JailPlan> {
    if confinement.sandboxing == Sandboxing::Off {
        return Err(JailPlan::Unconfined("--gate-sandbox off".to_owned()));
    }
    let refuse = |why: &str| refuse_or_run(confinement, why.to_owned());
    if !cfg!(target_os = "linux") {
        return Err(refuse("ralph sandboxes the gate on Linux only"));
    }
    let bwrap = crate::process::find_program("bwrap")
        .ok_or_else(|| refuse("bubblewrap (`bwrap`) is not on PATH"))?;
    let shell = crate::process::find_program("sh").ok_or_else(|| refuse("no `sh` on PATH"))?;
    if confinement.sandboxing == Sandboxing::Auto
        && let Err(why) = works(&bwrap, &shell)
    {
        return Err(JailPlan::Unconfined(why));
    }
    Ok((bwrap, shell))
}

/// Whether bubblewrap can make its namespaces here (a container or a
/// system that forbids them says no), tried once per process.
fn works(bwrap: &Path, shell: &Path) -> Result<(), String> {
    static WORKS: OnceLock<Result<(), String>> = OnceLock::new();
    WORKS
        .get_or_init(|| {
            let out = crate::process::found_program(bwrap)
                .args(["--unshare-all", "--ro-bind", "/", "/", "--"])
                .arg(shell)
                .args(["-c", ":"])
                .stdin(std::process::Stdio::null())
                .output();
            match out {
                Ok(o) if o.status.success() => Ok(()),
                Ok(o) => Err(format!(
                    "bubblewrap cannot run here: {}",
                    crate::display::line(String::from_utf8_lossy(&o.stderr).trim())
                )),
                Err(e) => Err(format!("bubblewrap cannot start: {e}")),
            }
        })
        .clone()
}

/// The version manager's own folder behind a PATH entry of its shims
/// (pyenv's `~/.pyenv/shims`, rbenv's, nodenv's, asdf's): a shim runs the
/// manager's programs and the versions beside it, so the folder is bound
/// (read only) with the shims, or every shim fails with "not found".
fn manager_root(path_entry: &Path) -> Option<PathBuf> {
    (path_entry.file_name()? == "shims").then(|| path_entry.parent().map(Path::to_path_buf))?
}

/// What [`Layout::from_facts`] needs, read from this machine.
fn gather(root: &Path, confinement: &GateConfinement, shell: PathBuf) -> JailFacts {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| crate::process::absolute_entries(&p))
        .unwrap_or_default();
    let system = SYSTEM
        .iter()
        .map(PathBuf::from)
        .filter(|p| crate::safe_fs::kind_at(p).is_some())
        .map(|p| {
            let link = std::fs::read_link(&p).ok();
            (p, link)
        })
        .collect();
    let candidates = home
        .iter()
        .flat_map(|h| TOOLCHAINS.iter().map(move |t| h.join(t)))
        .chain(path.iter().cloned())
        .chain(path.iter().filter_map(|p| manager_root(p)))
        .chain(confinement.hidden.iter().cloned());
    JailFacts {
        root: canonical(root),
        existing: candidates.filter(|p| p.exists()).collect(),
        home,
        path,
        tmpdir: std::env::var_os("TMPDIR").map(PathBuf::from),
        system,
        hidden: confinement.hidden.clone(),
        shell,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn facts() -> JailFacts {
        let p = PathBuf::from;
        JailFacts {
            root: p("/home/u/proj"),
            home: Some(p("/home/u")),
            path: vec![
                p("/home/u/.cargo/bin"),
                p("/usr/bin"),
                p("/home"),
                p("/opt/tools/bin"),
                p("/home/u/proj/node_modules/.bin"),
            ],
            tmpdir: Some(p("/var/tmp/me")),
            existing: [
                "/home/u/.cargo",
                "/home/u/.cargo/bin",
                "/home",
                "/opt/tools/bin",
                "/home/u/proj/node_modules/.bin",
                "/opt/tools/bin/state",
            ]
            .iter()
            .map(PathBuf::from)
            .collect(),
            system: vec![(p("/usr"), None), (p("/bin"), Some(p("usr/bin")))],
            hidden: vec![p("/opt/tools/bin/state")],
            shell: p("/usr/bin/sh"),
        }
    }

    #[test]
    #[cfg(unix)]
    fn home_is_empty_toolchains_read_only_and_only_the_root_written() {
        let layout = Layout::from_facts(&facts()).unwrap();
        let line: Vec<String> = layout
            .args(GateNetwork::None)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = line.join(" ");
        assert!(
            line.starts_with(
                "--unshare-all --die-with-parent --new-session \
                 --ro-bind /usr /usr --symlink usr/bin /bin --proc /proc --dev /dev \
                 --tmpfs /tmp --tmpfs /home/u --tmpfs /var/tmp/me \
                 --ro-bind /home/u/.cargo /home/u/.cargo --ro-bind /opt/tools/bin /opt/tools/bin \
                 --bind /home/u/proj /home/u/proj --tmpfs /opt/tools/bin/state --unsetenv SSH_AUTH_SOCK"
            ),
            "{line}"
        );
        assert!(
            line.ends_with("--chdir /home/u/proj -- /usr/bin/sh -c"),
            "{line}"
        );
        assert!(!line.contains("--share-net"));
        let open = layout.args(GateNetwork::Open);
        assert!(open.iter().any(|a| a == "--share-net"));
    }

    #[test]
    #[cfg(unix)]
    fn a_shims_folder_on_path_brings_its_managers_folder_read_only() {
        let mut f = facts();
        f.home = Some(PathBuf::from("/home/v"));
        f.path.push(PathBuf::from("/root/.pyenv/shims"));
        f.existing.push(PathBuf::from("/root/.pyenv/shims"));
        f.existing.push(PathBuf::from("/root/.pyenv"));
        let line: Vec<String> = Layout::from_facts(&f)
            .unwrap()
            .args(GateNetwork::None)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = line.join(" ");
        assert!(
            line.contains("--ro-bind /root/.pyenv /root/.pyenv"),
            "{line}"
        );
        assert!(!line.contains("--ro-bind /root/.pyenv/shims"), "{line}");
    }

    #[test]
    #[cfg(unix)]
    fn a_root_that_holds_home_is_refused() {
        let mut f = facts();
        f.root = PathBuf::from("/home");
        assert!(
            Layout::from_facts(&f)
                .unwrap_err()
                .contains("holds the home folder")
        );
        f.root = PathBuf::from("/");
        assert!(Layout::from_facts(&f).is_err());
    }

    #[test]
    fn off_is_never_sandboxed() {
        let plan = plan(&GateConfinement::off(), Path::new("."));
        assert_eq!(plan, JailPlan::Unconfined("--gate-sandbox off".into()));
        assert_eq!(
            plan.words(GateNetwork::None),
            "not sandboxed (--gate-sandbox off)"
        );
    }
}
