//! `ralph run --sandbox` and the project's `.git` (issue 46): a scripted sandboxed agent tries
//! every way into what a host-side git later runs or reads as configuration (`commondir`, a
//! renamed `.git` and a new one with `core.fsmonitor` and hooks, `info/attributes` and
//! `info/exclude`, `objects/info/alternates`, replace refs, a linked worktree's and a
//! submodule's configuration); none lands, and neither ralph's own git calls nor the user's
//! plain `git status`, `git diff` and `git log` afterwards run its program. An honest agent's
//! commit on the loop's branch, made in its own git folder, is in the project afterwards.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::process::Command;

use crate::support::project::Project;
use crate::support::text;

/// Each attempt's result in `probe.txt`, then the promise. The program it plants writes
/// `pwned` in `$PROBE_OUT` (a folder only the host can write), whenever a host git runs it.
const ATTACKER: &str = r#"#!/bin/sh
cat > /dev/null
out="$PWD/probe.txt"
P="$PWD"; export P
try() { if sh -c "$2" >/dev/null 2>&1; then echo "$1: yes" >> "$out"; else echo "$1: no" >> "$out"; fi; }
printf '#!/bin/sh\necho "$0 $*" >> "%s/pwned"\n' "$PROBE_OUT" > evil.sh
chmod +x evil.sh
try "rename .git" 'mv .git old-git && cp -a old-git .git && printf "[core]\n\tfsmonitor = $P/evil.sh\n" >> .git/config'
try "remove .git" 'rmdir .git || unlink .git'
try "config" 'printf "[core]\n\tfsmonitor = $P/evil.sh\n" >> .git/config'
try "hook" 'cp evil.sh .git/hooks/post-checkout'
try "info/attributes" 'mkdir -p .git/info && echo "* filter=marker" > .git/info/attributes'
try "info/exclude" 'echo "*" >> .git/info/exclude'
try "alternates" 'echo "$P/fake/objects" > .git/objects/info/alternates'
try "replace ref" 'b=$(git rev-parse HEAD:tracked.txt) && n=$(echo other | git hash-object -w --stdin) && mkdir -p .git/refs/replace && echo $n > .git/refs/replace/$b'
try "worktree config" 'printf "[core]\n\tfsmonitor = $P/evil.sh\n" > .git/worktrees/side/config.worktree'
try "worktree gitdir" 'echo "$P/fake/.git" > .git/worktrees/side/gitdir'
try "module config" 'mkdir -p .git/modules/m && printf "[core]\n\tfsmonitor = $P/evil.sh\n" > .git/modules/m/config'
# Last: a common folder of the agent's, a copy of the repository with its own fsmonitor.
cp -a .git fake 2>/dev/null; printf '[core]\n\tfsmonitor = %s/evil.sh\n' "$P" >> fake/config
try "commondir" 'echo "$P/fake" > .git/commondir'
# The user's own filter runs on a file whose stat changed: one of the same size.
touch -d 2001-01-01 tracked.txt
echo "done <promise>DONE</promise>"
"#;

/// An honest agent: a change committed on the loop's branch with its own git.
const HONEST: &str = r#"#!/bin/sh
cat > /dev/null
out="$PWD/probe.txt"
echo work > work.txt
git add work.txt && git commit -qm "agent commit" && echo "commit: yes" >> "$out"
if touch .git/planted 2>/dev/null; then echo "write .git: yes" >> "$out"; else echo "write .git: no" >> "$out"; fi
echo "done <promise>DONE</promise>"
"#;

/// An agent that makes a repository of its own in the work tree, with its program as
/// `core.fsmonitor`, and commits it as a submodule: the user's `git status` would enter it.
const SUBMODULE: &str = r#"#!/bin/sh
cat > /dev/null
printf '#!/bin/sh\necho "$0 $*" >> "%s/pwned"\n' "$PROBE_OUT" > evil.sh
chmod +x evil.sh
mkdir sub && echo s > sub/s.txt
(unset GIT_DIR GIT_WORK_TREE; cd sub && git init -q && git add s.txt && git commit -qm s \
  && git config core.fsmonitor "$PWD/../evil.sh")
git add sub evil.sh && git commit -qm "agent adds a submodule" && echo "commit: yes" > probe.txt
echo "done <promise>DONE</promise>"
"#;

