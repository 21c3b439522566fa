//! The words ralph says: the footer under the fed-back prompt, the one-line
//! status for the user, and the notices when a loop ends. Text from a loop
//! file or a reply in what the *user* sees goes through `display::line`;
//! the footer is for the model and quotes the file as written.

use std::fmt::Write as _;

use crate::fields::limit::Limit;
use crate::fields::outcome::Outcome;
use crate::fields::state::{LoopState, Progress};
use ralph_fs::display::line;

/// The footer under the prompt, telling the agent where it is and exactly
/// how to finish.
pub fn footer(name: &str, state: &LoopState, next: u64, notes: &[String]) -> String {
    let mut out = String::from("\n\n---\n");
    let of = state
        .max_iterations
        .get()
        .map(|n| format!(" of {n}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "Ralph loop `{name}`, iteration {next}{of}. Your earlier work is in the files and git history."
    );
    for note in notes {
        out.push_str(note);
        out.push('\n');
    }
    out.push_str(&how_to_finish(state));
    out
}

/// The limits and budgets that end a loop before it completes, in words,
/// only those it has: `its limit of 10 iterations`, `its token budget of
/// 15000`, `its dollar budget of $2.00`, `its time budget of 2h`.
pub fn bounds(state: &LoopState) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(n) = state.max_iterations.get() {
        out.push(format!("its limit of {}", crate::plural::iterations(n)));
    }
    if let Some(t) = state.guards.max_tokens {
        out.push(format!("its token budget of {t}"));
    }
    if let Some(c) = state.guards.max_cost_usd {
        out.push(format!("its dollar budget of {}", c.dollars()));
    }
    if let Some(secs) = state.guards.max_duration_secs {
        out.push(format!(
            "its time budget of {}",
            crate::time::format_duration(secs)
        ));
    }
    out
}

/// `a, b or c` (`a` alone, `a or b`).
fn either(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// How a loop without a way to complete ends, for the agent and the user:
/// its limit and budgets, or, when it has none, only the breakers and the user.
fn ends_without_completing(state: &LoopState) -> String {
    let bounds = bounds(state);
    if bounds.is_empty() {
        "nothing but a breaker or the user (/ralph-cancel) ends it".to_owned()
    } else {
        format!("it ends at {}", either(&bounds))
    }
}

/// What the decision log says of a turn after which the loop goes on,
/// in the loop's own terms (a `--prd` loop waits for stories, not a promise).
pub fn went_on(state: &LoopState) -> &'static str {
    match (&state.prd, &state.completion_promise) {
        (Some(_), _) => "not every story passes yet",
        (None, Some(_)) => "no promise yet",
        (None, None) if state.gate_alone() => "the gate has not passed yet",
        (None, None) => "went on (no completion promise)",
    }
}

/// Why a loop ended at its iteration limit, in its own terms.
pub fn limit_reached(state: &LoopState) -> String {
    let what = match (&state.prd, &state.completion_promise) {
        (Some(_), _) => " before every story passed",
        (None, Some(_)) => " without the promise",
        (None, None) if state.gate_alone() => " before the gate passed",
        (None, None) => "",
    };
    format!(
        "reached the limit of {}{what}",
        crate::plural::iterations(state.max_iterations.count())
    )
}

/// How a loop that ended at its iteration limit goes on, with its count,
/// spend and log: `/ralph-resume --add-iterations` in its session, or
/// `ralph resume` then `ralph run` for a loop `ralph run` drove.
pub fn add_iterations(name: &str, state: &LoopState) -> String {
    let name = line(name);
    let more = state.max_iterations.count().clamp(1, 10);
    let by_run = state
        .session_id
        .as_deref()
        .is_some_and(crate::fields::run_owner::is_run);
    if by_run {
        format!(
            "To go on: `ralph resume --name {name} --add-iterations {more}`, then `ralph run --name {name}`."
        )
    } else {
        format!(
            "To go on: `/ralph-resume --add-iterations {more}` in this session (or `ralph resume --name {name} --add-iterations {more}`)."
        )
    }
}

