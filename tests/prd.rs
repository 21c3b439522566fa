//! `ralph start --prd`: a loop that knows its stories, through the real
//! binary. The current story in every continuation and in what the user
//! sees; a story's `verify` run when it turns to passing, and `passes` set
//! back byte-exactly when it fails; done when every story passes; blocked
//! stories; story commands recorded at arming; a bad PRD ends in a safe answer.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::{blocked, project};

use project::{LOOP, Project};
use serde_json::{Value, json};

const PRD: &str = "ralph/prd.json";

/// Three stories, written the way a person might: a big number, a
/// duplicate key and uneven spacing, all of which must survive an edit.
const THREE: &str = r#"{
  "project": "demo",  "build": 123456789012345678901234567890,
  "userStories": [
    {"id": "US-001", "title": "Parser", "description": "Parse the input.",
     "acceptanceCriteria": ["reads a.txt", "tests pass"], "priority": 1,
     "passes": false, "verify": "test -f a.ok || { echo 'a.ok is missing'; exit 4; }"},
    {"id": "US-002", "title": "Printer", "description": "Print it.", "priority": 2,
     "notes": "x", "notes": "y",   "passes":false},
    {"id": "US-003", "title": "Docs", "description": "Write docs.", "priority": 3, "passes": false}
  ]
}
"#;

/// This module's steps on the shared [`Project`].
trait Steps {
    fn with_prd(prd: &str) -> Self;
    fn run(&self, args: &[&str], stdin: &str) -> (i32, String, String);
    fn ralph(&self, args: &[&str], stdin: &str) -> (i32, String);
    fn ralph_approved(&self, args: &[&str], stdin: &str) -> (i32, String);
    fn start(&self, flags: &[&str]) -> String;
    fn stop(&self, reply: &str) -> Value;
    fn agent_sets_passes(&self, id: &str);
    fn history_record(&self) -> String;
}

impl Steps for Project {
    fn with_prd(prd: &str) -> Self {
        let p = Project::new();
        p.write(PRD, prd);
        p
    }

    /// Runs ralph: its exit code, stdout and stderr.
    fn run(&self, args: &[&str], stdin: &str) -> (i32, String, String) {
        let env = [("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")];
        let out = self.ralph_in(args, self.root(), stdin.as_bytes(), &env);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs ralph: its exit code and everything it printed.
    fn ralph(&self, args: &[&str], stdin: &str) -> (i32, String) {
        let (code, out, err) = self.run(args, stdin);
        (code, format!("{out}{err}"))
    }

    /// Runs ralph as the user does with a PRD whose stories hold commands: refused
    /// first (the commands listed, nothing armed), then again with the code shown.
    fn ralph_approved(&self, args: &[&str], stdin: &str) -> (i32, String) {
        let (code, out) = self.ralph(args, stdin);
        let Some(approval) = approval_code(&out) else {
            return (code, out);
        };
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("Nothing was armed"), "{out}");
        if matches!(args[0], "start" | "run") {
            // `ralph start` or `ralph run` with a code is the user's own step (issue 46): on
            // a terminal, the list shown and answered yes; the text or the task typed there too.
            let raw = args.contains(&"--raw-arguments");
            let mut approved = args.to_vec();
            let keys = if raw {
                format!("--approve-commands {approval} {stdin}\n\u{4}y\n")
            } else {
                approved.splice(1..1, ["--approve-commands", approval.as_str()]);
                if !stdin.is_empty() {
                    approved.push(stdin);
                }
                "y\n".to_owned()
            };
            let out = self.ralph_on_terminal(&approved, &keys);
            return (out.status.code().unwrap_or(-1), crate::support::text(&out));
        }
        if args.contains(&"--raw-arguments") {
            return self.ralph(args, &format!("--approve-commands {approval} {stdin}"));
        }
        let mut approved = vec![args[0], "--approve-commands", &approval];
        approved.extend_from_slice(&args[1..]);
        self.ralph(&approved, stdin)
    }

