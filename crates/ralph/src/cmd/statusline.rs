//! `ralph statusline`: this session's loop in one short line, for Claude
//! Code's `statusLine` setting. Runs on every refresh, so it only reads:
//! no lock, no transcript, no loop file written; the one write is the plan's
//! 5-hour window it was shown, kept per user for `--max-window`.

use std::io::Read;

use ralph_core::hook::context::HookContext;
use ralph_core::loop_file::scan::Scan;
use ralph_core::time::{Timestamp, format_duration};
use serde_json::Value;

pub fn statusline() -> crate::exit::Outcome {
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    let status: Value = serde_json::from_str(&input).unwrap_or(Value::Null);
    let text = |v: &Value| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from)
    };
    let session = status["session_id"]
        .as_str()
        .map(str::to_owned)
        .or_else(crate::env::session_from_env);
    let mut ctx = HookContext::from_env();
    keep_window(&status, &ctx);
    if ctx.project_dir.is_none() {
        ctx.project_dir = text(&status["workspace"]["project_dir"]);
    }
    let cwd = text(&status["workspace"]["current_dir"]).or_else(|| text(&status["cwd"]));
    let Some(project) = ctx.locate(cwd.as_deref()) else {
        return Ok(());
    };
    let Ok(scan) = Scan::read(&project, ctx.registry().as_ref()) else {
        return Ok(());
    };
    let mine = scan
        .entries
        .iter()
        .find(|e| session.is_some() && e.live().is_some_and(|l| l.state.session_id == session));
    if let Some(entry) = mine
        && let (Some(live), Some(arming)) = (entry.live(), entry.arming())
    {
        let state = &live.state;
        // A loop not armed here is inert, whoever it names: say how to adopt it.
        let mut shown = line(&live.file.name, state, Timestamp::now());
        if let Some(prd) = &state.prd {
            // One small file, only for a --prd loop.
            let stories = ralph_core::decide::prd_turn::status_of(&project.root, prd);
            shown = format!("{shown} · {stories}");
        }
        if matches!(arming, ralph_core::loop_file::registry::Arming::Unarmed(_)) {
            shown = format!(
                "⚠ {} · not armed here: ralph adopt --name {}",
                shown,
                ralph_core::display::line(&live.file.name)
            );
        }
        say!("{}", ralph_core::display::line(&shown));
    }
    Ok(())
}

/// Keeps the plan's 5-hour window for the Stop hook (which is never shown
/// it), when it changed since the last refresh.
fn keep_window(status: &Value, ctx: &HookContext) {
    use ralph_core::loop_file::window;
    let (Some(seen), Some(registry)) = (
        window::Window::from_statusline(status, Timestamp::now()),
        ctx.registry(),
    ) else {
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
fn line(name: &str, state: &ralph_core::loop_file::state::LoopState, now: Timestamp) -> String {
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
    let task = ralph_core::loop_file::messages::task_line(&state.prompt, 40);
    if !task.is_empty() {
        parts.push(task);
    }
    parts.join(" · ")
}
