//! ralph's fronts other than the Stop hook: what the CLI's commands do to
//! loops, and the session, prompt and status-line hooks. Internal to ralph:
//! its API is the `ralph` command and the plugin, not this crate; `pub`
//! here names only what another of ralph's crates uses.
//!
//! What the CLI's commands do to a project's loops: arm, cancel, pause,
//! resume and adopt them (`commands`, every change under the project lock,
//! with atomic writes, so a command racing a Stop hook never loses an update
//! or revives a loop); list them for `ralph status` and `ralph log`
//! (`report`, which changes nothing, worded by `status_text`) and the
//! receipts kept for them (`receipt_text`); `ralph start`'s options as a
//! slash command gives them (`arguments`), turned into a request, and what
//! arming tells (`arming`); what cancelling, pausing and resuming tell
//! (`cancel_pause`); a checkpoint put back (`rollback`); an ended loop given more
//! (`revive`); `ralph init`'s files (`templates`, written by `init`); the
//! commands a loop would run that the user did not type, and their approval
//! (`approval`); `ralph prd lint` and `ralph prd import` on a file (`prd_file`); a loop
//! `ralph run` drove found deleted or edited by no ralph command after its agent's turn
//! (`tamper`). The hooks other than Stop: `session` (the prompt, session
//! start and end, `StopFailure` and `PostCompact` hooks, with their pure
//! `session::rules`), `typed` (a ralph command the user typed), and
//! `statusline`.

pub mod adoption;
pub mod approval;
pub mod arguments;
pub mod arming;
pub mod cancel_pause;
pub mod commands;
pub mod guidance;
pub mod init;
pub mod listing;
pub mod prd_file;
pub mod receipt_text;
pub mod revive;
pub mod rollback;
pub mod session;
pub mod status_text;
pub mod statusline;
pub mod tamper;
pub(crate) mod templates;
pub mod typed;

pub use commands::*;
pub use listing::{LoopReport, not_armed_note, report};

/// What other crates' tests build on (the `test-support` feature).
#[cfg(any(test, feature = "test-support"))]
pub use ralph_state::test_support;