/// The finishing rule, shared by the footer and `ralph start`'s activation text.
pub fn how_to_finish(state: &LoopState) -> String {
    let mut out = String::new();
    if let Some(prd) = &state.prd {
        let _ = writeln!(
            out,
            "To finish: complete the stories of `{}` one by one, setting each one's `\"passes\"` to `true` when it is done; ralph checks each one, and the loop ends by itself when every story passes.",
            prd.path
        );
    }
    match &state.completion_promise {
        Some(p) => {
            let _ = writeln!(
                out,
                "{}when the task is completely done and verified, output <promise>{p}</promise> on a line of its own (not in code or quotes). Only when it is TRUE; never to leave the loop.{}",
                if state.prd.is_some() {
                    "Once every story passes, you may also say so: "
                } else {
                    "To finish: "
                },
                if state.guards.verify.is_some() {
                    " A verification command then checks it."
                } else {
                    ""
                }
            );
        }
        None if state.gate_alone() => {
            let _ = writeln!(
                out,
                "To finish: make `{}` pass. ralph runs it at each turn end where your turn changed the work tree or HEAD, and the loop completes when it exits 0.",
                state.guards.verify.as_deref().unwrap_or("")
            );
        }
        None if state.prd.is_none() => {
            let _ = writeln!(
                out,
                "This loop has no completion promise: {}.",
                ends_without_completing(state)
            );
        }
        None => {}
    }
    let bounds = bounds(state);
    let completes = state.prd.is_some() || state.completion_promise.is_some() || state.gate_alone();
    if completes && !bounds.is_empty() {
        let _ = writeln!(
            out,
            "If it is not done before, the loop ends at {}.",
            either(&bounds)
        );
    }
    if let Some(a) = &state.abort_promise {
        let _ = writeln!(
            out,
            "If you are blocked by something only a person can fix, explain it and output <promise>{a}</promise> on a line of its own."
        );
    }
    out.push_str(ASK_LINE);
    out
}

/// How the agent asks the user and waits (the loop pauses until `ralph say` answers).
pub(crate) const ASK_LINE: &str = "If only the user can decide something you need, end your reply with <question>your question</question> on a line of its own: the loop pauses until the user answers, and the answer comes as guidance.\n";

/// The section a prompt carries for the guidance `ralph say` queued: each
/// text as the user wrote it (control characters escaped), `--gate`'s marked.
pub fn guidance_section(texts: &[(String, bool)]) -> String {
    if texts.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n\n## Guidance from the user (ralph say)\n\n");
    for (text, gate) in texts {
        let _ = writeln!(
            out,
            "- {}{}",
            escape_controls(text),
            if *gate {
                " (must be heeded: the first promise after this is refused once)"
            } else {
                ""
            }
        );
    }
    out.push_str("Follow it in this iteration; it is not repeated.\n");
    out
}

