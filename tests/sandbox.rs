//! `ralph run --sandbox` through the real binary with bubblewrap (issue 39): a scripted agent
//! tries to read a planted key, append to `~/.bashrc`, write ralph's state folder and write
//! outside the project; only its write in the project lands, which the `--verify` gate
//! (sandboxed too, `tests/gate_confine.rs`) reads. The same agent without `--sandbox` does all of
//! it (so the probe can tell). A sandboxed loop stays sandboxed when resumed, and the setting
//! is bound like every other; with no bubblewrap on PATH the run is refused before anything
//! is armed. `--parallel`'s stories are tested in `sandbox_fleet`, the real client in
//! `e2e_run`.
//!
//! Needs `bwrap` (Debian: bubblewrap, installed by `.ci/run`): without it these tests say
//! they skipped, or fail when `CI` is set.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::{Path, PathBuf};

use crate::support::project::Project;
use crate::support::{LOOP, text};

/// Whether bubblewrap is installed; when not, says the test skipped (fails on CI).
pub(crate) fn bwrap_or_skip(test: &str) -> bool {
    let found = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| dir.is_absolute() && dir.join("bwrap").is_file())
    });
    found
        || crate::support::client::skip_or_fail::<()>(
            test,
            "bubblewrap is not installed (apt-get install bubblewrap)",
        )
        .is_some()
}

/// The probe: each attempt's result in `probe.txt` in the project (which it may write),
/// then the promise. `$PROBE_TOOLS` is the folder it lives in (read only in the sandbox),
/// `$PROBE_SECRET` a folder only the host sees.
const PROBE: &str = r#"#!/bin/sh
cat > /dev/null
out=probe.txt
try() { if sh -c "$2" >/dev/null 2>&1; then echo "$1: yes" >> $out; else echo "$1: no" >> $out; fi; }
: > $out
try "read key" 'cat "$HOME/.ssh/id_ed25519"'
try "append bashrc" 'echo "agent was here" >> "$HOME/.bashrc"'
try "write state" 'mkdir -p "$XDG_STATE_HOME/ralph/loops" && echo forged > "$XDG_STATE_HOME/ralph/loops/forged"'
try "write outside" 'echo escaped > "$PROBE_TOOLS/escape.txt"'
try "read host file" 'cat "$PROBE_SECRET/host-only.txt"'
try "write git hooks" 'echo hook > .git/hooks/pre-commit'
echo "sandbox: ${RALPH_SANDBOX:-none}" >> $out
echo "IS_SANDBOX=${IS_SANDBOX:-}" >> $out
echo "$RALPH_SANDBOX" >> calls.txt
echo made > made.txt
echo "done <promise>${PROBE_PROMISE:-DONE}</promise>"
"#;

/// A project with a planted key and `.bashrc` in its HOME, a git repository (so it has
/// `.git/hooks`), the probe in a folder of its own and a file only the host can see.
struct Setup {
    project: Project,
    tools: tempfile::TempDir,
    secret: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let project = Project::new();
        let home = project.home();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "PLANTED-KEY\n").unwrap();
        std::fs::write(home.join(".bashrc"), "# the user's own\n").unwrap();
        let tools = tempfile::tempdir().unwrap();
        let agent = tools.path().join("probe.sh");
        std::fs::write(&agent, PROBE).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("host-only.txt"), "host only\n").unwrap();
        let git = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(project.root())
            .output()
            .unwrap();
        assert!(git.status.success());
        Self {
            project,
            tools,
            secret,
        }
    }

    fn agent(&self) -> String {
        self.tools.path().join("probe.sh").display().to_string()
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("PROBE_TOOLS", self.tools.path().display().to_string()),
            ("PROBE_SECRET", self.secret.path().display().to_string()),
        ]
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.project.ralph_with(args, b"", &env)
    }

    /// `ralph run [--sandbox] --agent PROBE` with a gate that reads what the agent made.
    fn probe(&self, sandbox: bool) -> std::process::Output {
        let gate = "cat made.txt".to_owned();
        let agent = self.agent();
        let mut args = vec!["run"];
        if sandbox {
            args.push("--sandbox");
        }
        args.extend([
            "--agent",
            &agent,
            "--completion-promise",
            "DONE",
            "--verify",
            &gate,
            "--max-iterations",
            "3",
            "Probe the sandbox",
        ]);
        self.run(&args)
    }

    fn home(&self) -> &Path {
        self.project.home()
    }

    fn state(&self) -> PathBuf {
        self.home().join(".local/state/ralph")
    }
}

