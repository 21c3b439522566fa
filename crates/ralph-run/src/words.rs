//! Every sentence ralph can show a user or an agent, walked for each kind
//! of loop (a promise, `--prd`, neither; with and without an iteration
//! limit and a budget): none shows an escaped control sequence (`\n` as two
//! characters), and none speaks of a promise, an iteration limit or a budget
//! the loop does not have. Test only; it sits in the top library crate
//! (the report is its dev-dependency) so that it sees every builder: the
//! arming text, the footer, the status line, the session notices, the end
//! notice, `ralph status`, `ralph run`'s screen, the report and the webhook.

use ralph_control::arming::{self, ArmOptions, TypedTask};
use ralph_control::{listing as control_report, status_text, test_support};
use ralph_core::decide::{self, Decision, Observation};
use ralph_state::fields::outcome::Outcome;
use ralph_state::fields::state::LoopState;
use ralph_state::messages;
use ralph_state::time::Timestamp;

/// One kind of loop: the options it is armed with, and what it has.
#[allow(
    clippy::struct_excessive_bools,
    reason = "a table row: what a loop has, yes or no"
)]
struct Kind {
    label: &'static str,
    options: &'static [(&'static str, &'static str)],
    promise: bool,
    prd: bool,
    limit: bool,
    budget: bool,
}

const KINDS: &[Kind] = &[
    Kind {
        label: "a promise and a limit",
        options: &[("completion-promise", "DONE"), ("max-iterations", "10")],
        promise: true,
        prd: false,
        limit: true,
        budget: false,
    },
    Kind {
        label: "a promise, no limit",
        options: &[("completion-promise", "DONE"), ("max-iterations", "0")],
        promise: true,
        prd: false,
        limit: false,
        budget: false,
    },
    Kind {
        label: "--prd and a limit",
        options: &[("prd", "ralph/prd.json"), ("max-iterations", "10")],
        promise: false,
        prd: true,
        limit: true,
        budget: false,
    },
    Kind {
        label: "--prd, a dollar budget, no limit",
        options: &[
            ("prd", "ralph/prd.json"),
            ("max-iterations", "0"),
            ("max-cost", "2"),
        ],
        promise: false,
        prd: true,
        limit: false,
        budget: true,
    },
    Kind {
        label: "neither, a limit",
        options: &[("max-iterations", "10")],
        promise: false,
        prd: false,
        limit: true,
        budget: false,
    },
    Kind {
        label: "--verify alone, a limit",
        options: &[("verify", "true"), ("max-iterations", "10")],
        promise: false,
        prd: false,
        limit: true,
        budget: false,
    },
    Kind {
        label: "neither, a token budget, no limit",
        options: &[("max-iterations", "0"), ("max-tokens", "15000")],
        promise: false,
        prd: false,
        limit: false,
        budget: true,
    },
];

const PRD: &str = r#"{"userStories": [
  {"id": "US-001", "title": "One", "priority": 1, "passes": false},
  {"id": "US-002", "title": "Two", "priority": 2, "passes": false}
]}"#;

/// Every text ralph shows for a loop of `kind`, each with where it is shown.
fn every_text(kind: &Kind) -> Vec<(String, String)> {
    let (_tmp, project, registry) = test_support::project();
    let dir = project.ensure_dir("ralph").unwrap();
    ralph_fs::safe_fs::create_new(&dir.join("prd.json"), PRD.as_bytes()).unwrap();
    let mut options = ArmOptions {
        name: "l".into(),
        session_id: Some("s1".into()),
        ..ArmOptions::default()
    };
    for (key, value) in kind.options {
        options.apply(key, value).unwrap();
    }
    let activation = arming::arm_and_tell(
        &project,
        Some(&registry),
        options,
        TypedTask::from("Tidy the docs".to_owned()),
        Timestamp(0),
    )
    .unwrap();
    let state = activation.armed.state.clone();
    let mut out: Vec<(String, String)> = activation
        .text
        .iter()
        .map(|t| ("arming (ralph start)".to_owned(), t.clone()))
        .collect();
    out.extend(notices(&state));
    out.extend(ending(&state));
    let reports = control_report::report(&project, Some(&registry), 10, 10, Timestamp(60)).unwrap();
    // The project's own path is no sentence of ralph's (on Windows its `\` would read as
    // an escape): shown as a placeholder.
    let root = project.root.display().to_string();
    for line in status_text::status(&project, &reports, |n| format!("report of {n}")) {
        out.push(("ralph status".into(), line.replace(&root, "PROJECT")));
    }
    let scope = ralph_report::ReportScope::Name("l".to_owned());
    let report = ralph_report::gather(&project, Some(&registry), &scope, Timestamp(60)).unwrap();
    let page = ralph_report::render(&report);
    out.push((
        "the report (its text)".into(),
        visible_text(&page).replace(&root, "PROJECT"),
    ));
    out
}

