//! Linux: bubblewrap's command line for a [`Reach`]. A new mount namespace
//! whose root is empty; the system folders read only; a fresh `/tmp` and
//! an empty HOME (both in memory, gone when the agent exits); toolchains
//! read only; the agent's settings, its own git folder and the project
//! written; the project's `.git` and ralph's folder there read only;
//! ralph's state folder covered wherever it would show. Every other
//! namespace is new too (the network's unless `--sandbox-network host`; for
//! `internet` ralph gives it a user-mode network once it exists, and the
//! agent starts when that network is up), and the agent dies with ralph.

use std::ffi::OsString;
use std::path::Path;

use super::reach::Reach;
use ralph_state::fields::confinement::Network;

/// The arguments of `bwrap` that run `sh -c COMMAND` confined to `reach`.
pub fn args(reach: &Reach, network: Network, command: &str) -> Vec<OsString> {
    let mut out = Args::default();
    out.words(&["--unshare-all", "--die-with-parent", "--new-session"]);
    if network == Network::Host {
        out.words(&["--share-net"]);
    }
    for dir in &reach.system {
        match &dir.link {
            Some(target) => out.two("--symlink", target, &dir.path),
            None => out.two("--ro-bind", &dir.path, &dir.path),
        }
    }
    out.words(&["--proc", "/proc", "--dev", "/dev"]);
    // `/tmp` before HOME (a HOME under `/tmp` is mounted inside it), HOME
    // before `$TMPDIR` (a `$TMPDIR` under HOME is mounted inside that).
    let (tmp, other_temps) = reach.temp.split_at(reach.temp.len().min(1));
    for temp in tmp {
        out.one("--tmpfs", temp);
    }
    out.one("--tmpfs", &reach.home);
    for temp in other_temps {
        out.one("--tmpfs", temp);
    }
    for path in &reach.read_only {
        out.two("--ro-bind", path, path);
    }
    for path in &reach.writable {
        out.two("--bind", path, path);
    }
    out.two("--bind", &reach.project, &reach.project);
    for path in &reach.kept {
        out.two("--ro-bind", path, path);
    }
    for path in &reach.hidden {
        out.one("--tmpfs", path);
    }
    // The agent's git works in its own folder, the project as its work tree.
    if let Some(git) = &reach.agent_git {
        out.two("--bind", git, git);
        out.0
            .extend(["--setenv".into(), "GIT_DIR".into(), git.into()]);
        out.0.extend([
            "--setenv".into(),
            "GIT_WORK_TREE".into(),
            reach.project.clone().into(),
        ]);
    }
    // Claude Code lets --dangerously-skip-permissions run as root only
    // inside a sandbox, which this is.
    out.words(&[
        "--setenv",
        "IS_SANDBOX",
        "1",
        "--setenv",
        "RALPH_SANDBOX",
        "bwrap",
    ]);
    out.one("--chdir", &reach.project);
    if network == Network::Internet {
        // The command as `$1`, never pasted into the script.
        out.words(&["--", "sh", "-c", WAIT_FOR_ROUTE, "sh", command]);
    } else {
        out.words(&["--", "sh", "-c", command]);
    }
    out.0
}

/// Waits (at most ten seconds) for the default route the user-mode network
/// sets up in the sandbox's own namespace, and (at most ten more) for the
/// port of ralph's meter (`RALPH_METER_PORT`, set by ralph: `meter.rs`) to
/// listen on the sandbox's side, which pasta sets up after the route, then
/// runs `$1`: an agent started before would find no network and fail its
/// first call to its model.
const WAIT_FOR_ROUTE: &str = "i=0; while [ $i -lt 200 ] && ! grep -q '^[^[:space:]]*[[:space:]]*00000000' /proc/net/route 2>/dev/null; do sleep 0.05; i=$((i+1)); done; \
    if [ -n \"$RALPH_METER_PORT\" ]; then hex=$(printf '%04X' \"$RALPH_METER_PORT\"); i=0; while [ $i -lt 200 ] && ! grep -qE \"^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A\" /proc/net/tcp /proc/net/tcp6 2>/dev/null; do sleep 0.05; i=$((i+1)); done; fi; \
    exec sh -c \"$1\"";

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::reach::SystemDir;
    use std::path::PathBuf;

    #[test]
    fn the_project_is_bound_after_home_and_its_git_files_after_the_project() {
        let p = PathBuf::from;
        let reach = Reach {
            project: p("/home/u/proj"),
            home: p("/home/u"),
            system: vec![
                SystemDir {
                    path: p("/usr"),
                    link: None,
                },
                SystemDir {
                    path: p("/bin"),
                    link: Some(p("usr/bin")),
                },
            ],
            read_only: vec![p("/home/u/.cargo")],
            writable: vec![p("/home/u/.claude")],
            kept: vec![p("/home/u/proj/.git/hooks")],
            hidden: vec![],
            temp: vec![p("/tmp"), p("/home/u/tmp")],
            agent_git: None,
        };
        let line: Vec<String> = args(&reach, Network::None, "my-agent --x")
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            line.join(" "),
            "--unshare-all --die-with-parent --new-session \
             --ro-bind /usr /usr --symlink usr/bin /bin --proc /proc --dev /dev \
             --tmpfs /tmp --tmpfs /home/u --tmpfs /home/u/tmp --ro-bind /home/u/.cargo /home/u/.cargo \
             --bind /home/u/.claude /home/u/.claude --bind /home/u/proj /home/u/proj \
             --ro-bind /home/u/proj/.git/hooks /home/u/proj/.git/hooks \
             --setenv IS_SANDBOX 1 --setenv RALPH_SANDBOX bwrap --chdir /home/u/proj \
             -- sh -c my-agent --x"
        );
        assert_eq!(line.last().map(String::as_str), Some("my-agent --x"));
        let host = args(&reach, Network::Host, "a");
        assert!(host.iter().any(|a| a == "--share-net"));
        let internet = args(&reach, Network::Internet, "a");
        assert!(!internet.iter().any(|a| a == "--share-net"));
        assert_eq!(
            internet.last().map(|a| a.to_string_lossy()).as_deref(),
            Some("a")
        );
    }

    #[test]
    fn the_agents_git_folder_is_written_and_named_to_its_git_after_the_projects_git_is_kept() {
        let p = PathBuf::from;
        let reach = Reach {
            project: p("/home/u/proj"),
            home: p("/home/u"),
            kept: vec![p("/home/u/proj/.git")],
            temp: vec![p("/tmp")],
            agent_git: Some(p("/tmp/ralph-agent-git-x/git")),
            ..Reach::default()
        };
        let line: Vec<String> = args(&reach, Network::None, "a")
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = line.join(" ");
        assert!(
            line.contains(
                "--ro-bind /home/u/proj/.git /home/u/proj/.git \
                 --bind /tmp/ralph-agent-git-x/git /tmp/ralph-agent-git-x/git \
                 --setenv GIT_DIR /tmp/ralph-agent-git-x/git --setenv GIT_WORK_TREE /home/u/proj"
            ),
            "{line}"
        );
    }
}