    fn start(&self, flags: &[&str]) -> String {
        let mut args = vec![
            "start",
            "--session-id",
            "s1",
            "--completion-promise",
            "DONE",
        ];
        args.extend_from_slice(flags);
        args.push("Build the demo");
        let (code, out) = self.ralph_approved(&args, "");
        assert_eq!(code, 0, "{out}");
        out
    }

    fn stop(&self, reply: &str) -> Value {
        let event =
            json!({"session_id": "s1", "cwd": self.root(), "last_assistant_message": reply});
        let (code, out, err) = self.run(&["hook", "stop"], &event.to_string());
        assert_eq!(code, 0, "{out}{err}");
        if out.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
        }
    }

    /// Marks a story as passing the way an agent does: a text edit.
    fn agent_sets_passes(&self, id: &str) {
        let text = self.read(PRD);
        let out = ralph_state::fields::stories::set_passes(PRD, &text, id, true).unwrap();
        self.write(PRD, &out);
    }

    fn history_record(&self) -> String {
        let dir = self.path(".claude/ralph/history");
        let record = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "md"))
            .expect("an ended loop in the history");
        std::fs::read_to_string(record).unwrap()
    }
}

/// The code a refusal gives to approve the PRD's story commands.
pub(crate) fn approval_code(out: &str) -> Option<String> {
    let at = out.find("--approve-commands ")? + "--approve-commands ".len();
    Some(
        out[at..]
            .chars()
            .take_while(char::is_ascii_hexdigit)
            .collect(),
    )
}

fn reason(answer: &Value) -> &str {
    answer["reason"].as_str().unwrap_or_default()
}

fn message(answer: &Value) -> &str {
    answer["systemMessage"].as_str().unwrap_or_default()
}

#[test]
fn every_continuation_names_the_current_story_and_the_user_sees_it() {
    let p = Project::with_prd(THREE);
    let armed = p.start(&["--prd"]);
    assert!(
        armed.contains("Stories: ralph/prd.json (0 of 3 pass)")
            && armed.contains("US-001: test -f a.ok"),
        "arming shows the story commands it would run: {armed}"
    );
    let answer = p.stop("working on it");
    assert!(blocked(&answer), "{answer}");
    let r = reason(&answer);
    let task = r.find("Build the demo").unwrap();
    let story = r.find("## Current story US-001: Parser").expect(r);
    assert!(task < story, "the story comes after the task: {r}");
    for part in [
        "Parse the input.",
        "- reads a.txt",
        "- tests pass",
        "0 of 3 stories pass",
    ] {
        assert!(r.contains(part), "{part:?} in {r}");
    }
    assert!(
        message(&answer).contains("story US-001 · 0 of 3 pass"),
        "{answer}"
    );
    let (_, status) = p.ralph(&["status"], "");
    assert!(status.contains("story US-001 · 0 of 3 pass"), "{status}");
    let input = json!({"session_id": "s1", "workspace": {"project_dir": p.root()}});
    let (_, line) = p.ralph(&["statusline"], &input.to_string());
    assert!(line.contains("story US-001 · 0 of 3 pass"), "{line}");
}