/// The section of a continuation that tells the agent the user raised the
/// loop's bounds (`ralph resume --add-*`, `/ralph-resume`, `ralph watch`'s `+`):
/// each bound, old and new. Empty when nothing was raised.
pub fn raised_section(raised: &[String]) -> String {
    if raised.is_empty() {
        return String::new();
    }
    format!(
        "\n\n## Bounds raised by the user\n\n{}\n",
        raised
            .iter()
            .map(|r| format!("- {}", escape_controls(r)))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// The line the user sees (the hook's systemMessage) when a continuation
/// tells the agent of raised bounds.
pub fn raised_notice(name: &str, raised: &[String]) -> String {
    format!(
        "⬆ ralph `{}`: bounds raised, the agent is told: {}",
        escape_controls(name),
        escape_controls(&raised.join(", "))
    )
}

/// What the decision log adds to a turn that told the agent of raised bounds.
pub fn raised_told(raised: &[String]) -> String {
    format!(
        "Told the agent: bounds raised: {}.",
        escape_controls(&raised.join(", "))
    )
}

/// The note a promise refused by `ralph say --gate` guidance leaves the agent.
pub fn gate_refused(texts: &[String]) -> String {
    let mut out = String::from(
        "The promise was refused once: the user's guidance (ralph say --gate) came after your last promise. Make sure your work follows it, then give the promise again:",
    );
    for text in texts {
        out.push_str("\n- ");
        out.push_str(&escape_controls(text));
    }
    out
}

/// The one line the user sees while the loop goes on.
pub fn status_line(name: &str, state: &LoopState, next: u64) -> String {
    let limit = state.max_iterations;
    let promise = match (&state.completion_promise, &state.guards.verify) {
        (Some(p), _) => format!(" · ends on <promise>{}</promise>", line(p)),
        (None, Some(v)) if state.gate_alone() => format!(" · ends when `{}` passes", line(v)),
        _ => String::new(),
    };
    format!(
        "🔄 ralph `{}`: iteration {next}/{limit}{promise}",
        line(name)
    )
}

/// The notice when a loop ends, on one line: a reason of several lines
/// (a story's concerns, say) is folded with ⏎, as `ralph log` folds it,
/// never shown with `\n`.
pub fn ended(name: &str, outcome: Outcome, detail: &str, record: &str) -> String {
    let (icon, what) = outcome.headline();
    let detail = detail
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ⏎ ");
    format!(
        "{icon} ralph `{}` {what}: {}. Record: {}",
        line(name),
        line(&detail),
        line(record)
    )
}

/// The guards a loop runs, in words: `time budget 2h00m, verify `cargo test` …`.
pub fn guard_summary(state: &LoopState) -> Vec<String> {
    let mut out = state.guards.summary(state.abort_promise.as_deref());
    out.extend(path_rules(state));
    out.extend(
        crate::gate_sandbox::words(&state.guards, state.prd.is_some(), state.sandbox.is_some())
            .map(|words| format!("gate {words}")),
    );
    if let Some(at) = state.fresh_at {
        out.push(format!(
            "a fresh conversation at {} (a wrap-up turn, then /clear)",
            at.words()
        ));
    }
    out
}

/// `--protect` and `--scope`, as the guards' summary words them.
pub fn path_rules(state: &LoopState) -> Vec<String> {
    let rules = &state.paths;
    let mut out = Vec::new();
    if !rules.protect.is_empty() {
        out.push(format!("protect {}", rules.protect.join(" ")));
    }
    if !rules.scope.is_empty() {
        out.push(format!("scope {}", rules.scope.join(" ")));
    }
    out
}

/// The guard figures after a turn, for `ralph run`'s progress lines:
/// `tokens 1200/5000 · same reply 1/3 · unchanged 0/5`.
pub fn guard_figures(state: &LoopState, progress: &Progress) -> String {
    let mut out = Vec::new();
    match state.guards.max_tokens {
        Some(limit) => out.push(format!("tokens {}/{limit}", progress.tokens_used)),
        None if progress.tokens_used > 0 => {
            out.push(format!("tokens {}", progress.tokens_used));
        }
        None => {}
    }
    // What the loop spent so far, not this iteration's share: said so.
    match state.guards.max_cost_usd {
        Some(limit) => out.push(format!(
            "spent {} of {}",
            progress.counts.cost_usd.dollars(),
            limit.dollars()
        )),
        None if progress.counts.cost_usd.0 > 0 => {
            out.push(format!(
                "spent {} so far",
                progress.counts.cost_usd.dollars()
            ));
        }
        None => {}
    }
    let g = &state.guards;
    if let Some(limit) = g.stuck_after.get() {
        out.push(format!("same reply {}/{limit}", progress.same_reply_count));
    }
    if let Some(limit) = g
        .no_progress_after
        .get()
        .filter(|_| progress.tree_fingerprint.is_some())
    {
        out.push(format!("unchanged {}/{limit}", progress.no_progress_count));
    }
    let counts = &progress.counts;
    if let Some(limit) = g
        .max_verify_failures
        .get()
        .filter(|_| counts.verify_failures > 0)
    {
        out.push(format!("failed checks {}/{limit}", counts.verify_failures));
    }
    if let Some(trend) = &progress.counts.failure_trend {
        out.push(format!(
            "failures {}",
            crate::fields::guards::trend_words(trend)
        ));
    }
    if let Some(limit) = g
        .max_same_failure
        .get()
        .filter(|_| counts.same_failures > 0)
    {
        out.push(format!("same failure {}/{limit}", counts.same_failures));
    }
    out.join(" · ")
}

/// For the user's status line when `--verify` refused the promise (or, in
/// a `--prd` loop, a story set to passing: there is no promise to refuse).
pub fn verify_refused_status(state: &LoopState, status: &str) -> String {
    let what = match (&state.prd, &state.completion_promise) {
        (Some(_), _) => "story refused: ",
        (None, Some(_)) => "promise refused: ",
        (None, None) => "",
    };
    format!("{what}--verify failed ({})", escape_controls(status))
}

/// What refused a claim of done at a stop, if anything: the `--verify` gate, or
/// `--protect`/`--scope` (before any gate ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Not,
    ByVerify,
    ByPaths,
}

/// [`went_on`], or what refused the claim of done at this stop.
pub fn went_on_after(state: &LoopState, refused: Refused) -> &'static str {
    match (refused, &state.prd, &state.completion_promise) {
        (Refused::Not, ..) => went_on(state),
        (Refused::ByVerify, Some(_), _) => "story refused by --verify",
        (Refused::ByVerify, None, Some(_)) => "promise refused by --verify",
        (Refused::ByVerify, None, None) => "--verify failed",
        (Refused::ByPaths, Some(_), _) => "story refused by --protect/--scope",
        (Refused::ByPaths, None, Some(_)) => "promise refused by --protect/--scope",
        (Refused::ByPaths, None, None) => "--protect/--scope refused the change",
    }
}