/// What the agent and the user see while the loop runs and is paused.
fn notices(state: &LoopState) -> Vec<(String, String)> {
    let n = "l";
    let mut out = vec![
        ("footer (the agent)", messages::footer(n, state, 2, &[])),
        ("how to finish (the agent)", messages::how_to_finish(state)),
        ("status line", messages::status_line(n, state, 2)),
        ("/ralph-loop armed", messages::armed(n, state, false)),
        ("/ralph-loop kept", messages::armed(n, state, true)),
        ("queued message", messages::queued_goes_first(n, state)),
        ("prompt into loop", messages::prompt_into_loop(n, state)),
        (
            "paused at session end",
            messages::paused_at_session_end(n, state, "the session ended"),
        ),
        (
            "handed over at /clear",
            messages::handed_over_at_clear(n, state),
        ),
        (
            "paused on start",
            messages::paused_on_start(n, state, Some("paused by the user")),
        ),
        ("armed on start", messages::armed_on_start(n, state)),
        (
            "kept after compaction",
            messages::kept_after_compaction(n, state),
        ),
        (
            "kept after /clear",
            messages::kept_after_clear(n, state, true),
        ),
        (
            "kept after /clear, paused",
            messages::kept_after_clear(n, state, false),
        ),
        ("decision log, went on", messages::went_on(state).to_owned()),
        (
            "refused by --verify",
            messages::went_on_after(state, messages::Refused::ByVerify).to_owned(),
        ),
        (
            "refused by --protect",
            messages::went_on_after(state, messages::Refused::ByPaths).to_owned(),
        ),
        (
            "status line, --verify failed",
            messages::verify_refused_status(state, "exit 101"),
        ),
        (
            "ralph run figures",
            messages::guard_figures(state, &state.progress),
        ),
        ("guards", messages::guard_summary(state).join(", ")),
    ];
    if let Some(limit) = state.guards.max_tokens {
        out.push(("footer tokens", decide::token_note(0, 0, 1, limit)));
    }
    let mut screen = crate::screen::Screen::new(n);
    let it = crate::Iteration {
        label: "1/10".into(),
        next: 2,
        promise_refused: false,
        figures: messages::guard_figures(state, &state.progress),
        went_on: messages::went_on(state),
        reply: crate::agent::AgentReply::default(),
        raised: Vec::new(),
    };
    out.push(("ralph run, an iteration", screen.iterated(&it, 40)));
    out.push(("ralph run, the spinner", screen.spinner(0, "2/10", 50)));
    out.into_iter().map(|(w, t)| (w.to_owned(), t)).collect()
}

/// The end at the iteration limit (when there is one), as the engine words
/// it (the decision's reason, the end notice, the webhook).
fn ending(state: &LoopState) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let detail = if let Some(limit) = state.max_iterations.get().filter(|_| state.prd.is_none()) {
        let mut at_limit = state.clone();
        at_limit.iteration = limit;
        // A turn that changed nothing: a gate-alone loop's gate does not run.
        at_limit.progress.tree_fingerprint = Some("t".into());
        let seen = Observation {
            tree_fingerprint: Some("t".into()),
            reply: Some("working on it".into()),
            now: Some(Timestamp(30)),
            ..Observation::default()
        };
        match decide::decide(&at_limit, &seen) {
            Decision::End { detail, .. } => detail,
            other => panic!("the limit did not end it: {other:?}"),
        }
    } else if state.max_iterations.is_set() {
        messages::limit_reached(state)
    } else {
        "cancelled by the user".to_owned()
    };
    let outcome = if state.max_iterations.is_set() {
        Outcome::MaxIterations
    } else {
        Outcome::Cancelled
    };
    out.push(("end reason".to_owned(), detail.clone()));
    out.push((
        "end notice".to_owned(),
        messages::ended("l", outcome, &detail, ".claude/ralph/history/x.md"),
    ));
    let message = ralph_notify::Message::ended(&ralph_state::fields::notice::EndNotice {
        loop_name: "l".to_owned(),
        project: "/p".to_owned(),
        outcome,
        why: detail.clone(),
        iterations: state.iteration,
        cost: None,
    });
    out.push((
        "webhook".to_owned(),
        serde_json::to_string(&message).unwrap(),
    ));
    out
}

