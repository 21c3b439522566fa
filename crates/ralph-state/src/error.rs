//! Why a loop file could not be read, rewritten, written or adopted, or a
//! turn not completed (`decide::engine`): the one error of the loop-file
//! layer (`lifecycle`, `rewrite`). Whatever went wrong, the file is left as
//! it was. Each refusal names the file, so a front
//! passes this error on as it is, with no path or words of its own.

use std::path::PathBuf;

use crate::fields::state::StateError;
use crate::fields::stories::PrdError;
use crate::storage::registry::{NONCE_FIELD, RegistryError};
use crate::storage::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum LoopFileError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The arming record could not be read or written (an adoption).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The file was read but does not parse as a loop.
    #[error("{path}: {source}")]
    Parse { path: PathBuf, source: StateError },
    /// A rewrite's new text no longer parses: nothing was written.
    #[error("{path}: the file no longer reads as a loop: {source}")]
    NoLongerALoop { path: PathBuf, source: StateError },
    #[error(
        "{path}: after rewriting, field `{field}` would read `{found}` instead of `{expected}`, so nothing was written; write it as `{field}: …` on a line of its own"
    )]
    NotReadBack {
        path: PathBuf,
        field: &'static str,
        expected: String,
        found: String,
    },
    #[error(
        "{path}: rewriting other fields would change field `{field}` (from `{before}` to `{after}`), so nothing was written; write it as `{field}: …` on a line of its own"
    )]
    SideEffect {
        path: PathBuf,
        field: &'static str,
        before: String,
        after: String,
    },
    #[error("{path}: rewriting the fields would change the prompt, so nothing was written")]
    BodyChanged { path: PathBuf },
    /// A `--prd` loop's PRD cannot be read or used at a turn; the loop is
    /// left as it was.
    #[error("{0}; fix it and the loop goes on at the next stop")]
    Prd(#[from] PrdError),
    /// An adoption's new nonce did not read back from the rewritten text.
    #[error("{path}: the `{NONCE_FIELD}` field did not read back; nothing was adopted")]
    NonceLost { path: PathBuf },
}

impl ralph_fs::error::Exit for LoopFileError {}
