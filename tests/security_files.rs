//! Files under a project, tried as an attacker who controls the checkout
//! would: links planted at every path ralph creates (learnt from an ordinary
//! run), FIFOs, `/dev/zero`, links at temp names, Latin-1 bytes, a 0600
//! mode, over-long names and a held lock. Everything runs the real binary
//! with `HOME` and `XDG_STATE_HOME` in a scratch folder.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#![cfg(unix)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::support::{BIN, client, ralph_command, scrub};

/// Far beyond any honest command on a loaded machine; a hang fails the test.
const DEADLINE: Duration = Duration::from_secs(60);

/// What one command did.
#[derive(Debug)]
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Out {
    /// The documented exit codes: 0, 1 (failure), 2 (usage), 3 (`ralph run`:
    /// the loop ended otherwise than completed). Never a panic or a signal.
    fn documented(&self, what: &str) {
        assert!(
            matches!(self.code, Some(0..=3)),
            "{what}: undocumented exit {:?}\nstdout: {}\nstderr: {}",
            self.code,
            self.stdout,
            self.stderr
        );
    }

    /// The hook's contract: exit 0, nothing or exactly one JSON object.
    fn hook_answer(&self, what: &str) -> Option<Value> {
        assert_eq!(self.code, Some(0), "{what}: the hook must exit 0: {self:?}");
        if self.stdout.is_empty() {
            return None;
        }
        assert_eq!(self.stdout.trim().lines().count(), 1, "{what}: {self:?}");
        let v: Value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{what}: invalid JSON {e}: {self:?}"));
        assert!(v.is_object(), "{what}: {v}");
        Some(v)
    }
}

fn message(answer: &Option<Value>) -> String {
    answer
        .as_ref()
        .and_then(|v| v["systemMessage"].as_str())
        .unwrap_or_default()
        .to_owned()
}

fn blocked(answer: &Option<Value>) -> bool {
    answer.as_ref().and_then(|v| v["decision"].as_str()) == Some("block")
}

/// A scratch world: `project/` (a git repository), `outside/` (what an
/// attacker aims at: a sentinel file and an empty sentinel folder), and a
/// home and state folder for the user.
struct World {
    base: tempfile::TempDir,
    /// When recording: every path seen under the project after any command.
    seen: std::sync::Mutex<Option<BTreeMap<String, bool>>>,
}

const SENTINEL_TEXT: &str = "the user's own file\n";

impl World {
    fn new() -> Self {
        let base = tempfile::tempdir().unwrap();
        for d in ["project/.claude", "outside/sentinel-dir", "home", "state"] {
            fs::create_dir_all(base.path().join(d)).unwrap();
        }
        fs::write(base.path().join("outside/sentinel"), SENTINEL_TEXT).unwrap();
        fs::write(
            base.path().join("home/agent.sh"),
            "cat > /dev/null\necho \"${AGENT_REPLY:-<promise>DONE</promise>}\"\n",
        )
        .unwrap();
        let git = Command::new("git")
            .args(["init", "-q"])
            .current_dir(base.path().join("project"))
            .env("HOME", base.path().join("home"))
            .status()
            .unwrap();
        assert!(git.success());
        Self {
            base,
            seen: std::sync::Mutex::new(None),
        }
    }

