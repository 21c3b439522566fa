//! `ralph hook stop [--host NAME]`: read the event, answer in the host's
//! shape, exit 0 — whatever happens.

use std::io::Write;
use std::process::ExitCode;

use ralph_core::hook::{self, HookContext};
use ralph_core::host::Host;

pub fn stop(host: Option<Host>) -> ExitCode {
    // Parsed as it is read: a huge reply is never held twice over.
    let reply = hook::stop_reader_for_host(std::io::stdin().lock(), &HookContext::from_env(), host);
    let rendered = reply.render();
    if let ralph_core::answer::Answer::Notice(message) = &reply.answer {
        eprintln!("{}", ralph_core::display::block(message));
    }
    // A closed stdout leaves nothing to tell; the exit code stays 0 either way.
    let _ = std::io::stdout().write_all(rendered.as_bytes());
    ExitCode::SUCCESS
}
