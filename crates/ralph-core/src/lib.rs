//! ralph's logic: the loop state, the promise, the Stop-hook decision and
//! the files they live in. The `ralph` binary is a thin shell over this.

pub mod agent;
pub mod agent_presets;
pub mod answer;
pub mod arguments;
pub mod decide;
pub mod display;
pub mod driver;
pub mod engine;
pub mod event;
pub mod fanout;
pub mod fanout_git;
pub mod frontmatter;
pub mod hook;
pub mod host;
pub mod host_install;
pub mod lifecycle;
pub mod loops;
pub mod messages;
pub mod ownership;
pub mod prd;
pub mod process;
pub mod promise;
pub mod registry;
pub mod rewrite;
pub mod run_loop;
pub mod safe_fs;
pub mod session;
pub mod state;
pub mod store;
pub mod templates;
pub mod time;
pub mod transcript;
pub mod typed;
pub mod verify;
pub mod worktree;