/// An agent that makes repositories of its own in the work tree: `sub/.git` with its
/// program as `core.fsmonitor`, `other/.git` a `gitdir:` file pointing there, and tries
/// to plant the same in the repository the user already had nested in `vendored/`.
const NESTED: &str = r#"#!/bin/sh
cat > /dev/null
printf '#!/bin/sh\necho "$0 $*" >> "%s/pwned"\n' "$PROBE_OUT" > evil.sh
chmod +x evil.sh
mkdir sub && echo s > sub/s.txt
(unset GIT_DIR GIT_WORK_TREE; cd sub && git init -q && git config core.fsmonitor "$PWD/../evil.sh")
mkdir other && printf 'gitdir: %s/sub/.git\n' "$PWD" > other/.git
if printf '[core]\n\tfsmonitor = %s/evil.sh\n' "$PWD" >> vendored/.git/config 2>/dev/null
then echo "vendored: yes" >> probe.txt; else echo "vendored: no" >> probe.txt; fi
test -f sub/.git/config && echo "sub: yes" >> probe.txt
echo "done <promise>DONE</promise>"
"#;

struct Setup {
    project: Project,
    tools: tempfile::TempDir,
    side: tempfile::TempDir,
}

impl Setup {
    /// A repository with one commit, the user's own filter driver in `~/.gitconfig` (which
    /// writes `pwned` when anything runs it) and a linked worktree `side`.
    fn new(agent: &str) -> Self {
        let project = Project::new();
        let tools = tempfile::tempdir().unwrap();
        let side = tempfile::tempdir().unwrap();
        let script = tools.path().join("agent.sh");
        std::fs::write(&script, agent).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(
            project.home().join(".gitconfig"),
            format!(
                "[user]\n\tname = U\n\temail = u@example.com\n[filter \"marker\"]\n\tclean = sh -c 'echo filter >> {}/pwned; cat'\n",
                tools.path().display()
            ),
        )
        .unwrap();
        let setup = Self {
            project,
            tools,
            side,
        };
        setup.git(&["init", "-q", "-b", "main"]);
        setup.project.write("tracked.txt", "tracked\n");
        setup.git(&["add", "tracked.txt"]);
        setup.git(&["commit", "-qm", "start"]);
        let side = setup.side.path().join("side");
        setup.git(&[
            "worktree",
            "add",
            "-q",
            "-b",
            "side",
            side.to_str().unwrap(),
        ]);
        setup
    }

