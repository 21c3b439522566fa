//! `ralph statusline`: this session's loop in one short line, from the JSON
//! Claude Code gives its `statusLine` command. Runs on every refresh, so it
//! only reads: no lock, no transcript, no loop file written; the one write
//! is the plan's 5-hour window it was shown, kept per user for
//! `--max-window`.

use serde_json::Value;

use ralph_state::fields::state::LoopState;
use ralph_state::scan::Scan;
use ralph_state::storage::environment::Environment;
use ralph_state::storage::registry::Arming;
use ralph_state::time::{Timestamp, format_duration};

/// The line for `input` (the status JSON; anything else reads as none),
/// or `None` when this session drives no loop here. `session`: the
/// session the environment names, when the JSON names none.
pub fn statusline(
    input: &str,
    mut ctx: Environment,
    session: Option<String>,
    now: Timestamp,
) -> Option<String> {
    let status: Value = serde_json::from_str(input).unwrap_or(Value::Null);
    let text = |v: &Value| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from)
    };
    let session = status["session_id"].as_str().map(str::to_owned).or(session);
    keep_window(&status, &ctx, now);
    if let (Some(session), Some(size), Some(registry)) = (
        session.as_deref(),
        ralph_state::storage::window::context_window_size(&status),
        ctx.registry(),
    ) {
        let _ =
            ralph_state::storage::window::keep_context_window(registry.dir(), session, size, now);
    }
    if ctx.project_dir.is_none() {
        ctx.project_dir = text(&status["workspace"]["project_dir"]);
    }
    let cwd = text(&status["workspace"]["current_dir"]).or_else(|| text(&status["cwd"]));
    let project = ctx.locate(cwd.as_deref())?;
    let scan = Scan::read(&project, ctx.registry().as_ref()).ok()?;
    let entry = scan
        .entries
        .iter()
        .find(|e| session.is_some() && e.live().is_some_and(|l| l.state.session_id == session))?;
    let (live, arming) = (entry.live()?, entry.arming()?);
    let state = &live.state;
    // A loop not armed here is inert, whoever it names: say how to adopt it.
    // The client's own figure for this session, live between stops.
    let context = status["context_window"]["used_percentage"]
        .as_f64()
        .filter(|u| u.is_finite() && *u >= 0.0)
        .map(|u| format!("ctx {}%", u.ceil()));
    let mut shown = line(&live.file.name, state, now, context);
    if let Some(prd) = &state.prd {
        // One small file, only for a --prd loop.
        let stories = ralph_core::decide::prd_turn::status_of(&project.root, prd);
        shown = format!("{shown} · {stories}");
    }
    if matches!(arming, Arming::Unarmed(_)) {
        shown = format!(
            "⚠ {} · not armed here: ralph adopt --name {}",
            shown,
            ralph_fs::display::line(&live.file.name)
        );
    }
    Some(ralph_fs::display::line(&shown).into_owned())
}

/// Keeps the plan's 5-hour window for the Stop hook (which is never shown
/// it), when it changed since the last refresh.
fn keep_window(status: &Value, ctx: &Environment, now: Timestamp) {
    use ralph_state::storage::window;
    let (Some(seen), Some(registry)) =
        (window::Window::from_statusline(status, now), ctx.registry())
    else {
        return;
    };
    let kept = window::load(registry.dir());
    let same = kept.is_some_and(|k| {
        (k.used_percentage, k.resets_at) == (seen.used_percentage, seen.resets_at)
    });
    if !same {
        let _ = window::save(registry.dir(), &seen);
    }
}

/// `🔄 ralph 3/20 · 12m · DONE · Fix the parser`; paused: `⏸ ralph 3/20 · 12m · paused · …`.
fn line(name: &str, state: &LoopState, now: Timestamp, context: Option<String>) -> String {
    let icon = if state.active { "🔄" } else { "⏸" };
    let mut parts = vec![format!("{icon} {name} {}", state.iteration_label())];
    if let Some(start) = state.started_at {
        parts.push(format_duration(now.secs_since(start)));
    }
    if let Some(budget) = state.guards.max_cost_usd {
        parts.push(format!(
            "{}/{}",
            state.progress.counts.cost_usd.dollars(),
            budget.dollars()
        ));
    }
    if !state.active {
        parts.push("paused".into());
    } else if let Some(p) = &state.completion_promise {
        parts.push(p.clone());
    }
    parts.extend(context);
    let task = ralph_state::messages::task_line(&state.prompt, 40);
    if !task.is_empty() {
        parts.push(task);
    }
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop `l`, armed for session `s1`, and the context that finds it
    /// (the Stop hook's test project, with Claude Code's block cap).
    fn armed(tmp: &tempfile::TempDir) -> Environment {
        ralph_state::test_support::armed_environment(tmp, 8)
    }

    #[test]
    fn the_session_that_drives_a_loop_sees_it_in_one_line() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = armed(&tmp);
        let shown = statusline(r#"{"session_id":"s1"}"#, ctx.clone(), None, Timestamp(60));
        assert_eq!(
            shown.as_deref(),
            Some("🔄 l 1/5 · 1m · DONE · Fix the parser")
        );
        let from_env = statusline("not json", ctx.clone(), Some("s1".into()), Timestamp(60));
        assert_eq!(from_env, shown, "the session the environment names");
        let input = r#"{"session_id":"s1","context_window":{"context_window_size":1000000,"used_percentage":18.2}}"#;
        let shown = statusline(input, ctx.clone(), None, Timestamp(60));
        assert_eq!(
            shown.as_deref(),
            Some("🔄 l 1/5 · 1m · DONE · ctx 19% · Fix the parser")
        );
        let kept =
            ralph_state::storage::window::load_context_windows(ctx.registry().unwrap().dir());
        assert_eq!(kept.of("s1"), Some(1_000_000), "kept for the Stop hook");
    }

    #[test]
    fn another_session_or_none_sees_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = armed(&tmp);
        let other = statusline(r#"{"session_id":"s2"}"#, ctx.clone(), None, Timestamp(60));
        assert_eq!(other, None);
        assert_eq!(statusline("", ctx, None, Timestamp(60)), None);
    }
}
