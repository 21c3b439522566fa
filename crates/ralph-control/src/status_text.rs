//! What `ralph status` and `ralph log` print of a project's loops, built
//! from their [`LoopReport`]s and decision-log lines. Text only: every value
//! from a loop file or a log is escaped here, the binary prints the lines.

use crate::listing::{LogChoice, LoopReport};
use ralph_fs::display;
use ralph_state::fields::limit::Limit;
use ralph_state::fields::outcome::LoopStatus;
use ralph_state::money::Money;
use ralph_state::plural;
use ralph_state::storage::store::Project;
use ralph_state::time::format_duration;

/// `ralph log` with no loop to show and none named.
pub const NOTHING_LOGGED: &str = "No Ralph loops in this project yet; nothing is logged.";

/// `ralph status --json`: the project and its loops.
pub fn status_json(project: &Project, reports: &[LoopReport]) -> serde_json::Value {
    serde_json::json!({ "project": project.root.display().to_string(), "loops": reports })
}

/// `ralph status`: each loop in a few lines and, when one ended, how to
/// see it as a page (`page_hint`: `report::page_hint`, a floor above this
/// one); one line when the project has no loops.
pub fn status(
    project: &Project,
    reports: &[LoopReport],
    page_hint: impl Fn(&str) -> String,
) -> Vec<String> {
    if reports.is_empty() {
        return vec![format!(
            "No Ralph loops in {} (arm one with /ralph-loop or `ralph start`).",
            project.root.display()
        )];
    }
    let mut lines: Vec<String> = reports.iter().flat_map(report).collect();
    if let Some(ended) = reports.iter().find(|r| r.state == LoopStatus::Ended) {
        lines.push(page_hint(&ended.name));
    }
    lines
}

/// One loop: its state, task, facts, guards, receipt, file and recent
/// decisions.
fn report(r: &LoopReport) -> Vec<String> {
    let mut out = vec![heading(r)];
    if let Some(task) = r.task.as_deref().filter(|t| !t.is_empty()) {
        out.push(format!("  task: {}", display::line(task)));
    }
    if let Some(gone) = driver_gone(r) {
        out.push(gone);
    }
    out.push(format!("  {}", facts(r).join(" · ")));
    out.extend(spends(r));
    if let Some(sandbox) = &r.sandbox {
        out.push(format!(
            "  sandbox (when `ralph run` drives it): {}",
            display::line(sandbox)
        ));
    }
    out.extend(stories(r));
    out.extend(crate::guidance::status_lines(
        &r.guidance_pending,
        r.question.as_deref(),
        &r.guidance_delivered,
    ));
    out.extend(guards(r));
    if let Some(receipt) = &r.receipt {
        out.push(format!(
            "  {}",
            ralph_state::storage::receipt::one_line(receipt)
        ));
    }
    out.extend(failure_trend(r));
    if let Some(note) = &r.not_armed {
        out.push(format!("  ⚠ {note}"));
    }
    if let Some(err) = &r.error {
        out.push(format!("  error: {}", display::line(err)));
    }
    out.push(format!("  file: {}", display::line(&r.path)));
    out.extend(
        r.recent
            .iter()
            .map(|line| format!("  · {}", log_line(line))),
    );
    out
}

/// A loop's first line: its state, name, how it ended and its iteration.
fn heading(r: &LoopReport) -> String {
    let iteration = match (r.iteration, r.max_iterations) {
        (Some(i), Some(Limit::Unlimited)) => format!("iteration {i} (no limit)"),
        (Some(i), Some(m)) => format!("iteration {i}/{m}"),
        _ => String::new(),
    };
    let how = r
        .outcome
        .as_deref()
        .map(|o| format!(" ({o})"))
        .unwrap_or_default();
    format!("{} `{}`{how} {iteration}", r.state, display::line(&r.name))
}

/// A `ralph` binary in words: its path and version.
pub fn binary_words(exe: &std::path::Path) -> String {
    format!(
        "{} (ralph {})",
        display::line(&exe.display().to_string()),
        env!("CARGO_PKG_VERSION")
    )
}

