//! `ralph statusline`: this session's loop in one short line, for Claude
//! Code's `statusLine` setting; built by `ralph_control::statusline`,
//! which only reads (and keeps the plan's 5-hour window it was shown).

use std::io::Read;

use ralph_state::storage::environment::Environment;
use ralph_state::time::Timestamp;

pub(super) fn statusline() -> crate::exit::CmdResult {
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    let ctx = Environment::from_env();
    let session = crate::env::session_from_env();
    let shown = ralph_control::statusline::statusline(&input, ctx, session, Timestamp::now());
    if let Some(line) = shown {
        say!("{line}");
    }
    Ok(())
}
