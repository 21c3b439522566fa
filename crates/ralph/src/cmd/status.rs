//! `ralph status | log`: what the project's loops are and what they did.
//! Reads only (`ralph_core::control::report`); every value from a loop file is
//! shown escaped.

use ralph_core::control::{self, LoopReport};
use ralph_core::loop_file::outcome::LoopStatus;
use ralph_core::time::{Timestamp, format_duration};

use crate::cli::{LogArgs, StatusArgs};
use crate::exit::Outcome;

pub fn status(args: StatusArgs) -> Outcome {
    let project = crate::env::project();
    let registry = crate::env::registry();
    let mut reports = control::report(
        &project,
        registry.as_ref(),
        args.history,
        3,
        Timestamp::now(),
    )?;
    attach_receipts(&project, registry.as_ref(), &mut reports);
    if args.json {
        let value =
            serde_json::json!({ "project": project.root.display().to_string(), "loops": reports });
        say_json!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    if reports.is_empty() {
        say!(
            "No Ralph loops in {} (arm one with /ralph-loop or `ralph start`).",
            project.root.display()
        );
        return Ok(());
    }
    for r in &reports {
        print_report(r);
    }
    if let Some(ended) = reports.iter().find(|r| r.state == LoopStatus::Ended) {
        say!("{}", report_line(&ended.name));
    }
    Ok(())
}

/// The last line when a loop ended: how to see it as a page.
fn report_line(name: &str) -> String {
    format!(
        "Report: `ralph report --name {}` writes {}/{}.html (`ralph report --all`: every loop)",
        one_line(name),
        ralph_core::report::REPORTS,
        ralph_core::report::file_stem(name)
    )
}

/// Each ended loop's receipt, when the one kept for its name is for this
/// very record (a later run of the same name has its own).
fn attach_receipts(
    project: &ralph_core::loop_file::store::Project,
    registry: Option<&ralph_core::loop_file::registry::Registry>,
    reports: &mut [LoopReport],
) {
    let (Some(registry), Ok(root)) = (
        registry,
        ralph_core::loop_file::registry::canonical_root(project),
    ) else {
        return;
    };
    for r in reports.iter_mut().filter(|r| r.state == LoopStatus::Ended) {
        let Ok(receipt) = ralph_core::loop_file::receipt::load(registry, &root, &r.name) else {
            continue;
        };
        let file_name = |p: &str| std::path::Path::new(p).file_name().map(ToOwned::to_owned);
        if file_name(&receipt.record).is_some() && file_name(&receipt.record) == file_name(&r.path)
        {
            r.receipt = Some(receipt);
        }
    }
}

fn print_report(r: &LoopReport) {
    let iteration = match (r.iteration, r.max_iterations) {
        (Some(i), Some(0)) => format!("iteration {i} (no limit)"),
        (Some(i), Some(m)) => format!("iteration {i}/{m}"),
        _ => String::new(),
    };
    let how = r
        .outcome
        .as_deref()
        .map(|o| format!(" ({o})"))
        .unwrap_or_default();
    say!("{} `{}`{how} {iteration}", r.state, one_line(&r.name));
    if let Some(task) = r.task.as_deref().filter(|t| !t.is_empty()) {
        say!("  task: {}", one_line(task));
    }
    if r.driver_gone
        && let Some(owner) = &r.session_id
    {
        let home = match owner.split_once(':') {
            Some((_, session)) => format!(
                "session {} gets it back at its next stop; or ",
                ralph_core::display::line(session)
            ),
            None => "nothing drives it: ".to_owned(),
        };
        say!(
            "  ⚠ its driver {} is no longer running; {home}take it over with `ralph run --name {}`, or end it with `ralph cancel --name {}`",
            ralph_core::display::line(owner.split_once(':').map_or(owner.as_str(), |(id, _)| id)),
            r.name,
            r.name
        );
    }
    let mut facts = Vec::new();
    if let Some(p) = &r.completion_promise {
        facts.push(format!("promise {}", one_line(p)));
    }
    facts.push(format!(
        "owner {}",
        one_line(r.session_id.as_deref().unwrap_or("unclaimed"))
    ));
    if let Some(s) = &r.started_at {
        facts.push(format!("started {s}"));
    }
    if let Some(e) = r.elapsed_secs {
        facts.push(format!("elapsed {}", format_duration(e)));
    }
    if let Some(e) = &r.ended_at {
        facts.push(format!("ended {e}"));
    }
    if let Some(t) = r.tokens_used.filter(|t| *t > 0) {
        let unseen = r.unseen_tokens.unwrap_or(0);
        facts.push(format!(
            "tokens {}",
            ralph_core::decide::token_words(t, unseen)
        ));
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
    say!("  {}", facts.join(" · "));
    match r.spends.filter(|_| r.state != LoopStatus::Ended) {
        Some("run") => say!(
            "  spends: the usage of the agent `ralph run` starts (with `claude -p`: {})",
            ralph_core::loop_file::messages::spends_in_run("claude")
        ),
        Some(_) => say!(
            "  spends: {}",
            ralph_core::loop_file::messages::SPENDS_IN_SESSION
        ),
        None => {}
    }
    if let Some(stories) = &r.stories {
        say!("  {}", one_line(stories));
    }
    if !r.guards.is_empty() {
        let figures = match (r.same_reply_count, r.no_progress_count, r.idle_blocks) {
            (Some(a), Some(b), Some(c)) if r.state != LoopStatus::Ended => {
                format!(
                    " · now: {a} same replies, {b} unchanged iterations, {c} blocks without a tool"
                )
            }
            _ => String::new(),
        };
        say!("  guards: {}{figures}", one_line(&r.guards.join(", ")));
    }
    if let Some(receipt) = &r.receipt {
        say!("  {}", ralph_core::loop_file::receipt::one_line(receipt));
    }
    if let Some(trend) = r
        .guard_counts
        .as_ref()
        .and_then(|c| c.failure_trend.as_deref())
    {
        say!(
            "  check: failures {}",
            ralph_core::loop_file::guards::trend_words(trend)
        );
    }
    if let Some(note) = &r.not_armed {
        say!("  ⚠ {note}");
    }
    if let Some(err) = &r.error {
        say!("  error: {}", one_line(err));
    }
    say!("  file: {}", one_line(&r.path));
    for line in &r.recent {
        say!("  · {}", log_summary(line));
    }
}

fn log_summary(line: &serde_json::Value) -> String {
    let field = |k: &str| {
        line.get(k)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .unwrap_or_default()
    };
    let known = line.get("tokens").and_then(serde_json::Value::as_u64);
    let unseen = line
        .get("tokens_unseen")
        .and_then(serde_json::Value::as_u64);
    let tokens = match (known, unseen.unwrap_or(0)) {
        (Some(known), unseen) if known > 0 || unseen > 0 => format!(
            " · tokens {}",
            ralph_core::decide::token_words(known, unseen)
        ),
        _ => String::new(),
    };
    let tokens = match line.get("cost_usd").and_then(serde_json::Value::as_f64) {
        // Shown as logged (the log holds the exact decimal).
        Some(_) => format!("{tokens} · spent ${}", field("cost_usd")),
        None => tokens,
    };
    // One line per stop: a multi-line reason (a refused promise with the
    // verify output) is folded onto its line.
    let why = field("why")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ⏎ ");
    one_line(&format!(
        "{} iteration {} {} — {why}{tokens}",
        field("time"),
        field("iteration"),
        field("decision"),
    ))
    .into_owned()
}

/// A value shown on one line: its newlines are escaped too.
fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    ralph_core::display::line(text)
}

/// The newest decision log in the history without a loop record beside it (a loop whose
/// file was deleted by hand), of the loop `name` if given.
fn orphan_log(
    project: &ralph_core::loop_file::store::Project,
    name: Option<&str>,
) -> Option<std::path::PathBuf> {
    let history = project.history_dir();
    let mut logs: Vec<String> = std::fs::read_dir(&history)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.strip_suffix(".log.jsonl").is_some_and(|stem| {
                !history.join(format!("{stem}.md")).exists()
                    && name.is_none_or(|name| stem.ends_with(&format!("-{name}")))
            })
        })
        .collect();
    // Record names start with the time they ended: the last is the newest.
    logs.sort();
    logs.pop().map(|n| history.join(n))
}

