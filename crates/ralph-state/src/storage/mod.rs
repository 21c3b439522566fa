//! Where loops and their records live: the project's loop files, their
//! lock and history (`store`), the per-user record of armed loops
//! (`registry`), the receipts of passed gates (`receipt`), a loop's
//! work-tree checkpoints (`checkpoints`), the plan's usage window as the
//! status line last saw it (`window`), the environment a command works
//! from (`environment`), and a `--parallel` fleet's worktrees and story
//! records (`fleet`).

pub mod checkpoints;
pub mod environment;
pub mod fleet;
pub mod guidance;
pub mod receipt;
pub mod registry;
pub mod store;
pub mod window;