#[test]
fn a_story_whose_check_fails_is_set_back_changing_only_that_value() {
    let p = Project::with_prd(THREE);
    p.start(&["--prd"]);
    p.stop("first");
    p.agent_sets_passes("US-001");
    let edited = p.read(PRD);
    let answer = p.stop("US-001 is done");
    assert!(blocked(&answer), "{answer}");
    assert_eq!(
        p.read(PRD),
        THREE,
        "passes went back to false and nothing else changed, byte for byte"
    );
    assert_ne!(edited, THREE);
    let r = reason(&answer);
    assert!(
        r.contains("Story US-001 was set back")
            && r.contains("exit 4")
            && r.contains("a.ok is missing"),
        "the agent sees which story's check failed, with its output: {r}"
    );
    assert!(r.contains("## Current story US-001"), "{r}");
    assert!(
        message(&answer).contains("story US-001 refused"),
        "{answer}"
    );
    // Fixed: the check passes and the next story is current.
    p.write("a.ok", "");
    p.agent_sets_passes("US-001");
    let answer = p.stop("US-001 is really done");
    assert!(blocked(&answer), "{answer}");
    assert!(
        reason(&answer).contains("## Current story US-002: Printer"),
        "{answer}"
    );
    assert!(
        message(&answer).contains("story US-002 · 1 of 3 pass"),
        "{answer}"
    );
    assert!(p.read(LOOP).contains("prd_passed: \"US-001\""));
    // Issue 48 items 10 and 12: the story command that passed gets its word,
    // on the user's line and in the log, and the report counts both runs.
    assert!(
        message(&answer).contains("✓ story US-001: its check passed"),
        "{answer}"
    );
    let (_, log) = p.ralph(&["log"], "");
    assert!(
        log.contains("story checks: US-001 failed (exit 4)")
            && log.contains("story checks: US-001 passed"),
        "{log}"
    );
    let (code, said) = p.ralph(&["report", "-o", "report.html"], "");
    assert_eq!(code, 0, "{said}");
    let page = p.read("report.html");
    assert!(
        page.contains("Story commands per iteration")
            && page.contains("failed US-001 failed (exit 4)")
            && page.contains("passed US-001 passed"),
        "{page}"
    );
}

#[test]
fn the_loops_verify_runs_with_the_story_and_refuses_it_too() {
    let p = Project::with_prd(THREE);
    p.start(&["--prd", "--verify", "test -f all.ok"]);
    p.agent_sets_passes("US-002");
    let answer = p.stop("US-002 done");
    assert!(
        reason(&answer).contains("Story US-002 was set back"),
        "{answer}"
    );
    assert!(reason(&answer).contains("test -f all.ok"), "{answer}");
    assert_eq!(p.read(PRD), THREE);
}

#[test]
fn done_when_every_story_passes_and_a_promise_before_is_refused() {
    let p = Project::with_prd(THREE);
    p.start(&["--prd"]);
    let answer = p.stop("All done.\n<promise>DONE</promise>");
    assert!(
        blocked(&answer),
        "a promise while stories are open: {answer}"
    );
    assert!(
        reason(&answer).contains("these stories do not pass yet: US-001, US-002, US-003"),
        "{answer}"
    );
    p.write("a.ok", "");
    for id in ["US-001", "US-002", "US-003"] {
        p.agent_sets_passes(id);
    }
    let answer = p.stop("finished every story");
    assert!(!blocked(&answer), "{answer}");
    assert!(
        message(&answer).contains("completed") && message(&answer).contains("all 3 stories"),
        "{answer}"
    );
    assert!(!p.exists(LOOP));
    assert!(p.history_record().contains("outcome: completed"));
}

#[test]
fn only_blocked_stories_left_ends_as_blocked_with_each_reason_and_the_concerns() {
    let prd = r#"{"userStories": [
        {"id": "A", "title": "a", "priority": 1, "passes": false},
        {"id": "B", "title": "b", "priority": 2, "passes": false, "blocked": "needs the API key"}
    ]}"#;
    let p = Project::with_prd(prd);
    p.start(&["--prd"]);
    let answer = p.stop("on it");
    assert!(
        reason(&answer).contains("## Current story A: a"),
        "{answer}"
    );
    let text = p.read(PRD).replacen(
        r#""passes": false}"#,
        r#""passes": true, "concerns": "slow on big files"}"#,
        1,
    );
    p.write(PRD, &text);
    let answer = p.stop("A done");
    assert!(!blocked(&answer), "{answer}");
    let m = message(&answer);
    assert!(
        m.contains("only blocked stories are left")
            && m.contains("B blocked: needs the API key")
            && m.contains("A concerns: slow on big files"),
        "{m}"
    );
    assert!(p.history_record().contains("outcome: blocked"));
}

