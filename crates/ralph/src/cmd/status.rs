//! `ralph status | log`: what the project's loops are and what they did.
//! Reads only (`ralph_control::listing`); the lines are
//! `control::status_text`'s, every value from a loop file shown escaped.

use ralph_control::listing::{self, LogChoice};
use ralph_control::status_text;
use ralph_state::storage::registry::Registry;
use ralph_state::time::Timestamp;

use crate::exit::CmdResult;
use ralph_cli::{LogArgs, StatusArgs};

pub(super) fn status(args: StatusArgs) -> CmdResult {
    let project = crate::env::project();
    let registry = crate::env::registry();
    let mut reports = listing::report(
        &project,
        registry.as_ref(),
        args.history,
        3,
        Timestamp::now(),
    )?;
    listing::attach_receipts(&project, registry.as_ref(), &mut reports);
    if args.json {
        let value = status_text::status_json(&project, &reports);
        say_json!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    for line in status_text::status(&project, &reports, ralph_report::page_hint) {
        say!("{line}");
    }
    let this = std::env::current_exe().map(|e| status_text::binary_words(&e));
    let recorded = registry.as_ref().and_then(Registry::hooks_binary);
    say!(
        "{}",
        status_text::hooks_binary_line(recorded.as_deref(), this.ok().as_deref())
    );
    Ok(())
}

pub(super) fn log(args: LogArgs) -> CmdResult {
    let project = crate::env::project();
    let session = crate::env::session_from_env();
    let choice = listing::choose_log(
        &project,
        args.name.as_deref(),
        session.as_deref(),
        Timestamp::now(),
    )?;
    let Some(choice) = choice else {
        say!("{}", status_text::NOTHING_LOGGED);
        return Ok(());
    };
    let text = status_text::log_text(&project, &choice);
    // A linked logs folder is never read (the report's path is empty then).
    let log = match &choice {
        LogChoice::Loop(report) => &report.log,
        LogChoice::Orphan(log) => log,
    };
    let lines = ralph_state::storage::store::read_log_tail(log, usize::MAX);
    if !args.json {
        say!("{}", text.header);
    }
    for line in &lines {
        if args.json {
            say_json!("{line}");
        } else {
            say!("{}", status_text::log_line(line));
        }
    }
    if let Some(empty) = text.when_empty.filter(|_| lines.is_empty() && !args.json) {
        say!("{empty}");
    }
    Ok(())
}
