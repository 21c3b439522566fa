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
//! (`tamper`).

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
pub mod status_text;
pub mod tamper;
pub(crate) mod templates;

pub use commands::*;
pub use listing::{LoopReport, not_armed_note, report};

/// What other crates' tests build on (the `test-support` feature, on in
/// their dev-dependencies only).
#[allow(clippy::unwrap_used, clippy::missing_panics_doc)] // test scaffolding: a failure is the test's
#[cfg(any(test, feature = "test-support"))]
pub mod test_support {
    /// A project (with its `.claude/`) and a registry of its own in a temporary
    /// folder, for this folder's unit tests; the folder lives as long as the guard.
    pub fn project() -> (
        tempfile::TempDir,
        crate::loop_file::storage::store::Project,
        crate::loop_file::storage::registry::Registry,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("p/.claude")).unwrap();
        let project = crate::loop_file::storage::store::Project {
            root: tmp.path().join("p"),
        };
        let registry =
            crate::loop_file::storage::registry::locate(Some(&tmp.path().join("state")), None)
                .unwrap();
        (tmp, project, registry)
    }
}