#[test]
fn a_story_command_added_after_arming_never_runs() {
    let p = Project::with_prd(THREE);
    p.start(&["--prd"]);
    // The repository changes the command after the user armed the loop.
    let planted = p.read(PRD).replace("test -f a.ok", "touch pwned; true");
    p.write(PRD, &planted);
    p.agent_sets_passes("US-001");
    let answer = p.stop("done");
    assert!(blocked(&answer), "{answer}");
    assert!(!p.exists("pwned"), "a command not recorded at arming ran");
    assert!(
        reason(&answer).contains("not the one recorded when this loop was armed"),
        "{answer}"
    );
    assert!(
        message(&answer).contains("was added or changed after arming")
            && message(&answer).contains("ralph start --prd=ralph/prd.json --force"),
        "the user is told how to approve it: {answer}"
    );
    assert_eq!(p.read(PRD), planted, "and the story is set back");
}

#[test]
fn a_bad_prd_ends_in_a_safe_answer_naming_file_field_and_fix() {
    let p = Project::with_prd(THREE);
    p.start(&["--prd"]);
    p.write(PRD, r#"{"userStories": [{"id": "A", "verify": 7}]}"#);
    let answer = p.stop("hm");
    assert!(!blocked(&answer), "{answer}");
    let m = message(&answer);
    assert!(
        m.contains("ralph/prd.json: userStories[0].verify must be a string"),
        "{m}"
    );
    assert!(p.exists(LOOP), "the loop waits for the fix");
    p.write(PRD, "{ not json");
    let m = p.stop("hm");
    assert!(
        message(&m).contains("ralph/prd.json is not valid JSON"),
        "{m}"
    );
    #[cfg(unix)]
    {
        std::fs::remove_file(p.path(PRD)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", p.path(PRD)).unwrap();
        let m = p.stop("hm");
        assert!(!blocked(&m), "a linked PRD is never followed: {m}");
        assert!(message(&m).contains("ralph/prd.json"), "{m}");
    }
}

#[test]
fn arming_refuses_a_missing_or_outside_prd() {
    let p = Project::new();
    let (code, out) = p.ralph(&["start", "--prd", "task"], "");
    assert_ne!(code, 0);
    assert!(
        out.contains("ralph/prd.json") && out.contains("nothing was armed"),
        "{out}"
    );
    let (code, out) = p.ralph(&["start", "--prd=../x.json", "task"], "");
    assert_ne!(code, 0);
    assert!(out.contains("inside the project"), "{out}");
}

#[test]
fn the_slash_command_takes_prd_with_or_without_a_path() {
    let p = Project::with_prd(THREE);
    p.write("docs/other.json", THREE);
    let (code, out) = p.ralph_approved(
        &["start", "--raw-arguments", "--session-id", "s1"],
        "--prd Fix the printer",
    );
    assert_eq!(code, 0, "{out}");
    let file = p.read(LOOP);
    assert!(file.contains("prd: \"ralph/prd.json\""), "{file}");
    assert!(file.trim_end().ends_with("Fix the printer"), "{file}");
    let (code, out) = p.ralph_approved(
        &[
            "start",
            "--raw-arguments",
            "--session-id",
            "s2",
            "--name",
            "two",
        ],
        "--prd=docs/other.json",
    );
    assert_eq!(code, 0, "{out}");
    let file = p.read(".claude/two-loop.local.md");
    assert!(file.contains("prd: \"docs/other.json\""), "{file}");
    assert!(
        file.contains("Work through the stories in docs/other.json"),
        "{file}"
    );
}

#[test]
fn both_templates_arm_with_prd_and_show_their_story_verify() {
    for template in ["software", "marketing"] {
        let p = Project::new();
        let (code, out) = p.ralph(&["init", "--template", template], "");
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains("/ralph-loop --prd"),
            "init says how to arm: {out}"
        );
        let prompt = p.read("ralph/PROMPT.md");
        if template == "software" {
            // Its stories are an example only: arming them unedited is refused, with the fix.
            let (code, out) = p.ralph_approved(&["start", "--session-id", "s1", "--prd"], &prompt);
            assert_eq!(code, 2, "{out}");
            assert!(
                out.contains("still holds the example stories `ralph init` wrote")
                    && out.contains("nothing was armed"),
                "{out}"
            );
            let edited = p
                .read("ralph/prd.json")
                .replace("Add tags to the note data model", "Add tags to notes");
            p.write("ralph/prd.json", &edited);
        }
        let (code, out) = p.ralph_approved(&["start", "--session-id", "s1", "--prd"], &prompt);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains("Story commands ralph will run") && out.contains("US-001: "),
            "{template}: {out}"
        );
        assert_eq!(
            out.contains("template's stories as `ralph init` wrote them"),
            template == "marketing",
            "an unedited template is named: {out}"
        );
        let answer = p.stop("orienting");
        assert!(
            reason(&answer).contains("## Current story US-001"),
            "{answer}"
        );
    }
}