/// What a loop works on, in one line for `status`, `log` and the status
/// line: the task's first non-blank line, at most `max` characters, escaped.
pub fn task_line(prompt: &str, max: usize) -> String {
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let cut = match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    };
    escape_controls(&cut).replace('\t', " ")
}

/// Text from a file, safe to print: control characters (but newlines and
/// tabs), and the invisible characters that reorder or hide text, are shown
/// as escapes (`\x1b`, `\u{202e}`), so a file cannot steer the terminal or
/// make its words look like other words.
pub fn escape_controls(text: &str) -> String {
    ralph_fs::display::block(text).into_owned()
}

// ---------------------------------------------------------------------------
// What the session hooks (prompt, session start, session end) tell the user.

/// Text from a file or an event, made safe to show: control characters are
/// written as escapes, so a name cannot move the cursor or clear the screen.
pub fn printable(text: &str) -> String {
    ralph_fs::display::line(text).into_owned()
}

fn limit_words(max_iterations: Limit) -> String {
    match max_iterations.get() {
        None => "no iteration limit".into(),
        Some(n) => format!("at most {}", crate::plural::iterations(n)),
    }
}

/// What the user sees when `/ralph-loop` armed a loop (the UserPromptSubmit hook arms it,
/// before the first turn): its limit, how it ends (the `--verify` gate included) and how to
/// stop it. `kept`: the same session asked again for the loop it already drives.
pub fn armed(name: &str, state: &LoopState, kept: bool) -> String {
    let gate = state
        .guards
        .verify
        .as_deref()
        .map(|v| format!(" and `{}` passes", printable(v)))
        .unwrap_or_default();
    // The limit was just said ("at most 12 iterations"): named short here.
    let mut bounds = bounds(state);
    if state.max_iterations.is_set() {
        bounds[0] = "the limit".to_owned();
    }
    let or_bounds = if bounds.is_empty() {
        String::new()
    } else {
        format!(", or at {}", either(&bounds))
    };
    let ends = match (&state.prd, &state.completion_promise) {
        (Some(prd), _) => format!(
            "it ends when every story of `{}` passes{or_bounds}",
            printable(&prd.path)
        ),
        (None, Some(p)) => format!(
            "it ends when the agent outputs <promise>{}</promise>{gate}{or_bounds}",
            printable(p)
        ),
        (None, None) if state.gate_alone() => format!(
            "it ends when `{}` passes, run at each turn end that changed the work tree or HEAD{or_bounds}",
            printable(state.guards.verify.as_deref().unwrap_or(""))
        ),
        (None, None) => format!("no completion promise: {}", ends_without_completing(state)),
    };
    let what = if kept {
        format!(
            "already armed for this session, iteration {}: the same loop, kept as it is",
            state.iteration_label()
        )
    } else {
        format!(
            "armed for this session, {}",
            limit_words(state.max_iterations)
        )
    };
    format!(
        "🔄 ralph `{}`: {what}; {ends}{}. Every turn end feeds the task back — /ralph-pause or /ralph-cancel to stop.",
        printable(name),
        path_rules_words(state)
    )
}