    /// The user's own git on the host: their HOME, no system configuration.
    fn git_in(&self, dir: &Path, args: &[&str]) -> String {
        let mut cmd = Command::new("git");
        crate::support::scrub(&mut cmd)
            .args(args)
            .current_dir(dir)
            .env("HOME", self.project.home())
            .env("GIT_CONFIG_NOSYSTEM", "1");
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn git(&self, args: &[&str]) -> String {
        self.git_in(self.project.root(), args)
    }

    fn run(&self) -> String {
        let agent = self.tools.path().join("agent.sh").display().to_string();
        let probe_out = self.tools.path().display().to_string();
        let out = self.project.ralph_with(
            &[
                "run",
                "--sandbox",
                "--agent",
                &agent,
                "--completion-promise",
                "DONE",
            ]
            .into_iter()
            .chain(["--max-iterations", "1", "Try the walls"])
            .collect::<Vec<_>>(),
            b"",
            &[
                ("PROBE_OUT", probe_out.as_str()),
                ("GIT_CONFIG_NOSYSTEM", "1"),
                // The sandbox hides ~/.gitconfig: the agent's commits take their author here.
                ("GIT_AUTHOR_NAME", "Agent"),
                ("GIT_AUTHOR_EMAIL", "agent@example.com"),
                ("GIT_COMMITTER_NAME", "Agent"),
                ("GIT_COMMITTER_EMAIL", "agent@example.com"),
            ],
        );
        text(&out)
    }

    fn probe(&self) -> String {
        self.project.read_or_empty("probe.txt")
    }

    fn pwned(&self) -> Option<String> {
        std::fs::read_to_string(self.tools.path().join("pwned")).ok()
    }
}

#[test]
fn nothing_the_sandboxed_agent_writes_is_run_or_read_as_configuration_by_a_host_git() {
    if !crate::sandbox::bwrap_or_skip("sandbox_git: attacker") {
        return;
    }
    let setup = Setup::new(ATTACKER);
    let config_before = setup.project.read(".git/config");
    let said = setup.run();
    let probe = setup.probe();
    for attempt in [
        "commondir",
        "rename .git",
        "remove .git",
        "config",
        "hook",
        "info/attributes",
        "info/exclude",
        "alternates",
        "replace ref",
        "worktree config",
        "worktree gitdir",
        "module config",
    ] {
        assert!(
            probe.contains(&format!("{attempt}: no\n")),
            "{attempt} landed:\n{probe}\n{said}"
        );
    }
    // The user's plain git afterwards, in the project and in its linked worktree.
    for args in [
        &["status"][..],
        &["diff"],
        &["log", "-1"],
        &["fsck", "--no-progress"],
    ] {
        setup.git(args);
    }
    setup.git_in(&setup.side.path().join("side"), &["status"]);
    assert_eq!(setup.pwned(), None, "{said}");
    assert_eq!(setup.project.read(".git/config"), config_before);
    for planted in [
        ".git/commondir",
        ".git/info/attributes",
        ".git/objects/info/alternates",
        ".git/refs/replace",
        ".git/worktrees/side/config.worktree",
        ".git/modules",
        "old-git",
    ] {
        assert!(!setup.project.exists(planted), "{planted}\n{said}");
    }
    assert_eq!(setup.git(&["log", "-1", "--format=%s"]), "start\n");
}

#[test]
fn an_honest_sandboxed_agents_commit_on_the_loops_branch_is_in_the_project() {
    if !crate::sandbox::bwrap_or_skip("sandbox_git: honest") {
        return;
    }
    let setup = Setup::new(HONEST);
    let said = setup.run();
    assert_eq!(setup.probe(), "commit: yes\nwrite .git: no\n", "{said}");
    assert_eq!(
        setup.git(&["log", "-1", "--format=%s %an"]),
        "agent commit Agent\n"
    );
    assert_eq!(setup.git(&["show", "main:work.txt"]), "work\n");
    // The index follows the branch: nothing staged or changed is left over.
    let status = setup.git(&["status", "--porcelain", "--untracked-files=no"]);
    assert_eq!(status, "", "{said}");
    assert!(!setup.project.exists(".git/planted"));
}

#[test]
fn a_sandboxed_agents_commit_that_adds_a_submodule_is_not_imported() {
    if !crate::sandbox::bwrap_or_skip("sandbox_git: submodule") {
        return;
    }
    let setup = Setup::new(SUBMODULE);
    let said = setup.run();
    assert_eq!(setup.probe(), "commit: yes\n", "{said}");
    assert!(said.contains("adds a submodule at sub"), "{said}");
    assert_eq!(setup.git(&["log", "-1", "--format=%s"]), "start\n");
    setup.git(&["status"]);
    assert_eq!(setup.pwned(), None, "{said}");
}

/// Issue 46: a `.git` the sandboxed agent makes anywhere in the work tree (a folder, or a
/// `gitdir:` file) is taken out of the project once it has exited, into the user's state
/// folder, and `ralph run` says so; the user's `git status` in those folders afterwards
/// runs nothing of the agent's. A repository the user already had nested there is bound
/// read only, so it stays the user's.
#[test]
fn a_git_folder_the_sandboxed_agent_nests_in_the_work_tree_is_taken_out() {
    if !crate::sandbox::bwrap_or_skip("sandbox_git: nested") {
        return;
    }
    let setup = Setup::new(NESTED);
    setup.git_in(setup.project.root(), &["init", "-q", "vendored"]);
    let vendored_config = setup.project.read("vendored/.git/config");
    let said = setup.run();
    assert_eq!(setup.probe(), "vendored: no\nsub: yes\n", "{said}");
    for folder in ["sub", "other", "vendored"] {
        setup.git_in(&setup.project.root().join(folder), &["status"]);
    }
    assert_eq!(setup.pwned(), None, "{said}");
    for made in ["sub/.git", "other/.git"] {
        assert!(!setup.project.exists(made), "{made}\n{said}");
        assert!(
            said.contains("made a git folder at") && said.contains(made),
            "{made}\n{said}"
        );
    }
    assert!(setup.project.exists("sub/s.txt"), "the agent's files stay");
    let logged = std::fs::read_dir(setup.project.root().join(".claude/ralph/history"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log.jsonl"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect::<String>();
    assert_eq!(
        logged.matches(r#""decision":"quarantine""#).count(),
        2,
        "{logged}"
    );
    let shelf = setup.project.home().join(".local/state/ralph/quarantine");
    assert_eq!(std::fs::read_dir(&shelf).unwrap().count(), 2, "{said}");
    assert_eq!(setup.project.read("vendored/.git/config"), vendored_config);
}