#[test]
fn a_sandboxed_agent_writes_only_the_project_where_its_sandboxed_gate_reads_its_work() {
    if !bwrap_or_skip("sandbox: the probe") {
        return;
    }
    // Without --sandbox the same probe reaches all of it: the probe can tell.
    let open = Setup::new();
    let out = open.probe(false);
    assert!(out.status.success(), "{}", text(&out));
    let probed = open.project.read("probe.txt");
    assert!(
        probed.starts_with(
            "read key: yes\nappend bashrc: yes\nwrite state: yes\nwrite outside: yes\n\
             read host file: yes\nwrite git hooks: yes\nsandbox: none\n"
        ),
        "{probed}"
    );

    let boxed = Setup::new();
    let out = boxed.probe(true);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("Sandboxed (bubblewrap): the agent writes only the project"),
        "{said}"
    );
    assert!(said.contains("completed"), "{said}");
    // Its write in the project landed; every other attempt failed or went nowhere.
    assert_eq!(boxed.project.read("made.txt"), "made\n");
    assert_eq!(
        boxed.project.read("probe.txt"),
        "read key: no\nappend bashrc: yes\nwrite state: yes\nwrite outside: no\n\
         read host file: no\nwrite git hooks: no\nsandbox: bwrap\nIS_SANDBOX=1\n",
        "the appends went to the sandbox's own empty HOME, gone when it exited"
    );
    assert_eq!(
        std::fs::read_to_string(boxed.home().join(".bashrc")).unwrap(),
        "# the user's own\n"
    );
    assert!(!boxed.state().join("loops/forged").exists());
    assert!(!boxed.tools.path().join("escape.txt").exists());
    assert!(!boxed.project.exists(".git/hooks/pre-commit"));
    let status = boxed.project.ralph_with(&["status"], b"", &[]);
    let shown = text(&status);
    assert!(
        shown.contains("sandbox (when `ralph run` drives it): bubblewrap on Linux"),
        "{shown}"
    );
}

#[test]
fn a_sandboxed_loop_stays_sandboxed_when_resumed_and_the_setting_is_bound() {
    if !bwrap_or_skip("sandbox: resumed") {
        return;
    }
    let s = Setup::new();
    let agent = s.agent();
    // The promise is never given: one iteration, then the loop is handed back.
    let args = [
        "run",
        "--sandbox",
        "--agent",
        &agent,
        "--completion-promise",
        "NEVER",
        "--max-iterations",
        "5",
        "--hand-back-after",
        "1",
        "Probe",
    ];
    let out = s.run(&args);
    assert!(
        s.project.read(LOOP).contains("sandbox: true"),
        "{}",
        text(&out)
    );
    // Resumed without the flag: the loop's setting still confines the agent.
    let out = s.run(&["run", "--agent", &agent, "--hand-back-after", "1"]);
    assert_eq!(
        s.project.read("calls.txt"),
        "bwrap\nbwrap\n",
        "{}",
        text(&out)
    );
    // The setting is bound: a file that drops it is no longer the loop armed here.
    let file = s.project.read(LOOP).replace("sandbox: true\n", "");
    s.project.write(LOOP, &file);
    let out = s.run(&["run", "--agent", &agent]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("ralph adopt"),
        "refused as not armed here: {}",
        text(&out)
    );
    assert_eq!(
        s.project.read("calls.txt"),
        "bwrap\nbwrap\n",
        "{}",
        text(&out)
    );
}

#[test]
fn without_bubblewrap_a_sandboxed_run_is_refused_with_what_to_install_and_nothing_is_armed() {
    let s = Setup::new();
    let empty = tempfile::tempdir().unwrap();
    let agent = s.agent();
    let path = empty.path().display().to_string();
    let out = s.project.ralph_with(
        &["run", "--sandbox", "--agent", &agent, "Probe"],
        b"",
        &[("PATH", &path)],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("bubblewrap (`bwrap`) is not on PATH; nothing was run unconfined")
            && said.contains("apt-get install bubblewrap"),
        "{said}"
    );
    assert!(!s.project.exists(LOOP));
    assert!(!s.project.exists("made.txt"));
}