/// `--protect`/`--scope` as the arming line says them: what refuses a claim of done.
fn path_rules_words(state: &LoopState) -> String {
    let rules = &state.paths;
    let mut what = Vec::new();
    if !rules.protect.is_empty() {
        what.push(format!(
            "a protected path ({}) changes",
            printable(&rules.protect.join(", "))
        ));
    }
    if !rules.scope.is_empty() {
        what.push(format!(
            "a path outside the scope ({}) changes",
            printable(&rules.scope.join(", "))
        ));
    }
    if what.is_empty() {
        return String::new();
    }
    format!("; it is refused while {}", what.join(" or "))
}

/// A message the user queued while the agent worked: the Stop hook let the turn end so it
/// runs now, and counted nothing.
pub fn queued_goes_first(name: &str, state: &LoopState) -> String {
    format!(
        "⏸ ralph `{}`: your queued message goes first, so this turn ends here (not counted, iteration {}). The loop carries on when the turn it starts ends; a ralph command starts no turn, so after one the loop waits for your next message (after /ralph-pause, for /ralph-resume).",
        printable(name),
        state.iteration_label()
    )
}

/// The first prompt after the loop's turn ended without the loop ending
/// (Esc, Ctrl-C, the client's block cap).
pub fn prompt_into_loop(name: &str, state: &LoopState) -> String {
    format!(
        "🔄 ralph `{}` is armed, iteration {}: this message goes into the loop — /ralph-pause or /ralph-cancel to stop",
        printable(name),
        state.iteration_label()
    )
}

/// The session that owned a loop ended; the loop was paused.
pub fn paused_at_session_end(name: &str, state: &LoopState, why: &str) -> String {
    format!(
        "⏸ ralph `{}` paused at iteration {}: {why}. It will not run on by itself; /ralph-resume in this session (claude --resume) carries on.",
        printable(name),
        state.iteration_label()
    )
}

/// What an in-session loop spends, for the arming line and `ralph status`.
pub const SPENDS_IN_SESSION: &str = "this session's usage: the plan's 5-hour and weekly windows on a subscription, or the account of the API key it runs with";

/// What a `ralph run` spends with `agent` (its command line).
pub fn spends_in_run(agent: &str) -> String {
    if agent.split_whitespace().next() == Some("claude") {
        "API-priced `claude -p` usage (on subscription plans, the separate credit for print mode), in the dollars each run reports".to_owned()
    } else {
        format!(
            "whatever `{}` bills; ralph counts the cost an agent reports, and, sandboxed under bubblewrap, what its meter counts of the model's API",
            printable(agent.split_whitespace().next().unwrap_or(agent))
        )
    }
}

/// A rate or usage limit ended a turn; the loop was paused, uncounted.
pub fn paused_for_limit(name: &str, state: &LoopState, why: &str) -> String {
    format!(
        "⏸ ralph `{}` paused at iteration {}: {}. It waits for you: /ralph-resume carries on once the limit has reset, /ralph-cancel ends it.",
        printable(name),
        state.iteration_label(),
        printable(why)
    )
}

/// `/clear` ended the owning session: the loop waits for the new conversation.
pub fn handed_over_at_clear(name: &str, state: &LoopState) -> String {
    format!(
        "⏸ ralph `{}` (iteration {}) moves to the conversation /clear opens.",
        printable(name),
        state.iteration_label()
    )
}

/// `--fresh-at`: the wrap-up is done and the loop waits for a fresh
/// conversation. One plain line: what to type.
pub fn fresh_pause(name: &str, state: &LoopState) -> String {
    format!(
        "⏸ ralph `{}` wrapped up for a fresh context: type /clear, then any message, and the loop goes on at iteration {} in the new conversation.",
        printable(name),
        state.iteration_label()
    )
}

