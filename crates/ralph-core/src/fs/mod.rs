//! The system edge every other module goes through: the safe file layer
//! (`safe_fs`), child processes (`process`), the gates' runner (`gate`), and
//! git, hardened (`git`, `git_config`), and the work tree's checkpoints
//! (`checkpoint`).

pub mod checkpoint;
pub mod gate;
pub mod gate_box;
pub mod git;
pub mod git_config;
pub mod git_runner;
pub mod process;
pub mod safe_fs;
pub mod tree_diff;
