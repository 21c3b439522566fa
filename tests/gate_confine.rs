//! The gate is confined (issue 45): every `--verify`/`--check` command runs in a bubblewrap
//! sandbox of its own, in the Stop hook and in `ralph run`: an empty HOME (a planted key
//! unread, `~/.bashrc` untouched), nothing written outside its folder, no network (a
//! listener on the host's loopback never hears from it), a private `/tmp` (a process the
//! agent left rewriting a file there cannot feed it, a server reached through a socket there
//! cannot start what outlives it). `--gate-sandbox off` runs it as before and says so;
//! under `ralph run --sandbox` the gate is always confined and `off` is refused.
//!
//! Needs `bwrap` (installed by `.ci/run`): without it these tests say they skipped, or fail
//! when `CI` is set.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;

use serde_json::{Value, json};

use crate::sandbox::bwrap_or_skip;
use crate::support::project::Project;
use crate::support::{blocked, text};

/// Arms a session loop whose gate is `gate` (promise DONE), with `extra` flags.
fn arm(p: &Project, gate: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "start",
        "--session-id",
        "s1",
        "--stuck-after",
        "0",
        "--completion-promise",
        "DONE",
        "--verify",
        gate,
    ];
    args.extend_from_slice(extra);
    args.push("Fix the build");
    let out = p.ralph_with(&args, b"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

/// One Stop hook with the promise; its answer.
fn promise(p: &Project) -> Value {
    let event = json!({"session_id": "s1", "cwd": p.root(), "last_assistant_message": "<promise>DONE</promise>"});
    let out = p.ralph_with(
        &["hook", "stop"],
        event.to_string().as_bytes(),
        &[("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")],
    );
    assert!(out.status.success(), "{}", text(&out));
    if out.stdout.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// A planted key and the user's own `.bashrc` in the test's HOME.
fn plant(p: &Project) {
    std::fs::create_dir_all(p.home().join(".ssh")).unwrap();
    std::fs::write(p.home().join(".ssh/id_test"), "PLANTED-KEY\n").unwrap();
    std::fs::write(p.home().join(".bashrc"), "# the user's own\n").unwrap();
}

/// A gate that tries each escape, writes what it got in the project, and passes.
fn escapes(outside: &Path) -> String {
    format!(
        "cat \"$HOME/.ssh/id_test\" > stolen.txt 2>/dev/null; \
         echo 'gate was here' >> \"$HOME/.bashrc\"; \
         echo escaped > '{}/escaped.txt'; \
         echo ran > ran.txt; exit 0",
        outside.display()
    )
}

fn assert_confined(p: &Project, outside: &Path) {
    assert_eq!(p.read("ran.txt"), "ran\n", "the gate never ran");
    assert_eq!(p.read_or_empty("stolen.txt"), "", "the gate read ~/.ssh");
    assert_eq!(
        std::fs::read_to_string(p.home().join(".bashrc")).unwrap(),
        "# the user's own\n"
    );
    assert!(
        !outside.join("escaped.txt").exists(),
        "the gate wrote outside its folder"
    );
}

#[test]
fn in_the_stop_hook_the_gate_reads_no_key_and_writes_neither_bashrc_nor_outside_its_folder() {
    if !bwrap_or_skip("gate_confine: hook") {
        return;
    }
    let p = Project::new();
    plant(&p);
    let outside = tempfile::tempdir().unwrap();
    let armed = arm(&p, &escapes(outside.path()), &[]);
    assert!(
        armed.contains("gate sandboxed (bubblewrap): an empty HOME"),
        "{armed}"
    );
    let answer = promise(&p);
    assert!(!blocked(&answer), "{answer}");
    assert_confined(&p, outside.path());
    let receipt = p.ralph_with(&["receipt"], b"", &[]);
    assert!(
        text(&receipt).contains("sandboxed (bubblewrap), no network"),
        "{}",
        text(&receipt)
    );
    let status = text(&p.ralph_with(&["status"], b"", &[]));
    assert!(status.contains("gate sandboxed (bubblewrap)"), "{status}");
    // `ralph receipt --recheck` runs the gate again, sandboxed as it was.
    std::fs::remove_file(p.path("ran.txt")).unwrap();
    let recheck = p.ralph_with(&["receipt", "--recheck"], b"", &[]);
    assert!(recheck.status.success(), "{}", text(&recheck));
    assert_confined(&p, outside.path());
}

#[test]
fn gate_sandbox_off_runs_the_gate_as_the_user_and_says_so() {
    if !bwrap_or_skip("gate_confine: off") {
        return;
    }
    let p = Project::new();
    plant(&p);
    let outside = tempfile::tempdir().unwrap();
    let armed = arm(&p, &escapes(outside.path()), &["--gate-sandbox", "off"]);
    assert!(
        armed.contains("gate not sandboxed (--gate-sandbox off): it runs as you"),
        "{armed}"
    );
    let answer = promise(&p);
    assert!(!blocked(&answer), "{answer}");
    // The same gate unconfined reaches all of it: the probe can tell.
    assert_eq!(p.read("stolen.txt"), "PLANTED-KEY\n");
    assert!(outside.path().join("escaped.txt").exists());
    let receipt = text(&p.ralph_with(&["receipt"], b"", &[]));
    assert!(
        receipt.contains("not sandboxed (--gate-sandbox off)"),
        "{receipt}"
    );
}

#[test]
fn without_network_a_gate_cannot_reach_a_listener_on_the_host_and_open_can() {
    if !bwrap_or_skip("gate_confine: network") {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let gate = format!("bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}'");
    let closed = Project::new();
    arm(&closed, &gate, &[]);
    let answer = promise(&closed);
    assert!(blocked(&answer), "the gate reached the host: {answer}");
    assert!(
        listener.accept().is_err(),
        "a connection came from the gate without network"
    );
    let open = Project::new();
    let armed = arm(&open, &gate, &["--gate-network", "open"]);
    assert!(armed.contains("the host's network"), "{armed}");
    let answer = promise(&open);
    assert!(!blocked(&answer), "{answer}");
    assert!(
        listener.accept().is_ok(),
        "no connection with --gate-network open"
    );
}

/// The host's processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'));
            !zombie
                && std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn nothing_a_sandboxed_gate_starts_outlives_it() {
    if !bwrap_or_skip("gate_confine: background") {
        return;
    }
    // A duration no other process has: the marker to find its sleeps by on the host.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let marker = format!("86399.{nanos:09}");
    let p = Project::new();
    let gate = format!(
        "sleep {marker} & setsid sleep {marker} </dev/null >/dev/null 2>&1 & \
         (sh -c 'sleep {marker} &') ; echo started > started.txt; exit 0"
    );
    arm(&p, &gate, &[]);
    let answer = promise(&p);
    assert!(!blocked(&answer), "{answer}");
    assert_eq!(p.read("started.txt"), "started\n");
    // Killing is asynchronous: give it a moment, however loaded the machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut left = processes_with(&marker);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        left = processes_with(&marker);
    }
    for pid in &left {
        let _ = std::process::Command::new("kill")
            .args(["-9", pid])
            .status();
    }
    assert!(left.is_empty(), "the gate's sleeps outlived it: {left:?}");
}

/// Kills the process whose pid `file` names (what a test started), if it is there.
fn end(file: &Path) {
    if let Ok(pid) = std::fs::read_to_string(file) {
        let _ = std::process::Command::new("kill")
            .args(["-9", pid.trim()])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

#[test]
fn what_the_agent_left_running_in_tmp_cannot_feed_the_gate() {
    if !bwrap_or_skip("gate_confine: leftover") {
        return;
    }
    // The agent's leftover: rewrites a verdict under /tmp for as long as it lives.
    let tmp = tempfile::tempdir().unwrap();
    let verdict = tmp.path().join("verdict");
    let pid = tmp.path().join("pid");
    let leftover = format!(
        "echo $$ > '{}'; while :; do echo pass > '{}'; sleep 0.05; done",
        pid.display(),
        verdict.display()
    );
    let mut child = std::process::Command::new("sh")
        .args(["-c", &leftover])
        .spawn()
        .unwrap();
    while !verdict.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let p = Project::new();
    arm(&p, &format!("grep -q pass '{}'", verdict.display()), &[]);
    let answer = promise(&p);
    let _ = child.kill();
    let _ = child.wait();
    end(&pid);
    assert!(
        blocked(&answer),
        "the leftover's verdict passed the gate: {answer}"
    );
}

#[test]
fn a_server_the_user_runs_cannot_start_for_the_gate_what_outlives_it() {
    if !bwrap_or_skip("gate_confine: server") {
        return;
    }
    // A server the user already runs (as tmux is, with its socket under /tmp): it runs
    // whatever comes down its pipe, outside any box the gate is in.
    let tmp = tempfile::tempdir().unwrap();
    let pipe = tmp.path().join("requests");
    let escaped = tmp.path().join("escaped");
    let pid = tmp.path().join("pid");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&pipe)
            .status()
            .unwrap()
            .success()
    );
    let server = format!(
        "echo $$ > '{}'; while :; do read -r cmd < '{}' && sh -c \"$cmd\"; done",
        pid.display(),
        pipe.display()
    );
    let mut child = std::process::Command::new("sh")
        .args(["-c", &server])
        .spawn()
        .unwrap();
    let p = Project::new();
    // Unconfined, the request goes through and the gate waits until it took effect.
    let gate = format!(
        "echo 'echo outlived > {e}' > '{pipe}' && while [ ! -s '{e}' ]; do sleep 0.05; done",
        e = escaped.display(),
        pipe = pipe.display()
    );
    arm(&p, &gate, &[]);
    let answer = promise(&p);
    let _ = child.kill();
    let _ = child.wait();
    end(&pid);
    assert!(
        !escaped.exists(),
        "the server ran the gate's request outside the gate: {answer}"
    );
    assert!(blocked(&answer), "{answer}");
}

/// A scripted agent that says the promise at once.
fn agent(dir: &Path) -> String {
    let path = dir.join("agent.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\ncat > /dev/null\necho 'done <promise>DONE</promise>'\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn run(p: &Project, agent: &str, gate: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "run",
        "--agent",
        agent,
        "--completion-promise",
        "DONE",
        "--verify",
        gate,
        "--max-iterations",
        "2",
    ];
    args.extend_from_slice(extra);
    args.push("Probe the gate");
    p.ralph_with(&args, b"", &[])
}

#[test]
fn in_ralph_run_the_gate_is_confined_and_under_sandbox_always() {
    if !bwrap_or_skip("gate_confine: run") {
        return;
    }
    let tools = tempfile::tempdir().unwrap();
    let agent = agent(tools.path());
    for sandbox in [false, true] {
        let p = Project::new();
        plant(&p);
        let outside = tempfile::tempdir().unwrap();
        let extra: &[&str] = if sandbox { &["--sandbox"] } else { &[] };
        let out = run(&p, &agent, &escapes(outside.path()), extra);
        let said = text(&out);
        assert!(said.contains("completed"), "{said}");
        assert!(said.contains("Gate: sandboxed (bubblewrap)"), "{said}");
        assert_confined(&p, outside.path());
    }
    // The agent sandboxed, the gate unconfined: refused before anything is armed.
    let p = Project::new();
    let out = run(&p, &agent, "true", &["--sandbox", "--gate-sandbox", "off"]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("--gate-sandbox off"), "{said}");
    assert!(!p.exists(".claude/ralph-loop.local.md"), "{said}");
}
