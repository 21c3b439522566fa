//! Stories in order and PRDs that can be checked, through the real binary:
//! `dependsOn` followed by `ralph run --prd` and refused when it names no
//! story or goes round in a circle; `ralph prd lint`, each rule on a
//! fixture, silent on `ralph init`'s templates, and run at arming;
//! `ralph prd import` of a Markdown PRD.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::support::project::Project;

const PRD: &str = "ralph/prd.json";

/// Runs ralph in the project: its exit code and everything it printed.
fn ralph(p: &Project, args: &[&str]) -> (i32, String) {
    // `ralph start` or `ralph run` with `--approve-commands` is the user's own step
    // (issue 46): on a terminal.
    let arming = matches!(args.first(), Some(&"start" | &"run"));
    let out = if arming && args.contains(&"--approve-commands") {
        p.ralph_on_terminal(args, "y\n")
    } else {
        p.ralph_in(args, p.root(), b"", &[])
    };
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Three stories; US-003 comes first by priority but depends on US-001.
const ORDERED: &str = r#"{"userStories": [
{"id": "US-001", "passes": false, "title": "One", "priority": 2, "verify": "test -f one.ok"},
{"id": "US-002", "passes": false, "title": "Two", "priority": 3, "verify": "test -f two.ok"},
{"id": "US-003", "passes": false, "title": "Three", "priority": 1, "verify": "test -f three.ok", "dependsOn": ["US-001"]}
]}"#;

#[test]
fn ralph_run_prd_takes_a_story_only_once_what_it_depends_on_passes() {
    let p = Project::new();
    p.write(PRD, ORDERED);
    // The agent saves its prompt and finishes the story it is given.
    p.write(
        "agent.sh",
        r#"n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
cat > prompt-$n
id=$(sed -n 's/^## Current story \([^:]*\):.*/\1/p' prompt-$n | head -n 1)
case $id in US-001) touch one.ok;; US-002) touch two.ok;; US-003) touch three.ok;; esac
sed -i "s/\"id\": \"$id\", \"passes\": false/\"id\": \"$id\", \"passes\": true/" ralph/prd.json
echo "did $id""#,
    );
    let args = [
        "run",
        "--agent",
        "sh agent.sh",
        "--prd",
        "--max-iterations",
        "5",
    ];
    let (code, out) = ralph(&p, &args);
    let code_word = crate::prd::approval_code(&out).expect("the story commands are shown");
    assert_eq!(code, 2, "{out}");
    let mut approved = vec!["run", "--approve-commands", &code_word];
    approved.extend_from_slice(&args[1..]);
    let (code, out) = ralph(&p, &approved);
    assert_eq!(code, 0, "{out}");
    let current = |n: usize| {
        let prompt = p.read(&format!("prompt-{n}"));
        prompt
            .lines()
            .find_map(|l| l.strip_prefix("## Current story "))
            .map_or_else(
                || panic!("no current story in {prompt}"),
                |l| l.split(':').next().unwrap().to_owned(),
            )
    };
    assert_eq!(
        [current(1), current(2), current(3)],
        ["US-001", "US-003", "US-002"],
        "US-003 waits for US-001, then goes first by its priority"
    );
    assert_eq!(p.read("n").trim(), "3");
}

#[test]
fn depends_on_that_names_no_story_or_goes_round_is_refused_at_arming() {
    let circle = r#"{"userStories": [
{"id": "US-001", "passes": false, "title": "One", "verify": "make one", "dependsOn": ["US-003"]},
{"id": "US-002", "passes": false, "title": "Two", "verify": "make two", "dependsOn": ["US-001"]},
{"id": "US-003", "passes": false, "title": "Three", "verify": "make three", "dependsOn": ["US-002"]}
]}"#;
    let p = Project::new();
    p.write(PRD, circle);
    let start = [
        "start",
        "--session-id",
        "s1",
        "--prd",
        "--approve-commands",
        "0",
        "Go",
    ];
    // `ralph run --parallel` refuses it too (tests/parallel.rs, in a git repository).
    for args in [&start[..], &["plan"][..], &["prd", "lint"][..]] {
        let (code, out) = ralph(&p, args);
        assert_ne!(code, 0, "{args:?}: {out}");
        assert!(
            out.contains("go round in a circle (US-001 → US-003 → US-002 → US-001)")
                && out.contains("remove one of these ids from the dependsOn"),
            "{args:?}: {out}"
        );
    }
    assert!(!p.path(".claude/ralph-loop.local.md").exists());
    p.write(PRD, &circle.replace(r#"["US-003"]"#, r#"["US-9"]"#));
    let (code, out) = ralph(&p, &start);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("story US-001's dependsOn names \"US-9\", which no story has as its id"),
        "{out}"
    );
    p.write(PRD, &circle.replace(r#"["US-003"]"#, r#"["US-001"]"#));
    let (_, out) = ralph(&p, &start);
    assert!(
        out.contains("story US-001's dependsOn names US-001 itself"),
        "{out}"
    );
}

/// One story a rule (and a vague word of the PRD's own).
const HOLES: &str = r#"{"vagueWords": ["snappy"], "userStories": [
{"id": "US-001", "title": "No check", "acceptanceCriteria": ["a.txt holds 3"]},
{"id": "US-002", "title": "Always passes", "verify": "cargo test || true"},
{"id": "US-003", "title": "Vague", "verify": "make t", "acceptanceCriteria": ["the page works correctly"]},
{"id": "US-004", "title": "Own vague word", "verify": "make t", "acceptanceCriteria": ["the list is snappy"]},
{"id": "US-005", "title": "Big", "verify": "make t", "acceptanceCriteria": ["1","2","3","4","5","6","7","8","9"]},
{"id": "US-006", "title": "Waits for a ghost", "verify": "make t", "dependsOn": ["US-404"]}
]}"#;

