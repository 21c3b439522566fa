//! `--fresh-via run`: after the wrap-up turn's stop paused the loop for a
//! fresh context, a detached `ralph run --name NAME` is started to take it
//! over (`ralph run` adopts a paused loop of this machine and resumes it),
//! instead of waiting for the user's `/clear`. The run leads its own process
//! group, its streams go nowhere (its record is the decision log and `ralph
//! status`), and the hook does not wait for it.

use ralph_state::fields::state::{FRESH_WAITING, FRESH_WRAP_UP, LoopState};
use ralph_state::lifecycle::Loop;
use ralph_state::messages;
use ralph_state::storage::store::{self, Project};

/// Whether this stop may be the one that ends a `--fresh-via run` wrap-up
/// (checked again against the file once the stop is written).
pub(super) fn due(state: &LoopState) -> bool {
    state.fresh_via_run
        && state.fresh_at.is_some()
        && state.active
        && state.progress.fresh_stage == FRESH_WRAP_UP
}

/// Starts the run when the loop file now says the wrap-up paused it (not a
/// wait for background work); the user's line, or `None` to keep the
/// stop's own notice.
pub(super) fn start_run(project: &Project, live: &Loop) -> Option<String> {
    let text = store::read_to_string(&live.file.path).ok()?;
    let now = LoopState::parse(&text).ok()?;
    if now.active || now.progress.fresh_stage != FRESH_WAITING {
        return None;
    }
    let started = ralph_fs::process::this_program().and_then(|mut command| {
        command
            .args(["run", "--name", live.file.name.as_str()])
            .current_dir(&project.root)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command.spawn()
    });
    Some(match started {
        // Not waited for: it outlives this hook by design, and init reaps it.
        Ok(child) => messages::fresh_run_started(&live.file.name, &now, child.id()),
        Err(e) => messages::fresh_run_failed(&live.file.name, &now, &e.to_string()),
    })
}
