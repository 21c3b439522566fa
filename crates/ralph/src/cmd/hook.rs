//! `ralph hook stop [--host NAME]`: read the event, answer in the host's
//! shape, exit 0 — whatever happens.

use std::io::{Read, Write};
use std::process::ExitCode;

use ralph_core::hook::{self, HookContext};
use ralph_core::host::Host;

pub fn stop(host: Option<Host>) -> ExitCode {
    let mut input = Vec::new();
    let reply = match std::io::stdin().read_to_end(&mut input) {
        Ok(_) => hook::stop_for_host(&input, &HookContext::from_env(), host),
        Err(e) => hook::HostAnswer {
            answer: ralph_core::answer::Answer::Notice(format!(
                "⚠ ralph: could not read the Stop event on stdin: {e}. The stop was allowed."
            )),
            host: host.unwrap_or(Host::Claude),
            fresh_context: false,
        },
    };
    let rendered = reply.render();
    if let ralph_core::answer::Answer::Notice(message) = &reply.answer {
        eprintln!("{message}");
    }
    // A closed stdout leaves nothing to tell; the exit code stays 0 either way.
    let _ = std::io::stdout().write_all(rendered.as_bytes());
    ExitCode::SUCCESS
}