#[test]
fn prd_lint_names_each_hole_with_the_story_and_the_fix() {
    let p = Project::new();
    p.write(PRD, HOLES);
    // The dependsOn error hides the rest until it is fixed: no loop could read the file.
    let (code, out) = ralph(&p, &["prd", "lint"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("error[depends-on] ralph/prd.json: story US-006's dependsOn names \"US-404\""),
        "{out}"
    );
    p.write(PRD, &HOLES.replace(r#""US-404""#, r#""US-001""#));
    let (code, out) = ralph(&p, &["prd", "lint"]);
    assert_eq!(code, 2, "{out}");
    for line in [
        "warning[no-check] US-001 has no check",
        "error[cannot-fail] US-002's verify `cargo test || true` cannot fail",
        "warning[vague] US-003: the criterion \"the page works correctly\" says \"works correctly\"",
        "warning[vague] US-004: the criterion \"the list is snappy\" says \"snappy\"",
        "warning[too-large] US-005 is too large for one context (9 criteria",
        "1 error and 4 warnings",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    // At arming, the error refuses the loop; warnings alone only show.
    let start = [
        "start",
        "--session-id",
        "s1",
        "--prd",
        "--approve-commands",
        "0",
        "Go",
    ];
    let (code, out) = ralph(&p, &start);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("does not pass `ralph prd lint`; nothing was armed"),
        "{out}"
    );
    assert!(out.contains("error[cannot-fail] US-002"), "{out}");
    // Ids: missing and twice, each named.
    p.write(
        PRD,
        r#"{"userStories": [{"id": "A", "verify": "make"}, {"title": "x"}, {"id": "A"}]}"#,
    );
    let (code, out) = ralph(&p, &["prd", "lint"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("error[missing-id] ralph/prd.json: userStories[1] has no id")
            && out.contains("error[duplicate-id] ralph/prd.json: userStories[2].id \"A\" is also the id of userStories[0]"),
        "{out}"
    );
}

#[test]
fn prd_lint_warnings_show_at_arming_and_refuse_nothing() {
    let p = Project::new();
    p.write(
        PRD,
        r#"{"userStories": [{"id": "US-001", "title": "x", "passes": false}]}"#,
    );
    let (code, out) = ralph(&p, &["start", "--session-id", "s1", "--prd", "Go"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "`ralph prd lint` warns (armed anyway):\n  warning[no-check] US-001 has no check"
        ),
        "{out}"
    );
}

#[test]
fn the_templates_pass_prd_lint() {
    for template in ["software", "marketing"] {
        let p = Project::new();
        let (code, out) = ralph(&p, &["init", "--template", template]);
        assert_eq!(code, 0, "{out}");
        let (code, out) = ralph(&p, &["prd", "lint"]);
        assert_eq!(code, 0, "{template}: {out}");
        assert_eq!(out.trim(), "ralph/prd.json: no findings", "{template}");
    }
}

#[test]
fn a_markdown_prd_is_imported_into_prd_json() {
    let p = Project::new();
    p.write(
        "tasks/prd-tags.md",
        "# Tags\n\n## User Stories\n\n### US-001: Tag model\n**Description:** Tags on notes.\n\n**Acceptance Criteria:**\n- [ ] Note has tags\n\n**Verify:** `make tags`\n\n### US-002: Tag list\n**Acceptance Criteria:**\n- [ ] Tags are shown\n**Depends on:** US-001\n",
    );
    let (code, out) = ralph(&p, &["prd", "import", "tasks/prd-tags.md"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("wrote 2 stories to ralph/prd.json"), "{out}");
    assert!(out.contains("warning[no-check] US-002"), "{out}");
    let prd: serde_json::Value = serde_json::from_str(&p.read(PRD)).unwrap();
    assert_eq!(prd["userStories"][0]["verify"], "make tags");
    assert_eq!(prd["userStories"][1]["dependsOn"][0], "US-001");
    assert_eq!(
        prd["userStories"][1]["acceptanceCriteria"][0],
        "Tags are shown"
    );
    // An existing PRD is never replaced without --force.
    let (code, out) = ralph(&p, &["prd", "import", "tasks/prd-tags.md"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("exists; nothing was written"), "{out}");
}
