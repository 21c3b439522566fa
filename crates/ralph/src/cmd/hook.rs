//! `ralph hook stop`: read the event, answer, exit 0 — whatever happens.

use std::io::{Read, Write};
use std::process::ExitCode;

use ralph_core::hook::{self, HookContext};

pub fn stop() -> ExitCode {
    let mut input = Vec::new();
    let answer = match std::io::stdin().read_to_end(&mut input) {
        Ok(_) => hook::stop(&input, &HookContext::from_env()),
        Err(e) => ralph_core::answer::Answer::Notice(format!(
            "⚠ ralph: could not read the Stop event on stdin: {e}. The stop was allowed."
        )),
    };
    let rendered = answer.render();
    if let ralph_core::answer::Answer::Notice(message) = &answer {
        eprintln!("{message}");
    }
    // A closed stdout leaves nothing to tell; the exit code stays 0 either way.
    let _ = std::io::stdout().write_all(rendered.as_bytes());
    ExitCode::SUCCESS
}

/// `ralph hook prompt | session-start | session-end`: the same contract as
/// the Stop hook — one answer (nothing or a `systemMessage`), exit 0.
pub fn session(event: crate::cli::HookCommand) -> ExitCode {
    use crate::cli::HookCommand;
    use ralph_core::session::{self, SessionContext};
    let mut input = Vec::new();
    let answer = match std::io::stdin().read_to_end(&mut input) {
        Ok(_) => {
            let ctx = SessionContext::from_env();
            match event {
                HookCommand::Prompt => session::prompt(&input, &ctx),
                HookCommand::SessionStart => session::start(&input, &ctx),
                HookCommand::SessionEnd => session::end(&input, &ctx),
                HookCommand::Stop => hook::stop(&input, &ctx.hook),
            }
        }
        Err(e) => ralph_core::answer::Answer::Notice(format!(
            "⚠ ralph: could not read the hook event on stdin: {e}."
        )),
    };
    // A closed stdout leaves nothing to tell; the exit code stays 0 either way.
    let _ = std::io::stdout().write_all(answer.render().as_bytes());
    ExitCode::SUCCESS
}
