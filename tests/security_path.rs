//! Where ralph looks, through the real binary (issue 36, items 4 and 7): a program it starts
//! is never the repository's, found through a relative PATH entry (`.`,
//! `node_modules/.bin`); the project walk-up never takes a `.claude/` that is not the
//! user's, nor walks past a folder others may write to.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;

use serde_json::json;

use crate::support::{blocked, project::Project};

/// A script named `name` in `dir` that appends its name to `marker` when it runs.
#[cfg(unix)]
fn planted(dir: &Path, name: &str, marker: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho '{name}' >> '{}'\nexit 0\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[cfg(unix)]
#[test]
fn no_program_of_the_repository_runs_through_a_relative_path_entry() {
    let p = Project::new();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(p.root())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    p.write("lib.txt", "code\n");
    git(&["add", "lib.txt"]);
    git(&["commit", "-qm", "one"]);
    let marker = p.root().join("ran");
    for name in ["git", "sh", "curl", "notify-send", "xdg-open", "cat"] {
        planted(p.root(), name, &marker);
        planted(&p.root().join("node_modules/.bin"), name, &marker);
    }
    let path = format!(
        ".:node_modules/.bin:{}",
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    );
    let env = [
        ("PATH", path.as_str()),
        ("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0"),
    ];
    let start = p.ralph_with(
        &[
            "start",
            "--session-id",
            "s1",
            "--completion-promise",
            "DONE",
            "--verify",
            "test -f lib.txt",
            "--check",
            "test -f lib.txt",
            "--notify",
            "--notify-url",
            "https://127.0.0.1:9/hook",
            "Fix the build",
        ],
        b"",
        &env,
    );
    assert!(start.status.success(), "{start:?}");
    let stop = |reply: &str| {
        let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": reply});
        let out = p.ralph_with(&["hook", "stop"], event.to_string().as_bytes(), &env);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    // A turn with the check and git's fingerprint, then the end: gate, receipt (git),
    // desktop notice and webhook (curl).
    assert!(blocked(&stop("working")));
    let end = stop("<promise>DONE</promise>");
    assert!(!blocked(&end), "{end}");
    assert!(
        end["systemMessage"]
            .as_str()
            .unwrap_or("")
            .contains("receipt: `test -f lib.txt` exit 0"),
        "{end}"
    );
    // The detached notifiers start a moment after the answer.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        !marker.exists(),
        "the repository's programs ran: {}",
        p.read_or_empty("ran")
    );
}

/// `chown` to a user that does not exist here; needs root (the tests run as root in CI's
/// container); elsewhere the test says it skipped.
#[cfg(unix)]
fn give_away(path: &Path) -> bool {
    std::process::Command::new("chown")
        .args(["-h", "4242:4242"])
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A shared folder of the user's that others may write to, with a `.claude/` another user
/// made in it: a session in the user's repository below finds neither, and `ralph start`
/// arms in the repository, not in the stranger's folder.
#[cfg(unix)]
#[test]
fn the_walk_up_stops_at_a_folder_others_may_write_to_and_a_claude_folder_not_the_user_s() {
    let p = Project::bare();
    let shared = p.root().join("team");
    let repo = shared.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(shared.join(".claude")).unwrap();
    if !give_away(&shared.join(".claude")) {
        eprintln!("skipped: chown needs root");
        return;
    }
    set_mode(&shared, 0o777);
    let out = p.ralph_in(
        &["start", "--session-id", "s1", "Fix the build"],
        &repo,
        b"",
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let stranger = std::fs::read_dir(shared.join(".claude")).unwrap().count();
    assert_eq!(stranger, 0, "the loop went into another user's .claude/");
    assert!(repo.join(".claude/ralph-loop.local.md").is_file());

    // A folder of the user's that only they may write to, with a `.claude/` that is not
    // theirs: not the project either.
    let q = Project::bare();
    let parent = q.root().join("work");
    let sub = parent.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::create_dir_all(parent.join(".claude")).unwrap();
    q.write("work/.claude/ralph-loop.local.md", "not a loop of ours\n");
    assert!(give_away(&parent.join(".claude")));
    assert!(give_away(&parent.join(".claude/ralph-loop.local.md")));
    let event = json!({"session_id": "s1", "cwd": sub, "last_assistant_message": "hi"});
    let out = q.ralph_in(&["hook", "stop"], &sub, event.to_string().as_bytes(), &[]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "the hook took another user's .claude/ as the project: {out:?}"
    );
    let out = q.ralph_in(
        &["start", "--session-id", "s1", "Fix the build"],
        &sub,
        b"",
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(sub.join(".claude/ralph-loop.local.md").is_file());
    assert_eq!(
        q.read("work/.claude/ralph-loop.local.md"),
        "not a loop of ours\n"
    );
}

/// A git repository with one commit, `git` planted (writing to `marker`, outside the
/// project) in the project's `node_modules/.bin` and reached on PATH three ways: by its
/// absolute path, through a link outside the project that points into it, and through a
/// link inside the project that points at the planted folder. Returns the PATH.
#[cfg(unix)]
fn planted_on_path(p: &Project, marker: &Path, outside: &Path) -> String {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(p.root())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    p.write("lib.txt", "code\n");
    git(&["add", "lib.txt"]);
    git(&["commit", "-qm", "one"]);
    let bin = p.root().join("node_modules/.bin");
    for name in ["git", "sh", "cat"] {
        planted(&bin, name, marker);
    }
    std::os::unix::fs::symlink(&bin, outside.join("bin")).unwrap();
    std::os::unix::fs::symlink(&bin, p.root().join("tools")).unwrap();
    format!(
        "{}:{}:{}:{}",
        bin.display(),
        outside.join("bin").display(),
        p.root().join("tools").display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    )
}

/// Issue 46: a folder inside the project on PATH by its absolute path (as `npm run` and
/// direnv put `node_modules/.bin`), or through a link either way, is never where ralph
/// takes git from: the Stop hook's fingerprint, receipt and status calls run the user's git.
#[cfg(unix)]
#[test]
fn the_stop_hook_never_runs_a_git_planted_in_the_project_however_path_names_it() {
    let p = Project::new();
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("ran");
    let path = planted_on_path(&p, &marker, outside.path());
    let env = [
        ("PATH", path.as_str()),
        ("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0"),
    ];
    let start = p.ralph_with(
        &[
            "start",
            "--session-id",
            "s1",
            "--completion-promise",
            "DONE",
            "--verify",
            "test -f lib.txt",
            "Fix the build",
        ],
        b"",
        &env,
    );
    assert!(start.status.success(), "{start:?}");
    let stop = |reply: &str| {
        let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": reply});
        let out = p.ralph_with(&["hook", "stop"], event.to_string().as_bytes(), &env);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    p.write("lib.txt", "changed\n");
    assert!(blocked(&stop("working")));
    let end = stop("<promise>DONE</promise>");
    assert!(!blocked(&end), "{end}");
    let status = p.ralph_with(&["status"], b"", &env);
    assert!(status.status.success(), "{status:?}");
    assert!(
        !marker.exists(),
        "the project's git ran: {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
}

/// Issue 46: `ralph run`, with and without `--sandbox`, takes git for its checkpoints and
/// status from outside the project only, and hands the agent a PATH without the project's
/// folders.
#[cfg(target_os = "linux")]
#[test]
fn ralph_run_never_runs_a_git_planted_in_the_project_sandboxed_or_not() {
    let sandboxed = crate::sandbox::bwrap_or_skip("security_path: ralph run --sandbox");
    for sandbox in [false, true].into_iter().filter(|s| !s || sandboxed) {
        let p = Project::new();
        let outside = tempfile::tempdir().unwrap();
        let marker = outside.path().join("ran");
        let path = planted_on_path(&p, &marker, outside.path());
        let agent = outside.path().join("agent.sh");
        std::fs::write(
            &agent,
            "#!/bin/sh\ncat > /dev/null\necho \"$PATH\" > agent-path.txt\n\
             echo more >> lib.txt\necho 'done <promise>DONE</promise>'\n",
        )
        .unwrap();
        set_mode(&agent, 0o755);
        let agent = agent.display().to_string();
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
            "test -f lib.txt",
            "--max-iterations",
            "3",
            "Fix the build",
        ]);
        let env = [("PATH", path.as_str())];
        let out = p.ralph_with(&args, b"", &env);
        let said = crate::support::text(&out);
        assert!(out.status.success(), "sandbox {sandbox}: {said}");
        assert!(said.contains("completed"), "sandbox {sandbox}: {said}");
        let status = p.ralph_with(&["status"], b"", &env);
        assert!(status.status.success(), "{status:?}");
        assert!(
            !marker.exists(),
            "sandbox {sandbox}: the project's git ran: {}",
            std::fs::read_to_string(&marker).unwrap_or_default()
        );
        if !sandbox {
            let seen = p.read("agent-path.txt");
            assert!(!seen.contains("node_modules"), "{seen}");
        }
    }
}