#[test]
fn ralph_run_prd_works_through_the_stories_to_the_end() {
    let prd = r#"{"userStories": [
{"id": "A", "title": "first", "priority": 1, "passes": false},
{"id": "B", "title": "second", "priority": 2, "passes": false, "verify": "test -f b.ok"}
]}"#;
    let p = Project::with_prd(prd);
    // The agent saves its prompt, then marks the first open story passing;
    // on its second call it also makes B's check pass.
    p.write(
        "agent.sh",
        r#"n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
cat > prompt-$n
[ $n -ge 3 ] && touch b.ok
sed -i '0,/"passes": false/s//"passes": true/' ralph/prd.json
echo "did call $n""#,
    );
    let (code, out) = p.ralph_approved(
        &[
            "run",
            "--agent",
            "sh agent.sh",
            "--prd",
            "--max-iterations",
            "6",
        ],
        "",
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("Stories: ralph/prd.json (0 of 2 pass)"),
        "{out}"
    );
    assert!(p.read("prompt-1").contains("## Current story A: first"));
    assert!(p.read("prompt-2").contains("## Current story B: second"));
    let third = p.read("prompt-3");
    assert!(
        third.contains("Story B was set back") && third.contains("## Current story B"),
        "B's check failed once: {third}"
    );
    assert_eq!(p.read("n").trim(), "3");
    assert!(p.history_record().contains("outcome: completed"));
}