/// Which `ralph` the hooks run, as the last session start recorded it, and
/// this one when it differs.
pub fn hooks_binary_line(recorded: Option<&str>, this: Option<&str>) -> String {
    match (recorded, this) {
        (Some(hooks), Some(this)) if hooks != this => format!(
            "Hooks: the last session start ran {}; this command is {this}.",
            display::line(hooks)
        ),
        (Some(hooks), _) => format!(
            "Hooks: the last session start ran {} (this one).",
            display::line(hooks)
        ),
        (None, _) => "Hooks: no session start has run ralph's hooks on this machine yet (install the plugin: README).".to_owned(),
    }
}

/// Which usage a loop not ended drains: the agent `ralph run` starts, or
/// the session's.
fn spends(r: &LoopReport) -> Option<String> {
    match r.spends.filter(|_| r.state != LoopStatus::Ended)? {
        "run" => Some(format!(
            "  spends: the usage of the agent `ralph run` starts (with `claude -p`: {})",
            ralph_state::messages::spends_in_run("claude")
        )),
        "next" => Some(
            "  spends: the usage of what drives it next: the agent `ralph run --name NAME` starts, or the session that resumes it".to_owned(),
        ),
        _ => Some(format!(
            "  spends: {}",
            ralph_state::messages::SPENDS_IN_SESSION
        )),
    }
}

/// A PRD loop's stories, and the commands ralph runs when a story passes.
fn stories(r: &LoopReport) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(stories) = &r.stories {
        out.push(format!("  {}", display::line(stories)));
    }
    if !r.story_commands.is_empty() {
        // Each line escaped where it was built (`approval::bound_lines`).
        out.push("  story commands ralph runs, as you, when their story passes:".to_owned());
        out.extend(r.story_commands.iter().map(|line| format!("  {line}")));
    }
    out
}

/// The guards a loop is armed with and, while it runs, their counts now.
fn guards(r: &LoopReport) -> Option<String> {
    if r.guards.is_empty() {
        return None;
    }
    let figures = match (r.same_reply_count, r.no_progress_count, r.idle_blocks) {
        (Some(a), Some(b), Some(c)) if r.state != LoopStatus::Ended => {
            format!(
                " · now: {}, {}, {} without a tool",
                plural::count(a, "same reply", "same replies"),
                plural::count(b, "unchanged iteration", "unchanged iterations"),
                plural::count(c, "block", "blocks")
            )
        }
        _ => String::new(),
    };
    Some(format!(
        "  guards: {}{figures}",
        display::line(&r.guards.join(", "))
    ))
}

/// The trend of the failures the loop's check counted, when one is known.
fn failure_trend(r: &LoopReport) -> Option<String> {
    let trend = r
        .guard_counts
        .as_ref()
        .and_then(|c| c.failure_trend.as_deref())?;
    Some(format!(
        "  check: failures {}",
        ralph_state::fields::guards::trend_words(trend)
    ))
}

/// A `ralph run` owner whose process is gone: who gets the loop back, and
/// how to take it over or end it.
fn driver_gone(r: &LoopReport) -> Option<String> {
    let owner = r.session_id.as_deref().filter(|_| r.driver_gone)?;
    let run = ralph_state::fields::run_owner::RunOwner::parse(owner)?;
    let home = match run.session {
        Some(session) => format!(
            "session {} gets it back at its next stop; or ",
            ralph_fs::display::line(session)
        ),
        None => "nothing drives it: ".to_owned(),
    };
    Some(format!(
        "  ⚠ its driver {} is no longer running; {home}take it over with `ralph run --name {}`, or end it with `ralph cancel --name {}`",
        ralph_fs::display::line(&run.driver().to_string()),
        r.name,
        r.name
    ))
}