pub fn log(args: LogArgs) -> Outcome {
    let project = crate::env::project();
    let session = crate::env::session_from_env();
    let reports = control::report(&project, None, usize::MAX, 0, Timestamp::now())?;
    let chosen = match &args.name {
        Some(name) => reports.iter().find(|r| &r.name == name),
        None => reports
            .iter()
            .find(|r| session.is_some() && r.session_id == session && r.state != LoopStatus::Ended)
            .or_else(|| reports.first()),
    };
    let Some(report) = chosen else {
        // A loop whose file was deleted by hand has no report, but its log was kept.
        if let Some(log) = orphan_log(&project, args.name.as_deref()) {
            let lines = ralph_core::loop_file::store::read_log_tail(&log, usize::MAX);
            if !args.json {
                say!(
                    "Loop log {} (its loop file was deleted outside ralph):",
                    crate::env::display(&project, &log)
                );
            }
            for line in &lines {
                if args.json {
                    say_json!("{line}");
                } else {
                    say!("{}", log_summary(line));
                }
            }
            return Ok(());
        }
        return if let Some(name) = args.name {
            Err(format!("no loop named `{name}` (see `ralph status`)").into())
        } else {
            say!("No Ralph loops in this project yet; nothing is logged.");
            Ok(())
        };
    };
    // A linked logs folder is never read (the report's path is empty then).
    let lines = ralph_core::loop_file::store::read_log_tail(&report.log, usize::MAX);
    if !args.json {
        let task = report.task.as_deref().unwrap_or("");
        say!("Loop `{}` ({}) · task: {task}", report.name, report.state);
    }
    for line in &lines {
        if args.json {
            say_json!("{line}");
        } else {
            say!("{}", log_summary(line));
        }
    }
    if lines.is_empty() && !args.json {
        say!("The loop `{}` has no decisions logged yet.", report.name);
    }
    Ok(())
}