/// The real Claude Code client in print mode, the mock API scripted: a
/// three-story PRD worked through to the end, the middle story refused once
/// by its own verify. Each story is marked passing by a real `Bash` call.
#[test]
#[cfg_attr(
    no_claude_client,
    ignore = "Claude Code client not installed: npm ci --prefix tests/client"
)]
fn e2e_the_real_client_works_through_three_stories_one_refused_once() {
    use crate::support::mock_api::{MockApi, Reply};
    use crate::support::sandbox_or_skip;
    let sandbox =
        sandbox_or_skip!("e2e_the_real_client_works_through_three_stories_one_refused_once");
    let prd = r#"{"project": "demo", "userStories": [
{"id": "US-001", "passes": false, "title": "One", "description": "First.", "priority": 1},
{"id": "US-002", "passes": false, "title": "Two", "description": "Second.", "priority": 2, "verify": "test -f two.ok || { echo 'two.ok is missing'; exit 4; }"},
{"id": "US-003", "passes": false, "title": "Three", "description": "Third.", "priority": 3}
]}
"#;
    std::fs::create_dir_all(sandbox.project().join("ralph")).unwrap();
    std::fs::write(sandbox.project().join(PRD), prd).unwrap();
    let mark = |id: &str| {
        format!("sed -i 's/\"{id}\", \"passes\": false/\"{id}\", \"passes\": true/' ralph/prd.json")
    };
    let api = MockApi::start(vec![
        Reply::bash("Story US-001 is done; marking it.", mark("US-001")),
        Reply::text("US-001 done."),
        Reply::bash("US-002 is done, I think.", mark("US-002")),
        Reply::text("US-002 done."),
        Reply::bash("Its check failed: creating two.ok.", "touch two.ok"),
        Reply::bash("Marking US-002 again.", mark("US-002")),
        Reply::text("US-002 fixed."),
        Reply::bash("US-003 is done.", mark("US-003")),
        Reply::text("US-003 done."),
    ]);
    // The PRD's story command is shown to the user first (no model request); the line
    // it gives, sent as is, arms the loop.
    let asked = sandbox.claude(
        &api,
        "/ralph-loop --prd Build the demo --max-iterations 8",
        &[],
    );
    assert!(api.turns().is_empty(), "{}", api.describe());
    let approval = approval_code(&asked.stdout)
        .unwrap_or_else(|| panic!("the user is shown the code: {}", asked.describe()));
    let run = sandbox.claude(
        &api,
        &format!(
            "/ralph-loop --approve-commands {approval} --prd Build the demo --max-iterations 8"
        ),
        &["--allowedTools", "Bash(sed:*),Bash(touch:*)"],
    );
    assert!(run.status.success(), "{}", run.describe());
    let turns = api.turns();
    let fed: Vec<String> = turns
        .iter()
        .map(super::support::mock_api::LoggedRequest::last_user_text)
        .collect();
    let find = |needle: &str| fed.iter().position(|t| t.contains(needle));
    let two = find("## Current story US-002").unwrap_or_else(|| panic!("{}", api.describe()));
    let refused = find("Story US-002 was set back").unwrap_or_else(|| panic!("{}", api.describe()));
    let three = find("## Current story US-003").unwrap_or_else(|| panic!("{}", api.describe()));
    assert!(two < refused && refused < three, "{fed:#?}");
    assert!(fed[refused].contains("exit 4") && fed[refused].contains("two.ok is missing"));
    let status = sandbox.status_json();
    let ended = status["loops"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == "ralph").cloned())
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(
        ended["outcome"],
        "completed",
        "{status}\n{}",
        run.describe()
    );
    assert_eq!(
        ended["iteration"], 4,
        "one stop per story, and one for the refusal"
    );
    let done = std::fs::read_to_string(sandbox.project().join(PRD)).unwrap();
    assert_eq!(done, prd.replace("\"passes\": false", "\"passes\": true"));
}

#[test]
fn story_commands_are_shown_escaped_at_arming() {
    let prd = "{\"userStories\": [{\"id\": \"A\", \"verify\": \"true \\u001b[2J\\u202e\"}]}";
    let p = Project::with_prd(prd);
    let out = p.start(&["--prd"]);
    assert!(out.contains("A: true \\x1b[2J\\u{202e}"), "{out}");
    assert!(
        !out.contains('\u{1b}') && !out.contains('\u{202e}'),
        "{out:?}"
    );
}

#[test]
fn a_story_command_recorded_by_hand_in_the_loop_file_leaves_the_loop_inert() {
    let p = Project::with_prd(THREE);
    p.start(&["--prd"]);
    let planted = "touch pwned; true";
    let digest = ralph_state::fields::stories::command_digest(planted);
    let file = p.read(LOOP);
    let line = file
        .lines()
        .find(|l| l.starts_with("prd_commands:"))
        .unwrap()
        .to_owned();
    p.write(
        LOOP,
        &file.replace(&line, &format!("prd_commands: \"US-001:{digest}\"")),
    );
    p.write(
        PRD,
        &p.read(PRD).replace(
            "test -f a.ok || { echo 'a.ok is missing'; exit 4; }",
            planted,
        ),
    );
    p.agent_sets_passes("US-001");
    let answer = p.stop("done");
    assert!(
        !blocked(&answer),
        "an edited record of the story commands must not drive: {answer}"
    );
    assert!(!p.exists("pwned"), "a command recorded by hand ran");
}