/// A `--parallel` story's probe: it knows its story by its branch, tries the main checkout,
/// the main repository's configuration and the other story's worktree, then writes and
/// commits its own file (git writes the main repository's objects and its branch).
const STORY_PROBE: &str = r#"#!/bin/sh
cat > /dev/null
story=$(git rev-parse --abbrev-ref HEAD); story=${story#ralph/}
other=US-001; [ "$story" = US-001 ] && other=US-002
export story other
out=probe-$story.txt
try() { if sh -c "$2" >/dev/null 2>&1; then echo "$1: yes" >> $out; else echo "$1: no" >> $out; fi; }
: > $out
try "write main git config" 'echo "[core]" >> "$FLEET_MAIN/.git/config"'
try "write other worktree" 'echo x > "$FLEET_MAIN/.ralph/worktrees/$other/hijack.txt"'
d=$(sed -n 's/^gitdir: //p' .git); export d
try "write worktree config" 'echo "[core]" > "$d/config.worktree"'
try "write main objects" 'touch "$FLEET_MAIN/.git/objects/planted"'
try "replace .git file" 'mv .git old-git'
echo "$story" > "$story.txt"
try "commit" 'git add "$story.txt" && git commit -qm "agent commit $story"'
echo x > "$FLEET_MAIN/intruder-$story.txt" 2>/dev/null
echo "done <promise>DONE</promise>"
"#;

#[test]
fn a_sandboxed_fleet_story_writes_only_its_worktree_and_its_commits_come_home() {
    if !bwrap_or_skip("sandbox: --parallel") {
        return;
    }
    let main = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let root = main.path();
    std::fs::write(
        home.path().join(".gitconfig"),
        "[user]\n\tname = Test\n\temail = test@example.com\n",
    )
    .unwrap();
    let agent = tools.path().join("story.sh");
    std::fs::write(&agent, STORY_PROBE).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let env = |cmd: &mut std::process::Command| {
        crate::support::scrub(cmd)
            .current_dir(root)
            .env("HOME", home.path())
            .env("XDG_STATE_HOME", home.path().join(".local/state"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            // The sandbox hides ~/.gitconfig: the agent's commits take their author from here.
            .env("GIT_AUTHOR_NAME", "Agent")
            .env("GIT_AUTHOR_EMAIL", "agent@example.com")
            .env("GIT_COMMITTER_NAME", "Agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.com")
            .env("FLEET_MAIN", root);
    };
    let git = |args: &[&str]| {
        let mut cmd = std::process::Command::new("git");
        cmd.args(args);
        env(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(root.join("ralph")).unwrap();
    let story = |id: &str, priority: u64| {
        serde_json::json!({"id": id, "title": id, "description": "Do it.",
            "acceptanceCriteria": ["works"], "priority": priority, "passes": false, "notes": ""})
    };
    let prd = serde_json::json!({"project": "P", "branchName": "ralph/p",
        "userStories": [story("US-001", 1), story("US-002", 2)]});
    std::fs::write(root.join("ralph/prd.json"), prd.to_string()).unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "start"]);
    let config_before = std::fs::read_to_string(root.join(".git/config")).unwrap();

    let mut cmd = std::process::Command::new(crate::support::BIN);
    cmd.args(["run", "--parallel", "2", "--sandbox", "--agent"])
        .arg(&agent)
        .args(["--max-iterations", "2", "--verify", "ls US-00*.txt"])
        .stdin(std::process::Stdio::null());
    env(&mut cmd);
    let out = cmd.output().unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");

    for (id, other) in [("US-001", "US-002"), ("US-002", "US-001")] {
        // Its own commit, made inside the sandbox, came home to main.
        assert_eq!(git(&["show", &format!("main:{id}.txt")]), format!("{id}\n"));
        assert_eq!(
            git(&["show", &format!("main:probe-{id}.txt")]),
            "write main git config: no\nwrite other worktree: no\nwrite worktree config: no\n\
             write main objects: no\nreplace .git file: no\ncommit: yes\n",
            "{said}"
        );
        assert!(!root.join(format!("intruder-{id}.txt")).exists());
        assert!(
            !root
                .join(format!(".ralph/worktrees/{other}/hijack.txt"))
                .exists()
        );
    }
    let log = git(&["log", "--format=%s", "main"]);
    assert!(
        log.contains("agent commit US-001") && log.contains("agent commit US-002"),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join(".git/config")).unwrap(),
        config_before
    );
}

/// The real Claude Code client in print mode, as `ralph run --sandbox --agent claude` starts
/// it (`--dangerously-skip-permissions`), against the local mock model: its shell and its
/// Read tool cannot see a key planted in HOME, its append to `~/.bashrc` does not land, its
/// Write in the project does, and the loop completes. As root (this machine's user), the
/// same run without `--sandbox` is refused by the client itself; ralph's sandbox sets
/// `IS_SANDBOX=1`, which lets it run.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn the_real_client_runs_sandboxed_as_root_and_cannot_see_a_planted_key() {
    use crate::support::mock_api::{MockApi, Reply};
    use crate::support::{describe, sandbox_or_skip};
    if !bwrap_or_skip("sandbox: the real client") {
        return;
    }
    let sandbox = sandbox_or_skip!("sandbox: the real client");
    let home = sandbox.home.path();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    let key = home.join(".ssh/id_ed25519");
    std::fs::write(&key, "PLANTED-KEY\n").unwrap();
    std::fs::write(home.join(".bashrc"), "# the user's own\n").unwrap();
    // The client's own settings exist before it runs, as after a login: it keeps them.
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::write(home.join(".claude.json"), "{\"numStartups\": 7}\n").unwrap();
    let project = sandbox.project().to_path_buf();
    let notes = project.join("notes.txt");
    let script = |n: usize| {
        let mut script = Vec::new();
        for _ in 0..n {
            script.push(Reply::bash(
                "Looking around.",
                format!("cat {}; echo agent >> ~/.bashrc", key.display()),
            ));
            script.push(Reply::tool(
                "Reading the key.",
                "Read",
                serde_json::json!({"file_path": key.display().to_string()}),
            ));
            script.push(Reply::write(
                "Writing the notes.",
                notes.to_str().unwrap(),
                "notes\n",
            ));
            script.push(Reply::text("Wrote notes.txt.\n<promise>DONE</promise>"));
        }
        script
    };
    let task = [
        "--agent",
        "claude",
        "--completion-promise",
        "DONE",
        "--verify",
        "test -f notes.txt",
        "--max-iterations",
        "3",
        "Write notes.txt",
    ];
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
    if root {
        // Unsandboxed as root: Claude Code refuses --dangerously-skip-permissions.
        let api = MockApi::start(script(1));
        let mut args = vec!["run"];
        args.extend_from_slice(&task);
        let refused = sandbox.ralph_with_client(&api, &args, &[]);
        assert!(!refused.status.success(), "{}", describe(&refused));
        if std::env::var_os("RALPH_SHOW_RUNS").is_some() {
            eprintln!("{}", describe(&refused));
        }
        assert!(!notes.exists());
    } else {
        eprintln!(
            "note: not root here; the sandboxed run below is checked, the root refusal is not"
        );
    }

    let api = MockApi::start(script(3));
    // The mock API listens on this machine's loopback, which the default network
    // (`internet`) keeps out of the sandbox's reach: `host` lets the client reach it.
    let mut args = vec!["run", "--sandbox", "--sandbox-network", "host", "--force"];
    args.extend_from_slice(&task);
    let done = sandbox.ralph_with_client(&api, &args, &[]);
    let said = String::from_utf8_lossy(&done.stdout).into_owned();
    assert!(
        done.status.success(),
        "{}\n{}",
        describe(&done),
        api.describe()
    );
    assert!(
        said.contains("Sandboxed (bubblewrap)") && said.contains("completed"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "notes\n");
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).unwrap(),
        "# the user's own\n"
    );
    let seen: String = api
        .requests()
        .iter()
        .map(crate::support::mock_api::LoggedRequest::messages_text)
        .collect();
    assert!(
        seen.contains("Looking around.") && seen.contains("Reading the key."),
        "the model's tool calls ran: {}",
        api.describe()
    );
    if std::env::var_os("RALPH_SHOW_RUNS").is_some() {
        eprintln!("{}\n{seen}", describe(&done));
    }
    assert!(
        !seen.contains("PLANTED-KEY"),
        "the key reached the model: {}",
        api.describe()
    );
    // What the client's shell and its Read tool answered the model.
    assert!(
        seen.contains("id_ed25519: No such file or directory")
            && seen.contains("File does not exist"),
        "{}",
        api.describe()
    );
    // Its own settings were written through: the session's transcript is in ~/.claude (the
    // refused run above never reached the model), and ~/.claude.json kept what it held.
    let transcripts = walk_files(&home.join(".claude/projects"));
    assert!(
        transcripts
            .iter()
            .any(|t| std::fs::read_to_string(t)
                .is_ok_and(|text| text.contains("Writing the notes."))),
        "{transcripts:?}"
    );
    assert!(
        std::fs::read_to_string(home.join(".claude.json"))
            .unwrap()
            .contains("\"numStartups\"")
    );
}