/// The promise, owner, times, tokens and dollars, for one line.
fn facts(r: &LoopReport) -> Vec<String> {
    let mut facts = Vec::new();
    if let Some(p) = &r.completion_promise {
        facts.push(format!("promise {}", display::line(p)));
    }
    facts.push(match r.session_id.as_deref() {
        Some(owner) => format!("owner {}", display::line(owner)),
        None if r.state == LoopStatus::Paused => format!(
            "no owner: `ralph run --name {}` or /ralph-resume in a session drives it",
            display::line(&r.name)
        ),
        None => "owner unclaimed".to_owned(),
    });
    if let Some(s) = &r.started_at {
        facts.push(format!("started {s}"));
    }
    if let Some(e) = r.elapsed_secs {
        facts.push(format!("elapsed {}", format_duration(e)));
    }
    if let Some(e) = &r.ended_at {
        facts.push(format!("ended {e}"));
    }
    if let Some(context) = last_context(r) {
        facts.push(context);
    }
    if let Some(t) = r.tokens_used.filter(|t| *t > 0) {
        let unseen = r.unseen_tokens.unwrap_or(0);
        let words = if r.state == LoopStatus::Ended {
            ralph_core::decide::token_words_final(t, unseen)
        } else {
            ralph_core::decide::token_words(t, unseen)
        };
        facts.push(format!("tokens {words}"));
    }
    let spent = r.guard_counts.as_ref().map(|c| c.cost_usd);
    let budget = r.guard_settings.as_ref().and_then(|g| g.max_cost_usd);
    match (spent, budget) {
        (Some(spent), Some(budget)) => {
            facts.push(format!("spent {} of {}", spent.dollars(), budget.dollars()));
        }
        (Some(spent), None) if spent.0 > 0 => facts.push(format!("spent {}", spent.dollars())),
        _ => {}
    }
    facts
}

/// What `ralph log` prints around a loop's decisions: a header, and a note
/// when there are none.
#[derive(Debug)]
pub struct LogText {
    pub header: String,
    /// Said when nothing is logged.
    pub when_empty: Option<String>,
}

/// The header (and empty note) of `ralph log` for what it chose.
pub fn log_text(project: &Project, choice: &LogChoice) -> LogText {
    match choice {
        LogChoice::Orphan(log) => LogText {
            header: format!(
                "Loop log {} (its loop file was deleted outside ralph):",
                project.shown(log)
            ),
            when_empty: None,
        },
        LogChoice::Loop(report) => LogText {
            header: format!(
                "Loop `{}` ({}) · task: {}",
                report.name,
                report.state,
                report.task.as_deref().unwrap_or("")
            ),
            when_empty: Some(format!(
                "The loop `{}` has no decisions logged yet.",
                report.name
            )),
        },
    }
}

/// One decision-log line, on one line: time, iteration, decision, why,
/// tokens and dollars.
pub fn log_line(line: &serde_json::Value) -> String {
    let field = |k: &str| {
        line.get(k)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .unwrap_or_default()
    };
    let known = line.get("tokens").and_then(serde_json::Value::as_u64);
    let unseen = line
        .get("tokens_unseen")
        .and_then(serde_json::Value::as_u64);
    // At the end, tokens the transcript had not shown never will be counted.
    let words = if field("decision") == "end" {
        ralph_core::decide::token_words_final
    } else {
        ralph_core::decide::token_words
    };
    let tokens = match (known, unseen.unwrap_or(0)) {
        (Some(known), unseen) if known > 0 || unseen > 0 => {
            format!(" · tokens {}", words(known, unseen))
        }
        _ => String::new(),
    };
    let tokens = match line.get("stories").and_then(|s| s.get("status")) {
        Some(serde_json::Value::String(s)) => format!("{tokens} · story checks: {s}"),
        _ => tokens,
    };
    let tokens = match line.get("cost_usd").and_then(Money::from_json_up) {
        // The running total after this stop, exact.
        Some(spent) => format!("{tokens} · spent {} in all", spent.dollars()),
        None => tokens,
    };
    let tokens = format!("{tokens}{}", context_words(line));
    // One line per stop: a multi-line reason (a refused promise with the
    // verify output) is folded onto its line.
    let why = field("why")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ⏎ ");
    display::line(&format!(
        "{} iteration {} {} — {why}{tokens}{}",
        field("time"),
        field("iteration"),
        field("decision"),
        guidance_words(line),
    ))
    .into_owned()
}