/// What the conversation `/clear` opened is told, for the model, when it
/// takes over a loop paused by `--fresh-at`: the task, as the Stop hook
/// feeds it, so the first message the user sends starts on it.
pub fn fresh_context(name: &str, state: &LoopState) -> String {
    format!(
        "A Ralph loop continues in this fresh conversation. The previous agent left its notes in the project's progress file and the git history: read them first. Whatever the user's next message says, work on this task:\n\n{}{}",
        state.prompt,
        footer(name, state, state.iteration, &[])
    )
}

/// `--fresh-via run`, said at arming: who takes over, and what it spends.
pub fn fresh_via_run(name: &str) -> String {
    format!(
        "--fresh-via run: at --fresh-at, after the wrap-up turn, a detached `ralph run --name {}` takes this loop over; it spends {}, not this session's usage.",
        printable(name),
        spends_in_run("claude")
    )
}

/// `--fresh-via run`: the wrap-up is done and a detached `ralph run` was started.
pub fn fresh_run_started(name: &str, state: &LoopState, pid: u32) -> String {
    format!(
        "⏩ ralph `{}` wrapped up for a fresh context: a detached `ralph run` (pid {pid}) takes it over at iteration {}, with {}; `ralph status` follows it, `ralph cancel` ends it.",
        printable(name),
        state.iteration_label(),
        spends_in_run("claude")
    )
}

/// `--fresh-via run`: `ralph run` could not be started; the loop waits as for `--fresh-via clear`.
pub fn fresh_run_failed(name: &str, state: &LoopState, why: &str) -> String {
    format!(
        "⚠ ralph `{}`: could not start `ralph run` ({}); the loop is paused at iteration {}: `ralph run --name {}` in a terminal, or type /clear and any message.",
        printable(name),
        printable(why),
        state.iteration_label(),
        printable(name)
    )
}

/// The user's line when the fresh conversation takes the loop over.
pub fn fresh_taken_over(name: &str, state: &LoopState) -> String {
    format!(
        "🔄 ralph `{}` goes on in this fresh conversation at iteration {}: send any message to start.",
        printable(name),
        state.iteration_label()
    )
}

/// The owning session starts (resume, startup) and its loop is paused.
pub fn paused_on_start(name: &str, state: &LoopState, why: Option<&str>) -> String {
    let why = why
        .map(|w| format!(" ({})", printable(w)))
        .unwrap_or_default();
    format!(
        "⏸ ralph `{}` is paused at iteration {}{why}. /ralph-resume carries on, /ralph-cancel ends it.",
        printable(name),
        state.iteration_label()
    )
}

/// The owning session is resumed while its loop is still active.
pub fn armed_on_start(name: &str, state: &LoopState) -> String {
    format!(
        "🔄 ralph `{}` is armed, iteration {}: your next message goes into the loop — /ralph-pause or /ralph-cancel to stop",
        printable(name),
        state.iteration_label()
    )
}

/// Compaction keeps the loop.
pub fn kept_after_compaction(name: &str, state: &LoopState) -> String {
    format!(
        "🔄 ralph `{}` is kept after compaction, iteration {}: the task is fed back at the next stop — /ralph-pause or /ralph-cancel to stop",
        printable(name),
        state.iteration_label()
    )
}

