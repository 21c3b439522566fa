//! The system edge every other crate goes through: the safe file layer
//! (`safe_fs`), child processes (`process`), the gates' runner (`gate`, in
//! its box, `gate_box`, and its sandbox, `gate_jail`), git, hardened (`git_runner`, `git_config`, `git`),
//! the work tree's checkpoints and snapshots (`checkpoint`, `tree_diff`), and
//! the snapshot a gate runs in (`gate_tree`).
//! Beside them the leaves they share: escaping what is printed (`display`),
//! the exit class of every error (`error`), stable hashes (`fingerprint`) and a
//! failing check's fingerprint and count (`failure`).
//!
//! Internal to ralph: its API is the `ralph` command and the plugin, not this
//! crate; `pub` here names only what another of ralph's crates uses.

pub mod checkpoint;
pub mod display;
pub mod error;
pub mod failure;
pub mod fingerprint;
pub mod gate;
pub mod gate_box;
pub mod gate_jail;
pub mod gate_tree;
pub mod git;
pub mod git_config;
pub mod git_runner;
mod index_tree;
mod object_check;
pub mod one_staging;
mod own_staging;
pub mod process;
pub mod safe_fs;
mod same_second;
mod status_staging;
pub mod tree_diff;