/// What a log line says of `ralph say`: the guidance it carried into an
/// iteration, the question the agent asked.
pub fn guidance_words(line: &serde_json::Value) -> String {
    let mut out = String::new();
    if let Some(list) = line.get("guidance").and_then(serde_json::Value::as_array) {
        let into = line
            .get("next_iteration")
            .or_else(|| line.get("iteration"))
            .map(ToString::to_string)
            .unwrap_or_default();
        let texts: Vec<String> = list
            .iter()
            .filter_map(|g| {
                let text = g.get("text")?.as_str()?;
                let gate = g.get("gate").and_then(serde_json::Value::as_bool) == Some(true);
                Some(format!("\"{text}\"{}", if gate { " (--gate)" } else { "" }))
            })
            .collect();
        out.push_str(&format!(
            " · guidance into iteration {into}: {}",
            texts.join(", ")
        ));
    }
    if let Some(q) = line.get("question").and_then(serde_json::Value::as_str) {
        out.push_str(&format!(" · the agent asks: {q}"));
    }
    out
}

/// `context 70% of 1M at iteration 3`: the last fill the recent log lines
/// measured.
fn last_context(r: &LoopReport) -> Option<String> {
    let line = r
        .recent
        .iter()
        .rev()
        .find(|l| l.get("context_tokens").is_some())?;
    let number = |k: &str| line.get(k).and_then(serde_json::Value::as_u64);
    let fill = ralph_state::context::Fill {
        tokens: number("context_tokens")?,
        window: number("context_window"),
    };
    let at = number("iteration")
        .map(|i| format!(" at iteration {i}"))
        .unwrap_or_default();
    Some(format!("context {}{at}", fill.words()))
}

