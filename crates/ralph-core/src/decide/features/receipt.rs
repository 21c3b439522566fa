//! A receipt: what a completion through a passing `--verify` gate leaves in
//! the per-user store (`ralph receipt`). Reached only through the seam
//! (`mod.rs`), and only when a turn ends the loop.

use super::Extras;
use super::paths;
use crate::decide::Observation;
use ralph_state::storage::receipt;
use ralph_state::time::Timestamp;

/// The receipt's line for the notice, or why it could not be kept; `None`
/// when no gate passed. Best effort: the loop has ended either way.
pub(super) fn keep(
    extras: &Extras<'_>,
    seen: &Observation,
    output: Option<Vec<u8>>,
    record: &std::path::Path,
    now: Timestamp,
) -> Option<String> {
    let live = extras.live;
    let verdict = seen.verification.as_ref().filter(|v| v.passed)?;
    let command = live.state.guards.verify.as_deref()?;
    let receipt = receipt::build(receipt::Passed {
        name: &live.file.name,
        root: &extras.project.root,
        command,
        verdict,
        output,
        iteration: live.state.iteration,
        record,
        now: now.to_string(),
        paths: paths::held(&live.state, seen),
        gate: seen.gate_ran.clone(),
    });
    let line = receipt::one_line(&receipt);
    Some(match extras.registry.map(|r| receipt::save(r, &receipt)) {
        Some(Ok(_)) => line,
        Some(Err(e)) => format!("{line} (not kept: {e})"),
        None => format!("{line} (not kept: no per-user state folder)"),
    })
}