/// The project is written whole, so a project that is HOME (or holds it) would hand the agent
/// all of HOME: the agent does not run, and the loop this run armed ends as failed.
#[test]
fn a_project_that_holds_home_is_never_run_sandboxed() {
    if !bwrap_or_skip("sandbox: home as the project") {
        return;
    }
    let s = Setup::new();
    let agent = s.agent();
    let root = s.project.root().display().to_string();
    let state = s.project.root().join(".local/state").display().to_string();
    let out = s.project.ralph_with(
        &[
            "run",
            "--sandbox",
            "--agent",
            &agent,
            "--completion-promise",
            "DONE",
            "Probe",
        ],
        b"",
        &[("HOME", &root), ("XDG_STATE_HOME", &state)],
    );
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("is your home folder or holds it"), "{said}");
    assert!(!s.project.exists("made.txt"), "{said}");
}

#[test]
fn without_bubblewrap_a_sandboxed_fleet_is_refused_before_any_worktree() {
    let s = Setup::new();
    let empty = tempfile::tempdir().unwrap();
    let path = empty.path().display().to_string();
    let agent = s.agent();
    let out = s.project.ralph_with(
        &[
            "run",
            "--parallel",
            "2",
            "--sandbox",
            "--agent",
            &agent,
            "task one",
            "task two",
        ],
        b"",
        &[("PATH", &path)],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("apt-get install bubblewrap"), "{said}");
    assert!(!s.project.exists(".ralph"), "{said}");
}