/// ` · context 41% of 200k`, ` · context 82k, window unknown`, or
/// ` · compacted (auto)`: a log line's context fill, when it has one.
pub fn context_words(line: &serde_json::Value) -> String {
    let number = |k: &str| line.get(k).and_then(serde_json::Value::as_u64);
    let mut out = String::new();
    if line.get("decision").and_then(serde_json::Value::as_str) == Some("compact") {
        let trigger = line.get("trigger").and_then(serde_json::Value::as_str);
        out.push_str(&format!(" · compacted ({})", trigger.unwrap_or("unknown")));
    }
    if let Some(tokens) = number("context_tokens") {
        let fill = ralph_state::context::Fill {
            tokens,
            window: number("context_window"),
        };
        out.push_str(&format!(" · context {}", fill.words()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ArmRequest;
    use crate::listing::{choose_log, report};
    use ralph_state::storage::registry::locate;
    use ralph_state::time::Timestamp;

    /// A project with the loop `l` armed, and its reports.
    fn armed() -> (tempfile::TempDir, Project, Vec<LoopReport>) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("p/.claude")).unwrap();
        let project = Project {
            root: tmp.path().join("p"),
        };
        let registry = locate(Some(&tmp.path().join("state")), None).unwrap();
        let request = ArmRequest {
            name: "l".into(),
            prompt: "Fix the parser\nand more".into(),
            completion_promise: Some("DONE".into()),
            max_iterations: 5.into(),
            ..ArmRequest::default()
        };
        crate::arm(&project, &registry, &request, Timestamp(0)).unwrap();
        let reports = report(&project, Some(&registry), 3, 3, Timestamp(60)).unwrap();
        (tmp, project, reports)
    }

    #[test]
    fn a_project_without_loops_says_how_to_arm_one() {
        let project = Project {
            root: "/nowhere".into(),
        };
        assert_eq!(
            status(&project, &[], |_| unreachable!()),
            ["No Ralph loops in /nowhere (arm one with /ralph-loop or `ralph start`)."]
        );
    }

    #[test]
    fn a_live_loop_is_told_in_its_lines() {
        let (_tmp, project, reports) = armed();
        let lines = status(&project, &reports, |_| unreachable!());
        assert_eq!(lines[0], "active `l` iteration 1/5");
        assert_eq!(lines[1], "  task: Fix the parser");
        assert_eq!(
            lines[2],
            "  promise DONE · owner unclaimed · started 1970-01-01T00:00:00Z · elapsed 1m"
        );
        assert!(lines[3].starts_with("  spends: "), "{lines:#?}");
        assert!(
            lines.last().unwrap().starts_with("  file: ")
                && lines.last().unwrap().ends_with("l-loop.local.md"),
            "{lines:#?}"
        );
        assert!(
            !lines.iter().any(|l| l.starts_with("Report:")),
            "no loop ended"
        );
    }

    #[test]
    fn the_log_names_its_loop_and_says_when_nothing_is_logged() {
        let (_tmp, project, _) = armed();
        let choice = choose_log(&project, None, None, Timestamp(60))
            .unwrap()
            .unwrap();
        let text = log_text(&project, &choice);
        assert_eq!(text.header, "Loop `l` (active) · task: Fix the parser");
        assert_eq!(
            text.when_empty.as_deref(),
            Some("The loop `l` has no decisions logged yet.")
        );
        let err = choose_log(&project, Some("other"), None, Timestamp(60)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no loop named `other` (see `ralph status`)"
        );
    }

    #[test]
    fn a_log_left_without_its_loop_file_is_found_and_said_so() {
        let tmp = tempfile::tempdir().unwrap();
        let project = Project {
            root: tmp.path().to_owned(),
        };
        std::fs::create_dir_all(project.history_dir()).unwrap();
        let log = project.history_dir().join("20260101T000000Z-l.log.jsonl");
        std::fs::write(&log, "{}\n").unwrap();
        let choice = choose_log(&project, Some("l"), None, Timestamp(0))
            .unwrap()
            .unwrap();
        assert!(matches!(&choice, LogChoice::Orphan(found) if *found == log));
        let text = log_text(&project, &choice);
        assert_eq!(
            text.header,
            format!(
                "Loop log {} (its loop file was deleted outside ralph):",
                std::path::Path::new(".claude/ralph/history/20260101T000000Z-l.log.jsonl")
                    .components()
                    .collect::<std::path::PathBuf>()
                    .display()
            )
        );
        assert!(text.when_empty.is_none());
        let empty = Project {
            root: tmp.path().join("none"),
        };
        assert!(
            choose_log(&empty, None, None, Timestamp(0))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_log_line_tells_the_guidance_it_carried_and_the_question() {
        let line = serde_json::json!({
            "time": "T", "iteration": 2, "decision": "block", "why": "went on",
            "next_iteration": 3,
            "guidance": [{"text": "use /v2"}, {"text": "run the tests \u{1b}[2J", "gate": true}],
        });
        assert_eq!(
            log_line(&line),
            "T iteration 2 block — went on · guidance into iteration 3: \"use /v2\", \"run the tests \\x1b[2J\" (--gate)"
        );
        let asked = serde_json::json!({"time": "T", "iteration": 1, "decision": "pause",
            "why": "the agent asks: A or B?", "question": "A or B?"});
        assert!(log_line(&asked).ends_with(" · the agent asks: A or B?"));
    }

    #[test]
    fn a_log_line_folds_its_reason_and_tells_tokens_and_dollars() {
        let line = serde_json::json!({
            "time": "T",
            "iteration": 2,
            "decision": "block",
            "why": "refused\n  cargo test\n\nfailed \u{1b}",
            "tokens": 10,
            "tokens_unseen": 5,
            "cost_usd": 0.25,
        });
        assert_eq!(
            log_line(&line),
            "T iteration 2 block — refused ⏎ cargo test ⏎ failed \\x1b · tokens 10 known + ~5 not yet in the transcript · spent $0.25 in all"
        );
    }

    #[test]
    fn a_log_line_tells_the_context_fill_or_that_the_window_is_unknown() {
        let mut line = serde_json::json!({
            "time": "T", "iteration": 3, "decision": "block", "why": "w",
            "context_tokens": 82_006, "context_window": 200_000, "context_percent": 42,
        });
        assert_eq!(
            log_line(&line),
            "T iteration 3 block — w · context 42% of 200k"
        );
        line.as_object_mut().unwrap().remove("context_window");
        assert_eq!(
            log_line(&line),
            "T iteration 3 block — w · context 82k, window unknown"
        );
        let compact = serde_json::json!({
            "time": "T", "iteration": 3, "decision": "compact", "why": "w", "trigger": "auto",
        });
        assert_eq!(
            log_line(&compact),
            "T iteration 3 compact — w · compacted (auto)"
        );
    }
}
