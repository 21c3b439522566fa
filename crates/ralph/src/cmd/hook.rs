//! `ralph hook stop`: read the event, answer, exit 0 — whatever happens.

use std::io::Write;
use std::process::ExitCode;

use ralph_core::hook::{self, HookContext};

pub fn stop() -> ExitCode {
    // Parsed as it is read: a huge reply is never held twice over.
    let answer = hook::stop_reader(std::io::stdin().lock(), &HookContext::from_env());
    let rendered = answer.render();
    if let ralph_core::answer::Answer::Notice(message) = &answer {
        eprintln!("{}", ralph_core::display::block(message));
    }
    // A closed stdout leaves nothing to tell; the exit code stays 0 either way.
    let _ = std::io::stdout().write_all(rendered.as_bytes());
    ExitCode::SUCCESS
}
