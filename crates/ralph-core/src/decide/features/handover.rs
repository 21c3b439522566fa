//! The hand-over a breaker leaves beside the ended loop's record: what the
//! next agent or person needs to pick the task up. Reached only through the
//! seam (`mod.rs`), and only when a turn ends the loop.

use super::Extras;
use super::checkpoints::Green;
use ralph_state::fields::outcome::Outcome;
use ralph_state::handover;
use ralph_state::lifecycle::LogEntry;
use ralph_state::storage::store;

/// A breaker's hand-over (not a budget's: the user's own bound), read
/// before the log moves into the history; `None` for any other ending.
pub(super) fn text(
    extras: &Extras<'_>,
    outcome: Outcome,
    entry: &LogEntry,
    green: &Green,
) -> Option<String> {
    let Outcome::Guard(tripped) = outcome else {
        return None;
    };
    if !handover::wanted(tripped) {
        return None;
    }
    let name = &extras.live.file.name;
    let mut log = store::read_log_tail(&extras.project.log_path(name), 200);
    log.extend(serde_json::from_str(&entry.line()).ok());
    Some(handover::render(&handover::HandoverFacts {
        name,
        state: &extras.live.state,
        tripped,
        detail: &entry.why,
        log: &log,
        last_green: green.iteration,
        checkpoints: green.kept,
    }))
}

/// Writes a breaker's hand-over beside the history record; the line that
/// says where (or why it could not be written).
pub(super) fn write(record: &std::path::Path, text: Option<String>) -> Option<String> {
    let text = text?;
    let path = record.with_extension(&handover::SUFFIX[1..]);
    Some(
        match ralph_fs::safe_fs::create_new(&path, text.as_bytes()) {
            Ok(()) => format!(
                "Hand-over for the next agent or person: {}",
                ralph_fs::display::line(&path.display().to_string())
            ),
            Err(e) => format!("The hand-over could not be written: {e}"),
        },
    )
}