/// `/clear` handed the loop over to the new conversation.
pub fn kept_after_clear(name: &str, state: &LoopState, active: bool) -> String {
    if active {
        format!(
            "🔄 ralph `{}` is kept after /clear and now runs in this conversation, iteration {}: your next message goes into the loop — /ralph-pause or /ralph-cancel to stop",
            printable(name),
            state.iteration_label()
        )
    } else {
        format!(
            "⏸ ralph `{}` is kept after /clear, still paused at iteration {}: /ralph-resume carries on, /ralph-cancel ends it.",
            printable(name),
            state.iteration_label()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_notice_folds_a_reason_of_several_lines() {
        let notice = ended(
            "l",
            Outcome::Completed,
            "all 2 stories pass; US-1 concerns: slow\non Windows",
            "r.md",
        );
        assert!(
            notice.contains("slow ⏎ on Windows") && !notice.contains("\\n"),
            "{notice}"
        );
    }

    #[test]
    fn controls_are_escaped_and_text_kept() {
        assert_eq!(
            escape_controls("verify `cargo test`\r\x1b[2Kcurl x | sh"),
            "verify `cargo test`\\r\\x1b[2Kcurl x | sh"
        );
        assert_eq!(escape_controls("a\u{202e}b\u{85}"), "a\\u{202e}b\\x85");
        assert_eq!(
            escape_controls("a\u{200b}b\u{feff}"),
            "a\\u{200b}b\\u{feff}"
        );
        assert_eq!(escape_controls("line\n\tnext 🚀 é"), "line\n\tnext 🚀 é");
    }
}

/// `--prd`: the words about stories, for the agent (`story_*`) and the
/// user (`*_notice`, escaped).
pub mod stories {
    use std::fmt::Write as _;

    use crate::fields::stories::{self, Story};
    use crate::fields::stories::{PrdSeen, StoryRefusal};
    use ralph_fs::display::line;

    /// `story US-002 · 1 of 3 pass` (or `no story open · 2 of 3 pass`).
    pub fn status(all: &[Story]) -> String {
        let (pass, total) = stories::tally(all);
        match stories::current(all) {
            Some(s) => format!("story {} · {pass} of {total} pass", line(&s.id)),
            None => format!("no story open · {pass} of {total} pass"),
        }
    }

    /// The current story, under the task, for the agent.
    pub fn section(prd: &PrdSeen) -> String {
        let Some(story) = stories::current(&prd.stories) else {
            return String::new();
        };
        let (pass, total) = stories::tally(&prd.stories);
        let mut out = format!("\n\n## Current story {}: {}\n\n", story.id, story.title);
        if !story.description.is_empty() {
            let _ = writeln!(out, "{}\n", story.description);
        }
        if !story.criteria.is_empty() {
            out.push_str("Acceptance criteria:\n");
            for c in &story.criteria {
                let _ = writeln!(out, "- {c}");
            }
            out.push('\n');
        }
        let _ = write!(
            out,
            "{}. Work on this story only. When it is done, set its `\"passes\"` to `true` in `{}`{}; ralph then checks it. If only a person can unblock it, set `\"blocked\": \"<why>\"` on it instead. Note anything the user should know in its `\"concerns\"`.",
            crate::plural::stories_pass(pass as u64, total as u64),
            prd.file,
            match &story.verify {
                Some(c) => format!(" (its check `{c}` runs then)"),
                None => String::new(),
            }
        );
        out
    }

    /// Why a story was set back, for the agent.
    pub fn refused(refusal: &StoryRefusal) -> String {
        match refusal {
            StoryRefusal::Failed {
                id,
                command,
                verification: v,
            } if command == stories::CRITERIA_CHECK => format!(
                "Story {id} was set back to `\"passes\": false`: {} (title, description or acceptanceCriteria edited, or a story added or removed). The PRD's criteria are the spec: restore them exactly as they were when this loop was armed, then set it to true again. Only the user can change them (by arming the loop again).",
                v.status
            ),
            StoryRefusal::Failed {
                id,
                command,
                verification: v,
            } => {
                let output = match v.output_tail.trim_end() {
                    "" => "It printed nothing.".to_owned(),
                    tail => format!("Last lines of its output:\n{tail}"),
                };
                format!(
                    "Story {id} was set back to `\"passes\": false`: its check `{command}` failed ({}). Fix the cause, then set it to true again.\n{output}",
                    v.status
                )
            }
            StoryRefusal::Unrecorded { id, command } => format!(
                "Story {id} was set back to `\"passes\": false`: its verify command `{command}` is not the one recorded when this loop was armed, so ralph did not run it. Put the command back as it was; only the user can approve a new one (by arming the loop again)."
            ),
        }
    }

    /// The PRD's criteria differ from those bound at arming (`why` names
    /// the stories), for the agent at every continuation.
    pub fn criteria_changed(why: &str) -> String {
        format!(
            "The PRD's {why} (title, description or acceptanceCriteria edited, or a story added or removed). They are the spec: restore them exactly as they were when this loop was armed. No story passes and the loop does not complete while they differ; only the user can change them (by arming the loop again)."
        )
    }

    /// A story whose own command passed as it turned to passing, for the user.
    pub fn check_passed(id: &str) -> String {
        format!("✓ story {}: its check passed; it counts as done", line(id))
    }

    /// Why a story was set back, for the user.
    pub fn refused_notice(file: &str, refusal: &StoryRefusal) -> String {
        match refusal {
            StoryRefusal::Failed {
                id,
                command,
                verification: v,
            } => format!(
                "⚠ ralph: story {} refused: `{}` failed ({})",
                line(id),
                line(command),
                line(&v.status)
            ),
            StoryRefusal::Unrecorded { id, command } => format!(
                "⚠ ralph: story {}'s verify command `{}` was added or changed after arming; it was not run. Read it, then re-arm to approve it: ralph start --prd={} --force …",
                line(id),
                line(command),
                line(file)
            ),
        }
    }

    /// A promise while stories are open, for the agent.
    pub fn promise_while_open(expected: &str, all: &[Story]) -> String {
        let open: Vec<&str> = all
            .iter()
            .filter(|s| !s.passes)
            .map(|s| s.id.as_str())
            .collect();
        format!(
            "Your promise `{expected}` was refused: these stories do not pass yet: {}. The loop ends by itself when every story passes.",
            open.join(", ")
        )
    }

    /// Each story's concerns, `; `-separated (empty when none).
    fn concerns(all: &[Story]) -> String {
        all.iter()
            .filter(|s| !s.concerns.is_empty())
            .map(|s| format!("{} concerns: {}", s.id, s.concerns.join(" / ")))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Why the loop completed.
    pub fn done(prd: &PrdSeen, iteration: u64) -> String {
        let mut out = match prd.stories.len() {
            1 => format!(
                "the one story of {} passes, at iteration {iteration}",
                prd.file
            ),
            2 => format!(
                "both stories of {} pass, at iteration {iteration}",
                prd.file
            ),
            n => format!(
                "all {n} stories of {} pass, at iteration {iteration}",
                prd.file
            ),
        };
        let c = concerns(&prd.stories);
        if !c.is_empty() {
            let _ = write!(out, "; {c}");
        }
        out
    }

    /// Why the loop ended as blocked: each blocked story with its reason.
    pub fn blocked(prd: &PrdSeen) -> String {
        let (pass, total) = stories::tally(&prd.stories);
        let each: Vec<String> = prd
            .stories
            .iter()
            .filter(|s| !s.passes)
            .filter_map(|s| {
                s.blocked
                    .as_ref()
                    .map(|why| format!("{} blocked: {why}", s.id))
            })
            .collect();
        let mut out = format!(
            "{}; {}; a person must act, then arm the loop again",
            crate::plural::stories_pass(pass as u64, total as u64),
            each.join("; ")
        );
        let c = concerns(&prd.stories);
        if !c.is_empty() {
            let _ = write!(out, "; {c}");
        }
        out
    }

    #[cfg(test)]
    mod counts {
        use super::*;

        fn prd(passing: &[bool], blocked: bool) -> PrdSeen {
            let stories = passing
                .iter()
                .enumerate()
                .map(|(i, &passes)| Story {
                    id: format!("S{i}"),
                    passes,
                    blocked: (blocked && !passes).then(|| "a key".to_owned()),
                    ..Story::default()
                })
                .collect();
            PrdSeen {
                file: "prd.json".into(),
                stories,
                ..PrdSeen::default()
            }
        }

        #[test]
        fn story_counts_agree_with_one_two_and_many() {
            assert!(done(&prd(&[true], false), 1).starts_with("the one story of prd.json passes"));
            assert!(done(&prd(&[true; 2], false), 1).starts_with("both stories of prd.json pass"));
            assert!(done(&prd(&[true; 3], false), 1).starts_with("all 3 stories of prd.json pass"));
            assert!(blocked(&prd(&[false], true)).starts_with("0 of 1 story pass;"));
            assert!(blocked(&prd(&[true, false], true)).starts_with("1 of 2 stories passes;"));
            assert!(blocked(&prd(&[true, true, false], true)).starts_with("2 of 3 stories pass;"));
            let open = prd(&[false], false);
            assert!(section(&open).contains("0 of 1 story pass. Work on this story only."));
        }
    }
}