    fn root(&self) -> PathBuf {
        self.base.path().join("project")
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    fn home(&self) -> PathBuf {
        self.base.path().join("home")
    }

    fn ralph_with(&self, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Out {
        let mut cmd = ralph_command();
        cmd.args(args)
            .current_dir(self.root())
            .env("HOME", self.home())
            .env("XDG_STATE_HOME", self.base.path().join("state"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = run_bounded(cmd, stdin);
        if let Some(seen) = self.seen.lock().unwrap().as_mut() {
            seen.extend(paths_under(&self.root()));
        }
        out
    }

    fn ralph(&self, args: &[&str]) -> Out {
        self.ralph_with(args, b"", &[])
    }

    fn stop(&self, session: &str, reply: &str) -> Option<Value> {
        self.stop_event(json!({
            "session_id": session,
            "cwd": self.root(),
            "hook_event_name": "Stop",
            "stop_hook_active": true,
            "last_assistant_message": reply,
        }))
    }

    fn stop_event(&self, event: Value) -> Option<Value> {
        let out = self.ralph_with(&["hook", "stop"], event.to_string().as_bytes(), &[]);
        out.hook_answer(&format!("hook stop {event}"))
    }

    fn start(&self, name: &str, session: &str, prompt: &str) -> Out {
        self.ralph_with(
            &[
                "start",
                "--name",
                name,
                "--session-id",
                session,
                "--completion-promise",
                "DONE",
                "--max-iterations",
                "10",
            ],
            prompt.as_bytes(),
            &[],
        )
    }

    /// The attacker's target is exactly as it was, and nothing new appeared.
    fn outside_untouched(&self, what: &str) {
        let outside = self.base.path().join("outside");
        assert_eq!(
            fs::read_to_string(outside.join("sentinel")).unwrap(),
            SENTINEL_TEXT,
            "{what}: the sentinel changed"
        );
        let mut names: Vec<String> = fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["sentinel", "sentinel-dir"], "{what}");
        assert_eq!(
            fs::read_dir(outside.join("sentinel-dir")).unwrap().count(),
            0,
            "{what}: something was written into the sentinel folder"
        );
    }

    /// Plants a relative link at `rel` (inside the project) to `target`
    /// (`sentinel` or `sentinel-dir` outside it); its parents are real folders.
    fn plant_link(&self, rel: &str, target: &str) {
        let link = self.path(rel);
        let parent = link.parent().unwrap();
        fs::create_dir_all(parent).unwrap();
        let depth = Path::new(rel).components().count(); // from the link's folder up to base
        let up = "../".repeat(depth);
        symlink(format!("{up}outside/{target}"), &link).unwrap();
        assert!(
            fs::metadata(&link).is_ok(),
            "the planted link {rel} must resolve"
        );
    }

    fn mkfifo(&self, rel: &str) {
        let path = self.path(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&path);
        let ok = Command::new("mkfifo").arg(&path).status().unwrap();
        assert!(ok.success());
    }

    fn history(&self) -> Vec<String> {
        fs::read_dir(self.path(".claude/ralph/history"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Runs a command with a deadline, collecting its output on threads (so a
/// chatty child never blocks) and killing it if it hangs.
fn run_bounded(mut cmd: Command, stdin: &[u8]) -> Out {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out_pipe.read_to_end(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} hung for over {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    let _ = writer.join();
    Out {
        code: status.code(),
        stdout: String::from_utf8_lossy(&reader.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned(),
        took,
    }
}

/// An ordinary life of a project with ralph: `init`, a loop through a few
/// stops, pause and resume, an ending into the history, status and log,
/// `ralph run` twice (the second on a new PRD branch, so the PRD is
/// archived), a second loop cancelled, the status line. With `strict`, each
/// step must also do what it does in a clean project; otherwise every step
/// only has to keep its contract (the hook: exit 0 and a valid answer; the
/// CLI: a documented exit code).
fn lifecycle(w: &World, strict: bool) {
    let cli = |args: &[&str], stdin: &[u8]| {
        let out = w.ralph_with(args, stdin, &[]);
        out.documented(&args.join(" "));
        if strict {
            assert!(
                matches!(out.code, Some(0)),
                "`ralph {}` in a clean project: {out:?}",
                args.join(" ")
            );
        }
        out
    };
    cli(&["init"], b"");
    cli(
        &[
            "start",
            "--name",
            "demo",
            "--session-id",
            "S1",
            "--completion-promise",
            "DONE",
            "--max-iterations",
            "10",
        ],
        b"Build the thing",
    );
    for reply in ["working", "still working"] {
        let answer = w.stop("S1", reply);
        if strict {
            assert!(blocked(&answer), "{answer:?}");
        }
    }
    cli(&["pause", "--name", "demo"], b"");
    w.stop("S1", "paused turn");
    cli(&["resume", "--name", "demo"], b"");
    let answer = w.stop("S1", "<promise>DONE</promise>");
    if strict {
        assert!(message(&answer).contains("demo"), "{answer:?}");
        assert!(w.history().iter().any(|n| n.ends_with("-demo.md")));
    }
    cli(&["status"], b"");
    cli(&["status", "--json"], b"");
    cli(&["log", "--name", "demo"], b"");
    let agent = format!("sh {}", w.home().join("agent.sh").display());
    let run = [
        "run",
        "--agent",
        agent.as_str(),
        "--name",
        "runner",
        "--completion-promise",
        "DONE",
        "--max-iterations",
        "3",
        "Do the stories",
    ];
    cli(&run, b"");
    // A run handed back after one iteration leaves its loop and log behind.
    let out = w.ralph_with(
        &[
            "run",
            "--agent",
            agent.as_str(),
            "--name",
            "handed",
            "--hand-back-after",
            "1",
            "Keep going",
        ],
        b"",
        &[("AGENT_REPLY", "still working")],
    );
    out.documented("run --hand-back-after 1");
    if strict {
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    // A new branch in the PRD: the next run archives the previous one. The
    // test edits the PRD only when it is a regular file (never through a link).
    let prd = w.path("ralph/prd.json");
    if fs::symlink_metadata(&prd).is_ok_and(|m| m.is_file())
        && fs::symlink_metadata(w.path("ralph")).is_ok_and(|m| m.is_dir())
    {
        let text = fs::read_to_string(&prd).unwrap();
        let mut v: Value = serde_json::from_str(&text).unwrap();
        v["branchName"] = json!("ralph/second");
        fs::write(&prd, v.to_string()).unwrap();
    }
    let out = cli(&run, b"");
    if strict {
        assert!(out.stdout.contains("archived"), "{out:?}");
    }
    cli(
        &[
            "start",
            "--name",
            "second",
            "--session-id",
            "S2",
            "--max-iterations",
            "5",
        ],
        b"Another task",
    );
    cli(&["cancel", "--all"], b"");
    let status = json!({"session_id": "S1", "workspace": {"project_dir": w.root()}});
    cli(&["statusline"], status.to_string().as_bytes());
}

/// Every path under the project (except `.git`), with whether it is a folder.
fn paths_under(root: &Path) -> BTreeMap<String, bool> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, bool>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            if rel == ".git" {
                continue;
            }
            let is_dir = entry.file_type().unwrap().is_dir();
            out.insert(rel, is_dir);
            if is_dir {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn planted_links_at_every_path_ralph_creates_lead_nowhere() {
    let clean = World::new();
    *clean.seen.lock().unwrap() = Some(BTreeMap::new());
    lifecycle(&clean, true);
    let learnt = clean.seen.lock().unwrap().take().unwrap();
    // Sanity: the ordinary run reached every kind of file ralph writes.
    for expected in [
        ".claude/demo-loop.local.md",
        ".claude/handed-loop.local.md",
        ".claude/ralph/logs/handed.jsonl",
        ".claude/ralph/lock",
        ".claude/ralph/logs",
        ".claude/ralph/logs/demo.jsonl",
        ".claude/ralph/history",
        ".claude/ralph/last-run.json",
        "ralph/prd.json",
        "ralph/progress.txt",
        "ralph/archive",
    ] {
        assert!(learnt.contains_key(expected), "{expected} in {learnt:?}");
    }
    assert!(learnt.len() >= 15, "{learnt:?}");
    clean.outside_untouched("the ordinary run");
    // A history record's name starts with the second it ended in: its
    // learnt name is planted again, in the same project, with the stamps of
    // the coming seconds.
    let now = ralph_state::time::Timestamp::now().0;
    for (rel, is_dir) in &learnt {
        let mut at = vec![rel.clone()];
        if let Some(name) = rel.strip_prefix(".claude/ralph/history/") {
            let rest = &name[16..]; // after `YYYYMMDDTHHMMSSZ`
            at.extend((0..30).map(|s| {
                let stamp = ralph_state::time::Timestamp(now + s).compact();
                format!(".claude/ralph/history/{stamp}{rest}")
            }));
            at.dedup();
        }
        // A file's path gets a link to the sentinel file; a folder's path
        // gets a link to the sentinel folder, and also one to the file.
        let targets: &[&str] = if *is_dir {
            &["sentinel-dir", "sentinel"]
        } else {
            &["sentinel"]
        };
        for target in targets {
            let w = World::new();
            if rel == ".claude" {
                fs::remove_dir(w.path(".claude")).unwrap();
            }
            for path in &at {
                if fs::symlink_metadata(w.path(path)).is_err() {
                    w.plant_link(path, target);
                }
            }
            lifecycle(&w, false);
            w.outside_untouched(&format!("link at {rel} -> {target}"));
            for path in &at {
                assert!(
                    fs::symlink_metadata(w.path(path)).is_ok_and(|m| m.file_type().is_symlink()),
                    "the link at {path} was replaced or removed"
                );
            }
        }
    }
}

#[test]
fn fifos_at_the_lock_the_log_a_loop_file_and_the_transcript_never_hang_the_hook() {
    // The lock.
    let w = World::new();
    assert_eq!(w.start("demo", "S", "Task").code, Some(0));
    w.mkfifo(".claude/ralph/lock");
    let started = Instant::now();
    let answer = w.stop("S", "working");
    // Below the hook's 60 s deadline, which would answer a hung stop (a hang guard).
    assert!(started.elapsed() < Duration::from_secs(45));
    assert!(!blocked(&answer));
    assert!(message(&answer).contains("FIFO"), "{answer:?}");
    let out = w.ralph(&["cancel", "--all"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("FIFO"), "{out:?}");

    // The decision log: the loop still runs, and the notice says why nothing is logged.
    let w = World::new();
    assert_eq!(w.start("demo", "S", "Task").code, Some(0));
    w.mkfifo(".claude/ralph/logs/demo.jsonl");
    let answer = w.stop("S", "working");
    assert!(blocked(&answer), "{answer:?}");
    assert!(message(&answer).contains("FIFO"), "{answer:?}");
    assert_eq!(w.ralph(&["cancel", "--all"]).code, Some(0));

    // A loop file: the good loop runs, the FIFO gets a notice.
    let w = World::new();
    assert_eq!(w.start("good", "S", "Task").code, Some(0));
    w.mkfifo(".claude/evil-loop.local.md");
    let answer = w.stop("S", "working");
    assert!(blocked(&answer), "{answer:?}");
    assert!(
        message(&answer).contains("evil-loop.local.md"),
        "{answer:?}"
    );
    assert!(message(&answer).contains("FIFO"), "{answer:?}");

    // The transcript, reached through a link inside the project.
    let w = World::new();
    assert_eq!(w.start("demo", "S", "Task").code, Some(0));
    w.mkfifo("fifo");
    symlink("../fifo", w.path(".claude/transcript.jsonl")).unwrap();
    let started = Instant::now();
    let answer = w.stop_event(json!({
        "session_id": "S",
        "cwd": w.root(),
        "transcript_path": w.path(".claude/transcript.jsonl"),
    }));
    // Below the hook's 60 s deadline, which would answer a hung stop (a hang guard).
    assert!(started.elapsed() < Duration::from_secs(45));
    assert!(message(&answer).contains("transcript"), "{answer:?}");
    assert!(message(&answer).contains("FIFO"), "{answer:?}");
    w.outside_untouched("fifos");
}

#[test]
fn hard_links_at_the_log_and_the_lock_lead_nowhere() {
    let w = World::new();
    assert_eq!(w.start("demo", "S", "Task").code, Some(0));
    let sentinel = w.base.path().join("outside/sentinel");
    fs::create_dir_all(w.path(".claude/ralph/logs")).unwrap();
    fs::hard_link(&sentinel, w.path(".claude/ralph/logs/demo.jsonl")).unwrap();
    let answer = w.stop("S", "working");
    assert!(blocked(&answer), "the loop still runs: {answer:?}");
    assert!(message(&answer).contains("hard links"), "{answer:?}");
    fs::remove_file(w.path(".claude/ralph/lock")).unwrap();
    fs::hard_link(&sentinel, w.path(".claude/ralph/lock")).unwrap();
    let answer = w.stop("S", "working");
    assert!(message(&answer).contains("hard links"), "{answer:?}");
    assert_eq!(w.ralph(&["cancel", "--all"]).code, Some(1));
    w.outside_untouched("hard links");
}

#[test]
fn dev_zero_and_huge_files_in_the_history_are_refused_quickly() {
    let w = World::new();
    assert_eq!(w.start("demo", "S", "Task").code, Some(0));
    assert!(message(&w.stop("S", "<promise>DONE</promise>")).contains("demo"));
    let history = w.path(".claude/ralph/history");
    symlink("/dev/zero", history.join("20990101T000000Z-zero.md")).unwrap();
    symlink("/dev/zero", history.join("20990101T000000Z-zero.log.jsonl")).unwrap();
    // A sparse 1 GiB record: over the cap by its size, never read.
    let huge = fs::File::create(history.join("20980101T000000Z-huge.md")).unwrap();
    huge.set_len(1 << 30).unwrap();
    // Under a 128 MiB address-space limit: reading any of them whole would fail.
    let limited = |args: &str| {
        let mut cmd = Command::new("sh");
        scrub(&mut cmd)
            .arg("-c")
            .arg(format!("ulimit -v 131072 && exec \"$0\" {args}"))
            .arg(BIN)
            .current_dir(w.root())
            .env("HOME", w.home())
            .env("XDG_STATE_HOME", w.base.path().join("state"));
        run_bounded(cmd, b"")
    };
    for args in [
        "status --json",
        "log --name zero",
        "log --name huge",
        "status",
    ] {
        let out = limited(args);
        assert!(out.took < Duration::from_secs(45), "{args}: {out:?}");
        out.documented(args);
        if args == "status --json" {
            assert_eq!(out.code, Some(0), "{out:?}");
            let v: Value = serde_json::from_str(&out.stdout).unwrap();
            let loops = v["loops"].as_array().unwrap();
            let zero = loops.iter().find(|l| l["name"] == "zero").unwrap();
            assert_eq!(zero["state"], "unreadable");
            assert!(zero["error"].as_str().unwrap().contains("symbolic link"));
            let huge = loops.iter().find(|l| l["name"] == "huge").unwrap();
            assert!(huge["error"].as_str().unwrap().contains("larger than"));
            assert!(loops.iter().any(|l| l["name"] == "demo"), "{v}");
        }
    }
}

#[test]
fn planted_links_at_temp_names_cannot_redirect_a_write() {
    let w = World::new();
    assert_eq!(w.start("demo", "S", "Task").code, Some(0));
    // One link per possible pid at the old temp-name pattern, and a few at
    // the new prefix: ralph's temp names are random and created exclusively.
    let claude = w.path(".claude");
    for pid in 1..=32_768u32 {
        symlink(
            "../../outside/sentinel",
            claude.join(format!(".demo-loop.local.md.{pid}.0.tmp")),
        )
        .unwrap();
    }
    for guess in ["", "000000000000", "aaaaaaaaaaaa", "x"] {
        symlink(
            "../../outside/sentinel",
            claude.join(format!(".ralph-tmp-{guess}")),
        )
        .unwrap();
        symlink(
            "../../../outside/sentinel",
            w.path(&format!(".claude/ralph/.ralph-tmp-{guess}")),
        )
        .unwrap();
    }
    // Made old enough for the stale-temp sweep, which still must not follow
    // or remove a link; a stale regular temp file beside them does go.
    fs::write(claude.join(".ralph-tmp-stale"), "left by a crash").unwrap();
    let touched = Command::new("touch")
        .args(["-h", "-d", "2 hours ago"])
        .args(
            fs::read_dir(&claude)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_str().unwrap().contains(".ralph-tmp-")),
        )
        .status()
        .unwrap();
    assert!(touched.success());
    let old = fs::symlink_metadata(claude.join(".ralph-tmp-x"))
        .unwrap()
        .modified()
        .unwrap();
    assert!(SystemTime::now().duration_since(old).unwrap() > Duration::from_secs(3000));
    for reply in ["one", "two", "three"] {
        assert!(blocked(&w.stop("S", reply)));
    }
    assert_eq!(w.ralph(&["pause", "--name", "demo"]).code, Some(0));
    assert_eq!(w.ralph(&["resume", "--name", "demo"]).code, Some(0));
    assert!(message(&w.stop("S", "<promise>DONE</promise>")).contains("demo"));
    w.outside_untouched("links at temp names");
    let links = fs::read_dir(&claude)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_symlink())
        .count();
    assert_eq!(links, 32_768 + 4, "the sweep never removes a link");
    assert!(
        !claude.join(".ralph-tmp-stale").exists(),
        "a stale temp goes"
    );
}

#[test]
fn a_private_loop_file_keeps_its_mode_and_every_byte() {
    let w = World::new();
    // CRLF inside the task, then a BOM and CRLF fences around the frontmatter.
    let task = "Line one\r\nLine two \u{feff}keeps its bytes\r\n\ttabbed";
    assert_eq!(w.start("demo", "S", task).code, Some(0));
    let path = w.path(".claude/demo-loop.local.md");
    let armed = fs::read_to_string(&path).unwrap();
    let (front, body) = armed.split_at(armed.find("\n---\n").unwrap() + 5);
    let crlf_front = front.replace('\n', "\r\n");
    let before = format!("\u{feff}{crlf_front}{body}").into_bytes();
    fs::write(&path, &before).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    let answer = w.stop("S", "working");
    assert!(blocked(&answer), "{answer:?}");
    assert!(
        answer.as_ref().unwrap()["reason"]
            .as_str()
            .unwrap()
            .contains("Line one\r\nLine two \u{feff}keeps its bytes\r\n\ttabbed")
    );
    let after = fs::read(&path).unwrap();
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a 0600 loop file stays 0600");
    // Every line but the iteration's is kept byte for byte and in order
    // (BOM, CRLF, the body); the turn may only add progress fields.
    let lines =
        |b: &[u8]| -> Vec<Vec<u8>> { b.split(|c| *c == b'\n').map(<[u8]>::to_vec).collect() };
    let new = lines(&after);
    let mut rest = new.iter();
    for line in lines(&before) {
        if line.starts_with(b"iteration:") {
            assert!(new.contains(&b"iteration: 2\r".to_vec()), "{new:?}");
            continue;
        }
        assert!(
            rest.any(|n| *n == line),
            "{:?} was not kept in {:?}",
            String::from_utf8_lossy(&line),
            String::from_utf8_lossy(&after)
        );
    }
    assert!(after.starts_with("\u{feff}---\r\n".as_bytes()));
    assert!(after.ends_with(body.as_bytes()));
}

#[test]
fn a_latin1_loop_file_is_refused_and_left_untouched() {
    let w = World::new();
    assert_eq!(w.start("demo", "S", "Make café").code, Some(0));
    let path = w.path(".claude/demo-loop.local.md");
    let utf8 = fs::read(&path).unwrap();
    let at = utf8.windows(2).position(|p| p == "é".as_bytes()).unwrap();
    let mut latin1 = utf8[..at].to_vec();
    latin1.push(0xe9);
    latin1.extend_from_slice(&utf8[at + 2..]);
    fs::write(&path, &latin1).unwrap();
    for _ in 0..2 {
        let answer = w.stop("S", "working");
        assert!(!blocked(&answer));
        let m = message(&answer);
        for needle in ["demo-loop.local.md", "not valid UTF-8", "iconv"] {
            assert!(m.contains(needle), "{needle} in {m}");
        }
        assert_eq!(fs::read(&path).unwrap(), latin1, "left untouched");
    }
    let status = w.ralph(&["status"]);
    assert_eq!(status.code, Some(0));
    assert!(status.stdout.contains("not valid UTF-8"), "{status:?}");
    let cancel = w.ralph(&["cancel", "--all"]);
    assert_eq!(cancel.code, Some(1), "{cancel:?}");
    assert!(cancel.stderr.contains("demo"), "{cancel:?}");
    assert_eq!(fs::read(&path).unwrap(), latin1, "left untouched");
}

/// A live loop owned by another session, written by hand: ralph arms
/// names of at most 64 characters, a repository can plant any name.
fn hand_written_loop(session: &str) -> String {
    format!(
        "---\nactive: true\niteration: 1\nsession_id: {session}\nmax_iterations: 5\ncompletion_promise: \"DONE\"\n---\n\nPlanted task\n"
    )
}

#[test]
fn one_bad_loop_file_is_one_notice() {
    let long = "a".repeat(238);
    for bad in ["fifo", "latin1", "long name", "corrupt"] {
        let w = World::new();
        assert_eq!(w.start("good", "S", "Good task").code, Some(0));
        let bad_file = match bad {
            "fifo" => {
                w.mkfifo(".claude/bad-loop.local.md");
                "bad-loop.local.md".to_owned()
            }
            "latin1" => {
                fs::write(
                    w.path(".claude/bad-loop.local.md"),
                    b"---\nactive: true\n---\n\ncaf\xe9\n",
                )
                .unwrap();
                "bad-loop.local.md".to_owned()
            }
            "long name" => {
                let name = format!("{long}-loop.local.md");
                fs::write(
                    w.path(&format!(".claude/{name}")),
                    hand_written_loop("other"),
                )
                .unwrap();
                name
            }
            _ => {
                // Armed by the user for another session, then broken and
                // handed to this one: it is this session's corrupt loop.
                assert_eq!(w.start("bad", "X", "Bad task").code, Some(0));
                let path = w.path(".claude/bad-loop.local.md");
                let text = fs::read_to_string(&path)
                    .unwrap()
                    .replace("session_id: X", "session_id: S")
                    .replace("max_iterations: 10", "max_iterations: ten");
                fs::write(&path, text).unwrap();
                "bad-loop.local.md".to_owned()
            }
        };
        for reply in ["one", "two"] {
            let answer = w.stop("S", reply);
            assert!(
                blocked(&answer),
                "{bad}: the good loop still runs: {answer:?}"
            );
            if bad != "long name" && reply == "one" {
                assert!(
                    message(&answer).contains("bad-loop.local.md"),
                    "{bad}: {answer:?}"
                );
            }
        }
        let status = w.ralph(&["status", "--json"]);
        assert_eq!(status.code, Some(0), "{bad}: {status:?}");
        let cancel = w.ralph(&["cancel", "--all"]);
        assert!(
            cancel.stdout.contains("Cancelled loop `good`"),
            "{bad}: {cancel:?}"
        );
        assert!(w.history().iter().any(|n| n.ends_with("-good.md")), "{bad}");
        match bad {
            "fifo" | "latin1" => {
                assert_eq!(cancel.code, Some(1), "{bad}: {cancel:?}");
                assert!(cancel.stderr.contains("bad"), "{bad}: {cancel:?}");
                assert!(w.path(&format!(".claude/{bad_file}")).exists() || bad == "fifo");
                assert!(fs::symlink_metadata(w.path(&format!(".claude/{bad_file}"))).is_ok());
            }
            "long name" => {
                assert_eq!(cancel.code, Some(0), "{bad}: {cancel:?}");
                assert!(fs::symlink_metadata(w.path(&format!(".claude/{bad_file}"))).is_err());
                assert!(
                    w.history()
                        .iter()
                        .any(|n| n.contains("aaaa~") && n.len() < 100),
                    "a short record name: {:?}",
                    w.history()
                );
            }
            _ => assert_eq!(cancel.code, Some(0), "{bad}: {cancel:?}"),
        }
        let status = w.ralph(&["status"]);
        assert_eq!(status.code, Some(0), "{bad}: {status:?}");
        w.outside_untouched(bad);
    }
}

#[test]
fn an_ended_loop_with_a_long_name_is_archived_without_freezing_the_project() {
    let w = World::new();
    assert_eq!(w.start("good", "S", "Good task").code, Some(0));
    let name = format!("{}-loop.local.md", "b".repeat(238));
    let ended = hand_written_loop("other").replace(
        "active: true\n",
        "active: false\noutcome: completed\nended_at: \"2026-01-01T00:00:00Z\"\n",
    );
    fs::write(w.path(&format!(".claude/{name}")), ended).unwrap();
    for reply in ["one", "two"] {
        assert!(blocked(&w.stop("S", reply)), "the project is not frozen");
    }
    assert_eq!(w.ralph(&["status"]).code, Some(0));
    assert_eq!(w.ralph(&["cancel", "--all"]).code, Some(0));
}

#[test]
fn lock_timeout_names_the_holder() {
    let w = World::new();
    // A ralph process that takes the lock leaves its pid in the lock file.
    let mut cmd = Command::new(BIN);
    cmd.args(["start", "--name", "demo", "--session-id", "S", "Task"])
        .current_dir(w.root())
        .env("HOME", w.home())
        .env("XDG_STATE_HOME", w.base.path().join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    let lock = w.path(".claude/ralph/lock");
    assert_eq!(fs::read_to_string(&lock).unwrap().trim(), pid.to_string());

    // This test holds the lock, as a ralph process would: flock, then its pid.
    let held = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&lock)
        .unwrap();
    held.lock().unwrap();
    held.set_len(0).unwrap();
    (&held)
        .write_all(std::process::id().to_string().as_bytes())
        .unwrap();
    let me = format!("pid {}", std::process::id());
    let w = std::sync::Arc::new(w);
    let hook = {
        let w = std::sync::Arc::clone(&w);
        std::thread::spawn(move || w.stop("S", "working"))
    };
    let cancel = w.ralph(&["cancel", "--all"]);
    assert_eq!(cancel.code, Some(1), "{cancel:?}");
    assert!(cancel.stderr.contains(&me), "{cancel:?}");
    let answer = hook.join().unwrap();
    assert!(!blocked(&answer));
    assert!(message(&answer).contains(&me), "{answer:?}");
    drop(held);
    assert_eq!(w.ralph(&["cancel", "--all"]).code, Some(0));
}

/// Issue 25, item 9: the hook wrote its notice with `eprintln!`, which
/// panics on a closed stderr; the release build aborts on a panic, so the
/// hook died by SIGABRT and Claude Code got no answer. Now every write of the
/// binary ignores a closed stream: exit 0, the answer on stdout.
#[test]
fn a_closed_stderr_never_kills_the_hook() {
    let w = World::new();
    fs::write(w.path(".claude/x-loop.local.md"), hand_written_loop("")).unwrap();
    let event = json!({
        "session_id": "s1",
        "cwd": w.root(),
        "hook_event_name": "Stop",
        "last_assistant_message": "x",
    });
    let mut child = ralph_command()
        .args(["hook", "stop"])
        .current_dir(w.root())
        .env("HOME", w.home())
        .env("XDG_STATE_HOME", w.base.path().join("state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reading end of stderr is gone before the hook writes a byte.
    drop(child.stderr.take());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(event.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", out.status);
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        answer["systemMessage"]
            .as_str()
            .is_some_and(|m| m.contains("is not driven")),
        "{answer}"
    );
    // The CLI's own error path too: a failure with stderr closed keeps its code.
    let mut child = Command::new(BIN)
        .args(["adopt", "--name", "nothing-here"])
        .current_dir(w.root())
        .env("HOME", w.home())
        .env("XDG_STATE_HOME", w.base.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
}

/// `ralph install --project` and `ralph start` from a scratch HOME, in `cwd`.
fn ralph_in(cwd: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    client::client_command(BIN, home)
        .args(args)
        .env("XDG_STATE_HOME", home.join("state"))
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn install_project_writes_at_the_git_root_not_the_nearest_claude_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let repo = tmp.path().join("repo");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(repo.join(".git")).unwrap();
    fs::create_dir_all(repo.join("pkg/.claude")).unwrap();
    let out = ralph_in(
        &repo.join("pkg"),
        &home,
        &["install", "gemini", "--project"],
    );
    assert!(out.status.success(), "{}", crate::support::text(&out));
    assert!(repo.join(".gemini/settings.json").is_file());
    assert!(!repo.join("pkg/.gemini").exists());
    // Outside any repository: refused, nothing written.
    let loose = tmp.path().join("loose");
    fs::create_dir_all(&loose).unwrap();
    let out = ralph_in(&loose, &home, &["install", "codex", "--project"]);
    assert!(!out.status.success());
    assert!(crate::support::text(&out).contains("is not inside a git repository"));
    assert_eq!(fs::read_dir(&loose).unwrap().count(), 0);
}

#[test]
fn install_project_never_writes_through_a_committed_folder_link() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let repo = tmp.path().join("repo");
    let outside = tmp.path().join("outside");
    for d in [&home, &outside, &repo.join(".git")] {
        fs::create_dir_all(d).unwrap();
    }
    // A checkout whose .gemini and .agents are links out of the project.
    symlink(&outside, repo.join(".gemini")).unwrap();
    let out = ralph_in(&repo, &home, &["install", "gemini", "--project"]);
    assert!(!out.status.success(), "{}", crate::support::text(&out));
    fs::remove_file(repo.join(".gemini")).unwrap();
    fs::create_dir_all(repo.join(".agents")).unwrap();
    symlink(&outside, repo.join(".agents/skills")).unwrap();
    let out = ralph_in(&repo, &home, &["install", "codex", "--project"]);
    assert!(!out.status.success(), "{}", crate::support::text(&out));
    assert_eq!(
        fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing was written outside the project"
    );
}

/// A project's settings file planted as a FIFO, or as a link to a file outside, is read
/// through the safe file layer: refused at once (no hang on the FIFO, nothing read or
/// written through the link), the link's target byte for byte as it was.
#[test]
fn install_project_refuses_a_planted_settings_fifo_or_link() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let repo = tmp.path().join("repo");
    let outside = tmp.path().join("outside.json");
    for d in [&home, &repo.join(".git"), &repo.join(".gemini")] {
        fs::create_dir_all(d).unwrap();
    }
    let settings = repo.join(".gemini/settings.json");
    let ok = Command::new("mkfifo").arg(&settings).status().unwrap();
    assert!(ok.success());
    let started = std::time::Instant::now();
    let out = ralph_in(&repo, &home, &["install", "gemini", "--project"]);
    assert!(!out.status.success(), "{}", crate::support::text(&out));
    assert!(started.elapsed() < std::time::Duration::from_secs(45));
    fs::remove_file(&settings).unwrap();
    fs::write(&outside, "{\"keep\": 1}\n").unwrap();
    symlink(&outside, &settings).unwrap();
    let out = ralph_in(&repo, &home, &["install", "gemini", "--project"]);
    assert!(!out.status.success(), "{}", crate::support::text(&out));
    assert_eq!(fs::read_to_string(&outside).unwrap(), "{\"keep\": 1}\n");
}

/// A `.claude/` in a shared parent folder (another user's, or `/`) is never
/// where a loop goes: the walk up stops below the first folder the user
/// does not own. Needs root, to give a folder to someone else.
#[test]
fn a_loop_never_goes_into_the_claude_folder_of_a_parent_the_user_does_not_own() {
    let me = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&me.stdout).trim() != "0" {
        eprintln!("skipped: needs root to chown a folder to another user");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let shared = tmp.path().join("shared");
    let mine = shared.join("mine");
    for d in [&home, &shared.join(".claude"), &mine] {
        fs::create_dir_all(d).unwrap();
    }
    std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
    let out = ralph_in(
        &mine,
        &home,
        &["start", "--max-iterations", "2", "Secret task"],
    );
    let all = crate::support::text(&out);
    assert_eq!(
        fs::read_dir(shared.join(".claude")).unwrap().count(),
        0,
        "the loop went into the shared parent: {all}"
    );
    // The test can fail: the same folder owned by the user is the project.
    std::os::unix::fs::chown(&shared, Some(0), Some(0)).unwrap();
    let _ = fs::remove_dir_all(mine.join(".claude"));
    let _ = ralph_in(&mine, &home, &["start", "--max-iterations", "2", "Task"]);
    assert!(fs::read_dir(shared.join(".claude")).unwrap().count() > 0);
}