/// Every file under `dir`, at any depth.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| {
            let path = e.path();
            if path.is_dir() {
                walk_files(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}

/// `--sandbox-network none`: the agent cannot reach a port on the host's loopback, which the
/// same agent reaches with the network open.
#[test]
fn sandbox_network_none_cuts_the_agent_off() {
    if !bwrap_or_skip("sandbox: network none") {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let reach = |network: &str| {
        let s = Setup::new();
        let tools = s.tools.path().join("net.sh");
        std::fs::write(
            &tools,
            "#!/bin/sh\ncat > /dev/null\n\
             if bash -c \"echo hi > /dev/tcp/127.0.0.1/$PROBE_PORT\" 2>/dev/null; then echo reached > net.txt; else echo cut > net.txt; fi\n\
             echo '<promise>DONE</promise>'\n",
        )
        .unwrap();
        std::fs::set_permissions(&tools, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let agent = tools.display().to_string();
        let out = s.project.ralph_with(
            &[
                "run",
                "--sandbox",
                "--sandbox-network",
                network,
                "--agent",
                &agent,
                "--completion-promise",
                "DONE",
                "Probe",
            ],
            b"",
            &[("PROBE_PORT", &port)],
        );
        assert!(out.status.success(), "{}", text(&out));
        s.project.read("net.txt")
    };
    assert_eq!(reach("host"), "reached\n");
    assert_eq!(reach("none"), "cut\n");
}

/// Issue 48 item 11: an agent whose program lies outside the folders the
/// sandbox binds exits 127 ("not found"); the run says which folders were
/// bound and what to do, not only that it failed.
#[test]
fn a_command_not_found_in_the_sandbox_names_the_bound_folders() {
    if !bwrap_or_skip("sandbox: command not found") {
        return;
    }
    let s = Setup::new();
    let agent = format!("exec {}", s.agent());
    let out = s.run(&["run", "--sandbox", "--agent", &agent, "Probe"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(
            "a command was not found inside the sandbox, which shows the agent only the project"
        ) && said.contains("(system, read only)")
            && said.contains("move it into the project"),
        "{said}"
    );
}

/// Issue 46: the default network (`internet`) is a namespace of the sandbox's own with a
/// user-mode network (pasta): it has a default route out, but a port on the host's
/// loopback, the same port behind the gateway's address, and an abstract Unix socket of
/// the host's (the kind an X server listens on) are out of its reach; `host` reaches
/// both (so the probe can tell). No internet here: only what it must not reach is tried
/// (the gateway's address leads out, where nothing answers: cut after five seconds).
#[test]
fn the_default_network_reaches_out_but_not_the_hosts_loopback_or_abstract_sockets() {
    if !bwrap_or_skip("sandbox: network internet") {
        return;
    }
    let has_pasta = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .any(|d| d.join("pasta").is_file());
    if !has_pasta {
        crate::support::client::skip_or_fail::<()>(
            "sandbox: network internet",
            "pasta (package passt) is not installed",
        );
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let name = format!("ralph-test-{}", std::process::id());
    let abstract_socket = abstract_listener(&name);
    let probe = |network: Option<&str>| {
        let s = Setup::new();
        let tools = s.tools.path().join("net.sh");
        std::fs::write(
            &tools,
            "#!/bin/sh\ncat > /dev/null\n\
             try() { if timeout 5 bash -c \"echo hi > /dev/tcp/$1/$PROBE_PORT\" 2>/dev/null; then echo \"$2: reached\"; else echo \"$2: cut\"; fi; }\n\
             try 127.0.0.1 loopback > net.txt\n\
             gw=$(awk '$2 == \"00000000\" { print $3; exit }' /proc/net/route)\n\
             if [ -n \"$gw\" ]; then echo 'route: yes' >> net.txt; \
               ip=$(printf '%d.%d.%d.%d' 0x$(echo $gw | cut -c7-8) 0x$(echo $gw | cut -c5-6) 0x$(echo $gw | cut -c3-4) 0x$(echo $gw | cut -c1-2)); \
               try $ip gateway >> net.txt; else echo 'route: no' >> net.txt; fi\n\
             if grep -q \"@$PROBE_NAME\" /proc/net/unix; then echo 'abstract: reached' >> net.txt; else echo 'abstract: cut' >> net.txt; fi\n\
             echo '<promise>DONE</promise>'\n",
        )
        .unwrap();
        std::fs::set_permissions(&tools, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let agent = tools.display().to_string();
        let mut args = vec!["run", "--sandbox"];
        if let Some(network) = network {
            args.extend(["--sandbox-network", network]);
        }
        args.extend(["--agent", &agent, "--completion-promise", "DONE", "Probe"]);
        let out = s
            .project
            .ralph_with(&args, b"", &[("PROBE_PORT", &port), ("PROBE_NAME", &name)]);
        assert!(out.status.success(), "{}", text(&out));
        (s.project.read("net.txt"), text(&out))
    };
    let (internet, said) = probe(None);
    assert_eq!(
        internet, "loopback: cut\nroute: yes\ngateway: cut\nabstract: cut\n",
        "{said}"
    );
    assert!(
        said.contains("the internet but not this machine's loopback"),
        "{said}"
    );
    let (host, _) = probe(Some("host"));
    assert!(
        host.starts_with("loopback: reached\n") && host.ends_with("abstract: reached\n"),
        "{host}"
    );
    drop((listener, abstract_socket));
}

/// A Unix socket listening on the abstract name `name` (Linux), as an X server's does.
fn abstract_listener(name: &str) -> std::os::unix::net::UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
}
