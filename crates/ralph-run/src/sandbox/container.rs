//! A container engine (Docker or Podman) with the image the user named:
//! `run --rm -i` of that image with the project and the agent's settings
//! mounted at the same paths, git's configuration and hooks and ralph's
//! folder in the project mounted read only over them, the user's own ids
//! (so files stay theirs), no new privileges, and the API keys the agents
//! read passed by name. The image brings its own system and toolchains
//! (the agent must be installed in it); the host's HOME, toolchains and
//! ralph's state folder are not mounted. Not run in this project's tests
//! (no engine here): only the command line is checked.

use std::ffi::OsString;

use super::reach::Reach;
use ralph_state::fields::confinement::Network;

/// The engines ralph knows, in the order it looks for them.
pub(crate) const ENGINES: &[&str] = &["docker", "podman"];

/// The variables passed into the container by name (the engine copies
/// each one's value when it is set): the agents' keys and endpoints.
pub(crate) const PASSED: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "COPILOT_GITHUB_TOKEN",
    "LANG",
    "TERM",
];

/// The user's ids, for `--user` (Docker) or `--userns keep-id` (Podman).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// The engine's arguments that run `sh -c COMMAND` in `image`.
pub fn args(
    engine: &str,
    image: &str,
    reach: &Reach,
    network: Network,
    ids: Option<Ids>,
    command: &str,
) -> Vec<OsString> {
    let mut out: Vec<OsString> = ["run", "--rm", "-i", "--init"]
        .iter()
        .map(OsString::from)
        .collect();
    let mut pair = |a: &str, b: OsString| {
        out.push(a.into());
        out.push(b);
    };
    pair("--security-opt", "no-new-privileges".into());
    // `internet`: the engine's own bridge (not the host's loopback).
    match network {
        Network::None => pair("--network", "none".into()),
        Network::Host => pair("--network", "host".into()),
        Network::Internet => {}
    }
    match (engine, ids) {
        ("podman", _) => pair("--userns", "keep-id".into()),
        (_, Some(ids)) => pair("--user", format!("{}:{}", ids.uid, ids.gid).into()),
        (_, None) => {}
    }
    let mut home = OsString::from("HOME=");
    home.push(&reach.home);
    pair("-e", home);
    pair("-e", "IS_SANDBOX=1".into());
    pair("-e", format!("RALPH_SANDBOX={engine}").into());
    for name in PASSED {
        pair("-e", (*name).into());
    }
    let volume = |path: &std::path::Path, mode: &str| {
        let mut v = OsString::from(path);
        v.push(":");
        v.push(path);
        v.push(mode);
        v
    };
    for path in reach
        .writable
        .iter()
        .chain(std::iter::once(&reach.project))
        .chain(&reach.agent_git)
    {
        pair("-v", volume(path, ""));
    }
    // The agent's git works in its own folder, the project as its work tree.
    if let Some(git) = &reach.agent_git {
        let mut dir = OsString::from("GIT_DIR=");
        dir.push(git);
        pair("-e", dir);
        let mut tree = OsString::from("GIT_WORK_TREE=");
        tree.push(&reach.project);
        pair("-e", tree);
    }
    for path in &reach.kept {
        pair("-v", volume(path, ":ro"));
    }
    for path in &reach.hidden {
        pair("--tmpfs", path.into());
    }
    pair("-w", reach.project.clone().into());
    out.extend([image, "sh", "-c", command].map(OsString::from));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_image_runs_the_command_with_the_project_and_settings_mounted() {
        let p = PathBuf::from;
        let reach = Reach {
            project: p("/home/u/proj"),
            home: p("/home/u"),
            read_only: vec![p("/home/u/.cargo")],
            writable: vec![p("/home/u/.claude")],
            kept: vec![p("/home/u/proj/.git/config")],
            agent_git: None,
            hidden: vec![],
            temp: vec![p("/tmp")],
            ..Reach::default()
        };
        let ids = Some(Ids {
            uid: 1000,
            gid: 100,
        });
        let line: Vec<String> = args("docker", "node:22", &reach, Network::None, ids, "claude -p")
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let passed: String = PASSED.iter().map(|n| format!(" -e {n}")).collect();
        assert_eq!(
            line.join(" "),
            format!(
                "run --rm -i --init --security-opt no-new-privileges --network none \
                 --user 1000:100 -e HOME=/home/u -e IS_SANDBOX=1 -e RALPH_SANDBOX=docker{passed} \
                 -v /home/u/.claude:/home/u/.claude -v /home/u/proj:/home/u/proj \
                 -v /home/u/proj/.git/config:/home/u/proj/.git/config:ro \
                 -w /home/u/proj node:22 sh -c claude -p"
            )
        );
        assert!(
            !line.iter().any(|a| a.contains(".cargo")),
            "toolchains come from the image"
        );
        let podman = args("podman", "img", &reach, Network::Internet, ids, "a");
        assert!(podman.iter().any(|a| a == "keep-id"));
        assert!(!podman.iter().any(|a| a == "--network" || a == "--user"));
    }
}
