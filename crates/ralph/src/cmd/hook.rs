//! `ralph hook stop [--host NAME]`: read the event, answer in the host's
//! shape, exit 0 — whatever happens, and in time: a watchdog answers for
//! the hook if it runs out of time.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ralph_core::hook;
use ralph_core::hook::HostAnswer;
use ralph_core::hook::answer::Answer;
use ralph_core::hook::host::Host;
use ralph_fs::gate;
use ralph_state::storage::environment::Environment;

/// The hook's own work (everything but a verification gate) must end
/// within this; far inside the 900 s `timeout` of `hooks/hooks.json`.
const DEADLINE: Duration = Duration::from_secs(60);
/// Whatever runs, the answer comes before this (the gate is capped at
/// 840 s, the hooks.json timeout is 900 s).
const HARD_DEADLINE: Duration = Duration::from_secs(880);

/// Set once an answer was printed: the hook prints at most one JSON object,
/// whether the work or the watchdog answers first.
static ANSWERED: Mutex<bool> = Mutex::new(false);

pub(super) fn stop(host: Option<Host>) -> ExitCode {
    let started = Instant::now();
    let deadline = deadline_from_env();
    // Before the event is read the host is known only when it was named.
    let watchdog_host = host.unwrap_or(Host::Claude);
    std::thread::spawn(move || watchdog(started, deadline, watchdog_host));
    // Parsed as it is read: a huge reply is never held twice over.
    // A stop that ends a loop hands back its last word; this binary names who sends it.
    let ctx = Environment {
        courier: Some(ralph_notify::send),
        ..Environment::from_env()
    };
    let reply = hook::stop_reader_for_host(std::io::stdin().lock(), &ctx, host);
    answer_once(&reply);
    ExitCode::SUCCESS
}

/// Prints `reply` unless one was printed already; true if it printed.
fn answer_once(reply: &HostAnswer) -> bool {
    let mut answered = ANSWERED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *answered {
        return false;
    }
    *answered = true;
    if let Answer::Notice(message) = &reply.answer {
        // A closed stderr must not cost the answer: `eprintln!` would panic
        // (and, with `panic = "abort"`, kill the hook by SIGABRT).
        let _ = writeln!(std::io::stderr(), "{}", ralph_fs::display::block(message));
    }
    // A closed stdout leaves nothing to tell; the exit code stays 0 either way.
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(reply.render().as_bytes());
    let _ = out.flush();
    true
}

/// Sleeps until the hook's own time (wall time minus time in verification
/// gates) reaches `deadline`, then allows the stop with a notice and ends
/// the process, unless the hook answered first.
fn watchdog(started: Instant, deadline: Duration, host: Host) {
    loop {
        let elapsed = started.elapsed();
        let own = elapsed.saturating_sub(gate::time_in_gates());
        if own >= deadline || elapsed >= HARD_DEADLINE {
            break;
        }
        // Both positive: the loop left above when either ran out.
        let left = deadline
            .saturating_sub(own)
            .min(HARD_DEADLINE.saturating_sub(elapsed));
        std::thread::sleep(left.max(Duration::from_millis(10)));
    }
    let notice = HostAnswer {
        host,
        fresh_context: false,
        answer: Answer::Notice(format!(
            "⚠ ralph: the Stop hook did not finish within {}s (a slow disk, lock or git?), so it allowed the stop; the loop may not have advanced this time.",
            deadline.as_secs()
        )),
    };
    if answer_once(&notice) {
        std::process::exit(0);
    }
}

/// `RALPH_HOOK_DEADLINE_SECS` shortens (never lengthens) the deadline.
fn deadline_from_env() -> Duration {
    std::env::var("RALPH_HOOK_DEADLINE_SECS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map_or(DEADLINE, |s| Duration::from_secs(s).min(DEADLINE))
}

/// Records which binary runs the hooks (`ralph status` says it).
fn record_hooks_binary() {
    if let (Some(registry), Ok(exe)) = (crate::env::registry(), std::env::current_exe()) {
        registry.record_hooks_binary(&ralph_control::status_text::binary_words(&exe));
    }
}

/// `ralph hook prompt | session-start | session-end`: the session hooks. Each prints nothing
/// or one JSON answer (stdout of the prompt hook would otherwise reach the model) and always
/// exits 0. Only ralph's own commands are blocked (`prompt.rs`: answered, no model turn);
/// every other prompt goes through.
pub(super) fn session(event: ralph_cli::HookCommand) -> ExitCode {
    use ralph_cli::HookCommand;
    use ralph_control::session::{self, SessionContext};
    let mut input = Vec::new();
    let answer = match std::io::stdin().read_to_end(&mut input) {
        Ok(_) => {
            let ctx = SessionContext::from_env();
            match event {
                HookCommand::Prompt => {
                    // ralph's own commands are answered here, with no model turn.
                    if let Some(reply) = super::prompt::answer(&input) {
                        let _ = std::io::stdout().write_all(reply.render().as_bytes());
                        return ExitCode::SUCCESS;
                    }
                    session::prompt(&input, &ctx)
                }
                HookCommand::SessionStart => {
                    record_hooks_binary();
                    session::start(&input, &ctx)
                }
                HookCommand::SessionEnd => session::end(&input, &ctx),
                HookCommand::StopFailure => session::stop_failure(&input, &ctx),
                HookCommand::PostCompact => session::post_compact(&input, &ctx),
                HookCommand::Stop(_) => hook::stop(&input, &ctx.env),
            }
        }
        Err(e) => ralph_core::hook::answer::Answer::Notice(format!(
            "⚠ ralph: could not read the hook event on stdin: {e}."
        )),
    };
    // A closed stdout leaves nothing to tell; the exit code stays 0 either way.
    let _ = std::io::stdout().write_all(answer.render().as_bytes());
    ExitCode::SUCCESS
}
