//! `ralph say` (and `--gate`, and the answer to an agent's `<question>`) through the real
//! binary during a `ralph run`, with a scripted agent that waits for the test at each call.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::project::Project;
use crate::support::text;

/// The Nth call saves its prompt as `.agent/prompt-N`, waits (up to two minutes) for
/// `.agent/go-N`, then prints `.agent/reply-N` (or the last reply written).
const AGENT: &str = r#"n=$(cat .agent/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .agent/n
cat > .agent/prompt-$n.tmp; mv .agent/prompt-$n.tmp .agent/prompt-$n
i=0; while [ ! -f .agent/go-$n ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done
if [ -f .agent/reply-$n ]; then cat .agent/reply-$n; else cat "$(ls .agent/reply-* | sort -t- -k2 -n | tail -n 1)"; fi"#;

/// A project whose held agent prints `replies` in turn.
fn held(replies: &[&str]) -> Project {
    let p = Project::new();
    std::fs::create_dir_all(p.path(".agent")).unwrap();
    p.write(".agent/agent.sh", AGENT);
    for (i, r) in replies.iter().enumerate() {
        p.write(&format!(".agent/reply-{}", i + 1), r);
    }
    p
}

fn start(p: &Project, flags: &[&str]) -> Child {
    let mut args = vec!["run", "--agent", "sh .agent/agent.sh"];
    args.extend_from_slice(flags);
    p.command(&args).spawn().unwrap()
}

/// Waits (generously: the machine may be loaded) for the agent's Nth prompt.
fn prompt(p: &Project, n: usize) -> String {
    let path = p.path(&format!(".agent/prompt-{n}"));
    let started = Instant::now();
    while !path.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the agent was never called for prompt {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::read_to_string(path).unwrap()
}

fn go(p: &Project, n: usize) {
    p.write(&format!(".agent/go-{n}"), "");
}

fn say(p: &Project, args: &[&str]) -> Output {
    let mut all = vec!["say"];
    all.extend_from_slice(args);
    let out = p.command(&all).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    out
}

fn log_lines(p: &Project) -> Vec<Value> {
    let out = p.command(&["log", "--json"]).output().unwrap();
    text(&out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn status(p: &Project) -> Value {
    let out = p.command(&["status", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn guidance_reaches_the_next_iteration_once_and_is_logged_with_it() {
    let p = held(&["working"]);
    let run = start(&p, &["--max-iterations", "3", "Build the parser"]);
    assert!(!prompt(&p, 1).contains("Guidance from the user"));
    let out = say(&p, &["check auth.rs, not auth_old.rs"]);
    assert!(text(&out).contains("Guidance queued"), "{}", text(&out));
    let l = &status(&p)["loops"][0];
    assert_eq!(
        l["guidance_pending"][0], "check auth.rs, not auth_old.rs",
        "{l}"
    );
    go(&p, 1);
    let second = prompt(&p, 2);
    assert!(
        second
            .contains("## Guidance from the user (ralph say)\n\n- check auth.rs, not auth_old.rs"),
        "{second}"
    );
    go(&p, 2);
    assert!(!prompt(&p, 3).contains("auth.rs"), "delivered once");
    go(&p, 3);
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let carried: Vec<Value> = log_lines(&p)
        .into_iter()
        .filter(|l| l.get("guidance").is_some())
        .map(|l| l["next_iteration"].clone())
        .collect();
    assert_eq!(
        carried,
        [Value::from(2)],
        "logged with the iteration that carried it"
    );
}

#[test]
fn gate_guidance_refuses_the_first_promise_once_and_accepts_the_second() {
    let p = held(&[
        "working",
        "done\n<promise>DONE</promise>",
        "checked it\n<promise>DONE</promise>",
    ]);
    let run = start(
        &p,
        &[
            "--max-iterations",
            "5",
            "--completion-promise",
            "DONE",
            "Task",
        ],
    );
    prompt(&p, 1);
    say(&p, &["--gate", "run the migration tests first"]);
    go(&p, 1);
    assert!(prompt(&p, 2).contains("run the migration tests first (must be heeded"));
    go(&p, 2);
    let third = prompt(&p, 3);
    assert!(
        third.contains("The promise was refused once")
            && third.contains("- run the migration tests first"),
        "{third}"
    );
    go(&p, 3);
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let l = &status(&p)["loops"][0];
    assert_eq!(
        (l["outcome"].as_str(), l["iteration"].as_u64()),
        (Some("completed"), Some(3)),
        "{l}"
    );
    assert_eq!(
        l["verify_failures"], 1,
        "counted like a gate's refusal: {l}"
    );
}

#[test]
fn a_question_pauses_the_run_until_ralph_say_answers_it() {
    let p = held(&[
        "Two ways to go.\n<question>Postgres or SQLite?</question>",
        "using it",
    ]);
    let run = start(&p, &["--max-iterations", "2", "Task"]);
    prompt(&p, 1);
    go(&p, 1);
    let started = Instant::now();
    loop {
        let l = status(&p)["loops"][0].clone();
        if l["question"] == "Postgres or SQLite?" {
            assert_eq!(l["state"], "paused", "{l}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "never paused on the question: {l}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!p.path(".agent/prompt-2").exists(), "the run waits");
    let out = say(&p, &["SQLite"]);
    assert!(text(&out).contains("Answered"), "{}", text(&out));
    let second = prompt(&p, 2);
    assert!(second.contains("- SQLite"), "{second}");
    // The stop that asked was not counted: this is iteration 1 again, then 2.
    assert!(second.contains("iteration 1 of 2"), "{second}");
    go(&p, 2);
    assert!(!prompt(&p, 3).contains("SQLite"), "delivered once");
    go(&p, 3);
    let out = run.wait_with_output().unwrap();
    assert!(
        text(&out).contains("the agent asks: Postgres or SQLite?"),
        "{}",
        text(&out)
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
}

#[test]
fn say_refuses_without_a_loop_and_names_the_fix() {
    let p = Project::new();
    let out = p.command(&["say", "hello"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no loop armed here"), "{}", text(&out));
}

/// A `tmux` server of this test's own (its socket in the project), holding `ralph watch`.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(p: &Project, width: u16, height: u16) -> Tmux {
        let tmux = Tmux {
            socket: p.path(".tmux-socket").display().to_string(),
        };
        let env: Vec<String> = p
            .user_env()
            .into_iter()
            .map(|(k, v)| format!("{k}='{v}'"))
            .collect();
        let shell = format!(
            "env -i PATH=/usr/bin:/bin TERM=xterm-256color {} '{}' watch",
            env.join(" "),
            crate::support::BIN
        );
        let ok = tmux
            .command()
            .args([
                "new-session",
                "-d",
                "-x",
                &width.to_string(),
                "-y",
                &height.to_string(),
            ])
            .arg("-c")
            .arg(p.root())
            .arg(shell)
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux did not start");
        tmux
    }

    fn command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new("tmux");
        cmd.args(["-S", &self.socket, "-f", "/dev/null"]);
        cmd
    }

    fn screen(&self) -> String {
        let out = self
            .command()
            .args(["capture-pane", "-p"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits (generously) until the screen shows what `shows` looks for.
    fn until(&self, what: &str, shows: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if shows(&screen) {
                return screen;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the screen never showed {what}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut cmd = self.command();
        cmd.arg("send-keys").args(keys);
        assert!(cmd.status().unwrap().success());
    }

    /// Whether `ralph watch` still runs in the pane.
    fn running(&self) -> bool {
        self.command()
            .args(["list-panes", "-F", "#{pane_dead}"])
            .output()
            .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").status();
    }
}

/// The row of the loop `ralph` on the screen.
fn loop_row(screen: &str) -> String {
    screen
        .lines()
        .find(|l| l.starts_with("› ralph ") || l.starts_with("  ralph "))
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn watch_shows_the_iteration_advancing_and_its_s_key_reaches_the_next_prompt_only() {
    // Four different replies: the same one thrice would end the loop as stuck.
    let p = held(&["one", "two", "three", "four"]);
    let run = start(&p, &["--max-iterations", "4", "Build the parser"]);
    prompt(&p, 1);
    let tmux = Tmux::start(&p, 150, 30);
    tmux.until("iteration 1 driven by ralph run", |s| {
        let row = loop_row(s);
        row.contains("ralph run") && row.contains(" 1/4 ")
    });
    go(&p, 1);
    prompt(&p, 2);
    tmux.until("iteration 2", |s| loop_row(s).contains(" 2/4 "));
    tmux.keys(&["s"]);
    tmux.until("the say prompt", |s| s.contains("say (Enter sends"));
    tmux.keys(&["-l", "use the v2 API"]);
    tmux.keys(&["Enter"]);
    let shown = tmux.until("the guidance queued", |s| s.contains("Guidance queued"));
    assert!(
        shown.contains("guidance for the next iteration: use the v2 API"),
        "{shown}"
    );
    go(&p, 2);
    assert!(prompt(&p, 3).contains("- use the v2 API"));
    tmux.until("iteration 3 and the guidance delivered", |s| {
        loop_row(s).contains(" 3/4 ") && s.contains("guidance delivered in it 3: use the v2 API")
    });
    go(&p, 3);
    assert!(!prompt(&p, 4).contains("use the v2 API"), "delivered once");
    // Quitting the screen leaves the loop running.
    tmux.keys(&["q"]);
    let started = Instant::now();
    while tmux.running() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "q did not quit"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status(&p)["loops"][0]["state"], "active");
    go(&p, 4);
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
}

#[test]
fn watch_without_a_terminal_points_at_status_json() {
    let p = Project::new();
    let out = p.command(&["watch"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("ralph status --json"), "{}", text(&out));
}

#[test]
fn watch_keys_pause_resume_add_iterations_and_cancel_with_a_confirmation() {
    let p = Project::new();
    // The user's terminal, open before the loop began: `+` raises a bound only on one
    // such (issue 46). The check goes by whole seconds. `tmux new-session -d` returns
    // once the pane (the session's leader) has started.
    let tmux = Tmux::start(&p, 150, 30);
    crate::support::project::until_younger_loops_tell_apart();
    let out = p
        .command(&["start", "--max-iterations", "20", "Write the guide"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    tmux.until("the loop", |s| loop_row(s).contains(" 1/20 "));
    tmux.keys(&["p"]);
    tmux.until("it paused", |s| loop_row(s).contains(" paused "));
    assert_eq!(status(&p)["loops"][0]["state"], "paused");
    tmux.keys(&["p"]);
    tmux.until("it resumed", |s| loop_row(s).contains(" active "));
    tmux.keys(&["+"]);
    tmux.until("the count prompt", |s| s.contains("iterations to add"));
    tmux.keys(&["5", "Enter"]);
    tmux.until("the raised limit", |s| loop_row(s).contains(" 1/25 "));
    tmux.keys(&["c"]);
    tmux.until("the confirmation", |s| s.contains("y ends the loop now"));
    tmux.keys(&["n"]);
    tmux.until("the loop kept", |s| {
        s.contains("Kept: nothing was cancelled.")
    });
    assert_eq!(status(&p)["loops"][0]["state"], "active");
    tmux.keys(&["c"]);
    tmux.until("the confirmation", |s| s.contains("y ends the loop now"));
    tmux.keys(&["y"]);
    tmux.until("the loop cancelled", |s| {
        loop_row(s).contains("ended: cancelled")
    });
    assert_eq!(status(&p)["loops"][0]["outcome"], "cancelled");
}

/// Issue 46: an agent can run `ralph watch` in a terminal it opens itself (tmux,
/// `script`); on a terminal whose session began after the loop did, `+` raises nothing.
#[test]
fn watch_plus_on_a_terminal_younger_than_the_loop_raises_nothing() {
    let p = Project::new();
    let out = p
        .command(&["start", "--max-iterations", "20", "Write the guide"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let tmux = Tmux::start(&p, 150, 30);
    tmux.until("the loop", |s| loop_row(s).contains(" 1/20 "));
    tmux.keys(&["+"]);
    tmux.until("the count prompt", |s| s.contains("iterations to add"));
    tmux.keys(&["5", "Enter"]);
    let shown = tmux.until("the refusal", |s| s.contains("refused"));
    assert!(
        shown.contains("session began after the loop did"),
        "{shown}"
    );
    assert_eq!(status(&p)["loops"][0]["max_iterations"], 20);
}