/// A page's text as a reader sees it: tags, the style sheet and attribute
/// values left out (class names such as `budget` are not words shown).
fn visible_text(page: &str) -> String {
    let body = page.split("</style>").nth(1).unwrap_or(page);
    let mut out = String::new();
    let mut in_tag = false;
    for c in body.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// What is wrong with `text` for a loop of `kind`, if anything.
fn untruths(kind: &Kind, text: &str) -> Vec<&'static str> {
    let mut wrong = Vec::new();
    for escape in ["\\n", "\\r", "\\t", "\\x", "\\u{"] {
        if text.contains(escape) {
            wrong.push("an escaped control sequence shown as text");
        }
    }
    let lower = text.to_lowercase();
    if !kind.promise
        && lower
            .replace("no completion promise", "")
            .contains("promise")
    {
        wrong.push("a promise the loop does not have");
    }
    if kind.prd && lower.contains("no completion promise") {
        wrong.push("a --prd loop said to have no way to complete");
    }
    let limits = lower
        .replace("no iteration limit", "")
        .replace("(no limit)", "");
    let iteration_limit = ["iteration limit", "at the limit", "its limit", "limit of "];
    if !kind.limit && iteration_limit.iter().any(|p| limits.contains(p)) {
        wrong.push("an iteration limit the loop does not have");
    }
    if !kind.budget && lower.contains("budget") {
        wrong.push("a budget the loop does not have");
    }
    wrong
}

#[test]
fn no_sentence_claims_what_the_loop_does_not_have() {
    let mut failures = Vec::new();
    for kind in KINDS {
        for (place, text) in every_text(kind) {
            for why in untruths(kind, &text) {
                failures.push(format!("{} · {place}: {why}:\n{text}\n", kind.label));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn each_loop_tells_the_agent_and_the_user_what_ends_it() {
    for kind in KINDS {
        let texts = every_text(kind);
        let find = |place: &str| {
            texts
                .iter()
                .filter(|(p, _)| p == place)
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        };
        let (finish, armed) = (find("how to finish (the agent)"), find("/ralph-loop armed"));
        if kind.prd {
            for text in [&finish, &armed] {
                assert!(text.contains("every story"), "{}: {text}", kind.label);
            }
        } else if kind.options.iter().any(|(k, _)| *k == "verify") {
            // The gate alone: it ends the loop, named in both.
            for text in [&finish, &armed] {
                assert!(text.contains("`true` pass"), "{}: {text}", kind.label);
            }
        } else if kind.promise {
            assert!(
                finish.contains("<promise>DONE</promise>"),
                "{}: {finish}",
                kind.label
            );
        } else {
            // Neither: the limit or the budget that ends it, by name.
            let end = if kind.limit {
                "its limit of 10 iterations"
            } else {
                "its token budget of 15000"
            };
            for text in [&finish, &armed] {
                assert!(text.contains(end), "{}: {text}", kind.label);
            }
        }
    }
}

#[test]
fn the_walk_catches_what_it_looks_for() {
    // The words this fix replaced, each caught for the kind it lied about.
    let neither = &KINDS[6];
    let prd = &KINDS[3];
    for (kind, old) in [
        (
            neither,
            "This loop has no completion promise: it runs until its iteration limit or a budget ends it.",
        ),
        (
            prd,
            "🔄 ralph `l`: armed; no completion promise: it ends at the limit.",
        ),
        (prd, "no promise yet"),
        (
            prd,
            "reached the limit of 10 iterations without the promise",
        ),
        (neither, "the same failure; its output ends:\\nFAILED: x"),
    ] {
        assert!(!untruths(kind, old).is_empty(), "{old}");
    }
}
